"""The assistant mask by binary search equals transformers' one-pass rule wherever it is used.

``tokens._overlap_mask`` takes a binary-search path when token offsets and spans are in order;
generated offsets (in order, with repeats and zero-width tokens, and out of order) and spans
(apart, touching, overlapping, out of order) check it against the one-pass rule itself.
"""

from __future__ import annotations

from typing import List, Tuple

from hypothesis import given, settings, strategies as st

from minijinja_py.chat import tokens


def _one_pass(offsets: List[Tuple[int, int]], spans: List[Tuple[int, int]]) -> List[int]:
    mask = [0] * len(offsets)
    span_index = 0
    for index, (start, end) in enumerate(offsets):
        while span_index < len(spans) and start >= spans[span_index][1]:
            span_index += 1
        if span_index == len(spans):
            break
        if end > spans[span_index][0]:
            mask[index] = 1
    return mask


@st.composite
def _offsets(draw: st.DrawFn) -> List[Tuple[int, int]]:
    widths = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=40))
    position, result = 0, []
    for gap, width in widths:
        position += gap
        result.append((position, position + width))
        if draw(st.booleans()):
            position += width
    if draw(st.booleans()):
        result = draw(st.permutations(result))
    return result


SPANS = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)).map(
    lambda pair: (pair[0], pair[0] + pair[1])), max_size=5)


@settings(max_examples=800, deadline=None)
@given(offsets=_offsets(), spans=SPANS, sort=st.booleans())
def test_search_equals_the_one_pass_rule(offsets: List[Tuple[int, int]],
                                         spans: List[Tuple[int, int]], sort: bool) -> None:
    if sort:
        spans = sorted(spans)
    assert tokens._overlap_mask(list(offsets), spans) == _one_pass(list(offsets), spans)

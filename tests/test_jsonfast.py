"""jsonfast.plain_dumps makes exactly json.dumps' text and exactly the sandbox's size bound.

Generated data (hypothesis) with every option ``tojson`` passes on: the text must equal
``json.dumps``; the bound must equal filters._tree_text_size, so a render is charged the same
steps either way; anything it leaves to the general path (shared containers, non-str keys,
subclasses, huge ints, bad options, data over the size limit) must come back as None.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import minijinja_py as mj
from minijinja_py.runtime.filters import common as filters, tojson as jsonfast
from minijinja_py.runtime.filters.tojson import plain_dumps

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
SCALARS = st.one_of(TEXT, st.integers(-10 ** 30, 10 ** 30), st.booleans(), st.none(),
                    st.floats(allow_nan=True, allow_infinity=True))
DATA = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, min_size=1, max_size=3).map(tuple),  # () is shared
    st.dictionaries(TEXT, inner, max_size=4)), max_leaves=25)
INDENTS = st.one_of(st.integers(-1, 4), st.sampled_from(["", "\t", "--"]))
SEPARATORS = st.one_of(st.none(), st.sampled_from([(",", ":"), (", ", ": "), (";", "=")]))


def _bound(value: Any, ensure_ascii: bool, indent: Any, separators: Any) -> int:
    width = len(indent) if isinstance(indent, str) else max(indent, 0)
    item_sep, key_sep = (len(part) for part in (separators or (",", ": ")))
    return filters._tree_text_size(value, 100, item_sep + key_sep, width, ensure_ascii)


@settings(max_examples=400, deadline=None)
@given(value=DATA, ensure_ascii=st.booleans(), indent=INDENTS, separators=SEPARATORS,
       sort_keys=st.booleans())
def test_text_and_bound_equal_the_references(value: Any, ensure_ascii: bool, indent: Any,
                                             separators: Any, sort_keys: bool) -> None:
    width = len(indent) if isinstance(indent, str) else max(indent, 0)
    made = plain_dumps(value, ensure_ascii, indent, separators, sort_keys, width, 100,
                       math.inf)
    assert made is not None
    text, bound = made
    assert text == json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)
    assert bound == _bound(value, ensure_ascii, indent, separators)


class Sub(dict):
    pass


SHARED = [1, 2]


@pytest.mark.parametrize("value", [
    {"a": SHARED, "b": SHARED},  # one list twice: may print far larger than it is
    [(), ()],  # the empty tuple is one object: the sandbox's walk sees it twice too
    {1: "int key"}, {None: 1}, Sub(a=1), [2 ** 2000], [mj.Markup("<b>")],
    {"deep": [[[[[[[[[[[[1]]]]]]]]]]]]},
])
def test_the_general_path_decides_the_rest(value: Any) -> None:
    assert plain_dumps(value, False, 2, None, False, 2, 8, math.inf) is None


def test_bad_options_are_left_to_json_dumps() -> None:
    assert plain_dumps([1], False, 2.5, None, False, 2, 100, math.inf) is None
    assert plain_dumps([1], False, 2, ("a",), False, 2, 100, math.inf) is None
    assert plain_dumps({"a": 1, "b": 2}, False, 2, None, False, 2, 100, 10) is None  # limit


def test_tojson_with_indent_matches_jinja2_and_charges_the_same() -> None:
    """Through a template: the output equals json.dumps, and the smallest step budget the
    render fits in is the same with the one-walk path as with the general one."""
    tools = [{"type": "function", "function": {"name": "f", "description": "é ünïcode",
              "parameters": {"type": "object", "properties": {"x": {"type": "integer"}},
                             "required": ["x"]}}}] * 1
    source = "{% for t in tools %}{{ t | tojson(indent=4) }}{% endfor %}"
    expected = json.dumps(tools[0], ensure_ascii=False, indent=4)
    assert mj.chat_environment().from_string(source).render(tools=tools) == expected

    def smallest(fast: bool) -> int:
        low, high = 0, 10_000
        while low < high:
            middle = (low + high) // 2
            env = mj.chat_environment(limits=mj.Limits(max_steps=middle))
            original = jsonfast.plain_dumps  # (do_tojson imports it from there per call)
            if not fast:
                jsonfast.plain_dumps = lambda *args: None  # type: ignore[assignment]
            try:
                env.from_string(source).render(tools=tools)
                high = middle
            except mj.LimitExceededError:
                low = middle + 1
            finally:
                jsonfast.plain_dumps = original  # type: ignore[assignment]
        return low

    assert smallest(True) == smallest(False)


class Opaque:
    pass


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(DATA, st.dictionaries(st.one_of(TEXT, st.integers(), st.none()), DATA,
                                              max_size=3),
                       st.lists(st.just(Opaque()), max_size=1)),
       ensure_ascii=st.booleans(), sort_keys=st.booleans())
def test_tojson_without_indent_is_json_dumps(value: Any, ensure_ascii: bool,
                                             sort_keys: bool) -> None:
    """Without an indent, tojson calls the C encoder json.dumps would run, made directly:
    the same text, or the same error (unserialisable values, unsortable keys)."""
    def outcome(dump: Any) -> Any:
        try:
            return dump()
        except (TypeError, ValueError) as exc:
            return type(exc).__name__, str(exc)

    expected = outcome(lambda: json.dumps(value, ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                                          default=filters._json_default))
    assert outcome(lambda: filters._c_json_dumps(value, ensure_ascii, sort_keys)) == expected


def test_tojson_without_indent_still_refuses_cycles() -> None:
    looped: list = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference detected"):
        filters._c_json_dumps(looped, False, False)


def _nested(depth: int) -> Any:
    value: Any = ["leaf", {"k": 1}]
    for level in range(depth):
        value = {"level": level, "items": [value, "x"]} if level % 2 else [value, {}]
    return value


@pytest.mark.parametrize("depth", [3, 17, 40])
@pytest.mark.parametrize("indent", [2, "\t", 20, "-" * 17, 0, ""])
def test_deep_data_and_long_indents_equal_the_references(depth: int, indent: Any) -> None:
    """Past the depths and indent lengths whose line breaks are made once and kept."""
    value = _nested(depth)
    width = len(indent) if isinstance(indent, str) else max(indent, 0)
    for _ in range(2):  # the second time with what the first one kept
        made = plain_dumps(value, False, indent, None, False, width, 100, math.inf)
        assert made is not None
        assert made[0] == json.dumps(value, ensure_ascii=False, indent=indent)
        assert made[1] == _bound(value, False, indent, None)

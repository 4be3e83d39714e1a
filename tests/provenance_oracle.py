"""An oracle for provenance renders that does not trust the implementation.

For each input string leaf, the template is rendered again (with the ordinary render path)
with that leaf replaced by a different string of the same length; every output character that
changes must be attributed to that leaf (verbatim or derived), so characters attributed to the
template or to other inputs never change. Separately, with every *other* leaf replaced, the
characters attributed verbatim to the leaf must stay as they were.

Two replacements per leaf:
- "letters": each letter and digit becomes a different one of its kind (punctuation, spaces
  and escapes stay, so JSON escaping and line structure keep their lengths);
- "all": every character changes (used when the output keeps its length; otherwise the
  changed characters are found with a diff).

When the output keeps its length, characters are compared position by position. Two length
changes can cancel out, though (a ``trim`` that now keeps a space, a JSON escape that is now a
letter): the characters between them then shift and compare unequal without having changed.
So a position that changed is only a failure when the text that must stay (the characters not
attributed to the leaf) cannot be found again in the new output, segment after segment, in
order, with only the leaf's characters between them (:func:`_kept_in_order`); that test needs no
alignment, so a real misattribution, whose "kept" characters changed, still fails it.

Leaves under the keys ``role``, ``type`` and ``required`` are not replaced: they are
discriminators, which choose the template's branch (another role writes other template text;
a tool schema's ``required`` names decide whether a parameter is written as optional), so a
change there legitimately changes template text. Render failures of a replaced input count as "branching"
and are reported, not hidden.
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Tuple

DISCRIMINATOR_KEYS = frozenset({"role", "type", "required"})


def _key_path(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}" if path else key
    shown = json.dumps(key, ensure_ascii=False) if isinstance(key, str) else repr(key)
    return f"{path}[{shown}]"


def string_leaves(variables: Dict[str, Any]) -> List[Tuple[str, Tuple[Any, ...]]]:
    """(path, steps) of every non-empty str value, discriminators excepted; ``steps`` are
    the keys and indexes leading to it from the variables."""
    found: List[Tuple[str, Tuple[Any, ...]]] = []

    def walk(value: Any, path: str, steps: Tuple[Any, ...]) -> None:
        if isinstance(value, str):
            if value:
                found.append((path, steps))
        elif isinstance(value, dict):
            for key, item in value.items():
                if key in DISCRIMINATOR_KEYS:
                    continue
                walk(item, _key_path(path, key), steps + (key,))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]", steps + (index,))

    for name, value in variables.items():
        walk(value, name, (name,))
    return found


def _swap_letters(text: str) -> str:
    out = []
    for char in text:
        if "a" <= char <= "y" or "A" <= char <= "Y" or "0" <= char <= "8":
            out.append(chr(ord(char) + 1))
        elif char in "zZ9":
            out.append({"z": "a", "Z": "A", "9": "0"}[char])
        elif char.isalpha():
            out.append("q" if char != "q" else "p")
        else:
            out.append(char)
    return "".join(out)


def _swap_all(text: str) -> str:
    return "".join("b" if char == "a" else "a" for char in text)


def _replaced(variables: Dict[str, Any], edits: List[Tuple[Tuple[Any, ...], Callable[[str], str]]]
              ) -> Dict[str, Any]:
    result = copy.deepcopy(variables)
    for steps, change in edits:
        container: Any = result
        for step in steps[:-1]:
            container = container[step]
        last = steps[-1]
        if isinstance(container, tuple):
            raise TypeError("tuples are not replaced")
        container[last] = change(container[last])
    return result


def _changed_positions(before: str, after: str) -> List[int]:
    if len(before) == len(after):
        return [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    positions: List[int] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            positions.extend(range(i1, i2))
        elif tag == "insert":
            # text inserted between two original characters: both neighbours must belong to
            # the leaf (or the insertion sits at a run's edge: the neighbour inside counts)
            pass
    return positions


def _kept_in_order(before: str, after: str, may_change: List[bool]) -> bool:
    """Whether the characters of ``before`` that may not change (``may_change`` False), taken
    as maximal segments, appear in ``after`` in order, each segment whole, separated by
    anything (what may change may also grow, shrink or vanish). The first segment is anchored
    at the start when ``before`` starts with it, the last at the end likewise."""
    segments: List[Tuple[int, int]] = []  # [start, end) of each fixed segment in ``before``
    start = None
    for position, free in enumerate(may_change):
        if not free and start is None:
            start = position
        elif free and start is not None:
            segments.append((start, position))
            start = None
    if start is not None:
        segments.append((start, len(before)))
    if not segments:
        return True
    cursor = 0
    last = len(segments) - 1
    for index, (low, high) in enumerate(segments):
        piece = before[low:high]
        if index == last and high == len(before):
            # anchored at the end: it must fit after what came before it
            return after.endswith(piece) and len(after) - len(piece) >= cursor and \
                (index > 0 or low > 0 or after == piece)
        if index == 0 and low == 0:
            if not after.startswith(piece):
                return False
            cursor = len(piece)
            continue
        found = after.find(piece, cursor)
        if found < 0:
            return False
        cursor = found + len(piece)
    return True


@dataclass
class OracleReport:
    leaves: int = 0
    checks: int = 0
    branching: int = 0  # replaced inputs whose render failed (counted, not checked)
    moved: int = 0  # replacements that changed the output's length (counted, not checked)
    failures: List[str] = field(default_factory=list)


def check(render: Callable[[Dict[str, Any]], str], variables: Dict[str, Any], result: Any,
          report: OracleReport, label: str = "") -> None:
    """Check ``result`` (a ProvenanceResult of ``variables``) against plain re-renders."""
    text = result.text
    runs = result.runs
    owners: List[Tuple[str, ...]] = [()] * len(text)
    verbatim: Dict[str, List[Tuple[int, int]]] = {}
    for run in runs:
        origin = run.origin
        if origin.kind == "input":
            paths: Tuple[str, ...] = (origin.path,)
            verbatim.setdefault(origin.path, [])
            for position in range(run.start, run.end):
                verbatim[origin.path].append((position, origin.offset + position - run.start))
        elif origin.kind == "derived":
            paths = origin.paths
        elif origin.kind == "unknown":
            paths = ("?",)
        else:
            paths = ()
        for position in range(run.start, run.end):
            owners[position] = paths
    leaves = string_leaves(variables)
    values = {path: _get(variables, steps) for path, steps in leaves}
    report.leaves += len(leaves)

    # a verbatim run really copies its leaf
    for path, positions in verbatim.items():
        value = values.get(path) if path in values else _lookup(variables, path)
        if not isinstance(value, str):
            continue
        for position, offset in positions:
            if value[offset:offset + 1] != text[position]:
                report.failures.append(f"{label}: char {position} {text[position]!r} claims "
                                       f"{path}[{offset}] = {value[offset:offset + 1]!r}")
                break

    for path, steps in leaves:
        for change in (_swap_letters, _swap_all):
            if change(values[path]) == values[path]:
                continue
            try:
                after = render(_replaced(variables, [(steps, change)]))
            except Exception:
                report.branching += 1
                continue
            if len(after) != len(text):
                # escaping or a branch changed lengths: positions are not comparable one to
                # one, and a diff's alignment of repeated text is a guess
                report.moved += 1
                continue
            report.checks += 1
            for position in _changed_positions(text, after):
                if path not in owners[position]:
                    if _kept_in_order(text, after, [path in owner for owner in owners]):
                        break  # shifted by two length changes that cancel out, not changed
                    report.failures.append(
                        f"{label}: replacing {path} ({change.__name__}) changed char "
                        f"{position} {text[position]!r}, attributed to {owners[position] or 'template'}")
                    break
        # the other leaves replaced: what is verbatim from this leaf stays
        others = [(other_steps, _swap_letters) for other, other_steps in leaves if other != path]
        if not others or path not in verbatim:
            continue
        try:
            after = render(_replaced(variables, others))
        except Exception:
            report.branching += 1
            continue
        report.checks += 1
        if len(after) != len(text):
            continue  # the other inputs moved things: the positions are not comparable
        for position, _ in verbatim[path]:
            if after[position] != text[position]:
                kept = [True] * len(text)
                for verbatim_position, _ in verbatim[path]:
                    kept[verbatim_position] = False
                if _kept_in_order(text, after, kept):
                    break  # shifted by length changes that cancel out
                report.failures.append(f"{label}: with the other leaves replaced, char "
                                       f"{position} (verbatim from {path}) changed")
                break


def _get(variables: Dict[str, Any], steps: Tuple[Any, ...]) -> Any:
    value: Any = variables
    for step in steps:
        value = value[step]
    return value


def _lookup(variables: Dict[str, Any], path: str) -> Any:
    for leaf_path, steps in string_leaves(variables):
        if leaf_path == path:
            return _get(variables, steps)
    return None

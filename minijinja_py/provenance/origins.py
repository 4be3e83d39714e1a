"""Provenance: which input, or which piece of template text, wrote each output character.

A provenance render (:meth:`Template.render_with_provenance`) runs the template compiled a
second time by :class:`compiler.ProvenanceCompiler`, over a copy of the variables in
which every string is a :class:`PStr` and every number a :class:`PInt` / :class:`PFloat`: values
that behave exactly like ``str``, ``int`` and ``float`` and also carry where their characters came
from. The template's own string constants and text become PStr too (origin "template", with
line and column). Operations keep the origins of what they copy:

- ``+``, ``~``, ``*``, slices, iteration, ``%`` and ``format``, and the str methods that copy
  text (``strip``, ``split``, ``replace``, ``join``, ``partition`` ...) map each result
  character to the character it copies ("input" with the offset in that input string, or
  "template" with the literal's position);
- a transformation (case change, JSON escaping, number printing ...) marks what it makes as
  "derived" from the input paths it read, per character where the transformation keeps
  lengths;
- anything else an operation returns from tainted operands is "derived" from all of them: an
  operation this module does not know can only make origins coarser, never lose them. A str
  with no origins at all reaching the output (some runtime object made it) is "unknown".

The plain render path never sees these classes: it is compiled separately and pays nothing.
Booleans and None cannot be subclassed in Python, so they carry no origin of their own; read
out of an input and printed, they count as template text (see docs/provenance.md, "What is not
tracked").

Why one module of this size: the value classes (PStr, PMarkup, PInt, PFloat), the tracers of
the filters and methods that copy text, and the results' settling all read and write one
private representation of origins (runs, their merging and shifting); split, it would be
public between modules. The compiler side is in compiler.py (beside this), the chat layer's uses
of it in chat/.
"""

from __future__ import annotations

import json
import operator
import re
from bisect import bisect_right

from ..guard.prices import (ITEMS_SHIFT, PROVENANCE_PART_STEPS, PROVENANCE_RUN_STEPS,
                            PROVENANCE_STR_STEPS)
from ..exceptions import TemplateError
from ..guard.limits import charge, check_deadline
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

__all__ = ["Origin", "Run", "ProvenanceResult", "PStr", "PInt", "PFloat", "wrap_variables",
           "template_string", "runs_of", "join_pieces", "settle", "UNKNOWN_PATH"]

#: The path a "derived" origin names when part of it came from a str without origins.
UNKNOWN_PATH = "?"

# A source, as held inside runs (tuples, cheap to compare):
#   ("template", line, column)   a literal of the template (offset: within the literal, or -1
#                                when the text was computed from literals)
#   ("input", path)              an input string copied verbatim (offset: within that string)
#   ("derived", frozenset(paths)) made from those inputs by a transformation (offset -1)
# A run is (start, end, source, offset), the offset being that of the run's first character.
_DERIVED = "derived"
_INPUT = "input"
_TEMPLATE = "template"
_UNKNOWN_SOURCE = (_DERIVED, frozenset((UNKNOWN_PATH,)))
#: Text computed by the template from no input at all (numbers it counted, a bool it printed).
_COMPUTED = (_TEMPLATE, 0, 0)
#: Runs a str may keep without paying for them: what one ordinary operation makes.
_FREE_RUNS = 16
#: Loops that make a record per item charge every this many plus one items.
_CHECK_EVERY = 1023


class Origin:
    """Where a run of output characters came from (see :class:`Run`).

    ``kind`` says which fields are set:

    - ``"template"``: the template's own text or a string constant; ``line`` and ``column``
      locate it in the source and ``offset`` is the position inside it. ``offset`` is None
      (and ``line`` 0 when no literal went in) for text the template computed from literals
      alone (``{{ loop.index }}``, ``'ab'|upper``);
    - ``"input"``: a verbatim copy of the input string at ``path`` (``messages[3].content``,
      ``tools[0].function.name``, ``bos_token``; a dict key's own characters are
      ``path{"key"}``) from its character ``offset``;
    - ``"derived"``: made from the inputs ``paths`` by a transformation (a case change, JSON
      escapes, a filter that does not say which character came from where);
    - ``"unknown"``: no record was kept (a runtime object made it); treat it as input.

    ``repr()`` is short: ``template 1:24 +0``, ``input messages[0].content[1:]``,
    ``derived from messages[0].content``.
    """

    __slots__ = ("kind", "path", "offset", "paths", "line", "column")

    def __init__(self, kind: str, path: Optional[str] = None, offset: Optional[int] = None,
                 paths: Tuple[str, ...] = (), line: Optional[int] = None,
                 column: Optional[int] = None) -> None:
        self.kind = kind
        self.path = path
        self.offset = offset
        self.paths = paths
        self.line = line
        self.column = column

    def as_dict(self) -> Dict[str, Any]:
        """The fields that are set, by name (``kind`` always), ready for JSON."""
        return {name: getattr(self, name) for name in self.__slots__
                if getattr(self, name) not in (None, ())}

    def __repr__(self) -> str:
        if self.kind == "input":
            return f"input {self.path}[{self.offset}:]"
        if self.kind == "template":
            at = "" if self.offset is None else f" +{self.offset}"
            return f"template {self.line}:{self.column}{at}"
        return f"{self.kind} from {', '.join(self.paths)}"


class Run:
    """Output characters ``[start, end)`` and their origin.

    ``origin.kind`` is ``"template"`` (the template's own text or string constants, or text it
    computed from them alone: ``line``/``column`` locate the literal, ``offset`` is the
    position inside it when copied verbatim), ``"input"`` (a verbatim copy of
    ``origin.path`` starting at character ``origin.offset`` of that string), ``"derived"``
    (computed from the inputs ``origin.paths``) or ``"unknown"`` (made by something that kept
    no record; treat it as input).
    """

    __slots__ = ("start", "end", "origin")

    def __init__(self, start: int, end: int, origin: Origin) -> None:
        self.start = start
        self.end = end
        self.origin = origin

    @property
    def from_input(self) -> bool:
        """Whether any input (or an unknown source) wrote these characters."""
        return self.origin.kind != "template"

    def as_dict(self) -> Dict[str, Any]:
        """``start``, ``end`` and the origin's fields (:meth:`Origin.as_dict`) in one dict."""
        return {"start": self.start, "end": self.end, **self.origin.as_dict()}

    def __repr__(self) -> str:
        return f"Run({self.start}, {self.end}, {self.origin!r})"


_public_start = operator.attrgetter("start")


class ProvenanceResult:
    """What :meth:`Template.render_with_provenance` (and ``ChatTemplate.render_with_provenance``)
    returns: ``text`` (identical to ``render()``'s), the :attr:`runs` covering it in order, and
    ``generation_spans``, the ``(start, end)`` offsets of the ``{% generation %}`` blocks'
    output.

    ``runs`` are built on first use from the render's compact record.

    >>> result = mj.ChatTemplate("{{ messages[0].content }}!").render_with_provenance(
    ...     [{"role": "user", "content": "Hi"}])
    >>> result.runs
    [Run(0, 2, input messages[0].content[0:]), Run(2, 3, template 1:26 +0)]
    >>> result.paths_at(0), result.paths_at(2)
    (('messages[0].content',), ())
    """

    __slots__ = ("text", "_runs", "_raw", "generation_spans")

    def __init__(self, text: str, runs: Optional[List[Run]],
                 generation_spans: List[Tuple[int, int]], raw: Any = None) -> None:
        self.text = text
        self._runs = runs
        self._raw = raw
        self.generation_spans = generation_spans

    @property
    def runs(self) -> List[Run]:
        """:class:`Run` objects covering ``text`` in order."""
        if self._runs is None:
            self._runs = public_runs(self._raw)
            self._raw = None
        return self._runs

    def origin_at(self, index: int) -> Origin:
        """The origin of character ``index`` of the text."""
        runs = self.runs
        return runs[bisect_right(runs, index, key=_public_start) - 1].origin

    def input_mask(self) -> List[bool]:
        """One flag per character: True where any input (or an unknown source) wrote it."""
        mask = [False] * len(self.text)
        for run in self.runs:
            if run.from_input:
                mask[run.start:run.end] = [True] * (run.end - run.start)
        return mask

    def paths_at(self, index: int) -> Tuple[str, ...]:
        """The input paths character ``index`` comes from (empty: template text)."""
        origin = self.origin_at(index)
        if origin.kind == "input":
            return (origin.path,)
        return origin.paths

    def as_json(self) -> Dict[str, Any]:
        """``{"text", "runs", "generation_spans"}`` as JSON-ready data, the runs as
        :meth:`Run.as_dict` gives them (what ``minijinja-py render --provenance --json``
        prints)."""
        return {"text": self.text, "runs": [run.as_dict() for run in self.runs],
                "generation_spans": [list(span) for span in self.generation_spans]}


# ---- runs ------------------------------------------------------------------------------------

def runs_of(value: str) -> Tuple[Tuple[int, int, tuple, int], ...]:
    """The internal runs of a str: its own, or one "unknown" run for a str without origins."""
    if type(value) is PStr or type(value) is PMarkup:
        return value._runs
    return ((0, len(value), _UNKNOWN_SOURCE, -1),) if value else ()


def _append(runs: list, start: int, end: int, source: tuple, offset: int) -> None:
    """Add a run, merged with the previous one when it has the same source: a record grows
    with the number of times the source changes, never with the number of characters or
    copies (``'ab' * n`` is one run). A merged run keeps its offset while the copy stays
    verbatim; past that, its characters came from the source at positions no longer
    recorded (offset -1: template text computed from the literal, or text derived from the
    input, see :func:`public_runs`). A verbatim run is not merged into by text without
    positions (an escape of its own literal's next character): it stays exact, and at most
    one more run follows it for the same source."""
    if start >= end:
        return
    if runs:
        last = runs[-1]
        if last[1] == start and last[2] == source:
            kept = last[3]
            if kept >= 0 and offset != kept + (start - last[0]):
                if offset < 0:
                    runs.append((start, end, source, offset))
                    return
                kept = -1
            runs[-1] = (last[0], end, source, kept)
            return
    runs.append((start, end, source, offset))


def _shifted(runs: list, pieces: Iterable[str]) -> None:
    """Append the runs of each piece in turn, shifted to follow what ``runs`` covers (paid
    for: see :class:`_Meter`)."""
    position = runs[-1][1] if runs else 0
    meter = _Meter()
    for piece in pieces:
        piece_runs = runs_of(piece)
        for start, end, source, offset in piece_runs:
            _append(runs, start + position, end + position, source, offset)
        position += len(piece)
        meter.add(len(piece_runs) + 1)
    meter.close()


_run_start = operator.itemgetter(0)


def _run_index(runs: Sequence[tuple], index: int) -> int:
    """The position in ``runs`` (in order, each starting where the last ended) of the run
    holding character ``index`` (0 before the first)."""
    return max(bisect_right(runs, index, key=_run_start) - 1, 0)


def _sliced(runs: Sequence[tuple], begin: int, stop: int, into: Optional[list] = None,
            at: int = 0) -> list:
    """The runs of characters ``[begin, stop)``, moved to start at ``at``."""
    result = [] if into is None else into
    if begin >= stop or not runs:
        return result
    for position in range(_run_index(runs, begin), len(runs)):
        start, end, source, offset = runs[position]
        if start >= stop:
            break
        if end <= begin:
            continue
        low, high = max(start, begin), min(end, stop)
        _append(result, low - begin + at, high - begin + at, source,
                offset + (low - start) if offset >= 0 else -1)
    return result


def _char_source(runs: Sequence[tuple], index: int) -> Tuple[tuple, int]:
    if runs:
        start, end, source, offset = runs[_run_index(runs, index)]
        if start <= index < end:
            return source, (offset + index - start if offset >= 0 else -1)
    return _UNKNOWN_SOURCE, -1


def _strided(runs: Sequence[tuple], first: int, count: int, step: int) -> list:
    """The runs of the characters ``first``, ``first + step`` ... (``count`` of them, ``step``
    not 1): worked out run by run, not character by character. Characters taken from one run
    keep their position only when a single one is taken (a stride or a reversal is no
    verbatim copy)."""
    result: list = []
    taken_so_far = 0
    index = first
    meter = _Meter()
    while taken_so_far < count:
        start, end, source, offset = runs[_run_index(runs, index)]
        # the characters index, index + step ... that stay inside [start, end)
        room = (end - 1 - index) // step if step > 0 else (index - start) // -step
        taken = min(room + 1, count - taken_so_far)
        _append(result, taken_so_far, taken_so_far + taken, source,
                offset + index - start if offset >= 0 and taken == 1 else -1)
        taken_so_far += taken
        index += taken * step
        meter.add(1)
    meter.close()
    return result


def _repeated(runs: Sequence[tuple], length: int, count: int) -> list:
    """The runs of a str of ``length`` characters (with ``runs``) repeated ``count`` times."""
    if len(runs) == 1:  # one source throughout: one run, verbatim only as a single copy
        _, _, source, offset = runs[0]
        return [(0, length * count, source, offset if count == 1 else -1)]
    if count * len(runs) > _FREE_RUNS:
        _pay(0, count * len(runs))  # before it is made: its size is known
    result: list = []
    for copy in range(max(count, 0)):
        shift = copy * length
        for start, end, source, offset in runs:
            _append(result, start + shift, end + shift, source, offset)
        if not copy & _CHECK_EVERY:
            check_deadline()
    return result


def _make(text: str, runs: Sequence[tuple], paid: bool = False) -> str:
    """A str with origins: ``text`` with ``runs`` (paid for here unless the loop that made
    them has paid already: ``paid``)."""
    if not text:
        return _EMPTY
    _pay(1, 0 if paid or len(runs) <= _FREE_RUNS else len(runs))
    return _record(text, runs)


def _record(text: str, runs: Sequence[tuple]) -> str:
    """A str with origins, paid for by the caller."""
    result = PStr(text)
    # (a dict made whole is about half the size of one grown by setting an attribute)
    result.__dict__ = {"_runs": tuple(runs)}
    return result


def _pay(records: int, runs: int) -> None:
    """Charge the render for ``records`` new str with origins and ``runs`` runs kept (see
    budget.PROVENANCE_STR_STEPS). Loops making many call it as they go: it also fails at
    the deadline."""
    charge(records * PROVENANCE_STR_STEPS + runs * PROVENANCE_RUN_STEPS)


class _Meter:
    """Pays for the runs a loop adds to a record as it adds them, every
    ``_CHECK_EVERY + 1`` (so that a long loop also meets the deadline), and when it ends for
    the rest, unless the whole record stayed within what one operation keeps free
    (``_FREE_RUNS``). A record made under a meter goes to ``_make(..., paid=True)``."""

    __slots__ = ("pending", "paid")

    def __init__(self) -> None:
        self.pending = 0
        self.paid = False

    def add(self, runs: int) -> None:
        self.pending += runs
        if self.pending > _CHECK_EVERY:
            _pay(0, self.pending)
            self.pending = 0
            self.paid = True

    def close(self) -> None:
        if self.paid or self.pending > _FREE_RUNS:
            _pay(0, self.pending)
        self.pending = 0


def _derived_source(sources: Iterable[tuple]) -> Optional[tuple]:
    """The source of text computed from these sources: derived from their inputs, or the
    first template literal's (computed) when only template text went in; None: nothing."""
    paths = set()
    template = None
    for source in sources:
        if source[0] == _TEMPLATE:
            if template is None:
                template = source
        elif source[0] == _INPUT:
            paths.add(source[1])
        else:
            paths.update(source[1])
    if paths:
        return (_DERIVED, frozenset(paths))
    return template


def sources_of(value: Any, limit: int = 100_000) -> List[tuple]:
    """The sources of everything inside ``value`` (strings, numbers, containers), at most
    ``limit`` items looked at (past that, the remaining ones count as unknown)."""
    found: List[tuple] = []
    stack = [value]
    seen = 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > limit:
            found.append(_UNKNOWN_SOURCE)
            break
        kind = type(item)
        if kind is PStr:
            found.extend(run[2] for run in item._runs)
            continue
        if kind is PInt or kind is PFloat:
            found.append(item._source)
            continue
        if kind is PMarkup:
            found.extend(run[2] for run in item._runs)
            continue
        if isinstance(item, str):
            if item:  # a str (or Markup) without origins: it may hold anything
                found.append(_UNKNOWN_SOURCE)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif not (item is None or isinstance(item, (bool, int, float)) or _is_undefined(item)):
            # an object that may hold or yield anything (an iterator, a namespace): unknown
            found.append(_UNKNOWN_SOURCE)
    charge(seen >> ITEMS_SHIFT)  # a walk through the items, as any filter reading them pays
    return found


def _is_undefined(value: Any) -> bool:
    from ..runtime.objects import Undefined

    return isinstance(value, Undefined)


def derive(text: str, *inputs: Any) -> str:
    """``text`` computed from ``inputs`` by an operation that does not say which character
    came from where: every character derived from all of their sources (template text when
    only template text went in; a str without origins, counted unknown)."""
    if not isinstance(text, str):
        return text
    if not text:
        return _EMPTY
    source = _derived_source(source for value in inputs for source in sources_of(value))
    if source is None:
        source = _COMPUTED
    return _make(text, [(0, len(text), source, -1)])


def charwise(result: str, value: str) -> str:
    """``result`` made from ``value`` one character for one character (a case change): each
    character keeps its own source, turned into "derived" (or computed template)."""
    if len(result) != len(value):
        return derive(result, value)
    runs: list = []
    for start, end, source, _ in runs_of(value):
        if source[0] == _INPUT:
            source = (_DERIVED, frozenset((source[1],)))
        _append(runs, start, end, source, -1)
    return _make(result, runs)


def _from_input(pattern: Any) -> bool:
    """Whether a str argument (a separator, characters to strip) holds any character an
    input (or an unknown source) wrote."""
    if not isinstance(pattern, str) or not pattern:
        return False
    return any(source[0] != _TEMPLATE for source in sources_of(pattern))


def _joined(result: str, pieces: List[str], *inputs: Any, paid: bool = False) -> str:
    """``result`` as the join of ``pieces`` (a tracer's account of where it came from), with
    their origins; checked: when the pieces do not spell the result, it is derived from the
    inputs (a tracer can only be imprecise, never wrong)."""
    if "".join(pieces) != result:
        return derive(result, *inputs)
    return join_pieces(pieces, paid)


def _with_runs(text: str, runs: list, *inputs: Any) -> str:
    """``text`` with the runs a tracer worked out, checked: each verbatim run must equal what
    it claims to copy; otherwise the whole text is derived (a tracer can only be imprecise,
    never wrong)."""
    if runs and runs[-1][1] == len(text) and runs[0][0] == 0:
        return _make(text, runs)
    return derive(text, *inputs)


# ---- values that carry origins ---------------------------------------------------------------

class PStr(str):
    """A str that knows the origin of each of its characters (``_runs``).

    A str joined from pieces (output, ``~``, ``+`` chains) records the pieces instead
    (``_parts``) and works its runs out on first use: most joined strings are only joined
    again, and the runs of the final output are then worked out once."""

    def __getattr__(self, name: str) -> Any:
        if name == "_runs":
            parts = self.__dict__.pop("_parts", None)
            runs = _flatten(parts if parts is not None else [(len(self), None)])
            self._runs = runs
            return runs
        raise AttributeError(name)

    def __str__(self) -> str:
        return self

    def __format__(self, spec: str) -> str:
        if not spec:
            return self
        return derive(str.__format__(self, spec), self)

    # -- operators that copy --------------------------------------------------------------
    def __add__(self, other: Any) -> Any:
        if not isinstance(other, str) or hasattr(other, "__html__"):
            # (Markup escapes a plain str added to it: its __radd__ runs first for a str, as
            # for any subclass of the left operand's class, and must for this one too)
            return _reflected(self, other, "__radd__", operator.add)
        result = str.__add__(self, other)
        runs: list = []
        _shifted(runs, (self, other))
        return _make(result, runs, paid=True)

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        result = str.__add__(other, self)
        runs: list = []
        _shifted(runs, (other, self))
        return _make(result, runs, paid=True)

    def __mul__(self, count: Any) -> Any:
        if not isinstance(count, int):
            return _reflected(self, count, "__rmul__", operator.mul)
        result = str.__mul__(self, count)
        if not result:
            return _EMPTY
        return _make(result, _repeated(self._runs, len(self), count), paid=True)

    __rmul__ = __mul__

    def __mod__(self, values: Any) -> Any:
        result = str.__mod__(self, values)
        if result is NotImplemented:
            return result
        return _formatted(result, self, values, lambda fmt, args: str.__mod__(fmt, args))

    def __rmod__(self, template: Any) -> Any:
        if not isinstance(template, str):
            return NotImplemented
        return derive(str.__mod__(template, self), template, self)

    def __getitem__(self, key: Any) -> Any:
        result = str.__getitem__(self, key)
        if not result:
            return _EMPTY
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return _make(result, _sliced(self._runs, start, stop))
            return _make(result, _strided(self._runs, start, len(result), step), paid=True)
        index = key + len(self) if key < 0 else key
        source, offset = _char_source(self._runs, index)
        return _make(result, [(0, 1, source, offset)])

    def __iter__(self) -> Any:
        # run by run: each character a str with its one-run record, paid for as it is made;
        # characters without a position of their own (a run at offset -1) are one object per
        # character and source, as CPython shares its one-character strings
        made = 0
        shared: Dict[Tuple[str, tuple], str] = {}
        new_str = PStr
        # the characters that will each be a str of their own, paid for before they are made
        _pay(sum(end - start for start, end, _, offset in self._runs if offset >= 0), 0)
        for start, end, source, offset in self._runs:
            for index in range(start, end):
                text = str.__getitem__(self, index)
                if offset < 0:
                    char = shared.get((text, source))
                    if char is not None:
                        yield char
                        continue
                char = new_str(text)
                char.__dict__ = {"_runs": ((0, 1, source, offset + index - start
                                            if offset >= 0 else -1),)}
                if offset < 0:
                    shared[text, source] = char
                    _pay(1, 0)
                made += 1
                if not made & _CHECK_EVERY:
                    check_deadline()
                yield char

    # -- methods that copy ----------------------------------------------------------------
    def _span(self, start: int, stop: int) -> str:
        return _make(str.__getitem__(self, slice(start, stop)), _sliced(self._runs, start, stop))

    def strip(self, chars: Any = None) -> str:
        left = len(self) - len(str.lstrip(self, chars))
        right = len(str.rstrip(self, chars))
        return self._guarded(self._span(left, max(left, right)), chars)

    def lstrip(self, chars: Any = None) -> str:
        return self._guarded(self._span(len(self) - len(str.lstrip(self, chars)), len(self)),
                             chars)

    def rstrip(self, chars: Any = None) -> str:
        return self._guarded(self._span(0, len(str.rstrip(self, chars))), chars)

    def removeprefix(self, prefix: Any) -> str:
        result = str.removeprefix(self, prefix)
        return self._guarded(self._span(len(self) - len(result), len(self)), prefix)

    def removesuffix(self, suffix: Any) -> str:
        return self._guarded(self._span(0, len(str.removesuffix(self, suffix))), suffix)

    def _guarded(self, result: Any, pattern: Any) -> Any:
        """``result`` of an operation steered by ``pattern`` (the characters to strip, the
        separator to split at, the text to replace): when an input wrote the pattern, it
        decides which characters are kept, so everything is derived from both."""
        if not _from_input(pattern):
            return result
        if isinstance(result, str):
            return derive(str.__str__(result), self, pattern)
        return type(result)(derive(str.__str__(item), self, pattern) if item else item
                            for item in result)

    def _located(self, pieces: List[str]) -> List[str]:
        """Pieces of this string in order (split results): each found from where the last
        ended and given the runs it copies."""
        # every piece a str with origins: paid for before any is made (a split may make
        # millions; the plain split has made them already)
        _pay(len(pieces), 0)
        own = self._runs
        located = []
        cursor = 0
        for piece in pieces:
            at = str.find(self, piece, cursor)
            if at < 0:
                located.append(derive(piece, self))
                continue
            runs = _sliced(own, at, at + len(piece))
            if len(runs) > _FREE_RUNS:
                _pay(0, len(runs))
            located.append(_record(piece, runs) if piece else _EMPTY)
            cursor = at + len(piece)
        return located

    def split(self, sep: Any = None, maxsplit: int = -1) -> List[str]:
        return self._guarded(self._located(str.split(self, sep, maxsplit)), sep)

    def rsplit(self, sep: Any = None, maxsplit: int = -1) -> List[str]:
        return self._guarded(self._located(str.rsplit(self, sep, maxsplit)), sep)

    def splitlines(self, keepends: bool = False) -> List[str]:
        return self._located(str.splitlines(self, keepends))

    def partition(self, sep: Any) -> Tuple[str, str, str]:
        return self._guarded(tuple(self._located(list(str.partition(self, sep)))), sep)

    def rpartition(self, sep: Any) -> Tuple[str, str, str]:
        head, middle, tail = str.rpartition(self, sep)
        if not middle:
            return self._guarded((_EMPTY, _EMPTY, self), sep)
        at = len(head)
        return self._guarded((self._span(0, at), self._span(at, at + len(middle)),
                              self._span(at + len(middle), len(self))), sep)

    def replace(self, old: Any, new: Any, count: Any = -1) -> str:
        result = str.replace(self, old, new, count)
        if not isinstance(old, str) or not isinstance(new, str) or _from_input(old):
            return derive(result, self, old, new)
        if not old:
            # `new` before every character: derived from the str and `new` (the exact account
            # would be a run per character)
            return derive(result, self, new)
        own = self._runs
        new_runs = runs_of(new)
        new_sources = [run[2] for run in new_runs]
        if len(own) == 1 and own[0][3] < 0 and \
                _same_kind_of_text(_derived_source([own[0][2]] + new_sources), own[0][2]):
            # one run without positions, whatever is inserted of its own kind: one run still
            return _make(result, [(0, len(result), own[0][2], -1)])
        caused: Dict[tuple, Optional[tuple]] = {}  # the source of `new` by what it replaced
        runs: list = []
        meter = _Meter()
        done = position = cursor = 0
        limit = count if isinstance(count, int) and count >= 0 else len(self) + 1
        while done < limit:
            at = str.find(self, old, cursor)
            if at < 0:
                break
            before = len(runs)
            _sliced(own, cursor, at, runs, position)
            position += at - cursor
            # the input decided that `new` goes here: it is derived from what it replaces
            # (as it is when only template text decided it)
            cause_runs = _sliced(own, at, at + len(old))
            cause = tuple(run[2] for run in cause_runs)
            if cause not in caused:
                caused[cause] = _derived_source(list(cause) + new_sources)
            source = caused[cause]
            if len(cause_runs) == 1 and cause_runs[0][3] < 0 and \
                    _same_kind_of_text(source, cause[0]):
                # inside text without positions, text of its own kind: its source goes on
                # (one run, where the exact account would take turns at every occurrence)
                _append(runs, position, position + len(new), cause[0], -1)
            elif source is None or source[0] == _TEMPLATE:
                for start, end, run_source, offset in new_runs:
                    _append(runs, start + position, end + position, run_source, offset)
            else:
                _append(runs, position, position + len(new), source, -1)
            position += len(new)
            cursor = at + len(old)
            done += 1
            meter.add(len(runs) - before + 1)
        _sliced(own, cursor, len(self), runs, position)
        meter.close()
        if not runs or runs[-1][1] != len(result):
            return derive(result, self, new)
        return _make(result, runs, paid=True)

    def join(self, items: Any) -> str:
        items = list(items)
        result = str.join(self, items)
        pieces: List[str] = []
        for position, item in enumerate(items):
            if position:
                pieces.append(self)
            pieces.append(item)
        return _joined(result, pieces, self, items)

    def _padded(self, result: str, left: int, fill: Any) -> str:
        """``result``: this str with padding around it; how much padding depends on this
        str's length, so the padding is derived from it (and from ``fill``)."""
        source = _derived_source([run[2] for run in self._runs] +
                                 (sources_of(fill) if fill is not None else [])) or _COMPUTED
        runs: list = []
        _append(runs, 0, left, source, -1)
        _sliced(self._runs, 0, len(self), runs, left)
        _append(runs, left + len(self), len(result), source, -1)
        return _with_runs(result, runs, self, fill)

    def center(self, width: Any, fill: Any = None) -> str:
        result = str.center(self, width, " " if fill is None else fill)
        margin = len(result) - len(self)
        # CPython's split of the margin: the odd character goes left when the width is odd
        left = margin // 2 + (margin & width & 1) if margin > 0 else 0
        return self._padded(result, left, fill)

    def ljust(self, width: Any, fill: Any = None) -> str:
        return self._padded(str.ljust(self, width, " " if fill is None else fill), 0, fill)

    def rjust(self, width: Any, fill: Any = None) -> str:
        result = str.rjust(self, width, " " if fill is None else fill)
        return self._padded(result, len(result) - len(self), fill)

    def zfill(self, width: Any) -> str:
        return derive(str.zfill(self, width), self)

    # -- transformations: one character for one where lengths allow ------------------------
    def upper(self) -> str:
        return charwise(str.upper(self), self)

    def lower(self) -> str:
        return charwise(str.lower(self), self)

    # a letter's case depends on the character before it (title) or on its place
    # (capitalize): derived from the whole str, not character for character
    def title(self) -> str:
        return derive(str.title(self), self)

    def capitalize(self) -> str:
        return derive(str.capitalize(self), self)

    def swapcase(self) -> str:
        return charwise(str.swapcase(self), self)

    def casefold(self) -> str:
        return charwise(str.casefold(self), self)

    def expandtabs(self, tabsize: Any = 8) -> str:
        return derive(str.expandtabs(self, tabsize), self)

    def translate(self, table: Any) -> str:
        return derive(str.translate(self, table), self, table)

    def format(self, *args: Any, **kwargs: Any) -> str:
        result = str.format(self, *args, **kwargs)
        return derive(result, self, args, kwargs)

    def format_map(self, mapping: Any) -> str:
        return derive(str.format_map(self, mapping), self, mapping)

    def __copy__(self) -> "PStr":
        return self

    def __deepcopy__(self, memo: Any) -> "PStr":
        return self


def _same_kind_of_text(source: Optional[tuple], within: tuple) -> bool:
    """Whether text of ``source`` inserted into text of ``within`` (a run without positions)
    says nothing new: template text into template text, or text derived from the very inputs
    the run comes from."""
    if source is None or source[0] == _TEMPLATE:
        return within[0] == _TEMPLATE
    return within[0] != _TEMPLATE and _paths_of([(0, 0, source, -1)]) == \
        _paths_of([(0, 0, within, -1)])


def _checked_like_str(name: str) -> Callable[..., Any]:
    """PStr's method ``name``, whose arguments str's own method checks first: a call str
    refuses fails with str's own error, word for word (the tracing method's parameters may
    differ), and nothing str refuses is traced."""
    plain = getattr(str, name)
    traced = getattr(PStr, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        plain(self, *args, **kwargs)
        return traced(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in [name for name in vars(PStr) if name[:1] != "_"]:
    setattr(PStr, _name, _checked_like_str(_name))


#: The empty str of provenance renders: a PStr (so that its methods, ``''.join(items)``, keep
#: origins), one object (``x is sameas ''`` behaves as with Python's one empty str).
_EMPTY = PStr("")
_EMPTY._runs = ()


def _reflected(text: str, other: Any, name: str, operation: Callable[[str, Any], Any]) -> Any:
    """``text <op> other`` for an operand a str cannot take: the operand's own reflected
    method when it has one (Undefined raises its own error), else Python's error for a
    plain str, word for word."""
    method = getattr(type(other), name, None)
    if method is not None:
        result = method(other, text)
        if result is not NotImplemented:
            return result
    return operation(str.__str__(text), other)


_PLACEHOLDER = "\U0010fffd"


def _formatted(result: str, template: str, values: Any,
               apply: Callable[[str, Any], str]) -> str:
    """Origins for ``template % values`` (or the format filter): the result is made again
    with a private placeholder instead of each str value; where the placeholders land, the
    value's characters were copied, and the rest is found in the template. Checked: when the
    rebuilt text is not the real one (widths, precisions, ``%r``), everything is derived."""
    single = not isinstance(values, tuple)
    items = (values,) if single else values
    if not any(isinstance(item, str) for item in items) or \
            _PLACEHOLDER in result or isinstance(values, dict):
        return derive(result, template, values)
    marks = [f"{_PLACEHOLDER}{index}{_PLACEHOLDER}" if isinstance(item, str) else item
             for index, item in enumerate(items)]
    try:
        probe = apply(template, marks[0] if single else tuple(marks))
    except TemplateError:
        raise
    except Exception:
        return derive(result, template, values)
    others = [item for item in items if not isinstance(item, str)]
    parts = probe.split(_PLACEHOLDER)
    pieces: List[str] = []
    cursor = 0
    for position, part in enumerate(parts):
        if position % 2:
            pieces.append(items[int(part)])
            continue
        if not part:
            continue
        at = str.find(template, part, cursor)
        if at >= 0 and not others:
            pieces.append(template[at:at + len(part)] if isinstance(template, PStr)
                          else part)
            cursor = at + len(part)
        else:
            pieces.append(derive(part, template, others))
    rebuilt = "".join(pieces)
    if rebuilt != result:
        return derive(result, template, values)
    return _joined(result, pieces, template, values)


class _InputNumber:
    """What PInt and PFloat share: they remember their path (``_source``), print as a str
    derived from it, and are immutable (copies are themselves)."""

    __slots__ = ()
    _base: type = int
    _source: tuple = _UNKNOWN_SOURCE

    def __str__(self) -> str:
        text = self._base.__repr__(self)
        return _make(text, [(0, len(text), self._source, -1)])

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return derive(self._base.__format__(self, spec), self)

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: Any) -> Any:
        return self


class PInt(_InputNumber, int):
    """An int read from the input."""

    _base = int


class PFloat(_InputNumber, float):
    """A float read from the input."""

    _base = float


# Errors must read the same in a provenance render as in a plain one, and Python's messages
# ("'str' object has no attribute ...", "object of type 'int' has no len()") and Jinja2's
# ("'str object' has no attribute ...") name the type: these classes go by the names of the
# types they stand for.
for _class, _base in ((PStr, str), (PInt, int), (PFloat, float)):
    _class.__name__ = _class.__qualname__ = _base.__name__
    _class.__module__ = "builtins"


def _number_result(result: Any, *operands: Any) -> Any:
    """Arithmetic on a number from the input gives a number derived from it."""
    kind = type(result)
    if kind is bool or kind not in (int, float):
        return result
    source = _derived_source(operand._source if type(operand) in (PInt, PFloat)
                             else _COMPUTED for operand in operands)
    if source is None or source[0] == _TEMPLATE:
        return result
    wrapped = (PInt if kind is int else PFloat)(result)
    wrapped._source = source
    return wrapped


def _arithmetic(name: str, base: type) -> Callable[..., Any]:
    operation = getattr(base, name)

    def method(self: Any, *others: Any) -> Any:
        result = operation(self, *others)
        if result is NotImplemented:
            return result
        if isinstance(result, tuple):  # divmod
            return tuple(_number_result(item, self, *others) for item in result)
        return _number_result(result, self, *others)

    method.__name__ = name
    return method


for _base, _class in ((int, PInt), (float, PFloat)):
    for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                  "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
                  "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__", "__abs__",
                  "__divmod__", "__rdivmod__", "__round__"):
        if hasattr(_base, _name):
            setattr(_class, _name, _arithmetic(_name, _base))
for _name in ("__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__",
              "__rlshift__", "__rshift__", "__rrshift__", "__invert__"):
    setattr(PInt, _name, _arithmetic(_name, int))


def _arithmetic_str_mul(self: Any, other: Any) -> Any:
    """``3 * 'ab'`` with a number from the input: the str decides (it knows its runs)."""
    if isinstance(other, str):
        return derive(str.__mul__(other, int(self)), other, self)
    return _arithmetic("__mul__", int)(self, other)


PInt.__mul__ = _arithmetic_str_mul  # type: ignore[assignment]
PInt.__rmul__ = _arithmetic_str_mul  # type: ignore[assignment]


# ---- inputs and template text ----------------------------------------------------------------

def _key_path(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}" if path else key
    shown = json.dumps(key, ensure_ascii=False) if isinstance(key, str) else repr(key)
    return f"{path}[{shown}]"


#: Levels of a path (``messages[1].content``) that name where an input came from; an input
#: nested deeper is named by its ancestor at this depth (paths stay short however deep the
#: data: naming each item of a 10,000-deep list in full would take a gigabyte).
PATH_DEPTH = 64


class _TupleDone:
    """On the stack of :func:`wrap_variables`: the items of a tuple are all wrapped."""

    __slots__ = ("items", "container", "slot")

    def __init__(self, items: list, container: Any, slot: Any) -> None:
        self.items = items
        self.container = container
        self.slot = slot


def wrap_variables(variables: Dict[str, Any], limit: int = 10_000_000) -> Dict[str, Any]:
    """A copy of the render variables in which every str (dict keys too) is a :class:`PStr`
    of origin "input" at its path (``messages[1].content``), and every int and float a
    :class:`PInt` / :class:`PFloat`. Containers are copied (dicts, lists, tuples); anything
    else is kept as it is. A dict key's own path is the dict's path followed by the key in
    braces: ``tools[0].function.parameters.properties{"city"}``. The walk is iterative (data
    of any depth) and shares what the data shares (cycles included); past ``limit`` items the
    rest is kept as it is (without origins: counted unknown)."""
    memo: Dict[int, Any] = {}
    remaining = limit
    new_str = PStr
    input_kind = _INPUT

    def text(value: str, path: str) -> str:
        result = new_str(value)
        result.__dict__ = {"_runs": ((0, len(value), (input_kind, path), 0),)}
        return result

    wrapped: Dict[str, Any] = {}
    # (value, its path, its depth, the container and slot its copy goes to), or _TupleDone
    stack: List[Any] = [(value, name, 0, wrapped, name)
                        for name, value in reversed(list(variables.items()))]
    for name in variables:
        wrapped[name] = None  # the variables' own order
    while stack:
        entry = stack.pop()
        if type(entry) is _TupleDone:
            entry.container[entry.slot] = tuple(entry.items)
            continue
        value, path, depth, container, slot = entry
        remaining -= 1
        if not remaining & _CHECK_EVERY:
            check_deadline()
        kind = type(value)
        if remaining < 0:
            container[slot] = value  # past the limit: kept as it is
        elif kind is str:
            container[slot] = text(value, path) if value else _EMPTY
        elif kind is int or kind is float:
            number = (PInt if kind is int else PFloat)(value)
            number._source = (_DERIVED, frozenset((path,)))
            container[slot] = number
        elif kind is dict:
            known = memo.get(id(value))
            if known is not None:
                container[slot] = known
                continue
            copy: Dict[Any, Any] = {}
            memo[id(value)] = copy
            container[slot] = copy
            deeper = depth + 1
            named = depth < PATH_DEPTH
            pending = []
            for key, item in value.items():
                if type(key) is str:
                    if not named:
                        item_path = key_path = path
                    elif key.isidentifier():
                        item_path = f"{path}.{key}"
                        key_path = f'{path}{{"{key}"}}'
                    else:
                        quoted = json.dumps(key, ensure_ascii=False)
                        item_path = f"{path}[{quoted}]"
                        key_path = f"{path}{{{quoted}}}"
                    key = text(key, key_path) if key else _EMPTY
                else:
                    item_path = _key_path(path, key) if named else path
                if type(item) is str:  # strings, the common case, at once
                    copy[key] = text(item, item_path) if item else _EMPTY
                else:
                    copy[key] = None
                    pending.append((item, item_path, deeper, copy, key))
            stack.extend(reversed(pending))
            remaining -= len(value)
        elif kind is list or kind is tuple:
            if kind is list:
                known = memo.get(id(value))
                if known is not None:
                    container[slot] = known
                    continue
            items: List[Any] = [None] * len(value)
            if kind is list:
                memo[id(value)] = items
                container[slot] = items
            else:  # made once its items are: below them on the stack
                stack.append(_TupleDone(items, container, slot))
            deeper = depth + 1
            named = depth < PATH_DEPTH
            stack.extend((item, f"{path}[{index}]" if named else path, deeper, items, index)
                         for index, item in reversed(list(enumerate(value))))
        else:
            container[slot] = value
    return wrapped


def template_string(text: str, line: int, column: int) -> str:
    """A string constant or text of the template, located."""
    if not text:
        return _EMPTY
    result = PStr(text)
    result._runs = ((0, len(text), (_TEMPLATE, line, column), 0),)
    return result


#: A joined piece longer than this has its runs worked out when it is joined, so that a long
#: chain of joins (``ns.text = ns.text + piece`` in a loop) keeps no earlier text alive.
_LAZY_PIECE_LIMIT = 1024


def join_pieces(pieces: Sequence[str], paid: bool = False) -> str:
    """``"".join(pieces)`` keeping every piece's origins (worked out when first needed). The
    record of its parts is paid for before it is made (unless the caller has: ``paid``)."""
    text = "".join(pieces)
    if not text:
        return _EMPTY
    charge(PROVENANCE_STR_STEPS + (_parts_price(len(pieces)) if not paid else 0))
    parts: list = []
    for piece in pieces:
        if not piece:
            continue
        if type(piece) is PStr:
            known = piece.__dict__.get("_runs")
            if known is None and len(piece) > _LAZY_PIECE_LIMIT:
                known = piece._runs
            parts.append(piece if known is None else (len(piece), known))
        elif type(piece) is PMarkup:
            parts.append((len(piece), piece._runs))
        else:
            parts.append((len(piece), None))  # a str without origins
    result = PStr(text)
    result.__dict__ = {"_parts": parts}
    return result


def _parts_price(count: int) -> int:
    """Steps for recording ``count`` pieces of a joined str (free for a few)."""
    return count * PROVENANCE_PART_STEPS if count > _FREE_RUNS else 0


def _flatten(parts: list) -> Tuple[tuple, ...]:
    """The runs of a joined str from its parts: (length, runs or None) pairs and joined
    PStr whose own parts are expanded in place (without recursion: chains may be long)."""
    runs: list = []
    position = 0
    meter = _Meter()  # a long join pays as it goes (and meets the deadline)
    stack = [iter(parts)]
    while stack:
        for part in stack[-1]:
            if type(part) is tuple:
                length, part_runs = part
                if part_runs is None:
                    _append(runs, position, position + length, _UNKNOWN_SOURCE, -1)
                    meter.add(1)
                else:
                    for start, end, source, offset in part_runs:
                        _append(runs, start + position, end + position, source, offset)
                    meter.add(len(part_runs))
                position += length
            else:
                known = part.__dict__.get("_runs")
                if known is None:
                    stack.append(iter(part.__dict__["_parts"]))
                    break
                for start, end, source, offset in known:
                    _append(runs, start + position, end + position, source, offset)
                meter.add(len(known))
                position += len(part)
        else:
            stack.pop()
    meter.close()
    return tuple(runs)


def public_runs(runs: Sequence[tuple]) -> List[Run]:
    """Internal runs as :class:`Run` objects (runs with the same origin share one
    :class:`Origin`: treat origins as read-only). Characters of an input copied at positions
    no longer recorded (offset -1) are derived from it; neighbours of the same origin are
    one run."""
    result: List[Run] = []
    origins: Dict[Tuple[tuple, int], Origin] = {}
    for start, end, source, offset in runs:
        origin = origins.get((source, offset))
        if origin is None:
            kind = source[0]
            if kind == _TEMPLATE:
                origin = Origin("template", offset=offset if offset >= 0 else None,
                                line=source[1], column=source[2])
            elif kind == _INPUT:
                origin = Origin("input", path=source[1], offset=offset) if offset >= 0 else \
                    _derived_origin(frozenset((source[1],)), origins)
            else:
                origin = _derived_origin(source[1], origins)
            origins[(source, offset)] = origin
        if result and result[-1].origin is origin and offset < 0:
            result[-1].end = end
        else:
            result.append(Run(start, end, origin))
    return result


def _derived_origin(paths: FrozenSet[str], origins: Dict[Any, Origin]) -> Origin:
    """The one Origin of text derived from ``paths`` ("unknown" when part of it came from
    text without a record)."""
    key = ((_DERIVED, paths), -1)
    origin = origins.get(key)
    if origin is None:
        kind = "unknown" if UNKNOWN_PATH in paths else "derived"
        origin = Origin(kind, paths=tuple(sorted(paths - {UNKNOWN_PATH})))
        origins[key] = origin
    return origin


def joined_output(pieces: Sequence[str]) -> str:
    """A render's output joined from its pieces, its runs worked out while the render's
    limits are in force (paid for as any str's) and paid for once more: what the
    :class:`Run` objects made of them will cost (see ProvenanceResult)."""
    text = join_pieces(pieces)
    runs = runs_of(text)
    if len(runs) > _FREE_RUNS:
        _pay(0, len(runs))
    return text


# ---- what operations return ------------------------------------------------------------------

def settle(result: Any, inputs: Sequence[Any]) -> Any:
    """Give what an operation returned the origins it lacks: a str without runs (or the str
    items of a fresh list or tuple) computed from tainted ``inputs`` becomes derived from
    them. Values that already carry origins, and results of template-only inputs, stay."""
    kind = type(result)
    if kind is str:
        if not result:
            return _EMPTY
        return derive(result, *inputs)
    if kind is int or kind is float:  # `s|int`: the digits are the input's
        source = _derived_source(found for value in inputs for found in sources_of(value))
        if source is None or source[0] == _TEMPLATE:
            return result
        number = (PInt if kind is int else PFloat)(result)
        number._source = source
        return number
    if kind is list or kind is tuple:
        if any(type(item) is str and item for item in result):
            settled = [derive(item, *inputs) if type(item) is str else item for item in result]
            return settled if kind is list else tuple(settled)
        return result
    return result


# ---- filters that copy -----------------------------------------------------------------------

def _trace_trim(result: Any, value: Any, chars: Any = None, *rest: Any) -> Any:
    if isinstance(value, PStr) and not rest and type(result) is str:
        return value.strip(chars)
    return None


def _trace_join(result: Any, value: Any, separator: Any = "", attribute: Any = None) -> Any:
    if attribute is not None or type(result) is not str:
        return None
    try:
        charge(_parts_price(2 * len(value)))  # the pieces' record, before the work
        items = [item if isinstance(item, str) else str(item) for item in value]
    except TemplateError:
        raise
    except Exception:
        return None
    if not isinstance(separator, str):
        separator = str(separator)
    pieces: List[str] = []
    for position, item in enumerate(items):
        if position:
            pieces.append(separator)
        pieces.append(item)
    if "".join(pieces) != result:
        return None
    return _joined(result, pieces, value, separator, paid=True)


def _trace_indent(result: Any, value: Any, width: Any = 4, first: bool = False,
                  blank: bool = False) -> Any:
    if not isinstance(value, str) or type(result) is not str:
        return None
    pad = width if isinstance(width, str) else (" " * width if isinstance(width, int) else None)
    if pad is None:
        return None
    if not isinstance(pad, PStr):
        pad = derive(pad, width) if isinstance(width, (PInt, PStr)) else \
            template_string(pad, 0, 0) if pad else pad
    lines = (value + "\n").splitlines() if isinstance(value, PStr) else None
    if lines is None:
        return None
    pieces: List[str] = []
    if blank:
        for position, line in enumerate(lines):
            if position:
                pieces.extend(("\n", pad))
            pieces.append(line)
    else:
        pieces.append(lines[0])
        for line in lines[1:]:
            pieces.append("\n")
            if line:
                pieces.append(pad)
            pieces.append(line)
    if first:
        pieces.insert(0, pad)
    if "".join(pieces) != result:
        return None
    # the newlines the filter writes come from the value's line breaks: derived from it
    newline = derive("\n", value) if isinstance(value, PStr) else "\n"
    pieces = [newline if piece == "\n" and type(piece) is str else piece for piece in pieces]
    return _joined(result, pieces, value, width)


def _trace_truncate(result: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    if not isinstance(value, PStr) or type(result) is not str:
        return None
    if result == value:
        return value
    end = kwargs.get("end", args[2] if len(args) > 2 else "...")
    if isinstance(end, str) and result.endswith(end):
        head = result[:len(result) - len(end)]
        if str.startswith(value, head):
            return value._span(0, len(head)) + (end if isinstance(end, PStr)
                                                 else template_string(end, 0, 0))
    return None


def _trace_replace(result: Any, value: Any, old: Any, new: Any, count: Any = None) -> Any:
    if isinstance(value, PStr) and type(result) is str and isinstance(old, str) and \
            isinstance(new, str):
        traced = value.replace(old, new, -1 if count is None else count)
        return traced if traced == result else None
    return None


def _trace_format(result: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(value, str) and type(result) is str and not kwargs:
        return _formatted(result, value, args, lambda fmt, values: str.__mod__(fmt, values))
    return None


def _trace_case(result: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(value, str) and type(result) is str:
        return charwise(result, value)
    return None


def _trace_whole(result: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(value, str) and type(result) is str:
        return derive(result, value, args, tuple(kwargs.values()))
    return None


def _trace_center(result: Any, value: Any, width: Any = 80) -> Any:
    if isinstance(value, PStr) and type(result) is str:
        traced = value.center(width)
        return traced if traced == result else None
    return None


def _trace_tojson(result: Any, value: Any, ensure_ascii: bool = False, indent: Any = None,
                  separators: Any = None, sort_keys: bool = False) -> Any:
    """``tojson``'s text (made by ``json.dumps``, in C) with origins: every quoted string of
    the value (keys too) is found in it, in order; its characters keep their origins where
    the encoding left them as they are, its quotes and escapes are derived from it, and the
    rest (brackets, separators, indentation, numbers, booleans, nulls) is derived from
    everything the value holds."""
    if type(result) is not str:
        return None
    strings: List[Any] = []
    paths: set = set()
    try:
        _json_strings(value, strings, paths, bool(sort_keys))
    except _Untraceable:
        return None
    from ..runtime.filters.common import json_parts  # the very escapers tojson used

    _, encode_basestring, encode_basestring_ascii = json_parts()
    encode_text = encode_basestring_ascii if ensure_ascii else encode_basestring
    stretches = _JSON_STRETCHES_ASCII if ensure_ascii else _JSON_STRETCHES
    structure = _source_for(paths)
    runs: list = []
    cursor = 0
    meter = _Meter()
    for item in strings:
        meter.add(3)  # the structure before it, its quotes
        text = item if isinstance(item, str) else item[1]  # (key, text) for a non-str key
        encoded = encode_text(str.__str__(text))
        at = result.find('"', cursor)
        if at < 0 or not result.startswith(encoded, at):
            return None
        _append(runs, cursor, at, structure, -1)
        if type(text) is not PStr:
            key_source = _source_for(_paths_of([(0, 0, item[0]._source, -1)])) \
                if not isinstance(item, str) and type(item[0]) in (PInt, PFloat) else structure
            _append(runs, at, at + len(encoded), key_source if text else structure, -1)
            cursor = at + len(encoded)
            continue
        item_runs = text._runs
        quote = _source_for(_paths_of(item_runs))
        _append(runs, at, at + 1, quote, -1)
        body = at + 1
        if len(encoded) == len(text) + 2:
            for start, end, source, offset in item_runs:
                _append(runs, start + body, end + body, source, offset)
            meter.add(len(item_runs))
        else:
            position = _json_escaped_runs(str.__str__(text), item_runs, runs, body,
                                          encode_text, stretches, meter)
            if position != at + len(encoded) - 1:
                return None
        _append(runs, at + len(encoded) - 1, at + len(encoded), quote, -1)
        cursor = at + len(encoded)
    _append(runs, cursor, len(result), structure, -1)
    meter.close()
    if not result:
        return result
    return _make(result, runs, paid=True)


def _json_strings(value: Any, strings: List[Any], paths: set, sort_keys: bool) -> None:
    """The strings ``json.dumps`` writes for ``value``, in its order (a non-str dict key as
    ``(key, its text)``), and the input paths of everything in it (into ``paths``)."""
    stack: List[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is PStr:
            strings.append(item)
            paths.update(_paths_of(item._runs))
        elif kind is str:
            strings.append(item)
            if item:
                paths.add(UNKNOWN_PATH)
        elif kind is PInt or kind is PFloat:
            paths.update(_paths_of([(0, 0, item._source, -1)]))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            entries = list(item.items())
            if sort_keys:
                entries.sort(key=lambda entry: entry[0])
            for key, val in reversed(entries):
                stack.append(val)
                stack.append(_KeyMark(key))
        elif type(item) is _KeyMark:
            key = item.key
            if isinstance(key, str):
                strings.append(key)
                paths.update(_paths_of(key._runs) if type(key) is PStr else (UNKNOWN_PATH,))
            elif key is None or isinstance(key, (bool, int, float)):
                text = {None: "null", True: "true", False: "false"}.get(key) \
                    if key is None or isinstance(key, bool) else \
                    (int.__repr__(key) if isinstance(key, int) else float.__repr__(key))
                strings.append((key, text))
                if type(key) in (PInt, PFloat):
                    paths.update(_paths_of([(0, 0, key._source, -1)]))
            else:
                raise _Untraceable
        elif item is None or isinstance(item, (bool, int, float)):
            continue
        else:
            raise _Untraceable


class _KeyMark:
    """A dict key on the walk's stack (told apart from a str value)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


class _Untraceable(Exception):
    pass


def _paths_of(runs: Sequence[tuple]) -> FrozenSet[str]:
    """The input paths (UNKNOWN_PATH for text without origins) a str's runs name."""
    paths: set = set()
    for run in runs:
        source = run[2]
        if source[0] == _INPUT:
            paths.add(source[1])
        elif source[0] == _DERIVED:
            paths.update(source[1])
    return frozenset(paths)


def _source_for(paths: Any) -> tuple:
    return (_DERIVED, frozenset(paths)) if paths else _COMPUTED


#: Stretches of a JSON string's characters that the encoder writes as they are (group 1)
#: or escapes (group 2): without and with ``ensure_ascii``.
_JSON_STRETCHES = re.compile(r'([^\x00-\x1f\\"]+)|([\x00-\x1f\\"]+)')
_JSON_STRETCHES_ASCII = re.compile(r'([ !#-\[\]-~]+)|([^ !#-\[\]-~]+)')


def _json_escaped_runs(text: str, item_runs: Sequence[tuple], runs: list, position: int,
                       encode_text: Callable[[str], str], stretches: Any,
                       meter: "_Meter") -> int:
    """Append the runs of ``text`` as the JSON encoder writes it inside its quotes, from
    ``position``; returns where it ends. Run by run and stretch by stretch (never character
    by character): characters written as they are keep their origins, escapes are derived
    from the characters they stand for (a run without positions is encoded as a whole)."""
    for start, end, source, offset in item_runs:
        escape_source = (_DERIVED, frozenset((source[1],))) if source[0] == _INPUT else source
        if offset < 0 and escape_source is source:
            length = len(encode_text(text[start:end])) - 2
            _append(runs, position, position + length, source, -1)
            position += length
            meter.add(1)
            continue
        for match in stretches.finditer(text, start, end):
            kept = match.group(1)
            if kept is not None:
                _append(runs, position, position + len(kept), source,
                        offset + match.start() - start if offset >= 0 else -1)
                position += len(kept)
            else:
                length = len(encode_text(match.group(2))) - 2
                _append(runs, position, position + length, escape_source, -1)
                position += length
            meter.add(1)
    return position


#: Filters whose result copies parts of their operands: name -> tracer(result, value, *args,
#: **kwargs) giving the result with exact origins, or None to fall back to "derived from all".
FILTER_TRACERS: Dict[str, Callable[..., Any]] = {
    "trim": _trace_trim,
    "join": _trace_join,
    "indent": _trace_indent,
    "truncate": _trace_truncate,
    "replace": _trace_replace,
    "format": _trace_format,
    "upper": _trace_case,
    "lower": _trace_case,
    "capitalize": _trace_whole,
    "title": _trace_whole,
    "center": _trace_center,
    "tojson": _trace_tojson,
}


#: Filters whose result is text computed from the whole value (derived from it): they run on
#: the plain value the str with origins stands for, so that their own work on it is the
#: plain render's (a str method called inside them would otherwise trace pieces that nothing
#: keeps: striptags on 20,000 comments made 180,000 of them).
_WHOLESALE_FILTERS = frozenset({"striptags", "wordwrap", "urlize", "urlencode", "xmlattr",
                                "wordcount", "filesizeformat", "pprint", "title",
                                "capitalize", "int", "float", "round", "abs"})


def traced_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """The filter ``function`` returning results with origins (see :func:`settle`)."""
    tracer = FILTER_TRACERS.get(name)
    plain = _plain_of if name in _WHOLESALE_FILTERS else _same
    from ..runtime.objects import wants_environment

    # `join` is traced from its items: a one-shot iterator (`map(attribute=...)`) is read
    # into a list first, which join would do anyway
    once = name == "join"
    if wants_environment(function):
        def with_environment(env: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
            if once and not isinstance(value, (str, list, tuple, dict)):
                value = _read_once(value)
            result = function(env, plain(value), *args, **kwargs)
            return _settle_filter(tracer, result, value, args, kwargs)

        with_environment.pass_environment = True  # type: ignore[attr-defined]
        for attribute in ("environmentfilter", "jinja_pass_arg"):
            if hasattr(function, attribute):
                setattr(with_environment, attribute, getattr(function, attribute))
        traced = with_environment
    else:
        def traced(value: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            result = function(plain(value), *args, **kwargs)
            return _settle_filter(tracer, result, value, args, kwargs)

    traced.__name__ = getattr(function, "__name__", name)
    return traced


def _plain_of(value: Any) -> Any:
    """The plain value a value with origins stands for (anything else as it is)."""
    from ..runtime.methods import plain_value

    return plain_value(value)


def _same(value: Any) -> Any:
    return value


def _read_once(value: Any) -> Any:
    """The items of an iterator as a list (other values as they are)."""
    if hasattr(value, "__next__") or type(value).__name__ == "LazySequence":
        from ..guard.limits import materialise

        return materialise(value)
    return value


def fill_unknown(result: str, *inputs: Any) -> str:
    """A str with origins whose parts without any (text an operation's own code wrote, such
    as the "..." of truncate) are attributed to the operation's inputs instead."""
    runs = result._runs
    if not any(run[2] is _UNKNOWN_SOURCE or run[2] == _UNKNOWN_SOURCE for run in runs):
        return result
    source = _derived_source(found for value in inputs for found in sources_of(value)) \
        or _COMPUTED
    filled: list = []
    for start, end, run_source, offset in runs:
        if run_source == _UNKNOWN_SOURCE:
            run_source, offset = source, -1
        _append(filled, start, end, run_source, offset)
    return _make(str.__str__(result), filled)


def _SIZE(*args: Any, **kwargs: Any) -> None:
    """The tracer of the filters that count items (``length``, ``count``, ``wordcount``):
    their numbers stay template text."""
    return None


def _settle_filter(tracer: Any, result: Any, value: Any, args: tuple, kwargs: dict) -> Any:
    if result is value:
        return result
    if type(result) is PStr:
        if tracer is not None:
            try:
                traced = tracer(str.__str__(result), value, *args, **kwargs)
            except TemplateError:  # a limit the tracer's own work ran into
                raise
            except Exception:
                traced = None
            if traced is not None:
                return traced
        return fill_unknown(result, value, args, tuple(kwargs.values()))
    if tracer is not None:
        try:
            traced = tracer(result, value, *args, **kwargs)
        except TemplateError:  # a limit the tracer's own work ran into
            raise
        except Exception:
            traced = None
        if traced is not None:
            return traced
    if isinstance(result, Markup) and tracer is not _trace_escape:
        return _settle_markup(result, tracer, value, args, kwargs)
    inputs = (value, args, tuple(kwargs.values()))
    kind = type(result)
    if kind is int and tracer is _SIZE:
        return result  # a count of items: not text of the input (docs/provenance.md: "not tracked")
    if kind in (str, list, tuple, int, float):
        return settle(result, inputs)
    if _is_generator(result):
        return _settled_items(result, inputs)
    return result


def _is_generator(value: Any) -> bool:
    import types

    return isinstance(value, types.GeneratorType)


def _settled_items(items: Any, inputs: Any) -> Any:
    for item in items:
        yield derive(item, *inputs) if type(item) is str else item


def traced_method(function: Callable[..., Any]) -> Callable[..., Any]:
    """A str method (from methods.STR_METHODS) whose result gets the origins it lacks."""
    def method(value: Any, *args: Any, **kwargs: Any) -> Any:
        result = function(value, *args, **kwargs)
        if result is value:
            return result
        inputs = (value, args, tuple(kwargs.values()))
        if type(result) is PStr:
            return fill_unknown(result, *inputs)
        if isinstance(result, Markup):
            return _settle_markup(result, None, value, args, kwargs)
        return settle(result, inputs)

    method.__name__ = getattr(function, "__name__", "method")
    return method


from ..runtime.markup import (Markup)  # noqa: E402  (after PStr: markup imports nothing of this module)


class PMarkup(Markup):
    """Markup that remembers the origins of its characters (``|safe`` or an escape of a str
    with origins). Markup's own operations make more of this class without origins: those
    count as unknown."""

    def __getattr__(self, name: str) -> Any:
        if name == "_runs":
            return ((0, len(self), _UNKNOWN_SOURCE, -1),) if self else ()
        raise AttributeError(name)

    def _as_text(self) -> str:
        return _make(str.__str__(self), list(self._runs))

    def __iter__(self) -> Any:  # a Markup's characters are plain str, with their origins
        return iter(self._as_text())

    def __getitem__(self, key: Any) -> Any:
        result = Markup.__getitem__(self, key)
        marked = PMarkup(result)
        marked._runs = runs_of(self._as_text()[key]) if result else ()
        return marked

    # `markup + text` and `text + markup` escape the text and join: each side keeps its
    # origins (the text's as its escape keeps them), where Markup's own would make them unknown
    def __add__(self, other: Any) -> Any:
        result = Markup.__add__(self, other)
        if result is NotImplemented:
            return result
        return _joined_markup(result, (self, escape_with_origins(other)))

    def __radd__(self, other: Any) -> Any:
        result = Markup.__radd__(self, other)
        if result is NotImplemented:
            return result
        return _joined_markup(result, (escape_with_origins(other), self))


def _repeated_markup(self: Any, count: Any) -> Any:
    result = Markup.__mul__(self, count)
    if result is NotImplemented or not result:
        return result
    marked = PMarkup(result)
    marked._runs = tuple(_repeated(self._runs, len(self), count))
    return marked


def _joined_markup_items(self: Any, seq: Any) -> Any:
    items = [escape_with_origins(item) for item in seq]
    result = Markup.join(self, items)
    pieces = [self] * (2 * len(items) - 1) if items else []
    pieces[::2] = items
    return _joined_markup(result, tuple(pieces))


def _markup_method_with_origins(name: str) -> Callable[..., Any]:
    """Markup's method ``name`` on PMarkup: its Markup results (alone, or in the list or
    tuple it returns) derived from the text and the arguments, where Markup's own would
    leave them without origins (unknown)."""
    original = getattr(Markup, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if isinstance(result, Markup):
            return _settle_markup(result, None, self, args, kwargs)
        if type(result) in (list, tuple):
            settled = [_settle_markup(item, None, self, args, kwargs)
                       if isinstance(item, Markup) else item for item in result]
            return settled if type(result) is list else tuple(settled)
        return result

    method.__name__ = name
    return method


PMarkup.__mul__ = PMarkup.__rmul__ = _repeated_markup  # type: ignore[assignment,method-assign]
PMarkup.join = _joined_markup_items  # type: ignore[assignment,method-assign]
for _name in ("__mod__", "split", "rsplit", "splitlines", "partition", "rpartition", "replace",
              "ljust", "rjust", "center", "format", "capitalize", "title", "lower", "upper",
              "lstrip", "rstrip", "strip", "translate", "expandtabs", "swapcase", "zfill",
              "casefold", "removeprefix", "removesuffix"):
    setattr(PMarkup, _name, _markup_method_with_origins(_name))


def _joined_markup(result: Any, pieces: Tuple[Any, ...]) -> Any:
    """``result`` (Markup, the pieces joined) as PMarkup with the pieces' origins; as it is
    when the pieces do not make it up (then its characters count as unknown)."""
    if str.__str__(result) != "".join(map(str.__str__, pieces)):
        return result
    marked = PMarkup(result)
    runs: list = []
    _shifted(runs, pieces)  # (runs_of reads a PMarkup's own runs)
    marked._runs = tuple(runs)
    return marked


PMarkup.__name__ = PMarkup.__qualname__ = "Markup"
PMarkup.__module__ = Markup.__module__


def _trace_safe(result: Any, value: Any) -> Any:
    if type(value) is PStr and type(result) is Markup and str.__eq__(result, value):
        marked = PMarkup(result)
        marked._runs = value._runs
        return marked
    return None


FILTER_TRACERS["safe"] = _trace_safe


def mark_safe(text: str) -> Any:
    """``Markup(text)`` keeping the origins of ``text``."""
    marked = PMarkup(text)
    marked._runs = runs_of(text) if text else ()
    return marked

#: Stretches of text escaping leaves as they are, and stretches it replaces with entities.
_HTML_STRETCHES = re.compile(r"[^&<>\"']+|[&<>\"']+")


def escape_with_origins(value: Any) -> Any:
    """``markup.escape(value)`` whose result remembers where its characters came from: the
    characters left as they are keep their origins, an entity is derived from the character
    it replaces."""
    from ..runtime.markup import escape

    # (a str with origins is escaped as the plain text it is: its own replace would trace)
    result = escape(str.__str__(value) if type(value) is PStr else value)
    if isinstance(value, Markup) and not isinstance(value, PMarkup):
        return result
    return _escaped_origins(result, value)


def _escaped_origins(result: Any, value: Any) -> Any:
    if type(result) is PMarkup:
        return result
    if not isinstance(value, str):
        value = _printed_value(value)
    text = str.__str__(value)
    runs: list = []
    position = 0
    meter = _Meter()
    # run by run, stretch by stretch (never character by character): the entities of an
    # input's characters are derived from it; a run without positions escapes as a whole
    for start, end, source, offset in runs_of(value):
        entity_source = (_DERIVED, frozenset((source[1],))) if source[0] == _INPUT else source
        if offset < 0 and entity_source is source:
            length = len(escape_text(text[start:end]))
            _append(runs, position, position + length, source, -1)
            position += length
            meter.add(1)
            continue
        for match in _HTML_STRETCHES.finditer(text, start, end):
            piece = match.group()
            if piece[0] in "&<>\"'":
                length = len(escape_text(piece))
                _append(runs, position, position + length, entity_source, -1)
            else:
                length = len(piece)
                _append(runs, position, position + length, source,
                        offset + match.start() - start if offset >= 0 else -1)
            position += length
            meter.add(1)
    meter.close()
    if str.__str__(escape_text(text)) != str.__str__(result):
        runs = list(derive(str.__str__(result), value)._runs) if result else []
    marked = PMarkup(result)
    marked._runs = tuple(runs)
    return marked


def escape_text(char: str) -> str:
    from ..runtime.markup import escape

    return escape(char)


def _printed_value(value: Any) -> str:
    """``str(value)`` with origins (a number from the input, a list of strings)."""
    if type(value) in (PInt, PFloat):
        return str(value)
    return derive(str(value), value)


def _trace_escape(result: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(result, Markup) and type(result) is not PMarkup:
        return _escaped_origins(result, value)
    return None


FILTER_TRACERS.update(e=_trace_escape, escape=_trace_escape, forceescape=_trace_escape)
FILTER_TRACERS.update(length=_SIZE, count=_SIZE, wordcount=_SIZE)


def printable(value: str) -> str:
    """A str about to be printed, as a str with origins when it has any."""
    if type(value) is PMarkup:
        return _make(str.__str__(value), list(value._runs))
    return derive(str.__str__(value), value)


def _register_methods() -> None:
    """Templates call str methods on PStr (and Markup methods on PMarkup) through the
    sandbox's method table: give these classes tables of the same methods whose results get
    the origins they lack."""
    from ..runtime.methods import (_TABLE_OF_CLASS, MARKUP_METHODS, PLAIN_VALUE_OF, STR_METHODS,
                                   STR_STAND_INS)

    _TABLE_OF_CLASS[PStr] = ({name: traced_method(function)
                              for name, function in STR_METHODS.items()}, str)
    _TABLE_OF_CLASS[PMarkup] = ({name: traced_method(function)
                                 for name, function in MARKUP_METHODS.items()}, str)
    # what a template may see of them: the plain value's attributes, none of these classes'
    # own (their private helpers and record)
    PLAIN_VALUE_OF.update({PStr: str.__str__, PMarkup: lambda value: Markup(str.__str__(value)),
                           PInt: int, PFloat: float})
    STR_STAND_INS.add(PStr)


def _settle_markup(result: Any, tracer: Any, value: Any, args: tuple, kwargs: dict) -> Any:
    """Markup made from inputs (an operation on ``|safe`` text) as PMarkup with origins: the
    tracer's when it has one for the text, else the origins the operation gave it (Markup's
    own methods on PMarkup give them), else derived from the inputs."""
    has_runs = type(result) is PMarkup and "_runs" in result.__dict__
    if has_runs and tracer is None:
        return result
    text = str.__str__(result)
    traced = None
    if tracer is not None:
        plain_value = printable(value) if isinstance(value, Markup) else value
        try:
            traced = tracer(text, plain_value, *args, **kwargs)
        except TemplateError:  # a limit the tracer's own work ran into
            raise
        except Exception:
            traced = None
    if type(traced) is not PStr or str.__str__(traced) != text:
        if has_runs:
            return result
        traced = derive(text, value, args, tuple(kwargs.values()))
    marked = PMarkup(result)
    marked._runs = traced._runs if text else ()
    return marked


_register_methods()

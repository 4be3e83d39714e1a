"""``minijinja-py render --provenance``: the rendered prompt with the template's own text and the
text that came from the input told apart.

Each character of a provenance render (:meth:`ChatTemplate.render_with_provenance`) has one of
four origins (:class:`~minijinja_py.provenance.origins.Run`): ``template`` (the template's own text),
``input`` (copied verbatim from a variable: a message, a tool schema, a ``--var``, a special
token), ``derived`` (computed from input: JSON-encoded, escaped, case-changed...) and
``unknown`` (made by something that kept no record: treat it as input). Two displays:

- **colours** (a terminal, or ``--color always``): template text as it is, verbatim input green,
  derived input cyan, unknown bold yellow; with ``--spans`` the output of ``{% generation %}``
  blocks is also underlined. Every line is closed with a reset, so pagers (``less -R``) and
  ``grep`` show each line on its own. On a terminal (in colour or not) the prompt's own control
  characters are shown as symbols (ESC as ``␛``, CR as ``␍``), with a note on stderr, so an
  escape sequence in a message cannot fake the colours or hide the markers.
- **plain markers** (not a terminal, ``--color never``, or ``NO_COLOR``): template text as it
  is, each verbatim copy of one input wrapped as ``⟪…⟫``, derived text as ``⦅…⦆``, unknown as
  ``⁅…⁆``; text that mixes derived and verbatim input (``tojson`` of a tool schema) is one
  ``⦅…⦆`` with the verbatim pieces marked inside it: ``⦅{"⟪city⟫": "⟪Vienna⟫"}⦆``. With
  ``--spans`` the generation spans are marked ``⟦…⟧`` as usual. Deleting the marker characters
  (six, eight with ``--spans``) gives back the prompt exactly, unless the prompt itself holds
  one of them: a note on stderr then says so (``--json`` is exact in every case).

Colour follows the usual conventions: ``--color always``/``never`` win; with ``auto`` (the
default) a non-empty ``NO_COLOR`` turns colour off, else a non-empty ``FORCE_COLOR`` turns it
on, else ``TERM=dumb`` turns it off, else colour is on exactly when stdout is a terminal.
"""

from __future__ import annotations

import bisect
import os
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = ["KINDS", "MARKERS", "COLOURS", "SPAN_STYLE", "use_colour", "segments", "span_events",
           "span_marks_at", "mark", "colourize", "show_controls", "count_controls", "legend",
           "marker_collisions", "strip_markers", "strip_colours"]

#: The origin kinds, in the order the legend lists them.
KINDS = ("template", "input", "derived", "unknown")

#: The plain markers of each kind (template text is left bare; see :func:`mark`).
MARKERS: Dict[str, Tuple[str, str]] = {
    "input": ("\u27ea", "\u27eb"),    # ⟪ ⟫  mathematical double angle brackets
    "derived": ("\u2985", "\u2986"),  # ⦅ ⦆  white parentheses
    "unknown": ("\u2045", "\u2046"),  # ⁅ ⁆  square brackets with quill
}

#: ANSI SGR parameters of each kind ("" = the terminal's default).
COLOURS: Dict[str, str] = {"template": "", "input": "32", "derived": "36", "unknown": "1;33"}
#: Added for characters inside a {% generation %} span when spans are shown: underline.
SPAN_STYLE = "4"

_RESET = "\x1b[0m"
_SGR = re.compile("\x1b\\[[0-9;]*m")

_DESCRIPTIONS = {
    "template": "template text",
    "input": "input copied verbatim",
    "derived": "derived from input, e.g. JSON-encoded",
    "unknown": "unknown origin (treat as input)",
}


def use_colour(choice: str, stream: Any, environ: Optional[Dict[str, str]] = None) -> bool:
    """Whether to colour ``stream`` for ``--color choice`` (``auto``/``always``/``never``)."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    if env.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def segments(length: int, runs: Sequence[Any], spans: Sequence[Tuple[int, int]] = ()
             ) -> List[Tuple[int, int, str, int, int]]:
    """The text ``[0, length)`` cut at every run and span boundary: ``(start, end, kind,
    span_depth, run_index)`` for each piece, in order. Text no run covers counts as
    ``unknown`` (run index -1)."""
    cuts = {0, length}
    for run in runs:
        cuts.update((min(max(run.start, 0), length), min(max(run.end, 0), length)))
    for start, end in spans:
        cuts.update((min(max(start, 0), length), min(max(end, 0), length)))
    ordered = sorted(cuts)
    starts = [run.start for run in runs]
    opens, closes, _ = span_events(spans)
    depth = 0
    pieces = []
    for start, end in zip(ordered, ordered[1:]):
        depth += opens.get(start, 0) - closes.get(start, 0)
        index = bisect.bisect_right(starts, start) - 1
        kind = "unknown"
        if index >= 0 and runs[index].start <= start < runs[index].end:
            kind = runs[index].origin.kind
            if kind not in COLOURS:
                kind = "unknown"
        else:
            index = -1
        pieces.append((start, end, kind, depth, index))
    return pieces


def span_events(spans: Sequence[Tuple[int, int]]
                ) -> Tuple[Dict[int, int], Dict[int, int], Dict[int, int]]:
    """How many spans open, close, and are empty at each offset: (opens, closes, empties)."""
    opens: Dict[int, int] = {}
    closes: Dict[int, int] = {}
    empties: Dict[int, int] = {}
    for start, end in spans:
        if start < end:
            opens[start] = opens.get(start, 0) + 1
            closes[end] = closes.get(end, 0) + 1
        elif start == end:
            empties[start] = empties.get(start, 0) + 1
    return opens, closes, empties


def span_marks_at(offset: int, opens: Dict[int, int], closes: Dict[int, int],
                  empties: Dict[int, int], marks: Tuple[str, str]) -> str:
    """The span marks at ``offset``: the closes, the empty spans, then the opens."""
    return (marks[1] * closes.get(offset, 0) + (marks[0] + marks[1]) * empties.get(offset, 0)
            + marks[0] * opens.get(offset, 0))


def mark(text: str, runs: Sequence[Any], spans: Sequence[Tuple[int, int]] = (),
         span_marks: Optional[Tuple[str, str]] = None) -> str:
    """``text`` with the input wrapped in :data:`MARKERS`; with ``span_marks`` also the
    ``spans`` wrapped in them.

    Each maximal stretch of text that is not the template's is one group. Each verbatim copy
    of one input (one run) is wrapped on its own (``⟪Hello⟫⟪</s>⟫``: a message, then a special
    token); adjacent derived (or unknown) text is wrapped as one. A group that mixes derived
    text with other kinds (JSON that ``tojson`` made of a tool schema: derived punctuation
    around verbatim keys and strings) is wrapped in the derived markers as a whole, its
    verbatim and unknown pieces marked inside it: ``⦅{"⟪city⟫": "⟪Vienna⟫"}⦆``. Groups end at
    span marks, so the two never interleave.
    """
    if span_marks is None:
        spans = ()
    opens, closes, empties = span_events(spans)
    out: List[str] = []
    group: List[Tuple[str, int, List[str]]] = []  # (kind, run index, pieces) merged if allowed

    def flush() -> None:
        nested = "derived" in {kind for kind, _, _ in group} and len(group) > 1
        if nested:
            out.append(MARKERS["derived"][0])
        for kind, _, pieces in group:
            if nested and kind == "derived":
                out.extend(pieces)
            else:
                out.append(MARKERS[kind][0])
                out.extend(pieces)
                out.append(MARKERS[kind][1])
        if nested:
            out.append(MARKERS["derived"][1])
        group.clear()

    for start, end, kind, _depth, index in segments(len(text), runs, spans):
        if span_marks is not None and (start in opens or start in closes or start in empties):
            flush()
            out.append(span_marks_at(start, opens, closes, empties, span_marks))
        if kind == "template":
            flush()
            out.append(text[start:end])
        elif group and group[-1][0] == kind and (kind != "input" or group[-1][1] == index):
            group[-1][2].append(text[start:end])
        else:
            group.append((kind, index, [text[start:end]]))
    flush()
    if span_marks is not None:
        out.append(span_marks_at(len(text), opens, closes, empties, span_marks))
    return "".join(out)


def _styled(text: str, style: str) -> str:
    """``text`` in SGR ``style``, reset before every newline and reopened after it."""
    if not style:
        return text
    return "\n".join(f"\x1b[{style}m{line}{_RESET}" if line else ""
                     for line in text.split("\n"))


#: Characters a terminal acts on rather than shows (C0 but tab and newline, DEL, C1): in the
#: prompt they could move the cursor or fake the colours, so a terminal display shows symbols.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _control_symbol(match: "re.Match[str]") -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ ... ␟ (␛ for ESC, ␍ for CR)
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def count_controls(text: str) -> int:
    """How many characters :func:`show_controls` would replace."""
    return len(_CONTROLS.findall(text))


def show_controls(text: str) -> str:
    """``text`` with terminal control characters as visible symbols (``ESC`` as ``␛``)."""
    return _CONTROLS.sub(_control_symbol, text)


def colourize(text: str, runs: Sequence[Any], spans: Sequence[Tuple[int, int]] = (),
              show_spans: bool = False) -> str:
    """``text`` with ANSI colours by kind (:data:`COLOURS`), generation spans underlined when
    ``show_spans``. Control characters of the text are shown as symbols
    (:func:`show_controls`): an escape sequence in a message must not fake the colours."""
    out: List[str] = []
    pending: List[str] = []
    pending_style: Optional[str] = None
    for start, end, kind, depth, _ in segments(len(text), runs,
                                               spans if show_spans else ()):
        style = ";".join(part for part in (COLOURS[kind], SPAN_STYLE if depth else "") if part)
        if style != pending_style and pending:
            out.append(_styled("".join(pending), pending_style or ""))
            pending = []
        pending_style = style
        pending.append(show_controls(text[start:end]))
    if pending:
        out.append(_styled("".join(pending), pending_style or ""))
    return "".join(out)


def marker_collisions(text: str, span_marks: Optional[Tuple[str, str]] = None) -> List[str]:
    """The marker characters that the text itself holds (each makes the markers ambiguous)."""
    chars = [char for pair in MARKERS.values() for char in pair]
    if span_marks is not None:
        chars += list(span_marks)
    return [char for char in chars if char in text]


def strip_markers(marked: str, span_marks: Optional[Tuple[str, str]] = None) -> str:
    """``marked`` without the marker characters: the plain prompt again (when the prompt holds
    none of them: see :func:`marker_collisions`)."""
    chars = [char for pair in MARKERS.values() for char in pair]
    if span_marks is not None:
        chars += list(span_marks)
    return marked.translate({ord(char): None for char in chars})


def strip_colours(coloured: str) -> str:
    """``coloured`` without the SGR sequences :func:`colourize` adds."""
    return _SGR.sub("", coloured)


def _count(text_length: int, runs: Iterable[Any]) -> Dict[str, int]:
    counts = dict.fromkeys(KINDS, 0)
    covered = 0
    for run in runs:
        kind = run.origin.kind if run.origin.kind in counts else "unknown"
        size = max(0, min(run.end, text_length) - max(run.start, 0))
        counts[kind] += size
        covered += size
    counts["unknown"] += max(0, text_length - covered)
    return counts


def legend(text: str, runs: Sequence[Any], colour: bool,
           span_marks: Optional[Tuple[str, str]] = None) -> List[str]:
    """The lines of the legend ``render --provenance`` prints on stderr: what each colour or
    marker means, and how many characters each kind has."""
    entries = []
    for kind in KINDS:
        description = _DESCRIPTIONS[kind]
        if colour:
            entries.append(_styled(description, COLOURS[kind]) if COLOURS[kind]
                           else f"{description} (uncoloured)")
        elif kind == "template":
            entries.append(f"{description} unmarked")
        else:
            opening, closing = MARKERS[kind]
            if kind == "derived":
                description += f"; {MARKERS['input'][0]}{MARKERS['input'][1]} inside: verbatim"
            entries.append(f"{opening}{description}{closing}")
    if span_marks is not None:
        what = "{% generation %} output"
        entries.append(_styled(what, SPAN_STYLE) + " (underlined)" if colour
                       else f"{span_marks[0]}{what}{span_marks[1]}")
    counts = _count(len(text), runs)
    total = len(text)
    summary = ", ".join(f"{counts[kind]:,} {kind}" for kind in KINDS if counts[kind]
                        or kind != "unknown")
    return [f"provenance: {'; '.join(entries)}",
            f"provenance: {total:,} characters: {summary}"]

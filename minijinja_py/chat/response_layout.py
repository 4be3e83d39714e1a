"""Derive how a chat template writes an assistant message, from provenance renders of probes.

The inverse of a template starts here: render the conversation with probe assistant messages
appended (distinctive content, reasoning, one and two tool calls with two arguments each) and
read, from :meth:`ChatTemplate.render_with_provenance`, which characters each field of the probe
wrote. Everything between those input runs is the template's own text, so the markers of a
field are exactly that text: no string diffing against other renders, no table of families.

The result is a :class:`ResponseLayout` (plain data); :mod:`minijinja_py.chat.response_parser`
parses generated text with it and exports it as a transformers ``response_template``.
What the probes could not witness is listed in ``ResponseLayout.unsupported``, never guessed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import LimitExceededError, TemplateError
from .probe_deadline import ProbeDeadline

#: What the probes write. Plain ASCII words that no template rewrites (no whitespace at the
#: ends, which templates often trim; no characters JSON or HTML would escape).
PROBE_CONTENT = "Probe reply text 7"
PROBE_REASONING = "Probe thought text 7"
PROBE_NAMES = ("probe_alpha", "probe_beta")
PROBE_ARGUMENTS = ({"pkey": "Pval one", "qkey": "Qval two"},
                   {"pkey": "Pval three", "qkey": "Qval four"})
PROBE_IDS = ("call0Probe1", "call1Probe2")  # alphanumeric, >= 9 characters (Mistral checks)

_PATH_FIELD = re.compile(r"messages\[(\d+)\]\.(.*)\Z", re.S)
_CALL_FIELD = re.compile(r"tool_calls\[(\d+)\](.*)\Z", re.S)
_ARGUMENT_KEY = re.compile(r'\.function\.arguments\{(".*")\}\Z', re.S)
_ARGUMENT_VALUE = re.compile(r"\.function\.arguments\.(.+)\Z", re.S)
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
Path = Tuple[str, ...]  # keys into a decoded JSON value


@dataclass(frozen=True)
class Piece:
    """A stretch of one probe turn: ``kind`` is ``lit`` (template text, or an input that is not
    part of the probe message), ``content``, ``reasoning`` or ``call``; for calls, ``index``
    is the call's number and ``part`` one of ``name``, ``id``, ``type``, ``key``, ``value``,
    ``args`` (JSON syntax around the arguments) or ``other``; ``key`` names the argument."""

    kind: str
    text: str
    index: int = -1
    part: str = ""
    key: str = ""


@dataclass(frozen=True)
class KeyValueLayout:
    """Per-key arguments: ``key_open`` KEY ``key_close`` VALUE ``value_close``, pairs
    separated by ``separator``. ``quote`` is the quote character the template puts around
    string values (``""`` when it prints them bare)."""

    key_open: str
    key_close: str
    value_close: str
    separator: str
    quote: str = ""


@dataclass(frozen=True)
class CallLayout:
    """How one tool call is written between ``open`` and ``close`` (stripped markers).

    ``body`` is ``json`` (a JSON object; ``name_path``/``arguments_path``/``id_path`` say
    where its fields are) or ``sequence`` (``elements``: literal text and the slots
    ``name``, ``id``, ``type``, ``args_json`` and ``kv``). ``json_list`` marks calls
    written together as one JSON array between ``section_open`` and ``section_close``."""

    open: str
    close: str
    section_open: str
    section_close: str
    separator: str
    body: str
    elements: Tuple[Tuple[str, Any], ...] = ()
    name_path: Tuple[str, ...] = ()
    arguments_path: Tuple[str, ...] = ()
    id_path: Tuple[str, ...] = ()
    json_list: bool = False
    arguments_as_string: bool = False


@dataclass(frozen=True)
class ResponseLayout:
    """What the probes showed about the assistant turn the model generates.

    ``start`` is the prompt text from the start of the assistant turn (the parser reads
    ``start + generated text``); ``header`` the turn's opening text that no field owns;
    ``content_open`` the markers a template writes before content;
    ``reasoning`` the (open, close) markers; ``end`` the stripped end-of-turn markers;
    ``calls`` the tool-call layout; ``unsupported`` maps a field to why it is not parsed."""

    start: str
    header: str
    content_open: Tuple[str, ...]
    reasoning: Optional[Tuple[str, str]]
    end: Tuple[str, ...]
    calls: Optional[CallLayout]
    unsupported: Mapping[str, str] = field(default_factory=dict)
    content_after_calls: bool = False
    content_wrapped: bool = False  # content always follows content_open[0]
    prefill: str = ""  # template text the generation prompt adds after the header


class _Probe:
    """One probe turn: its pieces and text, or the error that stopped its render."""

    def __init__(self, pieces: Optional[List[Piece]], error: Optional[str] = None) -> None:
        self.pieces = pieces or []
        self.error = error

    def text_of(self, kind: str, index: int = -1) -> str:
        return "".join(p.text for p in self.pieces if p.kind == kind and p.index == index)

    def literal_around(self, kind: str, index: int = -1) -> Tuple[str, str]:
        """The template text just before and just after the pieces of ``kind`` (up to the
        neighbouring field pieces)."""
        positions = [i for i, p in enumerate(self.pieces) if p.kind == kind and p.index == index]
        before = _literal_run(self.pieces, positions[0] - 1, -1)
        after = _literal_run(self.pieces, positions[-1] + 1, 1)
        return before, after


def _literal_run(pieces: Sequence[Piece], start: int, step: int) -> str:
    collected = []
    i = start
    while 0 <= i < len(pieces) and pieces[i].kind == "lit":
        collected.append(pieces[i].text)
        i += step
    return "".join(collected[::step])


def _classify(path: str, message_index: int) -> Piece:
    """The piece kind of an input path (text is filled in by the caller)."""
    match = _PATH_FIELD.match(path)
    if not match or int(match.group(1)) != message_index:
        return Piece("lit", "")
    rest = match.group(2)
    if rest == "content" or rest.startswith("content["):
        return Piece("content", "")
    if rest.split(".")[0].split("[")[0] in _REASONING_KEYS:
        return Piece("reasoning", "")
    call = _CALL_FIELD.match(rest)
    if not call:
        return Piece("lit", "")
    index, tail = int(call.group(1)), call.group(2)
    key = _ARGUMENT_KEY.match(tail)
    if key:
        return Piece("call", "", index, "key", json.loads(key.group(1)))
    value = _ARGUMENT_VALUE.match(tail)
    if value:
        return Piece("call", "", index, "value", value.group(1).split(".")[0].split("[")[0])
    parts = {".function.name": "name", ".id": "id", ".type": "type",
             ".function.arguments": "args"}
    return Piece("call", "", index, parts.get(tail, "other"))


def _json_syntax(piece: Piece) -> Piece:
    """Derived text around an argument (quotes, braces, separators) is the arguments' JSON."""
    if piece.kind == "call" and piece.part in ("key", "value", "args"):
        return Piece("call", "", piece.index, "args")
    return piece


def _pieces(result: Any, start: int, message_index: int) -> List[Piece]:
    """The provenance runs of ``result.text[start:]`` as pieces, neighbours of one kind merged."""
    pieces: List[Piece] = []
    for run in result.runs:
        if run.end <= start:
            continue
        text = result.text[max(run.start, start):run.end]
        origin = run.origin
        if origin.kind == "input":
            piece = _classify(origin.path, message_index)
        elif origin.kind == "derived":
            kinds = {_json_syntax(_classify(p, message_index)) for p in origin.paths}
            piece = kinds.pop() if len(kinds) == 1 else Piece("lit", "")
        else:
            piece = Piece("lit", "")
        last = pieces[-1] if pieces else None
        if last and (last.kind, last.index, last.part, last.key) == (
                piece.kind, piece.index, piece.part, piece.key):
            pieces[-1] = Piece(last.kind, last.text + text, last.index, last.part, last.key)
        else:
            pieces.append(Piece(piece.kind, text, piece.index, piece.part, piece.key))
    return pieces


def _common_prefix(a: str, b: str) -> int:
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


_OPENERS, _CLOSERS = "<[{(", ">]})"


def _token_start(text: str, cut: int) -> int:
    """``cut``, moved back so that it does not split a token such as ``<think>`` (a prompt
    ``<|assistant|></think>`` and a turn ``<|assistant|><think>`` share ``<|assistant|><``)."""
    while 0 < cut < len(text) and not (text[cut - 1].isspace() or text[cut] in _OPENERS
                                        or text[cut - 1] in _CLOSERS):
        cut -= 1
    return cut


def _common_suffix(a: str, b: str) -> int:
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def split_repeat(before: str, between: str, after: str) -> Tuple[str, str, str]:
    """Split the text between two repeated items into (close of the first, separator, open
    of the next): the open is what ``between`` shares with the text before the first item,
    the close what it shares with the text after the last one."""
    opening = _common_suffix(before, between)
    closing = min(_common_prefix(after, between), len(between) - opening)
    middle_end = len(between) - opening
    return between[:closing], between[closing:middle_end], between[middle_end:]


class _ProbeRenderer:
    """Renders the conversation with probe assistant messages appended.

    A probe the template refuses (a TemplateError) says what it cannot write; one that
    exceeds a limit refuses the template (the error goes to the caller after that one probe),
    and all the renders of one derivation share one render's time limit (probe_deadline.py).
    """

    def __init__(self, template: Any, messages: Optional[Sequence[Any]], tools: Any,
                 add_generation_prompt: bool, continue_final_message: Any,
                 template_kwargs: Dict[str, Any]) -> None:
        self.template = template
        self.tools = tools
        self.kwargs = template_kwargs
        self.deadline = ProbeDeadline(template, "response-parser probes")
        messages = list(messages) if messages else [{"role": "user", "content": "Hello"}]
        self.continued = messages[-1] if continue_final_message else None
        self.history = messages[:-1] if continue_final_message else messages
        self.prompt = template.render(messages, tools=tools,
                                      add_generation_prompt=add_generation_prompt,
                                      continue_final_message=continue_final_message,
                                      **template_kwargs)
        self.deadline.check()
        self.base = self._base_text()

    def _probe(self, render: Any, messages: List[Any]) -> Any:
        """``render(messages, ...)`` in the derivation's context, counted against its
        deadline; what it raises is the caller's to read."""
        try:
            return render(messages, tools=self.tools, **self.kwargs)
        finally:
            self.deadline.check()

    def _base_text(self) -> str:
        if not self.history:
            return ""
        try:
            base = self._probe(self.template.render, self.history)
        except LimitExceededError:
            raise
        except TemplateError:
            return ""
        if self.prompt.startswith(base):
            return base
        return self.prompt[:_common_prefix(base, self.prompt)]

    def merged(self, message: Dict[str, Any]) -> Dict[str, Any]:
        """The probe as the final message (continuing the prompt's final message)."""
        if self.continued is None:
            return message
        merged = {**self.continued, **message}
        prefix = self.continued.get("content") or ""
        if isinstance(prefix, str) and isinstance(message.get("content"), str):
            merged["content"] = prefix + message["content"]
        return merged

    def render_text(self, message: Dict[str, Any]) -> Optional[str]:
        """The text of the probe's assistant turn (None when the template refuses it)."""
        try:
            text = self._probe(self.template.render, [*self.history, self.merged(message)])
        except LimitExceededError:
            raise
        except TemplateError:
            return None
        return text[len(self.base):] if text.startswith(self.base) else None

    def render(self, message: Dict[str, Any]) -> Tuple[_Probe, str]:
        """The probe's turn (pieces from the start of the assistant turn) and the full text."""
        message = self.merged(message)
        try:
            result = self._probe(self.template.render_with_provenance, [*self.history, message])
        except LimitExceededError:
            raise
        except TemplateError as error:
            return _Probe(None, f"{type(error).__name__}: {str(error).splitlines()[0]}"), ""
        start = len(self.base) if result.text.startswith(self.base) else _common_prefix(
            result.text, self.base)
        return _Probe(_pieces(result, start, len(self.history))), result.text


class _Probes:
    """The probe turns, each rendered when first asked for (most templates need few)."""

    def __init__(self, renderer: _ProbeRenderer) -> None:
        self._renderer = renderer
        self._messages = _probe_messages()
        self._done: Dict[str, _Probe] = {}

    def __getitem__(self, name: str) -> _Probe:
        if name not in self._done:
            self._done[name] = self._renderer.render(self._messages[name])[0]
        return self._done[name]


def _probe_call(index: int, arguments: Any) -> Dict[str, Any]:
    return {"id": PROBE_IDS[index], "type": "function",
            "function": {"name": PROBE_NAMES[index], "arguments": arguments}}


def _probe_messages() -> Dict[str, Dict[str, Any]]:
    calls = [_probe_call(i, PROBE_ARGUMENTS[i]) for i in range(2)]
    return {
        "content": {"role": "assistant", "content": PROBE_CONTENT},
        "reasoning": {"role": "assistant", "content": PROBE_CONTENT,
                      "reasoning_content": PROBE_REASONING},
        "one_call": {"role": "assistant", "content": PROBE_CONTENT, "tool_calls": calls[:1]},
        "two_calls": {"role": "assistant", "content": PROBE_CONTENT, "tool_calls": calls},
        # Some templates write tool calls only when the message has no content.
        "one_call_bare": {"role": "assistant", "content": None, "tool_calls": calls[:1]},
        "two_calls_bare": {"role": "assistant", "content": None, "tool_calls": calls},
    }


def _spans(pieces: Sequence[Piece]) -> List[Tuple[int, int]]:
    spans, offset = [], 0
    for piece in pieces:
        spans.append((offset, offset + len(piece.text)))
        offset += len(piece.text)
    return spans


def _find_path(value: Any, wanted: Any, path: Tuple[str, ...] = ()) -> Optional[Tuple[str, ...]]:
    """The key path under which ``wanted`` sits in a decoded JSON value (dicts only)."""
    if value == wanted or (isinstance(value, str) and _json_equals(value, wanted)):
        return path
    if isinstance(value, dict):
        for key, item in value.items():
            found = _find_path(item, wanted, path + (key,))
            if found is not None:
                return found
    return None


def _json_equals(text: str, wanted: Any) -> bool:
    if not isinstance(wanted, dict):
        return False
    try:
        return json.loads(text) == wanted
    except ValueError:
        return False


def _json_call(turn: str, start: int, end: int, index: int, floor: int
               ) -> Optional[Tuple[int, int, Path, Path, Path, bool]]:
    """The JSON object (from a ``{`` at or before ``start``, after ``floor``) that holds call
    ``index`` whole: (object start, object end, name path, arguments path, id path, whether
    the arguments are a JSON string inside it)."""
    decoder = json.JSONDecoder()
    position = turn.rfind("{", floor, start + 1)
    while position >= floor and position != -1:
        try:
            value, stop = decoder.raw_decode(turn, position)
        except ValueError:
            value, stop = None, -1
        if isinstance(value, dict) and stop >= end:
            name = _find_path(value, PROBE_NAMES[index])
            arguments = _find_path(value, PROBE_ARGUMENTS[index])
            if name is not None and arguments is not None and name and arguments:
                call_id = _find_path(value, PROBE_IDS[index]) or ()
                holder: Any = value
                for key in arguments:
                    holder = holder[key]
                return position, stop, name, arguments, call_id, isinstance(holder, str)
        position = turn.rfind("{", floor, position) if position > floor else -1
    return None


def _call_span(probe: _Probe, index: int) -> Optional[Tuple[int, int, int, int]]:
    """(first piece, last piece, start offset, end offset) of call ``index``'s pieces."""
    positions = [i for i, p in enumerate(probe.pieces) if p.kind == "call" and p.index == index]
    if not positions:
        return None
    spans = _spans(probe.pieces)
    return positions[0], positions[-1], spans[positions[0]][0], spans[positions[-1]][1]


def _previous_field_end(probe: _Probe, piece_index: int) -> int:
    spans = _spans(probe.pieces)
    for i in range(piece_index - 1, -1, -1):
        if probe.pieces[i].kind != "lit":
            return spans[i][1]
    return 0


def _next_field_start(probe: _Probe, piece_index: int) -> int:
    spans = _spans(probe.pieces)
    for i in range(piece_index + 1, len(probe.pieces)):
        if probe.pieces[i].kind != "lit":
            return spans[i][0]
    return spans[-1][1] if spans else 0


def _call_bounds(probe: _Probe, index: int) -> Optional[Dict[str, Any]]:
    """Where call ``index`` is in a probe turn, as a JSON object or as raw pieces."""
    span = _call_span(probe, index)
    if span is None:
        return None
    first, last, start, end = span
    turn = "".join(p.text for p in probe.pieces)
    floor = _previous_field_end(probe, first)
    found = _json_call(turn, start, end, index, floor)
    if found:
        start, end = found[0], found[1]
    return {"start": start, "end": end, "first": first, "last": last, "json": found,
            "floor": floor, "ceiling": _next_field_start(probe, last), "turn": turn}


def _kv_layout(pieces: Sequence[Piece], before: str, after: str
               ) -> Optional[Tuple[KeyValueLayout, str, str]]:
    """Per-key arguments from the pieces of a call's two arguments: the layout, and what is
    left of the text before the first key and after the last value."""
    keys = [i for i, p in enumerate(pieces) if p.part == "key"]
    values = [i for i, p in enumerate(pieces) if p.part == "value"]
    if len(keys) != 2 or len(values) != 2 or not keys[0] < values[0] < keys[1] < values[1]:
        return None
    text = lambda lo, hi: "".join(p.text for p in pieces[lo:hi])  # noqa: E731
    key_close = text(keys[0] + 1, values[0])
    if key_close != text(keys[1] + 1, values[1]):
        return None
    between = text(values[0] + 1, keys[1])
    after_all = text(values[1] + 1, len(pieces)) + after
    value_close, separator, key_open = split_repeat(before, between, after_all)
    quoted = key_close[-1:] in ("'", '"') and value_close[:1] == key_close[-1:]
    quote = key_close[-1:] if quoted else ""
    layout = KeyValueLayout(key_open, key_close, value_close, separator, quote)
    return layout, before[:len(before) - len(key_open)], after_all[len(value_close):]


def _sequence_elements(probe: _Probe, bounds: Dict[str, Any], open_raw: str, close_raw: str,
                       index: int) -> Optional[Tuple[Tuple[str, Any], ...]]:
    """A call written with template text between its fields, as elements from its open
    marker to its close marker: ``("lit", text)``, ``("name", "")``, ``("id", "")``,
    ``("type", "")``, ``("args_json", "")`` or ``("kv", KeyValueLayout)``."""
    pieces = probe.pieces[bounds["first"]:bounds["last"] + 1]
    argument_positions = [i for i, p in enumerate(pieces)
                          if p.kind == "call" and p.part in ("key", "value", "args")]
    if not argument_positions:
        return None
    lo, hi = argument_positions[0], argument_positions[-1] + 1
    head = [("lit", open_raw)]
    for piece in pieces[:lo]:
        head.append(("lit", piece.text) if piece.kind == "lit" or piece.part == "other"
                    else (piece.part, ""))
    tail_text = "".join(p.text for p in pieces[hi:])
    if any(p.kind != "lit" for p in pieces[hi:]):
        return None
    region = "".join(p.text for p in pieces[lo:hi])
    if _json_equals(region, PROBE_ARGUMENTS[index]):
        body = [("args_json", "")]
        tail = [("lit", tail_text + close_raw)]
    else:
        # The text just before the first key: the trailing literal elements.
        before = ""
        for kind, text in reversed(head):
            if kind != "lit":
                break
            before = text + before
        kv = _kv_layout(pieces[lo:hi], before, tail_text + close_raw)
        if kv is None:
            return None
        layout, _, rest = kv
        head = _trim_literal_tail(head, len(layout.key_open))
        body = [("kv", layout)]
        tail = [("lit", rest)]
    merged: List[Tuple[str, Any]] = []
    for kind, value in head + body + tail:
        if kind == "lit" and merged and merged[-1][0] == "lit":
            merged[-1] = ("lit", merged[-1][1] + value)
        elif kind != "lit" or value:
            merged.append((kind, value))
    return tuple(merged)


def _trim_literal_tail(elements: List[Tuple[str, Any]], count: int) -> List[Tuple[str, Any]]:
    """Drop ``count`` characters from the end of the trailing literal elements."""
    out = list(elements)
    while count and out and out[-1][0] == "lit":
        text = out.pop()[1]
        if len(text) > count:
            out.append(("lit", text[:len(text) - count]))
            count = 0
        else:
            count -= len(text)
    return out


def _strip_header(text: str, header: str) -> str:
    return text[len(header):] if header and text.startswith(header) else text


#: The tool schema of the witness probes' calls (their typed arguments).
WITNESS_TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {
        "pkey": {"type": "string"}, "qkey": {"type": "string"}, "count": {"type": "integer"},
        "flag": {"type": "boolean"}, "place": {"type": "object"}, "tags": {"type": "array"},
        "quoted": {"type": "string"}}}}} for name in PROBE_NAMES]


def _witness_messages() -> Dict[str, Dict[str, Any]]:
    """Messages whose round trip decides whether a field the layout reads really parses
    (the key is what ``unsupported`` names when it does not)."""
    probes = _probe_messages()
    typed = {"count": 7, "flag": True, "place": {"lat": 1.5, "tags": ["x"]}, "tags": [1, "two"]}
    return {
        "content": probes["content"],
        "reasoning_content": probes["reasoning"],
        "tool_calls": probes["one_call_bare"],
        "parallel_tool_calls": probes["two_calls_bare"],
        "content_with_tool_calls": probes["one_call"],
        "tool_call_string_arguments": {"role": "assistant", "content": None, "tool_calls": [
            _probe_call(0, json.dumps(PROBE_ARGUMENTS[0]))]},
        "tool_call_typed_arguments": {"role": "assistant", "content": None, "tool_calls": [
            _probe_call(0, typed)]},
        "tool_call_argument_escapes": {"role": "assistant", "content": None, "tool_calls": [
            _probe_call(0, {"quoted": "it's \"quoted\",\na\\b"})]},
    }


def derive_layout(template: Any, messages: Optional[Sequence[Any]] = None, tools: Any = None,
                  add_generation_prompt: bool = True, continue_final_message: Any = False,
                  **template_kwargs: Any) -> ResponseLayout:
    """Render the probes through ``template`` (a :class:`ChatTemplate`) in this prompt
    context and read the layout of the assistant turn from their provenance."""
    return derive(template, messages, tools, add_generation_prompt, continue_final_message,
                  template_kwargs)[0]


def derive(template: Any, messages: Optional[Sequence[Any]], tools: Any,
           add_generation_prompt: bool, continue_final_message: Any,
           template_kwargs: Dict[str, Any]
           ) -> Tuple[ResponseLayout, List[Tuple[str, Dict[str, Any], Optional[str]]]]:
    """The layout, and the witnesses to check it with: (field, message, the turn the template
    writes for it, or None when it cannot render it)."""
    renderer = _ProbeRenderer(template, messages, tools, add_generation_prompt,
                              continue_final_message, template_kwargs)
    start = renderer.prompt[len(renderer.base):]
    probes = _Probes(renderer)

    unsupported: Dict[str, str] = {}
    content = probes["content"]
    if content.error or not content.text_of("content"):
        unsupported["content"] = content.error or (
            "the template does not write the final assistant message's content")
        after = ""
        whole = "".join(p.text for p in content.pieces)
        before = whole[:_common_prefix(whole, start)]
    else:
        before, after = content.literal_around("content")
    header = before[:_common_prefix(before, start)] if start else ""
    content_open = before[len(header):].strip()
    end = tuple(after.split()[:1]) if after.strip() else ()
    reasoning = _reasoning_markers(probes["reasoning"], start, content_open, unsupported)
    one, two_name = probes["one_call"], "two_calls"
    if one.error or _call_span(one, 0) is None:
        one, two_name = probes["one_call_bare"], "two_calls_bare"
    # The two-call probe tells the separators; it is rendered only when one call shows.
    two = probes[two_name] if not one.error and _call_span(one, 0) is not None else one
    calls, content_after, call_end = _call_layout(one, two, header, after, unsupported)
    if call_end and call_end not in end:
        end += (call_end,)
    content_opens = (content_open,) if content_open else ()
    if not one.error and one.text_of("content") and not content_after:
        # With calls, some templates wrap the content (<|python_start|>...<|python_end|>).
        wrapper = _strip_header(one.literal_around("content")[0], header).strip()
        if wrapper and wrapper != content_open:
            content_opens += (wrapper,)
    prefill = "" if continue_final_message else start[len(header):]
    if prefill.strip() and reasoning is None and prefill.strip() not in content_opens:
        # A generation prompt that opens a block the template never writes in its turns
        # (<think> in a template that drops reasoning): its close is not witnessed.
        unsupported["reasoning_content"] = (
            f"the generation prompt opens {prefill.strip()!r}, but the template never writes "
            "the final message's reasoning: what the model writes in it stays in content")
    layout = ResponseLayout(start=start, header=header, content_open=content_opens,
                            reasoning=reasoning, end=end, calls=calls,
                            unsupported=dict(unsupported), content_after_calls=content_after,
                            content_wrapped=bool(content_open), prefill=prefill)
    return layout, _witnesses(renderer, layout)


def _witnesses(renderer: _ProbeRenderer, layout: ResponseLayout
               ) -> List[Tuple[str, Dict[str, Any], Optional[str]]]:
    """The witness messages of what ``layout`` claims to read, with the turns the template
    writes for them."""
    witnesses = []
    for name, message in _witness_messages().items():
        if message.get("tool_calls") and layout.calls is None or (
                name == "reasoning_content" and layout.reasoning is None):
            continue
        text = renderer.render_text(message)
        if text is None and message.get("tool_calls") and message.get("content") is None:
            # Some templates need content next to calls.
            message = {**message, "content": PROBE_CONTENT}
            text = renderer.render_text(message)
        witnesses.append((name, renderer.merged(message), text))
    return witnesses


def _reasoning_markers(probe: _Probe, start: str, content_open: str,
                       unsupported: Dict[str, str]) -> Optional[Tuple[str, str]]:
    if probe.error:
        unsupported["reasoning_content"] = probe.error
        return None
    if not probe.text_of("reasoning"):
        unsupported["reasoning_content"] = (
            "the template does not write the final assistant message's reasoning")
        return None
    before, after = probe.literal_around("reasoning")
    opening = before[_token_start(before, _common_prefix(before, start)):].strip()
    if not opening:
        # The prompt already holds the whole text before the reasoning (a pre-opened block):
        # its last word is the marker the model's own turn would start with.
        words = before.split()
        opening = words[-1] if words else ""
    closing = after.strip()
    if content_open and closing.endswith(content_open) and closing != content_open:
        closing = closing[:-len(content_open)].strip()  # the content's own open marker
    if not opening or not closing:
        unsupported["reasoning_content"] = (
            "the template writes reasoning without a marker on both sides: "
            f"{before[-20:]!r} ... {after[:20]!r}")
        return None
    return opening, closing.split()[0] if probe.text_of("content") else closing


def _section_close(tail: str, end_text: str) -> Tuple[str, str]:
    """Split the text after the last call into the calls' section close and the end of the
    turn; a turn with calls may end with its own marker (``<|eom|>`` instead of ``<|eot|>``)."""
    words = tail.split()
    end_words = end_text.split()
    if end_words and end_words[0] in tail:
        return tail[:tail.index(end_words[0])].strip(), end_words[0]
    if len(words) == 1 and not end_words:
        return words[0], ""
    if words:
        return " ".join(words[:-1]), words[-1]
    return "", ""


def _call_layout(one: _Probe, two: _Probe, header: str, end_text: str,
                 unsupported: Dict[str, str]) -> Tuple[Optional[CallLayout], bool, str]:
    """The tool-call layout, whether content follows the calls, and the end-of-turn marker of
    a turn with calls."""
    if one.error:
        unsupported["tool_calls"] = one.error
        return None, False, ""
    first = _call_bounds(one, 0)
    if first is None or not any(p.part == "name" for p in one.pieces) and not first["json"]:
        unsupported["tool_calls"] = "the template does not write the final message's tool calls"
        return None, False, ""
    turn = first["turn"]
    pre = _strip_header(turn[first["floor"]:first["start"]], header)
    content_after = any(p.kind == "content" for p in one.pieces[first["last"] + 1:])
    post = turn[first["end"]:first["ceiling"]] if content_after else turn[first["end"]:]
    close_raw, separator, open_raw = post[:len(post) - _common_suffix(post, end_text)], "", pre
    second = _call_bounds(two, 1) if not two.error else None
    zeroth = _call_bounds(two, 0) if not two.error else None
    if second is None or zeroth is None:
        unsupported["parallel_tool_calls"] = two.error or "the template writes only one tool call"
    else:
        middle = second["turn"][zeroth["end"]:second["start"]]
        close_raw, separator, open_raw = split_repeat(pre, middle, post)
    section_open = _strip_header(pre[:len(pre) - len(open_raw)], header).strip()
    section_tail = post[len(close_raw):]
    if content_after:
        section_close, call_end = section_tail.strip(), ""
    else:
        section_close, call_end = _section_close(section_tail, end_text)
    common = dict(open=open_raw.strip(), close=close_raw.strip(), section_open=section_open,
                  section_close=section_close, separator=separator.strip())
    if first["json"]:
        _, _, name_path, args_path, id_path, as_string = first["json"]
        json_list = section_open.endswith("[") and separator.strip() == "," or (
            section_open.endswith("[") and "parallel_tool_calls" in unsupported)
        return CallLayout(body="json", name_path=name_path, arguments_path=args_path,
                          id_path=id_path, json_list=json_list, arguments_as_string=as_string,
                          **common), content_after, call_end
    elements = _sequence_elements(one, first, open_raw, close_raw, 0)
    if elements is None:
        unsupported["tool_calls"] = (
            "the probe call's arguments are written in a layout not recognised")
        return None, content_after, call_end
    return CallLayout(body="sequence", elements=elements, **common), content_after, call_end

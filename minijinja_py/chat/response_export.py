"""A derived :class:`~minijinja_py.chat.response_layout.ResponseLayout` in transformers'
``response_template`` format (version 1), for ``tokenizer.parse_response``, vLLM's
``response_template`` parser and their ports.

The format reads regions between open and close markers, so a layout it cannot express
(tool calls with no marker before them, pythonic calls) is left out of the exported ``fields``
and named by :func:`export_gaps`.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from .response_layout import CallLayout, ResponseLayout
from .response_parser import _loose


def _path_placeholder(prefix: str, path: Any) -> str:
    return "{" + ".".join((prefix, *path) if prefix else path) + "}"


def _tool_calls_field(calls: CallLayout, end: Any) -> Dict[str, Any]:
    """The ``tool_calls`` field of a JSON layout."""
    if calls.json_list:
        transform = {"type": "function", "function": {
            "name": _path_placeholder("", calls.name_path),
            "arguments": _path_placeholder("", calls.arguments_path)}}
        return {"content": "json", "transform": transform, "transform_each": True,
                "_list_brackets": True}
    transform = {"type": "function", "function": {
        "name": _path_placeholder("content", calls.name_path),
        "arguments": _path_placeholder("content", calls.arguments_path)}}
    field: Dict[str, Any] = {"content": "json", "repeats": True, "transform": transform}
    if calls.section_open or calls.section_close:
        field["open_pattern"] = (f"(?:{re.escape(calls.section_open)}\\s*)?"
                                 f"{re.escape(calls.open)}")
        field["close_pattern"] = (f"{re.escape(calls.close)}"
                                  f"(?:\\s*{re.escape(calls.section_close)})?")
    else:
        field["open"] = calls.open
        # Without a close of its own, a call ends where the next one or the turn does.
        field.update(_close(calls.close, (calls.open, *end)))
    return field


def _list_markers(calls: CallLayout, end: Any) -> Dict[str, Any]:
    """Open and close of a JSON array region whose markers hold its brackets
    (``[TOOL_CALLS] [`` ... ``]``): the text outside the brackets, or lookarounds."""
    markers: Dict[str, Any] = {}
    opening = calls.section_open[:-1].strip()
    if opening:
        markers["open"] = opening
    else:
        markers["open_pattern"] = r"(?=\[)"
    closing = calls.section_close[1:].strip() if calls.section_close.startswith("]") else ""
    markers.update(_close(closing, end))
    return markers


def _close(literal: str, end: Any) -> Dict[str, str]:
    """A region's close: the literal, or (none written) just before the end of the turn."""
    if literal:
        return {"close": literal}
    ends = "".join(f"{re.escape(marker)}|" for marker in end)
    return {"close_pattern": f"(?=(?:{ends}\\Z))"}


#: What follows a slot written right before the arguments: how the arguments start.
_ARGUMENTS_START = {"args_json": r"\s*\{"}


def _sequence_field(calls: CallLayout) -> Optional[Dict[str, Any]]:
    """The ``tool_calls`` field of a call written as template text and fields ending with its
    arguments (``<function=NAME>`` + ``<parameter=K>V</parameter>``..., ``TYPE<sep>NAME`` +
    JSON): the name (and id) are captured by the open pattern, the arguments are the region's
    body (``json`` or ``xml-inline``). None for other shapes."""
    elements = calls.elements
    kinds = [kind for kind, _ in elements]
    if not kinds or kinds[-1] != "lit" or kinds[-2] not in ("args_json", "kv"):
        return None
    arguments = elements[-2]
    if arguments[0] == "kv":
        kv = arguments[1]
        if not (kv.key_open.strip() and kv.key_close.strip() and kv.value_close.strip()):
            return None  # keys or values without markers: f(a=1, b=2) is not xml-inline
        start = _loose(kv.key_open).pattern
        content: Dict[str, Any] = {"content": "xml-inline", "content_args": {"tag_pattern": (
            f"{start}(?P<key>.*?){_loose(kv.key_close).pattern}\\s*(?P<value>.*?)\\s*"
            f"{_loose(kv.value_close).pattern}")}}
    else:
        start = _ARGUMENTS_START["args_json"]
        content = {"content": "json"}
    pattern = []
    for index, (kind, value) in enumerate(elements[:-2]):
        if kind == "lit":
            pattern.append(_loose(value).pattern + r"\s*")
        elif kind in ("name", "id") and f"(?P<{kind}>" not in "".join(pattern):
            following = elements[index + 1]
            stop = _loose(following[1]).pattern if following[0] == "lit" else start
            pattern.append(f"(?P<{kind}>.+?)\\s*(?={stop})")
        elif kind == "type":
            pattern.append(r".+?")
        else:
            return None
    if "(?P<name>" not in "".join(pattern):
        return None
    function = {"name": "{name}", "arguments": "{content}"}
    transform: Dict[str, Any] = {"type": "function", "function": function}
    if "(?P<id>" in "".join(pattern):
        transform["id"] = "{id}"
    opening, closing = "".join(pattern), _loose(elements[-1][1]).pattern
    if calls.section_open:
        opening = f"(?:{_loose(calls.section_open).pattern}\\s*)?{opening}"
    if calls.section_close:
        closing = f"{closing}(?:\\s*{_loose(calls.section_close).pattern})?"
    return {"open_pattern": opening, "close_pattern": closing, **content, "repeats": True,
            "transform": transform}


def export_gaps(layout: ResponseLayout) -> List[str]:
    """The parts of ``layout`` the exported response_template does not carry."""
    gaps = []
    calls = layout.calls
    if calls is None:
        return gaps
    if calls.body == "json":
        if not (calls.open or calls.json_list) or calls.arguments_as_string:
            gaps.append("tool_calls")
    elif _sequence_field(calls) is None:
        gaps.append("tool_calls")
    return gaps


def response_template(layout: ResponseLayout) -> Dict[str, Any]:
    """``layout`` as a transformers ``response_template`` dict."""
    fields: Dict[str, Any] = {}
    if layout.reasoning is not None:
        opening, closing = layout.reasoning
        fields["reasoning_content"] = {"open": opening, "close": closing}
    calls = layout.calls
    if calls is not None and "tool_calls" not in export_gaps(layout):
        field = (_tool_calls_field(calls, layout.end) if calls.body == "json"
                 else _sequence_field(calls))
        if field.pop("_list_brackets", False):
            # The JSON array is the region's whole body: its brackets stay inside.
            field.update(_list_markers(calls, layout.end))
        fields["tool_calls"] = field
    # Content is the leftover sink: the text around the other regions, joined. Its region ends
    # at the end of the turn and swallows what follows (the parser stops there too).
    content: Dict[str, Any] = {"repeats": True, "join": ""}
    reasoning_close = layout.reasoning[1] if layout.reasoning else None
    if layout.content_wrapped and layout.content_open[0] != reasoning_close:
        # (GLM writes '</think>' before content even without reasoning: the reasoning's close.)
        content["open"] = list(layout.content_open)
    if layout.end:
        ends = "|".join(re.escape(marker) for marker in layout.end)
        content["close_pattern"] = f"(?:{ends})[\\s\\S]*"
    fields["content"] = content
    template: Dict[str, Any] = {"version": 1, "defaults": {"role": "assistant"}, "fields": fields}
    header = layout.header
    if layout.reasoning is not None and layout.reasoning[0] in header:
        # A prompt that opens the reasoning: the anchor stops before the open marker, so the
        # parser reads it from the prompt and starts inside the reasoning.
        header = header[:header.index(layout.reasoning[0])]
    if header.strip():
        template["start_anchor"] = header.strip()
    else:
        # No header to anchor on: the message starts where the prompt's own part of it does.
        template["start_anchor_pattern"] = f"(?={re.escape(layout.start)}\\Z)"
    return template

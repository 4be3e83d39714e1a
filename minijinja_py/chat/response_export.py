"""A derived :class:`~minijinja_py.chat.response_layout.ResponseLayout` in transformers'
``response_template`` format (version 1), for ``tokenizer.parse_response``, vLLM's
``response_template`` parser and their ports.

The format reads regions between open and close markers, so a layout it cannot express
(tool calls with no marker before them, per-key arguments) is left out of the exported
``fields`` and named in the template's companion list :func:`export_gaps`.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List

from .response_layout import CallLayout, ResponseLayout


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


def export_gaps(layout: ResponseLayout) -> List[str]:
    """The parts of ``layout`` the exported response_template does not carry."""
    gaps = []
    calls = layout.calls
    if calls is not None and (calls.body != "json" or not (calls.open or calls.json_list)
                              or calls.arguments_as_string):
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
        field = _tool_calls_field(calls, layout.end)
        if field.pop("_list_brackets", False):
            # The JSON array is the region's whole body: its brackets stay inside.
            field.update(_list_markers(calls, layout.end))
        fields["tool_calls"] = field
    # Content is the leftover sink: the text around the other regions, joined. Its region ends
    # at the end of the turn and swallows what follows (the parser stops there too).
    content: Dict[str, Any] = {"repeats": True, "join": ""}
    if layout.content_wrapped:
        content["open"] = list(layout.content_open)
    if layout.end:
        ends = "|".join(re.escape(marker) for marker in layout.end)
        content["close_pattern"] = f"(?:{ends})[\\s\\S]*"
    fields["content"] = content
    template: Dict[str, Any] = {"version": 1, "defaults": {"role": "assistant"}, "fields": fields}
    if layout.header.strip():
        template["start_anchor"] = layout.header.strip()
    else:
        # No header to anchor on: the message starts where the prompt's own part of it does.
        template["start_anchor_pattern"] = f"(?={re.escape(layout.start)}\\Z)"
    return template

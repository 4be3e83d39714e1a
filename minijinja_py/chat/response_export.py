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


def _tool_calls_field(calls: CallLayout) -> Dict[str, Any]:
    """The ``tool_calls`` field of a JSON layout."""
    if calls.json_list:
        transform = {"type": "function", "function": {
            "name": _path_placeholder("", calls.name_path),
            "arguments": _path_placeholder("", calls.arguments_path)}}
        return {"open": calls.section_open, "close": calls.section_close, "content": "json",
                "content_args": {}, "transform": transform, "transform_each": True,
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
        field["open"], field["close"] = calls.open, calls.close
    return field


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
        field = _tool_calls_field(calls)
        if field.pop("_list_brackets", False):
            # The JSON array is the region's whole body: its brackets stay inside.
            field["open"] = calls.section_open[:-1].strip() or calls.section_open
            field["close"] = calls.section_close[1:].strip() or calls.section_close
            if field["open"] == calls.section_open:
                field.pop("open")
                field["open_pattern"] = r"(?=\[)"
        fields["tool_calls"] = field
    content: Dict[str, Any] = {}
    if layout.end:
        content["close"] = layout.end[0]
    fields["content"] = content
    template: Dict[str, Any] = {"version": 1, "defaults": {"role": "assistant"}, "fields": fields}
    if layout.header.strip():
        template["start_anchor"] = layout.header.strip()
    else:
        template["start_anchor_pattern"] = r"\A"
    return template

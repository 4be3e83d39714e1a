"""Streaming a derived response parser: ``stream = parser.stream(); stream.feed(chunk) ->
[delta, ...]; stream.close() -> [delta, ...]``.

Deltas have the OpenAI chat-completions shape: ``{"reasoning_content": text}``,
``{"content": text}`` and ``{"tool_calls": [{"index": i, "type": "function", "function":
{"name": name, "arguments": text}}]}`` (with ``"id"`` where the format carries one). For any
split of a text into chunks the deltas add up to ``parser.parse(text)``: concatenate the texts
per field and per call, decode each call's ``arguments`` text as JSON.

It is conservative so that nothing sent is ever taken back: reasoning and content are sent as
far as a re-parse of the text so far agrees with what was sent, never past a chunk's tail that
could be the start of a marker, and content stops at the first tool-call marker (content a
template writes after the calls, and content of layouts whose calls have no marker before them,
is sent by ``close``). A tool call is sent whole (name and complete arguments) once the text
after it shows it is finished, or by ``close``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

from .response_layout import ResponseLayout


def _markers(layout: ResponseLayout) -> List[str]:
    """Every literal the parser looks for: a chunk may end inside one."""
    markers = [layout.header.strip(), *layout.end, *layout.content_open,
               *(layout.reasoning or ())]
    calls = layout.calls
    if calls is not None:
        markers += [calls.open, calls.close, calls.section_open, calls.section_close]
        markers += [value.strip() for kind, value in calls.elements if kind == "lit"]
    return [marker for marker in markers if marker]


def _held_back(text: str, markers: List[str], ends: Tuple[str, ...]) -> int:
    """How much of the end of ``text`` to hold back: the longest tail that is a proper prefix
    of a marker, again and again (a held-back ``[`` may leave ``[TOOL_CALLS] `` that is one
    too), unless the text ends with an end-of-turn marker (nothing after it counts)."""
    if any(text.endswith(marker) for marker in ends):
        return 0
    held = 0
    while True:
        kept = text[:len(text) - held]
        tail = 0
        for marker in markers:
            for size in range(min(len(marker) - 1, len(kept)), tail, -1):
                if kept.endswith(marker[:size]):
                    tail = size
                    break
        if not tail:
            return held
        held += tail


class ResponseStream:
    """The incremental form of :meth:`ResponseParser.parse` (see the module docstring)."""

    def __init__(self, parser: Any) -> None:
        self._parser = parser
        self._layout: ResponseLayout = parser.layout
        self._markers = _markers(self._layout)
        calls = self._layout.calls
        self._call_marker = "" if calls is None else (
            calls.section_open or calls.open or _first_literal(calls.elements))
        self._text = ""
        self._sent: Dict[str, str] = {"reasoning_content": "", "content": ""}
        self._calls_sent = 0
        self._closed = False

    def feed(self, chunk: str) -> List[Dict[str, Any]]:
        """Add generated text; the deltas it makes certain."""
        if self._closed:
            raise ValueError("feed() after close()")
        self._text += chunk
        held = _held_back(self._text, self._markers, self._layout.end)
        safe = self._text[:len(self._text) - held]
        message = self._parser.parse(safe)
        deltas = self._text_delta("reasoning_content", message, final=False)
        if "reasoning_content" not in message or self._reasoning_closed(safe):
            deltas += self._content_delta(safe, message)
        deltas += self._call_deltas(message, final=False)
        return deltas

    def close(self) -> List[Dict[str, Any]]:
        """The end of the text: every delta not sent yet."""
        self._closed = True
        message = self._parser.parse(self._text)
        return (self._text_delta("reasoning_content", message, final=True)
                + self._text_delta("content", message, final=True)
                + self._call_deltas(message, final=True))

    # -- the fields ------------------------------------------------------------------------
    def _reasoning_closed(self, text: str) -> bool:
        reasoning = self._layout.reasoning
        return reasoning is not None and reasoning[1] in self._layout.start + text

    def _content_delta(self, safe: str, message: Dict[str, Any]) -> List[Dict[str, Any]]:
        calls = self._layout.calls
        if calls is not None and not self._call_marker:
            return []  # calls without a marker: content is only known at the end
        source = self._layout.start + safe
        if self._call_marker and self._call_marker in source:
            # Content up to the first call: what parse gives for the text before it.
            before = source[:source.index(self._call_marker)][len(self._layout.start):]
            message = self._parser.parse(before)
        return self._text_delta("content", message, final=False)

    def _text_delta(self, field: str, message: Dict[str, Any], final: bool
                    ) -> List[Dict[str, Any]]:
        now = message.get(field) or ""
        sent = self._sent[field]
        if not now.startswith(sent) or len(now) == len(sent):
            return []
        self._sent[field] = now
        return [{field: now[len(sent):]}]

    def _call_deltas(self, message: Dict[str, Any], final: bool) -> List[Dict[str, Any]]:
        calls = message.get("tool_calls") or []
        # A call is finished when another one, or content after it, follows; else at close.
        ready = len(calls) if final else len(calls) - 1
        deltas = []
        while self._calls_sent < ready:
            call = calls[self._calls_sent]
            item: Dict[str, Any] = {"index": self._calls_sent, "type": "function", "function": {
                "name": call["function"]["name"],
                "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False)}}
            if "id" in call:
                item["id"] = call["id"]
            deltas.append({"tool_calls": [item]})
            self._calls_sent += 1
        return deltas


def _first_literal(elements: Tuple[Tuple[str, Any], ...]) -> str:
    return elements[0][1].strip() if elements and elements[0][0] == "lit" else ""


def accumulate(deltas: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The message the deltas add up to (the shape ``parse`` returns)."""
    message: Dict[str, Any] = {"role": "assistant", "content": None}
    texts = {"content": "", "reasoning_content": ""}
    calls: Dict[int, Dict[str, Any]] = {}
    for delta in deltas:
        for field in texts:
            texts[field] += delta.get(field, "")
        for item in delta.get("tool_calls", ()):
            call = calls.setdefault(item["index"], {"name": "", "arguments": "", "id": None})
            call["name"] += item["function"].get("name", "")
            call["arguments"] += item["function"].get("arguments", "")
            call["id"] = item.get("id", call["id"])
    message["content"] = texts["content"] or None
    if texts["reasoning_content"]:
        message["reasoning_content"] = texts["reasoning_content"]
    if calls:
        message["tool_calls"] = []
        for index in sorted(calls):
            call = calls[index]
            item = {"type": "function", "function": {"name": call["name"],
                                                     "arguments": json.loads(call["arguments"])}}
            if call["id"] is not None:
                item["id"] = call["id"]
            message["tool_calls"].append(item)
    return message

"""The round trip of derived response parsers over the corpus: render a conversation ending in
an assistant message, take the text after the generation prompt, parse it back, compare.

Shared by tests/test_response_parser.py and tests/fixtures/response_template_judge.py (which
runs the same texts through transformers' parse_response with our exported template).
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from corpus_support import FIXED_NOW, load_contexts, template_source

from minijinja_py import ChatTemplate, TemplateError
from minijinja_py.chat.response_parser import ResponseParser

#: Tools whose schemas type the generated calls' arguments.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "where": {"type": "object"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}},
]

HISTORY = [{"role": "system", "content": "You are a helpful assistant."},
           {"role": "user", "content": "Help me plan a trip."}]


def _call(index: int, name: str, arguments: Any) -> Dict[str, Any]:
    return {"id": f"call{index}abcdef", "type": "function",
            "function": {"name": name, "arguments": arguments}}


#: Generated final assistant messages: content, reasoning, 1 and 3 calls, string and dict
#: arguments, typed values, unicode.
GENERATED = {
    "content": {"role": "assistant", "content": "Sure: Zürich, 東京 and São Paulo ✓ {ok}."},
    "reasoning": {"role": "assistant", "content": "Take the train.",
                  "reasoning_content": "Trains are faster here; 3 h vs 5 h."},
    "one_call": {"role": "assistant", "content": None, "tool_calls": [
        _call(1, "get_weather", {"city": "Zürich", "days": 3, "metric": True,
                                 "where": {"lat": 47.4, "country": "CH"}})]},
    "one_call_with_content": {"role": "assistant", "content": "Let me check.", "tool_calls": [
        _call(1, "get_weather", {"city": "Paris"})]},
    "three_calls": {"role": "assistant", "content": None, "tool_calls": [
        _call(1, "get_weather", {"city": "東京"}), _call(2, "get_time", {"zone": "CET"}),
        _call(3, "search", {"query": "night trains, Europe"})]},
    "string_arguments": {"role": "assistant", "content": None, "tool_calls": [
        _call(1, "search", json.dumps({"query": "café"}, ensure_ascii=False))]},
}

#: Corpus contexts whose messages include an assistant message to round-trip.
CONTEXT_NAMES = ("no_generation_prompt", "reasoning", "tool_use", "tool_use_string_args",
                 "injection_tools", "continue_final")


def _tool_calls(message: Dict[str, Any], with_ids: bool) -> Optional[List[Dict[str, Any]]]:
    calls = message.get("tool_calls")
    if not calls:
        return None
    out = []
    for call in calls:
        function = call["function"]
        arguments = function["arguments"]
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        item = {"name": function["name"], "arguments": arguments}
        if with_ids and call.get("id") is not None:
            item["id"] = call["id"]
        out.append(item)
    return out


def _text(value: Any) -> Optional[str]:
    return value.strip() or None if isinstance(value, str) else None


def comparable(message: Dict[str, Any], with_ids: bool) -> Dict[str, Any]:
    """The fields a round trip compares: content and reasoning without the whitespace at their
    ends (the parser does not keep it), calls as name, arguments and (when the format carries
    one) id."""
    reasoning = message.get("reasoning_content") or message.get("thinking")
    return {"content": _text(message.get("content")), "reasoning_content": _text(reasoning),
            "tool_calls": _tool_calls(message, with_ids)}


def layout_markers(parser: Any) -> List[str]:
    """Every marker the parser looks for (to tell data that contains them)."""
    layout = parser.layout
    markers = list(layout.end) + list(layout.content_open) + list(layout.reasoning or ())
    calls = layout.calls
    if calls is not None:
        markers += [calls.open, calls.close, calls.section_open, calls.section_close]
        for kind, value in calls.elements:
            if kind == "lit":
                markers.append(value.strip())
            elif kind == "kv":
                markers += [value.key_open.strip(), value.key_close.strip(),
                            value.value_close.strip()]
    return [m for m in markers if len(m) > 1]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _declared(field: str, message: Dict[str, Any], unsupported: Dict[str, str]) -> bool:
    """Whether the parser declared the field (or the feature of ``message`` that makes it
    differ) unsupported."""
    if field in unsupported:
        return True
    calls = message.get("tool_calls") or []
    if field == "content":
        # Text the parser cannot take out of the content stays in it.
        reasoning = message.get("reasoning_content") or message.get("thinking")
        return bool(calls) and ("content_with_tool_calls" in unsupported
                                or _declared("tool_calls", message, unsupported)) or (
            bool(reasoning) and "reasoning_content" in unsupported)
    if field != "tool_calls":
        return False
    arguments = [call["function"]["arguments"] for call in calls]
    values = [v for a in arguments if isinstance(a, dict) for v in a.values()]
    features = {
        "parallel_tool_calls": len(calls) > 1,
        "content_with_tool_calls": bool(_text(message.get("content"))),
        "tool_call_string_arguments": any(isinstance(a, str) for a in arguments),
        "tool_call_typed_arguments": any(not isinstance(v, str) for v in values),
        "tool_call_argument_escapes": any(isinstance(v, str) and any(c in v for c in "\"'\\\n")
                                         for v in values),
    }
    return any(present and name in unsupported for name, present in features.items())


class TemplateRoundTrip:
    """One corpus template: its parsers (derived once per prompt context) and cases."""

    def __init__(self, slug: str) -> None:
        self.slug = slug
        self.template = ChatTemplate(template_source(slug), now=FIXED_NOW)
        self._parsers: Dict[str, Any] = {}
        self.derive_cpu_ms: List[float] = []

    def parser(self, history: List[Dict[str, Any]], tools: Any, kwargs: Dict[str, Any],
               continue_final: bool) -> Any:
        """The derived parser for this prompt context. The layout is derived once per set of
        template options (the suite's time budget): with HISTORY and TOOLS for a generation
        prompt (the turn after it does not depend on the earlier messages; the round trip
        would show if it did), with the real messages when the final one is continued. The
        case's own tools type the arguments."""
        options = [sorted(kwargs.items()), continue_final, tools is not None]
        if continue_final:
            options.append(history)
        key = json.dumps(options, sort_keys=True, default=str)
        if key not in self._parsers:
            start = time.process_time()
            try:
                self._parsers[key] = self.template.response_parser(
                    history if continue_final else HISTORY,
                    tools=TOOLS if tools is not None else None,
                    add_generation_prompt=not continue_final,
                    continue_final_message=continue_final, **kwargs)
            except TemplateError as error:
                self._parsers[key] = error
            self.derive_cpu_ms.append((time.process_time() - start) * 1000)
        derived = self._parsers[key]
        if isinstance(derived, TemplateError) or tools is None or tools is TOOLS:
            return derived
        return ResponseParser(derived.layout, tools)

    def cases(self) -> Iterator[Tuple[str, List[Dict[str, Any]], Dict[str, Any], Any,
                                      Dict[str, Any], bool]]:
        """(name, history, final message, tools, template kwargs, continue_final)."""
        kwargs = {"bos_token": "<s>", "eos_token": "</s>"}
        for name, message in GENERATED.items():
            yield name, HISTORY, message, TOOLS, kwargs, False
        contexts = load_contexts()
        for context_name in CONTEXT_NAMES:
            context = contexts[context_name]
            messages = context["messages"]
            extra = {k: v for k, v in context.items() if k not in (
                "messages", "tools", "add_generation_prompt", "continue_final_message")}
            continue_final = bool(context.get("continue_final_message"))
            for index, message in enumerate(messages):
                if message["role"] != "assistant" or index == 0:
                    continue
                if continue_final and index != len(messages) - 1:
                    continue
                yield (f"{context_name}[{index}]", messages[:index], message,
                       context.get("tools"), extra, continue_final)

    def run(self, name: str, history: List[Dict[str, Any]], message: Dict[str, Any], tools: Any,
            kwargs: Dict[str, Any], continue_final: bool) -> Dict[str, Any]:
        """One case's outcome: ``kind`` is ok, declared (the differing fields are in
        parser.unsupported), markers_in_data (the message's own text holds the layout's
        markers: no parser can tell them apart), skipped (the template cannot render the
        message, or the prompt is not a prefix of the conversation) or mismatch."""
        if continue_final:
            # The prompt ends inside the final message; the model writes the rest of it.
            prompt_args = ([*history, message], False, True)
            message = {**message, "content": (message.get("content") or "") + " and the rest."}
        else:
            prompt_args = (history, True, False)
        try:
            prompt = self.template.render(prompt_args[0], tools=tools,
                                          add_generation_prompt=prompt_args[1],
                                          continue_final_message=prompt_args[2], **kwargs)
            full = self.template.render([*history, message], tools=tools, **kwargs)
        except TemplateError as error:
            return {"kind": "skipped", "why": f"render: {type(error).__name__}"}
        text = full[len(prompt):] if full.startswith(prompt) else None
        parser = self.parser(prompt_args[0], tools, kwargs, continue_final)
        if isinstance(parser, TemplateError):
            return {"kind": "skipped", "why": f"derive: {type(parser).__name__}"}
        if text is None:
            return {"kind": "skipped", "why": "the prompt is not a prefix of the conversation"}
        got = parser.parse(text)
        with_ids = any("id" in call for call in got.get("tool_calls") or ())
        want = comparable(message, with_ids)
        have = comparable(got, with_ids)
        differing = sorted(k for k in want if want[k] != have[k])
        outcome = {"kind": "ok", "text": text, "got": got, "differing": differing,
                   "parser": parser}
        if not differing:
            return outcome
        if all(_declared(field, message, parser.unsupported) for field in differing):
            outcome["kind"] = "declared"
        elif any(marker in value for marker in layout_markers(parser)
                 for value in _strings(message)):
            outcome["kind"] = "markers_in_data"
        else:
            outcome["kind"] = "mismatch"
        return outcome

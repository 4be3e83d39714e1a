"""Parse what a model generated back into an assistant message, with the layout the chat
template itself writes (derived in :mod:`minijinja_py.chat.response_layout`).

>>> import minijinja_py as mj
>>> ct = mj.ChatTemplate("{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}"
...                      "<|im_end|>\\n{% endfor %}{% if add_generation_prompt %}"
...                      "<|im_start|>assistant\\n{% endif %}")
>>> ct.parse_response("Hello there.<|im_end|>")
{'role': 'assistant', 'content': 'Hello there.'}

``parse`` never raises: text that does not fit the layout stays in ``content``
(``strict=True`` raises :class:`ResponseParseError` with the position instead).
Leading and trailing whitespace of content, reasoning, names and argument values is not kept
(templates trim it themselves more often than not, and models vary it).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from .. import TemplateError
from dataclasses import replace

from .response_layout import WITNESS_TOOLS, CallLayout, KeyValueLayout, ResponseLayout, derive

if TYPE_CHECKING:  # pragma: no cover
    from .response_stream import ResponseStream

_DECODER = json.JSONDecoder()
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.-]*\Z")


class ResponseParseError(TemplateError):
    """Generated text that does not fit the template's layout (``parse(strict=True)``);
    ``position`` is the offset in the parsed text (the prompt's start of the assistant turn
    followed by the generated text) where it stopped fitting."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}")
        self.position = position


class _Misfit(Exception):
    """Internal: the text stopped fitting the layout at ``position``."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


def _decode(text: str, start: int, whole: bool = False) -> Tuple[Any, int]:
    """The JSON value at ``start`` and where it ends (``whole``: it must fill the text)."""
    try:
        value, stop = _DECODER.raw_decode(text, start)
    except ValueError as error:
        raise _Misfit(f"invalid JSON ({error.msg})", start) from None
    except RecursionError:
        raise _Misfit("JSON nested too deep", start) from None
    if whole and text[stop:].strip():
        raise _Misfit("text after the JSON value", stop)
    return value, stop


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


@functools.lru_cache(maxsize=512)
def _loose(marker: str) -> "re.Pattern[str]":
    """``marker`` with its whitespace free: a run of whitespace in it, or none between two
    tags (``</arg_key><arg_value>``), matches any whitespace (models and template versions
    vary it; ``<parameter=`` and ``city`` still have to be written as they are)."""
    pieces = []
    for piece in re.split(r"(\s+)", marker.strip()):
        if piece.isspace():
            pieces.append(r"\s*")
        elif piece:
            pieces.append(re.escape(piece).replace("><", r">\s*<"))
    return re.compile("".join(pieces))


def _find(text: str, marker: str, position: int) -> Tuple[int, int]:
    """(start, end) of the first loose match of ``marker`` from ``position``; (-1, -1)."""
    found = _loose(marker).search(text, position) if marker.strip() else None
    return (found.start(), found.end()) if found else (-1, -1)


def _expect(text: str, position: int, literal: str) -> int:
    """Skip whitespace, then require the (loose) ``literal``; the position after it."""
    position = _skip_space(text, position)
    if not literal.strip():
        return position
    found = _loose(literal).match(text, position)
    if found is None:
        raise _Misfit(f"expected {literal.strip()!r}", position)
    return found.end()


def _schema_types(schema: Any) -> Tuple[str, ...]:
    if not isinstance(schema, dict):
        return ()
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(
        t for t in declared or () if isinstance(t, str)) if isinstance(declared, list) else []
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or ():
            types.extend(_schema_types(choice))
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    return tuple(types)


def _integer(raw: str) -> Any:
    try:
        return int(raw)
    except ValueError:
        number = float(raw)
        if not number.is_integer():
            raise
        return int(number)


def _number(raw: str) -> Any:
    number = float(raw)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(raw)
    return int(number) if number.is_integer() and "." not in raw else number


def _boolean(raw: str) -> Any:
    word = raw.strip().lower()
    if word not in ("true", "1", "false", "0"):
        raise ValueError(raw)
    return word in ("true", "1")


def _null(raw: str) -> Any:
    if raw.strip() not in ("null", "None"):
        raise ValueError(raw)
    return None


#: Python literals longer than this are not read (ast.literal_eval's cost grows with them).
_LITERAL_LIMIT = 100_000


def _json_of(kind: type) -> Any:
    """A reader of ``kind`` values written as JSON, or as Python literals (pythonic calls
    print ``{'a': True}``)."""
    def decode(raw: str) -> Any:
        try:
            value = json.loads(raw)
        except RecursionError:
            raise ValueError("nested too deep") from None
        except ValueError:
            value = _python_literal(raw)
        if not isinstance(value, kind):
            raise ValueError(raw)
        return value
    return decode


def _python_literal(raw: str) -> Any:
    if len(raw) > _LITERAL_LIMIT:
        raise ValueError("too long")
    try:
        return ast.literal_eval(raw.strip())
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        raise ValueError(raw) from None


#: How a string argument is read as each JSON-schema type (transformers' rules: the first
#: type that reads it wins; a string that none reads stays a string).
_COERCIONS = {"integer": _integer, "number": _number, "boolean": _boolean, "null": _null,
              "object": _json_of(dict), "array": _json_of(list)}


def _coerce(raw: str, types: Sequence[str]) -> Any:
    for type_name in types:
        reader = _COERCIONS.get(type_name)
        if reader is None:
            continue
        try:
            return reader(raw)
        except ValueError:
            continue
    return raw


def _tool_parameters(tools: Any) -> Dict[str, Dict[str, Any]]:
    """Tool name -> its parameters' ``properties``, from JSON schemas."""
    out: Dict[str, Dict[str, Any]] = {}
    for tool in tools or ():
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            properties = parameters.get("properties") if isinstance(parameters, dict) else None
            out[function["name"]] = properties if isinstance(properties, dict) else {}
    return out


def _at_path(value: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


class ResponseParser:
    """Parses generated text with a :class:`ResponseLayout`
    (see :meth:`ChatTemplate.response_parser`).

    ``unsupported`` maps each field the probes could not witness to the reason; such a field
    is never parsed (its text stays in ``content``). ``response_template`` is the layout in
    transformers' ``response_template`` format (version 1)."""

    def __init__(self, layout: ResponseLayout, tools: Any = None) -> None:
        self.layout = layout
        self.tools = tools
        self._parameters = _tool_parameters(tools)

    @property
    def unsupported(self) -> Dict[str, str]:
        return dict(self.layout.unsupported)

    @property
    def response_template(self) -> Dict[str, Any]:
        from .response_export import response_template

        return response_template(self.layout)

    def stream(self) -> "ResponseStream":
        """An incremental parse: ``feed(chunk)`` and ``close()`` return OpenAI-style deltas
        that add up to :meth:`parse` of the whole text (see
        :mod:`minijinja_py.chat.response_stream`)."""
        from .response_stream import ResponseStream

        return ResponseStream(self)

    # -- parsing -----------------------------------------------------------------------------
    def parse(self, text: str, *, strict: bool = False) -> Dict[str, Any]:
        """The assistant message in ``text`` (what the model generated after the prompt):
        ``{"role": "assistant", "content": str | None}`` plus ``reasoning_content`` and
        ``tool_calls`` when present. Never raises unless ``strict``."""
        if not isinstance(text, str):
            raise TypeError(f"parse() takes the generated text as str, not {type(text).__name__}")
        return self._parse_source(self.layout.start + text, strict)

    def _parse_source(self, source: str, strict: bool = False) -> Dict[str, Any]:
        """Parse the whole assistant turn (the prompt's part of it, then the generated text)."""
        message: Dict[str, Any] = {"role": "assistant", "content": None}
        position = self._reasoning(source, message)
        if position == 0 and self.layout.header and source.startswith(self.layout.header):
            position = len(self.layout.header)
        rest_end = self._end_of_turn(source, position)
        try:
            content, calls = self._content_and_calls(source, position, rest_end)
        except _Misfit as misfit:
            if strict:
                raise ResponseParseError(str(misfit), misfit.position) from None
            content, calls = source[position:rest_end], []
        content = self._without_content_open(content).strip()
        message["content"] = content or None
        if calls:
            message["tool_calls"] = calls
        return message

    def _reasoning(self, source: str, message: Dict[str, Any]) -> int:
        if self.layout.reasoning is None:
            return 0
        opening, closing = self.layout.reasoning
        start = source.find(opening)
        header = self.layout.header
        if start == -1 or not header.strip().startswith(source[:start].strip()):
            return 0
        start += len(opening)
        stop = source.find(closing, start)
        body = source[start:] if stop == -1 else source[start:stop]
        end = self._end_of_turn(body, 0) if stop == -1 else len(body)
        reasoning = body[:end].strip()
        if reasoning:
            message["reasoning_content"] = reasoning
        return len(source) if stop == -1 else stop + len(closing)

    def _end_of_turn(self, source: str, position: int) -> int:
        for marker in self.layout.end:
            found = source.find(marker, position)
            if found != -1:
                return found
        return len(source)

    def _without_content_open(self, content: str) -> str:
        stripped = content.lstrip()
        for opening in (*self.layout.content_open, self.layout.prefill.strip()):
            if not opening:
                continue
            if stripped.startswith(opening):
                return stripped[len(opening):]
        return content

    def _content_and_calls(self, source: str, position: int, end: int
                           ) -> Tuple[str, List[Dict[str, Any]]]:
        layout = self.layout.calls
        if layout is None:
            return source[position:end], []
        text = source[:end]
        marker = layout.section_open or layout.open
        if layout.json_list:
            # '[TOOL_CALLS] [' is written '[TOOL_CALLS][' as often: find the part before '['.
            marker = layout.section_open[:-1].strip() or marker
        if marker:
            found = text.find(marker, position)
            if found == -1:
                return text[position:], []
            calls, stop = self._calls(text, found, layout)
            return text[position:found] + text[stop:], calls
        begin = _skip_space(text, self._content_open_end(text, position))
        try:
            calls, stop = self._calls(text, begin, layout)
        except _Misfit:
            return text[position:], []
        if text[stop:].strip() and not self.layout.content_after_calls:
            return text[position:], []
        return text[stop:], calls

    def _content_open_end(self, text: str, position: int) -> int:
        start = _skip_space(text, position)
        for opening in self.layout.content_open:
            if text.startswith(opening, start):
                return start + len(opening)
        return position

    def _calls(self, text: str, position: int, layout: CallLayout
               ) -> Tuple[List[Dict[str, Any]], int]:
        if layout.json_list:
            return self._json_list(text, position, layout)
        if layout.section_open:
            position = _expect(text, position, layout.section_open)
        calls = []
        while True:
            call, position = self._one_call(text, position, layout)
            calls.append(call)
            after = _skip_space(text, position)
            if layout.separator:
                if not text.startswith(layout.separator, after):
                    break
                after += len(layout.separator)
            try:  # another call follows, or the calls are over
                self._one_call(text, after, layout)
            except _Misfit:
                break
            position = after
        return calls, self._after_section(text, position, layout.section_close)

    @staticmethod
    def _after_section(text: str, position: int, closing: str) -> int:
        stop = _skip_space(text, position)
        return stop + len(closing) if closing and text.startswith(closing, stop) else position

    def _json_list(self, text: str, position: int, layout: CallLayout
                   ) -> Tuple[List[Dict[str, Any]], int]:
        # The section's markers hold the array's brackets: '[TOOL_CALLS] [' ... ']'.
        position = _expect(text, position, layout.section_open[:-1])
        begin = _skip_space(text, position)
        value, stop = _decode(text, begin)
        if not isinstance(value, list) or not value:
            raise _Misfit("expected a JSON array of calls", begin)
        calls = [self._call_from_json(item, layout, begin) for item in value]
        closing = layout.section_close[1:] if layout.section_close.startswith("]") else ""
        return calls, self._after_section(text, stop, closing.strip())

    def _one_call(self, text: str, position: int, layout: CallLayout
                  ) -> Tuple[Dict[str, Any], int]:
        if layout.body == "json":
            position = _expect(text, position, layout.open)
            start = _skip_space(text, position)
            value, position = _decode(text, start)
            call = self._call_from_json(value, layout, start)
            return call, _expect(text, position, layout.close)
        return self._sequence_call(text, position, layout.elements)

    def _call_from_json(self, value: Any, layout: CallLayout, position: int) -> Dict[str, Any]:
        name = _at_path(value, layout.name_path)
        arguments = _at_path(value, layout.arguments_path)
        if isinstance(arguments, str):
            try:
                arguments = _decode(arguments, _skip_space(arguments, 0), whole=True)[0]
            except _Misfit as misfit:
                raise _Misfit(f"arguments text: {misfit}", position) from None
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise _Misfit("a call without a name and arguments", position)
        call_id = _at_path(value, layout.id_path) if layout.id_path else None
        return self._call(name, arguments, call_id if isinstance(call_id, str) else None)

    def _call(self, name: str, arguments: Dict[str, Any], call_id: Optional[str]) -> Dict[str, Any]:
        properties = self._parameters.get(name)
        if properties:
            for key, value in list(arguments.items()):
                types = _schema_types(properties.get(key))
                if isinstance(value, str) and types:
                    arguments[key] = _coerce(value, types)
        call: Dict[str, Any] = {"type": "function",
                                "function": {"name": name, "arguments": arguments}}
        if call_id is not None:
            call["id"] = call_id
        return call

    def _sequence_call(self, text: str, position: int, elements: Sequence[Tuple[str, Any]]
                       ) -> Tuple[Dict[str, Any], int]:
        fields: Dict[str, Any] = {}
        for index, (kind, value) in enumerate(elements):
            following = elements[index + 1] if index + 1 < len(elements) else None
            if kind == "lit":
                position = _expect(text, position, value)
            elif kind == "args_json":
                start = _skip_space(text, position)
                decoded, position = _decode(text, start)
                if not isinstance(decoded, dict):
                    raise _Misfit("arguments that are not a JSON object", start)
                fields["arguments"] = decoded
            elif kind == "kv":
                fields["arguments"], position = self._key_values(
                    text, position, value, following[1] if following else "")
            else:
                stop_at = _terminator(following)
                stop = _find(text, stop_at, position)[0]
                if stop == -1:
                    raise _Misfit(f"no {stop_at!r} after the call's {kind}", position)
                fields[kind] = text[position:stop].strip()
                position = stop
        if not fields.get("name"):
            raise _Misfit("a call without a name", position)
        return self._call(fields["name"], fields.get("arguments", {}), fields.get("id")), position

    def _key_values(self, text: str, position: int, layout: KeyValueLayout, next_literal: str
                    ) -> Tuple[Dict[str, Any], int]:
        arguments: Dict[str, Any] = {}
        next_pair = (layout.value_close + layout.separator + layout.key_open).strip()
        last_pair = (layout.value_close + next_literal).strip()
        value_close = layout.value_close.strip()
        key_close = layout.key_close.strip()
        opened = False
        last: Optional[int] = None  # where the text after the last value starts (-1: nowhere)
        while True:
            if not opened:
                try:
                    position = _expect(text, position, layout.key_open)
                except _Misfit:
                    break
            stop, stop_end = _find(text, key_close, position)
            if stop == -1:
                raise _Misfit(f"no {key_close!r} after an argument name", position)
            key = text[position:stop].strip()
            if not layout.key_open.strip() and not _IDENTIFIER.match(key):
                # Keys without a marker of their own are names (f(a=1)); anything else means
                # the values are written differently from the template's layout.
                raise _Misfit(f"{key!r} is not an argument name", position)
            position = stop_end
            more, more_end = _find(text, next_pair, position)
            if last is None or 0 <= last < position:  # looked up again once passed: linear
                last = _find(text, last_pair, position)[0]
            if last == -1 and more == -1:
                raise _Misfit("an argument value without its end", position)
            if more != -1 and not layout.key_open.strip():
                more = _next_unmarked_key(text, more_end, key_close, more, next_pair)
                more_end = more + len(next_pair)
            if more != -1 and (last == -1 or more < last):
                arguments[key] = text[position:more].strip()
                position, opened = more_end, True
                continue
            value = text[position:last].strip()
            if layout.quote and key_close in value:
                # A quoted value holding the next argument's ('SF", units="metric'): the
                # arguments are separated differently from the template's layout.
                raise _Misfit("an argument value that holds another argument", position)
            arguments[key] = value
            position = _expect(text, last, value_close)
            break
        return arguments, position


def _next_unmarked_key(text: str, start: int, key_close: str, found: int, separator: str) -> int:
    """Where the next argument begins when keys have no open marker (``f(a=1, b=2)``): the
    first separator followed by a name and ``key_close``; -1 if none is."""
    while found != -1:
        stop = text.find(key_close, start)
        if stop != -1 and _IDENTIFIER.match(text[start:stop].strip()):
            return found
        found = text.find(separator, found + 1)
        start = found + len(separator)
    return -1


def _terminator(element: Optional[Tuple[str, Any]]) -> str:
    if element is None:
        return ""
    kind, value = element
    if kind == "lit":
        return value.strip()
    if kind == "kv":
        return value.key_open.strip() or value.key_close.strip()
    return ""


def comparable(message: Dict[str, Any]) -> Tuple[Any, ...]:
    """What a round trip compares: content and reasoning without the whitespace at their ends,
    calls as (name, arguments) (arguments given as JSON text decoded)."""
    def text(value: Any) -> Optional[str]:
        return value.strip() or None if isinstance(value, str) else None

    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                pass
        calls.append((function.get("name"), arguments))
    return (text(message.get("content")), text(message.get("reasoning_content")), calls)


def _checked(layout: ResponseLayout, witnesses: Sequence[Tuple[str, Dict[str, Any], Optional[str]]]
             ) -> ResponseLayout:
    """Declare in ``unsupported`` every field whose witness does not come back from a parse of
    the turn the template writes for it: what the layout reads is then known to parse."""
    unsupported = dict(layout.unsupported)
    checker = ResponseParser(layout, WITNESS_TOOLS)
    for field_name, message, turn in witnesses:
        if field_name in unsupported or (field_name != "content" and "tool_calls" in unsupported
                                         and "tool_call" in field_name):
            continue
        if field_name == "reasoning_content" and layout.reasoning is None:
            continue
        if turn is None:
            if field_name != "content":
                unsupported[field_name] = "the template refuses to write such a message"
            continue
        if comparable(checker._parse_source(turn)) != comparable(message):
            unsupported[field_name] = (
                "the template writes it, but not in a form that parses back unambiguously")
    calls = layout.calls if "tool_calls" not in unsupported else None
    reasoning = layout.reasoning if "reasoning_content" not in unsupported else None
    return replace(layout, unsupported=unsupported, calls=calls, reasoning=reasoning)


def response_parser(template: Any, messages: Any = None, tools: Any = None,
                    add_generation_prompt: bool = True, continue_final_message: Any = False,
                    **template_kwargs: Any) -> ResponseParser:
    """Derive the parser of ``template``'s assistant turn in this prompt context."""
    layout, witnesses = derive(template, messages, tools, add_generation_prompt,
                               continue_final_message, template_kwargs)
    return ResponseParser(_checked(layout, witnesses), tools)

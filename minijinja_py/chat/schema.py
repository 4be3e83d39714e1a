"""JSON schemas for tools given as Python functions.

:func:`get_json_schema` turns a function with type hints and a Google-style docstring into the
``{"type": "function", "function": {...}}`` tool description that chat templates read, with the
same output as transformers' ``get_json_schema`` (5.24): the same type mapping, the same
docstring sections (``Args:``, ``Returns:``, ``Raises:``), the same ``(choices: [...])`` enums
and the same errors for what cannot be converted.

Only the standard library is used; PIL images and torch tensors are recognised by their class
name, without importing either library.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = [
    "get_json_schema",
    "parse_google_docstring",
    "TypeHintParsingException",
    "DocstringParsingException",
]


class TypeHintParsingException(ValueError):
    """A parameter's type hint has no JSON-schema equivalent (a custom class, ``tuple[int]``...)."""


class DocstringParsingException(ValueError):
    """The function has no docstring, or the docstring does not describe every argument."""


# Python scalar types that may appear as JSON values (in an ``enum``), with their schema names.
_SCALAR_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean",
                 type(None): "null"}

_BASIC_SCHEMAS: Dict[Any, Dict[str, str]] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    list: {"type": "array"},
    tuple: {"type": "array"},
    dict: {"type": "object"},
}


def _media_schema(hint: Any) -> Optional[Dict[str, str]]:
    """PIL images and torch tensors map to ``image``/``audio`` (recognised without importing)."""
    if not isinstance(hint, type):
        return None
    where = (getattr(hint, "__module__", ""), getattr(hint, "__qualname__", ""))
    if where == ("PIL.Image", "Image"):
        return {"type": "image"}
    if where == ("torch", "Tensor"):
        return {"type": "audio"}
    return None


def _enum_schema(values: List[Any]) -> Dict[str, Any]:
    kinds: List[str] = []
    for value in values:
        name = _SCALAR_NAMES[type(value)]
        if name not in kinds:
            kinds.append(name)
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _hint_text(hint: Any) -> str:
    return str(hint).replace("typing.", "")


def _schema_for_hint(hint: Any) -> Dict[str, Any]:
    """The JSON schema of one type hint (recursive for containers and unions)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)

    if origin is None:
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            values = [member.value for member in hint]
            if not values:
                raise TypeHintParsingException(
                    f"The Enum {hint.__name__} has no members, so no value could ever match it.")
            if any(type(value) not in _SCALAR_NAMES for value in values):
                raise TypeHintParsingException(
                    f"The Enum {hint.__name__} has member values that are not JSON scalars "
                    f"(values: {values}); only int, float, str, bool and None can be converted.")
            return _enum_schema(values)
        if hint is Any:
            return {}
        if hint in _BASIC_SCHEMAS:
            return dict(_BASIC_SCHEMAS[hint])
        media = _media_schema(hint)
        if media is not None:
            return media
        raise TypeHintParsingException(
            f"Cannot convert the type hint {hint!r} to a JSON schema (probably a custom class). "
            "Use basic types (int, float, str, bool), Enum classes, Literal, or list/tuple/dict/"
            "Union of those, or write the tool's JSON schema by hand.")

    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        parts = [_schema_for_hint(arg) for arg in args if arg is not type(None)]
        if len(parts) == 1:
            result = parts[0]
        elif all(set(part) == {"type"} and isinstance(part["type"], str) for part in parts):
            names = sorted({part["type"] for part in parts})
            result = {"type": names[0] if len(names) == 1 else names}
        else:
            result = {"anyOf": parts}
        if type(None) in args:
            result["nullable"] = True
        return result

    if origin is typing.Literal and args:
        if any(type(arg) not in _SCALAR_NAMES for arg in args):
            raise TypeHintParsingException(
                "typing.Literal may only list JSON scalar values (int, float, str, bool, None).")
        return _enum_schema(list(args))

    if origin is list:
        return {"type": "array", "items": _schema_for_hint(args[0])} if args else {"type": "array"}

    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1:
            raise TypeHintParsingException(
                f"The type hint {_hint_text(hint)} is a tuple of a single element, which is not "
                "converted automatically: use list[...] for several items, or drop the tuple.")
        if Ellipsis in args:
            raise TypeHintParsingException(
                "'...' in a tuple type hint cannot be converted; use list[...] for inputs of "
                "variable length.")
        return {"type": "array", "prefixItems": [_schema_for_hint(arg) for arg in args]}

    if origin is dict:
        result = {"type": "object"}
        if len(args) == 2:
            result["additionalProperties"] = _schema_for_hint(args[1])
        return result

    raise TypeHintParsingException(f"Cannot convert the type hint {hint!r} to a JSON schema.")


def _parameters_schema(func: Callable[..., Any]) -> Dict[str, Any]:
    hints = typing.get_type_hints(func)
    signature = inspect.signature(func)
    name = getattr(func, "__name__", "operation")
    params = list(signature.parameters.values())
    receiver = None
    if params and params[0].name in ("self", "cls") and params[0].annotation is inspect.Parameter.empty:
        receiver = params[0].name

    required: List[str] = []
    for param in params:
        if param.name == receiver:
            continue
        if param.annotation is inspect.Parameter.empty:
            raise TypeHintParsingException(
                f"Argument {param.name} is missing a type hint in function {name}")
        if param.default is inspect.Parameter.empty:
            required.append(param.name)

    properties: Dict[str, Any] = {}
    for param_name, hint in hints.items():
        if param_name == receiver:
            continue
        if param_name == "return":
            # The model never produces the return value: an unconvertible hint is just left out.
            try:
                properties["return"] = _schema_for_hint(hint)
            except TypeHintParsingException:
                pass
            continue
        properties[param_name] = _schema_for_hint(hint)

    schema: Dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


# ---- Google-style docstrings -----------------------------------------------------------------
_SECTION_WORDS = ("Args:", "Returns:", "Raises:")
# "name:" or "name (type):" at the start of a line, with its indentation.
_ARG_HEADER = re.compile(r"([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:(.*)\Z", re.DOTALL)
_ARGS_HEADER = re.compile(r"\n\s*Args:\n")
_RETURNS_HEADER = re.compile(r"\n\s*Returns:\n")
_LINE_BREAKS = re.compile(r"\s*\n+\s*")
_CHOICES = re.compile(r"\(choices:", re.IGNORECASE)


def _first_index(text: str, words: Tuple[str, ...], start: int = 0) -> int:
    found = [i for i in (text.find(word, start) for word in words) if i >= 0]
    return min(found) if found else len(text)


def _parse_args_block(block: str) -> Dict[str, str]:
    lines = [line for line in block.split("\n") if line.strip()]
    described: Dict[str, str] = {}
    current: Optional[Tuple[str, str, List[str]]] = None  # (indent, name, description lines)

    def finish() -> None:
        if current is not None:
            text = "\n".join(current[2]).strip()
            described[current[1]] = _LINE_BREAKS.sub(" ", text)

    # An argument whose header line has no text after the colon takes the next line as the
    # start of its description, whatever that line looks like (transformers' parser does).
    takes_next_line = False
    for line in lines:
        match = _ARG_HEADER.match(line)
        deeper = current is not None and (line.startswith(current[0] + " ")
                                          or line.startswith(current[0] + "\t"))
        if match and not deeper and not takes_next_line:
            finish()
            current = (match.group(1), match.group(2), [match.group(3)])
            takes_next_line = not match.group(3).strip()
        elif current is not None:
            current[2].append(line)
            takes_next_line = False
    finish()
    return described


def parse_google_docstring(docstring: str) -> Tuple[str, Dict[str, str], Optional[str]]:
    """Split a Google-style docstring into ``(description, {argument: description}, returns)``.

    The description is the text before the first ``Args:``/``Returns:``/``Raises:``; argument
    descriptions may continue on lines indented deeper than the argument's name (joined with
    single spaces); ``returns`` is the ``Returns:`` section's text, or None without one.
    """
    description = docstring[:_first_index(docstring, _SECTION_WORDS)].strip()

    arguments: Dict[str, str] = {}
    header = _ARGS_HEADER.search(docstring)
    if header is not None:
        end = _first_index(docstring, ("Returns:", "Raises:"), header.end())
        arguments = _parse_args_block(docstring[header.end():end].rstrip())

    returns: Optional[str] = None
    header = _RETURNS_HEADER.search(docstring)
    if header is not None:
        end = _first_index(docstring, ("Raises:",), header.end())
        returns = docstring[header.end():end].strip()
    return description, arguments, returns


def _split_choices(description: str) -> Tuple[str, Optional[List[Any]]]:
    """``"... (choices: ["a", "b"])"`` at the end of an argument description becomes an enum."""
    trimmed = description.rstrip()
    if not trimmed.endswith(")"):
        return description, None
    found = _CHOICES.search(trimmed)
    if found is None:
        return description, None
    start = found.start()
    choices = json.loads(trimmed[found.end():-1].strip())
    values = [choice.strip() if isinstance(choice, str) else choice for choice in choices]
    return description[:start].strip(), values


def get_json_schema(func: Callable[..., Any]) -> Dict[str, Any]:
    """Describe ``func`` as a chat-template tool: ``{"type": "function", "function": {...}}``.

    ``function`` holds ``name``, ``description`` (the docstring's text before its sections) and
    ``parameters`` (a JSON schema object built from the type hints, each property described by
    the docstring's ``Args:`` entry, ``required`` listing the arguments without defaults); a
    ``return`` entry is added when the return hint is convertible. ``self``/``cls`` of methods
    are skipped. Raises :class:`DocstringParsingException` when the docstring is missing or does
    not describe an argument, :class:`TypeHintParsingException` for hints that have no JSON
    schema (both are ValueErrors).
    """
    name = getattr(func, "__name__", "operation")
    doc = inspect.getdoc(func)
    if not doc:
        raise DocstringParsingException(
            f"Cannot generate JSON schema for {name} because it has no docstring!")
    description, arguments, returns = parse_google_docstring(doc.strip())

    parameters = _parameters_schema(func)
    returned = parameters["properties"].pop("return", None)
    if returned is not None and returns is not None:
        returned["description"] = returns
    for arg, schema in parameters["properties"].items():
        if arg not in arguments:
            raise DocstringParsingException(
                f"Cannot generate JSON schema for {name} because the docstring has no "
                f"description for the argument '{arg}'")
        text, choices = _split_choices(arguments[arg])
        if choices is not None:
            schema["enum"] = choices
        schema["description"] = text

    function: Dict[str, Any] = {"name": name, "description": description,
                                "parameters": parameters}
    if returned is not None:
        function["return"] = returned
    return {"type": "function", "function": function}

"""``tojson`` of plain data in one pass: the text ``json.dumps`` makes, and its size bound.

Chat templates print tool schemas with ``tojson``, often with ``indent``; for that,
``json.dumps`` runs its pure-Python encoder (a generator per container), and the sandbox first
walks the data once more to bound the text's size (filters._check_serialised_size) before
any of it is made. (Without an indent, ``json.dumps`` runs in C and that stays faster: this
module is used with an indent only.) For the common case, plain trees of exact ``dict``/``list``/``tuple``/
``str``/``int``/``float``/``bool``/``None``, this module does both in one recursive walk that
appends pieces to a list: the same characters as ``json.dumps``, and the same size bound as
the sandbox's walk (filters._tree_text_size: the render is charged exactly the same steps).

Anything else is left to the general path, which decides as before: shared or nested-too-deep
containers, keys that are not str, subclasses, huge integers, options ``json.dumps`` would
refuse, and data whose bound (times the escaping factor) passes ``Limits.max_string_size``:
the walk stops there, so it never builds more than the limit allows.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, List, Optional, Tuple

from .common import json_parts

_, encode_basestring, encode_basestring_ascii = json_parts()

__all__ = ["plain_dumps"]


class _NotPlain(Exception):
    """The value needs the general path."""


# Integers longer than this are left to json.dumps (Python may refuse to print them)
_INT_BITS = 1000
_INFINITY = float("inf")

# indent text -> the line break and indentation before an item at each depth up to
# _CACHED_DEPTHS (deeper ones are made when met), for short indents (a long one is made at
# each depth as it is met: never more than the text needs); a few are kept, as templates use
# one or two
_BREAKS: "Dict[str, Tuple[str, ...]]" = {}
_CACHED_DEPTHS = 16
_CACHED_INDENTS = 8
_CACHED_INDENT_LENGTH = 16


def _breaks(indent_text: Optional[str]) -> "Tuple[str, ...]":
    if indent_text is None:
        return ("",) * (_CACHED_DEPTHS + 1)
    found = _BREAKS.get(indent_text)
    if found is None:
        if len(indent_text) > _CACHED_INDENT_LENGTH:
            return ()
        found = tuple("\n" + indent_text * depth for depth in range(_CACHED_DEPTHS + 1))
        if len(_BREAKS) < _CACHED_INDENTS:
            _BREAKS[indent_text] = found
    return found


def _options(indent: Any, separators: Any) -> Optional[Tuple[Optional[str], str, str]]:
    """(indent text or None, item separator, key separator) as json.dumps reads them."""
    if indent is None:
        indent_text = None
    elif type(indent) is str:
        indent_text = indent
    elif type(indent) is int:
        indent_text = " " * indent
    else:
        return None
    if separators is None:
        item_separator, key_separator = (",", ": ") if indent is not None else (", ", ": ")
    elif type(separators) in (tuple, list) and len(separators) == 2 and \
            type(separators[0]) is str and type(separators[1]) is str:
        item_separator, key_separator = separators
    else:
        return None
    return indent_text, item_separator, key_separator


def plain_dumps(value: Any, ensure_ascii: bool, indent: Any, separators: Any, sort_keys: bool,
                indent_width: int, max_depth: int, size_limit: float
                ) -> Optional[Tuple[str, int]]:
    """``(json.dumps(value, ...), size bound)``, or None when ``value`` needs the general
    path. ``indent_width`` and the separators' lengths enter the bound exactly as the
    sandbox's walk counts them; the walk gives up once the bound passes ``size_limit``."""
    options = _options(indent, separators)
    if options is None:
        return None
    indent_text, item_separator, key_separator = options
    encode = encode_basestring_ascii if ensure_ascii else encode_basestring
    per_item = len(item_separator) + len(key_separator)
    parts: List[str] = []
    append = parts.append
    extend = parts.extend
    seen: set = set()
    float_repr = float.__repr__
    int_repr = int.__repr__
    # the line break and indentation before an item at each depth ("" without an indent)
    breaks = _breaks(indent_text)
    cached_depths = len(breaks)

    def line_break(depth: int) -> str:
        if depth < cached_depths:
            return breaks[depth]
        return "" if indent_text is None else "\n" + indent_text * depth

    def text_bound(text: str) -> int:
        return (6 * len(text) if ensure_ascii and not text.isascii() else len(text)) + 2

    def scalar(obj: Any, kind: type) -> int:
        """Append a scalar's text; return its size bound."""
        if kind is str:
            append(encode(obj))
            return text_bound(obj)
        if kind is bool:
            append("true" if obj else "false")
            return 24
        if kind is int:
            if obj.bit_length() > _INT_BITS:
                raise _NotPlain
            append(int_repr(obj))
            return obj.bit_length() * 30103 // 100000 + 2
        if kind is float:
            if obj != obj:
                append("NaN")
            elif obj == _INFINITY:
                append("Infinity")
            elif obj == -_INFINITY:
                append("-Infinity")
            else:
                append(float_repr(obj))
            return 24
        if obj is None:
            append("null")
            return 24
        raise _NotPlain

    # The size bound so far is passed along and returned (a local is cheaper than a shared
    # variable); every item appends its separator, the first one's is then replaced by the
    # line break alone (no test for "first" per item).
    def container(obj: Any, kind: type, depth: int, bound: int) -> int:
        if depth > max_depth or id(obj) in seen:
            raise _NotPlain
        seen.add(id(obj))
        bound += 2
        if not obj:
            append("{}" if kind is dict else "[]")
            return bound
        step = per_item + (indent_width * (depth + 1) + 1 if indent_width else 0)
        inner = breaks[depth + 1] if depth + 1 < cached_depths else line_break(depth + 1)
        separator = item_separator + inner
        append("{" if kind is dict else "[")
        first = len(parts)
        if kind is dict:
            items = obj.items()
            if sort_keys:
                if any(type(key) is not str for key in obj):
                    raise _NotPlain
                items = sorted(items)
            for key, item in items:
                if type(key) is not str:
                    raise _NotPlain
                item_kind = type(item)
                if item_kind is str:  # (most values of a tool schema: no call for them)
                    extend((separator, encode(key), key_separator, encode(item)))
                    bound += (step + len(key) + len(item) + 4 if not ensure_ascii
                              else step + text_bound(key) + text_bound(item))
                else:
                    extend((separator, encode(key), key_separator))
                    bound += step + (len(key) + 2 if not ensure_ascii else text_bound(key))
                    if item_kind is dict or item_kind is list or item_kind is tuple:
                        bound = container(item, item_kind, depth + 1, bound)
                    else:
                        bound += scalar(item, item_kind)
                if bound > size_limit:
                    raise _NotPlain
        else:
            # (the value's dispatch is written out in both loops: a call per value is what
            # this module exists to save)
            for item in obj:
                append(separator)
                item_kind = type(item)
                if item_kind is str:
                    append(encode(item))
                    bound += (step + len(item) + 2 if not ensure_ascii
                              else step + text_bound(item))
                else:
                    bound += step
                    if item_kind is dict or item_kind is list or item_kind is tuple:
                        bound = container(item, item_kind, depth + 1, bound)
                    else:
                        bound += scalar(item, item_kind)
                if bound > size_limit:
                    raise _NotPlain
        parts[first] = inner
        append((breaks[depth] if depth < cached_depths else line_break(depth))
               + ("}" if kind is dict else "]"))
        return bound

    try:
        kind = type(value)
        if kind is dict or kind is list or kind is tuple:
            bound = container(value, kind, 0, 0)
        else:
            bound = scalar(value, kind)
    except (_NotPlain, RecursionError):
        return None
    if bound > size_limit:
        return None
    return "".join(parts), bound

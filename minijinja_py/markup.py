"""Markup: a str that is already HTML-safe, with Jinja2/MarkupSafe semantics.

Autoescaping is off in chat templates, yet ``|safe`` and ``|escape`` still return Markup, and a
real template relies on ``'<b>'|safe + x`` escaping ``x``. So: adding a plain str to Markup
escapes the plain side, ``%`` escapes its arguments, and most str methods return Markup again.
"""

from __future__ import annotations

import re
import string
from typing import Any, Iterable

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "'": "&#39;", '"': "&#34;"})
_TAG_RE = re.compile(r"<.*?>", re.S)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
_ENTITY_RE = re.compile(r"&(#\d+|#[xX][0-9a-fA-F]+|[a-zA-Z]+);")
_NAMED_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'", "nbsp": "\xa0"}


def escape(value: Any) -> "Markup":
    """HTML-escape ``value`` (``& < > ' "``) unless it is already Markup/``__html__``."""
    if isinstance(value, Markup):
        return value
    if hasattr(value, "__html__"):
        return Markup(value.__html__())
    return Markup(str(value).translate(_ESCAPES))


def soft_str(value: Any) -> str:
    """``str(value)``, but Markup (and other str) stays as it is."""
    return value if isinstance(value, str) else str(value)


class _EscapeArgument:
    """Wraps a ``%`` argument so that str()/repr() of it come out escaped."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getitem__(self, key: Any) -> "_EscapeArgument":
        return _EscapeArgument(self.obj[key])

    def __str__(self) -> str:
        return str(escape(self.obj))

    def __repr__(self) -> str:
        return str(escape(repr(self.obj)))

    def __int__(self) -> int:
        return int(self.obj)

    def __float__(self) -> float:
        return float(self.obj)

    def __index__(self) -> int:
        return self.obj.__index__()


class Markup(str):
    """A string that is safe to insert into HTML without escaping."""

    __slots__ = ()

    def __new__(cls, base: Any = "", encoding: Any = None, errors: str = "strict") -> "Markup":
        if hasattr(base, "__html__"):
            base = base.__html__()
        if encoding is None:
            return super().__new__(cls, base)
        return super().__new__(cls, base, encoding, errors)

    def __html__(self) -> "Markup":
        return self

    def __add__(self, other: Any) -> "Markup":
        if isinstance(other, str) or hasattr(other, "__html__"):
            return self.__class__(str.__add__(self, escape(other)))
        return NotImplemented

    def __radd__(self, other: Any) -> "Markup":
        if isinstance(other, str) or hasattr(other, "__html__"):
            return escape(other).__add__(self)
        return NotImplemented

    def __mul__(self, count: Any) -> "Markup":
        if isinstance(count, int):
            return self.__class__(str.__mul__(self, count))
        return NotImplemented

    __rmul__ = __mul__

    def __mod__(self, arg: Any) -> "Markup":
        if isinstance(arg, tuple):
            arg = tuple(_EscapeArgument(item) for item in arg)
        elif hasattr(type(arg), "__getitem__") and not isinstance(arg, str):
            arg = _EscapeArgument(arg)
        else:
            arg = (_EscapeArgument(arg),)
        return self.__class__(str.__mod__(self, arg))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({str.__repr__(self)})"

    def join(self, seq: Iterable[Any]) -> "Markup":  # type: ignore[override]
        return self.__class__(str.join(self, map(escape, seq)))

    def split(self, sep: Any = None, maxsplit: int = -1) -> list:  # type: ignore[override]
        return [self.__class__(part) for part in str.split(self, sep, maxsplit)]

    def rsplit(self, sep: Any = None, maxsplit: int = -1) -> list:  # type: ignore[override]
        return [self.__class__(part) for part in str.rsplit(self, sep, maxsplit)]

    def splitlines(self, keepends: bool = False) -> list:  # type: ignore[override]
        return [self.__class__(part) for part in str.splitlines(self, keepends)]

    def partition(self, sep: str) -> tuple:  # type: ignore[override]
        return tuple(self.__class__(part) for part in str.partition(self, escape(sep)))

    def rpartition(self, sep: str) -> tuple:  # type: ignore[override]
        return tuple(self.__class__(part) for part in str.rpartition(self, escape(sep)))

    def format(self, *args: Any, **kwargs: Any) -> "Markup":  # type: ignore[override]
        formatter = _EscapeFormatter()
        return self.__class__(formatter.vformat(self, args, kwargs))

    def unescape(self) -> str:
        """Convert entities back to characters."""
        def replace(match: "re.Match[str]") -> str:
            name = match.group(1)
            if name.startswith(("#x", "#X")):
                return chr(int(name[2:], 16))
            if name.startswith("#"):
                return chr(int(name[1:]))
            return _NAMED_ENTITIES.get(name, match.group(0))

        return _ENTITY_RE.sub(replace, str(self))

    def striptags(self) -> str:
        """Remove tags and comments, collapse whitespace, unescape entities."""
        value = _COMMENT_RE.sub("", str(self))
        value = _TAG_RE.sub("", value)
        value = " ".join(value.split())
        return self.__class__(value).unescape()


class _EscapeFormatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if hasattr(value, "__html_format__"):
            return value.__html_format__(format_spec)
        return str(escape(format(value, format_spec)))


def _wrap_method(name: str) -> None:
    original = getattr(str, name)

    def method(self: Markup, *args: Any, **kwargs: Any) -> Markup:
        args = tuple(escape(a) if isinstance(a, str) else a for a in args)
        return self.__class__(original(self, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = original.__doc__
    setattr(Markup, name, method)


for _name in ("__getitem__", "capitalize", "title", "lower", "upper", "replace", "ljust", "rjust",
              "lstrip", "rstrip", "center", "strip", "translate", "expandtabs", "swapcase",
              "zfill", "casefold", "removeprefix", "removesuffix"):
    _wrap_method(_name)

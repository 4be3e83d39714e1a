"""Markup: a str that is already HTML-safe, with Jinja2/MarkupSafe semantics.

Autoescaping is off in chat templates, yet ``|safe`` and ``|escape`` still return Markup, and a
real template relies on ``'<b>'|safe + x`` escaping ``x``. So: adding a plain str to Markup
escapes the plain side, ``%`` escapes its arguments, and most str methods return Markup again.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Iterable

def escape(value: Any) -> "Markup":
    """HTML-escape ``value`` (``& < > ' "``) unless it is already Markup/``__html__``.

    A chain of ``str.replace`` (MarkupSafe's own pure-Python way): each runs at C speed,
    where ``str.translate`` with a multi-character table costs a dictionary lookup per
    character.
    """
    if isinstance(value, Markup):
        return value
    if hasattr(value, "__html__"):
        return Markup(value.__html__())
    if type(value) is str:
        text = value
    else:
        from .filters.common import check_str_size

        check_str_size(value)  # str() of a container may be far longer than it is in memory
        text = str(value)
    if len(text) > _CHECK_ESCAPED_FROM:
        _check_escaped_size(text)
    return Markup(text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")
                  .replace("'", "&#39;").replace('"', "&#34;"))


#: Strings longer than this are measured before escaping: each of ``& ' "`` becomes five
#: characters and ``< >`` four, so escaping can make a string five times longer.
_CHECK_ESCAPED_FROM = 4096


def _check_escaped_size(text: str) -> None:
    from ..guard.limits import check_string_size, current_limits

    if len(text) * 5 <= current_limits().max_string_size:
        return
    check_string_size(len(text) + 4 * (text.count("&") + text.count("'") + text.count('"'))
                      + 3 * (text.count("<") + text.count(">")))


def soft_str(value: Any) -> str:
    """``str(value)``, but Markup (and other str) stays as it is."""
    return value if isinstance(value, str) else str(value)


class _MarkupEscapeHelper:
    """Wraps a ``%`` argument so that str()/repr() of it come out escaped."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getitem__(self, key: Any) -> "_MarkupEscapeHelper":
        return _MarkupEscapeHelper(self.obj[key])

    def __str__(self) -> str:
        return str(escape(self.obj))

    def __repr__(self) -> str:
        return str(escape(repr(self.obj)))

    def __int__(self) -> int:
        return int(self.obj)

    def __float__(self) -> float:
        return float(self.obj)


class Markup(str):
    """A string that is safe to insert into HTML without escaping, as MarkupSafe's ``Markup``.

    Text combined with Markup is escaped on the way in: ``+``, ``%``, :meth:`join`,
    :meth:`format`, :meth:`replace` and the padding methods escape their plain-str arguments
    (``Markup("<b>") + "&"`` is ``Markup("<b>&amp;")``), and the str methods that return text
    (``split``, ``strip``, ``upper``...) return Markup again. Templates meet it inside
    ``{% autoescape true %}`` and through the ``safe`` and ``escape`` filters; the chat
    environment, like transformers', does not escape output.
    """

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
            arg = tuple(_MarkupEscapeHelper(item) for item in arg)
        elif hasattr(type(arg), "__getitem__") and not isinstance(arg, str):
            arg = _MarkupEscapeHelper(arg)
        else:
            arg = (_MarkupEscapeHelper(arg),)
        return self.__class__(str.__mod__(self, arg))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({str.__repr__(self)})"

    # (the methods below take their arguments by position only, as markupsafe's do: a
    # keyword is refused with Python's own message, which names the parameter)
    def join(self, iterable: Iterable[Any], /) -> "Markup":  # type: ignore[override]
        return self.__class__(str.join(self, map(escape, iterable)))

    def split(self, sep: Any = None, maxsplit: int = -1) -> list:  # type: ignore[override]
        return [self.__class__(part) for part in str.split(self, sep, maxsplit)]

    def rsplit(self, sep: Any = None, maxsplit: int = -1) -> list:  # type: ignore[override]
        return [self.__class__(part) for part in str.rsplit(self, sep, maxsplit)]

    def splitlines(self, keepends: bool = False) -> list:  # type: ignore[override]
        return [self.__class__(part) for part in str.splitlines(self, keepends)]

    def partition(self, sep: str, /) -> tuple:  # type: ignore[override]
        return tuple(self.__class__(part) for part in str.partition(self, sep))

    def rpartition(self, sep: str, /) -> tuple:  # type: ignore[override]
        return tuple(self.__class__(part) for part in str.rpartition(self, sep))

    def replace(self, old: str, new: str, count: Any = -1, /) -> "Markup":  # type: ignore[override]
        return self.__class__(str.replace(self, old, escape(new), count))

    def ljust(self, width: Any, fillchar: str = " ", /) -> "Markup":  # type: ignore[override]
        return self.__class__(str.ljust(self, width, escape(fillchar)))

    def rjust(self, width: Any, fillchar: str = " ", /) -> "Markup":  # type: ignore[override]
        return self.__class__(str.rjust(self, width, escape(fillchar)))

    def center(self, width: Any, fillchar: str = " ", /) -> "Markup":  # type: ignore[override]
        return self.__class__(str.center(self, width, escape(fillchar)))

    def format(self, *args: Any, **kwargs: Any) -> "Markup":  # type: ignore[override]
        from .methods import _str_format  # sandboxed lookups, escaped values

        return _str_format(self, *args, **kwargs)  # type: ignore[return-value]

    def unescape(self) -> str:
        """Convert HTML entities back to characters."""
        from html import unescape

        return unescape(str(self))

    def striptags(self) -> str:
        """Remove comments and tags, collapse whitespace, unescape entities (in linear time:
        the ``striptags`` filter's implementation)."""
        from .filters.rare import do_striptags

        return do_striptags(self)


def _wrap_method(name: str) -> None:
    """Methods whose arguments are not text to insert: the result is simply Markup again."""
    original = getattr(str, name)

    def method(self: Markup, *args: Any, **kwargs: Any) -> Markup:
        return self.__class__(original(self, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = original.__doc__
    setattr(Markup, name, method)


for _name in ("__getitem__", "capitalize", "title", "lower", "upper", "lstrip", "rstrip",
              "strip", "translate", "expandtabs", "swapcase", "zfill", "casefold",
              "removeprefix", "removesuffix"):
    _wrap_method(_name)

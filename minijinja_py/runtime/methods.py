"""The Python methods templates may call on str, list, tuple and dict values.

``METHODS[type][name]`` is the implementation, called as ``fn(obj, *args, **kwargs)``. Methods
that modify their object are listed in ``MUTATORS``; the immutable sandbox (transformers) turns
them into an unsafe undefined, the mutable one allows them. Anything not listed here is not a
method as far as a template is concerned (item lookup follows, then undefined).

String-building methods check the size of what they would build against the render's limits
before building it (see :mod:`limits`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict

from ..exceptions import SecurityError
from ..guard.collisions import (HASHED, check_lookups, check_mapping_method, check_set_method,
                                checked_fromkeys)
from ..guard.limits import (charge, check_collection_size, check_comparable, check_repeat_size,
                            check_string_size)

try:  # CPython's helper that string.Formatter uses to split "a.b[c]"
    from _string import formatter_field_name_split
except ImportError:  # pragma: no cover - other interpreters
    formatter_field_name_split = None


_FORMATTERS: Dict[bool, Any] = {}


def _formatter_class(escaping: bool) -> Any:
    """The sandboxed ``str.format`` formatter (built on first use: ``string`` imports ``re``)."""
    cls = _FORMATTERS.get(escaping)
    if cls is not None:
        return cls
    import string

    class SandboxedFormatter(string.Formatter):
        """``str.format`` whose ``{0.attr}`` / ``{0[key]}`` lookups go through the sandbox."""

        def __init__(self, sandbox: Any) -> None:
            self.sandbox = sandbox
            self.built = 0  # characters substituted so far: the result is at least this

        def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
            first, rest = formatter_field_name_split(field_name)
            obj = self.get_value(first, args, kwargs)
            for is_attr, key in rest:
                obj = (self.sandbox.getattr(obj, key) if is_attr
                       else self.sandbox.getitem(obj, key))
            return obj, first

        def convert_field(self, value: Any, conversion: Any) -> Any:
            if (conversion == "r" or conversion == "a") and isinstance(value, str):
                from .filters.common import _escaped_size

                # a repr escapes control characters: up to ten times longer
                check_string_size(self.built + _escaped_size(
                    value, "repr" if conversion == "r" else "ascii"))
            elif conversion is not None:
                from .filters.common import check_str_size

                check_str_size(value)
            return super().convert_field(value, conversion)

        def format_field(self, value: Any, format_spec: str) -> Any:
            _check_format_spec(format_spec)
            if not isinstance(value, str):
                from .filters.common import check_str_size

                check_str_size(value)  # printing it may be far larger than it is in memory
            result = format(value, format_spec)
            if escaping:  # Markup.format: every substituted value is HTML-escaped
                from .markup import escape

                result = escape(result)  # refuses an escaped piece over the limit itself
            self.built += len(result)
            check_string_size(self.built)
            return result

    _FORMATTERS[escaping] = SandboxedFormatter
    return SandboxedFormatter


def _check_format_spec(spec: str) -> None:
    """Refuse a format spec whose width or precision would build a huge string.

    Every run of digits counts (a digit may also be the fill character, as in ``0>9999999``,
    or the precision after the width): their sum bounds what the field can add.
    """
    if len(spec) < 4:
        return
    total = 0
    digits = 0
    for char in spec:
        if char.isdecimal():  # any Unicode decimal digit counts in a format spec
            digits = digits * 10 + int(char) if digits < 10 ** 12 else digits
        elif digits:
            total += digits
            digits = 0
    total += digits
    if total > 999:
        check_string_size(total)


#: Steps per replacement field of ``str.format``: string.Formatter parses and formats every
#: field in Python (about two microseconds; the rest of the work is charged by its size).
FORMAT_FIELD_STEPS = 25


def _str_format(value: str, *args: Any, **kwargs: Any) -> str:
    from .markup import Markup
    from .sandbox import current_sandbox

    charge(value.count("{") * FORMAT_FIELD_STEPS)

    if isinstance(value, Markup):
        return Markup(_formatter_class(True)(current_sandbox()).vformat(value, args, kwargs))
    return _formatter_class(False)(current_sandbox()).vformat(value, args, kwargs)


def _str_format_map(value: str, *args: Any, **kwargs: Any) -> str:
    # (the checks and messages of Jinja2's sandbox, which runs format_map itself)
    if kwargs:
        raise TypeError("format_map() takes no keyword arguments")
    if len(args) != 1:
        raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
    return _str_format(value, **dict(args[0]))


def _python_checks(value: Any, name: str, args: tuple, kwargs: dict) -> None:
    """Raise the TypeError Python raises for ``value.name(*args, **kwargs)`` when it refuses
    those arguments: how many there are, and which may be given by keyword.

    The wrappers below read their arguments themselves (to measure what a call would build
    before it builds it), but which arguments a method takes, and by keyword or not, is
    Python's to say, and it changes between versions: ``str.replace`` takes ``count=`` from
    Python 3.13 on, and refuses every keyword before. So a call that is not the plain
    positional one is first made on an empty receiver of the value's kind (a str, or a Markup,
    whose methods take no keywords either), where it does no work: it raises Python's own
    error, or returns and the wrapper goes on."""
    receiver: Any = ""
    if type(value) is not str:
        from .markup import Markup

        if isinstance(value, Markup):
            receiver = Markup()
    getattr(receiver, name)(*args, **kwargs)


def _padded(name: str, most: int = 2) -> Callable[..., str]:
    """``value.name(width[, fillchar])`` (``most`` arguments, none by keyword) with the width
    checked before the padding is made."""
    def pad(value: str, *args: Any, **kwargs: Any) -> str:
        width = args[0] if args else None
        if isinstance(width, int):
            check_string_size(width)
        if kwargs or not 1 <= len(args) <= most:
            _python_checks(value, name, args, kwargs)
        return getattr(value, name)(*args, **kwargs)

    pad.__name__ = name
    return pad


def _str_replace(value: str, *args: Any, **kwargs: Any) -> str:
    if kwargs or not 2 <= len(args) <= 3:
        _python_checks(value, "replace", args, kwargs)  # count= is taken from Python 3.13 on
    old, new = args[0], args[1]
    count = args[2] if len(args) > 2 else kwargs.get("count", -1)
    if not isinstance(count, int):  # Python refuses it before replacing anything
        return value.replace(old, new, count)
    if isinstance(old, str) and isinstance(new, str):
        inserted = len(new)
        if type(value) is not str:
            from .markup import Markup, escape

            if isinstance(value, Markup):  # Markup.replace inserts the escaped text
                inserted = len(escape(new))
        if inserted > len(old):
            occurrences = value.count(old) if old else len(value) + 1
            if count >= 0:
                occurrences = min(occurrences, count)
            check_string_size(len(value) + occurrences * (inserted - len(old)))
    return value.replace(old, new, count)


def _str_join(value: str, *args: Any, **kwargs: Any) -> str:
    if kwargs or len(args) != 1:
        _python_checks(value, "join", args, kwargs)  # one argument, never by keyword
    items = measured = list(args[0])
    check_collection_size(len(items))
    if type(value) is not str:
        from .markup import Markup, escape

        if isinstance(value, Markup):  # Markup.join escapes the items: measure them escaped
            # (and hand it the items themselves: a provenance render's Markup escapes them
            # keeping their origins)
            measured = [escape(item) for item in items]
            charge(len(items))
    if items:
        # the items' own lengths count too (a non-str item fails in join itself)
        try:
            size = sum(map(len, measured))
        except TypeError:
            size = sum(len(item) for item in measured if isinstance(item, str))
        check_string_size(len(value) * (len(items) - 1) + size)
        charge(len(items) >> 2)
    return value.join(items)


def _list_extend(value: list, iterable: Any) -> None:
    """``list.extend`` (mutable sandbox only): ``a.extend(a)`` doubles a list per call."""
    if hasattr(iterable, "__len__"):
        check_collection_size(len(value) + len(iterable))
    value.extend(iterable)


def _str_expandtabs(value: str, *args: Any, **kwargs: Any) -> str:
    """``str.expandtabs``: each tab becomes at most ``tabsize`` spaces."""
    if len(args) > 1 or (kwargs and (args or set(kwargs) != {"tabsize"})):
        _python_checks(value, "expandtabs", args, kwargs)
    tabsize = args[0] if args else kwargs.get("tabsize", 8)
    if isinstance(tabsize, int):
        check_string_size(len(value) + value.count("\t") * (max(tabsize, 1) - 1))
    return value.expandtabs(tabsize)


def _str_method(name: str) -> Callable[..., Any]:
    def method(value: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs and type(value) is not str:  # a subclass's method takes them as str's does
            _python_checks(value, name, args, kwargs)
        return getattr(value, name)(*args, **kwargs)

    method.__name__ = name
    return method


_PLAIN_STR_METHODS = (
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "upper", "lower", "title", "capitalize", "swapcase", "casefold", "find", "rfind", "index",
    "rindex", "count", "partition", "rpartition", "removeprefix", "removesuffix", "isalnum",
    "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
    "isprintable", "isspace", "istitle", "isupper",
)

STR_METHODS: Dict[str, Callable[..., Any]] = {name: _str_method(name)
                                              for name in _PLAIN_STR_METHODS}
def _str_encode(value: str, *args: Any, **kwargs: Any) -> Any:
    """``str.encode`` is refused: bytes are not template values.

    Jinja2 hands out bytes, whose own methods (``center``, ``ljust``, ``*``...) would escape
    every size limit, and some codecs (``punycode``, ``idna``) take quadratic time. A
    documented deviation from Jinja2: a SecurityError, whatever the codec.
    """
    codec = args[0] if args else kwargs.get("encoding", "utf-8")
    raise SecurityError(f"str.encode is not available (codec {codec!r}): bytes are not "
                        "template values")


STR_METHODS.update({
    "encode": _str_encode,
    "format": _str_format,
    "format_map": _str_format_map,
    "replace": _str_replace,
    "join": _str_join,
    "expandtabs": _str_expandtabs,
    "zfill": _padded("zfill", most=1),
    "center": _padded("center"),
    "ljust": _padded("ljust"),
    "rjust": _padded("rjust"),
})


def _str_translate(value: str, *args: Any, **kwargs: Any) -> str:
    """``str.translate``: a mapping can turn every character into a long string, and every
    character's code point (an int: a key a template may aim) is looked up in it."""
    if kwargs or len(args) != 1:
        _python_checks(value, "translate", args, kwargs)  # one argument, never by keyword
    table = args[0]
    if isinstance(table, dict):
        longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
        check_repeat_size(max(longest, 1), len(value))
    charge(len(value) >> 4)
    if isinstance(table, HASHED) and value:
        check_lookups(len(value), table, "str.translate()")
    return value.translate(table)


def _str_maketrans(value: str, *args: Any, **kwargs: Any) -> dict:
    if kwargs:
        _python_checks(value, "maketrans", args, kwargs)  # positional only
    charge(sum(len(arg) for arg in args if isinstance(arg, (str, dict))) >> 1)
    return value.maketrans(*args)


STR_METHODS.update({"translate": _str_translate, "maketrans": _str_maketrans})


def _markup_method(name: str) -> Callable[..., Any]:
    def method(value: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(value, name)(*args, **kwargs)

    method.__name__ = name
    return method


def _markup_escape(value: Any, text: Any) -> Any:
    """``Markup.escape(text)`` (a class method in Jinja2's Markup): ``text`` escaped."""
    from .markup import escape

    return escape(text)


#: Markup has the str methods (they escape what they insert) and three of its own.
MARKUP_METHODS = dict(STR_METHODS, striptags=_markup_method("striptags"),
                      unescape=_markup_method("unescape"), escape=_markup_escape)


def _list_method(name: str) -> Callable[..., Any]:
    def method(value: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(value, name)(*args, **kwargs)

    method.__name__ = name
    return method


def _checked_method(name: str, check: Callable[[Any, str, Any], Any]) -> Callable[..., Any]:
    """The method ``name``, its arguments first given to ``check(owner, name, args)``, which
    charges or refuses what the call will hash (collisions.py) and returns the arguments to
    pass on."""
    def method(value: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(value, name)(*check(value, name, args), **kwargs)

    method.__name__ = name
    return method


def _check_compared_argument(owner: Any, name: str, args: Any) -> Any:
    """``items.index(x)``, ``count``, ``remove``: ``x`` is compared with every item."""
    if args and isinstance(args[0], (list, tuple, dict)):
        check_comparable(args[0], max(len(owner), 1))
    return args


def _check_sorted_owner(owner: Any, name: str, args: Any) -> Any:
    """``items.sort()``: each item is compared about log2(n) times."""
    if owner:
        check_comparable(owner, max(len(owner).bit_length(), 1))
    return args


LIST_METHODS = {name: _list_method(name) for name in (
    "copy", "append", "insert", "pop", "reverse", "clear")}
LIST_METHODS.update({name: _checked_method(name, _check_compared_argument)
                     for name in ("index", "count", "remove")})
LIST_METHODS["sort"] = _checked_method("sort", _check_sorted_owner)
LIST_METHODS["extend"] = _list_extend
TUPLE_METHODS = {name: LIST_METHODS[name] for name in ("index", "count")}
DICT_METHODS = {name: _list_method(name) for name in (
    "items", "keys", "values", "popitem", "clear")}
DICT_METHODS.update({name: _checked_method(name, check_mapping_method) for name in (
    "get", "copy", "update", "pop", "setdefault")})
SET_METHODS = {name: _checked_method(name, check_set_method) for name in (
    "copy", "difference", "intersection", "isdisjoint", "issubset", "issuperset",
    "symmetric_difference", "union", "add", "clear", "discard", "pop", "remove", "update",
    "difference_update", "intersection_update", "symmetric_difference_update")}
def _int_to_bytes(value: int, *args: Any, **kwargs: Any) -> Any:
    """Refused like ``str.encode``: bytes are not template values."""
    raise SecurityError("int.to_bytes is not available: bytes are not template values")


def _int_from_bytes(value: int, data: Any, *args: Any, **kwargs: Any) -> int:
    """``int.from_bytes`` of a list of byte values (the only byte data a template has)."""
    items = list(data) if isinstance(data, (list, tuple)) else data
    if isinstance(items, list):
        from ..guard.limits import current_limits

        limits = current_limits()
        if len(items) * 2.41 > limits.max_int_digits:  # 256 ** n has 2.41 n digits
            raise limits.exceeded("max_int_digits",
                                  f"integer of {len(items):,} bytes refused")
    return int.from_bytes(items, *args, **kwargs)


def _dict_fromkeys(value: dict, keys: Any, *args: Any) -> dict:
    return checked_fromkeys(keys, *args)


INT_METHODS = {name: _list_method(name) for name in (
    "bit_length", "conjugate", "bit_count", "as_integer_ratio")}
INT_METHODS.update({"to_bytes": _int_to_bytes, "from_bytes": _int_from_bytes})
FLOAT_METHODS = {name: _list_method(name) for name in (
    "is_integer", "conjugate", "hex", "fromhex", "as_integer_ratio")}
DICT_METHODS["fromkeys"] = _dict_fromkeys

METHODS: Dict[type, Dict[str, Callable[..., Any]]] = {
    str: STR_METHODS,
    list: LIST_METHODS,
    tuple: TUPLE_METHODS,
    dict: DICT_METHODS,
    set: SET_METHODS,
    int: INT_METHODS,
    float: FLOAT_METHODS,
}

# What the immutable sandbox refuses: the same sets as Jinja2's modifies_known_mutable.
MUTATORS: Dict[type, frozenset] = {
    list: frozenset({"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"}),
    dict: frozenset({"update", "pop", "popitem", "setdefault", "clear"}),
    set: frozenset({"add", "clear", "discard", "pop", "remove", "update", "difference_update",
                    "intersection_update", "symmetric_difference_update"}),
}


_TABLE_OF_CLASS: Dict[type, Any] = {cls: (table, cls) for cls, table in METHODS.items()}
_TABLE_OF_CLASS[bool] = (INT_METHODS, int)  # Jinja2: `true.bit_length()` is 1


#: Classes whose values stand for a plain value (a provenance render's str and numbers that
#: carry origins, see provenance.py) -> the plain value each stands for. A template sees
#: exactly the plain value's attributes: it cannot tell which kind of render runs it.
PLAIN_VALUE_OF: Dict[type, Callable[[Any], Any]] = {}


#: Subclasses of str that print as themselves (``str(value) is value``) and stand for a plain
#: str: provenance.PStr. Code with a fast path for ``type(value) is str`` may take it for these
#: too (filters.py).
STR_STAND_INS: set = set()


def plain_value(obj: Any) -> Any:
    """The plain value ``obj`` stands for (itself for any other value)."""
    convert = PLAIN_VALUE_OF.get(type(obj))
    return obj if convert is None else convert(obj)


def _markup_table() -> None:
    from .markup import Markup

    _TABLE_OF_CLASS[Markup] = (MARKUP_METHODS, str)


def method_table(obj: Any) -> Any:
    """The (table, base type) for ``obj``, following subclasses such as Markup."""
    cls = type(obj)
    found = _TABLE_OF_CLASS.get(cls)
    if found is None:
        if cls.__name__ == "Markup" and cls.__module__ == __package__ + ".markup":
            _markup_table()
            return _TABLE_OF_CLASS[cls]
        found = next(((table, base) for base, table in METHODS.items() if issubclass(cls, base)),
                     (None, None))
        if len(_TABLE_OF_CLASS) < 1000:  # host classes are few; never grow without bound
            _TABLE_OF_CLASS[cls] = found
    return found

"""The builtin filters (``{{ value|name(args) }}``), matching Jinja2 3.1.6 as transformers runs it.

Every filter is a plain function ``do_<name>(value, *args, **kwargs)``; the ones marked with
:func:`~minijinja_py.runtime.pass_environment` get the Environment first and use it for
attribute/item lookups (always through ``env.sandbox``), for undefined values
(``env.undefined``) and for calling other filters and tests by name (``map``, ``select``...).

Semantics follow Jinja2 with autoescaping off (the transformers setup): ``join`` and
``replace`` return plain strings, ``safe``/``escape`` still produce :class:`Markup`. Where
Jinja2 hands back a one-shot generator (``map``, ``select``, ``reject``, ``selectattr``,
``rejectattr``, ``unique``, ``items``, ``batch``, ``slice``) or a reverse iterator
(``reverse`` of a list, tuple or dict) the filter returns a
:class:`~minijinja_py.runtime.LazySequence`, so the value is lazy, iterable once, has no length
and is not JSON, exactly as in Jinja2.

Filters that can build a large string or list check the size against the render's limits
before building it (see :mod:`minijinja_py.limits`), escaping included (a ``repr`` or JSON
of control characters, Markup's ``&amp;``). Filters that run Python code per word, tag,
entity, line or ``%`` field (``title``, ``wordwrap``, ``striptags``, ``urlize``, ``format``,
``wordcount``, ``indent``, ``join``, ``slice``...) charge steps for that work themselves with
:func:`~minijinja_py.limits.charge`, before doing it, on top of what budget.py charges by
size; every one of them is linear in its input. The public table is :data:`FILTERS`.
"""

from __future__ import annotations

import itertools
import re
from collections import abc
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .exceptions import FilterArgumentError, LimitExceededError
from .budget import CHARS_SHIFT, DICT_VIEWS, ITEM_STEPS
from .limits import (charge, check_collection_size, check_deadline, check_string_size,
                     current_limits)
from .markup import Markup
from .markup import escape as _escape
from .runtime import (MISSING, BoundMethod, ChainableUndefined, Cycler, Joiner, LazySequence,
                      Namespace, Undefined, pass_environment)

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def _python_type_name(value: Any) -> str:
    """The type name Jinja2's error messages would show for ``value``."""
    if isinstance(value, LazySequence):
        return value.shown_type()
    if isinstance(value, BoundMethod):
        return "builtin_function_or_method"
    return type(value).__name__


class _Regex:
    """A regular expression compiled when first used: the filters' patterns are for filters
    chat templates seldom use (``title``, ``format``, ``urlize``...), and compiling them all
    at import cost a millisecond and a half of every cold start."""

    __slots__ = ("_pattern", "_flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern = pattern
        self._flags = flags
        self._compiled = None

    def __getattr__(self, name: str) -> Any:  # match, search, split... of the compiled one
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._pattern, self._flags)
        return getattr(compiled, name)


def _autoescape(env: Any) -> bool:
    """Whether the environment escapes output (off in transformers; attribute optional)."""
    setting = getattr(env, "autoescape", False)
    if callable(setting):
        setting = setting(None)
    return bool(setting)


def _has_html(value: Any) -> bool:
    """``hasattr(value, '__html__')`` as Jinja2 sees it.

    The runtime's plain and strict undefined define ``__html__`` for convenience; Jinja2's do
    not (only ChainableUndefined does), so they are not counted as markup here.
    """
    if isinstance(value, Undefined) and not isinstance(value, ChainableUndefined):
        return False
    return hasattr(value, "__html__")


def _lower_if_str(value: Any) -> Any:
    """Key post-processor for the case-insensitive filters: lowercase strings only."""
    return value.lower() if isinstance(value, str) else value


def _path_parts(attribute: Any) -> List[Any]:
    """Split ``"a.b.0"`` into lookup steps; all-digit parts become integers."""
    if attribute is None:
        return []
    if isinstance(attribute, str):
        return [int(part) if part.isdigit() else part for part in attribute.split(".")]
    return [attribute]


def _getter(env: Any, attribute: Any, postprocess: Optional[Callable[[Any], Any]] = None,
            default: Any = None) -> Callable[[Any], Any]:
    """A function reading ``attribute`` (a dotted path) from an item through the sandbox.

    With a ``default`` (other than None), every step that comes out undefined is replaced by
    the default before the next step, like Jinja2.
    """
    parts = _path_parts(attribute)
    sandbox = env.sandbox

    def read(item: Any) -> Any:
        for part in parts:
            item = sandbox.getitem(item, part)
            if default is not None and isinstance(item, Undefined):
                item = default
        return postprocess(item) if postprocess is not None else item

    return read


def _multi_getter(env: Any, attribute: Any,
                  postprocess: Optional[Callable[[Any], Any]] = None
                  ) -> Callable[[Any], List[Any]]:
    """Like :func:`_getter` for ``"age,name"``: returns the list of the values read."""
    paths = attribute.split(",") if isinstance(attribute, str) else [attribute]
    steps = [_path_parts(path) for path in paths]
    sandbox = env.sandbox

    def read(item: Any) -> List[Any]:
        values = []
        for parts in steps:
            current = item
            for part in parts:
                current = sandbox.getitem(current, part)
            if postprocess is not None:
                current = postprocess(current)
            values.append(current)
        return values

    return read


def _mapping_items(value: Any) -> Any:
    """``value.items()`` for a mapping; the error Jinja2 gets for anything else."""
    if isinstance(value, abc.Mapping):
        return value.items()
    if isinstance(value, Undefined):
        return value._fail_with_undefined_error()
    raise AttributeError(f"'{_python_type_name(value)}' object has no attribute 'items'")


# -- size estimation ---------------------------------------------------------------------------

_CONTAINERS = (list, tuple, dict, set, frozenset) + DICT_VIEWS  # views print their items
# Engine objects whose printed form shows the data they hold (``<Namespace {...}>``...).
_HOLDERS = (Namespace, Cycler, Joiner)
#: Characters measured at a time when the exact escaped length of a string is needed: bounds
#: the temporary copy (at most 12 times this) made to measure it.
_MEASURE_CHUNK = 1 << 16
#: How many times longer than the string itself its escaped form can be: ``repr``/``ascii``
#: (``'\\U000e0001'``), JSON (``\\u0000``; non-ASCII is counted 6x already when escaped).
_ESCAPE_FACTOR = {"repr": 10, "ascii": 10, "json": 6, "json_ascii": 6}


def _int_width(value: int) -> int:
    return value.bit_length() * 30103 // 100000 + 2


def _escaped_size(text: str, escaping: str) -> int:
    """The exact length of ``text`` as ``repr``/``ascii``/JSON prints it, quotes included
    (``repr`` may count one more character per ``'``): the cheap checks first, then the
    escaped form measured a chunk at a time, so no big temporary copy is made."""
    if escaping == "repr" or escaping == "ascii":
        if (text.isprintable() and (escaping == "repr" or text.isascii())
                and "\\" not in text and "'" not in text):
            return len(text) + 2
        convert = repr if escaping == "repr" else ascii
        total = 2 + text.count("'")  # the quotes chosen for a chunk may differ from the whole
    else:
        if (text.isprintable() and (escaping == "json" or text.isascii())
                and '"' not in text and "\\" not in text):
            return len(text) + 2
        import json

        ensure_ascii = escaping == "json_ascii"

        def convert(chunk: str) -> str:
            return json.dumps(chunk, ensure_ascii=ensure_ascii)
        total = 2
    for start in range(0, len(text), _MEASURE_CHUNK):
        total += len(convert(text[start:start + _MEASURE_CHUNK])) - 2
    return total


def _estimate_text_size(value: Any, what: str, item_sep: int = 2, key_sep: int = 2,
                        indent: Optional[int] = None, ascii_only: bool = False,
                        escaping: Optional[str] = None) -> int:
    """A cheap estimate of the text that serialising ``value`` produces, checked as it grows.

    Walks lists, tuples, dicts and sets once per distinct object (shared references are
    counted every time they are printed but measured once), refuses nesting deeper than
    ``Limits.max_recursion`` and totals above ``Limits.max_string_size``. ``ascii_only``
    counts non-ASCII strings at six characters each (JSON with ``ensure_ascii``);
    ``escaping`` (``"repr"``, ``"json"``, ``"json_ascii"``) measures every string exactly as
    that serialisation escapes it (``'\\x00'`` is four characters in a repr).
    """
    limits = current_limits()
    max_depth = limits.max_recursion
    max_size = limits.max_string_size
    memo: Dict[Tuple[int, int], int] = {}
    active: set = set()
    string_sizes: Dict[int, int] = {}
    visited = 0

    def leaf(obj: Any) -> int:
        if isinstance(obj, str):
            if escaping is None and not ascii_only:
                return len(obj) + (10 if isinstance(obj, Markup) else 2)
            size = string_sizes.get(id(obj))
            if size is None:
                if escaping is not None:
                    size = _escaped_size(obj, escaping) + (8 if isinstance(obj, Markup) else 0)
                else:
                    size = (len(obj) if obj.isascii() else 6 * len(obj)) + 2
                string_sizes[id(obj)] = size
            return size
        if obj is None or isinstance(obj, bool):
            return 5
        if isinstance(obj, int):
            return _int_width(obj)
        if isinstance(obj, float):
            return 24
        if isinstance(obj, _HOLDERS):
            return 32 + holder(obj)
        return 32

    def holder(obj: Any) -> int:
        # what the engine object's repr shows of its data, measured like any data
        if isinstance(obj, Namespace):
            inner = obj._attrs
        elif isinstance(obj, Cycler):
            inner = list(obj.items)
        else:
            inner = obj.sep
        if id(obj) in active:
            return 32
        active.add(id(obj))
        try:
            return measure(inner, 0) if escaping == "repr" else (
                _estimate_text_size(inner, what, escaping="repr"))
        finally:
            active.discard(id(obj))

    def measure(obj: Any, depth: int) -> int:
        nonlocal visited
        if not isinstance(obj, _CONTAINERS):
            return leaf(obj)
        visited += 1
        if not visited & 1023:
            check_deadline()
        if depth > max_depth:
            raise limits.exceeded("max_recursion", f"data nested too deeply for {what}")
        key = (id(obj), depth if indent is not None else 0)
        known = memo.get(key)
        if known is not None:
            return known
        if id(obj) in active:  # a cycle: the serialiser reports it itself
            return 32
        active.add(id(obj))
        try:
            total = 2
            step = item_sep + (1 + indent * (depth + 1) if indent is not None else 0)
            if isinstance(obj, dict):
                for k, v in obj.items():
                    total += step + measure(k, depth + 1) + key_sep + measure(v, depth + 1)
                    if total > max_size:
                        break
            else:
                for item in obj:
                    total += step + measure(item, depth + 1)
                    if total > max_size:
                        break
        finally:
            active.discard(id(obj))
        if total > max_size:
            raise limits.exceeded("max_string_size",
                                  f"{what} would build a string of more than {max_size:,} "
                                  "characters")
        memo[key] = total
        return total

    try:
        return measure(value, 0)
    except RecursionError:
        raise limits.exceeded("max_recursion", f"data nested too deeply for {what}") from None


class _NotATree(Exception):
    """The fast size walk met a shared container or an unusual type: use the full one."""


_PLAIN_SCALARS = (int, float, bool, type(None))


def _tree_text_size(value: Any, max_depth: int, per_item: int, indent: int,
                    ascii_only: bool) -> int:
    """Upper bound of the serialised size of plain JSON-like data that is a tree.

    The common case (messages, tool schemas) in one tight walk; raises :class:`_NotATree`
    when a container appears twice or a value is not a plain str/number/list/dict, so the
    caller falls back to the memoised estimate (shared references can print far larger than
    they are in memory).
    """
    seen: set = set()

    def size(obj: Any, depth: int) -> int:
        cls = type(obj)
        if cls is str:
            return (6 * len(obj) if ascii_only and not obj.isascii() else len(obj)) + 2
        if cls is dict or cls is list or cls is tuple:
            if depth > max_depth or id(obj) in seen:
                raise _NotATree
            seen.add(id(obj))
            step = per_item + (indent * (depth + 1) + 1 if indent else 0)
            total = 2
            # plain str items are measured in line, without a call each (tool schemas are
            # mostly short strings)
            if cls is dict:
                for key, item in obj.items():
                    total += step + (len(key) + 2 if type(key) is str and not ascii_only
                                     else size(key, depth + 1))
                    total += (len(item) + 2 if type(item) is str and not ascii_only
                              else size(item, depth + 1))
            else:
                for item in obj:
                    total += step + (len(item) + 2 if type(item) is str and not ascii_only
                                     else size(item, depth + 1))
            return total
        if cls in _PLAIN_SCALARS:
            return _int_width(obj) if cls is int else 24
        # subclasses that print as their base does (a provenance render's str and numbers);
        # Markup prints differently and takes the full walk
        if isinstance(obj, str) and not isinstance(obj, Markup):
            return (6 * len(obj) if ascii_only and not obj.isascii() else len(obj)) + 2
        if isinstance(obj, (int, float)) and not isinstance(obj, bool):
            return _int_width(obj) if isinstance(obj, int) else 24
        raise _NotATree

    try:
        return size(value, 0)
    except RecursionError:
        raise _NotATree from None


def _check_serialised_size(value: Any, what: str, item_sep: int = 2, key_sep: int = 2,
                           indent: Optional[int] = None, ascii_only: bool = False,
                           escaping: str = "repr") -> bool:
    """Refuse serialising ``value`` when the text would exceed the limits (fast path first).
    Returns whether ``value`` is a tree of plain data (no container met twice, so no cycle).

    Measuring walks the data in Python and serialising it runs at C speed: together about a
    step per four characters of the text, charged here before either happens. The fast walk
    counts strings unescaped; when escaping them could take the text over the limit (at
    most :data:`_ESCAPE_FACTOR` times longer), every string is measured exactly.
    """
    limits = current_limits()
    tree = True
    try:
        size = _tree_text_size(value, limits.max_recursion, item_sep + key_sep, indent or 0,
                               ascii_only)
    except _NotATree:
        tree = False
        size = _estimate_text_size(value, what, item_sep, key_sep, indent, ascii_only,
                                   escaping)
    else:
        if size * _ESCAPE_FACTOR[escaping] > limits.max_string_size:
            size = _estimate_text_size(value, what, item_sep, key_sep, indent, ascii_only,
                                       escaping)
    charge(size >> 2)
    return tree


def check_str_size(value: Any) -> None:
    """Before ``str(container)``: refuse results that would exceed the limits.

    A list holding the same long string many times prints far longer than it is big in
    memory, and a repr escapes control characters (``'\\x00'``); this refuses (and bounds the
    nesting of) such values before ``str()`` runs. Engine objects that print the data they
    hold (a namespace, a cycler) are measured the same way.
    """
    if isinstance(value, _CONTAINERS) or isinstance(value, _HOLDERS):
        _check_serialised_size(value, "str()")


def _text(value: Any) -> str:
    """``soft_str(value)`` (Markup stays Markup) with the container size guard."""
    if isinstance(value, str):
        return value
    check_str_size(value)
    return str(value)


def _plain_str(value: Any) -> str:
    """``str(value)`` (Markup becomes a plain str) with the container size guard."""
    if type(value) is str:
        return value
    check_str_size(value)
    return str(value)


def _gather(items: Iterable[Any], convert: Callable[[Any], str], separator: Any) -> List[str]:
    """Convert the items to strings, refusing them as soon as the joined total gets too big."""
    limit = current_limits().max_string_size
    step = len(separator) if isinstance(separator, str) else 0
    pieces: List[str] = []
    total = 0
    for item in items:
        piece = convert(item)
        total += len(piece) + (step if pieces else 0)
        if total > limit:
            check_string_size(total)
        pieces.append(piece)
    charge(len(pieces) * 2)  # Python code ran for each item: about 0.3 microseconds
    return pieces


# ---------------------------------------------------------------------------------------------
# String filters
# ---------------------------------------------------------------------------------------------

def do_upper(s: Any) -> str:
    """Uppercase the value."""
    return _text(s).upper()


def do_lower(s: Any) -> str:
    """Lowercase the value."""
    return _text(s).lower()


def do_capitalize(s: Any) -> str:
    """First character uppercase, the rest lowercase."""
    return _text(s).capitalize()


_TITLE_SPLIT_RE = _Regex(r"([-\s({\[<]+)")


#: Steps per piece ``title`` handles in Python (a word or the separator after it).
TITLE_PIECE_STEPS = 8


def do_title(s: Any) -> str:
    """Uppercase the first letter of every word (words start after spaces, ``-([{<``)."""
    pieces = _TITLE_SPLIT_RE.split(_text(s))
    charge(len(pieces) * TITLE_PIECE_STEPS)
    return "".join(str(piece[0]).upper() + str(piece[1:]).lower() for piece in pieces if piece)


def do_trim(value: Any, chars: Optional[str] = None) -> str:
    """Strip whitespace (or the given characters) from both ends."""
    text = _text(value)
    if isinstance(text, Markup):  # MarkupSafe strips the characters as given, unescaped
        return Markup(str.strip(text, chars))
    return text.strip(chars)


def do_center(value: Any, width: int = 80) -> str:
    """Center the value in a field ``width`` characters wide."""
    text = _text(value)
    if isinstance(width, int) and width > len(text):
        check_string_size(width)
    return text.center(width)


@pass_environment
def do_replace(env: Any, s: Any, old: Any, new: Any, count: Optional[int] = None) -> str:
    """Replace occurrences of ``old`` by ``new`` (the first ``count`` ones if given)."""
    if count is None:
        count = -1
    if not _autoescape(env):
        text, old, new = _plain_str(s), _plain_str(old), _plain_str(new)
    else:
        if _has_html(old) or (_has_html(new) and not _has_html(s)):
            text = _escape(s)
        else:
            check_str_size(s)
            text = _text(s)
        old, new = _text(old), _text(new)
    # MarkupSafe escapes the replacement (not the searched text) when the subject is Markup.
    replacement = str(_escape(new)) if isinstance(text, Markup) else new
    if isinstance(count, int) and isinstance(replacement, str) and len(replacement) > len(old):
        found = text.count(old) if old else len(text) + 1
        if count >= 0:
            found = min(found, count)
        check_string_size(len(text) + found * (len(replacement) - len(old)))
    if isinstance(text, Markup):
        return Markup(str.replace(text, old, replacement, count))
    return text.replace(old, new, count)


_WORD_RE = _Regex(r"\w+")
_WORD_REST_RE = _Regex(r"\w*")
#: Characters counted at a time by ``wordcount`` (bounds the list of words it builds), and
#: steps per word found (a match object each).
_WORDCOUNT_CHUNK = 1 << 16
WORD_STEPS = 3


def do_wordcount(s: Any) -> int:
    """The number of words (runs of word characters) in the value."""
    text = _text(s)
    if len(text) <= _WORDCOUNT_CHUNK:
        count = len(_WORD_RE.findall(text))
        charge(count * WORD_STEPS)
        return count
    # a chunk at a time, each ending after a whole word, so memory stays small
    count = 0
    start = 0
    while start < len(text):
        stop = _WORD_REST_RE.match(text, min(start + _WORDCOUNT_CHUNK, len(text))).end()
        found = len(_WORD_RE.findall(text, start, stop))
        charge(found * WORD_STEPS)
        count += found
        start = stop
    return count


def do_indent(s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> str:
    """Indent every line but the first (and blank ones) by ``width`` spaces or a string.

    ``first=True`` indents the first line too, ``blank=True`` indents empty lines too.
    """
    if isinstance(width, str):
        pad = width
    else:
        if isinstance(width, int):
            check_string_size(width)
        pad = " " * width
    newline = "\n"
    if isinstance(s, Markup):
        pad = Markup(pad)
        newline = Markup(newline)
    if isinstance(s, list):
        # Jinja2's `s += newline` extends the caller's list in place before failing on
        # splitlines: fail the same way without touching the data
        raise AttributeError("'list' object has no attribute 'splitlines'")
    s += newline  # so that a trailing newline keeps its (empty) last line
    lines = s.splitlines()
    if pad:
        check_string_size(len(s) + len(pad) * (len(lines) + 1))
    charge(len(lines) * 3)  # a Python step per line: about 0.3 microseconds
    if blank:
        result = (newline + pad).join(lines)
    else:
        result = lines[0]
        rest = lines[1:]
        if rest:
            result += newline + newline.join(pad + line if line else line for line in rest)
    if first:
        result = pad + result
    return result


def do_truncate(s: Any, length: int = 255, killwords: bool = False, end: str = "...",
                leeway: Optional[int] = None) -> str:
    """Shorten the text to ``length`` characters, ending it with ``end``.

    Words are kept whole unless ``killwords``; text at most ``leeway`` (default 5) characters
    too long is left alone.
    """
    if leeway is None:
        leeway = 5
    if not length >= len(end):
        raise AssertionError(f"expected length >= {len(end)}, got {length}")
    if not leeway >= 0:
        raise AssertionError(f"expected leeway >= 0, got {leeway}")
    if len(s) <= length + leeway:
        return s
    kept = s[: length - len(end)]
    if not killwords:
        kept = kept.rsplit(" ", 1)[0]
    return kept + end


#: Steps per chunk and per line ``wordwrap`` handles (textwrap is Python code).
WRAP_CHUNK_STEPS = 16


def do_wordwrap(s: Any, width: int = 79, break_long_words: bool = True,
                wrapstring: Optional[str] = None, break_on_hyphens: bool = True) -> str:
    """Wrap the text at ``width`` columns; existing lines are wrapped one by one.

    Lines are joined with ``wrapstring`` (default a newline).
    """
    import textwrap

    if wrapstring is None:
        wrapstring = "\n"
    lines = s.splitlines()
    if isinstance(s, str):
        # textwrap runs Python code for every chunk (a word, a space run, a hyphenated part)
        # and every line: about 1.5 microseconds each. Pay for it first.
        charge(WRAP_CHUNK_STEPS * (s.count(" ") + s.count("\t") + s.count("-") + len(lines)))
        if break_long_words and isinstance(width, int):
            # textwrap breaks a word longer than the width by re-slicing the rest of the
            # word for every line it fills: quadratic in the word's length. Pay for that.
            span = max(width, 1)
            copied = 0
            for word in s.split():
                if len(word) > span:
                    copied += len(word) * len(word) // (2 * span) + WRAP_CHUNK_STEPS * (
                        len(word) // span)
            charge(copied >> CHARS_SHIFT)
    # one wrapper for every line: the same as textwrap.wrap() per line, without rebuilding it
    wrapper = textwrap.TextWrapper(
        width=width, expand_tabs=False, replace_whitespace=False,
        break_long_words=break_long_words, break_on_hyphens=break_on_hyphens)
    paragraphs = [wrapper.wrap(line) for line in lines]
    if isinstance(wrapstring, str) and paragraphs:
        separators = sum(max(len(lines) - 1, 0) for lines in paragraphs) + len(paragraphs) - 1
        check_string_size(sum(len(line) for lines in paragraphs for line in lines)
                          + separators * len(wrapstring))
    return wrapstring.join([wrapstring.join(lines) for lines in paragraphs])


# A "%" field: an optional "(key)" without nested parentheses (nested ones are matched by
# hand), flags, width, precision, length modifier, conversion. "[^()]*" stops at the next
# parenthesis, so a key that is never closed costs no rescanning ("%(" * 40000 is linear).
_PRINTF_RE = _Regex(r"%(?:\(([^()]*)\))?[-+ #0]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)?", re.S)
# The same with the parentheses kept in the key group, for findall ("" is then "no key").
_PRINTF_ALL_RE = _Regex(r"%(\([^()]*\))?[-+ #0]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)?", re.S)
_PRINTF_SPEC_RE = _Regex(r"[-+ #0]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)?", re.S)
_PARENS_RE = _Regex(r"[()]")
#: Steps charged per "%" of a printf template: measuring a field runs Python code (about a
#: microsecond and a half), formatting it runs at C speed.
PRINTF_FIELD_STEPS = 16


def _printf_fields(template: str) -> Iterator[Tuple[Optional[str], Any, Any, Any]]:
    """``(key, width, precision, conversion)`` of every ``%`` field, as CPython parses them,
    in linear time: a ``%(`` key runs to its matching ``)`` (parentheses nest), and the scan
    stops at a key that is never closed (the formatting itself fails there)."""
    fields = _PRINTF_ALL_RE.findall(template)  # the common case, at C speed
    if not any(conversion == "(" and not key for key, _, _, conversion in fields):
        for key, width, precision, conversion in fields:
            yield key[1:-1] if key else None, width, precision, conversion
        return
    search = _PRINTF_RE.search
    field = search(template)
    while field is not None:
        if (field.group(4) != "(" or field.group(1) is not None
                or field.end() != field.start() + 2):
            yield field.group(1), field.group(2), field.group(3), field.group(4)
            field = search(template, field.end())
            continue
        # "%(" whose key holds parentheses (or is never closed): match them by hand
        depth = 0
        closing = None
        for paren in _PARENS_RE.finditer(template, field.start() + 1):
            if paren.group() == "(":
                depth += 1
            else:
                depth -= 1
                if not depth:
                    closing = paren.start()
                    break
        if closing is None:
            return
        spec = _PRINTF_SPEC_RE.match(template, closing + 1)
        yield (template[field.start() + 2:closing], spec.group(1), spec.group(2),
               spec.group(3))
        field = search(template, spec.end())


def _printf_value_size(value: Any, conversion: Any, escaped: bool) -> int:
    """The most characters one ``%`` field can print for ``value`` (its width aside)."""
    if isinstance(value, str):
        if conversion == "r" or conversion == "a":
            size = _escaped_size(value, "repr" if conversion == "r" else "ascii")
        else:
            size = len(value)
    elif value is None or isinstance(value, bool):
        size = 5
    elif isinstance(value, int):
        size = value.bit_length() // 3 + 3  # octal is the longest form
    elif isinstance(value, float):
        size = 330  # "%f" % 1e308
    elif isinstance(value, _CONTAINERS) or isinstance(value, _HOLDERS):
        size = _estimate_text_size(value, "format", escaping="repr")
    else:
        size = 32
    # Markup's % escapes every value: "&" becomes "&amp;"
    return size * 5 if escaped else size


def _check_printf_size(template: str, values: Any) -> None:
    """Refuse ``template % values`` when widths, precisions or repeated keys make it huge.

    Linear in the template; charges :data:`PRINTF_FIELD_STEPS` per ``%`` first.
    """
    fields = template.count("%")
    if not fields:
        return
    charge(fields * PRINTF_FIELD_STEPS)
    limit = current_limits().max_string_size
    escaped = isinstance(template, Markup)
    total = len(template)
    mapping = values if isinstance(values, abc.Mapping) else None
    positional = values if isinstance(values, tuple) else ()
    fields_found = list(_printf_fields(template))
    # a repr (%r, %a) may print a string escaped, up to ten times longer
    as_repr = "r" if any(field[3] == "r" or field[3] == "a" for field in fields_found) else "s"
    for item in positional:  # each positional argument is printed at most once
        if type(item) is str and not escaped and as_repr == "s":
            total += len(item)
        else:
            total += _printf_value_size(item, as_repr, escaped)
        if total > limit:
            check_string_size(total)
    index = 0
    sizes: Dict[Tuple[str, bool], int] = {}
    whole_mapping = -1  # "%s" % {...} prints the whole mapping
    seen = 0
    for key, width, precision, conversion in fields_found:
        if width or precision:
            if key is None and conversion == "%" and not width and precision == "":
                continue
            for part in (width, precision):
                if part == "*":
                    value = positional[index] if index < len(positional) else None
                    index += 1
                    if isinstance(value, int):
                        total += abs(value)
                elif part:
                    total += int(part) if len(part) < 12 else 10 ** 12
        elif key is None and conversion == "%":
            continue  # "%%"
        if mapping is None:
            index += 1
        elif key is not None:
            marker = (key, conversion == "r" or conversion == "a")
            known = sizes.get(marker)
            if known is None:
                try:
                    known = _printf_value_size(mapping[key], conversion, escaped)
                except LimitExceededError:
                    raise
                except Exception:
                    known = 0  # the formatting itself fails on this key
                sizes[marker] = known
            total += known
        else:
            if whole_mapping < 0:
                whole_mapping = _printf_value_size(mapping, "s", escaped)
            total += whole_mapping
        if total > limit:
            break
        seen += 1
        if not seen & 4095:
            check_deadline()
    check_string_size(total)


def check_printf_size(template: str, values: Any) -> None:
    """Before the ``%`` operator, ``template % values``: refuse results that are too big."""
    if not isinstance(values, (tuple, abc.Mapping)):
        values = (values,)
    _check_printf_size(template, values)


def do_format(value: Any, *args: Any, **kwargs: Any) -> str:
    """printf-style formatting: ``"%s, %s!"|format(a, b)`` is ``"%s, %s!" % (a, b)``."""
    if args and kwargs:
        raise FilterArgumentError(
            "can't handle positional and keyword arguments at the same time")
    template = _text(value)
    values: Any = kwargs or args
    _check_printf_size(template, values)
    return template % values


def _drop_comments(text: str) -> str:
    """Remove ``<!-- ... -->`` comments the way MarkupSafe 3.0 does, in linear time.

    MarkupSafe repeatedly removes the span from the first ``<!--`` to the first ``-->`` found
    at or after it (so ``<!-->`` is a whole comment), rescanning from the start each time, so
    a ``<!--`` formed across a removal is found too; it stops at a ``<!--`` without ``-->``.
    """
    opener, closer = "<!--", "-->"
    kept: List[str] = []
    position = 0

    def kept_tail() -> str:
        tail = ""
        for chunk in reversed(kept):
            tail = chunk + tail
            if len(tail) >= 3:
                break
        return tail[-3:]

    def drop_kept(count: int) -> None:
        while count:
            last = kept.pop()
            if len(last) > count:
                kept.append(last[:-count])
                return
            count -= len(last)

    while True:
        carry = kept_tail()
        start_in_carry = -1
        for offset in range(len(carry)):
            piece = carry[offset:]
            if piece + text[position:position + len(opener) - len(piece)] == opener:
                start_in_carry = offset
                break
        if start_in_carry >= 0:
            piece = carry[start_in_carry:]
            head = piece + text[position:position + len(closer) + len(piece)]
            found = head.find(closer)
            if found != -1 and found < len(piece):  # "<!-->" straddling the removal point
                end = position + found + len(closer) - len(piece)
            else:
                end = text.find(closer, position)
                if end == -1:
                    break
                end += len(closer)
            drop_kept(len(piece))
            position = end
            continue
        start = text.find(opener, position)
        if start == -1:
            break
        end = text.find(closer, start)
        if end == -1:
            break
        if start > position:  # never an empty chunk: kept_tail() must stay O(1)
            kept.append(text[position:start])
        position = end + len(closer)
    kept.append(text[position:])
    return "".join(kept)


def _drop_tags(text: str) -> str:
    """Remove each ``<`` up to the next ``>``; stop at a ``<`` that is never closed."""
    kept: List[str] = []
    position = 0
    while True:
        start = text.find("<", position)
        if start == -1:
            break
        end = text.find(">", start)
        if end == -1:
            break
        kept.append(text[position:start])
        position = end + 1
    kept.append(text[position:])
    return "".join(kept)


STRIP_TAG_STEPS = 10
STRIP_ENTITY_STEPS = 20


def do_striptags(value: Any) -> str:
    """Remove SGML/XML comments and tags, collapse whitespace and decode HTML entities."""
    import html

    if _has_html(value):
        value = value.__html__()
    text = _plain_str(value)
    # every tag or comment removed and every entity decoded runs Python code (about one and
    # two microseconds): charged first
    charge(STRIP_TAG_STEPS * text.count("<") + STRIP_ENTITY_STEPS * text.count("&"))
    text = _drop_tags(_drop_comments(text))
    return html.unescape(" ".join(text.split()))


def do_string(value: Any) -> str:
    """Convert to a string (Markup stays Markup)."""
    return _text(value)


def do_safe(value: Any) -> Markup:
    """Mark the value as safe HTML (Markup)."""
    check_str_size(value)
    return Markup(value)


def do_escape(value: Any) -> Markup:
    """HTML-escape the value unless it already is Markup."""
    check_str_size(value)
    return _escape(value)


def do_forceescape(value: Any) -> Markup:
    """HTML-escape the value even if it is Markup."""
    if _has_html(value):
        value = value.__html__()
    return _escape(_plain_str(value))


def _url_quote(value: Any, for_qs: bool = False) -> str:
    from urllib.parse import quote_from_bytes

    if not isinstance(value, bytes):
        value = _plain_str(value).encode("utf-8")
    charge(len(value) >> 3)  # quote_from_bytes runs Python code per byte to quote
    quoted = quote_from_bytes(value, b"" if for_qs else b"/")
    return quoted.replace("%20", "+") if for_qs else quoted


def do_urlencode(value: Any) -> str:
    """Percent-encode a string (``/`` kept), or build a query string from a dict or pairs."""
    if isinstance(value, str) or not isinstance(value, abc.Iterable):
        return _url_quote(value)
    pairs = value.items() if isinstance(value, dict) else value
    return "&".join(f"{_url_quote(k, True)}={_url_quote(v, True)}" for k, v in pairs)


# -- urlize ------------------------------------------------------------------------------------

_URL_RE = _Regex(
    r"^(?:"
    r"(?:https?://|www\.)(?:[\w%-]+\.)*(?:[a-z]{2,63}|xn--[\w%]{2,59})"   # host with a tld
    r"|(?:[\w%-]{2,63}\.)+(?:com|net|int|edu|gov|org|info|mil)"             # bare domain
    r"|https?://(?:\d{1,3}(?:\.\d{1,3}){3}"                                  # IPv4
    r"|\[(?:[\da-f]{0,4}:){2}(?:[\da-f]{0,4}:?){1,6}\])"                     # IPv6
    r")(?::\d{1,5})?(?:[/?#]\S*)?$",
    re.IGNORECASE)
_EMAIL_RE = _Regex(r"^\S+@\w[\w.-]*\.\w+$")
_SCHEME_RE = _Regex(r"[\w.+-]{2,}:/{0,2}")
_LEAD_RE = _Regex(r"^(?:[(<]|&lt;)+")
# The trailing punctuation, matched on the REVERSED word: a linear scan (searching the word
# itself for "(...)+$" retries from every position, quadratic on "))))...)x)").
_TRAIL_REVERSED_RE = _Regex(r"(?:[)>.,\n]|;tg&)+")
#: Steps per word (and per whitespace run) ``urlize`` handles: a few regular expressions and
#: string operations in Python, about a microsecond.
URLIZE_WORD_STEPS = 12
_TRAIL_ENDINGS = (")", ">", ".", ",", "\n", "&gt;")
_BRACKETS = (("(", ")"), ("<", ">"), ("&lt;", "&gt;"))


def _linkify(text: Any, trim_url_limit: Optional[int], rel: Optional[str],
             target: Optional[str], extra_schemes: Optional[Iterable[str]]) -> str:
    """Turn URLs and e-mail addresses of ``text`` (HTML-escaped first) into links."""
    def shown(url: str) -> str:
        if trim_url_limit is not None and len(url) > trim_url_limit:
            return url[:trim_url_limit] + "..."
        return url

    check_str_size(text)
    words = re.split(r"(\s+)", str(_escape(text)))
    charge(len(words) * URLIZE_WORD_STEPS)
    attributes = ""
    if rel:
        attributes += f' rel="{_escape(rel)}"'
    if target:
        attributes += f' target="{_escape(target)}"'
    limit = current_limits().max_string_size
    total = 0
    for position, word in enumerate(words):
        head, core, tail = "", word, ""
        lead = _LEAD_RE.match(core)
        if lead:
            head = lead.group()
            core = core[lead.end():]
        if core.endswith(_TRAIL_ENDINGS):
            cut = len(core) - _TRAIL_REVERSED_RE.match(core[::-1]).end()
            tail = core[cut:]
            core = core[:cut]
        # Give back closing brackets the link itself opened, e.g. "(see wiki/Foo_(bar))":
        # as many as it opened (and the tail holds), with whatever precedes them in the tail.
        for opener, closer in _BRACKETS:
            opened = core.count(opener)
            if opened <= core.count(closer):
                continue
            moves = min(opened, tail.count(closer))
            if moves:
                cut = 0
                for _ in range(moves):
                    cut = tail.index(closer, cut) + len(closer)
                core += tail[:cut]
                tail = tail[cut:]
        if _URL_RE.match(core):
            href = core if core.startswith(("https://", "http://")) else "https://" + core
            core = f'<a href="{href}"{attributes}>{shown(core)}</a>'
        elif core.startswith("mailto:") and _EMAIL_RE.match(core[7:]):
            core = f'<a href="{core}">{core[7:]}</a>'
        elif ("@" in core and not core.startswith(("www.", "@")) and ":" not in core
              and _EMAIL_RE.match(core)):
            core = f'<a href="mailto:{core}">{core}</a>'
        elif extra_schemes is not None:
            for scheme in extra_schemes:
                if core != scheme and core.startswith(scheme):
                    core = f'<a href="{core}"{attributes}>{core}</a>'
        words[position] = piece = head + core + tail
        total += len(piece)
        if total > limit:
            check_string_size(total)
    return "".join(words)


@pass_environment
def do_urlize(env: Any, value: Any, trim_url_limit: Optional[int] = None,
              nofollow: bool = False, target: Optional[str] = None, rel: Optional[str] = None,
              extra_schemes: Optional[Iterable[str]] = None) -> str:
    """Make ``http(s)://``, ``www.``, ``mailto:`` and e-mail addresses clickable links.

    Links get ``rel="noopener"`` (plus ``nofollow`` and any ``rel`` given) and an optional
    ``target``; ``trim_url_limit`` shortens the shown URL; ``extra_schemes`` lists more URL
    prefixes (like ``"ftp://"``) to link.
    """
    rel_words = set((rel or "").split())
    if nofollow:
        rel_words.add("nofollow")
    rel_words.add("noopener")
    rel = " ".join(sorted(rel_words)) or None
    if extra_schemes is None:
        extra_schemes = ()
    for scheme in extra_schemes:
        if _SCHEME_RE.fullmatch(scheme) is None:
            raise FilterArgumentError(f"{scheme!r} is not a valid URI scheme prefix.")
    result = _linkify(value, trim_url_limit, rel, target, extra_schemes)
    return Markup(result) if _autoescape(env) else result


_ATTR_NAME_BAD_RE = _Regex(r"[\s/>=]", re.ASCII)


@pass_environment
def do_xmlattr(env: Any, d: Any, autospace: bool = True) -> str:
    """Render a dict as HTML/XML attributes ``key="value"`` (values escaped).

    None and undefined values are left out; a key containing whitespace, ``/``, ``>`` or
    ``=`` is an error. With ``autospace`` the result starts with a space when not empty.
    """
    def attribute(pair: Tuple[Any, Any]) -> str:
        key, value = pair
        if _ATTR_NAME_BAD_RE.search(key) is not None:
            raise ValueError(f"Invalid character in attribute name: {key!r}")
        check_str_size(value)
        return f'{_escape(key)}="{_escape(value)}"'

    shown = (pair for pair in _mapping_items(d)
             if not (pair[1] is None or isinstance(pair[1], Undefined)))
    pieces = _gather(shown, attribute, " ")
    result = " ".join(pieces)
    if autospace and result:
        result = " " + result
    return Markup(result) if _autoescape(env) else result


def do_filesizeformat(value: Any, binary: bool = False) -> str:
    """A human-readable file size: ``"13.0 kB"``, ``"4.1 MB"`` (``binary``: KiB, MiB...)."""
    size = float(value)
    base = 1024 if binary else 1000
    if binary:
        units = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
    else:
        units = ("kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
    if size == 1:
        return "1 Byte"
    if size < base:
        return f"{int(size)} Bytes"
    for power, unit in enumerate(units, start=2):
        threshold = base ** power
        if size < threshold:
            break
    return f"{base * size / threshold:.1f} {unit}"


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------

def _one_argument_error(name: str, extra: tuple, kwargs: dict) -> TypeError:
    """The TypeError of Python's builtin ``name`` (which Jinja2's filter is) called with more
    than the value: ``abs() takes exactly one argument (2 given)``."""
    if kwargs:
        return TypeError(f"{name}() takes no keyword arguments")
    return TypeError(f"{name}() takes exactly one argument ({len(extra) + 1} given)")


def do_abs(value: Any, *extra: Any, **kwargs: Any) -> Any:
    """The absolute value (Jinja2's filter is Python's ``abs``)."""
    if extra or kwargs:
        raise _one_argument_error("abs", extra, kwargs)
    return abs(value)


def do_int(value: Any, default: int = 0, base: int = 10) -> int:
    """Convert to an integer, or return ``default`` when that is impossible.

    Strings are parsed in ``base`` (``base=16`` accepts ``"0x1A"``, base 0 any prefix); a
    string like ``"42.7"`` falls back to float conversion and gives 42.
    """
    try:
        if isinstance(value, str):
            return int(value, base)
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def do_float(value: Any, default: float = 0.0) -> float:
    """Convert to a float, or return ``default`` when that is impossible."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def do_round(value: Any, precision: int = 0, method: str = "common") -> float:
    """Round to ``precision`` decimals: ``'common'`` (Python's round), ``'ceil'`` or ``'floor'``."""
    import math

    if method not in {"common", "ceil", "floor"}:
        raise FilterArgumentError("method must be common, ceil or floor")
    if method == "common":
        if (isinstance(value, int) and isinstance(precision, int)
                and -precision > _int_width(value) + 1):
            return 0  # what round() gives, without building 10 ** -precision
        return round(value, precision)
    if isinstance(precision, int) and precision + 1 > current_limits().max_int_digits:
        limits = current_limits()
        raise limits.exceeded("max_int_digits",
                              f"round() precision {precision:,} would build a huge integer")
    scale = 10 ** precision
    rounder = math.ceil if method == "ceil" else math.floor
    return rounder(value * scale) / scale


# ---------------------------------------------------------------------------------------------
# Sequences
# ---------------------------------------------------------------------------------------------

def do_length(value: Any, *extra: Any, **kwargs: Any) -> int:
    """The number of items (Jinja2's filter is Python's ``len``)."""
    if extra or kwargs:
        raise _one_argument_error("len", extra, kwargs)
    if isinstance(value, LazySequence):
        raise TypeError(f"object of type '{_python_type_name(value)}' has no len()")
    return len(value)


def do_list(value: Any) -> List[Any]:
    """Convert to a list (a string becomes its characters)."""
    if isinstance(value, str):
        check_collection_size(len(value))
    return list(value)


@pass_environment
def do_first(env: Any, seq: Any) -> Any:
    """The first item, or an undefined value when there is none."""
    try:
        return next(iter(seq))
    except StopIteration:
        return env.undefined(hint="No first item, sequence was empty.")


@pass_environment
def do_last(env: Any, seq: Any) -> Any:
    """The last item, or an undefined value when there is none (needs a reversible value)."""
    if isinstance(seq, LazySequence):
        raise TypeError(f"'{_python_type_name(seq)}' object is not reversible")
    try:
        return next(iter(reversed(seq)))
    except StopIteration:
        return env.undefined(hint="No last item, sequence was empty.")


_SYSTEM_RANDOM: List[Any] = []


@pass_environment
def do_random(env: Any, seq: Any) -> Any:
    """A random item, or an undefined value when the sequence is empty.

    Drawn from the operating system's randomness (``random.SystemRandom``), never from the
    host's global ``random`` state: a template can neither observe nor advance it, and its
    picks cannot be predicted from earlier ones.
    """
    if not _SYSTEM_RANDOM:
        import random as _random

        _SYSTEM_RANDOM.append(_random.SystemRandom())
    try:
        return _SYSTEM_RANDOM[0].choice(seq)
    except IndexError:
        return env.undefined(hint="No random item, sequence was empty.")


def do_reverse(value: Any) -> Any:
    """A reversed string, or the items of the value in reverse order.

    Lists, tuples, dicts and ranges give a lazy reverse iterator (as in Jinja2); other
    iterables give a reversed list.
    """
    if isinstance(value, str):
        return value[::-1]
    try:
        backwards = reversed(value)
    except TypeError:
        try:
            items = list(value)
        except TypeError as exc:
            raise FilterArgumentError("argument must be iterable") from exc
        items.reverse()
        return items
    return LazySequence(backwards, type(backwards).__name__)


@pass_environment
def do_join(env: Any, value: Any, d: str = "", attribute: Any = None) -> str:
    """Concatenate the items' strings with ``d`` between them (``attribute`` reads a field)."""
    items: Iterable[Any] = value
    if attribute is not None:
        items = map(_getter(env, attribute), value)
    if not _autoescape(env):
        separator = _plain_str(d)
        return separator.join(_gather(items, _plain_str, separator))
    if _has_html(d):
        separator = _text(d)
        return separator.join(_gather(items, lambda item: _escape(_text(item)), separator))
    pieces = list(items)
    any_markup = False
    for position, item in enumerate(pieces):
        if _has_html(item):
            any_markup = True
        else:
            pieces[position] = _plain_str(item)
    if not any_markup:
        separator = _plain_str(d)
        return separator.join(_gather(pieces, _plain_str, separator))
    separator = _escape(d)
    return separator.join(_gather(pieces, _escape, separator))


def do_batch(value: Any, linecount: int, fill_with: Any = None) -> LazySequence:
    """Split the items into lists of ``linecount`` items; ``fill_with`` pads the last one."""
    def rows() -> Iterator[List[Any]]:
        row: List[Any] = []
        for item in value:
            if len(row) == linecount:
                yield row
                row = []
            row.append(item)
        if row:
            if fill_with is not None and len(row) < linecount:
                if isinstance(linecount, int):
                    check_collection_size(linecount)
                row += [fill_with] * (linecount - len(row))
            yield row

    return LazySequence(rows(), "do_batch")


def do_slice(value: Any, slices: int, fill_with: Any = None) -> LazySequence:
    """Split the items into ``slices`` columns of (nearly) equal length.

    The first columns take one extra item when the count does not divide evenly;
    ``fill_with`` pads the shorter columns.
    """
    def columns() -> Iterator[List[Any]]:
        items = list(value)
        size = len(items)
        per_column = size // slices
        longer = size % slices
        numbers = range(slices)
        if isinstance(slices, int):
            check_collection_size(slices)
            charge(slices * 12)  # a new list per column, even an empty one
        for number in numbers:
            start = number * per_column + min(number, longer)
            stop = start + per_column + (1 if number < longer else 0)
            column = items[start:stop]
            if fill_with is not None and number >= longer:
                column.append(fill_with)
            yield column

    return LazySequence(columns(), "sync_do_slice")


@pass_environment
def do_sum(env: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """The sum of the items (or of their ``attribute``) plus ``start``."""
    if attribute is not None:
        iterable = map(_getter(env, attribute), iterable)
    if not isinstance(start, (list, tuple)):
        return sum(iterable, start)
    # Concatenating sequences: same result as sum(), with the size and cost checked.
    limits = current_limits()
    total = start
    work = 0
    for item in iterable:
        if isinstance(item, (list, tuple)):
            check_collection_size(len(total) + len(item))
            work += len(total) + len(item)
            if work > limits.max_steps:
                raise limits.exceeded("max_steps", "sum() of sequences is too expensive")
        total = total + item
    return total


@pass_environment
def do_sort(env: Any, value: Any, reverse: bool = False, case_sensitive: bool = False,
            attribute: Any = None) -> List[Any]:
    """Sort the items (stable); ``attribute`` may be a dotted path or ``"a,b"`` for several.

    Strings compare case-insensitively unless ``case_sensitive``.
    """
    key = _multi_getter(env, attribute, None if case_sensitive else _lower_if_str)
    return sorted(value, key=key, reverse=reverse)


def do_dictsort(value: Any, case_sensitive: bool = False, by: str = "key",
                reverse: bool = False) -> List[Tuple[Any, Any]]:
    """The ``(key, value)`` pairs of a mapping sorted by key (or ``by='value'``)."""
    if by == "key":
        position = 0
    elif by == "value":
        position = 1
    else:
        raise FilterArgumentError('You can only sort by either "key" or "value"')

    def key(pair: Tuple[Any, Any]) -> Any:
        field = pair[position]
        return field if case_sensitive else _lower_if_str(field)

    return sorted(_mapping_items(value), key=key, reverse=reverse)


@pass_environment
def do_unique(env: Any, value: Any, case_sensitive: bool = False,
              attribute: Any = None) -> LazySequence:
    """The items without repeats (first occurrence kept, order preserved)."""
    key = _getter(env, attribute, None if case_sensitive else _lower_if_str)

    def unique() -> Iterator[Any]:
        seen = set()
        for item in value:
            marker = key(item)
            if marker not in seen:
                seen.add(marker)
                yield item

    return LazySequence(unique(), "sync_do_unique")


def _extreme(env: Any, value: Any, pick: Callable[..., Any], case_sensitive: bool,
             attribute: Any) -> Any:
    iterator = iter(value)
    try:
        head = next(iterator)
    except StopIteration:
        return env.undefined(hint="No aggregated item, sequence was empty.")
    key = _getter(env, attribute, None if case_sensitive else _lower_if_str)
    return pick(itertools.chain((head,), iterator), key=key)


@pass_environment
def do_min(env: Any, value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    """The smallest item (by ``attribute`` if given); undefined when empty."""
    return _extreme(env, value, min, case_sensitive, attribute)


@pass_environment
def do_max(env: Any, value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    """The largest item (by ``attribute`` if given); undefined when empty."""
    return _extreme(env, value, max, case_sensitive, attribute)


class GroupTuple(tuple):
    """One ``groupby`` result: a ``(grouper, list)`` pair with those two attribute names.

    Prints like a plain tuple. Templates read ``.grouper``/``.list`` through the sandbox's
    item fallback (``g['grouper']`` works too, as in Jinja2).
    """

    __slots__ = ()
    template_attributes = frozenset({"grouper", "list"})

    def __new__(cls, grouper: Any, items: List[Any]) -> "GroupTuple":
        return tuple.__new__(cls, (grouper, items))

    @property
    def grouper(self) -> Any:
        return tuple.__getitem__(self, 0)

    @property
    def list(self) -> List[Any]:
        return tuple.__getitem__(self, 1)

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str) and key == "grouper":
            return tuple.__getitem__(self, 0)
        if isinstance(key, str) and key == "list":
            return tuple.__getitem__(self, 1)
        return tuple.__getitem__(self, key)

    def __repr__(self) -> str:
        return tuple.__repr__(self)

    __str__ = __repr__

    def __getnewargs__(self) -> Tuple[Any, Any]:
        return (tuple.__getitem__(self, 0), tuple.__getitem__(self, 1))


@pass_environment
def do_groupby(env: Any, value: Any, attribute: Any, default: Any = None,
               case_sensitive: bool = False) -> List[GroupTuple]:
    """Sort the items by ``attribute`` and group equal values: a list of (grouper, list).

    Grouping ignores case unless ``case_sensitive``; the group's key then keeps the case of
    its first item. ``default`` stands in for items without the attribute.
    """
    key = _getter(env, attribute, None if case_sensitive else _lower_if_str, default)
    groups = [GroupTuple(grouper, list(members))
              for grouper, members in itertools.groupby(sorted(value, key=key), key)]
    if not case_sensitive:
        original = _getter(env, attribute, default=default)
        groups = [GroupTuple(original(group.list[0]), group.list) for group in groups]
    return groups


def do_items(value: Any) -> LazySequence:
    """The ``(key, value)`` pairs of a mapping; nothing for an undefined value."""
    def pairs() -> Iterator[Tuple[Any, Any]]:
        if isinstance(value, Undefined):
            return
        if not isinstance(value, abc.Mapping):
            raise TypeError("Can only get item pairs from a mapping.")
        yield from value.items()

    return LazySequence(pairs(), "do_items")


# -- map / select / reject ---------------------------------------------------------------------

def _map_function(env: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]
                  ) -> Callable[[Any], Any]:
    if not args and "attribute" in kwargs:
        attribute = kwargs.pop("attribute")
        default = kwargs.pop("default", None)
        if kwargs:
            raise FilterArgumentError(f"Unexpected keyword argument {next(iter(kwargs))!r}")
        return _getter(env, attribute, default=default)
    if not args:
        raise FilterArgumentError("map requires a filter argument")
    name, rest = args[0], args[1:]
    return lambda item: env.call_filter(name, item, rest, kwargs)


@pass_environment
def do_map(env: Any, value: Any, *args: Any, **kwargs: Any) -> LazySequence:
    """Apply a filter to every item (``map('lower')``, extra arguments passed on), or read an
    attribute of every item (``map(attribute='name', default=...)``)."""
    def mapped() -> Iterator[Any]:
        if not value:
            return
        function = _map_function(env, args, kwargs)
        for item in value:
            charge(ITEM_STEPS)
            yield function(item)

    return LazySequence(mapped(), "sync_do_map")


def _predicate(env: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
               by_attribute: bool) -> Callable[[Any], Any]:
    if by_attribute:
        if not args:
            raise FilterArgumentError("Missing parameter for attribute name")
        read = _getter(env, args[0])
        args = args[1:]
    else:
        read = None
    if args:
        name, rest = args[0], args[1:]

        def check(item: Any) -> Any:
            return env.call_test(name, item, rest, kwargs)
    else:
        check = bool
    if read is None:
        return check
    return lambda item: check(read(item))


def _filtered(env: Any, value: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
              keep: bool, by_attribute: bool) -> LazySequence:
    def kept() -> Iterator[Any]:
        if not value:
            return
        predicate = _predicate(env, args, kwargs, by_attribute)
        for item in value:
            charge(ITEM_STEPS)
            if bool(predicate(item)) is keep:
                yield item

    return LazySequence(kept(), "select_or_reject")


@pass_environment
def do_select(env: Any, value: Any, *args: Any, **kwargs: Any) -> LazySequence:
    """The items that pass the named test (``select('odd')``); truthy items without a test."""
    return _filtered(env, value, args, kwargs, True, False)


@pass_environment
def do_reject(env: Any, value: Any, *args: Any, **kwargs: Any) -> LazySequence:
    """The items that fail the named test; falsy items without a test."""
    return _filtered(env, value, args, kwargs, False, False)


@pass_environment
def do_selectattr(env: Any, value: Any, *args: Any, **kwargs: Any) -> LazySequence:
    """The items whose attribute passes the test (``selectattr('role', 'eq', 'user')``)."""
    return _filtered(env, value, args, kwargs, True, True)


@pass_environment
def do_rejectattr(env: Any, value: Any, *args: Any, **kwargs: Any) -> LazySequence:
    """The items whose attribute fails the test (or is falsy without a test)."""
    return _filtered(env, value, args, kwargs, False, True)


# ---------------------------------------------------------------------------------------------
# Objects and serialisation
# ---------------------------------------------------------------------------------------------

def do_default(value: Any, default_value: Any = "", boolean: bool = False) -> Any:
    """``default_value`` if the value is undefined (or, with ``boolean``, falsy)."""
    if isinstance(value, Undefined) or (boolean and not value):
        return default_value
    return value


@pass_environment
def do_attr(env: Any, obj: Any, name: str) -> Any:
    """The attribute ``name`` of the object, WITHOUT falling back to ``obj[name]``.

    Reads through the sandbox's attribute-only lookup, so unsafe attributes are refused and
    a missing one gives an undefined value.
    """
    if not isinstance(name, str):
        # Python's own TypeError, worded as this Python version words it (Jinja2 shows it)
        hasattr(obj, name)
        raise TypeError(f"attribute name must be string, not {type(name).__name__!r}")
    value = env.sandbox.attribute(obj, name)
    if value is MISSING:
        return env.undefined(obj=obj, name=name)
    return value


def _json_default(value: Any) -> Any:
    raise TypeError(f"Object of type {_python_type_name(value)} is not JSON serializable")


def _c_json_dumps(value: Any, ensure_ascii: bool, sort_keys: bool,
                  check_circular: bool = True) -> str:
    """``json.dumps(value, ensure_ascii=..., sort_keys=..., default=_json_default)`` without
    the JSONEncoder it makes for every call: the C encoder json.dumps itself runs here, made
    straight away; json.dumps where there is none. ``check_circular=False`` (for data just
    walked as a tree, which has no cycle) skips json's circular reference check, which records
    every container in a dict: a third of the encoder's time on tool schemas."""
    import json
    from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii

    if c_make_encoder is None:  # pragma: no cover - CPython always has it
        return json.dumps(value, ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                          default=_json_default)
    encoder = c_make_encoder({} if check_circular else None, _json_default,
                             encode_basestring_ascii if ensure_ascii else encode_basestring,
                             None, ": ", ", ", sort_keys, False, True)
    return "".join(encoder(value, 0))


def do_tojson(value: Any, ensure_ascii: bool = False, indent: Any = None,
              separators: Any = None, sort_keys: bool = False) -> str:
    """``json.dumps`` of the value with these options, exactly (transformers' tojson).

    No HTML escaping; undefined values, lazy sequences, namespaces and other non-JSON objects
    are a TypeError; tuples become arrays; the result is a plain string.
    """
    import json

    limits = current_limits()
    indent_width: Optional[int] = None
    if indent is not None:
        if isinstance(indent, str):
            indent_width = len(indent)
        elif isinstance(indent, int):
            check_string_size(indent)
            indent_width = max(indent, 0)
    item_sep, key_sep = (2, 2) if indent is None else (1, 2)
    if separators is not None:
        try:
            item_sep, key_sep = (len(part) for part in separators)
        except (TypeError, ValueError):
            pass
    escaping = "json_ascii" if ensure_ascii else "json"
    # with an indent, json.dumps runs its pure-Python encoder: plain data (tool schemas,
    # messages) is then made and measured faster in one walk (jsonfast.py); without one, its
    # C encoder after the size walk is faster
    fast = None
    if indent is not None:  # (jsonfast is imported only by templates that indent JSON)
        from .jsonfast import plain_dumps

        fast = plain_dumps(
            value, bool(ensure_ascii), indent, separators, bool(sort_keys), indent_width or 0,
            limits.max_recursion, limits.max_string_size / _ESCAPE_FACTOR[escaping])
    if fast is not None:
        text, size = fast
        charge(size >> 2)  # what _check_serialised_size charges for the same data
        return text
    tree = _check_serialised_size(value, "tojson", item_sep, key_sep, indent_width,
                                  ascii_only=bool(ensure_ascii), escaping=escaping)
    try:
        if indent is None and separators is None and type(ensure_ascii) is bool and \
                type(sort_keys) is bool:
            return _c_json_dumps(value, ensure_ascii, sort_keys, check_circular=not tree)
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys, default=_json_default)
    except RecursionError:
        raise limits.exceeded("max_recursion", "data nested too deeply for tojson") from None


def do_pprint(value: Any) -> str:
    """Pretty-print the value (Python's ``pprint.pformat``)."""
    import pprint as _pprint

    limits = current_limits()
    # pformat runs Python code for every element: about a step per character it prints
    size = _estimate_text_size(value, "pprint", 2, 2, 1, escaping="repr")
    check_string_size(size)
    charge(size)
    try:
        return _pprint.pformat(value)
    except RecursionError:
        raise limits.exceeded("max_recursion", "data nested too deeply for pprint") from None


FILTERS: Dict[str, Callable[..., Any]] = {
    "abs": do_abs,
    "attr": do_attr,
    "batch": do_batch,
    "capitalize": do_capitalize,
    "center": do_center,
    "count": do_length,
    "d": do_default,
    "default": do_default,
    "dictsort": do_dictsort,
    "e": do_escape,
    "escape": do_escape,
    "filesizeformat": do_filesizeformat,
    "first": do_first,
    "float": do_float,
    "forceescape": do_forceescape,
    "format": do_format,
    "groupby": do_groupby,
    "indent": do_indent,
    "int": do_int,
    "items": do_items,
    "join": do_join,
    "last": do_last,
    "length": do_length,
    "list": do_list,
    "lower": do_lower,
    "map": do_map,
    "max": do_max,
    "min": do_min,
    "pprint": do_pprint,
    "random": do_random,
    "reject": do_reject,
    "rejectattr": do_rejectattr,
    "replace": do_replace,
    "reverse": do_reverse,
    "round": do_round,
    "safe": do_safe,
    "select": do_select,
    "selectattr": do_selectattr,
    "slice": do_slice,
    "sort": do_sort,
    "string": do_string,
    "striptags": do_striptags,
    "sum": do_sum,
    "title": do_title,
    "tojson": do_tojson,
    "trim": do_trim,
    "truncate": do_truncate,
    "unique": do_unique,
    "upper": do_upper,
    "urlencode": do_urlencode,
    "urlize": do_urlize,
    "wordcount": do_wordcount,
    "wordwrap": do_wordwrap,
    "xmlattr": do_xmlattr,
}

# Jinja2's names for the functions behind these filters (its `sync_do_*` variants, markupsafe's
# `escape` and `soft_str`, transformers' `tojson`): Python names the function in the TypeError
# of a wrong call ("sync_do_join() got an unexpected keyword argument 'sep'"). Each is also a
# module attribute, so that pickle, which finds a function by its name, still finds them.
_JINJA2_NAMES = {
    "join": "sync_do_join", "first": "sync_do_first", "list": "sync_do_list",
    "groupby": "sync_do_groupby", "slice": "sync_do_slice", "sum": "sync_do_sum",
    "unique": "sync_do_unique", "map": "sync_do_map", "select": "sync_do_select",
    "reject": "sync_do_reject", "selectattr": "sync_do_selectattr",
    "rejectattr": "sync_do_rejectattr", "safe": "do_mark_safe", "string": "soft_str",
    "escape": "escape", "tojson": "tojson",
}
for _filter, _name in _JINJA2_NAMES.items():
    _function = FILTERS[_filter]
    _function.__name__ = _function.__qualname__ = _name
    assert _name not in globals(), _name
    globals()[_name] = _function
del _filter, _name, _function

__all__ = ["FILTERS", "GroupTuple", "check_str_size"]

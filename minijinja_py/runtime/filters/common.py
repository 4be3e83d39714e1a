"""The builtin filters (``{{ value|name(args) }}``), matching Jinja2 3.1.6 as transformers runs it.

Every filter is a plain function ``do_<name>(value, *args, **kwargs)``; the ones marked with
:func:`~minijinja_py.runtime.objects.pass_environment` get the Environment first and use it for
attribute/item lookups (always through ``env.sandbox``), for undefined values
(``env.undefined``) and for calling other filters and tests by name (``map``, ``select``...).

Semantics follow Jinja2 with autoescaping off (the transformers setup): ``join`` and
``replace`` return plain strings, ``safe``/``escape`` still produce :class:`Markup`. Where
Jinja2 hands back a one-shot generator (``map``, ``select``, ``reject``, ``selectattr``,
``rejectattr``, ``unique``, ``items``, ``batch``, ``slice``) or a reverse iterator
(``reverse`` of a list, tuple or dict) the filter returns a
:class:`~minijinja_py.runtime.objects.LazySequence`, so the value is lazy, iterable once, has no length
and is not JSON, exactly as in Jinja2.

Filters that can build a large string or list check the size against the render's limits
before building it (see :mod:`minijinja_py.guard.limits`), escaping included (a ``repr`` or JSON
of control characters, Markup's ``&amp;``). Filters that run Python code per word, tag,
entity, line or ``%`` field (``title``, ``wordwrap``, ``striptags``, ``urlize``, ``format``,
``wordcount``, ``indent``, ``join``, ``slice``...) charge steps for that work themselves with
:func:`~minijinja_py.guard.limits.charge`, before doing it, on top of what guard/prices.py
charges by size; every one of them is linear in its input. The public table is
:data:`FILTERS`; the filters chat templates rarely use live in
:mod:`minijinja_py.runtime.filters.rare`, imported on first use.

Why one module of over a thousand lines: these are the filters a chat template's first render
needs, loaded at once in a cold start (one module read, not several); the others are in
filters/rare.py for the same reason.
"""

from __future__ import annotations

import re
from collections import abc
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from ...exceptions import FilterArgumentError
from ...guard.prices import DICT_VIEWS, ITEM_STEPS
from ...guard.collisions import SALT, check_engine_table
from ...guard.limits import (charge, check_collection_size, check_deadline, check_string_size,
                             current_limits, current_render)
from ..markup import Markup
from ..markup import escape as _escape
from ..methods import STR_STAND_INS
from ..objects import (MISSING, BoundMethod, ChainableUndefined, Cycler, Joiner, LazySequence,
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
    """Whether output is escaped where the filter runs (Jinja2's eval context): inside
    ``{% autoescape true %}`` of the render in progress, or everywhere in an environment that
    escapes (off in transformers; attribute optional)."""
    setting = getattr(env, "autoescape", False)
    if callable(setting):
        setting = setting(None)
    return bool(setting) or getattr(current_render(), "autoescape", False) is True


def _has_html(value: Any) -> bool:
    """``hasattr(value, '__html__')`` as Jinja2 sees it.

    The runtime's plain and strict undefined define ``__html__`` for convenience; Jinja2's do
    not (only ChainableUndefined does), so they are not counted as markup here.
    """
    if isinstance(value, Undefined) and not isinstance(value, ChainableUndefined):
        return False
    return hasattr(value, "__html__")


def _lower_if_str(value: Any) -> Any:
    """Key post-processor for the case-insensitive filters: lowercase strings only (a str
    that stands for a plain one as the plain one: a key is compared, never printed)."""
    if type(value) in STR_STAND_INS:
        return str.lower(value)
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
#: What each holder's repr prints around the data it holds (``<Namespace `` and ``>``).
_HOLDER_WRAPPERS = ((Namespace, len("<Namespace >")), (Cycler, len("<Cycler >")),
                    (Joiner, len("<Joiner >")))
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
        _, encode, encode_ascii = json_parts()
        convert = encode_ascii if escaping == "json_ascii" else encode  # json.dumps of a str
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
            return next(size for cls, size in _HOLDER_WRAPPERS if isinstance(obj, cls)) + \
                holder(obj)
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
    if size > limits.max_string_size:
        # a value that is no container (a str, a namespace): measured, but no container's
        # total compared it with the limit (json escapes a character in up to 6)
        raise limits.exceeded("max_string_size", f"{what} would build a string of more than "
                                                 f"{limits.max_string_size:,} characters")
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
    if type(value) is str or type(value) in STR_STAND_INS:
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


# -- urlize ------------------------------------------------------------------------------------


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


@pass_environment
def do_unique(env: Any, value: Any, case_sensitive: bool = False,
              attribute: Any = None) -> LazySequence:
    """The items without repeats (first occurrence kept, order preserved)."""
    key = _getter(env, attribute, None if case_sensitive else _lower_if_str)

    def unique() -> Iterator[Any]:
        items = list(value)
        markers = list(map(key, items))
        seen: set = set()
        if check_engine_table(markers, "unique"):
            # many markers a template may aim: kept salted (collisions.salted_key), so that
            # none can pick its slot; those that can share a hash were charged
            for item, marker in zip(items, markers):
                salted = (SALT, marker)
                if salted not in seen:
                    seen.add(salted)
                    yield item
            return
        for item, marker in zip(items, markers):
            if marker not in seen:
                seen.add(marker)
                yield item

    return LazySequence(unique(), "sync_do_unique")


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
        check = env.test_caller(args[0], args[1:], kwargs)
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


_JSON_PARTS: List[Tuple[Any, Any, Any]] = []


def json_parts() -> Tuple[Any, Any, Any]:
    """(C encoder factory or None, encode_basestring, encode_basestring_ascii): the parts of
    ``json.dumps`` that tojson uses, taken from CPython's ``_json`` module itself. Importing
    the json package for them also imports its decoder, which compiles regular expressions:
    2 ms of the first render of a template with ``tojson`` in a fresh process."""
    if not _JSON_PARTS:
        try:
            from _json import encode_basestring, encode_basestring_ascii, make_encoder
        except ImportError:  # pragma: no cover - another interpreter: json's own choice
            from json.encoder import (c_make_encoder as make_encoder, encode_basestring,
                                      encode_basestring_ascii)
        _JSON_PARTS.append((make_encoder, encode_basestring, encode_basestring_ascii))
    return _JSON_PARTS[0]


def _c_json_dumps(value: Any, ensure_ascii: bool, sort_keys: bool,
                  check_circular: bool = True) -> str:
    """``json.dumps(value, ensure_ascii=..., sort_keys=..., default=_json_default)`` without
    the JSONEncoder it makes for every call: the C encoder json.dumps itself runs here, made
    straight away; json.dumps where there is none. ``check_circular=False`` (for data just
    walked as a tree, which has no cycle) skips json's circular reference check, which records
    every container in a dict: a third of the encoder's time on tool schemas."""
    if not check_circular:
        encoder = _TREE_ENCODERS.get((ensure_ascii, sort_keys))
        if encoder is not None:
            return "".join(encoder(value, 0))
    c_make_encoder, encode_basestring, encode_basestring_ascii = json_parts()
    if c_make_encoder is None:  # pragma: no cover - CPython always has it
        import json

        return json.dumps(value, ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                          default=_json_default)
    encoder = c_make_encoder({} if check_circular else None, _json_default,
                             encode_basestring_ascii if ensure_ascii else encode_basestring,
                             None, ": ", ", ", sort_keys, False, True)
    if not check_circular:
        _TREE_ENCODERS[(ensure_ascii, sort_keys)] = encoder
    return "".join(encoder(value, 0))


# C encoders without a circular check, by (ensure_ascii, sort_keys): such an encoder keeps no
# state between calls (the check's record of open containers is its only state), so one is
# made once and reused
_TREE_ENCODERS: Dict[Tuple[bool, bool], Any] = {}


#: jsonfast.plain_dumps once imported (an import statement per call costs about a microsecond)
_PLAIN_DUMPS: List[Callable[..., Any]] = []


def _load_plain_dumps() -> Callable[..., Any]:
    from .tojson import plain_dumps

    _PLAIN_DUMPS[:] = [plain_dumps]
    return plain_dumps


def do_tojson(value: Any, ensure_ascii: bool = False, indent: Any = None,
              separators: Any = None, sort_keys: bool = False) -> str:
    """``json.dumps`` of the value with these options, exactly (transformers' tojson).

    No HTML escaping; undefined values, lazy sequences, namespaces and other non-JSON objects
    are a TypeError; tuples become arrays; the result is a plain string.
    """
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
    # messages) is then made and measured faster in one walk (filters/tojson.py); without one, its
    # C encoder after the size walk is faster
    fast = None
    if indent is not None:  # (jsonfast is imported only by templates that indent JSON)
        plain_dumps = _PLAIN_DUMPS[0] if _PLAIN_DUMPS else _load_plain_dumps()
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
        import json

        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys, default=_json_default)
    except RecursionError:
        raise limits.exceeded("max_recursion", "data nested too deeply for tojson") from None


class LoadedOnUse:
    """The entry of :data:`FILTERS` for a filter of :mod:`minijinja_py.runtime.filters.rare`, which is
    imported when the filter is first compiled into a template (:meth:`load`, called by the
    compiler) or called through this entry. ``jinja_pass_arg`` is the function's, known
    without loading it (a test checks each against the function)."""

    __slots__ = ("name", "function_name", "jinja_pass_arg", "_function")

    def __init__(self, name: str, function_name: str, pass_env: bool = False) -> None:
        self.name = name
        self.function_name = function_name
        self.jinja_pass_arg = "environment" if pass_env else None
        self._function: Optional[Callable[..., Any]] = None

    @property
    def __name__(self) -> str:  # type: ignore[override]  # the function's, as Python's
        return self.function_name

    def load(self) -> Callable[..., Any]:
        """The filter's function (importing filters_more the first time)."""
        function = self._function
        if function is None:
            from . import rare as filters_more

            function = self._function = getattr(filters_more, self.function_name)
        return function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)

    def __reduce__(self) -> Tuple[Any, Tuple[str]]:
        return _builtin_filter, (self.name,)

    def __repr__(self) -> str:
        return f"<builtin filter {self.name!r}, loaded on first use>"


def _builtin_filter(name: str) -> Any:
    """``FILTERS[name]`` (how a :class:`LoadedOnUse` is pickled)."""
    return FILTERS[name]


FILTERS: Dict[str, Callable[..., Any]] = {
    "abs": do_abs,
    "attr": do_attr,
    "batch": LoadedOnUse("batch", "do_batch"),
    "capitalize": do_capitalize,
    "center": LoadedOnUse("center", "do_center"),
    "count": do_length,
    "d": do_default,
    "default": do_default,
    "dictsort": LoadedOnUse("dictsort", "do_dictsort"),
    "e": do_escape,
    "escape": do_escape,
    "filesizeformat": LoadedOnUse("filesizeformat", "do_filesizeformat"),
    "first": do_first,
    "float": do_float,
    "forceescape": do_forceescape,
    "format": LoadedOnUse("format", "do_format"),
    "groupby": LoadedOnUse("groupby", "sync_do_groupby", True),
    "indent": LoadedOnUse("indent", "do_indent"),
    "int": do_int,
    "items": do_items,
    "join": do_join,
    "last": do_last,
    "length": do_length,
    "list": do_list,
    "lower": do_lower,
    "map": do_map,
    "max": LoadedOnUse("max", "do_max", True),
    "min": LoadedOnUse("min", "do_min", True),
    "pprint": LoadedOnUse("pprint", "do_pprint"),
    "random": LoadedOnUse("random", "do_random", True),
    "reject": do_reject,
    "rejectattr": do_rejectattr,
    "replace": do_replace,
    "reverse": LoadedOnUse("reverse", "do_reverse"),
    "round": LoadedOnUse("round", "do_round"),
    "safe": do_safe,
    "select": do_select,
    "selectattr": do_selectattr,
    "slice": LoadedOnUse("slice", "sync_do_slice"),
    "sort": LoadedOnUse("sort", "do_sort", True),
    "string": do_string,
    "striptags": LoadedOnUse("striptags", "do_striptags"),
    "sum": LoadedOnUse("sum", "sync_do_sum", True),
    "title": do_title,
    "tojson": do_tojson,
    "trim": do_trim,
    "truncate": LoadedOnUse("truncate", "do_truncate"),
    "unique": do_unique,
    "upper": do_upper,
    "urlencode": LoadedOnUse("urlencode", "do_urlencode"),
    "urlize": LoadedOnUse("urlize", "do_urlize", True),
    "wordcount": LoadedOnUse("wordcount", "do_wordcount"),
    "wordwrap": LoadedOnUse("wordwrap", "do_wordwrap"),
    "xmlattr": LoadedOnUse("xmlattr", "do_xmlattr", True),
}

# Jinja2's names for the functions behind these filters (its `sync_do_*` variants, markupsafe's
# `escape` and `soft_str`, transformers' `tojson`): Python names the function in the TypeError
# of a wrong call ("sync_do_join() got an unexpected keyword argument 'sep'"). Each is also a
# module attribute, so that pickle, which finds a function by its name, still finds them.
_JINJA2_NAMES = {
    "join": "sync_do_join", "first": "sync_do_first", "list": "sync_do_list",
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

"""The builtin filters chat templates rarely use, imported the first time a template uses one.

Text layout (``center``, ``indent``, ``truncate``, ``wordwrap``, ``wordcount``, ``format`` and
the ``%`` operator's size check), HTML (``striptags``, ``urlize``, ``urlencode``,
``xmlattr``), numbers (``round``, ``filesizeformat``) and sequences (``batch``, ``slice``,
``sum``, ``sort``, ``dictsort``, ``min``, ``max``, ``groupby``, ``reverse``, ``random``,
``pprint``). None of the corpus's 152 chat templates uses any of them, and they are half of
the filters' bytecode: a cold start that does not need them does not load them.
:data:`minijinja_py.runtime.filters.common.FILTERS` lists each as a :class:`~minijinja_py.runtime.filters.common.LoadedOnUse`
(the compiler loads the function when it compiles the filter; calling the entry calls it). The
rules of :mod:`minijinja_py.runtime.filters.common` hold here: same semantics as Jinja2, sizes checked and
work charged before it is done.
"""

from __future__ import annotations

import itertools
import re
from collections import abc
TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from ...exceptions import FilterArgumentError, LimitExceededError
from ...guard.prices import CHARS_SHIFT
from .common import (_CONTAINERS, _HOLDERS, GroupTuple, _autoescape, _escaped_size,
                     _estimate_text_size, _gather, _getter, _has_html, _int_width, _lower_if_str,
                     _mapping_items, _multi_getter, _plain_str, _Regex, _text, check_str_size)
from ...guard.limits import (charge, check_collection_size, check_deadline, check_string_size,
                             current_limits)
from ..markup import Markup
from ..markup import escape as _escape
from ..objects import LazySequence, Undefined, pass_environment


# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------

def do_center(value: Any, width: int = 80) -> str:
    """Center the value in a field ``width`` characters wide."""
    text = _text(value)
    if isinstance(width, int) and width > len(text):
        check_string_size(width)
    return text.center(width)


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
        # at most one pad per line; the lines and the newlines between them are at most
        # the text without the newline added above
        check_string_size(len(s) - 1 + len(pad) * len(lines))
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


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Serialisation
# ---------------------------------------------------------------------------------------------

def do_pprint(value: Any) -> str:
    """Pretty-print the value (Python's ``pprint.pformat``)."""
    import pprint as _pprint

    limits = current_limits()
    # pformat runs Python code for every element: about a step per character it prints
    size = _estimate_text_size(value, "pprint", 2, 2, 1, escaping="repr")
    check_string_size(size)
    charge(size)
    try:
        text = _pprint.pformat(value)
    except RecursionError:
        raise limits.exceeded("max_recursion", "data nested too deeply for pprint") from None
    if "<Recursion on " in text:
        text = _without_addresses(text, value)
    return text


#: pprint's mark for a container met again inside itself: it names the container's id,
#: which in CPython is its memory address.
_RECURSION_MARK = re.compile(r"<Recursion on (\w+) with id=(\d+)>")


def _without_addresses(text: str, value: Any) -> str:
    """``text`` (pprint's of ``value``) with the id taken out of each recursion mark that names
    a container of ``value``: a template never prints a memory address (Jinja2 prints it;
    no two processes print the same there, so no reference output can hold it)."""
    containers = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple, dict, set, frozenset)) and id(item) not in containers:
            containers.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
    return _RECURSION_MARK.sub(lambda match: f"<Recursion on {match.group(1)}>"
                               if int(match.group(2)) in containers else match.group(0), text)


# Jinja2's names for these functions (see filters._JINJA2_NAMES), module attributes too.
for _function, _name in ((do_groupby, "sync_do_groupby"), (do_slice, "sync_do_slice"),
                         (do_sum, "sync_do_sum")):
    _function.__name__ = _function.__qualname__ = _name
    assert _name not in globals(), _name
    globals()[_name] = _function
del _function, _name

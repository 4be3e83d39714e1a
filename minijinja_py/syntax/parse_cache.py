"""Persistent parse cache: parsed templates survive the process, so a cold start skips parsing.

Each entry is one file in the user's cache directory (``$MINIJINJA_PY_CACHE_DIR``, else
``$XDG_CACHE_HOME/minijinja_py``, else ``~/.cache/minijinja_py``), named by the SHA-256 of the
engine version, the grammar, the parse options and the source (and the source's length). The
AST is stored as nested tuples with :mod:`marshal` (no pickle: loading never runs code), only
from a directory and file owned by the current user that nobody else can write. Files are
written atomically (temp file + rename).

An entry is trusted only as far as it checks out; anything else is a miss (the template is
parsed again), never an error and never a hang:

- a SHA-256 of the whole payload: a truncated or corrupted file is ignored;
- the entry holds the full SHA-256 it was stored under, compared with the one asked for: an
  entry copied or renamed over another template's name is ignored (it would render the other
  template's output);
- its size is capped relative to the source's (:func:`size_cap`), read before the file is;
- it is written with marshal format 2, which has no back-references; decoding counts the
  items it rebuilds and gives up past the number of bytes the entry has, so a small payload
  whose references would expand exponentially (possible in marshal formats 3 and 4) costs no
  more than its own size; and a payload shorter than what format 2 makes of what it holds
  (back-references, the short forms of formats 3 and 4) is refused;
- it must hold an AST the parser could have made: each node of a kind the grammar allows
  where it stands, each field of the type the parser gives it (a literal's value is a str,
  int, float, bool or None; names and operators are strings...). Anyone able to write the
  file could otherwise have a template render what marshal stores (bytes, a code object and
  its address, a set), or the engine trip over a field of the wrong type.

Sources longer than :data:`MAX_STORED_SOURCE` (256,000 characters; real chat templates are
under 100 KB) are not stored. Opt out with ``Environment(parse_cache=False)`` or
``MINIJINJA_PY_CACHE=0``. Any problem with the cache (unwritable directory, full disk, foreign
file) silently falls back to parsing.

The directory is bounded (:data:`MAX_CACHE_ENTRIES`, :data:`MAX_CACHE_BYTES`): a server given
templates by its clients, each one new, would otherwise fill the disk (a 250 KB template makes
an entry of about 1 MB). Stores sometimes prune it (:func:`prune`): after every
:data:`PRUNE_AFTER_BYTES` a process has written, and at random one store in
:data:`PRUNE_ONE_IN` (so that processes storing a few entries each prune it too); an entry
read is marked used again at most hourly (its modification time), and pruning removes the
least recently used entries first, down to three quarters of each bound.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
from operator import attrgetter

from . import nodes as n
from .._startup.sha256 import sha256
from .._startup.gcpause import PausedGC

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Optional, Tuple

FORMAT = 3
#: marshal format of the payload: 2 is the last without back-references (FLAG_REF, format 3+)
MARSHAL_VERSION = 2
_MAGIC = "minijinja_py parse cache 3"  # first item of the payload
_DIGEST_SIZE = 32
_HEADER = 32  # the SHA-256 of the payload; the payload is (magic, digest, encoded AST)
#: An entry may be at most this many bytes per source character (plus SIZE_SLACK). The
#: densest ASTs (a list of one-digit literals, chains of unary minus) take under 20.
SIZE_PER_CHARACTER = 48
SIZE_SLACK = 1 << 16
#: Sources longer than this are not stored: real chat templates are under 100 KB, and writing
#: the AST of a megabyte of hostile source would add a second to its parse.
MAX_STORED_SOURCE = 256_000
#: The cache directory's bounds (see :func:`prune`): real chat templates make entries of
#: 5-60 KB, a few hundred of them a few megabytes.
MAX_CACHE_ENTRIES = 4096
MAX_CACHE_BYTES = 64 * 2 ** 20
#: A process prunes the directory after writing this many bytes to it since it last did...
PRUNE_AFTER_BYTES = MAX_CACHE_BYTES // 16
#: ...and, besides, at random on one store in this many (listing the directory costs about 1.5
#: microseconds an entry, the store itself follows a parse of a millisecond or more).
PRUNE_ONE_IN = 32
#: An entry read is marked used again (its modification time set) when it was last marked
#: longer ago than this many seconds.
TOUCH_AFTER = 3600
#: Temporary files of a store left by a process that died are removed by a prune once older.
STALE_TEMPORARY = 3600
_NODE_TYPES = sorted((cls for cls in vars(n).values()
                      if isinstance(cls, type) and issubclass(cls, n.Node) and cls is not n.Node),
                     key=lambda cls: cls.__name__)
_NODE_INDEX = {cls: index for index, cls in enumerate(_NODE_TYPES)}
_TUPLE = -1  # first item of an encoded tuple; a node's is its class's index (0 or more)


def enabled() -> bool:
    return os.environ.get("MINIJINJA_PY_CACHE", "1").lower() not in ("0", "false", "no", "off")


def cache_dir() -> str:
    explicit = os.environ.get("MINIJINJA_PY_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "minijinja_py")


def entry_key(source: str, options: "Tuple[Any, ...]", engine: str) -> str:
    """The entry's file name: the SHA-256 of everything the AST depends on, and the source's
    length (which bounds the entry's size, see :func:`size_cap`)."""
    digest = sha256()
    digest.update(repr((FORMAT, engine, options, sys.version_info[:2])).encode())
    digest.update(b"\x00")
    digest.update(source.encode("utf-8", "surrogatepass"))
    return f"{digest.hexdigest()}-{len(source)}"


def _parse_key(key: str) -> "Optional[Tuple[bytes, int]]":
    """(digest, source length) of a key made by :func:`entry_key`, or None."""
    digest, _, length = key.partition("-")
    if len(digest) != 2 * _DIGEST_SIZE or not length.isdigit() or not length.isascii():
        return None
    try:
        return bytes.fromhex(digest), int(length)
    except ValueError:
        return None


def size_cap(source_length: int) -> int:
    """The most bytes an entry for a source of ``source_length`` characters may have."""
    return _HEADER + SIZE_SLACK + SIZE_PER_CHARACTER * source_length


# ---- AST <-> tuples -------------------------------------------------------------------------
def _fields_reader(fields: "Tuple[str, ...]") -> "Callable[[Any], Tuple[Any, ...]]":
    """A node's fields as a tuple, read in C (an attrgetter gives one name's value bare)."""
    if len(fields) >= 2:
        return attrgetter(*fields)
    if fields:
        get = attrgetter(fields[0])
        return lambda node: (get(node),)
    return lambda node: ()


#: exact node class -> (its index, its fields reader): a store of a big template's AST is
#: on its first render's path (about a node per three characters of source)
_NODE_ENCODING = {cls: (index, _fields_reader(cls.fields)) for cls, index in _NODE_INDEX.items()}
_LEAVES = frozenset({str, int, bool, float, type(None)})


def _encode(value: "Any") -> "Any":
    """Nodes -> (class index, lineno, column, *fields); tuples -> (-1, *items)."""
    kind = type(value)
    encoding = _NODE_ENCODING.get(kind)
    if encoding is not None:  # the common cases first: the exact node classes, leaves, lists
        index, fields_of = encoding
        return (index, value.lineno, value.column, *map(_encode, fields_of(value)))
    if kind in _LEAVES:
        return value
    if kind is list:
        return list(map(_encode, value))
    if isinstance(value, n.Node):
        return (_NODE_INDEX[type(value)], value.lineno, value.column,
                *[_encode(getattr(value, field)) for field in value.fields])
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if isinstance(value, tuple):
        return (_TUPLE, *[_encode(item) for item in value])
    if isinstance(value, str) and type(value) is not str:
        return str(value)  # parser tokens kept inside Compare ops
    return value


def payload_checksum(payload: "Any") -> bytes:
    """What an entry starts with: the SHA-256 of the rest (the payload)."""
    return sha256(payload).digest()


class _TooLarge(Exception):
    """The entry rebuilds into more items than it has bytes: it holds back-references."""


class _NotParsed(Exception):
    """The entry holds something the parser never makes."""


# ---- tuples -> AST: only what the parser makes ----------------------------------------------
# An entry whose checksum and name check out may still have been written by someone able to
# write the file, and its constants are rendered: a byte string, a code object (and its
# address), a set... So each field of each node is checked against what parser.py puts there:
# a node of the kinds the grammar allows at that place, a list of them, a name, a boolean, a
# literal's value; each node's width and position too. Anything else is damage: a miss, the
# template is parsed again. (What the checks cannot tell is an entry that is a valid AST of
# another text: the directory being private is what keeps others from writing one.)
#
# Checking is decoding: a *reader* turns one encoded field into its value, or raises; a
# *kinds* table maps the class indexes a field may hold to the builder of each class. Readers
# take ``(item, budget)``; ``budget`` is ``[how many more items may be rebuilt]`` (see
# :func:`_decode`).
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, FrozenSet, List

    Reader = Callable[[Any, List[int]], Any]
    Builder = Callable[[Any, List[int]], n.Node]
    Kinds = Dict[int, Any]  # class index -> Builder, or (class, types) (see _builder)

#: the operators of the grammar's binop and comp_op rules, as BinOp and Compare hold them
_BINARY_OPERATORS = frozenset({"+", "-", "*", "/", "//", "%", "**"})
_COMPARISON_OPERATORS = frozenset({"==", "!=", "<", "<=", ">", ">=", "in", "notin"})
#: the tags a NoLoader stands for (parser._NO_LOADER_TAGS)
_NO_LOADER_TAGS = frozenset({"include", "import", "from", "extends"})


def _value(*types: type) -> "Reader":
    """A field holding a value of exactly one of ``types`` (marshal makes no subclasses).
    The reader's ``types`` are checked without calling it where a node has only this field
    (see :func:`_builder`)."""
    allowed = frozenset(types)

    def read_value(item: "Any", budget: "List[int]") -> "Any":
        if type(item) not in allowed:
            raise _NotParsed()
        return item
    read_value.types = allowed  # type: ignore[attr-defined]
    return read_value


#: a literal's value (parser.ToAst: strings, integers, floats; true, false, none)
_CONSTANT = _value(str, int, float, bool, type(None))
_STR = _value(str)
_BOOL = _value(bool)


def _word(words: "FrozenSet[str]") -> "Reader":
    """A field holding one of ``words``."""
    def read_word(item: "Any", budget: "List[int]") -> "Any":
        if type(item) is not str or item not in words:
            raise _NotParsed()
        return item
    return read_word


def _node(kinds: "Kinds", *only: type, optional: bool = False) -> "Reader":
    """A field holding a node of a kind ``kinds`` lists (of ``only`` those classes when
    given), or None when ``optional``. ``kinds`` may still be empty: the tables refer to each
    other, and are filled once all exist.

    A chain of nodes (``x|f|f...``, ``a if b else c if d else ...``) nests as deep as the
    parser allows: reading a level takes two frames (this reader, the class's builder), as
    many as the compiler's, so that what compiles also loads within Python's recursion limit.
    """
    build_of = kinds.get

    def read_node(item: "Any", budget: "List[int]") -> "Any":
        if type(item) is not tuple:
            if item is None and optional:
                return None
            raise _NotParsed()
        build = build_of(item[0])
        if type(build) is tuple:  # one plain value (Const, Name...: half the nodes): built here
            cls, types = build
            _, lineno, column, value = item  # (a ValueError when the width is wrong)
            if type(value) not in types or type(lineno) is not int or type(column) is not int:
                raise _NotParsed()
            return cls(value, lineno=lineno, column=column)
        if build is None:
            raise _NotParsed()
        budget[0] -= len(item)
        if budget[0] < 0:
            raise _TooLarge()
        return build(item, budget)

    if not only:
        return read_node
    allowed = frozenset(_NODE_INDEX[cls] for cls in only)

    def read_some(item: "Any", budget: "List[int]") -> "Any":
        if type(item) is tuple and item[0] not in allowed:
            raise _NotParsed()
        return read_node(item, budget)
    return read_some


def _list_of(read: "Reader") -> "Reader":
    """A field holding a list, of items ``read`` reads."""
    def read_list(item: "Any", budget: "List[int]") -> "Any":
        if type(item) is not list:
            raise _NotParsed()
        budget[0] -= len(item)
        if budget[0] < 0:
            raise _TooLarge()
        return [read(each, budget) for each in item]
    return read_list


def _pair(read_first: "Reader", read_second: "Reader") -> "Reader":
    """A field holding a 2-tuple, encoded ``(-1, first, second)``."""
    def read_pair(item: "Any", budget: "List[int]") -> "Any":
        if type(item) is not tuple or len(item) != 3:
            raise _NotParsed()
        budget[0] -= 3
        if budget[0] < 0:
            raise _TooLarge()
        marker, first, second = item
        if type(marker) is not int or marker != _TUPLE:
            raise _NotParsed()
        return (read_first(first, budget), read_second(second, budget))
    return read_pair


def _builder(cls: type, readers: "Tuple[Reader, ...]") -> "Any":
    """What a kinds table holds for ``cls``: the builder of a node from its encoding,
    ``(index, lineno, column, *fields)``, each field read by its reader; or, for a node of one
    plain value, ``(cls, the value's types)`` (built by :func:`_node`'s reader itself)."""
    if len(readers) != len(cls.fields):
        raise ValueError(f"{cls.__name__} has {len(cls.fields)} fields")
    if len(readers) == 1 and hasattr(readers[0], "types"):
        return (cls, readers[0].types)
    unrolled = _UNROLLED_BUILDERS.get(len(readers))
    if unrolled is not None:
        return unrolled(cls, *readers)
    width = 3 + len(readers)

    def build(value: "Any", budget: "List[int]") -> n.Node:
        lineno, column = value[1], value[2]
        if len(value) != width or type(lineno) is not int or type(column) is not int:
            raise _NotParsed()
        fields = []  # (a loop, not a list comprehension: a frame fewer per level, see _node)
        for read, item in zip(readers, value[3:]):
            fields.append(read(item, budget))
        return cls(*fields, lineno=lineno, column=column)
    return build


# The builders of nodes of one to three fields (most nodes with children), unrolled: the
# generic one's loop over zip() costs a big template's load about 15%.
def _build_1(cls: type, read_a: "Reader") -> "Builder":
    def build(value: "Any", budget: "List[int]") -> n.Node:
        _, lineno, column, a = value  # (a ValueError when the width is wrong)
        if type(lineno) is not int or type(column) is not int:
            raise _NotParsed()
        return cls(read_a(a, budget), lineno=lineno, column=column)
    return build


def _build_2(cls: type, read_a: "Reader", read_b: "Reader") -> "Builder":
    def build(value: "Any", budget: "List[int]") -> n.Node:
        _, lineno, column, a, b = value
        if type(lineno) is not int or type(column) is not int:
            raise _NotParsed()
        return cls(read_a(a, budget), read_b(b, budget), lineno=lineno, column=column)
    return build


def _build_3(cls: type, read_a: "Reader", read_b: "Reader", read_c: "Reader") -> "Builder":
    def build(value: "Any", budget: "List[int]") -> n.Node:
        _, lineno, column, a, b, c = value
        if type(lineno) is not int or type(column) is not int:
            raise _NotParsed()
        return cls(read_a(a, budget), read_b(b, budget), read_c(c, budget), lineno=lineno,
                   column=column)
    return build


_UNROLLED_BUILDERS = {1: _build_1, 2: _build_2, 3: _build_3}


def _builders(readers: "Dict[type, Tuple[Reader, ...]]") -> "Kinds":
    """A kinds table: for each class of ``readers`` (class -> the readers of its fields), what
    :func:`_builder` makes of it."""
    return {_NODE_INDEX[cls]: _builder(cls, fields) for cls, fields in readers.items()}


# Where a node may stand, as the grammar and parser.py place them: the kinds tables, filled
# below (they refer to each other). A class has one builder, shared by the tables holding it.
_TEMPLATE: "Kinds" = {}
_STATEMENT: "Kinds" = {}
_OUTPUT_ITEM: "Kinds" = {}  # an Output's: expressions, template text
_EXPRESSION: "Kinds" = {}
_SUBSCRIPT: "Kinds" = {}  # in brackets: an expression, a slice, a tuple of those
_SUBSCRIPT_ITEM: "Kinds" = {}  # in that tuple: an expression, a slice
_FILTER_CHAIN: "Kinds" = {}  # a `{% filter %}`'s, a `{% set x | f %}`'s: the first's node is None
_TARGET: "Kinds" = {}  # a `{% set %}`'s: names, namespace attributes, tuples of them
_TARGET_ITEM: "Kinds" = {}  # in that tuple
_PLAIN_TARGET: "Kinds" = {}  # a `for`'s, a `with`'s, a tuple's in parentheses: names, tuples

_EXPR = _node(_EXPRESSION)
_OPTIONAL_EXPR = _node(_EXPRESSION, optional=True)
_EXPRS = _list_of(_EXPR)
_BODY = _list_of(_node(_STATEMENT))
_KEYWORD_ARGS = _list_of(_pair(_STR, _EXPR))
_CALL_ARGS = (_EXPRS, _KEYWORD_ARGS, _OPTIONAL_EXPR, _OPTIONAL_EXPR)  # args ... dyn_kwargs
_PARAMS = _list_of(_pair(_STR, _OPTIONAL_EXPR))  # (name, default)

_TEMPLATE.update(_builders({n.Template: (_BODY,)}))
_EXPRESSION.update(_builders({
    n.Const: (_CONSTANT,),
    n.Name: (_STR,),
    n.TupleLit: (_EXPRS,),
    n.ListLit: (_EXPRS,),
    n.DictLit: (_list_of(_pair(_EXPR, _EXPR)),),
    n.Getattr: (_EXPR, _STR),
    n.Getitem: (_EXPR, _node(_SUBSCRIPT)),
    n.Call: (_EXPR, *_CALL_ARGS),
    n.Filter: (_EXPR, _STR, *_CALL_ARGS),
    n.Test: (_EXPR, _STR, *_CALL_ARGS, _BOOL),
    n.CondExpr: (_EXPR, _EXPR, _OPTIONAL_EXPR),
    n.BinOp: (_word(_BINARY_OPERATORS), _EXPR, _EXPR),
    n.Concat: (_EXPRS,),
    n.Compare: (_EXPR, _list_of(_pair(_word(_COMPARISON_OPERATORS), _EXPR))),
    n.And: (_EXPR, _EXPR),
    n.Or: (_EXPR, _EXPR),
    n.Not: (_EXPR,),
    n.Neg: (_EXPR,),
    n.Pos: (_EXPR,),
}))
_STATEMENT.update(_builders({
    n.Output: (_list_of(_node(_OUTPUT_ITEM)),),
    n.If: (_EXPR, _BODY, _list_of(_node(_STATEMENT, n.If)), _BODY),  # elif_: Ifs
    n.For: (_node(_PLAIN_TARGET), _EXPR, _BODY, _BODY, _OPTIONAL_EXPR, _BOOL),
    n.Assign: (_node(_TARGET), _EXPR),
    n.AssignBlock: (_node(_TARGET, n.NameTarget, n.NSRef), _node(_FILTER_CHAIN, optional=True),
                    _BODY),
    n.Macro: (_STR, _PARAMS, _BODY),
    n.CallBlock: (_node(_EXPRESSION, n.Call), _PARAMS, _BODY),
    n.FilterBlock: (_node(_FILTER_CHAIN), _BODY),
    n.With: (_list_of(_node(_PLAIN_TARGET)), _EXPRS, _BODY),
    n.Break: (),
    n.Continue: (),
    n.Generation: (_BODY,),
    n.AutoEscape: (_EXPR, _BODY),
    n.Scope: (_STR, _BOOL, _BOOL, _BODY),
    n.ExprStmt: (_EXPR,),
    n.NoLoader: (_word(_NO_LOADER_TAGS),),
}))
_OUTPUT_ITEM.update(_EXPRESSION)
_OUTPUT_ITEM.update(_builders({n.TemplateData: (_STR,)}))
_SUBSCRIPT_ITEM.update(_EXPRESSION)
_SUBSCRIPT_ITEM.update(_builders({n.Slice: (_OPTIONAL_EXPR, _OPTIONAL_EXPR, _OPTIONAL_EXPR)}))
_SUBSCRIPT.update(_SUBSCRIPT_ITEM)
_SUBSCRIPT.update(_builders({n.TupleLit: (_list_of(_node(_SUBSCRIPT_ITEM)),)}))
_FILTER_CHAIN.update(_builders({
    n.Filter: (_node(_FILTER_CHAIN, optional=True), _STR, *_CALL_ARGS)}))
_PLAIN_TARGET.update(_builders({
    n.NameTarget: (_STR,), n.TupleTarget: (_list_of(_node(_PLAIN_TARGET)),)}))
_TARGET_ITEM.update(_PLAIN_TARGET)
_TARGET_ITEM.update(_builders({n.NSRef: (_STR, _STR)}))
_TARGET.update(_TARGET_ITEM)
_TARGET.update(_builders({n.TupleTarget: (_list_of(_node(_TARGET_ITEM)),)}))
_read_template = _node(_TEMPLATE)


def _decode(encoded: "Any", budget: int) -> n.Template:
    """The template ``encoded`` holds, if it is what :func:`_encode` makes of what the parser
    makes; raises anything else, and once it has rebuilt more than ``budget`` items.

    Written without back-references, every item of the payload takes at least one byte, so
    an entry of N bytes rebuilds at most N items; more means that it shares objects (marshal
    formats 3+), which the AST never does, and could expand without bound. (Each list, pair
    and node with children counts the items it holds; a node of one plain value holds none
    to rebuild, and is counted by its parent.)
    """
    return _read_template(encoded, [budget])


def dumps(template: n.Template, digest: bytes = bytes(_DIGEST_SIZE)) -> bytes:
    """The entry for ``template``, stored under ``digest`` (see :func:`entry_key`): the SHA-256
    of the payload, then the payload, ``(magic, digest, encoded AST)`` in marshal format 2."""
    if len(digest) != _DIGEST_SIZE:
        raise ValueError("digest of the wrong size")
    payload = marshal.dumps((_MAGIC, digest, _encode(template)), MARSHAL_VERSION)
    return payload_checksum(payload) + payload


def loads(data: bytes, digest: "Optional[bytes]" = None) -> "Optional[n.Template]":
    """The template of an entry, or None when anything about it does not check out (its
    checksum, the ``digest`` it was stored under when given, its items: see
    :func:`_decode`)."""
    if len(data) <= _HEADER or data[:_HEADER] != payload_checksum(memoryview(data)[_HEADER:]):
        return None
    try:
        payload = memoryview(data)[_HEADER:]
        entry = marshal.loads(payload)
        if (type(entry) is not tuple or len(entry) != 3 or entry[0] != _MAGIC
                or type(entry[1]) is not bytes or type(entry[2]) is not tuple):
            return None
        if digest is not None and entry[1] != digest:
            return None  # an entry stored for another source, options or engine
        template = _decode(entry[2], len(payload))
        # only what dumps() writes, marshal format 2: back-references and the short forms of
        # formats 3 and 4 make a payload shorter than that (re-encoding is bounded now that
        # the decoder met no more items than the payload has bytes). Lengths are compared,
        # not bytes: whether a string is written as interned depends on the process.
        if len(marshal.dumps(entry, MARSHAL_VERSION)) != len(payload):
            return None
    except Exception:  # any malformed entry is a cache miss, never an error
        return None
    return template if type(template) is n.Template else None


# ---- files ----------------------------------------------------------------------------------
def _private(info: "os.stat_result") -> bool:
    """Owned by us and writable by nobody else: safe to trust what it holds."""
    getuid = getattr(os, "getuid", None)
    if getuid is not None and info.st_uid != getuid():
        return False
    return not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(key: str) -> "Optional[n.Template]":
    parsed = _parse_key(key)
    if parsed is None:
        return None
    digest, source_length = parsed
    if source_length > MAX_STORED_SOURCE:
        return None  # never stored
    directory = cache_dir()
    path = os.path.join(directory, key)
    try:
        if not _private(os.stat(directory)):
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        cap = size_cap(source_length)
        if not stat.S_ISREG(info.st_mode) or not _private(info) or info.st_size > cap:
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(cap + 1)  # the file may have grown since fstat
    except OSError:
        return None
    finally:
        if fd != -1:
            os.close(fd)
    if len(data) > cap:
        return None
    with PausedGC(source_length):  # a big AST: see gcpause
        template = loads(data, digest)
    if template is not None and _now() - info.st_mtime > TOUCH_AFTER:
        try:  # used: the last entry a prune removes (see prune)
            os.utime(path)
        except OSError:
            pass
    return template


def store(key: str, template: n.Template) -> None:
    parsed = _parse_key(key)
    if parsed is None:
        return
    digest, source_length = parsed
    if source_length > MAX_STORED_SOURCE:
        return
    directory = cache_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not _private(os.stat(directory)):
            return
        with PausedGC(source_length):
            data = dumps(template, digest)
        if len(data) > size_cap(source_length):
            return  # load() would refuse it
        temporary = os.path.join(directory, f".{key}.{os.getpid()}{_TEMPORARY_SUFFIX}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, os.path.join(directory, key))
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
    except (OSError, ValueError, RecursionError):
        return
    global _written_since_prune
    _written_since_prune += len(data)
    if _written_since_prune >= PRUNE_AFTER_BYTES or _one_in(PRUNE_ONE_IN):
        _written_since_prune = 0
        prune(directory)


_TEMPORARY_SUFFIX = ".tmp"
_written_since_prune = 0  # bytes this process has stored since its last prune


def _now() -> float:
    from time import time  # (a built-in module: loaded with the interpreter)

    return time()


def _one_in(count: int) -> bool:
    """True with a chance of one in ``count`` (at most 256), unpredictably to the templates'
    authors: os.urandom, no ``random`` module to import."""
    return os.urandom(1)[0] < 256 // count


def prune(directory: "Optional[str]" = None) -> int:
    """Bound the cache directory: when its entries are more than :data:`MAX_CACHE_ENTRIES`
    or take more than :data:`MAX_CACHE_BYTES`, remove the least recently used (oldest
    modification time) until both are at most three quarters of their bound; remove store
    temporaries older than :data:`STALE_TEMPORARY` seconds. Only regular files named as this
    module names them, owned by the user and writable by nobody else, are counted and removed
    (links are not followed). Returns how many files it removed; never raises."""
    directory = directory if directory is not None else cache_dir()
    entries = []  # (modification time, size, path)
    removed = 0
    stale = _now() - STALE_TEMPORARY
    try:
        if not _private(os.stat(directory)):
            return 0
        with os.scandir(directory) as listing:
            for item in listing:
                name = item.name
                temporary = name.startswith(".") and name.endswith(_TEMPORARY_SUFFIX)
                if not temporary and _parse_key(name) is None:
                    continue  # not ours
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(info.st_mode) or not _private(info):
                    continue
                if not temporary:
                    entries.append((info.st_mtime, info.st_size, item.path))
                elif info.st_mtime < stale and _remove(item.path):
                    removed += 1
    except OSError:
        return removed
    count = len(entries)
    total = sum(size for _, size, _ in entries)
    if count <= MAX_CACHE_ENTRIES and total <= MAX_CACHE_BYTES:
        return removed
    entries.sort()
    for _, size, path in entries:
        if count <= MAX_CACHE_ENTRIES * 3 // 4 and total <= MAX_CACHE_BYTES * 3 // 4:
            break
        if _remove(path):
            removed += 1
        count -= 1  # (gone either way: removed here or by another process)
        total -= size
    return removed


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False

"""The persistent parse cache: exact round trips, atomic private files, corruption ignored."""

from __future__ import annotations

import os
import stat
from typing import Any

import pytest

import minijinja_py as mj
from minijinja_py.syntax import parse_cache as diskcache, parser
from minijinja_py.syntax import nodes as n

from corpus_support import CORPUS, corpus_available, template_source
from forked import run_forked


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("MINIJINJA_PY_CACHE_DIR", str(directory))
    monkeypatch.delenv("MINIJINJA_PY_CACHE", raising=False)
    return directory


def _corpus_sources():
    if not corpus_available():
        return ["{% for m in messages %}{{ m.role ~ ':' }}{% endfor %}"]
    return [template_source(p.stem) for p in sorted((CORPUS / "templates").glob("*.jinja"))]


#: every construct of the grammar, in each place the parser puts one: the loader accepts only
#: what the parser makes (see test_what_the_parser_never_makes_is_refused), all of it
EVERY_CONSTRUCT = [
    "{{ 1 + 2 - 3 * 4 / 5 // 6 % 7 ** 8 ~ 'a' }}{{ 1 == 2 != 3 < 4 <= 5 > 6 >= 7 in 8 not in 9 }}",
    "{{ -x }}{{ +1 }}{{ not x and y or z }}{{ a if b else c }}{{ a if b }}{{ 1.5 }}{{ 1e999 }}",
    "{{ true }}{{ none }}{{ 0x_ff }}{{ 'a' 'b' }}{{ (1, 2) }}{{ () }}{{ [x, 1] }}{{ {x: 1} }}",
    "{{ x[1:2] }}{{ x[::-1] }}{{ x[1:2, 3] }}{{ x[(1, 2)] }}{{ x[] }}{{ x.0 }}{{ x.y.z }}",
    "{{ f(1, k=2, *a, **b) }}{{ x|f(1, k=2, *a, **b)|g }}{{ x is f(1, k=2) }}{{ x is not d 3 }}",
    "{% if a %}1{% elif b %}2{% elif c %}3{% else %}4{% endif %}",
    "{% for a, (b, c) in x if a recursive %}{{ loop(a) }}{% break %}{% continue %}"
    "{% else %}e{% endfor %}",
    "{% set a.b, (c, d), e = x %}{% set (f, g) = y %}{% set h = 1 %}{% set n.a = 1 %}",
    "{% set a | upper | trim %}x{% endset %}{% set n.b %}y{% endset %}",
    "{% macro m(a, b=1, c=none) %}{{ caller(a) }}{% endmacro %}"
    "{% call(u, v=2) m(1) %}{{ u }}{% endcall %}{% call m(2) %}z{% endcall %}",
    "{% filter upper|replace('A', 'B') %}x{% endfilter %}{% with a = 1, (b, c) = d %}"
    "{{ a }}{% endwith %}{% with %}{% endwith %}",
    "{% generation %}g{% endgeneration %}{% autoescape true %}{{ '<' }}{% endautoescape %}",
    "{% block b scoped %}k{% endblock %}{% block r required %} {% endblock %}",
    "{% include 'i' %}{% import 'm' as m %}{% from 'f' import g %}{% extends 'base' %}",
    "{% print a, b %}{% raw %}{{ r }}{% endraw %}{# c #}text{% do x.append(1) %}{% do 1, 2 %}",
]


def test_every_corpus_ast_survives_a_round_trip() -> None:
    for source in _corpus_sources():
        ast = parser.parse(source, trim_blocks=True, lstrip_blocks=True)
        assert repr(diskcache.loads(diskcache.dumps(ast))) == repr(ast)
    for source in EVERY_CONSTRUCT:
        ast = parser.parse(source, extension_tags=("do", "generation"))
        assert repr(diskcache.loads(diskcache.dumps(ast))) == repr(ast), source
    # chains nearly as deep as the parser allows (504) load too, in the default recursion limit
    for unit in (" + 1", "|string", " if x else 1", ".a", "[0]"):
        ast = parser.parse("{{ 1" + unit * 400 + " }}")
        assert diskcache.loads(diskcache.dumps(ast)) is not None, unit
    # the words the loader accepts are the parser's, the operators those the engine computes
    from minijinja_py.runtime import operators as arith
    from minijinja_py.compiler import closures as compiler

    assert diskcache._NO_LOADER_TAGS == set(parser._NO_LOADER_TAGS)
    assert diskcache._BINARY_OPERATORS == set(arith.BINOPS)
    assert diskcache._COMPARISON_OPERATORS == set(compiler._COMPARE)


def test_second_environment_loads_from_disk_without_parsing(cache_dir, monkeypatch) -> None:
    source = "{% for m in messages %}[{{ m }}]{% endfor %}"
    first = mj.chat_environment().from_string(source)
    files = [f for f in os.listdir(cache_dir) if not f.startswith(".")]
    assert len(files) == 1
    info = os.stat(cache_dir / files[0])
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o700

    def no_parsing(*args, **kwargs):
        raise AssertionError("parsed again instead of using the cache")

    monkeypatch.setattr(parser, "parse", no_parsing)
    second = mj.chat_environment().from_string(source)
    assert repr(second.ast) == repr(first.ast)
    assert second.render(messages=[1, 2]) == "[1][2]"


def test_corrupted_entry_is_ignored(cache_dir) -> None:
    source = "{{ 'x' * 3 }}"
    mj.chat_environment().from_string(source)
    (entry,) = [cache_dir / f for f in os.listdir(cache_dir)]
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    assert mj.chat_environment().from_string(source).render() == "xxx"
    entry.write_bytes(b"")
    assert mj.chat_environment().from_string(source).render() == "xxx"


def test_a_damaged_byte_that_leaves_the_payload_well_formed_is_a_miss(cache_dir) -> None:
    # a letter of a constant changed in place: only the checksum tells the entry is damaged
    source = "{{ 'abc' }}"
    mj.chat_environment().from_string(source)
    (entry,) = [cache_dir / f for f in os.listdir(cache_dir)]
    data = bytearray(entry.read_bytes())
    data[data.rindex(b"abc") + 1] = ord("B")
    entry.write_bytes(bytes(data))
    assert diskcache.load(entry.name) is None
    assert mj.chat_environment().from_string(source).render() == "abc"


def test_shared_writable_directory_is_not_trusted(cache_dir) -> None:
    source = "{{ 1 + 1 }}"
    mj.chat_environment().from_string(source)
    os.chmod(cache_dir, 0o777)
    try:
        key = diskcache.entry_key(source, (True, True, False, 128), "x")
        assert diskcache.load(key) is None
        (entry,) = [f for f in os.listdir(cache_dir)]
        assert diskcache.load(entry) is None
    finally:
        os.chmod(cache_dir, 0o700)


def test_opting_out(cache_dir, monkeypatch) -> None:
    mj.Environment(parse_cache=False).from_string("{{ 2 }}")
    assert not cache_dir.exists() or not os.listdir(cache_dir)
    monkeypatch.setenv("MINIJINJA_PY_CACHE", "0")
    mj.Environment().from_string("{{ 3 }}")
    assert not cache_dir.exists() or not os.listdir(cache_dir)


def test_unwritable_cache_location_falls_back_to_parsing(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MINIJINJA_PY_CACHE_DIR", str(blocker / "cache"))
    assert mj.Environment().from_string("{{ 4 }}").render() == "4"


def _entries(cache_dir):
    return sorted(f for f in os.listdir(cache_dir) if not f.startswith("."))


def test_entry_swapped_for_another_templates_is_a_miss(cache_dir, monkeypatch) -> None:
    first, second = "{{ 'first' }}", "{{ 'second' }}"
    mj.chat_environment().from_string(first)
    (first_entry,) = _entries(cache_dir)
    mj.chat_environment().from_string(second)
    (second_entry,) = [f for f in _entries(cache_dir) if f != first_entry]
    # the first template's entry under the second's name: checksum-valid, but not the second's
    (cache_dir / second_entry).write_bytes((cache_dir / first_entry).read_bytes())
    os.chmod(cache_dir / second_entry, 0o600)
    key = second_entry
    assert diskcache.load(key) is None
    parsed = []
    real_parse = parser.parse
    monkeypatch.setattr(parser, "parse", lambda *a, **k: parsed.append(1) or real_parse(*a, **k))
    assert mj.chat_environment().from_string(second).render() == "second"
    assert parsed, "the swapped entry was used instead of parsing"
    assert mj.chat_environment().from_string(first).render() == "first"


def _key(source):
    """The name of ``source``'s entry, as chat_environment() names it (Environment._parse)."""
    env = mj.chat_environment()
    return diskcache.entry_key(source, (env.trim_blocks, env.lstrip_blocks,
                                        env.keep_trailing_newline, env.limits.max_nesting,
                                        env.extension_tags),
                               mj.environment._engine_id())


def test_forged_entries_are_where_the_engine_reads(cache_dir) -> None:
    # (the tests below write entries by that name: the engine must read them, not parse)
    source = "{{ 'where' }}"
    mj.chat_environment().from_string(source)
    assert _entries(cache_dir) == [_key(source)]


def _digest(source):
    return bytes.fromhex(_key(source).partition("-")[0])


def _forge_entry(cache_dir, source, payload: bytes) -> str:
    """Write an entry holding ``payload`` (marshal bytes) under ``source``'s key, with the
    checksum a valid entry has."""
    key = _key(source)
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    path = cache_dir / key
    path.write_bytes(diskcache.payload_checksum(payload) + payload)
    os.chmod(path, 0o600)
    return key


def _shared_nodes() -> tuple:
    """A well-formed AST encoding that rebuilds into 2**60 nodes: 60 levels of ``x + x``,
    both operands one shared node (no list anywhere below the Output)."""
    index = diskcache._NODE_INDEX
    shared = (index[n.Name], 1, 4, "x")
    for _ in range(60):
        shared = (index[n.BinOp], 1, 6, "+", shared, shared)
    return shared


def _shared_lists() -> tuple:
    """A well-formed AST encoding that rebuilds into 10**8 constants: a list literal of
    10,000 constants (one shared leaf), printed 10,000 times (one shared node): every node
    is cheap, the lists are what grows."""
    index = diskcache._NODE_INDEX
    literal = (index[n.ListLit], 1, 4, [(index[n.Const], 1, 5, 1)] * 10_000)
    return [literal] * 10_000


def _encoding_of(body: Any) -> tuple:
    index = diskcache._NODE_INDEX
    return (index[n.Template], 1, 1,
            [(index[n.Output], 1, 1, body if isinstance(body, list) else [body])])


@pytest.mark.parametrize("shape", [_shared_nodes, _shared_lists], ids=["nodes", "lists"])
def test_payload_whose_references_expand_is_refused_by_the_item_budget(cache_dir,
                                                                       shape) -> None:
    """marshal formats 3+ share objects (FLAG_REF): a payload of a few hundred bytes (nodes)
    or 100 KB (lists) can stand for an AST of 2**60 nodes or 10**8 constants. The decoder
    stops once it has rebuilt more items than the payload has bytes, whether the sharing is
    in nodes or in lists; each shape alone is bounded only by its own count."""
    import marshal

    source = "{{ 'fine' }}" + "." * 10_000  # (an entry may be 48 bytes a character)
    encoded = _encoding_of(shape())
    payload = marshal.dumps((diskcache._MAGIC, _digest(source), encoded), 4)
    assert len(payload) < diskcache.size_cap(len(source))
    key = _forge_entry(cache_dir, source, payload)
    # in a child with its own timeout and memory cap: a decoder without its item budget would
    # rebuild the 2**60 nodes for ever (CPU-bound, no memory to run out of), or the 10**8
    # constants until memory ran out, and must fail the test, not hang it
    refused, loaded, seconds = run_forked(_decode_and_load, encoded, len(payload), key,
                                          timeout=30.0)
    assert refused == "_TooLarge"
    assert loaded is None
    assert seconds < 5.0  # CPU time, generous: 1.3 s measured at load 10 (a few ms idle)
    assert mj.chat_environment().from_string(source).render() == "fine" + "." * 10_000


def _decode_and_load(encoded: tuple, budget: int, key: str) -> tuple:
    """(the exception _decode raises for ``encoded`` within ``budget`` items, what
    diskcache.load(key) returns, the CPU seconds both took)."""
    import time

    start = time.thread_time()
    try:
        diskcache._decode(encoded, budget)
        refused = "nothing"
    except Exception as exc:  # (MemoryError included: a decoder that built too much)
        refused = type(exc).__name__
    loaded = diskcache.load(key)
    return refused, loaded, time.thread_time() - start


def test_entries_are_written_without_back_references() -> None:
    import marshal

    ast = parser.parse("{% for m in messages %}{{ m.role }}{{ m.role }}{% endfor %}")
    data = diskcache.dumps(ast)
    payload = data[diskcache._HEADER:]
    assert marshal.dumps(marshal.loads(payload), 2) == payload
    assert marshal.dumps(marshal.loads(payload), 4) != payload  # format 4 would share
    assert diskcache.MARSHAL_VERSION == 2


def test_entry_with_back_references_is_refused_even_when_small(cache_dir) -> None:
    import marshal

    source = "{{ 'x' }}{{ 'x' }}"
    ast = parser.parse(source, trim_blocks=True, lstrip_blocks=True)
    entry = (diskcache._MAGIC, _digest(source), diskcache._encode(ast))
    key = _forge_entry(cache_dir, source, marshal.dumps(entry, 2))
    assert repr(diskcache.load(key)) == repr(ast)  # the format dumps() writes: used
    shared = marshal.dumps(entry, 4)  # the same data with references
    assert shared != marshal.dumps(entry, 2)
    key = _forge_entry(cache_dir, source, shared)
    assert diskcache.load(key) is None
    assert mj.chat_environment().from_string(source).render() == "xx"


def test_entry_larger_than_its_source_allows_is_refused(cache_dir) -> None:
    import marshal

    source = "{{ 1 }}"
    filler = [None] * (diskcache.size_cap(len(source)))  # one byte each: over the cap
    template = (diskcache._NODE_INDEX[n.Template], 1, 1, [filler])
    key = _forge_entry(cache_dir, source,
                       marshal.dumps((diskcache._MAGIC, _digest(source), template), 2))
    assert diskcache.load(key) is None
    assert mj.chat_environment().from_string(source).render() == "1"


def test_entry_is_bounded_by_its_source_length() -> None:
    # the densest ASTs a source can have stay well under the cap
    for source in ("{{ [" + "1," * 5000 + "] }}", "{{ " + "-" * 400 + "1 }}",
                   "{{ x" + "|e" * 100 + " }}", "{{ a" + ".b" * 400 + " }}",
                   "{% if x %}{% endif %}" * 500, "{{x}}" * 2000):
        data = diskcache.dumps(parser.parse(source))
        assert len(data) <= diskcache.size_cap(len(source))
        assert len(data) < 24 * len(source) + 200, (source[:20], len(data) / len(source))


def test_an_entry_over_its_size_cap_is_not_stored(cache_dir, monkeypatch) -> None:
    # no parse comes near the cap (test_entry_is_bounded_by_its_source_length): with the cap
    # lowered below what this template's entry takes, the store writes nothing load() would
    # refuse, and the next environment parses again
    monkeypatch.setattr(diskcache, "SIZE_SLACK", 0)
    monkeypatch.setattr(diskcache, "SIZE_PER_CHARACTER", 2)
    source = "{{ x }}"
    assert mj.chat_environment().from_string(source).render(x=1) == "1"
    assert not cache_dir.exists() or not _entries(cache_dir)


def test_foreign_or_malformed_keys_are_misses(cache_dir) -> None:
    assert diskcache.load("not-a-key") is None
    assert diskcache.load("ab" * 32 + "-x") is None
    diskcache.store("not-a-key", parser.parse("{{ 1 }}"))
    assert not cache_dir.exists() or not _entries(cache_dir)


def test_sources_beyond_the_stored_size_are_not_stored(cache_dir) -> None:
    source = "{{ x }}" * (diskcache.MAX_STORED_SOURCE // 7 + 1)
    assert mj.chat_environment().from_string(source).render(x=1) == "1" * (len(source) // 7)
    assert not cache_dir.exists() or not _entries(cache_dir)
    small = "{{ x }}"
    mj.chat_environment().from_string(small)
    assert len(_entries(cache_dir)) == 1


# ---- entries holding what the parser never makes -------------------------------------------
def _replaced(encoded, old, new):
    """``encoded`` (nested tuples and lists) with each item equal to ``old``, and of its type,
    replaced by ``new``."""
    if type(encoded) is type(old) and encoded == old:
        return new
    if type(encoded) in (tuple, list):
        return type(encoded)(_replaced(item, old, new) for item in encoded)
    return encoded


def _rewrite_entry(cache_dir, source, change) -> str:
    """Let the engine store ``source``'s entry, then rewrite it as someone able to write the
    file would: ``change`` maps its payload (decoded) to another, which gets a checksum of
    its own; name, digest and marshal format stay. Every check the loader makes of the file
    passes. Returns the entry's key."""
    import marshal

    mj.chat_environment().from_string(source)
    key = _key(source)
    path = cache_dir / key
    entry = marshal.loads(path.read_bytes()[diskcache._HEADER:])
    payload = marshal.dumps(change(entry), diskcache.MARSHAL_VERSION)
    path.write_bytes(diskcache.payload_checksum(payload) + payload)
    return key


#: values marshal stores that no literal is: each would be rendered as it is
FOREIGN_CONSTANTS = {
    "bytes": b"BYTES", "code object": compile("1", "<forged>", "eval"),
    "frozenset": frozenset({"x"}), "complex": 1j, "Ellipsis": ..., "set": {"x"},
    "dict": {"k": "v"}, "list": ["x"], "tuple": (-1, "x"),
}


@pytest.mark.parametrize("value", FOREIGN_CONSTANTS.values(), ids=FOREIGN_CONSTANTS.keys())
def test_constant_of_a_type_no_literal_has_is_a_miss(cache_dir, value) -> None:
    source = "{{ 'hello' }}"
    key = _rewrite_entry(cache_dir, source, lambda entry: _replaced(entry, "hello", value))
    assert diskcache.load(key) is None
    assert mj.chat_environment().from_string(source).render() == "hello"


#: (source, context, a string the parser puts in a field, what replaces it, true output)
FOREIGN_FIELDS = {
    "an int for a name": ("{{ greeting }}", {"greeting": "hello"}, "greeting", 7, "hello"),
    "bytes for template text": ("hello", {}, "hello", b"hello", "hello"),
    "bytes for an attribute": ("{{ x.upper() }}", {"x": "a"}, "upper", b"upper", "A"),
    "bytes for a filter": ("{{ x|upper }}", {"x": "a"}, "upper", b"upper", "A"),
    "bytes for a keyword": ("{{ 'a'|center(width=3) }}", {}, "width", b"width", " a "),
    "an operator the grammar has not": ("{{ 2 * 3 }}", {}, "*", "@", "6"),
    "a pair not marked as one": ("{{ 'a'|center(width=3) }}", {}, -1, 7, " a "),
}


@pytest.mark.parametrize("source, context, old, new, expected", FOREIGN_FIELDS.values(),
                         ids=FOREIGN_FIELDS.keys())
def test_field_of_a_type_the_parser_never_puts_there_is_a_miss(cache_dir, source, context,
                                                               old, new, expected) -> None:
    key = _rewrite_entry(cache_dir, source, lambda entry: _replaced(entry, old, new))
    assert diskcache.load(key) is None
    assert mj.chat_environment().from_string(source).render(**context) == expected


def _nodes(source, change):
    """The AST of ``source``, ``change``d (in place) into one the parser never makes."""
    ast = parser.parse(source, trim_blocks=True, lstrip_blocks=True)
    change(ast)
    return ast


def _set(node, field, value):
    setattr(node, field, value)


#: ASTs the parser never makes, each a template the compiler may still accept
NEVER_PARSED = {
    "a statement among expressions": lambda: _nodes(
        "{{ 1 }}", lambda t: _set(t.body[0], "nodes", [n.Break()])),
    "an expression among statements": lambda: _nodes(
        "{{ 1 }}", lambda t: _set(t, "body", [n.Const("x")])),
    "an assignment target read": lambda: _nodes(
        "{{ 1 }}", lambda t: _set(t.body[0], "nodes", [n.NameTarget("x")])),
    "a slice out of brackets": lambda: _nodes(
        "{{ 1 }}", lambda t: _set(t.body[0], "nodes", [n.Slice(None, None, None)])),
    "a filter of nothing out of a filter block": lambda: _nodes(
        "{{ x|upper }}", lambda t: _set(t.body[0].nodes[0], "node", None)),
    "an expression assigned to": lambda: _nodes(
        "{% set x = 1 %}", lambda t: _set(t.body[0], "target", n.Name("x"))),
    "a namespace attribute as a loop variable": lambda: _nodes(
        "{% for x in y %}{% endfor %}", lambda t: _set(t.body[0], "target", n.NSRef("a", "b"))),
    "an elif that is not an if": lambda: _nodes(
        "{% if a %}{% elif b %}{% endif %}", lambda t: _set(t.body[0], "elif_", [n.Output([])])),
    "a tuple for a constant": lambda: _nodes(
        "{{ 1 }}", lambda t: _set(t.body[0].nodes[0], "value", ("a", "b"))),
    "a string for a boolean": lambda: _nodes(
        "{{ x is not odd }}", lambda t: _set(t.body[0].nodes[0], "negated", "no")),
    "an int for a boolean": lambda: _nodes(
        "{% for x in y recursive %}{% endfor %}", lambda t: _set(t.body[0], "recursive", 1)),
    "a comparison the grammar has not": lambda: _nodes(
        "{{ 1 == 2 }}", lambda t: _set(t.body[0].nodes[0], "ops", [("is", n.Const(2))])),
    "a keyword argument of three": lambda: _nodes(
        "{{ f(a=1) }}", lambda t: _set(t.body[0].nodes[0], "kwargs", [("a", n.Const(1), 2)])),
    "bytes for a line number": lambda: _nodes(
        "{{ 1 }}", lambda t: _set(t.body[0].nodes[0], "lineno", b"1")),
    "a float for a column": lambda: _nodes(
        "{{ 1 }}", lambda t: _set(t.body[0].nodes[0], "column", 4.0)),
    "a tag that loads nothing": lambda: _nodes(
        "{% include 'x' %}", lambda t: _set(t.body[0], "kind", "exec")),
}


@pytest.mark.parametrize("make", NEVER_PARSED.values(), ids=NEVER_PARSED.keys())
def test_what_the_parser_never_makes_is_refused(make) -> None:
    # checked by the loader itself: not left to the compiler (which fails on some of these,
    # and then parses again) nor to the render (which shows what a constant holds)
    assert diskcache.loads(diskcache.dumps(make())) is None


# ---- the directory's bounds -------------------------------------------------------------
def _entries(directory):
    if not os.path.isdir(directory):
        return []
    return sorted(name for name in os.listdir(directory) if diskcache._parse_key(name))


def _store_sources(count, prefix="{{ x }}"):
    """``count`` distinct templates through from_string (each stored), oldest first."""
    keys = []
    for index in range(count):
        source = f"{prefix}{{# {index} #}}"
        before = set(_entries(diskcache.cache_dir()))
        mj.chat_environment().from_string(source)
        (key,) = set(_entries(diskcache.cache_dir())) - before
        keys.append(key)
    return keys


@pytest.fixture()
def no_automatic_prune(monkeypatch):
    monkeypatch.setattr(diskcache, "_one_in", lambda count: False)
    monkeypatch.setattr(diskcache, "PRUNE_AFTER_BYTES", 1 << 60)


def test_prune_removes_the_least_recently_used_entries_down_to_three_quarters(
        cache_dir, monkeypatch, no_automatic_prune) -> None:
    keys = _store_sources(20)
    old = 1_000_000_000  # 2001: older than TOUCH_AFTER, in the order the entries were made
    for age, key in enumerate(keys):
        os.utime(cache_dir / key, (old + age, old + age))
    # the second oldest is used again: a load marks it
    source = "{{ x }}{# 1 #}"
    assert repr(mj.chat_environment().from_string(source).ast) == repr(
        parser.parse(source, trim_blocks=True, lstrip_blocks=True))
    assert os.stat(cache_dir / keys[1]).st_mtime > old + 100
    # what is not an entry of ours is neither counted nor removed
    (cache_dir / "README").write_text("not an entry")
    foreign = cache_dir.parent / "elsewhere"
    foreign.write_text("outside")
    os.symlink(foreign, cache_dir / ("f" * 64 + "-9"))
    stale = cache_dir / f".{keys[0]}.123.tmp"
    fresh = cache_dir / f".{keys[2]}.456.tmp"
    stale.write_bytes(b"half written")
    fresh.write_bytes(b"being written")
    os.utime(stale, (old, old))

    monkeypatch.setattr(diskcache, "MAX_CACHE_ENTRIES", 24)
    assert diskcache.prune() == 1  # within its bounds: only the stale temporary goes
    assert not stale.exists() and fresh.exists() and len(_entries(cache_dir)) == 21

    monkeypatch.setattr(diskcache, "MAX_CACHE_ENTRIES", 8)
    assert diskcache.prune() == 14  # 20 entries (and the link, not ours) -> 6
    left = set(_entries(cache_dir))
    assert left == {keys[1], *keys[-5:], "f" * 64 + "-9"}
    assert (cache_dir / "README").exists() and fresh.exists() and foreign.exists()
    assert os.path.islink(cache_dir / ("f" * 64 + "-9"))


def test_prune_bounds_the_bytes_too(cache_dir, monkeypatch, no_automatic_prune) -> None:
    keys = _store_sources(12, prefix="{% for m in messages %}{{ m.content }}{% endfor %}")
    sizes = {key: os.stat(cache_dir / key).st_size for key in keys}
    for age, key in enumerate(keys):
        os.utime(cache_dir / key, (1_000_000_000 + age,) * 2)
    bound = sum(sizes.values()) // 2
    monkeypatch.setattr(diskcache, "MAX_CACHE_BYTES", bound)
    assert diskcache.prune() > 0
    left = _entries(cache_dir)
    assert sum(sizes[key] for key in left) <= bound * 3 // 4
    assert set(left) == set(keys[len(keys) - len(left):])  # the newest stay


def test_stores_prune_the_directory_by_themselves(cache_dir, monkeypatch) -> None:
    monkeypatch.setattr(diskcache, "MAX_CACHE_ENTRIES", 4)
    # after every byte written...
    monkeypatch.setattr(diskcache, "_one_in", lambda count: False)
    monkeypatch.setattr(diskcache, "PRUNE_AFTER_BYTES", 1)
    for index in range(10):
        mj.chat_environment().from_string(f"{{{{ a }}}}{{# {index} #}}")
        assert len(_entries(cache_dir)) <= 4
    # ...or at random, one store in PRUNE_ONE_IN (here: the draw always wins)
    monkeypatch.setattr(diskcache, "PRUNE_AFTER_BYTES", 1 << 60)
    monkeypatch.setattr(diskcache, "PRUNE_ONE_IN", 7)
    monkeypatch.setattr(diskcache, "_one_in", lambda count: count == 7)
    for index in range(10):
        mj.chat_environment().from_string(f"{{{{ b }}}}{{# {index} #}}")
        assert len(_entries(cache_dir)) <= 4


def test_the_random_prune_is_one_store_in_prune_one_in() -> None:
    draws = sum(diskcache._one_in(32) for _ in range(32_000))
    assert 700 < draws < 1_300  # 1,000 expected (31 standard deviations is 5.4 wide)
    assert diskcache._one_in(1) and not any(diskcache._one_in(512) for _ in range(100))


def test_prune_never_raises(tmp_path) -> None:
    assert diskcache.prune(str(tmp_path / "missing")) == 0
    (tmp_path / "file").write_text("x")
    assert diskcache.prune(str(tmp_path / "file")) == 0


# ---- what the documentation promises, and who may write the cache ---------------------------
#: The bounds docs/security.md and docs/getting-started.md document (copied here, not read from
#: diskcache).
DOCUMENTED = {"MAX_CACHE_ENTRIES": 4096, "MAX_CACHE_BYTES": 64 * 2 ** 20,
              "MAX_STORED_SOURCE": 256_000, "SIZE_PER_CHARACTER": 48, "PRUNE_ONE_IN": 32,
              "STALE_TEMPORARY": 3600, "TOUCH_AFTER": 3600}


def test_the_documented_bounds() -> None:
    assert {name: getattr(diskcache, name) for name in DOCUMENTED} == DOCUMENTED


@pytest.mark.parametrize("mode", [0o770, 0o720, 0o707, 0o702])
def test_a_directory_writable_by_the_group_or_others_is_not_trusted(cache_dir, mode) -> None:
    source = "{{ 1 + 2 }}"
    mj.chat_environment().from_string(source)
    (entry,) = os.listdir(cache_dir)
    assert diskcache.load(entry) is not None
    os.chmod(cache_dir, mode)
    try:
        assert diskcache.load(entry) is None
        assert diskcache.prune() == 0
    finally:
        os.chmod(cache_dir, 0o700)


@pytest.mark.parametrize("mode", [0o620, 0o602])
def test_an_entry_writable_by_the_group_or_others_is_neither_used_nor_removed(
        cache_dir, monkeypatch, mode) -> None:
    source = "{{ 1 + 3 }}"
    mj.chat_environment().from_string(source)
    (entry,) = os.listdir(cache_dir)
    os.chmod(cache_dir / entry, mode)
    assert diskcache.load(entry) is None
    monkeypatch.setattr(diskcache, "MAX_CACHE_ENTRIES", 0)
    assert diskcache.prune() == 0 and (cache_dir / entry).exists()


def test_an_entry_that_is_a_symbolic_link_is_not_followed(cache_dir) -> None:
    source = "{{ 1 + 4 }}"
    mj.chat_environment().from_string(source)
    (entry,) = os.listdir(cache_dir)
    real = cache_dir.parent / "real-entry"
    os.rename(cache_dir / entry, real)
    os.symlink(real, cache_dir / entry)
    assert diskcache.load(entry) is None


def test_the_cache_directory_is_made_private_whatever_the_umask(cache_dir) -> None:
    previous = os.umask(0)
    try:
        mj.chat_environment().from_string("{{ 1 + 5 }}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o700
    assert len(os.listdir(cache_dir)) == 1


def test_a_name_with_other_digits_is_not_an_entry(cache_dir, monkeypatch) -> None:
    """Only names diskcache.entry_key makes are entries: hex digest, '-', ASCII digits
    (str.isdigit also takes '٣', which int() reads as 3)."""
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o700)
    name = "ab" * 32 + "-\u0663"
    (cache_dir / name).write_bytes(b"x")
    assert diskcache._parse_key(name) is None
    assert diskcache.load(name) is None
    monkeypatch.setattr(diskcache, "MAX_CACHE_ENTRIES", 0)
    diskcache.prune()
    assert (cache_dir / name).exists()


def test_a_read_marks_an_entry_used_at_most_hourly(cache_dir) -> None:
    source = "{{ 1 + 6 }}"
    mj.chat_environment().from_string(source)
    (entry,) = os.listdir(cache_dir)
    path = cache_dir / entry
    now = diskcache._now()
    for age, touched in ((30 * 60, False), (2 * 3600, True)):
        os.utime(path, (now - age, now - age))
        assert diskcache.load(entry) is not None
        assert (os.stat(path).st_mtime > now - 60) is touched, age


def test_a_temporary_is_removed_after_an_hour_not_before(cache_dir, monkeypatch) -> None:
    mj.chat_environment().from_string("{{ 1 + 7 }}")
    now = diskcache._now()
    temporaries = {}
    for age in (30 * 60, 59 * 60, 61 * 60, 5 * 3600):
        path = cache_dir / f".{'cd' * 32}-9.{age}.tmp"
        path.write_bytes(b"half written")
        os.chmod(path, 0o600)
        os.utime(path, (now - age, now - age))
        temporaries[age] = path
    assert diskcache.prune() == 2
    assert {age for age, path in temporaries.items() if path.exists()} == {30 * 60, 59 * 60}


def test_a_compiler_error_on_a_cached_ast_is_not_retried_as_cache_damage(
        cache_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the cache loads is checked node by node, so an exception while compiling it is
    the compiler's: raised, not hidden by parsing again without the cache."""
    from minijinja_py import environment

    source = "{% for m in messages %}{{ m }}{% endfor %}"
    mj.Environment().from_string(source)  # the AST is now on disk
    original = environment.Compiler.compile_template
    calls = []

    def failing_once(self: Any, ast: Any) -> Any:
        calls.append(ast)
        if len(calls) == 1:
            raise RuntimeError("a compiler bug")
        return original(self, ast)

    monkeypatch.setattr(environment.Compiler, "compile_template", failing_once)
    with pytest.raises(RuntimeError, match="a compiler bug"):
        mj.Environment().from_string(source)
    assert len(calls) == 1

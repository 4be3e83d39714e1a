"""The persistent parse cache: exact round trips, atomic private files, corruption ignored."""

from __future__ import annotations

import os
import stat

import pytest

import minijinja_py as mj
from minijinja_py import diskcache, parser
from minijinja_py import nodes as n

from corpus_support import CORPUS, corpus_available, template_source


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


def test_every_corpus_ast_survives_a_round_trip() -> None:
    for source in _corpus_sources():
        ast = parser.parse(source, trim_blocks=True, lstrip_blocks=True)
        assert repr(diskcache.loads(diskcache.dumps(ast))) == repr(ast)


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
    env = mj.chat_environment()
    return diskcache.entry_key(source, (env.trim_blocks, env.lstrip_blocks,
                                        env.keep_trailing_newline, env.limits.max_nesting),
                               mj.environment._engine_id())


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


def test_payload_whose_references_expand_exponentially_is_refused_quickly(cache_dir) -> None:
    import marshal
    import time

    # 2**60 leaves behind a few hundred bytes: marshal format 4 shares objects (FLAG_REF)
    leaf = (diskcache._NODE_INDEX[n.Const], 1, 1, "x")
    shared = [leaf, leaf]
    for _ in range(60):
        shared = [shared, shared]
    template = (diskcache._NODE_INDEX[n.Template], 1, 1,
                [(diskcache._NODE_INDEX[n.Output], 1, 1, shared)])
    source = "{{ 'fine' }}"
    payload = marshal.dumps((diskcache._MAGIC, _digest(source), template), 4)
    assert len(payload) < 1000
    key = _forge_entry(cache_dir, source, payload)
    start = time.perf_counter()
    assert diskcache.load(key) is None
    assert mj.chat_environment().from_string(source).render() == "fine"
    assert time.perf_counter() - start < 1.0


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

"""The persistent parse cache: exact round trips, atomic private files, corruption ignored."""

from __future__ import annotations

import os
import stat

import pytest

import minijinja_py as mj
from minijinja_py import diskcache, parser

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

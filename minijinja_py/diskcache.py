"""Persistent parse cache: parsed templates survive the process, so a cold start skips parsing.

Each entry is one file in the user's cache directory (``$MINIJINJA_PY_CACHE_DIR``, else
``$XDG_CACHE_HOME/minijinja_py``, else ``~/.cache/minijinja_py``), named by a BLAKE2 hash of
the engine version, the grammar, the parse options and the source. The AST is stored as
nested tuples with :mod:`marshal` (no pickle: loading never runs code), behind a CRC so that a
truncated or corrupted file is ignored, and only from a directory and file owned by the
current user that nobody else can write. Files are written atomically (temp file + rename).

Opt out with ``Environment(parse_cache=False)`` or ``MINIJINJA_PY_CACHE=0``. Any problem with
the cache (unwritable directory, full disk, foreign file) silently falls back to parsing.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import zlib

from . import nodes as n

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Optional, Tuple

FORMAT = 1
_NODE_TYPES = sorted((cls for cls in vars(n).values()
                      if isinstance(cls, type) and issubclass(cls, n.Node) and cls is not n.Node),
                     key=lambda cls: cls.__name__)
_NODE_INDEX = {cls: index for index, cls in enumerate(_NODE_TYPES)}
_NODE_TAG = "\x00node"  # marks an encoded node; a template string can never be this tuple tag


def enabled() -> bool:
    return os.environ.get("MINIJINJA_PY_CACHE", "1").lower() not in ("0", "false", "no", "off")


def cache_dir() -> str:
    explicit = os.environ.get("MINIJINJA_PY_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "minijinja_py")


def entry_key(source: str, options: "Tuple[Any, ...]", engine: str) -> str:
    try:
        from _blake2 import blake2b  # the C module itself: hashlib would load OpenSSL
    except ImportError:  # pragma: no cover - other interpreters
        from hashlib import blake2b
    digest = blake2b(digest_size=20)
    digest.update(repr((FORMAT, engine, options, sys.version_info[:2])).encode())
    digest.update(b"\x00")
    digest.update(source.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


# ---- AST <-> tuples -------------------------------------------------------------------------
def _encode(value: "Any") -> "Any":
    if isinstance(value, n.Node):
        return (_NODE_TAG, _NODE_INDEX[type(value)], value.lineno, value.column,
                tuple(_encode(getattr(value, field)) for field in value.fields))
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_encode(item) for item in value)
    if isinstance(value, str) and type(value) is not str:
        return str(value)  # parser tokens kept inside Compare ops
    return value


def _decode(value: "Any") -> "Any":
    if isinstance(value, tuple):
        if len(value) == 5 and value[0] == _NODE_TAG:
            cls = _NODE_TYPES[value[1]]
            return cls(*[_decode(item) for item in value[4]], lineno=value[2], column=value[3])
        return tuple(_decode(item) for item in value)
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def dumps(template: n.Template) -> bytes:
    payload = marshal.dumps(_encode(template))
    return zlib.crc32(payload).to_bytes(4, "big") + payload


def loads(data: bytes) -> "Optional[n.Template]":
    if len(data) < 5 or int.from_bytes(data[:4], "big") != zlib.crc32(data[4:]):
        return None
    try:
        template = _decode(marshal.loads(data[4:]))
    except Exception:  # any malformed entry is a cache miss, never an error
        return None
    return template if isinstance(template, n.Template) else None


# ---- files ----------------------------------------------------------------------------------
def _private(info: "os.stat_result") -> bool:
    """Owned by us and writable by nobody else: safe to trust what it holds."""
    getuid = getattr(os, "getuid", None)
    if getuid is not None and info.st_uid != getuid():
        return False
    return not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(key: str) -> "Optional[n.Template]":
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
        if not stat.S_ISREG(info.st_mode) or not _private(info) or info.st_size > 256 << 20:
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read()
    except OSError:
        return None
    finally:
        if fd != -1:
            os.close(fd)
    return loads(data)


def store(key: str, template: n.Template) -> None:
    directory = cache_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not _private(os.stat(directory)):
            return
        data = dumps(template)
        temporary = os.path.join(directory, f".{key}.{os.getpid()}.tmp")
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

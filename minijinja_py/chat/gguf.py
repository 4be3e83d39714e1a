"""Read the metadata of a GGUF model file (llama.cpp's format), standard library only.

Only the header and the key/value section are read: the chat template
(``tokenizer.chat_template``, and named ones under ``tokenizer.chat_template.<name>``) and the
special tokens (``tokenizer.ggml.tokens`` indexed by ``tokenizer.ggml.bos_token_id`` and friends).
Tensor descriptions and tensor data are never read.

GGUF versions 2 and 3 are supported, little- and big-endian. A GGUF file is untrusted input: every
count and length read from it is checked against the bytes that remain in the file (and against
fixed caps) before anything is allocated, so a truncated or corrupt file raises :class:`GGUFError`
(naming the file and the offset of the problem) instead of exhausting memory. Only regular files
are opened (a FIFO or device is refused from stat(), and opened non-blocking should it appear in
between). Arrays that are not needed are stepped over without building anything; arrays of arrays
nest at most ``MAX_ARRAY_DEPTH`` deep and, like strings inside arrays, are counted over the whole
file against a cap (``MAX_NESTED_ARRAYS``, ``MAX_ARRAY_STRINGS``), so reading the metadata takes
time linear in its bytes and bounded overall.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .files import file_kind

__all__ = ["GGUFError", "GGUFArray", "GGUFChatInfo", "read_gguf_metadata", "read_gguf_chat_info",
           "is_gguf_file"]

MAGIC = b"GGUF"

# value type codes of the GGUF spec -> (struct format, size)
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = range(10)
_UINT64, _INT64, _FLOAT64 = 10, 11, 12
_SCALARS: Dict[int, Tuple[str, int]] = {
    _UINT8: ("B", 1), _INT8: ("b", 1), _UINT16: ("H", 2), _INT16: ("h", 2),
    _UINT32: ("I", 4), _INT32: ("i", 4), _FLOAT32: ("f", 4), _BOOL: ("?", 1),
    _UINT64: ("Q", 8), _INT64: ("q", 8), _FLOAT64: ("d", 8),
}
_TYPE_NAMES = {_UINT8: "uint8", _INT8: "int8", _UINT16: "uint16", _INT16: "int16",
               _UINT32: "uint32", _INT32: "int32", _FLOAT32: "float32", _BOOL: "bool",
               _STRING: "string", _ARRAY: "array", _UINT64: "uint64", _INT64: "int64",
               _FLOAT64: "float64"}

# Caps that hold for any real model file; they keep a corrupt header from asking for absurd sizes.
MAX_KEY_LENGTH = 65_536
MAX_STRING_LENGTH = 64 * 1024 * 1024
MAX_KV_COUNT = 1_000_000
MAX_ARRAY_ITEMS = 16_000_000
MAX_ARRAY_DEPTH = 8
# Arrays inside arrays, counted over the whole file: real model files have none, and each costs a
# header read, so a file of millions of tiny nested arrays is refused instead of walked.
MAX_NESTED_ARRAYS = 1_000_000
# Strings inside arrays, counted over the whole file: each costs a step of a Python loop (about
# 0.3 us), so this bounds the time spent on string arrays. Real files hold one or two vocabularies
# (tokens and merges, a few hundred thousand strings each).
MAX_ARRAY_STRINGS = 8_000_000

# Special-token attributes and the GGUF keys holding their ids (both spellings of "separator").
SPECIAL_TOKEN_IDS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("bos_token", ("tokenizer.ggml.bos_token_id",)),
    ("eos_token", ("tokenizer.ggml.eos_token_id",)),
    ("unk_token", ("tokenizer.ggml.unknown_token_id",)),
    ("sep_token", ("tokenizer.ggml.separator_token_id", "tokenizer.ggml.seperator_token_id")),
    ("pad_token", ("tokenizer.ggml.padding_token_id",)),
    ("cls_token", ("tokenizer.ggml.cls_token_id",)),
    ("mask_token", ("tokenizer.ggml.mask_token_id",)),
)
TOKENS_KEY = "tokenizer.ggml.tokens"
TEMPLATE_KEY = "tokenizer.chat_template"


class GGUFError(ValueError):
    """The file is not a GGUF file, uses an unsupported version, or is truncated/corrupt."""


@dataclass(frozen=True)
class GGUFArray:
    """An array value that was skipped rather than loaded: its element type and length."""

    item_type: str
    count: int


@dataclass(frozen=True)
class GGUFChatInfo:
    """What a GGUF file says about chat: its template(s) and special token strings.

    ``templates`` maps a name to a template source: ``"default"`` for
    ``tokenizer.chat_template`` and ``<name>`` for ``tokenizer.chat_template.<name>``.
    """

    version: int
    templates: Dict[str, str]
    special_tokens: Dict[str, str]




# O_NONBLOCK: should the path turn into a FIFO between the stat and the open, opening it still
# returns at once (and fstat then refuses it) instead of waiting for a writer.
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_BINARY", 0))


def _open_regular(path: Union[str, "os.PathLike[str]"]) -> Tuple[int, int]:
    """Open a regular file for reading without ever blocking: ``(fd, size)``.

    FIFOs, devices, sockets and directories are refused from a stat() before anything is
    opened, and again from fstat() of what was opened."""
    status = os.stat(path)
    if not stat.S_ISREG(status.st_mode):
        raise GGUFError(f"{os.fspath(path)}: not a regular file ({file_kind(status.st_mode)}); "
                        "refusing to read it")
    fd = os.open(path, _OPEN_FLAGS)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise GGUFError(f"{os.fspath(path)}: not a regular file "
                            f"({file_kind(status.st_mode)}); refusing to read it")
    except BaseException:
        os.close(fd)
        raise
    return fd, status.st_size


def is_gguf_file(path: Union[str, "os.PathLike[str]"]) -> bool:
    """True when ``path`` is a regular file starting with the GGUF magic bytes (never blocks on
    a FIFO or device: those are not GGUF files)."""
    try:
        fd, size = _open_regular(path)
    except (OSError, GGUFError):
        return False
    try:
        return size >= 4 and os.read(fd, 4) == MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


class _Reader:
    """Bounded reads from a memory-mapped file: only the pages holding what is read are ever
    loaded, and nothing is allocated beyond what the file holds."""

    def __init__(self, buffer: Any, size: int) -> None:
        self.buffer = buffer
        self.size = size
        self.pos = 0
        self.order = "<"
        self._u32 = struct.Struct("<I")
        self._u64 = struct.Struct("<Q")
        self._array_header = struct.Struct("<IQ")
        # arrays met inside arrays and strings met inside arrays so far (see MAX_NESTED_ARRAYS,
        # MAX_ARRAY_STRINGS)
        self.nested_arrays = 0
        self.array_strings = 0

    def set_order(self, order: str) -> None:
        self.order = order
        self._u32 = struct.Struct(order + "I")
        self._u64 = struct.Struct(order + "Q")
        self._array_header = struct.Struct(order + "IQ")

    def fail(self, message: str, offset: Optional[int] = None) -> GGUFError:
        where = self.pos if offset is None else offset
        return GGUFError(f"corrupt GGUF file: {message} (at byte {where:,} of {self.size:,})")

    def need(self, count: int, what: str) -> None:
        if count > self.size - self.pos:
            raise self.fail(f"{what} needs {count:,} bytes but only {self.size - self.pos:,} "
                            "remain")

    def read(self, count: int, what: str) -> bytes:
        self.need(count, what)
        data = self.buffer[self.pos:self.pos + count]
        self.pos += count
        return data

    def skip(self, count: int, what: str) -> None:
        self.need(count, what)
        self.pos += count

    def scalar(self, code: int, what: str) -> Any:
        fmt, size = _SCALARS[code]
        self.need(size, what)
        value = struct.unpack_from(self.order + fmt, self.buffer, self.pos)[0]
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        self.need(4, what)
        value = self._u32.unpack_from(self.buffer, self.pos)[0]
        self.pos += 4
        return value

    def u64(self, what: str) -> int:
        self.need(8, what)
        value = self._u64.unpack_from(self.buffer, self.pos)[0]
        self.pos += 8
        return value

    def string_length(self, what: str, cap: int) -> int:
        """Read a string's length and check it against ``cap`` and the bytes that remain."""
        start = self.pos
        length = self.u64(f"the length of {what}")
        if length > cap:
            raise self.fail(f"{what} claims {length:,} bytes (more than the {cap:,} allowed)",
                            start)
        if length > self.size - self.pos:
            raise self.fail(f"{what} claims {length:,} bytes but only {self.size - self.pos:,} "
                            "remain", start)
        return length

    def string(self, what: str, cap: int = MAX_STRING_LENGTH) -> str:
        start = self.pos
        length = self.string_length(what, cap)
        data = self.buffer[self.pos:self.pos + length]
        self.pos += length
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{what} is not valid UTF-8 ({exc.reason})", start) from None

    def skip_string(self, what: str) -> None:
        """Step over a string without copying it out of the file."""
        length = self.string_length(what, MAX_STRING_LENGTH)
        self.pos += length

    def strings(self, count: int, what: str, load: bool,
                checkpoints: Optional[List[int]] = None) -> Optional[list]:
        """``count`` strings in a row (token lists have 100k+): one tight loop.

        Skipped strings are never copied; with ``checkpoints`` the offset of every
        ``_CHECKPOINT_EVERY``-th string is recorded, so that one can be found again quickly.
        """
        self.array_strings += count
        if self.array_strings > MAX_ARRAY_STRINGS:
            raise self.fail(f"{what} brings the strings held in arrays to more than "
                            f"{MAX_ARRAY_STRINGS:,} (real model files hold about a million)")
        buffer, size, pos = self.buffer, self.size, self.pos
        unpack = self._u64.unpack_from
        items: Optional[list] = [] if load else None
        for index in range(count):
            if checkpoints is not None and not index % _CHECKPOINT_EVERY:
                checkpoints.append(pos)
            if size - pos < 8:
                self.pos = pos
                raise self.fail(f"the file ends inside {what} (item {index})")
            length = unpack(buffer, pos)[0]
            if length > MAX_STRING_LENGTH or length > size - pos - 8:
                self.pos = pos
                raise self.fail(f"item {index} of {what} claims {length:,} bytes, more than "
                                "the file holds")
            pos += 8
            if items is not None:
                try:
                    items.append(str(buffer[pos:pos + length], "utf-8"))
                except UnicodeDecodeError as exc:
                    self.pos = pos
                    raise self.fail(f"item {index} of {what} is not valid UTF-8 "
                                    f"({exc.reason})") from None
            pos += length
        self.pos = pos
        return items

    def string_at(self, index: int, checkpoints: List[int], what: str) -> str:
        """Item ``index`` of a string array already walked by :meth:`strings` (with
        ``checkpoints``), which checked every length against the file's size."""
        pos = checkpoints[index // _CHECKPOINT_EVERY]
        unpack = self._u64.unpack_from
        for _ in range(index % _CHECKPOINT_EVERY):
            pos += 8 + unpack(self.buffer, pos)[0]
        saved, self.pos = self.pos, pos
        try:
            return self.string(f"item {index} of {what}")
        finally:
            self.pos = saved

    def array_header(self, what: str) -> Tuple[int, int]:
        """An array's item type and length, checked: the length must fit in the bytes left."""
        self.need(12, f"the header of {what}")
        item_code, count = self._array_header.unpack_from(self.buffer, self.pos)
        if item_code not in _TYPE_NAMES:
            raise self.fail(f"{what}'s items have unknown value type {item_code}")
        start = self.pos + 4
        self.pos += 12
        smallest = _SCALARS[item_code][1] if item_code in _SCALARS else \
            8 if item_code == _STRING else 12
        if count > MAX_ARRAY_ITEMS or count * smallest > self.size - self.pos:
            raise self.fail(f"{what} claims {count:,} items, more than the file can hold", start)
        return item_code, count


# Every this many items of a skipped string array the offset is noted (token lookups).
_CHECKPOINT_EVERY = 256


def _check_type(reader: _Reader, code: int, what: str) -> None:
    if code not in _TYPE_NAMES:
        raise reader.fail(f"{what} has unknown value type {code}", reader.pos - 4)


def _count_nested(reader: _Reader, count: int, what: str) -> None:
    reader.nested_arrays += count
    if reader.nested_arrays > MAX_NESTED_ARRAYS:
        raise reader.fail(f"{what} holds arrays of arrays with more than {MAX_NESTED_ARRAYS:,} "
                          "arrays in all (real model files have none)")


def _skip_items(reader: _Reader, item_code: int, count: int, what: str, depth: int) -> None:
    """Step over ``count`` items of one type without building anything: time linear in the
    bytes stepped over, memory constant."""
    if item_code in _SCALARS:
        reader.skip(count * _SCALARS[item_code][1], what)
    elif item_code == _STRING:
        reader.strings(count, what, False)
    else:
        if depth + 1 >= MAX_ARRAY_DEPTH:
            raise reader.fail(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")
        _count_nested(reader, count, what)
        inner = f"an item of {what}"
        for _ in range(count):
            inner_code, inner_count = reader.array_header(inner)
            if inner_count:
                _skip_items(reader, inner_code, inner_count, inner, depth + 1)


def _load_items(reader: _Reader, item_code: int, count: int, what: str, depth: int) -> list:
    if item_code in _SCALARS:
        fmt, size = _SCALARS[item_code]
        reader.need(count * size, what)
        values = struct.unpack_from(f"{reader.order}{count}{fmt}", reader.buffer, reader.pos)
        reader.pos += count * size
        return list(values)
    if item_code == _STRING:
        return reader.strings(count, what, True) or []
    if depth + 1 >= MAX_ARRAY_DEPTH:
        raise reader.fail(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")
    _count_nested(reader, count, what)
    inner = f"an item of {what}"
    nested = []
    for _ in range(count):
        inner_code, inner_count = reader.array_header(inner)
        nested.append(_load_items(reader, inner_code, inner_count, inner, depth + 1))
    return nested


def _read_value(reader: _Reader, code: int, what: str, load_arrays: bool) -> Any:
    if code == _STRING:
        return reader.string(what)
    if code != _ARRAY:
        return reader.scalar(code, what)
    item_code, count = reader.array_header(what)
    if load_arrays:
        return _load_items(reader, item_code, count, what, 0)
    _skip_items(reader, item_code, count, what, 0)
    return GGUFArray(_TYPE_NAMES[item_code], count)


def _skip_value(reader: _Reader, code: int, what: str) -> None:
    if code == _STRING:
        reader.skip_string(what)
    elif code == _ARRAY:
        item_code, count = reader.array_header(what)
        _skip_items(reader, item_code, count, what, 0)
    else:
        reader.skip(_SCALARS[code][1], what)


def _read_header(reader: _Reader) -> Tuple[int, int]:
    magic = bytes(reader.buffer[:4]) if reader.size >= 4 else b""
    if magic != MAGIC:
        raise GGUFError(f"not a GGUF file (it starts with {magic!r}, not {MAGIC!r})")
    reader.pos = 4
    raw = reader.read(4, "the version")
    version = struct.unpack("<I", raw)[0]
    if version not in (2, 3) and struct.unpack(">I", raw)[0] in (2, 3):
        reader.set_order(">")  # big-endian files (GGUF v3 allows them)
        version = struct.unpack(">I", raw)[0]
    if version not in (2, 3):
        raise GGUFError(f"unsupported GGUF version {version} (versions 2 and 3 are read)")
    reader.u64("the tensor count")  # tensors are never read
    start = reader.pos
    kv_count = reader.u64("the metadata count")
    # each entry needs at least a key length (8), a type (4) and a one-byte value
    if kv_count > MAX_KV_COUNT or kv_count * 13 > reader.size - reader.pos:
        raise reader.fail(f"the header claims {kv_count:,} metadata entries, more than the file"
                          " can hold", start)
    return version, kv_count


def _with_reader(path: Union[str, "os.PathLike[str]"], read: Callable[[_Reader], Any]) -> Any:
    """Map ``path`` (a regular file only) and run ``read`` on it; every GGUFError names the
    file."""
    name = os.fspath(path)
    try:
        fd, size = _open_regular(path)
        try:
            if size < 4:
                raise GGUFError(f"not a GGUF file ({size} bytes long)")
            try:
                mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise GGUFError(f"cannot map the file for reading: {exc}") from None
        finally:
            os.close(fd)  # the mapping stays valid without the descriptor
        try:
            # slicing an mmap copies out bytes (no buffer stays exported), so close() is safe
            return read(_Reader(mapped, size))
        finally:
            mapped.close()
    except GGUFError as exc:
        message = str(exc)
        if message.startswith(name + ": "):
            raise
        raise GGUFError(f"{name}: {message}") from None


def read_gguf_metadata(path: Union[str, "os.PathLike[str]"],
                       load_array: Optional[Callable[[str], bool]] = None
                       ) -> Tuple[int, Dict[str, Any]]:
    """Read a GGUF file's metadata: ``(version, {key: value})``.

    Scalars and strings are returned as Python values. Arrays are loaded as lists only for keys
    where ``load_array(key)`` is true (by default none); other arrays are skipped over (in time
    linear in their bytes, building nothing) and returned as :class:`GGUFArray` (type and
    length). Raises :class:`GGUFError` (naming the file) for anything that is not a well-formed
    GGUF v2/v3 header or not a regular file, and OSError when the file cannot be read.
    """
    def read(reader: _Reader) -> Tuple[int, Dict[str, Any]]:
        version, kv_count = _read_header(reader)
        metadata: Dict[str, Any] = {}
        for index in range(kv_count):
            key = reader.string(f"the key of metadata entry {index}", MAX_KEY_LENGTH)
            code = reader.u32(f"the value type of {key!r}")
            _check_type(reader, code, repr(key))
            wanted = load_array is not None and load_array(key)
            metadata[key] = _read_value(reader, code, repr(key), wanted)
        return version, metadata

    return _with_reader(path, read)


_TOKEN_ID_KEYS = frozenset(key for _, keys in SPECIAL_TOKEN_IDS for key in keys)


def read_gguf_chat_info(path: Union[str, "os.PathLike[str]"]) -> GGUFChatInfo:
    """The chat template(s) and special token strings stored in a GGUF file.

    Only what is needed is copied out of the file: the template strings (at most
    ``MAX_STRING_LENGTH`` bytes together), the special-token ids, and the few token strings
    they point at; everything else is stepped over.
    """
    prefix = TEMPLATE_KEY + "."

    def read(reader: _Reader) -> GGUFChatInfo:
        version, kv_count = _read_header(reader)
        templates: Dict[str, str] = {}
        template_bytes = 0
        ids: Dict[str, Any] = {}
        tokens: Optional[Tuple[int, List[int]]] = None  # (count, checkpoints)
        for index in range(kv_count):
            key = reader.string(f"the key of metadata entry {index}", MAX_KEY_LENGTH)
            code = reader.u32(f"the value type of {key!r}")
            _check_type(reader, code, repr(key))
            what = repr(key)
            if code == _STRING and (key == TEMPLATE_KEY
                                    or (key.startswith(prefix) and len(key) > len(prefix))):
                start = reader.pos
                value = reader.string(what)
                template_bytes += reader.pos - start - 8
                if template_bytes > MAX_STRING_LENGTH:
                    raise reader.fail(f"the chat templates add up to more than "
                                      f"{MAX_STRING_LENGTH:,} bytes", start)
                templates["default" if key == TEMPLATE_KEY else key[len(prefix):]] = value
            elif key in _TOKEN_ID_KEYS and code in _SCALARS:
                ids[key] = reader.scalar(code, what)
            elif key == TOKENS_KEY and code == _ARRAY:
                item_code, count = reader.array_header(what)
                if item_code == _STRING:
                    checkpoints: List[int] = []
                    reader.strings(count, what, False, checkpoints)
                    tokens = (count, checkpoints)
                else:
                    _skip_items(reader, item_code, count, what, 0)
                    tokens = None
            else:
                _skip_value(reader, code, what)

        special: Dict[str, str] = {}
        if tokens is not None:
            count, checkpoints = tokens
            for attribute, keys in SPECIAL_TOKEN_IDS:
                for key in keys:
                    token_id = ids.get(key)
                    if isinstance(token_id, int) and not isinstance(token_id, bool) \
                            and 0 <= token_id < count:
                        special[attribute] = reader.string_at(token_id, checkpoints,
                                                              repr(TOKENS_KEY))
                        break
        return GGUFChatInfo(version=version, templates=templates, special_tokens=special)

    return _with_reader(path, read)

"""Read the metadata of a GGUF model file (llama.cpp's format), standard library only.

Only the header and the key/value section are read: the chat template
(``tokenizer.chat_template``, and named ones under ``tokenizer.chat_template.<name>``) and the
special tokens (``tokenizer.ggml.tokens`` indexed by ``tokenizer.ggml.bos_token_id`` and friends).
Tensor descriptions and tensor data are never read.

GGUF versions 2 and 3 are supported, little- and big-endian. A GGUF file is untrusted input: every
count and length read from it is checked against the bytes that remain in the file (and against
fixed caps) before anything is allocated, so a truncated or corrupt file raises :class:`GGUFError`
with the offset of the problem instead of exhausting memory.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple, Union

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


def is_gguf_file(path: Union[str, "os.PathLike[str]"]) -> bool:
    """True when the file starts with the GGUF magic bytes."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


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

    def set_order(self, order: str) -> None:
        self.order = order
        self._u32 = struct.Struct(order + "I")
        self._u64 = struct.Struct(order + "Q")

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

    def string(self, what: str, cap: int = MAX_STRING_LENGTH) -> str:
        start = self.pos
        length = self.u64(f"the length of {what}")
        if length > cap:
            raise self.fail(f"{what} claims {length:,} bytes (more than the {cap:,} allowed)",
                            start)
        if length > self.size - self.pos:
            raise self.fail(f"{what} claims {length:,} bytes but only {self.size - self.pos:,} "
                            "remain", start)
        data = self.buffer[self.pos:self.pos + length]
        self.pos += length
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{what} is not valid UTF-8 ({exc.reason})", start) from None

    def strings(self, count: int, what: str, load: bool) -> Optional[list]:
        """``count`` strings in a row (token lists have 100k+): one tight loop."""
        buffer, size, pos = self.buffer, self.size, self.pos
        unpack = self._u64.unpack_from
        items: Optional[list] = [] if load else None
        for index in range(count):
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


def _check_type(reader: _Reader, code: int, what: str) -> None:
    if code not in _TYPE_NAMES:
        raise reader.fail(f"{what} has unknown value type {code}", reader.pos - 4)


def _read_value(reader: _Reader, code: int, what: str, load_arrays: bool, depth: int = 0) -> Any:
    if code == _STRING:
        return reader.string(what)
    if code != _ARRAY:
        return reader.scalar(code, what)
    if depth >= MAX_ARRAY_DEPTH:
        raise reader.fail(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")
    item_code = reader.u32(f"the item type of {what}")
    _check_type(reader, item_code, f"{what}'s items")
    start = reader.pos
    count = reader.u64(f"the length of {what}")
    smallest = _SCALARS[item_code][1] if item_code in _SCALARS else 8 if item_code == _STRING else 12
    if count > MAX_ARRAY_ITEMS or count * smallest > reader.size - reader.pos:
        raise reader.fail(f"{what} claims {count:,} items, more than the file can hold", start)
    if item_code in _SCALARS:
        fmt, size = _SCALARS[item_code]
        if not load_arrays:
            reader.skip(count * size, what)
            return GGUFArray(_TYPE_NAMES[item_code], count)
        values = struct.unpack_from(f"{reader.order}{count}{fmt}", reader.buffer, reader.pos)
        reader.pos += count * size
        return list(values)
    if item_code == _STRING:
        items = reader.strings(count, what, load_arrays)
        return items if load_arrays else GGUFArray("string", count)
    nested = [_read_value(reader, item_code, f"an item of {what}", load_arrays, depth + 1)
              for _ in range(count)]
    return nested if load_arrays else GGUFArray(_TYPE_NAMES[item_code], count)


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


def read_gguf_metadata(path: Union[str, "os.PathLike[str]"],
                       load_array: Optional[Callable[[str], bool]] = None
                       ) -> Tuple[int, Dict[str, Any]]:
    """Read a GGUF file's metadata: ``(version, {key: value})``.

    Scalars and strings are returned as Python values. Arrays are loaded as lists only for keys
    where ``load_array(key)`` is true (by default none); other arrays are skipped over and
    returned as :class:`GGUFArray` (type and length). Raises :class:`GGUFError` for anything that
    is not a well-formed GGUF v2/v3 header, and OSError when the file cannot be read.
    """
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 4:
            raise GGUFError(f"not a GGUF file ({size} bytes long)")
        try:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise GGUFError(f"cannot map {os.fspath(path)!r} for reading: {exc}") from None
        try:
            # slicing an mmap copies out bytes (no buffer stays exported), so close() is safe
            reader = _Reader(mapped, size)
            version, kv_count = _read_header(reader)
            metadata: Dict[str, Any] = {}
            for index in range(kv_count):
                key = reader.string(f"the key of metadata entry {index}", MAX_KEY_LENGTH)
                code = reader.u32(f"the value type of {key!r}")
                _check_type(reader, code, repr(key))
                wanted = load_array is not None and load_array(key)
                metadata[key] = _read_value(reader, code, repr(key), wanted)
        finally:
            mapped.close()
    return version, metadata


def read_gguf_chat_info(path: Union[str, "os.PathLike[str]"]) -> GGUFChatInfo:
    """The chat template(s) and special token strings stored in a GGUF file."""
    version, metadata = read_gguf_metadata(path, load_array=lambda key: key == TOKENS_KEY)
    templates: Dict[str, str] = {}
    if isinstance(metadata.get(TEMPLATE_KEY), str):
        templates["default"] = metadata[TEMPLATE_KEY]
    prefix = TEMPLATE_KEY + "."
    for key, value in metadata.items():
        if key.startswith(prefix) and isinstance(value, str) and len(key) > len(prefix):
            templates[key[len(prefix):]] = value

    tokens = metadata.get(TOKENS_KEY)
    special: Dict[str, str] = {}
    if isinstance(tokens, list):
        for attribute, keys in SPECIAL_TOKEN_IDS:
            for key in keys:
                token_id = metadata.get(key)
                if isinstance(token_id, int) and not isinstance(token_id, bool) \
                        and 0 <= token_id < len(tokens) and isinstance(tokens[token_id], str):
                    special[attribute] = tokens[token_id]
                    break
    return GGUFChatInfo(version=version, templates=templates, special_tokens=special)


"""Reading rows and writing results for ``minijinja-py dataset``, a bounded piece at a time.

Inputs: JSON Lines (``.jsonl``, ``.ndjson``; ``.gz`` too), JSON (``.json``: an array of row
objects, parsed incrementally, or JSON Lines as ``datasets`` reads them) and Parquet
(``.parquet``, ``.pq``, read record batch by record batch). An input is a file, a folder (every
file with one of those suffixes under it, recursively, in path order; names starting with ``.``
or ``_`` are skipped) or a glob. Each reader yields :class:`Chunk` objects of at most
``batch_size`` rows together with the position after them, so a resumed run starts reading
right there: a byte offset for JSON Lines, a row count for JSON arrays and Parquet.

Outputs: JSON Lines are appended to one file whose length the checkpoint records; Parquet is
written as one part file per batch and merged into a single file at the end (a Parquet file
cannot be appended to after a crash), the parts' schemas unified.

pyarrow is an optional extra, imported only for Parquet (:func:`import_pyarrow`).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import glob
import gzip
import io
import json
import os
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Dict, Iterable, Iterator, List, Optional, Tuple

from ..extras import install_hint

__all__ = ["PARQUET_INSTALL_HINT", "ParquetNotInstalledError", "import_pyarrow", "InputFile",
           "Chunk", "InputError", "discover_inputs", "read_chunks", "output_format",
           "dump_json_line", "AppendFile", "ParquetParts"]

PARQUET_INSTALL_HINT = install_hint("parquet")

INPUT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
                  ".parquet": "parquet", ".pq": "parquet"}
OUTPUT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
                   ".parquet": "parquet", ".pq": "parquet"}
FORMATS = ("jsonl", "json", "parquet")

#: rows per row group of a merged Parquet output (what ``datasets`` writes per batch)
ROW_GROUP_ROWS = 1000
_JSON_READ = 1 << 16  # characters read at a time from a JSON array file


class ParquetNotInstalledError(ImportError):
    """Parquet input or output was asked for without the ``parquet`` extra (pyarrow)."""


class InputError(Exception):
    """An input that cannot be read as a whole (not a row's problem): a missing path, an
    unknown format, a JSON array that stops parsing, a corrupt Parquet file."""


def import_pyarrow() -> Tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, or :class:`ParquetNotInstalledError` naming the
    command that installs them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise ParquetNotInstalledError(
            f"Parquet needs pyarrow, which is not installed ({exc}): {PARQUET_INSTALL_HINT}"
        ) from None
    return pyarrow, pyarrow.parquet


# ---- finding the inputs ---------------------------------------------------------------------
@dataclass
class InputFile:
    """One input file: its path, format (``jsonl``, ``json``, ``parquet``), whether it is
    gzip-compressed, its size and modification time (part of the run's fingerprint)."""

    path: str
    format: str
    gzip: bool
    size: int
    mtime_ns: int

    def fingerprint(self) -> List[Any]:
        return [os.path.abspath(self.path), self.size, self.mtime_ns]


def _format_of(path: str) -> Tuple[Optional[str], bool]:
    name = path.lower()
    compressed = name.endswith(".gz")
    if compressed:
        name = name[:-3]
    return INPUT_SUFFIXES.get(os.path.splitext(name)[1]), compressed


def discover_inputs(spec: str, input_format: Optional[str] = None,
                    exclude: Iterable[str] = ()) -> List[InputFile]:
    """The files ``spec`` names (a file, a folder searched recursively, or a glob with ``*``,
    ``?``, ``[...]``, ``**``), in path order, without the paths in ``exclude`` (the run's own
    output files). Raises :class:`InputError` when there is nothing to read or a named file's
    format is unknown."""
    excluded = {os.path.realpath(path) for path in exclude}
    explicit = False
    if glob.has_magic(spec):
        candidates = sorted(path for path in glob.glob(spec, recursive=True)
                            if os.path.isfile(path))
        explicit = True
    elif os.path.isdir(spec):
        candidates = []
        for folder, folders, files in os.walk(spec):
            folders[:] = sorted(name for name in folders if not name.startswith((".", "_")))
            candidates.extend(os.path.join(folder, name) for name in files
                              if not name.startswith((".", "_")))
        candidates.sort(key=lambda path: os.path.relpath(path, spec).split(os.sep))
    elif os.path.exists(spec):
        candidates = [spec]
        explicit = True
    else:
        raise InputError(f"no such file or directory: {spec}")
    found: List[InputFile] = []
    for path in candidates:
        if os.path.realpath(path) in excluded:
            continue
        kind, compressed = _format_of(path)
        if input_format is not None:
            kind = input_format
        if kind is None:
            if explicit:
                raise InputError(f"{path}: cannot tell its format from the name (.jsonl, .json, "
                                 ".parquet); say it with --input-format")
            continue
        if kind == "parquet" and compressed:
            raise InputError(f"{path}: a gzip-compressed Parquet file is not supported")
        status = os.stat(path)
        found.append(InputFile(path, kind, compressed, status.st_size, status.st_mtime_ns))
    if not found:
        raise InputError(f"{spec}: no input files (.jsonl, .ndjson, .json, .parquet, .pq; "
                         ".gz for JSON)")
    return found


def output_format(path: str, forced: Optional[str] = None) -> str:
    """``jsonl`` or ``parquet``: ``forced``, else by the suffix of ``path``."""
    if forced is not None:
        return forced
    name = path.lower()
    kind = OUTPUT_SUFFIXES.get(os.path.splitext(name)[1])
    if kind is None:
        raise InputError(f"{path}: cannot tell the output format from the name (.jsonl, "
                         ".parquet); say it with --format")
    return kind


# ---- reading --------------------------------------------------------------------------------
@dataclass
class Chunk:
    """At most ``batch_size`` rows of one file, in order.

    ``kind`` says what ``payload`` holds: ``"lines"`` (JSON Lines as bytes, parsed by the
    worker; ``lines`` their 1-based line numbers), ``"objects"`` (parsed JSON values) or
    ``"arrow"`` (a record batch as Arrow IPC stream bytes). ``first_row`` is the index in the
    file of the first row, ``position`` where to resume after this chunk, ``done`` the fraction
    of the file read so far.
    """

    kind: str
    payload: Any
    count: int
    first_row: int
    position: Dict[str, int]
    done: float
    lines: Optional[List[int]] = field(default=None)


def read_chunks(source: InputFile, batch_size: int,
                start: Optional[Dict[str, int]] = None) -> Iterator[Chunk]:
    """The rows of ``source`` in chunks of ``batch_size``, from ``start`` (a chunk's
    ``position``) or the beginning. Blank lines of JSON Lines are not rows."""
    start = dict(start or {})
    if source.format == "parquet":
        yield from _parquet_chunks(source, batch_size, start.get("row", 0))
        return
    with open(source.path, "rb") as raw:
        stream: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if source.gzip else raw
        if source.format == "json" and _starts_array(stream):
            yield from _array_chunks(source, stream, raw, batch_size, start.get("row", 0))
        else:
            yield from _line_chunks(source, stream, raw, batch_size, start)


def _fraction(raw: BinaryIO, size: int) -> float:
    try:
        return min(raw.tell() / size, 1.0) if size else 1.0
    except (OSError, ValueError):
        return 0.0


def _line_chunks(source: InputFile, stream: BinaryIO, raw: BinaryIO, batch_size: int,
                 start: Dict[str, int]) -> Iterator[Chunk]:
    offset, line, row = start.get("offset", 0), start.get("line", 0), start.get("row", 0)
    stream.seek(offset)
    payload: List[bytes] = []
    numbers: List[int] = []
    for data in stream:
        offset += len(data)
        line += 1
        if data.isspace():
            continue
        payload.append(data)
        numbers.append(line)
        if len(payload) >= batch_size:
            yield Chunk("lines", payload, len(payload), row,
                        {"offset": offset, "line": line, "row": row + len(payload)},
                        _fraction(raw, source.size), numbers)
            row += len(payload)
            payload, numbers = [], []
    if payload:
        yield Chunk("lines", payload, len(payload), row,
                    {"offset": offset, "line": line, "row": row + len(payload)}, 1.0, numbers)


def _starts_array(stream: BinaryIO) -> bool:
    """Whether the first character other than whitespace (and a BOM) is ``[``."""
    head = b""
    while True:
        piece = stream.read(4096)
        if not piece:
            break
        head += piece
        stripped = head.lstrip(b"\xef\xbb\xbf").lstrip()
        if stripped:
            stream.seek(0)
            return stripped[:1] == b"["
    stream.seek(0)
    return False


def _array_chunks(source: InputFile, stream: BinaryIO, raw: BinaryIO, batch_size: int,
                  skip: int) -> Iterator[Chunk]:
    payload: List[Any] = []
    row = 0
    first = skip
    for value in _array_items(source.path, stream):
        if row < skip:
            row += 1
            continue
        payload.append(value)
        row += 1
        if len(payload) >= batch_size:
            yield Chunk("objects", payload, len(payload), first, {"row": row},
                        _fraction(raw, source.size))
            first, payload = row, []
    if payload:
        yield Chunk("objects", payload, len(payload), first, {"row": row}, 1.0)


def _array_items(path: str, stream: BinaryIO) -> Iterator[Any]:
    """The items of a top-level JSON array, parsed one at a time from a text buffer that
    holds at most one item plus a read's worth (a longer item grows it)."""
    decoder = json.JSONDecoder()
    text = io.TextIOWrapper(stream, encoding="utf-8-sig")
    buffer, position, at_end, consumed = "", 0, False, 0

    def more() -> bool:
        nonlocal buffer, position, at_end, consumed
        if at_end:
            return False
        piece = text.read(max(_JSON_READ, len(buffer) - position))
        if not piece:
            at_end = True
            return False
        consumed += position
        buffer = buffer[position:] + piece
        position = 0
        return True

    def next_char() -> str:
        nonlocal position
        while True:
            while position < len(buffer) and buffer[position] in " \t\r\n":
                position += 1
            if position < len(buffer) or not more():
                return buffer[position] if position < len(buffer) else ""

    def fail(what: str) -> InputError:
        return InputError(f"{path}: not a JSON array of rows: {what} at character "
                          f"{consumed + position:,}")

    try:
        if next_char() != "[":
            raise fail("no '['")
        position += 1
        first = True
        while True:
            char = next_char()
            if char == "]":
                return
            if not first:
                if char != ",":
                    raise fail("expected ',' or ']'" if char else "the file ends")
                position += 1
                next_char()
            first = False
            while True:
                try:
                    value, end = decoder.raw_decode(buffer, position)
                except json.JSONDecodeError as exc:
                    if more():
                        continue
                    raise fail(exc.msg) from None
                if end >= len(buffer) and more():  # a number may go on in the next read
                    continue
                break
            position = end
            yield value
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 ({exc.reason})") from None
    except RecursionError:
        raise InputError(f"{path}: a row is nested too deeply to read") from None
    finally:
        text.detach()


def _parquet_chunks(source: InputFile, batch_size: int, skip: int) -> Iterator[Chunk]:
    pa, pq = import_pyarrow()
    try:
        parquet = pq.ParquetFile(source.path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{source.path}: cannot read it as Parquet ({exc})") from None
    metadata = parquet.metadata
    total = metadata.num_rows
    group, group_start = 0, 0
    while group < metadata.num_row_groups and \
            group_start + metadata.row_group(group).num_rows <= skip:
        group_start += metadata.row_group(group).num_rows
        group += 1
    row, to_skip = group_start, skip - group_start
    try:
        batches = parquet.iter_batches(batch_size=batch_size,
                                       row_groups=range(group, metadata.num_row_groups),
                                       use_threads=False)
        for batch in batches:
            if to_skip:
                dropped = min(to_skip, batch.num_rows)
                batch = batch.slice(dropped)
                row += dropped
                to_skip -= dropped
            if batch.num_rows == 0:
                continue
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)  # only the rows of a slice are written
            first = row
            row += batch.num_rows
            yield Chunk("arrow", sink.getvalue().to_pybytes(), batch.num_rows, first,
                        {"row": row}, row / total if total else 1.0)
    except pa.ArrowException as exc:
        raise InputError(f"{source.path}: cannot read it as Parquet ({exc})") from None


def parquet_schema(source: InputFile) -> Any:
    """The Arrow schema of a Parquet input (from its footer)."""
    pa, pq = import_pyarrow()
    try:
        return pq.read_schema(source.path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{source.path}: cannot read it as Parquet ({exc})") from None


# ---- writing --------------------------------------------------------------------------------
def _json_default(value: Any) -> Any:
    """What JSON cannot hold, from a Parquet input: dates and times as ISO 8601 strings,
    durations in seconds, bytes as base64, decimals as strings (exact), numpy scalars as
    numbers."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    raise TypeError(f"a {type(value).__name__} cannot be written as JSON")


def dump_json_line(row: Dict[str, Any]) -> bytes:
    """One JSON Lines line (compact, UTF-8, newline-terminated). A lone surrogate, which UTF-8
    cannot hold, makes that line ASCII with ``\\uXXXX`` escapes (still the same JSON)."""
    text = json.dumps(row, ensure_ascii=False, separators=(",", ":"), default=_json_default)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(row, ensure_ascii=True, separators=(",", ":"),
                          default=_json_default).encode("ascii") + b"\n"


class AppendFile:
    """A file appended to, whose committed length the checkpoint records: opened at that
    length (anything after it, written by an interrupted run, is cut off)."""

    def __init__(self, path: str, length: int = 0) -> None:
        self.path = path
        mode = "r+b" if length and os.path.exists(path) else "wb"
        self.handle = open(path, mode)
        if length:
            size = self.handle.seek(0, os.SEEK_END)
            if size < length:
                self.handle.close()
                raise InputError(f"{path} is shorter ({size:,} bytes) than the checkpoint "
                                 f"says ({length:,}): it was changed; start afresh with "
                                 "--overwrite")
            self.handle.truncate(length)
            self.handle.seek(length)
        self.length = length

    def write(self, data: bytes) -> None:
        if data:
            self.handle.write(data)
            self.length += len(data)

    def commit(self) -> int:
        """Flush to the operating system (enough to survive the process being killed) and
        return the length to record."""
        self.handle.flush()
        return self.length

    def close(self) -> None:
        self.handle.close()


class ParquetParts:
    """Parquet output written one part file per batch into a folder, merged at the end.

    Parts are named by batch number; a part is written under a temporary name and renamed,
    so a part file is always complete. Parts numbered from ``next_batch`` on (written by an
    interrupted run after its last checkpoint) are deleted when the folder is opened.
    """

    def __init__(self, folder: str, next_batch: int = 0) -> None:
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.schema: Any = None
        kept = set()
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            number = self._number(name)
            if number is None or number >= next_batch:
                os.remove(path)
            else:
                self.add_schema(self._read_schema(path), f"batch {number}")
                kept.add(number)
        if len(kept) != next_batch:  # every batch writes a part, even one without rows
            raise InputError(f"{folder} lacks {next_batch - len(kept):,} of the {next_batch:,} "
                             "part files the checkpoint counts: it was changed; start afresh "
                             "with --overwrite")

    @staticmethod
    def _number(name: str) -> Optional[int]:
        stem, dot, suffix = name.partition(".")
        if suffix != "parquet" or not stem.isdigit():
            return None
        return int(stem)

    @staticmethod
    def _read_schema(source: Any) -> Any:
        _, pq = import_pyarrow()
        return pq.read_schema(source)

    def add_schema(self, schema: Any, where: str) -> None:
        """Unify ``schema`` with the parts' so far; a column whose types cannot be unified is
        an :class:`InputError` naming it (a Parquet file has one type per column)."""
        pa, _ = import_pyarrow()
        if self.schema is None:
            self.schema = schema
            return
        try:
            self.schema = pa.unify_schemas([self.schema, schema], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InputError(f"the Parquet output cannot hold {where}: {exc} (a Parquet file "
                             "has one type per column; write JSON Lines instead, or make the "
                             "column's values one type)") from None

    def write(self, batch: int, data: bytes, where: str) -> None:
        """Store one batch's part (Parquet bytes)."""
        pa, _ = import_pyarrow()
        self.add_schema(self._read_schema(pa.BufferReader(data)), where)
        path = os.path.join(self.folder, f"{batch:09d}.parquet")
        with open(path + ".tmp", "wb") as handle:
            handle.write(data)
        os.replace(path + ".tmp", path)

    def merge(self, target: str, empty_schema: Any) -> None:
        """Write every part, in batch order and cast to the unified schema, into ``target``,
        in row groups of :data:`ROW_GROUP_ROWS` rows: the file depends on the rows alone, not
        on how the batches fell (a resumed run may cut its first batch differently)."""
        pa, pq = import_pyarrow()
        schema = self.schema if self.schema is not None else empty_schema
        names = sorted(name for name in os.listdir(self.folder)
                       if self._number(name) is not None)
        pending: List[Any] = []
        rows = 0
        with pq.ParquetWriter(target, schema) as writer:
            for name in names:
                table = pq.read_table(os.path.join(self.folder, name))
                columns = []
                for column in schema:
                    if column.name in table.column_names:
                        columns.append(table.column(column.name).cast(column.type))
                    else:
                        columns.append(pa.nulls(table.num_rows, column.type))
                pending.append(pa.table(columns, schema=schema))
                rows += table.num_rows
                if rows < ROW_GROUP_ROWS:
                    continue
                table = pa.concat_tables(pending).combine_chunks()
                while table.num_rows >= ROW_GROUP_ROWS:
                    writer.write_table(table.slice(0, ROW_GROUP_ROWS),
                                       row_group_size=ROW_GROUP_ROWS)
                    table = table.slice(ROW_GROUP_ROWS)
                pending, rows = [table], table.num_rows
            if rows:
                table = pa.concat_tables(pending).combine_chunks()
                writer.write_table(table, row_group_size=table.num_rows)

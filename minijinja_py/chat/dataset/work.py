"""What a worker process of ``minijinja-py dataset`` does with one chunk of rows.

A chunk arrives as raw JSON lines, parsed JSON values or an Arrow record batch
(:class:`~.io.Chunk`); the worker parses, renders or encodes every row with its
:class:`~.batch.ChatBatchProcessor` (built once per process by :func:`init_worker`), and sends
back the finished output bytes (JSON Lines, or one Parquet part) and one error record per failed
row, so the parent only writes bytes in order. The same function runs in the parent when there
is a single worker.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .batch import (MASK_COLUMN, TEXT_COLUMN, TOKEN_COLUMNS, ChatBatchProcessor,
                    MalformedRowError, describe_error, error_details)
from .io import Chunk, InputError, dump_json_line, import_pyarrow

__all__ = ["Job", "ChunkResult", "process_chunk", "init_worker", "run_task", "WorkerStartError",
           "output_schema", "record_line", "keys_text"]


@dataclass
class Job:
    """A run's settings that workers need besides the processor (picklable)."""

    output_format: str            # "jsonl" or "parquet"
    drop: Tuple[str, ...]         # input columns not copied to the output
    key_columns: Tuple[str, ...]  # copied into error records when a row has them
    files: Tuple[str, ...]        # input paths, as error records name them
    arrow_input: bool = False     # some input is Parquet (workers need pyarrow)


@dataclass
class ChunkResult:
    """One chunk done: output bytes for its good rows, an error record per failed row."""

    rows: int
    ok: int
    data: bytes
    failed: List[Dict[str, Any]]
    tokens: int


def _arrow_types(pa: Any) -> Dict[str, Any]:
    return {TEXT_COLUMN: pa.string(), TOKEN_COLUMNS[0]: pa.list_(pa.int32()),
            TOKEN_COLUMNS[1]: pa.list_(pa.int8()), MASK_COLUMN: pa.list_(pa.int8())}


def output_schema(processor: ChatBatchProcessor, base: Any = None) -> Any:
    """The Arrow schema of a Parquet output: ``base``'s fields (the input's kept columns)
    followed by the processor's output columns."""
    pa, _ = import_pyarrow()
    types = _arrow_types(pa)
    fields = list(base) if base is not None else []
    return pa.schema(fields + [pa.field(name, types[name])
                               for name in processor.output_columns])


def _record(job: Job, chunk: Chunk, file_index: int, first_row: int, index: int, row: Any,
            exc: BaseException) -> Dict[str, Any]:
    record: Dict[str, Any] = {"row": first_row + index, "file": job.files[file_index],
                              "file_row": chunk.first_row + index}
    if chunk.lines is not None:
        record["line"] = chunk.lines[index]
    keys = {}
    if isinstance(row, dict):
        keys = {key: row[key] for key in job.key_columns if key in row}
    record["keys"] = keys
    record["error"] = describe_error(exc)
    record.update(error_details(exc))
    return record


def _parse_rows(chunk: Chunk) -> List[Any]:
    """The chunk's rows as dicts; a row that is not one is the exception that says why."""
    if chunk.kind == "lines":
        rows: List[Any] = []
        for data in chunk.payload:
            try:
                rows.append(json.loads(data))
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
                rows.append(exc)
    else:
        rows = list(chunk.payload)
    for index, row in enumerate(rows):
        if not isinstance(row, (dict, BaseException)):
            rows[index] = MalformedRowError(
                f"the row is {_kind(row)}, not a JSON object with a conversation column")
    return rows


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean", type(None): "null"}.get(type(value), type(value).__name__)


def process_chunk(processor: ChatBatchProcessor, job: Job, file_index: int, first_row: int,
                  chunk: Chunk) -> ChunkResult:
    """Process one chunk whose first row is row ``first_row`` of the whole input."""
    if chunk.kind == "arrow":
        pa, _ = import_pyarrow()
        batch = pa.ipc.open_stream(chunk.payload).read_next_batch()
        if job.output_format == "parquet":
            return _arrow_to_parquet(processor, job, file_index, first_row, chunk, batch)
        rows: List[Any] = batch.to_pylist()
    else:
        rows = _parse_rows(chunk)
    outputs = processor.output_columns
    good: List[Dict[str, Any]] = []
    failed: List[Dict[str, Any]] = []
    tokens = 0
    for index, row in enumerate(rows):
        try:
            if isinstance(row, BaseException):
                raise row
            clashes = [name for name in outputs if name in row and name not in job.drop]
            if clashes:
                raise MalformedRowError(
                    f"the row already has a {clashes[0]!r} column, which the output writes "
                    "(rename it)")
            values = processor.process_row(row)
        except Exception as exc:
            failed.append(_record(job, chunk, file_index, first_row, index, row, exc))
            continue
        kept = {key: value for key, value in row.items() if key not in job.drop}
        kept.update(values)
        good.append(kept)
        if processor.tokens:
            tokens += len(values[TOKEN_COLUMNS[0]])
    if job.output_format == "jsonl":
        data = b"".join(dump_json_line(row) for row in good)
    else:
        data = _rows_to_parquet(processor, good, chunk, job.files[file_index])
    return ChunkResult(len(rows), len(good), data, failed, tokens)


def _parquet_bytes(table: Any) -> bytes:
    pa, pq = import_pyarrow()
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def _rows_to_parquet(processor: ChatBatchProcessor, rows: List[Dict[str, Any]], chunk: Chunk,
                     path: str) -> bytes:
    """JSON rows as one Parquet part: a column per key, in the order keys first appear (a
    row without a key has null there), then the output columns with their fixed types."""
    pa, _ = import_pyarrow()
    types = _arrow_types(pa)
    names: Dict[str, None] = {}
    for row in rows:
        for key in row:
            names.setdefault(key, None)
    columns, fields = [], []
    for name in names:
        values = [row.get(name) for row in rows]
        try:
            array = pa.array(values, type=types[name]) if name in processor.output_columns \
                else pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            last = chunk.first_row + chunk.count - 1
            raise InputError(
                f"column {name!r} of rows {chunk.first_row:,}-{last:,} of {path} cannot be "
                f"one Parquet column ({exc}); write JSON Lines instead, or make its values one "
                "type"
            ) from None
        columns.append(array)
        fields.append(pa.field(name, array.type))
    if not rows:
        return _parquet_bytes(output_schema(processor).empty_table())
    return _parquet_bytes(pa.Table.from_arrays(columns, schema=pa.schema(fields)))


def _arrow_to_parquet(processor: ChatBatchProcessor, job: Job, file_index: int,
                      first_row: int, chunk: Chunk, batch: Any) -> ChunkResult:
    """Parquet in, Parquet out: the kept columns stay Arrow data, exactly as they were; only
    the conversation and key columns are converted to Python."""
    pa, _ = import_pyarrow()
    types = _arrow_types(pa)
    names = batch.schema.names
    clashes = [name for name in processor.output_columns if name in names
               and name not in job.drop]
    if clashes:
        raise InputError(f"{job.files[file_index]} has a column {clashes[0]!r}, which the "
                         "output writes (rename it)")
    wanted = [name for name in dict.fromkeys(processor.conversation_columns + job.key_columns)
              if name in names]
    values = {name: batch.column(name).to_pylist() for name in wanted}
    outputs: Dict[str, List[Any]] = {name: [] for name in processor.output_columns}
    good: List[int] = []
    failed: List[Dict[str, Any]] = []
    tokens = 0
    for index in range(batch.num_rows):
        row = {name: values[name][index] for name in wanted}
        try:
            result = processor.process_row(row)
        except Exception as exc:
            failed.append(_record(job, chunk, file_index, first_row, index, row, exc))
            continue
        good.append(index)
        for name in outputs:
            outputs[name].append(result[name])
        if processor.tokens:
            tokens += len(result[TOKEN_COLUMNS[0]])
    kept = [name for name in names if name not in job.drop]
    table = pa.Table.from_batches([batch]).select(kept).take(pa.array(good, pa.int64()))
    for name, column in outputs.items():
        table = table.append_column(pa.field(name, types[name]),
                                    pa.array(column, type=types[name]))
    return ChunkResult(batch.num_rows, len(good), _parquet_bytes(table), failed, tokens)


# ---- the worker process -------------------------------------------------------------------------
class WorkerStartError(Exception):
    """A worker could not build its template or tokenizer: the message says why (raised by
    every task of that worker, so the parent reports it instead of a broken pool)."""


_STATE: Optional[Tuple[ChatBatchProcessor, Job]] = None
_START_ERROR: Optional[str] = None


def init_worker(processor: ChatBatchProcessor, job: Job) -> None:
    """Worker start: build the template/tokenizer once; leave Ctrl-C to the parent (which
    stops the pool); end when the parent is gone."""
    global _STATE, _START_ERROR
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the processes are the parallelism: no tokenizer thread pool per worker on top
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    threading.Thread(target=_watch_parent, name="minijinja_py-dataset-parent-watch",
                     daemon=True).start()
    try:
        _STATE = (processor.load(), job)
    except Exception as exc:
        _START_ERROR = str(exc) if isinstance(exc, (ValueError, ImportError, OSError)) \
            else describe_error(exc)


def _watch_parent() -> None:
    """Exit when the process that started the pool dies (a kill -9 runs no cleanup). Its pipes
    would keep an idle worker waiting forever; and a forkserver worker holds the forkserver
    alive, so neither would ever go. The sentinel multiprocessing gives a child (a pipe the
    parent holds open; spawn and forkserver both have one) becomes readable when it dies."""
    import multiprocessing
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        wait([parent.sentinel])
        os._exit(1)
    first = os.getppid()
    while os.getppid() == first:
        time.sleep(0.5)
    os._exit(1)


def run_task(task: Tuple[int, int, Chunk]) -> ChunkResult:
    """The pool's function: ``(file index, first row, chunk)`` -> :class:`ChunkResult`."""
    if _STATE is None:
        raise WorkerStartError(_START_ERROR or "the worker did not start")
    return process_chunk(_STATE[0], _STATE[1], *task)


def record_line(record: Dict[str, Any]) -> bytes:
    """An error record as a line of the errors file."""
    return dump_json_line(record)


def keys_text(record: Dict[str, Any]) -> str:
    """Where a failed row is, for a message: ``row 17 (data.jsonl line 18, id "a7")``."""
    where = f"{record['file']} " + (f"line {record['line']}" if "line" in record
                                    else f"row {record['file_row']}")
    keys = ", ".join(f"{key} {json.dumps(value, ensure_ascii=False, default=str)}"
                     for key, value in record["keys"].items())
    return f"row {record['row']:,} ({where}{', ' + keys if keys else ''})"

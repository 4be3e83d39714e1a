"""The ``minijinja-py dataset`` engine: every row of JSON Lines, JSON or Parquet input through a
chat template (and a tokenizer), on every core, resumable after a kill.

How a run goes (:func:`run_dataset`):

- the input is read a chunk of ``batch_size`` rows at a time (:mod:`.io`); chunks go to a pool
  of worker processes (``forkserver``, else ``spawn``: no fork of a process that may hold
  threads), at most two per worker in flight, so memory stays flat however large the input;
- each worker builds its :class:`~.batch.ChatBatchProcessor` once and returns finished output
  bytes and error records (:mod:`.work`); the parent writes results strictly in input order;
- after each batch the parent records a checkpoint, ``OUTPUT.checkpoint.json``: the arguments'
  fingerprint, batches and rows done, the input position after them (file, byte offset or row),
  the committed length of the output and errors files, the counters, and the run's clock.
  JSON Lines output grows in ``OUTPUT.partial``; Parquet output is one part file per batch in
  ``OUTPUT.parts/``. A run that is killed and started again with the same arguments cuts what
  was written after the last checkpoint, reads on from the recorded position and ends with
  the same bytes an uninterrupted run writes; other arguments are refused (``--overwrite``
  starts afresh);
- at the end the output is renamed (JSON Lines) or merged (Parquet) to ``OUTPUT`` and the
  checkpoint removed. Rows that failed are not in ``OUTPUT``: each is a record in the errors
  file (default ``OUTPUT.errors.jsonl``, always written, empty when nothing failed);
- ``OUTPUT.lock`` (an advisory ``flock``) keeps a second run from writing the same output at
  the same time.

``strftime_now()`` formats the run's start time for every row (or ``now``), recorded in the
checkpoint so that a resumed run renders the same dates.

Exit codes (:attr:`RunSummary.exit_code`): 0 every row done, 3 finished but some rows failed
(:data:`EXIT_ROWS_FAILED`); the command line adds 1 for a run that could not finish (a template
that does not load, an unreadable input, ``--fail-fast`` at a failed row) and 2 for a usage
error.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import shutil
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple, Union

from .batch import ChatBatchProcessor, describe_error
from .io import (AppendFile, Chunk, InputError, InputFile, ParquetNotInstalledError,
                 ParquetParts, discover_inputs, import_pyarrow, output_format, parquet_schema,
                 read_chunks)
from .progress import Progress
from .work import (ChunkResult, Job, WorkerStartError, init_worker, keys_text, output_schema,
                   process_chunk, record_line, run_task)

__all__ = ["RunConfig", "RunSummary", "run_dataset", "DatasetError", "DatasetUsageError",
           "RowFailedError", "EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_ROWS_FAILED",
           "CHECKPOINT_SUFFIX", "PARTIAL_SUFFIX", "PARTS_SUFFIX", "LOCK_SUFFIX", "ERRORS_SUFFIX"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_ROWS_FAILED = 3

CHECKPOINT_SUFFIX = ".checkpoint.json"
PARTIAL_SUFFIX = ".partial"
PARTS_SUFFIX = ".parts"
LOCK_SUFFIX = ".lock"
ERRORS_SUFFIX = ".errors.jsonl"
_CHECKPOINT_FORMAT = "minijinja-py dataset checkpoint"
_CHECKPOINT_VERSION = 1
_IN_FLIGHT_PER_WORKER = 2
_WAIT = 0.1  # seconds between progress refreshes while the next batch is not done


class DatasetError(Exception):
    """The run cannot go on (exit code 1): the template or tokenizer does not load, an input
    cannot be read, a worker died. What was done stays checkpointed."""


class DatasetUsageError(Exception):
    """The arguments cannot work (exit code 2): a bad option, a missing input, an existing
    output, a checkpoint of a run with other arguments."""


class RowFailedError(DatasetError):
    """``fail_fast``: a row failed, and the run stopped there."""


@dataclass
class RunConfig:
    """The arguments of a run (the command line's options; see ``minijinja-py dataset -h``).

    ``workers`` None means one per core; ``progress`` is ``"auto"`` (a bar on a terminal,
    plain lines every ``progress_interval`` seconds otherwise), ``"bar"``, ``"lines"`` or
    ``"none"``.
    """

    template: str
    input: str
    output: str
    output_format: Optional[str] = None
    input_format: Optional[str] = None
    tokens: bool = False
    tokenizer: Optional[str] = None
    name: Optional[str] = None
    messages_column: str = "messages"
    tools_column: str = "tools"
    documents_column: str = "documents"
    variables_column: Optional[str] = None
    variables: Dict[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool = False
    mask: Union[bool, str] = False
    sanitize: Union[bool, str] = False
    max_length: Optional[int] = None
    now: Optional[datetime.datetime] = None
    keep_conversation: bool = False
    key_columns: Sequence[str] = ("id",)
    errors_path: Optional[str] = None
    workers: Optional[int] = None
    batch_size: int = 256
    fail_fast: bool = False
    overwrite: bool = False
    progress: str = "auto"
    progress_interval: float = 10.0


@dataclass
class RunSummary:
    """What a finished run did: totals over all its sessions (a resumed run continues the
    counts), and this session's rows and seconds."""

    rows: int
    ok: int
    failed: int
    tokens: Optional[int]
    output: str
    errors_path: str
    seconds: float
    session_rows: int
    resumed_at: Optional[int]
    workers: int

    @property
    def exit_code(self) -> int:
        """0 when every row went to the output, :data:`EXIT_ROWS_FAILED` otherwise."""
        return EXIT_ROWS_FAILED if self.failed else EXIT_OK

    def text(self) -> str:
        """The one-line summary the command prints."""
        rate = self.session_rows / self.seconds if self.seconds > 0 else 0.0
        line = (f"minijinja-py dataset: {self.rows:,} rows in {self.seconds:.1f} s "
                f"({rate:,.0f} rows/s, {self.workers} worker{'s' if self.workers != 1 else ''}"
                f"{f', resumed after row {self.resumed_at:,}' if self.resumed_at else ''}): "
                f"{self.ok:,} written to {self.output}")
        if self.tokens is not None:
            line += f" ({self.tokens:,} tokens)"
        if self.failed:
            line += f"; {self.failed:,} failed, not in the output: see {self.errors_path}"
        else:
            line += "; none failed"
        return line


# ---- the files of a run --------------------------------------------------------------------------
@dataclass
class _Paths:
    output: str
    errors: str

    @property
    def checkpoint(self) -> str:
        return self.output + CHECKPOINT_SUFFIX

    @property
    def partial(self) -> str:
        return self.output + PARTIAL_SUFFIX

    @property
    def parts(self) -> str:
        return self.output + PARTS_SUFFIX

    @property
    def lock(self) -> str:
        return self.output + LOCK_SUFFIX

    def all(self) -> List[str]:
        return [self.output, self.errors, self.checkpoint, self.partial, self.checkpoint + ".tmp"]


class _Lock:
    """One run at a time per OUTPUT: an exclusive ``flock`` on ``OUTPUT.lock``, which the
    kernel releases however the holder ends (a killed run leaves no stale lock). The file is
    removed on release; a run that locked a file just removed (it checks the inode after
    locking) tries again. Where ``fcntl`` is missing (Windows) there is no lock."""

    def __init__(self, path: str, output: str) -> None:
        self.path = path
        self.handle: Any = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return
        while True:
            handle = open(path, "a+b")
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                raise DatasetUsageError(f"another run is writing {output} (it holds {path}): "
                                        "wait for it to end or stop it first") from None
            try:
                same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.handle = handle
                return
            handle.close()

    def release(self) -> None:
        if self.handle is not None:
            try:
                os.remove(self.path)
            except OSError:
                pass
            self.handle.close()
            self.handle = None


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


# ---- fingerprint and checkpoint ----------------------------------------------------------------
def _file_digest(digest: Any, path: str) -> None:
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        digest.update(b"<missing>")


def _arguments(config: RunConfig, processor: ChatBatchProcessor, files: List[InputFile],
               out_format: str, paths: _Paths) -> Dict[str, Any]:
    """Everything the output depends on, as JSON: a resume must find the same."""
    from ..config import load_chat_config

    template: Dict[str, Any] = {"path": os.path.abspath(config.template)}
    try:
        loaded = load_chat_config(config.template)
        template["digest"] = hashlib.sha256(json.dumps(
            [loaded.templates, loaded.special_tokens], sort_keys=True).encode("utf-8")
        ).hexdigest()
    except (ValueError, OSError):  # a tokenizer folder without a template: the tokenizer's
        template["digest"] = None
    tokenizer = None
    if processor.tokenizer_path is not None:
        digest = hashlib.sha256()
        for name in ("tokenizer.json", "tokenizer_config.json"):
            _file_digest(digest, os.path.join(processor.tokenizer_path, name))
        tokenizer = {"path": os.path.abspath(processor.tokenizer_path),
                     "digest": digest.hexdigest()}
    return {
        "template": template, "tokenizer": tokenizer, "name": config.name,
        "inputs": [source.fingerprint() + [source.format] for source in files],
        "output": os.path.abspath(config.output), "output_format": out_format,
        "errors": os.path.abspath(paths.errors),
        "columns": [config.messages_column, config.tools_column, config.documents_column,
                    config.variables_column, bool(config.keep_conversation),
                    list(config.key_columns)],
        "variables": json.loads(json.dumps(config.variables, sort_keys=True, default=repr)),
        "add_generation_prompt": config.add_generation_prompt,
        "mask": processor.mask, "sanitize": processor.sanitize,
        "max_length": config.max_length,
        "now": config.now.isoformat() if config.now is not None else None,
    }


def _fingerprint(arguments: Dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(arguments, sort_keys=True).encode("utf-8")).hexdigest()


def _save(path: str, state: Dict[str, Any]) -> None:
    """Replace the checkpoint atomically: a kill leaves the old one or the new one."""
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=1, sort_keys=True)
    os.replace(temporary, path)


def _fresh_state(fingerprint: str, arguments: Dict[str, Any], now: str) -> Dict[str, Any]:
    return {"format": _CHECKPOINT_FORMAT, "version": _CHECKPOINT_VERSION,
            "fingerprint": fingerprint, "arguments": arguments, "now": now,
            "batches": 0, "rows": 0, "ok": 0, "failed": 0, "tokens": 0,
            "file": 0, "position": None, "done": 0.0, "output_bytes": 0, "errors_bytes": 0,
            "complete": False}


def _load_state(paths: _Paths, fingerprint: str, arguments: Dict[str, Any],
                overwrite: bool) -> Optional[Dict[str, Any]]:
    """The checkpoint to resume from, or None to start afresh (refusing to replace a finished
    output without ``overwrite``)."""
    if overwrite:
        return None
    if not os.path.exists(paths.checkpoint):
        for existing in (paths.output, paths.errors):
            if os.path.lexists(existing):
                raise DatasetUsageError(f"{existing} exists (from an earlier run?): add "
                                        "--overwrite to replace it")
        return None
    try:
        with open(paths.checkpoint, encoding="utf-8") as handle:
            state = json.load(handle)
        if state.get("format") != _CHECKPOINT_FORMAT or \
                state.get("version") != _CHECKPOINT_VERSION:
            raise ValueError("not a checkpoint of this version")
    except (OSError, ValueError) as exc:
        raise DatasetUsageError(f"cannot resume from {paths.checkpoint} ({exc}): add "
                                "--overwrite to start afresh") from None
    if state.get("fingerprint") != fingerprint:
        before = state.get("arguments") or {}
        changed = sorted(key for key in set(before) | set(arguments)
                         if before.get(key) != arguments.get(key))
        raise DatasetUsageError(
            f"{paths.checkpoint} belongs to a run with other arguments (different: "
            f"{', '.join(changed) or 'unknown'}): run the same command again to resume it, or "
            "add --overwrite to start afresh")
    return state


# ---- the run ------------------------------------------------------------------------------------
def _cpu_count() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _processor(config: RunConfig, now: Optional[datetime.datetime]) -> ChatBatchProcessor:
    try:
        return ChatBatchProcessor(
            config.template, tokenizer=config.tokenizer, tokens=config.tokens,
            messages_column=config.messages_column, tools_column=config.tools_column,
            documents_column=config.documents_column,
            variables_column=config.variables_column, variables=config.variables,
            add_generation_prompt=config.add_generation_prompt, mask=config.mask,
            sanitize=config.sanitize, max_length=config.max_length, now=now,
            name=config.name)
    except (ValueError, TypeError) as exc:
        raise DatasetUsageError(str(exc)) from None


def _load(processor: ChatBatchProcessor, config: RunConfig, in_workers: bool) -> None:
    """Load the processor here, to report a template or tokenizer that does not load once and
    clearly. With worker processes, which load their own, only what is cheap to check here:
    the template compiles, the tokenizers package is there, the folder has tokenizer.json (a
    tokenizer.json that does not load is reported by the first worker)."""
    from ...exceptions import TemplateSyntaxError

    try:
        if in_workers and processor.tokens:
            from ..tokens import INSTALL_HINT, TOKENIZER_FILE

            try:
                import importlib

                importlib.import_module("tokenizers")  # the workers' import, checked once here
            except ImportError:
                raise DatasetError("token ids need the optional 'tokenizers' package; install "
                                   f"it with: {INSTALL_HINT}") from None
            assert processor.tokenizer_path is not None
            if not os.path.isfile(os.path.join(processor.tokenizer_path, TOKENIZER_FILE)):
                raise DatasetUsageError(f"{processor.tokenizer_path}: no {TOKENIZER_FILE} (token "
                                        "ids need a model folder with the tokenizer itself)")
            _processor(dataclasses.replace(config, tokens=False, tokenizer=None, mask=False,
                                           sanitize=False, max_length=None), processor.now
                       ).load()
        else:
            processor.load()
    except (DatasetError, DatasetUsageError):
        raise
    except TemplateSyntaxError as exc:
        raise DatasetError(f"syntax error: {exc}") from None
    except FileNotFoundError as exc:
        raise DatasetUsageError(str(exc)) from None
    except Exception as exc:  # ChatConfigError, TokenizersNotInstalledError, GGUFError...
        raise DatasetError(describe_error(exc) if not isinstance(exc, (ValueError, ImportError))
                           else str(exc)) from None


def _check_parquet_inputs(files: List[InputFile], processor: ChatBatchProcessor,
                          job: Job) -> Any:
    """Columns a Parquet input must have, or must not (an output column would replace it):
    known from the footer, so said once rather than for every row. Returns the first Parquet
    input's schema without the dropped columns (the columns of an output with no rows)."""
    first = None
    for source in files:
        if source.format != "parquet":
            continue
        schema = parquet_schema(source)
        names = schema.names
        if processor.messages_column not in names:
            raise DatasetUsageError(f"{source.path} has no {processor.messages_column!r} column "
                                    f"(columns: {', '.join(names)}): name the conversation "
                                    "column with --messages-column")
        clashes = [name for name in processor.output_columns if name in names
                   and name not in job.drop]
        if clashes:
            raise DatasetUsageError(f"{source.path} has a column {clashes[0]!r}, which the "
                                    "output writes: rename it first")
        if first is None:
            pa, _ = import_pyarrow()
            first = pa.schema([column for column in schema if column.name not in job.drop])
    return first


def _make_pool(workers: int, processor: ChatBatchProcessor, job: Job) -> Any:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() \
        else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":  # workers fork from a server that has these imported
        modules = ["minijinja_py.chat.dataset.work"]
        if processor.tokens:
            modules += ["tokenizers", "minijinja_py.chat.tokens"]
        if job.output_format == "parquet" or job.arrow_input:
            modules += ["pyarrow", "pyarrow.parquet"]
        context.set_forkserver_preload(modules)
    return ProcessPoolExecutor(max_workers=workers, mp_context=context,
                               initializer=init_worker, initargs=(processor, job))


def run_dataset(config: RunConfig, stderr: Optional[TextIO] = None) -> RunSummary:
    """Run (or resume) a dataset run; see the module docstring. Returns the summary of a
    finished run; raises :class:`DatasetUsageError`, :class:`DatasetError` or
    :class:`RowFailedError` (``fail_fast``) for a run that cannot finish, KeyboardInterrupt
    when interrupted (the checkpoint then allows a resume)."""
    stderr = stderr if stderr is not None else sys.stderr
    started = time.monotonic()
    if config.batch_size < 1:
        raise DatasetUsageError("--batch-size must be at least 1")
    workers = config.workers if config.workers is not None else _cpu_count()
    if workers < 1:
        raise DatasetUsageError("--workers must be at least 1")
    paths = _Paths(config.output, config.errors_path or config.output + ERRORS_SUFFIX)
    if os.path.realpath(paths.errors) == os.path.realpath(paths.output):
        raise DatasetUsageError("the errors file cannot be the output file")
    try:
        out_format = output_format(config.output, config.output_format)
        files = discover_inputs(config.input, config.input_format,
                                exclude=paths.all() + [paths.parts, paths.lock])
        if out_format == "parquet" or any(source.format == "parquet" for source in files):
            import_pyarrow()
    except InputError as exc:
        raise DatasetUsageError(str(exc)) from None
    except ParquetNotInstalledError as exc:
        raise DatasetError(str(exc)) from None
    processor = _processor(config, config.now)
    arguments = _arguments(config, processor, files, out_format, paths)
    folder = os.path.dirname(os.path.abspath(paths.output))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise DatasetUsageError(f"cannot create the output folder {folder}: "
                                f"{exc.strerror or exc}") from None
    lock = _Lock(paths.lock, paths.output)
    try:
        return _run_locked(config, paths, files, out_format, processor, arguments, workers,
                           stderr, started)
    finally:
        lock.release()


def _run_locked(config: RunConfig, paths: _Paths, files: List[InputFile], out_format: str,
                processor: ChatBatchProcessor, arguments: Dict[str, Any], workers: int,
                stderr: TextIO, started: float) -> RunSummary:
    fingerprint = _fingerprint(arguments)
    state = _load_state(paths, fingerprint, arguments, config.overwrite)
    resumed_at = state["rows"] if state is not None and state["rows"] else None
    if state is not None and state["complete"]:  # killed while finishing: finish
        _finish(paths, out_format, state, None, None)
        return _summary(state, paths, processor, started, 0, resumed_at, workers)

    now = config.now
    if now is None:
        now = datetime.datetime.fromisoformat(state["now"]) if state is not None \
            else datetime.datetime.now()
    processor = _processor(config, now)
    _load(processor, config, workers > 1)
    drop = () if config.keep_conversation else processor.conversation_columns
    job = Job(out_format, tuple(drop), tuple(config.key_columns),
              tuple(source.path for source in files),
              any(source.format == "parquet" for source in files))
    try:
        input_schema = _check_parquet_inputs(files, processor, job)
    except InputError as exc:
        raise DatasetError(str(exc)) from None

    if state is None:
        for path in paths.all() + [paths.parts]:
            _remove(path)
        state = _fresh_state(fingerprint, arguments, now.isoformat())
        _save(paths.checkpoint, state)
    try:
        run = _Run(config, paths, files, processor, job, state, workers, stderr)
        session_rows = run.loop()
    except InputError as exc:  # an input that stops reading, a column Parquet cannot hold,
        raise DatasetError(str(exc)) from None  # output files changed behind the checkpoint
    schema = output_schema(processor, input_schema) if out_format == "parquet" else None
    state["complete"] = True
    _save(paths.checkpoint, state)
    _finish(paths, out_format, state, run.output, schema)
    return _summary(state, paths, processor, started, session_rows, resumed_at, workers)


def _summary(state: Dict[str, Any], paths: _Paths, processor: ChatBatchProcessor,
             started: float, session_rows: int, resumed_at: Optional[int],
             workers: int) -> RunSummary:
    return RunSummary(state["rows"], state["ok"], state["failed"],
                      state["tokens"] if processor.tokens else None, paths.output, paths.errors,
                      time.monotonic() - started, session_rows, resumed_at, workers)


def _finish(paths: _Paths, out_format: str, state: Dict[str, Any], output: Any,
            schema: Any) -> None:
    """Move the finished output into place and remove the checkpoint: every step can run
    again after a kill (the checkpoint says ``complete`` until the last one)."""
    if out_format == "jsonl":
        if output is not None:
            output.close()
        if os.path.exists(paths.partial):
            os.replace(paths.partial, paths.output)
    elif os.path.isdir(paths.parts):
        parts = output if output is not None else ParquetParts(paths.parts, state["batches"])
        if schema is None:
            pa, _ = import_pyarrow()
            schema = pa.schema([])
        parts.merge(paths.partial, schema)
        os.replace(paths.partial, paths.output)
        shutil.rmtree(paths.parts)
    if not os.path.exists(paths.errors):
        open(paths.errors, "wb").close()
    _remove(paths.checkpoint)


class _Run:
    """The loop of one session: read, dispatch, write in order, checkpoint."""

    def __init__(self, config: RunConfig, paths: _Paths, files: List[InputFile],
                 processor: ChatBatchProcessor, job: Job, state: Dict[str, Any], workers: int,
                 stderr: TextIO) -> None:
        self.config, self.paths, self.files = config, paths, files
        self.processor, self.job, self.state = processor, job, state
        self.workers, self.stderr = workers, stderr
        if job.output_format == "jsonl":
            self.output: Any = AppendFile(paths.partial, state["output_bytes"])
        else:
            self.output = ParquetParts(paths.parts, state["batches"])
        self.errors = AppendFile(paths.errors, state["errors_bytes"])
        total = sum(source.size for source in files)
        self.weights = [source.size / total if total else 1 / len(files) for source in files]
        self.total_rows = self._parquet_rows()
        mode = config.progress
        if mode == "auto":
            mode = "bar" if _isatty(stderr) else "lines"
        self.progress = Progress(stderr, mode, config.progress_interval, state["rows"],
                                 state["done"], self.total_rows)
        self.mode = mode

    def _parquet_rows(self) -> Optional[int]:
        if not all(source.format == "parquet" for source in self.files):
            return None
        _, pq = import_pyarrow()
        return sum(pq.ParquetFile(source.path).metadata.num_rows for source in self.files)

    def _done(self, file_index: int, fraction: float) -> float:
        return sum(self.weights[:file_index]) + self.weights[file_index] * fraction

    def _chunks(self) -> Iterator[Tuple[int, Chunk]]:
        first = self.state["file"]
        for index in range(first, len(self.files)):
            start = self.state["position"] if index == first else None
            for chunk in read_chunks(self.files[index], self.config.batch_size, start):
                yield index, chunk

    def loop(self) -> int:
        """Process every remaining row; returns how many this session did."""
        state = self.state
        if self.mode != "none":
            what = "token ids" if self.processor.tokens else "text"
            resume = f", resuming after row {state['rows']:,}" if state["rows"] else ""
            print(f"minijinja-py dataset: {len(self.files)} input file"
                  f"{'s' if len(self.files) != 1 else ''} -> {self.paths.output} ({what}, "
                  f"{self.workers} worker{'s' if self.workers != 1 else ''}{resume})",
                  file=self.stderr, flush=True)
        start_rows = state["rows"]
        pool = _make_pool(self.workers, self.processor, self.job) if self.workers > 1 else None
        pending: Deque[Tuple[int, Chunk, Any]] = deque()
        limit = self.workers * _IN_FLIGHT_PER_WORKER
        row = state["rows"]
        try:
            for file_index, chunk in self._chunks():
                if pool is None:
                    self._write(file_index, chunk,
                                process_chunk(self.processor, self.job, file_index, row, chunk))
                else:
                    while len(pending) >= limit:
                        self._collect(pending.popleft())
                    pending.append((file_index, chunk,
                                    pool.submit(run_task, (file_index, row, chunk))))
                row += chunk.count
            while pending:
                self._collect(pending.popleft())
        except BaseException:
            if pool is not None:
                # the queued batches cancelled, the running ones (bounded by the limits)
                # waited for: shut down without waiting, CPython's exit hook later wrote to
                # the pool's closed wake-up pipe ("Exception ignored ... Bad file descriptor")
                pool.shutdown(wait=True, cancel_futures=True)
            self.progress.close()
            self.errors.close()
            if self.job.output_format == "jsonl":
                self.output.close()
            raise
        if pool is not None:
            pool.shutdown(wait=True)
        self.progress.close()
        self.errors.close()
        return state["rows"] - start_rows

    def _collect(self, item: Tuple[int, Chunk, Any]) -> None:
        from concurrent.futures import wait
        from concurrent.futures.process import BrokenProcessPool

        file_index, chunk, future = item
        while not wait([future], timeout=_WAIT).done:
            self.progress.tick()
        try:
            result = future.result()
        except BrokenProcessPool as exc:
            raise DatasetError(f"a worker process died ({exc}); run the same command again "
                               "to resume after the last finished batch") from None
        except (InputError, WorkerStartError) as exc:
            raise DatasetError(str(exc)) from None
        self._write(file_index, chunk, result)

    def _write(self, file_index: int, chunk: Chunk, result: ChunkResult) -> None:
        state = self.state
        if result.failed and self.config.fail_fast:
            record = result.failed[0]
            self.errors.write(record_line(record))
            self.errors.commit()
            raise RowFailedError(f"{keys_text(record)}: {record['error']} (--fail-fast: stopped "
                                 f"there; the {state['rows']:,} rows before its batch are done)")
        if self.job.output_format == "jsonl":
            self.output.write(result.data)
            state["output_bytes"] = self.output.commit()
        else:
            last = chunk.first_row + chunk.count - 1
            self.output.write(state["batches"], result.data,
                              f"rows {chunk.first_row:,}-{last:,} of {self.files[file_index].path}")
        self.errors.write(b"".join(record_line(record) for record in result.failed))
        state["errors_bytes"] = self.errors.commit()
        state["batches"] += 1
        state["rows"] += result.rows
        state["ok"] += result.ok
        state["failed"] += len(result.failed)
        state["tokens"] += result.tokens
        state["file"], state["position"] = file_index, chunk.position
        state["done"] = self._done(file_index, chunk.done)
        _save(self.paths.checkpoint, state)
        self.progress.update(state["rows"], state["failed"], state["done"])


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False

"""A pool of worker processes that render templates a server did not write.

The in-process sandbox and limits bound what a template can do, but they are Python code running
in the server's own process: a bug in them, or in CPython (a segfault, a C-level recursion, an
allocation the limits did not foresee), would take the server down with it. :class:`RenderPool`
moves every parse and render into long-lived worker processes:

* each worker caps its own address space (``RLIMIT_AS``, ``memory_limit`` bytes) before it
  loads the engine, so a render can allocate at most that much; a MemoryError comes back as
  :class:`RenderMemoryError` (a ``LimitExceededError``) and the worker is replaced;
* the parent waits at most ``timeout`` seconds for a reply; past it the worker is killed
  (SIGKILL) and replaced and the render raises :class:`RenderTimeoutError` (a
  ``LimitExceededError``);
* a worker that dies (a signal such as SIGSEGV, the kernel's OOM killer, an exit) raises
  :class:`WorkerCrashedError` (a ``TemplateRuntimeError``) and is replaced;
* the worker's replies are never unpickled: a JSON header plus raw UTF-8 strings, every field
  checked (see :mod:`minijinja_py.chat._pool_worker`); requests to the worker are pickles, since
  the parent is trusted;
* results and errors are those of an in-process render: a ``TemplateError`` raised in the
  worker is rebuilt as the same class with the same message, line, column, name and source,
  so ``str(err)`` is identical.

>>> with RenderPool(processes=2) as pool:                               # doctest: +SKIP
...     pool.render("{{ greeting }}, {{ name }}!", {"greeting": "Hello"}, name="world")
...     pool.render_chat(source, messages, add_generation_prompt=True)

``encode`` is ``apply_chat_template(model_dir, ..., tokenize=True)`` in a worker: the worker
loads the folder's tokenizer (once, kept while the folder's files are unchanged), renders and
encodes, and sends the columns back as arrays of 64-bit ints plus the rendered text, so the
caller gets the same :class:`~minijinja_py.ChatEncoding` (ids, attention mask, assistant masks,
sanitised ids) or the same error as in process.

What runs where: ``render`` pickles its variables to a worker, so they must be picklable (and
their classes importable there: workers get this process's ``sys.path``). ``render_chat`` runs
the chat pipeline's data steps here (messages to plain dicts, Python functions given as tools
to JSON schemas, ...) and sends only plain JSON data, so anything ``ChatTemplate.render``
accepts works. Templates are parsed only in workers; each keeps ``cache_size`` compiled
templates. The persistent parse cache is off in workers unless ``parse_cache=True``: a process
running hostile templates should not write files that other processes later load.

Workers start with ``sys.executable -I`` (no ``fork`` of the server, so a threaded server is
safe) and import this very package. A worker whose parent dies ends itself. On platforms
without the :mod:`resource` module (Windows) there is no memory cap; the timeout still holds.
A worker is a separate process of the same user, not a privilege boundary: code execution
inside a worker (through a CPython bug) would have the user's rights, so run the server under
an account or container with only the rights it needs.
"""

from __future__ import annotations

import builtins
import json
import os
import pickle
import re
import subprocess
import sys
import threading
import time
import weakref

from .. import exceptions as _exceptions
from ._pool_worker import (EXIT_ORPHANED, EXIT_OUT_OF_MEMORY, MAX_HEADER, REPLY_HEAD,
                           REQUEST_HEAD)
from ..exceptions import LimitExceededError, TemplateError, TemplateRuntimeError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import datetime as _datetime
    from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

    from .pipeline import RenderResult
    from .tokens import ChatEncoding

__all__ = ["RenderPool", "RenderTimeoutError", "RenderMemoryError", "WorkerCrashedError",
           "DEFAULT_MEMORY_LIMIT", "DEFAULT_TIMEOUT"]

#: 1.5 GiB: room for a 20,000-message conversation and the engine's own limits.
DEFAULT_MEMORY_LIMIT = 3 << 29
DEFAULT_TIMEOUT = 30.0
#: How long a new worker may take to start (import the engine) before it counts as crashed.
STARTUP_TIMEOUT = 60.0

# the package's own directory goes first unless it is on the path already (site-packages must
# not move ahead of the standard library)
_BOOT = ("import sys; sys.argv[1] in sys.path or sys.path.insert(0, sys.argv[1]); "
         "from minijinja_py.chat._pool_worker import main; main()")
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HAS_POLL = hasattr(__import__("select"), "poll") and os.name == "posix"
_HAS_READV = hasattr(os, "readv")


# ---- errors ----------------------------------------------------------------------------------
class RenderTimeoutError(LimitExceededError):
    """The render did not finish within the pool's ``timeout``; its worker was killed."""


class RenderMemoryError(LimitExceededError):
    """The render ran out of memory under the pool's ``memory_limit``; its worker was
    replaced."""


class WorkerCrashedError(TemplateRuntimeError):
    """The worker process died (or sent something that is not a reply) during the render.

    ``returncode`` is the worker's exit status (negative: the signal that killed it), or None.
    """

    returncode: "Optional[int]" = None


_POOL_ERRORS = {cls.__name__: cls for cls in (RenderTimeoutError, RenderMemoryError,
                                              WorkerCrashedError)}
_TEMPLATE_ERRORS: "Dict[str, type]" = {
    name: value for name, value in vars(_exceptions).items()
    if isinstance(value, type) and issubclass(value, TemplateError)}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}\Z")


class _ProtocolError(Exception):
    """The worker's reply is not a reply (a bug or a compromised worker)."""


# ---- one worker process ----------------------------------------------------------------------
class _Worker:
    """One worker process and its pipes. Used by one thread at a time (the pool's lock)."""

    def __init__(self, executable: str, config: bytes, env: "Dict[str, str]") -> None:
        flags = ["-I", "-B"] if sys.flags.dont_write_bytecode else ["-I"]
        self.proc = subprocess.Popen(
            [executable, *flags, "-c", _BOOT, _PACKAGE_PARENT],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            bufsize=0, close_fds=True, env=env, start_new_session=(os.name == "posix"))
        self.pid = self.proc.pid
        self.in_fd = self.proc.stdin.fileno()    # type: ignore[union-attr]
        self.out_fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        self.ready = False
        self.dead = False
        self.renders = 0
        self.killed_by_pool = False
        self.memory_capped = False
        self._readable = self._writable = None
        _widen_pipe(self.in_fd)
        _widen_pipe(self.out_fd)
        if _HAS_POLL:
            import select

            os.set_blocking(self.in_fd, False)
            self._readable = select.poll()
            self._readable.register(self.out_fd, select.POLLIN | select.POLLPRI)
            self._writable = select.poll()
            self._writable.register(self.in_fd, select.POLLOUT)
        # the configuration goes at once (it fits in the pipe), so the worker starts up in the
        # background; what does not fit is sent before the first request
        self.pending = memoryview(REQUEST_HEAD.pack(len(config)) + config)
        if _HAS_POLL:
            try:
                self._send(0.0)
            except (TimeoutError, OSError):
                pass

    # -- low level ---------------------------------------------------------------------------
    def _wait(self, poller: "Any", deadline: float) -> None:
        """Until the pipe is ready (a spurious wake-up returns: the caller retries)."""
        if poller is None:  # pragma: no cover - no poll(): blocking pipes, see exchange()
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(int(remaining * 1000) + 1):
            if time.monotonic() >= deadline:
                raise TimeoutError

    def _send(self, deadline: float) -> None:
        """Write what is pending (non-blocking pipe: up to the deadline)."""
        while self.pending:
            try:
                written = os.write(self.in_fd, self.pending[:1 << 20])
            except BlockingIOError:
                self._wait(self._writable, deadline)
                continue
            self.pending = self.pending[written:]

    def _read(self, size: int, deadline: float) -> "Optional[bytearray]":
        """``size`` bytes (None at end of file). The buffer grows as data arrives, so a size
        announced by the worker costs memory only once it is really sent."""
        buffer = bytearray(min(size, 1 << 24))
        got = 0
        while got < size:
            if got == len(buffer):
                buffer.extend(bytes(min(len(buffer), size - len(buffer))))
            self._wait(self._readable, deadline)
            with memoryview(buffer) as view:
                try:
                    count = _readinto(self.out_fd, view[got:])
                except BlockingIOError:  # pragma: no cover - poll said readable
                    continue
            if count == 0:
                return None
            got += count
        return buffer

    def _read_reply(self, deadline: float, max_body: int) -> "Optional[Tuple[dict, bytearray]]":
        head = self._read(REPLY_HEAD.size, deadline)
        if head is None:
            return None
        header_size, body_size = REPLY_HEAD.unpack(head)
        if header_size > MAX_HEADER or body_size > max_body:
            raise _ProtocolError(f"reply of {header_size:,} + {body_size:,} bytes")
        raw = self._read(header_size, deadline)
        body = self._read(body_size, deadline) if raw is not None else None
        if raw is None or body is None:
            return None
        try:
            header = json.loads(bytes(raw).decode("ascii"))
        except (ValueError, RecursionError) as exc:
            raise _ProtocolError(f"header is not JSON: {exc}") from None
        if not isinstance(header, dict):
            raise _ProtocolError("header is not an object")
        return header, body

    def _start(self, deadline: float) -> bool:
        """Wait for the worker's ready message; False when it died first."""
        self._send(deadline)
        reply = self._read_reply(deadline, 0)
        if reply is None:
            return False
        header = reply[0]
        if header.get("ready") is not True or type(header.get("pid")) is not int:
            raise _ProtocolError("no ready message")
        self.memory_capped = header.get("memory_capped") is True
        self.ready = True
        return True

    def _request(self, frame: bytes, deadline: float, max_body: int
                 ) -> "Optional[Tuple[dict, bytearray]]":
        self.pending = memoryview(frame)
        try:
            self._send(deadline)
        except (BrokenPipeError, ConnectionResetError):
            # the worker stopped reading (e.g. the request does not fit under its memory
            # cap): it may have said why before exiting
            self.pending = memoryview(b"")
        return self._read_reply(deadline, max_body)

    def exchange(self, frame: bytes, timeout: float, max_body: int
                 ) -> "Optional[Tuple[dict, bytearray]]":
        """Send a request frame and read its reply (header, body); None when the worker died.

        Raises TimeoutError past ``timeout`` seconds (waiting for a new worker to start does
        not count: that has STARTUP_TIMEOUT) and _ProtocolError for a malformed reply.
        """
        try:
            if not self.ready:
                if not self._bounded(self._start, STARTUP_TIMEOUT):
                    return None
            return self._bounded(lambda deadline: self._request(frame, deadline, max_body),
                                 timeout)
        except (BrokenPipeError, ConnectionResetError):
            return None

    def _bounded(self, step: "Callable[[float], Any]", timeout: float) -> "Any":
        if _HAS_POLL:
            return step(time.monotonic() + timeout)
        # pragma: no cover - no poll() on pipes (Windows): blocking I/O in a helper thread,
        # abandoned (and unblocked by killing the worker) past the timeout
        outcome: list = []

        def run() -> None:
            try:
                outcome.append((True, step(float("inf"))))
            except BaseException as exc:  # noqa: BLE001
                outcome.append((False, exc))

        thread = threading.Thread(target=run, name="minijinja_py-pool-io", daemon=True)
        thread.start()
        thread.join(timeout)
        if not outcome:
            raise TimeoutError
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    # -- life --------------------------------------------------------------------------------
    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (if still running). Safe from any thread; the pipes stay open."""
        self.killed_by_pool = True
        try:
            self.proc.kill()
        except OSError:  # pragma: no cover - already gone
            pass

    def reap(self, grace: float = 0.0) -> "Optional[int]":
        """Wait for the process to end (killing it after ``grace`` seconds), close the pipes;
        its exit status."""
        self.dead = True
        try:
            returncode = self.proc.wait(grace) if grace else self.proc.poll()
        except subprocess.TimeoutExpired:
            returncode = None
        if returncode is None:
            self.kill()
            try:
                returncode = self.proc.wait(10.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process that will not die
                returncode = None
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        return returncode

    def ask_to_exit(self) -> None:
        """Close the worker's stdin: an idle worker exits at once."""
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    def stop(self, grace: float = 2.0) -> None:
        """End an idle worker: ask it to exit; SIGKILL after ``grace`` seconds."""
        self.ask_to_exit()
        self.reap(grace)


def _readinto(fd: int, view: memoryview) -> int:
    if _HAS_READV:
        return os.readv(fd, [view])
    chunk = os.read(fd, min(len(view), 1 << 20))  # pragma: no cover - no readv (Windows)
    view[:len(chunk)] = chunk
    return len(chunk)


def _widen_pipe(fd: int) -> None:
    """1 MiB pipes on Linux (the unprivileged maximum): fewer wake-ups for large data."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


def _stop_all(workers: "set", owner: int) -> None:
    """Finalizer of a pool that was not closed: end its workers (at exit or garbage collection),
    never from a forked child (the workers are its parent's)."""
    if os.getpid() != owner:
        return
    for worker in list(workers):
        worker.kill()
        worker.reap(0.0)
    workers.clear()


# ---- the pool --------------------------------------------------------------------------------
class RenderPool:
    """Render templates in ``processes`` worker processes, each capped at ``memory_limit``
    bytes of address space, each render bounded by ``timeout`` seconds.

    ``environment`` configures :meth:`render`: ``"chat"`` (the default) is
    :func:`~minijinja_py.chat_environment`, ``"plain"`` a default
    :class:`~minijinja_py.Environment`, and a dict gives ``Environment`` keyword options
    (``trim_blocks``, ``lstrip_blocks``, ``keep_trailing_newline``, ``undefined``,
    ``immutable``). Host functions cannot be added to a worker's filters, tests or globals.
    ``limits`` (a :class:`~minijinja_py.Limits` or a dict of its fields) applies to every
    render, ``render_chat`` included. ``now`` is what ``strftime_now()`` formats: a datetime,
    a callable called in this process once per render, or None for the clock at render time.

    ``parse_cache`` (default False) lets workers use the persistent parse cache
    (``diskcache.py``); off by default so that no process rendering hostile templates writes
    files another process later trusts. ``cache_size`` compiled templates are kept per worker
    (least recently used first out); ``max_renders`` retires a worker after that many renders
    (None: never). ``executable`` is the Python that runs the workers (default
    ``sys.executable``; set it where that is not a Python, e.g. under uWSGI); it must be able
    to import this package's dependencies. ``memory_limit=None`` means no cap.

    Thread safe: each call takes a free worker, waiting for one while all are busy. Not
    fork safe: a server that forks (gunicorn, multiprocessing) creates its pool in each child.
    """

    def __init__(self, processes: int = 2, *, memory_limit: "Optional[int]" = DEFAULT_MEMORY_LIMIT,
                 timeout: float = DEFAULT_TIMEOUT,
                 environment: "Union[str, Mapping[str, Any]]" = "chat",
                 limits: "Any" = None, now: "Any" = None, parse_cache: bool = False,
                 cache_size: int = 32, max_renders: "Optional[int]" = None,
                 executable: "Optional[str]" = None) -> None:
        if int(processes) < 1:
            raise ValueError("processes must be at least 1")
        if not timeout or timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        if memory_limit is not None and int(memory_limit) < 64 << 20:
            raise ValueError("memory_limit below 64 MiB leaves no room for Python itself")
        self.executable = executable or sys.executable
        if not self.executable:
            raise RuntimeError("sys.executable is not set (embedded Python?): give RenderPool("
                               "executable=...) the path of a Python interpreter")
        self.processes = int(processes)
        self.memory_limit = int(memory_limit) if memory_limit else None
        self.timeout = float(timeout)
        self.now = now
        self.max_renders = max_renders
        limit_fields = _limit_fields(limits)
        env_config = _environment_config(environment, limit_fields)
        self._max_body = self._reply_bound(limit_fields)
        config = {"memory_limit": self.memory_limit, "timeout": self.timeout,
                  "environment": env_config, "limits": limit_fields,
                  "parse_cache": bool(parse_cache), "cache_size": int(cache_size),
                  "parent_pid": os.getpid(),
                  "sys_path": [os.path.abspath(p) for p in sys.path if isinstance(p, str) and p]}
        config.update(_interpreter_settings())
        self._config = pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)
        self._env = dict(os.environ)
        # glibc reserves a 64 MB malloc arena per thread (the deadline watchdog is one), which
        # counts against the worker's address-space cap: two arenas are plenty for a worker
        self._env.setdefault("MALLOC_ARENA_MAX", "2")
        if not parse_cache:
            self._env["MINIJINJA_PY_CACHE"] = "0"
        self._pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._idle: "List[_Worker]" = []
        self._all: "set" = set()
        self._busy = 0
        self._missing = 0  # replacements that could not be started (retried on demand)
        self._closed = False
        self._fingerprints = _Fingerprints()
        self._finalizer = weakref.finalize(self, _stop_all, self._all, self._pid)
        for _ in range(self.processes):
            self._idle.append(self._spawn())

    # -- public API --------------------------------------------------------------------------
    def render(self, source: str, variables: "Optional[Mapping[str, Any]]" = None, /, *,
               template_name: "Optional[str]" = None, **kwargs: "Any") -> str:
        """Like ``env.from_string(source, name=template_name).render(variables, **kwargs)`` in
        the pool's environment. Variables must be picklable (they are copied to a worker);
        a template that needs a variable named ``template_name`` gets it through ``variables``.
        """
        _check_source(source, "template source must be str")
        data = dict(variables or {}, **kwargs)
        return self._render("env", source, template_name, data, False)[0]

    def render_with_spans(self, source: str, variables: "Optional[Mapping[str, Any]]" = None,
                          /, *, template_name: "Optional[str]" = None, **kwargs: "Any"
                          ) -> "Tuple[str, List[Tuple[int, int]]]":
        """Like ``Template.render_with_spans``: ``(text, [(start, end), ...])``."""
        _check_source(source, "template source must be str")
        data = dict(variables or {}, **kwargs)
        return self._render("env", source, template_name, data, True)

    def render_chat(self, source: str, messages: "Any" = None, /, tools: "Any" = None,
                    documents: "Any" = None, add_generation_prompt: bool = False,
                    continue_final_message: "Union[bool, str]" = False, *,
                    template_name: "Optional[str]" = None,
                    special_tokens: "Optional[Mapping[str, str]]" = None,
                    conversation: "Any" = None,
                    **template_kwargs: "Any") -> str:
        """Like ``ChatTemplate(source, now=pool.now, name=template_name,
        special_tokens=special_tokens).render(messages, ...)``, with the pool's limits. The
        messages may be given as ``conversation=``, transformers' name for them (not both).

        The data steps of the chat pipeline (messages to plain dicts, tools to schemas, ...) run
        in this process, so messages, tools and documents need not be picklable; only the
        template runs in a worker.
        """
        from .pipeline import _the_conversation

        messages = _the_conversation(messages, conversation, "RenderPool.render_chat")
        return self._render_chat(source, messages, tools, documents, add_generation_prompt,
                                 continue_final_message, template_name, special_tokens,
                                 template_kwargs, False).text

    def render_chat_with_spans(self, source: str, messages: "Any" = None, /, tools: "Any" = None,
                               documents: "Any" = None, add_generation_prompt: bool = False,
                               continue_final_message: "Union[bool, str]" = False, *,
                               template_name: "Optional[str]" = None,
                               special_tokens: "Optional[Mapping[str, str]]" = None,
                               conversation: "Any" = None,
                               **template_kwargs: "Any") -> "RenderResult":
        """Like ``ChatTemplate.render_with_spans``: a :class:`~minijinja_py.RenderResult`."""
        from .pipeline import _the_conversation

        messages = _the_conversation(messages, conversation, "RenderPool.render_chat_with_spans")
        return self._render_chat(source, messages, tools, documents, add_generation_prompt,
                                 continue_final_message, template_name, special_tokens,
                                 template_kwargs, True)

    def check(self, source: str, *, template_name: "Optional[str]" = None,
              chat: bool = False) -> None:
        """Parse and compile ``source`` in a worker (in the chat environment with
        ``chat=True``); raises what ``from_string`` would, e.g. TemplateSyntaxError."""
        _check_source(source, "template source must be str")
        kind = "chat" if chat else "env"
        self._call(("check", kind, source, template_name), source, template_name)

    def encode(self, model_dir: "Union[str, os.PathLike[str]]", messages: "Any" = None, /,
               tools: "Any" = None, documents: "Any" = None,
               add_generation_prompt: bool = False,
               continue_final_message: "Union[bool, str]" = False, *,
               conversation: "Any" = None, **options: "Any") -> "ChatEncoding":
        """Like ``apply_chat_template(model_dir, messages, ..., tokenize=True,
        return_dict=True, **options)`` in this process: the same
        :class:`~minijinja_py.ChatEncoding` (``input_ids``, ``attention_mask``,
        ``assistant_masks``, sanitised ids, ``text``) or the same error, with the pool's
        memory cap, timeout and limits around the render and the encoding.

        ``model_dir`` is a model folder with ``tokenizer.json`` (or that file's path). Each
        worker loads a folder's tokenizer once and keeps it (the last few folders), keyed by the
        path and a hash of the folder's files: this process hashes them again only when their
        size or modification time changed, so an edited folder is loaded afresh. ``options`` are
        ``apply_chat_template``'s (``chat_template``, ``template_name``, ``now`` (default: the
        pool's), ``sanitize_control_tokens``, ``return_assistant_tokens_mask``, ``padding``,
        ``truncation``, ``max_length``, ``tokenizer_kwargs``) and template variables; they and
        the messages are pickled to the worker, so they must be picklable (tools given as
        Python functions are not: pass their JSON schemas). ``return_tensors`` is not supported
        here: the reply holds lists of ints.
        """
        from .api import tokenizer_folder
        from .pipeline import _the_conversation
        from .tokens import ChatEncoding

        messages = _the_conversation(messages, conversation, "RenderPool.encode")
        for refused in ("tokenize", "return_dict", "return_tensors"):
            if refused in options:
                raise TypeError(f"RenderPool.encode() does not take {refused}: it always "
                                "returns a ChatEncoding of lists")
        now = options.pop("now") if "now" in options else self._moment()
        path = os.fspath(tokenizer_folder(model_dir))  # refused here as in-process
        if not isinstance(path, str):
            raise TypeError(f"model_dir must be a str path, not {type(path).__name__}")
        cwd = os.getcwd()
        args = (messages, tools, documents, add_generation_prompt, continue_final_message)
        request = ("encode", path, cwd, self._fingerprints.of(os.path.join(cwd, path)), now,
                   args, options)
        payload = _pickled(request, "RenderPool.encode arguments")
        columns, text = self._call(payload, None, None, _decode_encoding, carried=True)
        result = ChatEncoding(columns)
        result.text = text
        return result

    def worker_pids(self) -> "List[int]":
        """Process ids of the running workers (for monitoring)."""
        with self._cond:
            return sorted(worker.pid for worker in self._all if not worker.dead)

    def close(self, wait: bool = True) -> None:
        """End every worker. With ``wait`` (the default) renders in progress finish first
        (each is bounded by the timeout); without, their workers are killed and those renders
        raise WorkerCrashedError. Renders started after close() raise RuntimeError."""
        if os.getpid() != self._pid:  # a forked child: the workers are its parent's
            self._closed = True
            return
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = [worker for worker in self._all if worker not in idle]
            self._cond.notify_all()
        for worker in idle:  # all asked at once, then each waited for
            worker.ask_to_exit()
        for worker in idle:
            worker.reap(2.0)
            self._forget(worker)
        if not wait:
            for worker in busy:
                worker.kill()
        with self._cond:
            while self._busy:
                self._cond.wait()

    def __enter__(self) -> "RenderPool":
        return self

    def __exit__(self, *exc_info: "Any") -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._all)} workers"
        return (f"<RenderPool {state}, memory_limit={self.memory_limit}, "
                f"timeout={self.timeout:g}>")

    # -- internals ---------------------------------------------------------------------------
    def _reply_bound(self, limit_fields: "Optional[Dict[str, int]]") -> int:
        """The most bytes a genuine reply can have: no worker holds more than its memory."""
        if self.memory_limit:
            return self.memory_limit + (1 << 20)
        from ..guard.limits import Limits

        limits = Limits(**(limit_fields or {}))
        return 4 * (limits.max_output_size + limits.max_string_size) + (1 << 20)

    def _spawn(self) -> _Worker:
        worker = _Worker(self.executable, self._config, self._env)
        with self._cond:
            self._all.add(worker)
        return worker

    def _forget(self, worker: _Worker) -> None:
        with self._cond:
            self._all.discard(worker)

    def _acquire(self) -> _Worker:
        if os.getpid() != self._pid:
            raise RuntimeError("a RenderPool cannot be used in a forked child process (its pipes "
                               "belong to the parent): create the pool after forking")
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("this RenderPool is closed")
                self._busy += 1
                if self._idle:
                    return self._idle.pop()  # the most recently used: its caches are warm
                if self._missing:  # a replacement could not be started: try again
                    self._missing -= 1
                    break
                self._busy -= 1
                self._cond.wait()
        try:
            return self._spawn()
        except BaseException:
            with self._cond:
                self._missing += 1
                self._busy -= 1
                self._cond.notify_all()
            raise

    def _release(self, worker: "Optional[_Worker]", healthy: bool) -> None:
        """Return a worker after a request; an unhealthy one is ended and replaced."""
        if worker is not None and healthy and self.max_renders is not None \
                and worker.renders >= self.max_renders:
            healthy = False
        if worker is None:  # the replacement of a dead idle worker could not be started
            with self._cond:
                if not self._closed:
                    self._missing += 1
        elif not healthy:
            if not worker.dead:
                worker.kill()
                worker.reap()
            self._forget(worker)
            worker = None
            with self._cond:
                closed = self._closed
            if not closed:
                try:
                    worker = self._spawn()
                except Exception:  # noqa: BLE001 - e.g. out of processes: retried on demand
                    with self._cond:
                        self._missing += 1
        closing = None
        with self._cond:
            self._busy -= 1
            if worker is not None:
                if self._closed:
                    closing = worker
                else:
                    self._idle.append(worker)
            self._cond.notify_all()
        if closing is not None:
            closing.stop()
            self._forget(closing)

    def _render(self, kind: str, source: str, name: "Optional[str]", variables: "Dict[str, Any]",
                spans: bool) -> "Tuple[str, List[Tuple[int, int]]]":
        request = ("render", kind, source, name, variables, spans, self._moment())
        payload = _pickled(request, "RenderPool variables")
        return self._call(payload, source, name,
                          lambda header, body: _decode_result(header, body, spans))

    def _render_chat(self, source: str, messages: "Any", tools: "Any", documents: "Any",
                     add_generation_prompt: "Any", continue_final_message: "Union[bool, str]",
                     name: "Optional[str]", special_tokens: "Any",
                     template_kwargs: "Dict[str, Any]", spans: bool) -> "RenderResult":
        from . import pipeline as chat

        _check_source(source, "a chat template source must be str")
        shell = chat.ChatTemplate.__new__(chat.ChatTemplate)  # the data steps, no parsing here
        shell.source = source
        shell.name = name
        shell.template_name = None
        shell.special_tokens = dict(special_tokens or {})
        try:
            variables, final_text = shell._prepare(messages, tools, documents,
                                                   add_generation_prompt,
                                                   continue_final_message, template_kwargs)
        except Exception:
            # in-process, ChatTemplate(source) parses before any data is looked at: a syntax
            # error wins over a data error
            self._call(("check", "chat", source, name), source, name)
            raise
        text, span_list = self._render("chat", source, name, variables, spans)
        if final_text is not None:
            text = chat._cut_at_marker(text, final_text)
            span_list = chat._clip_spans(span_list, len(text))
        return chat.RenderResult(text, span_list)

    def _moment(self) -> "Optional[_datetime.datetime]":
        now = self.now
        return now() if callable(now) else now

    def _call(self, request: "Any", source: "Optional[str]", name: "Optional[str]",
              decode: "Optional[Callable[[dict, bytearray], Any]]" = None,
              carried: bool = False) -> "Any":
        """Run one request on a free worker: ``decode(header, body)`` of a successful reply
        (None without ``decode``), or the request's error raised. ``carried``: the worker
        sends an error's template name and source (requests whose template the parent does
        not have, such as a model folder's)."""
        if not isinstance(request, bytes):
            request = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        frame = REQUEST_HEAD.pack(len(request)) + request
        worker: "Optional[_Worker]" = self._acquire()
        healthy = False
        try:
            if not worker.alive():  # died while idle (killed from outside): a fresh one
                worker.reap()
                self._forget(worker)
                worker = None
                worker = self._spawn()
            try:
                reply = worker.exchange(frame, self.timeout, self._max_body)
            except TimeoutError:
                worker.kill()
                worker.reap()
                if not worker.ready:
                    raise self._crashed(worker, "did not start within "
                                        f"{STARTUP_TIMEOUT:g} seconds", source, name) from None
                raise _located(RenderTimeoutError(
                    f"the render did not finish within the pool's timeout of {self.timeout:g}"
                    " seconds (RenderPool(timeout=...)); its worker process was stopped"),
                    source, name) from None
            except _ProtocolError as exc:
                raise self._crashed(worker, f"sent a malformed reply ({exc})", source,
                                    name) from None
            if reply is None:
                returncode = worker.reap(5.0)
                if returncode == EXIT_OUT_OF_MEMORY:
                    raise self._memory_error(None, None, source, name)
                what = _describe_exit(returncode, worker)
                if not worker.ready:
                    what = f"could not start ({what}; is memory_limit too low?)"
                raise self._crashed(worker, what, source, name, returncode)
            header, body = reply
            worker.renders += 1
            if header.get("memory") is True:
                worker.reap(5.0)  # it exits after this reply
                raise self._memory_error(_optional_int(header.get("lineno")),
                                         _optional_int(header.get("column")), source, name)
            try:
                if header.get("ok") is True:
                    outcome = decode(header, body) if decode is not None else None
                else:
                    outcome = _rebuild_error(header, body, source, name, carried)
            except _ProtocolError as exc:
                raise self._crashed(worker, f"sent a malformed reply ({exc})", source,
                                    name) from None
            healthy = True
        finally:
            self._release(worker, healthy)
        if header.get("ok") is True:
            return outcome
        raise outcome

    def _memory_error(self, lineno: "Optional[int]", column: "Optional[int]", source: str,
                      name: "Optional[str]") -> TemplateError:
        limit = f"{self.memory_limit:,} bytes" if self.memory_limit else "the system's memory"
        err = RenderMemoryError(
            f"out of memory while rendering: the worker process reached the pool's memory limit"
            f" ({limit}; RenderPool(memory_limit=...)) and was replaced", lineno, column)
        return _located(err, source, name)

    def _crashed(self, worker: _Worker, what: str, source: str, name: "Optional[str]",
                 returncode: "Optional[int]" = None) -> TemplateError:
        with self._cond:
            closed = self._closed
        if closed and worker.killed_by_pool:
            what = "was stopped because the pool was closed"
        err = WorkerCrashedError(f"the worker process rendering this template {what}; the"
                                 " template was not rendered and the pool replaced the worker")
        err.returncode = returncode
        return _located(err, source, name)


# ---- helpers ---------------------------------------------------------------------------------
def _pickled(request: tuple, what: str) -> bytes:
    """``request`` pickled for a worker; what cannot be is a TypeError naming ``what``."""
    try:
        return pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(f"{what} must be picklable: {exc}") from exc
    except RecursionError:
        raise TypeError(f"{what} are nested too deeply to be copied to a worker process"
                        ) from None


def _check_source(source: "Any", message: str) -> None:
    if not isinstance(source, str):
        raise TypeError(f"{message}, not {type(source).__name__}")


def _interpreter_settings() -> "Dict[str, Any]":
    """Settings of this interpreter that can change what a render prints, for the workers
    (``-I`` makes them ignore the PYTHON* environment variables)."""
    settings: "Dict[str, Any]" = {}
    get_digits = getattr(sys, "get_int_max_str_digits", None)
    if get_digits is not None:
        settings["int_max_str_digits"] = get_digits()
    try:
        import locale

        settings["lc_time"] = locale.setlocale(locale.LC_TIME)  # strftime_now's month names
    except (ImportError, locale.Error, ValueError):  # pragma: no cover
        pass
    return settings


def _limit_fields(limits: "Any") -> "Optional[Dict[str, int]]":
    if limits is None:
        return None
    from ..guard.limits import Limits

    if isinstance(limits, Limits):
        return {field: getattr(limits, field) for field in Limits.FIELDS}
    if isinstance(limits, dict):
        Limits(**limits)  # unknown fields: TypeError here, not in every worker
        return dict(limits)
    raise TypeError(f"limits must be a Limits or a dict of its fields, not "
                    f"{type(limits).__name__}")


def _environment_config(environment: "Any", limit_fields: "Any") -> "Any":
    if environment == "chat":
        return "chat"
    if environment == "plain":
        return {}
    if isinstance(environment, dict):
        options = dict(environment)
        if "limits" in options:
            raise TypeError("give limits to RenderPool(limits=...), not in environment")
        from ..environment import Environment

        Environment(**options)  # bad options fail here, not in every worker
        pickle.dumps(options)
        return options
    raise ValueError(f"environment must be 'chat', 'plain' or a dict of Environment options, "
                     f"not {environment!r}")


def _located(err: TemplateError, source: str, name: "Optional[str]") -> TemplateError:
    err._attach_source(name, source)
    return err


def _int(value: "Any") -> "Optional[int]":
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= 1 << 40:
        raise _ProtocolError("line/column is not a small int")
    return value


def _optional_int(value: "Any") -> "Optional[int]":
    """A location for a memory error: a bad one is dropped (the error stands either way)."""
    try:
        return _int(value)
    except _ProtocolError:
        return None


def _describe_exit(returncode: "Optional[int]", worker: _Worker) -> str:
    if returncode is None:
        return "stopped replying"
    if returncode < 0:
        import signal

        try:
            label = signal.Signals(-returncode).name
        except ValueError:
            label = f"signal {-returncode}"
        if -returncode == getattr(signal, "SIGKILL", 9) and not worker.killed_by_pool:
            return (f"was killed ({label}; by the system's out-of-memory killer or an "
                    f"administrator)")
        return f"died ({label})"
    if returncode == EXIT_ORPHANED:
        return "lost its parent"
    return f"exited with status {returncode}"


def _blobs(header: dict, body: bytearray, count: int) -> "List[bytes]":
    sizes = header.get("blobs")
    if (not isinstance(sizes, list) or len(sizes) != count
            or not all(type(size) is int and size >= 0 for size in sizes)
            or sum(sizes) != len(body)):
        raise _ProtocolError("blob sizes do not match the body")
    view = memoryview(body)
    out, at = [], 0
    for size in sizes:
        out.append(view[at:at + size])
        at += size
    return out


def _text(blob: "Any") -> str:
    try:
        return str(blob, "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise _ProtocolError("a string is not UTF-8") from None


def _decode_result(header: dict, body: bytearray, spans: bool
                   ) -> "Tuple[str, List[Tuple[int, int]]]":
    if not spans:
        (text_blob,) = _blobs(header, body, 1)
        return _text(text_blob), []
    text_blob, span_blob = _blobs(header, body, 2)
    if len(span_blob) % 16:
        raise _ProtocolError("spans are not pairs of 64-bit ints")
    from array import array

    flat = array("q")
    flat.frombytes(span_blob)
    text = _text(text_blob)
    return text, list(zip(flat[0::2], flat[1::2]))


#: The files of a model folder that loading its tokenizer reads (the folder's content hash).
_FOLDER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "chat_template.jinja", "chat_template.json")
_TEMPLATE_FOLDER = "additional_chat_templates"
#: A file larger than any the worker would load (tokens.MAX_TOKENIZER_BYTES) is not read here:
#: its size and time stand for it, and the worker refuses it.
_MOST_HASHED = 512 << 20


class _Fingerprints:
    """Content hashes of model folders, computed again only when a file's size, modification
    time or inode changed (the last few folders are remembered)."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self.known: "Dict[str, Tuple[tuple, str]]" = {}
        self.lock = threading.Lock()

    @staticmethod
    def _files(path: str) -> "List[str]":
        directory = path if os.path.isdir(path) else os.path.dirname(path)
        files = [os.path.join(directory, name) for name in _FOLDER_FILES]
        extra = os.path.join(directory, _TEMPLATE_FOLDER)
        try:
            files += [os.path.join(extra, name) for name in sorted(os.listdir(extra))]
        except OSError:
            pass
        return files

    def of(self, path: str) -> str:
        files = self._files(path)
        stamps = tuple(_stamp(file) for file in files)
        with self.lock:
            known = self.known.get(path)
        if known is not None and known[0] == stamps:
            return known[1]
        import hashlib

        digest = hashlib.sha256()
        for file, stamp in zip(files, stamps):
            digest.update(repr((os.path.basename(file), stamp[1:])).encode())
            if stamp[0] and stamp[1] <= _MOST_HASHED:
                _hash_file(file, digest, _MOST_HASHED)
        fingerprint = digest.hexdigest()
        with self.lock:
            self.known.pop(path, None)
            self.known[path] = (stamps, fingerprint)
            while len(self.known) > self.size:
                del self.known[next(iter(self.known))]
        return fingerprint


def _stamp(file: str) -> tuple:
    """(regular file?, size, mtime, inode), or (False,) when it does not exist."""
    import stat

    try:
        status = os.stat(file)
    except OSError:
        return (False,)
    return (stat.S_ISREG(status.st_mode), status.st_size, status.st_mtime_ns, status.st_ino)


def _hash_file(file: str, digest: "Any", most: int) -> None:
    """Add a regular file's bytes (at most ``most``) to ``digest``; anything else (a FIFO
    swapped in, a file that went away) adds nothing, since the worker reports what is wrong
    with the folder."""
    import stat

    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        while most > 0:
            chunk = os.read(fd, min(1 << 20, most))
            if not chunk:
                return
            digest.update(chunk)
            most -= len(chunk)
    except OSError:
        return
    finally:
        os.close(fd)


#: The columns an encoding may have; offset_mapping holds (start, end) pairs.
_ENCODING_COLUMNS = {"input_ids": 1, "attention_mask": 1, "assistant_masks": 1,
                     "offset_mapping": 2}


def _decode_encoding(header: dict, body: bytearray) -> "Tuple[Dict[str, Any], Any]":
    """(columns, text) of an encode reply: every field checked, nothing evaluated."""
    from array import array

    batched, columns = header.get("batched"), header.get("columns")
    if type(batched) is not bool or not isinstance(columns, list) or not columns:
        raise _ProtocolError("encode reply without its columns")
    shapes = []
    for entry in columns:
        if (not isinstance(entry, list) or len(entry) != 2 or entry[0] not in _ENCODING_COLUMNS
                or not isinstance(entry[1], list)
                or not all(type(n) is int and n >= 0 for n in entry[1])):
            raise _ProtocolError("a column is not a name and row lengths")
        shapes.append((entry[0], entry[1]))
    rows = len(shapes[0][1])
    if any(len(lengths) != rows for _, lengths in shapes) or (not batched and rows != 1):
        raise _ProtocolError("columns of different row counts")
    blobs = _blobs(header, body, len(shapes) + rows)
    result: "Dict[str, Any]" = {}
    for (column, lengths), blob in zip(shapes, blobs):
        width = _ENCODING_COLUMNS[column]
        if len(blob) != 8 * width * sum(lengths):
            raise _ProtocolError(f"{column} does not match its row lengths")
        flat = array("q")
        flat.frombytes(blob)
        values = flat.tolist()
        if width == 2:
            values = list(zip(values[0::2], values[1::2]))
        table, at = [], 0
        for length in lengths:
            table.append(values[at:at + length])
            at += length
        result[column] = table if batched else table[0]
    texts = [_text(blob) for blob in blobs[len(shapes):]]
    return result, texts if batched else texts[0]


def _builtin_exception(name: "Any") -> "Optional[type]":
    if not isinstance(name, str) or not _NAME.match(name):
        return None
    value = getattr(builtins, name, None)
    if isinstance(value, type) and issubclass(value, Exception):
        return value
    return None


def _chat_error_class(name: str) -> "Optional[type]":
    """The chat layer's own error classes, by name (imported only when an error names one)."""
    where = _CHAT_ERRORS.get(name)
    if where is None:
        return None
    import importlib

    return getattr(importlib.import_module(where, __package__), name)


#: Errors of the chat layer an encode can raise in the worker: rebuilt as the same class.
_CHAT_ERRORS = {"ChatConfigError": ".files", "GGUFError": ".gguf",
                "ChatTemplateValueError": ".pipeline", "UnencodableTextError": ".tokens",
                "TokenizersNotInstalledError": ".tokens",
                "TensorLibraryNotInstalledError": ".tokenizer_api"}


def _rebuild_error(header: dict, body: bytearray, source: "Optional[str]", name: "Optional[str]",
                   carried: bool = False) -> Exception:
    """The worker's error as the same class, message, location, name and source (with
    ``carried``, the name and source the worker sent after the message)."""
    class_name = header.get("class")
    if not isinstance(class_name, str) or not _NAME.match(class_name):
        raise _ProtocolError("error class is not a name")
    template_error = header.get("template_error") is True
    has_message = header.get("message_none") is not True
    carries = carried and template_error and header.get("carried") is True
    located = [header.get(key) is True for key in ("name", "source")] if carries else []
    strings = [_text(blob) for blob in _blobs(header, body, has_message + sum(located))]
    message = strings.pop(0) if has_message else None
    if carries:
        name = strings.pop(0) if located[0] else None
        source = strings.pop(0) if located[1] else None
    if not template_error:
        # not a TemplateError: an engine bug escaped, or a chat error that is a ValueError
        # (ChatConfigError...); the same class as in-process
        cls = (_chat_error_class(class_name) or _builtin_exception(class_name)
               or _builtin_exception(header.get("builtin")))
        if cls is not None:
            try:
                return cls(message)
            except Exception:  # noqa: BLE001 - a class that takes other arguments
                pass
        return TemplateRuntimeError(f"{class_name}: {message}")
    cls = (_TEMPLATE_ERRORS.get(class_name) or _POOL_ERRORS.get(class_name)
           or _chat_error_class(class_name))
    if cls is None:
        python_class = _builtin_exception(header.get("builtin"))
        if python_class is not None and not issubclass(python_class, TemplateError):
            candidate = _exceptions._wrapper_class(python_class)
            if candidate.__name__ == class_name:
                cls = candidate
    if cls is None:
        mro = header.get("mro")
        for base in mro if isinstance(mro, list) else ():
            cls = _TEMPLATE_ERRORS.get(base) if isinstance(base, str) else None
            if cls is not None:
                break
    if cls is None:
        cls = TemplateError
    err = cls(message, _int(header.get("lineno")), _int(header.get("column")),
              name if header.get("name") is True else None,
              source if header.get("source") is True else None)
    err.show_location = header.get("show_location") is not False
    python_type = header.get("python_type")
    if isinstance(python_type, str) and _NAME.match(python_type):
        err.python_type = python_type  # type: ignore[attr-defined]
    return err

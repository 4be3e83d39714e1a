"""The worker process of :class:`minijinja_py.chat.pool.RenderPool` (started by the pool, never
imported by user code).

It runs as ``python -I -c <boot> <package parent>`` with a pipe on stdin and one on stdout.

Protocol (the parent is trusted, the worker is not):

* parent -> worker: ``>Q`` length + a pickle. The first message is the configuration (a dict of
  plain values); every later one is a request tuple (see :func:`_handle`). EOF on stdin ends
  the worker.
* worker -> parent: ``>IQ`` (header length, body length), a JSON header (ASCII, a flat dict of
  plain values) and a body: the raw strings of the reply (the rendered text, or an error
  message), each encoded as UTF-8 with ``surrogatepass`` so that lone surrogates survive, and
  generation spans and an encoding's columns (``"encode"`` requests: ids, masks, offsets) as
  native 64-bit integers; the errors of an encode also carry the template's name and source,
  which the parent did not send. The parent never unpickles anything the worker
  sends and checks every field of the header (``pool._decode_reply``).

Before importing the engine the worker caps its own address space at the pool's memory limit
(``RLIMIT_AS``; skipped where the :mod:`resource` module does not exist), turns off core dumps,
and moves the protocol pipes off file descriptors 0 and 1 so that nothing a render does can
write into the protocol. A MemoryError is answered as a memory-limit error, after which the
worker exits (its heap may be fragmented) and the parent starts a fresh one. A thread watches
for the parent's death, so an orphaned worker ends itself.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time

REQUEST_HEAD = struct.Struct(">Q")
REPLY_HEAD = struct.Struct(">IQ")
#: Most bytes of a reply's JSON header (the strings travel in the body).
MAX_HEADER = 1 << 16
#: Exit status of a worker that ran out of memory and could not even say so.
EXIT_OUT_OF_MEMORY = 86
#: Exit status of a worker whose parent went away.
EXIT_ORPHANED = 87

_CHUNK = 1 << 20
#: Tokenizers each worker keeps loaded (least recently used first out).
TOKENIZER_CACHE_SIZE = 4


def _read_exact(fd: int, size: int) -> "bytes | None":
    """``size`` bytes from ``fd``, or None at end of file."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        count = os.readv(fd, [view[got:]]) if hasattr(os, "readv") else _read_into(fd, view, got)
        if count == 0:
            return None
        got += count
    return bytes(buffer)


def _read_into(fd: int, view: memoryview, at: int) -> int:  # pragma: no cover - no readv
    chunk = os.read(fd, min(len(view) - at, _CHUNK))
    view[at:at + len(chunk)] = chunk
    return len(chunk)


def _write_all(fd: int, data: "bytes | memoryview") -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view[:_CHUNK])
        view = view[written:]


def read_request(fd: int) -> object:
    """The next message from the parent, or None at end of file."""
    import pickle

    head = _read_exact(fd, REQUEST_HEAD.size)
    if head is None:
        return None
    payload = _read_exact(fd, REQUEST_HEAD.unpack(head)[0])
    if payload is None:
        return None
    return pickle.loads(payload)  # the parent is trusted


def encode_reply(header: dict, blobs: "list[bytes]" = ()) -> bytes:
    """One reply frame. ``header["blobs"]`` records the byte length of each blob."""
    header = dict(header, blobs=[len(blob) for blob in blobs])
    head = json.dumps(header, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    body_length = sum(len(blob) for blob in blobs)
    return b"".join([REPLY_HEAD.pack(len(head), body_length), head, *blobs])


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


# ---- the worker ------------------------------------------------------------------------------
class _Worker:
    def __init__(self, config: dict) -> None:
        from collections import OrderedDict

        import minijinja_py as mj
        from minijinja_py import exceptions
        from minijinja_py.environment import Environment, chat_environment

        self.config = config
        self.mj = mj
        self.exceptions = exceptions
        self.clock: list = [None]
        clock = self.clock
        options: dict = {"parse_cache": bool(config["parse_cache"])}
        if config["limits"] is not None:
            options["limits"] = mj.Limits(**config["limits"])
        # strftime_now() formats whatever moment the parent sent with the request
        self.chat_env = chat_environment(now=lambda: clock[0], **options)
        if config["environment"] == "chat":
            self.env = self.chat_env
        else:
            self.env = Environment(**{**options, **config["environment"]})
        self.envs = {"chat": self.chat_env, "env": self.env}
        self.cache: "OrderedDict[tuple, object]" = OrderedDict()
        self.cache_size = max(1, int(config["cache_size"]))
        self.tokenizers: "OrderedDict[tuple, object]" = OrderedDict()
        _use_pool_limits(options)
        self.warm_up()

    def warm_up(self) -> None:
        """Import what a first render would (parser tables, compiler, filters) before saying
        ready, so that no render pays for it. Nothing of it stays in the caches."""
        source = ("{% for m in messages %}{{ m.role | trim }}{{ m.content | tojson }}"
                  "{% if loop.last %}{{ strftime_now('%Y') }}{% endif %}{% endfor %}")
        for env in (self.chat_env, self.env):
            try:
                env.from_string(source).render(messages=[{"role": "u", "content": "x"}])
            except Exception:  # a plain environment without strftime_now: imports are done
                pass
            compiled = getattr(env, "_cache", None)
            if isinstance(compiled, dict):
                compiled.clear()

    def template(self, kind: str, source: str, name: "str | None") -> object:
        if self.env is self.chat_env:
            kind = "chat"  # one compiled copy for render() and render_chat()
        key = (kind, source, name)
        template = self.cache.get(key)
        if template is not None:
            self.cache.move_to_end(key)
            return template
        env = self.envs[kind]
        template = env.from_string(source, name=name)
        self.cache[key] = template
        if len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        compiled = getattr(env, "_cache", None)  # the environment's own cache: same bound
        if isinstance(compiled, dict):
            while len(compiled) > self.cache_size:
                del compiled[next(iter(compiled))]
        return template

    def handle(self, request: tuple) -> "tuple[bytes, bool]":
        """The reply to one request, and whether the worker must exit after sending it."""
        op = request[0]
        try:
            if op == "render":
                _, kind, source, name, variables, spans, now = request
                self.clock[0] = now
                template = self.template(kind, source, name)
                if spans:
                    text, span_list = template.render_with_spans(variables)
                    from array import array

                    flat = array("q")
                    for start, end in span_list:
                        flat.append(int(start))
                        flat.append(int(end))
                    return encode_reply({"ok": True}, [_text_bytes(text), flat.tobytes()]), False
                return encode_reply({"ok": True}, [_text_bytes(template.render(variables))]), False
            if op == "encode":
                return self.encode(*request[1:]), False
            if op == "check":
                _, kind, source, name = request
                self.template(kind, source, name)
                return encode_reply({"ok": True}, [b""]), False
            raise ValueError(f"unknown request {op!r}")
        except MemoryError as exc:
            reply = self.memory_reply(exc)
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            if _caused_by_memory(exc):
                reply = self.memory_reply(exc)
            else:
                reply = self.error_reply(exc, carry_location=(op == "encode"))
                return reply, False
        return reply, True

    def tokenizer(self, path: str, cwd: str, fingerprint: str) -> object:
        """The folder's tokenizer, loaded once per (path as given, directory, content hash):
        a folder whose files changed is loaded again (the parent hashes them)."""
        key = (path, cwd, fingerprint)
        tokenizer = self.tokenizers.get(key)
        if tokenizer is not None:
            self.tokenizers.move_to_end(key)
            return tokenizer
        from minijinja_py.chat.tokens import ChatTokenizer

        tokenizer = ChatTokenizer.from_pretrained(path)
        self.tokenizers[key] = tokenizer
        while len(self.tokenizers) > TOKENIZER_CACHE_SIZE:
            self.tokenizers.popitem(last=False)
        return tokenizer

    def encode(self, path: str, cwd: str, fingerprint: str, now: object, args: tuple,
               options: dict) -> bytes:
        """``apply_chat_template(<the folder's tokenizer>, *args, tokenize=True, **options)``
        as a reply: each column's rows as 64-bit ints, then the text of each row."""
        from array import array

        from minijinja_py.chat import api

        if os.getcwd() != cwd:  # relative paths and messages as the caller's process sees them
            os.chdir(cwd)
        tokenizer = self.tokenizer(path, cwd, fingerprint)
        encoding = api.apply_chat_template(tokenizer, *args, tokenize=True, return_dict=True,
                                           now=now, **options)
        batched = isinstance(encoding.text, list)
        texts = encoding.text if batched else [encoding.text]
        columns, blobs = [], []
        for column, rows in encoding.items():
            rows = rows if batched else [rows]
            pairs = column == "offset_mapping"
            flat = array("q")
            for row in rows:
                for value in row:
                    flat.extend(value if pairs else (value,))
            columns.append([column, [len(row) for row in rows]])
            blobs.append(flat.tobytes())
        blobs.extend(_text_bytes(text) for text in texts)
        return encode_reply({"ok": True, "batched": batched, "columns": columns}, blobs)

    def memory_reply(self, exc: BaseException) -> bytes:
        return encode_reply({"ok": False, "memory": True,
                             "lineno": _int_or_none(getattr(exc, "lineno", None)),
                             "column": _int_or_none(getattr(exc, "column", None))}, [])

    def error_reply(self, exc: BaseException, carry_location: bool = False) -> bytes:
        """The error as a header and its strings; with ``carry_location`` the template's name
        and source follow the message in the body (the parent sent no template of its own)."""
        exceptions = self.exceptions
        cls = type(exc)
        header: dict = {"ok": False, "class": cls.__name__,
                        "mro": [c.__name__ for c in cls.__mro__][:32]}
        builtin = next((c for c in cls.__mro__ if c.__module__ == "builtins"), Exception)
        header["builtin"] = builtin.__name__
        message = None
        if isinstance(exc, exceptions.TemplateError):
            header["template_error"] = True
            message = exc.message
            header["lineno"] = _int_or_none(exc.lineno)
            header["column"] = _int_or_none(exc.column)
            header["show_location"] = bool(exc.show_location)
            # the parent attaches its own copies of the name and source it sent
            header["name"] = exc.name is not None
            header["source"] = exc.source is not None
            python_type = getattr(exc, "python_type", None)
            if isinstance(python_type, str):
                header["python_type"] = python_type[:200]
        else:
            header["template_error"] = False
            try:
                message = str(exc)
            except Exception:  # noqa: BLE001
                message = ""
        blobs = []
        if message is None:
            header["message_none"] = True
        else:
            blobs.append(_text_bytes(str(message)))
        if carry_location and header.get("template_error"):
            header["carried"] = True
            blobs.extend(_text_bytes(str(text)) for text in (exc.name, exc.source)
                         if text is not None)
        return encode_reply(header, blobs)


def _use_pool_limits(options: dict) -> None:
    """Make the chat templates a tokenizer compiles (``pipeline._environment_for``) use the
    pool's limits and parse cache setting, as every other render in the worker does. The
    worker is this process's only user of the pipeline, so the module function is replaced."""
    from minijinja_py.chat import pipeline
    from minijinja_py.environment import chat_environment

    shared: dict = {}

    def environment_for(now: object) -> object:
        if callable(now):
            return chat_environment(now=now, **options)
        env = shared.get(now)
        if env is None:
            env = shared[now] = chat_environment(now=now, **options)
            while len(shared) > 4:
                del shared[next(iter(shared))]
        return env

    pipeline._environment_for = environment_for


def _int_or_none(value: object) -> "int | None":
    return value if type(value) is int else None


def _caused_by_memory(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _cap_resources(memory_limit: "int | None") -> bool:
    """Cap the address space and turn off core dumps; True when the memory cap is in place."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return False
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    if not memory_limit:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    except (ValueError, OSError):
        return False
    return True


def _watch_parent(parent_pid: int) -> None:
    """End this worker when the parent is gone (its pipes would keep an idle worker waiting
    forever, and a busy one would finish its render for nobody)."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="minijinja_py-parent-watch", daemon=True).start()


class _CpuBackstop:
    """A CPU-time ceiling ``seconds`` above what the worker has used, renewed before each
    request: a backstop should the parent not stop a runaway render (the parent's
    wall-clock timeout is the real bound). SIGXCPU ends the worker."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.current = -1
        try:
            import resource

            self.resource = resource
            self.hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        except (ImportError, ValueError, OSError):  # pragma: no cover - Windows
            self.resource = None

    def renew(self) -> None:
        resource = self.resource
        if resource is None:  # pragma: no cover
            return
        wanted = int(time.process_time() + self.seconds) + 1
        if self.hard != resource.RLIM_INFINITY:
            wanted = min(wanted, self.hard)
        if wanted != self.current:  # changes about once per CPU second: one syscall then
            try:
                resource.setrlimit(resource.RLIMIT_CPU, (wanted, self.hard))
                self.current = wanted
            except (ValueError, OSError):
                self.resource = None


def _apply_interpreter_settings(config: dict) -> None:
    """The parent's settings that change what a render prints (see pool._interpreter_settings)."""
    digits = config.get("int_max_str_digits")
    if digits is not None and hasattr(sys, "set_int_max_str_digits"):
        try:
            sys.set_int_max_str_digits(digits)
        except ValueError:
            pass
    lc_time = config.get("lc_time")
    if lc_time and lc_time != "C":
        try:
            import locale

            locale.setlocale(locale.LC_TIME, lc_time)
        except (ImportError, ValueError, OSError):
            pass


def main() -> None:
    # The protocol pipes move off fds 0 and 1; those become /dev/null so that no print or
    # stray write (of this process or of a library) can corrupt the protocol.
    in_fd = os.dup(0)
    out_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    try:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent to handle
    except (ImportError, ValueError, OSError):  # pragma: no cover
        pass

    config = read_request(in_fd)
    if not isinstance(config, dict):
        os._exit(2)
    capped = _cap_resources(config.get("memory_limit"))
    for entry in config.get("sys_path", ()):
        if isinstance(entry, str) and entry not in sys.path:
            sys.path.append(entry)  # after the standard library: for unpickling host data
    _apply_interpreter_settings(config)
    if not config.get("parse_cache"):
        os.environ["MINIJINJA_PY_CACHE"] = "0"
    _watch_parent(int(config["parent_pid"]))
    backstop = _CpuBackstop(float(config.get("timeout") or 0) * 2 + 10)
    try:
        worker = _Worker(config)
        ready = encode_reply({"ok": True, "ready": True, "pid": os.getpid(),
                              "memory_capped": capped})
    except MemoryError:
        os._exit(EXIT_OUT_OF_MEMORY)
    _write_all(out_fd, ready)
    del ready
    while True:
        try:
            request = read_request(in_fd)
        except MemoryError:
            # the request itself does not fit under the cap
            _write_all(out_fd, worker.memory_reply(MemoryError()))
            os._exit(0)
        if request is None:
            os._exit(0)
        if config.get("timeout"):
            backstop.renew()
        try:
            reply, leave = worker.handle(request)
            del request
            _write_all(out_fd, reply)
            del reply
        except MemoryError:
            os._exit(EXIT_OUT_OF_MEMORY)
        if leave:
            os._exit(0)


if __name__ == "__main__":
    main()

"""``run_forked``: a test's own check run in a forked child process with its own timeout and
memory cap, for checks that a bug would make hang or exhaust the machine (a deadline that never
fires, a decoder without its item budget): the test then fails instead of hanging the run.
(tests/security/security_support.py's ``run_isolated`` does the same for one render in a fresh
interpreter.)"""

from __future__ import annotations

import os
import time
from typing import Any

#: Address space a forked child may add to what it inherited (see run_forked).
FORKED_MEMORY = 2 * 2 ** 30


def _address_space() -> int:
    """Bytes of address space this process has now (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def run_forked(function: Any, *args: Any, timeout: float = 60.0,
               memory: int = FORKED_MEMORY) -> Any:
    """``function(*args)`` run in a forked child of this test process, which it leaves at
    once: its return value (pickled back), or the child's exception re-raised here as an
    AssertionError with its traceback. A child still running after ``timeout`` seconds is
    killed and the test fails, as it does when the child dies: a bug that makes the check
    hang, or eat memory (the child may add ``memory`` bytes of address space to what it
    inherits), fails one test instead of hanging the run. The child inherits everything:
    the render mode the test installed, monkeypatches, the engine already imported."""
    import pickle
    import resource
    import signal
    import traceback

    import pytest

    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, then leave without running pytest's exit
        status = 0
        try:
            os.close(read_end)
            used = _address_space()
            if used and memory:
                resource.setrlimit(resource.RLIMIT_AS, (used + memory, used + memory))
            try:
                reply = ("ok", function(*args))
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                reply = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            with os.fdopen(write_end, "wb") as writer:
                writer.write(pickle.dumps(reply))
        except BaseException:  # noqa: BLE001 - nothing may escape into the test run
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + timeout
    with os.fdopen(read_end, "rb") as reader:
        os.set_blocking(reader.fileno(), False)
        while True:
            try:
                chunk = reader.read()
            except BlockingIOError:
                chunk = None
            if chunk:
                chunks.append(chunk)
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                rest = reader.read()
                if rest:
                    chunks.append(rest)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"the check did not finish within {timeout:.0f} s (killed)")
            time.sleep(0.01)
    if not chunks:
        pytest.fail(f"the child died without a result (wait status {status})")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise AssertionError(f"in the child: {value}")
    return value

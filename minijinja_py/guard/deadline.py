"""The wall-clock deadline of every render: ``Limits.max_seconds``, whatever the step prices say.

The step budget (guard/prices.py) is deterministic but only as good as its prices: any operation
priced below its real cost becomes a loop that runs for minutes. The deadline is the guarantee
behind it. One daemon thread (the watchdog) watches the renders in progress; when one passes
its deadline, the watchdog lowers that render's step allowance below zero, so the very next
step check anywhere in the evaluator (every loop iteration and macro call makes one, generated
code included) raises :class:`~minijinja_py.exceptions.DeadlineExceededError`. The hot path
pays nothing for it: the checks it already makes see the lowered allowance.

Why a thread and not a clock read per check: reading the clock on every loop iteration costs
more than the iteration itself in the simplest loops; a flag written by another thread costs
nothing. Why not a signal: signals only reach the main thread, and servers render in workers.

Long parses and Python loops inside filters call :func:`minijinja_py.guard.limits.check_deadline`
instead (a clock read), every few hundred items.

The watchdog starts with the first render, sleeps until the nearest deadline (at most
:data:`TICK` seconds, so a render registered while it sleeps is never late by more than that)
and ends itself after :data:`IDLE_EXIT` seconds without renders.
"""

from __future__ import annotations

import _thread  # not threading: importing that costs a millisecond of every cold start
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict

#: Longest sleep of the watchdog while renders are in progress (seconds).
TICK = 0.05
#: The watchdog ends after this many seconds without any render in progress.
IDLE_EXIT = 5.0

monotonic = time.monotonic

# id(render) -> render: the renders in progress. Plain dict operations (atomic in CPython) so
# registering costs no lock; the watchdog copies the values before scanning them.
_active: Dict[int, Any] = {}
_running = False
_lock = _thread.allocate_lock()
# Held except while the watchdog is asked to wake early: _wake_up releases it, the watchdog's
# timed acquire returns at once and holds it again.
_wake = _thread.allocate_lock()
_wake.acquire()


def _wake_up() -> None:
    try:
        _wake.release()
    except RuntimeError:  # already released by another render: the watchdog wakes anyway
        pass


def _start_thread() -> None:
    """Start the watchdog (a plain thread: nothing waits for it at exit, like a daemon)."""
    _thread.start_new_thread(_watchdog, ())


def watch(render: Any, seconds: float) -> None:
    """Watch ``render`` (it has ``deadline`` and ``expire()``), due ``seconds`` from now,
    until :func:`unwatch`."""
    global _running
    _active[id(render)] = render
    if not _running:
        with _lock:
            if not _running:
                _running = True
                try:
                    _start_thread()
                except RuntimeError:  # no thread to be had (a tight memory cap, shutdown):
                    _running = False  # the render goes on under its step budget alone
    elif seconds < TICK:
        _wake_up()  # a very short deadline: do not wait for the next tick


def unwatch(render: Any) -> None:
    _active.pop(id(render), None)


#: ``unwatch_id(id(render), None)`` is ``unwatch(render)`` without a Python call (every render
#: ends with it: Template._render)
unwatch_id = _active.pop


def _watchdog() -> None:
    global _running
    idle_since = monotonic()
    while True:
        now = monotonic()
        nearest = now + TICK
        for render in list(_active.values()):
            deadline = render.deadline
            if now >= deadline:
                render.expire()
                _active.pop(id(render), None)
            elif deadline < nearest:
                nearest = deadline
        if _active:
            idle_since = now
        elif now - idle_since > IDLE_EXIT:
            with _lock:
                _running = False
            # A render may have registered between the check above and the flag's reset
            # without starting a thread (it saw the flag still set): look once more.
            if not _active:
                return
            with _lock:
                if _running:  # another watchdog started meanwhile
                    return
                _running = True
        wait = nearest - monotonic()
        if wait > 0:
            _wake.acquire(True, wait)
        else:
            _wake.acquire(False)


def _after_fork_in_child() -> None:
    """A forked child (a pre-forking server's worker) has no watchdog thread, whatever the
    parent had: start afresh, or its renders would never be watched."""
    global _running, _lock, _wake
    _active.clear()
    _running = False
    _lock = _thread.allocate_lock()
    _wake = _thread.allocate_lock()
    _wake.acquire()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

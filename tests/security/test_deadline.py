"""``Limits.max_seconds``: the wall-clock deadline holds whatever the step prices say.

The step budget is only as good as its prices; the deadline (deadline.py: a watchdog thread
lowers the render's step allowance, so the next step check fails) must stop any loop, in the
closures and in generated code, in every thread, and must never fire on work that ends in
time. Each hostile render has a step budget far larger than it could use, so only the deadline
can stop it. A deadline that fired must not have fired early (by the wall clock, which it
reads), nor late: by the CPU time the render spent, with a generous margin (the wall clock
past the deadline grows with the machine's load, the work done past it does not).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, List

import pytest

import minijinja_py as mj
from minijinja_py import deadline as watchdog

from security_support import run_isolated

# every test runs as a plain render, a provenance render and the tokens path (conftest.py)
pytestmark = pytest.mark.usefixtures("render_mode")

#: Steps no test here can use up: only the deadline can stop these renders.
UNBOUNDED_STEPS = 10**15
#: A deadline that fired must have stopped the render within this many CPU seconds past it
#: (generous: the watchdog's own lateness is at most deadline.TICK).
LATE = 3.0

# Loops priced far below their real cost (or run long on purpose): each would run for hours.
SLOW_LOOPS = {
    "nested-ranges": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                     "{% endfor %}",
    "namespace-counter": "{% set ns = namespace(n=0) %}{% for a in range(100000) %}"
                         "{% for b in range(100000) %}{% set ns.n = ns.n + 1 %}{% endfor %}"
                         "{% endfor %}",
    "printing": "{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}"
                "{% endfor %}",
    "macro-calls": "{% macro f(n) %}{{ n }}{% endmacro %}{% for a in range(100000) %}"
                   "{% for b in range(100000) %}{{ f(b) }}{% endfor %}{% endfor %}",
    "self-calling-macro": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                          "{% endmacro %}{{ f(60) }}",
    "string-scan": "{% set s = 'x' * 1000000 %}{% for a in range(100000) %}"
                   "{% for b in range(100000) %}{{ 'y' in s }}{% endfor %}{% endfor %}",
}


def _limits(seconds: float, **more: Any) -> mj.Limits:
    return mj.Limits(max_steps=UNBOUNDED_STEPS, max_seconds=seconds, max_output_size=10**12,
                     max_recursion=1000, **more)


def _deadline_error(source: str, seconds: float, **data: Any) -> None:
    """Render ``source`` with a deadline of ``seconds``: the deadline stops it, located, no
    sooner than it should (wall clock) and no later than LATE seconds of work past it."""
    env = mj.chat_environment(limits=_limits(seconds))
    template = env.from_string(source)
    start = time.monotonic()
    cpu_start = time.thread_time()  # (the render runs in this thread)
    with pytest.raises(mj.DeadlineExceededError) as info:
        template.render(**data)
    cpu = time.thread_time() - cpu_start
    elapsed = time.monotonic() - start
    assert "Limits.max_seconds" in info.value.message
    assert isinstance(info.value, mj.LimitExceededError)
    assert info.value.lineno == 1  # located at the statement that was running (one line)
    assert elapsed >= seconds, elapsed
    assert cpu < seconds + LATE, cpu


@pytest.mark.parametrize("source", list(SLOW_LOOPS.values()), ids=list(SLOW_LOOPS))
def test_deadline_stops_a_loop_whatever_its_price(source: str) -> None:
    _deadline_error(source, 0.5)


@pytest.mark.parametrize("source", list(SLOW_LOOPS.values()), ids=list(SLOW_LOOPS))
def test_deadline_stops_generated_loops_too(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hot loops switch to generated Python (codegen.py); the deadline reaches them."""
    from minijinja_py import compiler

    monkeypatch.setattr(compiler, "HOT_ITERATIONS", 1, raising=False)
    monkeypatch.setattr(compiler, "FIRST_RENDER_FACTOR", 1, raising=False)
    _deadline_error(source, 0.5)


def test_the_error_names_the_limit_and_how_to_raise_it() -> None:
    with pytest.raises(mj.DeadlineExceededError) as info:
        mj.chat_environment(limits=_limits(0.2)).from_string(SLOW_LOOPS["nested-ranges"]).render()
    message = info.value.message
    assert "deadline of 0.2 s" in message
    assert "Environment(limits=Limits(max_seconds=...))" in message


def test_default_deadline_stops_a_loop_the_step_budget_underprices() -> None:
    """With the default limits, in a child process: the render ends with a limit error (the
    step budget or the deadline, whichever the machine's speed brings first) within the
    deadline's worth of work and a margin, long before the test's own timeout."""
    result = run_isolated(SLOW_LOOPS["self-calling-macro"], timeout=60.0)
    assert result.kind == "template_error", result.describe()
    assert result.is_limit, result.describe()
    named = re.findall(r"Limits\.(\w+)", result.message)[:1]
    assert named in (["max_steps"], ["max_seconds"]), result.describe()
    assert result.cpu_seconds < mj.Limits().max_seconds + 10, result.describe()


def test_work_that_ends_in_time_is_never_stopped() -> None:
    env = mj.chat_environment(limits=_limits(5.0))
    template = env.from_string("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    messages = [{"role": "user", "content": f"message {i}"} for i in range(200)]
    expected = "".join(f"<user>message {i}" for i in range(200))
    for _ in range(300):  # many short renders: each one's deadline is its own
        assert template.render(messages=messages) == expected


def test_deadline_is_per_render_not_per_template() -> None:
    """A template rendered many times: the clock starts at each render."""
    env = mj.chat_environment(limits=_limits(0.5))
    template = env.from_string("{% for i in range(n) %}{{ i }}{% endfor %}")
    start = time.monotonic()
    while time.monotonic() - start < 1.2:  # longer than one deadline in total
        assert template.render(n=100).endswith("99")


def test_deadline_can_be_turned_off() -> None:
    limits = mj.Limits(max_seconds=None)
    assert limits.deadline() is None
    assert mj.chat_environment(limits=limits).from_string("{{ 1 + 1 }}").render() == "2"


@pytest.mark.parametrize("value", [0, -1, 0.0])
def test_deadline_must_be_positive(value: float) -> None:
    with pytest.raises(ValueError):
        mj.Limits(max_seconds=value)


def test_deadlines_hold_in_many_threads_at_once() -> None:
    """Eight threads: four render forever-loops with short deadlines, four render quick work
    continuously; every slow one stops, no quick one is hurt."""
    env = mj.chat_environment(limits=_limits(0.7))
    slow = env.from_string(SLOW_LOOPS["namespace-counter"])
    quick = env.from_string("{% for i in range(50) %}{{ i }},{% endfor %}")
    expected = "".join(f"{i}," for i in range(50))
    outcomes: List[Any] = []
    stop = threading.Event()

    def run_slow() -> None:  # (wall clock, CPU time of the thread) when the deadline fired
        start, cpu_start = time.monotonic(), time.thread_time()
        try:
            slow.render()
            outcomes.append(("slow", "finished"))
        except mj.DeadlineExceededError:
            outcomes.append(("slow", (time.monotonic() - start,
                                      time.thread_time() - cpu_start)))
        except BaseException as exc:  # pragma: no cover - reported below
            outcomes.append(("slow", repr(exc)))

    def run_quick() -> None:
        bad = 0
        while not stop.is_set():
            if quick.render() != expected:
                bad += 1
        outcomes.append(("quick", bad))

    threads = [threading.Thread(target=run_slow) for _ in range(4)]
    threads += [threading.Thread(target=run_quick) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads[:4]:
        thread.join(timeout=60)
    stop.set()
    for thread in threads[4:]:
        thread.join(timeout=60)
    slow_results = [value for kind, value in outcomes if kind == "slow"]
    quick_results = [value for kind, value in outcomes if kind == "quick"]
    assert len(slow_results) == 4 and len(quick_results) == 4, outcomes
    # none stopped early by the wall clock, none late by its own CPU time
    assert all(isinstance(v, tuple) and v[0] >= 0.7 and v[1] < 0.7 + LATE
               for v in slow_results), outcomes
    assert quick_results == [0, 0, 0, 0]


def test_watchdog_restarts_after_going_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog thread ends when idle; the next render starts it again and is watched."""
    monkeypatch.setattr(watchdog, "IDLE_EXIT", 0.05)
    env = mj.chat_environment(limits=_limits(0.5))
    assert env.from_string("{{ 1 }}").render() == "1"
    deadline = time.monotonic() + 60  # a guard: it returns as soon as the watchdog has ended
    while watchdog._running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not watchdog._running, "the idle watchdog did not end"
    _deadline_error(SLOW_LOOPS["nested-ranges"], 0.5)


def test_no_render_is_left_registered() -> None:
    env = mj.chat_environment(limits=_limits(5.0))
    for source in ("{{ 1 }}", "{{ x.y.z }}", "{{ raise_exception('no') }}", "{{ 1 // 0 }}"):
        try:
            env.from_string(source).render()
        except mj.TemplateError:
            pass
    assert not watchdog._active


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_deadline_holds_in_a_forked_child() -> None:
    """A pre-forking server forks after rendering: the child's renders are watched too."""
    import os

    env = mj.chat_environment(limits=_limits(0.5))
    assert env.from_string("{{ 1 }}").render() == "1"  # the parent's watchdog is running
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened through the pipe, then leave at once
        try:
            try:
                env.from_string(SLOW_LOOPS["nested-ranges"]).render()
                message = b"finished"
            except mj.DeadlineExceededError:
                message = b"deadline"
            except BaseException as exc:  # pragma: no cover - reported to the parent
                message = repr(exc).encode()
            os.write(write_end, message)
        finally:
            os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished:
            break
        time.sleep(0.05)
    else:  # pragma: no cover - the failure being tested
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's render was never stopped")
    with os.fdopen(read_end, "rb") as reader:
        assert reader.read() == b"deadline"


def test_render_goes_on_when_no_watchdog_thread_can_start(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Under a tight address-space cap a thread may not start: the render still works (its
    step budget still bounds it) and raises nothing but template errors."""
    import _thread

    def refuse(*args: Any) -> None:
        raise RuntimeError("can't start new thread")

    watchdog._running = False  # as if no watchdog had started yet
    try:
        monkeypatch.setattr(_thread, "start_new_thread", refuse)
        env = mj.chat_environment(limits=mj.Limits(max_steps=10_000))
        assert env.from_string("{{ 1 + 1 }}").render() == "2"
        with pytest.raises(mj.LimitExceededError):
            env.from_string(SLOW_LOOPS["nested-ranges"]).render()
        assert not watchdog._running
    finally:
        monkeypatch.undo()
        # the next render starts a watchdog again (a second one, if the first still runs,
        # only watches the same renders twice until it goes idle)
        watchdog._running = False

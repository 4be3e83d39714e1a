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
from typing import Any, Callable, Dict, List, Optional

import pytest

import minijinja_py as mj
from minijinja_py.guard import deadline as watchdog

from security_support import run_forked, run_isolated

# every test runs as a plain render, a provenance render and the tokens path (conftest.py)
pytestmark = pytest.mark.usefixtures("render_mode")

#: Steps no test here can use up: only the deadline can stop these renders.
UNBOUNDED_STEPS = 10**15
#: A deadline that fired must have stopped the render within this many CPU seconds past it
#: (generous: the watchdog's own lateness is at most deadline.TICK).
LATE = 3.0
#: A child process checking a deadline is killed (and the test fails) after this many seconds.
CHILD_TIMEOUT = 60.0

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


def _render_to_the_deadline(source: str, seconds: float, data: Dict[str, Any]) -> tuple:
    """Render ``source`` with a deadline of ``seconds`` (in the process calling it: a child of
    the test's, see _deadline_error): (the error's class names or "finished", its message,
    line, wall-clock seconds, CPU seconds of the render's thread)."""
    env = mj.chat_environment(limits=_limits(seconds))
    template = env.from_string(source)
    start = time.monotonic()
    cpu_start = time.thread_time()  # (the render runs in this thread)
    try:
        template.render(**data)
    except mj.TemplateError as exc:
        outcome: tuple = ([cls.__name__ for cls in type(exc).__mro__], exc.message, exc.lineno)
    else:
        outcome = ("finished", "", None)
    return outcome + (time.monotonic() - start, time.thread_time() - cpu_start)


def _check_deadline_outcome(outcome: tuple, seconds: float) -> None:
    """The deadline stopped the render, located, no sooner than it should (wall clock) and
    no later than LATE seconds of work past it."""
    classes, message, lineno, elapsed, cpu = outcome
    assert "DeadlineExceededError" in classes and "LimitExceededError" in classes, outcome
    assert "Limits.max_seconds" in message, outcome
    assert lineno == 1, outcome  # located at the statement that was running (one line)
    assert elapsed >= seconds, outcome
    assert cpu < seconds + LATE, outcome


def _deadline_error(source: str, seconds: float, **data: Any) -> None:
    """The render of ``source`` is stopped by a deadline of ``seconds``. It runs in a child
    process with its own timeout: a deadline that never fires fails the test instead of
    hanging it."""
    _check_deadline_outcome(run_forked(_render_to_the_deadline, source, seconds, data,
                                       timeout=CHILD_TIMEOUT), seconds)


@pytest.mark.parametrize("source", list(SLOW_LOOPS.values()), ids=list(SLOW_LOOPS))
def test_deadline_stops_a_loop_whatever_its_price(source: str) -> None:
    _deadline_error(source, 0.5)


@pytest.mark.parametrize("source", list(SLOW_LOOPS.values()), ids=list(SLOW_LOOPS))
def test_deadline_stops_generated_loops_too(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hot loops switch to generated Python (codegen.py); the deadline reaches them."""
    from minijinja_py.compiler import closures as compiler

    monkeypatch.setattr(compiler, "HOT_ITERATIONS", 1, raising=False)
    monkeypatch.setattr(compiler, "FIRST_RENDER_FACTOR", 1, raising=False)
    _deadline_error(source, 0.5)


def test_the_error_names_the_limit_and_how_to_raise_it() -> None:
    classes, message, *_ = run_forked(_render_to_the_deadline, SLOW_LOOPS["nested-ranges"], 0.2,
                                      {}, timeout=CHILD_TIMEOUT)
    assert classes[0] == "DeadlineExceededError"
    assert "the render ran past its deadline of 0.2 s (limit Limits.max_seconds=0.2; " \
        "raise it with Environment(limits=Limits(max_seconds=...))" in message


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


def _threads_with_deadlines() -> tuple:
    """Eight threads: four render forever-loops with short deadlines, four render quick work
    continuously. (The slow ones' outcomes, the quick ones' counts of wrong renders.)"""
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

    threads = [threading.Thread(target=run_slow, daemon=True) for _ in range(4)]
    threads += [threading.Thread(target=run_quick, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads[:4]:
        thread.join()  # (the child's timeout bounds this)
    stop.set()
    for thread in threads[4:]:
        thread.join()
    return ([value for kind, value in outcomes if kind == "slow"],
            [value for kind, value in outcomes if kind == "quick"])


def test_deadlines_hold_in_many_threads_at_once() -> None:
    """Every slow render stops at its deadline, no quick one is hurt (in a child process:
    threads that never stop fail the test instead of hanging it)."""
    slow_results, quick_results = run_forked(_threads_with_deadlines, timeout=CHILD_TIMEOUT)
    assert len(slow_results) == 4 and len(quick_results) == 4, (slow_results, quick_results)
    # none stopped early by the wall clock, none late by its own CPU time
    assert all(isinstance(v, tuple) and v[0] >= 0.7 and v[1] < 0.7 + LATE
               for v in slow_results), slow_results
    assert quick_results == [0, 0, 0, 0]


def _restart_after_idle() -> tuple:
    """A render, the watchdog left to go idle, another render: (whether the watchdog ended,
    the second render's outcome)."""
    env = mj.chat_environment(limits=_limits(0.5))
    assert env.from_string("{{ 1 }}").render() == "1"
    deadline = time.monotonic() + 30  # a guard: it returns as soon as the watchdog has ended
    while watchdog._running and time.monotonic() < deadline:
        time.sleep(0.05)
    ended = not watchdog._running
    return ended, _render_to_the_deadline(SLOW_LOOPS["nested-ranges"], 0.5, {})


def test_watchdog_restarts_after_going_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog thread ends when idle; the next render starts it again and is watched."""
    monkeypatch.setattr(watchdog, "IDLE_EXIT", 0.05)
    ended, outcome = run_forked(_restart_after_idle, timeout=CHILD_TIMEOUT)
    assert ended, "the idle watchdog did not end"
    _check_deadline_outcome(outcome, 0.5)


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


# -- the watchdog's schedule, against a simulated clock ---------------------------------------------
#: What deadline.py documents: the watchdog sleeps at most this long while renders are in
#: progress, and ends after this long without any (copied here, not read from deadline.py).
DOCUMENTED_TICK = 0.05
DOCUMENTED_IDLE_EXIT = 5.0


class _Simulation:
    """deadline._watchdog run in this thread against a simulated clock, with scheduled events
    (renders registering); no real time passes and no thread starts. The clock advances a
    nanosecond at every reading, as a real one does, and by the watchdog's sleeps; a sleep
    ends early when an event wakes the watchdog (deadline._wake_up). Runs in a child process
    (run_forked): it replaces the module's clock and locks."""

    class Stop(Exception):
        """The simulation has run as long as it may (the watchdog never ended)."""

    def __init__(self, events: List[tuple], until: float = 1000.0) -> None:
        self.now = 0.0
        self.events = sorted(events, key=lambda event: event[0])  # (time, action)
        self.until = until
        self.awake = False  # released: the next sleep ends at once
        self.sleeps: List[float] = []
        self.readings = 0

    def monotonic(self) -> float:
        self.readings += 1
        if self.readings > 10_000_000:
            raise self.Stop("the watchdog keeps reading the clock without sleeping")
        self.now += 1e-9
        return self.now

    def release(self) -> None:
        if self.awake:
            raise RuntimeError("release unlocked lock")
        self.awake = True

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.awake:
            self.awake = False
            return True
        if not blocking:
            return False
        self.sleeps.append(timeout)
        wake_at = self.now + timeout
        while self.events and self.events[0][0] <= wake_at:
            at, action = self.events.pop(0)
            self.now = max(self.now, at)
            action()
            if self.awake:
                self.awake = False
                return True
        self.now = wake_at
        if self.now > self.until:
            raise self.Stop(f"still running at {self.now:.2f} s")
        return False

    def run(self) -> float:
        """Run the watchdog until it ends; the simulated time when it did."""
        watchdog.monotonic = self.monotonic
        watchdog._wake = self
        watchdog._active.clear()
        watchdog._running = True  # (as watch() sets it before starting the thread)
        for at, action in list(self.events):
            if at <= 0:
                action()
        self.events = [event for event in self.events if event[0] > 0]
        watchdog._watchdog()
        return self.now


class _Render:
    """What the watchdog watches: a deadline, and expire()."""

    def __init__(self, simulation: _Simulation, seconds: float) -> None:
        self.simulation = simulation
        self.deadline = simulation.now + seconds
        self.expired_at: List[float] = []

    def expire(self) -> None:
        self.expired_at.append(self.simulation.now)


def _schedule(registrations: List[tuple]) -> Dict[str, Any]:
    """Renders registered (watch()) at simulated times: [(time, name, seconds)]. Returns, per
    render, its deadline and when it was expired; and when the watchdog ended."""
    simulation = _Simulation([])
    renders: Dict[str, _Render] = {}

    def register(name: str, seconds: float) -> Callable[[], None]:
        def action() -> None:
            render = renders[name] = _Render(simulation, seconds)
            watchdog.watch(render, seconds)
        return action

    simulation.events = sorted(((at, register(name, seconds))
                                for at, name, seconds in registrations), key=lambda e: e[0])
    try:
        ended: Optional[float] = simulation.run()
    except _Simulation.Stop:
        ended = None
    return {"ended": ended, "sleeps": max(simulation.sleeps, default=0.0),
            **{name: (render.deadline, render.expired_at) for name, render in renders.items()}}


def test_the_watchdog_expires_each_render_at_its_deadline() -> None:
    # a long render, then one registered while the watchdog sleeps (a deadline longer than a
    # tick: nothing wakes it), then a very short one (which wakes it)
    result = run_forked(_schedule, [(0.0, "long", 100.0), (0.3, "later", 1.0),
                                    (0.31, "short", 0.01)], timeout=CHILD_TIMEOUT)
    for name in ("long", "later", "short"):
        deadline, expired_at = result[name]
        assert len(expired_at) == 1, (name, result)  # expired once, then no longer watched
        assert abs(expired_at[0] - deadline) < 1e-6, (name, result)  # at its deadline
    assert result["sleeps"] <= DOCUMENTED_TICK + 1e-6, result


def test_the_watchdog_notices_a_new_render_within_a_tick() -> None:
    """A render registered while the watchdog sleeps, its deadline shorter than the sleep
    would have been without ticks, is expired at its deadline all the same."""
    result = run_forked(_schedule, [(0.0, "long", 1000.0), (0.001, "second", 0.2)],
                        timeout=CHILD_TIMEOUT)
    deadline, expired_at = result["second"]
    assert expired_at and abs(expired_at[0] - deadline) < 1e-6, result


def test_the_watchdog_ends_after_being_idle_and_not_before() -> None:
    result = run_forked(_schedule, [(0.0, "only", 1.0)], timeout=CHILD_TIMEOUT)
    deadline, expired_at = result["only"]
    assert expired_at == [pytest.approx(deadline, abs=1e-6)], result
    assert result["ended"] is not None, "the idle watchdog never ended"
    # idle from its last wake-up with a render in progress (at most a tick before the
    # render's end): it ends on its first wake-up IDLE_EXIT seconds after that
    assert deadline - DOCUMENTED_TICK + DOCUMENTED_IDLE_EXIT < result["ended"] <= (
        deadline + DOCUMENTED_IDLE_EXIT + DOCUMENTED_TICK + 1e-6), result

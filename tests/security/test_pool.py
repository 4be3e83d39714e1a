"""RenderPool: renders in worker processes with a memory cap and a deadline.

* results and errors are those of an in-process render (same class, ``str()``, location), on
  engine templates and on corpus templates x contexts through the chat pipeline;
* a worker that runs out of memory, runs past the timeout, segfaults or is killed is replaced,
  the render raises a clean TemplateError, and the next render works;
* concurrent renders from many threads agree with in-process renders;
* ``close()`` ends every worker (nothing left running, nothing left unreaped);
* the parent never trusts a reply: malformed headers are protocol errors, never code.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import signal
import sys
import threading
import time
from typing import Any, Callable

import pytest

import minijinja_py as mj
from minijinja_py.chat import pool as pool_module
from minijinja_py.chat import ChatTemplate
from minijinja_py.chat.pool import (RenderMemoryError, RenderPool, RenderTimeoutError,
                               WorkerCrashedError)

from security_support import corpus_available, corpus_contexts, corpus_slugs, corpus_template

FIXED_NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)
POSIX = os.name == "posix"
try:
    import resource  # noqa: F401
    HAS_RESOURCE = True
except ImportError:  # pragma: no cover - Windows
    HAS_RESOURCE = False

#: Limits raised so far that only the pool's own bounds (memory, timeout) can stop a render.
UNBOUNDED = {"max_string_size": 10 ** 10, "max_output_size": 10 ** 11, "max_steps": 10 ** 13}
if "max_seconds" in mj.Limits.FIELDS:
    UNBOUNDED["max_seconds"] = 10 ** 6


@pytest.fixture(scope="module")
def pool() -> Any:
    with RenderPool(2, now=FIXED_NOW, timeout=30) as shared:
        yield shared


def chat_env() -> Any:
    return mj.chat_environment(now=FIXED_NOW)


def in_process(render: Callable[[], Any]) -> tuple:
    try:
        return ("ok", render())
    except Exception as exc:  # noqa: BLE001 - compared with what the pool raises
        return ("error", exc)


def same_outcome(expected: tuple, got: tuple) -> None:
    assert expected[0] == got[0], (expected, got)
    if expected[0] == "ok":
        assert got[1] == expected[1]
        return
    want, have = expected[1], got[1]
    assert type(have) is type(want), (type(have), type(want))
    assert str(have) == str(want)
    if isinstance(want, mj.TemplateError):
        for attribute in ("message", "lineno", "column", "name", "source", "show_location"):
            assert getattr(have, attribute) == getattr(want, attribute), attribute
        assert getattr(have, "python_type", None) == getattr(want, "python_type", None)


def gone(pid: int) -> bool:
    """The process no longer exists (killed AND reaped: no zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_gone(pid: int, seconds: float = 30.0) -> bool:
    """The process is gone, or goes within ``seconds`` (a guard against a hang, generous for
    loaded machines: it returns as soon as the process is gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.02)
    return gone(pid)


# ---- same results ----------------------------------------------------------------------------
ENGINE_CASES = [
    ("{{ a }} {{ b | upper }}", {"a": 1, "b": "x"}),
    ("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n{% endfor %}",
     {"messages": [{"role": "user", "content": "  héllo 👋 "}] * 3}),
    ("{{ s }}|{{ s | length }}|{{ s | tojson }}", {"s": "lone \ud800 and \udfff surrogates"}),
    ("{{ 'x' * 1000000 }}{{ '€' * 300000 }}", {}),
    ("{{ strftime_now('%Y-%m-%d') }} {{ data | tojson(indent=2) }}",
     {"data": {"k": [1, 2.5, None, True, "é"]}}),
    ("{% set ns = namespace(n=0) %}{% for i in range(10) %}{% set ns.n = ns.n + i %}"
     "{% endfor %}{{ ns.n }}{{ [3, 1, 2] | sort | join(',') }}", {}),
]


@pytest.mark.parametrize("source,data", ENGINE_CASES)
def test_render_matches_in_process(pool: RenderPool, source: str, data: dict) -> None:
    expected = chat_env().from_string(source).render(data)
    assert pool.render(source, data) == expected
    assert pool.render(source, **data) == expected


def test_render_with_spans_matches(pool: RenderPool) -> None:
    source = ("{% for m in messages %}{{ m.role }}: {% generation %}{{ m.content }}"
              "{% endgeneration %}\n{% endfor %}")
    data = {"messages": [{"role": "assistant", "content": "é" * n} for n in range(5)]}
    assert pool.render_with_spans(source, data) == \
        chat_env().from_string(source).render_with_spans(data)


ERROR_CASES = {
    "syntax": "{% for m in messages %}{{ m.content }",
    "syntax_end": "{% if x %}never closed",
    "undefined": "{{ x.y.z }}",
    "raise_exception": "{{ raise_exception('Only user and assistant roles are supported!') }}",
    "raise_exception_located": "\n\n  {{ raise_exception('bad \ud800 role ' ~ 42) }}",
    "limit_range": "{% for i in range(10**6) %}{% endfor %}",
    "limit_string": "{{ 'x' * 10**9 }}",
    "type_error": "{{ 1 + 'a' }}",
    "zero_division": "{{ 1 // 0 }}",
    "value_error": "{{ 'abc'.index('z') }}",
    "security": "{{ messages.append(1) }}",
    "security_attr": "{{ ''.__class__.__mro__ }}",
    "too_large": "x" * 1_000_001,
}


@pytest.mark.parametrize("kind", sorted(ERROR_CASES))
def test_errors_match_in_process(pool: RenderPool, kind: str) -> None:
    source = ERROR_CASES[kind]
    data = {"messages": [{"role": "user", "content": "hi"}]}
    for name in (None, "chat_template.jinja"):
        expected = in_process(lambda: chat_env().from_string(source, name=name).render(data))
        assert expected[0] == "error" and isinstance(expected[1], mj.TemplateError)
        got = in_process(lambda: pool.render(source, data, template_name=name))
        same_outcome(expected, got)
    if kind in ("type_error", "zero_division", "value_error"):
        assert isinstance(got[1], (TypeError, ArithmeticError, ValueError))


def test_check(pool: RenderPool) -> None:
    pool.check("{{ fine }}")
    expected = in_process(lambda: chat_env().from_string(ERROR_CASES["syntax"], name="t"))
    same_outcome(expected, in_process(lambda: pool.check(ERROR_CASES["syntax"],
                                                          template_name="t", chat=True)))


def test_render_chat_matches_chat_template(pool: RenderPool) -> None:
    with open(os.path.join(os.path.dirname(mj.__file__), "..", "examples", "chatml.jinja"),
              encoding="utf-8") as handle:
        source = handle.read()
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi \ud83d!"},
                {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"},
                {"role": "user", "content": "Weather?"}]
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {}}}]
    template = ChatTemplate(source, now=FIXED_NOW, name="chatml")
    for kwargs in ({"add_generation_prompt": True, "enable_thinking": False},
                   {"tools": tools, "documents": [{"title": "t", "text": "x"}]},
                   {"continue_final_message": True}):
        assert pool.render_chat(source, messages, template_name="chatml", **kwargs) == \
            template.render(messages, **kwargs)
        assert pool.render_chat_with_spans(source, messages, **kwargs) == \
            template.render_with_spans(messages, **kwargs)
    # data errors of the pipeline, and a syntax error winning over them as in-process
    for bad_source, bad_messages in ((source, []), ("{% if %}", []), ("{{ x }", "text")):
        same_outcome(in_process(lambda: ChatTemplate(bad_source, now=FIXED_NOW)
                                .render(bad_messages)),
                     in_process(lambda: pool.render_chat(bad_source, bad_messages)))
    same_outcome(in_process(lambda: template.render(messages[:1], continue_final_message=True,
                                                    add_generation_prompt=True)),
                 in_process(lambda: pool.render_chat(source, messages[:1],
                                                     continue_final_message=True,
                                                     add_generation_prompt=True)))


def corpus_sample() -> list:
    slugs = corpus_slugs()
    return slugs[::max(1, len(slugs) // 8)][:8]


@pytest.mark.skipif(not corpus_available(), reason="shared corpus not found")
@pytest.mark.parametrize("slug", corpus_sample() or ["none"])
def test_corpus_through_render_chat(pool: RenderPool, slug: str) -> None:
    source = corpus_template(slug)
    template = in_process(lambda: ChatTemplate(source, now=FIXED_NOW, name=slug))
    for context_name, context in corpus_contexts().items():
        options = {key: context[key] for key in ("tools", "documents", "add_generation_prompt",
                                                 "continue_final_message") if key in context}
        extra = {key: value for key, value in context.items()
                 if key not in options and key != "messages"}
        if template[0] == "error":
            expected = template
        else:
            expected = in_process(lambda: template[1].render(context["messages"], **options,
                                                             **extra))
        got = in_process(lambda: pool.render_chat(source, context["messages"],
                                                  template_name=slug, **options, **extra))
        same_outcome(expected, got)


# ---- environments, data, clock ---------------------------------------------------------------
def test_plain_environment_and_limits() -> None:
    options = {"undefined": mj.StrictUndefined, "keep_trailing_newline": True}
    env = mj.Environment(**options, limits=mj.Limits(max_range=10))
    with RenderPool(1, environment=options, limits={"max_range": 10}) as plain:
        for source in ("{% set l = [1] %}{{ l.append(2) }}{{ l }}\n", "{{ missing }}",
                       "{{ range(11) | list }}", "{{ range(10) | list }}"):
            same_outcome(in_process(lambda: env.from_string(source).render()),
                         in_process(lambda: plain.render(source)))
    with pytest.raises(TypeError):
        RenderPool(1, environment={"no_such_option": 1})
    with pytest.raises(TypeError):
        RenderPool(1, limits={"max_bananas": 1})


def test_data_must_be_picklable(pool: RenderPool) -> None:
    with pytest.raises(TypeError, match="picklable"):
        pool.render("{{ f }}", f=lambda: 1)
    with pytest.raises(TypeError):
        pool.render(b"{{ 1 }}")  # type: ignore[arg-type]


def test_caller_data_unchanged_and_clock(pool: RenderPool) -> None:
    data = {"messages": [{"role": "user", "content": "x"}]}
    before = json.dumps(data)
    pool.render("{% set m = messages[0] %}{{ m }}", data)
    assert json.dumps(data) == before
    calls = []
    with RenderPool(1, now=lambda: calls.append(1) or FIXED_NOW) as clocked:
        assert clocked.render("{{ strftime_now('%d %B %Y') }}") == "10 July 2025"
    assert calls


# ---- isolation -------------------------------------------------------------------------------
@pytest.mark.skipif(not HAS_RESOURCE, reason="no address-space cap on this platform")
def test_memory_cap() -> None:
    with RenderPool(1, memory_limit=300 << 20, limits=UNBOUNDED, timeout=20) as capped:
        assert capped.render("{{ 1 + 1 }}") == "2"
        (before,) = capped.worker_pids()
        # (the memory error, not the pool's timeout: RenderTimeoutError is another class)
        with pytest.raises(RenderMemoryError) as info:
            capped.render("{{ 'x' * 2000000000 }}", template_name="hog")
        err = info.value
        assert isinstance(err, mj.LimitExceededError)
        assert "memory limit (314,572,800 bytes" in str(err)
        assert err.name == "hog" and err.lineno == 1
        assert wait_gone(before)
        assert capped.render("{{ 2 + 2 }}") == "4"
        assert capped.worker_pids() != [before]
        # a list that grows past the cap a piece at a time
        with pytest.raises(mj.LimitExceededError):
            capped.render("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                          "{% set ns.l = ns.l + ['y' * 100000 ~ i] %}{% endfor %}",
                          )
        assert capped.render("ok") == "ok"


@pytest.mark.skipif(not HAS_RESOURCE, reason="no address-space cap on this platform")
def test_data_larger_than_the_cap() -> None:
    # a cap with room above a worker's own footprint (interpreter, engine, chat layer), so
    # the small render after the refusal never comes near it
    with RenderPool(1, memory_limit=250 << 20) as capped:
        assert capped.render("{{ 1 }}") == "1"
        with pytest.raises(RenderMemoryError):
            capped.render("{{ s | length }}", s="x" * (300 << 20))
        assert capped.render("{{ s | length }}", s="x" * (1 << 20)) == str(1 << 20)


def test_timeout_kills_and_replaces() -> None:
    hang = ("{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}"
            "{% endfor %}")
    with RenderPool(1, timeout=2, limits=UNBOUNDED) as slow:
        assert slow.render("{{ 'warm' }}") == "warm"
        (before,) = slow.worker_pids()
        started = time.monotonic()
        with pytest.raises(RenderTimeoutError) as info:
            slow.render(hang, template_name="loop")
        # not before its time; not late either, whatever the load: the render never ends, so
        # that it ends at all is the pool's timeout at work
        assert time.monotonic() - started > 1.9
        assert isinstance(info.value, mj.LimitExceededError)
        assert str(info.value).startswith("the render did not finish within the pool's "
                                          "timeout of 2 seconds")
        assert wait_gone(before)
        assert slow.render("{{ 'after' }}") == "after"


@pytest.mark.skipif(not POSIX, reason="signals")
def test_worker_killed_during_render_and_while_idle() -> None:
    hang = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with RenderPool(1, timeout=30, limits=UNBOUNDED) as crashy:
        assert crashy.render("{{ 1 }}") == "1"
        (pid,) = crashy.worker_pids()
        outcome: list = []
        thread = threading.Thread(target=lambda: outcome.append(in_process(
            lambda: crashy.render(hang))))
        thread.start()
        time.sleep(0.5)
        os.kill(pid, signal.SIGSEGV)
        thread.join(10)
        assert not thread.is_alive()
        kind, err = outcome[0]
        assert kind == "error" and type(err) is WorkerCrashedError, outcome
        assert isinstance(err, mj.TemplateRuntimeError)
        assert err.returncode == -signal.SIGSEGV
        assert "died (SIGSEGV)" in str(err)
        assert gone(pid)
        assert crashy.render("{{ 2 }}") == "2"
        # killed while idle: the next render silently gets a fresh worker
        (pid,) = crashy.worker_pids()
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)  # a zombie until the pool next looks at that worker
        assert crashy.render("{{ 3 }}") == "3"
        assert crashy.worker_pids() != [pid]


def test_template_that_crashes_cpython() -> None:
    """Unbounded macro recursion, with the engine's recursion limit raised by a (careless)
    host: CPython 3.11 overflows the C stack (SIGSEGV); others may raise. Either way the
    server gets a TemplateError and the pool keeps working."""
    with RenderPool(1, limits={"max_recursion": 10 ** 6, **UNBOUNDED}, timeout=20) as crashy:
        with pytest.raises(mj.TemplateError) as info:
            crashy.render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
        if isinstance(info.value, WorkerCrashedError):
            assert info.value.returncode is not None and info.value.returncode < 0
        assert crashy.render("{{ 'alive' }}") == "alive"


def test_concurrent_threads_agree() -> None:
    cases = [(source, data) for source, data in ENGINE_CASES[:3]] + [
        ("{{ n * 2 }}-{{ name }}", {"n": n, "name": "t" * n}) for n in range(5)]
    expected = [in_process(lambda s=s, d=d: chat_env().from_string(s).render(d))
                for s, d in cases]
    expected.append(in_process(lambda: chat_env().from_string("{{ 1 // 0 }}").render()))
    cases.append(("{{ 1 // 0 }}", {}))
    results: dict = {}
    with RenderPool(2, now=FIXED_NOW) as shared:
        def worker(index: int) -> None:
            outcomes = []
            for round_ in range(12):
                case = (index + round_) % len(cases)
                source, data = cases[case]
                outcomes.append((case, in_process(lambda: shared.render(source, data))))
            results[index] = outcomes

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(shared.worker_pids()) == 2
    assert len(results) == 8
    for outcomes in results.values():
        for case, got in outcomes:
            same_outcome(expected[case], got)


@pytest.mark.skipif(not POSIX, reason="process ids")
def test_close_ends_every_worker() -> None:
    closing = RenderPool(3)
    assert closing.render("{{ 1 }}") == "1"
    pids = closing.worker_pids()
    assert len(pids) == 3
    closing.close()
    for pid in pids:
        assert gone(pid), pid  # ended and reaped: not even a zombie
    assert closing.worker_pids() == []
    with pytest.raises(RuntimeError):
        closing.render("{{ 1 }}")
    closing.close()  # twice is fine

    # close(wait=False) during a render: that render fails cleanly, nothing is left
    busy = RenderPool(1, limits=UNBOUNDED)
    busy.render("{{ 1 }}")
    (pid,) = busy.worker_pids()
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(in_process(lambda: busy.render(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"))))
    thread.start()
    time.sleep(0.3)
    busy.close(wait=False)
    thread.join(10)
    assert outcome and isinstance(outcome[0][1], WorkerCrashedError)
    assert "pool was closed" in str(outcome[0][1])
    assert gone(pid)


def test_max_renders_recycles_workers() -> None:
    with RenderPool(1, max_renders=2) as recycling:
        recycling.render("a")
        (first,) = recycling.worker_pids()
        recycling.render("b")
        assert recycling.worker_pids() != [first] and wait_gone(first)
        assert recycling.render("c") == "c"


def test_unclosed_pool_is_cleaned_up() -> None:
    leaked = RenderPool(1)
    leaked.render("x")
    (pid,) = leaked.worker_pids()
    del leaked
    import gc

    gc.collect()
    assert wait_gone(pid)


# ---- the parent never trusts a reply ---------------------------------------------------------
def _frame(header: dict, blobs: list) -> tuple:
    from minijinja_py.chat._pool_worker import encode_reply

    raw = encode_reply(header, blobs)
    size = len(raw) - len(b"".join(blobs))
    head = json.loads(raw[12:size])
    return head, bytearray(b"".join(blobs))


@pytest.mark.parametrize("header,blobs", [
    ({"ok": False, "template_error": True, "class": "os.system"}, [b"m"]),
    ({"ok": False, "template_error": True, "class": "UndefinedError", "lineno": "1"}, [b"m"]),
    ({"ok": False, "template_error": True, "class": "UndefinedError", "lineno": 2 ** 70},
     [b"m"]),
    ({"ok": False, "template_error": True, "class": "UndefinedError"}, [b"\xff\xfe"]),
    ({"ok": False, "template_error": True, "class": "UndefinedError"}, []),
])
def test_malformed_error_replies_are_refused(header: dict, blobs: list) -> None:
    head, body = _frame(header, blobs)
    with pytest.raises(pool_module._ProtocolError):
        pool_module._rebuild_error(head, body, "src", None)


def test_error_rebuilding_is_a_lookup_not_code() -> None:
    head, body = _frame({"ok": False, "template_error": True, "class": "Popen",
                         "mro": ["Popen", "SecurityError", "object"], "builtin": "exec"},
                        [b"boom"])
    err = pool_module._rebuild_error(head, body, "src", "n")
    assert type(err) is mj.SecurityError and err.message == "boom" and err.name is None
    head, body = _frame({"ok": False, "template_error": True, "class": "Whatever",
                         "mro": [], "builtin": "SystemExit"}, [b"x"])
    assert type(pool_module._rebuild_error(head, body, "s", None)) is mj.TemplateError
    head, body = _frame({"ok": False, "template_error": False, "class": "SystemExit",
                         "builtin": "BaseException"}, [b"x"])
    err = pool_module._rebuild_error(head, body, "s", None)
    assert isinstance(err, Exception) and not isinstance(err, SystemExit)
    with pytest.raises(pool_module._ProtocolError):
        pool_module._decode_result(*_frame({"ok": True}, [b"a", b"b"]), False)
    with pytest.raises(pool_module._ProtocolError):
        pool_module._decode_result(*_frame({"ok": True}, [b"abc", b"\x00" * 15]), True)


def test_requests_are_pickles_replies_are_not() -> None:
    """The parent's decoder reads JSON and UTF-8 only: a pickle as a reply is refused."""
    evil = pickle.dumps(("ok", "x"))
    with pytest.raises(pool_module._ProtocolError):
        pool_module._decode_result({"ok": True, "blobs": [len(evil) + 1]}, bytearray(evil),
                                   False)
    assert "pickle" not in pool_module._decode_result.__code__.co_names
    assert "pickle" not in pool_module._rebuild_error.__code__.co_names


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))

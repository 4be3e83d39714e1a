"""Hostile templates, round two: every attack of the review (issue 14) and variations of it.

Each attack runs in a child interpreter whose address space is capped at about 1.5 GB, with
the default limits (the deadline, ``Limits.max_seconds``, included). It must end with a clean
TemplateError (a LimitExceededError where a resource ran out) or a harmless output, within the
deadline plus a margin for loaded machines, and the child must still be healthy afterwards:
a victim template rendered in the same process gives its usual output.

In this process, every attack then runs (with lowered limits, so the suite stays quick)
before a victim template: nothing a template does may change what another render sees.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import pytest

import minijinja_py as mj

from render_modes import CHILD_SETUP
from security_support import PACKAGE_PARENT

# every test runs as a plain render, a provenance render and the tokens path (conftest.py)
pytestmark = pytest.mark.usefixtures("render_mode")

MEMORY_CAP = int(1.5 * 2**30)
#: CPU seconds past the default deadline an attack may take in the child (the deadline fires
#: by the wall clock, so it bounds the CPU time too; CPU time does not grow with the load).
MARGIN = 12.0
#: The child is killed after this long (the test then fails as a hang): a guard.
TIMEOUT = 90.0

VICTIM = ("{% set c = cycler('a', 'b') %}{% set j = joiner('+') %}{% set ns = namespace(n=0) %}"
          "{% for m in messages %}{{ j() }}{{ c.next() }}:{{ m.role }}={{ m.content|trim }}"
          "{% set ns.n = ns.n + 1 %}{% endfor %}|{{ ns.n }}|{{ dict(a=1) }}|{{ range(3)|list }}"
          "|{{ messages[0] }}")
VICTIM_DATA = {"messages": [{"role": "user", "content": " hi "},
                            {"role": "assistant", "content": "yo"}]}
VICTIM_OUTPUT = ("a:user=hi+b:assistant=yo|2|{'a': 1}|[0, 1, 2]"
                 "|{'role': 'user', 'content': ' hi '}")

BIG = "{% set s = 'x' * 40000000 %}"               # 40 MB, under max_string_size
CJK = "{% set s = '語 ' * 12000000 %}"             # 24 M characters, 96 MB as UCS-4
DEEP_TUPLE = ("{% set ns = namespace(t=()) %}{% for i in range(1000) %}{% for j in range(500) %}"
              "{% set ns.t = (ns.t,) %}{% endfor %}{% endfor %}")
WIDE_TUPLE = ("{% set ns = namespace(t=(1,)) %}{% for i in range(60) %}"
              "{% set ns.t = (ns.t, ns.t) %}{% endfor %}")

# Two lists holding the same list twice at every level: 2**60 paths (comparing them in C visits
# every one, with no recursion or time check).
LIST_DAG = ("{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
            "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}")

# (id, source, data as a Python expression evaluated in the child, environment, expected)
# expected: "limit:<field>" (a LimitExceededError whose message names Limits.<field> first),
# "error:<class>" (a TemplateError of that class), "ok" (renders, and prints no memory
# address). Which limit stops an attack is part of what is tested: a render that merely stops
# could be stopped by a limit that has nothing to do with the attack (the deep tuples were
# once refused by max_range, before any tuple was built).
ATTACKS: List[tuple] = [
    # -- process crash: hashing a tuple nested 500,000 deep ------------------------------------
    ("deep-tuple-dict-key", DEEP_TUPLE + "{{ {ns.t: 1} }}", "", "chat", "limit:max_recursion"),
    ("deep-tuple-in-dict", DEEP_TUPLE + "{{ ns.t in {} }}", "", "chat", "limit:max_recursion"),
    ("deep-tuple-unique", DEEP_TUPLE + "{{ [ns.t]|unique|list }}", "", "chat", "limit:max_recursion"),
    ("deep-tuple-is-filter", DEEP_TUPLE + "{{ ns.t is filter }}", "", "chat", "limit:max_recursion"),
    ("deep-tuple-via-dictsort", "{% set ns = namespace(t=()) %}{% for i in range(1000) %}"
     "{% for j in range(500) %}{% set ns.t = {'k': ns.t}|dictsort|first %}{% endfor %}"
     "{% endfor %}{{ ns.t in {} }}", "", "chat",
     "limit:max_recursion"),
    ("deep-tuple-via-append", "{% set l = [()] %}{% for i in range(1000) %}"
     "{% for j in range(500) %}{% set _ = l.append({'k': l[-1]}|dictsort|first) %}{% endfor %}"
     "{% endfor %}{{ l[-1] in {} }}", "",
     "mutable", "limit:max_recursion"),
    ("wide-tuple-exponential-hash", WIDE_TUPLE + "{{ ns.t in {} }}", "", "chat", "limit:max_collection_size"),
    ("list-dag-equal", LIST_DAG + "{{ ns.a == ns.b }}", "", "chat", "limit:max_collection_size"),
    ("list-dag-in", LIST_DAG + "{{ ns.a in [ns.b] }}", "", "chat", "limit:max_collection_size"),
    ("list-dag-is-eq", LIST_DAG + "{{ ns.a is eq(ns.b) }}", "", "chat", "limit:max_collection_size"),
    ("list-dag-sort", LIST_DAG + "{{ [ns.a, ns.b]|sort|length }}", "", "chat", "limit:max_collection_size"),
    ("list-dag-unique", LIST_DAG + "{{ [ns.a, ns.b]|unique|list|length }}", "", "chat", "limit:max_collection_size"),
    ("list-dag-selectattr", LIST_DAG + "{{ [{'k': ns.a}]|selectattr('k', 'eq', ns.b)|list }}",
     "", "chat", "limit:max_collection_size"),
    ("dict-dag-equal", "{% set ns = namespace(a={}, b={}) %}{% for i in range(60) %}"
     "{% set ns.a = {'x': ns.a, 'y': ns.a} %}{% set ns.b = {'x': ns.b, 'y': ns.b} %}"
     "{% endfor %}{{ ns.a == ns.b }}", "", "chat", "limit:max_collection_size"),
    # -- renders poisoning each other ------------------------------------------------------------
    ("cycler-reset-class", "{{ cycler.reset(cycler) }}", "", "chat", "error:UndefinedError"),
    ("cycler-reset-object", "{{ cycler.reset(messages[0]) }}",
     "{'messages': [{'role': 'user'}]}", "chat", "error:UndefinedError"),
    ("cycler-next-print", "{{ cycler.next }}|{{ cycler('a').next }}|{{ cycler('a').current }}",
     "", "chat", "ok"),
    ("cycler-property-fget", "{{ cycler.current.fget }}", "", "chat", "error:UndefinedError"),
    ("joiner-class-call", "{{ joiner.__call__ }}{{ joiner.__init__(joiner) }}", "", "chat",
     "error:SecurityError"),
    ("namespace-class", "{{ namespace.__init__ }}{{ namespace._template_setattr }}", "",
     "chat", "ok"),
    # -- caller data modified in the immutable sandbox -------------------------------------------
    ("dict-update-caller", "{{ dict.update(messages[0], {'role': 'x'}) }}",
     "{'messages': [{'role': 'user'}]}", "immutable", "error:UndefinedError"),
    ("dict-clear-caller", "{{ dict.clear(messages[0]) }}", "{'messages': [{'role': 'u'}]}",
     "immutable", "error:UndefinedError"),
    ("dict-setdefault-caller", "{{ dict.setdefault(messages[0], 'x', 1) }}",
     "{'messages': [{'role': 'u'}]}", "immutable", "error:UndefinedError"),
    ("dict-pop-caller", "{{ dict.pop(messages[0], 'role') }}", "{'messages': [{'role': 'u'}]}",
     "immutable", "error:UndefinedError"),
    # -- raw Python exceptions -------------------------------------------------------------------
    ("int-literal-100000-digits", "{{ " + "7" * 100_000 + " }}", "", "chat", "error:TemplateSyntaxError"),
    ("float-literal-huge", "{{ " + "7" * 5000 + ".5e999999 }}", "", "chat", "ok"),
    # -- time: work priced below its cost ----------------------------------------------------------
    ("wordwrap-loop", BIG + "{% for i in range(1000) %}{{ s|wordwrap(79)|length }}{% endfor %}",
     "", "chat", "limit:max_steps"),
    ("title-loop", BIG + "{% for i in range(1000) %}{{ s|title|length }}{% endfor %}", "",
     "chat", "limit:max_steps"),
    ("striptags-loop", BIG + "{% for i in range(1000) %}{{ s|striptags|length }}{% endfor %}",
     "", "chat", "limit:max_steps"),
    ("urlize-loop", BIG + "{% for i in range(1000) %}{{ s|urlize|length }}{% endfor %}", "",
     "chat", "limit:max_steps"),
    ("format-filter-loop", BIG + "{% for i in range(1000) %}{{ '%s'|format(s)|length }}"
     "{% endfor %}", "", "chat", "limit:max_steps"),
    ("str-format-loop", BIG + "{% for i in range(1000) %}{{ '{}'.format(s)|length }}"
     "{% endfor %}", "", "chat", "limit:max_steps"),
    ("slices-loop", BIG + "{% for i in range(100000) %}{{ s[1:]|length }}{% endfor %}", "",
     "chat", "limit:max_steps"),
    ("equal-big-loop", BIG + "{% set t = 'x' * 40000000 %}{% for i in range(100000) %}"
     "{{ s == t }}{% endfor %}", "", "chat", "limit:max_steps"),
    ("less-big-loop", BIG + "{% set t = 'x' * 40000000 %}{% for i in range(100000) %}"
     "{{ s < t }}{% endfor %}", "", "chat", "limit:max_steps"),
    ("is-eq-loop", BIG + "{% set t = 'x' * 40000000 %}{% for i in range(100000) %}"
     "{{ s is eq(t) }}{% endfor %}", "", "chat", "limit:max_steps"),
    ("is-in-loop", BIG + "{% for i in range(100000) %}{{ 'y' is in(s) }}{% endfor %}", "",
     "chat", "limit:max_steps"),
    ("in-markup-loop", BIG + "{% set m = s|safe %}{% for i in range(100000) %}{{ 'y' in m }}"
     "{% endfor %}", "", "chat", "limit:max_steps"),
    ("printf-precheck", "{{ ('%(' * 40000) % {} }}", "", "chat", "error:TemplateValueError"),
    ("format-precheck", "{{ ('%(' * 40000)|format(a=1) }}", "", "chat", "error:TemplateValueError"),
    ("urlize-crafted", "{{ ('(' * 200000 + 'a.com' + ')' * 200000)|urlize|length }}", "",
     "chat", "ok"),
    ("striptags-comments", "{{ ('<!--' * 500000)|striptags|length }}", "", "chat", "ok"),
    ("striptags-adjacent-comments", "{{ ('<!---->' * 500000)|striptags|length }}", "", "chat",
     "ok"),
    ("encode-punycode", "{{ ('ü' * 60000).encode('punycode') }}", "", "chat", "error:SecurityError"),
    ("encode-idna", "{{ ('ü' * 60000).encode('idna') }}", "", "chat", "error:SecurityError"),
    ("self-calling-macro", "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
     "{% endmacro %}{{ f(60) }}", "", "chat", "limit:max_steps"),
    # -- memory ------------------------------------------------------------------------------------
    ("split-cjk-six-times", CJK + "{% set ns = namespace(k=[]) %}{% for i in range(6) %}"
     "{% set ns.k = ns.k + [s.split()] %}{% endfor %}", "", "chat", "limit:max_steps"),
    ("iterate-50mb", "{% set s = '語' * 50000000 %}{% for c in s %}{% endfor %}", "", "chat",
     "limit:max_collection_size"),
    ("iterate-cjk", "{% set s = '語' * 9000000 %}{% for c in s %}{% endfor %}", "", "chat",
     "limit:max_steps"),
    ("unpack-50mb", "{% set s = '語' * 50000000 %}{% set a, b = s %}", "", "chat", "error:TemplateValueError"),
    ("spread-50mb", "{% set s = '語' * 50000000 %}{{ range(*s) }}", "", "chat", "limit:max_collection_size"),
    ("list-filter-cjk", "{% set s = '語' * 40000000 %}{{ s|list|length }}", "", "chat",
     "limit:max_steps"),
    ("repr-namespace", BIG + "{% set ns = namespace(a=[s] * 200) %}{{ ns }}", "", "chat",
     "limit:max_string_size"),
    ("repr-cycler", BIG + "{% set c = cycler(*([s] * 200)) %}{{ c }}", "", "chat", "limit:max_string_size"),
    ("repr-dict-view", BIG + "{% set d = {'a': [s] * 200} %}{{ d.items() }}", "", "chat",
     "limit:max_string_size"),
    ("repr-groupby", BIG + "{% set g = [{'k': 1, 'v': [s] * 200}]|groupby('k') %}{{ g[0] }}",
     "", "chat", "limit:max_string_size"),
    ("string-of-namespace", BIG + "{% set ns = namespace(a=[s] * 200) %}{{ ns|string|length }}",
     "", "chat", "limit:max_string_size"),
    ("bytes-center", "{{ 'x'.encode().center(2000000000) }}", "", "chat", "error:SecurityError"),
    ("bytes-ljust", "{{ 'x'.encode().ljust(2000000000)|length }}", "", "chat", "error:SecurityError"),
    ("bytes-times", "{{ ('x'.encode() * 2000000000)|length }}", "", "chat", "error:SecurityError"),
    ("int-to-bytes", "{{ (258).to_bytes(2, 'big').center(2000000000) }}", "", "chat", "error:SecurityError"),
    ("translate-expansion", "{{ ('ab' * 10000000).translate({97: 'xyzxyz'})|length }}", "",
     "chat", "limit:max_string_size"),
    ("from-bytes-huge", "{{ (0).from_bytes(range(100000)|list, 'big') }}", "", "chat",
     "limit:max_int_digits"),
    ("odd-printf", "{{ '%2000000000d' is odd }}", "", "chat", "limit:max_string_size"),
    ("even-printf", "{{ '%2000000000d' is even }}", "", "chat", "limit:max_string_size"),
    ("divisibleby-printf", "{{ '%2000000000d' is divisibleby(3) }}", "", "chat", "limit:max_string_size"),
    # -- spans -------------------------------------------------------------------------------------
    ("many-generation-blocks", "{% for i in range(40000) %}a{% generation %}b{% endgeneration %}"
     "{% endfor %}", "", "spans", "ok"),
]

_CHILD = r"""
import json, re, resource, sys, time
memory = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
sys.path.insert(0, sys.argv[2])
request = json.loads(sys.stdin.read())
import minijinja_py as mj
""" + CHILD_SETUP + r"""
kind = request["env"]
limits = mj.Limits(**request["limits"])
env = {"chat": lambda: mj.chat_environment(limits=limits),
       "spans": lambda: mj.chat_environment(limits=limits),
       "immutable": lambda: mj.Environment(immutable=True, limits=limits),
       "mutable": lambda: mj.Environment(immutable=False, limits=limits)}[kind]()
data = eval(request["data"]) if request["data"] else {}
before = json.dumps(data, sort_keys=True, default=repr)
result = {}
def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
start = time.perf_counter()
cpu_start = cpu_seconds()
try:
    template = env.from_string(request["source"])
    if kind == "spans":
        text = template.render_with_spans(**data)[0]
    else:
        text = template.render(**data)
    result = {"kind": "ok", "length": len(text), "head": text[:300],
              "address": bool(re.search(r"0x[0-9a-fA-F]{6,}", text))}
except mj.TemplateError as exc:
    result = {"kind": "error", "class": type(exc).__name__,
              "limit": isinstance(exc, mj.LimitExceededError), "message": str(exc)[:500],
              "fields": re.findall(r"Limits[.](\w+)", str(exc))}
except BaseException as exc:
    result = {"kind": "escaped", "class": type(exc).__name__, "message": str(exc)[:500]}
result["elapsed"] = time.perf_counter() - start
result["cpu_seconds"] = cpu_seconds() - cpu_start
result["data_unchanged"] = json.dumps(data, sort_keys=True, default=repr) == before
del data
try:  # the same process, afterwards: still healthy?
    victim = mj.chat_environment().from_string(request["victim"])
    result["victim"] = victim.render(**request["victim_data"])
except BaseException as exc:
    result["victim"] = f"victim failed: {type(exc).__name__}: {exc}"
sys.stdout.write(json.dumps(result))
"""


def run_attack(source: str, data: str, env: str,
               limits: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    request = json.dumps({"source": source, "data": data, "env": env, "victim": VICTIM,
                          "victim_data": VICTIM_DATA, "limits": limits or {}})
    started = time.perf_counter()
    try:
        completed = subprocess.run(
            [sys.executable, "-c", _CHILD, str(MEMORY_CAP), PACKAGE_PARENT],
            input=request, capture_output=True, text=True, timeout=TIMEOUT,
            cwd=PACKAGE_PARENT, env={**os.environ, "MINIJINJA_PY_CACHE": "0"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child did not finish within {TIMEOUT:.0f} s")
    try:
        return json.loads(completed.stdout)
    except ValueError:
        pytest.fail(f"the child died (exit {completed.returncode}) after "
                    f"{time.perf_counter() - started:.1f} s: {completed.stderr[-1500:]}")


@pytest.mark.parametrize("source,data,env,expected", [a[1:] for a in ATTACKS],
                         ids=[a[0] for a in ATTACKS])
def test_attack_is_stopped_cleanly_and_the_process_stays_healthy(source: str, data: str,
                                                                 env: str,
                                                                 expected: str) -> None:
    kind, _, detail = expected.partition(":")
    # the deadline (a wall clock) out of the way of an attack another limit must stop: that
    # limit then decides the outcome, however loaded the machine (the deadline bounds time)
    limits = {"max_seconds": None} if kind == "limit" and detail != "max_seconds" else None
    result = run_attack(source, data, env, limits)
    described = json.dumps(result)[:1500]
    assert result["kind"] != "escaped", described
    # the engine's own limits must stop it, not the child's memory cap (a MemoryError)
    assert "out of memory" not in result.get("message", ""), described
    if kind == "limit":
        assert result["kind"] == "error" and result["limit"], described
        assert result["fields"][:1] == [detail], described
    elif kind == "error":
        assert result["kind"] == "error" and result["class"] == detail, described
    else:
        assert expected == "ok" and result["kind"] == "ok", described
    if result["kind"] == "ok":
        assert not result["address"], described
    assert result["cpu_seconds"] < mj.Limits().max_seconds + MARGIN, described
    assert result["data_unchanged"], described
    assert result["victim"] == VICTIM_OUTPUT, described


def test_every_attack_kind_is_listed() -> None:
    assert len({a[0] for a in ATTACKS}) == len(ATTACKS)
    fields = set(mj.Limits.FIELDS)
    for name, _, _, _, expected in ATTACKS:
        kind, _, detail = expected.partition(":")
        assert (kind == "limit" and detail in fields) or (kind == "error" and detail) or \
            expected == "ok", name


# -- in this process: attackers first, then the victim ------------------------------------------
_QUICK = mj.Limits(max_steps=2_000_000, max_seconds=2.0, max_string_size=2_000_000,
                   max_collection_size=200_000, max_output_size=2_000_000)
_ENVIRONMENTS = {
    "chat": lambda: mj.chat_environment(limits=_QUICK),
    "spans": lambda: mj.chat_environment(limits=_QUICK),
    "immutable": lambda: mj.Environment(immutable=True, limits=_QUICK),
    "mutable": lambda: mj.Environment(immutable=False, limits=_QUICK),
}


def _shrink(source: str) -> str:
    """The attack with its sizes cut down (the lowered limits stop it anyway)."""
    return source.replace("40000000", "4000").replace("50000000", "5000").replace(
        "12000000", "1200").replace("9000000", "900").replace("500000", "5000")


def test_no_attack_changes_what_a_later_render_sees() -> None:
    victim = mj.chat_environment().from_string(VICTIM)
    assert victim.render(**VICTIM_DATA) == VICTIM_OUTPUT
    random_state = random.getstate()
    for name, source, data, env, _ in ATTACKS:
        if name.startswith("int-literal") or name.startswith("float-literal"):
            continue  # parse-time only; covered in the child above
        environment = _ENVIRONMENTS[env]()
        variables = eval(data) if data else {}  # noqa: S307 - the suite's own literals
        snapshot = json.dumps(variables, sort_keys=True)
        try:
            environment.from_string(_shrink(source)).render(**variables)
        except mj.TemplateError:
            pass
        assert json.dumps(variables, sort_keys=True) == snapshot, name
        # a fresh environment and the one the victim was compiled in: both unchanged
        assert victim.render(**VICTIM_DATA) == VICTIM_OUTPUT, name
        assert mj.chat_environment().from_string(VICTIM).render(**VICTIM_DATA) == VICTIM_OUTPUT
        assert mj.Environment().from_string(VICTIM).render(**VICTIM_DATA) == VICTIM_OUTPUT
    assert random.getstate() == random_state, "a template used the host's global random state"


def test_random_and_lipsum_leave_the_hosts_random_state_alone() -> None:
    state = random.getstate()
    env = mj.chat_environment()
    text = env.from_string("{{ [1, 2, 3]|random }}{{ lipsum(3) }}{{ range(5)|random }}").render()
    assert text
    assert random.getstate() == state


def test_renders_of_one_template_from_many_threads_agree() -> None:
    """Item 7 of the issue: 8 threads render one template at once, its loops turning into
    generated code mid-run (compiler.HOT_ITERATIONS); every output is the single-thread one."""
    env = mj.chat_environment()
    template = env.from_string(
        "{% set ns = namespace(total=0, parts=[]) %}"
        "{% for m in messages %}{% if m.role == 'user' %}<u>{% else %}<a>{% endif %}"
        "{{ m.content|trim }}{% set ns.total = ns.total + m.content|length %}"
        "{% for w in m.content.split() %}{% if loop.first %}[{{ w }}]{% endif %}{% endfor %}"
        "{% if not loop.last %},{% endif %}{% endfor %}|{{ ns.total }}")
    conversations = [[{"role": "user" if i % 2 == 0 else "assistant",
                       "content": f" word{i} of thread {t} message {i} "}
                      for i in range(5 + t * 7)] for t in range(8)]
    expected = [mj.chat_environment().from_string(template.source).render(messages=c)
                for c in conversations]
    failures: List[str] = []
    barrier = threading.Barrier(8)

    def work(index: int) -> None:
        barrier.wait()
        for _ in range(60):
            got = template.render(messages=conversations[index])
            if got != expected[index]:
                failures.append(f"thread {index}: {got[:80]!r}")
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures[:3]

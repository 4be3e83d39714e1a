"""No operation hashing template values runs unbounded, however the keys collide (issue 34).

An int hashes to its value modulo ``P = 2**61 - 1``, so ``range(0, P * N, P)`` is N ints of
one hash, and a dict or set of them takes N**2/2 key comparisons inside ONE C call that no
step check or deadline interrupts (``dict.fromkeys`` of 100,000 of them ran 92 s). Tuples of
small ints can be solved to share a hash; small ints and floats can be aimed at a table's
slots so that every insert walks a long run (quadratic without a single equal hash); a dict
built within bounds can then be looked up, compared or translated against in bulk.

collisions.py decides one rule for every operation that hashes template values: each is
charged its worst case before it runs, and refused (LimitExceededError naming
``Limits.max_steps`` and saying "a template can choose their hashes") when that is more than
a sixteenth of the budget in one call. Loops of single lookups are charged the same worst case
per lookup, so the step budget ends them ("needs more than ... steps").

Each hostile shape runs in a child (run_isolated: memory cap, wall-clock timeout) with the
default limits and must end with one of those two errors: before the fix each ran for minutes
in one call (the child's timeout), ended by the deadline, or rendered where the rule now
refuses. Below the bound the output equals Jinja2's.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

import minijinja_py as mj

import collision_keys
from collision_keys import P
from security_support import jinja2_outcome, outcome, run_isolated

# every test runs as a plain render, a provenance render and the tokens path (conftest.py)
pytestmark = pytest.mark.usefixtures("render_mode")

#: The child is killed after this many seconds (the old code took minutes on these inputs).
TIMEOUT = 120.0
#: Memory cap of the child.
MEMORY = 1536 * 2 ** 20
#: The refusal of collisions.py (with "max_steps" as the limit to raise).
CHOSEN = "a template can choose their hashes"
#: The step budget's own error: loops of lookups charged their worst case run out of steps.
BUDGET = "steps of work"
#: A key of 4,000 digits of hash 0: ``BIG + P * k`` all share its hash and its leading digits,
#: so comparing two of them reads all their digits.
BIG = f"({P} * 10 ** 4000)"
_KEYS_MODULE = str(Path(collision_keys.__file__).resolve())


def _keys_expr(call: str) -> str:
    """A data_expr calling a function of collision_keys.py in the child."""
    return f"__import__('runpy').run_path({_KEYS_MODULE!r})['{call.split('(')[0]}']" \
           f"({call.split('(', 1)[1]}"


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIJINJA_PY_CACHE", "0")


@functools.lru_cache(maxsize=None)
def _aimed_floats() -> list:
    """61,000 integral floats (JSON can carry them) aimed at the slots of a 2**17-slot dict:
    a dict of them took 3 s to build, 100 times a plain one (see collisions.py)."""
    return [float(key) for key in collision_keys.aimed_ints(17, 50000, 11000)]


def _literal(keys: Any) -> str:
    return "{" + ", ".join(f"{key}: 0" for key in keys) + "}"


def _big_keys_dict(count: int) -> str:
    """Template code binding ``d`` to a dict of ``count`` 4,000-digit keys of one hash (within
    the bound) and ``x`` to another key of that hash, absent from it."""
    return (f"{{% set b = {BIG} %}}{{% set ns = namespace(keys=[]) %}}"
            f"{{% for k in range(1, {count + 1}) %}}{{% set ns.keys = ns.keys + [b + {P} * k] %}}"
            f"{{% endfor %}}{{% set d = dict.fromkeys(ns.keys) %}}"
            f"{{% set x = b + {P} * 100000 %}}")


MUTABLE = {"immutable": False}

#: (id, source, data, data_expr, env options, what the error must say, provenance)
HOSTILE = [
    ("dict.fromkeys", f"{{{{ dict.fromkeys(range(0, {P} * 100000, {P})) | length }}}}",
     None, "", None, CHOSEN, False),
    ("{}.fromkeys", f"{{{{ {{}}.fromkeys(range(0, {P} * 100000, {P})) | length }}}}",
     None, "", None, CHOSEN, False),
    ("unique", f"{{{{ range(0, {P} * 100000, {P}) | unique | list | length }}}}",
     None, "", None, CHOSEN, False),
    ("unique-of-input", "{{ nums | unique | list | length }}",
     None, f"{{'nums': [k * {P} for k in range(100000)]}}", None, CHOSEN, False),
    ("dict-literal-of-expressions",
     f"{{% set b = {BIG} %}}{{{{ " + _literal(f"b + {P * k}" for k in range(20000))
     + " | length }}",
     None, "", None, CHOSEN, False),
    ("dict-literal-of-constants", "{{ " + _literal(k * P for k in range(30000)) + " | length }}",
     None, "", None, CHOSEN, False),
    ("dict-of-pairs", f"{{{{ dict(range(0, {P} * 100000, {P}) | batch(2) | list) | length }}}}",
     None, "", None, CHOSEN, False),
    ("namespace-of-pairs",
     f"{{% set ns = namespace(range(0, {P} * 100000, {P}) | batch(2) | list) %}}done",
     None, "", None, CHOSEN, False),
    ("update-with-pairs",
     f"{{% set d = {{}} %}}{{% set _ = d.update(range(0, {P} * 100000, {P}) | batch(2) | list) %}}"
     "{{ d | length }}", None, "", MUTABLE, CHOSEN, False),
    ("tuple-keys-big-lanes", "{{ dict.fromkeys(keys) | length }}",
     None, f"{{'keys': [(1, k * {P}) for k in range(30000)]}}", None, CHOSEN, False),
    ("tuple-keys-small-ints", "{{ dict.fromkeys(keys) | length }}",
     None, f"{{'keys': {_keys_expr('colliding_pairs(30000)')}}}", None, CHOSEN, False),
    ("tuple-keys-small-ints-unique", "{{ keys | unique | list | length }}",
     None, f"{{'keys': {_keys_expr('colliding_pairs(30000)')}}}", None, CHOSEN, False),
    ("float-keys-aimed-at-slots", "{{ dict.fromkeys(keys) | length }}",
     "aimed-floats", "", None, CHOSEN, False),
    ("set-difference",
     f"{{% set d = dict.fromkeys(range(0, {P} * 2000, {P})) %}}"
     f"{{{{ (d.keys() - range(0, {P} * 100000, {P})) | length }}}}",
     None, "", None, CHOSEN, False),
    ("dicts-compared-in-lists",
     f"{{% set d = dict.fromkeys(range(0, {P} * 2500, {P})) %}}"
     f"{{% set e = dict.fromkeys(range(0, {P} * 2500, {P})) %}}{{{{ [d] * 2000 == [e] * 2000 }}}}",
     None, "", None, CHOSEN, False),
    # looked for in a list: each comparison reads every key (the last one differs)
    ("dict-looked-for-in-a-list",
     f"{{% set keys = range(0, {P} * 2500, {P}) | list %}}{{% set d = dict.fromkeys(keys, 0) %}}"
     "{% set e = dict(dict.fromkeys(keys[:-1], 0) | items | list + [(keys[-1], 1)]) %}"
     "{{ d in [e] * 2000 }}", None, "", None, CHOSEN, False),
    ("set-looked-for-in-a-list",
     f"{{% set s = dict.fromkeys(range(0, {P} * 2000, {P})).keys() - [] %}}"
     f"{{% set keys = s | list %}}"
     f"{{% set t = dict.fromkeys(keys[:-1] + [{P} * 99999]).keys() - [] %}}"
     "{{ t in [s] * 3000 }}", None, "", None, CHOSEN, False),
    ("translate-through-aimed-keys", "{{ ('\u00e9' * 5000000).translate(table) | length }}",
     None, f"{{'table': dict.fromkeys({_keys_expr('probe_path_flood(233, 4000, 13)')}, 'x')}}",
     None, CHOSEN, False),
    ("in-loop", _big_keys_dict(599) + "{% set ns2 = namespace(n=0) %}"
     "{% for i in range(100000) %}{% if x in d %}{% set ns2.n = ns2.n + 1 %}{% endif %}"
     "{% endfor %}{{ ns2.n }}", None, "", None, BUDGET, False),
    ("getitem-loop", _big_keys_dict(599) + "{% for i in range(100000) %}{{ d[x] }}{% endfor %}",
     None, "", None, BUDGET, False),
    ("get-loop", _big_keys_dict(599) + "{% for i in range(100000) %}{{ d.get(x, '') }}"
     "{% endfor %}", None, "", None, BUDGET, False),
    ("update-growing-loop", f"{{% set b = {BIG} %}}{{% set d = {{}} %}}"
     f"{{% for i in range(1, 100000) %}}{{% set _ = d.update({{b + {P} * i: 0}}) %}}{{% endfor %}}"
     "{{ d | length }}", None, "", MUTABLE, BUDGET, False),
    ("setdefault-growing-loop", f"{{% set b = {BIG} %}}{{% set d = {{}} %}}"
     f"{{% for i in range(1, 100000) %}}{{% set _ = d.setdefault(b + {P} * i, 0) %}}{{% endfor %}}"
     "{{ d | length }}", None, "", MUTABLE, BUDGET, False),
    ("provenance-dict.fromkeys",
     f"{{{{ dict.fromkeys(range(0, {P} * 100000, {P})) | length }}}}",
     None, "", None, CHOSEN, True),
    ("provenance-unique-of-input", "{{ nums | unique | list | length }}",
     None, f"{{'nums': [k * {P} for k in range(100000)]}}", None, CHOSEN, True),
]


@pytest.mark.parametrize("source,data,data_expr,env_options,expected,provenance",
                         [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE])
def test_hostile_hashing_is_refused(source: str, data: Any, data_expr: str,
                                    env_options: Optional[Dict[str, Any]], expected: str,
                                    provenance: bool) -> None:
    """Refused by collisions.py (or stopped by the step budget, for loops of lookups), never
    by the deadline, the memory cap or the child's timeout."""
    if data == "aimed-floats":
        data = {"keys": _aimed_floats()}
    options: Dict[str, Any] = {}
    if env_options is not None:
        options = {"env": "plain", "env_options": env_options}
    # the deadline (a wall clock) out of the way: on a loaded machine it could fire first
    result = run_isolated(source, data, data_expr=data_expr, timeout=TIMEOUT, memory=MEMORY,
                          limits={"max_seconds": None},
                          render_mode="provenance" if provenance else None, **options)
    assert result.kind == "template_error", result.describe()
    assert result.error_class == "LimitExceededError", result.describe()
    assert expected in result.message and "Limits.max_steps" in result.message, \
        result.describe()


# -- below the bound: Jinja2's output --------------------------------------------------------
SMALL = [
    f"{{{{ dict.fromkeys(range(0, {P} * 40, {P})) | length }}}}",
    f"{{{{ {{}}.fromkeys(range(0, {P} * 40, {P}), 1) | list | last }}}}",
    f"{{{{ (range(0, {P} * 40, {P}) | list + [0, {P}]) | unique | list | length }}}}",
    "{{ [1, 1.0, true, 2, 2.0, 'a', 'A', (1, 2), (1, 2.0)] | unique | list }}",
    "{{ ['a', 'A', 'b'] | unique(case_sensitive=true) | list }}",
    f"{{% set a = {P} %}}{{{{ {{a * 3: 'x', a: 'y', a * 3: 'z', 0: 'w'}} }}}}",
    "{{ " + _literal(k * P for k in range(40)) + " | length }}",
    f"{{{{ dict(range(0, {P} * 40, {P}) | batch(2) | list) | length }}}}",
    f"{{% set ns = namespace(range(0, {P} * 4, {P}) | batch(2) | list) %}}done",
    f"{{{{ dict.fromkeys({collision_keys.colliding_pairs(40)}) | length }}}}",
    f"{{{{ {collision_keys.colliding_pairs(10)} | unique | list | length }}}}",
    f"{{{{ dict.fromkeys({[float(k) for k in collision_keys.aimed_ints(8, 100, 50)]}) "
    "| length }}",
    f"{{% set d = dict.fromkeys(range(0, {P} * 40, {P})) %}}"
    f"{{{{ (d.keys() - range(0, {P} * 20, {P})) | list | sort }}}}",
    f"{{% set d = dict.fromkeys(range(0, {P} * 40, {P})) %}}{{{{ d == d.copy() }}}}"
    f"{{{{ [d] * 3 == [d.copy()] * 3 }}}}{{{{ d in [{{}}, d.copy()] }}}}"
    "{{ d.keys() == d.copy().keys() }}{{ d.items() <= d.copy().items() }}",
    f"{{% set d = dict.fromkeys(range(0, {P} * 40, {P}), 'v') %}}{{{{ {P} in d }}}}"
    f"{{{{ {P} * 41 in d }}}}{{{{ d[{P} * 2] }}}}{{{{ d.get({P} * 3) }}}}{{{{ d.get(7, 'no') }}}}"
    "{{ d[0] }}{{ d.keys().isdisjoint([1, 2]) }}{{ 5 is in(d) }}",
    "{{ ('\u00e9\u00e9 abc' * 10).translate({233: 'e', 97: 'A'}) }}",
    f"{{{{ range(0, {P} * 40, {P}) | map('string') | list | length }}}}",
]


@pytest.mark.parametrize("source", SMALL)
def test_below_the_bound_output_equals_jinja2(source: str) -> None:
    expected = jinja2_outcome(source)
    assert expected[0] == "ok", expected
    assert outcome(source) == expected


def test_groupby_and_dictsort_never_hash_and_equal_jinja2() -> None:
    """groupby sorts and compares neighbours (as Jinja2's does): keys of one hash cost
    nothing more; dictsort and tojson read a dict built within the bound."""
    data = {"rows": [{"k": (k % 7) * P, "v": k} for k in range(300)]}
    for source in ("{% for g in rows | groupby('k') %}{{ g.grouper }}:{{ g.list | length }} "
                   "{% endfor %}",
                   f"{{{{ dict.fromkeys(range(0, {P} * 30, {P}), 1) | dictsort(reverse=true) }}}}",
                   f"{{{{ dict.fromkeys(range(0, {P} * 30, {P}), 1) | tojson }}}}"):
        expected = jinja2_outcome(source, data)
        assert expected[0] == "ok"
        assert outcome(source, data) == expected


def test_mutable_growth_below_the_bound() -> None:
    env = mj.Environment(immutable=False)
    source = (f"{{% set d = {{}} %}}{{% for i in range(200) %}}"
              f"{{% set _ = d.update({{i * {P}: i}})"
              f" %}}{{% set _ = d.setdefault(i * {P} + 1, i) %}}{{% endfor %}}"
              "{{ d | length }} {{ d | dictsort | first }}")
    assert env.from_string(source).render() == "400 (0, 0)"


# -- the rule itself (collisions.py) ------------------------------------------------------------
@pytest.mark.parametrize("key,steered,colliding", [
    ("role", False, False),             # SipHash, keyed by a secret of the process
    (mj.Markup("a"), False, False),
    (None, False, False),
    (True, False, False),
    (7, True, False),                   # its own hash: it picks its slot
    (2 ** 60 - 1, True, False),
    (P, True, True),                    # hash 0, like 0
    (-(2 ** 70), True, True),
    (0.5, True, False),                 # at most 34 floats share a hash value
    ((1, 2), True, True),               # two numbers: one can be solved for the other
    ((3,), True, False),                # one number: a bijection of its hash
    ((0.5, 2.5), True, True),           # floats in a tuple, as ints
    ((0.5,), True, False),
    (("a", 5), False, False),           # a secret lane mixed in
    (("a", P), True, True),             # ... but a colliding item collides the tuple
    (("a", (1, 2)), True, True),
    ((None, 3), True, True),
    (range(3, 9), True, True),          # hashed as the tuple (length, start, step)
])
def test_which_keys_a_template_can_aim(key: Any, steered: bool, colliding: bool) -> None:
    from minijinja_py.guard import collisions

    assert (collisions.census([key])[1] == 1) == steered
    assert (collisions.census([key], salted=True)[1] == 1) == colliding


def test_a_fixed_pythonhashseed_makes_strs_keys_a_template_can_aim() -> None:
    """Strings are not counted because Python keys their hash with a secret of the process;
    a fixed PYTHONHASHSEED makes every str hash computable (docs/security.md, hash collisions),
    so strs are then counted as ints are. Checked in a child started with the seed."""
    script = ("import sys; sys.path.insert(0, sys.argv[1]); from minijinja_py.guard "
              "import collisions; print(collisions.census(['role'])[1], "
              "collisions.census(['role'], salted=True)[1])")
    root = str(Path(mj.__file__).resolve().parent.parent)
    for seed, expected in (("0", "1 0"), ("random", "0 0")):
        child = subprocess.run([sys.executable, "-c", script, root], capture_output=True,
                               text=True, timeout=60, env={**os.environ, "PYTHONHASHSEED": seed})
        assert child.stdout.split() == expected.split(), (seed, child.stderr)


def test_solved_small_int_pairs_share_one_hash() -> None:
    pairs = collision_keys.colliding_pairs(200)
    assert len({hash(pair) for pair in pairs}) == 1
    assert all(0 <= item < P for pair in pairs for item in pair)


def test_ordinary_tables_are_not_limited() -> None:
    """What real templates hash (strings, small ints in unique) is never refused, and a
    dict literal of constant string keys is not even counted (the default limits but the
    deadline, a wall clock that a loaded machine can make fire first)."""
    env = mj.chat_environment(limits=mj.Limits(max_seconds=None))
    assert env.from_string("{{ range(100000) | unique | list | length }}").render() == "100000"
    assert env.from_string("{{ dict.fromkeys(range(2000)) | length }}").render() == "2000"
    names = [f"k{i}" for i in range(200000)]
    assert env.from_string("{{ dict.fromkeys(names) | length }} {{ names | unique | list "
                           "| length }}").render(names=names) == "200000 200000"
    source = "{% for i in range(1000) %}{% set m = {'role': 'user', 'content': i} %}" \
             "{{ m.role[0] }}{% endfor %}"
    assert env.from_string(source).render() == "u" * 1000


def test_a_trusted_template_raises_max_steps() -> None:
    """The bound is a share of Limits.max_steps: raising it lets a bigger table through."""
    source = f"{{{{ dict.fromkeys(range(0, {P} * 6000, {P})) | length }}}}"
    with pytest.raises(mj.LimitExceededError, match=CHOSEN):
        mj.chat_environment().from_string(source).render()
    trusted = mj.chat_environment(limits=mj.Limits(max_steps=10 ** 9))
    assert trusted.from_string(source).render() == "6000"

"""Resource limits: every field of ``mj.Limits`` stops hostile templates, quickly and cleanly.

For each field (max_range, max_output_size, max_string_size, max_collection_size,
max_int_digits, max_recursion, max_nesting, max_steps, max_source_size):

* hostile templates raise ``mj.LimitExceededError`` whose message names ``Limits.<field>``,
  within a few seconds of work (CPU time), without the process running out of memory. They
  run in a child interpreter (``run_isolated``) with a wall-clock timeout and an address-space
  cap, so an engine that does not stop them fails the test instead of hanging it or
  exhausting the host;
* a custom ``mj.Limits(<field>=...)`` lowers the limit (a template that renders under the
  defaults is refused) and raises it (a template refused under the defaults renders);
* the defaults never fire on real chat templates: the whole shared corpus, a 20,000-message
  conversation and a single 10 MB message.

Each hostile template names the limit that must stop it (the first ``Limits.`` field its
message names): a template stopped by another limit would prove nothing about the one it is
listed under. The deadline is out of the way (``max_seconds=None``; tests/security/
test_deadline.py holds it), so the named limit decides however slow the machine.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Optional, Tuple

import pytest

import minijinja_py as mj
from minijinja_py.guard.prices import PROVENANCE_STR_STEPS

from security_support import (corpus_available, corpus_contexts, corpus_slugs, corpus_template,
                              run_isolated)

# every test runs as a plain render, a provenance render and the tokens path (conftest.py)
pytestmark = pytest.mark.usefixtures("render_mode")

#: A hostile template must be refused within this many CPU seconds of the child (from_string
#: and render): the defaults stop the slowest kinds of work in about five here. CPU time, not
#: the wall clock, which a loaded machine stretches as much as it likes.
FAST = 20.0
#: The child is killed after this many seconds (then the test fails as a hang): a guard.
TIMEOUT = 60.0
#: The deadline (Limits.max_seconds, a wall clock) out of the way: the limit a case is about
#: then decides its outcome, as fast as the machine goes.
NO_DEADLINE = {"max_seconds": None}

FIELDS = ("max_range", "max_output_size", "max_string_size", "max_collection_size",
          "max_int_digits", "max_recursion", "max_nesting", "max_steps", "max_source_size",
          "max_seconds")  # max_seconds: tests/security/test_deadline.py

BIG = "{% set a = 'x' * 10**7 %}"          # a 10 MB string, well under max_string_size
CYCLIC = "(lambda l: (l.append(l), l)[1])([1])"
DEEP_LIST = "(lambda: [x := 1] and [x := [x] for _ in range(10000)] and x)()"
DEEP_DICT = "(lambda: [x := {}] and [x := {'a': x} for _ in range(10000)] and x)()"


def test_every_field_is_covered() -> None:
    """This suite knows every limit; a new field needs hostile templates here."""
    import inspect

    parameters = inspect.signature(mj.Limits).parameters
    assert set(parameters) == set(FIELDS) == set(mj.Limits.FIELDS) == set(DOCUMENTED_DEFAULTS)


#: The defaults as the limits table of docs/security.md documents them (copied here, not read
#: from Limits: a default changed by mistake must fail this test, and one changed on purpose
#: changes the documentation, this table and the code together).
DOCUMENTED_DEFAULTS = {
    "max_range": 100_000, "max_output_size": 200_000_000, "max_string_size": 50_000_000,
    "max_collection_size": 10_000_000, "max_int_digits": 4_300, "max_recursion": 100,
    "max_nesting": 128, "max_steps": 50_000_000, "max_source_size": 1_000_000,
    "max_seconds": 10.0,
}


def test_defaults_are_documented_values() -> None:
    defaults = mj.Limits()
    assert {field: getattr(defaults, field) for field in FIELDS} == DOCUMENTED_DEFAULTS
    assert mj.Limits() == mj.Limits(**DOCUMENTED_DEFAULTS)
    # what an environment uses when given no limits, and what a render outside one sees
    assert mj.chat_environment().limits == mj.Limits(**DOCUMENTED_DEFAULTS)
    assert mj.Environment().limits == mj.Limits(**DOCUMENTED_DEFAULTS)


def test_defaults_are_documented_in_the_limits_table() -> None:
    """The limits table of docs/security.md says what DOCUMENTED_DEFAULTS says (the two are
    kept together)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(
        encoding="utf-8")
    rows = dict(re.findall(r"^\s*\| `(max_\w+)` \| ([\d,.]+) \|", page, re.MULTILINE))
    assert {field: float(text.replace(",", "")) for field, text in rows.items()} == \
        {field: float(value) for field, value in DOCUMENTED_DEFAULTS.items()}


# (field or fields accepted, id, source, data_expr)
HOSTILE = [
    # -- max_range -------------------------------------------------------------------------
    ("max_range", "range-1e6", "{{ range(10**6) }}", ""),
    ("max_range", "range-loop", "{% for i in range(10**6) %}{% endfor %}", ""),
    ("max_range", "range-step", "{{ range(0, 10**9, 2)|length }}", ""),
    ("max_range", "range-negative", "{{ range(-10**7, 0)|list|length }}", ""),
    ("max_range", "range-huge", "{{ range(10**100)|length }}", ""),
    # -- max_string_size -------------------------------------------------------------------
    ("max_string_size", "str-times", "{{ 'a' * 10**10 }}", ""),
    ("max_string_size", "times-str", "{{ 10**10 * 'a' }}", ""),
    ("max_string_size", "center-filter", "{{ 'x'|center(10**10) }}", ""),
    ("max_string_size", "center-method", "{{ 'x'.center(10**10) }}", ""),
    ("max_string_size", "ljust", "{{ 'x'.ljust(10**10) }}", ""),
    ("max_string_size", "rjust", "{{ 'x'.rjust(10**10, '-') }}", ""),
    ("max_string_size", "zfill", "{{ '1'.zfill(10**10) }}", ""),
    ("max_string_size", "format-width", "{{ '{:>9999999999}'.format('x') }}", ""),
    ("max_string_size", "format-nested-width", "{{ '{0:{1}}'.format('x', 9999999999) }}", ""),
    ("max_string_size", "format-precision", "{{ '{:.999999999f}'.format(1.5) }}", ""),
    ("max_string_size", "indent-width", "{{ 'a'|indent(10**10) }}", ""),
    ("max_string_size", "indent-string", "{{ ('a\n' * 1000)|indent('y' * 10**6) }}", ""),
    ("max_string_size", "join-method", "{{ ' '.join(['x' * 10**7] * 1000) }}", ""),
    ("max_string_size", "join-method-sep", "{{ ('x' * 10**7).join(['a'] * 1000) }}", ""),
    ("max_string_size", "join-filter", "{{ (['x' * 10**7] * 1000)|join(' ') }}", ""),
    ("max_string_size", "replace-method", "{{ ('a' * 1000).replace('', 'x' * 10**6) }}", ""),
    ("max_string_size", "replace-filter", "{{ ('a' * 1000)|replace('', 'x' * 10**6) }}", ""),
    ("max_string_size", "replace-grow", "{{ ('a' * 10**7)|replace('a', 'bbbbbbbbbb') }}", ""),
    ("max_string_size", "expandtabs", "{{ 'a\tb'.expandtabs(10**9) }}", ""),
    ("max_string_size", "tojson-indent", "{{ [1]|tojson(indent=10**9) }}", ""),
    # (no line is indented, but the indent is refused before json.dumps can build it)
    ("max_string_size", "tojson-indent-of-a-scalar", "{{ 1|tojson(indent=10**12) }}", ""),
    ("max_string_size", "tojson-indent-str",
     "{{ ([[1, 2]] * 1000)|tojson(indent='x' * 10**6) }}", ""),
    ("max_string_size", "printf-filter", "{{ '%9999999999s'|format('x') }}", ""),
    ("max_string_size", "printf-filter-star", "{{ '%*s'|format(10**10, 'x') }}", ""),
    ("max_string_size", "printf-operator-width", "{{ '%999999999s' % 'x' }}", ""),
    ("max_string_size", "printf-operator-star", "{{ '%*s' % (10**10, 'x') }}", ""),
    ("max_string_size", "printf-operator-precision", "{{ '%.999999999f' % 1.0 }}", ""),
    ("max_string_size", "printf-operator-zero", "{{ '%0999999999d' % 1 }}", ""),
    ("max_string_size", "lipsum", "{{ lipsum(10**6) }}", ""),
    ("max_string_size", "concat-tilde", BIG + "{{ a ~ a ~ a ~ a ~ a ~ a }}", ""),
    ("max_string_size", "concat-plus", "{% set a = 'x' * 3 * 10**7 %}{{ a + a }}", ""),
    ("max_string_size", "concat-doubling",
     "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
     "{% endfor %}{{ ns.s|length }}", ""),
    ("max_string_size", "str-of-list-filter", BIG + "{{ ([a] * 1000)|string }}", ""),
    ("max_string_size", "tojson-of-list", BIG + "{{ ([a] * 1000)|tojson }}", ""),
    ("max_string_size", "pprint-of-list", BIG + "{{ ([a] * 1000)|pprint }}", ""),
    ("max_string_size", "printf-filter-of-list", BIG + "{{ '%s'|format([a] * 1000) }}", ""),
    ("max_string_size", "tojson-shared-list", "{{ ([[1] * 10**6] * 10**6)|tojson }}", ""),
    # printing a container builds its str() first: refuse before building it (its size
    # would also pass max_output_size, had it been built)
    ("max_string_size", "print-list", BIG + "{{ [a] * 1000 }}", ""),
    ("max_string_size", "print-dict", BIG + "{{ {'k': [a] * 1000} }}", ""),
    ("max_string_size", "print-shared-list", "{{ [[1] * 10**6] * 10**6 }}",
     ""),
    ("max_string_size", "format-method-of-list",
     BIG + "{{ '{}'.format([a] * 1000) }}", ""),
    ("max_string_size", "printf-operator-of-list",
     BIG + "{{ '%s' % ([a] * 1000,) }}", ""),
    ("max_string_size", "concat-of-list", BIG + "{{ 'x' ~ [a] * 1000 }}",
     ""),
    # -- max_collection_size ---------------------------------------------------------------
    ("max_collection_size", "list-times", "{{ [1] * 10**9 }}", ""),
    ("max_collection_size", "times-list", "{{ 10**9 * [1] }}", ""),
    ("max_collection_size", "tuple-times", "{{ (1,) * 10**9 }}", ""),
    ("max_collection_size", "list-plus", "{% set l = [1] * 10**7 %}{{ (l + l)|length }}", ""),
    ("max_collection_size", "fromkeys", "{{ dict.fromkeys(range(100000)|list * 200)|length }}",
     ""),
    ("max_collection_size", "batch-fill", "{{ [1]|batch(10**9, 0)|list|length }}", ""),
    ("max_collection_size", "slice-fill", "{{ [1]|slice(10**9, 0)|list|length }}", ""),
    ("max_collection_size", "list-of-string", "{{ ('x' * 2 * 10**7)|list|length }}", ""),
    # -- max_int_digits --------------------------------------------------------------------
    ("max_int_digits", "pow", "{{ 2**99999999 }}", ""),
    ("max_int_digits", "pow-nested", "{{ 10**(10**10) }}", ""),
    ("max_int_digits", "pow-big-base", "{{ (10**10)**(10**10) }}", ""),
    ("max_int_digits", "pow-negative-base", "{{ (-2)**99999999 }}", ""),
    ("max_int_digits", "pow-from-data", "{{ x|int ** 99999999 }}", "{'x': '7'}"),
    ("max_int_digits", "multiply", "{{ (10**4000) * (10**4000) }}", ""),
    ("max_int_digits", "squaring",
     "{% set ns = namespace(n=3) %}{% for i in range(100) %}{% set ns.n = ns.n * ns.n %}"
     "{% endfor %}{{ ns.n > 1 }}", ""),
    # `+`/`-` grow integers by one bit per step: a million doublings pass max_int_digits
    ("max_int_digits", "doubling-plus",
     "{% set ns = namespace(n=1) %}{% for i in range(1000) %}{% for j in range(1000) %}"
     "{% set ns.n = ns.n + ns.n %}{% endfor %}{% endfor %}{{ ns.n > 1 }}", ""),
    ("max_int_digits", "doubling-minus",
     "{% set ns = namespace(n=1) %}{% for i in range(1000) %}{% for j in range(1000) %}"
     "{% set ns.n = ns.n - -ns.n %}{% endfor %}{% endfor %}{{ ns.n > 1 }}", ""),
    ("max_int_digits", "sum-filter",
     "{% set ns = namespace(l=[1]) %}{% for i in range(20000) %}"
     "{% set ns.l = [ns.l|sum * 2] %}{% endfor %}{{ ns.l[0] > 1 }}", ""),
    # -- max_recursion ---------------------------------------------------------------------
    ("max_recursion", "macro-self", "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", ""),
    ("max_recursion", "macro-counter",
     "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", ""),
    ("max_recursion", "macro-mutual",
     "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
     ""),
    ("max_recursion", "macro-call-block",
     "{% macro m() %}{% call m() %}{{ caller() }}{% endcall %}{% endmacro %}"
     "{% call m() %}x{% endcall %}", ""),
    ("max_recursion", "caller-chain",
     "{% macro m() %}{{ caller() }}{% endmacro %}"
     "{% macro r() %}{% call m() %}{{ r() }}{% endcall %}{% endmacro %}{{ r() }}", ""),
    ("max_recursion", "recursive-loop-same-data",
     "{% for a in x recursive %}{{ loop(x) }}{% endfor %}", "{'x': [1]}"),
    ("max_recursion", "recursive-loop-cyclic-data",
     "{% for a in x recursive %}{% if a is iterable %}{{ loop(a) }}{% else %}{{ a }}{% endif %}"
     "{% endfor %}", f"{{'x': {CYCLIC}}}"),
    ("max_recursion", "recursive-loop-deep-data",
     "{% for a in x recursive %}{% if a is iterable %}{{ loop(a) }}{% endif %}{% endfor %}",
     f"{{'x': {DEEP_LIST}}}"),
    ("max_recursion", "tojson-deep-data", "{{ x|tojson }}", f"{{'x': {DEEP_LIST}}}"),
    ("max_recursion", "tojson-deep-dict", "{{ x|tojson }}", f"{{'x': {DEEP_DICT}}}"),
    ("max_recursion", "print-deep-data", "{{ x }}", f"{{'x': {DEEP_LIST}}}"),
    ("max_recursion", "pprint-deep-data", "{{ x|pprint }}", f"{{'x': {DEEP_DICT}}}"),
    ("max_recursion", "string-deep-data", "{{ x|string }}", f"{{'x': {DEEP_LIST}}}"),
    ("max_recursion", "built-deep-list-print",
     "{% set ns = namespace(x=1) %}{% for i in range(50000) %}{% set ns.x = [ns.x] %}"
     "{% endfor %}{{ ns.x }}", ""),
    ("max_recursion", "built-deep-list-tojson",
     "{% set ns = namespace(x=1) %}{% for i in range(50000) %}{% set ns.x = [ns.x] %}"
     "{% endfor %}{{ ns.x|tojson }}", ""),
    ("max_recursion", "built-deep-list-compare",
     "{% set ns = namespace(x=1, y=1) %}{% for i in range(50000) %}"
     "{% set ns.x = [ns.x] %}{% set ns.y = [ns.y] %}{% endfor %}{{ ns.x == ns.y }}", ""),
    ("max_recursion", "built-deep-dict-sorted",
     "{% set ns = namespace(x={}) %}{% for i in range(50000) %}{% set ns.x = {'a': ns.x} %}"
     "{% endfor %}{{ ns.x|tojson(sort_keys=true) }}", ""),
    # -- max_nesting -----------------------------------------------------------------------
    ("max_nesting", "parens", "{{ " + "(" * 10000 + "1" + ")" * 10000 + " }}", ""),
    ("max_nesting", "brackets", "{{ " + "[" * 10000 + "1" + "]" * 10000 + " }}", ""),
    ("max_nesting", "braces", "{{ " + "{'a': " * 10000 + "1" + "}" * 10000 + " }}", ""),
    ("max_nesting", "calls", "{{ " + "f(" * 10000 + ")" * 10000 + " }}", ""),
    ("max_nesting", "unclosed-parens", "{{ " + "(" * 10000 + " }}", ""),
    ("max_nesting", "if-blocks", "{% if x %}" * 10000 + "{% endif %}" * 10000, ""),
    ("max_nesting", "if-unclosed", "{% if x %}" * 10000, ""),
    ("max_nesting", "for-blocks", "{% for a in [1] %}" * 10000 + "{% endfor %}" * 10000, ""),
    ("max_nesting", "macro-blocks", "{% macro m() %}" * 10000 + "{% endmacro %}" * 10000, ""),
    ("max_nesting", "set-blocks", "{% set a %}" * 10000 + "{% endset %}" * 10000, ""),
    ("max_nesting", "filter-blocks", "{% filter upper %}" * 10000 + "{% endfilter %}" * 10000,
     ""),
    ("max_nesting", "plus-chain", "{{ " + "+".join(["1"] * 20000) + " }}", ""),
    ("max_nesting", "minus-chain", "{{ " + " - ".join(["1"] * 20000) + " }}", ""),
    ("max_nesting", "and-chain", "{{ " + " and ".join(["x"] * 20000) + " }}", ""),
    ("max_nesting", "filter-chain", "{{ x" + "|string" * 20000 + " }}", ""),
    ("max_nesting", "attribute-chain", "{{ x" + ".a" * 20000 + " }}", ""),
    ("max_nesting", "subscript-chain", "{{ x" + "[0]" * 20000 + " }}", ""),
    ("max_nesting", "not-chain", "{{ " + "not " * 20000 + "x }}", ""),
    ("max_nesting", "negation-chain", "{{ " + "-" * 20000 + "1 }}", ""),
    ("max_nesting", "conditional-chain", "{{ " + "1 if x else " * 20000 + "1 }}", ""),
    # -- max_steps -------------------------------------------------------------------------
    ("max_steps", "nested-loops",
     "{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}", ""),
    ("max_steps", "nested-loops-printing",
     "{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}{% endfor %}",
     ""),
    ("max_steps", "three-loops",
     "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
     "{% endfor %}{% endfor %}{% endfor %}", ""),
    ("max_steps", "macro-calls",
     "{% macro m() %}{% endmacro %}{% for a in range(100000) %}{% for b in range(1000) %}"
     "{{ m() }}{% endfor %}{% endfor %}", ""),
    ("max_steps", "nested-loops-with-work",
     "{% for a in range(100000) %}{% for b in range(100000) %}"
     "{% if b['type'] == 'image' %}{% endif %}{% endfor %}{% endfor %}", ""),
    ("max_steps", "loop-over-characters",
     "{% for c in 'x' * 9 * 10**6 %}{% if c['type'] == 'image' %}{% endif %}{% endfor %}", ""),
    ("max_collection_size", "loop-over-40m-characters",
     "{% for c in 'x' * 4 * 10**7 %}{% if c['type'] == 'image' %}{% endif %}{% endfor %}", ""),
    ("max_steps", "loop-filter",
     "{% for a in range(100000) %}{% for b in range(100000) if b < 0 %}{% endfor %}"
     "{% endfor %}", ""),
    # -- max_source_size -------------------------------------------------------------------
    ("max_source_size", "ten-mb-text", "x" * 10_000_000, ""),
    ("max_source_size", "ten-mb-of-tags", "{{ x }}" * (10_000_000 // 7), ""),
    ("max_source_size", "ten-mb-in-one-tag", "{{ [" + "1," * 5_000_000 + "] }}", ""),
    ("max_source_size", "ten-mb-comment", "{# " + "c" * 10_000_000 + " #}", ""),
    # -- max_output_size -------------------------------------------------------------------
    ("max_output_size", "loop-of-long-string",
     "{% set s = 'x' * 10**6 %}{% for a in range(1000) %}{{ s }}{% endfor %}", ""),
    ("max_output_size", "loop-of-literal-text",
     "{% for a in range(100000) %}{% for b in range(100) %}" + "x" * 10000
     + "{% endfor %}{% endfor %}", ""),
    ("max_output_size", "one-print-many-values",
     "{% set s = 'x' * 4 * 10**7 %}{{ s }}{{ s }}{{ s }}{{ s }}{{ s }}{{ s }}", ""),
    # captured output (macros, blocks) is a string the render built: charged to max_steps,
    # and counted in the output size where it is printed
    ("max_output_size", "macro-output",
     "{% macro m() %}{{ 'x' * 10**7 }}{% endmacro %}{% for i in range(100) %}{{ m() }}"
     "{% endfor %}", ""),
    ("max_output_size", "filter-block",
     "{% filter upper %}{% for i in range(1000) %}{{ 'x' * 10**6 }}{% endfor %}{% endfilter %}",
     ""),
    ("max_output_size", "set-block",
     "{% set s %}{% for i in range(1000) %}{{ 'x' * 10**6 }}{% endfor %}{% endset %}", ""),
    ("max_steps", "call-block",
     "{% macro m() %}{{ caller() }}{{ caller() }}{% endmacro %}"
     "{% call m() %}{% for i in range(200) %}{{ 'x' * 10**6 }}{% endfor %}{% endcall %}", ""),
    # -- memory or work spread over many steps: the step budget stops it --------------------
    ("max_steps", "many-distinct-strings", BIG + "{{ ([a] * 1000)|map('upper')|list|length }}", ""),
    ("max_steps", "accumulate-lists",
     "{% set ns = namespace(x=[]) %}{% for i in range(1000) %}"
     "{% set ns.x = ns.x + [[1] * 10**7] %}{% endfor %}{{ ns.x|length }}", ""),
    ("max_steps", "accumulate-strings",
     "{% set ns = namespace(x=[]) %}{% for i in range(1000) %}"
     "{% set ns.x = ns.x + ['x' * 10**7 ~ i] %}{% endfor %}{{ ns.x|length }}", ""),
    ("max_steps", "scan-big-list-in-loop",
     "{% set l = [0] * 10**7 %}{% for i in range(100000) %}{% if 1 in l %}{% endif %}"
     "{% endfor %}", ""),
    ("max_steps", "scan-big-string-in-loop",
     BIG + "{% for i in range(100000) %}{% if a.count('y') %}{% endif %}{% endfor %}", ""),
    ("max_steps", "sort-big-list-in-loop",
     "{% set l = range(100000)|list * 100 %}{% for i in range(10000) %}{{ (l|sort)[0] }}"
     "{% endfor %}", ""),
    ("max_steps", "upper-big-string-in-loop",
     BIG + "{% for i in range(100000) %}{{ (a|upper)[0] }}{% endfor %}", ""),
]


def _case_id(case: tuple) -> str:
    return f"{case[0]}-{case[1]}"


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the persistent parse cache out of these tests (and out of the user's home)."""
    monkeypatch.setenv("MINIJINJA_PY_CACHE", "0")


@pytest.mark.parametrize("field,source,data_expr", [h[:1] + h[2:] for h in HOSTILE],
                         ids=[_case_id(h) for h in HOSTILE])
def test_hostile_template_is_stopped_by_a_limit(field: str, source: str, data_expr: str) -> None:
    # The deadline (Limits.max_seconds, 10 s of wall clock) stops any work that runs long:
    # on a slow or busy machine it can come before the limit a case is about (the step
    # budget spends its 50M steps in about 6 s here). Each case checks its own limit alone,
    # with the deadline out of the way.
    result = run_isolated(source, data_expr=data_expr, limits=NO_DEADLINE, timeout=TIMEOUT)
    assert result.kind == "template_error", result.describe()
    assert result.is_limit, result.describe()
    assert re.findall(r"Limits\.(\w+)", result.message)[:1] == [field], result.describe()
    assert result.cpu_seconds < FAST, result.describe()
    assert result.lineno is not None, "the error is located: " + result.describe()


# -- single builtins over the largest allowed inputs: a result or a limit, quickly -------------
# (id, source, its output or the limit that refuses it: "Limits.<field>")
EXPENSIVE = [
    ("wordwrap-long-word", "{{ ('x' * 10**6)|wordwrap(1)|length }}", "Limits.max_steps"),
    ("wordwrap-long-word-wide", "{{ ('x' * 10**7)|wordwrap(1000)|length }}",
     "Limits.max_steps"),
    ("wordwrap-many-words", "{{ ('x ' * 10**6)|wordwrap(1)|length }}", "1999999"),
    ("groupby-1M", "{{ (range(100000)|list * 10)|groupby('real')|length }}", "100000"),
    ("unique-10M", "{{ (range(100000)|list * 100)|unique|list|length }}", "100000"),
    ("sort-3M-strings", "{{ ('x' * 3 * 10**6)|list|sort|length }}", "3000000"),
    ("urlize-long", "{{ ('http://a.b/' * 10**6)|urlize|length }}", "11000000"),
    ("striptags-long", "{{ ('<a href=x>' * 10**6)|striptags|length }}", "0"),
    ("title-long", "{{ ('ab ' * 3 * 10**6)|title|length }}", "9000000"),
    ("escape-long", "{{ ('<&>' * 10**7)|e|length }}", "Limits.max_string_size"),
    ("replace-many", "{{ ('ab' * 10**7)|replace('a', 'xyz')|length }}", "40000000"),
    ("split-join", "{{ ('a,' * 10**7).split(',')|join('-')|length }}", "Limits.max_steps"),
    ("tojson-big-list", "{{ (range(100000)|list * 100)|tojson|length }}",
     "Limits.max_string_size"),
    # (string keys: a dict of 100,000 numbers is refused before it is built, see
    # test_hash_collisions.py, as a template can choose their hashes)
    ("dictsort-big", "{{ dict.fromkeys(range(100000)|map('string')|list)|dictsort|length }}",
     "100000"),
    ("pprint-big", "{{ (range(100000)|list * 10)|pprint|length }}", "7888899"),
    ("batch-big", "{{ (range(100000)|list * 100)|batch(3)|list|length }}", "3333334"),
]


@pytest.mark.parametrize("source,expected", [e[1:] for e in EXPENSIVE],
                         ids=[e[0] for e in EXPENSIVE])
def test_expensive_builtin_finishes_in_bounded_time(source: str, expected: str) -> None:
    """One filter over the biggest inputs the limits allow: it renders, or the limit that
    should refuse it does, within the same few seconds of work as any hostile template."""
    result = run_isolated(source, limits=NO_DEADLINE, timeout=TIMEOUT)
    if expected.startswith("Limits."):
        assert result.kind == "template_error", result.describe()
        assert result.error_class == "LimitExceededError", result.describe()
        assert re.findall(r"Limits\.\w+", result.message)[:1] == [expected], result.describe()
    else:
        assert result.kind == "ok" and result.output_head == expected, result.describe()
    assert result.cpu_seconds < FAST, result.describe()


# -- custom limits lower and raise each field --------------------------------------------------
def _render(source: str, limits: Optional[mj.Limits] = None, **data: Any) -> str:
    env = mj.chat_environment(limits=limits) if limits is not None else mj.chat_environment()
    return env.from_string(source).render(**data)


def _refused(source: str, field: str, limits: Optional[mj.Limits] = None, **data: Any) -> None:
    with pytest.raises(mj.LimitExceededError) as info:
        _render(source, limits, **data)
    assert f"Limits.{field}" in info.value.message, info.value.message


# (field, lowered value, template refused under it but fine under the defaults,
#  raised value, template refused under the defaults but fine raised, its output)
ADJUST = [
    ("max_range", 10, "{{ range(11)|length }}", 10**6, "{{ range(10**6)|length }}", "1000000"),
    ("max_string_size", 100, "{{ 'x' * 101 }}", 60_000_000, "{{ ('x' * 55_000_000)|length }}",
     "55000000"),
    ("max_collection_size", 10, "{{ ([1] * 11)|length }}", 12_000_000,
     "{{ ([1] * 11_000_000)|length }}", "11000000"),
    ("max_int_digits", 10, "{{ 10**20 }}", 10_000, "{{ (2**20000) % 1000 }}", "376"),
    ("max_recursion", 5,
     "{% macro m(n) %}{% if n %}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(10) }}.", 200,
     "{% macro m(n) %}{% if n %}{{ m(n - 1) }}{% else %}bottom{% endif %}{% endmacro %}"
     "{{ m(150) }}", "bottom"),
    ("max_nesting", 5, "{{ ((((((((1)))))))) }}", 250, "{% if true %}" * 200 + "x"
     + "{% endif %}" * 200, "x"),
    # 25 scans of 5,000,000 items: 2.5M steps each (budget.ITEMS_PER_STEP is 2), quick to run
    ("max_steps", 100, "{% for i in range(200) %}{% endfor %}.", 80_000_000,
     "{% set l = [0] * 5000000 %}{% for i in range(25) %}{% if 1 in l %}{% endif %}{% endfor %}"
     "done", "done"),
    ("max_output_size", 100, "{{ 'x' * 101 }}", None, None, None),
    ("max_source_size", 100, "x" * 101, 5_000_000, "a" * 3_000_000, "a" * 3_000_000),
]


@pytest.mark.parametrize("field,low,refused,high,accepted,output", ADJUST,
                         ids=[a[0] for a in ADJUST])
def test_lowered_limit_fires(field: str, low: int, refused: str, high: Any, accepted: Any,
                             output: Any) -> None:
    _render(refused)  # fine under the defaults
    _refused(refused, field, mj.Limits(**{field: low}))


@pytest.mark.parametrize("field,low,refused,high,accepted,output",
                         [a for a in ADJUST if a[3] is not None],
                         ids=[a[0] for a in ADJUST if a[3] is not None])
def test_raised_limit_allows_more(field: str, low: int, refused: str, high: int, accepted: str,
                                  output: str) -> None:
    _refused(accepted, field)  # refused under the defaults
    assert _render(accepted, mj.Limits(**{field: high})) == output


def _nested(depth: int, kind: type = list) -> Any:
    """``depth`` containers of ``kind``, one inside the other, around a 1."""
    value: Any = 1
    for _ in range(depth):
        value = kind([value])
    return value


MUTABLE = {"immutable": False}
_RECURSE = ("{% macro m(n) %}{% if n %}{{ m(n - 1) }}{% else %}bottom{% endif %}{% endmacro %}"
            "{{ m(depth) }}")
_LOOP_DOWN = ("{% for a in x recursive %}{% if a is iterable %}{{ loop(a) }}{% else %}{{ a }}"
              "{% endif %}{% endfor %}")
#: Every limit at its exact boundary: (id, the Limits, the template at the limit and its
#: output, the same template one unit over it, its data at and over the limit, environment
#: options). The one over is refused by the limit named (its message names that field first).
#: Where a check bounds what it will build by an estimate before building it (printf widths,
#: translate tables, serialisers), the boundary is the estimate's, as its row says.
BOUNDARIES = [
    ("range", {"max_range": 10}, "{{ range(n)|length }}", "10", {"n": 10}, {"n": 11}, None),
    ("string-times", {"max_string_size": 100}, "{{ ('x' * n)|length }}", "100", {"n": 100},
     {"n": 101}, None),
    ("center-method", {"max_string_size": 25}, "{{ 'x'.center(n)|length }}", "25", {"n": 25},
     {"n": 26}, None),
    ("center-filter", {"max_string_size": 100}, "{{ 'x'|center(n)|length }}", "100", {"n": 100},
     {"n": 101}, None),
    ("ljust", {"max_string_size": 100}, "{{ 'x'.ljust(n)|length }}", "100", {"n": 100},
     {"n": 101}, None),
    ("rjust", {"max_string_size": 100}, "{{ 'x'.rjust(n, '-')|length }}", "100", {"n": 100},
     {"n": 101}, None),
    ("zfill", {"max_string_size": 100}, "{{ '1'.zfill(n)|length }}", "100", {"n": 100},
     {"n": 101}, None),
    ("format-width", {"max_string_size": 100}, "{{ ('{:>' ~ n ~ '}').format('x')|length }}",
     "100", {"n": 100}, {"n": 101}, None),
    # (a spec whose width has ten digits or more: the hostile cases below, in a child)
    ("indent-width", {"max_string_size": 100}, "{{ 'x\nyz'|indent(n, true)|length }}", "100",
     {"n": 48}, {"n": 49}, None),
    ("indent-one-line", {"max_string_size": 100}, "{{ 'x'|indent(n, true)|length }}", "100",
     {"n": 99}, {"n": 100}, None),
    ("indent-blank-lines", {"max_string_size": 100},
     "{{ 'x\n\ny'|indent(pad, true, true)|length }}", "100", {"pad": "-" * 32},
     {"pad": "-" * 33}, None),
    ("join-method", {"max_string_size": 100}, "{{ '-'.join(items)|length }}", "100",
     {"items": ["x" * 10] * 9 + ["x"]}, {"items": ["x" * 10] * 9 + ["xx"]}, None),
    ("join-method-separator", {"max_string_size": 100},
     "{{ sep.join(['a', 'bb', 'c'])|length }}", "100", {"sep": "-" * 48}, {"sep": "-" * 49},
     None),
    ("join-filter", {"max_string_size": 100}, "{{ items|join('-')|length }}", "100",
     {"items": ["x" * 10] * 9 + ["x"]}, {"items": ["x" * 10] * 9 + ["xx"]}, None),
    ("replace-method", {"max_string_size": 100}, "{{ s.replace('a', 'bb')|length }}", "100",
     {"s": "a" * 50}, {"s": "a" * 51}, None),
    ("replace-method-growing-by-two", {"max_string_size": 100},
     "{{ s.replace('a', 'xxx')|length }}", "100", {"s": "ab" * 25}, {"s": "ab" * 25 + "a"}, None),
    ("replace-filter", {"max_string_size": 100}, "{{ s|replace('a', 'bb')|length }}", "100",
     {"s": "a" * 50}, {"s": "a" * 51}, None),
    ("replace-filter-count", {"max_string_size": 100},
     "{{ ('a' * 60)|replace('a', 'bb', n)|length }}", "100", {"n": 40}, {"n": 41}, None),
    ("expandtabs", {"max_string_size": 100}, "{{ s.expandtabs(10)|length }}", "100",
     {"s": "y" * 90 + "\t"}, {"s": "y" * 100 + "\t"}, None),
    ("expandtabs-many", {"max_string_size": 100}, "{{ s.expandtabs(n)|length }}", "100",
     {"s": "\t" * 10, "n": 10}, {"s": "\t" * 10, "n": 11}, None),
    # (an estimate: every character may become the table's longest value)
    ("translate", {"max_string_size": 100}, "{{ s.translate({97: 'xxxx'})|length }}", "96",
     {"s": "a" * 24}, {"s": "a" * 26}, None),
    # (an estimate: the template's own characters count, and each field's width)
    ("printf-width", {"max_string_size": 100}, "{{ ('%' ~ n ~ 's')|format('x')|length }}", "94",
     {"n": 94}, {"n": 101}, None),
    ("printf-width-of-seven-digits", {"max_string_size": 100},
     "{{ ('%' ~ n ~ 's')|format('x')|length }}", "94", {"n": 94}, {"n": 1000000}, None),
    # one character translated to a value of the caller's table: a string of its size
    ("translate-one-character", {"max_string_size": 100}, "{{ 'a'.translate(t)|length }}",
     "100", {"t": {97: "x" * 100}}, {"t": {97: "x" * 101}}, None),
    ("tojson-indent", {"max_string_size": 100}, "{{ [1]|tojson(indent=n)|length }}", "99",
     {"n": 94}, {"n": 95}, None),
    ("string-of-a-list", {"max_string_size": 100}, "{{ x|string|length }}", "98",
     {"x": ["x" * 45, "y" * 45]}, {"x": ["x" * 46, "y" * 46]}, None),
    # values that are no container, at the top: their own size is the total (a namespace's is
    # an estimate: two characters a key more than its repr)
    ("string-of-a-joiner", {"max_string_size": 100}, "{{ joiner(s)|string|length }}", "100",
     {"s": "x" * 89}, {"s": "x" * 90}, None),
    ("string-of-a-namespace", {"max_string_size": 100},
     "{{ namespace(a=s)|string|length }}", "98", {"s": "x" * 77}, {"s": "x" * 78}, None),
    ("tojson-of-a-string", {"max_string_size": 100}, "{{ s|tojson|length }}", "100",
     {"s": "x" * 98}, {"s": "x" * 99}, None),
    ("tojson-of-escaped-characters", {"max_string_size": 100}, "{{ s|tojson|length }}", "98",
     {"s": "\x01" * 16}, {"s": "\x01" * 17}, None),
    ("pprint", {"max_string_size": 100}, "{{ x|pprint|length }}", "87",
     {"x": ["x" * 39, "y" * 39]}, {"x": ["x" * 46, "y" * 46]}, None),
    # (a str is not a container: its repr, quotes included, is checked on its own)
    ("pprint-of-a-string", {"max_string_size": 100}, "{{ s|pprint|length }}", "100",
     {"s": "x" * 98}, {"s": "x" * 99}, None),
    ("wordwrap", {"max_string_size": 100}, "{{ s|wordwrap(5, true, '--')|length }}", "100",
     {"s": "ab " * 28 + "ab"}, {"s": "ab " * 29 + "a"}, None),
    ("list-times", {"max_collection_size": 10}, "{{ ([1] * n)|length }}", "10", {"n": 10},
     {"n": 11}, None),
    ("list-plus", {"max_collection_size": 10}, "{{ (x + [1])|length }}", "10",
     {"x": [0] * 9}, {"x": [0] * 10}, None),
    ("list-filter-of-a-string", {"max_collection_size": 10}, "{{ s|list|length }}", "10",
     {"s": "x" * 10}, {"s": "x" * 11}, None),
    ("loop-over-a-string", {"max_collection_size": 10},
     "{% for c in s %}{% endfor %}{{ s|length }}", "10", {"s": "x" * 10}, {"s": "x" * 11},
     None),
    ("batch-fill", {"max_collection_size": 10}, "{{ [1]|batch(n, 0)|first|length }}", "10",
     {"n": 10}, {"n": 11}, None),
    ("slice-fill", {"max_collection_size": 10}, "{{ [1]|slice(n, 0)|list|length }}", "10",
     {"n": 10}, {"n": 11}, None),
    ("sum-of-lists", {"max_collection_size": 10}, "{{ x|sum(start=[])|length }}", "10",
     {"x": [[1] * 5, [2] * 5]}, {"x": [[1] * 5, [2] * 6]}, None),
    # sum() of n one-item lists copies 1 + 2 + ... + n items: refused past max_steps
    ("sum-of-lists-work", {"max_steps": 1000}, "{{ x|sum(start=[])|length }}", "44",
     {"x": [[1]] * 44}, {"x": [[1]] * 45}, None),
    ("list-extend", {"max_collection_size": 10},
     "{% set l = [1] * 5 %}{% set _ = l.extend(x) %}{{ l|length }}", "10", {"x": [2] * 5},
     {"x": [2] * 6}, MUTABLE),
    ("tuple-nesting", {"max_recursion": 5}, "{{ (x, 1)|length }}", "2",
     {"x": _nested(4, tuple)}, {"x": _nested(5, tuple)}, None),
    # (a tuple of the caller's, kept by a mutator: checked as the mutator takes it)
    ("tuple-nesting-kept-by-a-mutator", {"max_recursion": 5},
     "{% set l = [] %}{% set _ = l.append(x) %}{{ l|length }}", "1",
     {"x": _nested(5, tuple)}, {"x": _nested(6, tuple)}, MUTABLE),
    ("tuple-nesting-kept-by-keyword", {"max_recursion": 5},
     "{% set d = {} %}{% set _ = d.update(k=x) %}{{ d|length }}", "1",
     {"x": _nested(5, tuple)}, {"x": _nested(6, tuple)}, MUTABLE),
    ("comparison-paths", {"max_collection_size": 10}, "{{ (x == y) }}", "True",
     {"x": [[1] * 4, [1] * 4], "y": [[1] * 4, [1] * 4]},
     {"x": [[1] * 4, [1] * 5], "y": [[1] * 4, [1] * 5]}, None),
    # a list held twice is compared twice: every path down to an item counts
    ("comparison-paths-shared", {"max_collection_size": 10}, "{{ (x == y) }}", "True",
     {"x": [[1] * 4] * 2, "y": [[1] * 4] * 2}, {"x": [[1] * 5] * 2, "y": [[1] * 5] * 2}, None),
    ("int-power", {"max_int_digits": 400}, "{{ (10 ** n)|string|length }}", "400", {"n": 399},
     {"n": 400}, None),
    ("int-product", {"max_int_digits": 400}, "{{ (x * 10)|string|length }}", "400",
     {"x": 10 ** 398}, {"x": 10 ** 399}, None),
    ("int-from-bytes", {"max_int_digits": 10},
     "{{ (1).from_bytes(x, 'big')|string|length }}", "10", {"x": [255] * 4}, {"x": [255] * 5},
     None),
    ("macro-recursion", {"max_recursion": 5}, _RECURSE, "bottom", {"depth": 4}, {"depth": 5},
     None),
    # the outer loop is not a recursion: max_recursion calls of loop() below it
    ("recursive-loop", {"max_recursion": 5}, _LOOP_DOWN, "1", {"x": _nested(6)},
     {"x": _nested(7)}, None),
    # data nested max_recursion + 1 deep: the outermost container is level 0
    ("tojson-nesting", {"max_recursion": 5}, "{{ x|tojson }}", "[[[[[[1]]]]]]",
     {"x": _nested(6)}, {"x": _nested(7)}, None),
    ("pprint-nesting", {"max_recursion": 5}, "{{ x|pprint }}", "[[[[[[1]]]]]]",
     {"x": _nested(6)}, {"x": _nested(7)}, None),
    ("print-nesting", {"max_recursion": 5}, "{{ x }}", "[[[[[[1]]]]]]", {"x": _nested(6)},
     {"x": _nested(7)}, None),
    ("output-size", {"max_output_size": 100}, "{{ 'x' * 50 }}{{ 'y' * n }}", "x" * 50 + "y" * 50,
     {"n": 50}, {"n": 51}, None),
    ("output-size-of-a-loop", {"max_output_size": 100},
     "{% for i in range(n) %}x{% endfor %}", "x" * 100, {"n": 100}, {"n": 101}, None),
    # what a macro or a set block captures leaves the output count when it is printed
    ("output-size-through-a-macro", {"max_output_size": 100},
     "{% macro m() %}{{ 'x' * n }}{% endmacro %}{{ m() }}", "x" * 100, {"n": 100}, {"n": 101},
     None),
    ("output-size-through-a-set-block", {"max_output_size": 100},
     "{% set b %}{{ 'x' * n }}{% endset %}{{ b }}", "x" * 100, {"n": 100}, {"n": 101}, None),
    # round() with a precision builds 10 ** precision
    ("round-precision", {"max_int_digits": 10}, "{{ 1.5|round(n, 'ceil') }}", "1.5", {"n": 9},
     {"n": 10}, None),
]


@pytest.mark.parametrize("limits,source,output,at,over,options",
                         [b[1:] for b in BOUNDARIES], ids=[b[0] for b in BOUNDARIES])
def test_limit_exactly_at_the_boundary(limits: dict, source: str, output: str, at: dict,
                                       over: dict, options: Optional[dict]) -> None:
    field = next(iter(limits))
    env = mj.Environment(limits=mj.Limits(**limits), **options) if options is not None \
        else mj.chat_environment(limits=mj.Limits(**limits))
    assert env.from_string(source).render(**copy.deepcopy(at)) == output
    with pytest.raises(mj.LimitExceededError) as info:
        env.from_string(source).render(**copy.deepcopy(over))
    assert re.findall(r"Limits\.(\w+)", info.value.message)[:1] == [field], info.value.message


#: (id, template, its data, where the statement whose output crosses max_output_size=100 is:
#: (line, column)) for each way a statement prints
OUTPUT_CROSSED = [
    ("one-expression", "{{ s }}{% for i in range(3) %}{% endfor %}", {"s": "x" * 101}, (1, 4)),
    ("expression-and-text", "{{ s }}.{% for i in range(3) %}{% endfor %}", {"s": "x" * 100},
     (1, 1)),
    # a sum of strs printed piece by piece, then text that crosses the limit
    ("sum-then-text", "{{ s + t }}yy{% for i in range(3) %}{% endfor %}",
     {"s": "x" * 50, "t": "y" * 49}, (1, 1)),
    # the body of a loop run past 40 iterations is compiled to Python (codegen.py)
    ("hot-loop-body", "{% for i in range(200) %}{{ i }}-{{ i }}\n{% endfor %}", {}, (1, 26)),
]


@pytest.mark.parametrize("source,data,where", [o[1:] for o in OUTPUT_CROSSED],
                         ids=[o[0] for o in OUTPUT_CROSSED])
def test_the_output_limit_stops_the_statement_that_crosses_it(source: str, data: dict,
                                                              where: tuple) -> None:
    env = mj.Environment(limits=mj.Limits(max_output_size=100, max_seconds=None))
    with pytest.raises(mj.LimitExceededError) as info:
        env.from_string(source).render(**data)
    assert "Limits.max_output_size" in info.value.message
    assert (info.value.lineno, info.value.column) == where


@pytest.mark.parametrize("body", ["", "{{ i }}", "{% set x = i %}", "{% set x = i %}{{ x }}"])
def test_a_hot_loop_is_stopped_by_max_steps_whatever_its_body(body: str) -> None:
    # 100,000 iterations priced at 2 steps or more each, far past max_steps; the loop's body
    # is compiled to Python after 40 of them, with its own checks
    env = mj.Environment(limits=mj.Limits(max_steps=1000, max_seconds=None))
    items = (i for i in range(100_000))  # (a generator: not priced as a list before the loop)
    with pytest.raises(mj.LimitExceededError) as info:
        env.from_string("{% for i in items %}" + body + "{% endfor %}done").render(items=items)
    assert "Limits.max_steps" in info.value.message


@pytest.mark.parametrize("limit", [5, 100, 1000])
def test_source_size_and_nesting_exactly_at_the_boundary(limit: int) -> None:
    env = mj.chat_environment(limits=mj.Limits(max_source_size=limit))
    assert env.from_string("x" * limit).render() == "x" * limit
    with pytest.raises(mj.SourceTooLargeError) as info:
        env.from_string("x" * (limit + 1))
    assert "Limits.max_source_size" in info.value.message
    depth = min(limit, 120)
    env = mj.chat_environment(limits=mj.Limits(max_nesting=depth))
    assert env.from_string("{{ " + "(" * depth + "1" + ")" * depth + " }}").render() == "1"
    assert env.from_string("{% if true %}" * depth + "x" + "{% endif %}" * depth).render() == "x"
    for source in ("{{ " + "(" * (depth + 1) + "1" + ")" * (depth + 1) + " }}",
                   "{% if true %}" * (depth + 1) + "x" + "{% endif %}" * (depth + 1)):
        with pytest.raises(mj.LimitExceededError) as info:
            env.from_string(source)
        assert "Limits.max_nesting" in info.value.message


@pytest.mark.parametrize("source", [
    "{% for i in range(40) %}{{ 'x' * 5 }}{% endfor %}",
    "{% for i in range(40) %}xxxxx{% endfor %}",
    "{% macro m() %}xxxxx{% endmacro %}{% for i in range(40) %}{{ m() }}{% endfor %}",
])
def test_output_limit_counts_every_kind_of_output(source: str) -> None:
    assert len(_render(source, mj.Limits(max_output_size=200))) == 200
    _refused(source, "max_output_size", mj.Limits(max_output_size=199))


def test_steps_limit_relative(render_mode: str) -> None:
    # an iteration costs budget.LOOP_STEPS (2) plus its body: 2,500 inner ones cost 5,000;
    # the 50 outer ones 2 + 7 each (the inner `for` statement and its `range(50)` call); and
    # making the list of a loop's items costs a step per 2 items: 25 for each of the 51 loops.
    # A provenance render also pays for the record of its output (one str with origins).
    record = 0 if render_mode == "plain" else PROVENANCE_STR_STEPS
    source = "{% for a in range(50) %}{% for b in range(50) %}{% endfor %}{% endfor %}ok"
    assert _render(source, mj.Limits(max_steps=6725 + record)) == "ok"
    _refused(source, "max_steps", mj.Limits(max_steps=6724 + record))


def test_recursion_limit_relative() -> None:
    source = ("{% macro m(n) %}{% if n %}{{ m(n - 1) }}{% else %}bottom{% endif %}{% endmacro %}"
              "{{ m(30) }}")
    assert _render(source, mj.Limits(max_recursion=40)) == "bottom"
    _refused(source, "max_recursion", mj.Limits(max_recursion=20))


def test_nesting_limit_relative() -> None:
    source = "{{ " + "(" * 40 + "1" + ")" * 40 + " }}"
    assert _render(source, mj.Limits(max_nesting=50)) == "1"
    with pytest.raises(mj.LimitExceededError) as info:
        mj.chat_environment(limits=mj.Limits(max_nesting=30)).from_string(source)
    assert "Limits.max_nesting" in info.value.message
    assert info.value.lineno == 1 and info.value.column is not None


def test_raised_recursion_limit_is_not_cut_short_by_pythons() -> None:
    """A trusted template allowed to recurse 1,000 macro calls deep does (Python's own
    recursion limit is raised to fit: limits.ensure_recursion_headroom), in a child: a
    RecursionError there must not take the test run with it."""
    source = ("{% macro m(n) %}{% if n %}{{ m(n - 1) }}{% else %}bottom{% endif %}{% endmacro %}"
              "{{ m(990) }}")
    result = run_isolated(source, limits={"max_recursion": 1000, "max_seconds": None},
                          timeout=TIMEOUT)
    assert result.kind == "ok" and result.output_head == "bottom", result.describe()
    result = run_isolated(source.replace("990", "1000"),
                          limits={"max_recursion": 1000, "max_seconds": None}, timeout=TIMEOUT)
    assert result.kind == "template_error" and "Limits.max_recursion" in result.message, \
        result.describe()


def test_a_raised_nesting_limit_is_not_cut_short_by_pythons() -> None:
    """2,900 nested blocks under max_nesting=3,000 compile in a fresh interpreter (the
    compiler recurses once a level or more: Python's recursion limit is raised before it
    compiles, not only before a render), in a child."""
    source = "{% if true %}" * 2900 + "x" + "{% endif %}" * 2900
    result = run_isolated(source, limits={"max_nesting": 3000, "max_seconds": None},
                          timeout=TIMEOUT)
    assert result.kind == "ok" and result.output_head == "x", result.describe()


_DEEP_CALLER = r"""
import re
import sys
sys.path.insert(0, sys.argv[1])
import minijinja_py as mj
source = "{% if true %}" * 120 + "x" + "{% endif %}" * 120
def deep(n):
    if n:
        return deep(n - 1)
    try:
        return mj.Environment().from_string(source).render()
    except mj.TemplateError as exc:
        return type(exc).__name__ + " " + " ".join(re.findall(r"Limits\.(\w+)", str(exc)))
print(deep(sys.getrecursionlimit() - 40))
"""


def test_a_template_deeper_than_the_stack_left_is_refused_by_the_nesting_limit() -> None:
    """Compiled from deep in the caller's own recursion, a template needing more of Python's
    stack than is left is refused as too deeply nested (a TemplateError), never with a
    RecursionError escaping; in a child, whose recursion limit is Python's 1,000."""
    import os
    import subprocess
    import sys

    root = str(Path(mj.__file__).resolve().parent.parent)
    child = subprocess.run([sys.executable, "-c", _DEEP_CALLER, root], capture_output=True,
                           text=True, timeout=TIMEOUT, env={**os.environ, "MINIJINJA_PY_CACHE": "0"})
    assert child.stdout.strip() == "LimitExceededError max_nesting", child.stderr[-2000:]


@pytest.mark.parametrize("opener,closer,prefix,suffix", [
    ("{% if true %}", "{% endif %}", "", ""),
    ("{% for a in [1] %}", "{% endfor %}", "", ""),
    ("{% filter upper %}", "{% endfilter %}", "", ""),
    ("{% with %}", "{% endwith %}", "", ""),
    ("(", ")", "{{ ", " }}"),
    ("[", "]", "{{ (", ")|length }}"),
], ids=["if", "for", "filter", "with", "parens", "brackets"])
def test_raised_nesting_limit_works_for_every_kind_of_nesting(opener: str, closer: str,
                                                              prefix: str, suffix: str) -> None:
    """Raising max_nesting lets a trusted template nest deeper: the engine does not give up
    earlier (e.g. on Python's own recursion limit) and blame the limit that was raised."""
    depth = 200
    inner = "1" if prefix else "x"
    source = prefix + opener * depth + inner + closer * depth + suffix
    with pytest.raises(mj.LimitExceededError):  # deeper than the default allows
        mj.chat_environment().from_string(source)
    assert _render(source, mj.Limits(max_nesting=250)) in ("x", "X", "1")


def test_limit_message_says_how_to_raise_it() -> None:
    with pytest.raises(mj.LimitExceededError) as info:
        _render("{{ range(10**6) }}")
    message = info.value.message
    assert "Limits.max_range=100,000" in message
    assert "Environment(limits=Limits(max_range=...))" in message
    assert isinstance(info.value, mj.SecurityError)
    assert (info.value.lineno, info.value.column) == (1, 4)


def test_limits_of_one_environment_do_not_leak_into_another() -> None:
    strict = mj.chat_environment(limits=mj.Limits(max_string_size=10))
    loose = mj.chat_environment()
    with pytest.raises(mj.LimitExceededError):
        strict.from_string("{{ 'x' * 11 }}").render()
    assert loose.from_string("{{ 'x' * 11 }}").render() == "x" * 11
    # a filter or method used outside any render sees the defaults
    assert loose.from_string("{{ 'x'.ljust(20) }}").render() == "x" + " " * 19


# -- the left-associative power of Jinja2 is not a hostile template ------------------------------
def test_power_is_left_associative_like_jinja2() -> None:
    from security_support import jinja2_outcome

    for source in ("{{ 10**10**10 }}", "{{ 2**3**2 }}", "{{ 7**7**7**7 }}"):
        assert ("ok", _render(source)) == jinja2_outcome(source)


@pytest.mark.parametrize("source", [
    "{{ 10**4200 }}",
    "{{ (10**4200) * 10 }}",
    "{{ 2**13000 }}",
    "{{ ('9' * 4300)|int }}",
    "{{ (10**4299) + (10**4299) }}",
])
def test_int_digits_limit_has_no_false_positives(source: str) -> None:
    """Results within Python's own 4,300-digit limit print exactly as in Jinja2."""
    from security_support import jinja2_outcome

    assert ("ok", _render(source)) == jinja2_outcome(source)


# -- the defaults never fire on real templates and conversations -------------------------------
needs_corpus = pytest.mark.skipif(not corpus_available(), reason="shared corpus not found")
SLUGS = corpus_slugs()


@needs_corpus
@pytest.mark.parametrize("slug", SLUGS)
def test_defaults_do_not_fire_on_the_corpus(slug: str) -> None:
    env = mj.chat_environment()
    template = env.from_string(corpus_template(slug), name=f"{slug}.jinja")
    for name, context in corpus_contexts().items():
        try:
            template.render(**json.loads(json.dumps(context)))
        except mj.LimitExceededError as exc:  # pragma: no cover - the failure being tested
            pytest.fail(f"{slug} x {name}: {exc}")
        except mj.TemplateError:
            pass  # the template's own errors are the corpus comparison's business


def _conversation(count: int, content: Optional[str] = None) -> dict:
    messages = [{"role": ("user", "assistant")[i % 2],
                 "content": content if content is not None else f"message {i}: lorem ipsum dolor"}
                for i in range(count)]
    return {"messages": messages, "add_generation_prompt": True, "bos_token": "<s>",
            "eos_token": "</s>"}


def _result(template: Any, data: dict) -> Tuple[str, Any]:
    try:
        return "ok", len(template.render(**data))
    except mj.TemplateError as exc:
        assert not isinstance(exc, mj.LimitExceededError), str(exc)
        return "error", (type(exc).__name__, exc.message)


#: The default limits, the deadline (a wall clock) aside: whether a render fits in the defaults
#: is decided by the work it does, not by how loaded the machine running the suite is.
DEFAULTS_BUT_THE_DEADLINE = mj.Limits(max_seconds=None)

#: A few real templates of the common families (chatml, llama-3, mistral, gemma, phi, qwen).
LARGE_SLUGS = [s for s in ("cz-chatml", "cz-llama-3-instruct", "axolotl-llama3",
                           "hfjs-mistralai-mistral-7b-instruct-v0.3", "axolotl-gemma3",
                           "axolotl-phi-4", "axolotl-qwen2-vl", "ollama-llama4-latest")
               if s in SLUGS]


@needs_corpus
@pytest.mark.parametrize("slug", LARGE_SLUGS)
def test_defaults_allow_a_20000_message_conversation(slug: str) -> None:
    template = mj.chat_environment(limits=DEFAULTS_BUT_THE_DEADLINE).from_string(
        corpus_template(slug))
    small = _result(template, _conversation(4))
    large = _result(template, _conversation(20_000))
    if small[0] == "ok":
        assert large[0] == "ok", large
        assert large[1] > 20_000 * 20
    else:
        assert large == small


@needs_corpus
@pytest.mark.parametrize("slug", LARGE_SLUGS)
def test_defaults_allow_a_10_mb_message(slug: str) -> None:
    template = mj.chat_environment(limits=DEFAULTS_BUT_THE_DEADLINE).from_string(
        corpus_template(slug))
    small = _result(template, _conversation(1, "hello"))
    large = _result(template, _conversation(1, "x" * 10_000_000))
    if small[0] == "ok":
        assert large[0] == "ok", large
        assert large[1] >= 10_000_000
    else:
        assert large == small


@needs_corpus
def test_defaults_allow_a_10_mb_message_in_a_long_conversation() -> None:
    for slug in LARGE_SLUGS[:3]:
        template = mj.chat_environment(limits=DEFAULTS_BUT_THE_DEADLINE).from_string(
            corpus_template(slug))
        data = _conversation(2_000)
        data["messages"][-2]["content"] = "y" * 10_000_000
        assert _result(template, data)[0] == "ok"

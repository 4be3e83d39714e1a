"""Provenance renders keep the promise plain renders keep.

A provenance render (``render_with_provenance``, ``render --provenance``, and the tokens,
sanitising and mask paths that read it) records, for every string it makes, which input or
piece of template text wrote each character. That record must stay within the render's limits
like everything else a render builds:

* every operation is linear in its input (and its record): slices with a step, ``split``,
  ``replace``, iteration, escaping and ``tojson`` work run by run, never character by
  character over a record searched from its start (those were quadratic: a 45-character
  template ran 42 s);
* records are run-length (``'ab' * n`` is one run, never one per copy or per character) and
  paid for from the step budget when they are made, so a template that makes them in bulk is
  refused with ``LimitExceededError``, not by the memory cap (8 million characters took 1.25 GB);
* the value types that carry origins show a template exactly the attributes of the plain
  types they stand for: a template cannot tell which kind of render runs it.

The other hostile suites run every test in all three render modes as well (conftest.py).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import minijinja_py as mj

from security_support import PACKAGE_PARENT, child_environment, jinja2_outcome, run_isolated

#: The child is killed after this many seconds: the quadratic code took hours at these sizes.
TIMEOUT = 60.0
#: The memory cap of the child: records of one entry per character or copy (150 bytes each)
#: die against it at these sizes; run-length records never come near it.
MEMORY = 768 * 2 ** 20


def _provenance(source: str, data_expr: str = "", **options: Any) -> Any:
    return run_isolated(source, data_expr=data_expr, timeout=TIMEOUT, memory=MEMORY,
                        render_mode="provenance", **options)


# -- every operation linear ------------------------------------------------------------------------
LINEAR = [
    # (id, source, data_expr): quadratic before
    ("reversed-twice", "{{ ('ab' * 200000)[::-1][::-1]|length }}", ""),
    ("split", "{{ ('a,' * 200000).split(',')|length }}", ""),
    ("replace", "{{ ('ab' * 200000).replace('a', 'c')|length }}", ""),
    ("iterate", "{% for c in 'ab' * 200000 %}{% endfor %}done", ""),
    # a source change every character: the record has a run per piece, read run by run
    ("mixed-reversed", "{{ ((x ~ 'a') * 100000)[::-1][::-1]|length }}", "{'x': 'b'}"),
    ("mixed-stride", "{{ ((x ~ 'a') * 100000)[::3]|length }}", "{'x': 'b'}"),
    ("mixed-split", "{{ ((x ~ ',') * 100000).split(',')|length }}", "{'x': 'b'}"),
    ("mixed-replace", "{{ ((x ~ 'a') * 100000).replace('b', 'c')|length }}", "{'x': 'b'}"),
    ("mixed-iterate", "{% for c in (x ~ 'a') * 100000 %}{% endfor %}done", "{'x': 'b'}"),
    ("mixed-escape", "{{ ((x ~ '<') * 100000)|e|length }}", "{'x': 'b'}"),
    ("mixed-tojson", "{{ ((x ~ '\\n') * 100000)|tojson|length }}", "{'x': 'b'}"),
    ("mixed-runs-of-input", "{{ x[::-1][::-1]|length }}", "{'x': 'ab' * 200000}"),
    ("input-escapes", "{{ x|e|length }}{{ x|tojson|length }}", "{'x': '<\\n' * 200000}"),
]


@pytest.mark.parametrize("source,data_expr", [case[1:] for case in LINEAR],
                         ids=[case[0] for case in LINEAR])
def test_operation_on_a_long_record_is_linear(source: str, data_expr: str) -> None:
    result = _provenance(source, data_expr)
    assert result.kind == "ok", result.describe()
    expected = jinja2_outcome(source, eval(data_expr) if data_expr else {})
    assert ("ok", result.output_head) == expected


def test_command_line_provenance_of_a_short_hostile_template_is_quick(tmp_path: Any) -> None:
    template = tmp_path / "hostile.jinja"
    template.write_text("{{ ('ab' * 200000)[::-1][::-1]|length }}", encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "minijinja_py", "render", str(template), "--provenance"],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=PACKAGE_PARENT,
        env=child_environment())
    assert completed.returncode == 0, completed.stderr
    assert "400000" in completed.stdout


# -- records bounded and paid for ------------------------------------------------------------------
@pytest.mark.parametrize("source,data_expr,expected", [
    ("{% set s = 'a' * 8000000 %}{{ s|length }}", "", "8000000"),
    ("{{ ('ab' * 6000000)|length }}{{ 'ab' * 3 }}", "", "12000000ababab"),
    ("{% set s = x * 8000000 %}{{ s[::-1]|length }}", "{'x': 'ab'}", "16000000"),
    ("{% for c in 'ab' * 2000000 %}{% endfor %}done", "", "done"),
    ("{{ ('a<' * 4000000)|e|length }}", "", "20000000"),
], ids=["set-8m", "print-12m", "input-16m", "iterate-4m", "escape-8m"])
def test_repetition_keeps_one_run(source: str, data_expr: str, expected: str) -> None:
    result = _provenance(source, data_expr)
    assert (result.kind, result.output_head) == ("ok", expected), result.describe()


@pytest.mark.parametrize("source", [
    # ten million runs: a source change every character, made by one `*`
    "{% set s = (x ~ 'a') * 5000000 %}{{ s|length }}",
    # ...by one join, and by a loop of joins
    "{{ ([x, 'a'] * 5000000)|join|length }}",
    "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% for j in range(100) %}"
    "{% set ns.s = ns.s ~ x ~ 'a' %}{% endfor %}{% endfor %}{{ ns.s|length }}",
    # three million characters, each a str of its own with its origin, by one loop
    "{% for c in (x ~ 'a') * 1500000 %}{% endfor %}",
])
def test_a_record_too_big_for_the_budget_is_refused_by_the_engine(source: str) -> None:
    result = _provenance(source, "{'x': 'b'}")
    assert result.kind == "template_error" and result.is_limit, result.describe()
    assert "Limits.max_steps" in result.message, result.describe()
    assert result.lineno == 1, result.describe()


def _steps_needed(source: str, **variables: Any) -> int:
    """The smallest ``max_steps`` a provenance render of ``source`` fits in (with its runs)."""
    low, high = 0, 1 << 28
    while low + 1 < high:
        middle = (low + high) // 2
        env = mj.chat_environment(limits=mj.Limits(max_steps=middle, max_seconds=None))
        try:
            env.from_string(source).render_with_provenance(**variables).runs
        except mj.LimitExceededError:
            low = middle
        else:
            high = middle
    return high


def test_the_runs_of_the_output_are_paid_for_within_the_render() -> None:
    """The record of the output, and the Run objects a caller reads from it, are paid for by
    the render that made them (so a render whose output has more runs than its budget pays for
    is refused with LimitExceededError, never by the memory its Run objects take later)."""
    from minijinja_py.guard.prices import PROVENANCE_RUN_STEPS

    copies = 20000  # 40,000 runs: a source change every character
    printed = _steps_needed("{{ (x ~ 'a') * %d }}" % copies, x="b")
    measured = _steps_needed("{{ ((x ~ 'a') * %d)|length }}" % copies, x="b")
    # printing it pays for its 2 runs a copy twice: as a record, and for its Run objects
    # (less the few steps its length's own printing costs)
    runs = 2 * copies
    assert printed - measured > 2 * runs * PROVENANCE_RUN_STEPS - 100


# -- exact records, run by run ---------------------------------------------------------------------
def _pieces(source: str, **variables: Any) -> list:
    template = mj.chat_environment().from_string(source)
    result = template.render_with_provenance(**variables)
    assert result.text == template.render(**variables)
    return [(result.text[run.start:run.end], run.origin.kind,
             run.origin.path or run.origin.paths or None, run.origin.offset)
            for run in result.runs]


@pytest.mark.parametrize("source,expected", [
    # copies of one source are one run, computed from it (no position of their own)
    ("{{ 'ab' * 3 }}", [("ababab", "template", None, None)]),
    ("{{ x * 3 }}", [("ababab", "derived", ("x",), None)]),
    ("{{ x }}{{ x }}", [("abab", "derived", ("x",), None)]),
    ("{{ x ~ 'yz' }}{{ x }}", [("ab", "input", "x", 0), ("yz", "template", None, 0),
                               ("ab", "input", "x", 0)]),
    # sources taking turns keep their runs
    ("{{ (x ~ 'y') * 2 }}", [("ab", "input", "x", 0), ("y", "template", None, 0),
                             ("ab", "input", "x", 0), ("y", "template", None, 0)]),
    # a reversal or a stride copies no stretch verbatim; one character taken alone is exact
    ("{{ (x ~ 'yz')[::-1] }}", [("zy", "template", None, None), ("ba", "derived", ("x",), None)]),
    ("{{ (x ~ 'yz')[::2] }}", [("a", "input", "x", 0), ("y", "template", None, 0)]),
    ("{{ (x ~ 'yz')[3::-3] }}", [("z", "template", None, 1), ("a", "input", "x", 0)]),
    # escapes and JSON: stretches of kept characters, entities derived from what they replace
    ("{{ w|e }}", [("a", "input", "w", 0), ("&lt;&gt;", "derived", ("w",), None),
                   ("b", "input", "w", 3)]),
    ("{{ w|tojson }}", [('"', "derived", ("w",), None), ("a<>b", "input", "w", 0),
                        ('"', "derived", ("w",), None)]),
    ("{{ v|tojson }}", [('"', "derived", ("v",), None), ("a", "input", "v", 0),
                        ("\\n\\n", "derived", ("v",), None), ("b", "input", "v", 3),
                        ('"', "derived", ("v",), None)]),
])
def test_records_are_run_length_and_exact(source: str, expected: list) -> None:
    assert _pieces(source, x="ab", w="a<>b", v="a\n\nb") == expected


def test_iterating_characters_keeps_each_ones_origin() -> None:
    pieces = _pieces("{% for c in x ~ 'y' %}[{{ c }}]{% endfor %}", x="ab")
    assert [piece for piece in pieces if piece[0] in "aby"] == [
        ("a", "input", "x", 0), ("b", "input", "x", 1), ("y", "template", None, 0)]


# -- the same attributes as the plain types ----------------------------------------------------------
def _attribute_names() -> list:
    from minijinja_py.runtime.markup import Markup
    from minijinja_py.provenance.origins import PFloat, PInt, PMarkup, PStr

    names = set()
    for kind in (PStr, PMarkup, PInt, PFloat, str, Markup, int, float):
        names.update(dir(kind))
    names.update(("_runs", "_parts", "_source", "__dict__", "__weakref__", "nope", "_nope"))
    return sorted(names)


def _outcome(render: Any) -> tuple:
    try:
        return "ok", render()
    except mj.TemplateError as exc:
        return "error", type(exc).__name__, str(exc)


@pytest.mark.parametrize("value", ["x", "'lit'", "(x|safe)", "(x|e)", "n", "f", "x[0]",
                                   "x.split('b')[0]", "n + 1"])
def test_origin_carrying_values_show_exactly_the_plain_attributes(value: str) -> None:
    env = mj.chat_environment()
    variables = {"x": "abc", "n": 3, "f": 1.5}
    differences = []
    for name in _attribute_names():
        for form in ("{{ V.N }}", "{{ V.N is defined }}", "{{ V.N() }}", "{{ V|attr('N') }}",
                     "{{ V['N'] is defined }}"):
            template = env.from_string(form.replace("V", value).replace("N", name))
            plain = _outcome(lambda: template.render(**variables))
            traced = _outcome(lambda: template.render_with_provenance(**variables).text)
            if plain != traced:
                differences.append((form, name, plain, traced))
    assert differences == []

"""Loop bodies compiled to Python (minijinja_py/compiler/codegen.py) render exactly like the closures.

A loop switches to its generated body once it runs HOT_ITERATIONS items; most conformance
cases and corpus contexts have shorter loops, so here the threshold is 1 and every loop of
every conformance case and corpus pair runs generated code, checked against the same
Jinja2 references. Then the corners the generator handles itself: signals, error locations,
limits, nesting deeper than Python allows blocks.
"""

from __future__ import annotations

import re
import sys
import tokenize
from pathlib import Path

import pytest

import minijinja_py as mj
from minijinja_py.compiler import closures as compiler

import test_chat_corpus
import test_conformance
import test_corpus
from corpus_support import expected, template_source
from test_codegen_expressions import same_smallest_budget, spy_on

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import reference_jinja2  # noqa: E402  # the Jinja2 reference (a test dependency)


@pytest.fixture(autouse=True)
def _every_loop_is_hot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiler, "HOT_ITERATIONS", 1)
    monkeypatch.setattr(compiler, "FIRST_RENDER_FACTOR", 1)
    monkeypatch.setattr(compiler, "HOT_CALLS", 1)


@pytest.mark.parametrize("topic, case", test_conformance.PARAMS)
def test_conformance_case_with_generated_loops(topic: str, case: dict) -> None:
    test_conformance.test_case(topic, case)


@pytest.mark.parametrize("slug,context", test_corpus._PAIRS,
                         ids=[f"{s}/{c}" for s, c in test_corpus._PAIRS])
def test_corpus_pair_with_generated_loops(slug: str, context: str) -> None:
    test_corpus.test_corpus_pair_matches_jinja2(slug, context)


@pytest.mark.parametrize("slug,name", test_chat_corpus.PAIRS,
                         ids=[f"{s}-{c}" for s, c in test_chat_corpus.PAIRS])
def test_chat_pair_with_generated_loops(slug: str, name: str) -> None:
    test_chat_corpus.test_render_matches_transformers(slug, name)


def _render(source: str, **data: object) -> str:
    return mj.chat_environment().from_string(source).render(**data)


def test_a_typical_message_loop_is_generated(monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_on(monkeypatch, "generate_loop")
    template = mj.chat_environment().from_string(
        "{% for m in messages %}{% if m.role == 'user' or m['role'] == 'system' %}"
        "{{ m['content'] }}{% elif 'tool_calls' in m and m.tool_calls %}T{% endif %}{% endfor %}")
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [1]},
                {"role": "system", "content": "b"}, {"role": "assistant"}]
    assert template.render(messages=messages) == "aTb"
    assert len(made) == 1 and made[0].__name__ == "generated_loop"


def test_loop_bodies_that_are_not_simple_are_generated_on_their_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_on(monkeypatch, "generate_body")
    # `set` in the body and a tuple target: the general loop, with a generated body
    source = ("{% for k, v in pairs %}{% set x = v %}{% if k == 'a' %}{{ x }}{% endif %}"
              "{% endfor %}")
    assert _render(source, pairs=[("a", 1), ("b", 2), ("a", 3)]) == "13"
    assert made and made[0].__name__ == "generated_body"


@pytest.mark.parametrize("source,expected", [
    ("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "012"),
    ("{% for i in range(5) %}{% if i % 2 %}{% continue %}{% endif %}{{ i }}{% endfor %}", "024"),
    ("{% for i in range(3) %}{% for j in range(3) %}{% if j > i %}{% break %}{% endif %}"
     "{{ i }}{{ j }} {% endfor %}{% endfor %}", "00 10 11 20 21 22 "),
    ("{% for m in ms %}{{ m.role ~ ':' ~ m.missing ~ ';' }}{% endfor %}", "u:;a:;"),
    ("{% for m in ms %}{% if not m.role == 'u' and m['role'] %}{{ m.role }}{% endif %}"
     "{% endfor %}", "a"),
    ("{% for m in ms %}{{ m.role if m.role != 'u' else 'user' }}{% endfor %}", "usera"),
    # a body that rebinds its loop variable reads it where it is used, not once at the top
    ("{% for m in ms %}{{ m.role }}{% set m = {'role': 'x'} %}{{ m.role }}{% endfor %}",
     "uxax"),
    ("{% for m in ms %}{% if m.role == 'a' %}{% set m = {'role': 'y'} %}{% endif %}"
     "{{ m['role'] + '.' }}{% endfor %}", "u.y."),
    ("{% set ns = namespace(s='') %}{% for m in ms %}{% set ns.s = ns.s ~ m.role %}"
     "{{ m.role }}{% endfor %}{{ ns.s }}", "uaua"),
    # `+` chains printed: a non-str operand folds what was printed and goes on with `+`
    ("{% for m in ms %}{{ '<' + m.role + ('&'|safe) + m.role + '>' }}{% endfor %}",
     "&lt;u&u&gt;&lt;a&a&gt;"),
    ("{% for m in ms %}{{ m.l + [m.role] }}{% endfor %}", "[1, 'u'][1, 'a']"),
    ("{% for m in ms %}{{ m.role + m.role }}{% endfor %}", "uuaa"),
])
def test_generated_bodies_keep_the_closures_semantics(source: str, expected: str) -> None:
    """The expected outputs are Jinja2's too (checked here against the reference)."""
    ms = [{"role": "u", "l": [1]}, {"role": "a", "l": [1]}]
    assert _render(source, ms=ms) == expected
    assert reference_jinja2.make_environment().from_string(source).render(ms=ms) == expected


# Closures called from a generated loop read its variable from the iteration's scope, where
# it is stored only when one is called (once per item): items that repeat (the same object,
# or an equal one), iterations calling none in between, a nested loop, a macro, a filter
_SHARED = {"role": "a", "l": [1, 2]}
_STORED_ON_USE = [
    ("{% for m in ms %}{% if m.role == 'a' %}{% for c in m.l %}{{ m.role ~ c }}{% endfor %}"
     "{% endif %}{{ m.role }};{% endfor %}"),
    ("{% macro show(x) %}<{{ x.role }}>{% endmacro %}{% for m in ms %}"
     "{% if m.role == 'u' %}{{ show(m) }}{% else %}{{ m.role }}{% endif %}{% endfor %}"),
    "{% for m in ms %}{{ m.l|map('string')|join(m.role) }}{{ loop.index }}{% endfor %}",
    "{% for m in ms %}{{ m.role }}{% if loop.index is even %}{{ ms[loop.index0] }}{% endif %}"
    "{% endfor %}",
]


@pytest.mark.parametrize("source", _STORED_ON_USE)
def test_closures_in_generated_loops_read_the_current_item(
        source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_on(monkeypatch, "generate_loop")
    ms = [_SHARED, {"role": "u", "l": [3]}, _SHARED, _SHARED, {"role": "a", "l": [4]},
          {"role": "u", "l": []}, {"role": "a", "l": [4]}]
    expected = reference_jinja2.make_environment().from_string(source).render(ms=ms)
    assert _render(source, ms=ms) == expected
    assert [f.__name__ for f in made if f is not None][:1] == ["generated_loop"]


# A loop whose body assigns writes the iteration's variables into its scope only when a
# closure or a read of a name not held in a local needs them (codegen._sync_iteration_lazily):
# names set before that, after it (written at once), in some iterations only (undefined in
# the others), read back after an `if`, by a nested loop, a macro, a `set` block
_SYNCED_ON_USE = [
    "{% for m in ms %}{% set x = m.role %}{% for c in m.l %}{{ x ~ c }}{% endfor %};{% endfor %}",
    ("{% for m in ms %}{% for c in m.l %}{{ c }}{% endfor %}{% set x = m.role %}"
     "{% for c in m.l %}{{ x }}{% endfor %};{% endfor %}"),
    ("{% for m in ms %}{% if m.role == 'u' %}{% set x = 'U' %}{% endif %}"
     "{% for c in m.l %}{{ x }}{% endfor %};{% endfor %}"),
    ("{% for m in ms %}{% if m.role == 'u' %}{% set x = 'U' + m.role %}{% endif %}"
     "{{ x }}{{ m.role }};{% endfor %}"),
    ("{% macro show(v) %}<{{ v }}>{% endmacro %}{% for m in ms %}"
     "{% set y = m.role ~ loop.index %}{% if loop.index is odd %}{{ show(y) }}{% endif %}"
     "{{ y }}{% endfor %}"),
    ("{% for m in ms %}{% set x = m.role %}{% set y %}{{ x }}!{{ m.role }}{% endset %}"
     "{{ y }}{% set x = x ~ y %}{% for c in m.l %}{{ x }}{% endfor %}{% endfor %}"),
    # read before it is set in the iteration (the outer value, as Jinja2 reads it), and a
    # name set first in the body but not in every iteration (then undefined, not the outer)
    ("{% set x = 'outer' %}{% for m in ms %}{% for c in m.l %}[{{ x }}]{% endfor %}"
     "{% set x = m.role %}{{ x }}{% endfor %}{{ x }}"),
    ("{% set x = 'outer' %}{% for m in ms %}{% if m.role == 'u' %}{% set x = 'U' %}{% endif %}"
     "{% for c in m.l %}[{{ x }}]{% endfor %}{% endfor %}{{ x }}"),
    ("{% for m in ms %}{% for c in m.l %}[{{ x }}]{% endfor %}{% set x = m.role %}"
     "{% for c in m.l %}[{{ x }}]{% endfor %}{% endfor %}{{ x }}"),
    ("{% for m in ms %}{% set x = m.role %}{% set y = loop %}{{ x ~ y.index ~ loop.length }}"
     "{% for c in m.l %}{{ y.index0 }}{% endfor %}{% endfor %}"),
    # names of scopes further out (a namespace of the template, read in a macro's loop)
    ("{% set ns = namespace(n=0, s='') %}{% macro count(items) %}{% for m in items %}"
     "{% set r = m.role %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ r %}{{ r ~ ns.n }}"
     "{% if ns.missing is defined %}!{% endif %}{% endfor %}{% endmacro %}"
     "{{ count(ms) }}{{ count(ms[1:3]) }}{{ ns.n ~ ns.s }}"),
    # a `set` block's body runs before its name is stored: undefined there, not the context's
    "{% for m in ms %}{% set x %}[{{ x }}]{{ m.role }}{% endset %}{{ x }}{% endfor %}",
]


@pytest.mark.parametrize("source", _SYNCED_ON_USE)
def test_closures_in_assigning_loops_read_the_iteration_variables(
        source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_on(monkeypatch, "generate_charging_loop")
    ms = [_SHARED, {"role": "u", "l": [3]}, _SHARED, {"role": "u", "l": []},
          {"role": "a", "l": [4, 5]}, {"role": "u", "l": [6]}]
    # (`x` of the context: a name the body sets first is undefined to the closures it calls
    # until set, see symbols.py, unless the template set it outside the loop)
    expected = reference_jinja2.make_environment().from_string(source).render(ms=ms, x="ctx")
    assert _render(source, ms=ms, x="ctx") == expected
    assert any(f is not None and "_sync_locals(" in f.source for f in made)


def test_assigning_loops_write_their_variables_only_for_the_closures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_on(monkeypatch, "generate_charging_loop")
    template = mj.chat_environment().from_string(
        "{% for m in messages %}{% set content = m.role + ': ' + m.content %}"
        "{% if loop.first %}{% set content = '<s>' + content %}{% endif %}{{ content }}"
        "{% endfor %}")
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert template.render(messages=messages) == "<s>user: aassistant: b"
    loop_source, _, sync_source = made[0].source.partition("def _sync_locals(")
    # nothing cleared or stored as each iteration starts, a `set` stores into a local; the
    # function written with the loop does that when a closure needs it
    assert "vars.clear()" not in loop_source and "vars['m'] = " not in loop_source
    assert "_v0 = _M" in loop_source
    assert not re.search(r"\bvars\['content'\] = ", loop_source)
    assert "vars.clear()" in sync_source and "vars['content'] = _v0" in sync_source


def test_generated_loops_store_their_variable_only_for_the_closures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_on(monkeypatch, "generate_loop")
    template = mj.chat_environment().from_string(
        "{% for m in messages %}{% if m.role == 'user' %}{{ m.role + ': ' + m.content }}"
        "{% else %}{{ m.content|trim }}{% endif %}{% endfor %}")
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": " b "}]
    assert template.render(messages=messages) == "user: ab"
    source = made[0].source
    # no store as each iteration starts; the closures' scope stores the item when used
    assert "vars['m'] = " not in source and "_bound(scope, 'm', (_b := _o0))" in source
    # the values read as the iteration starts are used as they are, not copied first
    assert "for _o0 in remaining:" in source and " := _r" not in source.split("else:")[0]


def test_read_placeholders_are_names_to_the_tokenizer() -> None:
    """Python 3.12's tokenizer refuses NUL characters: the generated loops of templates
    reading a key twice per message (placeholders while written) could not be made there."""
    from minijinja_py.compiler import codegen

    tokens = codegen._tokens(["        _t1 = (\x000\x00 if \x0012\x00 else 1)"])
    assert [t.string for t in tokens if t.string.startswith("_")] == ["_t1", "_0_", "_12_"]
    assert "ERRORTOKEN" not in [tokenize.tok_name[t.type] for t in tokens]


def test_errors_in_generated_bodies_are_located() -> None:
    with pytest.raises(mj.TemplateError) as info:
        _render("{% for i in range(3) %}\n{% if 1 in i %}x{% endif %}{% endfor %}")
    assert info.value.lineno == 2
    env = mj.Environment(undefined=mj.StrictUndefined)
    with pytest.raises(mj.UndefinedError) as undefined:
        env.from_string("{% for i in range(3) %}\n\n{% if nope or i %}x{% endif %}"
                        "{% endfor %}").render()
    assert undefined.value.lineno == 3


def test_output_limit_holds_in_generated_bodies() -> None:
    env = mj.chat_environment(limits=mj.Limits(max_output_size=100))
    with pytest.raises(mj.LimitExceededError) as info:
        env.from_string("{% for i in range(50) %}\n{{ 'xyz' }}{{ i }}{% endfor %}").render()
    assert "Limits.max_output_size" in info.value.message and info.value.lineno == 2


def test_bodies_nested_deeper_than_python_blocks_still_render() -> None:
    depth = 30
    source = ("{% for i in range(3) %}" + "{% if i is number %}" * depth + "{{ i }}"
              + "{% endif %}" * depth + "{% endfor %}")
    assert _render(source) == "012"


# a long conversation (loops), and tool calls (tool schemas, macros) where templates take them
_BUDGET_PAIRS = [(slug, context) for slug, context in test_corpus._PAIRS
                 if context in ("long_multi_turn", "tool_use")
                 and expected("goldens-jinja", slug, context)[1] is None]


@pytest.mark.parametrize("slug,context", _BUDGET_PAIRS,
                         ids=[f"{s}/{c}" for s, c in _BUDGET_PAIRS])
def test_corpus_templates_need_the_same_steps_on_both_paths(
        slug: str, context: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real templates, rendered with everything generated and with closures only, fit in the
    same smallest step budget, and below it both refuse (a generated loop once stopped
    quietly where the closures' raised)."""
    source, data = template_source(slug), test_corpus._CONTEXTS[context]
    budget, fits, fits_below = same_smallest_budget(source, data, monkeypatch)
    assert (fits, fits_below) == (True, False), budget

"""Loop bodies compiled to Python (minijinja_py/codegen.py) render exactly like the closures.

A loop switches to its generated body once it runs HOT_ITERATIONS items; most conformance
cases and corpus contexts have shorter loops, so here the threshold is 1 and every loop of
every conformance case and corpus pair runs generated code, checked against the same
Jinja2 references. Then the corners the generator handles itself: signals, error locations,
limits, nesting deeper than Python allows blocks.
"""

from __future__ import annotations

import pytest

import minijinja_py as mj
from minijinja_py import codegen, compiler

import test_chat_corpus
import test_conformance
import test_corpus


@pytest.fixture(autouse=True)
def _every_loop_is_hot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiler, "HOT_ITERATIONS", 1)


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


def test_a_typical_message_loop_body_is_generated() -> None:
    template = mj.chat_environment().from_string(
        "{% for m in messages %}{% if m.role == 'user' or m['role'] == 'system' %}"
        "{{ m['content'] }}{% elif 'tool_calls' in m and m.tool_calls %}T{% endif %}{% endfor %}")
    bodies = []
    original = codegen.generate

    def spy(body):  # type: ignore[no-untyped-def]
        generated = original(body)
        bodies.append((body, generated))
        return generated

    try:
        codegen_generate = compiler.generate_body
        compiler.generate_body = spy
        messages = [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [1]},
                    {"role": "system", "content": "b"}, {"role": "assistant"}]
        assert template.render(messages=messages) == "aTb"
    finally:
        compiler.generate_body = codegen_generate
    assert bodies and all(generated is not body for body, generated in bodies)
    assert bodies[0][1].__name__ == "generated_body"


@pytest.mark.parametrize("source,expected", [
    ("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "012"),
    ("{% for i in range(5) %}{% if i % 2 %}{% continue %}{% endif %}{{ i }}{% endfor %}", "024"),
    ("{% for i in range(3) %}{% for j in range(3) %}{% if j > i %}{% break %}{% endif %}"
     "{{ i }}{{ j }} {% endfor %}{% endfor %}", "00 10 11 20 21 22 "),
    ("{% for m in ms %}{{ m.role ~ ':' ~ m.missing ~ ';' }}{% endfor %}", "u:;a:;"),
    ("{% for m in ms %}{% if not m.role == 'u' and m['role'] %}{{ m.role }}{% endif %}"
     "{% endfor %}", "a"),
    ("{% for m in ms %}{{ m.role if m.role != 'u' else 'user' }}{% endfor %}", "usera"),
])
def test_generated_bodies_keep_the_closures_semantics(source: str, expected: str) -> None:
    ms = [{"role": "u"}, {"role": "a"}]
    assert _render(source, ms=ms) == expected


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

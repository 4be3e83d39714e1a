"""Bad input: malformed template sources and odd data.

* Every malformed source raises ``mj.TemplateSyntaxError`` with ``lineno`` and ``column`` set
  (Jinja2 refuses it too); block-nesting mistakes carry Jinja2's exact message.
* NUL bytes and lone surrogates in the source either render exactly as Jinja2 renders them or
  fail as a TemplateError where Jinja2 fails.
* Huge sources (10 MB) parse or fail cleanly within a bounded time (in a child interpreter with
  a timeout, so a hang fails one test instead of the run).
* Odd data (None content, content parts, int keys, NaN/Infinity, huge ints, 10,000-level nesting,
  cyclic data, sets, bytes, functions, objects) renders exactly as Jinja2 renders it, or raises
  a TemplateError where Jinja2 fails; the caller's data is never modified.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import json
import math
import re
from typing import Any, Callable, List, Optional

import pytest

import minijinja_py as mj

from security_support import (chat_env, corpus_available, corpus_slugs, corpus_template,
                              reference_env, run_isolated)

# every test runs as a plain render, a provenance render and the tokens path (conftest.py)
pytestmark = pytest.mark.usefixtures("render_mode")


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the persistent parse cache out of these tests (and out of the user's home)."""
    monkeypatch.setenv("MINIJINJA_PY_CACHE", "0")


def parse(source: str) -> Any:
    return mj.chat_environment().from_string(source, name="bad.jinja")


def jinja2_error(source: str) -> Optional[BaseException]:
    """The exception Jinja2 raises while compiling ``source`` (None when it compiles)."""
    try:
        reference_env().from_string(source)
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


def assert_located_syntax_error(source: str) -> mj.TemplateSyntaxError:
    with pytest.raises(mj.TemplateSyntaxError) as info:
        parse(source)
    err = info.value
    assert isinstance(err.lineno, int) and err.lineno >= 1, (err.lineno, err.message)
    assert isinstance(err.column, int) and err.column >= 1, (err.column, err.message)
    assert err.lineno <= source.count("\n") + 1
    assert err.message
    assert err.name == "bad.jinja" and err.source == source
    assert str(err).startswith(err.message)
    return err


# -- malformed sources ----------------------------------------------------------------------------
MALFORMED = [
    # unclosed {{ / {% / {#
    "{{", "{{ x", "a\n{{ x", "{{ x }", "{{ x }}{{", "{{ x -}", "{{ 'a' ~ }}",
    "{%", "{% if", "{% if x", "{% for x in y", "a\nb\n{% if x %}{% endif", "{%- if x -",
    "{# abc", "a\n{# abc", "{# {# #", "{#}", "{# ", "{{ x }}{# unclosed",
    # unclosed strings
    "{{ 'abc }}", '{{ "abc }}', "{{ 'abc\n }}", "{% set x = 'abc %}", "{{ 'a\\' }}",
    "{{ x['abc }}",
    # unclosed raw
    "{% raw %}abc", "{% raw %}abc{% endraw", "{% raw %}{% raw %}{{ x }}",
    # unclosed blocks
    "{% if x %}abc", "{% if x %}{% else %}abc", "{% if x %}{% elif y %}abc",
    "{% for a in y %}abc", "{% for a in y %}{% else %}abc", "{% macro m() %}abc",
    "{% set a %}abc", "{% filter upper %}abc", "{% call m() %}abc", "{% with %}abc",
    "{% block b %}abc", "{% if x %}{% for a in y %}{% endif %}",
    # stray or mismatched end tags
    "{% endfor %}", "{% endif %}", "{% endmacro %}", "{% endraw %}", "{% endset %}",
    "{% endblock %}", "{% endfilter %}", "{% endcall %}", "{% endwith %}", "{% else %}",
    "{% elif x %}", "{% if x %}{% endfor %}", "{% for a in y %}{% endif %}",
    "{% if x %}{% else %}{% else %}{% endif %}", "{% if x %}{% else %}{% elif x %}{% endif %}",
    "{% for a in y %}{% else %}{% endif %}", "{% macro m() %}{% endif %}",
    "{% if x %}{% endif %}{% endif %}", "{% for a in y %}{% endfor %}{% endfor %}",
    "{% with %}{% endfor %}", "{% filter upper %}{% endif %}", "{% call m() %}{% endfor %}",
    "{% if x %}\n\n  {% endfor %}",
    # unknown tags
    "{% frob %}", "{% do x %}", "{% trans %}hi{% endtrans %}", "{% endfrob %}", "{% %}",
    "{% 1 %}", "{% 'if' %}", "{% if x %}{% frob %}{% endif %}", "{%- -%}",
    # unknown filters and tests (outside if/conditional expressions: compile time)
    "{{ x|nosuch }}", "{{ x is nosuch }}", "{% for a in x|nosuch %}{% endfor %}",
    "{% set a = x|nosuch %}", "{{ x|upper|nosuch(1) }}", "{% filter nosuch %}x{% endfilter %}",
    # malformed expressions
    "{{ }}", "{{- -}}", "{% for a in y %}{{ }}{% endfor %}", "{{ x | }}", "{{ x. }}",
    "{{ x[ }}", "{{ (1 }}", "{{ [1, }}", "{{ {1: }}", "{{ 1 + }}", "{{ x y }}",
    "{{ not }}", "{{ a = 1 }}", "{{ x is }}", "{{ x is not }}", "{{ 1 if }}", "{{ *x }}",
    "{{ x[1:2:3:4] }}", "{{ ) }}", "{{ ] }}", "{{ } }}", "{{ , }}", "{{ . }}", "{{ 1 2 }}",
    "{{ x.(1) }}", "{{ x..y }}", "{{ 'a' 1 }}", "{{ x|1 }}", "{{ x is 1 }}", "{{ ** }}",
    "{{ f(**) }}", "{{ f(,) }}", "{{ {,} }}", "{{ [,] }}", "{{ x if y else }}",
    # malformed statements
    "{% for %}{% endfor %}", "{% for a %}{% endfor %}", "{% for a in %}{% endfor %}",
    "{% for in y %}{% endfor %}", "{% for 1 in y %}{% endfor %}",
    "{% for a in y recursive x %}{% endfor %}", "{% set %}", "{% set 1 = 2 %}",
    "{% set a = %}", "{% set a b = 1 %}", "{% set a.b.c = 1 %}", "{% macro %}{% endmacro %}",
    "{% macro m( %}{% endmacro %}", "{% macro 1() %}{% endmacro %}",
    "{% macro m(1) %}{% endmacro %}", "{% call %}{% endcall %}", "{% call x %}{% endcall %}",
    "{% with a %}{% endwith %}", "{% with 1 = 2 %}{% endwith %}", "{% filter %}{% endfilter %}",
    "{% if %}{% endif %}", "{% elif %}", "{% raw x %}{% endraw %}", "{% break x %}",
    "{% for a in y %}{% break %}{% continue x %}{% endfor %}", "{% block %}{% endblock %}",
    "{% block 1 %}{% endblock %}",
    # wrong arity that is a syntax error
    "{% macro m(a=1, b) %}{% endmacro %}", "{{ f(a=1, 2) }}", "{{ f(*x, *y) }}",
    "{{ f(**x, *y) }}", "{{ f(**x, a=1, 2) }}", "{{ f(**x, **y) }}", "{{ x|default(a=1, 2) }}",
    "{{ x is divisibleby(a=1, 2) }}",
    # NUL bytes and lone surrogates inside tags
    "{{ \x00 }}", "{% if \x00 %}{% endif %}", "{{ x\x00 }}", "{{ \ud800 }}", "{% \ud800 %}",
    "{{ x|\udfff }}",
    # delimiters in odd places
    "{{{ x }}", "{%% if x %}{% endif %}", "{% if x %}{{ }}{% endif %}",
]

#: Sources Jinja2 accepts at compile time but that are still malformed for this suite's purpose
#: are not listed; every source above must be refused by Jinja2 as well.


@pytest.mark.parametrize("source", MALFORMED)
def test_malformed_source_is_a_located_syntax_error(source: str) -> None:
    reference = jinja2_error(source)
    assert reference is not None, "Jinja2 accepts this source: it does not belong here"
    assert_located_syntax_error(source)


@pytest.mark.parametrize("source", MALFORMED)
def test_block_nesting_messages_are_jinja2s(source: str) -> None:
    """Stray, mismatched and unclosed block tags: Jinja2's exact message (other syntax errors
    only need to be located: their wording is the parser's own)."""
    reference = jinja2_error(source)
    assert reference is not None
    err = assert_located_syntax_error(source)
    expected = getattr(reference, "message", None) or str(reference)
    if expected.startswith(("Encountered unknown tag", "Unexpected end of template")):
        assert err.message == expected


@pytest.mark.parametrize("source,line,column", [
    ("{% if x %}\n\n  {% endfor %}", 3, 6),
    ("a\nb\n{% frob %}", 3, 4),
    ("{% for a in y %}\n{{ x|nosuch }}\n{% endfor %}", 2, 5),
    ("\n\n\n{{ 'abc }}", 4, 4),
    ("line\n{% macro m(a=1, b) %}{% endmacro %}", 2, None),
    ("x\n{% filter nosuch %}x{% endfilter %}", 2, None),
])
def test_syntax_error_location_points_at_the_problem(source: str, line: int,
                                                     column: Optional[int]) -> None:
    err = assert_located_syntax_error(source)
    assert err.lineno == line
    if column is not None:
        assert err.column == column


def test_unknown_filter_or_test_inside_if_fails_at_render_time() -> None:
    for source in ("{% if x|nosuch %}a{% endif %}", "{% if x is nosuch %}a{% endif %}",
                   "{{ 1 if x|nosuch else 2 }}"):
        template = parse(source)
        with pytest.raises(mj.TemplateRuntimeError) as info:
            template.render(x=1)
        assert "nosuch" in info.value.message and info.value.lineno == 1


def test_wrong_arity_at_render_time_is_a_located_runtime_error() -> None:
    for source in ("{{ range(1, 2, 3, 4) }}", "{{ x|default(1, 2, 3, 4) }}",
                   "{{ 'a'|truncate(1, 2, 3, 4, 5, 6) }}", "{{ 'a'.upper(1) }}",
                   "{{ x is divisibleby }}", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
                   "{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", "{{ cycler() }}",
                   "{{ joiner(1, 2, 3) }}", "{{ lipsum(1, 2, 3, 4, 5) }}"):
        with pytest.raises(mj.TemplateRuntimeError) as info:
            parse(source).render(x=1)
        assert info.value.lineno == 1 and info.value.column is not None, source


UNDEFINED_USES = [
    "{% for i in missing %}{% endfor %}", "{% for i in missing recursive %}{% endfor %}",
    "{% for k, v in missing|items %}{% endfor %}", "{{ x[missing] }}", "{{ missing + 1 }}",
    "{{ missing.attr }}", "{{ missing['key'] }}", "{% if missing %}{% endif %}",
    "{{ missing|upper }}", "{{ missing ~ 'a' }}", "{{ missing in [1] }}", "{{ 1 in missing }}",
    "{{ [missing]|join }}", "{{ missing|tojson }}", "{{ missing|length }}", "{{ missing() }}",
    "{{ missing is defined }}", "{{ not missing }}", "{{ {missing: 1} }}", "{{ missing == 1 }}",
    "{% set a, b = missing %}", "{{ '%s'|format(missing) }}", "{{ '{}'.format(missing) }}",
    "{{ x.get(missing) }}", "{{ [1]|map(attribute=missing)|list }}", "{{ missing|default(1) }}",
    "{% macro m(a) %}{{ a.b }}{% endmacro %}{{ m() }}", "{{ dict(missing) }}",
    "{{ missing|dictsort }}", "{{ range(missing) }}", "{{ x|selectattr(missing)|list }}",
]


@pytest.mark.parametrize("undefined", [mj.Undefined, mj.StrictUndefined, mj.ChainableUndefined],
                         ids=["Undefined", "StrictUndefined", "ChainableUndefined"])
@pytest.mark.parametrize("source", UNDEFINED_USES)
def test_undefined_values_fail_with_a_location_in_every_policy(source: str,
                                                               undefined: type) -> None:
    env = mj.Environment(undefined=undefined, trim_blocks=True, lstrip_blocks=True,
                         immutable=True)
    try:
        result = env.from_string("\n" + source).render(x={"k": 1})
    except mj.TemplateError as exc:
        assert exc.lineno == 2, (exc.lineno, exc.message)
        assert exc.column is not None
    else:
        assert isinstance(result, str)


# -- edge cases where Jinja2 renders: render the same --------------------------------------------
RENDERED_BY_JINJA2 = [
    "a\x00b", "{{ 'a\x00b' }}", "{{ x }}\x00", "{# \x00 #}ok", "{% raw %}\x00{% endraw %}",
    "{% if true %}\x00{% endif %}", "{{ '\\x00' }}|{{ '\\u0000' }}",
    "\ud800", "{{ '\ud800' }}", "{{ x }}\udfff{{ x }}", "{% if true %}\ud800{% endif %}",
    "{# \ud800 #}", "{{ '\\ud800' }}", "{{ '\ud800'|upper }}", "{{ '\ud800'|tojson }}",
    "{{ '\\udfff\\ud800'|length }}", "\ud83d\ude00{{ x }}\ufeff",
    "{#", "a{#", "{#-", "{{ x }}{#", "{% raw %}", "{% raw %}{% endraw %}{#",
    "{{ x }} }}", "{{ x }}}", "%}", "}}", "#}", "{", "{ {", "{%raw%}{{{%endraw%}",
    "{{ '{{' }}", "{{ '}}' }}", "{{ '%}' }}", "{{ '{%' }}", "{{ '#}' }}",
    "\r\n{{ x }}\r\n", "{{ x }}\r", "\r{% if true %}\r\nx\r{% endif %}\r",
    "{%- if true -%}\n  a  \n{%- endif -%}", "{%+ if true +%}a{% endif +%}",
    "{{ 1.2.3 }}", "{{ x.1 }}", "{{ 0x10 }}|{{ 0b11 }}|{{ 0o17 }}|{{ 1_000 }}|{{ 1e3 }}",
    "{{ 'a' 'b' }}", "{{ lambda }}", "{{ None }}|{{ none }}|{{ True }}|{{ true }}",
    "{{ '\\N{BULLET}' }}", "{{ '\\777' }}", "{{ '\\q' }}",
]


def _render_both(source: str, data: dict) -> tuple:
    """(Jinja2's outcome, ours). Ours is computed FIRST and must leave ``data`` unmodified
    (Jinja2 itself modifies a list given to ``indent``)."""
    before = fingerprint(data)
    try:
        ours: tuple = ("ok", chat_env().from_string(source).render(**data))
    except mj.TemplateError as exc:
        ours = ("error", type(exc).__name__, exc.message)
    assert fingerprint(data) == before, "the render modified the caller's data"
    try:
        reference: tuple = ("ok", reference_env().from_string(source).render(**data))
    except Exception as exc:  # noqa: BLE001
        reference = ("error", type(exc).__name__)
    return reference, ours


@pytest.mark.parametrize("source", RENDERED_BY_JINJA2)
def test_odd_source_renders_like_jinja2(source: str) -> None:
    reference, ours = _render_both(source, {"x": 1})
    if reference[0] == "ok":
        assert ours == reference
    else:
        assert ours[0] == "error", f"Jinja2 raised {reference[1]}, we rendered {ours[1]!r}"


def test_block_end_name_must_match_like_jinja2() -> None:
    assert jinja2_error("{% block a %}{% endblock b %}") is not None
    assert_located_syntax_error("{% block a %}{% endblock b %}")
    assert parse("{% block a %}x{% endblock a %}").render() == "x"


def test_trailing_comma_for_target_like_jinja2() -> None:
    assert jinja2_error("{% for a, in y %}{% endfor %}") is not None
    assert_located_syntax_error("{% for a, in y %}{% endfor %}")


# -- huge sources ------------------------------------------------------------------------------
def _corpus_source() -> str:
    slugs = [s for s in ("cz-chatml", "axolotl-llama3") if s in corpus_slugs()]
    if slugs:
        return corpus_template(slugs[0])
    return ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
            "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


TEN_MB = 10_000_000
#: what a source over the default Limits.max_source_size (1,000,000 characters) ends with
TOO_LARGE = "Limits.max_source_size"
HUGE_DATA = {"x": 1, "messages": [{"role": "user", "content": "hi"}],
             "add_generation_prompt": True}


def _repeated_corpus_output() -> str:
    """What _corpus_source() repeated to 0.95 MB renders: its output as many times."""
    source = _corpus_source()
    once = mj.chat_environment().from_string(source).render(**HUGE_DATA)
    return once * (950_000 // len(source))


HUGE_SOURCES = [
    # (id, source builder, its output (or a function making it) or the limit refusing it)
    ("plain-text", lambda: "x" * TEN_MB, TOO_LARGE),
    ("text-lines", lambda: "line of text\n" * (TEN_MB // 13), TOO_LARGE),
    ("string-literal", lambda: "{{ '" + "a" * TEN_MB + "' }}", TOO_LARGE),
    ("comment", lambda: "{# " + "c" * TEN_MB + " #}ok", TOO_LARGE),
    ("unclosed-comment", lambda: "{# " + "c" * TEN_MB, TOO_LARGE),
    ("raw-block", lambda: "{% raw %}" + "{{ x }}" * (TEN_MB // 7) + "{% endraw %}", TOO_LARGE),
    ("unclosed-raw", lambda: "{% raw %}" + "{{ x }}" * (TEN_MB // 7), TOO_LARGE),
    ("spaces-in-tag", lambda: "{{" + " " * TEN_MB + "x }}", TOO_LARGE),
    ("newlines-in-tag", lambda: "{{" + "\n" * TEN_MB + "x }}", TOO_LARGE),
    ("unclosed-string", lambda: "{{ '" + "a" * TEN_MB, TOO_LARGE),
    ("unclosed-print", lambda: "{{ x" + " " * TEN_MB, TOO_LARGE),
    ("many-text-blocks", lambda: ("text " * 200 + "{{ x }}") * (TEN_MB // 1007), TOO_LARGE),
    ("corpus-template-repeated",
     lambda: _corpus_source() * (TEN_MB // len(_corpus_source()) + 1), TOO_LARGE),
    ("many-prints", lambda: "{{ x }}" * (TEN_MB // 7), TOO_LARGE),
    # just under the default Limits.max_source_size (1,000,000; real templates are under
    # 20 KB): these must PARSE, in seconds
    ("corpus-template-repeated-0.95MB",
     lambda: _corpus_source() * (950_000 // len(_corpus_source())), _repeated_corpus_output),
    ("many-prints-0.95MB", lambda: "{{ x }}" * (950_000 // 7), "1" * (950_000 // 7)),
    ("one-tag-0.95MB", lambda: "{{ [" + "1," * 450_000 + "]|length }}", "450000"),
    ("long-list-literal", lambda: "{% set a = [" + "1," * 100_000 + "] %}{{ a|length }}",
     "100000"),
    ("long-dict-literal",
     lambda: "{% set a = {" + ",".join(f"'k{i}': {i}" for i in range(50_000)) + "} %}"
             "{{ a|length }}", "50000"),
    ("long-call", lambda: "{{ [" + ",".join(["x"] * 100_000) + "]|length }}", "100000"),
    ("long-concat", lambda: "{{ " + " ~ ".join(["'a'"] * 100_000) + " }}", "a" * 100_000),
    ("long-elif-chain",
     lambda: "{% if x == 0 %}0" + "".join(f"{{% elif x == {i} %}}{i}" for i in range(1, 50_000))
             + "{% endif %}", TOO_LARGE),
    ("many-macros",
     lambda: "".join(f"{{% macro m{i}() %}}{i}{{% endmacro %}}" for i in range(100_000))
             + "{{ m99999() }}", TOO_LARGE),
]
#: CPU seconds (in the child) any of them may take: the slowest takes about 3 here
HUGE_CPU_SECONDS = 20.0


@pytest.mark.parametrize("build,expected", [h[1:] for h in HUGE_SOURCES],
                         ids=[h[0] for h in HUGE_SOURCES])
def test_huge_source_parses_or_fails_cleanly_in_bounded_time(build: Callable[[], str],
                                                              expected: Any) -> None:
    source = build()
    # the deadline (a wall clock) out of the way: the outcome does not depend on the load
    result = run_isolated(source, HUGE_DATA, limits={"max_seconds": None}, timeout=60.0)
    if expected == TOO_LARGE:
        assert result.kind == "template_error", result.describe()
        assert result.error_class == "SourceTooLargeError", result.describe()
        assert TOO_LARGE in result.message and result.lineno is not None, result.describe()
    else:
        output = expected() if callable(expected) else expected
        assert result.kind == "ok", result.describe()
        assert (result.output_length, result.output_head) == (len(output), output[:200]), \
            result.describe()
    assert result.cpu_seconds < HUGE_CPU_SECONDS, result.describe()


# -- odd data -------------------------------------------------------------------------------------
class Thing:
    """A host object a caller might pass by mistake."""

    a = "class attribute"

    def __init__(self) -> None:
        self.b = 2
        self._secret = "s3cret"

    def method(self) -> int:
        return 3


def _deep_list(depth: int) -> list:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _deep_dict(depth: int) -> dict:
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def _cyclic_list() -> list:
    value: list = [1, "two"]
    value.append(value)
    return value


def _cyclic_dict() -> dict:
    value: dict = {"a": 1}
    value["self"] = value
    return value


def _shared_function(a: Any = 1) -> Any:
    return a


THING = Thing()  # one instance: its repr (with an address) is the same in both engines

ODD_VALUES: List[tuple] = [
    ("none", lambda: None),
    ("content-parts", lambda: [{"type": "text", "text": "hi"}, {"type": "image"},
                               {"type": "text", "text": None}]),
    ("int-keys", lambda: {1: "a", 2: "b", 0: "zero"}),
    ("mixed-keys", lambda: {1: "a", "b": 2, None: 3, True: 4, 1.5: 5}),
    ("nan", lambda: float("nan")),
    ("infinity", lambda: float("inf")),
    ("minus-infinity", lambda: float("-inf")),
    ("special-floats", lambda: [float("nan"), float("inf"), -0.0, 1e308, 5e-324]),
    ("huge-int", lambda: 10 ** 5000),
    ("big-int", lambda: 10 ** 100),
    ("negative-zero", lambda: -0.0),
    ("bool", lambda: True),
    ("empty-string", lambda: ""),
    ("empty-list", lambda: []),
    ("empty-dict", lambda: {}),
    ("nul-string", lambda: "a\x00b"),
    ("surrogate-string", lambda: "\ud800x\udfff"),
    ("long-string", lambda: "word " * 20_000),
    ("deep-list", lambda: _deep_list(10_000)),
    ("deep-dict", lambda: _deep_dict(10_000)),
    ("deep-list-in-messages", lambda: [{"role": "user", "content": _deep_list(10_000)}]),
    ("cyclic-list", _cyclic_list),
    ("cyclic-dict", _cyclic_dict),
    ("object", lambda: THING),
    ("set", lambda: {3, 1, 2}),
    ("frozenset", lambda: frozenset({"b", "a"})),
    ("bytes", lambda: b"by\x00tes"),
    ("bytearray", lambda: bytearray(b"ab")),
    ("function", lambda: _shared_function),
    ("builtin", lambda: len),
    ("tuple", lambda: (1, "a", None)),
    ("complex", lambda: 1 + 2j),
    ("decimal", lambda: decimal.Decimal("1.50")),
    ("datetime", lambda: datetime.datetime(2025, 1, 2, 3, 4, 5)),
    ("range", lambda: range(3)),
    ("nested-odd", lambda: {"m": [{"role": None, "content": [1, None, {"x": float("nan")}]}]}),
]

ODD_TEMPLATES = [
    "{{ x }}", "{{ x|tojson }}", "{{ x|tojson(indent=2, sort_keys=true) }}", "{{ x|string }}",
    "{{ x|length }}", "{% for a in x %}[{{ a }}]{% endfor %}", "{{ x|list }}", "{{ x|first }}",
    "{{ x|last }}", "{{ x|sort }}", "{{ x|join(',') }}", "{{ x|trim }}", "{{ x|upper }}",
    "{{ x is mapping }}{{ x is iterable }}{{ x is string }}{{ x is number }}{{ x is none }}",
    "{{ x is defined }}{{ x is sequence }}{{ x is callable }}{{ x is sameas x }}",
    "{{ x.a }}|{{ x.b }}|{{ x['a'] }}|{{ x[0] }}|{{ x._secret }}", "{{ x == x }}",
    "{{ x != 1 }}", "{{ x + x }}", "{{ x ~ '' }}", "{{ x|pprint }}", "{{ x|dictsort }}",
    "{{ x|items|list }}", "{{ x|unique|list }}", "{{ x|max }}", "{{ x|min }}", "{{ x|sum }}",
    "{{ x|reverse|list }}", "{{ x|map('string')|list }}", "{{ x in [x] }}", "{{ 1 in x }}",
    "{{ x|default('d') }}", "{{ x|replace('a', 'b') }}", "{{ x|int }}", "{{ x|float }}",
    "{{ x|round }}", "{{ x|abs }}", "{{ x|wordcount }}", "{{ x|batch(2)|list }}",
    "{{ x|count }}", "{{ x|e }}", "{{ x|center(9) }}", "{{ x|indent(2) }}", "{{ x|title }}",
    "{{ x|select|list }}", "{{ x|selectattr('type')|list }}", "{{ x|map(attribute='type')|list }}",
    "{{ x|groupby('type')|list }}", "{{ x|attr('b') }}", "{{ x|format }}", "{{ '%s'|format(x) }}",
    "{{ '{}'.format(x) }}", "{{ x|truncate(10) }}", "{{ x|urlencode }}",
    "{% if x %}T{% else %}F{% endif %}", "{{ not x }}", "{{ -x }}", "{{ x * 2 }}",
    "{{ x > 0 }}", "{{ x|string|length }}", "{% for k, v in x|items %}{{ k }}={{ v }};{% endfor %}",
    "{% for a in x recursive %}{{ a }}{% if a is iterable and a is not string %}"
    "{{ loop(a) }}{% endif %}{% endfor %}",
    "{% set ns = namespace(v=x) %}{{ ns.v is defined }}", "{{ x.method() }}{{ x.decode() }}",
]


def _safe_repr(value: Any) -> str:
    """repr() that also works for ints beyond Python's 4,300-digit str() limit."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"int:{value:#x}"
    return repr(value)


def fingerprint(value: Any) -> list:
    """An iterative structural snapshot (deepcopy would recurse 10,000 levels and loop on
    cycles): equal fingerprints before and after a render mean the data was not modified."""
    out: list = []
    stack: list = [value]
    seen: dict = {}
    while stack:
        item = stack.pop()
        if isinstance(item, (list, dict, set, frozenset, tuple, bytearray, Thing)):
            if id(item) in seen:
                out.append(("ref", seen[id(item)]))
                continue
            seen[id(item)] = len(seen)
        if isinstance(item, dict):
            out.append(("dict", len(item)))
            for key, val in item.items():
                out.append(("key", _safe_repr(key)))
                stack.append(val)
        elif isinstance(item, (list, tuple)):
            out.append((type(item).__name__, len(item)))
            stack.extend(reversed(item))
        elif isinstance(item, (set, frozenset)):
            out.append((type(item).__name__, sorted(map(_safe_repr, item))))
        elif isinstance(item, bytearray):
            out.append(("bytearray", bytes(item)))
        elif isinstance(item, Thing):
            out.append(("Thing", sorted(vars(item).items())))
        elif isinstance(item, float) and math.isnan(item):
            out.append(("nan",))
        else:
            out.append((type(item).__name__, _safe_repr(item)))
    return out


def _odd_outcomes(source: str, make: Callable[[], Any]) -> tuple:
    return _render_both(source, {"x": make()})


@pytest.mark.parametrize("make", [v[1] for v in ODD_VALUES], ids=[v[0] for v in ODD_VALUES])
@pytest.mark.parametrize("source", ODD_TEMPLATES)
def test_odd_data_renders_like_jinja2_or_fails_cleanly(source: str,
                                                       make: Callable[[], Any]) -> None:
    reference, ours = _odd_outcomes(source, make)
    if reference[0] == "ok":
        # (a documented difference: pprint's mark of a container inside itself names no id,
        # which is its memory address; Jinja2's does)
        assert ours == (reference[0], re.sub(r"(<Recursion on \w+) with id=\d+>", r"\1>",
                                             reference[1]))
    else:
        assert ours[0] == "error", f"Jinja2 raised {reference[1]}, we rendered {ours[1]!r}"


def test_tojson_of_nan_and_infinity_is_json_dumps() -> None:
    values = [float("nan"), float("inf"), float("-inf"), -0.0, 1e308]
    got = mj.chat_environment().from_string("{{ x|tojson }}").render(x=values)
    assert got == json.dumps(values) == "[NaN, Infinity, -Infinity, -0.0, 1e+308]"


def test_odd_data_errors_are_located() -> None:
    env = mj.chat_environment()
    for source, value in (("{{ x + 1 }}", None), ("\n{{ x|tojson }}", {1, 2}),
                          ("\n\n{{ x }}", 10 ** 5000), ("{{ x|tojson }}", _cyclic_list()),
                          ("{{ x|tojson }}", _deep_list(10_000)), ("{{ x }}", _deep_dict(10_000))):
        with pytest.raises(mj.TemplateError) as info:
            env.from_string(source).render(x=value)
        assert info.value.lineno == source.count("\n") + 1, (source, info.value.message)
        assert info.value.column is not None


# -- odd messages through real templates --------------------------------------------------------
ODD_MESSAGES = [
    ("none-content", [{"role": "user", "content": None}]),
    ("parts-content", [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                    {"type": "image"}]}]),
    ("int-content", [{"role": "user", "content": 12345}]),
    ("nan-content", [{"role": "user", "content": float("nan")}]),
    ("huge-int-content", [{"role": "user", "content": 10 ** 5000}]),
    ("int-keys", [{1: "user", "role": "user", "content": "hi", 2: None}]),
    ("missing-role", [{"content": "hi"}]),
    ("missing-content", [{"role": "user"}]),
    ("odd-role", [{"role": None, "content": "hi"}, {"role": 7, "content": "x"}]),
    ("empty-messages", []),
    ("message-not-dict", ["hello", 3, None]),
    ("dict-content", [{"role": "user", "content": {"a": 1}}]),
    ("deep-content", [{"role": "user", "content": _deep_list(10_000)}]),
    ("cyclic-content", [{"role": "user", "content": _cyclic_list()}]),
    ("nul-and-surrogates", [{"role": "user", "content": "a\x00b\ud800"}]),
    ("template-syntax-in-content", [{"role": "user", "content": "{{ 7 * 7 }}{% if %}"}]),
]

def _compiles_in_jinja2(slug: str) -> bool:
    try:
        reference_env().from_string(corpus_template(slug))
    except Exception:  # noqa: BLE001 - a corpus template Jinja2 itself refuses
        return False
    return True


REAL_SLUGS = [s for s in ("cz-chatml", "cz-llama-3-instruct", "axolotl-llama3",
                          "hfjs-mistralai-mistral-7b-instruct-v0.3", "cz-zephyr", "cz-gemma-it",
                          "hfjs-qwen-qwen1.5-72b-chat", "axolotl-mistral-v7-tekken")
              if s in corpus_slugs() and _compiles_in_jinja2(s)]


@pytest.mark.skipif(not corpus_available(), reason="shared corpus not found")
@pytest.mark.parametrize("messages", [m[1] for m in ODD_MESSAGES], ids=[m[0] for m in ODD_MESSAGES])
@pytest.mark.parametrize("slug", REAL_SLUGS)
def test_odd_messages_through_real_templates(slug: str, messages: list) -> None:
    source = corpus_template(slug)
    data = {"messages": messages, "add_generation_prompt": True, "bos_token": "<s>",
            "eos_token": "</s>"}
    reference, ours = _render_both(source, data)
    if reference[0] == "ok":
        assert ours == reference
    else:
        assert ours[0] == "error", f"Jinja2 raised {reference[1]}, we rendered {ours[1]!r}"


def test_caller_data_is_never_modified_by_a_full_render() -> None:
    data = {"messages": [{"role": "system", "content": "s"},
                         {"role": "user", "content": [{"type": "text", "text": "t"}]},
                         {"role": "assistant", "content": None,
                          "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "add_generation_prompt": True}
    before = copy.deepcopy(data)
    source = ("{% set ns = namespace(m=messages) %}{% for m in messages|reverse %}"
              "{{ m.role }}{{ m|tojson }}{{ m.content|string }}{% endfor %}"
              "{{ messages|selectattr('role', 'equalto', 'user')|list }}"
              "{{ tools|map(attribute='function')|list }}{{ messages|groupby('role') }}"
              "{{ messages[2].tool_calls[0].function.arguments|dictsort }}")
    mj.chat_environment().from_string(source).render(**data)
    assert data == before


# -- a damaged persistent parse cache ---------------------------------------------------------------
def _perturb(value: Any, rng: Any) -> Any:
    """Copy of a marshalled AST with one structural change somewhere: a field dropped,
    duplicated, swapped or replaced by a value of the wrong type (what an entry written by a
    different build of the same version looks like to this one)."""
    containers: list = []

    def collect(item: Any, path: tuple) -> None:
        if isinstance(item, (tuple, list)):
            containers.append(path)
            for index, child in enumerate(item):
                collect(child, path + (index,))

    collect(value, ())
    target = rng.choice(containers)

    def rebuild(item: Any, path: tuple) -> Any:
        if isinstance(item, (tuple, list)):
            items = [rebuild(child, path + (i,)) for i, child in enumerate(item)]
            if path == target and items:
                i, j = rng.randrange(len(items)), rng.randrange(len(items))
                action = rng.choice(["drop", "duplicate", "swap", "replace"])
                if action == "drop":
                    del items[i]
                elif action == "duplicate":
                    items.insert(i, items[j])
                elif action == "swap":
                    items[i], items[j] = items[j], items[i]
                else:
                    items[i] = rng.choice([None, 0, -1, 10 ** 9, "", "x", (), [], ("a", "b")])
            return type(item)(items)
        return item

    return rebuild(value, ())


@pytest.mark.parametrize("seed", range(40))
def test_damaged_parse_cache_entry_never_escapes(seed: int, tmp_path: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """from_string() and render() with a checksum-valid but structurally wrong cache entry (as
    one written by another build of the same version): a str or a TemplateError, never another
    exception (e.g. by validating the entry, or by parsing again when it does not compile)."""
    import marshal
    import os
    import random

    from minijinja_py.syntax import parse_cache as diskcache

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("MINIJINJA_PY_CACHE", "1")
    monkeypatch.setenv("MINIJINJA_PY_CACHE_DIR", str(cache))
    source = ("{% for m in messages %}{% if m.role == 'user' and loop.index > 0 %}"
              "{{ '<|user|>' ~ m.content|trim }}{% elif m.role in ['assistant'] %}"
              "{{ m.content[:3] + '...' }}{% endif %}{% endfor %}"
              "{% set ns = namespace(a=1) %}{% macro f(x, y=2) %}{{ x * y }}{% endmacro %}"
              "{{ f(ns.a) if messages is defined else none }}{{ [1, 2]|map('string')|join }}")
    data = {"messages": [{"role": "user", "content": " hi "},
                         {"role": "assistant", "content": "hello"}]}
    mj.chat_environment().from_string(source).render(**data)
    entries = os.listdir(cache)
    assert len(entries) == 1, entries  # the engine stored its parse
    path = cache / entries[0]
    payload = path.read_bytes()[diskcache._HEADER:]
    damaged = marshal.dumps(_perturb(marshal.loads(payload), random.Random(seed)))
    path.write_bytes(diskcache.payload_checksum(damaged) + damaged)
    try:
        output = mj.chat_environment().from_string(source).render(**data)
    except mj.TemplateError:
        return
    assert isinstance(output, str)

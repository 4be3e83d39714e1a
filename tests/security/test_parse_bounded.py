"""Parsing is bounded in time: the parse deadline (``Limits.max_seconds``) holds in every long
loop of the scanner, the LALR driver, the block assembler, the depth check and the symbol
analysis, and the error it raises is a located ``DeadlineExceededError``. Also: literals
Python cannot convert are located syntax errors, not raw ``ValueError``s."""

from __future__ import annotations

import sys
from typing import Callable

import pytest

import minijinja_py as mj
from minijinja_py.guard import limits
from minijinja_py.compiler import symbols
from minijinja_py.syntax import lalr, parser, scanner
from minijinja_py.exceptions import DeadlineExceededError

from security_support import run_isolated

MB = 1_000_000


def _fill(unit: str, head: str = "", tail: str = "") -> str:
    """``head + unit * k + tail``, as long as fits in the default max_source_size."""
    return head + unit * ((MB - len(head) - len(tail)) // len(unit)) + tail


# 1 MB sources (the most the default limits let through) that take about a second to parse
# (operator chains are refused sooner: see test_operator_chain_too_deep_is_refused_...)
BIG_SOURCES = [
    ("many-small-tags", lambda: _fill("{{ x }}{% if y %}z{% endif %}")),
    ("many-sets", lambda: _fill("{% set a = b.c(1) %}")),
    ("one-long-list", lambda: _fill("1,", "{{ [", "] }}")),
    ("one-long-dict", lambda: _fill("'k': v, ", "{{ {", "} }}")),
    ("long-elif-chain", lambda: _fill("{% elif x == 1 %}y", "{% if x %}", "{% endif %}")),
    ("many-calls", lambda: _fill("{{ f(x, 1) }}")),
]


@pytest.mark.parametrize("build", [b for _, b in BIG_SOURCES], ids=[i for i, _ in BIG_SOURCES])
def test_parse_deadline_stops_a_big_source_promptly(build: Callable[[], str]) -> None:
    source = build()
    assert len(source) <= mj.Limits().max_source_size
    result = run_isolated(source, {"x": 1}, limits={"max_seconds": 0.1}, timeout=30)
    assert result.kind == "template_error", result.describe()
    assert result.error_class == "DeadlineExceededError", result.describe()
    assert "LimitExceededError" in result.error_bases
    assert "max_seconds" in result.message and "parse" in result.message, result.message
    # where the parse was (the sources are one line): inside it, not past its end
    assert result.lineno == 1 and 1 <= result.column < len(source), result.describe()
    # CPU time: a whole parse takes 1.4-3.3 s of it (the wall clock is the deadline's own)
    assert result.cpu_seconds < 1.0, result.describe()


def test_default_deadline_lets_a_big_source_parse() -> None:
    source = _fill("{{ x }}{% if y %}z{% endif %}")
    result = run_isolated(source, {"x": 1, "y": True}, timeout=60)
    assert result.kind == "ok", result.describe()


# -- each loop looks at the deadline -------------------------------------------------------------
@pytest.fixture()
def expired():
    """A parse deadline already past, in force for the test."""
    token = limits.activate_parse(mj.Limits(max_seconds=1e-9))
    try:
        yield
    finally:
        limits.deactivate(token)


def _raises_located(call: Callable[[], object]) -> DeadlineExceededError:
    with pytest.raises(DeadlineExceededError) as info:
        call()
    err = info.value
    assert isinstance(err, mj.TemplateError)
    assert err.lineno is not None and err.lineno >= 1, err
    return err


def test_scanner_looks_at_the_deadline(expired) -> None:
    source = "line\n{{ x }}" * 5000
    err = _raises_located(lambda: scanner.scan(source))
    assert err.lineno > 1  # where the scanner was when it looked


def test_scanner_looks_at_the_deadline_inside_one_long_tag(expired) -> None:
    _raises_located(lambda: scanner.scan("{{ [" + "1, " * 5000 + "] }}"))


def test_lalr_driver_looks_at_the_deadline(expired, monkeypatch) -> None:
    monkeypatch.setattr(scanner, "check_deadline", lambda: None)
    err = _raises_located(lambda: parser.parse("\n{{ [" + "1, " * 5000 + "] }}"))
    assert err.lineno == 2 and err.column > 4


def test_block_assembler_looks_at_the_deadline(expired, monkeypatch) -> None:
    monkeypatch.setattr(scanner, "check_deadline", lambda: None)
    monkeypatch.setattr(lalr, "check_deadline", lambda: None)
    err = _raises_located(lambda: parser.parse("{% if x %}{{ y }}{% endif %}\n" * 2000))
    assert err.lineno > 1


def test_depth_check_looks_at_the_deadline(monkeypatch) -> None:
    # brackets make the tag's depth bound exceed the limit (so the tree is walked), not its depth
    source = "{{ [" + "[1], " * 3000 + "] }}"
    # everything before the depth check is allowed; only the depth check's walk sees the clock
    monkeypatch.setattr(scanner, "check_deadline", lambda: None)
    monkeypatch.setattr(lalr, "check_deadline", lambda: None)
    calls = []
    real = parser.Parser.check_deadline

    def deadline_in_depth_check(self, lineno, column):
        calls.append(1)
        import inspect

        if inspect.stack()[1].function == "_check_depth":
            real(self, lineno, column)

    monkeypatch.setattr(parser.Parser, "check_deadline", deadline_in_depth_check)
    token = limits.activate_parse(mj.Limits(max_seconds=1e-9))
    try:
        _raises_located(lambda: parser.parse(source))
    finally:
        limits.deactivate(token)


def test_symbol_analysis_looks_at_the_deadline() -> None:
    template = parser.parse("{{ [" + ", ".join(f"a{i}" for i in range(3000)) + "] }}"
                            + "{% set b = 1 %}" * 2000)
    token = limits.activate_parse(mj.Limits(max_seconds=1e-9))
    try:
        _raises_located(lambda: symbols.analyse_frame(template.body, frozenset()))
    finally:
        limits.deactivate(token)


def test_tree_walks_look_at_the_deadline() -> None:
    from minijinja_py.syntax import nodes

    template = parser.parse("{{ x }}" * 3000)
    token = limits.activate_parse(mj.Limits(max_seconds=1e-9))
    try:
        _raises_located(lambda: list(template.find_all(nodes.Name)))
    finally:
        limits.deactivate(token)


@pytest.mark.parametrize("source", [
    "{{ a" + ".b" * 100_000 + " }}",
    "{{ 1" + " + 1" * 100_000 + " }}",
    "{{ x" + "|e" * 100_000 + " }}",
    "{{ x" + "[0]" * 100_000 + " }}",
    "{{ f" + "()" * 100_000 + " }}",
    "{{ " + "-" * 100_000 + "1 }}",
    "{{ " + "not " * 100_000 + "x }}",
    "{{ " + "1 if x else " * 80_000 + "1 }}",
    "{{ x" + " if y" * 100_000 + " }}",
    "{{ x" + " or y" * 100_000 + " }}",
    "{{ x" + " is y" * 100_000 + " }}",
], ids=["attributes", "plus", "filters", "subscripts", "calls", "negations", "nots",
        "conditionals", "conditions", "ors", "tests"])
def test_operator_chain_too_deep_is_refused_before_it_is_all_parsed(source: str) -> None:
    """Refused as soon as the chain is longer than the depth check allows (4 * max_nesting),
    not after building the whole chain: the error comes early in the source."""
    with pytest.raises(mj.TemplateError) as info:
        mj.chat_environment().from_string(source)
    err = info.value
    if isinstance(err, mj.LimitExceededError):
        assert "Limits.max_nesting=128" in err.message
        assert err.lineno == 1 and err.column < len(source) // 4, err.column
    else:  # `x is y is y`: Jinja2's own error comes first
        assert isinstance(err, mj.TemplateSyntaxError)


@pytest.mark.usefixtures("render_mode")  # renders: in the three render modes
@pytest.mark.parametrize("max_nesting", [128, 300])
def test_chains_as_deep_as_allowed_still_parse(max_nesting: int) -> None:
    deepest = 4 * max_nesting - 8  # the depth check's limit, less the levels above the chain
    for head, unit, tail in (("1", " + 1", ""), ("", "-", "1"), ("x", "|string", ""),
                             ("x", ".a", ""), ("", "not ", "x"), ("x", "[0]", ""),
                             ("", "1 if x else ", "1"), ("x", " or y", "")):
        parser.parse("{{ " + head + unit * deepest + tail + " }}", max_nesting=max_nesting)
        with pytest.raises(mj.LimitExceededError):
            parser.parse("{{ " + head + unit * (deepest + 20) + tail + " }}",
                         max_nesting=max_nesting)
    # and they render, as deep as the compiler's recursion goes (see environment.py)
    env = mj.chat_environment()
    assert env.from_string("{{ 1" + " + 1" * 300 + " }}").render() == "301"
    assert env.from_string("{{ " + "-" * 300 + "1 }}").render() == "1"
    assert env.from_string("{{ x" + "|string" * 300 + " }}").render(x=1) == "1"


def test_no_deadline_outside_a_parse() -> None:
    # parser.parse without an Environment: no deadline in force, nothing raised
    assert parser.parse("{{ x }}" * 5000)


# -- literals Python cannot convert --------------------------------------------------------------
@pytest.mark.parametrize("source,column", [
    ("{{ " + "1" * 100_000 + " }}", 4),
    ("{{ x + " + "9" * 4_301 + " }}", 8),
    ("{{ x." + "1" * 5_000 + " }}", 6),
    ("\n  {{ [1, " + "1_0" * 3_000 + "] }}", 10),
])
def test_integer_literal_too_long_to_convert_is_a_located_syntax_error(source: str,
                                                                        column: int) -> None:
    with pytest.raises(mj.TemplateSyntaxError) as info:
        mj.chat_environment().from_string(source, name="t.jinja")
    err = info.value
    assert "integer literal of" in err.message and "digits refused" in err.message, err.message
    assert err.column == column
    assert err.name == "t.jinja"


@pytest.mark.usefixtures("render_mode")  # renders: in the three render modes
def test_integer_literals_python_converts_still_work() -> None:
    env = mj.chat_environment()
    digits = "7" * min(4_300, sys.get_int_max_str_digits() or 4_300)
    assert env.from_string("{{ (" + digits + ") % 10 }}").render() == "7"
    assert env.from_string("{{ 0x" + "f" * 10_000 + " % 16 }}").render() == "15"
    assert env.from_string("{{ 0b" + "1" * 20_000 + " % 2 }}").render() == "1"
    assert env.from_string("{{ 000 }}{{ 1_000 }}").render() == "01000"


@pytest.mark.usefixtures("render_mode")  # renders: in the three render modes
@pytest.mark.parametrize("literal,expected", [
    ("1" * 5_000 + ".5", "inf"),
    ("1e999999999999", "inf"),
    ("1e-999999999999", "0.0"),
    ("1" + "0" * 5_000 + "e-5000", "1.0"),
    ("0." + "0" * 100_000 + "1", "0.0"),
])
def test_huge_float_literals_are_what_jinja2_makes(literal: str, expected: str) -> None:
    assert mj.chat_environment().from_string("{{ " + literal + " }}").render() == expected


# -- the garbage collector pause of big parses ---------------------------------------------------
def test_big_parse_pauses_the_garbage_collector_and_restores_it(monkeypatch) -> None:
    import gc

    seen = []
    real = parser.Parser.parse

    def spy(self):
        seen.append(gc.isenabled())
        return real(self)

    monkeypatch.setattr(parser.Parser, "parse", spy)
    big = "{{ x }}" * (parser.GC_PAUSE_SOURCE // 7 + 1)
    assert gc.isenabled()
    parser.parse("{{ x }}")
    parser.parse(big)
    assert seen == [True, False] and gc.isenabled()
    with pytest.raises(mj.TemplateSyntaxError):
        parser.parse(big + "{{ (")
    assert gc.isenabled()
    gc.disable()  # a host that runs without the collector keeps it off
    try:
        parser.parse(big)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_restore_the_collector_once_the_last_ends() -> None:
    import gc

    first, second = parser.PausedGC(10 ** 6), parser.PausedGC(10 ** 6)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()
    with parser.PausedGC(10):  # small: no pause
        assert gc.isenabled()

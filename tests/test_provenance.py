"""Provenance renders: same text and errors as plain renders, and every character's origin
checked by an oracle that re-renders with inputs replaced (tests/provenance_oracle.py)."""

from __future__ import annotations

import json

import pytest

from corpus_support import CORPUS, FIXED_NOW, corpus_available, readme_counts, template_source
from provenance_oracle import OracleReport, check

from minijinja_py import ChatTemplate, Environment, Template, TemplateError, chat_environment

pytestmark = pytest.mark.skipif(not corpus_available(), reason="shared corpus not found")


def _outcome(call):
    try:
        return ("ok", call())
    except Exception as exc:  # the class and message must be the same either way
        return ("error", type(exc).__name__, str(exc))


def _corpus_pairs():
    contexts = {path.stem: json.loads(path.read_text(encoding="utf-8"))
                for path in sorted((CORPUS / "contexts").glob("*.json"))}
    for path in sorted((CORPUS / "templates").glob("*.jinja")):
        yield path.stem, contexts


@pytest.fixture(scope="module")
def corpus_results():
    """Every corpus pair rendered both ways (plain with spans, provenance)."""
    rows = []
    for slug, contexts in _corpus_pairs():
        chat = ChatTemplate(template_source(slug), now=FIXED_NOW)
        for name, context in contexts.items():
            context = dict(context)
            messages = context.pop("messages")
            plain = _outcome(lambda: chat.render_with_spans(messages, **context))
            traced = _outcome(lambda: chat.render_with_provenance(messages, **context))
            rows.append((slug, name, chat, messages, context, plain, traced))
    return rows


def test_every_corpus_pair_renders_the_same_text_spans_and_errors(corpus_results):
    _, _, pair_count = readme_counts()
    assert len(corpus_results) == pair_count
    differ = []
    for slug, name, _, _, _, plain, traced in corpus_results:
        if plain[0] == "ok" and traced[0] == "ok":
            same = (plain[1].text == traced[1].text
                    and list(plain[1].generation_spans) == list(traced[1].generation_spans))
        else:
            same = plain == traced
        if not same:
            differ.append(f"{slug}/{name}")
    assert differ == []


def test_runs_cover_the_text_in_order_and_nothing_is_unknown(corpus_results):
    unknown = []
    for slug, name, _, _, _, _, traced in corpus_results:
        if traced[0] != "ok":
            continue
        result = traced[1]
        position = 0
        for run in result.runs:
            assert run.start == position and run.end > run.start, f"{slug}/{name}"
            position = run.end
            if run.origin.kind == "unknown" or "?" in run.origin.paths:
                unknown.append(f"{slug}/{name}")
        assert position == len(result.text), f"{slug}/{name}"
        assert type(result.text) is str
    assert unknown == []


def test_oracle_holds_on_every_corpus_pair(corpus_results):
    report = OracleReport()
    checked_pairs = 0
    for slug, name, chat, messages, context, _, traced in corpus_results:
        if traced[0] != "ok" or context.get("continue_final_message"):
            continue
        variables = chat.template_variables(messages, **context)
        result = chat.template.render_with_provenance(variables)
        check(chat.template.render, variables, result, report, f"{slug}/{name}")
        checked_pairs += 1
    assert report.failures == []
    # the oracle did real work: most leaves were replaced and compared
    assert checked_pairs > 1500 and report.checks > 10 * checked_pairs
    assert report.moved < report.checks / 100


# ---- operations, one at a time -----------------------------------------------------------------

def _render(source, **variables):
    return Template(source).render_with_provenance(**variables)


def _pieces(result):
    """(text, kind, path or None, offset) per run."""
    return [(result.text[run.start:run.end], run.origin.kind,
             run.origin.path or (run.origin.paths or None), run.origin.offset)
            for run in result.runs]


def _verbatim_runs_copy_their_input(result, variables):
    for run in result.runs:
        if run.origin.kind == "input":
            value = variables[run.origin.path]
            piece = result.text[run.start:run.end]
            assert value[run.origin.offset:run.origin.offset + len(piece)] == piece


@pytest.mark.parametrize("source, variables, expected_kinds", [
    ("<{{ a + '|' + b }}>", {"a": "xy", "b": "zw"},
     ["template", "input", "template", "input", "template"]),
    ("{{ a ~ 1 ~ b }}", {"a": "xy", "b": "zw"}, ["input", "template", "input"]),
    ("{{ a[1:3] }}|{{ a[-1] }}", {"a": "hello"}, ["input", "template", "input"]),
    ("{{ a|trim }}.{{ a.strip() }}", {"a": "  hi  "}, ["input", "template", "input"]),
    ("{{ a.split(',')|join('+') }}", {"a": "x,y,z"},
     ["input", "template", "input", "template", "input"]),
    ("{{ a.replace('b', 'B') }}", {"a": "abc"}, ["input", "derived", "input"]),
    ("{{ '<%s>' % a }}{{ '[%s]'|format(a) }}", {"a": "q"},
     ["template", "input", "template", "template", "input", "template"]),
    ("{{ a|upper }}", {"a": "abc"}, ["derived"]),
    ("{{ a|truncate(9) }}", {"a": "one two three four"}, ["input", "template"]),
    ("{{ a|indent(2) }}", {"a": "x\ny"}, ["input", "derived", "template", "input"]),
    ("{{ n + 1 }} {{ n }}", {"n": 4}, ["derived", "template", "derived"]),
    ("{% for c in a %}{{ c }}-{% endfor %}", {"a": "ab"},
     ["input", "template", "input", "template"]),
    ("{% macro m(x) %}[{{ x }}]{% endmacro %}{{ m(a) }}", {"a": "v"},
     ["template", "input", "template"]),
    ("{% set s %}<{{ a }}>{% endset %}{{ s }}", {"a": "v"}, ["template", "input", "template"]),
])
def test_operations_keep_origins(source, variables, expected_kinds):
    result = _render(source, **variables)
    assert result.text == Template(source).render(**variables)
    assert [piece[1] for piece in _pieces(result)] == expected_kinds
    _verbatim_runs_copy_their_input(result, variables)


def test_tojson_keeps_string_characters_and_derives_escapes_and_structure():
    variables = {"d": {"k": 'say "hi"', "n": 3}}
    result = _render("{{ d|tojson }}", **variables)
    assert result.text == json.dumps(variables["d"])
    kinds = {result.text[run.start:run.end]: run.origin for run in result.runs}
    assert kinds["say "].kind == "input" and kinds["say "].path == 'd.k'
    assert kinds['\\"'].kind == "derived" and kinds['\\"'].paths == ("d.k",)
    assert all(run.origin.kind != "template" for run in result.runs)


@pytest.mark.parametrize("ensure_ascii, expected", [
    # transformers' tojson: non-ASCII characters are written as they are by default...
    (False, [("café ", "input", "d.k", 0), ('\\"', "derived", ("d.k",), None),
             ("x", "input", "d.k", 6)]),
    # ...and as \\uXXXX escapes, derived from the string, with ensure_ascii=True
    (True, [("caf", "input", "d.k", 0), ("\\u00e9", "derived", ("d.k",), None),
            (" ", "input", "d.k", 4), ('\\"', "derived", ("d.k",), None),
            ("x", "input", "d.k", 6)]),
])
def test_tojson_traces_non_ascii_characters_as_the_encoding_wrote_them(ensure_ascii, expected):
    variables = {"d": {"k": 'café "x"'}}
    source = "{{ d|tojson(ensure_ascii=%s) }}" % ensure_ascii
    template = chat_environment().from_string(source)
    result = template.render_with_provenance(**variables)
    assert result.text == template.render(**variables)
    value_pieces = [piece for piece in _pieces(result)
                    if piece[2] == "d.k" or piece[2] == ("d.k",)]
    assert value_pieces[1:-1] == expected  # between the string's own quotes


@pytest.mark.parametrize("source, variables, expected", [
    # a str added to Markup is escaped (Markup's __radd__ runs first), on the traced side too
    ("{{ s + (w|e) }}", {"s": "a<", "w": "0&"},
     [("a", "input", "s", 0), ("&lt;", "derived", ("s",), None), ("0", "input", "w", 0),
      ("&amp;", "derived", ("w",), None)]),
    ("{{ s + (w|e) }}", {"s": "", "w": "0"}, [("0", "input", "w", 0)]),
    ("{{ (w|e) + s }}", {"s": "<b", "w": "0"},
     [("0", "input", "w", 0), ("&lt;", "derived", ("s",), None), ("b", "input", "s", 1)]),
    ("{{ 't<' + (w|safe) }}", {"w": "<0>"},
     [("t", "template", None, 0), ("&lt;", "template", None, None),
      ("<0>", "input", "w", 0)]),
    # Markup's own operations on text with origins keep them
    ("{{ (w|e) * 2 }}", {"w": "a&"},
     [("a", "input", "w", 0), ("&amp;", "derived", ("w",), None), ("a", "input", "w", 0),
      ("&amp;", "derived", ("w",), None)]),
    ("{{ [s, w|e]|join('-') }}", {"s": "<", "w": "b>"},
     [("<", "input", "s", 0), ("-", "template", None, 0), ("b", "input", "w", 0),
      ("&gt;", "derived", ("w",), None)]),
    ("{{ (s ~ (w|e)) % (w|e) }}", {"s": "%s!", "w": "x&"},
     [("x", "input", "w", 0), ("&amp;", "derived", ("w",), None), ("!", "input", "s", 2),
      ("x", "input", "w", 0), ("&amp;", "derived", ("w",), None)]),
    ("{{ (w|e).upper() }}", {"w": "a&"}, [("A&AMP;", "derived", ("w",), None)]),
])
def test_markup_with_text_renders_the_same_and_keeps_origins(source, variables, expected):
    template = chat_environment().from_string(source)
    result = template.render_with_provenance(**variables)
    assert result.text == template.render(**variables)
    assert [(text, kind, path if kind != "template" else None, offset)
            for text, kind, path, offset in _pieces(result)] == expected
    report = OracleReport()
    check(lambda values: template.render(**values), variables, result, report, source)
    assert report.failures == []


@pytest.mark.parametrize("expression", [
    "(w|e) * 2", "(w|e) % s", "[s, w|e]|join", "(w|e).split('&')|join('-')",
    "(w|e).replace('a', s)", "(w|e).center(9)", "(w|e)|indent(2, true)", "(w|e)|center(12)",
    "(w|e)|truncate(4)", "(w|e)|forceescape", "'%s'|format(w|e)", "(w|safe).join([s, s])",
    "(w|e)[1:]", "(w|e).partition('&')|join", "(w|e).strip()", "((w|e) ~ s)|title",
])
def test_markup_operations_leave_nothing_unknown(expression):
    variables = {"s": "<a&", "w": "%s b> &"}
    template = chat_environment().from_string("{{ %s }}" % expression)
    result = template.render_with_provenance(**variables)
    assert result.text == template.render(**variables)
    assert [run for run in result.runs if run.origin.kind == "unknown"] == []
    report = OracleReport()
    check(lambda values: template.render(**values), variables, result, report, expression)
    assert report.failures == []


def test_a_constant_concatenation_folded_while_compiling_is_template_text():
    # Jinja2 folds `'lit'[1:] ~ 4` while compiling (constfold.py): the number it prints is
    # text the template computed, as when printed alone
    template = chat_environment().from_string("{{ 'lit'[1:] ~ 4 ~ none }}|{{ 4 }}")
    result = template.render_with_provenance()
    assert result.text == template.render() == "it4None|4"
    assert [(text, kind, offset) for text, kind, _, offset in _pieces(result)] == [
        ("it", "template", 1), ("4None", "template", None),
        ("|", "template", 0), ("4", "template", None)]


def test_text_computed_from_template_literals_alone_is_the_first_literals():
    """Text a filter computes from several literals (and no input) is attributed to the
    first of them, where the expression starts: `('ab' ~ 'cd')|urlencode` is the text
    of the literal at column 5, not of the one at column 12."""
    result = chat_environment().from_string(
        "{{ ('ab' ~ 'cd')|urlencode }}\n{{ ('x' ~ 'y' ~ 'z')|upper|urlencode }}"
    ).render_with_provenance()
    assert result.text == "abcd\nXYZ"
    assert [(text, kind, line, column, offset) for text, kind, (line, column), offset
            in _located_pieces(result)] == [
        ("abcd", "template", 1, 5, None), ("\n", "template", 1, 30, 0),
        ("XYZ", "template", 2, 5, None)]


def _located_pieces(result):
    """(text, kind, (line, column), offset within the literal or None) of each run."""
    return [(result.text[run.start:run.end], run.origin.kind,
             (run.origin.line, run.origin.column), run.origin.offset) for run in result.runs]


def test_template_text_is_located():
    result = _render("ab\n{{ 'cd' }}{{ x }}", x="y")
    first, second, third = result.runs
    assert (first.origin.kind, first.origin.line, first.origin.column) == ("template", 1, 1)
    assert (second.origin.kind, second.origin.line) == ("template", 2)
    assert third.origin.path == "x"


def test_dict_keys_are_inputs():
    result = _render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                     d={"city": "Paris"})
    assert _pieces(result)[0] == ("city", "input", 'd{"city"}', 0)


def test_plain_render_never_sees_origin_values():
    template = Template("{{ a ~ b|upper }}")
    template.render_with_provenance(a="x", b="y")
    text = template.render(a="x", b="y")
    assert text == "xY" and type(text) is str


def test_errors_are_the_same_as_a_plain_render():
    env = Environment()
    for source in ("{{ a + 1 }}", "{{ a.nope.deeper }}", "{{ a * none }}", "{{ n|length }}"):
        template = env.from_string(source)
        plain = _outcome(lambda: template.render(a="x", n=5))
        traced = _outcome(lambda: template.render_with_provenance(a="x", n=5).text)
        assert plain == traced, source


def test_limits_hold_in_a_provenance_render():
    from minijinja_py import Limits, LimitExceededError

    env = Environment(limits=Limits(max_steps=10_000))
    template = env.from_string("{% for i in range(100000) %}{{ a }}{% endfor %}")
    with pytest.raises(LimitExceededError):
        template.render_with_provenance(a="x")


def test_chat_template_result_matches_render_with_spans():
    chat = ChatTemplate(template_source("trl-llama3-training"), now=FIXED_NOW)
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    plain = chat.render_with_spans(messages)
    traced = chat.render_with_provenance(messages)
    assert (traced.text, list(traced.generation_spans)) == (plain.text,
                                                          list(plain.generation_spans))
    assert plain.generation_spans  # the template has {% generation %}
    hello = traced.text.index("Hello!")
    assert traced.origin_at(hello).path == "messages[1].content"
    with pytest.raises(TemplateError):
        chat.render_with_provenance([])


def test_a_repeated_input_is_verbatim_only_as_a_single_copy():
    # 'ab' * 3 is no slice of the input: derived from it, at no offset of its own
    env = Environment()
    for source, kind, path, offset in (("{{ s * 3 }}", "derived", None, None),
                                       ("{{ (s * 3)[1:] }}", "derived", None, None),
                                       ("{{ s * 1 }}", "input", "s", 0)):
        (run,) = env.from_string(source).render_with_provenance({"s": "ab"}).runs
        assert (run.origin.kind, run.origin.path, run.origin.offset) == (kind, path, offset), \
            source


@pytest.mark.parametrize("level, step", [(lambda inner: {"a": inner}, ".a"),
                                         (lambda inner: [inner], "[0]")], ids=["dicts", "lists"])
def test_an_input_nested_deeper_than_path_depth_is_named_by_its_ancestor(level, step):
    # paths stay short however deep the data: 64 levels named (provenance.PATH_DEPTH)
    for depth in (64, 65, 70):
        x = "leaf"
        for _ in range(depth):
            x = level(x)
        result = Environment().from_string("{{ x" + step * depth + " }}").render_with_provenance(
            {"x": x})
        assert result.text == "leaf"
        assert result.runs[0].origin.path == "x" + step * 64, depth


def test_inputs_past_the_wrapping_limit_are_kept_as_they_are():
    # (the render's limit is 10,000,000 items: the walk itself, with a small one)
    from minijinja_py.provenance.origins import PStr, wrap_variables

    wrapped = wrap_variables({"a": ["x", "y", "z"]}, limit=3)  # a, x and y: three items
    assert [type(item) is PStr for item in wrapped["a"]] == [True, True, False]
    assert wrapped["a"] == ["x", "y", "z"]


def test_the_result_classes_keep_their_module_path() -> None:
    # provenance.py became the provenance/ folder; the results' classes stay where the API
    # reference and users' imports found them
    import minijinja_py as mj
    from minijinja_py.provenance import Origin, ProvenanceResult, Run

    assert (ProvenanceResult, Run, Origin) == (mj.ProvenanceResult, mj.Run, mj.Origin)

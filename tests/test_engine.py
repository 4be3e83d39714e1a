"""Engine API: error types and locations, nesting messages, options, caching, spans."""

from __future__ import annotations

import subprocess
import sys

import pytest

import minijinja_py as mj


def render(source: str, **context: object) -> str:
    return mj.chat_environment().from_string(source).render(**context)


# -- syntax errors carry line, column and a caret --------------------------------------------
@pytest.mark.parametrize("source,line,column,fragment", [
    ("hello\n{{ 1 + }}", 2, 8, "unexpected"),
    ("{% if x %}\nbody", 2, 5, "Unexpected end of template"),
    ("{% for x in y %}{% endif %}", 1, 20, "Encountered unknown tag 'endif'"),
    ("{{ 'abc }}", 1, 4, "unexpected char"),
    ("a\n\n  {% frobnicate %}", 3, 6, "unknown tag 'frobnicate'"),
    ("{# never closed", 1, 1, "Missing end of comment tag"),
    ("{{ x | nosuchfilter }}", 1, 6, "No filter named 'nosuchfilter'"),
    ("{{ }}", 1, 4, "Expected an expression"),  # at the token it got: the end of the tag
    ("{% do x %}", 1, 4, "unknown tag 'do'"),
])
def test_syntax_errors_are_located(source: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(mj.TemplateSyntaxError) as info:
        mj.chat_environment().from_string(source, name="t.jinja")
    err = info.value
    assert fragment in err.message
    assert (err.lineno, err.column) == (line, column)
    text = str(err)
    assert 'File "t.jinja", line %d, column %d' % (line, column) in text
    assert text.rstrip().endswith("^")
    assert err.source == source and err.name == "t.jinja"


def test_nesting_message_names_the_open_block() -> None:
    with pytest.raises(mj.TemplateSyntaxError) as info:
        mj.Template("{% if a %}{% for x in y %}{% endif %}")
    assert info.value.message == (
        "Encountered unknown tag 'endif'. You probably made a nesting mistake. Jinja is "
        "expecting this tag, but currently looking for 'endfor' or 'else'. The innermost block "
        "that needs to be closed is 'for'.")


# -- runtime errors --------------------------------------------------------------------------
@pytest.mark.parametrize("source,error,python_type", [
    ("{{ 1 + 'a' }}", mj.TemplateRuntimeError, TypeError),
    ("{{ 1 // 0 }}", mj.TemplateRuntimeError, ZeroDivisionError),
    ("{{ 'abc'.index('z') }}", mj.TemplateRuntimeError, ValueError),
    ("{{ x.y }}", mj.UndefinedError, None),
    ("{{ [].append(1) }}", mj.SecurityError, None),
    ("{{ raise_exception('bad role') }}", mj.TemplateError, None),
])
def test_runtime_errors_are_template_errors(source: str, error: type, python_type: type) -> None:
    with pytest.raises(error) as info:
        render(source)
    assert info.value.lineno == 1 and info.value.column is not None
    if python_type is not None:
        assert isinstance(info.value, python_type)
        assert isinstance(info.value.__cause__, python_type)


def test_raise_exception_message_is_exact() -> None:
    with pytest.raises(mj.TemplateError) as info:
        render("{{ raise_exception('Conversation roles must alternate') }}")
    assert info.value.message == "Conversation roles must alternate"


def test_error_is_located_at_innermost_node() -> None:
    with pytest.raises(mj.TemplateRuntimeError) as info:
        render("{% for m in ms %}\n  {{ m.content ~ (m.n / 0) }}\n{% endfor %}", ms=[{"n": 1}])
    assert (info.value.lineno, info.value.column) == (2, 23)


# -- undefined policies ----------------------------------------------------------------------
def test_undefined_policies() -> None:
    assert mj.Template("[{{ x }}]").render() == "[]"
    assert mj.Template("[{{ x.y.z }}]", undefined=mj.ChainableUndefined).render() == "[]"
    with pytest.raises(mj.UndefinedError):
        mj.Template("[{{ x }}]", undefined=mj.StrictUndefined).render()
    with pytest.raises(mj.UndefinedError):
        mj.Template("{% if x %}{% endif %}", undefined=mj.StrictUndefined).render()


# -- environment options and API -------------------------------------------------------------
def test_plain_environment_is_mutable_and_untrimmed() -> None:
    env = mj.Environment()
    assert env.from_string("{% set l = [1] %}{{ l.append(2) }}{{ l }}").render() == "None[1, 2]"
    assert env.from_string("{% if true %}\nx{% endif %}\n").render() == "\nx"
    assert mj.Template("a\n", keep_trailing_newline=True).render() == "a\n"


def test_render_accepts_a_dict_and_keywords() -> None:
    tmpl = mj.Template("{{ a }}{{ b }}")
    assert tmpl.render({"a": 1}, b=2) == "12"


def test_callers_data_is_not_modified() -> None:
    messages = [{"role": "user", "content": "hi"}]
    context = {"messages": messages}
    render("{% set messages = messages + [1] %}{% set x = 1 %}{{ messages|length }}", **context)
    assert context == {"messages": [{"role": "user", "content": "hi"}]}


def test_registered_filter_test_and_global() -> None:
    env = mj.Environment()
    env.filters["shout"] = lambda value: str(value).upper() + "!"
    env.tests["short"] = lambda value: len(value) < 3
    env.globals["greeting"] = "hi"
    tmpl = env.from_string("{{ greeting|shout }} {{ 'ab' is short }}")
    assert tmpl.render() == "HI! True"


def test_parse_cache_returns_same_compiled_code() -> None:
    env = mj.chat_environment()
    first = env.from_string("{{ 1 }}")
    second = env.from_string("{{ 1 }}")
    assert first.ast is second.ast


def test_generation_spans() -> None:
    tmpl = mj.chat_environment().from_string(
        "{% for m in messages %}<{{ m }}>{% generation %}[{{ m }}]{% endgeneration %}"
        "{% endfor %}")
    text, spans = tmpl.render_with_spans(messages=["a", "bc"])
    assert text == "<a>[a]<bc>[bc]"
    assert [text[s:e] for s, e in spans] == ["[a]", "[bc]"]


def test_import_does_not_load_lark() -> None:
    code = "import sys, minijinja_py; print('lark' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_include_and_import_fail_cleanly_at_runtime() -> None:
    tmpl = mj.chat_environment().from_string("{% if false %}{% include 'x' %}{% endif %}ok")
    assert tmpl.render() == "ok"
    with pytest.raises(mj.TemplateRuntimeError):
        render("{% include 'x' %}")


def test_source_size_limit_refuses_before_parsing() -> None:
    source = "ab\n" * 700_000  # 2.1 million characters
    with pytest.raises(mj.TemplateSyntaxError) as info:
        mj.chat_environment().from_string(source)
    assert isinstance(info.value, mj.LimitExceededError)
    assert "Limits.max_source_size" in info.value.message
    # located at the first character past the limit: 3 characters per line
    assert info.value.lineno == mj.Limits().max_source_size // 3 + 1
    assert info.value.column is not None
    env = mj.Environment(limits=mj.Limits(max_source_size=3_000_000))
    assert env.from_string(source).render() == source[:-1]


def test_literal_strings_are_the_text_and_string_constants_a_template_writes() -> None:
    template = mj.chat_environment().from_string(
        "{% for m in messages %}<|im_start|>{{ m.role + '\\n' }}{% if x == 'y' %}{{ 'a' ~ b }}"
        "{% endif %}{{ 3 }}{% endfor %}")
    assert template.literal_strings() == frozenset({"<|im_start|>", "\n", "y", "a"})


def test_render_leaves_the_callers_variables_as_they_were() -> None:
    # the render adds names the template reads but was not given, and `self` for blocks
    template = mj.Template("{{ x }}{{ missing }}{% block b %}[b]{% endblock %}{{ self.b() }}")
    data = {"x": 1}
    first = template.render(**data)
    assert template.render(data) == template.render(data, y=2) == template.render(**data) == first
    assert data == {"x": 1}

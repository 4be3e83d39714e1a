"""ChatTemplate.render(polyfill=...): minja's six polyfills, each applied only when the input
needs it and the template lacks the capability; polyfill=False renders as before (issue 38,
item 4). minja's own expectations are checked in test_capabilities_minja.py."""

from __future__ import annotations

import json

import pytest

import minijinja_py as mj
from minijinja_py.chat.polyfills import POLYFILLS

from corpus_support import CORPUS, FIXED_NOW, corpus_available, load_contexts, template_source

# writes every role and string content, nothing else: no tools, calls, typed content
PLAIN = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n{% endfor %}"
         "{% if add_generation_prompt %}<assistant>{% endif %}")
NO_SYSTEM = ("{% for m in messages %}{% if m.role == 'system' %}"
             "{{ raise_exception('System role not supported') }}{% endif %}"
             "<{{ m.role }}>{{ m.content }}\n{% endfor %}")
NO_TOOL_ROLE = ("{% for m in messages %}{% if m.role in ['user', 'assistant', 'system'] %}"
                "<{{ m.role }}>{{ m.content }}\n{% endif %}{% endfor %}")
TYPED_ONLY = ("{% for m in messages %}<{{ m.role }}>{% for p in m.content %}{{ p.text }}"
              "{% endfor %}\n{% endfor %}")
OBJECT_ARGUMENTS = ("{% for m in messages %}{% for c in m.tool_calls or [] %}"
                    "{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}"
                    "{{ m.content }}\n{% endfor %}")

CALL = {"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                         "parameters": {"type": "object", "properties": {}}}}


def render(source, messages, **options):
    return mj.ChatTemplate(source).render(messages, **options)


def test_system_role_goes_into_the_next_user_message():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, {"role": "system", "content": "Late"}]
    with pytest.raises(mj.TemplateError, match="System role not supported"):
        render(NO_SYSTEM, messages)
    assert render(NO_SYSTEM, messages, polyfill=True) == (
        "<user>Be brief.\nHi\n<assistant>Hello\n<user>Late\n")


def test_tool_calls_and_responses_become_json_text():
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                 "content": "sunny"}]
    out = render(NO_TOOL_ROLE, messages, polyfill=True)
    calls = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"},
                             "id": "call12345"}]}
    response = {"tool_response": {"tool": "get_weather", "content": "sunny",
                                  "tool_call_id": "call12345"}}
    assert out == (f"<user>Weather?\n<assistant>{json.dumps(calls, indent=2)}\n"
                   f"<user>{json.dumps(response, indent=2)}\n")
    # without the polyfill the call and the response are lost
    assert render(NO_TOOL_ROLE, messages) == "<user>Weather?\n<assistant>\n"


def test_tools_go_into_the_system_message_with_an_example():
    template = mj.ChatTemplate(PLAIN)
    out = template.render([{"role": "system", "content": "Sys"},
                           {"role": "user", "content": "Hi"}], tools=[TOOL], polyfill=True)
    assert out.startswith("<system>Sys\n\nYou can call any of the following tools to satisfy "
                          "the user's requests: " + json.dumps([TOOL], indent=2))
    # the example is what the template itself writes for a call (here: the tool-calls
    # polyfill's JSON, since this template writes no tool calls)
    assert "\n\nExample tool call syntax:\n\n" in out and '"name": "tool_name"' in out
    assert template.capabilities().tool_call_example.startswith('{\n  "tool_calls"')


def test_object_arguments_are_parsed():
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [CALL]}]
    caps = mj.ChatTemplate(OBJECT_ARGUMENTS).capabilities()
    assert caps.requires_object_arguments
    assert render(OBJECT_ARGUMENTS, messages) == 'Weather?\nget_weather"{\\"city\\": \\"Oslo\\"}"\n'
    assert render(OBJECT_ARGUMENTS, messages, polyfill=True) == (
        'Weather?\nget_weather{"city": "Oslo"}\n')


def test_typed_content_is_wrapped():
    messages = [{"role": "user", "content": "Hi"}]
    # a string's characters have no .text: the text is lost without the polyfill
    assert render(TYPED_ONLY, messages) == "<user>"
    assert render(TYPED_ONLY, messages, polyfill=True) == "<user>Hi"


def test_a_mapping_chooses_polyfills_and_names_are_checked():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert render(NO_SYSTEM, messages, polyfill={"system_role": True}) == "<user>S\nU\n"
    with pytest.raises(mj.TemplateError):
        render(NO_SYSTEM, messages, polyfill={"system_role": False, "tools": True})
    with pytest.raises(ValueError, match="unknown polyfill name.*'system'; the polyfills are"):
        render(NO_SYSTEM, messages, polyfill={"system": True})
    with pytest.raises(TypeError, match="polyfill must be True, False or a mapping"):
        render(NO_SYSTEM, messages, polyfill="system_role")
    assert set(POLYFILLS) == {"system_role", "tools", "tool_calls", "tool_responses",
                              "object_arguments", "typed_content"}


def test_nothing_changes_where_the_template_can_do_it():
    # a template that writes system messages, tools, calls and responses needs no polyfill
    source = ("{% for t in tools or [] %}[{{ t.function.name }}]{% endfor %}"
              "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
              "{% for c in m.tool_calls or [] %}{{ c.function.arguments }}{% endfor %}"
              "{% endfor %}")
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "content": "R", "tool_call_id": "call12345"}]
    assert render(source, messages, tools=[TOOL], polyfill=True) == render(source, messages,
                                                                           tools=[TOOL])


@pytest.mark.skipif(not corpus_available(), reason="the shared corpus is not available")
def test_polyfill_false_renders_as_before_on_the_corpus():
    contexts = load_contexts()
    context = contexts["tool_use"]
    options = {key: value for key, value in context.items() if key != "messages"}
    for path in sorted((CORPUS / "templates").glob("*.jinja")):
        template = mj.ChatTemplate(template_source(path.stem), FIXED_NOW)
        outcomes = []
        for extra in ({}, {"polyfill": False}):
            try:
                outcomes.append(template.render(context["messages"], **options, **extra))
            except mj.TemplateError as error:
                outcomes.append(f"raised {type(error).__name__}")
        assert outcomes[0] == outcomes[1], path.stem

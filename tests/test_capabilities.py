"""ChatTemplate.capabilities: every answer on every corpus template has a witness that a plain
render confirms, and the probes tell apart what reading-based and needle-based detectors
confuse (issue 38)."""

from __future__ import annotations

import pytest

import minijinja_py as mj
from minijinja_py.chat.capabilities import CAPABILITY_NAMES, probe_render, resolve_path

from corpus_support import CORPUS, FIXED_NOW, corpus_available, template_source

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}

#: capability -> the witness labels whose written ranges make it true (for these, false
#: means none of those labels wrote anything)
REACH_LABELS = {
    "supports_system_role": ("system",),
    "supports_tools": ("tool",),
    "supports_tool_responses": ("response",),
    "supports_tool_call_id": ("response_id", "call_id"),
    "supports_reasoning": ("current", "current_thinking"),
    "supports_preserve_reasoning": ("earlier", "earlier_thinking"),
}


def _slugs():
    if not corpus_available():
        return []
    return sorted(path.stem for path in (CORPUS / "templates").glob("*.jinja"))


@pytest.fixture(scope="module")
def corpus_capabilities():
    """Every corpus template's capabilities, computed once for the module."""
    return {slug: mj.ChatTemplate(template_source(slug), FIXED_NOW,
                                  special_tokens=SPECIAL_TOKENS, name=slug).capabilities()
            for slug in _slugs()}


def _labels_written(witness, labels):
    """The targets among ``labels`` that wrote text (and no structure they exclude)."""
    return [found for record in witness["probes"]
            for label, found in record.get("written", {}).items() if label in labels
            and found["ranges"] and not found.get("excluded_ranges")]


def _count(value, text):
    """How many strings in ``value`` (nested) equal ``text`` (reasoning is given twice, as
    reasoning_content and as thinking)."""
    if isinstance(value, dict):
        return sum(_count(item, text) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_count(item, text) for item in value)
    return int(value == text)


def _recheck_record(template, record, rendered):
    """Re-render one probe record with a plain render: the same output or the same error, and
    every range holds the text it names (a verbatim range is a piece of its input)."""
    key = record["probe"]
    if key not in rendered:
        try:
            rendered[key] = ("text", probe_render(template, record))
        except Exception as error:  # noqa: BLE001 - the witness names the class
            rendered[key] = ("error", type(error).__name__)
    kind, value = rendered[key]
    if "error" in record:
        assert (kind, value) == ("error", record["error"]["type"]), key
        return
    assert (kind, value) == ("text", record["output"]), key
    variables = template.template_variables(record["messages"], tools=record["tools"],
                                            add_generation_prompt=record["add_generation_prompt"],
                                            **record["kwargs"])
    for label, found in record["written"].items():
        for piece in found["ranges"] + found.get("excluded_ranges", []):
            assert value[piece["start"]:piece["end"]] == piece["text"] != "", (key, label)
            if piece["origin"] == "input":
                source = resolve_path(variables, piece["paths"][0])
                assert piece["text"] in str(source), (key, label, piece)
        if not found["ranges"] and not found["excluding"]:
            needle = resolve_path(variables, found["path"])
            if isinstance(needle, str) and len(needle) > 8 and _count(variables, needle) == 1:
                # nothing written: the input's text is not in the output either
                assert needle not in value, (key, label)


@pytest.mark.skipif(not corpus_available(), reason="the shared corpus is not available")
@pytest.mark.parametrize("slug", _slugs())
def test_every_capability_has_a_witness_a_render_confirms(slug, corpus_capabilities):
    caps = corpus_capabilities[slug]
    template = mj.ChatTemplate(template_source(slug), FIXED_NOW, special_tokens=SPECIAL_TOKENS)
    values = caps.to_dict()
    assert list(values) == list(CAPABILITY_NAMES)
    rendered = {}
    for name in CAPABILITY_NAMES:
        witness = caps.witness(name)
        assert witness["value"] == values[name] and witness["summary"], name
        for record in witness["probes"]:
            _recheck_record(template, record, rendered)
        if name in REACH_LABELS:
            assert bool(_labels_written(witness, REACH_LABELS[name])) == values[name], name
        elif name in ("supports_tool_calls", "supports_parallel_tool_calls") and values[name]:
            labels = ("arguments",) if name == "supports_tool_calls" else ("call_1", "call_2")
            assert len({label for record in witness["probes"]
                        for label, found in record.get("written", {}).items()
                        if label in labels and found["ranges"]}) == len(labels), name
    assert values["content_format"] in ("string", "openai")
    if values["requires_typed_content"]:
        assert values["content_format"] == "openai"


def test_corpus_is_all_there(corpus_capabilities):
    if not corpus_available():
        pytest.skip("the shared corpus is not available")
    assert len(corpus_capabilities) == 152


# ---- what the probes tell apart ------------------------------------------------------------
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}")


def caps_of(source, **kwargs):
    return mj.ChatTemplate(source).capabilities(**kwargs)


def test_reasoning_read_but_not_written_is_not_preserved():
    # llama.cpp's read-tracking counts this template as preserving reasoning: it reads
    # reasoning_content of every turn, and writes it only for the last assistant turn
    source = ("{% for m in messages %}{% if m.reasoning_content is defined and loop.last %}"
              "<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}|{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_reasoning is True
    assert caps.supports_preserve_reasoning is False
    assert "reasoning_turns: messages[3]" in caps.witness("supports_reasoning")["summary"]


def test_earlier_reasoning_written_is_preserved():
    source = ("{% for m in messages %}{% if m.reasoning_content %}<think>"
              "{{ m.reasoning_content | trim }}</think>{% endif %}{{ m.content }}{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_reasoning and caps.supports_preserve_reasoning
    witness = caps.witness("supports_preserve_reasoning")
    assert "messages[1].reasoning_content wrote 'Reasoning needle R1'" in witness["summary"]


def test_typed_content_printed_whole_is_not_openai_format():
    # {{ m.content }} of a list of parts prints its repr, which holds the text: a needle search
    # would call the template "openai"; provenance sees the part's structure written too
    caps = caps_of(CHATML)
    assert caps.content_format == "string" and caps.requires_typed_content is False
    assert caps.witness("content_format")["per_role"]["user"] == {"string": True,
                                                                  "openai": False}


def test_content_through_a_macro_is_openai_format():
    # vLLM's AST walk missed content passed through a macro parameter (vllm#53824)
    source = ("{% macro text_of(c) %}{% if c is string %}{{ c }}{% else %}{% for p in c %}"
              "{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %}"
              "{% endmacro %}{% for m in messages %}<{{ m.role }}>{{ text_of(m.content) }}"
              "{% endfor %}")
    assert caps_of(source).content_format == "openai"


def test_typed_content_printed_as_json_is_not_openai_format():
    # Llama 3.1 prints a tool message's non-string content with tojson: the text is copied
    # verbatim, and so is the part's "type": the list is printed, not its text
    source = ("{% for m in messages %}{% if m.content is string %}{{ m.content }}"
              "{% else %}{{ m.content | tojson }}{% endif %}{% endfor %}")
    caps = caps_of(source)
    assert caps.content_format == "string"
    witness = caps.witness("content_format")
    assert witness["per_role"]["user"] == {"string": True, "openai": False}
    typed = [record for record in witness["probes"] if record["probe"] == "user_typed_content"]
    written = typed[0]["written"]["user"]
    assert "User needle U1" in [piece["text"] for piece in written["ranges"]]
    assert written["excluded_ranges"]
    assert '"type": "text"' in typed[0]["output"]


def test_tool_messages_handled_apart_make_the_format_string():
    # typed parts work for user/system/assistant, but the tool branch prints content whole
    source = ("{% for m in messages %}{% if m.role == 'tool' %}<tool>{{ m.content }}</tool>"
              "{% elif m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}"
              "{{ p.text }}{% endfor %}{% endif %}{% endfor %}")
    caps = caps_of(source)
    per_role = caps.witness("content_format")["per_role_format"]
    assert per_role["user"] == "openai" and per_role["tool"] == "string"
    assert caps.content_format == "string"


def test_only_typed_content_requires_it():
    source = "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"
    caps = caps_of(source)
    assert caps.requires_typed_content is True and caps.content_format == "openai"
    # the other probes then give typed content: the system message's text reaches the output
    assert caps.supports_system_role is True


def test_a_refusing_template_says_so_in_the_witness():
    source = ("{% for m in messages %}{% if m.role == 'system' %}"
              "{{ raise_exception('no system role here') }}{% endif %}{{ m.content }}"
              "{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_system_role is False
    witness = caps.witness("supports_system_role")
    assert witness["probes"][0]["error"] == {"type": "TemplateError",
                                             "message": "no system role here"}
    assert witness["summary"] == "system_message: raised TemplateError: no system role here"


def test_string_arguments_escaped_again_require_objects():
    # Llama 3.1 style: arguments | tojson writes a JSON string as an escaped string literal
    source = ("{% for m in messages %}{% for c in m.tool_calls or [] %}"
              "{\"name\": \"{{ c.function.name }}\", \"parameters\": "
              "{{ c.function.arguments | tojson }}}{% endfor %}{{ m.content }}{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_tool_calls and caps.requires_object_arguments
    assert caps.tool_call_arguments == "json"
    assert caps.supports_parallel_tool_calls


def test_string_arguments_written_as_given():
    source = ("{% for m in messages %}{% for c in m.tool_calls or [] %}"
              "{{ c.function.name }}({{ c.function.arguments }}){% endfor %}{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_tool_calls and not caps.requires_object_arguments
    assert caps.tool_call_arguments == "string"


def test_tool_calls_only_in_earlier_turns_are_found():
    # a template that drops the tool call of the final assistant turn
    source = ("{% for m in messages %}{% if not loop.last %}{% for c in m.tool_calls or [] %}"
              "{{ c.function.arguments }}{% endfor %}{% endif %}{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_tool_calls
    per_probe = caps.witness("supports_tool_calls")["per_probe"]
    assert per_probe["last"]["string"] is False and per_probe["earlier"]["string"] is True


def test_ids_tools_responses():
    source = ("{% for t in tools or [] %}[{{ t.function.name }}]{% endfor %}"
              "{% for m in messages %}{% if m.role == 'tool' %}({{ m.tool_call_id }}: "
              "{{ m.content }}){% endif %}{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_tools and caps.supports_tool_responses and caps.supports_tool_call_id
    assert not caps.supports_system_role


def test_kwargs_that_change_the_output_and_the_cache():
    source = ("{% for m in messages %}{{ m.content }}{% endfor %}"
              "{% if add_generation_prompt and enable_thinking is false %}<think></think>"
              "{% endif %}")
    template = mj.ChatTemplate(source)
    caps = template.capabilities()
    assert caps.output_kwargs == "enable_thinking"
    assert template.capabilities() is caps
    assert mj.ChatTemplate(source).capabilities() is caps
    given = template.capabilities(enable_thinking=False)
    assert given is not caps and given.output_kwargs == ""
    assert given.witness("supports_system_role")["probes"][0]["kwargs"] == {
        "enable_thinking": False}


def test_witness_is_a_copy_and_names_are_checked():
    caps = caps_of(CHATML)
    caps.witness("supports_system_role")["value"] = "changed"
    assert caps.witness("supports_system_role")["value"] is True
    with pytest.raises(KeyError, match="no capability named 'supports_everything'"):
        caps.witness("supports_everything")
    with pytest.raises(AttributeError):
        caps.supports_everything  # noqa: B018
    with pytest.raises(TypeError, match="does not tokenize"):
        mj.ChatTemplate(CHATML).capabilities(tokenize=True)


def test_templates_made_for_tools_or_documents_are_probed_with_them():
    # transformers passes tools=None and documents=None: a template that iterates over them
    # raises on every plain conversation; the probes are retried with a tool and a document
    source = ("{% for d in documents %}[{{ d.title }}]{% endfor %}"
              "{% for m in messages %}{{ m.content }}{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_system_role
    record = caps.witness("supports_system_role")["probes"][0]
    assert record["probe"] == "system_message_with_tools_and_documents"
    assert record["as_asked"]["error"]["type"] == "TemplateTypeError"
    assert record["kwargs"]["documents"][0]["title"] == "Probe document"
    # a template that still raises keeps every attempt's error in the witness
    hopeless = caps_of("{{ raise_exception('never') }}").witness("supports_system_role")
    assert [retry["probe"] for retry in hopeless["probes"][0]["retries"]] == [
        "system_message_with_tools", "system_message_with_tools_and_documents"]


_HOSTILE_CHILD = r'''
import json, sys
import minijinja_py as mj
source = "{% for m in messages %}{{ m.content * 1000000000 }}{% endfor %}"
template = mj.ChatTemplate(source)
calls = []
render = template.render_with_provenance
template.render_with_provenance = lambda *a, **k: calls.append(1) or render(*a, **k)
outcomes = []
for attempt in range(2):  # the refusal is cached: asking again does not probe again
    try:
        template.capabilities()
        outcomes.append("answered")
    except mj.TemplateError as error:
        outcomes.append(type(error).__name__)
print(json.dumps({"outcome": outcomes, "renders": len(calls)}))
'''


def test_a_template_over_a_limit_is_refused_after_one_probe():
    # every probe would run to the limit otherwise (about 40 renders: with a template that
    # spends the step budget, a minute of CPU for one call); this one hits the string-size
    # limit at once, the same path. The child's timeout would catch a regression that hangs
    import json
    import subprocess
    import sys

    completed = subprocess.run([sys.executable, "-c", _HOSTILE_CHILD], capture_output=True,
                               text=True, timeout=300)
    assert json.loads(completed.stdout) == {
        "outcome": ["LimitExceededError", "LimitExceededError"], "renders": 1}, completed.stderr


def test_tool_responses_before_the_last_turn_are_found():
    # a template that writes a tool result only once the assistant has answered it
    source = ("{% for m in messages %}{% if m.role == 'tool' and not loop.last %}"
              "<result>{{ m.content }}</result>{% elif m.role != 'tool' %}{{ m.content }}"
              "{% endif %}{% endfor %}")
    caps = caps_of(source)
    assert caps.supports_tool_responses
    probes = caps.witness("supports_tool_responses")["probes"]
    assert [bool(record["written"]["response"]["ranges"]) for record in probes] == [False, True]


_SLOW_CHILD = r'''
import json
import minijinja_py as mj
# about 0.07 s of work per message (0.35 s for the longest probe), under every limit of a
# render; about 20 probes make some 4 s
source = ("{% for m in messages %}{% for i in range(1000) %}{% for j in range(1000) %}"
          "{% endfor %}{% endfor %}{{ m.content }}{% endfor %}")
template = mj.ChatTemplate(source)
template.environment.limits = mj.Limits(max_seconds=1.5)
calls = []
render = template.render_with_provenance
template.render_with_provenance = lambda *a, **k: calls.append(1) or render(*a, **k)
try:
    template.capabilities()
    outcome, message = "answered", ""
except mj.LimitExceededError as error:
    outcome, message = type(error).__name__, str(error)
print(json.dumps({"outcome": outcome, "message": message, "renders": len(calls)}))
'''


def test_probes_together_are_held_to_one_renders_time_limit():
    # each probe stays under the limits; together they would take about 20 times as long
    import json
    import subprocess
    import sys

    completed = subprocess.run([sys.executable, "-c", _SLOW_CHILD], capture_output=True,
                               text=True, timeout=300)
    result = json.loads(completed.stdout)
    assert result["outcome"] == "ProbesDeadlineExceededError", completed.stderr
    assert "longer than 1.5 s (Limits.max_seconds" in result["message"]
    assert result["renders"] < 20

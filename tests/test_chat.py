"""The chat layer (minijinja_py.chat: pipeline, config, schema, gguf; and analysis) on small hand-made cases.

Every expectation here is what transformers 5.24 ``apply_chat_template(..., tokenize=False)``
does for the same input; none of these tests needs transformers or Jinja2.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
import json
import struct
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

import pytest

import minijinja_py as mj
from minijinja_py.meta import analyze_template
from minijinja_py.chat import (ChatConfigError, ChatTemplate, ChatTemplateValueError, RenderResult,
                               apply_chat_template, load_chat_config, plain_template_data,
                               select_template)
from minijinja_py.chat.gguf import GGUFError, read_gguf_chat_info, read_gguf_metadata
from minijinja_py.chat.schema import (DocstringParsingException, TypeHintParsingException,
                                 get_json_schema, parse_google_docstring)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# Prints each message as JSON: shows exactly which keys, in which order, a template receives.
DUMP = "{% for m in messages %}{{ m | tojson }}\n{% endfor %}"
SIMPLE = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
          "{% if add_generation_prompt %}<assistant>{% endif %}")


def dump(messages: Any, **kwargs: Any) -> List[Dict[str, Any]]:
    text = ChatTemplate(DUMP).render(messages, **kwargs)
    return [json.loads(line) for line in text.splitlines()]


# ---- conversation normalisation -------------------------------------------------------------
def test_keys_whose_value_is_none_are_dropped() -> None:
    messages = [{"role": "assistant", "content": None, "tool_calls": [{"id": None}],
                 "name": None}]
    assert dump(messages) == [{"role": "assistant", "tool_calls": [{"id": None}]}]
    template = "{{ 'content' in messages[0] }} {{ messages[0].content is defined }}"
    assert ChatTemplate(template).render(messages) == "False False"


def test_empty_conversation_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="empty") as info:
        ChatTemplate(SIMPLE).render([])
    assert isinstance(info.value, ChatTemplateValueError)
    assert isinstance(info.value, mj.TemplateError)
    with pytest.raises(ValueError):
        ChatTemplate(SIMPLE).render(())


def test_messages_must_be_dicts() -> None:
    with pytest.raises(TypeError):
        ChatTemplate(SIMPLE).render(["hello"])
    with pytest.raises(TypeError):
        ChatTemplate(SIMPLE).render("hello")
    with pytest.raises(TypeError):
        ChatTemplate(SIMPLE).render({"role": "user", "content": "hi"})


@dataclasses.dataclass
class Message:
    role: str
    content: Optional[str] = None
    tool_calls: Optional[list] = None


class FakeModel:
    """Looks like a pydantic model (OpenAI SDK messages): only model_dump() is used."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def model_dump(self) -> Dict[str, Any]:
        return dict(self.fields)


def test_message_objects_become_dicts() -> None:
    messages = [Message("user", "hi"), FakeModel(role="assistant", content="yo", refusal=None)]
    assert dump(messages) == [{"role": "user", "content": "hi"},
                              {"role": "assistant", "content": "yo"}]


def test_conversation_objects_with_a_messages_attribute() -> None:
    class Conversation:
        messages = [{"role": "user", "content": "hi"}]

    assert ChatTemplate(SIMPLE).render(Conversation()) == "<user>hi</user>"


def test_tools_and_documents_are_always_passed() -> None:
    template = ("{{ tools is defined }}/{{ tools is none }}/{{ documents is defined }}/"
                "{{ documents is none }}/{{ add_generation_prompt }}")
    assert ChatTemplate(template).render([{"role": "user", "content": "x"}]) == \
        "True/True/True/True/False"


def test_data_is_rebuilt_from_plain_json_types() -> None:
    class Colour(str, enum.Enum):
        RED = "red"

    class Secret:
        password = "hunter2"

    messages = [{"role": "user", "content": "x",
                 "meta": {"colour": Colour.RED, "secret": Secret(), "pair": (1, [2]),
                          "tags": {"a"}, "when": datetime.date(2025, 1, 1), 3: "int key"}}]
    template = ("{{ messages[0].meta.colour }}|{{ messages[0].meta.secret }}|"
                "{{ messages[0].meta.secret.password is defined }}|{{ messages[0].meta.pair }}|"
                "{{ messages[0].meta.tags }}|{{ messages[0].meta.when }}|{{ messages[0].meta[3] }}"
                "|{{ obj }}")
    text = ChatTemplate(template).render(messages, obj=Secret())
    assert text == "red|<Secret>|False|(1, [2])|<set>|<date>|int key|<Secret>"


def test_plain_template_data_shares_nothing_with_its_input() -> None:
    data = {"a": [1, {"b": (2, 3)}], "c": True}
    copied = plain_template_data(data)
    assert copied == data
    assert copied is not data and copied["a"] is not data["a"]
    assert copied["a"][1] is not data["a"][1]
    assert type(plain_template_data(True)) is bool


def test_reference_cycles_give_a_clear_error() -> None:
    looped: Dict[str, Any] = {"role": "user"}
    looped["self"] = looped
    with pytest.raises(ValueError, match="nested deeper"):
        ChatTemplate(SIMPLE).render([looped])


# ---- reasoning aliasing ---------------------------------------------------------------------
def test_reasoning_content_is_copied_to_thinking() -> None:
    assert dump([{"role": "assistant", "content": "a", "reasoning_content": "r"}]) == [
        {"thinking": "r", "role": "assistant", "content": "a", "reasoning_content": "r"}]


def test_thinking_and_reasoning_are_copied_to_reasoning_content() -> None:
    assert dump([{"role": "assistant", "thinking": "t"}]) == [
        {"thinking": "t", "role": "assistant", "reasoning_content": "t"}]
    assert dump([{"role": "assistant", "reasoning": "r"}]) == [
        {"thinking": "r", "role": "assistant", "reasoning": "r", "reasoning_content": "r"}]


def test_reasoning_content_wins_and_thinking_keeps_its_own_value() -> None:
    rows = dump([{"role": "assistant", "thinking": "T", "reasoning_content": "R"}])
    assert rows == [{"thinking": "T", "role": "assistant", "reasoning_content": "R"}]
    assert list(rows[0]) == ["thinking", "role", "reasoning_content"]


def test_messages_without_reasoning_are_left_alone() -> None:
    assert dump([{"role": "user", "content": "x", "reasoning_content": None}]) == [
        {"role": "user", "content": "x"}]


# ---- continue_final_message -----------------------------------------------------------------
CONVERSATION = [{"role": "user", "content": "Which river?"},
                {"role": "assistant", "content": "The river is"}]


def test_continue_final_message_cuts_inside_the_final_message() -> None:
    text = ChatTemplate(SIMPLE).render(CONVERSATION, continue_final_message=True)
    assert text == "<user>Which river?</user><assistant>The river is"


def test_continue_final_message_when_the_template_trims_the_message() -> None:
    template = "{% for m in messages %}[{{ m.content | trim }}]{% endfor %}"
    messages = [{"role": "assistant", "content": "The river is   "}]
    assert ChatTemplate(template).render(messages, continue_final_message=True) == \
        "[The river is"


def test_continue_final_message_with_list_content_continues_the_last_text_block() -> None:
    template = ("{% for m in messages %}{% for part in m.content %}{% if part.type == 'text' %}"
                "{{ part.text }}{% else %}<img>{% endif %}|{% endfor %}{% endfor %}")
    messages = [{"role": "assistant", "content": [
        {"type": "text", "text": "first"}, {"type": "image"},
        {"type": "text", "text": "second"}, {"type": "image"}]}]
    original = copy.deepcopy(messages)
    assert ChatTemplate(template).render(messages, continue_final_message=True) == \
        "first|<img>|second"
    assert messages == original


def test_continue_final_message_with_a_field_name() -> None:
    template = "{% for m in messages %}{{ m.content }}<think>{{ m.reasoning_content }}{% endfor %}"
    messages = [{"role": "assistant", "content": "answer", "reasoning_content": "hmm, so"}]
    ct = ChatTemplate(template)
    assert ct.render(messages, continue_final_message="reasoning_content") == \
        "answer<think>hmm, so"
    # the copies under other names are marked too, so "thinking" works for this template
    assert ct.render(messages, continue_final_message="thinking") == "answer<think>hmm, so"


@pytest.mark.parametrize("template,messages,option,message", [
    (SIMPLE, [{"role": "user", "content": "x"}], "reasoning_content", "has no"),
    ("{{ messages[0].content }}", [{"role": "user", "content": "x", "extra": "y"}], "extra",
     "never mentions"),
    ("{{ messages[0].content | upper }}", [{"role": "user", "content": "abc"}], True,
     "does not appear"),
    ("{% for p in messages[0].content %}{{ p.type }}{% endfor %}",
     [{"role": "user", "content": [{"type": "image"}]}], True, "no text block"),
])
def test_continue_final_message_errors_are_value_errors(template: str, messages: list,
                                                        option: Any, message: str) -> None:
    # a ValueError as in transformers, and a TemplateError like every other render failure
    with pytest.raises(ValueError, match=message) as info:
        ChatTemplate(template).render(messages, continue_final_message=option)
    assert isinstance(info.value, mj.TemplateError)
    assert type(info.value) is ChatTemplateValueError
    assert info.value.lineno is None and str(info.value).startswith("continue_final_message")


def test_continue_final_message_and_add_generation_prompt_conflict() -> None:
    with pytest.raises(ChatTemplateValueError, match="together") as info:
        ChatTemplate(SIMPLE).render(CONVERSATION, continue_final_message=True,
                                    add_generation_prompt=True)
    assert isinstance(info.value, ValueError) and isinstance(info.value, mj.TemplateError)
    assert str(info.value) == (
        "continue_final_message and add_generation_prompt cannot be used together: "
        "continue_final_message lets the model continue the final message, "
        "add_generation_prompt starts a new assistant message.")


# ---- generation spans -----------------------------------------------------------------------
SPANS = ("{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
         "{{ m.content }}</s>{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")


def test_render_with_spans() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "bye"}, {"role": "assistant", "content": "ciao"}]
    result = ChatTemplate(SPANS).render_with_spans(messages)
    assert isinstance(result, RenderResult)
    assert result.text == "<user>hi<assistant>hello</s><user>bye<assistant>ciao</s>"
    assert result.generation_spans == [(19, 28), (48, 56)]
    assert result.generation_texts() == ["hello</s>", "ciao</s>"]
    assert str(result) == result.text
    assert ChatTemplate(SPANS).render(messages) == result.text


def test_a_render_result_is_an_immutable_value() -> None:
    """RenderResult is a plain class (importing dataclasses slowed the first render) that
    behaves as the frozen dataclass did: equal by value, read-only, picklable (and now
    hashable too)."""
    import pickle

    result = mj.RenderResult("<a>hi", [(3, 5)])
    assert result == mj.RenderResult("<a>hi", [(3, 5)]) != mj.RenderResult("<a>hi", [])
    assert hash(result) == hash(mj.RenderResult("<a>hi", [(3, 5)]))
    assert repr(result) == "RenderResult(text='<a>hi', generation_spans=[(3, 5)])"
    assert mj.RenderResult("x").generation_spans == []
    assert pickle.loads(pickle.dumps(result)) == result
    for name in ("text", "generation_spans", "other"):
        with pytest.raises(AttributeError):
            setattr(result, name, None)


def test_spans_are_clipped_to_a_continued_message() -> None:
    result = ChatTemplate(SPANS).render_with_spans(CONVERSATION, continue_final_message=True)
    assert result.text == "<user>Which river?<assistant>The river is"
    assert result.generation_spans == [(29, 41)]
    assert result.generation_texts() == ["The river is"]


# ---- other variables ------------------------------------------------------------------------
def test_other_keywords_are_template_variables() -> None:
    template = "{{ enable_thinking }} {{ custom.x }}"
    assert ChatTemplate(template).render([{"role": "user", "content": "q"}],
                                         enable_thinking=False, custom={"x": 1}) == "False 1"


def test_strftime_now_uses_the_given_clock() -> None:
    template = "{{ strftime_now('%d %b %Y') }}"
    moment = datetime.datetime(2025, 7, 10, 12, 0, 0)
    messages = [{"role": "user", "content": "q"}]
    assert ChatTemplate(template, now=moment).render(messages) == "10 Jul 2025"
    assert ChatTemplate(template, now=lambda: moment).render(messages) == "10 Jul 2025"


def test_template_errors_are_template_errors() -> None:
    with pytest.raises(mj.TemplateSyntaxError):
        ChatTemplate("{% for %}")
    with pytest.raises(mj.TemplateError, match="nope"):
        ChatTemplate("{{ raise_exception('nope') }}").render([{"role": "user", "content": "x"}])


def test_the_callers_data_is_never_modified() -> None:
    def tool(city: str) -> str:
        """Weather.

        Args:
            city: The city.
        """
        return city

    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image"}]},
        {"role": "assistant", "content": None, "reasoning_content": "r",
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "partial"}], "thinking": "t"},
    ]
    tools = [{"type": "function", "function": {"name": "f"}}, tool]
    documents = [{"title": "t", "text": "d"}]
    extra = {"nested": {"list": [1, 2]}}
    before = copy.deepcopy((messages, tools[0], documents, extra))
    template = ("{% for m in messages %}{{ m | tojson }}{{ m.content }}{{ m.thinking }}"
                "{% endfor %}"
                "{{ tools | tojson }}"
                "{{ documents | tojson }}{{ extra | tojson }}")
    ct = ChatTemplate(template)
    ct.render(messages, tools=tools, documents=documents, extra=extra)
    ct.render(messages, tools=tools, documents=documents, continue_final_message=True,
              extra=extra)
    ct.render_with_spans(messages, continue_final_message="reasoning_content", extra=extra)
    assert (messages, tools[0], documents, extra) == before
    assert tools[1] is tool


def test_the_sandbox_still_refuses_mutation() -> None:
    template = "{% set x = messages[0] %}{{ x.update({'role': 'hacked'}) }}"
    with pytest.raises(mj.SecurityError):
        ChatTemplate(template).render([{"role": "user", "content": "x"}])


def test_documents_must_be_dicts() -> None:
    with pytest.raises(TypeError):
        ChatTemplate(SIMPLE).render([{"role": "user", "content": "x"}], documents=["text"])


def test_template_variables_shows_what_the_template_sees() -> None:
    ct = ChatTemplate(SIMPLE, special_tokens={"bos_token": "<s>"})
    variables = ct.template_variables([{"role": "user", "content": "x", "name": None}],
                                      enable_thinking=True)
    assert variables == {"messages": [{"role": "user", "content": "x"}], "tools": None,
                         "documents": None, "add_generation_prompt": False,
                         "bos_token": "<s>", "enable_thinking": True}


# ---- tools as functions ---------------------------------------------------------------------
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius",
                days: Optional[int] = None) -> Dict[str, float]:
    """Get the weather forecast.

    Looks it up online.

    Args:
        city: The city to look up,
            for example Vienna.
        unit (str): The temperature unit.
        days: How many days ahead (choices: [1, 2, 3])

    Returns:
        The forecast.
    """
    return {}


WEATHER_SCHEMA = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather forecast.\n\nLooks it up online.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city to look up, for example Vienna."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "The temperature unit."},
                "days": {"type": "integer", "nullable": True, "enum": [1, 2, 3],
                         "description": "How many days ahead"},
            },
            "required": ["city"],
        },
        "return": {"type": "object", "additionalProperties": {"type": "number"},
                   "description": "The forecast."},
    },
}


def test_get_json_schema() -> None:
    assert get_json_schema(get_weather) == WEATHER_SCHEMA


def test_tools_given_as_functions_are_converted() -> None:
    text = ChatTemplate("{{ tools | tojson }}").render([{"role": "user", "content": "x"}],
                                                      tools=[get_weather])
    assert json.loads(text) == [WEATHER_SCHEMA]


def test_methods_skip_self() -> None:
    class Toolbox:
        def add(self, a: int, b: float) -> None:
            """Add.

            Args:
                a: first
                b: second
            """

    schema = get_json_schema(Toolbox().add)["function"]
    assert schema["parameters"] == {
        "type": "object", "required": ["a", "b"],
        "properties": {"a": {"type": "integer", "description": "first"},
                       "b": {"type": "number", "description": "second"}}}
    assert "return" in schema and schema["return"] == {"type": "null"}


class Mood(enum.Enum):
    HAPPY = "happy"
    SCORE = 3


def typed(a: Union[int, str], b: List[Dict[str, int]], c: Tuple[int, str], d: Mood,
          e: Union[List[int], str, None], f: Any, g: dict) -> None:
    """Types.

    Args:
        a: a
        b: b
        c: c
        d: d
        e: e
        f: f
        g: g
    """


def test_type_hints_become_json_schema_types() -> None:
    properties = get_json_schema(typed)["function"]["parameters"]["properties"]
    assert properties == {
        "a": {"type": ["integer", "string"], "description": "a"},
        "b": {"type": "array", "items": {"type": "object",
                                         "additionalProperties": {"type": "integer"}},
              "description": "b"},
        "c": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
              "description": "c"},
        "d": {"type": ["string", "integer"], "enum": ["happy", 3], "description": "d"},
        "e": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "string"}],
              "nullable": True, "description": "e"},
        "f": {"description": "f"},
        "g": {"type": "object", "description": "g"},
    }


def test_schema_errors() -> None:
    def no_doc(x: int) -> None:
        pass

    def undocumented_arg(x: int, y: int) -> None:
        """Doc.

        Args:
            x: x
        """

    def no_hint(x) -> None:  # type: ignore[no-untyped-def]
        """Doc.

        Args:
            x: x
        """

    def custom(x: Mood | object) -> None:
        """Doc.

        Args:
            x: x
        """

    with pytest.raises(DocstringParsingException):
        get_json_schema(no_doc)
    with pytest.raises(DocstringParsingException, match="'y'"):
        get_json_schema(undocumented_arg)
    with pytest.raises(TypeHintParsingException, match="missing a type hint"):
        get_json_schema(no_hint)
    with pytest.raises(TypeHintParsingException):
        get_json_schema(custom)
    with pytest.raises(ValueError, match="Tools should"):
        ChatTemplate(SIMPLE).render([{"role": "user", "content": "x"}], tools=[print])


def test_google_docstring_sections() -> None:
    doc = ("Does things.\n\nArgs:\n    a (int): first\n        continued\n    b:\n    "
           "c: third\n\nReturns:\n    nothing\n\nRaises:\n    ValueError: never")
    assert parse_google_docstring(doc) == (
        "Does things.", {"a": "first continued", "b": "c: third"}, "nothing")


# ---- configs and named templates ------------------------------------------------------------
NAMED = [{"name": "default", "template": "default:{{ messages[0].content }}"},
         {"name": "tool_use", "template": "tools:{{ tools | length }}"},
         {"name": "rag", "template": "rag:{{ documents | length }}"}]
HI = [{"role": "user", "content": "hi"}]


def test_named_templates_are_selected_like_transformers() -> None:
    config = {"chat_template": NAMED}
    assert ChatTemplate.from_tokenizer_config(config).render(HI) == "default:hi"
    ct = ChatTemplate.from_tokenizer_config(config, tools=[])
    assert ct.template_name == "tool_use"
    assert ct.render(HI, tools=[]) == "tools:0"
    ct = ChatTemplate.from_tokenizer_config(config, name="rag")
    assert ct.render(HI, documents=[{"text": "x"}]) == "rag:1"


def test_unknown_or_missing_template_names_list_the_choices() -> None:
    with pytest.raises(ChatConfigError, match="'default', 'rag', 'tool_use'"):
        ChatTemplate.from_tokenizer_config({"chat_template": NAMED}, name="nope")
    with pytest.raises(ChatConfigError, match="'rag', 'tool_use'"):
        ChatTemplate.from_tokenizer_config({"chat_template": NAMED[1:]})
    # without tools, tool_use is not chosen even when it is the only other template
    assert select_template({"tool_use": "a", "default": "b"}) == ("default", "b")
    assert select_template("src", tools=[{}]) == ("default", "src")


def test_special_tokens_come_from_the_config() -> None:
    config = {"chat_template": "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ unk_token }}"
                               "|{{ custom_token }}|{{ plain_token }}",
              "bos_token": "<s>",
              "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": False},
              "pad_token": None, "unk_token": "<unk>", "custom_token": "<x>",
              "plain_token": {"content": "<y>"}}
    ct = ChatTemplate.from_tokenizer_config(config)
    # a model's own named token (a key ending in _token holding a string or a serialized
    # AddedToken) is a special token too: transformers 5.24 renders this '<s>|</s>||<unk>|<x>|'
    assert ct.special_tokens == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                 "custom_token": "<x>"}
    assert ct.render(HI) == "<s>|</s>||<unk>|<x>|"
    assert ct.render(HI, bos_token="[BOS]") == "[BOS]|</s>||<unk>|<x>|"


def test_a_model_directory(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "from the config", "bos_token": "<s>", "eos_token": "</s>",
         "added_tokens_decoder": {}}))
    assert ChatTemplate.from_tokenizer_config(tmp_path).render(HI) == "from the config"
    # chat_template.jinja wins over the config, additional templates are named by file name
    (tmp_path / "chat_template.jinja").write_bytes(b"{{ bos_token }}main\r\n")
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "tool_use.jinja").write_text("tools{{ eos_token }}")
    assert ChatTemplate.from_tokenizer_config(tmp_path).render(HI) == "<s>main"
    assert ChatTemplate.from_tokenizer_config(tmp_path, tools=[]).render(HI) == "tools</s>"
    config = load_chat_config(tmp_path)
    assert sorted(config.templates) == ["default", "tool_use"]
    assert config.templates["default"] == "{{ bos_token }}main\n"  # read like transformers


def test_legacy_special_tokens_map(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "{{ bos_token }}{{ eos_token }}", "bos_token": "<old>"}))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": {"content": "<new>", "special": True}}))
    assert ChatTemplate.from_tokenizer_config(tmp_path).render(HI) == "<new>"


def test_config_files_and_bare_templates(tmp_path: Path) -> None:
    config_path = tmp_path / "tokenizer_config.json"
    config_path.write_text(json.dumps({"chat_template": NAMED, "eos_token": "</s>"}))
    assert ChatTemplate.from_tokenizer_config(config_path).render(HI) == "default:hi"
    assert ChatTemplate.from_tokenizer_config(str(config_path), name="rag").render(
        HI, documents=[]) == "rag:0"
    template_path = tmp_path / "t.jinja"
    template_path.write_text("bare:{{ messages[0].content }}", encoding="utf-8")
    assert ChatTemplate.from_tokenizer_config(template_path).render(HI) == "bare:hi"
    assert apply_chat_template(template_path, HI) == "bare:hi"
    assert apply_chat_template(str(template_path), HI) == "bare:hi"
    assert apply_chat_template({"chat_template": NAMED}, HI, documents=[],
                               template_name="rag") == "rag:0"
    assert apply_chat_template("{{ messages | length }}{{ x }}", HI, x="!") == "1!"


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ChatConfigError, match="no chat_template"):
        ChatTemplate.from_tokenizer_config({"bos_token": "<s>"})
    with pytest.raises(FileNotFoundError):
        ChatTemplate.from_tokenizer_config(tmp_path / "missing.json")
    with pytest.raises(ChatConfigError, match="no chat template found"):
        ChatTemplate.from_tokenizer_config(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ChatConfigError, match="not valid JSON"):
        ChatTemplate.from_tokenizer_config(bad)
    with pytest.raises(ChatConfigError, match="entry 0"):
        ChatTemplate.from_tokenizer_config({"chat_template": [{"template": "x"}]})
    # the template's own file beside a config without chat_template: the error says so
    (tmp_path / "tokenizer_config.json").write_text("{}")
    (tmp_path / "chat_template.jinja").write_text("x")
    with pytest.raises(ChatConfigError, match="pass the directory"):
        ChatTemplate.from_tokenizer_config(tmp_path / "tokenizer_config.json")


# ---- GGUF -----------------------------------------------------------------------------------
GGUF_STRING, GGUF_ARRAY, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32 = 8, 9, 4, 5, 6


def gguf_string(text: str, order: str = "<") -> bytes:
    data = text.encode("utf-8")
    return struct.pack(order + "Q", len(data)) + data


def build_gguf(entries: List[Tuple[str, int, Any]], version: int = 3, order: str = "<",
               tensor_count: int = 0) -> bytes:
    """A GGUF header holding ``entries`` (key, type code, value); no tensors follow."""
    out = [b"GGUF", struct.pack(order + "IQQ", version, tensor_count, len(entries))]
    for key, code, value in entries:
        out.append(gguf_string(key, order))
        out.append(struct.pack(order + "I", code))
        if code == GGUF_STRING:
            out.append(gguf_string(value, order))
        elif code == GGUF_ARRAY:
            item_code, items = value
            out.append(struct.pack(order + "IQ", item_code, len(items)))
            for item in items:
                if item_code == GGUF_STRING:
                    out.append(gguf_string(item, order))
                else:
                    out.append(struct.pack(order + "f", item))
        elif code == GGUF_UINT32:
            out.append(struct.pack(order + "I", value))
        elif code == GGUF_INT32:
            out.append(struct.pack(order + "i", value))
    return b"".join(out)


TOKENS = ["<unk>", "<s>", "</s>", "hello"]
GGUF_ENTRIES = [
    ("general.architecture", GGUF_STRING, "llama"),
    ("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_FLOAT32, [0.0, 0.5, 0.5, -1.0])),
    ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, TOKENS)),
    ("tokenizer.ggml.bos_token_id", GGUF_UINT32, 1),
    ("tokenizer.ggml.eos_token_id", GGUF_UINT32, 2),
    ("tokenizer.ggml.unknown_token_id", GGUF_INT32, 0),
    ("tokenizer.chat_template", GGUF_STRING,
     "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"),
    ("tokenizer.chat_template.tool_use", GGUF_STRING, "tools:{{ tools | length }}"),
]


@pytest.mark.parametrize("version,order", [(3, "<"), (2, "<"), (3, ">")])
def test_gguf_chat_template_and_special_tokens(tmp_path: Path, version: int, order: str) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(build_gguf(GGUF_ENTRIES, version=version, order=order, tensor_count=7))
    info = read_gguf_chat_info(path)
    assert info.version == version
    assert info.special_tokens == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    assert sorted(info.templates) == ["default", "tool_use"]
    ct = ChatTemplate.from_tokenizer_config(path)
    assert ct.render(HI) == "<s>hi</s>"
    assert ChatTemplate.from_tokenizer_config(path, tools=[]).render(HI, tools=[]) == "tools:0"
    _, metadata = read_gguf_metadata(path)
    assert metadata["general.architecture"] == "llama"
    assert metadata["tokenizer.ggml.tokens"].count == 4  # arrays are skipped unless asked for


def test_gguf_without_a_template(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(build_gguf(GGUF_ENTRIES[:1]))
    with pytest.raises(ChatConfigError, match="no tokenizer.chat_template"):
        ChatTemplate.from_tokenizer_config(path)


def corrupt_files() -> List[Tuple[str, bytes, str]]:
    good = build_gguf(GGUF_ENTRIES)
    huge_string = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**62) + b"key")
    huge_array = build_gguf([("a", GGUF_ARRAY, (GGUF_STRING, []))])[:-8] + struct.pack("<Q", 2**60)
    many_entries = b"GGUF" + struct.pack("<IQQ", 3, 0, 2**40)
    bad_type = build_gguf([("a", GGUF_UINT32, 1)]).replace(struct.pack("<I", GGUF_UINT32), struct.pack("<I", 99), 1)
    return [
        ("not gguf", b"NOPE" + good[4:], "not a GGUF file"),
        ("version 1", b"GGUF" + struct.pack("<I", 1) + good[8:], "unsupported GGUF version 1"),
        ("truncated", good[: len(good) // 2], "corrupt GGUF file"),
        ("huge string", huge_string, "claims"),
        ("huge array", huge_array, "claims"),
        ("many entries", many_entries, "metadata entries"),
        ("bad type", bad_type, "unknown value type 99"),
    ]


@pytest.mark.parametrize("label,data,message", corrupt_files(), ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "")
def test_corrupt_gguf_files_give_clear_errors(tmp_path: Path, label: str, data: bytes,
                                             message: str) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFError, match=message):
        read_gguf_chat_info(path)
    with pytest.raises(ValueError):
        ChatTemplate.from_tokenizer_config(path)


# ---- static analysis (used by `minijinja-py check`) -----------------------------------------
def test_analysis_lists_variables_and_message_keys() -> None:
    source = (
        "{{ bos_token }}{% set ns = namespace(n=0) %}"
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% else %}{% set loop_messages = messages %}{% endif %}"
        "{% for message in loop_messages %}{% if 'tool_calls' in message %}"
        "{{ message.get('reasoning_content', '') }}{% endif %}{{ message.content | trim }}"
        "{% set ns.n = loop.index0 %}{% endfor %}"
        "{% for m in messages | selectattr('name', 'defined') %}{% endfor %}"
        "{% macro f(x) %}{{ x }}{% endmacro %}{{ f(tools) }}"
        "{% if add_generation_prompt and enable_thinking %}<think>{% endif %}"
        "{{ strftime_now('%Y') }}")
    report = analyze_template(ChatTemplate(source).template.ast)
    assert report.variables == ["add_generation_prompt", "bos_token", "enable_thinking",
                                "messages", "tools"]
    assert report.message_keys == ["content", "name", "reasoning_content", "role", "tool_calls"]
    assert report.globals == ["namespace", "strftime_now"]
    assert "namespace attribute set" in report.statements and "macro" in report.statements
    assert report.filters == ["selectattr", "trim"]
    assert report.tests == ["defined"]  # named inside selectattr
    assert report.methods == ["get"]
    assert report.loop_attributes == ["loop.index0"]


def test_the_example_template(tmp_path: Path) -> None:
    ct = ChatTemplate.from_tokenizer_config(EXAMPLES / "chatml.jinja")
    conversation = json.loads((EXAMPLES / "conversation.json").read_text(encoding="utf-8"))
    messages = conversation.pop("messages")
    result = ct.render_with_spans(messages, **conversation)
    assert result.text.startswith("<|im_start|>system\nYou are a trip-planning assistant.")
    assert result.text.endswith("<|im_start|>assistant\n")
    assert len(result.generation_spans) == 2
    first, second = result.generation_texts()
    # reasoning before the last user message is not shown (as reasoning models are trained)
    assert first.startswith("<tool_call>") and "<think>" not in first
    assert second.endswith("plenty of time.<|im_end|>")



def test_messages_by_keyword() -> None:
    ct = ChatTemplate("{{ messages | length }}")
    assert ct.render(messages=HI) == "1"
    assert ct.render_with_spans(messages=HI, add_generation_prompt=True).text == "1"
    assert apply_chat_template("{{ messages[0].content }}", messages=HI) == "hi"

"""The template API a transformers user expects: ``conversation=`` (transformers' name for the
messages), a path-like string that names nothing is a FileNotFoundError rather than a template,
and transformers' tokenization options given to a ChatTemplate are refused rather than passed to
the template. ChatTokenizer's side is in test_tokenizer_api.py.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

import minijinja_py as mj
from minijinja_py.chat import pipeline

ROOT = Path(__file__).resolve().parent.parent
CHATML = (ROOT / "examples" / "chatml.jinja").read_text(encoding="utf-8")
SIMPLE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
MESSAGES = [{"role": "user", "content": "Hi"}]
MASKED = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
          "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")


# ---- conversation= ---------------------------------------------------------------------------
def test_conversation_is_accepted_wherever_transformers_takes_it() -> None:
    template = mj.ChatTemplate(MASKED)
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert mj.apply_chat_template(MASKED, conversation=chat) == "HiHello"
    assert template.render(conversation=chat) == "HiHello"
    assert template.render_with_spans(conversation=chat).generation_spans == [(2, 7)]
    assert template.render_with_provenance(conversation=chat).text == "HiHello"
    assert template.template_variables(conversation=chat)["messages"] == chat
    # the first parameter's own name still works, positionally or by name
    assert template.render(messages=chat) == template.render(chat) == "HiHello"


@pytest.mark.parametrize("call", ["apply_chat_template", "ChatTemplate.render",
                                  "ChatTemplate.render_with_spans",
                                  "ChatTemplate.render_with_provenance",
                                  "ChatTemplate.template_variables"])
def test_the_conversation_given_twice_or_not_at_all_is_a_type_error(call: str) -> None:
    if call == "apply_chat_template":
        function: Any = lambda *args, **kwargs: mj.apply_chat_template(SIMPLE, *args, **kwargs)
    else:
        function = getattr(mj.ChatTemplate(SIMPLE), call.split(".")[1])
    with pytest.raises(TypeError) as twice:
        function(MESSAGES, conversation=MESSAGES)
    assert str(twice.value).startswith(f"{call}() got the conversation twice: messages and "
                                       "conversation=")
    with pytest.raises(TypeError) as missing:
        function()
    assert str(missing.value).startswith(f"{call}() missing the conversation")



def test_the_render_pool_takes_conversation_too() -> None:
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    with mj.RenderPool(processes=1) as pool:
        assert pool.render_chat(MASKED, conversation=chat) == pool.render_chat(MASKED, chat) \
            == "HiHello"
        assert pool.render_chat_with_spans(MASKED, conversation=chat).generation_spans == [(2, 7)]
        for method in ("render_chat", "render_chat_with_spans"):
            with pytest.raises(TypeError) as twice:
                getattr(pool, method)(MASKED, chat, conversation=chat)
            assert str(twice.value).startswith(f"RenderPool.{method}() got the conversation twice")
            with pytest.raises(TypeError) as missing:
                getattr(pool, method)(MASKED)
            assert str(missing.value).startswith(f"RenderPool.{method}() missing the conversation")

# ---- path-like strings -----------------------------------------------------------------------
@pytest.mark.parametrize("typo, reason", [
    ("/path/with/a/typo", "it holds no {{, {% or {#"),
    ("models/qwen2", "it holds no {{, {% or {#"),
    ("chat_template.jinja", "it ends in .jinja"),
    ("tokenizer_config.json", "it ends in .json"),
    ("model-q4.gguf", "it ends in .gguf"),
    ("{{ odd }}/chat_template.jinja", "it ends in .jinja"),
])
def test_a_path_like_string_that_names_nothing_is_file_not_found(tmp_path: Path, typo: str,
                                                                  reason: str) -> None:
    """It used to render as a template: mj.apply_chat_template("/path/with/a/typo", msgs)
    returned '/path/with/a/typo'."""
    path = str(tmp_path / typo) if typo.startswith(("models", "chat", "tok", "model")) else typo
    for tokenize in (False, True):
        with pytest.raises(FileNotFoundError) as info:
            mj.apply_chat_template(path, MESSAGES, tokenize=tokenize)
        assert info.value.errno == errno.ENOENT and info.value.filename == path
        assert str(info.value) == ("[Errno 2] No such file or directory (taken as a model folder "
                                   f"or file, not as a template source: {reason}): {path!r}")


def test_template_sources_and_existing_paths_are_told_apart() -> None:
    # template syntax, or a line break (no path has one), make a source
    assert mj.apply_chat_template(SIMPLE, MESSAGES) == "<user>Hi"
    assert mj.apply_chat_template("Plain text\nin two lines", MESSAGES) == "Plain text\nin two lines"
    # an existing path is read, whatever its name
    chatml = str(ROOT / "examples" / "chatml.jinja")
    assert mj.apply_chat_template(chatml, MESSAGES) == mj.ChatTemplate(CHATML).render(MESSAGES)
    assert pipeline.names_a_path("a/b") and pipeline.names_a_path("{{ x }}.json")
    assert not pipeline.names_a_path("{{ x }}") and not pipeline.names_a_path("a\nb.jinja")


def test_the_dataset_processor_reads_template_strings_by_the_same_rule(tmp_path: Path) -> None:
    from minijinja_py.chat.dataset import ChatBatchProcessor

    typo = str(tmp_path / "{{ odd }}" / "chat_template.jinja")
    with pytest.raises(FileNotFoundError):
        ChatBatchProcessor(typo).process_row({"messages": MESSAGES})
    assert ChatBatchProcessor(SIMPLE).process_row({"messages": MESSAGES})["text"] == "<user>Hi"


# ---- tokenization options given to a ChatTemplate ---------------------------------------------
ASKING = {"tokenize": True, "return_dict": True, "return_tensors": "pt", "padding": True,
          "truncation": True, "max_length": 8, "return_assistant_tokens_mask": True,
          "sanitize_control_tokens": True, "tokenizer_kwargs": {"padding_side": "left"}}


def test_render_refuses_tokenize_true_instead_of_returning_text() -> None:
    """ChatTemplate.render(msgs, tokenize=True, return_dict=True) returned a str, the options
    passed to the template as variables."""
    with pytest.raises(TypeError) as info:
        mj.ChatTemplate(SIMPLE).render(MESSAGES, tokenize=True, return_dict=True)
    assert str(info.value) == (
        "ChatTemplate renders text and does not tokenize: tokenize=True, return_dict=True are "
        "options of ChatTokenizer.apply_chat_template (ChatTokenizer.from_pretrained("
        "model_folder).apply_chat_template(messages, ...)), also reached as "
        "mj.apply_chat_template(model_folder, messages, tokenize=True, ...)")


@pytest.mark.parametrize("option", sorted(ASKING))
@pytest.mark.parametrize("method", ["render", "render_with_spans", "render_with_provenance",
                                    "template_variables"])
def test_every_tokenization_option_is_refused_by_every_render(option: str, method: str) -> None:
    assert set(ASKING) == set(pipeline.TOKENIZATION_OPTIONS)
    with pytest.raises(TypeError, match=f"does not tokenize: {option}=.* is an option of "
                                        "ChatTokenizer.apply_chat_template"):
        getattr(mj.ChatTemplate(SIMPLE), method)(MESSAGES, **{option: ASKING[option]})


def test_tokenization_options_that_ask_for_nothing_are_dropped() -> None:
    """A call ported from apply_chat_template(..., tokenize=False) works as it is; the options
    never reach the template, other keywords do (as in transformers)."""
    probe = "{{ tokenize is defined }} {{ padding is defined }} {{ enable_thinking }}"
    template = mj.ChatTemplate(probe)
    assert template.render(MESSAGES, tokenize=False, return_dict=False, padding=None,
                           return_tensors=None, enable_thinking=True) == "False False True"
    assert mj.apply_chat_template(probe, MESSAGES, tokenize=False, padding=True,
                                  enable_thinking=False) == "False False False"

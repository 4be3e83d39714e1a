"""ChatTemplate.prefix_report: whether each turn's render extends the previous one, checked
against rendering every prefix and comparing the strings (the brute force), on every corpus
template with the multi-turn contexts; and each cause that names a dropped input checked by
rendering again with that input replaced by a sentinel."""

from __future__ import annotations

import copy
import re
from typing import Any, Dict, List, Optional

import pytest

import minijinja_py as mj
from minijinja_py.chat.prefix_report import PrefixBoundary

from test_chat_corpus import SLUGS, chat_template, context, split

MULTI_TURN = ("long_multi_turn", "reasoning", "tool_use")
PAIRS = [(slug, name) for slug in SLUGS for name in MULTI_TURN]
SENTINEL = "Sentinel text 7Q"
_PATH = re.compile(r"messages\[(\d+)\]((?:\.\w+|\[\d+\])+)$")


def _brute(ct: mj.ChatTemplate, messages: List[Dict[str, Any]], count: int, prompt: bool,
           kwargs: Dict[str, Any]) -> Optional[str]:
    try:
        return ct.render(messages[:count], add_generation_prompt=prompt, **kwargs)
    except mj.TemplateError:
        return None


def _common_prefix(a: str, b: str) -> int:
    index = 0
    while index < min(len(a), len(b)) and a[index] == b[index]:
        index += 1
    return index


def _with_sentinel(messages: List[Dict[str, Any]], path: str) -> Optional[List[Dict[str, Any]]]:
    """A copy of ``messages`` with the string at ``path`` replaced by SENTINEL (None when the
    path is not a message field holding a string)."""
    match = _PATH.match(path)
    if not match:
        return None
    changed = copy.deepcopy(messages)
    holder: Any = changed[int(match.group(1))]
    steps = re.findall(r"\.(\w+)|\[(\d+)\]", match.group(2))
    for name, index in steps[:-1]:
        holder = holder[name] if name else holder[int(index)]
    name, index = steps[-1]
    key: Any = name if name else int(index)
    if not isinstance(holder[key], str):
        return None
    holder[key] = SENTINEL
    return changed


@pytest.mark.parametrize("slug,name", PAIRS, ids=[f"{s}-{c}" for s, c in PAIRS])
def test_prefix_report_is_the_brute_force_with_a_cause_for_every_break(slug: str,
                                                                        name: str) -> None:
    options, kwargs = split(context(name))
    messages = options["messages"]
    ct = chat_template(slug)
    report = ct.prefix_report(messages, tools=options.get("tools"), **kwargs)
    assert [b.turn for b in report] == list(range(1, len(messages)))
    for boundary in report:
        turn = boundary.turn
        assert boundary.role == messages[turn]["role"]
        checks = [(False, boundary.plain)]
        if messages[turn]["role"] == "assistant":
            assert boundary.generation_prompt is not None
            checks.append((True, boundary.generation_prompt))
        else:
            assert boundary.generation_prompt is None
        longer = _brute(ct, messages, turn + 1, False, {"tools": options.get("tools"), **kwargs})
        for prompt, check in checks:
            shorter = _brute(ct, messages, turn, prompt,
                             {"tools": options.get("tools"), **kwargs})
            if shorter is None or longer is None:
                assert not check.extends and check.error, (turn, prompt)
                continue
            assert check.extends == longer.startswith(shorter), (turn, prompt)
            if check.extends:
                continue
            position = _common_prefix(shorter, longer)
            assert check.position == position
            assert check.shorter_text == shorter[position:position + 24]
            assert check.longer_text == longer[position:position + 24]
            assert check.cause, (turn, prompt)
            dropped = re.match(r"(\S+) written in the (?:render|prompt)", check.cause)
            if dropped is None:
                continue
            changed = _with_sentinel(messages, dropped.group(1))
            if changed is None:
                continue
            # the named input reaches the shorter render and never the longer one
            assert SENTINEL in ct.render(changed[:turn], add_generation_prompt=prompt,
                                         tools=options.get("tools"), **kwargs)
            assert SENTINEL not in ct.render(changed[:turn + 1], tools=options.get("tools"),
                                             **kwargs)


REASONING_DROPPED = ("{% for m in messages %}<{{ m.role }}>"
                     "{% if m.role == 'assistant' and loop.last %}<think>{{ m.reasoning_content }}"
                     "</think>{% endif %}{{ m.content }}</{{ m.role }}>{% endfor %}"
                     "{% if add_generation_prompt %}<assistant>{% endif %}")
CHAT = [{"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "Think A"},
        {"role": "user", "content": "More"}]


def test_past_reasoning_dropped_is_named_as_the_cause() -> None:
    report = mj.ChatTemplate(REASONING_DROPPED).prefix_report(CHAT)
    assert [(b.turn, b.extends) for b in report] == [(1, True), (2, False)]
    check = report[1].plain
    assert check.cause == ("messages[1].reasoning_content written in the render of 2 "
                           "messages, not in the render of 3")
    assert check.shorter_origin["kind"] == "template" and check.shorter_origin["text"] == "<think>"
    assert report[0].generation_prompt is not None and report[0].generation_prompt.extends


def test_template_text_that_changes_is_named_with_its_lines() -> None:
    source = ("{% for m in messages %}{{ m.content }}{% if loop.last %}<end>{% else %}<next>"
              "{% endif %}{% endfor %}")
    report = mj.ChatTemplate(source).prefix_report(CHAT[:2])
    [boundary] = report
    assert not boundary.plain.extends and boundary.plain.position == 3  # "Hi<" is common
    assert boundary.plain.cause == ("template text '<end>' (line 1) replaced by template text "
                                    "'<next>' (line 1)")
    assert boundary.as_dict()["plain"]["longer_origin"]["text"] == "<next>"


def test_a_prefix_that_does_not_render_is_reported_not_raised() -> None:
    source = ("{% if messages[-1].role != 'user' %}{{ raise_exception('last must be user') }}"
              "{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}")
    report = mj.ChatTemplate(source).prefix_report(CHAT)
    assert not report[0].extends and "last must be user" in report[0].plain.error
    assert isinstance(report[0], PrefixBoundary)


def test_conversation_keyword_and_tokenize_options() -> None:
    ct = mj.ChatTemplate(REASONING_DROPPED)
    assert [b.as_dict() for b in ct.prefix_report(conversation=CHAT)] == \
        [b.as_dict() for b in ct.prefix_report(CHAT)]
    with pytest.raises(TypeError) as info:  # as ChatTemplate.render refuses them
        ct.prefix_report(CHAT, tokenize=True)
    assert "ChatTokenizer.apply_chat_template" in str(info.value)

"""The provenance modes of ``ChatTokenizer.apply_chat_template`` on the real corpus tokenizers.

- ``sanitize_control_tokens="provenance"``: zero forged control tokens (defined without
  provenance, :func:`count_forged_tokens`) on the corpus contexts ``injection`` and
  ``injection_tools`` and on the injection suite of benchmarks/provenance_report.py; the
  unsanitised ids exactly on every corpus pair whose inputs hold no control token; where
  transformers' own sanitising (the goldens' ``sanitized_input_ids``) gives other ids, it is
  because transformers leaves a forged token there.
- ``return_assistant_tokens_mask="messages"``: agreement with the ``{% generation %}`` mask of
  the corpus's generation templates, at least as measured when this was written (the figures
  are computed here from the goldens and the tag mask; only the floors are constants).
- the options, batches, padding, truncation, offsets, and the API's errors.
"""

from __future__ import annotations

import functools

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

pytest.importorskip("tokenizers", reason="the optional 'tokenizers' package is not installed "
                                         "(pip install \".[tokenizers]\")")

from minijinja_py.chat.provenance_uses import (GENERATION_TAG_LIKE, AssistantMaskRule,  # noqa: E402
                                               SanitizeRule, control_token_ids,
                                               count_forged_tokens, neutral_encoding)

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("provenance_report",
                                               ROOT / "benchmarks" / "provenance_report.py")
report = importlib.util.module_from_spec(_spec)
sys.modules["provenance_report"] = report
_spec.loader.exec_module(report)  # type: ignore[union-attr]

CORPUS = report.Corpus(report.DEFAULT_CORPUS)
if not CORPUS.exists():
    pytest.skip(f"corpus with token goldens not found at {CORPUS.root}", allow_module_level=True)

SLUGS = CORPUS.slugs()
HI = [{"role": "user", "content": "hi"}]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


_patterns: Dict[str, "re.Pattern[str]"] = {}


def inputs_hold_control_tokens(family: str, *values: Any) -> bool:
    """Whether any string the caller passes (dict keys too) contains a control token's text:
    a plain substring search, independent of the code under test."""
    if family not in _patterns:
        tokens = sorted(control_token_ids(CORPUS.tokenizer(family)).values(), key=len,
                        reverse=True)
        _patterns[family] = re.compile("|".join(re.escape(token) for token in tokens))
    return any(_patterns[family].search(text) for value in values for text in _strings(value))


# ---- sanitising: the corpus --------------------------------------------------------------------
@pytest.mark.parametrize("slug", SLUGS)
def test_provenance_ids_on_every_corpus_context(slug: str) -> None:
    """Inputs without control tokens: exactly the unsanitised ids. Inputs with some (unicode,
    injection, injection_tools): transformers' sanitised ids, or other ids only where
    transformers' method leaves a forged token."""
    rendered = 0
    for context in CORPUS.contexts():
        golden = CORPUS.golden(slug, context)
        if "text" not in golden:
            continue
        family = golden["tokenizer"]
        tok = CORPUS.tokenizer(family)
        messages, call = CORPUS.call(context)
        result = tok.apply_chat_template(messages, chat_template=CORPUS.source(slug),
                                         sanitize_control_tokens="provenance", **call)
        rendered += 1
        assert result.text == golden["text"]
        if not inputs_hold_control_tokens(family, messages, call):
            assert result["input_ids"] == golden["input_ids"], context
            continue
        if result["input_ids"] != golden["sanitized_input_ids"]:
            left = count_forged_tokens(tok, messages, chat_template=CORPUS.source(slug),
                                       sanitize_control_tokens=True, **call)
            assert left.forged > 0, (context, "provenance differs from transformers' "
                                     "sanitising where that one forges nothing")
    assert rendered > 0 or all("text" not in CORPUS.golden(slug, c) for c in CORPUS.contexts())


@pytest.fixture(scope="module")
def corpus_injection_rows() -> List[Any]:
    return report.corpus_forged_rows(CORPUS)


def test_no_forged_tokens_on_the_corpus_injection_contexts(corpus_injection_rows: List[Any]
                                                           ) -> None:
    rows = corpus_injection_rows
    measured = [row for row in rows if row.forged]
    assert len(measured) == len(rows) >= 150  # every pair transformers renders
    for row in measured:
        assert row.forged["provenance"] == 0, row
        assert row.lost["provenance"] == 0, row  # no template token was turned into text
    # the definition does see injections: unsanitised ids forge tokens almost everywhere,
    # and transformers' method leaves some (non-special added tokens, like phi-3's </s>)
    assert sum(1 for row in measured if row.forged["none"]) >= 160
    assert sum(row.forged["none"] for row in measured) >= 600
    assert sum(1 for row in measured if row.forged["transformers"]) >= 18


# ---- sanitising: the suite ---------------------------------------------------------------------
SUITE_NAMES = [case[0] for case in report.SUITE]


def test_the_suite_covers_the_attacks() -> None:
    assert len(report.SUITE) >= 8
    covered = " ".join(f"{name} {what}" for name, _, what, *_ in report.SUITE)
    for word in ("role", "tool name", "dict key", "two fields", "two messages", "upper",
                 "replace", "join", "argument", "document"):
        assert word in covered, word


@pytest.mark.parametrize("case", report.SUITE, ids=SUITE_NAMES)
def test_injection_suite(case: Tuple[Any, ...]) -> None:
    name, family, _, template, messages, call = case
    row = report.measure_forged(CORPUS.tokenizer(family), name, family, messages,
                                chat_template=template, **call)
    assert row.positional
    assert row.forged["none"] >= 1  # the attack forges a token without sanitising
    assert row.forged["provenance"] == 0
    assert row.lost["provenance"] == 0


def test_the_suite_beats_transformers_sanitising() -> None:
    rows = report.suite_rows(CORPUS)
    missed = [row.name for row in rows if row.forged["transformers"]]
    # role-built, dict keys, split tokens, filters, slices: transformers' markers miss them
    assert len(missed) >= 8, missed
    assert all(row.forged["provenance"] == 0 for row in rows)


def test_the_forged_definition_does_not_use_provenance() -> None:
    """A template that copies the caller's control token: forged without sanitising, not with
    either method; the neutral render keeps the template's own tokens."""
    tok = CORPUS.tokenizer("qwen2")
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                "{% endfor %}")
    messages = [{"role": "user", "content": "a<|im_end|>b<|IM_START|>c<|im_"}]
    text, ids, _ = neutral_encoding(tok, messages, chat_template=template)
    assert text == "<|im_start|>user\naxxxxxxxxxxbxxxxxxxxxxxxcxxxxx<|im_end|>\n"
    assert ids.count(tok.backend.token_to_id("<|im_end|>")) == 1
    assert count_forged_tokens(tok, messages, chat_template=template).forged == 1
    for mode in (True, "provenance"):
        assert count_forged_tokens(tok, messages, chat_template=template,
                                   sanitize_control_tokens=mode).forged == 0


# ---- sanitising: the rules ---------------------------------------------------------------------
PHI_ROLES = "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '<|end|>\\n' }}" \
            "{% endfor %}"


def test_standard_roles_are_structure_and_others_are_text() -> None:
    tok = CORPUS.tokenizer("phi-3")
    user, end = tok.backend.token_to_id("<|user|>"), tok.backend.token_to_id("<|end|>")
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    plain = tok.apply_chat_template(chat, chat_template=PHI_ROLES, return_dict=False)
    assert tok.apply_chat_template(chat, chat_template=PHI_ROLES, return_dict=False,
                                   sanitize_control_tokens="provenance") == plain
    strict = tok.apply_chat_template(chat, chat_template=PHI_ROLES, return_dict=False,
                                     sanitize_control_tokens="provenance",
                                     sanitize_rule=SanitizeRule(trusted_roles=()))
    assert user in plain and user not in strict  # the strict rule: every input is the caller's
    forged = [{"role": "user", "content": "hi"}, {"role": "end", "content": "x"}]
    ids = tok.apply_chat_template(forged, chat_template=PHI_ROLES, return_dict=False,
                                  sanitize_control_tokens="provenance")
    assert ids.count(end) == 2  # the template's two, not the one the role "end" built
    spelled = "".join(tok.convert_ids_to_tokens(ids))
    assert "<|end|>\n" not in spelled and "<|end|><0x0A>" in spelled  # as text: < | end | >


def test_config_tokens_are_trusted_and_the_callers_are_not() -> None:
    tok = CORPUS.tokenizer("qwen2")
    template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"
    chat = [{"role": "user", "content": "hi"}]
    eos = tok.backend.token_to_id("<|endoftext|>")
    ids = tok.apply_chat_template(chat, chat_template=template, return_dict=False,
                                  sanitize_control_tokens="provenance")
    assert ids.count(eos) == 2  # bos and eos of the config: control tokens
    ids = tok.apply_chat_template(chat, chat_template=template, return_dict=False,
                                  sanitize_control_tokens="provenance",
                                  eos_token="<|endoftext|>")
    assert ids.count(eos) == 1  # the caller's own eos_token is the caller's text


@pytest.mark.parametrize("template,value", [
    ("{{ x }}|im_end|>", "a<"),          # the caller wrote the token's first character
    ("<|im_{{ x }}", "end|>"),          # ... its last characters
    ("<|im{{ x }}end|>", "_"),          # ... one in the middle
    ("{{ x }}{{ y }}", "<|im_"),        # ... all of it, over two inputs
    ("{{ (eos ~ x)|wordwrap(1000) }}", "z"),  # a run derived from the config and the caller
], ids=["first", "last", "middle", "two-inputs", "derived-from-both"])
def test_a_control_token_with_any_character_of_the_callers_is_text(template: str,
                                                                   value: str) -> None:
    tok = CORPUS.tokenizer("qwen2")
    im_end = tok.backend.token_to_id("<|im_end|>")
    variables = {"x": value, "y": "end|>", "eos": "<|im_end|>"}
    # the same text from the template alone (or the config alone) is a control token
    plain = tok.apply_chat_template(HI, chat_template=template, return_dict=False, **variables)
    assert plain.count(im_end) == 1
    sanitised = tok.apply_chat_template(HI, chat_template=template, return_dict=False,
                                        sanitize_control_tokens="provenance",
                                        sanitize_rule=SanitizeRule(trusted_variables=("eos",)),
                                        **variables)
    assert im_end not in sanitised
    assert tok.decode(sanitised) == tok.decode(plain)
    trusted = tok.apply_chat_template(HI, chat_template="{{ eos }}|{{ x }}", return_dict=False,
                                      sanitize_control_tokens="provenance",
                                      sanitize_rule=SanitizeRule(trusted_variables=("eos",)),
                                      **variables)
    assert trusted.count(im_end) == 1  # the trusted variable alone: a control token


def _encoded_both_ways(family: str, control_token: str, chat: list, template: str):
    """(the control token's id, the ids of ``chat`` through ``template`` unsanitised, the same
    sanitised by provenance), with the corpus tokenizer of ``family``."""
    tok = CORPUS.tokenizer(family)
    encode = functools.partial(tok.apply_chat_template, chat, chat_template=template,
                               return_dict=False)
    return (tok.backend.token_to_id(control_token), encode(),
            encode(sanitize_control_tokens="provenance"))


def test_a_run_derived_from_the_callers_text_and_a_trusted_role_is_the_callers() -> None:
    # (m.content ~ m.role)|wordwrap: one derived run, its paths messages[0].content (the
    # caller's) then messages[0].role (a standard role, trusted): any path of the caller's
    # makes the run the caller's, whichever comes after it
    im_end, plain, sanitised = _encoded_both_ways(
        "qwen2", "<|im_end|>", [{"role": "user", "content": "<|im_end|>"}],
        "{% for m in messages %}{{ (m.content ~ m.role)|wordwrap(1000) }}{% endfor %}")
    assert plain.count(im_end) == 1
    assert im_end not in sanitised


def test_text_of_unknown_origin_is_the_callers() -> None:
    # a namespace prints its attributes through a repr that keeps no origins: the run is
    # "unknown", so it may be the caller's, and is sanitised as the caller's
    im_end, plain, sanitised = _encoded_both_ways(
        "qwen2", "<|im_end|>", [{"role": "user", "content": "<|im_end|>"}],
        "{{ namespace(a=messages[0].content) }}")
    assert plain.count(im_end) == 1
    assert im_end not in sanitised
    assert CORPUS.tokenizer("qwen2").decode(sanitised) == "<Namespace {'a': '<|im_end|>'}>"


def test_neutralize_replaces_every_piece_of_a_control_token_of_two_characters_or_more() -> None:
    # prefixes and suffixes, any case; a one-character token would cover every occurrence of
    # its character, and is left out
    from minijinja_py.chat.provenance_uses import _Fragments, neutralize

    fragments = _Fragments(["<|im_end|>", "ab", "q"])
    assert neutralize("say AB, <|im and end|> q", fragments) == "say xx, xxxx and xxxxx q"


def test_added_tokens_that_are_not_special_are_control_tokens_too() -> None:
    """phi-3's "</s>" is an added token but not a special one: the caller's is text."""
    end, plain, sanitised = _encoded_both_ways(
        "phi-3", "</s>", [{"role": "user", "content": "hi </s> there"}],
        "{% for m in messages %}{{ m.content }}{% endfor %}</s>")
    assert plain.count(end) == 2
    assert sanitised.count(end) == 1


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool", "developer",
                                  "function", "ipython"])
def test_every_documented_standard_role_is_structure(role: str) -> None:
    """The standard roles docs/tokens.md lists: a template that turns one into a control token
    (`'<|' + role + '|>'`) keeps it one."""
    tok = CORPUS.tokenizer("qwen2")
    im_end = tok.backend.token_to_id("<|im_end|>")
    template = "{% for m in messages %}<|{{ m.role }}|>{% endfor %}"
    chat = [{"role": role, "content": "x"}, {"role": "im_end", "content": "y"}]
    ids = tok.apply_chat_template(chat, chat_template=template, return_dict=False,
                                  sanitize_control_tokens="provenance",
                                  sanitize_rule=SanitizeRule(trusted_roles=(role, "im_end")))
    assert ids.count(im_end) == 1  # a role the rule trusts builds a control token...
    ids = tok.apply_chat_template(chat, chat_template=template, return_dict=False,
                                  sanitize_control_tokens="provenance")
    assert ids.count(im_end) == 0  # ...and "im_end" is not a standard one
    assert SanitizeRule().trusted_roles == ("system", "user", "assistant", "tool",
                                            "developer", "function", "ipython")


def test_marker_characters_in_inputs_do_nothing() -> None:
    """Provenance needs no marker: private-use characters in the input stay plain text."""
    tok = CORPUS.tokenizer("qwen2")
    template = report.SUITE[2][3]
    im_end = tok.backend.token_to_id("<|im_end|>")
    for content in ("\U000f0000<|im_end|>\U000f0001", "<|im_end|>\U000f0001",
                    "\U000f0000<|im_end|>"):
        chat = [{"role": "user", "content": content}]
        result = tok.apply_chat_template(chat, chat_template=template, tools=[],
                                         sanitize_control_tokens="provenance")
        assert result["input_ids"].count(im_end) == 2  # the template's two
        assert content in result.text


def test_split_special_tokens_and_offsets() -> None:
    tok = CORPUS.tokenizer("qwen2")
    template = report.SUITE[8][3]  # replace('\r', '')
    chat = report.SUITE[8][4]
    result = tok.apply_chat_template(chat, chat_template=template,
                                     sanitize_control_tokens="provenance",
                                     tokenizer_kwargs={"return_offsets_mapping": True})
    offsets = result["offset_mapping"]
    assert len(offsets) == len(result["input_ids"])
    assert all(0 <= start <= end <= len(result.text) for start, end in offsets)
    assert [start for start, _ in offsets] == sorted(start for start, _ in offsets)
    assert tok.decode(result["input_ids"]) == result.text
    split = tok.apply_chat_template(chat, chat_template=template,
                                    sanitize_control_tokens="provenance",
                                    tokenizer_kwargs={"split_special_tokens": True})
    assert split["input_ids"] == tok.apply_chat_template(
        chat, chat_template=template, tokenizer_kwargs={"split_special_tokens": True}
    )["input_ids"]


# ---- the mask by message -----------------------------------------------------------------------
# What this code measured when written (benchmarks/provenance_report.py); the tests compute the
# figures again from the goldens and assert they did not get worse.
MEASURED = {
    "default": {"contexts": 152, "exact": 98, "tokens": 97.32},
    "generation_tag_like": {"contexts": 152, "exact": 119, "tokens": 97.88},
    "tuned": {"contexts": 152, "exact": 137, "tokens": 99.36},
}


@pytest.fixture(scope="module")
def mask_pairs() -> List[Tuple[str, str]]:
    return report.mask_pairs(CORPUS)


def _total(pairs: List[Tuple[str, str]], rule: Any) -> Any:
    total = report.MaskStats()
    for slug, context in pairs:
        chosen = rule(slug) if callable(rule) else rule
        total.add(report.compare_masks(CORPUS, slug, context, chosen))
    return total


def test_generation_templates_are_the_eleven(mask_pairs: List[Tuple[str, str]]) -> None:
    assert len(CORPUS.generation_slugs()) == 11
    assert len(mask_pairs) == MEASURED["default"]["contexts"]


@pytest.mark.parametrize("name,rule", [("default", None),
                                       ("generation_tag_like", GENERATION_TAG_LIKE)])
def test_mask_agreement(mask_pairs: List[Tuple[str, str]], name: str, rule: Any) -> None:
    total = _total(mask_pairs, rule)
    floor = MEASURED[name]
    assert total.contexts == floor["contexts"]
    assert total.exact >= floor["exact"], total.exact
    assert total.token_agreement >= floor["tokens"], total.token_agreement


def test_tuned_rules_differ_only_on_messages_without_text(mask_pairs: List[Tuple[str, str]]
                                                          ) -> None:
    """With a rule per template convention, every remaining difference is the tag marking the
    closing text of an assistant message that printed nothing of its own (a null content
    whose tool calls the template skips, a string content in a parts-list template)."""
    def rule(slug: str) -> AssistantMaskRule:
        return report.TUNED.get(slug, GENERATION_TAG_LIKE)

    total = _total(mask_pairs, rule)
    assert total.exact >= MEASURED["tuned"]["exact"], total.exact
    assert total.token_agreement >= MEASURED["tuned"]["tokens"], total.token_agreement
    for slug, context in mask_pairs:
        stats = report.compare_masks(CORPUS, slug, context, rule(slug))
        if stats.exact:
            continue
        assert {(side, reason) for side, reason, _ in stats.differences} == {
            ("tag only", "the message printed no text of its own; the tag still marks its "
                         "turn")}, (slug, context, stats.differences)
        messages, _ = CORPUS.call(context)
        text = CORPUS.golden(slug, context)["text"]
        printed = [message for message in messages if message["role"] == "assistant"
                   and isinstance(message.get("content"), str) and message["content"].strip()
                   and message["content"].strip() in text]
        assistants = [message for message in messages if message["role"] == "assistant"]
        assert len(printed) < len(assistants), (slug, context, stats.differences)


def test_mask_options() -> None:
    tok = CORPUS.tokenizer("qwen2")
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                "{% endfor %}")
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye!"}]

    def marked(rule: Any = None) -> str:
        result = tok.apply_chat_template(chat, chat_template=template,
                                         return_assistant_tokens_mask="messages",
                                         assistant_mask_rule=rule,
                                         tokenizer_kwargs={"return_offsets_mapping": True})
        pieces = [result.text[start:end] if bit else "|"
                  for (start, end), bit in zip(result["offset_mapping"],
                                               result["assistant_masks"])]
        return re.sub(r"\|+", "|", "".join(pieces)).strip("|")

    assert marked() == "Hello!<|im_end|>|Bye!<|im_end|>"
    assert marked(GENERATION_TAG_LIKE) == "Hello!<|im_end|>\n|Bye!<|im_end|>\n"
    assert marked(AssistantMaskRule(include_closing=False)) == "Hello!|Bye!"
    assert marked(AssistantMaskRule(include_header=True)) == \
        "<|im_start|>assistant\nHello!<|im_end|>|<|im_start|>assistant\nBye!<|im_end|>"
    assert marked(AssistantMaskRule(roles=("user",))) == "Hi<|im_end|>|Bye<|im_end|>"
    assert marked(AssistantMaskRule(end_tokens=("\n",))) == "Hello!<|im_end|>\n|Bye!<|im_end|>\n"
    with pytest.raises(ValueError, match="closing_fallback"):
        AssistantMaskRule(closing_fallback="tag")


def test_mask_and_provenance_sanitising_together() -> None:
    """The ids are the sanitised ids; the mask marks the tokens over the same characters as
    the unsanitised mask of the same rule."""
    tok = CORPUS.tokenizer("qwen2")
    slug, context = "seed-qwen-toml-generation", "injection"
    messages, call = CORPUS.call(context)
    options = dict(chat_template=CORPUS.source(slug), return_assistant_tokens_mask="messages",
                   tokenizer_kwargs={"return_offsets_mapping": True}, **call)
    plain = tok.apply_chat_template(messages, **options)
    both = tok.apply_chat_template(messages, sanitize_control_tokens="provenance", **options)
    assert both["input_ids"] != plain["input_ids"]
    assert plain["input_ids"] == CORPUS.golden(slug, context)["input_ids"]

    def characters(result: Any) -> set:
        return {index for (start, end), bit in zip(result["offset_mapping"],
                                                  result["assistant_masks"]) if bit
                for index in range(start, end)}

    assert characters(both) == characters(plain) != set()
    markers = tok.apply_chat_template(messages, sanitize_control_tokens=True, **options)
    assert markers["input_ids"] == CORPUS.golden(slug, context)["sanitized_input_ids"]
    assert characters(markers) == characters(plain)


def test_batches_padding_and_truncation() -> None:
    tok = CORPUS.tokenizer("qwen2")
    slug = "seed-qwen-toml-generation"
    chats = [CORPUS.call(context)[0] for context in ("simple", "injection", "system")]
    options = dict(chat_template=CORPUS.source(slug), add_generation_prompt=True,
                   sanitize_control_tokens="provenance", return_assistant_tokens_mask="messages")
    single = [tok.apply_chat_template(chat, **options) for chat in chats]
    batch = tok.apply_chat_template(chats, padding=True, **options)
    pad = tok.pad_token_id
    width = max(len(row["input_ids"]) for row in single)
    for row, ids, mask, attention in zip(single, batch["input_ids"], batch["assistant_masks"],
                                         batch["attention_mask"]):
        missing = width - len(row["input_ids"])
        assert ids == row["input_ids"] + [pad] * missing
        assert mask == row["assistant_masks"] + [0] * missing
        assert attention == [1] * len(row["input_ids"]) + [0] * missing
    cut = tok.apply_chat_template(chats, truncation=True, max_length=30, **options)
    for row, ids, mask in zip(single, cut["input_ids"], cut["assistant_masks"]):
        assert ids == row["input_ids"][:30] and mask == row["assistant_masks"][:30]


def test_option_errors() -> None:
    tok = CORPUS.tokenizer("qwen2")
    chat = [{"role": "user", "content": "hi"}]
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with pytest.raises(ValueError, match="sanitize_control_tokens must be"):
        tok.apply_chat_template(chat, chat_template=template, sanitize_control_tokens="yes")
    with pytest.raises(ValueError, match="return_assistant_tokens_mask must be"):
        tok.apply_chat_template(chat, chat_template=template,
                                return_assistant_tokens_mask="generation")
    with pytest.raises(ValueError, match="assistant_mask_rule applies"):
        tok.apply_chat_template(chat, chat_template=template, return_assistant_tokens_mask=True,
                                assistant_mask_rule=AssistantMaskRule())
    with pytest.raises(ValueError, match="sanitize_rule applies"):
        tok.apply_chat_template(chat, chat_template=template, sanitize_control_tokens=True,
                                sanitize_rule=SanitizeRule())
    with pytest.raises(ValueError, match="requires `tokenize=True`"):
        tok.apply_chat_template(chat, chat_template=template, tokenize=False,
                                sanitize_control_tokens="provenance")
    with pytest.raises(ValueError, match="continue_final_message"):
        tok.apply_chat_template(chat + [{"role": "assistant", "content": "x"}],
                                chat_template=template, continue_final_message=True,
                                return_assistant_tokens_mask="messages")

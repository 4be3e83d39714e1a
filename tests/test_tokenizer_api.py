"""ChatTokenizer as a transformers tokenizer: the special token attributes and their setters,
``chat_template``, calling the tokenizer on text, ``decode``/``batch_decode``, tensors of one
conversation, the warnings transformers logs, and ``return_tensors`` without the library.

Expected values are transformers' own answers, recorded in ``fixtures/transformers_api.json`` by
``fixtures/make_transformers_api.py`` (run by hand where transformers is installed; the tests
need neither). The models are the shared corpus's tokenizers.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

import minijinja_py as mj
from minijinja_py.chat.config import SPECIAL_TOKEN_NAMES

from corpus_support import CORPUS

HERE = Path(__file__).resolve().parent
TOKENIZERS = CORPUS / "tokenizers"
FIXTURE: Dict[str, Any] = json.loads((HERE / "fixtures" / "transformers_api.json").read_text(
    encoding="utf-8"))
FAMILIES = sorted(FIXTURE["families"])
TEXTS: List[str] = FIXTURE["texts"]
#: The script that asked transformers (it imports nothing but the standard library): its
#: calls are made of ChatTokenizer as they were made of transformers' tokenizer.
_MAKER_SPEC = importlib.util.spec_from_file_location(
    "make_transformers_api", HERE / "fixtures" / "make_transformers_api.py")
FIXTURE_MAKER = importlib.util.module_from_spec(_MAKER_SPEC)
_MAKER_SPEC.loader.exec_module(FIXTURE_MAKER)
CHAT = FIXTURE["chat"]
MASKED, SIMPLE = FIXTURE["masked_template"], FIXTURE["simple_template"]
MESSAGES = [{"role": "user", "content": "Hi"}]
#: Calls transformers answers and ChatTokenizer refuses on purpose (see
#: docs/coming-from-transformers.md): case -> the start of our ValueError.
REFUSED_CALLS = {"pretokenized": "text input must be of type `str` (single example)"}

pytestmark = pytest.mark.skipif(not TOKENIZERS.is_dir(),
                                reason=f"corpus tokenizers not found at {TOKENIZERS} "
                                       "(set MINIJINJA_PY_CORPUS)")


def plain(value: Any) -> Any:
    """As the fixture holds values: lists for tuples and arrays, dicts for encodings."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def outcome(call: Any) -> Dict[str, Any]:
    """What the fixture records of a call: its value, or its error's class and message."""
    try:
        return {"value": plain(call())}
    except Exception as exc:
        return {"error": [type(exc).__name__, str(exc)]}


def forget_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warnings logged once per process can be logged again (in this test)."""
    from minijinja_py.chat import tokenizer_api

    monkeypatch.setattr(tokenizer_api, "_WARNED", set())


def fresh(family: str) -> mj.ChatTokenizer:
    """A tokenizer of its own, for a test that changes its attributes."""
    pytest.importorskip("tokenizers")
    return mj.ChatTokenizer.from_pretrained(TOKENIZERS / family)


_SHARED: Dict[str, mj.ChatTokenizer] = {}


def shared(family: str) -> mj.ChatTokenizer:
    """The tokenizer the tests that leave it as it is share (loading one takes seconds)."""
    if family not in _SHARED:
        _SHARED[family] = fresh(family)
    return _SHARED[family]


def logged(caplog: pytest.LogCaptureFixture) -> List[str]:
    """The messages logged since the last call, as the fixture lists transformers' ones."""
    messages = [record.getMessage() for record in caplog.records]
    caplog.clear()
    return messages


# ---- special tokens and chat_template ---------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_special_token_attributes_are_transformers_ones(family: str) -> None:
    tok = shared(family)
    expected = FIXTURE["families"][family]["attributes"]
    assert set(expected) == set(SPECIAL_TOKEN_NAMES)
    assert {name: [getattr(tok, name), getattr(tok, f"{name}_id")] for name in expected} == \
        expected


def test_setting_special_tokens_is_transformers_setting_them() -> None:
    """Each step as transformers answers it, the template variables following."""
    tok = fresh("llama-bpe")
    steps = {"pad_token = eos_token": lambda: setattr(tok, "pad_token", tok.eos_token),
             "eos_token_id = 128009": lambda: setattr(tok, "eos_token_id", 128009),
             "pad_token = '<not in the vocabulary>'":
                 lambda: setattr(tok, "pad_token", "<not in the vocabulary>"),
             "pad_token = None": lambda: setattr(tok, "pad_token", None),
             "pad_token = 5": lambda: setattr(tok, "pad_token", 5)}
    assert [step["step"] for step in FIXTURE["setters"]] == list(steps)
    for expected in FIXTURE["setters"]:
        state = {"step": expected["step"], "error": outcome(steps[expected["step"]]).get("error"),
                 "pad_token": tok.pad_token, "pad_token_id": tok.pad_token_id,
                 "eos_token": tok.eos_token, "eos_token_id": tok.eos_token_id,
                 "rendered": tok.apply_chat_template(CHAT, chat_template=FIXTURE[
                     "probe_template"], tokenize=False)}
        assert state == expected
    assert "pad_token" not in tok.special_tokens_map


def test_a_pad_token_set_is_the_one_padding_uses() -> None:
    tok = fresh("llama-bpe")
    tok.pad_token = tok.eos_token
    assert tok(["a", "b c"], padding=True)["input_ids"][0][-1] == tok.eos_token_id


@pytest.mark.parametrize("case", sorted(FIXTURE["model_tokens"]))
def test_a_models_own_and_extra_special_tokens_are_transformers_ones(tmp_path: Path,
                                                                     case: str) -> None:
    """A config's image_token (or an extra_special_tokens mapping) names a special token that
    templates see, as in transformers; its unnamed extra special tokens are special too."""
    source = TOKENIZERS / "llama-bpe"
    (tmp_path / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.update(FIXTURE["model_token_configs"][case])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tok = mj.ChatTokenizer.from_pretrained(tmp_path)
    expected = FIXTURE["model_tokens"][case]
    ids = tok(FIXTURE["model_token_text"], add_special_tokens=False)["input_ids"]
    assert {
        "special_tokens_map": tok.special_tokens_map,
        "all_special_tokens": tok.all_special_tokens,
        "all_special_ids": tok.all_special_ids,
        "extra_special_tokens": tok.extra_special_tokens,
        "attributes": {key: [getattr(tok, key), getattr(tok, key + "_id")]
                       for key in FIXTURE["model_token_names"]
                       if key in tok.special_tokens_map},
        "rendered": tok.apply_chat_template(CHAT, chat_template=FIXTURE["model_token_probe"],
                                            tokenize=False),
        "ids": ids,
        "convert_ids_to_tokens, skip_special_tokens": tok.convert_ids_to_tokens(
            ids, skip_special_tokens=True),
        "decode, skip_special_tokens": tok.decode(ids, skip_special_tokens=True),
    } == expected
    # the template API reads the same config the same way
    assert mj.apply_chat_template(tmp_path, CHAT, chat_template=FIXTURE["model_token_probe"]) \
        == expected["rendered"]
    with pytest.raises(AttributeError, match="has no attribute 'video_token'"):
        tok.video_token


@pytest.mark.parametrize("family", FAMILIES)
def test_chat_template_attribute_is_transformers_one(family: str) -> None:
    import hashlib

    template = shared(family).chat_template
    expected = FIXTURE["families"][family]["chat_template"]
    if expected is None or template is None:
        assert template is expected
    elif "names" in expected:
        assert sorted(template) == expected["names"]
    else:
        assert hashlib.sha256(template.encode("utf-8")).hexdigest() == expected["sha256"]


def test_setting_chat_template_replaces_the_templates() -> None:
    tok = fresh("qwen2")
    tok.chat_template = SIMPLE
    assert tok.chat_template == SIMPLE
    assert tok.apply_chat_template(MESSAGES, tokenize=False) == "<user>Hi"
    # transformers keeps several templates as a dict; a config's list of them is taken too
    tok.chat_template = [{"name": "default", "template": SIMPLE},
                         {"name": "tool_use", "template": "tools!"}]
    assert tok.chat_template == {"default": SIMPLE, "tool_use": "tools!"}
    assert tok.apply_chat_template(MESSAGES, tools=[], tokenize=False) == "tools!"
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        tok.apply_chat_template(MESSAGES)


# ---- conversations -----------------------------------------------------------------------------
def test_conversation_calls_answer_as_transformers(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """conversation=, one conversation's tensors (a batch of one, as there), and the warning
    for an assistant mask asked of a template without {% generation %} (all zeros)."""
    pytest.importorskip("numpy")
    forget_warnings(monkeypatch)  # (logged once per process, as there)
    expected = FIXTURE["conversations"]
    tok = shared("qwen2")
    assert tok.apply_chat_template(conversation=CHAT, chat_template=SIMPLE, tokenize=False) == \
        expected["conversation="] == expected["positional"]
    answers = {
        "masked": lambda: tok.apply_chat_template(CHAT, chat_template=MASKED,
                                                  return_assistant_tokens_mask=True),
        "masked, tensors": lambda: tok.apply_chat_template(
            CHAT, chat_template=MASKED, return_assistant_tokens_mask=True, return_tensors="np"),
        "tensors": lambda: tok.apply_chat_template(CHAT, chat_template=SIMPLE,
                                                   return_tensors="np"),
        "tensors, ids only": lambda: tok.apply_chat_template(
            CHAT, chat_template=SIMPLE, return_tensors="np", return_dict=False),
    }
    with caplog.at_level(logging.WARNING, logger="minijinja_py.chat"):
        for name, call in answers.items():
            assert plain(call()) == expected[name], name
        assert logged(caplog) == []
        tok.apply_chat_template(CHAT, return_assistant_tokens_mask="messages")  # needs no tag
        assert logged(caplog) == []
        assert plain(tok.apply_chat_template(CHAT, chat_template=SIMPLE,
                                             return_assistant_tokens_mask=True)) == \
            expected["no generation tag"]
        assert logged(caplog) == expected["no generation tag, logged"]
        mj.apply_chat_template(TOKENIZERS / "qwen2", CHAT, chat_template=SIMPLE, tokenize=True,
                               return_assistant_tokens_mask=True)
        assert logged(caplog) == []  # once per process, as transformers' warning_once


@pytest.mark.parametrize("kind, module, title", [("pt", "torch", "PyTorch"),
                                                 ("np", "numpy", "NumPy")])
def test_tensors_of_a_library_not_installed_name_the_install(
        monkeypatch: pytest.MonkeyPatch, kind: str, module: str, title: str) -> None:
    """return_tensors="pt" without torch raised a bare ModuleNotFoundError."""
    monkeypatch.setitem(sys.modules, module, None)  # (an import of it fails, installed or not)
    tok = shared("qwen2")
    calls = [lambda: tok.apply_chat_template(MESSAGES, return_tensors=kind),
             lambda: tok.apply_chat_template(MESSAGES, return_tensors=kind, return_dict=False),
             lambda: tok("Hello", return_tensors=kind)]
    for call in calls:
        with pytest.raises(mj.TensorLibraryNotInstalledError) as info:
            call()
        assert isinstance(info.value, ModuleNotFoundError) and info.value.name == module
        assert str(info.value) == (f"return_tensors={kind!r} needs {title}, which is not "
                                   f"installed: pip install {module} (or return_tensors=None "
                                   "for Python lists)")
    with pytest.raises(ValueError, match="^return_tensors must be None, 'np' or 'pt', not 'tf'$"):
        tok("Hello", return_tensors="tf")


# ---- calling the tokenizer ---------------------------------------------------------------------
def call_inputs(case: Dict[str, Any]) -> Any:
    """The first argument of the fixture's call ``case`` (see make_transformers_api.py)."""
    text = case["text"]
    if text is None:
        return None
    if isinstance(text, str):
        return FIXTURE["odd_texts"][text]
    if isinstance(text, int):
        return TEXTS[text]
    texts = [TEXTS[index] for index in text]
    return tuple(texts) if case.get("as_tuple") else texts


@pytest.mark.parametrize("family", FAMILIES)
def test_calling_the_tokenizer_answers_as_transformers(family: str) -> None:
    tok = fresh(family)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token  # (as the fixture's maker did)
    for name, case in FIXTURE["calls"].items():
        keywords = {key: value for key, value in case.items()
                    if key not in ("text", "as_tuple", "truncation_side")}
        tok.truncation_side = case.get("truncation_side", "right")
        got = outcome(lambda: tok(call_inputs(case), **keywords))
        if name in REFUSED_CALLS:
            assert got["error"][0] == "ValueError", name
            assert got["error"][1].startswith(REFUSED_CALLS[name]), name
            continue
        expected = FIXTURE["families"][family]["calls"][name]
        assert got == expected, name
        if "value" in got:  # the keys in transformers' order too
            assert list(got["value"]) == list(expected["value"]), name


def test_calling_the_tokenizer_keeps_the_text_and_encode_takes_special_tokens() -> None:
    tok = shared("llama-spm")
    expected = FIXTURE["families"]["llama-spm"]["calls"]["one text"]["value"]["input_ids"]
    assert tok(TEXTS[0]).text == TEXTS[0] and tok(TEXTS[:2]).text == TEXTS[:2]
    assert tok.encode(TEXTS[0], add_special_tokens=True) == expected
    # without: what apply_chat_template encodes, a prompt whose template wrote its own
    assert tok.encode(TEXTS[0]) == expected[1:]
    assert tok([]) == {"input_ids": [], "attention_mask": []}  # (transformers: IndexError)


def test_padding_without_a_pad_token_is_transformers_error() -> None:
    expected = FIXTURE["warnings"]["padding without a pad token"]
    assert outcome(lambda: shared("llama-bpe")(["a", "b c"], padding=True)) == expected


def test_calling_the_tokenizer_refuses_what_it_does_not_take() -> None:
    """Sentence pairs, targets, windows and pretokenized words are not taken, and an unknown
    keyword is an error (transformers ignores it: a typo would change nothing silently)."""
    tok = shared("qwen2")
    for keywords, what in (({"text_pair": "b"}, "text_pair: sentence pairs"),
                           ({"text_target": "b"}, "text_target: target texts (labels)"),
                           ({"stride": 2}, "stride: overflowing windows"),
                           ({"is_split_into_words": True}, "is_split_into_words: pretokenized")):
        with pytest.raises(TypeError, match="does not take " + re.escape(what)):
            tok("a", **keywords)
    with pytest.raises(TypeError, match="unexpected keyword arguments: paddding"):
        tok("a", paddding=True)
    # set to what asks for nothing, they are accepted
    assert tok("a", text_pair=None, stride=0, is_split_into_words=False) == tok("a")


def test_ids_too_long_for_the_model_are_warned_about_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((TOKENIZERS / "qwen2" / name).read_bytes())
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["model_max_length"] = 3
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tok = mj.ChatTokenizer.from_pretrained(tmp_path)
    got = []
    with caplog.at_level(logging.WARNING, logger="minijinja_py.chat"):
        for text, keywords in (("a b c d e", {"truncation": True}), ("a b", {}),
                               ("a b c d e", {}), ("a b c d e f g", {})):
            tok(text, **keywords)
            got.append(logged(caplog))
    assert got == FIXTURE["warnings"]["too long for the model"]


# ---- ids to text -------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_decode_and_batch_decode_are_transformers_ones(family: str) -> None:
    tok = shared(family)
    expected = FIXTURE["families"][family]["decode"]
    rows = expected["ids"]
    assert tok(TEXTS)["input_ids"] == rows
    got = FIXTURE_MAKER.decode_answers(tok, rows)
    assert got == expected
    assert tok.batch_decode([]) == [] and tok.decode([]) == ""
    assert tok.decode(rows[0], use_source_tokenizer=True) == expected["decode"][0]


def test_decode_takes_arrays_and_refuses_unknown_options(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    np = pytest.importorskip("numpy")
    forget_warnings(monkeypatch)
    tok = shared("qwen2")
    rows = tok(["Hello world", "a b c d"], padding=True)["input_ids"]
    assert tok.batch_decode(np.array(rows)) == tok.batch_decode(rows)
    assert tok.decode(np.array(rows[0])) == tok.decode(rows[0])
    assert tok.decode(np.int64(9707)) == "Hello"
    single, messages = FIXTURE["warnings"]["batch_decode of one sequence"]
    with caplog.at_level(logging.WARNING, logger="minijinja_py.chat"):
        assert tok.batch_decode([9707, 151643]) == single
    assert logged(caplog) == messages
    with pytest.raises(TypeError, match="unexpected keyword arguments: skip_special"):
        tok.decode(rows[0], skip_special=True)


def _word_level_folder(folder: Path, clean_up: Any) -> Path:
    """The fixture's word-level model (not BPE), which decode's clean-up applies to."""
    tokenizers = pytest.importorskip("tokenizers")
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(
        {word: index for index, word in enumerate(FIXTURE["words"])}, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    backend.save(str(folder / "tokenizer.json"))
    config = {} if clean_up is None else {"clean_up_tokenization_spaces": clean_up}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize("setting", [None, True])
def test_clean_up_tokenization_spaces_as_transformers(tmp_path: Path, setting: Any) -> None:
    tok = mj.ChatTokenizer.from_pretrained(_word_level_folder(tmp_path, setting))
    ids = tok(FIXTURE["clean_up_text"])["input_ids"]
    assert {"ids": ids, "decode": tok.decode(ids),
            "clean_up_tokenization_spaces=True": tok.decode(ids,
                                                            clean_up_tokenization_spaces=True),
            "clean_up_tokenization_spaces=False": tok.decode(
                ids, clean_up_tokenization_spaces=False),
            "batch_decode": tok.batch_decode([ids])} == FIXTURE["clean_up"][f"config {setting}"]


def test_clean_up_is_skipped_for_bpe_models_with_transformers_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    forget_warnings(monkeypatch)
    text, messages = FIXTURE["warnings"]["clean-up of a BPE model"]
    bpe = shared("qwen2")
    with caplog.at_level(logging.WARNING, logger="minijinja_py.chat"):
        assert bpe.decode(bpe("a , b")["input_ids"], clean_up_tokenization_spaces=True) == text
    # transformers names its own class (TokenizersBackend) where ours says ChatTokenizer
    assert [message.replace("ChatTokenizer", "TokenizersBackend")
            for message in logged(caplog)] == messages

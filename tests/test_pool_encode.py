"""RenderPool.encode: ``apply_chat_template(model_dir, ..., tokenize=True)`` in a worker.

* on a sample of the corpus token goldens (every family, plain, sanitised and masked), the
  pool's ChatEncoding equals the in-process one and the golden, and an error is the same class
  with the same ``str()``, location, name and source;
* each worker loads a folder's tokenizer once and loads it again when the folder's files change;
* a worker killed or timed out during an encode is replaced and the call raises what a render
  raises in that case.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, List, Tuple

import pytest

import minijinja_py as mj
from minijinja_py.chat import ChatConfigError, ChatEncoding
from minijinja_py.chat import pool as pool_module
from minijinja_py.chat import tokens as mj_tokens
from minijinja_py.chat.pool import RenderPool, RenderTimeoutError, WorkerCrashedError

pytest.importorskip("tokenizers")
from test_tokens import (CORPUS, FIXED_NOW, PAIRS, call_arguments,  # noqa: E402
                         golden, source)

#: Limits raised so far that only the pool's own bounds (timeout, a kill) can stop a render.
UNBOUNDED = {"max_string_size": 10 ** 10, "max_output_size": 10 ** 11, "max_steps": 10 ** 13}
if "max_seconds" in mj.Limits.FIELDS:
    UNBOUNDED["max_seconds"] = 10 ** 6
HANG = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
MESSAGES = [{"role": "user", "content": "hi <|im_end|>"}, {"role": "assistant", "content": "yo"}]


def folder(family: str) -> Path:
    return CORPUS / "tokenizers" / family


def sample() -> List[Tuple[str, str]]:
    """Every 23rd pair (prime, so contexts and templates both vary), plus every pair with an
    assistant mask golden among them, grouped by tokenizer family (a worker keeps four)."""
    chosen = PAIRS[::23]
    return sorted(chosen, key=lambda pair: (golden(*pair)["tokenizer"], pair))


SAMPLE = sample()


@pytest.fixture(scope="module")
def pool() -> Any:
    with RenderPool(2, now=FIXED_NOW, timeout=60) as shared:
        yield shared


def outcome(call: Callable[[], Any]) -> tuple:
    try:
        return ("ok", call())
    except Exception as exc:  # noqa: BLE001 - compared with what the pool raises
        return ("error", exc)


def same_outcome(expected: tuple, got: tuple) -> None:
    assert expected[0] == got[0], (expected, got)
    if expected[0] == "ok":
        want, have = expected[1], got[1]
        assert type(have) is ChatEncoding
        assert dict(have) == dict(want)
        assert have.text == want.text
        return
    want, have = expected[1], got[1]
    assert type(have) is type(want), (type(have), type(want))
    assert str(have) == str(want)
    if isinstance(want, mj.TemplateError):
        for attribute in ("message", "lineno", "column", "name", "source", "show_location"):
            assert getattr(have, attribute) == getattr(want, attribute), attribute


def both(pool: RenderPool, model_dir: Any, messages: Any, **options: Any) -> Tuple[tuple, tuple]:
    """(in-process outcome, pool outcome) of the same call."""
    in_process = outcome(lambda: mj.apply_chat_template(model_dir, messages, tokenize=True,
                                                        now=FIXED_NOW, **options))
    pooled = outcome(lambda: pool.encode(model_dir, messages, **options))
    same_outcome(in_process, pooled)
    return in_process, pooled


def test_sample_covers_every_family_and_mode() -> None:
    families = {golden(*pair)["tokenizer"] for pair in SAMPLE}
    assert len(families) == 5
    assert any("assistant_masks" in golden(*pair) for pair in SAMPLE)
    assert any("text_error" in golden(*pair) for pair in SAMPLE)


@pytest.mark.parametrize("slug,context", SAMPLE, ids=[f"{s}-{c}" for s, c in SAMPLE])
def test_encode_equals_in_process_and_golden(pool: RenderPool, slug: str, context: str) -> None:
    expected = golden(slug, context)
    messages, kwargs = call_arguments(context)
    model_dir = folder(expected["tokenizer"])
    options = dict(kwargs, chat_template=source(slug))
    plain = both(pool, model_dir, messages, **options)[1]
    if "text" in expected:
        assert plain[1]["input_ids"] == expected["input_ids"]
        assert plain[1].text == expected["text"]
    sanitized = both(pool, model_dir, messages, sanitize_control_tokens=True, **options)[1]
    if "sanitized_input_ids" in expected:
        assert sanitized[1]["input_ids"] == expected["sanitized_input_ids"]
    if "assistant_masks" in expected or "assistant_masks_error" in expected:
        masked = both(pool, model_dir, messages, return_assistant_tokens_mask=True,
                      **options)[1]
        if "assistant_masks" in expected:
            assert masked[1]["assistant_masks"] == expected["assistant_masks"]


def test_batches_offsets_and_errors_equal_in_process(pool: RenderPool) -> None:
    qwen = folder("qwen2")
    batch = [MESSAGES, MESSAGES[:1]]
    padded = both(pool, qwen, batch, padding=True, truncation=True, max_length=12,
                  tokenizer_kwargs={"return_offsets_mapping": True})[1]
    assert padded[0] == "ok" and isinstance(padded[1].text, list)
    assert isinstance(padded[1]["offset_mapping"][0][0], tuple)
    # errors: a syntax error located in a template the parent never saw, the template's own
    # error, a chat config error (a ValueError, not a TemplateError), a path that names nothing
    cases = [dict(chat_template="line one\n{{ foo( }}"),
             dict(chat_template="{{ raise_exception('refused') }}"),
             dict(template_name="no-such-template")]
    kinds = [mj.TemplateSyntaxError, mj.TemplateError, ValueError]
    for options, kind in zip(cases, kinds):
        expected = both(pool, qwen, MESSAGES, **options)[0]
        assert expected[0] == "error" and isinstance(expected[1], kind), expected
    syntax = both(pool, qwen, MESSAGES, chat_template="line one\n{{ foo( }}")[1][1]
    assert syntax.lineno == 2 and syntax.source == "line one\n{{ foo( }}"
    assert both(pool, str(CORPUS / "no-such-model"), MESSAGES)[0][0] == "error"
    assert both(pool, CORPUS / "tokenizers", MESSAGES)[0][0] == "error"


def test_tokenizer_loaded_once_per_worker_and_again_when_the_folder_changes(
        tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(folder("qwen2"), model)
    with RenderPool(1, now=FIXED_NOW) as single:
        first = single.encode(model, MESSAGES)
        # broken in place with the same size and time: a folder that is loaded again fails, so
        # a success means the worker kept the tokenizer it had
        tokenizer_json = model / "tokenizer.json"
        status = tokenizer_json.stat()
        with open(tokenizer_json, "r+b") as handle:
            handle.write(b"!" * 64)
        os.utime(tokenizer_json, ns=(status.st_atime_ns, status.st_mtime_ns))
        assert single.encode(model, MESSAGES) == first
        # a changed template (new size and time): the folder is loaded again
        (model / "chat_template.jinja").write_text("{{ messages[0].content }}", "utf-8")
        with pytest.raises(ChatConfigError, match="tokenizer.json"):
            single.encode(model, MESSAGES)
        shutil.copy(folder("qwen2") / "tokenizer.json", tokenizer_json)
        again = single.encode(model, MESSAGES)
        assert again.text == "hi <|im_end|>"


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_worker_killed_during_encode_is_replaced() -> None:
    with RenderPool(1, now=FIXED_NOW, timeout=60, limits=UNBOUNDED) as crashy:
        crashy.encode(folder("qwen2"), MESSAGES)  # the tokenizer is loaded: the hang is next
        (pid,) = crashy.worker_pids()
        result: list = []
        thread = threading.Thread(target=lambda: result.append(outcome(
            lambda: crashy.encode(folder("qwen2"), MESSAGES, chat_template=HANG))))
        thread.start()
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        thread.join(30)
        assert not thread.is_alive()
        kind, err = result[0]
        assert kind == "error" and type(err) is WorkerCrashedError, result
        assert err.returncode == -signal.SIGKILL
        assert "the template was not rendered and the pool replaced the worker" in str(err)
        assert crashy.worker_pids() != [pid]
        assert crashy.encode(folder("qwen2"), MESSAGES)["input_ids"]


def test_encode_past_the_timeout_is_a_timeout_error() -> None:
    with RenderPool(1, now=FIXED_NOW, timeout=3, limits=UNBOUNDED) as slow:
        slow.encode(folder("qwen2"), MESSAGES)
        (before,) = slow.worker_pids()
        with pytest.raises(RenderTimeoutError) as info:
            slow.encode(folder("qwen2"), MESSAGES, chat_template=HANG)
        assert isinstance(info.value, mj.LimitExceededError)
        assert str(info.value).startswith("the render did not finish within the pool's "
                                          "timeout of 3 seconds")
        assert slow.worker_pids() != [before]
        assert slow.encode(folder("qwen2"), MESSAGES)["input_ids"]


def test_pool_limits_apply_to_the_encode_render() -> None:
    with RenderPool(1, now=FIXED_NOW, limits={"max_output_size": 50}) as tight:
        with pytest.raises(mj.LimitExceededError):
            tight.encode(folder("qwen2"), MESSAGES, chat_template="{{ 'x' * 100 }}")


def reply(header: dict, blobs: List[bytes]) -> Tuple[dict, bytearray]:
    return dict(header, blobs=[len(blob) for blob in blobs]), bytearray(b"".join(blobs))


INT = (7).to_bytes(8, "little" if sys.byteorder == "little" else "big")


@pytest.mark.parametrize("header,blobs", [
    ({"batched": False, "columns": [["input_ids", [1]]]}, [INT]),                 # no text
    ({"batched": False, "columns": [["__class__", [1]]]}, [INT, b"t"]),           # unknown column
    ({"batched": False, "columns": [["input_ids", [2]]]}, [INT, b"t"]),           # short column
    ({"batched": False, "columns": [["input_ids", [1, 0]]]}, [INT, b"t", b""]),   # two rows
    ({"batched": True, "columns": [["input_ids", [1]], ["attention_mask", [1, 0]]]},
     [INT, INT, b"t"]),                                                           # ragged
    ({"batched": "yes", "columns": [["input_ids", [1]]]}, [INT, b"t"]),
    ({"batched": False, "columns": [["offset_mapping", [1]]]}, [INT, b"t"]),      # half a pair
    ({"batched": False, "columns": [["input_ids", [1]]]}, [INT, b"\xff"]),        # not UTF-8
])
def test_malformed_encode_replies_are_refused(header: dict, blobs: List[bytes]) -> None:
    with pytest.raises(pool_module._ProtocolError):
        pool_module._decode_encoding(*reply(header, blobs))


def test_a_wellformed_encode_reply_decodes() -> None:
    columns, text = pool_module._decode_encoding(*reply(
        {"batched": False, "columns": [["input_ids", [1]], ["offset_mapping", [1]]]},
        [INT, INT + INT, "é".encode()]))
    assert columns == {"input_ids": [7], "offset_mapping": [(7, 7)]} and text == "é"


def test_relative_paths_follow_the_callers_directory_and_conversation_is_taken(
        pool: RenderPool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers start before the caller changes directory: a relative folder is resolved, and
    named in messages, as the caller's process sees it."""
    monkeypatch.chdir(CORPUS / "tokenizers")
    both(pool, "qwen2", MESSAGES)
    assert pool.encode("qwen2", conversation=MESSAGES) == pool.encode(folder("qwen2"), MESSAGES)
    both(pool, "phi-3/tokenizer.json", MESSAGES)
    both(pool, "not-a-model-here", MESSAGES)
    with pytest.raises(TypeError, match="does not take return_tensors"):
        pool.encode("qwen2", MESSAGES, return_tensors="np")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_fifo_in_the_folder_blocks_neither_process(pool: RenderPool, tmp_path: Path) -> None:
    """The server hashes only regular files (up to the size a worker would load), so a FIFO
    named tokenizer.json is the in-process error, not a hang."""
    assert pool_module._MOST_HASHED == mj_tokens.MAX_TOKENIZER_BYTES
    model = tmp_path / "fifo-model"
    model.mkdir()
    os.mkfifo(model / "tokenizer.json")
    result: list = []
    thread = threading.Thread(target=lambda: result.append(both(pool, model, MESSAGES)))
    thread.daemon = True
    thread.start()
    thread.join(60)  # a guard against a hang, not a time measurement
    assert result and result[0][0][0] == "error"
    assert isinstance(result[0][0][1], ChatConfigError)


@pytest.mark.skipif(os.name != "posix", reason="RLIMIT_AS")
def test_running_out_of_memory_during_encode_is_reported_and_the_worker_replaced() -> None:
    """Out of memory in the render: RenderMemoryError, as for renders. Out of memory in the
    Rust tokenizer, which aborts the process instead of raising: WorkerCrashedError
    (SIGABRT), as for any crash. Either way the next encode works."""
    with RenderPool(1, memory_limit=600 << 20, limits=UNBOUNDED) as capped:
        expected = capped.encode(folder("qwen2"), MESSAGES)
        with pytest.raises(pool_module.RenderMemoryError, match="memory limit"):
            capped.encode(folder("qwen2"), MESSAGES, chat_template="{{ 'x' * 10**9 }}")
        assert capped.encode(folder("qwen2"), MESSAGES) == expected
        # 60 MB of text fits; its ten million tokens do not (tokenizers 0.2x aborts: SIGABRT;
        # a tokenizer that raised MemoryError instead would be a RenderMemoryError)
        with pytest.raises((WorkerCrashedError, pool_module.RenderMemoryError)) as info:
            capped.encode(folder("qwen2"), MESSAGES, chat_template="{{ 'hello ' * 10**7 }}")
        if isinstance(info.value, WorkerCrashedError):
            assert info.value.returncode == -signal.SIGABRT, str(info.value)
        assert capped.encode(folder("qwen2"), MESSAGES) == expected


def test_an_error_in_the_folders_own_template_names_the_folder(pool: RenderPool,
                                                                tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(folder("qwen2") / "tokenizer.json", model / "tokenizer.json")
    (model / "chat_template.jinja").write_text("fine\n{{ messages[0].nope.deeper }}", "utf-8")
    expected = both(pool, model, MESSAGES)[0][1]
    assert isinstance(expected, mj.UndefinedError) and expected.name == str(model)
    assert expected.lineno == 2 and "messages[0].nope.deeper" in str(expected)

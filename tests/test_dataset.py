"""ChatBatchProcessor (minijinja_py/chat/dataset/batch.py) and the dataset readers: column
batches of real corpus conversations give, row for row, what ChatTemplate / ChatTokenizer give
one call at a time; bad rows keep their place with an error; the processor pickles small and
works in other processes (multiprocessing, and datasets.Dataset.map(num_proc=2))."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import pickle
from pathlib import Path
from typing import Any, Dict, List

import pytest

from dataset_support import (BAD_ROWS, NOW, TEMPLATES, TOKENIZERS, USER, corpus_available,
                             expected_text, expected_tokens, good_rows, mixed_rows)
from minijinja_py.chat.dataset import ChatBatchProcessor, MalformedRowError, describe_error
from minijinja_py.chat.dataset.io import InputFile, discover_inputs, read_chunks

if not corpus_available():
    pytest.skip("the shared corpus (contexts, tokenizers) is not there", allow_module_level=True)

QWEN = TOKENIZERS / "qwen2"
LLAMA = TOKENIZERS / "llama-bpe"
TRAINING = TEMPLATES / "trl-llama3-training.jinja"
GEMMA = TEMPLATES / "cz-gemma-it.jinja"  # raise_exception on non-alternating roles
TEXT_TEMPLATES = [QWEN, TOKENIZERS / "phi-3", TOKENIZERS / "command-r", GEMMA,
                  TEMPLATES / "vllm-internlm2-tool.jinja"]


def columns(rows: List[Dict[str, Any]]) -> Dict[str, List[Any]]:
    """Rows as a column batch (a column missing from a row is None there, as in datasets)."""
    names: Dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return {name: [row.get(name) for row in rows] for name in names}


def check_text_rows(rows: List[Any], result: Dict[str, List[Any]], template: Any) -> int:
    """Compare each output row with the single-process render; returns how many failed."""
    failed = 0
    for index, row in enumerate(rows):
        want = expected_text(template, row)
        if "text" in want:
            assert result["error"][index] is None, (index, result["error"][index])
            assert result["text"][index] == want["text"], index
            continue
        failed += 1
        assert result["text"][index] is None
        where = f" (line {want['line']}, column {want['column']})" if want["line"] else ""
        assert result["error"][index] == f"{want['class']}: {want['message']}{where}", index
    return failed


@pytest.mark.parametrize("template", TEXT_TEMPLATES, ids=lambda path: path.name)
def test_text_equals_chat_template_row_by_row(template: Path) -> None:
    rows = good_rows(60)
    processor = ChatBatchProcessor(str(template), variables_column="vars", now=NOW)
    batch = columns(rows)
    result = processor(batch)
    assert list(result)[:len(batch)] == list(batch)  # input columns first, unchanged
    for name in batch:
        assert result[name] is batch[name]
    assert set(result) == set(batch) | {"text", "error"}
    check_text_rows(rows, result, template)
    # the template that raises does so on some rows, and says where
    if template == GEMMA:
        errors = [error for error in result["error"] if error]
        assert errors and all("(line 10, column" in error for error in errors
                              if error.startswith("TemplateError"))


def test_bad_rows_keep_their_place() -> None:
    rows = mixed_rows(40, bad_every=5)
    dict_rows = [row for row in rows if isinstance(row, dict)]  # a column batch holds dicts
    processor = ChatBatchProcessor(QWEN, variables_column="vars", now=NOW)
    result = processor(columns(dict_rows))
    assert len(result["text"]) == len(result["error"]) == len(dict_rows)
    wanted = {row["id"]: (kind, message) for row, kind, message in BAD_ROWS
              if isinstance(row, dict)}
    # in a column batch, a row without the column has None there
    wanted["bad-no-messages"] = ("MalformedRowError", "'messages' is null")
    seen = set()
    for index, row in enumerate(dict_rows):
        if row["id"] in wanted:
            kind, message = wanted[row["id"]]
            assert result["text"][index] is None
            assert result["error"][index].startswith(f"{kind}: {message}"), result["error"][index]
            seen.add(row["id"])
    assert seen == set(wanted)
    good = [index for index, row in enumerate(dict_rows) if row["id"] not in wanted]
    check_text_rows([dict_rows[index] for index in good],
                    {name: [values[index] for index in good] for name, values in result.items()},
                    QWEN)


def test_a_missing_messages_cell_and_json_text_columns() -> None:
    processor = ChatBatchProcessor(QWEN, now=NOW)
    chat = [USER, {"role": "assistant", "content": "Hi!"}]
    result = processor({"messages": [None, json.dumps(chat), "[not json", chat],
                        "tools": [None, None, None, json.dumps([])]})
    assert result["error"][0] == "MalformedRowError: 'messages' is null"
    assert result["text"][1] == result["text"][3] == expected_text(QWEN, {"messages": chat})["text"]
    assert result["error"][2].startswith("MalformedRowError: 'messages' holds a string that is "
                                         "not JSON (")


def test_errors_raise() -> None:
    processor = ChatBatchProcessor(GEMMA, errors="raise")
    from minijinja_py import TemplateError

    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        processor({"messages": [[USER], [USER, USER]]})
    with pytest.raises(MalformedRowError):
        processor({"messages": [[{"content": "no role"}]]})


def test_batch_level_mistakes_raise() -> None:
    processor = ChatBatchProcessor(QWEN)
    with pytest.raises(ValueError, match="no 'messages' column"):
        processor({"conversation": [[USER]]})
    with pytest.raises(ValueError, match="already has column"):
        processor({"messages": [[USER]], "text": ["x"]})
    with pytest.raises(ValueError, match="differ in length"):
        processor({"messages": [[USER]], "id": [1, 2]})
    assert processor({"messages": []}) == {"messages": [], "text": [], "error": []}


def test_options_are_checked_when_made() -> None:
    with pytest.raises(ValueError, match="need"):
        ChatBatchProcessor(QWEN, mask=True)
    with pytest.raises(ValueError, match="mask must be"):
        ChatBatchProcessor(QWEN, tokens=True, mask="yes")
    with pytest.raises(ValueError, match="model folder"):
        ChatBatchProcessor("{{ messages }}", tokens=True)
    with pytest.raises(ValueError, match="errors must be"):
        ChatBatchProcessor(QWEN, errors="skip")
    with pytest.raises(ValueError, match="sanitize must be False, True, 'markers' or "):
        ChatBatchProcessor(QWEN, tokens=True, sanitize="yes")
    for length in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_length must be a positive int"):
            ChatBatchProcessor(QWEN, tokens=True, max_length=length)
    assert ChatBatchProcessor(QWEN, tokens=True, max_length=1).max_length == 1
    with pytest.raises(ValueError, match="option of apply_chat_template"):
        ChatBatchProcessor(QWEN, tokens=True, variables={"padding": True})
    with pytest.raises(TypeError, match="path of a model folder"):
        ChatBatchProcessor(QWEN, tokenizer=object())


def test_variables_and_per_row_options() -> None:
    source = ("{{ greeting }}|{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}"
              "{% if add_generation_prompt %}GEN{% endif %}")
    processor = ChatBatchProcessor(source, variables={"greeting": "hi"}, variables_column="vars",
                                   add_generation_prompt=True)
    result = processor({"messages": [[USER]] * 4,
                        "vars": [None, {"greeting": "yo"}, {"add_generation_prompt": False},
                                 {"messages": []}]})
    assert result["text"][:3] == ["hi|user:Hello|GEN", "yo|user:Hello|GEN", "hi|user:Hello|"]
    assert result["error"][3] == ("MalformedRowError: 'vars': 'messages' is not a template "
                                  "variable here (it comes from its own column)")


def test_named_templates_follow_tools(tmp_path: Path) -> None:
    config = {"chat_template": [
        {"name": "default", "template": "D{% for m in messages %}{{ m.content }}{% endfor %}"},
        {"name": "tool_use", "template": "T{{ tools | length }}"}],
        "bos_token": "<s>"}
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    rows = {"messages": [[USER], [USER]], "tools": [None, [{"type": "function"}]]}
    assert ChatBatchProcessor(str(path))(rows)["text"] == ["DHello", "T1"]
    assert ChatBatchProcessor(str(path), name="default")(rows)["text"] == ["DHello", "DHello"]
    assert ChatBatchProcessor(config)(rows)["text"] == ["DHello", "T1"]


def test_tokens_mask_equal_chat_tokenizer() -> None:
    from minijinja_py.chat import ChatTokenizer

    rows = good_rows(40)
    tokenizer = ChatTokenizer.from_pretrained(LLAMA, now=NOW)
    source = TRAINING.read_text(encoding="utf-8")
    processor = ChatBatchProcessor(TRAINING, tokenizer=LLAMA, mask=True, variables_column="vars",
                                   now=NOW)
    result = processor(columns(rows))
    assert set(result) - set(columns(rows)) == {"input_ids", "attention_mask", "assistant_masks",
                                                "error"}
    ok = 0
    for index, row in enumerate(rows):
        want = expected_tokens(tokenizer, row, chat_template=source,
                               return_assistant_tokens_mask=True)
        if "input_ids" in want:
            ok += 1
            assert result["error"][index] is None
            for name in ("input_ids", "attention_mask", "assistant_masks"):
                assert result[name][index] == want[name], (index, name)
        else:
            assert result["input_ids"][index] is None
            assert result["error"][index].startswith(f"{want['class']}: {want['message']}")
    assert ok > 20
    assert any(1 in mask for mask in result["assistant_masks"] if mask)


@pytest.mark.parametrize("sanitize, mask", [(True, False), ("provenance", "messages")])
def test_tokens_sanitize_truncate_equal_chat_tokenizer(sanitize: Any, mask: Any) -> None:
    from minijinja_py.chat import ChatTokenizer

    rows = good_rows(19)
    tokenizer = ChatTokenizer.from_pretrained(QWEN, now=NOW)
    processor = ChatBatchProcessor(QWEN, tokens=True, sanitize=sanitize, mask=mask,
                                   max_length=64, variables_column="vars", now=NOW)
    result = processor(columns(rows))
    truncated = 0
    for index, row in enumerate(rows):
        want = expected_tokens(tokenizer, row, sanitize_control_tokens=sanitize,
                               return_assistant_tokens_mask=mask, truncation=True, max_length=64)
        if "input_ids" not in want:
            assert result["error"][index].startswith(want["class"])
            continue
        assert result["input_ids"][index] == want["input_ids"]
        assert result["attention_mask"][index] == want["attention_mask"]
        assert len(result["input_ids"][index]) <= 64
        truncated += len(result["input_ids"][index]) == 64
        if mask:
            assert result["assistant_masks"][index] == want["assistant_masks"]
    assert truncated > 5


def test_pickles_configuration_only() -> None:
    processor = ChatBatchProcessor(QWEN, tokens=True, mask=True, now=NOW)
    empty = pickle.dumps(processor)
    processor({"messages": [[USER]]})  # builds the tokenizer and template
    assert pickle.dumps(processor) == empty  # still only the configuration
    assert len(empty) < 2000
    copy_ = pickle.loads(empty)
    assert copy_({"messages": [[USER]]}) == processor({"messages": [[USER]]})
    from minijinja_py import ChatTemplate

    template = ChatTemplate("{{ bos_token }}{{ messages[0].content }}",
                            special_tokens={"bos_token": "<s>"})
    assert pickle.loads(pickle.dumps(ChatBatchProcessor(template)))(
        {"messages": [[USER]]})["text"] == ["<s>Hello"]


def _in_a_spawned_process(batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
    return _PROCESSOR(batch)


_PROCESSOR = None


def _set(processor: ChatBatchProcessor) -> None:
    global _PROCESSOR
    _PROCESSOR = processor


def test_spawned_processes_give_the_same_rows() -> None:
    rows = [row for row in mixed_rows(30, bad_every=4) if isinstance(row, dict)]
    processor = ChatBatchProcessor(QWEN, tokens=True, variables_column="vars", now=NOW)
    batch = columns(rows)
    halves = [{name: values[:15] for name, values in batch.items()},
              {name: values[15:] for name, values in batch.items()}]
    context = multiprocessing.get_context("spawn")
    with context.Pool(2, initializer=_set, initargs=(processor,)) as pool:
        results = pool.map(_in_a_spawned_process, halves)
    single = processor(batch)
    joined = {name: results[0][name] + results[1][name] for name in single}
    assert joined == single
    assert any(error for error in single["error"]) and any(ids for ids in single["input_ids"])


def test_datasets_map_with_two_processes() -> None:
    datasets = pytest.importorskip("datasets")
    rows = [row for row in good_rows(38)]
    for row in rows:  # datasets needs one type per column: JSON text where values vary
        for name in ("messages", "tools", "documents", "vars", "meta"):
            if name in row:
                row[name] = json.dumps(row[name])
    rows.insert(5, {"id": "bad", "messages": json.dumps([{"content": "no role"}])})
    dataset = datasets.Dataset.from_list(rows)
    processor = ChatBatchProcessor(QWEN, tokens=True, variables_column="vars", now=NOW)
    mapped = dataset.map(processor, batched=True, batch_size=8, num_proc=2,
                         load_from_cache_file=False)
    assert mapped.num_rows == len(rows)
    single = processor(dataset.to_dict())
    for name in ("id", "input_ids", "attention_mask", "error"):
        assert mapped[name] == single[name], name
    assert mapped["error"][5] == "MalformedRowError: messages[0] has no 'role'"
    text = ChatBatchProcessor(QWEN, variables_column="vars", now=NOW)
    rendered = dataset.map(text, batched=True, num_proc=2, load_from_cache_file=False)
    for index, row in enumerate(rows):
        if index == 5:
            continue
        decoded = {name: json.loads(value) if isinstance(value, str) and name != "id"
                   else value for name, value in row.items()}
        want = expected_text(QWEN, decoded)
        assert rendered["text"][index] == want.get("text"), index


def test_describe_error_wording() -> None:
    from minijinja_py import TemplateRuntimeError

    error = TemplateRuntimeError("boom\nsecond line", lineno=3, column=7, name="t")
    assert describe_error(error) == "TemplateRuntimeError: boom (line 3, column 7)"
    assert describe_error(ValueError("")) == "ValueError"


# ---- readers --------------------------------------------------------------------------------
def test_json_array_is_read_incrementally_and_resumes(tmp_path: Path) -> None:
    rows = good_rows(300)  # about 600 kB: items straddle the reader's 64 k-character reads
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
    [source] = discover_inputs(str(path))
    chunks = list(read_chunks(source, 64))
    assert [chunk.count for chunk in chunks] == [64, 64, 64, 64, 44]
    assert [value for chunk in chunks for value in chunk.payload] == rows
    resumed = list(read_chunks(source, 64, chunks[1].position))
    assert [value for chunk in resumed for value in chunk.payload] == rows[128:]
    assert chunks[-1].done == 1.0 and 0 < chunks[0].done < 1


def test_jsonl_positions_resume_exactly(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl.gz"
    lines = [json.dumps({"n": n}) for n in range(50)]
    lines.insert(10, "")  # blank lines are not rows
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    [source] = discover_inputs(str(path))
    assert source.gzip and source.format == "jsonl"
    chunks = list(read_chunks(source, 8))
    assert sum(chunk.count for chunk in chunks) == 50
    assert chunks[1].lines[2] == 12  # the blank line 11 is skipped, numbers stay the file's
    tail = list(read_chunks(source, 8, chunks[2].position))
    assert [json.loads(line) for chunk in tail for line in chunk.payload] == \
        [{"n": n} for n in range(24, 50)]
    assert tail[0].first_row == 24 and tail[0].lines[0] == 26


def test_inputs_folder_and_glob(tmp_path: Path) -> None:
    for name in ("b/2.jsonl", "a/10.parquet", "a/9.json", "_skip/x.jsonl", ".hidden.jsonl",
                 "notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("", encoding="utf-8")
    found = [Path(source.path).relative_to(tmp_path).as_posix()
             for source in discover_inputs(str(tmp_path))]
    assert found == ["a/10.parquet", "a/9.json", "b/2.jsonl"]
    found = discover_inputs(str(tmp_path / "*" / "*.json*"))  # a glob picks what it matches
    assert [Path(source.path).name for source in found] == ["x.jsonl", "9.json", "2.jsonl"]
    assert [source.format for source in found] == ["jsonl", "json", "jsonl"]
    assert isinstance(found[0], InputFile)

"""``minijinja-py dataset``: real JSON Lines, JSON and Parquet files in, compared row by row
with the single-process API; order with several workers; the errors file; exit codes;
resume after a real SIGKILL, byte for byte; refusals; progress lines when not on a terminal."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from dataset_support import (BAD_ROWS, NOW, ROOT, TEMPLATES, TOKENIZERS, corpus_available,
                             expected_text, expected_tokens, good_rows, mixed_rows, write_jsonl)
from minijinja_py.chat.cli import main

if not corpus_available():
    pytest.skip("the shared corpus (contexts, tokenizers) is not there", allow_module_level=True)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

QWEN = TOKENIZERS / "qwen2"
LLAMA = TOKENIZERS / "llama-bpe"
TRAINING = TEMPLATES / "trl-llama3-training.jinja"
GEMMA = TEMPLATES / "cz-gemma-it.jinja"
NOW_ARG = ["--now", NOW.isoformat()]
SUMMARY = re.compile(r"minijinja-py dataset: ([\d,]+) rows in [\d.]+ s \(.*\): ([\d,]+) written to")


def cli(args: List[str], **options: Any) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-m", "minijinja_py", "dataset", *args],
                            capture_output=True, text=True, env=env, timeout=300, **options)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def read_jsonl(path: Path) -> List[Dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def good(rows: List[Any]) -> List[Dict[str, Any]]:
    bad_ids = {row["id"] for row, _, _ in BAD_ROWS if isinstance(row, dict)}
    return [row for row in rows if isinstance(row, dict) and row["id"] not in bad_ids]


def test_jsonl_text_with_two_workers_in_order_with_errors(tmp_path: Path) -> None:
    rows = mixed_rows(150, bad_every=9)
    source = tmp_path / "chats.jsonl"
    write_jsonl(source, rows, extra_lines={20: "{not json", 41: "   "})
    output = tmp_path / "out.jsonl"
    result = cli([str(GEMMA), str(source), str(output), "--workers", "2", "--batch-size", "8",
                  "--variables-column", "vars", "--progress-interval", "0", *NOW_ARG])
    assert result.returncode == 3, result.stderr  # finished, some rows failed

    written = read_jsonl(output)
    expected, failed = [], []
    for row in good(rows):
        want = expected_text(GEMMA, row)
        if "text" in want:
            expected.append({"id": row["id"], "meta": row["meta"], "text": want["text"]})
        else:
            failed.append((row["id"], want))
    assert written == expected  # same rows, same order, other columns unchanged
    assert failed  # the template raised on some conversations

    records = read_jsonl(Path(str(output) + ".errors.jsonl"))
    assert len(records) == len(failed) + 1 + sum(1 for row in rows if row not in good(rows))
    by_id = {record["keys"].get("id"): record for record in records if record["keys"]}
    assert any(want["class"] == "TemplateError" for _, want in failed)  # raise_exception
    for row_id, want in failed:
        record = by_id[row_id]
        assert record["class"] == want["class"]
        assert record["message"] == want["message"]
        assert record["location"] == {"template": str(GEMMA), "line": want["line"],
                                      "column": want["column"]}
        assert record["error"] == (f"{want['class']}: {want['message']} (line {want['line']}, "
                                   f"column {want['column']})")
    for row, kind, message in BAD_ROWS:
        matching = [record for record in records if isinstance(row, dict)
                    and record["keys"].get("id") == row["id"]] if isinstance(row, dict) else \
            [record for record in records if record["message"].startswith(message)]
        assert matching and all(record["class"] == kind for record in matching), row
        assert all(record["message"].startswith(message) for record in matching)
    not_json = [record for record in records if record["class"] == "JSONDecodeError"]
    assert len(not_json) == 1 and not_json[0]["line"] == 21 and not_json[0]["row"] == 20
    assert not_json[0]["file"] == str(source) and not_json[0]["keys"] == {}
    # row numbers count rows (the blank line is none), lines count the file's lines
    last = max(records, key=lambda record: record["row"])
    assert records == sorted(records, key=lambda record: record["row"])
    assert last["row"] > 43 and last["line"] == last["row"] + 2

    total, done = (int(group.replace(",", "")) for group in SUMMARY.search(result.stderr).groups())
    assert total == len(rows) + 1 and done == len(expected)
    assert f"{len(records):,} failed" in result.stderr
    progress = [line for line in result.stderr.splitlines()
                if re.fullmatch(r"minijinja-py dataset: +\d+%, [\d,]+ rows, [\d,]+ rows/s, "
                                r"ETA (\?|\d+:\d\d)(, [\d,]+ failed)?", line)]
    assert len(progress) >= 10  # one per batch with --progress-interval 0, no bar, no \r
    assert "\r" not in result.stderr


def test_all_rows_ok_exit_zero_and_empty_errors_file(tmp_path: Path, capsys: Any) -> None:
    rows = good_rows(25, plain=True)
    source = tmp_path / "chats.jsonl"
    write_jsonl(source, rows)
    output = tmp_path / "out.jsonl"
    code = main(["dataset", str(QWEN), str(source), str(output), "--workers", "1",
                 "--variables-column", "vars", "--key-column", "meta", "--quiet", *NOW_ARG])
    assert code == 0, capsys.readouterr().err
    assert [row["text"] for row in read_jsonl(output)] == \
        [expected_text(QWEN, row)["text"] for row in rows]
    assert Path(str(output) + ".errors.jsonl").read_bytes() == b""
    assert sorted(os.listdir(tmp_path)) == ["chats.jsonl", "out.jsonl", "out.jsonl.errors.jsonl"]
    err = capsys.readouterr().err
    assert "none failed" in err and "%" not in err  # --quiet: the summary only
    # the terminal form: one line redrawn with carriage returns, cleared before the summary
    assert main(["dataset", str(QWEN), str(source), str(output), "--workers", "1",
                 "--overwrite", "--progress", "bar", "--batch-size", "5", *NOW_ARG]) == 0
    err = capsys.readouterr().err
    assert re.search(r"\r\[#*-*\] +\d+%  [\d,]+ rows  [\d,]+ rows/s  ETA", err)
    assert err.splitlines()[-1].lstrip("\r ").startswith("minijinja-py dataset: 25 rows in")


def write_parquet(path: Path, rows: List[Dict[str, Any]], row_group_size: int = 10) -> None:
    """Conversation columns as JSON text (their shapes vary), the rest as native Arrow
    columns: an int id, a struct, a timestamp."""
    table = pa.table({
        "id": pa.array(list(range(len(rows))), pa.int64()),
        "messages": [json.dumps(row["messages"]) for row in rows],
        "tools": [json.dumps(row["tools"]) if "tools" in row else None for row in rows],
        "vars": [json.dumps(row["vars"]) for row in rows],
        "meta": pa.array([row["meta"] for row in rows]),
        "created": pa.array([NOW] * len(rows), pa.timestamp("us")),
    })
    pq.write_table(table, path, row_group_size=row_group_size)


def test_parquet_in_tokens_and_mask_out_keeps_column_types(tmp_path: Path, capsys: Any) -> None:
    from minijinja_py.chat import ChatTokenizer

    rows = good_rows(45)
    source = tmp_path / "chats.parquet"
    write_parquet(source, rows)
    output = tmp_path / "out.parquet"
    code = main(["dataset", str(TRAINING), str(source), str(output), "--tokenizer", str(LLAMA),
                 "--mask", "--variables-column", "vars", "--batch-size", "16", "--workers", "1",
                 "--quiet", *NOW_ARG])
    assert code in (0, 3), capsys.readouterr().err
    table = pq.read_table(output)
    kept = pq.read_schema(source)
    assert table.schema.names == ["id", "meta", "created", "input_ids", "attention_mask",
                                  "assistant_masks"]
    for name in ("id", "meta", "created"):
        assert table.schema.field(name).type == kept.field(name).type
    assert str(table.schema.field("input_ids").type) == "list<element: int32>"
    tokenizer = ChatTokenizer.from_pretrained(LLAMA, now=NOW)
    source_text = TRAINING.read_text(encoding="utf-8")
    got = {row["id"]: row for row in table.to_pylist()}
    failed = 0
    for index, row in enumerate(rows):
        want = expected_tokens(tokenizer, row, chat_template=source_text,
                               return_assistant_tokens_mask=True)
        if "input_ids" not in want:
            failed += 1
            assert index not in got
            continue
        assert got[index]["input_ids"] == want["input_ids"]
        assert got[index]["assistant_masks"] == want["assistant_masks"]
        assert got[index]["created"] == NOW and got[index]["meta"] == row["meta"]
    assert list(got) == sorted(got) and len(got) == len(rows) - failed
    assert len(read_jsonl(Path(str(output) + ".errors.jsonl"))) == failed


def test_folder_of_mixed_shards_to_parquet_and_json_array(tmp_path: Path, capsys: Any) -> None:
    rows = good_rows(30, with_variables=False, plain=True)
    shards = tmp_path / "data"
    shards.mkdir()
    (shards / "part-2.json").write_text(json.dumps(rows[20:]), encoding="utf-8")  # an array
    write_jsonl(shards / "part-0.jsonl", rows[:10] + [{"id": "broken", "messages": "?"}])
    table = pa.table({"id": [row["id"] for row in rows[10:20]],
                      "messages": [json.dumps(row["messages"]) for row in rows[10:20]]})
    pq.write_table(table, shards / "part-1.parquet")
    output = tmp_path / "out.parquet"
    code = main(["dataset", str(QWEN), str(shards), str(output), "--workers", "1",
                 "--batch-size", "4", "--quiet", "--add-generation-prompt", *NOW_ARG])
    assert code == 3
    written = pq.read_table(output).to_pylist()
    assert [row["id"] for row in written] == [row["id"] for row in rows]  # path order
    for index, (got, row) in enumerate(zip(written, rows)):
        if 10 <= index < 20:  # the Parquet shard has no tools or documents column
            row = {"messages": row["messages"]}
        want = expected_text(QWEN, row, variables_column=None, add_generation_prompt=True)
        assert got["text"] == want["text"], index
    [record] = read_jsonl(Path(str(output) + ".errors.jsonl"))
    assert (record["row"], record["file_row"], record["line"]) == (10, 10, 11)
    assert record["file"] == str(shards / "part-0.jsonl") and record["keys"] == {"id": "broken"}

    # the same folder through a glob, to JSON Lines, keeping the conversation
    output = tmp_path / "out.jsonl"
    code = main(["dataset", str(QWEN), str(shards / "part-[01].*"), str(output),
                 "--workers", "1", "--quiet", "--keep-conversation", *NOW_ARG])
    assert code == 3
    written = read_jsonl(output)
    assert [row["id"] for row in written] == [row["id"] for row in rows[:20]]
    for row, got in zip(rows[:10], written):  # the JSON Lines shard's rows: every column
        assert got == {**row, "text": got["text"]}
    assert any("documents" in row for row in written[:10])


def test_parquet_to_jsonl_writes_timestamps_as_iso_text(tmp_path: Path, capsys: Any) -> None:
    rows = good_rows(12, plain=True)
    source = tmp_path / "chats.parquet"
    write_parquet(source, rows, row_group_size=5)
    output = tmp_path / "out.jsonl"
    assert main(["dataset", str(QWEN), str(source), str(output), "--workers", "1",
                 "--variables-column", "vars", "--quiet", *NOW_ARG]) == 0
    written = read_jsonl(output)
    assert [row["id"] for row in written] == list(range(12))
    assert written[0]["created"] == NOW.isoformat() and written[0]["meta"] == rows[0]["meta"]
    assert [row["text"] for row in written] == [expected_text(QWEN, row)["text"] for row in rows]


def test_refusals_and_usage_errors(tmp_path: Path, capsys: Any) -> None:
    source = tmp_path / "chats.jsonl"
    write_jsonl(source, good_rows(5, plain=True))
    output = tmp_path / "out.jsonl"
    base = ["dataset", str(QWEN), str(source), str(output), "--workers", "1", "--quiet"]
    assert main(base) == 0
    capsys.readouterr()
    assert main(base) == 2  # a finished output is not replaced silently
    assert "exists" in capsys.readouterr().err and "--overwrite" in \
        capsys.readouterr().err + "--overwrite"
    assert main(base + ["--overwrite"]) == 0
    capsys.readouterr()
    cases = [
        (["dataset", str(QWEN), str(tmp_path / "missing.jsonl"), str(tmp_path / "o.jsonl")],
         2, "no such file or directory"),
        (["dataset", str(QWEN), str(source), str(tmp_path / "o.csv")], 2, "--format"),
        (["dataset", str(GEMMA), str(source), str(tmp_path / "o.jsonl"), "--mask"], 2,
         "model folder"),
        (["dataset", str(QWEN), str(source), str(tmp_path / "o.jsonl"), "--var", "x"], 2,
         "KEY=JSON"),
        (["dataset", str(LLAMA), str(source), str(tmp_path / "o.jsonl"), "--tokens"], 1,
         "no chat template"),
    ]
    for argv, code, message in cases:
        assert main(argv + ["--workers", "1"]) == code, argv
        assert message in capsys.readouterr().err, argv
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }", encoding="utf-8")
    assert main(["dataset", str(broken), str(source), str(tmp_path / "o.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "syntax error" in err and "line 1" in err
    assert not (tmp_path / "o.jsonl.checkpoint.json").exists()
    # one run at a time per output: a held lock (as a running run holds it) refuses another
    import fcntl

    with open(str(tmp_path / "o.jsonl") + ".lock", "wb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert main(["dataset", str(QWEN), str(source), str(tmp_path / "o.jsonl")]) == 2
        assert "another run is writing" in capsys.readouterr().err
    parquet = tmp_path / "chats.parquet"
    pq.write_table(pa.table({"id": [1], "conversation": ["[]"]}), parquet)
    assert main(["dataset", str(QWEN), str(parquet), str(tmp_path / "p.jsonl"), "--quiet"]) == 2
    assert "has no 'messages' column" in capsys.readouterr().err


@pytest.mark.parametrize("options,message", [
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--batch-size", "-3"], "--batch-size must be at least 1"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--errors", "{output}"], "the errors file cannot be the output file"),
    (["--errors", "{folder}/./sub/../out.jsonl"], "the errors file cannot be the output file"),
], ids=["batch-size-0", "batch-size-negative", "workers-0", "errors-is-output",
        "errors-is-output-spelled-otherwise"])
def test_option_values_are_refused_before_anything_is_written(tmp_path: Path, capsys: Any,
                                                              options: List[str],
                                                              message: str) -> None:
    source = tmp_path / "chats.jsonl"
    write_jsonl(source, good_rows(3, plain=True))
    output = tmp_path / "out.jsonl"
    (tmp_path / "sub").mkdir()
    options = [option.format(output=output, folder=tmp_path) for option in options]
    assert main(["dataset", str(QWEN), str(source), str(output), "--quiet"] + options) == 2
    assert message in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["chats.jsonl", "sub"]
    assert main(["dataset", str(QWEN), str(source), str(output), "--quiet", "--workers", "1",
                 "--batch-size", "1"]) == 0  # the smallest accepted values


def test_fail_fast_stops_at_the_first_bad_row(tmp_path: Path) -> None:
    rows = good_rows(40, with_variables=False, plain=True)
    rows.insert(23, {"id": "the-bad-one", "messages": [{"content": "no role"}]})
    source = tmp_path / "chats.jsonl"
    write_jsonl(source, rows)
    output = tmp_path / "out.jsonl"
    result = cli([str(QWEN), str(source), str(output), "--fail-fast", "--batch-size", "5",
                  "--workers", "2"])
    assert result.returncode == 1
    assert 'row 23 (' in result.stderr and 'id "the-bad-one"' in result.stderr
    assert "MalformedRowError: messages[0] has no 'role'" in result.stderr
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr
    assert not output.exists()  # the run did not finish
    state = json.loads(Path(str(output) + ".checkpoint.json").read_text(encoding="utf-8"))
    assert state["rows"] == 20  # the batches before the bad row's
    [record] = read_jsonl(Path(str(output) + ".errors.jsonl"))
    assert record["keys"] == {"id": "the-bad-one"}


def uninterrupted(args: List[str], output: Path) -> bytes:
    """The reference: the same run in this process, one worker, never stopped."""
    assert main(["dataset", *args, str(output), "--workers", "1", "--quiet"]) in (0, 3)
    return output.read_bytes()


@pytest.mark.parametrize("kind", ["jsonl-tokens", "parquet-text"])
def test_sigkill_then_resume_gives_identical_bytes(tmp_path: Path, kind: str,
                                                   capsys: Any) -> None:
    rows = mixed_rows(2000, bad_every=50)
    source = tmp_path / "chats.jsonl"
    write_jsonl(source, rows)
    if kind == "jsonl-tokens":
        args = [str(QWEN), str(source), "--mask", "--variables-column", "vars"]
        suffix = ".jsonl"
    else:
        args = [str(GEMMA), str(source), "--variables-column", "vars"]
        suffix = ".parquet"
    reference = uninterrupted(args, tmp_path / f"reference{suffix}")
    reference_errors = Path(str(tmp_path / f"reference{suffix}") + ".errors.jsonl").read_bytes()

    output = tmp_path / f"out{suffix}"
    checkpoint = Path(str(output) + ".checkpoint.json")
    # small batches: hundreds of checkpoints, so the kill lands mid-run with room to spare
    small = "10" if kind == "jsonl-tokens" else "5"
    command = [sys.executable, "-m", "minijinja_py", "dataset", *args, str(output),
               "--workers", "2", "--batch-size", small, "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
        batches = 0
        while time.monotonic() < deadline and process.poll() is None:
            try:
                batches = json.loads(checkpoint.read_text(encoding="utf-8"))["batches"]
            except (OSError, ValueError, KeyError):
                batches = 0
            if batches >= 10:
                break
            time.sleep(0.02)
        assert process.poll() is None, "the run ended before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    state = json.loads(checkpoint.read_text(encoding="utf-8"))
    assert 10 <= state["batches"] and 0 < state["rows"] < len(rows)
    assert not output.exists()

    # Parquet: resumed with other batches (the merged file depends on the rows alone)
    batch = "33" if kind == "parquet-text" else small
    result = cli([*args, str(output), "--workers", "2", "--batch-size", batch,
                  "--progress", "lines"])
    assert result.returncode == 3, result.stderr
    assert f"resuming after row {state['rows']:,}" in result.stderr
    assert output.read_bytes() == reference
    assert Path(str(output) + ".errors.jsonl").read_bytes() == reference_errors
    assert not checkpoint.exists() and not Path(str(output) + ".partial").exists()
    assert not Path(str(output) + ".parts").exists()

    # a checkpoint is only resumed by the same arguments
    output.unlink()
    checkpoint.write_text(json.dumps(state), encoding="utf-8")
    assert main(["dataset", *args, str(output), "--add-generation-prompt", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "other arguments (different: add_generation_prompt)" in err and "--overwrite" in err


def test_parquet_input_resumes_mid_file(tmp_path: Path, capsys: Any) -> None:
    """A --fail-fast stop leaves a checkpoint inside a Parquet file (inside a row group); the
    same arguments without --fail-fast (which does not change the output) and other batch
    sizes go on from there, to the bytes of a run that never stopped."""
    rows = good_rows(90, plain=True)
    rows[57]["messages"] = [{"content": "no role"}]
    source = tmp_path / "chats.parquet"
    write_parquet(source, rows, row_group_size=25)
    args = ["dataset", str(QWEN), str(source)]
    options = ["--variables-column", "vars", "--workers", "1", "--quiet", *NOW_ARG]
    assert main([*args, str(tmp_path / "reference.parquet"), *options]) == 3
    output = tmp_path / "out.parquet"
    assert main([*args, str(output), *options, "--batch-size", "8", "--fail-fast"]) == 1
    assert "row 57 (" in capsys.readouterr().err
    state = json.loads(Path(str(output) + ".checkpoint.json").read_text(encoding="utf-8"))
    assert state["rows"] == 56 and state["position"] == {"row": 56}
    assert main([*args, str(output), *options, "--batch-size", "11"]) == 3
    assert output.read_bytes() == (tmp_path / "reference.parquet").read_bytes()
    assert pq.read_table(output).column("id").to_pylist() == [n for n in range(90) if n != 57]
    assert Path(str(output) + ".errors.jsonl").read_bytes() == \
        (tmp_path / "reference.parquet.errors.jsonl").read_bytes()


def test_parquet_output_needs_one_type_per_column(tmp_path: Path, capsys: Any) -> None:
    rows = good_rows(12, plain=True, with_variables=False)
    for index, row in enumerate(rows):
        row["meta"] = index if index < 6 else f"text {index}"  # int, then str, a later batch
    source = tmp_path / "chats.jsonl"
    write_jsonl(source, rows)
    output = tmp_path / "out.parquet"
    assert main(["dataset", str(QWEN), str(source), str(output), "--batch-size", "6",
                 "--workers", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "rows 6-11 of" in err and "one type per column" in err and "JSON Lines" in err
    # the same rows as JSON Lines keep each value as it is
    assert main(["dataset", str(QWEN), str(source), str(tmp_path / "out.jsonl"), "--quiet",
                 "--workers", "1"]) == 0
    assert [row["meta"] for row in read_jsonl(tmp_path / "out.jsonl")] == \
        [row["meta"] for row in rows]

"""Ray Data integration (minijinja_py.chat.ray_data) on a real local Ray cluster.

The module starts a two-CPU local Ray instance once, writes real Parquet files (conversations
from the corpus contexts, generated ones, and rows that must fail), renders them with
``map_batches`` over two actors, and compares every row with what the single-process chat API
(``ChatTemplate.render`` / ``ChatTokenizer.apply_chat_template``) gives for the same
conversation: text, token ids, attention and assistant masks, and which rows fail.

Skipped (with the reason shown by ``pytest -rs``) only when ``ray`` is not installed.
"""

from __future__ import annotations

import faulthandler
import json
import random
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

ray = pytest.importorskip(
    "ray", reason="Ray Data tests need the optional 'ray' extra: pip install \".[ray]\"")
pytest.importorskip("ray.data", reason="Ray is installed without Ray Data: "
                    "pip install \".[ray]\"")
import pyarrow as pa  # noqa: E402  (installed with ray[data])
import pyarrow.parquet as pq  # noqa: E402

from corpus_support import CORPUS, FIXED_NOW, corpus_available, load_contexts  # noqa: E402

from minijinja_py.chat import ChatTemplate  # noqa: E402
from minijinja_py.chat.ray_data import (OUTPUT_TYPES, ChatTemplateBatches,  # noqa: E402
                                        render_dataset)

pytestmark = pytest.mark.skipif(not corpus_available(), reason="needs the shared corpus")

# A Qwen2.5-style template with tools and {% generation %} blocks, and the Qwen2 tokenizer.
TEMPLATE = CORPUS / "templates" / "seed-qwen-toml-generation.jinja"
TOKENIZER = CORPUS / "tokenizers" / "qwen2"
ROW_OPTIONS = ("add_generation_prompt", "continue_final_message")
# corpus contexts whose messages Arrow cannot store as one list<struct> type together with
# the others (list-valued content, tool arguments as objects): they go in the JSON file only
NOT_NATIVE = {"multimodal", "tool_use", "parallel_tool_calls", "injection_tools"}
ARROW_TYPES = {"text": pa.string(), "error": pa.string(), "input_ids": pa.list_(pa.int32()),
               "attention_mask": pa.list_(pa.int8()), "assistant_masks": pa.list_(pa.int8())}


# ---- data -------------------------------------------------------------------------------------
def _context_row(name: str, context: Dict[str, Any]) -> Dict[str, Any]:
    variables = {key: value for key, value in context.items()
                 if key not in ("messages", "tools", "documents")}
    return {"source": f"corpus:{name}", "messages": context["messages"],
            "tools": context.get("tools"), "documents": context.get("documents"),
            "variables": variables}


def _generated_rows(count: int, seed: int) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    words = ("weather", "Vienna", "toml", "config", "naïve", "日本語", "emoji 🙂", "a\nb",
             "<|im_end|>", "{{ not a tag }}", "json", "  spaced  ", "tab\tstop")
    tool = {"type": "function", "function": {
        "name": "lookup", "description": "Look something up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                       "required": ["q"]}}}
    rows = []
    for index in range(count):
        with_tools = rng.random() < 0.3
        messages: List[Dict[str, Any]] = []
        if rng.random() < 0.5:
            messages.append({"role": "system", "content": "Be brief. " + rng.choice(words)})
        for turn in range(rng.randint(1, 5)):
            messages.append({"role": "user",
                             "content": " ".join(rng.choice(words) for _ in range(4))})
            if with_tools and turn == 0:
                call_id = f"call{index}"
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": "lookup",
                                  "arguments": json.dumps({"q": rng.choice(words)})}}]})
                messages.append({"role": "tool", "tool_call_id": call_id, "name": "lookup",
                                 "content": json.dumps({"result": rng.choice(words)})})
            reply: Dict[str, Any] = {"role": "assistant",
                                     "content": " ".join(rng.choice(words) for _ in range(6))}
            if rng.random() < 0.2:
                reply["reasoning_content"] = "thinking about " + rng.choice(words)
            messages.append(reply)
        if rng.random() < 0.5:
            messages.append({"role": "user", "content": "and " + rng.choice(words)})
        rows.append({"source": f"generated:{index}", "messages": messages,
                     "tools": [tool] if with_tools else None, "documents": None,
                     "variables": {"add_generation_prompt": messages[-1]["role"] == "user"}})
    return rows


def _bad_rows() -> List[Dict[str, Any]]:
    """Rows that must fail, each with the error class it must report."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    return [
        # transformers' own refusal, raised by the chat layer in both paths
        {"source": "bad:empty", "messages": [], "tools": None, "documents": None,
         "variables": {}, "expect": "ChatTemplateValueError"},
        # the template fails: `messages[0].content + ...` on a system message without content
        {"source": "bad:template", "tools": [tool], "documents": None, "variables": {},
         "messages": [{"role": "system", "content": None}, {"role": "user", "content": "x"}],
         "expect": "UndefinedError"},
        # rows the batch processor refuses before rendering
        {"source": "bad:null", "messages": None, "tools": None, "documents": None,
         "variables": {}, "expect": "MalformedRowError"},
        {"source": "bad:no-role", "tools": None, "documents": None, "variables": {},
         "messages": [{"role": None, "content": "who am I"}], "expect": "MalformedRowError"},
        {"source": "bad:tools-json", "tools": "[{not json", "documents": None, "variables": {},
         "messages": [{"role": "user", "content": "x"}], "expect": "MalformedRowError"},
    ]


def _dump(value: Any) -> Optional[str]:
    if value is None or isinstance(value, str):  # a str is already (maybe broken) JSON text
        return value
    return json.dumps(value, ensure_ascii=False)


def _write(path: Path, rows: List[Dict[str, Any]], native_messages: bool) -> None:
    """Parquet with ``id``, ``source``, ``messages`` (a native list<struct> column, or JSON
    text), and ``tools``, ``documents``, ``variables`` as JSON text (tool schemas differ from
    row to row, which one Arrow struct type cannot hold without adding null keys)."""
    table = pa.table({
        "id": pa.array(range(len(rows)), pa.int64()),
        "source": [row["source"] for row in rows],
        "messages": ([row["messages"] for row in rows] if native_messages
                     else [_dump(row["messages"]) for row in rows]),
        "tools": pa.array([_dump(row["tools"]) for row in rows], pa.string()),
        "documents": pa.array([_dump(row["documents"]) for row in rows], pa.string()),
        "variables": pa.array([_dump(row["variables"]) for row in rows], pa.string()),
    })
    path.mkdir()
    for part, start in enumerate(range(0, len(rows), 16)):  # several files: several blocks
        pq.write_table(table.slice(start, 16), path / f"part-{part:03d}.parquet")


def _without_nulls(messages: Any) -> Any:
    if not isinstance(messages, list):
        return messages
    return [{key: value for key, value in message.items() if value is not None}
            for message in messages]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    contexts = load_contexts()
    corpus = [_context_row(name, context) for name, context in sorted(contexts.items())]
    generated = _generated_rows(40, seed=11)
    bad = _bad_rows()
    folder = tmp_path_factory.mktemp("ray-data")
    native_rows = [row for row in corpus if row["source"][7:] not in NOT_NATIVE] \
        + generated + [row for row in bad if row["source"] != "bad:no-role"]
    json_rows = corpus + generated + bad
    _write(folder / "native", native_rows, native_messages=True)
    _write(folder / "json", json_rows, native_messages=False)
    # Arrow stores a list<struct> with the union of all messages' keys (missing ones null);
    # transformers drops null-valued message keys, so what the native file holds is the same
    # conversation: checked here, so the comparisons below are with the original data.
    stored = pq.read_table(folder / "native").column("messages").to_pylist()
    assert [_without_nulls(m) for m in stored] == \
        [_without_nulls(row["messages"]) for row in native_rows]
    assert len(native_rows) >= 55 and len(json_rows) == 19 + 40 + 5
    return {"folder": folder, "native": native_rows, "json": json_rows}


@pytest.fixture(scope="module")
def cluster() -> Any:
    """A real local Ray instance, started for this module and shut down after it."""
    # Ray waits forever when a job cannot get its resources (actors reserving every CPU leave
    # none for the read tasks): rather than hang CI, dump the stacks and exit after 10 minutes.
    faulthandler.dump_traceback_later(600, exit=True)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    yield ray
    ray.shutdown()
    faulthandler.cancel_dump_traceback_later()


# ---- the single-process reference --------------------------------------------------------------
def _reference_call(row: Dict[str, Any], call: Any) -> Dict[str, Any]:
    variables = dict(row["variables"])
    options = {key: variables.pop(key) for key in ROW_OPTIONS if key in variables}
    try:
        return {"value": call(row["messages"], row["tools"], row["documents"], options,
                              variables), "error": None}
    except Exception as exc:  # what the row must report
        return {"value": None, "error": type(exc).__name__}


def _check_rows(output: List[Dict[str, Any]], rows: List[Dict[str, Any]], call: Any,
                columns: List[str]) -> Dict[str, int]:
    assert sorted(row["id"] for row in output) == list(range(len(rows)))  # none lost or doubled
    counts = {"ok": 0, "failed": 0, "refused": 0}
    for row in output:
        original = rows[row["id"]]
        assert row["source"] == original["source"]  # input columns travel with their row
        expected = _reference_call(original, call)
        error = row["error"]
        if "expect" in original:  # a row built to fail, with its class
            assert error is not None and error.startswith(original["expect"] + ":"), \
                (original["source"], error)
            if original["expect"] != "MalformedRowError":  # not only the processor's check:
                assert expected["error"] == original["expect"], original["source"]  # both fail
            counts["failed"] += 1
            assert all(row[column] is None for column in columns)
            continue
        if expected["error"] is not None:  # the chat API refuses it too (e.g. transformers'
            # "continue_final_message is not compatible with return_assistant_tokens_mask")
            assert error is not None and error.startswith(expected["error"] + ":"), \
                (original["source"], error)
            assert all(row[column] is None for column in columns)
            counts["refused"] += 1
            continue
        assert error is None, (original["source"], error)
        got = {column: row[column] for column in columns}
        assert got == expected["value"], original["source"]
        counts["ok"] += 1
    return counts


def _render(template: ChatTemplate) -> Any:
    def call(messages: Any, tools: Any, documents: Any, options: Dict[str, Any],
             variables: Dict[str, Any]) -> Dict[str, Any]:
        return {"text": template.render(messages, tools=tools, documents=documents,
                                        **options, **variables)}
    return call


def _encode(tokenizer: Any, source: str) -> Any:
    def call(messages: Any, tools: Any, documents: Any, options: Dict[str, Any],
             variables: Dict[str, Any]) -> Dict[str, Any]:
        encoding = tokenizer.apply_chat_template(
            messages, tools=tools, documents=documents, chat_template=source,
            return_assistant_tokens_mask=True, **options, **variables)
        return {"input_ids": list(encoding["input_ids"]),
                "attention_mask": list(encoding["attention_mask"]),
                "assistant_masks": list(encoding["assistant_masks"])}
    return call


# ---- tests ------------------------------------------------------------------------------------
def test_render_dataset_text_matches_single_process(cluster: Any, data: Dict[str, Any]) -> None:
    ds = ray.data.read_parquet(str(data["folder"] / "native"))  # one block (small files)
    rendered = render_dataset(ds, str(TEMPLATE), concurrency=2, batch_size=8, rows_per_block=16,
                              variables_column="variables", now=FIXED_NOW)
    assert [field for field in rendered.schema().names][-2:] == ["text", "error"]
    output = rendered.take_all()
    template = ChatTemplate(TEMPLATE.read_text(encoding="utf-8"), now=FIXED_NOW)
    counts = _check_rows(output, data["native"], _render(template), ["text"])
    assert counts == {"ok": len(data["native"]) - 4, "failed": 4, "refused": 0}


def test_map_batches_tokens_and_masks_match_chat_tokenizer(cluster: Any,
                                                           data: Dict[str, Any]) -> None:
    from minijinja_py.chat import ChatTokenizer

    ds = ray.data.read_parquet(str(data["folder"] / "json")).repartition(4)
    encoded = ds.map_batches(
        ChatTemplateBatches, batch_format="pyarrow", batch_size=16,
        compute=ray.data.ActorPoolStrategy(size=2), num_cpus=0.5,
        fn_constructor_kwargs={"template": str(TEMPLATE), "tokenizer": str(TOKENIZER),
                               "mask": True, "variables_column": "variables", "now": FIXED_NOW})
    encoded = encoded.materialize()
    schema = encoded.schema().base_schema
    assert schema.field("input_ids").type == pa.list_(pa.int32())
    assert schema.field("assistant_masks").type == pa.list_(pa.int8())
    output = encoded.take_all()
    tokenizer = ChatTokenizer.from_pretrained(TOKENIZER, now=FIXED_NOW)
    source = TEMPLATE.read_text(encoding="utf-8")
    counts = _check_rows(output, data["json"], _encode(tokenizer, source),
                         ["input_ids", "attention_mask", "assistant_masks"])
    assert counts == {"ok": len(data["json"]) - 6, "failed": 5, "refused": 1}  # continue_final
    masked = sum(sum(row["assistant_masks"]) for row in output if row["error"] is None)
    assert masked > 1000  # the generation blocks did mark tokens


def test_numpy_batches_and_error_filter(cluster: Any, data: Dict[str, Any]) -> None:
    """Ray's default batch format (dicts of numpy object arrays, with nested arrays inside the
    list<struct> cells) gives the same text, and the failed rows are found with a filter."""
    ds = ray.data.read_parquet(str(data["folder"] / "native")).repartition(4)
    rendered = ds.map_batches(
        ChatTemplateBatches, batch_format="numpy", batch_size=8,
        compute=ray.data.ActorPoolStrategy(size=2), num_cpus=0.5,
        fn_constructor_kwargs={"template": str(TEMPLATE), "variables_column": "variables",
                               "now": FIXED_NOW}).materialize()
    template = ChatTemplate(TEMPLATE.read_text(encoding="utf-8"), now=FIXED_NOW)
    counts = _check_rows(rendered.take_all(), data["native"], _render(template), ["text"])
    assert counts == {"ok": len(data["native"]) - 4, "failed": 4, "refused": 0}
    try:  # Ray >= 2.47: a predicate Ray evaluates on Arrow, no Python per row
        from ray.data.expressions import col
        failed = rendered.filter(expr=col("error").is_not_null())
    except ImportError:
        failed = rendered.filter(lambda row: row["error"] is not None)
    assert sorted(row["source"] for row in failed.take_all()) == \
        ["bad:empty", "bad:null", "bad:template", "bad:tools-json"]
    assert rendered.count() == len(data["native"])


# ---- the batch function itself, in this process (no cluster) ---------------------------------
def _bad_table() -> Any:
    rows = _bad_rows()
    return pa.table({"source": [row["source"] for row in rows],
                     "messages": [_dump(row["messages"]) for row in rows],
                     "tools": [_dump(row["tools"]) for row in rows]})


def test_a_batch_where_every_row_fails_keeps_the_column_types() -> None:
    """An all-null column would otherwise be Arrow's null type, and a Parquet dataset written
    from such blocks has two schemas (reading it back fails)."""
    for options in ({}, {"tokenizer": str(TOKENIZER), "mask": True}):
        batches = ChatTemplateBatches(str(TEMPLATE), **options)
        table = batches(_bad_table())
        assert table.column_names[:3] == ["source", "messages", "tools"]
        assert {name: table.schema.field(name).type for name in table.column_names[3:]} == \
            {name: ARROW_TYPES[name] for name in batches._output_columns}
        assert table.column("error").null_count == 0
        empty = batches(_bad_table().slice(0, 0))
        assert empty.schema == table.schema and empty.num_rows == 0


def test_numpy_and_pandas_batches_in_process() -> None:
    import numpy as np

    table = _bad_table().append_column(
        "messages_native", pa.array([[{"role": "user", "content": "hi", "extra": None}]] * 5))
    batches = ChatTemplateBatches(str(TEMPLATE), messages_column="messages_native",
                                  tools_column=None)
    expected = batches(table).column("text").to_pylist()
    assert expected == ["<|im_start|>user\nhi<|im_end|>\n"] * 5
    def object_array(values: List[Any]) -> Any:  # what Ray's numpy format holds
        array = np.empty(len(values), dtype=object)
        array[:] = [np.array(value, dtype=object) if isinstance(value, list) else value
                    for value in values]
        return array

    as_numpy = {name: object_array(table.column(name).to_pylist())
                for name in table.column_names}
    assert batches(as_numpy).column("text").to_pylist() == expected
    assert batches(table.to_pandas()).column("text").to_pylist() == expected
    with pytest.raises(ValueError, match="rename or drop"):
        batches(table.append_column("text", pa.array(["x"] * 5)))


def test_a_template_that_does_not_compile_fails_the_actor_not_every_row() -> None:
    """Ray runs the constructor once per actor: a broken template or a missing model folder
    raises there (the job stops with an ActorDiedError carrying this message) instead of
    turning every row into an error."""
    from minijinja_py import TemplateSyntaxError

    with pytest.raises(TemplateSyntaxError, match="unexpected '}'"):
        ChatTemplateBatches("{% for m in messages %}{{ m.content }")
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        ChatTemplateBatches(str(TEMPLATE), tokenizer=str(TEMPLATE.parent / "no-such-folder"))


def test_options_are_checked_in_the_driver(cluster: Any) -> None:
    ds = ray.data.from_items([{"messages": [{"role": "user", "content": "x"}]}])
    with pytest.raises(ValueError, match="need"):
        render_dataset(ds, "{{ messages }}", mask=True)  # a mask needs token ids
    with pytest.raises(ValueError, match="errors='column'"):
        ChatTemplateBatches("{{ messages }}", errors="raise")


def test_output_types_cover_the_processor_columns() -> None:
    from minijinja_py.chat.dataset import ChatBatchProcessor

    text = ChatBatchProcessor("{{ 1 }}")
    tokens = ChatBatchProcessor("{{ 1 }}", tokenizer=str(TOKENIZER), mask=True)
    for column in text.output_columns + tokens.output_columns + ("error",):
        assert column in OUTPUT_TYPES and column in ARROW_TYPES

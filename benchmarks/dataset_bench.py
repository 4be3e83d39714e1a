#!/usr/bin/env python3
"""Benchmark rendering and encoding a whole dataset of conversations.

Generates N conversations (default 100,000: 1-40 messages, a quarter with tools and tool-call
rounds, a few empty ones that must fail) into a Parquet file, then runs, in the same run on the
same machine, each engine over it and reports rows per second:

- **transformers**: ``tokenizer.apply_chat_template`` per row inside
  ``datasets.Dataset.map(batched=True, num_proc=N)``, in a throwaway virtual environment
  (``--bench-venv``, default ``/tmp/bench-venv``; created with transformers, tokenizers,
  datasets and jinja2 when missing: transformers is never a dependency of this project);
- **datasets.map**: the same ``Dataset.map`` harness with
  :class:`~minijinja_py.chat.dataset.ChatBatchProcessor` as the function, same ``num_proc``;
- **CLI**: ``minijinja-py dataset TEMPLATE in.parquet out.parquet --workers N``;
- **Ray**: :func:`minijinja_py.chat.ray_data.render_dataset` with ``concurrency=N`` on a local
  Ray instance (started by the run, not timed; only the execution is).

for two modes: ``text`` (the prompt) and ``tokens`` (ids + attention mask + assistant mask
from ``{% generation %}``), with N = 1 and N = all cores for the minijinja_py engines and
N = all cores for transformers. Every output row (text, or ids and both masks) is compared
with transformers' by digest; a difference is a failure (exit status 1).

Memory: the peak of the summed PSS (proportional set size: shared pages counted once) of each
run's whole process tree (parent, pool workers, Ray's processes), polled every 0.25 s, at
``--memory-rows`` (10,000) and at N rows, in tokens mode with all cores: flat means the engine
streams.

    python benchmarks/dataset_bench.py                      # 100,000 rows: about 30 minutes
    python benchmarks/dataset_bench.py --rows 20000         # smaller
    python benchmarks/dataset_bench.py --quick              # 2,000 rows, a smoke test
    python benchmarks/dataset_bench.py --engines cli,ray --modes tokens --json out.json

Needs (in this interpreter) minijinja_py with the tokenizers, parquet and ray extras and
``datasets``. Linux only (PSS is read from /proc). ``TOKENIZERS_PARALLELISM=false`` for every
run: all engines parallelise by processes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_CORPUS = os.path.join(REPO, "..", "shared", "corpus")
DEFAULT_TEMPLATE = "seed-qwen-toml-generation"  # Qwen2.5-style: tools, {% generation %}
DEFAULT_TOKENIZER = "qwen2"
TRANSFORMERS_VERSION = "5.24.0"
BATCH_SIZE = 256
SEED = 20240611
MODES = ("text", "tokens")
ENGINES = ("transformers", "datasets", "cli", "ray")


# ---- data ---------------------------------------------------------------------------------------
WORDS = ("the a of to and in is it that for on with as was at by this be from or have an are "
         "model data config server request value error table query result file user time "
         "please could you explain why how does work when should I use between difference "
         "über café 東京 naïve résumé — 12345 3.14 {x: [1, 2]} <b>bold</b> `code` "
         "TOML YAML JSON CSV XML").split()
TOOLS = [
    {"type": "function", "function": {
        "name": f"tool_{index}", "description": f"Does thing number {index}.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What to look up."},
            "limit": {"type": "integer", "description": "At most this many."},
            **({"unit": {"type": "string", "enum": ["c", "f"]}} if index % 2 else {})},
            "required": ["query"]}}}
    for index in range(8)]


def _text(rng: random.Random, low: int, high: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
    if rng.random() < 0.1:
        words.append("\n```python\nprint('hello')\n```\n")
    return " ".join(words)


def conversation(rng: random.Random, index: int) -> Dict[str, Any]:
    """One row: ``id``, ``messages`` (1-40), ``tools`` (JSON text or null)."""
    if rng.random() < 0.0005:  # a row that must fail: an empty conversation
        return {"id": index, "messages": [], "tools": None}
    length = rng.randint(1, 40)
    tools = rng.sample(TOOLS, rng.randint(1, 3)) if rng.random() < 0.25 else None
    messages: List[Dict[str, Any]] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _text(rng, 5, 40)})
    while len(messages) < length:
        messages.append({"role": "user", "content": _text(rng, 3, 60)})
        if len(messages) >= length:
            break
        if tools and rng.random() < 0.3 and len(messages) + 3 <= length:
            calls = []
            for number in range(rng.randint(1, 2)):
                tool = rng.choice(tools)["function"]["name"]
                calls.append({"id": f"call_{index}_{len(messages)}_{number}", "type": "function",
                              "function": {"name": tool, "arguments": json.dumps(
                                  {"query": _text(rng, 1, 5), "limit": rng.randint(1, 9)})}})
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            for call in calls:
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "name": call["function"]["name"],
                                 "content": json.dumps({"result": _text(rng, 2, 20)})})
        messages.append({"role": "assistant", "content": _text(rng, 5, 120)})
    return {"id": index, "messages": messages[:max(length, 1)],
            "tools": json.dumps(tools) if tools else None}


def write_data(path: str, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(SEED)
    writer = None
    chunk = 10_000
    for start in range(0, rows, chunk):
        batch = [conversation(rng, index) for index in range(start, min(rows, start + chunk))]
        schema = pa.schema([
            ("id", pa.int64()),
            ("messages", pa.list_(pa.struct([
                ("role", pa.string()), ("content", pa.string()),
                ("tool_calls", pa.list_(pa.struct([
                    ("id", pa.string()), ("type", pa.string()),
                    ("function", pa.struct([("name", pa.string()),
                                            ("arguments", pa.string())]))]))),
                ("tool_call_id", pa.string()), ("name", pa.string())]))),
            ("tools", pa.string())])
        table = pa.Table.from_pylist(batch, schema=schema)
        if writer is None:
            writer = pq.ParquetWriter(path, schema)
        writer.write_table(table, row_group_size=2_000)
    if writer is not None:
        writer.close()


# ---- digests (the same function in every environment) ------------------------------------------
def digest(mode: str, row: Dict[str, Any]) -> Optional[str]:
    if mode == "text":
        value = row.get("text")
        if value is None:
            return None
        data = value.encode("utf-8", "surrogatepass")
    else:
        if row.get("input_ids") is None:
            return None
        data = json.dumps([list(row["input_ids"]), list(row["attention_mask"]),
                           list(row["assistant_masks"])]).encode()
    return hashlib.md5(data).hexdigest()[:16]


def write_digests(path: str, pairs: List[Tuple[int, Optional[str]]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(sorted(pairs, key=lambda pair: pair[0]), handle)


# ---- workers (run as subprocesses: `dataset_bench.py --worker KIND ...`) -------------------------
def worker_datasets(args: argparse.Namespace) -> None:
    """``Dataset.map(num_proc=N)`` with transformers' apply_chat_template or the processor."""
    import datasets

    datasets.disable_progress_bars()
    cache = tempfile.mkdtemp(prefix="dsbench-hf-")
    try:
        ds = datasets.Dataset.from_parquet(args.input, cache_dir=cache)
        source = open(args.template, encoding="utf-8").read()
        if args.impl == "transformers":
            function = _transformers_function(args, source)
        else:
            from minijinja_py.chat.dataset import ChatBatchProcessor
            function = OutputsOnly(ChatBatchProcessor(
                args.template, tokenizer=args.tokenizer if args.mode == "tokens" else None,
                mask=args.mode == "tokens"))
        # the output types, given: datasets refuses a column whose first values written are
        # all None (``error`` on a run of rows that all rendered)
        if args.mode == "text":
            outputs = {"text": datasets.Value("string")}
        else:
            outputs = {"input_ids": datasets.List(datasets.Value("int32")),
                       "attention_mask": datasets.List(datasets.Value("int8")),
                       "assistant_masks": datasets.List(datasets.Value("int8"))}
        features = datasets.Features({"id": datasets.Value("int64"), **outputs,
                                      "error": datasets.Value("string")})
        cpu_before = _cpu_seconds()
        started = time.perf_counter()
        mapped = ds.map(function, batched=True, batch_size=BATCH_SIZE,
                        num_proc=args.workers if args.workers > 1 else None,
                        load_from_cache_file=False, remove_columns=["messages", "tools"],
                        features=features, desc=None)
        seconds = time.perf_counter() - started
        cpu = _cpu_seconds() - cpu_before
        pairs = []
        for batch in mapped.with_format("arrow").iter(batch_size=2_000):
            for row in batch.to_pylist():
                pairs.append((row["id"], digest(args.mode, row)))
        write_digests(args.digests, pairs)
        print(json.dumps({"seconds": seconds, "cpu": cpu, "rows": len(mapped)}))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _cpu_seconds() -> float:
    """User + system CPU of this process and of its children that have ended (the pool's)."""
    import resource

    mine = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


class OutputsOnly:
    """The processor's new columns only (it returns its input columns too; transformers'
    function returns only what it made, so both write the same columns)."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor

    def __call__(self, batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        result = self.processor(batch)
        return {name: result[name] for name in self.processor.output_columns + ("error",)}


def _transformers_function(args: argparse.Namespace, source: str) -> Any:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.tokenizer)
    mode = args.mode

    def function(batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        names = ["text"] if mode == "text" else ["input_ids", "attention_mask",
                                                 "assistant_masks"]
        out: Dict[str, List[Any]] = {name: [] for name in names + ["error"]}
        for messages, tools in zip(batch["messages"], batch["tools"]):
            try:
                tools = json.loads(tools) if tools is not None else None
                if mode == "text":
                    values = {"text": tokenizer.apply_chat_template(
                        messages, tools=tools, chat_template=source, tokenize=False)}
                else:
                    encoding = tokenizer.apply_chat_template(
                        messages, tools=tools, chat_template=source, tokenize=True,
                        return_dict=True, return_assistant_tokens_mask=True)
                    values = {name: list(encoding[name]) for name in names}
                error = None
            except Exception as exc:  # a row that fails keeps its place, as in the processor
                values = {name: None for name in names}
                error = f"{type(exc).__name__}: {exc}"
            for name in names:
                out[name].append(values[name])
            out["error"].append(error)
        return out

    return function


def worker_ray(args: argparse.Namespace) -> None:
    import ray

    from minijinja_py.chat.ray_data import render_dataset

    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    out = tempfile.mkdtemp(prefix="dsbench-ray-")
    try:
        options: Dict[str, Any] = {}
        if args.mode == "tokens":
            options = {"tokenizer": args.tokenizer, "mask": True}
        started = time.perf_counter()
        ds = ray.data.read_parquet(args.input)
        rendered = render_dataset(ds, args.template, concurrency=args.workers,
                                  batch_size=BATCH_SIZE, **options)
        rendered.drop_columns(["messages", "tools"]).write_parquet(out)
        seconds = time.perf_counter() - started
        import pyarrow.parquet as pq

        # read back a batch at a time: the whole output as Python lists would be the run's
        # peak memory (11 GB of ids at 100,000 rows), not Ray's
        pairs = []
        for name in sorted(os.listdir(out)):
            for batch in pq.ParquetFile(os.path.join(out, name)).iter_batches(batch_size=2_000):
                pairs.extend((row["id"], digest(args.mode, row)) for row in batch.to_pylist())
        write_digests(args.digests, pairs)
        print(json.dumps({"seconds": seconds, "rows": len(pairs)}))
    finally:
        ray.shutdown()
        shutil.rmtree(out, ignore_errors=True)


# ---- measuring a subprocess tree ---------------------------------------------------------------
def _processes() -> Tuple[Dict[int, List[int]], Dict[int, Tuple[int, int]]]:
    """The process tree (parent -> children) and each process's (start time, CPU ticks)."""
    tree: Dict[int, List[int]] = {}
    stats: Dict[int, Tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # fields from the 3rd (state) on
        tree.setdefault(int(fields[1]), []).append(int(name))
        stats[int(name)] = (int(fields[19]), int(fields[11]) + int(fields[12]))
    return tree, stats


def _tree_sample(root: int) -> Tuple[int, int, Dict[Tuple[int, int], int]]:
    """(PSS, PSS not backed by files: anonymous + shared memory) of ``root`` and all its
    descendants, in bytes, and the CPU ticks of each of them by (pid, start time).
    File-backed pages (mapped Arrow files, libraries) are page cache the kernel can drop;
    Ray's object store is shared memory and counts."""
    tree, stats = _processes()
    total = resident = 0
    cpu: Dict[Tuple[int, int], int] = {}
    stack, seen = [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(tree.get(pid, []))
        if pid in stats:
            cpu[(pid, stats[pid][0])] = stats[pid][1]
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                    elif line.startswith(("Pss_Anon:", "Pss_Shmem:")):
                        resident += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total, resident, cpu


def run_measured(command: List[str], env: Dict[str, str]
                 ) -> Tuple[int, str, str, float, Tuple[int, int], float]:
    """Run ``command``; return (exit code, stdout, stderr, wall seconds, (peak tree PSS, peak
    not-file-backed PSS), CPU seconds of the whole tree: each process's last value seen,
    polled every 0.25 s, so a process loses at most its last quarter second)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=env, text=True, start_new_session=True)
    peak = [0, 0]
    ticks: Dict[Tuple[int, int], int] = {}
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            total, resident, cpu = _tree_sample(process.pid)
            peak[0], peak[1] = max(peak[0], total), max(peak[1], resident)
            ticks.update(cpu)
            done.wait(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        stdout, stderr = process.communicate()
    except BaseException:  # interrupted: take the run's whole process group down with us
        _kill_group(process)
        raise
    finally:
        done.set()
        poller.join()
    cpu_seconds = sum(ticks.values()) / os.sysconf("SC_CLK_TCK")
    return (process.returncode, stdout, stderr, time.perf_counter() - started,
            (peak[0], peak[1]), cpu_seconds)


def _kill_group(process: "subprocess.Popen[str]") -> None:
    import signal

    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
            process.wait(wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _load_average() -> float:
    """The 1-minute load average: how busy the machine was (other work included)."""
    with open("/proc/loadavg", encoding="ascii") as handle:
        return float(handle.read().split()[0])


# ---- the orchestrator --------------------------------------------------------------------------
def ensure_bench_venv(path: str, version: str) -> str:
    python = os.path.join(path, "bin", "python")
    check = [python, "-c", "import transformers, datasets, jinja2; print(transformers.__version__)"]
    if os.path.exists(python):
        found = subprocess.run(check, capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout.strip()
    print(f"creating {path} with transformers=={version} (a throwaway environment)",
          file=sys.stderr)
    subprocess.run([sys.executable.replace(sys.prefix, sys.base_prefix)
                    if os.path.exists(sys.executable.replace(sys.prefix, sys.base_prefix))
                    else "python3", "-m", "venv", path], check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", f"transformers=={version}",
                    "tokenizers", "datasets", "jinja2"], check=True)
    return subprocess.run(check, capture_output=True, text=True, check=True).stdout.strip()


class Bench:
    def __init__(self, args: argparse.Namespace, work: str) -> None:
        self.args, self.work = args, work
        self.env = dict(os.environ, TOKENIZERS_PARALLELISM="false",
                        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                        MINIJINJA_PY_CACHE_DIR=os.path.join(work, "parse-cache"),
                        RAY_DEDUP_LOGS="0")
        self.results: List[Dict[str, Any]] = []
        self.failures: List[str] = []
        self.reference: Dict[Tuple[str, int], Dict[int, Optional[str]]] = {}

    def run(self, engine: str, mode: str, workers: int, data: str, rows: int) -> Dict[str, Any]:
        digests = os.path.join(self.work, f"{engine}-{mode}-{workers}-{rows}.json")
        common = ["--mode", mode, "--workers", str(workers), "--input", data,
                  "--template", self.args.template_path, "--tokenizer", self.args.tokenizer_path,
                  "--digests", digests]
        me = os.path.abspath(__file__)
        if engine == "transformers":
            command = [self.args.bench_python, me, "--worker", "datasets", "--impl",
                       "transformers"] + common
        elif engine == "datasets":
            command = [sys.executable, me, "--worker", "datasets", "--impl", "minijinja"] \
                + common
        elif engine == "ray":
            command = [sys.executable, me, "--worker", "ray"] + common
        else:
            output = os.path.join(self.work, f"cli-{mode}-{workers}-{rows}.parquet")
            command = [sys.executable, "-m", "minijinja_py", "dataset", self.args.template_path,
                       data, output, "--workers", str(workers), "--batch-size",
                       str(BATCH_SIZE), "--overwrite", "--quiet"]
            if mode == "tokens":
                command += ["--tokenizer", self.args.tokenizer_path, "--mask"]
        print(f"  {engine:12} {mode:6} N={workers} rows={rows:,} ...", file=sys.stderr,
              end="", flush=True)
        load_before = _load_average()
        code, stdout, stderr, wall, (peak, resident), cpu = run_measured(command, self.env)
        result: Dict[str, Any] = {"engine": engine, "mode": mode, "workers": workers,
                                  "rows": rows, "wall": wall, "peak_pss": peak,
                                  "peak_resident": resident,
                                  "load": max(load_before, _load_average())}
        if engine == "cli":
            if code not in (0, 3):  # 3: finished, some rows failed (they must: empty chats)
                raise RuntimeError(f"{' '.join(command)} exited {code}:\n{stderr}")
            result["seconds"] = wall  # the whole command, process start included
            result["cpu"] = cpu
            pairs = self._cli_digests(output, mode)
            write_digests(digests, pairs)
            os.remove(output)
        else:
            if code != 0:
                raise RuntimeError(f"{' '.join(command)} exited {code}:\n{stderr[-4000:]}")
            reported = json.loads(stdout.strip().splitlines()[-1])
            result["seconds"] = reported["seconds"]
            result["cpu"] = reported.get("cpu")  # None for Ray: its own processes run too
        result["rows_per_s"] = rows / result["seconds"]
        result["rows_per_cpu_s"] = rows / result["cpu"] if result["cpu"] else None
        with open(digests, encoding="utf-8") as handle:
            found = {row_id: value for row_id, value in json.load(handle)}
        os.remove(digests)
        result.update(self._compare(engine, mode, rows, found))
        print(f" {result['rows_per_s']:,.0f} rows/s, load {result['load']:.1f}, "
              f"peak {peak / 2**20:,.0f} MiB ({resident / 2**20:,.0f} not file-backed), "
              f"{result['failed_rows']} failed rows, {result['mismatches']} mismatches",
              file=sys.stderr)
        self.results.append(result)
        return result

    def _cli_digests(self, output: str, mode: str) -> List[Tuple[int, Optional[str]]]:
        import pyarrow.parquet as pq

        pairs: List[Tuple[int, Optional[str]]] = []
        for batch in pq.ParquetFile(output).iter_batches(batch_size=2_000):
            pairs.extend((row["id"], digest(mode, row)) for row in batch.to_pylist())
        with open(output + ".errors.jsonl", encoding="utf-8") as handle:
            for line in handle:  # failed rows are in the errors file, keyed by id
                record = json.loads(line)
                key = record.get("key") or record.get("keys") or {}
                row_id = key.get("id") if isinstance(key, dict) else record.get("id")
                pairs.append((row_id, None))
        os.remove(output + ".errors.jsonl")
        return pairs

    def _compare(self, engine: str, mode: str, rows: int,
                 found: Dict[int, Optional[str]]) -> Dict[str, Any]:
        failed = sum(1 for value in found.values() if value is None)
        reference = self.reference.get((mode, rows))
        if engine == "transformers" or reference is None:
            if engine == "transformers":
                self.reference[(mode, rows)] = found
            return {"failed_rows": failed, "mismatches": "n/a" if engine != "transformers"
                    else 0}
        mismatches = sum(1 for row_id in range(rows) if found.get(row_id, "missing")
                         != reference.get(row_id, "missing"))
        if mismatches:
            self.failures.append(f"{engine} {mode}: {mismatches} rows differ from transformers")
        return {"failed_rows": failed, "mismatches": mismatches}


def _table(results: List[Dict[str, Any]], cores: int) -> str:
    lines = ["| mode | engine | N | rows | s | rows/s | vs transformers | scaling 1→N | "
             "rows/CPU-s | vs transformers (CPU) | peak PSS (not file-backed) | load | "
             "same as transformers |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    by_key = {(r["engine"], r["mode"], r["workers"], r["rows"]): r for r in results}
    for r in results:
        base = by_key.get(("transformers", r["mode"], cores, r["rows"]))
        ratio = f"{r['rows_per_s'] / base['rows_per_s']:.2f}x" if base and \
            r["engine"] != "transformers" and r["workers"] == cores else ""
        one = by_key.get((r["engine"], r["mode"], 1, r["rows"]))
        scaling = f"{r['rows_per_s'] / one['rows_per_s']:.2f}x" if one and r["workers"] > 1 \
            else ""
        per_cpu = f"{r['rows_per_cpu_s']:,.0f}" if r.get("rows_per_cpu_s") else "n/a"
        cpu_ratio = f"{r['rows_per_cpu_s'] / base['rows_per_cpu_s']:.2f}x" if base and \
            r["engine"] != "transformers" and r.get("rows_per_cpu_s") and \
            base.get("rows_per_cpu_s") else ""
        same = "reference" if r["engine"] == "transformers" else (
            "yes" if r["mismatches"] == 0 else f"**{r['mismatches']} differ**"
            if r["mismatches"] != "n/a" else "n/a")
        lines.append(f"| {r['mode']} | {r['engine']} | {r['workers']} | {r['rows']:,} | "
                     f"{r['seconds']:.1f} | {r['rows_per_s']:,.0f} | {ratio} | {scaling} | "
                     f"{per_cpu} | {cpu_ratio} | "
                     f"{r['peak_pss'] / 2**20:,.0f} ({r['peak_resident'] / 2**20:,.0f}) MiB | "
                     f"{r['load']:.1f} | {same} |")
    return "\n".join(lines)


def _memory_table(results: List[Dict[str, Any]], small: int, large: int) -> str:
    lines = [f"| engine (tokens, all cores) | peak PSS at {small:,} rows | at {large:,} rows | "
             f"ratio | not file-backed at {small:,} | at {large:,} | ratio |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    most = max(x["workers"] for x in results)
    by_key = {(r["engine"], r["rows"]): r for r in results
              if r["mode"] == "tokens" and r["workers"] == most}
    for engine in ENGINES:
        a, b = by_key.get((engine, small)), by_key.get((engine, large))
        if a and b:
            lines.append(f"| {engine} | {a['peak_pss'] / 2**20:,.0f} MiB | "
                         f"{b['peak_pss'] / 2**20:,.0f} MiB | "
                         f"{b['peak_pss'] / a['peak_pss']:.2f} | "
                         f"{a['peak_resident'] / 2**20:,.0f} MiB | "
                         f"{b['peak_resident'] / 2**20:,.0f} MiB | "
                         f"{b['peak_resident'] / a['peak_resident']:.2f} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--scaling-rows", type=int, default=20_000,
                        help="the size at which 1 and all workers are compared (0: --rows)")
    parser.add_argument("--memory-rows", type=int, default=10_000,
                        help="the smaller size of the memory comparison (0: skip it)")
    parser.add_argument("--quick", action="store_true", help="2,000 rows, memory at 500")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--template", default=DEFAULT_TEMPLATE,
                        help="a corpus template slug (default: %(default)s)")
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER,
                        help="a corpus tokenizer family (default: %(default)s)")
    parser.add_argument("--bench-venv", default="/tmp/bench-venv")
    parser.add_argument("--transformers-version", default=TRANSFORMERS_VERSION)
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(),
                                                           "minijinja_py-dataset-bench"),
                        help="where the generated Parquet files are kept between runs")
    parser.add_argument("--json", help="also write every result to this file")
    # internal: one measured run, in a subprocess
    parser.add_argument("--worker", choices=("datasets", "ray"), help=argparse.SUPPRESS)
    parser.add_argument("--impl", choices=("transformers", "minijinja"), help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--template-path", dest="template_path", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer-path", dest="tokenizer_path", help=argparse.SUPPRESS)
    parser.add_argument("--digests", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:  # the subprocess side: --template/--tokenizer are paths here
        args.template_path = args.template_path or args.template
        args.tokenizer_path = args.tokenizer_path or args.tokenizer
        args.template, args.tokenizer = args.template_path, args.tokenizer_path
        (worker_datasets if args.worker == "datasets" else worker_ray)(args)
        return 0

    if args.quick:
        args.rows, args.scaling_rows, args.memory_rows = 2_000, 1_000, 500
    args.scaling_rows = min(args.scaling_rows or args.rows, args.rows)
    corpus = os.path.abspath(args.corpus)
    args.template_path = os.path.join(corpus, "templates", f"{args.template}.jinja")
    args.tokenizer_path = os.path.join(corpus, "tokenizers", args.tokenizer)
    modes = [mode for mode in args.modes.split(",") if mode]
    engines = [engine for engine in args.engines.split(",") if engine]
    cores = os.cpu_count() or 1
    transformers_version = None
    if "transformers" in engines:
        transformers_version = ensure_bench_venv(args.bench_venv, args.transformers_version)
        args.bench_python = os.path.join(args.bench_venv, "bin", "python")

    os.makedirs(args.data_dir, exist_ok=True)
    sizes = sorted({args.rows, args.scaling_rows} | ({args.memory_rows} if args.memory_rows
                                                      else set()), reverse=True)
    data = {}
    for rows in sizes:
        data[rows] = os.path.join(args.data_dir, f"conversations-{rows}-{SEED}.parquet")
        if not os.path.exists(data[rows]):
            print(f"generating {rows:,} conversations -> {data[rows]}", file=sys.stderr)
            write_data(data[rows] + ".tmp", rows)
            os.replace(data[rows] + ".tmp", data[rows])

    work = tempfile.mkdtemp(prefix="dsbench-")
    bench = Bench(args, work)
    try:
        for mode in modes:
            print(f"{mode}, {args.rows:,} rows, {cores} processes:", file=sys.stderr)
            for engine in engines:  # transformers first: the reference for the others
                bench.run(engine, mode, cores, data[args.rows], args.rows)
        if cores > 1:
            print(f"scaling, {args.scaling_rows:,} rows:", file=sys.stderr)
            for mode in modes:
                for engine in engines:
                    if engine == "transformers":
                        if args.scaling_rows != args.rows:  # the reference at this size
                            bench.run(engine, mode, cores, data[args.scaling_rows],
                                      args.scaling_rows)
                        continue
                    for workers in (1, cores):
                        if workers == cores and args.scaling_rows == args.rows:
                            continue  # measured above
                        bench.run(engine, mode, workers, data[args.scaling_rows],
                                  args.scaling_rows)
        if args.memory_rows and "tokens" in modes:
            print(f"memory, {args.memory_rows:,} rows:", file=sys.stderr)
            for engine in engines:
                bench.run(engine, "tokens", cores, data[args.memory_rows], args.memory_rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    import platform
    print(f"## Dataset benchmark ({args.rows:,} conversations, template {args.template}, "
          f"tokenizer {args.tokenizer})\n")
    print(f"{platform.platform()}, {cores} cores, Python {platform.python_version()}, "
          f"transformers {transformers_version or 'not run'}, batch size {BATCH_SIZE}, "
          f"TOKENIZERS_PARALLELISM=false. rows/s = rows / seconds of the timed part "
          f"(datasets.map and Ray: the map and the write; CLI: the whole command); "
          f"rows/CPU-s = rows / CPU seconds (user + system) of the same part, all processes "
          f"(n/a for Ray, whose own processes run alongside): less sensitive than "
          f"wall time to other work on the machine (the load column: 1-minute load "
          f"average).\n")
    print(_table([r for r in bench.results if r["rows"] == args.rows], cores))
    if cores > 1 and args.scaling_rows != args.rows:
        print(f"\nScaling, {args.scaling_rows:,} rows:\n")
        print(_table([r for r in bench.results if r["rows"] == args.scaling_rows], cores))
    if args.memory_rows:
        print()
        print(_memory_table(bench.results, args.memory_rows, args.rows))
    print()
    main_rows = {(r["engine"], r["workers"]): r for r in bench.results
                 if r["mode"] == "tokens" and r["rows"] == args.rows}
    scaling_rows = {(r["engine"], r["workers"]): r for r in bench.results
                    if r["mode"] == "tokens" and r["rows"] == args.scaling_rows}
    base = main_rows.get(("transformers", cores))
    for engine in ("datasets", "cli", "ray"):
        if base and (engine, cores) in main_rows:
            ratio = main_rows[(engine, cores)]["rows_per_s"] / base["rows_per_s"]
            print(f"- tokens+masks, {engine}, {cores} processes: {ratio:.2f}x transformers' "
                  f"rows/s (target >= 3): {'met' if ratio >= 3 else '**NOT met**'}")
            mine = main_rows[(engine, cores)].get("rows_per_cpu_s")
            if mine and base.get("rows_per_cpu_s"):
                print(f"  (per CPU second: {mine / base['rows_per_cpu_s']:.2f}x)")
        if (engine, 1) in scaling_rows and (engine, cores) in scaling_rows and cores > 1:
            scaling = scaling_rows[(engine, cores)]["rows_per_s"] \
                / scaling_rows[(engine, 1)]["rows_per_s"]
            target = 0.9 * cores
            print(f"- tokens+masks, {engine}, 1 -> {cores} workers: {scaling:.2f}x "
                  f"(target >= {target:.1f}): {'met' if scaling >= target else '**NOT met**'}")
    if bench.failures:
        print("\nCORRECTNESS FAILURES:\n" + "\n".join(f"- {f}" for f in bench.failures))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"results": bench.results, "failures": bench.failures}, handle, indent=1)
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())

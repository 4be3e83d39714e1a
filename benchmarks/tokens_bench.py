#!/usr/bin/env python3
"""Benchmark encoding chats (render + tokenize) against transformers' apply_chat_template.

For each corpus tokenizer (``../shared/corpus/tokenizers/<family>``) and a chat template of
its family, encodes a conversation of 10 and of 1,000 messages with
``ChatTokenizer.apply_chat_template`` (minijinja_py renders, the `tokenizers` library encodes)
and, when transformers is importable in the same interpreter, with transformers'
``AutoTokenizer.from_pretrained(folder).apply_chat_template(..., tokenize=True,
return_dict=True)``. Both results are compared in the same run (ids, attention mask, and the
assistant mask / sanitised ids for the rows that ask for them); the ratio is minijinja_py /
transformers (lower is better). Without transformers the comparison columns are skipped, and
the output says so.

    python benchmarks/tokens_bench.py              # about a minute
    python benchmarks/tokens_bench.py --quick      # fewer repetitions
    python benchmarks/tokens_bench.py --json out.json

Needs minijinja_py with its extra (``pip install -e ".[tokenizers]"``); transformers is
optional (``pip install transformers jinja2`` in a separate environment to compare).
Exits non-zero when the two disagree.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_CORPUS = os.path.join(REPO, "..", "shared", "corpus")
NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)
SIZES = (10, 1000)

# (label, tokenizer family, template: None = the folder's own, else a corpus slug, options)
CASES = [
    ("qwen2 (ChatML)", "qwen2", None, {}),
    ("llama-bpe (Llama 3)", "llama-bpe", "cz-llama-3-instruct", {}),
    ("llama-spm (Mistral)", "llama-spm", "cz-mistral-instruct", {}),
    ("phi-3", "phi-3", None, {}),
    ("command-r", "command-r", None, {}),
    ("qwen2 sanitize_control_tokens", "qwen2", None, {"sanitize_control_tokens": True}),
    ("llama-bpe assistant mask", "llama-bpe", "trl-llama3-training",
     {"return_assistant_tokens_mask": True}),
]

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hum "
         "über café 東京 naïve résumé — numbers 12345 and symbols {x: [1, 2]} <b>bold</b>").split()


def conversation(size: int) -> List[Dict[str, str]]:
    messages = []
    for index in range(size):
        role = "user" if index % 2 == 0 else "assistant"
        words = [WORDS[(index * 7 + k * 3) % len(WORDS)] for k in range(12 + index % 23)]
        content = " ".join(words)
        if index % 50 == 3:
            content += " <|im_end|> <|eot_id|> </s> [INST]"  # injected control tokens
        messages.append({"role": role, "content": content})
    if size % 2 == 0:
        messages.append({"role": "user", "content": "And finally?"})
    return messages


def timeit(calls: List[Callable[[], Any]], repeat: int, budget: float) -> List[float]:
    """Median seconds of up to ``repeat`` calls of each function (fewer when they exceed
    ``budget`` seconds). The functions take turns, so that both see the same load on a shared
    machine."""
    for call in calls:
        call()  # warm: template compiled, caches filled
    times: List[List[float]] = [[] for _ in calls]
    started = time.perf_counter()
    for _ in range(repeat):
        for index, call in enumerate(calls):
            begin = time.perf_counter()
            call()
            times[index].append(time.perf_counter() - begin)
        if time.perf_counter() - started > budget and len(times[0]) >= 3:
            break
    return [statistics.median(series) for series in times]


def plain(result: Any) -> Dict[str, Any]:
    return {key: list(value) for key, value in dict(result).items()}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=os.environ.get("MINIJINJA_PY_CORPUS",
                                                           DEFAULT_CORPUS))
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    repeat, budget = (5, 1.0) if args.quick else (21, 4.0)

    sys.path.insert(0, REPO)
    from minijinja_py.chat import ChatTokenizer

    try:
        warnings.filterwarnings("ignore")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        import transformers
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        reference = f"transformers {transformers.__version__}"
    except ImportError:
        AutoTokenizer = None
        reference = None

    import tokenizers

    print(f"# encode (render + tokenize): minijinja_py vs {reference or 'transformers'}")
    print()
    print(f"{platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, tokenizers {tokenizers.__version__}; "
          f"median of up to {repeat} warm calls")
    if AutoTokenizer is None:
        print()
        print("transformers is not importable here: the transformers columns are skipped "
              "(install transformers and jinja2 in this environment to compare).")
    print()
    header = "| case | messages | tokens | minijinja_py |"
    rule = "| --- | ---: | ---: | ---: |"
    if AutoTokenizer is not None:
        header += " transformers | ratio |"
        rule += " ---: | ---: |"
    print(header)
    print(rule)

    rows = []
    failures = 0
    loaded: Dict[str, Any] = {}
    for label, family, slug, options in CASES:
        folder = os.path.join(args.corpus, "tokenizers", family)
        if family not in loaded:
            begin = time.perf_counter()
            ours = ChatTokenizer.from_pretrained(folder, now=NOW)
            our_load = time.perf_counter() - begin
            theirs = their_load = None
            if AutoTokenizer is not None:
                begin = time.perf_counter()
                theirs = AutoTokenizer.from_pretrained(folder)
                their_load = time.perf_counter() - begin
            loaded[family] = (ours, theirs, our_load, their_load)
        ours, theirs, _, _ = loaded[family]
        template = None
        if slug is not None:
            with open(os.path.join(args.corpus, "templates", f"{slug}.jinja"),
                      encoding="utf-8", newline="") as handle:
                template = handle.read()
        for size in SIZES:
            messages = conversation(size)
            our_call = lambda: ours.apply_chat_template(  # noqa: E731
                messages, chat_template=template, add_generation_prompt=True, **options)
            result = plain(our_call())
            row = {"case": label, "messages": len(messages), "tokens": len(result["input_ids"])}
            if theirs is None:
                our_time = timeit([our_call], repeat, budget)[0]
            row["minijinja_py_ms"] = our_time * 1000 if theirs is None else None
            line = f"| {label} | {len(messages):,} | {len(result['input_ids']):,} | "
            if theirs is None:
                line += f"{our_time * 1000:.2f} ms |"
            else:
                their_call = lambda: theirs.apply_chat_template(  # noqa: E731
                    messages, chat_template=template, add_generation_prompt=True,
                    tokenize=True, return_dict=True, **options)
                expected = plain(their_call())
                if expected != result:
                    failures += 1
                    print(f"MISMATCH: {label}, {len(messages)} messages", file=sys.stderr)
                our_time, their_time = timeit([our_call, their_call], repeat, budget)
                row.update(minijinja_py_ms=our_time * 1000, transformers_ms=their_time * 1000,
                           ratio=our_time / their_time, same_result=expected == result)
                line += (f"{our_time * 1000:.2f} ms | {their_time * 1000:.2f} ms | "
                         f"{our_time / their_time:.2f}x |")
            rows.append(row)
            print(line, flush=True)

    print()
    loads = [(family, entry[2], entry[3]) for family, entry in loaded.items()]
    print("Loading a model folder (tokenizer.json + config + template), once: " + ", ".join(
        f"{family} {ours_s * 1000:.0f} ms" + (f" (transformers {theirs_s * 1000:.0f} ms)"
                                              if theirs_s is not None else "")
        for family, ours_s, theirs_s in loads))
    if AutoTokenizer is not None:
        for size in SIZES:
            ratios = [row["ratio"] for row in rows if row["messages"] in (size, size + 1)]
            print(f"median ratio, {size:,} messages: {statistics.median(ratios):.2f}x "
                  f"(worst {max(ratios):.2f}x)")
        print(f"results identical to transformers: {len(rows) - failures} of {len(rows)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"reference": reference, "rows": rows}, handle, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

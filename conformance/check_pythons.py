#!/usr/bin/env python3
"""Render the whole shared corpus under other Python interpreters, generated code against
closures.

The test suite runs under one interpreter (CI's), but the generated code (codegen.py) is
compiled by, and tokenized with, whatever Python runs it; those differ between versions
(Python 3.12 tokenizes f-strings into parts and refuses NUL characters). This script runs
every corpus template with every context under each interpreter given, once with closures
only and once with every loop and body generated (the hot thresholds set to 1, as
tests/test_codegen.py sets them), and reports each pair whose outputs (or errors) differ.

    python conformance/check_pythons.py /path/to/python3.10 /path/to/python3.12 ...

The engine renders without lark, so a bare interpreter will do; the repository is put on
its path. Exits 1 when any pair differs under any interpreter.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "..", "shared", "corpus")
RENDERS = 3  # the first render of a body compiles it; the later ones run what was made
# strftime_now's clock, the same for both paths: templates printing the time to the second
# (vllm-hunyuan-a13b) read differently across a second's end on a busy machine otherwise
NOW = (2025, 7, 10, 12, 0, 0)


def _render_all(corpus: str) -> dict:
    """{"template/context": (closures' output, generated code's output)}, errors as text
    without memory addresses."""
    sys.path.insert(0, REPO)
    import minijinja_py as mj
    from minijinja_py.compiler import closures as compiler

    def render(source: str, context: dict, hot: bool) -> str:
        compiler.HOT_ITERATIONS = compiler.HOT_CALLS = 1 if hot else 10 ** 9
        compiler.FIRST_RENDER_FACTOR = 1
        try:
            template = mj.chat_environment(now=datetime.datetime(*NOW)).from_string(source)
            return [template.render(**context) for _ in range(RENDERS)][-1]
        except Exception as exc:  # compared as text: both paths must fail alike
            return re.sub("0x[0-9a-f]+", "0x", f"ERROR {type(exc).__name__}: {exc}")

    contexts = {}
    for name in sorted(os.listdir(os.path.join(corpus, "contexts"))):
        with open(os.path.join(corpus, "contexts", name), encoding="utf-8") as f:
            contexts[name[:-len(".json")]] = json.load(f)
    results = {}
    for name in sorted(os.listdir(os.path.join(corpus, "templates"))):
        with open(os.path.join(corpus, "templates", name), encoding="utf-8") as f:
            source = f.read()
        for context_name, context in contexts.items():
            results[f"{name[:-len('.jinja')]}/{context_name}"] = (
                render(source, context, False), render(source, context, True))
    return results


def main(argv: list) -> int:
    if len(argv) >= 2 and argv[0] == "--child":
        json.dump(_render_all(argv[1]), sys.stdout)
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    failed = False
    for python in argv:
        child = subprocess.run([python, os.path.abspath(__file__), "--child", CORPUS],
                               capture_output=True, text=True)
        if child.returncode != 0:
            print(f"{python}: the child failed\n{child.stderr}")
            failed = True
            continue
        results = json.loads(child.stdout)
        differing = sorted(pair for pair, (closures, generated) in results.items()
                           if closures != generated)
        version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                                 capture_output=True, text=True).stdout.strip()
        print(f"{python} (Python {version}): {len(results) - len(differing)} of "
              f"{len(results)} pairs render the same with generated code")
        for pair in differing:
            closures, generated = results[pair]
            print(f"  {pair}:\n    closures:  {closures[:120]!r}\n"
                  f"    generated: {generated[:120]!r}")
        failed = failed or bool(differing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

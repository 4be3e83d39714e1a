"""Compare ``ChatTemplate.capabilities()`` with minja's and vLLM's detectors on the corpus.

    python tools/compare_detectors.py MINJA_GIT_DIR VLLM_SOURCE_DIR [--json FILE]

minja's detector is the Python twin of its C++ one (``chat_template`` in minja's
``scripts/fetch_templates_and_goldens.py``: needles searched in Jinja2 renders, exceptions
swallowed), read from the given git directory and run as minja's script runs it. vLLM's is the
AST walk of ``vllm/renderers/hf.py`` (see tools/vllm_content_format.py). Nothing of either is
copied into this repository. Prints, per capability, on how many corpus templates each detector
agrees with ours, and lists the templates where they differ (docs/capabilities.md shows the
result; ``inspect --witness`` on a template shows why ours says what it says).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "conformance"), str(ROOT / "tools")]

import minijinja_py as mj  # noqa: E402
from corpus_support import CORPUS, template_source  # noqa: E402
from vllm_content_format import vllm_detector  # noqa: E402

MINJA_SCRIPT = "scripts/fetch_templates_and_goldens.py"
#: the part of minja's script that defines its detector (the class is cut after __init__)
MINJA_FIRST, MINJA_END = "def raise_exception(", "    def needs_polyfills("
MINJA_NAMES = ("supports_system_role", "supports_tools", "supports_tool_calls",
               "supports_tool_responses", "supports_parallel_tool_calls",
               "supports_tool_call_id", "requires_object_arguments", "requires_typed_content",
               "requires_non_null_content")


def minja_detector(git_dir: Path) -> Callable[[str], Dict[str, bool]]:
    import jinja2
    import jinja2.ext

    text = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"HEAD:{MINJA_SCRIPT}"],
                          check=True, capture_output=True, text=True).stdout
    code = text[text.index(MINJA_FIRST):text.index(MINJA_END)]
    module = types.ModuleType("minja_detector")  # dataclasses looks its module up
    sys.modules[module.__name__] = module
    namespace: Dict[str, Any] = module.__dict__
    namespace.update({"jinja2": jinja2, "json": json, "sys": sys, "datetime": datetime,
                      "dataclass": dataclass, "os": __import__("os")})
    exec(compile(code, MINJA_SCRIPT, "exec"), namespace)
    namespace["TEST_DATE"] = "2024-07-26"
    make = namespace["chat_template"]

    def detect(source: str) -> Dict[str, bool]:
        # as minja's script calls it (filters and globals included)
        template = make(source, filters={"safe": lambda x: x},
                        global_functions={"raise_exception": namespace["raise_exception"],
                                          "strftime_now": namespace["strftime_now"]})
        caps = template.original_caps
        return {name: bool(getattr(caps, name)) for name in MINJA_NAMES}

    return detect


def compare(minja: Callable[[str], Dict[str, bool]], vllm: Callable[[str], str]
            ) -> Dict[str, Any]:
    slugs = sorted(path.stem for path in (CORPUS / "templates").glob("*.jinja"))
    differences: Dict[str, List[Dict[str, Any]]] = {name: [] for name in MINJA_NAMES}
    differences["content_format"] = []
    for slug in slugs:
        source = template_source(slug)
        ours = mj.ChatTemplate(source, special_tokens={"bos_token": "<|startoftext|>",
                                                       "eos_token": "<|endoftext|>"}
                               ).capabilities()
        try:
            theirs = minja(source)
        except Exception as error:  # noqa: BLE001 - minja's script fails on this template
            theirs = {"error": f"{type(error).__name__}: {error}"}
        for name in MINJA_NAMES:
            if name in theirs and theirs[name] != getattr(ours, name):
                differences[name].append({"template": slug, "minja": theirs[name],
                                          "ours": getattr(ours, name),
                                          "witness": ours.witness(name)["summary"]})
        detected = vllm(source)
        if detected != ours.content_format:
            differences["content_format"].append({
                "template": slug, "vllm": detected, "ours": ours.content_format,
                "witness": ours.witness("content_format")["summary"]})
    return {"templates": len(slugs), "differences": differences}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("minja", type=Path)
    parser.add_argument("vllm", type=Path)
    parser.add_argument("--json", type=Path, help="write the whole comparison here")
    args = parser.parse_args(argv)
    result = compare(minja_detector(args.minja), vllm_detector(args.vllm))
    total = result["templates"]
    print(f"| capability | detector | agrees with ours | differs |\n| --- | --- | --- | --- |")
    for name, rows in result["differences"].items():
        who = "vLLM" if name == "content_format" else "minja"
        print(f"| `{name}` | {who} | {total - len(rows)} | {len(rows)} |")
    for name, rows in result["differences"].items():
        for row in rows:
            print(f"{name}\t{row['template']}\t" + "\t".join(
                f"{key}={value}" for key, value in row.items() if key not in ("template",)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

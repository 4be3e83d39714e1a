"""Record the content format of vLLM's example chat templates: the truth and vLLM's own guess.

    python tools/vllm_content_format.py VLLM_SOURCE_DIR [--out tests/fixtures/vllm]

VLLM_SOURCE_DIR is an unpacked vLLM source distribution (``pip download vllm --no-deps
--no-binary :all:``; the sdist's ``examples/`` holds the templates). For every
``examples/*.jinja`` this copies the template into ``<out>/templates/`` and records in
``<out>/content_format.json``:

- ``truth``: what Jinja2 renders, by tests/content_format_support.py (each role's text given as
  a string and as one text part; "openai" when the user role takes parts and every role whose
  string content is written takes them too), with the per-role detail;
- ``vllm_detected``: what vLLM's own detector (``_detect_content_format`` in
  ``vllm/renderers/hf.py``: an AST walk for ``{% for x in message['content'] %}``) says. Its
  functions are read from the given source tree and run on Jinja2's parse of the template, as
  vLLM does (nothing of vLLM is copied into this repository).

tests/test_content_format.py checks ``ChatTemplate.capabilities().content_format`` against the
recorded truth, and the truth against a fresh Jinja2 render.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "conformance")]

from content_format_support import jinja2_truth  # noqa: E402

#: where vLLM's detector starts and where it ends in vllm/renderers/hf.py
DETECTOR_FIRST, DETECTOR_END = "def _is_var_access(", "def _try_extract_ast("


def vllm_detector(source_dir: Path) -> Callable[[str], str]:
    """vLLM's content-format detection, run from its own source: template text -> "string" or
    "openai" ("error" when vLLM would fall back to its default)."""
    import jinja2
    import jinja2.nodes
    import reference_jinja2

    text = (source_dir / "vllm" / "renderers" / "hf.py").read_text(encoding="utf-8")
    start, end = text.index(DETECTOR_FIRST), text.index(DETECTOR_END)
    namespace: Dict[str, Any] = {"jinja2": jinja2, "deque": collections.deque,
                                 "__name__": "vllm_detector"}
    exec(compile("from __future__ import annotations\n" + text[start:end],
                 "vllm/renderers/hf.py", "exec"), namespace)
    find_content_loops = namespace["_iter_nodes_assign_content_item"]
    environment = reference_jinja2.make_environment()

    def detect(template: str) -> str:
        try:
            tree = environment.parse(template)
            next(find_content_loops(tree))
        except StopIteration:
            return "string"
        except Exception:  # noqa: BLE001 - vLLM logs and uses its default
            return "error"
        return "openai"

    return detect


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="unpacked vLLM source distribution")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "vllm")
    args = parser.parse_args(argv)
    detect = vllm_detector(args.source)
    version = (args.source / "PKG-INFO").read_text(encoding="utf-8").split("\nVersion: ")[1]
    (args.out / "templates").mkdir(parents=True, exist_ok=True)
    records = []
    for path in sorted((args.source / "examples").glob("*.jinja")):
        data = path.read_bytes()
        (args.out / "templates" / path.name).write_bytes(data)
        source = data.decode("utf-8")
        records.append({"template": f"templates/{path.name}",
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "vllm_detected": detect(source),
                        "truth": jinja2_truth(source)})
    document = {"source": f"vllm {version.splitlines()[0]} sdist (PyPI), examples/*.jinja",
                "templates": records}
    with open(args.out / "content_format.json", "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
        handle.write("\n")
    wrong = [record["template"] for record in records
             if record["vllm_detected"] != record["truth"]["content_format"]]
    print(f"{len(records)} templates; vLLM's detector differs from the truth on {len(wrong)}: "
          f"{', '.join(wrong)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

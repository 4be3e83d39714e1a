"""Shared helpers for tests that read the shared conformance corpus (../shared/corpus)."""

from __future__ import annotations

import datetime
import json
import os
import re
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("MINIJINJA_PY_CORPUS", PROJECT_ROOT.parent / "shared" / "corpus"))
FIXED_NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)


def corpus_available() -> bool:
    return (CORPUS / "templates").is_dir() and (CORPUS / "contexts").is_dir()


def readme_counts() -> Tuple[int, int, int]:
    """(templates, contexts, pairs per golden set) as the corpus README states them.

    The corpus grows; the tests follow what its README promises, so a partial copy fails while a
    grown corpus does not need the tests edited.
    """
    text = (CORPUS / "README.md").read_text(encoding="utf-8")
    templates = int(re.search(r"\*\*([\d,]+) templates\*\*", text).group(1).replace(",", ""))
    contexts = int(re.search(r"\*\*([\d,]+) contexts\*\*", text).group(1).replace(",", ""))
    pair_count = int(re.search(r"golden sets of ([\d,]+) pairs", text).group(1).replace(",", ""))
    return templates, contexts, pair_count


def load_contexts() -> Dict[str, dict]:
    contexts = {}
    for path in sorted((CORPUS / "contexts").glob("*.json")):
        contexts[path.stem] = json.loads(path.read_text(encoding="utf-8"))
    return contexts


def template_source(slug: str) -> str:
    # newline="" keeps CRLF templates byte-exact
    with open(CORPUS / "templates" / f"{slug}.jinja", encoding="utf-8", newline="") as handle:
        return handle.read()


def pairs(golden_set: str = "goldens-jinja") -> Iterator[Tuple[str, str]]:
    slugs = sorted(p.stem for p in (CORPUS / "templates").glob("*.jinja"))
    contexts = sorted(p.stem for p in (CORPUS / "contexts").glob("*.json"))
    for slug in slugs:
        for context in contexts:
            yield slug, context


def expected(golden_set: str, slug: str, context: str) -> Tuple[Optional[str], Optional[str]]:
    """(output, None) or (None, error class name) for one pair."""
    folder = CORPUS / golden_set / slug
    ok = folder / f"{context}.txt"
    if ok.exists():
        with open(ok, encoding="utf-8", newline="") as handle:
            return handle.read(), None
    with open(folder / f"{context}.error.txt", encoding="utf-8", newline="") as handle:
        return None, handle.readline().strip()

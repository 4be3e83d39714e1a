"""Shared helpers for tests that read the shared conformance corpus (../shared/corpus)."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("MINIJINJA_PY_CORPUS", PROJECT_ROOT.parent / "shared" / "corpus"))
FIXED_NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)


def corpus_available() -> bool:
    return (CORPUS / "templates").is_dir() and (CORPUS / "contexts").is_dir()


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

"""The examples of docs/coming-from-transformers.md run as written: each ``pycon`` block is a
doctest, the blocks of the page sharing one namespace in order, with ``path/to/model`` standing
for the corpus's Qwen2 tokenizer folder. The page's transformers snippets (``python`` blocks)
are not run: they need transformers."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus_support import CORPUS
from docs_support import example_failures, pycon_blocks

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "coming-from-transformers.md"
MODEL = CORPUS / "tokenizers" / "qwen2"
PLACEHOLDER = "path/to/model"


def test_the_page_has_examples() -> None:
    blocks = pycon_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 6 and all(">>> " in source for _, source in blocks)


@pytest.mark.skipif(not (MODEL / "tokenizer.json").is_file(),
                    reason=f"corpus tokenizers not found at {MODEL.parent} "
                           "(set MINIJINJA_PY_CORPUS)")
def test_the_examples_run_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tokenizers")
    pytest.importorskip("numpy")
    monkeypatch.chdir(ROOT)  # (examples may name files of the repository)
    failures = example_failures(PAGE, {PLACEHOLDER: str(MODEL)})
    assert not failures, "".join(failures)

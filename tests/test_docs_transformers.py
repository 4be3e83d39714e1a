"""The examples of docs/coming-from-transformers.md run as written: each ``pycon`` block is a
doctest, the blocks of the page sharing one namespace in order, with ``path/to/model`` standing
for the corpus's Qwen2 tokenizer folder. The page's transformers snippets (``python`` blocks)
are not run: they need transformers."""

from __future__ import annotations

import doctest
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from corpus_support import CORPUS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "coming-from-transformers.md"
MODEL = CORPUS / "tokenizers" / "qwen2"
PLACEHOLDER = "path/to/model"
_BLOCK = re.compile(r"^```pycon\n(.*?)^```", re.MULTILINE | re.DOTALL)


def pycon_blocks(text: str) -> List[Tuple[int, str]]:
    """(line number, source) of every ``pycon`` block of a Markdown page."""
    return [(text.count("\n", 0, match.start()) + 2, match.group(1))
            for match in _BLOCK.finditer(text)]


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
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    namespace: Dict[str, Any] = {}
    for line, source in pycon_blocks(PAGE.read_text(encoding="utf-8")):
        test = parser.get_doctest(source.replace(PLACEHOLDER, str(MODEL)), namespace,
                                  f"{PAGE.name}:{line}", str(PAGE), line)
        output: List[str] = []
        runner.run(test, out=output.append, clear_globs=False)
        assert not output, "".join(output)
        namespace = test.globs  # (a doctest runs in a copy: the next block goes on from it)

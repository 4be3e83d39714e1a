"""The examples of the documentation run as written: every ``pycon`` block of README.md and of
the pages under docs/ (see docs_support.py). docs/coming-from-transformers.md needs a model
folder and has its own test (tests/test_docs_transformers.py). ``python`` blocks are not run:
they name model folders, datasets or clusters the test suite does not have."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs_support import example_failures, pycon_blocks

ROOT = Path(__file__).resolve().parent.parent
OWN_TEST = {"coming-from-transformers.md"}
PAGES = [ROOT / "README.md"] + sorted(path for path in (ROOT / "docs").rglob("*.md")
                                      if path.name not in OWN_TEST)
WITH_EXAMPLES = [path for path in PAGES if pycon_blocks(path.read_text(encoding="utf-8"))]


def test_the_pages_have_examples() -> None:
    assert {"chat-api.md", "engine.md", "provenance.md"} <= {path.name for path in WITH_EXAMPLES}


@pytest.mark.parametrize("page", [pytest.param(path, id=str(path.relative_to(ROOT)))
                                  for path in WITH_EXAMPLES])
def test_the_examples_run_as_written(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # (examples may name files of the repository)
    failures = example_failures(page)
    assert not failures, "".join(failures)

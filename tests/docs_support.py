"""Running a documentation page's examples: each ``pycon`` block of a Markdown page is a
doctest, the blocks of the page sharing one namespace in order (what a reader typing them into
one interpreter sees)."""

from __future__ import annotations

import doctest
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

_BLOCK = re.compile(r"^```pycon\n(.*?)^```", re.MULTILINE | re.DOTALL)


def pycon_blocks(text: str) -> List[Tuple[int, str]]:
    """(line number, source) of every ``pycon`` block of a Markdown page."""
    return [(text.count("\n", 0, match.start()) + 2, match.group(1))
            for match in _BLOCK.finditer(text)]


def example_failures(page: Path, replace: Optional[Mapping[str, str]] = None) -> List[str]:
    """Doctest's report of every example of ``page`` that does not give the output written
    under it (empty when all do); ``replace`` rewrites the sources first (a placeholder path
    for a real one). The blocks after a failing one still run."""
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    namespace: Dict[str, Any] = {}
    failures: List[str] = []
    for line, source in pycon_blocks(page.read_text(encoding="utf-8")):
        for old, new in (replace or {}).items():
            source = source.replace(old, new)
        test = parser.get_doctest(source, namespace, f"{page.name}:{line}", str(page), line)
        runner.run(test, out=failures.append, clear_globs=False)
        namespace = test.globs  # (a doctest runs in a copy: the next block goes on from it)
    return failures

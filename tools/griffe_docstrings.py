"""A griffe extension for the documentation site: reads the package's reST-flavoured docstrings
as the Markdown mkdocstrings renders.

The docstrings are written for ``help()`` and Sphinx habits: ``:class:`~minijinja_py.Limits```
roles, ``double backticks`` and ``>>>`` examples. Markdown takes double backticks as code
already; this turns the roles into code spans (the name as written, or its last part after a
``~``) and wraps each run of ``>>>`` example lines in a fenced ``pycon`` block, where Markdown
would otherwise read ``>>>`` as nested quotes. The docstrings themselves stay as they are.
"""

from __future__ import annotations

import re
from typing import Any, List

import griffe

#: :role:`target` and :role:`~dotted.target` (Sphinx's Python roles)
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _role_as_code(match: "re.Match[str]") -> str:
    shorten, target = match.group(1), match.group(2).strip()
    if shorten:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def _fence_examples(text: str) -> str:
    """Each run of lines starting with ``>>>`` (with their ``...`` continuations and the
    output lines after them, up to a blank line) becomes a fenced pycon block."""
    lines: List[str] = text.split("\n")
    out: List[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.lstrip().startswith(">>>"):
            out.append(line)
            index += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if out and out[-1].strip():
            out.append("")
        out.append(f"{indent}```pycon")
        while index < len(lines) and lines[index].strip():
            out.append(lines[index])
            index += 1
        out.append(f"{indent}```")
    return "\n".join(out)


def markdown_docstring(text: str) -> str:
    """The docstring ``text`` as Markdown (see the module docstring)."""
    return _fence_examples(_ROLE.sub(_role_as_code, text))


class SphinxRolesToMarkdown(griffe.Extension):
    """Rewrites every loaded object's docstring with :func:`markdown_docstring`."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = getattr(obj, "docstring", None)
        if docstring is not None and docstring.value:
            docstring.value = markdown_docstring(docstring.value)

"""Every corpus template x context through ChatTemplate, against transformers' goldens.

``goldens/<slug>/<context>.txt`` is what transformers 5.24 ``apply_chat_template(...,
tokenize=False)`` returned; ``.error.txt`` means it raised (class name on line 1);
``.spans.json`` holds the ``{% generation %}`` character spans. The corpus lives next to the
project (``../shared/corpus``) or where ``MINIJINJA_PY_CORPUS`` points; without it this module is
skipped.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Dict, Tuple

import pytest

import minijinja_py as mj
from minijinja_py.chat import ChatTemplate

from corpus_support import readme_counts

CORPUS = Path(os.environ.get("MINIJINJA_PY_CORPUS",
                             Path(__file__).parent.parent.parent / "shared" / "corpus"))
FIXED_NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)
OPTIONS = ("messages", "tools", "documents", "add_generation_prompt", "continue_final_message")

if not ((CORPUS / "templates").is_dir() and (CORPUS / "contexts").is_dir()):
    pytest.skip(f"corpus not found at {CORPUS}", allow_module_level=True)

SLUGS = sorted(p.stem for p in (CORPUS / "templates").glob("*.jinja"))
CONTEXT_NAMES = sorted(p.stem for p in (CORPUS / "contexts").glob("*.json"))
PAIRS = [(slug, context) for slug in SLUGS for context in CONTEXT_NAMES]
SPAN_PAIRS = [(slug, context) for slug, context in PAIRS
              if (CORPUS / "goldens" / slug / f"{context}.spans.json").exists()]

ERROR_FAMILIES = {
    "TemplateError": mj.TemplateError,
    "TemplateRuntimeError": mj.TemplateRuntimeError,
    "UndefinedError": mj.UndefinedError,
    "SecurityError": mj.SecurityError,
    "TypeError": TypeError,
}

_templates: Dict[str, ChatTemplate] = {}
_contexts: Dict[str, dict] = {}


def chat_template(slug: str) -> ChatTemplate:
    if slug not in _templates:
        # newline="" keeps the two CRLF templates byte-exact
        with open(CORPUS / "templates" / f"{slug}.jinja", encoding="utf-8", newline="") as handle:
            _templates[slug] = ChatTemplate(handle.read(), now=FIXED_NOW, name=slug)
    return _templates[slug]


def context(name: str) -> dict:
    if name not in _contexts:
        _contexts[name] = json.loads((CORPUS / "contexts" / f"{name}.json").read_text("utf-8"))
    # a fresh copy per test: the pipeline must not modify it, and a test must not see another's
    return json.loads(json.dumps(_contexts[name]))


def split(ctx: dict) -> Tuple[dict, dict]:
    options = {key: ctx[key] for key in OPTIONS if key in ctx}
    kwargs = {key: value for key, value in ctx.items() if key not in OPTIONS}
    return options, kwargs


def golden(slug: str, name: str) -> Tuple[object, object]:
    folder = CORPUS / "goldens" / slug
    ok = folder / f"{name}.txt"
    if ok.exists():
        with open(ok, encoding="utf-8", newline="") as handle:
            return handle.read(), None
    with open(folder / f"{name}.error.txt", encoding="utf-8", newline="") as handle:
        return None, handle.readline().strip()


@pytest.mark.parametrize("slug,name", PAIRS, ids=[f"{s}-{c}" for s, c in PAIRS])
def test_render_matches_transformers(slug: str, name: str) -> None:
    expected, error_class = golden(slug, name)
    ctx = context(name)
    snapshot = json.dumps(ctx, sort_keys=True)
    options, kwargs = split(ctx)
    ct = chat_template(slug)
    if error_class is None:
        assert ct.render(**options, **kwargs) == expected
    elif error_class == "ValueError":
        # transformers' own pipeline errors (continue_final_message) are ValueErrors; here
        # they are also TemplateErrors, so `except TemplateError` catches every render error
        with pytest.raises(ValueError) as info:
            ct.render(**options, **kwargs)
        assert isinstance(info.value, mj.ChatTemplateValueError)
        assert isinstance(info.value, mj.TemplateError)
    else:
        with pytest.raises(mj.TemplateError) as info:
            ct.render(**options, **kwargs)
        # the class family too: UndefinedError, SecurityError, TypeError (from operators) ...
        assert isinstance(info.value, ERROR_FAMILIES[error_class]), (error_class, info.value)
    assert json.dumps(ctx, sort_keys=True) == snapshot, "the caller's data was modified"


@pytest.mark.parametrize("slug,name", SPAN_PAIRS, ids=[f"{s}-{c}" for s, c in SPAN_PAIRS])
def test_generation_spans_match_transformers(slug: str, name: str) -> None:
    expected_spans = json.loads((CORPUS / "goldens" / slug / f"{name}.spans.json").read_text())
    expected_text, _ = golden(slug, name)
    options, kwargs = split(context(name))
    result = chat_template(slug).render_with_spans(**options, **kwargs)
    assert [list(span) for span in result.generation_spans] == expected_spans
    assert result.text == expected_text


def test_corpus_has_every_pair() -> None:
    templates, contexts, pair_count = readme_counts()
    assert len(SLUGS) == templates and len(CONTEXT_NAMES) == contexts
    assert len(PAIRS) == pair_count

"""capabilities().content_format against the truth Jinja2 renders (tests/content_format_support.py,
no provenance): on every corpus template and on vLLM's example templates (recorded in
tests/fixtures/vllm by tools/vllm_content_format.py), including content passed through a macro
and tool messages handled apart from user messages (issue 38)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import minijinja_py as mj

from content_format_support import jinja2_truth
from corpus_support import CORPUS, corpus_available, template_source

VLLM = Path(__file__).resolve().parent / "fixtures" / "vllm"
VLLM_RECORDS = json.loads((VLLM / "content_format.json").read_text(encoding="utf-8"))["templates"]
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def _ours(source, special_tokens):
    caps = mj.ChatTemplate(source, special_tokens=special_tokens).capabilities()
    return {"content_format": caps.content_format,
            "per_role": caps.witness("content_format")["per_role"]}


@pytest.mark.parametrize("record", VLLM_RECORDS, ids=lambda record: record["template"])
def test_vllm_examples(record):
    data = (VLLM / record["template"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == record["sha256"]
    source = data.decode("utf-8")
    assert _ours(source, {}) == record["truth"]
    assert jinja2_truth(source) == record["truth"]  # the recorded truth is still Jinja2's


def test_vllm_examples_are_all_there():
    assert len(VLLM_RECORDS) == 35
    assert sum(record["truth"]["content_format"] == "openai" for record in VLLM_RECORDS) == 8


@pytest.mark.skipif(not corpus_available(), reason="the shared corpus is not available")
def test_corpus_templates():
    wrong = []
    slugs = sorted(path.stem for path in (CORPUS / "templates").glob("*.jinja"))
    for slug in slugs:
        source = template_source(slug)
        if _ours(source, TOKENS) != jinja2_truth(source, TOKENS):
            wrong.append(slug)
    assert len(slugs) == 152 and wrong == []

"""The hostile suites run every rendering test in each of the three ways a server renders
(see render_modes.py): a module opts in with ``pytestmark = pytest.mark.usefixtures(
"render_mode")`` (a single test with the same mark); each of its tests then runs three times,
``[plain]``, ``[provenance]`` and ``[tokens]``, the last skipped with its reason where the
tokenizers extra or the shared corpus's tokenizer is missing. Not in the three modes: loading
model folders (test_loading.py, no template rendered), parsing alone, and RenderPool
(test_pool.py: its workers render plain text; a pool has no provenance render)."""

from __future__ import annotations

from pathlib import Path

import pytest

import render_modes


@pytest.fixture(params=render_modes.MODES)
def render_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    mode = request.param
    if mode == "tokens" and not render_modes.tokens_available():
        pytest.skip("the tokens mode needs the tokenizers extra and the shared corpus's "
                    f"tokenizer at {render_modes.corpus_tokenizer_dir()}")
    render_modes.install(mode)
    monkeypatch.setenv(render_modes.MODE_VARIABLE, mode)
    monkeypatch.setenv(render_modes.SUPPORT_VARIABLE, str(Path(__file__).resolve().parent))
    try:
        yield mode
    finally:
        render_modes.install("plain")

"""The hostile suites run every rendering test in each of the three ways a server renders
(see render_modes.py): a module opts in with ``pytestmark = pytest.mark.usefixtures(
"render_mode")`` (a single test with the same mark); each of its tests then runs three times,
``[plain]``, ``[provenance]`` and ``[tokens]``, the last skipped with its reason where the
tokenizers extra or the shared corpus's tokenizer is missing. Not in the three modes: loading
model folders (test_loading.py, no template rendered), parsing alone, and RenderPool
(test_pool.py: its workers render plain text; a pool has no provenance render).

The costliest cases (each runs a render to a limit at full scale, or searches for the smallest
budget a render fits in) run in all three modes in the stress tier only (``--stress``, see
tests/conftest.py): the default run keeps their plain mode, the provenance mode of the
cheaper ones, and every mode of every other test. :data:`STRESS_IN_MODE` lists them."""

from __future__ import annotations

from pathlib import Path

import pytest

import render_modes


#: Per mode, the tests whose cases run in that mode only in the stress tier (their plain mode,
#: and the modes not listed, run by default). About 50 minutes of a loaded two-core machine.
STRESS_IN_MODE = {
    "provenance": frozenset({
        "test_builtin_pays_for_its_work", "test_expensive_builtin_finishes_in_bounded_time",
        "test_defaults_allow_a_10_mb_message", "test_hostile_template_is_stopped_by_a_limit",
        # the provenance compile of a 1 MB source and loops run to the step budget with origins
        # recorded: 2.5 minutes of a loaded machine together (test_provenance_bounded.py keeps
        # the provenance record's own bounds in the default run)
        "test_huge_source_parses_or_fails_cleanly_in_bounded_time",
        "test_attack_is_stopped_cleanly_and_the_process_stays_healthy",
        # keys chosen to collide, built up to the refusal bound with origins recorded (25 s)
        "test_hostile_hashing_is_refused",
    }),
    "tokens": frozenset({
        "test_builtin_pays_for_its_work", "test_expensive_builtin_finishes_in_bounded_time",
        "test_defaults_allow_a_10_mb_message", "test_hostile_template_is_stopped_by_a_limit",
        "test_defaults_allow_a_20000_message_conversation",
        # (the Rust tokenizer over 10 MB of text: 50 s of a loaded machine)
        "test_defaults_allow_a_10_mb_message_in_a_long_conversation",
        "test_huge_source_parses_or_fails_cleanly_in_bounded_time",
        "test_attack_is_stopped_cleanly_and_the_process_stays_healthy",
        "test_hostile_hashing_is_refused", "test_huge_printed_form_is_refused_before_it_is_built",
        "test_single_call_is_linear", "test_loop_over_builtin_is_stopped_by_the_budget",
        "test_odd_data_renders_like_jinja2_or_fails_cleanly",
    }),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        mode = callspec.params.get("render_mode") if callspec is not None else None
        if getattr(item, "originalname", None) in STRESS_IN_MODE.get(mode, ()):
            item.add_marker(pytest.mark.stress)


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

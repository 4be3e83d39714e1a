"""google/minja's capability and polyfill expectations (tests/fixtures/minja/expectations.json,
extracted by tools/minja_expectations.py from its tests) against ours: they agree except in the
cases listed here, and in each of those Jinja2 (configured as transformers is) renders what we
render, not what minja expects (issue 38, item 3)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import minijinja_py as mj
from minijinja_py.chat.capabilities import probe_render
from minijinja_py.chat.polyfills import apply_polyfills, polyfills_needed, selected_polyfills

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "minja"
EXPECTATIONS = json.loads((FIXTURES / "expectations.json").read_text(encoding="utf-8"))

#: (minja test, capability) -> why Jinja2, through transformers' pipeline, disagrees with minja
CAPABILITY_DISAGREEMENTS = {
    ("CapabilitiesTest.DeepSeekR1Distill", "supports_tool_calls"):
        "the template writes tool calls only when `message['content'] is none`; transformers "
        "drops None-valued keys, so content is undefined (not none) and the call is never "
        "written (minja keeps content: null)",
    ("CapabilitiesTest.DeepSeekR1Distill", "supports_parallel_tool_calls"):
        "as supports_tool_calls: no tool call is written at all",
}

#: (minja test, case) -> why Jinja2 renders otherwise than minja expects
POLYFILL_DISAGREEMENTS = {
    ("PolyfillTest.SystemRoleSupported", 1):
        "transformers passes tools=None and `for tool in tools` over None raises in Jinja2 "
        "(minja leaves tools undefined, which iterates as empty)",
    ("PolyfillTest.ToolCallSupported", 0): "as SystemRoleSupported: tools=None is iterated",
    ("PolyfillTest.ToolSupported", 0): "as SystemRoleSupported: tools=None is iterated",
    ("ToolTest.NousResearchHermes3", 0): "as SystemRoleSupported: tools=None is iterated",
    ("ToolTest.NousResearchHermes2", 0): "as SystemRoleSupported: tools=None is iterated",
    ("ToolTest.DeepSeekR1", 0):
        "the tool message's content is a dict and the template adds it to a str: Jinja2 raises "
        "TypeError (minja prints the dict's repr)",
    ("ToolTest.MeetkaiFunctionary3_1", 0): "as DeepSeekR1: str + dict raises in Jinja2",
    ("ToolTest.MeetkaiFunctionary3_2", 0): "as DeepSeekR1: str + dict raises in Jinja2",
    ("PolyfillTest.ToolPolyfill", 0):
        "the template writes a tool message's content (role 'tool', like any role), so "
        "supports_tool_responses holds and no polyfill applies (minja probes tool responses "
        "only when tool calls are supported); the dict content then raises as in DeepSeekR1",
}


def _jinja2():
    reference_dir = str(Path(__file__).resolve().parents[1] / "conformance")
    if reference_dir not in sys.path:
        sys.path.insert(0, reference_dir)
    import reference_jinja2

    return reference_jinja2.make_environment()


def _jinja2_outcome(source, variables):
    try:
        return ("text", _jinja2().from_string(source).render(**variables))
    except Exception as error:  # noqa: BLE001 - Jinja2 raises plain Python errors too
        return ("error", type(error).__name__)


def _template_source(case):
    if "source" in case:
        return case["source"]
    return (FIXTURES / case["template"]["file"]).read_text(encoding="utf-8")


CAPABILITY_CASES = [case for case in EXPECTATIONS["capabilities"] if case["template"]]
POLYFILL_CASES = [case for case in EXPECTATIONS["polyfills"]
                  if "source" in case or case["template"]]


def test_the_fixture_is_minjas_and_complete():
    assert len(EXPECTATIONS["capabilities"]) == 16 and len(EXPECTATIONS["polyfills"]) == 20
    assert len(CAPABILITY_CASES) == 11 and len(POLYFILL_CASES) == 20
    for case in CAPABILITY_CASES:
        data = (FIXTURES / case["template"]["file"]).read_bytes()
        assert __import__("hashlib").sha256(data).hexdigest() == case["template"]["sha256"]


@pytest.mark.parametrize("case", CAPABILITY_CASES, ids=lambda case: case["test"])
def test_capabilities_agree_with_minja_or_with_jinja2(case):
    source = _template_source(case)
    template = mj.ChatTemplate(source, special_tokens={"bos_token": "", "eos_token": ""})
    caps = template.capabilities()
    for name, expected in case["expected"].items():
        listed = (case["test"], name) in CAPABILITY_DISAGREEMENTS
        assert (getattr(caps, name) != expected) == listed, (case["test"], name)
        if not listed:
            continue
        # ours follows Jinja2: every probe of the witness renders in Jinja2 as it did here
        for record in caps.witness(name)["probes"]:
            variables = template.template_variables(
                record["messages"], tools=record["tools"],
                add_generation_prompt=record["add_generation_prompt"], **record["kwargs"])
            ours = (("error", record["error"]["type"]) if "error" in record
                    else ("text", probe_render(template, record)))
            reference = _jinja2_outcome(source, variables)
            assert reference[0] == ours[0], record["probe"]
            if ours[0] == "text":
                assert reference == ours, record["probe"]


def _polyfilled(template, case):
    """The conversation our render gives the template (the polyfills it needs applied)."""
    caps = template.capabilities()
    needed = polyfills_needed(caps, case["messages"], case["tools"],
                              selected_polyfills(case["polyfill"]))
    return apply_polyfills(case["messages"], case["tools"], needed)


@pytest.mark.parametrize("case", POLYFILL_CASES, ids=lambda case: f"{case['test']}-{case['case']}")
def test_polyfills_agree_with_minja_or_with_jinja2(case):
    source = _template_source(case)
    template = mj.ChatTemplate(source, special_tokens={"bos_token": case["bos_token"],
                                                      "eos_token": case["eos_token"]})
    try:
        ours = ("text", template.render(case["messages"], tools=case["tools"],
                                        add_generation_prompt=case["add_generation_prompt"],
                                        polyfill=case["polyfill"]))
    except mj.TemplateError as error:
        ours = ("error", str(error))
    expected = case["expected"]
    if isinstance(expected, dict):
        agrees = ours[0] == "error" and expected["raises_with"] in ours[1]
    else:
        agrees = ours == ("text", expected)
    listed = (case["test"], case["case"]) in POLYFILL_DISAGREEMENTS
    assert agrees != listed, (case["test"], case["case"], ours)
    if listed:
        variables = template.template_variables(
            _polyfilled(template, case), tools=case["tools"],
            add_generation_prompt=case["add_generation_prompt"],
            bos_token=case["bos_token"], eos_token=case["eos_token"])
        reference = _jinja2_outcome(source, variables)
        assert reference[0] == ours[0]
        if ours[0] == "text":
            assert reference == ours

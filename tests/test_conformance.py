"""Conformance suite: minijinja_py must render every case exactly like Jinja2.

Cases live in conformance/cases/<topic>.json; the expected results were
produced by conformance/regenerate.py (Jinja2 3.1.6, configured like Hugging
Face transformers).  One test per case, id "<topic>/<name>".  Jinja2 is not
imported here.  A case where Jinja2 fails must fail with an error of the matching
family and Jinja2's message (see conformance/README.md, "Error families").
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("conformance_caselib", ROOT / "conformance" / "caselib.py")
caselib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(caselib)

NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)
REGENERATE_HINT = "run `python conformance/regenerate.py`"

TOPICS = caselib.load_all_cases()
EXPECTED = caselib.load_all_expected()
# Known, documented differences from Jinja2 (docs/compatibility.md, "Differences from
# Jinja2"): they run and must still fail (strict xfail), so a fixed deviation is noticed and
# removed from the list.
# Under "message_deviations", the cases that fail like Jinja2 but with a message of their own;
# their message must still differ, for the same reason.
_DEVIATIONS_FILE = json.loads((ROOT / "conformance" / "deviations.json").read_text(encoding="utf-8"))
MESSAGE_DEVIATIONS = _DEVIATIONS_FILE.get("message_deviations", {})
DEVIATIONS = {case: reason for case, reason in _DEVIATIONS_FILE.items()
              if case != "message_deviations"}
# Python's SyntaxError (Jinja2 compiling its generated code) ends with a location of Jinja2's
# generated module: "'break' outside loop (<template>, line 25)". The message is what precedes.
_PYTHON_LOCATION_RE = re.compile(r" \(<template>, line \d+\)$")


# Python's own wording of some errors changed between versions; the expectations are recorded
# on the newest. (message recorded -> what an older Python says for the same error)
_OLDER_PYTHON_WORDING = {
    (3, 11): {"integer modulo by zero": "integer division or modulo by zero"},
}


def jinja2_message(error: dict) -> str:
    """The message an engine error must carry for this recorded Jinja2 error (in the words
    of the Python running the test, where Python's wording changed)."""
    message = error["message"]
    if error["class"] == "SyntaxError":
        message = _PYTHON_LOCATION_RE.sub("", message)
    for version, wording in _OLDER_PYTHON_WORDING.items():
        if sys.version_info < version:
            message = wording.get(message, message)
    return message


def _param(topic, case):
    case_id = f"{topic}/{case['name']}"
    marks = ()
    if case_id in DEVIATIONS:
        marks = (pytest.mark.xfail(strict=True, reason=DEVIATIONS[case_id]),)
    if not caselib.runs_on(case, sys.version_info):
        # Python itself does otherwise here (tests/test_jinja2_corners.py compares the same
        # calls with Jinja2 live, under any Python)
        marks += (pytest.mark.skip(reason=f"Jinja2's result holds on Python {case['python']}"),)
    return pytest.param(topic, case, id=case_id, marks=marks)


PARAMS = [_param(topic, case) for topic, cases in TOPICS.items() for case in cases]


def test_deviations_name_real_cases():
    known = {f"{topic}/{case['name']}" for topic, cases in TOPICS.items() for case in cases}
    assert set(DEVIATIONS) <= known
    assert set(MESSAGE_DEVIATIONS) <= known
    errors = {f"{topic}/{name}" for topic, expected in EXPECTED.items()
              for name, result in expected.items() if "error" in result}
    assert set(MESSAGE_DEVIATIONS) <= errors, "message deviations are for error cases only"
    assert not set(MESSAGE_DEVIATIONS) & set(DEVIATIONS), "a case is listed at one level only"
    assert all(isinstance(reason, str) and reason for reason in MESSAGE_DEVIATIONS.values())


def test_expectations_in_sync():
    """Every case has an up-to-date expectation and every expectation has a case."""
    problems = []
    for topic in sorted(set(TOPICS) | set(EXPECTED)):
        cases = {case["name"]: case for case in TOPICS.get(topic, [])}
        expected = EXPECTED.get(topic)
        if expected is None:
            problems.append(f"{topic}: no conformance/expected/{topic}.json")
            continue
        if topic not in TOPICS:
            problems.append(f"{topic}: expected/{topic}.json has no case file")
            continue
        for name in sorted(set(cases) - set(expected)):
            problems.append(f"{topic}/{name}: case has no expectation")
        for name in sorted(set(expected) - set(cases)):
            problems.append(f"{topic}/{name}: expectation has no case")
        for name in sorted(set(cases) & set(expected)):
            if expected[name].get("digest") != caselib.case_digest(cases[name]):
                problems.append(f"{topic}/{name}: case changed since its expectation was generated")
    assert not problems, f"{REGENERATE_HINT}:\n" + "\n".join(problems)


def _render(mj, case):
    options = dict(case["options"])
    if not options.pop("generation", True):  # the chat environment without {% generation %}
        options["extensions"] = []
    env = mj.chat_environment(now=NOW, **options)
    return env.from_string(case["template"]).render(**case["context"])


@pytest.mark.parametrize("topic, case", PARAMS)
def test_case(topic, case):
    expected = EXPECTED.get(topic, {}).get(case["name"])
    if expected is None:
        pytest.fail(f"no expectation for {topic}/{case['name']}; {REGENERATE_HINT}")
    if expected.get("digest") != caselib.case_digest(case):
        pytest.fail(f"expectation for {topic}/{case['name']} is stale; {REGENERATE_HINT}")

    # Imported lazily so that collection works even when the engine is broken.
    mj = importlib.import_module("minijinja_py")

    if "output" in expected:
        try:
            out = _render(mj, case)
        except mj.TemplateError as exc:
            pytest.fail(
                f"expected output {expected['output']!r}, engine raised "
                f"{type(exc).__name__}: {exc}"
            )
        assert isinstance(out, str), f"render() returned {type(out).__name__}, not str"
        assert out == expected["output"]
        return

    error = expected["error"]
    family_name = caselib.error_family(error["class"])
    family = getattr(mj, family_name)
    try:
        out = _render(mj, case)
    except mj.TemplateError as exc:
        assert isinstance(exc, family), (
            f"Jinja2 raised {error['class']} ({error['message']!r}); engine must raise "
            f"mj.{family_name}, got {type(exc).__name__}: {exc}"
        )
        if error["class"] == "TemplateError":
            # raise_exception(message): the message must be passed through exactly.
            assert exc.message == error["message"]
            assert str(exc) == error["message"]
        case_id = f"{topic}/{case['name']}"
        wanted = jinja2_message(error)
        if case_id in MESSAGE_DEVIATIONS:
            assert exc.message != wanted, (
                f"the message now equals Jinja2's ({wanted!r}): remove {case_id} from "
                "message_deviations in conformance/deviations.json")
        else:
            assert exc.message == wanted, (
                f"Jinja2 raised {error['class']}: {wanted!r}; engine raised "
                f"{type(exc).__name__}: {exc.message!r}")
    else:
        pytest.fail(
            f"expected mj.{family_name} (Jinja2: {error['class']}: {error['message']!r}), "
            f"engine rendered {out!r}"
        )

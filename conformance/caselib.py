"""Shared helpers for the conformance suite: loading case files and expectations.

This module must not import jinja2 (it is used by tests/test_conformance.py,
which runs without Jinja2) nor minijinja_py (it is used by regenerate.py).

Case files live in ``conformance/cases/<topic>.json``; expectations produced by
``conformance/regenerate.py`` live in ``conformance/expected/<topic>.json``.
See ``conformance/README.md`` for the format.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"
EXPECTED_DIR = HERE / "expected"

# Keys allowed in one case object.
CASE_KEYS = {"name", "template", "context", "options", "error", "note", "python"}
# Environment options a case may override (defaults: trim_blocks=True,
# lstrip_blocks=True, keep_trailing_newline=False -- the transformers setup -- and
# generation=True: transformers' {% generation %} tag; false leaves Jinja2's own tags).
OPTION_KEYS = {"trim_blocks", "lstrip_blocks", "keep_trailing_newline", "generation"}
# "python": the Pythons a case's result holds on, where Python itself changed (Jinja2 calls
# str methods as they are): "<3.13" or ">=3.13".
PYTHON_RE = re.compile(r"^(<|>=)(\d+)\.(\d+)$")
# Case names become pytest ids "<topic>/<name>": keep them simple.
NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
TOPIC_RE = re.compile(r"^[a-z0-9_]+$")

# Python memory addresses make an expectation unstable; regenerate.py refuses them.
MEMORY_ADDRESS_RE = re.compile(r" at 0x[0-9a-f]+")

# Error classes recorded in expectations -> the minijinja_py exception family
# the engine must raise.  Any class not listed here (TypeError, ValueError,
# ZeroDivisionError, OverflowError, KeyError, IndexError, AttributeError,
# RecursionError, ...) is a plain Python exception inside Jinja2, which the
# engine reports as a TemplateRuntimeError.
ERROR_FAMILIES = {
    "TemplateSyntaxError": "TemplateSyntaxError",
    "TemplateAssertionError": "TemplateAssertionError",
    # Python's SyntaxError: Jinja2 emits it from from_string() when the
    # generated code is invalid ({% break %} / {% continue %} outside a loop).
    # It is a compile-time template error, so the engine reports it as one.
    "SyntaxError": "TemplateSyntaxError",
    "UndefinedError": "UndefinedError",
    "SecurityError": "SecurityError",
    "FilterArgumentError": "TemplateRuntimeError",
    "TemplateRuntimeError": "TemplateRuntimeError",
    "TemplateError": "TemplateError",
}
DEFAULT_FAMILY = "TemplateRuntimeError"


def error_family(class_name: str) -> str:
    """The minijinja_py exception class name expected for a recorded error class."""
    return ERROR_FAMILIES.get(class_name, DEFAULT_FAMILY)


class CaseFileError(ValueError):
    """A case file is malformed (bad key, bad type, duplicate name, ...)."""


def _template_text(value, where: str) -> str:
    # A template is a string, or a list of strings concatenated with no
    # separator (handy for multi-line templates: one element per line).
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, str) for p in value):
        return "".join(value)
    raise CaseFileError(f"{where}: 'template' must be a string or a list of strings")


def load_topic(path: Path) -> list[dict]:
    """Load and validate one case file; returns normalized case dicts."""
    topic = path.stem
    if not TOPIC_RE.match(topic):
        raise CaseFileError(f"{path.name}: topic file names must match {TOPIC_RE.pattern}")
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CaseFileError(f"{path.name}: top level must be an object with a 'cases' list")
    extra = set(data) - {"description", "cases"}
    if extra:
        raise CaseFileError(f"{path.name}: unknown top-level keys {sorted(extra)}")
    cases = []
    seen = set()
    for index, raw in enumerate(data["cases"]):
        where = f"{path.name}[{index}]"
        if not isinstance(raw, dict):
            raise CaseFileError(f"{where}: a case must be an object")
        unknown = set(raw) - CASE_KEYS
        if unknown:
            raise CaseFileError(f"{where}: unknown keys {sorted(unknown)}")
        name = raw.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise CaseFileError(f"{where}: 'name' must match {NAME_RE.pattern}")
        where = f"{path.name}:{name}"
        if name in seen:
            raise CaseFileError(f"{where}: duplicate case name")
        seen.add(name)
        if "template" not in raw:
            raise CaseFileError(f"{where}: missing 'template'")
        template = _template_text(raw["template"], where)
        context = raw.get("context", {})
        if not isinstance(context, dict) or not all(isinstance(k, str) for k in context):
            raise CaseFileError(f"{where}: 'context' must be an object")
        options = raw.get("options", {})
        if not isinstance(options, dict):
            raise CaseFileError(f"{where}: 'options' must be an object")
        for key, value in options.items():
            if key not in OPTION_KEYS:
                raise CaseFileError(f"{where}: unknown option {key!r}")
            if not isinstance(value, bool):
                raise CaseFileError(f"{where}: option {key!r} must be true/false")
        error = raw.get("error")
        if error is not None and not isinstance(error, str):
            raise CaseFileError(f"{where}: 'error' must be an exception class name")
        python = raw.get("python")
        if python is not None and not (isinstance(python, str) and PYTHON_RE.match(python)):
            raise CaseFileError(f"{where}: 'python' must look like \"<3.13\" or \">=3.13\"")
        cases.append(
            {
                "name": name,
                "template": template,
                "context": context,
                "options": options,
                "error": error,
                "note": raw.get("note"),
                "python": python,
            }
        )
    return cases


def load_all_cases() -> dict[str, list[dict]]:
    """topic -> cases, for every conformance/cases/*.json (sorted by topic).

    Case names must be unique across all topics.
    """
    topics = {}
    owner = {}
    for path in sorted(CASES_DIR.glob("*.json")):
        cases = load_topic(path)
        for case in cases:
            other = owner.get(case["name"])
            if other is not None:
                raise CaseFileError(
                    f"duplicate case name {case['name']!r} in {other}.json and {path.stem}.json"
                )
            owner[case["name"]] = path.stem
        topics[path.stem] = cases
    return topics


def runs_on(case: dict, version: tuple) -> bool:
    """Whether the case's result holds on the Python of ``version`` (``sys.version_info``):
    always, unless its ``python`` key says otherwise."""
    if case.get("python") is None:
        return True
    sign, major, minor = PYTHON_RE.match(case["python"]).groups()
    below = tuple(version[:2]) < (int(major), int(minor))
    return below if sign == "<" else not below


def case_digest(case: dict) -> str:
    """Fingerprint of everything that determines a case's result.

    Stored next to each expectation so that editing a case without
    regenerating is detected.
    """
    payload = json.dumps(
        {"template": case["template"], "context": case["context"], "options": case["options"]},
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("ascii")).hexdigest()[:16]


def load_expected(topic: str) -> dict[str, dict] | None:
    path = EXPECTED_DIR / f"{topic}.json"
    if not path.exists():
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_all_expected() -> dict[str, dict[str, dict]]:
    """topic -> {case name -> expectation} for every conformance/expected/*.json."""
    result = {}
    for path in sorted(EXPECTED_DIR.glob("*.json")):
        with open(path, encoding="utf-8") as fh:
            result[path.stem] = json.load(fh)
    return result

#!/usr/bin/env python3
"""Produce conformance/expected/*.json by rendering every case with Jinja2.

This is the ONLY producer of expected results.  It needs Jinja2 3.1.6 (a dev
dependency; the engine never imports it) and renders each case in an
environment configured exactly like Hugging Face transformers' chat template
environment (ImmutableSandboxedEnvironment, trim_blocks + lstrip_blocks,
loopcontrols, a {% generation %} extension, the json.dumps-based ``tojson``
filter, ``raise_exception``, ``strftime_now`` frozen at 2025-07-10 12:00, and
transformers' ``dict``/``namespace``).  That environment is defined once, in
``conformance/reference_jinja2.py``, shared with the benchmark and the security
tests; a case's ``options`` override its trim_blocks/lstrip_blocks/
keep_trailing_newline.

Usage:
    python conformance/regenerate.py            # rewrite conformance/expected/
    python conformance/regenerate.py --check    # exit 1 if expected/ is out of date
    python conformance/regenerate.py --show TOPIC [NAME...]   # print results, write nothing

The script fails loudly (exit 1, nothing written) when:
  * a case file is malformed or a case name is duplicated (anywhere);
  * an output or error message contains a Python memory address (`` at 0x...``);
  * a case's declared intent disagrees with Jinja2: a case with ``"error": "X"``
    must raise X, a case without ``"error"`` must render without raising;
  * a case for some Pythons only (``"python": "<3.13"``) has no up-to-date result and
    this Python is not one of them (a recorded result of such a case is kept as it is).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import caselib  # noqa: E402
import reference_jinja2  # noqa: E402  (the shared Jinja2 reference; see its docstring)

import jinja2  # noqa: E402
from jinja2 import TemplateSyntaxError  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

REQUIRED_JINJA2 = reference_jinja2.JINJA2_VERSION
NOW = reference_jinja2.FIXED_NOW

# One environment per distinct set of case options (there are only a handful), instead of
# building a new environment for every case.
_ENV_CACHE: dict = {}


def make_env(case_options: dict) -> ImmutableSandboxedEnvironment:
    key = tuple(sorted(case_options.items()))
    env = _ENV_CACHE.get(key)
    if env is None:
        env = reference_jinja2.make_environment(NOW, **case_options)
        _ENV_CACHE[key] = env
    return env


def error_class_name(exc: BaseException) -> str:
    # TemplateAssertionError (unknown filter/test at compile time, ...) is a
    # TemplateSyntaxError subclass: record the family name.
    if isinstance(exc, TemplateSyntaxError):
        return "TemplateSyntaxError"
    return type(exc).__name__


def run_case(case: dict) -> dict:
    env = make_env(case["options"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            template = env.from_string(case["template"])
        except Exception as exc:  # noqa: BLE001 - every failure is a result
            return {"error": {"class": error_class_name(exc), "message": str(exc), "phase": "compile"}}
        try:
            output = template.render(**case["context"])
        except Exception as exc:  # noqa: BLE001
            return {"error": {"class": error_class_name(exc), "message": str(exc), "phase": "render"}}
    return {"output": output}


def build_expectations(topics: dict[str, list[dict]]) -> tuple[dict, list[str]]:
    problems: list[str] = []
    results: dict[str, dict] = {}
    for topic, cases in topics.items():
        topic_results = {}
        recorded = caselib.load_expected(topic) or {}
        for case in cases:
            where = f"{topic}/{case['name']}"
            if not caselib.runs_on(case, sys.version_info):
                # Python itself does otherwise here: the result recorded under a Python the
                # case is for stays, if it is the case's
                kept = recorded.get(case["name"])
                if kept is None or kept.get("digest") != caselib.case_digest(case):
                    problems.append(f"{where}: holds on Python {case['python']} only; record it "
                                    "by running regenerate.py with such a Python")
                else:
                    topic_results[case["name"]] = kept
                continue
            result = run_case(case)
            text = result["output"] if "output" in result else result["error"]["message"]
            if caselib.MEMORY_ADDRESS_RE.search(text):
                problems.append(f"{where}: result contains a memory address: {text!r}")
            actual_error = result["error"]["class"] if "error" in result else None
            if case["error"] != actual_error:
                if actual_error is None:
                    problems.append(
                        f"{where}: declared error {case['error']!r} but Jinja2 rendered {result['output']!r}"
                    )
                else:
                    problems.append(
                        f"{where}: Jinja2 raised {actual_error} ({result['error']['message']!r})"
                        + (f", declared {case['error']!r}" if case["error"] else ", no error declared")
                    )
            result["digest"] = caselib.case_digest(case)
            topic_results[case["name"]] = result
        results[topic] = topic_results
    return results, problems


def serialize(topic_results: dict) -> str:
    return json.dumps(topic_results, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="verify expected/ is up to date; write nothing")
    parser.add_argument("--show", nargs="+", metavar=("TOPIC", "NAME"), help="print results of a topic (or some cases)")
    args = parser.parse_args(argv)

    if jinja2.__version__ != REQUIRED_JINJA2:
        print(f"error: Jinja2 {REQUIRED_JINJA2} required, found {jinja2.__version__}", file=sys.stderr)
        return 1

    try:
        topics = caselib.load_all_cases()
    except caselib.CaseFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    if args.show:
        topic, names = args.show[0], set(args.show[1:])
        if topic not in topics:
            print(f"error: no topic {topic!r}", file=sys.stderr)
            return 1
        for case in topics[topic]:
            if names and case["name"] not in names:
                continue
            result = run_case(case)
            print(f"--- {case['name']}")
            print(f"    template: {case['template']!r}")
            if "output" in result:
                print(f"    output:   {result['output']!r}")
            else:
                err = result["error"]
                print(f"    error:    {err['class']} ({err['phase']}): {err['message']!r}")
        return 0

    results, problems = build_expectations(topics)
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        print(f"{len(problems)} problem(s); nothing written", file=sys.stderr)
        return 1

    caselib.EXPECTED_DIR.mkdir(exist_ok=True)
    wanted = {f"{topic}.json": serialize(r) for topic, r in results.items()}
    existing = {p.name for p in caselib.EXPECTED_DIR.glob("*.json")}
    stale = sorted(existing - set(wanted))
    changed = sorted(
        name
        for name, text in wanted.items()
        if not (caselib.EXPECTED_DIR / name).exists()
        or (caselib.EXPECTED_DIR / name).read_text(encoding="utf-8") != text
    )

    if args.check:
        if stale or changed:
            for name in changed:
                print(f"out of date: expected/{name}", file=sys.stderr)
            for name in stale:
                print(f"stale: expected/{name} (no matching case file)", file=sys.stderr)
            return 1
        print("expected/ is up to date")
        return 0

    for name in changed:
        (caselib.EXPECTED_DIR / name).write_text(wanted[name], encoding="utf-8")
    for name in stale:
        (caselib.EXPECTED_DIR / name).unlink()

    total = sum(len(r) for r in results.values())
    errors = sum(1 for r in results.values() for v in r.values() if "error" in v)
    print(
        f"{total} cases in {len(results)} topics ({errors} expected errors); "
        f"{len(changed)} file(s) written, {len(stale)} removed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

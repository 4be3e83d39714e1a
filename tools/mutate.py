"""Mutation testing: would the test suite notice the bugs that matter?

Each mutation in ``tools/mutations.py`` is one hand-written change to one line of the package,
the kind of slip a real edit could make to a documented guarantee (a limit off by one, a price
cut, a check removed, a sanitising rule loosened), together with the test files (or test ids)
that cover it. For each one in turn, this script applies it to a scratch copy of the package
(never to the working tree), runs those tests there, and records the outcome:

* ``killed``: a test failed (or the package no longer imports): the suite noticed;
* ``timeout``: the tests did not finish in time. The mutation is noticed, but only by hanging
  the test run: a test that would hang under a bug should fail instead (run the check in a
  child process with its own timeout), so the report lists these apart;
* ``survived``: every covering test passed: a bug no test notices;
* ``equivalent``: declared in the table, with the reason no test can tell it apart (run all
  the same; one that is killed after all is reported as killed and its claim flagged).

It writes a report per module (``tools/MUTATION-REPORT.md`` by default) whose figures are
committed with the tests. It is slow (a test run per mutation) and runs outside CI::

    python tools/mutate.py                   # every mutation, then the report
    python tools/mutate.py --only guard.prices  # the mutations of guard/prices.py (or: guard.prices.3)
    python tools/mutate.py --list            # the table, nothing run
    python tools/mutate.py --report-only     # the report again, from the results file

Each outcome is also appended to a results file (``--results``, one JSON object a line) as
soon as it is known, so that an interrupted run loses nothing: ``--resume`` skips the
mutations the file already holds, and the report is written from the file's latest outcome of
each mutation in the table (an outcome recorded for a mutation whose text or tests have since
changed in the table is not used). After adding tests, rerun the survivors alone
(``--only limits.22 sandbox.8``) and the report is rewritten with their new outcomes. (The
results file, ``tools/.mutation-results.jsonl``, is not committed; the report is.)

Mutations run one at a time (the machine's cores are shared), each test run with
``-x -q -p no:cacheprovider`` and a timeout of three times its unmutated run plus a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "minijinja_py"
#: What the scratch copy holds: the package and what its tests read.
COPIED = ("minijinja_py", "tests", "conformance", "grammar", "benchmarks", "examples", "README.md",
          "pyproject.toml")
DEFAULT_REPORT = ROOT / "tools" / "MUTATION-REPORT.md"
DEFAULT_RESULTS = ROOT / "tools" / ".mutation-results.jsonl"
PYTEST = ("-x", "-q", "-p", "no:cacheprovider")
#: A mutated run may take this many times its unmutated run, plus TIMEOUT_MARGIN seconds.
TIMEOUT_FACTOR = 3.0
TIMEOUT_MARGIN = 60.0

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutations import MUTATIONS, NOTES, Mutation  # noqa: E402  (the table, beside this script)


@dataclass
class Outcome:
    """What one mutation's test run did."""

    mutation: Mutation
    status: str                 # killed, timeout, survived, equivalent, stale
    seconds: float = 0.0
    detail: str = ""            # the first failing test, or why the run did not count
    line: int = 0               # where the original text starts in its module
    at: str = ""                # when it ran (the results file's time, to the minute)


@dataclass
class Scratch:
    """A copy of the package and its tests, where mutations are applied one at a time."""

    root: Path
    pristine: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, origin: Path = ROOT) -> "Scratch":
        root = Path(tempfile.mkdtemp(prefix="minijinja_py-mutate-"))
        for name in COPIED:
            source = origin / name
            if source.is_dir():
                # (bytecode caches are copied with their sources' times: still valid)
                shutil.copytree(source, root / name, symlinks=True,
                                ignore=shutil.ignore_patterns(".pytest_cache"))
            elif source.exists():
                shutil.copy2(source, root / name)
        return cls(root)

    def environment(self) -> Dict[str, str]:
        """The scratch copy first on the path (before the editable install of the working
        tree), the parse cache in the scratch directory."""
        variables = dict(os.environ)
        variables["PYTHONPATH"] = os.pathsep.join(
            [str(self.root)] + [p for p in variables.get("PYTHONPATH", "").split(os.pathsep)
                                if p])
        variables["MINIJINJA_PY_CACHE_DIR"] = str(self.root / ".parse-cache")
        # the tests find the shared corpus beside the checkout: tell them where it is
        variables.setdefault("MINIJINJA_PY_CORPUS", str(ROOT.parent / "shared" / "corpus"))
        return variables

    def check_import(self) -> None:
        """The tests must import the scratch copy, not the working tree."""
        found = subprocess.run(
            [sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
            cwd=self.root, env=self.environment(), capture_output=True, text=True, check=True)
        if not found.stdout.strip().startswith(str(self.root)):
            raise SystemExit(f"the scratch copy is not what the tests import: {found.stdout}")

    def _module(self, name: str) -> Path:
        return self.root / PACKAGE / name

    def _forget_bytecode(self, name: str) -> None:
        """Remove the module's bytecode cache: a mutated file of the same size written within
        the same second as the cache would otherwise be taken for the cached original."""
        path = self._module(name)
        for cached in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
            cached.unlink()

    def apply(self, mutation: Mutation) -> int:
        """Apply ``mutation``; returns the line where it starts (0: the original text is not
        there exactly once, the table is stale)."""
        path = self._module(mutation.module)
        text = self.pristine.setdefault(mutation.module, path.read_text(encoding="utf-8"))
        if text.count(mutation.original) != 1:
            return 0
        start = text.index(mutation.original)
        path.write_text(text.replace(mutation.original, mutation.replacement),
                        encoding="utf-8")
        self._forget_bytecode(mutation.module)
        return text.count("\n", 0, start) + 1

    def restore(self, mutation: Mutation) -> None:
        self._module(mutation.module).write_text(self.pristine[mutation.module],
                                                 encoding="utf-8")
        self._forget_bytecode(mutation.module)

    def run_tests(self, tests: Sequence[str], timeout: float) -> Tuple[Optional[int], float, str]:
        """(pytest's exit status or None after the timeout, seconds, the summary's last
        lines) of the covering tests in the scratch copy."""
        start = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", *PYTEST, *tests], cwd=self.root,
            env=self.environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the tests and any child they started
            process.communicate()
            return None, time.monotonic() - start, f"no result after {timeout:.0f} s"
        except BaseException:  # interrupted: leave no test run behind
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
        return process.returncode, time.monotonic() - start, _summary(output)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _summary(output: bytes) -> str:
    """The first failing test (pytest's ``FAILED`` line) or the last line of the run."""
    lines = output.decode("utf-8", "replace").splitlines()
    for line in lines:
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:300]
    return lines[-1][:300] if lines else ""


#: pytest's exit statuses: 1 tests failed, 2 interrupted (a collection error: the mutated
#: package does not import), 3 internal error. 4 (usage) and 5 (no tests) mean the table's
#: test selection is wrong, which the unmutated run finds first.
_KILLED = {1: "killed", 2: "killed", 3: "killed"}
_NO_TESTS = (4, 5)
_BROKEN = -2.0  # (in the baselines' table: the selection fails unmutated)
_NONE_SELECTED = -1.0  # (... the selection selects no test)


def _baselines(scratch: Scratch, mutations: Iterable[Mutation]) -> Dict[Tuple[str, ...], float]:
    """Each distinct test selection run once unmutated: it must pass (else a kill would mean
    nothing); its time sets the mutated runs' timeout."""
    times: Dict[Tuple[str, ...], float] = {}
    for mutation in mutations:
        if mutation.tests in times:
            continue
        status, seconds, summary = scratch.run_tests(mutation.tests, 3600)
        if status in _NO_TESTS:  # nothing selected: its mutations count as survivors
            times[mutation.tests] = _NONE_SELECTED
            print(f"baseline: no test selected by {' '.join(mutation.tests)}", flush=True)
            continue
        if status != 0:  # its mutations are reported as errors, the others still run
            times[mutation.tests] = _BROKEN
            print(f"baseline FAILS ({summary}): {' '.join(mutation.tests)}", flush=True)
            continue
        times[mutation.tests] = seconds
        print(f"baseline {seconds:6.1f}s  {' '.join(mutation.tests)}", flush=True)
    return times


def run(mutations: List[Mutation], baseline: bool, timeout: Optional[float],
        origin: Path = ROOT, results: Optional[Path] = None) -> List[Outcome]:
    """Apply each of ``mutations`` alone to one scratch copy of ``origin`` and run its
    covering tests (after each distinct selection's unmutated run when ``baseline``),
    appending each outcome to ``results`` as it is known."""
    scratch = Scratch.make(origin)
    try:
        scratch.check_import()
        times = _baselines(scratch, mutations) if baseline else {}
        outcomes = []
        for number, mutation in enumerate(mutations, 1):
            line = scratch.apply(mutation)
            if not line:
                outcome = Outcome(mutation, "stale", detail="the original text is not in the "
                                                            "module exactly once")
            elif times.get(mutation.tests) == _BROKEN:
                scratch.restore(mutation)
                outcome = Outcome(mutation, "error", detail="its tests fail unmutated",
                                  line=line)
            elif times.get(mutation.tests) == _NONE_SELECTED:
                scratch.restore(mutation)
                outcome = Outcome(mutation, _status(mutation, 0), detail="no covering test",
                                  line=line)
            else:
                try:
                    limit = timeout or (TIMEOUT_FACTOR * times.get(mutation.tests, 60.0)
                                        + TIMEOUT_MARGIN)
                    status, seconds, summary = scratch.run_tests(mutation.tests, limit)
                finally:
                    scratch.restore(mutation)
                outcome = Outcome(mutation, _status(mutation, status), seconds, summary, line)
            outcomes.append(outcome)
            if results is not None:
                _record(results, outcome)
            print(f"[{number}/{len(mutations)}] {outcome.status:10} {outcome.seconds:6.1f}s  "
                  f"{mutation.id}  {outcome.detail if outcome.status != 'survived' else ''}",
                  flush=True)
        return outcomes
    finally:
        scratch.remove()


# ---- the results file ------------------------------------------------------------------------
def _identity(mutation: Mutation) -> Dict[str, object]:
    """What a recorded outcome must match to stand for the table's mutation."""
    return {"id": mutation.id, "module": mutation.module, "original": mutation.original,
            "replacement": mutation.replacement, "tests": list(mutation.tests)}


def _record(results: Path, outcome: Outcome) -> None:
    entry = dict(_identity(outcome.mutation), status=outcome.status, seconds=outcome.seconds,
                 detail=outcome.detail, line=outcome.line,
                 at=outcome.at or time.strftime("%Y-%m-%d %H:%M"))
    with results.open("a", encoding="utf-8") as stream:
        stream.write(json.dumps(entry) + "\n")


def recorded(results: Path, mutations: Iterable[Mutation]) -> Dict[str, Outcome]:
    """The latest recorded outcome of each of ``mutations`` whose table entry is unchanged
    (an outcome marked equivalent is re-derived from the table's current claim)."""
    if not results.exists():
        return {}
    table = {m.id: m for m in mutations}
    found: Dict[str, Outcome] = {}
    for text in results.read_text(encoding="utf-8").splitlines():
        entry = json.loads(text)
        mutation = table.get(entry["id"])
        if mutation is None or {key: entry[key] for key in _identity(mutation)} != \
                _identity(mutation):
            continue
        status = entry["status"]
        if status in ("equivalent", "survived"):  # (the claim may have changed since)
            status = _status(mutation, 0)
        found[mutation.id] = Outcome(mutation, status, entry["seconds"], entry["detail"],
                                     entry["line"], entry.get("at", ""))
    return found


def _status(mutation: Mutation, status: Optional[int]) -> str:
    if status is None:
        return "timeout"
    if status == 0:
        return "equivalent" if mutation.equivalent else "survived"
    return _KILLED.get(status, f"error {status}")


# ---- the report -------------------------------------------------------------------------------
def _code(text: str) -> str:
    """``text`` as inline Markdown code inside a table cell."""
    text = text.replace("|", "\\|").replace("\n", "\\n")
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if text.strip() else "(nothing)"


def report(outcomes: List[Outcome], missing: Sequence[str] = ()) -> str:
    """The Markdown report of ``outcomes`` (``missing``: the table's mutations not run)."""
    modules: Dict[str, List[Outcome]] = {}
    for outcome in outcomes:
        modules.setdefault(outcome.mutation.module, []).append(outcome)
    counted = [o for o in outcomes if o.status != "equivalent"]
    killed = [o for o in counted if o.status in ("killed", "timeout")]
    lines = [
        "# Mutation report",
        "",
        "Written by `python tools/mutate.py` (see its docstring): each mutation below was applied",
        "alone to a scratch copy of the package and its covering tests run against it.",
        "**killed**: a test failed; **timeout**: only a hung test run noticed it; **survived**:",
        "no test noticed; **equivalent**: no test can notice it (the reason is given).",
        "",
        f"**{len(killed)} of {len(counted)} non-equivalent mutations killed "
        f"({100 * len(killed) / max(len(counted), 1):.1f}%)**, "
        f"{sum(o.status == 'timeout' for o in outcomes)} of them only by a timeout; "
        f"{len(outcomes)} mutations, {len(outcomes) - len(counted)} equivalent; "
        f"{sum(o.seconds for o in outcomes) / 60:.0f} minutes of mutated test runs.",
        "",
        *([f"Not run yet: {len(missing)} mutations of the table "
           f"({', '.join(missing[:20])}{', ...' if len(missing) > 20 else ''}).", ""]
          if missing else []),
        *([NOTES.strip(), ""] if NOTES.strip() else []),
        "| module | mutations | killed | timeout | survived | equivalent | kill rate |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for module, group in modules.items():
        count = {status: sum(o.status == status for o in group)
                 for status in ("killed", "timeout", "survived", "equivalent")}
        relevant = len(group) - count["equivalent"]
        rate = (count["killed"] + count["timeout"]) / relevant if relevant else 1.0
        lines.append(f"| `{module}` | {len(group)} | {count['killed']} | {count['timeout']} | "
                     f"{count['survived']} | {count['equivalent']} | {100 * rate:.0f}% |")
    for module, group in modules.items():
        lines += ["", f"## `{module}`", "",
                  "| id | line | original | mutated | outcome | covering tests | run |",
                  "| --- | ---: | --- | --- | --- | --- | --- |"]
        for outcome in group:
            mutation = outcome.mutation
            status = outcome.status
            if status == "equivalent":
                status = f"equivalent: {mutation.equivalent}"
            elif mutation.equivalent:
                status += " (declared equivalent: the claim is wrong)"
            if mutation.note:
                status += f" ({mutation.note})"
            tests = ", ".join(f"`{t}`" for t in mutation.tests)
            lines.append(f"| {mutation.id} | {outcome.line} | {_code(mutation.original)} | "
                         f"{_code(mutation.replacement)} | {status} | {tests} | "
                         f"{outcome.at[-5:]} |")
    return "\n".join(lines) + "\n"


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # (so that the scratch copy is removed on the way out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=(),
                        help="run these mutations (ids, or module names such as budget or "
                             "chat.config)")
    parser.add_argument("--list", action="store_true", help="print the table and stop")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the unmutated runs (timeouts then default to 210 s)")
    parser.add_argument("--timeout", type=float, help="seconds per mutated run")
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="the checkout whose package and tests are copied (default: this "
                             "one; e.g. an export of another commit: git archive main | tar -x "
                             "-C DIR)")
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT,
                        help=f"where to write the report (default: {DEFAULT_REPORT}), from the "
                             "results file's outcomes of the whole table")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                        help=f"where each outcome is appended (default: {DEFAULT_RESULTS})")
    parser.add_argument("--resume", action="store_true",
                        help="skip the mutations the results file holds an outcome of")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the report from the results file")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or any(
        m.id == only or m.id.startswith(only.rstrip(".") + ".") for only in args.only)]
    if args.list:
        stale = 0
        for mutation in chosen:
            text = (ROOT / PACKAGE / mutation.module).read_text(encoding="utf-8")
            found = text.count(mutation.original)
            stale += found != 1
            mark = "" if found == 1 else f"  STALE: found {found} times"
            print(f"{mutation.id:24} {mutation.original!r} -> {mutation.replacement!r}{mark}")
        print(f"{len(chosen)} mutations, {stale} stale")
        return 1 if stale else 0
    if args.resume or args.report_only:
        done = recorded(args.results, chosen)
        chosen = [] if args.report_only else [m for m in chosen if m.id not in done]
    outcomes = run(chosen, not args.no_baseline, args.timeout, args.source,
                   args.results) if chosen else []
    everything = recorded(args.results, MUTATIONS)
    missing = [m.id for m in MUTATIONS if m.id not in everything]
    text = report([everything[m.id] for m in MUTATIONS if m.id in everything], missing)
    args.report.write_text(text, encoding="utf-8")
    print(text.split("\n## ")[0])
    print(f"report: {args.report}")
    left = [o for o in outcomes if o.status in ("survived", "stale") or
            o.status.startswith("error")]
    for outcome in left:
        print(f"{outcome.status}: {outcome.mutation.id} {outcome.mutation.module}:"
              f"{outcome.line} {outcome.mutation.original!r} -> "
              f"{outcome.mutation.replacement!r} ({outcome.detail})")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())

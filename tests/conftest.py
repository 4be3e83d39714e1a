"""Test-wide settings.

* The persistent parse cache goes to a private temporary directory, removed when the run ends.
* **Two tiers.** The default run (what CI runs, a few minutes on two cores) holds every test
  but the ``stress`` ones: cases that repeat, at full scale, what the default run already checks
  more cheaply (the provenance and tokens modes of the hostile suites' costliest cases, see
  tests/security/conftest.py). ``--stress`` (or ``MINIJINJA_PY_STRESS=1``) runs them too; the
  summary line counts them as deselected and says how to run them, so none is left out
  unseen.
* Where the shared corpus is missing, the summary says so once, with how to point at it; so
  does a skipped test marked ``announce_skip`` (the documentation site's check without the
  docs extra or a browser).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import List

import pytest

_CACHE = tempfile.mkdtemp(prefix="minijinja_py-test-cache-")
atexit.register(shutil.rmtree, _CACHE, True)
os.environ.setdefault("MINIJINJA_PY_CACHE_DIR", _CACHE)

STRESS_VARIABLE = "MINIJINJA_PY_STRESS"
_deselected_stress: List[str] = []
#: Under pytest-xdist the workers collect, and tell the controller how many they deselected
#: (each worker collects every test, so they all count the same).
_deselected_by_workers: List[int] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--stress", action="store_true", default=False,
                     help="also run the stress tier (full-scale repeats of the hostile suites' "
                          f"costliest cases; or set {STRESS_VARIABLE}=1)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stress: a full-scale case run only with --stress "
                                       "(see tests/conftest.py)")
    config.addinivalue_line(
        "markers", "announce_skip: if the test skips, its reason is printed in the run's "
        "summary (pytest -q shows skip reasons only with -rs)")


def _stress_wanted(config: pytest.Config) -> bool:
    return bool(config.getoption("--stress")) or os.environ.get(STRESS_VARIABLE) == "1"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    if _stress_wanted(config):
        return
    stress = [item for item in items if item.get_closest_marker("stress") is not None]
    if stress:
        config.hook.pytest_deselected(items=stress)
        chosen = set(map(id, stress))
        items[:] = [item for item in items if id(item) not in chosen]
        _deselected_stress.extend(item.nodeid for item in stress)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["stress_deselected"] = len(_deselected_stress)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    _deselected_by_workers.append(getattr(node, "workeroutput", {}).get("stress_deselected", 0))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    from corpus_support import CORPUS, corpus_available

    deselected = max([len(_deselected_stress), *_deselected_by_workers])
    if deselected:
        terminalreporter.write_line(
            f"stress tier: {deselected} full-scale cases deselected; run them with "
            f"`python -m pytest --stress` (or {STRESS_VARIABLE}=1)")
    if not corpus_available():
        terminalreporter.write_line(
            f"shared corpus not found at {CORPUS}: its tests were skipped; set "
            "MINIJINJA_PY_CORPUS=/path/to/corpus to run them")
    for reason in _announced_skips(terminalreporter):
        terminalreporter.write_line(f"not run: {reason}")


def _announced_skips(terminalreporter) -> List[str]:
    """The distinct reasons of the skipped tests marked ``announce_skip``: checks that need
    something optional (the docs extra, a browser) say that they did not run, and why."""
    reasons: List[str] = []
    for report in terminalreporter.stats.get("skipped", []):
        if "announce_skip" not in report.keywords or not isinstance(report.longrepr, tuple):
            continue
        reason = report.longrepr[2].removeprefix("Skipped: ")
        if reason not in reasons:
            reasons.append(reason)
    return reasons

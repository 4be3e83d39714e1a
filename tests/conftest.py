"""Test-wide settings: the persistent parse cache goes to a private temporary directory,
removed when the test run ends."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="minijinja_py-test-cache-")
atexit.register(shutil.rmtree, _CACHE, True)
os.environ.setdefault("MINIJINJA_PY_CACHE_DIR", _CACHE)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "announce_skip: if the test skips, its reason is printed in the run's "
        "summary (pytest -q shows skip reasons only with -rs)")


def pytest_terminal_summary(terminalreporter) -> None:
    """One line per distinct reason of the skipped tests marked ``announce_skip``: checks that
    need something optional (the docs extra, a browser) say that they did not run, and why."""
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        if "announce_skip" not in report.keywords or not isinstance(report.longrepr, tuple):
            continue
        reason = report.longrepr[2].removeprefix("Skipped: ")
        if reason not in reasons:
            reasons.append(reason)
    for reason in reasons:
        terminalreporter.write_line(f"not run: {reason}")

"""The version is the same wherever the package states it, and the changelog has its entry.

``tools/check_dist.py`` (run by CI's ``.ci/run``) builds and installs the distributions; this
checks, cheaply, what every run of the suite can: pyproject.toml, ``minijinja_py.__version__``,
the command's ``--version`` and the newest release of CHANGELOG.md agree.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import minijinja_py

ROOT = Path(__file__).resolve().parent.parent


def _pyproject_version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    return re.search(r'^version = "([^"]+)"', project, re.M).group(1)


def test_one_version_everywhere() -> None:
    version = _pyproject_version()
    assert minijinja_py.__version__ == version
    done = subprocess.run([sys.executable, "-m", "minijinja_py", "--version"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"minijinja-py {version}"


def test_changelog_has_the_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", text, re.M)
    assert releases, "no release heading '## [X.Y.Z] - YYYY-MM-DD' in CHANGELOG.md"
    assert releases[0][0] == _pyproject_version()
    assert "## [Unreleased]" in text.split(f"## [{releases[0][0]}]")[0]


def test_every_folder_of_the_package_is_in_the_wheel() -> None:
    # pyproject.toml lists the packages by name: a folder of the engine left out would be
    # missing from the wheel while every test of a checkout passes
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    listed = set(re.findall(r'"(minijinja_py[\w.]*)"',
                            text.split("packages = [", 1)[1].split("]", 1)[0]))
    folders = {".".join(init.parent.relative_to(ROOT).parts)
               for init in (ROOT / "minijinja_py").rglob("__init__.py")}
    assert folders - listed == set()

"""Build the distributions and check that they install and render, as a user would get them.

    python tools/check_dist.py [--outdir DIR] [--keep]

1. ``python -m build``: the sdist, then the wheel built from that sdist (so the sdist holds
   everything a build needs);
2. ``twine check --strict`` on both (metadata, and the README renders as the long
   description);
3. their contents: the sdist holds what the tests need (``tests/``, ``conformance/``,
   ``examples/``, the grammar, the docs' sources), the wheel the package with its grammar,
   generated tables and ``py.typed``, and both the version of ``minijinja_py.__version__``;
4. a fresh virtual environment (no site packages) with the wheel installed: from a folder
   outside the checkout, ``minijinja-py --version``, ``minijinja-py render
   examples/chatml.jinja`` and a ``ChatTemplate`` render in Python, the package imported from
   the environment, not from the checkout. That wheel is the one step 1 built from the sdist
   in an isolated environment, which is what ``pip install`` of the sdist does, so the sdist
   is not installed a second time.

Needs ``build`` and ``twine`` (``pip install build twine``) and the network or a pip cache for
the build's setuptools and the installs' lark. Exit status 0 when everything holds, 1
otherwise; what failed is printed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import List, Sequence

ROOT = Path(__file__).resolve().parent.parent

#: Paths the sdist must hold, below its top folder (the tests read them; see MANIFEST.in).
SDIST_REQUIRED = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in",
                  "mkdocs.yml", "grammar/jinja.lark", "examples/chatml.jinja",
                  "examples/conversation.json", "tests/conftest.py", "tests/test_chat.py",
                  "tests/security/security_support.py", "conformance/deviations.json",
                  "conformance/caselib.py", "conformance/cases", "conformance/expected",
                  "docs/index.md", "tools/check_docs_site.py", "benchmarks/bench.py")
WHEEL_REQUIRED = ("minijinja_py/__init__.py", "minijinja_py/py.typed",
                  "minijinja_py/syntax/_lalr_tables.py", "minijinja_py/syntax/_regex_programs.py",
                  "minijinja_py/grammar/jinja.lark", "minijinja_py/chat/cli.py",
                  "minijinja_py/chat/dataset/run.py")
PYTHON_RENDER = ("import minijinja_py as mj, sys; "
                 "ct = mj.ChatTemplate('{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                 "{% endfor %}'); "
                 "sys.stdout.write(ct.render([{'role': 'user', 'content': 'Hi'}]) + '\\n' "
                 "+ mj.__file__)")


def package_version() -> str:
    text = (ROOT / "minijinja_py" / "__init__.py").read_text(encoding="utf-8")
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


class Checker:
    def __init__(self) -> None:
        self.failures: List[str] = []

    def check(self, condition: bool, what: str) -> None:
        print(f"{'ok  ' if condition else 'FAIL'} {what}", flush=True)
        if not condition:
            self.failures.append(what)

    def run(self, command: Sequence[str], what: str, **kwargs: object
            ) -> "subprocess.CompletedProcess[str]":
        started = time.monotonic()
        done = subprocess.run(list(command), capture_output=True, text=True, **kwargs)
        took = f" ({time.monotonic() - started:.1f} s)"
        self.check(done.returncode == 0, what + took + ("" if done.returncode == 0 else
                   f"\n{done.stdout[-2000:]}{done.stderr[-2000:]}"))
        return done


def check_contents(checker: Checker, sdist: Path, wheel: Path, version: str) -> None:
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    top = f"minijinja_py-{version}/"
    members = {name[len(top):] for name in names if name.startswith(top)}
    folders = {name.rsplit("/", 1)[0] for name in members if "/" in name}
    missing = [path for path in SDIST_REQUIRED if path not in members and path not in folders]
    checker.check(not missing, f"the sdist holds what the tests need (missing: {missing})")
    checker.check(not any("__pycache__" in name or name.endswith(".pyc") for name in names),
                  "the sdist holds no bytecode")
    with zipfile.ZipFile(wheel) as archive:
        wheel_names = set(archive.namelist())
        metadata = archive.read(f"minijinja_py-{version}.dist-info/METADATA").decode()
    missing = [path for path in WHEEL_REQUIRED if path not in wheel_names]
    checker.check(not missing, f"the wheel holds the package and its data (missing: {missing})")
    checker.check(f"\nVersion: {version}\n" in metadata, f"the wheel's metadata says {version}")
    checker.check("Requires-Dist: lark" in metadata, "the wheel requires lark")
    checker.check(not any(name.startswith(("tests/", "docs/", "tools/")) for name in wheel_names),
                  "the wheel installs no tests, docs or tools")


def check_installed(checker: Checker, python: Path, label: str, version: str,
                    outside: Path) -> None:
    """The installed package, run from ``outside`` the checkout."""
    bin_dir = python.parent
    done = checker.run([str(bin_dir / "minijinja-py"), "--version"],
                       f"{label}: minijinja-py --version", cwd=outside)
    checker.check(done.stdout.strip() == f"minijinja-py {version}",
                  f"{label}: the command reports {version} ({done.stdout.strip()!r})")
    done = checker.run([str(bin_dir / "minijinja-py"), "render",
                        str(ROOT / "examples" / "chatml.jinja")],
                       f"{label}: minijinja-py render examples/chatml.jinja", cwd=outside)
    checker.check(done.stdout.startswith("<|im_start|>system\n")
                  and done.stdout.endswith("<|im_start|>assistant\n"),
                  f"{label}: the example renders a ChatML prompt")
    done = checker.run([str(python), "-c", PYTHON_RENDER], f"{label}: a render in Python",
                       cwd=outside)
    text, _, module = done.stdout.partition("\n")
    checker.check(text == "<user>Hi", f"{label}: ChatTemplate renders ({text!r})")
    checker.check(module.startswith(str(python.parent.parent)),
                  f"{label}: imported from the environment ({module})")


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outdir", type=Path, help="where to build (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(list(argv) or None)

    version = package_version()
    work = Path(tempfile.mkdtemp(prefix="minijinja-dist-"))
    outdir = args.outdir or work / "dist"
    checker = Checker()
    try:
        checker.run([sys.executable, "-m", "build", "--outdir", str(outdir), str(ROOT)],
                    "python -m build (the sdist, then the wheel from it)")
        sdists = sorted(outdir.glob(f"minijinja_py-{version}.tar.gz"))
        wheels = sorted(outdir.glob(f"minijinja_py-{version}-py3-none-any.whl"))
        checker.check(len(sdists) == 1 and len(wheels) == 1,
                      f"one sdist and one wheel of version {version} "
                      f"({[p.name for p in outdir.glob('*')] if outdir.exists() else []})")
        if checker.failures:
            return 1
        sdist, wheel = sdists[0], wheels[0]
        checker.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
                    "twine check --strict")
        check_contents(checker, sdist, wheel, version)

        # without pip of its own (ensurepip takes seconds): this pip installs into it
        venv = work / "venv"
        checker.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                    "a fresh virtual environment")
        python = venv / "bin" / "python"
        outside = work / "elsewhere"
        outside.mkdir()
        checker.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                     "--disable-pip-version-check", str(wheel)], "pip install the wheel",
                    cwd=outside)
        check_installed(checker, python, "wheel", version, outside)
    finally:
        if args.keep or args.outdir:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(checker.failures)} failed" if checker.failures else "distributions: all checks "
          "passed")
    return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Helpers shared by the hostile-template suites in tests/security/.

* :func:`reference_env` / :func:`jinja2_outcome`: Jinja2 3.1.6 configured as transformers
  configures it (``conformance/reference_jinja2.py``, the one definition shared with the
  conformance expectations and the benchmark), the reference for everything that is not a
  security property.
* :func:`outcome`: what minijinja_py does with a template and data, as a comparable value.
* :func:`run_isolated`: renders in a child interpreter with a wall-clock timeout and a cap on
  its address space, so that a template which hangs or eats memory fails ONE test (as a
  "timeout" or a non-template error) instead of taking the test run or the machine down.
* :data:`CORPUS`: the shared corpus (``../shared/corpus``, or ``$MINIJINJA_PY_CORPUS``).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

import minijinja_py as mj
from render_modes import CHILD_SETUP, MODE_VARIABLE, SUPPORT_VARIABLE

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The Jinja2 reference lives with the conformance suite (a plain module, not a package); its
# directory goes on the path so that this helper and regenerate.py build the very same
# environment. It is imported in reference_env(), not here, so that this helper (and
# run_isolated) keeps working without Jinja2 installed, as it always has.
_REFERENCE_DIR = str(PROJECT_ROOT / "conformance")
if _REFERENCE_DIR not in sys.path:
    sys.path.insert(0, _REFERENCE_DIR)
CORPUS = Path(os.environ.get("MINIJINJA_PY_CORPUS",
                             Path(__file__).resolve().parents[2].parent / "shared" / "corpus"))
PACKAGE_PARENT = str(Path(mj.__file__).resolve().parent.parent)
#: The clock both engines see (``strftime_now``), so that outputs compare byte for byte. Passed
#: explicitly to both, so the two engines agree whatever reference_jinja2's default is.
FIXED_NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)


def chat_env(**options: Any) -> Any:
    """``mj.chat_environment`` with the fixed clock."""
    return mj.chat_environment(now=FIXED_NOW, **options)


def corpus_available() -> bool:
    return (CORPUS / "templates").is_dir() and (CORPUS / "contexts").is_dir()


def corpus_slugs() -> list:
    if not corpus_available():
        return []
    return sorted(p.stem for p in (CORPUS / "templates").glob("*.jinja"))


def corpus_template(slug: str) -> str:
    with open(CORPUS / "templates" / f"{slug}.jinja", encoding="utf-8", newline="") as handle:
        return handle.read()


def corpus_contexts() -> Dict[str, dict]:
    if not corpus_available():
        return {}
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted((CORPUS / "contexts").glob("*.json"))}


# -- the Jinja2 reference ------------------------------------------------------------------------
def reference_env() -> Any:
    """Jinja2 configured like transformers' chat-template environment, clock at FIXED_NOW.

    A fresh environment per call, so no test can see state another one left behind.
    """
    import reference_jinja2  # deferred: needs Jinja2 (see _REFERENCE_DIR)

    return reference_jinja2.make_environment(now=FIXED_NOW)


def jinja2_outcome(source: str, data: Optional[dict] = None) -> tuple:
    """("ok", output) or ("error", exception class name) from the Jinja2 reference."""
    try:
        return "ok", reference_env().from_string(source).render(**(data or {}))
    except Exception as exc:  # noqa: BLE001 - Jinja2 raises plain Python errors too
        return "error", type(exc).__name__


def outcome(source: str, data: Optional[dict] = None, env: Any = None) -> tuple:
    """("ok", output) or ("error", TemplateError subclass) from minijinja_py.

    Any exception that is not a TemplateError propagates: that is a failure of the promise.
    """
    env = env if env is not None else mj.chat_environment()
    try:
        return "ok", env.from_string(source).render(**(data or {}))
    except mj.TemplateError as exc:
        return "error", type(exc)


# -- isolated runs -------------------------------------------------------------------------------
@dataclass
class Isolated:
    """What happened to one template run in a child interpreter."""

    kind: str                      # "ok", "template_error", "escaped", "timeout", "crash"
    elapsed: float                 # seconds, measured around from_string + render in the child
    #: CPU seconds the child spent in from_string + render (all its threads): what a bound on
    #: the work is checked against, as the wall clock (``elapsed``) grows with the machine's load
    cpu_seconds: float = 0.0
    output_length: int = 0
    output_head: str = ""
    has_address: bool = False      # "0x" followed by hex digits somewhere in the output
    error_class: str = ""          # the exception class name
    error_bases: tuple = ()        # names of its classes (mro)
    message: str = ""
    lineno: Optional[int] = None
    column: Optional[int] = None
    stderr: str = ""

    @property
    def is_limit(self) -> bool:
        return "LimitExceededError" in self.error_bases

    def describe(self) -> str:
        if self.kind in ("ok",):
            return (f"rendered {self.output_length:,} chars in {self.elapsed:.2f}s "
                    f"({self.cpu_seconds:.2f}s CPU): {self.output_head[:100]!r}")
        if self.kind == "template_error":
            return (f"{self.error_class} after {self.elapsed:.2f}s ({self.cpu_seconds:.2f}s CPU)"
                    f" at line {self.lineno} column {self.column}: {self.message[:300]}")
        if self.kind == "escaped":
            return f"NON-TEMPLATE {self.error_class} escaped: {self.message[:300]}"
        if self.kind == "timeout":
            return f"did not finish within {self.elapsed:.0f}s"
        return f"child crashed: {self.stderr[-600:]}"


_CHILD = r"""
import json, re, resource, sys, time
memory = int(sys.argv[1])
if memory:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
sys.path.insert(0, sys.argv[2])
request = json.loads(sys.stdin.buffer.read().decode("utf-8", "surrogatepass"))
import minijinja_py as mj
""" + CHILD_SETUP + r"""
limits = mj.Limits(**request["limits"]) if request["limits"] is not None else None
options = {"limits": limits} if limits is not None else {}
if request["env"] == "chat":
    env = mj.chat_environment(**options)
else:
    env = mj.Environment(**options, **request["env_options"])
result = {}
def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
start = time.perf_counter()
cpu_start = cpu_seconds()
try:
    template = env.from_string(request["source"])
    data = request["data"]
    if request["data_expr"]:
        data = eval(request["data_expr"])
    text = template.render(**data)
    result = {"kind": "ok", "output_length": len(text), "output_head": text[:200],
              "has_address": bool(re.search(r"0x[0-9a-fA-F]{4,}", text))}
except BaseException as exc:
    kind = "template_error" if isinstance(exc, mj.TemplateError) else "escaped"
    result = {"kind": kind, "error_class": type(exc).__name__,
              "error_bases": [c.__name__ for c in type(exc).__mro__],
              "message": str(getattr(exc, "message", None) or exc)[:2000],
              "lineno": getattr(exc, "lineno", None), "column": getattr(exc, "column", None)}
result["elapsed"] = time.perf_counter() - start
result["cpu_seconds"] = cpu_seconds() - cpu_start
sys.stdout.write(json.dumps(result))
"""

DEFAULT_MEMORY = 3 * 2 ** 30


def child_environment(render_mode: Optional[str] = None) -> Dict[str, str]:
    """The environment of a child interpreter: no parse cache, and the render mode (the
    test's, or ``render_mode``)."""
    variables = {**os.environ, "MINIJINJA_PY_CACHE": "0"}
    if render_mode is not None:
        variables[MODE_VARIABLE] = render_mode
        variables[SUPPORT_VARIABLE] = str(Path(__file__).resolve().parent)
    return variables


def run_isolated(source: str, data: Optional[dict] = None, *, data_expr: str = "",
                 limits: Optional[dict] = None, env: str = "chat",
                 env_options: Optional[dict] = None, timeout: float = 60.0,
                 memory: int = DEFAULT_MEMORY, render_mode: Optional[str] = None) -> Isolated:
    """Parse and render ``source`` in a child interpreter.

    ``data`` must be JSON; ``data_expr`` is a Python expression evaluated in the child instead
    (for data that JSON cannot carry). ``limits`` are ``mj.Limits`` keyword arguments. The
    child's address space is capped at ``memory`` bytes; it is killed after ``timeout`` seconds.
    It renders in the test's render mode (render_modes.py), or in ``render_mode`` when given.
    """
    request = json.dumps({"source": source, "data": data or {}, "data_expr": data_expr,
                          "limits": limits, "env": env, "env_options": env_options or {}},
                         ensure_ascii=True)
    start = time.perf_counter()
    try:
        completed = subprocess.run(
            [sys.executable, "-c", _CHILD, str(memory), PACKAGE_PARENT],
            input=request.encode("ascii"), capture_output=True, timeout=timeout,
            cwd=PACKAGE_PARENT, env=child_environment(render_mode))
    except subprocess.TimeoutExpired:
        return Isolated("timeout", time.perf_counter() - start)
    try:
        result = json.loads(completed.stdout.decode("utf-8", "replace"))
    except ValueError:
        return Isolated("crash", time.perf_counter() - start,
                        stderr=completed.stderr.decode("utf-8", "replace")
                        + f"\n(exit status {completed.returncode})")
    return Isolated(
        kind=result["kind"], elapsed=result["elapsed"], cpu_seconds=result["cpu_seconds"],
        output_length=result.get("output_length", 0),
        output_head=result.get("output_head", ""),
        has_address=result.get("has_address", False),
        error_class=result.get("error_class", ""),
        error_bases=tuple(result.get("error_bases", ())),
        message=result.get("message", ""), lineno=result.get("lineno"),
        column=result.get("column"), stderr=completed.stderr.decode("utf-8", "replace"))


# -- a test's own code in a child process: see tests/forked.py -------------------------------------
from forked import run_forked  # noqa: E402,F401  (tests/ is on the path of every test)

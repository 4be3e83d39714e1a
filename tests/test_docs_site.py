"""The documentation site builds strictly and renders in a real browser.

``tools/check_docs_site.py`` builds the site with ``mkdocs build --strict`` and opens the home
page, a guide page and the API reference in headless Chromium (see its docstring for what it
checks). It needs the ``docs`` extra (``pip install ".[docs]"``) and Debian's ``chromium``;
without them the test skips and the run's summary says which is missing. The other tests check the checker: the
docstring rewriting the API reference relies on, and that a page whose scripts did not run, or
without navigation, fails.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import check_docs_site  # noqa: E402

DOCS_PACKAGES = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")


def _missing_docs_packages() -> list:
    missing = []
    for name in DOCS_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


@pytest.mark.announce_skip
def test_site_builds_strictly_and_renders_in_chromium(tmp_path: Path) -> None:
    missing = _missing_docs_packages()
    if missing:
        pytest.skip(f"the documentation site needs the docs extra ({', '.join(missing)} not "
                    "installed): pip install \".[docs]\"")
    browser = check_docs_site.find_browser()
    if browser is None:
        pytest.skip("no Chromium to open the documentation site in (apt-get install chromium)")
    shots = tmp_path / "screenshots"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "check_docs_site.py"),
                           "--screenshots", str(shots), "--browser", browser],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mkdocs build --strict: ok" in done.stdout
    assert ", 0 failed" in done.stdout
    assert sorted(path.name for path in shots.iterdir()) == ["guide.png", "home.png",
                                                             "reference.png"]


# ---- the checker itself ---------------------------------------------------------------------
_NAVIGATION = "".join(f'<a class="md-nav__link" href="/{target}">{text}</a>'
                      for target, text in check_docs_site.SHARED_NAVIGATION)
_RENDERED = f"""<html><head><title>Home - minijinja_py</title></head><body>
<nav class="md-nav md-nav--primary">{_NAVIGATION}</nav>
<h1>minijinja_py</h1>
<div class="highlight"><pre><code><span class="n">ct</span> = ChatTemplate()</code></pre>
<button class="md-code__button" data-md-type="copy"></button></div>
</body></html>"""


def _failures(html: str) -> list:
    report = check_docs_site.Report()
    check_docs_site.check_home(check_docs_site.Page("home", "http://127.0.0.1:1/", html), report)
    return report.failures


def test_checker_accepts_a_rendered_page() -> None:
    assert _failures(_RENDERED) == []


@pytest.mark.parametrize("broken, complaint", [
    ('<button class="md-code__button" data-md-type="copy"></button>', "copy button"),
    ('<nav class="md-nav md-nav--primary">', "primary navigation"),
    ('<span class="n">ct</span>', "syntax highlighting"),
    ('<a class="md-nav__link" href="/security/">Security</a>', "'Security'"),
], ids=["scripts-did-not-run", "no-navigation", "no-highlighting", "navigation-link-missing"])
def test_checker_refuses_a_page_that_did_not_render(broken: str, complaint: str) -> None:
    assert broken in _RENDERED
    failures = _failures(_RENDERED.replace(broken, ""))
    assert any(complaint in failure for failure in failures), failures


def test_docstrings_read_as_markdown() -> None:
    pytest.importorskip("griffe", reason="the docstring extension needs griffe (docs extra)")
    from griffe_docstrings import markdown_docstring

    text = ("Raises :class:`~minijinja_py.chat.ChatConfigError` (see :meth:`render` and "
            ":func:`minijinja_py.chat_environment`).\n\n"
            ">>> ct.render([])\n'x'\n\nAfter.")
    assert markdown_docstring(text) == (
        "Raises `ChatConfigError` (see `render` and `minijinja_py.chat_environment`).\n\n"
        "```pycon\n>>> ct.render([])\n'x'\n```\n\nAfter.")

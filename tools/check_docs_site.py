"""Build the documentation site and look at it in a real browser.

    python tools/check_docs_site.py [--site DIR] [--screenshots DIR] [--browser PATH]

Builds the site with ``mkdocs build --strict`` into a temporary folder (or checks an already
built one with ``--site``), serves it on a local port with the standard library's HTTP server,
and opens three pages in headless Chromium: the home page, a guide page and a page of the API
reference. For each it reads the DOM as the browser has it after the page's JavaScript ran
(``--dump-dom``) and takes a screenshot (``--screenshot``), then checks that the page rendered:

- its title and main heading;
- the site navigation, with the links every page shares (the guides, the API reference);
- code blocks, highlighted, with the copy button Material's JavaScript adds to each (so the
  scripts ran, not only the HTML arrived);
- per page: the guide's table of contents and tables; the reference's documented objects,
  their signatures and members;
- a screenshot of the page's size that is not blank (a blank page compresses to a few KB).

Screenshots go to a temporary folder (printed), never into the repository. Exit status 0 when
every check passes, 1 otherwise, 2 when mkdocs or the browser is missing. Only the standard
library is used besides mkdocs itself and the browser (Debian's ``chromium`` package).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urljoin

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WINDOW = (1280, 1600)
#: A screenshot of a rendered page compresses to far more than this (a blank one to ~5 KB).
MIN_SCREENSHOT_BYTES = 40_000
BROWSER_TIMEOUT = 60  # seconds for one page (it takes 1-3 s)
#: Seconds for mkdocs build (about 5 s): a highlighter stuck on a code block must fail the
#: check, not hang it (Pygments' traceback lexer backtracks without end on some pycon blocks).
BUILD_TIMEOUT = 240
#: Links every page's navigation must have: (page, link text).
SHARED_NAVIGATION = (("getting-started/", "Getting started"), ("chat-api/", "The chat API"),
                     ("security/", "Security"), ("reference/chat/", "Chat API"))


# ---- reading the DOM --------------------------------------------------------------------------
@dataclass
class Element:
    tag: str
    attrs: Dict[str, str]
    text: List[str] = field(default_factory=list)

    @property
    def classes(self) -> Tuple[str, ...]:
        return tuple(self.attrs.get("class", "").split())

    def text_content(self) -> str:
        return " ".join("".join(self.text).split())


class _Collector(HTMLParser):
    """Every element of a document, with the text inside it (its descendants' included)."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
            "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: List[Element] = []
        self._open: List[Element] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.elements.append(element)
        if tag not in self.VOID:
            self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self._open) - 1, -1, -1):
            if self._open[index].tag == tag:
                del self._open[index:]
                return

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element.text.append(data)


class Page:
    """A page's DOM as the browser left it, with the few queries the checks need."""

    def __init__(self, name: str, url: str, html: str) -> None:
        self.name = name
        self.url = url
        collector = _Collector()
        collector.feed(html)
        self.elements = collector.elements

    def find(self, tag: Optional[str] = None, cls: Optional[str] = None,
             **attrs: str) -> List[Element]:
        return [element for element in self.elements
                if (tag is None or element.tag == tag)
                and (cls is None or cls in element.classes)
                and all(element.attrs.get(name.rstrip("_")) == value
                        for name, value in attrs.items())]

    def title(self) -> str:
        titles = self.find("title")
        return titles[0].text_content() if titles else ""


# ---- the checks -------------------------------------------------------------------------------
class Report:
    def __init__(self) -> None:
        self.failures: List[str] = []
        self.passed = 0

    def check(self, page: str, condition: bool, what: str) -> None:
        if condition:
            self.passed += 1
        else:
            self.failures.append(f"{page}: {what}")


def check_common(page: Page, report: Report, heading: str) -> None:
    """What every page of the site has: title, heading, navigation, highlighted code."""
    name = page.name
    report.check(name, "minijinja_py" in page.title(), f"title names the site ({page.title()!r})")
    headings = [h.text_content() for h in page.find("h1")]
    report.check(name, any(heading in text for text in headings),
                 f"an h1 with {heading!r} (found {headings})")
    primary = [nav for nav in page.find("nav", cls="md-nav--primary")]
    report.check(name, bool(primary), "the primary navigation (nav.md-nav--primary)")
    site_root = urljoin(page.url, "/")
    links = {(urljoin(page.url, link.attrs.get("href", "")), link.text_content())
             for link in page.find("a", cls="md-nav__link")}
    for target, text in SHARED_NAVIGATION:
        report.check(name, (site_root + target, text) in links,
                     f"a navigation link {text!r} to {target}")
    blocks = page.find("div", cls="highlight")
    report.check(name, bool(blocks), "highlighted code blocks (div.highlight)")
    report.check(name, bool(page.find("span", cls="n") or page.find("span", cls="nn")),
                 "syntax highlighting inside code blocks (Pygments spans)")
    copy_buttons = page.find("button", cls="md-code__button") + page.find("button",
                                                                           cls="md-clipboard")
    report.check(name, len(copy_buttons) >= len(blocks) > 0,
                 f"a copy button on every code block (JavaScript ran): {len(copy_buttons)} "
                 f"buttons for {len(blocks)} blocks")


def check_home(page: Page, report: Report) -> None:
    check_common(page, report, "minijinja_py")
    code = " ".join(block.text_content() for block in page.find("div", cls="highlight"))
    report.check(page.name, "ChatTemplate" in code, "the example code (ChatTemplate)")


def check_guide(page: Page, report: Report) -> None:
    check_common(page, report, "The chat API")
    toc = page.find("nav", cls="md-nav--secondary")
    toc_text = " ".join(nav.text_content() for nav in toc)
    report.check(page.name, "Errors" in toc_text and "Rendering" in toc_text,
                 "the table of contents lists the page's sections")
    report.check(page.name, len(page.find("table")) >= 1, "a table")
    report.check(page.name, len(page.find("div", cls="highlight")) >= 4,
                 "at least four code blocks")


def check_reference(page: Page, report: Report) -> None:
    check_common(page, report, "Chat API reference")
    objects = page.find("div", cls="doc-object")
    report.check(page.name, len(objects) >= 10, f"documented objects ({len(objects)})")
    anchors = {element.attrs.get("id") for element in page.elements}
    for identifier in ("minijinja_py.chat.pipeline.ChatTemplate",
                       "minijinja_py.chat.pipeline.ChatTemplate.render",
                       "minijinja_py.chat.api.apply_chat_template"):
        report.check(page.name, identifier in anchors, f"an entry for {identifier}")
    signatures = page.find(cls="doc-signature")
    report.check(page.name, len(signatures) >= 5, f"signatures ({len(signatures)})")
    render_signature = " ".join(s.text_content() for s in signatures)
    report.check(page.name, "add_generation_prompt" in render_signature,
                 "render's signature names add_generation_prompt")
    docstrings = " ".join(d.text_content() for d in page.find("div", cls="doc-contents"))
    report.check(page.name, ":class:" not in docstrings and ":meth:" not in docstrings,
                 "no raw Sphinx roles in the docstrings")


PAGES: Sequence[Tuple[str, str, Callable[[Page, Report], None]]] = (
    ("home", "", check_home),
    ("guide", "chat-api/", check_guide),
    ("reference", "reference/chat/", check_reference),
)


def png_size(path: Path) -> Tuple[int, int]:
    with open(path, "rb") as handle:
        header = handle.read(24)
    if header[:8] != b"\x89PNG\r\n\x1a\n":
        return (0, 0)
    return struct.unpack(">II", header[16:24])


# ---- building, serving, browsing -----------------------------------------------------------
def find_browser(explicit: Optional[str] = None) -> Optional[str]:
    if explicit:
        return shutil.which(explicit) or (explicit if os.path.exists(explicit) else None)
    for name in ((os.environ.get("CHROMIUM") or ""),) + BROWSERS:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def build_site(site: Path) -> Tuple[bool, str]:
    """``mkdocs build --strict`` into ``site``: (success, its output)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    try:
        done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                               str(site)], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired as expired:
        output = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                         for part in (expired.stdout, expired.stderr) if part)
        return False, f"{output}\nmkdocs build did not finish in {BUILD_TIMEOUT} s"
    return done.returncode == 0, done.stdout + done.stderr


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(site: Path) -> Tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def open_page(browser: str, url: str, screenshot: Path, profile: Path) -> str:
    """The DOM of ``url`` after its scripts ran, with a screenshot taken on the way."""
    command = [browser, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-extensions", f"--user-data-dir={profile}",
               f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={screenshot}",
               "--dump-dom", url]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    done = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{browser} exited with {done.returncode}: {done.stderr[-500:]}")
    return done.stdout


def run_checks(site: Path, browser: str, screenshots: Path) -> Report:
    report = Report()
    server, base = serve(site)
    try:
        with tempfile.TemporaryDirectory(prefix="minijinja-docs-profile-") as profile:
            for name, path, check in PAGES:
                shot = screenshots / f"{name}.png"
                try:
                    html = open_page(browser, base + path, shot, Path(profile))
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    report.check(name, False, f"the browser opened {path or '/'}: {exc}")
                    continue
                check(Page(name, base + path, html), report)
                width, height = png_size(shot) if shot.exists() else (0, 0)
                report.check(name, (width, height) == WINDOW,
                             f"a {WINDOW[0]}x{WINDOW[1]} screenshot ({width}x{height})")
                size = shot.stat().st_size if shot.exists() else 0
                report.check(name, size >= MIN_SCREENSHOT_BYTES,
                             f"a screenshot that is not blank ({size:,} bytes)")
    finally:
        server.shutdown()
        server.server_close()
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, help="check this built site instead of building one")
    parser.add_argument("--screenshots", type=Path,
                        help="folder for the screenshots (default: a new temporary folder)")
    parser.add_argument("--browser", help="the Chromium to run (default: found on PATH)")
    args = parser.parse_args(argv)

    browser = find_browser(args.browser)
    if browser is None:
        print("check_docs_site: no Chromium found (install Debian's chromium package, or pass "
              "--browser)", file=sys.stderr)
        return 2
    screenshots = args.screenshots or Path(tempfile.mkdtemp(prefix="minijinja-docs-shots-"))
    screenshots.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="minijinja-docs-site-") as scratch:
        site = args.site
        if site is None:
            site = Path(scratch) / "site"
            try:
                built, output = build_site(site)
            except FileNotFoundError:
                built, output = False, "mkdocs is not installed"
            if not built:
                print(f"check_docs_site: mkdocs build --strict failed:\n{output}",
                      file=sys.stderr)
                return 2 if "No module named mkdocs" in output else 1
            print("mkdocs build --strict: ok")
        report = run_checks(site, browser, screenshots)

    for failure in report.failures:
        print(f"FAIL {failure}")
    print(f"{report.passed} checks passed, {len(report.failures)} failed; "
          f"screenshots in {screenshots}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""The documentation site, built with ``mkdocs build --strict``, works in a real browser.

The site is built into a temporary directory and served on 127.0.0.1 by
``http.server``; headless Chromium (Debian's ``chromium`` package, driven by
Playwright; ``.ci/run`` installs it) then follows the navigation, searches
(the search index is loaded by the page's own search worker) and opens the
API reference, which must show the docstring of ``JetStreamContext.publish``.
A screenshot of that page is saved to ``build-artifacts/docs-screenshot.png``.

In a 1280 px wide window (a laptop), the first hour of a reader: the home
page says what the library is, shows a program and offers the main tasks as
cards; the side bar is a few sections with no two entries of one section
alike; no code block on any page scrolls sideways, no page has an empty line
under its title, and the names in the reference index are not broken
mid-word.

Without Chromium the tests fail under ``CI=true`` and are skipped elsewhere,
saying how to install it.
"""

from __future__ import annotations

import functools
import http.server
import inspect
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aiojetstream import JetStreamContext

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build-artifacts"
SCREENSHOT = ARTIFACTS / "docs-screenshot.png"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
TIMEOUT_MS = 30_000
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
"""A laptop's window: the side bar, the content and the table of contents side by side."""
TITLE_WIDTHS = (VIEWPORT["width"], 1220)
"""Titles are also checked at 1220 px, the narrowest window with a table of contents
beside the page (Material's 76.25em), where the content column is narrowest."""
MAX_TOP_LEVEL = 10
"""At most this many entries at the top of the side bar."""


def chromium() -> str:
    """The Chromium binary, or a failure (CI) or skip (elsewhere) naming the fix."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is not None:
        return found
    why = "no chromium on PATH: apt-get install -y chromium (what .ci/run does)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, freshly built with --strict (about 5 s)."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def base_url(site: Path) -> Iterator[str]:
    """The site served on 127.0.0.1 (a free port) by a thread of this process."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_search_index_lists_the_reference(site: Path) -> None:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    locations = {doc["location"] for doc in index["docs"]}
    assert "reference/context/#aiojetstream.JetStreamContext.publish" in locations
    assert "getting-started/" in locations


def test_site_in_a_headless_browser(base_url: str) -> None:
    binary = chromium()
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    summary = (inspect.getdoc(JetStreamContext.publish) or "").splitlines()[0]
    assert summary, "JetStreamContext.publish has no docstring"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))

            # Navigation: from the home page to another page through the side bar.
            page.goto(base_url)
            expect(page.locator("h1")).to_contain_text("aiojetstream documentation")
            page.locator("nav.md-nav--primary").get_by_role(
                "link", name="Getting started", exact=True
            ).first.click()
            page.wait_for_url(f"{base_url}getting-started/")
            expect(page.locator("h1")).to_contain_text("Getting started")

            # Search: the worker loads search/search_index.json and finds a name.
            with page.expect_response(lambda r: r.url.endswith("search/search_index.json")) as r:
                page.reload()
            assert r.value.ok
            search = page.get_by_role("textbox", name="Search")
            search.click()
            # Typed key by key once the worker says the index is ready: a value set at
            # once (fill) is searched only if it is there when the index becomes ready,
            # and on a loaded machine it was not, once (no result, no new search).
            meta = page.locator(".md-search-result__meta")
            expect(meta).not_to_contain_text("Initializing search")
            search.press_sequentially("publish_async_complete")
            results = page.locator("li.md-search-result__item")
            expect(results.first).to_be_visible()
            anchor = "reference/context/?h=publish_async_complete#aiojetstream.JetStreamContext."
            hit = results.locator(f'a[href*="{anchor}publish_async_complete"]')
            expect(hit.first).to_be_attached()

            # One API page: rendered from the docstring.
            page.goto(f"{base_url}reference/context/#aiojetstream.JetStreamContext.publish")
            heading = page.locator('[id="aiojetstream.JetStreamContext.publish"]')
            expect(heading).to_be_visible()
            doc = heading.locator("xpath=..").locator("div.doc-contents").first
            expect(doc).to_contain_text(summary)
            expect(doc).to_contain_text("hold_when_full")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))
            assert errors == [], errors
        finally:
            browser.close()
    assert SCREENSHOT.stat().st_size > 10_000


def site_pages(site: Path) -> list[str]:
    """Every page of the built site, as its path under the site's root ("" for home)."""
    found = []
    for index in sorted(site.rglob("index.html")):
        relative = index.relative_to(site).parent
        if relative.parts[:1] in (("assets",), ("search",)):
            continue
        found.append("" if relative == Path(".") else f"{relative.as_posix()}/")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the layout tests of this module."""
    binary = chromium()
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A 1280 x 900 page; any script error on it fails the test."""
    opened = browser.new_page(viewport=VIEWPORT)
    opened.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        opened.close()
    assert errors == [], errors


HOME_JS = r"""() => {
  const article = document.querySelector("article");
  const h1 = article.querySelector("h1");
  const intro = h1.nextElementSibling;
  const program = article.querySelector(".highlight");
  const grid = article.querySelector(".grid.cards");
  const cards = grid ? [...grid.querySelectorAll(":scope > ul > li")] : [];
  const before = (a, b) => !!(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);
  return {
    intro: intro.tagName === "P" ? intro.textContent : "",
    program: program ? program.textContent : "",
    programClass: program ? program.className : "",
    order: !!(program && grid) && before(intro, program) && before(program, grid),
    gridDisplay: grid ? getComputedStyle(grid).display : "",
    cards: cards.map(card => ({
      text: card.textContent.trim(),
      left: Math.round(card.getBoundingClientRect().left),
      links: [...card.querySelectorAll("a")].map(a => a.href),
    })),
  };
}"""


def test_home_page_shows_the_library_a_program_and_the_tasks(base_url: str, page: Page) -> None:
    page.goto(base_url)
    home: dict[str, Any] = page.evaluate(HOME_JS)
    problems = []
    # What the library is, first.
    if "asyncio client for NATS JetStream" not in " ".join(home["intro"].split()):
        problems.append(f"the first paragraph does not say what it is: {home['intro'][:80]!r}")
    # Then a short program that connects, publishes and consumes (the same
    # block runs in tests/integration/test_doc_pages.py).
    program = home["program"]
    if "language-python" not in home["programClass"].split():
        problems.append("no Python block")
    calls = ("aiojetstream.connect(", "js.publish(", "create_consumer(", "asyncio.run(")
    problems += [f"the program does not call {call}" for call in calls if call not in program]
    if len(program.splitlines()) > 40:
        problems.append("the program is not short")
    # Then the main tasks, as cards side by side, each leading to its page.
    if not home["order"]:
        problems.append("not the intro, then the program, then the cards")
    if home["gridDisplay"] != "grid":
        problems.append("no cards laid out as a grid")
    cards = home["cards"]
    if len(cards) < 8:
        problems.append(f"{len(cards)} cards")
    if len({card["left"] for card in cards}) < 2:
        problems.append("the cards are not side by side")
    problems += [
        f"a card leads nowhere: {card['text'][:40]!r}" for card in cards if not card["links"]
    ]
    linked = {link.removeprefix(base_url) for card in cards for link in card["links"]}
    tasks = ["getting-started/", "publishing/", "consumers/", "kv/", "object-store/"]
    tasks += ["errors/", "spark/", "cli/", "security/", "api/", "reference/"]
    problems += [f"no card leads to {task}" for task in tasks if task not in linked]
    # The guide and the generated reference say how they differ, and link each other.
    for path, other in (("", "reference/"), ("reference/", "api/")):
        page.goto(base_url + path)
        said = page.locator("article p", has_text="generated from the docstrings")
        if said.locator(f'a[href$="{other}"]').count() == 0:
            problems.append(f"{path or 'home'}: no paragraph says the reference is generated")
    assert problems == []


NAV_JS = r"""() => {
  const entries = (list) => [...list.querySelectorAll(":scope > li.md-nav__item")].map(li => {
    const label = li.querySelector(":scope > .md-nav__link .md-ellipsis");
    const link = li.querySelector(":scope > a.md-nav__link, :scope > .md-nav__container > a");
    const nested = li.querySelector(
      ":scope > nav.md-nav:not(.md-nav--secondary) > ul.md-nav__list");
    return {
      title: label ? label.textContent.trim() : "",
      href: link ? link.href : null,
      children: nested ? entries(nested) : [],
    };
  });
  return entries(document.querySelector("nav.md-nav--primary > ul.md-nav__list"));
}"""


def nav_problems(entries: list[dict[str, Any]], parent: str = "") -> list[str]:
    """Titles repeated among siblings or repeating their section's title."""
    problems = []
    titles = [entry["title"].casefold() for entry in entries]
    for entry in entries:
        where = f"{parent} > {entry['title']}" if parent else entry["title"]
        if not entry["title"]:
            problems.append(f"{where}: no title")
        if titles.count(entry["title"].casefold()) > 1:
            problems.append(f"{where}: twice among its siblings")
        if parent and entry["title"].casefold() == parent.rsplit(" > ", 1)[-1].casefold():
            problems.append(f"{where}: the title of its section")
        problems += nav_problems(entry["children"], where)
    return problems


def test_nav_problems_names_repeated_titles() -> None:
    """The side bar's check finds what the site must not have (the site has none)."""

    def entry(title: str, *children: dict[str, Any]) -> dict[str, Any]:
        return {"title": title, "href": None, "children": list(children)}

    nav = [
        entry("Guide", entry("Errors"), entry("errors")),
        entry("API reference", entry("API reference"), entry("Errors")),
        entry(""),
    ]
    assert nav_problems(nav) == [
        "Guide > Errors: twice among its siblings",
        "Guide > errors: twice among its siblings",
        "API reference > API reference: the title of its section",
        ": no title",
    ]


def nav_links(entries: list[dict[str, Any]]) -> list[str]:
    """Every page the side bar links to."""
    found = []
    for entry in entries:
        if entry["href"] is not None:
            found.append(entry["href"].split("#")[0])
        found += nav_links(entry["children"])
    return found


def test_side_bar_is_a_few_sections_with_distinct_entries(
    site: Path, base_url: str, page: Page
) -> None:
    page.goto(base_url)
    nav: list[dict[str, Any]] = page.evaluate(NAV_JS)
    problems = nav_problems(nav)
    top = [entry["title"] for entry in nav]
    if len(top) > MAX_TOP_LEVEL:
        problems.append(f"{len(top)} entries at the top: {top}")
    links = nav_links(nav)
    problems += [f"{link}: twice" for link in sorted(set(links)) if links.count(link) > 1]
    pages = {base_url + path for path in site_pages(site)}
    problems += [f"{link}: not in the side bar" for link in sorted(pages - set(links))]
    assert problems == []


LAYOUT_JS = r"""() => {
  const blocks = [...document.querySelectorAll("pre > code, .highlight pre")]
    .filter(block => block.scrollWidth > block.clientWidth)
    .map(block => {
      const lines = block.textContent.split("\n");
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
      return {px: block.scrollWidth - block.clientWidth, line: longest};
    });
  // The title's visible text (its hidden permalink left out) and the first
  // box under it.
  const h1 = document.querySelector("article h1");
  const walker = document.createTreeWalker(h1, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  let textBottom = -Infinity;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.data.trim() || node.parentElement.closest(".headerlink")) continue;
    range.selectNodeContents(node);
    for (const rect of range.getClientRects()) textBottom = Math.max(textBottom, rect.bottom);
  }
  let next = h1.nextElementSibling;
  while (next && next.getBoundingClientRect().height === 0) next = next.nextElementSibling;
  const style = getComputedStyle(h1);
  return {
    blocks,
    title: h1.textContent.replace("\u00b6", "").trim(),
    gap: next ? next.getBoundingClientRect().top - textBottom : 0,
    allowed: parseFloat(style.marginBottom) + parseFloat(style.lineHeight) / 2,
  };
}"""


@pytest.fixture(scope="module")
def layouts(site: Path, base_url: str, browser: Browser) -> dict[str, dict[str, Any]]:
    """Every page's code blocks that scroll sideways and the space under its title.

    ``gaps`` holds, for each of ``TITLE_WIDTHS``, the space from the title's
    text to what follows and the most allowed (the title's bottom margin and
    half a line).
    """
    found = {}
    opened = browser.new_page(viewport=VIEWPORT)
    try:
        opened.set_default_timeout(TIMEOUT_MS)
        for path in site_pages(site):
            opened.set_viewport_size(VIEWPORT)
            opened.goto(base_url + path)
            layout: dict[str, Any] = opened.evaluate(LAYOUT_JS)
            layout["gaps"] = {}
            for width in TITLE_WIDTHS:
                opened.set_viewport_size({"width": width, "height": VIEWPORT["height"]})
                at_width: dict[str, Any] = opened.evaluate(LAYOUT_JS)
                layout["gaps"][width] = (at_width["gap"], at_width["allowed"])
            found[path or "home"] = layout
    finally:
        opened.close()
    assert len(found) >= 30, sorted(found)
    return found


def test_no_code_block_scrolls_sideways(layouts: dict[str, dict[str, Any]]) -> None:
    overflowing = [
        f"{path}: {block['px']} px too wide: {block['line'][:90]!r}"
        for path, layout in layouts.items()
        for block in layout["blocks"]
    ]
    assert overflowing == []


def test_no_empty_line_under_a_title(layouts: dict[str, dict[str, Any]]) -> None:
    gaps = [
        f"{path} at {width} px: {gap:.0f} px from the title {layout['title']!r} to what "
        f"follows (at most {allowed:.0f})"
        for path, layout in layouts.items()
        for width, (gap, allowed) in layout["gaps"].items()
        if gap > allowed
    ]
    assert gaps == []


WORDS_JS = r"""() => {
  const broken = [];
  const tables = [...document.querySelectorAll("article table")];
  for (const table of tables) {
    const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.data.matchAll(/\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].map(rect => Math.round(rect.top)));
        if (lines.size > 1) broken.push(word[0]);
      }
    }
  }
  return {
    tables: tables.length,
    broken,
    scrolling: tables.filter(table => table.scrollWidth > table.clientWidth).length,
  };
}"""


def test_reference_index_does_not_break_names(base_url: str, page: Page) -> None:
    page.goto(f"{base_url}reference/")
    words: dict[str, Any] = page.evaluate(WORDS_JS)
    assert words["tables"] == 1
    assert words["broken"] == [], "words on two lines"
    assert words["scrolling"] == 0, "the table scrolls sideways instead"

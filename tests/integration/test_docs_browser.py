"""The documentation site, built with ``mkdocs build --strict``, works in a real browser.

The site is built into a temporary directory and served on 127.0.0.1 by
``http.server``; headless Chromium (Debian's ``chromium`` package, driven by
Playwright; ``.ci/run`` installs it) then follows the navigation, searches
(the search index is loaded by the page's own search worker) and opens the
API reference, which must show the docstring of ``JetStreamContext.publish``.
A screenshot of that page is saved to ``build-artifacts/docs-screenshot.png``.

Without Chromium the test fails under ``CI=true`` and is skipped elsewhere,
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

import pytest

from aiojetstream import JetStreamContext

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
            page = browser.new_page(viewport={"width": 1280, "height": 900})
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

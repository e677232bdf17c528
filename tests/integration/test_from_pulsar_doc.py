"""``docs/from-pulsar.md`` runs: every ```python block, in order, in one namespace.

The page promises that its Python blocks run top to bottom against a fresh
server with ``js`` connected and ``import aiojetstream`` done, using top-level
``await``. This test holds it to that: a block that fails names its number and
shows its text. Each block is bounded by ``BLOCK_TIMEOUT`` (``docblocks``).
"""

from __future__ import annotations

import re

from docblocks import DOCS, fresh_js, python_blocks, run_page

DOC = DOCS / "from-pulsar.md"
MIN_BLOCKS = 12
"""The page has (at least) this many runnable blocks: an edit that drops one fails here."""


def test_blocks_are_found() -> None:
    blocks = python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= MIN_BLOCKS, f"only {len(blocks)} ```python blocks in {DOC.name}"
    # The fences that are not run are deliberately not Python.
    fences = re.findall(r"^```(\w*)", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert set(fences) <= {"python", "sh", "text", ""}, fences


async def test_from_pulsar_doc_blocks_run_in_order() -> None:
    async with fresh_js() as js:
        await run_page(js, DOC, MIN_BLOCKS)

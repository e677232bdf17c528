"""The feature pages of newer servers run: every ```python block, in order, per page.

Each page promises that its Python blocks run top to bottom against a fresh
server with ``js`` connected and ``import aiojetstream`` done, using top-level
``await`` (see ``docblocks``).
"""

from __future__ import annotations

import pytest

from docblocks import DOCS, fresh_js, run_page

PAGES = {
    "atomic-batch.md": 2,
    "batch-get.md": 2,
    "counters.md": 2,
    "object-store.md": 8,
    "priority-groups.md": 4,
    "schedules.md": 2,
}
"""Each page and the least number of runnable blocks it has."""


@pytest.mark.parametrize("page", sorted(PAGES))
async def test_feature_page_blocks_run_in_order(page: str) -> None:
    async with fresh_js() as js:
        await run_page(js, DOCS / page, PAGES[page])

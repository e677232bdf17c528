"""Every complete ```python block of README.md and docs/*.md runs, in order, per page.

The rule the pages state (``docs/index.md``, "Code blocks"): each page's
blocks run top to bottom in one namespace against a fresh server, with ``js``
connected, ``import aiojetstream`` done, ``NATS_URL`` set to the server's URL
and top-level ``await`` (``docblocks``), in a temporary working directory. A
block preceded by ``<!-- fragment -->`` is skipped. ``docs/spark.md`` runs in
the Spark test session instead (``tests/spark/test_spark_doc.py``). A page
found here is run without being listed; ``MIN_RUNNABLE`` holds the pages to
the number of blocks they run, so marking a block a fragment is a visible
change.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from aiojetstream import JetStreamContext
from docblocks import DOCS, ROOT, fresh_js, page_namespace, run_blocks, runnable_blocks

SPARK_PAGES = {"spark.md"}
"""Pages whose blocks need a SparkSession: run by ``tests/spark/test_spark_doc.py``."""

MIN_RUNNABLE = {
    "README.md": 4,
    "api.md": 1,
    "atomic-batch.md": 2,
    "batch-get.md": 2,
    "consumers.md": 4,
    "counters.md": 2,
    "errors.md": 1,
    "from-pulsar.md": 13,
    "getting-started.md": 12,
    "kv.md": 3,
    "object-store.md": 8,
    "priority-groups.md": 4,
    "publishing.md": 6,
    "schedules.md": 2,
    "security.md": 3,
    "testing.md": 4,
    "ttl.md": 2,
    "typed-payloads.md": 5,
}
"""The least number of blocks each page runs (pages not listed: any number)."""


def pages() -> list[Path]:
    """README.md and every page of docs/ but the Spark ones."""
    found = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    return [page for page in found if page.name not in SPARK_PAGES]


def test_every_listed_page_exists() -> None:
    names = {page.name for page in pages()}
    assert sorted(set(MIN_RUNNABLE) - names) == []


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.name)
async def test_page_blocks_run_in_order(page: Path, tmp_path: Path) -> None:
    expected = MIN_RUNNABLE.get(page.name, 0)
    assert len(runnable_blocks(page)) >= expected
    with contextlib.chdir(tmp_path):
        async with fresh_js() as js:
            namespace = page_namespace(page, js)
            try:
                await run_blocks(page, namespace, expected)
            finally:
                await close_clients(namespace)


async def close_clients(namespace: dict[str, Any]) -> None:
    """Close the contexts and nats-py clients a page's blocks left open."""
    for value in list(namespace.values()):
        closable = isinstance(value, Client) and not value.is_closed
        if closable or isinstance(value, JetStreamContext):
            await value.close()

"""Run the ```python blocks of a Markdown page, in order, in one namespace.

Shared by the tests that hold a documentation page to its promise that its
Python blocks run top to bottom against a fresh server, with ``js`` connected
and ``import aiojetstream`` done, using top-level ``await``. A block that
fails names its number and shows its text; each block is bounded by
``BLOCK_TIMEOUT``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import re
import textwrap
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import aiojetstream
from aiojetstream import JetStreamContext
from aiojetstream.testing import NatsServer

__all__ = [
    "BLOCK_TIMEOUT",
    "DOCS",
    "fresh_js",
    "numbered",
    "page_blocks",
    "python_blocks",
    "run_block",
    "run_page",
]

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK_TIMEOUT = 30.0

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown page, in order (other fences are skipped)."""
    return [textwrap.dedent(match.group(1)) for match in _FENCE.finditer(text)]


def numbered(src: str) -> str:
    """``src`` with line numbers, for failure reports."""
    return "\n".join(f"{n:4} | {line}" for n, line in enumerate(src.splitlines(), 1))


async def run_block(
    src: str, index: int, namespace: dict[str, Any], page: str = "from-pulsar.md"
) -> None:
    """Compile and run one block (top-level ``await`` allowed) in ``namespace``."""
    code = compile(src, f"{page} block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)  # the documentation's own code
    if inspect.iscoroutine(result):
        await result


@contextlib.asynccontextmanager
async def fresh_js() -> AsyncIterator[JetStreamContext]:
    """A context on a server of its own, started for one page and stopped after it.

    The pages use fixed, readable stream names (``ORDERS``, ``JOBS``, ...) that
    several pages share; on the shared session server a page would re-create
    a stream another page's test had just deleted, which nats-server (2.15.1)
    can answer with the deleted stream's messages. A fresh server is also what
    the pages promise.
    """
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url)
        try:
            yield js
        finally:
            await js.close()


def page_blocks(page: Path) -> list[str]:
    """The ```python blocks of the Markdown file ``page``."""
    return python_blocks(page.read_text(encoding="utf-8"))


async def run_page(js: JetStreamContext, page: Path, min_blocks: int) -> None:
    """Run every ```python block of ``page`` in order; fail with the block's text."""
    blocks = page_blocks(page)
    assert len(blocks) >= min_blocks, f"only {len(blocks)} ```python blocks in {page.name}"
    namespace: dict[str, Any] = {
        "__name__": page.stem.replace("-", "_") + "_doc",
        "js": js,
        "aiojetstream": aiojetstream,
    }
    for index, src in enumerate(blocks, 1):
        failure: str | None = None
        try:
            await asyncio.wait_for(run_block(src, index, namespace, page.name), BLOCK_TIMEOUT)
        except Exception as exc:  # reported with the block's text, below
            detail = "".join(traceback.format_exception(exc))
            failure = (
                f"{page.name} block {index} of {len(blocks)} failed: {exc!r}\n\n"
                f"{numbered(src)}\n\n{detail}"
            )
        if failure is not None:
            pytest.fail(failure, pytrace=False)

"""Run the ```python blocks of a Markdown page, in order, in one namespace.

Every complete ```python block of ``README.md`` and ``docs/*.md`` runs in the
test suite (``tests/integration/test_doc_pages.py``), top to bottom, in one
namespace per page, against a fresh server: ``js`` is a connected
``JetStreamContext``, ``aiojetstream`` is imported, ``NATS_URL`` holds the
server's URL and top-level ``await`` works. A block without a top-level
``await`` runs as a script would, in a thread of its own (so it may call
``asyncio.run``).

The rule the docs state (``docs/index.md``, "Code blocks"): a block directly
preceded by the line ``<!-- fragment -->`` (blank lines between are allowed)
is a fragment, shown but not run. A block that fails names its page, number
and line and shows its text; each block is bounded by ``BLOCK_TIMEOUT``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import os
import re
import textwrap
import traceback
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import aiojetstream
from aiojetstream import JetStreamContext
from aiojetstream.testing import NatsServer

__all__ = [
    "BLOCK_TIMEOUT",
    "DOCS",
    "FRAGMENT_MARK",
    "ROOT",
    "Block",
    "blocks",
    "fresh_js",
    "nats_url_env",
    "numbered",
    "page_namespace",
    "page_blocks",
    "python_blocks",
    "run_block",
    "run_blocks",
    "run_page",
    "runnable_blocks",
]

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK_TIMEOUT = 30.0
FRAGMENT_MARK = "<!-- fragment -->"
"""The line that marks the next ```python block as a fragment: shown, never run."""

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.DOTALL | re.MULTILINE,
)


@dataclass(frozen=True)
class Block:
    """One ```python block of a page."""

    number: int
    """1-based, among the page's ```python blocks (fragments included)."""
    line: int
    """The line of its opening fence."""
    source: str
    """Its text, dedented."""
    fragment: bool
    """Marked ``<!-- fragment -->``: not run."""


def blocks(text: str) -> list[Block]:
    """Every ```python block of a Markdown text, in order, fragments marked.

    A fence may be indented (inside a list item); its body is dedented. Other
    fences (```sh, ```text, ...) are not Python and are not returned, nor are
    blocks that include a file (``--8<-- "examples/NAME.py"`` on
    docs/examples.md): the example is run by ``tests/integration/test_examples.py``.
    """
    found = []
    matches = [
        m for m in _FENCE.finditer(text) if not m.group("body").lstrip().startswith("--8<--")
    ]
    for number, match in enumerate(matches, 1):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        found.append(
            Block(
                number=number,
                line=text.count("\n", 0, match.start()) + 1,
                source=textwrap.dedent(match.group("body")),
                fragment=before == FRAGMENT_MARK,
            )
        )
    return found


def python_blocks(text: str) -> list[str]:
    """The text of every ```python block of a Markdown text, fragments included."""
    return [block.source for block in blocks(text)]


def numbered(src: str) -> str:
    """``src`` with line numbers, for failure reports."""
    return "\n".join(f"{n:4} | {line}" for n, line in enumerate(src.splitlines(), 1))


async def run_block(
    src: str,
    index: int,
    namespace: dict[str, Any],
    page: str = "from-pulsar.md",
    *,
    in_thread: bool = True,
) -> None:
    """Compile and run one block in ``namespace``.

    With a top-level ``await`` it runs on the current loop; without one, in a
    thread of its own, as a script would (it may call ``asyncio.run``), or
    with ``in_thread=False`` right here (PySpark: a streaming write started
    from another thread does not find the ``jetstream`` format).
    """
    code = compile(src, f"{page} block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        result = eval(code, namespace)  # the documentation's own code
        if inspect.iscoroutine(result):
            await result
    elif in_thread:
        await asyncio.to_thread(exec, code, namespace)
    else:
        exec(code, namespace)  # the documentation's own code


@contextlib.contextmanager
def nats_url_env(url: str) -> Iterator[None]:
    """``NATS_URL`` set to ``url`` for the duration (the docs' scripts read it)."""
    old = os.environ.get("NATS_URL")
    os.environ["NATS_URL"] = url
    try:
        yield
    finally:
        if old is None:
            del os.environ["NATS_URL"]
        else:
            os.environ["NATS_URL"] = old


@contextlib.asynccontextmanager
async def fresh_js() -> AsyncIterator[JetStreamContext]:
    """A context on a server of its own, started for one page and stopped after it.

    ``NATS_URL`` holds the server's URL meanwhile. The pages use fixed,
    readable stream names (``ORDERS``, ``JOBS``, ...) that several pages
    share; on the shared session server a page would re-create a stream
    another page's test had just deleted, which nats-server (2.15.1) can
    answer with the deleted stream's messages. A fresh server is also what
    the pages promise.
    """
    async with NatsServer() as server:
        with nats_url_env(server.url):
            js = await aiojetstream.connect(server.url)
            try:
                yield js
            finally:
                await js.close()


def runnable_blocks(page: Path) -> list[Block]:
    """The runnable (not fragment) ```python blocks of the file ``page``."""
    return [b for b in blocks(page.read_text(encoding="utf-8")) if not b.fragment]


def page_blocks(page: Path) -> list[str]:
    """The text of the runnable (not fragment) ```python blocks of the file ``page``."""
    return [b.source for b in runnable_blocks(page)]


async def run_blocks(
    page: Path, namespace: dict[str, Any], min_blocks: int = 0, *, in_thread: bool = True
) -> int:
    """Run the runnable blocks of ``page`` in order in ``namespace``; return how many ran.

    A failing block fails the test with the page's name, the block's number
    and line, and its text. ``in_thread``: see :func:`run_block`.
    """
    runnable = runnable_blocks(page)
    assert len(runnable) >= min_blocks, (
        f"only {len(runnable)} runnable ```python blocks in {page.name}, expected {min_blocks}"
    )
    for block in runnable:
        failure: str | None = None
        try:
            await asyncio.wait_for(
                run_block(block.source, block.number, namespace, page.name, in_thread=in_thread),
                BLOCK_TIMEOUT,
            )
        except Exception as exc:  # reported with the block's text, below
            detail = "".join(traceback.format_exception(exc))
            failure = (
                f"{page.name} block {block.number} (line {block.line}) failed: {exc!r}\n\n"
                f"{numbered(block.source)}\n\n{detail}"
            )
        if failure is not None:
            pytest.fail(failure, pytrace=False)
    return len(runnable)


def page_namespace(page: Path, js: JetStreamContext) -> dict[str, Any]:
    """The namespace a page's blocks start with: ``js`` and ``aiojetstream``."""
    return {
        "__name__": page.stem.replace("-", "_") + "_doc",
        "js": js,
        "aiojetstream": aiojetstream,
    }


async def run_page(js: JetStreamContext, page: Path, min_blocks: int) -> None:
    """Run every runnable ```python block of ``page`` in order; fail with the block's text."""
    await run_blocks(page, page_namespace(page, js), min_blocks)

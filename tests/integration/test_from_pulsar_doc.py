"""``docs/from-pulsar.md`` runs: every ```python block, in order, in one namespace.

The page promises that its Python blocks run top to bottom against a fresh
server with ``js`` connected and ``import aiojetstream`` done, using top-level
``await``. This test holds it to that: a block that fails names its number and
shows its text. Each block is bounded by ``BLOCK_TIMEOUT``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import textwrap
import traceback
from pathlib import Path
from typing import Any

import pytest

import aiojetstream
from aiojetstream import JetStreamContext

DOC = Path(__file__).resolve().parents[2] / "docs" / "from-pulsar.md"
BLOCK_TIMEOUT = 30.0
MIN_BLOCKS = 12
"""The page has (at least) this many runnable blocks: an edit that drops one fails here."""

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown page, in order (other fences are skipped)."""
    return [textwrap.dedent(match.group(1)) for match in _FENCE.finditer(text)]


def numbered(src: str) -> str:
    return "\n".join(f"{n:4} | {line}" for n, line in enumerate(src.splitlines(), 1))


async def run_block(src: str, index: int, namespace: dict[str, Any]) -> None:
    code = compile(
        src, f"from-pulsar.md block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    result = eval(code, namespace)  # the documentation's own code
    if inspect.iscoroutine(result):
        await result


def test_blocks_are_found() -> None:
    blocks = python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= MIN_BLOCKS, f"only {len(blocks)} ```python blocks in {DOC.name}"
    # The fences that are not run are deliberately not Python.
    fences = re.findall(r"^```(\w*)", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert set(fences) <= {"python", "sh", "text", ""}, fences


async def test_from_pulsar_doc_blocks_run_in_order(js: JetStreamContext) -> None:
    blocks = python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= MIN_BLOCKS
    namespace: dict[str, Any] = {
        "__name__": "from_pulsar_doc",
        "js": js,
        "aiojetstream": aiojetstream,
    }
    for index, src in enumerate(blocks, 1):
        failure: str | None = None
        try:
            await asyncio.wait_for(run_block(src, index, namespace), BLOCK_TIMEOUT)
        except Exception as exc:  # reported with the block's text, below
            detail = "".join(traceback.format_exception(exc))
            failure = (
                f"from-pulsar.md block {index} of {len(blocks)} failed: {exc!r}\n\n"
                f"{numbered(src)}\n\n{detail}"
            )
        if failure is not None:
            pytest.fail(failure, pytrace=False)

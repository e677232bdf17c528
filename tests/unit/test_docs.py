"""The error docs stay in step with the code (tree and err_code table)."""

from __future__ import annotations

import re
from pathlib import Path

import aiojetstream
from aiojetstream import _errors

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_error_tree_in_docs_matches_module() -> None:
    doc = _errors.__doc__ or ""
    tree = doc[doc.index("    JetStreamError") : doc.index("\n\nServer error replies")]
    expected = "\n".join(line[4:] for line in tree.splitlines())
    page = (DOCS / "errors.md").read_text()
    block = page[page.index("```text\n") + len("```text\n") :]
    block = block[: block.index("```")].rstrip("\n")
    assert block == expected


def test_err_code_table_lists_every_mapping() -> None:
    page = (DOCS / "errors.md").read_text()
    rows = dict(re.findall(r"^\| (\d{5}) \| `(\w+)` \|", page, flags=re.M))
    mapped = {str(code): cls.__name__ for code, cls in _errors._ERR_CODES.items()}
    assert rows == mapped


def test_every_exception_is_in_the_tree() -> None:
    doc = _errors.__doc__ or ""
    for name in aiojetstream.__all__:
        obj = getattr(aiojetstream, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert re.search(rf"\b{name}\b", doc), name

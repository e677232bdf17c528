"""The mutant catalogue (``make mutants``) still matches the sources.

Each mutant's ``find`` must occur exactly once in its file; a refactor that
moved the line made ``make mutants`` (run last in CI) stop at that mutant.
Checked here, in ``make test``, without running any mutant.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _catalogue() -> list[Any]:
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "tools" / "mutants.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = module
    spec.loader.exec_module(module)
    return list(module.load())


@pytest.mark.parametrize("mutant", _catalogue(), ids=lambda m: str(m.id))
def test_each_mutant_finds_its_line_once(mutant: Any) -> None:
    source = ROOT / "src" / "aiojetstream" / mutant.file
    count = source.read_text().count(mutant.find)
    assert count == 1, f"{mutant.id}: {mutant.find!r} occurs {count} times in {mutant.file}"

"""tools/griffe_docstrings.py, the docs build's check that public names have docstrings.

``make docs`` loads it into mkdocstrings (mkdocs.yml); its warnings fail the
``--strict`` build. These tests load it into griffe the same way.
"""

from __future__ import annotations

import logging
from pathlib import Path

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = f"{ROOT / 'tools' / 'griffe_docstrings.py'}:RequireDocstrings"

DEMO_INIT = '''"""A package."""
from ._impl import Thing, helper

__all__ = ["Thing", "helper"]
'''
DEMO_IMPL = '''"""Its implementation."""


class Thing:
    def method(self) -> None:
        pass

    def _private(self) -> None:
        pass

    @property
    def documented(self) -> int:
        """Documented."""
        return 1


def helper() -> None:
    """Documented."""


def unexported() -> None:
    pass


def _hidden() -> None:
    pass
'''


def warnings_for(package: str, path: Path, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        griffe.load(package, search_paths=[path], extensions=griffe.load_extensions(EXTENSION))
    return [r.getMessage() for r in caplog.records if "has no docstring" in r.getMessage()]


def test_public_names_without_a_docstring_are_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "__init__.py").write_text(DEMO_INIT)
    (tmp_path / "demo" / "_impl.py").write_text(DEMO_IMPL)
    found = [m.replace(f"{tmp_path}/", "") for m in warnings_for("demo", tmp_path, caplog)]
    assert sorted(found) == [
        "demo/_impl.py:4: public class demo._impl.Thing has no docstring",
        "demo/_impl.py:5: public function demo._impl.Thing.method has no docstring",
    ], found


def test_aiojetstream_has_a_docstring_on_every_public_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert warnings_for("aiojetstream", ROOT / "src", caplog) == []

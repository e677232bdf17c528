"""The pull engine is pure: no asyncio, no nats-py, no clock (ARCHITECTURE, ADR-37 engine)."""

from __future__ import annotations

import ast
from pathlib import Path

import aiojetstream

SRC = Path(aiojetstream.__file__).resolve().parent
FORBIDDEN = {"asyncio", "nats", "time", "threading", "random"}
CLOCK_CALLS = {"now", "utcnow", "today", "monotonic", "perf_counter", "time"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _local_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
    }


def _clock_calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCK_CALLS
    }


def test_engine_and_its_local_imports_are_pure() -> None:
    seen: set[str] = set()
    todo = ["_pull_engine"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = SRC / f"{module}.py"
        bad = _imports(path) & FORBIDDEN
        assert not bad, f"{module} imports {sorted(bad)}"
        assert not _clock_calls(path), f"{module} reads a clock: {_clock_calls(path)}"
        todo.extend(_local_imports(path))
    assert {"_pull_engine", "_status", "_errors", "_headers"} <= seen


def test_only_the_boundary_module_imports_nats() -> None:
    offenders = sorted(
        path.name
        for path in SRC.rglob("*.py")
        if "nats" in _imports(path) and path.name not in {"_nats.py", "testing.py"}
    )
    assert offenders == []

"""The key-value and object store modules never import the context back at run time.

The context (``_context.py``) imports the store packages lazily, inside the
methods that create buckets; the stores are typed against the narrow
``StoreContext`` Protocol and may name the context only under
``TYPE_CHECKING``. Nor does any store module import another module's
underscore-private name: what they share (the reader, the watcher base) is
public in its own module. An ``ast`` scan pins both.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import aiojetstream

PACKAGE = Path(aiojetstream.__file__).resolve().parent
STORE_MODULES = ("_kv", "_object", "_watch.py", "_store_context.py")


def store_files() -> list[Path]:
    files: list[Path] = []
    for name in STORE_MODULES:
        path = PACKAGE / name
        assert path.exists(), f"{path} is missing"
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement run at run time: anywhere but under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported_modules(path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names (``aiojetstream...``) an import statement loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        base = list(parts[: len(parts) - node.level])
    else:
        base = []
    module = [*base, *(node.module.split(".") if node.module else [])]
    dotted = ".".join(module)
    return [dotted] + [f"{dotted}.{alias.name}" for alias in node.names]


def test_the_stores_do_not_import_the_context_at_run_time() -> None:
    found = []
    for path in store_files():
        for node in runtime_imports(ast.parse(path.read_text(), str(path))):
            for name in imported_modules(path, node):
                if name == "aiojetstream._context" or name.startswith("aiojetstream._context."):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {name}")
    assert found == []


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_the_stores_import_no_private_name_of_another_module() -> None:
    found = []
    for path in store_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = imported_modules(path, node)[0]
            for alias in node.names:
                name = alias.name
                private = name.startswith("_") and not name.startswith("__")
                if private and not _is_module(f"{module}.{name}"):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {name}")
    assert found == []


def test_connect_leaves_every_store_module_unloaded() -> None:
    script = textwrap.dedent(
        """
        import json, sys
        from aiojetstream import connect
        print(json.dumps(sorted(sys.modules)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert "aiojetstream._context" in modules
    loaded = [
        m
        for m in modules
        if m.split(".")[:2]
        in (["aiojetstream", "_kv"], ["aiojetstream", "_object"], ["aiojetstream", "_watch"])
    ]
    assert loaded == []

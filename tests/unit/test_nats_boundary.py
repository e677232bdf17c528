"""Exactly one module reaches into nats-py: ``aiojetstream/_conn/_nats.py``.

The fast path relies on nats-py internals (its parser, its outgoing buffer,
its transports, its callbacks); keeping every use of them in one module
keeps the next nats-py upgrade to one file. Checked with ``ast`` on the
source of every module of aiojetstream, the boundary module aside:

1. In the ``_conn`` package, where nats-py's objects are handled: no
   attribute whose name has a leading underscore (dunders aside) on anything
   but ``self`` or ``cls``: ``nc._x``, ``parser._x``, ``conn.nc._x``,
   ``self._conn.nc._x`` and ``_sibling._x`` alike (names the package's modules
   share are public there). No ``getattr``/``hasattr``/``setattr``/``delattr``
   with such a name, and no ``setattr``, ``delattr`` or ``vars`` at all (they
   patch or read an object whatever the name).
2. Everywhere else (our own classes read each other's private attributes
   there, ``self._owner._reset`` say): no private attribute, by attribute or by
   ``getattr``/``hasattr``/``setattr``/``delattr``, on an object reached
   through a nats-py client (a name or attribute ``nc`` or ``_nc`` anywhere
   in the expression: ``nc._x``, ``js.nc._x``, ``self._conn.nc._pending``),
   nor one whose name only nats-py defines (gathered from nats-py's own
   source, less the private names aiojetstream defines: ``_ps``,
   ``_pending_data_size``, ``_flush_queue`` ...).

``self._x`` and ``cls._x`` are always fine: no class of ours subclasses one
of nats-py's.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import nats

import aiojetstream

SRC = Path(aiojetstream.__file__).resolve().parent
PACKAGE = SRC / "_conn"
BOUNDARY = PACKAGE / "_nats.py"
ATTRIBUTE_BUILTINS = {"getattr", "hasattr", "setattr", "delattr"}
CLIENT_NAMES = {"nc", "_nc"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _trees(root: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _defined_private_names(root: Path) -> set[str]:
    """The private names the source under ``root`` defines or assigns (and uses)."""
    names: set[str] = set()
    for _, tree in _trees(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)  # __slots__, getattr(self, "_x")
    return {name for name in names if _private(name)}


def _nats_only_names() -> set[str]:
    """Private names of nats-py that aiojetstream (its boundary aside) does not define."""
    theirs = _defined_private_names(Path(nats.__file__).resolve().parent)
    ours: set[str] = set()
    for path, tree in _trees(SRC):
        if path == BOUNDARY:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                ours.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
            elif isinstance(node, ast.arg):
                ours.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                ours.add(node.value)  # __slots__ entries
    return theirs - ours


NATS_ONLY = _nats_only_names()


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _through_client(node: ast.expr) -> bool:
    """True when ``node`` reaches a nats-py client: ``nc``/``_nc`` as a name or attribute."""
    for part in ast.walk(node):
        if isinstance(part, ast.Name) and part.id in CLIENT_NAMES:
            return True
        if isinstance(part, ast.Attribute) and part.attr in CLIENT_NAMES:
            return True
    return False


def _violations(tree: ast.Module, strict: bool) -> list[str]:
    """What breaks the rule in ``tree`` (``strict``: rule 1, else rule 2), as source lines."""

    def forbidden(target: ast.expr, name: str) -> bool:
        if not _private(name) or _is_self(target):
            return False
        return strict or _through_client(target) or name in NATS_ONLY

    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and forbidden(node.value, node.attr):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_BUILTINS | {"vars"}
            and node.args
        ):
            name = node.args[1] if len(node.args) > 1 else None
            patches = strict and node.func.id in {"setattr", "delattr", "vars"}
            by_name = (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and forbidden(node.args[0], name.value)
            )
            if patches or by_name:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _check(path: Path, tree: ast.Module) -> list[str]:
    strict = path.is_relative_to(PACKAGE)
    return [f"{path.relative_to(SRC)}:{line}" for line in _violations(tree, strict)]


def test_only_the_boundary_module_reaches_into_nats_py() -> None:
    offenders = [
        offence for path, tree in _trees(SRC) if path != BOUNDARY for offence in _check(path, tree)
    ]
    assert offenders == [], "move these behind a function of _conn/_nats.py (or a Conn method)"


def test_the_boundary_module_is_where_the_internals_are() -> None:
    """Not a rule that holds because nothing reaches in: the boundary does."""
    found = _violations(ast.parse(BOUNDARY.read_text()), strict=True)
    assert any("nc._pending" in line for line in found)
    assert any("nc._ps" in line for line in found)
    assert {"_ps", "_pending_data_size", "_flush_queue", "_process_msg"} <= NATS_ONLY


def _offences(source: str, where: str) -> list[str]:
    return _check(SRC / where, ast.parse(source))


def test_the_rule_catches_a_reach_into_nats_py_anywhere() -> None:
    reaches = [
        "nc._pending.append(b'')",
        "self._conn.nc._pending.append(b'')",
        "conn.nc._x = 1",
        "js.nc._ps.buf",
        "x = getattr(self._nc, '_resp_map', None)",
        "setattr(conn.nc, '_max_payload', 1)",
        "parser = other._ps",
        "size = client._pending_data_size",
    ]
    for source in reaches:
        assert _offences(source, "_publish.py"), source
        assert _offences(source, "_conn/_client.py"), source
    in_package = [
        "parser._x",
        "router._awaiting",
        "_raw._ROUTERS",
        "getattr(x, '_y')",
        "setattr(transport, name, value)",
        "vars(ps)",
    ]
    for source in in_package:
        assert _offences(source, "_conn/_raw.py"), source


def test_the_rule_lets_our_own_private_attributes_be() -> None:
    fine = ["self._x = 1", "cls._y", "self._conn.nc.stats", "getattr(self, '_x', None)"]
    for source in fine:
        assert not _offences(source, "_conn/_client.py"), source
    # Outside the package our classes read each other's private attributes.
    assert not _offences("self._owner._reset()", "_ordered.py")
    assert not _offences("getattr(consumer, '_telemetry_state', None)", "otel.py")

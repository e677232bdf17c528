"""The signatures docs/api.md shows (fragments: not run) match the code.

A fragment of the form ``async def name(...) -> T`` or ``Name(...)`` is parsed
and compared with ``inspect.signature`` of the object it names: the same
parameters, in the same order, of the same kind, with the same defaults.
Annotations are not compared (the page spells out aliases such as ``Payload``).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from aiojetstream import JetStreamContext, connect
from docblocks import DOCS, blocks

API = DOCS / "api.md"
NAMED: dict[str, Callable[..., Any]] = {
    "connect": connect,
    "JetStreamContext": JetStreamContext,
    "publish": JetStreamContext.publish,
}
"""What each signature of docs/api.md is the signature of."""

_SIGNATURE = re.compile(r"^(?:async def )?(\w+)\(\n.*\)(?: -> [^\n]+)?\n$", re.DOTALL)
_KINDS = {
    "posonlyargs": inspect.Parameter.POSITIONAL_ONLY,
    "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kwonlyargs": inspect.Parameter.KEYWORD_ONLY,
}


def signatures() -> dict[str, str]:
    """The signature fragments of docs/api.md by the name they show."""
    found = {}
    for block in blocks(API.read_text(encoding="utf-8")):
        match = _SIGNATURE.match(block.source)
        if block.fragment and match:
            found[match.group(1)] = block.source
    return found


def documented(source: str) -> list[tuple[str, inspect._ParameterKind, object]]:
    """(name, kind, default) of each parameter of a signature fragment."""
    text = source.strip()
    if not text.startswith(("def ", "async def ")):
        text = "def " + text
    tree = ast.parse(text + ":\n    pass\n")
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
    args = func.args
    params: list[tuple[str, inspect._ParameterKind, object]] = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [inspect.Parameter.empty] * (len(positional) - len(args.defaults))
    defaults += [ast.literal_eval(d) for d in args.defaults]
    for arg, default in zip(positional, defaults, strict=True):
        kind = _KINDS["posonlyargs" if arg in args.posonlyargs else "args"]
        params.append((arg.arg, kind, default))
    if args.vararg is not None:
        params.append((args.vararg.arg, inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.empty))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        value = inspect.Parameter.empty if kw_default is None else ast.literal_eval(kw_default)
        params.append((arg.arg, inspect.Parameter.KEYWORD_ONLY, value))
    if args.kwarg is not None:
        params.append((args.kwarg.arg, inspect.Parameter.VAR_KEYWORD, inspect.Parameter.empty))
    return params


def actual(obj: Callable[..., Any]) -> list[tuple[str, inspect._ParameterKind, object]]:
    """(name, kind, default) of each parameter of ``obj`` (``self`` left out)."""
    params = list(inspect.signature(obj).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [(p.name, p.kind, p.default) for p in params]


def test_every_signature_is_checked() -> None:
    assert sorted(signatures()) == sorted(NAMED)


@pytest.mark.parametrize("name", sorted(NAMED))
def test_signature_matches_the_code(name: str) -> None:
    assert documented(signatures()[name]) == actual(NAMED[name])

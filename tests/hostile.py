"""Hostile values for the injection tests (import as ``from hostile import ...``).

Shared by the pure checks (tests/unit/test_security_validation.py) and the
same inputs sent through a real server (tests/integration/test_security.py).
"""

from __future__ import annotations

__all__ = ["INJECTION", "EvilInt", "EvilStr"]

#: A whole second operation, if it reached the wire: its subject gives it away.
INJECTION = "\r\nPUB evil.injected 5\r\nhello\r\n"


class EvilStr(str):
    """A str whose own methods try to put an injection on the wire."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return INJECTION.encode()

    def __format__(self, spec: str) -> str:
        return INJECTION

    def __str__(self) -> str:
        return INJECTION


class EvilInt(int):
    """An int whose own formatting tries to put an injection on the wire."""

    def __format__(self, spec: str) -> str:
        return INJECTION

    def __str__(self) -> str:
        return INJECTION

    def __repr__(self) -> str:
        return INJECTION

"""What an install without an extra says: the extra to install, and nothing left open.

The development environment has every extra; its absence is simulated by a
``None`` entry in ``sys.modules`` (what ``import`` then refuses).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

import aiojetstream
from aiojetstream import InvalidOptionError
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until


def _unload(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Forget ``package`` and its submodules for this test (imported again when asked for)."""
    for name in list(sys.modules):
        if name == package or name.startswith(package + "."):
            monkeypatch.delitem(sys.modules, name)


def _without(monkeypatch: pytest.MonkeyPatch, package: str, *users: str) -> None:
    """Make ``package`` unimportable for this test, and ``users`` load again without it."""
    for name in (package, *users):
        _unload(monkeypatch, name)
    monkeypatch.setitem(sys.modules, package, None)


async def _connections_named(server: NatsServer, name: str) -> list[Any]:
    connz = await server.monitor("connz")
    return [c for c in connz.get("connections") or () if c.get("name") == name]


async def test_telemetry_without_otel_is_refused_before_connecting(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, "opentelemetry", "aiojetstream.otel")
    name = unique_name("telemetry")
    with pytest.raises(InvalidOptionError, match=r"pip install 'aiojetstream\[otel\]'") as info:
        await aiojetstream.connect(nats_server.url, telemetry=True, name=name)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    # Refused before connecting: no connection the caller could not close.
    assert await _connections_named(nats_server, name) == []


async def test_telemetry_failing_to_instrument_closes_the_connection(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import aiojetstream.otel

    def broken(js: object) -> object:
        raise RuntimeError("instrumenting failed")

    monkeypatch.setattr(aiojetstream.otel, "instrument", broken)
    name = unique_name("telemetry")
    with pytest.raises(RuntimeError, match="instrumenting failed"):
        await aiojetstream.connect(nats_server.url, telemetry=True, name=name)

    async def gone() -> bool:
        return await _connections_named(nats_server, name) == []

    await wait_until(gone, message=f"the connection {name} closed")

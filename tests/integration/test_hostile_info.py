"""A server whose INFO (or a line while connecting) is malformed: a typed, screened failure.

What used to happen against a fake server:

* ``INFO [1,2]`` (valid JSON, not an object): a bare ``AttributeError`` out of
  ``connect()``, the socket left open;
* an INFO line over 64 KiB, or a 2 MB ``-ERR`` after CONNECT: a bare
  ``ValueError`` (the reader's line limit);
* ``"max_payload": "abc"`` or null: connected, then every publish raised a
  ``TypeError``; ``-1``, ``1.5`` and ``10**400`` were taken as the limit.

Each is now a failed attempt: ``ConnectionFailedError`` saying the server sent
an invalid INFO, with no secret in it, and every socket closed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import aiojetstream
from aiojetstream import ConnectionFailedError
from helpers import wait_until

SECRET = "s3cr3t-pw"
_BASE = {
    "server_id": "FAKE",
    "server_name": "fake",
    "version": "2.15.1",
    "proto": 1,
    "host": "127.0.0.1",
    "port": 4222,
    "headers": True,
    "max_payload": 1048576,
    "jetstream": True,
}


class _Fake:
    """What the fake server saw: connections opened and closed by the client."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0
        self.url = ""


@asynccontextmanager
async def fake_server(info_line: bytes, after_connect: bytes = b"") -> AsyncIterator[_Fake]:
    """A server that sends ``info_line`` and answers PING with ``after_connect`` or PONG."""
    seen = _Fake()
    handlers: set[asyncio.Task[Any]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.opened += 1
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            writer.write(info_line)
            await writer.drain()
            while line := await reader.readline():
                if line.startswith(b"PING"):
                    writer.write(after_connect or b"PONG\r\n")
                    await writer.drain()
            seen.closed += 1  # the client closed its end
        except (ConnectionError, ValueError):
            seen.closed += 1
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, limit=2**24)
    port = server.sockets[0].getsockname()[1]
    seen.url = f"nats://alice:{SECRET}@127.0.0.1:{port}"
    try:
        yield seen
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


def _info(**fields: Any) -> bytes:
    return b"INFO " + json.dumps({**_BASE, **fields}).encode() + b"\r\n"


CASES = {
    "a JSON array": b"INFO [1,2]\r\n",
    "a JSON string": b'INFO "x"\r\n',
    "a JSON number": b"INFO 5\r\n",
    "a line over 64 KiB": b'INFO {"x":"' + b"a" * 70_000 + b'"}\r\n',
    "max_payload text": _info(max_payload="abc"),
    "max_payload null": _info(max_payload=None),
    "max_payload -1": _info(max_payload=-1),
    "max_payload 0": _info(max_payload=0),
    "max_payload 1.5": _info(max_payload=1.5),
    "max_payload true": _info(max_payload=True),
    "max_payload 10**400": _info(max_payload=0).replace(
        b'"max_payload": 0', b'"max_payload": 1' + b"0" * 400
    ),
    "max_payload past int32": _info(max_payload=2**31),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_malformed_info_is_a_connection_failure(case: str) -> None:
    async with fake_server(CASES[case]) as fake:
        with pytest.raises(ConnectionFailedError, match="the server sent an invalid INFO") as err:
            await asyncio.wait_for(aiojetstream.connect(fake.url, connect_timeout=2), 20)
        assert SECRET not in str(err.value)
        assert fake.opened == 2  # tried twice, as for any failed attempt
        assert "(tried twice)" in str(err.value)
        # every attempt's socket was closed by the client
        await wait_until(lambda: fake.closed == fake.opened, 5)


async def test_without_reconnects_the_socket_of_a_failed_connect_is_closed() -> None:
    """With ``allow_reconnect=False`` nats-py re-raised without closing the socket."""
    async with fake_server(CASES["a JSON array"]) as fake:
        with pytest.raises(ConnectionFailedError, match="the server sent an invalid INFO") as err:
            await asyncio.wait_for(
                aiojetstream.connect(fake.url, connect_timeout=2, allow_reconnect=False), 20
            )
        assert fake.opened == 1
        assert "(tried once)" in str(err.value)  # it said "tried twice"
        await wait_until(lambda: fake.closed == fake.opened, 5)


async def test_an_over_long_err_line_while_connecting_is_a_connection_failure() -> None:
    async with fake_server(_info(), after_connect=b"-ERR '" + b"x" * 2_000_000 + b"'\r\n") as fake:
        with pytest.raises(ConnectionFailedError, match="over-long line") as err:
            await asyncio.wait_for(aiojetstream.connect(fake.url, connect_timeout=2), 20)
        assert SECRET not in str(err.value)


async def test_a_valid_info_connects() -> None:
    """The control: the same fake server with nats-server's INFO."""
    async with fake_server(_info(max_payload=2**31 - 1)) as fake:
        js = await asyncio.wait_for(aiojetstream.connect(fake.url, connect_timeout=2), 20)
        try:
            assert js.nc.max_payload == 2**31 - 1
        finally:
            await js.close()

"""Credentials refused after the first connection, against real nats-servers.

nats-py closed the client for good, silently, when the user's JWT expired
while connected (``-ERR 'User Authentication Expired'``): a rotated creds
file was never read. Now, as nats.go does: the refusal goes to the error
callback and the client reconnects; a server that refuses twice in a row
leaves the rotation, and with none left the connection closes naming the
refusal.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nkeys  # type: ignore[import-untyped]  # no type hints

import aiojetstream
from aiojetstream import ConnectionClosedError, ConsumerConfig, JetStreamContext, StreamConfig
from aiojetstream.testing import NatsServer
from credentials import Operator, new_nkey
from helpers import unique_name

#: Bound of every wait here: far more than the few seconds each step takes.
BOUND = 20.0


class Events:
    """The connection's callbacks, as events and the errors reported."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.reconnected = asyncio.Event()
        self.closed = asyncio.Event()
        self._waiting: list[tuple[str, int, asyncio.Event]] = []

    def options(self) -> dict[str, Any]:
        return {
            "error_cb": self._error,
            "reconnected_cb": self._reconnected,
            "closed_cb": self._closed,
        }

    def count(self, text: str) -> int:
        return sum(text in error.lower() for error in self.errors)

    async def told(self, text: str, times: int = 1) -> None:
        """Wait until the error callback got ``times`` errors holding ``text``."""
        event = asyncio.Event()
        self._waiting.append((text, times, event))
        self._check()
        await asyncio.wait_for(event.wait(), BOUND)

    def _check(self) -> None:
        for text, times, event in self._waiting:
            if self.count(text) >= times:
                event.set()

    async def _error(self, exc: Exception) -> None:
        self.errors.append(str(exc))
        self._check()

    async def _reconnected(self) -> None:
        self.reconnected.set()

    async def _closed(self) -> None:
        self.closed.set()


async def _stream(js: JetStreamContext) -> tuple[str, str]:
    """A new stream: its name and a subject of it."""
    name = unique_name("AUTHR")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    return name, f"{name.lower()}.x"


async def _read(js: JetStreamContext, stream: str) -> None:
    """Read a consumer's messages until the iterator raises."""
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="D"))
    async with consumer.messages() as messages:
        async for message in messages:
            await message.ack()


def _expiring(operator: Operator, user: nkeys.KeyPair) -> Path:
    """A creds file whose JWT expires in 2-3 s (``exp`` is in whole seconds)."""
    return operator.user_creds("alice", user=user, expires=int(time.time()) + 3)


async def test_an_expired_jwt_is_told_and_the_rotated_creds_file_used(tmp_path: Path) -> None:
    """The JWT expires while connected: the error callback hears of it, the client
    reconnects with the creds file rotated meanwhile, and carries on."""
    operator = Operator(tmp_path)
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    path = _expiring(operator, user)
    events = Events()
    async with NatsServer(config=operator.server_config()) as server:
        js = await aiojetstream.connect(
            server.url, user_credentials=str(path), reconnect_time_wait=0.2, **events.options()
        )
        try:
            _, subject = await _stream(js)
            assert (await js.publish(subject, b"1")).seq == 1
            # The application rotates the file before the JWT expires.
            operator.user_creds("alice", user=user, expires=int(time.time()) + 3600)
            await events.told("user authentication expired")
            await asyncio.wait_for(events.reconnected.wait(), BOUND)
            assert (await js.publish(subject, b"2")).seq == 2
            assert not js.nc.is_closed
        finally:
            await js.close()


async def test_an_expired_jwt_not_renewed_closes_naming_the_refusal(tmp_path: Path) -> None:
    """Without a new JWT the reconnects are refused: the connection closes after the
    second refusal, and what was waiting and what comes later says why."""
    operator = Operator(tmp_path)
    path = _expiring(operator, new_nkey(nkeys.PREFIX_BYTE_USER))
    events = Events()
    async with NatsServer(config=operator.server_config()) as server:
        js = await aiojetstream.connect(
            server.url,
            user_credentials=str(path),
            reconnect_time_wait=0.2,
            max_reconnect_attempts=-1,
            **events.options(),
        )
        try:
            stream, subject = await _stream(js)
            reading = asyncio.ensure_future(_raised(_read(js, stream)))
            try:
                await events.told("user authentication expired")
                await asyncio.wait_for(events.closed.wait(), BOUND)
                ended = await asyncio.wait_for(reading, BOUND)
            finally:
                reading.cancel()
            for error in (ended, await _raised(js.publish(subject, b"late"))):
                assert isinstance(error, ConnectionClosedError), repr(error)
                assert "refused the credentials (user authentication expired" in str(error)
            assert "authentication expired" in str(js.nc.last_error).lower() or (
                "authorization violation" in str(js.nc.last_error).lower()
            )
        finally:
            await js.close()


async def _raised(call: Any) -> BaseException:
    try:
        await call
    except Exception as exc:
        return exc
    raise AssertionError("no error raised")

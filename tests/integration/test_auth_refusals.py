"""Credentials refused after the first connection, against real nats-servers.

nats-py closed the client for good, silently, when the user's JWT expired
while connected (``-ERR 'User Authentication Expired'``): a rotated creds
file was never read. And it retried credentials refused on a reconnect (a
rotated password) for the whole reconnect budget, for ever with
``max_reconnect_attempts=-1``, ending with a bare ``ConnectionClosedError``.
Now, as nats.go does: the refusal goes to the error callback and the client
reconnects; a server that refuses twice in a row leaves the rotation, and
with none left the connection closes naming the refusal.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nkeys  # type: ignore[import-untyped]  # no type hints

import aiojetstream
from aiojetstream import ConnectionClosedError, ConsumerConfig, JetStreamContext, StreamConfig
from aiojetstream._conn._auth import REFUSALS
from aiojetstream.testing import NatsServer
from credentials import Operator, new_nkey
from helpers import unique_name, wait_until
from proxy import StallingProxy

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


def _password(password: str) -> dict[str, Any]:
    return {"authorization": {"user": "alice", "password": password}}


async def _rotated(server: NatsServer, store: Path, password: str) -> NatsServer:
    """Stop ``server``; start another on its port and store, with a new password."""
    await server.stop()
    rotated = NatsServer(port=server.port, store_dir=store, config=_password(password))
    await rotated.start()
    return rotated


async def test_a_password_refused_on_reconnect_closes_after_two_refusals(tmp_path: Path) -> None:
    """The password was rotated on the server: with ``max_reconnect_attempts=-1`` the
    client retried for ever (each refusal to ``error_cb``); it now closes after the
    second refusal, failing the request waiting with an error that names it."""
    store = tmp_path / "store"
    events = Events()
    server = NatsServer(store_dir=store, config=_password("first-pw"))
    await server.start()
    rotated: NatsServer | None = None
    try:
        js = await aiojetstream.connect(
            server.url,
            user="alice",
            password="first-pw",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
            **events.options(),
        )
        try:
            _, subject = await _stream(js)
            rotated = await _rotated(server, store, "second-pw")
            waiting = asyncio.ensure_future(_raised(js.publish(subject, b"x", timeout=60)))
            try:
                await asyncio.wait_for(events.closed.wait(), BOUND)
                pending = await asyncio.wait_for(waiting, BOUND)
            finally:
                waiting.cancel()
            later = await _raised(js.publish(subject, b"y"))
            for error in (pending, later):
                assert isinstance(error, ConnectionClosedError), repr(error)
                assert "refused the credentials (authorization violation)" in str(error)
                assert "second-pw" not in str(error)
                assert "first-pw" not in str(error)
            assert events.count("authorization violation") == 2, events.errors
            assert "authorization violation" in str(js.nc.last_error).lower()
        finally:
            await js.close()
    finally:
        await server.stop()
        if rotated is not None:
            await rotated.stop()


async def test_a_server_refusing_twice_leaves_the_rotation(tmp_path: Path) -> None:
    """Of two servers, one refuses the credentials (rotated password) and the other
    is down: after two refusals the refusing one is no longer tried; the client
    connects to the other once it is back."""
    store = tmp_path / "store"
    events = Events()
    refusing = NatsServer(store_dir=store, config=_password("pw"))
    other = NatsServer(jetstream=False, config=_password("pw"))
    await refusing.start()
    await other.start()
    servers = [refusing.url, other.url]
    rotated: NatsServer | None = None
    back: NatsServer | None = None
    try:
        js = await aiojetstream.connect(
            servers,
            user="alice",
            password="pw",
            dont_randomize=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
            **events.options(),
        )
        try:
            assert js.nc.connected_url is not None
            assert js.nc.connected_url.port == refusing.port
            await other.stop()
            rotated = await _rotated(refusing, store, "new-pw")
            await events.told("authorization violation", 2)
            pool = [uri.port for uri in js.nc.servers]
            assert pool == [other.port], pool
            back = NatsServer(jetstream=False, port=other.port, config=_password("pw"))
            await back.start()
            await asyncio.wait_for(events.reconnected.wait(), BOUND)
            assert js.nc.connected_url is not None
            assert js.nc.connected_url.port == other.port
            await js.nc.flush(timeout=5)
            assert events.count("authorization violation") == 2, events.errors
            assert not js.nc.is_closed
        finally:
            await js.close()
    finally:
        for server in (refusing, other, rotated, back):
            if server is not None:
                await server.stop()


async def test_an_error_callback_that_closes_on_a_refusal_runs_to_its_end(tmp_path: Path) -> None:
    """An error callback that closes the context when told of an expired JWT (a
    common "give up" handler): the close no longer cancels the rest of the callback
    (it ran in the read task the close cancels)."""
    operator = Operator(tmp_path)
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    path = _expiring(operator, user)
    finished = asyncio.Event()
    holder: dict[str, JetStreamContext] = {}

    async def error_cb(error: Exception) -> None:
        if "expired" in str(error).lower():
            await holder["js"].close()
            finished.set()  # after the close: cancelled with the read task before

    async with NatsServer(config=operator.server_config()) as server:
        js = await aiojetstream.connect(
            server.url, user_credentials=str(path), reconnect_time_wait=0.2, error_cb=error_cb
        )
        holder["js"] = js
        try:
            await asyncio.wait_for(finished.wait(), BOUND)
            assert js.nc.is_closed
        finally:
            await js.close()


async def test_a_reconnect_dropped_after_its_handshake_keeps_the_refusals() -> None:
    """A connection the server took (the handshake answered) and dropped before the
    reconnect completed (nats-server takes a user JWT within the second it expires and
    expires it at once) is not a server taking the credentials. Was: its handshake
    cleared the refusals counted so far, and a close named only those after it
    ("authorization violation", not "user authentication expired"; seen in CI). Here
    the proxy answers two reconnects' flush with a refusal, then holds the next one."""
    events = Events()
    async with NatsServer() as server, StallingProxy(server.port) as proxy:
        js = await aiojetstream.connect(
            proxy.url, reconnect_time_wait=0.5, max_reconnect_attempts=-1, **events.options()
        )
        try:
            expired, violation = (
                b"-ERR 'User Authentication Expired'\r\n",
                b"-ERR 'Authorization Violation'\r\n",
            )
            proxy.stall_next(lambda _sent: expired)
            proxy.cut()
            await wait_until(lambda: proxy.accepted == 2, BOUND, interval=0.01)
            proxy.stall_next(lambda _sent: violation)  # the next attempt's, 0.5 s later
            await events.told("user authentication expired")
            await wait_until(lambda: proxy.accepted == 3, BOUND, interval=0.01)
            proxy.holding = True  # the attempt after it waits in its handshake
            await events.told("authorization violation")
            reason = REFUSALS[js.nc].reason
            assert reason is not None
            assert "(user authentication expired, then authorization violation)" in reason
            proxy.holding = False
            proxy.cut()
            await asyncio.wait_for(events.reconnected.wait(), BOUND)
            await wait_until(lambda: REFUSALS[js.nc].reason is None, BOUND)  # a completed one
        finally:
            await js.close()

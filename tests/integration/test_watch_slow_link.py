"""Watchers and listings on a slow link: the last initial value comes in during the idle check.

A reader with nothing to read for ``IDLE_CHECK`` asks the server for its
consumer's info to learn whether it has caught up. On a slow link the last
initial message can arrive while that request is on its way: the info then says
everything was delivered, yet the message is in the reader's hands. It must be
handed out, before the end of the initial values (it was dropped by listings
and came after a watcher's ``None``). The proxy holds the message until the
client asks for the info: the race, every time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import aiojetstream
from aiojetstream import JetStreamContext, KeyValueConfig, ObjectStoreConfig, _watch
from aiojetstream.testing import NatsServer
from helpers import unique_name
from proxy import HoldingProxy

pytestmark = pytest.mark.asyncio

VALUE = b"slow-link-value"


def delivery_of(subject: str) -> bytes:
    """What starts the server's delivery of a message on ``subject`` (``MSG`` or ``HMSG``)."""
    return f"MSG {subject}".encode()


@pytest.fixture(autouse=True)
def quick_idle_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_watch, "IDLE_CHECK", 0.2)


async def through_held_link(
    nats_server: NatsServer, hold_from: bytes, read: Callable[[JetStreamContext], Awaitable[Any]]
) -> Any:
    """``read(js)`` where the server's bytes from ``hold_from`` on wait for a consumer info."""
    async with HoldingProxy(nats_server.port, hold_from, b"$JS.API.CONSUMER.INFO.") as proxy:
        js = await aiojetstream.connect(proxy.url)
        try:
            result = await read(js)
        finally:
            await js.close()
        assert proxy.released.is_set()  # the race happened
        return result


@pytest.fixture
async def one_key(js: JetStreamContext) -> AsyncIterator[str]:
    bucket = unique_name("slow")
    kv = await js.create_key_value(KeyValueConfig(bucket=bucket, history=5))
    await kv.put("only", VALUE)
    yield bucket
    await js.delete_key_value(bucket)


async def test_watch_hands_out_the_last_initial_value_before_none(
    nats_server: NatsServer, one_key: str
) -> None:
    async def read(js: JetStreamContext) -> list[Any]:
        kv = await js.key_value(one_key)
        seen: list[Any] = []
        async with kv.watch() as watcher:
            async for entry in watcher:
                seen.append(entry if entry is None else (entry.key, entry.value))
                if entry is None:
                    break
        return seen

    held = delivery_of(f"$KV.{one_key}.only")
    assert await through_held_link(nats_server, held, read) == [("only", VALUE), None]


async def test_keys_and_history_keep_the_last_initial_value(
    nats_server: NatsServer, one_key: str
) -> None:
    async def keys(js: JetStreamContext) -> list[str]:
        kv = await js.key_value(one_key)
        listing = kv.keys()
        return [key async for key in listing]

    async def history(js: JetStreamContext) -> list[bytes]:
        return [e.value for e in await (await js.key_value(one_key)).history("only")]

    held = delivery_of(f"$KV.{one_key}.only")
    assert await through_held_link(nats_server, held, keys) == ["only"]
    assert await through_held_link(nats_server, held, history) == [VALUE]


async def test_object_list_keeps_the_last_object(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    bucket = unique_name("slowob")
    store = await js.create_object_store(ObjectStoreConfig(bucket=bucket))
    name = "slow-link-object.txt"
    await store.put(name, b"data")

    async def names(js: JetStreamContext) -> list[str]:
        return [info.name async for info in (await js.object_store(bucket)).list()]

    try:
        held = delivery_of(f"$O.{bucket}.M.")
        assert await through_held_link(nats_server, held, names) == [name]
    finally:
        await js.delete_object_store(bucket)

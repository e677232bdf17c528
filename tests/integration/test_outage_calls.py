"""Calls made while the client reconnects, against a real nats-server that is killed.

nats-py buffers what is written while it reconnects and sends it after the
reconnect, also when the call that wrote it has given up, and it writes no
UNSUB meanwhile. So a request the caller was told timed out was made after all
(a retried ``kv.create`` found its own key), and a ``messages()`` opened and
closed during the outage left its subscription and pull to the server, which
delivered messages to an inbox nobody read (lost with ``AckPolicy.NONE``).
Now a request waits for the reconnect within its timeout and is not sent at all
otherwise; no pull is written while reconnecting (a run pulls once reconnected);
an UNSUB is queued behind a SUB written meanwhile; an ordered consumer's (KV
watch's) delete on closing is queued rather than awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    FetchTimeoutError,
    JetStreamContext,
    JetStreamTimeoutError,
    KeyNotFoundError,
    KeyValueConfig,
    Msg,
    ObjectStoreConfig,
    StreamConfig,
    StreamNotFoundError,
    connect,
)
from aiojetstream._object.write import ObjectWriter
from aiojetstream.testing import NatsServer
from helpers import only_known_subscriptions, unique_name, wait_until
from proxy import StallingProxy

#: A loaded two-core machine's margin over a call's own bound.
MARGIN = 1.5


@pytest.fixture
async def server() -> AsyncIterator[NatsServer]:
    async with NatsServer() as srv:
        yield srv


@pytest.fixture
async def js(server: NatsServer) -> AsyncIterator[JetStreamContext]:
    ctx = await connect(server.url, timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        yield ctx
    finally:
        await ctx.close()


async def outage(server: NatsServer, js: JetStreamContext) -> None:
    await server.kill()  # the store is kept
    await wait_until(lambda: not js.nc.is_connected, 10, message="still connected")


async def back(server: NatsServer, js: JetStreamContext) -> None:
    await server.start()
    await wait_until(lambda: js.nc.is_connected, 30, message="not reconnected")


async def test_requests_given_up_during_an_outage_are_not_sent(
    server: NatsServer, js: JetStreamContext
) -> None:
    """Was: each raised "timed out waiting for a reply" and was made after the reconnect
    (the key created, the update stored, the stream deleted, the consumer created, the
    message stored)."""
    name = unique_name("OUT")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    gone = unique_name("GONE")
    await js.create_stream(StreamConfig(name=gone, subjects=[f"{gone}.>"]))
    bucket = unique_name("B")
    kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
    revision = await kv.put("upd", b"1")
    await outage(server, js)
    loop = asyncio.get_running_loop()
    calls = {
        "kv.create": kv.create("k", b"v", timeout=1),
        "kv.update": kv.update("upd", b"2", last_revision=revision, timeout=1),
        "delete_stream": js.delete_stream(gone, timeout=1),
        "create_consumer": js.create_consumer(name, ConsumerConfig(durable_name="late"), timeout=1),
        "publish": js.publish(f"{name}.x", b"m", timeout=1),
    }
    for what, call in calls.items():
        started = loop.time()
        with pytest.raises(JetStreamTimeoutError, match="was not sent"):
            await call
        took = loop.time() - started
        assert took < 1 + MARGIN, (what, took)
    await back(server, js)
    with pytest.raises(KeyNotFoundError):
        await kv.get("k")
    assert (await kv.get("upd")).revision == revision
    assert (await (await js.stream(gone)).info()).config.name == gone
    assert [n async for n in js.consumer_names(name)] == []
    assert (await (await js.stream(name)).info()).state.messages == 0
    # Sent now, each is made once: the retries the user would make.
    await kv.create("k", b"v")
    await js.delete_stream(gone)
    with pytest.raises(StreamNotFoundError):
        await js.stream(gone)


async def test_a_request_made_during_a_short_outage_waits_for_the_reconnect(
    server: NatsServer, js: JetStreamContext
) -> None:
    """Within its timeout a request waits for the reconnect and then is made once."""
    bucket = unique_name("B")
    kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
    await outage(server, js)
    put = asyncio.ensure_future(kv.put("k", b"v", timeout=30))
    await back(server, js)
    revision = await asyncio.wait_for(put, 30)
    entry = await kv.get("k")
    assert (entry.revision, entry.value) == (revision, b"v")
    assert [e.revision for e in await kv.history("k")] == [revision]


@pytest.mark.parametrize("call", ["fetch", "next"])
async def test_a_fetch_that_waited_for_the_reconnect_keeps_its_bound(
    server: NatsServer, js: JetStreamContext, call: str
) -> None:
    """The wait comes out of ``expires``: a fetch still ends within expires + 1 s + 1 s.
    Was: the pull got the whole ``expires`` after the wait (12.5 s for expires=8 here)."""
    name = unique_name("OUT")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
    await outage(server, js)
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def pull() -> list[Msg]:
        if call == "fetch":
            return await (await consumer.fetch(1, expires=8)).collect()
        return [await consumer.next(expires=8)]

    pulling = asyncio.ensure_future(pull())
    # The outage lasts 4 s of the fetch's 8 (the scenario, not a synchronisation); the
    # fetch waits up to 7 s for the reconnect.
    await wait_until(lambda: loop.time() >= started + 4, 10)
    await back(server, js)
    if call == "fetch":
        assert await asyncio.wait_for(pulling, 30) == []
    else:
        with pytest.raises(FetchTimeoutError):
            await asyncio.wait_for(pulling, 30)
    took = loop.time() - started
    assert took < 8 + 1 + 1 + MARGIN, took


@pytest.mark.parametrize("how", ["messages", "consume"])
async def test_a_run_opened_and_closed_during_an_outage_takes_nothing(
    server: NatsServer, js: JetStreamContext, how: str
) -> None:
    """Was: its SUB and pull were sent after the reconnect without an UNSUB: the server
    delivered 10 messages to an inbox nobody read (AckPolicy.NONE: lost) and kept the
    subscription."""
    name = unique_name("OUT")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    for i in range(30):
        await js.publish(f"{name}.x", b"%d" % i)
    consumer = await js.create_consumer(
        name, ConsumerConfig(durable_name="d", ack_policy=AckPolicy.NONE)
    )
    await outage(server, js)
    if how == "messages":
        async with consumer.messages(max_messages=10):
            pass
    else:

        async def handler(msg: Msg) -> None:
            raise AssertionError(f"delivered during the outage: {msg.data!r}")

        ctx = await consumer.consume(handler, max_messages=10)
        ctx.stop()
        await asyncio.wait_for(ctx.closed(), 10)
    await back(server, js)
    await only_known_subscriptions(server, js)
    got: list[bytes] = []
    while batch := await (await consumer.fetch_no_wait(100)).collect():
        got += [msg.data for msg in batch]
    assert got == [b"%d" % i for i in range(30)]  # none taken for the closed run


async def test_a_run_started_during_an_outage_pulls_after_the_reconnect(
    server: NatsServer, js: JetStreamContext
) -> None:
    """No pull is written while reconnecting: the run starts paused and pulls once back."""
    name = unique_name("OUT")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    for i in range(30):
        await js.publish(f"{name}.x", b"%d" % i)
    consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
    await outage(server, js)
    got: list[bytes] = []
    async with consumer.messages(max_messages=10, expires=20) as it:
        await back(server, js)
        while len(got) < 30:
            # (Well before the pull would have expired: it pulls on the reconnect.)
            msg = await asyncio.wait_for(it.next(), 8)
            got.append(msg.data)
            await msg.ack()
    assert got == [b"%d" % i for i in range(30)]
    await only_known_subscriptions(server, js)


async def test_a_watch_given_up_during_an_outage_leaves_no_consumer(
    server: NatsServer, js: JetStreamContext
) -> None:
    """Was: its consumer's CREATE and the close's DELETE were sent back to back after the
    reconnect; the server served the DELETE first and the consumer stayed for 5
    minutes; the watch took twice its timeout to fail."""
    bucket = unique_name("B")
    kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
    await kv.put("a", b"1")
    await outage(server, js)
    loop = asyncio.get_running_loop()

    async def watch() -> None:
        async with kv.watch() as watcher:
            async for _entry in watcher:
                raise AssertionError("a watch started during the outage")

    for _ in range(2):
        started = loop.time()
        with pytest.raises(JetStreamTimeoutError):
            await watch()
        took = loop.time() - started
        assert took < 2 + MARGIN, took
    await back(server, js)
    await only_known_subscriptions(server, js)

    async def no_consumer() -> bool:
        return [n async for n in js.consumer_names(f"KV_{bucket}")] == []

    await wait_until(no_consumer, 10, message="a watch's consumer is left on the server")
    async with kv.watch() as watcher:
        entry = await asyncio.wait_for(watcher.__anext__(), 10)
        assert entry is not None
        assert entry.key == "a"


async def test_an_object_put_whose_info_was_not_sent_purges_its_chunks(
    server: NatsServer, js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outage begins once the chunks are stored; the info is not sent in time. Was:
    "its info may or may not have been stored ... its chunks were kept (purge them if
    the object does not show this put)": the chunks stayed in the bucket. The info is
    known not stored now: the chunks are purged (once reconnected, within the put)."""
    bucket = unique_name("O")
    obs = await js.create_object_store(ObjectStoreConfig(bucket=bucket))
    old = await obs.put("obj", b"old" * 1000)
    real_store, real_discard = ObjectWriter._store_info, ObjectWriter._discard
    discarding = asyncio.Event()

    async def store_info(self: ObjectWriter, *args: Any) -> None:
        await outage(server, js)  # the chunks are stored: the info meets the outage
        await real_store(self, *args)

    async def discard(self: ObjectWriter, *args: Any, **kwargs: Any) -> None:
        discarding.set()
        await real_discard(self, *args, **kwargs)

    monkeypatch.setattr(ObjectWriter, "_store_info", store_info)
    monkeypatch.setattr(ObjectWriter, "_discard", discard)
    put = asyncio.ensure_future(obs.put("obj", b"new" * 1000, timeout=2))  # purge: 3 x 2 s
    waiting = asyncio.ensure_future(discarding.wait())
    await asyncio.wait(
        {put, waiting},
        timeout=30,
        return_when=asyncio.FIRST_COMPLETED,
    )
    waiting.cancel()
    assert discarding.is_set(), put.exception() if put.done() else "neither"
    await back(server, js)  # while the put waits to purge
    with pytest.raises(JetStreamTimeoutError, match="was not sent"):
        await asyncio.wait_for(put, 30)
    monkeypatch.undo()
    assert (await obs.info("obj")).nuid == old.nuid
    stream = await js.stream(f"OBJ_{bucket}")
    chunks = (await stream.info(subjects_filter=f"$O.{bucket}.C.>")).state.subjects or {}
    assert chunks == {f"$O.{bucket}.C.{old.nuid}": 1}, chunks


async def test_a_request_made_during_a_reconnect_handshake_is_not_sent() -> None:
    """A hung server (the TCP connection taken, no INFO): nats-py waits in each attempt's
    handshake (CONNECTING, not RECONNECTING) for most of the outage. Was: a request made
    then was buffered, "timed out waiting for a reply", and made after the reconnect."""
    async with NatsServer() as server, StallingProxy(server.port) as proxy:
        js = await connect(proxy.url, timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        try:
            kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("B")))
            proxy.holding = True
            proxy.cut()
            await wait_until(lambda: js.nc.is_connecting, 10, interval=0.01)
            with pytest.raises(JetStreamTimeoutError, match="was not sent"):
                await kv.create("k", b"v", timeout=1)
            proxy.holding = False
            proxy.cut()  # the held attempt: the next one is relayed
            await wait_until(lambda: js.nc.is_connected, 30, message="not reconnected")
            with pytest.raises(KeyNotFoundError):
                await kv.get("k")
            await kv.create("k", b"v")  # the retry is not refused as its own write
        finally:
            await js.close()


async def test_a_watch_cancelled_while_its_consumer_waits_for_the_reconnect_leaves_none(
    server: NatsServer,
) -> None:
    """The watch's consumer creation waits for the reconnect (a 10 s API timeout); the
    caller gives up after 1 s. Was: the close queued the delete, and after the reconnect
    the creation was sent behind it: the consumer stayed for 5 minutes."""
    js = await connect(server.url, timeout=10, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        bucket = unique_name("B")
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
        await kv.put("a", b"1")
        await outage(server, js)

        async def watch() -> None:
            async with kv.watch() as watcher:
                async for _entry in watcher:
                    raise AssertionError("a watch started during the outage")

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1):
                await watch()
        await back(server, js)
        await only_known_subscriptions(server, js)
        # A creation sent after the reconnect would be answered by now: ask after it.
        await js.account_info()

        async def no_consumer() -> bool:
            return [n async for n in js.consumer_names(f"KV_{bucket}")] == []

        await wait_until(no_consumer, 10, message="the watch's consumer is left on the server")
    finally:
        await js.close()


async def test_a_shortest_fetch_during_a_reconnect_waits_before_it_gives_up() -> None:
    """``expires=1`` (the least) left no time to wait for the reconnect: the fetch
    raised "not reconnected within 0 s" before anything ran, and a loop fetching
    again on that error (as the message says) held the event loop for good: nats-py
    never got to reconnect (millions of errors in 20 s)."""
    async with NatsServer(jetstream=True) as server, StallingProxy(server.port) as proxy:
        js = await connect(proxy.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        try:
            name = unique_name("SHORT")
            await js.create_stream(StreamConfig(name=name, subjects=[name]))
            await js.publish(name, b"x")
            consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
            proxy.holding = True
            proxy.cut()
            await wait_until(lambda: not js.nc.is_connected, 10, interval=0.01)
            began = asyncio.get_running_loop().time()
            with pytest.raises(JetStreamTimeoutError, match="nothing was pulled"):
                await consumer.fetch(1, expires=1)
            assert asyncio.get_running_loop().time() - began >= 0.2
            proxy.holding = False
            proxy.cut()  # the held attempt: the next one is relayed
            attempts = 0
            while True:  # what the error says: fetch again
                attempts += 1
                assert attempts < 200, "fetched again too often: the loop never waited"
                try:
                    msgs = await (await consumer.fetch(1, expires=1)).collect()
                except JetStreamTimeoutError:
                    continue
                if msgs:
                    break
            assert msgs[0].data == b"x"
        finally:
            await js.close()

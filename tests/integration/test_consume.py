"""Pull consumption against a real nats-server: fetch, next, messages, consume, acks."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import nats
import pytest

import aiojetstream
from aiojetstream import (
    AckPolicy,
    Consumer,
    ConsumerConfig,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    FetchTimeoutError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamContext,
    JetStreamError,
    MaxPayloadExceededError,
    MessageAlreadyAckedError,
    MessageTooLargeError,
    NoRespondersError,
    StorageType,
    StreamConfig,
)
from aiojetstream._message import Msg
from aiojetstream._pull_driver import PullDriver
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until
from proxy import ApiCountingProxy


async def make(
    js: JetStreamContext,
    count: int = 0,
    *,
    ack: AckPolicy = AckPolicy.EXPLICIT,
    stream: str | None = None,
    **cfg: object,
) -> Consumer:
    stream = stream or unique_name("CONS")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["cons.>"], storage=StorageType.MEMORY)
    )
    for i in range(count):
        await js.publish_async(f"cons.{i % 3}", str(i).encode())
    await js.publish_async_complete(timeout=30)
    config = ConsumerConfig(durable_name="worker", ack_policy=ack, **cfg)
    return await js.create_consumer(stream, config)


async def test_fetch_returns_a_batch(js: JetStreamContext) -> None:
    consumer = await make(js, 25)
    batch = await consumer.fetch(10, expires=5)
    msgs = [m async for m in batch]
    assert [m.data for m in msgs] == [str(i).encode() for i in range(10)]
    assert all(m.subject.startswith("cons.") for m in msgs)
    meta = msgs[3].metadata
    assert (meta.stream, meta.consumer, meta.sequence.stream, meta.sequence.consumer) == (
        consumer.stream_name,
        "worker",
        4,
        4,
    )
    assert meta.num_delivered == 1
    assert meta.num_pending == 21
    for m in msgs:
        await m.ack()
    rest = [m async for m in await consumer.fetch(100, expires=1)]
    assert len(rest) == 15


async def test_fetch_ends_at_expiry_with_what_there_is(js: JetStreamContext) -> None:
    consumer = await make(js, 2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    msgs = [m async for m in await consumer.fetch(10, expires=1)]
    assert len(msgs) == 2
    assert loop.time() - started < 5


async def test_fetch_bytes_and_no_wait(js: JetStreamContext) -> None:
    consumer = await make(js, 20)
    batch = await consumer.fetch_bytes(300, expires=2)
    got = [m async for m in batch]
    assert 1 <= len(got) < 20
    assert sum(m.size for m in got) <= 300
    nowait = [m async for m in await consumer.fetch_no_wait(5)]
    assert len(nowait) == 5
    # Nothing left beyond the pending ones: a no-wait fetch returns at once.
    for m in got + nowait:
        await m.ack()


async def test_fetch_no_wait_on_empty_consumer(js: JetStreamContext) -> None:
    consumer = await make(js)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert [m async for m in await consumer.fetch_no_wait(5)] == []
    assert loop.time() - started < 3


async def test_next(js: JetStreamContext) -> None:
    consumer = await make(js, 1)
    msg = await consumer.next(expires=5)
    assert msg.data == b"0"
    await msg.ack()
    with pytest.raises(FetchTimeoutError) as info:
        await consumer.next(expires=1)
    assert isinstance(info.value, TimeoutError)


async def _send_status(url: str, subject: str, status: bytes) -> None:
    """Publish a status message (a header block with a status line) to ``subject``.

    nats-py can not put a status line in a message: a raw connection sends it.
    """
    host, port = url.removeprefix("nats://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        await reader.readline()  # INFO
        header = b"NATS/1.0 " + status + b"\r\n\r\n"
        writer.write(
            b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n'
            b"HPUB %s %d %d\r\n%s\r\nPING\r\n"
            % (subject.encode(), len(header), len(header), header)
        )
        while (line := await reader.readline()) and not line.startswith(b"PONG"):
            pass
    finally:
        writer.close()
        await writer.wait_closed()


@contextlib.asynccontextmanager
async def _pull_spy(url: str, stream: str) -> AsyncIterator[list[tuple[str, bytes]]]:
    """The (inbox, body) of each pull request on ``stream``, seen from a second connection.

    Subscribed before the consumer exists: a subscription made after nats-server
    created it missed its pulls now and then (1 in 20 here), the server's own
    routing. Use it before creating the consumer.
    """
    spy = await nats.connect(url)
    pulls: list[tuple[str, bytes]] = []

    async def seen(msg: nats.aio.msg.Msg) -> None:
        pulls.append((msg.reply, msg.data))

    try:
        await spy.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*", cb=seen)
        await spy.flush()
        yield pulls
    finally:
        await spy.close()


@pytest.mark.parametrize("ordered", [False, True], ids=["consumer", "ordered"])
@pytest.mark.parametrize(
    "status",
    [
        b"409 Leadership Change",
        b"409 Server Shutdown\r\nNats-Pending-Messages: 1\r\nNats-Pending-Bytes: 0",
    ],
    ids=["leadership change", "server shutdown"],
)
async def test_next_pulls_again_when_the_server_drops_its_pull(
    js: JetStreamContext, nats_url: str, status: bytes, ordered: bool
) -> None:
    """A 409 Leadership Change (or Server Shutdown) ends next()'s pull without a
    message: next() raised FetchTimeoutError at once, "before expiry". It pulls
    again for the time left and gets the message published afterwards."""
    stream = unique_name("CONS")
    async with _pull_spy(nats_url, stream) as pulls:
        consumer = await make(js, stream=stream)
        source: Any = await js.ordered_consumer(stream) if ordered else consumer
        task = asyncio.create_task(source.next(expires=30))
        try:
            await wait_until(lambda: bool(pulls) or task.done(), timeout=10)
            assert not task.done(), task  # (its error shows what went wrong)
            first = len(pulls)
            await _send_status(nats_url, pulls[-1][0], status)
            await wait_until(lambda: len(pulls) > first or task.done(), timeout=10)
            assert not task.done(), task
            await js.publish("cons.0", b"after")
            msg = await asyncio.wait_for(task, 10)
            assert msg.data == b"after"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize("ordered", [False, True], ids=["consumer", "ordered"])
@pytest.mark.parametrize(
    "status",
    [
        b"409 Leadership Change",
        b"409 Server Shutdown\r\nNats-Pending-Messages: 2\r\nNats-Pending-Bytes: 0",
    ],
    ids=["leadership change", "server shutdown"],
)
async def test_fetch_pulls_again_when_the_server_drops_its_pull(
    js: JetStreamContext, nats_url: str, status: bytes, ordered: bool
) -> None:
    """A 409 Leadership Change (or Server Shutdown) before any message voids a fetch's
    pull: the batch ended empty at once (a catch-up loop stopped there). It pulls
    again, for the time left of expires, and gets what is published afterwards."""
    stream = unique_name("CONS")
    async with _pull_spy(nats_url, stream) as pulls:
        consumer = await make(js, stream=stream)
        source: Any = await js.ordered_consumer(stream) if ordered else consumer
        batch = await source.fetch(2, expires=30)
        task = asyncio.create_task(batch.collect())
        try:
            await wait_until(lambda: bool(pulls) or task.done(), timeout=10)
            assert not task.done(), task
            first = len(pulls)
            await _send_status(nats_url, pulls[-1][0], status)
            await wait_until(lambda: len(pulls) > first or task.done(), timeout=10)
            assert not task.done(), task  # (it ended: empty, before the fix)
            again = json.loads(pulls[-1][1])
            assert again["batch"] == 2
            assert 25e9 < again["expires"] <= 30e9  # the time left
            await js.publish("cons.0", b"one")
            await js.publish("cons.1", b"two")
            msgs = await asyncio.wait_for(task, 10)
            assert [m.data for m in msgs] == [b"one", b"two"]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await batch.aclose()


async def test_bad_options(js: JetStreamContext) -> None:
    consumer = await make(js)
    with pytest.raises(InvalidOptionError):
        consumer.messages(max_messages=10, max_bytes=1000)
    with pytest.raises(InvalidOptionError):
        consumer.messages(expires=0.5)
    with pytest.raises(InvalidOptionError):
        consumer.messages(heartbeat=0.1)
    with pytest.raises(InvalidOptionError):
        consumer.messages(expires=10, heartbeat=6)
    with pytest.raises(InvalidOptionError):
        await consumer.fetch(0)
    with pytest.raises(InvalidOptionError):
        await consumer.consume(lambda m: None, max_messages=5, max_bytes=5)


async def test_messages_iterates_everything(js: JetStreamContext) -> None:
    consumer = await make(js, 1200)
    seen: list[bytes] = []
    async with consumer.messages(max_messages=100) as it:
        async for msg in it:
            seen.append(msg.data)
            if len(seen) == 1200:
                await msg.double_ack()
                break
            await msg.ack()
    assert seen == [str(i).encode() for i in range(1200)]
    info = await consumer.info()
    assert info.num_ack_pending == 0


async def test_messages_with_max_messages_one(js: JetStreamContext) -> None:
    consumer = await make(js, 5)
    seen = []
    async with consumer.messages(max_messages=1) as it:
        async for msg in it:
            seen.append(msg.data)
            await msg.ack()
            if len(seen) == 5:
                break
    assert len(seen) == 5


async def test_messages_byte_mode(js: JetStreamContext) -> None:
    consumer = await make(js, 50)
    seen = 0
    async with consumer.messages(max_bytes=512) as it:
        async for msg in it:
            seen += 1
            await msg.ack()
            if seen == 50:
                break
    assert seen == 50


async def test_messages_stop_ends_iteration(js: JetStreamContext) -> None:
    consumer = await make(js, 10)
    got = []
    async with consumer.messages() as it:
        async for msg in it:
            got.append(msg)
            if len(got) == 3:
                it.stop()
    assert len(got) == 3


async def test_messages_drain_delivers_buffered(js: JetStreamContext) -> None:
    consumer = await make(js, 30)
    got: list[Msg] = []
    async with consumer.messages(max_messages=50) as it:
        first = await it.next()
        got.append(first)

        async def all_sent() -> bool:
            return (await consumer.info()).num_ack_pending == 30

        # All 30 sent by the server; some may still be in the socket at drain(),
        # which takes them in all the same (it waits for its UNSUB's round trip).
        await wait_until(all_sent, timeout=10)
        await it.drain()
        async for msg in it:
            got.append(msg)
    # Everything that was buffered (all 30 fit in the buffer) was handed out.
    assert len(got) == 30


async def test_drain_hands_out_what_the_server_sent_before_the_unsubscribe(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    """drain() with an empty buffer while messages are on their way (AckPolicy.NONE):
    the server sent them for the pull it held, the client had not read them yet. The
    drain unsubscribes and waits for the round trip: they are handed out. It used to
    end at once and unsubscribe only then: they were dropped, and with AckPolicy.NONE
    lost."""
    consumer = await make(js, ack=AckPolicy.NONE)
    async with ApiCountingProxy(nats_server.port) as proxy:
        client = await aiojetstream.connect(proxy.url)
        try:
            mine = await client.consumer(consumer.stream_name, "worker")
            async with mine.messages(max_messages=100) as it:
                await js.publish("cons.0", b"first")
                got = [await it.next()]
                proxy.downstream.clear()  # what the server sends now is on the way
                for i in range(10):
                    await js.publish("cons.1", str(i).encode())

                async def all_sent() -> bool:
                    return (await consumer.info()).delivered.consumer_seq == 11

                await wait_until(all_sent, timeout=10)
                await it.drain()
                proxy.downstream.set()
                got += [msg async for msg in it]
        finally:
            await client.close()
    assert [m.data for m in got] == [b"first", *(str(i).encode() for i in range(10))]


async def test_consume_drain_leaves_nothing_unacknowledged(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    """consume() acking every message, drained while messages are on their way: every
    one the server sent reaches the handler, none is left to wait for ack_wait."""
    consumer = await make(js, ack_wait=timedelta(seconds=60))
    async with ApiCountingProxy(nats_server.port) as proxy:
        client = await aiojetstream.connect(proxy.url)
        try:
            mine = await client.consumer(consumer.stream_name, "worker")
            seen: list[bytes] = []
            first = asyncio.Event()

            async def handler(msg: Msg) -> None:
                seen.append(msg.data)
                await msg.double_ack()
                first.set()

            ctx = await mine.consume(handler, max_messages=100)
            await js.publish("cons.0", b"first")
            await asyncio.wait_for(first.wait(), 10)
            proxy.downstream.clear()
            for i in range(10):
                await js.publish("cons.1", str(i).encode())

            async def all_sent() -> bool:
                return (await consumer.info()).delivered.consumer_seq == 11

            await wait_until(all_sent, timeout=10)
            # Released once drain() has begun: it stops the pulls before it first waits.
            asyncio.get_running_loop().call_soon(proxy.downstream.set)
            async with asyncio.timeout(10):
                await ctx.drain()
        finally:
            await client.close()
    assert seen == [b"first", *(str(i).encode() for i in range(10))]
    assert (await consumer.info()).num_ack_pending == 0


async def _publish(consumer: Consumer, js: JetStreamContext, count: int) -> None:
    for i in range(count):
        await js.publish_async(f"cons.{i % 3}", str(i).encode())
    await js.publish_async_complete(timeout=30)


async def test_messages_shared_by_a_pool_of_tasks(js: JetStreamContext) -> None:
    """A second task waiting on the iterator took the first one's place: the first
    was never woken again, not even by stop()."""
    consumer = await make(js, 0)
    got: list[tuple[int, bytes]] = []

    async def worker(n: int, it: AsyncIterator[Msg]) -> None:
        async for msg in it:
            got.append((n, msg.data))
            await msg.ack()
            await asyncio.sleep(0)  # let the others take turns

    async with consumer.messages() as it:
        tasks = [asyncio.create_task(worker(n, it)) for n in range(3)]
        # (The workers are waiting on the empty iterator by the time the first
        # publish is confirmed.)
        await _publish(consumer, js, 60)
        await wait_until(lambda: len(got) == 60, timeout=10)
        # Each message went to exactly one worker.
        assert sorted(int(data) for _, data in got) == list(range(60))
        it.stop()  # wakes every waiting worker: all of them end
        await asyncio.wait_for(asyncio.gather(*tasks), 10)


async def test_a_pool_on_messages_whose_first_start_is_cancelled_still_reads(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Iterated without ``async with`` by a pool: the first reader starts it, the others
    wait for messages; that start cancelled (a timeout around the first read), nothing
    pulled and the other readers waited for ever."""
    consumer = await make(js, 0)
    await _publish(consumer, js, 3)
    it = consumer.messages()
    got: list[bytes] = []
    conn_type = type(js._conn)
    subscribe = conn_type.subscribe_raw

    async def suspending_subscribe(*args: Any, **kwargs: Any) -> Any:
        # The start's subscription may wait (today's does not on a connected client):
        # the cancellation lands there, before the first pull is sent.
        await asyncio.sleep(0)
        return await subscribe(*args, **kwargs)

    monkeypatch.setattr(conn_type, "subscribe_raw", suspending_subscribe)

    async def worker() -> None:
        async for msg in it:
            got.append(msg.data)
            await msg.ack()

    tasks = [asyncio.create_task(worker()) for _ in range(3)]
    try:
        await asyncio.sleep(0)  # every worker in its first __anext__; the first starting
        tasks[0].cancel()
        await wait_until(lambda: len(got) == 3, timeout=10, message="the pool never read")
        assert sorted(got) == [b"0", b"1", b"2"]
        assert tasks[0].cancelled()
    finally:
        it.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        await it.aclose()


async def test_a_terminal_error_reaches_every_task_sharing_messages(
    js: JetStreamContext,
) -> None:
    consumer = await make(js, 0)
    it = consumer.messages(expires=2)
    await it.__aenter__()
    try:

        async def worker() -> None:
            async for _ in it:
                pass

        tasks = [asyncio.create_task(worker()) for _ in range(3)]
        await js.delete_consumer(consumer.stream_name, "worker")
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)
        assert all(isinstance(r, ConsumerDeletedError | ConsumerNotFoundError) for r in results), (
            results
        )
    finally:
        await it.aclose()


async def test_a_fetch_batch_shared_by_several_tasks(js: JetStreamContext) -> None:
    consumer = await make(js, 0)
    got: list[bytes] = []

    async def worker(batch: AsyncIterator[Msg]) -> int:
        n = 0
        async for msg in batch:
            got.append(msg.data)
            n += 1
        return n

    # The end of the pull (filled) reaches every task.
    batch = await consumer.fetch(10, expires=30)
    tasks = [asyncio.create_task(worker(batch)) for _ in range(3)]
    await _publish(consumer, js, 10)
    counts = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert sum(counts) == 10
    assert sorted(int(data) for data in got) == list(range(10))
    # Closing the batch early reaches every task too.
    batch = await consumer.fetch(10, expires=30)
    tasks = [asyncio.create_task(worker(batch)) for _ in range(3)]
    await js.nc.flush()  # (the workers wait by the time the round trip is over)
    await batch.aclose()
    assert await asyncio.wait_for(asyncio.gather(*tasks), 10) == [0, 0, 0]


async def test_consume_sync_and_async_handlers(js: JetStreamContext) -> None:
    consumer = await make(js, 40)
    done = asyncio.Event()
    seen: list[bytes] = []

    def handler(msg: Msg) -> None:
        seen.append(msg.data)
        if len(seen) == 20:
            done.set()

    ctx = await consumer.consume(handler, max_messages=7)
    await asyncio.wait_for(done.wait(), 10)
    ctx.stop()
    assert await ctx.closed() is None
    assert len(seen) >= 20

    seen_async: list[bytes] = []
    done2 = asyncio.Event()

    async def ahandler(msg: Msg) -> None:
        seen_async.append(msg.data)
        await msg.ack()
        if len(seen_async) == 40:
            done2.set()

    # Nothing was acked by the first run: all 40 come again to a fresh durable.
    await js.delete_consumer(consumer.stream_name, "worker")
    consumer = await js.create_consumer(
        consumer.stream_name, ConsumerConfig(durable_name="worker2")
    )
    async with await consumer.consume(ahandler):
        await asyncio.wait_for(done2.wait(), 10)
    assert sorted(seen_async) == sorted(str(i).encode() for i in range(40))


async def test_consume_drain(js: JetStreamContext) -> None:
    consumer = await make(js, 10)
    seen: list[Msg] = []
    first = asyncio.Event()

    async def handler(msg: Msg) -> None:
        seen.append(msg)
        first.set()

    ctx = await consumer.consume(handler, max_messages=100)
    await asyncio.wait_for(first.wait(), 10)
    await asyncio.wait_for(ctx.drain(), 10)
    assert len(seen) == 10


async def test_consume_acknowledges_nothing_by_itself(js: JetStreamContext) -> None:
    consumer = await make(js, 5, ack_wait=timedelta(seconds=30))
    done = asyncio.Event()
    count = 0

    def handler(msg: Msg) -> None:
        nonlocal count
        count += 1
        if count == 5:
            done.set()

    async with await consumer.consume(handler):
        await asyncio.wait_for(done.wait(), 10)
    info = await consumer.info()
    assert info.num_ack_pending == 5


async def test_acks(js: JetStreamContext) -> None:
    consumer = await make(js, 4, ack_wait=timedelta(seconds=30))
    msgs = [m async for m in await consumer.fetch(4, expires=5)]
    await msgs[0].ack()
    with pytest.raises(MessageAlreadyAckedError):
        await msgs[0].ack()
    with pytest.raises(MessageAlreadyAckedError):
        await msgs[0].nak()
    await msgs[1].double_ack(timeout=5)
    await msgs[2].in_progress()
    await msgs[2].in_progress()
    await msgs[2].term("bad payload")
    with pytest.raises(MessageAlreadyAckedError):
        await msgs[2].term()
    await msgs[3].nak(delay=0.2)
    again = await consumer.next(expires=5)
    assert again.data == msgs[3].data
    assert again.metadata.num_delivered == 2
    await again.double_ack()  # confirmed: the info below sees it
    info = await consumer.info()
    assert info.num_ack_pending == 0


async def test_a_nak_without_delay_is_redelivered_at_once_whatever_the_backoff(
    js: JetStreamContext,
) -> None:
    """A consumer's ``backoff`` spaces the redeliveries after ack timeouts only.

    nats-server puts a plain ``-NAK`` straight on its redelivery queue: the
    message comes again at once, not after ``backoff[0]`` (30 s here), as
    ``Msg.nak`` and docs/consumers.md said; ``nak(delay)`` waits for its delay.
    """
    consumer = await make(js, 2, backoff=[timedelta(seconds=30)], max_deliver=3)
    loop = asyncio.get_running_loop()
    first, second = [m async for m in await consumer.fetch(2, expires=5)]
    naked = loop.time()
    await first.nak()
    again = await consumer.next(expires=5)
    assert (again.data, again.metadata.num_delivered) == (first.data, 2)
    assert loop.time() - naked < 5  # at once: well before backoff[0]
    await again.double_ack()
    naked = loop.time()
    await second.nak(delay=0.5)
    again = await consumer.next(expires=5)
    assert (again.data, again.metadata.num_delivered) == (second.data, 2)
    assert 0.5 <= loop.time() - naked < 5
    await again.double_ack()
    # What the library says about it.
    doc = " ".join((Msg.nak.__doc__ or "").split())
    assert "None: redelivered at once" in doc
    assert "applies only when ``ack_wait`` runs out" in doc
    page = (Path(__file__).parents[2] / "docs" / "consumers.md").read_text(encoding="utf-8")
    (row,) = [line for line in page.splitlines() if line.startswith("| `await msg.nak(")]
    assert "`None`: redelivered at once" in row
    assert "per the consumer's `backoff`" not in row


@pytest.mark.parametrize("why", ["deleted", "ack none"])
async def test_double_ack_with_nothing_serving_the_ack_raises_no_responders(
    js: JetStreamContext, why: str
) -> None:
    """``double_ack`` raises ``NoRespondersError`` when nothing serves the ack subject.

    After the consumer was deleted and on an ``AckPolicy.NONE`` consumer (for
    good), and during a consumer leader election (transient): its docstring
    named only ``JetStreamTimeoutError``, so a caller catching that crashed.
    The message stays unsettled: the call may be retried.
    """
    ack = AckPolicy.NONE if why == "ack none" else AckPolicy.EXPLICIT
    consumer = await make(js, 1, ack=ack)
    (msg,) = [m async for m in await consumer.fetch(1, expires=5)]
    if why == "deleted":
        await js.delete_consumer(consumer.stream_name, consumer.name)
    for _ in range(2):  # not settled by the failure: the retry fails the same way
        with pytest.raises(NoRespondersError):
            await msg.double_ack(timeout=5)
        assert not msg.acked
    doc = " ".join((Msg.double_ack.__doc__ or "").split())
    assert "NoRespondersError: nothing serves the ack subject" in doc


async def test_a_term_reason_over_max_payload_is_refused_before_sending(
    js: JetStreamContext,
) -> None:
    """On the fast path the +TERM went out over max_payload: the server answered
    -ERR and closed the connection for good, and term() had returned (acked True)."""
    consumer = await make(js, 1, ack_wait=timedelta(seconds=30))
    msg = await consumer.next(expires=5)
    limit = js._api.conn.max_payload
    assert limit > 0
    with pytest.raises(MaxPayloadExceededError, match="max_payload"):
        await msg.term("x" * limit)  # "+TERM " + reason: over the limit
    assert not msg.acked
    # The connection lives on, and the message can still be settled.
    await msg.term("x" * (limit - len(b"+TERM ")))  # exactly max_payload: taken
    assert msg.acked

    async def settled() -> bool:
        return (await consumer.info()).num_ack_pending == 0

    await wait_until(settled, timeout=10)
    assert (await consumer.info()).num_redelivered == 0


async def test_a_term_reason_that_is_not_valid_text_is_refused(js: JetStreamContext) -> None:
    consumer = await make(js, 1, ack_wait=timedelta(seconds=30))
    msg = await consumer.next(expires=5)
    with pytest.raises(InvalidOptionError, match="UTF-8"):
        await msg.term("bad \ud800 surrogate")
    with pytest.raises(InvalidOptionError, match="expected a string"):
        await msg.term(123)  # type: ignore[arg-type]
    assert not msg.acked
    await msg.term("fine")
    assert msg.acked


async def test_terminal_error_reaches_error_handler(js: JetStreamContext) -> None:
    consumer = await make(js, 0)
    errors: list[JetStreamError] = []
    got_error = asyncio.Event()

    def on_error(err: JetStreamError) -> None:
        errors.append(err)
        got_error.set()

    ctx = await consumer.consume(lambda m: None, error_handler=on_error, expires=2)
    await js.delete_consumer(consumer.stream_name, "worker")
    await asyncio.wait_for(got_error.wait(), 10)
    err = await asyncio.wait_for(ctx.closed(), 10)
    assert err is not None
    assert type(err).__name__ in {"ConsumerDeletedError", "ConsumerNotFoundError"}


async def test_closed_and_drain_from_inside_the_handler(js: JetStreamContext) -> None:
    consumer = await make(js, 10)
    seen: list[Msg] = []
    ctx_box: list[object] = []
    returned = asyncio.Event()

    async def handler(msg: Msg) -> None:
        seen.append(msg)
        if len(seen) == 3:
            ctx = ctx_box[0]
            assert hasattr(ctx, "drain")
            await ctx.drain()  # must not wait for itself
            returned.set()

    ctx = await consumer.consume(handler, max_messages=3)
    ctx_box.append(ctx)
    await asyncio.wait_for(returned.wait(), 10)
    assert await asyncio.wait_for(ctx.closed(), 10) is None


async def test_a_start_that_fails_leaves_no_subscription_or_listener(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull run whose start fails after subscribing (here: its first pull) releases
    its inbox subscription and connection listener (they stayed, and the listener
    would check the consumer and pull again after a reconnect)."""
    from aiojetstream import _conn
    from aiojetstream._pull_engine import PullEngine

    consumer = await make(js, 1)
    subscriptions = js.nc._subs
    hub = _conn._HUBS.get(js.nc)
    listeners_before = len(hub.listeners) if hub is not None else 0
    subs_before = len(subscriptions)

    def fail(self: PullEngine, now: float) -> object:
        raise RuntimeError("the first pull failed")

    monkeypatch.setattr(PullEngine, "start", fail)
    for call in (consumer.fetch(1), consumer.next(expires=1)):
        with pytest.raises(RuntimeError, match="first pull"):
            await call
    with pytest.raises(RuntimeError, match="first pull"):
        async with consumer.messages():
            pass
    monkeypatch.undo()
    hub = _conn._HUBS.get(js.nc)
    assert (len(hub.listeners) if hub is not None else 0) == listeners_before
    await wait_until(lambda: len(subscriptions) == subs_before, 5)


@pytest.mark.parametrize("kind", ["consumer", "ordered"])
async def test_messages_left_early_without_async_with_stops_once_dropped(
    js: JetStreamContext, kind: str
) -> None:
    """``async for msg in consumer.messages(): break`` (no ``async with``): once the
    iterator is dropped it stops pulling and releases its subscription and listener
    (a pull loop stayed alive until the connection closed, holding messages)."""
    import gc

    from aiojetstream import _conn

    consumer = await make(js, 20)
    subscriptions = js.nc._subs
    subs_before = len(subscriptions)
    hub = _conn._HUBS.get(js.nc)
    listeners_before = len(hub.listeners) if hub is not None else 0
    for _ in range(3):
        # An ordered consumer runs one operation at a time: one each.
        source = consumer if kind == "consumer" else await js.ordered_consumer(consumer.stream_name)
        async for msg in source.messages(max_messages=5):
            if kind == "consumer":
                await msg.ack()
            break
    gc.collect()
    await wait_until(lambda: len(subscriptions) == subs_before, 10, message=f"{len(subscriptions)}")
    hub = _conn._HUBS.get(js.nc)
    assert (len(hub.listeners) if hub is not None else 0) == listeners_before


async def test_an_iterator_taken_from_a_started_messages_outlives_it(js: JetStreamContext) -> None:
    """``ctx.next()`` started it without ``async with``, then only ``aiter(ctx)`` is
    kept: iterating goes on after the context is collected (its finalizer closed the
    driver it had handed out as the iterator)."""
    import gc

    consumer = await make(js, 1)

    async def iterator() -> AsyncIterator[Msg]:
        ctx = consumer.messages(max_messages=3)
        first = await ctx.next()
        await first.ack()
        return aiter(ctx)

    it = await iterator()
    gc.collect()
    for i in range(2):  # published after the collection: only a live pull gets them
        await js.publish(f"cons.{i}", b"later-%d" % i)

    async def two() -> list[bytes]:
        rest = []
        async for msg in it:
            await msg.ack()
            rest.append(msg.data)
            if len(rest) == 2:
                break
        return rest

    assert await asyncio.wait_for(two(), 10) == [b"later-0", b"later-1"]


async def test_fetch_no_wait_with_max_bytes(js: JetStreamContext) -> None:
    """``fetch_no_wait(n, max_bytes=)``: counted in messages, bounded in bytes on the
    server (sizes as ``Msg.size``); a cap the messages use up exactly ends it at once
    (the server says nothing then: it waited out the 5 s no-wait deadline)."""
    consumer = await make(js, 10, ack=AckPolicy.NONE)
    stream = consumer.stream_name
    config = ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.NONE)

    async def fresh() -> Consumer:
        # The same consumer again: the same reply subjects, so the same sizes.
        await js.delete_consumer(stream, "worker")
        return await js.create_consumer(stream, config)

    sizes = [m.size for m in await (await consumer.fetch_no_wait(10)).collect()]
    assert len(sizes) == 10
    loop = asyncio.get_running_loop()
    for cap, expected in ((sum(sizes[:3]) - 1, 2), (sum(sizes[:3]), 3), (sum(sizes) + 1, 10)):
        consumer = await fresh()
        started = loop.time()
        got = await (await consumer.fetch_no_wait(10, max_bytes=cap)).collect()
        assert [m.data for m in got] == [str(i).encode() for i in range(expected)], cap
        assert [m.size for m in got] == sizes[:expected]
        assert loop.time() - started < 2.5, cap
    consumer = await fresh()
    with pytest.raises(MessageTooLargeError):
        await (await consumer.fetch_no_wait(10, max_bytes=sizes[0] - 1)).collect()
    with pytest.raises(InvalidOptionError, match="max_bytes"):
        await consumer.fetch_no_wait(10, max_bytes=0)


async def test_a_raising_handler_is_logged_with_whether_it_settled_the_message(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """The log line said "the message was not acknowledged" also when the handler
    had acked it before raising."""
    consumer = await make(js, 2)
    seen: list[bytes] = []

    async def handler(msg: Msg) -> None:
        seen.append(msg.data)
        if msg.data == b"0":
            await msg.ack()
        raise RuntimeError(f"handler failed on {msg.data!r}")

    with caplog.at_level("ERROR", logger="aiojetstream"):
        ctx = await consumer.consume(handler)
        await wait_until(lambda: len(caplog.records) >= 2, timeout=10)
        ctx.stop()
        await asyncio.wait_for(ctx.closed(), 10)
    lines = [r.getMessage() for r in caplog.records if "consume handler raised" in r.getMessage()]
    assert lines[:2] == [
        "consume handler raised; it had settled the message (ack, nak or term)",
        "consume handler raised; the message was not acknowledged",
    ]
    assert seen[:2] == [b"0", b"1"]


async def test_a_handler_raising_cancelled_error_is_a_failing_handler(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that awaited something cancelled ended consumption silently (no log,
    no error), and closed() raised CancelledError into a caller nobody cancelled."""
    consumer = await make(js, 10)
    seen: list[bytes] = []
    all_seen = asyncio.Event()

    async def handler(msg: Msg) -> None:
        seen.append(msg.data)
        if len(seen) == 10:
            all_seen.set()
        if msg.data == b"3":
            cancelled = asyncio.get_running_loop().create_future()
            cancelled.cancel()
            await cancelled  # e.g. a helper task somebody cancelled
        await msg.ack()

    with caplog.at_level("ERROR", logger="aiojetstream"):
        ctx = await consumer.consume(handler)
        await asyncio.wait_for(all_seen.wait(), 10)  # consumption went on
        ctx.stop()
        assert await asyncio.wait_for(ctx.closed(), 10) is None
    assert ctx.error is None
    assert seen == [str(i).encode() for i in range(10)]
    failures = [r for r in caplog.records if "consume handler raised" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].getMessage().endswith("the message was not acknowledged")
    assert failures[0].exc_info is not None
    assert failures[0].exc_info[0] is asyncio.CancelledError


async def test_cancelling_the_consume_task_ends_it_and_closed_returns(
    js: JetStreamContext,
) -> None:
    """The consume task's own cancellation (C13) ends it; closed() returns to a caller
    that was not cancelled instead of raising the task's CancelledError."""
    consumer = await make(js, 5)
    entered = asyncio.Event()
    calls = 0

    async def handler(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        entered.set()
        await asyncio.Event().wait()  # until cancelled

    ctx = await consumer.consume(handler)
    await asyncio.wait_for(entered.wait(), 10)
    task = ctx._task
    assert task is not None
    task.cancel()
    assert await asyncio.wait_for(ctx.closed(), 10) is None
    assert task.cancelled()  # the cancellation propagated: consumption ended
    assert calls == 1
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0


async def test_a_flood_into_the_pull_inbox_is_capped_and_reported(
    js: JetStreamContext, nats_url: str
) -> None:
    """Another client of the account publishes to a stuck consume()'s pull inbox.

    Was: every message was buffered (30,000 of 10 KB: RSS 56 -> 345 MB). Now the
    buffer holds at most 4 x max_messages, the rest is dropped, the drop is reported
    once, and the messages pulled for are still handed out (the oldest are kept).
    """
    stream = unique_name("CONS")
    spy = await nats.connect(nats_url)
    inbox: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def snoop(msg: nats.aio.msg.Msg) -> None:
        if not inbox.done():
            inbox.set_result(msg.reply)

    # Before the consumer exists (see test_next_pulls_again_when_the_server_drops_its_pull).
    await spy.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.worker", cb=snoop)
    await spy.flush()
    consumer = await make(js, 10, stream=stream)
    gate = asyncio.Event()
    handled: list[bytes] = []
    errors: list[JetStreamError] = []

    async def handler(msg: Msg) -> None:
        handled.append(msg.data)
        await gate.wait()  # stuck until the flood is over
        await msg.ack()

    ctx = await consumer.consume(handler, error_handler=errors.append, max_messages=20)
    try:
        reply = await asyncio.wait_for(inbox, 10)
        await wait_until(lambda: len(handled) == 1)
        flood = 3000
        for i in range(flood):
            # plain and with headers: both ways a message reaches the buffer
            await spy.publish(reply, b"x" * 1000, headers={"X": "1"} if i % 2 else None)
        await spy.flush()
        await js.nc.flush()  # the server wrote the flood to us before its PONG
        driver = ctx._driver
        assert isinstance(driver, PullDriver)
        await wait_until(lambda: driver.dropped + driver.buffered + len(handled) >= 10 + flood)
        assert driver.buffered <= 80
        assert len(errors) == 1, errors
        assert isinstance(errors[0], InvalidResponseError)
        gate.set()
        # the ten messages pulled for arrived first: none of them was dropped
        await wait_until(lambda: len(handled) >= 10)
        assert handled[:10] == [str(i).encode() for i in range(10)]
    finally:
        gate.set()
        ctx.stop()
        await ctx.closed()
        await spy.close()

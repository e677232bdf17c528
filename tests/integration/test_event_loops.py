"""A context used from an event loop other than its connection's: refused at once, nothing sent.

The newcomer's mistake: ``js = asyncio.run(aiojetstream.connect(url))`` and
then ``asyncio.run(main())`` (or a session-scoped fixture used from the
function-scoped loops of pytest-asyncio). Every command was written on the old
loop's socket, the server carried it out, and the call waited out its whole
timeout for a reply only the old loop could read: a ``JetStreamTimeoutError``
for a stream created, a message stored (twice when retried). ``close()`` raised
``RuntimeError: Event loop is closed``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient

import aiojetstream
from aiojetstream import (
    ConnectionClosedError,
    ConsumerConfig,
    InvalidOptionError,
    JetStreamContext,
    KeyNotFoundError,
    KeyValueConfig,
    ObjectStoreConfig,
    StreamConfig,
    StreamNotFoundError,
)
from helpers import unique_name

#: The refusal comes before anything is sent: well within this.
PROMPT = 0.5


async def _refused(
    call: Callable[[], Awaitable[Any]], error: type[Exception] = ConnectionClosedError
) -> str:
    began = time.monotonic()
    with pytest.raises(error) as caught:
        async with asyncio.timeout(10):  # (without the check some calls hung for good)
            await call()
    assert time.monotonic() - began < PROMPT
    text = str(caught.value)
    assert "another event loop" in text
    assert "nothing was sent" in text
    return text


async def _drain_messages(consumer: Any) -> None:
    async with consumer.messages() as it:
        async for _ in it:
            break


def test_a_context_from_an_ended_loop_refuses_every_call_at_once(nats_url: str) -> None:
    name = unique_name("LOOPS")
    bucket = unique_name("LOOPS")
    other = unique_name("LOOPS")

    async def first() -> tuple[JetStreamContext, Any, Any, Any]:
        js = await aiojetstream.connect(nats_url)
        stream = await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        await js.publish(f"{name}.a", b"1")
        await (await js.publish_async(f"{name}.a", b"2"))  # the window's subscription is up
        consumer = await js.create_consumer(name, ConsumerConfig(durable_name="C"))
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
        return js, stream, consumer, kv

    js, stream, consumer, kv = asyncio.run(first())  # the loop ends, the connection stays open

    async def second() -> None:
        text = await _refused(
            lambda: js.create_stream(StreamConfig(name=other, subjects=[f"{other}.>"]))
        )
        assert "Connect inside the event loop that uses it" in text
        await _refused(lambda: js.publish(f"{name}.a", b"x"))
        await _refused(lambda: js.publish_async(f"{name}.a", b"x"))
        await _refused(lambda: js.publish_many(f"{name}.a", [b"x", b"y"]))
        await _refused(lambda: stream.info())
        await _refused(lambda: consumer.fetch(1, expires=2))
        await _refused(lambda: consumer.next(expires=2))
        await _refused(lambda: consumer.fetch_no_wait(1))
        await _refused(lambda: _drain_messages(consumer))
        await _refused(lambda: consumer.consume(lambda msg: None))
        await _refused(lambda: kv.put("k", b"x"))
        await _refused(lambda: kv.get("k"))
        # Dropped quietly: no RuntimeError('Event loop is closed'); then closed for good.
        await js.close()
        assert js.nc.is_closed
        await js.close()
        with pytest.raises(ConnectionClosedError):
            await js.publish(f"{name}.a", b"x")

    asyncio.run(second())

    async def check() -> None:
        async with await aiojetstream.connect(nats_url) as fresh:
            info = await (await fresh.stream(name)).info()
            assert info.state.messages == 2  # the first loop's two only
            with pytest.raises(StreamNotFoundError):
                await fresh.stream(other)
            with pytest.raises(KeyNotFoundError):
                await (await fresh.key_value(bucket)).get("k")
            delivered = (await (await fresh.consumer(name, "C")).info()).delivered
            assert delivered.consumer_seq == 0  # nothing was pulled

    asyncio.run(check())


def test_a_context_on_a_nats_client_from_an_ended_loop(nats_url: str) -> None:
    name = unique_name("LOOPS")

    async def first() -> NatsClient:
        return await nats.connect(nats_url)

    nc = asyncio.run(first())

    async def second() -> None:
        js = JetStreamContext(nc)  # made in the new loop: the client's loop still counts
        await _refused(lambda: js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])))
        await _refused(lambda: js.publish(f"{name}.a", b"x"))
        await js.close()  # not its connection: left alone, no RuntimeError
        assert not nc.is_closed

    asyncio.run(second())

    async def check() -> None:
        async with await aiojetstream.connect(nats_url) as fresh:
            with pytest.raises(StreamNotFoundError):
                await fresh.stream(name)

    asyncio.run(check())


class _LoopThread:
    """An event loop running in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, aw: Awaitable[Any]) -> Any:
        async def wrap() -> Any:
            return await aw

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def loop_thread() -> Iterator[_LoopThread]:
    thread = _LoopThread()
    yield thread
    thread.stop()


def test_a_context_of_a_loop_still_running_elsewhere(
    nats_url: str, loop_thread: _LoopThread
) -> None:
    name = unique_name("LOOPS")
    js: JetStreamContext = loop_thread.run(aiojetstream.connect(nats_url))
    try:

        async def here() -> None:
            text = await _refused(
                lambda: js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])),
                InvalidOptionError,
            )
            assert "run_coroutine_threadsafe" in text
            await _refused(lambda: js.publish(f"{name}.a", b"x"), InvalidOptionError)
            await _refused(lambda: js.close(), InvalidOptionError)
            assert not js.nc.is_closed

        asyncio.run(here())
        # In its own loop it works.
        loop_thread.run(js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])))
        assert loop_thread.run(js.publish(f"{name}.a", b"x")).seq == 1
    finally:
        loop_thread.run(js.close())
    assert js.nc.is_closed


def test_publish_async_after_the_first_from_a_loop_running_elsewhere(
    nats_url: str, loop_thread: _LoopThread
) -> None:
    """Once its window had started, publish_async from another thread's live loop
    wrote the message (the server stored it) and then raised a bare ValueError:
    the caller could only send it again (stored twice). Refused before sending."""
    name = unique_name("LOOPPA")
    js: JetStreamContext = loop_thread.run(aiojetstream.connect(nats_url))
    try:
        loop_thread.run(js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])))

        async def publish(payload: bytes) -> int:
            return (await (await js.publish_async(f"{name}.a", payload))).seq

        assert loop_thread.run(publish(b"0")) == 1  # the window runs and has room

        async def here() -> None:
            text = await _refused(lambda: js.publish_async(f"{name}.a", b"1"), InvalidOptionError)
            assert "run_coroutine_threadsafe" in text

        asyncio.run(here())
        assert loop_thread.run(publish(b"2")) == 2  # nothing was stored meanwhile
    finally:
        loop_thread.run(js.close())


def test_publish_async_from_a_loop_beside_an_idle_one(nats_url: str) -> None:
    """The connection's loop open but not running in this thread (a wider-scoped
    pytest-asyncio fixture's): the message went into a buffer only that loop writes,
    and the future waited out its timeout. Refused, saying what is likely."""
    name = unique_name("LOOPIDLE")
    owner = asyncio.new_event_loop()
    try:
        js = owner.run_until_complete(aiojetstream.connect(nats_url))

        async def first() -> int:
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
            return (await (await js.publish_async(f"{name}.a", b"0"))).seq

        assert owner.run_until_complete(first()) == 1

        async def other() -> None:
            text = await _refused(lambda: js.publish_async(f"{name}.a", b"1"), InvalidOptionError)
            assert "open but not running" in text

        asyncio.run(other())

        async def last() -> int:
            seq = (await (await js.publish_async(f"{name}.a", b"2"))).seq
            await js.delete_stream(name)
            await js.close()
            return seq

        assert owner.run_until_complete(last()) == 2
    finally:
        owner.close()


def test_acks_from_a_later_loop_raise_instead_of_going_nowhere(nats_url: str) -> None:
    """An ack or nak made in a later asyncio.run() went into nats-py's buffer, which
    only the ended loop's flusher would write: reported done, never sent (the messages
    came again after ack_wait). It raises now, as double_ack did."""
    name = unique_name("LOOPACK")

    async def first() -> tuple[JetStreamContext, list[Any]]:
        js = await aiojetstream.connect(nats_url)
        await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        for i in range(3):
            await js.publish(f"{name}.a", b"%d" % i)
        consumer = await js.create_consumer(name, ConsumerConfig(durable_name="C", ack_wait=30))
        batch = await consumer.fetch(3, expires=2)
        return js, [msg async for msg in batch]

    js, msgs = asyncio.run(first())

    async def second() -> None:
        await _refused(msgs[0].ack)
        await _refused(msgs[1].nak)
        await _refused(msgs[2].term)
        await js.close()

    asyncio.run(second())

    async def check() -> None:
        async with await aiojetstream.connect(nats_url) as fresh:
            info = await (await fresh.stream(name)).consumer("C")
            assert (await info.info()).num_ack_pending == 3  # none acknowledged, none lost
            await fresh.delete_stream(name)

    asyncio.run(check())


def test_acks_from_a_loop_running_elsewhere_are_refused(
    nats_url: str, loop_thread: _LoopThread
) -> None:
    """An ack from another thread's running loop (sync code bridged with
    asyncio.run in a worker thread) wrote into nats-py's outgoing buffer from two
    threads at once. Refused before anything is queued; the message stays open."""
    name = unique_name("LOOPACKT")
    js: JetStreamContext = loop_thread.run(aiojetstream.connect(nats_url))
    try:

        async def first() -> list[Any]:
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
            for i in range(2):
                await js.publish(f"{name}.a", b"%d" % i)
            consumer = await js.create_consumer(name, ConsumerConfig(durable_name="C", ack_wait=30))
            batch = await consumer.fetch(2, expires=2)
            return [msg async for msg in batch]

        msgs = loop_thread.run(first())

        async def here() -> None:
            await _refused(msgs[0].ack, InvalidOptionError)
            await _refused(msgs[1].nak, InvalidOptionError)

        asyncio.run(here())

        async def pending() -> int:
            consumer = await js.consumer(name, "C")
            return (await consumer.info()).num_ack_pending

        assert loop_thread.run(pending()) == 2  # neither was sent
        loop_thread.run(msgs[0].ack())  # in its own loop the message can still be acked
    finally:
        loop_thread.run(js.close())


def test_a_loop_left_open_but_idle_is_named_so(nats_url: str) -> None:
    """A connection made in a loop that is still open but not running (a wider-scoped
    pytest-asyncio fixture's): refused, and the error says what is likely."""
    owner = asyncio.new_event_loop()
    try:
        js = owner.run_until_complete(aiojetstream.connect(nats_url))

        async def other() -> None:
            text = await _refused(js.account_info, InvalidOptionError)
            assert "open but not running" in text
            assert "loop_scope" in text

        asyncio.run(other())
        owner.run_until_complete(js.close())
    finally:
        owner.close()


def test_an_ack_beside_an_idle_owner_loop_is_refused(nats_url: str) -> None:
    """The connection's loop open but idle in this thread (a wider-scoped fixture's),
    an ack from another loop: it went into a buffer only the idle loop writes,
    reported done and never sent (the message came again after ack_wait)."""
    name = unique_name("LOOPACKI")
    owner = asyncio.new_event_loop()
    try:
        js = owner.run_until_complete(aiojetstream.connect(nats_url))

        async def first() -> list[Any]:
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
            await js.publish(f"{name}.a", b"0")
            consumer = await js.create_consumer(name, ConsumerConfig(durable_name="C", ack_wait=30))
            batch = await consumer.fetch(1, expires=2)
            return [msg async for msg in batch]

        (msg,) = owner.run_until_complete(first())

        async def other() -> None:
            text = await _refused(msg.ack, InvalidOptionError)
            assert "open but not running" in text

        asyncio.run(other())

        async def last() -> int:
            consumer = await js.consumer(name, "C")
            pending = (await consumer.info()).num_ack_pending
            await msg.ack()  # in its own loop it goes
            await js.delete_stream(name)
            await js.close()
            return pending

        assert owner.run_until_complete(last()) == 1  # the refused ack was not sent
    finally:
        owner.close()


def test_waits_and_closes_from_a_loop_running_elsewhere_are_refused(
    nats_url: str, loop_thread: _LoopThread
) -> None:
    """Handles made in a loop thread (as a Spark session or a notebook's background
    loop runs them), then waited on or closed from another thread's loop: a
    ``publish_async_complete()`` or a ``ConsumeContext.closed()`` never returned
    (and the first bound the window to the wrong loop: the owner's own calls raised
    ``RuntimeError`` from then on); a wait for the next message, entry or chunk
    raised a bare ``RuntimeError``; a close left the server's consumers and could
    not be done again; a batch's refused ``add()`` sent a message from that thread
    and closed the batch. Each is refused before anything is done."""
    name = unique_name("LOOPH")
    bucket = unique_name("LOOPH")
    js: JetStreamContext = loop_thread.run(aiojetstream.connect(nats_url))
    handled: list[bytes] = []
    try:

        async def first() -> tuple[Any, ...]:
            await js.create_stream(
                StreamConfig(name=name, subjects=[f"{name}.>"], allow_atomic=True)
            )
            await js.publish(f"{name}.a", b"0")
            consumer = await js.create_consumer(name, ConsumerConfig(durable_name="C"))
            it = consumer.messages(expires=2)
            await it.__aenter__()
            assert (await it.next()).data == b"0"
            kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
            await kv.put("k", b"v")
            watcher = kv.watch()
            await watcher.__aenter__()
            assert (await watcher.__anext__()) is not None
            assert (await watcher.__anext__()) is None
            store = await js.create_object_store(ObjectStoreConfig(bucket=bucket))
            await store.put("o", bytes(3000), chunk_size=1000)
            result = await store.get("o")
            assert await result.__anext__() == bytes(1000)
            other = await js.create_consumer(name, ConsumerConfig(durable_name="D"))

            async def handle(msg: Any) -> None:
                handled.append(msg.data)

            ctx = await other.consume(handle, expires=2)
            batch = js.atomic_batch()
            await batch.add(f"{name}.b", b"1")
            return it, watcher, result, ctx, batch

        it, watcher, result, ctx, batch = loop_thread.run(first())

        async def here() -> None:
            await _refused(it.next, InvalidOptionError)
            await _refused(it.aclose, InvalidOptionError)
            await _refused(watcher.__anext__, InvalidOptionError)
            await _refused(watcher.aclose, InvalidOptionError)
            await _refused(result.__anext__, InvalidOptionError)
            await _refused(result.aclose, InvalidOptionError)
            await _refused(ctx.closed, InvalidOptionError)
            await _refused(ctx.drain, InvalidOptionError)
            await _refused(js.publish_async_complete, InvalidOptionError)
            await _refused(lambda: batch.add(f"{name}.b", b"2"), InvalidOptionError)

        asyncio.run(here())

        async def back() -> None:
            # In their own loop every handle goes on, and closes for good.
            await js.publish(f"{name}.a", b"1")
            assert (await it.next()).data == b"1"
            await batch.add(f"{name}.b", b"2")
            ack = await batch.commit(f"{name}.b", b"3")
            assert ack.batch_size == 3
            assert await result.read() == bytes(2000)
            await kv.put("k", b"w")
            entry = await watcher.__anext__()
            assert entry is not None
            assert entry.value == b"w"
            await it.aclose()
            await watcher.aclose()
            await result.aclose()
            ctx.stop()
            assert await ctx.closed() is None
            stream = await js.stream(name)
            assert sorted([n async for n in stream.consumer_names()]) == ["C", "D"]
            assert [n async for n in kv.stream.consumer_names()] == []

        kv = loop_thread.run(js.key_value(bucket))
        loop_thread.run(back())
    finally:
        loop_thread.run(js.close())


def test_handles_of_an_ended_loop_close_quietly(nats_url: str) -> None:
    """After their loop ended (a notebook cell's asyncio.run), closing them raised
    ``RuntimeError: Event loop is closed`` (and a coroutine was never awaited)."""
    name = unique_name("LOOPQ")

    async def first() -> tuple[JetStreamContext, Any, Any]:
        js = await aiojetstream.connect(nats_url)
        await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        await js.publish(f"{name}.a", b"0")
        consumer = await js.create_consumer(name, ConsumerConfig(durable_name="C"))
        it = consumer.messages(expires=2)
        await it.__aenter__()
        ordered = (await js.ordered_consumer(name)).messages(expires=2)
        await ordered.__aenter__()
        return js, it, ordered

    js, it, ordered = asyncio.run(first())

    async def second() -> None:
        await it.aclose()
        await ordered.aclose()
        await js.close()

    asyncio.run(second())

"""Ordered consumers and KV watches against a real nats-server: resets before the
first message, ending while a reset is retrying, and what a failing reset bounds."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    AckPolicy,
    BucketNotFoundError,
    ConnectionClosedError,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerNotFoundError,
    FetchTimeoutError,
    InvalidOptionError,
    JetStreamContext,
    JetStreamError,
    KeyValueConfig,
    KeyValueEntry,
    KeyWatcher,
    MessagesContext,
    Msg,
    ObjectInfo,
    ObjectStoreConfig,
    ObjectWatcher,
    OrderedConsumerConfig,
    OrderedConsumerResetError,
    RetentionPolicy,
    StorageType,
    Stream,
    StreamConfig,
)
from aiojetstream import _consumer as C
from aiojetstream._ordered import OrderedConsumer
from aiojetstream._pull_driver import PullDriver
from aiojetstream._stream import Stream as StreamClass
from helpers import cancel_after, unique_name, wait_until

STEP = 10
#: err_code of "maximum consumers limit reached".
MAX_CONSUMERS = 10026


async def take_the_only_slot(js: JetStreamContext, stream: str, oc: OrderedConsumer) -> None:
    """Delete the ordered consumer's server consumer and give its slot (the stream allows
    one consumer) to a durable, so that its reset fails and retries. The reset may take
    the slot first: then its new consumer is deleted too, and the durable tries again."""
    for _ in range(20):
        name = oc.name
        if name is not None:
            with contextlib.suppress(ConsumerNotFoundError):
                await js.delete_consumer(stream, name)
        try:
            await js.create_consumer(
                stream, ConsumerConfig(durable_name="blocker", ack_policy=AckPolicy.EXPLICIT)
            )
        except JetStreamError as exc:
            if getattr(exc, "err_code", None) != MAX_CONSUMERS:
                raise
        else:
            return
    raise AssertionError("the reset took the only slot 20 times")


async def test_updates_only_watch_recreated_before_its_first_update_misses_none(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Its consumer is lost before anything arrived and recreated after two puts: the
    new consumer starts where the first one did (it started at the end again: both
    updates were lost)."""
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("UO"), history=5, storage=StorageType.MEMORY)
    )
    await kv.put("k", b"before")
    # One consumer at most: a durable in the only slot holds the watch's reset back.
    config = kv.stream.cached_info.config.model_copy(update={"max_consumers": 1})
    await js.update_stream(config)
    caplog.set_level(logging.INFO, logger="aiojetstream")
    async with kv.watch("k", updates_only=True) as watcher:
        got: list[int] = []

        async def collect() -> None:
            async for entry in watcher:
                if entry is not None:
                    got.append(entry.revision)

        task = asyncio.create_task(collect())
        try:
            oc = watcher._reader._oc  # the ordered consumer of the watch
            assert oc is not None
            await take_the_only_slot(js, kv.stream.name, oc)
            # Noticed by the pull's "consumer deleted" status, or else by missed heartbeats.
            await wait_until(
                lambda: any("reset failed" in r.getMessage() for r in caplog.records), 3 * STEP
            )
            first = await kv.put("k", b"x")
            second = await kv.put("k", b"y")
            await js.delete_consumer(kv.stream.name, "blocker")  # the reset goes through
            await wait_until(lambda: len(got) >= 2, 2 * STEP, message=f"got {got}")
            assert got == [first, second]
        finally:
            task.cancel()


async def test_closing_messages_during_a_failing_reset_ends_it_at_once(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Closed (from another task) while its reset retries: the reset gives up at once,
    and no consumer is created afterwards (the reset went on until it could create one,
    then left that consumer and a pulling driver behind)."""
    name = unique_name("ORS")
    stream: Stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, max_consumers=1)
    )
    await js.publish(f"{name}.a", b"1")
    oc = await stream.ordered_consumer()
    caplog.set_level(logging.INFO, logger="aiojetstream")
    async with oc.messages(heartbeat=1, expires=2) as msgs:
        first = await asyncio.wait_for(anext(msgs), STEP)
        assert first.data == b"1"
        assert oc.name is not None
        # The reset can not create a consumer while a durable holds the only slot.
        await take_the_only_slot(js, name, oc)
        reader = asyncio.create_task(anext(msgs, None))
        await wait_until(
            lambda: any("reset failed" in r.getMessage() for r in caplog.records), STEP
        )
        await msgs.aclose()
        assert await asyncio.wait_for(reader, 3) is None
    await js.delete_consumer(name, "blocker")
    assert (await stream.info()).state.consumer_count == 0


async def test_purge_deletes_keeps_a_put_made_after_the_markers_were_listed(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The markers are listed, then each key is purged: a put landing in between
    stays (the whole key was purged, the acknowledged put with it)."""
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("PD"), storage=StorageType.MEMORY)
    )
    await kv.put("a", b"1")
    await kv.delete("a")
    purge = StreamClass.purge
    revisions: list[int] = []

    async def put_first(self: StreamClass, **kwargs: object) -> int:
        if not revisions:
            revisions.append(await kv.put("a", b"2"))  # lands after the listing
        return await purge(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(StreamClass, "purge", put_first)
    await kv.purge_deletes(older_than=timedelta(0))
    monkeypatch.undo()
    entry = await kv.get("a")
    assert (entry.value, entry.revision) == (b"2", revisions[0])


async def test_a_watch_closed_during_a_failing_reset_ends_its_iteration(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Closed from another task while its consumer's reset retries: the iterating task
    ends its loop (it raised CancelledError although nobody cancelled it)."""
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("WC"), storage=StorageType.MEMORY)
    )
    await kv.put("k", b"v")
    config = kv.stream.cached_info.config.model_copy(update={"max_consumers": 1})
    await js.update_stream(config)
    caplog.set_level(logging.INFO, logger="aiojetstream")
    watcher = kv.watch("k")
    await watcher.__aenter__()
    seen: list[object] = []

    async def iterate() -> str:
        async for entry in watcher:
            seen.append(entry)
        return "ended"

    task = asyncio.create_task(iterate())
    await wait_until(lambda: None in seen, STEP)  # the initial value and the marker
    oc = watcher._reader._oc
    assert oc is not None
    await take_the_only_slot(js, kv.stream.name, oc)
    await wait_until(
        lambda: any("reset failed" in r.getMessage() for r in caplog.records), 3 * STEP
    )
    await watcher.aclose()
    assert await asyncio.wait_for(task, STEP) == "ended"
    assert not task.cancelled()


async def test_a_first_creation_the_server_refuses_raises_at_once(js: JetStreamContext) -> None:
    """No consumer slot left when the ordered consumer is first created: the error
    (400, err_code 10026) is raised, not retried forever past the call's deadline."""
    name = unique_name("OFC")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, max_consumers=1)
    )
    await js.publish(f"{name}.a", b"1")
    await js.create_consumer(
        name, ConsumerConfig(durable_name="blocker", ack_policy=AckPolicy.EXPLICIT)
    )
    oc = await stream.ordered_consumer()
    with pytest.raises(JetStreamError) as info:
        await asyncio.wait_for(oc.next(expires=2), STEP)
    assert getattr(info.value, "err_code", None) == MAX_CONSUMERS
    with pytest.raises(JetStreamError):
        await asyncio.wait_for(oc.messages().__aenter__(), STEP)


async def test_reading_a_deleted_bucket_is_bucket_not_found(js: JetStreamContext) -> None:
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("KVD"), storage=StorageType.MEMORY)
    )
    await kv.put("k", b"v")
    await js.delete_key_value(kv.bucket)
    with pytest.raises(BucketNotFoundError):
        async with kv.watch("k"):
            pass
    with pytest.raises(BucketNotFoundError):
        _ = [key async for key in kv.keys()]  # noqa: SIM118 (an async generator, not a dict)
    with pytest.raises(BucketNotFoundError):
        await kv.history("k")


async def test_updates_only_with_include_history_is_refused(js: JetStreamContext) -> None:
    """They contradict each other (updates_only silently won); refused before anything
    is created, for buckets and object stores alike."""
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("KVH"), storage=StorageType.MEMORY)
    )
    with pytest.raises(InvalidOptionError, match="exclude each other"):
        kv.watch(updates_only=True, include_history=True)
    store = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("OBH")))
    with pytest.raises(InvalidOptionError, match="exclude each other"):
        store.watch(updates_only=True, include_history=True)
    assert (await kv.stream.info()).state.consumer_count == 0


async def test_a_watch_dropped_unfinished_deletes_its_consumer(js: JetStreamContext) -> None:
    """``async for entry in kv.watch(): break`` without ``async with``: once the watcher
    is collected its consumer is deleted (it stayed, pulling, for the connection's life)."""
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("KVA"), storage=StorageType.MEMORY)
    )
    await kv.put("k", b"v")
    for _ in range(3):
        async for entry in kv.watch():
            assert entry is not None
            break
    gc.collect()

    async def no_consumers() -> bool:
        return (await kv.stream.info()).state.consumer_count == 0

    await wait_until(no_consumers, STEP)


async def _ordered_whose_reset_fails(js: JetStreamContext) -> tuple[str, OrderedConsumer]:
    """An ordered consumer that read one message and whose next reset can not create a
    consumer (a durable holds the stream's only slot)."""
    name = unique_name("ORD")
    stream: Stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, max_consumers=1)
    )
    await js.publish(f"{name}.a", b"1")
    oc = await stream.ordered_consumer()
    assert (await oc.next(expires=STEP)).data == b"1"
    await take_the_only_slot(js, name, oc)
    return name, oc


async def test_a_reset_on_an_interest_stream_keeps_what_was_not_delivered(
    js: JetStreamContext,
) -> None:
    """A reset deleted the old consumer before creating the next: on an interest
    stream the server then dropped every message after the cursor (none left). Now
    only what the old consumer had delivered but was not handed out is gone
    (``AckPolicy.NONE``: delivered is acknowledged)."""
    name = unique_name("ORI")
    stream = await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{name}.>"],
            storage=StorageType.MEMORY,
            retention=RetentionPolicy.INTEREST,
        )
    )
    oc = await stream.ordered_consumer()
    assert await (await oc.fetch_no_wait(1)).collect() == []  # the interest
    for i in range(10):
        await js.publish(f"{name}.a", str(i).encode())
    batch = await oc.fetch(5, expires=STEP)
    async for msg in batch:
        assert msg.data == b"0"
        break  # left early: the next fetch resets
    await batch.aclose()
    rest = [int(m.data) for m in await (await oc.fetch_no_wait(20)).collect()]
    assert rest, "the messages after the cursor were dropped"
    assert rest == list(range(rest[0], 10))
    assert rest[0] <= 5  # at most the fetch's 5 were delivered
    assert [n async for n in js.consumer_names(name)] == [oc.name]


async def test_a_reset_with_no_consumer_slot_to_spare_deletes_first(
    js: JetStreamContext,
) -> None:
    """``max_consumers=1``: the next consumer can not be created next to the old one
    (created first since deleting it first loses messages on an interest stream), so
    the old one is deleted first after all."""
    name = unique_name("ORS")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, max_consumers=1)
    )
    for i in range(10):
        await js.publish(f"{name}.a", str(i).encode())
    oc = await stream.ordered_consumer(OrderedConsumerConfig(max_reset_attempts=1))
    batch = await oc.fetch(5, expires=STEP)
    async for msg in batch:
        assert msg.data == b"0"
        break
    await batch.aclose()
    first = oc.name
    rest = await (await oc.fetch_no_wait(20)).collect()
    assert [m.data for m in rest] == [str(i).encode() for i in range(1, 10)]
    assert oc.name != first
    assert [n async for n in js.consumer_names(name)] == [oc.name]


async def test_next_during_a_failing_reset_ends_by_its_expires(js: JetStreamContext) -> None:
    """``next(expires=1)`` whose consumer must be recreated and can not be: a
    FetchTimeoutError about when ``expires`` ends, naming the creation's error (the
    reset's retries went on without end, whatever ``expires`` said)."""
    name, oc = await _ordered_whose_reset_fails(js)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(FetchTimeoutError) as caught:
        await asyncio.wait_for(oc.next(expires=1), STEP)
    # 1 s, plus a loaded machine's margin: the reset's backoff alone is 1 s, 2 s, 4 s...
    assert loop.time() - start < 3
    assert getattr(caught.value.__cause__, "err_code", None) == MAX_CONSUMERS
    await js.delete_consumer(name, "blocker")
    await js.publish(f"{name}.a", b"2")
    assert (await oc.next(expires=STEP)).data == b"2"


async def test_fetch_during_a_failing_reset_ends_by_its_expires(js: JetStreamContext) -> None:
    """``fetch(expires=1)`` that must recreate the consumer and can not: the creation's
    typed error about when ``expires`` ends (it retried without end)."""
    name, oc = await _ordered_whose_reset_fails(js)
    loop = asyncio.get_running_loop()
    # The fetch finds its consumer gone and recreates it (it came back empty at once,
    # the next fetch recreating it): that fails until the fetch's end.
    start = loop.time()
    with pytest.raises(JetStreamError) as caught:
        async with await oc.fetch(1, expires=1) as batch:
            await asyncio.wait_for(batch.collect(), STEP)
    assert loop.time() - start < 3
    assert caught.value.err_code == MAX_CONSUMERS  # type: ignore[attr-defined]
    # The next fetch starts with that reset (carried over): likewise.
    start = loop.time()
    with pytest.raises(JetStreamError) as caught:
        await asyncio.wait_for(oc.fetch(1, expires=1), STEP)
    assert loop.time() - start < 3
    assert caught.value.err_code == MAX_CONSUMERS  # type: ignore[attr-defined]
    await js.delete_consumer(name, "blocker")
    await js.publish(f"{name}.a", b"2")
    async with await oc.fetch(1, expires=STEP) as batch:
        assert [m.data for m in await batch.collect()] == [b"2"]


async def test_max_reset_attempts_counts_across_fetch_calls(js: JetStreamContext) -> None:
    """``max_reset_attempts=3`` and ``next(expires=1.5)`` called again after each
    FetchTimeoutError: the reset's attempts carry over from call to call, so the
    third failed attempt raises OrderedConsumerResetError (each call started
    counting afresh: the loop went on without end)."""
    name = unique_name("ORM")
    stream: Stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, max_consumers=1)
    )
    await js.publish(f"{name}.a", b"1")
    oc = await stream.ordered_consumer(OrderedConsumerConfig(max_reset_attempts=3))
    assert (await oc.next(expires=STEP)).data == b"1"
    await take_the_only_slot(js, name, oc)
    timeouts = 0

    async def next_until_it_gives_up() -> None:
        nonlocal timeouts
        for _ in range(10):  # attempts at about 0, 1 and 3 s: a few calls of 1.5 s
            try:
                await asyncio.wait_for(oc.next(expires=1.5), STEP)
            except FetchTimeoutError:
                timeouts += 1

    with pytest.raises(OrderedConsumerResetError, match="after 3 attempts"):
        await next_until_it_gives_up()
    assert timeouts <= 4


async def test_the_pull_after_a_reset_gets_what_is_left_of_expires(js: JetStreamContext) -> None:
    """A reset that succeeds at its third attempt (about 3 s in): the pull that follows
    gets the rest of ``expires=4``, not all of it again (the fetch took about 7 s)."""
    name, oc = await _ordered_whose_reset_fails(js)
    loop = asyncio.get_running_loop()
    # A fetch left before its end asks for a reset; the next fetch starts with it.
    await (await oc.fetch(1, expires=1)).aclose()
    freed = asyncio.Event()

    async def free_the_slot() -> None:
        await js.delete_consumer(name, "blocker")
        freed.set()

    # Attempts at about 0 and 1 s fail; the one at about 3 s finds the slot free.
    timer = loop.call_later(2, lambda: asyncio.ensure_future(free_the_slot()))
    start = loop.time()
    try:
        async with await oc.fetch(1, expires=4) as batch:
            assert await batch.collect() == []
    finally:
        timer.cancel()
    took = loop.time() - start
    assert freed.is_set()
    # expires + the server's closing status; with a loaded machine's margin.
    assert took < 4 + 1.5, f"the fetch took {took:.2f} s"


@pytest.mark.parametrize("reader", ["messages", "watch", "next"])
async def test_closing_the_connection_during_a_reset_backoff_ends_the_reader_at_once(
    js: JetStreamContext, nats_url: str, reader: str, caplog: pytest.LogCaptureFixture
) -> None:
    """RELIABILITY C12: the connection is closed (``close()``) while a reset waits out
    its backoff before the next creation attempt: the reader raises
    ConnectionClosedError at once (it slept on, up to 10 s, and only the attempt
    after the wait found the connection closed). C12 allows 3 s; the close is
    noticed at once, so well within the 2 s backoff waited out here."""
    client = await aiojetstream.connect(nats_url)
    caplog.set_level(logging.INFO, logger="aiojetstream")
    try:
        name = unique_name("CRB")
        if reader == "watch":
            kv = await js.create_key_value(KeyValueConfig(bucket=name, storage=StorageType.MEMORY))
            await kv.put("k", b"v")
            stream = kv.stream.name
            config = kv.stream.cached_info.config.model_copy(update={"max_consumers": 1})
            await js.update_stream(config)
            watcher = (await client.key_value(name)).watch("k")
            await watcher.__aenter__()
            assert (await asyncio.wait_for(anext(watcher), STEP)) is not None
            assert (await asyncio.wait_for(anext(watcher), STEP)) is None  # initial done
            waiting: asyncio.Task[object] = asyncio.create_task(anext(watcher))
            oc = watcher._reader._oc
            assert oc is not None
            closing = watcher.aclose
        else:
            stream = name
            await js.create_stream(
                StreamConfig(
                    name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, max_consumers=1
                )
            )
            await js.publish(f"{name}.a", b"1")
            oc = await client.ordered_consumer(name)
            if reader == "messages":
                msgs = oc.messages(heartbeat=1, expires=2)
                await msgs.__aenter__()
                assert (await asyncio.wait_for(msgs.next(), STEP)).data == b"1"
                waiting = asyncio.create_task(msgs.next())
                closing = msgs.aclose
            else:
                assert (await oc.next(expires=STEP)).data == b"1"
                waiting = asyncio.create_task(oc.next(expires=30))

                async def closing() -> None:
                    pass

        # The reset fails while a durable holds the only consumer slot: 1 s, then 2 s.
        await take_the_only_slot(js, stream, oc)
        await wait_until(
            lambda: any("retrying in 2 s" in r.getMessage() for r in caplog.records), 3 * STEP
        )
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(client.close(), STEP)
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(waiting, STEP)
        elapsed = loop.time() - start
        assert elapsed < 1.5, elapsed
        await asyncio.wait_for(closing(), STEP)
        await js.delete_consumer(stream, "blocker")
    finally:
        await client.close()


def hold_consumer_creation(
    monkeypatch: pytest.MonkeyPatch, *, after_sending: bool
) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold every consumer creation until the returned gate is set; the other event is
    set once one is held: before its request is sent, or (``after_sending``) once the
    server created the consumer, its reply not yet handed back (as one in flight)."""
    held = asyncio.Event()
    gate = asyncio.Event()
    original = C.upsert_consumer

    async def holding(*args: Any, **kwargs: Any) -> ConsumerInfo:
        if not after_sending:
            held.set()
            await gate.wait()
        info = await original(*args, **kwargs)
        if after_sending:
            held.set()
            await gate.wait()
        return info

    monkeypatch.setattr(C, "upsert_consumer", holding)
    return held, gate


@pytest.mark.parametrize("store", ["kv", "object"])
async def test_a_watch_whose_first_anext_is_cancelled_goes_on(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """The first ``anext()`` of a watcher cancelled (a timeout) while its consumer is
    created: the next one waits for that creation and the watch goes on (it ended
    silently: the cancellation closed the reader, every later update was missed)."""
    bucket = unique_name("WFC")
    watcher: KeyWatcher | ObjectWatcher
    if store == "kv":
        kv = await js.create_key_value(KeyValueConfig(bucket=bucket, storage=StorageType.MEMORY))
        await kv.put("k", b"1")
        watcher = kv.watch()
    else:
        obs = await js.create_object_store(
            ObjectStoreConfig(bucket=bucket, storage=StorageType.MEMORY)
        )
        await obs.put("o", b"1")
        watcher = obs.watch()
    held, gate = hold_consumer_creation(monkeypatch, after_sending=False)
    try:
        first = asyncio.ensure_future(anext(watcher))
        await asyncio.wait_for(held.wait(), STEP)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        gate.set()
        item = await asyncio.wait_for(anext(watcher), STEP)
        if store == "kv":
            assert isinstance(item, KeyValueEntry)
            assert (item.key, item.value) == ("k", b"1")
        else:
            assert isinstance(item, ObjectInfo)
            assert item.name == "o"
        assert await asyncio.wait_for(anext(watcher), STEP) is None  # the initial values' end
        if store == "kv":
            await kv.put("k", b"2")
            update = await asyncio.wait_for(anext(watcher), STEP)
            assert isinstance(update, KeyValueEntry)
            assert update.value == b"2"
    finally:
        await watcher.aclose()


@pytest.mark.parametrize("reader", ["plain", "ordered"])
async def test_messages_whose_first_anext_is_cancelled_goes_on(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """The first ``anext()`` of a ``messages()`` cancelled (a timeout) while it starts:
    the next one starts it again. A plain consumer's waited for ever (for a pull never
    sent); an ordered consumer's read on without holding it, so a second
    ``messages()`` was accepted alongside (both handing out the same messages)."""
    name = unique_name("OFA")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish(f"{name}.a", b"1")
    oc: OrderedConsumer | None = None
    if reader == "plain":
        consumer = await stream.create_consumer(ConsumerConfig(durable_name="d"))
        it = consumer.messages()
        held, gate = asyncio.Event(), asyncio.Event()
        original = PullDriver.start

        async def holding(self: PullDriver) -> None:
            held.set()
            await gate.wait()
            await original(self)

        monkeypatch.setattr(PullDriver, "start", holding)
    else:
        oc = await stream.ordered_consumer()
        it = oc.messages()
        held, gate = hold_consumer_creation(monkeypatch, after_sending=False)
    try:
        first = asyncio.ensure_future(anext(it))
        await asyncio.wait_for(held.wait(), STEP)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        gate.set()
        assert (await asyncio.wait_for(anext(it), STEP)).data == b"1"
        if oc is not None:
            with pytest.raises(InvalidOptionError, match="one operation at a time"):
                await oc.messages().__aenter__()
        await js.publish(f"{name}.a", b"2")
        assert (await asyncio.wait_for(anext(it), STEP)).data == b"2"
    finally:
        await it.aclose()


async def _nothing() -> None:
    pass


@pytest.mark.parametrize("reader", ["messages", "watch", "watch-enter", "object"])
async def test_closed_after_a_cancelled_creation_leaves_no_consumer(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """Cancelled while its consumer's creation is on its way (created on the server,
    the reply not handed back yet), then closed: that consumer is deleted too (only
    one whose reply had arrived was: this one lingered for inactive_threshold, 5 min).
    A watcher's ``async with`` cancelled on its way in closes it at once (there is no
    body, no exit)."""
    name = unique_name("ORC")
    start: Callable[[], Awaitable[object]]
    close: Callable[[], Awaitable[None]]
    if reader.startswith("watch"):
        kv = await js.create_key_value(KeyValueConfig(bucket=name, storage=StorageType.MEMORY))
        await kv.put("k", b"1")
        stream = kv.stream
        watcher = kv.watch()
        if reader == "watch":
            start, close = watcher.__anext__, watcher.aclose
        else:
            start, close = watcher.__aenter__, _nothing
    elif reader == "object":
        obs = await js.create_object_store(
            ObjectStoreConfig(bucket=name, storage=StorageType.MEMORY)
        )
        await obs.put("o", b"z" * 1000)
        stream = obs.stream
        result = await obs.get("o")
        start, close = result.read, result.aclose
    else:
        stream = await js.create_stream(
            StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
        )
        await js.publish(f"{name}.a", b"1")
        it = (await stream.ordered_consumer()).messages()
        start, close = it.__aenter__, it.aclose
    held, gate = hold_consumer_creation(monkeypatch, after_sending=True)
    starting = asyncio.ensure_future(start())
    await asyncio.wait_for(held.wait(), STEP)  # the consumer exists on the server
    # (A watcher's start goes on when its caller is cancelled: closing it cancels it.)
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    await asyncio.wait_for(close(), STEP)
    gate.set()

    async def no_consumers() -> bool:
        return (await stream.info()).state.consumer_count == 0

    await wait_until(no_consumers, STEP, message="the consumer created was left behind")


async def test_a_cancelled_close_of_messages_still_deletes_the_consumer(
    js: JetStreamContext,
) -> None:
    """``aclose()`` of an ordered ``messages()`` cancelled while it closed (a timeout
    around ``kv.history()``, a task cancelled leaving ``async with``) skipped the delete,
    and a second ``aclose()`` did nothing: the consumer stayed for its
    inactive_threshold (5 min) with a pull waiting. The close goes on to the delete,
    and a second ``aclose()`` returns once it is done."""
    name = unique_name("OCC")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish(f"{name}.a", b"1")
    cancelled = 0
    for n in range(8):  # the cancel lands at each suspension point of the close in turn
        oc = await stream.ordered_consumer()
        it = oc.messages()
        await it.__aenter__()
        assert (await asyncio.wait_for(it.next(), STEP)).data == b"1"
        assert (await stream.info()).state.consumer_count == 1
        cancelled += await cancel_after(it.aclose(), n)
        await asyncio.wait_for(it.aclose(), STEP)  # waits for the close under way
        assert (await stream.info()).state.consumer_count == 0, f"left behind at n={n}"
        # The ordered consumer is free again (the cancelled close kept its claim: "an
        # ordered consumer runs one operation at a time").
        async with oc.messages():
            assert (await stream.info()).state.consumer_count == 1
        assert (await stream.info()).state.consumer_count == 0
    assert cancelled >= 4


@pytest.mark.parametrize("call", ["history", "keys"])
async def test_a_cancelled_kv_read_leaves_no_consumer(js: JetStreamContext, call: str) -> None:
    """``kv.history()`` / ``kv.keys()`` cancelled at each point in turn (as by an
    ``asyncio.timeout()`` around them): a cancel landing while they closed their
    ordered consumer left it on the server for inactive_threshold (5 min)."""
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("KCR"), history=5, storage=StorageType.MEMORY)
    )
    for i in range(10):
        await kv.put(f"k{i}", b"v")
    stream = kv.stream

    async def read() -> None:
        if call == "history":
            await kv.history("k1")
        else:
            _ = [key async for key in kv.keys()]  # noqa: SIM118 (an async iterator)

    async def no_consumers() -> bool:
        return (await stream.info()).state.consumer_count == 0

    n = 0
    while await cancel_after(read(), n):  # until the call completes before its cancel
        await wait_until(no_consumers, STEP, message=f"a consumer left after a cancel at {n}")
        n += 1
        assert n < 1000
    await wait_until(no_consumers, STEP, message="a consumer left after the whole call")


@pytest.mark.parametrize("call", ["messages", "consume"])
@pytest.mark.parametrize("kind", ["ordered", "plain"])
async def test_messages_or_consume_cancelled_at_any_point_leaves_nothing_behind(
    js: JetStreamContext, kind: str, call: str
) -> None:
    """``async with c.messages(): pass`` or ``await c.consume()`` then its end,
    cancelled at each point in turn (a timeout around it): nothing stays. An ordered
    one cancelled on its way in left the consumer its creation request made for
    inactive_threshold (5 min): the caller never gets the context to close, and
    ``async with`` runs no exit when the entry raised. A plain one cancelled while it
    closed left its subscription (the wait for the pull's clean-up cancelled it)."""
    name = unique_name("OSC")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish(f"{name}.a", b"1")
    durable = None
    if kind == "plain":
        durable = await stream.create_consumer(ConsumerConfig(durable_name="d"))
    nc = js.nc
    subs0 = len(nc._subs)
    listeners0 = js._conn.listener_count()

    async def nothing_left() -> bool:
        consumers = (await stream.info()).state.consumer_count
        return (
            consumers == (1 if durable else 0)
            and len(nc._subs) == subs0
            and js._conn.listener_count() == listeners0
        )

    n = 0
    while True:
        reader = durable if durable is not None else await stream.ordered_consumer()

        async def start(reader: C.Consumer | OrderedConsumer) -> None:
            if call == "messages":
                async with reader.messages():
                    pass
            else:
                ctx = await reader.consume(lambda msg: None)
                ctx.stop()
                await ctx.closed()

        if not await cancel_after(start(reader), n):
            break  # the whole call ran before its cancel
        await wait_until(nothing_left, STEP, message=f"something left after a cancel at {n}")
        n += 1
        assert n < 1000
    assert n > 2
    await wait_until(nothing_left, STEP, message="something left after the whole call")


async def test_a_delete_that_overtakes_the_creation_is_made_again(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start cancelled while its consumer's creation was queued on the server: the
    server's API workers may serve the close's delete first ("not found") and create
    the consumer after it (seen against nats-server, about one cancelled start in 60),
    which then stayed for inactive_threshold (5 min). The close deletes it again once
    the creation is answered."""
    name = unique_name("ODO")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish(f"{name}.a", b"1")
    queued, serve, not_found = asyncio.Event(), asyncio.Event(), asyncio.Event()
    created = asyncio.Event()
    upsert, delete = C.upsert_consumer, C.delete_consumer

    async def served_later(*args: Any, **kwargs: Any) -> ConsumerInfo:
        await serve.wait()
        info = await upsert(*args, **kwargs)
        created.set()
        return info

    async def queued_creation(*args: Any, **kwargs: Any) -> ConsumerInfo:
        # In the server's queue: the caller's cancellation can not take it back.
        served = asyncio.ensure_future(served_later(*args, **kwargs))
        queued.set()
        return await asyncio.shield(served)

    async def noting_delete(*args: Any, **kwargs: Any) -> None:
        try:
            await delete(*args, **kwargs)
        except ConsumerNotFoundError:
            not_found.set()
            raise

    monkeypatch.setattr(C, "upsert_consumer", queued_creation)
    monkeypatch.setattr(C, "delete_consumer", noting_delete)
    it = (await stream.ordered_consumer()).messages()
    entering = asyncio.ensure_future(it.__aenter__())
    await asyncio.wait_for(queued.wait(), STEP)
    entering.cancel()
    closing = asyncio.ensure_future(it.aclose())
    await asyncio.wait_for(not_found.wait(), STEP)  # the delete was served first
    serve.set()  # then the creation
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(entering, STEP)
    await asyncio.wait_for(closing, STEP)
    await asyncio.wait_for(created.wait(), STEP)

    async def no_consumers() -> bool:
        return (await stream.info()).state.consumer_count == 0

    await wait_until(no_consumers, STEP, message="the consumer created after the delete")


@pytest.mark.parametrize("reader", ["same context", "waiting reader"])
async def test_a_context_whose_entry_was_cancelled_ends_and_frees_the_consumer(
    js: JetStreamContext, reader: str
) -> None:
    """``async with oc.messages()`` cancelled on its way in closes the context. Then a
    ``next()`` on that context (or one already waiting on it) started it again on the
    closed source: its claim was never released, and the ordered consumer refused every
    later call ("runs one operation at a time"). Now the closed context ends iteration."""
    name = unique_name("OEC")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish(f"{name}.a", b"0")
    n = 0
    while True:
        oc = await stream.ordered_consumer()
        ctx = oc.messages()
        waiting: asyncio.Future[Msg] | None = None

        async def enter(ctx: MessagesContext = ctx) -> None:
            nonlocal waiting
            if reader == "waiting reader":
                # A reader arriving once the entry's start is under way: it waits for it.
                entering = asyncio.ensure_future(ctx.__aenter__())
                await asyncio.sleep(0)
                waiting = asyncio.ensure_future(ctx.next())
                await entering
            else:
                await ctx.__aenter__()

        if not await cancel_after(enter(), n):
            await ctx.aclose()
            if waiting is not None:
                waiting.cancel()
            break  # the entry completed before its cancel
        # Ended (the entry's close came first), or the message (the start had completed:
        # only the entry's return was cancelled); never a hang.
        try:
            got = await asyncio.wait_for(waiting if waiting is not None else ctx.next(), STEP)
        except StopAsyncIteration:
            pass
        else:
            assert got.data == b"0"
        await ctx.aclose()
        async with oc.messages():  # the ordered consumer is free again (was: refused)
            pass
        n += 1
        assert n < 1000
    assert n > 0

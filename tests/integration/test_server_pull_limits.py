"""A server with a pull limit (``jetstream.limits.max_request_batch``), a consumer with its own.

The server gives every consumer created without ``max_batch`` its own limit,
and answers each pull over a consumer's ``max_batch`` or ``max_expires`` with a
409. The pull sizes the library picks itself (its own consumers' pulls, the
batch of a pull limited by bytes, the defaults of ``messages()`` and
``consume()``) were over them: a KV watch or an ordered ``messages()`` waited
for ever, ``kv.keys()`` and object reads timed out ("values still pending"),
``fetch_bytes`` raised the 409.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    APIError,
    ConsumerConfig,
    JetStreamContext,
    JetStreamError,
    KeyValueConfig,
    Msg,
    ObjectStoreConfig,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsServer

LIMITS = {"max_request_batch": 10}


@pytest.fixture(scope="module")
def limited() -> Iterator[NatsServer]:
    server = NatsServer(config={"jetstream": {"limits": LIMITS}})
    server.start_sync()
    try:
        yield server
    finally:
        server.stop_sync()


@pytest.fixture
async def js(limited: NatsServer) -> AsyncIterator[JetStreamContext]:
    context = await aiojetstream.connect(limited.url)
    try:
        yield context
    finally:
        async for name in context.stream_names():
            await context.delete_stream(name)
        await context.close()


async def _stream(js: JetStreamContext, name: str, count: int) -> None:
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish_many(f"{name}.a", [b"%d" % i for i in range(count)])


async def test_the_librarys_own_consumers_keep_within_the_limits(js: JetStreamContext) -> None:
    await _stream(js, "OWN", 25)
    ordered = await js.ordered_consumer("OWN")
    got: list[bytes] = []
    async with asyncio.timeout(10), ordered.messages() as it:
        async for msg in it:
            got.append(msg.data)
            if len(got) == 25:
                break
    assert got == [b"%d" % i for i in range(25)]
    info = ordered.cached_info
    assert info is not None
    assert info.config.max_batch == 10  # the server's, not asked for

    kv = await js.create_key_value(KeyValueConfig(bucket="LIM", history=3))
    for i in range(25):
        await kv.put(f"k{i:02d}", b"%d" % i)
    await kv.put("k00", b"again")
    async with asyncio.timeout(10):
        assert len([k async for k in kv.keys()]) == 25  # noqa: SIM118 (an async iterator)
        assert [e.value for e in await kv.history("k00")] == [b"0", b"again"]
        initial = []
        async with kv.watch() as watch:
            async for entry in watch:
                if entry is None:  # the end of the initial values
                    break
                initial.append(entry.key)
    assert len(initial) == 25

    store = await js.create_object_store(ObjectStoreConfig(bucket="LIMO"))
    blob = bytes(range(256)) * 400  # 100 chunks of 1,024 bytes
    await store.put("blob", blob, chunk_size=1024)
    async with asyncio.timeout(10):
        assert await (await store.get("blob")).read() == blob
        assert [info.name async for info in store.list()] == ["blob"]


@pytest.mark.parametrize("way", ["fetch_bytes", "messages", "messages_bytes", "consume"])
async def test_defaults_and_byte_batches_fit_a_consumers_limits(
    js: JetStreamContext, way: str
) -> None:
    """``fetch_bytes`` and ``messages(max_bytes=...)`` pull 1,000,000 messages limited by
    bytes, and ``messages()`` / ``consume()`` 500 for 30 s by default: each pull got a
    409 (the consumer's ``max_batch`` is the server's 10, its ``max_expires`` 2 s)."""
    stream = f"DEF{way.upper()}"
    await _stream(js, stream, 25)
    consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="d", max_expires=timedelta(seconds=2))
    )
    assert consumer.cached_info.config.max_batch == 10
    errors: list[JetStreamError] = []
    seqs: list[int] = []
    done = asyncio.Event()

    async def take(msg: Msg) -> None:
        seqs.append(msg.metadata.sequence.stream)
        await msg.ack()
        if len(seqs) == 25:
            done.set()

    async with asyncio.timeout(10):
        if way == "fetch_bytes":
            while len(seqs) < 25:
                async for msg in await consumer.fetch_bytes(100_000, expires=1):
                    await take(msg)
        elif way == "consume":
            ctx = await consumer.consume(take, error_handler=errors.append)
            await done.wait()
            ctx.stop()
            await ctx.closed()
        else:
            max_bytes = 100_000 if way == "messages_bytes" else None
            async with consumer.messages(error_handler=errors.append, max_bytes=max_bytes) as it:
                async for msg in it:
                    await take(msg)
                    if done.is_set():
                        break
    assert seqs == list(range(1, 26))
    assert errors == []


async def test_a_callers_own_values_are_sent_as_given(js: JetStreamContext) -> None:
    """Over the consumer's limits on purpose: the server's 409 says so."""
    await _stream(js, "OWNV", 20)
    consumer = await js.create_consumer(
        "OWNV", ConsumerConfig(durable_name="d", max_expires=timedelta(seconds=2))
    )
    with pytest.raises(APIError, match="MaxRequestBatch") as batch:
        [m async for m in await consumer.fetch(20, expires=1)]
    assert batch.value.code == 409
    with pytest.raises(APIError, match="MaxRequestExpires"):
        [m async for m in await consumer.fetch(5, expires=5)]


@pytest.mark.parametrize("way", ["messages", "consume"])
@pytest.mark.parametrize("limit", ["max_batch", "max_expires"])
async def test_a_running_read_refits_to_lowered_limits(
    js: JetStreamContext, limit: str, way: str
) -> None:
    """``update_consumer`` lowering ``max_batch`` (``max_expires``) under what a running
    ``messages()`` / ``consume()`` picked: each pull after it got a 409, reported once,
    and the read delivered nothing more, for good. The check that follows a refused
    pull finds the new limits, and the library's own sizes are fitted to them."""
    stream = f"REFIT{limit.upper()}{way.upper()}"
    await _stream(js, stream, 0)
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="d"))
    # What the library picks: the batch (expires given), or expires (the batch given).
    options: dict[str, Any] = {"expires": 2} if limit == "max_batch" else {"max_messages": 4}
    errors: list[JetStreamError] = []
    seqs: list[int] = []
    first, done = asyncio.Event(), asyncio.Event()

    async def take(msg: Msg) -> None:
        seqs.append(msg.metadata.sequence.stream)
        await msg.ack()
        if len(seqs) == 3:
            first.set()
        if len(seqs) == 23:
            done.set()

    async def update_and_publish() -> None:
        await js.publish_many(f"{stream}.a", [b"1", b"2", b"3"])
        await first.wait()
        lower = 1 if limit == "max_batch" else timedelta(seconds=3)
        config = consumer.cached_info.config.model_copy(update={limit: lower})
        await js.update_consumer(stream, config)
        await js.publish_many(f"{stream}.a", [b"%d" % i for i in range(20)])

    async with asyncio.timeout(30):
        if way == "consume":
            ctx = await consumer.consume(take, error_handler=errors.append, **options)
            await update_and_publish()
            await done.wait()
            ctx.stop()
            await ctx.closed()
        else:
            async with consumer.messages(error_handler=errors.append, **options) as it:
                publishing = asyncio.create_task(update_and_publish())
                async for msg in it:
                    await take(msg)
                    if done.is_set():
                        break
                await publishing
    assert seqs == list(range(1, 24))
    assert all(isinstance(e, APIError) and e.code == 409 for e in errors), errors
    wanted = 1 if limit == "max_batch" else timedelta(seconds=3)
    assert getattr(consumer.cached_info.config, limit) == wanted  # the check's info kept

"""Consumer management against a real nats-server."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    ConsumerDoesNotExistError,
    ConsumerExistsError,
    ConsumerInfo,
    ConsumerNotFoundError,
    InvalidNameError,
    InvalidOptionError,
    JetStreamContext,
    Msg,
    StorageType,
    StreamConfig,
    StreamNotFoundError,
)
from helpers import unique_name


@pytest.fixture
async def stream(js: JetStreamContext) -> str:
    name = unique_name("C")
    await js.create_stream(StreamConfig(name=name, subjects=["c.>"], storage=StorageType.MEMORY))
    return name


async def test_create_update_get_delete(js: JetStreamContext, stream: str) -> None:
    cfg = ConsumerConfig(durable_name="dur", ack_wait=timedelta(seconds=10))
    consumer = await js.create_consumer(stream, cfg)
    assert consumer.name == "dur"
    assert consumer.stream_name == stream
    assert consumer.cached_info.config.ack_policy == AckPolicy.EXPLICIT
    assert consumer.cached_info.config.ack_wait == timedelta(seconds=10)

    # Same config again: fine. Different config: refused.
    await js.create_consumer(stream, cfg)
    with pytest.raises(ConsumerExistsError) as exists:
        await js.create_consumer(stream, cfg.model_copy(update={"description": "changed"}))
    assert exists.value.err_code == 10148

    updated = await js.update_consumer(stream, cfg.model_copy(update={"description": "changed"}))
    assert updated.cached_info.config.description == "changed"
    got = await js.consumer(stream, "dur")
    info = await got.info()
    assert isinstance(info, ConsumerInfo)
    assert info.config.description == "changed"

    await js.delete_consumer(stream, "dur")
    with pytest.raises(ConsumerNotFoundError) as nf:
        await js.consumer(stream, "dur")
    assert nf.value.err_code == 10014
    with pytest.raises(ConsumerNotFoundError):
        await js.delete_consumer(stream, "dur")


async def test_update_missing_consumer(js: JetStreamContext, stream: str) -> None:
    with pytest.raises(ConsumerDoesNotExistError) as info:
        await js.update_consumer(stream, ConsumerConfig(name="ghost"))
    assert info.value.err_code == 10149
    with pytest.raises(InvalidOptionError):
        await js.update_consumer(stream, ConsumerConfig())


async def test_create_or_update_consumer(js: JetStreamContext, stream: str) -> None:
    c1 = await js.create_or_update_consumer(stream, ConsumerConfig(name="cu"))
    assert c1.cached_info.config.max_deliver == -1
    c2 = await js.create_or_update_consumer(stream, ConsumerConfig(name="cu", max_deliver=5))
    assert c2.cached_info.config.max_deliver == 5


async def test_ephemeral_and_filtered(js: JetStreamContext, stream: str) -> None:
    eph = await js.create_consumer(stream, ConsumerConfig(inactive_threshold=30))
    assert eph.name
    assert eph.cached_info.config.durable_name is None
    filtered = await js.create_consumer(
        stream, ConsumerConfig(name="filtered", filter_subject="c.orders.*")
    )
    assert filtered.cached_info.config.filter_subject == "c.orders.*"
    multi = await js.create_consumer(
        stream, ConsumerConfig(name="multi", filter_subjects=["c.a", "c.b"])
    )
    assert multi.cached_info.config.filter_subjects == ["c.a", "c.b"]


async def test_stream_handle_consumer_calls(js: JetStreamContext, stream: str) -> None:
    s = await js.stream(stream)
    await s.create_consumer(ConsumerConfig(name="h1"))
    await s.create_or_update_consumer(ConsumerConfig(name="h2"))
    await s.update_consumer(ConsumerConfig(name="h2", description="x"))
    assert (await s.consumer("h2")).cached_info.config.description == "x"
    assert sorted([n async for n in s.consumer_names()]) == ["h1", "h2"]
    assert sorted([i.name async for i in s.list_consumers()]) == ["h1", "h2"]
    await s.delete_consumer("h1")
    assert [n async for n in js.consumer_names(stream)] == ["h2"]


async def test_consumer_paging(js: JetStreamContext, stream: str) -> None:
    count = 270
    for start in range(0, count, 45):
        await asyncio.gather(
            *(
                js.create_consumer(stream, ConsumerConfig(name=f"k{i:03d}"))
                for i in range(start, min(start + 45, count))
            )
        )
    names = [n async for n in js.consumer_names(stream)]
    assert sorted(names) == [f"k{i:03d}" for i in range(count)]
    infos = [i async for i in js.list_consumers(stream)]
    assert len(infos) == count


async def _consumers(js: JetStreamContext, stream: str, names: list[str]) -> None:
    for start in range(0, len(names), 45):
        await asyncio.gather(
            *(js.create_consumer(stream, ConsumerConfig(name=n)) for n in names[start : start + 45])
        )


@pytest.mark.parametrize("change", ["one created", "two deleted", "the first page deleted"])
async def test_a_listing_survives_changes_before_its_offset(
    js: JetStreamContext, stream: str, change: str
) -> None:
    """The server sorts a listing by name and pages it by offset (256 infos a page):
    an entry created before the offset while paging listed one entry twice, and
    entries deleted before it left out as many that existed throughout."""
    names = [f"k{i:03d}" for i in range(300)]
    await _consumers(js, stream, names)
    throughout = set(names)
    listed: list[str] = []
    async for info in js.list_consumers(stream):
        listed.append(info.name)
        if len(listed) == 10:  # the first page is read: change what sorts first
            if change == "one created":
                await js.create_consumer(stream, ConsumerConfig(name="a000"))
            else:
                gone = names[1:3] if change == "two deleted" else names[:260]
                for start in range(0, len(gone), 45):
                    await asyncio.gather(
                        *(js.delete_consumer(stream, n) for n in gone[start : start + 45])
                    )
                throughout -= set(gone)
    assert len(listed) == len(set(listed)), "listed twice: " + ", ".join(
        sorted(n for n in set(listed) if listed.count(n) > 1)
    )
    assert throughout <= set(listed), "never listed: " + ", ".join(sorted(throughout - set(listed)))


async def test_bad_consumer_input(js: JetStreamContext, stream: str) -> None:
    before = js.nc.stats["out_msgs"]
    for bad in ["a.b", "a*", "a>", "a b", "a/b"]:
        with pytest.raises(InvalidNameError):
            await js.create_consumer(stream, ConsumerConfig.model_construct(name=bad))
        with pytest.raises(InvalidNameError):
            await js.consumer(stream, bad)
    with pytest.raises(InvalidOptionError):
        await js.create_consumer(stream, ConsumerConfig(name="a", durable_name="b"))
    assert js.nc.stats["out_msgs"] == before


async def test_consumer_on_missing_stream(js: JetStreamContext) -> None:
    with pytest.raises(StreamNotFoundError):
        await js.create_consumer("MISSING", ConsumerConfig(name="x"))


PUSH_HINT = "create the consumer without deliver_subject"


async def _ignore(msg: Msg) -> None:
    pass


async def test_a_push_consumer_handle_refuses_pulls(js: JetStreamContext, stream: str) -> None:
    await js.publish("c.1", b"x")
    push = ConsumerConfig(durable_name="push", deliver_subject=unique_name("deliver"))
    created = await js.create_consumer(stream, push)  # made for another client: fine
    stream_handle = await js.stream(stream)
    # Each handle (a create call's, or bound) refuses every pull before sending it.
    for handle in (
        created,
        await js.consumer(stream, "push"),
        await stream_handle.consumer("push"),
    ):
        pulls: list[Callable[[], Awaitable[object]]] = [
            functools.partial(handle.fetch, 1, expires=1),
            functools.partial(handle.next, expires=1),
            functools.partial(handle.fetch_no_wait, 1),
            functools.partial(handle.consume, _ignore),
        ]
        for pull in pulls:
            with pytest.raises(InvalidOptionError) as refused:
                await pull()
            assert "'push' is a push consumer" in str(refused.value)
            assert PUSH_HINT in str(refused.value)
        with pytest.raises(InvalidOptionError, match=PUSH_HINT):
            handle.messages()
        info = await handle.info()  # administration still works on it
        assert info.delivered.consumer_seq == 0
        assert info.num_waiting == 0
        assert (await handle.backlog()).pending == 1


async def test_a_pull_of_a_consumer_made_push_meanwhile(js: JetStreamContext, stream: str) -> None:
    await js.publish("c.1", b"x")
    handle = await js.create_consumer(stream, ConsumerConfig(durable_name="later"))
    await js.delete_consumer(stream, "later")
    await js.create_consumer(
        stream, ConsumerConfig(durable_name="later", deliver_subject=unique_name("deliver"))
    )
    # The handle still knows a pull consumer: the server's 409, typed, with the way out.
    with pytest.raises(InvalidOptionError) as refused:
        await (await handle.fetch(1, expires=2)).collect()
    assert "409 Consumer is push based" in str(refused.value)
    assert PUSH_HINT in str(refused.value)
    with pytest.raises(InvalidOptionError, match=PUSH_HINT):
        await handle.next(expires=2)


async def test_swapped_stream_and_consumer_arguments_get_a_hint(
    js: JetStreamContext, stream: str
) -> None:
    await js.create_consumer(stream, ConsumerConfig(durable_name="w"))
    missing = unique_name("NOPE")
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: js.consumer("w", stream),
        lambda: js.delete_consumer("w", stream),
    ]
    for call in calls:
        with pytest.raises(StreamNotFoundError) as swapped:
            await call()
        text = str(swapped.value)
        assert text.startswith("stream 'w' not found (code=404, err_code=10059)")
        assert f"{stream!r}, given as the consumer, is a stream" in text
        assert "the stream comes first, then the consumer" in text
        assert swapped.value.err_code == 10059
    # No stream of the consumer's name: nothing to hint at.
    with pytest.raises(StreamNotFoundError) as plain:
        await js.consumer(missing, "w")
    assert str(plain.value) == f"stream {missing!r} not found (code=404, err_code=10059)"
    assert (await js.consumer(stream, "w")).name == "w"

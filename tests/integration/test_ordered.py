"""The ordered consumer (ADR-17) against a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from aiojetstream import (
    DeliverPolicy,
    InvalidOptionError,
    JetStreamContext,
    MessageTooLargeError,
    Msg,
    OrderedConsumer,
    OrderedConsumerConfig,
    StorageType,
    StreamConfig,
    StreamNotFoundError,
    _cleanup,
)
from aiojetstream._pull_driver import PullDriver
from helpers import unique_name, wait_until


async def fill(js: JetStreamContext, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        await js.publish_async(f"ord.{i % 4}", str(i).encode())
    await js.publish_async_complete(timeout=30)


@pytest.fixture
async def stream(js: JetStreamContext) -> str:
    name = unique_name("ORD")
    await js.create_stream(StreamConfig(name=name, subjects=["ord.>"], storage=StorageType.MEMORY))
    return name


async def test_messages_in_order(js: JetStreamContext, stream: str) -> None:
    await fill(js, 300)
    oc = await js.ordered_consumer(stream)
    seen: list[int] = []
    async with oc.messages(max_messages=50) as it:
        async for msg in it:
            seen.append(msg.metadata.sequence.stream)
            if len(seen) == 300:
                break
    assert seen == list(range(1, 301))
    assert oc.cursor == 300
    # Stopping deleted the server-side consumer.
    assert [n async for n in js.consumer_names(stream)] == []


async def test_resets_after_consumer_deletion(js: JetStreamContext, stream: str) -> None:
    await fill(js, 100)
    oc = await js.ordered_consumer(stream, OrderedConsumerConfig(name_prefix="oc"))
    seen: list[int] = []
    names: set[str] = set()
    async with oc.messages(max_messages=10, expires=2) as it:
        async for msg in it:
            seen.append(msg.metadata.sequence.stream)
            names.add(msg.metadata.consumer)
            if len(seen) == 40:
                assert oc.name is not None
                await js.delete_consumer(stream, oc.name)
                await fill(js, 100, start=100)
            if len(seen) == 200:
                break
    assert seen == list(range(1, 201))
    assert len(names) >= 2
    assert all(n.startswith("oc_") for n in names)


async def test_messages_shared_by_a_pool_of_tasks_across_resets(
    js: JetStreamContext, stream: str
) -> None:
    """Tasks sharing one ordered messages() each reset the consumer after its deletion:
    several consumers were created (messages handed out twice, consumers left
    behind), and stop() left a task waiting."""
    oc = await js.ordered_consumer(stream)
    got: list[int] = []

    async def worker(it: AsyncIterator[Msg]) -> None:
        async for msg in it:
            got.append(msg.metadata.sequence.stream)
            await asyncio.sleep(0)  # let the others take turns

    async with oc.messages(expires=2) as it:
        tasks = [asyncio.create_task(worker(it)) for _ in range(3)]
        await fill(js, 30)
        await wait_until(lambda: len(got) == 30, timeout=10)
        for round_ in range(1, 3):
            assert oc.name is not None
            await js.delete_consumer(stream, oc.name)  # every worker waits: all see it
            await fill(js, 30, start=30 * round_)
            await wait_until(_at_least(got, 30 * (round_ + 1)), timeout=15)
        assert sorted(got) == list(range(1, 91))  # each message once
        assert len([n async for n in js.consumer_names(stream)]) == 1
        it.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert [n async for n in js.consumer_names(stream)] == []


def _at_least(got: list[int], count: int) -> Callable[[], bool]:
    return lambda: len(got) >= count


async def test_consume_in_order_with_filter(js: JetStreamContext, stream: str) -> None:
    await fill(js, 80)
    oc = await js.ordered_consumer(
        stream, OrderedConsumerConfig(filter_subjects=["ord.1"], deliver_policy=DeliverPolicy.ALL)
    )
    seen: list[bytes] = []
    done = asyncio.Event()

    def handler(msg: Msg) -> None:
        seen.append(msg.data)
        if len(seen) == 20:
            done.set()

    async with await oc.consume(handler):
        await asyncio.wait_for(done.wait(), 10)
    assert seen == [str(i).encode() for i in range(1, 80, 4)]


async def test_fetch_and_next(js: JetStreamContext, stream: str) -> None:
    await fill(js, 10)
    oc = await js.ordered_consumer(stream)
    first = [m.data async for m in await oc.fetch(4, expires=2)]
    assert first == [b"0", b"1", b"2", b"3"]
    msg = await oc.next(expires=2)
    assert msg.data == b"4"
    # The consumer vanishes: the next fetch recreates it at the cursor.
    assert oc.name is not None
    await js.delete_consumer(stream, oc.name)
    rest = [m.data async for m in await oc.fetch(10, expires=1)]
    if not rest:  # the fetch noticed the deletion; the next one resumes
        rest = [m.data async for m in await oc.fetch(10, expires=1)]
    assert rest == [str(i).encode() for i in range(5, 10)]


async def test_next_cancelled_while_its_fetch_closes_skips_nothing(
    js: JetStreamContext, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``next()`` cancelled (``wait_for``, a timeout) once it took its message
    either returns it or leaves it for the next call: it closed its fetch after
    the take (the cursor already past the message) and a cancellation there
    dropped the message (a skip). The fetch's close is held here at its first
    await, and the call is cancelled meanwhile."""
    await fill(js, 3)
    oc = await js.ordered_consumer(stream)
    closing = asyncio.Event()
    gate = asyncio.Event()
    original = PullDriver.aclose

    async def held(self: PullDriver) -> None:
        closing.set()
        await gate.wait()
        await original(self)

    monkeypatch.setattr(PullDriver, "aclose", held)
    got: list[bytes] = []
    first = asyncio.ensure_future(oc.next(expires=5))
    await asyncio.wait_for(closing.wait(), 10)  # its message was taken, its fetch closes
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        got.append((await first).data)
    gate.set()
    while oc.cursor < 3:
        got.append((await oc.next(expires=5)).data)
    assert got == [b"0", b"1", b"2"]


async def test_mixing_fetch_and_consume_is_refused(js: JetStreamContext, stream: str) -> None:
    await fill(js, 2)
    oc = await js.ordered_consumer(stream)
    async with await oc.fetch(1, expires=1) as batch:
        assert [m.data async for m in batch] == [b"0"]
    with pytest.raises(InvalidOptionError, match="fetch"):
        oc.messages()
    other = await js.ordered_consumer(stream)
    async with other.messages() as it:
        await it.next()
        with pytest.raises(InvalidOptionError):
            await other.fetch(1)


@pytest.mark.parametrize("close", ["aclose", "collected"])
async def test_a_refused_messages_closed_leaves_the_running_one_be(
    js: JetStreamContext, stream: str, close: str
) -> None:
    """A second ``messages()`` refused while one runs, then closed (or dropped and
    collected): closing it deleted the running one's consumer and gave up its claim,
    so a third ``messages()`` was accepted and both handed out the same messages."""
    await fill(js, 20)
    oc = await js.ordered_consumer(stream, OrderedConsumerConfig(name_prefix="oc"))
    async with oc.messages(max_messages=5) as it:
        got = [(await asyncio.wait_for(it.next(), 10)).data for _ in range(3)]
        name = oc.name
        second = oc.messages()
        with pytest.raises(InvalidOptionError, match="one operation at a time"):
            async for _ in second:
                pass
        if close == "aclose":
            await second.aclose()
        else:
            del second
            gc.collect()
            loop = asyncio.get_running_loop()  # (another test's loop may have left one)
            await asyncio.gather(*(t for t in _cleanup._CLOSING if t.get_loop() is loop))
        assert oc.name == name
        assert [n async for n in js.consumer_names(stream)] == [name]
        with pytest.raises(InvalidOptionError, match="one operation at a time"):
            await oc.messages().__aenter__()
        got += [(await asyncio.wait_for(it.next(), 10)).data for _ in range(17)]
    assert got == [str(i).encode() for i in range(20)]


@pytest.mark.parametrize("read", ["messages", "fetch"])
async def test_last_per_subject_without_filter_subjects(
    js: JetStreamContext, stream: str, read: str
) -> None:
    """``LAST_PER_SUBJECT`` and no ``filter_subjects``: every subject (as nats.go does).
    The server refused the consumer at first use (10094, "optional filter subject is
    not set"); also when recreated during the initial values."""
    for value in range(3):
        for subject in ("ord.a", "ord.b", "ord.c"):
            await js.publish_async(subject, f"{subject}{value}".encode())
    await js.publish_async_complete(timeout=30)
    oc = await js.ordered_consumer(
        stream, OrderedConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
    )
    expected = [b"ord.a2", b"ord.b2", b"ord.c2", b"after"]
    if read == "messages":
        async with oc.messages() as it:
            got = [(await asyncio.wait_for(it.next(), 10)).data]
            assert oc.name is not None
            await js.delete_consumer(stream, oc.name)  # recreated "last per subject"
            got += [(await asyncio.wait_for(it.next(), 10)).data for _ in range(2)]
            await js.publish("ord.a", b"after", timeout=10)
            got.append((await asyncio.wait_for(it.next(), 10)).data)
    else:
        got = [m.data for m in await (await oc.fetch_no_wait(1)).collect()]
        assert oc.name is not None
        await js.delete_consumer(stream, oc.name)
        while len(got) < 3:
            got += [m.data for m in await (await oc.fetch(5, expires=2)).collect()]
        await js.publish("ord.a", b"after", timeout=10)
        got += [m.data for m in await (await oc.fetch(1, expires=5)).collect()]
    assert got == expected


async def test_inactive_threshold_zero_is_the_default(js: JetStreamContext, stream: str) -> None:
    """``inactive_threshold=0`` is the default 5 min, as in nats.go (sent as 0, the
    server gave the consumer its ephemeral default: 5 s)."""
    await fill(js, 1)
    oc = await js.ordered_consumer(stream, OrderedConsumerConfig(inactive_threshold=0))
    await oc.next(expires=5)
    info = await oc.info()
    assert info.config.inactive_threshold == timedelta(minutes=5)


async def test_max_reset_attempts_zero_is_refused(js: JetStreamContext, stream: str) -> None:
    """Not nats.go's 0 ("unlimited"): None is; 0 attempts would mean never recreate."""
    with pytest.raises(InvalidOptionError, match="None, the default, is unlimited"):
        await js.ordered_consumer(stream, OrderedConsumerConfig(max_reset_attempts=0))


async def test_missing_stream(js: JetStreamContext) -> None:
    with pytest.raises(StreamNotFoundError):
        await js.ordered_consumer("NOPE")


async def test_leaves_no_consumers_behind(js: JetStreamContext, stream: str) -> None:
    await fill(js, 5)
    for _ in range(20):
        oc = await js.ordered_consumer(stream)
        async with oc.messages() as it:
            await it.next()
    await wait_until(lambda: _no_consumers(js, stream), timeout=10)


async def _no_consumers(js: JetStreamContext, stream: str) -> bool:
    return [n async for n in js.consumer_names(stream)] == []


@pytest.mark.parametrize("read", ["messages", "fetch"])
async def test_last_per_subject_reset_during_the_initial_values(
    js: JetStreamContext, stream: str, read: str
) -> None:
    """A "last per subject" consumer recreated before its initial values were all
    handed out: it restarted at cursor + 1 and delivered every older revision
    after the cursor too. It starts "last per subject" again and skips what was
    handed out, so each subject still comes once, at its last revision."""
    subjects = 400
    # Stream sequences 1-400: ord.0-ord.399, first revisions; 401-600: ord.200-ord.399
    # again. The last revisions: 1-200, then 401-600 (the first of ord.200-399 are
    # old revisions after the cursor).
    for i in range(subjects):
        await js.publish_async(f"ord.{i}", f"{i}.0".encode())
    for i in range(subjects // 2, subjects):
        await js.publish_async(f"ord.{i}", f"{i}.1".encode())
    await js.publish_async_complete(timeout=30)
    last = [f"{i}.{int(i >= subjects // 2)}".encode() for i in range(subjects)]
    last_seqs = [*range(1, subjects // 2 + 1), *range(subjects + 1, subjects * 3 // 2 + 1)]
    oc = await js.ordered_consumer(
        stream,
        OrderedConsumerConfig(
            filter_subjects=["ord.>"], deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
        ),
    )
    got: list[Msg] = []
    names: set[str] = set()

    def seen(msg: Msg) -> None:
        got.append(msg)
        names.add(msg.metadata.consumer)

    if read == "messages":
        async with oc.messages(max_messages=50, expires=2) as it:
            while len(got) < subjects:
                seen(await asyncio.wait_for(it.next(), 10))
                if len(got) == 20:
                    assert oc.name is not None
                    await js.delete_consumer(stream, oc.name)
            # And afterwards, new messages as usual (from the cursor on).
            await js.publish("ord.0", b"after", timeout=10)
            assert (await asyncio.wait_for(it.next(), 10)).data == b"after"
    else:
        batch = await oc.fetch(20, expires=5)
        for msg in await batch.collect():
            seen(msg)
        assert len(got) == 20
        assert oc.name is not None
        await js.delete_consumer(stream, oc.name)
        while len(got) < subjects:
            for msg in await (await oc.fetch(100, expires=2)).collect():
                seen(msg)
    assert len(names) >= 2  # it was recreated
    assert [m.data for m in got] == last
    assert [m.metadata.sequence.stream for m in got] == last_seqs
    if read == "fetch":
        await js.publish("ord.0", b"after", timeout=10)
        assert [m.data for m in await (await oc.fetch(1, expires=5)).collect()] == [b"after"]


async def test_fetch_and_next_after_a_last_per_subject_reset(
    js: JetStreamContext, stream: str
) -> None:
    """The messages skipped after the reset (handed out before it) took room in the
    pulls: ``next()`` raised FetchTimeoutError at once, once per message handed out
    before, and a fetch came back empty though messages were waiting."""
    for i in range(20):
        await js.publish_async(f"ord.{i}", str(i).encode())
    await js.publish_async_complete(timeout=30)
    config = OrderedConsumerConfig(
        filter_subjects=["ord.>"], deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
    )
    by_next = await js.ordered_consumer(stream, config)
    for i in range(5):
        assert (await by_next.next(expires=5)).data == str(i).encode()
    assert by_next.name is not None
    await js.delete_consumer(stream, by_next.name)
    for i in range(5, 10):
        assert (await by_next.next(expires=5)).data == str(i).encode()

    by_fetch = await js.ordered_consumer(stream, config)
    first = await (await by_fetch.fetch_no_wait(5)).collect()
    assert [m.data for m in first] == [str(i).encode() for i in range(5)]
    assert by_fetch.name is not None
    await js.delete_consumer(stream, by_fetch.name)
    # The fetch finds the consumer gone, recreates it and pulls again (it came back
    # empty: only the next fetch recreated it).
    got = await (await by_fetch.fetch_no_wait(5)).collect()
    assert [m.data for m in got] == [str(i).encode() for i in range(5, 10)]
    batch = await by_fetch.fetch(5, expires=5)
    assert [m.data async for m in batch] == [str(i).encode() for i in range(10, 15)]


async def test_fetch_no_wait_max_bytes(js: JetStreamContext, stream: str) -> None:
    """As on a plain consumer: bounded in bytes on the server as well."""
    await fill(js, 10)
    oc = await js.ordered_consumer(stream)
    with pytest.raises(MessageTooLargeError):
        await (await oc.fetch_no_wait(5, max_bytes=1)).collect()
    got = await (await oc.fetch_no_wait(5, max_bytes=1 << 20)).collect()
    assert [m.data for m in got] == [str(i).encode() for i in range(5)]


@pytest.mark.parametrize(
    ("call", "gone"),
    [
        ("no_wait", "deleted"),
        ("fetch", "deleted"),
        ("bytes", "deleted"),
        ("iterate", "deleted"),
        ("no_wait", "expired"),
    ],
)
async def test_a_fetch_whose_consumer_is_gone_recreates_it(
    js: JetStreamContext, stream: str, call: str, gone: str
) -> None:
    """The consumer gone between two fetches (deleted; expired after
    ``inactive_threshold`` while a batch was processed; lost in a restart): the next
    fetch came back empty at once though messages were waiting, so the documented
    replay loop (``while msgs := await (await oc.fetch_no_wait(n)).collect()``) ended
    early, silently (nats.go recreates the consumer in every fetch)."""
    await fill(js, 30)
    oc = await js.ordered_consumer(stream, OrderedConsumerConfig(inactive_threshold=1))

    async def one_fetch() -> list[Msg]:
        if call == "no_wait":
            return await (await oc.fetch_no_wait(10)).collect()
        if call == "bytes":
            return await (await oc.fetch_bytes(1 << 20, expires=1)).collect()
        batch = await oc.fetch(10, expires=1)
        if call == "iterate":
            return [msg async for msg in batch]
        return await batch.collect()

    got: list[Msg] = []
    while msgs := await one_fetch():
        if not got:
            first = oc.name
            assert first is not None
            if gone == "deleted":
                await js.delete_consumer(stream, first)
            else:
                await wait_until(lambda: _no_consumers(js, stream), timeout=20)
        got += msgs
    assert [m.data for m in got] == [str(i).encode() for i in range(30)]
    assert oc.name != first


async def fetch_after_deleting_its_consumer(
    js: JetStreamContext, stream: str, oc: OrderedConsumer
) -> list[Msg]:
    """Delete ``oc``'s server-side consumer; what the next fetch returns.

    That fetch finds the consumer gone, recreates it and pulls again (it came back
    empty, and only the fetch after it recreated the consumer).
    """
    assert oc.name is not None
    first = oc.name
    await js.delete_consumer(stream, first)
    got = await (await oc.fetch_no_wait(5)).collect()
    assert oc.name != first
    return got


async def test_last_per_subject_reset_after_no_initial_values(
    js: JetStreamContext, stream: str
) -> None:
    """A "last per subject" consumer (a KV watch's) with no initial values, recreated
    before it handed anything out: it started "last per subject" again and delivered
    only the last revision of each key, the updates before it lost."""
    config = OrderedConsumerConfig(
        filter_subjects=["ord.>"], deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
    )
    oc = await js.ordered_consumer(stream, config)
    assert await (await oc.fetch_no_wait(5)).collect() == []  # nothing to begin with
    await js.publish("ord.a", b"1", timeout=10)
    await js.publish("ord.a", b"2", timeout=10)
    got = await fetch_after_deleting_its_consumer(js, stream, oc)
    assert [m.data for m in got] == [b"1", b"2"]


async def test_last_per_subject_reset_after_initial_values_removed_before_delivery(
    js: JetStreamContext, stream: str
) -> None:
    """Initial values removed before delivery (here a deleted message): fewer came
    than the consumer had pending when created, the last with nothing pending after
    it. A reset after that started "last per subject" again, losing updates."""
    for subject in ("ord.a", "ord.b", "ord.c"):
        await js.publish(subject, b"0", timeout=10)
    config = OrderedConsumerConfig(
        filter_subjects=["ord.>"], deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
    )
    oc = await js.ordered_consumer(stream, config)
    first = await (await oc.fetch_no_wait(1)).collect()
    assert [m.subject for m in first] == ["ord.a"]
    await (await js.stream(stream)).delete_msg(3)  # ord.c, not delivered yet
    rest = await (await oc.fetch_no_wait(5)).collect()
    assert [(m.subject, m.metadata.num_pending) for m in rest] == [("ord.b", 0)]
    await js.publish("ord.a", b"1", timeout=10)
    await js.publish("ord.a", b"2", timeout=10)
    got = await fetch_after_deleting_its_consumer(js, stream, oc)
    assert [(m.subject, m.data) for m in got] == [("ord.a", b"1"), ("ord.a", b"2")]


@pytest.mark.parametrize("handed_out", [1, 2], ids=["one-initial-value-left", "none-left"])
async def test_last_per_subject_reset_at_the_end_of_the_initial_values(
    js: JetStreamContext, stream: str, handed_out: int
) -> None:
    """A reset with exactly one initial value still to come (and with none): the
    first must start "last per subject" again, the second at cursor + 1.

    The initial values are ord.b (seq 1) and ord.a's last revision (seq 3); seq 2 is
    ord.a's old revision. Taking "one left" for "all done" restarted at cursor + 1
    and handed out that old revision before the last one (in a KV watch: a stale or
    deleted key's value among the initial values).
    """
    await js.publish("ord.b", b"b1", timeout=10)  # seq 1
    await js.publish("ord.a", b"a1", timeout=10)  # seq 2, an old revision
    await js.publish("ord.a", b"a-latest", timeout=10)  # seq 3
    config = OrderedConsumerConfig(
        filter_subjects=["ord.>"], deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
    )
    oc = await js.ordered_consumer(stream, config)
    initial = [("ord.b", b"b1"), ("ord.a", b"a-latest")]
    first = await (await oc.fetch_no_wait(handed_out)).collect()
    assert [(m.subject, m.data) for m in first] == initial[:handed_out]
    got = await fetch_after_deleting_its_consumer(js, stream, oc)
    assert [(m.subject, m.data) for m in got] == initial[handed_out:]
    # From here on, updates as usual (the reset did not start "last per subject"
    # over again after the initial values).
    await js.publish("ord.a", b"a-new", timeout=10)
    await js.publish("ord.b", b"b-new", timeout=10)
    later = await (await oc.fetch_no_wait(5)).collect()
    assert [(m.subject, m.data) for m in later] == [("ord.a", b"a-new"), ("ord.b", b"b-new")]


async def test_a_stream_created_again_is_not_read_on_from_the_cursor(
    js: JetStreamContext, stream: str
) -> None:
    """A stream deleted and created again between two of the ordered consumer's
    consumers was read on from ``cursor + 1`` of the new stream: its first messages
    were skipped, and nothing said so (a KV or object-store watch lost them)."""
    await fill(js, 5)
    oc = await js.ordered_consumer(stream)
    assert len(await (await oc.fetch_no_wait(5)).collect()) == 5
    await js.delete_stream(stream)
    await js.create_stream(
        StreamConfig(name=stream, subjects=["ord.>"], storage=StorageType.MEMORY)
    )
    await fill(js, 8)

    async def fetch_until_it_raises() -> None:
        for _ in range(3):  # the first finds the consumer gone and recreates it
            await (await oc.fetch_no_wait(5)).collect()

    with pytest.raises(StreamNotFoundError, match="deleted and created again") as info:
        await fetch_until_it_raises()
    assert info.value.stream == stream
    assert [name async for name in js.consumer_names(stream)] == []  # none left on it
    # A reset on the same stream is not taken for one (the check compares creation times).
    fresh = await js.ordered_consumer(stream)
    assert len(await (await fresh.fetch_no_wait(3)).collect()) == 3
    assert [m.data for m in await fetch_after_deleting_its_consumer(js, stream, fresh)] == [
        b"3",
        b"4",
        b"5",
        b"6",
        b"7",
    ]


async def test_a_handle_older_than_the_stream_is_no_recreation(
    js: JetStreamContext, stream: str
) -> None:
    """The stream was created again before the reader's first consumer (the handle saw
    the old one): resets read on, the reader never saw the old stream."""
    handle = await js.stream(stream)
    await js.delete_stream(stream)
    await js.create_stream(
        StreamConfig(name=stream, subjects=["ord.>"], storage=StorageType.MEMORY)
    )
    await fill(js, 6)
    oc = await handle.ordered_consumer()
    assert len(await (await oc.fetch_no_wait(3)).collect()) == 3
    got = await fetch_after_deleting_its_consumer(js, stream, oc)
    assert [m.data for m in got] == [b"3", b"4", b"5"]

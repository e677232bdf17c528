"""Pulsar's subscription operations in JetStream terms, against a real server.

pause / resume, reset, clear-backlog, skip_older_than (per-consumer TTL),
backlog, and publishing into a full stream with hold_when_full.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest

from aiojetstream import (
    AckPolicy,
    Consumer,
    ConsumerConfig,
    ConsumerNotFoundError,
    ConsumerResetError,
    DeliverPolicy,
    DiscardPolicy,
    FetchTimeoutError,
    InvalidOptionError,
    JetStreamContext,
    JetStreamTimeoutError,
    MaxMessagesExceededError,
    MessageSizeExceedsMaximumError,
    PersistMode,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamFullError,
)
from helpers import unique_name, wait_until

MEM = StorageType.MEMORY


async def stream_with(js: JetStreamContext, prefix: str, n: int, **config: object) -> str:
    """A stream of its own (``prefix`` plus a random suffix) with ``n`` messages; its name."""
    name = unique_name(prefix)
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"], storage=MEM, **config))
    for i in range(n):
        await js.publish(f"{name}.{'ab'[i % 2]}", b"%d" % (i + 1))
    return name


async def durable(js: JetStreamContext, stream: str, name: str, **config: object) -> Consumer:
    return await js.create_consumer(stream, ConsumerConfig(durable_name=name, **config))


async def old_and_new(
    js: JetStreamContext, prefix: str, old: int, new: int
) -> tuple[str, datetime]:
    """A stream with ``old`` messages, then (once the clock passed them by 400 ms) ``new``
    ones on ``<stream>.a``; its name and a cut-off halfway between the two.

    ``skip_older_than`` counts its cutoff from the server's clock, as it was when the
    call asked (the consumer info's ``ts`` less the look-up's time): within a round
    trip of the caller's clock here, so the cutoff keeps 200 ms from either side (a
    loaded machine's round trips).
    """
    stream = await stream_with(js, prefix, old)
    stored = (await js.stream(stream)).cached_info.state.last_ts
    cutoff = stored + timedelta(milliseconds=200)
    await wait_until(lambda: datetime.now(UTC) > stored + timedelta(milliseconds=400), timeout=2)
    for i in range(new):
        await js.publish(f"{stream}.a", b"new-%d" % i)
    return stream, cutoff


async def take(consumer: Consumer, n: int, *, ack: bool = True) -> list[int]:
    seqs = []
    batch = await consumer.fetch(n, expires=2)
    async for msg in batch:
        seqs.append(msg.metadata.sequence.stream)
        if ack:
            await msg.double_ack()
    return seqs


async def test_pause_blocks_pulls_and_resume_releases(js: JetStreamContext) -> None:
    stream = await stream_with(js, "PA", 1)
    consumer = await durable(js, stream, "c")
    until = datetime.now(UTC) + timedelta(minutes=1)
    paused = await consumer.pause(until)
    assert paused.paused is True
    assert paused.pause_until is not None
    assert abs(paused.pause_until - until) < timedelta(milliseconds=1)
    assert paused.pause_remaining is not None
    assert timedelta(seconds=50) < paused.pause_remaining <= timedelta(minutes=1)
    info = await consumer.info()
    assert info.paused is True
    assert info.pause_remaining is not None
    with pytest.raises(FetchTimeoutError):
        await consumer.next(expires=1)  # the message is there, the consumer is paused
    resumed = await js.resume_consumer(stream, "c")
    assert resumed.paused is False
    msg = await consumer.next(expires=5)
    assert msg.data == b"1"
    # A timedelta from now, through the context.
    again = await js.pause_consumer(stream, "c", timedelta(seconds=30))
    assert again.paused is True
    assert (await consumer.resume()).paused is False
    # And through the stream's handle (the context's consumer calls without the stream).
    handle = await js.stream(stream)
    by_stream = await handle.pause_consumer("c", "30s")
    assert by_stream.paused is True
    assert (await consumer.info()).paused is True
    assert (await handle.resume_consumer("c")).paused is False
    with pytest.raises(ConsumerNotFoundError):
        await handle.pause_consumer("nobody", timedelta(seconds=5))


async def test_pause_errors(js: JetStreamContext) -> None:
    stream = await stream_with(js, "PB", 0)
    with pytest.raises(ConsumerNotFoundError):
        await js.pause_consumer(stream, "nobody", timedelta(seconds=5))
    consumer = await durable(js, stream, "c")
    past = datetime.now(UTC) - timedelta(seconds=1)
    for bad in (
        timedelta(seconds=-1),
        0,
        datetime(2020, 1, 1),
        "soon",
        past,  # aware, but not in the future (was sent; the server answered paused=False)
        float("nan"),  # raised ValueError
        float("inf"),
        1e300,  # raised OverflowError
        timedelta.max,
        # Aware, far ahead, west of UTC: converting it to UTC raised OverflowError.
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-5))),
    ):
        with pytest.raises(InvalidOptionError):
            await consumer.pause(bad)
    for bad_age in (float("nan"), float("inf"), 1e300, timedelta.max):
        with pytest.raises(InvalidOptionError):
            await consumer.skip_older_than(bad_age)


async def test_reset_to_ack_floor_and_to_a_sequence(js: JetStreamContext) -> None:
    stream = await stream_with(js, "RS", 10)
    consumer = await durable(js, stream, "c")
    assert await take(consumer, 5) == [1, 2, 3, 4, 5]
    assert await take(consumer, 2, ack=False) == [6, 7]
    # None: back to the ack floor + 1, the unacked messages come again.
    assert await consumer.reset() == 6
    assert await take(consumer, 3) == [6, 7, 8]
    assert await consumer.reset(3) == 3
    assert consumer.cached_info.delivered.stream_seq == 2
    assert await take(consumer, 2) == [3, 4]
    # Last + 1 is allowed (nothing stored is delivered); beyond is refused client-side.
    assert await consumer.reset(11) == 11
    with pytest.raises(InvalidOptionError, match=f"beyond stream '{stream}'"):
        await consumer.reset(12)
    with pytest.raises(InvalidOptionError):
        await consumer.reset(0)
    await js.publish(f"{stream}.a", b"11")
    msg = await consumer.next(expires=5)
    assert msg.data == b"11"  # the refused reset skipped nothing


async def test_reset_of_a_missing_consumer_is_prompt(js: JetStreamContext) -> None:
    stream = await stream_with(js, "RM", 3)
    consumer = await durable(js, stream, "c")
    await js.delete_consumer(stream, "c")
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(ConsumerNotFoundError):
        await asyncio.wait_for(consumer.reset(2), 5)
    assert loop.time() - start < 1.0  # not the server's silence until a timeout


async def test_forbidden_resets_are_typed(js: JetStreamContext) -> None:
    stream = await stream_with(js, "RF", 10)
    newest = await durable(js, stream, "new", deliver_policy=DeliverPolicy.NEW)
    with pytest.raises(ConsumerResetError) as info:
        await newest.reset(2)
    assert info.value.err_code == 10204
    from_five = await durable(
        js, stream, "five", deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=5
    )
    with pytest.raises(ConsumerResetError, match="below start seq"):
        await from_five.reset(2)
    assert await from_five.reset(7) == 7


async def test_a_reset_that_would_lose_a_last_per_subject_value_is_refused(
    js: JetStreamContext,
) -> None:
    """nats-server keeps a last_per_subject consumer's initial values still to send
    across a reset with no sequence: a value delivered and not acknowledged never came
    again and the ack floor passed it (a1 a2 b3 b4 a5: values 4 and 5; 4 taken, reset,
    then only 5)."""
    stream = await stream_with(js, "RL", 0)
    for subject in "aabba":
        await js.publish(f"{stream}.{subject}", subject.encode())
    consumer = await durable(
        js,
        stream,
        "c",
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        filter_subject=f"{stream}.>",
        ack_wait=30,
    )
    first = await consumer.next(expires=2)
    assert first.metadata.sequence.stream == 4
    with pytest.raises(InvalidOptionError, match="1 unacknowledged"):
        await consumer.reset()
    # Nothing was sent: 4 is still pending, 5 comes next, and a nak brings 4 again.
    assert (await consumer.info()).num_ack_pending == 1
    assert await take(consumer, 1) == [5]
    await first.nak()
    assert await take(consumer, 1) == [4]
    # Nothing unacknowledged: the reset is sent (back to the floor + 1).
    assert await consumer.reset() == 6


async def test_clear_backlog_on_limits_and_interest_streams(js: JetStreamContext) -> None:
    stream = await stream_with(js, "CL", 6)
    consumer = await durable(js, stream, "c")
    assert await consumer.clear_backlog() == 7
    with pytest.raises(FetchTimeoutError):
        await consumer.next(expires=1)
    backlog = await consumer.backlog()
    assert (backlog.pending, backlog.ack_pending, backlog.oldest_unacked_sequence) == (0, 0, None)
    assert (await js.stream(stream)).cached_info.state.messages == 6  # limits: all kept

    interest = await stream_with(js, "CI", 0, retention=RetentionPolicy.INTEREST)
    a = await durable(js, interest, "a")
    b = await durable(js, interest, "b")
    for i in range(4):
        await js.publish(f"{interest}.a", b"%d" % i)
    assert await a.clear_backlog() == 5
    # b still needs every message: nothing goes.
    assert (await js.stream(interest)).cached_info.state.messages == 4
    assert await b.clear_backlog() == 5

    async def emptied() -> bool:
        return (await js.stream(interest)).cached_info.state.messages == 0

    await wait_until(emptied, timeout=5)


async def test_resets_on_a_work_queue_remove_what_they_skip(js: JetStreamContext) -> None:
    """A work queue removes what its consumer acknowledges, but the server removes
    nothing a reset skips (interest streams only): "cleared" messages stayed stored,
    a full ``discard: new`` stream stayed full, and the next consumer got them again."""
    stream = await stream_with(
        js, "CW", 4, retention=RetentionPolicy.WORKQUEUE, max_msgs=4, discard=DiscardPolicy.NEW
    )
    consumer = await durable(js, stream, "w")
    assert await consumer.clear_backlog() == 5
    assert (await js.stream(stream)).cached_info.state.messages == 0
    await js.publish(f"{stream}.a", b"new")  # room again
    await js.delete_consumer(stream, "w")
    fresh = await durable(js, stream, "w2")
    assert await take(fresh, 5) == [5]  # not the cleared ones again
    # A reset to a sequence and skip_older_than on a filtered consumer: its subjects only.
    other = await stream_with(js, "CWF", 6, retention=RetentionPolicy.WORKQUEUE, allow_direct=True)
    a = await durable(js, other, "a", filter_subject=f"{other}.a")
    assert await a.reset(4) == 4  # sequences 1 and 3 ('a') count as acknowledged
    held = await js.stream(other)
    assert held.cached_info.state.messages == 4  # 2, 4, 6 ('b') and 5 ('a')
    assert [m.seq async for m in held.get_batch(10, seq=1)] == [2, 4, 5, 6]


async def test_a_reset_on_a_work_queue_denying_purges_warns(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    """The purge after the reset would be refused (10075): the reset stands, and a
    warning says the skipped messages stay."""
    stream = await stream_with(js, "CWD", 3, retention=RetentionPolicy.WORKQUEUE, deny_purge=True)
    consumer = await durable(js, stream, "w")
    with caplog.at_level("WARNING", logger="aiojetstream"):
        assert await consumer.clear_backlog() == 4
    assert "denies purges" in caplog.text
    assert (await js.stream(stream)).cached_info.state.messages == 3


async def test_clear_backlog_drops_delivered_unacknowledged_messages(
    js: JetStreamContext,
) -> None:
    """Everything delivered is past the end, but three messages wait for an ack: the
    reset must still happen, or they are redelivered after ack_wait and an interest
    stream never removes them."""
    stream = await stream_with(js, "CU", 0, retention=RetentionPolicy.INTEREST)
    consumer = await durable(js, stream, "u", ack_wait=1)
    for i in range(3):
        await js.publish(f"{stream}.a", b"%d" % i)
    async with await consumer.fetch(3, expires=5) as fetched:
        got = await fetched.collect()
    assert [m.metadata.sequence.stream for m in got] == [1, 2, 3]  # never acknowledged
    before = await consumer.info()
    assert (before.num_pending, before.num_ack_pending) == (0, 3)
    assert await consumer.clear_backlog() == 4
    after = await consumer.info()
    assert (after.num_pending, after.num_ack_pending) == (0, 0)
    with pytest.raises(FetchTimeoutError):
        await consumer.next(expires=2)  # twice ack_wait: nothing is redelivered

    async def emptied() -> bool:
        return (await js.stream(stream)).cached_info.state.messages == 0

    await wait_until(emptied, timeout=5)
    # The consumer is live: the next message arrives, and only it.
    await js.publish(f"{stream}.a", b"next")
    msg = await consumer.next(expires=5)
    assert (msg.metadata.sequence.stream, msg.data) == (4, b"next")
    await msg.ack()


async def test_clear_backlog_of_a_consumer_starting_after_the_end_is_a_no_op(
    js: JetStreamContext,
) -> None:
    """A consumer starting beyond the stream's last + 1 has no backlog: clearing it
    tried a reset to last + 1, which the server refuses (10204, below start seq)."""
    stream = await stream_with(js, "CF", 4)
    later = await durable(
        js, stream, "later", deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=100
    )
    assert (await later.backlog()).pending == 0
    assert await later.clear_backlog() == 100  # where it continues: nothing moved
    assert await later.skip_older_than(1) == 100
    info = await later.info()
    assert (info.delivered.stream_seq, info.num_pending) == (99, 0)


async def test_skip_older_than_moves_only_this_consumer(js: JetStreamContext) -> None:
    stream, cutoff = await old_and_new(js, "TT", 4, 3)
    mover = await durable(js, stream, "mover")
    other = await durable(js, stream, "other")
    age = datetime.now(UTC) - cutoff
    assert await mover.skip_older_than(age) == 5
    assert [m.data for m in [await mover.next(expires=5)]] == [b"new-0"]
    other_info = await other.info()
    assert other_info.delivered.stream_seq == 0
    assert other_info.num_pending == 7
    # Never backwards: a larger age moves nothing; it continues after the delivered 5.
    assert await mover.skip_older_than(timedelta(days=1)) == 6
    assert (await mover.next(expires=5)).data == b"new-1"
    # Everything older: past the end.
    await wait_until(
        lambda: datetime.now(UTC) > other_info.ts if other_info.ts else True, timeout=2
    )
    assert await other.skip_older_than(timedelta(microseconds=1)) == 8
    with pytest.raises(InvalidOptionError):
        await other.skip_older_than(0)
    # A "from now on" consumer cannot be moved to a sequence: a clear error, nothing sent.
    newest = await durable(js, stream, "newest", deliver_policy=DeliverPolicy.NEW)
    with pytest.raises(InvalidOptionError, match="by_start_sequence"):
        await newest.skip_older_than(60)
    with pytest.raises(InvalidOptionError, match="deliver_policy all, by_start_sequence"):
        await newest.clear_backlog()


async def test_skip_older_than_never_delivers_acknowledged_messages_again(
    js: JetStreamContext,
) -> None:
    """Old messages 1-3, new 4-10; all delivered, 2-10 acknowledged, 1 not (acks out of
    order, as with parallel workers). The cutoff (4) is within what was delivered:
    nothing moves (a reset to 4 delivered the acknowledged 4-10 again). When the
    cutoff is past the delivery cursor, the old unacknowledged ones are skipped."""
    stream, cutoff = await old_and_new(js, "TA", 3, 7)
    consumer = await durable(js, stream, "c", ack_policy=AckPolicy.EXPLICIT)
    async with await consumer.fetch(10, expires=5) as batch:
        msgs = await batch.collect()
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 11))
    for msg in msgs[1:]:
        await msg.double_ack()
    age = datetime.now(UTC) - cutoff
    assert await consumer.skip_older_than(age) == 11  # where it continues: nothing moved
    info = await consumer.info()
    assert (info.delivered.stream_seq, info.num_ack_pending, info.num_pending) == (10, 1, 0)
    async with await consumer.fetch_no_wait(10) as batch:
        assert await batch.collect() == []  # none of the acknowledged 4-10 again
    # A cutoff past everything delivered: the unacknowledged old message 1 is skipped.
    # (The reset to 11 is also the floor + 1: nothing acknowledged comes again.)
    await wait_until(lambda: datetime.now(UTC) > (info.ts or datetime.now(UTC)), timeout=2)
    assert await consumer.skip_older_than(timedelta(microseconds=1)) == 11
    info = await consumer.info()
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (10, 0, 0)


async def test_skip_older_than_with_nothing_acknowledged_goes_back_to_the_cutoff(
    js: JetStreamContext,
) -> None:
    """Old 1-5, new 6-8, all delivered and none acknowledged: the old ones are
    skipped and the new ones delivered again (nothing acknowledged comes again)."""
    stream, cutoff = await old_and_new(js, "TN", 5, 3)
    consumer = await durable(js, stream, "c", ack_policy=AckPolicy.EXPLICIT)
    assert await take(consumer, 8, ack=False) == list(range(1, 9))
    assert await consumer.skip_older_than(datetime.now(UTC) - cutoff) == 6
    info = await consumer.info()
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (5, 0, 3)
    assert await take(consumer, 3) == [6, 7, 8]


async def test_backlog(js: JetStreamContext) -> None:
    stream = await stream_with(js, "BL", 6)
    consumer = await durable(
        js, stream, "c", filter_subject=f"{stream}.b", ack_policy=AckPolicy.EXPLICIT
    )
    empty = await durable(js, stream, "none", filter_subject=f"{stream}.none")
    backlog = await consumer.backlog()
    assert (backlog.pending, backlog.ack_pending, backlog.redelivered) == (3, 0, 0)
    assert backlog.oldest_unacked_sequence == 2  # the first BL.b message
    first = await (await js.stream(stream)).get_msg(2)
    assert backlog.oldest_unacked_time == first.time
    assert backlog.oldest_unacked_age is not None
    assert backlog.oldest_unacked_age >= timedelta(0)
    assert await take(consumer, 1, ack=False) == [2]
    backlog = await consumer.backlog()
    assert (backlog.pending, backlog.ack_pending, backlog.oldest_unacked_sequence) == (2, 1, 2)
    assert await consumer.reset() == 1  # the ack floor + 1; the next BL.b message is 2
    assert await take(consumer, 1) == [2]
    assert (await consumer.backlog()).oldest_unacked_sequence == 4
    nothing = await empty.backlog()
    assert (nothing.pending, nothing.oldest_unacked_sequence, nothing.oldest_unacked_age) == (
        0,
        None,
        None,
    )


async def test_backlog_after_a_message_ran_out_of_deliveries(js: JetStreamContext) -> None:
    """Message 1 reaches max_deliver unacknowledged, 2 is acknowledged: the server keeps
    the ack floor at 0, and backlog() named message 1 as the oldest to process for
    ever. With nothing waiting for an ack the oldest to process is the next undelivered."""
    stream = await stream_with(js, "BD", 3)
    consumer = await durable(
        js,
        stream,
        "c",
        ack_policy=AckPolicy.EXPLICIT,
        max_deliver=1,
        ack_wait=timedelta(seconds=1),
    )
    async with await consumer.fetch(2, expires=2) as batch:
        _unacked, second = await batch.collect()
    await second.double_ack()
    assert (await consumer.backlog()).oldest_unacked_sequence == 1  # still due

    async def given_up() -> bool:  # after ack_wait: 1 is not delivered again
        return (await consumer.info()).num_ack_pending == 0

    await wait_until(given_up, timeout=10)
    info = await consumer.info()
    assert (info.ack_floor.stream_seq, info.delivered.stream_seq) == (0, 2)  # the server's
    backlog = await consumer.backlog()
    assert (backlog.pending, backlog.ack_pending, backlog.oldest_unacked_sequence) == (1, 0, 3)
    assert (await consumer.next(expires=5)).metadata.sequence.stream == 3


async def last_per_subject(js: JetStreamContext, *, allow_direct: bool) -> tuple[str, Consumer]:
    """A stream with .a .b .c .a .c (1-5), a last_per_subject consumer on it (its initial
    values 2, 4, 5), then .b (6) stored after the consumer started."""
    stream = unique_name("BLPS")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=MEM, allow_direct=allow_direct)
    )
    for subject in "abcac":
        await js.publish(f"{stream}.{subject}", b"")
    consumer = await durable(
        js,
        stream,
        "c",
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        filter_subject=f"{stream}.*",
        ack_policy=AckPolicy.EXPLICIT,
    )
    await js.publish(f"{stream}.b", b"")
    return stream, consumer


async def test_backlog_of_a_last_per_subject_consumer(js: JetStreamContext) -> None:
    """A last_per_subject consumer first delivers the last message of each subject as it
    started (2, 4, 5), skipping the older ones, then all after (6, 7). backlog() named a
    skipped message (3, an older .c) as the oldest to process once 2 was acknowledged."""
    stream, consumer = await last_per_subject(js, allow_direct=True)
    assert (await consumer.backlog()).oldest_unacked_sequence == 2
    assert await take(consumer, 1) == [2]
    backlog = await consumer.backlog()
    assert (backlog.pending, backlog.ack_pending, backlog.oldest_unacked_sequence) == (3, 0, 4)
    assert backlog.oldest_unacked_time == (await (await js.stream(stream)).get_msg(4)).time
    fourth = await consumer.next(expires=2)
    assert fourth.metadata.sequence.stream == 4
    backlog = await consumer.backlog()  # waits for an ack: from the ack floor (3, skipped)
    assert (backlog.ack_pending, backlog.oldest_unacked_sequence) == (1, 4)
    await fourth.double_ack()
    assert await take(consumer, 1) == [5]
    await js.publish(f"{stream}.a", b"")  # 7
    await js.publish(f"{stream}.a", b"")  # 8: all after the start are delivered, 7 too
    assert (await consumer.backlog()).oldest_unacked_sequence == 6
    assert await take(consumer, 1) == [6]
    assert (await consumer.backlog()).oldest_unacked_sequence == 7
    assert await take(consumer, 2) == [7, 8]
    assert (await consumer.backlog()).oldest_unacked_sequence is None


async def test_backlog_of_a_last_per_subject_consumer_without_direct_gets(
    js: JetStreamContext,
) -> None:
    """Which message such a consumer skips is told by a batch direct get: on a stream
    without allow_direct the oldest is unknown (None) while a skipped message comes
    first, rather than the skipped message."""
    _stream, consumer = await last_per_subject(js, allow_direct=False)
    assert (await consumer.backlog()).oldest_unacked_sequence == 2  # no skipped one first
    assert await take(consumer, 1) == [2]
    backlog = await consumer.backlog()
    assert (backlog.pending, backlog.oldest_unacked_sequence, backlog.oldest_unacked_age) == (
        3,
        None,
        None,
    )
    assert await take(consumer, 1) == [4]
    assert (await consumer.backlog()).oldest_unacked_sequence == 5  # the last .c: no skip


async def test_full_stream_errors_and_hold_when_full(js: JetStreamContext) -> None:
    stream = await stream_with(
        js,
        "FULL",
        2,
        retention=RetentionPolicy.WORKQUEUE,
        max_msgs=2,
        discard=DiscardPolicy.NEW,
    )
    with pytest.raises(MaxMessagesExceededError) as info:
        await js.publish(f"{stream}.a", b"3")
    assert isinstance(info.value, StreamFullError)
    assert info.value.err_code == 10077

    # Held: the publish completes once a consumer acks one message.
    consumer = await durable(js, stream, "worker")
    sent = js.nc.stats["out_msgs"]
    held = asyncio.ensure_future(js.publish(f"{stream}.a", b"held", hold_when_full=10))
    await wait_until(lambda: js.nc.stats["out_msgs"] > sent, timeout=5)  # first attempt out
    assert not held.done()
    assert await take(consumer, 1) == [1]
    ack = await asyncio.wait_for(held, 10)
    assert ack.seq == 3
    assert not ack.duplicate
    assert (await js.stream(stream)).cached_info.state.messages == 2

    # Held too long: the StreamFullError, after the time, at most 20 attempts a second.
    before = js.nc.stats["out_msgs"]
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(MaxMessagesExceededError):
        await asyncio.wait_for(js.publish(f"{stream}.b", b"x", hold_when_full=1.0), 10)
    took = loop.time() - start
    attempts = js.nc.stats["out_msgs"] - before
    assert 0.9 <= took < 3
    assert 2 <= attempts <= 21

    # publish_async: the future completes when there is room.
    fut = await js.publish_async(f"{stream}.a", b"async", hold_when_full=10)
    assert not fut.done()
    assert await take(consumer, 1) == [2]
    assert (await asyncio.wait_for(fut, 10)).seq == 4


async def test_hold_when_full_keeps_a_msg_id_given_as_a_header(js: JetStreamContext) -> None:
    """A ``Nats-Msg-Id`` header was replaced by a generated id when the publish was
    held: every call got its own id, and the stream stored each copy."""
    stream = await stream_with(js, "HID", 0, duplicate_window=timedelta(minutes=1))
    headers = {"Nats-Msg-Id": "order-1"}
    first = await js.publish(f"{stream}.a", b"x", headers=headers, hold_when_full=5)
    again = await js.publish(f"{stream}.a", b"x", headers=headers, hold_when_full=5)
    later = await (await js.publish_async(f"{stream}.a", b"x", headers=headers, hold_when_full=5))
    assert (first.duplicate, again.duplicate, later.duplicate) == (False, True, True)
    held = await js.stream(stream)
    assert held.cached_info.state.messages == 1
    assert (await held.get_msg(1)).headers == headers


async def test_hold_when_full_validation(js: JetStreamContext) -> None:
    stream = await stream_with(js, "HV", 0)
    before = js.nc.stats["out_msgs"]
    for bad in (0, -1, float("nan"), "1x", "-1s"):
        with pytest.raises(InvalidOptionError):
            await js.publish(f"{stream}.a", b"x", hold_when_full=bad)
    assert js.nc.stats["out_msgs"] == before


async def test_held_publish_async_keeps_window_order_and_rate(nats_url: str) -> None:
    import aiojetstream

    js = await aiojetstream.connect(nats_url, publish_async_max_pending=10)
    try:
        stream = await stream_with(
            js,
            "HA",
            2,
            retention=RetentionPolicy.WORKQUEUE,
            max_msgs=2,
            discard=DiscardPolicy.NEW,
        )
        futures = [
            await js.publish_async(f"{stream}.a", b"%d" % i, hold_when_full=30) for i in range(10)
        ]
        assert js.publish_async_pending == 10
        # The window is full of held publishes: the producer is held too.
        eleventh = asyncio.ensure_future(js.publish_async(f"{stream}.a", b"10", hold_when_full=30))
        done, _ = await asyncio.wait([eleventh], timeout=1.0)
        assert not done
        before = js.nc.stats["out_msgs"]
        await asyncio.wait(futures, timeout=1.0)
        retries = js.nc.stats["out_msgs"] - before
        assert retries <= 21  # one shared backoff: <= 20 failed attempts a second
        assert not any(f.done() for f in futures)
        # A consumer works the queue off; every held message goes in, in order, once.
        worker = await durable(js, stream, "w")
        stored: list[bytes] = []
        while len(stored) < 13:
            batch = await worker.fetch(5, expires=2)
            async for msg in batch:
                stored.append(msg.data)
                await msg.double_ack()
        futures.append(await asyncio.wait_for(eleventh, 10))
        acks = [await asyncio.wait_for(f, 10) for f in futures]
        assert stored == [b"1", b"2"] + [b"%d" % i for i in range(11)]
        assert [a.seq for a in acks] == list(range(3, 14))
        assert not any(a.duplicate for a in acks)
        assert js.publish_async_pending == 0
    finally:
        await js.close()


async def held_in_a_full_stream(
    js: JetStreamContext, prefix: str, size: int, hold: float, payload: bytes = b"A"
) -> tuple[str, asyncio.Future[PubAck]]:
    """A full stream of ``size`` messages (discard new) and a held ``publish_async`` of
    ``payload`` to it, returned once its first attempt was refused ("full")."""
    stream = await stream_with(js, prefix, size, max_msgs=size, discard=DiscardPolicy.NEW)
    received = js.nc.stats["in_msgs"]
    held = await js.publish_async(f"{stream}.a", payload, hold_when_full=hold)
    await wait_until(lambda: js.nc.stats["in_msgs"] > received, timeout=5)
    return stream, held


async def test_held_publish_async_after_a_held_one_failed_otherwise(nats_url: str) -> None:
    """A held message's resend refused for another reason (not "full") sends the next one.

    A is held (the stream is full), B waits behind it; A's resends then fail
    with "message too large" (the stream's max_msg_size shrank below A, not B). B must still go
    out and be stored once there is room, not wait for a resend that nobody
    schedules.
    """
    import aiojetstream

    js = await aiojetstream.connect(nats_url, publish_async_timeout=1.0)
    try:
        stream, a = await held_in_a_full_stream(js, "HERR", 3, 10, b"A" * 100)
        b = await js.publish_async(f"{stream}.b", b"B", hold_when_full=10)
        info = await (await js.stream(stream)).info()
        await js.update_stream(info.config.model_copy(update={"max_msg_size": 100}))
        with pytest.raises(MessageSizeExceedsMaximumError):
            await asyncio.wait_for(a, 10)
        await (await js.stream(stream)).purge()
        ack = await asyncio.wait_for(b, 5)  # was: never sent, a timeout after 11 s
        assert not ack.duplicate
        assert (await (await js.stream(stream)).info()).state.messages == 1
    finally:
        await js.close()


async def test_held_publish_async_after_a_resend_without_reply() -> None:
    """A held resend left without a reply (a hung server) is sent again after its ack timeout.

    Neither it nor the held messages behind it wait for its whole hold time.
    """
    import aiojetstream
    from aiojetstream.testing import NatsServer

    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url, publish_async_timeout=0.5)
        try:
            stream, a = await held_in_a_full_stream(js, "HLOST", 2, 30)
            server.freeze()
            b = await js.publish_async(f"{stream}.b", b"B", hold_when_full=30)  # behind A
            sent = js.nc.stats["out_msgs"]
            # A's next resend meets the hung server; 0.5 s later A is sent again (was:
            # nothing more until A's hold ran out, 30.5 s).
            await wait_until(lambda: js.nc.stats["out_msgs"] >= sent + 2, timeout=5)
            server.thaw()
            await (await js.stream(stream)).purge()
            acks = await asyncio.wait_for(asyncio.gather(a, b), 10)
            assert [ack.seq for ack in acks] == [3, 4]  # in publish order, once each
            assert (await (await js.stream(stream)).info()).state.messages == 2
        finally:
            if server.frozen:
                server.thaw()
            await js.close()


async def test_held_publish_async_made_while_one_is_resent_is_stored_after_it() -> None:
    """A held publish made while an earlier held one's resend is out waits behind it.

    Only the resend is in flight (the held queue is empty meanwhile): B went out at
    once, was stored (its subject had room) and came before A, which was published
    first (held publishes are stored in publish order).
    """
    import aiojetstream
    from aiojetstream.testing import NatsServer

    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url, publish_async_timeout=10)
        try:
            # One message per subject, a full subject refuses: .a is full, .b has room.
            stream = await stream_with(
                js,
                "HOVR",
                1,
                max_msgs_per_subject=1,
                discard=DiscardPolicy.NEW,
                discard_new_per_subject=True,
            )
            received = js.nc.stats["in_msgs"]
            a = await js.publish_async(f"{stream}.a", b"A", hold_when_full=30)
            await wait_until(lambda: js.nc.stats["in_msgs"] > received, timeout=5)  # refused
            # A hung server keeps A's next resend unanswered (its ack timeout is 10 s).
            server.freeze()
            sent = js.nc.stats["out_msgs"]
            await wait_until(lambda: js.nc.stats["out_msgs"] > sent, timeout=5)  # A resent
            b = await js.publish_async(f"{stream}.b", b"B", hold_when_full=30)
            assert js.nc.stats["out_msgs"] == sent + 1  # B waits behind A's resend
            server.thaw()
            await (await js.stream(stream)).delete_msg(1)  # room for A
            acks = await asyncio.wait_for(asyncio.gather(a, b), 10)
            assert acks[0].seq < acks[1].seq  # A stored first, then B
            stored = await js.stream(stream)
            assert [(await stored.get_msg(ack.seq)).data for ack in acks] == [b"A", b"B"]
        finally:
            if server.frozen:
                server.thaw()
            await js.close()


async def test_held_publish_async_out_of_time_after_an_unanswered_attempt() -> None:
    """A held message whose last attempt got no reply fails with a timeout, not "full"."""
    import aiojetstream
    from aiojetstream.testing import NatsServer

    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url, publish_async_timeout=0.5)
        try:
            _, a = await held_in_a_full_stream(js, "HOUT", 1, 1.5)
            server.freeze()  # every later attempt of A goes unanswered
            with pytest.raises(JetStreamTimeoutError):  # its outcome is unknown
                await asyncio.wait_for(a, 10)
        finally:
            if server.frozen:
                server.thaw()
            await js.close()


async def test_held_publish_async_cancelled_is_not_sent_again(nats_url: str) -> None:
    """A held message its caller cancelled is never sent again and holds nothing up.

    A is held (the stream is full), B is held behind it; A is cancelled. Once
    there is room, B is stored and A is not (it was resent, and stored, until
    its hold ran out, with B waiting behind it).
    """
    import aiojetstream

    js = await aiojetstream.connect(nats_url, publish_async_timeout=1.0)
    try:
        stream, a = await held_in_a_full_stream(js, "HCAN", 2, 10)
        b = await js.publish_async(f"{stream}.b", b"B", hold_when_full=10)
        a.cancel()
        await (await js.stream(stream)).purge()
        ack = await asyncio.wait_for(b, 5)
        assert ack.seq == 3
        await js.publish_async_complete(timeout=5)
        info = await (await js.stream(stream)).info()
        assert (info.state.messages, info.state.last_seq) == (1, 3)  # B only, A never
    finally:
        await js.close()


async def test_held_publish_async_queued_and_out_of_time_is_stream_full(nats_url: str) -> None:
    """A held message queued behind another and out of time before its turn fails with the
    stream's "full" error (it was never sent), not with a timeout (which says "maybe stored")."""
    import aiojetstream

    js = await aiojetstream.connect(nats_url, publish_async_timeout=0.5)
    try:
        stream, a = await held_in_a_full_stream(js, "HQUE", 1, 10)
        b = await js.publish_async(f"{stream}.b", b"B", hold_when_full=0.5)  # behind A
        with pytest.raises(MaxMessagesExceededError):
            await asyncio.wait_for(b, 5)
        a.cancel()
    finally:
        await js.close()


async def test_old_servers_are_refused_before_sending(js: JetStreamContext) -> None:
    from aiojetstream import FeatureNotSupportedError

    stream = await stream_with(js, "OLDS", 3)
    consumer = await durable(js, stream, "c")
    before = js.nc.stats["out_msgs"]
    js._api.level = 3  # what a 2.12 server reports: no CONSUMER.RESET
    for call in (consumer.reset(), consumer.clear_backlog(), consumer.skip_older_than(5)):
        with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.14") as info:
            await call
        assert (info.value.required_level, info.value.server_level) == (4, 3)
    js._api.level = 0  # 2.10: no pause either
    with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.11"):
        await consumer.pause(timedelta(seconds=5))
    # Nor a consumer created paused: 2.10 would ignore pause_until and deliver at once.
    paused = ConsumerConfig(durable_name="p", pause_until=datetime.now(UTC) + timedelta(hours=1))
    for create in (js.create_consumer, js.create_or_update_consumer, js.update_consumer):
        with pytest.raises(FeatureNotSupportedError, match=r"pause_until.*2\.11") as info:
            await create(stream, paused)
        assert (info.value.required_level, info.value.server_level) == (1, 0)
    # persist_mode "async" (2.12): an older server would ignore it.
    js._api.level = 1
    asynchronous = StreamConfig(
        name=unique_name("PM"), subjects=["pm.>"], persist_mode=PersistMode.ASYNC
    )
    for make in (js.create_stream, js.create_or_update_stream, js.update_stream):
        with pytest.raises(FeatureNotSupportedError, match=r"persist_mode.*2\.12"):
            await make(asynchronous)
    assert js.nc.stats["out_msgs"] == before


@pytest.mark.parametrize("call", ["pause", "reset", "clear_backlog", "skip_older_than", "backlog"])
async def test_admin_calls_end_by_their_timeout_when_the_server_hangs(call: str) -> None:
    """A hung server (SIGSTOP), a handle on a connection that has not asked the API
    level yet: ``timeout=1`` bounds the whole call (the level look-up ignored it and
    took the context's 5 s; the requests after it each had the whole timeout)."""
    from aiojetstream import connect
    from aiojetstream.testing import NatsServer

    async with NatsServer() as server:
        setup = await connect(server.url)
        stream = unique_name("HANG")
        await setup.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=MEM))
        await setup.create_consumer(stream, ConsumerConfig(durable_name="c"))
        js = await connect(server.url, ping_interval=600)  # no stale-connection detection
        try:
            consumer = await js.consumer(stream, "c")
            calls: dict[str, Callable[[], Awaitable[object]]] = {
                "pause": lambda: consumer.pause(10, timeout=1),
                "reset": lambda: consumer.reset(1, timeout=1),
                "clear_backlog": lambda: consumer.clear_backlog(timeout=1),
                "skip_older_than": lambda: consumer.skip_older_than(60, timeout=1),
                "backlog": lambda: consumer.backlog(timeout=1),
            }
            loop = asyncio.get_running_loop()
            server.freeze()
            try:
                start = loop.time()
                with pytest.raises(JetStreamTimeoutError):
                    await calls[call]()
                took = loop.time() - start
            finally:
                server.thaw()
            # 1 s, plus the short follow-up look-up of a reset, plus a loaded machine's margin.
            assert took < 3.5, f"{call}(timeout=1) ended after {took:.2f} s"
        finally:
            await js.close()
            await setup.close()

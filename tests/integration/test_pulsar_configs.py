"""aiojetstream.pulsar configs against a real nats-server: accepted as sent, and they behave
as ``PULSAR.md`` says (interest = Pulsar's default, the archive pair, the backlog quota
policies).

Server state that has no event to wait on (a sourced archive filling up, an ack
removing a message, ``max_age`` expiring) is awaited with ``wait_until``; every
other await is a request with the context's timeout or is wrapped in
``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aiojetstream import (
    AckPolicy,
    Consumer,
    ConsumerConfig,
    DiscardPolicy,
    JetStreamContext,
    MaxBytesExceededError,
    MaxMessagesExceededError,
    MaxMessagesPerSubjectExceededError,
    Msg,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamFullError,
)
from aiojetstream._models import to_wire
from aiojetstream.pulsar import (
    BacklogQuotaPolicy,
    apply_backlog_quota,
    apply_retention,
    archive_pair,
)
from helpers import unique_name, wait_until

MEM = StorageType.MEMORY
STEP = 10.0  # bound of any single await that is not already a bounded request
FETCH_EXPIRES = 2.0
EVICT = BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION


def base(name: str, subject: str) -> StreamConfig:
    return StreamConfig(name=name, subjects=[subject], storage=MEM)


def interest(name: str, subject: str) -> StreamConfig:
    """Pulsar's default policy (retention 0/0): keep until every consumer acks."""
    return apply_retention(base(name, subject), time_minutes=0, size_mb=0)


async def messages(js: JetStreamContext, stream: str) -> int:
    return (await (await js.stream(stream)).info()).state.messages


async def durable(js: JetStreamContext, stream: str, name: str) -> Consumer:
    return await js.create_consumer(
        stream, ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT)
    )


async def fetch(consumer: Consumer, count: int) -> list[Msg]:
    """Exactly ``count`` messages (fewer fails the test), bounded by ``expires`` and STEP."""

    async def take() -> list[Msg]:
        batch = await consumer.fetch(count, expires=FETCH_EXPIRES)
        async with batch:
            return [msg async for msg in batch]

    got = await asyncio.wait_for(take(), STEP)
    assert len(got) == count, f"expected {count} messages, got {len(got)}"
    return got


async def create_pair(js: JetStreamContext, name: str, subjects: list[str], consumers: int) -> None:
    """Create an archive pair in memory; return once the archive's source is set up.

    The server makes the source's consumer on the interest stream in the
    background after the create call returns; a message published before that
    and acked by every other consumer is never archived (see ``archive_pair``).
    """
    origin, archive = (
        cfg.model_copy(update={"storage": MEM})
        for cfg in archive_pair(name, subjects, time_minutes=60, size_mb=16)
    )
    await js.create_stream(origin)
    for i in range(consumers):
        await durable(js, name, f"app{i}")
    await js.create_stream(archive)

    async def sourcing() -> bool:
        info = await (await js.stream(name)).info()
        return info.state.consumer_count == consumers + 1

    await wait_until(sourcing, timeout=STEP, message="the archive's source consumer exists")


async def ack_all(msgs: list[Msg]) -> None:
    for msg in msgs:
        await msg.double_ack(timeout=STEP)  # the server confirms the ack


# --------------------------------------------------------------------------- accepted as sent


def assert_sent_fields_read_back(sent: StreamConfig, got: StreamConfig) -> None:
    """Every field sent comes back from the server with the same wire value."""
    wire, back = to_wire(sent), to_wire(got)
    assert {key: back.get(key) for key in wire} == wire
    assert (got.retention, got.max_age, got.max_bytes, got.discard) == (
        sent.retention,
        sent.max_age,
        sent.max_bytes,
        sent.discard,
    )


def produced_configs() -> list[StreamConfig]:
    """One config per retention row and per quota shape (memory storage, own names)."""
    configs = []
    for i, (time_minutes, size_mb) in enumerate([(-1, -1), (-1, 1), (1, -1), (60, 5), (0, 0)]):
        configs.append(
            apply_retention(
                base(f"PUL_ROW{i}", f"pul.row{i}.>"), time_minutes=time_minutes, size_mb=size_mb
            )
        )
    quotas: list[tuple[int | None, float | timedelta | None, BacklogQuotaPolicy]] = [
        (4096, None, BacklogQuotaPolicy.PRODUCER_EXCEPTION),
        (4096, None, BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD),
        (4096, None, EVICT),
        (None, 0.1, EVICT),
        (1 << 20, timedelta(hours=1), EVICT),
    ]
    for i, (limit_bytes, limit_time, policy) in enumerate(quotas):
        configs.append(
            apply_backlog_quota(
                interest(f"PUL_Q{i}", f"pul.q{i}.>"),
                limit_bytes=limit_bytes,
                limit_time=limit_time,
                policy=policy,
            )
        )
    return configs


@pytest.mark.parametrize("config", produced_configs(), ids=lambda c: c.name)
async def test_produced_configs_are_accepted_unchanged(
    js: JetStreamContext, config: StreamConfig
) -> None:
    # Its own name on every run (the parameter ids keep the readable one).
    config = config.model_copy(update={"name": unique_name(config.name)})
    # pedantic: the server refuses instead of adjusting anything it would change.
    stream = await js.create_stream(config, pedantic=True)
    assert_sent_fields_read_back(config, stream.cached_info.config)
    # Creating it again with the same config is idempotent: nothing differs.
    await js.create_stream(config)


async def test_archive_pair_is_accepted_unchanged(js: JetStreamContext) -> None:
    name = unique_name("PUL_ACC")
    pair = archive_pair(name, ["pul.acc.>"], time_minutes=90, size_mb=64)
    for config in pair:
        got = (await js.create_stream(config, pedantic=True)).cached_info.config
        assert_sent_fields_read_back(config, got)
        assert got.sources == config.sources
        assert got.subjects == config.subjects
    assert pair[1].name == f"{name}_ARCHIVE"


async def test_server_config_can_be_updated_to_each_policy(js: JetStreamContext) -> None:
    """A config read back from the server (explicit 2 min duplicate window) updates cleanly."""
    name = unique_name("PUL_UPD")
    stream = await js.create_stream(base(name, "pul.upd.>"))
    current = stream.cached_info.config
    assert current.duplicate_window == timedelta(minutes=2)

    by_time = apply_retention(current, time_minutes=1, size_mb=-1)
    got = (await js.update_stream(by_time)).cached_info.config
    assert (got.max_age, got.duplicate_window) == (timedelta(minutes=1), timedelta(minutes=1))

    default = apply_retention(got, time_minutes=0, size_mb=0)
    got = (await js.update_stream(default)).cached_info.config
    assert (got.retention, got.max_age, got.max_bytes) == (
        RetentionPolicy.INTEREST,
        timedelta(0),
        -1,
    )

    aged = apply_backlog_quota(got, limit_time=30, policy=EVICT)
    got = (await js.update_stream(aged)).cached_info.config
    assert (got.max_age, got.duplicate_window, got.discard) == (
        timedelta(seconds=30),
        timedelta(seconds=30),
        DiscardPolicy.OLD,
    )


# --------------------------------------------------------------------------- (a) interest


async def test_default_policy_keeps_nothing_without_consumers(js: JetStreamContext) -> None:
    name = unique_name("PUL_INT_NONE")
    await js.create_stream(interest(name, "pul.intnone"))
    ack = await js.publish("pul.intnone", b"nobody listens")
    assert (ack.stream, ack.seq) == (name, 1)  # acked with a sequence...
    info = await (await js.stream(name)).info()
    assert info.state.messages == 0  # ...but not stored: no subscription, no backlog
    assert info.state.last_seq == 1


async def test_default_policy_removes_a_message_once_every_consumer_acked(
    js: JetStreamContext,
) -> None:
    name = unique_name("PUL_INT_ACK")
    await js.create_stream(interest(name, "pul.intack"))
    first = await durable(js, name, "first")
    second = await durable(js, name, "second")
    await js.publish("pul.intack", b"backlog")
    assert await messages(js, name) == 1

    await ack_all(await fetch(first, 1))
    assert await messages(js, name) == 1  # still in the second one's backlog
    await ack_all(await fetch(second, 1))

    async def gone() -> bool:
        return await messages(js, name) == 0

    await wait_until(gone, timeout=STEP, message="acked message still stored")


# --------------------------------------------------------------------------- (b) archive pair


async def test_archive_keeps_what_the_interest_stream_lets_go(js: JetStreamContext) -> None:
    name = unique_name("PUL_ORD")
    await create_pair(js, name, ["pul.ord.>"], consumers=1)
    app = await js.consumer(name, "app0")
    payloads = [f"order-{i}".encode() for i in range(5)]
    for i, payload in enumerate(payloads):
        await js.publish(f"pul.ord.{i}", payload)

    got = await fetch(app, len(payloads))
    assert [m.data for m in got] == payloads
    await ack_all(got)

    async def settled() -> bool:
        return (await messages(js, name), await messages(js, f"{name}_ARCHIVE")) == (0, 5)

    await wait_until(settled, timeout=STEP, message="interest stream empty, archive full")
    stored = await js.stream(f"{name}_ARCHIVE")
    kept = [await stored.get_msg(seq) for seq in range(1, 6)]
    assert [m.data for m in kept] == payloads
    assert [m.subject for m in kept] == [f"pul.ord.{i}" for i in range(5)]


async def test_archive_keeps_what_no_consumer_has_yet(js: JetStreamContext) -> None:
    """The archive has every message; the interest stream only the unacked backlog."""
    name = unique_name("PUL_BACK")
    await create_pair(js, name, ["pul.back"], consumers=1)
    app = await js.consumer(name, "app0")
    for i in range(4):
        await js.publish("pul.back", str(i).encode())
    await ack_all(await fetch(app, 1))

    async def settled() -> bool:
        return (await messages(js, name), await messages(js, f"{name}_ARCHIVE")) == (3, 4)

    await wait_until(settled, timeout=STEP, message="backlog of 3 kept, archive of 4")
    assert (await app.info()).num_pending == 3


async def test_archive_keeps_messages_published_with_no_subscription(
    js: JetStreamContext,
) -> None:
    name = unique_name("PUL_NOSUB")
    await create_pair(js, name, ["pul.nosub"], consumers=0)
    for i in range(3):
        await js.publish("pul.nosub", str(i).encode())

    async def settled() -> bool:
        counts = (await messages(js, name), await messages(js, f"{name}_ARCHIVE"))
        return counts == (0, 3)

    await wait_until(settled, timeout=STEP, message="only the archive retains the messages")


# --------------------------------------------------------------------------- (c) producer policies


async def test_producer_exception_refuses_when_the_backlog_is_full(js: JetStreamContext) -> None:
    name = unique_name("PUL_FULL_B")
    config = apply_backlog_quota(
        interest(name, "pul.fullb"),
        limit_bytes=400,
        policy=BacklogQuotaPolicy.PRODUCER_EXCEPTION,
    )
    await js.create_stream(config)
    reader = await durable(js, name, "reader")  # makes the messages a backlog
    stored = 0
    refused: StreamFullError | None = None
    for _ in range(20):
        try:
            await js.publish("pul.fullb", b"x" * 100)
        except StreamFullError as exc:
            refused = exc
            break
        stored += 1
    assert isinstance(refused, MaxBytesExceededError)
    assert 1 <= stored < 4  # ~100 B payload + subject + overhead each, 400 B quota
    assert (refused.code, refused.err_code) == (503, 10077)
    assert await messages(js, name) == stored

    # The connection stays up (Pulsar disconnects) and an ack makes room again.
    await ack_all(await fetch(reader, 1))
    ack = await js.publish("pul.fullb", b"x" * 100)
    assert ack.seq == stored + 1


async def test_producer_exception_on_a_message_count(js: JetStreamContext) -> None:
    name = unique_name("PUL_FULL_M")
    config = apply_backlog_quota(
        interest(name, "pul.fullm"),
        limit_bytes=1 << 20,
        policy=BacklogQuotaPolicy.PRODUCER_EXCEPTION,
    ).model_copy(update={"max_msgs": 2})
    await js.create_stream(config)
    await durable(js, name, "reader")
    await js.publish("pul.fullm", b"1")
    await js.publish("pul.fullm", b"2")
    with pytest.raises(MaxMessagesExceededError) as full:
        await js.publish("pul.fullm", b"3")
    assert full.value.err_code == 10077
    assert await messages(js, name) == 2


async def test_producer_exception_per_subject(js: JetStreamContext) -> None:
    name = unique_name("PUL_FULL_S")
    config = apply_backlog_quota(
        interest(name, "pul.fulls.*"),
        limit_bytes=1 << 20,
        policy=BacklogQuotaPolicy.PRODUCER_EXCEPTION,
    ).model_copy(update={"max_msgs_per_subject": 1, "discard_new_per_subject": True})
    await js.create_stream(config)
    await durable(js, name, "reader")
    await js.publish("pul.fulls.a", b"a1")
    with pytest.raises(MaxMessagesPerSubjectExceededError) as full:
        await js.publish("pul.fulls.a", b"a2")
    assert full.value.err_code == 10077
    ack = await js.publish("pul.fulls.b", b"b1")  # another subject still has room
    assert ack.seq == 2


async def test_producer_request_hold_waits_for_room(js: JetStreamContext) -> None:
    name = unique_name("PUL_HOLD")
    config = apply_backlog_quota(
        interest(name, "pul.hold"),
        limit_bytes=1 << 20,
        policy=BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD,
    ).model_copy(update={"max_msgs": 1})
    await js.create_stream(config)
    reader = await durable(js, name, "reader")
    await js.publish("pul.hold", b"first")

    # Nothing acks: the hold gives up with the server's refusal.
    with pytest.raises(MaxMessagesExceededError):
        await asyncio.wait_for(js.publish("pul.hold", b"given up", hold_when_full=0.3), STEP)

    # The held publish goes through once the consumer acks, and is stored once.
    held = asyncio.create_task(js.publish("pul.hold", b"held", hold_when_full=STEP))
    try:
        await ack_all(await fetch(reader, 1))
        ack = await asyncio.wait_for(held, STEP)
    finally:
        held.cancel()
    assert ack.seq == 2
    assert [m.data for m in await fetch(reader, 1)] == [b"held"]
    assert await messages(js, name) == 1


# --------------------------------------------------------------------------- (d) eviction


async def test_backlog_eviction_drops_the_oldest_for_every_consumer(js: JetStreamContext) -> None:
    name = unique_name("PUL_EVICT")
    config = apply_backlog_quota(interest(name, "pul.evict"), limit_bytes=600, policy=EVICT)
    await js.create_stream(config)
    slow = await durable(js, name, "slow")
    idle = await durable(js, name, "idle")

    await js.publish("pul.evict", b"a" * 100)
    await js.publish("pul.evict", b"b" * 100)
    in_flight = await fetch(slow, 2)  # delivered, never acked
    assert (await slow.info()).num_ack_pending == 2

    for i in range(10):
        ack = await js.publish("pul.evict", bytes([65 + i]) * 100)  # never refused
    last_seq = ack.seq
    state = (await (await js.stream(name)).info()).state
    assert 0 < state.messages < 12
    assert state.first_seq > 2  # both in-flight messages were evicted
    assert state.bytes <= 600

    async def caught_up() -> bool:
        s, i = await slow.info(), await idle.info()
        return (
            s.num_ack_pending == 0  # evicted in-flight messages leave the ack pending set
            and s.num_pending == state.messages
            and i.num_pending == state.messages
        )

    await wait_until(caught_up, timeout=STEP, message="consumers see the eviction")
    for consumer in (slow, idle):
        got = await fetch(consumer, state.messages)
        assert [m.metadata.sequence.stream for m in got] == list(
            range(state.first_seq, last_seq + 1)
        )
    assert all(m.metadata.sequence.stream < state.first_seq for m in in_flight)


async def test_message_age_eviction_expires_the_backlog(js: JetStreamContext) -> None:
    name = unique_name("PUL_AGE")
    # max_age 2 s (was 0.5 s): the backlog check right after the publish must come
    # before the expiry, also on a loaded machine.
    config = apply_backlog_quota(interest(name, "pul.age"), limit_time=2, policy=EVICT)
    await js.create_stream(config)
    reader = await durable(js, name, "reader")
    await js.publish("pul.age", b"old")
    assert (await reader.info()).num_pending == 1

    async def expired() -> bool:
        return await messages(js, name) == 0 and (await reader.info()).num_pending == 0

    await wait_until(expired, timeout=STEP, message="unacked message outlived max_age")


async def test_an_archived_streams_consumers_list(js: JetStreamContext) -> None:
    """The server's source consumer (ack policy flow_control) parses like any other."""
    name = unique_name("LSTO")
    origin, archive = archive_pair(name, ["lsto.>"], time_minutes=5, size_mb=-1)
    await js.create_stream(origin)
    await js.create_stream(archive)

    async def sourced() -> bool:
        return len([c async for c in js.list_consumers(name)]) == 1

    await wait_until(sourced, timeout=10)
    infos = [c async for c in js.list_consumers(name)]
    assert infos[0].config.ack_policy is AckPolicy.FLOW_CONTROL

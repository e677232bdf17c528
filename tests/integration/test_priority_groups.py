"""Priority groups (ADR-42) against a real server: overflow, pinned_client, prioritized.

Also the client-side checks (nothing is sent), the server's config error codes
and the refusal of servers that are too old.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aiojetstream import (
    AckPolicy,
    Consumer,
    ConsumerConfig,
    FeatureNotSupportedError,
    InvalidOptionError,
    InvalidPriorityGroupNameError,
    JetStreamContext,
    JetStreamError,
    Msg,
    PinIdMismatchError,
    PriorityGroupConfigError,
    PriorityPolicy,
    StorageType,
    StreamConfig,
    UnknownPriorityGroupError,
)
from helpers import unique_name, wait_until

MEM = StorageType.MEMORY


async def make_stream(js: JetStreamContext, prefix: str, n: int = 0) -> str:
    """A stream of its own (``prefix`` plus a random suffix) with ``n`` messages; its name."""
    name = unique_name(prefix)
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"], storage=MEM))
    await publish(js, name, n)
    return name


async def publish(js: JetStreamContext, stream: str, n: int) -> None:
    for i in range(n):
        await js.publish(f"{stream}.x", b"%d" % i)


async def priority_consumer(
    js: JetStreamContext,
    stream: str,
    policy: PriorityPolicy,
    *,
    name: str = "w",
    timeout: timedelta | None = None,
) -> Consumer:
    return await js.create_consumer(
        stream,
        ConsumerConfig(
            durable_name=name,
            priority_groups=["jobs"],
            priority_policy=policy,
            priority_timeout=timeout,
        ),
    )


async def collect(consumer: Consumer, n: int, **options: object) -> list[Msg]:
    batch = await consumer.fetch(n, **options)  # type: ignore[call-overload]
    return [msg async for msg in batch]


def seqs(msgs: list[Msg]) -> list[int]:
    return [m.metadata.sequence.stream for m in msgs]


# --------------------------------------------------------------------------- overflow


async def test_overflow_min_pending_serves_only_above_the_threshold(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGO1", 5)
    c = await priority_consumer(js, stream, PriorityPolicy.OVERFLOW)
    # 5 pending: a pull that asks for 10 pending waits until it expires
    assert await collect(c, 1, expires=1, group="jobs", min_pending=10) == []
    got = await collect(c, 1, expires=1, group="jobs", min_pending=3)
    assert seqs(got) == [1]
    await got[0].double_ack()
    # a plain pull of the group is served whatever the count
    assert seqs(await collect(c, 1, expires=1, group="jobs")) == [2]


async def test_overflow_min_ack_pending(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGO2", 6)
    c = await priority_consumer(js, stream, PriorityPolicy.OVERFLOW)
    assert await collect(c, 1, expires=1, group="jobs", min_ack_pending=3) == []
    first = await collect(c, 3, expires=1, group="jobs")  # three left unacknowledged
    assert seqs(first) == [1, 2, 3]
    got = await collect(c, 1, expires=1, group="jobs", min_ack_pending=3)
    assert seqs(got) == [4]
    # either threshold is enough: pending is 2 (< 100), ack pending 4 (>= 3)
    got = await collect(c, 1, expires=1, group="jobs", min_pending=100, min_ack_pending=3)
    assert seqs(got) == [5]


async def test_overflow_messages_with_min_pending(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGO3", 2)
    c = await priority_consumer(js, stream, PriorityPolicy.OVERFLOW)
    received: list[int] = []
    async with c.messages(group="jobs", min_pending=4, expires=2) as it:
        # 2 pending < 4: nothing; two more make 4 and the overflow puller is served
        await publish(js, stream, 2)
        async for msg in it:
            received.append(msg.metadata.sequence.stream)
            await msg.ack()
            if len(received) == 1:
                break
    assert received == [1]


# --------------------------------------------------------------------------- pinned_client


async def test_pinned_client_one_is_pinned_the_other_waits_until_unpin(
    js: JetStreamContext,
) -> None:
    stream = await make_stream(js, "PGP1", 4)
    await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT)
    a = await js.consumer(stream, "w")
    b = await js.consumer(stream, "w")
    got = await collect(a, 1, expires=2, group="jobs")
    assert seqs(got) == [1]
    pin = a.pin_id("jobs")
    assert pin is not None
    info = await a.info()
    assert info.priority_groups is not None
    assert info.priority_groups[0].pinned_client_id == pin
    # b is not pinned: it gets nothing while a holds the pin
    assert await collect(b, 1, expires=1, group="jobs") == []
    assert b.pin_id("jobs") is None
    # a keeps being served: its pulls carry the pin
    assert seqs(await collect(a, 1, expires=2, group="jobs")) == [2]
    await a.unpin("jobs")
    got = await collect(b, 1, expires=2, group="jobs")
    assert seqs(got) == [3]
    assert b.pin_id("jobs") not in (None, pin)
    # a still sends the old pin: refused at once (423), the pin is forgotten
    with pytest.raises(PinIdMismatchError) as exc:
        await collect(a, 1, expires=2, group="jobs")
    assert exc.value.reason == "mismatch"
    assert a.pin_id("jobs") is None
    # and a's next pull, without a pin, waits in standby while b is pinned
    assert await collect(a, 1, expires=1, group="jobs") == []


async def test_pin_timeout_lets_the_other_client_be_pinned(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGP2", 3)
    await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT, timeout=timedelta(seconds=2))
    a = await js.consumer(stream, "w")
    b = await js.consumer(stream, "w")
    assert seqs(await collect(a, 1, expires=1, group="jobs")) == [1]
    # a stops pulling: after the 2 s pin timeout the server pins one of b's pulls.
    # (Two pulls of 1.9 s were asked for the exact phase: a first pull that reached
    # the server late on a loaded machine was pinned itself, and the second then
    # got message 3 too.) b pulls until served; the first pull served gets 2.
    got: list[Msg] = []

    async def b_served() -> bool:
        got.extend(await collect(b, 1, expires=1, group="jobs"))
        return bool(got)

    await wait_until(b_served, timeout=15, interval=0)
    assert seqs(got) == [2]
    assert b.pin_id("jobs") not in (None, a.pin_id("jobs"))


async def test_a_stored_pin_id_header_does_not_take_the_pin(js: JetStreamContext) -> None:
    """A message stored with a ``Nats-Pin-Id`` of its own (headers forwarded from a
    message read through another pinned consumer) has the server's line after it:
    the client recorded the stored one, its next pull was refused (423) and it
    waited in standby for the pin timeout (120 s by default)."""
    stream = await make_stream(js, "PGP5")
    await js.publish(f"{stream}.x", b"forwarded", headers={"Nats-Pin-Id": "from-upstream"})
    await publish(js, stream, 3)
    await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT)
    a = await js.consumer(stream, "w")
    first = await collect(a, 1, expires=2, group="jobs")
    assert [m.data for m in first] == [b"forwarded"]
    info = await a.info()
    assert info.priority_groups is not None
    assert a.pin_id("jobs") == info.priority_groups[0].pinned_client_id != "from-upstream"
    # the pin held: the next pull is served at once, not refused
    assert seqs(await collect(a, 3, expires=2, group="jobs")) == [2, 3, 4]


async def test_fetch_expires_must_stay_below_the_pin_timeout(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGP3")
    c = await priority_consumer(
        js, stream, PriorityPolicy.PINNED_CLIENT, timeout=timedelta(seconds=5)
    )
    before = js.nc.stats["out_msgs"]
    with pytest.raises(InvalidOptionError, match="priority_timeout"):
        await c.fetch(1, expires=5, group="jobs")
    with pytest.raises(InvalidOptionError, match="priority_timeout"):
        c.messages(group="jobs")  # 30 s default expiry
    assert js.nc.stats["out_msgs"] == before


async def test_messages_survive_a_lost_pin_and_keep_consuming(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGP4", 3)
    c = await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT)
    errors: list[JetStreamError] = []
    received: list[int] = []
    async with c.messages(
        group="jobs", expires=5, max_messages=5, error_handler=errors.append
    ) as it:
        async for msg in it:
            received.append(msg.metadata.sequence.stream)
            await msg.ack()
            if len(received) == 3:
                break
        first_pin = c.pin_id("jobs")
        assert first_pin is not None
        await c.unpin("jobs")
        # the next delivery picks a new pin: the waiting pulls get 423 Nats-Wrong-Pin-Id
        await publish(js, stream, 3)
        async for msg in it:
            received.append(msg.metadata.sequence.stream)
            await msg.ack()
            if len(received) == 6:
                break
    assert received == [1, 2, 3, 4, 5, 6]
    lost = [e for e in errors if isinstance(e, PinIdMismatchError)]
    assert lost, errors
    assert {e.reason for e in lost} <= {"wrong_pin", "mismatch"}
    assert c.pin_id("jobs") not in (None, first_pin)


async def test_consume_survives_a_lost_pin(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGP5", 2)
    c = await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT)
    errors: list[JetStreamError] = []
    received: list[int] = []
    two, four = asyncio.Event(), asyncio.Event()

    async def handler(msg: Msg) -> None:
        received.append(msg.metadata.sequence.stream)
        await msg.ack()
        if len(received) == 2:
            two.set()
        if len(received) == 4:
            four.set()

    ctx = await c.consume(handler, group="jobs", expires=5, error_handler=errors.append)
    async with ctx:
        async with asyncio.timeout(10):
            await two.wait()
        first_pin = c.pin_id("jobs")
        await c.unpin("jobs")
        await publish(js, stream, 2)
        async with asyncio.timeout(10):
            await four.wait()
    assert await ctx.closed() is None
    assert received == [1, 2, 3, 4]
    assert any(isinstance(e, PinIdMismatchError) for e in errors), errors
    assert c.pin_id("jobs") not in (None, first_pin)


# --------------------------------------------------------------------------- prioritized


async def test_prioritized_lower_values_are_served_first(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGZ")
    await priority_consumer(js, stream, PriorityPolicy.PRIORITIZED)
    a, b, c = [await js.consumer(stream, "w") for _ in range(3)]
    batch_a = await a.fetch(1, expires=3, group="jobs", priority=0)
    batch_c = await c.fetch(5, expires=3, group="jobs", priority=2)
    batch_b = await b.fetch(5, expires=3, group="jobs", priority=5)

    async def waiting() -> bool:
        return (await a.info()).num_waiting == 3

    await wait_until(waiting)
    await publish(js, stream, 4)
    got_a = [m async for m in batch_a]
    got_c = [m async for m in batch_c]
    got_b = [m async for m in batch_b]
    assert (len(got_a), len(got_c), len(got_b)) == (1, 3, 0)


# --------------------------------------------------------------------------- client-side checks


async def test_bad_pull_options_are_refused_before_sending(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGV", 1)
    pinned = await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT, name="p")
    overflow = await priority_consumer(js, stream, PriorityPolicy.OVERFLOW, name="o")
    plain = await js.create_consumer(stream, ConsumerConfig(durable_name="plain"))
    before = js.nc.stats["out_msgs"]
    cases: list[tuple[Consumer, dict[str, object], str]] = [
        (pinned, {}, "pass group="),
        (pinned, {"group": "other"}, "not one of"),
        (pinned, {"group": "a" * 17}, "1 to 16"),
        (pinned, {"group": "jobs", "min_pending": 1}, "overflow"),
        (pinned, {"group": "jobs", "priority": 1}, "prioritized"),
        (overflow, {"group": "jobs", "min_ack_pending": 0}, "positive"),
        (overflow, {"group": "jobs", "priority": 10}, "0 to 9"),
        (plain, {"group": "jobs"}, "priority groups"),
        (plain, {"min_pending": 2}, "priority groups"),
    ]
    for consumer, options, match in cases:
        with pytest.raises(InvalidOptionError, match=match):
            await consumer.fetch(1, expires=1, **options)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match=match):
            await consumer.next(expires=1, **options)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match=match):
            await consumer.fetch_no_wait(1, **options)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match=match):
            await consumer.fetch_bytes(100, expires=1, **options)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match=match):
            consumer.messages(expires=5, **options)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match=match):
            await consumer.consume(lambda m: None, expires=5, **options)  # type: ignore[call-overload]
    with pytest.raises(InvalidOptionError, match="1 to 16"):
        await pinned.unpin("no spaces")
    assert js.nc.stats["out_msgs"] == before


# --------------------------------------------------------------------------- server errors


@pytest.mark.parametrize(
    ("config", "error", "err_code"),
    [
        ({"priority_policy": PriorityPolicy.OVERFLOW}, PriorityGroupConfigError, 10159),
        ({"priority_groups": ["jobs"]}, PriorityGroupConfigError, 10196),
        ({"priority_timeout": timedelta(seconds=5)}, PriorityGroupConfigError, 10197),
        (
            {"priority_groups": ["a" * 17], "priority_policy": PriorityPolicy.OVERFLOW},
            InvalidPriorityGroupNameError,
            10162,
        ),
        (
            {"priority_groups": [""], "priority_policy": PriorityPolicy.OVERFLOW},
            PriorityGroupConfigError,
            10161,
        ),
        (
            {
                "priority_groups": ["jobs"],
                "priority_policy": PriorityPolicy.PINNED_CLIENT,
                "deliver_subject": "push.here",
            },
            PriorityGroupConfigError,
            10178,
        ),
    ],
)
async def test_config_error_codes(
    js: JetStreamContext, config: dict[str, object], error: type[Exception], err_code: int
) -> None:
    stream = await make_stream(js, f"PGE{err_code}")
    with pytest.raises(error) as exc:
        await js.create_consumer(stream, ConsumerConfig(durable_name="bad", **config))
    assert getattr(exc.value, "err_code", None) == err_code


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            {"priority_groups": ["a", "b"], "priority_policy": PriorityPolicy.PINNED_CLIENT},
            "one group per consumer",
        ),
        (
            {"priority_groups": ["a", "b"], "priority_policy": PriorityPolicy.OVERFLOW},
            "one group per consumer",
        ),
        (
            {
                "priority_groups": ["a"],
                "priority_policy": PriorityPolicy.PINNED_CLIENT,
                "ack_policy": AckPolicy.NONE,
            },
            "needs acknowledgements",
        ),
    ],
)
async def test_what_adr42_forbids_and_the_server_accepts_is_refused_before_sending(
    js: JetStreamContext, config: dict[str, object], match: str
) -> None:
    """nats-server 2.15 takes two groups (then the second group's clients get
    nothing: one pin for both) and a pinned client without acks."""
    stream = await make_stream(js, "PGADR")
    before = js.nc.stats["out_msgs"]
    for create in (js.create_consumer, js.create_or_update_consumer, js.update_consumer):
        with pytest.raises(InvalidOptionError, match=match):
            await create(stream, ConsumerConfig(durable_name="bad", **config))
    assert js.nc.stats["out_msgs"] == before


async def test_unpin_of_an_unknown_group(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGU")
    c = await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT)
    with pytest.raises(UnknownPriorityGroupError) as exc:
        await c.unpin("other")
    assert exc.value.err_code == 10160
    await c.unpin("jobs")  # nothing pinned: succeeds


# --------------------------------------------------------------------------- old servers


async def test_old_servers_are_refused_before_sending(js: JetStreamContext) -> None:
    stream = await make_stream(js, "PGOLD")
    c = await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT)
    before = js.nc.stats["out_msgs"]
    js._api.level = 0  # 2.10: no priority groups
    with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.11") as info:
        await priority_consumer(js, stream, PriorityPolicy.OVERFLOW, name="o")
    assert (info.value.required_level, info.value.server_level) == (1, 0)
    with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.11"):
        await c.unpin("jobs")
    js._api.level = 1  # 2.11: no prioritized policy
    with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.12") as info:
        await priority_consumer(js, stream, PriorityPolicy.PRIORITIZED, name="z")
    assert (info.value.required_level, info.value.server_level) == (2, 1)
    assert js.nc.stats["out_msgs"] == before


@pytest.mark.parametrize("headers", [None, {"A": "b"}])
@pytest.mark.parametrize("call", ["fetch_bytes", "fetch_no_wait"])
async def test_pinned_byte_bounded_fetch_hands_out_every_message_delivered(
    js: JetStreamContext, call: str, headers: dict[str, str] | None
) -> None:
    """The server counts a message against a pull's max_bytes before it adds the
    pinned client's Nats-Pin-Id header (a header block of its own, or a line added
    to the message's). Counting with it, the client ended the fetch early and
    dropped the messages the server still delivered for it (left to redeliver
    after ack_wait, nothing said)."""
    stream = await make_stream(js, "PGB")
    for _ in range(12):
        await js.publish(f"{stream}.x", b"0123456789", headers=headers)
    consumer = await priority_consumer(js, stream, PriorityPolicy.PINNED_CLIENT)
    (probe,) = await collect(consumer, 1, expires=2, group="jobs")
    await probe.double_ack(timeout=5)
    stored_headers = len(b"NATS/1.0\r\nA: b\r\n\r\n") if headers else 0
    # Six messages' worth as the server counts them: the later ones are no larger
    # (their pending counts have fewer digits), a seventh does not fit.
    size = len(probe.subject) + len(probe.reply) + stored_headers + len(probe.data)
    if call == "fetch_bytes":
        batch = await consumer.fetch_bytes(6 * size, expires=2, group="jobs")
    else:
        batch = await consumer.fetch_no_wait(10, max_bytes=6 * size, group="jobs")
    got = [msg async for msg in batch]
    for msg in got:
        await msg.double_ack(timeout=5)
    info = await consumer.info()
    assert info.delivered.consumer_seq == 1 + len(got)  # nothing delivered was dropped
    assert info.num_ack_pending == 0
    assert len(got) == 6

"""A client clock minutes off the server's: times the server compares with its own clock.

A pause's end and ``skip_older_than``'s cutoff are compared by the server with
its clock, and a backlog's age with its messages' times. Counted from the
client's clock (2 minutes off, as found with libfaketime on the client), a
pause for 60 s paused nothing, a pause shortened an earlier one into a resume,
a valid end was refused, ``skip_older_than(60)`` skipped (and, on an interest
stream, deleted) messages just stored, and a backlog's age was negative.

The client's clock is skewed by replacing the ``datetime`` the admin module
reads ``now`` from; the server is real and its clock is not touched.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    JetStreamContext,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    _admin,
)
from helpers import unique_name, wait_until

SKEW = timedelta(minutes=2)


class _AnyDatetime(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, datetime)


def _skewed_clock(offset: timedelta) -> type[datetime]:
    class SkewedDatetime(datetime, metaclass=_AnyDatetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + offset

    return SkewedDatetime


@pytest.fixture(params=[-SKEW, SKEW], ids=["client-behind", "client-ahead"])
def skew(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> timedelta:
    offset: timedelta = request.param
    monkeypatch.setattr(_admin, "datetime", _skewed_clock(offset))
    skewed = _admin.__dict__["datetime"].now(UTC)
    assert abs(skewed - datetime.now(UTC) - offset) < timedelta(seconds=1)
    return offset


async def _stream(js: JetStreamContext, n: int, **config: Any) -> str:
    name = unique_name("SKEW")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, **config)
    )
    for i in range(n):
        await js.publish(f"{name}.a", b"%d" % i)
    return name


async def _server_now(js: JetStreamContext, stream: str, consumer: str) -> datetime:
    info = await (await js.consumer(stream, consumer)).info()
    assert info.ts is not None
    return info.ts


async def test_a_pause_for_a_duration_lasts_it_by_the_servers_clock(
    js: JetStreamContext, skew: timedelta
) -> None:
    stream = await _stream(js, 1)
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="c"))
    before = await _server_now(js, stream, "c")
    answer = await consumer.pause("60s")
    assert answer.paused, f"not paused (pause_until {answer.pause_until}, client skew {skew})"
    assert answer.pause_until is not None
    after = await _server_now(js, stream, "c")
    end = answer.pause_until
    assert before + timedelta(seconds=60) <= end <= after + timedelta(seconds=60)
    assert [m async for m in await consumer.fetch_no_wait(1)] == []


async def test_shortening_a_pause_keeps_the_consumer_paused(
    js: JetStreamContext, skew: timedelta
) -> None:
    """Client behind: a pause until tomorrow, then pause("60s"), resumed the consumer."""
    stream = await _stream(js, 1)
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="c"))
    assert (await consumer.pause(timedelta(days=1))).paused
    assert (await consumer.pause("60s")).paused
    assert (await consumer.info()).paused


async def test_an_end_in_the_servers_future_is_taken(js: JetStreamContext, skew: timedelta) -> None:
    """Client ahead: an end 60 s ahead of the server's clock was refused as "not in the
    future" (nats.go sends it, and the server pauses)."""
    stream = await _stream(js, 1)
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="c"))
    end = await _server_now(js, stream, "c") + timedelta(seconds=60)
    answer = await consumer.pause(end)
    assert answer.paused
    assert answer.pause_until == end


async def test_an_end_in_the_servers_past_is_refused_and_nothing_is_paused(
    js: JetStreamContext, skew: timedelta
) -> None:
    """Client behind: an end 60 s in the server's past looked ahead and was sent (the
    server took it as a resume of a paused consumer)."""
    stream = await _stream(js, 1)
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="c"))
    assert (await consumer.pause(timedelta(days=1))).paused
    end = await _server_now(js, stream, "c") - timedelta(seconds=60)
    with pytest.raises(ValueError, match="not in the future by the server's clock"):
        await consumer.pause(end)
    assert (await consumer.info()).paused


async def test_skip_older_than_cuts_by_the_servers_clock(
    js: JetStreamContext, skew: timedelta
) -> None:
    """Client ahead: ``skip_older_than(60)`` on messages just stored skipped all of them
    (an interest stream then deleted them); behind, older ones were kept."""
    stream = await _stream(js, 0, retention=RetentionPolicy.INTEREST)
    consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT)
    )
    for i in range(5):  # (an interest stream keeps only what a consumer will take)
        await js.publish(f"{stream}.a", b"%d" % i)
    assert await consumer.skip_older_than(60) == 1
    assert (await (await js.stream(stream)).info()).state.messages == 5
    batch = await consumer.fetch(5, expires=2)
    assert [m.data async for m in batch] == [b"0", b"1", b"2", b"3", b"4"]


async def test_skip_older_than_skips_what_is_older_by_the_servers_clock(
    js: JetStreamContext, skew: timedelta
) -> None:
    """Client behind: messages 1.5 s old survived ``skip_older_than(1)``."""
    stream = await _stream(js, 3)
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="c"))
    stored = (await js.stream(stream)).cached_info.state.last_ts
    await wait_until(lambda: datetime.now(UTC) > stored + timedelta(seconds=1.5), timeout=5)
    assert await consumer.skip_older_than(1) == 4


async def test_a_backlogs_age_is_counted_on_the_servers_clock(
    js: JetStreamContext, skew: timedelta
) -> None:
    """Client behind: the age of a message just stored read about -119 s."""
    stream = await _stream(js, 1)
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="c"))
    backlog = await consumer.backlog()
    assert backlog.oldest_unacked_age is not None
    assert timedelta(0) <= backlog.oldest_unacked_age < timedelta(seconds=30)

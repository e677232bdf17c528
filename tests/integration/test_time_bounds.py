"""Times and durations at the end of the server's clock, against a real nats-server.

nats-server reads a time as int64 nanoseconds since 1970 (Go's ``UnixNano``),
which wraps after 2262-04-11T23:47:16.854775807Z and before
1677-09-21T00:12:43.145224192Z, and adds a TTL or an interval to now in int64
nanoseconds too. Each test shows, with a raw request the library would not
send, what the server did with a value past the end (started at the first
message, fired at once, expired at once), then that the library refuses that
value before sending anything, and that the last value it accepts behaves as
"far in the future".
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from typer.testing import CliRunner

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    InvalidOptionError,
    InvalidScheduleError,
    InvalidStreamConfigError,
    InvalidTTLError,
    JetStreamContext,
    KeyValueConfig,
    MessageNotFoundError,
    ObjectStoreConfig,
    OrderedConsumerConfig,
    Schedule,
    Stream,
    StreamConfig,
    StreamNotFoundError,
)
from aiojetstream._models import NanoDatetime, NanoTimedelta
from aiojetstream._models._ranges import (
    CLOCK_MARGIN_SECONDS,
    MAX_SERVER_TIME_TEXT,
    seconds_left_on_server_clock,
)
from aiojetstream.cli._app import app
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._read import plan_range
from helpers import unique_name, wait_until

LAST = NanoDatetime(2262, 4, 11, 23, 47, 16, 854775, UTC, nanosecond=807)
PAST_LAST = NanoDatetime(2262, 4, 11, 23, 47, 16, 854775, UTC, nanosecond=808)
PAST_LAST_TEXT = "2262-04-11T23:47:16.854775808Z"
FIRST = NanoDatetime(1677, 9, 21, 0, 12, 43, 145224, UTC, nanosecond=192)
BEFORE_FIRST = NanoDatetime(1677, 9, 21, 0, 12, 43, 145224, UTC, nanosecond=191)
BEFORE_FIRST_TEXT = "1677-09-21T00:12:43.145224191Z"
LONGEST = NanoTimedelta(microseconds=(2**63 - 1) // 1000, nanoseconds=807)
TOO_LONG = NanoTimedelta(microseconds=(2**63 - 1) // 1000, nanoseconds=808)
MEM = "memory"


@pytest.fixture
async def raw(nats_url: str) -> AsyncIterator[NatsClient]:
    """A plain nats-py connection, for the requests the library refuses to send."""
    nc = await nats.connect(nats_url)
    try:
        yield nc
    finally:
        await nc.close()


async def raw_api(nc: NatsClient, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=5)
    decoded: dict[str, Any] = json.loads(reply.data)
    return decoded


async def three_messages(js: JetStreamContext, prefix: str, **config: Any) -> tuple[Stream, str]:
    name = unique_name(prefix)
    p = name.lower()
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{p}.>"], storage=MEM, allow_direct=True, **config)
    )
    for subject in ("a", "b", "c"):
        await js.publish(f"{p}.{subject}", subject.encode())
    return stream, p


async def consumer_count(stream: Stream) -> int:
    return (await stream.info()).state.consumer_count


# --------------------------------------------------------------------------- consumers


async def test_consumer_start_time_past_the_clock_is_refused_before_sending(
    js: JetStreamContext, raw: NatsClient
) -> None:
    stream, _ = await three_messages(js, "CST")
    by_time = {"deliver_policy": "by_start_time", "ack_policy": "none"}
    # What the server did: a start a nanosecond past its clock started at the first
    # message, one a nanosecond before it at the end.
    for text, pending in ((PAST_LAST_TEXT, 3), (BEFORE_FIRST_TEXT, 0)):
        reply = await raw_api(
            raw,
            f"$JS.API.CONSUMER.CREATE.{stream.name}",
            {"stream_name": stream.name, "config": {**by_time, "opt_start_time": text}},
        )
        assert reply["num_pending"] == pending, reply
        await js.delete_consumer(stream.name, reply["name"])
    # The library refuses both before sending.
    for bad in (PAST_LAST, datetime(2262, 4, 12, tzinfo=UTC), BEFORE_FIRST):
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_TIME,
            opt_start_time=bad,
            ack_policy=AckPolicy.NONE,
        )
        with pytest.raises(InvalidOptionError, match=r"ConsumerConfig\.opt_start_time"):
            await js.create_consumer(stream.name, config)
    assert await consumer_count(stream) == 0
    # Its last instant is after every message, its first before every one.
    for start, pending in ((LAST, 0), (FIRST, 3)):
        consumer = await js.create_consumer(
            stream.name,
            ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_TIME,
                opt_start_time=start,
                ack_policy=AckPolicy.NONE,
            ),
        )
        assert consumer.cached_info.num_pending == pending
        assert consumer.cached_info.config.opt_start_time == start


async def test_consumer_durations_up_to_int64_nanoseconds(
    js: JetStreamContext, raw: NatsClient
) -> None:
    stream, _ = await three_messages(js, "CDU")
    longest = ConsumerConfig(
        ack_wait=LONGEST,
        inactive_threshold=LONGEST,
        max_expires=LONGEST,
        max_deliver=3,
        backoff=[LONGEST, LONGEST],
    )
    consumer = await js.create_consumer(stream.name, longest)
    config = consumer.cached_info.config
    assert config.ack_wait == config.inactive_threshold == config.max_expires == LONGEST
    assert config.backoff == [LONGEST, LONGEST]
    # One nanosecond more: the server answered 10025 "invalid JSON".
    reply = await raw_api(
        raw,
        f"$JS.API.CONSUMER.CREATE.{stream.name}",
        {"stream_name": stream.name, "config": {"ack_policy": "explicit", "ack_wait": 2**63}},
    )
    assert reply["error"]["err_code"] == 10025
    for field in ("ack_wait", "inactive_threshold", "max_expires"):
        with pytest.raises(InvalidOptionError, match=f"ConsumerConfig.{field}"):
            await js.create_consumer(stream.name, ConsumerConfig(**{field: TOO_LONG}))
    with pytest.raises(InvalidOptionError, match=r"ConsumerConfig.backoff\[1\]"):
        await js.create_consumer(stream.name, ConsumerConfig(max_deliver=3, backoff=[1, TOO_LONG]))
    assert await consumer_count(stream) == 1


async def test_pause_until_far_ahead_is_kept_as_a_time(js: JetStreamContext) -> None:
    """The server compares pause_until as a time (never as nanoseconds): year 9999 pauses."""
    stream, _ = await three_messages(js, "CPU")
    until = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    consumer = await js.create_consumer(
        stream.name, ConsumerConfig(durable_name="paused", pause_until=until)
    )
    assert consumer.cached_info.paused
    assert consumer.cached_info.config.pause_until == until


async def test_sample_freq_past_a_percentage_is_refused(
    js: JetStreamContext, raw: NatsClient
) -> None:
    stream, _ = await three_messages(js, "CSF")
    # The server takes it (and keeps it in an int32, where 4294967346 is 50).
    reply = await raw_api(
        raw,
        f"$JS.API.CONSUMER.CREATE.{stream.name}",
        {
            "stream_name": stream.name,
            "config": {"ack_policy": "explicit", "sample_freq": "4294967346%"},
        },
    )
    assert reply["config"]["sample_freq"] == "4294967346%"
    await js.delete_consumer(stream.name, reply["name"])
    with pytest.raises(InvalidOptionError, match="sample_freq"):
        await js.create_consumer(stream.name, ConsumerConfig(sample_freq="4294967346%"))
    assert await consumer_count(stream) == 0
    consumer = await js.create_consumer(stream.name, ConsumerConfig(sample_freq="100%"))
    assert consumer.cached_info.config.sample_freq == "100%"


async def test_ordered_consumer_start_time_past_the_clock_is_refused(
    js: JetStreamContext,
) -> None:
    stream, _ = await three_messages(js, "COC")
    ordered = await js.ordered_consumer(
        stream.name,
        OrderedConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=PAST_LAST),
    )
    with pytest.raises(InvalidOptionError, match=PAST_LAST_TEXT):
        await ordered.fetch(1, expires=2)
    assert await consumer_count(stream) == 0
    ordered = await js.ordered_consumer(
        stream.name,
        OrderedConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=FIRST),
    )
    assert [m.data async for m in await ordered.fetch(3, expires=2)] == [b"a", b"b", b"c"]


async def test_bucket_durations_past_the_server_are_refused(js: JetStreamContext) -> None:
    with pytest.raises(InvalidOptionError, match=r"max_age \(10,000,000,000 s\) is too long"):
        await js.create_key_value(KeyValueConfig(bucket=unique_name("KV"), ttl=1e10))
    with pytest.raises(InvalidStreamConfigError, match="end of the server's clock"):
        await js.create_key_value(
            KeyValueConfig(
                bucket=unique_name("KV"), limit_marker_ttl=seconds_left_on_server_clock() + 60
            )
        )
    with pytest.raises(InvalidOptionError, match="max_age"):
        await js.create_object_store(ObjectStoreConfig(bucket=unique_name("OB"), ttl=1e10))
    assert [name async for name in js.stream_names()] == []
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("KV"), ttl=LONGEST))
    assert (await kv.status()).ttl == LONGEST


# --------------------------------------------------------------------------- streams


async def test_stream_durations_up_to_int64_nanoseconds(js: JetStreamContext) -> None:
    name = unique_name("SDU")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], max_age=LONGEST, duplicate_window=LONGEST)
    )
    assert stream.cached_info.config.max_age == LONGEST
    assert stream.cached_info.config.duplicate_window == LONGEST
    ack = await js.publish(f"{name}.a", b"x")
    assert (await stream.get_msg(ack.seq)).data == b"x"  # an age limit of 292 years keeps it
    other = unique_name("SDU")
    for field in ("max_age", "duplicate_window"):
        with pytest.raises(InvalidOptionError, match=f"StreamConfig.{field}"):
            await js.create_stream(StreamConfig(name=other, **{field: TOO_LONG}))
    with pytest.raises(InvalidOptionError, match=r"StreamConfig.sources\[0\].opt_start_time"):
        await js.create_stream(
            StreamConfig(name=other, sources=[{"name": name, "opt_start_time": PAST_LAST}])
        )
    with pytest.raises(StreamNotFoundError):
        await js.stream(other)


async def marker_on(stream: Stream, subject: str) -> bool:
    try:
        msg = await stream.get_last_msg_for_subject(subject)
    except MessageNotFoundError:
        return False
    return bool(msg.headers and "Nats-Marker-Reason" in msg.headers)


async def test_marker_ttl_must_end_before_the_server_clock(
    js: JetStreamContext, raw: NatsClient
) -> None:
    # What the server did: a marker TTL past the end of its clock expired the marker
    # as soon as it was written.
    wrapped = unique_name("MKW")
    too_long = seconds_left_on_server_clock() + CLOCK_MARGIN_SECONDS + 3600
    reply = await raw_api(
        raw,
        f"$JS.API.STREAM.CREATE.{wrapped}",
        {
            "name": wrapped,
            "subjects": [f"{wrapped}.>"],
            "storage": MEM,
            "allow_msg_ttl": True,
            "allow_rollup_hdrs": True,
            "max_msgs_per_subject": 1,  # (or the server raises a message's TTL to the marker's)
            "subject_delete_marker_ttl": too_long * 10**9,
        },
    )
    assert "error" not in reply, reply
    await js.publish(f"{wrapped}.a", b"x", ttl=1)
    broken = await js.stream(wrapped)

    async def marker_written_and_gone() -> bool:
        state = (await broken.info()).state
        return state.last_seq == 2 and state.messages == 0

    await wait_until(marker_written_and_gone, timeout=10)
    # The library refuses it before sending.
    refused = unique_name("MKR")
    with pytest.raises(InvalidStreamConfigError, match="subject_delete_marker_ttl"):
        await js.create_stream(
            StreamConfig(
                name=refused, subjects=[f"{refused}.>"], subject_delete_marker_ttl=too_long
            )
        )
    with pytest.raises(StreamNotFoundError):
        await js.stream(refused)
    # The longest it takes: the marker stays (still there once a later one was written).
    name = unique_name("MKL")
    stream = await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{name}.>"],
            storage=MEM,
            max_msgs_per_subject=1,
            subject_delete_marker_ttl=seconds_left_on_server_clock() - 60,
        )
    )
    await js.publish(f"{name}.a", b"x", ttl=1)
    await wait_until(lambda: marker_on(stream, f"{name}.a"), timeout=10)
    await js.publish(f"{name}.b", b"x", ttl=1)
    await wait_until(lambda: marker_on(stream, f"{name}.b"), timeout=10)
    assert await marker_on(stream, f"{name}.a")


# --------------------------------------------------------------------------- message TTLs


async def test_message_ttl_must_end_before_the_server_clock(js: JetStreamContext) -> None:
    stream, p = await three_messages(js, "TTL", allow_msg_ttl=True)
    left = seconds_left_on_server_clock()
    # What the server did with a TTL ending past its clock: removed the message at once.
    wrapped = await js.publish(
        f"{p}.wrapped", b"x", headers={"Nats-TTL": str(left + CLOCK_MARGIN_SECONDS + 3600)}
    )

    async def gone(seq: int) -> bool:
        try:
            await stream.get_msg(seq)
        except MessageNotFoundError:
            return True
        return False

    await wait_until(lambda: gone(wrapped.seq), timeout=10)
    # The library refuses it before sending.
    for too_long in (left + 60, 9_223_372_037, "99999999999999999999"):
        with pytest.raises(InvalidTTLError, match="end of the server's clock"):
            await js.publish(f"{p}.refused", b"x", ttl=too_long)
    assert (await stream.info()).state.last_seq == wrapped.seq
    # The longest it takes is kept: still there after a 1 s TTL expired.
    kept = await js.publish(f"{p}.kept", b"x", ttl=left - 60)
    brief = await js.publish(f"{p}.brief", b"x", ttl=1)
    await wait_until(lambda: gone(brief.seq), timeout=10)
    assert (await stream.get_msg(kept.seq)).headers == {"Nats-TTL": str(left - 60)}


# --------------------------------------------------------------------------- schedules


async def schedules(js: JetStreamContext) -> tuple[Stream, str]:
    name = unique_name("SCB")
    p = name.lower()
    stream = await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{p}.sched.>", f"{p}.orders.>"],
            storage=MEM,
            allow_msg_schedules=True,
        )
    )
    return stream, p


async def count(stream: Stream, subject: str) -> int:
    info = await stream.info(subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


async def test_schedule_at_past_the_clock_is_refused(js: JetStreamContext) -> None:
    stream, p = await schedules(js)
    # What the server did: an @at past its clock fired at once.
    await js.publish(
        f"{p}.sched.wrapped",
        b"x",
        headers={
            "Nats-Schedule": "@at 2262-04-11T23:47:17Z",
            "Nats-Schedule-Target": f"{p}.orders.wrapped",
        },
    )
    await wait_until(lambda: _at_least(stream, f"{p}.orders.wrapped", 1), timeout=10)
    # The library refuses it before sending.
    for when in (PAST_LAST, datetime(2300, 1, 1, tzinfo=UTC), BEFORE_FIRST):
        with pytest.raises(InvalidScheduleError, match="int64 nanoseconds since 1970"):
            Schedule.at(when)
    # Its last instant waits: a schedule due now, published after it, fires first.
    await js.publish(
        f"{p}.sched.last",
        b"x",
        schedule=Schedule.at(LAST),
        schedule_target=f"{p}.orders.last",
    )
    await js.publish(
        f"{p}.sched.now",
        b"x",
        schedule=Schedule.at(datetime.now(UTC) - timedelta(seconds=1)),
        schedule_target=f"{p}.orders.now",
    )
    await wait_until(lambda: _at_least(stream, f"{p}.orders.now", 1), timeout=10)
    assert await count(stream, f"{p}.orders.last") == 0
    schedule = await stream.get_last_msg_for_subject(f"{p}.sched.last")
    assert schedule.headers is not None
    assert schedule.headers["Nats-Schedule"] == f"@at {MAX_SERVER_TIME_TEXT}"


async def test_schedule_every_past_the_clock_is_refused(js: JetStreamContext) -> None:
    stream, p = await schedules(js)
    left = seconds_left_on_server_clock()
    # What the server did: an interval ending past its clock fired over and over.
    hours = (left + CLOCK_MARGIN_SECONDS) // 3600 + 1
    await js.publish(
        f"{p}.sched.wrapped",
        b"x",
        headers={
            "Nats-Schedule": f"@every {hours}h",
            "Nats-Schedule-Target": f"{p}.orders.wrapped",
        },
    )
    await wait_until(lambda: _at_least(stream, f"{p}.orders.wrapped", 2), timeout=10)
    assert await js.cancel_schedule(f"{p}.sched.wrapped")
    # The library refuses it before sending.
    with pytest.raises(InvalidScheduleError, match="end of the server's clock"):
        Schedule.every(hours * 3600)
    # The longest it takes waits.
    await js.publish(
        f"{p}.sched.longest",
        b"x",
        schedule=Schedule.every((left // 3600) * 3600),
        schedule_target=f"{p}.orders.longest",
    )
    await js.publish(
        f"{p}.sched.now",
        b"x",
        schedule=Schedule.at(datetime.now(UTC) - timedelta(seconds=1)),
        schedule_target=f"{p}.orders.now",
    )
    await wait_until(lambda: _at_least(stream, f"{p}.orders.now", 1), timeout=10)
    assert await count(stream, f"{p}.orders.longest") == 0


async def _at_least(stream: Stream, subject: str, n: int) -> bool:
    return await count(stream, subject) >= n


# --------------------------------------------------------------------------- gets


async def test_get_batch_start_time_past_the_clock_is_refused(
    js: JetStreamContext, raw: NatsClient
) -> None:
    stream, _ = await three_messages(js, "GBT")
    # What the server did: a start past its clock read from sequence 1.
    reply = await raw.request(
        f"$JS.API.DIRECT.GET.{stream.name}",
        json.dumps({"start_time": PAST_LAST_TEXT, "batch": 5}).encode(),
        timeout=5,
    )
    assert reply.headers is not None
    assert reply.headers["Nats-Sequence"] == "1"
    # The library refuses it before sending.
    for start in (PAST_LAST, datetime(2300, 1, 1, tzinfo=UTC), BEFORE_FIRST):
        with pytest.raises(InvalidOptionError, match="start_time"):
            stream.get_batch(5, start_time=start)
    # Its last instant is after every message; its first before every one.
    assert [m.seq async for m in stream.get_batch(5, start_time=LAST)] == []
    assert [m.seq async for m in stream.get_batch(5, start_time=FIRST)] == [1, 2, 3]


async def test_last_msgs_up_to_time_past_the_clock_is_refused(
    js: JetStreamContext, raw: NatsClient
) -> None:
    stream, p = await three_messages(js, "GLT")
    # What the server did: "up to" a time past its clock found nothing.
    reply = await raw.request(
        f"$JS.API.DIRECT.GET.{stream.name}",
        json.dumps({"multi_last": [f"{p}.>"], "up_to_time": PAST_LAST_TEXT}).encode(),
        timeout=5,
    )
    assert reply.headers is not None
    assert reply.headers.get("Status") == "404"
    with pytest.raises(InvalidOptionError, match="up_to_time"):
        stream.get_last_msgs_for(f"{p}.>", up_to_time=PAST_LAST)
    seqs = [m.seq async for m in stream.get_last_msgs_for(f"{p}.>", up_to_time=LAST)]
    assert seqs == [1, 2, 3]


async def test_skip_older_than_before_the_clock_is_refused(
    js: JetStreamContext, raw: NatsClient
) -> None:
    stream, _ = await three_messages(js, "SOT")
    consumer = await js.create_consumer(stream.name, ConsumerConfig(durable_name="c"))
    # What the server did with a cutoff before its clock: found no message at or after
    # it (so skip_older_than(400 years) skipped every message).
    reply = await raw_api(
        raw, f"$JS.API.STREAM.MSG.GET.{stream.name}", {"start_time": BEFORE_FIRST_TEXT}
    )
    assert reply["error"]["err_code"] == 10037
    with pytest.raises(InvalidOptionError, match="age"):
        await consumer.skip_older_than(timedelta(days=365 * 400))
    info = await consumer.info()
    assert (info.num_pending, info.delivered.stream_seq) == (3, 0)
    # 200 years back is older than every message: nothing is skipped.
    assert await consumer.skip_older_than(timedelta(days=365 * 200)) == 1


# --------------------------------------------------------------------------- Spark


async def test_spark_starting_timestamp_at_the_clock_end_reads_nothing(
    js: JetStreamContext, nats_url: str
) -> None:
    stream, _ = await three_messages(js, "SPT")
    with pytest.raises(InvalidOptionError, match="option 'startingTimestamp'"):
        parse_source_options(
            {"stream": stream.name, "startingTimestamp": "9999-12-31T23:59:59Z"}, streaming=False
        )
    for last in ("2262-04-11T23:47:16.854775Z", "9223372036854"):  # ISO-8601, epoch ms
        opts = parse_source_options(
            {"stream": stream.name, "servers": nats_url, "startingTimestamp": last},
            streaming=False,
        )
        start, end, bounds = await plan_range(js, opts, streaming=False)
        assert (start, end) == (4, 4) == (bounds.next, bounds.next)
    opts = parse_source_options(
        {
            "stream": stream.name,
            "servers": nats_url,
            "endingTimestamp": "2262-04-11T23:47:16.854775Z",
        },
        streaming=False,
    )
    assert (await plan_range(js, opts, streaming=False))[:2] == (1, 4)
    assert await consumer_count(stream) == 0  # the planning's consumers are gone


# --------------------------------------------------------------------------- CLI


def test_cli_durations_past_the_server_are_one_line_errors(nats_url: str) -> None:
    """The CLI's durations go through the library's checks: a config duration or a TTL
    the library refuses as written is a usage error of the command line (exit 2 and
    Click's usage lines, docs/cli.md; a config's was exit 1)."""
    runner = CliRunner()
    env = {"NATS_URL": nats_url, "COLUMNS": "80"}
    name = unique_name("CLI")
    for args, message in (
        (
            ["stream", "add", name, "--subjects", f"{name}.>", "--max-age", "200000d"],
            "max_age (17,280,000,000 s) is too long",
        ),
        (["stream", "add", name, "--subjects", f"{name}.>", "--max-age", "106751d"], None),
        (["pub", f"{name}.a", "x", "--ttl", "9000000000s"], "end of the server's clock"),
        (
            ["consumer", "add", name, "C", "--ack-wait", "200000d"],
            "ack_wait (17,280,000,000 s) is too long",
        ),
    ):
        result = runner.invoke(app, args, env=env)
        if message is None:
            assert result.exit_code == 0, result.output
        else:
            assert result.exit_code == 2, result.output
            assert message in result.stderr
            assert "Traceback" not in result.output + result.stderr

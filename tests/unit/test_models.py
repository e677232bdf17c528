"""User-facing semantics of the pydantic models (no server)."""

from __future__ import annotations

import copy
import math
import pickle
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from aiojetstream._models import (
    WIRE,
    AccountInfo,
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    NanoDatetime,
    NanoTimedelta,
    OrderedConsumerConfig,
    Placement,
    PriorityPolicy,
    PubAck,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamConsumerLimits,
    StreamInfo,
    StreamSource,
    coerce_duration,
    duration_to_ns,
    format_timestamp,
    from_wire,
    is_wire,
    ns_to_duration,
    parse_timestamp,
    to_wire,
)

NS = 1_000_000_000

# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (30, timedelta(seconds=30)),
        (1.5, timedelta(seconds=1.5)),
        (0, timedelta(0)),
        (timedelta(minutes=2), timedelta(minutes=2)),
        (timedelta(microseconds=1), timedelta(microseconds=1)),
        ("30s", timedelta(seconds=30)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("90", timedelta(seconds=90)),
    ],
)
def test_user_durations_are_seconds_or_timedelta(value: Any, expected: timedelta) -> None:
    cfg = StreamConfig(name="S", max_age=value, duplicate_window=value)
    assert cfg.max_age == expected
    assert cfg.duplicate_window == expected
    assert to_wire(cfg)["max_age"] == duration_to_ns(expected)


def test_wire_durations_are_nanoseconds() -> None:
    data = {"name": "S", "max_age": 90, "duplicate_window": 120 * NS}
    cfg = from_wire(StreamConfig, data)
    assert cfg.max_age == ns_to_duration(90)
    assert duration_to_ns(cfg.max_age) == 90
    assert cfg.duplicate_window == timedelta(minutes=2)
    assert StreamConfig.model_validate(data, context=WIRE) == cfg
    assert StreamConfig.model_validate_json(b'{"name":"S","max_age":90}', context=WIRE).max_age == (
        ns_to_duration(90)
    )
    # The same number from the user means seconds.
    assert StreamConfig.model_validate(data).max_age == timedelta(seconds=90)


def test_same_json_differs_by_context() -> None:
    raw = '{"durable_name": "d", "ack_wait": 30}'
    assert ConsumerConfig.model_validate_json(raw).ack_wait == timedelta(seconds=30)
    assert ConsumerConfig.model_validate_json(raw, context=WIRE).ack_wait == ns_to_duration(30)


@pytest.mark.parametrize(
    "bad",
    [-1, -0.5, timedelta(seconds=-1), math.inf, math.nan, True, "30x", "PT30S", [1], 10**30],
)
def test_bad_user_durations_are_rejected(bad: Any) -> None:
    with pytest.raises(ValidationError):
        ConsumerConfig(ack_wait=bad)


def test_negative_wire_durations_are_accepted() -> None:
    # StreamSourceInfo.active is -1 ns when the source was never active.
    cfg = from_wire(ConsumerConfig, {"ack_wait": -1})
    assert cfg.ack_wait is not None
    assert duration_to_ns(cfg.ack_wait) == -1
    assert to_wire(cfg)["ack_wait"] == -1


@pytest.mark.parametrize("bad", ["30s", True, 1.5, [1]])
def test_bad_wire_durations_are_rejected(bad: Any) -> None:
    with pytest.raises(ValidationError):
        from_wire(ConsumerConfig, {"ack_wait": bad})


def test_backoff_is_a_list_of_durations() -> None:
    cfg = ConsumerConfig(backoff=[1, 2.5, timedelta(minutes=1)], max_deliver=4)
    assert cfg.backoff == [timedelta(seconds=1), timedelta(seconds=2.5), timedelta(minutes=1)]
    assert to_wire(cfg)["backoff"] == [1 * NS, 2_500_000_000, 60 * NS]
    wire = from_wire(ConsumerConfig, {"backoff": [NS, 2 * NS]})
    assert wire.backoff == [timedelta(seconds=1), timedelta(seconds=2)]


def test_every_duration_field_uses_duration() -> None:
    cfg = ConsumerConfig(
        ack_wait=1,
        idle_heartbeat=2,
        inactive_threshold=3,
        max_expires=4,
        priority_timeout=5,
        backoff=[6],
    )
    wire = to_wire(cfg)
    for key, secs in [
        ("ack_wait", 1),
        ("idle_heartbeat", 2),
        ("inactive_threshold", 3),
        ("max_expires", 4),
        ("priority_timeout", 5),
    ]:
        assert wire[key] == secs * NS
    assert wire["backoff"] == [6 * NS]
    limits = StreamConsumerLimits(inactive_threshold=7, max_ack_pending=10)
    assert to_wire(limits) == {"inactive_threshold": 7 * NS, "max_ack_pending": 10}
    stream = StreamConfig(name="S", subject_delete_marker_ttl=60, allow_msg_ttl=True)
    assert to_wire(stream)["subject_delete_marker_ttl"] == 60 * NS


def test_python_dump_keeps_timedelta_json_dump_writes_ns() -> None:
    cfg = ConsumerConfig(ack_wait=30)
    assert cfg.model_dump()["ack_wait"] == timedelta(seconds=30)
    assert cfg.model_dump(mode="json")["ack_wait"] == 30 * NS
    assert '"ack_wait":30000000000' in cfg.model_dump_json()


def test_coerce_duration() -> None:
    assert coerce_duration(2) == timedelta(seconds=2)
    assert coerce_duration(timedelta(hours=1)) == timedelta(hours=1)
    with pytest.raises(ValueError, match="negative"):
        coerce_duration(-1)
    with pytest.raises(TypeError):
        coerce_duration(True)


def test_nano_timedelta() -> None:
    td = ns_to_duration(1_234_567_891)
    assert isinstance(td, NanoTimedelta)
    assert td.nanoseconds == 891
    assert td == timedelta(seconds=1, microseconds=234567)
    assert duration_to_ns(td) == 1_234_567_891
    assert duration_to_ns(pickle.loads(pickle.dumps(td))) == 1_234_567_891
    assert duration_to_ns(copy.deepcopy(td)) == 1_234_567_891
    assert type(ns_to_duration(2_000)) is timedelta
    assert duration_to_ns(ns_to_duration(-1)) == -1
    with pytest.raises(ValueError, match=r"0\.\.999"):
        NanoTimedelta(seconds=1, nanoseconds=1000)


@given(
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3653)),
)
def test_property_timedelta_wire_round_trip(td: timedelta) -> None:
    cfg = ConsumerConfig(ack_wait=td, backoff=[td])
    wire = to_wire(cfg)
    expected_ns = (td // timedelta(microseconds=1)) * 1000
    assert wire["ack_wait"] == expected_ns
    assert isinstance(wire["ack_wait"], int)
    back = from_wire(ConsumerConfig, wire)
    assert back.ack_wait == td
    assert back.backoff == [td]
    assert to_wire(back) == wire


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_property_wire_ints_are_nanoseconds(ns: int) -> None:
    cfg = from_wire(ConsumerConfig, {"ack_wait": ns})
    assert cfg.ack_wait is not None
    assert duration_to_ns(cfg.ack_wait) == ns
    assert abs(cfg.ack_wait - timedelta(microseconds=ns / 1000)) <= timedelta(microseconds=1)
    assert to_wire(cfg)["ack_wait"] == ns


# --------------------------------------------------------------------------- timestamps


def test_parse_go_timestamps() -> None:
    ts = parse_timestamp("2026-11-21T06:24:41.123456789Z")
    assert isinstance(ts, NanoDatetime)
    assert ts == datetime(2026, 11, 21, 6, 24, 41, 123456, tzinfo=UTC)
    assert ts.nanosecond == 789
    assert ts.tzinfo is UTC
    assert format_timestamp(ts) == "2026-11-21T06:24:41.123456789Z"
    zero = parse_timestamp("0001-01-01T00:00:00Z")
    assert zero == datetime(1, 1, 1, tzinfo=UTC)
    assert format_timestamp(zero) == "0001-01-01T00:00:00Z"
    short = parse_timestamp("2026-11-21T06:24:41.5Z")
    assert type(short) is datetime
    assert format_timestamp(short) == "2026-11-21T06:24:41.5Z"
    assert format_timestamp(parse_timestamp("2026-11-21T06:24:41.12345678Z")) == (
        "2026-11-21T06:24:41.12345678Z"
    )
    offset = parse_timestamp("2026-11-21T08:24:41.000000001+02:00")
    assert format_timestamp(offset) == "2026-11-21T06:24:41.000000001Z"


def test_config_times_read_with_an_offset_are_sent_back_with_it() -> None:
    """nats-server compares configs with their times' zones: what came is what goes back."""
    wire = {
        "opt_start_time": "2020-01-01T01:00:00.000000001+01:00",
        "deliver_policy": "by_start_time",
    }
    cfg = ConsumerConfig.model_validate(wire)
    assert cfg.opt_start_time == datetime(2020, 1, 1, 0, 0, tzinfo=UTC)  # the same instant
    assert to_wire(cfg)["opt_start_time"] == "2020-01-01T01:00:00.000000001+01:00"
    for copied in (copy.deepcopy(cfg), pickle.loads(pickle.dumps(cfg)), cfg.model_copy(deep=True)):
        # (a deep copy or a pickle, a Spark task's config, keeps it too)
        assert to_wire(copied)["opt_start_time"] == "2020-01-01T01:00:00.000000001+01:00"
    moved = cfg.model_copy(update={"opt_start_time": cfg.opt_start_time + timedelta(hours=1)})
    assert to_wire(moved)["opt_start_time"] == "2020-01-01T02:00:00+01:00"  # (arithmetic: µs)
    west = ConsumerConfig(opt_start_time="2020-01-01T01:00:00-05:30").opt_start_time
    assert west is not None
    assert format_timestamp(west, keep_offset=True) == "2020-01-01T01:00:00-05:30"
    # The plain parse and format stay in UTC; a user's own zone is sent in UTC.
    assert format_timestamp(west) == "2020-01-01T06:30:00Z"
    assert parse_timestamp("2020-01-01T01:00:00+01:00").tzinfo is UTC
    own = datetime(2020, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    assert format_timestamp(own, keep_offset=True) == "2020-01-01T00:00:00Z"


@pytest.mark.parametrize("bad", ["+24:00", "-99:00", "+01:60"])
def test_parse_timestamps_with_offsets_out_of_range(bad: str) -> None:
    for keep in (False, True):
        with pytest.raises(ValueError, match="invalid timestamp"):
            parse_timestamp("2020-01-01T01:00:00" + bad, keep_offset=keep)


@pytest.mark.parametrize(
    "bad", ["2026-11-21", "2026-11-21T06:24:41", "2026-11-21T06:24:41.1234567890Z", "junk"]
)
def test_parse_bad_timestamps(bad: str) -> None:
    with pytest.raises(ValueError, match="timestamp"):
        parse_timestamp(bad)


def test_nano_datetime_pickles_and_copies() -> None:
    ts = parse_timestamp("2026-11-21T06:24:41.123456789Z")
    for clone in (pickle.loads(pickle.dumps(ts)), copy.deepcopy(ts), copy.copy(ts)):
        assert isinstance(clone, NanoDatetime)
        assert format_timestamp(clone) == "2026-11-21T06:24:41.123456789Z"


def test_user_timestamps() -> None:
    cest = timezone(timedelta(hours=2))
    start = datetime(2026, 1, 1, 12, 0, tzinfo=cest)
    cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start)
    assert cfg.opt_start_time == start
    assert to_wire(cfg)["opt_start_time"] == "2026-01-01T10:00:00Z"
    assert ConsumerConfig(opt_start_time="2026-01-01T10:00:00Z").opt_start_time == datetime(
        2026, 1, 1, 10, tzinfo=UTC
    )
    with pytest.raises(ValidationError, match="naive"):
        ConsumerConfig(opt_start_time=datetime(2026, 1, 1))
    with pytest.raises(ValidationError):
        ConsumerConfig(opt_start_time=1234567890)


@given(st.integers(min_value=0, max_value=253402300799 * NS + NS - 1))
def test_property_timestamp_round_trip(epoch_ns: int) -> None:
    secs, frac = divmod(epoch_ns, NS)
    base = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=secs)
    digits = f"{frac:09d}".rstrip("0")
    text = base.strftime("%Y-%m-%dT%H:%M:%S") + (f".{digits}" if digits else "") + "Z"
    parsed = parse_timestamp(text)
    assert format_timestamp(parsed) == text
    assert parsed == base + timedelta(microseconds=frac // 1000)


# --------------------------------------------------------------------------- configs


def test_stream_config_defaults_and_wire_form() -> None:
    cfg = StreamConfig(name="S")
    assert cfg.retention is RetentionPolicy.LIMITS
    assert cfg.storage is StorageType.FILE
    assert cfg.discard is DiscardPolicy.OLD
    assert cfg.num_replicas == 1
    assert cfg.allow_msg_ttl is False
    assert cfg.subject_delete_marker_ttl is None
    assert cfg.subjects is None
    # Nothing an older server could reject as unknown: unset flags stay off the wire.
    assert to_wire(cfg) == {
        "name": "S",
        "retention": "limits",
        "discard": "old",
        "storage": "file",
        "num_replicas": 1,
    }


def test_explicit_flags_are_sent() -> None:
    cfg = StreamConfig(name="S", allow_msg_ttl=True, deny_delete=False)
    wire = to_wire(cfg)
    assert wire["allow_msg_ttl"] is True
    assert wire["deny_delete"] is False
    assert "deny_purge" not in wire


def test_rich_stream_config() -> None:
    cfg = StreamConfig(
        name="ORDERS",
        subjects=["orders.>"],
        retention=RetentionPolicy.WORKQUEUE,
        storage=StorageType.MEMORY,
        compression=StoreCompression.S2,
        max_age=timedelta(days=1),
        allow_msg_ttl=True,
        subject_delete_marker_ttl=timedelta(minutes=1),
        placement=Placement(cluster="east", tags=["ssd"]),
        sources=[StreamSource(name="A", opt_start_time="2026-01-01T00:00:00Z")],
        metadata={"team": "shop"},
    )
    assert to_wire(cfg) == {
        "name": "ORDERS",
        "subjects": ["orders.>"],
        "retention": "workqueue",
        "max_age": 86400 * NS,
        "discard": "old",
        "storage": "memory",
        "num_replicas": 1,
        "placement": {"cluster": "east", "tags": ["ssd"]},
        "sources": [{"name": "A", "opt_start_time": "2026-01-01T00:00:00Z"}],
        "compression": "s2",
        "allow_msg_ttl": True,
        "subject_delete_marker_ttl": 60 * NS,
        "metadata": {"team": "shop"},
    }


def test_stream_config_requires_a_name() -> None:
    with pytest.raises(ValidationError, match="name"):
        StreamConfig()  # type: ignore[call-arg]


def test_consumer_config_defaults() -> None:
    cfg = ConsumerConfig()
    assert cfg.ack_policy is AckPolicy.EXPLICIT
    assert cfg.deliver_policy is DeliverPolicy.ALL
    assert cfg.replay_policy is ReplayPolicy.INSTANT
    assert cfg.durable_name is None
    # ack_policy is always sent: the server's own default is "none".
    assert to_wire(cfg) == {
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "replay_policy": "instant",
    }


def test_unknown_user_fields_are_rejected_with_a_hint() -> None:
    with pytest.raises(ValidationError, match=r"'max_ages' \(did you mean 'max_age'\?\)"):
        StreamConfig(name="S", max_ages=3)
    with pytest.raises(ValidationError, match="durable"):
        ConsumerConfig(durable="x")
    with pytest.raises(ValidationError, match="bogus"):
        StreamConfig(name="S", placement={"cluster": "c", "bogus": 1})
    with pytest.raises(ValidationError, match="bogus"):
        StreamConfig(name="S", consumer_limits={"bogus": 1})
    with pytest.raises(ValidationError, match="bogus"):
        OrderedConsumerConfig(bogus=1)


def test_configs_are_frozen() -> None:
    cfg = StreamConfig(name="S")
    with pytest.raises(ValidationError, match="frozen"):
        cfg.max_age = timedelta(1)  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        ConsumerConfig().ack_wait = timedelta(1)  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        OrderedConsumerConfig().headers_only = True  # type: ignore[misc]


def test_model_copy_update() -> None:
    cfg = StreamConfig(name="S", subjects=["s.>"], max_age=60)
    updated = cfg.model_copy(update={"max_age": timedelta(hours=2), "deny_delete": True})
    assert cfg.max_age == timedelta(seconds=60)
    assert updated.max_age == timedelta(hours=2)
    wire = to_wire(updated)
    assert wire["max_age"] == 7200 * NS
    assert wire["deny_delete"] is True
    assert wire["subjects"] == ["s.>"]
    # model_copy does not validate: a bare number is taken as seconds when sent.
    assert to_wire(cfg.model_copy(update={"max_age": 5}))["max_age"] == 5 * NS


def test_server_config_round_trips_through_model_copy() -> None:
    server = {
        "name": "S",
        "subjects": ["s.>"],
        "retention": "limits",
        "max_age": 0,
        "discard": "old",
        "storage": "file",
        "num_replicas": 1,
        "allow_direct": False,
        "consumer_limits": {},
        "allow_msg_ttl": False,
        "allow_frobnication": True,
    }
    cfg = from_wire(StreamConfig, server)
    assert to_wire(cfg) == server
    assert to_wire(cfg.model_copy(update={"allow_msg_ttl": True})) == server | {
        "allow_msg_ttl": True
    }


def test_ordered_consumer_config() -> None:
    cfg = OrderedConsumerConfig()
    assert cfg.inactive_threshold == timedelta(minutes=5)
    assert cfg.deliver_policy is DeliverPolicy.ALL
    assert cfg.replay_policy is ReplayPolicy.INSTANT
    assert cfg.filter_subjects is None
    assert cfg.max_reset_attempts is None
    assert cfg.name_prefix is None
    custom = OrderedConsumerConfig(
        filter_subjects=["a.>"],
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=10,
        inactive_threshold=30,
        headers_only=True,
        max_reset_attempts=3,
        metadata={"k": "v"},
        name_prefix="ord",
    )
    assert custom.inactive_threshold == timedelta(seconds=30)


# --------------------------------------------------------------------------- enums


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        (RetentionPolicy, {"LIMITS": "limits", "INTEREST": "interest", "WORKQUEUE": "workqueue"}),
        (StorageType, {"FILE": "file", "MEMORY": "memory"}),
        (DiscardPolicy, {"OLD": "old", "NEW": "new"}),
        (
            AckPolicy,
            {"NONE": "none", "ALL": "all", "EXPLICIT": "explicit", "FLOW_CONTROL": "flow_control"},
        ),
        (
            DeliverPolicy,
            {
                "ALL": "all",
                "LAST": "last",
                "NEW": "new",
                "BY_START_SEQUENCE": "by_start_sequence",
                "BY_START_TIME": "by_start_time",
                "LAST_PER_SUBJECT": "last_per_subject",
            },
        ),
        (ReplayPolicy, {"INSTANT": "instant", "ORIGINAL": "original"}),
        (StoreCompression, {"NONE": "none", "S2": "s2"}),
        (
            PriorityPolicy,
            {
                "NONE": "none",
                "OVERFLOW": "overflow",
                "PINNED_CLIENT": "pinned_client",
                "PRIORITIZED": "prioritized",
            },
        ),
    ],
)
def test_enum_values(enum: Any, values: dict[str, str]) -> None:
    assert {member.name: member.value for member in enum} == values
    for name, value in values.items():
        assert enum[name] == value
        assert enum(value) is enum[name]


def test_enums_accept_wire_strings() -> None:
    cfg = StreamConfig(name="S", retention="interest", storage="memory")
    assert cfg.retention is RetentionPolicy.INTEREST
    assert cfg.storage is StorageType.MEMORY
    with pytest.raises(ValidationError):
        StreamConfig(name="S", retention="forever")


# --------------------------------------------------------------------------- responses


def test_pub_ack() -> None:
    ack = PubAck.model_validate_json(b'{"stream":"S","seq":7}')
    assert (ack.stream, ack.seq, ack.duplicate, ack.domain) == ("S", 7, False, None)
    newer = PubAck.model_validate_json(b'{"stream":"S","seq":8,"val":"12","batch":"b","count":3}')
    assert newer.model_extra == {"val": "12", "batch": "b", "count": 3}
    assert to_wire(newer) == {"stream": "S", "seq": 8, "val": "12", "batch": "b", "count": 3}
    assert PubAck.model_validate_json(b'{"stream":"S","seq":1,"domain":"hub"}').domain == "hub"


def test_account_info_minimal() -> None:
    info = from_wire(
        AccountInfo,
        {"memory": 0, "storage": 0, "streams": 0, "consumers": 0, "limits": {}},
    )
    assert info.api.level == 0
    assert info.tiers is None
    assert info.limits.max_streams == -1


def test_responses_keep_unknown_fields_without_wire_context() -> None:
    info = StreamInfo.model_validate(
        {
            "config": {"name": "S"},
            "created": "2026-01-01T00:00:00Z",
            "state": {
                "messages": 0,
                "bytes": 0,
                "first_seq": 0,
                "first_ts": "0001-01-01T00:00:00Z",
                "last_seq": 0,
                "last_ts": "0001-01-01T00:00:00Z",
            },
            "surprise": 1,
        }
    )
    assert info.model_extra == {"surprise": 1}


def test_is_wire() -> None:
    assert is_wire(WIRE)
    assert is_wire({"wire": True, "other": 1})
    assert not is_wire(None)
    assert not is_wire({"wire": 1})
    assert not is_wire("wire")


def test_json_schema_is_generated() -> None:
    schema = StreamConfig.model_json_schema()
    max_age = schema["properties"]["max_age"]
    assert {"type": "integer", "description": "duration in nanoseconds"} in max_age["anyOf"]
    assert "ADR-43" in schema["properties"]["allow_msg_ttl"]["description"]


@given(
    st.datetimes(
        min_value=datetime(1, 1, 1),
        max_value=datetime(9999, 12, 31, 23, 59, 59),
    ),
    st.integers(0, 999),
    st.integers(0, 9),
)
def test_parse_timestamp_fast_path_matches_the_general_parser(
    moment: datetime, ns: int, digits: int
) -> None:
    """The "Z" fast path gives exactly what the general RFC 3339 parser gives."""
    from aiojetstream._models._base import _RFC3339

    frac = f"{moment.microsecond:06d}{ns:03d}"[:digits]
    m = moment
    text = f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}"
    text += (f".{frac}" if digits else "") + "Z"
    fast = parse_timestamp(text)
    slow = parse_timestamp(text.replace("Z", "+00:00"))  # the general path
    assert _RFC3339.fullmatch(text) is not None
    assert fast == slow
    assert getattr(fast, "nanosecond", 0) == getattr(slow, "nanosecond", 0)
    assert fast.tzinfo is UTC

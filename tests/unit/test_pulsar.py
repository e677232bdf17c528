"""aiojetstream.pulsar: retention and backlog quota configs against a model of Pulsar's rules."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import (
    DiscardPolicy,
    InvalidNameError,
    InvalidOptionError,
    InvalidSubjectError,
    JetStreamError,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamSource,
    pulsar,
)
from aiojetstream._models import from_wire, to_wire
from aiojetstream.pulsar import (
    BacklogQuotaPolicy,
    InvalidRetentionError,
    apply_backlog_quota,
    apply_retention,
    archive_pair,
)

MIB = 1024 * 1024
INT64_MAX = 2**63 - 1
MAX_MINUTES = INT64_MAX // (60 * 10**9)  # max_age travels as int64 nanoseconds
MAX_MB = INT64_MAX // MIB  # max_bytes is an int64
SERVER_DUPLICATE_WINDOW = timedelta(minutes=2)  # the server's default, capped at max_age

# Fields a retention policy or quota may set; everything else must survive untouched.
MANAGED = {"retention", "max_age", "max_bytes", "discard", "duplicate_window"}
PRODUCER_POLICIES = [
    BacklogQuotaPolicy.PRODUCER_EXCEPTION,
    BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD,
]


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Expected:
    retention: RetentionPolicy
    max_age: timedelta
    max_bytes: int


def pulsar_retention(time_minutes: int, size_mb: int) -> Expected | None:
    """Pulsar's retention table (../specs/pulsar-retention-and-ttl.txt); None = invalid."""
    if time_minutes < -1 or size_mb < -1:
        return None  # below -1: refused by Pulsar's broker, no server equivalent
    if time_minutes > MAX_MINUTES or size_mb > MAX_MB:
        return None  # does not fit the server's int64 fields
    if time_minutes == 0 and size_mb == 0:
        return Expected(RetentionPolicy.INTEREST, timedelta(0), -1)  # the default
    if time_minutes == 0 or size_mb == 0:
        return None  # 0/>0, >0/0, and the -1/0, 0/-1 rows Pulsar does not list
    return Expected(
        RetentionPolicy.LIMITS,
        timedelta(0) if time_minutes == -1 else timedelta(minutes=time_minutes),
        -1 if size_mb == -1 else size_mb * MIB,
    )


# --------------------------------------------------------------------------- strategies

retention_values = st.one_of(
    st.sampled_from([-3, -2, -1, 0, 1, 2, 60]),
    st.integers(min_value=-(10**6), max_value=10**7),
    st.sampled_from([MAX_MINUTES, MAX_MINUTES + 1, MAX_MB, MAX_MB + 1, 2**70]),
)
names = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=1, max_size=20)
subject_tokens = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
subjects = st.lists(
    st.builds(lambda a, b: f"{a}.{b}", subject_tokens, st.sampled_from(["*", ">", "x"])),
    min_size=1,
    max_size=3,
    unique=True,
)
maybe_duration = st.one_of(
    st.none(), st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=30))
)


@st.composite
def stream_configs(draw: st.DrawFn) -> StreamConfig:
    """User configs with unrelated fields set at random (and some managed ones)."""
    fields: dict[str, Any] = {
        "name": draw(names),
        "subjects": draw(subjects),
        "storage": draw(st.sampled_from(StorageType)),
        "num_replicas": draw(st.sampled_from([1, 3])),
        "retention": draw(st.sampled_from(RetentionPolicy)),
        "discard": draw(st.sampled_from(DiscardPolicy)),
        "max_msgs": draw(st.one_of(st.none(), st.integers(-1, 10**6))),
        "max_msgs_per_subject": draw(st.one_of(st.none(), st.integers(-1, 100))),
        "max_bytes": draw(st.one_of(st.none(), st.integers(-1, 10**12))),
        "max_age": draw(maybe_duration),
        "duplicate_window": draw(maybe_duration),
        "description": draw(st.one_of(st.none(), st.text(max_size=10))),
        "allow_direct": draw(st.booleans()),
        "deny_purge": draw(st.booleans()),
        "compression": draw(st.one_of(st.none(), st.sampled_from(StoreCompression))),
        "metadata": draw(st.one_of(st.none(), st.just({"team": "orders"}))),
    }
    if draw(st.integers(0, 4)) == 0:
        fields.update(discard=DiscardPolicy.NEW, discard_new_per_subject=True)
        fields["max_msgs_per_subject"] = draw(st.integers(1, 100))
    if draw(st.booleans()):
        fields["sources"] = [StreamSource(name="ORIGIN", filter_subject="o.>")]
    return StreamConfig(**fields)


def server_config(config: StreamConfig) -> StreamConfig:
    """The same config as the server would send it back, with a field this library lacks."""
    return from_wire(StreamConfig, {**to_wire(config), "future_field": {"x": 1}})


def assert_unrelated_fields_kept(before: StreamConfig, after: StreamConfig) -> None:
    for field in StreamConfig.model_fields:
        if field not in MANAGED:
            assert getattr(after, field) == getattr(before, field), field
    assert after.model_extra == before.model_extra


def assert_round_trips(config: StreamConfig) -> None:
    """What is sent reads back the same (durations as int64 nanoseconds, enums as strings)."""
    wire = to_wire(config)
    assert from_wire(StreamConfig, wire) == config
    for key in ("max_age", "duplicate_window"):
        if key in wire:
            assert isinstance(wire[key], int)
            assert 0 <= wire[key] <= INT64_MAX
    if "max_bytes" in wire:
        assert -1 <= wire["max_bytes"] <= INT64_MAX


def assert_duplicate_window_fits(before: StreamConfig, after: StreamConfig) -> None:
    age = after.max_age
    window = before.duplicate_window
    effective = SERVER_DUPLICATE_WINDOW if window is None else window
    if age and effective > age:
        assert after.duplicate_window == age  # the server refuses a longer one
    else:
        assert after.duplicate_window == window


# --------------------------------------------------------------------------- apply_retention


@given(
    config=st.one_of(stream_configs(), stream_configs().map(server_config)),
    time_minutes=retention_values,
    size_mb=retention_values,
)
def test_retention_table_matches_pulsar(
    config: StreamConfig, time_minutes: int, size_mb: int
) -> None:
    expected = pulsar_retention(time_minutes, size_mb)
    limits_row = expected is not None and expected.retention is RetentionPolicy.LIMITS
    if expected is None or (limits_row and config.discard_new_per_subject):
        with pytest.raises(InvalidRetentionError):
            apply_retention(config, time_minutes=time_minutes, size_mb=size_mb)
        return
    out = apply_retention(config, time_minutes=time_minutes, size_mb=size_mb)
    assert (out.retention, out.max_age, out.max_bytes) == (
        expected.retention,
        expected.max_age,
        expected.max_bytes,
    )
    if limits_row:
        assert out.discard is DiscardPolicy.OLD  # Pulsar drops the oldest over a limit
    else:
        assert out.discard is config.discard  # no limit: the discard policy is irrelevant
    assert_duplicate_window_fits(config, out)
    assert_unrelated_fields_kept(config, out)
    assert_round_trips(out)


@pytest.mark.parametrize(
    ("time_minutes", "size_mb", "retention", "max_age", "max_bytes"),
    [
        (-1, -1, RetentionPolicy.LIMITS, timedelta(0), -1),
        (-1, 1024, RetentionPolicy.LIMITS, timedelta(0), 1024 * MIB),
        (180, -1, RetentionPolicy.LIMITS, timedelta(hours=3), -1),
        (180, 10240, RetentionPolicy.LIMITS, timedelta(hours=3), 10 * 1024**3),
        (0, 0, RetentionPolicy.INTEREST, timedelta(0), -1),
    ],
)
def test_retention_rows(
    time_minutes: int, size_mb: int, retention: RetentionPolicy, max_age: timedelta, max_bytes: int
) -> None:
    base = StreamConfig(name="T", subjects=["t.>"], max_age=60, max_bytes=5, max_msgs=7)
    out = apply_retention(base, time_minutes=time_minutes, size_mb=size_mb)
    assert (out.retention, out.max_age, out.max_bytes) == (retention, max_age, max_bytes)
    assert out.max_msgs == 7
    assert base.max_bytes == 5  # the input is not changed


@pytest.mark.parametrize(
    ("time_minutes", "size_mb"),
    [(0, 1), (0, 10240), (1, 0), (180, 0), (-1, 0), (0, -1), (-2, -1), (-1, -2), (-5, 5)],
)
def test_invalid_retention_rows_quote_pulsars_rule(time_minutes: int, size_mb: int) -> None:
    with pytest.raises(InvalidRetentionError, match="Pulsar's retention table") as info:
        apply_retention(StreamConfig(name="T"), time_minutes=time_minutes, size_mb=size_mb)
    assert isinstance(info.value, ValueError)
    assert f"time_minutes={time_minutes}, size_mb={size_mb}" in str(info.value)


@pytest.mark.parametrize("bad", [True, False, 1.5, 60.0, "60", None])
def test_retention_values_must_be_ints(bad: Any) -> None:
    with pytest.raises(InvalidRetentionError, match="must be ints"):
        apply_retention(StreamConfig(name="T"), time_minutes=bad, size_mb=-1)
    with pytest.raises(InvalidRetentionError, match="must be ints"):
        apply_retention(StreamConfig(name="T"), time_minutes=-1, size_mb=bad)


@pytest.mark.parametrize("config", [None, {"name": "T"}, "T"])
def test_the_config_must_be_a_stream_config(config: Any) -> None:
    """A config of another type raised a bare AttributeError."""
    with pytest.raises(InvalidOptionError, match="config must be a StreamConfig") as info:
        apply_retention(config, time_minutes=0, size_mb=0)
    assert not isinstance(info.value, InvalidRetentionError)  # the config, not the retention
    with pytest.raises(InvalidOptionError, match="config must be a StreamConfig"):
        apply_retention(config, time_minutes=1, size_mb=1)
    for policy in BacklogQuotaPolicy:
        with pytest.raises(InvalidOptionError, match="config must be a StreamConfig"):
            apply_backlog_quota(config, limit_bytes=1, policy=policy)


def test_retention_limits_at_the_int64_edge() -> None:
    out = apply_retention(StreamConfig(name="T"), time_minutes=MAX_MINUTES, size_mb=MAX_MB)
    assert_round_trips(out)
    with pytest.raises(InvalidRetentionError, match="int64"):
        apply_retention(StreamConfig(name="T"), time_minutes=MAX_MINUTES + 1, size_mb=-1)
    with pytest.raises(InvalidRetentionError, match="int64"):
        apply_retention(StreamConfig(name="T"), time_minutes=-1, size_mb=MAX_MB + 1)


def test_duplicate_window_never_exceeds_max_age() -> None:
    base = StreamConfig(name="T", duplicate_window=timedelta(hours=2))
    assert apply_retention(base, time_minutes=30, size_mb=-1).duplicate_window == timedelta(
        minutes=30
    )
    assert apply_retention(base, time_minutes=300, size_mb=-1).duplicate_window == timedelta(
        hours=2
    )
    assert apply_retention(base, time_minutes=-1, size_mb=5).duplicate_window == timedelta(hours=2)
    unset = StreamConfig(name="T")  # the server would default it to 2 min (refused if pedantic)
    assert apply_retention(unset, time_minutes=1, size_mb=-1).duplicate_window == timedelta(
        minutes=1
    )
    assert apply_retention(unset, time_minutes=2, size_mb=-1).duplicate_window is None
    evict = BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
    assert apply_backlog_quota(unset, limit_time=0.5, policy=evict).duplicate_window == timedelta(
        milliseconds=500
    )
    assert apply_backlog_quota(unset, limit_time=300, policy=evict).duplicate_window is None


def test_limits_retention_refuses_discard_new_per_subject() -> None:
    base = StreamConfig(
        name="T", discard=DiscardPolicy.NEW, discard_new_per_subject=True, max_msgs_per_subject=1
    )
    with pytest.raises(InvalidRetentionError, match="discard_new_per_subject"):
        apply_retention(base, time_minutes=-1, size_mb=-1)
    out = apply_retention(base, time_minutes=0, size_mb=0)  # interest keeps discard new
    assert (out.retention, out.discard, out.discard_new_per_subject) == (
        RetentionPolicy.INTEREST,
        DiscardPolicy.NEW,
        True,
    )


# --------------------------------------------------------------------------- archive_pair


@given(name=names, subject_list=subjects, time_minutes=retention_values, size_mb=retention_values)
def test_archive_pair_shape(
    name: str, subject_list: list[str], time_minutes: int, size_mb: int
) -> None:
    expected = pulsar_retention(time_minutes, size_mb)
    if expected is None or expected.retention is RetentionPolicy.INTEREST:
        with pytest.raises(InvalidRetentionError):
            archive_pair(name, subject_list, time_minutes=time_minutes, size_mb=size_mb)
        return
    interest, archive = archive_pair(name, subject_list, time_minutes=time_minutes, size_mb=size_mb)
    assert interest.name == name
    assert interest.subjects == subject_list
    assert interest.retention is RetentionPolicy.INTEREST
    assert (interest.max_age, interest.max_bytes) == (timedelta(0), -1)
    assert interest.sources is None

    assert archive.name == f"{name}_ARCHIVE"
    assert archive.subjects is None
    assert archive.sources == [StreamSource(name=name)]
    assert archive.retention is RetentionPolicy.LIMITS
    assert archive.discard is DiscardPolicy.OLD
    assert (archive.max_age, archive.max_bytes) == (expected.max_age, expected.max_bytes)
    assert archive == apply_retention(
        StreamConfig(name=f"{name}_ARCHIVE", sources=[StreamSource(name=name)]),
        time_minutes=time_minutes,
        size_mb=size_mb,
    )
    assert_round_trips(interest)
    assert_round_trips(archive)


def test_archive_pair_refuses_no_retention() -> None:
    with pytest.raises(InvalidRetentionError, match="nothing to archive"):
        archive_pair("ORD", ["ord.>"], time_minutes=0, size_mb=0)


def test_archive_pair_does_not_share_the_callers_list() -> None:
    subject_list = ["ord.>"]
    interest, _ = archive_pair("ORD", subject_list, time_minutes=-1, size_mb=-1)
    subject_list.append("more.>")
    assert interest.subjects == ["ord.>"]


@pytest.mark.parametrize("name", ["", "a.b", "a b", "a*", "A" * 250])
def test_archive_pair_checks_names(name: str) -> None:
    with pytest.raises(InvalidNameError):
        archive_pair(name, ["x"], time_minutes=-1, size_mb=-1)


@pytest.mark.parametrize("bad", [[], "ord.>", ["ord..x"], ["a b"], ["ord.>.x"]])
def test_archive_pair_checks_subjects(bad: Any) -> None:
    with pytest.raises(InvalidSubjectError):
        archive_pair("ORD", bad, time_minutes=-1, size_mb=-1)


# --------------------------------------------------------------------------- apply_backlog_quota


def quota_model(
    limit_bytes: int | None, limit_time: float | timedelta | None, policy: BacklogQuotaPolicy
) -> tuple[int | None, timedelta | None, DiscardPolicy] | None:
    """The quota mapping: (max_bytes, max_age, discard) to set, None when invalid."""
    if limit_bytes is None and limit_time is None:
        return None
    if limit_bytes is not None and not 0 < limit_bytes <= INT64_MAX:
        return None
    age: timedelta | None = None
    if limit_time is not None:
        if policy is not BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION:
            return None  # message_age + a producer policy: no server equivalent
        age = limit_time if isinstance(limit_time, timedelta) else timedelta(seconds=limit_time)
        if age < timedelta(milliseconds=100):
            return None  # the server's minimum max_age
    evict = policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
    return limit_bytes, age, DiscardPolicy.OLD if evict else DiscardPolicy.NEW


limit_bytes_values = st.one_of(
    st.none(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([0, 1, -1, INT64_MAX, INT64_MAX + 1]),
)
limit_time_values = st.one_of(
    st.none(),
    st.floats(min_value=-10, max_value=10**7, allow_nan=False),
    st.integers(min_value=-10, max_value=10**7),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)),
    st.sampled_from([0, 0.05, 0.0999, 0.1, 0.1001, 1, timedelta(milliseconds=99)]),
)


@given(
    config=st.one_of(stream_configs(), stream_configs().map(server_config)),
    limit_bytes=limit_bytes_values,
    limit_time=limit_time_values,
    policy=st.sampled_from(BacklogQuotaPolicy),
)
def test_backlog_quota_matches_the_mapping(
    config: StreamConfig,
    limit_bytes: int | None,
    limit_time: float | timedelta | None,
    policy: BacklogQuotaPolicy,
) -> None:
    expected = quota_model(limit_bytes, limit_time, policy)
    evicts = policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
    if expected is None or (evicts and config.discard_new_per_subject):
        with pytest.raises(InvalidRetentionError):
            apply_backlog_quota(
                config, limit_bytes=limit_bytes, limit_time=limit_time, policy=policy
            )
        return
    out = apply_backlog_quota(config, limit_bytes=limit_bytes, limit_time=limit_time, policy=policy)
    max_bytes, max_age, discard = expected
    assert out.max_bytes == (config.max_bytes if max_bytes is None else max_bytes)
    assert out.max_age == (config.max_age if max_age is None else max_age)
    assert out.discard is discard
    assert out.retention is config.retention  # a quota never changes the retention
    if max_age is None:
        assert out.duplicate_window == config.duplicate_window
    else:
        assert_duplicate_window_fits(config, out)
    assert_unrelated_fields_kept(config, out)
    assert_round_trips(out)


@pytest.mark.parametrize("policy", PRODUCER_POLICIES)
def test_producer_policies_refuse_a_time_quota(policy: BacklogQuotaPolicy) -> None:
    with pytest.raises(InvalidRetentionError, match="message_age") as info:
        apply_backlog_quota(StreamConfig(name="Q"), limit_time=3600, policy=policy)
    assert policy.value in str(info.value)
    with pytest.raises(InvalidRetentionError, match="message_age"):
        apply_backlog_quota(StreamConfig(name="Q"), limit_bytes=10, limit_time=60, policy=policy)


def test_quota_examples_from_pulsars_docs() -> None:
    # set-backlog-quota --limit 2G --policy producer_request_hold
    base = apply_retention(StreamConfig(name="Q", subjects=["q.>"]), time_minutes=0, size_mb=0)
    held = apply_backlog_quota(
        base, limit_bytes=2 * 1024**3, policy=BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD
    )
    assert (held.retention, held.max_bytes, held.discard) == (
        RetentionPolicy.INTEREST,
        2 * 1024**3,
        DiscardPolicy.NEW,
    )
    # set-backlog-quota --limitTime 3600 --type message_age --policy consumer_backlog_eviction
    aged = apply_backlog_quota(
        base, limit_time=3600, policy=BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
    )
    assert (aged.max_age, aged.max_bytes, aged.discard) == (
        timedelta(hours=1),
        -1,
        DiscardPolicy.OLD,
    )


def test_quota_needs_a_limit() -> None:
    for policy in BacklogQuotaPolicy:
        with pytest.raises(InvalidRetentionError, match="needs a limit"):
            apply_backlog_quota(StreamConfig(name="Q"), policy=policy)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10", 2**63])
def test_quota_refuses_bad_byte_limits(bad: Any) -> None:
    with pytest.raises(InvalidRetentionError, match="limit_bytes"):
        apply_backlog_quota(
            StreamConfig(name="Q"), limit_bytes=bad, policy=BacklogQuotaPolicy.PRODUCER_EXCEPTION
        )


@pytest.mark.parametrize(
    "bad",
    [
        0,
        -1,
        0.0999,
        0.05,
        timedelta(milliseconds=99),
        timedelta(0),
        -timedelta(seconds=1),
        math.nan,
        math.inf,
        True,
        "1x",
        "50ms",
        "2562048h",
        10**20,
        timedelta.max,
    ],
)
def test_quota_refuses_bad_time_limits(bad: Any) -> None:
    with pytest.raises(InvalidRetentionError, match="limit_time"):
        apply_backlog_quota(
            StreamConfig(name="Q"),
            limit_time=bad,
            policy=BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION,
        )


def test_quota_time_minimum_is_the_servers_100ms() -> None:
    for ok in (0.1, timedelta(milliseconds=100)):
        out = apply_backlog_quota(
            StreamConfig(name="Q"),
            limit_time=ok,
            policy=BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION,
        )
        assert to_wire(out)["max_age"] == 100_000_000


def test_quota_policy_accepts_its_string_value_only() -> None:
    out = apply_backlog_quota(
        StreamConfig(name="Q"),
        limit_bytes=10,
        policy="producer_exception",  # type: ignore[arg-type]
    )
    assert out.discard is DiscardPolicy.NEW
    with pytest.raises(InvalidRetentionError, match="unknown backlog quota policy"):
        apply_backlog_quota(
            StreamConfig(name="Q"),
            limit_bytes=10,
            policy="drop_everything",  # type: ignore[arg-type]
        )


def test_eviction_refuses_discard_new_per_subject() -> None:
    base = StreamConfig(
        name="Q", discard=DiscardPolicy.NEW, discard_new_per_subject=True, max_msgs_per_subject=1
    )
    with pytest.raises(InvalidRetentionError, match="discard_new_per_subject"):
        apply_backlog_quota(
            base, limit_bytes=10, policy=BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
        )
    out = apply_backlog_quota(base, limit_bytes=10, policy=BacklogQuotaPolicy.PRODUCER_EXCEPTION)
    assert out.discard_new_per_subject


# --------------------------------------------------------------------------- the module


def test_public_surface() -> None:
    assert pulsar.__all__ == [
        "BacklogQuotaPolicy",
        "InvalidRetentionError",
        "apply_backlog_quota",
        "apply_retention",
        "archive_pair",
    ]
    for name in pulsar.__all__:
        assert inspect.getdoc(getattr(pulsar, name)), name
    for fn in (apply_retention, archive_pair, apply_backlog_quota):
        doc = inspect.getdoc(fn) or ""
        for section in ("Args:", "Returns:", "Raises:"):
            assert section in doc, (fn.__name__, section)


def test_error_is_an_option_error() -> None:
    err = InvalidRetentionError("x")
    assert isinstance(err, InvalidOptionError)
    assert isinstance(err, ValueError)
    assert isinstance(err, JetStreamError)


def test_policy_values_are_pulsars_names() -> None:
    assert [p.value for p in BacklogQuotaPolicy] == [
        "producer_request_hold",
        "producer_exception",
        "consumer_backlog_eviction",
    ]

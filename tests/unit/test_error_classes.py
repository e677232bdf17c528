"""Errors of the wrong class and odd bounds, in the pure checks (issue 25, items 10 and 11).

Each value here used to escape as a bare ``ValueError`` (a giant int in a
check's own message, Python's int-to-str digit limit), an ``OverflowError``
(a giant int turned into a float), pydantic's ``ValidationError`` where the
docs promise ``InvalidNameError``, or was accepted (``1e300`` seconds, a
sequence past 2**64 - 1, a count past the server's int64). Now each is an
:class:`InvalidOptionError` (or its ``InvalidNameError``) with a message that
says what is wrong. The same values through a real server, with a proxy
showing nothing is sent: tests/integration/test_hostile_bounds.py.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial

import pytest

from aiojetstream import (
    ConsumerConfig,
    InvalidNameError,
    InvalidOptionError,
    InvalidResponseError,
    InvalidScheduleError,
    KeyValueConfig,
    ObjectStoreConfig,
    Schedule,
    StreamConfig,
    StreamSource,
)
from aiojetstream import _counter as K
from aiojetstream import _direct as D
from aiojetstream import _kv as KV
from aiojetstream import _object as OBJ
from aiojetstream import _publish as P
from aiojetstream._batch import BatchState
from aiojetstream._models import to_wire
from aiojetstream._pull_engine import resolve_consume, resolve_fetch
from aiojetstream._validation import check_sequence, check_timeout

GIANT = 10**5000  #: past Python's 4,300-digit int-to-str limit: repr() raises ValueError
HUGE = 10**400  #: past the largest float: float() raises OverflowError
NAN = math.nan


def ident(value: object) -> str:
    """A test id for a value (pytest's own str() of a giant int raises ValueError)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"{'-' if value < 0 else ''}int{value.bit_length()}bits"
    return repr(value)


@contextmanager
def digit_limit(limit: int) -> Iterator[None]:
    """Python's int-to-str digit limit set to ``limit`` (0: none) for the block."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(limit)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)


def refused(call: Callable[[], object], match: str | None = None) -> str:
    """Run ``call``: it must raise InvalidOptionError (nothing else); return its message."""
    with pytest.raises(InvalidOptionError, match=match) as info:
        call()
    return str(info.value)


# --------------------------------------------------------------------------- the helpers


def test_messages_describe_giant_ints_instead_of_failing_on_them() -> None:
    message = refused(lambda: check_sequence(GIANT, "sequence"))
    assert "an int of about 5,001 digits" in message
    assert "a negative int of about" in refused(lambda: check_sequence(-GIANT, "sequence"))
    assert "5,001 digits" in refused(lambda: D.batch_request(GIANT))
    assert str(2**64) in refused(lambda: check_sequence(2**64, "seq"))  # ordinary ints as they are


def test_sequences_are_uint64_counts_int64() -> None:
    assert check_sequence(2**64 - 1, "seq") == 2**64 - 1
    refused(lambda: check_sequence(2**64, "seq"), r"from 0 to 2\*\*64 - 1")
    assert D.batch_request(2**63 - 1)["batch"] == 2**63 - 1
    refused(lambda: D.batch_request(2**63), r"batch must be an int from 1 to 2\*\*63 - 1")
    for wrong in (1.0, True, "1", None, NAN):
        refused(partial(check_sequence, wrong, "seq"))


@pytest.mark.parametrize("value", [1e300, math.inf, HUGE, GIANT, 9_223_372_037], ids=ident)
def test_timeouts_longer_than_292_years_are_refused(value: object) -> None:
    """``inf`` was refused while ``1e300`` meant forever, and a giant int raised OverflowError."""
    refused(lambda: check_timeout(value), "at most 9,223,372,036 s")
    assert check_timeout(9_223_372_036) == 9_223_372_036.0  # the server's int64 ns, ~292 years


def test_nan_has_a_message_of_its_own() -> None:
    assert "NaN" in refused(lambda: check_timeout(NAN))
    assert "negative" not in refused(lambda: P.hold_seconds(NAN), "NaN")
    refused(lambda: P.duration_seconds(NAN, "timeout"), "NaN")
    refused(lambda: resolve_fetch(expires=NAN), "NaN")


# --------------------------------------------------------------------------- hold_when_full


def test_hold_when_full_bounds() -> None:
    """NaN said "must not be negative"; 1e300 was accepted while inf was refused."""
    for value in (1e300, math.inf, HUGE, GIANT, timedelta.max):
        refused(partial(P.hold_seconds, value), "at most")
    refused(lambda: P.hold_seconds(-1), "negative")
    refused(lambda: P.hold_seconds(0), "positive")
    assert P.hold_seconds(timedelta(days=365)) == 365 * 86400.0
    assert P.hold_seconds(None) is None


def test_publish_async_complete_timeout_bounds() -> None:
    assert P.duration_seconds(0, "timeout") == 0.0
    for value in (1e300, math.inf, HUGE):
        refused(partial(P.duration_seconds, value, "timeout"), "at most")


# --------------------------------------------------------------------------- counters


def test_an_increment_past_the_digit_limit_is_an_invalid_option() -> None:
    """The server takes any size (a Go big.Int); the bound is Python's digit limit."""
    message = refused(lambda: K.increment_header(GIANT), "int-to-str limit")
    assert "4,300 digits" in message
    refused(lambda: K.increment_header(-GIANT), "int-to-str limit")
    assert K.increment_header(10**4299) == "+" + "1" + "0" * 4299
    with digit_limit(0):  # lifted: only the server's max_payload is left
        assert K.increment_header(GIANT) == "+1" + "0" * 5000


def test_a_total_past_the_digit_limit_is_an_invalid_response() -> None:
    body = json.dumps({"val": "9" * 5001}).encode()
    with pytest.raises(InvalidResponseError, match="5,001 digits"):
        K.counter_value(body)
    with digit_limit(0):
        assert K.counter_value(body) == 10**5001 - 1


# --------------------------------------------------------------------------- batch direct get


@pytest.mark.parametrize("value", [2**64, GIANT, -GIANT], ids=ident)
def test_batch_get_sequences_past_uint64_are_refused(value: int) -> None:
    """seq answered 408 from the server; up_to_seq was sent as is; a giant int raised ValueError."""
    refused(lambda: D.batch_request(1, seq=value))
    refused(lambda: D.batch_request(1, up_to_seq=value))
    refused(lambda: D.last_msgs_request("a.>", seq=value))
    refused(lambda: D.last_msgs_request("a.>", up_to_seq=value))


@pytest.mark.parametrize("value", [2**63, GIANT], ids=ident)
def test_batch_get_counts_past_int64_are_refused(value: int) -> None:
    refused(lambda: D.batch_request(value))
    refused(lambda: D.batch_request(1, max_bytes=value))
    refused(lambda: D.last_msgs_request("a.>", batch=value))
    refused(lambda: D.last_msgs_request("a.>", max_bytes=value))


def test_batch_get_limits_are_accepted() -> None:
    top = 2**64 - 1
    assert D.batch_request(2**63 - 1, seq=top, up_to_seq=top)["seq"] == top
    assert D.last_msgs_request("a.>", up_to_seq=top, seq=top)["up_to_seq"] == top


# --------------------------------------------------------------------------- pulls, batches


@pytest.mark.parametrize("resolve", [resolve_fetch, resolve_consume])
def test_pull_options_with_giant_ints(resolve: Callable[..., object]) -> None:
    """max_messages raised ValueError (its message), expires/heartbeat OverflowError."""
    for name in ("max_messages", "max_bytes"):
        refused(partial(resolve, **{name: GIANT}), "5,001 digits")
    for name in ("expires", "heartbeat"):
        refused(partial(resolve, **{name: HUGE}), "at most")


def test_atomic_batch_limit_with_giant_ints() -> None:
    refused(lambda: BatchState("b", -GIANT), "max_messages")
    refused(lambda: BatchState("b", GIANT), "max_messages")
    assert BatchState("b", 2**63 - 1).limit == 2**63 - 1


# --------------------------------------------------------------------------- names in configs


BAD_BUCKETS = ["..", "bad bucket", "a.b", "", "a*", "ä"]


@pytest.mark.parametrize("bucket", BAD_BUCKETS)
def test_bucket_names_are_invalid_name_errors_when_sent(bucket: str) -> None:
    """Built: pydantic's ValidationError was raised here. Sent: InvalidNameError, as a stream's."""
    kv = KeyValueConfig(bucket=bucket)
    obj = ObjectStoreConfig(bucket=bucket)
    with pytest.raises(InvalidNameError, match="invalid bucket name"):
        KV.kv_stream_config(kv)
    with pytest.raises(InvalidNameError, match="invalid bucket name"):
        OBJ.object_stream_config(obj)


def test_kv_mirror_and_source_names_are_bucket_names() -> None:
    for config in (
        KeyValueConfig(bucket="b", mirror=StreamSource(name="a.b")),
        KeyValueConfig(bucket="b", sources=[StreamSource(name="a b")]),
        KeyValueConfig(bucket="b", sources=[StreamSource(name="KV_x>")]),
    ):
        with pytest.raises(InvalidNameError, match="invalid bucket name"):
            KV.kv_stream_config(config)
    assert KV.kv_stream_config(KeyValueConfig(bucket="b", mirror=StreamSource(name="KV_a")))


def test_kv_max_value_size_fits_the_servers_int32() -> None:
    """It becomes the stream's max_msg_size (a Go int32): the server answered 'invalid JSON'."""
    refused(lambda: KV.kv_stream_config(KeyValueConfig(bucket="b", max_value_size=2**31)))
    assert KV.kv_stream_config(KeyValueConfig(bucket="b", max_value_size=2**31 - 1))


@pytest.mark.parametrize(
    "config",
    [
        StreamConfig(name="S", mirror=StreamSource(name="a.b")),
        StreamConfig(name="S", subjects=["s"], sources=[StreamSource(name="a b")]),
        StreamConfig(
            name="S", subjects=["s"], sources=[StreamSource(name="ok"), StreamSource(name="x>")]
        ),
        ConsumerConfig(durable_name="a b"),
        ConsumerConfig(name="a.b"),
    ],
)
def test_names_inside_configs_are_invalid_name_errors(config: StreamConfig) -> None:
    """Mirror and source names were sent (the server answered a bare APIError, 10141/10142)."""
    with pytest.raises(InvalidNameError):
        to_wire(config)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (StreamConfig(name="S", first_seq=2**64), "StreamConfig.first_seq"),
        (StreamConfig(name="S", first_seq=-1), "StreamConfig.first_seq"),
        (
            StreamConfig(name="S", mirror=StreamSource(name="O", opt_start_seq=GIANT)),
            "StreamConfig.mirror.opt_start_seq",
        ),
        (
            StreamConfig(name="S", sources=[StreamSource(name="O", opt_start_seq=-1)]),
            "StreamConfig.sources[0].opt_start_seq",
        ),
        (ConsumerConfig(opt_start_seq=2**64), "ConsumerConfig.opt_start_seq"),
        (ConsumerConfig(max_ack_pending=2**63), "ConsumerConfig.max_ack_pending"),
        (StreamConfig(name="S", max_msg_size=2**31), "StreamConfig.max_msg_size"),
        (StreamConfig(name="S", max_msgs=-GIANT), "StreamConfig.max_msgs"),
    ],
)
def test_int_fields_past_the_servers_types_are_refused(config: StreamConfig, field: str) -> None:
    """The server answered "invalid JSON" (a bare APIError); a giant int raised ValueError."""
    message = refused(lambda: to_wire(config))
    assert message.startswith(field)


def test_the_servers_own_limits_pass() -> None:
    top = 2**64 - 1
    wire = to_wire(StreamConfig(name="S", first_seq=top, max_msg_size=2**31 - 1, max_msgs=-1))
    assert (wire["first_seq"], wire["max_msg_size"]) == (top, 2**31 - 1)
    assert to_wire(ConsumerConfig(opt_start_seq=top, rate_limit_bps=top))["opt_start_seq"] == top
    assert to_wire(ConsumerConfig(name=""))["name"] == ""  # empty: none, as the server reads it


# --------------------------------------------------------------------------- priority, pulsar


def test_priority_options_with_giant_ints() -> None:
    """min_pending had no upper bound (the server's int64) and a giant int's message raised."""
    from aiojetstream._priority import resolve_priority

    def pull(**options: object) -> object:
        return resolve_priority(groups=["g"], policy="overflow", group="g", **options)  # type: ignore[arg-type]

    for name in ("min_pending", "min_ack_pending"):
        refused(partial(pull, **{name: 2**63}), "2\\*\\*63 - 1")
        refused(partial(pull, **{name: -GIANT}), "5,001 digits")
    assert pull(min_pending=2**63 - 1) is not None
    refused(lambda: pull(priority=GIANT), "5,001 digits")


def test_pulsar_retention_with_giant_ints() -> None:
    """The checks' own messages printed the int: ValueError past 4,300 digits."""
    from aiojetstream.pulsar import BacklogQuotaPolicy, apply_backlog_quota, apply_retention

    config = StreamConfig(name="S")
    for minutes, size in ((GIANT, 1), (1, GIANT), (1, -GIANT)):
        refused(partial(apply_retention, config, time_minutes=minutes, size_mb=size))
    for limit in (GIANT, -GIANT):
        refused(
            partial(
                apply_backlog_quota,
                config,
                limit_bytes=limit,
                policy=BacklogQuotaPolicy.PRODUCER_EXCEPTION,
            ),
            "5,001 digits",
        )


@pytest.mark.parametrize(
    "build",
    [
        lambda giant: Schedule.cron(giant),
        lambda giant: Schedule.at(giant),
        lambda giant: Schedule.cron("* * * * * *", time_zone=giant),
        lambda giant: Schedule.every(giant),
    ],
    ids=["cron", "at", "time_zone", "every"],
)
def test_a_schedule_of_a_giant_int_is_invalid_schedule_error(
    build: Callable[[int], object],
) -> None:
    """Schedule's messages quoted the value with repr(): past Python's int-to-str digit
    limit that raised its own bare ValueError instead of InvalidScheduleError."""
    with pytest.raises(InvalidScheduleError, match="digits"):
        build(10**5000)

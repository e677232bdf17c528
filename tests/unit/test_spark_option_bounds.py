"""Upper bounds of the Spark formats' numeric options, checked when the read is planned (pure).

Each option's largest value is accepted and the next one is refused with the
option's name, before anything connects: ``numPartitions=10**30`` made one
task per sequence, ``inactiveThreshold=1e10`` failed in a task with the
server's raw 10025 (``1e300`` with a pydantic error), ``startingOffsets=2**70``
read nothing and ``startingTimestamp=9999-12-31T23:59:59Z`` read everything.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from aiojetstream import InvalidOptionError
from aiojetstream._models._ranges import (
    MAX_DURATION_SECONDS,
    MAX_SERVER_TIME_NS,
    MIN_SERVER_TIME_NS,
)
from aiojetstream._validation import MAX_SEQUENCE
from aiojetstream.spark._options import (
    MAX_PARTITIONS,
    MAX_PENDING,
    MAX_PER_TRIGGER,
    MAX_SECONDS,
    MAX_TIME_NS,
    MIN_TIME_NS,
    parse_kv_options,
    parse_sink_options,
    parse_source_options,
)
from aiojetstream.spark._options import MAX_SEQUENCE as SPARK_MAX_SEQUENCE

LONG = 2**63 - 1
U64 = 2**64 - 1


def per_stream(seq: int) -> str:
    return json.dumps({"S": seq})


def checkpointed(seq: int) -> str:
    return json.dumps({"stream": "S", "seq": seq})


def read(streaming: bool = False, **options: str) -> object:
    return parse_source_options({"stream": "S", **options}, streaming=streaming)


def test_the_bounds_are_the_librarys() -> None:
    """The extension uses only the public API, so it has copies of the library's bounds."""
    assert SPARK_MAX_SEQUENCE == MAX_SEQUENCE == 2**64 - 1
    assert MAX_SECONDS == MAX_DURATION_SECONDS == 9_223_372_036
    assert (MIN_TIME_NS, MAX_TIME_NS) == (MIN_SERVER_TIME_NS, MAX_SERVER_TIME_NS)
    assert MAX_PER_TRIGGER == LONG  # Spark's read limits are Java longs
    assert MAX_PARTITIONS == 10_000
    assert MAX_PENDING == 1_000_000


@pytest.mark.parametrize(
    ("option", "largest", "too_large", "streaming"),
    [
        ("numPartitions", "10000", "10001", False),
        ("numPartitions", "10000", str(10**30), False),
        ("minPartitions", "10000", "10001", False),
        ("maxRecordsPerTrigger", str(LONG), str(LONG + 1), True),
        ("maxOffsetsPerTrigger", str(LONG), str(LONG + 1), True),
        ("minOffsetsPerTrigger", str(LONG), str(LONG + 1), True),
        ("maxBytesPerTrigger", str(LONG), str(LONG + 1), True),
        ("inactiveThreshold", "9223372036", "9223372037", False),
        ("inactiveThreshold", "9223372036", "1e10", False),
        ("inactiveThreshold", "9223372036", "1e300", False),
        ("retryTimeout", "9223372036", "9223372036.5", False),
        ("timeout", "9223372036", "1e10", False),
        ("maxTriggerDelay", "9223372036", "9223372037", True),
        ("maxTriggerDelay", "106751d", "106752d", True),
        ("startingOffsets", str(2**64 - 1), str(2**64), False),
        ("startingOffsets", str(2**64 - 1), str(2**70), False),
        ("startingOffsets", per_stream(U64), per_stream(U64 + 1), False),
        (
            "startingOffsets",
            checkpointed(U64),
            checkpointed(U64 + 1),
            False,
        ),
        ("endingOffsets", str(2**64 - 1), str(2**64), False),
        ("endingOffsets", per_stream(U64), per_stream(U64 + 1), False),
        ("startingTimestamp", "2262-04-11T23:47:16.854775Z", "2262-04-11T23:47:16.854776Z", False),
        ("startingTimestamp", "2262-04-11T23:47:16.854775Z", "9999-12-31T23:59:59Z", False),
        ("startingTimestamp", "1677-09-21T00:12:43.145225Z", "1677-09-21T00:12:43.145224Z", False),
        ("startingTimestamp", "9223372036854", "9223372036855", False),  # epoch milliseconds
        ("endingTimestamp", "2262-04-11T23:47:16.854775Z", "2262-04-11T23:47:16.854776Z", False),
        ("endingTimestamp", "2262-04-11T23:47:16.854775Z", "0001-01-01T00:00:00Z", False),
    ],
)
def test_largest_accepted_next_refused(
    option: str, largest: str, too_large: str, streaming: bool
) -> None:
    read(streaming, **{option: largest})
    with pytest.raises(InvalidOptionError, match=rf"option '{option}'"):
        read(streaming, **{option: too_large})


def test_timestamps_in_other_zones_count_in_utc() -> None:
    read(startingTimestamp="2262-04-12T01:47:16+02:00")
    with pytest.raises(InvalidOptionError, match="out of range"):
        read(startingTimestamp="2262-04-11T23:00:00-01:00")


def test_giant_numbers_are_refused_by_their_option_not_by_python() -> None:
    """Past Python's int-to-str limit (4,300 digits) ``int()`` itself raises ValueError."""
    giant = "9" * 5000
    for option in ("numPartitions", "startingOffsets", "startingTimestamp", "maxRecordsPerTrigger"):
        with pytest.raises(InvalidOptionError, match=rf"option '{option}'.*5000 characters"):
            read(option in ("maxRecordsPerTrigger",), **{option: giant})


def test_sink_and_kv_max_pending() -> None:
    assert parse_sink_options({"maxPending": str(MAX_PENDING)}).max_pending == MAX_PENDING
    assert parse_kv_options({"bucket": "b", "maxPending": str(MAX_PENDING)}).max_pending == (
        MAX_PENDING
    )
    with pytest.raises(InvalidOptionError, match="option 'maxPending'"):
        parse_sink_options({"maxPending": str(MAX_PENDING + 1)})
    with pytest.raises(InvalidOptionError, match="option 'maxPending'"):
        parse_kv_options({"bucket": "b", "maxPending": str(10**30)})
    with pytest.raises(InvalidOptionError, match="option 'retryTimeout'"):
        parse_sink_options({"retryTimeout": "1e10"})
    with pytest.raises(InvalidOptionError, match="option 'retryTimeout'"):
        parse_kv_options({"bucket": "b", "retryTimeout": "1e10"})
    assert parse_kv_options({"bucket": "b"}).retry_timeout == 30
    assert parse_kv_options({"bucket": "b", "RetryTimeout": "2.5"}).retry_timeout == 2.5


def test_the_limit_timestamp_is_kept_exactly() -> None:
    opts = parse_source_options(
        {"stream": "S", "startingTimestamp": "2262-04-11T23:47:16.854775Z"}, streaming=False
    )
    assert opts.starting_timestamp == datetime(2262, 4, 11, 23, 47, 16, 854775, UTC)

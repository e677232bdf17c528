"""Multi-stream reads, pure parts: per-stream offsets, splitting, per-trigger caps, push-down."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import InvalidOptionError
from aiojetstream.spark._filters import CLOCK_MARGIN, Narrowing, push, subject_matches
from aiojetstream.spark._offsets import Position, allot, decode, encode
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._read import split_ranges

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def opts(**options: str) -> Any:
    return parse_source_options(options, streaming=True)


# ----------------------------------------------------------------------------- options


def test_streams_and_pattern_select() -> None:
    listed = parse_source_options({"streams": " A , B,A "}, streaming=False)
    assert listed.stream is None
    assert listed.streams == ("A", "B")
    assert listed.multi
    assert listed.matches("A")
    assert not listed.matches("C")
    pattern = parse_source_options({"streamPattern": "ORDERS-[0-9]+"}, streaming=False)
    assert pattern.matches("ORDERS-12")
    assert not pattern.matches("ORDERS-12X")  # a full match
    assert not pattern.matches("XORDERS-1")
    single = parse_source_options({"stream": "A"}, streaming=False)
    assert not single.multi
    assert single.selection() == "stream 'A'"


def test_offsets_per_stream_json() -> None:
    o = parse_source_options(
        {
            "streams": "ORDERS-0,ORDERS-1,ORDERS-2",
            "startingOffsets": '{"ORDERS-0": 1001, "ORDERS-1": "earliest"}',
            "endingOffsets": '{"ORDERS-0": 2000}',
        },
        streaming=False,
    )
    assert o.starting_for("ORDERS-0") == 1001
    assert o.starting_for("ORDERS-1") == "earliest"
    assert o.starting_for("ORDERS-2") is None  # the default: earliest for a batch read
    assert o.ending_for("ORDERS-0") == 2000
    assert o.ending_for("ORDERS-1") == "latest"
    # A multi-stream checkpoint offset is accepted as a starting offset too.
    cp = parse_source_options(
        {"streams": "A", "startingOffsets": '{"streams": {"A": {"seq": 7, "created": "x"}}}'},
        streaming=True,
    )
    assert cp.starting_for("A") == 7


def test_kafka_aliases_and_timestamps() -> None:
    o = parse_source_options(
        {
            "stream": "S",
            "maxOffsetsPerTrigger": "100",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "2m",
            "maxBytesPerTrigger": "1000",
            "minPartitions": "8",
            "startingTimestamp": "1769860800000",
            "endingTimestamp": "2026-01-31T13:00:00+01:00",
            "consumerNamePrefix": "etl-orders",
            "retryTimeout": "12.5",
        },
        streaming=False,
    )
    assert o.max_records_per_trigger == 100
    assert o.min_records_per_trigger == 10
    assert o.max_trigger_delay == 120.0
    assert o.max_bytes_per_trigger == 1000
    assert o.min_partitions == 8
    assert o.starting_timestamp == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert o.ending_timestamp == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert o.consumer_name_prefix == "etl-orders"
    assert o.retry_timeout == 12.5
    assert opts(stream="S").max_trigger_delay == 900.0  # Kafka's 15m
    assert opts(stream="S", maxTriggerDelay="500ms").max_trigger_delay == 0.5
    assert opts(stream="S", maxTriggerDelay="30").max_trigger_delay == 30.0
    assert opts(stream="S", maxRecordsPerTrigger="9").max_records_per_trigger == 9
    both = opts(stream="S", maxRecordsPerTrigger="9", maxOffsetsPerTrigger="9")
    assert both.max_records_per_trigger == 9


def test_ending_timestamp_is_batch_only() -> None:
    with pytest.raises(InvalidOptionError, match="'endingTimestamp' applies to batch"):
        opts(stream="S", endingTimestamp="2026-01-01T00:00:00Z")


# ----------------------------------------------------------------------------- offsets


def test_single_stream_offsets_keep_their_form() -> None:
    o = opts(stream="S")
    offset = encode(o, {"S": Position(5, "c")})
    assert offset == {"stream": "S", "seq": 5, "created": "c"}
    assert decode(o, offset) == {"S": Position(5, "c")}
    # A checkpoint written before "created" existed.
    assert decode(o, {"stream": "S", "seq": 9}) == {"S": Position(9, None)}
    with pytest.raises(InvalidOptionError, match=r"offsets of stream .T.*new checkpoint"):
        decode(o, {"stream": "T", "seq": 9})


def test_multi_stream_offsets() -> None:
    o = opts(streamPattern="S-.*")
    positions = {"S-2": Position(3, "b"), "S-1": Position(7, "a")}
    offset = encode(o, positions)
    assert offset == {
        "streams": {"S-1": {"seq": 7, "created": "a"}, "S-2": {"seq": 3, "created": "b"}}
    }
    assert decode(o, offset) == positions
    # A single-stream checkpoint continues under streams/streamPattern naming that stream.
    assert decode(o, {"stream": "S-1", "seq": 4, "created": "a"}) == {"S-1": Position(4, "a")}
    with pytest.raises(InvalidOptionError, match="'T-1', which this query does not read"):
        decode(o, {"streams": {"T-1": {"seq": 1}}})
    with pytest.raises(InvalidOptionError, match="invalid"):
        decode(o, {"streams": {"S-1": {"seq": 0}}})
    with pytest.raises(InvalidOptionError, match="not one of format"):
        decode(o, {"topic": 1})


# ----------------------------------------------------------------------------- caps


ranges_st = st.dictionaries(
    st.sampled_from(["A", "B", "C", "D"]),
    st.tuples(st.integers(1, 10**6), st.integers(0, 10**5)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=1,
)


@given(
    ranges=ranges_st,
    max_rows=st.one_of(st.none(), st.integers(1, 10**5)),
    max_bytes=st.one_of(st.none(), st.integers(1, 10**8)),
    sizes=st.dictionaries(st.sampled_from(["A", "B", "C", "D"]), st.integers(0, 10**4)),
)
def test_allot_shares_the_cap(
    ranges: dict[str, tuple[int, int]],
    max_rows: int | None,
    max_bytes: int | None,
    sizes: dict[str, int],
) -> None:
    ends = allot(ranges, max_rows=max_rows, max_bytes=max_bytes, sizes=sizes)
    assert ends.keys() == ranges.keys()
    waiting = sum(hi - lo for lo, hi in ranges.values())
    taken = sum(ends[n] - lo for n, (lo, _hi) in ranges.items())
    for name, (lo, hi) in ranges.items():
        assert lo <= ends[name] <= hi
    if max_rows is None and max_bytes is None:
        assert taken == waiting
    if max_rows is not None:
        # Over the cap only by the ones of streams whose share is below one (Kafka's).
        assert taken <= max_rows + sum(1 for lo, hi in ranges.values() if hi > lo)
        if max_bytes is None:
            kafka = kafka_rate_limit(ranges, max_rows)
            if waiting <= max_rows:
                assert taken == waiting
            else:
                assert taken == max(max_rows, sum(kafka.values()))
            for name, (lo, _hi) in ranges.items():
                # Kafka's amounts; what its rounding down leaves of the cap, one more.
                assert kafka[name] <= ends[name] - lo <= kafka[name] + 1
    if waiting:
        assert taken >= 1  # a trigger always moves
    if max_rows is not None or max_bytes is not None:
        for name, (lo, hi) in ranges.items():
            assert ends[name] > lo or hi == lo  # no stream with messages waiting starves


def kafka_rate_limit(ranges: dict[str, tuple[int, int]], limit: int) -> dict[str, int]:
    """What Spark's Kafka source takes of each range (``KafkaMicroBatchStream.rateLimit``).

    ``prorate = limit * size / total``; below 1 rounded up ("Don't completely starve
    small topicpartitions"), else down; at most the range. Exact here (Kafka's is
    a double).
    """
    sizes = {name: hi - lo for name, (lo, hi) in ranges.items()}
    total = sum(sizes.values())
    if total < 1:
        return sizes
    taken = {}
    for name, size in sizes.items():
        prorate = Fraction(limit * size, total)
        taken[name] = min(size, math.ceil(prorate) if prorate < 1 else math.floor(prorate))
    return taken


def test_allot_is_proportional() -> None:
    ends = allot({"A": (1, 901), "B": (1, 101)}, max_rows=100)
    assert ends == {"A": 91, "B": 11}
    # A stream with 1 waiting beside a busy one: was 0 at every trigger (starved).
    ends = allot({"HOT": (1, 100_001), "COLD": (1, 2)}, max_rows=100)
    assert ends == {"HOT": 100, "COLD": 2}  # 99 + 1: the cap
    ends = allot({"BIG": (1, 3001), "S1": (1, 2), "S2": (1, 4), "S3": (1, 11)}, max_rows=100)
    # Each small one moves; BIG keeps its share rounded down (99): 102 in all, over the
    # cap by two, as with Kafka's source.
    assert ends == {"BIG": 100, "S1": 2, "S2": 2, "S3": 2}
    ends = allot({"HOT": (1, 100_001), "COLD": (1, 2)}, max_bytes=100, sizes={"HOT": 1})
    assert ends["COLD"] == 2
    # Shares all below one: one each, over the cap (as Kafka's source).
    ends = allot({name: (1, 4) for name in "ABCDEFGHIJ"}, max_rows=5)
    assert ends == {name: 2 for name in "ABCDEFGHIJ"}
    # By bytes: A's messages are 10x B's.
    ends = allot({"A": (1, 101), "B": (1, 101)}, max_bytes=1100, sizes={"A": 100, "B": 10})
    assert sum(e - 1 for e in ends.values()) == 200 * 1100 // 11000


# ----------------------------------------------------------------------------- splitting


@given(
    ranges=st.lists(
        st.tuples(st.integers(1, 10**9), st.integers(0, 3 * 10**5)), min_size=0, max_size=6
    ),
    num=st.one_of(st.none(), st.integers(1, 300)),
    minimum=st.one_of(st.none(), st.integers(1, 300)),
)
def test_split_ranges(ranges: list[tuple[int, int]], num: int | None, minimum: int | None) -> None:
    named = [(f"S{i}", lo, lo + n) for i, (lo, n) in enumerate(ranges)]
    parts = split_ranges(named, num, minimum)
    total = sum(n for _lo, n in ranges)
    # Every sequence of every stream exactly once, in order.
    for name, lo, hi in named:
        mine = [(a, b) for n, a, b in parts if n == name]
        if hi == lo:
            assert mine == []
            continue
        assert mine[0][0] == lo
        assert mine[-1][1] == hi
        assert all(b > a for a, b in mine)
        assert all(x[1] == y[0] for x, y in itertools.pairwise(mine))
    nonempty = sum(1 for _n, lo, hi in named if hi > lo)
    if minimum is not None:
        assert len(parts) >= min(minimum, total)
    if num is not None and minimum is None:
        assert len(parts) == min(max(num, nonempty), total)
    if num is None and minimum is None and total:
        assert len(parts) == max(nonempty, min(64, -(-total // 10_000)))


def test_default_split_uses_the_cluster() -> None:
    # A micro-batch of 100,000 sequences is 10 tasks (not one).
    assert len(split_ranges([("S", 1, 100_001)])) == 10
    # minPartitions splits the largest ranges.
    parts = split_ranges([("A", 1, 1001), ("B", 1, 11)], min_partitions=4)
    assert len(parts) == 4
    assert [p for p in parts if p[0] == "B"] == [("B", 1, 11)]


# ----------------------------------------------------------------------------- push-down


def flt(kind: str, column: str, value: object) -> Any:
    """A stand-in of pyspark's filter class ``kind`` (recognised by name; 4.0 has none)."""
    return type(kind, (SimpleNamespace,), {})(attribute=(column,), value=value)


def test_push_subjects_and_sequences() -> None:
    filters = [
        flt("EqualTo", "subject", "orders.eu"),
        flt("GreaterThanOrEqual", "seq", 10),
        flt("LessThan", "seq", 20),
        flt("GreaterThan", "timestamp", datetime(2026, 1, 1, tzinfo=UTC)),
        flt("EqualTo", "data", b"x"),
    ]
    narrowing, left = push(filters, ())
    assert narrowing.subjects == ("orders.eu",)
    assert (narrowing.lo, narrowing.hi) == (10, 20)
    # From a minute before: a leader's clock may be behind another's.
    assert narrowing.after == datetime(2026, 1, 1, tzinfo=UTC) - CLOCK_MARGIN
    assert timedelta(seconds=60) == CLOCK_MARGIN
    assert left == [filters[3], filters[4]]  # the time is checked by Spark too
    assert not narrowing.empty


def test_push_in_like_and_contradictions() -> None:
    n, left = push(
        [flt("In", "subject", ["a.b", "a.c", "x.y"]), flt("StringStartsWith", "subject", "a.")], ()
    )
    assert n.subjects == ("a.b", "a.c")
    assert left == []
    n, left = push([flt("StringStartsWith", "subject", "orders.e")], ())
    assert n.subjects == ("orders.>",)
    assert len(left) == 1  # a partial token: narrowed, Spark filters exactly
    n, left = push([flt("StringStartsWith", "subject", "orders")], ())
    assert n.subjects is None
    assert len(left) == 1
    n, _ = push([flt("EqualTo", "subject", "a"), flt("EqualTo", "subject", "b")], ())
    assert n.empty
    n, _ = push([flt("GreaterThan", "seq", 10), flt("LessThanOrEqual", "seq", 10)], ())
    assert n.empty
    n, left = push([flt("In", "seq", [5, 9, 7])], ())
    assert (n.lo, n.hi) == (5, 10)
    assert len(left) == 1
    # Wildcards are never pushed as literal subjects.
    n, left = push([flt("EqualTo", "subject", "a.*")], ())
    assert n == Narrowing()
    assert len(left) == 1
    # With the subject option, only subjects it matches.
    n, _ = push([flt("In", "subject", ["a.b", "c.d"])], ("a.*",))
    assert n.subjects == ("a.b",)
    n, left = push([flt("StringStartsWith", "subject", "a.")], ("a.*",))
    assert n.subjects is None
    assert len(left) == 1
    n, _ = push([flt("In", "stream", ["A", "B"]), flt("EqualTo", "stream", "B")], ())
    assert n.streams == frozenset({"B"})


def test_push_times_outside_the_servers_clock() -> None:
    """The server stamps int64 nanoseconds since 1970 (1677-09-21 to 2262-04-11): a
    time filter outside it made the read fail (a bare OverflowError, or an error on
    an option the user never set) where Spark without push-down returns the rows."""
    for early in (datetime(1, 1, 1, tzinfo=UTC), datetime(1677, 9, 21, 0, 13, tzinfo=UTC)):
        n, left = push([flt("GreaterThanOrEqual", "timestamp", early)], ())
        assert n == Narrowing()  # every message is later: no narrowing
        assert len(left) == 1
    for late in (datetime(2262, 4, 12, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC)):
        n, left = push([flt("GreaterThan", "timestamp", late)], ())
        assert n.empty  # no message is stamped so late
        assert len(left) == 1
    last = datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC)  # the server's last µs
    n, _ = push([flt("GreaterThanOrEqual", "timestamp", last)], ())
    assert not n.empty
    assert n.after == last - CLOCK_MARGIN


@pytest.mark.parametrize(
    ("subject", "pattern", "match"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.*", True),
        ("a.b.c", "a.*", False),
        ("a.b.c", "a.>", True),
        ("a", "a.>", False),
        ("a.b", "*.*", True),
        ("a.b", "a", False),
    ],
)
def test_subject_matches(subject: str, pattern: str, match: bool) -> None:
    assert subject_matches(subject, pattern) is match


def test_epoch_milliseconds() -> None:
    o = parse_source_options({"stream": "S", "startingTimestamp": "0"}, streaming=False)
    assert o.starting_timestamp == EPOCH
    o = parse_source_options({"stream": "S", "startingTimestamp": "1500"}, streaming=False)
    assert o.starting_timestamp == EPOCH + timedelta(milliseconds=1500)


def test_every_call_spark_makes_shows_the_error_first() -> None:
    """Spark prints a source's error as its formatted traceback: each entry point Spark
    calls re-raises an aiojetstream error with one frame (``surfaced``). Three of the
    stream reader's did not (12 frames before the message)."""
    pytest.importorskip("pyspark")
    from aiojetstream.spark._kv import JetStreamKVDataSource, KVReader, KVWriter
    from aiojetstream.spark._source import BatchReader, JetStreamDataSource, StreamReader
    from aiojetstream.spark._write import StreamWriter, Writer

    plain = {"name", "stop", "pushFilters", "abort"}  # no I/O, nothing of ours to raise
    for cls in (
        JetStreamDataSource,
        BatchReader,
        StreamReader,
        JetStreamKVDataSource,
        KVReader,
        KVWriter,
        Writer,
        StreamWriter,
    ):
        for attr, value in vars(cls).items():
            if callable(value) and not attr.startswith("_") and attr not in plain:
                assert hasattr(value, "__wrapped__"), f"{cls.__name__}.{attr}"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("1.5", 1.5),
        ("1e3", 1000.0),  # plain seconds, as before
        ("30s", 30.0),
        ("1h30m", 5400.0),  # the library's one syntax
        ("2w", 1_209_600.0),
        ("100us", 0.0001),
        ("1.5h", 5400.0),
        ("15min", 900.0),  # Spark's own (Kafka's maxTriggerDelay)
        ("15MIN", 900.0),
        ("15M", 900.0),  # Spark reads capitals as their lower case: minutes
        ("100µs", 0.0001),
    ],
)
def test_duration_options_read_the_library_syntax_and_sparks(text: str, seconds: float) -> None:
    """``maxTriggerDelay`` had a syntax of its own (no ``1h30m``, ``2w``, ``15min``), and
    ``timeout`` / ``inactiveThreshold`` / ``retryTimeout`` took plain seconds only."""
    for option, field in (
        ("maxTriggerDelay", "max_trigger_delay"),
        ("inactiveThreshold", "inactive_threshold"),
        ("retryTimeout", "retry_timeout"),
    ):
        assert getattr(opts(stream="S", **{option: text}), field) == pytest.approx(seconds)
    assert opts(stream="S", timeout=text).connect.timeout == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["5 minutes", "1h30", "soon", "0", "-5s", "1y", "nan", "inf", "٣٠", "1_000", "1" * 5000 + "s"],
)
def test_duration_options_refuse_what_is_no_duration(text: str) -> None:
    for option in ("maxTriggerDelay", "inactiveThreshold", "retryTimeout", "timeout"):
        with pytest.raises(InvalidOptionError, match=f"option '{option}': expected positive"):
            opts(stream="S", **{option: text})

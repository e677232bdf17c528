"""The streaming reader's offset calls, driven as Spark's driver drives them, on a real server.

No Spark here: the calls Spark makes (``initialOffset``, ``latestOffset`` with
or without a start, ``partitions`` including the ``partitions(latest, latest)``
hand-over of a restart) are made directly, so the per-trigger limits can be
checked for both the Spark >= 4.2 protocol and the 4.0/4.1 one. The real-Spark
tests are in tests/spark/.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from aiojetstream import InvalidOptionError, JetStreamContext, StreamConfig
from aiojetstream.spark import DataLossError, JetStreamSparkWarning
from aiojetstream.spark._options import parse_source_options
from aiojetstream.spark._source import SequenceRange, StreamReader
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until_sync
from spark.spark_helpers import Nats


@pytest.fixture
def nats(nats_server: NatsServer) -> Iterator[Nats]:
    helper = Nats(nats_server.url)
    try:
        yield helper
    finally:
        helper.close()


def create(nats: Nats, *streams: str, count: int = 0, size: int = 1) -> None:
    async def work(js: JetStreamContext) -> None:
        for stream in streams:
            await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
            for i in range(count):
                await js.publish_async(f"{stream}.e", b"%d" % i + b"x" * (size - 1))
        await js.publish_async_complete()

    nats.run(work)


def publish(nats: Nats, stream: str, count: int) -> None:
    async def work(js: JetStreamContext) -> None:
        for i in range(count):
            await js.publish_async(f"{stream}.e", b"%d" % i)
        await js.publish_async_complete()

    nats.run(work)


def reader(url: str, **options: str) -> StreamReader:
    return StreamReader(parse_source_options({"servers": url, **options}, streaming=True))


def first_batch(r: StreamReader, protocol: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first batch's start and end, asked in the order the Spark version asks."""
    if protocol == "4.2+":
        start = r.initialOffset()
        return start, r.latestOffset(start, r.getDefaultReadLimit())
    end = r.latestOffset()  # Spark 4.0/4.1 ask for the first batch's end first
    return r.initialOffset(), end


def next_end(r: StreamReader, start: dict[str, Any], protocol: str) -> dict[str, Any]:
    """The next batch's end: Spark >= 4.2 passes the start; 4.0/4.1 do not."""
    if protocol == "4.2+":
        return r.latestOffset(start, r.getDefaultReadLimit())
    return r.latestOffset()


def seqs(offset: dict[str, Any]) -> dict[str, int]:
    if "stream" in offset:
        return {offset["stream"]: offset["seq"]}
    return {name: p["seq"] for name, p in offset["streams"].items()}


def ranges(parts: Any) -> list[tuple[str | None, int, int]]:
    return [(p.stream, p.start, p.end) for p in parts]


def test_pattern_picks_up_new_streams_from_their_first_message(nats: Nats) -> None:
    base = unique_name("PAT")
    a, b = f"{base}-A", f"{base}-B"
    create(nats, a, count=5)
    r = reader(nats.url, streamPattern=f"{base}-.*", startingOffsets="earliest")
    start = r.initialOffset()
    assert seqs(start) == {a: 1}
    end = r.latestOffset(start, None)
    assert seqs(end) == {a: 6}
    assert ranges(r.partitions(start, end)) == [(a, 1, 6)]
    create(nats, b, count=3)  # created after the query started
    nxt = r.latestOffset(end, None)
    assert seqs(nxt) == {a: 6, b: 4}
    assert ranges(r.partitions(end, nxt)) == [(b, 1, 4)]  # from its first message
    # A stream that does not match is never read.
    create(nats, f"X{base}-C", count=2)
    assert seqs(r.latestOffset(nxt, None)) == {a: 6, b: 4}


def test_pattern_stream_deleted_is_data_loss(nats: Nats) -> None:
    base = unique_name("DEL")
    a, b = f"{base}-A", f"{base}-B"
    create(nats, a, b, count=2)
    strict = reader(nats.url, streamPattern=f"{base}-.*", startingOffsets="earliest")
    start = strict.initialOffset()
    end = strict.latestOffset(start, None)
    nats.run(lambda js: js.delete_stream(b))
    with pytest.raises(DataLossError, match=f"stream '{b}'.*was deleted"):
        strict.latestOffset(end, None)
    lenient = reader(
        nats.url, streamPattern=f"{base}-.*", startingOffsets="earliest", failOnDataLoss="false"
    )
    with pytest.warns(JetStreamSparkWarning, match=f"'{b}'.*going on without it"):
        after = lenient.latestOffset(end, None)
    assert seqs(after) == {a: 3}


def test_the_one_stream_deleted_is_data_loss(nats: Nats) -> None:
    """The ``stream`` (or one of ``streams``) deleted under a running query was an
    error about the option ("does not exist") whatever ``failOnDataLoss`` said."""
    name = unique_name("DEL1")
    create(nats, name, count=2)
    strict = reader(nats.url, stream=name, startingOffsets="earliest")
    start = strict.initialOffset()
    end = strict.latestOffset(start, None)
    nats.run(lambda js: js.delete_stream(name))
    with pytest.raises(DataLossError, match=f"stream '{name}' was deleted"):
        strict.latestOffset(end, None)
    lenient = reader(nats.url, stream=name, startingOffsets="earliest", failOnDataLoss="false")
    with pytest.warns(JetStreamSparkWarning, match="going on without it"):
        after = lenient.latestOffset(end, None)
    assert lenient.partitions(end, after) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, not at every trigger
        assert lenient.latestOffset(after, None) == after
    create(nats, name, count=3)  # created again: read from its start
    with pytest.warns(JetStreamSparkWarning, match="created again.*from its first sequence"):
        nxt = lenient.latestOffset(after, None)
    assert ranges(lenient.partitions(after, nxt)) == [(name, 1, 4)]
    # A stream of the options that never existed is still the option's error.
    with pytest.raises(InvalidOptionError, match="does not exist"):
        reader(nats.url, stream=unique_name("NONE"), startingOffsets="earliest").initialOffset()


def test_each_stream_keeps_its_recreated_detection(nats: Nats) -> None:
    base = unique_name("REC")
    a, b = f"{base}-A", f"{base}-B"
    create(nats, a, b, count=3)
    r = reader(nats.url, streams=f"{a},{b}", startingOffsets="earliest")
    end = r.latestOffset(r.initialOffset(), None)
    nats.run(lambda js: js.delete_stream(b))
    create(nats, b, count=5)
    with pytest.raises(DataLossError, match=f"stream '{b}' was deleted and created again"):
        r.latestOffset(end, None)
    lenient = reader(
        nats.url, streams=f"{a},{b}", startingOffsets="earliest", failOnDataLoss="false"
    )
    with pytest.warns(JetStreamSparkWarning, match="from its first sequence"):
        nxt = lenient.latestOffset(end, None)
    assert seqs(nxt) == {a: 4, b: 6}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JetStreamSparkWarning)
        assert ranges(lenient.partitions(end, nxt)) == [(b, 1, 6)]


def test_a_stream_created_again_after_planning_is_not_read_as_the_range(nats: Nats) -> None:
    """Deleted and created again between a micro-batch's planning and its read tasks
    (queued, or retried): the tasks read the new stream's messages as the planned
    range of the old one, and the next batch read them again from its start."""
    name = unique_name("RECR")
    create(nats, name, count=5)
    for lenient in (False, True):
        options = {"stream": name, "startingOffsets": "earliest"}
        if lenient:
            options["failOnDataLoss"] = "false"
        r = reader(nats.url, **options)
        start = r.initialOffset()
        parts = r.partitions(start, r.latestOffset(start, r.getDefaultReadLimit()))
        assert all(isinstance(p, SequenceRange) and p.created for p in parts)
        nats.run(lambda js: js.delete_stream(name))
        create(nats, name, count=8)
        if not lenient:
            with pytest.raises(DataLossError, match="was deleted and created again"):
                [batch for p in parts for batch in r.read(p)]
        else:
            with pytest.warns(JetStreamSparkWarning, match="skipped"):
                assert [batch for p in parts for batch in r.read(p)] == []


def test_waiting_for_more_after_a_recreated_stream(nats: Nats) -> None:
    """``minOffsetsPerTrigger`` waiting while a stream was deleted and created again
    (failOnDataLoss=false): the offset planned kept the old stream's sequence, so the
    batch read the new stream up to it and the next one started there, skipping
    what was stored in between."""
    stream = unique_name("RCW")
    create(nats, stream, count=20)
    r = reader(
        nats.url,
        stream=stream,
        startingOffsets="earliest",
        minOffsetsPerTrigger="50",
        maxTriggerDelay="1h",
        failOnDataLoss="false",
    )
    start = r.initialOffset()
    first = r.latestOffset(start, r.getDefaultReadLimit())  # the first trigger: no wait
    assert seqs(first) == {stream: 21}
    nats.run(lambda js: js.delete_stream(stream))
    create(nats, stream, count=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JetStreamSparkWarning)
        waiting = r.latestOffset(first, r.getDefaultReadLimit())  # 5 < 50: no rows yet
        assert seqs(waiting) == {stream: 1}
        assert ranges(r.partitions(first, waiting)) == []
        publish(nats, stream, 60)
        end = r.latestOffset(waiting, r.getDefaultReadLimit())
        assert ranges(r.partitions(waiting, end)) == [(stream, 1, 66)]


def test_json_starting_offsets_per_stream(nats: Nats) -> None:
    base = unique_name("JS")
    a, b = f"{base}-A", f"{base}-B"
    create(nats, a, b, count=10)
    r = reader(nats.url, streams=f"{a},{b}", startingOffsets=f'{{"{a}": 4, "{b}": "latest"}}')
    start = r.initialOffset()
    assert seqs(start) == {a: 4, b: 11}


@pytest.mark.parametrize("protocol", ["4.2+", "4.0/4.1"])
def test_max_offsets_per_trigger_on_every_protocol(nats: Nats, protocol: str) -> None:
    base = unique_name("CAP")
    a, b = f"{base}-A", f"{base}-B"
    create(nats, a, count=300)
    create(nats, b, count=100)
    opts = {"streams": f"{a},{b}", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "40"}
    r = reader(nats.url, **opts)
    start, end = first_batch(r, protocol)
    seen = {a: 0, b: 0}
    batches = 0
    while end != start:
        parts = ranges(r.partitions(start, end))
        assert sum(hi - lo for _s, lo, hi in parts) <= 40
        for stream, lo, hi in parts:
            assert stream is not None
            seen[stream] += hi - lo
        start = end
        batches += 1
        # Spark >= 4.2 passes the start; 4.0/4.1 do not (the reader keeps it).
        end = (
            r.latestOffset(start, r.getDefaultReadLimit())
            if protocol == "4.2+"
            else (r.latestOffset())
        )
    assert seen == {a: 300, b: 100}
    assert batches == 10  # 400 / 40, shared 3:1 while both have messages waiting


@pytest.mark.parametrize("protocol", ["4.2+", "4.0/4.1"])
def test_a_replayed_first_batch_reads_the_same_range(nats: Nats, protocol: str) -> None:
    stream = unique_name("RPL")
    create(nats, stream, count=10)
    first = reader(nats.url, stream=stream, maxOffsetsPerTrigger="4")  # startingOffsets=latest
    if protocol == "4.2+":
        start = first.initialOffset()
        end = first.latestOffset(start, first.getDefaultReadLimit())
    else:
        end = first.latestOffset()
        start = first.initialOffset()
    assert seqs(start) == {stream: 11}
    publish(nats, stream, 6)  # 11..16
    end = (
        first.latestOffset(start, first.getDefaultReadLimit())
        if protocol == "4.2+"
        else (first.latestOffset())
    )
    assert seqs(end) == {stream: 15}
    # The batch failed before its commit; after a restart Spark replays it from a
    # new initialOffset(), which has moved on ("latest"): still [11, 15).
    publish(nats, stream, 5)
    again = reader(nats.url, stream=stream, maxOffsetsPerTrigger="4")
    replay_start = again.initialOffset()
    assert seqs(replay_start) == {stream: 22}
    assert ranges(again.partitions(replay_start, end)) == [(stream, 11, 15)]
    # The next batch goes on from the replayed end.
    nxt = again.latestOffset(end, again.getDefaultReadLimit())
    assert seqs(nxt) == {stream: 19}
    assert ranges(again.partitions(end, nxt)) == [(stream, 15, 19)]


def test_nothing_new_returns_the_start_itself(nats: Nats) -> None:
    stream = unique_name("SAME")
    create(nats, stream, count=3)
    r = reader(nats.url, stream=stream, startingOffsets="earliest")
    start = r.initialOffset()
    end = r.latestOffset(start, None)
    assert end["from"] == 1
    assert r.latestOffset(end, None) == end  # Spark then plans no batch
    assert r.latestOffset() == end


def test_restart_hands_the_offset_over_on_4_0(nats: Nats) -> None:
    stream = unique_name("RST")
    create(nats, stream, count=100)
    first = reader(nats.url, stream=stream, startingOffsets="earliest", maxRecordsPerTrigger="30")
    start = first.initialOffset()
    end = first.latestOffset()
    assert seqs(end) == {stream: 31}
    # A new driver process (restart): Spark 4.0/4.1 call setLatestSeenOffset,
    # which the Python runner turns into partitions(latest, latest).
    again = reader(nats.url, stream=stream, startingOffsets="earliest", maxRecordsPerTrigger="30")
    assert again.partitions(end, end) == []
    assert seqs(again.latestOffset()) == {stream: 61}
    del start


def test_min_offsets_waits_until_max_trigger_delay(nats: Nats) -> None:
    stream = unique_name("MIN")
    create(nats, stream, count=5)
    r = reader(
        nats.url,
        stream=stream,
        startingOffsets="earliest",
        minOffsetsPerTrigger="50",
        maxTriggerDelay="1s",
    )
    start = r.initialOffset()
    # As Kafka's: the first trigger of a (re)started query does not wait.
    first = r.latestOffset(start, r.getDefaultReadLimit())
    assert seqs(first) == {stream: 6}
    publish(nats, stream, 5)
    assert r.latestOffset(first, r.getDefaultReadLimit()) == first  # 5 < 50: wait
    publish(nats, stream, 60)
    end = r.latestOffset(first, r.getDefaultReadLimit())
    assert seqs(end) == {stream: 71}  # enough now
    publish(nats, stream, 5)
    assert r.latestOffset(end, r.getDefaultReadLimit()) == end
    # Past maxTriggerDelay since the last batch, what is there is taken.
    released: list[dict[str, Any]] = []

    def trigger() -> bool:
        released.append(r.latestOffset(end, r.getDefaultReadLimit()))
        return released[-1] != end

    wait_until_sync(trigger, timeout=10, message="maxTriggerDelay never released the batch")
    assert seqs(released[-1]) == {stream: 76}
    # The delay counts again from that batch.
    assert r.latestOffset(released[-1], r.getDefaultReadLimit()) == released[-1]


def test_max_bytes_per_trigger(nats: Nats) -> None:
    stream = unique_name("BYT")
    create(nats, stream, count=100, size=1000)
    r = reader(nats.url, stream=stream, startingOffsets="earliest", maxBytesPerTrigger="10000")
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    taken = seqs(end)[stream] - 1
    # About 10 messages of ~1 KB stored (with headers and subject): never the whole stream.
    assert 5 <= taken <= 10


def test_available_now_excludes_later_streams_and_messages(nats: Nats) -> None:
    base = unique_name("AVN")
    a, b = f"{base}-A", f"{base}-B"
    create(nats, a, count=10)
    r = reader(nats.url, streamPattern=f"{base}-.*", startingOffsets="earliest")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    publish(nats, a, 5)
    create(nats, b, count=5)
    assert seqs(r.latestOffset(start, r.getDefaultReadLimit())) == {a: 11}


def test_partition_repr_names_the_stream() -> None:
    assert repr(SequenceRange(1, 5, "S")) == "SequenceRange(1, 5, 'S')"


def test_offsets_of_the_previous_format_still_restart(nats: Nats) -> None:
    """Checkpoints written before multi-stream reads: no "from" (and, older, no "created")."""
    stream = unique_name("OLD")
    create(nats, stream, count=30)
    created = nats.run(lambda js: js.stream(stream)).cached_info.created.isoformat()
    r = reader(nats.url, stream=stream)
    old_start = {"stream": stream, "seq": 11, "created": created}
    old_end = {"stream": stream, "seq": 21, "created": created}
    # A batch planned before the upgrade, replayed after it.
    assert ranges(r.partitions(old_start, old_end)) == [(stream, 11, 21)]
    # The next batch, planned now, goes on from the old end.
    end = r.latestOffset(old_end, r.getDefaultReadLimit())
    assert end == {"stream": stream, "seq": 31, "created": created, "from": 21}
    assert ranges(r.partitions(old_end, end)) == [(stream, 21, 31)]
    # Without "created" (older still): read as it is.
    assert ranges(r.partitions({"stream": stream, "seq": 5}, {"stream": stream, "seq": 9})) == [
        (stream, 5, 9)
    ]


@pytest.mark.parametrize("protocol", ["4.2+", "4.0/4.1"])
def test_a_replayed_empty_first_batch_goes_on_from_its_offset(nats: Nats, protocol: str) -> None:
    """A query stopped during its first batch, which had nothing new (Spark runs it at
    once): the replay after the restart starts at a new initialOffset (latest: moved),
    and the end offset of that empty batch said nothing of its start: a false
    DataLossError ("ends at sequence 5 but the offset is 9") at every restart."""
    stream = unique_name("EMPTY")
    create(nats, stream, count=5)
    _start, end = first_batch(reader(nats.url, stream=stream), protocol)
    assert seqs(end) == {stream: 6}  # nothing new
    publish(nats, stream, 3)  # 6..8, while the query is down
    again = reader(nats.url, stream=stream)
    replay_start = again.initialOffset()
    assert seqs(replay_start) == {stream: 9}
    assert again.partitions(replay_start, end) == []
    nxt = again.latestOffset(end, again.getDefaultReadLimit())
    assert ranges(again.partitions(end, nxt)) == [(stream, 6, 9)]


def test_a_listed_stream_deleted_stays_data_loss(nats: Nats) -> None:
    """One of ``streams`` deleted: failOnDataLoss=false warned "going on without it",
    and the next trigger failed with "option 'streams': stream ... does not exist"; a
    restart failed so whatever failOnDataLoss said."""
    base = unique_name("LDEL")
    a, b = f"{base}-A", f"{base}-B"
    create(nats, a, b, count=2)
    lenient = reader(nats.url, streams=f"{a},{b}", failOnDataLoss="false")
    start = lenient.initialOffset()
    end = lenient.latestOffset(start, None)
    nats.run(lambda js: js.delete_stream(b))
    with pytest.warns(JetStreamSparkWarning, match=f"'{b}'.*going on without it"):
        after = lenient.latestOffset(end, None)
    assert seqs(after) == {a: 3, b: 3}  # b keeps its offset
    publish(nats, a, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        nxt = lenient.latestOffset(after, None)
        assert seqs(nxt) == {a: 5, b: 3}
        assert ranges(lenient.partitions(after, nxt)) == [(a, 3, 5)]
        lenient.reportLatestOffset()
    # A restart from that checkpoint: still data loss (a warning here).
    again = reader(nats.url, streams=f"{a},{b}", failOnDataLoss="false")
    with pytest.warns(JetStreamSparkWarning, match=f"'{b}'.*going on without it"):
        assert seqs(again.latestOffset(nxt, None)) == {a: 5, b: 3}
    strict = reader(nats.url, streams=f"{a},{b}")
    with pytest.raises(DataLossError, match=f"stream '{b}'.*was deleted"):
        strict.latestOffset(nxt, None)
    # A stream the query never read that does not exist: the option's error, for a
    # new query (availableNow included) and for one added to the list at a restart.
    with pytest.raises(InvalidOptionError, match="does not exist"):
        reader(nats.url, streams=f"{a},{b}").initialOffset()
    with pytest.raises(InvalidOptionError, match="does not exist"):
        reader(nats.url, streams=f"{a},{b}").prepareForTriggerAvailableNow()
    typo = f"{base}-TYPO"
    with pytest.raises(InvalidOptionError, match=f"'{typo}' does not exist"):
        reader(nats.url, streams=f"{a},{b},{typo}", failOnDataLoss="false").latestOffset(nxt, None)


def test_pattern_offsets_must_name_streams_that_exist(nats: Nats) -> None:
    """With streamPattern, a per-stream offset naming no stream (Q-01 for Q-1) was
    ignored: the stream meant was read from the default offset (rows skipped)."""
    base = unique_name("PNAME")
    create(nats, f"{base}-1", count=3)
    typo = reader(nats.url, streamPattern=f"{base}-.*", startingOffsets=f'{{"{base}-01": 2}}')
    with pytest.raises(InvalidOptionError, match=f"'{base}-01'.*does not exist"):
        typo.initialOffset()
    with pytest.raises(InvalidOptionError, match="before 'startingOffsets'"):
        parse_source_options(
            {
                "servers": nats.url,
                "streamPattern": f"{base}-.*",
                "startingOffsets": "5",
                "endingOffsets": f'{{"{base}-1": 3}}',
            },
            streaming=False,
        )

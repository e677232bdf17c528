"""Batch direct get (ADR-31) against a real server: get_batch and get_last_msgs_for."""

from __future__ import annotations

import asyncio
import gc
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aiojetstream import (
    BadRequestError,
    DirectBatch,
    FeatureNotSupportedError,
    InvalidOptionError,
    JetStreamContext,
    NoRespondersError,
    RawStreamMessage,
    RePublish,
    Stream,
    StreamConfig,
    StreamNotFoundError,
    TooManyResultsError,
)
from aiojetstream._models import NanoDatetime
from helpers import unique_name, wait_until


async def dg_stream(js: JetStreamContext) -> tuple[Stream, str]:
    """A stream with seqs 1-8 on <p>.A/B/C/D (A B C A B C D D)."""
    name = unique_name("DG")
    prefix = name.lower()
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{prefix}.>"], allow_direct=True)
    )
    for i, s in enumerate("ABCABCDD"):
        await js.publish(f"{prefix}.{s}", f"{s.lower()}{i}".encode())
    return stream, prefix


async def collect(batch: DirectBatch) -> list[RawStreamMessage]:
    return [m async for m in batch]


async def test_get_batch_reads_in_order_and_ends_at_eob(js: JetStreamContext) -> None:
    stream, p = await dg_stream(js)
    batch = stream.get_batch(3)
    msgs = await collect(batch)
    assert [m.seq for m in msgs] == [1, 2, 3]
    assert [m.subject for m in msgs] == [f"{p}.A", f"{p}.B", f"{p}.C"]
    assert msgs[0].data == b"a0"
    assert msgs[0].headers is None
    assert batch.num_pending == 5
    assert batch.last_seq == 3
    assert all(m.time.tzinfo is not None for m in msgs)


async def test_get_batch_by_subject_seq_and_max_bytes(js: JetStreamContext) -> None:
    stream, p = await dg_stream(js)
    msgs = await collect(stream.get_batch(10, subject=f"{p}.A"))
    assert [m.seq for m in msgs] == [1, 4]
    msgs = await collect(stream.get_batch(10, seq=6))
    assert [m.seq for m in msgs] == [6, 7, 8]
    # The message that crosses max_bytes is still sent.
    msgs = await collect(stream.get_batch(10, max_bytes=1))
    assert [m.seq for m in msgs] == [1]


async def test_get_batch_start_time(js: JetStreamContext) -> None:
    stream, _ = await dg_stream(js)
    fifth = await stream.get_msg(5)
    msgs = await collect(stream.get_batch(10, start_time=fifth.time))
    assert [m.seq for m in msgs] == [5, 6, 7, 8]  # from the fifth's time on


async def test_get_batch_up_to_is_enforced_client_side(js: JetStreamContext) -> None:
    stream, _p = await dg_stream(js)
    batch = stream.get_batch(10, up_to_seq=4)
    msgs = await collect(batch)
    assert [m.seq for m in msgs] == [1, 2, 3, 4]
    # The message past the bound (5), which ended the batch, was not yielded: a
    # next batch from last_seq + 1 starts with it.
    assert batch.last_seq == 4
    assert [m.seq for m in await collect(stream.get_batch(1, seq=batch.last_seq + 1))] == [5]
    # up_to_time is exclusive, as the server's own (multi_last) is.
    third = await stream.get_msg(3)
    batch = stream.get_batch(10, up_to_time=third.time)
    msgs = await collect(batch)
    assert [m.seq for m in msgs] == [1, 2]
    assert batch.last_seq == 2


async def test_get_batch_keeps_nanoseconds(js: JetStreamContext) -> None:
    stream, _ = await dg_stream(js)
    msgs = await collect(stream.get_batch(8))
    # Some of eight timestamps have a non-zero sub-microsecond part (odds of all
    # zero: 1e-24); those come back as NanoDatetime, equal to get_msg's.
    nanos = [m for m in msgs if isinstance(m.time, NanoDatetime)]
    assert nanos
    single = await stream.get_msg(nanos[0].seq)
    assert isinstance(single.time, NanoDatetime)
    assert single.time.nanosecond == nanos[0].time.nanosecond  # type: ignore[attr-defined]


async def test_deleted_messages_are_skipped(js: JetStreamContext) -> None:
    stream, _ = await dg_stream(js)
    await stream.delete_msg(3)
    msgs = await collect(stream.get_batch(3, seq=2))
    assert [m.seq for m in msgs] == [2, 4, 5]


async def test_nothing_matching_is_an_empty_iteration(js: JetStreamContext) -> None:
    stream, p = await dg_stream(js)
    assert await collect(stream.get_batch(5, seq=100)) == []
    assert await collect(stream.get_last_msgs_for([f"{p}.none.*"])) == []


async def test_get_last_msgs_for(js: JetStreamContext) -> None:
    stream, p = await dg_stream(js)
    batch = stream.get_last_msgs_for(f"{p}.*")
    msgs = await collect(batch)
    assert [(m.subject, m.seq) for m in msgs] == [
        (f"{p}.A", 4),
        (f"{p}.B", 5),
        (f"{p}.C", 6),
        (f"{p}.D", 8),
    ]
    assert batch.up_to_seq == 8
    assert batch.num_pending == 0
    msgs = await collect(stream.get_last_msgs_for([f"{p}.A", f"{p}.C"], up_to_seq=4))
    assert [(m.subject, m.seq) for m in msgs] == [(f"{p}.C", 3), (f"{p}.A", 4)]
    third = await stream.get_msg(3)
    msgs = await collect(stream.get_last_msgs_for([f"{p}.*"], up_to_time=third.time))
    assert [m.seq for m in msgs] == [1, 2]  # the server leaves out a message stored at T
    fourth = await stream.get_msg(4)
    msgs = await collect(stream.get_last_msgs_for([f"{p}.*"], up_to_time=fourth.time))
    assert [m.seq for m in msgs] == [1, 2, 3]
    page = stream.get_last_msgs_for([f"{p}.*"], batch=2)
    assert [m.seq for m in await collect(page)] == [4, 5]
    assert page.num_pending == 2
    assert page.up_to_seq == 8
    # The rest: from the page's last sequence + 1, as of the same sequence.
    rest = stream.get_last_msgs_for([f"{p}.*"], seq=page.last_seq + 1, up_to_seq=8)
    assert [m.seq for m in await collect(rest)] == [6, 8]
    assert rest.num_pending == 0


async def test_get_last_msgs_for_pages_by_bytes(js: JetStreamContext) -> None:
    """``max_bytes`` cuts a reply; ``seq`` continues it, values as of one sequence."""
    name = unique_name("DGB")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], allow_direct=True)
    )
    for i in range(20):
        await js.publish(f"{name}.{i}", b"x" * 1000)
    for i in range(5):
        await js.publish(f"{name}.{i}", b"y" * 1000)  # past the sequence read as of
    subjects = [f"{name}.{i}" for i in range(20)]
    seqs: list[int] = []
    start: int | None = None
    pages = 0
    while True:
        page = stream.get_last_msgs_for(subjects, up_to_seq=20, seq=start, max_bytes=5000)
        msgs = await collect(page)
        assert {m.data[:1] for m in msgs} == {b"x"}
        seqs += [m.seq for m in msgs]
        pages += 1
        if not page.num_pending:
            break
        start = page.last_seq + 1
    assert seqs == list(range(1, 21))
    assert pages == 4  # 5 messages of 1 kB a reply


async def test_too_many_subjects(js: JetStreamContext) -> None:
    name = unique_name("MANY")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], allow_direct=True)
    )
    for i in range(1030):
        await js.publish_async(f"{name}.{i}", b"x")
    await js.publish_async_complete(timeout=30)
    with pytest.raises(TooManyResultsError) as info:
        await collect(stream.get_last_msgs_for(f"{name}.*", batch=5))
    assert info.value.code == 413
    # No count cap on a plain batch: all 1,030 arrive.
    assert len(await collect(stream.get_batch(5000))) == 1030


async def test_bad_request_status_is_typed(js: JetStreamContext) -> None:
    stream, _ = await dg_stream(js)
    # The client refuses what it knows the server refuses; a body built by hand
    # shows how the server's 408 is reported.
    bad = DirectBatch(js._api, stream.name, {"batch": 3})
    with pytest.raises(BadRequestError) as info:
        await collect(bad)
    assert info.value.code == 408


async def test_stream_without_direct_get(js: JetStreamContext) -> None:
    name = unique_name("NODIRECT")
    stream = await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    await js.publish(f"{name}.a", b"x")
    with pytest.raises(NoRespondersError, match="allow_direct"):
        await collect(stream.get_batch(2))


async def test_invalid_options_raise_before_sending(js: JetStreamContext) -> None:
    stream, _ = await dg_stream(js)
    with pytest.raises(InvalidOptionError):
        stream.get_batch(1, seq=1, start_time=datetime.now(UTC))
    with pytest.raises(InvalidOptionError):
        stream.get_last_msgs_for(["a"], up_to_seq=1, up_to_time=datetime.now(UTC))
    for bad in ({"seq": 0}, {"max_bytes": -1}, {"seq": True}):
        with pytest.raises(InvalidOptionError):
            stream.get_last_msgs_for(["a"], **bad)


async def test_early_exit_releases_the_inbox(js: JetStreamContext) -> None:
    stream, _ = await dg_stream(js)
    async with stream.get_batch(8) as batch:
        async for msg in batch:
            assert msg.seq == 1
            break
    assert batch._sub is None
    # A second iteration of a finished batch yields nothing.
    assert await collect(batch) == []


async def test_old_server_is_refused(js: JetStreamContext) -> None:
    stream, _ = await dg_stream(js)
    js._api.level = 0  # what a 2.10 server reports
    try:
        with pytest.raises(FeatureNotSupportedError) as info:
            await collect(stream.get_batch(1))
    finally:
        js._api.level = None
    assert info.value.server_version == "2.11"


async def test_timeout_is_bounded(js: JetStreamContext) -> None:
    stream, _ = await dg_stream(js)
    start = datetime.now(UTC)
    # A stream name nobody serves, on a subject with a subscriber that never answers.
    sub = await js.nc.subscribe(f"$JS.API.DIRECT.GET.{stream.name}X")
    try:
        silent = DirectBatch(js._api, f"{stream.name}X", {"seq": 1, "batch": 1}, timeout=0.3)
        with pytest.raises(TimeoutError):
            await collect(silent)
    finally:
        await sub.unsubscribe()
    assert datetime.now(UTC) - start < timedelta(seconds=5)


@pytest.mark.parametrize("how", ["get_batch", "get_last_msgs_for"])
async def test_a_batch_left_early_releases_its_subscription(js: JetStreamContext, how: str) -> None:
    """``async for ... : break`` without ``async with``: the inbox subscription and the
    buffered replies are released once the batch is dropped (they stayed until the
    connection closed: the subscription's handler kept the batch alive)."""
    stream, p = await dg_stream(js)
    subscriptions = js.nc._subs  # nats-py's table of live subscriptions
    before = len(subscriptions)
    for _ in range(10):
        batch = stream.get_batch(8) if how == "get_batch" else stream.get_last_msgs_for(f"{p}.>")
        async for _msg in batch:
            break
        del batch
    gc.collect()
    await wait_until(lambda: len(subscriptions) == before, 10, message=f"{len(subscriptions)}")
    live = [o for o in gc.get_objects() if isinstance(o, DirectBatch)]
    assert live == []


async def test_a_missing_stream_is_stream_not_found(js: JetStreamContext) -> None:
    """A batch get on a stream that does not exist (any more): StreamNotFoundError, as
    get_msg, not NoRespondersError blaming allow_direct (the 503 is the same for both)."""
    stream, p = await dg_stream(js)
    await js.delete_stream(stream.name)
    with pytest.raises(StreamNotFoundError):
        await collect(stream.get_batch(2))
    with pytest.raises(StreamNotFoundError):
        await collect(stream.get_last_msgs_for(f"{p}.>"))


async def test_a_stream_of_republished_messages_reads(js: JetStreamContext) -> None:
    """Republished messages stored by another stream carry Nats-Stream, Nats-Sequence,
    ... of their origin; a direct get reply adds the same headers again. The two
    values were joined ("1, 1") and every read failed with "direct get reply without
    metadata". The reply's own values are the last; the stored ones stay headers."""
    base = unique_name("REP")
    dst = await js.create_stream(
        StreamConfig(name=f"{base}-DST", subjects=[f"{base}.dst.>"], allow_direct=True)
    )
    await js.create_stream(
        StreamConfig(
            name=f"{base}-SRC",
            subjects=[f"{base}.src.>"],
            republish=RePublish(src=f"{base}.src.>", dest=f"{base}.dst.>"),
        )
    )
    for i in range(3):
        await js.publish(f"{base}.src.{i}", b"%d" % i)

    async def stored() -> bool:
        return (await dst.info()).state.messages == 3

    await wait_until(stored, timeout=10)
    got = await collect(dst.get_batch(10))
    assert [(m.seq, m.subject, m.data) for m in got] == [
        (i + 1, f"{base}.dst.{i}", b"%d" % i) for i in range(3)
    ]
    for i, m in enumerate(got):
        assert m.headers is not None
        assert m.headers["Nats-Stream"] == f"{base}-SRC"
        assert m.headers["Nats-Sequence"] == str(i + 1)
        assert m.headers["Nats-Subject"] == f"{base}.src.{i}"
        assert "Nats-Last-Sequence" in m.headers  # the republish's own, kept
    one = await dst.get_msg(2)
    assert (one.seq, one.subject, one.data) == (2, f"{base}.dst.1", b"1")
    assert one.headers is not None
    assert one.headers["Nats-Stream"] == f"{base}-SRC"
    assert one.headers == got[1].headers  # a single get keeps the same stored headers
    last = await dst.get_last_msg_for_subject(f"{base}.dst.2")
    assert (last.seq, last.data) == (3, b"2")


async def test_paging_multi_last_on_a_2_11_server_keeps_the_last_subject(
    js: JetStreamContext,
) -> None:
    """nats-server 2.11 (up to 2.11.17) sends a cut ``multi_last`` reply's EOB with a
    ``Nats-Num-Pending`` one too low (fixed in 2.12): with one subject left it said 0,
    and docs/batch-get.md's paging loop ended without it. Each message's count is
    right; the batch takes the last one's. No 2.11 binary here: a subscriber on the
    stream's direct-get subject (the stream does not allow direct gets, so the server
    does not answer) replies with the frames of 2.11's ``getDirectMulti``. The handle is
    bound while the stream allows them: one that knows it does not refuses before
    sending."""
    name = unique_name("DG211")
    config = StreamConfig(name=name, subjects=[f"{name}.>"], allow_direct=True)
    stream = await js.create_stream(config)
    await js.update_stream(config.model_copy(update={"allow_direct": False}))
    assert stream.cached_info.config.allow_direct
    lasts = [(4, f"{name}.a"), (5, f"{name}.b"), (6, f"{name}.c")]

    def frames(req: dict[str, Any]) -> list[tuple[bytes, bytes]]:
        """server/stream.go getDirectMulti as of v2.11.17, for ``seq`` and ``batch``."""
        pending, last, sent, out = len(lasts) - 1, 0, 0, []
        for seq, subject in lasts:
            if seq < req.get("seq", 0):
                pending = max(pending - 1, 0)
                continue
            hdr = (
                f"NATS/1.0\r\nNats-Stream: {name}\r\nNats-Subject: {subject}\r\n"
                f"Nats-Sequence: {seq}\r\nNats-Time-Stamp: 2026-11-30T01:02:03.000000004Z\r\n"
                f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n\r\n"
            )
            pending = max(pending - 1, 0)
            last = seq
            out.append((hdr.encode(), b"v%d" % seq))
            sent += 1
            if sent >= req.get("batch", 0) > 0:
                break
        eob = (
            f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\n"
            f"Nats-Last-Sequence: {last}\r\nNats-UpTo-Sequence: 6\r\n\r\n"
        )
        return [*out, (eob.encode(), b"")]

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A raw connection (a status line like ``204 EOB`` needs raw HPUB)."""
        while line := await reader.readline():
            parts = line.split()
            if parts[:1] == [b"PING"]:
                writer.write(b"PONG\r\n")
            elif parts[:1] in ([b"MSG"], [b"HMSG"]):
                body = (await reader.readexactly(int(parts[-1]) + 2))[:-2]
                if parts[0] == b"HMSG":
                    body = body[int(parts[-2]) :]
                for hdr, data in frames(json.loads(body)):
                    size = len(hdr) + len(data)
                    writer.write(
                        b"HPUB %s %d %d\r\n%s%s\r\n" % (parts[3], len(hdr), size, hdr, data)
                    )

    host, port = js.nc.connected_url.netloc.split(":")  # type: ignore[union-attr]
    reader, writer = await asyncio.open_connection(host, int(port))
    await reader.readline()  # INFO
    writer.write(
        b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n'
        b"SUB $JS.API.DIRECT.GET.%s 1\r\nPING\r\n" % name.encode()
    )
    assert await reader.readline() == b"PONG\r\n"
    responder = asyncio.create_task(respond(reader, writer))
    try:
        for batch in (1, 2):
            values: dict[str, bytes] = {}
            page = stream.get_last_msgs_for([f"{name}.*"], batch=batch)
            while True:  # docs/batch-get.md's loop
                values.update({m.subject: m.data async for m in page})
                if not page.num_pending:
                    break
                page = stream.get_last_msgs_for(
                    [f"{name}.*"], batch=batch, up_to_seq=page.up_to_seq, seq=page.last_seq + 1
                )
            assert values == {s: b"v%d" % q for q, s in lasts}, batch
    finally:
        responder.cancel()
        writer.close()

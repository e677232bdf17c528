"""Atomic batch publish (ADR-50) against a real server: commit, discard and every error code."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    AtomicPublishDisabledError,
    AtomicPublishError,
    BatchClosedError,
    BatchCommitInvalidError,
    BatchDuplicateMsgIdError,
    BatchIdInvalidError,
    BatchIncompleteError,
    BatchSequenceMissingError,
    BatchTooLargeError,
    BatchUnsupportedHeaderError,
    FeatureNotSupportedError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamContext,
    JetStreamTimeoutError,
    PersistMode,
    Stream,
    StreamConfig,
    StreamConfigError,
    StreamSource,
    TooManyInflightBatchesError,
    WrongLastSequenceError,
)
from aiojetstream.testing import NatsServer
from helpers import cancel_after, unique_name, wait_until


async def atomic_stream(js: JetStreamContext, **extra: Any) -> tuple[Stream, str]:
    name = unique_name("AB")
    p = name.lower()
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{p}.>"], allow_atomic=True, **extra)
    )
    return stream, p


async def last_seq(stream: Stream) -> int:
    return (await stream.info()).state.last_seq


async def test_commit_stores_all(js: JetStreamContext) -> None:
    stream, p = await atomic_stream(js)
    await js.publish(f"{p}.before", b"0")
    batch = js.atomic_batch()
    await batch.add(f"{p}.a", b"1", headers={"X-N": "1"}, expected_last_sequence=1)
    await batch.add(f"{p}.b", b"2", msg_id="m2")
    assert await last_seq(stream) == 1  # nothing stored before the commit
    ack = await batch.commit(f"{p}.c", b"3")
    assert (ack.stream, ack.seq, ack.batch_id, ack.batch_size) == (
        stream.name,
        4,
        batch.batch_id,
        3,
    )
    assert ack.domain is None
    assert batch.is_closed
    msg = await stream.get_msg(2)
    assert msg.data == b"1"
    assert msg.headers is not None
    assert msg.headers["X-N"] == "1"
    assert msg.headers["Nats-Batch-Id"] == batch.batch_id
    assert (await stream.get_msg(4)).headers["Nats-Batch-Commit"] == "1"  # type: ignore[index]
    with pytest.raises(BatchClosedError):
        await batch.add(f"{p}.d", b"4")


async def test_concurrent_first_adds_send_one_first_message(
    js: JetStreamContext, nats_url: str
) -> None:
    """Two adds started together on a fresh context: the second is not sent as a first."""
    stream, p = await atomic_stream(js)
    # A context that has not read the server's API level yet: the first add
    # asks the server (a suspension) before it sends anything.
    async with await aiojetstream.connect(nats_url, timeout=2) as fresh:
        batch = fresh.atomic_batch()
        await asyncio.wait_for(
            asyncio.gather(batch.add(f"{p}.a", b"1"), batch.add(f"{p}.b", b"2")), 10
        )
        ack = await batch.commit(f"{p}.c", b"3")
    assert ack.batch_size == 3
    assert await last_seq(stream) == 3
    assert sorted([(await stream.get_msg(s)).data for s in (1, 2)]) == [b"1", b"2"]


async def test_a_no_ack_stream_says_why_the_first_add_timed_out(js: JetStreamContext) -> None:
    """A ``no_ack`` stream never answers a batch's messages: the first add timed out
    with a bare "timed out waiting for a reply", which did not say why."""
    stream, p = await atomic_stream(js, no_ack=True)
    batch = js.atomic_batch()
    with pytest.raises(JetStreamTimeoutError, match="no_ack never does"):
        await batch.add(f"{p}.a", b"1", timeout=0.5)
    with pytest.raises(BatchClosedError):
        await batch.add(f"{p}.a", b"2")
    assert await last_seq(stream) == 0


async def test_single_message_commit(js: JetStreamContext) -> None:
    _, p = await atomic_stream(js)
    ack = await js.atomic_batch().commit(f"{p}.only")
    assert ack.batch_size == 1


async def test_discard_and_context_manager(js: JetStreamContext) -> None:
    stream, p = await atomic_stream(js)
    batch = js.atomic_batch()
    await batch.add(f"{p}.a", b"1")
    batch.discard()
    batch.discard()
    with pytest.raises(BatchClosedError):
        await batch.commit(f"{p}.b")
    async with js.atomic_batch() as other:
        await other.add(f"{p}.a", b"1")
    assert other.is_closed
    assert await last_seq(stream) == 0


async def test_a_discarded_batch_is_released_on_the_server_at_once(
    js: JetStreamContext,
) -> None:
    """A stream takes 50 open batches, and the server would hold each discarded one for
    10 s: discarding releases it, so 50 discarded batches do not block a 51st."""
    stream, p = await atomic_stream(js)
    for i in range(50):
        if i % 2:
            batch = js.atomic_batch()
            await batch.add(f"{p}.a", b"1")
            await batch.add(f"{p}.b", b"2")
            batch.discard()
        else:
            async with js.atomic_batch() as batch:
                await batch.add(f"{p}.a", b"1")
    again = js.atomic_batch()
    await again.add(f"{p}.a", b"kept")  # TooManyInflightBatchesError if they were open
    ack = await again.commit(f"{p}.b", b"kept")
    assert ack.batch_size == 2
    assert await last_seq(stream) == 2  # nothing of the discarded batches was stored


async def test_a_cancelled_call_releases_the_batch_on_the_server(js: JetStreamContext) -> None:
    """A first add cancelled while the stream's answer was on its way closed the batch,
    and leaving ``async with`` then sent nothing: the server held each such batch for
    10 s, and 50 of them made every new batch on the stream fail with
    TooManyInflightBatchesError. An add or commit cancelled at any point releases it."""
    stream, p = await atomic_stream(js)
    async with js.atomic_batch() as warm:  # the API level read, the request inbox up
        await warm.add(f"{p}.w", b"1")
        await warm.commit(f"{p}.w", b"2")
    seen: dict[str, list[tuple[str, bool]]] = {}

    async def note(msg: Any) -> None:
        hdrs = msg.headers or {}
        seen.setdefault(hdrs["Nats-Batch-Id"], []).append(
            (hdrs["Nats-Batch-Sequence"], "Nats-Batch-Commit" in hdrs)
        )

    sub = await js.nc.subscribe(f"{p}.*", cb=note)
    batches: list[aiojetstream.AtomicBatch] = []

    async def first_add() -> None:
        async with js.atomic_batch() as batch:
            batches.append(batch)
            await batch.add(f"{p}.a", b"first")

    async def cancelled_call(stage: int, n: int) -> None:
        """Stage 0: the first add cancelled after n iterations; 1: the second; 2: the commit."""
        async with js.atomic_batch() as batch:
            batches.append(batch)
            for i in range(stage):
                await batch.add(f"{p}.a", str(i).encode())
            if stage < 2:
                await cancel_after(batch.add(f"{p}.a", b"cancelled"), n)
            else:
                await cancel_after(batch.commit(f"{p}.c", b"cancelled"), n)

    cancelled = 0
    for _ in range(50):  # cancelled in the loop iteration that sent the first message
        cancelled += await cancel_after(first_add(), 0)
    assert cancelled == 50
    for stage in range(3):
        for n in range(4):
            await cancelled_call(stage, n)

    def ended(batch: aiojetstream.AtomicBatch) -> bool:
        # Committed, or released by a message skipping a batch sequence.
        got = seen.get(batch.batch_id, [])
        return any(commit or int(seq) == batch.size + 2 for seq, commit in got)

    await wait_until(
        lambda: all(ended(b) for b in batches if b.size),
        message="every batch that sent a message committed or released",
    )
    await sub.unsubscribe()
    assert all(b.is_closed for b in batches)
    again = js.atomic_batch()
    await again.add(f"{p}.a", b"kept")  # TooManyInflightBatchesError if they were open
    await again.commit(f"{p}.b", b"kept")
    # The releases undid no commit: the committed batches (3 messages each) and these.
    commits = sum(1 for got in seen.values() for _, commit in got if commit)
    assert commits
    assert (await stream.info()).state.messages == 2 + 3 * commits + 2


async def test_a_server_configured_for_larger_batches_takes_max_messages() -> None:
    """jetstream.limits.batch.max_msgs raises the server's limit; max_messages the check's."""
    config = {"jetstream": {"limits": {"batch": {"max_msgs": 2000}}}}
    async with NatsServer(config=config) as server:
        js = await aiojetstream.connect(server.url)
        try:
            stream, p = await atomic_stream(js)
            batch = js.atomic_batch(max_messages=1500)
            for _ in range(1499):
                await batch.add(f"{p}.m", b"x")
            ack = await batch.commit(f"{p}.m", b"last")
            assert (ack.seq, ack.batch_size) == (1500, 1500)
            assert (await stream.info()).state.messages == 1500
            small = js.atomic_batch(max_messages=2)
            await small.add(f"{p}.n")
            await small.add(f"{p}.n")
            with pytest.raises(BatchTooLargeError, match="at most 2 messages"):
                await small.commit(f"{p}.n")  # refused before sending
            small.discard()
            assert (await stream.info()).state.messages == 1500
        finally:
            await js.close()
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(InvalidOptionError, match="max_messages"):
            js.atomic_batch(max_messages=bad)  # type: ignore[arg-type]


async def test_limit_is_checked_before_sending(js: JetStreamContext) -> None:
    stream, p = await atomic_stream(js)
    batch = js.atomic_batch()
    for i in range(999):
        await batch.add(f"{p}.m", str(i).encode())
    ack = await batch.commit(f"{p}.m", b"last")  # the 1,000th
    assert ack.batch_size == 1000
    assert await last_seq(stream) == 1000
    full = js.atomic_batch()
    for _ in range(1000):
        await full.add(f"{p}.n")
    with pytest.raises(BatchTooLargeError) as info:
        await full.commit(f"{p}.n")
    assert info.value.err_code == 10199
    # Refused before sending: the batch stays open (docs/atomic-batch.md), to discard.
    assert not full.is_closed
    assert full.size == 1000
    full.discard()
    assert full.is_closed
    assert await last_seq(stream) == 1000  # nothing of it stored


async def test_client_side_checks(js: JetStreamContext) -> None:
    _, p = await atomic_stream(js)
    batch = js.atomic_batch()
    await batch.add(f"{p}.a")
    with pytest.raises(InvalidOptionError):
        await batch.add(f"{p}.b", expected_last_sequence=1)
    with pytest.raises(InvalidOptionError):
        await batch.add(f"{p}.*")
    # Refused input does not count: the batch goes on.
    ack = await batch.commit(f"{p}.c")
    assert ack.batch_size == 2


@pytest.mark.parametrize("bad", [-1, 0, float("nan"), "5 s"], ids=repr)
async def test_a_bad_timeout_leaves_the_batch_as_it_was(js: JetStreamContext, bad: object) -> None:
    """The timeout was checked only once the first message or the commit had marked
    the batch sent (closed): InvalidOptionError, and then BatchClosedError."""
    stream, p = await atomic_stream(js)
    batch = js.atomic_batch()
    with pytest.raises(InvalidOptionError, match="timeout"):
        await batch.add(f"{p}.a", b"0", timeout=bad)  # type: ignore[arg-type]
    assert (batch.size, batch.is_closed) == (0, False)
    await batch.add(f"{p}.a", b"1")
    with pytest.raises(InvalidOptionError, match="timeout"):
        await batch.add(f"{p}.b", b"x", timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="timeout"):
        await batch.commit(f"{p}.c", b"x", timeout=bad)  # type: ignore[arg-type]
    assert (batch.size, batch.is_closed) == (1, False)
    ack = await batch.commit(f"{p}.c", b"2")
    assert (ack.seq, ack.batch_size) == (2, 2)
    assert [(await stream.get_msg(s)).data for s in (1, 2)] == [b"1", b"2"]


@pytest.mark.parametrize(
    "header",
    [
        "Nats-Batch-Commit",
        "nats-batch-commit",
        "Nats-Batch-Id",
        "NATS-BATCH-ID",
        "Nats-Batch-Sequence",
        "nats-batch-sequence",
    ],
)
async def test_batch_headers_are_refused_before_sending(js: JetStreamContext, header: str) -> None:
    """A user header named like the batch's own (any case) would end or split the batch."""
    stream, p = await atomic_stream(js)
    batch = js.atomic_batch()
    value = {"nats-batch-commit": "1", "nats-batch-id": "other"}.get(header.lower(), "1")
    # On the first message (nothing sent yet), on a later one and on the commit.
    with pytest.raises(InvalidOptionError, match=header):
        await batch.add(f"{p}.a", b"0", headers={header: value})
    assert batch.size == 0
    await batch.add(f"{p}.a", b"1")
    with pytest.raises(InvalidOptionError, match=header):
        await batch.add(f"{p}.b", b"x", headers={"X-Ok": "1", header: value})
    with pytest.raises(InvalidOptionError, match=header):
        await batch.commit(f"{p}.c", b"x", headers={header: value})
    assert await last_seq(stream) == 0  # nothing stored: no message ended the batch
    # The refusals left the batch as it was: it goes on and commits whole.
    assert (batch.size, batch.is_closed) == (1, False)
    await batch.add(f"{p}.b", b"2")
    ack = await batch.commit(f"{p}.c", b"3")
    assert (ack.seq, ack.batch_size) == (3, 3)
    assert [(await stream.get_msg(s)).data for s in (1, 2, 3)] == [b"1", b"2", b"3"]


async def test_errors_reported_at_first_message(js: JetStreamContext) -> None:
    plain = unique_name("PLAIN")
    await js.create_stream(StreamConfig(name=plain, subjects=[f"{plain}.>"]))
    batch = js.atomic_batch()
    with pytest.raises(AtomicPublishDisabledError) as info:
        await batch.add(f"{plain}.a")
    assert info.value.err_code == 10174
    assert batch.is_closed


async def test_too_many_inflight(js: JetStreamContext) -> None:
    _, p = await atomic_stream(js)
    batches = [js.atomic_batch() for _ in range(50)]
    for b in batches:
        await b.add(f"{p}.x")
    with pytest.raises(TooManyInflightBatchesError) as info:
        await js.atomic_batch().add(f"{p}.x")
    assert info.value.code == 429
    assert info.value.err_code == 10210


async def test_errors_reported_at_commit(js: JetStreamContext) -> None:
    stream, p = await atomic_stream(js)
    await js.publish(f"{p}.seed", b"")
    # A duplicate Nats-Msg-Id inside the batch.
    batch = js.atomic_batch()
    await batch.add(f"{p}.a", msg_id="same")
    await batch.add(f"{p}.b", msg_id="same")
    with pytest.raises(BatchDuplicateMsgIdError) as dup:
        await batch.commit(f"{p}.c")
    assert dup.value.err_code == 10201
    # A header a batch cannot use.
    batch = js.atomic_batch()
    await batch.add(f"{p}.a", headers={"Nats-Expected-Last-Msg-Id": "x"})
    with pytest.raises(BatchUnsupportedHeaderError) as header:
        await batch.commit(f"{p}.b")
    assert header.value.err_code == 10177
    # A wrong expected_last_sequence on message 1.
    batch = js.atomic_batch()
    await batch.add(f"{p}.a", expected_last_sequence=99)
    with pytest.raises(WrongLastSequenceError) as wrong:
        await batch.commit(f"{p}.b")
    assert wrong.value.err_code == 10071
    # expected_last_subject_sequence on a subject written earlier in the batch.
    batch = js.atomic_batch()
    await batch.add(f"{p}.s")
    with pytest.raises(WrongLastSequenceError) as earlier:
        await batch.commit(f"{p}.s", expected_last_subject_sequence=0)
    assert earlier.value.err_code == 10164
    assert await last_seq(stream) == 1  # nothing of any failed batch was stored


async def test_raw_protocol_errors(js: JetStreamContext) -> None:
    """What only hand-made batch headers can do: the server's own checks."""
    _, p = await atomic_stream(js)
    cases: list[tuple[dict[str, str], type[AtomicPublishError], int]] = [
        ({"Nats-Batch-Id": "r1"}, BatchSequenceMissingError, 10175),
        ({"Nats-Batch-Id": "x" * 65, "Nats-Batch-Sequence": "1"}, BatchIdInvalidError, 10179),
        (
            {"Nats-Batch-Id": "r2", "Nats-Batch-Sequence": "1", "Nats-Batch-Commit": "2"},
            BatchCommitInvalidError,
            10200,
        ),
        (  # a commit for a batch the server never saw (or a gap)
            {"Nats-Batch-Id": "r3", "Nats-Batch-Sequence": "3", "Nats-Batch-Commit": "1"},
            BatchIncompleteError,
            10176,
        ),
    ]
    for headers, cls, code in cases:
        with pytest.raises(cls) as info:
            await js.publish(f"{p}.raw", b"x", headers=headers)
        assert info.value.err_code == code, headers
    # Message 1,001 of a hand-made batch.
    for seq in range(1, 1001):
        await js.nc.publish(
            f"{p}.big", b"", headers={"Nats-Batch-Id": "big", "Nats-Batch-Sequence": str(seq)}
        )
    with pytest.raises(BatchTooLargeError) as big:
        await js.publish(
            f"{p}.big",
            b"",
            headers={"Nats-Batch-Id": "big", "Nats-Batch-Sequence": "1001"},
            timeout=10,
        )
    assert big.value.err_code == 10199


async def test_stream_config_rules(js: JetStreamContext) -> None:
    stream, _ = await atomic_stream(js)
    assert stream.cached_info.config.allow_atomic is True
    with pytest.raises(StreamConfigError) as persist:
        await atomic_stream(js, persist_mode=PersistMode.ASYNC)
    assert persist.value.err_code == 10052
    with pytest.raises(StreamConfigError) as mirror:
        await js.create_stream(
            StreamConfig(
                name=unique_name("AM"), mirror=StreamSource(name=stream.name), allow_atomic=True
            )
        )
    assert mirror.value.err_code == 10198


async def test_old_server_is_refused(js: JetStreamContext) -> None:
    _, p = await atomic_stream(js)
    js._api.level = 1
    try:
        with pytest.raises(FeatureNotSupportedError) as info:
            await js.atomic_batch().add(f"{p}.a")
        assert info.value.server_version == "2.12"
        with pytest.raises(FeatureNotSupportedError):
            await js.atomic_batch().commit(f"{p}.a")
    finally:
        js._api.level = None


async def test_a_hand_made_batch_message_says_why_no_acknowledgement_came(
    js: JetStreamContext,
) -> None:
    """A publish with batch headers but no commit (a copy of a batch's message) gets an
    empty reply: it said only "invalid publish acknowledgement: b''"."""
    stream, p = await atomic_stream(js)
    headers = {"Nats-Batch-Id": "copied", "Nats-Batch-Sequence": "1"}
    with pytest.raises(InvalidResponseError, match=r"atomic batch.*js\.atomic_batch\(\)"):
        await js.publish(f"{p}.raw", b"x", headers=headers)
    with pytest.raises(InvalidResponseError, match="atomic batch"):
        await (await js.publish_async(f"{p}.raw", b"x", headers={**headers, "Nats-Batch-Id": "c2"}))
    assert await last_seq(stream) == 0  # not stored: the batch was never committed

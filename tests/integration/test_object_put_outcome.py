"""Object store puts whose info (meta message) got no reply, against a real nats-server.

The info's outcome is then unknown: the put must never purge the new chunks
while the info may be (or may still become) stored, or the object would point
at purged chunks with its previous version gone.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    DigestMismatchError,
    DuplicateMsgIdInProcessError,
    JetStreamContext,
    JetStreamTimeoutError,
    ObjectStore,
    ObjectStoreConfig,
    PubAck,
)
from aiojetstream.testing import NatsServer
from helpers import recorded_publish, unique_name, wait_until
from proxy import DroppingProxy

OLD = b"previous good version"


async def new_store(js: JetStreamContext) -> ObjectStore:
    return await js.create_object_store(ObjectStoreConfig(bucket=unique_name("OB")))


async def chunk_subjects(store: ObjectStore) -> dict[str, int]:
    """Stored messages per chunk subject."""
    info = await store.stream.info(subjects_filter=f"$O.{store.bucket}.C.>")
    return dict(info.state.subjects or {})


async def test_put_cancelled_after_its_info_was_sent_leaves_an_intact_object(
    js: JetStreamContext,
) -> None:
    """Cancelled right after the info's PUB is written: the info may be stored a moment
    later, so the chunks stay: the object reads as the old or the new version, and
    then as the new one."""
    store = await new_store(js)
    original = store._publish_info

    async def cancel_once_sent(*args: Any, **kwargs: Any) -> PubAck:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_soon(task.cancel)  # the caller cancels once it is out
        return await original(*args, **kwargs)

    outcomes: dict[str, int] = {}
    unnoted: list[int] = []
    cancelled = 0
    for i in range(30):
        name = f"obj{i}"
        await store.put(name, OLD)
        new = os.urandom(3000)
        store._publish_info = cancel_once_sent  # type: ignore[method-assign]
        try:
            await store.put(name, new, chunk_size=1000)
        except asyncio.CancelledError as exc:
            cancelled += 1
            if not any("were kept" in note for note in getattr(exc, "__notes__", [])):
                unnoted.append(i)
        finally:
            store._publish_info = original  # type: ignore[method-assign]
        try:
            got = await store.get_bytes(name)
        except DigestMismatchError:
            outcome = "corrupt"  # the info points at purged chunks
        else:
            assert got in (OLD, new)
            outcome = "new" if got == new else "old"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome == "old":
            # The info was written before the cancellation, so it lands: the
            # object becomes the new version, whole (its chunks were kept).
            async def is_new(name: str = name, new: bytes = new) -> bool:
                return await store.get_bytes(name) == new

            await wait_until(is_new, 5, message=f"{name} never became its new version")
    print(f"\noutcomes over 30 cancelled puts (first read): {outcomes}; {cancelled} cancelled")
    assert cancelled >= 1, "no put was cancelled: the test exercised nothing"
    assert "corrupt" not in outcomes, outcomes
    assert not unnoted, f"cancelled without a note: iterations {unnoted}"
    # What was left: every object is its new version, whole (3 chunks of 1,000 bytes).
    chunks = await chunk_subjects(store)
    for i in range(30):
        info = await store.info(f"obj{i}")
        assert (info.size, info.chunks) == (3000, 3)
        assert chunks.pop(f"$O.{store.bucket}.C.{info.nuid}") == 3
    # And the previous version's chunk of each cancelled put: the cancellation came
    # before the put purged it (storage left behind, no object points at it).
    assert sorted(chunks.values()) == [1] * cancelled, chunks


async def test_info_without_reply_is_settled_by_publishing_it_again(js: JetStreamContext) -> None:
    """A timeout on the info is settled by publishing the same info (same msg id, same
    expected sequence) again: refused when the first copy was stored (the info on the
    subject is then the put's own), stored otherwise."""
    store = await new_store(js)
    original = store._publish_info
    outcomes: list[str] = []

    async def attempt(*args: Any, **kwargs: Any) -> PubAck:
        calls.append(kwargs.get("msg_id"))
        return await recorded_publish(outcomes, original, *args, **kwargs)

    async def reply_lost(*args: Any, **kwargs: Any) -> PubAck:
        ack = await attempt(*args, **kwargs)
        if len(calls) == 1:
            raise JetStreamTimeoutError("simulated: the acknowledgement was lost")
        return ack

    async def lost_before_sending(*args: Any, **kwargs: Any) -> PubAck:
        if not calls:
            calls.append(kwargs.get("msg_id"))
            outcomes.append("lost")
            raise JetStreamTimeoutError("simulated: the info never reached the stream")
        return await attempt(*args, **kwargs)

    async def copy_in_process(*args: Any, **kwargs: Any) -> PubAck:
        ack = await attempt(*args, **kwargs)
        if len(calls) == 1:
            # As when a PUB sent again after a reconnect meets its first copy being stored.
            raise DuplicateMsgIdInProcessError(400, 10158, "simulated: duplicate in process")
        return ack

    expected = {
        reply_lost: ["stored", "refused"],
        lost_before_sending: ["lost", "stored"],
        copy_in_process: ["stored", "refused"],
    }
    for i, (fake, seen) in enumerate(expected.items()):
        calls: list[str | None] = []
        outcomes.clear()
        name = f"obj{i}"
        await store.put(name, OLD)
        new = os.urandom(3000)
        store._publish_info = fake  # type: ignore[method-assign]
        try:
            info = await store.put(name, new, chunk_size=1000)
        finally:
            store._publish_info = original  # type: ignore[method-assign]
        assert outcomes == seen, fake.__name__
        assert calls[0] is not None
        assert calls[0] == calls[1]
        assert await store.get_bytes(name) == new
        assert (await store.info(name)).nuid == info.nuid
    # Each replaced version's chunks were purged: only the new ones are left.
    assert len(await chunk_subjects(store)) == 3


async def test_info_without_reply_is_not_published_over_another_writers(
    js: JetStreamContext,
) -> None:
    """The info was stored but its reply lost, and another writer replaced it before the
    put published it again. Publishing it over the other writer's info would store it a
    second time once the stream's duplicate window has forgotten its msg id (its end or
    a restart): an info pointing at chunks the other writer purged. The put gives up:
    the error carries notes, the other writer's version stays whole."""
    store = await new_store(js)
    other = await js.object_store(store.bucket)
    first = await store.put("obj", OLD)
    original = store._publish_info
    outcomes: list[str] = []
    theirs = os.urandom(2000)

    async def reply_lost_then_replaced(*args: Any, **kwargs: Any) -> PubAck:
        ack = await recorded_publish(outcomes, original, *args, **kwargs)
        if len(outcomes) == 1:
            await other.put("obj", theirs)  # replaces this put's info, purges its chunks
            raise JetStreamTimeoutError("simulated: the acknowledgement was lost")
        return ack

    store._publish_info = reply_lost_then_replaced  # type: ignore[method-assign]
    try:
        with pytest.raises(JetStreamTimeoutError) as caught:
            await store.put("obj", os.urandom(3000), chunk_size=1000)
    finally:
        store._publish_info = original  # type: ignore[method-assign]
    assert outcomes == ["stored", "refused"]
    notes = " ".join(getattr(caught.value, "__notes__", []))
    assert "not published over it" in notes
    assert "were kept" in notes
    assert await store.get_bytes("obj") == theirs
    current = await store.info("obj")
    subjects = await chunk_subjects(store)
    # This put's chunks were purged by the other writer; the first version's may stay
    # (this put may have replaced it, and can not know).
    assert f"$O.{store.bucket}.C.{current.nuid}" in subjects
    assert set(subjects) <= {
        f"$O.{store.bucket}.C.{current.nuid}",
        f"$O.{store.bucket}.C.{first.nuid}",
    }


async def test_delete_without_reply_purges_its_chunks_when_tried_again(
    js: JetStreamContext,
) -> None:
    store = await new_store(js)
    await store.put("obj", os.urandom(3000), chunk_size=1000)
    original = store._publish_info

    async def reply_lost(*args: Any, **kwargs: Any) -> PubAck:
        await original(*args, **kwargs)
        raise JetStreamTimeoutError("simulated: the acknowledgement was lost")

    store._publish_info = reply_lost  # type: ignore[method-assign]
    try:
        with pytest.raises(JetStreamTimeoutError):
            await store.delete("obj")
    finally:
        store._publish_info = original  # type: ignore[method-assign]
    assert len(await chunk_subjects(store)) == 1  # marked deleted, chunks not purged yet
    await store.delete("obj")
    assert await chunk_subjects(store) == {}


async def test_info_that_can_not_be_settled_keeps_the_chunks(js: JetStreamContext) -> None:
    """No reply to the info, nor to publishing it again: the put fails with a note, the
    chunks are kept (the info might still be stored), and the old version stays readable."""
    store = await new_store(js)
    first = await store.put("obj", OLD)
    original = store._publish_info
    calls = 0

    async def never_answered(info: object, timeout: float | None, **kwargs: Any) -> PubAck:
        nonlocal calls
        calls += 1
        # As a real publish without a reply: it gives up after its timeout.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), timeout)
        raise JetStreamTimeoutError("simulated: no acknowledgement")

    store._publish_info = never_answered  # type: ignore[method-assign]
    try:
        with pytest.raises(JetStreamTimeoutError) as caught:
            await store.put("obj", os.urandom(3000), chunk_size=1000, timeout=0.2)
    finally:
        store._publish_info = original  # type: ignore[method-assign]
    assert calls >= 2  # published again before giving up
    notes = getattr(caught.value, "__notes__", [])
    assert any("may or may not have been stored" in note for note in notes), notes
    subjects = await chunk_subjects(store)
    assert len(subjects) == 2
    assert subjects[f"$O.{store.bucket}.C.{first.nuid}"] == 1
    assert await store.get_bytes("obj") == OLD


async def test_put_cancelled_while_a_chunk_is_in_flight_leaves_no_chunks(
    js: JetStreamContext,
) -> None:
    """Cancelled while awaiting a chunk's acknowledgement: the chunk is still on its way,
    so the purge waits for it; no chunk is left behind."""
    store = await new_store(js)
    original = js.publish_async

    async def cancel_once_sent(*args: Any, **kwargs: Any) -> asyncio.Future[PubAck]:
        future = await original(*args, **kwargs)
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_soon(task.cancel)  # put awaits the ack by then
        return future

    left: list[int] = []
    for i in range(30):
        js.publish_async = cancel_once_sent  # type: ignore[method-assign]
        try:
            with pytest.raises(asyncio.CancelledError):
                await store.put(f"obj{i}", os.urandom(1000), chunk_size=1000)
        finally:
            js.publish_async = original  # type: ignore[method-assign]
        if await chunk_subjects(store):
            left.append(i)
            await store.stream.purge()
    assert not left, f"chunks left behind by the cancelled puts {left}"


async def test_replaced_versions_chunks_are_purged_when_the_purge_is_lost(
    nats_server: NatsServer,
) -> None:
    """The purge of the replaced version's chunks got no reply: it is made again (once it
    was only logged, and the old chunks stayed in the bucket for good). A put cancelled
    while that purge is on its way has stored its object: the purge still completes."""
    async with DroppingProxy(nats_server.port) as proxy:
        client = await aiojetstream.connect(proxy.url)
        try:
            store = await new_store(client)
            for round_ in ("awaited", "cancelled"):
                name = f"obj-{round_}"
                old = (await store.put(name, os.urandom(3000), chunk_size=1000)).nuid
                proxy.drop(f"$JS.API.STREAM.PURGE.{store.stream.name}")
                new = os.urandom(2000)
                put = asyncio.ensure_future(store.put(name, new, chunk_size=1000, timeout=1))
                if round_ == "cancelled":
                    await wait_until(lambda: bool(proxy.dropped), 10, message="purge not sent")
                    put.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await put
                else:
                    await put
                    assert len(proxy.dropped) == 1  # the first purge was lost
                proxy.dropped.clear()
                info = await store.info(name)
                assert await store.get_bytes(name) == new

                async def only_new(nuid: str | None = info.nuid, old: str | None = old) -> bool:
                    left = await chunk_subjects(store)
                    prefix = f"$O.{store.bucket}.C."
                    return left.get(prefix + str(nuid)) == 2 and prefix + str(old) not in left

                await wait_until(only_new, 10, message=f"{round_}: old chunks left behind")
        finally:
            await client.close()


async def test_put_reads_an_async_file_like_object(js: JetStreamContext) -> None:
    """An asyncio.StreamReader (a subprocess's stdout, a socket) has an async read(): it
    was called in a thread, and the put failed on the coroutine it returned."""
    store = await new_store(js)
    data = os.urandom(5000)
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    info = await store.put("from-reader", reader, chunk_size=1000)
    assert (info.size, info.chunks) == (5000, 5)
    assert await store.get_bytes("from-reader") == data

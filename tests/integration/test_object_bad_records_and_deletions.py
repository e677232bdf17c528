"""Object stores against a real nats-server: records another client wrote badly,
objects and buckets deleted under reads and watches, and reads dropped unfinished."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import os

import pytest

import aiojetstream
from aiojetstream import (
    BucketNotFoundError,
    DigestMismatchError,
    InvalidResponseError,
    JetStreamContext,
    ObjectLinkError,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreConfig,
    StreamNotFoundError,
)
from aiojetstream.testing import NatsServer
from helpers import assert_watch_start_fails_cleanly, unique_name, wait_until

STEP = 10


async def new_store(js: JetStreamContext) -> ObjectStore:
    return await js.create_object_store(ObjectStoreConfig(bucket=unique_name("OR")))


async def meta_subject(store: ObjectStore, name: str) -> tuple[str, dict[str, object]]:
    """The meta subject of object ``name`` and its stored info (as JSON)."""
    async for msg in store.stream.get_last_msgs_for(f"$O.{store.bucket}.M.>"):
        info = json.loads(msg.data)
        if info["name"] == name:
            return msg.subject, info
    raise AssertionError(f"no info for {name!r}")


async def no_consumers(store: ObjectStore) -> bool:
    return (await store.stream.info()).state.consumer_count == 0


async def test_an_info_whose_nuid_is_no_token_is_refused(js: JetStreamContext) -> None:
    """A stored info with nuid ">" (a buggy or hostile client's) must not become the
    subject of a purge: deleting that object purged every object's chunks."""
    store = await new_store(js)
    keep = {f"keep{i}": os.urandom(3000) for i in range(2)}
    for name, data in keep.items():
        await store.put(name, data, chunk_size=1000)
    await store.put("bad", b"x" * 100)
    subject, info = await meta_subject(store, "bad")
    for nuid in (">", "a.b", "*", " "):
        info["nuid"] = nuid
        await js.publish(subject, json.dumps(info).encode())
        with pytest.raises(InvalidResponseError, match="nuid"):
            await store.delete("bad")
        with pytest.raises(InvalidResponseError, match="nuid"):
            await store.get_bytes("bad")
    for name, data in keep.items():
        assert await store.get_bytes(name) == data


async def test_an_info_with_a_negative_size_or_chunk_count_is_refused(
    js: JetStreamContext,
) -> None:
    """nats.go's size and chunks are uint64: a stored info saying -1 is not an info
    (it was taken, and ``obj info`` said ``Size unlimited (-1 bytes)``)."""
    store = await new_store(js)
    await store.put("ok", b"data")
    _, info = await meta_subject(store, "ok")
    for field in ("size", "chunks"):
        name = f"neg-{field}"
        record = {**info, "name": name, field: -1}
        await js.publish(
            f"$O.{store.bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}",
            json.dumps(record).encode(),
        )
        for read in (store.info, store.get_bytes, store.get):
            reason = f"{field}: Input should be greater than or equal to 0 \\(got -1\\)$"
            with pytest.raises(InvalidResponseError, match=f"invalid object info .*: {reason}"):
                await read(name)
    assert [i.name async for i in store.list()] == ["ok"]  # left out, as other junk


async def test_a_stored_link_with_an_invalid_target_is_a_link_error(
    js: JetStreamContext,
) -> None:
    """A link record naming an invalid bucket or object is the link's fault: the name
    passed to get is valid, so ObjectLinkError (naming the link), not InvalidNameError."""
    store = await new_store(js)
    await store.put("t", b"hello")
    await store.add_link("good", await store.info("t"))
    _, info = await meta_subject(store, "good")
    targets = {
        "bad-bucket": {"bucket": "bad.name", "name": "t"},
        "empty-bucket": {"bucket": "", "name": "t"},
        "long-name": {"bucket": store.bucket, "name": "x" * 3000},
    }
    for name, link in targets.items():
        record = {**info, "name": name, "options": {"link": link}}
        await js.publish(
            f"$O.{store.bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}",
            json.dumps(record).encode(),
        )
    for name in targets:
        with pytest.raises(ObjectLinkError, match=f"'{name}'.*invalid target"):
            await store.get(name)
    assert await store.get_bytes("good") == b"hello"


async def test_list_and_watch_leave_out_an_entry_that_is_no_info(js: JetStreamContext) -> None:
    """Junk on a meta subject is skipped (logged), as nats.go does; it ended both."""
    store = await new_store(js)
    await store.put("a", b"1")
    await js.publish(f"$O.{store.bucket}.M.junk", b"not an info")
    await store.put("b", b"2")
    assert sorted([i.name async for i in store.list()]) == ["a", "b"]
    async with store.watch() as w:
        initial = [await asyncio.wait_for(anext(w), STEP) for _ in range(3)]
    assert [i.name if i else None for i in initial] == ["a", "b", None]


async def test_a_deleted_bucket_is_bucket_not_found_everywhere(js: JetStreamContext) -> None:
    store = await new_store(js)
    await js.delete_object_store(store.bucket)
    with pytest.raises(BucketNotFoundError):
        _ = [i async for i in store.list()]
    with pytest.raises(BucketNotFoundError):
        async with store.watch():
            pass
    with pytest.raises(BucketNotFoundError):
        await store.seal()
    with pytest.raises(BucketNotFoundError):
        await store.status()


async def test_a_read_dropped_unfinished_is_closed(js: JetStreamContext) -> None:
    """``async for chunk in await store.get(n): break`` without ``async with``: once the
    result is collected, its consumer is deleted (it stayed for its inactivity threshold,
    with its subscription and buffer, for as long as the connection lived)."""
    store = await new_store(js)
    await store.put("big", os.urandom(64 * 1024), chunk_size=1024)
    subscriptions = len(js.nc._subs)
    for _ in range(5):
        async for chunk in await store.get("big"):
            assert chunk
            break
    gc.collect()
    await wait_until(lambda: no_consumers(store), STEP)
    await wait_until(lambda: len(js.nc._subs) <= subscriptions, STEP)


@pytest.mark.parametrize("how", ["delete", "replace"])
async def test_an_object_deleted_or_replaced_while_read_is_not_found(
    js: JetStreamContext, how: str
) -> None:
    """The object's chunks are purged (delete, or a new put replacing it) while it is
    read: the read raises ObjectNotFoundError saying so, well before its stall timeout
    (it waited the whole timeout and raised JetStreamTimeoutError)."""
    store = await new_store(js)
    data = os.urandom(400 * 1024)
    await store.put("big", data, chunk_size=1024)  # 400 chunks; a read buffers 64
    loop = asyncio.get_running_loop()
    async with await store.get("big", timeout=STEP) as result:
        first = await anext(result)
        assert first == data[:1024]
        if how == "delete":
            await store.delete("big")
        else:
            await store.put("big", b"new")
        start = loop.time()
        with pytest.raises(ObjectNotFoundError, match="while it was read"):
            async for _ in result:
                pass
        assert loop.time() - start < STEP / 2
    await wait_until(lambda: no_consumers(store), STEP)


@pytest.mark.parametrize("how", ["delete", "replace"])
@pytest.mark.parametrize("size", [10, 300 * 1024])
async def test_an_object_deleted_or_replaced_before_the_first_read_is_not_found(
    js: JetStreamContext, how: str, size: int
) -> None:
    """Deleted or replaced between ``get`` and the first read (its chunks purged): the
    read found nothing and said the object was corrupt (DigestMismatchError, "read 0
    bytes"); it is ObjectNotFoundError, as when the chunks go in the middle of a read."""
    store = await new_store(js)
    await store.put("obj", os.urandom(size))
    result = await store.get("obj", timeout=STEP)
    if how == "delete":
        await store.delete("obj")
    else:
        await store.put("obj", b"new")
    with pytest.raises(ObjectNotFoundError, match="deleted or replaced"):
        await result.read()
    await result.aclose()
    await wait_until(lambda: no_consumers(store), STEP)
    if how == "replace":
        assert await store.get_bytes("obj") == b"new"


@pytest.mark.parametrize("missing", [1, 2, 3])
async def test_a_chunk_missing_from_the_stream_is_a_digest_mismatch_at_once(
    js: JetStreamContext, missing: int
) -> None:
    """A chunk gone from the stream (``delete_msg``) with the info unchanged: the read
    stalled for the whole stall timeout and then said the leader still had the chunks
    (JetStreamTimeoutError), because any chunk count on the leader passed for "still
    there". The leader holds no more chunks than were read: DigestMismatchError at
    once, as nats.go."""
    store = await new_store(js)
    info = await store.put("big", os.urandom(3000), chunk_size=1000)
    assert info.chunks == 3
    await store.stream.delete_msg(missing)  # chunks are sequences 1..3, the info 4
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(DigestMismatchError, match="corrupt"):
        await store.get_bytes("big", timeout=STEP)
    assert loop.time() - start < 2.5
    await wait_until(lambda: no_consumers(store), STEP)


async def test_a_bucket_deleted_under_a_watch_or_a_read_is_bucket_not_found(
    js: JetStreamContext,
) -> None:
    """A running watch, and a read opened before the bucket was deleted, raised
    StreamNotFoundError; every other call said BucketNotFoundError."""
    store = await new_store(js)
    await store.put("obj", b"x" * 10)
    result = await store.get("obj", timeout=STEP)
    async with store.watch() as w:
        entry = await asyncio.wait_for(anext(w), STEP)
        assert entry is not None
        assert (entry.name, entry.size, entry.bucket) == ("obj", 10, store.bucket)
        assert await asyncio.wait_for(anext(w), STEP) is None
        await js.delete_object_store(store.bucket)
        with pytest.raises(BucketNotFoundError, match="object store") as caught:
            await asyncio.wait_for(anext(w), STEP)
        assert isinstance(caught.value.__cause__, StreamNotFoundError)
        with pytest.raises(StopAsyncIteration):  # the error closed the watcher
            await asyncio.wait_for(anext(w), STEP)
    with pytest.raises(BucketNotFoundError, match="object store") as caught:
        await asyncio.wait_for(result.read(), STEP)
    assert isinstance(caught.value.__cause__, StreamNotFoundError)


async def test_watch_start_is_bounded_while_the_server_is_down() -> None:
    """A watch's start waited forever while the server was unreachable (its consumer's
    creation retried with backoff); list() times out. JetStreamTimeoutError after the
    context's timeout, as nats.go's Watch fails, and nothing keeps retrying."""
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url, timeout=1)
        try:
            store = await new_store(js)
            await store.put("obj", b"x")
            await server.stop()
            await wait_until(lambda: not js.nc.is_connected, STEP)
            await assert_watch_start_fails_cleanly(store.watch(), STEP / 2)
        finally:
            await js.close()

"""Object store (ADR-20) against a real nats-server: put, get, meta, links, listing,
watching, sealing, failures that leave nothing behind, corruption, memory and faults."""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import io
import os
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import aiojetstream
from aiojetstream import (
    BucketNotFoundError,
    DigestMismatchError,
    InvalidHeaderError,
    InvalidNameError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamContext,
    JetStreamError,
    MaxBytesExceededError,
    ObjectExistsError,
    ObjectInfo,
    ObjectLinkError,
    ObjectMeta,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreConfig,
    ObjectStoreError,
    ResourcesExceededError,
    StorageType,
    StreamConfig,
    StreamNameInUseError,
    StreamSealedError,
    StreamSource,
    SubjectTransformConfig,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until

STEP = 10.0
MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def every_chunk_outcome_retrieved(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A put reads the outcome of every chunk it sent, failed or not."""
    yield
    gc.collect()
    records = caplog.get_records("call") + caplog.get_records("teardown")
    lost = [r.getMessage() for r in records if "never retrieved" in r.getMessage()]
    assert not lost, lost


async def new_store(js: JetStreamContext, **kw: object) -> ObjectStore:
    return await js.create_object_store(ObjectStoreConfig(bucket=unique_name("OB"), **kw))


async def chunk_subjects(store: ObjectStore) -> dict[str, int]:
    """Stored messages per chunk subject."""
    info = await store.stream.info(subjects_filter=f"$O.{store.bucket}.C.>")
    return dict(info.state.subjects or {})


def digest_of(data: bytes) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


# --------------------------------------------------------------------------- buckets


async def test_bucket_lifecycle(js: JetStreamContext) -> None:
    bucket = unique_name("OB")
    config = ObjectStoreConfig(
        bucket=bucket,
        description="files",
        ttl=timedelta(hours=1),
        max_bytes=64 * MiB,
        storage=StorageType.MEMORY,
        compression=False,
        metadata={"team": "a"},
    )
    store = await js.create_object_store(config)
    assert store.bucket == bucket
    assert store.stream.name == f"OBJ_{bucket}"
    cfg = store.stream.cached_info.config
    assert cfg.subjects == [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]
    assert (cfg.discard, cfg.allow_rollup_hdrs, cfg.allow_direct) == ("new", True, True)
    assert (cfg.max_age, cfg.max_bytes) == (timedelta(hours=1), 64 * MiB)

    # The same config again succeeds; another one is refused.
    await js.create_object_store(config)
    with pytest.raises(StreamNameInUseError):
        await js.create_object_store(config.model_copy(update={"description": "other"}))

    status = await store.status()
    assert (status.bucket, status.description, status.ttl) == (bucket, "files", timedelta(hours=1))
    assert (status.storage, status.replicas, status.sealed) == (StorageType.MEMORY, 1, False)
    assert (status.size, status.is_compressed, status.backing_store) == (0, False, "JetStream")
    assert status.metadata["team"] == "a"
    assert status.config == config

    updated = await js.update_object_store(config.model_copy(update={"description": "new"}))
    assert (await updated.status()).description == "new"
    assert bucket in [n async for n in js.object_store_names()]
    assert (await js.object_store(bucket)).bucket == bucket

    await js.delete_object_store(bucket)
    for call in (
        js.object_store(bucket),
        js.delete_object_store(bucket),
        js.update_object_store(config),
    ):
        with pytest.raises(BucketNotFoundError) as caught:
            await call
        assert isinstance(caught.value, ObjectStoreError)
    assert bucket not in [n async for n in js.object_store_names()]
    with pytest.raises(BucketNotFoundError):
        await store.status()


async def test_compressed_bucket(js: JetStreamContext) -> None:
    store = await new_store(js, compression=True)
    assert store.stream.cached_info.config.compression == "s2"
    assert (await store.status()).is_compressed
    await store.put("x", b"abc" * 100_000)
    assert await store.get_bytes("x") == b"abc" * 100_000


async def test_invalid_bucket_names(js: JetStreamContext) -> None:
    for bad in ("", "a.b", "a b", "a*", "a>"):
        with pytest.raises(InvalidNameError):
            await js.object_store(bad)
        with pytest.raises(InvalidNameError):
            await js.delete_object_store(bad)
        with pytest.raises(InvalidNameError, match="invalid bucket name"):  # when sent
            await js.create_object_store(ObjectStoreConfig(bucket=bad))


# --------------------------------------------------------------------------- put and get


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 10_500])
async def test_put_get_sizes_and_chunking(js: JetStreamContext, size: int) -> None:
    store = await new_store(js)
    data = os.urandom(size)
    info = await store.put("obj", data, chunk_size=1000)
    assert (info.name, info.bucket, info.size) == ("obj", store.bucket, size)
    assert info.chunks == -(-size // 1000)
    assert info.digest == digest_of(data)
    assert info.options is not None
    assert info.options.max_chunk_size == 1000
    assert info.mtime is not None
    assert not info.deleted
    assert not info.is_link

    async with await store.get("obj") as result:
        assert result.info.nuid == info.nuid
        chunks = [chunk async for chunk in result]
    assert b"".join(chunks) == data
    assert all(len(c) == 1000 for c in chunks[:-1])
    assert await store.get_bytes("obj") == data
    stored = await store.info("obj")
    assert stored.model_dump(exclude={"mtime"}) == info.model_dump(exclude={"mtime"})
    assert stored.mtime is not None


async def test_put_sources(js: JetStreamContext, tmp_path: Path) -> None:
    store = await new_store(js)
    data = os.urandom(300_000)
    # bytes-likes, a file in memory, a real file, iterables of pieces of any size.
    sources: dict[str, object] = {
        "bytes": data,
        "bytearray": bytearray(data),
        "memoryview": memoryview(data),
        "bytesio": io.BytesIO(data),
        "list": [data[:7], b"", data[7:200_007], data[200_007:]],
        "async": pieces(data, 77_777),
    }
    for name, source in sources.items():
        info = await store.put(name, source)
        assert (info.size, info.chunks, info.digest) == (300_000, 3, digest_of(data)), name
        assert await store.get_bytes(name) == data, name
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    with path.open("rb") as f:
        assert (await store.put("file", f)).size == 300_000
    info = await store.put_file(path, description="from disk")
    assert (info.name, info.description) == ("data.bin", "from disk")
    assert (await store.put_file(str(path), "renamed.bin")).name == "renamed.bin"
    out = tmp_path / "out" / "copy.bin"
    out.parent.mkdir()
    got = await store.get_file("data.bin", out)
    assert out.read_bytes() == data
    assert got.name == "data.bin"
    assert [p.name for p in out.parent.iterdir()] == ["copy.bin"]  # no temporary left
    # A directory that does not exist: the error names the file asked for, not the
    # temporary file next to it (it said ".copy.bin.<random>.part").
    missing = tmp_path / "nowhere" / "copy.bin"
    with pytest.raises(FileNotFoundError) as caught:
        await store.get_file("data.bin", missing)
    assert caught.value.filename == str(missing)


async def test_meta_fields_round_trip(js: JetStreamContext) -> None:
    store = await new_store(js)
    name = "dir/ünïcode name with spaces.txt"
    info = await store.put(
        name,
        b"hello",
        description="a greeting",
        headers={"Content-Type": "text/plain", "X-Many": ["1", "2"]},
        metadata={"owner": "me"},
    )
    stored = await store.info(name)
    assert stored.name == name
    assert stored.description == "a greeting"
    assert stored.headers == {"Content-Type": ["text/plain"], "X-Many": ["1", "2"]}
    assert stored.metadata == {"owner": "me"}
    assert stored == info.model_copy(update={"mtime": stored.mtime})
    # The subject is base64url of the name, padded (ADR-20).
    raw = await store.stream.get_last_msg_for_subject(
        f"$O.{store.bucket}.M." + base64.urlsafe_b64encode(name.encode()).decode()
    )
    # A put's info carries a msg id of its own, so publishing it again is idempotent,
    # and replaces only the info the put read (none here).
    assert raw.headers == {
        "Nats-Rollup": "sub",
        "Nats-Msg-Id": f"obj-put-{info.nuid}",
        "Nats-Expected-Last-Subject-Sequence": "0",
    }
    assert b'"mtime"' not in raw.data


async def test_replace_purges_previous_chunks(js: JetStreamContext) -> None:
    store = await new_store(js)
    first = await store.put("obj", os.urandom(5000), chunk_size=1000)
    assert await chunk_subjects(store) == {f"$O.{store.bucket}.C.{first.nuid}": 5}
    second = await store.put("obj", b"small")
    assert second.nuid != first.nuid
    assert await chunk_subjects(store) == {f"$O.{store.bucket}.C.{second.nuid}": 1}
    assert await store.get_bytes("obj") == b"small"
    assert (await store.status()).stream_info.state.messages == 2  # one chunk, one info


async def test_names_and_input_checked_before_sending(js: JetStreamContext) -> None:
    store = await new_store(js)
    bad_names: list[object] = ["", None, 42, "\ud800", "x" * 2049]
    for bad in bad_names:
        with pytest.raises(InvalidNameError):
            await store.put(bad, b"x")  # type: ignore[arg-type]
        with pytest.raises(InvalidNameError):
            await store.info(bad)  # type: ignore[arg-type]
    await store.put("é" * 1024, b"longest name")  # 2,048 bytes of UTF-8
    bad_calls: list[tuple[type[Exception], dict[str, object]]] = [
        (InvalidHeaderError, {"headers": {"Bad Key": "v"}}),
        (InvalidHeaderError, {"headers": {"a:b": "v"}}),
        (InvalidHeaderError, {"headers": {"": "v"}}),
        (InvalidHeaderError, {"headers": {"é": "v"}}),
        (InvalidHeaderError, {"headers": {"K": "line\r\nbreak"}}),
        (InvalidHeaderError, {"headers": {"K": 1}}),
        (InvalidOptionError, {"metadata": {"k": 1}}),
        (InvalidOptionError, {"description": 5}),
        (InvalidOptionError, {"chunk_size": 0}),
        (InvalidOptionError, {"chunk_size": True}),
        (InvalidOptionError, {"chunk_size": js.nc.max_payload + 1}),
        (InvalidOptionError, {"metadata": {"k": "x" * js.nc.max_payload}}),
    ]
    for error, kwargs in bad_calls:
        with pytest.raises(error):
            await store.put("obj", b"x", **kwargs)  # type: ignore[arg-type]
    for data in ("text", 42, io.StringIO("text"), None):
        with pytest.raises(InvalidOptionError):
            await store.put("obj", data)
    assert (await store.status()).stream_info.state.messages == 2  # the long name: chunk, info
    with pytest.raises(InvalidOptionError):
        await store.update_meta("obj", {"name": "x"})  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError):
        await store.add_link("lnk", "obj")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- failures


async def test_full_bucket_leaves_no_partial_chunks(js: JetStreamContext) -> None:
    store = await new_store(js, max_bytes=20_000)
    await store.put("keep", b"k" * 3000, chunk_size=1000)
    before = await chunk_subjects(store)
    with pytest.raises(MaxBytesExceededError) as caught:
        await store.put("big", os.urandom(50_000), chunk_size=1000)
    assert caught.value.err_code == 10077
    assert await chunk_subjects(store) == before
    with pytest.raises(ObjectNotFoundError):
        await store.info("big")
    # Replacing an object with one that does not fit keeps the old version.
    with pytest.raises(MaxBytesExceededError):
        await store.put("keep", os.urandom(50_000), chunk_size=1000)
    assert await store.get_bytes("keep") == b"k" * 3000
    assert await chunk_subjects(store) == before


async def test_failing_source_leaves_nothing(js: JetStreamContext) -> None:
    store = await new_store(js)
    await store.put("obj", b"v1")
    before = await chunk_subjects(store)

    async def broken() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield os.urandom(10_000)
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError, match="source failed"):
        await store.put("obj", broken(), chunk_size=1000)
    with pytest.raises(InvalidOptionError):
        await store.put("obj", [b"ok", "not bytes"])
    assert await chunk_subjects(store) == before
    assert await store.get_bytes("obj") == b"v1"


async def test_cancelled_put_leaves_nothing(js: JetStreamContext) -> None:
    store = await new_store(js)
    sent = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield os.urandom(64 * 1024)
            sent.set()

    task = asyncio.create_task(store.put("obj", endless()))
    await asyncio.wait_for(sent.wait(), STEP)

    async def some_stored() -> bool:
        return bool(await chunk_subjects(store))

    await wait_until(some_stored, STEP)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await chunk_subjects(store) == {}
    with pytest.raises(ObjectNotFoundError):
        await store.info("obj")


async def test_sealed_bucket(js: JetStreamContext) -> None:
    store = await new_store(js)
    await store.put("obj", b"data")
    status = await store.seal()
    assert status.sealed
    assert (await store.status()).sealed
    with pytest.raises(StreamSealedError) as caught:
        await store.put("other", b"x" * 5000, chunk_size=1000)
    assert caught.value.err_code == 10109
    assert not getattr(caught.value, "__notes__", None)  # nothing stored: no purge tried
    with pytest.raises(StreamSealedError):
        await store.delete("obj")
    assert await store.get_bytes("obj") == b"data"
    assert [i.name async for i in store.list()] == ["obj"]


# --------------------------------------------------------------------------- corruption


async def test_corrupted_chunk_raises_digest_mismatch(js: JetStreamContext, tmp_path: Path) -> None:
    store = await new_store(js)
    data = os.urandom(4000)
    info = await store.put("obj", data, chunk_size=1000)
    subject = f"$O.{store.bucket}.C.{info.nuid}"
    # Same chunk count and sizes, one byte flipped, written raw.
    await store.stream.purge(subject=subject)
    corrupt = bytearray(data)
    corrupt[2500] ^= 0xFF
    for i in range(0, 4000, 1000):
        await js.publish(subject, bytes(corrupt[i : i + 1000]))
    with pytest.raises(DigestMismatchError, match="digest"):
        await store.get_bytes("obj")
    received: list[bytes] = []
    async with await store.get("obj") as result:
        for _ in range(3):
            received.append(await anext(result))
        with pytest.raises(DigestMismatchError):
            await anext(result)  # the last chunk is withheld
    assert b"".join(received) == bytes(corrupt[:3000])
    out = tmp_path / "out.bin"
    with pytest.raises(DigestMismatchError):
        await store.get_file("obj", out)
    assert os.listdir(tmp_path) == []

    # A chunk too many: refused as soon as the size is exceeded.
    await js.publish(subject, b"extra")
    with pytest.raises(DigestMismatchError, match="more data"):
        await store.get_bytes("obj")
    # Chunks missing entirely.
    await store.stream.purge(subject=subject)
    with pytest.raises(DigestMismatchError, match="size or chunk count"):
        await store.get_bytes("obj")


async def test_chunks_lost_while_the_info_names_them_are_corrupt_not_deleted(
    js: JetStreamContext,
) -> None:
    """Chunks gone although the info still names them (no delete, no put replaced the
    object: the bucket lost them) make a corrupt object, before the first read and in
    the middle of one, as ever; only an object deleted or replaced meanwhile (its info
    changed) is ObjectNotFoundError. Mid-read this was ObjectNotFoundError too."""
    store = await new_store(js)
    data = os.urandom(400 * 1024)
    info = await store.put("obj", data, chunk_size=1024)  # 400 chunks; a read buffers 64
    subject = f"$O.{store.bucket}.C.{info.nuid}"
    async with await store.get("obj", timeout=STEP) as result:
        assert await anext(result) == data[:1024]
        await store.stream.purge(subject=subject)
        with pytest.raises(DigestMismatchError, match="size or chunk count"):
            async for _ in result:
                pass
    result = await store.get("obj", timeout=STEP)
    with pytest.raises(DigestMismatchError, match="size or chunk count"):
        await result.read()


async def overwrite_info(store: ObjectStore, info: ObjectInfo) -> None:
    """Store ``info`` over the current one as it is (the writer of another client might)."""
    _, seq = await store._entry(store._meta_subject(info.name), None)
    await store._publish_info(info, None, expected=seq)


async def test_reads_other_digest_spellings(js: JetStreamContext) -> None:
    store = await new_store(js)
    info = await store.put("obj", b"payload")
    sha = hashlib.sha256(b"payload").digest()
    for digest in (
        "SHA-256=" + base64.urlsafe_b64encode(sha).decode().rstrip("="),
        "sha-256=" + base64.b64encode(sha).decode(),
        "SHA-256=" + sha.hex(),
    ):
        fake = info.model_copy(update={"digest": digest, "mtime": None})
        await overwrite_info(store, fake)
        assert await store.get_bytes("obj") == b"payload", digest
    await overwrite_info(store, info.model_copy(update={"digest": "MD5=abc", "mtime": None}))
    with pytest.raises(DigestMismatchError, match="not a SHA-256"):
        await store.get_bytes("obj")
    await overwrite_info(store, info.model_copy(update={"digest": None, "mtime": None}))
    with pytest.raises(DigestMismatchError, match="no digest"):
        await store.get("obj")
    await overwrite_info(store, info.model_copy(update={"nuid": None, "mtime": None}))
    with pytest.raises(InvalidResponseError, match="no nuid"):
        await store.get("obj")


# --------------------------------------------------------------------------- info, meta, delete


async def test_info_and_delete(js: JetStreamContext) -> None:
    store = await new_store(js)
    with pytest.raises(ObjectNotFoundError):
        await store.info("nope")
    with pytest.raises(ObjectNotFoundError):
        await store.get("nope")
    with pytest.raises(ObjectNotFoundError):
        await store.delete("nope")
    info = await store.put("obj", os.urandom(3000), chunk_size=1000, metadata={"k": "v"})
    await store.delete("obj")
    with pytest.raises(ObjectNotFoundError):
        await store.info("obj")
    with pytest.raises(ObjectNotFoundError):
        await store.get_bytes("obj")
    gone = await store.info("obj", include_deleted=True)
    assert gone.deleted
    assert (gone.size, gone.chunks, gone.digest) == (0, 0, None)
    assert (gone.nuid, gone.metadata) == (info.nuid, {"k": "v"})
    assert await chunk_subjects(store) == {}
    await store.delete("obj")  # already deleted: nothing to do
    # A deleted name can be used again.
    await store.put("obj", b"again")
    assert await store.get_bytes("obj") == b"again"


async def test_update_meta_and_rename(js: JetStreamContext) -> None:
    store = await new_store(js)
    data = os.urandom(2500)
    await store.put("a", data, chunk_size=1000, description="old")
    await store.put("b", b"b")
    updated = await store.update_meta(
        "a", ObjectMeta(name="a", description="new", headers={"H": "1"}, metadata={"m": "1"})
    )
    assert (updated.description, updated.headers, updated.metadata) == (
        "new",
        {"H": ["1"]},
        {"m": "1"},
    )
    info = await store.info("a")
    assert (info.description, info.headers, info.metadata, info.size) == (
        "new",
        {"H": ["1"]},
        {"m": "1"},
        2500,
    )

    with pytest.raises(ObjectExistsError):
        await store.update_meta("a", ObjectMeta(name="b"))
    renamed = await store.update_meta("a", ObjectMeta(name="c", description="moved"))
    assert (renamed.name, renamed.nuid) == ("c", info.nuid)
    assert await store.get_bytes("c") == data
    with pytest.raises(ObjectNotFoundError):
        await store.info("a", include_deleted=True)  # its info is gone, not just deleted
    await store.delete("b")
    await store.update_meta("c", ObjectMeta(name="b"))  # onto a deleted name
    assert await store.get_bytes("b") == data
    with pytest.raises(ObjectNotFoundError):
        await store.update_meta("c", ObjectMeta(name="d"))
    assert [i.name async for i in store.list()] == ["b"]


# --------------------------------------------------------------------------- links


async def test_links(js: JetStreamContext) -> None:
    store = await new_store(js)
    other = await new_store(js)
    data = os.urandom(2000)
    target = await store.put("target", data, chunk_size=700)
    link = await store.add_link("link", target)
    assert link.is_link
    assert link.link is not None
    assert (link.link.bucket, link.link.name, link.size) == (store.bucket, "target", 0)
    assert (await store.info("link")).is_link
    assert await store.get_bytes("link") == data
    async with await store.get("link") as result:
        assert result.info.name == "target"

    # Across buckets, to a whole bucket, and what is refused.
    remote = await other.add_link("remote", target)
    assert await other.get_bytes("remote") == data
    with pytest.raises(ObjectLinkError):
        await store.add_link("link2", link)  # a link to a link
    whole = await store.add_bucket_link("dir", other)
    assert whole.link is not None
    assert (whole.link.bucket, whole.link.name) == (other.bucket, None)
    assert (await store.add_bucket_link("dir2", other.bucket)).is_link
    with pytest.raises(ObjectLinkError, match="bucket"):
        await store.get("dir")
    await store.put("plain", b"p")
    with pytest.raises(ObjectExistsError):
        await store.add_link("plain", target)  # a link never replaces an object
    with pytest.raises(ObjectExistsError):
        await store.add_bucket_link("plain", other)
    relinked = await store.add_link("link", await store.info("plain"))  # a link replaces a link
    assert relinked.link is not None
    assert relinked.link.name == "plain"
    assert await store.get_bytes("link") == b"p"

    # A deleted target: no new links, and existing links find nothing.
    await store.delete("target")
    with pytest.raises(ObjectLinkError, match="deleted"):
        await store.add_link("late", await store.info("target", include_deleted=True))
    with pytest.raises(ObjectNotFoundError):
        await other.get_bytes("remote")
    assert remote.is_link
    # A link to a missing bucket is refused; one whose bucket went away reads as that.
    with pytest.raises(ObjectLinkError, match="bucket"):
        await store.add_link("lost", ObjectInfo(name="x", bucket=unique_name("NOBUCKET"), size=1))
    gone = await new_store(js)
    await store.add_link("lost", await gone.put("x", b"x"))
    await js.delete_object_store(gone.bucket)
    with pytest.raises(BucketNotFoundError):
        await store.get("lost")
    # Deleting a link deletes the link only.
    await store.delete("link")
    assert await store.get_bytes("plain") == b"p"


# --------------------------------------------------------------------------- list and watch


async def test_list(js: JetStreamContext) -> None:
    store = await new_store(js)
    assert [i async for i in store.list()] == []
    for name in ("a", "b", "c"):
        await store.put(name, name.encode() * 10)
    await store.put("b", b"replaced")
    await store.delete("c")
    listed = {i.name: i async for i in store.list()}
    assert sorted(listed) == ["a", "b"]
    assert listed["b"].size == len(b"replaced")
    assert all(i.mtime is not None for i in listed.values())
    with_deleted = {i.name: i.deleted async for i in store.list(include_deleted=True)}
    assert with_deleted == {"a": False, "b": False, "c": True}
    # Stopping early removes the consumer.
    it = store.list()
    assert (await anext(it)).name in ("a", "b")
    await it.aclose()
    await wait_until(lambda: _no_consumers(store), STEP)


async def test_list_yields_an_object_changed_while_listing_once(js: JetStreamContext) -> None:
    """An object yielded, then replaced before the listing ends, is not yielded again.

    The listing ends at the first info with nothing pending: with more objects
    than one pull brings (500), the new info of an object already yielded is
    delivered before that end.
    """
    store = await new_store(js)
    names = [f"obj{i:04d}" for i in range(700)]
    for start in range(0, len(names), 100):
        await asyncio.gather(*(store.put(n, b"x") for n in names[start : start + 100]))
    it = store.list()
    first = await anext(it)
    await store.put(first.name, b"changed")
    listed = [first.name] + [i.name async for i in it]
    assert sorted(listed) == names


async def _no_consumers(store: ObjectStore) -> bool:
    return (await store.stream.info()).state.consumer_count == 0


async def test_watch(js: JetStreamContext) -> None:
    store = await new_store(js)
    await store.put("a", b"1")
    await store.put("b", b"2")
    await store.delete("b")
    async with store.watch() as w:
        initial = [await asyncio.wait_for(anext(w), STEP) for _ in range(3)]
        assert [(i.name, i.deleted) if i else None for i in initial] == [
            ("a", False),
            ("b", True),
            None,
        ]
        await store.put("c", b"3")
        new = await asyncio.wait_for(anext(w), STEP)
        assert new is not None
        assert (new.name, new.size) == ("c", 1)
        await store.delete("a")
        gone = await asyncio.wait_for(anext(w), STEP)
        assert gone is not None
        assert (gone.name, gone.deleted) == ("a", True)
    async with store.watch(ignore_deletes=True) as w:
        assert (
            await asyncio.wait_for(anext(w), STEP) or ObjectInfo(name="?", bucket="?")
        ).name == "c"
        assert await asyncio.wait_for(anext(w), STEP) is None
    async with store.watch(updates_only=True) as w:
        await store.put("d", b"4")
        first = await asyncio.wait_for(anext(w), STEP)
        assert first is not None
        assert first.name == "d"
    async with store.watch(include_history=True) as w:
        names = []
        while (item := await asyncio.wait_for(anext(w), STEP)) is not None:
            names.append(item.name)
        assert sorted(names) == ["a", "b", "c", "d"]
    empty = await new_store(js)
    async with empty.watch() as w:
        assert await asyncio.wait_for(anext(w), STEP) is None
    await wait_until(lambda: _no_consumers(store), STEP)


# --------------------------------------------------------------------------- memory


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_200_mib_object_in_bounded_memory(js: JetStreamContext) -> None:
    """A 200 MiB object streams in and out while RSS grows by less than 64 MiB."""
    store = await new_store(js)
    piece = os.urandom(MiB)
    total = 200
    expected = hashlib.sha256()
    for _ in range(total):
        expected.update(piece)
    base = _rss()
    peak = base
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss())
            try:
                await asyncio.wait_for(stop.wait(), 0.02)
            except TimeoutError:
                continue

    async def source() -> AsyncIterator[bytes]:
        for _ in range(total):
            yield piece

    sampler = asyncio.create_task(sample())
    try:
        info = await store.put("big", source())
        assert (info.size, info.chunks) == (total * MiB, total * 8)
        put_peak = peak
        got = hashlib.sha256()
        size = 0
        async with await store.get("big") as result:
            async for chunk in result:
                got.update(chunk)
                size += len(chunk)
    finally:
        stop.set()
        await sampler
    peak = max(peak, _rss())
    print(
        f"\nRSS base {base / MiB:.1f} MiB; growth during put {(put_peak - base) / MiB:.1f} MiB, "
        f"put and get {(peak - base) / MiB:.1f} MiB"
    )
    assert size == total * MiB
    assert got.digest() == expected.digest()
    assert peak - base < 64 * MiB


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("fault", ["restart", "down"])
async def test_connection_drop_during_put(fault: str) -> None:
    """The server restarts (or is killed and comes back later) during a put: a typed
    error, the old version stays readable, and the failed put's chunks are purged, those
    left in the reconnect buffer included, before the error is raised."""
    async with NatsServer() as server:
        js = await aiojetstream.connect(
            server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1
        )
        try:
            store = await js.create_object_store(ObjectStoreConfig(bucket="faults"))
            first = await store.put("obj", b"version 1")
            halfway = asyncio.Event()

            async def source() -> AsyncIterator[bytes]:
                for i in range(400):
                    if i == 20:
                        halfway.set()
                    yield os.urandom(256 * 1024)
                    await asyncio.sleep(0)  # let the fault task run

            async def fault_task() -> None:
                await halfway.wait()
                if fault == "restart":
                    await server.restart()
                    return
                await server.kill()
                await wait_until(lambda: not js.nc.is_connected, 30)
                await server.restart()

            faulty = asyncio.create_task(fault_task())
            with pytest.raises(JetStreamError) as caught:
                await asyncio.wait_for(store.put("obj", source()), 60)
            await asyncio.wait_for(faulty, 60)
            print(f"\nput failed with {caught.value!r}")
            assert not getattr(caught.value, "__notes__", None)  # the cleanup succeeded
            assert await chunk_subjects(store) == {f"$O.faults.C.{first.nuid}": 1}
            assert await store.get_bytes("obj") == b"version 1"
        finally:
            await js.close()


async def test_a_read_that_ended_never_reads_as_a_clean_end(js: JetStreamContext) -> None:
    """Reading an ObjectResult again after it failed (or after it was closed before
    its end) returned b"" without an error: a cut-off object taken for an empty
    rest. It raises its error again (or ObjectStoreError); a read that got every
    chunk still ends with b"", as a file at its end."""
    store = await new_store(js, storage=StorageType.MEMORY)
    data = os.urandom(300_000)
    await store.put("o", data, chunk_size=1024)

    failed = await store.get("o")
    first = await failed.__anext__()
    assert first == data[:1024]
    await store.delete("o")
    with pytest.raises(ObjectNotFoundError):
        await failed.read()
    with pytest.raises(ObjectNotFoundError):
        await failed.read()

    await store.put("o", data, chunk_size=1024)
    async with await store.get("o") as closed:
        assert await closed.__anext__() == data[:1024]
    with pytest.raises(ObjectStoreError, match="closed before its end"):
        await closed.read()
    with pytest.raises(ObjectStoreError, match="closed before its end"):
        async for _ in closed:
            pass

    whole = await store.get("o")
    assert await whole.read() == data
    assert await whole.read() == b""
    empty = await store.put("e", b"")
    assert empty.size == 0
    nothing = await store.get("e")
    assert await nothing.read() == b""
    assert await nothing.read() == b""


async def test_header_names_other_clients_write_are_taken(js: JetStreamContext) -> None:
    """nats.js takes any printable ASCII but ':' in an object header's name (nats.go
    checks none): such an object refused a description-only ``update_meta`` with its
    own headers (the RFC 7230 token rule of message headers)."""
    store = await new_store(js)
    headers = {"X/Slash": ["a", "b"], "K(1)": ["v"]}
    await store.put("o", b"x", headers=headers)
    info = await store.info("o")
    assert info.headers == headers
    meta = ObjectMeta(name="o", description="new", headers=info.headers)
    updated = await store.update_meta("o", meta)
    assert updated.description == "new"
    assert (await store.info("o")).headers == headers


async def test_a_put_refused_by_a_full_account_leaves_no_chunks() -> None:
    """The account has room for the first chunk, not for the second nor for the
    cleanup's empty flush message: the flush's refusal (10002) stopped the cleanup
    before its purge, and the chunk stayed, keeping the account full for good."""
    limit = 1_000_000
    config = {
        "accounts": {
            "A": {
                "jetstream": {"max_file": limit, "max_mem": limit},
                "users": [{"user": "a", "password": "a"}],
            }
        }
    }
    async with NatsServer(config=config) as server:
        js = await aiojetstream.connect(server.url.replace("nats://", "nats://a:a@"))
        try:
            store = await js.create_object_store(ObjectStoreConfig(bucket="FULL"))
            await store.put("old", b"O" * 100_000)
            await js.create_stream(StreamConfig(name="FILLER", subjects=["filler"]))
            # File storage counts 22 + subject + data + 8 bytes a message: leave 400,000.
            free = limit - (await js.account_info()).storage
            await js.publish("filler", b"F" * (free - 400_000 - 36))
            free = limit - (await js.account_info()).storage
            assert free == 400_000
            chunk = free - 59 - 30  # ($O.FULL.C.<nuid>: 59 bytes and the data a chunk)
            with pytest.raises(ResourcesExceededError):
                await store.put("big", b"N" * (chunk * 3), chunk_size=chunk)
            bucket = await js.stream("OBJ_FULL")
            assert (await bucket.info()).state.messages == 2  # "old": one chunk, its info
            assert [info.name async for info in store.list()] == ["old"]
            await store.put("small", b"s" * 10)  # the account has its room back
            assert await (await store.get("old")).read() == b"O" * 100_000
        finally:
            await js.close()


async def test_binding_a_mirror_of_an_object_store_is_refused(js: JetStreamContext) -> None:
    """A mirror holds its origin's subjects ($O.<origin>.…): bound under its own name,
    list() was empty, get() raised ObjectNotFoundError and a watch saw nothing."""
    origin = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("orig")))
    await origin.put("one", b"1")
    mirror = unique_name("mir")
    await js.create_stream(
        StreamConfig(name=f"OBJ_{mirror}", mirror=StreamSource(name=f"OBJ_{origin.bucket}"))
    )
    with pytest.raises(ObjectStoreError, match="is a mirror of"):
        await js.object_store(mirror)
    # A mirror that renames the origin's subjects to its own holds its own bucket's
    # subjects: bound and read as before.
    renamed = unique_name("ren")
    await js.create_stream(
        StreamConfig(
            name=f"OBJ_{renamed}",
            mirror=StreamSource(
                name=f"OBJ_{origin.bucket}",
                subject_transforms=[
                    SubjectTransformConfig(src=f"$O.{origin.bucket}.>", dest=f"$O.{renamed}.>")
                ],
            ),
        )
    )
    store = await js.object_store(renamed)

    async def mirrored() -> bool:
        return [info.name async for info in store.list()] == ["one"]

    await wait_until(mirrored)
    assert await store.get_bytes("one") == b"1"

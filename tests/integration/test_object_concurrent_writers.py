"""Concurrent writers of one object, against a real nats-server.

Each write of an info (put, update_meta, delete, a link) replaces only the info
it read: another writer's info stored meanwhile makes the stream refuse it, and
the write reads again. So every version's chunks are purged by exactly the
writer that replaced it: no object points at purged chunks, no chunks are left
behind. Each test makes the race happen every time: the second writer runs
while the first is about to publish the info it prepared.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from aiojetstream import (
    JetStreamContext,
    ObjectExistsError,
    ObjectMeta,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreConfig,
    PubAck,
    WrongLastSequenceError,
)
from helpers import recorded_publish, unique_name


async def stores(js: JetStreamContext) -> tuple[ObjectStore, ObjectStore]:
    """Two handles on one new bucket: the writer under test and the other writer."""
    store = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("OC")))
    return store, await js.object_store(store.bucket)


async def chunk_subjects(store: ObjectStore) -> list[str]:
    info = await store.stream.info(subjects_filter=f"$O.{store.bucket}.C.>")
    return sorted(info.state.subjects or {})


def chunks_of(store: ObjectStore, nuid: str | None) -> str:
    return f"$O.{store.bucket}.C.{nuid}"


def before_publishing(
    store: ObjectStore, other_write: Callable[[], Awaitable[object]], times: int = 1
) -> list[str]:
    """Run ``other_write`` before each of ``store``'s first ``times`` info publishes.

    Returns the outcome of each publish ("stored" or "refused"), filled in as they happen.
    """
    original = store._publish_info
    outcomes: list[str] = []

    async def racing(*args: Any, **kwargs: Any) -> PubAck:
        if len(outcomes) < times:
            await other_write()
        return await recorded_publish(outcomes, original, *args, **kwargs)

    store._publish_info = racing  # type: ignore[method-assign]
    return outcomes


async def test_put_racing_a_put_purges_the_version_it_replaced(js: JetStreamContext) -> None:
    """A put whose info another put replaced since it was read stores its own over that
    one and purges that one's chunks (not the version it first read, gone already)."""
    store, other = await stores(js)
    await store.put("obj", b"first version")
    theirs = os.urandom(5000)
    outcomes = before_publishing(store, lambda: other.put("obj", theirs, chunk_size=1000))
    mine = os.urandom(3000)
    info = await store.put("obj", mine, chunk_size=1000)
    assert outcomes == ["refused", "stored"]
    assert await store.get_bytes("obj") == mine
    assert await chunk_subjects(store) == [chunks_of(store, info.nuid)]


async def test_put_racing_a_put_of_a_new_object(js: JetStreamContext) -> None:
    """Both puts found no object: the later one replaces the earlier and purges its chunks."""
    store, other = await stores(js)
    outcomes = before_publishing(store, lambda: other.put("new", b"theirs"))
    info = await store.put("new", b"mine")
    assert outcomes == ["refused", "stored"]
    assert await store.get_bytes("new") == b"mine"
    assert await chunk_subjects(store) == [chunks_of(store, info.nuid)]


async def test_update_meta_racing_a_put_applies_to_the_new_version(
    js: JetStreamContext,
) -> None:
    """The put's info replaced the one update_meta read: the change is applied to the new
    version (whose chunks stay), not written over it with the purged version's nuid."""
    store, other = await stores(js)
    await store.put("obj", b"old data", description="old")
    theirs = os.urandom(4000)
    outcomes = before_publishing(store, lambda: other.put("obj", theirs, chunk_size=1000))
    updated = await store.update_meta(
        "obj", ObjectMeta(name="obj", description="new", metadata={"k": "v"})
    )
    assert outcomes == ["refused", "stored"]
    assert await store.get_bytes("obj") == theirs
    info = await store.info("obj")
    assert (info.description, info.metadata) == ("new", {"k": "v"})
    assert info.nuid == updated.nuid
    assert await chunk_subjects(store) == [chunks_of(store, info.nuid)]


async def test_update_meta_racing_a_delete_is_not_found(js: JetStreamContext) -> None:
    store, other = await stores(js)
    await store.put("obj", b"data")
    before_publishing(store, lambda: other.delete("obj"))
    with pytest.raises(ObjectNotFoundError):
        await store.update_meta("obj", ObjectMeta(name="obj", description="new"))
    assert (await store.info("obj", include_deleted=True)).deleted
    assert await chunk_subjects(store) == []


async def test_delete_racing_a_put_deletes_the_new_version(js: JetStreamContext) -> None:
    """The put replaced the info delete read: delete marks the new version deleted and
    purges its chunks (none are left behind)."""
    store, other = await stores(js)
    await store.put("obj", b"old")
    outcomes = before_publishing(store, lambda: other.put("obj", os.urandom(3000), chunk_size=1000))
    await store.delete("obj")
    assert outcomes == ["refused", "stored"]
    assert (await store.info("obj", include_deleted=True)).deleted
    assert await chunk_subjects(store) == []


async def test_delete_racing_a_delete(js: JetStreamContext) -> None:
    store, other = await stores(js)
    await store.put("obj", b"data")
    outcomes = before_publishing(store, lambda: other.delete("obj"))
    await store.delete("obj")  # already deleted when it read again: nothing to do
    assert outcomes == ["refused"]
    assert await chunk_subjects(store) == []


async def test_link_racing_a_put_of_that_name_is_refused(js: JetStreamContext) -> None:
    """A link may replace a link or nothing, never a live object: one put meanwhile wins."""
    store, other = await stores(js)
    target = await store.put("target", b"data")
    before_publishing(store, lambda: other.put("name", b"a live object"))
    with pytest.raises(ObjectExistsError):
        await store.add_link("name", target)
    assert await store.get_bytes("name") == b"a live object"


async def test_rename_racing_a_put_onto_the_new_name_is_refused(js: JetStreamContext) -> None:
    store, other = await stores(js)
    await store.put("a", b"data of a")
    before_publishing(store, lambda: other.put("b", b"data of b"))
    with pytest.raises(ObjectExistsError):
        await store.update_meta("a", ObjectMeta(name="b"))
    assert await store.get_bytes("a") == b"data of a"
    assert await store.get_bytes("b") == b"data of b"


async def test_rename_racing_a_put_of_the_old_name_renames_the_new_version(
    js: JetStreamContext,
) -> None:
    """The put replaced (and purged) the version the rename read: the rename takes back
    the new name's info and renames the put's version instead; nothing points at
    purged chunks."""
    store, other = await stores(js)
    await store.put("a", b"first data")
    outcomes = before_publishing(store, lambda: other.put("a", b"put meanwhile"))
    renamed = await store.update_meta("a", ObjectMeta(name="b", description="moved"))
    assert outcomes == ["stored", "refused", "stored", "stored", "stored"]
    assert await store.get_bytes("b") == b"put meanwhile"
    assert (await store.info("b")).nuid == renamed.nuid
    with pytest.raises(ObjectNotFoundError):
        await store.info("a", include_deleted=True)  # no trace of the old name
    assert await chunk_subjects(store) == [chunks_of(store, renamed.nuid)]


async def test_rename_racing_an_update_of_the_old_name_renames_the_updated_version(
    js: JetStreamContext,
) -> None:
    store, other = await stores(js)
    await store.put("a", b"data")
    before_publishing(store, lambda: other.update_meta("a", ObjectMeta(name="a", description="x")))
    await store.update_meta("a", ObjectMeta(name="b", description="renamed"))
    info = await store.info("b")
    assert info.description == "renamed"
    assert await store.get_bytes("b") == b"data"
    with pytest.raises(ObjectNotFoundError):
        await store.info("a")
    # Deleting the old name (nothing there) can not reach the renamed object's chunks.
    with pytest.raises(ObjectNotFoundError):
        await store.delete("a")
    assert await store.get_bytes("b") == b"data"


@pytest.mark.parametrize("what", ["delete", "rename"])
async def test_rename_racing_a_delete_or_rename_of_the_old_name_is_not_found(
    js: JetStreamContext, what: str
) -> None:
    """The old name is gone by the time the rename marks it: the new name's info is taken
    back, and the rename raises ObjectNotFoundError; the other write's outcome stands."""
    store, other = await stores(js)
    await store.put("a", b"data")
    if what == "delete":
        before_publishing(store, lambda: other.delete("a"))
    else:
        before_publishing(store, lambda: other.update_meta("a", ObjectMeta(name="c")))
    with pytest.raises(ObjectNotFoundError):
        await store.update_meta("a", ObjectMeta(name="b"))
    assert (await store.info("b", include_deleted=True)).deleted
    if what == "rename":
        assert await store.get_bytes("c") == b"data"
    else:
        assert await chunk_subjects(store) == []


async def test_a_write_that_keeps_losing_gives_up_with_a_typed_error(
    js: JetStreamContext,
) -> None:
    """Replaced before each of its ten attempts: the put raises WrongLastSequenceError
    with a note and purges its own chunks; the other writer's last version stays whole."""
    store, other = await stores(js)
    await store.put("obj", b"first")
    last: list[bytes] = []

    async def put_again() -> None:
        last.append(os.urandom(100))
        await other.put("obj", last[-1])

    outcomes = before_publishing(store, put_again, times=100)
    with pytest.raises(WrongLastSequenceError) as caught:
        await store.put("obj", os.urandom(3000), chunk_size=1000)
    assert outcomes == ["refused"] * 10
    assert any("10 times" in note for note in getattr(caught.value, "__notes__", []))
    assert await store.get_bytes("obj") == last[-1]
    current = await store.info("obj")
    assert await chunk_subjects(store) == [chunks_of(store, current.nuid)]

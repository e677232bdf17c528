"""Key-value buckets (ADR-8) with per-key TTLs and limit markers (ADR-48) against a real server."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    BucketNotFoundError,
    DiscardPolicy,
    FeatureNotSupportedError,
    InvalidKeyError,
    InvalidNameError,
    InvalidOptionError,
    InvalidStreamConfigError,
    InvalidTTLError,
    JetStreamContext,
    JetStreamTimeoutError,
    KeyExistsError,
    KeyNotFoundError,
    KeyValue,
    KeyValueConfig,
    KeyValueEntry,
    KeyValueError,
    KeyValueOp,
    KeyWatcher,
    MessageTTLDisabledError,
    Msg,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamNotFoundError,
    StreamSource,
    WrongLastSequenceError,
)
from aiojetstream._watch import Reader, ReaderEvent
from aiojetstream.testing import NatsServer
from helpers import assert_watch_start_fails_cleanly, unique_name, wait_until

STEP = 10.0  # bound of any single wait for the server


async def next_item(w: KeyWatcher, timeout: float = STEP) -> KeyValueEntry | None:
    return await asyncio.wait_for(w.__anext__(), timeout)


async def until_none(w: KeyWatcher) -> list[KeyValueEntry]:
    """The entries before the end-of-initial-values ``None``."""
    out: list[KeyValueEntry] = []
    while (item := await next_item(w)) is not None:
        out.append(item)
    return out


async def all_keys(kv: KeyValue) -> list[str]:
    return sorted([k async for k in kv.keys()])  # noqa: SIM118 (an async iterator)


async def is_gone(kv: KeyValue, key: str) -> bool:
    try:
        await kv.get(key)
    except KeyNotFoundError:
        return True
    return False


@pytest.fixture
async def kv(js: JetStreamContext) -> KeyValue:
    return await js.create_key_value(KeyValueConfig(bucket=unique_name("kv"), history=5))


@pytest.fixture
async def markers(js: JetStreamContext) -> KeyValue:
    """Limit markers that expire after 1 s: for tests that wait for them to go."""
    return await js.create_key_value(
        KeyValueConfig(bucket=unique_name("mk"), history=5, limit_marker_ttl=1)
    )


@pytest.fixture
async def lasting_markers(js: JetStreamContext) -> KeyValue:
    """Limit markers that stay a minute: for tests that read them after a key expired.

    With 1 s markers such a read races the marker's own expiry on a loaded
    machine. ``history=1``: only then does a key keep its own TTL (with more
    history the server takes ``limit_marker_ttl`` as the minimum, docs/kv.md).
    """
    return await js.create_key_value(
        KeyValueConfig(bucket=unique_name("lm"), history=1, limit_marker_ttl=60)
    )


async def test_a_str_value_says_how_to_store_text(kv: KeyValue) -> None:
    # (publish's own wording said "publish text as bytes, for example payload.encode()")
    calls: list[tuple[Callable[[], Awaitable[int]], str]] = [
        (lambda: kv.put("k", "text"), "kv.put(key, value.encode())"),
        (lambda: kv.create("k", "text"), "kv.create(key, value.encode())"),
        (lambda: kv.update("k", "text", 1), "kv.update(key, value.encode(), last_revision)"),
    ]
    for call, fix in calls:
        with pytest.raises(InvalidOptionError) as refused:
            await call()
        assert "got str: store text as bytes" in str(refused.value)
        assert fix in str(refused.value)
        assert "publish" not in str(refused.value)
    assert await is_gone(kv, "k")
    value = "text"
    assert await kv.put("k", value.encode()) == 1  # as the error says


# --------------------------------------------------------------------------- buckets


async def test_bucket_config_maps_to_the_backing_stream(js: JetStreamContext) -> None:
    bucket = unique_name("shape")
    cfg = KeyValueConfig(
        bucket=bucket,
        description="d",
        history=7,
        ttl=60,
        max_value_size=1024,
        max_bytes=1 << 20,
        compression=True,
        metadata={"app": "x"},
    )
    kv = await js.create_key_value(cfg)
    assert kv.bucket == bucket
    sc = (await js.stream(f"KV_{bucket}")).cached_info.config
    assert sc.subjects == [f"$KV.{bucket}.>"]
    assert sc.max_msgs_per_subject == 7
    assert sc.max_age == timedelta(seconds=60)
    assert sc.duplicate_window == timedelta(seconds=60)  # min(2 min, ttl)
    assert sc.max_msg_size == 1024
    assert sc.max_bytes == 1 << 20
    assert sc.discard is DiscardPolicy.NEW
    assert sc.allow_rollup_hdrs
    assert sc.deny_delete
    assert not sc.deny_purge
    assert sc.allow_direct
    assert sc.compression is StoreCompression.S2
    assert not sc.allow_msg_ttl
    assert sc.subject_delete_marker_ttl is None
    assert sc.metadata is not None
    assert sc.metadata["app"] == "x"

    status = await kv.status()
    assert status.bucket == bucket
    assert (status.history, status.ttl, status.limit_marker_ttl) == (7, timedelta(seconds=60), None)
    assert status.is_compressed
    assert status.backing_store == "JetStream"
    assert status.values == 0
    assert status.bytes == 0
    assert status.stream_info.config.name == f"KV_{bucket}"
    assert status.metadata["app"] == "x"
    assert status.config.model_dump() == cfg.model_dump()

    # Same config again: fine. Long TTL: the duplicate window stays at 2 minutes.
    await js.create_key_value(cfg)
    other = await js.create_key_value(KeyValueConfig(bucket=unique_name("long"), ttl=3600))
    assert other.stream.cached_info.config.duplicate_window == timedelta(minutes=2)


async def test_bucket_management(js: JetStreamContext) -> None:
    one, two = unique_name("one"), unique_name("two")
    await js.create_stream(StreamConfig(name=unique_name("plain"), subjects=["plain.>"]))
    await js.create_key_value(KeyValueConfig(bucket=one))
    await js.create_or_update_key_value(KeyValueConfig(bucket=two))
    assert sorted([n async for n in js.key_value_store_names()]) == sorted([one, two])

    kv = await js.create_or_update_key_value(KeyValueConfig(bucket=two, history=3))
    assert (await kv.status()).history == 3
    kv = await js.update_key_value(KeyValueConfig(bucket=two, history=4))
    assert (await (await js.key_value(two)).status()).history == 4

    with pytest.raises(BucketNotFoundError):
        await js.key_value("missing")
    with pytest.raises(BucketNotFoundError):
        await js.update_key_value(KeyValueConfig(bucket="missing"))
    with pytest.raises(BucketNotFoundError):
        await js.delete_key_value("missing")
    with pytest.raises(InvalidNameError):
        await js.key_value("bad.name")

    await js.delete_key_value(one)
    assert [n async for n in js.key_value_store_names()] == [two]
    with pytest.raises(BucketNotFoundError):
        await js.key_value(one)


async def test_limit_markers_need_api_level_1(js: JetStreamContext) -> None:
    """Below API level 1 (nats-server < 2.11) markers are refused before anything is sent."""
    bucket = unique_name("lvl")
    cfg = KeyValueConfig(bucket=bucket, limit_marker_ttl=5)
    js._api.level = 0  # what a 2.10 server reports
    try:
        sent = js.nc.stats["out_msgs"]
        with pytest.raises(FeatureNotSupportedError, match="API level >= 1") as info:
            await js.create_key_value(cfg)
        assert (info.value.required_level, info.value.server_level) == (1, 0)
        with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.11"):
            await js.create_or_update_key_value(cfg)
        with pytest.raises(FeatureNotSupportedError):  # before "bucket not found"
            await js.update_key_value(cfg)
        assert js.nc.stats["out_msgs"] == sent
        # Without markers the level does not matter.
        plain = await js.create_key_value(KeyValueConfig(bucket=bucket))
        assert not plain.stream.cached_info.config.allow_msg_ttl
    finally:
        js._api.level = None
    # At the server's real level the markers go ahead.
    kv = await js.update_key_value(cfg)
    sent_cfg = kv.stream.cached_info.config
    assert sent_cfg.allow_msg_ttl
    assert sent_cfg.subject_delete_marker_ttl == timedelta(seconds=5)


async def test_enable_limit_markers_later_but_never_disable(js: JetStreamContext) -> None:
    late = unique_name("late")
    kv = await js.create_key_value(KeyValueConfig(bucket=late, history=2))
    await kv.put("k", b"v")
    assert (await kv.status()).limit_marker_ttl is None
    with pytest.raises(MessageTTLDisabledError, match="limit markers"):
        await kv.create("t", b"v", ttl=5)
    with pytest.raises(MessageTTLDisabledError, match="limit markers"):
        await kv.purge("k", ttl=5)

    await js.update_key_value(KeyValueConfig(bucket=late, history=2, limit_marker_ttl=2))
    # The old handle notices (it re-reads the config before refusing a TTL).
    assert await kv.create("t", b"v", ttl=5) > 0
    assert (await kv.status()).limit_marker_ttl == timedelta(seconds=2)
    assert (await kv.get("k")).value == b"v"

    for call in (js.update_key_value, js.create_or_update_key_value):
        with pytest.raises(KeyValueError, match="never disabled"):
            await call(KeyValueConfig(bucket=late, history=2))
    assert (await kv.status()).limit_marker_ttl == timedelta(seconds=2)
    # Changing the marker TTL is fine.
    await js.update_key_value(KeyValueConfig(bucket=late, history=2, limit_marker_ttl=3))
    assert (await kv.status()).limit_marker_ttl == timedelta(seconds=3)


# --------------------------------------------------------------------------- operations


async def test_put_get_create_update(kv: KeyValue) -> None:
    r1 = await kv.put("a.b", b"one")
    entry = await kv.get("a.b")
    assert (entry.key, entry.value, entry.revision, entry.operation) == ("a.b", b"one", r1, "PUT")
    assert entry.bucket == kv.bucket
    assert entry.delta == 0
    assert entry.created.tzinfo is not None

    with pytest.raises(KeyExistsError) as info:
        await kv.create("a.b", b"again")
    assert isinstance(info.value, WrongLastSequenceError)

    r2 = await kv.update("a.b", b"two", r1)
    assert r2 > r1
    assert (await kv.get("a.b")).value == b"two"
    with pytest.raises(KeyExistsError):
        await kv.update("a.b", b"stale", r1)
    with pytest.raises(WrongLastSequenceError):
        await kv.update("a.b", b"stale", r1)
    assert (await kv.get("a.b", revision=r1)).value == b"one"

    r3 = await kv.create("fresh", b"new")
    assert (await kv.get("fresh")).revision == r3
    with pytest.raises(KeyNotFoundError):
        await kv.get("a.b", revision=r3)  # a revision of another key
    with pytest.raises(KeyNotFoundError):
        await kv.get("a.b", revision=10_000)
    with pytest.raises(KeyNotFoundError):
        await kv.get("never")
    # update with 0: only if the key has no revisions
    assert await kv.update("zero", b"z", 0) > 0


async def test_get_forms_of_the_direct_get(kv: KeyValue) -> None:
    """Short keys name themselves in the direct get's subject, long ones go in a JSON body.

    Values stored with headers (a TTL) and plain ones read alike; the entry's
    key is a plain ``str`` also for a ``str`` subclass.
    """

    class Key(str):
        pass

    long_key = "k" * 1100  # past the subject form's 1 KiB bound
    assert kv._key("short")[2] is not None
    assert kv._key(long_key)[2] is None
    r1 = await kv.put(long_key, b"long")
    r2 = await kv.put("short", b"plain")
    entry = await kv.get(long_key)
    assert (entry.key, entry.value, entry.revision) == (long_key, b"long", r1)
    entry = await kv.get(Key("short"))
    assert (entry.key, entry.value, entry.revision) == ("short", b"plain", r2)
    assert type(entry.key) is str
    await kv.delete(long_key)
    with pytest.raises(KeyNotFoundError, match="DEL"):
        await kv.get(long_key)


async def test_delete_and_purge(kv: KeyValue) -> None:
    r1 = await kv.put("d", b"1")
    await kv.put("d", b"2")
    with pytest.raises(KeyExistsError):
        await kv.delete("d", last_revision=r1)
    await kv.delete("d")
    with pytest.raises(KeyNotFoundError, match="DEL"):
        await kv.get("d")
    assert (await kv.get("d", revision=r1)).value == b"1"  # history kept
    r4 = await kv.create("d", b"back")  # create over a delete marker
    assert (await kv.get("d")).revision == r4

    await kv.put("p", b"1")
    r = await kv.put("p", b"2")
    with pytest.raises(KeyExistsError):
        await kv.purge("p", last_revision=r - 1)
    await kv.purge("p", last_revision=r)
    with pytest.raises(KeyNotFoundError, match="PURGE"):
        await kv.get("p")
    history = await kv.history("p")
    assert [e.operation for e in history] == [KeyValueOp.PURGE]  # rolled up
    await kv.create("p", b"again")


async def test_keys_skip_deleted_and_purged(js: JetStreamContext, kv: KeyValue) -> None:
    assert await all_keys(kv) == []
    for key in ("a", "b.c", "d", "e"):
        await kv.put(key, b"v")
    await kv.put("a", b"v2")
    await kv.delete("d")
    await kv.purge("e")
    assert await all_keys(kv) == ["a", "b.c"]
    # Server-side: the consumer is gone afterwards.
    assert [n async for n in kv.stream.consumer_names()] == []
    # Breaking out early also cleans up (when the generator is closed).
    gen = kv.keys()
    assert await gen.__anext__() in ("a", "b.c")
    await gen.aclose()
    await wait_until(lambda: _no_consumers(kv), STEP)


async def _no_consumers(kv: KeyValue) -> bool:
    return [n async for n in kv.stream.consumer_names()] == []


async def test_history(kv: KeyValue) -> None:
    with pytest.raises(KeyNotFoundError):
        await kv.history("h")
    revs = [await kv.put("h", str(i).encode()) for i in range(3)]
    await kv.delete("h")
    await kv.put("other", b"x")
    entries = await kv.history("h")
    assert [e.revision for e in entries[:3]] == revs
    assert [e.operation for e in entries] == ["PUT", "PUT", "PUT", "DEL"]
    assert [e.value for e in entries] == [b"0", b"1", b"2", b""]
    assert [e.delta for e in entries] == [3, 2, 1, 0]
    assert all(e.key == "h" for e in entries)


async def test_purge_deletes(kv: KeyValue) -> None:
    await kv.put("live", b"v")
    await kv.put("gone", b"1")
    await kv.put("gone", b"2")
    await kv.delete("gone")
    await kv.put("purged", b"1")
    await kv.purge("purged")

    # Default threshold (30 min): young markers stay, as the only revision.
    await kv.purge_deletes()
    assert [e.operation for e in await kv.history("gone")] == [KeyValueOp.DEL]
    assert [e.operation for e in await kv.history("purged")] == [KeyValueOp.PURGE]

    await kv.purge_deletes(older_than=0)
    for key in ("gone", "purged"):
        with pytest.raises(KeyNotFoundError):
            await kv.history(key)
    assert (await kv.get("live")).value == b"v"
    assert (await kv.status()).values == 1


async def test_purge_deletes_keeps_revisions_put_while_it_runs(kv: KeyValue) -> None:
    """A young marker's key was purged with keep=1: a value put after the listing (and
    before that key's purge) took the marker and every revision but the last with it.
    Here a writer puts two values in that window (the purge call is wrapped to do so)."""
    await kv.put("gone", b"1")
    await kv.delete("gone")
    stream = kv._stream
    purge = stream.purge

    async def purge_after_a_writer(**kwargs: Any) -> Any:
        await kv.put("gone", b"3")
        await kv.put("gone", b"4")
        return await purge(**kwargs)

    stream.purge = purge_after_a_writer  # type: ignore[method-assign]
    try:
        await kv.purge_deletes()  # the marker is young: it stays, what is below it goes
    finally:
        stream.purge = purge  # type: ignore[method-assign]
    entries = await kv.history("gone")
    assert [(e.operation, e.value) for e in entries] == [
        (KeyValueOp.DEL, b""),
        (KeyValueOp.PUT, b"3"),
        (KeyValueOp.PUT, b"4"),
    ]


async def test_purge_deletes_older_than_longer_than_any_age_keeps_every_marker(
    kv: KeyValue,
) -> None:
    """A huge ``older_than`` means "no marker is old enough" (as nats.go, which compares
    ages); computing ``now - older_than`` raised an untyped OverflowError after the
    markers were read. One no timedelta holds is refused before anything is sent."""
    await kv.put("gone", b"1")
    await kv.delete("gone")
    for huge in (1e11, timedelta.max, timedelta.max.days * 86400):
        await kv.purge_deletes(older_than=huge)
        assert [e.operation for e in await kv.history("gone")] == [KeyValueOp.DEL]
    for bad in (1e20, math.inf, math.nan, -1, "1x", "-1h", True):
        with pytest.raises(InvalidOptionError, match="older_than"):
            await kv.purge_deletes(older_than=bad)
    assert (await kv.status()).stream_info.state.consumer_count == 0
    await kv.purge_deletes(older_than=0)
    with pytest.raises(KeyNotFoundError):
        await kv.history("gone")


async def test_invalid_keys_are_refused_before_sending(kv: KeyValue) -> None:
    for bad in ("", ".a", "a.", "a..b", "a b", "a*", "*", ">", "a.>", "ä", "a\r\n"):
        with pytest.raises(InvalidKeyError):
            await kv.put(bad, b"v")
        with pytest.raises(InvalidKeyError):
            await kv.get(bad)
    with pytest.raises(InvalidKeyError):
        kv.watch("a..b")
    with pytest.raises(InvalidKeyError):
        kv.watch(["ok", "a>"])
    with pytest.raises(InvalidTTLError):
        await kv.create("k", b"v", ttl=0.5)
    assert (await kv.status()).values == 0


# --------------------------------------------------------------------------- watch


async def test_watch_initial_values_then_one_none_then_updates(kv: KeyValue) -> None:
    # Empty bucket: the None comes right away.
    async with kv.watch() as w:
        assert await next_item(w) is None
        await kv.put("x", b"1")
        entry = await next_item(w)
        assert entry is not None
        assert (entry.key, entry.value, entry.delta) == ("x", b"1", 0)

    await kv.put("y", b"1")
    await kv.put("y", b"2")
    await kv.delete("x")
    async with kv.watch() as w:
        initial = await until_none(w)
        assert [(e.key, e.operation) for e in initial] == [("y", "PUT"), ("x", "DEL")]
        assert initial[0].value == b"2"
        assert initial[-1].delta == 0
        await kv.put("z", b"new")
        entry = await next_item(w)
        assert entry is not None
        assert entry.key == "z"
    assert [n async for n in kv.stream.consumer_names()] == []


async def test_watch_options(kv: KeyValue) -> None:
    await kv.put("a.1", b"1")
    await kv.put("a.1", b"2")
    await kv.put("b.1", b"3")
    await kv.delete("b.1")

    async with kv.watch(include_history=True) as w:
        assert [e.value for e in await until_none(w)] == [b"1", b"2", b"3", b""]
    async with kv.watch(ignore_deletes=True) as w:
        assert [e.key for e in await until_none(w)] == ["a.1"]
    async with kv.watch("a.*", meta_only=True) as w:
        (entry,) = await until_none(w)
        assert entry.value == b""
        assert entry.key == "a.1"
        assert entry.revision == 2
    async with kv.watch(["a.>", "c.>"]) as w:
        assert [e.key for e in await until_none(w)] == ["a.1"]
    async with kv.watch(updates_only=True) as w:
        await kv.put("a.1", b"late")
        update = await next_item(w)  # no None with updates_only
        assert update is not None
        assert update.value == b"late"
        await kv.purge("a.1")
        update = await next_item(w)
        assert update is not None
        assert update.operation is KeyValueOp.PURGE


async def test_watch_filters_list_order(kv: KeyValue) -> None:
    async with kv.watch(["a.>", "c.>"]) as w:
        assert await next_item(w) is None
        await kv.put("c.1", b"c")
        await kv.put("b.2", b"not watched")
        await kv.put("a.2", b"a")
        got = [await next_item(w), await next_item(w)]
        assert [(e.key, e.value) for e in got if e] == [("c.1", b"c"), ("a.2", b"a")]


async def test_watch_filters_repeated_or_covering_one_another(kv: KeyValue) -> None:
    """A filter given twice counts once; one covering another (the server refuses
    that pair, with a generic APIError) is InvalidKeyError before anything is sent."""
    await kv.put("a.b", b"1")
    async with kv.watch(["a.b", "a.b"]) as w:
        assert [e.key for e in await until_none(w)] == ["a.b"]
    for filters in (["a.>", "a.b"], ["a.*", "a.b", "c"], ["c", ">"], ["a.*", "*.*"]):
        with pytest.raises(InvalidKeyError, match="overlap"):
            kv.watch(filters)
    assert (await kv.status()).stream_info.state.consumer_count == 0


async def test_watch_read_by_a_second_task_at_once_is_refused(kv: KeyValue) -> None:
    """Two tasks in anext() of one watcher got the same entry (and the next was lost):
    the second is refused (RuntimeError, as an async generator), the first undisturbed;
    a cancelled wait loses nothing."""
    async with kv.watch(updates_only=True) as w:
        first = asyncio.ensure_future(next_item(w))
        await wait_until(lambda: w._reader._task is not None)  # the read is under way
        with pytest.raises(RuntimeError, match="already running"):
            await next_item(w)
        await kv.put("a", b"1")
        await kv.put("b", b"2")
        got = await first
        assert got is not None
        assert (got.key, got.revision) == ("a", 1)
        second = await next_item(w)
        assert second is not None
        assert (second.key, second.revision) == ("b", 2)

        waiting = asyncio.ensure_future(w.__anext__())
        await wait_until(lambda: w._reader._task is not None)  # the read is under way
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await kv.put("c", b"3")
        third = await next_item(w)
        assert third is not None
        assert third.key == "c"


async def test_watch_never_sends_a_second_none_after_a_reset(
    js: JetStreamContext, kv: KeyValue
) -> None:
    await kv.put("k", b"1")
    async with kv.watch() as w:
        assert [e.key for e in await until_none(w)] == ["k"]
        names = [n async for n in kv.stream.consumer_names()]
        assert len(names) == 1
        await kv.stream.delete_consumer(names[0])  # the ordered consumer recreates it
        await kv.put("k", b"2")
        entry = await next_item(w, 30)
        assert entry is not None
        assert entry.value == b"2"
        await kv.put("k", b"3")
        entry = await next_item(w)
        assert entry is not None
        assert entry.value == b"3"


async def test_watch_without_async_with(kv: KeyValue) -> None:
    await kv.put("k", b"1")
    w = kv.watch("k")
    items = [await next_item(w), await next_item(w)]
    assert items[0] is not None
    assert items[0].value == b"1"
    assert items[1] is None
    await w.aclose()
    await w.aclose()
    with pytest.raises(StopAsyncIteration):
        await w.__anext__()


async def test_watch_start_is_bounded_while_the_server_is_down() -> None:
    """A watch's start (its consumer's creation) waited forever while the server was
    unreachable, retrying with backoff; keys() and history() time out. nats.go's Watch
    returns an error when it can not create its consumer: JetStreamTimeoutError after
    the context's timeout, and nothing keeps retrying afterwards."""
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url, timeout=1)
        try:
            kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("down")))
            await kv.put("k", b"v")
            await server.stop()
            await wait_until(lambda: not js.nc.is_connected, STEP)
            await assert_watch_start_fails_cleanly(kv.watch(), STEP / 2)
            loop = asyncio.get_running_loop()
            # keys() / history() start within their own timeout, not the context's
            # (which the watch's bound first overrode for them too).
            for timeout in (0.5, 2.5):
                start = loop.time()
                with pytest.raises(JetStreamTimeoutError, match="could not start reading"):
                    await asyncio.wait_for(all_keys_within(kv, timeout), STEP)
                took = loop.time() - start
                assert timeout - 0.1 <= took < timeout + 1.5, (timeout, took)
        finally:
            await js.close()


async def all_keys_within(kv: KeyValue, timeout: float) -> list[str]:
    return [k async for k in kv.keys(timeout=timeout)]


async def test_a_timeout_without_a_domain_ends_at_the_callers_deadline() -> None:
    """A put or get that timed out looked the bucket up afterwards (for a deleted
    bucket seen through a domain, where a leaf answers nothing): on a frozen server
    that took up to a second more than the caller's timeout. Without a domain or an
    API prefix a deleted bucket is no responders, so a timeout is raised at once."""
    async with NatsServer() as server, await aiojetstream.connect(server.url) as js:
        kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("frozen")))
        await kv.put("k", b"1")
        loop = asyncio.get_running_loop()
        server.freeze()
        try:
            for call in (kv.put("k", b"2", timeout=1.0), kv.get("k", timeout=1.0)):
                start = loop.time()
                with pytest.raises(JetStreamTimeoutError):
                    await call
                took = loop.time() - start
                assert 0.9 <= took < 1.6, took  # 2.0 s with the look-up
        finally:
            server.thaw()


async def test_a_deleted_bucket_is_bucket_not_found_everywhere(js: JetStreamContext) -> None:
    """status(), get() and a running watch raised StreamNotFoundError, the writes
    NoRespondersError, on a deleted bucket; keys, history and a watch's start said
    BucketNotFoundError. Now every call does (caused by the StreamNotFoundError)."""
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("del"), history=5))
    await kv.put("k", b"1")
    async with kv.watch() as w:
        assert [e.key for e in await until_none(w)] == ["k"]
        await js.delete_key_value(kv.bucket)
        with pytest.raises(BucketNotFoundError) as caught:
            await next_item(w)
        assert isinstance(caught.value.__cause__, StreamNotFoundError)
        # The running watcher is closed by the error: iterating it again ends
        # (it tried to recreate its consumer, on a stream that is gone).
        with pytest.raises(StopAsyncIteration):
            await next_item(w)

    async def watch_start() -> None:
        async with kv.watch():
            pass

    calls = {
        "status": kv.status(),
        "get": kv.get("k"),
        "get revision": kv.get("k", revision=1),
        "put": kv.put("k", b"2"),
        "create": kv.create("new", b"2"),
        "create with ttl": kv.create("new", b"2", ttl=5),
        "update": kv.update("k", b"2", 1),
        "delete": kv.delete("k"),
        "purge": kv.purge("k"),
        "purge with ttl": kv.purge("k", ttl=5),
        "keys": all_keys(kv),
        "history": kv.history("k"),
        "purge_deletes": kv.purge_deletes(),
        "watch start": watch_start(),
    }
    for what, call in calls.items():
        with pytest.raises(BucketNotFoundError, match="not found") as caught:
            await asyncio.wait_for(call, STEP)
        assert isinstance(caught.value.__cause__, StreamNotFoundError), what
    # A watcher whose start failed is closed: iterating it again just ends (it
    # raised StreamNotFoundError, recreating the consumer).
    w = kv.watch()
    with pytest.raises(BucketNotFoundError):
        await next_item(w)
    with pytest.raises(StopAsyncIteration):
        await next_item(w)


# --------------------------------------------------------------------------- limit markers


async def test_create_with_ttl_expires_with_a_purge_marker(
    lasting_markers: KeyValue, markers: KeyValue
) -> None:
    kv = lasting_markers  # the marker outlives every read below, however slow
    async with kv.watch("t") as w:
        assert await next_item(w) is None
        rev = await kv.create("t", b"short", ttl=1)
        entry = await next_item(w)
        assert entry is not None
        assert (entry.operation, entry.revision, entry.value) == ("PUT", rev, b"short")
        # The server removes it after ~1 s and leaves a MaxAge marker: a PURGE.
        marker = await next_item(w)
        assert marker is not None
        assert marker.key == "t"
        assert marker.operation is KeyValueOp.PURGE
        assert marker.value == b""
    # get never returns the marker as an empty value (the nats-py phantom entry).
    with pytest.raises(KeyNotFoundError, match="PURGE"):
        await kv.get("t")
    assert await all_keys(kv) == []
    history = await kv.history("t")
    assert [e.operation for e in history] == [KeyValueOp.PURGE]
    assert history[0].revision == marker.revision
    # create works over the marker (no TTL: nothing races the read back) ...
    again = await kv.create("t", b"again")
    assert again > marker.revision
    assert (await kv.get("t")).revision == again
    # ... and once the marker itself expired (1 s markers; waited for, not raced).
    first = await markers.create("t", b"short", ttl=1)
    await wait_until(lambda: is_gone(markers, "t"), STEP)
    await wait_until(lambda: _no_revisions(markers, "t"), STEP)
    assert await markers.create("t", b"third") > first


async def _only_a_marker(kv: KeyValue, key: str) -> bool:
    """Whether ``key``'s one revision left is a PURGE (its limit marker, once it expired)."""
    return [e.operation for e in await kv.history(key)] == [KeyValueOp.PURGE]


async def test_watch_ignoring_deletes_leaves_out_purges_and_limit_markers(
    lasting_markers: KeyValue,
) -> None:
    """docs/api.md: ``ignore_deletes`` leaves out DEL and PURGE entries. A purged key
    and a MaxAge limit marker (a PURGE, ADR-48) reached the watcher, in the initial
    values and as updates; only DEL was left out."""
    kv = lasting_markers  # history 1, markers lasting a minute
    await kv.put("live", b"1")
    await kv.put("deleted", b"1")
    await kv.delete("deleted")
    await kv.put("purged", b"1")
    await kv.purge("purged")
    await kv.create("aged", b"1", ttl=1)
    await wait_until(lambda: _only_a_marker(kv, "aged"), STEP)
    async with kv.watch(ignore_deletes=True) as w:
        initial = await until_none(w)
        assert [(e.key, e.operation) for e in initial] == [("live", KeyValueOp.PUT)]
        await kv.put("purged2", b"2")
        await kv.purge("purged2")
        await kv.delete("live")
        await kv.create("aged2", b"2", ttl=1)
        await wait_until(lambda: _only_a_marker(kv, "aged2"), STEP)
        await kv.put("end", b"3")
        updates: list[KeyValueEntry] = []
        while not updates or updates[-1].key != "end":
            entry = await next_item(w)
            assert entry is not None
            updates.append(entry)
    assert [(e.key, e.operation) for e in updates] == [
        ("purged2", KeyValueOp.PUT),
        ("aged2", KeyValueOp.PUT),
        ("end", KeyValueOp.PUT),
    ]


async def _no_revisions(kv: KeyValue, key: str) -> bool:
    try:
        await kv.history(key)
    except KeyNotFoundError:
        return True
    return False


async def test_purge_with_ttl_leaves_no_trace(markers: KeyValue) -> None:
    for key in ("p", "q"):
        await markers.put(key, b"1")
        await markers.put(key, b"2")
    await markers.put("keep", b"k")
    # "p": a purge marker that lasts, read while it is certainly there (the rollup
    # removed both revisions); "q": one that expires after 1 s, waited for.
    await markers.purge("p", ttl=3600)
    await markers.purge("q", ttl=1)
    assert [e.operation for e in await markers.history("p")] == [KeyValueOp.PURGE]
    with pytest.raises(KeyNotFoundError, match="PURGE"):
        await markers.get("p")
    await wait_until(lambda: _no_revisions(markers, "q"), STEP)
    with pytest.raises(KeyNotFoundError):
        await markers.get("q")
    assert await all_keys(markers) == ["keep"]
    assert (await markers.status()).values == 2  # "keep" and the lasting marker of "p"


async def test_bucket_ttl_expiry_is_not_a_phantom_entry(js: JetStreamContext) -> None:
    # Markers that outlive the reads below; the watch starts before the puts, so
    # the markers cannot come before it (an updates-only watch started after the
    # puts would miss them if the machine took a second to get there).
    kv = await js.create_key_value(
        KeyValueConfig(
            bucket=unique_name("aged"), ttl=1, limit_marker_ttl=60, storage=StorageType.MEMORY
        )
    )
    async with kv.watch(updates_only=True) as w:
        await kv.put("k", b"v")
        await kv.put("other", b"w")
        seen: dict[str, list[KeyValueOp]] = {"k": [], "other": []}
        while sum(map(len, seen.values())) < 4:
            entry = await next_item(w)
            assert entry is not None
            seen[entry.key].append(entry.operation)
    assert seen == {
        "k": [KeyValueOp.PUT, KeyValueOp.PURGE],
        "other": [KeyValueOp.PUT, KeyValueOp.PURGE],
    }
    for key in ("k", "other"):
        with pytest.raises(KeyNotFoundError, match="PURGE"):
            await kv.get(key)
    assert await all_keys(kv) == []
    status = await kv.status()
    assert status.limit_marker_ttl == timedelta(seconds=60)
    assert status.ttl == timedelta(seconds=1)


async def test_history_and_keys_with_markers(js: JetStreamContext) -> None:
    # History 5 for "a"; then limit_marker_ttl is also c's shortest life (docs/kv.md).
    # 5 s markers: the reads after c is gone have 5 s, not 1, before its marker goes.
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("hm"), history=5, limit_marker_ttl=5)
    )
    await kv.put("a", b"1")
    await kv.delete("a")
    await kv.put("b", b"1")
    await kv.create("c", b"1", ttl=5)
    await wait_until(lambda: is_gone(kv, "c"), STEP)
    assert await all_keys(kv) == ["b"]
    assert [e.operation for e in await kv.history("a")] == ["PUT", "DEL"]
    assert [e.operation for e in await kv.history("c")] == ["PURGE"]
    async with kv.watch(include_history=True) as w:
        ops = [(e.key, e.operation) for e in await until_none(w)]
    assert ops == [("a", "PUT"), ("a", "DEL"), ("b", "PUT"), ("c", "PURGE")]


# --------------------------------------------------------------------------- sources and mirrors


async def test_sourced_bucket(js: JetStreamContext) -> None:
    origin = await js.create_key_value(KeyValueConfig(bucket=unique_name("origin")))
    await origin.put("k", b"from origin")
    agg = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("agg"), sources=[StreamSource(name=origin.bucket)])
    )
    sources = agg.stream.cached_info.config.sources
    assert sources is not None
    assert sources[0].name == f"KV_{origin.bucket}"
    await wait_until(lambda: _has(agg, "k"), STEP)
    assert (await agg.get("k")).value == b"from origin"
    await agg.put("own", b"local")
    assert await all_keys(agg) == ["k", "own"]


async def test_create_through_a_mirror_over_a_deleted_key(js: JetStreamContext) -> None:
    """A mirror bucket's handle writes to the origin and read its own stream after the
    origin refused a create: the mirror did not have the delete yet, and create raised
    KeyExistsError for a free key (67 of 300 times). It reads again until the mirror
    holds the revision the refusal named."""
    src = unique_name("src")
    await js.create_key_value(KeyValueConfig(bucket=src, history=5))
    mirror = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("mir"), history=5, mirror=StreamSource(name=src))
    )
    for i in range(300):
        key = f"k{i}"
        await mirror.put(key, b"v1")
        await mirror.delete(key)
        assert await mirror.create(key, b"v2") > 0  # never KeyExistsError
    with pytest.raises(KeyExistsError):  # a live value still refuses it
        await mirror.create("k0", b"v3")


async def test_mirror_bucket_reads_the_origin_keys_and_writes_to_the_origin(
    js: JetStreamContext,
) -> None:
    src = unique_name("src")
    origin = await js.create_key_value(KeyValueConfig(bucket=src, history=3))
    await origin.put("k", b"1")
    mirror = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("replica"), history=3, mirror=StreamSource(name=src))
    )
    cfg = mirror.stream.cached_info.config
    assert cfg.mirror is not None
    assert cfg.mirror.name == f"KV_{src}"
    assert cfg.mirror_direct
    assert not cfg.subjects
    await wait_until(lambda: _has(mirror, "k"), STEP)
    assert (await mirror.get("k")).value == b"1"
    await mirror.put("k", b"2")  # goes to the origin
    assert (await origin.get("k")).value == b"2"
    await wait_until(lambda: _value_is(mirror, "k", b"2"), STEP)
    assert await all_keys(mirror) == ["k"]
    with pytest.raises(InvalidStreamConfigError, match="mirror"):
        await js.create_key_value(
            KeyValueConfig(
                bucket=unique_name("m2"), mirror=StreamSource(name=src), limit_marker_ttl=1
            )
        )


async def _ops(kv: KeyValue, key: str) -> list[tuple[str, int]] | None:
    """A key's history as (operation, revision) pairs; None when it has none."""
    try:
        return [(e.operation.value, e.revision) for e in await kv.history(key)]
    except KeyNotFoundError:
        return None


async def _sourcing(js: JetStreamContext, name: str, filter_subject: str) -> KeyValue:
    """A new bucket sourcing bucket ``name`` through ``filter_subject``."""
    return await js.create_key_value(
        KeyValueConfig(
            bucket=unique_name("src"),
            sources=[StreamSource(name=name, filter_subject=filter_subject)],
        )
    )


async def test_a_bucket_sourcing_a_mirror_bucket_gets_the_origin_keys(
    js: JetStreamContext,
) -> None:
    """A mirror bucket holds its origin's subjects ($KV.<origin>.<key>): the source's
    transform named the mirror's ($KV.<mirror>.>), matched nothing, and the sourced
    bucket stayed empty with no lag and no error."""
    origin = await js.create_key_value(KeyValueConfig(bucket=unique_name("orig")))
    mirror = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("mir"), mirror=StreamSource(name=origin.bucket))
    )
    for key in ("k1", "k2"):
        await origin.put(key, key.encode())
    sourced = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("src"), sources=[StreamSource(name=mirror.bucket)])
    )
    await wait_until(lambda: _has(sourced, "k2"), STEP)
    assert await all_keys(sourced) == ["k1", "k2"]
    assert (await sourced.get("k1")).value == b"k1"
    # Filtered: the filter is in the subjects the mirror holds (its origin's).
    filtered = await _sourcing(js, mirror.bucket, f"$KV.{origin.bucket}.k1")
    await wait_until(lambda: _has(filtered, "k1"), STEP)
    assert await all_keys(filtered) == ["k1"]


async def test_a_filtered_source_becomes_the_transform_of_the_keys(
    js: JetStreamContext,
) -> None:
    """A source's filter_subject was sent beside the renaming transform, which the
    server refuses ("cannot also have a single subject filter")."""
    origin = await js.create_key_value(KeyValueConfig(bucket=unique_name("orig")))
    await origin.put("foo.1", b"in")
    await origin.put("bar.1", b"out")
    sourced = await _sourcing(js, origin.bucket, f"$KV.{origin.bucket}.foo.>")
    await wait_until(lambda: _has(sourced, "foo.1"), STEP)
    await sourced.put("own", b"local")  # stored after what the source had by then
    assert await all_keys(sourced) == ["foo.1", "own"]
    # A filter with wildcards: each is named in the transform's destination.
    await origin.put("a.x", b"1")
    await origin.put("a.y", b"2")
    wild = await _sourcing(js, origin.bucket, f"$KV.{origin.bucket}.*.x")
    await wait_until(lambda: _has(wild, "a.x"), STEP)
    assert await all_keys(wild) == ["a.x"]
    with pytest.raises(InvalidOptionError, match="not in its keys' subjects"):
        await _sourcing(js, origin.bucket, "foo.>")


async def test_ttl_writes_through_a_mirror_handle_check_the_origin(
    js: JetStreamContext,
) -> None:
    """create(ttl=) and purge(ttl=) checked the mirror's own config for limit markers
    (a mirror never has them) and refused writes the origin takes."""
    origin = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("orig"), history=5, limit_marker_ttl=1)
    )
    mirror = await js.create_key_value(
        KeyValueConfig(
            bucket=unique_name("mir"), history=5, mirror=StreamSource(name=origin.bucket)
        )
    )
    revision = await mirror.create("k", b"v", ttl=60)
    await mirror.purge("k", ttl=60)
    assert await _ops(origin, "k") == [("PURGE", revision + 1)]  # a purge rolls up
    # The origin without markers: still refused before sending (ADR-48).
    plain = await js.create_key_value(KeyValueConfig(bucket=unique_name("orig"), history=5))
    plain_mirror = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("mir"), history=5, mirror=StreamSource(name=plain.bucket))
    )
    with pytest.raises(MessageTTLDisabledError, match=plain.bucket):
        await plain_mirror.create("k", b"v", ttl=60)


async def test_create_through_a_filtered_mirror_reads_the_origin(js: JetStreamContext) -> None:
    """After the origin refused a create of a deleted key, the handle waited for the
    mirror to hold the delete; a filtered mirror never holds a key outside its filter,
    and the create raised KeyExistsError for a free key after its whole timeout."""
    origin = await js.create_key_value(KeyValueConfig(bucket=unique_name("orig"), history=5))
    mirror = await js.create_key_value(
        KeyValueConfig(
            bucket=unique_name("mir"),
            history=5,
            mirror=StreamSource(name=origin.bucket, filter_subject=f"$KV.{origin.bucket}.foo.>"),
        )
    )
    await mirror.put("bar.1", b"v1")
    await mirror.delete("bar.1")
    revision = await mirror.create("bar.1", b"v2", timeout=5)
    assert (await origin.get("bar.1")).revision == revision
    with pytest.raises(KeyExistsError):
        await mirror.create("bar.1", b"v3")


async def test_purge_deletes_through_a_mirror_purges_the_origin_too(
    js: JetStreamContext,
) -> None:
    """purge_deletes() through a mirror's handle purged only the mirror (a purge is not
    mirrored): the origin kept its markers, and the two histories differed for good."""
    origin = await js.create_key_value(KeyValueConfig(bucket=unique_name("orig"), history=5))
    mirror = await js.create_key_value(
        KeyValueConfig(
            bucket=unique_name("mir"), history=5, mirror=StreamSource(name=origin.bucket)
        )
    )
    await mirror.put("k", b"1")
    await mirror.put("k", b"2")
    await mirror.delete("k")
    wanted = await _ops(origin, "k")
    assert wanted is not None
    assert len(wanted) == 3
    await wait_until(lambda: _ops_are(mirror, "k", wanted), STEP)
    await mirror.purge_deletes(older_than=0)
    assert await _ops(origin, "k") is None
    assert await _ops(mirror, "k") is None
    revision = await mirror.put("k", b"3")
    await wait_until(lambda: _ops_are(mirror, "k", [("PUT", revision)]), STEP)
    assert await _ops(origin, "k") == [("PUT", revision)]
    # The origin deleted since the handle was bound: the mirror's markers still go.
    await mirror.delete("k")
    await wait_until(lambda: _ops_are(mirror, "k", [("PUT", revision), ("DEL", revision + 1)]))
    await js.delete_key_value(origin.bucket)
    await mirror.purge_deletes(older_than=0)
    assert await _ops(mirror, "k") is None


async def _ops_are(kv: KeyValue, key: str, wanted: list[tuple[str, int]]) -> bool:
    return await _ops(kv, key) == wanted


async def _has(kv: KeyValue, key: str) -> bool:
    return not await is_gone(kv, key)


async def _value_is(kv: KeyValue, key: str, value: bytes) -> bool:
    try:
        return (await kv.get(key)).value == value
    except KeyNotFoundError:
        return False


async def _fill_then_delete(js: JetStreamContext, kv: KeyValue, live: int, gone: int) -> None:
    """``live`` keys, then ``gone`` keys put and deleted after them."""
    for i in range(live):
        await js.publish_async(f"$KV.{kv.bucket}.a{i}", b"v")
    for i in range(gone):
        await js.publish_async(f"$KV.{kv.bucket}.x{i}", b"v")
    await js.publish_async_complete(timeout=30)
    for i in range(gone):
        await kv.delete(f"x{i}")


async def _delete_consumers(kv: KeyValue) -> None:
    names = [n async for n in kv.stream.consumer_names()]
    assert len(names) == 1
    await kv.stream.delete_consumer(names[0])  # the ordered consumer recreates it


async def test_keys_after_a_reset_during_the_initial_values(
    js: JetStreamContext, kv: KeyValue
) -> None:
    """The reader's consumer is recreated after the first key read: it restarted at
    cursor + 1 with every revision, and keys() yielded the deleted keys.

    keys() yields once its read has ended: the consumer is deleted from inside
    the read, after its first message (the handle's reader, wrapped)."""
    await _fill_then_delete(js, kv, 2000, 50)
    make_reader = kv._reader
    reset: list[bool] = []

    def reader(*args: Any, **kwargs: Any) -> Reader:
        made = make_reader(*args, **kwargs)
        read = made.next

        async def next_then_reset() -> Msg | ReaderEvent:
            item = await read()
            if not reset:
                reset.append(True)
                await _delete_consumers(kv)
            return item

        made.next = next_then_reset  # type: ignore[method-assign]
        return made

    kv._reader = reader  # type: ignore[method-assign]
    got = [k async for k in kv.keys()]  # noqa: SIM118 (an async iterator)
    assert reset == [True]
    assert sorted(got) == sorted(f"a{i}" for i in range(2000))


async def test_watch_ignoring_deletes_after_a_reset_during_the_initial_values(
    js: JetStreamContext, kv: KeyValue
) -> None:
    """Deleted keys came back as live (their old PUT again, the DEL left out)."""
    await _fill_then_delete(js, kv, 2000, 50)
    async with kv.watch(ignore_deletes=True) as w:
        first = await next_item(w)
        assert first is not None
        await _delete_consumers(kv)
        rest = await until_none(w)
    keys = [first.key] + [e.key for e in rest]
    assert sorted(keys) == sorted(f"a{i}" for i in range(2000))

"""Key-value buckets (ADR-8) with per-key TTLs and limit markers (ADR-48) against a real server."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from aiojetstream import (
    BucketNotFoundError,
    DeliverPolicy,
    DiscardPolicy,
    FeatureNotSupportedError,
    InvalidKeyError,
    InvalidNameError,
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
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamSource,
    WrongLastSequenceError,
    _kv,
)
from helpers import wait_until

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


def unique(request: pytest.FixtureRequest, prefix: str) -> str:
    # One bucket name per test: nats-server 2.15.1 sometimes resurrects the
    # messages of a file stream deleted and re-created at once under the same name.
    return f"{prefix}_{request.node.name.removeprefix('test_')}"


@pytest.fixture
async def kv(js: JetStreamContext, request: pytest.FixtureRequest) -> KeyValue:
    return await js.create_key_value(KeyValueConfig(bucket=unique(request, "kv"), history=5))


@pytest.fixture
async def markers(js: JetStreamContext, request: pytest.FixtureRequest) -> KeyValue:
    return await js.create_key_value(
        KeyValueConfig(bucket=unique(request, "mk"), history=5, limit_marker_ttl=1)
    )


# --------------------------------------------------------------------------- buckets


async def test_bucket_config_maps_to_the_backing_stream(js: JetStreamContext) -> None:
    cfg = KeyValueConfig(
        bucket="shape",
        description="d",
        history=7,
        ttl=60,
        max_value_size=1024,
        max_bytes=1 << 20,
        compression=True,
        metadata={"app": "x"},
    )
    kv = await js.create_key_value(cfg)
    assert kv.bucket == "shape"
    sc = (await js.stream("KV_shape")).cached_info.config
    assert sc.subjects == ["$KV.shape.>"]
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
    assert status.bucket == "shape"
    assert (status.history, status.ttl, status.limit_marker_ttl) == (7, timedelta(seconds=60), None)
    assert status.is_compressed
    assert status.backing_store == "JetStream"
    assert status.values == 0
    assert status.bytes == 0
    assert status.stream_info.config.name == "KV_shape"
    assert status.metadata["app"] == "x"
    assert status.config.model_dump() == cfg.model_dump()

    # Same config again: fine. Long TTL: the duplicate window stays at 2 minutes.
    await js.create_key_value(cfg)
    other = await js.create_key_value(KeyValueConfig(bucket="long", ttl=3600))
    assert other.stream.cached_info.config.duplicate_window == timedelta(minutes=2)


async def test_bucket_management(js: JetStreamContext) -> None:
    await js.create_stream(StreamConfig(name="plain", subjects=["plain.>"]))
    await js.create_key_value(KeyValueConfig(bucket="one"))
    await js.create_or_update_key_value(KeyValueConfig(bucket="two"))
    assert sorted([n async for n in js.key_value_store_names()]) == ["one", "two"]

    kv = await js.create_or_update_key_value(KeyValueConfig(bucket="two", history=3))
    assert (await kv.status()).history == 3
    kv = await js.update_key_value(KeyValueConfig(bucket="two", history=4))
    assert (await (await js.key_value("two")).status()).history == 4

    with pytest.raises(BucketNotFoundError):
        await js.key_value("missing")
    with pytest.raises(BucketNotFoundError):
        await js.update_key_value(KeyValueConfig(bucket="missing"))
    with pytest.raises(BucketNotFoundError):
        await js.delete_key_value("missing")
    with pytest.raises(InvalidNameError):
        await js.key_value("bad.name")

    await js.delete_key_value("one")
    assert [n async for n in js.key_value_store_names()] == ["two"]
    with pytest.raises(BucketNotFoundError):
        await js.key_value("one")


def test_config_validation() -> None:
    for bad in ("", "a.b", "a b", "a*", ">", "ä"):
        with pytest.raises(ValidationError):
            KeyValueConfig(bucket=bad)
    for history in (0, 65):
        with pytest.raises(ValidationError):
            KeyValueConfig(bucket="b", history=history)
    with pytest.raises(ValidationError, match="at least 1 second"):
        KeyValueConfig(bucket="b", limit_marker_ttl=0.5)
    with pytest.raises(ValidationError, match="unknown field"):
        KeyValueConfig(bucket="b", histroy=2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        KeyValueConfig(bucket="b").bucket = "c"  # type: ignore[misc]
    assert KeyValueConfig(bucket="b", history=64, limit_marker_ttl=1).history == 64


class _OldServer:
    """Just enough of a JetStreamContext to reach the API-level check."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.created: list[StreamConfig] = []

    async def api_level(self, *, timeout: float | None = None) -> int:
        return self.level

    async def create_stream(self, config: StreamConfig, *, timeout: float | None = None) -> Any:
        self.created.append(config)
        raise RuntimeError("stop here")


async def test_limit_markers_need_api_level_1() -> None:
    old = _OldServer(0)
    cfg = KeyValueConfig(bucket="b", limit_marker_ttl=5)
    with pytest.raises(FeatureNotSupportedError, match="API level >= 1") as info:
        await _kv.create_key_value(old, cfg, None)  # type: ignore[arg-type]
    assert (info.value.required_level, info.value.server_level) == (1, 0)
    with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.11"):
        await _kv.create_or_update_key_value(old, cfg, None)  # type: ignore[arg-type]
    with pytest.raises(FeatureNotSupportedError):
        await _kv.update_key_value(old, cfg, None)  # type: ignore[arg-type]
    assert old.created == []
    # Without markers the level is not even asked for; with level 1 it goes ahead.
    with pytest.raises(RuntimeError):
        await _kv.create_key_value(old, KeyValueConfig(bucket="b"), None)  # type: ignore[arg-type]
    new = _OldServer(1)
    with pytest.raises(RuntimeError):
        await _kv.create_key_value(new, cfg, None)  # type: ignore[arg-type]
    sent = new.created[0]
    assert sent.allow_msg_ttl
    assert sent.subject_delete_marker_ttl == timedelta(seconds=5)


async def test_enable_limit_markers_later_but_never_disable(js: JetStreamContext) -> None:
    kv = await js.create_key_value(KeyValueConfig(bucket="late", history=2))
    await kv.put("k", b"v")
    assert (await kv.status()).limit_marker_ttl is None
    with pytest.raises(MessageTTLDisabledError, match="limit markers"):
        await kv.create("t", b"v", ttl=5)
    with pytest.raises(MessageTTLDisabledError, match="limit markers"):
        await kv.purge("k", ttl=5)

    await js.update_key_value(KeyValueConfig(bucket="late", history=2, limit_marker_ttl=2))
    # The old handle notices (it re-reads the config before refusing a TTL).
    assert await kv.create("t", b"v", ttl=5) > 0
    assert (await kv.status()).limit_marker_ttl == timedelta(seconds=2)
    assert (await kv.get("k")).value == b"v"

    for call in (js.update_key_value, js.create_or_update_key_value):
        with pytest.raises(KeyValueError, match="never disabled"):
            await call(KeyValueConfig(bucket="late", history=2))
    assert (await kv.status()).limit_marker_ttl == timedelta(seconds=2)
    # Changing the marker TTL is fine.
    await js.update_key_value(KeyValueConfig(bucket="late", history=2, limit_marker_ttl=3))
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


class _Silent:
    """An ordered consumer whose initial values vanished before delivery."""

    def __init__(self) -> None:
        self.cached_info = SimpleNamespace(num_pending=3)  # pending when created
        self.pending = 0  # ... and no longer when asked again
        self.closed = asyncio.Event()

    def messages(self) -> _Silent:
        return self

    async def __aenter__(self) -> _Silent:
        return self

    async def __anext__(self) -> None:
        await self.closed.wait()
        raise StopAsyncIteration

    def stop(self) -> None:
        self.closed.set()

    async def aclose(self) -> None:
        self.closed.set()

    async def info(self) -> Any:
        delivered = SimpleNamespace(consumer_seq=0)
        return SimpleNamespace(num_pending=self.pending, delivered=delivered, name="c")


async def test_initial_values_that_vanished_still_end_with_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_kv, "IDLE_CHECK", 0.05)
    silent = _Silent()

    class _Stream:
        async def ordered_consumer(self, config: object) -> _Silent:
            return silent

    reader = _kv._Reader(_Stream(), ["$KV.b.>"], DeliverPolicy.ALL, False)  # type: ignore[arg-type]
    await reader.start()
    assert not reader.caught_up
    assert await asyncio.wait_for(reader.next(), STEP) is _kv._Event.CAUGHT_UP
    await reader.aclose()
    assert silent.closed.is_set()
    assert await reader.next() is _kv._Event.END


async def test_one_shot_reads_time_out_without_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_kv, "IDLE_CHECK", 0.05)
    silent = _Silent()
    silent.pending = 3  # values pending that never arrive

    class _Stream:
        name = "KV_b"

        async def ordered_consumer(self, config: object) -> _Silent:
            return silent

    reader = _kv._Reader(_Stream(), ["$KV.b.>"], DeliverPolicy.ALL, False, stall=0.2)  # type: ignore[arg-type]
    await reader.start()
    with pytest.raises(JetStreamTimeoutError, match="still pending"):
        await asyncio.wait_for(reader.next(), STEP)
    await reader.aclose()
    assert silent.closed.is_set()


# --------------------------------------------------------------------------- limit markers


async def test_create_with_ttl_expires_with_a_purge_marker(markers: KeyValue) -> None:
    async with markers.watch("t") as w:
        assert await next_item(w) is None
        rev = await markers.create("t", b"short", ttl=1)
        entry = await next_item(w)
        assert entry is not None
        assert (entry.operation, entry.revision) == ("PUT", rev)
        assert (await markers.get("t")).value == b"short"
        # The server removes it after ~1 s and leaves a MaxAge marker: a PURGE.
        marker = await next_item(w)
        assert marker is not None
        assert marker.key == "t"
        assert marker.operation is KeyValueOp.PURGE
        assert marker.value == b""
    # get never returns the marker as an empty value (the nats-py phantom entry).
    with pytest.raises(KeyNotFoundError):
        await markers.get("t")
    assert await all_keys(markers) == []
    history = await markers.history("t")
    assert [e.operation for e in history] == [KeyValueOp.PURGE]
    assert history[0].revision == marker.revision
    # create works over the marker, and once the marker itself expired.
    again = await markers.create("t", b"again", ttl=1)
    assert (await markers.get("t")).revision == again
    await wait_until(lambda: is_gone(markers, "t"), STEP)
    await wait_until(lambda: _no_revisions(markers, "t"), STEP)
    assert await markers.create("t", b"third") > again


async def _no_revisions(kv: KeyValue, key: str) -> bool:
    try:
        await kv.history(key)
    except KeyNotFoundError:
        return True
    return False


async def test_purge_with_ttl_leaves_no_trace(markers: KeyValue) -> None:
    await markers.put("p", b"1")
    await markers.put("p", b"2")
    await markers.put("keep", b"k")
    await markers.purge("p", ttl=1)
    assert [e.operation for e in await markers.history("p")] == [KeyValueOp.PURGE]
    with pytest.raises(KeyNotFoundError):
        await markers.get("p")
    await wait_until(lambda: _no_revisions(markers, "p"), STEP)
    assert await all_keys(markers) == ["keep"]
    assert (await markers.status()).values == 1


async def test_bucket_ttl_expiry_is_not_a_phantom_entry(js: JetStreamContext) -> None:
    kv = await js.create_key_value(
        KeyValueConfig(bucket="aged", ttl=1, limit_marker_ttl=5, storage=StorageType.MEMORY)
    )
    await kv.put("k", b"v")
    await kv.put("other", b"w")
    async with kv.watch(updates_only=True) as w:
        seen: dict[str, KeyValueOp] = {}
        while len(seen) < 2:
            entry = await next_item(w)
            assert entry is not None
            seen[entry.key] = entry.operation
    assert seen == {"k": KeyValueOp.PURGE, "other": KeyValueOp.PURGE}
    for key in ("k", "other"):
        with pytest.raises(KeyNotFoundError, match="PURGE"):
            await kv.get(key)
    assert await all_keys(kv) == []
    status = await kv.status()
    assert status.limit_marker_ttl == timedelta(seconds=5)
    assert status.ttl == timedelta(seconds=1)


async def test_history_and_keys_with_markers(markers: KeyValue) -> None:
    await markers.put("a", b"1")
    await markers.delete("a")
    await markers.put("b", b"1")
    await markers.create("c", b"1", ttl=1)
    await wait_until(lambda: is_gone(markers, "c"), STEP)
    assert await all_keys(markers) == ["b"]
    assert [e.operation for e in await markers.history("a")] == ["PUT", "DEL"]
    assert [e.operation for e in await markers.history("c")] == ["PURGE"]
    async with markers.watch(include_history=True) as w:
        ops = [(e.key, e.operation) for e in await until_none(w)]
    assert ops == [("a", "PUT"), ("a", "DEL"), ("b", "PUT"), ("c", "PURGE")]


def test_marker_reasons_map_to_operations() -> None:
    op = _kv.entry_operation
    assert op(None) is KeyValueOp.PUT
    assert op({"Other": "x"}) is KeyValueOp.PUT
    assert op({"KV-Operation": "DEL"}) is KeyValueOp.DEL
    assert op({"KV-Operation": "PURGE", "Nats-Rollup": "sub"}) is KeyValueOp.PURGE
    assert op({"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "1s"}) is KeyValueOp.PURGE
    assert op({"Nats-Marker-Reason": "Purge"}) is KeyValueOp.PURGE
    assert op({"Nats-Marker-Reason": "Remove"}) is KeyValueOp.DEL


# --------------------------------------------------------------------------- sources and mirrors


async def test_sourced_bucket(js: JetStreamContext) -> None:
    origin = await js.create_key_value(KeyValueConfig(bucket="origin"))
    await origin.put("k", b"from origin")
    agg = await js.create_key_value(
        KeyValueConfig(bucket="agg", sources=[StreamSource(name="origin")])
    )
    sources = agg.stream.cached_info.config.sources
    assert sources is not None
    assert sources[0].name == "KV_origin"
    await wait_until(lambda: _has(agg, "k"), STEP)
    assert (await agg.get("k")).value == b"from origin"
    await agg.put("own", b"local")
    assert await all_keys(agg) == ["k", "own"]


async def test_mirror_bucket_reads_the_origin_keys_and_writes_to_the_origin(
    js: JetStreamContext,
) -> None:
    origin = await js.create_key_value(KeyValueConfig(bucket="src", history=3))
    await origin.put("k", b"1")
    mirror = await js.create_key_value(
        KeyValueConfig(bucket="replica", history=3, mirror=StreamSource(name="src"))
    )
    cfg = mirror.stream.cached_info.config
    assert cfg.mirror is not None
    assert cfg.mirror.name == "KV_src"
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
            KeyValueConfig(bucket="m2", mirror=StreamSource(name="src"), limit_marker_ttl=1)
        )


async def _has(kv: KeyValue, key: str) -> bool:
    return not await is_gone(kv, key)


async def _value_is(kv: KeyValue, key: str, value: bytes) -> bool:
    try:
        return (await kv.get(key)).value == value
    except KeyNotFoundError:
        return False

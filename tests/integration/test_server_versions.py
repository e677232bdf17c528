"""The everyday calls, and each newer feature, against whichever nats-server runs.

``make test`` runs this file against the bundled nats-server; ``make
test-servers`` runs it again against older releases (2.10, 2.11, 2.12, 2.14,
fetched by ``tools/server_versions.py``) with ``NATS_SERVER_BIN`` and
``EXPECT_SERVER_VERSION`` set. An older server ignores a config field or
header it does not know, so each feature is either refused by the client
before anything is sent (below its API level) or shown to take effect (at or
above it): never silently dropped.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    FeatureNotSupportedError,
    JetStreamContext,
    KeyValueConfig,
    ObjectStoreConfig,
    OrderedConsumerConfig,
    PersistMode,
    PriorityPolicy,
    Schedule,
    StorageType,
    StoreCompression,
    StreamConfig,
    SubjectTransformConfig,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until

MEM = StorageType.MEMORY


@pytest.fixture
async def level(js: JetStreamContext, nats_server: NatsServer) -> int:
    """The server's JetStream API level (0 before 2.11); its version is the one expected."""
    expected = os.environ.get("EXPECT_SERVER_VERSION")
    if expected:  # a run meant for an older release must not test the bundled one
        info = js.nc._server_info  # (nats-py keeps the server's INFO)
        assert info["version"] == expected, f"testing {info['version']}, not {expected}"
    return await js.api_level()


async def _stream(js: JetStreamContext, **config: object) -> str:
    name = unique_name("SV")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"], storage=MEM, **config))
    return name


async def test_everyday_calls(js: JetStreamContext, level: int) -> None:
    """Publish every way, consume every way (each message once), KV and objects."""
    stream = await _stream(js)
    await js.publish(f"{stream}.a", b"0", msg_id="m0")
    assert (await js.publish(f"{stream}.a", b"0", msg_id="m0")).duplicate
    futures = [await js.publish_async(f"{stream}.a", b"%d" % i) for i in range(1, 50)]
    await asyncio.gather(*futures)
    await js.publish_many(f"{stream}.b", [b"%d" % i for i in range(50, 100)])
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="d"))
    seen: list[int] = []
    async for msg in await consumer.fetch(30, expires=2):
        seen.append(msg.metadata.sequence.stream)
        await msg.ack()
    msg = await consumer.next(expires=2)
    seen.append(msg.metadata.sequence.stream)
    await msg.double_ack()
    async with consumer.messages() as it:
        async for msg in it:
            seen.append(msg.metadata.sequence.stream)
            await msg.ack()
            if len(seen) == 100:
                break
    assert seen == list(range(1, 101))
    ordered = await js.ordered_consumer(
        stream, OrderedConsumerConfig(filter_subjects=[f"{stream}.b"])
    )
    data: list[bytes] = []
    async with ordered.messages() as it:
        async for msg in it:
            data.append(msg.data)
            if len(data) == 50:
                break
    assert data == [b"%d" % i for i in range(50, 100)]

    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("SVK"), history=5))
    assert await kv.put("a.b", b"1") == 1
    await kv.put("a.b", b"2")
    await kv.create("c", b"3")
    await kv.delete("c")
    assert (await kv.get("a.b")).value == b"2"
    assert [k async for k in kv.keys()] == ["a.b"]  # noqa: SIM118 (an async iterator)
    assert [e.value for e in await kv.history("a.b")] == [b"1", b"2"]
    async with kv.watch("a.>") as watch:
        first = await anext(watch)
        assert first is not None
        assert first.value == b"2"

    store = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("SVO")))
    blob = os.urandom(300_000)
    await store.put("blob", blob)
    assert await (await store.get("blob")).read() == blob


async def test_a_stream_config_comes_back_as_sent(js: JetStreamContext, level: int) -> None:
    """Fields every supported server knows: none is dropped (nats.go checks the same)."""
    name = unique_name("SVC")
    sent = StreamConfig(
        name=name,
        subjects=[f"{name}.>"],
        storage=MEM,
        max_msgs=1000,
        max_msgs_per_subject=10,
        max_msg_size=4096,
        compression=StoreCompression.NONE,
        first_seq=42,
        metadata={"team": "data"},
        allow_direct=True,
        allow_rollup_hdrs=True,
        deny_delete=True,
        discard_new_per_subject=False,
        subject_transform=SubjectTransformConfig(src=f"{name}.>", dest=f"{name}.t.>"),
    )
    got = (await js.create_stream(sent)).cached_info.config
    for field in sent.model_fields_set - {"metadata"}:
        assert getattr(got, field) == getattr(sent, field), field
    assert got.metadata is not None
    assert got.metadata["team"] == "data"
    assert (await js.publish(f"{name}.x", b"")).seq == 42


Case = Callable[[JetStreamContext, bool], Awaitable[None]]


async def _ttl_publish(js: JetStreamContext, supported: bool) -> None:
    if not supported:
        stream = await _stream(js)
        with pytest.raises(FeatureNotSupportedError):
            await js.publish(f"{stream}.a", b"x", ttl=1)
        assert (await (await js.stream(stream)).info()).state.messages == 0
        return
    stream = await _stream(js, allow_msg_ttl=True)
    await js.publish(f"{stream}.a", b"x", ttl=1)
    handle = await js.stream(stream)

    async def expired() -> bool:
        return (await handle.info()).state.messages == 0

    await wait_until(expired, timeout=10)


async def _stream_setting(js: JetStreamContext, supported: bool, **config: object) -> None:
    name = unique_name("SVF")
    sent = StreamConfig(name=name, subjects=[f"{name}.>"], **config)
    if not supported:
        with pytest.raises(FeatureNotSupportedError):
            await js.create_stream(sent)
        assert name not in [n async for n in js.stream_names()]
        return
    got = (await js.create_stream(sent)).cached_info.config
    for field, value in config.items():
        assert getattr(got, field) == value, field


async def _consumer_setting(js: JetStreamContext, supported: bool, **config: object) -> None:
    stream = await _stream(js)
    sent = ConsumerConfig(durable_name="f", **config)
    if not supported:
        with pytest.raises(FeatureNotSupportedError):
            await js.create_consumer(stream, sent)
        assert [n async for n in js.consumer_names(stream)] == []
        return
    got = (await js.create_consumer(stream, sent)).cached_info.config
    for field, value in config.items():
        assert getattr(got, field) == value, field


async def _pause(js: JetStreamContext, supported: bool) -> None:
    stream = await _stream(js)
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="p"))
    if not supported:
        with pytest.raises(FeatureNotSupportedError):
            await consumer.pause("60s")
        return
    assert (await consumer.pause("60s")).paused
    assert (await consumer.info()).paused


async def _batch_get(js: JetStreamContext, supported: bool) -> None:
    stream = await _stream(js, allow_direct=True)
    for i in range(3):
        await js.publish(f"{stream}.a", b"%d" % i)
    handle = await js.stream(stream)
    if not supported:
        with pytest.raises(FeatureNotSupportedError):
            [m async for m in handle.get_batch(3, seq=1)]
        return
    assert [m.data async for m in handle.get_batch(3, seq=1)] == [b"0", b"1", b"2"]


async def _counter(js: JetStreamContext, supported: bool) -> None:
    if not supported:
        await _stream_setting(js, False, allow_msg_counter=True)
        stream = await _stream(js)
        with pytest.raises(FeatureNotSupportedError):
            await js.counter(stream).add(f"{stream}.n", 5)
        assert (await (await js.stream(stream)).info()).state.messages == 0
        return
    stream = await _stream(js, allow_msg_counter=True, allow_direct=True)
    assert await js.counter(stream).add(f"{stream}.n", 5) == 5
    assert await js.counter(stream).add(f"{stream}.n", -2) == 3


async def _atomic(js: JetStreamContext, supported: bool) -> None:
    if not supported:
        await _stream_setting(js, False, allow_atomic=True)
        return
    stream = await _stream(js, allow_atomic=True)
    batch = js.atomic_batch()
    await batch.add(f"{stream}.a", b"1")
    ack = await batch.commit(f"{stream}.a", b"2")
    assert (ack.seq, ack.batch_size) == (2, 2)


async def _schedule(js: JetStreamContext, supported: bool, every: bool = False) -> None:
    if every:
        schedule = Schedule.every("1s")
    else:
        schedule = Schedule.at(datetime.now(UTC) + timedelta(milliseconds=200))
    if not supported:
        if not every:
            await _stream_setting(js, False, allow_msg_schedules=True)
        try:
            stream = await _stream(js, allow_msg_schedules=True)
        except FeatureNotSupportedError:
            stream = await _stream(js)  # (a server without schedules at all)
        with pytest.raises(FeatureNotSupportedError):
            await js.publish(
                f"{stream}.s", b"job", schedule=schedule, schedule_target=f"{stream}.t"
            )
        assert (await (await js.stream(stream)).info()).state.messages == 0
        return
    stream = await _stream(js, allow_msg_schedules=True)
    await js.publish(f"{stream}.s", b"job", schedule=schedule, schedule_target=f"{stream}.t")
    handle = await js.stream(stream)

    async def produced() -> bool:
        info = await handle.info(subjects_filter=f"{stream}.t")
        return bool(info.state.subjects)

    await wait_until(produced, timeout=10)
    await handle.purge()  # (a schedule by interval goes on producing)


async def _reset(js: JetStreamContext, supported: bool) -> None:
    stream = await _stream(js)
    await js.publish(f"{stream}.a", b"x")
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="r"))
    if not supported:
        with pytest.raises(FeatureNotSupportedError):
            await consumer.reset(1)
        return
    assert await consumer.reset(1) == 1


async def _limit_markers(js: JetStreamContext, supported: bool) -> None:
    config = KeyValueConfig(bucket=unique_name("SVM"), limit_marker_ttl=timedelta(seconds=5))
    if not supported:
        with pytest.raises(FeatureNotSupportedError):
            await js.create_key_value(config)
        return
    kv = await js.create_key_value(config)
    assert (await kv.status()).limit_marker_ttl == timedelta(seconds=5)


#: Each feature: the API level it needs, and the case that uses it.
FEATURES: dict[str, tuple[int, Case]] = {
    "message ttl": (1, _ttl_publish),
    "stream allow_msg_ttl": (1, lambda js, ok: _stream_setting(js, ok, allow_msg_ttl=True)),
    "consumer pause": (1, _pause),
    "priority groups": (
        1,
        lambda js, ok: _consumer_setting(
            js, ok, priority_groups=["g"], priority_policy=PriorityPolicy.OVERFLOW
        ),
    ),
    "batch get": (1, _batch_get),
    "kv limit markers": (1, _limit_markers),
    "counters": (2, _counter),
    "atomic batch": (2, _atomic),
    "schedule at": (2, _schedule),
    "persist mode async": (
        2,
        lambda js, ok: _stream_setting(
            js, ok, storage=StorageType.FILE, persist_mode=PersistMode.ASYNC
        ),
    ),
    "schedule every": (4, lambda js, ok: _schedule(js, ok, every=True)),
    "allow_batched": (4, lambda js, ok: _stream_setting(js, ok, allow_batched=True)),
    "flow-control ack": (
        4,
        lambda js, ok: _consumer_setting(  # (a push consumer's setting)
            js, ok, ack_policy=AckPolicy.FLOW_CONTROL, deliver_subject=unique_name("sv.push")
        ),
    ),
    "consumer reset": (4, _reset),
}


@pytest.mark.parametrize("feature", FEATURES)
async def test_a_newer_feature_is_refused_or_takes_effect(
    js: JetStreamContext, level: int, feature: str
) -> None:
    needs, case = FEATURES[feature]
    await case(js, level >= needs)

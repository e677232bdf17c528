"""Stream management against a real nats-server."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import nats
import pytest

import aiojetstream
from aiojetstream import (
    AccountInfo,
    InvalidNameError,
    InvalidOptionError,
    InvalidSubjectError,
    JetStreamContext,
    JetStreamTimeoutError,
    MessageDeleteError,
    MessageNotFoundError,
    StorageType,
    StreamConfig,
    StreamInfo,
    StreamNameInUseError,
    StreamNotFoundError,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name
from proxy import ApiCountingProxy

MEM = StorageType.MEMORY


async def test_account_info(js: JetStreamContext) -> None:
    info = await js.account_info()
    assert isinstance(info, AccountInfo)
    assert info.api.level >= 1


async def test_create_get_update_delete(js: JetStreamContext) -> None:
    name = unique_name("S1")
    cfg = StreamConfig(name=name, subjects=["s1.>"], storage=StorageType.MEMORY)
    stream = await js.create_stream(cfg)
    assert stream.name == name
    assert stream.cached_info.config.subjects == ["s1.>"]
    # Creating again with the same config is idempotent.
    again = await js.create_stream(cfg)
    assert again.name == name
    # A different config under the same name is refused.
    with pytest.raises(StreamNameInUseError) as info:
        await js.create_stream(cfg.model_copy(update={"subjects": ["other.>"]}))
    assert info.value.err_code == 10058

    updated = await js.update_stream(
        cfg.model_copy(update={"max_age": timedelta(hours=1), "description": "d"})
    )
    assert updated.cached_info.config.max_age == timedelta(hours=1)
    fetched = await js.stream(name)
    assert fetched.cached_info.config.description == "d"
    info2 = await fetched.info()
    assert isinstance(info2, StreamInfo)
    assert info2.state.messages == 0

    await js.delete_stream(name)
    with pytest.raises(StreamNotFoundError) as nf:
        await js.stream(name)
    assert nf.value.err_code == 10059
    with pytest.raises(StreamNotFoundError):
        await js.delete_stream(name)


async def test_update_missing_stream(js: JetStreamContext) -> None:
    with pytest.raises(StreamNotFoundError):
        await js.update_stream(StreamConfig(name="NOPE", subjects=["nope"]))


async def test_create_or_update(js: JetStreamContext) -> None:
    cfg = StreamConfig(name=unique_name("CU"), subjects=["cu.>"], storage=StorageType.MEMORY)
    created = await js.create_or_update_stream(cfg)
    assert created.cached_info.config.max_msgs == -1
    updated = await js.create_or_update_stream(cfg.model_copy(update={"max_msgs": 10}))
    assert updated.cached_info.config.max_msgs == 10


@pytest.mark.parametrize("name", ["a.b", "a*", "a>", "a b", "a/b", "a\\b", "", "a\tb"])
async def test_invalid_stream_names_are_rejected_before_sending(
    js: JetStreamContext, name: str
) -> None:
    before = js.nc.stats["out_msgs"]
    with pytest.raises(InvalidNameError):
        await js.create_stream(StreamConfig.model_construct(name=name, subjects=["x"]))
    with pytest.raises(InvalidNameError):
        await js.stream(name)
    with pytest.raises(InvalidNameError):
        await js.delete_stream(name)
    assert js.nc.stats["out_msgs"] == before
    await js.account_info()  # the connection is still usable


async def test_paging_over_more_than_256_streams(js: JetStreamContext) -> None:
    count = 300
    prefix = unique_name("P")

    async def make(i: int) -> None:
        await js.create_stream(
            StreamConfig(name=f"{prefix}_{i:03d}", subjects=[f"p.{i}"], storage=StorageType.MEMORY)
        )

    for start in range(0, count, 50):
        await asyncio.gather(*(make(i) for i in range(start, min(start + 50, count))))
    names = [n async for n in js.stream_names()]
    assert sorted(names) == [f"{prefix}_{i:03d}" for i in range(count)]
    infos = [i async for i in js.list_streams()]
    assert len(infos) == count
    assert {i.config.name for i in infos} == set(names)
    filtered = [n async for n in js.stream_names(subject="p.7")]
    assert filtered == [f"{prefix}_007"]
    assert [i.config.name async for i in js.list_streams(subject="p.299")] == [f"{prefix}_299"]


async def test_stream_name_by_subject(js: JetStreamContext) -> None:
    name = unique_name("BYSUB")
    await js.create_stream(StreamConfig(name=name, subjects=["bysub.*"]))
    assert await js.stream_name_by_subject("bysub.x") == name
    with pytest.raises(StreamNotFoundError):
        await js.stream_name_by_subject("nothing.here")


async def test_purge_forms_return_counts(js: JetStreamContext) -> None:
    stream = await js.create_stream(
        StreamConfig(name=unique_name("PURGE"), subjects=["purge.*"], storage=StorageType.MEMORY)
    )
    for i in range(10):
        await js.publish(f"purge.{'a' if i % 2 else 'b'}", b"x")
    assert await stream.purge(subject="purge.a") == 5
    assert (await stream.info()).state.messages == 5
    # Sequences left: 1,3,5,7,9 ('b'). Purge everything below 5.
    assert await stream.purge(sequence=5) == 2
    assert await stream.purge(keep=1) == 2
    info = await stream.info()
    assert info.state.messages == 1
    assert info.state.first_seq == 9
    assert await stream.purge() == 1
    with pytest.raises(InvalidOptionError):
        await stream.purge(sequence=3, keep=1)


async def test_purge_below_sequence_1_sends_nothing(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is below sequence 1, but servers before 2.14.2 read ``seq=1`` as no
    sequence at all and purged the whole stream (or subject)."""
    stream = await js.create_stream(
        StreamConfig(name=unique_name("PURGE1"), subjects=["purge1.*"], storage=StorageType.MEMORY)
    )
    await js.publish("purge1.a", b"x")
    sent: list[str] = []
    api = type(stream._api)
    call = api.call

    async def spy(self: Any, template: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(template)
        return await call(self, template, *args, **kwargs)

    monkeypatch.setattr(api, "call", spy)
    assert await stream.purge(sequence=1) == 0
    assert await stream.purge(subject="purge1.a", sequence=1) == 0
    assert sent == []
    with pytest.raises(InvalidSubjectError):
        await stream.purge(subject="bad subject", sequence=1)  # checked all the same
    assert (await stream.info()).state.messages == 1


@pytest.mark.parametrize("direct", [True, False])
async def test_get_msg_direct_and_not(js: JetStreamContext, direct: bool) -> None:
    name = unique_name("DIRECT" if direct else "NODIRECT")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], allow_direct=direct)
    )
    assert bool(stream.cached_info.config.allow_direct) is direct
    await js.publish(f"{name}.a", b"one", headers={"X-Kind": "first"})
    await js.publish(f"{name}.b", b"two")
    await js.publish(f"{name}.a", b"three", headers={"X-Kind": "last"})

    msg = await stream.get_msg(2)
    assert (msg.subject, msg.seq, msg.data, msg.headers) == (f"{name}.b", 2, b"two", None)
    assert msg.time.tzinfo is not None

    last = await stream.get_last_msg_for_subject(f"{name}.a")
    assert (last.seq, last.data, last.headers) == (3, b"three", {"X-Kind": "last"})
    wildcard = await stream.get_last_msg_for_subject(f"{name}.*")
    assert wildcard.seq == 3

    first = await stream.get_msg(1)
    assert first.headers == {"X-Kind": "first"}

    with pytest.raises(MessageNotFoundError):
        await stream.get_msg(99)
    with pytest.raises(MessageNotFoundError):
        await stream.get_last_msg_for_subject(f"{name}.zzz")


@pytest.mark.parametrize("direct", [True, False])
async def test_get_msg_by_subject_and_from_the_leader(js: JetStreamContext, direct: bool) -> None:
    """``get_msg(seq, subject=)`` is the first message on the subject from ``seq`` (direct
    or not); ``direct=False`` always asks the leader (``STREAM.MSG.GET``), for
    read-your-writes on a stream that allows direct gets."""
    name = unique_name("GETBY")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], allow_direct=True)
    )
    for subject in "abab":
        await js.publish(f"{name}.{subject}", subject.encode())
    asked: list[str] = []

    async def record(msg: Any) -> None:
        asked.append(msg.subject.split(".")[2])

    sub = await js.nc.subscribe(f"$JS.API.*.*.{name}", cb=record)
    sub_get = await js.nc.subscribe(f"$JS.API.STREAM.MSG.GET.{name}", cb=record)
    try:
        msg = await stream.get_msg(2, subject=f"{name}.a", direct=direct)
        assert (msg.seq, msg.subject) == (3, f"{name}.a")
        assert (await stream.get_msg(1, subject=f"{name}.*", direct=direct)).seq == 1
        last = await stream.get_last_msg_for_subject(f"{name}.b", direct=direct)
        assert last.seq == 4
        with pytest.raises(MessageNotFoundError):
            await stream.get_msg(4, subject=f"{name}.a", direct=direct)
        with pytest.raises(InvalidSubjectError):
            await stream.get_msg(1, subject="bad subject", direct=direct)
        await js.nc.flush()
        expected = "DIRECT" if direct else "STREAM"
        assert asked, "no get was seen"
        assert set(asked) == {expected}, asked
    finally:
        await sub.unsubscribe()
        await sub_get.unsubscribe()


@pytest.mark.parametrize("erase", [False, True])
async def test_delete_msg(js: JetStreamContext, erase: bool) -> None:
    stream = await js.create_stream(StreamConfig(name=unique_name("DEL"), subjects=["del.>"]))
    for i in range(3):
        await js.publish("del.x", str(i).encode())
    await stream.delete_msg(2, erase=erase)
    with pytest.raises(MessageNotFoundError):
        await stream.get_msg(2)
    assert (await stream.get_msg(3)).data == b"2"
    info = await stream.info(deleted_details=True)
    assert info.state.messages == 2
    assert info.state.deleted == [2]
    with pytest.raises(MessageNotFoundError):
        await stream.delete_msg(2)
    with pytest.raises(MessageDeleteError):
        await stream.delete_msg(99)


async def test_info_subjects_filter(js: JetStreamContext) -> None:
    stream = await js.create_stream(
        StreamConfig(name=unique_name("SUBJ"), subjects=["subj.>"], storage=StorageType.MEMORY)
    )
    for i in range(5):
        await js.publish(f"subj.{i % 3}", b"x")
    info = await stream.info(subjects_filter="subj.>")
    assert info.state.subjects == {"subj.0": 2, "subj.1": 2, "subj.2": 1}


@pytest.mark.parametrize("gone", [3, 100_000])
async def test_info_subjects_pages_survive_subjects_going_away(
    js: JetStreamContext, monkeypatch: pytest.MonkeyPatch, gone: int
) -> None:
    """Subjects listed over several pages (100,000 a page, sorted, by offset): when
    subjects before the offset go away between two pages (expired, purged), the
    later ones shift back, and none of them may be skipped."""
    name = unique_name("PAGES")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    count = 100_050
    for i in range(count):
        await js.publish_async(f"{name}.{i:06d}", b"")
    await js.publish_async_complete(timeout=120)
    api_class = type(js._api)
    call = api_class.call
    pages: list[tuple[int, int]] = []

    async def purging_after_the_first_page(self: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await call(self, *args, **kwargs)
        body = args[1] if len(args) > 1 else None
        if isinstance(body, dict) and "offset" in body:
            pages.append((body["offset"], len(reply["state"].get("subjects") or {})))
            if len(pages) == 1:  # subjects that sort first go away
                if gone == 3:
                    for i in range(3):
                        await stream.purge(subject=f"{name}.{i:06d}")
                else:  # the whole first page: the rest sort after all it listed
                    await stream.purge(sequence=gone + 1)
        return reply

    monkeypatch.setattr(api_class, "call", purging_after_the_first_page)
    # Bounded: with the whole first page gone, the listing asked from offset 0 again
    # and again without end.
    info = await asyncio.wait_for(stream.info(subjects_filter=f"{name}.>"), 60)
    monkeypatch.undo()
    assert len(pages) >= 2
    listed = set(info.state.subjects or {})
    missing = {f"{name}.{i:06d}" for i in range(gone, count)} - listed
    assert not missing, f"{len(missing)} subjects skipped, e.g. {sorted(missing)[:3]} ({pages})"


@pytest.mark.parametrize("call", ["update_stream", "create_or_update_stream"])
async def test_stream_update_timeout_bounds_the_whole_call(
    js: JetStreamContext, nats_server: NatsServer, call: str
) -> None:
    """An update reads the current config first (to refuse turning ``allow_msg_ttl``
    off), then sends the update: each request had the whole ``timeout``, so over a
    slow link (0.5 s a request) ``timeout=0.8`` took about a second and succeeded;
    now the two share it and the call ends by its timeout."""
    name = unique_name("UPD")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"], storage=MEM))
    async with ApiCountingProxy(nats_server.port) as proxy:
        slow = await aiojetstream.connect(proxy.url)
        try:
            await slow.account_info()  # the API level is known: two requests, not three
            proxy.delay = 0.5
            config = StreamConfig(name=name, subjects=[f"{name}.>"], storage=MEM, max_msgs=10)
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(JetStreamTimeoutError):
                await getattr(slow, call)(config, timeout=0.8)
            assert loop.time() - start < 0.8 + 0.5
        finally:
            proxy.delay = 0.0
            await slow.close()


async def test_configs_with_offset_times_made_by_another_client_round_trip(
    js: JetStreamContext, nats_url: str
) -> None:
    """nats.go sends a time in its own zone ("+01:00"); nats-server compares configs with
    the times' zones (a mirror on update, an idempotent create): sent back in UTC they
    were refused (10055 "mirror configuration can not be updated", 10058, 10148)."""
    origin, mirror, consumer = unique_name("OFS_O"), unique_name("OFS_M"), unique_name("ofs")
    await js.create_stream(StreamConfig(name=origin, subjects=[f"{origin}.>"]))
    start = "2020-01-01T01:00:00+01:00"
    nc = await nats.connect(nats_url)
    try:
        for subject, body in (
            (
                f"$JS.API.STREAM.CREATE.{mirror}",
                {"name": mirror, "mirror": {"name": origin, "opt_start_time": start}},
            ),
            (
                f"$JS.API.CONSUMER.CREATE.{origin}.{consumer}",
                {
                    "stream_name": origin,
                    "config": {
                        "durable_name": consumer,
                        "deliver_policy": "by_start_time",
                        "opt_start_time": start,
                        "ack_policy": "explicit",
                    },
                },
            ),
        ):
            reply = json.loads((await nc.request(subject, json.dumps(body).encode(), 5)).data)
            assert "error" not in reply, reply
    finally:
        await nc.close()
    stream = await js.stream(mirror)
    config = stream.cached_info.config
    assert config.mirror is not None
    updated = await js.update_stream(config.model_copy(update={"description": "changed"}))
    assert updated.cached_info.config.description == "changed"
    await js.create_stream(updated.cached_info.config)  # the same config again: accepted
    got = await js.consumer(origin, consumer)
    same = await js.create_consumer(origin, got.cached_info.config)
    assert same.cached_info.config.opt_start_time == got.cached_info.config.opt_start_time

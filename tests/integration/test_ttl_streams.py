"""ADR-43 against a real nats-server: TTL stream settings, pedantic mode, limit markers.

Every expiry is awaited (``wait_until``, or a pull that is waiting before the
publish; never a fixed sleep). TTLs are 1 s unless a test needs to tell two
TTLs apart; a message or marker that must still be there when it is read is
either read by a pull waiting before it was written or lives 3 s, so that a
loaded machine does not lose the race against its expiry.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aiojetstream import (
    AckPolicy,
    APIError,
    ConsumerConfig,
    FeatureNotSupportedError,
    InvalidStreamConfigError,
    JetStreamContext,
    MessageNotFoundError,
    MessageTTLDisabledError,
    MessageTTLInvalidError,
    Msg,
    RawStreamMessage,
    StorageType,
    Stream,
    StreamConfig,
    StreamConfigError,
    StreamNotFoundError,
    StreamSource,
)
from aiojetstream._api import check_reply
from aiojetstream._headers import parse_ttl_header
from aiojetstream._models import to_wire
from helpers import unique_name, wait_until

MEM = StorageType.MEMORY
MARKER_REASON = "Nats-Marker-Reason"
TTL = "Nats-TTL"


class ApiCapture:
    """Every ``$JS.API.>`` request the test's connection sends, seen by a plain subscription."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._sub: Any = None
        self.seen: list[tuple[str, dict[str, Any] | None]] = []

    async def start(self) -> None:
        self._sub = await self._js.nc.subscribe("$JS.API.>")
        await self._js.nc.flush()

    async def take(self) -> list[tuple[str, dict[str, Any] | None]]:
        """The requests sent since the last call (a flush orders them before this read)."""
        await self._js.nc.flush()
        out: list[tuple[str, dict[str, Any] | None]] = []
        while self._sub.pending_msgs:
            msg = await self._sub.next_msg(timeout=1)
            out.append((msg.subject, json.loads(msg.data) if msg.data else None))
        self.seen.extend(out)
        return out

    async def subjects(self) -> list[str]:
        """The API subjects (without the ``$JS.API.`` prefix) sent since the last call."""
        return [subject.removeprefix("$JS.API.") for subject, _ in await self.take()]

    async def stop(self) -> None:
        await self._sub.unsubscribe()


@pytest.fixture
async def api(js: JetStreamContext) -> AsyncIterator[ApiCapture]:
    capture = ApiCapture(js)
    await capture.start()
    yield capture
    await capture.stop()


async def _last_on(stream: Stream, subject: str) -> RawStreamMessage | None:
    try:
        return await stream.get_last_msg_for_subject(subject)
    except MessageNotFoundError:
        return None


async def _wait_for_marker(stream: Stream, subject: str, timeout: float = 10) -> RawStreamMessage:
    """Poll until the last message on ``subject`` is a limit marker; return it."""
    found: list[RawStreamMessage] = []

    async def marker_seen() -> bool:
        last = await _last_on(stream, subject)
        if last is not None and last.headers and MARKER_REASON in last.headers:
            found.append(last)
            return True
        return False

    await wait_until(marker_seen, timeout=timeout, message=f"a limit marker on {subject}")
    return found[0]


# --------------------------------------------------------------------------- settings


async def test_marker_ttl_turns_on_its_companions(js: JetStreamContext, api: ApiCapture) -> None:
    name = unique_name("COMP")
    stream = await js.create_stream(
        StreamConfig(
            name=name,
            subjects=["comp.>"],
            storage=MEM,
            subject_delete_marker_ttl=1,
            deny_purge=True,
        )
    )
    sent = [body for subject, body in await api.take() if subject.endswith(f"STREAM.CREATE.{name}")]
    assert sent
    assert sent[0] is not None
    assert sent[0]["allow_msg_ttl"] is True
    assert sent[0]["allow_rollup_hdrs"] is True
    assert sent[0].get("deny_purge", False) is False
    assert "pedantic" not in sent[0]
    cfg = stream.cached_info.config
    assert cfg.subject_delete_marker_ttl == timedelta(seconds=1)
    assert (cfg.allow_msg_ttl, cfg.allow_rollup_hdrs, cfg.deny_purge) == (True, True, False)


async def test_allow_msg_ttl_alone_turns_on_its_companions(js: JetStreamContext) -> None:
    name = unique_name("ALONE")
    cfg = StreamConfig(name=name, subjects=["alone.>"], storage=MEM, allow_msg_ttl=True)
    created = (await js.create_stream(cfg.model_copy(update={"deny_purge": True}))).cached_info
    assert (created.config.allow_rollup_hdrs, created.config.deny_purge) == (True, False)
    assert created.config.subject_delete_marker_ttl is None


async def test_pedantic_sends_the_config_unchanged(js: JetStreamContext, api: ApiCapture) -> None:
    name = unique_name("PED")
    # With only allow_msg_ttl the server accepts deny_purge and no roll-ups in pedantic mode.
    cfg = StreamConfig(
        name=name, subjects=["ped.>"], storage=MEM, allow_msg_ttl=True, deny_purge=True
    )
    stream = await js.create_stream(cfg, pedantic=True)
    sent = [body for subject, body in await api.take() if subject.endswith(f"STREAM.CREATE.{name}")]
    assert len(sent) == 1
    assert sent[0] is not None
    assert sent[0] == {**to_wire(cfg), "pedantic": True}
    assert "allow_rollup_hdrs" not in sent[0]
    assert sent[0]["deny_purge"] is True
    got = stream.cached_info.config
    assert (got.allow_msg_ttl, got.allow_rollup_hdrs, got.deny_purge) == (True, False, True)
    # Updating pedantically keeps it that way.
    updated = await js.update_stream(cfg.model_copy(update={"description": "d"}), pedantic=True)
    assert updated.cached_info.config.deny_purge is True


async def test_updating_a_deny_purge_ttl_stream_says_to_use_pedantic(
    js: JetStreamContext,
) -> None:
    """A TTL stream with deny_purge (made pedantically, or by another client): the update
    the client fills in for ADR-43 (deny_purge=False) is refused by nats-server, which
    never turns deny_purge off; the error says what to do."""
    name = unique_name("PEDU")
    cfg = StreamConfig(
        name=name, subjects=[f"{name}.>"], storage=MEM, allow_msg_ttl=True, deny_purge=True
    )
    stored = (await js.create_stream(cfg, pedantic=True)).cached_info.config
    with pytest.raises(StreamConfigError) as info:
        await js.update_stream(stored.model_copy(update={"description": "d"}))
    assert info.value.err_code == 10052
    assert "pedantic=True" in "\n".join(getattr(info.value, "__notes__", []))
    for call in (js.update_stream, js.create_or_update_stream):
        done = await call(stored.model_copy(update={"description": "e"}), pedantic=True)
        assert done.cached_info.config.deny_purge is True


async def test_pedantic_marker_ttl_without_rollups_is_a_stream_config_error(
    js: JetStreamContext,
) -> None:
    name = unique_name("PEDM")
    cfg = StreamConfig(
        name=name,
        subjects=["pedm.>"],
        storage=MEM,
        allow_msg_ttl=True,
        subject_delete_marker_ttl=1,
    )
    with pytest.raises(StreamConfigError) as info:
        await js.create_stream(cfg, pedantic=True)
    assert (info.value.code, info.value.err_code) == (500, 10052)
    assert "roll-ups" in info.value.description
    with pytest.raises(StreamNotFoundError):
        await js.stream(name)
    # Without pedantic the client fills in allow_rollup_hdrs and the create succeeds.
    assert (await js.create_stream(cfg)).cached_info.config.allow_rollup_hdrs is True


async def test_pedantic_marker_ttl_without_allow_msg_ttl_is_refused_by_the_server(
    js: JetStreamContext,
) -> None:
    name = unique_name("PEDA")
    cfg = StreamConfig(
        name=name,
        subjects=["peda.>"],
        storage=MEM,
        subject_delete_marker_ttl=1,
        allow_rollup_hdrs=True,
    )
    with pytest.raises(StreamConfigError) as info:
        await js.create_or_update_stream(cfg, pedantic=True)
    assert info.value.err_code == 10052
    assert "message TTLs are disabled" in info.value.description


async def test_pedantic_mode_covers_the_whole_config(js: JetStreamContext) -> None:
    name = unique_name("PEDX")
    # Pedantic is the server's mode, not only about TTLs: here the server would
    # otherwise shrink the 2-minute duplicate window to max_age. It answers 10157
    # (no dedicated class: a plain APIError).
    cfg = StreamConfig(name=name, subjects=["pedx.>"], storage=MEM, max_age=60)
    with pytest.raises(APIError) as info:
        await js.create_stream(cfg, pedantic=True)
    assert type(info.value) is APIError
    assert (info.value.code, info.value.err_code) == (400, 10157)
    assert (await js.create_stream(cfg)).cached_info.config.duplicate_window == timedelta(
        seconds=60
    )


async def test_allow_msg_ttl_can_be_enabled_but_never_disabled(
    js: JetStreamContext, api: ApiCapture
) -> None:
    name = unique_name("EN")
    plain = StreamConfig(name=name, subjects=["en.>"], storage=MEM)
    await js.create_stream(plain)
    enabled = await js.update_stream(plain.model_copy(update={"allow_msg_ttl": True}))
    assert enabled.cached_info.config.allow_msg_ttl is True
    await api.take()

    for call in (js.update_stream, js.create_or_update_stream):
        with pytest.raises(InvalidStreamConfigError, match="cannot be disabled"):
            await call(plain)
        # Only the current config was read; no update was sent.
        assert await api.subjects() == [f"STREAM.INFO.{name}"]
    with pytest.raises(InvalidStreamConfigError):
        await js.update_stream(plain.model_copy(update={"description": "x"}), pedantic=True)
    assert (await js.stream(name)).cached_info.config.allow_msg_ttl is True

    # A config that keeps it on needs no lookup.
    await api.take()
    await js.update_stream(enabled.cached_info.config.model_copy(update={"description": "y"}))
    assert await api.subjects() == [f"STREAM.UPDATE.{name}"]


async def test_the_server_refuses_disabling_too(js: JetStreamContext) -> None:
    name = unique_name("SRV")
    # What the client front-runs: nats-server 2.15 answers 10052 (status 500).
    await js.create_stream(StreamConfig(name=name, subjects=["srv.>"], allow_msg_ttl=True))
    reply = await js.nc.request(
        f"$JS.API.STREAM.UPDATE.{name}",
        json.dumps({"name": name, "subjects": ["srv.>"], "allow_msg_ttl": False}).encode(),
        timeout=5,
    )
    with pytest.raises(StreamConfigError) as info:
        check_reply(reply.data)
    assert (info.value.code, info.value.err_code) == (500, 10052)
    assert "can not be disabled" in info.value.description


async def test_create_or_update_creates_a_missing_stream_without_an_update(
    js: JetStreamContext, api: ApiCapture
) -> None:
    cou_name = unique_name("COU")
    cout_name = unique_name("COUT")
    plain = StreamConfig(name=cou_name, subjects=["cou.>"], storage=MEM)
    await js.create_or_update_stream(plain)
    # allow_msg_ttl is off: the lookup finds no stream and it is created at once.
    assert await api.subjects() == [f"STREAM.INFO.{cou_name}", f"STREAM.CREATE.{cou_name}"]
    await js.create_or_update_stream(plain.model_copy(update={"max_msgs": 5}))
    assert await api.subjects() == [f"STREAM.INFO.{cou_name}", f"STREAM.UPDATE.{cou_name}"]

    ttl = StreamConfig(name=cout_name, subjects=["cout.>"], storage=MEM, allow_msg_ttl=True)
    await js.account_info()  # the API level is now cached
    await api.take()
    await js.create_or_update_stream(ttl)
    # Nothing can be disabled: the update is tried and the stream created.
    assert await api.subjects() == [f"STREAM.UPDATE.{cout_name}", f"STREAM.CREATE.{cout_name}"]


async def test_update_of_a_missing_stream_is_still_stream_not_found(js: JetStreamContext) -> None:
    with pytest.raises(StreamNotFoundError):
        await js.update_stream(StreamConfig(name="NOPE", subjects=["nope"]))
    with pytest.raises(StreamNotFoundError):
        await js.update_stream(StreamConfig(name="NOPE", subjects=["nope"], allow_msg_ttl=True))


@pytest.mark.parametrize(
    "cfg",
    [
        StreamConfig(
            name="R", subjects=["r"], subject_delete_marker_ttl=timedelta(milliseconds=999)
        ),
        StreamConfig(name="R", subjects=["r"], subject_delete_marker_ttl=0.5),
        StreamConfig(name="R", subjects=["r"], subject_delete_marker_ttl=timedelta(0)),
        StreamConfig.model_construct(
            name="R",
            subjects=["r"],
            subject_delete_marker_ttl=timedelta(seconds=-1),
        ),
        StreamConfig(name="R", mirror=StreamSource(name="ORIGIN"), subject_delete_marker_ttl=1),
        StreamConfig(
            name="R",
            mirror=StreamSource(name="ORIGIN"),
            subject_delete_marker_ttl=60,
            allow_msg_ttl=True,
            allow_rollup_hdrs=True,
        ),
    ],
    ids=["999ms", "0.5s", "zero", "negative", "mirror", "mirror-complete"],
)
async def test_refused_before_anything_is_sent(
    js: JetStreamContext, api: ApiCapture, cfg: StreamConfig
) -> None:
    name = unique_name("R")
    cfg = cfg.model_copy(update={"name": name})
    if cfg.mirror is not None:
        origin = unique_name("ORIGIN")
        cfg = cfg.model_copy(update={"mirror": StreamSource(name=origin)})
        await js.create_stream(StreamConfig(name=origin, subjects=["origin.>"], storage=MEM))
        await api.take()
    for call in (js.create_stream, js.update_stream, js.create_or_update_stream):
        for pedantic in (False, True):
            with pytest.raises(InvalidStreamConfigError):
                await call(cfg, pedantic=pedantic)
    assert await api.subjects() == []
    with pytest.raises(StreamNotFoundError):
        await js.stream(name)


async def test_api_level_is_read_once_and_only_when_needed(
    js: JetStreamContext, api: ApiCapture
) -> None:
    p1_name = unique_name("P1")
    t1_name = unique_name("T1")
    t2_name = unique_name("T2")
    await js.create_stream(StreamConfig(name=p1_name, subjects=["p1"], storage=MEM))
    assert await api.subjects() == [f"STREAM.CREATE.{p1_name}"]
    await js.create_stream(StreamConfig(name=t1_name, subjects=["t1"], allow_msg_ttl=True))
    assert await api.subjects() == ["INFO", f"STREAM.CREATE.{t1_name}"]
    await js.create_stream(StreamConfig(name=t2_name, subjects=["t2"], subject_delete_marker_ttl=1))
    assert await api.subjects() == [f"STREAM.CREATE.{t2_name}"]


@pytest.mark.parametrize(
    ("cfg", "pedantic", "feature"),
    [
        (StreamConfig(name="OLD", allow_msg_ttl=True), False, "allow_msg_ttl"),
        (
            StreamConfig(name="OLD", subject_delete_marker_ttl=5),
            False,
            "subject_delete_marker_ttl",
        ),
        (StreamConfig(name="OLD"), True, "pedantic mode"),
    ],
)
async def test_an_old_server_is_refused_with_the_version_needed(
    js: JetStreamContext,
    api: ApiCapture,
    cfg: StreamConfig,
    pedantic: bool,
    feature: str,
) -> None:
    js._api.level = 0  # what account_info reports on nats-server 2.10 and older
    name = unique_name("OLD")
    cfg = cfg.model_copy(update={"name": name, "subjects": ["old.>"], "storage": MEM})
    for call in (js.create_stream, js.update_stream, js.create_or_update_stream):
        with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.11") as info:
            await call(cfg, pedantic=pedantic)
        assert (info.value.feature, info.value.server_level) == (feature, 0)
    assert await api.subjects() == []
    # A plain config still goes through, and with level 0 no lookup is needed.
    await js.create_or_update_stream(StreamConfig(name=name, subjects=["old.>"], storage=MEM))
    assert await api.subjects() == [f"STREAM.UPDATE.{name}", f"STREAM.CREATE.{name}"]


# --------------------------------------------------------------------------- publish errors


async def test_publish_errors_map_to_ttl_classes(js: JetStreamContext) -> None:
    nottl_name = unique_name("NOTTL")
    ttl_name = unique_name("TTL")
    await js.create_stream(StreamConfig(name=nottl_name, subjects=["nottl.>"], storage=MEM))
    await js.create_stream(
        StreamConfig(name=ttl_name, subjects=["ttl.>"], storage=MEM, allow_msg_ttl=True)
    )
    with pytest.raises(MessageTTLDisabledError) as disabled:
        await js.publish("nottl.a", b"x", ttl=5)
    assert (disabled.value.code, disabled.value.err_code) == (400, 10166)
    # The client refuses these before sending; as raw headers the server refuses them.
    for raw in ("junk", "0", "500ms", "-1"):
        with pytest.raises(MessageTTLInvalidError) as invalid:
            await js.publish("ttl.a", b"x", headers={TTL: raw})
        assert (invalid.value.code, invalid.value.err_code) == (400, 10165)
    assert (await js.stream(ttl_name)).cached_info.state.messages == 0


async def test_never_outlives_max_age(js: JetStreamContext) -> None:
    name = unique_name("NEV")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=["nev.>"], storage=MEM, allow_msg_ttl=True, max_age=1)
    )
    kept = await js.publish("nev.keep", b"k", ttl="never")
    gone = await js.publish("nev.gone", b"g")

    async def aged_out() -> bool:
        return await _last_on(stream, "nev.gone") is None

    await wait_until(aged_out, timeout=10)
    assert (await stream.get_msg(kept.seq)).headers == {TTL: "never"}
    assert gone.seq == kept.seq + 1


# --------------------------------------------------------------------------- limit markers


async def _collect(batch: AsyncIterator[Msg]) -> list[Msg]:
    return [msg async for msg in batch]


async def _waiting_pull(stream: Stream, count: int) -> asyncio.Task[list[Msg]]:
    """A pull of ``count`` messages, waiting at the server when this returns.

    What is published afterwards reaches it as it is stored, limit markers
    included: a 1 s message is read before it can expire, however slow the
    machine (a read after the publish would race the TTL).
    """
    consumer = await stream.create_consumer(
        ConsumerConfig(durable_name="reader", ack_policy=AckPolicy.NONE)
    )
    batch = await consumer.fetch(count, expires=10)
    pulled = asyncio.create_task(_collect(batch))

    async def waiting() -> bool:
        return (await consumer.info()).num_waiting == 1

    await wait_until(waiting, timeout=10)
    return pulled


@pytest.mark.parametrize("direct", [False, True], ids=["msg-get", "direct-get"])
async def test_an_expired_message_leaves_a_marker_readers_see(
    js: JetStreamContext, direct: bool
) -> None:
    # The message lives 1 s, its marker 3 s: the reads of the marker below have
    # 3 s, not 1. (One message per subject: the server keeps the message's own
    # 1 s TTL instead of raising it to the marker TTL.) The pull waits before the
    # publish, so it gets the message at once, and the marker when it is written;
    # the readers then look for the marker the pull reported, no polling race.
    name = unique_name("MKD" if direct else "MKS")
    subject = f"{name}.key"
    stream = await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{name}.>"],
            storage=MEM,
            allow_direct=direct,
            subject_delete_marker_ttl=3,
            max_msgs_per_subject=1,
        )
    )
    pulled = await _waiting_pull(stream, 2)
    ack = await js.publish(subject, b"value", ttl=1)
    msgs = await asyncio.wait_for(pulled, timeout=15)
    assert len(msgs) == 2
    assert msgs[0].metadata.sequence.stream == ack.seq
    assert msgs[0].headers == {TTL: "1"}
    assert msgs[0].data == b"value"
    delivered = msgs[1]
    assert delivered.subject == subject
    assert delivered.data == b""
    assert delivered.headers is not None
    assert delivered.headers[MARKER_REASON] == "MaxAge"
    assert delivered.headers[TTL] == "3s"

    # What the readers (STREAM.MSG.GET, or direct get) see: the same marker.
    marker = await stream.get_last_msg_for_subject(subject)
    assert marker.seq == delivered.metadata.sequence.stream
    assert marker.seq > ack.seq
    assert marker.subject == subject
    assert marker.data == b""
    assert marker.headers is not None
    assert marker.headers[MARKER_REASON] == "MaxAge"
    # nats-server writes the marker TTL as a Go duration ("3s"), not whole seconds.
    assert marker.headers[TTL] == "3s"
    assert parse_ttl_header(marker.headers[TTL]) == timedelta(seconds=3)
    assert marker.headers.get("Nats-Rollup") == "sub"

    # The marker expires too, leaving the subject empty.
    async def subject_empty() -> bool:
        return await _last_on(stream, subject) is None

    await wait_until(subject_empty, timeout=15)
    assert (await stream.info()).state.messages == 0


async def test_max_age_leaves_a_marker(js: JetStreamContext) -> None:
    name = unique_name("AGE")
    stream = await js.create_stream(
        StreamConfig(
            name=name, subjects=["age.>"], storage=MEM, max_age=1, subject_delete_marker_ttl=3
        )
    )
    # A 3 s marker: polled for, it must not expire between two polls on a loaded machine.
    ack = await js.publish("age.key", b"v")  # no per-message TTL: max_age removes it
    marker = await _wait_for_marker(stream, "age.key")
    assert marker.seq == ack.seq + 1
    assert marker.headers is not None
    assert marker.headers[MARKER_REASON] == "MaxAge"
    assert marker.headers[TTL] == "3s"


async def test_no_marker_while_the_subject_keeps_a_message(js: JetStreamContext) -> None:
    name = unique_name("KEEP")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=["keep.>"], storage=MEM, subject_delete_marker_ttl=1)
    )
    first = await js.publish("keep.key", b"old", ttl=1)
    second = await js.publish("keep.key", b"new", ttl=60)

    async def first_gone() -> bool:
        try:
            await stream.get_msg(first.seq)
        except MessageNotFoundError:
            return True
        return False

    await wait_until(first_gone, timeout=10)
    sentinel = await js.publish("keep.other", b"s")
    assert sentinel.seq == second.seq + 1  # no marker was stored in between
    assert (await stream.get_last_msg_for_subject("keep.key")).seq == second.seq


async def test_purge_and_delete_leave_no_marker_on_nats_server_2_15(js: JetStreamContext) -> None:
    name = unique_name("PD")
    # ADR-43 plans Purge and Remove markers; nats-server 2.15 writes neither.
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=["pd.>"], storage=MEM, subject_delete_marker_ttl=1)
    )
    await js.publish("pd.purged", b"p")
    deleted = await js.publish("pd.deleted", b"d")
    assert await stream.purge(subject="pd.purged") == 1
    await stream.delete_msg(deleted.seq)
    sentinel = await js.publish("pd.sentinel", b"s")
    assert sentinel.seq == deleted.seq + 1  # nothing was stored by the purge or delete
    assert await _last_on(stream, "pd.purged") is None
    assert await _last_on(stream, "pd.deleted") is None
    assert (await stream.info()).state.messages == 1


async def test_a_shorter_ttl_is_raised_to_the_marker_ttl(js: JetStreamContext) -> None:
    name = unique_name("FLOOR")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=["floor.>"], storage=MEM, subject_delete_marker_ttl=2)
    )
    pulled = await _waiting_pull(stream, 2)
    ack = await js.publish("floor.key", b"v", ttl=1)
    stored, marker = await asyncio.wait_for(pulled, timeout=15)
    assert stored.metadata.sequence.stream == ack.seq
    # The server rewrites the stored header to the marker TTL...
    assert stored.headers == {TTL: "2"}
    # ...and removes the message after 2 s, not 1 s (the pub ack is not affected):
    # the two store times, both the server's.
    assert marker.metadata.timestamp - stored.metadata.timestamp >= timedelta(seconds=1.5)
    assert marker.headers is not None
    assert marker.headers[MARKER_REASON] == "MaxAge"
    assert marker.headers[TTL] == "2s"
    # A longer TTL is kept as sent.
    longer = await js.publish("floor.long", b"v", ttl=30)
    assert (await stream.get_msg(longer.seq)).headers == {TTL: "30"}


async def test_no_ttl_floor_with_one_message_per_subject(js: JetStreamContext) -> None:
    name = unique_name("ONE")
    stream = await js.create_stream(
        StreamConfig(
            name=name,
            subjects=["one.>"],
            storage=MEM,
            subject_delete_marker_ttl=2,
            max_msgs_per_subject=1,
        )
    )
    pulled = await _waiting_pull(stream, 2)
    ack = await js.publish("one.key", b"v", ttl=1)
    stored, marker = await asyncio.wait_for(pulled, timeout=15)
    assert stored.metadata.sequence.stream == ack.seq
    assert stored.headers == {TTL: "1"}  # kept: no floor with one message per subject
    assert marker.headers is not None
    assert marker.headers[MARKER_REASON] == "MaxAge"
    assert marker.headers[TTL] == "2s"


# --------------------------------------------------------------------------- sources, mirrors


async def test_sourcing_without_allow_msg_ttl_keeps_expired_messages(js: JetStreamContext) -> None:
    origin_name = unique_name("ORIGIN")
    audit_name = unique_name("AUDIT")
    mirror_name = unique_name("MIRROR")
    expiring_name = unique_name("EXPIRING")
    origin = await js.create_stream(
        StreamConfig(
            name=origin_name, subjects=["origin.>"], storage=MEM, subject_delete_marker_ttl=1
        )
    )
    audit = await js.create_stream(
        StreamConfig(name=audit_name, storage=MEM, sources=[StreamSource(name=origin_name)])
    )
    mirror = await js.create_stream(
        StreamConfig(name=mirror_name, storage=MEM, mirror=StreamSource(name=origin_name))
    )
    # Contrast: a stream that sources with allow_msg_ttl applies the TTLs itself.
    expiring = await js.create_stream(
        StreamConfig(
            name=expiring_name,
            storage=MEM,
            sources=[StreamSource(name=origin_name)],
            allow_msg_ttl=True,
        )
    )
    ack = await js.publish("origin.key", b"secret", ttl=1)

    async def audited() -> bool:
        return await _last_on(audit, "origin.key") is not None

    await wait_until(audited, timeout=10)
    copy = await audit.get_last_msg_for_subject("origin.key")
    assert copy.data == b"secret"

    async def ttl_passed_everywhere() -> bool:
        if await _last_on(origin, "origin.key") is not None:
            return False  # the origin still holds the message or its marker
        if await _last_on(expiring, "origin.key") is not None:
            return False
        # And the audit copy is past its own TTL, counted from its own timestamp.
        return datetime.now(UTC) >= copy.time + timedelta(seconds=1.2)

    await wait_until(ttl_passed_everywhere, timeout=15)

    for stream in (audit, mirror):
        state = (await stream.info()).state
        assert state.messages == 2, stream.name  # the message and the origin's marker
        first = await stream.get_msg(state.first_seq)
        assert (first.subject, first.data) == ("origin.key", b"secret")
        assert first.headers is not None
        assert first.headers[TTL] == "1"
        last = await stream.get_msg(state.last_seq)
        assert last.headers is not None
        assert last.headers[MARKER_REASON] == "MaxAge"
    assert (await mirror.get_msg(ack.seq)).data == b"secret"  # a mirror keeps sequences
    assert (await expiring.info()).state.messages == 0

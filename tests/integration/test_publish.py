"""Publishing against a real nats-server: options, expectations, TTL, bad input."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from aiojetstream import (
    ConnectionClosedError,
    InvalidHeaderError,
    InvalidOptionError,
    InvalidResponseError,
    InvalidSubjectError,
    InvalidTTLError,
    JetStreamContext,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    MessageSizeExceedsMaximumError,
    MessageTTLDisabledError,
    NoRespondersError,
    PubAck,
    StorageType,
    StreamConfig,
    StreamNotMatchError,
    WrongLastMsgIdError,
    WrongLastSequenceError,
)
from aiojetstream._context import DEFAULT_MAX_PENDING
from helpers import unique_name, wait_until


@pytest.fixture
async def stream(js: JetStreamContext) -> str:
    name = unique_name("PUB")
    await js.create_stream(
        StreamConfig(
            name=name,
            subjects=["pub.>"],
            storage=StorageType.MEMORY,
            duplicate_window=timedelta(minutes=1),
        )
    )
    return name


async def test_publish_returns_pub_ack(js: JetStreamContext, stream: str) -> None:
    ack = await js.publish("pub.a", b"hello", headers={"X-A": "1"})
    assert isinstance(ack, PubAck)
    assert (ack.stream, ack.seq, ack.duplicate) == (stream, 1, False)
    msg = await (await js.stream(stream)).get_msg(1)
    assert msg.headers == {"X-A": "1"}
    ack2 = await js.publish("pub.a", bytearray(b"more"))
    assert ack2.seq == 2


async def test_dedupe_by_msg_id(js: JetStreamContext, stream: str) -> None:
    first = await js.publish("pub.a", b"1", msg_id="id-1")
    second = await js.publish("pub.a", b"1", msg_id="id-1")
    assert not first.duplicate
    assert second.duplicate
    assert second.seq == first.seq
    info = await (await js.stream(stream)).info()
    assert info.state.messages == 1


async def test_header_values_keep_what_is_not_an_ascii_blank(
    js: JetStreamContext, stream: str
) -> None:
    """Values were stripped with str.strip() on both sides: U+00A0 and U+3000 around a
    value were lost on publish and on reading (nats-py and nats.go keep them)."""
    sent = {"A": "v\u00a0", "B": "\u3000v", "C": " v\t"}
    await js.publish("pub.a", b"1", headers=sent)
    await (await js.publish_async("pub.a", b"2", headers=sent))
    await js.publish_many("pub.a", [b"3"], headers=[sent])
    wanted = {"A": "v\u00a0", "B": "\u3000v", "C": "v"}
    if not js._conn.fast:
        # The fallback publishes through nats-py, which strips any whitespace (api.md).
        wanted = {"A": "v", "B": "v", "C": "v"}
    handle = await js.stream(stream)
    for seq in (1, 2, 3):
        assert (await handle.get_msg(seq)).headers == wanted
        assert (await handle.get_msg(seq, direct=True)).headers == wanted
    consumer = await js.ordered_consumer(stream)
    async with await consumer.fetch(3) as fetched:
        assert [m.headers async for m in fetched] == [wanted] * 3
    # A msg id still may not have any whitespace around it: nats-py (the fallback path)
    # strips values with str.strip(), and "a\u00a0" would be a duplicate of "a" there.
    for msg_id in ("a\u00a0", "\u3000a"):
        with pytest.raises(InvalidOptionError, match="whitespace"):
            await js.publish("pub.a", b"x", msg_id=msg_id)
    with pytest.raises(InvalidOptionError, match="whitespace"):
        await js.publish("pub.a", b"x", headers={"Nats-Msg-Id": "\u3000"}, hold_when_full=5)
    assert (await js.stream(stream)).cached_info.state.messages == 3


async def test_msg_id_argument_wins_over_a_msg_id_header(js: JetStreamContext, stream: str) -> None:
    """``msg_id=`` and a ``Nats-Msg-Id`` header both given: the argument is the id sent
    (as nats.go's MsgId option), so a retry with the same ``msg_id`` is a duplicate."""
    acks = [
        await js.publish("pub.a", b"1", msg_id="arg-1", headers={"Nats-Msg-Id": "hdr-1"}),
        await (
            await js.publish_async("pub.a", b"2", msg_id="arg-2", headers={"Nats-Msg-Id": "hdr-2"})
        ),
        await js.publish(
            "pub.a", b"3", msg_id="arg-3", headers={"Nats-Msg-Id": "hdr-3"}, hold_when_full=5
        ),
    ]
    summary = await js.publish_many(
        "pub.a", [b"4"], headers=[{"Nats-Msg-Id": "hdr-4", "X-A": "1"}], msg_ids=["arg-4"]
    )
    assert (summary.stored, summary.duplicates) == (1, 0)
    handle = await js.stream(stream)
    stored = [(await handle.get_msg(seq)).headers for seq in (1, 2, 3, 4)]
    assert [h["Nats-Msg-Id"] if h else None for h in stored] == ["arg-1", "arg-2", "arg-3", "arg-4"]
    assert stored[3] == {"Nats-Msg-Id": "arg-4", "X-A": "1"}  # the other headers kept
    assert [a.seq for a in acks] == [1, 2, 3]
    for i, ack in enumerate(acks, 1):
        again = await js.publish("pub.a", b"retry", msg_id=f"arg-{i}")
        assert (again.seq, again.duplicate) == (ack.seq, True)
    assert (await js.publish("pub.a", b"retry", msg_id="arg-4")).duplicate
    assert (await handle.info()).state.messages == 4


async def test_a_publish_cancelled_after_its_write_may_be_stored(
    js: JetStreamContext, stream: str
) -> None:
    """docs/publishing.md: a cancelled publish is like a timeout; retry with the same msg_id."""
    before = js.nc.stats["out_msgs"]
    with pytest.raises(TimeoutError):
        # The timeout cancels the call once it first waits: after the message is written.
        async with asyncio.timeout(0):
            await js.publish("pub.a", b"1", msg_id="cut-1")
    assert js.nc.stats["out_msgs"] == before + 1
    handle = await js.stream(stream)

    async def stored() -> bool:
        return (await handle.info()).state.messages == 1

    await wait_until(stored)
    again = await js.publish("pub.a", b"1", msg_id="cut-1")
    assert (again.seq, again.duplicate) == (1, True)


async def test_expected_options_hold(js: JetStreamContext, stream: str) -> None:
    await js.publish("pub.a", b"1", expected_stream=stream)
    await js.publish("pub.a", b"2", expected_last_sequence=1)
    await js.publish("pub.a", b"3", expected_last_subject_sequence=2)
    await js.publish("pub.b", b"4", expected_last_subject_sequence=0)
    await js.publish("pub.a", b"5", msg_id="m5")
    ack = await js.publish("pub.a", b"6", msg_id="m6", expected_last_msg_id="m5")
    assert ack.seq == 6


async def test_expected_stream_mismatch(js: JetStreamContext, stream: str) -> None:
    with pytest.raises(StreamNotMatchError) as info:
        await js.publish("pub.a", b"x", expected_stream="OTHER")
    assert info.value.err_code == 10060


async def test_expected_last_sequence_mismatch(js: JetStreamContext, stream: str) -> None:
    await js.publish("pub.a", b"x")
    with pytest.raises(WrongLastSequenceError) as info:
        await js.publish("pub.a", b"x", expected_last_sequence=7)
    assert info.value.err_code == 10071


async def test_expected_last_subject_sequence_mismatch(js: JetStreamContext, stream: str) -> None:
    await js.publish("pub.a", b"x")
    await js.publish("pub.b", b"x")
    with pytest.raises(WrongLastSequenceError) as info:
        await js.publish("pub.a", b"x", expected_last_subject_sequence=2)
    assert info.value.err_code == 10071


async def test_expected_last_msg_id_mismatch(js: JetStreamContext, stream: str) -> None:
    await js.publish("pub.a", b"x", msg_id="a")
    with pytest.raises(WrongLastMsgIdError) as info:
        await js.publish("pub.a", b"x", expected_last_msg_id="b")
    assert info.value.err_code == 10070


async def test_ttl_publish(js: JetStreamContext) -> None:
    stream = await js.create_stream(
        StreamConfig(name=unique_name("TTL"), subjects=["ttl.>"], allow_msg_ttl=True)
    )
    cases: list[tuple[int | timedelta | str, str]] = [
        (60, "60"),
        (timedelta(hours=1), "3600"),
        ("1h30m", "5400"),
        ("never", "never"),
    ]
    for ttl, wire in cases:
        ack = await js.publish("ttl.a", b"x", ttl=ttl)
        msg = await stream.get_msg(ack.seq)
        assert msg.headers == {"Nats-TTL": wire}


async def test_ttl_on_stream_without_ttl(js: JetStreamContext, stream: str) -> None:
    with pytest.raises(MessageTTLDisabledError) as info:
        await js.publish("pub.a", b"x", ttl=5)
    assert info.value.err_code == 10166


async def test_no_stream_for_subject(js: JetStreamContext) -> None:
    with pytest.raises(NoRespondersError):
        await js.publish("nobody.listens", b"x")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"subject": ""}, InvalidSubjectError),
        ({"subject": "pub a"}, InvalidSubjectError),
        ({"subject": "pub.a\r\nPUB pub.b 1"}, InvalidSubjectError),
        ({"subject": "pub.a\n"}, InvalidSubjectError),
        ({"subject": "pub.*"}, InvalidSubjectError),
        ({"subject": "pub.>"}, InvalidSubjectError),
        ({"headers": {"X\r\nInjected": "1"}}, InvalidHeaderError),
        ({"headers": {"X": "v\r\nPUB pub.b 1"}}, InvalidHeaderError),
        ({"headers": {"X": "v\x00"}}, InvalidHeaderError),
        ({"headers": {"X": 1}}, InvalidHeaderError),
        ({"msg_id": "a\r\nb"}, InvalidHeaderError),
        # Header values are sent stripped: a blank id would go out empty.
        ({"msg_id": "   "}, InvalidOptionError),
        ({"msg_id": "\t "}, InvalidOptionError),
        ({"expected_last_msg_id": "  "}, InvalidOptionError),
        ({"expected_last_msg_id": ""}, InvalidOptionError),
        # ... and "a " would go out as "a": two ids told apart would be one.
        ({"msg_id": "order-7 "}, InvalidOptionError),
        ({"msg_id": " order-7"}, InvalidOptionError),
        ({"expected_last_msg_id": "m5\t"}, InvalidOptionError),
        # The same ids given as headers (the server reads these exact names).
        ({"headers": {"Nats-Msg-Id": "order-7 "}}, InvalidOptionError),
        ({"headers": {"Nats-Msg-Id": " "}}, InvalidOptionError),
        ({"headers": {"Nats-Msg-Id": ""}}, InvalidOptionError),
        ({"headers": {"Nats-Msg-Id": " order-7"}, "hold_when_full": 1}, InvalidOptionError),
        ({"headers": {"Nats-Msg-Id": " "}, "hold_when_full": 1}, InvalidOptionError),
        ({"headers": {"Nats-Expected-Last-Msg-Id": "m5\t"}}, InvalidOptionError),
        ({"headers": {"Nats-Expected-Last-Msg-Id": ""}}, InvalidOptionError),
        ({"ttl": 0}, InvalidTTLError),
        ({"ttl": 0.5}, InvalidTTLError),
        ({"ttl": -1}, InvalidTTLError),
        ({"ttl": "junk"}, InvalidTTLError),
        ({"ttl": timedelta(milliseconds=10)}, InvalidTTLError),
        ({"expected_last_sequence": -1}, InvalidOptionError),
        ({"payload": "text"}, InvalidOptionError),
    ],
)
async def test_bad_input_is_rejected_before_sending(
    js: JetStreamContext, stream: str, kwargs: dict[str, object], error: type[Exception]
) -> None:
    args: dict[str, object] = {"subject": "pub.a", "payload": b"x", **kwargs}
    before = js.nc.stats["out_msgs"]
    for publish in (js.publish, js.publish_async):
        with pytest.raises(error) as info:
            await publish(**args)  # type: ignore[arg-type]
        assert isinstance(info.value, ValueError)
    assert js.nc.stats["out_msgs"] == before
    # The connection stays usable.
    assert (await js.publish("pub.a", b"ok")).stream == stream


async def test_msg_ids_given_as_headers_get_the_msg_id_checks(
    js: JetStreamContext, stream: str
) -> None:
    """``headers={"Nats-Msg-Id": ...}`` is checked as ``msg_id=`` is, in every publish.

    Header values are sent stripped: ``"order-7 "`` went out as ``"order-7"``
    and a later message with that id was dropped as its duplicate; a blank one
    went out empty (no de-duplication at all).
    """
    before = js.nc.stats["out_msgs"]
    for bad in (
        {"Nats-Msg-Id": "order-7 "},
        {"Nats-Msg-Id": "\t"},
        {"Nats-Expected-Last-Msg-Id": " m5"},
    ):
        with pytest.raises(InvalidOptionError, match="whitespace"):
            await js.publish_many("pub.a", [b"ok", b"x"], headers=[None, bad])
        with pytest.raises(InvalidOptionError, match="whitespace"):
            await js.publish_many_async(["pub.a", "pub.b"], [b"ok", b"x"], headers=[bad, None])
        batch = js.atomic_batch()
        with pytest.raises(InvalidOptionError, match="whitespace"):
            await batch.add("pub.a", b"x", headers=bad)
        with pytest.raises(InvalidOptionError, match="whitespace"):
            await batch.commit("pub.a", b"x", headers=bad)
    assert js.nc.stats["out_msgs"] == before
    assert js.publish_async_pending == 0
    # Ids as headers still de-duplicate, against msg_id= too.
    first = await js.publish("pub.a", b"A", headers={"Nats-Msg-Id": "order-7"})
    again = await js.publish("pub.a", b"B", msg_id="order-7")
    assert (again.seq, again.duplicate) == (first.seq, True)
    summary = await js.publish_many(
        "pub.a", [b"C", b"D"], headers=[{"Nats-Msg-Id": "k"}, {"Nats-Msg-Id": "k"}]
    )
    assert (summary.stored, summary.duplicates) == (2, 1)


async def test_max_payload_counts_headers(js: JetStreamContext, stream: str) -> None:
    limit = js.nc.max_payload
    before = js.nc.stats["out_msgs"]
    with pytest.raises(MaxPayloadExceededError):
        await js.publish("pub.a", b"x" * (limit + 1))
    # Payload alone fits, headers push it over the limit.
    with pytest.raises(MaxPayloadExceededError):
        await js.publish("pub.a", b"x" * (limit - 10), headers={"X-Big": "y" * 64})
    with pytest.raises(MaxPayloadExceededError):
        await js.publish_async("pub.a", b"x" * (limit - 10), msg_id="z" * 64)
    assert js.nc.stats["out_msgs"] == before
    assert js.nc.is_connected
    ack = await js.publish("pub.a", b"x" * (limit - 200), headers={"X-Small": "y"})
    assert ack.seq == 1


async def test_publish_async_window_and_complete(js: JetStreamContext) -> None:
    """The default window (4000) fills and holds; publish_async_complete waits for all.

    (This checked ``pending <= 4000`` after 2000 publishes: it could not fail.)
    More publishes than the window, with no await in between that could let an
    ack in, fill it exactly: the peak is the window, never more.
    """
    await js.create_stream(StreamConfig(name=unique_name("ASYNC"), subjects=["async.>"]))
    total = DEFAULT_MAX_PENDING + 1000
    peak = 0
    futures = []
    for i in range(total):
        futures.append(await js.publish_async("async.a", str(i).encode()))
        peak = max(peak, js.publish_async_pending)
    assert peak == DEFAULT_MAX_PENDING
    await js.publish_async_complete(timeout=30)
    assert js.publish_async_pending == 0
    acks = [f.result() for f in futures]
    assert [a.seq for a in acks] == list(range(1, total + 1))


async def test_publish_async_bounded_window(nats_server: object) -> None:
    import aiojetstream
    from aiojetstream.testing import NatsServer

    assert isinstance(nats_server, NatsServer)
    async with await aiojetstream.connect(nats_server.url, publish_async_max_pending=8) as js:
        name = unique_name("WIN")
        await js.create_stream(
            StreamConfig(name=name, subjects=["win"], storage=StorageType.MEMORY)
        )
        peak = 0
        futures = []
        for i in range(500):
            futures.append(await js.publish_async("win", str(i).encode()))
            peak = max(peak, js.publish_async_pending)
        assert peak == 8  # reached (the bound was exercised), never exceeded
        await js.publish_async_complete(timeout=30)
        assert [f.result().seq for f in futures] == list(range(1, 501))
        assert all(f.result().stream == name for f in futures)
        await js.delete_stream(name)


async def test_publish_async_errors_are_typed(js: JetStreamContext, stream: str) -> None:
    await js.publish("pub.a", b"x")
    bad = await js.publish_async("pub.a", b"x", expected_last_sequence=42)
    nobody = await js.publish_async("nobody.here", b"x")
    await js.publish_async_complete(timeout=10)
    with pytest.raises(WrongLastSequenceError):
        bad.result()
    with pytest.raises(NoRespondersError):
        nobody.result()


async def test_publish_async_ack_timeout(js: JetStreamContext) -> None:
    # A core subscriber that never replies: the ack can never arrive.
    sub = await js.nc.subscribe("silent.subject")
    fut = await js.publish_async("silent.subject", b"x", timeout=0.5)
    with pytest.raises(JetStreamTimeoutError):
        await asyncio.wait_for(fut, 10)
    assert js.publish_async_pending == 0
    await sub.unsubscribe()


async def test_publish_async_complete_timeout(js: JetStreamContext) -> None:
    sub = await js.nc.subscribe("silent.two")
    await js.publish_async("silent.two", b"x", timeout=30)
    with pytest.raises(JetStreamTimeoutError):
        await js.publish_async_complete(timeout=0.2)
    await sub.unsubscribe()


async def test_publish_async_complete_waits_for_each_publish_s_own_deadline(
    nats_server: object, stream: str
) -> None:
    """Without ``timeout`` it raised after the context's ``timeout`` (5 s by default)
    while publishes with a longer ``publish_async_timeout`` were still in flight."""
    import aiojetstream
    from aiojetstream.testing import NatsServer

    assert isinstance(nats_server, NatsServer)
    async with await aiojetstream.connect(
        nats_server.url, timeout=0.3, publish_async_timeout=30
    ) as js:
        # Acknowledged only after the context's timeout has passed.
        delayed = f"{stream}.delayed"
        replies: list[asyncio.Task[None]] = []

        async def late_ack(msg: Any) -> None:
            async def reply() -> None:
                await asyncio.sleep(1.0)  # the scenario: a slow acknowledgement
                await js.nc.publish(msg.reply, b'{"stream":"S","seq":1}')

            replies.append(asyncio.ensure_future(reply()))

        sub = await js.nc.subscribe(delayed, cb=late_ack)
        fut = await js.publish_async(delayed, b"x")
        await js.publish_async_complete()
        assert (await fut).seq == 1
        await sub.unsubscribe()
        await asyncio.gather(*replies)


async def test_close_fails_pending_and_refuses_new(nats_server: object) -> None:
    import aiojetstream
    from aiojetstream.testing import NatsServer

    assert isinstance(nats_server, NatsServer)
    js = await aiojetstream.connect(nats_server.url)
    sub = await js.nc.subscribe("silent.three")
    fut = await js.publish_async("silent.three", b"x", timeout=60)
    await js.close()
    with pytest.raises(ConnectionClosedError, match="may still have been stored"):
        await fut
    with pytest.raises(ConnectionClosedError):
        await js.publish("pub.a", b"x")
    with pytest.raises(ConnectionClosedError):
        await js.publish_async("pub.a", b"x")
    await js.close()  # idempotent
    del sub


@pytest.mark.parametrize(
    "body",
    [
        b'{"error":"no such thing"}',
        b'{"error":{"code":"bad","err_code":1}}',
        b'{"error":[1]}',
        b'{"error":{"code":Infinity}}',  # Python's JSON takes it; int() overflows
    ],
)
async def test_replies_no_server_writes_fail_typed_and_at_once(
    js: JetStreamContext, body: bytes
) -> None:
    # A core service answers the subject with JSON whose "error" is not the API's
    # shape: every publish form fails with InvalidResponseError at once (a
    # publish_async future left waiting forever, a publish_many that never returned).
    subject = f"odd.{unique_name('reply')}"

    async def answer(msg: Any) -> None:
        await msg.respond(body)

    sub = await js.nc.subscribe(subject, cb=answer)
    try:
        with pytest.raises(InvalidResponseError):
            await js.publish(subject, b"x")
        fut = await js.publish_async(subject, b"x", timeout=60)
        with pytest.raises(InvalidResponseError):
            await asyncio.wait_for(fut, 10)
        assert js.publish_async_pending == 0
        held = await js.publish_async(subject, b"x", timeout=60, hold_when_full=30)
        with pytest.raises(InvalidResponseError):
            await asyncio.wait_for(held, 10)
        with pytest.raises(InvalidResponseError):
            await asyncio.wait_for(js.publish_many(subject, [b"a", b"b", b"c"], timeout=60), 10)
        await asyncio.wait_for(js.publish_async_complete(timeout=10), 10)
    finally:
        await sub.unsubscribe()


async def test_headers_over_64_kib_are_a_message_size_error(js: JetStreamContext) -> None:
    """nats-server refuses a header block over 64 KiB (10097): a plain APIError before."""
    name = unique_name("HDR")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    with pytest.raises(MessageSizeExceedsMaximumError) as info:
        await js.publish(f"{name}.a", b"x", headers={"X-Big": "v" * 70_000})
    assert info.value.err_code == 10097
    assert (await (await js.stream(name)).info()).state.messages == 0

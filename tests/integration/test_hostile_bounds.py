"""Errors of the wrong class and odd bounds, against a real nats-server (issue 25, 10 and 11).

What used to happen, each case in its test:

* a sequence past 2**64 - 1 went to the server, which answered 408 (a batch
  direct get) or "invalid JSON" (a config's ``first_seq`` / ``opt_start_seq``),
  or it was used as is (``up_to_seq``); a consumer reset sent two requests
  before refusing it; one past 4,300 digits raised a bare ``ValueError`` from
  the check's own message;
* ``Counter.add`` of an increment past Python's int-to-str digit limit raised
  a bare ``ValueError``; with the limit lifted, an increment header over
  ``max_payload`` made the server close the connection; a total past the
  limit raised a bare ``ValueError`` when read;
* a bad bucket name raised pydantic's ``ValidationError`` when the config was
  built, a bad mirror or source name was sent (a bare ``APIError``);
* ``hold_when_full=nan`` said "must not be negative", ``1e300`` seconds (as a
  timeout, a hold, an expiry) was accepted where ``inf`` was refused, a
  giant int raised ``OverflowError``, ``publish_async_timeout`` took anything;
* ``add_link`` with an info read before its object was deleted stored a
  dangling link.

Each is now the library's typed error, raised before anything is sent: the
client goes through a proxy that logs every PUB/HPUB it sends (``tests/proxy.py``).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

import aiojetstream
from aiojetstream import (
    ConsumerConfig,
    DeliverPolicy,
    InvalidNameError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamContext,
    KeyValueConfig,
    MaxPayloadExceededError,
    ObjectLinkError,
    ObjectNotFoundError,
    ObjectStoreConfig,
    OrderedConsumerConfig,
    StorageType,
    StreamConfig,
    StreamSource,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name
from proxy import ApiCountingProxy

GIANT = 10**5000  #: past Python's 4,300-digit int-to-str limit
HUGE = 10**400  #: past the largest float
TOO_BIG = 2**64  #: one past the server's uint64 sequences


@contextmanager
def digit_limit(limit: int) -> Iterator[None]:
    """Python's int-to-str digit limit set to ``limit`` (0: none) for the block."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(limit)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)


@dataclass
class Wire:
    """A context whose every PUB/HPUB a proxy logs."""

    proxy: ApiCountingProxy
    js: JetStreamContext

    async def refused(
        self,
        call: Callable[[], Awaitable[object]],
        error: type[Exception] = InvalidOptionError,
        match: str | None = None,
    ) -> BaseException:
        """``call`` raises ``error`` and sends nothing (not a byte of a PUB or HPUB)."""
        mark = len(self.proxy.api)
        with pytest.raises(error, match=match) as info:
            await call()
        await self.js.nc.flush()  # everything sent before it went through the proxy
        assert [subject for _, subject in self.proxy.api[mark:]] == []
        return info.value

    async def all_refused(
        self, calls: dict[str, Callable[[], Awaitable[object]]], *words: str
    ) -> None:
        """Each call raises InvalidOptionError (naming one of ``words``, if any), sends nothing.

        Every call is tried; the assertion lists each one that did otherwise.
        """
        wrong: list[str] = []
        for label, call in calls.items():
            mark = len(self.proxy.api)
            try:
                await call()
            except InvalidOptionError as exc:
                if words and not any(word in str(exc) for word in words):
                    wrong.append(f"{label}: {exc}")
            except Exception as exc:  # reported below with its label
                wrong.append(f"{label}: {type(exc).__name__}: {str(exc)[:100]}")
            else:
                wrong.append(f"{label}: accepted")
            await self.js.nc.flush()
            sent = [subject for _, subject in self.proxy.api[mark:]]
            if sent:
                wrong.append(f"{label}: sent {sent}")
        assert not wrong, "\n".join(wrong)


@pytest_asyncio.fixture
async def wire(js: JetStreamContext, nats_server: NatsServer) -> AsyncIterator[Wire]:
    """Through the proxy, to the session's server (``js`` deletes the streams afterwards)."""
    async with ApiCountingProxy(nats_server.port) as proxy:
        context = await aiojetstream.connect(proxy.url)
        try:
            yield Wire(proxy, context)
        finally:
            await context.close()


async def _drain(items: AsyncIterator[Any]) -> None:
    async for _ in items:
        pass


async def _stream(js: JetStreamContext, **options: Any) -> tuple[str, aiojetstream.Stream]:
    name = unique_name("HB")
    stream = await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{name}.>"],
            storage=StorageType.MEMORY,
            allow_direct=True,
            **options,
        )
    )
    return name, stream


# --------------------------------------------------------------------------- sequences


async def test_sequences_past_uint64_never_reach_the_server(wire: Wire) -> None:
    js = wire.js
    name, stream = await _stream(js)
    await js.publish(f"{name}.a", b"1")
    consumer = await stream.create_consumer(ConsumerConfig(durable_name="d"))
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("hbkv")))
    await kv.put("k", b"1")
    by_seq = DeliverPolicy.BY_START_SEQUENCE
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        # A batch direct get: the server answered 408 (seq, batch, max_bytes), or
        # up_to_seq was used as is; a giant int raised ValueError.
        "get_batch seq": lambda: _drain(stream.get_batch(1, seq=TOO_BIG)),
        "get_batch up_to_seq": lambda: _drain(stream.get_batch(1, up_to_seq=TOO_BIG)),
        "get_batch batch": lambda: _drain(stream.get_batch(2**63)),
        "get_batch max_bytes": lambda: _drain(stream.get_batch(1, max_bytes=2**63)),
        "get_batch giant seq": lambda: _drain(stream.get_batch(1, seq=GIANT)),
        "last_msgs seq": lambda: _drain(stream.get_last_msgs_for(f"{name}.>", seq=TOO_BIG)),
        "last_msgs up_to_seq": lambda: _drain(
            stream.get_last_msgs_for(f"{name}.>", up_to_seq=TOO_BIG)
        ),
        "last_msgs batch": lambda: _drain(stream.get_last_msgs_for(f"{name}.>", batch=2**63)),
        # A giant int: ValueError from the check's own message.
        "get_msg": lambda: stream.get_msg(GIANT),
        "purge": lambda: stream.purge(sequence=GIANT),
        "kv.get": lambda: kv.get("k", revision=GIANT),
        "publish": lambda: js.publish(f"{name}.a", b"", expected_last_sequence=GIANT),
        # Refused after two requests (consumer info, stream info).
        "reset": lambda: consumer.reset(TOO_BIG),
        # The server: "invalid JSON" (a bare APIError).
        "consumer opt_start_seq": lambda: stream.create_consumer(
            ConsumerConfig(deliver_policy=by_seq, opt_start_seq=TOO_BIG)
        ),
        "stream first_seq": lambda: js.create_stream(
            StreamConfig(name=unique_name("HBF"), subjects=["hbf.>"], first_seq=TOO_BIG)
        ),
        "source opt_start_seq": lambda: js.create_stream(
            StreamConfig(
                name=unique_name("HBS"),
                subjects=["hbs.>"],
                sources=[StreamSource(name=name, opt_start_seq=-1)],
            )
        ),
        # Made without a word, refused by the server at the first pull.
        "ordered opt_start_seq": lambda: stream.ordered_consumer(
            OrderedConsumerConfig(deliver_policy=by_seq, opt_start_seq=TOO_BIG)
        ),
    }
    await wire.all_refused(calls, "2**6", "digits")
    # The largest are the server's: nothing there, and no 408.
    assert [m async for m in stream.get_batch(1, seq=2**64 - 1)] == []
    assert [m async for m in stream.get_last_msgs_for(f"{name}.>", up_to_seq=2**64 - 1)]


# --------------------------------------------------------------------------- counters


async def _counter(js: JetStreamContext) -> tuple[aiojetstream.Counter, str]:
    name = unique_name("HBC")
    await js.create_stream(
        StreamConfig(
            name=name,
            subjects=[f"{name}.>"],
            allow_msg_counter=True,
            allow_direct=True,
            storage=StorageType.MEMORY,
        )
    )
    await js.api_level()  # known: no feature check sends a request
    return js.counter(name), name


async def test_an_increment_past_the_digit_limit_is_refused(wire: Wire) -> None:
    """Python's int-to-str limit raised a bare ValueError (the server takes any size)."""
    counter, name = await _counter(wire.js)
    for delta in (GIANT, -GIANT):
        error = await wire.refused(partial(counter.add, f"{name}.c", delta))
        assert "int-to-str limit" in str(error)
    assert await counter.add(f"{name}.c", 10**4299) == 10**4299  # 4,300 digits: the limit


async def test_a_total_past_the_digit_limit_is_an_invalid_response(wire: Wire) -> None:
    """Read back it raised a bare ValueError; the increment that made it is reported stored."""
    counter, name = await _counter(wire.js)
    subject = f"{name}.big"
    with digit_limit(0):
        assert await counter.add(subject, GIANT) == GIANT
    with pytest.raises(InvalidResponseError, match="5,001 digits"):
        await counter.get(subject)
    with pytest.raises(InvalidResponseError, match="5,001 digits") as info:
        await counter.add(subject, 1)
    assert "the increment was stored" in " ".join(info.value.__notes__)
    with digit_limit(0):
        assert await counter.get(subject) == GIANT + 1


async def test_an_increment_over_max_payload_keeps_the_connection() -> None:
    """With the digit limit lifted, a header over max_payload made the server close the
    connection (nats-py does not reconnect then)."""
    async with (
        NatsServer(config={"max_payload": 8192}) as server,
        ApiCountingProxy(server.port) as proxy,
    ):
        js = await aiojetstream.connect(proxy.url)
        try:
            w = Wire(proxy, js)
            counter, name = await _counter(js)
            with digit_limit(0):
                await w.refused(lambda: counter.add(f"{name}.c", 10**9000), MaxPayloadExceededError)
            assert js.nc.is_connected
            assert await counter.add(f"{name}.c", 2) == 2
        finally:
            await js.close()


# --------------------------------------------------------------------------- names


BAD_BUCKETS = ["..", "bad bucket", "a.b", ""]


@pytest.mark.parametrize("bucket", BAD_BUCKETS)
async def test_bad_bucket_names_are_invalid_name_errors(wire: Wire, bucket: str) -> None:
    """Building the config raised pydantic's ValidationError; now it is checked when sent,
    as a StreamConfig's name is (InvalidNameError, an InvalidOptionError and a ValueError)."""
    js = wire.js
    kv = KeyValueConfig(bucket=bucket)
    obj = ObjectStoreConfig(bucket=bucket)
    for call in (
        lambda: js.create_key_value(kv),
        lambda: js.update_key_value(kv),
        lambda: js.create_or_update_key_value(kv),
        lambda: js.create_object_store(obj),
        lambda: js.update_object_store(obj),
        lambda: js.key_value(bucket),
        lambda: js.object_store(bucket),
    ):
        error = await wire.refused(call, InvalidNameError, "invalid bucket name")
        assert isinstance(error, InvalidOptionError)
        assert isinstance(error, ValueError)


async def test_mirror_and_source_names_are_invalid_name_errors(wire: Wire) -> None:
    """They were sent: the server answered a bare APIError (10142, 10141)."""
    js = wire.js
    name = unique_name("HBM")
    for config in (
        StreamConfig(name=name, mirror=StreamSource(name="a.b")),
        StreamConfig(name=name, subjects=[f"{name}.>"], sources=[StreamSource(name="a b")]),
    ):
        await wire.refused(partial(js.create_stream, config), InvalidNameError)
        await wire.refused(partial(js.update_stream, config), InvalidNameError)
    for kv in (
        KeyValueConfig(bucket=unique_name("hbm"), mirror=StreamSource(name="a.b")),
        KeyValueConfig(bucket=unique_name("hbm"), sources=[StreamSource(name="KV_a b")]),
    ):
        await wire.refused(partial(js.create_key_value, kv), InvalidNameError, "bucket")


async def test_giant_ints_where_text_belongs_are_typed_errors(wire: Wire) -> None:
    """Refusing a non-string printed it: past 4,300 digits the message itself raised a bare
    ValueError (Python's int-to-str limit) instead of the validator's error."""
    js = wire.js
    name, stream = await _stream(js)
    subject = f"{name}.a"
    consumer = await stream.create_consumer(ConsumerConfig(durable_name="d"))
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("hbt")))
    store = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("hbt")))
    await js.api_level()
    g: Any = GIANT
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "stream": lambda: js.stream(g),
        "delete_stream": lambda: js.delete_stream(g),
        "consumer": lambda: js.consumer(name, g),
        "publish subject": lambda: js.publish(g, b"x"),
        "publish_async subject": lambda: js.publish_async(g, b"x"),
        "headers": lambda: js.publish(subject, b"x", headers=g),
        "header value": lambda: js.publish(subject, b"x", headers={"K": g}),
        "msg_id": lambda: js.publish(subject, b"x", msg_id=g),
        "expected_stream": lambda: js.publish(subject, b"x", expected_stream=g),
        "stream_names": lambda: _drain(js.stream_names(g)),
        "stream_name_by_subject": lambda: js.stream_name_by_subject(g),
        "get_last_msgs_for": lambda: _drain(stream.get_last_msgs_for(g)),
        "get_batch subject": lambda: _drain(stream.get_batch(1, subject=g)),
        "purge subject": lambda: stream.purge(subject=g),
        "pedantic": lambda: js.create_stream(StreamConfig(name=unique_name("HBP")), pedantic=g),
        "unpin": lambda: consumer.unpin(g),
        "kv.put": lambda: kv.put(g, b"x"),
        "kv.get": lambda: kv.get(g),
        "obj.put": lambda: store.put(g, b"x"),
        "obj.put description": lambda: store.put("n", b"x", description=g),
        "obj.put metadata": lambda: store.put("n", b"x", metadata=g),
        "counter.add subject": lambda: js.counter(name).add(g, 1),
        "counter": lambda: _counter_named(js, g),
        "atomic batch": lambda: js.atomic_batch().add(g, b"x"),
    }
    await wire.all_refused(calls)
    for option in ("domain", "api_prefix"):
        with pytest.raises(InvalidOptionError):
            JetStreamContext(js.nc, **{option: g})


async def _counter_named(js: JetStreamContext, name: Any) -> None:
    js.counter(name)


# --------------------------------------------------------------------------- waits


async def test_odd_waits_are_refused_before_sending(wire: Wire) -> None:
    js = wire.js
    name, stream = await _stream(js)
    subject = f"{name}.a"
    await js.publish(subject, b"1")
    consumer = await stream.create_consumer(ConsumerConfig(durable_name="d"))
    ordered = await stream.ordered_consumer()  # (its consumer is made at its first pull)
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("hbw")))
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        # inf was refused, 1e300 (a hold, a timeout) was taken as "forever".
        "hold_when_full": lambda: js.publish(subject, b"x", hold_when_full=1e300),
        "async hold_when_full": lambda: js.publish_async(subject, b"x", hold_when_full=1e300),
        "publish timeout": lambda: js.publish(subject, b"x", timeout=1e300),
        "kv.get timeout": lambda: kv.get("k", timeout=1e300),
        "get_batch timeout": lambda: _drain(stream.get_batch(1, timeout=1e300)),
        "publish_async_complete": lambda: js.publish_async_complete(1e300),
        # A giant int raised OverflowError.
        "publish giant timeout": lambda: js.publish(subject, b"x", timeout=HUGE),
        "hold giant": lambda: js.publish(subject, b"x", hold_when_full=HUGE),
        "fetch expires": lambda: consumer.fetch(1, expires=HUGE),
        "ordered next expires": lambda: ordered.next(expires=HUGE),
        # A batch direct get's timeout took NaN and infinity (never timed out).
        "get_batch nan": lambda: _drain(stream.get_batch(1, timeout=math.nan)),
        "get_batch inf": lambda: _drain(stream.get_batch(1, timeout=math.inf)),
        # A negative expiry of an ordered next was taken as 1 s.
        "ordered next negative": lambda: ordered.next(expires=-5),
    }
    await wire.all_refused(calls, "NaN", "at most", "negative")
    # NaN said "must not be negative".
    error = await wire.refused(lambda: js.publish(subject, b"x", hold_when_full=math.nan))
    assert "NaN" in str(error)
    assert "negative" not in str(error)


async def test_acknowledgement_waits_and_delays(wire: Wire) -> None:
    """double_ack took inf, 1e300 and giant ints (NaN said "must be a positive number");
    nak of a giant int raised ValueError from its own message."""
    js = wire.js
    name, stream = await _stream(js)
    await js.publish(f"{name}.a", b"1")
    consumer = await stream.create_consumer(ConsumerConfig(durable_name="d"))
    [msg] = await (await consumer.fetch(1, expires=5)).collect()
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "double_ack inf": lambda: msg.double_ack(timeout=math.inf),
        "double_ack 1e300": lambda: msg.double_ack(timeout=1e300),
        "double_ack giant": lambda: msg.double_ack(timeout=HUGE),
        "double_ack nan": lambda: msg.double_ack(timeout=math.nan),
        "nak giant": lambda: msg.nak(GIANT),
        "nak negative giant": lambda: msg.nak(-GIANT),
    }
    await wire.all_refused(calls, "NaN", "at most", "digits")
    await msg.double_ack(timeout=10)  # still the message's first acknowledgement


@pytest.mark.parametrize(
    "options",
    [
        {"publish_async_timeout": math.nan},
        {"publish_async_timeout": -1},
        {"publish_async_timeout": 1e300},
        # A timedelta raised TypeError from float() (a duration is taken now: not a
        # negative one); float("5 s") raised ValueError, and float("5") took it (a
        # duration string now, as every timeout's).
        {"publish_async_timeout": timedelta(seconds=-5)},
        {"publish_async_timeout": HUGE},  # OverflowError
        {"publish_async_timeout": "5 s"},
        {"publish_async_timeout": "0s"},
        {"publish_async_max_pending": math.nan},  # the window never filled
        {"publish_async_max_pending": 1.5},
        {"publish_async_max_pending": GIANT},  # ValueError from its message
    ],
    ids=lambda options: f"{next(iter(options))}={type(next(iter(options.values()))).__name__}",
)
async def test_publish_async_options_are_checked(js: JetStreamContext, options: Any) -> None:
    with pytest.raises(InvalidOptionError, match=next(iter(options))):
        JetStreamContext(js.nc, **options)


# --------------------------------------------------------------------------- links


async def _store(js: JetStreamContext) -> aiojetstream.ObjectStore:
    return await js.create_object_store(ObjectStoreConfig(bucket=unique_name("hbo")))


async def test_a_link_to_an_object_deleted_since_is_refused(js: JetStreamContext) -> None:
    """The info was read before the delete: a dangling link was stored."""
    store = await _store(js)
    stale = await store.put("target", b"data")
    await store.delete("target")
    with pytest.raises(ObjectLinkError, match="deleted"):
        await store.add_link("link", stale)
    with pytest.raises(ObjectNotFoundError):
        await store.info("link")  # nothing stored
    # A live target is linked as before.
    other = await store.put("other", b"o")
    assert (await store.add_link("fine", other)).is_link
    assert await store.get_bytes("fine") == b"o"


async def test_a_link_to_an_object_that_became_a_link_is_refused(js: JetStreamContext) -> None:
    """A link to a link (refused when the info says so) was stored from an older info."""
    store = await _store(js)
    other = await store.put("other", b"o")
    old = await store.put("was-object", b"w")
    await store.delete("was-object")
    await store.add_link("was-object", other)
    with pytest.raises(ObjectLinkError, match="link itself"):
        await store.add_link("link", old)
    with pytest.raises(ObjectNotFoundError):
        await store.info("link")


async def test_links_into_a_bucket_that_is_gone_are_refused(js: JetStreamContext) -> None:
    """A link to an object of a deleted bucket, or to a missing bucket, read only as
    BucketNotFoundError."""
    store = await _store(js)
    gone = await _store(js)
    remote = await gone.put("x", b"x")
    await js.delete_object_store(gone.bucket)
    with pytest.raises(ObjectLinkError, match="bucket"):
        await store.add_link("link", remote)
    with pytest.raises(ObjectLinkError, match="does not exist"):
        await store.add_bucket_link("dir", gone)
    with pytest.raises(ObjectLinkError, match="does not exist"):
        await store.add_bucket_link("dir2", unique_name("nobucket"))
    for name in ("link", "dir", "dir2"):
        with pytest.raises(ObjectNotFoundError):
            await store.info(name)


async def test_a_listing_answered_with_the_same_page_again_ends(nats_server: NatsServer) -> None:
    """A listing followed ``offset`` as long as ``total`` said there was more: an API
    responder (a broken proxy, a hostile server) answering every offset with the
    same page and ``total`` 10**12 was listed without end (the command line kept it
    all: 1.5 GB in 17 s). The same page again is an InvalidResponseError."""
    prefix = "HOSTILE.API"
    page = [f"S{i}" for i in range(1024)]
    answered: list[int] = []

    js = await aiojetstream.connect(nats_server.url, api_prefix=prefix)
    try:

        async def answer(msg: Any) -> None:
            answered.append(1)
            offset = json.loads(msg.data)["offset"]  # echoed, as nats-server does
            body = {"total": 10**12, "offset": offset, "limit": 1024, "streams": page}
            await msg.respond(json.dumps(body).encode())

        sub = await js.nc.subscribe(f"{prefix}.STREAM.NAMES", cb=answer)
        try:
            names: list[str] = []

            async def listing() -> None:
                async for name in js.stream_names():
                    names.append(name)

            with pytest.raises(InvalidResponseError, match="the page before it again"):
                await asyncio.wait_for(listing(), 30)  # without end: TimeoutError, no hang
            assert names == page
            assert len(answered) == 2
        finally:
            await sub.unsubscribe()
    finally:
        await js.close()


async def test_a_listing_answered_for_another_offset_ends(nats_server: NatsServer) -> None:
    """An answer for no offset asked for (nats-server echoes the offset it was asked
    for; here every answer says 0, with a new page each time, so no page repeats) is
    refused at once, not listed without end."""
    prefix = "HOSTILE.API"
    answered: list[int] = []
    js = await aiojetstream.connect(nats_server.url, api_prefix=prefix)
    try:

        async def answer(msg: Any) -> None:
            answered.append(json.loads(msg.data)["offset"])
            page = [f"P{len(answered)}-{i}" for i in range(1024)]
            body = {"total": 10**12, "offset": 0, "limit": 1024, "streams": page}
            await msg.respond(json.dumps(body).encode())

        sub = await js.nc.subscribe(f"{prefix}.STREAM.NAMES", cb=answer)
        try:

            async def listing() -> None:
                async for _ in js.stream_names():
                    pass

            with pytest.raises(InvalidResponseError, match="with the page at offset 0"):
                await asyncio.wait_for(listing(), 30)  # without end: TimeoutError, no hang
            assert answered == [0, 1023]  # (a page after the first: from one entry early)
        finally:
            await sub.unsubscribe()
    finally:
        await js.close()


async def test_a_listing_that_shrank_meanwhile_ends(nats_server: NatsServer) -> None:
    """nats-server clamps the offset it echoes to its count: streams deleted during a
    listing get the next request an empty page at a lower offset. That is the end
    of the listing, not an answer for another offset."""
    prefix = "SHRINK.API"
    first = [f"S{i}" for i in range(1024)]
    js = await aiojetstream.connect(nats_server.url, api_prefix=prefix)
    try:

        async def answer(msg: Any) -> None:
            offset = json.loads(msg.data)["offset"]
            if offset == 0:
                body = {"total": 2000, "offset": 0, "limit": 1024, "streams": first}
            else:  # 1,500 streams deleted meanwhile: clamped to the 500 left
                body = {"total": 500, "offset": 500, "limit": 1024, "streams": []}
            await msg.respond(json.dumps(body).encode())

        sub = await js.nc.subscribe(f"{prefix}.STREAM.NAMES", cb=answer)
        try:
            names = [name async for name in js.stream_names()]
            assert names == first
        finally:
            await sub.unsubscribe()
    finally:
        await js.close()


_FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seq", -1),  # was accepted as sequence -1
        ("seq", 1.7),  # was read as 1
        ("seq", None),  # was a bare TypeError
        ("subject", None),  # was a pydantic ValidationError
        ("time", 5),  # was a bare TypeError
        ("data", 5),  # was a bare TypeError
    ],
)
async def test_a_malformed_message_get_reply_is_an_invalid_response(
    nats_server: NatsServer, field: str, value: object
) -> None:
    """A message get without direct gets, answered by an API responder on a real server."""
    prefix = "BADGET.API"
    info = json.loads((_FIXTURES / "stream_info.json").read_text())
    info["config"]["allow_direct"] = False
    name = info["config"]["name"]
    message = {"subject": "orders.us.1", "seq": 1, "data": "eA==", "time": "2026-11-21T06:30:29Z"}
    js = await aiojetstream.connect(nats_server.url, api_prefix=prefix)
    try:

        async def answer(msg: Any) -> None:
            if ".STREAM.INFO." in msg.subject:
                await msg.respond(json.dumps(info).encode())
            else:
                await msg.respond(json.dumps({"message": {**message, field: value}}).encode())

        sub = await js.nc.subscribe(f"{prefix}.STREAM.>", cb=answer)
        try:
            stream = await js.stream(name)
            with pytest.raises(InvalidResponseError, match=field if field != "data" else "text"):
                await stream.get_msg(1)
            with pytest.raises(InvalidResponseError):
                await stream.get_last_msg_for_subject("orders.us.1")
        finally:
            await sub.unsubscribe()
    finally:
        await js.close()


@pytest.mark.parametrize(
    "page",
    [
        {"total": 1, "offset": 0, "streams": "ABC"},  # was listed as A, B, C
        {"total": 2, "offset": 0, "streams": [1, None]},  # was listed as '1', 'None'
        {"total": "x", "offset": 0, "streams": ["A"]},  # was a bare ValueError
        {"total": 5, "offset": 0, "streams": ["A"], "missing": 3},  # a bare TypeError
    ],
)
async def test_a_malformed_list_page_is_an_invalid_response(
    nats_server: NatsServer, page: dict[str, Any]
) -> None:
    prefix = "BADPAGE.API"
    js = await aiojetstream.connect(nats_server.url, api_prefix=prefix)
    try:

        async def answer(msg: Any) -> None:
            await msg.respond(json.dumps(page).encode())

        sub = await js.nc.subscribe(f"{prefix}.STREAM.NAMES", cb=answer)
        try:
            with pytest.raises(InvalidResponseError):
                [name async for name in js.stream_names()]
        finally:
            await sub.unsubscribe()
    finally:
        await js.close()

"""Typed payloads (issue 28) against a real nats-server: models and codecs in, TypedMsg out."""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, assert_type

import pytest
from pydantic import BaseModel, ConfigDict, Field

from aiojetstream import (
    AckPolicy,
    Codec,
    Consumer,
    ConsumerConfig,
    FetchTimeoutError,
    InvalidHeaderError,
    InvalidOptionError,
    JetStreamContext,
    JetStreamError,
    JsonCodec,
    KeyValueConfig,
    Msg,
    ObjectStoreConfig,
    PayloadValidationError,
    RawCodec,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    TypedMsg,
)
from aiojetstream._consumer import MessageBatch, TypedMessagesContext
from aiojetstream._ordered import OrderedBatch
from aiojetstream._typed import TypedMessageBatch
from helpers import unique_name, wait_until
from typed_shapes import SHAPES

T = TypeVar("T")
STEP = 10.0
JSON_TYPE = "application/json"


class Order(BaseModel):
    id: int
    item: str
    qty: int = 1


class CsvCodec:
    """A toy codec: a tuple of strings as one comma-separated line."""

    content_type = "text/csv"

    def encode(self, value: Any) -> bytes:
        return ",".join(value).encode()

    def decode(self, data: bytes, type_: type[T]) -> T:
        if not data:
            raise ValueError("empty line")
        return type_(data.decode().split(","))  # type: ignore[call-arg]


async def make(js: JetStreamContext, **cfg: Any) -> tuple[str, Consumer]:
    stream = unique_name("TYPED")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.MEMORY)
    )
    config = ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT, **cfg)
    return stream, await js.create_consumer(stream, config)


async def test_publish_a_model_and_read_it_back_typed(js: JetStreamContext) -> None:
    stream, consumer = await make(js)
    await js.publish(f"{stream}.a", Order(id=1, item="book"))
    fut = await js.publish_async(f"{stream}.b", Order(id=2, item="pen", qty=3))
    await fut
    summary = await js.publish_many(
        f"{stream}.c", [Order(id=3, item="ink"), b'{"id":4,"item":"x"}']
    )
    assert summary.stored == 2
    await js.publish(f"{stream}.d", Order(id=5, item="cup"), headers={"content-type": "x/y"})
    got: list[TypedMsg[Order]] = []
    async with consumer.messages(model=Order) as it:
        async for msg in it:
            assert isinstance(msg, Msg)
            got.append(msg)
            await msg.ack()
            if len(got) == 5:
                break
    assert [m.value for m in got] == [
        Order(id=1, item="book"),
        Order(id=2, item="pen", qty=3),
        Order(id=3, item="ink"),
        Order(id=4, item="x"),
        Order(id=5, item="cup"),
    ]
    assert [(m.headers or {}).get("Content-Type") for m in got[:3]] == ["application/json"] * 3
    assert got[3].headers is None  # bytes: as they were
    assert got[4].headers == {"content-type": "x/y"}  # the caller's one is kept, none added
    assert got[0].data == b'{"id":1,"item":"book","qty":1}'
    assert got[0].decode(Order) == got[0].value
    assert got[1].metadata.sequence.stream == 2
    assert "TypedMsg" in repr(got[0])


class Aliased(BaseModel):
    order_id: int = Field(alias="orderId")
    note: str = ""


class WrittenAs(BaseModel):
    order_id: int = Field(serialization_alias="orderId")  # read by name


class ByName(BaseModel):
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=False)
    order_id: int = Field(alias="orderId")


async def test_a_model_with_aliases_reads_back(js: JetStreamContext) -> None:
    """Written by field name, a model with Field(alias=...) did not validate when read
    back (model_validate_json takes aliases): every such message was terminated. It
    goes out by alias, unless the model validates by name only."""
    stream, consumer = await make(js)
    await js.publish(f"{stream}.a", Aliased(orderId=7, note="n"))
    await js.publish(f"{stream}.b", ByName(order_id=8))
    first = await consumer.next(expires=STEP, model=Aliased)
    assert first.data == b'{"orderId":7,"note":"n"}'
    assert first.value == Aliased(orderId=7, note="n")
    await first.ack()
    second = await consumer.next(expires=STEP, model=ByName)
    assert second.data == b'{"order_id":8}'
    assert second.value == ByName(order_id=8)
    await second.ack()
    # A serialization alias alone is read by name: written by name (pydantic's default).
    await js.publish(f"{stream}.c", WrittenAs(order_id=10))
    third = await consumer.next(expires=STEP, model=WrittenAs)
    assert third.data == b'{"order_id":10}'
    assert third.value == WrittenAs(order_id=10)
    await third.ack()
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("typed")))
    await kv.put("k", Aliased(orderId=9))
    assert (await kv.get("k")).decode(Aliased) == Aliased(orderId=9)


@pytest.mark.parametrize("name", list(SHAPES))
async def test_nested_aliases_read_back(js: JetStreamContext, name: str) -> None:
    """A model with no alias of its own but aliased models below it (a list of them, a
    generic, a root model, a discriminated union, an alias_generator base class) was
    written by field name and did not validate when read back: every such message was
    terminated. Each now reads back what it is written as."""
    shape = SHAPES[name]
    stream, consumer = await make(js)
    await js.publish(f"{stream}.a", shape.example)
    async with consumer.messages(model=shape.cls, on_invalid="raise") as it:
        msg = await it.next()
        assert msg.value == shape.example
        await msg.double_ack()  # confirmed by the server: nothing left pending
    info = await consumer.info()
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)


class NoSchema:
    """A class pydantic has no schema for."""

    def __init__(self, x: object) -> None:
        self.x = x


async def test_a_type_pydantic_cannot_validate_is_refused_before_sending(
    js: JetStreamContext,
) -> None:
    """model= of a class pydantic has no schema for was accepted, then every message
    failed with PydanticSchemaGenerationError (a TypeError, not a payload error):
    consume logged "handler raised" for each and the message came back for ever."""
    stream, consumer = await make(js)
    await js.publish(f"{stream}.a", b'{"x": 1}')
    refused = pytest.raises(InvalidOptionError, match="cannot validate JSON as NoSchema")
    with refused:
        consumer.messages(model=NoSchema)
    with refused:
        await consumer.consume(print, model=NoSchema)
    with refused:
        await consumer.fetch(1, model=NoSchema)
    with refused:
        await consumer.next(model=NoSchema)
    with refused:
        consumer.messages(model=NoSchema, codec=JsonCodec())
    ordered = await js.ordered_consumer(stream)
    with refused:
        ordered.messages(model=NoSchema)
    with refused:
        await ordered.consume(print, model=NoSchema)
    assert ordered.name is None  # no consumer was created
    info = await consumer.info()
    assert (info.delivered.consumer_seq, info.num_pending) == (0, 1)  # nothing was pulled
    msg = await consumer.next(expires=STEP)
    with refused:
        msg.decode(NoSchema)
    with refused:
        (await (await js.stream(stream)).get_msg(1)).decode(NoSchema)
    assert msg.decode(NoSchema, codec=CsvCodec()).x == ['{"x": 1}']  # a codec decides
    await msg.ack()


async def test_str_is_refused_with_how_to_publish_text(js: JetStreamContext) -> None:
    stream, _ = await make(js)
    for call in (
        lambda: js.publish(f"{stream}.a", "hello"),
        lambda: js.publish_async(f"{stream}.a", "hello"),
        lambda: js.publish_many(f"{stream}.a", ["hello"]),
    ):
        with pytest.raises(InvalidOptionError, match=r"got str.*\.encode\(\)"):
            await call()
    with pytest.raises(InvalidOptionError, match="got int"):
        await js.publish(f"{stream}.a", 5)
    with pytest.raises(InvalidOptionError, match="got the class Order"):
        await js.publish(f"{stream}.a", Order)  # the class, not a model
    assert (await (await js.stream(stream)).info()).state.messages == 0


class _NoSchema:
    """A value pydantic has no serializer for (an arbitrary type)."""


class Unserializable(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    thing: _NoSchema


class FailingCodec:
    """A codec whose encode raises its own error."""

    def encode(self, value: Any) -> bytes:
        raise TypeError("cannot encode this")

    def decode(self, data: bytes, type_: type[T]) -> T:
        raise ValueError("never called")


@pytest.mark.parametrize("instrumented", [False, True])
async def test_encode_failures_are_invalid_option_errors_before_sending(
    js: JetStreamContext, instrumented: bool
) -> None:
    """A model pydantic cannot serialize, or a codec whose encode raises: InvalidOptionError
    (the original as its cause), for every publish path, and nothing is sent (they came
    back as PydanticSerializationError / the codec's TypeError)."""
    if instrumented:
        pytest.importorskip("opentelemetry.sdk")
        from opentelemetry.sdk.trace import TracerProvider

        from aiojetstream.otel import instrument

        instrument(js, tracer_provider=TracerProvider())
    stream, _ = await make(js)
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("kv")))
    model = Unserializable(thing=_NoSchema())
    codec = FailingCodec()
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("publish", lambda: js.publish(f"{stream}.a", model)),
        ("publish_async", lambda: js.publish_async(f"{stream}.a", model)),
        ("publish_many", lambda: js.publish_many(f"{stream}.a", [Order(id=1, item="x"), model])),
        ("kv.put", lambda: kv.put("k", model)),
        ("publish codec", lambda: js.publish(f"{stream}.a", 1, codec=codec)),
        ("publish_async codec", lambda: js.publish_async(f"{stream}.a", 1, codec=codec)),
        ("publish_many codec", lambda: js.publish_many(f"{stream}.a", [1, 2], codec=codec)),
        ("kv.put codec", lambda: kv.put("k", 1, codec=codec)),
    ]
    for name, call in calls:
        with pytest.raises(InvalidOptionError) as info:
            await call()
        if "codec" in name:
            assert "FailingCodec.encode failed" in str(info.value), name
            assert isinstance(info.value.__cause__, TypeError), name
        else:
            assert "could not encode the Unserializable payload" in str(info.value), name
            assert type(info.value.__cause__).__name__ == "PydanticSerializationError", name
    assert (await (await js.stream(stream)).info()).state.messages == 0
    assert (await kv.status()).values == 0


async def test_bad_headers_with_a_model_are_header_errors(js: JetStreamContext) -> None:
    """With a model or ``codec=`` payload, headers that are not a mapping of str keys
    raised a bare AttributeError (the Content-Type merge ran before the check)."""
    stream, _ = await make(js)
    order = Order(id=1, item="x", qty=1)
    bad: list[Any] = [{1: "x"}, [("K", "v")], {b"K": "v"}]
    for headers in bad:
        with pytest.raises(InvalidHeaderError):
            await js.publish(f"{stream}.a", order, headers=headers)
        with pytest.raises(InvalidHeaderError):
            await js.publish(f"{stream}.a", b"x", codec=RawCodec(), headers=headers)
    assert (await (await js.stream(stream)).info()).state.messages == 0


async def test_decode_failure_carries_subject_sequence_and_errors(js: JetStreamContext) -> None:
    stream, consumer = await make(js)
    await js.publish(f"{stream}.bad", b'{"id":"nope"}')
    msg = await consumer.next(expires=5)
    with pytest.raises(PayloadValidationError) as info:
        msg.decode(Order)
    err = info.value
    assert isinstance(err, JetStreamError)
    assert (err.subject, err.sequence) == (f"{stream}.bad", 1)
    assert {e["loc"][0] for e in err.errors} == {"id", "item"}
    assert f"{stream}.bad" in str(err)
    assert "Order" in str(err)
    raw = await (await js.stream(stream)).get_msg(1)
    with pytest.raises(PayloadValidationError) as info:
        raw.decode(Order)
    assert info.value.sequence == 1
    await msg.ack()


async def test_on_invalid_term_sends_the_reason(
    js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    stream, consumer = await make(js)
    advisories: list[dict[str, Any]] = []

    async def advisory(m: Any) -> None:
        advisories.append(json.loads(m.data))

    sub = await js.nc.subscribe(
        f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.worker", cb=advisory
    )
    await js.nc.flush()
    await js.publish(f"{stream}.a", b"not json")
    await js.publish(f"{stream}.a", Order(id=2, item="ok"))
    with caplog.at_level(logging.WARNING, logger="aiojetstream"):
        async with consumer.messages(model=Order) as it:
            msg = await asyncio.wait_for(it.next(), STEP)
            assert msg.value.id == 2
            await msg.double_ack()  # confirmed: the info below counts it (a plain ack raced it)
    await wait_until(lambda: bool(advisories), timeout=STEP)
    await sub.unsubscribe()
    assert advisories[0]["stream_seq"] == 1
    assert "not a valid Order" in advisories[0]["reason"]
    info = await consumer.info()
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)
    assert "terminated" in caplog.text


async def test_on_invalid_nak_redelivers(js: JetStreamContext) -> None:
    stream, consumer = await make(js, max_deliver=3)
    await js.publish(f"{stream}.a", b"{}")
    async with consumer.messages(model=Order, on_invalid="nak") as it:
        taking = asyncio.ensure_future(it.next())  # naks each delivery, up to max_deliver

        async def delivered_thrice() -> bool:
            info = await consumer.info()
            return info.num_redelivered >= 1 and info.num_ack_pending == 0

        await wait_until(delivered_thrice, timeout=STEP)
        taking.cancel()
    info = await consumer.info()
    assert (info.delivered.stream_seq, info.num_redelivered) == (1, 1)


async def test_on_invalid_raise_leaves_the_message_unacked(js: JetStreamContext) -> None:
    stream, consumer = await make(js)
    await js.publish(f"{stream}.a", b'{"id": 1}')
    await js.publish(f"{stream}.a", Order(id=2, item="ok"))
    async with consumer.messages(model=Order, on_invalid="raise") as it:
        with pytest.raises(PayloadValidationError) as info:
            await asyncio.wait_for(it.next(), STEP)
        assert (info.value.subject, info.value.sequence) == (f"{stream}.a", 1)
        ok = await asyncio.wait_for(it.next(), STEP)  # iteration goes on
        assert ok.value.id == 2
        await ok.double_ack()  # confirmed: the info below counts it (a plain ack raced it)
    info2 = await consumer.info()
    assert info2.num_ack_pending == 1


async def test_consume_typed_and_its_failure_options(js: JetStreamContext) -> None:
    stream, consumer = await make(js)
    await js.publish(f"{stream}.a", Order(id=1, item="a"))
    await js.publish(f"{stream}.a", b"[]")
    await js.publish(f"{stream}.a", Order(id=3, item="c"))
    seen: list[Order] = []

    async def handle(msg: TypedMsg[Order]) -> None:
        seen.append(msg.value)
        await msg.ack()

    async with await consumer.consume(handle, model=Order):
        await wait_until(lambda: len(seen) == 2, timeout=STEP)
    assert [o.id for o in seen] == [1, 3]
    await wait_until(lambda: True)
    info = await consumer.info()
    assert info.num_ack_pending == 0  # the bad one was terminated

    stream2, consumer2 = await make(js)
    await js.publish(f"{stream2}.a", b"oops")
    errors: list[JetStreamError] = []
    ctx = await consumer2.consume(
        lambda m: seen.append(m.value), model=Order, on_invalid="raise", error_handler=errors.append
    )
    error = await asyncio.wait_for(ctx.closed(), STEP)
    assert isinstance(error, PayloadValidationError)
    assert errors == [error]
    assert (await consumer2.info()).num_ack_pending == 1
    with pytest.raises(InvalidOptionError, match="on_invalid"):
        await consumer2.consume(handle, model=Order, on_invalid="drop")  # type: ignore[call-overload]


async def test_codec_protocol_with_a_toy_codec(js: JetStreamContext) -> None:
    codec = CsvCodec()
    assert isinstance(codec, Codec)
    stream, consumer = await make(js)
    await js.publish(f"{stream}.a", ("a", "b"), codec=codec)
    await js.publish_many(f"{stream}.a", [("c",), ("d", "e")], codec=codec)
    await js.publish(f"{stream}.a", b"", codec=RawCodec())  # invalid for the csv codec
    await js.publish(f"{stream}.a", Order(id=9, item="z"), codec=JsonCodec())
    got: list[TypedMsg[list[str]]] = []
    async with consumer.messages(model=list, codec=codec) as it:
        async for msg in it:
            got.append(msg)
            await msg.ack()
            if len(got) == 4:
                break
    assert [m.value for m in got] == [
        ["a", "b"],
        ["c"],
        ["d", "e"],
        ['{"id":9', '"item":"z"', '"qty":1}'],
    ]
    assert got[0].headers == {"Content-Type": "text/csv"}
    assert got[3].headers == {"Content-Type": "application/json"}
    assert got[0].decode(list, codec) == ["a", "b"]
    assert got[3].decode(Order, JsonCodec()) == Order(id=9, item="z")
    assert got[3].decode(bytes, RawCodec()) == got[3].data
    assert got[3].decode(dict[str, int | str]) == {"id": 9, "item": "z", "qty": 1}
    with pytest.raises(InvalidOptionError, match="got str"):
        await js.publish(f"{stream}.a", "x", codec=RawCodec())


async def test_kv_round_trip(js: JetStreamContext) -> None:
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("kv"), history=5))
    rev = await kv.put("o1", Order(id=1, item="a"))
    entry = await kv.get("o1")
    assert entry.revision == rev
    assert entry.decode(Order) == Order(id=1, item="a")
    rev2 = await kv.update("o1", Order(id=1, item="b"), rev)
    assert (await kv.get("o1")).decode(Order).item == "b"
    await kv.create("o2", Order(id=2, item="c"))
    assert (await kv.get("o2")).decode(Order).id == 2
    await kv.put("csv", ("x", "y"), codec=CsvCodec())
    assert (await kv.get("csv")).decode(list, CsvCodec()) == ["x", "y"]
    await kv.put("bad", b"{")
    with pytest.raises(PayloadValidationError) as info:
        (await kv.get("bad")).decode(Order)
    assert info.value.subject == f"$KV.{kv.bucket}.bad"
    assert info.value.sequence == rev2 + 3
    with pytest.raises(InvalidOptionError, match=r"\.encode\(\)"):
        await kv.put("s", "text")


async def test_object_store_round_trip(js: JetStreamContext) -> None:
    store = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("OB")))
    info = await store.put("order", Order(id=7, item="obj"))
    assert info.headers == {"Content-Type": ["application/json"]}
    data = await store.get_bytes("order")
    assert Order.model_validate_json(data) == Order(id=7, item="obj")
    await store.put("csv", ("p", "q"), codec=CsvCodec())
    assert await store.get_bytes("csv") == b"p,q"


async def test_kv_create_and_update_send_the_content_type_put_sends(js: JetStreamContext) -> None:
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("kvct"), history=5))
    stored = await js.stream(f"KV_{kv.bucket}")

    async def content_type(revision: int) -> str | None:
        return ((await stored.get_msg(revision)).headers or {}).get("Content-Type")

    put = await kv.put("p", Order(id=1, item="put"))
    created = await kv.create("c", Order(id=2, item="create"))
    updated = await kv.update("c", Order(id=2, item="update"), created)
    csv = await kv.create("csv", ("x", "y"), codec=CsvCodec())
    await kv.delete("csv")
    recreated = await kv.create("csv", ("z",), codec=CsvCodec())  # over a delete marker
    raw = await kv.create("raw", b"{}")
    assert [await content_type(r) for r in (put, created, updated)] == [JSON_TYPE] * 3
    assert [await content_type(r) for r in (csv, recreated)] == ["text/csv"] * 2
    assert await content_type(raw) is None  # bytes: as they were
    assert (await kv.get("c")).decode(Order).item == "update"
    assert (await kv.get("csv")).decode(list, CsvCodec()) == ["z"]


async def publish_mixed(js: JetStreamContext, stream: str) -> None:
    """Order 1, an invalid payload (sequence 2), Order 3."""
    await js.publish(f"{stream}.a", Order(id=1, item="a"))
    await js.publish(f"{stream}.a", b'{"id": "two"}')
    await js.publish(f"{stream}.a", Order(id=3, item="c"))


async def terminated_advisories(js: JetStreamContext, stream: str) -> list[dict[str, Any]]:
    """A list the server's MSG_TERMINATED advisories of ``stream``'s consumer fill."""
    seen: list[dict[str, Any]] = []

    async def advisory(m: Any) -> None:
        seen.append(json.loads(m.data))

    await js.nc.subscribe(
        f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.worker", cb=advisory
    )
    await js.nc.flush()
    return seen


async def test_fetch_typed_terms_the_invalid_and_hands_out_the_rest(js: JetStreamContext) -> None:
    stream, consumer = await make(js)
    advisories = await terminated_advisories(js, stream)
    await publish_mixed(js, stream)
    batch = await consumer.fetch(3, expires=STEP, model=Order)
    assert_type(batch, TypedMessageBatch[Order])
    got: list[TypedMsg[Order]] = []
    async with batch:
        async for msg in batch:
            assert_type(msg, TypedMsg[Order])
            got.append(msg)
            await msg.double_ack()
    assert [m.value.id for m in got] == [1, 3]
    assert batch.done
    await wait_until(lambda: bool(advisories), timeout=STEP)
    assert advisories[0]["stream_seq"] == 2
    assert "not a valid Order" in advisories[0]["reason"]
    assert (await consumer.info()).num_ack_pending == 0

    stream2, consumer2 = await make(js)  # collect() settles them the same way
    await publish_mixed(js, stream2)
    collected = await (await consumer2.fetch(3, expires=STEP, model=Order)).collect()
    assert_type(collected, list[TypedMsg[Order]])
    assert [m.value for m in collected] == [Order(id=1, item="a"), Order(id=3, item="c")]
    for msg in collected:
        await msg.double_ack()
    assert (await consumer2.info()).num_ack_pending == 0  # the invalid one was terminated


async def test_fetch_typed_nak_redelivers_the_invalid(js: JetStreamContext) -> None:
    stream, consumer = await make(js)
    await publish_mixed(js, stream)
    batch = await consumer.fetch(3, expires=STEP, model=Order, on_invalid="nak")
    got = await batch.collect()
    assert [m.value.id for m in got] == [1, 3]
    again = await consumer.next(expires=STEP)  # the nak'ed one, delivered a second time
    assert (again.metadata.sequence.stream, again.metadata.num_delivered) == (2, 2)
    await again.term()


async def test_fetch_typed_raise_hands_out_the_messages_around_it(js: JetStreamContext) -> None:
    stream, consumer = await make(js)
    await publish_mixed(js, stream)
    batch = await consumer.fetch(3, expires=STEP, model=Order, on_invalid="raise")
    assert [m.value.id for m in await batch.collect()] == [1]  # those before it
    with pytest.raises(PayloadValidationError) as info:
        await batch.collect()  # then the error
    assert (info.value.subject, info.value.sequence) == (f"{stream}.a", 2)
    assert [m.value.id for m in await batch.collect()] == [3]  # then the rest
    assert await batch.collect() == []
    assert batch.done
    assert (await consumer.info()).num_ack_pending == 3  # nothing settled: the user's to ack

    stream2, consumer2 = await make(js)  # iteration: raises, then goes on
    await publish_mixed(js, stream2)
    iterated = await consumer2.fetch(3, expires=STEP, model=Order, on_invalid="raise")
    first = await anext(iterated)
    with pytest.raises(PayloadValidationError):
        await anext(iterated)
    third = await anext(iterated)
    assert (first.value.id, third.value.id) == (1, 3)
    await iterated.aclose()
    for bad in ("drop", "TERM"):
        with pytest.raises(InvalidOptionError, match="on_invalid"):
            await consumer2.fetch(1, model=Order, on_invalid=bad)  # type: ignore[call-overload]


async def test_next_typed(js: JetStreamContext) -> None:
    stream, consumer = await make(js)
    await publish_mixed(js, stream)
    first = await consumer.next(expires=STEP, model=Order)
    assert_type(first, TypedMsg[Order])
    assert first.value == Order(id=1, item="a")
    await first.ack()
    # The invalid one is terminated and the next pulled within the same expires.
    third = await consumer.next(expires=STEP, model=Order)
    assert third.value.id == 3
    assert third.metadata.sequence.stream == 3
    await third.double_ack()
    assert (await consumer.info()).num_ack_pending == 0

    stream2, consumer2 = await make(js)
    advisories = await terminated_advisories(js, stream2)
    await js.publish(f"{stream2}.a", b"[]")
    await js.publish(f"{stream2}.a", b"{}")
    with pytest.raises(PayloadValidationError) as info:
        await consumer2.next(expires=STEP, model=Order, on_invalid="raise")
    assert info.value.sequence == 1  # left unacknowledged
    # Nothing valid before expires: the second is terminated, then a FetchTimeoutError.
    with pytest.raises(FetchTimeoutError, match="terminated"):
        await consumer2.next(expires=1, model=Order)
    await wait_until(lambda: bool(advisories), timeout=STEP)
    assert [a["stream_seq"] for a in advisories] == [2]
    assert (await consumer2.info()).num_ack_pending == 1


async def test_ordered_consumer_typed_messages_raise_and_go_on(js: JetStreamContext) -> None:
    stream, _ = await make(js)
    await publish_mixed(js, stream)
    ordered = await js.ordered_consumer(stream)
    async with ordered.messages(model=Order) as it:
        assert_type(it, TypedMessagesContext[Order])
        first = await asyncio.wait_for(it.next(), STEP)
        assert_type(first, TypedMsg[Order])
        with pytest.raises(PayloadValidationError) as info:
            await asyncio.wait_for(it.next(), STEP)
        assert (info.value.subject, info.value.sequence) == (f"{stream}.a", 2)
        third = await asyncio.wait_for(it.next(), STEP)  # the cursor moved past it
    assert (first.value.id, third.value.id) == (1, 3)
    assert ordered.cursor == 3


async def test_ordered_consumer_refuses_term_and_nak_before_sending(js: JetStreamContext) -> None:
    stream, _ = await make(js)
    ordered = await js.ordered_consumer(stream)
    for on_invalid in ("term", "nak"):
        with pytest.raises(InvalidOptionError, match="acknowledges nothing"):
            ordered.messages(model=Order, on_invalid=on_invalid)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match="acknowledges nothing"):
            await ordered.consume(print, model=Order, on_invalid=on_invalid)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match="acknowledges nothing"):
            await ordered.fetch(1, model=Order, on_invalid=on_invalid)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match="acknowledges nothing"):
            await ordered.next(model=Order, on_invalid=on_invalid)  # type: ignore[call-overload]
    assert ordered.name is None  # no consumer was created
    assert (await (await js.stream(stream)).info()).state.consumer_count == 1  # "worker" only


async def test_ordered_consumer_typed_consume_ends_on_an_invalid_payload(
    js: JetStreamContext,
) -> None:
    stream, _ = await make(js)
    await publish_mixed(js, stream)
    seen: list[Order] = []
    errors: list[JetStreamError] = []

    def handle(msg: TypedMsg[Order]) -> None:
        seen.append(msg.value)

    ordered = await js.ordered_consumer(stream)
    ctx = await ordered.consume(handle, model=Order, error_handler=errors.append)
    error = await asyncio.wait_for(ctx.closed(), STEP)
    assert isinstance(error, PayloadValidationError)
    assert error.sequence == 2
    assert errors == [error]
    assert seen == [Order(id=1, item="a")]


async def test_ordered_consumer_typed_fetch_and_next(js: JetStreamContext) -> None:
    stream, _ = await make(js)
    await publish_mixed(js, stream)
    await js.publish(f"{stream}.a", Order(id=4, item="d"))
    ordered = await js.ordered_consumer(stream)
    batch = await ordered.fetch(2, expires=STEP, model=Order)
    assert_type(batch, TypedMessageBatch[Order])
    assert [m.value.id for m in await batch.collect()] == [1]
    with pytest.raises(PayloadValidationError):
        await batch.collect()
    assert await batch.collect() == []
    nxt = await ordered.next(expires=STEP, model=Order)
    assert_type(nxt, TypedMsg[Order])
    assert nxt.value.id == 3
    assert (await ordered.next(expires=STEP, model=Order)).value.id == 4


async def test_next_typed_nak_ends_at_expires(js: JetStreamContext) -> None:
    stream, consumer = await make(js)  # max_deliver unlimited: the nak'ed one comes back
    await js.publish(f"{stream}.a", b"{}")
    with pytest.raises(FetchTimeoutError, match="nak'ed"):
        await consumer.next(expires=1, model=Order, on_invalid="nak")
    info = await consumer.info()
    assert info.delivered.stream_seq == 1
    assert info.num_redelivered == 1


async def _pull_waiting(js: JetStreamContext, stream: str, name: str) -> bool:
    return (await js.consumer(stream, name)).cached_info.num_waiting > 0


@pytest.mark.parametrize("typed", [False, True], ids=["plain", "typed"])
async def test_ordered_next_retry_after_a_reset_keeps_the_heartbeat_it_was_given(
    js: JetStreamContext, typed: bool
) -> None:
    """``next(heartbeat=5, expires=10)``: 5 s is half of expires, so valid. Its
    consumer is deleted while it waits: the retry after the reset pulls with what
    is left of expires and the heartbeat clamped to half of that (it re-checked
    heartbeat=5 against the time left and raised InvalidOptionError)."""
    stream, _ = await make(js)
    await js.publish(f"{stream}.a", Order(id=1, item="a"))
    ordered = await js.ordered_consumer(stream)
    assert (await ordered.next(expires=STEP, model=Order)).value.id == 1
    first = ordered.name
    assert first is not None
    if typed:
        task: asyncio.Task[Msg] = asyncio.ensure_future(
            ordered.next(heartbeat=5, expires=10, model=Order)
        )
    else:
        task = asyncio.ensure_future(ordered.next(heartbeat=5, expires=10))
    # The pull is waiting on the server: delete the consumer under it.
    await wait_until(lambda: task.done() or _pull_waiting(js, stream, first), timeout=STEP)
    assert not task.done(), task.exception()
    await js.delete_consumer(stream, first)
    # The retry recreated the consumer (a new name) and pulls again: publish for it.
    await wait_until(lambda: task.done() or ordered.name not in (None, first), timeout=STEP)
    assert not task.done(), task.exception()
    await js.publish(f"{stream}.a", Order(id=2, item="b"))
    msg = await asyncio.wait_for(task, STEP)
    assert msg.data == Order(id=2, item="b").model_dump_json().encode()
    if typed:
        assert isinstance(msg, TypedMsg)
        assert msg.value.id == 2
    assert ordered.cursor == 2


def fetch_bytes_or_no_wait(how: str) -> Any:
    """``fetch_bytes`` (room for all three) or ``fetch_no_wait(3)``, of either consumer.

    The messages are stored before: the byte pull gets them at once, then waits out
    its ``expires`` for more (kept short).
    """
    if how == "fetch_bytes":
        return lambda c, **kw: c.fetch_bytes(1 << 20, expires=2, **kw)
    return lambda c, **kw: c.fetch_no_wait(3, **kw)


@pytest.mark.parametrize("how", ["fetch_bytes", "fetch_no_wait"])
async def test_fetch_bytes_and_no_wait_typed_term(js: JetStreamContext, how: str) -> None:
    stream, consumer = await make(js)
    advisories = await terminated_advisories(js, stream)
    await publish_mixed(js, stream)
    pull = fetch_bytes_or_no_wait(how)
    got: list[TypedMsg[Order]] = []
    async with await pull(consumer, model=Order) as batch:
        assert isinstance(batch, TypedMessageBatch)
        async for msg in batch:
            got.append(msg)
            await msg.double_ack()
    assert [m.value for m in got] == [Order(id=1, item="a"), Order(id=3, item="c")]
    await wait_until(lambda: bool(advisories), timeout=STEP)
    assert advisories[0]["stream_seq"] == 2
    assert "not a valid Order" in advisories[0]["reason"]
    assert (await consumer.info()).num_ack_pending == 0


@pytest.mark.parametrize("how", ["fetch_bytes", "fetch_no_wait"])
async def test_fetch_bytes_and_no_wait_typed_nak(js: JetStreamContext, how: str) -> None:
    stream, consumer = await make(js)
    await publish_mixed(js, stream)
    batch = await fetch_bytes_or_no_wait(how)(consumer, model=Order, on_invalid="nak")
    got = await batch.collect()
    assert [m.value.id for m in got] == [1, 3]
    again = await consumer.next(expires=STEP)  # the nak'ed one, delivered a second time
    assert (again.metadata.sequence.stream, again.metadata.num_delivered) == (2, 2)
    await again.term()


@pytest.mark.parametrize("how", ["fetch_bytes", "fetch_no_wait"])
async def test_fetch_bytes_and_no_wait_typed_raise(js: JetStreamContext, how: str) -> None:
    stream, consumer = await make(js)
    await publish_mixed(js, stream)
    batch = await fetch_bytes_or_no_wait(how)(consumer, model=Order, on_invalid="raise")
    assert [m.value.id for m in await batch.collect()] == [1]  # those before it
    with pytest.raises(PayloadValidationError) as info:
        await batch.collect()
    assert (info.value.subject, info.value.sequence) == (f"{stream}.a", 2)
    assert [m.value.id for m in await batch.collect()] == [3]  # then the rest
    assert batch.done
    assert (await consumer.info()).num_ack_pending == 3  # nothing settled


async def test_fetch_bytes_and_no_wait_typed_types_and_checks(js: JetStreamContext) -> None:
    """mypy infers TypedMessageBatch[Model] (plain MessageBatch without a model);
    a bad on_invalid or a codec without decode is refused before anything is sent."""
    stream, consumer = await make(js)
    await js.publish(f"{stream}.a", b"x,y")
    for bad in ({"on_invalid": "drop"}, {"codec": object()}):
        with pytest.raises(InvalidOptionError):
            await consumer.fetch_no_wait(1, model=Order, **bad)
        with pytest.raises(InvalidOptionError):
            await consumer.fetch_bytes(1 << 20, model=Order, **bad)
    assert (await consumer.info()).delivered.stream_seq == 0  # no pull was sent
    by_bytes = await consumer.fetch_bytes(1 << 20, expires=2, model=list, codec=CsvCodec())
    assert_type(by_bytes, TypedMessageBatch[list[Any]])
    collected = await by_bytes.collect()
    assert_type(collected, list[TypedMsg[list[Any]]])
    assert [m.value for m in collected] == [["x", "y"]]
    await collected[0].double_ack()
    await js.publish(f"{stream}.a", Order(id=9, item="z"))
    await js.publish(f"{stream}.a", b"{}")
    no_wait = await consumer.fetch_no_wait(2, max_bytes=1 << 20, model=Order, on_invalid="nak")
    assert_type(no_wait, TypedMessageBatch[Order])
    ids = []
    async for msg in no_wait:
        assert_type(msg, TypedMsg[Order])
        ids.append(msg.value.id)
        await msg.double_ack()
    assert ids == [9]
    plain = await consumer.fetch_bytes(1 << 20, expires=2)
    assert_type(plain, MessageBatch)
    back = await plain.collect()  # nak'ed by the typed batch: delivered again
    assert [(m.data, m.metadata.num_delivered) for m in back] == [(b"{}", 2)]


async def test_ordered_fetch_bytes_and_no_wait_typed(js: JetStreamContext) -> None:
    stream, _ = await make(js)
    await publish_mixed(js, stream)
    ordered = await js.ordered_consumer(stream)
    for on_invalid in ("term", "nak"):
        with pytest.raises(InvalidOptionError, match="acknowledges nothing"):
            await ordered.fetch_bytes(1 << 20, model=Order, on_invalid=on_invalid)  # type: ignore[call-overload]
        with pytest.raises(InvalidOptionError, match="acknowledges nothing"):
            await ordered.fetch_no_wait(3, model=Order, on_invalid=on_invalid)  # type: ignore[call-overload]
    assert ordered.name is None  # no consumer was created
    by_bytes = await ordered.fetch_bytes(1 << 20, expires=2, model=Order)
    assert_type(by_bytes, TypedMessageBatch[Order])
    assert [m.value.id for m in await by_bytes.collect()] == [1]
    with pytest.raises(PayloadValidationError) as info:
        await by_bytes.collect()
    assert info.value.sequence == 2
    assert [m.value.id for m in await by_bytes.collect()] == [3]
    assert ordered.cursor == 3

    again = await js.ordered_consumer(stream)
    no_wait = await again.fetch_no_wait(3, model=Order)
    assert_type(no_wait, TypedMessageBatch[Order])
    first = await anext(no_wait)
    assert_type(first, TypedMsg[Order])
    with pytest.raises(PayloadValidationError):
        await anext(no_wait)
    assert [m.value.id async for m in no_wait] == [3]
    assert (first.value.id, again.cursor) == (1, 3)
    plain = await again.fetch_no_wait(1)
    assert_type(plain, OrderedBatch)
    await plain.aclose()


async def test_a_codec_without_a_model_is_refused(js: JetStreamContext) -> None:
    """``codec=`` without ``model=`` was ignored: the messages came untyped."""
    stream, consumer = await make(js)
    oc = await js.ordered_consumer(stream)
    codec = CsvCodec()
    before = js.nc.stats["out_msgs"]
    # (Refused by the type checker too: these check the run-time refusal.)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: consumer.fetch(1, codec=codec),  # type: ignore[call-overload]
        lambda: consumer.fetch_no_wait(1, codec=codec),  # type: ignore[call-overload]
        lambda: consumer.next(codec=codec),  # type: ignore[call-overload]
        lambda: oc.fetch(1, codec=codec),  # type: ignore[call-overload]
        lambda: oc.next(codec=codec),  # type: ignore[call-overload]
    ]
    for call in calls:
        with pytest.raises(InvalidOptionError, match="give model= too"):
            await call()
    sync_calls: list[Callable[[], object]] = [
        lambda: consumer.messages(codec=codec),  # type: ignore[call-overload]
        lambda: oc.messages(codec=codec),  # type: ignore[call-overload]
    ]
    for sync_call in sync_calls:
        with pytest.raises(InvalidOptionError, match="give model= too"):
            sync_call()
    for handle in (consumer, oc):
        with pytest.raises(InvalidOptionError, match="give model= too"):
            await handle.consume(lambda msg: None, codec=codec)  # type: ignore[call-overload]
    assert js.nc.stats["out_msgs"] == before


class PackedCodec:
    """Ints as 4 bytes: ``struct.error`` (not a ValueError) on any other length, as protobuf's
    ``DecodeError`` is not one either."""

    def encode(self, value: Any) -> bytes:
        return struct.pack(">i", value)

    def decode(self, data: bytes, type_: type[T]) -> T:
        if data == b"usage":
            raise InvalidOptionError("cannot decode that at all")
        value: T = struct.unpack(">i", data)[0]
        return value


async def publish_packed(js: JetStreamContext, stream: str, bad: bytes = b"bad") -> None:
    """0, 1, a payload the codec fails on (sequence 3), 3, 4."""
    for i in range(5):
        if i == 2:
            await js.publish(f"{stream}.a", bad)
        else:
            await js.publish(f"{stream}.a", i, codec=PackedCodec())


async def test_a_codec_error_that_is_not_a_value_error_is_an_invalid_payload(
    js: JetStreamContext,
) -> None:
    codec = PackedCodec()
    stream, consumer = await make(js)
    await publish_packed(js, stream)
    # An ordered consumer's collect: those before, the error, those after (none lost).
    ordered = await js.ordered_consumer(stream)
    batch = await ordered.fetch(5, expires=STEP, model=int, codec=codec)
    assert [m.value for m in await batch.collect()] == [0, 1]
    with pytest.raises(PayloadValidationError) as info:
        await batch.collect()
    assert info.value.sequence == 3
    assert isinstance(info.value.__cause__, struct.error)
    assert "error: unpack requires" in str(info.value)
    assert [m.value for m in await batch.collect()] == [3, 4]
    # An AckNone consumer's collect: the same.
    none = await js.create_consumer(
        stream, ConsumerConfig(durable_name="none", ack_policy=AckPolicy.NONE)
    )
    batch = await none.fetch(5, expires=STEP, model=int, codec=codec, on_invalid="raise")
    assert [m.value for m in await batch.collect()] == [0, 1]
    with pytest.raises(PayloadValidationError):
        await batch.collect()
    assert [m.value for m in await batch.collect()] == [3, 4]
    # term: terminated and left out.
    advisories = await terminated_advisories(js, stream)
    batch = await consumer.fetch(5, expires=STEP, model=int, codec=codec)
    assert [m.value for m in await batch.collect()] == [0, 1, 3, 4]
    await wait_until(lambda: bool(advisories), timeout=STEP)
    assert [a["stream_seq"] for a in advisories] == [3]
    # Iteration, next, messages: one error, then on.
    ordered = await js.ordered_consumer(stream)
    iterated = await ordered.fetch(5, expires=STEP, model=int, codec=codec)
    got: list[object] = []
    for _ in range(5):
        try:
            got.append((await anext(iterated)).value)
        except PayloadValidationError as exc:
            got.append(exc.sequence)
    assert got == [0, 1, 3, 3, 4]
    ordered = await js.ordered_consumer(stream)
    assert (await ordered.next(expires=STEP, model=int, codec=codec)).value == 0
    assert (await ordered.next(expires=STEP, model=int, codec=codec)).value == 1
    with pytest.raises(PayloadValidationError):
        await ordered.next(expires=STEP, model=int, codec=codec)
    assert (await ordered.next(expires=STEP, model=int, codec=codec)).value == 3
    ordered = await js.ordered_consumer(stream)
    async with ordered.messages(model=int, codec=codec) as it:
        assert [(await it.next()).value for _ in range(2)] == [0, 1]
        with pytest.raises(PayloadValidationError):
            await asyncio.wait_for(it.next(), STEP)
        assert (await asyncio.wait_for(it.next(), STEP)).value == 3
    # consume: an ordered one ends with the error (it was only logged).
    seen: list[int] = []
    ordered = await js.ordered_consumer(stream)
    ctx = await ordered.consume(lambda m: seen.append(m.value), model=int, codec=codec)
    error = await asyncio.wait_for(ctx.closed(), STEP)
    assert isinstance(error, PayloadValidationError)
    assert (error.sequence, seen) == (3, [0, 1])
    # Msg.decode: the same error.
    raw = await (await js.stream(stream)).get_msg(3)
    with pytest.raises(PayloadValidationError) as info:
        raw.decode(int, codec)
    assert isinstance(info.value.__cause__, struct.error)


async def test_a_codec_invalid_option_error_is_raised_as_it_is_and_loses_nothing(
    js: JetStreamContext,
) -> None:
    codec = PackedCodec()
    stream, consumer = await make(js)
    await publish_packed(js, stream, bad=b"usage")
    batch = await consumer.fetch(5, expires=STEP, model=int, codec=codec)  # on_invalid="term"
    assert [m.value for m in await batch.collect()] == [0, 1]
    with pytest.raises(InvalidOptionError, match="at all"):
        await batch.collect()
    assert [m.value for m in await batch.collect()] == [3, 4]
    assert (await consumer.info()).num_ack_pending == 5  # not terminated
    seen: list[int] = []
    ordered = await js.ordered_consumer(stream)
    ctx = await ordered.consume(lambda m: seen.append(m.value), model=int, codec=codec)
    error = await asyncio.wait_for(ctx.closed(), STEP)  # consume ends with it
    assert isinstance(error, InvalidOptionError)
    assert seen == [0, 1]
    raw = await (await js.stream(stream)).get_msg(3)
    with pytest.raises(InvalidOptionError, match="at all"):
        raw.decode(int, codec)


class FlakyRegistryCodec:
    """JSON after a schema-registry look-up that fails (``ConnectionError``) ``down`` times:
    not an invalid payload, so nothing may be settled for it."""

    def __init__(self, down: int) -> None:
        self.down = down

    def encode(self, value: Any) -> bytes:
        return json.dumps(value).encode()

    def decode(self, data: bytes, type_: type[T]) -> T:
        if self.down:
            self.down -= 1
            raise ConnectionError("schema registry unreachable")
        value: T = json.loads(data)
        return value


async def test_a_codec_that_fails_for_a_passing_reason_settles_nothing(
    js: JetStreamContext,
) -> None:
    """A codec error that says nothing about the payload (a ConnectionError) is raised
    as it is and the message is left unsettled, to come again: the default
    on_invalid="term" terminated it (on a work queue: removed, never consumed)."""
    stream = unique_name("FLAKY")
    await js.create_stream(
        StreamConfig(
            name=stream,
            subjects=[f"{stream}.>"],
            storage=StorageType.MEMORY,
            retention=RetentionPolicy.WORKQUEUE,
        )
    )
    consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="w", ack_policy=AckPolicy.EXPLICIT, ack_wait=1)
    )
    for i in range(3):
        await js.publish(f"{stream}.a", i, codec=JsonCodec())
    codec = FlakyRegistryCodec(down=1)
    batch = await consumer.fetch(3, expires=STEP, model=int, codec=codec)
    with pytest.raises(ConnectionError):
        await batch.collect()
    assert [m.value for m in await batch.collect()] == [1, 2]  # held, not lost
    codec.down = 1
    with pytest.raises(ConnectionError):
        await consumer.next(expires=10, model=int, codec=codec)  # one comes after ack_wait
    got: list[int] = []

    async def all_three() -> bool:
        batch = await consumer.fetch(3, expires=1, model=int, codec=codec)
        for msg in await batch.collect():
            got.append(msg.value)
            await msg.ack()
        return sorted(got) == [0, 1, 2]

    await wait_until(all_three, timeout=15)  # 0 (and 1) again after ack_wait
    assert (await (await js.stream(stream)).info()).state.messages == 0


async def test_term_is_refused_on_an_ack_all_consumer(js: JetStreamContext) -> None:
    """nats-server takes a +TERM as an ack of every earlier message on an AckAll
    consumer: the default on_invalid='term' acknowledged messages handed out and not
    processed yet (never redelivered). Refused before anything is sent; 'nak' and
    'raise' leave the earlier messages pending."""
    stream = unique_name("TYPEDALL")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.MEMORY)
    )
    consumer = await js.create_consumer(
        stream, ConsumerConfig(durable_name="all", ack_policy=AckPolicy.ALL, ack_wait=30)
    )
    await js.publish(f"{stream}.o", Order(id=1, item="a"))
    await js.publish(f"{stream}.o", b'{"id": "bad"}')
    await js.publish(f"{stream}.o", Order(id=3, item="c"))

    async def handler(msg: Any) -> None:
        raise AssertionError("nothing is delivered")

    refused: dict[str, Callable[[], Awaitable[Any]]] = {
        "fetch": lambda: consumer.fetch(3, model=Order),
        "fetch_bytes": lambda: consumer.fetch_bytes(1 << 20, model=Order),
        "fetch_no_wait": lambda: consumer.fetch_no_wait(3, model=Order),
        "next": lambda: consumer.next(model=Order),
        "next term": lambda: consumer.next(model=Order, on_invalid="term"),
    }
    for what, call in refused.items():
        with pytest.raises(InvalidOptionError, match="ack_policy=all") as caught:
            await call()
        assert "on_invalid='raise'" in str(caught.value), what
    with pytest.raises(InvalidOptionError, match="ack_policy=all"):
        consumer.messages(model=Order)
    with pytest.raises(InvalidOptionError, match="ack_policy=all"):
        await consumer.consume(handler, model=Order)
    assert (await consumer.info()).num_ack_pending == 0  # nothing was pulled

    batch = await consumer.fetch(3, expires=2, model=Order, on_invalid="nak")
    got = [msg.value.id async for msg in batch]
    assert got == [1, 3]
    info = await consumer.info()
    assert info.ack_floor.stream_seq == 0  # the nak acknowledged nothing before it
    assert info.num_ack_pending >= 2

"""Typed payloads without a server: encoding, headers, refusals, decoding errors (issue 28)."""

from __future__ import annotations

import pickle
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import AliasPath, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from aiojetstream import (
    Codec,
    InvalidOptionError,
    JetStreamError,
    JsonCodec,
    Msg,
    PayloadValidationError,
    RawCodec,
    TypedMsg,
)
from aiojetstream._codec import decode, encode
from aiojetstream._message import typed
from aiojetstream._typed import decoder
from typed_shapes import SHAPES, Shape

T = TypeVar("T")


class Point(BaseModel):
    x: int
    y: int = 0


class Upper:
    content_type = "text/plain"

    def encode(self, value: Any) -> bytes:
        return str(value).upper().encode()

    def decode(self, data: bytes, type_: type[T]) -> T:
        return type_(data.decode())  # type: ignore[call-arg]


class NoType:
    def encode(self, value: Any) -> bytes:
        return bytearray(b"ab")  # type: ignore[return-value]

    def decode(self, data: bytes, type_: type[T]) -> T:
        raise ValueError("never")


def nowhere() -> tuple[str, int | None]:
    return "s.1", 7


def test_a_model_is_json_with_a_content_type() -> None:
    assert encode(Point(x=1), None, None) == (
        b'{"x":1,"y":0}',
        {"Content-Type": "application/json"},
    )
    _, headers = encode(Point(x=1), None, {"a": "b"})
    assert headers == {"a": "b", "Content-Type": "application/json"}
    assert encode(Point(x=1), None, {"CONTENT-TYPE": "x"})[1] == {"CONTENT-TYPE": "x"}


def test_bytes_like_and_codecs() -> None:
    assert encode(bytearray(b"ab"), None, None) == (b"ab", None)
    assert encode(memoryview(b"ab"), None, {"k": "v"}) == (b"ab", {"k": "v"})
    assert encode("hi", Upper(), None) == (b"HI", {"Content-Type": "text/plain"})
    assert encode(b"raw", RawCodec(), None) == (b"raw", None)
    assert encode({"a": [1]}, JsonCodec(), None) == (
        b'{"a":[1]}',
        {"Content-Type": "application/json"},
    )
    assert encode(0, NoType(), None) == (b"ab", None)
    assert isinstance(Upper(), Codec)
    assert isinstance(JsonCodec(), Codec)
    assert isinstance(RawCodec(), Codec)


def test_refusals_say_what_to_do() -> None:
    with pytest.raises(InvalidOptionError, match=r"got str: publish text as bytes.*\.encode\(\)"):
        encode("text", None, None)
    with pytest.raises(InvalidOptionError, match=r"\.encode\(\)"):
        encode("text", RawCodec(), None)
    with pytest.raises(InvalidOptionError, match="got dict"):
        encode({"a": 1}, None, None)
    with pytest.raises(InvalidOptionError, match="the class Point"):
        encode(Point, None, None)
    with pytest.raises(InvalidOptionError, match="codec must have"):
        encode(1, object(), None)  # type: ignore[arg-type]


def test_decode_and_its_error() -> None:
    assert decode(b'{"x":2}', Point, None, nowhere) == Point(x=2)
    assert decode(b"[1,2]", list[int], None, nowhere) == [1, 2]
    assert decode(b"ab", str, Upper(), nowhere) == "ab"
    with pytest.raises(PayloadValidationError) as info:
        decode(b'{"y":"q"}', Point, None, nowhere)
    err = info.value
    assert isinstance(err, JetStreamError)
    assert isinstance(err, ValueError)
    assert (err.subject, err.sequence) == ("s.1", 7)
    assert [e["loc"] for e in err.errors] == [("x",), ("y",)]
    assert "'s.1' (sequence 7) is not a valid Point: 2 error(s)" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert (again.subject, again.sequence, again.errors, str(again)) == (
        "s.1",
        7,
        err.errors,
        str(err),
    )
    with pytest.raises(PayloadValidationError, match="never") as info:
        decode(b"", str, NoType(), nowhere)
    assert info.value.errors == [{"msg": "never"}]


def test_msg_decode_and_typed_in_place() -> None:
    reply = b"$JS.ACK.S.C.1.5.3.1700000000000000000.0"
    msg = Msg(b"orders.1", reply, b'{"x":"no"}', None, None)  # type: ignore[arg-type]
    with pytest.raises(PayloadValidationError) as info:
        msg.decode(Point)
    assert (info.value.subject, info.value.sequence) == ("orders.1", 5)
    plain = Msg(b"a", b"", b'{"x":3}', None, None)  # type: ignore[arg-type]
    assert plain.decode(Point) == Point(x=3)
    got: TypedMsg[Point] = typed(plain, Point(x=3))
    assert got is plain
    assert type(got) is TypedMsg
    assert got.value == Point(x=3)
    assert got.data == b'{"x":3}'


@pytest.mark.parametrize("name", list(SHAPES))
def test_nested_aliases_read_back(name: str) -> None:
    """Written by field name when the top-level model had no alias of its own, nested
    aliased models (lists, generics, root models, unions, alias generators) did not
    validate when read back: every such message was terminated."""
    shape = SHAPES[name]
    data, _ = encode(shape.example, None, None)
    assert decode(data, shape.cls, None, nowhere) == shape.example


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(SHAPES.values())).flatmap(lambda s: s.values.map(lambda v: (s, v))))
def test_every_shape_round_trips(case: tuple[Shape, Any]) -> None:
    shape, value = case
    data, headers = encode(value, None, None)
    assert headers == {"Content-Type": "application/json"}
    assert decode(data, shape.cls, None, nowhere) == value
    assert JsonCodec().decode(JsonCodec().encode(value), shape.cls) == value


def test_aliases_are_the_wire_form_even_when_names_are_read_too() -> None:
    """``alias_generator=to_camel, populate_by_name=True`` (or ``validate_by_name``) went
    out in snake_case once the whole schema was checked (pydantic's default was tried
    first and reads back): Go and JavaScript readers with camelCase tags got zero values.
    The alias is the wire form, as before; a one-key ``AliasPath`` reads back by it."""

    class Camel(BaseModel):
        model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
        order_id: int
        item_name: str

    class Pop(BaseModel):
        model_config = ConfigDict(validate_by_name=True)
        order_id: int = Field(alias="orderId")

    class PathOne(BaseModel):
        x: int = Field(validation_alias=AliasPath("y"), serialization_alias="y")

    for value, written in (
        (Camel(order_id=1, item_name="b"), b'{"orderId":1,"itemName":"b"}'),
        (Pop(order_id=1), b'{"orderId":1}'),
        (PathOne(y=1), b'{"y":1}'),
    ):
        data, _ = encode(value, None, None)
        assert data == written
        assert decode(data, type(value), None, nowhere) == value


def test_the_written_form_is_one_the_model_reads() -> None:
    """A model's own serialize_by_alias is kept when the model reads back what it writes;
    when it does not, the form every field is read back by is written."""

    class Both(BaseModel):
        model_config = ConfigDict(serialize_by_alias=False, validate_by_name=True)
        order_id: int = Field(alias="orderId")

    class Unreadable(BaseModel):
        model_config = ConfigDict(serialize_by_alias=False)  # read by alias only
        order_id: int = Field(alias="orderId")

    class Only(BaseModel):
        order_id: int = Field(validation_alias="orderId")  # read by it, never written by it

    for value, written in (
        (Both(order_id=1), b'{"order_id":1}'),
        (Unreadable(orderId=2), b'{"orderId":2}'),
        (Only(orderId=3), b'{"order_id":3}'),  # nothing reads back: pydantic's default
    ):
        data, _ = encode(value, None, None)
        assert data == written
        if not isinstance(value, Only):
            assert decode(data, type(value), None, nowhere) == value


class NoSchema:
    """A class pydantic has no schema for."""


class Later(BaseModel):
    part: Undefined  # type: ignore[name-defined]  # noqa: F821  (never defined)


@pytest.mark.parametrize("type_", [NoSchema, list[NoSchema], Later])
def test_a_type_pydantic_cannot_validate_is_refused_at_once(type_: Any) -> None:
    """A TypeAdapter that could not be built raised PydanticSchemaGenerationError (a
    TypeError) on each decode, and was tried again each time; a model not fully
    defined raised pydantic's error on each one."""
    for call in (
        lambda: decode(b"{}", type_, None, nowhere),
        lambda: decoder(type_, None),
        lambda: decoder(type_, JsonCodec()),
        lambda: JsonCodec().decode(b"{}", type_),
    ):
        with pytest.raises(InvalidOptionError, match="cannot validate JSON as") as info:
            call()
        assert "\n" not in str(info.value)  # pydantic's first line, not its links
    assert callable(decoder(type_, Upper()))  # a codec of its own decides: not refused


def test_what_pydantic_cannot_validate_says_why() -> None:
    with pytest.raises(InvalidOptionError, match="Undefined"):
        decoder(Later, None)
    with pytest.raises(InvalidOptionError, match=r"list\[.*NoSchema\].*schema for .*NoSchema"):
        decoder(list[NoSchema], None)
    assert decoder(list[int], None)(b"[1]") == [1]


def test_only_errors_that_say_the_payload_is_invalid_are_invalid_payloads() -> None:
    """A codec's ValueError, TypeError, LookupError, struct.error, protobuf's DecodeError
    and its declared ``invalid_errors`` are invalid payloads (settled by on_invalid); a
    passing error (a registry's ConnectionError) or InvalidOptionError is not."""
    import struct

    from aiojetstream import InvalidOptionError
    from aiojetstream._codec import invalid_payload

    class DecodeError(Exception):  # protobuf's name, not a ValueError
        pass

    class Corrupt(Exception):
        pass

    class Declaring:
        invalid_errors = (Corrupt,)

    for exc in (
        ValueError(),
        UnicodeDecodeError("utf-8", b"", 0, 1, "x"),
        TypeError(),
        KeyError("k"),
        IndexError(),
        struct.error(),
        DecodeError(),
    ):
        assert invalid_payload(exc), exc
    assert invalid_payload(Corrupt(), Declaring())
    assert not invalid_payload(Corrupt(), None)
    for passing in (
        ConnectionError(),
        TimeoutError(),
        OSError(),
        MemoryError(),
        RecursionError(),
        RuntimeError(),
        InvalidOptionError("x"),
    ):
        assert not invalid_payload(passing), passing

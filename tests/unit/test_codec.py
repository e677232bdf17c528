"""Typed payloads without a server: encoding, headers, refusals, decoding errors (issue 28)."""

from __future__ import annotations

import pickle
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

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

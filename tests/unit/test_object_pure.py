"""The pure parts of the object store: names, digests, chunking, the stream config,
and the infos other clients write (captured in ``tests/fixtures/object_infos.json``)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import (
    InvalidNameError,
    InvalidOptionError,
    InvalidResponseError,
    ObjectInfo,
    ObjectMeta,
    ObjectStoreConfig,
    ObjectStoreStatus,
    StorageType,
    StoreCompression,
)
from aiojetstream._models import StreamInfo, from_wire
from aiojetstream._object import (
    encode_name,
    format_digest,
    meta_body,
    object_stream_config,
    parse_digest,
    parse_info,
    rechunk,
    validate_object_name,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def infos() -> dict[str, dict[str, str]]:
    doc: dict[str, dict[str, str]] = json.loads((FIXTURES / "object_infos.json").read_text())
    return doc


# --------------------------------------------------------------------------- names


@given(
    st.text(min_size=1, max_size=200).filter(
        lambda t: len(t.encode("utf-8", "ignore")) == len(t.encode("utf-8", "surrogatepass"))
    )
)
def test_names_encode_to_padded_base64url(name: str) -> None:
    token = encode_name(validate_object_name(name))
    assert base64.urlsafe_b64decode(token).decode() == name
    assert len(token) % 4 == 0  # padded, as nats.go, nats.js and nats-py write it
    assert all(c.isalnum() or c in "-_=" for c in token)


def test_invalid_names() -> None:
    for bad in ("", None, 3, b"bytes", "\udc80", "x" * 2049, "é" * 1025):
        with pytest.raises(InvalidNameError):
            validate_object_name(bad)
    assert validate_object_name("é" * 1024) == "é" * 1024

    class Sneaky(str):
        def encode(self, *args: Any, **kwargs: Any) -> bytes:
            return b"other"

    checked = validate_object_name(Sneaky("name"))
    assert type(checked) is str


# --------------------------------------------------------------------------- digests


@given(st.binary(max_size=300))
def test_digest_spellings(data: bytes) -> None:
    sha = hashlib.sha256(data).digest()
    ours = format_digest(sha)
    assert ours == "SHA-256=" + base64.urlsafe_b64encode(sha).decode()
    for spelling in (
        ours,
        ours.rstrip("="),
        "sha-256=" + base64.b64encode(sha).decode(),
        "SHA-256=" + base64.b64encode(sha).decode().rstrip("="),
        "SHA-256=" + sha.hex(),
        "SHA-256=" + sha.hex().upper(),
    ):
        assert parse_digest(spelling) == sha, spelling


def test_not_digests() -> None:
    sha = hashlib.sha256(b"x").digest()
    for bad in (
        "",
        "MD5=" + base64.urlsafe_b64encode(sha).decode(),
        "SHA-256=",
        "SHA-256=abc",
        "SHA-256=" + base64.urlsafe_b64encode(sha[:31]).decode(),
        "SHA-256=" + sha.hex()[:-1] + "g",
        "SHA-256=" + base64.urlsafe_b64encode(sha).decode() + "==",
    ):
        with pytest.raises(ValueError, match="SHA-256"):
            parse_digest(bad)


# --------------------------------------------------------------------------- chunking


async def _pieces(items: list[bytes]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def _chunks(items: list[Any], size: int) -> list[bytes]:
    return [chunk async for chunk in rechunk(_pieces(items), size)]


@given(st.lists(st.binary(max_size=50), max_size=30), st.integers(1, 40))
async def test_rechunk_cuts_exact_chunks(pieces: list[bytes], size: int) -> None:
    chunks = await _chunks(pieces, size)
    assert b"".join(chunks) == b"".join(pieces)
    assert all(len(c) == size for c in chunks[:-1])
    assert all(0 < len(c) <= size for c in chunks)


async def test_rechunk_takes_bytes_likes_and_refuses_the_rest() -> None:
    assert await _chunks([bytearray(b"abc"), memoryview(b"defg")], 3) == [b"abc", b"def", b"g"]
    with pytest.raises(InvalidOptionError, match="str"):
        await _chunks([b"ok", "text"], 3)


# --------------------------------------------------------------------------- config


def test_stream_config() -> None:
    config = ObjectStoreConfig(
        bucket="files",
        description="d",
        ttl=60,
        max_bytes=1000,
        storage=StorageType.MEMORY,
        replicas=3,
        compression=True,
        metadata={"a": "b"},
    )
    scfg = object_stream_config(config)
    assert scfg.name == "OBJ_files"
    assert scfg.subjects == ["$O.files.C.>", "$O.files.M.>"]
    assert (scfg.max_age, scfg.max_bytes, scfg.num_replicas) == (timedelta(seconds=60), 1000, 3)
    assert (scfg.discard, scfg.allow_rollup_hdrs, scfg.allow_direct) == ("new", True, True)
    assert (scfg.storage, scfg.compression) == (StorageType.MEMORY, StoreCompression.S2)
    assert scfg.metadata == {"a": "b"}
    plain = object_stream_config(ObjectStoreConfig(bucket="b"))
    assert (plain.max_age, plain.compression) == (None, StoreCompression.NONE)
    with pytest.raises(InvalidOptionError):
        object_stream_config({"bucket": "b"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown field"):
        ObjectStoreConfig(bucket="b", history=2)  # type: ignore[call-arg]


def test_status_describes_its_config() -> None:
    config = ObjectStoreConfig(bucket="files", description="d", ttl=60, compression=True)
    wire = object_stream_config(config).model_dump(mode="json", exclude_none=True)
    wire["metadata"] = {"_nats.level": "1", "user": "x"}
    info = from_wire(
        StreamInfo,
        {
            "config": wire,
            "created": "2026-01-01T00:00:00Z",
            "state": {
                "messages": 3,
                "bytes": 300,
                "first_seq": 1,
                "first_ts": "2026-01-01T00:00:00Z",
                "last_seq": 3,
                "last_ts": "2026-01-01T00:00:01Z",
                "consumer_count": 0,
            },
        },
    )
    status = ObjectStoreStatus.from_stream_info(info)
    assert (status.bucket, status.size, status.ttl, status.is_compressed) == (
        "files",
        300,
        timedelta(seconds=60),
        True,
    )
    assert status.config == config.model_copy(update={"metadata": {"user": "x"}})


# --------------------------------------------------------------------------- infos


def test_infos_of_every_client_parse() -> None:
    for client, objects in infos().items():
        for name, raw in objects.items():
            info = parse_info(raw.encode(), WHEN, "bucket", f"$O.bucket.M.{name}")
            assert info.name == name, client
            assert info.mtime == WHEN  # the server's time, never the stored mtime
            if info.headers is not None:
                assert all(isinstance(v, list) for v in info.headers.values())


def test_javascript_infos() -> None:
    js = {
        n: parse_info(r.encode(), WHEN, "b", n)
        for n, r in infos()["nats.js @nats-io/obj 3.4.0"].items()
    }
    hello = js["hello.txt"]
    assert hello.headers == {"Content-Type": ["text/plain"], "X-Many": ["1", "2"]}
    assert (hello.metadata, hello.description, hello.size) == ({"lang": "js"}, "a greeting", 21)
    link = js["link"]  # no nuid, no size
    assert link.is_link
    assert (link.nuid, link.size, link.chunks) == (None, 0, 0)
    assert link.link is not None
    assert (link.link.bucket, link.link.name) == ("fromjs", "hello.txt")
    gone = js["gone"]
    assert gone.deleted
    assert gone.model_extra == {"revision": 23}  # kept, and written back
    assert json.loads(meta_body(gone))["revision"] == 23
    assert js["dir"].link is not None
    assert js["dir"].link.name is None


def test_nats_py_infos() -> None:
    py = {n: parse_info(r.encode(), WHEN, "b", n) for n, r in infos()["nats-py 2.16.0"].items()}
    assert py["hello.txt"].headers == {"Content-Type": ["text/plain"]}
    assert py["gone"].deleted


def test_our_infos_round_trip_byte_for_byte() -> None:
    for name, raw in infos()["aiojetstream"].items():
        info = parse_info(raw.encode(), WHEN, "ours", name)
        assert meta_body(info) == raw.encode(), name


def test_meta_body_shape() -> None:
    info = ObjectInfo(
        name="n",
        bucket="b",
        nuid="x",
        size=0,
        chunks=0,
        digest=format_digest(hashlib.sha256().digest()),
        mtime=WHEN,
    )
    doc = json.loads(meta_body(info))
    assert list(doc) == ["name", "bucket", "nuid", "size", "chunks", "digest"]  # nats.go's order
    assert "mtime" not in doc
    assert "deleted" not in doc


def test_bad_infos() -> None:
    for raw in (b"not json", b"[]", b'{"bucket": "b"}', b'{"name": "n", "size": "big"}'):
        with pytest.raises(InvalidResponseError, match="invalid object info"):
            parse_info(raw, WHEN, "b", "$O.b.M.x")


def test_meta_headers() -> None:
    meta = ObjectMeta(name="n", headers={"A": "1", "B": ["2", "3"]})
    assert meta.headers == {"A": ["1"], "B": ["2", "3"]}
    with pytest.raises(ValueError, match="header"):
        ObjectMeta(name="n", headers={"A": 1})

"""Input too long for the server's protocol line, timeouts that can not bound a call and
sequences past the server's uint64, against a real nats-server: refused before anything
is sent, and the connection lives on.

A PUB (or SUB, or request) line longer than the server's ``max_control_line`` (4 KiB
by default) makes it answer -ERR and close the connection, and nats-py does not
reconnect after that: one long key would cost every other user of the connection.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    ConsumerConfig,
    InvalidOptionError,
    InvalidSubjectError,
    JetStreamContext,
    JetStreamError,
    KeyValueConfig,
    ObjectStoreConfig,
    StorageType,
    StreamConfig,
)
from helpers import unique_name

LONG = 5000


async def alive(js: JetStreamContext, subject: str) -> None:
    """The connection still works: a publish is acknowledged."""
    assert js.nc.is_connected
    assert (await js.publish(subject, b"still here", timeout=10)).seq >= 1


async def test_a_long_subject_is_refused_and_the_connection_lives(js: JetStreamContext) -> None:
    name = unique_name("LONG")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    long_subject = f"{name}." + "x" * LONG
    with pytest.raises(InvalidSubjectError, match="bytes"):
        await js.publish(long_subject, b"1")
    with pytest.raises(InvalidSubjectError, match="bytes"):
        await js.publish_async(long_subject, b"1")
    await alive(js, f"{name}.ok")


async def test_a_long_key_or_object_name_is_refused_and_the_connection_lives(
    js: JetStreamContext,
) -> None:
    """Subjects the library builds from user input (a key, an object's name)."""
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("LK"), storage=StorageType.MEMORY)
    )
    with pytest.raises(JetStreamError):  # a key too long: refused, whatever its kind
        await kv.put("k" * LONG, b"v")
    store = await js.create_object_store(
        ObjectStoreConfig(bucket=unique_name("LO"), storage=StorageType.MEMORY)
    )
    with pytest.raises(JetStreamError):
        await store.put("n" * LONG, b"data")
    assert js.nc.is_connected
    await kv.put("short", b"v")
    assert (await kv.get("short")).value == b"v"


async def test_a_long_filter_subject_creates_its_consumer(js: JetStreamContext) -> None:
    """A long but valid ``filter_subject`` (it went into the create request's subject,
    which cost the connection): sent in the body only."""
    name = unique_name("LF")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    long_filter = f"{name}." + ".".join(["t"] * 2000) + ".>"
    consumer = await js.create_consumer(
        name, ConsumerConfig(durable_name="long", filter_subject=long_filter)
    )
    assert consumer.cached_info.config.filter_subject == long_filter
    await alive(js, f"{name}.ok")


async def test_timeouts_that_can_not_bound_a_call_are_refused(js: JetStreamContext) -> None:
    """``timeout=0`` sent the request and then reported it failed (the stream was
    created anyway); NaN or infinity never timed out."""
    name = unique_name("TO")
    # (A duration string is a timeout too, "5" seconds included: not these.)
    for bad in (0, -5, math.nan, math.inf, "5 s", "0s", "-1s"):
        with pytest.raises(InvalidOptionError, match="timeout"):
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]), timeout=bad)
    assert name not in [n async for n in js.stream_names()]
    for bad in (math.nan, math.inf, 0):
        with pytest.raises(InvalidOptionError, match="timeout"):
            aiojetstream.JetStreamContext(js.nc, timeout=bad)


# A bad ``timeout`` on every path that sends: publishes, key-value and object-store
# calls passed it on unchecked (``-1`` sent the write and then reported that it
# failed, NaN never timed out, a string escaped as ``TypeError`` after sending).
# ("5" is 5 seconds: a duration string, as every timeout takes.)
BAD_TIMEOUTS = ["5 s", "0s", -1, 0, float("nan"), float("inf"), True]


async def _drain(it: AsyncIterator[Any]) -> None:
    async for _ in it:
        pass


@pytest.mark.parametrize("bad", BAD_TIMEOUTS, ids=repr)
async def test_bad_timeouts_are_refused_before_sending(js: JetStreamContext, bad: Any) -> None:
    name = unique_name("TO")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish(f"{name}.x", b"1")
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("tokv")))
    await kv.put("k", b"1")
    obj = await js.create_object_store(ObjectStoreConfig(bucket=unique_name("toob")))
    await obj.put("o", b"1")
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "publish": lambda: js.publish(f"{name}.x", b"2", timeout=bad),
        "publish_async": lambda: js.publish_async(f"{name}.x", b"2", timeout=bad),
        "get_msg": lambda: stream.get_msg(1, timeout=bad),
        "get_last_msg_for_subject": lambda: stream.get_last_msg_for_subject(
            f"{name}.x", timeout=bad
        ),
        "kv.get": lambda: kv.get("k", timeout=bad),
        "kv.put": lambda: kv.put("k", b"2", timeout=bad),
        "kv.create": lambda: kv.create("new", b"2", timeout=bad),
        "kv.update": lambda: kv.update("k", b"2", 1, timeout=bad),
        "kv.delete": lambda: kv.delete("k", timeout=bad),
        "kv.purge": lambda: kv.purge("k", timeout=bad),
        "kv.keys": lambda: _drain(kv.keys(timeout=bad)),
        "kv.history": lambda: kv.history("k", timeout=bad),
        "kv.purge_deletes": lambda: kv.purge_deletes(timeout=bad),
        "kv.status": lambda: kv.status(timeout=bad),
        "obj.put": lambda: obj.put("p", b"2", timeout=bad),
        "obj.get_bytes": lambda: obj.get_bytes("o", timeout=bad),
        "obj.info": lambda: obj.info("o", timeout=bad),
        "obj.delete": lambda: obj.delete("o", timeout=bad),
        "obj.list": lambda: _drain(obj.list(timeout=bad)),
        "obj.status": lambda: obj.status(timeout=bad),
    }
    stats = js.nc.stats
    sent_anyway: list[str] = []
    untyped: list[str] = []
    for label, call in calls.items():
        before = stats["out_msgs"]
        try:
            await call()
        except InvalidOptionError:
            pass
        except Exception as exc:  # collected, reported below
            untyped.append(f"{label}: {type(exc).__name__}: {exc}")
            continue
        else:
            untyped.append(f"{label}: accepted")
        if stats["out_msgs"] != before:
            sent_anyway.append(label)
    assert untyped == []
    assert sent_anyway == []


async def test_sequences_past_uint64_are_refused_before_sending(js: JetStreamContext) -> None:
    """nats-server reads an expected sequence modulo 2**64: ``update(k, v,
    2**64 + 2)`` succeeded when the key's revision was 2."""
    name = unique_name("SEQ")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    kv = await js.create_key_value(KeyValueConfig(bucket=unique_name("seqkv")))
    await kv.put("k", b"1")
    assert await kv.put("k", b"2") == 2
    too_big = 2**64 + 2
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "update": lambda: kv.update("k", b"3", too_big),
        "delete": lambda: kv.delete("k", last_revision=too_big),
        "get": lambda: kv.get("k", revision=too_big),
        "publish": lambda: js.publish(f"{name}.x", b"", expected_last_sequence=too_big),
        "publish subject": lambda: js.publish(
            f"{name}.x", b"", expected_last_subject_sequence=too_big
        ),
        "get_msg": lambda: stream.get_msg(too_big),
        "delete_msg": lambda: stream.delete_msg(too_big),
    }
    stats = js.nc.stats
    for label, call in calls.items():
        before = stats["out_msgs"]
        with pytest.raises(InvalidOptionError, match="2\\*\\*64"):
            await call()
        assert stats["out_msgs"] == before, label
    assert (await kv.get("k")).value == b"2"
    # The largest one is fine (no such message).
    with pytest.raises(aiojetstream.MessageNotFoundError):
        await stream.get_msg(2**64 - 1)

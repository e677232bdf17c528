"""Input too long for the server's protocol line, and timeouts that can not bound a call,
against a real nats-server: refused before anything is sent, and the connection lives on.

A PUB (or SUB, or request) line longer than the server's ``max_control_line`` (4 KiB
by default) makes it answer -ERR and close the connection, and nats-py does not
reconnect after that: one long key would cost every other user of the connection.
"""

from __future__ import annotations

import math

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
    for bad in (0, -5, math.nan, math.inf, "5"):
        with pytest.raises(InvalidOptionError, match="timeout"):
            await js.create_stream(
                StreamConfig(name=name, subjects=[f"{name}.>"]),
                timeout=bad,  # type: ignore[arg-type]
            )
    assert name not in [n async for n in js.stream_names()]
    for bad in (math.nan, math.inf, 0):
        with pytest.raises(InvalidOptionError, match="timeout"):
            aiojetstream.JetStreamContext(js.nc, timeout=bad)

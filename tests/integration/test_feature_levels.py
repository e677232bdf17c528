"""Features an older nats-server does not have are refused before anything is sent.

An older server ignores a config field or header it does not know: a stream
created with ``allow_batched`` on 2.10 or 2.11 comes back without it, and a
publish with ``ttl=`` on 2.10 is acknowledged and its ``Nats-TTL`` header
stored but never acted on (the message is kept for good). These were
reproduced against nats-server 2.10.26, 2.11.11, 2.12.8 and 2.14.6; here the
context is told the level such a server reports (``js._api.level``), and the
server is asked whether anything arrived.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

import aiojetstream
from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    FeatureNotSupportedError,
    JetStreamContext,
    JetStreamTimeoutError,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name
from proxy import Frame, RewritingProxy

#: A publish's timeout where the server answers nothing (the probe took 1 s more).
PUBLISH_TIMEOUT = 4.0


async def _ttl_stream(js: JetStreamContext) -> str:
    name = unique_name("FLT")
    await js.create_stream(
        StreamConfig(
            name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, allow_msg_ttl=True
        )
    )
    return name


async def test_a_ttl_publish_to_a_server_before_2_11_is_refused(js: JetStreamContext) -> None:
    """2.10 (API level 0) acknowledged these and kept the messages for good."""
    name = await _ttl_stream(js)
    subject = f"{name}.a"
    js._api.level = 0  # what nats-server 2.10 reports
    try:
        with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.11") as info:
            await js.publish(subject, b"x", ttl=1)
        assert (info.value.feature, info.value.server_level) == (
            "per-message TTL (ttl=, Nats-TTL)",
            0,
        )
        with pytest.raises(FeatureNotSupportedError):
            await js.publish_async(subject, b"x", ttl=timedelta(seconds=5))
        with pytest.raises(FeatureNotSupportedError):
            await js.publish_many(subject, [b"a", b"b"], ttls=[None, "1m"])
        with pytest.raises(FeatureNotSupportedError):
            await js.publish_many_async(subject, [b"a"], ttls=["1h"])
        # Without a TTL the same calls go through.
        await js.publish(subject, b"plain")
        await (await js.publish_async(subject, b"plain"))
        await js.publish_many(subject, [b"a", b"b"], ttls=[None, None])
    finally:
        js._api.level = None
    state = (await (await js.stream(name)).info()).state
    assert state.messages == 4  # only the plain ones: nothing of the refused calls was sent


async def test_a_ttl_publish_to_a_2_11_server_goes_through(js: JetStreamContext) -> None:
    name = await _ttl_stream(js)
    js._api.level = 1  # nats-server 2.11
    try:
        ack = await js.publish(f"{name}.a", b"x", ttl=60)
    finally:
        js._api.level = None
    msg = await (await js.stream(name)).get_msg(ack.seq)
    assert msg.headers is not None
    assert msg.headers["Nats-TTL"] == "60"


@pytest.mark.parametrize("level", [0, 1, 3])
async def test_allow_batched_needs_2_14(js: JetStreamContext, level: int) -> None:
    """2.10 and 2.11 dropped the field silently, 2.12 refused it as unknown JSON."""
    name = unique_name("FLB")
    config = StreamConfig(
        name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, allow_batched=True
    )
    js._api.level = level
    try:
        for call in (js.create_stream, js.update_stream, js.create_or_update_stream):
            with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.14") as info:
                await call(config)
            assert info.value.feature == "fast batch publish (allow_batched)"
    finally:
        js._api.level = None
    assert name not in [n async for n in js.stream_names()]


async def test_a_flow_control_ack_policy_needs_2_14(js: JetStreamContext) -> None:
    """Older servers refused it as invalid JSON (an untyped APIError 10025)."""
    name = unique_name("FLC")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    config = ConsumerConfig(durable_name="fc", ack_policy=AckPolicy.FLOW_CONTROL)
    js._api.level = 3  # nats-server 2.12
    try:
        with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.14"):
            await stream.create_consumer(config)
    finally:
        js._api.level = None
    assert [c.name async for c in stream.list_consumers()] == []


async def test_an_increment_stored_as_a_plain_message_is_an_old_server(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    """The level unknown (the server never answers $JS.API.INFO, as when it is denied),
    a server without counters stores the increment as a plain message and acknowledges
    it without a total: that is FeatureNotSupportedError, not a malformed reply."""
    name = unique_name("FLN")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], allow_msg_counter=True, allow_direct=True)
    )

    def old_server(frame: Frame) -> list[Frame] | None:
        if frame.request == b"$JS.API.INFO":
            return []  # the level is never told
        if frame.request is not None and frame.request.startswith(f"{name}.".encode()):
            ack = json.loads(frame.payload)
            del ack["val"]  # what a 2.11 server answers
            return [frame.replace(payload=json.dumps(ack).encode())]
        return None

    async with RewritingProxy(nats_server.port, old_server) as proxy:
        context = await aiojetstream.connect(proxy.url)
        try:
            with pytest.raises(FeatureNotSupportedError, match=r"nats-server >= 2\.12") as info:
                await context.counter(name).add(f"{name}.hits", 5)
        finally:
            await context.close()
    assert context._api.level_unknown
    assert any("as a plain message" in note for note in info.value.__notes__)


async def test_the_level_probe_comes_out_of_the_calls_time(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    """A server that answers neither ``$JS.API.INFO`` (denied to the user, silently)
    nor the publish: the probe for the API level took up to 1 s on top of the
    publish's timeout (5 s for a 4 s timeout). It comes out of it."""
    name = await _ttl_stream(js)

    def silent(frame: Frame) -> list[Frame] | None:
        if frame.request in (b"$JS.API.INFO", f"{name}.a".encode()):
            return []
        return None

    async with RewritingProxy(nats_server.port, silent) as proxy:
        context = await aiojetstream.connect(proxy.url)
        try:
            began = time.monotonic()
            with pytest.raises(JetStreamTimeoutError):
                await context.publish(f"{name}.a", b"x", ttl=60, timeout=PUBLISH_TIMEOUT)
            assert time.monotonic() - began < PUBLISH_TIMEOUT + 0.6
        finally:
            await context.close()
    assert context._api.level_unknown

"""nats-py exceptions never reach the user raw: they become typed aiojetstream errors."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import nats
import pytest

import aiojetstream
from aiojetstream import (
    AckPolicy,
    ConnectionClosedError,
    ConsumerConfig,
    ConsumerCreateError,
    JetStreamContext,
    JetStreamError,
    JetStreamNotEnabledError,
    JetStreamTimeoutError,
    MessageDeleteError,
    NoRespondersError,
    ResourcesExceededError,
    RetentionPolicy,
    StreamConfig,
    StreamConfigError,
    StreamSource,
    TLSError,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name


async def test_no_jetstream_is_a_typed_error() -> None:
    async with (
        NatsServer(jetstream=False) as server,
        await aiojetstream.connect(server.url) as js,
    ):
        with pytest.raises(JetStreamNotEnabledError) as info:
            await js.account_info()
        assert info.value.code == 503
        with pytest.raises(JetStreamNotEnabledError):
            await js.create_stream(StreamConfig(name="X", subjects=["x"]))


async def test_a_publish_to_a_server_without_jetstream_says_so() -> None:
    """A publish nothing answers said only "no stream captures subject": on a server
    without JetStream that sent a new user off to create a stream."""
    async with (
        NatsServer(jetstream=False) as server,
        await aiojetstream.connect(server.url, timeout=1) as js,
    ):
        with pytest.raises(NoRespondersError) as sync:
            await js.publish("orders.new", b"1")
        sent = await js.publish_async("orders.new", b"1")
        with pytest.raises(NoRespondersError) as pipelined:
            await sent
        for info in (sync, pipelined):
            assert str(info.value).startswith("no stream captures subject 'orders.new': ")
            assert "a server without JetStream enabled answers the same" in str(info.value)
            assert "while it has no leader" in str(info.value)


async def test_timeouts_are_typed_and_bounded() -> None:
    async with (
        NatsServer() as server,
        await aiojetstream.connect(server.url, timeout=0.5) as js,
    ):
        await js.create_stream(StreamConfig(name="T", subjects=["t"]))
        server.freeze()
        try:
            with pytest.raises(JetStreamTimeoutError) as info:
                await js.account_info()
            assert isinstance(info.value, TimeoutError)
            with pytest.raises(JetStreamTimeoutError):
                await js.publish("t", b"x")
            with pytest.raises(JetStreamTimeoutError):
                await (await js.publish_async("t", b"x"))
        finally:
            server.thaw()
        # Recovered once the server runs again.
        assert (await js.publish("t", b"x", timeout=10)).stream == "T"


async def test_closed_connection_is_typed(nats_server: NatsServer) -> None:
    js = await aiojetstream.connect(nats_server.url)
    await js.close()
    calls = [
        js.account_info(),
        js.create_stream(StreamConfig(name="C", subjects=["c"])),
        js.stream("C"),
        js.publish("c", b"x"),
        js.publish_async("c", b"x"),
    ]
    for call in calls:
        with pytest.raises(ConnectionClosedError):
            await call


async def test_context_on_user_connection_does_not_close_it(nats_server: NatsServer) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        js = JetStreamContext(nc, timeout=2.0)
        info = await js.account_info()
        assert info.api.level >= 1
        await js.publish_async("nowhere.at.all", b"x")
        await js.close()
        assert nc.is_connected
        # The context no longer chains nats-py's connection callbacks.
        assert js._conn.listener_count() == 0
    finally:
        await nc.close()


async def test_unreachable_server_is_typed() -> None:
    with pytest.raises(JetStreamError):
        await aiojetstream.connect("nats://127.0.0.1:1", allow_reconnect=False, connect_timeout=1)


async def test_initial_connect_fails_fast() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ConnectionClosedError, match="could not connect"):
        await aiojetstream.connect("nats://127.0.0.1:1")
    # Two attempts 250 ms apart, not nats-py's 60 x 2 s; generous for a loaded machine.
    assert loop.time() - started < 20


async def test_tls_url_to_plaintext_server_is_refused(nats_server: NatsServer) -> None:
    with pytest.raises(TLSError, match="does not offer TLS"):
        await aiojetstream.connect(nats_server.url.replace("nats://", "tls://"))


async def test_comma_separated_urls(nats_server: NatsServer) -> None:
    async with await aiojetstream.connect(f"{nats_server.url}, nats://127.0.0.1:1") as js:
        assert (await js.account_info()).api.level >= 1
        # The user's reconnect policy applies after the first connection.
        assert js.nc.options["max_reconnect_attempts"] == 60


async def test_reconnect_options_are_kept(nats_server: NatsServer) -> None:
    async with await aiojetstream.connect(
        [nats_server.url], max_reconnect_attempts=5, reconnect_time_wait=0.5
    ) as js:
        assert js.nc.options["max_reconnect_attempts"] == 5
        assert js.nc.options["reconnect_time_wait"] == 0.5
        assert js.nc.options["ping_interval"] == 5


async def test_common_refusals_are_typed(js: JetStreamContext) -> None:
    """A consumer limit, a refused purge and refused consumer configs came back a bare APIError."""
    name = unique_name("REFUSE")
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], max_consumers=1, deny_purge=True)
    )
    await stream.create_consumer(ConsumerConfig(durable_name="one"))
    with pytest.raises(ResourcesExceededError) as limit:
        await stream.create_consumer(ConsumerConfig(durable_name="two"))
    assert limit.value.err_code == 10026
    with pytest.raises(MessageDeleteError) as purge:
        await stream.purge()
    assert purge.value.err_code == 10110
    other = unique_name("REFUSE")
    wide = await js.create_stream(StreamConfig(name=other, subjects=[f"{other}.>"]))
    with pytest.raises(ConsumerCreateError) as overlap:
        await wide.create_consumer(ConsumerConfig(filter_subjects=[f"{other}.a.>", f"{other}.a.b"]))
    assert overlap.value.err_code == 10138


async def test_mirror_replica_and_consumer_setting_refusals_are_typed(
    js: JetStreamContext,
) -> None:
    """Common config refusals came back a bare APIError: a mirror with subjects, replicas
    on a single server, a heartbeat on a pull consumer, a push consumer's max_waiting, a
    push consumer without acks on a work queue."""
    name = unique_name("REFUSE")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    refused_streams = {
        10034: StreamConfig(
            name=unique_name("MIR"), subjects=["mir.x"], mirror=StreamSource(name=name)
        ),
        10074: StreamConfig(name=unique_name("R3"), subjects=["r3.x"], num_replicas=3),
    }
    for err_code, config in refused_streams.items():
        with pytest.raises(StreamConfigError) as stream_error:
            await js.create_stream(config)
        assert stream_error.value.err_code == err_code
    queue = unique_name("WQ")
    await js.create_stream(
        StreamConfig(name=queue, subjects=[f"{queue}.>"], retention=RetentionPolicy.WORKQUEUE)
    )
    refused_consumers = {
        10088: (name, ConsumerConfig(durable_name="hb", idle_heartbeat=timedelta(seconds=5))),
        10080: (name, ConsumerConfig(deliver_subject="push.a", max_waiting=10)),
        10098: (queue, ConsumerConfig(deliver_subject="push.b", ack_policy=AckPolicy.NONE)),
    }
    for err_code, (stream, consumer) in refused_consumers.items():
        with pytest.raises(ConsumerCreateError) as consumer_error:
            await js.create_consumer(stream, consumer)
        assert consumer_error.value.err_code == err_code

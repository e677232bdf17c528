"""The client over a ``ws://`` connection (nats-py's websocket transport, aiohttp).

Requests (API calls, acknowledged publishes) written straight to a websocket
transport waited in it until something else flushed it (the next PING, up to the
ping interval): the default 5 s timeout failed them.
"""

from __future__ import annotations

import asyncio
import ssl

import pytest

import aiojetstream
from aiojetstream import StorageType, StreamConfig, TLSError
from aiojetstream.testing import NatsServer
from aiojetstream.testing import _free_port as free_port
from helpers import unique_name


# nats-py 2.16 passes aiohttp a float timeout, which aiohttp 3.10+ deprecates.
@pytest.mark.filterwarnings("ignore:parameter 'timeout' of type 'float':DeprecationWarning")
async def test_requests_over_websocket_are_answered_at_once() -> None:
    port = free_port()
    async with NatsServer(config={"websocket": {"port": port, "no_tls": True}}) as server:
        assert server.url  # the TCP listener is up; the websocket one beside it
        js = await aiojetstream.connect(f"ws://127.0.0.1:{port}", ping_interval=60)
        try:
            name = unique_name("WS")
            await js.create_stream(
                StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
            )
            loop = asyncio.get_running_loop()
            for i in range(5):
                start = loop.time()
                await js.account_info(timeout=3)
                ack = await js.publish(f"{name}.x", b"%d" % i, timeout=3)
                assert ack.seq == i + 1
                # Milliseconds when sent at once; the ping interval (60 s) otherwise.
                took = loop.time() - start
                assert took < 2, f"round {i}: {took:.2f} s"
        finally:
            await js.close()


@pytest.mark.filterwarnings("ignore:parameter 'timeout' of type 'float':DeprecationWarning")
async def test_a_tls_option_refuses_a_plaintext_websocket() -> None:
    """``ws://`` is never upgraded: with a TLS option it is refused before CONNECT."""
    port = free_port()
    async with NatsServer(
        jetstream=False, config={"websocket": {"port": port, "no_tls": True}}
    ) as server:
        assert server.url
        with pytest.raises(TLSError, match="plaintext websocket"):
            await asyncio.wait_for(
                aiojetstream.connect(
                    f"ws://127.0.0.1:{port}", tls=ssl.create_default_context(), token="s3cret"
                ),
                10,
            )

"""One-shot reads and watches of a server that stops answering end within their timeout.

Out of time, the read closes its ordered consumer. The close waited for the
consumer's delete (up to 2 s more) from a server that would not answer it
either: ``kv.keys(timeout=0.5)`` raised after 2.5 s, a watch's start after the
context's timeout plus 2 s, an object read stalled mid-object after its
timeout plus 2 s. The delete is now sent without waiting: once the server
answers again the consumer goes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import aiojetstream
from aiojetstream import JetStreamTimeoutError, KeyValueConfig, ObjectStoreConfig
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until
from proxy import DroppingProxy

#: The calls' timeout, the context's (a watch's start), and what an error may take
#: beyond its timeout on a loaded machine (the clean-up waited 2 s more).
TIMEOUT, CONTEXT_TIMEOUT, MARGIN = 0.5, 3.0, 1.0


async def _times_out(call: Callable[[], Awaitable[Any]], timeout: float = TIMEOUT) -> None:
    began = time.monotonic()
    with pytest.raises(JetStreamTimeoutError):
        await call()
    assert time.monotonic() - began < timeout + MARGIN


async def test_reads_of_a_hung_server_end_in_their_time() -> None:
    async with NatsServer(jetstream=True) as server:
        js = await aiojetstream.connect(server.url, timeout=CONTEXT_TIMEOUT)
        try:
            kv = await js.create_key_value(KeyValueConfig(bucket="HUNG"))
            await kv.put("k", b"v")
            store = await js.create_object_store(ObjectStoreConfig(bucket="HUNG"))
            await store.put("o", bytes(300_000), chunk_size=1000)
            reading = await store.get("o", timeout=TIMEOUT)
            assert len(await reading.__anext__()) == 1000

            async def keys() -> list[str]:
                return [k async for k in kv.keys(timeout=TIMEOUT)]

            async def watch() -> object:
                async with kv.watch() as watcher:
                    return await watcher.__anext__()

            async def listing() -> list[object]:
                return [info async for info in store.list(timeout=TIMEOUT)]

            server.freeze()
            try:
                await _times_out(keys)
                await _times_out(lambda: kv.history("k", timeout=TIMEOUT))
                await _times_out(watch, CONTEXT_TIMEOUT)  # its start: the context's timeout
                await _times_out(listing)
                await _times_out(reading.read)  # stalled mid-object
            finally:
                server.thaw()

            # The deletes were sent: once the server reads them, no consumer is left.
            async def none_left() -> bool:
                names = [n async for n in kv.stream.consumer_names()]
                names += [n async for n in store.stream.consumer_names()]
                return not names

            await wait_until(none_left, timeout=10)
        finally:
            await js.close()


async def test_a_consumer_created_after_its_delete_is_deleted_again(
    nats_server: NatsServer,
) -> None:
    """Out of time, a read queues its consumer's delete without waiting. The server's
    API workers may serve that delete before the creation sent ahead of it (a proxy
    makes it so here: the creation is held back until the delete went through and
    the test's own publish after it): "not found", then the consumer was created,
    and it stayed for its inactive threshold (5 min; 6 in 80 reads of a server
    slow for 0.5 s). Once the creation is answered, the delete is queued again."""
    bucket = unique_name("REDEL")
    async with DroppingProxy(nats_server.port) as proxy:
        js = await aiojetstream.connect(proxy.url, timeout=CONTEXT_TIMEOUT)
        try:
            kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
            await kv.put("k", b"v")
            stream = f"KV_{bucket}"
            proxy.hold(f"$JS.API.CONSUMER.CREATE.{stream}.", "release.")

            async def keys() -> list[str]:
                return [k async for k in kv.keys(timeout=TIMEOUT)]

            await _times_out(keys)  # its creation held back: unanswered in time
            delete = f"$JS.API.CONSUMER.DELETE.{stream}."
            await wait_until(lambda: any(s.startswith(delete) for s in proxy.passed), timeout=10)
            await kv.stream.info()  # the delete was served ("not found") by now
            await js.nc.publish("release.now", b"")  # then the creation goes
            await js.nc.flush()
            assert proxy.held == 1

            async def none_left() -> bool:
                return not [n async for n in kv.stream.consumer_names()]

            await wait_until(none_left, timeout=10)
        finally:
            await js.close()

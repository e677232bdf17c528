"""The ordered consumer after a disconnect that lost deliveries on their way.

A server cuts a slow consumer's connection with deliveries in flight (or the
network does): the consumer counts them delivered, they never arrive. A proxy
makes it to order: it passes the first deliveries, drops the rest of the burst,
then cuts the connection (the client reconnects through it at once).

A fetch that ended with the disconnect left the consumer as it was: the next
fetch (the documented catch-up loop) found nothing more and ended, 15 of 20
messages skipped without an error. A ``messages()`` run kept pulling from the
same consumer after the reconnect and learnt of the loss only at its next idle
heartbeat (15 s; a one-shot read, a key-value history, an object get, gave up
first with a false timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiojetstream
from aiojetstream import (
    DisconnectedError,
    JetStreamContext,
    OrderedConsumer,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name
from proxy import Frame, RewritingProxy

#: Messages in the stream, and how many arrive before the rest of the burst is lost.
COUNT, PASSED = 20, 5
#: The run must recover long before its idle heartbeat (15 s) would tell it, or
#: the API timeout of a look-up lost with a connection (a stale one held the reset).
RECOVERY, API_TIMEOUT = 8.0, 10.0


class LossyCut:
    """Pass :data:`PASSED` deliveries, drop the rest of the burst, then cut (once).

    ``twice``: then also lose the answer to the first consumer look-up after the
    reconnect, and cut again (a link that drops twice in a row).
    """

    def __init__(self, *, twice: bool = False) -> None:
        self.proxy: RewritingProxy | None = None
        self.passed = 0
        self.dropping = False
        self.cuts = 0
        self.twice = twice

    def __call__(self, frame: Frame) -> list[Frame] | None:
        if (
            self.twice
            and self.cuts == 1
            and frame.request is not None
            and frame.request.startswith(b"$JS.API.CONSUMER.INFO.")
        ):
            self.twice = False
            asyncio.get_running_loop().call_soon(self._cut)
            return []  # the look-up's answer, lost with the connection
        if not frame.reply.startswith(b"$JS.ACK.") or self.cuts:
            return None
        if self.passed < PASSED:
            self.passed += 1
            return None
        if not self.dropping:
            self.dropping = True
            asyncio.get_running_loop().call_soon(self._cut)
        return []  # lost on the way

    def _cut(self) -> None:
        assert self.proxy is not None
        self.cuts += 1
        self.proxy.cut()


async def _stream(js: JetStreamContext) -> str:
    name = unique_name("OLOST")
    await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    await js.publish_many(f"{name}.x", [b"m%d" % i for i in range(1, COUNT + 1)])
    return name


async def _through_a_lossy_cut(
    js: JetStreamContext,
    nats_server: NatsServer,
    read: Callable[[OrderedConsumer], Awaitable[list[int]]],
    *,
    twice: bool = False,
) -> None:
    """``read`` the stream's messages (their sequences) through a :class:`LossyCut`."""
    name = await _stream(js)
    lossy = LossyCut(twice=twice)
    async with RewritingProxy(nats_server.port, lossy) as proxy:
        lossy.proxy = proxy
        context = await aiojetstream.connect(
            proxy.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1, timeout=API_TIMEOUT
        )
        try:
            got = await read(await context.ordered_consumer(name))
        finally:
            await context.close()
    assert lossy.cuts == (2 if twice else 1)
    assert got == list(range(1, COUNT + 1))


async def test_the_catch_up_loop_reads_what_a_disconnect_lost(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    async def catch_up(oc: OrderedConsumer) -> list[int]:
        read: list[int] = []
        disconnects = 0
        while True:  # the documented loop, and once more after a disconnect
            try:
                msgs = await (await oc.fetch_no_wait(100)).collect()
            except DisconnectedError:
                disconnects += 1
                assert disconnects < 5
                continue
            if not msgs:
                return read
            read += [m.metadata.sequence.stream for m in msgs]

    await _through_a_lossy_cut(js, nats_server, catch_up)


async def _run(oc: OrderedConsumer) -> list[int]:
    read: list[int] = []
    async with oc.messages() as it:
        async for msg in it:
            read.append(msg.metadata.sequence.stream)
            if len(read) == COUNT:
                break
    return read


async def test_a_run_resets_at_the_reconnect_that_lost_deliveries(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    await _through_a_lossy_cut(js, nats_server, lambda oc: asyncio.wait_for(_run(oc), RECOVERY))


async def test_a_look_up_lost_with_a_second_cut_does_not_hold_the_reset(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    """The look-up asked after the first reconnect lost its answer to a second cut: a
    new look-up after the next reconnect said to reset at once, but the stale one
    stayed until its API timeout, and the reset (which closes the run first) waited
    for it: a stall of the API timeout (a one-shot read failed with a false timeout)."""
    await _through_a_lossy_cut(
        js, nats_server, lambda oc: asyncio.wait_for(_run(oc), RECOVERY), twice=True
    )

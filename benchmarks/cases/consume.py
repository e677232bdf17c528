"""Group ``consume``: ``messages()``, ``consume()``, ``fetch()`` and the ordered consumer.

All read one memory stream (:data:`CONSUME_STREAM`, filled by
:func:`create_consume_stream`) through a fresh consumer each round:

* against nats-py's ``pull_subscribe`` + ``fetch(1000)`` loop (``messages_ack_none``,
  ``messages_ack_explicit``, ``consume_callback``, ``fetch_loop``) and its push
  ordered consumer (``ordered``);
* against nats-py's core subscription (``*_vs_core``, :func:`core_subscription_rate`);
* against the bare-socket reader (``messages_vs_socket``, ``bare_reader.py``):
  what the server delivers, with the bare reader's pulls in flight (see
  :data:`SOCKET_WINDOW`), as the publish rows use the same window.

(The typed and instrumented rows of the group are in :mod:`cases.typed` and
:mod:`cases.otel`.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import bare_reader
from nats.aio.msg import Msg as NatsMsg

from aiojetstream import AckPolicy, ConsumerConfig, JetStreamContext, Msg, StorageType, StreamConfig

from .measure import PAYLOAD, Libraries, fill, measure_rounds, rate
from .report import Row

CONSUME_STREAM = "BCONS"
CONSUME_SUBJECT = "bcons.data"

#: The messages ``messages()`` holds at each of its pulls in ``messages_vs_socket``: the
#: read it is going through (605-690 of this size, measured by instrumenting the
#: driver, with max 2,000 and threshold 1,000).
HELD_AT_PULL = 600
#: ``messages(max_messages=, threshold_messages=)`` of ``messages_vs_socket``: the bare
#: reader's pulls in flight. It sends a pull of 1,000 whenever one of its two pulls has
#: been *received*, so 1,000 are still on their way then. ADR-37's window counts a
#: message until it is *consumed*, and at each pull ``messages()`` holds about
#: :data:`HELD_AT_PULL` of them: a threshold of 1,000 would leave only about 400 on
#: their way. Pulls of 1,000 (max minus threshold, as the bare reader's) sent with
#: 1,000 + HELD_AT_PULL unconsumed leave about 1,000 on their way, as there.
SOCKET_WINDOW = (
    bare_reader.BATCH * bare_reader.IN_FLIGHT + HELD_AT_PULL,
    bare_reader.BATCH + HELD_AT_PULL,
)


async def create_consume_stream(js: JetStreamContext, count: int) -> None:
    """The stream the group reads (the ``memory`` group's buffer too), ``count`` messages."""
    await js.create_stream(
        StreamConfig(name=CONSUME_STREAM, subjects=[CONSUME_SUBJECT], storage=StorageType.MEMORY)
    )
    await fill(js, CONSUME_SUBJECT, count)


class Consumers:
    """Creates a fresh consumer on the consumption stream for every round."""

    def __init__(self, libs: Libraries) -> None:
        self.libs = libs
        self.serial = 0

    async def create(self, ack: AckPolicy) -> str:
        self.serial += 1
        name = f"c{self.serial}"
        await self.libs.js.create_consumer(
            CONSUME_STREAM, ConsumerConfig(name=name, ack_policy=ack)
        )
        return name

    async def delete(self, name: str) -> None:
        await self.libs.js.delete_consumer(CONSUME_STREAM, name)

    async def nats_fetch_loop(
        self, n: int, ack: AckPolicy, on_msg: Callable[[NatsMsg], Awaitable[None]] | None = None
    ) -> float:
        """nats-py: ``pull_subscribe`` (bound to a fresh consumer) and a fetch(1000) loop."""
        name = await self.create(ack)
        sub = await self.libs.theirs.pull_subscribe_bind(name, stream=CONSUME_STREAM)
        got = 0
        start = time.perf_counter()
        while got < n:
            for m in await sub.fetch(min(1000, n - got), timeout=5):
                got += 1
                if on_msg is not None:
                    await on_msg(m)
                elif ack is AckPolicy.EXPLICIT:
                    await m.ack()
        value = rate(n, start)
        await sub.unsubscribe()
        await self.delete(name)
        return value


async def bench_consume(libs: Libraries, url: str, count: int, rounds: int) -> list[Row]:
    """messages() without and with acks, consume(), fetch() and the ordered consumer.

    One round measures every side once: ours, nats-py's, the core
    subscription's (the baseline of the ``*_vs_core`` rows) and the
    bare-socket reader's through one AckNone consumer (``messages_vs_socket``),
    so each row pairs figures taken in the same round.
    """
    js, theirs = libs.js, libs.theirs
    consumers = Consumers(libs)

    async def ours_messages(n: int, ack: AckPolicy, window: tuple[int, int] | None = None) -> float:
        name = await consumers.create(ack)
        consumer = await js.consumer(CONSUME_STREAM, name)
        got = 0
        value = 0.0
        max_messages, threshold = window or (None, None)
        start = time.perf_counter()
        async with consumer.messages(max_messages=max_messages, threshold_messages=threshold) as it:
            async for msg in it:
                if ack is AckPolicy.EXPLICIT:
                    await msg.ack()
                got += 1
                if got >= n:
                    value = rate(n, start)  # before closing, as for nats-py
                    break
        await consumers.delete(name)
        return value

    async def ours_none(n: int) -> float:
        return await ours_messages(n, AckPolicy.NONE)

    async def ours_window(n: int) -> float:
        return await ours_messages(n, AckPolicy.NONE, SOCKET_WINDOW)

    async def base_none(n: int) -> float:
        return await consumers.nats_fetch_loop(n, AckPolicy.NONE)

    async def ours_explicit(n: int) -> float:
        return await ours_messages(n, AckPolicy.EXPLICIT)

    async def base_explicit(n: int) -> float:
        return await consumers.nats_fetch_loop(n, AckPolicy.EXPLICIT)

    async def core(n: int) -> float:
        return await core_subscription_rate(libs, n)

    async def socket(n: int) -> float:
        return await bare_reader.read(url, CONSUME_STREAM, n, consumers=1)

    async def ours_consume(n: int) -> float:
        name = await consumers.create(AckPolicy.NONE)
        consumer = await js.consumer(CONSUME_STREAM, name)
        done = asyncio.get_running_loop().create_future()
        got = 0

        async def handler(msg: Msg) -> None:
            nonlocal got
            got += 1
            if got == n:
                done.set_result(None)

        start = time.perf_counter()
        ctx = await consumer.consume(handler)
        await done
        value = rate(n, start)
        ctx.stop()
        await ctx.closed()
        await consumers.delete(name)
        return value

    async def base_consume(n: int) -> float:
        got = 0

        async def handler(msg: NatsMsg) -> None:
            nonlocal got
            got += 1

        return await consumers.nats_fetch_loop(n, AckPolicy.NONE, handler)

    async def ours_fetch(n: int) -> float:
        name = await consumers.create(AckPolicy.NONE)
        consumer = await js.consumer(CONSUME_STREAM, name)
        got = 0
        start = time.perf_counter()
        while got < n:
            batch = await consumer.fetch(min(1000, n - got), expires=5)
            async for _ in batch:
                got += 1
        value = rate(n, start)
        await consumers.delete(name)
        return value

    async def ours_ordered(n: int) -> float:
        oc = await js.ordered_consumer(CONSUME_STREAM)
        got = 0
        value = 0.0
        start = time.perf_counter()
        async with oc.messages() as it:
            async for _ in it:
                got += 1
                if got >= n:
                    value = rate(n, start)  # before closing (deletes the consumer)
                    break
        return value

    async def base_ordered(n: int) -> float:
        done = asyncio.get_running_loop().create_future()
        got = 0

        async def handler(msg: NatsMsg) -> None:
            nonlocal got
            got += 1
            if got == n and not done.done():
                done.set_result(None)

        start = time.perf_counter()
        sub = await theirs.subscribe(
            CONSUME_SUBJECT, stream=CONSUME_STREAM, ordered_consumer=True, cb=handler
        )
        await done
        value = rate(n, start)
        await sub.unsubscribe()
        return value

    f = await measure_rounds(
        {
            "base_none": base_none,
            "ours_none": ours_none,
            "core": core,
            "socket": socket,
            "ours_window": ours_window,
            "ours_explicit": ours_explicit,
            "base_explicit": base_explicit,
            "ours_consume": ours_consume,
            "base_consume": base_consume,
            "ours_fetch": ours_fetch,
            "ours_ordered": ours_ordered,
            "base_ordered": base_ordered,
        },
        count,
        rounds,
    )
    unit = "msgs/s"
    return [
        Row("messages_ack_none", f["ours_none"], f["base_none"], unit),
        Row("messages_ack_explicit", f["ours_explicit"], f["base_explicit"], unit),
        Row("messages_ack_none_vs_core", f["ours_none"], f["core"], unit),
        Row("messages_ack_explicit_vs_core", f["ours_explicit"], f["core"], unit),
        Row("messages_vs_socket", f["ours_window"], f["socket"], unit),
        Row("consume_callback", f["ours_consume"], f["base_consume"], unit),
        Row("consume_vs_core", f["ours_consume"], f["core"], unit),
        Row("fetch_loop", f["ours_fetch"], f["base_none"], unit),
        Row("ordered", f["ours_ordered"], f["base_ordered"], unit),
    ]


async def core_subscription_rate(libs: Libraries, count: int) -> float:
    """nats-py core ``subscribe(cb=...)`` receive rate of ``count`` messages.

    A second, raw connection writes all ``count`` PUBs at once (next to no CPU),
    so the figure is the subscriber's receive rate.
    """
    nc = libs.nc
    subject = "bcore.data"
    done = asyncio.get_running_loop().create_future()
    got = 0

    async def handler(msg: NatsMsg) -> None:
        nonlocal got
        got += 1
        if got == count:
            done.set_result(None)

    sub = await nc.subscribe(subject, cb=handler, pending_msgs_limit=0, pending_bytes_limit=0)
    await nc.flush()
    url = nc.connected_url
    assert url is not None
    assert url.hostname is not None
    assert url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
    while (await reader.readline()).strip() != b"PONG":
        pass
    pub = b"PUB %b %d\r\n%b\r\n" % (subject.encode(), len(PAYLOAD), PAYLOAD)
    blob = pub * count
    start = time.perf_counter()
    writer.write(blob)
    await done
    value = rate(count, start)
    writer.close()
    await writer.wait_closed()
    await sub.unsubscribe()
    return value

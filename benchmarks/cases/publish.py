"""Group ``publish``: one-by-one and pipelined publishing, and ``publish_many``.

* ``publish_mem``, ``publish_file``: ``await js.publish()`` one by one into a
  memory (file) stream, against nats-py's ``await js.publish()``.
* ``publish_async_mem``, ``publish_async_file``: ``publish_async()`` pipelined
  plus the completion barrier, ten times as many messages, against nats-py's.
* ``publish_many_vs_socket``: ``publish_many`` against the bare-socket
  publisher (``bare_publisher.py``): what the server stores and acknowledges.

(The instrumented ``publish_async_otel_vs_plain`` row is in :mod:`cases.otel`.)
"""

from __future__ import annotations

import time

import bare_publisher

from aiojetstream import StorageType, StreamConfig
from aiojetstream._context import DEFAULT_MAX_PENDING

from .measure import PAYLOAD, Libraries, compare, rate
from .report import Row

PUBLISH_MANY_STREAM = "BPUBMANY"
PUBLISH_MANY_SUBJECT = "bpubmany.data"


async def bench_publish(libs: Libraries, storage: str, count: int, rounds: int) -> list[Row]:
    """Sequential awaited publishes, then pipelined publish_async + completion barrier."""
    short = "mem" if storage == "memory" else "file"
    name = f"BPUB_{short.upper()}"
    subject = f"bpub.{short}"
    js, theirs = libs.js, libs.theirs
    await js.create_stream(
        StreamConfig(name=name, subjects=[subject], storage=StorageType(storage), max_msgs=100_000)
    )

    async def ours_seq(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await js.publish(subject, PAYLOAD)
        return rate(n, start)

    async def base_seq(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await theirs.publish(subject, PAYLOAD)
        return rate(n, start)

    async def ours_async(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await js.publish_async(subject, PAYLOAD)
        await js.publish_async_complete(timeout=120)
        return rate(n, start)

    async def base_async(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await theirs.publish_async(subject, PAYLOAD)
        await theirs.publish_async_completed()
        return rate(n, start)

    try:
        seq = await compare(ours_seq, base_seq, count, rounds)
        pipelined = await compare(ours_async, base_async, count * 10, rounds)
    finally:
        await js.delete_stream(name)
    return [
        Row(f"publish_{short}", *seq, "msgs/s"),
        Row(f"publish_async_{short}", *pipelined, "msgs/s"),
    ]


async def bench_publish_many(libs: Libraries, url: str, count: int, rounds: int) -> list[Row]:
    """``publish_many`` of ``count`` 128-byte messages against the bare-socket publisher.

    Both publish into the same memory stream, purged before every round (not
    timed), with the same window (the library's default
    ``publish_async_max_pending``) over one connection; every round checks
    that the stream stored all of them.
    """
    js = libs.js
    subject = PUBLISH_MANY_SUBJECT
    window = js._publisher.max_pending
    if window != DEFAULT_MAX_PENDING:
        raise RuntimeError(f"the context's publish window is {window}, not the default")
    await js.create_stream(
        StreamConfig(name=PUBLISH_MANY_STREAM, subjects=[subject], storage=StorageType.MEMORY)
    )
    payloads = [PAYLOAD] * count
    stream = await js.stream(PUBLISH_MANY_STREAM)

    async def stored(n: int, what: str) -> None:
        if (got := (await stream.info()).state.messages) != n:
            raise RuntimeError(f"{what} stored {got} of {n} messages")

    async def ours(n: int) -> float:
        await stream.purge()
        batch = payloads[:n]
        start = time.perf_counter()
        await js.publish_many(subject, batch)
        value = rate(n, start)
        await stored(n, "publish_many")
        return value

    async def socket(n: int) -> float:
        await stream.purge()
        value = await bare_publisher.publish(url, subject, n, window=window)
        await stored(n, "the bare-socket publisher")
        return value

    try:
        figures = await compare(ours, socket, count, rounds)
    finally:
        await js.delete_stream(PUBLISH_MANY_STREAM)
    return [Row("publish_many_vs_socket", *figures, "msgs/s")]

"""Group ``memory``: RSS growth, measured in fresh interpreters (``run.py --child``).

* ``rss_bytes_per_buffered_msg``: RSS growth per message of a full, unconsumed
  ``messages(max_messages=N)`` buffer (:func:`child_buffer`, over the
  ``consume`` group's stream).
* ``rss_growth_1m_msgs_mib``: the largest RSS growth while consuming (and
  acking) 1M messages with default settings (:func:`child_growth`).

No baseline: a single measurement each.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from pathlib import Path

import aiojetstream
from aiojetstream import AckPolicy, ConsumerConfig, StorageType, StreamConfig

from .consume import CONSUME_STREAM
from .measure import Libraries, child, fill
from .report import Row

MIB = 1024 * 1024
GROWTH_STREAM = "BGROW"
GROWTH_SUBJECT = "bgrow.data"


async def bench_memory(libs: Libraries, url: str, buffer: int, growth: int) -> list[Row]:
    """Both rows; deletes the ``consume`` group's stream (measured by then)."""
    js = libs.js
    buffered = child("buffer", url, buffer)
    rows = [Row("rss_bytes_per_buffered_msg", [buffered["value"]], None, "bytes")]
    await js.delete_stream(CONSUME_STREAM)
    await js.create_stream(
        StreamConfig(name=GROWTH_STREAM, subjects=[GROWTH_SUBJECT], storage=StorageType.MEMORY)
    )
    await fill(js, GROWTH_SUBJECT, growth)
    grown = child("growth", url, growth)
    rows.append(Row("rss_growth_1m_msgs_mib", [grown["value"]], None, "MiB"))
    await js.delete_stream(GROWTH_STREAM)
    return rows


def rss() -> int:
    """This process's resident set size in bytes (Linux: current, elsewhere: peak)."""
    statm = Path("/proc/self/statm")
    if statm.exists():
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


async def child_buffer(url: str, count: int) -> dict[str, float]:
    """RSS per message of a full, unconsumed ``messages(max_messages=count)`` buffer."""
    js = await aiojetstream.connect(url)
    try:
        name = "rssbuf"
        consumer = await js.create_consumer(
            CONSUME_STREAM, ConsumerConfig(name=name, ack_policy=AckPolicy.NONE)
        )
        batch = await consumer.fetch(10, expires=1)  # warm every code path up
        async for _ in batch:
            pass
        await asyncio.sleep(0.1)
        gc.collect()
        before = rss()
        stats = js.nc.stats
        received = stats["in_msgs"]
        async with consumer.messages(max_messages=count) as it:
            deadline = time.monotonic() + 120
            while stats["in_msgs"] - received < count:
                if time.monotonic() > deadline:
                    raise TimeoutError("the buffer did not fill up")
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            gc.collect()
            grown = rss() - before
            del it
        await js.delete_consumer(CONSUME_STREAM, name)
        return {"value": grown / count}
    finally:
        await js.close()


async def child_growth(url: str, count: int) -> dict[str, float]:
    """Largest RSS growth while consuming ``count`` messages with default settings (acked)."""
    js = await aiojetstream.connect(url)
    try:
        consumer = await js.create_consumer(GROWTH_STREAM, ConsumerConfig(name="growth"))
        batch = await consumer.fetch(10, expires=1)
        async for msg in batch:
            await msg.ack()
        gc.collect()
        before = peak = rss()
        got = 10
        async with consumer.messages() as it:
            async for msg in it:
                await msg.ack()
                got += 1
                if got % 50_000 == 0:
                    peak = max(peak, rss())
                if got >= count:
                    break
        peak = max(peak, rss())
        await js.delete_consumer(GROWTH_STREAM, "growth")
        return {"value": (peak - before) / MIB}
    finally:
        await js.close()

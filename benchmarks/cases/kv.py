"""Group ``kv``: key-value puts and gets, the same bucket for both libraries.

* ``kv_put``: sequential ``kv.put()`` (ops/s) against nats-py's.
* ``kv_get_p50``, ``kv_get_p99``: ``kv.get()`` latency percentiles (µs) against
  nats-py's (a direct get on the same bucket).
* ``kv_get_p50_raw_socket``: the same direct gets from a bare asyncio stream
  (:func:`raw_direct_get`, no client at all), for information.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Final

from aiojetstream import KeyValueConfig

from .measure import PAYLOAD, Libraries, compare, percentile, rate
from .report import Row

KV_BUCKET = "BKV"
KV_KEYS = 100


async def bench_kv(libs: Libraries, url: str, count: int, rounds: int) -> list[Row]:
    """Sequential puts (ops/s) and gets (latency percentiles), same bucket for both."""
    js = libs.js
    kv = await js.create_key_value(KeyValueConfig(bucket=KV_BUCKET))
    theirs = await libs.theirs.key_value(KV_BUCKET)
    keys = [f"key{i}" for i in range(KV_KEYS)]

    async def ours_put(n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            await kv.put(keys[i % KV_KEYS], PAYLOAD)
        return rate(n, start)

    async def base_put(n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            await theirs.put(keys[i % KV_KEYS], PAYLOAD)
        return rate(n, start)

    rows = [Row("kv_put", *await compare(ours_put, base_put, count, rounds), "ops/s")]

    async def ours_get(n: int) -> list[float]:
        out: list[float] = []
        clock = time.perf_counter
        for i in range(n):
            t = clock()
            await kv.get(keys[i % KV_KEYS])
            out.append(clock() - t)
        return out

    async def base_get(n: int) -> list[float]:
        out: list[float] = []
        clock = time.perf_counter
        for i in range(n):
            t = clock()
            await theirs.get(keys[i % KV_KEYS])
            out.append(clock() - t)
        return out

    floor_get, floor_close = await raw_direct_get(url, KV_BUCKET, keys)

    # Each round's latencies of each side, as in measure_rounds (which takes one figure).
    samples: dict[str, list[list[float]]] = {"baseline": [], "ours": [], "floor": []}
    sides = {"baseline": base_get, "ours": ours_get, "floor": floor_get}
    try:
        for get in sides.values():
            await get(count // 10)
        for i in range(rounds):
            for name in sides if i % 2 == 0 else reversed(list(sides)):
                samples[name].append(await sides[name](count))
    finally:
        floor_close()

    def quantile(name: str, q: float) -> list[float]:
        return [percentile(latencies, q) * 1e6 for latencies in samples[name]]

    rows.append(Row("kv_get_p50", quantile("ours", 0.5), quantile("baseline", 0.5), "µs"))
    rows.append(Row("kv_get_p99", quantile("ours", 0.99), quantile("baseline", 0.99), "µs"))
    # For information: a bare asyncio socket sending the same direct gets (no client).
    rows.append(
        Row("kv_get_p50_raw_socket", quantile("floor", 0.5), quantile("baseline", 0.5), "µs")
    )
    await js.delete_key_value(KV_BUCKET)
    return rows


_PING: Final = b"PING\r\n"
_PONG: Final = b"PONG\r\n"


async def raw_direct_get(
    url: str, bucket: str, keys: list[str]
) -> tuple[Callable[[int], Awaitable[list[float]]], Callable[[], None]]:
    """The floor of a KV get on this machine: one asyncio stream, write, read to the reply's end.

    No client at all: a ``PUB`` of the direct get written straight to the
    socket and the reply read until its payload arrived (the payload is known).
    """
    host, _, port = url.removeprefix("nats://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    await reader.readline()  # INFO
    writer.write(
        b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
        b'"protocol":1}\r\nSUB _RAW.* 1\r\nPING\r\n'
    )
    await reader.readuntil(b"PONG\r\n")
    requests = [
        b"PUB $JS.API.DIRECT.GET.KV_%b.$KV.%b.%b _RAW.1 0\r\n\r\n"
        % (bucket.encode(), bucket.encode(), key.encode())
        for key in keys
    ]
    tail = PAYLOAD + b"\r\n"

    async def get(n: int) -> list[float]:
        out: list[float] = []
        clock = time.perf_counter
        for i in range(n):
            t = clock()
            writer.write(requests[i % len(requests)])
            data = await reader.read(65536)
            while True:
                if _PING in data:
                    # The server's keep-alive, around the reply: answer it, or the
                    # server closes the connection as stale. (Unanswered, the read
                    # waited for a reply already read, then spun on EOF for good.)
                    writer.write(_PONG * data.count(_PING))
                    data = data.replace(_PING, b"")
                if data.endswith(tail):
                    break
                more = await reader.read(65536)
                if not more:
                    raise ConnectionError("the server closed the raw connection")
                data += more
            out.append(clock() - t)
        return out

    return get, writer.close

"""The soak (RELIABILITY.md L2, shortened): mixed load on a three-node cluster with periodic faults.

``make soak`` runs it for 10 minutes (``--minutes``), injecting a fault every
30 s (``--fault-every``), rotating through: SIGKILL of the stream leader
(restarted on the same store a few seconds later), a stream-leader stepdown, a
consumer-leader stepdown, a SIGTERM + restart of a follower and a short
SIGSTOP of the client's first node. Meanwhile:

* a sequential publisher stores ``m<i>`` with ``Nats-Msg-Id: m<i>``, retrying
  the same id until it is acknowledged;
* an asynchronous publisher sends bursts through ``publish_async`` and
  republishes (same id) whatever failed;
* ``consume()`` with explicit acks reads everything (at least once);
* a key-value writer puts 100 keys in turn while a watcher follows them.

At the end it checks: every acknowledged message is on every replica
(``readback``) and was delivered to the consumer, each message id is stored
once, the watcher and ``get`` agree with the last acknowledged value of every
key, and the process's RSS after the warm-up stays within 10 % of its median.
Figures are printed as one JSON object (and the exit code is non-zero when a
check fails).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from array import array
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (helpers, harness)

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    JetStreamContext,
    JetStreamError,
    KeyValueConfig,
    Msg,
    StorageType,
    WrongLastSequenceError,
    connect,
)
from aiojetstream.testing import NatsCluster
from helpers import wait_until
from reliability.harness import (
    Acked,
    consumer_leader,
    create_r3_stream,
    created,
    readback,
    stepdown_consumer,
    stepdown_stream,
    stream_leader,
    wait_stream_leader,
)

logger = logging.getLogger("soak")

STREAM = "SOAK"
SUBJECT = "soak.data"
DURABLE = "reader"
BUCKET = "SOAKKV"
KEYS = 100
PAGE = 4096


def rss_bytes() -> int:
    """The process's resident set size (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Load:
    """The workload's state, kept compact so it does not show up as RSS growth."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.next_index = 0
        self.seq_of = array("q")  # index -> acknowledged sequence (0 = not yet)
        self.delivered = bytearray()  # bitmap by stream sequence
        self.redelivered = 0
        self.publish_errors = 0
        self.kv_acked: dict[str, int] = {}  # key -> last acknowledged value
        self.kv_errors = 0
        self.watched: dict[str, int] = {}
        self.watch_markers = 0
        self.watch_revisions_ok = True
        self.consume_reports: dict[str, int] = {}

    def new_index(self) -> int:
        i = self.next_index
        self.next_index += 1
        self.seq_of.append(0)
        return i

    def mark_delivered(self, seq: int) -> None:
        byte, bit = divmod(seq, 8)
        if byte >= len(self.delivered):
            self.delivered.extend(bytes(byte - len(self.delivered) + 1024))
        if self.delivered[byte] & (1 << bit):
            self.redelivered += 1
        self.delivered[byte] |= 1 << bit

    def was_delivered(self, seq: int) -> bool:
        byte, bit = divmod(seq, 8)
        return byte < len(self.delivered) and bool(self.delivered[byte] & (1 << bit))


async def _until_acked(load: Load, attempt: Callable[[], Awaitable[int]]) -> int | None:
    """Retry ``attempt`` (same message id) until it is acknowledged or the soak stops."""
    while not load.stop.is_set():
        try:
            return await attempt()
        except (JetStreamError, TimeoutError):
            load.publish_errors += 1
            await asyncio.sleep(0.05)  # backoff between retries of the same message
    return None


async def sequential_publisher(js: JetStreamContext, load: Load, rate: float) -> None:
    """Publish ``m<i>`` one at a time at about ``rate`` messages a second."""
    interval = 1.0 / rate
    while not load.stop.is_set():
        i = load.new_index()
        payload = b"m%d" % i

        async def attempt(payload: bytes = payload) -> int:
            ack = await js.publish(SUBJECT, payload, msg_id=payload.decode(), timeout=2)
            return ack.seq

        seq = await _until_acked(load, attempt)
        if seq is not None:
            load.seq_of[i] = seq
        await asyncio.sleep(interval)  # pacing, not synchronisation


async def async_publisher(js: JetStreamContext, load: Load, burst: int) -> None:
    """Every second, ``burst`` messages through ``publish_async``; failures are republished."""
    while not load.stop.is_set():
        batch = [load.new_index() for _ in range(burst)]
        futures: list[tuple[int, asyncio.Future[Any] | None]] = []
        for i in batch:
            payload = b"m%d" % i
            try:
                fut = await js.publish_async(SUBJECT, payload, msg_id=payload.decode(), timeout=2)
            except (JetStreamError, TimeoutError):
                load.publish_errors += 1
                fut = None
            futures.append((i, fut))
        for i, fut in futures:
            seq: int | None = None
            if fut is not None:
                try:
                    seq = (await fut).seq
                except (JetStreamError, TimeoutError):
                    load.publish_errors += 1
            if seq is None:
                payload = b"m%d" % i

                async def attempt(payload: bytes = payload) -> int:
                    ack = await js.publish(SUBJECT, payload, msg_id=payload.decode(), timeout=2)
                    return ack.seq

                seq = await _until_acked(load, attempt)
            if seq is not None:
                load.seq_of[i] = seq
        await asyncio.sleep(1.0)  # pacing


async def kv_writer(js: JetStreamContext, load: Load, rate: float) -> None:
    """Put ``k<n>`` = counter in turn, recording the last acknowledged value per key."""
    kv = await js.key_value(BUCKET)
    value = 0
    while not load.stop.is_set():
        key = f"k{value % KEYS}"
        try:
            await kv.put(key, b"%d" % value, timeout=2)
        except (JetStreamError, TimeoutError):
            load.kv_errors += 1
            # Unknown outcome: it may have been stored. Put the same key again
            # with a newer value so the last acknowledged value is the truth.
        else:
            load.kv_acked[key] = value
        value += 1
        await asyncio.sleep(1.0 / rate)  # pacing


async def kv_watcher(js: JetStreamContext, load: Load) -> None:
    """Follow every key; count end-of-initial-values markers; revisions must increase."""
    kv = await js.key_value(BUCKET)
    last_revision = 0
    async with kv.watch() as watcher:
        async for entry in watcher:
            if entry is None:
                load.watch_markers += 1
                continue
            if entry.revision <= last_revision:
                load.watch_revisions_ok = False
            last_revision = entry.revision
            load.watched[entry.key] = int(entry.value)


class Faults:
    """Rotate through the fault kinds, recording how long the stream took to accept writes."""

    def __init__(self, cluster: NatsCluster, admin: JetStreamContext) -> None:
        self.cluster = cluster
        self.admin = admin
        self.log: list[dict[str, Any]] = []

    async def writable_after(self, t0: float) -> float:
        """Seconds from ``t0`` until the stream answers a publish (a probe it refuses)."""

        async def answered() -> bool:
            try:
                await self.admin.publish(
                    SUBJECT + ".probe", b"", expected_last_sequence=2**63 - 1, timeout=1
                )
            except WrongLastSequenceError:
                return True  # the leader checked the sequence: it accepts writes
            except (JetStreamError, TimeoutError):
                return False
            raise AssertionError("the probe was stored")

        await wait_until(answered, timeout=60, interval=0.05, message="stream writable")
        return asyncio.get_running_loop().time() - t0

    async def inject(self, n: int) -> None:
        loop = asyncio.get_running_loop()
        kind = ("kill_leader", "stepdown", "consumer_stepdown", "restart_follower", "freeze")[n % 5]
        leader = await stream_leader(self.admin, STREAM)
        t0 = loop.time()
        entry: dict[str, Any] = {"fault": kind, "leader": leader}
        if kind == "kill_leader" and leader is not None:
            node = self.cluster.server(leader)
            await node.kill()
            entry["writable_s"] = round(await self.writable_after(t0), 3)
            await node.start()
        elif kind == "stepdown":
            with contextlib.suppress(JetStreamError, TimeoutError):
                await stepdown_stream(self.admin, STREAM)
            entry["writable_s"] = round(await self.writable_after(t0), 3)
        elif kind == "consumer_stepdown":
            entry["consumer_leader"] = await consumer_leader(self.admin, STREAM, DURABLE)
            with contextlib.suppress(JetStreamError, TimeoutError):
                await stepdown_consumer(self.admin, STREAM, DURABLE)
        elif kind == "restart_follower":
            follower = next(s for s in self.cluster.servers if s.server_name != leader)
            entry["node"] = follower.server_name
            await follower.restart()
        elif kind == "freeze":
            node = self.cluster.servers[0]
            entry["node"] = node.server_name
            node.freeze()
            await asyncio.sleep(3.0)  # the fault's duration
            node.thaw()
        await wait_stream_leader(self.admin, STREAM, timeout=60)
        entry["recovered_s"] = round(loop.time() - t0, 3)
        self.log.append(entry)
        logger.warning("fault %s", entry)


async def soak(minutes: float, fault_every: float, rate: float) -> dict[str, Any]:
    """Run the soak and return its figures (``ok`` tells whether every check held)."""
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory(prefix="aiojetstream-soak-") as root:
        async with NatsCluster(3, store_root=root) as cluster:
            admin = await connect(cluster.urls)
            js = await connect(cluster.urls)
            try:
                await create_r3_stream(admin, STREAM, ["soak.>"])
                await admin.create_consumer(
                    STREAM,
                    ConsumerConfig(
                        durable_name=DURABLE,
                        ack_policy=AckPolicy.EXPLICIT,
                        filter_subject=SUBJECT,
                    ),
                )
                bucket = KeyValueConfig(bucket=BUCKET, replicas=3, storage=StorageType.FILE)
                await created(lambda timeout: admin.create_key_value(bucket, timeout=timeout))
                return await _run(cluster, admin, js, minutes, fault_every, rate, loop.time())
            finally:
                await js.close()
                await admin.close()


async def _run(
    cluster: NatsCluster,
    admin: JetStreamContext,
    js: JetStreamContext,
    minutes: float,
    fault_every: float,
    rate: float,
    started: float,
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    load = Load()
    consumer = await js.consumer(STREAM, DURABLE)

    async def handler(msg: Msg) -> None:
        load.mark_delivered(msg.metadata.sequence.stream)
        await msg.ack()

    def on_error(error: JetStreamError) -> None:
        load.consume_reports[type(error).__name__] = (
            load.consume_reports.get(type(error).__name__, 0) + 1
        )

    ctx = await consumer.consume(handler, error_handler=on_error)
    tasks = [
        asyncio.create_task(sequential_publisher(js, load, rate)),
        asyncio.create_task(async_publisher(js, load, burst=max(1, int(rate // 2)))),
        asyncio.create_task(kv_writer(js, load, rate=20)),
        asyncio.create_task(kv_watcher(js, load)),
    ]
    faults = Faults(cluster, admin)
    rss: list[tuple[float, int]] = []
    end = started + minutes * 60
    warmup = min(60.0, minutes * 60 / 5)
    n = 0
    next_fault = started + fault_every
    while loop.time() < end:
        rss.append((loop.time() - started, rss_bytes()))
        if loop.time() >= next_fault:
            await faults.inject(n)
            n += 1
            next_fault = loop.time() + fault_every
        for task in tasks:
            if task.done():
                task.result()  # a load task must not end early: raise what ended it
        await asyncio.sleep(1.0)  # sampling period
    load.stop.set()
    await asyncio.gather(*tasks[:3])

    def watcher_caught_up() -> bool:
        return all(load.watched.get(k, -1) >= v for k, v in load.kv_acked.items())

    with contextlib.suppress(TimeoutError):
        await wait_until(watcher_caught_up, timeout=60, interval=0.2)
    tasks[3].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await tasks[3]

    acked = Acked()
    for i, seq in enumerate(load.seq_of):
        if seq:
            acked.add(seq, b"m%d" % i)
    unacked = sum(1 for seq in load.seq_of if not seq)

    # Everything acknowledged reaches the consumer (at least once) ...
    with contextlib.suppress(TimeoutError):
        await wait_until(
            lambda: all(load.was_delivered(s) for s in acked.by_seq), timeout=120, interval=0.5
        )
    undelivered = [s for s in acked.by_seq if not load.was_delivered(s)]
    ctx.stop()
    await asyncio.wait_for(ctx.closed(), 10)
    # ... and is stored on every replica, each message id once.
    readback_error = None
    try:
        await readback(cluster, admin, STREAM, acked)
    except AssertionError as exc:
        readback_error = str(exc)
    kv = await admin.key_value(BUCKET)
    kv_wrong = []
    for key, value in load.kv_acked.items():
        entry = await kv.get(key)
        stored = int(entry.value) if entry is not None else None
        if stored is None or stored < value:
            kv_wrong.append(key)
    watch_wrong = [
        f"{k}: {load.watched.get(k)} < {v}"
        for k, v in load.kv_acked.items()
        if load.watched.get(k, -1) < v
    ]

    steady = [r for t, r in rss if t >= warmup]
    median = statistics.median(steady) if steady else 0
    drift = max(abs(r - median) / median for r in steady) if steady else 0.0
    ok = (
        not undelivered
        and readback_error is None
        and not kv_wrong
        and not watch_wrong
        and load.watch_markers == 1
        and load.watch_revisions_ok
        and drift <= 0.10
    )
    return {
        "ok": ok,
        "minutes": minutes,
        "faults": len(faults.log),
        "fault_log": faults.log,
        "messages_acked": len(acked),
        "messages_unacked_at_stop": unacked,
        "publish_errors_retried": load.publish_errors,
        "acked_lost": len(undelivered),
        "redelivered": load.redelivered,
        "consume_reports": load.consume_reports,
        "readback_error": readback_error,
        "kv_puts_acked_keys": len(load.kv_acked),
        "kv_errors": load.kv_errors,
        "kv_wrong_keys": kv_wrong,
        "watch_wrong_keys": watch_wrong,
        "watch_initial_markers": load.watch_markers,
        "watch_revisions_increasing": load.watch_revisions_ok,
        "rss_median_mib": round(median / 2**20, 1),
        "rss_max_drift_pct": round(drift * 100, 2),
        "writable_s": [f["writable_s"] for f in faults.log if "writable_s" in f],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the soak from the command line; print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--fault-every", type=float, default=30.0, help="seconds")
    parser.add_argument("--rate", type=float, default=200.0, help="sequential publishes a second")
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    t0 = time.monotonic()
    figures = asyncio.run(soak(args.minutes, args.fault_every, args.rate))
    figures["wall_s"] = round(time.monotonic() - t0, 1)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

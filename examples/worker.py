"""A worker: ``Consumer.consume`` with explicit acks, an error handler and a graceful drain.

It creates a stream and a durable consumer, publishes a few demo jobs, and
processes them with ``consume``. The handler acknowledges every job itself
(``consume`` acknowledges nothing), asks for a delayed redelivery of a job that
fails the first time (``nak(delay=...)``) and terminates a job that can never
succeed (``term(reason)``). Non-terminal problems (missed heartbeats, server
warnings) and a terminal error go to ``error_handler``.

The worker stops by itself once every demo job is settled, or earlier on
SIGINT/SIGTERM (Ctrl-C); either way it drains: no new pulls, the buffered jobs
are still handled, then it exits. Pass ``--forever`` to keep it running until a
signal. It honours ``NATS_URL`` (default ``nats://127.0.0.1:4222``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import timedelta

import aiojetstream
from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    JetStreamError,
    Msg,
    StorageType,
    StreamConfig,
)

STREAM = "WORKER_DEMO"
CONSUMER = "worker"
JOBS = 12
FLAKY = 4  # fails on its first delivery, succeeds when redelivered
POISON = 9  # can never be processed: terminated


class Worker:
    """Handles one job per call; counts settled jobs so the demo knows when to stop."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.done = 0
        self.all_settled = asyncio.Event()

    def _settled(self) -> None:
        self.done += 1
        if self.done >= self.expected:
            self.all_settled.set()

    async def handle(self, msg: Msg) -> None:
        """The consume handler: settle the job with ack, nak or term."""
        job = json.loads(msg.data)
        attempt = msg.metadata.num_delivered
        if job["id"] == POISON:
            await msg.term("unprocessable job")
            print(f"  job {job['id']:>2}: terminated (will not be redelivered)")
            self._settled()
            return
        if job["id"] == FLAKY and attempt == 1:
            await msg.nak(delay=0.5)
            print(f"  job {job['id']:>2}: failed on attempt {attempt}, redelivery in 0.5 s")
            return
        await msg.in_progress()  # a long job would send this to extend ack_wait
        await asyncio.sleep(0.05)  # the "work"
        # double_ack waits for the server to confirm; msg.ack() would not wait.
        await msg.double_ack()
        print(f"  job {job['id']:>2}: done (attempt {attempt}) {job['task']}")
        self._settled()


def on_error(error: JetStreamError) -> None:
    """Called for warnings, missed heartbeats and the terminal error, if any."""
    print(f"  error_handler: {type(error).__name__}: {error}")


async def main() -> None:
    forever = "--forever" in sys.argv[1:]
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    async with await aiojetstream.connect(url) as js:
        await js.create_or_update_stream(
            StreamConfig(name=STREAM, subjects=["jobs.>"], storage=StorageType.MEMORY)
        )
        consumer = await js.create_or_update_consumer(
            STREAM,
            ConsumerConfig(
                durable_name=CONSUMER,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=timedelta(seconds=10),
                max_deliver=5,
            ),
        )
        for i in range(1, JOBS + 1):
            await js.publish(f"jobs.resize.{i}", json.dumps({"id": i, "task": f"img-{i}"}).encode())
        print(f"Published {JOBS} jobs to {STREAM}; consuming with {consumer.name!r}")

        worker = Worker(expected=JOBS)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        ctx = await consumer.consume(
            worker.handle, error_handler=on_error, max_messages=5, expires=10
        )
        waits: list[asyncio.Future[object]] = [
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(ctx.closed()),  # a terminal error ends it too
        ]
        if not forever:
            waits.append(asyncio.ensure_future(worker.all_settled.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        print("Stopping: draining (no new pulls; buffered jobs are still handled)")
        await ctx.drain()
        error = await ctx.closed()
        print(f"Consumption ended {'with ' + repr(error) if error else 'cleanly'}")

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        info = await consumer.info()
        print(
            f"Settled {worker.done}/{JOBS} jobs; consumer: {info.num_pending} pending, "
            f"{info.num_ack_pending} awaiting ack"
        )
        await js.delete_stream(STREAM)
        print(f"Deleted stream {STREAM}. Done.")


if __name__ == "__main__":
    asyncio.run(main())

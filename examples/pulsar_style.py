"""Pulsar-style retention, backlog quota and message TTL on JetStream.

What a Pulsar namespace with ``set-retention --time 60 --size 64M``,
``set-backlog-quota --limit 1K --policy producer_request_hold`` and a message
TTL on one subscription looks like here (see ``docs/from-pulsar.md``):

1. ``archive_pair``: an **interest** stream ``PULSAR_ORDERS`` keeps each
   consumer's backlog until it is acknowledged; a **limits** stream
   ``PULSAR_ORDERS_ARCHIVE`` sources it and keeps every message for 60 minutes
   / 64 MiB (Pulsar's retention), acknowledged or not.
2. ``apply_backlog_quota``: the interest stream holds at most 1 KiB of backlog
   (``discard: new``). A producer publishes faster than the ``billing``
   consumer acknowledges: a plain publish raises ``StreamFullError``
   (``producer_exception``), and ``publish(..., hold_when_full=...)`` waits
   until there is room (``producer_request_hold``): once billing *and* the
   archive's source have acknowledged, and the source acknowledges about once
   a second. Billing's ``backlog()`` is printed as it changes.
3. ``skip_older_than``: the ``audit`` consumer gets Pulsar's per-subscription
   message TTL: the stale messages are skipped for it alone, while billing
   still receives them.
4. The archive holds every message; the interest stream is empty.

Needs nats-server 2.14 or newer. Run it against your own server (``NATS_URL``,
default ``nats://127.0.0.1:4222``) or with an embedded one:
``python -m aiojetstream.testing run -- python examples/pulsar_style.py``.
Both streams are deleted at the start and at the end. The exit status is 1
when something did not happen as described.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable

import aiojetstream
from aiojetstream import (
    Backlog,
    Consumer,
    ConsumerConfig,
    JetStreamContext,
    StorageType,
    StreamFullError,
    StreamNotFoundError,
)
from aiojetstream.pulsar import BacklogQuotaPolicy, apply_backlog_quota, archive_pair

STREAM = "PULSAR_ORDERS"
ARCHIVE = f"{STREAM}_ARCHIVE"
SUBJECT = "pulsar.orders.new"
QUOTA_BYTES = 1024  # about five of the messages below
ORDERS = 12
PAYLOAD_SIZE = 100
WORK = 0.1  # seconds billing spends on each order: slower than the producer
HOLD = 10.0  # producer_request_hold: how long a publish may wait for room
STALE = 3
FRESH = 2
TTL = 1.0  # the audit consumer's message TTL, seconds
AGE_GAP = 1.5  # the stale messages are this old when the TTL is applied
STEP = 10.0  # bound of any single wait


class Checks:
    """Expectations that did not hold (the exit status is 1 if there is any)."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def expect(self, ok: bool, what: str) -> None:
        """Record (and print) ``what`` unless ``ok``."""
        if not ok:
            self.failed.append(what)
            print(f"FAILED: {what}")


def describe(backlog: Backlog) -> str:
    oldest = "none"
    if backlog.oldest_unacked_sequence is not None and backlog.oldest_unacked_age is not None:
        age_ms = backlog.oldest_unacked_age.total_seconds() * 1000
        oldest = f"seq {backlog.oldest_unacked_sequence}, {age_ms:.0f} ms old"
    return f"pending={backlog.pending} ack_pending={backlog.ack_pending} oldest={oldest}"


async def stored(js: JetStreamContext, stream: str) -> int:
    return (await js.stream(stream)).cached_info.state.messages


async def wait_for_state(what: str, check: Callable[[], Awaitable[bool]]) -> bool:
    """Poll server state that has no event to wait on, for up to STEP seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STEP
    while not await check():
        if loop.time() >= deadline:
            print(f"  timed out waiting for {what}")
            return False
        await asyncio.sleep(0.05)
    return True


async def delete_streams(js: JetStreamContext) -> None:
    for name in (ARCHIVE, STREAM):
        with contextlib.suppress(StreamNotFoundError):
            await js.delete_stream(name)


async def create_streams(js: JetStreamContext) -> bool:
    """The archive pair with the backlog quota; True once the archive is sourcing."""
    origin, archive = archive_pair(STREAM, ["pulsar.orders.>"], time_minutes=60, size_mb=64)
    origin = apply_backlog_quota(
        origin, limit_bytes=QUOTA_BYTES, policy=BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD
    )
    memory = {"storage": StorageType.MEMORY}
    await js.create_stream(origin.model_copy(update=memory))
    await js.create_stream(archive.model_copy(update=memory))
    print(
        f"Created {STREAM} (interest, backlog quota {QUOTA_BYTES} bytes, discard new) and "
        f"{ARCHIVE} (limits, 60 min / 64 MiB, sourcing {STREAM})"
    )

    async def sourcing() -> bool:
        # The server sets the source up in the background: publish once it is active.
        sources = (await js.stream(ARCHIVE)).cached_info.sources or []
        return bool(sources) and sources[0].active.total_seconds() >= 0

    return await wait_for_state("the archive's source", sourcing)


def order(i: int) -> bytes:
    return f"order {i:02d} ".encode().ljust(PAYLOAD_SIZE, b".")


async def produce(js: JetStreamContext) -> int:
    """Publish ORDERS orders as fast as the stream takes them; return how many were held."""
    loop = asyncio.get_running_loop()
    held = 0
    for i in range(1, ORDERS + 1):
        msg_id = f"order-{i}"
        try:
            ack = await js.publish(SUBJECT, order(i), msg_id=msg_id)
        except StreamFullError as exc:  # producer_exception stops here
            held += 1
            print(f"  producer: order {i:02d} refused ({type(exc).__name__}), holding")
            start = loop.time()
            ack = await js.publish(SUBJECT, order(i), msg_id=msg_id, hold_when_full=HOLD)
            took = loop.time() - start
            print(f"  producer: order {i:02d} stored as seq {ack.seq} after a {took:.2f} s hold")
        else:
            print(f"  producer: order {i:02d} stored as seq {ack.seq}")
    return held


async def consume(name: str, consumer: Consumer, count: int) -> list[bytes]:
    """Process ``count`` messages slowly, printing the backlog as it changes."""
    got: list[bytes] = []
    last = ""
    while len(got) < count:
        msg = await consumer.next(expires=STEP)
        await asyncio.sleep(WORK)  # the work on one message
        await msg.double_ack()
        got.append(msg.data)
        now = describe(await consumer.backlog())
        if now != last:
            print(f"  {name}: acked {msg.data[:8].decode()!r}; backlog {now}")
            last = now
    return got


async def main() -> int:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    checks = Checks()
    async with await aiojetstream.connect(url) as js:
        level = await js.api_level()
        print(f"Connected to {url} (JetStream API level {level})")
        if level < 4:
            print("This example needs nats-server 2.14 or newer (API level 4).")
            return 1
        await delete_streams(js)
        try:
            checks.expect(await create_streams(js), "the archive's source became active")
            billing = await js.create_consumer(STREAM, ConsumerConfig(durable_name="billing"))
            print(f"billing backlog {describe(await billing.backlog())}")

            # 1. producer_request_hold: the producer outpaces billing and is held.
            print(
                f"Publishing {ORDERS} orders of {PAYLOAD_SIZE} bytes; billing takes {WORK} s each"
            )
            held, billed = await asyncio.wait_for(
                asyncio.gather(produce(js), consume("billing", billing, ORDERS)), 60
            )
            print(f"Producer held {held} time(s); billing processed {len(billed)} orders")
            checks.expect(held > 0, "the full stream held the producer at least once")
            checks.expect(
                billed == [order(i) for i in range(1, ORDERS + 1)],
                "billing received every order once, in order",
            )

            # The archive's source acknowledges about once a second: only then do
            # acknowledged messages leave the interest stream and free the quota.
            loop = asyncio.get_running_loop()
            start = loop.time()

            async def drained() -> bool:
                return await stored(js, STREAM) == 0

            checks.expect(await wait_for_state(f"{STREAM} to drain", drained), f"{STREAM} drained")
            print(f"{STREAM} empty {loop.time() - start:.2f} s after billing's last ack")

            # 2. Pulsar's message TTL for the audit subscription only.
            audit = await js.create_consumer(STREAM, ConsumerConfig(durable_name="audit"))
            for i in range(STALE):
                await js.publish(SUBJECT, b"stale %d" % i)
            print(f"Published {STALE} stale orders; letting them age {AGE_GAP} s")
            await asyncio.sleep(AGE_GAP)
            for i in range(FRESH):
                await js.publish(SUBJECT, b"fresh %d" % i)
            print(f"audit backlog {describe(await audit.backlog())}")
            first_fresh = ORDERS + STALE + 1
            seq = await audit.skip_older_than(TTL)
            after = await audit.backlog()
            print(f"audit.skip_older_than({TTL} s) -> continues at seq {seq}")
            print(f"audit backlog {describe(after)}")
            billing_left = await billing.backlog()
            print(f"billing backlog {describe(billing_left)} (the TTL is audit's only)")
            checks.expect(seq == first_fresh, f"audit continues at seq {first_fresh}")
            checks.expect(after.pending == FRESH, f"audit has {FRESH} fresh messages left")
            checks.expect(
                billing_left.pending == STALE + FRESH, "billing still has the stale messages"
            )
            audited = await asyncio.wait_for(consume("audit", audit, FRESH), STEP)
            checks.expect(
                audited == [b"fresh %d" % i for i in range(FRESH)], "audit got the fresh ones"
            )
            rest = await asyncio.wait_for(consume("billing", billing, STALE + FRESH), STEP)
            checks.expect(len(rest) == STALE + FRESH, "billing got stale and fresh messages")

            # 3. Retention: the archive keeps what the interest stream let go.
            total = ORDERS + STALE + FRESH

            async def settled() -> bool:
                return (await stored(js, STREAM), await stored(js, ARCHIVE)) == (0, total)

            checks.expect(
                await wait_for_state("the archive to hold everything", settled),
                f"{ARCHIVE} holds all {total} messages and {STREAM} none",
            )
            print(
                f"{ARCHIVE} holds {await stored(js, ARCHIVE)} messages; "
                f"{STREAM} holds {await stored(js, STREAM)}"
            )
        finally:
            await delete_streams(js)
            print(f"Deleted {STREAM} and {ARCHIVE}.")
    if checks.failed:
        print(f"{len(checks.failed)} expectation(s) failed")
        return 1
    print("OK: held producer, per-consumer TTL and archive behaved as in Pulsar")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

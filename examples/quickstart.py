"""aiojetstream quick start: create a stream, publish (one message with a TTL), read back.

The messages are read back twice: by sequence with ``Stream.get_msg``, then
through a pull consumer with ``Consumer.fetch`` (and acknowledged).

Run it with ``make demo`` (starts an embedded nats-server when NATS_URL is unset)
or against your own server: ``NATS_URL=nats://127.0.0.1:4222 python examples/quickstart.py``.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import aiojetstream
from aiojetstream import AckPolicy, ConsumerConfig, StorageType, StreamConfig

STREAM = "QUICKSTART"


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    async with await aiojetstream.connect(url) as js:
        account = await js.account_info()
        print(f"Connected to {url} (JetStream API level {account.api.level})")

        stream = await js.create_or_update_stream(
            StreamConfig(
                name=STREAM,
                subjects=["quickstart.>"],  # not orders.>: the CLI tutorial's ORDERS
                storage=StorageType.MEMORY,
                allow_msg_ttl=True,  # per-message TTLs (ADR-43, nats-server >= 2.11)
                duplicate_window=timedelta(minutes=1),
            )
        )
        print(f"Created stream {stream.name} capturing {stream.cached_info.config.subjects}")

        ack = await js.publish("quickstart.new", b'{"id": 1, "item": "tea"}', msg_id="order-1")
        print(f"Published quickstart.new    -> stream {ack.stream}, sequence {ack.seq}")
        again = await js.publish("quickstart.new", b'{"id": 1, "item": "tea"}', msg_id="order-1")
        print(f"Published it again (same id) -> duplicate={again.duplicate}, sequence {again.seq}")

        ack = await js.publish("quickstart.hold", b'{"id": 2, "item": "cake"}', ttl="1h")
        print(f"Published quickstart.hold   -> sequence {ack.seq}, expires in 1 hour (Nats-TTL)")

        futures = [
            await js.publish_async(f"quickstart.batch.{i}", f'{{"id": {i}}}'.encode())
            for i in range(3, 8)
        ]
        await js.publish_async_complete()
        seqs = [f.result().seq for f in futures]
        print(f"Published 5 more asynchronously -> sequences {seqs}")

        info = await stream.info()
        print(f"Stream holds {info.state.messages} messages, {info.state.bytes} bytes")

        print("Read back by sequence (get_msg):")

        for seq in range(1, info.state.last_seq + 1):
            msg = await stream.get_msg(seq)
            ttl = (msg.headers or {}).get("Nats-TTL")
            note = f"  (TTL {ttl} s)" if ttl else ""
            print(f"  #{msg.seq} {msg.subject:<18} {msg.data.decode()}{note}")

        last = await stream.get_last_msg_for_subject("quickstart.new")
        print(f"Last message on quickstart.new is #{last.seq}")

        # Read them again through a pull consumer: one fetch for every message.
        consumer = await stream.create_consumer(
            ConsumerConfig(durable_name="reader", ack_policy=AckPolicy.EXPLICIT)
        )
        print(f"Read back through consumer {consumer.name!r} (fetch {info.state.messages}):")
        batch = await consumer.fetch(info.state.messages, expires=5)
        async for delivered in batch:
            meta = delivered.metadata
            print(
                f"  #{meta.sequence.stream} {delivered.subject:<18} {delivered.data.decode()}"
                f"  (delivery {meta.num_delivered}, {meta.num_pending} left)"
            )
            await delivered.double_ack()  # ack and wait for the server's confirmation
        state = await consumer.info()
        print(
            f"Consumer {consumer.name}: {state.num_pending} pending, "
            f"{state.num_ack_pending} awaiting ack"
        )

        await js.delete_stream(STREAM)
        print(f"Deleted stream {STREAM}. Done.")


if __name__ == "__main__":
    asyncio.run(main())

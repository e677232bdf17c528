"""Pull continuously with ``Consumer.messages()``: an ``async for`` loop over a bounded buffer.

``messages()`` keeps up to ``max_messages`` messages asked for (outstanding on
the server plus buffered here) and pulls more once that count falls below the
threshold (half of the maximum by default). The loop below reads a stream of
sensor readings, acknowledges each one, and stops once the consumer reports
nothing left (``metadata.num_pending == 0``); it starts only when the consumer
has something pending, because on an empty stream no message would ever come
to say so (for a plain "read what is there, then stop", a ``fetch_no_wait``
loop is simpler: docs/consumers.md, "Catching up"). A second loop shows ``drain()``:
no new pulls, the messages already buffered are still yielded, then the
iteration ends.

Run it against any server: ``NATS_URL=nats://127.0.0.1:4222 python examples/messages_loop.py``.
"""

from __future__ import annotations

import asyncio
import os

import aiojetstream
from aiojetstream import ConsumerConfig, JetStreamError, StorageType, StreamConfig

STREAM = "MESSAGES_DEMO"
READINGS = 20


def on_error(error: JetStreamError) -> None:
    """Warnings and missed heartbeats; iteration goes on after them."""
    print(f"  error_handler: {type(error).__name__}: {error}")


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    async with await aiojetstream.connect(url) as js:
        stream = await js.create_or_update_stream(
            StreamConfig(name=STREAM, subjects=["sensors.>"], storage=StorageType.MEMORY)
        )
        for i in range(READINGS):
            await js.publish_async(f"sensors.room{i % 3}", f"{20 + i * 0.25:.2f}".encode())
        await js.publish_async_complete()
        print(f"Published {READINGS} readings to {STREAM}")

        consumer = await stream.create_consumer(ConsumerConfig(durable_name="dashboard"))

        # 1. Read everything there is, acknowledging each message.
        total = 0.0
        count = 0
        if (await consumer.info()).num_pending == 0:
            raise SystemExit("nothing to read")  # the loop below would wait forever
        async with consumer.messages(max_messages=8, error_handler=on_error) as it:
            async for msg in it:
                meta = msg.metadata
                value = float(msg.data)
                total += value
                count += 1
                print(
                    f"  #{meta.sequence.stream:<3} {msg.subject:<14} {value:6.2f}"
                    f"  ({meta.num_pending} left)"
                )
                await msg.ack()
                if meta.num_pending == 0:
                    break  # leaving the `async with` stops the pulls
        print(f"Read {count} readings, average {total / count:.2f}")

        # 2. More readings arrive: take one, then drain what is already buffered.
        for i in range(6):
            await js.publish(f"sensors.room{i % 3}", f"{30 + i:.2f}".encode())
        async with consumer.messages(max_messages=10) as it:
            first = await it.next()
            print(f"Took #{first.metadata.sequence.stream}; draining the buffer:")
            await asyncio.sleep(0.1)  # (demo) let the rest of the pull arrive
            await it.drain()  # no new pulls from here on; the iteration ends when empty
            handled = [first]
            async for msg in it:
                handled.append(msg)
                print(f"  drained #{msg.metadata.sequence.stream} {msg.subject}")
            for msg in handled:
                await msg.ack()
        print(f"Second loop handled {len(handled)} messages")

        info = await consumer.info()
        print(f"Consumer {consumer.name!r}: {info.num_pending} not yet delivered")
        await js.delete_stream(STREAM)
        print(f"Deleted stream {STREAM}. Done.")


if __name__ == "__main__":
    asyncio.run(main())

"""Replay a stream in order with ``js.ordered_consumer`` (ADR-17).

An ordered consumer reads a stream in order without gaps or duplicates, with no
acknowledgements, through an ephemeral server-side consumer that the client
recreates whenever delivery cannot be trusted (a sequence gap, missed
heartbeats, the consumer deleted or lost in a server restart).

1. ``messages()``: replay an account's event log from stream sequence 5. Half
   way through, the demo deletes the server-side consumer; the ordered consumer
   creates a new one after the last message it handed out and the replay goes on
   with no gap and no duplicate. The client learns of the deletion from the
   server's 409 status or, when the pending pull was lost with the consumer,
   from missed heartbeats (then ``error_handler`` sees a ``NoHeartbeatError``).
2. ``fetch()``: a second ordered consumer pages through one subject in batches.

Run it against any server: ``NATS_URL=nats://127.0.0.1:4222 python examples/ordered_replay.py``.
"""

from __future__ import annotations

import asyncio
import os

import aiojetstream
from aiojetstream import (
    DeliverPolicy,
    JetStreamError,
    OrderedConsumerConfig,
    StorageType,
    StreamConfig,
)

STREAM = "LEDGER_DEMO"
EVENTS = [
    ("ledger.acct1", "opened"),
    ("ledger.acct1", "deposit 100"),
    ("ledger.acct2", "opened"),
    ("ledger.acct1", "withdraw 30"),
    ("ledger.acct2", "deposit 50"),
    ("ledger.acct1", "deposit 5"),
    ("ledger.acct2", "withdraw 20"),
    ("ledger.acct1", "withdraw 10"),
    ("ledger.acct2", "deposit 7"),
    ("ledger.acct1", "deposit 42"),
]
LATE_EVENTS = [("ledger.acct2", "withdraw 1"), ("ledger.acct1", "closed")]


def on_error(error: JetStreamError) -> None:
    """Non-terminal problems (for example a missed heartbeat before a reset)."""
    print(f"  error_handler: {type(error).__name__}: {error}")


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    async with await aiojetstream.connect(url) as js:
        await js.create_or_update_stream(
            StreamConfig(name=STREAM, subjects=["ledger.>"], storage=StorageType.MEMORY)
        )
        for subject, event in EVENTS:
            await js.publish(subject, event.encode())
        print(f"Published {len(EVENTS)} events to {STREAM}")

        # 1. Replay from sequence 5 with messages(), surviving a consumer reset.
        replay = await js.ordered_consumer(
            STREAM,
            OrderedConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=5,
                max_reset_attempts=5,  # give up with OrderedConsumerResetError after 5
            ),
        )
        last_seq = 0
        seen: list[int] = []
        current = None
        print("Replaying from sequence 5:")
        # A short heartbeat: a pull lost with a deleted consumer is noticed within ~2 s.
        async with replay.messages(max_messages=4, heartbeat=1, error_handler=on_error) as it:
            async for msg in it:
                meta = msg.metadata
                if meta.consumer != current:
                    current = meta.consumer
                    print(f"  (reading through server-side consumer {current})")
                seen.append(meta.sequence.stream)
                print(f"  #{meta.sequence.stream:<3} {msg.subject:<13} {msg.data.decode()}")
                if meta.sequence.stream == 7:
                    # Simulate losing the consumer, and more events arriving meanwhile.
                    await js.delete_consumer(STREAM, current)
                    print(f"  (deleted {current} on the server)")
                    for subject, event in LATE_EVENTS:
                        last_seq = (await js.publish(subject, event.encode())).seq
                if meta.sequence.stream == last_seq:
                    break  # leaving `async with` also deletes the server-side consumer
        expected = list(range(5, last_seq + 1))
        verdict = "in order, no gap, no duplicate" if seen == expected else f"UNEXPECTED {seen}"
        print(f"Replayed #{seen[0]}..#{seen[-1]}: {verdict}; cursor at {replay.cursor}")

        # 2. Page through one subject with fetch() on another ordered consumer.
        pages = await js.ordered_consumer(
            STREAM, OrderedConsumerConfig(filter_subjects=["ledger.acct1"])
        )
        print("Account acct1, in pages of 3:")
        page = 0
        # fetch_no_wait takes what is there without waiting: an empty page ends the
        # loop (at once, too, when the account has no events at all).
        while msgs := await (await pages.fetch_no_wait(3)).collect():
            page += 1
            events = [f"#{m.metadata.sequence.stream} {m.data.decode()}" for m in msgs]
            print(f"  page {page}: {', '.join(events)}")

        await js.delete_stream(STREAM)
        print(f"Deleted stream {STREAM}. Done.")


if __name__ == "__main__":
    asyncio.run(main())

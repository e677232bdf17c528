"""Key-value TTLs and limit markers (ADR-48): a key that expires, seen by a watcher.

The bucket has limit markers (``limit_marker_ttl``), so ``create(..., ttl=2)``
gives the key a life of 2 seconds; when the server removes it, it leaves a
marker that a watcher receives as a ``PURGE`` entry, and ``get`` then raises
``KeyNotFoundError``. Needs nats-server 2.11 or newer.

Run it against your own server (``NATS_URL``, default ``nats://127.0.0.1:4222``)
or with an embedded one:
``python -m aiojetstream.testing run -- python examples/kv_ttl.py``.
"""

from __future__ import annotations

import asyncio
import os

import aiojetstream
from aiojetstream import KeyNotFoundError, KeyValueConfig, KeyValueEntry, KeyValueOp, StorageType

BUCKET = "sessions"


def describe(entry: KeyValueEntry) -> str:
    value = f" = {entry.value.decode()!r}" if entry.operation is KeyValueOp.PUT else ""
    when = entry.created.strftime("%H:%M:%S.%f")[:-3]
    return f"{entry.operation:<5} {entry.key}{value} (revision {entry.revision}, at {when})"


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    async with await aiojetstream.connect(url) as js:
        print(f"Connected to {url} (JetStream API level {await js.api_level()})")
        kv = await js.create_key_value(
            KeyValueConfig(
                bucket=BUCKET,
                history=1,  # with more history the server raises a TTL to the marker TTL
                limit_marker_ttl=5,  # markers stay 5 s; enables per-key TTLs
                storage=StorageType.MEMORY,
            )
        )
        status = await kv.status()
        print(f"Bucket {kv.bucket!r}: limit markers kept for {status.limit_marker_ttl}")
        try:
            await kv.put("user.alice", b"logged in")
            async with kv.watch("user.*") as watcher:
                async for entry in watcher:
                    if entry is None:  # the end of the initial values
                        print("  (watching for changes)")
                        revision = await kv.create("user.bob", b"guest", ttl=2)
                        print(f"Created user.bob with a 2 s TTL at revision {revision}")
                        continue
                    print(f"  watch: {describe(entry)}")
                    if entry.key == "user.bob" and entry.operation is KeyValueOp.PURGE:
                        break  # the server expired it
            try:
                await kv.get("user.bob")
            except KeyNotFoundError as exc:
                print(f"get('user.bob') -> KeyNotFoundError: {exc}")
            print(f"Live keys now: {sorted([k async for k in kv.keys()])}")  # noqa: SIM118
        finally:
            await js.delete_key_value(BUCKET)
            print(f"Deleted bucket {BUCKET!r}. Done.")


if __name__ == "__main__":
    asyncio.run(main())

"""aiojetstream object store (ADR-20): upload a file with progress, list, download, link.

A 24 MiB file is streamed into a bucket (the upload reads it piece by piece and
prints its progress), the bucket is listed, the file is downloaded to another
path and checked against its SHA-256, and a link to it is read.

Run it against a server with JetStream: ``NATS_URL=nats://127.0.0.1:4222 python
examples/object_store.py`` (or ``python -m aiojetstream.testing run -- python
examples/object_store.py`` for an embedded one).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiojetstream
from aiojetstream import ObjectStoreConfig

BUCKET = "EXAMPLE_FILES"
MiB = 1024 * 1024
FILE_SIZE = 24 * MiB


def make_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes to ``path``; return their SHA-256 (hex)."""
    digest = hashlib.sha256()
    with path.open("wb") as f:
        for _ in range(size // MiB):
            piece = os.urandom(MiB)
            digest.update(piece)
            f.write(piece)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while piece := f.read(MiB):
            digest.update(piece)
    return digest.hexdigest()


async def with_progress(path: Path, total: int) -> AsyncIterator[bytes]:
    """The file's content piece by piece, printing how much was handed to the upload."""
    sent = 0
    live = sys.stdout.isatty()
    shown = -1
    with path.open("rb") as f:
        while piece := await asyncio.to_thread(f.read, MiB):
            sent += len(piece)
            percent = sent * 100 // total
            if live or percent // 25 != shown // 25:  # every 25 % when not a terminal
                shown = percent
                print(
                    f"  uploading {path.name}: {percent:3d}% ({sent / MiB:.0f} of "
                    f"{total / MiB:.0f} MiB)",
                    end="\r" if live else "\n",
                    flush=True,
                )
            yield piece
    if live:
        print()


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    async with await aiojetstream.connect(url) as js:
        print(f"Connected to {url}")
        store = await js.create_object_store(
            ObjectStoreConfig(bucket=BUCKET, description="aiojetstream example")
        )
        print(f"Bucket {store.bucket} (stream {store.stream.name})")
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "dataset.bin"
            expected = make_file(source, FILE_SIZE)

            # Upload: an async generator of pieces, streamed in 128 KiB chunks.
            started = time.perf_counter()
            info = await store.put(
                source.name,
                with_progress(source, FILE_SIZE),
                description="random test data",
                headers={"Content-Type": "application/octet-stream"},
                metadata={"sha256-hex": expected},
            )
            seconds = time.perf_counter() - started
            print(
                f"Uploaded {info.name}: {info.size} bytes in {info.chunks} chunks, "
                f"{info.digest} ({info.size / MiB / seconds:.0f} MiB/s)"
            )
            await store.put("README.txt", b"This bucket holds the example's files.\n")

            print(f"Objects in {store.bucket}:")
            async for entry in store.list():
                print(f"  {entry.name:<12} {entry.size:>10} bytes  {entry.chunks:>4} chunks")

            # Download: chunks are written as they arrive, checked at the end.
            target = Path(tmp) / "downloaded.bin"
            await store.get_file(info.name, target)
            same = file_sha256(target) == expected
            print(f"Downloaded to {target.name}: SHA-256 {'matches' if same else 'DIFFERS'}")

            # A link reads as its target.
            await store.add_link("latest.bin", info)
            size = 0
            async with await store.get("latest.bin") as result:
                async for chunk in result:
                    size += len(chunk)
                print(f"Read latest.bin -> {result.info.name}: {size} bytes")

        await js.delete_object_store(BUCKET)
        print(f"Deleted bucket {BUCKET}. Done.")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    asyncio.run(main())

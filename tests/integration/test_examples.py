"""Every ``examples/*.py`` runs end to end, as a user would run it, against a server of its own.

The test is parametrized over the directory, so a new example is run without
being listed here. Each run is a separate process with ``NATS_URL`` pointing
at a fresh server (the examples create and delete fixed names such as
``QUICKSTART`` or ``PULSAR_ORDERS``; on the shared session server a second run
would re-create them right after the first deleted them, which nats-server
2.15.1 can answer with the deleted stream's messages). It must exit 0 with
nothing on stderr that looks like a traceback; ``CHECKS`` holds what each
known example must print. ``spark_pipeline.py`` starts a Spark JVM of its own
(Java 17, about 30 s in all).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aiojetstream
from aiojetstream import StreamConfig
from aiojetstream.testing import NatsServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT = {"spark_pipeline.py": 300.0, "spark_shards.py": 300.0}
"""Seconds an example may take (default ``DEFAULT_TIMEOUT``)."""
DEFAULT_TIMEOUT = 120.0


def check_quickstart(out: str, url: str) -> None:
    assert f"Connected to {url} (JetStream API level " in out
    assert "Published it again (same id) -> duplicate=True, sequence 1" in out
    assert "Published quickstart.hold   -> sequence 2, expires in 1 hour (Nats-TTL)" in out
    assert "Published 5 more asynchronously -> sequences [3, 4, 5, 6, 7]" in out
    assert '  #2 quickstart.hold    {"id": 2, "item": "cake"}  (TTL 3600 s)' in out
    assert '  #7 quickstart.batch.7 {"id": 7}  (delivery 1, 0 left)' in out
    assert "Consumer reader: 0 pending, 0 awaiting ack" in out
    assert out.rstrip().endswith("Deleted stream QUICKSTART. Done.")


def check_worker(out: str, url: str) -> None:
    assert "Published 12 jobs to WORKER_DEMO; consuming with 'worker'" in out
    assert re.search(r"^  job  4: failed on attempt 1, redelivery in [\d.]+ s$", out, re.M)
    assert "  job  4: done (attempt 2) img-4" in out
    assert "  job  9: terminated (will not be redelivered)" in out
    assert "Consumption ended cleanly" in out
    assert "Settled 12/12 jobs; consumer: 0 pending, 0 awaiting ack" in out
    assert out.rstrip().endswith("Deleted stream WORKER_DEMO. Done.")


def check_messages_loop(out: str, url: str) -> None:
    assert "Published 20 readings to MESSAGES_DEMO" in out
    assert "  #20  sensors.room1   24.75  (0 left)" in out
    assert "Read 20 readings, average 22.38" in out
    assert re.search(r"^Second loop handled \d+ messages$", out, re.M)
    assert "Consumer 'dashboard': 0 not yet delivered" in out
    assert out.rstrip().endswith("Deleted stream MESSAGES_DEMO. Done.")


def check_ordered_replay(out: str, url: str) -> None:
    assert "Published 10 events to LEDGER_DEMO" in out
    replayed = [int(n) for n in re.findall(r"^  #(\d+) +ledger\.", out, re.M)]
    assert replayed == list(range(5, 13)), replayed  # in order, no gap, no duplicate
    assert re.search(r"^  \(deleted \w+ on the server\)$", out, re.M)
    assert len(re.findall(r"^  \(reading through server-side consumer \w+\)$", out, re.M)) == 2
    assert "Replayed #5..#12: in order, no gap, no duplicate; cursor at 12" in out
    assert "  page 3: #12 closed" in out
    assert out.rstrip().endswith("Deleted stream LEDGER_DEMO. Done.")


def check_kv_ttl(out: str, url: str) -> None:
    assert f"Connected to {url}" in out
    assert re.search(r"^  watch: PUT   user\.bob = 'guest' \(revision 2, ", out, re.M)
    assert re.search(r"^  watch: PURGE user\.bob \(revision 3, ", out, re.M)
    assert "get('user.bob') -> KeyNotFoundError" in out
    assert "Live keys now: ['user.alice']" in out
    assert out.rstrip().endswith("Deleted bucket 'sessions'. Done.")


def check_object_store(out: str, url: str) -> None:
    assert f"Connected to {url}" in out
    assert "Bucket EXAMPLE_FILES (stream OBJ_EXAMPLE_FILES)" in out
    # Progress while uploading (every 25 % when stdout is not a terminal), up to 100 %.
    assert "  uploading dataset.bin:  50% (12 of 24 MiB)" in out
    assert "  uploading dataset.bin: 100% (24 of 24 MiB)" in out
    assert re.search(
        r"^Uploaded dataset\.bin: 25165824 bytes in 192 chunks, SHA-256=[\w-]{43}= ", out, re.M
    )
    assert re.search(r"^  dataset\.bin +25165824 bytes +192 chunks$", out, re.M)
    assert re.search(r"^  README\.txt +39 bytes +1 chunks$", out, re.M)
    assert "Downloaded to downloaded.bin: SHA-256 matches" in out
    assert "Read latest.bin -> dataset.bin: 25165824 bytes" in out
    assert out.rstrip().endswith("Deleted bucket EXAMPLE_FILES. Done.")


def check_pulsar_style(out: str, url: str) -> None:
    assert f"Connected to {url}" in out
    assert (
        "Created PULSAR_ORDERS (interest, backlog quota 1024 bytes, discard new) and "
        "PULSAR_ORDERS_ARCHIVE (limits, 60 min / 64 MiB, sourcing PULSAR_ORDERS)"
    ) in out
    # producer_request_hold: refused without a hold, then stored once there was room.
    assert re.search(
        r"^  producer: order \d\d refused \(MaxBytesExceededError\), holding$", out, re.M
    )
    assert re.search(r"^  producer: order \d\d stored as seq \d+ after a [\d.]+ s hold$", out, re.M)
    assert "  producer: order 12 stored as seq 12" in out  # every order once, in order
    assert re.search(r"^Producer held [1-9]\d* time\(s\); billing processed 12 orders$", out, re.M)
    # backlog() printed as it changes, down to nothing.
    assert "  billing: acked 'order 01'; backlog pending=" in out
    assert "  billing: acked 'order 12'; backlog pending=0 ack_pending=0 oldest=none" in out
    # skip_older_than: audit skips the 3 stale messages (13..15), billing keeps them.
    assert "audit.skip_older_than(1.0 s) -> continues at seq 16" in out
    assert re.search(r"^audit backlog pending=2 ack_pending=0 oldest=seq 16, ", out, re.M)
    assert re.search(r"^billing backlog pending=5 ack_pending=0 oldest=seq 13, ", out, re.M)
    assert "  audit: acked 'fresh 1'; backlog pending=0 ack_pending=0 oldest=none" in out
    assert "  billing: acked 'stale 0'" in out
    # Retention: the archive keeps everything the interest stream let go.
    assert "PULSAR_ORDERS_ARCHIVE holds 17 messages; PULSAR_ORDERS holds 0" in out
    assert "Deleted PULSAR_ORDERS and PULSAR_ORDERS_ARCHIVE." in out
    assert "FAILED" not in out
    assert out.rstrip().endswith(
        "OK: held producer, per-consumer TTL and archive behaved as in Pulsar"
    )


def check_spark_pipeline(out: str, url: str) -> None:
    assert f"Connected to {url}; created stream ORDERS and bucket order_totals" in out
    assert "Published orders o-0..o-599 to stream ORDERS" in out
    assert "Published orders o-600..o-799 to stream ORDERS" in out
    # The second run starts from the first one's checkpoint: it reads the 200 new orders only.
    assert 'checkpointed offset {"stream": "ORDERS", "seq": 601, "created": "' in out
    assert 'checkpointed offset {"stream": "ORDERS", "seq": 801, "created": "' in out
    minutes = re.findall(r"^  \d{4}-\d\d-\d\dT\d\d-\d\d +(\d+) orders", out, flags=re.M)
    assert len(minutes) == 8  # event times spread over 8 whole minutes
    assert sum(int(n) for n in minutes) == 800
    ok = r"^OK: 800 orders, [\d.]+ in total, over 8 minutes, match the bucket$"
    assert re.search(ok, out, flags=re.M)
    assert "MISMATCH" not in out


def check_spark_shards(out: str, url: str) -> None:
    assert f"Published 100 orders to each of SHARD-0..SHARD-3 at {url}" in out
    # At most 150 a micro-batch over all shards (maxOffsetsPerTrigger).
    assert "  400 orders copied in micro-batches of [150, 150, 100]" in out
    assert "  70 orders copied in micro-batches of [70]" in out  # only the new ones
    assert (
        "  checkpointed: SHARD-0 next 121, SHARD-1 next 101, SHARD-2 next 101, "
        "SHARD-3 next 101, SHARD-4 next 51"
    ) in out  # the new shard from its first message
    for shard, copies in (("SHARD-0", 120), ("SHARD-4", 50)):
        assert f"  {shard}: {copies} copies" in out
    assert out.rstrip().endswith("OK: 470 orders from 5 shards, each copied exactly once")


def check_traced_pipeline(out: str, url: str) -> None:
    assert "Reader got: invoice for order 42" in out
    # One trace from the checkout to the invoice's processing, each span under the last.
    assert (
        "  checkout  (internal)\n"
        "    send pipeline.orders  (producer)\n"
        "      process pipeline.orders  (consumer)\n"
        "        compute invoice  (internal)\n"
        "        send pipeline.invoices  (producer)\n"
        "          process pipeline.invoices  (consumer)\n"
    ) in out
    assert "  receive TRACED_PIPELINE  (client)" in out
    assert out.rstrip().endswith("Done.")


CHECKS: dict[str, Callable[[str, str], None]] = {
    "quickstart.py": check_quickstart,
    "worker.py": check_worker,
    "messages_loop.py": check_messages_loop,
    "ordered_replay.py": check_ordered_replay,
    "kv_ttl.py": check_kv_ttl,
    "object_store.py": check_object_store,
    "pulsar_style.py": check_pulsar_style,
    "spark_pipeline.py": check_spark_pipeline,
    "spark_shards.py": check_spark_shards,
    "traced_pipeline.py": check_traced_pipeline,
}
"""What each example must print, given its output and the server's URL."""


@pytest.fixture
def own_server() -> Iterator[NatsServer]:
    """A server started for one example only."""
    server = NatsServer()
    server.start_sync()
    try:
        yield server
    finally:
        server.stop_sync()


def test_every_check_names_an_example() -> None:
    assert sorted(set(CHECKS) - {p.name for p in EXAMPLES.glob("*.py")}) == []


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_runs(example: str, own_server: NatsServer) -> None:
    env = {**os.environ, "NATS_URL": own_server.url}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT.get(example, DEFAULT_TIMEOUT),
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr[-5000:]}"
    assert "Traceback (most recent call last)" not in done.stderr, done.stderr[-5000:]
    check = CHECKS.get(example)
    if check is not None:
        check(out, own_server.url)


def readme_first_program() -> str:
    """The README's "first program" (``app.py``)."""
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    start = readme.index("```python\n", readme.index("A first program.")) + len("```python\n")
    return readme[start : readme.index("\n```\n", start)] + "\n"


def test_quickstart_and_readme_program_leave_the_cli_tutorial_alone(
    own_server: NatsServer, tmp_path: Path
) -> None:
    """After docs/cli.md's tutorial (``stream add ORDERS --subjects 'orders.>'``), ``make
    demo`` failed (QUICKSTART on ``orders.>`` too: StreamSubjectOverlapError) and the
    README's program rewrote the tutorial's ORDERS, then deleted it."""

    async def tutorial_stream() -> int:
        async with await aiojetstream.connect(own_server.url) as js:
            stream = await js.create_or_update_stream(
                StreamConfig(name="ORDERS", subjects=["orders.>"])
            )
            await js.publish("orders.new", b"order 1")
            return (await stream.info()).state.messages

    assert asyncio.run(tutorial_stream()) == 1
    (tmp_path / "app.py").write_text(readme_first_program(), encoding="utf-8")
    env = {**os.environ, "NATS_URL": own_server.url}
    for program in (EXAMPLES / "quickstart.py", tmp_path / "app.py"):
        done = subprocess.run(
            [sys.executable, str(program)],
            env=env,
            capture_output=True,
            text=True,
            timeout=DEFAULT_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, f"{program.name}: {done.stdout}\n{done.stderr[-5000:]}"

    async def orders_left() -> tuple[int, list[str] | None]:
        async with await aiojetstream.connect(own_server.url) as js:
            info = (await js.stream("ORDERS")).cached_info
            return info.state.messages, info.config.subjects

    assert asyncio.run(orders_left()) == (1, ["orders.>"])


@pytest.mark.parametrize(
    ("example", "stream", "subject"),
    [("spark_pipeline.py", "ORDERS", "orders.>"), ("spark_shards.py", "SHARD-0", "shard.0.>")],
)
def test_spark_examples_leave_a_stream_of_their_names_alone(
    own_server: NatsServer, example: str, stream: str, subject: str
) -> None:
    """``make spark-demo`` against a server holding the CLI tutorial's ``ORDERS`` (same
    name, same subjects) deleted it and its messages at start; the examples now delete
    only what they created (marked in its metadata), and stop before Spark otherwise."""

    async def create(js: aiojetstream.JetStreamContext) -> None:
        await js.create_stream(StreamConfig(name=stream, subjects=[subject]))
        await js.publish(subject.replace(">", "new"), b"order 1")

    async def left(js: aiojetstream.JetStreamContext) -> tuple[int, dict[str, str] | None]:
        info = (await js.stream(stream)).cached_info
        return info.state.messages, info.config.metadata

    async def on_server(step: Callable[[aiojetstream.JetStreamContext], Any]) -> Any:
        async with await aiojetstream.connect(own_server.url) as js:
            return await step(js)

    asyncio.run(on_server(create))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example)],
        env={**os.environ, "NATS_URL": own_server.url},
        capture_output=True,
        text=True,
        timeout=DEFAULT_TIMEOUT,
        check=False,
    )
    assert done.returncode == 1, f"{done.stdout}\n{done.stderr[-5000:]}"
    assert f"The server has a stream {stream} that this example did not create" in done.stderr
    assert "Traceback" not in done.stderr
    messages, metadata = asyncio.run(on_server(left))
    assert messages == 1
    assert "created_by" not in (metadata or {})

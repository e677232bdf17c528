"""``examples/pulsar_style.py`` runs end to end against a server of its own.

The example creates and deletes fixed stream names (``PULSAR_ORDERS``); on the
shared session server a second run would re-create them right after the first
deleted them, which nats-server (2.15.1) can answer with the deleted stream's
messages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiojetstream.testing import NatsServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pulsar_style.py"
TIMEOUT = 120.0


@pytest.fixture
def own_server() -> Iterator[NatsServer]:
    """A server started for this test only."""
    server = NatsServer()
    server.start_sync()
    try:
        yield server
    finally:
        server.stop_sync()


def test_pulsar_style_example(own_server: NatsServer) -> None:
    env = {**os.environ, "NATS_URL": own_server.url}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr[-5000:]}"
    assert f"Connected to {own_server.url}" in out
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

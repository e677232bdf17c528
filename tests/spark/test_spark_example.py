"""``examples/spark_pipeline.py`` runs end to end against the session's server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from aiojetstream.testing import NatsServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def test_spark_pipeline_example(nats_server: NatsServer) -> None:
    # Its own Spark JVM (about 10 s to start) next to the test session's one.
    env = {**os.environ, "NATS_URL": nats_server.url}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr[-5000:]}"
    assert f"Connected to {nats_server.url}; created stream ORDERS and bucket order_totals" in out
    assert "Published orders o-0..o-599 to stream ORDERS" in out
    assert "Published orders o-600..o-799 to stream ORDERS" in out
    # The second run starts from the first one's checkpoint: it reads the 200 new orders only.
    assert 'checkpointed offset {"stream": "ORDERS", "seq": 601}' in out
    assert 'checkpointed offset {"stream": "ORDERS", "seq": 801}' in out
    minutes = re.findall(r"^  \d{4}-\d\d-\d\dT\d\d-\d\d +(\d+) orders", out, flags=re.M)
    assert len(minutes) == 8  # event times spread over 8 whole minutes
    assert sum(int(n) for n in minutes) == 800
    ok = r"^OK: 800 orders, [\d.]+ in total, over 8 minutes, match the bucket$"
    assert re.search(ok, out, flags=re.M)
    assert "MISMATCH" not in out

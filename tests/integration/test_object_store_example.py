"""``examples/object_store.py`` runs end to end against the session's server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from aiojetstream.testing import NatsServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "object_store.py"
TIMEOUT = 120.0


def test_object_store_example(nats_server: NatsServer) -> None:
    env = {**os.environ, "NATS_URL": nats_server.url}
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
    assert f"Connected to {nats_server.url}" in out
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

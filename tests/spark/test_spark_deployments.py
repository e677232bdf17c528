"""``format("jetstream")`` beyond ``local[N]``: a standalone cluster and Spark Connect.

Each test runs ``drivers/three_ways.py`` in a process of its own (one Python
process holds one SparkContext; the session's is a ``local[2,4]`` one): a
batch read of a stream, a batch write into a second stream and a streaming
copy into a third, then checks the three streams with its own connection and
that the reads left no consumer behind. They start JVMs of their own, one
after the other with the other Spark tests (the "spark" xdist group,
``tests/conftest.py``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiojetstream import JetStreamContext, StreamConfig
from spark.spark_helpers import Nats, stored, wait_no_consumers
from spark.spark_processes import (
    DRIVERS,
    SPARK_VERSION,
    assert_connect_port_free,
    run_process,
    spark_env,
    standalone_cluster,
)

SOURCE_MESSAGES = 1000
WRITE_ROWS = 600  # drivers/three_ways.py
MAX_RECORDS_PER_TRIGGER = 400  # drivers/three_ways.py
#: Seconds the driver may take: a cluster's about 90 s, Connect's about 120 s on a loaded machine.
DRIVER_TIMEOUT = 420.0


@dataclass
class Streams:
    source: str
    target: str
    copy: str


def make_streams(nats: Nats, name: str) -> Streams:
    """Three streams; ``source`` holds SOURCE_MESSAGES messages ``m-<i>`` (``<source>.<i % 3>``)."""
    streams = Streams(name + "_SRC", name + "_DST", name + "_CPY")

    async def work(js: JetStreamContext) -> None:
        for stream in (streams.source, streams.target, streams.copy):
            await js.create_stream(
                StreamConfig(name=stream, subjects=[f"{stream}.>"], allow_direct=True)
            )
        for i in range(SOURCE_MESSAGES):
            await js.publish_async(f"{streams.source}.{i % 3}", b"m-%d" % i)
        await js.publish_async_complete()

    nats.run(work)
    return streams


def run_three_ways(nats: Nats, streams: Streams, tmp_path: Path, how: list[str]) -> dict[str, Any]:
    out = tmp_path / "result.json"
    argv = [sys.executable, str(DRIVERS / "three_ways.py"), *how, "--servers", nats.url]
    argv += ["--source", streams.source, "--target", streams.target, "--copy", streams.copy]
    argv += ["--checkpoint", str(tmp_path / "checkpoint"), "--out", str(out)]
    run_process(argv, tmp_path / "driver.log", spark_env(), DRIVER_TIMEOUT, cwd=tmp_path)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    print(f"driver timings (s): {result['timings']}")
    return result


def check_three_ways(nats: Nats, streams: Streams, result: dict[str, Any]) -> None:
    """What the driver read, and what it wrote into the other two streams, exactly."""
    # 1. The batch read: every message, with its sequence, subject and payload.
    assert result["read"] == [
        [streams.source, i + 1, f"{streams.source}.{i % 3}", f"m-{i}"]
        for i in range(SOURCE_MESSAGES)
    ]
    # 2. The batch write: every row once (tasks publish side by side: any order).
    written = stored(nats, streams.target)
    assert sorted((m.data.decode(), m.subject, m.headers) for m in written) == sorted(
        (f"w-{i}", f"{streams.target}.{i % 3}", None) for i in range(WRITE_ROWS)
    )
    # 3. The streaming copy: every source message once, each with its dedupe=auto id.
    copied = stored(nats, streams.copy)
    assert sorted(m.data.decode() for m in copied) == sorted(
        f"m-{i}" for i in range(SOURCE_MESSAGES)
    )
    assert {m.subject for m in copied} == {f"{streams.copy}.copied"}
    ids = [(m.headers or {}).get("Nats-Msg-Id") for m in copied]
    assert None not in ids
    assert len(set(ids)) == SOURCE_MESSAGES
    if SPARK_VERSION >= (4, 2):  # admission control: Spark passes the cap with each start
        full, rest = divmod(SOURCE_MESSAGES, MAX_RECORDS_PER_TRIGGER)
        assert result["stream_batches"] == [MAX_RECORDS_PER_TRIGGER] * full + [rest]
    else:  # Spark 4.0/4.1 pass Python sources no read limit: how the run is cut is the source's
        assert sum(result["stream_batches"]) == SOURCE_MESSAGES
    # No read consumer is left on the source (each task deletes its own at its end).
    wait_no_consumers(nats, streams.source)


def test_standalone_cluster(nats: Nats, name: str, tmp_path: Path) -> None:
    """A master and two one-core workers from pyspark's own ``bin/spark-class``."""
    streams = make_streams(nats, name)
    with standalone_cluster(tmp_path / "cluster") as cluster:
        result = run_three_ways(nats, streams, tmp_path, ["--master", cluster.master_url])
    check_three_ways(nats, streams, result)
    # The read's four partitions ran in both executors (each one's working directory
    # is its own, under its worker's), in more than one Python worker.
    where = result["where_read"]
    assert sorted(rows for _, _, rows in where) == [SOURCE_MESSAGES // 4] * 4
    executors = {Path(cwd) for _, cwd, _ in where}
    assert len(executors) == 2, where
    assert {e.parent.parent for e in executors} == set(cluster.work_dirs)
    assert len({pid for pid, _, _ in where}) >= 2, where
    assert result["pid"] not in {pid for pid, _, _ in where}


def test_spark_connect(nats: Nats, name: str, tmp_path: Path) -> None:
    """``SparkSession.builder.remote("local[2]")``: a local Connect server from pyspark's jars.

    The format is found by the server (the installed ``pyspark_jetstream``
    module), not registered by the client.
    """
    assert_connect_port_free()
    streams = make_streams(nats, name)
    result = run_three_ways(nats, streams, tmp_path, ["--remote", "local[2]"])
    check_three_ways(nats, streams, result)

"""Helpers of the Spark tests (import as ``from spark_helpers import ...``)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pyspark
import pytest
from nats.aio.msg import Msg as NatsMsg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

import aiojetstream
from aiojetstream import JetStreamContext, RawStreamMessage
from helpers import wait_until_sync

T = TypeVar("T")

#: The installed pyspark's (major, minor).
SPARK_VERSION = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
#: Set by `make spark-matrix` (tools/spark_matrix.py) for the tests it runs.
SPARK_MATRIX_ENV = "AIOJETSTREAM_SPARK_MATRIX"


def requires_spark(minimum: tuple[int, int], what: str) -> pytest.MarkDecorator:
    """Mark a test of ``what``, which needs Spark >= ``minimum``.

    Under `make spark-matrix` (older versions on purpose) such a test is skipped
    there. Anywhere else (`make test`) it *fails* on an older pyspark: the dev
    extra pins the version the suite tests, so an older one is a broken
    environment, not a reason to test less.
    """
    reason = f"{what} needs Spark >= {minimum[0]}.{minimum[1]} (installed: {pyspark.__version__})"
    too_old = minimum > SPARK_VERSION
    if os.environ.get(SPARK_MATRIX_ENV) == "1":
        return pytest.mark.skipif(too_old, reason=reason)
    # tests/spark/conftest.py fails a test so marked when too_old.
    return pytest.mark.spark_minimum(reason=reason, too_old=too_old)


class Nats:
    """Synchronous access to the test server for setting up and checking (own event loop)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._loop = asyncio.new_event_loop()
        self.js: JetStreamContext = self._loop.run_until_complete(aiojetstream.connect(url))

    def run(self, work: Callable[[JetStreamContext], Awaitable[T]] | Awaitable[T]) -> T:
        """Run ``work(js)`` (or an awaitable) to completion."""
        awaitable = work(self.js) if callable(work) else work
        return self._loop.run_until_complete(awaitable)

    def close(self) -> None:
        self._loop.run_until_complete(self.js.close())
        self._loop.close()


def reader(spark: SparkSession, url: str, stream: str, **options: Any) -> Any:
    """``spark.read.format("jetstream")`` with servers, stream and options set."""
    r = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for key, value in options.items():
        r = r.option(key, str(value))
    return r


def rows(df: DataFrame) -> list[dict[str, Any]]:
    """Collected rows as dicts, in stream order."""
    return [r.asDict() for r in df.orderBy("seq").collect()]


def stored(nats: Nats, stream: str) -> list[RawStreamMessage]:
    """Every message of ``stream``, in order (by batch direct gets: needs ``allow_direct``)."""

    async def work(js: JetStreamContext) -> list[RawStreamMessage]:
        handle = await js.stream(stream)
        last = (await handle.info()).state.last_seq
        out: list[RawStreamMessage] = []
        while len(out) < last:
            start = out[-1].seq + 1 if out else 1
            out += [m async for m in handle.get_batch(500, seq=start, up_to_seq=last)]
        return out

    return nats.run(work)


def consumers(nats: Nats, stream: str) -> list[str]:
    """The names of ``stream``'s consumers."""

    async def work(js: JetStreamContext) -> list[str]:
        return [c async for c in js.consumer_names(stream)]

    return nats.run(work)


def wait_no_consumers(nats: Nats, stream: str, timeout: float = 45.0) -> None:
    """Wait until ``stream`` has no consumer left.

    A read task deletes its ephemeral consumer when it ends (the server may
    take a moment to drop it); failing that, the consumer's inactive
    threshold (30 s by default) removes it: hence the bound.
    """
    wait_until_sync(
        lambda: consumers(nats, stream) == [],
        timeout=timeout,
        message=f"no consumer left on {stream}",
    )


class CreateSpy:
    """The consumer-create requests of the JetStream API for one stream, as the server saw them.

    A plain subscription to ``$JS.API.CONSUMER.CREATE.<stream>[.>]`` receives a copy
    of every request (its config, and its reply subject, whose inbox prefix names
    the connection that sent it).
    """

    def __init__(self, url: str, stream: str) -> None:
        self._loop_ready = threading.Event()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._nats = Nats(url)

        async def subscribe(js: JetStreamContext) -> None:
            nc = js.nc
            for subject in (
                f"$JS.API.CONSUMER.CREATE.{stream}",
                f"$JS.API.CONSUMER.CREATE.{stream}.>",
            ):
                await nc.subscribe(subject, cb=self._seen)
            await nc.flush()

        self._nats.run(subscribe)
        self._thread = threading.Thread(target=self._nats._loop.run_forever, daemon=True)
        self._thread.start()

    async def _seen(self, msg: NatsMsg) -> None:
        with self._lock:
            self.requests.append((msg.reply, json.loads(msg.data)))

    def configs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [body["config"] for _reply, body in self.requests]

    def connections(self) -> set[str]:
        with self._lock:
            return {reply.rsplit(".", 1)[0] for reply, _body in self.requests}

    def close(self) -> None:
        loop = self._nats._loop
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        self._nats.close()


def run_available_now(
    df: DataFrame, sink: Callable[[DataFrame, int], None], checkpoint: Path
) -> None:
    """Run ``df`` into the foreachBatch ``sink`` (Trigger.AvailableNow); raise any error."""
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    exc = query.exception()
    if exc is not None:
        raise exc


def start_query(
    df: DataFrame, sink: Callable[[DataFrame, int], None], checkpoint: Path, interval: str
) -> StreamingQuery:
    """Start ``df`` into the ``foreachBatch`` ``sink`` with a processing-time trigger."""
    return (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=interval)
        .start()
    )

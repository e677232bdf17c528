"""Helpers of the Spark tests (import as ``from spark_helpers import ...``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

import aiojetstream
from aiojetstream import JetStreamContext

T = TypeVar("T")


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

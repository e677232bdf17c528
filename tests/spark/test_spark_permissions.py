"""``consumerNamePrefix``: reading with a user that may create only named consumers.

NATS permissions match whole subject tokens, so no permission can say "names
starting with ``etl-``"; what they can say is "named consumers of stream
PERMS only" (``$JS.API.CONSUMER.CREATE.PERMS.*``), refusing the unnamed
create (``$JS.API.CONSUMER.CREATE.PERMS``) that reads use by default. Such a
``reader`` user (and nothing else of the API but that stream's info) reads
with ``consumerNamePrefix=etl``: every consumer the read creates is named
``etl-<unique>`` and none is left behind; without the prefix the read fails.
The user may subscribe to its own inboxes only (``_INBOX_etl.>``), which the
read's replies reach with ``inboxPrefix=_INBOX_etl``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from aiojetstream import JetStreamContext, StreamConfig
from aiojetstream.testing import NatsServer
from helpers import spark_reader_config, wait_until_sync
from spark.spark_helpers import CreateSpy, Nats

STREAM = "PERMS"
CONFIG = spark_reader_config(STREAM, "_INBOX_etl")


@pytest.fixture
def server() -> Iterator[NatsServer]:
    with NatsServer(config=CONFIG) as srv:
        yield srv


def test_reader_limited_to_prefixed_consumers(spark: SparkSession, server: NatsServer) -> None:
    admin = Nats(server.url.replace("nats://", "nats://admin:admin@"))
    try:

        async def fill(js: JetStreamContext) -> None:
            await js.create_stream(StreamConfig(name=STREAM, subjects=["perms.>"]))
            for i in range(100):
                await js.publish_async("perms.a", b"%d" % i)
            await js.publish_async_complete()

        admin.run(fill)

        def read(**options: str) -> list[int]:
            r = (
                spark.read.format("jetstream")
                .option("servers", server.url)
                .option("user", "reader")
                .option("password", "reader")
                .option("stream", STREAM)
                .option("numPartitions", "3")
                .option("inboxPrefix", "_INBOX_etl")
            )
            for key, value in options.items():
                r = r.option(key, value)
            return sorted(row["seq"] for row in r.load().select("seq").collect())

        spy = CreateSpy(server.url.replace("nats://", "nats://admin:admin@"), STREAM)
        try:
            assert read(consumerNamePrefix="etl") == list(range(1, 101))
            wait_until_sync(lambda: len(spy.requests) >= 3)
        finally:
            spy.close()
        names = [config["name"] for config in spy.configs()]
        assert all(re.fullmatch(r"etl-[0-9a-f]{16}", n) for n in names), names

        async def consumers(js: JetStreamContext) -> list[str]:
            return [name async for name in js.consumer_names(STREAM)]

        wait_until_sync(lambda: admin.run(consumers) == [], message="read consumers left behind")
        # Unnamed consumers are not allowed: the refused create is not retried for
        # retryTimeout (30 s by default) but fails at once, naming the violation.
        started = time.monotonic()
        with pytest.raises(PySparkException, match=r"AuthorizationError.*ermissions violation"):
            read(timeout="2")
        assert time.monotonic() - started < 60  # 4 task attempts x a 2 s request timeout
    finally:
        admin.close()

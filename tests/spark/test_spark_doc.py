"""``docs/spark.md`` runs: every complete ```python block, in order, in the Spark session.

The page's samples talk to the server in ``NATS_URL`` and use a stream
``ORDERS`` (``orders.>``) of JSON orders, a stream ``ARCHIVE``
(``archive.>``) and a bucket ``order_totals``: this test makes them on a
server of its own (the names are fixed), runs the blocks (fragments skipped,
see ``docs/index.md``, "Code blocks") and checks what they left behind.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

import aiojetstream
from aiojetstream import KeyNotFoundError, KeyValueConfig, StreamConfig
from aiojetstream.testing import NatsServer
from docblocks import DOCS, nats_url_env, page_namespace, run_block, run_blocks, runnable_blocks

PAGE = DOCS / "spark.md"
MIN_BLOCKS = 6
ORDERS = [("eu", 12.5), ("us", 30.0), ("eu", 7.25), ("us", 1.0), ("eu", 99.0)]


async def test_spark_page_blocks_run_in_order(spark: SparkSession) -> None:
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url)
        try:
            await js.create_stream(StreamConfig(name="ORDERS", subjects=["orders.>"]))
            await js.create_stream(StreamConfig(name="ARCHIVE", subjects=["archive.>"]))
            totals = await js.create_key_value(KeyValueConfig(bucket="order_totals"))
            await totals.put("2026-11-24T05-48", b'{"orders": 1, "amount": "1.00"}')
            for n, (region, amount) in enumerate(ORDERS, 1):
                order = {"order_id": f"o-{n}", "amount": amount, "ts": "2026-11-24T05:47:12Z"}
                await js.publish(f"orders.{region}", json.dumps(order).encode())
            # The page's setup block registers the formats (harmless, and it stays so
            # for the session's later tests): first prove they were found without it.
            seen = spark.read.format("jetstream").option("servers", server.url)
            assert seen.option("stream", "ORDERS").load().count() == len(ORDERS)
            namespace = page_namespace(PAGE, js)
            with nats_url_env(server.url):
                try:
                    await run_blocks(PAGE, namespace, MIN_BLOCKS, in_thread=False)
                finally:
                    spark.sparkContext.setLogLevel("ERROR")  # the setup block sets WARN
            # What the blocks claim to have done.
            orders = await js.stream("ORDERS")
            assert (await orders.info()).state.messages == len(ORDERS) + 2  # the batch write
            eu = sum(1 for region, _ in ORDERS if region == "eu") + 1  # and o-1 of the write
            archive = await js.stream("ARCHIVE")
            assert (await archive.info()).state.messages == eu  # the streaming copy
            # Run the copy again after two more EU orders: its next micro-batch (same
            # query, partitions and row numbers, another batch id) copies exactly those.
            for n in (6, 7):
                order = {"order_id": f"o-{n}", "amount": 1.0, "ts": "2026-11-24T05:49:00Z"}
                await js.publish("orders.eu", json.dumps(order).encode())
            (copy,) = [b for b in runnable_blocks(PAGE) if '"archive.orders.eu"' in b.source]
            with nats_url_env(server.url):
                await run_block(copy.source, copy.number, namespace, PAGE.name, in_thread=False)
            assert (await archive.info()).state.messages == eu + 2
            entry = await totals.get("2026-11-24T05-47")
            assert json.loads(entry.value) == {"orders": 104, "amount": "11554.92"}
            with pytest.raises(KeyNotFoundError):  # a null value deletes the key
                await totals.get("2026-11-24T05-48")
        finally:
            await js.close()

"""PySpark data sources for JetStream streams and key-value buckets.

Install with the ``spark`` extra (``pip install 'aiojetstream[spark]'``: pyspark
>= 4.0 and pyarrow) and register the formats once per session::

    import aiojetstream.spark
    aiojetstream.spark.register(spark)

    df = spark.read.format("jetstream").option("stream", "ORDERS").load()
    df.write.format("jetstream").option("subject", "orders.copy").mode("append").save()
    kv = spark.read.format("jetstream_kv").option("bucket", "totals").load()

Installing the package also registers both formats without the call (the
top-level modules ``pyspark_jetstream`` and ``pyspark_jetstream_kv`` define
Spark's ``DefaultSource``). Every option, the offset model and the
exactly-once rules are in ``docs/spark.md``.
"""

from __future__ import annotations

from typing import Any

from ._kv import JetStreamKVDataSource
from ._options import JetStreamSparkWarning
from ._read import DataLossError
from ._source import JetStreamDataSource

__all__ = [
    "DataLossError",
    "JetStreamDataSource",
    "JetStreamKVDataSource",
    "JetStreamSparkWarning",
    "register",
]


def register(spark: Any) -> None:
    """Register the formats ``jetstream`` and ``jetstream_kv`` on a ``SparkSession``.

    Args:
        spark: the ``pyspark.sql.SparkSession``.

    """
    spark.dataSource.register(JetStreamDataSource)
    spark.dataSource.register(JetStreamKVDataSource)

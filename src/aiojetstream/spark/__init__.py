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

try:
    from ._kv import JetStreamKVDataSource
    from ._options import JetStreamSparkWarning
    from ._read import DataLossError
    from ._source import JetStreamDataSource
except ModuleNotFoundError as exc:  # no spark extra: say which to install
    if (exc.name or "").partition(".")[0] not in ("pyspark", "pyarrow"):
        raise
    # (The same words as aiojetstream._extras.missing_extra: this package imports
    # the library as a user would.)
    raise ModuleNotFoundError(
        f"{__name__} needs the 'spark' extra (pyspark >= 4.0 and pyarrow): {exc}; "
        "install it with pip install 'aiojetstream[spark]'",
        name=exc.name,
        path=exc.path,
    ) from exc

__all__ = [
    "DataLossError",
    "JetStreamDataSource",
    "JetStreamKVDataSource",
    "JetStreamSparkWarning",
    "register",
]


def register(spark: Any) -> None:
    """Register the formats ``jetstream`` and ``jetstream_kv`` on a ``SparkSession``.

    Harmless when the installed ``pyspark_jetstream*`` modules registered them
    already (Spark 4.0 refuses a second registration of a name; later versions
    replace it).

    Args:
        spark: the ``pyspark.sql.SparkSession``.

    """
    for source in (JetStreamDataSource, JetStreamKVDataSource):
        try:
            spark.dataSource.register(source)
        except Exception as exc:
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
                raise
            # Spark 4.0: found through the pyspark_jetstream* modules already.

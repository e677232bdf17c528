"""Spark's automatic registration of ``format("jetstream_kv")`` (see ``aiojetstream.spark``).

Without the spark extra (no pyarrow) the format is still registered: using it
raises an error that says what to install (Spark said ``DATA_SOURCE_NOT_FOUND``).
"""

from aiojetstream._extras import spark_source

DefaultSource = spark_source("JetStreamKVDataSource", "jetstream_kv", __name__)
if DefaultSource is None:  # pyspark without Python data sources: nothing to register
    del DefaultSource
else:
    __all__ = ["DefaultSource"]

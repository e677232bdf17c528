"""Numeric options past their bounds fail when Spark plans the read, naming the option.

The bounds themselves are tested without Spark (tests/unit/test_spark_option_bounds.py);
this checks that the error reaches the Spark user at ``load()``, before a job runs.
"""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from aiojetstream import StreamConfig
from spark.spark_helpers import Nats, reader


def test_out_of_range_options_fail_at_load_before_any_job(
    spark: SparkSession, nats: Nats, name: str
) -> None:
    nats.run(lambda js: js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"])))
    before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    for option, value, message in (
        # Read every row instead of none: the server wrapped the time.
        ("startingTimestamp", "9999-12-31T23:59:59Z", "int64 nanoseconds since 1970"),
        # One task per sequence.
        ("numPartitions", str(10**30), "up to 10,000"),
        # The server's raw 10025, inside a task.
        ("inactiveThreshold", "1e10", "up to 9,223,372,036"),
        # Read nothing.
        ("startingOffsets", str(2**70), "from 1 to 2\\*\\*64 - 1"),
    ):
        with pytest.raises(PySparkException, match=rf"option '{option}'.*{message}"):
            reader(spark, nats.url, name, **{option: value}).load()
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == before

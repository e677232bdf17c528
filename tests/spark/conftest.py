"""Spark fixtures: one real SparkSession (``local[2,4]``) for the whole test session.

``local[2,4]``: two cores, as CI has, and up to four attempts per task so the
task-retry tests can fail a task once. The formats are *not* registered here:
the session finds them through the installed ``pyspark_jetstream*`` modules,
which is itself under test.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from aiojetstream.testing import NatsServer
from spark.spark_helpers import Nats


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test of a feature newer than the installed pyspark (spark_helpers.requires_spark)."""
    mark = item.get_closest_marker("spark_minimum")
    if mark is not None and mark.kwargs["too_old"]:
        pytest.fail(
            f"{mark.kwargs['reason']}: `make test` tests the pyspark the dev extra pins "
            "(run `make install`); older versions are `make spark-matrix`'s job",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The session's SparkSession (about 10 s to start)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("aiojetstream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def nats(nats_server: NatsServer) -> Iterator[Nats]:
    """A connected :class:`Nats` helper for one test."""
    helper = Nats(nats_server.url)
    try:
        yield helper
    finally:
        helper.close()


@pytest.fixture
def name() -> str:
    """A fresh stream or bucket name for one test."""
    return "T" + uuid.uuid4().hex[:10].upper()

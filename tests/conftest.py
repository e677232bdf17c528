"""Test-suite configuration: load the aiojetstream pytest plugin exactly once.

The plugin (``aiojetstream.testing``: the ``nats_server``, ``nats_url`` and
``js`` fixtures) is normally loaded through the package's ``pytest11`` entry
point. When the package is not installed (``PYTHONPATH=src``) or plugin
autoloading is disabled, register it here instead; registering it twice would
make pluggy fail, hence the check rather than ``pytest_plugins``.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

import aiojetstream.testing


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(aiojetstream.testing):
        config.pluginmanager.register(aiojetstream.testing, "aiojetstream.testing")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Leave what the imports made out of the cyclic collector's full passes.

    The modules and test items (pyspark, hypothesis, the suite: about 340,000
    objects) live until the process ends, and each full collection walked them
    all: 0.1-0.22 s with the event loop stopped, which made a fault test's
    deadlines overrun by a quarter of a second in a CI run. (Reference counting
    still frees them; ``gc.freeze`` only stops the collector's walks.)
    """
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _no_shared_spark_session_outlives_its_test() -> Iterator[None]:
    """Close the Spark sessions a test made in this process, after it.

    Tests that call the Spark reader and writer in-process leave a shared
    session (a loop thread and a connection) behind, which kept reconnecting to
    the test's stopped servers through later tests of the worker.
    """
    yield
    runtime = sys.modules.get("aiojetstream.spark._runtime")
    if runtime is not None:
        runtime._close_shared()


#: Test files whose tests share one xdist worker (``make test`` runs ``-n 2
#: --dist loadgroup``): the Spark tests share one SparkSession (a JVM of its own)
#: and the Spark example starts another, so they run one after the other on one
#: worker, and so do the Spark tests that start JVMs of their own in subprocesses
#: (a standalone cluster, Spark Connect, ``spark-pipelines``; Connect's port is
#: fixed): two sets of JVMs at once starve the other worker's time-bound tests
#: on a 2-core machine (seen: CLI process tests timing out);
#: a three-node cluster is the heaviest server set-up, so at most one runs at a
#: time. The first matching prefix wins.
_GROUPS = {
    "tests/spark/": "spark",
    "tests/integration/test_examples.py": "spark",
    "tests/reliability/": "cluster",
}


# tryfirst: xdist's own hook reads the marks (it runs before a plain conftest hook).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        where = item.path.relative_to(root).as_posix()
        for prefix, group in _GROUPS.items():
            if where.startswith(prefix):
                item.add_marker(pytest.mark.xdist_group(group))
                break
        else:
            if item.get_closest_marker("cluster") is not None:
                item.add_marker(pytest.mark.xdist_group("cluster"))

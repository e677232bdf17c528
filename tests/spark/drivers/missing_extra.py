"""A Spark driver run as a subprocess whose Python has pyspark but not pyarrow.

The test puts a ``sitecustomize`` that blocks ``pyarrow`` in front of
``PYTHONPATH`` (the driver's and its Python workers'), as an install of
``aiojetstream`` and ``pyspark`` without the ``spark`` extra::

    python missing_extra.py --out result.json

It uses ``format("jetstream")`` and ``format("jetstream_kv")`` (found
without ``register()``, through the installed ``pyspark_jetstream*``
modules) and writes each error's message as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from pyspark.sql import SparkSession


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("aiojetstream-missing-extra")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    errors: dict[str, str] = {}
    uses: dict[str, Callable[[], object]] = {
        "import aiojetstream.spark": lambda: __import__("aiojetstream.spark"),
        "read jetstream": lambda: spark.read.format("jetstream").option("stream", "S").load(),
        "read jetstream_kv": lambda: spark.read.format("jetstream_kv").option("bucket", "B").load(),
    }
    try:
        for what, use in uses.items():
            try:
                use()
            except Exception as exc:
                errors[what] = f"{type(exc).__name__}: {exc}"
            else:
                errors[what] = "no error"
    finally:
        spark.stop()
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(errors, out)


if __name__ == "__main__":
    main()

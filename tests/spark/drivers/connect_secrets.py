"""A Spark Connect client run as a subprocess: reads with secrets in their options, event log on.

Spark Connect records each request's plan, the options and their values
included, as the operation's statement text and its jobs' call site; only
the Connect server's ``spark.redaction.string.regex`` redacts them. The test
runs this script with and without that setting and searches the event log::

    python connect_secrets.py --reads reads.json --eventlog DIR \
        [--redaction-regex REGEX] --out result.json

It starts a local Connect server (``remote("local[2]")``) writing its event
log, uncompressed, into ``DIR``, runs ``format("jetstream_kv")`` reads with
each set of options in ``reads.json`` (a JSON list), and writes, for each,
the keys read (or the error's first line) as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys

from pyspark.sql import SparkSession


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", required=True)
    parser.add_argument("--eventlog", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--redaction-regex")
    args = parser.parse_args()
    with open(args.reads, encoding="utf-8") as f:
        reads: list[dict[str, str]] = json.load(f)
    # The configuration of the local Connect server this starts (its SparkContext's).
    builder = (
        SparkSession.builder.appName("aiojetstream-connect-redaction")
        .remote("local[2]")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", "file://" + args.eventlog)
        .config("spark.eventLog.compress", "false")
    )
    if args.redaction_regex:
        builder = builder.config("spark.redaction.string.regex", args.redaction_regex)
    spark = builder.getOrCreate()
    out: list[object] = []
    try:
        for options in reads:
            df = spark.read.format("jetstream_kv").options(**options).load()
            try:
                out.append(sorted(r.key for r in df.collect()))
            except Exception as exc:
                out.append(str(exc).splitlines()[0])
    finally:
        spark.stop()  # the server writes the rest of its event log
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Spark's automatic registration of ``format("jetstream_kv")`` (see ``aiojetstream.spark``)."""

from aiojetstream.spark import JetStreamKVDataSource as DefaultSource

__all__ = ["DefaultSource"]

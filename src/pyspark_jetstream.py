"""Spark's automatic registration of ``format("jetstream")`` (see ``aiojetstream.spark``)."""

from aiojetstream.spark import JetStreamDataSource as DefaultSource

__all__ = ["DefaultSource"]

"""Spark's automatic registration of ``format("jetstream")`` (see ``aiojetstream.spark``)."""

try:
    from aiojetstream.spark import JetStreamDataSource as DefaultSource
except ImportError:  # aiojetstream without its spark extra (no pyarrow): nothing to register
    pass
else:
    __all__ = ["DefaultSource"]

"""Spark's automatic registration of ``format("jetstream_kv")`` (see ``aiojetstream.spark``)."""

try:
    from aiojetstream.spark import JetStreamKVDataSource as DefaultSource
except ImportError:  # aiojetstream without its spark extra (no pyarrow): nothing to register
    pass
else:
    __all__ = ["DefaultSource"]

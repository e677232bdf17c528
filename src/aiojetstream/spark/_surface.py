"""The first lines a Spark user sees of a data source error carry its message.

Spark reports an exception of a Python data source as text: the Python worker
formats it with its traceback (``traceback.TracebackException``) and the JVM
puts that text into its own error, ``[PYTHON_DATA_SOURCE_ERROR] Failed to
generate Python data source read partitions: Traceback (most recent call
last): ...`` when planning, ``[PYTHON_EXCEPTION] An exception was thrown from
the Python worker: ...`` in a task. Only the last line of that text is the
message, after a frame for every call down to where it was raised (a missing
stream: 1,538 characters, 17 frames of aiojetstream and asyncio). Spark has
no structured error a data source could raise instead (verified with pyspark
4.3: the planner runner reads one string); it leaves out the traceback only
when the session sets ``spark.sql.execution.pyspark.udf.hideTraceback.enabled``.

So the entry points Spark calls re-raise an aiojetstream error with a
traceback of their own frame only and without its chain (Spark's simplified
traceback, on by default, drops the chain anyway): the message is on the
fourth line. Any other exception (a bug) keeps its whole traceback. The full
traceback is logged at debug level (logger ``aiojetstream.spark``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from aiojetstream import JetStreamError

__all__ = ["surfaced", "surfaced_iter"]

logger = logging.getLogger("aiojetstream.spark")

P = ParamSpec("P")
R = TypeVar("R")
Y = TypeVar("Y")


def surfaced(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, raising an aiojetstream error with a one-frame traceback (see the module)."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except JetStreamError as exc:
            logger.debug("%s failed", fn.__qualname__, exc_info=True)
            raise exc.with_traceback(None) from None

    return call


def surfaced_iter(fn: Callable[P, Iterator[Y]]) -> Callable[P, Iterator[Y]]:
    """:func:`surfaced` for a method returning an iterator (a partition's rows)."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> Iterator[Y]:
        try:
            yield from fn(*args, **kwargs)
        except JetStreamError as exc:
            logger.debug("%s failed", fn.__qualname__, exc_info=True)
            raise exc.with_traceback(None) from None

    return call

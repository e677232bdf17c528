"""Ordered consumers (ADR-17): in-order, gap-free delivery over recreated ephemeral consumers.

The package: :mod:`.cursor` (the cursor, the recreation of the server-side
consumer with backoff, and the readers over it: :class:`OrderedBatch` for a
fetch, :class:`OrderedSource` for ``messages`` / ``consume``), :mod:`.handle`
(:class:`OrderedConsumer`, its public calls, and :func:`make_ordered`).
"""

from .cursor import (
    DELETE_TIMEOUT,
    RESET_BACKOFF_FIRST,
    RESET_BACKOFF_MAX,
    OrderedBatch,
    OrderedSource,
)
from .handle import OrderedConsumer, make_ordered

__all__ = [
    "DELETE_TIMEOUT",
    "RESET_BACKOFF_FIRST",
    "RESET_BACKOFF_MAX",
    "OrderedBatch",
    "OrderedConsumer",
    "OrderedSource",
    "make_ordered",
]

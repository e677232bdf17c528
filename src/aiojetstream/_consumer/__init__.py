"""Pull consumers (ADR-37): the management calls and the :class:`Consumer` handle.

The package: :mod:`.calls` (create / update, info, delete, list, names),
:mod:`.contexts` (what a pull hands out: :class:`MessageBatch`,
:class:`MessagesContext`, :class:`TypedMessagesContext`,
:class:`ConsumeContext`, and the :class:`MessageSource` the last two read),
:mod:`.options` (the pull calls' keyword options for their overloads, and
:func:`secs`), :mod:`.handle` (:class:`Consumer`). The ordered consumer
(:mod:`aiojetstream._ordered`) reuses the contexts and options.
"""

from .calls import (
    ACTION_CREATE,
    ACTION_CREATE_OR_UPDATE,
    ACTION_UPDATE,
    consumer_info,
    consumer_names,
    delete_consumer,
    list_consumers,
    not_pull_error,
    upsert_consumer,
)
from .contexts import (
    ConsumeContext,
    Handler,
    MessageBatch,
    MessagesContext,
    MessageSource,
    TypedMessagesContext,
)
from .handle import Consumer
from .options import secs

__all__ = [
    "ACTION_CREATE",
    "ACTION_CREATE_OR_UPDATE",
    "ACTION_UPDATE",
    "ConsumeContext",
    "Consumer",
    "Handler",
    "MessageBatch",
    "MessageSource",
    "MessagesContext",
    "TypedMessagesContext",
    "consumer_info",
    "consumer_names",
    "delete_consumer",
    "list_consumers",
    "not_pull_error",
    "secs",
    "upsert_consumer",
]

"""The pull calls' keyword options, as ``TypedDict`` s for their overloads (PEP 692).

Each pull call (``fetch``, ``fetch_bytes``, ``fetch_no_wait``, ``next``,
``messages``, ``consume``) has two overloads, without and with ``model=``,
which differ in ``model``, the result, and ``codec`` / ``on_invalid``
(only with ``model=``: without, they raised at run time). Their other options are spelled
once here and taken as ``**options: Unpack[...]``; the implementations keep
their explicit keyword parameters (what ``help()``, ``inspect.signature`` and
the documentation show), so these only serve the type checker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypedDict

from .. import _bounds as B
from .._codec import Codec
from .._pull_driver import ErrorHandler
from .._typed import OnInvalid, OrderedOnInvalid

Duration = float | timedelta | str
"""A pull option's duration: seconds, a timedelta or a string such as ``"30s"``."""


class WaitOptions(TypedDict, total=False):
    """How long one pull waits: ``fetch``, ``fetch_bytes``, ``next``."""

    expires: Duration
    heartbeat: Duration | None


class ContinuousOptions(TypedDict, total=False):
    """The buffer and pulls of ``messages`` / ``consume``."""

    max_messages: int | None
    max_bytes: int | None
    expires: Duration
    heartbeat: Duration | None
    threshold_messages: int | None
    threshold_bytes: int | None
    error_handler: ErrorHandler | None


class GroupOptions(TypedDict, total=False):
    """Priority groups (ADR-42): the consumer's group and its conditions."""

    group: str | None
    min_pending: int | None
    min_ack_pending: int | None
    priority: int | None


class TypedOptions(TypedDict, total=False):
    """How payloads are decoded with ``model=`` and what an invalid one gets."""

    codec: Codec | None
    on_invalid: OnInvalid


class OrderedTypedOptions(TypedDict, total=False):
    """:class:`TypedOptions` of an ordered consumer: it acknowledges nothing."""

    codec: Codec | None
    on_invalid: OrderedOnInvalid


class FetchOptions(WaitOptions, GroupOptions, total=False):
    """``Consumer.fetch`` / ``fetch_bytes`` / ``next`` without ``model=``."""


class TypedFetchOptions(FetchOptions, TypedOptions, total=False):
    """``Consumer.fetch`` / ``fetch_bytes`` / ``next`` with ``model=``."""


class NoWaitOptions(GroupOptions, total=False):
    """``Consumer.fetch_no_wait`` without ``model=``."""

    max_bytes: int | None


class TypedNoWaitOptions(NoWaitOptions, TypedOptions, total=False):
    """``Consumer.fetch_no_wait`` with ``model=``."""


class ConsumeOptions(ContinuousOptions, GroupOptions, total=False):
    """``Consumer.messages`` / ``consume`` without ``model=``."""


class TypedConsumeOptions(ConsumeOptions, TypedOptions, total=False):
    """``Consumer.messages`` / ``consume`` with ``model=``."""


class OrderedFetchOptions(WaitOptions, total=False):
    """``OrderedConsumer.fetch`` / ``fetch_bytes`` / ``next`` without ``model=``."""


class OrderedTypedFetchOptions(OrderedFetchOptions, OrderedTypedOptions, total=False):
    """``OrderedConsumer.fetch`` / ``fetch_bytes`` / ``next`` with ``model=``."""


class OrderedNoWaitOptions(TypedDict, total=False):
    """``OrderedConsumer.fetch_no_wait`` without ``model=``."""

    max_bytes: int | None


class OrderedTypedNoWaitOptions(OrderedNoWaitOptions, OrderedTypedOptions, total=False):
    """``OrderedConsumer.fetch_no_wait`` with ``model=``."""


class OrderedConsumeOptions(ContinuousOptions, total=False):
    """``OrderedConsumer.messages`` / ``consume`` without ``model=``."""


class OrderedTypedConsumeOptions(OrderedConsumeOptions, OrderedTypedOptions, total=False):
    """``OrderedConsumer.messages`` / ``consume`` with ``model=``."""


def secs(value: Duration | None, name: str) -> float | None:
    """A pull option's duration in seconds (a timedelta or a duration string too)."""
    if isinstance(value, timedelta | str):
        return B.seconds(value, name, zero=True)
    return value

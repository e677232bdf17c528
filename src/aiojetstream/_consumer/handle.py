"""The pull :class:`Consumer` handle: administration, priority groups and the pull calls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar, Unpack, overload

from .. import _admin as A
from .. import _api
from .. import _features as F
from .._admin import Backlog
from .._api import ApiClient
from .._codec import Codec
from .._errors import FetchTimeoutError, InvalidOptionError
from .._message import Msg, TypedMsg
from .._models import AckPolicy, ConsumerInfo, ConsumerPauseResponse
from .._priority import PinState, check_group_name
from .._pull_driver import ErrorHandler, PullDriver
from .._pull_engine import (
    DEFAULT_EXPIRES,
    MIN_EXPIRES,
    NEXT_REPULL_MIN_LEFT,
    REPULL_BACKOFF_FIRST,
    REPULL_BACKOFF_MAX,
    PriorityConsumer,
    PullSettings,
    fit_heartbeat,
    fit_to_limits,
    paced,
    resolve_consume,
    resolve_fetch,
)
from .._typed import (
    OnInvalid,
    Refused,
    TypedMessageBatch,
    check_on_invalid,
    check_typed,
    next_valid,
    refuse_codec_alone,
    typed_handler,
)
from .._validation import check_timeout
from .calls import consumer_info, not_pull_error
from .contexts import ConsumeContext, MessageBatch, MessagesContext, TypedMessagesContext
from .options import (
    ConsumeOptions,
    FetchOptions,
    NoWaitOptions,
    TypedConsumeOptions,
    TypedFetchOptions,
    TypedNoWaitOptions,
    secs,
)

T = TypeVar("T")


class Consumer:
    """A handle on a pull consumer (ADR-37).

    Get one from :meth:`JetStreamContext.consumer`, :meth:`Stream.consumer` or a
    create call; it does not keep anything open by itself.
    """

    #: Called with ``(msg, error, on_invalid)`` on a typed message that does not
    #: validate, before it is raised, terminated or nak'ed (set by telemetry).
    _on_refused: Refused | None = None

    def __init__(self, api: ApiClient, info: ConsumerInfo) -> None:
        self._api = api
        self._info = info
        self._name = info.name
        self._stream = info.stream_name
        self._pins: dict[str, PinState] = {}  # pinned_client: the pin per group

    @property
    def name(self) -> str:
        """The consumer's name."""
        return self._name

    @property
    def stream_name(self) -> str:
        """The name of the stream the consumer reads."""
        return self._stream

    @property
    def cached_info(self) -> ConsumerInfo:
        """The info from the last server round trip (no request is made)."""
        return self._info

    async def info(self, *, timeout: float | timedelta | str | None = None) -> ConsumerInfo:
        """Fetch the consumer's current info from the server and cache it."""
        timeout = check_timeout(timeout)
        self._info = await consumer_info(self._api, self._stream, self._name, timeout)
        return self._info

    def __repr__(self) -> str:
        return f"<Consumer {self._stream}/{self._name}>"

    # ------------------------------------------------------------ administration

    async def pause(
        self,
        until: datetime | timedelta | float | str,
        *,
        timeout: float | timedelta | str | None = None,
    ) -> ConsumerPauseResponse:
        """Pause the consumer until ``until`` (a datetime, or a duration from now: ``"1h"``).

        Pulls get nothing while it is paused; on an interest stream it keeps
        its backlog. nats-server >= 2.11.

        Raises:
            ConsumerNotFoundError: the consumer does not exist.
            FeatureNotSupportedError: the server is older than 2.11.
            InvalidOptionError: ``until`` is not in the future.

        """
        timeout = check_timeout(timeout)
        return await A.pause(self._api, self._stream, self._name, until, timeout)

    async def resume(
        self, *, timeout: float | timedelta | str | None = None
    ) -> ConsumerPauseResponse:
        """Resume the consumer (nats-server >= 2.11)."""
        timeout = check_timeout(timeout)
        return await A.resume(self._api, self._stream, self._name, timeout)

    async def reset(
        self, sequence: int | None = None, *, timeout: float | timedelta | str | None = None
    ) -> int:
        """Move the consumer: the next message delivered is ``sequence``.

        ``None`` goes back to the ack floor + 1: every message after the floor
        comes again, acknowledged ones above it included. Messages before the
        new position count as acknowledged, which on an interest stream
        removes those no other consumer needs.
        nats-server >= 2.14 (API level 4).

        Returns:
            The sequence the server reset the consumer to.

        Raises:
            InvalidOptionError: ``sequence`` is beyond the stream's last
                sequence + 1 (the server would silently skip future messages);
                or ``None`` on a ``last_per_subject`` consumer with messages
                unacknowledged (the server would never deliver them again).
            ConsumerNotFoundError: the consumer does not exist (promptly).
            StreamNotFoundError: the stream does not exist (promptly).
            FeatureNotSupportedError: the server is older than 2.14.
            ConsumerResetError: the server refused (10204: not allowed for the
                consumer's deliver policy, or below its start sequence or time).

        """
        timeout = check_timeout(timeout)
        seq, self._info = await A.reset(self._api, self._stream, self._name, sequence, timeout)
        return seq

    async def clear_backlog(self, *, timeout: float | timedelta | str | None = None) -> int:
        """Skip everything stored now (Pulsar's clear-backlog): reset to last sequence + 1.

        Returns the sequence the consumer continues at. A consumer with nothing
        left to deliver or acknowledge is not reset (one starting beyond the
        stream's end could not be). nats-server >= 2.14.
        """
        timeout = check_timeout(timeout)
        seq, self._info = await A.clear_backlog(self._api, self._stream, self._name, timeout)
        return seq

    async def skip_older_than(
        self, age: float | timedelta | str, *, timeout: float | timedelta | str | None = None
    ) -> int:
        """Pulsar's per-subscription message TTL: skip this consumer's messages older than ``age``.

        Only this consumer moves (``max_age`` and ``Nats-TTL`` delete for
        everyone), and never back into acknowledged messages: when the first
        message younger than ``age`` was delivered already and a message after
        the ack floor was acknowledged, nothing moves (the old messages still
        unacknowledged stay pending). Returns the sequence it continues at.
        nats-server >= 2.14.

        Raises:
            InvalidOptionError: ``age`` is not a positive duration (seconds, a
                timedelta or a string such as ``"1h"``), or longer than the
                server's durations (about 292 years; the server wrapped a
                cutoff before 1677 and skipped everything).

        """
        timeout = check_timeout(timeout)
        seq, self._info = await A.skip_older_than(self._api, self._stream, self._name, age, timeout)
        return seq

    async def backlog(self, *, timeout: float | timedelta | str | None = None) -> Backlog:
        """The consumer's backlog: pending, ack-pending, redelivered, waiting, oldest unacked."""
        timeout = check_timeout(timeout)
        return await A.backlog(self._api, self._stream, self._name, timeout)

    async def _check(self, timeout: float | None) -> ConsumerInfo:
        """A run's consumer check: the info, kept as the handle's (the latest known)."""
        info = await consumer_info(self._api, self._stream, self._name, timeout)
        self._info = info
        return info

    @property
    def _ack_all(self) -> bool:
        """Whether the consumer's ack policy is ``all`` (a ``+TERM`` acks what came before)."""
        return self._info.config.ack_policy is AckPolicy.ALL

    def _driver(
        self,
        settings: PullSettings,
        error_handler: ErrorHandler | None = None,
        refit: Callable[[ConsumerInfo], PullSettings] | None = None,
    ) -> PullDriver:
        deliver_subject = self._info.config.deliver_subject
        if deliver_subject:  # (a handle from a create call) refused before anything is sent
            raise not_pull_error(self._name, deliver_subject)
        pin = None
        if settings.priority is not None and settings.priority.pinned:
            pin = self._pins.setdefault(settings.priority.group, PinState())
        acks = self._info.config.ack_policy is not AckPolicy.NONE
        driver = PullDriver(
            self._api,
            self._stream,
            self._name,
            settings,
            self._check,
            error_handler,
            pin,
            acks=acks,
        )
        driver.refit = refit
        return driver

    def _priority(self) -> PriorityConsumer:
        """The priority settings of the consumer, from its cached info."""
        config = self._info.config
        timeout = config.priority_timeout
        return PriorityConsumer(
            tuple(config.priority_groups or ()),
            None if config.priority_policy is None else str(config.priority_policy.value),
            None if timeout is None else timeout.total_seconds(),
        )

    def pin_id(self, group: str) -> str | None:
        """The pin this handle holds for ``group`` (``pinned_client``), None when unpinned.

        Recorded from the ``Nats-Pin-Id`` header of delivered messages and sent
        with every later pull of this handle; forgotten on a ``423`` status.
        """
        pin = self._pins.get(group)
        return None if pin is None else pin.id

    async def unpin(self, group: str, *, timeout: float | timedelta | str | None = None) -> None:
        """Unpin the client pinned for ``group`` (ADR-42 ``pinned_client``; nats-server >= 2.11).

        The server picks a new pinned client at its next delivery; the pulls of
        the old one then get a ``423`` status and carry on unpinned (standby).

        Raises:
            InvalidOptionError: ``group`` is not a valid group name (nothing is sent).
            FeatureNotSupportedError: the server is older than 2.11.
            UnknownPriorityGroupError: the consumer has no such group (10160).
            ConsumerNotFoundError: the consumer does not exist.

        """
        timeout = check_timeout(timeout)
        check_group_name(group)
        timeout = await F.require(self._api, F.PRIORITY_GROUPS, timeout)
        await self._api.call(
            _api.CONSUMER_UNPIN,
            {"group": group},
            timeout=timeout,
            stream=self._stream,
            consumer=self._name,
        )

    def _fit(
        self, settings: PullSettings, *, batch_given: bool, expires_given: bool = True
    ) -> PullSettings:
        """What the library picked, cut to the consumer's pull limits (else a 409 every pull).

        The batch of a pull limited by bytes (1,000,000), and the defaults of
        ``messages()`` / ``consume()`` (500 messages, 30 s), are the library's:
        they keep within the consumer's ``max_batch`` and ``max_expires``, which
        the server sets from its own limits when the config leaves them out
        (``jetstream.limits.max_request_batch``). What the caller gave, and a
        fetch's or ``next()``'s ``expires``, is sent as given: over a limit, the
        server's 409 says so at once.
        """
        return _fitted(self._info, settings, batch_given, expires_given)

    def _refit(
        self, settings: PullSettings, batch_given: bool, expires_given: bool
    ) -> Callable[[ConsumerInfo], PullSettings]:
        """:meth:`_fit` of ``settings`` again to a consumer check's info (for a running run).

        An ``update_consumer`` that lowers ``max_batch`` / ``max_expires`` under
        what a running ``messages()`` / ``consume()`` picked made every pull a
        409 for good; its check (which follows an unproductive pull) refits them.
        """
        return lambda info: _fitted(info, settings, batch_given, expires_given)

    async def _fetch(
        self,
        settings: PullSettings,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessageBatch | TypedMessageBatch[Any]:
        """Start the pull of ``settings``; with ``model``, its batch typed (checked first)."""
        refuse_codec_alone(model, codec)
        if model is not None:
            check_typed(model, codec, on_invalid, ack_all=self._ack_all)  # before anything is sent
        driver = self._driver(settings)
        await driver.start()
        batch = MessageBatch(driver)
        if model is None:
            return batch
        return TypedMessageBatch(batch, model, codec, on_invalid, self._on_refused)

    @overload
    async def fetch(
        self, max_messages: int, *, model: None = None, **options: Unpack[FetchOptions]
    ) -> MessageBatch: ...

    @overload
    async def fetch(
        self, max_messages: int, *, model: type[T], **options: Unpack[TypedFetchOptions]
    ) -> TypedMessageBatch[T]: ...

    async def fetch(
        self,
        max_messages: int,
        *,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessageBatch | TypedMessageBatch[Any]:
        """Pull up to ``max_messages`` with one request (ADR-37 ``Fetch``).

        Returns once the pull is sent (while the client reconnects, once it is
        back: the wait comes out of ``expires``, and not reconnected in time it
        raises :class:`JetStreamTimeoutError`); iterate the batch to receive the
        messages. The pull ends when it is filled or after ``expires``
        (minimum 1 s). The heartbeat
        defaults to 5 s when ``expires >= 10 s`` and is off below. A pull the
        server drops before any message (``409 Leadership Change``, ``409
        Server Shutdown``: a consumer leader change) is sent again for the time
        left, so an empty batch means that nothing came within ``expires``.

        Priority groups (ADR-42, nats-server >= 2.11): ``group`` is required when
        the consumer has priority groups; ``min_pending`` / ``min_ack_pending``
        (overflow) serve the pull only while the consumer has that many pending /
        unacknowledged messages; ``priority`` (prioritized, 0-9) serves lower
        values first. A pinned client's pin is sent along; a ``423`` ends the
        fetch with :class:`PinIdMismatchError` and the next pull goes without it.

        With ``model`` (and ``codec``, ``on_invalid`` as for :meth:`messages`)
        the fetch returns a :class:`TypedMessageBatch`: the same calls
        (iteration, ``collect()``, ``done``, ``aclose()``) handing out
        :class:`TypedMsg`; a message that does not validate is terminated
        (the default) or nak'ed and left out, or raised.

        Raises:
            InvalidOptionError: bad options (before anything is sent).

        """
        return await self._fetch(
            self._fit(
                resolve_fetch(
                    max_messages=max_messages,
                    expires=secs(expires, "expires"),
                    heartbeat=secs(heartbeat, "heartbeat"),
                    consumer=self._priority(),
                    group=group,
                    min_pending=min_pending,
                    min_ack_pending=min_ack_pending,
                    priority=priority,
                ),
                batch_given=True,
            ),
            model,
            codec,
            on_invalid,
        )

    @overload
    async def fetch_bytes(
        self, max_bytes: int, *, model: None = None, **options: Unpack[FetchOptions]
    ) -> MessageBatch: ...

    @overload
    async def fetch_bytes(
        self, max_bytes: int, *, model: type[T], **options: Unpack[TypedFetchOptions]
    ) -> TypedMessageBatch[T]: ...

    async def fetch_bytes(
        self,
        max_bytes: int,
        *,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessageBatch | TypedMessageBatch[Any]:
        """Pull up to ``max_bytes`` of messages with one request.

        A message larger than ``max_bytes`` can never be delivered: when nothing
        fits, iteration raises :class:`MessageTooLargeError`. Priority-group
        options as for :meth:`fetch`; so are ``model``, ``codec`` and
        ``on_invalid`` (a :class:`TypedMessageBatch`; ``max_bytes`` counts the
        raw messages, the invalid ones too).

        Raises:
            InvalidOptionError: bad options (before anything is sent).

        """
        return await self._fetch(
            self._fit(
                resolve_fetch(
                    max_bytes=max_bytes,
                    expires=secs(expires, "expires"),
                    heartbeat=secs(heartbeat, "heartbeat"),
                    consumer=self._priority(),
                    group=group,
                    min_pending=min_pending,
                    min_ack_pending=min_ack_pending,
                    priority=priority,
                ),
                batch_given=False,
            ),
            model,
            codec,
            on_invalid,
        )

    @overload
    async def fetch_no_wait(
        self, max_messages: int, *, model: None = None, **options: Unpack[NoWaitOptions]
    ) -> MessageBatch: ...

    @overload
    async def fetch_no_wait(
        self, max_messages: int, *, model: type[T], **options: Unpack[TypedNoWaitOptions]
    ) -> TypedMessageBatch[T]: ...

    async def fetch_no_wait(
        self,
        max_messages: int,
        *,
        max_bytes: int | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessageBatch | TypedMessageBatch[Any]:
        """Pull up to ``max_messages`` of what is available now, without waiting.

        ``max_bytes`` also bounds what the server sends for the pull (sizes as
        :attr:`Msg.size`): it stops before the message that would exceed it, so
        a pull of large messages can not overrun the connection. When not even
        the first message fits, iteration raises :class:`MessageTooLargeError`.
        Priority-group options as for :meth:`fetch`; so are ``model``,
        ``codec`` and ``on_invalid`` (a :class:`TypedMessageBatch`; an invalid
        message counts against ``max_messages``: no other is pulled for it).

        An empty batch means that nothing was pending. A pull dropped by a
        consumer leader change is sent once more: one voided before any message
        (``409 Leadership Change`` / ``Server Shutdown``), or one left
        unanswered for 5 s while the consumer's info shows messages pending
        (else the batch ends empty). Dropped again, iteration raises
        :class:`ClusterUnavailableError` (the 409) or
        :class:`JetStreamTimeoutError` (no answer): pull again.

        Raises:
            InvalidOptionError: bad options (before anything is sent).

        """
        return await self._fetch(
            self._fit(
                resolve_fetch(
                    max_messages=max_messages,
                    max_bytes=max_bytes,
                    no_wait=True,
                    consumer=self._priority(),
                    group=group,
                    min_pending=min_pending,
                    min_ack_pending=min_ack_pending,
                    priority=priority,
                ),
                batch_given=max_messages is not None,
            ),
            model,
            codec,
            on_invalid,
        )

    @overload
    async def next(self, *, model: None = None, **options: Unpack[FetchOptions]) -> Msg: ...

    @overload
    async def next(
        self, *, model: type[T], **options: Unpack[TypedFetchOptions]
    ) -> TypedMsg[T]: ...

    async def next(
        self,
        *,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> Msg:
        """Pull one message; the request is sent only now (ADR-37 ``Next``).

        Priority-group options as for :meth:`fetch`.

        With ``model`` it returns a :class:`TypedMsg` (``codec`` as for
        :meth:`messages`). A message that does not validate is terminated
        (``on_invalid="term"``, the default) or nak'ed (``"nak"``) and the next
        one is pulled, within ``expires``; with ``"raise"`` its
        :class:`PayloadValidationError` is raised (left unacknowledged).

        Raises:
            FetchTimeoutError: nothing arrived before ``expires`` (a TimeoutError);
                with ``model``, nothing that validates.
            PayloadValidationError: ``on_invalid="raise"`` and the payload does
                not validate.
            ConsumerNotFoundError, ConsumerDeletedError: the consumer is gone.
            PinIdMismatchError: the pinned client lost its pin (pull again).

        """
        refuse_codec_alone(model, codec)
        if model is None:
            return await self._next(
                expires, heartbeat, group, min_pending, min_ack_pending, priority
            )
        check_typed(model, codec, on_invalid, ack_all=self._ack_all)  # before anything is sent
        seconds = secs(expires, "expires")
        beat = secs(heartbeat, "heartbeat")
        settings = resolve_fetch(  # checked before anything is sent
            max_messages=1,
            expires=seconds,
            heartbeat=beat,
            consumer=self._priority(),
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )

        def take(left: float) -> Awaitable[Msg]:
            # A pull after an invalid message gets what is left of expires.
            hb = None if beat is None else fit_heartbeat(beat, left)
            return self._next(left, hb, group, min_pending, min_ack_pending, priority)

        source = f"{self._stream}/{self._name}"
        return await next_valid(
            take, settings.expires, model, codec, on_invalid, source, self._on_refused
        )

    async def _next(
        self,
        expires: float | timedelta | str,
        heartbeat: float | timedelta | str | None,
        group: str | None,
        min_pending: int | None,
        min_ack_pending: int | None,
        priority: int | None,
    ) -> Msg:
        loop = asyncio.get_running_loop()
        started = loop.time()
        pull_expires, pull_heartbeat = expires, heartbeat
        delay = 0.0
        while True:
            batch = await self.fetch(
                1,
                expires=pull_expires,
                heartbeat=pull_heartbeat,
                group=group,
                min_pending=min_pending,
                min_ack_pending=min_ack_pending,
                priority=priority,
            )
            taken: Msg | None = None
            try:
                taken = await anext(batch, None)
            finally:
                if taken is None:
                    await batch.aclose()
            if taken is not None:
                # Handed back with no await after the take: a cancel in the batch's
                # close lost it (for good with AckPolicy.NONE, else until ack_wait).
                batch._end_now()
                return taken
            # No message, no error, and time left: the server dropped the pull (409
            # Leadership Change, Server Shutdown) rather than let it expire. Pull again
            # for the time left (the options are valid: the first fetch took them).
            deadline = started + (secs(expires, "expires") or 0.0)
            if delay:
                await asyncio.sleep(min(delay, max(deadline - loop.time(), 0.0)))
            left = deadline - loop.time()
            if left < NEXT_REPULL_MIN_LEFT:
                raise FetchTimeoutError(
                    f"no message from {self._stream}/{self._name} before expiry"
                )
            delay = min(delay * 2, REPULL_BACKOFF_MAX) if delay else REPULL_BACKOFF_FIRST
            pull_expires = max(left, MIN_EXPIRES)
            beat = secs(heartbeat, "heartbeat")
            pull_heartbeat = None if beat is None else fit_heartbeat(beat, pull_expires)

    @overload
    def messages(
        self, *, model: None = None, **options: Unpack[ConsumeOptions]
    ) -> MessagesContext: ...

    @overload
    def messages(
        self, *, model: type[T], **options: Unpack[TypedConsumeOptions]
    ) -> TypedMessagesContext[T]: ...

    def messages(
        self,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        error_handler: ErrorHandler | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessagesContext:
        """Pull continuously into a bounded buffer (ADR-37 ``Messages``).

        Defaults: 500 messages (or ``max_bytes`` instead, never both), 30 s
        expiry, heartbeat half of expires capped at 30 s, thresholds half of the
        maximum. Use as ``async with consumer.messages() as it: async for msg in it``.
        Priority-group options as for :meth:`fetch`; a ``423`` (lost pin) is
        reported to ``error_handler`` as :class:`PinIdMismatchError` and pulling
        goes on without the pin.

        With ``model`` (a pydantic model, or any type ``codec`` decodes), the
        iterator hands out :class:`TypedMsg` (``msg.value``), the payload
        validated by ``model.model_validate_json`` (or ``codec.decode``). A
        message that does not validate is, by ``on_invalid``, terminated with
        the validation error as reason (``"term"``, the default), nak'ed
        (``"nak"``), or raised as :class:`PayloadValidationError` (``"raise"``,
        the message left unacknowledged); term and nak are logged as warnings.

        Raises:
            InvalidOptionError: bad options (before anything is sent).

        """
        refuse_codec_alone(model, codec)
        if model is not None:
            check_typed(model, codec, on_invalid, ack_all=self._ack_all)  # before anything is sent
        settings = resolve_consume(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=secs(expires, "expires"),
            heartbeat=secs(heartbeat, "heartbeat"),
            threshold_messages=threshold_messages,
            threshold_bytes=threshold_bytes,
            consumer=self._priority(),
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )
        given = (max_messages is not None, expires != DEFAULT_EXPIRES)
        refit = self._refit(settings, *given)
        settings = self._fit(settings, batch_given=given[0], expires_given=given[1])
        if model is not None:
            return TypedMessagesContext(
                self._driver(settings, error_handler, refit),
                model,
                codec,
                on_invalid,
                self._on_refused,
            )
        return MessagesContext(self._driver(settings, error_handler, refit))

    @overload
    async def consume(
        self,
        handler: Callable[[Msg], Any],
        *,
        model: None = None,
        **options: Unpack[ConsumeOptions],
    ) -> ConsumeContext: ...

    @overload
    async def consume(
        self,
        handler: Callable[[TypedMsg[T]], Any],
        *,
        model: type[T],
        **options: Unpack[TypedConsumeOptions],
    ) -> ConsumeContext: ...

    async def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        error_handler: ErrorHandler | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> ConsumeContext:
        """Call ``handler(msg)`` (sync or async) for every message (ADR-37 ``Consume``).

        Nothing is acknowledged automatically. Options are those of
        :meth:`messages`. Terminal errors go to ``error_handler`` and end
        consumption; warnings and missed heartbeats go to ``error_handler`` too
        (or a WARNING log) and consumption goes on; so does a lost pin
        (:class:`PinIdMismatchError`, priority groups).

        With ``model``, ``handler`` gets a :class:`TypedMsg` (``msg.value``);
        ``codec`` and ``on_invalid`` as for :meth:`messages`, except that
        ``on_invalid="raise"`` ends consumption with the
        :class:`PayloadValidationError` (reported to ``error_handler``,
        returned by ``closed()``; the message is left unacknowledged).
        """
        if not callable(handler):
            raise InvalidOptionError("handler must be callable")
        holder: list[ConsumeContext] = []
        refuse_codec_alone(model, codec)
        if model is not None:
            check_on_invalid(on_invalid, ack_all=self._ack_all)
            handler = typed_handler(handler, model, codec, on_invalid, holder, self._on_refused)
        settings = resolve_consume(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=secs(expires, "expires"),
            heartbeat=secs(heartbeat, "heartbeat"),
            threshold_messages=threshold_messages,
            threshold_bytes=threshold_bytes,
            consumer=self._priority(),
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )
        given = (max_messages is not None, expires != DEFAULT_EXPIRES)
        refit = self._refit(settings, *given)
        settings = self._fit(settings, batch_given=given[0], expires_given=given[1])
        ctx = ConsumeContext(self._driver(settings, error_handler, refit), handler)
        holder.append(ctx)
        await ctx._start()
        return ctx


def _fitted(
    info: ConsumerInfo, settings: PullSettings, batch_given: bool, expires_given: bool
) -> PullSettings:
    """``settings`` with what the library picked cut to ``info``'s pull limits (see ``_fit``)."""
    config = info.config
    batch = config.max_batch if not batch_given or settings.max_bytes else None
    limit = config.max_expires if not expires_given else None
    fitted = fit_to_limits(
        settings, batch, None, limit.total_seconds() if limit is not None else None
    )
    return paced(fitted, config.replay_policy)

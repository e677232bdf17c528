"""``OrderedConsumer``: in-order, gap-free delivery over recreated ephemeral consumers (ADR-17).

The public calls (the :class:`Consumer` ones); the cursor, the recreation of
the server-side consumer and the readers over it are :mod:`.cursor`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar, Unpack, overload

from .. import _bounds as B
from .. import _consumer as C
from .._api import ApiClient
from .._codec import Codec
from .._consumer.options import (
    OrderedConsumeOptions,
    OrderedFetchOptions,
    OrderedNoWaitOptions,
    OrderedTypedConsumeOptions,
    OrderedTypedFetchOptions,
    OrderedTypedNoWaitOptions,
)
from .._errors import (
    FetchTimeoutError,
    InvalidOptionError,
)
from .._message import Msg, TypedMsg
from .._models import (
    ConsumerInfo,
    OrderedConsumerConfig,
)
from .._pull_driver import ErrorHandler
from .._pull_engine import (
    DEFAULT_EXPIRES,
    NEXT_REPULL_MIN_LEFT,
    REPULL_BACKOFF_FIRST,
    REPULL_BACKOFF_MAX,
    PullSettings,
    resolve_consume,
    resolve_fetch,
    shortened,
)
from .._typed import (
    OrderedOnInvalid,
    Refused,
    TypedMessageBatch,
    check_typed,
    next_valid,
    refuse_codec_alone,
    typed_handler,
)
from .._validation import check_timeout, validate_name
from .cursor import OrderedBatch, OrderedCursor, OrderedSource, OutOfTime

T = TypeVar("T")


class OrderedConsumer(OrderedCursor):
    """An ordered consumer on a stream (ADR-17). Get one with ``await js.ordered_consumer(...)``.

    Offers the :class:`Consumer` calls (``fetch``, ``fetch_bytes``,
    ``fetch_no_wait``, ``next``, ``messages``, ``consume``); one ordered
    consumer is used either with the fetch calls or with messages/consume, and
    one operation at a time.
    """

    #: Called with ``(msg, error, on_invalid)`` on a typed message that does not
    #: validate, before it is raised (set by telemetry).
    _on_refused: Refused | None = None

    # ------------------------------------------------------------- properties

    @property
    def stream_name(self) -> str:
        """The stream read."""
        return self._stream

    @property
    def name(self) -> str | None:
        """The name of the current server-side consumer (None before first use)."""
        return self._name

    @property
    def cached_info(self) -> ConsumerInfo | None:
        """The info of the current server-side consumer, as last fetched."""
        return self._info

    @property
    def cursor(self) -> int:
        """The stream sequence of the last message handed out (0 before any)."""
        return self._cursor

    async def info(self, *, timeout: float | timedelta | str | None = None) -> ConsumerInfo:
        """Fetch the current server-side consumer's info.

        Raises:
            InvalidOptionError: no consumer was created yet.

        """
        timeout = check_timeout(timeout)
        if self._name is None:
            raise InvalidOptionError("the ordered consumer has not created its consumer yet")
        self._info = await C.consumer_info(self._api, self._stream, self._name, timeout)
        return self._info

    # ------------------------------------------------------------- fetch

    async def _fetch(
        self,
        settings: PullSettings,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OrderedOnInvalid = "raise",
    ) -> OrderedBatch | TypedMessageBatch[Any]:
        refuse_codec_alone(model, codec)
        if model is not None:
            check_typed(model, codec, on_invalid, acks=False)  # before anything is sent
        # The consumer's recreation counts against the fetch's expires (fetch_no_wait:
        # the API timeout): out of time, the creation's own error is raised.
        wait = self._api.timeout if settings.no_wait else settings.expires
        try:
            batch = await self._start_fetch(settings, asyncio.get_running_loop().time() + wait)
        except OutOfTime as out:
            raise out.error from out.error.__cause__
        if model is None:
            return batch
        return TypedMessageBatch(batch, model, codec, on_invalid, self._on_refused)

    @overload
    async def fetch(
        self, max_messages: int, *, model: None = None, **options: Unpack[OrderedFetchOptions]
    ) -> OrderedBatch: ...

    @overload
    async def fetch(
        self, max_messages: int, *, model: type[T], **options: Unpack[OrderedTypedFetchOptions]
    ) -> TypedMessageBatch[T]: ...

    async def fetch(
        self,
        max_messages: int,
        *,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OrderedOnInvalid = "raise",
    ) -> OrderedBatch | TypedMessageBatch[Any]:
        """Fetch up to ``max_messages`` in order (see :meth:`Consumer.fetch`).

        With ``model``, a :class:`TypedMessageBatch` of :class:`TypedMsg`; a
        payload that does not validate raises :class:`PayloadValidationError`
        (``on_invalid="raise"``, the only option: nothing is acknowledged).
        """
        return await self._fetch(
            resolve_fetch(
                max_messages=max_messages,
                expires=C.secs(expires, "expires"),
                heartbeat=C.secs(heartbeat, "heartbeat"),
            ),
            model,
            codec,
            on_invalid,
        )

    @overload
    async def fetch_bytes(
        self, max_bytes: int, *, model: None = None, **options: Unpack[OrderedFetchOptions]
    ) -> OrderedBatch: ...

    @overload
    async def fetch_bytes(
        self, max_bytes: int, *, model: type[T], **options: Unpack[OrderedTypedFetchOptions]
    ) -> TypedMessageBatch[T]: ...

    async def fetch_bytes(
        self,
        max_bytes: int,
        *,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OrderedOnInvalid = "raise",
    ) -> OrderedBatch | TypedMessageBatch[Any]:
        """Fetch up to ``max_bytes`` of messages in order (see :meth:`Consumer.fetch_bytes`).

        ``model``, ``codec`` and ``on_invalid`` as for :meth:`fetch`.
        """
        return await self._fetch(
            resolve_fetch(
                max_bytes=max_bytes,
                expires=C.secs(expires, "expires"),
                heartbeat=C.secs(heartbeat, "heartbeat"),
            ),
            model,
            codec,
            on_invalid,
        )

    @overload
    async def fetch_no_wait(
        self, max_messages: int, *, model: None = None, **options: Unpack[OrderedNoWaitOptions]
    ) -> OrderedBatch: ...

    @overload
    async def fetch_no_wait(
        self, max_messages: int, *, model: type[T], **options: Unpack[OrderedTypedNoWaitOptions]
    ) -> TypedMessageBatch[T]: ...

    async def fetch_no_wait(
        self,
        max_messages: int,
        *,
        max_bytes: int | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OrderedOnInvalid = "raise",
    ) -> OrderedBatch | TypedMessageBatch[Any]:
        """Fetch what is available now, in order (see :meth:`Consumer.fetch_no_wait`).

        ``model``, ``codec`` and ``on_invalid`` as for :meth:`fetch`.
        """
        return await self._fetch(
            resolve_fetch(max_messages=max_messages, max_bytes=max_bytes, no_wait=True),
            model,
            codec,
            on_invalid,
        )

    @overload
    async def next(self, *, model: None = None, **options: Unpack[OrderedFetchOptions]) -> Msg: ...

    @overload
    async def next(
        self, *, model: type[T], **options: Unpack[OrderedTypedFetchOptions]
    ) -> TypedMsg[T]: ...

    async def next(
        self,
        *,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OrderedOnInvalid = "raise",
    ) -> Msg:
        """The next message in order.

        With ``model``, a :class:`TypedMsg`; a payload that does not validate
        raises :class:`PayloadValidationError` (``on_invalid="raise"``, the
        only option). The cursor has moved past that message: the next call
        returns the one after it.

        Raises:
            FetchTimeoutError: nothing arrived before ``expires``.
            PayloadValidationError: with ``model``, the payload does not validate.

        """
        refuse_codec_alone(model, codec)
        if model is not None:
            check_typed(model, codec, on_invalid, acks=False)
        # The caller's options are checked once, here, before anything is sent (a
        # negative expires was taken as 1 s, a giant int raised OverflowError); each
        # pull gets what is left of expires, its heartbeat clamped to fit (the time
        # left was checked against heartbeat again: heartbeat=5, expires=10 raised).
        settings = resolve_fetch(
            max_messages=1,
            expires=C.secs(expires, "expires"),
            heartbeat=C.secs(heartbeat, "heartbeat"),
        )
        if model is None:
            return await self._next(settings)
        return await next_valid(
            lambda left: self._next(shortened(settings, left)),
            settings.expires,
            model,
            codec,
            on_invalid,
            f"ordered consumer on {self._stream}",
            self._on_refused,
        )

    async def _next(self, checked: PullSettings) -> Msg:
        """One message within ``checked.expires`` (options checked), across resets."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + checked.expires
        delay = 0.0
        while True:
            settings = shortened(checked, deadline - loop.time())
            try:
                batch = await self._start_fetch(settings, deadline, resets=False)
            except OutOfTime as out:
                raise FetchTimeoutError(
                    f"no message from ordered consumer on {self._stream}: "
                    f"could not recreate its consumer in time ({out.error})"
                ) from out.error
            try:
                msg = await anext(batch, None)
            except BaseException:
                await batch.aclose()
                raise
            if msg is not None:
                # Taken: the cursor is past it. No await from here to the return, or a
                # cancellation (wait_for, a timeout) there would drop it (a skip).
                batch._end_now()
                return msg
            await batch.aclose()
            # A fetch cut short by a reset (gap, deletion) is retried within expires;
            # the reset itself is quick, so once more even with little time left.
            if loop.time() >= deadline:
                raise FetchTimeoutError(f"no message from ordered consumer on {self._stream}")
            if self._needs_reset:
                continue
            # No message, no error, and time left: the server dropped the pull (409
            # Leadership Change, Server Shutdown) rather than let it expire.
            if delay:
                await asyncio.sleep(min(delay, max(deadline - loop.time(), 0.0)))
            if deadline - loop.time() < NEXT_REPULL_MIN_LEFT:
                raise FetchTimeoutError(f"no message from ordered consumer on {self._stream}")
            delay = min(delay * 2, REPULL_BACKOFF_MAX) if delay else REPULL_BACKOFF_FIRST

    # ------------------------------------------------------------- continuous

    @overload
    def messages(
        self, *, model: None = None, **options: Unpack[OrderedConsumeOptions]
    ) -> C.MessagesContext: ...

    @overload
    def messages(
        self, *, model: type[T], **options: Unpack[OrderedTypedConsumeOptions]
    ) -> C.TypedMessagesContext[T]: ...

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
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OrderedOnInvalid = "raise",
    ) -> C.MessagesContext:
        """Iterate every message in order, across consumer resets (as :meth:`Consumer.messages`).

        With ``model``, the iterator hands out :class:`TypedMsg`. A payload
        that does not validate is raised as :class:`PayloadValidationError`
        (``on_invalid="raise"``, the only option: an ordered consumer
        acknowledges nothing, so ``"term"`` / ``"nak"`` are refused with
        :class:`InvalidOptionError`); iteration can go on with the next message.

        Raises:
            InvalidOptionError: bad options (before anything is sent).

        """
        refuse_codec_alone(model, codec)
        if model is not None:
            check_typed(model, codec, on_invalid, acks=False)
        settings = resolve_consume(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=C.secs(expires, "expires"),
            heartbeat=C.secs(heartbeat, "heartbeat"),
            threshold_messages=threshold_messages,
            threshold_bytes=threshold_bytes,
        )
        self._check_mode("consume")
        source = OrderedSource(self, settings, error_handler)
        if model is not None:
            return C.TypedMessagesContext(source, model, codec, on_invalid, self._on_refused)
        return C.MessagesContext(source)

    @overload
    async def consume(
        self,
        handler: Callable[[Msg], Any],
        *,
        model: None = None,
        **options: Unpack[OrderedConsumeOptions],
    ) -> C.ConsumeContext: ...

    @overload
    async def consume(
        self,
        handler: Callable[[TypedMsg[T]], Any],
        *,
        model: type[T],
        **options: Unpack[OrderedTypedConsumeOptions],
    ) -> C.ConsumeContext: ...

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
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OrderedOnInvalid = "raise",
    ) -> C.ConsumeContext:
        """Call ``handler`` for every message in order (see :meth:`Consumer.consume`).

        With ``model``, ``handler`` gets a :class:`TypedMsg`; a payload that
        does not validate ends consumption with its
        :class:`PayloadValidationError` (``on_invalid="raise"``, the only
        option), reported to ``error_handler`` and returned by ``closed()``.

        Raises:
            InvalidOptionError: bad options (before anything is sent).

        """
        if not callable(handler):
            raise InvalidOptionError("handler must be callable")
        holder: list[C.ConsumeContext] = []
        refuse_codec_alone(model, codec)
        if model is not None:
            check_typed(model, codec, on_invalid, acks=False)
            handler = typed_handler(handler, model, codec, on_invalid, holder, self._on_refused)
        settings = resolve_consume(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=C.secs(expires, "expires"),
            heartbeat=C.secs(heartbeat, "heartbeat"),
            threshold_messages=threshold_messages,
            threshold_bytes=threshold_bytes,
        )
        self._check_mode("consume")
        ctx = C.ConsumeContext(OrderedSource(self, settings, error_handler), handler)
        holder.append(ctx)
        await ctx._start()
        return ctx

    def __repr__(self) -> str:
        return f"<OrderedConsumer {self._stream} cursor={self._cursor}>"


def make_ordered(
    api: ApiClient,
    stream: str,
    config: OrderedConsumerConfig | None,
    created: datetime | None = None,
) -> OrderedConsumer:
    """Validate the arguments and build an :class:`OrderedConsumer`.

    ``created``: when ``stream`` was created, as its handle last saw it (a
    reset compares it with the stream's then; see ``OrderedCursor``).
    """
    validate_name(stream, "stream")
    if config is None:
        config = OrderedConsumerConfig()
    elif not isinstance(config, OrderedConsumerConfig):
        raise InvalidOptionError(
            f"config must be an OrderedConsumerConfig, got {type(config).__name__}"
        )
    if config.name_prefix is not None:
        validate_name(config.name_prefix, "consumer name prefix")
    if config.max_reset_attempts is not None and config.max_reset_attempts < 1:
        # Refused rather than read as nats.go's 0 (its "unset": unlimited): 0 attempts
        # reads as "never recreate". None is unlimited.
        raise InvalidOptionError(
            "max_reset_attempts must be at least 1 (None, the default, is unlimited; "
            f"got {config.max_reset_attempts})"
        )
    B.check_config(config)  # opt_start_seq 0 to 2**64 - 1 (was refused by the server, as JSON)
    return OrderedConsumer(api, stream, config, created)

"""Consumer management calls and the pull ``Consumer`` handle."""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar, overload

from . import _admin as A
from . import _api
from . import _bounds as B
from . import _features as F
from ._admin import Backlog
from ._api import ApiClient
from ._cleanup import close_when_collected
from ._codec import Codec
from ._errors import FetchTimeoutError, InvalidOptionError, JetStreamError
from ._message import Msg, TypedMsg, typed
from ._models import ConsumerConfig, ConsumerInfo, ConsumerPauseResponse, to_wire
from ._models._ranges import check_config_ranges
from ._priority import PinState, check_group_name
from ._pull_driver import ErrorHandler, PullDriver, in_error_handler
from ._pull_engine import (
    DEFAULT_EXPIRES,
    PriorityConsumer,
    PullSettings,
    resolve_consume,
    resolve_fetch,
)
from ._typed import (
    OnInvalid,
    TypedMessageBatch,
    check_on_invalid,
    check_typed,
    decoder,
    next_valid,
    refuse,
    typed_handler,
)
from ._validation import validate_name

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger("aiojetstream")

ACTION_CREATE: Final = "create"
ACTION_UPDATE: Final = "update"
ACTION_CREATE_OR_UPDATE: Final = ""

T = TypeVar("T")


def _consumer_name(config: ConsumerConfig) -> str | None:
    name, durable = config.name, config.durable_name
    if name and durable and name != durable:
        raise InvalidOptionError(
            f"consumer name {name!r} and durable_name {durable!r} must match when both are set"
        )
    chosen = name or durable
    if chosen is not None:
        validate_name(chosen, "consumer")
    return chosen


async def upsert_consumer(
    api: ApiClient,
    stream: str,
    config: ConsumerConfig,
    action: str,
    timeout: float | None,
) -> ConsumerInfo:
    """Create and/or update a consumer; ``action`` is create, update or both ("")."""
    validate_name(stream, "stream")
    if not isinstance(config, ConsumerConfig):
        raise InvalidOptionError(f"config must be a ConsumerConfig, got {type(config).__name__}")
    check_config_ranges(config)  # times and durations the server would wrap or refuse
    name = _consumer_name(config)
    body: dict[str, Any] = {"stream_name": stream, "config": to_wire(config)}
    for feature in F.consumer_config_features(config):
        F.check_level(feature, await api.api_level(timeout))
    if action:
        body["action"] = action
    if name is None:
        if action == ACTION_UPDATE:
            raise InvalidOptionError("updating a consumer needs its name or durable_name")
        subject = api.subject(_api.CONSUMER_CREATE_EPHEMERAL, stream=stream)
    else:
        subject = api.subject(_api.CONSUMER_CREATE, stream=stream, consumer=name)
        if config.filter_subject and not config.filter_subjects:
            # The filter in the subject too (permissions can match it), unless that makes
            # the request line too long (it would cost the connection): body only then.
            filtered = api.subject(
                _api.CONSUMER_CREATE_FILTERED,
                stream=stream,
                consumer=name,
                filter=config.filter_subject,
            )
            if len(filtered) <= _api.MAX_SUBJECT_WITH_SUBJECT:
                subject = filtered
    reply = await api.request(subject, body, timeout=timeout, stream=stream, consumer=name)
    return _api.parse(ConsumerInfo, reply)


async def consumer_info(
    api: ApiClient, stream: str, name: str, timeout: float | None
) -> ConsumerInfo:
    """Fetch a consumer's info (raises ConsumerNotFoundError when it does not exist)."""
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    return await api.call_model(
        _api.CONSUMER_INFO, ConsumerInfo, timeout=timeout, stream=stream, consumer=name
    )


async def delete_consumer(api: ApiClient, stream: str, name: str, timeout: float | None) -> None:
    """Delete a consumer (raises ConsumerNotFoundError when it does not exist)."""
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    await api.call(_api.CONSUMER_DELETE, timeout=timeout, stream=stream, consumer=name)


async def list_consumers(
    api: ApiClient, stream: str, timeout: float | None
) -> AsyncIterator[ConsumerInfo]:
    """Every consumer of a stream, over all pages."""
    validate_name(stream, "stream")
    async for item in _api.paged(api, _api.CONSUMER_LIST, "consumers", {}, timeout, stream=stream):
        yield _api.parse(ConsumerInfo, item)


async def consumer_names(api: ApiClient, stream: str, timeout: float | None) -> AsyncIterator[str]:
    """Every consumer name of a stream, over all pages."""
    validate_name(stream, "stream")
    async for item in _api.paged(api, _api.CONSUMER_NAMES, "consumers", {}, timeout, stream=stream):
        yield str(item)


class MessageBatch:
    """The messages of one fetch: an async iterator of :class:`Msg`.

    Iteration yields messages as they arrive and ends when the pull ends (the
    batch is filled, the server answers 404/408, or ``expires`` passes); a
    terminal error (consumer deleted, ...) is raised from iteration after the
    messages that arrived before it. It is also an async context manager that
    releases the pull early when left.
    """

    __slots__ = ("_driver",)

    def __init__(self, driver: PullDriver) -> None:
        self._driver = driver

    def __aiter__(self) -> MessageBatch:
        return self

    async def __anext__(self) -> Msg:
        driver = self._driver
        # A buffered message is handed out without a coroutine (as messages() does).
        msg = driver.take()
        if msg is None:
            msg = await driver.next_msg()
            if msg is None:
                raise StopAsyncIteration
        return msg

    @property
    def done(self) -> bool:
        """True once the pull ended (buffered messages may remain)."""
        return self._driver.finished

    async def collect(self) -> list[Msg]:
        """Wait for the pull to end and return its messages at once, in order.

        The same messages iteration yields (less any already taken), without a
        step per message: the fast way to take a large batch whole. When the
        pull ended with a terminal error, the messages that arrived before it
        are returned and the next call (or iteration) raises it.

        Raises:
            JetStreamError: the pull ended with this error and no message is
                left to return (consumer deleted, ...).

        """
        return await self._driver.collect()

    async def collect_columns(self) -> pa.RecordBatch:
        """:meth:`collect`, as one Arrow record batch: no :class:`Msg` per message.

        Needs ``pyarrow`` (installed with ``aiojetstream[spark]``). The columns
        are ``subject`` and ``reply`` (strings, decoded as :attr:`Msg.subject`
        and :attr:`Msg.reply` are), ``headers`` (``map<string, string>``, as
        :attr:`Msg.headers`; null without headers) and ``data`` (binary), one
        row per message, in order. The stream sequence, timestamp and the
        rest of :attr:`Msg.metadata` are the tokens of ``reply`` (ADR-15).
        Read this way, plain messages (without headers) are framed in bulk
        straight from the connection's read buffer into the columns, which
        costs a fraction of building a :class:`Msg` each; nothing is
        acknowledged (meant for ``AckNone`` consumers; else acknowledge by
        ``reply``). On the fallback path (``AIOJETSTREAM_FAST_PATH=0``) the
        columns are built from messages, with the same result.

        Errors as for :meth:`collect`: when the pull ended with a terminal
        error, the messages that arrived before it are returned and the next
        call raises it; with no message left an empty batch is returned.

        Raises:
            JetStreamError: the pull ended with this error and no message is
                left to return (consumer deleted, ...).
            ImportError: pyarrow is not installed.

        """
        return await self._driver.collect_columns()

    async def aclose(self) -> None:
        """Stop the pull and release its subscription (idempotent)."""
        await self._driver.aclose()

    async def __aenter__(self) -> MessageBatch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class MessageSource(Protocol):
    """Where ``consume`` takes messages from: a :class:`PullDriver` or an ordered source."""

    async def start(self) -> None:
        """Begin pulling."""

    def take(self) -> Msg | None:
        """A buffered message, without waiting."""

    async def next_msg(self) -> Msg | None:
        """The next message; None once ended normally (raises a terminal error)."""

    def stop(self) -> None:
        """Stop now."""

    def drain(self) -> None:
        """Stop pulling; end once the buffer is consumed."""

    async def aclose(self) -> None:
        """Release everything."""

    def report(self, error: JetStreamError) -> None:
        """Hand an error to the error handler (or log it)."""


class MessagesContext:
    """Continuous pulling (ADR-37 ``Messages``): an async iterator and async context manager.

    ``async with consumer.messages() as it: async for msg in it: ...``.
    Iteration raises a terminal error (consumer deleted, ...) after the messages
    buffered before it; warnings and missed heartbeats go to ``error_handler``
    (or a WARNING log) and iteration continues. Iterated without ``async with``
    and dropped unfinished (``async for ...: break``), it stops pulling and
    releases its subscription once collected.
    """

    def __init__(self, driver: MessageSource) -> None:
        self._driver = driver
        self._started = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    async def _ensure_started(self) -> None:
        if not self._started:
            self._started = True
            await self._driver.start()

    async def __aenter__(self) -> MessagesContext:
        await self._ensure_started()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[Msg]:
        driver = self._driver
        if self._started and self._finalizer is None and isinstance(driver, PullDriver):
            # It hands out its messages itself (one call less each). Not when this
            # context closes the driver once collected: the loop must keep it alive.
            return driver
        return self

    async def __anext__(self) -> Msg:
        if not self._started:
            # Iterated without ``async with``: nothing closes it when the loop is left
            # early but its collection (the driver does not refer back to it).
            self._finalizer = close_when_collected(self, self._driver.aclose)
            await self._ensure_started()
        driver = self._driver
        # A buffered message is handed out without a coroutine (as consume() does).
        msg = driver.take()
        if msg is None:
            msg = await driver.next_msg()
            if msg is None:
                raise StopAsyncIteration
        return msg

    async def next(self) -> Msg:
        """The next message (StopAsyncIteration once stopped or drained)."""
        return await self.__anext__()

    def stop(self) -> None:
        """Stop now; iteration ends. Buffered messages are not delivered (they are redelivered)."""
        self._driver.stop()

    async def drain(self) -> None:
        """Stop pulling; iteration yields what is buffered, then ends."""
        self._driver.drain()

    async def aclose(self) -> None:
        """Stop and release the subscription (idempotent)."""
        if self._finalizer is not None:
            self._finalizer.detach()
        await self._driver.aclose()


Handler = Callable[[Msg], Any]


class TypedMessagesContext(MessagesContext, Generic[T]):
    """``consumer.messages(model=...)``: a :class:`MessagesContext` handing out :class:`TypedMsg`.

    A message whose payload does not validate is terminated with the reason
    (``on_invalid="term"``, the default), nak'ed (``"nak"``: redelivered), or
    raised as :class:`PayloadValidationError` (``"raise"``: left unacknowledged,
    iteration can go on); each is logged as a WARNING. None is dropped silently.
    """

    def __init__(
        self, driver: MessageSource, model: type[T], codec: Codec | None, on_invalid: str
    ) -> None:
        super().__init__(driver)
        self._decode = decoder(model, codec)
        self._model = model
        self._on_invalid = on_invalid

    async def __aenter__(self) -> TypedMessagesContext[T]:
        await self._ensure_started()
        return self

    def __aiter__(self) -> TypedMessagesContext[T]:
        return self

    async def __anext__(self) -> TypedMsg[T]:
        if not self._started:
            self._finalizer = close_when_collected(self, self._driver.aclose)
            await self._ensure_started()
        driver = self._driver
        decode = self._decode
        while True:
            msg = driver.take()
            if msg is None:
                msg = await driver.next_msg()
                if msg is None:
                    raise StopAsyncIteration
            try:
                value = decode(msg.data)
            except ValueError as exc:
                await refuse(msg, exc, self._model, self._on_invalid)
                continue
            return typed(msg, value)

    async def next(self) -> TypedMsg[T]:
        """The next message (StopAsyncIteration once stopped or drained)."""
        return await self.__anext__()


class ConsumeContext:
    """A running ``consume``: the handler is called for each message until stopped."""

    def __init__(self, driver: MessageSource, handler: Handler) -> None:
        self._driver = driver
        self._handler = handler
        self._task: asyncio.Task[None] | None = None
        self._ended = asyncio.Event()  # no more handler calls (the cleanup may still run)
        self.error: JetStreamError | None = None

    async def _start(self) -> None:
        await self._driver.start()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        driver, handler = self._driver, self._handler
        is_async = inspect.iscoroutinefunction(handler)
        try:
            while True:
                msg = driver.take()
                if msg is None:
                    msg = await driver.next_msg()
                    if msg is None:
                        break
                try:
                    if is_async:
                        await handler(msg)
                    else:
                        result = handler(msg)
                        if inspect.isawaitable(result):
                            await result
                except Exception:
                    logger.exception("consume handler raised; the message was not acknowledged")
        except JetStreamError as exc:
            self.error = exc
            driver.report(exc)
        finally:
            self._ended.set()
            await driver.aclose()  # waits for the error handlers

    def stop(self) -> None:
        """Stop: no further handler calls once the current one returns."""
        self._driver.stop()

    def _fail(self, error: JetStreamError) -> None:
        """End consumption with ``error`` (reported to the error handler, returned by closed())."""
        if self.error is None:
            self.error = error
        self._driver.report(error)
        self._driver.stop()

    async def drain(self) -> None:
        """Stop pulling, hand every buffered message to the handler, then wait until closed."""
        self._driver.drain()
        await self.closed()

    async def closed(self) -> JetStreamError | None:
        """Wait until consumption has ended; return its terminal error, if any.

        Called from inside the message handler (which consumption waits for)
        it cannot wait for the end: it returns at once, and consumption ends
        once the handler returns (after ``stop()`` or ``drain()``).
        """
        task = self._task
        if task is not None and task is asyncio.current_task():
            return self.error
        if task is not None:
            if in_error_handler(self._driver):
                # Called from an async error handler, which the end waits for.
                await self._ended.wait()
            else:
                await asyncio.shield(task)
        return self.error

    async def __aenter__(self) -> ConsumeContext:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()
        await self.closed()


class Consumer:
    """A handle on a pull consumer (ADR-37).

    Get one from :meth:`JetStreamContext.consumer`, :meth:`Stream.consumer` or a
    create call; it does not keep anything open by itself.
    """

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

    async def info(self, *, timeout: float | None = None) -> ConsumerInfo:
        """Fetch the consumer's current info from the server and cache it."""
        self._info = await consumer_info(self._api, self._stream, self._name, timeout)
        return self._info

    def __repr__(self) -> str:
        return f"<Consumer {self._stream}/{self._name}>"

    # ------------------------------------------------------------ administration

    async def pause(
        self, until: datetime | timedelta | float | str, *, timeout: float | None = None
    ) -> ConsumerPauseResponse:
        """Pause the consumer until ``until`` (a datetime, or a duration from now: ``"1h"``).

        Pulls get nothing while it is paused; on an interest stream it keeps
        its backlog. nats-server >= 2.11.

        Raises:
            ConsumerNotFoundError: the consumer does not exist.
            FeatureNotSupportedError: the server is older than 2.11.
            InvalidOptionError: ``until`` is not in the future.

        """
        return await A.pause(self._api, self._stream, self._name, until, timeout)

    async def resume(self, *, timeout: float | None = None) -> ConsumerPauseResponse:
        """Resume the consumer (nats-server >= 2.11)."""
        return await A.resume(self._api, self._stream, self._name, timeout)

    async def reset(self, sequence: int | None = None, *, timeout: float | None = None) -> int:
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
                sequence + 1 (the server would silently skip future messages).
            ConsumerNotFoundError: the consumer does not exist (promptly).
            StreamNotFoundError: the stream does not exist (promptly).
            FeatureNotSupportedError: the server is older than 2.14.
            ConsumerResetError: the server refused (10204: not allowed for the
                consumer's deliver policy, or below its start sequence).

        """
        seq, self._info = await A.reset(self._api, self._stream, self._name, sequence, timeout)
        return seq

    async def clear_backlog(self, *, timeout: float | None = None) -> int:
        """Skip everything stored now (Pulsar's clear-backlog): reset to last sequence + 1.

        Returns the sequence the consumer continues at. A consumer with nothing
        left to deliver or acknowledge is not reset (one starting beyond the
        stream's end could not be). nats-server >= 2.14.
        """
        seq, self._info = await A.clear_backlog(self._api, self._stream, self._name, timeout)
        return seq

    async def skip_older_than(
        self, age: float | timedelta | str, *, timeout: float | None = None
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
        seq, self._info = await A.skip_older_than(self._api, self._stream, self._name, age, timeout)
        return seq

    async def backlog(self, *, timeout: float | None = None) -> Backlog:
        """The consumer's backlog: pending, ack-pending, redelivered, waiting, oldest unacked."""
        return await A.backlog(self._api, self._stream, self._name, timeout)

    def _check(self, timeout: float | None) -> Awaitable[ConsumerInfo]:
        return consumer_info(self._api, self._stream, self._name, timeout)

    def _driver(
        self, settings: PullSettings, error_handler: ErrorHandler | None = None
    ) -> PullDriver:
        pin = None
        if settings.priority is not None and settings.priority.pinned:
            pin = self._pins.setdefault(settings.priority.group, PinState())
        return PullDriver(
            self._api, self._stream, self._name, settings, self._check, error_handler, pin
        )

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

    async def unpin(self, group: str, *, timeout: float | None = None) -> None:
        """Unpin the client pinned for ``group`` (ADR-42 ``pinned_client``; nats-server >= 2.11).

        The server picks a new pinned client at its next delivery; the pulls of
        the old one then get a ``423`` status and carry on unpinned (standby).

        Raises:
            InvalidOptionError: ``group`` is not a valid group name (nothing is sent).
            FeatureNotSupportedError: the server is older than 2.11.
            UnknownPriorityGroupError: the consumer has no such group (10160).
            ConsumerNotFoundError: the consumer does not exist.

        """
        check_group_name(group)
        await F.require(self._api, F.PRIORITY_GROUPS, timeout)
        await self._api.call(
            _api.CONSUMER_UNPIN,
            {"group": group},
            timeout=timeout,
            stream=self._stream,
            consumer=self._name,
        )

    async def _fetch(
        self,
        settings: PullSettings,
        model: type[Any] | None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessageBatch | TypedMessageBatch[Any]:
        """Start the pull of ``settings``; with ``model``, its batch typed (checked first)."""
        if model is not None:
            check_typed(model, codec, on_invalid)  # refused before anything is sent
        driver = self._driver(settings)
        await driver.start()
        batch = MessageBatch(driver)
        if model is None:
            return batch
        return TypedMessageBatch(batch, model, codec, on_invalid)

    @overload
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
        model: None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessageBatch: ...

    @overload
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
        model: type[T],
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
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

        Returns at once; iterate the batch to receive the messages. The pull
        ends when it is filled or after ``expires`` (minimum 1 s). The heartbeat
        defaults to 5 s when ``expires >= 10 s`` and is off below.

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
            resolve_fetch(
                max_messages=max_messages,
                expires=_secs(expires, "expires"),
                heartbeat=_secs(heartbeat, "heartbeat"),
                consumer=self._priority(),
                group=group,
                min_pending=min_pending,
                min_ack_pending=min_ack_pending,
                priority=priority,
            ),
            model,
            codec,
            on_invalid,
        )

    @overload
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
        model: None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessageBatch: ...

    @overload
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
        model: type[T],
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
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
            resolve_fetch(
                max_bytes=max_bytes,
                expires=_secs(expires, "expires"),
                heartbeat=_secs(heartbeat, "heartbeat"),
                consumer=self._priority(),
                group=group,
                min_pending=min_pending,
                min_ack_pending=min_ack_pending,
                priority=priority,
            ),
            model,
            codec,
            on_invalid,
        )

    @overload
    async def fetch_no_wait(
        self,
        max_messages: int,
        *,
        max_bytes: int | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessageBatch: ...

    @overload
    async def fetch_no_wait(
        self,
        max_messages: int,
        *,
        max_bytes: int | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: type[T],
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
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

        Raises:
            InvalidOptionError: bad options (before anything is sent).

        """
        return await self._fetch(
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
            model,
            codec,
            on_invalid,
        )

    @overload
    async def next(
        self,
        *,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> Msg: ...

    @overload
    async def next(
        self,
        *,
        expires: float | timedelta | str = DEFAULT_EXPIRES,
        heartbeat: float | timedelta | str | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        model: type[T],
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
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
        if model is None:
            return await self._next(
                expires, heartbeat, group, min_pending, min_ack_pending, priority
            )
        check_on_invalid(on_invalid)
        seconds = _secs(expires, "expires")
        beat = _secs(heartbeat, "heartbeat")
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
            hb = beat if not beat else min(beat, left / 2)
            return self._next(left, hb, group, min_pending, min_ack_pending, priority)

        source = f"{self._stream}/{self._name}"
        return await next_valid(take, settings.expires, model, codec, on_invalid, source)

    async def _next(
        self,
        expires: float | timedelta | str,
        heartbeat: float | timedelta | str | None,
        group: str | None,
        min_pending: int | None,
        min_ack_pending: int | None,
        priority: int | None,
    ) -> Msg:
        batch = await self.fetch(
            1,
            expires=expires,
            heartbeat=heartbeat,
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )
        async with batch:
            async for msg in batch:
                return msg
        raise FetchTimeoutError(f"no message from {self._stream}/{self._name} before expiry")

    @overload
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
        model: None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> MessagesContext: ...

    @overload
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
        model: type[T],
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
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
        if model is not None or codec is not None:
            check_on_invalid(on_invalid)
        settings = resolve_consume(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=_secs(expires, "expires"),
            heartbeat=_secs(heartbeat, "heartbeat"),
            threshold_messages=threshold_messages,
            threshold_bytes=threshold_bytes,
            consumer=self._priority(),
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )
        if model is not None:
            return TypedMessagesContext(
                self._driver(settings, error_handler), model, codec, on_invalid
            )
        return MessagesContext(self._driver(settings, error_handler))

    @overload
    async def consume(
        self,
        handler: Callable[[Msg], Any],
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
        model: None = None,
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
    ) -> ConsumeContext: ...

    @overload
    async def consume(
        self,
        handler: Callable[[TypedMsg[T]], Any],
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
        model: type[T],
        codec: Codec | None = None,
        on_invalid: OnInvalid = "term",
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
        if model is not None:
            check_on_invalid(on_invalid)
            handler = typed_handler(handler, model, codec, on_invalid, holder)
        settings = resolve_consume(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=_secs(expires, "expires"),
            heartbeat=_secs(heartbeat, "heartbeat"),
            threshold_messages=threshold_messages,
            threshold_bytes=threshold_bytes,
            consumer=self._priority(),
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )
        ctx = ConsumeContext(self._driver(settings, error_handler), handler)
        holder.append(ctx)
        await ctx._start()
        return ctx


def _secs(value: float | timedelta | str | None, name: str) -> float | None:
    """A pull option's duration in seconds (a timedelta or a duration string too)."""
    if isinstance(value, timedelta | str):
        return B.seconds(value, name, zero=True)
    return value

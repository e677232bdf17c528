"""What a pull hands out: a fetch's :class:`MessageBatch`, the messages and consume contexts."""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .._cleanup import close_in_background, close_when_collected
from .._codec import Codec, invalid_payload
from .._conn import Conn
from .._errors import JetStreamError
from .._message import Msg, TypedMsg, typed
from .._pull_driver import PullDriver, in_error_handler
from .._typed import (
    Refused,
    decoder,
    refuse,
)

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger("aiojetstream")

T = TypeVar("T")


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

    def _end_now(self) -> None:
        """Stop the pull now and release its subscription in the background."""
        close_in_background(self._driver.aclose())

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

    def outside(self) -> bool:
        """Whether the caller runs outside the connection's ended loop (see ``Conn.outside``)."""

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
        #: Set by aclose(): iteration ends, nothing starts the pulling again.
        self._closed = False
        #: Set while a start is under way: readers arriving meanwhile wait for it.
        self._starting: asyncio.Future[None] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    async def _ensure_started(self) -> None:
        """Start pulling, once; nothing when closed (``_started`` stays False)."""
        while not self._started and not self._closed:
            starting = self._starting
            if starting is not None:
                # Another reader (a pool of tasks on one iterator) is starting it: wait,
                # then look again (its start may have been cancelled or have failed:
                # then this reader starts it; waiting for messages instead hung).
                await asyncio.shield(starting)
                continue
            starting = self._starting = asyncio.get_running_loop().create_future()
            try:
                await self._driver.start()
                self._started = True
            finally:
                # Cancelled (a timeout on the first anext) or failed: the next call
                # starts again (it waited for messages from a pull never sent).
                self._starting = None
                starting.set_result(None)

    async def _enter(self) -> None:
        try:
            await self._ensure_started()
        except BaseException:
            # No ``async with`` body, no exit: nothing else would close it. A start
            # cancelled (a timeout around the entry) or failed may have left what it
            # made: the consumer an ordered start's creation request made, a
            # subscription. (As a watcher's entry does.)
            await self.aclose()
            raise

    async def __aenter__(self) -> MessagesContext:
        await self._enter()
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
            # early but its collection (the driver does not refer back to it). One
            # finalizer, however many starts (a cancelled one is started again).
            if self._finalizer is None:
                self._finalizer = close_when_collected(self, self._driver.aclose)
            await self._ensure_started()
            if not self._started:
                raise StopAsyncIteration  # closed (an entry cancelled, aclose())
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
        """Stop now; iteration ends. Buffered messages are not handed out.

        The server redelivers them after ``ack_wait`` when the consumer wants
        acks; with ``ack_policy=none`` it does not: they are lost to this reader
        (an ordered consumer's next read resumes after the last message handed
        out). Use :meth:`drain` to have them handed out.
        """
        self._driver.stop()

    async def drain(self) -> None:
        """Stop pulling; iteration yields what is buffered, then ends."""
        self._driver.drain()

    async def aclose(self) -> None:
        """Stop and release the subscription (idempotent); iteration ends.

        From another thread's loop: :class:`InvalidOptionError`, nothing closed.
        """
        ended = self._started and self._driver.outside()  # (raises from a live other loop)
        self._closed = True  # first: a reader woken by a cancelled start must not restart it
        if ended:
            if self._finalizer is not None:
                self._finalizer.detach()
            return
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
    ``on_refused``: the consumer's hook on an invalid message (see ``refuse``).
    """

    def __init__(
        self,
        driver: MessageSource,
        model: type[T],
        codec: Codec | None,
        on_invalid: str,
        on_refused: Refused | None = None,
    ) -> None:
        super().__init__(driver)
        self._decode = decoder(model, codec)
        self._codec = codec
        self._model = model
        self._on_invalid = on_invalid
        self._on_refused = on_refused

    async def __aenter__(self) -> TypedMessagesContext[T]:
        await self._enter()
        return self

    def __aiter__(self) -> TypedMessagesContext[T]:
        return self

    async def __anext__(self) -> TypedMsg[T]:
        if not self._started:
            if self._finalizer is None:
                self._finalizer = close_when_collected(self, self._driver.aclose)
            await self._ensure_started()
            if not self._started:
                raise StopAsyncIteration  # closed (an entry cancelled, aclose())
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
            except Exception as exc:
                if not invalid_payload(exc, self._codec):
                    raise  # the codec cannot decode now: the message is left unsettled
                await refuse(msg, exc, self._model, self._on_invalid, self._on_refused)
                continue
            return typed(msg, value)

    async def next(self) -> TypedMsg[T]:
        """The next message (StopAsyncIteration once stopped or drained)."""
        return await self.__anext__()


def _cancelling() -> int:
    """How many cancellations of the current task are pending (0: none)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


class ConsumeContext:
    """A running ``consume``: the handler is called for each message until stopped."""

    def __init__(self, driver: MessageSource, handler: Handler) -> None:
        self._driver = driver
        self._handler = handler
        self._task: asyncio.Task[None] | None = None
        self._ended = asyncio.Event()  # no more handler calls (the cleanup may still run)
        self.error: JetStreamError | None = None

    async def _start(self) -> None:
        try:
            await self._driver.start()
        except BaseException:
            # The caller never gets this context to close: a start cancelled (a
            # timeout around ``consume()``) or failed is closed here, with what it
            # made (the consumer an ordered start's creation request made).
            await self._driver.aclose()
            raise
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
                except (Exception, asyncio.CancelledError) as exc:
                    if isinstance(exc, asyncio.CancelledError) and _cancelling():
                        raise  # this task is cancelled (C13): it ends
                    # A CancelledError of the handler's own (it awaited something
                    # cancelled) is a failure like any other: ending consumption
                    # silently, it left closed() raising it into its caller.
                    logger.exception(
                        "consume handler raised; %s",
                        "it had settled the message (ack, nak or term)"
                        if msg.acked
                        else "the message was not acknowledged",
                    )
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
        self._own_loop()
        self._driver.drain()
        await self.closed()

    def _own_loop(self) -> None:
        """Refuse a wait (or a drain) from another loop than the consumption's.

        From another thread's loop the wait never returned (the task's end
        woke a waiter of that loop from the consumption's thread).
        """
        task = self._task
        if task is not None and not task.done():
            owner = task.get_loop()
            if asyncio.get_running_loop() is not owner:
                raise Conn.other_loop_error(owner)

    async def closed(self) -> JetStreamError | None:
        """Wait until consumption has ended; return its terminal error, if any.

        Called from inside the message handler (which consumption waits for)
        it cannot wait for the end: it returns at once, and consumption ends
        once the handler returns (after ``stop()`` or ``drain()``).
        """
        task = self._task
        if task is not None and task is asyncio.current_task():
            return self.error
        self._own_loop()
        if task is not None:
            if in_error_handler(self._driver):
                # Called from an async error handler, which the end waits for.
                await self._ended.wait()
            else:
                # Not shield(task): a consume task cancelled (as at the loop's
                # shutdown) raised CancelledError into a caller nobody cancelled.
                await asyncio.wait((task,))
                if not task.cancelled():
                    task.result()  # (an unexpected failure of the task: raised)
        return self.error

    async def __aenter__(self) -> ConsumeContext:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()
        await self.closed()

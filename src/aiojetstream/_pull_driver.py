"""The async shell around :class:`PullEngine`: one inbox subscription, a buffer, one timer.

The driver turns subscription messages, timer expiries, connection events and
consumer checks into engine events, and carries out the engine's commands. All
of its callbacks are synchronous and quick; it owns few short-lived tasks (a
consumer check, a drain's unsubscribe, the final unsubscribe), and ``aclose``
leaves nothing behind: no task, subscription, timer or connection listener.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from itertools import islice
from typing import Any, Final

from . import _api
from ._api import ApiClient
from ._cleanup import wait_for_tasks
from ._conn import RawSink, RawSubscription, Violation
from ._errors import (
    ConnectionClosedError,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    DisconnectedError,
    InvalidResponseError,
    JetStreamError,
    JetStreamTimeoutError,
    PermissionViolationError,
    StreamNotFoundError,
)
from ._message import Msg, PlainRun, total_size
from ._priority import PinState, pin_header_size, pin_id_from_headers
from ._pull_engine import (
    FETCH_GRACE,
    MIN_EXPIRES,
    NO_WAIT_TIMEOUT,
    ArmTimer,
    CancelTimer,
    CheckConsumer,
    CheckResult,
    Commands,
    Finish,
    PullEngine,
    PullSettings,
    Report,
    SendPull,
    Unsubscribe,
    buffer_limits,
    shortened,
)
from ._status import Severity, StatusKind, parse_status

logger = logging.getLogger("aiojetstream")

ErrorHandler = Callable[[JetStreamError], Any]

_NS = 1_000_000_000
#: The heartbeat header with the consumer sequence the server delivered last.
_LAST_CONSUMER = "Nats-Last-Consumer"

#: Set in the task of an async error handler: the message source that started it.
_HANDLER_OWNER: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "aiojetstream_error_handler_owner", default=None
)


def in_error_handler(owner: object) -> bool:
    """True when running (directly or not) in an async error handler ``owner`` started."""
    return _HANDLER_OWNER.get() is owner


def spawn_error_handler(
    owner: object, result: Awaitable[Any], tasks: set[asyncio.Task[None]]
) -> None:
    """Await what an async error handler returned, in a task marked as ``owner``'s.

    A handler may stop its consumption and await its end (``ctx.stop(); await
    ctx.closed()``, ``await it.aclose()``); closing waits for the error handlers,
    so it must not wait for the one it is called from: the mark tells it.
    """
    context = contextvars.copy_context()
    context.run(_HANDLER_OWNER.set, owner)
    task = asyncio.get_running_loop().create_task(_await_handler(result), context=context)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


class _Acker:
    """What a Msg needs to acknowledge itself (see ``_message.Acker``)."""

    __slots__ = ("_api", "_fast", "timeout")

    def __init__(self, api: ApiClient) -> None:
        self._api = api
        self._fast = api.conn.fast
        self.timeout = api.timeout

    def send_nowait(self, subject: bytes, payload: bytes) -> bool:
        if self._fast:
            self._api.conn.ack_nowait(subject, payload)
            return True
        return False

    async def send(self, subject: bytes, payload: bytes) -> None:
        conn = self._api.conn
        if conn.fast:
            conn.ack_nowait(subject, payload)
        else:  # nats-py's publish, awaited: its errors reach the caller
            await conn.publish(subject.decode(), payload)

    async def request(self, subject: bytes, payload: bytes, timeout: float) -> bytes:
        data, _ = await self._api.conn.request(subject.decode(), payload, timeout)
        return data


def pull_request_body(cmd: SendPull, settings: PullSettings | None = None) -> bytes:
    """The JSON of a ``CONSUMER.MSG.NEXT`` request (with the priority-group fields, if any)."""
    body: dict[str, Any] = {"batch": cmd.batch}
    if cmd.no_wait:
        body["no_wait"] = True
    else:
        body["expires"] = int(cmd.expires * _NS)
    if cmd.max_bytes:
        body["max_bytes"] = cmd.max_bytes
    if cmd.heartbeat:
        body["idle_heartbeat"] = int(cmd.heartbeat * _NS)
    priority = settings.priority if settings is not None else None
    if priority is not None:
        body.update(priority.fields(cmd.pin_id))
    return json.dumps(body, separators=(",", ":")).encode()


def _pending_for_a_lost_pull(info: object) -> int | None:
    """What a no-wait fetch left unanswered may still pull (the engine pulls again if > 0).

    The consumer's ``num_pending``, but 0 when the server holds pulls
    (``num_waiting``) or the consumer is at ``max_ack_pending``: then the pull
    is kept waiting, not lost (nats-server answers it when acks make room), and
    pulling again would only wait again. None when ``info`` is not a consumer's.
    """
    found = getattr(info, "num_pending", None)
    if type(found) is not int:
        return None
    waiting = getattr(info, "num_waiting", 0)
    if type(waiting) is int and waiting > 0:
        return 0
    config = getattr(info, "config", None)
    limit = getattr(config, "max_ack_pending", None)
    ack_pending = getattr(info, "num_ack_pending", 0)
    if type(limit) is int and limit > 0 and type(ack_pending) is int and ack_pending >= limit:
        return 0
    return found


#: The least a single pull made while reconnecting waits for the reconnect (seconds).
RECONNECT_WAIT_MIN: Final = 0.25


class PullDriver:
    """Runs one pull engine for a consumer; the buffer is read with :meth:`next_msg`."""

    def __init__(
        self,
        api: ApiClient,
        stream: str,
        consumer: str,
        settings: PullSettings,
        check: Callable[[float | None], Awaitable[object]],
        error_handler: ErrorHandler | None = None,
        pin: PinState | None = None,
        *,
        acks: bool = True,
    ) -> None:
        self._api = api
        # The consumer wants acks (not AckPolicy.NONE): once the connection is closed
        # its buffered messages are dropped (see on_closed).
        self._acks = acks
        self._check = check
        self._conn = api.conn
        self._stream = stream
        self._consumer = consumer
        self.settings = settings
        self.engine = PullEngine(settings, pin)
        self._pinned = self.engine.pin is not None
        self._error_handler = error_handler
        self._acker = _Acker(api)
        self._pull_subject_text = api.subject(
            _api.CONSUMER_MSG_NEXT, stream=stream, consumer=consumer
        )
        self._pull_subject = self._pull_subject_text.encode()
        #: Pulls the server refused (permissions violations; see _pull_refused).
        self._refused = 0
        self._inbox = b""
        self._sub: RawSubscription | None = None
        # Messages, and in column mode also runs of them (``_columns.Run``; see
        # collect_columns): _has_runs says when runs may be buffered. In batched
        # mode, plain messages arrive as runs of their bytes (_message.PlainRun),
        # each made a Msg when taken.
        self._buffer: deque[Any] = deque()
        self._sink: RawSink | None = None
        self._columns = False
        self._has_runs = False
        self._byte_mode = bool(settings.max_bytes)
        self._byte_cap = bool(settings.byte_cap)
        # The buffer's hard limit (buffer_limits): messages beyond it are dropped (see
        # _shed). The byte limit is 0 in message mode, where the engine counts no bytes.
        self._limit, self._byte_limit = buffer_limits(settings)
        #: Messages dropped beyond the limit so far (the first drop is reported).
        self.dropped = 0
        # Batched accounting (message-mode messages()/consume()): arrivals are told
        # to the engine once per read (on_messages), and up to quiet_consumptions()
        # messages are handed out before the engine hears of them (on_consumed_many).
        # Every other engine event first tells it everything (_settle).
        self._batching = not settings.single and not settings.max_bytes and not self._pinned
        self._lazy = False  # PlainRuns may be buffered (batched mode on the fast path)
        self._arrived = 0  # arrivals the engine was not told of yet
        self._untold = 0  # consumptions the engine was not told of yet
        self._quiet = 0  # consumptions that may go untold (no pull can be due)
        # The reader waiting for an arrival or the end; readers sharing the run
        # (a pool of tasks on one messages() or fetch) wait in _others meanwhile.
        self._waiter: asyncio.Future[None] | None = None
        self._others: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._check_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.finished = False
        self.error: JetStreamError | None = None
        self._closed = False
        self._listening = False
        #: Called with a heartbeat's ``Nats-Last-Consumer`` (the consumer sequence the
        #: server delivered last): the ordered consumer spots a lost last message.
        self.on_heartbeat: Callable[[int], None] | None = None
        #: Called at each status but a 503 (the server answered a pull of this consumer).
        self.on_answer: Callable[[], None] | None = None
        #: The run's settings refitted to a consumer check's answer (its pull limits may
        #: have changed since the run started: ``update_consumer``); None: kept as given.
        self.refit: Callable[[Any], PullSettings] | None = None

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Subscribe and send the first pull.

        No pull is written while the client reconnects (see :meth:`_send_pull`).
        A single pull (fetch, next) made meanwhile waits for the reconnect
        first, within its own bound, and raises if it does not come; a run
        (``messages`` / ``consume``) starts paused, and pulls once reconnected.
        """
        loop = asyncio.get_running_loop()
        if loop is not self._conn.loop:  # nothing is subscribed nor pulled (Conn.other_loop)
            self._conn.other_loop(loop)
        self._loop = loop
        began = loop.time()
        if self.settings.single and self._conn.is_down:
            await self._wait_reconnected(began)
        inbox = self._conn.new_inbox()
        self._inbox = inbox.encode()
        sink = None
        if not self._byte_mode and not self._pinned:
            # The router builds and buffers plain messages itself (told per read).
            # (The fallback ignores the sink: its messages all arrive through _on_raw.)
            runs = self._start_run if self._batching and self._conn.fast else None
            self._lazy = runs is not None
            sink = RawSink(
                self._buffer.append, Msg, self._acker, self._on_arrivals, fill=True, runs=runs
            )
        self._sink = sink
        self._sub = await self._conn.subscribe_raw(inbox, self._on_raw, sink=sink)
        try:
            self._conn.add_listener(self)
            self._listening = True
            # The server's permissions violations for the pulls and the inbox.
            self._conn.watch_subscription(inbox, self._inbox_refused)
            self._conn.watch_publishes(self, self._pull_refused)
            # (A no-wait fetch that waited for a reconnect keeps its bound from the call.)
            self._run(self.engine.start(began if self.settings.no_wait else loop.time()))
            if self._conn.is_down:
                # Its first pull was not written: paused, it pulls after the reconnect.
                self._run(self.engine.on_disconnected(self._loop.time()))
        except BaseException:
            # Nothing runs a failed start's clean-up later: unsubscribe, stop listening.
            await self._cleanup()
            raise

    async def _wait_reconnected(self, began: float) -> None:
        """A single pull made while reconnecting: wait for the reconnect within its bound.

        The fetch keeps the bound of a call made while connected: the wait takes
        what the pull would have (``expires`` less the shortest pull,
        ``MIN_EXPIRES``; a no-wait fetch's answer keeps ``FETCH_GRACE`` of its
        ``NO_WAIT_TIMEOUT``), and the pull gets what is left.

        Raises:
            ConnectionClosedError: the connection closed meanwhile.
            JetStreamTimeoutError: not reconnected in time; nothing was pulled.

        """
        settings = self.settings
        if settings.no_wait:
            bound = NO_WAIT_TIMEOUT - FETCH_GRACE
        else:
            # At least a moment: with expires=1 (the least) it was 0, raised before
            # anything ran, and a loop fetching again on that error held the event
            # loop for good (nats-py never got to reconnect).
            bound = max(settings.expires - MIN_EXPIRES, RECONNECT_WAIT_MIN)
        conn = self._conn
        if not await conn.wait_connected(bound):
            if conn.is_closed:
                raise conn.closed_error()
            raise JetStreamTimeoutError(
                f"not reconnected within {bound:g} s: nothing was pulled (fetch again)"
            )
        if not settings.no_wait:
            waited = asyncio.get_running_loop().time() - began
            self.settings = self.engine.settings = shortened(settings, settings.expires - waited)

    def stop(self) -> None:
        """Stop now: buffered messages are dropped (redelivered unless AckPolicy.NONE)."""
        self._has_runs = False
        if self.finished:
            self._buffer.clear()
            return
        self._buffer.clear()
        self._settle()
        self.engine.discard_buffer()
        self._run(self.engine.stop(False, self._now()))

    def drain(self) -> None:
        """Stop pulling; finish once the buffered messages were consumed.

        The inbox is unsubscribed first, with a PING/PONG round trip: what the
        server sent for the pulls it held before it read the UNSUB is buffered
        and handed out too.
        """
        if not self.finished:
            self._settle()
            self._run(self.engine.stop(True, self._now()))

    def outside(self) -> bool:
        """Whether a close runs outside the connection's ended loop (see ``Conn.outside``)."""
        return self._conn.outside()

    async def aclose(self) -> None:
        """Stop and release everything (idempotent).

        From another thread's loop: :class:`InvalidOptionError`, nothing closed;
        after the connection's loop ended: only marked closed (nothing of it runs).
        """
        if self._loop is not None and self._conn.outside():
            self._closed = True
            self._buffer.clear()
            return
        if not self.finished:
            self.stop()
        if self._closed:
            await self._wait_tasks()
            return
        self._closed = True
        await self._cleanup()
        await self._wait_tasks()

    async def _wait_tasks(self) -> None:
        # Not for the error handlers when called from one: it would wait for itself.
        if in_error_handler(self):
            await wait_for_tasks(self._tasks)
        else:
            await wait_for_tasks(self._tasks, self._handler_tasks)

    async def _cleanup(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._listening:
            self._listening = False
            self._conn.remove_listener(self)
            self._conn.unwatch(self, self._inbox.decode())
        sub, self._sub = self._sub, None
        if sub is not None:
            sub.detach()
            try:
                await sub.unsubscribe()
            except JetStreamError as exc:  # the connection went away meanwhile
                logger.debug("unsubscribe after a pull failed: %s", exc)

    def _now(self) -> float:
        loop = self._loop or asyncio.get_running_loop()
        return loop.time()

    # ------------------------------------------------------------- consumption

    @property
    def consumer(self) -> str:
        """The name of the consumer pulled from."""
        return self._consumer

    @property
    def buffered(self) -> int:
        """Messages waiting in the buffer."""
        if self._has_runs:
            self._materialize()
        if self._lazy:
            return sum([1 if type(item) is Msg else len(item) for item in self._buffer])
        return len(self._buffer)

    def _start_run(self, subject: bytes) -> PlainRun:
        """A new run at the end of the buffer (``RawSink.runs``)."""
        run = PlainRun(subject, self._acker)
        self._buffer.append(run)
        return run

    def buffer_ends(self) -> tuple[int, Msg | None, Msg | None]:
        """How many messages are buffered, the first of them and the last (None when empty).

        With runs buffered (PlainRun), the two ends are made for a look: the
        messages :meth:`take` hands out later are other objects, equal to them.
        """
        if self._has_runs:
            self._materialize()
        buffer = self._buffer
        if not buffer:
            return 0, None, None
        if not self._lazy:
            return len(buffer), buffer[0], buffer[-1]
        head, tail = buffer[0], buffer[-1]
        first = head if type(head) is Msg else head.peek()
        last = tail if type(tail) is Msg else tail.peek(last=True)
        return self.buffered, first, last

    def take(self) -> Msg | None:
        """The next buffered message, or None (never waits)."""
        buffer = self._buffer
        if buffer and self._quiet and not self._arrived and not self._has_runs:
            # The quiet path below, first: the common case of a messages() loop.
            self._quiet -= 1
            self._untold += 1
            head = buffer[0]
            return buffer.popleft() if type(head) is Msg else head.take(buffer)  # type: ignore[no-any-return]
        if self._has_runs:
            self._materialize()
        if not buffer:
            return None
        head = buffer[0]
        msg: Msg = buffer.popleft() if type(head) is Msg else head.take(buffer)
        if self._arrived:
            self._tell()
        if self._quiet:
            # No pull can be due yet: the engine hears of it later (see _tell).
            self._quiet -= 1
            self._untold += 1
            return msg
        if self._untold:
            self._tell()
        if self._byte_mode:
            size = msg.size - pin_header_size(msg._hdr) if self._pinned else msg.size
            cmds = self.engine.on_consumed(size)
        else:
            cmds = self.engine.on_consumed(0)
        if cmds:
            self._run(cmds)
        if self._batching:
            self._quiet = self.engine.quiet_consumptions()
        return msg

    def _tell(self) -> None:
        """Tell the engine the consumptions and arrivals it has not heard of, in that order.

        (Consumptions left untold happened before the arrivals left untold: every
        take tells the arrivals first.) Neither returns a command in batched mode.
        """
        untold, arrived = self._untold, self._arrived
        self._untold = self._arrived = 0
        if untold:
            self._run(self.engine.on_consumed_many(untold))
        if arrived:
            self._run(self.engine.on_messages(arrived))

    def _settle(self) -> None:
        """Before any other engine event: tell it everything, and hand out no untold one."""
        if self._untold or self._arrived:
            self._tell()
        self._quiet = 0

    def __aiter__(self) -> PullDriver:
        return self

    async def __anext__(self) -> Msg:
        """The next message (``messages()`` iterates the driver itself once started).

        Raises:
            StopAsyncIteration: the run ended normally.
            JetStreamError: the run ended with this (terminal) error.

        """
        buffer = self._buffer
        if buffer and self._quiet and not self._arrived:
            # take()'s quiet path, inlined: the common case of a messages() loop.
            self._quiet -= 1
            self._untold += 1
            msg = buffer[0]
            if type(msg) is Msg:
                return buffer.popleft()  # type: ignore[no-any-return]
            return msg.take(buffer)  # type: ignore[no-any-return]
        msg = self.take()
        if msg is None:
            msg = await self.next_msg()
            if msg is None:
                raise StopAsyncIteration
        return msg

    async def next_msg(self) -> Msg | None:
        """Wait for the next message; None once the run ended normally.

        Raises:
            JetStreamError: the run ended with this (terminal) error.

        """
        while True:
            msg = self.take()
            if msg is not None:
                return msg
            if self.finished:
                if self.error is not None:
                    raise self.error
                return None
            await self._wait()

    async def collect(self) -> list[Msg]:
        """Wait for the run to end; every buffered message at once, in order.

        Raises:
            JetStreamError: the run ended with this (terminal) error and no
                message is left to return.

        """
        await self.wait_finished()
        if self._has_runs or self._lazy:
            self._materialize()
        buffer = self._buffer
        if not buffer:
            if self.error is not None:
                raise self.error
            return []
        msgs = list(buffer)
        buffer.clear()
        self._settle()
        self._run(self.engine.on_consumed_many(len(msgs)))
        return msgs

    async def collect_columns(self) -> Any:
        """:meth:`collect`, as one Arrow record batch (``_columns.COLUMNS``; needs pyarrow).

        Switches a fetch into column mode first: on the fast path, plain
        messages arriving from then on are framed in bulk into Arrow columns,
        with no :class:`Msg` each (see ``_columns``).

        Raises:
            JetStreamError: the run ended with this (terminal) error and no
                message is left to return.

        """
        try:
            from . import _columns  # pyarrow: only for column mode
        except ImportError as exc:
            raise ImportError(
                f"collect_columns() needs pyarrow (pip install pyarrow): {exc}"
            ) from exc

        sink = self._sink
        if (
            not self._columns
            and sink is not None
            and self.settings.single
            and not self._batching
            and not self.finished
        ):
            self._columns = True
            sink.bulk = _columns.Framer()
        await self.wait_finished()
        buffer = self._buffer
        if not buffer:
            if self.error is not None:
                raise self.error
            return _columns.empty()
        items: list[Any] = list(buffer)
        buffer.clear()
        self._has_runs = False
        count = sum([1 if type(item) is Msg else len(item) for item in items])
        self._settle()
        self._run(self.engine.on_consumed_many(count))
        return _columns.build(items)

    def _materialize(self) -> None:
        """Turn the buffered runs (column mode, PlainRuns) into messages, in place and in order."""
        self._has_runs = False
        buffer = self._buffer
        if not any(type(item) is not Msg for item in buffer):
            return
        items = list(buffer)
        buffer.clear()
        for item in items:
            if type(item) is Msg:
                buffer.append(item)
            else:
                buffer.extend(item.messages(self._acker))

    async def wait_finished(self) -> None:
        """Until the run ended (its messages stay buffered)."""
        while not self.finished:
            await self._wait()

    async def _wait(self) -> None:
        """Until the next arrival or the end (see :meth:`_wake`).

        Several tasks may read one run (a pool of workers on one ``messages()``
        or fetch): they take turns. The first waits in ``_waiter``, the others
        in ``_others``; an arrival or the end wakes them all, and each takes
        what is there (a message goes to one of them) or waits again.
        """
        loop = self._loop
        if loop is None:
            loop = asyncio.get_running_loop()
        elif asyncio.get_running_loop() is not loop:
            self._conn.refuse_outside()  # (a future of another loop: a bare RuntimeError)
        waiter = loop.create_future()
        if self._waiter is None:
            self._waiter = waiter
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
            return
        others = self._others
        others.append(waiter)
        try:
            await waiter
        finally:
            if waiter in others:
                others.remove(waiter)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._others:
            self._wake_others()

    def _wake_others(self) -> None:
        """Wake the readers waiting besides the first (see :meth:`_wait`)."""
        others, self._others = self._others, []
        for waiter in others:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------- inputs

    def _on_raw(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        # A status never has a reply subject; a delivery always has its $JS.ACK one
        # (a stored header block the server keeps as is, "NATS/1.1 200...", is data).
        if hdr is not None and not reply and len(hdr) > 9 and hdr[8] == 0x20:
            self._on_status(hdr)
            return
        if self.finished:
            return
        msg = Msg(subject, reply, data, hdr, self._acker)
        buffer = self._buffer
        buffer.append(msg)
        if self._batching:
            self._arrived += 1  # told at the next take or engine event
            if len(buffer) > self._limit:
                # (Buffered runs hold several messages each: then _on_arrivals, which
                # counts them, sheds at the next read of plain ones.)
                self._shed()
        else:
            size = 0
            if self._byte_mode or self._byte_cap:
                size = msg.size
            if self._pinned:
                pin_id = pin_id_from_headers(hdr)
                if pin_id is not None:
                    self.engine.on_pin_id(pin_id)
                    if size:
                        # Counted as the server counts it: before it added the pin id
                        # header (see pin_header_size).
                        size -= pin_header_size(hdr)
            engine = self.engine
            cmds = engine.on_message(size if self._byte_mode else 0)
            if self._byte_cap:
                cmds += engine.on_fetched_bytes(size)
            if cmds:
                self._run(cmds)
            if len(buffer) > self._limit or engine.buffered_bytes > self._byte_limit:
                self._shed()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._others:
            self._wake_others()

    def _on_arrivals(self, count: int) -> None:
        """The router put ``count`` messages into the buffer (see RawSink)."""
        if self._batching:
            self._arrived += count  # told at the next take or engine event
            if self.engine.buffered_messages + self._arrived - self._untold > self._limit:
                self._shed()
        else:
            # A fetch: told now (it ends when filled). What arrived after its end is
            # dropped, as _on_raw drops it: the engine counts only what it took.
            engine = self.engine
            before = engine.delivered
            cmds = engine.on_messages(count)
            taken = engine.delivered - before
            buffer = self._buffer
            if self._columns:
                self._has_runs = True  # runs among them, maybe
                if count > taken:
                    _drop_last(buffer, count - taken)
                if self._byte_cap and taken and not engine.done:
                    cmds += engine.on_fetched_bytes(_tail_size(buffer, taken))
            else:
                for _ in range(count - taken):
                    buffer.pop()
                if self._byte_cap and taken and not engine.done:
                    # Sizes only for a byte-capped fetch still running: its pull may have
                    # ended without a word (the cap used up exactly).
                    cmds += engine.on_fetched_bytes(total_size(islice(reversed(buffer), taken)))
            if cmds:
                self._run(cmds)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._others:
            self._wake_others()

    def _shed(self) -> None:
        """More is buffered than :func:`buffer_limits` allows: drop the newest beyond it.

        Only messages nobody asked for fill the buffer that far (see
        ``buffer_limits``): another client publishing to the pull's inbox, or a
        server delivering more than asked. The engine hears of the dropped ones
        as taken (``on_consumed``): its counts stay those of the messages the
        server delivered. Dropped messages that want acks are redelivered after
        ``ack_wait``. The first drop of a run is reported.
        """
        if self.finished:
            return
        self._settle()
        engine = self.engine
        buffer = self._buffer
        # Plus what pulls written off may still deliver: asked for, so never dropped.
        late, late_bytes = engine.written_off(self._now())
        limit = self._limit + late
        byte_limit = self._byte_limit + late_bytes if self._byte_limit else 0
        dropped = 0
        cmds: Commands = ()
        if self._byte_mode or self._pinned:
            # Messages only (no runs); sizes count in byte mode.
            while buffer and (
                engine.buffered_messages > limit
                or (byte_limit and engine.buffered_bytes > byte_limit)
            ):
                msg = buffer.pop()
                size = 0
                if self._byte_mode:
                    size = msg.size - pin_header_size(msg._hdr) if self._pinned else msg.size
                cmds += engine.on_consumed(size)
                dropped += 1
        else:
            dropped = min(engine.buffered_messages - limit, self.buffered)
            if dropped > 0:
                _drop_last(buffer, dropped)
                cmds = engine.on_consumed_many(dropped)
        if dropped <= 0:
            return
        first = not self.dropped
        self.dropped += dropped
        if cmds:
            self._run(cmds)
        if first:
            self.report(
                InvalidResponseError(
                    f"more messages arrived than were pulled for: the buffer holds its "
                    f"limit of {limit:,} messages"
                    + (f" ({byte_limit:,} bytes)" if self._byte_mode else "")
                    + " and newer ones are dropped (another client publishing to the pull's "
                    "inbox, or a server delivering more than asked); messages that want "
                    "acks are redelivered after ack_wait"
                )
            )
        else:
            logger.debug(
                "%s/%s: dropped %d messages beyond the buffer's limit",
                self._stream,
                self._consumer,
                dropped,
            )

    def _on_status(self, hdr: bytes) -> None:
        status = parse_status(hdr)
        if status is None:
            self.report(InvalidResponseError(f"malformed status message: {hdr[:80]!r}"))
            return
        if self.on_answer is not None and status.kind is not StatusKind.NO_RESPONDERS:
            self.on_answer()
        if status.kind is StatusKind.HEARTBEAT and self.on_heartbeat is not None:
            last = status.headers.get(_LAST_CONSUMER)
            if (
                last is not None
                and last.isascii()
                and last.isdigit()
                and len(last) <= 20  # a uint64 (int() refuses 4,301 digits)
                and not self.finished
            ):
                self.on_heartbeat(int(last))
        silent = status.severity is Severity.SILENT and status.kind is not StatusKind.PIN_MISMATCH
        error = None if silent else status.error()
        self._settle()
        self._run(
            self.engine.on_status(
                status.kind,
                status.severity,
                status.pending_messages,
                status.pending_bytes,
                error,
                self._now(),
            )
        )

    def _on_timer(self) -> None:
        self._timer = None
        self._settle()
        self._run(self.engine.on_timer(self._now()))

    # ConnectionListener
    def on_disconnected(self) -> None:
        """Pause: the engine writes off outstanding pulls.

        A disconnect of a connection closing for good (nats-py tells "disconnected"
        before "closed") is its close: a fetch ends with ConnectionClosedError.
        """
        if self._conn.is_closed:
            self.on_closed()
            return
        self._settle()
        self._run(self.engine.on_disconnected(self._now()))

    def on_reconnected(self) -> None:
        """Resume: check the consumer, then pull."""
        self._settle()
        self._run(self.engine.on_reconnected(self._now()))

    def on_closed(self) -> None:
        """The connection closed for good: end with ConnectionClosedError.

        A consumer that wants acks drops its buffered messages: none of them could
        be acknowledged any more, so each handed out would be processed and then
        redelivered (nats.go drops them too). With AckPolicy.NONE they are the
        only copy: they are still handed out, then the error is raised.
        """
        if self.finished:
            return
        if self._acks and self._buffer:
            self._buffer.clear()
            self._has_runs = False
            self._settle()
            self.engine.discard_buffer()
        self._finish(self._conn.closed_error("the connection was closed"))

    # permissions violations (see _conn._violations)
    def _pull_refused(self, violation: Violation) -> bool:
        """The server refused a publish: one of this run's pulls if none of them was yet.

        Runs on one consumer share the pull subject; the server refuses each
        pull with one ``-ERR``, in the order they were sent: the oldest run
        with a pull not refused yet takes it.
        """
        if (
            self.finished
            or self._refused >= self.engine.pulls
            or not violation.matches(self._pull_subject_text)
        ):
            return False
        self._refused += 1
        error = PermissionViolationError("publish", self._pull_subject_text)
        self._settle()
        self._run(self.engine.on_refused(error, False, self._now()))
        return True

    def _inbox_refused(self, violation: Violation) -> None:
        """The server refused the inbox's subscription: nothing can arrive, the run ends."""
        if self.finished:
            return
        error = PermissionViolationError("subscription", self._inbox.decode(), inbox=True)
        self._settle()
        self._run(self.engine.on_refused(error, True, self._now()))

    # ------------------------------------------------------------- commands

    def _run(self, cmds: Commands) -> None:
        for cmd in cmds:
            if self.finished:
                # Ended meanwhile (an error handler called stop() on a Report): the
                # rest is stale; a pull now would deliver to an unsubscribed inbox.
                return
            if isinstance(cmd, SendPull):
                self._send_pull(cmd)
            elif isinstance(cmd, ArmTimer):
                if self._timer is not None:
                    self._timer.cancel()
                loop = self._loop or asyncio.get_running_loop()
                self._timer = loop.call_at(cmd.deadline, self._on_timer)
            elif isinstance(cmd, CancelTimer):
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            elif isinstance(cmd, Report):
                self.report(cmd.error)
            elif isinstance(cmd, CheckConsumer):
                stale = self._check_task
                if stale is not None and not stale.done() and stale is not asyncio.current_task():
                    # Asked on a connection since lost (its answer may never come): it
                    # held a reset (the ordered consumer's) and a close for its whole
                    # API timeout; the new check's answer is the one the engine awaits.
                    stale.cancel()
                self._check_task = self._spawn(self._check_consumer(cmd.timeout))
            elif isinstance(cmd, Unsubscribe):
                self._spawn(self._unsubscribe())
            elif isinstance(cmd, Finish):
                self._finish(cmd.error)

    def _send_pull(self, cmd: SendPull) -> None:
        """Write a pull request, unless the client is reconnecting.

        nats-py would buffer it and send it after the reconnect, also when this
        run has ended meanwhile: the server then delivered its messages (lost
        with ``AckPolicy.NONE``) to an inbox nobody reads. The disconnect (told
        to the engine, or at start) writes off the pull, and the engine pulls
        again once reconnected.
        """
        conn = self._conn
        if conn.is_down:
            logger.debug("pull request not sent: reconnecting")
            return
        try:
            body = pull_request_body(cmd, self.settings)
            # At once: the consumer may go on with a full buffer for a while before
            # it yields to the event loop (and so to nats-py's flusher).
            conn.publish_now(
                self._pull_subject, body, self._inbox, None if conn.fast else self._not_sent
            )
        except (DisconnectedError, ConnectionClosedError) as exc:
            # The disconnect event follows and pauses the engine; nothing is lost.
            logger.debug("pull request not sent: %s", exc)

    def _not_sent(self, error: JetStreamError) -> None:
        """A pull request the fallback could not write (after ``_send_pull`` returned)."""
        if isinstance(error, DisconnectedError | ConnectionClosedError):
            logger.debug("pull request not sent: %s", error)  # as in _send_pull
        else:
            self.report(error)

    def report(self, error: JetStreamError) -> None:
        """Hand a non-terminal error to the error handler, or log it."""
        handler = self._error_handler
        if handler is None:
            logger.warning("%s/%s: %s", self._stream, self._consumer, error)
            return
        try:
            result = handler(error)
        except Exception:
            logger.exception("error_handler raised")
            return
        if inspect.isawaitable(result):
            spawn_error_handler(self, result, self._handler_tasks)

    def _finish(self, error: JetStreamError | None) -> None:
        if self.finished:
            return
        self.finished = True
        self.error = error
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sub is not None:
            self._sub.detach()  # no more deliveries, even before the UNSUB
        self._wake()
        check = self._check_task
        if check is not None and check is not asyncio.current_task():
            # Its answer no longer matters: do not let closing wait for its timeout.
            check.cancel()
        if not self._closed:
            self._closed = True
            self._spawn(self._cleanup())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        # The coroutine itself, not a wrapper awaiting it: a task cancelled
        # before it ran (a check cancelled by _finish) closes its coroutine; a
        # wrapper's would be dropped unstarted ("was never awaited").
        loop = self._loop or asyncio.get_running_loop()
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _unsubscribe(self) -> None:
        """A drain's UNSUB and its round trip; then tell the engine (``on_unsubscribed``).

        Messages keep arriving into the buffer until the server's PONG: those it
        sent for the pulls it held before it read the UNSUB. Whatever goes wrong
        (no PONG within the API's timeout, the connection gone), the engine
        hears of the end: a drain never waits for more.
        """
        sub = self._sub
        if sub is not None:
            try:
                await sub.drain(self._api.timeout)
            except JetStreamError as exc:
                logger.debug("unsubscribing a drained pull: %s", exc)
            except Exception:
                logger.exception("unsubscribing a drained pull failed")
        if not self.finished:
            self._settle()
            self._run(self.engine.on_unsubscribed())

    def _refitted(self, settings: PullSettings) -> None:
        """Pull with ``settings`` from now on: a consumer check found other pull limits."""
        if settings == self.settings:
            return
        logger.info(
            "consumer %s > %s: pulls now ask %d messages for up to %g s (its pull limits changed)",
            self._stream,
            self._consumer,
            settings.max_messages,
            settings.expires,
        )
        self.settings = self.engine.settings = settings
        self._limit, self._byte_limit = buffer_limits(settings)

    async def _check_consumer(self, timeout: float | None) -> None:
        result = CheckResult.EXISTS
        error: JetStreamError | None = None
        pending: int | None = None
        if timeout is not None:  # a fetch's time left: never longer than the API's
            timeout = min(timeout, self._api.timeout)
        try:
            info = await self._check(timeout)
            pending = _pending_for_a_lost_pull(info)
            if self.refit is not None and not self.settings.single:
                self._refitted(self.refit(info))
        except (ConsumerNotFoundError, ConsumerDeletedError, StreamNotFoundError) as exc:
            # (ConsumerDeletedError: a check that takes a consumer it can not look up
            # as lost, the ordered consumer's.)
            result, error = CheckResult.MISSING, exc
        except ConnectionClosedError as exc:
            self._finish(exc)
            return
        except JetStreamError as exc:
            # Timeouts, disconnects, no responders, API errors, a reply that is not
            # the API's: checked again later (a fetch ends with it).
            result, error = CheckResult.UNAVAILABLE, exc
        except Exception as exc:
            # Not expected: the run ends with it (a check task that died here left
            # the run waiting for an answer that never came, pulling nothing).
            failure = JetStreamError(f"checking the consumer failed: {exc!r}")
            failure.__cause__ = exc
            self._finish(failure)
            return
        if not self.finished:
            self._settle()
            self._run(self.engine.on_consumer_checked(self._now(), result, error, pending))


def _drop_last(buffer: deque[Any], count: int) -> None:
    """Drop the last ``count`` messages of a buffer of messages and runs."""
    while count > 0:
        item = buffer[-1]
        if type(item) is Msg:
            buffer.pop()
            count -= 1
        elif len(item) <= count:
            buffer.pop()
            count -= len(item)
        else:
            item.truncate(len(item) - count)
            count = 0


def _tail_size(buffer: deque[Any], count: int) -> int:
    """The summed :attr:`Msg.size` of the last ``count`` messages of messages and runs."""
    total = 0
    for item in reversed(buffer):
        if count <= 0:
            break
        if type(item) is Msg:
            total += item.size
            count -= 1
        else:
            last = min(count, len(item))
            total += item.tail_size(last)
            count -= last
    return total


async def _await_handler(result: Awaitable[Any]) -> None:
    try:
        await result
    except Exception:
        logger.exception("error_handler raised")

"""The ordered consumer's cursor, its consumer's recreation, and the readers over it (ADR-17).

The ordered consumer keeps a cursor (the stream sequence of the last message it
handed out). Its server-side consumer is ephemeral, AckNone, memory-stored, one
replica, named ``<prefix>_<serial>``. Whenever the delivery stops being
trustworthy (a consumer-sequence gap, a heartbeat naming a later consumer
sequence than arrived, missed heartbeats, the consumer deleted or lost in a
restart) it creates the next one starting at ``cursor + 1``, retrying (under
the same name) with backoff (1 s doubling to 10 s) up to ``max_reset_attempts``,
and then deletes the old one (first, when ``max_consumers`` leaves no room).
A message is handed out only if its consumer sequence is exactly the next
one, so no gap and no duplicate can reach the user.

:class:`OrderedCursor` holds that state and the resets; :class:`OrderedBatch`
(a fetch) and :class:`OrderedSource` (``messages`` / ``consume``) read through
it. The public calls are ``OrderedConsumer``'s (:mod:`.handle`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final

from .. import _api
from .. import _consumer as C
from .._api import ApiClient
from .._cleanup import close_in_background, wait_for_tasks
from .._conn import Conn
from .._errors import (
    ConnectionClosedError,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    InvalidOptionError,
    JetStreamError,
    NoHeartbeatError,
    NoRespondersError,
    NotJetStreamMessageError,
    OrderedConsumerResetError,
    StreamNotFoundError,
)
from .._message import Msg, ack_sequences, next_in_order
from .._models import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    OrderedConsumerConfig,
    StreamInfo,
)
from .._pull_driver import ErrorHandler, PullDriver, in_error_handler, spawn_error_handler
from .._pull_engine import (
    MIN_EXPIRES,
    PullSettings,
    fit_to_limits,
    paced,
    shortened,
)

logger = logging.getLogger("aiojetstream")


RESET_BACKOFF_FIRST: Final = 1.0
RESET_BACKOFF_MAX: Final = 10.0
#: Start policies that begin at the stream's end when the consumer is created.
_FROM_THE_END: Final = frozenset((DeliverPolicy.NEW, DeliverPolicy.LAST))
#: The server-side consumer's inactive_threshold when the config's is 0 (its default).
DEFAULT_INACTIVE_THRESHOLD: Final = timedelta(minutes=5)
#: How long closing waits for the ephemeral consumer's deletion.
DELETE_TIMEOUT: Final = 2.0
#: Errors after which the ordered consumer recreates its consumer. A ``503`` to a
#: pull while the look-up finds the consumer is one of them: the consumer is R1, and
#: a meta leader answers the look-up of one whose node is down from its assignment
#: (nats.go resets on no responders too).
RESETTABLE = (ConsumerDeletedError, ConsumerNotFoundError, NoHeartbeatError, NoRespondersError)
#: err_code of "maximum consumers limit reached".
_MAX_CONSUMERS: Final = 10026


@dataclass(slots=True)
class _ResetState:
    """A reset being retried: kept across calls until a consumer is created."""

    config: ConsumerConfig
    """The consumer to create (its name is kept across the attempts)."""
    old: str | None = None
    """The consumer it replaces, deleted once the new one exists (None: none or deleted)."""
    attempts: int = 0
    delay: float = RESET_BACKOFF_FIRST
    """The backoff before the retry after the next failure."""
    retry_at: float = 0.0
    """Loop time of the next attempt."""
    error: JetStreamError | None = None
    """The last attempt's error."""
    creating: asyncio.Task[ConsumerInfo] | None = None
    """The last attempt's creation request: it goes on when its caller is cancelled."""


class _Closed:
    """A connection listener that sets ``event`` once the connection is closed for good."""

    __slots__ = ("_conn", "event")

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self.event = asyncio.Event()
        if conn.is_closed:
            self.event.set()

    def on_disconnected(self) -> None:
        # nats-py tells a close as a disconnect first.
        if self._conn.is_closed:
            self.event.set()

    def on_reconnected(self) -> None:
        pass

    def on_closed(self) -> None:
        self.event.set()


class OutOfTime(Exception):
    """A reset bounded by a caller's deadline could not recreate the consumer in time."""

    def __init__(self, error: JetStreamError) -> None:
        super().__init__(str(error))
        self.error = error


class OrderedCursor:
    """The state of an ordered consumer and the recreation of its server-side consumer."""

    def __init__(
        self,
        api: ApiClient,
        stream: str,
        config: OrderedConsumerConfig,
        created: datetime | None = None,
    ) -> None:
        self._api = api
        self._stream = stream
        #: When the stream was created, as its handle saw it (see _same_stream).
        self._stream_created = created
        self._config = config
        self._prefix = config.name_prefix or secrets.token_hex(8)
        self._serial = 0
        # The last message handed out (None before any) and the stream sequence of
        # the last one parsed (see _cursor): a message handed out from a run checked
        # at its ends is parsed only when asked for.
        self._cursor_value = 0
        self._cursor_msg: Msg | None = None
        self._cursor_parsed: Msg | None = None
        # Where a "new" or "last" consumer started (its first creation): recreated before
        # the first message, it starts there again. None until then.
        self._floor: int | None = None
        self._expected = 1  # the next consumer sequence of the current consumer
        # A "last per subject" consumer's initial values: how many it had pending when
        # created (0 for other policies). A reset before they were all handed out
        # starts "last per subject" again, skipping what was handed out already
        # (stream sequences up to _skip_through): from cursor + 1 it would deliver
        # every older revision after the cursor too (deleted keys came back in a
        # KV watch's initial values). Once they are done (all handed out, none to
        # begin with, or the last message handed out had nothing pending after it:
        # some were removed before delivery), a reset starts at cursor + 1, as for
        # any policy: "last per subject" again would deliver only the latest
        # revision of each key, and the updates in between would be lost.
        self._initial_end = 0
        self._skip_through = 0
        self._name: str | None = None
        self._info: ConsumerInfo | None = None
        self._mode: str | None = None
        self._active: _Busy | OrderedBatch | None = None
        self._needs_reset = False
        #: Set by a reader that gave up on a server not answering in its time: the
        #: close sends the delete without waiting for its answer (it took up to 2 s
        #: more than the caller's timeout; the consumer goes at its inactive
        #: threshold anyway if the server never reads it).
        self.quick_close = False
        #: A reset whose creation failed and is being retried (None otherwise).
        self._resetting: _ResetState | None = None
        #: When the first consumer was created (the server's clock): a stream created
        #: after it is not the one read so far (see _same_stream).
        self._origin: datetime | None = None
        #: Resets for pulls nothing serves (see note_503) in a row with no answer
        #: between them, the cursor at the last, whether a pull was answered since
        #: (a message, a heartbeat, any status but a 503), and what the next reset
        #: waits first.
        self._lost_in_a_row = 0
        self._lost_at = -1
        self._answered = False
        self._lost_wait: tuple[float, JetStreamError] | None = None

    @property
    def _cursor(self) -> int:
        # Messages handed out from a run checked at its ends (see OrderedSource.take)
        # leave the last of them here: its sequence is parsed only when asked for.
        msg = self._cursor_msg
        if msg is not None and msg is not self._cursor_parsed:
            self._cursor_parsed = msg
            sequences = ack_sequences(msg._reply)
            if sequences is not None:  # else not a delivery (forged): the last one parsed
                self._cursor_value = sequences[0]
        return self._cursor_value

    def _handed_out(self, msg: Msg, stream_seq: int) -> None:
        """``msg`` (at ``stream_seq``) was handed out: the cursor is at it."""
        self._cursor_msg = self._cursor_parsed = msg
        self._cursor_value = stream_seq

    def note_503(self, error: JetStreamError) -> None:
        """The consumer's pulls got ``503`` although its look-up found it (a reset follows).

        The consumer is R1 and its node may be down (a meta leader answers the
        look-up from the consumer's assignment). Nothing may serve pulls at all
        though (an account importing the look-up but not the pulls): a reset
        whose pulls got no answer (no message, heartbeat or other status) before
        the next 503 is followed by the next after the reset backoff (1 s
        doubling to 10 s), not at once, or consumers are created and deleted in
        a tight loop. On a quiet stream an answered pull is progress too.
        """
        cursor = self._cursor
        if self._answered or cursor != self._lost_at:
            self._lost_in_a_row = 1
        else:
            self._lost_in_a_row += 1
        self._lost_at, self._answered = cursor, False
        if self._lost_in_a_row > 1:
            delay = min(RESET_BACKOFF_FIRST * 2 ** (self._lost_in_a_row - 2), RESET_BACKOFF_MAX)
            self._lost_wait = (delay, error)

    def _initial_done(self) -> bool:
        """Whether the current "last per subject" consumer's initial values are all done.

        True for other policies. See ``_initial_end``.
        """
        if self._expected - 1 >= self._initial_end:
            return True
        last = self._cursor_msg
        if last is None or self._expected == 1:
            return False
        # The last message handed out had nothing pending after it: what was not
        # delivered of the initial values was removed. (A message handed out by an
        # earlier consumer never reads 0 here: that reset would have seen it.)
        try:
            return last.metadata.num_pending == 0
        except NotJetStreamMessageError:
            return False

    # ------------------------------------------------------------- consumers

    def _consumer_config(self) -> ConsumerConfig:
        cfg = self._config
        self._serial += 1
        fields: dict[str, object] = {
            "name": f"{self._prefix}_{self._serial}",
            "ack_policy": AckPolicy.NONE,
            "max_deliver": 1,
            # 0 is the default, as in nats.go (sent as is, the server took 5 s).
            "inactive_threshold": cfg.inactive_threshold or DEFAULT_INACTIVE_THRESHOLD,
            "num_replicas": 1,
            "mem_storage": True,
            "replay_policy": cfg.replay_policy,
            "headers_only": cfg.headers_only or None,
            "metadata": cfg.metadata,
        }
        subjects = cfg.filter_subjects or []
        if len(subjects) == 1:
            fields["filter_subject"] = subjects[0]
        elif subjects:
            fields["filter_subjects"] = subjects
        after = self._cursor or self._floor
        initial_done = self._initial_done()
        if (
            after is None
            and initial_done
            and self._info is not None
            and cfg.deliver_policy is DeliverPolicy.LAST_PER_SUBJECT
        ):
            # Nothing handed out and no initial values left: every message the filter
            # takes now was stored after the consumer was created.
            after = 0
        if after is not None and initial_done:
            fields["deliver_policy"] = DeliverPolicy.BY_START_SEQUENCE
            fields["opt_start_seq"] = after + 1
        else:
            self._skip_through = self._cursor
            fields["deliver_policy"] = cfg.deliver_policy
            if cfg.deliver_policy is DeliverPolicy.LAST_PER_SUBJECT and not subjects:
                # The server wants a filter for it (10094), as nats.go does: every subject.
                fields["filter_subject"] = ">"
            fields["opt_start_seq"] = cfg.opt_start_seq
            fields["opt_start_time"] = cfg.opt_start_time
        return ConsumerConfig(**{k: v for k, v in fields.items() if v is not None})

    async def _delete_current(self, deadline: float | None = None) -> None:
        """Delete the current consumer, and the ones of a reset in progress.

        A reset cut short (its caller cancelled while the creation's reply was on
        its way, a watcher's start out of time) may have created its consumer
        unseen: its name (kept for the retries) is deleted too, as is the
        consumer it replaces (deleted only once the new one exists), and the
        reset dropped. Any "not found" is fine.
        """
        names = []
        name, self._name = self._name, None
        if name is not None:
            names.append(name)
        state, self._resetting = self._resetting, None
        if state is not None:
            for other in (state.config.name, state.old):
                if other is not None and other != name:
                    names.append(other)
        if not names:
            return
        creating = state.creating if state is not None else None
        if creating is not None and not creating.done() and self._api.conn.is_down:
            # Between connections its request either waits for the reconnect (not sent:
            # sent after it, it would follow the delete queued below and create the
            # consumer for good) or was sent before the connection dropped (the queued
            # delete follows it). Either way it goes no further.
            creating.cancel()
            creating = None
        if creating is None or creating.done():
            await self._delete_all(names, deadline)
            return
        # Its creation is still on its way: the server's API workers may serve the
        # delete first ("not found"), and then create the consumer. Once the creation
        # is answered (or timed out), such a consumer is deleted again.
        if self.quick_close and state is not None:
            # Not waited for (the server does not answer in the caller's time): the
            # delete is queued now and again once the creation is answered or timed
            # out (a consumer left for its inactive threshold: 6 in 80 reads).
            await self._delete_all(names, deadline)
            again = state.config.name
            if again is not None:
                creating.add_done_callback(lambda _: self._queue_delete(again))
            return
        missing: set[str] = set()
        await self._delete_all(names, deadline, missing)
        if state is not None and state.config.name in missing:
            # (Its request's own timeout, at most the API's, bounds it.)
            wait = self._api.timeout
            if deadline is not None:
                wait = min(wait, max(deadline - asyncio.get_running_loop().time(), 0.25))
            await asyncio.wait({creating}, timeout=wait)
            await self._delete_all([state.config.name], deadline)

    async def _delete_all(
        self, names: list[str], deadline: float | None, missing: set[str] | None = None
    ) -> None:
        """Delete the consumers ``names``, each bounded as :meth:`_delete_current` says.

        The names the server did not find are added to ``missing``.
        """
        conn = self._api.conn
        if conn.is_down or self.quick_close:
            # Queued, not awaited: sent after the reconnect, so a close during an outage
            # neither waits for it nor leaves the consumer for inactive_threshold. (No
            # request is written between connections, and a creation waiting for the
            # reconnect was cancelled: none can follow the delete.)
            for name in names:
                subject = self._api.subject(
                    _api.CONSUMER_DELETE, stream=self._stream, consumer=name
                )
                try:
                    await conn.publish(subject, b"", reply=conn.new_inbox())
                except JetStreamError as exc:  # the reconnect buffer is full
                    logger.debug("could not queue the delete of consumer %s: %s", name, exc)
            return
        # Bounded: a close must not wait long for the API (nor a fetch past its deadline).
        timeout = min(self._api.timeout, DELETE_TIMEOUT)
        if deadline is not None:
            timeout = min(timeout, max(deadline - asyncio.get_running_loop().time(), 0.25))
        await asyncio.gather(*(self._delete(n, timeout, missing) for n in names))

    def _queue_delete(self, name: str) -> None:
        """Queue the delete of consumer ``name`` without waiting for its answer."""
        conn = self._api.conn
        subject = self._api.subject(_api.CONSUMER_DELETE, stream=self._stream, consumer=name)
        try:
            conn.publish_nowait(subject.encode(), b"", conn.new_inbox().encode())
        except JetStreamError as exc:  # closed meanwhile, or the reconnect buffer is full
            logger.debug("could not queue the delete of consumer %s: %s", name, exc)

    async def _delete(self, name: str, timeout: float, missing: set[str] | None = None) -> None:
        try:
            await C.delete_consumer(self._api, self._stream, name, timeout)
        except ConsumerNotFoundError:
            if missing is not None:
                missing.add(name)
            return  # gone already: what the delete was for
        except JetStreamError as exc:
            # Ephemeral: it disappears after inactive_threshold anyway.
            logger.debug("could not delete ordered consumer %s: %s", name, exc)

    async def _reset(
        self, stop: asyncio.Event | None = None, deadline: float | None = None
    ) -> None:
        """Create the next consumer at ``cursor + 1``, then delete the current one.

        In that order: on an interest-retention stream, deleting the last consumer
        first let the server drop every message after the cursor (the ones the
        old consumer had delivered but were not handed out are gone either way:
        ``AckPolicy.NONE``). When the stream allows no further consumer
        (``max_consumers``), the old one is deleted first after all.

        A failed creation is retried with backoff; the reset (its consumer name,
        attempts and backoff) carries over to the next call when a call gives up
        on it, so ``max_reset_attempts`` counts across calls.

        With ``stop``: once it is set, give up (no consumer) instead of retrying.
        With ``deadline`` (a loop time; a fetch's end): each attempt waits at most
        until then, and when the next retry would come after it, the call waits
        until the deadline and raises :class:`OutOfTime` carrying the last error.
        """
        loop = asyncio.get_running_loop()
        state = self._resetting
        if state is None:
            # One name per reset, kept across its retries: an attempt whose answer was
            # lost (timeout, reconnect) may have created the consumer, and creating it
            # again with the same name and config returns it instead of leaving it
            # behind (as nats.go). The current one is deleted once it exists.
            old, self._name = self._name, None
            state = self._resetting = _ResetState(self._consumer_config(), old)
            if self._lost_wait is not None:
                delay, state.error = self._lost_wait
                self._lost_wait = None
                state.retry_at = loop.time() + delay
        limit = self._config.max_reset_attempts
        while True:
            wait_until = state.retry_at
            out_of_time = deadline is not None and wait_until >= deadline
            if out_of_time:
                assert deadline is not None
                wait_until = deadline
            if wait_until > loop.time():
                try:
                    stopped = await self._pause(wait_until - loop.time(), stop)
                except ConnectionClosedError:
                    self._resetting = None
                    raise
                if stopped:
                    return
            if out_of_time:
                assert state.error is not None
                raise OutOfTime(state.error)
            state.attempts += 1
            timeout = None
            if deadline is not None:
                timeout = min(self._api.timeout, max(deadline - loop.time(), MIN_EXPIRES))
            try:
                # In a task of its own: a caller cancelled meanwhile leaves the request
                # waiting for its answer, so that a delete sent on closing can tell when
                # the consumer may exist (see _delete_current).
                creating = state.creating = asyncio.ensure_future(
                    C.upsert_consumer(
                        self._api, self._stream, state.config, C.ACTION_CREATE, timeout
                    )
                )
                creating.add_done_callback(_retrieved)
                info = await asyncio.shield(creating)
                if self._origin is not None:
                    if deadline is not None:
                        timeout = min(self._api.timeout, max(deadline - loop.time(), MIN_EXPIRES))
                    await self._same_stream(info, timeout)
            except (StreamNotFoundError, ConnectionClosedError, InvalidOptionError):
                self._resetting = None
                raise
            except JetStreamError as exc:
                old = state.old
                if old is not None and getattr(exc, "err_code", None) == _MAX_CONSUMERS:
                    # No slot for the new one next to the old one (max_consumers): the
                    # old one goes first after all, and the creation is tried again.
                    state.old = None
                    state.attempts -= 1
                    await self._delete_all([old], deadline)
                    continue
                if self._info is None and getattr(exc, "code", None) == 400:
                    # The first creation, refused as a bad request (a configuration the
                    # server does not take, no consumer slot left): the caller's to fix,
                    # not a fault to wait out (as nats.go's ordered consumer does).
                    self._resetting = None
                    raise
                if limit is not None and state.attempts >= limit:
                    self._resetting = None
                    if state.old is not None:
                        await self._delete_all([state.old], deadline)
                    raise OrderedConsumerResetError(
                        "could not recreate the ordered consumer after "
                        f"{state.attempts} attempts: {exc}"
                    ) from exc
                state.error = exc
                state.retry_at = loop.time() + state.delay
                logger.info(
                    "ordered consumer reset failed (%s); retrying in %g s", exc, state.delay
                )
                state.delay = min(state.delay * 2, RESET_BACKOFF_MAX)
                continue
            self._resetting = None
            if self._origin is None:
                self._origin = info.created
            self._info = info
            self._name = info.name
            self._expected = 1
            self._needs_reset = False
            lps = state.config.deliver_policy is DeliverPolicy.LAST_PER_SUBJECT
            self._initial_end = info.num_pending if lps else 0
            if self._floor is None and self._config.deliver_policy in _FROM_THE_END:
                # Where "new" or "last" started: a consumer recreated before the first
                # message starts there too, not at the end again (that skipped what
                # was stored in between).
                self._floor = info.delivered.stream_seq
            if state.old is not None:
                try:
                    await self._delete_all([state.old], deadline)
                except asyncio.CancelledError:
                    # The new consumer is in place: the old one must not linger for
                    # inactive_threshold because the caller was cancelled now.
                    close_in_background(self._delete_all([state.old], None))
                    raise
            return

    async def _same_stream(self, info: ConsumerInfo, timeout: float | None) -> None:
        """Check that the consumer just recreated reads the stream read so far.

        A stream deleted and created again between two consumers (a KV bucket
        or object store deleted and created again while a watch's connection
        was down, or at once) would be read on from ``cursor + 1`` of the new
        stream, silently skipping its first messages. A stream's creation time
        does not change (restarts, updates): one other than the handle's is
        another stream. The handle's may be older than the reader (a stream
        created again before the reader's first consumer): then only a stream
        created after that consumer is another one (both stamped by the
        server's clock; the meta leader's in a cluster). Without the handle's,
        that comparison alone.

        Raises:
            StreamNotFoundError: the stream was deleted and created again (the
                consumer just created on it is deleted first, best effort).

        """
        assert self._origin is not None
        stream = await self._api.call_model(
            _api.STREAM_INFO, StreamInfo, timeout=timeout, stream=self._stream
        )
        known = self._stream_created
        if known is not None and stream.created == known:
            return
        if stream.created <= self._origin:
            self._stream_created = stream.created  # the handle's was older than the reader
            return
        self._name = info.name
        await self._delete_current()
        error = StreamNotFoundError(
            404,
            10059,
            f"stream {self._stream!r} was deleted and created again (at {stream.created}) "
            "while the ordered consumer read it: the messages it read are gone, and the "
            "new stream's sequences start over",
        )
        error.stream = self._stream
        raise error

    async def _pause(self, seconds: float, stop: asyncio.Event | None) -> bool:
        """Wait ``seconds`` (until ``stop`` is set, with one); True when stopped.

        The connection closing for good ends the wait too (a reset's backoff lasts
        up to 10 s: the reader ended that much after ``close()``).

        Raises:
            ConnectionClosedError: the connection is closed.

        """
        conn = self._api.conn
        closed = _Closed(conn)
        if not closed.event.is_set():
            conn.add_listener(closed)
            waits = [asyncio.ensure_future(closed.event.wait())]
            if stop is not None:
                waits.append(asyncio.ensure_future(stop.wait()))
            try:
                await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            finally:
                conn.remove_listener(closed)
                for waiter in waits:
                    waiter.cancel()
        if stop is not None and stop.is_set():
            return True
        if closed.event.is_set():
            raise conn.closed_error("the connection was closed")
        return False

    def _accept(self, msg: Msg) -> bool | None:
        """True if ``msg`` is the next one in order (and advance); False on a gap.

        None: in order, but handed out before a reset (skip it). A stream
        sequence not above the cursor's, other than that, is a gap too: a
        server never delivers one (it would be handed out a second time).
        """
        stream_seq = next_in_order(msg, self._expected)
        if stream_seq < 0:
            self._needs_reset = True
            return False
        self._expected += 1
        if stream_seq > self._cursor:
            self._handed_out(msg, stream_seq)
            return True
        if stream_seq <= self._skip_through:
            return None
        self._needs_reset = True
        return False

    def _driver(self, settings: PullSettings, error_handler: ErrorHandler | None) -> PullDriver:
        name = self._name
        assert name is not None
        info = self._info
        if info is not None:  # (the server's limits, given to a consumer created without)
            config = info.config
            expires = config.max_expires
            settings = paced(
                fit_to_limits(
                    settings,
                    config.max_batch,
                    config.max_bytes,
                    expires.total_seconds() if expires is not None else None,
                ),
                config.replay_policy,
            )

        async def check(timeout: float | None) -> ConsumerInfo:
            try:
                info = await C.consumer_info(self._api, self._stream, name, timeout)
            except (ConsumerNotFoundError, StreamNotFoundError, ConnectionClosedError):
                raise
            except JetStreamError as exc:
                # Unanswered (a timeout, no responders) or refused: the consumer is R1
                # and in memory, so when its node is down or lost it, the look-up never
                # says "not found", it just fails, for as long as the node is away (for
                # ever if it never returns). Taken as lost: the run ends, and the reset
                # recreates it at cursor + 1 (with its own backoff while JetStream
                # is unavailable), as nats.go resets on a reconnect or no responders.
                logger.info(
                    "ordered consumer on %s: could not look up consumer %s (%s); resetting",
                    self._stream,
                    name,
                    exc,
                )
                raise ConsumerDeletedError(
                    f"ordered consumer {name!r} could not be looked up ({exc}): taken as lost"
                ) from exc
            if self._name == name and not self._needs_reset:
                # After a reconnect (the check comes before any new pull), what the
                # consumer delivered on the old connection and did not arrive is lost:
                # reset now rather than at the next heartbeat (15 s; a one-shot read
                # gave up first with a false timeout). As nats.go resets on a reconnect.
                received = self._expected - 1 + driver.buffered
                if info.delivered.consumer_seq > received:
                    raise ConsumerDeletedError(
                        f"ordered consumer {name!r}: the server delivered up to consumer "
                        f"sequence {info.delivered.consumer_seq}, {received} arrived: "
                        "taken as lost"
                    )
            return info

        driver = PullDriver(
            self._api, self._stream, name, settings, check, error_handler, acks=False
        )  # (AckPolicy.NONE)
        driver.on_heartbeat = functools.partial(self._on_heartbeat, driver)
        driver.on_answer = self._on_answer
        return driver

    def _on_answer(self) -> None:
        self._answered = True

    def _on_heartbeat(self, driver: PullDriver, last_delivered: int) -> None:
        """A heartbeat names the consumer sequence the server delivered last.

        Messages and heartbeats of one consumer reach the inbox in order, so
        everything up to it has arrived: the ones handed out (``expected - 1``)
        and the ones still buffered. More means a message was lost on the way
        (say in a reconnect) with nothing after it to reveal the gap: reset now
        rather than when (if ever) the next message comes.
        """
        if self._needs_reset or self._name != driver.consumer:
            return
        received = self._expected - 1 + driver.buffered
        if last_delivered > received:
            logger.info(
                "ordered consumer on %s: the server delivered up to consumer sequence %d, "
                "%d arrived; resetting",
                self._stream,
                last_delivered,
                received,
            )
            self._needs_reset = True
            driver.stop()

    def _check_mode(self, mode: str) -> None:
        if self._mode is not None and self._mode != mode:
            used, other = (
                ("fetch", "messages/consume")
                if self._mode == "fetch"
                else ("messages/consume", "fetch")
            )
            raise InvalidOptionError(
                f"this ordered consumer is used with {used}; it can not also use {other} "
                "(create another ordered consumer)"
            )

    def _claim(self, mode: str) -> None:
        self._check_mode(mode)
        active = self._active
        if active is not None and not active.done:
            raise InvalidOptionError("an ordered consumer runs one operation at a time")
        self._mode = mode
        self._active = _Busy()

    def _release(self) -> None:
        self._active = None

    # ------------------------------------------------------------- fetch

    async def _start_fetch(
        self, settings: PullSettings, deadline: float, resets: bool = True
    ) -> OrderedBatch:
        """Start a fetch; a reset it needs first is bounded by ``deadline``.

        ``resets``: the batch recreates a consumer found gone before it handed
        anything out (False for ``next()``, which does so itself).

        Raises :class:`OutOfTime` when it could not recreate the consumer by then.
        """
        self._claim("fetch")
        try:
            if self._name is None or self._needs_reset:
                await self._reset(deadline=deadline)
                if not settings.no_wait:
                    # The pull gets what the recreation left of the fetch's time.
                    settings = shortened(settings, deadline - asyncio.get_running_loop().time())
            driver = self._driver(settings, None)
            await driver.start()
        except BaseException:
            self._release()
            raise
        batch = OrderedBatch(self, driver, settings, deadline, resets)
        self._active = batch
        return batch


class _Busy:
    """Marks a messages/consume run in progress."""

    done = False


class OrderedBatch(C.MessageBatch):
    """The messages of one ordered fetch; ends early at a gap (the next fetch resets).

    Messages skipped as handed out before a reset (see ``_skip_through``) took
    room in the pull: when it ends, they are pulled for again, within the
    fetch's time, so a fetch is not cut short (nor ``next()`` left empty) by them.
    A pull that ends at a gap or with the consumer gone before any message was
    handed out recreates the consumer and pulls again, within the fetch's
    time: an empty batch means nothing came, not "the consumer was gone".
    """

    __slots__ = (
        "_deadline",
        "_owner",
        "_renewing",
        "_resets",
        "_settings",
        "_skipped",
        "_skipped_bytes",
    )

    def __init__(
        self,
        owner: OrderedCursor,
        driver: PullDriver,
        settings: PullSettings,
        deadline: float,
        resets: bool = True,
    ) -> None:
        super().__init__(driver)
        self._owner = owner
        self._settings = settings
        self._deadline = deadline
        self._skipped = 0
        self._skipped_bytes = 0
        # Whether a pull that ends with the consumer gone recreates it and pulls again:
        # until a message is handed out (by __anext__), and not for next() (it does).
        self._resets = resets
        #: Renewing its pull (a reset, or a pull for skipped messages): not done, so
        #: that no other operation starts meanwhile (one at a time).
        self._renewing = False

    def _accept(self, msg: Msg) -> bool | None:
        accepted = self._owner._accept(msg)
        if accepted is None:
            self._skipped += 1
            self._skipped_bytes += msg.size
        return accepted

    async def _pull_again(self) -> bool:
        """Pull for what skipped messages took of the pull (False when there is nothing to)."""
        skipped, nbytes = self._skipped, self._skipped_bytes
        self._skipped = self._skipped_bytes = 0
        driver = self._driver
        if not skipped or self._owner._needs_reset or driver.error is not None:
            return False
        settings = self._settings
        if not settings.no_wait:
            left = self._deadline - asyncio.get_running_loop().time()
            if left < MIN_EXPIRES:
                return False
            settings = shortened(settings, left)
        if settings.max_bytes:
            settings = replace(settings, max_bytes=nbytes)
        else:
            settings = replace(settings, max_messages=skipped)
        self._renewing = True
        try:
            await driver.aclose()
            follow = self._owner._driver(settings, None)
            await follow.start()
            self._driver = follow
        finally:
            self._renewing = False
        return True

    async def _reset_and_pull(self) -> bool:
        """:meth:`_renew` (see there), the batch not done meanwhile."""
        self._renewing = True
        try:
            return await self._renew()
        finally:
            self._renewing = False

    async def _renew(self) -> bool:
        """Recreate the consumer and pull again, within the fetch's time (False: no time).

        For a pull that ended before any message was handed out, at a gap or
        with the consumer gone (deleted, expired after ``inactive_threshold``,
        lost in a restart): the fetch came back empty at once though messages
        were waiting, and a loop reading until an empty batch stopped early
        (nats.go recreates the consumer in every fetch).

        Raises:
            JetStreamError: the recreation failed and its next retry comes after
                the fetch's end (its error, as for a fetch that starts with a reset).

        """
        owner = self._owner
        owner._needs_reset = True
        await self._driver.aclose()
        loop = asyncio.get_running_loop()
        if loop.time() >= self._deadline:
            return False
        try:
            await owner._reset(deadline=self._deadline)
        except OutOfTime as out:
            raise out.error from out.error.__cause__
        settings = self._settings
        if not settings.no_wait:
            left = self._deadline - loop.time()
            if left < MIN_EXPIRES:
                # Too little left for a pull that waits: what is there now, at once.
                settings = replace(settings, no_wait=True, heartbeat=0.0)
            else:
                settings = shortened(settings, left)
        self._skipped = self._skipped_bytes = 0
        follow = owner._driver(settings, None)
        await follow.start()
        self._driver = follow
        return True

    def _gone(self, driver: PullDriver) -> None:
        """``driver``'s pull ended with its consumer gone: the next fetch recreates it.

        Unless it was recreated already (by :meth:`_reset_and_pull`, out of time).
        """
        owner = self._owner
        if owner._name == driver.consumer:
            owner._needs_reset = True

    @property
    def done(self) -> bool:
        """True once the pull ended and every message was read.

        Not while the batch renews its pull, nor when its pull ended with the
        consumer gone before anything was handed out: reading on recreates it
        and pulls again (meanwhile another operation would start beside it).
        """
        driver = self._driver
        if self._renewing or not driver.finished or driver.buffered:
            return False
        return not (self._resets and isinstance(driver.error, RESETTABLE))

    async def __anext__(self) -> Msg:
        while True:
            driver = self._driver
            try:
                msg = await driver.next_msg()
            except RESETTABLE as exc:
                if isinstance(exc, NoRespondersError):
                    self._owner.note_503(exc)
                msg = accepted = None
                reset = True
            except BaseException:
                await self.aclose()
                raise
            else:
                accepted = None if msg is None else self._accept(msg)
                if accepted:
                    assert msg is not None
                    self._resets = False
                    return msg
                reset = accepted is False
            try:
                if reset:
                    if self._resets and await self._reset_and_pull():
                        continue
                    self._gone(driver)
                    if self._resets and isinstance(driver.error, NoRespondersError):
                        # Out of time to recreate it: nothing came because of the 503,
                        # which an empty batch would hide ("nothing is there").
                        await self.aclose()
                        raise driver.error
                elif msg is None and await self._pull_again():
                    continue
            except BaseException:
                self._owner._needs_reset = True
                await self.aclose()
                raise
            if reset or msg is None:
                await self.aclose()
                raise StopAsyncIteration

    async def collect(self) -> list[Msg]:
        """The fetch's messages at once, up to the first gap (see :meth:`MessageBatch.collect`).

        Raises:
            JetStreamError: the fetch ended with this error and no message is
                left to return (the next call raises it after a partial return).

        """
        out: list[Msg] = []
        owner = self._owner
        while True:
            driver = self._driver
            try:
                await driver.wait_finished()
            except BaseException:
                await self.aclose()
                raise
            raw: list[Msg] = []
            while (msg := driver.take()) is not None:
                raw.append(msg)
            try:
                await driver.aclose()
            except BaseException:
                # Taken but not accepted: the cursor stays, the next fetch resets to it.
                owner._needs_reset = True
                await self.aclose()
                raise
            accept = self._accept
            gap = False
            for msg in raw:
                accepted = accept(msg)
                if accepted is None:
                    continue
                if not accepted:
                    gap = True  # the next fetch resets (this one, if nothing came)
                    break
                out.append(msg)
            gone = gap or isinstance(driver.error, RESETTABLE)
            if isinstance(driver.error, NoRespondersError):
                owner.note_503(driver.error)
            try:
                if gone:
                    if not out and self._resets and await self._reset_and_pull():
                        continue
                elif await self._pull_again():
                    continue
            except BaseException:
                owner._needs_reset = True  # the next fetch starts afresh at the cursor
                await self.aclose()
                if out:
                    return out
                raise
            break
        await self.aclose()
        if gone:
            if not gap:
                self._gone(driver)
            if not out and self._resets and isinstance(driver.error, NoRespondersError):
                raise driver.error  # out of time to recreate it (see __anext__)
            return out
        error = driver.error
        if error is None or out:
            return out  # the driver keeps the error: the next call raises it
        raise error

    async def aclose(self) -> None:
        """End the fetch (idempotent).

        Closed before its end (or with messages unread), the fetch drops what the
        server already delivered: the next fetch then restarts at the cursor. So
        does one that ended with an error: a disconnect loses what was on its
        way (the consumer counts it delivered, and the next fetch of the same
        consumer skipped it without a word: 44 of 60 messages).
        """
        driver = self._driver
        if not driver.finished or driver.buffered or driver.error is not None:
            self._owner._needs_reset = True
        await driver.aclose()
        if self._owner._active is self:
            self._owner._release()

    def _end_now(self) -> None:
        """End the fetch without waiting (as :meth:`aclose`; the unsubscribe runs in a task).

        For ``next()``, once it took its message: no cancellation can come
        between the take (the cursor is past the message) and its return.
        """
        driver = self._driver
        if not driver.finished or driver.buffered or driver.error is not None:
            self._owner._needs_reset = True
            driver.stop()
        if self._owner._active is self:
            self._owner._release()
        close_in_background(driver.aclose())


class OrderedSource:
    """A :class:`MessageSource` that survives consumer resets (for messages / consume)."""

    def __init__(
        self,
        owner: OrderedCursor,
        settings: PullSettings,
        error_handler: ErrorHandler | None,
    ) -> None:
        self._owner = owner
        self._settings = settings
        self._user_handler = error_handler
        self._driver: PullDriver | None = None
        self._stopped = False
        self._draining = False
        self._closed = False
        #: The close aclose() started, in a task of its own (see aclose).
        self._closing: asyncio.Task[None] | None = None
        self._ending = asyncio.Event()  # set by stop, drain and aclose: a reset gives up
        self._tasks: set[asyncio.Task[None]] = set()
        #: Buffered messages, from the driver's first on, known to be next in order.
        self._in_order = 0
        # Tasks sharing one messages() wait in next_msg one at a time: two resetting
        # the consumer at once each made one (duplicates, a consumer left behind).
        self._reading = asyncio.Lock()
        #: The claim this source's start took (None: it took none, say refused while
        #: another messages() runs; closing it then must leave that one's consumer be).
        self._claim_token: _Busy | None = None

    async def start(self) -> None:
        """Claim the ordered consumer, create its first consumer and start pulling."""
        owner = self._owner
        owner._claim("consume")
        token = owner._active
        assert isinstance(token, _Busy)
        self._claim_token = token
        try:
            await self._restart()
        except BaseException:
            owner._release()
            raise

    async def _restart(self) -> None:
        self._in_order = 0
        if self._driver is not None:
            await self._driver.aclose()
            self._driver = None
        await self._owner._reset(self._ending)
        if self._ending.is_set():
            # Stopped, drained or closed meanwhile (by another task): start nothing,
            # and delete what the reset may have created if nobody else will.
            if self._closed:
                await self._owner._delete_current()
            return
        driver = self._owner._driver(self._settings, self._on_report)
        self._driver = driver
        await driver.start()

    def _on_report(self, error: JetStreamError) -> None:
        if isinstance(error, (NoHeartbeatError, NoRespondersError)) and self._driver is not None:
            # Missed heartbeats, or pulls nothing serves although the consumer is
            # found (see RESETTABLE): do not trust this consumer any more.
            if isinstance(error, NoRespondersError):
                self._owner.note_503(error)
            self._owner._needs_reset = True
            self._driver.stop()
        self.report(error)

    def report(self, error: JetStreamError) -> None:
        """Hand an error to the user's error handler (or log it)."""
        if self._user_handler is None:
            logger.warning("ordered consumer on %s: %s", self._owner._stream, error)
            return
        try:
            result = self._user_handler(error)
        except Exception:
            logger.exception("error_handler raised")
            return
        if asyncio.iscoroutine(result):
            spawn_error_handler(self, result, self._tasks)

    def take(self) -> Msg | None:
        """A buffered in-order message, without waiting (None at a gap or when empty).

        The buffer is checked a run at a time: when its first message has the
        next consumer sequence and its last the one ``count - 1`` further (and
        their stream sequences go up from the cursor's), the ``count``
        messages are in order, and are handed out without parsing each one's
        reply subject. The server numbers a consumer's deliveries
        1, 2, 3, ...: only a reset of the consumer through the API (by
        another client) numbers them from 1 again, which alone makes the ends
        disagree; with exactly as many messages lost as it set back, in one
        run, it would go unnoticed (docs/consumers.md). Otherwise (one
        message, a gap somewhere, skipping what a reset handed out before)
        each message is checked on its own.
        """
        driver = self._driver
        owner = self._owner
        if driver is None or owner._needs_reset:
            return None
        while True:
            if not self._in_order and not owner._skip_through:
                self._in_order = _run_in_order(driver, owner)
            if self._in_order:
                msg = driver.take()
                if msg is not None:
                    self._in_order -= 1
                    owner._expected += 1
                    owner._cursor_msg = msg
                    return msg
                self._in_order = 0
            msg = driver.take()
            if msg is None:
                return None
            # owner._accept(msg), inlined: this runs for every message.
            stream_seq = next_in_order(msg, owner._expected)
            if stream_seq < 0:
                owner._needs_reset = True
                driver.stop()
                return None
            owner._expected += 1
            cursor = owner._cursor_value
            if owner._cursor_msg is not owner._cursor_parsed:
                cursor = owner._cursor  # the last of a run handed out unparsed
            if stream_seq > cursor:
                # owner._handed_out(msg, stream_seq), inlined
                owner._cursor_msg = owner._cursor_parsed = msg
                owner._cursor_value = stream_seq
                return msg
            if stream_seq > owner._skip_through:
                # Not above the cursor: a server never delivers it again (a gap).
                owner._needs_reset = True
                driver.stop()
                return None

    async def next_msg(self) -> Msg | None:
        """The next in-order message, resetting the consumer as needed.

        Tasks sharing the source take turns here (one waits or resets at a time).
        """
        self._owner._api.conn.refuse_outside()  # (a lock and tasks of another loop)
        async with self._reading:
            return await self._next_msg()

    async def _next_msg(self) -> Msg | None:
        self._in_order = 0  # each message it takes is checked on its own
        while True:
            if self._stopped or self._closed:
                return None
            driver = self._driver
            if driver is None and self._draining:
                return None  # drained during a reset: nothing is buffered
            if driver is None or (self._owner._needs_reset and not self._draining):
                await self._restart()
                continue
            try:
                msg = await driver.next_msg()
            except RESETTABLE as exc:
                self._in_order = 0
                if self._draining:
                    return None
                if isinstance(exc, NoRespondersError):
                    self._owner.note_503(exc)
                self._owner._needs_reset = True
                continue
            # Another task's take() may have counted a run meanwhile, of which this
            # message was the first: that count is one too many now (its last message
            # would go unchecked), so the run is checked one by one again.
            self._in_order = 0
            if msg is None:
                if self._owner._needs_reset and not self._draining:
                    continue
                return None
            accepted = self._owner._accept(msg)
            if accepted:
                return msg
            if accepted is False:
                driver.stop()

    def outside(self) -> bool:
        """Whether the caller runs outside the connection's ended loop (see ``Conn.outside``)."""
        return self._owner._api.conn.outside()

    def stop(self) -> None:
        """Stop now."""
        self._stopped = True
        self._ending.set()
        if self._driver is not None:
            self._driver.stop()

    def drain(self) -> None:
        """Stop pulling; end once what is buffered (and in order) was handed out."""
        self._draining = True
        self._ending.set()
        if self._driver is not None:
            self._driver.drain()

    async def aclose(self) -> None:
        """Stop, and delete the server-side consumer (idempotent).

        Only a source whose start claimed the ordered consumer deletes it: one
        refused (another messages() or consume() runs) leaves that one's alone.
        One whose start failed after its claim (cancelled while creating the
        consumer) deletes what the creation may have left, unless another run
        holds the ordered consumer by then.

        The close runs in a task of its own: a caller cancelled meanwhile (a
        timeout around ``kv.history()``, a cancelled task leaving ``async
        with``) leaves it running to the delete, rather than leaving the
        consumer for its ``inactive_threshold`` with a pull waiting, and a
        second call waits for it.
        """
        closing = self._closing
        if closing is None:
            if self.outside():  # the loop ended: nothing of it runs (raises from a live one)
                self._closed = self._stopped = True
                return
            self._closed = True
            self._stopped = True
            self._ending.set()
            closing = self._closing = close_in_background(self._close())
        await asyncio.shield(closing)
        # The error handlers, unless called from one (it would wait for itself).
        if not in_error_handler(self):
            await wait_for_tasks(self._tasks)

    async def _close(self) -> None:
        if self._driver is not None:
            await self._driver.aclose()
        owner = self._owner
        token = self._claim_token
        if token is not None and owner._active in (None, token):
            await owner._delete_current()
            if owner._active is token:
                owner._release()


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark what a task raised as retrieved (its caller may have been cancelled meanwhile)."""
    if not task.cancelled():
        task.exception()


def _run_in_order(driver: PullDriver, owner: OrderedCursor) -> int:
    """How many buffered messages are next in order, checked at the run's two ends (0: unsure).

    The first must have the next consumer sequence and the last the one
    ``count - 1`` further: deliveries numbered one by one between them leave
    no room for a gap (see :meth:`OrderedSource.take` for the one case where
    they are not). The first's stream sequence must be above the cursor's and
    the last's above the first's (the server delivers them in order). A
    single message is left to the caller's own check.
    """
    count, first, last = driver.buffer_ends()
    if count < 2 or first is None or last is None:
        return 0
    expected = owner._expected
    first_seq = next_in_order(first, expected)
    if first_seq <= owner._cursor or next_in_order(last, expected + count - 1) <= first_seq:
        return 0
    return count

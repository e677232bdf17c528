"""What key-value and object-store listings and watches share: the reader and the watcher base.

A :class:`Reader` is an ordered consumer over a bucket's stream that tells when
the initial values were read (ADR-8); a :class:`Watcher` turns its events into
items (a key-value entry, an object info) and one ``None`` after the initial
ones. Both stores import this module; it imports neither of them.
"""

from __future__ import annotations

import asyncio
import enum
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Generic, Self, TypeVar

from ._cleanup import close_in_background, close_when_collected
from ._errors import (
    BucketNotFoundError,
    ClusterUnavailableError,
    JetStreamError,
    JetStreamTimeoutError,
    MessageNotFoundError,
    StreamNotFoundError,
)
from ._message import Msg
from ._models import (
    DeliverPolicy,
    OrderedConsumerConfig,
)
from ._stream import Stream

if TYPE_CHECKING:
    from ._consumer import MessagesContext
    from ._ordered import OrderedConsumer

#: Seconds without a message after which a listing asks the server whether it is
#: already past the initial values (they may have expired before delivery).
IDLE_CHECK: Final = 1.0
#: The start policies that read the stored values first (see Reader._behind_leader).
_FROM_THE_START: Final = frozenset((DeliverPolicy.ALL, DeliverPolicy.LAST_PER_SUBJECT))
#: How many filters' last messages a reader asks the stream's leader for at once.
LEADER_GETS_AT_ONCE: Final = 64
#: The heartbeat of a watcher's (and listing's) pulls: a watcher whose consumer
#: died with its node is reset after 2 x this of silence (the ``messages()``
#: default, half of the 30 s expiry, took 30 s; nats.go's ordered consumers use 5 s).
WATCH_HEARTBEAT: Final = 5.0


def bucket_gone(stream_name: str) -> BucketNotFoundError:
    """The error for a bucket whose backing stream is gone (raised from StreamNotFoundError)."""
    kind, _, bucket = stream_name.partition("_")
    what = "object store" if kind == "OBJ" else "bucket"
    return BucketNotFoundError(f"{what} {bucket!r} not found", bucket)


# --------------------------------------------------------------------------- reading


class ReaderEvent(enum.Enum):
    """What :meth:`Reader.next` returns besides a message."""

    CAUGHT_UP = enum.auto()  # every message present when the read started was handed out
    END = enum.auto()  # the reader was closed


async def enter_within(oc: OrderedConsumer, it: MessagesContext, bound: float) -> bool:
    """Enter ``it`` (``oc``'s messages) within ``bound`` seconds; False when out of time.

    Out of time, the server did not answer: the entry is cancelled, and its
    clean-up sends the consumer's delete without waiting for an answer
    (``quick_close``): a ``wait_for`` cancelled it first, and the clean-up
    waited up to 2 s more for a delete the server would not answer either.
    """
    entering = asyncio.ensure_future(it.__aenter__())
    try:
        done, _ = await asyncio.wait({entering}, timeout=bound)
    except BaseException:
        entering.cancel()
        raise
    if done:
        entering.result()
        return True
    oc.quick_close = True
    entering.cancel()
    await asyncio.wait({entering})
    if not entering.cancelled():
        entering.exception()  # retrieved: its end is this timeout
    return False


class Reader:
    """An ordered consumer over a bucket that knows when the initial values were read.

    The end of the initial values is the first message with ``num_pending == 0``,
    or right away when the consumer had nothing pending when created (ADR-8);
    reading from the start, also the first message at or past the last sequence
    the stream's leader held when the read started (see :meth:`_behind_leader`).
    As a safety net for values removed between the consumer's creation and their
    delivery, after :data:`IDLE_CHECK` seconds without a message the consumer's
    info is checked: nothing pending and nothing undelivered is the end too.

    With ``stall`` (one-shot reads: keys, history), starting and every wait
    for an initial value are bounded: :class:`JetStreamTimeoutError` after
    ``stall`` seconds without progress. A watch (``stall=None``) waits forever
    for its messages, but its start is bounded by ``start_timeout`` (as nats.go's
    Watch fails when it can not create its consumer). A failed start leaves
    nothing running (the reader is closed); a deleted bucket (its stream gone)
    raises :class:`BucketNotFoundError`, when starting or reading, and closes
    the reader.
    """

    def __init__(
        self,
        stream: Stream,
        filters: list[str],
        deliver_policy: DeliverPolicy,
        headers_only: bool,
        stall: float | None = None,
        start_timeout: float | None = None,
    ) -> None:
        self._stream = stream
        self._stall = stall
        #: The longest wait for the consumer's creation: ``stall`` for a one-shot read
        #: (the caller's timeout), ``start_timeout`` for a watch (None: unbounded).
        self._start_timeout = start_timeout if stall is None else stall
        self._config = OrderedConsumerConfig(
            filter_subjects=filters, deliver_policy=deliver_policy, headers_only=headers_only
        )
        self._oc: OrderedConsumer | None = None
        self._it: MessagesContext | None = None
        self._task: asyncio.Task[Msg] | None = None
        self._starting: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self._announce = False
        self._closed = False
        self.caught_up = False
        #: The highest stream sequence read, and the last sequence of the filters the
        #: stream's leader held (None: not asked, or no answer; see _behind_leader).
        self._seen = 0
        self._target: int | None = None
        #: The last ask of the leader found none (said in a stall's error).
        self._leaderless = False

    async def start(self) -> None:
        """Create the consumer (BucketNotFoundError once the bucket is deleted).

        The creation runs in a task of its own: a caller cancelled meanwhile (a
        timeout on a watcher's first ``anext()``) leaves it running, and the
        next call waits for it (as :meth:`next` keeps its read). Once it ended,
        a call returns (or raises its error) at once.
        """
        task = self._starting
        if task is None:
            if self._closed:
                return
            task = self._starting = asyncio.ensure_future(self._start())
        if not task.done():
            await asyncio.wait({task})
        if task.cancelled():
            if self._closed:
                return  # closed meanwhile (aclose cancelled the start): next() ends
            await self.aclose()
            raise asyncio.CancelledError
        error = task.exception()
        if error is None:
            return
        # Nothing stays behind a failed start: the messages context (and with
        # it any retry of the consumer's creation) is stopped and closed.
        if isinstance(error, JetStreamTimeoutError):
            self._give_up()
        await self.aclose()
        if isinstance(error, StreamNotFoundError):
            # A bucket's backing stream is gone: the bucket was deleted.
            raise bucket_gone(self._stream.name) from error
        raise error

    def _give_up(self) -> None:
        """The server did not answer in the caller's time: the close does not wait for it."""
        if self._oc is not None:
            self._oc.quick_close = True

    async def _start(self) -> None:
        oc = await self._stream.ordered_consumer(self._config)
        it = oc.messages(heartbeat=WATCH_HEARTBEAT)
        self._oc, self._it = oc, it
        bound = self._start_timeout
        if bound is None:
            await it.__aenter__()
        else:
            if not await enter_within(oc, it, bound):
                raise JetStreamTimeoutError(
                    f"could not start reading stream {self._stream.name!r} within {bound:g} s"
                )
        behind = await self._behind_leader()  # (the target, asked once here)
        info = oc.cached_info
        if info is not None and info.num_pending == 0 and not behind:
            self.caught_up = True
            self._announce = True

    async def _behind_leader(self, *, again: bool = False) -> bool:
        """Whether the stream's leader held a message of the filters not read yet.

        The consumer says it has nothing more: nats-server places it (R1) on any
        of the stream's peers, and on one still catching up after its node
        restarted, it had nothing more while the leader held more: ``keys()``
        returned 0 of 301 keys and ``history()`` 1 of 3 entries, without an
        error. The leader answers a plain (not direct) get of the last message
        of each filter, once, when the read starts: that sequence is the target
        (asking on every message moved it with every write, and under steady
        writes the end never came: ``keys()`` never returned). ``again``: ask
        anew (the idle check: values removed since, a purge). Not for a read
        from the end (``updates_only``), and not when the leader does not answer
        (a timeout, a user not allowed the get: the consumer's word is taken
        then). While the stream has no leader (a member answers 503, "cluster
        not available") the read is behind: the consumer, on the only peer that
        answers, may have far less (``keys()`` returned 0 of 55 keys without an
        error); it is asked again at the next chance (and a one-shot read ends
        with its stall timeout).
        """
        config = self._config
        if config.deliver_policy not in _FROM_THE_START:
            return False
        if self._target is None or again:
            try:
                target = await self._leader_last(config.filter_subjects or ())
            except ClusterUnavailableError:
                self._leaderless = True
                return True
            self._leaderless = False
            if target is None:
                return False
            self._target = target
        return self._seen < self._target

    async def _leader_last(self, filters: Sequence[str]) -> int | None:
        """The last sequence of ``filters`` on the stream's leader (0: none), None unanswered.

        The filters are asked :data:`LEADER_GETS_AT_ONCE` at a time (a watch of
        many keys has a filter each).
        """
        wait = self._stall if self._stall is not None else IDLE_CHECK

        async def last_of(subject: str) -> int:
            try:
                return (await self._stream._api_get({"last_by_subj": subject}, wait)).seq
            except MessageNotFoundError:
                return 0

        last_seq = 0
        for at in range(0, len(filters), LEADER_GETS_AT_ONCE):
            chunk = filters[at : at + LEADER_GETS_AT_ONCE]
            found = await asyncio.gather(*map(last_of, chunk), return_exceptions=True)
            for seq in found:
                if isinstance(seq, ClusterUnavailableError):
                    raise seq  # no leader: not an answer to take the consumer's word on
                if isinstance(seq, JetStreamError):
                    return None
                if isinstance(seq, BaseException):
                    raise seq
                last_seq = max(last_seq, seq)
        return last_seq

    async def _idle_caught_up(self) -> bool:
        oc = self._oc
        assert oc is not None
        try:
            info = await oc.info()
        except JetStreamError:
            return False
        if info.num_pending:
            return False
        delivered = info.delivered.consumer_seq
        # Everything the consumer delivered was handed out (or skipped as handed out
        # before a reset: the ordered consumer counts those too).
        handed_out = delivered == 0 or (info.name == oc.name and oc._expected - 1 >= delivered)
        return handed_out and not await self._behind_leader(again=True)

    async def next(self) -> Msg | ReaderEvent:
        """The next message, ``CAUGHT_UP`` once (after the last initial message), or ``END``."""
        if self._announce:
            self._announce = False
            return ReaderEvent.CAUGHT_UP
        it = self._it
        if it is None or self._closed:
            return ReaderEvent.END
        self._stream._api.conn.refuse_outside()  # (its tasks are the connection loop's)
        loop = asyncio.get_running_loop()
        since = loop.time()
        while True:
            task = self._task
            if task is None:
                task = self._task = asyncio.ensure_future(it.__anext__())
            if self.caught_up:
                await asyncio.wait({task})
            else:
                await asyncio.wait({task}, timeout=IDLE_CHECK)
                if not task.done():
                    if await self._idle_caught_up():
                        self.caught_up = True
                        if not task.done():
                            return ReaderEvent.CAUGHT_UP
                        # The last initial message came in while the consumer's
                        # info was asked for (a slow link): it goes out first.
                        self._announce = True
                    elif self._stall is not None and loop.time() - since >= self._stall:
                        self._give_up()
                        why = (
                            " (the stream has no leader: the values its leader holds are unknown)"
                            if self._leaderless
                            else ""
                        )
                        raise JetStreamTimeoutError(
                            f"no message from stream {self._stream.name!r} for "
                            f"{self._stall:g} s while values were still pending{why}"
                        )
                    else:
                        continue
            self._task = None
            try:
                msg = task.result()
            except StopAsyncIteration:
                return ReaderEvent.END
            except StreamNotFoundError as exc:
                # The consumer was recreated (reset) after the bucket was deleted:
                # the reader ends here (iterating it again ends, it does not retry).
                await self.aclose()
                raise bucket_gone(self._stream.name) from exc
            except asyncio.CancelledError:
                if self._closed and task.cancelled():
                    return ReaderEvent.END  # closed meanwhile (aclose cancelled the read), not us
                raise
            meta = msg.metadata
            if not self.caught_up:
                seen = self._seen = max(self._seen, meta.sequence.stream)
                target = self._target
                if (target is not None and seen >= target) or (
                    meta.num_pending == 0 and not await self._behind_leader()
                ):
                    self.caught_up = True
                    self._announce = True
            return msg

    async def aclose(self) -> None:
        """Stop reading and delete the consumer (idempotent).

        The close runs in a task of its own, awaited through a shield: a caller
        cancelled again while it closes (anyio's cancel scopes cancel every
        await until the scope exits) left the consumer and its subscription
        behind, and a later ``aclose()`` returned at once.
        """
        if not self._closed:
            if self._stream._api.conn.outside():  # (raises from another live loop)
                self._closed = True  # the loop ended: nothing of it runs
                return
            self._closed = True
            task, starting = self._task, self._starting
            self._task = None
            self._closing = close_in_background(self._close(task, starting))
        if self._closing is not None and not self._closing.done():
            await asyncio.shield(self._closing)  # (a second aclose waits for it too)

    async def _close(
        self, task: asyncio.Task[Msg] | None, starting: asyncio.Task[None] | None
    ) -> None:
        if starting is not None:
            if not starting.done():
                starting.cancel()
                await asyncio.wait({starting})
            if not starting.cancelled():
                starting.exception()  # retrieved: no "never retrieved" warning
        it = self._it  # (after the start: it sets it)
        if it is not None:
            it.stop()
        if task is not None:
            if not task.done():
                await asyncio.wait({task}, timeout=IDLE_CHECK)
                if not task.done():
                    task.cancel()
                    await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # retrieved: no "never retrieved" warning
        if it is not None:
            await it.aclose()


# --------------------------------------------------------------------------- watching

T = TypeVar("T")


class Watcher(Generic[T]):
    """What key-value and object-store watchers share: ``Reader`` events to items.

    Yields what :meth:`_item` makes of each message (skipping None), and
    exactly one ``None`` after the initial values (none with ``updates_only``).
    """

    def __init__(self, reader: Reader, ignore_deletes: bool, updates_only: bool) -> None:
        self._reader = reader
        self._ignore_deletes = ignore_deletes
        self._updates_only = updates_only
        self._started = False
        self._none_sent = False
        self._running = False  # a task is in __anext__
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _item(self, msg: Msg) -> T | None:
        """The item of a watched message; None to skip it."""
        raise NotImplementedError

    async def _ensure_started(self) -> None:
        if self._started:
            return
        if self._finalizer is None:
            # Dropped unfinished without ``async with``: its consumer is deleted anyway.
            self._finalizer = close_when_collected(self, self._reader.aclose)
        try:
            await self._reader.start()
        except asyncio.CancelledError:
            # The caller was cancelled (a timeout on the first anext()): the start goes
            # on in the reader's task and the next call waits for it (the watch ended
            # silently: started, its reader closed by the cancellation).
            raise
        except BaseException:
            self._started = True  # failed: the reader is closed, iteration ends
            raise
        self._started = True

    async def __aenter__(self) -> Self:
        try:
            await self._ensure_started()
        except asyncio.CancelledError:
            # No ``async with`` body, no exit: nothing else would stop the start.
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T | None:
        """The next item; one task at a time.

        Raises:
            RuntimeError: another task is waiting for the next item of this
                watcher (as an async generator refuses a second ``anext()``:
                both would get the same item); that wait goes on undisturbed.

        """
        if self._running:
            raise RuntimeError(
                "anext(): this watcher is already running (another task is waiting "
                "for its next item); read a watcher from one task at a time"
            )
        self._running = True
        try:
            await self._ensure_started()
            while True:
                item = await self._reader.next()
                if item is ReaderEvent.END:
                    raise StopAsyncIteration
                if item is ReaderEvent.CAUGHT_UP:
                    if self._updates_only or self._none_sent:
                        continue
                    self._none_sent = True
                    return None
                assert isinstance(item, Msg)
                made = self._item(item)
                if made is not None:
                    return made
        finally:
            self._running = False

    async def aclose(self) -> None:
        """Stop watching and delete the server-side consumer (idempotent)."""
        if self._finalizer is not None:
            self._finalizer.detach()
        await self._reader.aclose()

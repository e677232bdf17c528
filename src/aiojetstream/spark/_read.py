"""Reading stream-sequence ranges into Arrow record batches (no pyspark here).

Planning resolves the options against ``stream info`` into a half-open range
``[start, end)`` of stream sequences per stream read, and splits the ranges into
contiguous partitions (:func:`split_ranges`). A partition is read with an
ephemeral ``AckNone`` pull consumer starting at its first sequence (memory
storage, one replica, an inactivity threshold so an abandoned read cleans up
after itself; named ``<consumerNamePrefix>-<unique>`` when a prefix is given),
in fetches sized to what the next Arrow batch needs, and the consumer is
deleted at the end. Every server call retries what a leader election causes
within ``retryTimeout`` (:func:`~aiojetstream.spark._runtime.retrying`). A
consumer with nothing more before the range's end ends the read only once the
stream's leader holds nothing more of it either (``RangeReader._run_out``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import uuid
import weakref
from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from aiojetstream import (
    AckPolicy,
    AuthorizationError,
    ClusterUnavailableError,
    ConsumerConfig,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    DeliverPolicy,
    DisconnectedError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamContext,
    JetStreamError,
    JetStreamTimeoutError,
    MessageNotFoundError,
    MessageTooLargeError,
    NoRespondersError,
    StreamNotFoundError,
)
from aiojetstream import Consumer as JSConsumer
from aiojetstream import Stream as JSStream

from ._options import (
    MAX_DEFAULT_PARTITIONS,
    SEQUENCES_PER_PARTITION,
    SourceOptions,
    warn_loss,
)
from ._runtime import (
    FIRST_DELAY,
    MAX_DELAY,
    TRANSIENT,
    Refusals,
    Session,
    discard,
    led,
    retrying,
    shared_session,
)

__all__ = [
    "SCHEMA",
    "Bounds",
    "DataLossError",
    "check_loss",
    "plan_range",
    "read_range",
    "resolve_streams",
    "check_offsets_found",
    "split",
    "split_ranges",
    "stream_bounds",
]

logger = logging.getLogger("aiojetstream.spark")

SCHEMA: Final = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("data", pa.binary()),
    ]
)
_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
_INT32: Final = (1 << 31) - 1
#: The Spark DDL of :data:`SCHEMA`.
DDL: Final = (
    "stream string, subject string, seq long, timestamp timestamp_ltz, "
    "headers map<string,string>, data binary"
)

#: Rows in the first fetch of a partition; later fetches aim at _TARGET_BYTES.
_FIRST_ROWS: Final = 2_000
_MAX_ROWS: Final = 20_000
_TARGET_BYTES: Final = 8 << 20
#: The most one pull may send (its ``max_bytes``; the rows asked for usually end it
#: first). The server sends a pull's messages at once: past its allowance for a
#: client (``max_pending``, 64 MiB) it drops the connection as a slow consumer,
#: which 2,000 messages of 40 KB could do.
_PULL_BYTES: Final = 32 << 20
#: Seconds a read task's clean-up may take after a failure (the consumer delete).
CLEANUP_TIMEOUT: Final = 2.0
#: The longest pause before a read's consumer on a replica behind the leader is
#: created again (the pause doubles from FIRST_DELAY up to it; see _read_elsewhere).
_BEHIND_PAUSE: Final = 1.0
#: Per connection (a session's context), the streams whose leader it may not ask
#: (its user may not publish STREAM.MSG.GET): one refusal (and warning) per stream.
_REFUSED_GETS: weakref.WeakKeyDictionary[JetStreamContext, set[str]] = weakref.WeakKeyDictionary()


class _Run:
    """A run of attempts that found nothing, with pauses doubling from FIRST_DELAY.

    :meth:`left` starts the run (if none is running) and says how much of
    ``retryTimeout`` is left of it; :meth:`end` ends it (an attempt succeeded).
    """

    __slots__ = ("_cap", "_pause", "_since")

    def __init__(self, cap: float) -> None:
        self._cap = cap
        self._since: float | None = None
        self._pause = FIRST_DELAY

    def left(self, timeout: float) -> float:
        """Seconds left of ``timeout`` since the run began (it begins now if none runs)."""
        now = asyncio.get_running_loop().time()
        if self._since is None:
            self._since = now
            self._pause = FIRST_DELAY
        return self._since + timeout - now

    async def pause(self, left: float) -> None:
        """Wait before the next attempt: the run's pause (doubled after), at most ``left``."""
        await asyncio.sleep(min(self._pause, left))
        self._pause = min(self._pause * 2, self._cap)

    def end(self) -> None:
        """An attempt succeeded: the next failure begins a new run."""
        self._since = None


class DataLossError(JetStreamError):
    """Messages the read should include are gone (purged, expired or removed by limits).

    Raised with ``failOnDataLoss=true`` (the default); with ``false`` the missing
    range is skipped with a :class:`JetStreamSparkWarning`.
    """


@dataclass(frozen=True, slots=True)
class Bounds:
    """A stream's sequence bounds: ``first`` is its first stored sequence, ``next`` its last + 1.

    ``created``: when the stream was created (ISO 8601), which tells a stream
    deleted and created again under the same name from the one an offset was of.
    """

    first: int
    next: int
    created: str = ""
    #: The average stored size of its messages in bytes (for ``maxBytesPerTrigger``).
    size: int = 0
    #: Its replicas (its config's ``num_replicas``).
    replicas: int = 1


async def resolve_streams(js: JetStreamContext, opts: SourceOptions) -> list[str]:
    """The streams the read selects now, sorted (``streamPattern`` is matched every time)."""
    if opts.stream is not None:
        return [opts.stream]
    if opts.stream_pattern is None:
        return sorted(opts.streams)
    return sorted([name async for name in js.stream_names() if opts.matches(name)])


def check_offsets_found(opts: SourceOptions, found: list[str]) -> None:
    """With ``streamPattern``, per-stream offsets must name streams that exist now.

    A name the pattern matches but no stream has (a typo, or a stream created
    later) was ignored: the stream meant was read from the default offset,
    and one created later from its start (Kafka refuses offsets for partitions
    it is not assigned).

    Raises:
        InvalidOptionError: ``startingOffsets`` / ``endingOffsets`` name such a stream.

    """
    if opts.stream_pattern is None:
        return
    present = set(found)
    for display, per in (
        ("startingOffsets", opts.starting_by_stream),
        ("endingOffsets", opts.ending_by_stream),
    ):
        missing = sorted(name for name, _ in per if name not in present)
        if missing:
            raise InvalidOptionError(
                f"option {display!r} names stream {missing[0]!r}, which 'streamPattern' "
                f"{opts.stream_pattern!r} matches but which does not exist at "
                f"{opts.connect.describe()} (a stream created later is read from its start)"
            )


async def stream_bounds(
    js: JetStreamContext, opts: SourceOptions, stream: str | None = None
) -> Bounds:
    """The bounds of ``stream`` (the single ``stream`` option's by default) now.

    ``first == next`` when it is empty.

    Raises:
        InvalidOptionError: the stream does not exist.

    """
    name = stream if stream is not None else opts.stream
    assert name is not None
    try:
        info = led((await js.stream(name)).cached_info)
    except StreamNotFoundError as exc:
        raise InvalidOptionError(
            f"option '{'stream' if opts.stream is not None else 'streams'}': stream {name!r} "
            f"does not exist at {opts.connect.describe()}"
        ) from exc
    state = info.state
    nxt = state.last_seq + 1
    first = nxt if state.messages == 0 else max(state.first_seq, 1)
    size = state.bytes // state.messages if state.messages else 0
    return Bounds(first, nxt, info.created.isoformat(), size, info.config.num_replicas)


def _consumer_config(
    opts: SourceOptions, subjects: tuple[str, ...] | None = None, **start: object
) -> ConsumerConfig:
    """A read consumer's config: ``subjects`` filters (the read's by default), ``start``."""
    if subjects is None:
        subjects = opts.subjects
    prefix = opts.consumer_name_prefix
    return ConsumerConfig(
        name=f"{prefix}-{uuid.uuid4().hex[:16]}" if prefix else None,
        ack_policy=AckPolicy.NONE,
        filter_subject=subjects[0] if len(subjects) == 1 else None,
        filter_subjects=list(subjects) if len(subjects) > 1 else None,
        mem_storage=True,
        num_replicas=1,
        inactive_threshold=opts.inactive_threshold,
        **start,
    )


async def sequence_at(
    js: JetStreamContext, opts: SourceOptions, when: datetime, stream: str | None = None
) -> int:
    """The first sequence of ``stream`` stored at or after ``when`` (its next one if none).

    Whatever the subject: the consumer has no filter. With two or more, nats-server
    (seen with 2.15.1, ``selectStartingSeqNo``) starts a by-time consumer at the
    first-ever message of a filter whose first message is at or after ``when``,
    skipping the later messages of the filters that began before it. The
    unfiltered time lookup is exact, and a range read skips what its filters do
    not match anyway.
    """
    name = stream if stream is not None else opts.stream
    assert name is not None
    consumer = await js.create_consumer(
        name,
        _consumer_config(opts, (), deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=when),
    )
    try:
        return consumer.cached_info.delivered.stream_seq + 1
    finally:
        await _delete(js, consumer)


async def plan_range(
    js: JetStreamContext, opts: SourceOptions, *, streaming: bool, stream: str | None = None
) -> tuple[int, int, Bounds]:
    """Resolve the options into ``[start, end)`` of ``stream`` and its bounds now.

    Kafka's conventions: ``startingTimestamp`` wins over ``startingOffsets``
    (and ``endingTimestamp`` over ``endingOffsets``); the default start is
    ``earliest`` for batch reads and ``latest`` for streams.
    """
    name = stream if stream is not None else opts.stream
    assert name is not None
    bounds = await stream_bounds(js, opts, name)
    if opts.starting_timestamp is not None:
        start = await sequence_at(js, opts, opts.starting_timestamp, name)
    else:
        starting = opts.starting_for(name) or ("latest" if streaming else "earliest")
        if starting == "earliest":
            start = bounds.first
        elif starting == "latest":
            start = bounds.next
        else:
            start = int(starting)
    if opts.ending_timestamp is not None:
        end = await sequence_at(js, opts, opts.ending_timestamp, name)
    else:
        ending = opts.ending_for(name)
        # A sequence past the stream's end means its end now: the range stays repeatable.
        end = bounds.next if ending == "latest" else min(int(ending), bounds.next)
    return start, max(start, end), bounds


def check_loss(
    opts: SourceOptions, start: int, first: int, what: str, stream: str | None = None
) -> int:
    """Compare a start with the stream's first sequence; return where reading may start.

    Raises:
        DataLossError: sequences ``[start, first)`` are gone and ``failOnDataLoss`` is on.

    """
    if start >= first:
        return start
    name = stream if stream is not None else opts.stream
    text = (
        f"stream {name!r} no longer holds sequences {start}..{first - 1} "
        f"({what}); they were purged, expired or removed by limits"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(
            text + ". Set failOnDataLoss=false to skip them with a warning instead."
        )
    warn_loss(text + "; skipped (failOnDataLoss=false).", stacklevel=2)
    return first


def split(start: int, end: int, partitions: int | None) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` into at most ``partitions`` contiguous, nearly equal ranges.

    Without ``partitions``: one range per 10,000 sequences, at least 1, at most 64.
    An empty range gives no partitions.
    """
    total = end - start
    if total <= 0:
        return []
    if partitions is None:
        partitions = min(MAX_DEFAULT_PARTITIONS, -(-total // SEQUENCES_PER_PARTITION))
    n = max(1, min(partitions, total))
    size, extra = divmod(total, n)
    ranges: list[tuple[int, int]] = []
    lo = start
    for i in range(n):
        hi = lo + size + (1 if i < extra else 0)
        ranges.append((lo, hi))
        lo = hi
    return ranges


Range = tuple[str, int, int]


def split_ranges(
    ranges: list[Range], num_partitions: int | None = None, min_partitions: int | None = None
) -> list[Range]:
    """Cut the ranges of several streams (``(stream, start, end)``) into partitions.

    * ``num_partitions``: that many in all (never fewer than one per non-empty
      stream, never more than there are sequences), shared in proportion to
      each stream's range.
    * Otherwise one partition per 10,000 sequences (``SEQUENCES_PER_PARTITION``),
      at most 64 in all (``MAX_DEFAULT_PARTITIONS``; the parts grow past that).
    * ``min_partitions`` (Kafka's ``minPartitions``): at least that many in all
      (or one per sequence), shared the same way, the largest ranges cut first.

    Empty ranges give no partitions; the result keeps the streams' order and
    each stream's parts in sequence order.
    """
    ranges = [r for r in ranges if r[2] > r[1]]
    if not ranges:
        return []
    total = sum(hi - lo for _, lo, hi in ranges)
    target = num_partitions
    if target is None:
        target = min(MAX_DEFAULT_PARTITIONS, -(-total // SEQUENCES_PER_PARTITION))
    target = max(target, len(ranges), min_partitions or 0)
    # One part each, then each further part to the range whose parts are largest.
    shares = [1] * len(ranges)
    heap: list[tuple[float, int]] = [(float(lo - hi), i) for i, (_, lo, hi) in enumerate(ranges)]
    heapq.heapify(heap)
    for _ in range(min(target, total) - len(ranges)):
        _size, i = heapq.heappop(heap)
        shares[i] += 1
        _name, lo, hi = ranges[i]
        heapq.heappush(heap, ((lo - hi) / shares[i], i))
    parts = [
        (name, a, b)
        for (name, lo, hi), share in zip(ranges, shares, strict=True)
        for a, b in split(lo, hi, share)
    ]
    return parts


# ----------------------------------------------------------------------------- reading


async def _delete(js: JetStreamContext, consumer: JSConsumer) -> None:
    # The inactivity threshold or a stream deletion may have removed it already.
    with contextlib.suppress(ConsumerNotFoundError, StreamNotFoundError):
        await js.delete_consumer(consumer.stream_name, consumer.name)


#: The deletes of replaced consumers under way (a reference keeps each task alive).
_DELETES: set[asyncio.Future[None]] = set()


async def _delete_quietly(js: JetStreamContext, consumer: JSConsumer) -> None:
    """Delete a consumer given up, within :data:`CLEANUP_TIMEOUT` (it may not be)."""
    with contextlib.suppress(JetStreamError, TimeoutError):
        await asyncio.wait_for(_delete(js, consumer), CLEANUP_TIMEOUT)


def _ack_base(tokens: int) -> int:
    """Where a ``$JS.ACK`` subject of ``tokens`` tokens holds its stream name (v1 or v2)."""
    if tokens == 9:
        return 2
    if tokens >= 11:  # the random last token optional (as nats.go and nats.js read it)
        return 4
    raise InvalidResponseError(
        f"aiojetstream.spark: a reply subject of {tokens} tokens is no $JS.ACK subject"
    )


def _numbers(replies: pa.Array) -> tuple[pa.Array, pa.Array, int]:
    """Stream sequences and timestamps (Arrow columns) and the last message's pending count.

    Parsed from the ``$JS.ACK`` reply subjects column-wise (ADR-15):
    v1 ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``,
    v2 ``$JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>.<r>``
    (``<r>`` optional, more tokens may follow). A server sends one form; a mix is
    parsed one by one.
    """
    fast = _same_prefix_numbers(replies)
    if fast is not None:
        return fast
    tokens = pc.split_pattern(replies, ".")
    lengths = pc.min_max(pc.list_value_length(tokens)).as_py()
    shortest, longest = lengths["min"], lengths["max"]
    if shortest == longest == 9 or shortest >= 11:
        base = 2 if shortest == 9 else 4
        seqs = pc.cast(pc.list_element(tokens, base + 3), pa.int64())
        nanos = pc.cast(pc.list_element(tokens, base + 5), pa.int64())
        pending = int(tokens[len(replies) - 1][base + 6].as_py())
    else:  # a mix of the two forms: each reply by its own number of tokens
        rows = [(_ack_base(len(t)), t) for t in tokens.to_pylist()]
        seqs = pa.array([int(t[base + 3]) for base, t in rows], pa.int64())
        nanos = pa.array([int(t[base + 5]) for base, t in rows], pa.int64())
        base, last = rows[-1]
        pending = int(last[base + 6])
    micros = pc.divide(nanos, 1000)  # integer division: whole microseconds
    return seqs, pc.cast(micros, _TIMESTAMP), pending


def _same_prefix_numbers(replies: pa.Array) -> tuple[pa.Array, pa.Array, int] | None:
    """:func:`_numbers` when every reply shares the first one's tokens up to the stream sequence.

    What one consumer's deliveries of one round usually do (the stream, the
    consumer and the delivery count the same): only the rest of each reply,
    ``<sseq>.<cseq>.<ts>.<pending>...``, is split (about half the work). None
    when a reply does not share the prefix or its rest has another number of
    tokens than the first reply's form has (:func:`_numbers` parses them).
    """
    first = replies[0].as_py().split(".")
    if len(first) != 9 and len(first) < 11:
        return None
    base = 2 if len(first) == 9 else 4
    prefix = ".".join(first[: base + 3]) + "."
    if not pc.all(pc.starts_with(replies, prefix)).as_py():
        return None
    rest = pc.binary_slice(replies.view(pa.binary()), len(prefix.encode()), _INT32)
    tokens = pc.split_pattern(rest, b".")
    lengths = pc.min_max(pc.list_value_length(tokens)).as_py()
    # v1: exactly <sseq>.<cseq>.<ts>.<pending>; v2: those, maybe <random> and more.
    fits = lengths["min"] == lengths["max"] == 4 if base == 2 else lengths["min"] >= 4
    if not fits:
        return None
    seqs = pc.cast(pc.list_element(tokens, 0), pa.int64())
    nanos = pc.cast(pc.list_element(tokens, 2), pa.int64())
    pending = int(tokens[len(replies) - 1][3].as_py())
    micros = pc.divide(nanos, 1000)  # integer division: whole microseconds
    return seqs, pc.cast(micros, _TIMESTAMP), pending


class RangeReader:
    """Reads ``[start, end)`` of a stream (its filtered messages) in Arrow batches."""

    def __init__(
        self,
        js: JetStreamContext,
        opts: SourceOptions,
        start: int,
        end: int,
        stream: str | None = None,
        refusals: Refusals | None = None,
        created: str | None = None,
    ) -> None:
        name = stream if stream is not None else opts.stream
        assert name is not None
        self._refusals = refusals
        #: When the stream the range was planned on was created (None: not checked).
        self._created = created
        self._js = js
        self._opts = opts
        self._stream = name
        #: The stream's handle, for the leader's gets (see :meth:`_leader_next`).
        self._handle: JSStream | None = None
        self._start = start
        self._next = start
        self._end = end
        self._consumer: JSConsumer | None = None
        self._done = start >= end
        self._rows = _FIRST_ROWS
        #: The pulls' current run of 503s (ended by a pull served).
        self._unserved = _Run(MAX_DELAY)
        #: The consumer has nothing (matching) more now (see :meth:`_run_out`), and
        #: whether the sequences it skipped to the range's end need a loss check then.
        self._drained = False
        self._check_end = False
        #: The stream's replicas when the consumer was created (1: no leader check).
        self._replicas = 1
        #: Reads finding the consumer's replica behind the leader (ended by a pull
        #: that reads something).
        self._behind = _Run(_BEHIND_PAUSE)

    async def _open(self) -> JSConsumer:
        # Whenever a consumer is (re)created, whatever it would start past is lost:
        # check before a consumer with nothing pending ends the read.
        bounds = await stream_bounds(self._js, self._opts, self._stream)
        if self._created is not None and bounds.created != self._created:
            self._recreated(bounds.created)
        self._next = max(self._next, self._check_loss(self._next, bounds.first))
        self._replicas = bounds.replicas
        consumer = await self._js.create_consumer(
            self._stream,
            _consumer_config(
                self._opts,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=self._next,
            ),
        )
        self._consumer = consumer
        started = consumer.cached_info.delivered.stream_seq + 1
        if started > self._next:
            # The stream lost [next, started) between the check and the creation (its
            # limits at work): the server started the consumer at its new first message.
            self._next = self._check_loss(self._next, started)
        self._check_end = False
        # Nothing (matching) from here on; or a start before the one asked for, by a
        # replica that holds less (behind the leader): both see _run_out.
        self._drained = consumer.cached_info.num_pending == 0 or started < self._next
        if self._next >= self._end:
            self._done = True
        return consumer

    @property
    def stream(self) -> str:
        """The stream read."""
        return self._stream

    def _check_loss(self, start: int, first: int) -> int:
        return check_loss(self._opts, start, first, "read", self._stream)

    def _recreated(self, created: str) -> None:
        """The stream was deleted and created again since the range was planned.

        Its messages are gone; the new stream's sequences start over, so the
        range would read other messages. With ``failOnDataLoss=false`` the
        range is skipped (the next micro-batch reads the new stream from its
        start).

        Raises:
            DataLossError: with ``failOnDataLoss`` on.

        """
        text = (
            f"stream {self._stream!r} was deleted and created again (at {created}) after "
            f"sequences {self._start}..{self._end - 1} were planned on the stream created "
            f"at {self._created}"
        )
        if self._opts.fail_on_data_loss:
            raise DataLossError(
                text + ". Set failOnDataLoss=false to skip them with a warning instead."
            )
        warn_loss(text + "; skipped (failOnDataLoss=false).", stacklevel=2)
        self._next = self._end
        self._created = created

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next Arrow batch, or None once the range is read.

        A leader election's errors are retried within ``retryTimeout``: the
        consumer is given up and created again at the next sequence.
        """
        return await retrying(
            self._next_batch,
            self._opts.retry_timeout,
            f"reading stream {self._stream!r} from sequence {self._next}",
            on_error=self._forget,
            refusals=self._refusals,
        )

    def _forget(self, exc: Exception) -> None:
        # Its node may be gone: no delete (its inactivity threshold removes it).
        self._consumer = None

    async def _next_batch(self) -> pa.RecordBatch | None:
        while not self._done:
            if self._drained:
                await self._run_out()
                continue
            consumer = self._consumer or await self._open()
            if self._done or self._drained:
                continue
            want = min(self._rows, self._end - self._next)
            try:
                batch = await self._fetch(consumer, want)
            except (ConsumerNotFoundError, ConsumerDeletedError):
                # Idle past its inactivity threshold (Spark held the task): recreate.
                self._consumer = None
                continue
            except NoRespondersError:
                await self._pull_unserved(consumer)
                continue
            self._unserved.end()
            if batch is not None:
                return batch
            if not self._done and not self._drained:
                info = await consumer.info()
                if info.num_pending == 0:
                    self._drained = True
                    self._check_end = True  # purged up to its end?
        return None

    async def _run_out(self) -> None:
        """The consumer has nothing (matching) more: end the read, or read on elsewhere.

        The end when the range is read, or when the stream's leader holds no
        message of the read in ``[next, end)`` (the rest was deleted or does
        not match the filter). Otherwise the consumer's replica is behind the
        leader and it is created again (:meth:`_read_elsewhere`).
        """
        if self._next < self._end and await self._leader_holds_more():
            await self._read_elsewhere()
            return
        self._done = True
        if self._check_end:
            await self._check_skipped(self._end)

    async def _leader_holds_more(self) -> bool:
        """Whether the stream's leader holds a message of the read in ``[next, end)``.

        nats-server places the read's consumer (R1) on any of the stream's
        peers; on one whose node restarted and is still catching up, the
        consumer has nothing more while the leader holds the rest of the range
        (40 of 1131 ranges read short, without an error). The leader answers a
        plain (not direct) get of the next message of each filter from
        ``next``. Not asked of a stream of one replica. A get that times out,
        or that the election of a leader fails, is retried as any other
        request of the read (:data:`TRANSIENT`); the consumer's word is taken
        when the leader can not be asked (the get refused or not served).
        """
        if self._replicas <= 1:
            return False
        for subject in self._opts.subjects or (">",):
            seq = await self._leader_next(subject)
            if seq is None:
                return False  # the leader can not be asked: the consumer's word is taken
            if 0 < seq < self._end:
                return True
        return False

    async def _leader_next(self, subject: str) -> int | None:
        """The sequence of the leader's first message on ``subject`` from ``next`` (0: none).

        ``get_msg(direct=False)``: a ``STREAM.MSG.GET``, which only the
        stream's leader answers (a direct get may be answered by the replica
        behind). None when it can not be asked: the server refused the
        request (the user may not publish it: said once per stream and
        process), nobody serves it (an account importing the consumer API
        only), or an error other than an election's.

        Raises:
            JetStreamTimeoutError: no reply within the request timeout.
            DisconnectedError: the connection dropped meanwhile.
            ClusterUnavailableError: the stream has no leader now (an election).

        """
        if self._stream in _REFUSED_GETS.get(self._js, ()):
            return None
        try:
            if self._handle is None:
                self._handle = await self._js.stream(self._stream)
            message = await self._handle.get_msg(self._next, subject=subject, direct=False)
        except MessageNotFoundError:
            return 0
        except (JetStreamTimeoutError, DisconnectedError, ClusterUnavailableError):
            raise
        except AuthorizationError as exc:
            _REFUSED_GETS.setdefault(self._js, set()).add(self._stream)
            logger.warning(
                "aiojetstream.spark: reading stream %r: the server refused a message get "
                "(%s): allow the user STREAM.MSG.GET on the stream, or a read task whose "
                "consumer is placed on a replica still catching up after a restart may end "
                "its range early",
                self._stream,
                exc,
            )
            return None
        except JetStreamError as exc:  # no responders, another API error
            self._unasked(repr(exc))
            return None
        return message.seq

    def _unasked(self, why: str) -> None:
        logger.debug(
            "aiojetstream.spark: could not ask the leader of stream %r for sequences %d..%d "
            "(%s): the read ends where its consumer does",
            self._stream,
            self._next,
            self._end - 1,
            why,
        )

    async def _read_elsewhere(self) -> None:
        """Create the consumer again at the next sequence: its replica is behind the leader.

        The new consumer is placed anew (or its replica caught up meanwhile);
        one that again has nothing more is replaced after a pause doubling from
        0.1 s to 1 s, until a pull reads something, or for ``retryTimeout``.

        Raises:
            JetStreamTimeoutError: the replicas the consumers were placed on held
                nothing more of the range for ``retryTimeout`` seconds.

        """
        timeout = self._opts.retry_timeout
        left = self._behind.left(timeout)
        if left <= 0:
            raise JetStreamTimeoutError(
                f"aiojetstream.spark: reading stream {self._stream!r}: the replicas its read "
                f"consumers were placed on held nothing from sequence {self._next} for "
                f"{timeout:g} s (option 'retryTimeout'), while the stream's leader holds "
                f"messages of sequences {self._next}..{self._end - 1}"
            )
        consumer, self._consumer = self._consumer, None
        self._drained = False
        if consumer is not None:
            logger.info(
                "aiojetstream.spark: read consumer %r of stream %r has nothing from sequence "
                "%d, which the stream's leader holds (its replica is catching up): "
                "creating it again",
                consumer.name,
                self._stream,
                self._next,
            )
            # Deleted meanwhile (its node may answer slowly while it catches up); its
            # inactivity threshold removes it when the delete fails.
            task = asyncio.ensure_future(_delete_quietly(self._js, consumer))
            _DELETES.add(task)
            task.add_done_callback(_DELETES.discard)
        await self._behind.pause(left)

    async def _pull_unserved(self, consumer: JSConsumer) -> None:
        """A pull got a 503 (no responders): pull again soon, or create the consumer again.

        In a cluster the server places the new consumer on any node, and the
        first pulls may reach the client's node before the consumer's interest
        in them has crossed the route (seen on about 1 % of R3 reads). While
        the consumer exists it is pulled again after a delay doubling from
        0.1 s to 2 s; a consumer that is gone is created again at the next
        sequence (a deleted stream fails there, with its own error). Pulls
        that get 503s for ``retryTimeout`` while the consumer exists fail.

        Raises:
            NoRespondersError: every pull got a 503 for ``retryTimeout`` seconds.

        """
        try:
            await consumer.info()
        except (ConsumerNotFoundError, StreamNotFoundError):
            self._consumer = None  # recreated at the next sequence (_open)
            return
        timeout = self._opts.retry_timeout
        left = self._unserved.left(timeout)
        if left <= 0:
            raise NoRespondersError(
                f"aiojetstream.spark: no responders for the pull requests of read consumer "
                f"{consumer.name!r} of stream {self._stream!r} (503) for {timeout:g} s "
                "(option 'retryTimeout'), although the consumer exists: nothing serves its "
                "pulls (an account that imports the consumer API but not CONSUMER.MSG.NEXT?)"
            ) from None
        logger.info(
            "aiojetstream.spark: a pull of read consumer %r of stream %r got no responders "
            "(503) while the consumer exists; pulling again",
            consumer.name,
            self._stream,
        )
        await self._unserved.pause(left)

    async def _check_skipped(self, upto: int) -> None:
        """Check the sequences the consumer skipped, ``[next, upto)``, for data loss.

        Deleted or filtered-out sequences are skipped too, and stay allowed; a
        purge or the stream's limits removing what the read had not reached is
        data loss, as before the consumer was created (``_open``).
        """
        bounds = await stream_bounds(self._js, self._opts, self._stream)
        if bounds.first > self._next:
            self._check_loss(self._next, min(bounds.first, upto))

    async def _pull(self, consumer: JSConsumer, want: int, max_bytes: int | None) -> pa.RecordBatch:
        # Columns straight from the read buffer: no Msg per row (see collect_columns).
        async with await consumer.fetch_no_wait(want, max_bytes=max_bytes) as fetched:
            msgs = await fetched.collect_columns()
            if msgs.num_rows:
                try:
                    await fetched.collect_columns()  # an error that ended the pull after them
                except (ConsumerNotFoundError, ConsumerDeletedError):
                    self._consumer = None  # recreated at the next sequence
                except NoRespondersError:
                    pass  # the next pull gets one too, and deals with it (_pull_unserved)
        return msgs

    async def _fetch(self, consumer: JSConsumer, want: int) -> pa.RecordBatch | None:
        # What the stream holds now, without waiting: fewer matching messages than
        # asked for (a filter, deleted sequences) must not wait for an expiry.
        try:
            msgs = await self._pull(consumer, want, _PULL_BYTES)
        except MessageTooLargeError:
            # One message larger than the bound (a max_payload raised past it): alone.
            msgs = await self._pull(consumer, 1, None)
        if not msgs.num_rows:
            return None
        seqs, stamps, pending = _numbers(msgs.column(1))
        first = seqs[0].as_py()
        if first < self._next:
            # Before the range's next sequence: the consumer was started by a replica
            # behind the leader (at its end), which caught up since. See _run_out.
            self._drained = True
            return None
        if first > self._next:
            await self._check_skipped(first)
        n = msgs.num_rows
        end = self._end
        if seqs[n - 1].as_py() >= end:
            # Past the range (the consumer does not know where it ends): cut there.
            n = pc.sum(pc.less(seqs, end)).as_py() or 0
            self._done = True
            if n == 0:
                return None
            msgs = msgs.slice(0, n)
            seqs = seqs.slice(0, n)
            stamps = stamps.slice(0, n)
        elif pending == 0:
            self._drained = True  # nothing (matching) after it now (see _run_out)
        self._next = seqs[n - 1].as_py() + 1
        self._behind.end()
        if self._next >= end:
            self._done = True
        data = msgs.column(3)
        average = max(1, (pc.sum(pc.binary_length(data)).as_py() or 0) // n)
        self._rows = max(1, min(_MAX_ROWS, _TARGET_BYTES // average))
        return pa.RecordBatch.from_arrays(
            [
                pa.repeat(self._stream, n).cast(pa.string()),
                msgs.column(0),
                seqs,
                stamps,
                msgs.column(2),
                data,
            ],
            schema=SCHEMA,
        )

    async def aclose(self) -> None:
        """Delete the consumer (idempotent)."""
        consumer, self._consumer = self._consumer, None
        self._done = True
        if consumer is not None:
            await _delete(self._js, consumer)


def read_range(
    opts: SourceOptions,
    start: int,
    end: int,
    stream: str | None = None,
    created: str | None = None,
) -> Generator[pa.RecordBatch, None, None]:
    """Yield the Arrow batches of ``[start, end)``: the body of ``read()`` on an executor.

    Uses the worker process's shared connection (:func:`shared_session`); the
    consumer is the task's own and is deleted at the end.
    """
    if start >= end:
        return
    session = shared_session(opts.connect)
    reader = RangeReader(session.js, opts, start, end, stream, session.refusals, created)
    failure: BaseException | None = None
    try:
        while True:
            try:
                batch = session.run(reader.next_batch())
            except TRANSIENT:
                discard(session)  # gave up after retryTimeout: do not hand it to the next task
                raise
            if batch is None:
                return
            yield batch
    except GeneratorExit:
        raise  # Spark closed the iterator early (a limit reached): an ordinary end
    except BaseException as exc:
        failure = exc
        raise
    finally:
        _close_reader(session, reader, opts, failure)


def _close_reader(
    session: Session, reader: RangeReader, opts: SourceOptions, failure: BaseException | None
) -> None:
    """Delete the task's consumer; never fail (or hide) the task for it.

    After a failure (``failure``) the delete gets :data:`CLEANUP_TIMEOUT`
    seconds at most, so a lost server does not hold the task for a request
    timeout, and a clean-up error becomes a note on ``failure`` (which stays
    the error raised) as well as a warning. Either way the consumer's
    ``inactiveThreshold`` removes what was not deleted.
    """
    if not session.usable:
        return  # the connection is gone: its consumer goes with its inactivity threshold
    limit = CLEANUP_TIMEOUT if failure is not None else opts.connect.timeout
    try:
        session.run(asyncio.wait_for(reader.aclose(), limit))
    except Exception as exc:
        why = f"no reply within {limit:g} s" if isinstance(exc, TimeoutError) else repr(exc)
        what = (
            f"aiojetstream.spark: could not delete a read consumer of stream {reader.stream!r} "
            f"(its inactiveThreshold of {opts.inactive_threshold:g} s removes it): {why}"
        )
        logger.warning("%s", what)
        if failure is not None:
            failure.add_note(what)

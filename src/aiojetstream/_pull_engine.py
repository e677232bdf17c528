"""The ADR-37 pending-count engine: a pure state machine.

It imports neither asyncio nor nats-py and never reads a clock: every event
that needs the time carries ``now`` (the event loop's monotonic clock, in
seconds). The async driver (``_pull_driver``) feeds it events and carries out
the commands it returns:

events    start(now) | on_message(size) | on_consumed(size) | on_status(...)
          | on_messages(count) | on_consumed_many(count)
          | on_pin_id(pin_id) | on_timer(now) | on_disconnected(now) | on_reconnected(now)
          | on_consumer_checked(now, result, error, pending) | stop(drain, now)
          | on_unsubscribed() | on_refused(error, inbox, now)
commands  SendPull(batch, max_bytes, expires, heartbeat, no_wait, pin_id) | ArmTimer(deadline)
          | CancelTimer() | Report(error) | CheckConsumer() | Unsubscribe() | Finish(error)

The options it runs on (:class:`PullSettings`) are validated and defaulted in
``_pull_settings``; this module re-exports those names, which the consumers
import from here.

Counting (ADR-37 "Buffering messages"): ``pending`` is what was asked for and
not yet consumed by the user: requests still outstanding on the server plus
messages buffered in the client. A message moves from *outstanding* to
*buffered* when it arrives and leaves the count when the user consumes it, so
the messages asked for never fill the buffer beyond ``max_messages`` /
``max_bytes``. A message arriving when none is outstanding is counted
``unsolicited`` and buffered too (one still delivered for a pull written off
after a reconnect, a check or a drain; or one nobody asked for): the driver
caps the buffer at ``buffer_limits`` and hands what it drops back with
``on_consumed``, as if taken. A pull asks for
exactly the room left, and only once the pending count fell below the
threshold. Status headers ``Nats-Pending-Messages`` / ``Nats-Pending-Bytes``
release what a terminated request will never deliver.

Priority groups (ADR-42): the settings carry the group options of every pull;
for a ``pinned_client`` consumer the engine keeps the pin in a
:class:`~aiojetstream._priority.PinState` (recorded from ``Nats-Pin-Id`` with
``on_pin_id``) and sends it with every pull. A ``423`` status means the pin was
lost: the engine forgets it, releases what the refused request asked for (the
``Nats-Pending-*`` headers of ``Nats-Wrong-Pin-Id``; the whole last pull sent
with the pin for ``Nats-Pin-Id mismatch``, which has none), reports
:class:`~aiojetstream.PinIdMismatchError` and pulls again without the pin; a
fetch ends with that error.

Invariants (checked by the hypothesis state machine in
``tests/unit/test_pull_engine.py``):

* ``pending_messages <= max_messages`` and ``pending_bytes <= max_bytes``
  while the server delivers only what was asked for;
* no pull asks for zero or fewer messages (or bytes, in byte mode);
* ``requested + unsolicited == delivered + released + outstanding``;
* a terminal status ends the run with its error and no pull follows;
* a missed heartbeat is reported once per ``2 x heartbeat`` of silence, and
  never while disconnected;
* ``stop(drain=True)`` finishes only once the inbox's UNSUB was flushed (every
  message the server sent before it arrived) and every buffered message was
  consumed;
* a pull carries the pin id last recorded, none after a ``423``, and a ``423``
  never ends ``messages()`` / ``consume()``;
* a pull the server refused (a permissions violation, ``on_refused``) ends a fetch
  with its error; ``messages()`` / ``consume()`` report it and pull again no
  sooner than a missed heartbeat would have been reported (2 x heartbeat); a
  refused subscription of the inbox ends every run with its error;
* a fetch pulls again only for a pull dropped before it delivered anything: one
  ended by ``409 Leadership Change`` / ``Server Shutdown`` (``fetch``: for the time
  left of its ``expires``; ``fetch_no_wait``: once), or a no-wait pull left
  unanswered while its consumer has messages pending (once); dropped again, a
  no-wait fetch raises instead of handing out an empty batch.

Single pulls (``fetch`` / ``fetch_bytes`` / ``fetch_no_wait``) end on the first
status that ends their request, but an empty batch must mean "nothing came":
in a cluster a consumer leader change voids the waiting pulls (``409
Leadership Change``) or loses a no-wait pull without a word, and a catch-up
loop (``while msgs := ... fetch_no_wait(n) ...``) would stop early although
messages are pending. So a fetch whose pull was dropped before it delivered a
message pulls again: a ``fetch`` for the time left of its ``expires`` (at
once, then backing off as ``next()`` does; with less than ``MIN_EXPIRES`` left,
a no-wait pull), a ``fetch_no_wait`` once (a second 409 ends it with
:class:`~aiojetstream.ClusterUnavailableError`). A no-wait pull unanswered
within ``NO_WAIT_TIMEOUT`` is pulled again once when the consumer check (the
driver's ``CONSUMER.INFO``) reports messages pending (``on_consumer_checked``'s
``pending``; the driver gives 0 when the server holds pulls or the consumer is
at ``max_ack_pending``: a pull kept waiting is not lost); unanswered again, the fetch ends with
:class:`~aiojetstream.JetStreamTimeoutError`; with nothing pending it ends empty.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Final

from ._errors import (
    ClusterUnavailableError,
    ConsumerDeletedError,
    DisconnectedError,
    JetStreamError,
    JetStreamTimeoutError,
    MessageTooLargeError,
    NoHeartbeatError,
    NoRespondersError,
    PinIdMismatchError,
)
from ._priority import PinState
from ._pull_settings import (
    BUFFER_LIMIT_FACTOR,
    BYTES_MODE_BATCH,
    DEFAULT_EXPIRES,
    DEFAULT_MAX_MESSAGES,
    MIN_EXPIRES,
    PriorityConsumer,
    PullSettings,
    buffer_limits,
    fit_heartbeat,
    fit_to_limits,
    paced,
    resolve_consume,
    resolve_fetch,
    shortened,
)
from ._status import Severity, StatusKind

__all__ = [
    # the settings (defined in _pull_settings; the consumers resolve through this module)
    "BUFFER_LIMIT_FACTOR",
    "BYTES_MODE_BATCH",
    "DEFAULT_EXPIRES",
    "DEFAULT_MAX_MESSAGES",
    "MIN_EXPIRES",
    "PriorityConsumer",
    "PullSettings",
    "buffer_limits",
    "fit_heartbeat",
    "fit_to_limits",
    "paced",
    "resolve_consume",
    "resolve_fetch",
    "shortened",
    # timing
    "CHECK_BACKOFF_FIRST",
    "CHECK_BACKOFF_MAX",
    "FETCH_CHECK_TIMEOUT",
    "FETCH_GRACE",
    "MAX_WARNINGS",
    "MISSED_TICKS",
    "NEXT_REPULL_MIN_LEFT",
    "NO_WAIT_REPULLS",
    "NO_WAIT_TIMEOUT",
    "REPULL_BACKOFF_FIRST",
    "REPULL_BACKOFF_MAX",
    "TICKS_PER_HEARTBEAT",
    # commands and the machine
    "ArmTimer",
    "CancelTimer",
    "CheckConsumer",
    "CheckResult",
    "Command",
    "Commands",
    "Finish",
    "Phase",
    "PullEngine",
    "Report",
    "SendPull",
    "Unsubscribe",
]

# --------------------------------------------------------------------------- timing

#: How long after ``expires`` a fetch waits for the server's closing status.
FETCH_GRACE: Final = 1.0
#: How long a no-wait fetch waits for the server's answer.
NO_WAIT_TIMEOUT: Final = 5.0
#: How long a fetch's consumer look-up may take after the fetch's own time is up: a
#: fetch ends within its expires + FETCH_GRACE + FETCH_CHECK_TIMEOUT, whatever happens.
FETCH_CHECK_TIMEOUT: Final = 1.0
#: Consumer checks while JetStream is unavailable: first retry, growth, cap.
CHECK_BACKOFF_FIRST: Final = 0.25
CHECK_BACKOFF_MAX: Final = 5.0
#: Re-pulls after unproductive statuses (no message in between): growth, cap.
REPULL_BACKOFF_FIRST: Final = 0.05
REPULL_BACKOFF_MAX: Final = 2.0
#: ``next()``: a pull that ended without a message or an error with at least this much
#: of its ``expires`` left was dropped by the server (a ``409 Leadership Change`` or
#: ``Server Shutdown`` ends a fetch silently), not expired: it is sent again for the
#: time left (at least ``MIN_EXPIRES``), at once, then backing off as re-pulls do.
NEXT_REPULL_MIN_LEFT: Final = 0.1
#: How many times a ``fetch_no_wait`` pulls again after its pull was dropped (a 409
#: Leadership Change / Server Shutdown before any message, or no answer at all while
#: its consumer has messages pending); dropped once more, it raises.
NO_WAIT_REPULLS: Final = 1
#: Heartbeat ticks: the timer runs every heartbeat/TICKS_PER_HEARTBEAT; a miss
#: is 2 x heartbeat of silence, detected within 2.5 x heartbeat.
TICKS_PER_HEARTBEAT: Final = 2
MISSED_TICKS: Final = 2 * TICKS_PER_HEARTBEAT


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True, slots=True)
class SendPull:
    """Publish a pull request (``CONSUMER.MSG.NEXT``) with these fields."""

    batch: int
    max_bytes: int
    expires: float
    heartbeat: float
    no_wait: bool = False
    pin_id: str | None = None
    """The pin to send (``id``; ADR-42 pinned client), None for none."""


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """(Re)arm the single timer to call ``on_timer`` at ``deadline`` (replaces any earlier one)."""

    deadline: float


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Cancel the timer."""


@dataclass(frozen=True, slots=True)
class Report:
    """Tell the user about a non-terminal problem (``error_handler`` / warning log)."""

    error: JetStreamError


@dataclass(frozen=True, slots=True)
class CheckConsumer:
    """Look the consumer up and answer with ``on_consumer_checked``."""

    timeout: float | None = None
    """Seconds the look-up may take (a fetch's time left); None: the API's timeout."""


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """Unsubscribe the inbox, then flush (PING/PONG); answer with ``on_unsubscribed``.

    The server goes on serving the pulls it holds until it reads the UNSUB:
    what it sent before then arrives before its PONG, and is still taken in
    (a drain hands it out too).
    """


@dataclass(frozen=True, slots=True)
class Finish:
    """The run is over: deliver what is buffered, then end with ``error`` (None: normally)."""

    error: JetStreamError | None


#: The most distinct warnings a run reports (each once; see ``_warning_key``).
MAX_WARNINGS: Final = 16
#: Write-offs remembered for written_off() (a reconnect storm adds one each; they expire).
WRITTEN_OFF_KEPT: Final = 1024


def _warning_key(kind: StatusKind, error: JetStreamError) -> tuple[StatusKind, int, str]:
    """What makes two warning statuses the same warning (reported once a run).

    The kind and the status code; for a known kind (``409 Exceeded ...``) also
    the text, which names the limit: an unknown status's description is the
    server's own text, so a server varying it is still one warning per code.
    """
    code = getattr(error, "code", 0)
    return (kind, code if type(code) is int else 0, "" if kind is StatusKind.OTHER else str(error))


def _pull_limit(error: JetStreamError | None) -> bool:
    """Whether a 409 names a pull limit (batch, expires, max bytes; not MaxWaiting)."""
    return error is not None and "exceeded maxrequest" in str(error).lower()


#: Statuses after which no earlier pull request is valid any more.
_INVALIDATING: Final = frozenset({StatusKind.LEADERSHIP_CHANGE, StatusKind.SERVER_SHUTDOWN})

Command = SendPull | ArmTimer | CancelTimer | Report | CheckConsumer | Unsubscribe | Finish
Commands = tuple[Command, ...]
_NONE: Final[Commands] = ()


class CheckResult(enum.Enum):
    """Outcome of a consumer check."""

    EXISTS = "exists"
    MISSING = "missing"
    UNAVAILABLE = "unavailable"


class Phase(enum.Enum):
    """Where the run is."""

    NEW = "new"
    RUNNING = "running"
    PAUSED = "paused"  # disconnected
    CHECKING = "checking"  # waiting for a consumer check
    DRAINING = "draining"
    DONE = "done"


# --------------------------------------------------------------------------- engine


class PullEngine:
    """The pending-count state machine of one consume / messages / fetch run."""

    __slots__ = (
        "_check_after",
        "_check_delay",
        "_check_failed",
        "_check_reason",
        "_check_wanted",
        "_expires_at",
        "_hard_end",
        "_last_pinned_pull",
        "_last_pull",
        "_no_responders_at",
        "_pull_at",
        "_quiet_mark",
        "_quiet_since",
        "_repull_delay",
        "_sent_pin",
        "_silent_ticks",
        "_single_repulls",
        "_tick_at",
        "_timer_at",
        "_unsubscribing",
        "_wait_for_empty",
        "_warned",
        "_written_off",
        "buffered_bytes",
        "buffered_messages",
        "deadline",
        "delivered",
        "delivered_bytes",
        "outstanding_bytes",
        "outstanding_messages",
        "phase",
        "pin",
        "pulls",
        "released",
        "requested",
        "settings",
        "unsolicited",
    )

    def __init__(self, settings: PullSettings, pin: PinState | None = None) -> None:
        self.settings = settings
        prio = settings.priority
        #: The pin of a pinned_client consumer's group (shared by the handle's pulls).
        self.pin: PinState | None = None
        if prio is not None and prio.pinned:
            self.pin = pin if pin is not None else PinState()
        self.phase = Phase.NEW
        self.outstanding_messages = 0
        self.outstanding_bytes = 0
        self.buffered_messages = 0
        self.buffered_bytes = 0
        self.requested = 0
        self.delivered = 0
        self.delivered_bytes = 0
        self.released = 0
        self.unsolicited = 0
        # Pulls written off (a reconnect, a 503, a missed heartbeat) that the server
        # may still serve: (until when, messages, bytes); see written_off().
        self._written_off: deque[tuple[float, int, int]] = deque(maxlen=WRITTEN_OFF_KEPT)
        self.pulls = 0
        self.deadline: float | None = None  # single mode: when the fetch gives up
        #: Single mode: when the fetch ends whatever happens (its consumer look-up included).
        self._hard_end: float | None = None
        #: Single mode: when the fetch's ``expires`` runs out (re-pulls get what is left).
        self._expires_at = 0.0
        #: Single mode: pulls sent again after one was dropped (see _single_dropped).
        self._single_repulls = 0
        self._silent_ticks = 0
        self._tick_at: float | None = None
        self._timer_at: float | None = None
        self._check_wanted = False
        self._check_after: float | None = None
        self._check_delay = CHECK_BACKOFF_FIRST
        self._check_reason: JetStreamError | None = None
        #: A check failed since the consumer was last known to exist (reported once).
        self._check_failed = False
        #: ``delivered`` when a 503 with the consumer found was last reported (-1: never).
        self._no_responders_at = -1
        self._pull_at: float | None = None  # a delayed (throttled) re-pull
        self._repull_delay = 0.0
        self._wait_for_empty = False
        #: Draining: the UNSUB's round trip is not over, more messages may still arrive.
        self._unsubscribing = False
        self._warned: set[tuple[StatusKind, int, str]] = set()
        self._last_pull = (0, 0)
        self._last_pinned_pull = (0, 0)  # the last pull sent with a pin id
        self._sent_pin: str | None = None  # and that id
        #: A paced run's silence: since when, and (delivered, pulls) when it began.
        self._quiet_since = 0.0
        self._quiet_mark = (-1, -1)

    # ------------------------------------------------------------- derived

    @property
    def pending_messages(self) -> int:
        """Messages asked for and not yet consumed (outstanding + buffered)."""
        return self.outstanding_messages + self.buffered_messages

    @property
    def pending_bytes(self) -> int:
        """Bytes asked for and not yet consumed (byte mode; outstanding + buffered)."""
        return self.outstanding_bytes + self.buffered_bytes

    @property
    def done(self) -> bool:
        """True once the run has finished."""
        return self.phase is Phase.DONE

    # ------------------------------------------------------------- helpers

    def _pull(self) -> SendPull | None:
        """A pull for the room left, or None if no pull is due."""
        s = self.settings
        if self._wait_for_empty:
            if self.buffered_messages or self.outstanding_messages:
                return None
            self._wait_for_empty = False
        if s.max_bytes:
            if self.pending_bytes >= s.threshold_bytes:
                return None
            room = s.max_bytes - self.pending_bytes
            batch = s.max_messages - self.pending_messages
            if room <= 0 or batch <= 0:
                return None
        else:
            if self.pending_messages >= s.threshold_messages:
                return None
            batch = s.max_messages - self.pending_messages
            room = 0
            if batch <= 0:
                return None
        return self._send(batch, room)

    def _send(
        self,
        batch: int,
        room: int,
        expires: float | None = None,
        heartbeat: float | None = None,
        no_wait: bool | None = None,
    ) -> SendPull:
        """Count and build a pull (``expires``, ``heartbeat``, ``no_wait``: the settings')."""
        s = self.settings
        self.outstanding_messages += batch
        self.outstanding_bytes += room
        self.requested += batch
        self.pulls += 1
        self._pull_at = None
        self._last_pull = (batch, room)
        pin_id = self.pin.id if self.pin is not None else None
        if pin_id is not None:
            self._last_pinned_pull = (batch, room)
            self._sent_pin = pin_id
        return SendPull(
            batch,
            room,
            s.expires if expires is None else expires,
            s.heartbeat if heartbeat is None else heartbeat,
            s.no_wait if no_wait is None else no_wait,
            pin_id,
        )

    def _release(self, messages: int, nbytes: int) -> None:
        self.outstanding_bytes -= min(max(nbytes, 0), self.outstanding_bytes)
        if self.settings.max_bytes and self.outstanding_bytes == 0:
            messages = self.outstanding_messages  # no request is left (see on_message)
        take = min(max(messages, 0), self.outstanding_messages)
        self.outstanding_messages -= take
        self.released += take

    def _release_all(self) -> None:
        self._release(self.outstanding_messages, self.outstanding_bytes)

    def _finish(self, error: JetStreamError | None) -> Commands:
        self.phase = Phase.DONE
        self._timer_at = None
        return (CancelTimer(), Finish(error))

    def _next_timer(self) -> Commands:
        """Arm the timer for the earliest pending deadline (or cancel it)."""
        candidates = [
            t
            for t in (self._tick_at, self.deadline, self._check_after, self._pull_at)
            if t is not None
        ]
        at = min(candidates) if candidates else None
        if at == self._timer_at:
            return _NONE
        self._timer_at = at
        return (CancelTimer(),) if at is None else (ArmTimer(at),)

    def _arm_ticks(self, now: float) -> None:
        hb = self.settings.heartbeat
        self._silent_ticks = 0
        self._tick_at = now + hb / TICKS_PER_HEARTBEAT if hb > 0 else None

    def _write_off(self, now: float) -> None:
        """Release the outstanding pulls, which the server may still serve until they expire."""
        if self.outstanding_messages:
            until = now + self.settings.expires + max(FETCH_GRACE, self.settings.heartbeat)
            self._written_off.append((until, self.outstanding_messages, self.outstanding_bytes))
        self._release_all()

    def written_off(self, now: float) -> tuple[int, int]:
        """Messages and bytes that pulls written off may still deliver (not expired yet).

        A pull written off (after a reconnect, a 503 or a missed heartbeat) stays
        on the server until it expires, and the reconnected client takes its
        messages (the inbox is the same): they arrive unasked, legitimately.
        """
        kept = self._written_off
        while kept and kept[0][0] <= now:
            kept.popleft()
        return sum(k[1] for k in kept), sum(k[2] for k in kept)

    def _request_check(
        self, now: float, reason: JetStreamError | None, *, keep: bool = False
    ) -> Commands:
        """Stop pulling until a consumer check answers (``keep``: the pulls stay counted)."""
        if not keep:
            self._write_off(now)
        self._check_reason = reason
        self._pull_at = None
        if self.phase is Phase.CHECKING and (self._check_wanted or self._check_after):
            return _NONE
        self.phase = Phase.CHECKING
        self._check_wanted = True
        self._check_after = None
        if self._hard_end is not None:
            # A fetch is bounded in time: its look-up gets what is left of it.
            return (CheckConsumer(max(self._hard_end - now, FETCH_CHECK_TIMEOUT)),)
        return (CheckConsumer(),)

    def _repull(self, now: float, productive: bool) -> Commands:
        """Pull again after a status, throttled while pulls stay unproductive."""
        if self.phase is not Phase.RUNNING or self.settings.single:
            return _NONE
        if productive:
            # The request ended normally (408, batch completed, ...): pull at once.
            # _repull_delay > 0 thus means "unproductive since the last message".
            self._repull_delay = 0.0
            pull = self._pull()
            return (pull,) if pull else _NONE
        if self._repull_delay == 0.0:
            self._repull_delay = REPULL_BACKOFF_FIRST
            pull = self._pull()
            return (pull,) if pull else _NONE
        at = now + self._repull_delay
        self._repull_delay = min(self._repull_delay * 2, REPULL_BACKOFF_MAX)
        if self._pull_at is None or at < self._pull_at:
            self._pull_at = at
        return self._next_timer()

    # ------------------------------------------------------------- events

    def start(self, now: float) -> Commands:
        """Begin: send the first pull and arm the timer."""
        if self.phase is not Phase.NEW:
            return _NONE
        self.phase = Phase.RUNNING
        s = self.settings
        if s.single:
            wait = NO_WAIT_TIMEOUT if s.no_wait else s.expires + max(FETCH_GRACE, s.heartbeat)
            self.deadline = now + wait
            self._expires_at = now + s.expires
            self._hard_end = self.deadline + FETCH_CHECK_TIMEOUT
            pull = self._send(s.max_messages, s.max_bytes or s.byte_cap)
        else:
            pull_or_none = self._pull()
            assert pull_or_none is not None
            pull = pull_or_none
        self._arm_ticks(now)
        return (pull, *self._next_timer())

    def on_message(self, size: int) -> Commands:
        """A user message arrived (hot path)."""
        self._silent_ticks = 0
        self._repull_delay = 0.0
        if self.phase is Phase.DONE:
            return _NONE
        self.delivered += 1
        self.delivered_bytes += size
        s = self.settings
        if self.outstanding_messages:
            self.outstanding_messages -= 1
            self.outstanding_bytes -= min(size, self.outstanding_bytes)
            if s.max_bytes and self.outstanding_bytes == 0:
                # Byte mode: the server ends a request whose bytes are used up exactly
                # without any status, so the batch it still had is never delivered.
                self._release_all()
        else:
            self.unsolicited += 1
        self.buffered_messages += 1
        self.buffered_bytes += size
        if s.single and self.phase is Phase.RUNNING and self.outstanding_messages == 0:
            return self._finish(None)
        return _NONE

    def on_consumed(self, size: int) -> Commands:
        """The user took a buffered message (hot path): maybe pull more."""
        if self.buffered_messages:
            self.buffered_messages -= 1
            self.buffered_bytes -= min(size, self.buffered_bytes)
        phase = self.phase
        if phase is Phase.RUNNING and not self.settings.single:
            if self._repull_delay and (self._pull_at is not None or self.outstanding_messages):
                # Pulls are unproductive (e.g. every one gets a 503): one at a time, the
                # throttled re-pull comes with the timer.
                return _NONE
            pull = self._pull()
            return (pull,) if pull is not None else _NONE
        if phase is Phase.DRAINING and self.buffered_messages == 0 and not self._unsubscribing:
            return self._finish(None)
        return _NONE

    def on_messages(self, count: int) -> Commands:
        """``count`` user messages arrived: the same as ``count`` calls of ``on_message(0)``.

        The driver accounts a run of arrivals at once in message mode (one call
        per read instead of one per message: ``messages()``, ``consume()`` and
        fetches); in byte mode it is the plain sequence of calls.
        """
        if count <= 0:
            return _NONE
        s = self.settings
        if s.max_bytes:
            out: Commands = _NONE
            for _ in range(count):
                out += self.on_message(0)
            return out
        self._silent_ticks = 0
        self._repull_delay = 0.0
        if self.phase is Phase.DONE:
            return _NONE
        single_running = s.single and self.phase is Phase.RUNNING
        if single_running:
            # A fetch ends at the message that takes its last outstanding one (at the
            # first one when none is outstanding): later ones find it DONE.
            count = max(1, min(count, self.outstanding_messages))
        self.delivered += count
        take = min(count, self.outstanding_messages)
        self.outstanding_messages -= take
        self.unsolicited += count - take
        self.buffered_messages += count
        if single_running and self.outstanding_messages == 0:
            return self._finish(None)
        return _NONE

    def on_fetched_bytes(self, nbytes: int) -> Commands:
        """A byte-capped fetch (``byte_cap``) received messages of ``nbytes`` bytes in all.

        Sizes as the server counts them (:attr:`Msg.size`). When they use the cap up
        exactly the server ends the pull without a status: the fetch ends here then,
        rather than at its deadline.
        """
        s = self.settings
        if not s.byte_cap or self.phase is not Phase.RUNNING:
            return _NONE
        self.outstanding_bytes -= min(nbytes, self.outstanding_bytes)
        if self.outstanding_bytes == 0:
            self._release_all()
            return self._finish(None)
        return _NONE

    def quiet_consumptions(self) -> int:
        """How many ``on_consumed(0)`` calls in a row, from now, return no command.

        Each of them only takes one message off ``buffered_messages``, so the
        driver may hand out that many messages before telling the engine (with
        :meth:`on_consumed_many`). Always 0 in byte mode, where sizes count.
        """
        s = self.settings
        if s.max_bytes:
            return 0
        phase = self.phase
        buffered = self.buffered_messages
        if phase is Phase.RUNNING and not s.single:
            if self._wait_for_empty:
                return 0
            # A pull follows the consumption that takes pending below the threshold.
            return max(0, min(buffered, self.pending_messages - s.threshold_messages))
        if phase is Phase.DRAINING:
            if self._unsubscribing:
                return buffered  # the UNSUB's round trip finishes the drain
            return max(0, buffered - 1)  # the last one finishes the drain
        return buffered

    def on_consumed_many(self, count: int) -> Commands:
        """The user took ``count`` buffered messages (as ``count`` calls of ``on_consumed(0)``)."""
        quiet = min(max(count, 0), self.quiet_consumptions())
        self.buffered_messages -= quiet
        out: Commands = _NONE
        for _ in range(count - quiet):
            out += self.on_consumed(0)
        return out

    def on_pin_id(self, pin_id: str) -> None:
        """A delivered message carried ``Nats-Pin-Id``: later pulls send it (ADR-42)."""
        if self.pin is not None and self.phase is not Phase.DONE:
            self.pin.pinned(pin_id)

    def on_status(
        self,
        kind: StatusKind,
        severity: Severity,
        pending_messages: int,
        pending_bytes: int,
        error: JetStreamError | None,
        now: float,
    ) -> Commands:
        """A status message arrived (heartbeat, request end, warning or error)."""
        self._silent_ticks = 0
        if self.phase is Phase.DONE:
            return _NONE
        if kind is StatusKind.PIN_MISMATCH and self.pin is not None:
            # Even while draining (the next run must not send it); not a newer pin.
            self.pin.lost(self._sent_pin)
        if kind is StatusKind.HEARTBEAT or kind is StatusKind.FLOW_CONTROL:
            return _NONE
        if self.phase is Phase.DRAINING and severity is not Severity.TERMINAL:
            # stop(drain=True) wrote every request off: how one ends changes nothing.
            return _NONE
        self._release(pending_messages, pending_bytes)
        single = self.settings.single
        if severity is Severity.TERMINAL:
            self._release_all()
            return self._finish(error or ConsumerDeletedError("consumer deleted"))
        if severity is Severity.CHECK_CONSUMER:
            if single:
                self.deadline = None
            return self._request_check(now, error)
        if kind is StatusKind.MAX_BYTES:
            return self._on_max_bytes(pending_bytes, now)
        if kind is StatusKind.PIN_MISMATCH:
            return self._on_pin_lost(pending_messages, pending_bytes, error, now)
        if severity is Severity.WARNING:
            report: Commands = _NONE
            if error is not None:
                key = _warning_key(kind, error)
                if key not in self._warned and len(self._warned) < MAX_WARNINGS:
                    self._warned.add(key)
                    report = (Report(error),)
            if single:
                return self._finish(error)
            # The server refused the request it just received (the last one we
            # sent); a refusal carries no pending headers, so release that one.
            self._release(*self._last_pull)
            if kind is StatusKind.EXCEEDED_LIMIT and _pull_limit(error):
                # Over a pull limit of the consumer (update_consumer may have lowered
                # it since the run began): a check finds the limits the run's own
                # sizes are fitted to, then pulls again (throttled while refused).
                return report + self._request_check(now, error)
            return report + self._repull(now, productive=False)
        # Silent request ends: 404, 408, batch completed, leadership change, shutdown.
        if single:
            if kind in _INVALIDATING and self.delivered == 0:
                return self._single_dropped(kind, now)
            return self._finish(None)
        if kind in _INVALIDATING:
            # nats-server sends these once per reply subject (the new leader's set of
            # pending requests and a stopping server's map of them are keyed by
            # reply), and all the pulls of a run share one inbox: one voids them all.
            self._release_all()
            if kind is StatusKind.LEADERSHIP_CHANGE and self.phase is Phase.CHECKING:
                # A new consumer leader answered one of our pulls: the consumer exists
                # and serves pulls again, which is all the check wants to learn. During
                # the election its CONSUMER.INFO may wait for the API timeout (5 s).
                return self._resume(now, None)
            return self._repull(now, productive=False)
        return self._repull(now, productive=True)

    def _single_dropped(self, kind: StatusKind, now: float) -> Commands:
        """A fetch's pull was voided (409 Leadership Change / Server Shutdown) before any message.

        The server did not say "nothing there": a new consumer leader dropped the
        pull. A ``fetch`` pulls again for the time left of its ``expires`` (at
        once, then backing off as ``next()`` does); out of time it ends empty, as
        an expired one. A ``fetch_no_wait`` pulls again once; dropped again, it
        ends with :class:`ClusterUnavailableError` rather than an empty batch.
        """
        self._release_all()
        s = self.settings
        if s.no_wait:
            if self._single_repulls >= NO_WAIT_REPULLS:
                what = (
                    "Leadership Change"
                    if kind is StatusKind.LEADERSHIP_CHANGE
                    else "Server Shutdown"
                )
                return self._finish(
                    ClusterUnavailableError(
                        409,
                        0,
                        f"{what}: the consumer's leader changed before the no-wait pull "
                        "(sent again once) delivered anything; pull again",
                    )
                )
            return self._single_repull(now)
        if self._repull_delay == 0.0:
            self._repull_delay = REPULL_BACKOFF_FIRST
            return self._single_repull(now)
        at = now + self._repull_delay
        self._repull_delay = min(self._repull_delay * 2, REPULL_BACKOFF_MAX)
        if at > self._expires_at - NEXT_REPULL_MIN_LEFT:
            return self._finish(None)  # no time left for it: as if it had expired
        self._resume_single()
        self._pull_at = at
        return self._next_timer()

    def _single_lost(self, now: float, pending: int) -> Commands:
        """A no-wait fetch got no answer, and its consumer has ``pending`` messages.

        The pull was lost (a consumer leader change): pulled again once; lost
        again, the fetch ends with :class:`JetStreamTimeoutError`, not empty.
        """
        if self._single_repulls >= NO_WAIT_REPULLS:
            return self._finish(
                JetStreamTimeoutError(
                    f"no answer to the no-wait pull within {NO_WAIT_TIMEOUT:g} s (sent again "
                    f"once) although the consumer has {pending} messages pending (a consumer "
                    "leader change?); pull again"
                )
            )
        return self._single_repull(now)

    def _resume_single(self) -> None:
        """A fetch pulls again: back to RUNNING (a check still running is not waited for).

        No heartbeat is owed until the pull is sent (``_single_repull`` arms the ticks).
        """
        self.phase = Phase.RUNNING
        self._check_wanted = False
        self._check_after = None
        self._check_reason = None
        self._tick_at = None

    def _single_repull(self, now: float) -> Commands:
        """Send a fetch's pull again (see _single_dropped, _single_lost)."""
        s = self.settings
        self._pull_at = None
        self._resume_single()
        room = s.max_bytes or s.byte_cap
        if s.no_wait:
            self.deadline = now + NO_WAIT_TIMEOUT
            self._hard_end = self.deadline + FETCH_CHECK_TIMEOUT
            pull = self._send(s.max_messages, room)
        else:
            left = self._expires_at - now
            if left < NEXT_REPULL_MIN_LEFT:
                return self._finish(None)  # its time is up: as if it had expired
            # The deadline stays the first pull's: the re-pull ends within it.
            self.deadline = self._expires_at + max(FETCH_GRACE, s.heartbeat)
            if left >= MIN_EXPIRES:
                pull = self._send(
                    s.max_messages, room, left, fit_heartbeat(s.heartbeat, left), False
                )
            else:
                # Too little left for a pull that waits: what is there now, at once.
                pull = self._send(s.max_messages, room, 0.0, 0.0, True)
        self._single_repulls += 1
        self._arm_ticks(now)
        return (pull, *self._next_timer())

    def _on_pin_lost(
        self,
        pending_messages: int,
        pending_bytes: int,
        error: JetStreamError | None,
        now: float,
    ) -> Commands:
        """423: release the refused request, pull again without the pin (already forgotten)."""
        if not pending_messages and not pending_bytes:
            # "Nats-Pin-Id mismatch" refuses a pull the moment it arrives and carries no
            # pending counts: give back the last pull that was sent with a pin.
            self._release(*self._last_pinned_pull)
            self._last_pinned_pull = (0, 0)
        lost = error if error is not None else PinIdMismatchError("the pinned client lost its pin")
        if self.settings.single:
            return self._finish(lost)
        return (Report(lost), *self._repull(now, productive=False))

    def _on_max_bytes(self, pending_bytes: int, now: float) -> Commands:
        s = self.settings
        too_large = MessageTooLargeError(
            "the next message is larger than max_bytes "
            f"({s.max_bytes or s.byte_cap} bytes): it can never be delivered with these settings"
        )
        if s.single:
            return self._finish(too_large if self.delivered == 0 else None)
        if s.max_bytes and pending_bytes >= s.max_bytes:
            # A full-size request delivered nothing: the message will never fit.
            self._release_all()
            return self._finish(too_large)
        # Too large for the room left: pull again once the buffer is empty.
        self._wait_for_empty = True
        return self._repull(now, productive=True)

    def on_timer(self, now: float) -> Commands:
        """The timer fired: heartbeat tick, fetch deadline, check retry or delayed pull."""
        self._timer_at = None
        if self.phase is Phase.DONE:
            return _NONE
        out: Commands = _NONE
        if self.deadline is not None and now >= self.deadline:
            # The server never closed the fetch: make sure the consumer still exists.
            self.deadline = None
            out += self._request_check(now, None)
        if self._check_after is not None and now >= self._check_after:
            self._check_after = None
            self._check_wanted = True
            out += (CheckConsumer(),)
        if self._pull_at is not None and now >= self._pull_at:
            self._pull_at = None
            if self.settings.single:
                # A fetch's throttled re-pull (see _single_dropped); it arms the timer.
                return out + self._single_repull(now) if self.phase is Phase.RUNNING else out
            if self.phase is Phase.RUNNING:
                pull = self._pull()
                if pull is not None:
                    out += (pull,)
        if self._tick_at is not None and now >= self._tick_at:
            out += self._tick(now)
        return out + self._next_timer()

    def _tick(self, now: float) -> Commands:
        hb = self.settings.heartbeat
        self._tick_at = now + hb / TICKS_PER_HEARTBEAT
        if self.phase is not Phase.RUNNING and self.phase is not Phase.DRAINING:
            self._silent_ticks = 0
            return _NONE
        if self.outstanding_messages == 0 and not self.settings.single:
            # Nothing asked for: the server owes us no heartbeat.
            self._silent_ticks = 0
            return _NONE
        self._silent_ticks += 1
        # A message or status resets the count between two ticks, so the first silent
        # tick may end a partial interval: 2 x heartbeat of silence is only certain
        # after MISSED_TICKS full intervals, at the tick after them.
        if self._silent_ticks <= MISSED_TICKS:
            return _NONE
        self._silent_ticks = 0
        missed = NoHeartbeatError(f"no heartbeat or message for {2 * hb:g} s (heartbeat {hb:g} s)")
        if self.settings.paced:
            return self._paced_silence(now, hb)
        if self.settings.single:
            return self._request_check(now, missed)
        return (Report(missed), *self._request_check(now, missed))

    def _paced_silence(self, now: float, hb: float) -> Commands:
        """2 x heartbeat of silence on a consumer replaying at the original pace.

        The server may be sleeping out a stored gap, holding the pulls: a fetch
        waits for its deadline; a run looks the consumer up quietly and keeps
        its pulls (writing them off pulled a whole batch more at every silence,
        each delivered later), until the silence outlasts ``expires``, after
        which the server would have answered them.
        """
        if self.settings.single:
            return _NONE
        mark = (self.delivered, self.pulls)
        if mark != self._quiet_mark:  # something came (or was sent) since the last silence
            self._quiet_since = now - 2 * hb
            self._quiet_mark = mark
        keep = now - self._quiet_since < self.settings.expires
        return self._request_check(now, None, keep=keep)

    def on_disconnected(self, now: float) -> Commands:
        """The connection dropped: pause the heartbeat timer, write off outstanding pulls."""
        if self.phase is Phase.DONE:
            return _NONE
        self._write_off(now)
        if self.settings.single:
            return self._finish(DisconnectedError("disconnected while fetching"))
        if self.phase is Phase.DRAINING:
            # Nothing more arrives: the subscription is not renewed after a reconnect.
            self._unsubscribing = False
            return _NONE if self.buffered_messages else self._finish(None)
        self.phase = Phase.PAUSED
        self._tick_at = None
        self._pull_at = None
        self._check_after = None
        self._check_wanted = False
        return self._next_timer()

    def on_reconnected(self, now: float) -> Commands:
        """The connection is back: check the consumer, then pull again."""
        if self.phase is not Phase.PAUSED:
            return _NONE
        self._check_delay = CHECK_BACKOFF_FIRST
        return self._request_check(now, None)

    def on_consumer_checked(
        self,
        now: float,
        result: CheckResult,
        error: JetStreamError | None,
        pending: int | None = None,
    ) -> Commands:
        """The answer to CheckConsumer.

        ``pending``: the consumer's ``num_pending`` when the check found it (None:
        not known); a no-wait fetch whose pull went unanswered pulls again when
        messages are pending.
        """
        self._check_wanted = False
        if self.phase is not Phase.CHECKING:
            return _NONE
        if result is CheckResult.MISSING:
            return self._finish(error or ConsumerDeletedError("the consumer no longer exists"))
        if result is CheckResult.UNAVAILABLE:
            if self.settings.single:
                # A fetch is bounded in time: it ends rather than wait for JetStream.
                return self._finish(self._check_reason or error)
            self._check_after = now + self._check_delay
            self._check_delay = min(self._check_delay * 2, CHECK_BACKOFF_MAX)
            report: Commands = _NONE
            if not self._check_failed and error is not None:
                # Pulls wait until the consumer is found again, however long that takes:
                # say so (once, until it is found), or an outage passes in silence.
                report = (Report(error),)
            self._check_failed = True
            return report + self._next_timer()
        if self.settings.single:
            self._check_delay = CHECK_BACKOFF_FIRST
            self._check_after = None
            reason = self._check_reason
            if reason is None and self.settings.no_wait and self.delivered == 0 and pending:
                return self._single_lost(now, pending)
            if isinstance(reason, NoRespondersError):
                # The check found the consumer: "may be gone" would send the user looking
                # for a deletion that did not happen.
                reason = NoRespondersError(
                    "no responders for the pull request (503), although the consumer "
                    "exists: its leader may be changing, or nothing serves this account's "
                    "pulls; retry the fetch"
                )
            return self._finish(reason)
        reason = self._check_reason
        report = _NONE
        if (
            isinstance(reason, NoRespondersError)
            and not self._check_failed  # (the failed check was reported instead)
            and self._no_responders_at != self.delivered
        ):
            # A 503 while the consumer exists: nothing serves its pulls (an account
            # that imports CONSUMER.INFO but not CONSUMER.MSG.NEXT, JetStream
            # unavailable behind the API). Pulling goes on, throttled; say so once,
            # until a message arrives, or a permanent one hangs the run in silence.
            self._no_responders_at = self.delivered
            report = (
                Report(
                    NoRespondersError(
                        "no responders for the pull requests (503), although the consumer "
                        "exists: nothing serves them; pulling goes on"
                    )
                ),
            )
        return report + self._resume(now, reason)

    def _resume(self, now: float, reason: JetStreamError | None) -> Commands:
        """The consumer is known to exist again: leave CHECKING and pull.

        ``reason`` is why the check was wanted; after a 503 or a missed heartbeat
        the re-pull is throttled, after a reconnect or a new leader it is at once.
        """
        self._check_delay = CHECK_BACKOFF_FIRST
        self._check_after = None  # a retry scheduled by an earlier, failed check
        self._check_failed = False
        self.phase = Phase.RUNNING
        self._arm_ticks(now)
        if reason is not None:
            # After a 503 or a missed heartbeat the re-pull is throttled: an outage in
            # which the API answers but every pull gets a 503 is no pull/check loop.
            return self._repull(now, productive=False) + self._next_timer()
        pull = self._pull()
        return ((pull,) if pull else _NONE) + self._next_timer()

    def on_refused(self, error: JetStreamError, inbox: bool, now: float) -> Commands:
        """The server refused a pull request, or (``inbox``) the inbox's subscription.

        A permissions violation: the refused pull never reached the server
        (nothing of it will come), and with a refused inbox nothing can come
        at all. A refused inbox ends the run with ``error``, and so does a
        refused pull of a fetch. ``messages()`` / ``consume()`` release the
        pull (the last one sent: the server refuses a pull as it reads it),
        report ``error`` and pull again after 2 x heartbeat (``expires``
        without heartbeats), when a missed heartbeat would have been reported
        for it: the consumption keeps the pace of a pull that went unanswered,
        and goes on by itself once the user's permissions allow the pull.
        """
        if self.phase is Phase.DONE:
            return _NONE
        if inbox or self.settings.single:
            self._release_all()
            return self._finish(error)
        if self.phase is Phase.DRAINING:
            return _NONE  # every pull was written off already
        self._release(*self._last_pull)
        self._last_pull = (0, 0)
        if self.phase is not Phase.RUNNING:
            # Paused or checking: the reconnect or the check pulls again.
            return (Report(error),)
        s = self.settings
        at = now + (2 * s.heartbeat if s.heartbeat > 0 else s.expires)
        # Unproductive from now on: a consumption does not pull before the timer does.
        self._repull_delay = max(self._repull_delay, REPULL_BACKOFF_FIRST)
        self._pull_at = at if self._pull_at is None else max(self._pull_at, at)
        return (Report(error), *self._next_timer())

    def stop(self, drain: bool, now: float) -> Commands:
        """The user stops: at once, or after consuming what is buffered (drain).

        A drain unsubscribes first (``Unsubscribe``): the server serves the
        pulls it holds until it reads the UNSUB, and what it sent until then is
        buffered and handed out too. It finishes once that round trip is over
        (``on_unsubscribed``) and the buffer is empty.
        """
        if self.phase is Phase.DONE:
            return _NONE
        if not drain:
            self._release_all()
            return self._finish(None)
        if self.phase is Phase.DRAINING:
            return _NONE  # drained already
        self.phase = Phase.DRAINING
        self._release_all()
        self._pull_at = None
        self._check_after = None
        # Nothing is outstanding any more: no fetch deadline, no heartbeat is owed.
        self.deadline = None
        self._tick_at = None
        self._unsubscribing = True
        return (Unsubscribe(), *self._next_timer())

    def on_unsubscribed(self) -> Commands:
        """The drain's UNSUB was flushed (or the connection is gone): nothing more arrives.

        The drain finishes now if the buffer is empty, else with its last consumption.
        """
        if self.phase is not Phase.DRAINING or not self._unsubscribing:
            return _NONE
        self._unsubscribing = False
        return _NONE if self.buffered_messages else self._finish(None)

    def discard_buffer(self) -> None:
        """Forget buffered messages (after a stop without drain)."""
        self.buffered_messages = 0
        self.buffered_bytes = 0

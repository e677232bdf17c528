"""The ADR-37 pull engine, driven without a server, asyncio or a clock.

Two parts:

* focused unit tests: option resolution (``resolve_consume`` / ``resolve_fetch``),
  MAX_BYTES handling, re-pulls after request ends, throttling, heartbeats,
  fetch, drain, outages;
* a hypothesis state machine (:class:`PullEngineMachine`) that runs the engine
  against a small model of the server: a stream of message sizes, the server's
  outstanding pull requests, the client buffer, a model clock with the engine's
  single timer, the connection and consumer checks, and for priority-group
  runs (ADR-42) the server's pin with its 423 refusals. Its invariants are the
  acceptance criteria of the pull engine.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from aiojetstream._errors import (
    APIError,
    BadRequestError,
    ClusterUnavailableError,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    InvalidOptionError,
    JetStreamError,
    JetStreamTimeoutError,
    MessageTooLargeError,
    NoHeartbeatError,
    NoRespondersError,
    PermissionViolationError,
    PinIdMismatchError,
)
from aiojetstream._priority import PinState
from aiojetstream._pull_engine import (
    BYTES_MODE_BATCH,
    CHECK_BACKOFF_MAX,
    FETCH_CHECK_TIMEOUT,
    FETCH_GRACE,
    MAX_WARNINGS,
    MIN_EXPIRES,
    NEXT_REPULL_MIN_LEFT,
    NO_WAIT_REPULLS,
    NO_WAIT_TIMEOUT,
    REPULL_BACKOFF_FIRST,
    REPULL_BACKOFF_MAX,
    ArmTimer,
    CancelTimer,
    CheckConsumer,
    CheckResult,
    Command,
    Commands,
    Finish,
    Phase,
    PriorityConsumer,
    PullEngine,
    PullSettings,
    Report,
    SendPull,
    Unsubscribe,
    fit_heartbeat,
    resolve_consume,
    resolve_fetch,
)
from aiojetstream._status import Severity, StatusKind

K = StatusKind
S = Severity
EPS = 1e-9
#: At most this many SendPull + CheckConsumer per second of an outage.
OUTAGE_RATE = 20


# --------------------------------------------------------------------------- helpers


def engine_state(engine: PullEngine) -> dict[str, object]:
    """Every field of the engine, comparable across copies (errors by type and text)."""
    state: dict[str, object] = {}
    for name in PullEngine.__slots__:
        value = getattr(engine, name)
        if isinstance(value, PinState):
            value = (value.id, value.changes)
        elif isinstance(value, BaseException):
            value = (type(value), str(value))
        state[name] = value
    return state


def pulls(cmds: Iterable[Command]) -> list[SendPull]:
    return [c for c in cmds if isinstance(c, SendPull)]


def finishes(cmds: Iterable[Command]) -> list[Finish]:
    return [c for c in cmds if isinstance(c, Finish)]


def reports(cmds: Iterable[Command]) -> list[Report]:
    return [c for c in cmds if isinstance(c, Report)]


def checks(cmds: Iterable[Command]) -> list[CheckConsumer]:
    return [c for c in cmds if isinstance(c, CheckConsumer)]


def timeout_408() -> APIError:
    return APIError(408, 0, "Request Timeout")


def too_large_409() -> JetStreamError:
    return JetStreamError("a message is larger than the pull request's max_bytes (409 ...)")


def no_responders() -> NoRespondersError:
    return NoRespondersError("no responders for the pull request (503)")


class Sim:
    """A clock and the engine's single timer, for the focused tests."""

    def __init__(self, s: PullSettings, now: float = 0.0) -> None:
        self.engine = PullEngine(s)
        self.now = now
        self.timer: float | None = None
        self.log: list[tuple[float, Command]] = []

    def feed(self, cmds: Commands) -> Commands:
        for cmd in cmds:
            self.log.append((self.now, cmd))
            if isinstance(cmd, ArmTimer):
                assert cmd.deadline > self.now
                self.timer = cmd.deadline
            elif isinstance(cmd, CancelTimer):
                self.timer = None
        return cmds

    def start(self) -> Commands:
        return self.feed(self.engine.start(self.now))

    def message(self, size: int = 0) -> Commands:
        return self.feed(self.engine.on_message(size))

    def consume(self, size: int = 0) -> Commands:
        return self.feed(self.engine.on_consumed(size))

    def status(
        self,
        kind: StatusKind,
        severity: Severity = Severity.SILENT,
        pending_messages: int = 0,
        pending_bytes: int = 0,
        error: JetStreamError | None = None,
    ) -> Commands:
        return self.feed(
            self.engine.on_status(kind, severity, pending_messages, pending_bytes, error, self.now)
        )

    def checked(
        self,
        result: CheckResult,
        error: JetStreamError | None = None,
        pending: int | None = None,
    ) -> Commands:
        return self.feed(self.engine.on_consumer_checked(self.now, result, error, pending))

    def unsubscribed(self) -> Commands:
        return self.feed(self.engine.on_unsubscribed())

    def advance(self, dt: float) -> list[Command]:
        """Move the clock by ``dt``, firing the timer at its deadlines."""
        target = self.now + dt
        out: list[Command] = []
        fired = 0
        while self.timer is not None and self.timer <= target:
            self.now, self.timer = self.timer, None
            out += self.feed(self.engine.on_timer(self.now))
            fired += 1
            assert fired < 100_000, "the timer fires in a busy loop"
        self.now = target
        return out

    def times(self, kind: type) -> list[float]:
        return [t for t, c in self.log if isinstance(c, kind)]


# --------------------------------------------------------------------------- resolve_consume


def test_consume_defaults() -> None:
    s = resolve_consume()
    assert s == PullSettings(
        max_messages=500,
        max_bytes=0,
        threshold_messages=250,
        threshold_bytes=0,
        expires=30.0,
        heartbeat=15.0,
    )
    assert not s.single
    assert not s.no_wait


@pytest.mark.parametrize(
    ("expires", "heartbeat"),
    [(1, 0.5), (1.5, 0.75), (10, 5.0), (30, 15.0), (60, 30.0), (61, 30.0), (3600, 30.0)],
)
def test_consume_heartbeat_is_half_of_expires_capped_at_30s(
    expires: float, heartbeat: float
) -> None:
    s = resolve_consume(expires=expires)
    assert s.expires == float(expires)
    assert s.heartbeat == heartbeat


@pytest.mark.parametrize(
    ("maximum", "threshold"), [(1, 1), (2, 1), (3, 2), (5, 3), (10, 5), (499, 250), (500, 250)]
)
def test_consume_thresholds_default_to_half_rounded_up(maximum: int, threshold: int) -> None:
    assert resolve_consume(max_messages=maximum).threshold_messages == threshold
    b = resolve_consume(max_bytes=maximum)
    assert b.threshold_bytes == threshold
    assert b.threshold_messages == 0


def test_consume_explicit_thresholds() -> None:
    assert resolve_consume(max_messages=10, threshold_messages=10).threshold_messages == 10
    assert resolve_consume(max_messages=10, threshold_messages=1).threshold_messages == 1
    assert resolve_consume(max_bytes=100, threshold_bytes=100).threshold_bytes == 100
    with pytest.raises(InvalidOptionError, match="threshold_messages"):
        resolve_consume(max_messages=10, threshold_messages=11)
    with pytest.raises(InvalidOptionError, match="threshold_messages"):
        resolve_consume(threshold_messages=501)  # against the default 500
    with pytest.raises(InvalidOptionError, match="threshold_bytes"):
        resolve_consume(max_bytes=100, threshold_bytes=101)
    with pytest.raises(InvalidOptionError, match="threshold_bytes"):
        resolve_consume(max_messages=10, threshold_bytes=5)
    with pytest.raises(InvalidOptionError, match="threshold_messages"):
        resolve_consume(max_bytes=100, threshold_messages=5)


def test_consume_byte_mode_pulls_batches_of_a_million() -> None:
    s = resolve_consume(max_bytes=4096)
    assert s.max_messages == BYTES_MODE_BATCH == 1_000_000
    assert s.max_bytes == 4096
    assert s.threshold_bytes == 2048
    sim = Sim(s)
    (pull,) = pulls(sim.start())
    assert pull == SendPull(1_000_000, 4096, 30.0, 15.0)


def test_consume_max_messages_and_max_bytes_are_exclusive() -> None:
    with pytest.raises(InvalidOptionError, match="together"):
        resolve_consume(max_messages=10, max_bytes=100)
    with pytest.raises(InvalidOptionError, match="together"):
        resolve_fetch(max_messages=10, max_bytes=100)


@pytest.mark.parametrize(
    "options",
    [
        {"expires": math.inf},
        {"expires": math.nan},
        {"expires": 1e12},  # over the server's int64 nanoseconds
        {"heartbeat": math.inf},
        {"max_messages": 2**63},
        {"max_bytes": 2**63},
    ],
    ids=str,
)
def test_values_the_server_can_not_take_are_refused(options: dict[str, float]) -> None:
    """Refused before sending (inf escaped as OverflowError from building the pull, and
    numbers over int64 went to the server, which answered 400)."""
    name = next(iter(options))
    for resolve in (resolve_consume, resolve_fetch):
        with pytest.raises(InvalidOptionError, match=name):
            resolve(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize("heartbeat", [0.0, 0.49, 30.01, 31, -1])
def test_consume_heartbeat_bounds(heartbeat: float) -> None:
    with pytest.raises(InvalidOptionError, match="heartbeat"):
        resolve_consume(expires=120, heartbeat=heartbeat)


def test_consume_heartbeat_at_most_half_of_expires() -> None:
    assert resolve_consume(expires=1, heartbeat=0.5).heartbeat == 0.5
    assert resolve_consume(expires=120, heartbeat=30).heartbeat == 30.0
    assert resolve_consume(expires=10, heartbeat=5).heartbeat == 5.0
    with pytest.raises(InvalidOptionError, match="half of expires"):
        resolve_consume(expires=10, heartbeat=5.01)
    with pytest.raises(InvalidOptionError, match="half of expires"):
        resolve_consume(heartbeat=16)  # default expires 30 s


@pytest.mark.parametrize("expires", [0, 0.5, 0.999, -1])
def test_consume_expires_at_least_one_second(expires: float) -> None:
    with pytest.raises(InvalidOptionError, match="expires"):
        resolve_consume(expires=expires)
    assert resolve_consume(expires=1).expires == 1.0


@pytest.mark.parametrize(
    "options",
    [
        {"max_messages": 0},
        {"max_messages": -1},
        {"max_messages": True},
        {"max_messages": 1.5},
        {"max_bytes": 0},
        {"max_bytes": "100"},
        {"threshold_messages": 0},
        {"threshold_bytes": 0},
        {"expires": math.nan},
        {"expires": "30"},
        {"expires": True},
        {"heartbeat": math.nan},
    ],
)
def test_consume_rejects_invalid_values(options: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionError):
        resolve_consume(**options)  # type: ignore[arg-type]


def test_max_messages_1_repulls_after_each_consumed_message() -> None:
    s = resolve_consume(max_messages=1)
    assert s.threshold_messages == 1
    sim = Sim(s)
    assert pulls(sim.start()) == [SendPull(1, 0, 30.0, 15.0)]
    for _ in range(5):
        assert pulls(sim.message()) == []
        assert sim.engine.pending_messages == 1
        assert pulls(sim.consume()) == [SendPull(1, 0, 30.0, 15.0)]
    # and after a request timeout that delivered nothing
    assert pulls(sim.status(K.REQUEST_TIMEOUT, S.SILENT, 1, 0, timeout_408())) == [
        SendPull(1, 0, 30.0, 15.0)
    ]


# --------------------------------------------------------------------------- resolve_fetch


def test_fetch_defaults() -> None:
    s = resolve_fetch()
    assert s == PullSettings(1, 0, 0, 0, 30.0, 5.0, single=True)
    assert resolve_fetch(max_messages=10).max_messages == 10
    b = resolve_fetch(max_bytes=1000)
    assert (b.max_messages, b.max_bytes, b.single) == (BYTES_MODE_BATCH, 1000, True)


@pytest.mark.parametrize(
    ("expires", "heartbeat"), [(1, 0.0), (9.99, 0.0), (10, 5.0), (30, 5.0), (600, 5.0)]
)
def test_fetch_heartbeat_is_5s_from_10s_expiry(expires: float, heartbeat: float) -> None:
    assert resolve_fetch(expires=expires).heartbeat == heartbeat


def test_fetch_heartbeat_validation() -> None:
    assert resolve_fetch(expires=30, heartbeat=0).heartbeat == 0.0
    assert resolve_fetch(expires=2, heartbeat=1).heartbeat == 1.0
    with pytest.raises(InvalidOptionError, match="heartbeat"):
        resolve_fetch(expires=30, heartbeat=0.4)
    with pytest.raises(InvalidOptionError, match="half of expires"):
        resolve_fetch(expires=2, heartbeat=1.5)
    with pytest.raises(InvalidOptionError, match="expires"):
        resolve_fetch(expires=0.5)


def test_fetch_no_wait() -> None:
    s = resolve_fetch(max_messages=3, no_wait=True)
    assert (s.no_wait, s.heartbeat, s.single) == (True, 0.0, True)
    assert resolve_fetch(no_wait=True, expires=0).no_wait  # no expiry needed
    sim = Sim(s)
    (pull,) = pulls(sim.start())
    assert pull.no_wait
    assert sim.engine.deadline == NO_WAIT_TIMEOUT
    assert finishes(sim.status(K.NO_MESSAGES)) == [Finish(None)]


# --------------------------------------------------------------------------- message mode


def test_pulls_for_the_room_left_once_below_threshold() -> None:
    sim = Sim(resolve_consume(max_messages=10, threshold_messages=5))
    assert pulls(sim.start())[0].batch == 10
    for _ in range(10):
        assert sim.message() == ()
    assert sim.engine.pending_messages == 10
    for _ in range(5):
        assert sim.consume() == ()  # pending 9..5: not below the threshold
    (pull,) = pulls(sim.consume())  # pending 4 < 5
    assert pull.batch == 6
    assert sim.engine.pending_messages == 10


def test_408_with_pending_headers_repulls_at_the_threshold() -> None:
    """nats.go "avoid stall on batch completed status": the status itself must pull."""
    sim = Sim(resolve_consume(max_messages=10, threshold_messages=5))
    sim.start()
    for _ in range(4):
        sim.message()
    # 4 buffered + 6 outstanding; nothing is consumed, so no consumption will pull.
    (pull,) = pulls(sim.status(K.REQUEST_TIMEOUT, S.SILENT, 6, 0, timeout_408()))
    assert pull.batch == 6
    assert sim.engine.pending_messages == 10
    # Everything consumed, but the outstanding request keeps pending at 6 >= 5: no
    # consumption pulls. When that request expires, the status itself must pull.
    for _ in range(4):
        assert sim.consume() == ()
    assert sim.engine.pending_messages == 6
    (pull,) = pulls(sim.status(K.REQUEST_TIMEOUT, S.SILENT, 6, 0, timeout_408()))
    assert pull.batch == 10
    assert sim.engine.pending_messages == 10


def test_408_above_threshold_does_not_pull() -> None:
    sim = Sim(resolve_consume(max_messages=10, threshold_messages=5))
    sim.start()
    for _ in range(6):
        sim.message()
    assert pulls(sim.status(K.REQUEST_TIMEOUT, S.SILENT, 4, 0, timeout_408())) == []
    assert sim.engine.pending_messages == 6
    assert pulls(sim.consume()) == []
    (pull,) = pulls(sim.consume())
    assert pull.batch == 6


def test_leadership_change_repulls_at_once_then_throttles() -> None:
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    lc = (K.LEADERSHIP_CHANGE, S.SILENT, 0, 0, APIError(409, 0, "Leadership Change"))
    (pull,) = pulls(sim.status(*lc))
    assert pull.batch == 10
    assert sim.engine.outstanding_messages == 10  # the old request was written off

    # Repeated without a message in between: the re-pull is delayed, growing.
    delay = REPULL_BACKOFF_FIRST
    for _ in range(8):
        assert pulls(sim.status(*lc)) == []
        assert sim.engine.outstanding_messages == 0
        assert sim.timer is not None
        assert sim.timer == pytest.approx(sim.now + delay)
        out = sim.advance(delay)
        assert len(pulls(out)) == 1
        delay = min(delay * 2, REPULL_BACKOFF_MAX)
    assert delay == REPULL_BACKOFF_MAX

    # A message resets the backoff: the next leadership change re-pulls at once.
    sim.message()
    assert len(pulls(sim.status(*lc))) == 1


@pytest.mark.parametrize("kind", [K.LEADERSHIP_CHANGE, K.SERVER_SHUTDOWN])
def test_a_409_that_voids_requests_voids_every_pull_of_the_run(kind: StatusKind) -> None:
    """nats-server sends "409 Leadership Change" / "409 Server Shutdown" once per reply
    subject, with that request's pending counts, and all the pulls of a run share one
    inbox: the first voids them all. Released one request's worth, the other pulls
    stayed outstanding and nothing was pulled until missed heartbeats wrote them off
    (2 x heartbeat, 30 s by default)."""
    sim = Sim(resolve_consume(max_messages=100))
    (first,) = pulls(sim.start())
    assert first.batch == 100
    for _ in range(60):
        sim.message()
    again = [pull for _ in range(60) for pull in pulls(sim.consume())]
    assert [pull.batch for pull in again] == [51]  # below the threshold (50): the room left
    assert (sim.engine.pulls, sim.engine.outstanding_messages) == (2, 91)
    # The first request's 409: 40 of its 100 undelivered.
    (pull,) = pulls(sim.status(kind, S.SILENT, 40, 0, APIError(409, 0, "void")))
    assert pull.batch == 100  # a whole new pull: the other one (51) is void too
    assert sim.engine.outstanding_messages == 100
    assert sim.engine.pending_messages == 100


def test_byte_mode_pulls_below_the_threshold_not_at_it() -> None:
    """As in message mode: no pull while the bytes pending are at the threshold."""
    sim = Sim(resolve_consume(max_bytes=1000))
    assert sim.engine.settings.threshold_bytes == 500
    (first,) = pulls(sim.start())
    assert first.max_bytes == 1000
    for _ in range(10):
        sim.message(100)
    for _ in range(5):
        assert pulls(sim.consume(100)) == []  # 900 ... 500 bytes pending
    assert sim.engine.pending_bytes == 500
    (pull,) = pulls(sim.consume(100))  # 400 < 500
    assert pull.max_bytes == 600


def test_warning_is_reported_once_and_releases_the_refused_pull() -> None:
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    err = APIError(409, 0, "Exceeded MaxWaiting")
    out = sim.status(K.EXCEEDED_LIMIT, S.WARNING, 0, 0, err)
    assert reports(out) == [Report(err)]
    assert len(pulls(out)) == 1  # the first re-pull is immediate
    assert sim.engine.outstanding_messages == 10
    out = sim.status(K.EXCEEDED_LIMIT, S.WARNING, 0, 0, APIError(409, 0, "Exceeded MaxWaiting"))
    assert reports(out) == []  # same warning: reported once
    assert pulls(out) == []  # throttled
    assert sim.engine.outstanding_messages == 0


def test_a_pull_limit_409_checks_the_consumer_then_pulls_again() -> None:
    """update_consumer lowering max_batch under a running messages(): its pulls were
    refused for good (re-pulled every 2 s with the same size). A pull-limit 409 asks
    for a check (the driver refits the run to the limits it finds), which pulls again;
    refused again, the pulls after checks are throttled. MaxWaiting is no size: no check."""
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    err = APIError(409, 0, "Exceeded MaxRequestBatch of 1")
    out = sim.status(K.EXCEEDED_LIMIT, S.WARNING, 0, 0, err)
    assert reports(out) == [Report(err)]
    assert checks(out) == [CheckConsumer()]
    assert pulls(out) == []
    assert len(pulls(sim.checked(CheckResult.EXISTS))) == 1  # at once, the first time
    out = sim.status(K.EXCEEDED_LIMIT, S.WARNING, 0, 0, err)
    assert reports(out) == []  # reported once
    assert checks(out) == [CheckConsumer()]
    assert pulls(sim.checked(CheckResult.EXISTS)) == []  # refused again: throttled
    waiting = APIError(409, 0, "Exceeded MaxWaiting")
    assert checks(sim.status(K.EXCEEDED_LIMIT, S.WARNING, 0, 0, waiting)) == []


def _refused() -> PermissionViolationError:
    return PermissionViolationError("publish", "$JS.API.CONSUMER.MSG.NEXT.S.C")


@pytest.mark.parametrize("no_wait", [False, True])
def test_a_refused_pull_ends_a_fetch_with_its_error(no_wait: bool) -> None:
    sim = Sim(resolve_fetch(max_messages=5, expires=30, no_wait=no_wait))
    sim.start()
    err = _refused()
    out = sim.feed(sim.engine.on_refused(err, False, sim.now))
    assert finishes(out) == [Finish(err)]
    assert pulls(out) == []
    assert sim.timer is None
    assert sim.engine.outstanding_messages == 0
    assert sim.engine.released == 5


@pytest.mark.parametrize("heartbeat", [1.0, 5.0, 15.0])
def test_a_refused_pull_of_a_consumption_is_reported_and_pulled_after_two_heartbeats(
    heartbeat: float,
) -> None:
    """As a pull that went unanswered: reported, pulled again after 2 x heartbeat."""
    sim = Sim(resolve_consume(max_messages=10, expires=30, heartbeat=heartbeat), now=100.0)
    sim.start()
    for _ in range(3):
        refused_at = sim.now
        err = _refused()
        out = sim.feed(sim.engine.on_refused(err, False, sim.now))
        assert reports(out) == [Report(err)]
        assert pulls(out) == []
        assert finishes(out) == []
        assert sim.engine.outstanding_messages == 0  # the refused pull is released
        # Nothing until then (no missed heartbeat either: nothing is outstanding).
        before = sim.advance(2 * heartbeat - 0.01)
        assert pulls(before) == []
        assert reports(before) == []
        assert checks(before) == []
        (pull,) = pulls(sim.advance(0.02))
        assert sim.now - refused_at == pytest.approx(2 * heartbeat, abs=0.02)
        assert pull.batch == 10
        assert not any(isinstance(r.error, NoHeartbeatError) for r in reports(sim.advance(0)))


def test_a_consumption_does_not_pull_before_the_timer_after_a_refused_pull() -> None:
    sim = Sim(resolve_consume(max_messages=10, threshold_messages=5, heartbeat=5, expires=30))
    sim.start()
    for _ in range(3):
        sim.message()
    sim.feed(sim.engine.on_refused(_refused(), False, sim.now))
    for _ in range(3):
        assert pulls(sim.consume()) == []  # the buffer is empty: the timer pulls
    assert pulls(sim.advance(10.01))


def test_a_refused_pull_while_checking_or_paused_is_reported_only() -> None:
    sim = Sim(resolve_consume(max_messages=10, heartbeat=1, expires=30))
    sim.start()
    sim.feed(sim.engine.on_disconnected(sim.now))
    out = sim.feed(sim.engine.on_refused(_refused(), False, sim.now))
    assert [type(c) for c in out] == [Report]
    out = sim.feed(sim.engine.on_reconnected(sim.now))
    assert checks(out)
    assert [type(c) for c in sim.feed(sim.engine.on_refused(_refused(), False, sim.now))] == [
        Report
    ]
    assert pulls(sim.checked(CheckResult.EXISTS))  # the check pulls again


def test_a_refused_pull_while_draining_changes_nothing() -> None:
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    sim.message()
    sim.feed(sim.engine.stop(True, sim.now))
    assert sim.feed(sim.engine.on_refused(_refused(), False, sim.now)) == ()


@pytest.mark.parametrize("single", [False, True])
def test_a_refused_inbox_ends_every_run(single: bool) -> None:
    s = resolve_fetch(max_messages=5, expires=30) if single else resolve_consume(max_messages=5)
    sim = Sim(s)
    sim.start()
    sim.message()
    err = PermissionViolationError("subscription", "_INBOX.x", inbox=True)
    out = sim.feed(sim.engine.on_refused(err, True, sim.now))
    if single:
        # (the fetch of one message had finished already with it)
        assert out == () or finishes(out) == [Finish(err)]
        return
    assert finishes(out) == [Finish(err)]
    assert sim.engine.outstanding_messages == 0
    assert sim.engine.buffered_messages == 1  # still handed out before the error
    assert sim.feed(sim.engine.on_refused(err, True, sim.now)) == ()


def test_unknown_warnings_are_reported_once_per_code_and_bounded() -> None:
    """An unknown status was told apart by its description, the server's own text:
    a server varying it had every one reported and kept (an unbounded set)."""
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    reported: list[Report] = []
    for i in range(200):
        err = APIError(499, 0, f"Something odd #{i}")
        reported += reports(sim.status(K.OTHER, S.WARNING, 0, 0, err))
    assert [r.error.code for r in reported] == [499]  # type: ignore[attr-defined]
    # Distinct codes are distinct warnings, up to MAX_WARNINGS a run (and the four
    # known "Exceeded ..." limits, told apart by their text, among them).
    for text in ("Exceeded MaxWaiting", "Exceeded MaxRequestBatch of 10"):
        reported += reports(sim.status(K.EXCEEDED_LIMIT, S.WARNING, 0, 0, APIError(409, 0, text)))
    assert len(reported) == 3
    for code in range(500, 600):
        reported += reports(sim.status(K.OTHER, S.WARNING, 0, 0, APIError(code, 0, "odd")))
    assert len(reported) == MAX_WARNINGS
    assert len(sim.engine._warned) == MAX_WARNINGS
    assert not sim.engine.done  # warnings never end a messages() / consume() run


def test_terminal_status_finishes_with_its_error() -> None:
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    sim.message()
    err = ConsumerDeletedError("the consumer was deleted (409 Consumer Deleted)")
    out = sim.status(K.CONSUMER_DELETED, S.TERMINAL, 0, 0, err)
    assert finishes(out) == [Finish(err)]
    assert sim.engine.done
    assert sim.engine.outstanding_messages == 0
    assert sim.engine.buffered_messages == 1  # delivered before the error
    assert sim.consume() == ()
    assert sim.status(K.REQUEST_TIMEOUT, S.SILENT, 9, 0, timeout_408()) == ()


# --------------------------------------------------------------------------- byte mode


def test_max_bytes_on_a_full_size_request_finishes_message_too_large() -> None:
    sim = Sim(resolve_consume(max_bytes=100))
    assert pulls(sim.start()) == [SendPull(BYTES_MODE_BATCH, 100, 30.0, 15.0)]
    out = sim.status(K.MAX_BYTES, S.SILENT, BYTES_MODE_BATCH, 100, too_large_409())
    (fin,) = finishes(out)
    assert isinstance(fin.error, MessageTooLargeError)
    assert "100 bytes" in str(fin.error)
    assert pulls(out) == []
    assert sim.engine.done


def test_fetch_no_wait_max_bytes_caps_a_message_mode_fetch() -> None:
    """``fetch_no_wait(n, max_bytes=)`` (the Spark reader's pulls): sent as the pull's
    max_bytes while the fetch counts messages; the server's 409 at the cap ends it
    normally once something came, and with MessageTooLargeError when nothing could;
    messages that use the cap up exactly (the server then says nothing) end it too."""
    capped = resolve_fetch(max_messages=50, max_bytes=1000, no_wait=True)
    assert (capped.max_messages, capped.max_bytes, capped.byte_cap) == (50, 0, 1000)
    with pytest.raises(InvalidOptionError, match="together"):
        resolve_fetch(max_messages=50, max_bytes=1000)  # fetch: one or the other
    sim = Sim(capped)
    (pull,) = pulls(sim.start())
    assert (pull.batch, pull.max_bytes, pull.no_wait) == (50, 1000, True)
    sim.message()
    sim.message()
    assert sim.engine.on_fetched_bytes(600) == ()
    out = sim.status(K.MAX_BYTES, S.SILENT, 48, 400, too_large_409())
    assert finishes(out) == [Finish(None)]
    assert sim.engine.buffered_messages == 2
    sim = Sim(capped)
    sim.start()
    (fin,) = finishes(sim.status(K.MAX_BYTES, S.SILENT, 50, 1000, too_large_409()))
    assert isinstance(fin.error, MessageTooLargeError)
    assert "(1000 bytes)" in str(fin.error)
    # Counted in messages: the fetch ends at its 50th.
    sim = Sim(capped)
    sim.start()
    for _ in range(49):
        assert finishes(sim.message()) == []
        assert sim.engine.on_fetched_bytes(10) == ()
    assert finishes(sim.message()) == [Finish(None)]
    assert sim.engine.on_fetched_bytes(10) == ()  # done already
    # The cap used up exactly: done, though fewer messages came.
    sim = Sim(capped)
    sim.start()
    sim.message()
    assert sim.engine.on_fetched_bytes(400) == ()
    sim.message()
    assert finishes(sim.engine.on_fetched_bytes(600)) == [Finish(None)]
    assert sim.engine.outstanding_messages == 0
    # Not capped: sizes are not counted at all.
    plain = Sim(resolve_fetch(max_messages=5, no_wait=True))
    plain.start()
    plain.message()
    assert plain.engine.on_fetched_bytes(10**9) == ()


def test_max_bytes_on_a_partial_request_waits_for_the_buffer_then_pulls_full() -> None:
    sim = Sim(resolve_consume(max_bytes=100, threshold_bytes=100))
    sim.start()
    sim.message(30)
    sim.message(30)
    # 60 buffered, 40 left in the first request; consuming one pulls 30 more bytes.
    (pull,) = pulls(sim.consume(30))
    assert pull.max_bytes == 30
    assert sim.engine.pending_bytes == 100
    # The next message (50 bytes) fits neither request: both end with MAX_BYTES.
    out = sim.status(K.MAX_BYTES, S.SILENT, BYTES_MODE_BATCH - 2, 40, too_large_409())
    assert finishes(out) == []
    assert pulls(out) == []
    out = sim.status(K.MAX_BYTES, S.SILENT, pull.batch, 30, too_large_409())
    assert finishes(out) == []
    assert pulls(out) == []  # 30 bytes are still buffered: wait until they are consumed
    assert sim.engine.pending_bytes == 30
    (full,) = pulls(sim.consume(30))
    assert full.max_bytes == 100  # a full-size request: the message fits it
    sim.message(50)
    assert sim.engine.pending_bytes == 100


def test_byte_mode_request_used_up_exactly_ends_silently() -> None:
    """The server ends a request whose bytes are used up exactly, without a status."""
    sim = Sim(resolve_consume(max_bytes=100, threshold_bytes=50, heartbeat=1, expires=30))
    sim.start()
    sim.message(60)
    sim.message(40)  # exactly 100 bytes: the request is over (no status follows)
    assert sim.engine.outstanding_messages == 0
    assert sim.engine.outstanding_bytes == 0
    assert sim.engine.pending_messages == 2
    # The server owes no heartbeat now: silence is not a missed heartbeat.
    assert reports(sim.advance(10)) == []
    (pull,) = pulls(sim.consume(60))  # 40 bytes pending < 50
    assert pull == SendPull(BYTES_MODE_BATCH - 1, 60, 30.0, 1.0)
    assert sim.engine.outstanding_messages == BYTES_MODE_BATCH - 1


# --------------------------------------------------------------------------- heartbeats


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    hb=st.sampled_from([0.5, 0.75, 1.0, 2.5, 5.0, 15.0, 30.0]),
    fraction=st.floats(0.0, 1.9),
    start=st.floats(0.0, 1000.0),
)
def test_missed_heartbeat_reported_between_2_and_2_5_heartbeats(
    hb: float, fraction: float, start: float
) -> None:
    sim = Sim(resolve_consume(max_messages=10, expires=60, heartbeat=hb), now=start)
    sim.start()
    first = sim.advance(3 * hb)
    (t_report,) = sim.times(Report)
    assert 2 * hb - EPS <= t_report - start <= 2.5 * hb + EPS
    (report,) = reports(first)
    assert isinstance(report.error, NoHeartbeatError)
    # Missed once: the engine checks the consumer before pulling again.
    assert len(checks(first)) == 1

    # Again after a message at an arbitrary point between two ticks.
    sim = Sim(resolve_consume(max_messages=10, expires=60, heartbeat=hb), now=start)
    sim.start()
    assert reports(sim.advance(fraction * hb)) == []
    sim.message()
    silent_from = sim.now
    sim.advance(3 * hb)
    (t_report,) = sim.times(Report)
    assert 2 * hb - EPS <= t_report - silent_from <= 2.5 * hb + EPS


def test_a_paced_run_checks_the_consumer_quietly_on_a_silence() -> None:
    """replay_policy=original: the server sleeps out a stored gap without a heartbeat.
    A silence of 2 x heartbeat was reported as NoHeartbeatError (and reset the ordered
    consumer, cutting the gap short); a paced run looks the consumer up, quietly."""
    from dataclasses import replace

    sim = Sim(replace(resolve_consume(max_messages=10, expires=20, heartbeat=1.0), paced=True))
    sim.start()
    out = sim.advance(3.0)
    assert reports(out) == []
    assert len(checks(out)) == 1
    # The server still holds the pull (sleeping out the gap): kept, none more sent.
    assert pulls(sim.checked(CheckResult.EXISTS)) == []
    assert sim.engine.outstanding_messages == 10
    # Silent for longer than expires: the pull would have been answered; pulled again.
    sent = []
    for _ in range(16):  # about 35 s: one write-off (after 20 s of silence)
        out = sim.advance(2.0)
        assert reports(out) == []
        if checks(out):
            sent += pulls(sim.checked(CheckResult.EXISTS))
    assert len(sent) == 1
    # A consumer gone still ends the run.
    sim.advance(3.0)
    (fin,) = finishes(sim.checked(CheckResult.MISSING, ConsumerDeletedError("gone")))
    assert isinstance(fin.error, ConsumerDeletedError)
    # A paced fetch waits for its deadline, not for a heartbeat.
    sim = Sim(replace(resolve_fetch(max_messages=5, expires=30), paced=True))
    sim.start()
    out = sim.advance(25.0)
    assert checks(out) == []
    assert finishes(out) == []


def test_heartbeats_keep_the_pull_alive_and_no_report_without_requests() -> None:
    sim = Sim(resolve_consume(max_messages=2, threshold_messages=1, heartbeat=1, expires=30))
    sim.start()
    for _ in range(100):  # a heartbeat every second: never missed
        assert reports(sim.advance(1.0)) == []
        sim.status(K.HEARTBEAT)
    sim.message()
    sim.message()  # the buffer is full: nothing is asked for
    assert reports(sim.advance(60)) == []


def test_disconnect_pauses_heartbeats_and_reconnect_checks_the_consumer() -> None:
    sim = Sim(resolve_consume(max_messages=10, heartbeat=1, expires=30))
    sim.start()
    sim.message()
    out = sim.feed(sim.engine.on_disconnected(sim.now))
    assert pulls(out) == []
    assert sim.engine.outstanding_messages == 0
    assert sim.advance(100) == []  # nothing at all while disconnected
    out = sim.feed(sim.engine.on_reconnected(sim.now))
    assert out == (CheckConsumer(),)
    assert sim.advance(100) == []  # waiting for the check
    (pull,) = pulls(sim.checked(CheckResult.EXISTS))
    assert pull.batch == 9


def test_a_check_retry_is_dropped_once_the_consumer_is_known_to_exist() -> None:
    sim = Sim(resolve_consume(max_messages=10, heartbeat=1, expires=30))
    sim.start()
    for _ in range(2):  # the first check is still running when the second one starts
        sim.feed(sim.engine.on_disconnected(sim.now))
        sim.feed(sim.engine.on_reconnected(sim.now))
    assert len(sim.times(CheckConsumer)) == 2
    sim.checked(CheckResult.UNAVAILABLE, JetStreamTimeoutError("timeout"))  # a retry is due
    assert len(pulls(sim.checked(CheckResult.EXISTS))) == 1
    assert checks(sim.advance(2.0)) == []  # the retry was due at 0.25 s (2 s: no missed hb)


def test_leadership_change_while_checking_pulls_at_once() -> None:
    """RELIABILITY C4: the consumer leader's node was killed; missed heartbeats start a
    check whose CONSUMER.INFO waits for the API timeout during the election. The new
    leader's ``409 Leadership Change`` proves the consumer exists: pull at once (the
    engine before this fix ignored it and stalled until the check timed out, 5 s)."""
    sim = Sim(resolve_consume(max_messages=10, heartbeat=1, expires=30))
    sim.start()
    sim.message()
    out = sim.advance(3.0)
    assert len(reports(out)) == 1
    assert len(checks(out)) == 1
    before = sim.engine.phase
    assert before is Phase.CHECKING
    (pull,) = pulls(sim.status(K.LEADERSHIP_CHANGE, S.SILENT, 0, 0, None))
    assert pull.batch == 9
    assert sim.engine.phase is Phase.RUNNING
    # The check's late answer (a timeout) changes nothing: no retry, no second pull.
    assert sim.checked(CheckResult.UNAVAILABLE, JetStreamTimeoutError("timeout")) == ()
    assert checks(sim.advance(0.9)) == []
    assert pulls(sim.advance(0.9)) == []


# --------------------------------------------------------------------------- fetch


def test_fetch_finishes_when_the_batch_is_filled() -> None:
    sim = Sim(resolve_fetch(max_messages=3, expires=5))
    assert pulls(sim.start()) == [SendPull(3, 0, 5.0, 0.0)]
    assert sim.message() == ()
    assert sim.message() == ()
    assert finishes(sim.message()) == [Finish(None)]
    assert sim.engine.buffered_messages == 3


def test_fetch_bytes_finishes_when_the_bytes_are_used_up() -> None:
    sim = Sim(resolve_fetch(max_bytes=100, expires=30))
    assert pulls(sim.start()) == [SendPull(BYTES_MODE_BATCH, 100, 30.0, 5.0)]
    assert sim.message(60) == ()
    assert finishes(sim.message(40)) == [Finish(None)]


@pytest.mark.parametrize(
    ("kind", "severity", "error"),
    [
        (K.REQUEST_TIMEOUT, S.SILENT, None),
        (K.NO_MESSAGES, S.SILENT, None),
        (K.BATCH_COMPLETED, S.SILENT, None),
        (K.LEADERSHIP_CHANGE, S.SILENT, None),
        (K.EXCEEDED_LIMIT, S.WARNING, APIError(409, 0, "Exceeded MaxRequestBatch of 1")),
        (K.CONSUMER_DELETED, S.TERMINAL, ConsumerDeletedError("deleted")),
        (K.BAD_REQUEST, S.TERMINAL, BadRequestError(400, 0, "Bad Request")),
    ],
)
def test_fetch_ends_on_request_end_statuses(
    kind: StatusKind, severity: Severity, error: JetStreamError | None
) -> None:
    sim = Sim(resolve_fetch(max_messages=5, expires=30))
    sim.start()
    sim.message()
    out = sim.status(kind, severity, 4, 0, error)
    assert finishes(out) == [Finish(error if severity is not S.SILENT else None)]
    assert pulls(out) == []
    assert sim.engine.outstanding_messages == 0


def test_fetch_max_bytes_status() -> None:
    sim = Sim(resolve_fetch(max_bytes=10))
    sim.start()
    (fin,) = finishes(sim.status(K.MAX_BYTES, S.SILENT, BYTES_MODE_BATCH, 10, too_large_409()))
    assert isinstance(fin.error, MessageTooLargeError)
    sim = Sim(resolve_fetch(max_bytes=10))
    sim.start()
    sim.message(4)
    assert finishes(sim.status(K.MAX_BYTES, S.SILENT, BYTES_MODE_BATCH - 1, 6, None)) == [
        Finish(None)
    ]


@pytest.mark.parametrize(("expires", "hb"), [(5.0, 0.0), (30.0, 5.0), (4.0, 2.0)])
def test_fetch_deadline_checks_the_consumer(expires: float, hb: float) -> None:
    s = resolve_fetch(max_messages=5, expires=expires, heartbeat=hb)
    deadline = expires + max(FETCH_GRACE, hb)
    # Heartbeats arrive, but the request is never closed by the server.
    sim = Sim(s)
    sim.start()
    out: list[Command] = []
    while sim.now < deadline + 1 and not checks(out):
        out += sim.advance(min(0.25, hb / 2) if hb else 0.25)
        sim.status(K.HEARTBEAT)
    assert sim.times(CheckConsumer) == [pytest.approx(deadline)]
    # The look-up gets what is left of the fetch's time, not the API's whole timeout.
    assert checks(out) == [CheckConsumer(FETCH_CHECK_TIMEOUT)]
    assert pulls(out) == []
    assert finishes(sim.checked(CheckResult.EXISTS)) == [Finish(None)]

    sim = Sim(s)
    sim.start()
    sim.advance(deadline)
    missing = ConsumerNotFoundError(404, 10014, "consumer not found")
    assert finishes(sim.checked(CheckResult.MISSING, missing)) == [Finish(missing)]


def test_fetch_ends_during_an_outage() -> None:
    """A fetch whose consumer can not be checked ends; it does not retry forever."""
    sim = Sim(resolve_fetch(max_messages=5, expires=30))
    sim.start()
    err = no_responders()
    assert checks(sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, err))
    timeout = JetStreamTimeoutError("consumer info timed out")
    assert finishes(sim.checked(CheckResult.UNAVAILABLE, timeout)) == [Finish(err)]

    sim = Sim(resolve_fetch(max_messages=5, expires=30))
    sim.start()
    sim.advance(30 + 5)
    assert len(sim.times(CheckConsumer)) == 1
    assert finishes(sim.checked(CheckResult.UNAVAILABLE, timeout)) == [Finish(timeout)]


LC = K.LEADERSHIP_CHANGE


@pytest.mark.parametrize("kind", [K.LEADERSHIP_CHANGE, K.SERVER_SHUTDOWN])
def test_fetch_dropped_before_any_message_pulls_again_for_the_time_left(
    kind: StatusKind,
) -> None:
    """A 409 Leadership Change / Server Shutdown before any message is no "nothing there".

    The fetch pulls again for what is left of its expires (heartbeat fitted), at once,
    then backing off as next() does; the deadline stays the first pull's.
    """
    sim = Sim(resolve_fetch(max_messages=5, expires=30))  # heartbeat 5 s
    sim.start()
    deadline = sim.engine.deadline
    sim.advance(10)
    out = sim.status(kind)
    assert finishes(out) == []
    (pull,) = pulls(out)
    assert (pull.batch, pull.max_bytes, pull.heartbeat, pull.no_wait) == (5, 0, 5.0, False)
    assert pull.expires == pytest.approx(20.0)
    assert sim.engine.outstanding_messages == 5
    assert sim.engine.deadline == deadline
    # Again without a message in between: the re-pull is delayed, growing.
    delay = REPULL_BACKOFF_FIRST
    for _ in range(3):
        assert pulls(sim.status(kind)) == []
        assert sim.engine.outstanding_messages == 0
        assert sim.timer == pytest.approx(sim.now + delay)
        (pull,) = pulls(sim.advance(delay))
        assert pull.expires == pytest.approx(30 - sim.now)
        delay *= 2
    # The re-pull ends as a fetch does: the batch filled, or expired.
    sim.message()
    assert finishes(sim.status(K.REQUEST_TIMEOUT, S.SILENT, 4, 0)) == [Finish(None)]
    assert sim.engine.buffered_messages == 1


def test_fetch_dropped_near_its_end() -> None:
    """Less than MIN_EXPIRES left: a no-wait pull; too little for a re-pull: ends empty."""
    sim = Sim(resolve_fetch(max_messages=5, expires=5, heartbeat=1))
    sim.start()
    sim.advance(4.5)
    assert pulls(sim.status(LC)) == [SendPull(5, 0, 0.0, 0.0, no_wait=True)]
    assert finishes(sim.status(K.NO_MESSAGES, S.SILENT, 5, 0)) == [Finish(None)]

    sim = Sim(resolve_fetch(max_messages=5, expires=5, heartbeat=1))
    sim.start()
    sim.advance(2)
    (pull,) = pulls(sim.status(LC))
    assert pull.expires == pytest.approx(3.0)
    assert pull.heartbeat == 1.0
    sim.advance(2.9)  # 0.1 s left: the throttled re-pull (in 50 ms) would come too late
    assert finishes(sim.status(LC)) == [Finish(None)]

    sim = Sim(resolve_fetch(max_messages=5, expires=2, heartbeat=0.5))
    sim.start()
    sim.advance(1.5)
    (pull,) = pulls(sim.status(LC))
    assert (pull.expires, pull.heartbeat, pull.no_wait) == (0.0, 0.0, True)


def test_fetch_dropped_after_a_message_ends_with_it() -> None:
    sim = Sim(resolve_fetch(max_messages=5, expires=30))
    sim.start()
    sim.message()
    out = sim.status(LC)
    assert finishes(out) == [Finish(None)]
    assert pulls(out) == []


def test_fetch_no_wait_dropped_pulls_again_once_then_raises() -> None:
    """fetch_no_wait: one re-pull; a second 409 raises ClusterUnavailableError, not []."""
    sim = Sim(resolve_fetch(max_messages=3, no_wait=True))
    sim.start()
    sim.advance(0.5)
    (pull,) = pulls(sim.status(LC))
    assert (pull.batch, pull.no_wait) == (3, True)
    assert sim.engine.deadline == pytest.approx(0.5 + NO_WAIT_TIMEOUT)
    (fin,) = finishes(sim.status(K.SERVER_SHUTDOWN))
    assert isinstance(fin.error, ClusterUnavailableError)
    assert fin.error.code == 409
    assert "Server Shutdown" in str(fin.error)
    # Answered after the re-pull: the batch is what it got, or empty.
    sim = Sim(resolve_fetch(max_messages=3, no_wait=True))
    sim.start()
    sim.status(LC)
    assert finishes(sim.status(K.NO_MESSAGES, S.SILENT, 3, 0)) == [Finish(None)]


@pytest.mark.parametrize("no_wait", [True, False])
def test_fetch_answered_503_while_the_consumer_exists_does_not_say_it_may_be_gone(
    no_wait: bool,
) -> None:
    """A 503 to a fetch whose check then finds the consumer: the error says it exists."""
    sim = Sim(resolve_fetch(max_messages=3, no_wait=no_wait, expires=5.0))
    sim.start()
    assert checks(sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, error=no_responders()))
    (fin,) = finishes(sim.checked(CheckResult.EXISTS, None, 7))
    assert isinstance(fin.error, NoRespondersError)
    assert "may be gone" not in str(fin.error)
    assert "although the consumer exists" in str(fin.error)
    # Not found: the original reason stands.
    sim = Sim(resolve_fetch(max_messages=3, no_wait=no_wait, expires=5.0))
    sim.start()
    sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, error=no_responders())
    (fin,) = finishes(sim.checked(CheckResult.MISSING, ConsumerNotFoundError(404, 10014, "x")))
    assert isinstance(fin.error, ConsumerNotFoundError)


@pytest.mark.parametrize("pending", [None, 0])
def test_fetch_no_wait_unanswered_with_nothing_pending_ends_empty(pending: int | None) -> None:
    sim = Sim(resolve_fetch(max_messages=3, no_wait=True))
    sim.start()
    assert checks(sim.advance(NO_WAIT_TIMEOUT))
    assert finishes(sim.checked(CheckResult.EXISTS, None, pending)) == [Finish(None)]


def test_fetch_no_wait_unanswered_with_messages_pending_pulls_again_once() -> None:
    """A no-wait pull lost (no answer) while messages are pending: once more, then raise."""
    sim = Sim(resolve_fetch(max_messages=3, no_wait=True))
    sim.start()
    assert checks(sim.advance(NO_WAIT_TIMEOUT))
    (pull,) = pulls(sim.checked(CheckResult.EXISTS, None, 7))
    assert (pull.batch, pull.no_wait) == (3, True)
    assert sim.engine.outstanding_messages == 3
    sim.message()
    sim.message()
    assert finishes(sim.message()) == [Finish(None)]

    sim = Sim(resolve_fetch(max_messages=3, no_wait=True))
    sim.start()
    sim.advance(NO_WAIT_TIMEOUT)
    sim.checked(CheckResult.EXISTS, None, 7)
    (check,) = checks(sim.advance(NO_WAIT_TIMEOUT))
    assert check.timeout == FETCH_CHECK_TIMEOUT
    (fin,) = finishes(sim.checked(CheckResult.EXISTS, None, 7))
    assert isinstance(fin.error, JetStreamTimeoutError)
    assert "7 messages pending" in str(fin.error)

    # A plain fetch whose time is up ends empty, pending or not (it waited expires).
    sim = Sim(resolve_fetch(max_messages=3, expires=2))
    sim.start()
    assert checks(sim.advance(2 + FETCH_GRACE))
    assert finishes(sim.checked(CheckResult.EXISTS, None, 7)) == [Finish(None)]


def test_fetch_missed_heartbeat_checks_then_fails() -> None:
    sim = Sim(resolve_fetch(max_messages=5, expires=30))  # heartbeat 5 s
    sim.start()
    out = sim.advance(12.5)
    assert reports(out) == []
    (t,) = sim.times(CheckConsumer)
    assert 10 - EPS <= t <= 12.5 + EPS
    (fin,) = finishes(sim.checked(CheckResult.EXISTS))
    assert isinstance(fin.error, NoHeartbeatError)


def test_fetch_disconnect_fails() -> None:
    sim = Sim(resolve_fetch(max_messages=5))
    sim.start()
    (fin,) = finishes(sim.feed(sim.engine.on_disconnected(0.0)))
    assert fin.error is not None
    assert type(fin.error).__name__ == "DisconnectedError"


# --------------------------------------------------------------------------- stop / drain


def test_stop_without_drain_finishes_at_once() -> None:
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    sim.message()
    sim.engine.discard_buffer()
    assert finishes(sim.feed(sim.engine.stop(False, 0.0))) == [Finish(None)]
    assert sim.engine.buffered_messages == 0
    assert sim.feed(sim.engine.stop(False, 0.0)) == ()


def test_drain_finishes_once_the_buffer_is_consumed() -> None:
    sim = Sim(resolve_consume(max_messages=10, heartbeat=1, expires=30))
    sim.start()
    sim.message()
    sim.message()
    out = sim.feed(sim.engine.stop(True, 0.0))
    assert finishes(out) == []
    assert [c for c in out if isinstance(c, Unsubscribe)] == [Unsubscribe()]
    assert sim.engine.outstanding_messages == 0
    # Late statuses and a late message from the written-off request change nothing.
    assert sim.status(K.REQUEST_TIMEOUT, S.SILENT, 8, 0, timeout_408()) == ()
    assert sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders()) == ()
    assert sim.message() == ()
    assert sim.engine.unsolicited == 1
    assert sim.advance(100) == []
    assert sim.unsubscribed() == ()  # messages are still buffered
    assert sim.consume() == ()
    assert sim.consume() == ()
    assert finishes(sim.consume()) == [Finish(None)]


def test_drain_of_a_fetch_waits_for_the_buffer() -> None:
    sim = Sim(resolve_fetch(max_messages=5, expires=30))
    sim.start()
    sim.message()
    assert finishes(sim.feed(sim.engine.stop(True, 0.0))) == []
    assert finishes(sim.status(K.REQUEST_TIMEOUT, S.SILENT, 4, 0, timeout_408())) == []
    assert sim.message() == ()  # a late message is buffered, not a filled batch
    out = sim.advance(100)  # neither the deadline nor heartbeats matter any more
    assert checks(out) == []
    assert finishes(out) == []
    assert sim.unsubscribed() == ()
    assert sim.consume() == ()
    assert finishes(sim.consume()) == [Finish(None)]


def test_drain_with_an_empty_buffer_finishes_once_unsubscribed() -> None:
    """The server serves the pulls it holds until it reads the UNSUB: the drain ends
    only after that round trip, with what arrived meanwhile handed out."""
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    out = sim.feed(sim.engine.stop(True, 0.0))
    assert finishes(out) == []
    assert Unsubscribe() in out
    assert sim.feed(sim.engine.stop(True, 0.0)) == ()  # a second drain: nothing new
    assert sim.unsubscribed() == (CancelTimer(), Finish(None))
    assert sim.unsubscribed() == ()


def test_drain_takes_what_arrives_before_the_unsubscribe_is_flushed() -> None:
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    sim.feed(sim.engine.stop(True, 0.0))
    # Sent by the server before it read the UNSUB: buffered, and the drain waits for it.
    assert sim.message() == ()
    assert sim.engine.quiet_consumptions() == 1
    assert sim.consume() == ()  # the buffer is empty, but the round trip is not over
    assert sim.message() == ()
    assert sim.unsubscribed() == ()
    assert sim.engine.quiet_consumptions() == 0
    assert finishes(sim.consume()) == [Finish(None)]


def test_drain_disconnected_before_the_unsubscribe_is_flushed() -> None:
    """Nothing more arrives once the connection dropped: the drain ends with the buffer."""
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    sim.message()
    sim.feed(sim.engine.stop(True, 0.0))
    assert sim.feed(sim.engine.on_disconnected(0.0)) == ()
    assert finishes(sim.consume()) == [Finish(None)]
    assert sim.unsubscribed() == ()
    sim = Sim(resolve_consume(max_messages=10))
    sim.start()
    sim.feed(sim.engine.stop(True, 0.0))
    assert finishes(sim.feed(sim.engine.on_disconnected(0.0))) == [Finish(None)]


# --------------------------------------------------------------------------- outages


def _max_per_second(times: list[float]) -> int:
    """The largest number of events in any window of 1 s."""
    times = sorted(times)
    best = 0
    j = 0
    for i, t in enumerate(times):
        while times[j] < t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_outage_checks_back_off() -> None:
    """JetStream is down: every consumer check fails; checks back off to 5 s."""
    sim = Sim(resolve_consume(max_messages=10, heartbeat=1, expires=30))
    sim.start()
    for _ in range(5):
        sim.message()
    sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())
    seen = 0
    for step in range(6000):  # 60 s of model time, a 10 ms step
        new = sim.log[seen:]
        seen = len(sim.log)
        for _ in checks(c for _, c in new):
            sim.checked(CheckResult.UNAVAILABLE, JetStreamTimeoutError("timeout"))
        if step < 5:
            sim.consume()  # consuming pulls nothing while the consumer is being checked
        sim.advance(0.01)
    assert sim.times(SendPull) == [0.0]
    sent = sim.times(CheckConsumer)
    assert _max_per_second(sent) <= 3
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert gaps[:5] == pytest.approx([0.25, 0.5, 1.0, 2.0, 4.0], abs=0.011)
    assert max(gaps) <= CHECK_BACKOFF_MAX + 0.011
    # JetStream is back: the consumer exists, pulling resumes at once.
    sim.checked(CheckResult.EXISTS)
    assert pulls(c for _, c in sim.log[seen:]) == [SendPull(10, 0, 30.0, 1.0)]


def test_a_failed_check_is_reported_once_per_outage() -> None:
    """A 503 (or a reconnect) starts a check; while JetStream does not answer the
    run pulls nothing: the first failed check goes to the error handler (it said
    nothing, however long the outage), the retries do not, and the next outage is
    reported again once the consumer was found in between."""
    sim = Sim(resolve_consume(max_messages=10, heartbeat=1, expires=30))
    sim.start()
    sim.message()
    assert reports(sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())) == []
    first = JetStreamTimeoutError("consumer info timed out")
    assert reports(sim.checked(CheckResult.UNAVAILABLE, first)) == [Report(first)]
    for _ in range(3):
        sim.advance(CHECK_BACKOFF_MAX)
        again = JetStreamTimeoutError("consumer info timed out again")
        assert reports(sim.checked(CheckResult.UNAVAILABLE, again)) == []
    # A reconnect in the same outage: still the same outage.
    sim.feed(sim.engine.on_disconnected(sim.now))
    sim.feed(sim.engine.on_reconnected(sim.now))
    assert reports(sim.checked(CheckResult.UNAVAILABLE, again)) == []
    sim.advance(CHECK_BACKOFF_MAX)
    assert pulls(sim.checked(CheckResult.EXISTS))
    # Found again; the next outage is reported once more.
    sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())
    later = JetStreamTimeoutError("consumer info timed out later")
    assert reports(sim.checked(CheckResult.UNAVAILABLE, later)) == [Report(later)]


def test_no_responders_while_the_consumer_exists_is_reported_once() -> None:
    """Every pull gets a 503 but the consumer exists (an account that imports
    CONSUMER.INFO but not CONSUMER.MSG.NEXT): the run used to retry in silence for
    ever. The first check that finds the consumer reports NoRespondersError; the
    next ones do not, until a message arrived. Pulling goes on (not terminal)."""
    sim = Sim(resolve_consume(max_messages=10, heartbeat=1, expires=30))
    sim.start()
    found: list[Report] = []
    for _ in range(6):
        assert reports(sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())) == []
        out = sim.checked(CheckResult.EXISTS)
        found += reports(out)
        pulled = pulls(out) or pulls(sim.advance(REPULL_BACKOFF_MAX))
        assert pulled  # it keeps pulling
    assert len(found) == 1
    assert isinstance(found[0].error, NoRespondersError)
    assert "consumer exists" in str(found[0].error)
    assert not sim.engine.done
    # A message arrived: the next run of 503s is reported again, once.
    sim.message()
    sim.consume()
    sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())
    assert len(reports(sim.checked(CheckResult.EXISTS))) == 1
    sim.advance(REPULL_BACKOFF_MAX)
    sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())
    assert reports(sim.checked(CheckResult.EXISTS)) == []


@pytest.mark.parametrize("threshold", [1, 5, 10])
def test_outage_every_pull_answered_no_responders_is_rate_limited(threshold: int) -> None:
    """JetStream answers the API (the consumer exists) but every pull gets a 503."""
    sim = Sim(resolve_consume(max_messages=10, threshold_messages=threshold, heartbeat=1))
    sim.start()
    for _ in range(10):
        sim.message()
    buffered = 10
    seen = 0
    for _ in range(2000):  # 20 s of model time, a 10 ms step
        new = sim.log[seen:]
        seen = len(sim.log)
        for _, cmd in new:
            if isinstance(cmd, SendPull):
                sim.status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())
            elif isinstance(cmd, CheckConsumer):
                sim.checked(CheckResult.EXISTS)
        if buffered:
            sim.consume()
            buffered -= 1
        sim.advance(0.01)
    sent = sim.times(SendPull) + sim.times(CheckConsumer)
    assert len(sim.times(SendPull)) >= 5  # it keeps trying
    assert _max_per_second(sent) <= OUTAGE_RATE


# --------------------------------------------------------------------------- batched accounting
#
# The driver tells the engine a read's arrivals with one on_messages(count), and
# hands out quiet_consumptions() messages before telling it with
# on_consumed_many(count). Both must be exactly the one-message-at-a-time calls,
# from any state a run can reach, unsolicited messages and drains included.

_WALK = st.lists(
    st.sampled_from(
        [
            "msg",
            "msg",
            "msg",
            "consume",
            "consume",
            "408",
            "pull_408",
            "timer",
            "drain",
            "disconnect",
            "reconnect",
            "exists",
            "503",
            "leadership",
            "unsubscribed",
        ]
    ),
    max_size=60,
)


def _walk_step(engine: PullEngine, step: str, now: float) -> None:
    if step == "msg":
        engine.on_message(0)
    elif step == "consume":
        if engine.buffered_messages:
            engine.on_consumed(0)
    elif step in ("408", "pull_408"):
        pending = engine.outstanding_messages if step == "pull_408" else 1
        engine.on_status(K.REQUEST_TIMEOUT, S.SILENT, pending, 0, None, now)
    elif step == "timer":
        engine.on_timer(now)
    elif step == "drain":
        engine.stop(True, now)
    elif step == "disconnect":
        engine.on_disconnected(now)
    elif step == "reconnect":
        engine.on_reconnected(now)
    elif step == "exists":
        engine.on_consumer_checked(now, CheckResult.EXISTS, None)
    elif step == "503":
        engine.on_status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders(), now)
    elif step == "unsubscribed":
        engine.on_unsubscribed()
    else:
        engine.on_status(K.LEADERSHIP_CHANGE, S.SILENT, 0, 0, None, now)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mm=st.integers(1, 40),
    tm=st.none() | st.integers(1, 40),
    single=st.booleans(),
    walk=_WALK,
    count=st.integers(0, 120),
)
def test_batched_accounting_equals_one_message_at_a_time(
    mm: int, tm: int | None, single: bool, walk: list[str], count: int
) -> None:
    if single:
        s = resolve_fetch(max_messages=mm, expires=30)
    else:
        s = resolve_consume(max_messages=mm, threshold_messages=min(tm or mm, mm))
    engine = PullEngine(s)
    engine.start(0.0)
    for i, step in enumerate(walk):
        _walk_step(engine, step, 0.5 * (i + 1))
        # on_messages(count) == count x on_message(0)
        batched, single_calls = copy.deepcopy(engine), copy.deepcopy(engine)
        expected: Commands = ()
        for _ in range(count):
            expected += single_calls.on_message(0)
        assert batched.on_messages(count) == expected
        assert engine_state(batched) == engine_state(single_calls)
        # the quiet consumptions return nothing; on_consumed_many == count x on_consumed(0)
        quiet = engine.quiet_consumptions()
        assert 0 <= quiet <= engine.buffered_messages
        probe = copy.deepcopy(engine)
        for _ in range(quiet):
            buffered = probe.buffered_messages
            before = engine_state(probe)
            assert probe.on_consumed(0) == ()
            assert probe.buffered_messages == buffered - 1
            after = engine_state(probe)
            del before["buffered_messages"], after["buffered_messages"]
            assert after == before
        many = min(count, engine.buffered_messages)
        batched, single_calls = copy.deepcopy(engine), copy.deepcopy(engine)
        expected = ()
        for _ in range(many):
            expected += single_calls.on_consumed(0)
        assert batched.on_consumed_many(many) == expected
        assert engine_state(batched) == engine_state(single_calls)


def test_quiet_consumptions_in_byte_mode_are_none() -> None:
    engine = PullEngine(resolve_consume(max_bytes=1000))
    engine.start(0.0)
    engine.on_message(10)
    assert engine.quiet_consumptions() == 0


# --------------------------------------------------------------------------- state machine


@dataclass
class _Request:
    """A pull request as the server holds it."""

    batch: int
    nbytes: int  # 0 in message mode
    fresh: bool = True  # nothing delivered yet
    pin_id: str | None = None  # the pin the pull carried (ADR-42)


@st.composite
def _expiry(draw: st.DrawFn, *, fetch: bool) -> tuple[float, float | None]:
    expires = draw(
        st.sampled_from([1.0, 2.0, 5.0, 10.0, 30.0, 60.0]) | st.floats(1.0, 60.0, allow_nan=False)
    )
    hb: float | None = None
    choice = draw(st.integers(0, 2))
    if choice == 1:
        hb = draw(st.floats(0.5, min(30.0, expires / 2)))
    elif choice == 2 and fetch:
        hb = 0.0
    return expires, hb


@st.composite
def pull_settings(draw: st.DrawFn) -> PullSettings:
    # consume runs last longer and do more: draw them three times as often
    modes = ["messages"] * 3 + ["bytes"] * 3 + ["fetch", "fetch_bytes", "no_wait"]
    mode = draw(st.sampled_from(modes))
    # ADR-42: half of the runs pull for a priority group, most of them pinned
    policy = draw(st.sampled_from([None, None, None, "pinned_client", "pinned_client", "overflow"]))
    consumer = None if policy is None else PriorityConsumer(("jobs",), policy)
    group = None if policy is None else "jobs"
    min_pending = draw(st.none() | st.integers(1, 5)) if policy == "overflow" else None
    if mode == "messages":
        mm = draw(st.integers(1, 50))
        tm = draw(st.none() | st.integers(1, mm))
        expires, hb = draw(_expiry(fetch=False))
        return resolve_consume(
            max_messages=mm,
            threshold_messages=tm,
            expires=expires,
            heartbeat=hb,
            consumer=consumer,
            group=group,
            min_pending=min_pending,
        )
    if mode == "bytes":
        mb = draw(st.sampled_from([1, 2, 3, 10, 100]) | st.integers(1, 400))
        tb = draw(st.none() | st.integers(1, mb))
        expires, hb = draw(_expiry(fetch=False))
        return resolve_consume(
            max_bytes=mb,
            threshold_bytes=tb,
            expires=expires,
            heartbeat=hb,
            consumer=consumer,
            group=group,
            min_pending=min_pending,
        )
    if mode == "no_wait":
        return resolve_fetch(
            max_messages=draw(st.integers(1, 20)),
            no_wait=True,
            consumer=consumer,
            group=group,
            min_pending=min_pending,
        )
    expires, hb = draw(_expiry(fetch=True))
    if mode == "fetch":
        return resolve_fetch(
            max_messages=draw(st.integers(1, 20)),
            expires=expires,
            heartbeat=hb,
            consumer=consumer,
            group=group,
            min_pending=min_pending,
        )
    mb = draw(st.sampled_from([1, 2, 3, 10, 100]) | st.integers(1, 400))
    return resolve_fetch(
        max_bytes=mb,
        expires=expires,
        heartbeat=hb,
        consumer=consumer,
        group=group,
        min_pending=min_pending,
    )


_TERMINALS: list[tuple[StatusKind, type[JetStreamError]]] = [
    (K.CONSUMER_DELETED, ConsumerDeletedError),
    (K.PUSH_BASED, InvalidOptionError),
    (K.BAD_REQUEST, BadRequestError),
]


class PullEngineMachine(RuleBasedStateMachine):
    """The engine against a model of the server, the buffer, the clock and the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.settings = resolve_consume()
        self.engine = PullEngine(self.settings)
        self.now = 0.0
        self.timer: float | None = None  # the last ArmTimer deadline, until cancelled/fired
        self.stream: list[int] = []  # sizes of the messages the consumer can deliver
        self.requests: list[_Request] = []  # the server's outstanding pull requests
        self.last_request: _Request | None = None  # from the latest SendPull
        self.buffer: list[int] = []  # delivered, not yet consumed
        self.connected = True
        self.start_time = 0.0
        self.finished = False
        self.finish_error: JetStreamError | None = None
        self.stopped = False
        self.draining = False
        # stop(drain=True) unsubscribes: the engine waits for the UNSUB's round trip
        # (unsubscribing; not any more after a disconnect), which the driver answers
        # with on_unsubscribed (unsub_pending until then)
        self.unsubscribing = False
        self.unsub_pending = False
        self.terminal_error: JetStreamError | None = None
        self.steps = 0
        self.horizon = 0
        self.trouble = 0
        self.pending_checks = 0  # CheckConsumer commands not answered yet
        self.checks_sent = 0
        self.pulls_sent = 0
        self.expected_unsolicited = 0
        # fetches: messages the server delivered to the run; why the fetch may pull
        # again now ("409": its pull was voided before any message; "lost": a no-wait
        # pull went unanswered while messages are pending), the re-pulls seen, the
        # deadline of the last pull (the consumer is checked after it), the checks
        # since that pull, and whether the check running is a no-wait deadline's
        self.delivered = 0
        self.repull_due: str | None = None
        self.single_repulls = 0
        self.single_deadline = 0.0
        self.checks_since_pull = 0
        self.lost_check = False
        # what the server lost without a word (lose_pull): the engine still counts it
        # outstanding until it writes it off (messages, bytes)
        self.lost = (0, 0)
        # heartbeats
        self.last_activity = 0.0  # last message or status handed to the engine
        self.owed_since: float | None = None  # since when a request is outstanding
        self.last_report: float | None = None
        # outages: "api" (checks unavailable) or "pulls" (every pull gets a 503)
        self.outage: str | None = None
        self.outage_sends: list[float] = []
        # violations, one list per invariant
        self.bad_pulls: list[str] = []
        self.bad_terminal: list[str] = []
        self.bad_heartbeats: list[str] = []
        self.bad_drain: list[str] = []
        self.bad_single: list[str] = []
        self.bad_timers: list[str] = []
        self.bad_checks: list[str] = []
        self.after_finish: list[str] = []
        # ADR-42 pinned client: the server's pin ("p<n>" this client's, "f<n>" another
        # client's, None while nothing is pinned) and the pin the client must send
        self.server_pin: str | None = None
        self.pin_count = 0
        self.client_pin: str | None = None
        self.last_pinned_request: _Request | None = None  # the latest pull with a pin
        self.pins_lost = 0
        self.bad_pins: list[str] = []
        # permissions violations (refuse_pull): the pull cadence after a refused pull
        # (no pull before refused_until, unless something else happened meanwhile)
        self.refused_until: float | None = None
        self.bad_refusals: list[str] = []

    # ------------------------------------------------------------- plumbing

    @property
    def byte_mode(self) -> bool:
        return self.settings.max_bytes > 0

    @property
    def live(self) -> bool:
        return not self.finished

    @property
    def mature(self) -> bool:
        """The run may end now (see ``start``)."""
        return self.steps >= self.horizon

    @property
    def ends_a_fetch_ok(self) -> bool:
        """An event that ends a fetch may happen (see ``start``)."""
        return self.mature or not self.settings.single

    @property
    def server_up(self) -> bool:
        return self.live and self.connected and self.outage is None

    @property
    def pinned(self) -> bool:
        prio = self.settings.priority
        return prio is not None and prio.pinned

    def _stale(self, req: _Request) -> bool:
        """The request carries a pin that is not the server's: it is refused (423)."""
        return req.pin_id is not None and req.pin_id != self.server_pin

    def _deliverable(self) -> list[_Request]:
        return [r for r in self.requests if not self._stale(r)]

    def _new_pin(self, prefix: str) -> str:
        self.pin_count += 1
        return f"{prefix}{self.pin_count}"

    def _esize(self, size: int) -> int:
        """What the driver hands the engine: the size in byte mode, 0 otherwise."""
        return size if self.byte_mode else 0

    def _drop(self, req: _Request) -> None:
        self.requests.remove(req)
        if not self.requests:
            self.owed_since = None

    def _drop_all(self) -> None:
        self.requests.clear()
        self.owed_since = None

    def _feed(self, cmds: Commands, event: str) -> Commands:
        """Carry out the engine's commands as the driver would, checking each one."""
        for cmd in cmds:
            if self.finished:
                self.after_finish.append(f"{cmd!r} after Finish (event {event})")
                continue
            if isinstance(cmd, SendPull):
                self._on_pull(cmd, event)
            elif isinstance(cmd, ArmTimer):
                if not cmd.deadline > self.now:
                    self.bad_timers.append(f"{event}: timer armed at {cmd.deadline} <= {self.now}")
                self.timer = cmd.deadline
            elif isinstance(cmd, CancelTimer):
                self.timer = None
            elif isinstance(cmd, Report):
                self._on_report(cmd.error, event)
            elif isinstance(cmd, CheckConsumer):
                self.pending_checks += 1
                self.checks_sent += 1
                self.checks_since_pull += 1
                if self.engine.phase is not Phase.CHECKING:
                    self.bad_checks.append(
                        f"{event} at t={self.now:g}: CheckConsumer, but the engine is "
                        f"{self.engine.phase.name}, not waiting for it"
                    )
                if self.outage is not None:
                    self.outage_sends.append(self.now)
                if self.stopped:
                    self.bad_drain.append(f"{event}: CheckConsumer after stop()")
            elif isinstance(cmd, Unsubscribe):
                if not self.draining:
                    self.bad_drain.append(f"{event}: Unsubscribe without a drain")
                if self.unsub_pending:
                    self.bad_drain.append(f"{event}: a second Unsubscribe")
                self.unsubscribing = self.unsub_pending = True
            elif isinstance(cmd, Finish):
                self.finished = True
                self.finish_error = cmd.error
                if self.draining and cmd.error is None and self.buffer:
                    self.bad_drain.append(
                        f"{event}: Finish(None) while draining with {len(self.buffer)} "
                        "message(s) still buffered"
                    )
                if self.draining and cmd.error is None and self.unsubscribing:
                    self.bad_drain.append(
                        f"{event}: Finish(None) while draining before the UNSUB was flushed"
                    )
                if self.terminal_error is not None and cmd.error is not self.terminal_error:
                    self.bad_terminal.append(f"{event}: finished with {cmd.error!r}")
            else:  # pragma: no cover
                raise AssertionError(f"unknown command {cmd!r}")
        return cmds

    def _on_pull(self, cmd: SendPull, event: str) -> None:
        s = self.settings
        where = f"{event} at t={self.now:g}: {cmd!r}"
        if cmd.batch < 1:
            self.bad_pulls.append(f"batch < 1 ({where})")
        if cmd.batch > s.max_messages:
            self.bad_pulls.append(f"batch above max_messages ({where})")
        if self.byte_mode and not 1 <= cmd.max_bytes <= s.max_bytes:
            self.bad_pulls.append(f"max_bytes not within 1..{s.max_bytes} ({where})")
        if not self.byte_mode and cmd.max_bytes != 0:
            self.bad_pulls.append(f"max_bytes set in message mode ({where})")
        repull = s.single and self.pulls_sent >= 1
        if repull:
            self._check_repull(cmd, where)
        elif (cmd.expires, cmd.heartbeat, cmd.no_wait) != (s.expires, s.heartbeat, s.no_wait):
            self.bad_pulls.append(f"expires/heartbeat/no_wait differ from the settings ({where})")
        if not self.connected:
            self.bad_pulls.append(f"SendPull while disconnected ({where})")
        if self.stopped:
            self.bad_pulls.append(f"SendPull after stop() ({where})")
        if self.terminal_error is not None:
            self.bad_terminal.append(f"SendPull after a terminal status ({where})")
        if cmd.pin_id != self.client_pin:
            self.bad_pins.append(
                f"the pull carries pin {cmd.pin_id!r}, not {self.client_pin!r} ({where})"
            )
        if (
            self.refused_until is not None
            and event in ("on_timer", "on_consumed")
            and self.now < self.refused_until - EPS
        ):
            self.bad_refusals.append(
                f"pulled again {self.refused_until - self.now:g} s before 2 x heartbeat "
                f"after a refused pull ({where})"
            )
        self.refused_until = None
        self.pulls_sent += 1
        self.checks_since_pull = 0
        self.lost_check = False
        if s.single and (s.no_wait or not repull):
            # (a fetch's re-pull keeps the first pull's deadline)
            self.single_deadline = self.now + (
                NO_WAIT_TIMEOUT if s.no_wait else s.expires + max(FETCH_GRACE, s.heartbeat)
            )
        if self.outage is not None:
            self.outage_sends.append(self.now)
        if not self.connected:
            return  # never reaches the server
        req = _Request(cmd.batch, cmd.max_bytes, pin_id=cmd.pin_id)
        if not self.requests:
            self.owed_since = self.now
        self.requests.append(req)
        self.last_request = req
        if cmd.pin_id is not None:
            self.last_pinned_request = req

    def _check_repull(self, cmd: SendPull, where: str) -> None:
        """A fetch pulls again: only after its pull was dropped, for the same batch, in time."""
        s = self.settings
        if self.repull_due is None:
            self.bad_single.append(f"a fetch sent a second pull, none was dropped ({where})")
        self.repull_due = None
        self.single_repulls += 1
        if s.no_wait and self.single_repulls > NO_WAIT_REPULLS:
            self.bad_single.append(f"a no-wait fetch pulled again more than once ({where})")
        if (cmd.batch, cmd.max_bytes) != (s.max_messages, s.max_bytes or s.byte_cap):
            self.bad_single.append(f"a fetch's re-pull is not for the whole batch ({where})")
        if s.no_wait:
            expected = (s.expires, s.heartbeat, True)
            ok = (cmd.expires, cmd.heartbeat, cmd.no_wait) == expected
        else:
            left = self.start_time + s.expires - self.now
            if left >= MIN_EXPIRES:
                ok = (
                    not cmd.no_wait
                    and math.isclose(cmd.expires, left, abs_tol=EPS)
                    and cmd.heartbeat == fit_heartbeat(s.heartbeat, cmd.expires)
                )
            else:
                # too little left for a pull that waits: a no-wait one
                ok = cmd.no_wait and cmd.heartbeat == 0 and left >= NEXT_REPULL_MIN_LEFT - EPS
        if not ok:
            self.bad_single.append(f"a fetch's re-pull asks for the wrong time ({where})")

    def _on_report(self, error: JetStreamError, event: str) -> None:
        if not isinstance(error, NoHeartbeatError):
            return
        hb = self.settings.heartbeat
        where = f"{event} at t={self.now:g} (heartbeat {hb:g} s)"
        if not self.connected:
            self.bad_heartbeats.append(f"missed heartbeat reported while disconnected ({where})")
        if self.owed_since is None:
            self.bad_heartbeats.append(
                f"missed heartbeat reported while no pull request was outstanding ({where})"
            )
        else:
            silent_from = max(self.last_activity, self.owed_since)
            if self.now - silent_from < 2 * hb - EPS:
                self.bad_heartbeats.append(
                    f"missed heartbeat reported after {self.now - silent_from:g} s of silence "
                    f"(< 2 x heartbeat) ({where})"
                )
        if self.last_report is not None and self.now - self.last_report < 2 * hb - EPS:
            self.bad_heartbeats.append(
                f"missed heartbeats reported {self.now - self.last_report:g} s apart ({where})"
            )
        self.last_report = self.now

    def _status(
        self,
        kind: StatusKind,
        severity: Severity,
        pending_messages: int,
        pending_bytes: int,
        error: JetStreamError | None,
    ) -> Commands:
        self.last_activity = self.now
        self.refused_until = None  # the server answers: pulls work again
        cmds = self.engine.on_status(
            kind, severity, pending_messages, pending_bytes, error, self.now
        )
        return self._feed(cmds, f"on_status({kind.name})")

    def _single_must_finish(self, why: str) -> None:
        if self.settings.single and not self.stopped and not self.finished:
            self.bad_single.append(f"the fetch did not finish on {why} (t={self.now:g})")

    def _fire(self, at: float) -> None:
        before = self.engine.outstanding_messages
        cmds = self._feed(self.engine.on_timer(at), "on_timer")
        if before and not self.engine.outstanding_messages:
            # The engine wrote every request off (missed heartbeat, fetch deadline): the
            # server lost them, which is why it went silent.
            self._drop_all()
            self.lost = (0, 0)
        if self.settings.no_wait and checks(cmds):
            self.lost_check = True  # (no heartbeat: the check of a no-wait fetch's deadline)

    # ------------------------------------------------------------- start

    @initialize(
        s=pull_settings(),
        data=st.data(),
        backlog=st.integers(0, 8),
        horizon=st.integers(0, 30),
        trouble=st.integers(0, 12),
    )
    def start(
        self, s: PullSettings, data: st.DataObject, backlog: int, horizon: int, trouble: int
    ) -> None:
        """Configure, start the engine and publish a backlog (maybe none).

        Rules are picked uniformly, so two budgets keep runs long and varied: events
        that end the run (stop, terminal statuses, a missing consumer, and for a fetch
        its request's end or a disconnect) wait ``horizon`` steps, and at most
        ``trouble`` disruptions (disconnect, 503, leadership change, lost pull,
        refusal, outage) happen, after which the run calms down.
        """
        self.settings = s
        self.horizon = horizon
        self.trouble = trouble
        pin = None
        if self.pinned and data.draw(st.booleans(), label="pinned before"):
            # The handle's pin from an earlier pull: still the server's, or stale.
            pin = PinState()
            pin.pinned("p0")
            self.client_pin = "p0"
            self.server_pin = data.draw(st.sampled_from(["p0", "p0", None, "f0"]), label="pin")
        self.engine = PullEngine(s, pin)
        self.start_time = self.now
        self.last_activity = self.now
        self.refused_until = None  # the server answers: pulls work again
        cmds = self._feed(self.engine.start(self.now), "start")
        if len(pulls(cmds)) != 1:
            self.bad_pulls.append(f"start sent {len(pulls(cmds))} pulls")
        if backlog:
            self.publish(data, backlog)

    # ------------------------------------------------------------- rules: client

    @precondition(lambda self: bool(self.buffer))
    @rule(n=st.integers(1, 4))
    def consume(self, n: int) -> None:
        """The user takes up to ``n`` buffered messages."""
        for _ in range(min(n, len(self.buffer))):
            self._consume_one()

    def _consume_one(self) -> None:
        size = self.buffer.pop(0)
        self._feed(self.engine.on_consumed(self._esize(size)), "on_consumed")
        if self.draining and not self.unsubscribing and not self.buffer and not self.finished:
            self.bad_drain.append("the drain did not finish once the buffer was consumed")

    @precondition(lambda self: bool(self.buffer) and not self.byte_mode)
    @rule(n=st.integers(1, 600), beyond=st.integers(1, 4))
    def consume_quietly(self, n: int, beyond: int) -> None:
        """The driver's hot path: up to ``quiet_consumptions()`` messages, told at once.

        Checked against a copy of the engine told one message at a time: each of
        those calls returns no command and the states end equal. On two more
        copies, ``on_consumed_many`` past the quiet count is checked against the
        single calls too (commands and state).
        """
        engine = self.engine
        quiet = engine.quiet_consumptions()
        k = min(n, quiet, len(self.buffer))
        one_by_one = copy.deepcopy(engine)
        for i in range(k):
            cmds = one_by_one.on_consumed(0)
            assert cmds == (), f"consumption {i + 1} of {quiet} quiet ones returned {cmds!r}"
        assert engine.on_consumed_many(k) == ()
        assert engine_state(engine) == engine_state(one_by_one)
        del self.buffer[:k]
        if self.draining and not self.unsubscribing and not self.buffer and not self.finished:
            self.bad_drain.append("the drain did not finish once the buffer was consumed")
        more = min(len(self.buffer), k + beyond)
        single, many = copy.deepcopy(engine), copy.deepcopy(engine)
        expected: Commands = ()
        for _ in range(more):
            expected += single.on_consumed(0)
        assert many.on_consumed_many(more) == expected
        assert engine_state(many) == engine_state(single)

    @precondition(lambda self: self.live and not self.stopped and self.mature)
    @rule(drain=st.booleans())
    def stop(self, drain: bool) -> None:
        self.stopped = True
        if drain:
            self.draining = True
            cmds = self._feed(self.engine.stop(True, self.now), "stop(drain=True)")
            if finishes(cmds):
                self.bad_drain.append(f"stop(drain=True) finished before unsubscribing: {cmds!r}")
            if Unsubscribe() not in cmds:
                self.bad_drain.append(f"stop(drain=True) did not unsubscribe: {cmds!r}")
        else:
            self.buffer.clear()
            self.engine.discard_buffer()
            cmds = self._feed(self.engine.stop(False, self.now), "stop(drain=False)")
            if finishes(cmds) != [Finish(None)]:
                self.bad_drain.append(f"stop(drain=False) returned {cmds!r}")

    @precondition(
        lambda self: self.server_up and bool(self.requests) and not self.stopped and self.mature
    )
    @rule(
        data=st.data(),
        k=st.integers(0, 5),
        late=st.lists(
            st.sampled_from(["message", "408", "503", "leadership", "heartbeat"]),
            min_size=1,
            max_size=4,
        ),
    )
    def drain_while_busy(self, data: st.DataObject, k: int, late: list[str]) -> None:
        """A race: the server delivers ``k`` messages, the user drains, and the server
        goes on answering the requests that stop() wrote off."""
        if k:
            self.server_delivers(data, k)
        if not self.live:
            return
        self.stop(True)
        for what in late:
            if not (self.live and self.connected and self.requests):
                return
            if what == "message":
                if not self.stream:
                    self.stream.append(self._draw_size(data))
                self._deliver_one()
            elif what == "408":
                self.request_expires()
            elif what == "503":
                self._drop_all()
                self._status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())
            elif what == "leadership":
                self._drop_all()
                self._status(K.LEADERSHIP_CHANGE, S.SILENT, 0, 0, None)
            else:
                self.heartbeat()

    @precondition(lambda self: self.unsub_pending)
    @rule()
    def unsubscribed(self) -> None:
        """The drain's UNSUB round trip is over: the server sends nothing more."""
        self.unsub_pending = False
        waiting = self.unsubscribing and self.live
        self.unsubscribing = False
        self._drop_all()  # no interest in the inbox any more: the server drops the requests
        cmds = self._feed(self.engine.on_unsubscribed(), "on_unsubscribed")
        if waiting and not self.buffer and finishes(cmds) != [Finish(None)]:
            self.bad_drain.append(f"the drain did not finish once unsubscribed: {cmds!r}")
        if self.buffer and finishes(cmds):
            self.bad_drain.append(f"unsubscribed with messages buffered: {cmds!r}")

    @precondition(
        lambda self: (
            self.pending_checks > 0
            and self.live
            and self.connected
            and self.outage is None
            and self.trouble > 0
            and not self.settings.single
        )
    )
    @rule(data=st.data(), dt=st.sampled_from([0.0, 0.1, 0.3, 1.0]))
    def flap_during_check(self, data: st.DataObject, dt: float) -> None:
        """A race: the connection drops and comes back while a consumer check runs;
        then every check answers, the one from before the drop first."""
        self.disconnect()
        self.reconnect()
        while self.pending_checks and self.live:
            self.answer_check(data)
        if self.live:
            self._advance_to(self.now + dt)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), react=st.booleans())
    def advance(self, data: st.DataObject, react: bool) -> None:
        """Time passes; with ``react``, pending consumer checks are answered and the
        connection comes back first (so that a run does not stay stuck when hypothesis
        happens to disable ``answer_check`` or ``reconnect``)."""
        if react:
            while self.pending_checks and self.live:
                self.answer_check(data)
            if self.unsub_pending:
                self.unsubscribed()
            if not self.connected and self.live:
                self.reconnect()
        s = self.settings
        marks = [0.01, REPULL_BACKOFF_FIRST, 0.25, 1.0, s.expires]
        if s.heartbeat:
            marks += [s.heartbeat / 2, s.heartbeat, 2 * s.heartbeat]
        dt = data.draw(st.sampled_from(marks) | st.floats(0.001, 5.0), label="dt")
        self._advance_to(self.now + dt)

    def _advance_to(self, target: float) -> None:
        """Move the model clock, firing the timer exactly at its deadlines."""
        fired = 0
        while self.timer is not None and self.timer <= target:
            at, self.timer = self.timer, None
            self.now = max(self.now, at)
            self._fire(at)
            fired += 1
            if fired > 10_000:
                self.bad_timers.append("the timer fires in a busy loop")
                break
        self.now = target

    # ------------------------------------------------------------- rules: server

    @precondition(lambda self: self.live and len(self.stream) < 60)
    @rule(data=st.data(), n=st.integers(1, 8))
    def publish(self, data: st.DataObject, n: int) -> None:
        """Messages become available to the consumer."""
        for _ in range(n):
            self.stream.append(self._draw_size(data))

    def _draw_size(self, data: st.DataObject) -> int:
        mb = self.settings.max_bytes
        if not mb:
            return data.draw(st.integers(1, 100), label="size")
        how = data.draw(st.integers(0, 9), label="how")
        # the bytes the oldest request has left once the messages before this one fit it
        left = self.requests[0].nbytes if self.requests else 0
        for size in self.stream:
            left = left - size if size <= left else 0
        if how == 0:
            return data.draw(st.integers(mb + 1, mb + mb // 5 + 1), label="size")
        if how <= 3 and left > 0:
            return left  # fills the request exactly: the server ends it silently
        return data.draw(st.integers(1, mb), label="size")

    @precondition(lambda self: self.server_up and bool(self._deliverable()))
    @rule(data=st.data(), n=st.integers(1, 20))
    def server_delivers(self, data: st.DataObject, n: int) -> None:
        """The server delivers up to ``n`` messages, oldest request and message first.

        When the stream is empty, a message is published first. Requests with a
        stale pin are not served (see ``refuse_stale_pin``).
        """
        for _ in range(n):
            if not (self.server_up and self._deliverable()):
                return
            if not self.stream:
                self.stream.append(self._draw_size(data))
            self._deliver_one()

    @precondition(
        lambda self: (
            self.server_up and bool(self._deliverable()) and not self.byte_mode and not self.pinned
        )
    )
    @rule(data=st.data(), n=st.integers(1, 200))
    def server_delivers_a_read(self, data: st.DataObject, n: int) -> None:
        """Up to ``n`` messages arrive in one read and are told with one ``on_messages``.

        Checked against a copy of the engine told one message at a time: the
        same commands and the same state.
        """
        count = 0
        for _ in range(n):
            if not (self.server_up and self._deliverable()):
                break
            if not self.stream:
                self.stream.append(self._draw_size(data))
            self._deliver_one(account=False)
            count += 1
        one_by_one = copy.deepcopy(self.engine)
        expected: Commands = ()
        for _ in range(count):
            expected += one_by_one.on_message(0)
        cmds = self.engine.on_messages(count)
        assert cmds == expected
        assert engine_state(self.engine) == engine_state(one_by_one)
        self._feed(cmds, "on_messages")
        if self.settings.single and not self.requests:
            self._single_must_finish("a filled batch")

    def _deliver_one(self, account: bool = True) -> None:
        deliverable = self._deliverable()
        if not deliverable:
            return
        req = deliverable[0]
        size = self.stream[0]
        if self.byte_mode and size > req.nbytes:
            # 409 Message Size Exceeds MaxBytes; the message stays first in the stream.
            self._drop(req)
            full = req.fresh and req.nbytes == self.settings.max_bytes
            cmds = self._status(K.MAX_BYTES, S.SILENT, req.batch, req.nbytes, too_large_409())
            fin = finishes(cmds)
            if full and not self.settings.single and not self.stopped:
                if len(fin) != 1 or not isinstance(fin[0].error, MessageTooLargeError):
                    self.bad_pulls.append(
                        f"MAX_BYTES on a full-size request did not end with "
                        f"MessageTooLargeError: {cmds!r}"
                    )
            elif fin and not self.settings.single:
                self.bad_pulls.append(f"MAX_BYTES on a partial request finished: {cmds!r}")
            self._single_must_finish("409 Message Size Exceeds MaxBytes")
            return
        self.stream.pop(0)
        self.delivered += 1
        req.fresh = False
        req.batch -= 1
        req.nbytes -= size if self.byte_mode else 0
        completed = req.batch == 0 or (self.byte_mode and req.nbytes == 0)
        if completed:
            self._drop(req)
        if self.draining:
            self.expected_unsolicited += 1  # stop(drain=True) wrote the request off
        self.buffer.append(size)
        self.last_activity = self.now
        self.refused_until = None  # the server answers: pulls work again
        if self.pinned:
            if self.server_pin is None or not self.server_pin.startswith("p"):
                # Nothing pinned (or another client's pin timed out): pin this pull.
                self.server_pin = self._new_pin("p")
            # Every message to the pinned client carries Nats-Pin-Id; the driver
            # hands it over before the message.
            self.engine.on_pin_id(self.server_pin)
            self.client_pin = self.server_pin
        if not account:
            return  # told with on_messages (server_delivers_a_read)
        self._feed(self.engine.on_message(self._esize(size)), "on_message")
        if completed and req.nbytes > 0:
            # The batch is done but bytes are left: the server says so (with the bytes
            # left as pending). A request that ran out of bytes, or a message-mode
            # request, ends silently.
            self._status(K.BATCH_COMPLETED, S.SILENT, 0, req.nbytes, None)
        if completed:
            self._single_must_finish("a filled batch")

    @precondition(lambda self: self.server_up and bool(self.requests) and self.ends_a_fetch_ok)
    @rule()
    def request_expires(self) -> None:
        req = self.requests[0]
        self._drop(req)
        if self.settings.no_wait:
            self._status(K.NO_MESSAGES, S.SILENT, req.batch, req.nbytes, None)
            self._single_must_finish("404 No Messages")
        else:
            self._status(K.REQUEST_TIMEOUT, S.SILENT, req.batch, req.nbytes, timeout_408())
            self._single_must_finish("408 Request Timeout")

    @precondition(lambda self: self.server_up and bool(self.requests))
    @rule()
    def heartbeat(self) -> None:
        self._status(K.HEARTBEAT, S.SILENT, 0, 0, None)

    @precondition(
        lambda self: (
            self.server_up
            and bool(self.requests)
            and self.requests[-1] is self.last_request
            and self.requests[-1].fresh
            and self.ends_a_fetch_ok
            and self.trouble > 0
        )
    )
    @rule()
    def warning(self) -> None:
        self.trouble -= 1
        self._drop(self.requests[-1])  # the server refused the request it just received
        self._status(K.EXCEEDED_LIMIT, S.WARNING, 0, 0, APIError(409, 0, "Exceeded MaxWaiting"))
        self._single_must_finish("409 Exceeded MaxWaiting")

    @precondition(
        lambda self: (
            self.server_up and bool(self.requests) and self.ends_a_fetch_ok and self.trouble > 0
        )
    )
    @rule()
    def leadership_change(self) -> None:
        self.trouble -= 1
        self._drop_all()
        s = self.settings
        if not s.single or self.delivered or self.stopped:
            self._status(K.LEADERSHIP_CHANGE, S.SILENT, 0, 0, APIError(409, 0, "Leadership Change"))
            self._single_must_finish("409 Leadership Change")
            return
        # A fetch's pull voided before it delivered anything: the server never said
        # "nothing there", so it pulls again (fetch_no_wait: once, then it raises).
        prior = self.single_repulls
        self.repull_due = "409"
        cmds = self._status(K.LEADERSHIP_CHANGE, S.SILENT, 0, 0, None)
        fin, sent = finishes(cmds), pulls(cmds)
        left = self.start_time + s.expires - self.now
        if fin:
            self.repull_due = None
        if s.no_wait and prior >= NO_WAIT_REPULLS:
            if len(fin) != 1 or not isinstance(fin[0].error, ClusterUnavailableError):
                self.bad_single.append(f"a no-wait fetch's second 409 returned {cmds!r}")
        elif s.no_wait:
            if fin or len(sent) != 1:
                self.bad_single.append(f"a no-wait fetch's first 409 returned {cmds!r}")
        elif fin:
            # out of time (its re-pull would come too late): it ends as an expired one
            if fin != [Finish(None)] or left >= REPULL_BACKOFF_MAX + NEXT_REPULL_MIN_LEFT:
                self.bad_single.append(f"a fetch with {left:g} s left ended on a 409: {cmds!r}")
        elif not sent and (
            self.timer is None or self.timer > self.start_time + s.expires - NEXT_REPULL_MIN_LEFT
        ):
            self.bad_single.append(f"a fetch's 409 neither ended it nor pulled again: {cmds!r}")

    @precondition(
        lambda self: (
            self.server_up
            and self.settings.single
            and not self.delivered
            and bool(self.requests)
            and self.trouble > 0
        )
    )
    @rule()
    def leadership_change_before_any_message(self) -> None:
        """A fetch's pull is voided before it delivered anything (pulled again, see above)."""
        self.leadership_change()

    @precondition(
        lambda self: (
            self.server_up and self.settings.single and bool(self.requests) and self.trouble > 0
        )
    )
    @rule()
    def lose_pull(self) -> None:
        """The server drops a fetch's pull without a word (a consumer leader change).

        The engine still counts it outstanding until it writes it off: at its
        deadline (a no-wait fetch then pulls again if messages are pending) or
        on missed heartbeats.
        """
        self.trouble -= 1
        self.lost = (
            self.lost[0] + sum(r.batch for r in self.requests),
            self.lost[1] + sum(r.nbytes for r in self.requests),
        )
        self._drop_all()

    @precondition(
        lambda self: (
            self.pinned and self.server_up and self.server_pin is not None and self.trouble > 0
        )
    )
    @rule(foreign=st.booleans())
    def pin_moves(self, foreign: bool) -> None:
        """The pin times out or is unpinned; maybe another client is pinned at once."""
        self.trouble -= 1
        self.server_pin = self._new_pin("f") if foreign else None

    @precondition(
        lambda self: (
            self.server_up and any(self._stale(r) for r in self.requests) and self.ends_a_fetch_ok
        )
    )
    @rule(data=st.data())
    def refuse_stale_pin(self, data: st.DataObject) -> None:
        """423 for a pull with a stale pin.

        The last pull sent with a pin, when nothing was delivered to it, may get
        the immediate ``Nats-Pin-Id mismatch`` (no pending headers); any stale
        pull may get ``Nats-Wrong-Pin-Id`` with what it had left as pending.
        """
        last = self.last_pinned_request
        stale = [r for r in self.requests if self._stale(r)]
        mismatch = (
            last is not None
            and last in stale
            and last.fresh
            and data.draw(st.booleans(), label="mismatch")
        )
        if mismatch:
            assert last is not None
            req, pending = last, (0, 0)
            reason = "mismatch"
        else:
            req = data.draw(st.sampled_from(stale), label="request")
            pending, reason = (req.batch, req.nbytes), "wrong_pin"
        if req is last:
            self.last_pinned_request = None
        self._drop(req)
        self.pins_lost += 1
        self.client_pin = None  # the engine forgets the pin
        err = PinIdMismatchError("423", reason)
        cmds = self._status(K.PIN_MISMATCH, S.SILENT, *pending, err)
        fin = finishes(cmds)
        if self.settings.single:
            self._single_must_finish(f"423 ({reason})")
            if fin and fin != [Finish(err)]:
                self.bad_pins.append(f"a fetch ended on a 423 with {fin!r}")
        elif fin:
            self.bad_pins.append(f"a 423 ended the run: {cmds!r}")

    @precondition(
        lambda self: (
            self.server_up
            and bool(self.requests)
            and self.requests[-1] is self.last_request
            and self.requests[-1].fresh
            and self.ends_a_fetch_ok
            and self.trouble > 0
        )
    )
    @rule()
    def refuse_pull(self) -> None:
        """The user may not publish the pull: the server refuses it as it reads it.

        It never reaches the consumer (dropped from the model); a fetch ends with
        the error, messages() / consume() report it and keep the pace of a pull
        that went unanswered (no pull again before 2 x heartbeat).
        """
        self.trouble -= 1
        self._drop(self.requests[-1])
        err = PermissionViolationError("publish", "$JS.API.CONSUMER.MSG.NEXT.S.C")
        running = self.engine.phase is Phase.RUNNING
        s = self.settings
        cmds = self._feed(self.engine.on_refused(err, False, self.now), "on_refused")
        if s.single:
            self._single_must_finish("a refused pull")
            if finishes(cmds) != [Finish(err)]:
                self.bad_refusals.append(f"a fetch's refused pull returned {cmds!r}")
            return
        if finishes(cmds) or pulls(cmds) or reports(cmds) != [Report(err)]:
            self.bad_refusals.append(f"a refused pull of a consumption returned {cmds!r}")
        if running:
            wait = 2 * s.heartbeat if s.heartbeat > 0 else s.expires
            self.refused_until = self.now + wait
            if self.timer is None or self.timer > self.refused_until + EPS:
                self.bad_refusals.append(
                    f"no timer to pull again {wait:g} s after a refused pull: {cmds!r}"
                )

    @precondition(lambda self: self.live and self.mature)
    @rule()
    def refuse_inbox(self) -> None:
        """The user may not subscribe the pull's inbox: nothing can arrive, the run ends."""
        err = PermissionViolationError("subscription", "_INBOX.x", inbox=True)
        self.terminal_error = err
        self._drop_all()
        cmds = self._feed(self.engine.on_refused(err, True, self.now), "on_refused(inbox)")
        if finishes(cmds) != [Finish(err)]:
            self.bad_terminal.append(f"a refused inbox returned {cmds!r}")

    @precondition(lambda self: self.server_up and self.mature)
    @rule(which=st.sampled_from(_TERMINALS))
    def terminal(self, which: tuple[StatusKind, type[JetStreamError]]) -> None:
        kind, cls = which
        err = cls(f"terminal {kind.name}") if cls is ConsumerDeletedError else cls(409, 0, "x")
        self.terminal_error = err
        self._drop_all()
        cmds = self._status(kind, S.TERMINAL, 0, 0, err)
        if finishes(cmds) != [Finish(err)]:
            self.bad_terminal.append(f"terminal {kind.name} returned {cmds!r}")

    @precondition(lambda self: self.live and self.connected and bool(self.requests))
    @precondition(lambda self: self.trouble > 0 or self.outage is not None)
    @rule()
    def no_responders(self) -> None:
        if self.outage is None:
            self.trouble -= 1
        self._drop_all()
        self.lost_check = False  # a check wanted for the 503 now
        self._status(K.NO_RESPONDERS, S.CHECK_CONSUMER, 0, 0, no_responders())

    @precondition(
        lambda self: (
            self.live
            and self.connected
            and self.outage is None
            and (self.mature or not self.settings.single)
        )
    )
    @precondition(lambda self: self.trouble > 0)
    @rule()
    def disconnect(self) -> None:
        self.trouble -= 1
        self.connected = False
        self.unsubscribing = False  # nothing more arrives: the engine waits no more
        self._drop_all()  # the server forgets the requests of a gone client
        self._feed(self.engine.on_disconnected(self.now), "on_disconnected")

    @precondition(lambda self: self.live and not self.connected)
    @rule()
    def reconnect(self) -> None:
        self.connected = True
        self._feed(self.engine.on_reconnected(self.now), "on_reconnected")

    @precondition(lambda self: self.pending_checks > 0)
    @rule(data=st.data())
    def answer_check(self, data: st.DataObject) -> None:
        result = data.draw(st.sampled_from(self._check_answers()), label="result")
        self._answer_check(result)

    def _check_answers(self) -> list[CheckResult]:
        if self.outage == "api":
            return [CheckResult.UNAVAILABLE]
        if self.outage == "pulls" or not self.mature:
            return [CheckResult.EXISTS, CheckResult.UNAVAILABLE]
        return list(CheckResult)

    def _answer_check(self, result: CheckResult) -> None:
        self.pending_checks -= 1
        error: JetStreamError | None = None
        if result is CheckResult.MISSING:
            error = ConsumerNotFoundError(404, 10014, "consumer not found")
        elif result is CheckResult.UNAVAILABLE:
            error = JetStreamTimeoutError("consumer info timed out")
        was_checking = self.engine.phase is Phase.CHECKING
        # the consumer's num_pending, as the driver reads it from CONSUMER.INFO
        pending = len(self.stream) if result is CheckResult.EXISTS else None
        lost = (
            was_checking
            and self.lost_check
            and result is CheckResult.EXISTS
            and not self.delivered
            and bool(pending)
            and not self.stopped
        )
        prior = self.single_repulls
        if lost:
            self.repull_due = "lost"
        cmds = self._feed(
            self.engine.on_consumer_checked(self.now, result, error, pending),
            f"check {result.name}",
        )
        if was_checking and result is CheckResult.MISSING and finishes(cmds) != [Finish(error)]:
            self.bad_terminal.append(f"a missing consumer did not finish the run: {cmds!r}")
        if lost and prior < NO_WAIT_REPULLS:
            # A no-wait pull unanswered while messages are pending: pulled again, once.
            if finishes(cmds) or len(pulls(cmds)) != 1:
                self.bad_single.append(f"a lost no-wait pull was not sent again: {cmds!r}")
        elif lost:
            fin = finishes(cmds)
            if len(fin) != 1 or not isinstance(fin[0].error, JetStreamTimeoutError):
                self.bad_single.append(f"a no-wait pull lost twice returned {cmds!r}")
        elif was_checking and self.settings.single and self.connected:
            self._single_must_finish(f"the consumer check ({result.name})")
        if finishes(cmds):
            self.repull_due = None

    @precondition(
        lambda self: self.live and self.connected and self.outage is None and not self.stopped
    )
    @precondition(lambda self: self.trouble > 0)
    @rule(kind=st.sampled_from(["api", "pulls"]))
    def begin_outage(self, kind: str) -> None:
        self.trouble -= 1
        self.outage = kind
        self.outage_sends = []

    @precondition(lambda self: self.outage is not None and self.live and self.connected)
    @rule(
        data=st.data(),
        rounds=st.integers(1, 60),
        dt=st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.2]),
    )
    def outage_storm(self, data: st.DataObject, rounds: int, dt: float) -> None:
        """The server answers every pull with a 503 and every check at once, for a while.

        When there is nothing to answer, the round waits for the engine's timer (a
        throttled pull or check) if it is due within a second, else ``dt``.
        """
        answer = data.draw(st.sampled_from(self._check_answers()), label="answer")
        for _ in range(rounds):
            if not self.live:
                return
            if self.requests:
                self.no_responders()
            while self.pending_checks:
                self._answer_check(answer)
            take: bool = data.draw(st.booleans(), label="consume")
            if take and self.buffer:
                self._consume_one()
            if self.requests:
                continue
            if self.timer is not None and self.timer <= self.now + 1.0:
                self._advance_to(self.timer)
            else:
                self._advance_to(self.now + dt)

    @precondition(lambda self: self.outage is not None)
    @rule()
    def end_outage(self) -> None:
        self.outage = None

    @precondition(lambda self: self.finished)
    @rule()
    def poke_after_finish(self) -> None:
        e = self.engine
        self._feed(e.on_status(K.REQUEST_TIMEOUT, S.SILENT, 1, 1, None, self.now), "late 408")
        self._feed(e.on_status(K.HEARTBEAT, S.SILENT, 0, 0, None, self.now), "late heartbeat")
        self._feed(e.on_timer(self.now), "late on_timer")
        self._feed(e.on_consumer_checked(self.now, CheckResult.EXISTS, None), "late check")
        self._feed(e.on_reconnected(self.now), "late on_reconnected")
        self._feed(e.stop(True, self.now), "late stop")
        self._feed(e.on_unsubscribed(), "late on_unsubscribed")
        self._feed(e.start(self.now), "late start")
        refused = PermissionViolationError("publish", "x")
        self._feed(e.on_refused(refused, False, self.now), "late on_refused")
        self._feed(e.on_refused(refused, True, self.now), "late on_refused(inbox)")

    # ------------------------------------------------------------- invariants

    @invariant()
    def count_steps(self) -> None:
        """Not a check: invariants run after every step, so this counts the steps."""
        self.steps += 1

    @invariant()
    def inv1_pending_within_limits(self) -> None:
        e, s = self.engine, self.settings
        assert e.pending_messages <= s.max_messages, (
            f"pending_messages {e.pending_messages} > max_messages {s.max_messages}"
        )
        if s.max_bytes:
            assert e.pending_bytes <= s.max_bytes, (
                f"pending_bytes {e.pending_bytes} > max_bytes {s.max_bytes}"
            )
        assert len(self.buffer) == e.buffered_messages, (
            f"model buffer {len(self.buffer)} != engine.buffered_messages {e.buffered_messages}"
        )
        assert e.outstanding_messages >= 0
        assert e.outstanding_bytes >= 0
        assert e.buffered_bytes >= 0

    @invariant()
    def inv2_pull_requests_valid(self) -> None:
        assert not self.bad_pulls, "invalid pull requests:\n" + "\n".join(self.bad_pulls)

    @invariant()
    def inv3_counts_balance(self) -> None:
        e = self.engine
        lhs = e.requested + e.unsolicited
        rhs = e.delivered + e.released + e.outstanding_messages
        assert lhs == rhs, (
            f"requested {e.requested} + unsolicited {e.unsolicited} != delivered {e.delivered}"
            f" + released {e.released} + outstanding {e.outstanding_messages}"
        )
        assert e.unsolicited == self.expected_unsolicited, (
            f"{e.unsolicited} unsolicited messages, expected {self.expected_unsolicited} "
            "(only messages of requests written off by stop(drain=True))"
        )

    @invariant()
    def inv3_outstanding_matches_the_server(self) -> None:
        """The engine's aggregate view of outstanding requests is the server's.

        Byte mode, one exception: the server ends a request whose bytes are used up
        exactly without a status, so the engine can not tell its unused batch from
        that of another request still outstanding; it releases it once no request
        has bytes left. Its message count is then an upper bound (bytes stay exact).
        """
        e = self.engine
        if not self.live or self.draining:
            return  # finished, or requests written off by stop(drain=True)
        # (plus what the server lost without a word: outstanding until written off)
        server_msgs = sum(r.batch for r in self.requests) + self.lost[0]
        server_bytes = sum(r.nbytes for r in self.requests) + self.lost[1]
        engine = (e.outstanding_messages, e.outstanding_bytes)
        where = (
            f"engine outstanding ({e.outstanding_messages} msgs, {e.outstanding_bytes} bytes)"
            f" vs the server's requests ({server_msgs} msgs, {server_bytes} bytes) in {e.phase}"
        )
        if not self.byte_mode:
            assert engine == (server_msgs, server_bytes), where
            return
        assert e.outstanding_bytes == server_bytes, where
        assert e.outstanding_messages >= server_msgs, where
        assert (e.outstanding_messages == 0) == (server_msgs == 0), where

    @invariant()
    def inv4_terminal_finishes(self) -> None:
        assert not self.bad_terminal, "terminal handling:\n" + "\n".join(self.bad_terminal)
        if self.terminal_error is not None:
            assert self.finished, "a terminal status did not finish the run"

    @invariant()
    def inv5_heartbeats(self) -> None:
        assert not self.bad_heartbeats, "missed heartbeats:\n" + "\n".join(self.bad_heartbeats)

    @invariant()
    def inv6_drain_keeps_buffered_messages(self) -> None:
        assert not self.bad_drain, "drain:\n" + "\n".join(self.bad_drain)

    @invariant()
    def inv7_outage_rate(self) -> None:
        n = _max_per_second(self.outage_sends)
        assert n <= OUTAGE_RATE, (
            f"{n} SendPull + CheckConsumer within 1 s of an outage ({self.outage}): "
            f"{self.outage_sends}"
        )

    @invariant()
    def inv7_checks_only_when_waiting_for_them(self) -> None:
        assert not self.bad_checks, "consumer checks:\n" + "\n".join(self.bad_checks)

    @invariant()
    def inv8_fetch(self) -> None:
        s = self.settings
        if not s.single:
            return
        assert not self.bad_single, "fetch:\n" + "\n".join(self.bad_single)
        assert self.pulls_sent == 1 + self.single_repulls, (
            f"a fetch sent {self.pulls_sent} pulls, {self.single_repulls} of them again"
        )
        if self.live and not self.stopped and self.now > self.single_deadline + EPS:
            assert self.checks_since_pull >= 1, (
                f"the fetch deadline (t={self.single_deadline:g}) passed without a consumer check"
            )

    @invariant()
    def inv9_timers_and_finish(self) -> None:
        assert not self.bad_timers, "timers:\n" + "\n".join(self.bad_timers)
        assert not self.after_finish, "commands after Finish:\n" + "\n".join(self.after_finish)
        assert self.engine.done == self.finished, (
            f"engine.done {self.engine.done} but Finish seen: {self.finished}"
        )
        if self.finished:
            assert self.timer is None, "a timer is still armed after Finish"

    @invariant()
    def inv11_pins(self) -> None:
        """ADR-42: pulls carry the last pin seen, none after a 423; a 423 never ends
        messages()/consume() (a fetch ends with PinIdMismatchError)."""
        assert not self.bad_pins, "pins:\n" + "\n".join(self.bad_pins)
        pin = self.engine.pin
        if self.pinned:
            assert pin is not None, "no pin state for a pinned_client consumer"
            assert pin.id == self.client_pin, f"engine pin {pin!r}, expected {self.client_pin!r}"
        else:
            assert pin is None, "a pin kept for a consumer that is not pinned_client"

    @invariant()
    def inv12_refused_pulls(self) -> None:
        """A refused pull ends a fetch; a consumption reports it and keeps its pace."""
        assert not self.bad_refusals, "refused pulls:\n" + "\n".join(self.bad_refusals)

    @invariant()
    def inv10_no_stall(self) -> None:
        """Liveness: nothing outstanding on the server, then a pull must come once the
        user has consumed what is buffered (a consumption or the timer sends it)."""
        e, s = self.engine, self.settings
        if not self.live or self.stopped or not self.connected or self.outage is not None:
            return
        if e.phase is Phase.CHECKING and self.pending_checks == 0:
            probe = self._probe(CHECK_BACKOFF_MAX + 0.5)
            assert checks(probe), "checking the consumer, but no check is running or due"
            return
        if e.phase is not Phase.RUNNING or s.single or self.requests:
            return
        horizon = REPULL_BACKOFF_MAX + 0.5
        if self.refused_until is not None:
            # A refused pull: the next one comes with the pace of an unanswered one.
            horizon = max(horizon, self.refused_until - self.now + 0.5)
        probe = self._probe(horizon, consume=self.buffer)
        assert pulls(probe), (
            f"stalled: running, no request outstanding, and no pull within "
            f"{horizon:g} s after consuming the {len(self.buffer)} "
            "buffered message(s)"
        )

    def _probe(self, horizon: float, consume: Iterable[int] = ()) -> list[Command]:
        """What a copy of the engine does when the user consumes ``consume`` and then
        its timer alone runs, up to now + horizon."""
        engine = copy.deepcopy(self.engine)
        timer = self.timer
        out: list[Command] = []

        def take(cmds: Commands) -> None:
            nonlocal timer
            out.extend(cmds)
            for cmd in cmds:
                if isinstance(cmd, ArmTimer):
                    timer = cmd.deadline
                elif isinstance(cmd, CancelTimer):
                    timer = None

        for size in consume:
            take(engine.on_consumed(self._esize(size)))
        for _ in range(1000):
            if timer is None or timer > self.now + horizon:
                break
            at, timer = timer, None
            take(engine.on_timer(at))
        return out


_EXAMPLES = int(os.environ.get("PULL_ENGINE_EXAMPLES", "300"))

PullEngineMachine.TestCase.settings = settings(
    max_examples=_EXAMPLES,
    stateful_step_count=80,
    deadline=None,
    derandomize="PULL_ENGINE_EXAMPLES" not in os.environ,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPullEngine = PullEngineMachine.TestCase

"""Helpers shared by the test suite (import as ``from helpers import wait_until``)."""

from __future__ import annotations

import asyncio
import copy
import inspect
import pickle
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiojetstream import WrongLastSequenceError
from aiojetstream._pull_driver import PullDriver

if TYPE_CHECKING:
    import pytest

    from aiojetstream import JetStreamContext, PubAck
    from aiojetstream.testing import NatsServer

__all__ = [
    "assert_watch_start_fails_cleanly",
    "cancel_after",
    "library_tasks",
    "only_known_subscriptions",
    "recorded_publish",
    "UnservedPulls",
    "unique_name",
    "wait_pullable",
    "wait_routable",
    "wait_until",
    "wait_until_sync",
]


def unique_name(prefix: str = "S") -> str:
    """Return a stream or bucket name that no other test, parameter or run uses.

    ``prefix`` plus ``_`` and 12 random hex digits; valid as a stream, bucket
    and consumer name. The ``js`` fixture deletes every stream between tests
    but does not wait for the server to finish: nats-server (seen with 2.15.1)
    can bring back the messages of a file stream deleted and re-created under
    the same name within a few milliseconds, so tests never reuse a name.
    """
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    timeout: float = 10.0,
    interval: float = 0.02,
    *,
    message: str | None = None,
) -> None:
    """Wait until ``predicate()`` is true, checking every ``interval`` seconds.

    The one sanctioned polling loop of the test suite: use it only for state
    that offers no event to wait on (a process list, a server-side count).
    ``predicate`` may be a plain function or return an awaitable; exceptions
    it raises propagate. The deadline uses the loop's monotonic clock.

    Raises:
        TimeoutError: ``predicate`` was still false after ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() >= deadline:
            what = message or getattr(predicate, "__qualname__", repr(predicate))
            raise TimeoutError(f"condition not met within {timeout:g}s: {what}")
        await asyncio.sleep(interval)


def wait_until_sync(
    predicate: Callable[[], bool],
    timeout: float = 10.0,
    interval: float = 0.05,
    *,
    message: str | None = None,
) -> None:
    """:func:`wait_until` for synchronous tests (the Spark tests): a bounded, monotonic wait.

    Raises:
        TimeoutError: ``predicate()`` was still false after ``timeout`` seconds.
    """
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            what = message or getattr(predicate, "__qualname__", repr(predicate))
            raise TimeoutError(f"condition not met within {timeout:g}s: {what}")
        time.sleep(interval)


async def wait_routable(js: JetStreamContext, subject: str, timeout: float = 15.0) -> None:
    """Wait until a stream answers publishes to ``subject`` through ``js``'s server.

    In a cluster a new stream's subject interest reaches the other nodes
    asynchronously; on a loaded machine a publish through another node can see
    "no responders" for longer than the library's publish retries. The probe
    expects an impossible last sequence, so the stream refuses it and nothing
    is stored.
    """
    from aiojetstream import NoRespondersError, WrongLastSequenceError

    async def answered() -> bool:
        try:
            await js.publish(subject, b"", expected_last_sequence=2**63 - 1, timeout=2)
        except WrongLastSequenceError:
            return True
        except NoRespondersError:
            return False
        raise AssertionError(f"the probe on {subject!r} was stored")

    await wait_until(answered, timeout=timeout, interval=0.05, message=f"{subject} routable")


async def wait_pullable(
    js: JetStreamContext, stream: str, consumer: str, timeout: float = 15.0
) -> None:
    """Wait until pull requests sent through ``js``'s server reach ``consumer``.

    A new consumer's pull subject, like a new stream's subjects, reaches the
    other nodes of a cluster asynchronously; until it does, a pull sent through
    another node is dropped there without a word (a fetch then sees no
    heartbeat and ends). The probe is a ``no_wait`` pull for one message that
    expects nothing to be there: the consumer answers it with a status (404 or
    408), and a message instead fails the probe (it would be delivered to the
    probe, not the test).
    """
    import nats.errors

    subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"

    async def answered() -> bool:
        try:
            reply = await js.nc.request(subject, b'{"batch":1,"no_wait":true}', timeout=2)
        except nats.errors.NoRespondersError:
            return False
        status = (reply.headers or {}).get("Status")
        if status is None:
            raise AssertionError(f"the probe pull on {stream}/{consumer} got a message")
        return True

    await wait_until(answered, timeout=timeout, interval=0.05, message=f"{subject} pullable")


async def cancel_after(aw: Awaitable[Any], n: int) -> bool:
    """Run ``aw`` in a task and cancel it ``n`` event-loop iterations later.

    The cancel comes from a ``loop.call_soon`` chain (no clock), so a sweep over
    ``n`` lands it at each suspension point of the call in turn, as an
    ``asyncio.timeout()`` around the call would. Returns True when the cancel
    ended the call, False when the call finished first (its result dropped);
    any other error of the call is raised.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(aw)

    def step(k: int) -> None:
        if task.done():
            return
        if k <= 0:
            task.cancel()
        else:
            loop.call_soon(step, k - 1)

    loop.call_soon(step, n)
    try:
        await task
    except asyncio.CancelledError:
        if task.cancelled():
            return True
        raise
    return False


def library_tasks() -> set[asyncio.Task[Any]]:
    """The pending tasks running aiojetstream's own code (not nats-py's, not the test's)."""
    import os

    import aiojetstream

    package = os.path.dirname(aiojetstream.__file__)
    out = set()
    for task in asyncio.all_tasks():
        code = getattr(task.get_coro(), "cr_code", None)
        if task is not asyncio.current_task() and code and code.co_filename.startswith(package):
            out.add(task)
    return out


async def assert_watch_start_fails_cleanly(watcher: Any, bound: float) -> None:
    """A key-value or object-store watch started while the server is unreachable:
    JetStreamTimeoutError within ``bound`` seconds, no task of the library left
    running (no creation retried in the background), its reader closed, and the
    watcher simply ends afterwards."""
    import pytest

    from aiojetstream import JetStreamTimeoutError

    before = library_tasks()
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(JetStreamTimeoutError, match="could not start reading"):
        await asyncio.wait_for(watcher.__aenter__(), bound * 2)
    assert loop.time() - start < bound
    assert library_tasks() <= before
    assert watcher._reader._closed
    with pytest.raises(StopAsyncIteration):
        await watcher.__anext__()
    await watcher.aclose()


def assert_same_model(fast: Any, slow: Any, update: dict[str, Any]) -> None:
    """A model built without validation (a library fast path) behaves as the validated one:
    equal, same repr, fields set, dumps, pickling, copies, ``model_copy(update=)``."""
    assert fast == slow
    assert repr(fast) == repr(slow)
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump_json() == slow.model_dump_json()
    assert pickle.loads(pickle.dumps(fast)) == slow
    assert copy.deepcopy(fast) == slow
    assert fast.model_copy(update=update) == slow.model_copy(update=update)


async def recorded_publish(
    outcomes: list[str], publish: Callable[..., Awaitable[PubAck]], *args: Any, **kwargs: Any
) -> PubAck:
    """``await publish(*args, **kwargs)``, noting "stored", "duplicate" or "refused".

    "refused" is a ``WrongLastSequenceError`` (raised on); for the object store
    tests that wrap ``ObjectStore._publish_info`` to watch its expected-sequence
    checks.
    """
    try:
        ack = await publish(*args, **kwargs)
    except WrongLastSequenceError:
        outcomes.append("refused")
        raise
    outcomes.append("duplicate" if ack.duplicate else "stored")
    return ack


def interruptible() -> None:
    """``preexec_fn`` for a subprocess a test interrupts: SIGINT as a shell starts it.

    A child inherits ignored and blocked signals from the test process; a pytest
    worker may have SIGINT ignored or blocked (seen with the full suite under
    pytest-xdist), and a program started from a shell never does.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


#: nats.go's TestKeyValueCrossAccounts: account I imports A's JetStream API as fromA
#: (and its $KV.> as fromA.$KV.>), a NatsServer(config=...) text. Also: I imports
#: A's shared.> (publishes from I reach A's streams there), and A maps alias.> to
#: shared.> (publishes from A to alias.x go to shared.x).
CROSS_ACCOUNTS_CONFIG = """
accounts: {
  A: {
    users: [{user: a, password: a}], jetstream: enabled,
    mappings: {"alias.>": "shared.>"},
    exports: [{service: "$JS.API.>"}, {service: "$KV.>"}, {service: "shared.>"}]
  },
  I: {
    users: [{user: i, password: i}],
    imports: [
      {service: {account: A, subject: "$JS.API.>"}, to: "fromA.>"},
      {service: {account: A, subject: "$KV.>"}, to: "fromA.$KV.>"},
      {service: {account: A, subject: "shared.>"}}
    ]
  }
}
"""


class UnservedPulls:
    """Every pull request sent on ``stream``; the first ``unserved`` go to nobody (a 503).

    The chosen pulls are sent to a consumer name nobody serves, and the server
    answers them with a real 503 while the consumer itself exists (as when its
    node is down, or its interest has not crossed a route yet). ``limit`` may be
    changed on the way.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, stream: str, unserved: int) -> None:
        self.subjects: list[bytes] = []
        #: When each pull was sent (loop time), beside ``subjects``; and whether served.
        self.times: list[float] = []
        self.served: list[bool] = []
        self.unserved = 0
        self.limit = unserved
        prefix = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.".encode()
        real = PullDriver._send_pull

        def send(driver: PullDriver, cmd: Any) -> None:
            subject = driver._pull_subject
            if not subject.startswith(prefix):
                real(driver, cmd)
                return
            self.subjects.append(subject)
            self.times.append(asyncio.get_running_loop().time())
            self.served.append(self.unserved >= self.limit)
            if self.served[-1]:
                real(driver, cmd)
                return
            self.unserved += 1
            driver._pull_subject = subject + b"-nobody"
            try:
                real(driver, cmd)
            finally:
                driver._pull_subject = subject

        monkeypatch.setattr(PullDriver, "_send_pull", send)


async def only_known_subscriptions(server: NatsServer, js: JetStreamContext) -> None:
    """Wait (bounded) until the server holds no subscription the client has forgotten."""

    async def only_mine() -> bool:
        mine = {sub.subject for sub in js.nc._subs.values()}
        connz = await server.monitor("connz?subs=1")
        conns = connz["connections"]
        return {s for c in conns for s in c.get("subscriptions_list", [])} <= mine

    await wait_until(only_mine, 10, message="a forgotten subscription is on the server")


def spark_reader_config(stream: str, inbox_prefix: str) -> str:
    """A server config: account A with ``admin`` (any call) and ``reader`` (password as the
    name), who may do only what a Spark read of ``stream`` asks for (the API level, the
    stream's info, its read consumers: create, pull, info, delete) and subscribe only
    under ``inbox_prefix`` (``_INBOX_<name>``): no ``STREAM.MSG.GET``, no direct gets."""
    return f"""
accounts: {{
  A: {{
    jetstream: enabled
    users: [
      {{user: admin, password: admin}},
      {{user: reader, password: reader, permissions: {{
         publish: {{allow: [
           "$JS.API.INFO",
           "$JS.API.STREAM.INFO.{stream}",
           "$JS.API.CONSUMER.CREATE.{stream}.*",
           "$JS.API.CONSUMER.CREATE.{stream}.*.>",
           "$JS.API.CONSUMER.MSG.NEXT.{stream}.*",
           "$JS.API.CONSUMER.INFO.{stream}.*",
           "$JS.API.CONSUMER.DELETE.{stream}.*"
         ]}},
         subscribe: {{allow: ["{inbox_prefix}.>"]}}}}}}
    ]
  }}
}}
"""

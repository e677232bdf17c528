"""Permission violations reach the call that caused them, against a nats-server with users.

A publish or a SUB the user's permissions deny gets no reply: the server
answers with an asynchronous ``-ERR 'Permissions Violation for Publish to
"S"'`` (``... for Subscription to "S"``). nats-py hands it to the error
callback only, so the call waited its whole timeout: ``stream()`` raised
``JetStreamTimeoutError`` after 5 s, ``fetch`` returned an empty batch,
``next`` raised ``FetchTimeoutError``, ``consume`` only saw missing
heartbeats, a ``publish_async`` future timed out. Now each raises (or, for
``messages()`` / ``consume()``, reports) :class:`PermissionViolationError`
at once, as nats.js does; concurrent calls are unaffected, and the error
callback still gets every violation.

Every call here has a 10 s timeout (or ``expires``) and must fail within 3 s:
the violation comes back within a round trip.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
import pytest_asyncio

import aiojetstream
from aiojetstream import (
    ConsumerConfig,
    JetStreamContext,
    JetStreamError,
    KeyValueConfig,
    PermissionViolationError,
    StreamConfig,
    _conn,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until

T = TypeVar("T")

#: Every call's own timeout (or expires), and how soon it must fail instead.
TIMEOUT = 10.0
PROMPTLY = 3.0

STREAM = "PV"
CONFIG = f"""
accounts: {{
  A: {{
    jetstream: enabled
    users: [
      {{user: admin, password: admin}},
      {{user: app, password: app, permissions: {{
         publish: {{allow: [
           "$JS.API.INFO",
           "$JS.API.STREAM.INFO.{STREAM}",
           "$JS.API.CONSUMER.INFO.{STREAM}.*",
           "$JS.API.CONSUMER.MSG.NEXT.{STREAM}.READ",
           "$JS.ACK.{STREAM}.>",
           "pv.open.>",
           "svc.Case"
         ]}},
         subscribe: {{allow: ["_INBOX.>"]}}}}}},
      {{user: noinbox, password: noinbox, permissions: {{
         publish: {{allow: [">"]}},
         subscribe: {{allow: ["_INBOX_own.>"]}}}}}},
      {{user: nopullinbox, password: nopullinbox, permissions: {{
         publish: {{allow: [">"]}},
         subscribe: {{allow: ["_INBOX.*.*"]}}}}}}
    ]
  }}
}}
"""


@pytest_asyncio.fixture
async def server() -> AsyncIterator[NatsServer]:
    async with NatsServer(config=CONFIG) as srv:
        admin = await aiojetstream.connect(_as(srv, "admin"))
        try:
            await admin.create_stream(StreamConfig(name=STREAM, subjects=["pv.>"]))
            for name in ("READ", "DENIED"):
                await admin.create_consumer(STREAM, ConsumerConfig(durable_name=name))
            for i in range(4):
                await admin.publish("pv.open.a", b"%d" % i)
        finally:
            await admin.close()
        yield srv


def _as(server: NatsServer, user: str) -> str:
    return server.url.replace("nats://", f"nats://{user}:{user}@")


@pytest.fixture(params=["fast", "fallback"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both paths (the fallback's requests are nats-py's own)."""
    monkeypatch.setenv(_conn.FAST_PATH_ENV, "1" if request.param == "fast" else "0")
    return str(request.param)


class Violations:
    """The connection's error callback: the permissions violations it got."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def error_cb(self, exc: Exception) -> None:
        if "permissions violation" in str(exc).lower():
            self.texts.append(str(exc).lower())


async def _connect(
    server: NatsServer, user: str, violations: Violations, **options: Any
) -> JetStreamContext:
    return await aiojetstream.connect(
        _as(server, user), error_cb=violations.error_cb, timeout=TIMEOUT, **options
    )


async def _refused(call: Awaitable[object]) -> tuple[PermissionViolationError, float]:
    """The PermissionViolationError ``call`` raised, and how long it took."""
    started = time.monotonic()
    with pytest.raises(PermissionViolationError) as caught:
        await call
    return caught.value, time.monotonic() - started


async def _timed(call: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    started = time.monotonic()
    result = await call()
    return result, time.monotonic() - started


# --------------------------------------------------------------------------- requests


async def test_a_refused_request_fails_at_once(server: NatsServer, path: str) -> None:
    violations = Violations()
    js = await _connect(server, "app", violations)
    try:
        assert js._conn.fast == (path == "fast")
        refused, allowed = await asyncio.gather(
            _refused(js.stream("OTHER", timeout=TIMEOUT)),
            js.stream(STREAM, timeout=TIMEOUT),  # concurrent, allowed: unaffected
        )
        error, elapsed = refused
        assert elapsed < PROMPTLY, elapsed
        assert (error.operation, error.subject, error.queue) == (
            "publish",
            "$JS.API.STREAM.INFO.OTHER",
            None,
        )
        assert "'publish' allow list" in str(error)
        assert allowed.name == STREAM
        # The error callback still gets the server's error, as before.
        await wait_until(lambda: len(violations.texts) == 1)
        assert '"$js.api.stream.info.other"' in violations.texts[0]
    finally:
        await js.close()


async def test_refused_publishes_fail_one_each_among_stored_ones(
    server: NatsServer, path: str
) -> None:
    """One -ERR per refused publish: each fails once, the allowed ones are stored."""
    violations = Violations()
    js = await _connect(server, "app", violations)
    try:
        subjects = [f"pv.{'open' if i % 2 else 'shut'}.{i}" for i in range(10)]
        started = time.monotonic()
        results = await asyncio.gather(
            *(js.publish(s, b"x", timeout=TIMEOUT) for s in subjects), return_exceptions=True
        )
        assert time.monotonic() - started < PROMPTLY
        for subject, result in zip(subjects, results, strict=True):
            if ".shut." in subject:
                assert isinstance(result, PermissionViolationError), result
                assert result.subject == subject
            else:
                assert not isinstance(result, BaseException), result
                assert result.stream == STREAM
        await wait_until(lambda: len(violations.texts) == 5)
    finally:
        await js.close()


async def test_the_oldest_request_to_the_refused_subject_fails_and_its_case_counts(
    server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Subjects are case-sensitive: a refused ``svc.case`` is not the ``svc.Case`` waiting.

    nats-py's parser lowercases the server's text; the router hands it on as
    sent, so the request to the refused subject fails, not an older one whose
    subject differs in case only (fast path).
    """
    monkeypatch.setenv(_conn.FAST_PATH_ENV, "1")  # (make test-fallback sets it to 0)
    admin = await aiojetstream.connect(_as(server, "admin"))
    violations = Violations()
    js = await _connect(server, "app", violations)
    try:
        assert js._conn.fast
        asked: asyncio.Queue[Any] = asyncio.Queue()

        async def hold(msg: Any) -> None:
            await asyncio.sleep(0)
            asked.put_nowait(msg)

        await admin.nc.subscribe("svc.>", cb=hold)
        await admin.nc.flush()
        allowed = asyncio.ensure_future(js._conn.request("svc.Case", b"", TIMEOUT))
        held = await asyncio.wait_for(asked.get(), TIMEOUT)  # it waits for its reply
        error, elapsed = await _refused(js._conn.request("svc.case", b"", TIMEOUT))
        assert elapsed < PROMPTLY
        assert error.subject == "svc.case"
        assert not allowed.done(), "the request to svc.Case was failed in its place"
        await admin.nc.publish(held.reply, b"answer")
        data, _ = await asyncio.wait_for(allowed, TIMEOUT)
        assert data == b"answer"
    finally:
        await js.close()
        await admin.close()


async def test_a_refused_reply_inbox_fails_every_waiting_request(
    server: NatsServer, path: str
) -> None:
    """The user may not subscribe ``_INBOX.>``: every request waiting fails, naming
    ``inbox_prefix``; the next request subscribes a new inbox (and fails as fast)."""
    violations = Violations()
    js = await _connect(server, "noinbox", violations)
    try:
        for _ in range(2):
            started = time.monotonic()
            results = await asyncio.gather(
                *(js.stream(STREAM, timeout=TIMEOUT) for _ in range(3)), return_exceptions=True
            )
            assert time.monotonic() - started < PROMPTLY
            for error in results:
                assert isinstance(error, PermissionViolationError), error
                assert error.operation == "subscription"
                assert error.subject.startswith("_INBOX.")
                assert error.subject.endswith(".*")
                assert error.inbox
                assert "inbox_prefix" in str(error)
        inboxes = {e.subject for e in results if isinstance(e, PermissionViolationError)}
        assert len(inboxes) == 1
        await wait_until(lambda: len(violations.texts) >= 2)
        # The refused subscriptions are dropped: nats-py would subscribe them again
        # after every reconnect.
        await wait_until(lambda: not any(s.subject.startswith("_INBOX.") for s in _subs(js)))
    finally:
        await js.close()
    # With an inbox prefix the user may subscribe to, the same user is served.
    js = await _connect(server, "noinbox", violations, inbox_prefix="_INBOX_own")
    try:
        assert (await js.stream(STREAM, timeout=TIMEOUT)).name == STREAM
    finally:
        await js.close()


def _subs(js: JetStreamContext) -> list[Any]:
    return list(js.nc._subs.values())


# --------------------------------------------------------------------------- pulls


async def test_a_refused_pull_fails_fetch_and_next_at_once(server: NatsServer, path: str) -> None:
    violations = Violations()
    js = await _connect(server, "app", violations)
    try:
        denied = await js.consumer(STREAM, "DENIED")
        readable = await js.consumer(STREAM, "READ")
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.DENIED"

        async def collect_denied() -> object:
            return await (await denied.fetch(2, expires=TIMEOUT)).collect()

        (error, elapsed), batch = await asyncio.gather(
            _refused(collect_denied()),
            readable.fetch(2, expires=TIMEOUT),  # the same connection, allowed
        )
        assert elapsed < PROMPTLY
        assert (error.operation, error.subject) == ("publish", subject)
        assert [m.data for m in await batch.collect()] == [b"0", b"1"]
        for call in (
            denied.next(expires=TIMEOUT),
            _collect(denied.fetch_no_wait(3)),
            _collect(denied.fetch_bytes(1000, expires=TIMEOUT)),
        ):
            error, elapsed = await _refused(call)
            assert elapsed < PROMPTLY
            assert error.subject == subject
        await wait_until(lambda: len(violations.texts) == 4)
    finally:
        await js.close()


async def _collect(batch: Awaitable[Any]) -> object:
    return await (await batch).collect()


async def test_pulls_sharing_a_refused_subject_fail_one_each(server: NatsServer, path: str) -> None:
    """Two fetches on one consumer: the server refuses each pull with one -ERR."""
    violations = Violations()
    js = await _connect(server, "app", violations)
    try:
        denied = await js.consumer(STREAM, "DENIED")
        batches = [await denied.fetch(1, expires=TIMEOUT) for _ in range(3)]
        started = time.monotonic()
        results = await asyncio.gather(*(b.collect() for b in batches), return_exceptions=True)
        assert time.monotonic() - started < PROMPTLY
        assert all(isinstance(r, PermissionViolationError) for r in results), results
    finally:
        await js.close()


async def test_a_consumption_reports_a_refused_pull_and_goes_on(
    server: NatsServer, path: str
) -> None:
    """``consume()`` / ``messages()`` hand the violation to the error handler at once
    (not a missed heartbeat 2 x heartbeat later) and keep running."""
    violations = Violations()
    js = await _connect(server, "app", violations)
    try:
        denied = await js.consumer(STREAM, "DENIED")
        reported: asyncio.Queue[JetStreamError] = asyncio.Queue()
        started = time.monotonic()
        ctx = await denied.consume(lambda msg: None, error_handler=reported.put_nowait)
        error = await asyncio.wait_for(reported.get(), TIMEOUT)
        assert time.monotonic() - started < PROMPTLY
        assert isinstance(error, PermissionViolationError)
        assert error.subject == f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.DENIED"
        assert not ctx._ended.is_set(), "a refused pull does not end the consumption"
        ctx.stop()
        assert await ctx.closed() is None

        started = time.monotonic()
        async with denied.messages(error_handler=reported.put_nowait) as it:
            error = await asyncio.wait_for(reported.get(), TIMEOUT)
            assert time.monotonic() - started < PROMPTLY
            assert isinstance(error, PermissionViolationError)
            it.stop()
    finally:
        await js.close()


async def test_a_refused_pull_inbox_ends_fetches_and_consumptions(
    server: NatsServer, path: str
) -> None:
    """The user may subscribe the request inbox (``_INBOX.x.*``), not a pull's
    (``_INBOX.x``): nothing can arrive, the pull ends with the violation."""
    violations = Violations()
    js = await _connect(server, "nopullinbox", violations)
    try:
        readable = await js.consumer(STREAM, "READ")
        error, elapsed = await _refused(_collect(readable.fetch(2, expires=TIMEOUT)))
        assert elapsed < PROMPTLY
        assert error.operation == "subscription"
        assert error.inbox
        assert "inbox_prefix" in str(error)

        reported: list[JetStreamError] = []
        ctx, elapsed = await _timed(
            lambda: readable.consume(lambda msg: None, error_handler=reported.append)
        )
        closed, waited = await _timed(lambda: asyncio.wait_for(ctx.closed(), TIMEOUT))
        assert elapsed + waited < PROMPTLY
        assert isinstance(closed, PermissionViolationError)
        assert reported == [closed]

        with pytest.raises(PermissionViolationError):
            async with readable.messages() as it:
                await asyncio.wait_for(it.next(), TIMEOUT)
    finally:
        await js.close()


# --------------------------------------------------------------------------- publish_async


async def test_a_refused_publish_async_fails_its_future(server: NatsServer, path: str) -> None:
    violations = Violations()
    js = await _connect(server, "app", violations)
    try:
        subjects = ["pv.open.1", "pv.shut.1", "pv.open.2", "pv.shut.2", "pv.shut.3"]
        started = time.monotonic()
        futures = [await js.publish_async(s, b"x", timeout=TIMEOUT) for s in subjects]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert time.monotonic() - started < PROMPTLY
        for subject, result in zip(subjects, results, strict=True):
            if ".shut." in subject:
                assert isinstance(result, PermissionViolationError), result
                assert result.subject == subject
            else:
                assert not isinstance(result, BaseException), result
        assert js.publish_async_pending == 0
        # A batch to a refused subject: its summary fails with the violation.
        summary = await js.publish_many_async("pv.shut.many", [b"a", b"b"], timeout=TIMEOUT)
        error, elapsed = await _refused(summary)
        assert elapsed < PROMPTLY
        assert error.subject == "pv.shut.many"
        await wait_until(lambda: len(violations.texts) == 5)
    finally:
        await js.close()


async def test_a_refused_ack_inbox_fails_every_pending_publish_async(
    server: NatsServer, path: str
) -> None:
    violations = Violations()
    js = await _connect(server, "noinbox", violations)
    try:
        for _ in range(2):  # the next publish subscribes a new inbox
            started = time.monotonic()
            futures = [await js.publish_async("pv.open.x", b"x", timeout=TIMEOUT) for _ in range(3)]
            results = await asyncio.gather(*futures, return_exceptions=True)
            assert time.monotonic() - started < PROMPTLY
            for error in results:
                assert isinstance(error, PermissionViolationError), error
                assert error.inbox
    finally:
        await js.close()


async def test_kv_create_over_a_deleted_key_with_direct_gets_only() -> None:
    """A user allowed the bucket's writes, info and direct gets, not STREAM.MSG.GET (as
    nats.go's KV needs): create over a deleted key reads the last revision by a direct
    get when the leader's get is refused (it raised PermissionViolationError)."""
    bucket = unique_name("perm")
    stream = f"KV_{bucket}"
    app = {
        "user": "app",
        "password": "app",
        "permissions": {
            "publish": {
                "allow": [
                    f"$KV.{bucket}.>",
                    "$JS.API.INFO",
                    f"$JS.API.STREAM.INFO.{stream}",
                    f"$JS.API.DIRECT.GET.{stream}",
                    f"$JS.API.DIRECT.GET.{stream}.>",
                ]
            },
            "subscribe": {"allow": ["_INBOX.>"]},
        },
    }
    config = {
        "accounts": {
            "A": {
                "jetstream": "enabled",
                "users": [{"user": "admin", "password": "admin"}, app],
            }
        }
    }

    async def quiet(_: Exception) -> None:
        pass

    async with NatsServer(config=config) as server:
        admin = await aiojetstream.connect(server.url, user="admin", password="admin")
        js = await aiojetstream.connect(server.url, user="app", password="app", error_cb=quiet)
        try:
            await admin.create_key_value(KeyValueConfig(bucket=bucket))
            kv = await js.key_value(bucket)
            await kv.put("k", b"1")
            await kv.delete("k")
            revision = await kv.create("k", b"2")
            assert revision == 3
            assert (await kv.get("k")).value == b"2"
        finally:
            await js.close()
            await admin.close()

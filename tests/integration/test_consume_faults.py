"""Pull consumption under faults, against real nats-server processes.

RELIABILITY.md rows C1-C8, C12, C13 and O1-O3: server restarts, deleted
consumers (with and without the server's ``409 Consumer Deleted``), missed
heartbeats (SIGSTOP), messages larger than ``max_bytes``, outages (request
rate), closed connections, cancellation and the ordered consumer's resets.

Every test that restarts, kills or freezes a server starts its own
``NatsServer`` / ``NatsCluster``; the shared ``nats_server`` (``js`` fixture)
is used only where nothing is injected into the server itself. No sleep is
used to synchronise: tests wait on events, ``asyncio.wait_for`` and
``wait_until``, and every await that could hang is bounded. The bounds are
the issue's numbers with a margin for a loaded two-core machine. Each test
logs its measured figures at WARNING (``pytest -o log_cli=true``).

How requests are counted (scenario 5): through :class:`ApiCountingProxy`, a
small TCP proxy between the client and the server that parses the client's
protocol stream and logs every ``PUB``/``HPUB`` to ``$JS.API.>``. A monitoring
subscription on ``$JS.API.>`` is no good here: it cannot see what the client
sends while its server is down, and worse, a subscriber on ``$JS.API.>`` is a
responder, so pull requests to a vanished consumer would no longer get the
``503 No Responders`` the scenario is about. ``nc.stats["out_msgs"]`` would
work too but counts acks as well and trusts the client to count itself; the
proxy sees exactly what reaches the wire, with a timestamp each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

import aiojetstream
from aiojetstream import (
    AckPolicy,
    ConnectionClosedError,
    Consumer,
    ConsumerConfig,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    JetStreamContext,
    JetStreamError,
    JetStreamTimeoutError,
    MessageTooLargeError,
    Msg,
    NoHeartbeatError,
    NoRespondersError,
    OrderedConsumerConfig,
    OrderedConsumerResetError,
    StorageType,
    StreamConfig,
    StreamNotFoundError,
)
from aiojetstream._conn import CLOSE_FLUSH_TIMEOUT
from aiojetstream.testing import NatsCluster, NatsServer
from helpers import (
    UnservedPulls,
    only_known_subscriptions,
    unique_name,
    wait_pullable,
    wait_routable,
    wait_until,
)
from proxy import MAX_REQUESTS_PER_SECOND, ApiCountingProxy, max_per_second
from reliability.harness import created

DELETED = (ConsumerDeletedError, ConsumerNotFoundError)

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- helpers


async def connect(url: str, **options: Any) -> JetStreamContext:
    """A client that keeps reconnecting quickly (for servers that restart)."""
    options.setdefault("max_reconnect_attempts", -1)
    options.setdefault("reconnect_time_wait", 0.1)
    return await aiojetstream.connect(url, **options)


async def fill(js: JetStreamContext, subject: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        await js.publish_async(subject, str(i).encode())
    await js.publish_async_complete(timeout=30)


async def publish_when_ready(js: JetStreamContext, subject: str, data: bytes) -> None:
    """Publish once the stream accepts it again (after a restart), bounded; deduplicated."""

    async def attempt() -> bool:
        try:
            await js.publish(subject, data, msg_id=data.decode(), timeout=2)
        except JetStreamError:
            return False
        return True

    await wait_until(attempt, timeout=30, interval=0.1)


def now() -> float:
    return asyncio.get_running_loop().time()


class Errors:
    """An ``error_handler`` that records what it gets, when, and wakes waiters."""

    def __init__(self) -> None:
        self.items: list[tuple[float, JetStreamError]] = []
        self._changed = asyncio.Event()

    def __call__(self, error: JetStreamError) -> None:
        self.items.append((now(), error))
        self._changed.set()

    async def wait_for(
        self,
        kind: type[JetStreamError] | tuple[type[JetStreamError], ...],
        timeout: float,
        since: int = 0,
    ) -> tuple[float, JetStreamError]:
        """The first error of ``kind`` at index ``since`` or later (its time and itself)."""
        async with asyncio.timeout(timeout):
            while True:
                for at, error in self.items[since:]:
                    if isinstance(error, kind):
                        return at, error
                self._changed.clear()
                await self._changed.wait()

    def kinds(self) -> list[str]:
        return [type(e).__name__ for _, e in self.items]


async def num_waiting(js: JetStreamContext, stream: str, consumer: str) -> int:
    info = await (await js.consumer(stream, consumer)).info()
    return info.num_waiting


def leftover_tasks(baseline: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t not in baseline and t is not current]


class InboxWatcher:
    """Sees, at the source, what the server sends to the client's pull inboxes.

    Pull requests carry a two-token ``_INBOX.<id>`` reply subject; a second
    subscription on ``_INBOX.*`` on the same connection receives a copy of each
    heartbeat, status and message right next to the consumer's (the library's
    own request inboxes have three tokens and are not matched). It is a raw
    subscription, so with the fast path its handler runs in the connection's
    read loop, in the same parse as the consumer's own handler: the times it
    records are when the client heard the server, not when a nats-py callback
    task got around to it (which on a loaded machine can be much later and
    would make a measured silence look shorter than the one the consumer saw).
    ``on_next`` runs a callback on the next heartbeat (or the next status with
    a given code, or the next message with a given payload), e.g. to freeze the
    server right then.
    """

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self._sub: Any = None
        self.arrivals: list[float] = []  # user messages (not statuses)
        self._pending: list[
            tuple[bytes | None, bytes | None, Callable[[], None], asyncio.Future[float]]
        ] = []

    @classmethod
    async def start(cls, js: JetStreamContext) -> InboxWatcher:
        watcher = cls(js)
        watcher._sub = await js._conn.subscribe_raw("_INBOX.*", watcher._on_msg)
        await js.nc.flush()
        return watcher

    def on_next(
        self,
        action: Callable[[], None],
        payload: bytes | None = None,
        *,
        status: bytes = b"100",
    ) -> asyncio.Future[float]:
        """Run ``action`` when the next ``status`` (or message ``payload``) shows up.

        Returns a future for the time it showed up.
        """
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._pending.append((payload, status, action, fut))
        return fut

    def _on_msg(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        at = now()
        status = hdr[9:12] if hdr is not None and hdr.startswith(b"NATS/1.0 ") else None
        if status is None:
            self.arrivals.append(at)
        for item in list(self._pending):
            payload, wanted, action, fut = item
            hit = status == wanted if payload is None else (status is None and data == payload)
            if hit:
                self._pending.remove(item)
                action()
                if not fut.done():
                    fut.set_result(at)

    async def close(self) -> None:
        if self._sub is not None and not self.js.nc.is_closed:
            await self._sub.unsubscribe()


async def r1_stream_off(
    js: JetStreamContext, cluster: NatsCluster, avoid: set[str]
) -> tuple[str, str, NatsServer]:
    """Create FILE R1 streams until one is placed on a node not in ``avoid``.

    Returns the stream name, a subject it stores and its node, once that
    subject is routable from ``js``'s node.
    """
    for i in range(12):
        name = f"R1_{i}"
        stream = await js.create_stream(
            StreamConfig(
                name=name, subjects=[f"r1.{i}.>"], storage=StorageType.FILE, num_replicas=1
            )
        )
        info = await stream.info()
        leader = info.cluster.leader if info.cluster else None
        if leader is not None and leader not in avoid:
            await wait_routable(js, f"r1.{i}.x")
            return name, f"r1.{i}.x", cluster.server(leader)
    raise AssertionError(f"could not place an R1 stream outside {avoid}")


# --------------------------------------------------------------------------- C5: restart


@pytest.mark.parametrize("mode", ["consume", "messages"])
async def test_restart_mid_consume_delivers_everything(mode: str) -> None:
    total = 500
    reconnected = asyncio.Event()  # the client is back (nats-py reconnected_cb)
    reconnected_at: list[float] = []

    async def on_reconnected() -> None:
        reconnected_at.append(now())
        reconnected.set()

    async with NatsServer() as server:
        js = await connect(server.url, reconnected_cb=on_reconnected)
        try:
            stream = unique_name("RST")
            await js.create_stream(
                StreamConfig(name=stream, subjects=["rst.>"], storage=StorageType.FILE)
            )
            await fill(js, "rst.x", total)
            consumer = await js.create_consumer(
                stream, ConsumerConfig(durable_name="dur", ack_wait=timedelta(seconds=2))
            )
            deliveries: dict[bytes, list[int]] = defaultdict(list)  # payload -> num_delivered
            confirmed: set[bytes] = set()  # double_ack confirmed by the server
            after_confirm: list[bytes] = []  # redelivered although confirmed
            ack_errors: list[JetStreamError] = []
            half, everything = asyncio.Event(), asyncio.Event()
            watcher = await InboxWatcher.start(js)  # sees when deliveries arrive

            async def handle(msg: Msg) -> None:
                if msg.data in confirmed:
                    after_confirm.append(msg.data)
                deliveries[msg.data].append(msg.metadata.num_delivered)
                if len(deliveries) >= total // 2 and not half.is_set():
                    # Hold consumption here until the client is back, so the
                    # second half is certainly unconsumed when the server restarts.
                    half.set()
                    await asyncio.wait_for(reconnected.wait(), 60)
                if reconnected.is_set():
                    try:
                        await msg.double_ack(timeout=10)
                        confirmed.add(msg.data)
                    except JetStreamError as exc:
                        ack_errors.append(exc)
                else:
                    await msg.ack()
                if len(deliveries) >= total // 2:
                    half.set()
                if len(deliveries) == total:
                    everything.set()

            errors = Errors()
            pump: asyncio.Task[None] | None = None
            ctx = None
            it = None
            if mode == "consume":
                ctx = await consumer.consume(handle, error_handler=errors, max_messages=50)
            else:
                it = consumer.messages(max_messages=50, error_handler=errors)
                await it.__aenter__()

                async def iterate() -> None:
                    assert it is not None
                    async for msg in it:
                        await handle(msg)

                pump = asyncio.create_task(iterate())

            await asyncio.wait_for(half.wait(), 30)
            t_restart = now()
            await asyncio.wait_for(server.restart(), 60)
            t_up = now()
            await asyncio.wait_for(reconnected.wait(), 30)
            t_back = reconnected_at[0]
            await asyncio.wait_for(everything.wait(), 60)
            t_all = now()

            async def all_acked() -> bool:
                info = await consumer.info()
                return info.num_ack_pending == 0 and info.num_pending == 0

            # Redeliveries of what was unacked at the restart come after ack_wait.
            await wait_until(all_acked, timeout=30, interval=0.2)
            if ctx is not None:
                ctx.stop()
                assert await asyncio.wait_for(ctx.closed(), 10) is None
            else:
                assert it is not None
                assert pump is not None
                it.stop()
                await asyncio.wait_for(pump, 10)
                await asyncio.wait_for(it.aclose(), 10)

            assert set(deliveries) == {str(i).encode() for i in range(total)}
            for payload, counts in deliveries.items():
                # The first delivery is the only one with num_delivered == 1.
                assert counts.count(1) <= 1, (payload, counts)
            assert after_confirm == [], "a message confirmed by double_ack came again"
            assert ack_errors == [], "double_ack after the restart failed"
            assert confirmed, "no double_ack after the restart"
            # No terminal error, and nothing but missed heartbeats may be reported.
            assert {k for k in errors.kinds()} <= {"NoHeartbeatError"}
            redelivered = sum(len(c) - 1 for c in deliveries.values())
            # Deliveries arriving after the reconnect: consumption resumed by itself
            # (nothing is pulled while disconnected).
            resumed = [t for t in watcher.arrivals if t > t_back]
            logger.warning(
                "C5 %s: restart took %.2fs, reconnected %.2fs after it began, first delivery "
                "%.3fs after the reconnect, all %d seen %.2fs after it, %d redeliveries, "
                "%d double_acks confirmed, reports %s",
                mode,
                t_up - t_restart,
                t_back - t_restart,
                (resumed[0] - t_back) if resumed else -1,
                total,
                t_all - t_back,
                redelivered,
                len(confirmed),
                errors.kinds(),
            )
            assert resumed
            assert resumed[0] - t_back < 15
        finally:
            await js.close()


# --------------------------------------------------------------------------- C1: 409


async def _deleted_stream(js: JetStreamContext, count: int = 0) -> aiojetstream.Consumer:
    stream = unique_name("DEL")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["del.>"], storage=StorageType.MEMORY)
    )
    await fill(js, "del.x", count)
    return await js.create_consumer(stream, ConsumerConfig(durable_name="gone"))


@contextlib.asynccontextmanager
async def watching(js: JetStreamContext) -> AsyncIterator[InboxWatcher]:
    watcher = await InboxWatcher.start(js)
    try:
        yield watcher
    finally:
        await watcher.close()


# C1's "within 1 s" is the client's part: from the 409 reaching the connection
# (seen at the source by an InboxWatcher) to the error. The delete request's
# own round trip is the server's, and on a loaded machine it alone can take
# a good part of a second; the end-to-end waits below are plain bounds (5 s).


async def test_consumer_deleted_during_messages_409(js: JetStreamContext) -> None:
    consumer = await _deleted_stream(js, 2)
    errors = Errors()
    async with watching(js) as watcher, consumer.messages(expires=30, error_handler=errors) as it:
        first = [await asyncio.wait_for(it.next(), 10) for _ in range(2)]
        assert [m.data for m in first] == [b"0", b"1"]
        waiting = asyncio.create_task(it.next())
        await wait_until(lambda: _waiting(js, consumer), timeout=10)
        heard = watcher.on_next(lambda: None, status=b"409")
        await js.delete_consumer(consumer.stream_name, "gone")
        with pytest.raises(ConsumerDeletedError):
            await asyncio.wait_for(waiting, 5)
        raised = now()
        elapsed = raised - await asyncio.wait_for(heard, 5)
    logger.warning("C1 messages: 409 -> ConsumerDeletedError in %.3fs", elapsed)
    assert elapsed < 1.0


async def _waiting(js: JetStreamContext, consumer: aiojetstream.Consumer) -> bool:
    return await num_waiting(js, consumer.stream_name, consumer.name) >= 1


async def test_consumer_deleted_during_consume_409(js: JetStreamContext) -> None:
    consumer = await _deleted_stream(js, 3)
    errors = Errors()
    got: list[bytes] = []
    three = asyncio.Event()

    def handler(msg: Msg) -> None:
        got.append(msg.data)
        if len(got) == 3:
            three.set()

    async with watching(js) as watcher:
        ctx = await consumer.consume(handler, error_handler=errors, expires=30)
        await asyncio.wait_for(three.wait(), 10)
        await wait_until(lambda: _waiting(js, consumer), timeout=10)
        heard = watcher.on_next(lambda: None, status=b"409")
        await js.delete_consumer(consumer.stream_name, "gone")
        at, error = await errors.wait_for(DELETED, timeout=5)
        t_409 = await asyncio.wait_for(heard, 5)
    assert isinstance(error, ConsumerDeletedError)
    closed = await asyncio.wait_for(ctx.closed(), 5)
    assert closed is error
    logger.warning("C1 consume: 409 -> error_handler in %.3fs", at - t_409)
    assert at - t_409 < 1.0
    assert got == [b"0", b"1", b"2"]


async def test_consumer_deleted_during_fetch_409(js: JetStreamContext) -> None:
    consumer = await _deleted_stream(js, 3)
    batch = await consumer.fetch(10, expires=30)
    got: list[bytes] = []
    three = asyncio.Event()
    failure: list[tuple[float, BaseException]] = []

    async def read() -> None:
        try:
            async for msg in batch:
                got.append(msg.data)
                if len(got) == 3:
                    three.set()
        except JetStreamError as exc:
            failure.append((now(), exc))

    async with watching(js) as watcher:
        reader = asyncio.create_task(read())
        await asyncio.wait_for(three.wait(), 10)
        await wait_until(lambda: _waiting(js, consumer), timeout=10)
        heard = watcher.on_next(lambda: None, status=b"409")
        await js.delete_consumer(consumer.stream_name, "gone")
        await asyncio.wait_for(reader, 5)
        t_409 = await asyncio.wait_for(heard, 5)
    await batch.aclose()
    assert got == [b"0", b"1", b"2"], "the messages delivered before the deletion are returned"
    assert len(failure) == 1
    assert isinstance(failure[0][1], ConsumerDeletedError)
    logger.warning("C1 fetch: 409 -> ConsumerDeletedError in %.3fs", failure[0][0] - t_409)
    assert failure[0][0] - t_409 < 1.0


async def test_consumer_deleted_while_no_pull_is_waiting(js: JetStreamContext) -> None:
    """The server has no pull to answer: it sends nothing; the next pull finds out."""
    consumer = await _deleted_stream(js, 10)
    async with consumer.messages(max_messages=10, expires=30) as it:
        got = [await asyncio.wait_for(it.next(), 10)]

        async def no_waiting_pull() -> bool:
            info = await consumer.info()
            return info.num_waiting == 0 and info.num_ack_pending == 10

        # All 10 are in the client's buffer and nothing is asked for.
        await wait_until(no_waiting_pull, timeout=10)
        await js.delete_consumer(consumer.stream_name, "gone")
        t0 = now()  # the deletion is confirmed: from here on it is the client's time
        while len(got) < 10:
            got.append(await asyncio.wait_for(it.next(), 5))
        with pytest.raises(DELETED):
            await asyncio.wait_for(it.next(), 5)
        elapsed = now() - t0
    assert [m.data for m in got] == [str(i).encode() for i in range(10)]
    logger.warning("C1 no pull waiting: ConsumerNotFoundError %.3fs after deletion", elapsed)
    assert elapsed < 1.0


# ------------------------------------------------------- C1/C3: deleted, server silent


@pytest.mark.cluster
@pytest.mark.parametrize("mode", ["messages", "consume", "fetch"])
async def test_consumer_deleted_server_silent(mode: str) -> None:
    """The consumer is deleted while its node hangs: no 409 reaches the client in time.

    Measured with nats-server 2.15.1: every pull waiting at the consumer gets
    ``409 Consumer Deleted`` within milliseconds when the consumer is deleted,
    whatever connection or node deletes it, and when its stream is deleted
    (single server, R1 and R3 in a cluster); a pull sent after the deletion
    gets ``503`` at once. The server is silent only when no pull is waiting
    (see ``test_consumer_deleted_while_no_pull_is_waiting``; e.g. an ephemeral
    removed by ``inactive_threshold`` after its pull expired) or when the node
    holding the consumer can not talk. Here the R1 consumer's node is frozen
    (SIGSTOP) right after a heartbeat and the consumer deleted for real through
    the meta leader (the delete call itself times out: its answer comes from
    the frozen node, which sends the 409 only once thawed). The client must
    notice from the missing heartbeats and its consumer check: within
    2 x heartbeat + 1 s.
    """
    hb = 0.5
    bound = 2 * hb + 1.0 + 1.0  # the bound, plus a second for a loaded machine
    async with NatsCluster(3, config={"cluster": {"no_advertise": True}}) as cluster:
        meta = (await cluster.meta_leader()).server_name
        assert meta is not None
        admin = await connect(cluster.server(meta).url)
        js: JetStreamContext | None = None
        watcher: InboxWatcher | None = None
        try:
            stream, _, host = await r1_stream_off(admin, cluster, {meta})
            client_node = next(s for s in cluster.servers if s is not host)
            js = await connect(client_node.url)
            watcher = await InboxWatcher.start(js)
            consumer = await admin.create_consumer(stream, ConsumerConfig(durable_name="c"))
            # Set-up: the fresh consumer's node may leave the first look-up unanswered
            # on a loaded machine (once in CI: no reply in 5 s); asked again then.
            consumer = await created(lambda timeout: js.consumer(stream, "c", timeout=timeout))
            # Set-up: a pull sent before the consumer's pull subject reached the
            # client's node is dropped there (once in CI: the fetch ended on missing
            # heartbeats before it was ever waiting).
            await wait_pullable(js, stream, "c")
            errors = Errors()
            outcome: list[tuple[float, BaseException | None]] = []

            async def run() -> None:
                try:
                    if mode == "messages":
                        async with consumer.messages(
                            expires=5, heartbeat=hb, error_handler=errors
                        ) as it:
                            async for _ in it:
                                pass
                    elif mode == "fetch":
                        async with await consumer.fetch(10, expires=5, heartbeat=hb) as batch:
                            async for _ in batch:
                                pass
                    else:
                        ctx = await consumer.consume(
                            lambda m: None, expires=5, heartbeat=hb, error_handler=errors
                        )
                        err = await ctx.closed()
                        if err is not None:
                            raise err
                except JetStreamError as exc:
                    outcome.append((now(), exc))
                else:
                    outcome.append((now(), None))

            runner = asyncio.create_task(run())

            async def pull_waiting() -> bool:
                if runner.done():
                    raise AssertionError(f"the {mode} ended before its pull was seen: {outcome}")
                info = await (await admin.consumer(stream, "c")).info()
                return info.num_waiting >= 1

            await wait_until(pull_waiting, timeout=10)
            # Freeze right after a heartbeat: nothing more comes from the node.
            t_freeze = await asyncio.wait_for(watcher.on_next(host.freeze), 10)
            # The consumer's node can not answer, so the call times out, but the
            # meta leader has removed the consumer for good.
            with contextlib.suppress(JetStreamTimeoutError):
                await admin.delete_consumer(stream, "c", timeout=0.5)
            with pytest.raises(ConsumerNotFoundError):
                await (await admin.consumer(stream, "c")).info()
            await asyncio.wait_for(runner, bound + 5)
            host.thaw()
            ((at, error),) = outcome
            elapsed = at - t_freeze
            logger.warning(
                "C1 silent %s: %s %.3fs after the freeze (bound %.1fs), reports %s",
                mode,
                type(error).__name__,
                elapsed,
                bound,
                errors.kinds(),
            )
            assert isinstance(error, DELETED)
            assert elapsed <= bound
            if mode != "fetch":
                assert "NoHeartbeatError" in errors.kinds()
        finally:
            if watcher is not None:
                await watcher.close()
            if js is not None:
                await js.close()
            await admin.close()


# --------------------------------------------------------------------------- C3: heartbeats


async def test_missed_heartbeats_messages_freeze() -> None:
    """SIGSTOP the server: NoHeartbeatError after 2 x heartbeat of silence, then recovery.

    Two freezes. (A) While the only pull is the first one, whose heartbeats
    come right after the client's heartbeat ticks, the last thing heard is a
    message arriving between two ticks (published a deliberate 0.15 s after a
    heartbeat; this sets a phase, it synchronises nothing) and the server is
    frozen the moment it arrives. (B) The server is frozen the moment a
    heartbeat arrives. Either way the client must report only after 2 x hb of
    silence, and within ~3 s; after each thaw a new message is delivered.
    """
    hb = 0.5
    async with NatsServer() as server:
        js = await connect(server.url)
        watcher = await InboxWatcher.start(js)
        try:
            stream = unique_name("HB")
            await js.create_stream(StreamConfig(name=stream, subjects=["hb.>"]))
            consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="hb"))
            errors = Errors()
            received: list[bytes] = []
            arrived = asyncio.Event()
            failures: list[str] = []
            figures: list[str] = []

            def check(label: str, silence: float) -> None:
                figures.append(f"{label}: reported after {silence:.3f}s of silence")
                if silence < 2 * hb - 0.1:
                    failures.append(
                        f"{label}: NoHeartbeatError after only {silence:.3f}s of silence; "
                        f"ADR-37 and RELIABILITY C3 want 2 x heartbeat = {2 * hb:g}s "
                        "(the engine before 537a5e6 reported on the 4th silent hb/2 "
                        "tick, after 1.5-2 x hb: 0.85 s here in A, 0.75 s in B)"
                    )
                if silence > 3.0:
                    failures.append(f"{label}: NoHeartbeatError only after {silence:.3f}s")

            async def recovers(payload: bytes) -> float:
                arrived.clear()
                t0 = now()
                await js.publish("hb.x", payload, timeout=10)
                await asyncio.wait_for(arrived.wait(), 10)
                assert received[-1] == payload
                return now() - t0

            async with consumer.messages(expires=5, heartbeat=hb, error_handler=errors) as it:

                async def read() -> None:
                    async for msg in it:
                        received.append(msg.data)
                        await msg.ack()
                        arrived.set()

                reader = asyncio.create_task(read())

                # (A) the last arrival is a message between two ticks.
                await asyncio.wait_for(watcher.on_next(lambda: None), 10)
                frozen = watcher.on_next(server.freeze, payload=b"mid-tick")
                await asyncio.sleep(0.15)  # the phase offset (see the docstring)
                await js.nc.publish("hb.x", b"mid-tick")
                t_last = await asyncio.wait_for(frozen, 10)
                at, _ = await errors.wait_for(NoHeartbeatError, timeout=10)
                server.thaw()
                check("A (message between ticks)", at - t_last)
                figures.append(f"A: delivery again after {await recovers(b'after-A'):.3f}s")

                # (B) the last arrival is a heartbeat.
                since = len(errors.items)
                t_last = await asyncio.wait_for(watcher.on_next(server.freeze), 10)
                at, _ = await errors.wait_for(NoHeartbeatError, timeout=10, since=since)
                server.thaw()
                check("B (heartbeat)", at - t_last)
                figures.append(f"B: delivery again after {await recovers(b'after-B'):.3f}s")

                it.stop()
                await asyncio.wait_for(reader, 10)
            logger.warning("C3 messages: %s; reports %s", "; ".join(figures), errors.kinds())
            assert received == [b"mid-tick", b"after-A", b"after-B"]
            assert not failures, failures
        finally:
            await watcher.close()
            await js.close()


async def test_missed_heartbeats_consume_freeze() -> None:
    hb = 0.5
    async with NatsServer() as server:
        js = await connect(server.url)
        watcher = await InboxWatcher.start(js)
        try:
            stream = unique_name("HB")
            await js.create_stream(StreamConfig(name=stream, subjects=["hb.>"]))
            consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="hb"))
            errors = Errors()
            got: list[bytes] = []
            arrived = asyncio.Event()

            async def handler(msg: Msg) -> None:
                got.append(msg.data)
                await msg.ack()
                arrived.set()

            async with await consumer.consume(
                handler, expires=2, heartbeat=hb, error_handler=errors
            ) as ctx:
                t_freeze = await asyncio.wait_for(watcher.on_next(server.freeze), 10)
                at, _ = await errors.wait_for(NoHeartbeatError, timeout=10)
                server.thaw()
                elapsed = at - t_freeze
                await js.publish("hb.x", b"after-thaw", timeout=10)
                await asyncio.wait_for(arrived.wait(), 10)
                logger.warning(
                    "C3 consume: NoHeartbeatError %.3fs after the freeze, "
                    "delivery again %.3fs after the report",
                    elapsed,
                    now() - at,
                )
                assert 2 * hb - 0.1 <= elapsed <= 3.0
                assert got == [b"after-thaw"]
            assert ctx.error is None
        finally:
            await watcher.close()
            await js.close()


@pytest.mark.parametrize("mode", ["consume", "messages", "next"])
async def test_stop_during_consumer_check_is_prompt(mode: str) -> None:
    """The server hangs: after missed heartbeats a consumer check waits for a reply.

    Stopping (or cancelling ``next()``) then must not wait for that check,
    which would only give up after the API timeout (10 s here). The bound,
    half that timeout, tells the two apart with room for a loaded machine.
    """
    hb = 0.5
    async with NatsServer() as server:
        js = await connect(server.url, timeout=10.0)
        watcher = await InboxWatcher.start(js)
        try:
            stream = unique_name("CHK")
            await js.create_stream(StreamConfig(name=stream, subjects=["chk.>"]))
            consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="chk"))
            errors = Errors()
            if mode == "consume":
                ctx = await consumer.consume(
                    lambda m: None, expires=5, heartbeat=hb, error_handler=errors
                )
                closing: Callable[[], Awaitable[object]] = ctx.closed
                stop: Callable[[], None] = ctx.stop
            elif mode == "messages":
                it = consumer.messages(expires=5, heartbeat=hb, error_handler=errors)
                await it.__aenter__()
                reader = asyncio.create_task(it.next())
                closing = it.aclose

                def stop() -> None:
                    reader.cancel()

            else:
                task = asyncio.create_task(consumer.next(expires=5, heartbeat=hb))

                async def closing() -> object:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    return None

                def stop() -> None:
                    task.cancel()

            await asyncio.wait_for(watcher.on_next(server.freeze), 10)
            sent = js.nc.stats["out_msgs"]
            # The check (CONSUMER.INFO) leaves the client after ~2 x hb of silence.
            await wait_until(lambda: js.nc.stats["out_msgs"] > sent, timeout=10)
            t0 = now()
            stop()
            result = await asyncio.wait_for(closing(), 15)
            elapsed = now() - t0
            server.thaw()
            logger.warning("C13 %s: stopped during a consumer check in %.3fs", mode, elapsed)
            assert result is None
            assert elapsed < 5.0, f"closing waited {elapsed:.2f}s for the consumer check"
        finally:
            if server.frozen:
                server.thaw()
            await watcher.close()
            await js.close()


# --------------------------------------------------------------------------- C8: max_bytes


async def _big_message_consumer(js: JetStreamContext) -> aiojetstream.Consumer:
    stream = unique_name("BIG")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["big.>"], storage=StorageType.MEMORY)
    )
    await js.publish("big.x", b"x" * 4000)
    return await js.create_consumer(stream, ConsumerConfig(durable_name="big"))


class PullCounter:
    """A client connection through an :class:`ApiCountingProxy` that counts its own pulls.

    The proxy parses what the client writes before forwarding it, so after
    ``count()`` flushes the client (a PING answered by the server) every pull
    sent before is counted: no second connection, no routing skew.
    """

    def __init__(self, proxy: ApiCountingProxy, js: JetStreamContext, stream: str) -> None:
        self.proxy = proxy
        self.js = js
        self.prefix = f"$JS.API.CONSUMER.MSG.NEXT.{stream}."

    @classmethod
    async def start(cls, port: int, stream: str) -> PullCounter:
        proxy = ApiCountingProxy(port)
        await proxy.__aenter__()
        try:
            js = await connect(proxy.url)
        except BaseException:
            await proxy.__aexit__(None, None, None)
            raise
        return cls(proxy, js, stream)

    async def consumer(self, stream: str, name: str) -> aiojetstream.Consumer:
        """The consumer's handle on the counted connection."""
        return await self.js.consumer(stream, name)

    async def count(self) -> int:
        """Pulls the counted connection sent so far."""
        await self.js.nc.flush()
        return sum(1 for _, subject in self.proxy.api if subject.startswith(self.prefix))

    async def close(self) -> None:
        try:
            await self.js.close()
        finally:
            await self.proxy.__aexit__(None, None, None)


async def test_fetch_bytes_message_too_large(js: JetStreamContext, nats_server: NatsServer) -> None:
    stream = (await _big_message_consumer(js)).stream_name
    counter = await PullCounter.start(nats_server.port, stream)
    try:
        consumer = await counter.consumer(stream, "big")
        t0 = now()
        batch = await consumer.fetch_bytes(500, expires=5)
        with pytest.raises(MessageTooLargeError, match="max_bytes"):
            await asyncio.wait_for(anext(batch), 10)
        elapsed = now() - t0
        await batch.aclose()
        pulls = await counter.count()
        logger.warning("C8 fetch_bytes: MessageTooLargeError in %.3fs, %d pull", elapsed, pulls)
        assert elapsed < 3.0
        assert pulls == 1
    finally:
        await counter.close()


@pytest.mark.parametrize("mode", ["messages", "consume"])
async def test_continuous_message_too_large_ends_without_looping(
    js: JetStreamContext, nats_server: NatsServer, mode: str
) -> None:
    stream = (await _big_message_consumer(js)).stream_name
    counter = await PullCounter.start(nats_server.port, stream)
    try:
        consumer = await counter.consumer(stream, "big")
        t0 = now()
        errors = Errors()
        if mode == "messages":
            async with consumer.messages(max_bytes=500, expires=2, error_handler=errors) as it:
                with pytest.raises(MessageTooLargeError):
                    await asyncio.wait_for(it.next(), 10)
            ended = now()
        else:
            ctx = await consumer.consume(
                lambda m: None, max_bytes=500, expires=2, error_handler=errors
            )
            error = await asyncio.wait_for(ctx.closed(), 10)
            ended = now()
            assert isinstance(error, MessageTooLargeError)
            assert [type(e) for _, e in errors.items] == [MessageTooLargeError]
        pulls = await counter.count()
        logger.warning(
            "C8 %s: MessageTooLargeError after %.3fs; %d pull(s) sent",
            mode,
            ended - t0,
            pulls,
        )
        assert ended - t0 < 3.0
        assert pulls <= 3
        info = await consumer.info()
        assert info.num_waiting == 0
    finally:
        await counter.close()


async def test_messages_small_then_too_large(js: JetStreamContext, nats_server: NatsServer) -> None:
    """A message that fits is delivered first; the one after it ends iteration."""
    stream = unique_name("BIG")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["big.>"], storage=StorageType.MEMORY)
    )
    await js.publish("big.x", b"small")
    await js.publish("big.x", b"x" * 4000)
    await js.create_consumer(stream, ConsumerConfig(durable_name="big"))
    counter = await PullCounter.start(nats_server.port, stream)
    try:
        consumer = await counter.consumer(stream, "big")
        async with consumer.messages(max_bytes=500, expires=2) as it:
            first = await asyncio.wait_for(it.next(), 10)
            assert first.data == b"small"
            await first.ack()
            with pytest.raises(MessageTooLargeError):
                await asyncio.wait_for(it.next(), 10)
        pulls = await counter.count()
        logger.warning("C8 small then large: %d pulls", pulls)
        assert pulls <= 4
    finally:
        await counter.close()


# --------------------------------------------------------------------------- goal 4: rates


def assert_before_then_after(got: list[bytes]) -> None:
    """Both messages arrived, "after" once and last.

    The ack of "before" is fire-and-forget and its server is SIGKILLed right
    after: the server may not have persisted it, so "before" may come again
    (at-least-once). Nothing is lost.
    """
    assert got[0] == b"before"
    assert got[-1] == b"after"
    assert set(got) == {b"before", b"after"}
    assert got.count(b"after") == 1


async def test_outage_server_down_request_rate() -> None:
    """The server is down for 4 s: the consumer sends at most 20 requests/s, then resumes."""
    async with NatsServer() as server, ApiCountingProxy(server.port) as proxy:
        js = await connect(proxy.url)
        try:
            stream = unique_name("OUT")
            await js.create_stream(
                StreamConfig(name=stream, subjects=["out.>"], storage=StorageType.FILE)
            )
            consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="out"))
            errors = Errors()
            got: list[bytes] = []
            arrived = asyncio.Event()

            async def handler(msg: Msg) -> None:
                got.append(msg.data)
                await msg.ack()
                arrived.set()

            ctx = await consumer.consume(
                handler, expires=2, heartbeat=0.5, error_handler=errors, max_messages=10
            )
            await js.publish("out.x", b"before", timeout=10)
            await asyncio.wait_for(arrived.wait(), 10)
            arrived.clear()
            t_down = now()
            await server.kill()  # the store is kept
            await wait_until(lambda: not js.nc.is_connected, timeout=10)
            # The outage itself: a deliberate duration, not a synchronisation.
            await asyncio.sleep(4)
            await asyncio.wait_for(server.start(), 30)
            t_up = now()
            await wait_until(lambda: js.nc.is_connected, timeout=10)
            await publish_when_ready(js, "out.x", b"after")
            await asyncio.wait_for(arrived.wait(), 15)
            t_resumed = now()
            await asyncio.sleep(1)  # an observation window after the recovery
            t_end = now()
            ctx.stop()
            assert await asyncio.wait_for(ctx.closed(), 10) is None
            api = proxy.api_times(t_down, t_end)
            pulls = proxy.api_times(t_down, t_end, "$JS.API.CONSUMER.MSG.NEXT.")
            during = proxy.api_times(t_down, t_up)
            rate = max_per_second(api)
            logger.warning(
                "goal 4, server down %.1fs: %d API requests (%d pulls) in %.1fs, "
                "%d while down, max %d/s; resumed %.2fs after the server was up; reports %s",
                t_up - t_down,
                len(api),
                len(pulls),
                t_end - t_down,
                len(during),
                rate,
                t_resumed - t_up,
                errors.kinds(),
            )
            assert rate <= MAX_REQUESTS_PER_SECOND
            assert_before_then_after(got)
        finally:
            await js.close()


@pytest.mark.cluster
async def test_outage_jetstream_unavailable_request_rate() -> None:
    """The stream's node dies; the client's node stays up: pulls get 503, checks time out."""
    async with NatsCluster(3, config={"cluster": {"no_advertise": True}}) as cluster:
        meta = (await cluster.meta_leader()).server_name
        assert meta is not None
        admin = await connect(cluster.server(meta).url)
        try:
            stream, subject, host = await r1_stream_off(admin, cluster, {meta})
            client_node = next(
                s for s in cluster.servers if s is not host and s.server_name != meta
            )
            await admin.create_consumer(stream, ConsumerConfig(durable_name="c"))
            async with ApiCountingProxy(client_node.port) as proxy:
                js = await connect(proxy.url, timeout=1.0)
                try:
                    # The 1 s default is for the checks during the outage; this lookup
                    # comes before it. On a loaded machine its reply can be lost: the
                    # consumer's node may answer before this new connection's reply
                    # interest has reached it (the request and the interest travel on
                    # different routes), so it is asked again until answered.
                    found: list[Consumer] = []

                    async def looked_up() -> bool:
                        try:
                            found.append(await js.consumer(stream, "c", timeout=2))
                        except JetStreamTimeoutError:
                            return False
                        return True

                    await wait_until(looked_up, 30, message="the consumer lookup never answered")
                    consumer = found[0]
                    errors = Errors()
                    got: list[bytes] = []
                    arrived = asyncio.Event()

                    async def handler(msg: Msg) -> None:
                        got.append(msg.data)
                        await msg.ack()
                        arrived.set()

                    # A small buffer and short expiry: many occasions to re-pull.
                    ctx = await consumer.consume(
                        handler,
                        expires=1,
                        heartbeat=0.5,
                        error_handler=errors,
                        max_messages=2,
                        threshold_messages=1,
                    )
                    await admin.publish(subject, b"before", timeout=10)
                    await asyncio.wait_for(arrived.wait(), 10)
                    arrived.clear()
                    t_down = now()
                    await host.kill()
                    # JetStream is unavailable for this consumer for 6 s (a deliberate
                    # duration); meanwhile the client stays connected.
                    await asyncio.sleep(6)
                    t_restart = now()
                    await asyncio.wait_for(host.start(), 30)
                    t_up = now()
                    assert js.nc.is_connected
                    await publish_when_ready(admin, subject, b"after")
                    await asyncio.wait_for(arrived.wait(), 30)
                    t_resumed = now()
                    ctx.stop()
                    assert await asyncio.wait_for(ctx.closed(), 10) is None
                    api = proxy.api_times(t_down, t_restart)
                    pulls = proxy.api_times(t_down, t_restart, "$JS.API.CONSUMER.MSG.NEXT.")
                    rate = max_per_second(api)
                    logger.warning(
                        "goal 4, JetStream unavailable %.1fs: %d API requests (%d pulls), "
                        "max %d/s; resumed %.2fs after the node was up; reports %s",
                        t_restart - t_down,
                        len(api),
                        len(pulls),
                        rate,
                        t_resumed - t_up,
                        errors.kinds(),
                    )
                    assert rate <= MAX_REQUESTS_PER_SECOND
                    assert len(api) <= MAX_REQUESTS_PER_SECOND * (t_restart - t_down)
                    assert_before_then_after(got)
                    # The outage is not silent: the first failed consumer check went to
                    # error_handler (once, not at each retry).
                    failed_checks = [
                        (at, e) for at, e in errors.items if isinstance(e, JetStreamTimeoutError)
                    ]
                    assert len(failed_checks) == 1, errors.kinds()
                    assert t_down < failed_checks[0][0] < t_restart, errors.kinds()
                finally:
                    await js.close()
        finally:
            await admin.close()


# --------------------------------------------------------------------------- C12: closed


async def _client_consumer(
    js: JetStreamContext, url: str
) -> tuple[JetStreamContext, aiojetstream.Consumer]:
    stream = unique_name("CLS")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["cls.>"], storage=StorageType.MEMORY)
    )
    await js.create_consumer(stream, ConsumerConfig(durable_name="cls"))
    client = await aiojetstream.connect(url)
    return client, await client.consumer(stream, "cls")


async def test_close_during_messages(js: JetStreamContext, nats_url: str) -> None:
    client, consumer = await _client_consumer(js, nats_url)
    try:
        async with consumer.messages(expires=30) as it:
            waiting = asyncio.create_task(it.next())
            await wait_until(lambda: num_waiting_ge(js, consumer.stream_name, "cls"), timeout=10)
            t0 = now()
            await asyncio.wait_for(client.close(), 10)
            with pytest.raises(ConnectionClosedError):
                await asyncio.wait_for(waiting, 5)
            elapsed = now() - t0
            # Iterating again raises the same, at once.
            with pytest.raises(ConnectionClosedError):
                await asyncio.wait_for(it.next(), 1)
        logger.warning("C12 messages: ConnectionClosedError %.3fs after close()", elapsed)
        assert elapsed < 3.0
    finally:
        await client.close()


async def num_waiting_ge(js: JetStreamContext, stream: str, consumer: str, n: int = 1) -> bool:
    return await num_waiting(js, stream, consumer) >= n


async def test_close_during_consume(js: JetStreamContext, nats_url: str) -> None:
    client, consumer = await _client_consumer(js, nats_url)
    errors = Errors()
    try:
        ctx = await consumer.consume(lambda m: None, expires=30, error_handler=errors)
        await wait_until(lambda: num_waiting_ge(js, consumer.stream_name, "cls"), timeout=10)
        t0 = now()
        await asyncio.wait_for(client.nc.close(), 10)
        error = await asyncio.wait_for(ctx.closed(), 5)
        elapsed = now() - t0
        logger.warning("C12 consume: closed() -> %r %.3fs after close()", error, elapsed)
        assert isinstance(error, ConnectionClosedError)
        assert elapsed < 3.0
        assert errors.kinds() == ["ConnectionClosedError"]
    finally:
        await client.close()


async def test_close_during_fetch_and_next(js: JetStreamContext, nats_url: str) -> None:
    """A fetch or next() waiting when the connection closed raised DisconnectedError
    (nats-py tells "disconnected" before "closed"), not ConnectionClosedError."""
    client, consumer = await _client_consumer(js, nats_url)
    try:
        batch = await consumer.fetch(10, expires=30)
        fetching = asyncio.create_task(batch.collect())
        nexting = asyncio.create_task(consumer.next(expires=30))
        await wait_until(lambda: num_waiting_ge(js, consumer.stream_name, "cls", 2), timeout=10)
        t0 = now()
        await asyncio.wait_for(client.close(), 10)
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(fetching, 5)
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(nexting, 5)
        elapsed = now() - t0
        logger.warning("C12 fetch and next: ConnectionClosedError %.3fs after close()", elapsed)
        assert elapsed < 3.0
    finally:
        await client.close()


async def _buffered_consumer(
    js: JetStreamContext, url: str, ack: AckPolicy, count: int
) -> tuple[JetStreamContext, aiojetstream.Consumer]:
    stream = unique_name("CLB")
    await js.create_stream(
        StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.MEMORY)
    )
    await fill(js, f"{stream}.x", count)
    await js.create_consumer(stream, ConsumerConfig(durable_name="clb", ack_policy=ack))
    client = await aiojetstream.connect(url)
    return client, await client.consumer(stream, "clb")


async def _all_delivered(js: JetStreamContext, client: JetStreamContext, stream: str) -> None:
    """Until the server sent the consumer's messages and ``client`` parsed them."""

    async def sent() -> bool:
        info = await (await js.consumer(stream, "clb")).info()
        return info.num_pending == 0 and info.delivered.consumer_seq > 0

    await wait_until(sent, timeout=10)
    await client.nc.flush()  # a round trip: what came before it was read


@pytest.mark.parametrize("ack", [AckPolicy.EXPLICIT, AckPolicy.NONE])
async def test_close_during_consume_with_messages_buffered(
    js: JetStreamContext, nats_url: str, ack: AckPolicy
) -> None:
    """After close(), consume() called the handler for every buffered message, none of
    which could be acked: each was processed, then redelivered. Those of an AckNone
    consumer (the only copy) are still handed out."""
    client, consumer = await _buffered_consumer(js, nats_url, ack, 20)
    calls = 0
    entered, release = asyncio.Event(), asyncio.Event()

    async def handler(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        entered.set()
        await release.wait()

    try:
        ctx = await consumer.consume(handler, max_messages=50)
        await asyncio.wait_for(entered.wait(), 10)
        await _all_delivered(js, client, consumer.stream_name)
        await asyncio.wait_for(client.close(), 10)
        release.set()
        error = await asyncio.wait_for(ctx.closed(), 5)
        assert isinstance(error, ConnectionClosedError)
        assert calls == (1 if ack is AckPolicy.EXPLICIT else 20)
    finally:
        await client.close()


async def _read_into(messages: AsyncIterator[Msg], out: list[bytes]) -> None:
    async for msg in messages:
        out.append(msg.data)


@pytest.mark.parametrize("ack", [AckPolicy.EXPLICIT, AckPolicy.NONE])
async def test_close_with_messages_buffered_in_messages_and_fetch(
    js: JetStreamContext, nats_url: str, ack: AckPolicy
) -> None:
    client, consumer = await _buffered_consumer(js, nats_url, ack, 5)
    try:
        it = consumer.messages(max_messages=50, expires=30)
        await it.__aenter__()
        first = await asyncio.wait_for(it.next(), 10)
        assert first.data == b"0"
        await _all_delivered(js, client, consumer.stream_name)
        await asyncio.wait_for(client.close(), 10)
        rest: list[bytes] = []
        with pytest.raises(ConnectionClosedError):
            await _read_into(it, rest)
        assert rest == ([] if ack is AckPolicy.EXPLICIT else [b"1", b"2", b"3", b"4"])
        await it.aclose()
    finally:
        await client.close()
    # A fetch still waiting for more than what it holds.
    client, consumer = await _buffered_consumer(js, nats_url, ack, 5)
    try:
        batch = await consumer.fetch(10, expires=30)
        await _all_delivered(js, client, consumer.stream_name)
        await asyncio.wait_for(client.close(), 10)
        got: list[bytes] = []
        with pytest.raises(ConnectionClosedError):
            await _read_into(batch, got)
        assert got == ([] if ack is AckPolicy.EXPLICIT else [b"0", b"1", b"2", b"3", b"4"])
    finally:
        await client.close()


async def test_reconnects_exhausted_during_messages() -> None:
    async with NatsServer() as server:
        js = await aiojetstream.connect(
            server.url, max_reconnect_attempts=2, reconnect_time_wait=0.2
        )
        try:
            stream = unique_name("EX")
            await js.create_stream(StreamConfig(name=stream, subjects=["ex.>"]))
            consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="ex"))
            async with consumer.messages(expires=30) as it:
                waiting = asyncio.create_task(it.next())
                await wait_until(lambda: num_waiting_ge(js, stream, "ex"), timeout=10)
                t0 = now()
                await server.kill()
                with pytest.raises(ConnectionClosedError):
                    await asyncio.wait_for(waiting, 10)
                elapsed = now() - t0
            logger.warning(
                "C12 reconnects exhausted: ConnectionClosedError %.3fs after kill", elapsed
            )
            # Two reconnect attempts 0.2 s apart, then closed: well within 3 s.
            assert elapsed < 3.0
        finally:
            await js.close()


async def test_reconnects_exhausted_with_an_ack_buffered_during_the_outage() -> None:
    """An ack (or a pull, a publish) written during the outage is buffered. When
    nats-py gave up reconnecting, its close wrote the buffer to the lost socket and
    the wait for it raised ConnectionResetError before any callback ran: the
    waiting next() got nothing until its pull expired, and no close was told."""
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    async with NatsServer() as server:
        js = await aiojetstream.connect(
            server.url, max_reconnect_attempts=2, reconnect_time_wait=0.2, closed_cb=on_closed
        )
        try:
            stream = unique_name("EXB")
            await js.create_stream(StreamConfig(name=stream, subjects=["exb.>"]))
            consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="exb"))
            await js.publish("exb.x", b"1", timeout=10)
            async with consumer.messages(expires=30) as it:
                first = await asyncio.wait_for(it.next(), 10)
                waiting = asyncio.create_task(it.next())
                await wait_until(lambda: num_waiting_ge(js, stream, "exb"), timeout=10)
                t0 = now()
                await server.kill()
                await wait_until(lambda: js.nc.is_reconnecting, timeout=10)
                await first.ack()  # buffered: the server is gone
                with pytest.raises(ConnectionClosedError):
                    await asyncio.wait_for(waiting, 10)
                elapsed = now() - t0
                await asyncio.wait_for(closed.wait(), 5)
            logger.warning(
                "C12 reconnects exhausted, ack buffered: ConnectionClosedError %.3fs after kill",
                elapsed,
            )
            assert elapsed < 3.0
        finally:
            await js.close()


# --------------------------------------------------------------------------- C13: cancellation


async def test_cancel_task_awaiting_messages_next(js: JetStreamContext) -> None:
    stream = unique_name("CAN")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["can.>"], storage=StorageType.MEMORY)
    )
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="can"))
    baseline = set(asyncio.all_tasks())
    it = consumer.messages(expires=30)
    await it.__aenter__()
    task = asyncio.create_task(it.next())
    await wait_until(lambda: num_waiting_ge(js, stream, "can"), timeout=10)
    t0 = now()
    task.cancel()
    # Prompt, not at the pull's expiry (30 s): a wait, widened for a loaded machine.
    done, _ = await asyncio.wait({task}, timeout=5)
    elapsed = now() - t0
    assert task in done
    assert task.cancelled()
    # The iterator is still usable after a cancelled next().
    await js.publish("can.x", b"1", timeout=10)
    msg = await asyncio.wait_for(it.next(), 10)
    assert msg.data == b"1"
    await asyncio.wait_for(it.aclose(), 5)
    assert leftover_tasks(baseline) == []
    assert js._conn.listener_count() == 0
    logger.warning("C13 messages next(): cancelled in %.4fs", elapsed)


async def test_cancel_task_awaiting_consumer_next(js: JetStreamContext) -> None:
    stream = unique_name("CAN")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["can.>"], storage=StorageType.MEMORY)
    )
    consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="can"))
    baseline = set(asyncio.all_tasks())
    subs_before = len(js.nc._subs)
    task = asyncio.create_task(consumer.next(expires=30))
    await wait_until(lambda: num_waiting_ge(js, stream, "can"), timeout=10)
    t0 = now()
    task.cancel()
    # Prompt, not at the pull's expiry (30 s): a wait, widened for a loaded machine.
    done, _ = await asyncio.wait({task}, timeout=5)
    elapsed = now() - t0
    assert task in done
    assert task.cancelled()
    await wait_until(lambda: not leftover_tasks(baseline), timeout=2)
    assert js._conn.listener_count() == 0
    assert len(js.nc._subs) == subs_before
    logger.warning("C13 consumer.next(): cancelled in %.4fs", elapsed)


async def _max_batch_consumer(js: JetStreamContext) -> aiojetstream.Consumer:
    """Pulls of 10 are refused with ``409 Exceeded MaxRequestBatch``: a reported warning."""
    stream = unique_name("WARN")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["warn.>"], storage=StorageType.MEMORY)
    )
    return await js.create_consumer(stream, ConsumerConfig(durable_name="w", max_batch=5))


async def test_stop_inside_sync_error_handler(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    stream = (await _max_batch_consumer(js)).stream_name
    counter = await PullCounter.start(nats_server.port, stream)
    try:
        consumer = await counter.consumer(stream, "w")
        holder: dict[str, Any] = {}
        seen: list[JetStreamError] = []

        def on_error(error: JetStreamError) -> None:
            seen.append(error)
            holder["ctx"].stop()

        ctx = await consumer.consume(lambda m: None, error_handler=on_error, max_messages=10)
        holder["ctx"] = ctx
        assert await asyncio.wait_for(ctx.closed(), 5) is None
        assert len(seen) == 1
        assert "MaxRequestBatch" in str(seen[0])
        pulls = await counter.count()
        # The refused pull, and none after the stop (e.g. the re-pull the warning asked for).
        assert pulls == 1, f"{pulls} pulls: a pull was sent after stop()"
    finally:
        await counter.close()


async def _no_deadlock(aw: Awaitable[Any], what: str) -> Any:
    try:
        return await asyncio.wait_for(aw, 5)
    except TimeoutError:
        pytest.fail(f"deadlock: {what}")


async def test_stop_and_wait_inside_async_error_handler_consume(js: JetStreamContext) -> None:
    consumer = await _max_batch_consumer(js)
    holder: dict[str, Any] = {}
    handled = asyncio.Event()
    baseline = set(asyncio.all_tasks())

    async def on_error(error: JetStreamError) -> None:
        ctx = holder["ctx"]
        ctx.stop()
        await ctx.closed()  # must not wait for this very handler
        handled.set()

    ctx = await consumer.consume(lambda m: None, error_handler=on_error, max_messages=10)
    holder["ctx"] = ctx
    assert await _no_deadlock(ctx.closed(), "stop() + await closed() in the error handler") is None
    await asyncio.wait_for(handled.wait(), 5)
    await wait_until(lambda: not leftover_tasks(baseline), timeout=2)


async def test_stop_and_close_inside_async_error_handler_messages(js: JetStreamContext) -> None:
    consumer = await _max_batch_consumer(js)
    holder: dict[str, Any] = {}
    handled = asyncio.Event()

    async def on_error(error: JetStreamError) -> None:
        it = holder["it"]
        it.stop()
        await it.aclose()  # must not wait for this very handler
        handled.set()

    it = consumer.messages(error_handler=on_error, max_messages=10)
    holder["it"] = it

    async def iterate() -> list[Msg]:
        async with it:
            return [m async for m in it]

    assert await _no_deadlock(iterate(), "stop() + await aclose() in the error handler") == []
    await asyncio.wait_for(handled.wait(), 5)


async def test_stop_and_wait_inside_async_error_handler_ordered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first pull goes to nobody: a 503 the ordered consumer reports. (A server-wide
    # max_request_batch under its pull size did this until its pulls kept within it.)
    async with NatsServer() as server:
        js = await aiojetstream.connect(server.url)
        try:
            stream = unique_name("OW")
            await js.create_stream(StreamConfig(name=stream, subjects=["ow.>"]))
            UnservedPulls(monkeypatch, stream, unserved=1)
            oc = await js.ordered_consumer(stream)
            holder: dict[str, Any] = {}
            seen: list[JetStreamError] = []

            async def on_error(error: JetStreamError) -> None:
                seen.append(error)
                ctx = holder["ctx"]
                ctx.stop()
                await ctx.closed()

            ctx = await oc.consume(lambda m: None, error_handler=on_error, max_messages=10)
            holder["ctx"] = ctx
            closed = _no_deadlock(ctx.closed(), "ordered: stop() + await closed() in the handler")
            assert await closed is None
            assert isinstance(seen[0], NoRespondersError)
        finally:
            await js.close()


# --------------------------------------------------------------------------- O1-O3: ordered


async def test_ordered_restart_recovers_in_order() -> None:
    first, second = 300, 300
    async with NatsServer() as server:
        js = await connect(server.url)
        try:
            stream = unique_name("ORDR")
            await js.create_stream(
                StreamConfig(name=stream, subjects=["ordr.>"], storage=StorageType.FILE)
            )
            await fill(js, "ordr.x", first)
            oc = await js.ordered_consumer(stream, OrderedConsumerConfig(name_prefix="oc"))
            seqs: list[int] = []
            names: list[str] = []
            errors = Errors()
            restart: asyncio.Task[None] | None = None
            t_up: list[float] = []
            async with oc.messages(max_messages=50, expires=5, error_handler=errors) as it:
                while len(seqs) < first + second:
                    msg = await asyncio.wait_for(it.next(), 30)
                    seqs.append(msg.metadata.sequence.stream)
                    if not names or names[-1] != msg.metadata.consumer:
                        names.append(msg.metadata.consumer)
                    if len(seqs) == first // 2:

                        async def restart_and_fill() -> None:
                            await server.restart()
                            t_up.append(now())
                            await wait_until(lambda: js.nc.is_connected, timeout=10)
                            await fill(js, "ordr.x", second, start=first)

                        restart = asyncio.create_task(restart_and_fill())
            assert restart is not None
            await asyncio.wait_for(restart, 30)
            assert seqs == list(range(1, first + second + 1))
            serials = [int(n.rsplit("_", 1)[1]) for n in names]
            logger.warning(
                "O2 restart: %d msgs in order; consumers %s; reports %s",
                len(seqs),
                names,
                errors.kinds(),
            )
            assert all(n.startswith("oc_") for n in names)
            assert serials == sorted(serials)
            assert len(serials) >= 2
            assert serials[0] == 1
        finally:
            await js.close()


async def test_ordered_stream_deleted_is_terminal(js: JetStreamContext) -> None:
    stream = unique_name("ORDD")
    await js.create_stream(
        StreamConfig(name=stream, subjects=["ordd.>"], storage=StorageType.MEMORY)
    )
    await fill(js, "ordd.x", 5)
    oc = await js.ordered_consumer(stream)
    async with oc.messages(expires=30) as it:
        got = [await asyncio.wait_for(it.next(), 10) for _ in range(5)]
        waiting = asyncio.create_task(it.next())
        assert oc.name is not None
        await wait_until(lambda: num_waiting_ge(js, stream, str(oc.name)), timeout=10)
        t0 = now()
        await js.delete_stream(stream)
        with pytest.raises(StreamNotFoundError):
            await asyncio.wait_for(waiting, 10)
        elapsed = now() - t0
    assert [m.data for m in got] == [str(i).encode() for i in range(5)]
    logger.warning("O3 stream deleted: StreamNotFoundError %.3fs after the deletion", elapsed)
    assert elapsed < 3.0


class _RetryLog(logging.Handler):
    """Wakes a waiter on each "retrying" record of the ordered consumer's reset loop."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[tuple[float, str]] = []
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "ordered consumer reset failed" in record.getMessage():
            self.records.append((now(), record.getMessage()))
            self.event.set()


@pytest.mark.cluster
async def test_ordered_reset_fails_when_jetstream_is_down() -> None:
    """The stream's node dies: resets fail; max_reset_attempts=2 ends promptly; cancel is prompt."""
    hb = 0.5
    async with NatsCluster(3, config={"cluster": {"no_advertise": True}}) as cluster:
        meta = (await cluster.meta_leader()).server_name
        assert meta is not None
        admin = await connect(cluster.server(meta).url)
        log = _RetryLog()
        aj_logger = logging.getLogger("aiojetstream")
        old_level = aj_logger.level
        aj_logger.addHandler(log)
        aj_logger.setLevel(logging.INFO)
        js: JetStreamContext | None = None
        try:
            stream, subject, host = await r1_stream_off(admin, cluster, {meta})
            client_node = next(s for s in cluster.servers if s is not host)
            js = await connect(client_node.url, timeout=1.0)
            await fill(admin, subject, 3)
            limited = await js.ordered_consumer(
                stream, OrderedConsumerConfig(max_reset_attempts=2, name_prefix="lim")
            )
            unlimited = await js.ordered_consumer(stream, OrderedConsumerConfig(name_prefix="unl"))
            it_lim = limited.messages(expires=2, heartbeat=hb)
            it_unl = unlimited.messages(expires=2, heartbeat=hb)
            await it_lim.__aenter__()
            await it_unl.__aenter__()
            for it in (it_lim, it_unl):
                assert [(await asyncio.wait_for(it.next(), 10)).data for _ in range(3)] == [
                    b"0",
                    b"1",
                    b"2",
                ]
            lim_next = asyncio.create_task(it_lim.next())
            unl_next = asyncio.create_task(it_unl.next())
            t_kill = now()
            await host.kill()
            with pytest.raises(OrderedConsumerResetError):
                await asyncio.wait_for(lim_next, 30)
            gave_up = now() - t_kill
            # The unlimited one keeps retrying with backoff: cancel it while it waits.
            log.event.clear()
            await asyncio.wait_for(log.event.wait(), 30)
            t_cancel = now()
            unl_next.cancel()
            done, _ = await asyncio.wait({unl_next}, timeout=1)
            cancel_took = now() - t_cancel
            assert unl_next in done
            assert unl_next.cancelled()
            for it in (it_lim, it_unl):
                await asyncio.wait_for(it.aclose(), 10)
            retries = [round(t - t_kill, 2) for t, _ in log.records]
            logger.warning(
                "O3 JetStream down: OrderedConsumerResetError %.2fs after the kill; "
                "cancel during backoff took %.4fs; retry log at %s",
                gave_up,
                cancel_took,
                retries,
            )
            # 2 x hb to notice, then two attempts (1 s API timeout each) 1 s apart.
            assert gave_up < 15
            assert cancel_took < 1.0
        finally:
            aj_logger.removeHandler(log)
            aj_logger.setLevel(old_level)
            if js is not None:
                await js.close()
            await admin.close()


async def test_close_is_bounded_when_the_server_hangs_with_data_queued() -> None:
    """C12 with a hung server: close() gives up flushing after CLOSE_FLUSH_TIMEOUT.

    nats-py's close() flushes what is pending and waits for the socket to
    close; with the server SIGSTOPped and megabytes queued both waits would
    last as long as the hang.
    """
    async with NatsServer() as server:
        js = await connect(server.url, max_reconnect_attempts=0)
        stream = unique_name("HANGCLOSE")
        try:
            await js.create_stream(
                StreamConfig(name=stream, subjects=["hangclose.>"], storage=StorageType.MEMORY)
            )
            server.freeze()
            payload = b"x" * 700_000
            futures = [await js.publish_async("hangclose.x", payload) for _ in range(30)]
            t0 = now()
            await asyncio.wait_for(js.close(), CLOSE_FLUSH_TIMEOUT + 10)
            elapsed = now() - t0
            logger.warning("C12 close with a hung server and 21 MB queued: %.2fs", elapsed)
            assert elapsed < CLOSE_FLUSH_TIMEOUT + 3
            assert js.nc.is_closed
            for fut in futures:  # every queued publish failed, none hangs
                with pytest.raises(ConnectionClosedError):
                    await asyncio.wait_for(fut, 5)
        finally:
            if server.frozen:
                server.thaw()
            await js.close()


@pytest.mark.parametrize("call", ["fetch", "next", "fetch_no_wait"])
async def test_fetch_from_a_frozen_server_ends_in_bounded_time(call: str) -> None:
    """The server stops answering (SIGSTOP) before a fetch: the fetch gives up within
    its expires + 1 s for the closing status + 1 s for the consumer look-up (the
    look-up took the context's whole 5 s timeout: fetch(expires=2) ended after 8 s,
    fetch_no_wait after 10 s)."""
    async with NatsServer() as server:
        js = await connect(server.url, ping_interval=600)  # no stale-connection detection
        try:
            stream = unique_name("FZ")
            await js.create_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
            consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="fz"))
            loop = asyncio.get_running_loop()

            async def one_fetch() -> None:
                if call == "next":
                    await consumer.next(expires=2)
                    return
                fetching = consumer.fetch(1, expires=2) if call == "fetch" else None
                batch = await (fetching or consumer.fetch_no_wait(1))
                async with batch:
                    await batch.collect()

            server.freeze()
            try:
                start = loop.time()
                with pytest.raises(JetStreamTimeoutError):
                    await one_fetch()
                took = loop.time() - start
            finally:
                server.thaw()
            bound = (5.0 if call == "fetch_no_wait" else 2.0) + 1.0 + 1.0
            assert took < bound + 1.0, f"{call} ended after {took:.2f} s (bound {bound:g} s)"
        finally:
            await js.close()


# --------------------------------------------------------------------------- a failing check


@pytest.mark.parametrize("fault", ["invalid reply", "unexpected"])
async def test_a_consumer_check_that_fails_oddly_never_stalls_consume(fault: str) -> None:
    """After a reconnect the run checks the consumer before pulling again. A check
    failing with an error outside the expected few (a reply that is not the API's,
    or a plain bug) ended the check task without an answer: the run pulled nothing
    more and reported nothing, for good. Now a JetStreamError is checked again
    later, anything else ends the run with it."""
    async with NatsServer() as server:
        js = await connect(server.url)
        try:
            stream = unique_name("CHK")
            await js.create_stream(
                StreamConfig(name=stream, subjects=["chk.>"], storage=StorageType.FILE)
            )
            consumer = await js.create_consumer(stream, ConsumerConfig(durable_name="dur"))
            real_check = consumer._check
            checks: list[str] = []

            async def failing_once(timeout: float | None) -> Any:
                checks.append("check")
                if len(checks) == 1:
                    if fault == "invalid reply":
                        raise aiojetstream.InvalidResponseError("not a ConsumerInfo: b'<html>'")
                    raise RuntimeError("a bug in the check")
                return await real_check(timeout)

            consumer._check = failing_once  # type: ignore[method-assign]
            got: list[bytes] = []
            errors = Errors()

            async def handle(msg: Msg) -> None:
                got.append(msg.data)
                await msg.ack()

            ctx = await consumer.consume(handle, error_handler=errors, expires=2, heartbeat=0.5)
            await fill(js, "chk.x", 3)
            await wait_until(lambda: len(got) == 3, timeout=10)
            await asyncio.wait_for(server.restart(), 60)
            await wait_until(lambda: len(checks) >= 1, timeout=30, message="no check")
            if fault == "invalid reply":
                await wait_until(
                    lambda: len(checks) >= 2, timeout=30, message="never checked again"
                )
                for i in range(3, 6):
                    await publish_when_ready(js, "chk.x", b"%d" % i)
                await wait_until(lambda: len(got) == 6, timeout=30, message="consume stalled")
                assert got == [b"%d" % i for i in range(6)]
                ctx.stop()
                assert await asyncio.wait_for(ctx.closed(), 10) is None
            else:
                error = await asyncio.wait_for(ctx.closed(), 10)
                assert isinstance(error, JetStreamError)
                assert "a bug in the check" in str(error)
                assert isinstance(error.__cause__, RuntimeError)
        finally:
            await js.close()


# ------------------------------------------------------- 503 while the consumer exists

#: Account U imports the consumer's CONSUMER.INFO but not its CONSUMER.MSG.NEXT: the
#: consumer is found, every pull gets 503 No Responders.
_NO_PULL_IMPORT = """
accounts: {
  JS: {
    jetstream: enabled
    users: [{user: js, password: js}]
    exports: [
      {service: "$JS.API.CONSUMER.INFO.NPI.C"}
      {service: "$JS.API.CONSUMER.MSG.NEXT.NPI.C", response_type: stream}
      {service: "$JS.API.INFO"}
    ]
  }
  U: {
    users: [{user: u, password: u}]
    imports: [
      {service: {account: JS, subject: "$JS.API.CONSUMER.INFO.NPI.C"}}
      {service: {account: JS, subject: "$JS.API.INFO"}}
    ]
  }
}
"""


@pytest.mark.parametrize("mode", ["consume", "messages"])
async def test_no_responders_while_the_consumer_exists_is_reported(mode: str) -> None:
    """Every pull gets a 503 while the consumer exists (a forgotten import of the pull
    subject): consume()/messages() retried for ever and said nothing. The first
    consumer check that finds the consumer reports NoRespondersError to error_handler,
    once (not at every retry); the run keeps pulling."""
    async with NatsServer(config=_NO_PULL_IMPORT) as server:
        host = server.url.removeprefix("nats://")
        owner = await connect(f"nats://js:js@{host}")
        user = await connect(f"nats://u:u@{host}")
        try:
            await owner.create_stream(
                StreamConfig(name="NPI", subjects=["npi.>"], storage=StorageType.MEMORY)
            )
            await owner.create_consumer("NPI", ConsumerConfig(durable_name="C"))
            await fill(owner, "npi.a", 3)
            consumer = await user.consumer("NPI", "C")
            errors = Errors()
            source: Any
            if mode == "consume":
                source = await consumer.consume(lambda msg: None, error_handler=errors)
            else:
                source = consumer.messages(error_handler=errors)
                await source.__aenter__()
            try:
                driver = source._driver
                _, error = await errors.wait_for(aiojetstream.NoRespondersError, 10)
                assert "consumer exists" in str(error)
                # It keeps pulling (throttled), and says it no more.
                pulls = driver.engine.pulls
                await wait_until(lambda: driver.engine.pulls >= pulls + 3, timeout=10)
                assert [type(e) for _, e in errors.items] == [aiojetstream.NoRespondersError]
                assert not driver.finished
            finally:
                if mode == "consume":
                    source.stop()
                    assert await asyncio.wait_for(source.closed(), 10) is None
                else:
                    await source.aclose()
        finally:
            await user.close()
            await owner.close()


@pytest.mark.parametrize("call", ["fetch", "fetch_no_wait", "next"])
async def test_a_pull_given_up_during_an_outage_takes_nothing_after_it(call: str) -> None:
    """A fetch / next made while the client reconnects: its SUB and pull went to nats-py's
    reconnect buffer and were sent after the reconnect although the call had given up;
    the server delivered the pull's messages to an inbox nobody read (lost with
    AckPolicy.NONE) and kept the subscription. Now it waits for the reconnect within its
    own bound and, not reconnected, raises having queued nothing."""
    async with NatsServer() as server:
        js = await connect(server.url)
        try:
            name = unique_name("OUT")
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
            await fill(js, f"{name}.x", 20)
            consumer = await js.create_consumer(
                name, ConsumerConfig(durable_name="d", ack_policy=AckPolicy.NONE)
            )
            await server.kill()  # the store is kept
            await wait_until(lambda: not js.nc.is_connected, 10, message="still connected")

            async def pull() -> object:
                if call == "fetch":
                    return await (await consumer.fetch(3, expires=1)).collect()
                if call == "fetch_no_wait":
                    return await (await consumer.fetch_no_wait(3)).collect()
                return await consumer.next(expires=1)

            for _ in range(3):
                with pytest.raises(JetStreamTimeoutError, match="not reconnected"):
                    await pull()
            await server.start()
            await wait_until(lambda: js.nc.is_connected, 30, message="not reconnected")
            got: list[bytes] = []
            while batch := await (await consumer.fetch_no_wait(100)).collect():
                got += [msg.data for msg in batch]
            assert got == [str(i).encode() for i in range(20)]  # none taken by a lost pull
            info = await consumer.info()
            assert (info.delivered.stream_seq, info.num_waiting) == (20, 0)
            # (The last fetch's UNSUB may still be on its way: a bounded wait.)
            await only_known_subscriptions(server, js)
        finally:
            await js.close()

"""The documented "read what is there, then stop" loop (docs/consumers.md, "Catching up").

It is a ``fetch_no_wait`` loop: each pull takes what the stream holds now
without waiting, and an empty pull ends the loop, so it also ends on an
empty stream (a ``messages()`` loop that breaks at ``num_pending == 0``
waits forever there: no message ever comes to say so).

An empty pull must mean "nothing was there", also in a cluster while the
consumer's leader changes: the new leader voids the waiting pulls (``409
Leadership Change``), or a pull is lost without a word, and the fetch pulls
again rather than end empty (the loop stopped early with thousands of messages
pending). Cluster tests force the leader changes with
``$JS.API.CONSUMER.LEADER.STEPDOWN``; a lost pull is made to order with a proxy
that drops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

import aiojetstream
from aiojetstream import (
    ClusterUnavailableError,
    Consumer,
    ConsumerConfig,
    DeliverPolicy,
    JetStreamContext,
    JetStreamError,
    JetStreamTimeoutError,
    Msg,
    NoRespondersError,
    OrderedConsumerConfig,
    StreamConfig,
)
from aiojetstream._pull_engine import FETCH_CHECK_TIMEOUT, NO_WAIT_TIMEOUT
from aiojetstream.testing import NatsCluster, NatsServer
from helpers import unique_name, wait_pullable, wait_until
from proxy import DroppingProxy
from reliability.harness import (
    InboxStatuses,
    consumer_leader,
    create_r3_stream,
    created,
    move_consumer_leader,
    now,
)

logger = logging.getLogger(__name__)

#: The loop must end at once on an empty stream: a generous bound on a loaded machine.
BOUND = 5.0


async def catch_up(source: object, batch: int = 100) -> list[Msg]:
    """The documented loop, as written there (``source`` a consumer or ordered consumer)."""
    read: list[Msg] = []
    while True:
        msgs = await (await source.fetch_no_wait(batch)).collect()  # type: ignore[attr-defined]
        if not msgs:
            break
        for msg in msgs:
            read.append(msg)
    return read


async def new_stream(js: JetStreamContext, n: int) -> str:
    name = unique_name("CATCH")
    await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    for i in range(n):
        await js.publish_async(f"{name}.x", b"%d" % i)
    await js.publish_async_complete()
    return name


async def _pending(consumer: Consumer, count: int) -> bool:
    return (await consumer.info()).num_pending == count


@pytest.mark.parametrize("kind", ["durable", "ordered"])
async def test_an_empty_stream_ends_the_loop_at_once(js: JetStreamContext, kind: str) -> None:
    name = await new_stream(js, 0)
    if kind == "durable":
        source: object = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
    else:
        source = await js.ordered_consumer(name)
    assert await asyncio.wait_for(catch_up(source), BOUND) == []


async def test_a_durable_reads_everything_then_stops(js: JetStreamContext) -> None:
    name = await new_stream(js, 250)
    consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
    msgs = await asyncio.wait_for(catch_up(consumer), BOUND * 4)
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 251))
    for msg in msgs:
        await msg.ack()
    await js.publish(f"{name}.x", b"later")
    # The server tells its consumers of a stored message a moment after the publish's
    # acknowledgement (a queue): until then a no-wait pull finds nothing (seen in CI).
    await wait_until(lambda: _pending(consumer, 1), timeout=BOUND)
    (later,) = await asyncio.wait_for(catch_up(consumer), BOUND)
    assert (later.metadata.sequence.stream, later.data) == (251, b"later")


async def test_an_ordered_replay_from_a_sequence_then_stops(js: JetStreamContext) -> None:
    name = await new_stream(js, 250)
    oc = await js.ordered_consumer(
        name,
        OrderedConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=100),
    )
    msgs = await asyncio.wait_for(catch_up(oc, 64), BOUND * 4)
    assert [m.metadata.sequence.stream for m in msgs] == list(range(100, 251))
    # Past the end: nothing, at once.
    assert await asyncio.wait_for(catch_up(oc), BOUND) == []


async def test_a_no_wait_pull_held_at_max_ack_pending_ends_empty(
    js: JetStreamContext,
) -> None:
    """A no-wait pull served in part up to ``max_ack_pending`` is kept waiting by the
    server (it answers once acks make room): no answer is then no lost pull. The
    loop (no acks until it ends) ends with what it could take, as with nats.go's
    ``FetchNoWait``; it was pulled again, then raised ``JetStreamTimeoutError``
    blaming a leader change (and the documented loop with retries never ended)."""
    name = await new_stream(js, 10)
    consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d", max_ack_pending=4))
    held = await asyncio.wait_for(catch_up(consumer, 3), NO_WAIT_TIMEOUT * 4)
    assert [m.metadata.sequence.stream for m in held] == [1, 2, 3, 4]
    for msg in held:
        await msg.ack()
    await wait_until(lambda: _pending(consumer, 6), timeout=BOUND)
    rest = await asyncio.wait_for(catch_up(consumer, 3), NO_WAIT_TIMEOUT * 4)
    assert [m.metadata.sequence.stream for m in rest] == [5, 6, 7, 8]


# --------------------------------------------------------------------------- lost pulls


@pytest.mark.parametrize("lost", [1, 2])
async def test_a_no_wait_pull_lost_with_messages_pending_is_sent_again(
    js: JetStreamContext, nats_server: NatsServer, lost: int
) -> None:
    """A no-wait pull the server never answers, while messages are pending, is no "nothing".

    A consumer leader change can lose a pull without a word (measured on a
    3-node cluster: about half the pulls sent just before a stepdown); here a
    proxy drops it. After ``NO_WAIT_TIMEOUT`` the client looks the consumer up,
    finds messages pending and pulls once more (the batch ended empty, and the
    loop with it); lost twice, the fetch raises ``JetStreamTimeoutError``.
    """
    name = await new_stream(js, 5)
    consumer = await js.create_consumer(name, ConsumerConfig(durable_name="d"))
    await wait_until(lambda: _pending(consumer, 5), timeout=BOUND)
    async with DroppingProxy(nats_server.port) as proxy:
        client = await aiojetstream.connect(proxy.url)
        try:
            mine = await client.consumer(name, "d")
            proxy.drop(f"$JS.API.CONSUMER.MSG.NEXT.{name}.d", lost)
            batch = await mine.fetch_no_wait(10)
            bound = lost * (NO_WAIT_TIMEOUT + FETCH_CHECK_TIMEOUT) + BOUND
            if lost == 1:
                msgs = await asyncio.wait_for(batch.collect(), bound)
                assert [m.data for m in msgs] == [b"%d" % i for i in range(5)]
            else:
                with pytest.raises(JetStreamTimeoutError, match="5 messages pending"):
                    await asyncio.wait_for(batch.collect(), bound)
            assert len(proxy.dropped) == lost
        finally:
            await client.close()


# --------------------------------------------------------------------------- leader changes

#: Errors a pull may end with while the consumer's leader changes: pull again.
TRANSIENT = (ClusterUnavailableError, JetStreamTimeoutError, NoRespondersError)


async def _r3_durable(js: JetStreamContext, cluster: NatsCluster, n: int) -> tuple[str, Consumer]:
    """An R3 stream of ``n`` messages (all replicas current) and an R3 durable "d" on it.

    Its leader is moved once first: the first stepdown of a new consumer sometimes
    goes unanswered for the API's 5 s, and the pulls meanwhile get 503s (seen on
    a fresh cluster), which is not what the tests are about.
    """
    name = unique_name("CATCH")
    await create_r3_stream(js, name, [f"{name}.>"])
    config = ConsumerConfig(durable_name="d", num_replicas=3, ack_wait=60)
    consumer = await created(lambda timeout: js.create_consumer(name, config, timeout=timeout))
    leader = await _leader(js, name)
    other = next(s.server_name for s in cluster.servers if s.server_name != leader)
    assert other is not None
    await move_consumer_leader(js, name, "d", other)
    await wait_pullable(js, name, "d")  # (its probe wants nothing pending)
    for i in range(n):
        await js.publish_async(f"{name}.x", b"%d" % i, timeout=10)
    await js.publish_async_complete(timeout=30)
    await wait_until(lambda: _pending(consumer, n), timeout=15, interval=0.1)
    return name, consumer


async def _leader(js: JetStreamContext, stream: str) -> str:
    """The consumer "d"'s leader, once it has one."""
    found: list[str] = []

    async def elected() -> bool:
        leader = await consumer_leader(js, stream, "d")
        if leader is not None:
            found.append(leader)
        return leader is not None

    await wait_until(elected, timeout=15, interval=0.05, message=f"{stream}/d has a leader")
    return found[-1]


async def _step_down(js: JetStreamContext, stream: str) -> None:
    """Ask the consumer "d"'s leader to step down (its answer is not awaited long)."""
    with contextlib.suppress(JetStreamError):
        await js._api.request(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.d", None, timeout=2)


@pytest.mark.cluster
async def test_a_fetch_voided_by_a_leader_change_pulls_again() -> None:
    """``409 Leadership Change`` before any message: the fetch pulls again for its time left.

    A fetch waits on an empty R3 durable; its leader steps down and the new
    leader voids the waiting pull with a 409. The fetch must pull again and
    get the messages published then (it ended empty at once: a catch-up loop
    with ``fetch`` stopped there).
    """
    async with NatsCluster(3, config={"cluster": {"no_advertise": True}}) as cluster:
        js = await aiojetstream.connect(cluster.urls, timeout=5)
        statuses = await InboxStatuses.start(js.nc)
        try:
            name, consumer = await _r3_durable(js, cluster, 0)
            for attempt in range(3):
                async with await consumer.fetch(5, expires=15, heartbeat=1) as batch:
                    task = asyncio.create_task(batch.collect())

                    async def waiting() -> bool:
                        return (await consumer.info()).num_waiting >= 1

                    await wait_until(waiting, timeout=10, interval=0.05)
                    t0 = now()
                    await _step_down(js, name)
                    try:
                        await statuses.wait("409", "Leadership Change", since=t0, timeout=5)
                    except TimeoutError:
                        # The new leader did not know of the pull (not replicated yet): it
                        # is lost, not voided; this attempt shows nothing.
                        logger.warning("attempt %d: no 409 after the stepdown", attempt)
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError, JetStreamError):
                            await task
                        continue
                    for i in range(5):
                        await js.publish(f"{name}.x", b"%d" % i, timeout=10)
                    msgs = await asyncio.wait_for(task, 20)
                    assert [m.data for m in msgs] == [b"%d" % i for i in range(5)]
                    return
            raise AssertionError("no stepdown voided the waiting pull with a 409 in 3 attempts")
        finally:
            await statuses.close()
            await js.close()


@pytest.mark.cluster
async def test_catching_up_through_leader_changes_reads_to_the_end() -> None:
    """The documented loop on an R3 durable whose leader steps down right after a pull.

    Right after each of the first pulls the consumer's leader steps down: the
    pull is voided by a ``409 Leadership Change``, lost without a word, or
    served (measured: about 40/45/15 %). Each fetch must pull again or raise,
    never end empty while messages are pending (the loop stopped after the
    first pull in 85 % of the runs, with every message still pending). The
    loop retries the errors a leader change brings; when it ends nothing is
    pending, and every message was read but those a server delivered to a
    pull already given up (they wait for ``ack_wait``).
    """
    total, stepdowns = 3000, 2
    async with NatsCluster(3, config={"cluster": {"no_advertise": True}}) as cluster:
        js = await aiojetstream.connect(cluster.urls, timeout=5)
        try:
            name, consumer = await _r3_durable(js, cluster, total)
            seen: set[int] = set()
            pulls = retries = 0
            while True:
                try:
                    step_down = pulls < stepdowns
                    if step_down:
                        await _leader(js, name)  # (the last election is over)
                    batch = await consumer.fetch_no_wait(300)
                    if step_down:
                        await _step_down(js, name)  # right after the pull was sent
                    pulls += 1
                    msgs = await asyncio.wait_for(batch.collect(), 20)
                except TRANSIENT as exc:
                    retries += 1
                    if retries >= 50:
                        raise AssertionError(f"pulls keep failing: {exc!r}") from exc
                    await asyncio.sleep(0.05)  # a retry's backoff; it waits for nothing
                    continue
                if not msgs:
                    break
                for msg in msgs:
                    seen.add(msg.metadata.sequence.stream)
                    await msg.ack()
            info = await consumer.info()
            logger.warning(
                "caught up: %d pulls, %d retried, %d read, %d pending, %d ack pending",
                pulls,
                retries,
                len(seen),
                info.num_pending,
                info.num_ack_pending,
            )
            assert info.num_pending == 0, f"the loop ended early: read {len(seen)} of {total}"
            assert len(seen) + info.num_ack_pending >= total
        finally:
            await js.close()

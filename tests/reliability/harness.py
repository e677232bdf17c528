"""The cluster fault harness (RELIABILITY.md): R3 streams, leader moves, per-replica readback.

Every cluster fault test ends with :func:`readback`: each node in turn is made
the stream leader and every acknowledged message is read back from it, so a
message that only one replica lost still fails the test. :func:`no_leaks`
checks the client side (tasks, subscriptions) and the server side (consumers).

Leader moves use the JetStream API directly (``$JS.API.STREAM.LEADER.STEPDOWN``
with a preferred placement, nats-server >= 2.11): the library has no stepdown
call, and a test harness should not need one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from aiojetstream import (
    AckPolicy,
    ConsumerConfig,
    JetStreamContext,
    JetStreamError,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsCluster, NatsServer
from helpers import wait_until

__all__ = [
    "Acked",
    "baseline",
    "consumer_leader",
    "create_r3_stream",
    "move_stream_leader",
    "no_leaks",
    "now",
    "readback",
    "servers_except",
    "stepdown_consumer",
    "stepdown_stream",
    "stream_leader",
    "wait_stream_leader",
]

logger = logging.getLogger("reliability")


def now() -> float:
    """The running loop's monotonic clock."""
    return asyncio.get_running_loop().time()


class Acked:
    """What the publishers were told was stored: ``seq -> payload`` (and msg id counts)."""

    def __init__(self) -> None:
        self.by_seq: dict[int, bytes] = {}

    def add(self, seq: int, payload: bytes) -> None:
        """Record an acknowledgement; two different payloads at one sequence fail at once."""
        old = self.by_seq.setdefault(seq, payload)
        assert old == payload, f"seq {seq} acknowledged for {old!r} and {payload!r}"

    def __len__(self) -> int:
        return len(self.by_seq)


async def _api(
    js: JetStreamContext, subject: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A raw API request through the library's own request path (typed errors)."""
    return await js._api.request(f"$JS.API.{subject}", body, timeout=5)


async def create_r3_stream(
    js: JetStreamContext, name: str, subjects: list[str], **config: Any
) -> None:
    """Create a FILE R3 stream and wait until it has a leader and every replica is current."""
    await js.create_stream(
        StreamConfig(
            name=name,
            subjects=subjects,
            storage=StorageType.FILE,
            num_replicas=3,
            **config,
        )
    )
    await wait_stream_leader(js, name)


async def stream_leader(js: JetStreamContext, stream: str) -> str | None:
    """The stream's leader now (None during an election or when unreachable)."""
    try:
        info = await (await js.stream(stream)).info()
    except (JetStreamError, TimeoutError):
        return None
    return info.cluster.leader if info.cluster else None


async def _replicas_current(js: JetStreamContext, stream: str) -> str | None:
    try:
        info = await (await js.stream(stream)).info()
    except (JetStreamError, TimeoutError):
        return None
    cluster = info.cluster
    if cluster is None or cluster.leader is None:
        return None
    replicas = cluster.replicas or []
    if all(p.current and not p.offline for p in replicas):
        return cluster.leader
    return None


async def wait_stream_leader(
    js: JetStreamContext,
    stream: str,
    *,
    avoid: Iterable[str] = (),
    current: bool = True,
    timeout: float = 30.0,
) -> str:
    """Wait until the stream has a leader outside ``avoid`` (and, by default, current replicas)."""
    avoid = set(avoid)
    found: list[str] = []

    async def ready() -> bool:
        leader = await (_replicas_current(js, stream) if current else stream_leader(js, stream))
        if leader is None or leader in avoid:
            return False
        found.append(leader)
        return True

    await wait_until(ready, timeout=timeout, interval=0.1, message=f"{stream} has a leader")
    return found[-1]


async def stepdown_stream(js: JetStreamContext, stream: str, preferred: str | None = None) -> None:
    """Ask the stream's leader to step down (towards ``preferred`` when given)."""
    body = {"placement": {"preferred": preferred}} if preferred else None
    await _api(js, f"STREAM.LEADER.STEPDOWN.{stream}", body)


async def consumer_leader(js: JetStreamContext, stream: str, consumer: str) -> str | None:
    """The consumer's leader now (None during an election or when unreachable)."""
    try:
        info = await (await js.consumer(stream, consumer)).info()
    except (JetStreamError, TimeoutError):
        return None
    return info.cluster.leader if info.cluster else None


async def stepdown_consumer(js: JetStreamContext, stream: str, consumer: str) -> None:
    """Ask the consumer's leader to step down."""
    await _api(js, f"CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}")


async def move_stream_leader(
    js: JetStreamContext, stream: str, target: str, timeout: float = 30.0
) -> None:
    """Make ``target`` the stream's leader, with every replica current."""

    async def moved() -> bool:
        leader = await _replicas_current(js, stream)
        if leader == target:
            return True
        if leader is not None:
            try:
                await stepdown_stream(js, stream, target)
            except (JetStreamError, TimeoutError):
                logger.info("stepdown of %s towards %s refused; retrying", stream, target)
        return False

    await wait_until(moved, timeout=timeout, interval=0.25, message=f"{target} leads {stream}")


async def _read_all(js: JetStreamContext, stream: str) -> list[tuple[int, bytes, str | None]]:
    """Every message of the stream as (seq, payload, msg id), read from its leader."""
    info = await (await js.stream(stream)).info()
    total = info.state.messages
    out: list[tuple[int, bytes, str | None]] = []
    if total == 0:
        return out
    consumer = await js.create_consumer(
        stream,
        ConsumerConfig(ack_policy=AckPolicy.NONE, mem_storage=True, num_replicas=1),
    )
    try:
        while len(out) < total:
            batch = await consumer.fetch(min(total - len(out), 1000), expires=5)
            got = 0
            async for msg in batch:
                got += 1
                mid = (msg.headers or {}).get("Nats-Msg-Id")
                out.append((msg.metadata.sequence.stream, msg.data, mid))
            assert got, f"read {len(out)} of {total} messages of {stream}: the rest never came"
    finally:
        await js.delete_consumer(stream, consumer.name)
    return out


async def readback(
    cluster: NatsCluster,
    js: JetStreamContext,
    stream: str,
    acked: Acked,
    *,
    unique_ids: bool = True,
) -> None:
    """Make each running node the leader in turn and read every acknowledged message back.

    Fails when an acknowledged sequence is missing or holds another payload on
    any replica, or (``unique_ids``) when one ``Nats-Msg-Id`` is stored twice.
    """
    for node in cluster.servers:
        if not node.running or node.frozen:
            continue
        name = node.server_name
        assert name is not None
        await move_stream_leader(js, stream, name)
        stored = await _read_all(js, stream)
        by_seq = {seq: data for seq, data, _ in stored}
        missing = [seq for seq in acked.by_seq if seq not in by_seq]
        assert not missing, f"{name}: {len(missing)} acknowledged messages missing: {missing[:10]}"
        wrong = [seq for seq, data in acked.by_seq.items() if by_seq[seq] != data]
        assert not wrong, f"{name}: acknowledged sequences hold other payloads: {wrong[:10]}"
        if unique_ids:
            counts = Counter(mid for _, _, mid in stored if mid is not None)
            twice = [mid for mid, n in counts.items() if n > 1]
            assert not twice, f"{name}: message ids stored more than once: {twice[:10]}"
        logger.warning(
            "readback on %s: %d stored, %d acked, all present", name, len(stored), len(acked)
        )


async def baseline(js: JetStreamContext) -> tuple[set[asyncio.Task[Any]], int]:
    """Tasks and subscriptions to compare with in :func:`no_leaks`.

    One API request first, so that what a connection creates once (the
    shared reply subscription) is part of the baseline.
    """
    await js.account_info()
    return set(asyncio.all_tasks()), len(js.nc._subs)


async def no_leaks(
    js: JetStreamContext,
    tasks_before: set[asyncio.Task[Any]],
    subs_before: int,
    streams: Iterable[str] = (),
    durables: Mapping[str, Iterable[str]] | None = None,
) -> None:
    """No asyncio task or subscription left over, and no server consumer but the durables."""

    def tasks_settled() -> bool:
        current = asyncio.current_task()
        return not [
            t for t in asyncio.all_tasks() - tasks_before if t is not current and not t.done()
        ]

    try:
        await wait_until(tasks_settled, timeout=10)
    except TimeoutError:
        left = [t for t in asyncio.all_tasks() - tasks_before if not t.done()]
        raise AssertionError(f"leftover asyncio tasks: {left}") from None
    assert len(js.nc._subs) <= subs_before, "subscriptions leaked"
    for stream in streams:
        keep = set((durables or {}).get(stream, ()))

        async def only_durables(stream: str = stream, keep: set[str] = keep) -> bool:
            names = {name async for name in js.consumer_names(stream)}
            return names <= keep

        await wait_until(only_durables, timeout=15, message=f"server consumers of {stream} leaked")


def servers_except(cluster: NatsCluster, *names: str | None) -> list[NatsServer]:
    """The cluster's nodes other than ``names``."""
    return [s for s in cluster.servers if s.server_name not in names]

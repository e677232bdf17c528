"""Listing streams on a three-node cluster with a node down, against real nats-servers.

The server leaves out of a page the streams whose leaders did not answer in time
(``missing``), yet counts them in the page: the next page must start after them.
"""

from __future__ import annotations

import logging

import pytest

from aiojetstream import StorageType, StreamConfig, connect
from aiojetstream.testing import NatsCluster


async def test_list_streams_with_a_node_down_repeats_none_and_says_what_is_missing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with NatsCluster(3, config={"cluster": {"no_advertise": True}}) as cluster:
        meta = (await cluster.meta_leader()).server_name
        assert meta is not None
        admin = await connect(cluster.server(meta).url)
        try:
            placed: dict[str, list[str]] = {}
            for i in range(8):
                stream = await admin.create_stream(
                    StreamConfig(
                        name=f"LS{i}",
                        subjects=[f"ls.{i}.>"],
                        storage=StorageType.FILE,
                        num_replicas=1,
                    )
                )
                info = await stream.info()
                leader = info.cluster.leader if info.cluster else None
                assert leader is not None
                placed.setdefault(leader, []).append(f"LS{i}")
            others = {n: s for n, s in placed.items() if n != meta}
            if not others:
                pytest.fail(f"all 8 R1 streams were placed on the meta leader: {placed}")
            victim = max(others, key=lambda n: len(others[n]))
            await cluster.server(victim).kill()
            caplog.set_level(logging.WARNING, logger="aiojetstream")
            listed = [info.config.name async for info in admin.list_streams(timeout=30)]
            assert len(listed) == len(set(listed)), f"repeated: {listed}"
            lost = set(placed[victim])
            assert set(listed) == {f"LS{i}" for i in range(8)} - lost
            warned = " ".join(r.getMessage() for r in caplog.records)
            assert all(name in warned for name in lost), warned
        finally:
            await admin.close()

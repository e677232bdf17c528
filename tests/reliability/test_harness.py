from __future__ import annotations

import pytest

from aiojetstream import connect
from aiojetstream.testing import NatsCluster
from reliability.harness import Acked, baseline, create_r3_stream, no_leaks, readback


@pytest.mark.cluster
async def test_harness_smoke() -> None:
    async with NatsCluster(3) as cluster:
        js = await connect(cluster.urls)
        tasks, subs = await baseline(js)
        try:
            await create_r3_stream(js, "HSMOKE", ["hs.>"])
            acked = Acked()
            for i in range(50):
                ack = await js.publish("hs.x", b"%d" % i, msg_id=str(i))
                acked.add(ack.seq, b"%d" % i)
            await readback(cluster, js, "HSMOKE", acked)
            await no_leaks(js, tasks, subs, ["HSMOKE"])
        finally:
            await js.close()


@pytest.mark.cluster
async def test_readback_fails_on_a_missing_or_changed_message() -> None:
    """The readback is not vacuous: an acked sequence the stream lacks fails it."""
    async with NatsCluster(3) as cluster:
        js = await connect(cluster.urls)
        try:
            await create_r3_stream(js, "HMISS", ["hm.>"])
            ack = await js.publish("hm.x", b"kept")
            acked = Acked()
            acked.add(ack.seq, b"kept")
            acked.add(ack.seq + 1, b"never stored")
            with pytest.raises(AssertionError, match="1 acknowledged messages missing"):
                await readback(cluster, js, "HMISS", acked)
            changed = Acked()
            changed.add(ack.seq, b"other")
            with pytest.raises(AssertionError, match="other payloads"):
                await readback(cluster, js, "HMISS", changed)
        finally:
            await js.close()

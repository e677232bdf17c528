"""A held ``publish_async`` whose earlier attempt may be stored is not reported failed.

With ``hold_when_full``, a resend that gets no reply in time (the stream's
followers hang: no quorum) is sent again with the same msg id. nats-server
answers that copy 10158 ("duplicate message id is in process") while the
first is still being stored, or 503 while the stream has no leader: the
future failed with that error, and the message was stored once the followers
came back. The msg id was generated, so the caller could not even ask again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import aiojetstream
from aiojetstream import DiscardPolicy, JetStreamTimeoutError, StreamConfig
from aiojetstream.testing import NatsCluster
from helpers import unique_name, wait_until

pytestmark = pytest.mark.cluster


async def test_a_held_resend_found_in_process_waits_for_its_first_copy() -> None:
    async with NatsCluster(3) as cluster:
        admin = await aiojetstream.connect(cluster.urls, timeout=10)
        name = unique_name("HELD")
        try:
            stream = await admin.create_stream(
                StreamConfig(
                    name=name,
                    subjects=[f"{name}.>"],
                    num_replicas=3,
                    max_msgs=1,
                    discard=DiscardPolicy.NEW,
                    max_age=timedelta(seconds=3),
                ),
                timeout=10,
            )

            async def led() -> bool:
                info = await stream.info()
                return info.cluster is not None and bool(info.cluster.leader)

            await wait_until(led, 30)
            info = await stream.info()
            assert info.cluster is not None
            leader = cluster.server(str(info.cluster.leader))
            followers = [s for s in cluster.servers if s is not leader]
            js = await aiojetstream.connect([leader.url], dont_randomize=True, timeout=5)
            spy = await aiojetstream.connect([leader.url], dont_randomize=True)
            in_process: list[bytes] = []

            async def seen(msg: Any) -> None:
                if b"10158" in msg.data:
                    in_process.append(msg.data)

            try:
                await spy.nc.subscribe("_INBOX.>", cb=seen)  # the replies to js's publishes
                await spy.nc.flush()
                await js.publish(f"{name}.a", b"fill")  # full: the next one is held
                held = await js.publish_async(f"{name}.a", b"held", hold_when_full=60, timeout=1)
                for server in followers:
                    server.freeze()  # no quorum: a resend is proposed, never answered
                try:
                    # "fill" ages out after 3 s; the resend gets no reply; the next one
                    # finds it in process.
                    await wait_until(lambda: bool(in_process), 30)
                    await js.nc.flush()  # js has read that reply too
                    assert not held.done()  # failed with DuplicateMsgIdInProcessError before
                finally:
                    for server in followers:
                        server.thaw()
                ack = await held
                assert ack.stream == name  # (a duplicate ack when the first copy answered it)
                stored: list[bytes] = []

                async def read_back() -> bool:
                    # The leader's read; right after the thaw the stream may still be
                    # electing or catching up (a request then gets no answer for a while).
                    try:
                        msg = await stream.get_msg(ack.seq, direct=False, timeout=2)
                    except JetStreamTimeoutError:
                        return False
                    stored.append(msg.data)
                    return True

                await wait_until(read_back, 60, interval=0.2)
                assert stored == [b"held"]
            finally:
                await spy.close()
                await js.close()
        finally:
            await admin.close()

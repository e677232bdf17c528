"""A JetStream hub (domain ``hub``) and a leaf node of it (domain ``leaf``), for domain tests.

A test module's fixture: ``async with hub_and_leaf() as pair: yield pair``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiojetstream
from aiojetstream import JetStreamContext
from aiojetstream.testing import NatsServer
from aiojetstream.testing import _free_port as free_port
from helpers import wait_until

STEP = 10.0  # bound of any single wait for the server


@dataclass
class HubLeaf:
    hub: NatsServer
    leaf: NatsServer


@asynccontextmanager
async def hub_and_leaf() -> AsyncIterator[HubLeaf]:
    """A hub (domain ``hub``) and a leaf node of it (domain ``leaf``), both with JetStream."""
    port = free_port()
    hub = NatsServer(
        server_name="hub",
        config={"jetstream": {"domain": "hub"}, "leafnodes": {"listen": f"127.0.0.1:{port}"}},
    )
    leaf = NatsServer(
        server_name="leaf",
        config={
            "jetstream": {"domain": "leaf"},
            "leafnodes": {"remotes": [{"url": f"nats://127.0.0.1:{port}"}]},
        },
    )
    async with hub, leaf:
        via_leaf = await aiojetstream.connect(leaf.url, domain="hub", timeout=1)
        try:
            # The leaf connection is up once the hub's JetStream answers through it.
            await wait_until(lambda: answers(via_leaf), 3 * STEP)
        finally:
            await via_leaf.close()
        yield HubLeaf(hub, leaf)


async def answers(js: JetStreamContext) -> bool:
    """Whether the JetStream ``js`` addresses answers (its account info)."""
    try:
        await js.account_info()
    except aiojetstream.JetStreamError:
        return False
    return True

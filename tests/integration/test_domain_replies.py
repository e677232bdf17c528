"""Replies through a JetStream domain (a hub and its leaf node): whose acknowledgement, and
the typed errors a leaf never sends.

A client of the leaf with ``domain="hub"`` publishes object chunks and infos to
``$O.<bucket>.>`` as they are: a bucket of the same name in the leaf's domain
stores them too and answers first. A leaf forwards the hub's API requests and
drops those nobody answers without a 503, so what a 503 tells locally (no
bucket, no direct get) comes only as a timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import aiojetstream
from aiojetstream import (
    BucketNotFoundError,
    JetStreamContext,
    KeyValueConfig,
    NoRespondersError,
    ObjectNotFoundError,
    ObjectStoreConfig,
    ObjectStoreError,
    StreamConfig,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until
from hub_leaf import HubLeaf, hub_and_leaf

STEP = 10.0  # bound of any single wait for the server


@pytest_asyncio.fixture
async def hub_leaf() -> AsyncIterator[HubLeaf]:
    """A hub (domain ``hub``) and a leaf node of it (domain ``leaf``), both with JetStream."""
    async with hub_and_leaf() as pair:
        yield pair


async def _messages(js: JetStreamContext, stream: str) -> int:
    return (await (await js.stream(stream)).info()).state.messages


async def test_an_object_put_refuses_a_same_named_local_buckets_acks(hub_leaf: HubLeaf) -> None:
    """A put through ``domain="hub"`` took the acknowledgements of the leaf's bucket of the
    same name and reported success, while the hub's bucket held the object in part (or not
    at all). ObjectStoreError naming both domains; the hub keeps nothing of the put.

    The hub's bucket stores without acknowledging (``no_ack``), so the leaf's
    acknowledgements are the only ones (both answer otherwise, whichever first)."""
    bucket = unique_name("O")
    hub = await aiojetstream.connect(hub_leaf.hub.url)
    leaf = await aiojetstream.connect(hub_leaf.leaf.url)
    via_leaf = await aiojetstream.connect(hub_leaf.leaf.url, domain="hub", timeout=3)
    try:
        hub_store = await hub.create_object_store(ObjectStoreConfig(bucket=bucket))
        config = (await hub_store.stream.info()).config
        await hub.update_stream(config.model_copy(update={"no_ack": True}))
        leaf_store = await leaf.create_object_store(ObjectStoreConfig(bucket=bucket))
        store = await via_leaf.object_store(bucket)
        with pytest.raises(
            ObjectStoreError, match=r"chunk of object 'big'.*domain 'leaf', not in domain 'hub'"
        ):
            await store.put("big", b"z" * 3000, chunk_size=1000)
        with pytest.raises(ObjectNotFoundError):
            await hub_store.info("big")
        # The failed put's chunks (stored by the hub) were purged in the hub's bucket.
        await wait_until(
            lambda: _messages_are(hub, hub_store.stream.name, 0),
            STEP,
            message="the hub's bucket kept chunks of the failed put",
        )
        # Without the leaf's bucket, the hub's acknowledgements are the hub's.
        await leaf.delete_object_store(leaf_store.bucket)
        await hub.update_stream(config)
        info = await store.put("ok", b"x" * 3000, chunk_size=1000)
        assert info.chunks == 3
        assert await hub_store.get_bytes("ok") == b"x" * 3000
    finally:
        for js in (hub, leaf, via_leaf):
            await js.close()


async def _messages_are(js: JetStreamContext, stream: str, n: int) -> bool:
    return await _messages(js, stream) == n


async def test_an_object_info_acked_by_the_local_domain_is_an_error(hub_leaf: HubLeaf) -> None:
    """The chunks acknowledged by the hub, the info by a leaf stream capturing the bucket's
    info subjects: ObjectStoreError, not a put that says the hub has the object.

    The hub's bucket holds only the chunk subjects here, so the leaf's
    acknowledgement of the info is the only one."""
    bucket = unique_name("O")
    hub = await aiojetstream.connect(hub_leaf.hub.url)
    leaf = await aiojetstream.connect(hub_leaf.leaf.url)
    via_leaf = await aiojetstream.connect(hub_leaf.leaf.url, domain="hub", timeout=3)
    try:
        hub_store = await hub.create_object_store(ObjectStoreConfig(bucket=bucket))
        config = (await hub_store.stream.info()).config
        await hub.update_stream(config.model_copy(update={"subjects": [f"$O.{bucket}.C.>"]}))
        await leaf.create_stream(
            StreamConfig(
                name=unique_name("M"), subjects=[f"$O.{bucket}.M.>"], allow_rollup_hdrs=True
            )
        )
        store = await via_leaf.object_store(bucket)
        with pytest.raises(ObjectStoreError, match=r"the info of object 'obj'.*domain 'leaf'"):
            await store.put("obj", b"z" * 3000, chunk_size=1000)
    finally:
        for js in (hub, leaf, via_leaf):
            await js.close()


async def test_a_plain_publish_is_stored_by_both_domains(hub_leaf: HubLeaf) -> None:
    """publish() is not checked (docs/publishing.md): a leaf stream capturing the same
    subjects stores the message too, and the ack's ``domain`` tells whose answer came."""
    name = unique_name("T")
    hub = await aiojetstream.connect(hub_leaf.hub.url)
    leaf = await aiojetstream.connect(hub_leaf.leaf.url)
    via_leaf = await aiojetstream.connect(hub_leaf.leaf.url, domain="hub")
    try:
        await hub.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        ack = await via_leaf.publish(f"{name}.a", b"x")
        assert (ack.stream, ack.domain) == (name, "hub")
        await leaf.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        ack = await via_leaf.publish(f"{name}.a", b"x")
        assert (ack.stream, ack.domain in ("hub", "leaf")) == (name, True)
        await wait_until(lambda: _messages_are(hub, name, 2), STEP)
        await wait_until(lambda: _messages_are(leaf, name, 1), STEP)
    finally:
        for js in (hub, leaf, via_leaf):
            await js.close()


async def test_kv_put_and_get_on_a_deleted_bucket_through_a_domain(hub_leaf: HubLeaf) -> None:
    """Locally a deleted bucket is BucketNotFoundError (a 503, then a look-up); through a
    domain the leaf drops the request and the put and get timed out after the whole
    timeout. The timeout now runs the same look-up."""
    bucket = unique_name("K")
    hub = await aiojetstream.connect(hub_leaf.hub.url)
    via_leaf = await aiojetstream.connect(hub_leaf.leaf.url, domain="hub", timeout=1)
    try:
        await hub.create_key_value(KeyValueConfig(bucket=bucket))
        kv = await via_leaf.key_value(bucket)
        await kv.put("a", b"1")
        assert (await kv.get("a")).value == b"1"
        await hub.delete_key_value(bucket)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(BucketNotFoundError):
            await kv.put("a", b"2")
        with pytest.raises(BucketNotFoundError):
            await kv.get("a")
        assert loop.time() - start < 5  # each: the 1 s timeout, then the look-up
    finally:
        await hub.close()
        await via_leaf.close()


async def test_batch_gets_without_allow_direct_through_a_domain(hub_leaf: HubLeaf) -> None:
    """Locally a batch direct get on a stream without allow_direct is NoRespondersError at
    once (a 503); through a domain it timed out. The handle knows allow_direct is off:
    refused before the request is sent, with the local error's text, once the stream's
    config (asked afresh) still says so."""
    name = unique_name("S")
    hub = await aiojetstream.connect(hub_leaf.hub.url)
    via_leaf = await aiojetstream.connect(hub_leaf.leaf.url, domain="hub", timeout=3)
    try:
        await hub.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        await hub.publish(f"{name}.a", b"x")
        stream = await via_leaf.stream(name)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(NoRespondersError, match=r"is allow_direct on\?"):
            async for _ in stream.get_batch(10):
                pass
        with pytest.raises(NoRespondersError, match=r"is allow_direct on\?"):
            async for _ in stream.get_last_msgs_for(f"{name}.>"):
                pass
        assert loop.time() - start < 2
        # Enabled since the handle was bound: its stale info does not refuse.
        config = (await (await hub.stream(name)).info()).config
        await hub.update_stream(config.model_copy(update={"allow_direct": True}))
        assert [m.data async for m in stream.get_batch(10)] == [b"x"]
        assert [m.data async for m in stream.get_last_msgs_for(f"{name}.>")] == [b"x"]
    finally:
        await hub.close()
        await via_leaf.close()


async def test_an_object_put_through_a_mapped_prefix_of_a_server_without_a_domain() -> None:
    """A domain's prefix mapped by the account to a server without a JetStream domain:
    its acknowledgements carry no domain, which is no other domain (the put failed)."""
    config = {
        "accounts": {
            "A": {
                "jetstream": "enabled",
                "users": [{"user": "a", "password": "a"}],
                "mappings": {"$JS.hub.API.>": "$JS.API.>"},
            }
        }
    }
    async with NatsServer(config=config) as server:
        plain = await aiojetstream.connect(server.url, user="a", password="a")
        try:
            bucket = unique_name("mapped")
            await plain.create_object_store(ObjectStoreConfig(bucket=bucket))
            for options in ({"domain": "hub"}, {"api_prefix": "$JS.hub.API"}):
                js = aiojetstream.JetStreamContext(plain.nc, **options)  # type: ignore[arg-type]
                store = await js.object_store(bucket)
                name = f"obj-{next(iter(options))}"
                info = await store.put(name, b"hello" * 1000)
                assert info.size == 5000
                assert await (await plain.object_store(bucket)).get_bytes(name) == b"hello" * 1000
        finally:
            await plain.close()

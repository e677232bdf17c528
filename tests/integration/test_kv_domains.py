"""Key-value buckets reached through a JetStream domain or an API prefix, and mirror topologies.

Writes go, as in nats.go, nats.js, nats.c and nats.rs (ADR-19), to
``<api prefix>.$KV.<bucket>.<key>`` when the context's API prefix is not the
default ``$JS.API``: the server maps them back to ``$KV.<bucket>.<key>`` in
the domain or account the prefix names. A mirror bucket reads the subjects its
stream holds (its origin's, renamed by its subject transforms, through a mirror
of a mirror) and writes to its origin.

The set-ups: a hub (domain ``hub``) with a leaf node (domain ``leaf``), both
with a bucket of the same name; and nats.go's ``TestKeyValueCrossAccounts``
(account ``I`` imports ``A``'s ``$JS.API.>`` as ``fromA.>`` and ``$KV.>`` as
``fromA.$KV.>``).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import aiojetstream
from aiojetstream import (
    BucketNotFoundError,
    JetStreamContext,
    KeyExistsError,
    KeyNotFoundError,
    KeyValue,
    KeyValueConfig,
    KeyValueError,
    KeyValueOp,
    StreamSource,
    SubjectTransformConfig,
)
from aiojetstream._models.stream import ExternalStream
from aiojetstream.testing import NatsServer
from helpers import CROSS_ACCOUNTS_CONFIG, unique_name, wait_until
from hub_leaf import HubLeaf, hub_and_leaf

STEP = 10.0  # bound of any single wait for the server


@pytest_asyncio.fixture
async def hub_leaf() -> AsyncIterator[HubLeaf]:
    """A hub (domain ``hub``) and a leaf node of it (domain ``leaf``), both with JetStream."""
    async with hub_and_leaf() as pair:
        yield pair


async def test_writes_through_a_domain_land_in_that_domains_bucket(hub_leaf: HubLeaf) -> None:
    """A client of the leaf with ``domain="hub"`` writes to the hub's bucket, not the leaf's."""
    bucket = unique_name("cfg")
    hub = await aiojetstream.connect(hub_leaf.hub.url)
    leaf = await aiojetstream.connect(hub_leaf.leaf.url)
    via_leaf = await aiojetstream.connect(hub_leaf.leaf.url, domain="hub")
    try:
        hub_kv = await hub.create_key_value(KeyValueConfig(bucket=bucket, history=5))
        leaf_kv = await leaf.create_key_value(KeyValueConfig(bucket=bucket, history=5))
        kv = await via_leaf.key_value(bucket)
        rev = await kv.put("color", b"blue")
        assert (await kv.get("color")).value == b"blue"
        assert (await hub_kv.get("color")).revision == rev
        assert await kv.create("size", b"L") == rev + 1
        with pytest.raises(KeyExistsError):
            await kv.create("size", b"XL")
        assert await kv.update("size", b"M", rev + 1) == rev + 2
        await kv.delete("color")
        await kv.purge("size")
        history = await hub_kv.history("size")
        assert [e.operation for e in history] == [KeyValueOp.PURGE]
        with pytest.raises(KeyNotFoundError):
            await hub_kv.get("color")
        # The leaf's own bucket of the same name got nothing.
        assert (await leaf_kv.status()).values == 0
        # The leaf's handle (default prefix) writes to the leaf's bucket.
        await leaf_kv.put("local", b"x")
        with pytest.raises(KeyNotFoundError):
            await kv.get("local")
    finally:
        for js in (hub, leaf, via_leaf):
            await js.close()


async def test_a_cross_domain_mirror_writes_to_its_origin(hub_leaf: HubLeaf) -> None:
    """A leaf bucket mirroring a hub bucket (``external.api``) writes through that prefix."""
    bucket = unique_name("b")
    hub = await aiojetstream.connect(hub_leaf.hub.url)
    leaf = await aiojetstream.connect(hub_leaf.leaf.url)
    try:
        origin = await hub.create_key_value(KeyValueConfig(bucket=bucket))
        await origin.put("k1", b"v1")
        mirror = await leaf.create_key_value(
            KeyValueConfig(
                bucket=unique_name("xm"),
                mirror=StreamSource(name=bucket, external=ExternalStream(api="$JS.hub.API")),
            )
        )
        await wait_until(lambda: _value_is(mirror, "k1", b"v1"), STEP)
        rev = await mirror.put("k2", b"v2")
        assert (await origin.get("k2")).revision == rev
        await wait_until(lambda: _value_is(mirror, "k2", b"v2"), STEP)
        assert await _keys(mirror) == ["k1", "k2"]
    finally:
        await hub.close()
        await leaf.close()


async def test_writes_through_an_api_prefix_of_an_account_import() -> None:
    """As nats.go's ``TestKeyValueCrossAccounts``: every write goes to ``fromA.$KV.>``."""
    async with NatsServer(config=CROSS_ACCOUNTS_CONFIG) as server:
        owner = await aiojetstream.connect(server.url.replace("nats://", "nats://a:a@"))
        js = await aiojetstream.connect(
            server.url.replace("nats://", "nats://i:i@"), api_prefix="fromA"
        )
        try:
            origin = await owner.create_key_value(KeyValueConfig(bucket="Map", history=5))
            kv = await js.key_value("Map")
            rev = await kv.put("map", b"value")
            assert (await kv.get("map")).value == b"value"
            assert (await origin.get("map")).revision == rev
            assert await kv.create("new", b"1") == rev + 1
            assert await kv.update("new", b"2", rev + 1) == rev + 2
            await kv.delete("map")
            with pytest.raises(KeyNotFoundError):
                await kv.get("map")
            await kv.purge("new")
            assert [e.operation for e in await origin.history("new")] == [KeyValueOp.PURGE]
            assert await kv.create("map", b"again") == rev + 5  # over the delete marker
        finally:
            await js.close()
            await owner.close()


# --------------------------------------------------------------------------- mirrors


async def test_a_mirror_with_subject_transforms_reads_the_renamed_keys(
    js: JetStreamContext,
) -> None:
    origin = await js.create_key_value(KeyValueConfig(bucket=unique_name("cfg")))
    await origin.put("k", b"v")
    name = unique_name("mt")
    rename = SubjectTransformConfig(src=f"$KV.{origin.bucket}.>", dest=f"$KV.{name}.>")
    mirror = await js.create_key_value(
        KeyValueConfig(
            bucket=name, mirror=StreamSource(name=origin.bucket, subject_transforms=[rename])
        )
    )
    await wait_until(lambda: _value_is(mirror, "k", b"v"), STEP)
    assert await _keys(mirror) == ["k"]
    # Writes go to the origin. (Not checked with origin.get: nats-server makes such a
    # mirror answer its origin's direct gets too, "not found" for keys it renamed.)
    rev = await mirror.put("k", b"w")
    assert [e.revision for e in await origin.history("k")] == [rev]
    await wait_until(lambda: _value_is(mirror, "k", b"w"), STEP)
    assert [e.value for e in await mirror.history("k")] == [b"w"]
    bound = await js.key_value(name)
    assert (await bound.get("k")).value == b"w"


async def test_a_mirror_with_transforms_that_hide_the_keys_is_refused(
    js: JetStreamContext,
) -> None:
    origin = await js.create_key_value(KeyValueConfig(bucket=unique_name("cfg")))
    name = unique_name("mt")
    prefixed = SubjectTransformConfig(src=f"$KV.{origin.bucket}.>", dest=f"x.{name}.>")
    config = KeyValueConfig(
        bucket=name, mirror=StreamSource(name=origin.bucket, subject_transforms=[prefixed])
    )
    with pytest.raises(KeyValueError, match="could not be read"):
        await js.create_key_value(config)  # before anything is sent
    with pytest.raises(BucketNotFoundError):
        await js.key_value(name)
    # A stream made by other means: binding it says so (no handle that reads nothing).
    scfg = aiojetstream._kv.kv_stream_config(config.model_copy(update={"mirror": None}))
    mirror = StreamSource(name=f"KV_{origin.bucket}", subject_transforms=[prefixed])
    await js.create_stream(
        scfg.model_copy(update={"subjects": None, "mirror": mirror, "mirror_direct": True})
    )
    with pytest.raises(KeyValueError, match="could not be read"):
        await js.key_value(name)


async def test_a_mirror_of_a_mirror_reads_and_writes_the_first_origin(
    js: JetStreamContext,
) -> None:
    origin = await js.create_key_value(KeyValueConfig(bucket=unique_name("cfg")))
    await origin.put("k", b"v")
    first = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("r1"), mirror=StreamSource(name=origin.bucket))
    )
    second = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("r2"), mirror=StreamSource(name=first.bucket))
    )
    for kv in (second, await js.key_value(second.bucket)):
        await wait_until(functools.partial(_value_is, kv, "k", b"v"), STEP)
        assert await _keys(kv) == ["k"]
    rev = await second.put("k", b"w")  # to the origin ($KV.<r1> has no stream)
    # Read from the origin's leader: a direct get of the origin's key may be answered
    # by a mirror (nats-server's mirror_direct) that has not caught up with the write.
    stored = await origin.stream.get_last_msg_for_subject(f"$KV.{origin.bucket}.k", direct=False)
    assert (stored.seq, stored.data) == (rev, b"w")
    await wait_until(lambda: _value_is(second, "k", b"w"), STEP)


async def _keys(kv: KeyValue) -> list[str]:
    return sorted([k async for k in kv.keys()])  # noqa: SIM118 (an async iterator)


async def _value_is(kv: KeyValue, key: str, value: bytes) -> bool:
    try:
        return (await kv.get(key)).value == value
    except KeyNotFoundError:
        return False

"""Key-value interoperability: buckets written by nats-py and by the JavaScript client
(``@nats-io/kv``) read through aiojetstream, and the other way round.

The JavaScript half needs ``node`` and ``npm``: the packages, pinned to the
exact versions in ``NPM_PACKAGES`` (docs/kv.md names them), are installed once
into a cache directory and reused (see ``node_interop``). When node, npm or the
registry is missing the tests skip, saying why; in CI (``CI=true``) they fail
instead, so a CI run cannot pass without them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import pytest

from aiojetstream import (
    JetStreamContext,
    KeyNotFoundError,
    KeyValue,
    KeyValueConfig,
    KeyValueEntry,
    KeyValueOp,
    KeyWatcher,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name, wait_until
from node_interop import node_packages, run_node

STEP = 10.0
#: The JavaScript packages, pinned (docs/kv.md, "Other clients", names these
#: versions). Their own @nats-io dependencies are exact versions too.
NPM_PACKAGES = {"@nats-io/kv": "3.4.0", "@nats-io/transport-node": "3.4.0"}


async def next_item(w: KeyWatcher) -> KeyValueEntry | None:
    return await asyncio.wait_for(w.__anext__(), STEP)


async def all_keys(kv: KeyValue) -> list[str]:
    return sorted([k async for k in kv.keys()])  # noqa: SIM118 (an async iterator)


async def is_gone(kv: KeyValue, key: str) -> bool:
    try:
        await kv.get(key)
    except KeyNotFoundError:
        return True
    return False


async def no_revisions(kv: KeyValue, key: str) -> bool:
    try:
        await kv.history(key)
    except KeyNotFoundError:
        return True
    return False


async def expect_expiry_marker(
    kv: KeyValue, key: str, create: Callable[[], Awaitable[object]]
) -> None:
    """Watch ``key`` while ``create()`` writes it with a TTL: a PUT, then the server's
    MaxAge marker as a PURGE."""
    async with kv.watch(key) as w:
        assert await next_item(w) is None  # absent so far
        await create()
        first = await next_item(w)
        assert first is not None
        assert first.operation is KeyValueOp.PUT
        marker = await next_item(w)
        assert marker is not None
        assert (marker.key, marker.operation, marker.value) == (key, KeyValueOp.PURGE, b"")
    with pytest.raises(KeyNotFoundError):
        await kv.get(key)


# --------------------------------------------------------------------------- nats-py


async def test_bucket_written_by_nats_py(js: JetStreamContext, nats_server: NatsServer) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        frompy = unique_name("frompy")
        pkv = await nc.jetstream().create_key_value(bucket=frompy, history=5, limit_marker_ttl=1)
        a1 = await pkv.put("a", b"1")
        a2 = await pkv.put("a", b"2")
        await pkv.put("b", b"x")
        await pkv.delete("b")
        await pkv.put("c", b"y")
        await pkv.purge("c")
        await pkv.put("p", b"z")
        await pkv.purge("p", msg_ttl=1)

        kv = await js.key_value(frompy)
        # nats-py buckets do not allow direct get: the STREAM.MSG.GET path is used.
        assert not kv.stream.cached_info.config.allow_direct
        entry = await kv.get("a")
        assert (entry.value, entry.revision, entry.operation) == (b"2", a2, KeyValueOp.PUT)
        assert (await kv.get("a", revision=a1)).value == b"1"
        for gone in ("b", "c", "p"):
            with pytest.raises(KeyNotFoundError):
                await kv.get(gone)
        history = await kv.history("b")
        assert [(e.operation, e.value) for e in history] == [("PUT", b"x"), ("DEL", b"")]
        assert [e.operation for e in await kv.history("c")] == [KeyValueOp.PURGE]
        status = await kv.status()
        assert status.history == 5
        assert status.limit_marker_ttl == timedelta(seconds=1)

        # nats-py's create(msg_ttl=1) expires into a MaxAge marker: a PURGE here.
        await expect_expiry_marker(kv, "t", lambda: pkv.create("t", b"short", msg_ttl=1))
        assert await all_keys(kv) == ["a"]
        await wait_until(lambda: no_revisions(kv, "p"), STEP)  # purge(msg_ttl=1): no trace
        # Our writes on the nats-py bucket, read back by nats-py.
        assert await kv.create("t", b"ours") > 0  # over the marker, or once it expired
        assert (await pkv.get("t")).value == b"ours"
        await kv.update("a", b"3", a2)
        assert (await pkv.get("a")).value == b"3"
        # nats-py turns allow_msg_ttl on for every bucket; an update keeps it.
        await js.update_key_value(KeyValueConfig(bucket=frompy, history=6, limit_marker_ttl=1))
        assert (await kv.status()).history == 6
        pyplain = unique_name("pyplain")
        plain = await nc.jetstream().create_key_value(bucket=pyplain)
        await plain.put("k", b"v")
        await js.update_key_value(KeyValueConfig(bucket=pyplain, history=2))
        assert (await (await js.key_value(pyplain)).get("k")).value == b"v"
    finally:
        await nc.close()


async def test_bucket_written_by_us_read_by_nats_py(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("fromours"), history=5, limit_marker_ttl=1)
    )
    a1 = await kv.put("a", b"1")
    a2 = await kv.update("a", b"2", a1)
    await kv.put("b", b"x")
    await kv.delete("b")
    await kv.put("c", b"y")
    await kv.purge("c")
    # A TTL the reads below cannot outlast (the expiry is checked with "e", below).
    await kv.create("t", b"lasting", ttl=3600)

    nc = await nats.connect(nats_server.url)
    try:
        pkv = await nc.jetstream().key_value(kv.bucket)
        entry = await pkv.get("a")
        assert (entry.value, entry.revision) == (b"2", a2)
        assert (await pkv.get("a", revision=a1)).value == b"1"
        for gone in ("b", "c"):
            with pytest.raises(nats.js.errors.KeyNotFoundError):
                await pkv.get(gone)
        assert [e.value for e in await pkv.history("a")] == [b"1", b"2"]
        assert [e.operation for e in await pkv.history("b")] == [None, "DEL"]  # None: PUT
        assert sorted(await pkv.keys()) == ["a", "t"]
        status = await pkv.status()
        assert (status.history, status.marker_ttl) == (5, 1.0)

        # nats-py's watcher maps our bucket's MaxAge marker to PURGE. It watches
        # before the key is written: a 1 s key written before a slow start of the
        # watch could be gone before the watch saw it.
        watcher: Any = await pkv.watch("e")  # nats-py's watcher is untyped
        try:
            assert await watcher.updates(STEP) is None  # no initial value
            await kv.create("e", b"short", ttl=1)
            first = await watcher.updates(STEP)
            assert first is not None
            assert (first.key, first.value) == ("e", b"short")
            marker = await watcher.updates(STEP)
            assert marker is not None
            assert (marker.key, marker.operation) == ("e", "PURGE")
        finally:
            await watcher.stop()
        # (nats-py 2.16's get() still returns the marker as an empty entry, and its
        # create() refuses a key whose last revision is a marker: not asserted here.)
        with pytest.raises(KeyNotFoundError):
            await kv.get("e")
        assert await kv.create("e", b"again") > 0
    finally:
        await nc.close()


# --------------------------------------------------------------------------- JavaScript

_SCRIPT = r"""
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";

const [mode, url, bucket] = process.argv.slice(2);
const nc = await connect({ servers: url });
const kvm = new Kvm(nc);
const out = {};
const show = (e) => (e ? { op: e.operation, value: e.string(), revision: e.revision } : null);
try {
  if (mode === "write") {
    const kv = await kvm.create(bucket, { history: 5, markerTTL: 1000 });
    out.a1 = await kv.put("a", "1");
    out.a2 = await kv.put("a", "2");
    await kv.put("b", "x");
    await kv.delete("b");
    await kv.put("c", "y");
    await kv.purge("c");
    await kv.put("p", "z");
    await kv.purge("p", { ttl: "1s" });
  } else if (mode === "ttl") {
    const kv = await kvm.open(bucket);
    out.t = await kv.create("t", "short", "1s");
  } else {
    const kv = await kvm.open(bucket);
    out.get = {};
    for (const k of ["a", "b", "c", "t", "missing"]) out.get[k] = show(await kv.get(k));
    out.a1 = show(await kv.get("a", { revision: 1 }));
    if (mode === "read") {
      out.keys = [];
      for await (const k of await kv.keys()) out.keys.push(k);
      out.history = [];
      for await (const e of await kv.history({ key: "a" })) out.history.push(show(e));
      const st = await kv.status();
      out.status = { history: st.history, markerTTL: st.markerTTL };
      out.created = await kv.create("fromjs", "hello");
      out.updated = await kv.update("a", "from js", out.get.a.revision);
    }
  }
} finally {
  await nc.close();
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def node_kv() -> Path:
    """A directory with ``@nats-io/kv`` installed and the test script (a skip; in CI a failure)."""
    return node_packages(NPM_PACKAGES, {"kv_interop.mjs": _SCRIPT})


async def node_run(root: Path, mode: str, url: str, bucket: str) -> dict[str, Any]:
    return await run_node(root, "kv_interop.mjs", mode, url, bucket)


async def test_bucket_written_by_javascript(
    js: JetStreamContext, nats_server: NatsServer, node_kv: Path
) -> None:
    fromjs = unique_name("fromjs")
    wrote = await node_run(node_kv, "write", nats_server.url, fromjs)
    kv = await js.key_value(fromjs)
    entry = await kv.get("a")
    assert (entry.value, entry.revision) == (b"2", wrote["a2"])
    assert (await kv.get("a", revision=wrote["a1"])).value == b"1"
    for gone in ("b", "c", "p"):
        with pytest.raises(KeyNotFoundError):
            await kv.get(gone)
    assert [e.operation for e in await kv.history("b")] == [KeyValueOp.PUT, KeyValueOp.DEL]
    assert [e.operation for e in await kv.history("c")] == [KeyValueOp.PURGE]
    status = await kv.status()
    assert (status.history, status.limit_marker_ttl) == (5, timedelta(seconds=1))

    # JS create(k, v, "1s") expires into a MaxAge marker: a PURGE here.
    await expect_expiry_marker(kv, "t", lambda: node_run(node_kv, "ttl", nats_server.url, fromjs))
    assert await all_keys(kv) == ["a"]
    await wait_until(lambda: no_revisions(kv, "p"), STEP)  # JS purge(k, {ttl: "1s"})


async def test_bucket_written_by_us_read_by_javascript(
    js: JetStreamContext, nats_server: NatsServer, node_kv: Path
) -> None:
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("forjs"), history=5, limit_marker_ttl=1)
    )
    a1 = await kv.put("a", b"1")
    a2 = await kv.put("a", b"2")
    await kv.put("b", b"x")
    await kv.delete("b")
    await kv.put("c", b"y")
    await kv.purge("c")
    t = await kv.create("t", b"short", ttl=60)

    got = await node_run(node_kv, "read", nats_server.url, kv.bucket)
    assert got["get"]["a"] == {"op": "PUT", "value": "2", "revision": a2}
    assert got["a1"] == {"op": "PUT", "value": "1", "revision": a1}
    assert got["get"]["b"]["op"] == "DEL"
    assert got["get"]["c"]["op"] == "PURGE"
    assert got["get"]["t"] == {"op": "PUT", "value": "short", "revision": t}
    assert got["get"]["missing"] is None
    assert sorted(got["keys"]) == ["a", "t"]
    assert [h["value"] for h in got["history"]] == ["1", "2"]
    assert got["status"] == {"history": 5, "markerTTL": 1000}
    # What JavaScript wrote, read back here.
    assert (await kv.get("fromjs")).value == b"hello"
    assert (await kv.get("a")).value == b"from js"
    assert (await kv.get("a")).revision == got["updated"]


async def test_our_expiry_marker_read_by_javascript(
    js: JetStreamContext, nats_server: NatsServer, node_kv: Path
) -> None:
    # history=1 so that the 1 s TTL is not raised to the marker TTL (nats-server
    # treats limit_marker_ttl as the minimum per-key TTL when history > 1), and
    # markers that stay 30 s: long enough for node to read one.
    kv = await js.create_key_value(
        KeyValueConfig(bucket=unique_name("forjs_ttl"), history=1, limit_marker_ttl=30)
    )
    await kv.create("t", b"short", ttl=1)
    await wait_until(lambda: is_gone(kv, "t"), STEP)
    got = await node_run(node_kv, "get", nats_server.url, kv.bucket)
    assert got["get"]["t"] is not None
    assert got["get"]["t"]["op"] == "PURGE"
    assert got["get"]["t"]["value"] == ""

"""Object store interoperability: objects written by nats-py and by the JavaScript client
(``@nats-io/obj``) read back here byte for byte, with their meta, and the other way round.

The JavaScript half runs node scripts against the pinned packages of ``NPM_PINS``
(installed once, see ``node_interop``); it skips without node or the npm
registry, and fails instead under CI (``CI=true``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path

import nats
import nats.js.api
import nats.js.errors
import pytest

from aiojetstream import (
    JetStreamContext,
    ObjectInfo,
    ObjectLinkError,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreConfig,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name
from node_interop import node_packages, run_node

NPM_PINS = {
    "@nats-io/obj": "3.4.0",
    "@nats-io/jetstream": "3.4.0",
    "@nats-io/nats-core": "3.4.0",
    "@nats-io/transport-node": "3.4.0",
}
"""The JavaScript packages the tests run against: exact versions, named in docs/object-store.md."""

MiB = 1024 * 1024


def pattern(n: int) -> bytes:
    """``n`` bytes of test content (byte i is (i * 7 + 3) % 251), as the node script makes it."""
    return bytes((i * 7 + 3) % 251 for i in range(n))


def digest_of(data: bytes) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


async def _write_ours(
    js: JetStreamContext, bucket: str, big: bytes, *, chunk_size: int
) -> tuple[ObjectStore, ObjectInfo]:
    """Write the bucket the other clients read back; returns it and the greeting's info.

    A greeting with headers and metadata, ``big`` at dir/big.bin, an empty
    object, a deleted one and a link to the greeting.
    """
    store = await js.create_object_store(ObjectStoreConfig(bucket=bucket, description="ours"))
    hello = await store.put(
        "hello.txt",
        b"hello from aiojetstream",
        description="a greeting",
        headers={"Content-Type": "text/plain", "X-Many": ["1", "2"]},
        metadata={"lang": "python"},
    )
    await store.put("dir/big.bin", big, chunk_size=chunk_size)
    await store.put("empty", b"")
    await store.put("gone", b"x")
    await store.delete("gone")
    await store.add_link("link", hello)
    return store, hello


# --------------------------------------------------------------------------- nats-py


async def test_objects_written_by_nats_py(js: JetStreamContext, nats_server: NatsServer) -> None:
    bucket = unique_name("FROMPY")
    big = pattern(MiB + 77)
    nc = await nats.connect(nats_server.url)
    try:
        pjs = nc.jetstream()
        pobs = await pjs.create_object_store(
            bucket, nats.js.api.ObjectStoreConfig(description="from nats-py")
        )
        meta = nats.js.api.ObjectMeta(
            name="hello.txt",
            description="a greeting",
            headers={"Content-Type": "text/plain"},
        )
        hello = await pobs.put("hello.txt", b"hello from nats-py", meta=meta)
        pbig = await pobs.put(
            "dir/big.bin",
            io.BytesIO(big),
            meta=nats.js.api.ObjectMeta(
                name="dir/big.bin",
                options=nats.js.api.ObjectMetaOptions(max_chunk_size=64 * 1024),
            ),
        )
        await pobs.put("empty", b"")
        await pobs.put("gone", b"deleted soon")
        await pobs.delete("gone")

        store = await js.object_store(bucket)
        info = await store.info("hello.txt")
        assert (info.name, info.description, info.size) == ("hello.txt", "a greeting", 18)
        assert info.headers == {"Content-Type": ["text/plain"]}  # a plain str: one value
        assert (info.nuid, info.digest) == (hello.nuid, digest_of(b"hello from nats-py"))
        assert await store.get_bytes("hello.txt") == b"hello from nats-py"
        binfo = await store.info("dir/big.bin")
        assert (binfo.size, binfo.chunks, binfo.nuid) == (len(big), 17, pbig.nuid)
        assert binfo.options is not None
        assert binfo.options.max_chunk_size == 64 * 1024
        assert await store.get_bytes("dir/big.bin") == big
        assert await store.get_bytes("empty") == b""
        with pytest.raises(ObjectNotFoundError):
            await store.get("gone")
        assert (await store.info("gone", include_deleted=True)).deleted
        assert sorted([i.name async for i in store.list()]) == ["dir/big.bin", "empty", "hello.txt"]
        status = await store.status()
        assert (status.bucket, status.description) == (bucket, "from nats-py")

        # Ours in their bucket, read back by nats-py; a put replacing theirs purges their chunks.
        ours = await store.put("hello.txt", b"replaced by aiojetstream", headers={"X": ["1", "2"]})
        pinfo = await pobs.get_info("hello.txt")
        assert (pinfo.nuid, pinfo.size, pinfo.headers) == (ours.nuid, 24, {"X": ["1", "2"]})
        assert (await pobs.get("hello.txt")).data == b"replaced by aiojetstream"
        chunks = (await store.stream.info(subjects_filter=f"$O.{bucket}.C.>")).state.subjects
        assert chunks is not None
        assert f"$O.{bucket}.C.{hello.nuid}" not in chunks
        # nats-py follows our links.
        await store.add_link("link", await store.info("dir/big.bin"))
        assert (await pobs.get("link")).data == big
    finally:
        await nc.close()


async def test_objects_written_by_us_read_by_nats_py(
    js: JetStreamContext, nats_server: NatsServer
) -> None:
    bucket = unique_name("FORPY")
    big = pattern(2 * MiB + 1)
    store, hello = await _write_ours(js, bucket, big, chunk_size=100_000)

    nc = await nats.connect(nats_server.url)
    try:
        pjs = nc.jetstream()
        pobs = await pjs.object_store(bucket)
        pinfo = await pobs.get_info("hello.txt")
        assert (pinfo.name, pinfo.description, pinfo.size, pinfo.chunks) == (
            "hello.txt",
            "a greeting",
            23,
            1,
        )
        assert pinfo.headers == {"Content-Type": ["text/plain"], "X-Many": ["1", "2"]}
        assert (pinfo.digest, pinfo.nuid) == (hello.digest, hello.nuid)
        # nats-py 2.16's ObjectInfo has no metadata field: the stored JSON holds it.
        raw = await pjs.get_last_msg(
            f"OBJ_{bucket}", f"$O.{bucket}.M." + base64.urlsafe_b64encode(b"hello.txt").decode()
        )
        assert raw.data is not None
        assert json.loads(raw.data)["metadata"] == {"lang": "python"}
        assert (await pobs.get("hello.txt")).data == b"hello from aiojetstream"
        result = await pobs.get("dir/big.bin")
        assert result.data == big
        assert (result.info.chunks, result.info.size) == (21, len(big))
        assert (await pobs.get("empty")).data == b""
        assert (await pobs.get("link")).data == b"hello from aiojetstream"
        with pytest.raises(nats.js.errors.ObjectNotFoundError):
            await pobs.get_info("gone")
        assert (await pobs.get_info("gone", show_deleted=True)).deleted
        names = sorted(i.name for i in await pobs.list(ignore_deletes=True))
        assert names == ["dir/big.bin", "empty", "hello.txt", "link"]
        assert (await pobs.status()).description == "ours"

        # What nats-py writes into our bucket reads back here.
        await pobs.put("from-py", pattern(300_000))
        assert await store.get_bytes("from-py") == pattern(300_000)
    finally:
        await nc.close()


# --------------------------------------------------------------------------- JavaScript

_SCRIPT = r"""
import { connect, headers } from "@nats-io/transport-node";
import { Objm } from "@nats-io/obj";
import { createHash } from "node:crypto";

const [mode, url, bucket, other, links] = process.argv.slice(2);
const nc = await connect({ servers: url });
const objm = new Objm(nc);
const out = {};
// The test content of n bytes: byte i is (i * 7 + 3) % 251.
const pattern = (n) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + 3) % 251);
const sha = (b) => createHash("sha256").update(b).digest("hex");
const streamOf = (data, piece) => new ReadableStream({
  start(c) {
    for (let i = 0; i < data.length; i += piece) c.enqueue(data.subarray(i, i + piece));
    c.close();
  },
});
// An info as the client hands it out (ObjectInfoImpl) or as list() does (the raw JSON).
const show = (info) => info === null ? null : {
  name: info.name, description: info.description ?? "",
  headers: typeof info.headers?.toRecord === "function"
    ? info.headers.toRecord()
    : (info.headers ?? {}),
  metadata: info.metadata ?? {}, size: info.size ?? 0, chunks: info.chunks ?? 0,
  digest: info.digest ?? null, nuid: info.nuid ?? null, deleted: info.deleted ?? false,
  link: info.options?.link ?? null, max_chunk_size: info.options?.max_chunk_size ?? null,
};
try {
  if (mode === "write") {
    const os = await objm.create(bucket, { description: "from js" });
    const h = headers();
    h.set("Content-Type", "text/plain");
    h.append("X-Many", "1");
    h.append("X-Many", "2");
    out.hello = show(await os.putBlob(
      { name: "hello.txt", description: "a greeting", headers: h, metadata: { lang: "js" } },
      new TextEncoder().encode("hello from javascript"),
    ));
    out.big = show(await os.put(
      { name: "dir/big.bin", options: { max_chunk_size: 65536 } },
      streamOf(pattern(1048576 + 123), 100000),
    ));
    out.empty = show(await os.putBlob({ name: "empty" }, new Uint8Array(0)));
    await os.putBlob({ name: "gone" }, new TextEncoder().encode("deleted soon"));
    await os.delete("gone");
    out.link = show(await os.link("link", await os.info("hello.txt")));
    const dir = await objm.create(other);
    await dir.putBlob({ name: "elsewhere" }, new TextEncoder().encode("in the other bucket"));
    out.dir = show(await os.linkStore("dir", dir));
  } else {
    const os = await objm.open(bucket);
    out.objects = {};
    for (const info of await os.list()) {
      const data = info.options?.link ? null : await os.getBlob(info.name);
      out.objects[info.name] = { info: show(info), sha256: data === null ? null : sha(data) };
    }
    out.via_link = {};
    for (const name of (links ?? "").split(",").filter((n) => n)) {
      const data = await os.getBlob(name);
      out.via_link[name] = data === null ? null : new TextDecoder().decode(data);
    }
    out.deleted = show(await os.info("gone"));
    out.deleted_blob = await os.getBlob("gone");
    out.missing = await os.getBlob("missing");
    const st = await os.status();
    out.status = { bucket: st.bucket, description: st.description, compression: st.compression };
    out.put = show(await os.putBlob({ name: "from-js" }, pattern(300000)));
  }
} finally {
  await nc.close();
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def node_obj() -> Path:
    """A directory with the pinned ``@nats-io/obj`` and the test script (or a skip; CI fails)."""
    return node_packages(NPM_PINS, {"obj_interop.mjs": _SCRIPT})


async def test_objects_written_by_javascript(
    js: JetStreamContext, nats_server: NatsServer, node_obj: Path
) -> None:
    bucket, other = unique_name("FROMJS"), unique_name("JSDIR")
    wrote = await run_node(node_obj, "obj_interop.mjs", "write", nats_server.url, bucket, other)
    store = await js.object_store(bucket)

    info = await store.info("hello.txt")
    assert (info.description, info.metadata) == ("a greeting", {"lang": "js"})
    assert info.headers == {"Content-Type": ["text/plain"], "X-Many": ["1", "2"]}
    assert (info.nuid, info.digest, info.size) == (
        wrote["hello"]["nuid"],
        wrote["hello"]["digest"],
        21,
    )
    assert await store.get_bytes("hello.txt") == b"hello from javascript"
    big = pattern(MiB + 123)
    binfo = await store.info("dir/big.bin")
    assert (binfo.size, binfo.chunks, binfo.digest) == (len(big), 17, digest_of(big))
    assert await store.get_bytes("dir/big.bin") == big
    assert await store.get_bytes("empty") == b""
    with pytest.raises(ObjectNotFoundError):
        await store.get("gone")
    assert (await store.info("gone", include_deleted=True)).deleted
    # JavaScript's links: to an object (no nuid, no size), and to a whole bucket.
    link = await store.info("link")
    assert link.link is not None
    assert (link.link.bucket, link.link.name) == (bucket, "hello.txt")
    assert await store.get_bytes("link") == b"hello from javascript"
    with pytest.raises(ObjectLinkError):
        await store.get("dir")
    dir_link = (await store.info("dir")).link
    assert dir_link is not None
    assert dir_link.bucket == other
    assert await (await js.object_store(other)).get_bytes("elsewhere") == b"in the other bucket"
    names = sorted([i.name async for i in store.list()])
    assert names == ["dir", "dir/big.bin", "empty", "hello.txt", "link"]
    assert (await store.status()).description == "from js"


async def test_objects_written_by_us_read_by_javascript(
    js: JetStreamContext, nats_server: NatsServer, node_obj: Path
) -> None:
    bucket, other = unique_name("FORJS"), unique_name("FORJS2")
    big = pattern(MiB + 5)
    store, hello = await _write_ours(js, bucket, big, chunk_size=50_000)
    far_store = await js.create_object_store(ObjectStoreConfig(bucket=other))
    far = await far_store.put("far", b"far away")
    await store.add_link("farlink", far)
    await store.add_bucket_link("dir", far_store)

    got = await run_node(
        node_obj, "obj_interop.mjs", "read", nats_server.url, bucket, "-", "link,farlink"
    )
    objects = got["objects"]
    assert sorted(objects) == ["dir", "dir/big.bin", "empty", "farlink", "hello.txt", "link"]
    h = objects["hello.txt"]
    assert h["sha256"] == hashlib.sha256(b"hello from aiojetstream").hexdigest()
    assert h["info"] == {
        "name": "hello.txt",
        "description": "a greeting",
        "headers": {"Content-Type": ["text/plain"], "X-Many": ["1", "2"]},
        "metadata": {"lang": "python"},
        "size": 23,
        "chunks": 1,
        "digest": hello.digest,
        "nuid": hello.nuid,
        "deleted": False,
        "link": None,
        "max_chunk_size": 128 * 1024,
    }
    b = objects["dir/big.bin"]
    assert b["sha256"] == hashlib.sha256(big).hexdigest()
    assert (b["info"]["size"], b["info"]["chunks"], b["info"]["max_chunk_size"]) == (
        len(big),
        21,
        50_000,
    )
    assert objects["empty"]["sha256"] == hashlib.sha256(b"").hexdigest()
    assert objects["link"]["info"]["link"] == {"bucket": bucket, "name": "hello.txt"}
    assert objects["dir"]["info"]["link"] == {"bucket": other}
    assert got["via_link"] == {"link": "hello from aiojetstream", "farlink": "far away"}
    assert got["deleted"]["deleted"] is True
    assert (got["deleted_blob"], got["missing"]) == (None, None)
    assert got["status"] == {"bucket": bucket, "description": "ours", "compression": False}
    # What JavaScript wrote into our bucket reads back here.
    assert got["put"]["digest"] == digest_of(pattern(300_000))
    assert await store.get_bytes("from-js") == pattern(300_000)

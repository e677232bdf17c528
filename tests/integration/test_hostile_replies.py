"""Replies a real nats-server never sends: refused or treated as a gap, never taken as data.

A proxy in front of the session's nats-server (``RewritingProxy``,
``tests/proxy.py``) rewrites one reply or delivery, as a buggy or newer server
or a man in the middle could. What used to happen, each case in its test:

* an ordered consumer's delivery whose stream sequence went back (stream
  sequence 1 again, with its data, under the next consumer sequence) was
  handed out: ``[1, 2, 1]``, and the cursor moved back to 1;
* a publish acknowledgement with ``seq`` -1, 0, 2**70, ``"5"``, 5.0 or
  ``true``, or ``duplicate`` ``"true"`` or 1, was returned as a PubAck;
* ``publish_many`` counted as stored any reply that started
  ``{"stream":"`` and held ``"seq":`` (``"seq":"x"``, trailing bytes);
* KV ``keys()``, ``watch()`` and ``history()`` cut the key out of any
  delivery subject: another bucket's key, ``''``, ``'.x'``;
* ``js.stream("S")`` answered about stream ``OTHER`` gave a handle on
  ``OTHER`` (its purge emptied ``OTHER``); the same for consumers;
* a stream or consumer info with a negative, string, bool or past-uint64
  sequence or count was taken as it was;
* ``kv.get`` took a ``Nats-Sequence`` of 0 or past 2**64 - 1 on its fast
  path; a latest-value get answered with another key's message said
  "revision None is not a revision of key".

Each is now an :class:`InvalidResponseError` (the ordered consumer: a gap,
reset at the cursor).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import pytest_asyncio

import aiojetstream
from aiojetstream import (
    ConsumerConfig,
    InvalidResponseError,
    JetStreamContext,
    KeyNotFoundError,
    KeyValue,
    KeyValueConfig,
    OrderedConsumerConfig,
    StorageType,
    StreamConfig,
)
from aiojetstream.testing import NatsServer
from helpers import unique_name
from proxy import Frame, RewritingProxy


@dataclass
class Hostile:
    """A context connected through a :class:`RewritingProxy` to the session's server."""

    proxy: RewritingProxy
    js: JetStreamContext


@pytest_asyncio.fixture
async def hostile(js: JetStreamContext, nats_server: NatsServer) -> AsyncIterator[Hostile]:
    """Through the proxy (``js`` deletes the streams before and after)."""
    async with RewritingProxy(nats_server.port) as proxy:
        context = await aiojetstream.connect(proxy.url)
        try:
            yield Hostile(proxy, context)
        finally:
            await context.close()


async def _stream(js: JetStreamContext, prefix: str) -> tuple[str, aiojetstream.Stream]:
    name = unique_name(prefix)
    stream = await js.create_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    )
    return name, stream


# --------------------------------------------------------------------------- ordered consumer


class _StreamBack:
    """The third delivery comes again as stream sequence 1, with message 1's data (once)."""

    def __init__(self, stream: str) -> None:
        self._prefix = f"$JS.ACK.{stream}.".encode()
        self.first: Frame | None = None
        self.done = False

    def __call__(self, frame: Frame) -> list[Frame] | None:
        if self.done or not frame.reply.startswith(self._prefix):
            return None
        tokens = frame.reply.split(b".")  # $JS.ACK.<stream>.<consumer>.<n>.<sseq>.<cseq>...
        if tokens[6] == b"1":
            self.first = frame
        elif tokens[6] == b"3":
            assert self.first is not None
            self.done = True
            tokens[5] = b"1"
            return [
                frame.replace(
                    reply=b".".join(tokens), hdr=self.first.hdr, payload=self.first.payload
                )
            ]
        return None


@pytest.mark.parametrize("how", ["messages", "fetch", "next"])
async def test_an_ordered_delivery_whose_stream_sequence_goes_back_is_a_gap(
    hostile: Hostile, how: str
) -> None:
    """Reset at the cursor: 3 comes again from the server, 1 is never handed out twice."""
    js = hostile.js
    name, stream = await _stream(js, "HRO")
    for i in range(1, 4):
        await js.publish(f"{name}.x", f"m{i}".encode())
    rewrite = hostile.proxy.rewrite = _StreamBack(name)
    oc = await stream.ordered_consumer(OrderedConsumerConfig())
    got: list[tuple[int, bytes]] = []

    async def read(count: int) -> None:
        if how == "messages":
            async with oc.messages() as it:
                async for msg in it:
                    got.append((msg.metadata.sequence.stream, msg.data))
                    if len(got) == count:
                        break
        elif how == "fetch":
            while len(got) < count:
                async for msg in await oc.fetch(count - len(got), expires=2):
                    got.append((msg.metadata.sequence.stream, msg.data))
        else:
            while len(got) < count:
                msg = await oc.next(expires=2)
                got.append((msg.metadata.sequence.stream, msg.data))

    await read(3)
    assert rewrite.done
    assert got == [(1, b"m1"), (2, b"m2"), (3, b"m3")]
    assert oc.cursor == 3
    # And on from there, in order.
    for i in range(4, 6):
        await js.publish(f"{name}.x", f"m{i}".encode())
    await read(5)
    assert got[3:] == [(4, b"m4"), (5, b"m5")]


# --------------------------------------------------------------------------- publish acks

#: Acknowledgements nats-server never writes (``%s``: the stream's name).
BAD_ACKS = {
    "seq -1": '{"stream":"%s","seq":-1}',
    "seq 0": '{"stream":"%s","seq":0}',
    "seq 2**64": '{"stream":"%s","seq":18446744073709551616}',
    "seq 2**70": '{"stream":"%s","seq":1180591620717411303424}',
    "seq a string": '{"stream":"%s","seq":"5"}',
    "seq a float": '{"stream":"%s","seq":5.0}',
    "seq true": '{"stream":"%s","seq":true}',
    "duplicate a string": '{"stream":"%s","seq":5,"duplicate":"true"}',
    "duplicate 1": '{"stream":"%s","seq":5,"duplicate":1}',
}
#: Replies publish_many counted as stored without a parse (and publish refused).
BAD_MANY = {
    **BAD_ACKS,
    "seq text": '{"stream":"%s","seq":"x"}',
    "trailing bytes": '{"stream":"%s","seq":5}xx',
    "a leading zero": '{"stream":"%s","seq":05}',
    "nested too deep": '{"stream":"%s","seq":5,"x":' + "[" * 1000 + "]" * 1000 + "}",
}


def _answer(hostile: Hostile, subject: str, payload: str) -> None:
    """Replies to publishes to ``subject`` say ``payload`` instead."""
    wanted = subject.encode()
    answer = payload.encode()

    def rewrite(frame: Frame) -> list[Frame] | None:
        return [frame.replace(payload=answer)] if frame.request == wanted else None

    hostile.proxy.rewrite = rewrite


@pytest.mark.parametrize("case", list(BAD_ACKS))
async def test_a_publish_ack_with_an_impossible_value_is_refused(
    hostile: Hostile, case: str
) -> None:
    js = hostile.js
    name, _ = await _stream(js, "HRP")
    subject = f"{name}.x"
    _answer(hostile, subject, BAD_ACKS[case] % name)
    with pytest.raises(InvalidResponseError, match="invalid publish acknowledgement"):
        await js.publish(subject, b"x")
    future = await js.publish_async(subject, b"x")
    with pytest.raises(InvalidResponseError, match="invalid publish acknowledgement"):
        await future


async def test_a_publish_ack_at_the_bounds_is_taken(hostile: Hostile) -> None:
    """The control: the largest sequence, a duplicate (as nats-server writes it), a domain."""
    js = hostile.js
    name, _ = await _stream(js, "HRP")
    subject = f"{name}.x"
    _answer(hostile, subject, f'{{"stream":"{name}","seq":18446744073709551615,"duplicate": true}}')
    ack = await js.publish(subject, b"x")
    assert (ack.stream, ack.seq, ack.duplicate) == (name, 2**64 - 1, True)
    _answer(hostile, subject, f'{{"stream":"{name}","domain":"hub","seq":1}}')
    ack = await (await js.publish_async(subject, b"x"))
    assert (ack.seq, ack.duplicate, ack.domain) == (1, False, "hub")
    summary = await js.publish_many(subject, [b"a", b"b", b"c"])
    assert (summary.stored, summary.duplicates) == (3, 0)


@pytest.mark.parametrize("case", list(BAD_MANY))
async def test_publish_many_parses_a_reply_of_another_shape(hostile: Hostile, case: str) -> None:
    """Counted as stored only in nats-server's exact shape; anything else parsed (and refused)."""
    js = hostile.js
    name, _ = await _stream(js, "HRM")
    subject = f"{name}.x"
    _answer(hostile, subject, BAD_MANY[case] % name)
    with pytest.raises(InvalidResponseError, match="invalid publish acknowledgement"):
        await js.publish(subject, b"x")
    with pytest.raises(InvalidResponseError, match="invalid publish acknowledgement"):
        await js.publish_many(subject, [b"a", b"b", b"c"])


# --------------------------------------------------------------------------- KV deliveries


def _readdress(hostile: Hostile, bucket: str, key: str, subject: str) -> None:
    """Deliveries of ``key`` (the bucket's consumers) come on ``subject`` instead."""
    ack = f"$JS.ACK.KV_{bucket}.".encode()
    old = f"$KV.{bucket}.{key}".encode()
    new = subject.format(bucket=bucket).encode()

    def rewrite(frame: Frame) -> list[Frame] | None:
        if frame.subject != old or not frame.reply.startswith(ack):
            return None
        return [frame.replace(subject=new)]

    hostile.proxy.rewrite = rewrite


#: Subjects no delivery of a bucket's consumer has (``{bucket}``: the bucket's name).
NOT_KEYS = {
    "another bucket's key": "$KV.other.secret",
    "a longer bucket name": "$KV.{bucket}x.k2",
    "no prefix": "zz",
    "the prefix without a key": "$KV.{bucket}",
    "an empty key": "$KV.{bucket}.",
    "an empty first token": "$KV.{bucket}..x",
    "an empty last token": "$KV.{bucket}.k2.",
    "a wildcard": "$KV.{bucket}.>",
}


async def _bucket(js: JetStreamContext) -> tuple[str, KeyValue]:
    bucket = unique_name("hrkv")
    kv = await js.create_key_value(KeyValueConfig(bucket=bucket, history=5))
    await kv.put("k1", b"v1")
    await kv.put("k2", b"v2")
    return bucket, kv


#: What the error says.
NOT_A_KEY = r"not \$KV\.\w+\.<key>"


async def _keys(kv: KeyValue) -> list[str]:
    return [key async for key in kv.keys()]  # noqa: SIM118 (an async generator, not a dict)


async def _watched(kv: KeyValue) -> list[str]:
    keys: list[str] = []
    async with kv.watch(">") as watcher:
        async for entry in watcher:
            if entry is None:
                break
            keys.append(entry.key)
    return keys


@pytest.mark.parametrize("case", list(NOT_KEYS))
async def test_a_kv_delivery_outside_the_buckets_keys_is_refused(
    hostile: Hostile, case: str
) -> None:
    """keys(), watch() and history(): InvalidResponseError, never a key cut out of it."""
    bucket, kv = await _bucket(hostile.js)
    _readdress(hostile, bucket, "k2", NOT_KEYS[case])
    with pytest.raises(InvalidResponseError, match=NOT_A_KEY):
        await _keys(kv)
    async with kv.watch(">") as watcher:
        first = await anext(watcher)
        assert first is not None
        assert first.key == "k1"
        with pytest.raises(InvalidResponseError, match=NOT_A_KEY):
            await anext(watcher)
        assert await anext(watcher) is None  # the watch goes on: the initial values' end
    with pytest.raises(InvalidResponseError, match=NOT_A_KEY):
        await kv.history("k2")
    hostile.proxy.rewrite = None  # the control: the same calls, as the server answers
    assert await _keys(kv) == ["k1", "k2"]
    assert await _watched(kv) == ["k1", "k2"]
    assert [entry.value for entry in await kv.history("k2")] == [b"v2"]


async def test_keys_stored_by_other_clients_outside_adr8_are_listed(hostile: Hostile) -> None:
    """A key outside ADR-8's characters (a raw publish, a client that checks no keys) is a
    literal subject the server stores: listing and watching the bucket name it."""
    bucket, kv = await _bucket(hostile.js)
    await hostile.js.publish(f"$KV.{bucket}.ключ", b"v3")
    await hostile.js.publish(f"$KV.{bucket}.a*b", b"v4")
    assert sorted(await _keys(kv)) == sorted(["k1", "k2", "ключ", "a*b"])
    assert sorted(await _watched(kv)) == sorted(["k1", "k2", "ключ", "a*b"])
    assert [entry.value for entry in await kv.history("k1")] == [b"v1"]


async def test_purge_deletes_never_purges_by_a_subject_that_is_no_key(hostile: Hostile) -> None:
    """A marker delivered on ``$KV.<bucket>.>`` purged every key below its revision."""
    bucket, kv = await _bucket(hostile.js)
    await kv.delete("k2")
    _readdress(hostile, bucket, "k2", "$KV.{bucket}.>")
    with pytest.raises(InvalidResponseError, match=NOT_A_KEY):
        await kv.purge_deletes(older_than=0)
    hostile.proxy.rewrite = None
    assert (await kv.get("k1")).value == b"v1"


# --------------------------------------------------------------------------- API replies


def _patch(hostile: Hostile, request: str, **fields: object) -> None:
    """Replies to API requests to ``request`` get ``fields`` set (``a__b``: field b of a)."""
    wanted = request.encode()

    def rewrite(frame: Frame) -> list[Frame] | None:
        if frame.request != wanted:
            return None
        body = json.loads(frame.payload)
        for path, value in fields.items():
            *parents, last = path.split("__")
            target = body
            for parent in parents:
                target = target[parent]
            target[last] = value
        return [frame.replace(payload=json.dumps(body).encode())]

    hostile.proxy.rewrite = rewrite


async def test_a_stream_handle_is_never_one_on_another_stream(hostile: Hostile) -> None:
    """``js.stream("S")`` answered about OTHER gave a handle on OTHER (its purge emptied OTHER)."""
    js = hostile.js
    name, stream = await _stream(js, "HRS")
    other, _ = await _stream(js, "HRX")
    await js.publish(f"{other}.x", b"keep")
    info = f"$JS.API.STREAM.INFO.{name}"
    _patch(hostile, info, config__name=other)
    with pytest.raises(InvalidResponseError, match=f"asked about stream '{name}'.*'{other}'"):
        await js.stream(name)
    with pytest.raises(InvalidResponseError, match="asked about stream"):
        await stream.info()
    assert stream.name == name
    config = StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    with pytest.raises(InvalidResponseError, match="asked about stream"):
        await js.update_stream(config)  # the current config read first (allow_msg_ttl kept)
    _patch(hostile, f"$JS.API.STREAM.CREATE.{name}", config__name=other)
    with pytest.raises(InvalidResponseError, match="asked about stream"):
        await js.create_stream(config)
    _patch(hostile, f"$JS.API.STREAM.UPDATE.{name}", config__name=other)
    with pytest.raises(InvalidResponseError, match="asked about stream"):
        await js.update_stream(config)
    hostile.proxy.rewrite = None
    assert (await (await js.stream(other)).info()).state.messages == 1
    assert (await js.stream(name)).name == name


#: What the error of a reply about another stream or consumer says.
ASKED = r"asked about (stream|consumer) '\w+', the server answered about"


async def test_a_consumer_handle_is_never_one_on_another_consumer(hostile: Hostile) -> None:
    js = hostile.js
    name, stream = await _stream(js, "HRC")
    consumer = await stream.create_consumer(ConsumerConfig(durable_name="d"))
    info = f"$JS.API.CONSUMER.INFO.{name}.d"
    for fields in ({"name": "zzz"}, {"stream_name": "OTHER"}):
        _patch(hostile, info, **fields)
        with pytest.raises(InvalidResponseError, match=ASKED):
            await js.consumer(name, "d")
        with pytest.raises(InvalidResponseError, match=ASKED):
            await consumer.info()
        with pytest.raises(InvalidResponseError, match=ASKED):
            await stream.consumer("d")
        # The administration reading the info first: it drives where they move the consumer.
        with pytest.raises(InvalidResponseError, match=ASKED):
            await consumer.backlog()
        with pytest.raises(InvalidResponseError, match=ASKED):
            await consumer.clear_backlog()
        with pytest.raises(InvalidResponseError, match=ASKED):
            await consumer.skip_older_than(60)
        _patch(hostile, f"$JS.API.CONSUMER.RESET.{name}.d", **fields)
        with pytest.raises(InvalidResponseError, match=ASKED):
            await consumer.reset()
        _patch(hostile, f"$JS.API.CONSUMER.CREATE.{name}.d", **fields)
        with pytest.raises(InvalidResponseError, match=ASKED):
            await stream.create_consumer(ConsumerConfig(durable_name="d"))
    _patch(hostile, f"$JS.API.CONSUMER.CREATE.{name}", stream_name="OTHER")
    with pytest.raises(InvalidResponseError, match="asked about stream"):
        await stream.create_consumer(ConsumerConfig())  # a server-named one
    hostile.proxy.rewrite = None
    assert (consumer.stream_name, consumer.name) == (name, "d")
    assert (await js.consumer(name, "d")).name == "d"


#: Values a Go uint64 (or a count) never holds.
NOT_UINT64: dict[str, object] = {
    "-1": -1,
    "2**64": 2**64,
    "a string": "5",
    "true": True,
    "5.0": 5.0,
}


@pytest.mark.parametrize("value", list(NOT_UINT64))
async def test_a_sequence_or_count_no_server_sends_is_refused(hostile: Hostile, value: str) -> None:
    """Stream state, consumer positions and counts, account usage: strict 0 to 2**64 - 1."""
    js = hostile.js
    bad = NOT_UINT64[value]
    name, stream = await _stream(js, "HRN")
    await js.publish(f"{name}.x", b"x")
    consumer = await stream.create_consumer(ConsumerConfig(durable_name="d"))
    calls: dict[str, tuple[str, str, Callable[[], Awaitable[object]]]] = {
        "state.messages": (f"$JS.API.STREAM.INFO.{name}", "state__messages", stream.info),
        "state.last_seq": (f"$JS.API.STREAM.INFO.{name}", "state__last_seq", stream.info),
        "state.first_seq": (f"$JS.API.STREAM.INFO.{name}", "state__first_seq", stream.info),
        "num_pending": (f"$JS.API.CONSUMER.INFO.{name}.d", "num_pending", consumer.info),
        "num_ack_pending": (f"$JS.API.CONSUMER.INFO.{name}.d", "num_ack_pending", consumer.info),
        "delivered.stream_seq": (
            f"$JS.API.CONSUMER.INFO.{name}.d",
            "delivered__stream_seq",
            consumer.info,
        ),
        "backlog num_pending": (f"$JS.API.CONSUMER.INFO.{name}.d", "num_pending", consumer.backlog),
        "account memory": ("$JS.API.INFO", "memory", js.account_info),
        "account api.level": ("$JS.API.INFO", "api__level", js.account_info),
    }
    accepted = []
    for label, (request, field, call) in calls.items():
        _patch(hostile, request, **{field: bad})
        try:
            await call()
        except InvalidResponseError:
            continue
        accepted.append(label)
    assert accepted == []
    hostile.proxy.rewrite = None  # the control: limits of -1 (no limit) as the server sends them
    info = await stream.info()
    assert (info.config.max_msgs, info.state.messages) == (-1, 1)
    assert (await js.account_info()).limits.max_memory == -1


# --------------------------------------------------------------------------- kv.get


def _direct_header(hostile: Hostile, bucket: str, name: bytes, value: bytes) -> None:
    """Direct get replies of the bucket's stream say ``value`` for header ``name``."""
    request = f"$JS.API.DIRECT.GET.KV_{bucket}".encode()
    line = re.compile(rb"(\r\n" + re.escape(name) + rb": )[^\r\n]*")

    def rewrite(frame: Frame) -> list[Frame] | None:
        if frame.hdr is None or frame.request is None or not frame.request.startswith(request):
            return None
        return [frame.replace(hdr=line.sub(lambda m: m[1] + value, frame.hdr))]

    hostile.proxy.rewrite = rewrite


@pytest.mark.parametrize("revision", ["0", "18446744073709551616", "99999999999999999999"])
async def test_a_kv_get_revision_out_of_range_is_refused(hostile: Hostile, revision: str) -> None:
    """A plain reply's ``Nats-Sequence`` 0 or past 2**64 - 1 was taken as the revision."""
    bucket, kv = await _bucket(hostile.js)
    _direct_header(hostile, bucket, b"Nats-Sequence", revision.encode())
    with pytest.raises(InvalidResponseError, match=r"Nats-Sequence|revision 0"):
        await kv.get("k1")
    hostile.proxy.rewrite = None
    assert (await kv.get("k1")).revision == 1


async def test_a_kv_get_answered_with_another_key_or_revision_is_refused(
    hostile: Hostile,
) -> None:
    bucket, kv = await _bucket(hostile.js)
    # The latest value answered with another key's message: it said "revision None is
    # not a revision of key 'k1'" (KeyNotFoundError).
    _direct_header(hostile, bucket, b"Nats-Subject", f"$KV.{bucket}.k2".encode())
    with pytest.raises(InvalidResponseError, match=r"the latest value of key 'k1'.*k2"):
        await kv.get("k1")
    # Another revision than asked for (of the same key): it was returned as it was.
    _direct_header(hostile, bucket, b"Nats-Sequence", b"3")
    with pytest.raises(InvalidResponseError, match=r"revision 1 of key 'k1'.*revision 3"):
        await kv.get("k1", revision=1)
    hostile.proxy.rewrite = None
    # The control: a revision of another key is not found (a server does answer so).
    with pytest.raises(KeyNotFoundError, match="revision 2 is not a revision of key 'k1'"):
        await kv.get("k1", revision=2)
    assert (await kv.get("k1", revision=1)).value == b"v1"

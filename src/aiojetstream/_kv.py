"""Key-value buckets over JetStream (ADR-8), with per-key TTLs and limit markers (ADR-48).

A bucket ``B`` is the stream ``KV_B`` listening on ``$KV.B.>``; key ``k`` is the
subject ``$KV.B.k``. Every revision is a message: a value (``PUT``), or a marker
written by a client (``KV-Operation: DEL`` / ``PURGE``) or by the server when a
limit removed the key's last value (``Nats-Marker-Reason: MaxAge`` / ``Purge`` /
``Remove``). Reads go through direct get; listings (keys, history, watch) through
an ordered consumer filtered on the server.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import re
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Generic, Self, TypeVar

from . import _bounds as B
from . import _codec as PC
from . import _headers as H
from ._bounds import shown
from ._cleanup import close_when_collected
from ._codec import Codec
from ._errors import (
    BucketNotFoundError,
    FeatureNotSupportedError,
    InvalidKeyError,
    InvalidOptionError,
    InvalidStreamConfigError,
    InvalidTTLError,
    JetStreamError,
    JetStreamTimeoutError,
    KeyExistsError,
    KeyNotFoundError,
    KeyValueError,
    MessageNotFoundError,
    MessageTTLDisabledError,
    NoRespondersError,
    StreamNotFoundError,
    WrongLastSequenceError,
)
from ._message import Msg
from ._models import (
    DeliverPolicy,
    DiscardPolicy,
    OrderedConsumerConfig,
    RawStreamMessage,
    StoreCompression,
    StreamConfig,
    StreamInfo,
    StreamSource,
    SubjectTransformConfig,
    coerce_duration,
    parse_utc_timestamp,
)
from ._models.kv import (
    KeyValueConfig,
    KeyValueEntry,
    KeyValueOp,
    KeyValueStatus,
    kv_entry,
    validate_bucket_name,
)
from ._stream import Stream, direct_fields
from ._validation import check_sequence, check_timeout, exact_str

if TYPE_CHECKING:
    from ._consumer import MessagesContext
    from ._context import JetStreamContext
    from ._ordered import OrderedConsumer

__all__ = [
    "KeyValue",
    "KeyWatcher",
    "entry_operation",
    "kv_stream_config",
    "validate_key",
    "validate_key_filter",
]

#: A per-key TTL the server stretches is logged here (the command line says it itself).
logger = logging.getLogger("aiojetstream.kv")

Payload = bytes | bytearray | memoryview | object
"""bytes-like, a pydantic model (JSON), or any value with ``codec=``; not ``str``."""

STREAM_PREFIX: Final = "KV_"
KV_OPERATION: Final = "KV-Operation"
OP_DEL: Final = "DEL"
OP_PURGE: Final = "PURGE"
ROLLUP_SUBJECT: Final = "sub"
#: ``purge_deletes`` keeps (as the only revision) markers younger than this (as nats.go).
DEFAULT_PURGE_DELETES_OLDER_THAN: Final = timedelta(minutes=30)
#: The longest duplicate window of a bucket (ADR-8: the TTL when shorter).
MAX_DUPLICATE_WINDOW: Final = timedelta(minutes=2)
#: The JetStream API level limit markers need (nats-server 2.11, ADR-48).
MARKERS_API_LEVEL: Final = 1
#: How many validated keys a bucket handle remembers (subject and get request).
_KEY_CACHE: Final = 4096
#: Seconds without a message after which a listing asks the server whether it is
#: already past the initial values (they may have expired before delivery).
IDLE_CHECK: Final = 1.0
#: The heartbeat of a watcher's (and listing's) pulls: a watcher whose consumer
#: died with its node is reset after 2 x this of silence (the ``messages()``
#: default, half of the 30 s expiry, took 30 s; nats.go's ordered consumers use 5 s).
WATCH_HEARTBEAT: Final = 5.0

# ADR-8: ^[-/_=\.a-zA-Z0-9]+$, no leading or trailing '.', no '..'.
_KEY_TOKEN_RE: Final = re.compile(r"[-/_=a-zA-Z0-9]+")


#: The whole header block of a direct get of a value stored without headers (a
#: plain put): nats-server's four lines and nothing else. Such a reply is a
#: ``PUT`` (no ``KV-Operation``, no ``Nats-Marker-Reason``) and parses exactly
#: as :func:`~aiojetstream._stream.direct_fields` parses it (each key once, no
#: blanks to strip); any other block (a status, user headers, a marker) takes
#: that general path.
_PLAIN_REPLY: Final = re.compile(
    rb"NATS/1\.0\r\nNats-Stream: [^\r\n]*\r\nNats-Subject: ([^\r\n]*)\r\n"
    rb"Nats-Sequence: ([0-9]{1,20})\r\n"
    rb"Nats-Time-Stamp: ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.([0-9]{1,9}))?Z)"
    rb"\r\n\r\n"
)


def _plain_reply(block: bytes, subject: bytes) -> tuple[int, datetime] | None:
    """Revision and time of a plain direct get reply on ``subject`` (None: the general path)."""
    match = _PLAIN_REPLY.fullmatch(block)
    if match is None or match[1] != subject:
        return None
    fraction = match[4]
    created = parse_utc_timestamp(
        match[3].decode("ascii"), None if fraction is None else fraction.decode("ascii")
    )
    if created is None:
        return None  # out of range: the general path words the error
    return int(match[2]), created


# --------------------------------------------------------------------------- validation


def _key_problem(key: object, wildcards: bool) -> str | None:
    if not isinstance(key, str) or not key:
        return "a key must be a non-empty string"
    tokens = key.split(".")
    for i, token in enumerate(tokens):
        if not token:
            return "a key may not start or end with '.' nor contain '..'"
        if wildcards and (token == "*" or (token == ">" and i == len(tokens) - 1)):
            continue
        if not _KEY_TOKEN_RE.fullmatch(token):
            if token in ("*", ">"):
                return (
                    "wildcards are only allowed in watch filters, as whole tokens ('>' only last)"
                )
            return "a key may only contain letters, digits and '-', '/', '_', '=', '.'"
    return None


def validate_key(key: object) -> str:
    r"""Return ``key`` if it is a valid key (ADR-8), else raise.

    Valid keys match ``^[-/_=\\.a-zA-Z0-9]+$``, do not start or end with ``.``
    and contain no ``..``.

    Raises:
        InvalidKeyError: the key is not valid (a ``ValueError``).

    """
    problem = _key_problem(key, wildcards=False)
    if problem is not None:
        raise InvalidKeyError(f"invalid key {shown(key)}: {problem}")
    assert isinstance(key, str)
    return exact_str(key)


def validate_key_filter(key: object) -> str:
    """Return ``key`` if it is a valid watch filter: tokens may also be ``*`` or a final ``>``.

    Raises:
        InvalidKeyError: the filter is not valid (a ``ValueError``).

    """
    problem = _key_problem(key, wildcards=True)
    if problem is not None:
        raise InvalidKeyError(f"invalid key filter {shown(key)}: {problem}")
    assert isinstance(key, str)
    return exact_str(key)


def entry_operation(headers: dict[str, str] | None) -> KeyValueOp:
    """The operation a stored revision records, from its headers.

    ``KV-Operation: DEL`` / ``PURGE`` are the client markers (ADR-8). Server limit
    markers (ADR-48) carry ``Nats-Marker-Reason``: ``Remove`` is a ``DEL``;
    ``MaxAge``, ``Purge`` (and any reason a newer server may add) a ``PURGE``.
    """
    if not headers:
        return KeyValueOp.PUT
    op = headers.get(KV_OPERATION)
    if op == OP_DEL:
        return KeyValueOp.DEL
    if op == OP_PURGE:
        return KeyValueOp.PURGE
    reason = headers.get(H.MARKER_REASON)
    if reason:
        return KeyValueOp.DEL if reason == "Remove" else KeyValueOp.PURGE
    return KeyValueOp.PUT


# --------------------------------------------------------------------------- bucket <-> stream


def _bucket_of(stream_name: str) -> str:
    return (
        stream_name[len(STREAM_PREFIX) :] if stream_name.startswith(STREAM_PREFIX) else stream_name
    )


def _stream_of(name: str) -> str:
    return name if name.startswith(STREAM_PREFIX) else STREAM_PREFIX + name


def _sources(config: KeyValueConfig) -> list[StreamSource] | None:
    if not config.sources:
        return None
    out: list[StreamSource] = []
    for src in config.sources:
        if src.subject_transforms:
            # Used as given: the source may be any stream.
            out.append(src)
            continue
        origin = _bucket_of(src.name)
        update: dict[str, object] = {"name": _stream_of(src.name)}
        if src.external is None or origin != config.bucket:
            update["subject_transforms"] = [
                SubjectTransformConfig(src=f"$KV.{origin}.>", dest=f"$KV.{config.bucket}.>")
            ]
        out.append(src.model_copy(update=update))
    return out


def kv_stream_config(config: KeyValueConfig) -> StreamConfig:
    """The configuration of the stream backing a bucket (ADR-8, ADR-48; as nats.go).

    Raises:
        InvalidNameError: the bucket's name, or a mirror's or source's, is invalid.
        InvalidOptionError: ``max_value_size`` is out of the server's range.
        InvalidStreamConfigError: ``limit_marker_ttl`` was set on a mirror (the
            server does not allow markers on mirrors).

    """
    if not isinstance(config, KeyValueConfig):
        raise InvalidOptionError(f"config must be a KeyValueConfig, got {type(config).__name__}")
    bucket = validate_bucket_name(config.bucket)
    # The stream's max_msg_size: a Go int32.
    B.count(config.max_value_size, "max_value_size", -1, B.MAX_INT32)
    for origin in [config.mirror, *(config.sources or [])]:
        if origin is not None and not origin.subject_transforms:
            validate_bucket_name(_bucket_of(origin.name))  # (others: any stream, as sent)
    ttl = config.ttl if config.ttl else None
    fields: dict[str, object] = {
        "name": STREAM_PREFIX + bucket,
        "description": config.description,
        "max_msgs_per_subject": config.history,
        "max_msgs": -1,
        "max_bytes": config.max_bytes,
        "max_age": ttl or timedelta(0),
        "max_msg_size": config.max_value_size,
        "max_consumers": -1,
        "storage": config.storage,
        "num_replicas": config.replicas,
        "discard": DiscardPolicy.NEW,
        "duplicate_window": min(ttl, MAX_DUPLICATE_WINDOW) if ttl else MAX_DUPLICATE_WINDOW,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "deny_purge": False,
        "allow_direct": True,
        "compression": StoreCompression.S2 if config.compression else StoreCompression.NONE,
        "placement": config.placement,
        "republish": config.republish,
        "metadata": config.metadata,
    }
    if config.limit_marker_ttl is not None:
        if config.mirror is not None:
            raise InvalidStreamConfigError(
                "limit_marker_ttl can not be set on a mirror bucket (the server refuses "
                "subject delete markers on mirrors)"
            )
        fields["allow_msg_ttl"] = True
        fields["subject_delete_marker_ttl"] = config.limit_marker_ttl
    if config.mirror is not None:
        fields["mirror"] = config.mirror.model_copy(update={"name": _stream_of(config.mirror.name)})
        fields["mirror_direct"] = True
    else:
        fields["subjects"] = [f"$KV.{bucket}.>"]
        fields["sources"] = _sources(config)
    return StreamConfig(**{k: v for k, v in fields.items() if v is not None})


async def _prepare(
    js: JetStreamContext, config: KeyValueConfig, timeout: float | None
) -> StreamConfig:
    scfg = kv_stream_config(config)
    if config.limit_marker_ttl is not None:
        level = await js.api_level(timeout=timeout)
        if level < MARKERS_API_LEVEL:
            raise FeatureNotSupportedError(
                "limit markers (limit_marker_ttl)", MARKERS_API_LEVEL, level, "2.11"
            )
    return scfg


def _for_update(existing: StreamConfig, config: KeyValueConfig, scfg: StreamConfig) -> StreamConfig:
    """Refuse disabling limit markers; keep ``allow_msg_ttl`` on if the bucket has it."""
    if existing.subject_delete_marker_ttl and config.limit_marker_ttl is None:
        raise KeyValueError(
            f"bucket {config.bucket!r} has limit markers (limit_marker_ttl="
            f"{existing.subject_delete_marker_ttl}); they can be enabled on an existing "
            "bucket but never disabled (ADR-48): keep limit_marker_ttl set"
        )
    if existing.allow_msg_ttl and not scfg.allow_msg_ttl:
        # Per-message TTLs without markers (nats-py turns them on for every bucket):
        # the server never turns allow_msg_ttl off, so keep it rather than fail.
        return scfg.model_copy(update={"allow_msg_ttl": True})
    return scfg


async def _existing(js: JetStreamContext, bucket: str, timeout: float | None) -> Stream | None:
    try:
        return await js.stream(STREAM_PREFIX + bucket, timeout=timeout)
    except StreamNotFoundError:
        return None


async def create_key_value(
    js: JetStreamContext, config: KeyValueConfig, timeout: float | None
) -> KeyValue:
    """Create a bucket (see :meth:`JetStreamContext.create_key_value`)."""
    scfg = await _prepare(js, config, timeout)
    stream = await js.create_stream(scfg, timeout=timeout)
    return KeyValue(js, stream)


async def update_key_value(
    js: JetStreamContext, config: KeyValueConfig, timeout: float | None
) -> KeyValue:
    """Update a bucket (see :meth:`JetStreamContext.update_key_value`)."""
    scfg = await _prepare(js, config, timeout)
    current = await _existing(js, config.bucket, timeout)
    if current is None:
        raise BucketNotFoundError(f"bucket {config.bucket!r} not found", config.bucket)
    scfg = _for_update(current.cached_info.config, config, scfg)
    try:
        stream = await js.update_stream(scfg, timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(f"bucket {config.bucket!r} not found", config.bucket) from exc
    return KeyValue(js, stream)


async def create_or_update_key_value(
    js: JetStreamContext, config: KeyValueConfig, timeout: float | None
) -> KeyValue:
    """Create a bucket or update it (see :meth:`JetStreamContext.create_or_update_key_value`)."""
    scfg = await _prepare(js, config, timeout)
    current = await _existing(js, config.bucket, timeout)
    if current is None:
        return KeyValue(js, await js.create_stream(scfg, timeout=timeout))
    scfg = _for_update(current.cached_info.config, config, scfg)
    return KeyValue(js, await js.update_stream(scfg, timeout=timeout))


async def key_value(js: JetStreamContext, bucket: str, timeout: float | None) -> KeyValue:
    """Bind to an existing bucket (see :meth:`JetStreamContext.key_value`)."""
    validate_bucket_name(bucket)
    stream = await _existing(js, bucket, timeout)
    if stream is None:
        raise BucketNotFoundError(f"bucket {bucket!r} not found", bucket)
    return KeyValue(js, stream)


async def delete_key_value(js: JetStreamContext, bucket: str, timeout: float | None) -> None:
    """Delete a bucket (see :meth:`JetStreamContext.delete_key_value`)."""
    validate_bucket_name(bucket)
    try:
        await js.delete_stream(STREAM_PREFIX + bucket, timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(f"bucket {bucket!r} not found", bucket) from exc


async def key_value_store_names(js: JetStreamContext, timeout: float | None) -> AsyncIterator[str]:
    """Async-iterate bucket names (see :meth:`JetStreamContext.key_value_store_names`)."""
    async for name in js.stream_names("$KV.*.>", timeout=timeout):
        if name.startswith(STREAM_PREFIX):
            yield name[len(STREAM_PREFIX) :]


#: Seconds for the look-up that tells a deleted bucket from a server that did not answer
#: a write (no responders).
BUCKET_CHECK_TIMEOUT: Final = 1.0


def bucket_gone(stream_name: str) -> BucketNotFoundError:
    """The error for a bucket whose backing stream is gone (raised from StreamNotFoundError)."""
    kind, _, bucket = stream_name.partition("_")
    what = "object store" if kind == "OBJ" else "bucket"
    return BucketNotFoundError(f"{what} {bucket!r} not found", bucket)


#: (bucket, key pattern) pairs whose stretched TTL was logged: each once (bounded).
_STRETCH_TOLD: set[tuple[str, str]] = set()
_STRETCH_TOLD_MAX: Final = 4096


def stretch_told(bucket: str, key: str) -> bool:
    """Whether a stretched TTL on ``key``'s pattern in ``bucket`` was told; marks it told."""
    told = (bucket, key_pattern(key))
    if told in _STRETCH_TOLD:
        return True
    if len(_STRETCH_TOLD) >= _STRETCH_TOLD_MAX:
        _STRETCH_TOLD.clear()
    _STRETCH_TOLD.add(told)
    return False


def key_pattern(key: str) -> str:
    """The keys a TTL warning stands for: ``lock.job7`` -> ``lock.*``, ``session`` -> ``*``."""
    head, dot, _ = key.rpartition(".")
    return f"{head}.*" if dot else "*"


# --------------------------------------------------------------------------- reading


class _Event(enum.Enum):
    CAUGHT_UP = enum.auto()  # every message present when the read started was handed out
    END = enum.auto()  # the reader was closed


class _Reader:
    """An ordered consumer over a bucket that knows when the initial values were read.

    The end of the initial values is the first message with ``num_pending == 0``,
    or right away when the consumer had nothing pending when created (ADR-8). As
    a safety net for values removed between the consumer's creation and their
    delivery, after :data:`IDLE_CHECK` seconds without a message the consumer's
    info is checked: nothing pending and nothing undelivered is the end too.

    With ``stall`` (one-shot reads: keys, history), starting and every wait
    for an initial value are bounded: :class:`JetStreamTimeoutError` after
    ``stall`` seconds without progress. A watch (``stall=None``) waits forever
    for its messages, but its start is bounded by ``start_timeout`` (as nats.go's
    Watch fails when it can not create its consumer). A failed start leaves
    nothing running (the reader is closed); a deleted bucket (its stream gone)
    raises :class:`BucketNotFoundError`, when starting or reading, and closes
    the reader.
    """

    def __init__(
        self,
        stream: Stream,
        filters: list[str],
        deliver_policy: DeliverPolicy,
        headers_only: bool,
        stall: float | None = None,
        start_timeout: float | None = None,
    ) -> None:
        self._stream = stream
        self._stall = stall
        #: The longest wait for the consumer's creation: ``stall`` for a one-shot read
        #: (the caller's timeout), ``start_timeout`` for a watch (None: unbounded).
        self._start_timeout = start_timeout if stall is None else stall
        self._config = OrderedConsumerConfig(
            filter_subjects=filters, deliver_policy=deliver_policy, headers_only=headers_only
        )
        self._oc: OrderedConsumer | None = None
        self._it: MessagesContext | None = None
        self._task: asyncio.Task[Msg] | None = None
        self._announce = False
        self._closed = False
        self.caught_up = False

    async def start(self) -> None:
        try:
            try:
                await self._start()
            except StreamNotFoundError as exc:
                # A bucket's backing stream is gone: the bucket was deleted.
                raise bucket_gone(self._stream.name) from exc
        except BaseException:
            # Nothing stays behind a failed start: the messages context (and with
            # it any retry of the consumer's creation) is stopped and closed.
            await self.aclose()
            raise

    async def _start(self) -> None:
        oc = await self._stream.ordered_consumer(self._config)
        it = oc.messages(heartbeat=WATCH_HEARTBEAT)
        self._oc, self._it = oc, it
        bound = self._start_timeout
        if bound is None:
            await it.__aenter__()
        else:
            try:
                await asyncio.wait_for(it.__aenter__(), bound)
            except TimeoutError:
                raise JetStreamTimeoutError(
                    f"could not start reading stream {self._stream.name!r} within {bound:g} s"
                ) from None
        info = oc.cached_info
        if info is not None and info.num_pending == 0:
            self.caught_up = True
            self._announce = True

    async def _idle_caught_up(self) -> bool:
        oc = self._oc
        assert oc is not None
        try:
            info = await oc.info()
        except JetStreamError:
            return False
        if info.num_pending:
            return False
        delivered = info.delivered.consumer_seq
        # Everything the consumer delivered was handed out (or skipped as handed out
        # before a reset: the ordered consumer counts those too).
        return delivered == 0 or (info.name == oc.name and oc._expected - 1 >= delivered)

    async def next(self) -> Msg | _Event:
        """The next message, ``CAUGHT_UP`` once (after the last initial message), or ``END``."""
        if self._announce:
            self._announce = False
            return _Event.CAUGHT_UP
        it = self._it
        if it is None or self._closed:
            return _Event.END
        loop = asyncio.get_running_loop()
        since = loop.time()
        while True:
            task = self._task
            if task is None:
                task = self._task = asyncio.ensure_future(it.__anext__())
            if self.caught_up:
                await asyncio.wait({task})
            else:
                await asyncio.wait({task}, timeout=IDLE_CHECK)
                if not task.done():
                    if await self._idle_caught_up():
                        self.caught_up = True
                        return _Event.CAUGHT_UP
                    if self._stall is not None and loop.time() - since >= self._stall:
                        raise JetStreamTimeoutError(
                            f"no message from stream {self._stream.name!r} for "
                            f"{self._stall:g} s while values were still pending"
                        )
                    continue
            self._task = None
            try:
                msg = task.result()
            except StopAsyncIteration:
                return _Event.END
            except StreamNotFoundError as exc:
                # The consumer was recreated (reset) after the bucket was deleted:
                # the reader ends here (iterating it again ends, it does not retry).
                await self.aclose()
                raise bucket_gone(self._stream.name) from exc
            except asyncio.CancelledError:
                if self._closed and task.cancelled():
                    return _Event.END  # closed meanwhile (aclose cancelled the read), not us
                raise
            meta = msg.metadata
            if not self.caught_up and meta.num_pending == 0:
                self.caught_up = True
                self._announce = True
            return msg

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        it, task = self._it, self._task
        self._task = None
        if it is not None:
            it.stop()
        if task is not None:
            if not task.done():
                await asyncio.wait({task}, timeout=IDLE_CHECK)
                if not task.done():
                    task.cancel()
                    await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # retrieved: no "never retrieved" warning
        if it is not None:
            await it.aclose()


# --------------------------------------------------------------------------- the handle


class KeyValue:
    r"""A handle on a key-value bucket. Get one from ``js.key_value(bucket)`` or a create call.

    Keys follow ADR-8 (``^[-/_=\\.a-zA-Z0-9]+$``, no leading or trailing ``.``,
    no ``..``); an invalid key raises :class:`InvalidKeyError` before anything
    is sent. Values are bytes.
    """

    def __init__(self, js: JetStreamContext, stream: Stream) -> None:
        cfg = stream.cached_info.config
        if (cfg.max_msgs_per_subject or 0) < 1:
            raise KeyValueError(
                f"stream {stream.name!r} is not a key-value bucket (max_msgs_per_subject < 1)"
            )
        self._js = js
        self._stream = stream
        self._bucket = _bucket_of(stream.name)
        # A mirror holds its origin's subjects; writes go to the origin.
        origin = _bucket_of(cfg.mirror.name) if cfg.mirror is not None else self._bucket
        self._prefix = f"$KV.{origin}."
        # Validated keys: their subject, the subject as bytes (what a direct get
        # reply names), and the subject and body of a direct get of their last value.
        self._keys: dict[str, tuple[str, bytes, str | None, bytes]] = {}

    @property
    def bucket(self) -> str:
        """The bucket's name."""
        return self._bucket

    @property
    def stream(self) -> Stream:
        """The backing stream (``KV_<bucket>``)."""
        return self._stream

    def __repr__(self) -> str:
        return f"<KeyValue {self._bucket}>"

    def _subject(self, key: str) -> str:
        return self._key(key)[0]

    def _key(self, key: str) -> tuple[str, bytes, str | None, bytes]:
        """A (validated) key's subject, as bytes, and the direct get of its last value.

        The get is a subject and a body for :meth:`Stream._direct_get`: the
        subject names the key and the body is empty, or (for a key too long
        for that) the stream's direct get subject and a JSON body.
        """
        known = self._keys.get(key) if type(key) is str else None
        if known is None:
            subject = self._prefix + validate_key(key)
            get_subject = self._stream._direct_last_subject(subject)
            if get_subject is None:
                body = json.dumps({"last_by_subj": subject}, separators=(",", ":")).encode()
            else:
                body = b""
            known = (subject, subject.encode(), get_subject, body)
            if len(self._keys) >= _KEY_CACHE:
                self._keys.clear()
            self._keys[key] = known
        return known

    # ------------------------------------------------------------- writing

    async def put(
        self, key: str, value: Payload, *, timeout: float | None = None, codec: Codec | None = None
    ) -> int:
        """Store ``value`` as the new revision of ``key``.

        ``value`` is bytes-like, a pydantic model (stored as JSON), or any
        value with ``codec``; read it back with ``entry.decode(Model)``.

        Returns:
            The new revision.

        Raises:
            InvalidKeyError: the key is invalid.

        """
        try:
            ack = await self._js.publish(self._subject(key), value, timeout=timeout, codec=codec)
        except NoRespondersError:
            await self._check_bucket(timeout)
            raise
        return ack.seq

    async def create(
        self,
        key: str,
        value: Payload,
        *,
        ttl: H.TTLInput | None = None,
        pedantic: bool = False,
        timeout: float | None = None,
        codec: Codec | None = None,
    ) -> int:
        """Store ``value`` only if ``key`` has no live value (absent, deleted, purged or expired).

        Args:
            key: the key.
            value: the value.
            ttl: remove the key after this long (ADR-48; seconds, ``timedelta``,
                a Go duration such as ``"1h"``, at least 1 s). The bucket needs
                limit markers (``limit_marker_ttl``); when it expires, watchers
                see a ``PURGE`` entry. With ``history`` above 1 the server
                raises a TTL under ``limit_marker_ttl`` to it: logged as a
                warning once per bucket and key pattern.
            pedantic: refuse such a TTL (``InvalidTTLError``) instead of
                letting the server stretch it.
            timeout: seconds to wait for each reply.
            codec: encodes ``value`` (as for :meth:`put`).

        Returns:
            The new revision.

        Raises:
            KeyExistsError: the key has a live value.
            MessageTTLDisabledError: ``ttl`` was given but the bucket has no limit markers.
            InvalidTTLError: ``ttl`` is under 1 s or unparsable, or (``pedantic``)
                shorter than a ``limit_marker_ttl`` the server would stretch it to.

        """
        subject = self._subject(key)
        headers = None  # a model's (or codec's) Content-Type, as put and update send
        if codec is not None or type(value) is not bytes:
            value, headers = PC.encode(value, codec, None)  # once, before anything is sent
        if ttl is not None:
            H.ttl_header_value(ttl)
            await self._require_markers("create", timeout)
            self._check_stretch(key, ttl, "key", pedantic)
        try:
            ack = await self._js.publish(
                subject,
                value,
                headers=headers,
                ttl=ttl,
                expected_last_subject_sequence=0,
                timeout=timeout,
            )
            return ack.seq
        except WrongLastSequenceError as exc:
            first = exc
        except NoRespondersError:
            await self._check_bucket(timeout)
            raise
        # The key has revisions: allowed if the last one is a delete, purge or limit marker.
        last = await self._last_or_none(subject, timeout)
        if last is None or entry_operation(last.headers) is KeyValueOp.PUT:
            raise _exists(first, f"key {key!r} exists") from None
        try:
            ack = await self._js.publish(
                subject,
                value,
                headers=headers,
                ttl=ttl,
                expected_last_subject_sequence=last.seq,
                timeout=timeout,
            )
        except WrongLastSequenceError as exc:
            raise _exists(exc, f"key {key!r} exists") from None
        except NoRespondersError:
            await self._check_bucket(timeout)
            raise
        return ack.seq

    async def update(
        self,
        key: str,
        value: Payload,
        last_revision: int,
        *,
        timeout: float | None = None,
        codec: Codec | None = None,
    ) -> int:
        """Store ``value`` only if the key's latest revision is ``last_revision``.

        Returns:
            The new revision.

        Raises:
            KeyExistsError: the latest revision is not ``last_revision`` (a
                :class:`WrongLastSequenceError`).

        """
        subject = self._subject(key)
        revision = check_sequence(last_revision, "last_revision")
        try:
            ack = await self._js.publish(
                subject,
                value,
                expected_last_subject_sequence=revision,
                timeout=timeout,
                codec=codec,
            )
        except WrongLastSequenceError as exc:
            raise _exists(exc, f"key {key!r} is not at revision {revision}") from None
        except NoRespondersError:
            await self._check_bucket(timeout)
            raise
        return ack.seq

    async def delete(
        self, key: str, *, last_revision: int | None = None, timeout: float | None = None
    ) -> None:
        """Delete ``key``, keeping its history: writes a ``DEL`` marker (``KV-Operation: DEL``).

        Args:
            key: the key.
            last_revision: only if the key's latest revision is this one.
            timeout: seconds to wait for the reply.

        Raises:
            KeyExistsError: ``last_revision`` is not the latest revision (a
                :class:`WrongLastSequenceError`).

        """
        await self._marker(key, {KV_OPERATION: OP_DEL}, None, last_revision, timeout, False)

    async def purge(
        self,
        key: str,
        *,
        ttl: H.TTLInput | None = None,
        last_revision: int | None = None,
        pedantic: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Purge ``key``: a ``PURGE`` marker replaces every revision (``Nats-Rollup: sub``).

        Args:
            key: the key.
            ttl: remove the marker itself after this long (ADR-48, needs limit
                markers on the bucket), so the key leaves no trace. With
                ``history`` above 1 the server raises a TTL under
                ``limit_marker_ttl`` to it (logged once per bucket and key pattern).
            last_revision: only if the key's latest revision is this one.
            pedantic: refuse such a TTL (``InvalidTTLError``) instead of
                letting the server stretch it.
            timeout: seconds to wait for each reply.

        Raises:
            KeyExistsError: ``last_revision`` is not the latest revision (a
                :class:`WrongLastSequenceError`).
            MessageTTLDisabledError: ``ttl`` was given but the bucket has no limit markers.
            InvalidTTLError: ``ttl`` is under 1 s or unparsable, or (``pedantic``)
                shorter than a ``limit_marker_ttl`` the server would stretch it to.

        """
        headers = {KV_OPERATION: OP_PURGE, H.ROLLUP: ROLLUP_SUBJECT}
        await self._marker(key, headers, ttl, last_revision, timeout, pedantic)

    async def _marker(
        self,
        key: str,
        headers: dict[str, str],
        ttl: H.TTLInput | None,
        last_revision: int | None,
        timeout: float | None,
        pedantic: bool,
    ) -> None:
        subject = self._subject(key)
        revision = None if last_revision is None else check_sequence(last_revision, "last_revision")
        if ttl is not None:
            H.ttl_header_value(ttl)
            await self._require_markers("purge", timeout)
            self._check_stretch(key, ttl, "the purge marker of key", pedantic)
        try:
            await self._js.publish(
                subject,
                b"",
                headers=headers,
                ttl=ttl,
                expected_last_subject_sequence=revision,
                timeout=timeout,
            )
        except WrongLastSequenceError as exc:
            raise _exists(exc, f"key {key!r} is not at revision {revision}") from None
        except NoRespondersError:
            await self._check_bucket(timeout)
            raise

    def _ttl_stretch(self, ttl: H.TTLInput) -> tuple[int, int] | None:
        """``(asked, stored)`` seconds when the server stretches ``ttl``, else None.

        With ``history`` above 1 nats-server raises a per-message TTL under the
        stream's ``subject_delete_marker_ttl`` to it (so a marker is never
        missed; seen with 2.11 to 2.15; ``history=1`` keeps the TTL). Read from
        the bucket's config as last fetched (``stream.cached_info``).

        Raises:
            InvalidTTLError: ``ttl`` is not a TTL.

        """
        value = H.ttl_header_value(ttl)
        cfg = self._stream.cached_info.config
        marker = cfg.subject_delete_marker_ttl
        if value == H.NEVER or not marker or cfg.max_msgs_per_subject == 1:
            return None
        floor = int(marker.total_seconds())  # whole seconds, as the server compares
        asked = int(value)
        return (asked, floor) if asked < floor else None

    def _check_stretch(self, key: str, ttl: H.TTLInput, what: str, pedantic: bool) -> None:
        """Refuse (``pedantic``) or log (once per bucket and key pattern) a stretched TTL.

        Raises:
            InvalidTTLError: ``pedantic`` and the server would store a longer TTL.

        """
        stretch = self._ttl_stretch(ttl)
        if stretch is None:
            return
        asked, floor = stretch
        text = (
            f"the TTL of {asked} s on {what} {key!r} becomes {floor} s: bucket "
            f"{self._bucket!r} has history={self._stream.cached_info.config.max_msgs_per_subject}"
            f" and limit_marker_ttl={floor} s, and with history above 1 the server raises a "
            f"shorter TTL to limit_marker_ttl; use a TTL of at least {floor} s (or history=1)"
        )
        if pedantic:
            raise InvalidTTLError(f"{text} (refused: pedantic=True)")
        if not stretch_told(self._bucket, key):
            logger.warning("%s (logged once for keys %r of this bucket)", text, key_pattern(key))

    async def _check_bucket(self, timeout: float | None) -> None:
        """After a write found no stream: raise BucketNotFoundError if the bucket was deleted.

        No responders may also mean the stream's server is down or mid-election:
        then (or when the look-up fails) the caller raises its NoRespondersError.
        The look-up takes at most :data:`BUCKET_CHECK_TIMEOUT` seconds (the write
        already used up to ``timeout``).
        """
        wait = self._js.timeout if timeout is None else timeout
        try:
            await self._stream.info(timeout=min(wait, BUCKET_CHECK_TIMEOUT))
        except StreamNotFoundError as exc:
            raise bucket_gone(self._stream.name) from exc
        except JetStreamError:
            return

    async def _require_markers(self, what: str, timeout: float | None) -> None:
        if self._stream.cached_info.config.subject_delete_marker_ttl:
            return
        try:
            info = await self._stream.info(timeout=timeout)  # maybe enabled since bound
        except StreamNotFoundError as exc:
            raise bucket_gone(self._stream.name) from exc
        if info.config.subject_delete_marker_ttl:
            return
        raise MessageTTLDisabledError(
            400,
            10166,
            f"a TTL on {what} needs limit markers, and bucket {self._bucket!r} has none: "
            "set limit_marker_ttl (update_key_value can enable it)",
        )

    # ------------------------------------------------------------- reading

    async def _last_or_none(self, subject: str, timeout: float | None) -> RawStreamMessage | None:
        try:
            return await self._stream.get_last_msg_for_subject(subject, timeout=timeout)
        except MessageNotFoundError:
            return None

    async def get(
        self, key: str, *, revision: int | None = None, timeout: float | None = None
    ) -> KeyValueEntry:
        """The latest value of ``key``, or the revision ``revision`` of it.

        Raises:
            KeyNotFoundError: the key has no such revision, or it is a delete,
                a purge or a limit marker (the key expired).
            BucketNotFoundError: the bucket was deleted.

        """
        subject, subject_bytes, get_subject, body = self._key(key)
        if revision is not None:
            revision = check_sequence(revision, "revision", 1)
        stream = self._stream
        try:
            if revision is None and stream._direct():
                # The hot path: a direct get of the last value, parsed without a RawStreamMessage.
                reply = await stream._direct_get(body, timeout, get_subject)
                if reply is not None:
                    data, block = reply
                    if block is not None:
                        plain = _plain_reply(block, subject_bytes)
                        if plain is not None:
                            name = subject[len(self._prefix) :]  # the key as a plain str
                            return kv_entry(self._bucket, name, data, plain[0], plain[1])
                    try:
                        found, seq, created, headers = direct_fields(data, block, subject)
                    except MessageNotFoundError:
                        raise KeyNotFoundError(f"key {key!r} not found") from None
                    return self._found(key, subject, revision, found, seq, headers, data, created)
            try:
                if revision is None:
                    msg = await stream.get_last_msg_for_subject(subject, timeout=timeout)
                else:
                    msg = await stream.get_msg(revision, timeout=timeout)
            except MessageNotFoundError:
                what = "" if revision is None else f" at revision {revision}"
                raise KeyNotFoundError(f"key {key!r} not found{what}") from None
            return self._found(
                key, subject, revision, msg.subject, msg.seq, msg.headers, msg.data, msg.time
            )
        except StreamNotFoundError as exc:
            raise bucket_gone(stream.name) from exc

    def _found(
        self,
        key: str,
        subject: str,
        revision: int | None,
        found: str,
        seq: int,
        headers: dict[str, str] | None,
        data: bytes,
        created: datetime,
    ) -> KeyValueEntry:
        """The entry of a get, or KeyNotFoundError for another key's revision or a marker."""
        if found != subject:
            raise KeyNotFoundError(f"revision {revision} is not a revision of key {key!r}")
        op = entry_operation(headers)
        if op is not KeyValueOp.PUT:
            raise KeyNotFoundError(f"key {key!r} not found ({op.value} at revision {seq})")
        return kv_entry(self._bucket, subject[len(self._prefix) :], data, seq, created, 0, op)

    def _entry(self, msg: Msg, op: KeyValueOp) -> KeyValueEntry:
        meta = msg.metadata
        return kv_entry(
            self._bucket,
            msg.subject[len(self._prefix) :],
            msg.data,
            meta.sequence.stream,
            meta.timestamp,
            meta.num_pending,
            op,
        )

    def _reader(
        self,
        filters: Sequence[str],
        policy: DeliverPolicy,
        headers_only: bool,
        stall: float | None = None,
    ) -> _Reader:
        subjects = [self._prefix + k for k in filters]
        # A watch (no stall) waits for its messages forever, for its start the context's timeout.
        return _Reader(self._stream, subjects, policy, headers_only, stall, self._js.timeout)

    def _stall(self, timeout: float | None) -> float:
        checked = check_timeout(timeout)
        return self._js.timeout if checked is None else checked

    async def keys(self, *, timeout: float | None = None) -> AsyncGenerator[str, None]:
        """Async-iterate the keys that have a live value, each once.

        Filtered on the server: a headers-only ordered consumer delivers the
        latest revision of each key; keys whose latest revision is a delete,
        purge or limit marker are skipped. An empty bucket yields nothing.
        Stopping early: ``await it.aclose()`` deletes the consumer at once.

        Args:
            timeout: the longest wait without progress (starting, or for the
                next key) before :class:`JetStreamTimeoutError`; the context's
                default when None.

        """
        stall = self._stall(timeout)
        reader = self._reader([">"], DeliverPolicy.LAST_PER_SUBJECT, True, stall)
        seen: set[str] = set()
        try:
            await reader.start()
            while True:
                item = await reader.next()
                if not isinstance(item, Msg):
                    break
                if entry_operation(item.headers) is KeyValueOp.PUT:
                    key = item.subject[len(self._prefix) :]
                    if key not in seen:
                        seen.add(key)
                        yield key
        finally:
            await reader.aclose()

    async def history(self, key: str, *, timeout: float | None = None) -> list[KeyValueEntry]:
        """Every stored revision of ``key``, oldest first, markers included.

        Args:
            key: the key.
            timeout: the longest wait without progress before
                :class:`JetStreamTimeoutError` (the context's default when None).

        Raises:
            KeyNotFoundError: the key has no revisions.

        """
        validate_key(key)
        reader = self._reader([key], DeliverPolicy.ALL, False, self._stall(timeout))
        entries: list[KeyValueEntry] = []
        try:
            await reader.start()
            while True:
                item = await reader.next()
                if not isinstance(item, Msg):
                    break
                entries.append(self._entry(item, entry_operation(item.headers)))
        finally:
            await reader.aclose()
        if not entries:
            raise KeyNotFoundError(f"key {key!r} not found")
        return entries

    def watch(
        self,
        keys: str | Sequence[str] = ">",
        *,
        include_history: bool = False,
        ignore_deletes: bool = False,
        meta_only: bool = False,
        updates_only: bool = False,
    ) -> KeyWatcher:
        """Watch keys: an async context manager and async iterator of entries.

        ``async with kv.watch("orders.>") as w: async for entry in w: ...``.
        First come the latest revision of every matching key (all revisions with
        ``include_history``), then a single ``None`` marking the end of those
        initial values (right away when there are none), then every change as
        it happens. Markers (``DEL``, ``PURGE``, limit markers) are entries too.

        Args:
            keys: a key or filter (``*`` and a final ``>`` allowed), or a list of them.
            include_history: start with every stored revision, not only the latest.
            ignore_deletes: leave out ``DEL`` and ``PURGE`` entries.
            meta_only: leave values out (entries have ``value == b""``).
            updates_only: only changes made after the watch started; no ``None``.

        Raises:
            InvalidKeyError: a filter is invalid.
            InvalidOptionError: ``updates_only`` with ``include_history`` (they
                contradict each other; nats.go refuses the pair too).

        """
        if updates_only and include_history:
            raise InvalidOptionError("updates_only and include_history exclude each other")
        if isinstance(keys, str):
            filters = [keys]
        elif isinstance(keys, Iterable) and not isinstance(keys, bytes | bytearray):
            filters = list(keys)
        else:
            raise InvalidKeyError(f"keys must be a key filter or a list of them, got {shown(keys)}")
        filters = [validate_key_filter(k) for k in filters]
        if not filters:
            filters = [">"]
        if updates_only:
            policy = DeliverPolicy.NEW
        elif include_history:
            policy = DeliverPolicy.ALL
        else:
            policy = DeliverPolicy.LAST_PER_SUBJECT
        return KeyWatcher(
            self, self._reader(filters, policy, meta_only), ignore_deletes, updates_only
        )

    async def status(self, *, timeout: float | None = None) -> KeyValueStatus:
        """The bucket's state and settings (from the backing stream's info).

        Raises:
            BucketNotFoundError: the bucket was deleted.

        """
        try:
            info: StreamInfo = await self._stream.info(timeout=timeout)
        except StreamNotFoundError as exc:
            raise bucket_gone(self._stream.name) from exc
        return KeyValueStatus.from_stream_info(info)

    async def purge_deletes(
        self,
        *,
        older_than: float | timedelta | str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Remove delete, purge and limit markers (and what they left of the keys' history).

        A key whose latest revision is a marker older than ``older_than`` is
        removed entirely; a younger marker stays as the key's only revision (so
        that watchers still see it).

        Args:
            older_than: the age threshold (seconds, a timedelta or a duration
                string such as ``"1h"``; default 30 minutes, as nats.go); 0
                removes every marker; one longer than any marker's age (up to
                ``timedelta.max``) keeps them all.
            timeout: seconds to wait for each reply, and the longest wait
                without progress while reading the markers.

        Raises:
            InvalidOptionError: ``older_than`` is not a duration (negative, not
                finite, beyond ``timedelta.max``, not a number), before anything is sent.

        """
        if (
            isinstance(older_than, int | float)
            and not isinstance(older_than, bool)
            and older_than
            > _MAX_AGE_SECONDS  # (a giant int: coerce_duration failed on its message)
        ):
            raise InvalidOptionError(
                f"invalid older_than {shown(older_than)}: beyond timedelta.max"
            )
        try:
            limit = (
                DEFAULT_PURGE_DELETES_OLDER_THAN
                if older_than is None
                else coerce_duration(older_than)
            )
        except (TypeError, ValueError) as exc:
            raise InvalidOptionError(f"invalid older_than {shown(older_than)}: {exc}") from None
        stall = self._stall(timeout)
        reader = self._reader([">"], DeliverPolicy.LAST_PER_SUBJECT, True, stall)
        markers: list[tuple[str, datetime, int]] = []
        try:
            await reader.start()
            while True:
                item = await reader.next()
                if not isinstance(item, Msg):
                    break
                if entry_operation(item.headers) is not KeyValueOp.PUT:
                    meta = item.metadata
                    markers.append((item.subject, meta.timestamp, meta.sequence.stream))
        finally:
            await reader.aclose()
        now = datetime.now(UTC)
        for subject, created, revision in markers:
            # Ages, not a cutoff (now - limit): any limit a timedelta holds is valid,
            # and one longer than every marker's age simply keeps them all.
            if limit and now - created < limit:
                await self._stream.purge(subject=subject, keep=1, timeout=timeout)
            else:
                # Up to the marker only: a put made since the listing stays.
                await self._stream.purge(subject=subject, sequence=revision + 1, timeout=timeout)


#: The longest ``older_than`` (``timedelta.max``), in seconds.
_MAX_AGE_SECONDS: Final = timedelta.max.total_seconds()


def _exists(exc: WrongLastSequenceError, what: str) -> KeyExistsError:
    return KeyExistsError(exc.code, exc.err_code, f"{what}: {exc.description}")


T = TypeVar("T")


class Watcher(Generic[T]):
    """What key-value and object-store watchers share: ``_Reader`` events to items.

    Yields what :meth:`_item` makes of each message (skipping None), and
    exactly one ``None`` after the initial values (none with ``updates_only``).
    """

    def __init__(self, reader: _Reader, ignore_deletes: bool, updates_only: bool) -> None:
        self._reader = reader
        self._ignore_deletes = ignore_deletes
        self._updates_only = updates_only
        self._started = False
        self._none_sent = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _item(self, msg: Msg) -> T | None:
        """The item of a watched message; None to skip it."""
        raise NotImplementedError

    async def _ensure_started(self) -> None:
        if not self._started:
            self._started = True
            # Dropped unfinished without ``async with``: its consumer is deleted anyway.
            self._finalizer = close_when_collected(self, self._reader.aclose)
            await self._reader.start()

    async def __aenter__(self) -> Self:
        await self._ensure_started()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T | None:
        await self._ensure_started()
        while True:
            item = await self._reader.next()
            if item is _Event.END:
                raise StopAsyncIteration
            if item is _Event.CAUGHT_UP:
                if self._updates_only or self._none_sent:
                    continue
                self._none_sent = True
                return None
            assert isinstance(item, Msg)
            made = self._item(item)
            if made is not None:
                return made

    async def aclose(self) -> None:
        """Stop watching and delete the server-side consumer (idempotent)."""
        if self._finalizer is not None:
            self._finalizer.detach()
        await self._reader.aclose()


class KeyWatcher(Watcher[KeyValueEntry]):
    """A running watch: ``async with kv.watch(...) as w: async for entry in w``.

    Yields :class:`KeyValueEntry` objects, and exactly one ``None`` after the
    initial values (none with ``updates_only``). Leaving ``async with`` (or
    :meth:`aclose`) deletes the server-side consumer.
    """

    def __init__(
        self, kv: KeyValue, reader: _Reader, ignore_deletes: bool, updates_only: bool
    ) -> None:
        super().__init__(reader, ignore_deletes, updates_only)
        self._kv = kv

    def _item(self, msg: Msg) -> KeyValueEntry | None:
        op = entry_operation(msg.headers)
        if self._ignore_deletes and op is not KeyValueOp.PUT:
            return None
        return self._kv._entry(msg, op)

"""Object stores over JetStream (ADR-20): large objects stored in chunks.

A bucket ``B`` is the stream ``OBJ_B`` listening on ``$O.B.C.>`` (chunks) and
``$O.B.M.>`` (object infos). Each put takes a new nuid: the object's data goes
in chunks (128 KiB by default) to ``$O.B.C.<nuid>`` through the asynchronous
publish window, then its info (JSON, as nats.go writes it) to
``$O.B.M.<base64url(name)>`` with ``Nats-Rollup: sub``, which replaces the
previous info, and ``Nats-Expected-Last-Subject-Sequence``, so that it replaces
only the info it read (every info write does: concurrent writers read again
and retry, see ``ObjectStore._replace_info``). A failed put purges its chunks
(but keeps them when its info may have been stored: see
``ObjectStore._store_info``); a successful one purges those of the version it
replaced. Reads stream the chunks through an ordered consumer with a
small buffer and check the chunk count, size and SHA-256 digest at the end.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import re
import secrets
import string
import tempfile
import weakref
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Final, TypeAlias

from pydantic import ValidationError

from . import _bounds as B
from . import _codec as PC
from . import _headers as H
from ._cleanup import close_when_collected
from ._codec import Codec
from ._errors import (
    APIError,
    BucketNotFoundError,
    ClusterUnavailableError,
    DigestMismatchError,
    DisconnectedError,
    DuplicateMsgIdInProcessError,
    InvalidHeaderError,
    InvalidNameError,
    InvalidOptionError,
    InvalidResponseError,
    JetStreamError,
    JetStreamNotEnabledError,
    JetStreamTimeoutError,
    MessageNotFoundError,
    NoRespondersError,
    ObjectExistsError,
    ObjectLinkError,
    ObjectNotFoundError,
    StreamNotFoundError,
    WrongLastSequenceError,
)
from ._kv import Watcher, _Reader, bucket_gone
from ._message import Msg
from ._models import (
    DeliverPolicy,
    DiscardPolicy,
    OrderedConsumerConfig,
    PubAck,
    StoreCompression,
    StreamConfig,
    from_wire,
)
from ._models.kv import validate_bucket_name
from ._models.obj import (
    ObjectInfo,
    ObjectLink,
    ObjectMeta,
    ObjectMetaOptions,
    ObjectStoreConfig,
    ObjectStoreStatus,
    normalize_headers,
)
from ._stream import Stream
from ._validation import check_timeout

if TYPE_CHECKING:
    from ._consumer import MessagesContext
    from ._context import JetStreamContext

__all__ = [
    "ObjectResult",
    "ObjectStore",
    "ObjectWatcher",
    "encode_name",
    "format_digest",
    "object_stream_config",
    "parse_digest",
    "validate_object_name",
]

logger = logging.getLogger("aiojetstream")
#: A stored info's nuid: one subject token of these characters (nats.go's nuids are base62).
_NUID: Final = re.compile(r"[A-Za-z0-9_-]+")


STREAM_PREFIX: Final = "OBJ_"
#: The chunk size of a put unless told otherwise (as nats.go, nats.js and nats-py).
DEFAULT_CHUNK_SIZE: Final = 128 * 1024
DIGEST_PREFIX: Final = "SHA-256="
#: The longest object name, in UTF-8 bytes: its base64 meta subject stays well
#: inside the server's 4 KiB protocol line.
MAX_NAME_BYTES: Final = 2048
#: Chunk bytes one put keeps awaiting their acknowledgement (at least 2 chunks).
PUT_WINDOW_BYTES: Final = 8 * 1024 * 1024
#: A failed put's cleanup tries for this many times its timeout (a reconnect included).
CLEANUP_ROUNDS: Final = 3
#: How long that cleanup waits before asking a server whose JetStream is not back yet again.
CLEANUP_RETRY_WAIT: Final = 0.25
#: The most chunks one put keeps awaiting their acknowledgement.
MAX_WINDOW: Final = 512
#: Chunk bytes one read keeps buffered (at least 2 chunks, at most 64).
GET_BUFFER_BYTES: Final = 4 * 1024 * 1024
#: Seconds a read waits for its next chunk before checking that the chunks are still there.
CHUNKS_GONE_CHECK: Final = 1.0
#: How many links a get follows before giving up (a longer chain is a loop).
MAX_LINK_DEPTH: Final = 8
#: Room for the headers of the info message when checking it fits max_payload.
_META_SLACK: Final = 256
#: The Nats-Msg-Id of a put's info is this plus the put's nuid: publishing it again is idempotent.
_PUT_MSG_ID_PREFIX: Final = "obj-put-"
#: How often a write of an info reads it again after another writer replaced it first.
_MAX_CONFLICTS: Final = 10
#: An info as stored and its stream sequence: ``(None, 0)`` when there is none.
_Entry: TypeAlias = tuple[ObjectInfo | None, int]

_NUID_ALPHABET: Final = string.digits + string.ascii_letters
_HEX_DIGEST: Final = re.compile(r"[0-9a-fA-F]{64}")
_B64_DIGEST: Final = re.compile(r"[A-Za-z0-9+/_-]{43}=?")

Data = bytes | bytearray | memoryview | IO[bytes] | AsyncIterable[bytes] | Iterable[bytes]


# --------------------------------------------------------------------------- pure helpers


def validate_object_name(name: object) -> str:
    """Return ``name`` (as an exact ``str``) if it is a valid object name, else raise.

    Any non-empty text is a valid name (it is base64url-encoded into the meta
    subject) up to 2,048 bytes of UTF-8; lone surrogates are refused.

    Raises:
        InvalidNameError: the name is empty, not a ``str``, not encodable or too long.

    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"an object name must be a non-empty string, got {B.shown(name)}")
    if type(name) is not str:
        name = str.__str__(name)  # a subclass: only the checked text goes on the wire
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise InvalidNameError(
            f"invalid object name {name!r}: it is not valid Unicode (lone surrogate)"
        ) from None
    if size > MAX_NAME_BYTES:
        raise InvalidNameError(
            f"object name of {size} bytes is longer than {MAX_NAME_BYTES} bytes (UTF-8)"
        )
    return name


def encode_name(name: str) -> str:
    """The meta subject token of an object name: base64url with padding (ADR-20)."""
    return base64.urlsafe_b64encode(name.encode()).decode()


def format_digest(sha256: bytes) -> str:
    """``SHA-256=`` and the base64url (padded) SHA-256, as nats.go writes it."""
    return DIGEST_PREFIX + base64.urlsafe_b64encode(sha256).decode()


def parse_digest(text: str) -> bytes:
    """The 32 bytes of a ``SHA-256=...`` digest as any client writes it.

    The prefix is matched without regard to case; the value may be base64url
    or standard base64, padded or not, or 64 hex digits.

    Raises:
        ValueError: not a SHA-256 digest.

    """
    if not isinstance(text, str) or text[:8].upper() != DIGEST_PREFIX:
        raise ValueError(f"not a SHA-256 digest: {text!r}")
    value = text[8:]
    if _HEX_DIGEST.fullmatch(value):
        return bytes.fromhex(value)
    if _B64_DIGEST.fullmatch(value):
        value = value.rstrip("=").replace("+", "-").replace("/", "_") + "="
        try:
            raw = base64.urlsafe_b64decode(value)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 32:
            return raw
    raise ValueError(f"not a SHA-256 digest: {text!r}")


def new_nuid() -> str:
    """A new 22-character unique id (the shape of a NATS nuid) for a put's chunk subject."""
    return "".join(secrets.choice(_NUID_ALPHABET) for _ in range(22))


def _stream_name(bucket: str) -> str:
    return STREAM_PREFIX + bucket


def object_stream_config(config: ObjectStoreConfig) -> StreamConfig:
    """The configuration of the stream backing a bucket (ADR-20, as nats.go and nats.js).

    Raises:
        InvalidNameError: the bucket name is invalid.

    """
    if not isinstance(config, ObjectStoreConfig):
        raise InvalidOptionError(
            f"config must be an ObjectStoreConfig, got {type(config).__name__}"
        )
    bucket = validate_bucket_name(config.bucket)
    fields: dict[str, object] = {
        "name": _stream_name(bucket),
        "description": config.description,
        "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        "max_age": config.ttl or None,
        "max_bytes": config.max_bytes,
        "storage": config.storage,
        "num_replicas": config.replicas,
        "discard": DiscardPolicy.NEW,
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "compression": StoreCompression.S2 if config.compression else StoreCompression.NONE,
        "placement": config.placement,
        "metadata": config.metadata,
    }
    return StreamConfig(**{k: v for k, v in fields.items() if v is not None})


def meta_body(info: ObjectInfo) -> bytes:
    """The JSON of an info as stored on the meta subject (nats.go's shape, without ``mtime``)."""
    data = info.model_dump(mode="json", exclude_none=True, exclude={"mtime"}, by_alias=True)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def parse_info(data: bytes, when: datetime, bucket: str, subject: str) -> ObjectInfo:
    """Parse a stored info; ``mtime`` is the time the server stored it.

    Raises:
        InvalidResponseError: the message is not an object info.

    """
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        raw["mtime"] = when
        raw.setdefault("bucket", bucket)
        nuid = raw.get("nuid")
        if nuid == "":
            raw["nuid"] = None
        elif nuid is not None and not (isinstance(nuid, str) and _NUID.fullmatch(nuid)):
            # It becomes part of the subjects read and purged: "$O.<bucket>.C.>" would
            # purge every object's chunks.
            raise ValueError(f"nuid {nuid!r} is not a single token of [A-Za-z0-9_-]")
        return from_wire(ObjectInfo, raw)
    except (ValueError, ValidationError) as exc:
        raise InvalidResponseError(f"invalid object info on {subject!r}: {exc}") from None


def _check_headers(headers: object) -> dict[str, list[str]] | None:
    try:
        out = normalize_headers(headers)
    except ValueError as exc:
        raise InvalidHeaderError(str(exc)) from None
    for key, values in (out or {}).items():
        for value in values:
            H.validate_header(key, value)
    return out


def _check_metadata(metadata: object) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise InvalidOptionError(
            f"metadata must be a mapping of str to str, got {B.shown(metadata)}"
        )
    return dict(metadata) or None


def _check_description(description: object) -> str | None:
    if description is not None and not isinstance(description, str):
        raise InvalidOptionError(f"description must be a str, got {B.shown(description)}")
    return description


def _is_bytes(piece: object) -> bool:
    return isinstance(piece, bytes | bytearray | memoryview)


async def _file_pieces(f: Any, size: int) -> AsyncIterator[bytes]:
    # A file in memory is read in place; a real file in a thread (reads block).
    in_memory = isinstance(f, io.BytesIO)
    while True:
        piece = f.read(size) if in_memory else await asyncio.to_thread(f.read, size)
        if piece is None:
            raise InvalidOptionError(
                "the file returned no data (non-blocking files are not supported)"
            )
        if not piece:
            return
        yield piece


async def _sync_pieces(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


def _pieces(data: object, size: int) -> AsyncIterator[Any]:
    """The pieces of ``data`` (checked now: a wrong type raises before anything is sent)."""
    if _is_bytes(data):
        return _sync_pieces((data,))
    if isinstance(data, str | io.TextIOBase):
        raise InvalidOptionError(
            "object data must be bytes, a binary file or an (async) iterable of bytes; "
            "encode text first"
        )
    if callable(getattr(data, "read", None)):
        return _file_pieces(data, size)
    if isinstance(data, AsyncIterable):
        return aiter(data)
    if isinstance(data, Iterable):
        return _sync_pieces(data)
    raise InvalidOptionError(
        "object data must be bytes, a binary file or an (async) iterable of bytes, "
        f"got {type(data).__name__}"
    )


async def rechunk(pieces: AsyncIterator[Any], size: int) -> AsyncGenerator[bytes, None]:
    """Cut a stream of byte pieces of any sizes into chunks of ``size`` bytes (the last shorter).

    Holds at most one chunk besides the piece being cut.

    Raises:
        InvalidOptionError: a piece is not bytes-like.

    """
    buf = bytearray()
    async for piece in pieces:
        if not _is_bytes(piece):
            raise InvalidOptionError(
                f"object data must be bytes, got a piece of type {type(piece).__name__}"
            )
        view = memoryview(piece).cast("B")
        pos = 0
        if buf:
            pos = size - len(buf)
            buf += view[:pos]
            if len(buf) < size:
                continue
            yield bytes(buf)
            buf.clear()
        end = len(view)
        while end - pos >= size:
            yield bytes(view[pos : pos + size])
            pos += size
        if pos < end:
            buf += view[pos:]
    if buf:
        yield bytes(buf)


# --------------------------------------------------------------------------- buckets


async def create_object_store(
    js: JetStreamContext, config: ObjectStoreConfig, timeout: float | None
) -> ObjectStore:
    """Create a bucket (see :meth:`JetStreamContext.create_object_store`)."""
    stream = await js.create_stream(object_stream_config(config), timeout=timeout)
    return ObjectStore(js, stream)


async def update_object_store(
    js: JetStreamContext, config: ObjectStoreConfig, timeout: float | None
) -> ObjectStore:
    """Update a bucket (see :meth:`JetStreamContext.update_object_store`)."""
    scfg = object_stream_config(config)
    try:
        stream = await js.update_stream(scfg, timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(
            f"object store {config.bucket!r} not found", config.bucket
        ) from exc
    return ObjectStore(js, stream)


async def object_store(js: JetStreamContext, bucket: str, timeout: float | None) -> ObjectStore:
    """Bind to an existing bucket (see :meth:`JetStreamContext.object_store`)."""
    bucket = validate_bucket_name(bucket)
    try:
        stream = await js.stream(_stream_name(bucket), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(f"object store {bucket!r} not found", bucket) from exc
    return ObjectStore(js, stream)


async def delete_object_store(js: JetStreamContext, bucket: str, timeout: float | None) -> None:
    """Delete a bucket (see :meth:`JetStreamContext.delete_object_store`)."""
    bucket = validate_bucket_name(bucket)
    try:
        await js.delete_stream(_stream_name(bucket), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(f"object store {bucket!r} not found", bucket) from exc


async def object_store_names(js: JetStreamContext, timeout: float | None) -> AsyncIterator[str]:
    """Async-iterate bucket names (see :meth:`JetStreamContext.object_store_names`)."""
    async for name in js.stream_names("$O.*.C.>", timeout=timeout):
        if name.startswith(STREAM_PREFIX):
            yield name[len(STREAM_PREFIX) :]


# --------------------------------------------------------------------------- the handle


class ObjectStore:
    """A handle on an object store bucket (ADR-20). Get one from ``js.object_store(bucket)``.

    Objects are named by any non-empty text (up to 2,048 bytes of UTF-8); their
    data is stored in chunks and read back as a stream, so an object may be far
    larger than the server's ``max_payload`` and than the memory of either side.
    Buckets and objects are interchangeable with those of nats.go, nats.js
    (``@nats-io/obj``) and nats-py. See ``docs/object-store.md``.
    """

    def __init__(self, js: JetStreamContext, stream: Stream) -> None:
        name = stream.name
        self._js = js
        self._stream = stream
        self._bucket = name[len(STREAM_PREFIX) :] if name.startswith(STREAM_PREFIX) else name
        self._meta_prefix = f"$O.{self._bucket}.M."
        self._chunk_prefix = f"$O.{self._bucket}.C."

    @property
    def bucket(self) -> str:
        """The bucket's name."""
        return self._bucket

    @property
    def stream(self) -> Stream:
        """The backing stream (``OBJ_<bucket>``)."""
        return self._stream

    def __repr__(self) -> str:
        return f"<ObjectStore {self._bucket}>"

    def _meta_subject(self, name: str) -> str:
        return self._meta_prefix + encode_name(name)

    def _chunk_subject(self, nuid: str) -> str:
        return self._chunk_prefix + nuid

    def _wait(self, timeout: float | None) -> float:
        checked = check_timeout(timeout)
        return self._js.timeout if checked is None else checked

    def _chunk_size(self, chunk_size: object) -> int:
        limit = self._js.nc.max_payload or 0
        if chunk_size is None:
            return min(DEFAULT_CHUNK_SIZE, limit) if limit else DEFAULT_CHUNK_SIZE
        size = B.count(chunk_size, "chunk_size")  # (a giant int's message raised ValueError)
        if limit and size > limit:
            raise InvalidOptionError(
                f"chunk_size {size} exceeds the server's max_payload of {limit} bytes"
            )
        return size

    # ------------------------------------------------------------- infos

    async def _entry(self, subject: str, timeout: float | None) -> _Entry:
        """The info stored on ``subject`` (deleted ones too) and its sequence, or ``(None, 0)``.

        The sequence is what a replacement of the info expects
        (``expected_last_subject_sequence``): 0 when nothing is stored there.
        """
        try:
            msg = await self._stream.get_last_msg_for_subject(subject, timeout=timeout)
        except MessageNotFoundError:
            return None, 0
        except StreamNotFoundError as exc:
            raise BucketNotFoundError(
                f"object store {self._bucket!r} not found", self._bucket
            ) from exc
        return parse_info(msg.data, msg.time, self._bucket, subject), msg.seq

    async def info(
        self, name: str, *, include_deleted: bool = False, timeout: float | None = None
    ) -> ObjectInfo:
        """The info of the object ``name`` (a link's own info: links are not followed).

        Args:
            name: the object's name.
            include_deleted: return the info of a deleted object (``deleted=True``)
                instead of raising.
            timeout: seconds to wait for the reply.

        Raises:
            ObjectNotFoundError: no such object (or it was deleted).
            InvalidNameError: the name is invalid.

        """
        name = validate_object_name(name)
        info, _ = await self._entry(self._meta_subject(name), timeout)
        if info is None or (info.deleted and not include_deleted):
            raise ObjectNotFoundError(f"object {name!r} not found in bucket {self._bucket!r}")
        return info

    async def _publish_info(
        self,
        info: ObjectInfo,
        timeout: float | None,
        *,
        expected: int,
        msg_id: str | None = None,
    ) -> PubAck:
        """Publish ``info`` over the one stored at sequence ``expected`` (0: none).

        The stream refuses it (:class:`WrongLastSequenceError`) when another
        info was stored meanwhile, so concurrent writers of one object never
        replace an info they did not read: each then purges exactly the chunks
        of the version it replaced.
        """
        return await self._js.publish(
            self._meta_subject(info.name),
            meta_body(info),
            headers={H.ROLLUP: "sub"},
            msg_id=msg_id,
            expected_last_subject_sequence=expected,
            timeout=timeout,
        )

    async def _replace_info(
        self,
        subject: str,
        timeout: float | None,
        change: Callable[[ObjectInfo | None], ObjectInfo | None],
    ) -> tuple[_Entry, _Entry]:
        """Replace the info on ``subject`` by ``change(current)``, retrying on conflicts.

        Reads the current info, publishes ``change(current)`` over it, and
        when another writer got there first, reads again and applies
        ``change`` to what it stored (at most ``_MAX_CONFLICTS`` times).
        ``change`` raises to refuse, or returns None to leave the info as it
        is. Returns the entry replaced and the one stored (``(None, 0)`` when
        nothing was published).
        """
        for attempt in range(_MAX_CONFLICTS):
            current, seq = await self._entry(subject, timeout)
            new = change(current)
            if new is None:
                return (current, seq), (None, 0)
            try:
                ack = await self._publish_info(new, timeout, expected=seq)
            except WrongLastSequenceError as exc:
                if attempt + 1 < _MAX_CONFLICTS:
                    continue
                exc.add_note(_conflict_note(subject))
                raise
            return (current, seq), (new, ack.seq)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_meta_fits(self, info: ObjectInfo) -> None:
        limit = self._js.nc.max_payload or 0
        size = len(meta_body(info)) + _META_SLACK
        if limit and size > limit:
            raise InvalidOptionError(
                f"the object's info (description, headers, metadata) takes about {size} "
                f"bytes, more than the server's max_payload of {limit}"
            )

    # ------------------------------------------------------------- put

    async def put(
        self,
        name: str,
        data: Data | object,
        *,
        description: str | None = None,
        headers: Mapping[str, str | list[str]] | None = None,
        metadata: Mapping[str, str] | None = None,
        chunk_size: int | None = None,
        timeout: float | None = None,
        codec: Codec | None = None,
    ) -> ObjectInfo:
        """Store ``data`` as the object ``name``, replacing any previous version.

        ``data`` is bytes, a binary file object (read in a thread, ``BytesIO``
        in place), or an iterable or async iterable of bytes pieces of any
        size; it is streamed: at most about 8 MiB of chunks await their
        acknowledgement at a time, whatever the object's size.

        The chunks go to a new chunk subject, then the info (size, chunk count,
        ``SHA-256=`` digest) replaces the previous one; only then are the
        previous version's chunks purged, so readers see the old or the new
        version, never a mix. If anything fails, the chunks written so far are
        purged and the error is raised (the previous version stays). Only when
        the info got no reply (a timeout or a dropped connection) is it
        published again, with the same ``Nats-Msg-Id`` (so it is stored at most
        once), for up to three times ``timeout``: once acknowledged (or found
        stored) the put succeeds. If that fails too, or another writer's info
        has replaced the previous one meanwhile, or the put is cancelled while
        its info is on its way, the error is raised with a note and the chunks
        are kept: the object shows a version that is intact.

        The info replaces only the info the put read: when another writer
        stored one meanwhile, the put reads it and replaces that one instead
        (purging its chunks), up to ten times, then raises
        :class:`WrongLastSequenceError`.

        Args:
            name: the object's name.
            data: the object's content.
            description: a human readable description.
            headers: application headers, ``{name: value or [values]}``.
            metadata: application metadata, ``{key: value}``.
            chunk_size: bytes per chunk (default 128 KiB, at most the server's
                ``max_payload``).
            timeout: seconds to wait for each acknowledgement and reply.
            codec: encode ``data`` (any value) with this :class:`Codec`. A
                pydantic model is stored as JSON without one. Either way the
                object's headers get the codec's ``Content-Type`` (a model's:
                ``application/json``) unless ``headers`` has one.

        Returns:
            The new info (``mtime`` is the client's clock; :meth:`info` has the
            server's).

        Raises:
            InvalidNameError, InvalidHeaderError, InvalidOptionError: bad input,
                before anything is sent.
            MaxBytesExceededError: the bucket is full (nothing of the object stays).
            WrongLastSequenceError: other writers kept replacing the info.
            DisconnectedError, JetStreamTimeoutError: the put did not complete.

        """
        name = validate_object_name(name)
        if codec is not None or (
            hasattr(type(data), "__pydantic_serializer__") and not isinstance(data, type)
        ):  # before the iterable check: a model iterates over its fields
            data, headers = PC.encode(data, codec, headers)
        size = self._chunk_size(chunk_size)
        info = ObjectInfo(
            name=name,
            description=_check_description(description),
            headers=_check_headers(headers),
            metadata=_check_metadata(metadata),
            options=ObjectMetaOptions(max_chunk_size=size),
            bucket=self._bucket,
            nuid=new_nuid(),
            size=0,
            chunks=0,
            digest=format_digest(hashlib.sha256().digest()),
        )
        self._check_meta_fits(info)
        pieces = _pieces(data, size)
        previous, previous_seq = await self._entry(self._meta_subject(name), timeout)
        assert info.nuid is not None
        chunk_subject = self._chunk_subject(info.nuid)
        sha = hashlib.sha256()
        total = count = 0
        window = min(MAX_WINDOW, max(2, PUT_WINDOW_BYTES // size))
        # Chunks awaiting their acknowledgement; a failed one stays (for _discard).
        pending: deque[asyncio.Future[PubAck]] = deque()
        acked = False
        js = self._js
        ack_wait = self._wait(timeout)  # _discard waits this long for chunks in flight
        try:
            async for chunk in rechunk(pieces, size):
                sha.update(chunk)
                total += len(chunk)
                count += 1
                pending.append(await js.publish_async(chunk_subject, chunk, timeout=ack_wait))
                while pending and (len(pending) >= window or pending[0].done()):
                    await _settled(pending[0])  # raises the chunk's error
                    pending.popleft()
                    acked = True
            while pending:
                await _settled(pending[0])
                pending.popleft()
                acked = True
        except (Exception, asyncio.CancelledError) as exc:
            await self._discard(chunk_subject, pending, exc, timeout, acked=acked)
            raise
        info = info.model_copy(
            update={"size": total, "chunks": count, "digest": format_digest(sha.digest())}
        )
        swap = _InfoSwap(info, self._meta_subject(name), previous, previous_seq)
        await self._store_info(swap, chunk_subject, timeout)
        replaced = swap.replaced
        if replaced is not None and not replaced.deleted and replaced.nuid not in (None, info.nuid):
            await self._purge_replaced(name, replaced.nuid, timeout)
        return info.model_copy(update={"mtime": datetime.now(UTC)})

    async def _store_info(self, swap: _InfoSwap, chunk_subject: str, timeout: float | None) -> None:
        """Publish a put's info; purge its chunks only when the info is known not stored.

        The info replaces only the one the put read (or, after a conflict, the
        one read again: see :meth:`_try_store`), and carries a
        ``Nats-Msg-Id`` unique to this put. When no reply came (a timeout or a
        dropped connection), the outcome is settled by publishing it again
        (:meth:`_settle_info`): a copy that was stored shows as the current
        info (the expected sequence no longer matches; a server that checks
        the msg id first acknowledges it as a duplicate). When it can not be
        settled (another writer's info is found in its place, or no reply
        comes), or the put was cancelled, the chunks are kept: purging them
        while the info may be (or may still become) stored would leave an
        object pointing at nothing, with the previous version gone.
        """
        try:
            await self._try_store(swap, timeout)
            return
        except (JetStreamTimeoutError, DisconnectedError, DuplicateMsgIdInProcessError) as exc:
            # No reply, or a copy of it (a PUB sent again after a reconnect) still
            # being stored: settled below.
            failure: BaseException = exc
        except (APIError, NoRespondersError, InvalidOptionError) as exc:
            # Refused by the stream (other writers kept replacing the info, too),
            # no stream listening, or refused before sending: the info was not stored.
            await self._discard(chunk_subject, (), exc, timeout)
            raise
        except (Exception, asyncio.CancelledError) as exc:
            # Cancelled, the context closed, or a reply that made no sense: the
            # info may or may not be stored, and there is no time to find out.
            exc.add_note(_kept_note(swap.info.name, chunk_subject, None))
            raise
        try:
            settled = await self._settle_info(swap, self._wait(timeout))
        except asyncio.CancelledError as exc:
            exc.add_note(_kept_note(swap.info.name, chunk_subject, None))
            raise
        if settled is None:
            return  # stored: by the first publish or by a later one
        failure.add_note(_kept_note(swap.info.name, chunk_subject, settled))
        raise failure

    async def _try_store(self, swap: _InfoSwap, timeout: float | None) -> None:
        """Publish a put's info over the current one until stored; record what it replaced.

        A conflict (another writer replaced the info since it was read) reads
        the info again: when it is this put's own (a copy published earlier
        without a reply was stored), the put is done; otherwise the info is
        published over the new one (at most ``_MAX_CONFLICTS`` times), unless
        an earlier copy got no reply: that copy may have been stored and then
        replaced (its chunks purged by the writer that replaced it), and only
        the stream's duplicate window, which a restart or its end forgets,
        would keep a copy published now from being stored again. The put
        gives up then (the caller keeps the chunks). A duplicate
        acknowledgement also means an earlier copy was stored.
        """
        info = swap.info
        for attempt in range(_MAX_CONFLICTS):
            try:
                await self._publish_info(info, timeout, expected=swap.seq, msg_id=swap.msg_id)
            except WrongLastSequenceError as exc:
                current, seq = await self._entry(swap.subject, timeout)
                if current is not None and current.nuid == info.nuid:
                    swap.replaced = swap.current  # stored by a copy without a reply
                    return
                if swap.unanswered:
                    exc.add_note(
                        f"another writer replaced the info on {swap.subject!r} while a "
                        "copy of this put's info had got no reply: not published over it"
                    )
                    raise
                if attempt + 1 >= _MAX_CONFLICTS:
                    exc.add_note(_conflict_note(swap.subject))
                    raise
                swap.current, swap.seq = current, seq
                continue
            except (JetStreamTimeoutError, DisconnectedError, DuplicateMsgIdInProcessError):
                swap.unanswered = True
                raise
            # A duplicate: a copy without a reply was stored over the same info.
            swap.replaced = swap.current
            return

    async def _settle_info(self, swap: _InfoSwap, wait: float) -> Exception | None:
        """Publish a put's info again (same msg id) until its outcome is known: None, or the error.

        Tries for at most ``CLEANUP_ROUNDS * wait`` seconds, waiting out a
        reconnect; a refusal ends it (the caller keeps the chunks either way).
        """
        try:
            await self._when_connected(lambda left: self._try_store(swap, left), wait)
        except Exception as exc:
            return exc
        return None

    async def _discard(
        self,
        chunk_subject: str,
        pending: Iterable[asyncio.Future[PubAck]],
        error: BaseException,
        timeout: float | None,
        *,
        acked: bool = True,
    ) -> None:
        """Purge a failed put's chunks once those in flight have settled.

        Skipped when nothing can have been stored: no chunk was acknowledged
        and the server refused every one sent (a sealed or full bucket).
        """
        # put awaits its chunks through a shield, so cancelling the put leaves
        # them running: each completes by its acknowledgement deadline at the
        # latest, and the purge is sent after those the server stored. (One
        # cancelled by someone else can not be waited for; a late chunk of it
        # would stay behind.)
        waiting = [f for f in pending if not f.done()]
        if waiting:
            await asyncio.wait(waiting, timeout=self._wait(timeout) + 1.0)
        refused = not acked
        for fut in pending:
            if fut.done() and not fut.cancelled():
                # Retrieved (the put reports the first error); a refusal stored nothing.
                failure = fut.exception()
                refused = refused and isinstance(failure, APIError)
            else:
                refused = False
                fut.add_done_callback(_retrieve)  # settles later: nothing to report
        if refused:
            return
        try:
            await self._purge_when_connected(chunk_subject, self._wait(timeout))
        except JetStreamError as exc:
            logger.warning(
                "could not purge the chunks of a failed put on %s: %s", chunk_subject, exc
            )
            error.add_note(
                f"the chunks written before the failure could not be purged ({exc!r}); "
                f"purge subject {chunk_subject!r} of stream {self._stream.name!r}"
            )

    async def _purge_when_connected(self, subject: str, wait: float) -> None:
        """Purge ``subject``, waiting out a reconnect: at most ``CLEANUP_ROUNDS * wait`` seconds.

        A put that failed because the connection dropped may have left chunks
        in the reconnect buffer; they are written once reconnected, and a purge
        sent after them removes them. A purge that could not be sent
        (disconnected) or got no reply is tried again (purging is idempotent).
        """
        await self._when_connected(
            lambda left: self._stream.purge(subject=subject, timeout=left), wait
        )

    async def _when_connected(
        self, attempt: Callable[[float], Awaitable[object]], wait: float
    ) -> None:
        """Run an idempotent ``attempt(timeout)`` until it succeeds, waiting out a reconnect.

        Tries for at most ``CLEANUP_ROUNDS * wait`` seconds. An attempt that
        could not be sent (disconnected) or got no reply is made again; so is
        one refused because the server's JetStream is not back yet (or is
        mid-election, or a copy of the message is still being stored). Any
        other error is raised at once, as is the last one at the deadline.
        """
        conn = self._js._conn
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLEANUP_ROUNDS * wait
        listener = _Reconnected()
        conn.add_listener(listener)
        try:
            while True:
                listener.event.clear()
                try:
                    left = deadline - loop.time()
                    await attempt(max(min(wait, left), 0.1))
                    return
                except (DisconnectedError, JetStreamTimeoutError):
                    if conn.is_closed or loop.time() >= deadline:
                        raise
                except (
                    JetStreamNotEnabledError,
                    ClusterUnavailableError,
                    DuplicateMsgIdInProcessError,
                    NoRespondersError,
                ):
                    # Reconnected before the server's JetStream is back (or mid-election).
                    if loop.time() + CLEANUP_RETRY_WAIT >= deadline:
                        raise
                    await asyncio.sleep(CLEANUP_RETRY_WAIT)
                    continue
                if not conn.is_connected:
                    try:
                        async with asyncio.timeout(deadline - loop.time()):
                            await listener.event.wait()
                    except TimeoutError:
                        raise DisconnectedError(
                            f"not reconnected within {CLEANUP_ROUNDS * wait:g} s"
                        ) from None
        finally:
            conn.remove_listener(listener)

    async def _purge_replaced(self, name: str, nuid: str | None, timeout: float | None) -> None:
        """Purge a replaced version's chunks (the put itself succeeded)."""
        assert nuid is not None
        subject = self._chunk_subject(nuid)
        try:
            await self._stream.purge(subject=subject, timeout=timeout)
        except JetStreamError as exc:
            # Not a failure of the put: the new version is stored and complete.
            logger.warning(
                "object %r was replaced but the old chunks on %s could not be purged: %s",
                name,
                subject,
                exc,
            )

    async def put_file(
        self,
        path: str | os.PathLike[str],
        name: str | None = None,
        *,
        description: str | None = None,
        headers: Mapping[str, str | list[str]] | None = None,
        metadata: Mapping[str, str] | None = None,
        chunk_size: int | None = None,
        timeout: float | None = None,
    ) -> ObjectInfo:
        """Store the file at ``path`` (streamed, see :meth:`put`).

        Args:
            path: the file to read.
            name: the object's name; the file's name (without its directory)
                when None.
            description: a human readable description.
            headers: application headers.
            metadata: application metadata.
            chunk_size: bytes per chunk.
            timeout: seconds to wait for each reply.

        Raises:
            OSError: the file can not be opened or read.

        """
        target = Path(path)
        name = validate_object_name(target.name if name is None else name)
        f = await asyncio.to_thread(target.open, "rb")
        try:
            return await self.put(
                name,
                f,
                description=description,
                headers=headers,
                metadata=metadata,
                chunk_size=chunk_size,
                timeout=timeout,
            )
        finally:
            await asyncio.to_thread(f.close)

    # ------------------------------------------------------------- get

    async def get(self, name: str, *, timeout: float | None = None) -> ObjectResult:
        """Open the object ``name`` for reading; links are followed.

        ``async with await store.get(name) as result: async for chunk in result``
        streams the data (``await result.read()`` returns all of it). The chunk
        count, size and digest are checked when the last chunk arrives: a
        mismatch raises :class:`DigestMismatchError` instead of that chunk.

        Args:
            name: the object's name (or a link's).
            timeout: seconds to wait for each reply, and the longest wait for
                the next chunk.

        Raises:
            ObjectNotFoundError: no such object, or it (or a link's target) was deleted.
            ObjectLinkError: the object is a link to a whole bucket.
            BucketNotFoundError: a link names a bucket that does not exist.

        """
        store: ObjectStore = self
        info = await self.info(name, timeout=timeout)
        depth = 0
        while info.is_link:
            link = info.link
            assert link is not None
            if not link.name:
                raise ObjectLinkError(
                    f"object {info.name!r} is a link to bucket {link.bucket!r}, not to an object"
                )
            depth += 1
            if depth > MAX_LINK_DEPTH:
                raise ObjectLinkError(f"more than {MAX_LINK_DEPTH} links from object {name!r}")
            if link.bucket != store.bucket:
                store = await object_store(self._js, link.bucket, timeout)
            info = await store.info(link.name, timeout=timeout)
        if info.size and info.digest is None:
            raise DigestMismatchError(f"object {info.name!r} has no digest to check its data by")
        if (info.size or info.chunks) and not info.nuid:
            raise InvalidResponseError(
                f"the info of object {info.name!r} has no nuid: its chunks can not be found"
            )
        return ObjectResult(store, info, timeout)

    async def get_bytes(self, name: str, *, timeout: float | None = None) -> bytes:
        """The whole content of the object ``name`` (checked; see :meth:`get`)."""
        async with await self.get(name, timeout=timeout) as result:
            return await result.read()

    async def get_file(
        self, name: str, path: str | os.PathLike[str], *, timeout: float | None = None
    ) -> ObjectInfo:
        """Write the object ``name`` to the file ``path`` (streamed, checked; see :meth:`get`).

        The data goes to a temporary file in the same directory, renamed to
        ``path`` once complete and checked: a failed download leaves ``path``
        as it was.

        Returns:
            The object's info.

        Raises:
            DigestMismatchError: the data does not match its info (no file is written).
            OSError: the file can not be written.

        """
        result = await self.get(name, timeout=timeout)
        async with result:
            await _write_file(result, Path(path))
        return result.info

    # ------------------------------------------------------------- meta, delete, links

    async def update_meta(
        self, name: str, meta: ObjectMeta, *, timeout: float | None = None
    ) -> ObjectInfo:
        """Replace the name, description, headers and metadata of the object ``name``.

        A new ``meta.name`` renames the object (the data stays where it is).
        Chunk size and links can not be changed. The change applies to the
        object's current version: when another writer replaces the info
        meanwhile, it is read again and the change applied to that.

        Raises:
            ObjectNotFoundError: no such object (or it was deleted).
            ObjectExistsError: renaming onto a live object.

        """
        if not isinstance(meta, ObjectMeta):
            raise InvalidOptionError(f"meta must be an ObjectMeta, got {type(meta).__name__}")
        name = validate_object_name(name)
        new_name = validate_object_name(meta.name)
        _check_headers(meta.headers)
        changes = {
            "name": new_name,
            "description": meta.description,
            "headers": meta.headers,
            "metadata": meta.metadata,
            "mtime": None,
        }

        def updated(current: ObjectInfo | None) -> ObjectInfo:
            if current is None or current.deleted:
                raise ObjectNotFoundError(f"object {name!r} not found in bucket {self._bucket!r}")
            new = current.model_copy(update=changes)
            self._check_meta_fits(new)
            return new

        subject = self._meta_subject(name)
        if new_name == name:
            _, (stored, _) = await self._replace_info(subject, timeout, updated)
        else:
            stored = await self._rename(subject, self._meta_subject(new_name), timeout, updated)
        assert stored is not None
        return stored.model_copy(update={"mtime": datetime.now(UTC)})

    async def _rename(
        self,
        subject: str,
        new_subject: str,
        timeout: float | None,
        updated: Callable[[ObjectInfo | None], ObjectInfo],
    ) -> ObjectInfo:
        """Move the info on ``subject`` to ``new_subject`` (which holds no live object).

        The info goes to the new name, then a deleted info with a nuid of its
        own (no chunks) replaces the old name's, expecting the version moved:
        from then on no write of the old name can purge the moved chunks.
        When another writer changed the old name in between (a put, which
        purges the chunks moved, a delete, an update), the new name's info is
        taken back (unless another writer replaced it too) and the rename
        starts again from the old name's new version. Last, the old name's
        infos up to that deleted one are purged (a put of the old name
        stored since then stays).
        """
        for attempt in range(_MAX_CONFLICTS):
            info, seq = await self._entry(subject, timeout)
            new = updated(info)
            assert info is not None

            def onto(
                existing: ObjectInfo | None, new: ObjectInfo = new, old: str = info.name
            ) -> ObjectInfo:
                if existing is not None and not existing.deleted:
                    raise ObjectExistsError(
                        f"can not rename {old!r} to {new.name!r}: that object exists"
                    )
                return new

            _, (_, new_seq) = await self._replace_info(new_subject, timeout, onto)
            try:
                moved = await self._publish_info(_deleted(info), timeout, expected=seq)
            except WrongLastSequenceError as exc:
                with contextlib.suppress(WrongLastSequenceError):
                    await self._publish_info(_deleted(new), timeout, expected=new_seq)
                if attempt + 1 >= _MAX_CONFLICTS:
                    exc.add_note(_conflict_note(subject))
                    raise
                continue
            await self._stream.purge(subject=subject, sequence=moved.seq + 1, timeout=timeout)
            return new
        raise AssertionError("unreachable")  # pragma: no cover

    async def delete(self, name: str, *, timeout: float | None = None) -> None:
        """Delete the object ``name``: a deleted info replaces its info, its chunks are purged.

        Deleting a deleted object purges its chunks again (a delete whose reply
        was lost can be tried again). Deleting a link deletes the link only.

        Raises:
            ObjectNotFoundError: no such object.

        """
        name = validate_object_name(name)

        def deleted(current: ObjectInfo | None) -> ObjectInfo | None:
            if current is None:
                raise ObjectNotFoundError(f"object {name!r} not found in bucket {self._bucket!r}")
            if current.deleted:
                return None
            return current.model_copy(
                update={"deleted": True, "size": 0, "chunks": 0, "digest": None, "mtime": None}
            )

        (replaced, _), _ = await self._replace_info(self._meta_subject(name), timeout, deleted)
        if replaced is not None and replaced.nuid:
            # Also when it was deleted already: a delete whose reply was lost, tried
            # again, purges the chunks it did not get to (purging is idempotent).
            await self._stream.purge(subject=self._chunk_subject(replaced.nuid), timeout=timeout)

    async def add_link(
        self, name: str, target_info: ObjectInfo, *, timeout: float | None = None
    ) -> ObjectInfo:
        """Store a link named ``name`` to the object ``target_info`` (of this or another bucket).

        ``get(name)`` then reads the target. A link may replace a link (or a
        deleted object), not a live object.

        Args:
            name: the link's name.
            target_info: the info of the object to link to (from ``info``, ``put`` or ``list``).
            timeout: seconds to wait for each reply.

        ``target_info`` may be old: the target's current info is read first (in
        its own bucket), and the link is refused if the target was deleted (or
        replaced by a link) since, rather than stored dangling. (nats.go checks
        only the info it is given.) A delete racing this call can still leave
        the link dangling: reading it then raises :class:`ObjectNotFoundError`.

        Raises:
            ObjectLinkError: ``target_info`` is a link or a deleted object, or
                the target is one now (deleted, never stored, its bucket gone,
                or a link); checked before the link is stored.
            ObjectExistsError: a live object (not a link) is named ``name``.

        """
        name = validate_object_name(name)
        if not isinstance(target_info, ObjectInfo):
            raise InvalidOptionError(
                f"target_info must be an ObjectInfo, got {type(target_info).__name__}"
            )
        if target_info.deleted:
            raise ObjectLinkError(f"can not link to {target_info.name!r}: it is deleted")
        if target_info.is_link:
            raise ObjectLinkError(f"can not link to {target_info.name!r}: it is a link itself")
        bucket = validate_bucket_name(target_info.bucket)
        target = validate_object_name(target_info.name)
        await self._check_target(bucket, target, timeout)
        return await self._store_link(name, ObjectLink(bucket=bucket, name=target), timeout)

    async def _check_target(self, bucket: str, name: str, timeout: float | None) -> None:
        """Refuse a link to what is not a live object now (:class:`ObjectLinkError`)."""
        what = f"can not link to {name!r} of bucket {bucket!r}"
        try:
            store = (
                self
                if bucket == self._bucket
                else await self._js.object_store(bucket, timeout=timeout)
            )
            current = await store.info(name, timeout=timeout)
        except BucketNotFoundError as exc:
            raise ObjectLinkError(f"{what}: the bucket does not exist") from exc
        except ObjectNotFoundError as exc:
            raise ObjectLinkError(f"{what}: it is deleted (or was never stored)") from exc
        if current.is_link:
            raise ObjectLinkError(f"{what}: it is a link itself now")

    async def add_bucket_link(
        self, name: str, bucket: ObjectStore | str, *, timeout: float | None = None
    ) -> ObjectInfo:
        """Store a link named ``name`` to a whole bucket (like a directory entry).

        ``get`` refuses such a link (:class:`ObjectLinkError`); read its
        ``info().link.bucket`` and open that bucket.

        The bucket must exist (it is looked up first): a link to a missing
        bucket would only ever read as :class:`BucketNotFoundError`.

        Raises:
            ObjectExistsError: a live object (not a link) is named ``name``.
            ObjectLinkError: the bucket does not exist (checked before the
                link is stored).

        """
        name = validate_object_name(name)
        target = bucket.bucket if isinstance(bucket, ObjectStore) else validate_bucket_name(bucket)
        if target != self._bucket:
            try:
                await self._js.object_store(target, timeout=timeout)
            except BucketNotFoundError as exc:
                raise ObjectLinkError(
                    f"can not link to bucket {target!r}: it does not exist"
                ) from exc
        return await self._store_link(name, ObjectLink(bucket=target), timeout)

    async def _store_link(self, name: str, link: ObjectLink, timeout: float | None) -> ObjectInfo:
        info = ObjectInfo(
            name=name,
            options=ObjectMetaOptions(link=link),
            bucket=self._bucket,
            nuid=new_nuid(),
            size=0,
            chunks=0,
        )

        def link_over(existing: ObjectInfo | None) -> ObjectInfo:
            if existing is not None and not existing.deleted and not existing.is_link:
                raise ObjectExistsError(
                    f"object {name!r} exists and is not a link: a link can not replace it"
                )
            return info

        await self._replace_info(self._meta_subject(name), timeout, link_over)
        return info.model_copy(update={"mtime": datetime.now(UTC)})

    # ------------------------------------------------------------- listing

    def _reader(self, policy: DeliverPolicy, stall: float | None) -> _Reader:
        # A watch (no stall) waits for its infos forever, for its start the context's timeout.
        subjects = [self._meta_prefix + ">"]
        return _Reader(self._stream, subjects, policy, False, stall, self._js.timeout)

    def _parse(self, msg: Msg) -> ObjectInfo:
        return parse_info(msg.data, msg.metadata.timestamp, self._bucket, msg.subject)

    def _parse_or_skip(self, msg: Msg) -> ObjectInfo | None:
        """The info of a listed or watched message; None (logged) for one that is none.

        One bad record (another client's, or junk published to the meta
        subjects) must not end a listing or a watch of the whole bucket; as
        nats.go does, it is left out. Reading that object raises instead.
        """
        try:
            return self._parse(msg)
        except InvalidResponseError as exc:
            logger.warning("object store %r: skipped an invalid entry: %s", self._bucket, exc)
            return None

    async def list(
        self, *, include_deleted: bool = False, timeout: float | None = None
    ) -> AsyncGenerator[ObjectInfo, None]:
        """Async-iterate the infos of the objects (and links) in the bucket.

        An empty bucket yields nothing. Stopping early: ``await it.aclose()``
        deletes the consumer at once.

        Args:
            include_deleted: also yield deleted objects (``deleted=True``).
            timeout: the longest wait without progress before
                :class:`JetStreamTimeoutError` (the context's default when None).

        """
        reader = self._reader(DeliverPolicy.LAST_PER_SUBJECT, self._wait(timeout))
        try:
            await reader.start()  # BucketNotFoundError once the bucket is deleted
            while True:
                item = await reader.next()
                if not isinstance(item, Msg):
                    break
                info = self._parse_or_skip(item)
                if info is not None and (include_deleted or not info.deleted):
                    yield info
        finally:
            await reader.aclose()

    def watch(
        self,
        *,
        include_history: bool = False,
        ignore_deletes: bool = False,
        updates_only: bool = False,
    ) -> ObjectWatcher:
        """Watch the bucket's infos: an async context manager and async iterator.

        ``async with store.watch() as w: async for info in w: ...``. First the
        current info of every object (every stored info with
        ``include_history``), then a single ``None`` marking the end of those,
        then every change (put, meta update, delete, link) as it happens.

        Args:
            include_history: start with every stored info, not only the latest.
            ignore_deletes: leave out deleted objects.
            updates_only: only changes made after the watch started; no ``None``.

        Raises:
            InvalidOptionError: ``updates_only`` with ``include_history``.

        """
        if updates_only and include_history:
            raise InvalidOptionError("updates_only and include_history exclude each other")
        if updates_only:
            policy = DeliverPolicy.NEW
        elif include_history:
            policy = DeliverPolicy.ALL
        else:
            policy = DeliverPolicy.LAST_PER_SUBJECT
        return ObjectWatcher(self, self._reader(policy, None), ignore_deletes, updates_only)

    # ------------------------------------------------------------- bucket

    async def seal(self, *, timeout: float | None = None) -> ObjectStoreStatus:
        """Seal the bucket: from now on it is read-only (the server refuses every write).

        Returns:
            The sealed bucket's status.

        """
        with self._bucket_errors():
            info = await self._stream.info(timeout=timeout)
            config = info.config.model_copy(update={"sealed": True})
            self._stream = await self._js.update_stream(config, timeout=timeout)
        return ObjectStoreStatus.from_stream_info(self._stream.cached_info)

    async def status(self, *, timeout: float | None = None) -> ObjectStoreStatus:
        """The bucket's state and settings (from the backing stream's info)."""
        with self._bucket_errors():
            info = await self._stream.info(timeout=timeout)
        return ObjectStoreStatus.from_stream_info(info)

    @contextlib.contextmanager
    def _bucket_errors(self) -> Iterator[None]:
        """A deleted bucket's backing stream is gone: say so as BucketNotFoundError."""
        try:
            yield
        except StreamNotFoundError as exc:
            raise BucketNotFoundError(
                f"object store {self._bucket!r} not found", self._bucket
            ) from exc


class _Reconnected:
    """A connection listener that sets ``event`` when the connection is back (or closed)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def on_disconnected(self) -> None:
        """Nothing to do: the purge is retried once reconnected."""

    def on_reconnected(self) -> None:
        """Wake the waiting purge."""
        self.event.set()

    def on_closed(self) -> None:
        """Wake the waiting purge (which then gives up)."""
        self.event.set()


class _InfoSwap:
    """A put's info on its way: the info it replaces, and whether a copy got no reply."""

    __slots__ = ("current", "info", "msg_id", "replaced", "seq", "subject", "unanswered")

    def __init__(
        self, info: ObjectInfo, subject: str, current: ObjectInfo | None, seq: int
    ) -> None:
        assert info.nuid is not None
        self.info = info
        self.subject = subject
        #: The info to replace and its sequence (what the next copy expects). Once a
        #: copy got no reply they stay as they are: every later copy expects the same.
        self.current = current
        self.seq = seq
        self.msg_id = _PUT_MSG_ID_PREFIX + info.nuid
        #: Once stored: the info it replaced (its chunks are the put's to purge).
        self.replaced: ObjectInfo | None = None
        self.unanswered = False


def _deleted(info: ObjectInfo) -> ObjectInfo:
    """A deleted info for ``info``'s name that names no chunks (a nuid of its own)."""
    return info.model_copy(
        update={
            "deleted": True,
            "nuid": new_nuid(),
            "size": 0,
            "chunks": 0,
            "digest": None,
            "mtime": None,
        }
    )


def _conflict_note(subject: str) -> str:
    return (
        f"the info on {subject!r} was replaced by other writers {_MAX_CONFLICTS} times "
        "while this write read it again; nothing of this write replaced it"
    )


def _retrieve(fut: asyncio.Future[PubAck]) -> None:
    if not fut.cancelled():
        fut.exception()


async def _settled(fut: asyncio.Future[PubAck]) -> PubAck:
    """The chunk's acknowledgement; cancelling the waiter leaves the chunk's future running."""
    if not fut.done():
        await asyncio.shield(fut)
    return fut.result()


def _kept_note(name: str, chunk_subject: str, settle_error: Exception | None) -> str:
    tried = ""
    if settle_error is not None:
        why = "; ".join([repr(settle_error), *getattr(settle_error, "__notes__", ())])
        tried = f" (publishing it again failed: {why})"
    return (
        f"object {name!r}: its info may or may not have been stored{tried}; its chunks "
        f"on {chunk_subject!r} were kept (purge them if the object does not show this put)"
    )


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        return


# --------------------------------------------------------------------------- reading


async def _write_file(result: ObjectResult, target: Path) -> None:
    """Stream ``result`` into ``target`` through a temporary file next to it.

    The temporary file is renamed to ``target`` once the data is complete and
    checked; on any failure it is removed and ``target`` is left as it was.

    Raises:
        OSError: the file can not be written (named ``target``, not the
            temporary file, when it can not even be created).

    """
    try:
        fd, tmp = await asyncio.to_thread(
            tempfile.mkstemp, prefix=f".{target.name}.", suffix=".part", dir=target.parent
        )
    except OSError as exc:
        # Named after the file asked for, not the temporary file next to it.
        raise type(exc)(exc.errno, exc.strerror, str(target)) from exc
    f = os.fdopen(fd, "wb")
    try:
        try:
            async for chunk in result:
                await asyncio.to_thread(f.write, chunk)
        finally:
            await asyncio.to_thread(f.close)
        await asyncio.to_thread(os.replace, tmp, target)
    except BaseException:
        await asyncio.to_thread(_remove, tmp)
        raise


class ObjectResult:
    """An object being read: an async iterator of its chunks, and an async context manager.

    Get one from :meth:`ObjectStore.get`. ``info`` is the object's info. The
    chunks come through an ordered consumer that keeps at most a few MiB
    buffered. When the last chunk arrives the chunk count, size and SHA-256
    digest are checked against the info: a mismatch raises
    :class:`DigestMismatchError` instead of returning that chunk (and as soon
    as more data than the info's size arrives). Leaving ``async with`` (or
    :meth:`aclose`) deletes the consumer of an unfinished read.
    """

    def __init__(self, store: ObjectStore, info: ObjectInfo, timeout: float | None) -> None:
        self.info = info
        """The object's info (the target's, for a link)."""
        self._store = store
        self._stall = store._wait(timeout)
        self._sha = hashlib.sha256()
        self._size = 0
        self._chunks = 0
        self._it: MessagesContext | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._started = False
        self._done = False

    def __repr__(self) -> str:
        return f"<ObjectResult {self._store.bucket}/{self.info.name} {self.info.size} bytes>"

    async def __aenter__(self) -> ObjectResult:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> ObjectResult:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        try:
            if not self._started:
                self._started = True
                if not await self._start():
                    await self._end()
                    raise StopAsyncIteration
            msg = await self._next()
            if msg is None:  # the read ended early (the chunks are gone)
                await self._end()
                raise StopAsyncIteration
            data = msg.data
            self._sha.update(data)
            self._size += len(data)
            self._chunks += 1
            if self._size > self.info.size:
                self._mismatch("more data than its size")
            if msg.metadata.num_pending == 0:
                await self._end()
                await self.aclose()
            return data
        except StreamNotFoundError as exc:
            await self.aclose()
            raise bucket_gone(self._store.stream.name) from exc
        except BaseException:
            await self.aclose()
            raise

    async def _start(self) -> bool:
        """Start reading the chunks; False when there is nothing to read."""
        info = self.info
        if not info.size and not info.chunks:
            return False
        assert info.nuid is not None
        store = self._store
        chunk_size = info.options.max_chunk_size if info.options is not None else None
        per_chunk = chunk_size or DEFAULT_CHUNK_SIZE
        batch = min(64, max(2, GET_BUFFER_BYTES // per_chunk))
        oc = await store.stream.ordered_consumer(
            OrderedConsumerConfig(filter_subjects=[store._chunk_subject(info.nuid)])
        )
        it = self._it = oc.messages(max_messages=batch)
        # Dropped unfinished (``async for ... : break`` without ``async with``): the
        # consumer, its subscription and its buffer are closed anyway.
        self._finalizer = close_when_collected(self, functools.partial(_close_reading, it))
        try:
            async with asyncio.timeout(self._stall):
                await it.__aenter__()
        except TimeoutError:
            raise JetStreamTimeoutError(
                f"could not start reading object {info.name!r} within {self._stall:g} s"
            ) from None
        cached = oc.cached_info
        return not (cached is not None and cached.num_pending == 0)

    async def _next(self) -> Msg | None:
        """The next chunk; None when the read ended early.

        A chunk not there within :data:`CHUNKS_GONE_CHECK` seconds: if the object's
        chunks are gone (deleted, or replaced by a new put), ObjectNotFoundError
        (DigestMismatchError when its info still names them: the bucket lost
        them); otherwise it waits out the rest of the stall timeout.
        """
        it = self._it
        assert it is not None
        loop = asyncio.get_running_loop()
        end = loop.time() + self._stall
        # A task, not a timeout around the iterator: the wait goes on after the check.
        waiting = asyncio.ensure_future(anext(it, None))
        try:
            first = min(self._stall, CHUNKS_GONE_CHECK)
            done, _ = await asyncio.wait((waiting,), timeout=first)
            if not done and end - loop.time() > 0:
                if await self._chunks_gone(end - loop.time()):
                    self._verify()  # raises unless every chunk was read
                    return None
                done, _ = await asyncio.wait((waiting,), timeout=max(end - loop.time(), 0))
            if not done:
                raise JetStreamTimeoutError(
                    f"no chunk of object {self.info.name!r} for {self._stall:g} s "
                    f"({self._chunks} of {self.info.chunks} read)"
                )
            return waiting.result()
        finally:
            if not waiting.done():
                waiting.cancel()

    async def _chunks_gone(self, timeout: float) -> bool:
        """Whether the object's chunks are no longer stored although its info names them.

        Raises ObjectNotFoundError when they are gone because the object was
        deleted or replaced (its info changed: delete and put, ours and other
        clients', write the new info before purging the old chunks). True: gone
        with the info unchanged, the bucket lost them (corrupt). False: they are
        there, or that can not be told now.

        Asks the stream leader (stream info, per-subject counts; a plain get of
        the info): a direct get may be answered by a lagging replica or mirror.
        """
        store, info = self._store, self.info
        assert info.nuid is not None
        subject = store._chunk_subject(info.nuid)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            now = await store.stream.info(subjects_filter=subject, timeout=timeout)
        except JetStreamTimeoutError:
            return False  # cannot tell now: the chunk may still come
        if (now.state.subjects or {}).get(subject):
            return False
        meta_subject = store._meta_subject(info.name)
        try:
            msg = await store.stream._api_get(
                {"last_by_subj": meta_subject}, max(deadline - loop.time(), 0.1)
            )
            current = parse_info(msg.data, msg.time, store.bucket, meta_subject)
        except MessageNotFoundError:
            current = None  # renamed, then deleted or replaced under its new name
        except (JetStreamTimeoutError, InvalidResponseError):
            current = None  # the chunks are gone either way: it can not be read
        if current is not None and not current.deleted and current.nuid == info.nuid:
            return True
        raise ObjectNotFoundError(
            f"object {info.name!r} in bucket {store.bucket!r} was deleted or replaced "
            f"while it was read ({self._chunks} of {info.chunks} chunks read)"
        )

    async def _end(self) -> None:
        """The read is at its end: check it against the info.

        A read that found less than the info says (nothing at all, when the
        object was deleted or replaced between ``get`` and the first read) is
        ObjectNotFoundError when the object's chunks are gone because the
        object was deleted or replaced, as in the middle of a read (not corrupt).
        """
        info = self.info
        if self._size < info.size or self._chunks < info.chunks:
            self._done = True
            await self._chunks_gone(self._stall)
        self._verify()

    def _mismatch(self, what: str) -> None:
        info = self.info
        raise DigestMismatchError(
            f"object {info.name!r} in bucket {self._store.bucket!r} is corrupt: {what} "
            f"(read {self._size} bytes in {self._chunks} chunks; its info says "
            f"{info.size} bytes in {info.chunks} chunks, digest {info.digest})"
        )

    def _verify(self) -> None:
        """Check what was read against the info (raise DigestMismatchError)."""
        self._done = True
        info = self.info
        if self._size != info.size or self._chunks != info.chunks:
            self._mismatch("its size or chunk count differs")
        if info.digest is None and not info.size:
            return  # an empty object stored without a digest
        try:
            expected = parse_digest(info.digest or "")
        except ValueError:
            self._mismatch("its digest is not a SHA-256 digest")
        if self._sha.digest() != expected:
            self._mismatch("its SHA-256 digest differs")

    async def read(self) -> bytes:
        """The rest of the object's data (checked; see the class)."""
        parts = [chunk async for chunk in self]
        return b"".join(parts)

    async def aclose(self) -> None:
        """Stop reading and delete the consumer (idempotent)."""
        self._done = True
        it, self._it = self._it, None
        if self._finalizer is not None:
            self._finalizer.detach()
        if it is not None:
            it.stop()
            await it.aclose()


async def _close_reading(it: MessagesContext) -> None:
    """Stop a chunk reader and delete its consumer."""
    it.stop()
    await it.aclose()


# --------------------------------------------------------------------------- watching


class ObjectWatcher(Watcher[ObjectInfo]):
    """A running watch: ``async with store.watch() as w: async for info in w``.

    Yields :class:`ObjectInfo` objects, and exactly one ``None`` after the
    initial infos (none with ``updates_only``). Leaving ``async with`` (or
    :meth:`aclose`) deletes the server-side consumer.
    """

    def __init__(
        self, store: ObjectStore, reader: _Reader, ignore_deletes: bool, updates_only: bool
    ) -> None:
        super().__init__(reader, ignore_deletes, updates_only)
        self._store = store

    def _item(self, msg: Msg) -> ObjectInfo | None:
        info = self._store._parse_or_skip(msg)
        if info is None or (self._ignore_deletes and info.deleted):
            return None
        return info

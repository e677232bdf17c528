"""The key-value bucket handle (:class:`KeyValue`) and its watcher (:class:`KeyWatcher`).

Writes go through the context's publish (with the expected-revision headers of
ADR-8), reads through direct get, listings and watches through the shared
:class:`~aiojetstream._watch.Reader`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncGenerator, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from .. import _codec as PC
from .. import _headers as H
from .._api import DEFAULT_API_PREFIX
from .._bounds import shown
from .._codec import Codec
from .._errors import (
    AuthorizationError,
    InvalidKeyError,
    InvalidOptionError,
    InvalidResponseError,
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
from .._message import Msg
from .._models import (
    DeliverPolicy,
    RawStreamMessage,
    StreamConfig,
    StreamInfo,
    coerce_duration,
)
from .._models.kv import (
    KeyValueEntry,
    KeyValueOp,
    KeyValueStatus,
    kv_entry,
)
from .._stream import Stream, direct_fields
from .._validation import check_sequence, check_timeout
from .._watch import Reader, Watcher, bucket_gone
from .keys import (
    DEFAULT_PURGE_DELETES_OLDER_THAN,
    KV_OPERATION,
    OP_DEL,
    OP_PURGE,
    ROLLUP_SUBJECT,
    bucket_of,
    entry_operation,
    key_of,
    key_pattern,
    kv_namespaces,
    plain_reply,
    stretch_told,
    validate_key,
    validate_key_filter,
    watch_filters,
)

if TYPE_CHECKING:
    from .._store_context import StoreContext

#: A per-key TTL the server stretches is logged here (the command line says it itself).
logger = logging.getLogger("aiojetstream.kv")

Payload = bytes | bytearray | memoryview | object
"""bytes-like, a pydantic model (JSON), or any value with ``codec=``; not ``str``."""
#: How many validated keys a bucket handle remembers (subject and get request).
_KEY_CACHE: Final = 4096

#: Seconds for the look-up that tells a deleted bucket from a server that did not answer
#: a write (no responders).
BUCKET_CHECK_TIMEOUT: Final = 1.0


class KeyValue:
    r"""A handle on a key-value bucket. Get one from ``js.key_value(bucket)`` or a create call.

    Keys follow ADR-8 (``^[-/_=\\.a-zA-Z0-9]+$``, no leading or trailing ``.``,
    no ``..``); an invalid key raises :class:`InvalidKeyError` before anything
    is sent. Values are bytes.
    """

    def __init__(
        self,
        js: StoreContext,
        stream: Stream,
        *,
        origins: Sequence[StreamConfig] = (),
        writes_to: Stream | None = None,
    ) -> None:
        cfg = stream.cached_info.config
        if (cfg.max_msgs_per_subject or 0) < 1:
            raise KeyValueError(
                f"stream {stream.name!r} is not a key-value bucket (max_msgs_per_subject < 1)"
            )
        self._js = js
        self._stream = stream
        #: A mirror's handle: the origin stream its writes go to, when it was looked
        #: up (same account and domain); None for a bucket that is no mirror.
        self._writes_to = writes_to
        self._bucket = bucket_of(stream.name)
        # A mirror holds its origin's subjects (renamed by its subject transforms);
        # writes go to the origin, through the context's API prefix when it is not
        # the default (a domain, an account import: ADR-19; the server maps
        # "<prefix>.$KV.<bucket>.<key>" back), or a cross-domain mirror's own.
        read, write, api = kv_namespaces([cfg, *origins])
        if api is None and stream._api.prefix != DEFAULT_API_PREFIX:
            api = stream._api.prefix
        #: Where keys are read (and parsed out of subjects): ``$KV.<namespace>.``.
        self._prefix = f"$KV.{read}."
        #: Where keys are written: ``[<api prefix>.]$KV.<origin>.``.
        self._put_prefix = f"$KV.{write}." if api is None else f"{api}.$KV.{write}."
        #: The namespace of the keys in the stream writes go to (``$KV.<write>.<key>``).
        self._write_namespace = write
        # Validated keys: their subject, the subject as bytes (what a direct get
        # reply names), the subject and body of a direct get of their last value,
        # and the subject a write publishes to.
        self._keys: dict[str, tuple[str, bytes, str | None, bytes, str]] = {}

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

    def _written(self) -> Stream | None:
        """The stream this handle's writes are stored in, if known here.

        The bucket's own stream, or a mirror's origin that was looked up (in the
        same account and domain); None for a mirror whose origin was not (a
        cross-domain mirror, or an origin this user may not look up): its
        server then decides what it takes.
        """
        if self._writes_to is not None:
            return self._writes_to
        return None if self._stream.cached_info.config.mirror is not None else self._stream

    def _subject(self, key: str) -> str:
        """The subject a write of ``key`` publishes to."""
        return self._key(key)[4]

    def _key(self, key: str) -> tuple[str, bytes, str | None, bytes, str]:
        """A (validated) key's subject, as bytes, the direct get of its last value, its writes'.

        The get is a subject and a body for :meth:`Stream._direct_get`: the
        subject names the key and the body is empty, or (for a key too long
        for that) the stream's direct get subject and a JSON body. The subject
        of writes is the key's in the origin, with the API prefix if any.
        """
        known = self._keys.get(key) if type(key) is str else None
        if known is None:
            valid = validate_key(key)
            subject = self._prefix + valid
            get_subject = self._stream._direct_last_subject(subject)
            if get_subject is None:
                body = json.dumps({"last_by_subj": subject}, separators=(",", ":")).encode()
            else:
                body = b""
            put_subject = self._put_prefix + valid
            known = (subject, subject.encode(), get_subject, body, put_subject)
            if len(self._keys) >= _KEY_CACHE:
                self._keys.clear()
            self._keys[key] = known
        return known

    # ------------------------------------------------------------- writing

    async def put(
        self,
        key: str,
        value: Payload,
        *,
        timeout: float | timedelta | str | None = None,
        codec: Codec | None = None,
    ) -> int:
        """Store ``value`` as the new revision of ``key``.

        ``value`` is bytes-like, a pydantic model (stored as JSON), or any
        value with ``codec``; read it back with ``entry.decode(Model)``.

        Returns:
            The new revision.

        Raises:
            InvalidKeyError: the key is invalid.
            BucketNotFoundError: the bucket was deleted.

        """
        timeout = check_timeout(timeout)
        if codec is None and isinstance(value, str):
            raise _text_refused("kv.put(key, value.encode())")
        try:
            ack = await self._js.publish(self._subject(key), value, timeout=timeout, codec=codec)
        except NoRespondersError:
            await self._check_bucket(timeout)
            raise
        except JetStreamTimeoutError:
            # (Through a domain a deleted bucket is a timeout: a leaf sends no 503.)
            await self._check_bucket(timeout, timed_out=True)
            raise
        return ack.seq

    async def create(
        self,
        key: str,
        value: Payload,
        *,
        ttl: H.TTLInput | None = None,
        pedantic: bool = False,
        timeout: float | timedelta | str | None = None,
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
            timeout: how long to wait for each reply (seconds or a duration).
            codec: encodes ``value`` (as for :meth:`put`).

        Returns:
            The new revision.

        Raises:
            KeyExistsError: the key has a live value.
            MessageTTLDisabledError: ``ttl`` was given but the bucket has no limit markers.
            InvalidTTLError: ``ttl`` is under 1 s or unparsable, or (``pedantic``)
                shorter than a ``limit_marker_ttl`` the server would stretch it to.

        """
        timeout = check_timeout(timeout)
        subject, _, _, _, put_subject = self._key(key)
        headers = None  # a model's (or codec's) Content-Type, as put and update send
        if codec is None and isinstance(value, str):
            raise _text_refused("kv.create(key, value.encode())")
        if codec is not None or type(value) is not bytes:
            value, headers = PC.encode(value, codec, None)  # once, before anything is sent
        if ttl is not None:
            H.ttl_header_value(ttl)
            await self._require_markers("create", timeout)
            self._check_stretch(key, ttl, "key", pedantic)
        try:
            ack = await self._js.publish(
                put_subject,
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
        if self._writes_to is not None:
            # A mirror's handle: the origin refused; its leader holds what it compared
            # (the mirror may lag, or its filter leave the key out).
            origin_subject = f"$KV.{self._write_namespace}.{key}"
            last = await self._last_or_none(origin_subject, timeout, self._writes_to)
        else:
            last = await self._last_or_none(subject, timeout)
            refused_at = _wrong_last(first) if self._stream.cached_info.config.mirror else None
            if refused_at is not None and (last is None or last.seq < refused_at):
                # (A cross-domain mirror: the origin refused, the mirror may lag.)
                last = await self._last_reaching(subject, refused_at, timeout, last)
        if last is None or entry_operation(last.headers) is KeyValueOp.PUT:
            raise _exists(first, f"key {key!r} exists") from None
        try:
            ack = await self._js.publish(
                put_subject,
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
        timeout: float | timedelta | str | None = None,
        codec: Codec | None = None,
    ) -> int:
        """Store ``value`` only if the key's latest revision is ``last_revision``.

        Returns:
            The new revision.

        Raises:
            KeyExistsError: the latest revision is not ``last_revision`` (a
                :class:`WrongLastSequenceError`).

        """
        timeout = check_timeout(timeout)
        if codec is None and isinstance(value, str):
            raise _text_refused("kv.update(key, value.encode(), last_revision)")
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
        self,
        key: str,
        *,
        last_revision: int | None = None,
        timeout: float | timedelta | str | None = None,
    ) -> None:
        """Delete ``key``, keeping its history: writes a ``DEL`` marker (``KV-Operation: DEL``).

        Args:
            key: the key.
            last_revision: only if the key's latest revision is this one.
            timeout: how long to wait for the reply (seconds or a duration).

        Raises:
            KeyExistsError: ``last_revision`` is not the latest revision (a
                :class:`WrongLastSequenceError`).

        """
        timeout = check_timeout(timeout)
        await self._marker(key, {KV_OPERATION: OP_DEL}, None, last_revision, timeout, False)

    async def purge(
        self,
        key: str,
        *,
        ttl: H.TTLInput | None = None,
        last_revision: int | None = None,
        pedantic: bool = False,
        timeout: float | timedelta | str | None = None,
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
            timeout: how long to wait for each reply (seconds or a duration).

        Raises:
            KeyExistsError: ``last_revision`` is not the latest revision (a
                :class:`WrongLastSequenceError`).
            MessageTTLDisabledError: ``ttl`` was given but the bucket has no limit markers.
            InvalidTTLError: ``ttl`` is under 1 s or unparsable, or (``pedantic``)
                shorter than a ``limit_marker_ttl`` the server would stretch it to.

        """
        timeout = check_timeout(timeout)
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

    def _ttl_stretch(self, ttl: H.TTLInput) -> tuple[int, int, int] | None:
        """``(asked, stored, history)`` when the server stretches ``ttl``, else None.

        With ``history`` above 1 nats-server raises a per-message TTL under the
        stream's ``subject_delete_marker_ttl`` to it (so a marker is never
        missed; seen with 2.11 to 2.15; ``history=1`` keeps the TTL). Read from
        the config, as last fetched, of the stream the write is stored in (a
        mirror's origin; not known here: None).

        Raises:
            InvalidTTLError: ``ttl`` is not a TTL.

        """
        value = H.ttl_header_value(ttl)
        written = self._written()
        if written is None:
            return None
        cfg = written.cached_info.config
        marker = cfg.subject_delete_marker_ttl
        if value == H.NEVER or not marker or cfg.max_msgs_per_subject == 1:
            return None
        floor = int(marker.total_seconds())  # whole seconds, as the server compares
        asked = int(value)
        return (asked, floor, cfg.max_msgs_per_subject or 0) if asked < floor else None

    def _check_stretch(self, key: str, ttl: H.TTLInput, what: str, pedantic: bool) -> None:
        """Refuse (``pedantic``) or log (once per bucket and key pattern) a stretched TTL.

        Raises:
            InvalidTTLError: ``pedantic`` and the server would store a longer TTL.

        """
        stretch = self._ttl_stretch(ttl)
        if stretch is None:
            return
        asked, floor, history = stretch
        text = (
            f"the TTL of {asked} s on {what} {key!r} becomes {floor} s: bucket "
            f"{self._bucket!r} has history={history}"
            f" and limit_marker_ttl={floor} s, and with history above 1 the server raises a "
            f"shorter TTL to limit_marker_ttl; use a TTL of at least {floor} s (or history=1)"
        )
        if pedantic:
            raise InvalidTTLError(f"{text} (refused: pedantic=True)")
        if not stretch_told(self._bucket, key):
            logger.warning("%s (logged once for keys %r of this bucket)", text, key_pattern(key))

    async def _check_bucket(self, timeout: float | None, *, timed_out: bool = False) -> None:
        """After a write found no stream: raise BucketNotFoundError if the bucket was deleted.

        No responders (or, through a domain, a timeout: a leaf node drops a
        request nobody answers) may also mean the stream's server is down or
        mid-election: then (or when the look-up fails) the caller raises its
        error.
        The look-up takes at most :data:`BUCKET_CHECK_TIMEOUT` seconds (the write
        already used up to ``timeout``). After a timeout (``timed_out``) it is
        made only through a domain or an API prefix: without one a deleted bucket
        is no responders, and the look-up would only make the caller's timeout
        later (by up to a second, on a frozen server).
        """
        if timed_out and self._stream._api.prefix == DEFAULT_API_PREFIX:
            return
        wait = self._js.timeout if timeout is None else timeout
        try:
            await self._stream.info(timeout=min(wait, BUCKET_CHECK_TIMEOUT))
        except StreamNotFoundError as exc:
            raise bucket_gone(self._stream.name) from exc
        except JetStreamError:
            return

    async def _require_markers(self, what: str, timeout: float | None) -> None:
        written = self._written()
        if written is None:
            return  # a mirror's origin not known here: its server decides (10166)
        if written.cached_info.config.subject_delete_marker_ttl:
            return
        try:
            info = await written.info(timeout=timeout)  # maybe enabled since bound
        except StreamNotFoundError as exc:
            raise bucket_gone(written.name) from exc
        if info.config.subject_delete_marker_ttl:
            return
        raise MessageTTLDisabledError(
            400,
            10166,
            f"a TTL on {what} needs limit markers, and bucket "
            f"{bucket_of(written.name)!r} has none: "
            "set limit_marker_ttl (update_key_value can enable it); this client refuses "
            "a key TTL without markers (ADR-48: its expiry would reach no watcher)",
        )

    # ------------------------------------------------------------- reading

    async def _last_or_none(
        self, subject: str, timeout: float | None, stream: Stream | None = None
    ) -> RawStreamMessage | None:
        """The last message on ``subject`` as the leader of ``stream`` (the bucket's) holds it.

        A plain (not direct) get, which only the leader answers: this read
        follows the leader's refusal of a write (wrong last sequence), and a
        direct get is answered by the nearest replica, which may not have
        applied the last acknowledged write yet (a delete: create then raised
        ``KeyExistsError`` from a follower).
        """
        stream = self._stream if stream is None else stream
        try:
            return await stream._api_get({"last_by_subj": subject}, timeout)
        except MessageNotFoundError:
            return None
        except AuthorizationError:
            # A user allowed direct gets but not STREAM.MSG.GET (as nats.go's KV needs):
            # the direct get, as before, with its replica's lag.
            try:
                return await stream.get_last_msg_for_subject(subject, timeout=timeout)
            except MessageNotFoundError:
                return None

    async def _last_reaching(
        self,
        subject: str,
        seq: int,
        timeout: float | None,
        last: RawStreamMessage | None,
    ) -> RawStreamMessage | None:
        """The last message on ``subject``, read again until it is at least ``seq``.

        A mirror bucket's handle writes to the origin and reads its own stream,
        whose leader applies the origin's writes a moment later: the origin
        refused a create at revision ``seq`` (a delete) while the mirror still
        held the value before it, and the create raised ``KeyExistsError`` for
        a free key (67 of 300 times). Read again, 10 ms apart and doubling, for
        at most the call's timeout; still behind, the last read is returned.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self._js.timeout if timeout is None else timeout)
        pause = 0.01
        while (last is None or last.seq < seq) and loop.time() + pause < deadline:
            await asyncio.sleep(pause)  # a bounded wait for the mirror, not a sync
            pause = min(pause * 2, 0.25)
            last = await self._last_or_none(subject, timeout)
        return last

    async def get(
        self,
        key: str,
        *,
        revision: int | None = None,
        timeout: float | timedelta | str | None = None,
    ) -> KeyValueEntry:
        """The latest value of ``key``, or the revision ``revision`` of it.

        Raises:
            KeyNotFoundError: the key has no such revision, or it is a delete,
                a purge or a limit marker (the key expired).
            BucketNotFoundError: the bucket was deleted.

        """
        timeout = check_timeout(timeout)
        subject, subject_bytes, get_subject, body, _ = self._key(key)
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
                        plain = plain_reply(block, subject_bytes)
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
        except JetStreamTimeoutError:
            # (Through a domain a deleted bucket is a timeout: a leaf sends no 503.)
            await self._check_bucket(timeout, timed_out=True)
            raise

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
        """The entry of a get, or KeyNotFoundError for another key's revision or a marker.

        Raises:
            InvalidResponseError: a reply no server sends: another key's message for
                the latest value, another revision than asked for, revision 0.

        """
        if revision is None and found != subject:
            raise InvalidResponseError(
                f"asked for the latest value of key {key!r}, the server answered "
                f"with a message on {shown(found)}"
            )
        if not (seq >= 1 if revision is None else seq == revision):
            what = "the latest value" if revision is None else f"revision {revision}"
            raise InvalidResponseError(
                f"asked for {what} of key {key!r}, the server answered with revision {seq}"
            )
        if found != subject:
            raise KeyNotFoundError(f"revision {revision} is not a revision of key {key!r}")
        op = entry_operation(headers)
        if op is not KeyValueOp.PUT:
            raise KeyNotFoundError(f"key {key!r} not found ({op.value} at revision {seq})")
        return kv_entry(self._bucket, subject[len(self._prefix) :], data, seq, created, 0, op)

    def _entry(self, msg: Msg, op: KeyValueOp) -> KeyValueEntry:
        """The entry of a delivered message (InvalidResponseError: its subject is no key)."""
        meta = msg.metadata
        return kv_entry(
            self._bucket,
            key_of(msg.subject, self._prefix, self._bucket),
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
    ) -> Reader:
        subjects = [self._prefix + k for k in filters]
        # A watch (no stall) waits for its messages forever, for its start the context's timeout.
        return Reader(self._stream, subjects, policy, headers_only, stall, self._js.timeout)

    def _stall(self, timeout: float | None) -> float:
        checked = check_timeout(timeout)
        return self._js.timeout if checked is None else checked

    async def keys(
        self, *, timeout: float | timedelta | str | None = None
    ) -> AsyncGenerator[str, None]:
        """Async-iterate the keys that have a live value, each once.

        Filtered on the server: a headers-only ordered consumer delivers the
        latest revision of each key; keys whose latest revision is a delete,
        purge or limit marker are skipped. The keys are yielded once the read
        has ended (a key's marker may come after an older value, from a
        replica catching up). An empty bucket yields nothing.

        Args:
            timeout: the longest wait without progress (starting, or for the
                next message) before :class:`JetStreamTimeoutError`; the context's
                default when None.

        Raises:
            InvalidResponseError: a message delivered on a subject that is not
                one of the bucket's keys (no nats-server sends one).

        """
        timeout = check_timeout(timeout)
        stall = self._stall(timeout)
        reader = self._reader([">"], DeliverPolicy.LAST_PER_SUBJECT, True, stall)
        # Whether each key's latest revision read is a value, yielded once the read
        # ends: a consumer on a replica catching up starts from that replica's
        # (older) last revisions, and a key's marker may come after its old value
        # (a key deleted before the call was listed: 50 of 350 keys). In order of
        # each key's first revision read.
        live: dict[str, bool] = {}
        try:
            await reader.start()
            while True:
                item = await reader.next()
                if not isinstance(item, Msg):
                    break
                key = key_of(item.subject, self._prefix, self._bucket)
                live[key] = entry_operation(item.headers) is KeyValueOp.PUT
        finally:
            await reader.aclose()
        for key, is_live in live.items():
            if is_live:
                yield key

    async def history(
        self, key: str, *, timeout: float | timedelta | str | None = None
    ) -> list[KeyValueEntry]:
        """Every stored revision of ``key``, oldest first, markers included.

        Args:
            key: the key.
            timeout: the longest wait without progress before
                :class:`JetStreamTimeoutError` (the context's default when None).

        Raises:
            KeyNotFoundError: the key has no revisions.
            InvalidResponseError: a message delivered on a subject that is not
                one of the bucket's keys (no nats-server sends one).

        """
        timeout = check_timeout(timeout)
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
            keys: a key or filter (``*`` and a final ``>`` allowed), or a list of
                them (a filter given twice counts once).
            include_history: start with every stored revision, not only the latest.
            ignore_deletes: leave out ``DEL`` and ``PURGE`` entries.
            meta_only: leave values out (entries have ``value == b""``).
            updates_only: only changes made after the watch started; no ``None``.

        Raises:
            InvalidKeyError: a filter is invalid, or one filter matches every
                key another one matches (``"a.>"`` and ``"a.b"``: a consumer
                refuses that); before anything is sent.
            InvalidOptionError: ``updates_only`` with ``include_history`` (they
                contradict each other; nats.go refuses the pair too).

        Iterating the watcher raises :class:`InvalidResponseError` for a
        message delivered on a subject that is not one of the bucket's keys
        (no nats-server sends one); the next ``anext()`` goes on after it.

        """
        if updates_only and include_history:
            raise InvalidOptionError("updates_only and include_history exclude each other")
        if isinstance(keys, str):
            filters = [keys]
        elif isinstance(keys, Iterable) and not isinstance(keys, bytes | bytearray):
            filters = list(keys)
        else:
            raise InvalidKeyError(f"keys must be a key filter or a list of them, got {shown(keys)}")
        filters = watch_filters([validate_key_filter(k) for k in filters])
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

    async def status(self, *, timeout: float | timedelta | str | None = None) -> KeyValueStatus:
        """The bucket's state and settings (from the backing stream's info).

        Raises:
            BucketNotFoundError: the bucket was deleted.

        """
        timeout = check_timeout(timeout)
        try:
            info: StreamInfo = await self._stream.info(timeout=timeout)
        except StreamNotFoundError as exc:
            raise bucket_gone(self._stream.name) from exc
        return KeyValueStatus.from_stream_info(info)

    async def purge_deletes(
        self,
        *,
        older_than: float | timedelta | str | None = None,
        timeout: float | timedelta | str | None = None,
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
            timeout: how long to wait for each reply (seconds or a duration),
                and the longest wait without progress while reading the markers.

        Raises:
            InvalidOptionError: ``older_than`` is not a duration (negative, not
                finite, beyond ``timedelta.max``, not a number), before anything is sent.

        """
        timeout = check_timeout(timeout)
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
                    key_of(item.subject, self._prefix, self._bucket)  # purged by its subject
                    meta = item.metadata
                    markers.append((item.subject, meta.timestamp, meta.sequence.stream))
        finally:
            await reader.aclose()
        now = datetime.now(UTC)
        # A mirror's handle purges the origin too (a purge is not mirrored; the mirror's
        # revisions are the origin's), when the origin is known here.
        origin = self._writes_to
        for subject, created, revision in markers:
            # Ages, not a cutoff (now - limit): any limit a timedelta holds is valid,
            # and one longer than every marker's age simply keeps them all.
            if limit and now - created < limit:
                # The marker stays; what is below it goes (keep=1 would also take it, and
                # any revision put since the listing but the last). Nothing is below the
                # stream's first message, and servers before 2.15 take seq=1 as no
                # sequence at all (the whole subject, marker included): no purge then.
                if revision <= 1:
                    continue
                up_to = revision
            else:
                up_to = revision + 1  # up to the marker only: a put made since stays
            if origin is not None:
                key = key_of(subject, self._prefix, self._bucket)
                origin_subject = f"$KV.{self._write_namespace}.{key}"
                try:
                    await origin.purge(subject=origin_subject, sequence=up_to, timeout=timeout)
                except StreamNotFoundError:
                    origin = None  # deleted since the handle was bound: the mirror's own
            await self._stream.purge(subject=subject, sequence=up_to, timeout=timeout)


#: The longest ``older_than`` (``timedelta.max``), in seconds.
_MAX_AGE_SECONDS: Final = timedelta.max.total_seconds()


def _exists(exc: WrongLastSequenceError, what: str) -> KeyExistsError:
    return KeyExistsError(exc.code, exc.err_code, f"{what}: {exc.description}")


_WRONG_LAST: Final = re.compile(r"wrong last sequence: (\d+)")


def _wrong_last(exc: WrongLastSequenceError) -> int | None:
    """The subject's last sequence a refusal names (nats-server: ``wrong last sequence: N``)."""
    found = _WRONG_LAST.search(exc.description)
    return int(found.group(1)) if found else None


class KeyWatcher(Watcher[KeyValueEntry]):
    """A running watch: ``async with kv.watch(...) as w: async for entry in w``.

    Yields :class:`KeyValueEntry` objects, and exactly one ``None`` after the
    initial values (none with ``updates_only``). Leaving ``async with`` (or
    :meth:`aclose`) deletes the server-side consumer.
    """

    def __init__(
        self, kv: KeyValue, reader: Reader, ignore_deletes: bool, updates_only: bool
    ) -> None:
        super().__init__(reader, ignore_deletes, updates_only)
        self._kv = kv

    def _item(self, msg: Msg) -> KeyValueEntry | None:
        op = entry_operation(msg.headers)
        if self._ignore_deletes and op is not KeyValueOp.PUT:
            return None
        return self._kv._entry(msg, op)


def _text_refused(fix: str) -> InvalidOptionError:
    """The error of a ``str`` value (publish's own names publish): ``fix`` shows the call."""
    return InvalidOptionError(
        "value must be bytes, bytearray, memoryview, a pydantic model, or any value with "
        f"codec=; got str: store text as bytes, for example {fix} (UTF-8)"
    )

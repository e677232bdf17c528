"""Writing objects: data into chunks, infos with expected sequences, and the put saga.

A put sends its chunks to a new chunk subject through the asynchronous publish
window, then its info with ``Nats-Rollup: sub`` and
``Nats-Expected-Last-Subject-Sequence`` (so it replaces only the info it read;
concurrent writers read again and retry, see ``ObjectWriter._replace_info``).
A failed put purges its chunks, but keeps them when its info may have been
stored (see ``ObjectWriter._store_info``); a successful one purges those of
the version it replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import io
import logging
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
)
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, Final, TypeAlias

from .. import _bounds as B
from .. import _codec as PC
from .. import _headers as H
from .._cleanup import close_in_background
from .._codec import Codec
from .._conn import RequestNotSentError
from .._errors import (
    APIError,
    AuthorizationError,
    BucketNotFoundError,
    ClusterUnavailableError,
    DisconnectedError,
    DuplicateMsgIdInProcessError,
    InvalidOptionError,
    JetStreamError,
    JetStreamNotEnabledError,
    JetStreamTimeoutError,
    MessageNotFoundError,
    NoRespondersError,
    ObjectStoreError,
    StreamNotFoundError,
    WrongLastSequenceError,
)
from .._models import (
    PubAck,
    StreamSource,
)
from .._models.obj import (
    ObjectInfo,
    ObjectMetaOptions,
)
from .._stream import Stream
from .._validation import check_timeout
from .names import (
    DEFAULT_CHUNK_SIZE,
    STREAM_PREFIX,
    check_description,
    check_headers,
    check_metadata,
    encode_name,
    format_digest,
    meta_body,
    new_nuid,
    parse_info,
    validate_object_name,
)

if TYPE_CHECKING:
    from .._store_context import StoreContext

logger = logging.getLogger("aiojetstream")
#: Chunk bytes one put keeps awaiting their acknowledgement (at least 2 chunks).
PUT_WINDOW_BYTES: Final = 8 * 1024 * 1024
#: A failed put's cleanup tries for this many times its timeout (a reconnect included).
CLEANUP_ROUNDS: Final = 3
#: How long that cleanup waits before asking a server whose JetStream is not back yet again.
CLEANUP_RETRY_WAIT: Final = 0.25
#: The most chunks one put keeps awaiting their acknowledgement.
MAX_WINDOW: Final = 512
#: Room for the headers of the info message when checking it fits max_payload.
_META_SLACK: Final = 256
#: The Nats-Msg-Id of a put's info is this plus the put's nuid: publishing it again is idempotent.
_PUT_MSG_ID_PREFIX: Final = "obj-put-"
#: How often a write of an info reads it again after another writer replaced it first.
MAX_CONFLICTS: Final = 10
#: An info as stored and its stream sequence: ``(None, 0)`` when there is none.
Entry: TypeAlias = tuple[ObjectInfo | None, int]

Data = bytes | bytearray | memoryview | IO[bytes] | AsyncIterable[bytes] | Iterable[bytes]


def _is_bytes(piece: object) -> bool:
    return isinstance(piece, bytes | bytearray | memoryview)


async def _file_pieces(f: Any, size: int) -> AsyncIterator[bytes]:
    # A file in memory is read in place; a real file in a thread (reads block); an
    # async one (asyncio.StreamReader, aiofiles) awaited here.
    in_memory = isinstance(f, io.BytesIO)
    is_async = inspect.iscoroutinefunction(f.read)
    while True:
        if is_async:
            piece = await f.read(size)
        elif in_memory:
            piece = f.read(size)
        else:
            piece = await asyncio.to_thread(f.read, size)
            if inspect.isawaitable(piece):  # a read that returns an awaitable
                piece = await piece
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


class ObjectWriter:
    """The writing half of :class:`~aiojetstream.ObjectStore`: infos and the put saga.

    Holds the bucket's context, stream and subjects; reads and writes infos
    (every write expects the sequence of the info it read, so concurrent
    writers never replace one they did not read), and runs a put: chunks,
    info, then the purge of the replaced version's chunks, with the failure
    handling its docstring describes. :class:`~aiojetstream.ObjectStore`
    extends it with the public API; nothing else uses it.
    """

    def __init__(self, js: StoreContext, stream: Stream) -> None:
        name = stream.name
        bucket = name[len(STREAM_PREFIX) :] if name.startswith(STREAM_PREFIX) else name
        mirror = stream.cached_info.config.mirror
        if mirror is not None and not _holds_own_subjects(mirror, bucket):
            # A mirror holds its origin's subjects ($O.<origin>.…): bound under its own
            # name it would list nothing and find nothing.
            raise ObjectStoreError(
                f"stream {name!r} is a mirror of {mirror.name!r} and holds that bucket's "
                f"subjects, not '$O.{bucket}.…', which an object store handle reads: bind "
                "the origin bucket"
            )
        self._js = js
        self._stream = stream
        self._bucket = bucket
        self._meta_prefix = f"$O.{self._bucket}.M."
        self._chunk_prefix = f"$O.{self._bucket}.C."
        # The domain the context addresses: every acknowledgement carrying a domain must
        # come from it (a server without a JetStream domain, reached through a mapping of
        # the prefix, acknowledges with none).
        self._domain = _domain_of(stream._api.prefix)

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

    async def _entry(self, subject: str, timeout: float | None, *, leader: bool = False) -> Entry:
        """The info stored on ``subject`` (deleted ones too) and its sequence, or ``(None, 0)``.

        The sequence is what a replacement of the info expects
        (``expected_last_subject_sequence``): 0 when nothing is stored there.
        ``leader``: read it from the stream's leader (a plain get), as after a
        conflict: the leader refused a replacement, and a direct get may be
        answered by a replica that has not applied the info it refused it for.
        """
        try:
            msg = None
            if leader:
                # A user allowed direct gets only (as nats.go's needs): the direct get.
                with contextlib.suppress(AuthorizationError):
                    msg = await self._stream._api_get({"last_by_subj": subject}, timeout)
            if msg is None:
                msg = await self._stream.get_last_msg_for_subject(subject, timeout=timeout)
        except MessageNotFoundError:
            return None, 0
        except StreamNotFoundError as exc:
            raise BucketNotFoundError(
                f"object store {self._bucket!r} not found", self._bucket
            ) from exc
        return parse_info(msg.data, msg.time, self._bucket, subject), msg.seq

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
        ack = await self._js.publish(
            self._meta_subject(info.name),
            meta_body(info),
            headers={H.ROLLUP: "sub"},
            msg_id=msg_id,
            expected_last_subject_sequence=expected,
            timeout=timeout,
        )
        if _elsewhere(ack.domain, self._domain):
            raise self._foreign_ack(ack, f"the info of object {info.name!r}")
        return ack

    def _foreign_ack(self, ack: PubAck, what: str) -> ObjectStoreError:
        """The error of an acknowledgement from another domain than the context's.

        A stream in another domain linked by a leaf node connection (the
        leaf's own, for a client of the leaf) that captures the bucket's
        subjects (a bucket of the same name) stores the message too, and its
        acknowledgement may arrive first: taken as success, the put reported
        an object the target domain did not have whole.
        """
        return ObjectStoreError(
            f"{what} was acknowledged by stream {ack.stream!r} in JetStream domain "
            f"{ack.domain!r}, not in domain {self._domain!r} this context addresses: "
            f"a stream there captures the bucket's subjects ($O.{self._bucket}.>; a "
            f"bucket of the same name) and answered first, so whether domain "
            f"{self._domain!r} stored it is unknown. Delete or rename that bucket in "
            f"domain {ack.domain!r} (across a leaf node connection both domains' "
            "buckets store every write to these subjects)"
        )

    async def _replace_info(
        self,
        subject: str,
        timeout: float | None,
        change: Callable[[ObjectInfo | None], ObjectInfo | None],
    ) -> tuple[Entry, Entry]:
        """Replace the info on ``subject`` by ``change(current)``, retrying on conflicts.

        Reads the current info, publishes ``change(current)`` over it, and
        when another writer got there first, reads again and applies
        ``change`` to what it stored (at most ``MAX_CONFLICTS`` times).
        ``change`` raises to refuse, or returns None to leave the info as it
        is. Returns the entry replaced and the one stored (``(None, 0)`` when
        nothing was published).
        """
        for attempt in range(MAX_CONFLICTS):
            current, seq = await self._entry(subject, timeout, leader=attempt > 0)
            new = change(current)
            if new is None:
                return (current, seq), (None, 0)
            try:
                ack = await self._publish_info(new, timeout, expected=seq)
            except WrongLastSequenceError as exc:
                if attempt + 1 < MAX_CONFLICTS:
                    continue
                exc.add_note(conflict_note(subject))
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

    async def _put(
        self,
        name: str,
        data: Data | object,
        *,
        description: str | None,
        headers: Mapping[str, str | list[str]] | None,
        metadata: Mapping[str, str] | None,
        chunk_size: int | None,
        timeout: float | None,
        codec: Codec | None,
    ) -> ObjectInfo:
        """The body of :meth:`ObjectStore.put <aiojetstream.ObjectStore.put>` (see there)."""
        name = validate_object_name(name)
        if codec is not None or (
            hasattr(type(data), "__pydantic_serializer__") and not isinstance(data, type)
        ):  # before the iterable check: a model iterates over its fields
            data, headers = PC.encode(data, codec, headers)
        size = self._chunk_size(chunk_size)
        info = ObjectInfo(
            name=name,
            description=check_description(description),
            headers=check_headers(headers),
            metadata=check_metadata(metadata),
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
        js, domain = self._js, self._domain
        ack_wait = self._wait(timeout)  # _discard waits this long for chunks in flight
        try:
            async for chunk in rechunk(pieces, size):
                sha.update(chunk)
                total += len(chunk)
                count += 1
                pending.append(await js.publish_async(chunk_subject, chunk, timeout=ack_wait))
                while pending and (len(pending) >= window or pending[0].done()):
                    ack = await _settled(pending[0])  # raises the chunk's error
                    if _elsewhere(ack.domain, domain):
                        raise self._foreign_ack(ack, f"a chunk of object {name!r}")
                    pending.popleft()
                    acked = True
            while pending:
                ack = await _settled(pending[0])
                if _elsewhere(ack.domain, domain):
                    raise self._foreign_ack(ack, f"a chunk of object {name!r}")
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
        except RequestNotSentError as exc:
            # Made while reconnecting and never sent (a conflict before it stored
            # nothing either): purged once reconnected.
            await self._discard(chunk_subject, (), exc, timeout)
            raise
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
        published over the new one (at most ``MAX_CONFLICTS`` times), unless
        an earlier copy got no reply: that copy may have been stored and then
        replaced (its chunks purged by the writer that replaced it), and only
        the stream's duplicate window, which a restart or its end forgets,
        would keep a copy published now from being stored again. The put
        gives up then (the caller keeps the chunks). A duplicate
        acknowledgement also means an earlier copy was stored.
        """
        info = swap.info
        for attempt in range(MAX_CONFLICTS):
            try:
                await self._publish_info(info, timeout, expected=swap.seq, msg_id=swap.msg_id)
            except WrongLastSequenceError as exc:
                current, seq = await self._entry(swap.subject, timeout, leader=True)
                if current is not None and current.nuid == info.nuid:
                    swap.replaced = swap.current  # stored by a copy without a reply
                    return
                if swap.unanswered:
                    exc.add_note(
                        f"another writer replaced the info on {swap.subject!r} while a "
                        "copy of this put's info had got no reply: not published over it"
                    )
                    raise
                if attempt + 1 >= MAX_CONFLICTS:
                    exc.add_note(conflict_note(swap.subject))
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
        """:meth:`_discard_now` in a task of its own, awaited through a shield.

        A put cancelled again while it purges (anyio's cancel scopes cancel
        every await until the scope exits) left its chunks in the bucket for
        good; the purge now goes on without the put.
        """
        await _in_background(self._discard_now(chunk_subject, pending, error, timeout, acked=acked))

    async def _discard_now(
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
        in the reconnect buffer; they are written once reconnected. The server
        answers API requests (the purge) apart from storing messages, so a purge
        sent right after them could run before they are stored, and they stayed
        behind (seen on a loaded machine). First an empty message on the chunk
        subject, acknowledged: the stream stores one connection's messages in
        order, so every chunk written before it is stored by then; the purge
        removes them with it. An attempt that could not be sent (disconnected)
        or got no reply is made again (both steps are idempotent here).
        """

        async def attempt(left: float) -> None:
            # Refused (a full stream or account, sealed): it is not stored, and what came
            # before it is handled by then; a purge needs no room. No responders: the
            # purge says why (the bucket is gone: at once, not after the retries).
            with contextlib.suppress(APIError, NoRespondersError):
                ack = await self._js.publish(subject, b"", timeout=left)
                if _elsewhere(ack.domain, self._domain):
                    await self._barrier_stored(subject, left)
            await self._stream.purge(subject=subject, timeout=left)

        await self._when_connected(attempt, wait)

    async def _barrier_stored(self, subject: str, wait: float) -> None:
        """Wait (at most ``wait`` seconds) until the context's domain stored the empty barrier.

        Its acknowledgement came from another domain (a stream there captures
        the subject too), so the chunks before it may not be stored in this
        one yet: a purge now would leave them behind. Chunks are never empty.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while loop.time() < deadline:
            with contextlib.suppress(MessageNotFoundError, JetStreamTimeoutError):
                left = max(deadline - loop.time(), 0.1)
                msg = await self._stream.get_last_msg_for_subject(subject, timeout=left)
                if not msg.data:
                    return
            await asyncio.sleep(CLEANUP_RETRY_WAIT / 5)

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
        while True:
            try:
                left = deadline - loop.time()
                # (Made while reconnecting, a request waits for the reconnect itself.)
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
            if not await conn.wait_connected(deadline - loop.time()):
                if conn.is_closed:
                    raise conn.closed_error()
                raise DisconnectedError(f"not reconnected within {CLEANUP_ROUNDS * wait:g} s")

    async def _purge_replaced(self, name: str, nuid: str | None, timeout: float | None) -> None:
        """Purge a replaced version's chunks (the put itself succeeded).

        Waits out a reconnect and retries, as a failed put's purge does (one try
        left them in the bucket for good, counting against ``max_bytes``, when
        its request was lost); a put cancelled now has stored its object, so the
        purge goes on in a task of its own.
        """
        assert nuid is not None
        subject = self._chunk_subject(nuid)
        wait = self._wait(timeout)

        async def attempt(left: float) -> None:
            await self._stream.purge(subject=subject, timeout=left)

        async def purge() -> None:
            try:
                await self._when_connected(attempt, wait)
            except JetStreamError as exc:
                # Not a failure of the put: the new version is stored and complete.
                logger.warning(
                    "object %r was replaced but the old chunks could not be purged (%s): "
                    "purge subject %s of stream %s",
                    name,
                    exc,
                    subject,
                    self._stream.name,
                )

        await _in_background(purge())


def _elsewhere(acked: str | None, domain: str | None) -> bool:
    """An acknowledgement from ``acked``, another domain than ``domain`` (None: unknown)."""
    return domain is not None and acked is not None and acked != domain


def _domain_of(prefix: str) -> str | None:
    """The JetStream domain an API prefix addresses (``$JS.<domain>.API``), or None."""
    parts = prefix.split(".")
    if len(parts) == 3 and parts[0] == "$JS" and parts[2] == "API":
        return parts[1]
    return None


async def _in_background(purge: Coroutine[Any, Any, None]) -> None:
    """Run ``purge`` in a task of its own and wait for it through a shield.

    Cancelling the caller (a cancelled put) leaves the purge running to its end.
    """
    await asyncio.shield(close_in_background(purge))


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


def conflict_note(subject: str) -> str:
    return (
        f"the info on {subject!r} was replaced by other writers {MAX_CONFLICTS} times "
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


def _holds_own_subjects(mirror: StreamSource, bucket: str) -> bool:
    """Whether a mirror stream of bucket ``bucket`` holds ``$O.<bucket>.…`` subjects.

    So it does when it mirrors a bucket of the same name (another domain's) or
    its subject transforms rename the origin's ``$O.<origin>.<rest>`` to
    ``$O.<bucket>.<rest>``.
    """
    transforms = mirror.subject_transforms
    if not transforms:
        origin = mirror.name.removeprefix(STREAM_PREFIX)
        return origin == bucket
    for transform in transforms:
        src = (transform.src or "").split(".")
        dest = transform.dest.split(".")
        if len(src) < 3 or src[0] != "$O" or dest[:2] != ["$O", bucket]:
            return False
        if src[2:] != dest[2:] or "{{" in transform.dest:
            return False
    return True

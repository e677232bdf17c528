"""Reading objects: the chunk reader (:class:`ObjectResult`), downloads, and the watcher.

A read streams the chunks through an ordered consumer with a small buffer and
checks the chunk count, size and SHA-256 digest at the end; a stalled read asks
the stream leader whether the chunks are still there. The watcher turns the
shared :class:`~aiojetstream._watch.Reader`'s meta messages into infos.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import tempfile
import weakref
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from .._cleanup import close_when_collected
from .._errors import (
    DigestMismatchError,
    InvalidResponseError,
    JetStreamTimeoutError,
    MessageNotFoundError,
    ObjectNotFoundError,
    ObjectStoreError,
    StreamNotFoundError,
)
from .._message import Msg
from .._models import (
    DeliverPolicy,
    OrderedConsumerConfig,
)
from .._models.obj import (
    ObjectInfo,
)
from .._watch import Reader, Watcher, bucket_gone, enter_within
from .names import (
    DEFAULT_CHUNK_SIZE,
    chunk_subject,
    meta_subject,
    parse_digest,
    parse_info,
    parse_or_skip,
)

if TYPE_CHECKING:
    from .._consumer import MessagesContext
    from .._ordered import OrderedConsumer
    from .store import ObjectStore

#: Chunk bytes one read keeps buffered (at least 2 chunks, at most 64).
GET_BUFFER_BYTES: Final = 4 * 1024 * 1024
#: Seconds a read waits for its next chunk before checking that the chunks are still there.
CHUNKS_GONE_CHECK: Final = 1.0


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        return


# --------------------------------------------------------------------------- reading


async def write_file(result: ObjectResult, target: Path) -> None:
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

    def __init__(self, store: ObjectStore, info: ObjectInfo, stall: float) -> None:
        self.info = info
        """The object's info (the target's, for a link)."""
        self._store = store
        self._stall = stall
        self._sha = hashlib.sha256()
        self._size = 0
        self._chunks = 0
        self._it: MessagesContext | None = None
        self._oc: OrderedConsumer | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._last_seq = 0  # the stream sequence of the last chunk read
        self._behind_since: float | None = None  # see _read_elsewhere
        self._started = False
        self._done = False
        # How the read ended: every chunk read and checked (True), or its error.
        self._complete = False
        self._error: BaseException | None = None

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
        if self._it is not None:  # (a chunk at a time: its tasks are the connection loop's)
            self._store.stream._api.conn.refuse_outside()
        if self._done:
            self._ended()
        try:
            if not self._started:
                self._started = True
                if not await self._start() and await self._end():
                    self._complete = True
                    raise StopAsyncIteration
            msg = await self._next()
            if msg is None:  # the read ended early (the chunks are gone)
                await self._end()
                self._complete = True
                raise StopAsyncIteration
            data = msg.data
            meta = msg.metadata
            self._last_seq = meta.sequence.stream
            self._behind_since = None
            self._sha.update(data)
            self._size += len(data)
            self._chunks += 1
            if self._size > self.info.size:
                self._mismatch("more data than its size")
            if meta.num_pending == 0 and await self._end():
                self._complete = True
                await self.aclose()
            return data
        except StreamNotFoundError as exc:
            await self.aclose()
            self._error = bucket_gone(self._store.stream.name)
            raise self._error from exc
        except StopAsyncIteration:
            await self.aclose()
            raise
        except BaseException as exc:
            await self.aclose()
            if self._error is None and not self._complete:
                self._error = exc
            raise

    def _ended(self) -> None:
        """Iterating a read that ended: the end once more, never a silent cut.

        After every chunk was read and checked, the end (StopAsyncIteration, and
        :meth:`read` returns ``b""``); after a failure, that error again; after
        :meth:`aclose` before the end (or a cancelled read), ObjectStoreError.
        """
        if self._complete:
            raise StopAsyncIteration
        error = self._error
        if error is not None and not isinstance(error, asyncio.CancelledError):
            raise error
        raise ObjectStoreError(
            f"the read of object {self.info.name!r} was closed before its end; "
            "get the object again to read it"
        )

    async def _start(self, after: int = 0) -> bool:
        """Start reading the chunks stored after sequence ``after``.

        False when the consumer has nothing to read.
        """
        info = self.info
        if not info.size and not info.chunks:
            return False
        assert info.nuid is not None
        store = self._store
        chunk_size = info.options.max_chunk_size if info.options is not None else None
        per_chunk = chunk_size or DEFAULT_CHUNK_SIZE
        batch = min(64, max(2, GET_BUFFER_BYTES // per_chunk))
        subjects = [chunk_subject(store.bucket, info.nuid)]
        config = (
            OrderedConsumerConfig(
                filter_subjects=subjects,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=after + 1,
            )
            if after
            else OrderedConsumerConfig(filter_subjects=subjects)
        )
        oc = self._oc = await store.stream.ordered_consumer(config)
        it = self._it = oc.messages(max_messages=batch)
        # Dropped unfinished (``async for ... : break`` without ``async with``): the
        # consumer, its subscription and its buffer are closed anyway.
        self._finalizer = close_when_collected(self, functools.partial(_close_reading, it))
        if not await enter_within(oc, it, self._stall):
            raise JetStreamTimeoutError(
                f"could not start reading object {info.name!r} within {self._stall:g} s"
            )
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
                if self._oc is not None:
                    self._oc.quick_close = True  # the close does not wait for the server either
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
        with the info unchanged, the bucket lost them (corrupt; also when the
        leader holds no more of them than were read: one is missing). False: the
        leader holds more than were read, or that can not be told now.

        Asks the stream leader (stream info, per-subject counts; a plain get of
        the info): a direct get may be answered by a lagging replica or mirror.
        """
        store, info = self._store, self.info
        assert info.nuid is not None
        subject = chunk_subject(store.bucket, info.nuid)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            now = await store.stream.info(subjects_filter=subject, timeout=timeout)
        except JetStreamTimeoutError:
            return False  # cannot tell now: the chunk may still come
        # More chunks on the leader than were read: they are still to come (a
        # replica behind the leader). No more than were read: nothing is left to
        # read, so a chunk is missing unless the object was deleted or replaced.
        if (now.state.subjects or {}).get(subject, 0) > self._chunks:
            return False
        info_subject = meta_subject(store.bucket, info.name)
        try:
            msg = await store.stream._api_get(
                {"last_by_subj": info_subject}, max(deadline - loop.time(), 0.1)
            )
            current = parse_info(msg.data, msg.time, store.bucket, info_subject)
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

    async def _end(self) -> bool:
        """The consumer has nothing more: check the read against the info (True), or read on.

        A read that found less than the info says (nothing at all, when the
        object was deleted or replaced between ``get`` and the first read) is
        ObjectNotFoundError when the object's chunks are gone because the
        object was deleted or replaced, as in the middle of a read (not
        corrupt), DigestMismatchError when the leader holds no more chunks
        than were read (one is missing). False when the stream's leader
        holds more chunks than were read (or can not tell now): the
        consumer reads a replica that is behind (its
        node restarted and is catching up), so the chunks still come (within
        the stall timeout); such a read said the object was corrupt.
        """
        info = self.info
        if (self._size < info.size or self._chunks < info.chunks) and not await self._chunks_gone(
            self._stall
        ):
            await self._read_elsewhere()
            return False
        self._verify()
        return True

    async def _read_elsewhere(self) -> None:
        """Read on from a new consumer: this one's replica is behind the leader.

        nats-server places a read's consumer (R1) on any of the bucket's peers;
        on one whose node restarted and is still catching up, the chunks came
        only once it caught up (15 s seen). A new consumer, from the chunk
        after the last one read, is placed anew; one that again has nothing to
        read is replaced after a pause growing from 0.1 s to 1 s, until it has,
        or the stall timeout is up (:class:`JetStreamTimeoutError`).
        """
        loop = asyncio.get_running_loop()
        if self._behind_since is None:
            self._behind_since = loop.time()
        pause = 0.1
        while True:
            it, self._it = self._it, None
            if self._finalizer is not None:
                self._finalizer.detach()
            if it is not None:
                await _close_reading(it)
            if loop.time() - self._behind_since > self._stall:
                raise JetStreamTimeoutError(
                    f"object {self.info.name!r}: the bucket's replicas held no more chunks "
                    f"for {self._stall:g} s, while its leader has them ({self._chunks} of "
                    f"{self.info.chunks} read)"
                )
            await asyncio.sleep(pause)  # (a backoff: the replica may catch up meanwhile)
            pause = min(pause * 2, 1.0)
            if await self._start(self._last_seq):
                return

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
        it = self._it
        if it is not None and self._store.stream._api.conn.outside():
            it = None  # the loop ended: nothing of it runs (raises from another live loop)
        self._done = True
        self._it = None
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
        self, store: ObjectStore, reader: Reader, ignore_deletes: bool, updates_only: bool
    ) -> None:
        super().__init__(reader, ignore_deletes, updates_only)
        self._store = store

    def _item(self, msg: Msg) -> ObjectInfo | None:
        info = parse_or_skip(msg, self._store.bucket)
        if info is None or (self._ignore_deletes and info.deleted):
            return None
        return info

"""The object store handle (:class:`ObjectStore`) and creating, binding and deleting buckets.

The public methods live here (names, links, listing, watching, sealing); the
writing half (infos, the put saga) is :class:`~._object.write.ObjectWriter`,
which the handle extends, and reading is :mod:`.read`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Iterator,
    Mapping,
)
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final

from .._codec import Codec
from .._errors import (
    BucketNotFoundError,
    DigestMismatchError,
    InvalidNameError,
    InvalidOptionError,
    InvalidResponseError,
    ObjectExistsError,
    ObjectLinkError,
    ObjectNotFoundError,
    StreamNotFoundError,
    WrongLastSequenceError,
)
from .._message import Msg
from .._models import (
    DeliverPolicy,
)
from .._models.kv import validate_bucket_name
from .._models.obj import (
    ObjectInfo,
    ObjectLink,
    ObjectMeta,
    ObjectMetaOptions,
    ObjectStoreConfig,
    ObjectStoreStatus,
)
from .._stream import Stream
from .._validation import check_timeout
from .._watch import Reader
from .names import (
    STREAM_PREFIX,
    check_headers,
    deleted_info,
    new_nuid,
    object_stream_config,
    parse_or_skip,
    stream_name,
    validate_object_name,
)
from .read import ObjectResult, ObjectWatcher, write_file
from .write import MAX_CONFLICTS, Data, ObjectWriter, conflict_note

if TYPE_CHECKING:
    from .._store_context import StoreContext

logger = logging.getLogger("aiojetstream")
#: How many links a get follows before giving up (a longer chain is a loop).
MAX_LINK_DEPTH: Final = 8


async def create_object_store(
    js: StoreContext, config: ObjectStoreConfig, timeout: float | None
) -> ObjectStore:
    """Create a bucket (see :meth:`JetStreamContext.create_object_store`)."""
    stream = await js.create_stream(object_stream_config(config), timeout=timeout)
    return ObjectStore(js, stream)


async def update_object_store(
    js: StoreContext, config: ObjectStoreConfig, timeout: float | None
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


async def object_store(js: StoreContext, bucket: str, timeout: float | None) -> ObjectStore:
    """Bind to an existing bucket (see :meth:`JetStreamContext.object_store`)."""
    bucket = validate_bucket_name(bucket)
    try:
        stream = await js.stream(stream_name(bucket), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(f"object store {bucket!r} not found", bucket) from exc
    return ObjectStore(js, stream)


async def delete_object_store(js: StoreContext, bucket: str, timeout: float | None) -> None:
    """Delete a bucket (see :meth:`JetStreamContext.delete_object_store`)."""
    bucket = validate_bucket_name(bucket)
    try:
        await js.delete_stream(stream_name(bucket), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(f"object store {bucket!r} not found", bucket) from exc


async def object_store_names(js: StoreContext, timeout: float | None) -> AsyncIterator[str]:
    """Async-iterate bucket names (see :meth:`JetStreamContext.object_store_names`)."""
    async for name in js.stream_names("$O.*.C.>", timeout=timeout):
        if name.startswith(STREAM_PREFIX):
            yield name[len(STREAM_PREFIX) :]


def _link_target(info: ObjectInfo, bucket: str) -> tuple[str, str]:
    """The bucket and object name a stored link (``info``, of ``bucket``) points to.

    The names come from a stored record (another client may have written it):
    an invalid one is the link's fault, not the caller's (:class:`ObjectLinkError`).
    """
    link = info.link
    assert link is not None
    try:
        return validate_bucket_name(link.bucket), validate_object_name(link.name)
    except InvalidNameError as exc:
        raise ObjectLinkError(
            f"object {info.name!r} of bucket {bucket!r} is a link to an invalid target: {exc}"
        ) from exc


# --------------------------------------------------------------------------- the handle


class ObjectStore(ObjectWriter):
    """A handle on an object store bucket (ADR-20). Get one from ``js.object_store(bucket)``.

    Objects are named by any non-empty text (up to 2,048 bytes of UTF-8); their
    data is stored in chunks and read back as a stream, so an object may be far
    larger than the server's ``max_payload`` and than the memory of either side.
    Buckets and objects are interchangeable with those of nats.go, nats.js
    (``@nats-io/obj``) and nats-py. See ``docs/object-store.md``.
    """

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

    async def info(
        self,
        name: str,
        *,
        include_deleted: bool = False,
        timeout: float | timedelta | str | None = None,
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
        timeout = check_timeout(timeout)
        name = validate_object_name(name)
        info, _ = await self._entry(self._meta_subject(name), timeout)
        if info is None or (info.deleted and not include_deleted):
            raise ObjectNotFoundError(f"object {name!r} not found in bucket {self._bucket!r}")
        return info

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
        timeout: float | timedelta | str | None = None,
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
            ObjectStoreError: through a context with a ``domain``, an
                acknowledgement came from another domain (a bucket of the same
                name in the local domain captured the write).

        """
        timeout = check_timeout(timeout)
        return await self._put(
            name,
            data,
            description=description,
            headers=headers,
            metadata=metadata,
            chunk_size=chunk_size,
            timeout=timeout,
            codec=codec,
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
        timeout: float | timedelta | str | None = None,
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
        timeout = check_timeout(timeout)
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

    async def get(
        self, name: str, *, timeout: float | timedelta | str | None = None
    ) -> ObjectResult:
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
            ObjectLinkError: the object is a link to a whole bucket, a chain of
                more than 8 links, or a stored link whose bucket or object name
                is invalid (another client's record).
            BucketNotFoundError: a link names a bucket that does not exist.

        """
        timeout = check_timeout(timeout)
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
            bucket, target = _link_target(info, store.bucket)
            if bucket != store.bucket:
                store = await object_store(self._js, bucket, timeout)
            info = await store.info(target, timeout=timeout)
        if info.size and info.digest is None:
            raise DigestMismatchError(f"object {info.name!r} has no digest to check its data by")
        if (info.size or info.chunks) and not info.nuid:
            raise InvalidResponseError(
                f"the info of object {info.name!r} has no nuid: its chunks can not be found"
            )
        return ObjectResult(store, info, self._wait(timeout))

    async def get_bytes(
        self, name: str, *, timeout: float | timedelta | str | None = None
    ) -> bytes:
        """The whole content of the object ``name`` (checked; see :meth:`get`)."""
        timeout = check_timeout(timeout)
        async with await self.get(name, timeout=timeout) as result:
            return await result.read()

    async def get_file(
        self,
        name: str,
        path: str | os.PathLike[str],
        *,
        timeout: float | timedelta | str | None = None,
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
        timeout = check_timeout(timeout)
        result = await self.get(name, timeout=timeout)
        async with result:
            await write_file(result, Path(path))
        return result.info

    # ------------------------------------------------------------- meta, delete, links

    async def update_meta(
        self, name: str, meta: ObjectMeta, *, timeout: float | timedelta | str | None = None
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
        timeout = check_timeout(timeout)
        if not isinstance(meta, ObjectMeta):
            raise InvalidOptionError(f"meta must be an ObjectMeta, got {type(meta).__name__}")
        name = validate_object_name(name)
        new_name = validate_object_name(meta.name)
        check_headers(meta.headers)
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
        for attempt in range(MAX_CONFLICTS):
            info, seq = await self._entry(subject, timeout, leader=attempt > 0)
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
                moved = await self._publish_info(deleted_info(info), timeout, expected=seq)
            except WrongLastSequenceError as exc:
                with contextlib.suppress(WrongLastSequenceError):
                    await self._publish_info(deleted_info(new), timeout, expected=new_seq)
                if attempt + 1 >= MAX_CONFLICTS:
                    exc.add_note(conflict_note(subject))
                    raise
                continue
            await self._stream.purge(subject=subject, sequence=moved.seq + 1, timeout=timeout)
            return new
        raise AssertionError("unreachable")  # pragma: no cover

    async def delete(self, name: str, *, timeout: float | timedelta | str | None = None) -> None:
        """Delete the object ``name``: a deleted info replaces its info, its chunks are purged.

        Deleting a deleted object purges its chunks again (a delete whose reply
        was lost can be tried again). Deleting a link deletes the link only.

        Raises:
            ObjectNotFoundError: no such object.

        """
        timeout = check_timeout(timeout)
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
        self, name: str, target_info: ObjectInfo, *, timeout: float | timedelta | str | None = None
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
        timeout = check_timeout(timeout)
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
        self,
        name: str,
        bucket: ObjectStore | str,
        *,
        timeout: float | timedelta | str | None = None,
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
        timeout = check_timeout(timeout)
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

    def _reader(self, policy: DeliverPolicy, stall: float | None) -> Reader:
        # A watch (no stall) waits for its infos forever, for its start the context's timeout.
        subjects = [self._meta_prefix + ">"]
        return Reader(self._stream, subjects, policy, False, stall, self._js.timeout)

    async def list(
        self, *, include_deleted: bool = False, timeout: float | timedelta | str | None = None
    ) -> AsyncGenerator[ObjectInfo, None]:
        """Async-iterate the infos of the objects (and links) in the bucket, each once.

        Each object's latest info present when the listing started (or
        written before it ended) is yielded once the bucket's infos are read:
        an object deleted before the call is not listed, whichever replica
        serves the read. An empty bucket yields nothing. Stopping early:
        ``await it.aclose()``.

        Args:
            include_deleted: also yield deleted objects (``deleted=True``).
            timeout: the longest wait without progress before
                :class:`JetStreamTimeoutError` (the context's default when None).

        """
        timeout = check_timeout(timeout)
        reader = self._reader(DeliverPolicy.LAST_PER_SUBJECT, self._wait(timeout))
        # The latest info read of each meta subject (one per name), yielded once the
        # read ends: a consumer on a replica catching up starts from that replica's
        # (older) infos, and an object's deletion may come after its old info (an
        # object deleted before the call was listed: 20 of 50). In order of each
        # name's first info read.
        latest: dict[str, Msg] = {}
        try:
            await reader.start()  # BucketNotFoundError once the bucket is deleted
            while True:
                item = await reader.next()
                if not isinstance(item, Msg):
                    break
                latest[item.subject] = item
        finally:
            await reader.aclose()
        for item in latest.values():
            info = parse_or_skip(item, self._bucket)
            if info is not None and (include_deleted or not info.deleted):
                yield info

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

    async def seal(self, *, timeout: float | timedelta | str | None = None) -> ObjectStoreStatus:
        """Seal the bucket: from now on it is read-only (the server refuses every write).

        Returns:
            The sealed bucket's status.

        """
        timeout = check_timeout(timeout)
        with self._bucket_errors():
            info = await self._stream.info(timeout=timeout)
            config = info.config.model_copy(update={"sealed": True})
            self._stream = await self._js.update_stream(config, timeout=timeout)
        return ObjectStoreStatus.from_stream_info(self._stream.cached_info)

    async def status(self, *, timeout: float | timedelta | str | None = None) -> ObjectStoreStatus:
        """The bucket's state and settings (from the backing stream's info)."""
        timeout = check_timeout(timeout)
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

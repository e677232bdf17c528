"""``JetStreamContext``: the entry point for managing streams and consumers and publishing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import _admin as A
from . import _api
from . import _codec as PC
from . import _features as F
from . import _headers as H
from . import _publish as P
from . import _ttl_rules as T
from ._api import ApiClient
from ._bounds import shown
from ._codec import Codec
from ._conn import MAX_SUBJECT_LINE, Conn, NatsClient, check_line, connect_nats
from ._errors import (
    ConnectionClosedError,
    InvalidOptionError,
    JetStreamError,
    MessageNotFoundError,
    StreamConfigError,
    StreamNotFoundError,
)
from ._models import (
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPauseResponse,
    OrderedConsumerConfig,
    PubAck,
    StreamConfig,
    StreamInfo,
    to_wire,
)
from ._models._ranges import check_config_ranges
from ._validation import (
    check_timeout,
    validate_api_prefix,
    validate_filter_subject,
    validate_name,
    validate_publish_subject,
)

if TYPE_CHECKING:  # loaded by the methods that need them: connect() does not
    from . import _consumer as C
    from ._batch import AtomicBatch
    from ._counter import Counter
    from ._kv import KeyValue
    from ._models.account import AccountInfo
    from ._models.kv import KeyValueConfig
    from ._models.obj import ObjectStoreConfig
    from ._object import ObjectStore
    from ._ordered import OrderedConsumer
    from ._schedule import Schedule
    from ._stream import Stream

DEFAULT_TIMEOUT = 5.0
DEFAULT_MAX_PENDING = 4000
#: How many validated publish subjects a context remembers (validation is skipped for them).
_SUBJECT_CACHE = 1024

Payload = bytes | bytearray | memoryview | object
"""bytes-like, a pydantic model (JSON), or any value with ``codec=``; not ``str``."""


def _arrow_payloads(payloads: object) -> Any:
    """The payloads as a binary Arrow array when given as one (pyarrow loaded), else None."""
    if not type(payloads).__module__.startswith("pyarrow"):
        return None
    from . import _columns

    if not _columns.is_arrow(payloads):
        return None
    return _columns.payload_column(payloads)


async def _summary(tally: P.AckTally) -> P.PublishSummary:
    await tally.wait()  # raises the first failure
    return P.PublishSummary(tally.stored, tally.duplicates)


class JetStreamContext:
    """The JetStream API on a connected nats-py client.

    Args:
        nc: a connected ``nats.aio.client.Client``.
        domain: the JetStream domain to address (``$JS.<domain>.API``).
        api_prefix: the API prefix when no domain is given.
        timeout: default time to wait for any reply: seconds, or a duration
            as everywhere (``"1.5s"``, a ``timedelta``; ``docs/api.md#durations``).
        publish_async_max_pending: how many asynchronous publishes may await
            their acknowledgement at once (the in-flight window).
        publish_async_timeout: default time an asynchronous publish waits for
            its acknowledgement (``timeout`` when None).

    Raises:
        InvalidNameError: ``domain`` is not a valid name.
        InvalidSubjectError: ``api_prefix`` is not a valid subject (whitespace,
            control characters, wildcards): it starts every API subject.
        InvalidOptionError: another argument is invalid.

    """

    def __init__(
        self,
        nc: NatsClient,
        *,
        domain: str | None = None,
        api_prefix: str = _api.DEFAULT_API_PREFIX,
        timeout: float | timedelta | str = DEFAULT_TIMEOUT,
        publish_async_max_pending: int = DEFAULT_MAX_PENDING,
        publish_async_timeout: float | timedelta | str | None = None,
    ) -> None:
        checked = check_timeout(timeout)
        if checked is None:
            raise InvalidOptionError("timeout must be a positive duration, got None")
        timeout = checked
        if domain is not None:
            domain = validate_name(domain, "domain")
        api_prefix = validate_api_prefix(api_prefix)
        self._nc = nc
        self._conn = Conn(nc)
        self._timeout = float(timeout)
        self._api = ApiClient(self._conn, _api.api_prefix(domain, api_prefix), self._timeout)
        self._publisher = P.AsyncPublisher(
            self._conn,
            publish_async_max_pending,
            self._timeout if publish_async_timeout is None else publish_async_timeout,
        )
        self._owns_connection = False
        self._closing: asyncio.Task[None] | None = None
        self._valid_subjects: set[str] = set()

    # ------------------------------------------------------------ lifecycle

    @property
    def nc(self) -> NatsClient:
        """The underlying nats-py client."""
        return self._nc

    @property
    def timeout(self) -> float:
        """The default seconds to wait for a reply."""
        return self._timeout

    async def close(self) -> None:
        """Fail pending asynchronous publishes, and close the connection if this context owns it.

        Idempotent. The close runs in a task of its own: cancelled (a timeout at
        shutdown), it goes on, and calling ``close()`` again waits for it;
        called from within it (a ``disconnected_cb`` or ``closed_cb`` that
        closes the context), it returns at once.

        Called from an event loop other than the connection's: when that loop
        has ended (the context was opened in an earlier ``asyncio.run()``), the
        connection is dropped quietly (its socket shut down) if the context
        owns it; when it still runs, :class:`InvalidOptionError` is raised.
        """
        task = self._closing
        if task is None:
            if self._conn.orphaned():
                # Its event loop has ended (connected in an earlier asyncio.run()):
                # nothing can run there, nats-py's close raised RuntimeError.
                self._publisher.abandon()
                if self._owns_connection:
                    await self._conn.close()  # shuts the socket down, marks it closed
                return
            task = self._closing = asyncio.ensure_future(self._close())
        elif task is asyncio.current_task():
            return  # a connection callback the close runs: waiting for itself hung
        await asyncio.shield(task)

    async def _close(self) -> None:
        closing = self._owns_connection and not self._conn.is_closed
        await self._publisher.aclose(unsubscribe=not closing)
        if closing:
            await self._conn.close()

    async def __aenter__(self) -> JetStreamContext:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ account

    async def account_info(self, *, timeout: float | timedelta | str | None = None) -> AccountInfo:
        """The account's JetStream usage, limits and API level (``api.level``)."""
        timeout = check_timeout(timeout)
        from ._models.account import AccountInfo

        info = await self._api.call_model(_api.ACCOUNT_INFO, AccountInfo, timeout=timeout)
        self._api.level = info.api.level
        return info

    async def api_level(self, *, timeout: float | timedelta | str | None = None) -> int:
        """The server's JetStream API level (from account info, fetched once and cached).

        Level 1 is nats-server 2.11 (per-message TTL, limit markers). In a
        cluster this is the meta leader's level (only it answers
        ``$JS.API.INFO``): a node of a mixed-version cluster may be older.
        """
        timeout = check_timeout(timeout)
        return await self._api.api_level(timeout)

    # ------------------------------------------------------------ streams

    async def create_stream(
        self,
        config: StreamConfig,
        *,
        pedantic: bool = False,
        timeout: float | timedelta | str | None = None,
    ) -> Stream:
        """Create a stream.

        Creating a stream that exists with the same configuration succeeds.

        ``allow_msg_ttl`` and ``subject_delete_marker_ttl`` (ADR-43) are checked
        before anything is sent, see :meth:`update_stream`.

        Args:
            config: the stream's configuration.
            pedantic: send the config unchanged with ``"pedantic": true``: the
                server refuses what it would otherwise adjust (nats-server >= 2.11).
            timeout: seconds the whole call may take (its requests share them).

        Raises:
            StreamNameInUseError: a stream of that name exists with another configuration.
            InvalidStreamConfigError: a marker TTL under 1 s or on a mirror.
            FeatureNotSupportedError: TTL settings or ``pedantic`` on nats-server < 2.11
                (a newer feature's setting below its level), before sending; or
                after it, a gated setting the server's reply lacks (an older node
                of a mixed-version cluster ignored it): the stream was created.

        """
        timeout = check_timeout(timeout)
        left = self._api.budget(timeout)
        to_send = await self._checked_stream_config(config, pedantic, left)
        return await self._send_stream(_api.STREAM_CREATE, to_send, pedantic, left)

    async def update_stream(
        self,
        config: StreamConfig,
        *,
        pedantic: bool = False,
        timeout: float | timedelta | str | None = None,
    ) -> Stream:
        """Update an existing stream's configuration.

        ADR-43 settings are checked before anything is sent:
        ``subject_delete_marker_ttl`` must be at least 1 second (``None``
        means off) and is refused on a mirror; either it or ``allow_msg_ttl``
        needs nats-server >= 2.11 (API level 1, read once per context); and
        ``allow_msg_ttl`` can be enabled but never disabled, so when the new
        config leaves it off the current config is read first.

        Unless ``pedantic``, setting either one also turns on
        ``allow_rollup_hdrs`` and turns off ``deny_purge`` in what is sent, and a
        marker TTL turns on ``allow_msg_ttl``; nothing is logged. With
        ``pedantic=True`` the config is sent unchanged with ``"pedantic": true``
        and the server refuses anything it would have adjusted.

        Changing ``retention`` from limits to interest removes at once every
        stored message no consumer still needs (all of them on a stream without
        consumers): create the consumers first.

        Args:
            config: the stream's new configuration.
            pedantic: send the config unchanged in the server's pedantic mode.
            timeout: seconds the whole call may take (its requests share them).

        Raises:
            StreamNotFoundError: the stream does not exist.
            InvalidStreamConfigError: a marker TTL under 1 s or on a mirror, or
                ``allow_msg_ttl`` would be disabled.
            FeatureNotSupportedError: TTL settings or ``pedantic`` on nats-server < 2.11.

        """
        timeout = check_timeout(timeout)
        left = self._api.budget(timeout)
        to_send = await self._checked_stream_config(config, pedantic, left)
        if self._may_disable_msg_ttl(to_send):
            await self._check_not_disabling(to_send, left)
        return await self._send_stream(_api.STREAM_UPDATE, to_send, pedantic, left)

    async def create_or_update_stream(
        self,
        config: StreamConfig,
        *,
        pedantic: bool = False,
        timeout: float | timedelta | str | None = None,
    ) -> Stream:
        """Update the stream if it exists, otherwise create it.

        The checks and ``pedantic`` are those of :meth:`update_stream`. When
        the config leaves ``allow_msg_ttl`` off, the current config is read
        first; if the stream does not exist it is created straight away.
        """
        timeout = check_timeout(timeout)
        left = self._api.budget(timeout)
        to_send = await self._checked_stream_config(config, pedantic, left)
        if self._may_disable_msg_ttl(to_send):
            try:
                await self._check_not_disabling(to_send, left)
            except StreamNotFoundError:
                return await self._send_stream(_api.STREAM_CREATE, to_send, pedantic, left)
        try:
            return await self._send_stream(_api.STREAM_UPDATE, to_send, pedantic, left)
        except StreamNotFoundError:
            return await self._send_stream(_api.STREAM_CREATE, to_send, pedantic, left)

    def _stream_body(self, config: StreamConfig) -> dict[str, Any]:
        if not isinstance(config, StreamConfig):
            raise InvalidOptionError(f"config must be a StreamConfig, got {type(config).__name__}")
        validate_name(config.name, "stream")
        check_config_ranges(config)  # times and durations the server would wrap or refuse
        return to_wire(config)

    async def _checked_stream_config(
        self, config: StreamConfig, pedantic: bool, left: _api.Left
    ) -> StreamConfig:
        """Validate ``config`` and return what to send (ADR-43 rules and defaults)."""
        if not isinstance(pedantic, bool):
            raise InvalidOptionError(f"pedantic must be a bool, got {shown(pedantic)}")
        if isinstance(config, StreamConfig):
            T.check_stream_config(config)  # first: a marker TTL is InvalidStreamConfigError
        self._stream_body(config)
        if pedantic or T.uses_ttl_settings(config):
            T.check_api_level(config, await self._level(left), pedantic=pedantic)
        for feature in F.stream_config_features(config):
            F.check_level(feature, await self._level(left))
        return T.apply_ttl_defaults(config, pedantic=pedantic)

    def _may_disable_msg_ttl(self, to_send: StreamConfig) -> bool:
        # A server below API level 1 has no per-message TTLs: nothing to disable.
        return T.may_disable_msg_ttl(to_send) and self._api.level != 0

    async def _level(self, left: _api.Left) -> int:
        """The API level: cached, or asked for within what is left of the call."""
        level = self._api.level
        return level if level is not None else await self._api.api_level(left())

    async def _check_not_disabling(self, to_send: StreamConfig, left: _api.Left) -> None:
        """Read the current config and refuse turning ``allow_msg_ttl`` off.

        Raises ``StreamNotFoundError`` when the stream does not exist.
        """
        current = await self._api.call_model(
            _api.STREAM_INFO, StreamInfo, timeout=left(), stream=to_send.name
        )
        _api.check_named("stream", to_send.name, current.config.name)
        T.check_not_disabling(current.config, to_send)

    async def _send_stream(
        self, template: str, to_send: StreamConfig, pedantic: bool, left: _api.Left
    ) -> Stream:
        body = T.request_body(self._stream_body(to_send), pedantic=pedantic)
        try:
            info = await self._api.call_model(
                template, StreamInfo, body, timeout=left(), stream=to_send.name
            )
        except StreamConfigError as exc:
            T.note_deny_purge_refusal(exc, to_send, pedantic=pedantic)
            raise
        _api.check_named("stream", to_send.name, info.config.name)
        dropped = F.stream_dropped(to_send, info.config)
        if dropped:
            done = "created" if template == _api.STREAM_CREATE else "updated"
            raise F.dropped_error(dropped, f"stream {to_send.name!r}", done, self._api.level)
        from ._stream import Stream

        return Stream(self._api, info)

    async def stream(self, name: str, *, timeout: float | timedelta | str | None = None) -> Stream:
        """A handle on an existing stream.

        Raises:
            StreamNotFoundError: the stream does not exist.

        """
        timeout = check_timeout(timeout)
        validate_name(name, "stream")
        info = await self._api.call_model(
            _api.STREAM_INFO, StreamInfo, timeout=timeout, stream=name
        )
        _api.check_named("stream", name, info.config.name)
        from ._stream import Stream

        return Stream(self._api, info)

    async def delete_stream(
        self, name: str, *, timeout: float | timedelta | str | None = None
    ) -> None:
        """Delete a stream and everything in it.

        Raises:
            StreamNotFoundError: the stream does not exist.

        """
        timeout = check_timeout(timeout)
        validate_name(name, "stream")
        await self._api.call(_api.STREAM_DELETE, timeout=timeout, stream=name)

    async def stream_name_by_subject(
        self, subject: str, *, timeout: float | timedelta | str | None = None
    ) -> str:
        """The name of the stream that captures ``subject``.

        Raises:
            StreamNotFoundError: no stream captures it.

        """
        timeout = check_timeout(timeout)
        validate_filter_subject(subject)
        reply = await self._api.call(_api.STREAM_NAMES, {"subject": subject}, timeout=timeout)
        names = reply.get("streams") or []
        if not names:
            raise StreamNotFoundError(404, 10059, f"no stream captures subject {subject!r}")
        return str(names[0])

    async def list_streams(
        self, subject: str | None = None, *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[StreamInfo]:
        """Async-iterate the info of every stream (all pages), optionally by subject."""
        timeout = check_timeout(timeout)
        body = self._subject_body(subject)
        async for item in _api.paged(self._api, _api.STREAM_LIST, "streams", body, timeout):
            yield _api.parse(StreamInfo, item)

    async def stream_names(
        self, subject: str | None = None, *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[str]:
        """Async-iterate the name of every stream (all pages), optionally by subject."""
        timeout = check_timeout(timeout)
        body = self._subject_body(subject)
        async for item in _api.paged(self._api, _api.STREAM_NAMES, "streams", body, timeout):
            yield str(item)

    @staticmethod
    def _subject_body(subject: str | None) -> dict[str, Any]:
        if subject is None:
            return {}
        return {"subject": validate_filter_subject(subject)}

    # ------------------------------------------------------------ consumers

    async def create_consumer(
        self, stream: str, config: ConsumerConfig, *, timeout: float | timedelta | str | None = None
    ) -> C.Consumer:
        """Create a consumer on ``stream``.

        Creating one that exists with the same configuration succeeds.

        Raises:
            ConsumerExistsError: a consumer of that name exists with another configuration.

        """
        timeout = check_timeout(timeout)
        from . import _consumer as C

        info = await C.upsert_consumer(self._api, stream, config, C.ACTION_CREATE, timeout)
        return C.Consumer(self._api, info)

    async def update_consumer(
        self, stream: str, config: ConsumerConfig, *, timeout: float | timedelta | str | None = None
    ) -> C.Consumer:
        """Update an existing consumer.

        Raises:
            ConsumerDoesNotExistError: there is no consumer of that name.

        """
        timeout = check_timeout(timeout)
        from . import _consumer as C

        info = await C.upsert_consumer(self._api, stream, config, C.ACTION_UPDATE, timeout)
        return C.Consumer(self._api, info)

    async def create_or_update_consumer(
        self, stream: str, config: ConsumerConfig, *, timeout: float | timedelta | str | None = None
    ) -> C.Consumer:
        """Create a consumer on ``stream``, or update it if it exists."""
        timeout = check_timeout(timeout)
        from . import _consumer as C

        info = await C.upsert_consumer(
            self._api, stream, config, C.ACTION_CREATE_OR_UPDATE, timeout
        )
        return C.Consumer(self._api, info)

    async def consumer(
        self, stream: str, name: str, *, timeout: float | timedelta | str | None = None
    ) -> C.Consumer:
        """A handle on an existing consumer.

        On a push consumer (one with a ``deliver_subject``: this library pulls)
        every pull raises :class:`InvalidOptionError` before sending; the
        calls that are not pulls (``info``, ``backlog``, ``pause``, ``reset``) work.

        Raises:
            ConsumerNotFoundError: the consumer does not exist.

        """
        timeout = check_timeout(timeout)
        from . import _consumer as C

        try:
            info = await C.consumer_info(self._api, stream, name, timeout)
        except StreamNotFoundError as exc:
            await self._note_swapped(exc, stream, name, timeout)
            raise
        return C.Consumer(self._api, info)

    async def _note_swapped(
        self, error: StreamNotFoundError, stream: str, name: str, timeout: float | None
    ) -> None:
        """``stream`` is missing: if ``name`` (the consumer) names a stream, say the order.

        ``js.consumer("worker", "ORDERS")`` said only ``stream 'worker' not found``.
        One look-up, on this error path only.
        """
        try:
            await self._api.call(_api.STREAM_INFO, timeout=timeout, stream=name)
        except JetStreamError:
            return  # no such stream either (or no answer): the error says enough
        error.args = (
            f"{error.args[0]}: {name!r}, given as the consumer, is a stream: the stream "
            "comes first, then the consumer (swapped arguments?)",
        )

    async def delete_consumer(
        self, stream: str, name: str, *, timeout: float | timedelta | str | None = None
    ) -> None:
        """Delete a consumer.

        Raises:
            ConsumerNotFoundError: the consumer does not exist.

        """
        timeout = check_timeout(timeout)
        from . import _consumer as C

        try:
            await C.delete_consumer(self._api, stream, name, timeout)
        except StreamNotFoundError as exc:
            await self._note_swapped(exc, stream, name, timeout)
            raise

    async def pause_consumer(
        self,
        stream: str,
        name: str,
        until: datetime | timedelta | float | str,
        *,
        timeout: float | timedelta | str | None = None,
    ) -> ConsumerPauseResponse:
        """Pause a consumer until ``until`` (see :meth:`Consumer.pause`); nats-server >= 2.11."""
        timeout = check_timeout(timeout)
        return await A.pause(self._api, stream, name, until, timeout)

    async def resume_consumer(
        self, stream: str, name: str, *, timeout: float | timedelta | str | None = None
    ) -> ConsumerPauseResponse:
        """Resume a paused consumer (see :meth:`Consumer.resume`)."""
        timeout = check_timeout(timeout)
        return await A.resume(self._api, stream, name, timeout)

    async def ordered_consumer(
        self,
        stream: str,
        config: OrderedConsumerConfig | None = None,
        *,
        timeout: float | timedelta | str | None = None,
    ) -> OrderedConsumer:
        """An ordered consumer on ``stream`` (ADR-17): in order, no gaps, no duplicates.

        The stream must exist. The server-side consumer is created on first use
        and recreated as needed; see :class:`OrderedConsumer`.

        Raises:
            StreamNotFoundError: the stream does not exist.

        """
        timeout = check_timeout(timeout)
        stream_obj = await self.stream(stream, timeout=timeout)
        return await stream_obj.ordered_consumer(config)

    def list_consumers(
        self, stream: str, *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[ConsumerInfo]:
        """Async-iterate the info of every consumer of ``stream`` (all pages)."""
        timeout = check_timeout(timeout)
        from . import _consumer as C

        return C.list_consumers(self._api, stream, timeout)

    def consumer_names(
        self, stream: str, *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[str]:
        """Async-iterate the names of every consumer of ``stream`` (all pages)."""
        timeout = check_timeout(timeout)
        from . import _consumer as C

        return C.consumer_names(self._api, stream, timeout)

    # ------------------------------------------------------------ key-value

    async def create_key_value(
        self, config: KeyValueConfig, *, timeout: float | timedelta | str | None = None
    ) -> KeyValue:
        """Create a key-value bucket: the stream ``KV_<bucket>`` (ADR-8; see ``docs/kv.md``).

        Creating a bucket that exists with the same configuration succeeds.

        Raises:
            StreamNameInUseError: the bucket exists with another configuration.
            FeatureNotSupportedError: ``limit_marker_ttl`` on nats-server < 2.11.

        """
        timeout = check_timeout(timeout)
        from . import _kv as KV

        return await KV.create_key_value(self, config, timeout)

    async def update_key_value(
        self, config: KeyValueConfig, *, timeout: float | timedelta | str | None = None
    ) -> KeyValue:
        """Update an existing bucket's configuration.

        Limit markers (``limit_marker_ttl``) can be enabled, never disabled.

        Raises:
            BucketNotFoundError: the bucket does not exist.
            KeyValueError: the config would disable limit markers.
            FeatureNotSupportedError: ``limit_marker_ttl`` on nats-server < 2.11.

        """
        timeout = check_timeout(timeout)
        from . import _kv as KV

        return await KV.update_key_value(self, config, timeout)

    async def create_or_update_key_value(
        self, config: KeyValueConfig, *, timeout: float | timedelta | str | None = None
    ) -> KeyValue:
        """Update the bucket if it exists (as :meth:`update_key_value`), otherwise create it."""
        timeout = check_timeout(timeout)
        from . import _kv as KV

        return await KV.create_or_update_key_value(self, config, timeout)

    async def key_value(
        self, bucket: str, *, timeout: float | timedelta | str | None = None
    ) -> KeyValue:
        """A handle on an existing bucket.

        Raises:
            BucketNotFoundError: the bucket does not exist.
            InvalidNameError: the bucket name is invalid.

        """
        timeout = check_timeout(timeout)
        from . import _kv as KV

        return await KV.key_value(self, bucket, timeout)

    async def delete_key_value(
        self, bucket: str, *, timeout: float | timedelta | str | None = None
    ) -> None:
        """Delete a bucket and everything in it.

        Raises:
            BucketNotFoundError: the bucket does not exist.

        """
        timeout = check_timeout(timeout)
        from . import _kv as KV

        await KV.delete_key_value(self, bucket, timeout)

    def key_value_store_names(
        self, *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[str]:
        """Async-iterate the names of the buckets (streams ``KV_*`` on ``$KV.*.>``)."""
        timeout = check_timeout(timeout)
        from . import _kv as KV

        return KV.key_value_store_names(self, timeout)

    # ------------------------------------------------------------ object store

    async def create_object_store(
        self, config: ObjectStoreConfig, *, timeout: float | timedelta | str | None = None
    ) -> ObjectStore:
        """Create an object store bucket: the stream ``OBJ_<bucket>`` (ADR-20).

        Creating a bucket that exists with the same configuration succeeds. See
        ``docs/object-store.md``.

        Raises:
            StreamNameInUseError: the bucket exists with another configuration.

        """
        timeout = check_timeout(timeout)
        from . import _object as OBJ

        return await OBJ.create_object_store(self, config, timeout)

    async def update_object_store(
        self, config: ObjectStoreConfig, *, timeout: float | timedelta | str | None = None
    ) -> ObjectStore:
        """Update an existing object store bucket's configuration.

        Raises:
            BucketNotFoundError: the bucket does not exist.

        """
        timeout = check_timeout(timeout)
        from . import _object as OBJ

        return await OBJ.update_object_store(self, config, timeout)

    async def object_store(
        self, bucket: str, *, timeout: float | timedelta | str | None = None
    ) -> ObjectStore:
        """A handle on an existing object store bucket.

        Raises:
            BucketNotFoundError: the bucket does not exist.
            InvalidNameError: the bucket name is invalid.

        """
        timeout = check_timeout(timeout)
        from . import _object as OBJ

        return await OBJ.object_store(self, bucket, timeout)

    async def delete_object_store(
        self, bucket: str, *, timeout: float | timedelta | str | None = None
    ) -> None:
        """Delete an object store bucket and every object in it.

        Raises:
            BucketNotFoundError: the bucket does not exist.

        """
        timeout = check_timeout(timeout)
        from . import _object as OBJ

        await OBJ.delete_object_store(self, bucket, timeout)

    def object_store_names(
        self, *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[str]:
        """Async-iterate the names of the object store buckets (streams ``OBJ_*`` on ``$O.*``)."""
        timeout = check_timeout(timeout)
        from . import _object as OBJ

        return OBJ.object_store_names(self, timeout)

    # ------------------------------------------------------------ counters

    def counter(self, stream: str) -> Counter:
        """The counters of the counter stream ``stream`` (ADR-49; nats-server >= 2.12).

        The stream needs ``allow_msg_counter=True`` (and ``allow_direct`` for
        ``get_many``); nothing is sent until the first call. See ``docs/counters.md``.

        Raises:
            InvalidNameError: the stream name is invalid.

        """
        from ._counter import Counter

        return Counter(self._api, stream)

    # ------------------------------------------------------------ publishing

    def _valid_subject(self, subject: str) -> str:
        """A publish subject, validated once per context (an exact str)."""
        valid = self._valid_subjects
        if type(subject) is not str or subject not in valid:
            subject = validate_publish_subject(subject)
            if len(valid) >= _SUBJECT_CACHE:
                valid.clear()
            valid.add(subject)
        return subject

    def _prepare(
        self,
        subject: str,
        payload: Payload,
        headers: dict[str, str] | None,
        msg_id: str | None,
        ttl: H.TTLInput | None,
        expected_stream: str | None,
        expected_last_sequence: int | None,
        expected_last_subject_sequence: int | None,
        expected_last_msg_id: str | None,
        codec: Codec | None = None,
    ) -> tuple[str, bytes, bytes | None]:
        """Validate a publish; return its subject (an exact str), payload and header block.

        The header block is None without headers.
        """
        subject = self._valid_subject(subject)
        if type(payload) is bytes and codec is None:
            data = payload
        else:
            data, headers = PC.encode(payload, codec, headers)
        if (
            headers is None
            and msg_id is None
            and ttl is None
            and expected_stream is None
            and expected_last_sequence is None
            and expected_last_subject_sequence is None
            and expected_last_msg_id is None
        ):
            block = None
        else:
            block = P.header_block(
                P.build_headers(
                    headers,
                    msg_id,
                    ttl,
                    expected_stream,
                    expected_last_sequence,
                    expected_last_subject_sequence,
                    expected_last_msg_id,
                )
            )
        limit = self._nc.max_payload
        if limit and len(data) + (len(block) if block else 0) > limit:
            P.check_size(self._conn, data, block)  # raises MaxPayloadExceededError
        return subject, data, block

    async def publish(
        self,
        subject: str,
        payload: Payload = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        ttl: H.TTLInput | None = None,
        expected_stream: str | None = None,
        expected_last_sequence: int | None = None,
        expected_last_subject_sequence: int | None = None,
        expected_last_msg_id: str | None = None,
        hold_when_full: float | timedelta | str | None = None,
        schedule: Schedule | None = None,
        schedule_target: str | None = None,
        schedule_ttl: H.TTLInput | None = None,
        timeout: float | timedelta | str | None = None,
        codec: Codec | None = None,
    ) -> PubAck:
        """Publish a message and wait for the stream's acknowledgement.

        Args:
            subject: where to publish (no wildcards, whitespace or control characters).
            payload: the message body: bytes-like; a pydantic model (encoded
                as JSON by its compiled serializer, with ``Content-Type:
                application/json`` unless ``headers`` set one); or any value
                with ``codec``. A ``str`` is refused (``text.encode()``).
            headers: extra headers (keys are RFC 7230 tokens; no CR, LF or NUL).
                A ``Nats-Msg-Id`` or ``Nats-Expected-Last-Msg-Id`` given here
                is checked as ``msg_id`` is.
            msg_id: ``Nats-Msg-Id`` for de-duplication within the stream's window;
                not empty, nor with whitespace around it (values are sent
                stripped: ``"a "`` would be the id ``"a"``).
            ttl: per-message TTL (ADR-43, nats-server >= 2.11, the stream needs
                ``allow_msg_ttl``): seconds, a ``timedelta``, a duration string
                such as ``"1h30m"`` or ``"1d"``, or ``"never"``; at least 1 s.
            expected_stream: the stream that must capture the subject.
            expected_last_sequence: the stream's last sequence must be this.
            expected_last_subject_sequence: the subject's last sequence must be this.
            expected_last_msg_id: the stream's last message id must be this.
            hold_when_full: Pulsar's ``producer_request_hold``: while the stream
                is full (``discard: new``, :class:`StreamFullError`), retry with
                jittered backoff, at most 20 attempts a second, for up to this
                many seconds, then raise the last :class:`StreamFullError`. The
                retries carry one ``Nats-Msg-Id`` (``msg_id``, or a generated
                one), so the message is never stored twice.
            schedule: publish a message schedule (ADR-51, nats-server >= 2.12;
                the stream needs ``allow_msg_schedules``): ``Schedule.at(dt)``,
                ``Schedule.every(interval)`` or ``Schedule.cron(expr,
                time_zone=None)``. ``subject`` is the schedule subject; the
                server publishes the message to ``schedule_target`` when due.
                See ``docs/schedules.md``.
            schedule_target: where the scheduled messages go: a subject of
                the same stream, without wildcards, not ``subject``.
            schedule_ttl: the TTL of each scheduled message (as ``ttl``; the
                stream needs ``allow_msg_ttl``).
            timeout: seconds the publish may take, its retries included (with
                ``hold_when_full``: each attempt of the hold). No responders
                is retried twice, 250 ms apart; "duplicate message id is in
                process" (err_code 10158: an earlier copy with this
                ``msg_id`` is still being stored) is asked again, 50 ms
                doubling to 1 s apart, until the copy's duplicate
                acknowledgement comes. A retry is made only while the
                timeout leaves room for it.
            codec: encodes ``payload`` (a :class:`Codec`, for example
                ``JsonCodec()`` or your msgpack codec); its ``content_type``,
                if it has one, is sent as ``Content-Type``.

        Raises:
            InvalidSubjectError: a bad subject, refused before anything is sent.
            InvalidHeaderError: a bad header, refused before anything is sent.
            InvalidTTLError: a bad ``ttl``, refused before anything is sent.
            InvalidScheduleError: a bad schedule, refused before anything is sent.
            InvalidOptionError: another bad argument (a blank or whitespace-edged
                msg id, a ``str`` payload, ...), refused before anything is sent.
            MaxPayloadExceededError: headers plus payload exceed the server's
                ``max_payload``, refused before anything is sent.
            NoRespondersError: no stream captures the subject.
            WrongLastSequenceError, WrongLastMsgIdError, StreamNotMatchError:
                an expectation did not hold.
            StreamFullError: the stream is full (after ``hold_when_full``).
            JetStreamTimeoutError: no acknowledgement in time.
            APIError: err_code 10158 still at the timeout (publish again with
                the same ``msg_id`` for the acknowledgement), or another refusal.

        """
        timeout = check_timeout(timeout)
        if schedule is not None or schedule_target is not None or schedule_ttl is not None:
            from . import _schedule as S

            headers = S.schedule_headers(subject, headers, schedule, schedule_target, schedule_ttl)
        hold = P.hold_seconds(hold_when_full)
        if hold is not None:
            msg_id = P.held_msg_id(msg_id, headers)
        subject, data, hdrs = self._prepare(
            subject,
            payload,
            headers,
            msg_id,
            ttl,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
            expected_last_msg_id,
            codec,
        )
        if schedule is not None:  # checked once the input is (the check may ask the server)
            at = schedule.spec.startswith("@at ")
            feature = F.SCHEDULES if at else F.SCHEDULE_PATTERNS
            timeout = await F.require(self._api, feature, timeout)  # (its time left)
        if ttl is not None:  # a server before 2.11 would store it and never expire it
            timeout = await F.require(self._api, F.MSG_TTL, timeout)
        wait = self._timeout if timeout is None else timeout
        if hold is None:
            return await P.publish(self._conn, subject, data, hdrs, wait)
        return await P.hold_when_full(
            lambda: P.publish(self._conn, subject, data, hdrs, wait), hold
        )

    async def publish_async(
        self,
        subject: str,
        payload: Payload = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        ttl: H.TTLInput | None = None,
        expected_stream: str | None = None,
        expected_last_sequence: int | None = None,
        expected_last_subject_sequence: int | None = None,
        expected_last_msg_id: str | None = None,
        hold_when_full: float | timedelta | str | None = None,
        schedule: Schedule | None = None,
        schedule_target: str | None = None,
        schedule_ttl: H.TTLInput | None = None,
        timeout: float | timedelta | str | None = None,
        codec: Codec | None = None,
    ) -> asyncio.Future[PubAck]:
        """Publish without waiting for the acknowledgement; return its future.

        Returns once the message is written, first waiting while
        ``publish_async_max_pending`` acknowledgements are outstanding. The
        future completes with a :class:`PubAck` or a typed error: the server's
        error, :class:`JetStreamTimeoutError` after ``timeout`` (the per-ack
        timeout), :class:`DisconnectedError` when the connection drops, or
        :class:`ConnectionClosedError` when the context closes. Arguments are
        those of :meth:`publish`. With ``hold_when_full`` the future completes
        once the message is stored or the hold time is up; held messages keep
        their place in the window, are sent again in publish order and share
        one backoff. A publish already sent when an earlier one is refused may
        be stored before it (docs/publishing.md, "Publishing into a full
        stream").
        """
        timeout = check_timeout(timeout)
        if schedule is not None or schedule_target is not None or schedule_ttl is not None:
            from . import _schedule as S

            headers = S.schedule_headers(subject, headers, schedule, schedule_target, schedule_ttl)
        hold = P.hold_seconds(hold_when_full)
        if hold is not None:
            msg_id = P.held_msg_id(msg_id, headers)
        subject, data, hdrs = self._prepare(
            subject,
            payload,
            headers,
            msg_id,
            ttl,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
            expected_last_msg_id,
            codec,
        )
        if schedule is not None:  # checked once the input is (the check may ask the server)
            at = schedule.spec.startswith("@at ")
            feature = F.SCHEDULES if at else F.SCHEDULE_PATTERNS
            timeout = await F.require(self._api, feature, timeout, default=False)
        if ttl is not None:  # a server before 2.11 would store it and never expire it
            timeout = await F.require(self._api, F.MSG_TTL, timeout, default=False)
        publisher = self._publisher
        if publisher.has_room:
            return publisher.send(subject, data, hdrs, timeout, hold)
        return await publisher.publish(subject, data, hdrs, timeout, hold)

    async def publish_many(
        self,
        subject: str | Sequence[str],
        payloads: Sequence[Payload],
        *,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        msg_ids: Sequence[str | None] | None = None,
        ttls: Sequence[H.TTLInput | None] | None = None,
        timeout: float | timedelta | str | None = None,
        codec: Codec | None = None,
    ) -> P.PublishSummary:
        """Publish many messages in order; return once every one is acknowledged.

        The bulk form of :meth:`publish_async` for loaders and pipelines: the
        messages share the asynchronous publish window
        (``publish_async_max_pending``) but get no future and no parsed
        :class:`PubAck` each, which makes it about twice as fast per message.
        ``await js.publish_many(...)`` is ``await (await
        js.publish_many_async(...))``.

        Args:
            subject: one subject for every message, or one per payload.
            payloads: the message bodies (bytes, bytearray or memoryview), or
                a ``pyarrow`` binary array (or chunked array) of them: its
                publishes are then built a batch at a time with pyarrow
                kernels, without a Python object per message (on the fast
                path, with no ``headers`` nor ``ttls``, and ``msg_ids`` none
                or all plain: printable ASCII without blanks). A null there
                is refused as a ``None`` payload is.
            headers: per message, extra headers or None (one entry per payload).
            msg_ids: per message, a ``Nats-Msg-Id`` or None (a list, or with
                Arrow payloads also a ``pyarrow`` string array).
            ttls: per message, a per-message TTL or None (as :meth:`publish`).
            timeout: each acknowledgement's deadline (default: the context's
                ``publish_async_timeout``); it also bounds each wait for room
                in the window.
            codec: encodes every payload (as for :meth:`publish`). Without
                it, pydantic models are encoded as JSON with ``Content-Type:
                application/json``.

        Returns:
            How many messages the stream acknowledged, and how many of them
            were duplicates.

        Raises:
            InvalidOptionError: sequences of different lengths, a ``str``
                payload; like the other client-side errors of :meth:`publish`
                (``InvalidSubjectError``, ``InvalidHeaderError``,
                ``InvalidTTLError``, ``MaxPayloadExceededError``), raised before
                anything is sent.
            JetStreamError: the first failed acknowledgement (the server's
                typed error, :class:`JetStreamTimeoutError`,
                :class:`DisconnectedError`, ...); messages sent before it may
                be stored (publish them again with msg ids to store none twice).

        """
        timeout = check_timeout(timeout)
        done = await self.publish_many_async(
            subject,
            payloads,
            headers=headers,
            msg_ids=msg_ids,
            ttls=ttls,
            timeout=timeout,
            codec=codec,
        )
        return await done

    async def publish_many_async(
        self,
        subject: str | Sequence[str],
        payloads: Sequence[Payload],
        *,
        headers: Sequence[Mapping[str, str] | None] | None = None,
        msg_ids: Sequence[str | None] | None = None,
        ttls: Sequence[H.TTLInput | None] | None = None,
        timeout: float | timedelta | str | None = None,
        codec: Codec | None = None,
    ) -> asyncio.Future[P.PublishSummary]:
        """Send many messages in order; return a future of their :class:`PublishSummary`.

        Returns once every message is sent (waiting for room in the window
        as needed), so calls made one after the other keep their messages in
        order while the acknowledgements of earlier calls are still coming.
        The future completes once all are acknowledged, or with the first
        failure as soon as it is known. Arguments and errors are those of
        :meth:`publish_many`; bad input raises here, before anything is sent,
        and a failure known while sending raises here too.
        """
        timeout = check_timeout(timeout)
        publisher = self._publisher
        if publisher.closed:
            raise ConnectionClosedError("the JetStream context is closed")
        arrow = _arrow_payloads(payloads)
        if arrow is not None:
            if headers is None and ttls is None and self._conn.fast:
                from . import _columns

                if msg_ids is not None and len(msg_ids) != len(arrow):
                    raise InvalidOptionError(
                        f"publish_many: msg_ids has {len(msg_ids)} entries "
                        f"for {len(arrow)} payloads"
                    )
                ids = None if msg_ids is None else _columns.plain_msg_ids(msg_ids)
                if msg_ids is None or ids is not None:
                    return await self._publish_arrow(subject, arrow, timeout, ids)
            payloads = arrow.to_pylist()
        if msg_ids is not None and not isinstance(msg_ids, Sequence):
            msg_ids = msg_ids.to_pylist()  # an Arrow column (the checks below are per id)
        count = len(payloads)
        for name, column in (("headers", headers), ("msg_ids", msg_ids), ("ttls", ttls)):
            if column is not None and len(column) != count:
                raise InvalidOptionError(
                    f"publish_many: {name} has {len(column)} entries for {count} payloads"
                )
        one: bytes | None = None
        many: list[bytes] | None = None
        if isinstance(subject, str):
            one = self._valid_subject(subject).encode()
        else:
            if len(subject) != count:
                raise InvalidOptionError(
                    f"publish_many: {len(subject)} subjects for {count} payloads"
                )
            many = [self._valid_subject(each).encode() for each in subject]
        data: Sequence[bytes]
        typed: list[Mapping[str, str] | None] | None = None
        if codec is None and all(type(p) is bytes for p in payloads):
            data = payloads  # type: ignore[assignment]
        else:
            data = []
            typed = []
            for i, p in enumerate(payloads):
                each, hdrs = PC.encode(p, codec, headers[i] if headers is not None else None)
                data.append(each)
                typed.append(hdrs)
            if all(h is None for h in typed):
                typed = None
        if typed is not None:
            headers = typed
        blocks: list[bytes | None] | None = None
        if headers is not None or msg_ids is not None or ttls is not None:
            blocks = [
                P.header_block(
                    P.build_headers(
                        headers[i] if headers is not None else None,
                        msg_ids[i] if msg_ids is not None else None,
                        ttls[i] if ttls is not None else None,
                        None,
                        None,
                        None,
                        None,
                    )
                )
                for i in range(count)
            ]
        P.check_sizes(self._conn, data, blocks)  # all of them, before the first is sent
        if ttls is not None and any(ttl is not None for ttl in ttls):
            # (A server before 2.11 keeps them.) The acks' deadline is the call's, probe included.
            timeout = await F.require(self._api, F.MSG_TTL, timeout, default=False)
        tally = P.AckTally()
        sent = 0
        while sent < count:
            room = await publisher.wait_for_room(timeout)
            if tally.error is not None:
                raise tally.error  # known meanwhile: send no more
            upto = min(count, sent + room)
            publisher.send_many(
                one,
                many[sent:upto] if many is not None else None,
                data[sent:upto],
                blocks[sent:upto] if blocks is not None else None,
                tally,
                timeout,
            )
            sent = upto
        if tally.error is not None:
            raise tally.error
        return asyncio.ensure_future(_summary(tally))

    async def _publish_arrow(
        self, subject: str | Sequence[str], data: Any, timeout: float | None, ids: Any = None
    ) -> asyncio.Future[P.PublishSummary]:
        """:meth:`publish_many_async` of an Arrow payload column (fast path, no headers).

        ``ids``: a ``Nats-Msg-Id`` per payload (``_columns.plain_msg_ids``), or None.
        """
        import pyarrow as pa

        from . import _columns

        publisher = self._publisher
        count = len(data)
        one: bytes | None = None
        many: Any = None
        encoded: list[bytes] = []
        if isinstance(subject, str):
            one = self._valid_subject(subject).encode()
            longest = one
        else:
            if len(subject) != count:
                raise InvalidOptionError(
                    f"publish_many: {len(subject)} subjects for {count} payloads"
                )
            encoded = [self._valid_subject(each).encode() for each in subject]
            many = pa.array(encoded, pa.binary())
            longest = max(encoded, key=len, default=b"")
        limit = self._conn.max_payload
        if limit and count and _columns.longest_message(data, ids) > limit:
            # The first one too large, with the message every publish gives.
            first = _columns.first_longer(data, ids, limit)
            block = None if ids is None else _columns.msg_id_block(ids[first].as_py())
            P.check_size(self._conn, data[first].as_py(), block)
        tally = P.AckTally()
        sent = 0
        while sent < count:
            room = await publisher.wait_for_room(timeout)
            if tally.error is not None:
                raise tally.error  # known meanwhile: send no more
            upto = min(count, sent + room)
            token, reply = publisher.next_span_reply()
            if len(longest) + len(reply) > MAX_SUBJECT_LINE:
                check_line(longest, reply)
            subjects = one if one is not None else many.slice(sent, upto - sent)
            commands, size = _columns.pub_commands(
                subjects,
                reply,
                data.slice(sent, upto - sent),
                None if ids is None else ids.slice(sent, upto - sent),
            )
            if one is not None:
                publisher.send_commands(token, commands, upto - sent, size, one, tally, timeout)
            else:
                label = encoded[sent]
                mixed = encoded[sent:upto].count(label) != upto - sent  # (a C loop)
                publisher.send_commands(
                    token, commands, upto - sent, size, label, tally, timeout, mixed
                )
            sent = upto
        if tally.error is not None:
            raise tally.error
        return asyncio.ensure_future(_summary(tally))

    async def publish_async_complete(self, timeout: float | timedelta | str | None = None) -> None:
        """Wait until every asynchronous publish has completed (acked or failed).

        Without ``timeout`` the wait ends when the last one does: each fails
        at its own ack deadline at the latest (``publish_async_timeout``, or
        its ``hold_when_full`` time), as nats.go's ``PublishAsyncComplete``.

        Raises:
            JetStreamTimeoutError: some were still pending after ``timeout``.

        """
        seconds = P.duration_seconds(timeout, "timeout")
        await self._publisher.complete(seconds)

    def atomic_batch(self, *, max_messages: int = 1000) -> AtomicBatch:
        """A new atomic batch publish (ADR-50; nats-server >= 2.12, stream ``allow_atomic``).

        ``await batch.add(...)`` messages, then ``ack = await batch.commit(...)``:
        the stream stores all of them or none. See :class:`AtomicBatch` and
        ``docs/atomic-batch.md``.

        Args:
            max_messages: the most messages a batch may hold, checked before
                sending: the server's limit, 1,000 unless its configuration
                (``jetstream.limits.batch.max_msgs``) raises it.

        Raises:
            InvalidOptionError: ``max_messages`` is not an int >= 1.

        """
        from ._batch import AtomicBatch

        return AtomicBatch(self._api, max_messages=max_messages)

    async def cancel_schedule(
        self, subject: str, *, timeout: float | timedelta | str | None = None
    ) -> bool:
        """Cancel the message schedule published on ``subject`` (ADR-51; nats-server >= 2.12).

        Reads the last message on ``subject`` in the stream that captures it;
        when that is a schedule (it has a ``Nats-Schedule`` header), purges the
        subject up to it, which stops the schedule. Returns whether there was a
        schedule to remove (False: the subject holds nothing).

        Raises:
            InvalidSubjectError: ``subject`` is not a plain subject.
            InvalidOptionError: the last message on ``subject`` is no schedule
                (say, the schedule's target subject was given): nothing is purged.
            StreamNotFoundError: no stream captures ``subject``.
            FeatureNotSupportedError: the server is older than 2.12.

        """
        timeout = check_timeout(timeout)
        from . import _schedule as S
        from ._stream import stored_message

        subject = validate_publish_subject(subject)
        timeout = await F.require(self._api, F.SCHEDULES, timeout)
        name = await self.stream_name_by_subject(subject, timeout=timeout)
        try:
            reply = await self._api.call(
                _api.STREAM_MSG_GET, {"last_by_subj": subject}, timeout=timeout, stream=name
            )
        except MessageNotFoundError:
            return False
        last = stored_message(reply)
        if S.SCHEDULE not in (last.headers or {}):
            raise InvalidOptionError(
                f"{subject!r} holds no schedule: its last message (sequence {last.seq} of "
                f"stream {name!r}) has no {S.SCHEDULE} header; nothing was purged"
            )
        reply = await self._api.call(
            _api.STREAM_PURGE,
            {"filter": subject, "seq": last.seq + 1},
            timeout=timeout,
            stream=name,
        )
        return int(reply.get("purged", 0)) > 0

    @property
    def publish_async_pending(self) -> int:
        """How many asynchronous publishes still await their acknowledgement."""
        return self._publisher.pending


async def connect(
    servers: str | list[str] = "nats://127.0.0.1:4222",
    *,
    domain: str | None = None,
    api_prefix: str = _api.DEFAULT_API_PREFIX,
    timeout: float | timedelta | str = DEFAULT_TIMEOUT,
    publish_async_max_pending: int = DEFAULT_MAX_PENDING,
    publish_async_timeout: float | timedelta | str | None = None,
    telemetry: bool = False,
    **nats_options: Any,
) -> JetStreamContext:
    """Connect to NATS and return a :class:`JetStreamContext` that owns the connection.

    ``nats_options`` go to ``nats.connect``; its duration options
    (``ping_interval``, ``reconnect_time_wait``, ``connect_timeout``,
    ``drain_timeout``, ``flush_timeout``) take every duration form of the
    library (``"500ms"``, a ``timedelta``), and they and its counts are checked
    before anything connects (:class:`InvalidOptionError`). Unless given, ``ping_interval`` is
    5 s and ``max_outstanding_pings`` 2, so a hung server is noticed within
    15 s; a reconnect never starts with the server just lost (a hung one
    would hold it for ``connect_timeout``) and never waits to flush the
    connection it gives up; a ``tls://`` URL always uses TLS, and so does
    every server when a TLS option (``tls``, ``tls_hostname``,
    ``tls_handshake_first``) is given. ``disconnected_cb`` runs once per
    lost connection (nats-py alone ran it again when closing a client whose
    connection was already lost).
    Close with ``await js.close()`` or ``async with await
    aiojetstream.connect(...) as js:``.

    ``telemetry=True`` turns on OpenTelemetry traces and metrics with the global
    providers (:func:`aiojetstream.otel.instrument`; needs the ``otel`` extra:
    without it, :class:`InvalidOptionError` before anything connects).
    """
    instrument = _instrumenter() if telemetry else None
    nc = await connect_nats(servers, **nats_options)
    try:
        js = JetStreamContext(
            nc,
            domain=domain,
            api_prefix=api_prefix,
            timeout=timeout,
            publish_async_max_pending=publish_async_max_pending,
            publish_async_timeout=publish_async_timeout,
        )
    except BaseException:
        await Conn(nc).close()  # an invalid option: leave no connection behind
        raise
    js._owns_connection = True
    if instrument is not None:
        try:
            instrument(js)
        except BaseException:
            await js.close()  # the caller gets no context to close
            raise
    return js


def _instrumenter() -> Callable[[JetStreamContext], object]:
    """``aiojetstream.otel.instrument``, imported before connecting.

    Raises:
        InvalidOptionError: OpenTelemetry is not installed (the ``otel`` extra).

    """
    try:
        from .otel import instrument
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("opentelemetry"):
            raise
        raise InvalidOptionError(
            f"telemetry=True needs OpenTelemetry ({exc.name} is not installed): "
            "pip install 'aiojetstream[otel]'"
        ) from exc
    return instrument

"""Key-value and object-store spans, and the reconnect counter."""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import (
    Link,
    SpanKind,
)

from .._message import Msg
from .consuming import ConsumerState
from .telemetry import (
    OBJECT_PUT,
    READ,
    SYSTEM,
    WATCH,
    Telemetry,
    end_span,
    failed,
    record_error,
    start_span,
)

if TYPE_CHECKING:
    from .._conn import Conn
    from .._watch import Reader
    from .telemetry import Metrics


#: The send span of the object-store put running in this task, for its own
#: publishes (:class:`_PutPublishes`): the user's code the put runs (its data
#: iterator, a file's ``read``) publishes as usual.
PUTTING: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "aiojetstream_otel_putting", default=None
)


class _PutPublishes:
    """An object store's context, its publishes marked as the running put's (:data:`OBJECT_PUT`).

    The store publishes its chunks and info through it; everything else is
    the context's. :data:`OBJECT_PUT` is set only for these calls, not while
    the put awaits the user's data.
    """

    __slots__ = ("_context",)

    def __init__(self, js: Any) -> None:
        self._context = js

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def publish(self, *args: Any, **kwargs: Any) -> Any:
        span = PUTTING.get()
        if span is None:
            return await self._context.publish(*args, **kwargs)
        token = OBJECT_PUT.set(span)
        try:
            return await self._context.publish(*args, **kwargs)
        finally:
            OBJECT_PUT.reset(token)

    async def publish_async(self, *args: Any, **kwargs: Any) -> Any:
        span = PUTTING.get()
        if span is None:
            return await self._context.publish_async(*args, **kwargs)
        token = OBJECT_PUT.set(span)
        try:
            return await self._context.publish_async(*args, **kwargs)
        finally:
            OBJECT_PUT.reset(token)


class Batch:
    """What a traced one-shot read saw: how many messages, and links to their writes.

    Links are taken as the messages come (their headers are not kept), up to
    ``max_links`` (the tracer's span limit): a read of a large bucket holds
    no more than the span can carry.
    """

    __slots__ = ("count", "links", "max_links", "propagation")

    def __init__(self, tel: Telemetry) -> None:
        self.count = 0
        self.links: list[Link] = []
        self.propagation = tel.propagation
        limits = getattr(tel.tracer, "_span_limits", None)
        found = getattr(limits, "max_links", None)
        self.max_links = found if isinstance(found, int) and found >= 0 else 128

    def add(self, headers: Mapping[str, str] | None) -> None:
        """One more message read (with its headers)."""
        self.count += 1
        if headers and len(self.links) < self.max_links:
            try:
                sent, _ = self.propagation.extract(headers, False)
            except Exception:  # a failing propagator: the message was read, the read goes on
                failed("extracting a trace context")
                return
            if sent is not None:
                self.links.append(Link(sent))


#: The batch a traced one-shot read (key-value ``keys`` / ``history``,
#: object-store ``list``) counts the messages its reader hands out into.
BATCH: contextvars.ContextVar[Batch | None] = contextvars.ContextVar(
    "aiojetstream_otel_batch", default=None
)


def _read_attrs(operation: str, subject: str, stream: str) -> dict[str, Any]:
    """The attributes every key-value or object-store read span starts with."""
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": subject,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
        "messaging.nats.stream": stream,
    }


class Stores:
    """Key-value buckets and object stores of an instrumented context.

    * A key-value write is a publish: its send span and trace context come from
      the traced ``publish``.
    * A key-value ``get`` is a ``process <subject>`` span, linked to (or, with
      ``parent=True``, the child of) the send span of the revision it returns.
    * An object-store ``put`` is one ``send`` span: its chunks are published
      without spans of their own, and its info (the meta message) carries the
      put's trace context. ``messaging.batch.message_count`` is the number of
      chunks, ``messaging.message.body.size`` the object's size.
    * An object-store ``get`` is a ``process`` span linked to the put that
      stored the object's info.
    * Every entry or info a ``watch`` yields is a ``process`` span linked to its
      write (consumer label ``(watch)``).
    * A one-shot read of many messages (key-value ``keys`` and ``history``,
      object-store ``list``) is one ``receive`` span over the read (CONSUMER,
      ``messaging.batch.message_count`` the messages read), linked to the write
      of each message it read (as far as the SDK's link limit goes).
    """

    def __init__(self, tel: Telemetry) -> None:
        self.tel = tel

    def _read_span(
        self,
        subject: str,
        stream: str,
        started: int,
        headers: Mapping[str, str] | None,
        attrs: dict[str, Any],
        exc: BaseException | None = None,
    ) -> None:
        """Record the ``process`` span of a get that ended (with ``exc`` when it failed).

        A failing span processor, sampler or propagator is logged, not raised:
        the get's value (or its own error) reaches the caller either way.
        """
        tel = self.tel
        try:
            links = None
            parent = None
            if headers:
                sent, parent = tel.propagation.extract(headers, tel.parent)
                if sent is not None and parent is None:
                    links = [Link(sent)]
            span = tel.tracer.start_span(
                f"process {subject}",
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes={**_read_attrs("process", subject, stream), **attrs},
                links=links,
                start_time=started,
            )
            if exc is not None:
                record_error(span, exc)
            span.end()
        except Exception:
            failed("recording a process span")

    def _batch_span(
        self,
        subject: str,
        stream: str,
        started: int,
        seen: Batch,
        exc: BaseException | None,
    ) -> None:
        """End the ``receive`` span of a one-shot read that handed out ``seen``'s messages.

        A failing span processor or sampler is logged, not raised: the read's
        result (or its own error) reaches the caller either way.
        """
        tel = self.tel
        try:
            span = tel.tracer.start_span(
                f"receive {subject}",
                kind=SpanKind.CLIENT,
                attributes={
                    **_read_attrs("receive", subject, stream),
                    "messaging.batch.message_count": seen.count,
                },
                links=seen.links,
                start_time=started,
            )
            if exc is not None:
                record_error(span, exc)
            span.end()
        except Exception:
            failed("recording a receive span")

    @staticmethod
    def _collecting(make: Callable[..., Reader]) -> Callable[..., Reader]:
        """``make`` (a handle's ``_reader``), its readers reporting their messages' headers.

        Only readers made inside a traced one-shot read (:data:`BATCH` set) report.
        """

        def traced_reader(*args: Any, **kwargs: Any) -> Reader:
            reader = make(*args, **kwargs)
            seen = BATCH.get()
            if seen is not None:
                next_item = reader.next

                async def traced_next() -> Any:
                    item = await next_item()
                    if isinstance(item, Msg):
                        seen.add(item.headers)
                    return item

                reader.next = traced_next  # type: ignore[method-assign]
            return reader

        return traced_reader

    async def _read_once(self, subject: str, stream: str, read: Callable[[], Any]) -> Any:
        """Await ``read()`` (a one-shot read) inside its ``receive`` span."""
        started = time.time_ns()
        seen = Batch(self.tel)
        token = BATCH.set(seen)
        try:
            result = await read()
        except BaseException as exc:
            self._batch_span(subject, stream, started, seen, exc)
            raise
        finally:
            BATCH.reset(token)
        self._batch_span(subject, stream, started, seen, None)
        return result

    async def _iterate_once(
        self, subject: str, stream: str, items: AsyncGenerator[Any, None]
    ) -> AsyncGenerator[Any, None]:
        """Yield what ``items`` (a one-shot read) yields, inside its ``receive`` span.

        The span covers the read from the first step to the last (or to an
        early ``aclose``); the collecting context is set only while ``items``
        runs, not while the caller handles what it yielded.
        """
        started = time.time_ns()
        seen = Batch(self.tel)
        failed: BaseException | None = None
        try:
            while True:
                token = BATCH.set(seen)
                try:
                    item = await items.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    BATCH.reset(token)
                yield item
        except GeneratorExit:  # the caller stopped early (aclose): no error
            raise
        except BaseException as exc:
            failed = exc
            raise
        finally:
            try:
                await items.aclose()
            finally:
                self._batch_span(subject, stream, started, seen, failed)

    def _watched(self, watcher: Any, stream: str) -> Any:
        state = ConsumerState(self.tel, stream, WATCH)
        item = watcher._item

        def traced_item(msg: Msg) -> Any:
            made = item(msg)
            if made is not None:
                # Neither raises (a failing span is logged): the message was taken,
                # an exception here would lose its entry.
                state.start_process(msg)
                state.end(msg)  # nothing settles it: a mark of the delivery
            return made

        watcher._item = traced_item
        return watcher

    def key_value(self, kv: Any) -> Any:
        """Trace the reads of the key-value handle ``kv`` (its writes are publishes)."""
        if getattr(kv, "_telemetry", None) is not None:
            return kv
        kv._telemetry = self.tel
        stream = kv.stream.name
        get, found, watch = kv.get, kv._found, kv.watch

        def traced_found(
            key: str,
            subject: str,
            revision: Any,
            found_subject: str,
            seq: int,
            headers: Mapping[str, str] | None,
            *rest: Any,
        ) -> Any:
            reads = READ.get()
            if reads is not None:
                reads.append(headers)
            return found(key, subject, revision, found_subject, seq, headers, *rest)

        async def traced_get(key: str, *args: Any, **kwargs: Any) -> Any:
            started = time.time_ns()
            reads: list[Mapping[str, str] | None] = []
            token = READ.set(reads)
            try:
                entry = await get(key, *args, **kwargs)
            except BaseException as exc:
                self._read_span(kv._prefix + str(key), stream, started, None, {}, exc)
                raise
            finally:
                READ.reset(token)
            self._read_span(
                kv._prefix + entry.key,
                stream,
                started,
                reads[-1] if reads else None,
                {
                    "messaging.message.id": str(entry.revision),
                    "messaging.nats.message.sequence": entry.revision,
                    "messaging.message.body.size": len(entry.value),
                },
            )
            return entry

        def traced_watch(*args: Any, **kwargs: Any) -> Any:
            return self._watched(watch(*args, **kwargs), stream)

        history, keys = kv.history, kv.keys

        async def traced_history(key: str, *args: Any, **kwargs: Any) -> Any:
            return await self._read_once(
                kv._prefix + str(key), stream, lambda: history(key, *args, **kwargs)
            )

        def traced_keys(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
            return self._iterate_once(kv._prefix + ">", stream, keys(*args, **kwargs))

        kv._found = traced_found
        kv._reader = self._collecting(kv._reader)
        kv.get = traced_get
        kv.watch = traced_watch
        kv.history = traced_history
        kv.keys = traced_keys
        return kv

    def object_store(self, store: Any) -> Any:
        """Trace the puts, gets and watches of the object store ``store``."""
        if getattr(store, "_telemetry", None) is not None:
            return store
        store._telemetry = self.tel
        tel = self.tel
        put, get, watch = store.put, store.get, store.watch

        async def traced_put(name: Any, *args: Any, **kwargs: Any) -> Any:
            stream = store.stream.name
            span = start_span(
                tel,
                f"send {stream}",
                SpanKind.PRODUCER,
                {
                    "messaging.system": SYSTEM,
                    "messaging.operation.name": "send",
                    "messaging.operation.type": "send",
                    "messaging.nats.stream": stream,
                },
            )
            token = PUTTING.set(span)  # (OBJECT_PUT: around the store's own publishes only)
            try:
                info = await put(name, *args, **kwargs)
            except BaseException as exc:
                record_error(span, exc)
                end_span(span)  # the error raised is the put's, not the span's
                raise
            finally:
                PUTTING.reset(token)
            span.set_attributes(
                {
                    "messaging.batch.message_count": info.chunks,
                    "messaging.message.body.size": info.size,
                }
            )
            tel.of(stream).sent += info.chunks + 1
            end_span(span)  # the object was stored: a failing span must not say otherwise
            return info

        async def traced_get(name: Any, *args: Any, **kwargs: Any) -> Any:
            stream = store.stream.name
            started = time.time_ns()
            reads: list[Mapping[str, str] | None] = []
            token = READ.set(reads)
            try:
                result = await get(name, *args, **kwargs)
            except BaseException as exc:
                self._read_span(f"$O.{store.bucket}.M", stream, started, None, {}, exc)
                raise
            finally:
                READ.reset(token)
            info = result.info
            # The store actually read: a link's target may be in another bucket.
            target = result._store
            self._read_span(
                target._meta_subject(info.name),
                target.stream.name,
                started,
                reads[-1] if reads else None,
                {
                    "messaging.batch.message_count": info.chunks,
                    "messaging.message.body.size": info.size,
                },
            )
            return result

        def traced_watch(*args: Any, **kwargs: Any) -> Any:
            return self._watched(watch(*args, **kwargs), store.stream.name)

        listing = store.list

        def traced_list(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
            return self._iterate_once(
                store._meta_prefix + ">", store.stream.name, listing(*args, **kwargs)
            )

        if not isinstance(store._js, _PutPublishes):
            store._js = _PutPublishes(store._js)
        store._reader = self._collecting(store._reader)
        store.put = traced_put
        store.get = traced_get
        store.watch = traced_watch
        store.list = traced_list
        return store


class Reconnects:
    """A connection listener counting the reconnects of one connection.

    One per connection and meter provider (:class:`Metrics`), however many
    instrumented contexts share the connection: each reconnect is counted
    once. Taken with :meth:`hold`, given back with :meth:`release` (the last
    context closed removes it).
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.users = 0  # the instrumented contexts holding it

    @classmethod
    def hold(cls, metrics: Metrics, conn: Conn) -> Reconnects:
        """The listener of ``conn`` counting into ``metrics``, listening (made if need be)."""
        with metrics.lock:
            listener: Reconnects | None = metrics.reconnects.get(conn.nc)
            if listener is None:
                listener = metrics.reconnects[conn.nc] = cls(metrics)
            listener.users += 1
        conn.add_listener(listener)
        return listener

    def release(self, conn: Conn) -> None:
        """A context holding it closed: the last one stops the listening."""
        with self.metrics.lock:
            self.users -= 1
            last = self.users <= 0
            if last and self.metrics.reconnects.get(conn.nc) is self:
                del self.metrics.reconnects[conn.nc]
        if last:
            conn.remove_listener(self)

    def on_disconnected(self) -> None:
        """Nothing is counted on a disconnect."""

    def on_reconnected(self) -> None:
        """Count a reconnect."""
        self.metrics.of(None).reconnects += 1

    def on_closed(self) -> None:
        """Nothing is counted on close."""

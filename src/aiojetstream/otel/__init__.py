"""OpenTelemetry traces and metrics for a :class:`JetStreamContext` (extra ``otel``).

Off by default. :func:`instrument` (or ``connect(..., telemetry=True)``) turns
it on for one context: it replaces, on that instance only, the publish methods
and the methods that hand out consumers with traced versions. Nothing else
changes, so a context that is not instrumented pays nothing, and
``opentelemetry`` is imported only in this package (``import aiojetstream`` never does).

Spans follow OpenTelemetry's messaging semantic conventions
(``messaging.system`` = ``nats``):

* ``send <subject>`` (PRODUCER) per ``publish`` / ``publish_async`` and per
  ``publish_many`` / ``publish_many_async`` batch
  (``messaging.batch.message_count``; ended when the whole batch is acknowledged);
* ``receive <stream>`` (CLIENT) per ``fetch`` / ``fetch_bytes`` /
  ``fetch_no_wait`` / ``next``, ended when the batch ends;
* ``process <subject>`` (CONSUMER) per message taken from ``messages()`` or a
  fetched batch, or handed to a ``consume()`` handler; ended by its ack, nak or
  term (with ``AckPolicy.ALL`` an ack settles the earlier ones too), when the
  next message is taken (for ``collect()``: the next fetch), when the handler
  returns, or when the context is closed; at once where nothing can settle
  it (ordered and AckNone consumers) and no next message follows.

* key-value: ``process <subject>`` per ``get`` and per entry a ``watch``
  yields (writes are publishes: send spans);
* object store: one ``send`` span per ``put`` (chunk count and size; its
  context in the object's info, no span per chunk), ``process`` per ``get``
  and per info a ``watch`` yields.

The trace context travels in the ``traceparent`` / ``tracestate`` headers
through the globally configured propagator (written and read directly when
it is the default W3C one and there is no baggage); a process span is linked
to the send span (or its child with ``parent=True``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

try:
    from .consuming import instrument_consumer
    from .publishing import Publishing
    from .stores import Reconnects, Stores
    from .telemetry import READ, Telemetry
except ModuleNotFoundError as exc:  # no otel extra: say which to install
    from .._extras import missing_extra

    error = missing_extra(exc, __name__, "otel")
    if error is None:
        raise
    raise error from exc

if TYPE_CHECKING:
    from .._context import JetStreamContext

__all__ = ["instrument"]

# Methods of JetStreamContext and Stream that return a Consumer.
_CONSUMER_METHODS = ("consumer", "create_consumer", "update_consumer", "create_or_update_consumer")
# Methods of JetStreamContext that return a Stream (whose consumers are traced too).
_STREAM_METHODS = ("stream", "create_stream", "update_stream", "create_or_update_stream")
# Methods of JetStreamContext that return a KeyValue, and an ObjectStore.
_KV_METHODS = ("key_value", "create_key_value", "update_key_value", "create_or_update_key_value")
_OBJECT_METHODS = ("object_store", "create_object_store", "update_object_store")
# The name prefixes of the buckets' backing streams.
_BUCKET_PREFIXES = ("KV_", "OBJ_")
# Methods of JetStreamContext that delete a stream, and the prefix of its name.
_STREAM_DELETES = (
    ("delete_stream", ""),
    ("delete_key_value", "KV_"),
    ("delete_object_store", "OBJ_"),
)


def instrument(
    js: JetStreamContext,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    parent: bool = False,
) -> JetStreamContext:
    """Turn on OpenTelemetry traces and metrics for ``js``; return it.

    Args:
        js: the context to instrument (idempotent: a second call does nothing).
        tracer_provider: the ``TracerProvider`` (default: the global one).
        meter_provider: the ``MeterProvider`` (default: the global one).
        parent: make a process span the child of the send span it continues
            (default: linked to it, as the messaging conventions recommend).

    Consumers obtained from ``js`` afterwards (``consumer``, ``create_consumer``,
    ``update_consumer``, ``create_or_update_consumer``, ``ordered_consumer``, and
    the same methods of the :class:`Stream` handles ``js`` returns) are traced
    too; a bucket's backing stream (``KV_``, ``OBJ_``) keeps its handle's
    ``ordered_consumer`` (the stores' reads, traced as those).

    """
    if getattr(js, "_telemetry", None) is not None:
        return js
    tel = Telemetry(tracer_provider, meter_provider, parent)
    js._telemetry = tel  # type: ignore[attr-defined]
    publishing = Publishing(js, tel)
    js.publish = publishing.traced_publish  # type: ignore[method-assign]
    js.publish_async = publishing.traced_publish_async  # type: ignore[method-assign]
    js.publish_many = publishing.traced_publish_many  # type: ignore[method-assign]
    js.publish_many_async = publishing.traced_publish_many_async  # type: ignore[method-assign]

    def traced_getter(method: Callable[..., Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            return instrument_consumer(await method(*args, **kwargs), tel)

        return get

    def traced_ordered_of(method: Callable[..., Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            return instrument_consumer(await method(*args, **kwargs), tel, ordered=True)

        return get

    def traced_stream(method: Callable[..., Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            stream = await method(*args, **kwargs)
            for name in _CONSUMER_METHODS:
                setattr(stream, name, traced_getter(getattr(stream, name)))
            if not stream.name.startswith(_BUCKET_PREFIXES):
                # (a bucket's ordered consumers are its reads and watches, traced as those)
                stream.ordered_consumer = traced_ordered_of(stream.ordered_consumer)
            last_msg = stream.get_last_msg_for_subject

            async def traced_last_msg(*args: Any, **kwargs: Any) -> Any:
                msg = await last_msg(*args, **kwargs)
                reads = READ.get()
                if reads is not None:  # an object-store get: the info's headers
                    reads.append(msg.headers)
                return msg

            stream.get_last_msg_for_subject = traced_last_msg
            stream_delete = stream.delete_consumer

            async def traced_stream_delete(name: str, *args: Any, **kwargs: Any) -> None:
                await stream_delete(name, *args, **kwargs)
                tel.deleted(stream.name, name)

            stream.delete_consumer = traced_stream_delete
            return stream

        return get

    stores = Stores(tel)

    def traced_store(method: Callable[..., Any], wrap: Callable[[Any], Any]) -> Callable[..., Any]:
        async def get(*args: Any, **kwargs: Any) -> Any:
            return wrap(await method(*args, **kwargs))

        return get

    for name in _CONSUMER_METHODS:
        setattr(js, name, traced_getter(getattr(js, name)))
    for name in _STREAM_METHODS:
        setattr(js, name, traced_stream(getattr(js, name)))
    for name in _KV_METHODS:
        setattr(js, name, traced_store(getattr(js, name), stores.key_value))
    for name in _OBJECT_METHODS:
        setattr(js, name, traced_store(getattr(js, name), stores.object_store))
    delete_consumer = js.delete_consumer

    async def traced_delete(stream: str, name: str, *args: Any, **kwargs: Any) -> None:
        await delete_consumer(stream, name, *args, **kwargs)
        tel.deleted(stream, name)  # its gauges go now, its counts after the next collection

    js.delete_consumer = traced_delete  # type: ignore[method-assign]

    def traced_stream_gone(method: Callable[..., Any], prefix: str) -> Callable[..., Any]:
        async def delete(name: str, *args: Any, **kwargs: Any) -> None:
            await method(name, *args, **kwargs)
            tel.deleted(prefix + name)  # the counts of its publishes and consumers go

        return delete

    for name, prefix in _STREAM_DELETES:
        setattr(js, name, traced_stream_gone(getattr(js, name), prefix))
    # (through the traced stream handle's, or on a bucket's stream: instrumented once)
    js.ordered_consumer = traced_ordered_of(js.ordered_consumer)  # type: ignore[method-assign]

    conn = js._conn
    # One per connection and meter provider: contexts sharing a connection count it once.
    listener = Reconnects.hold(tel.metrics, conn)
    held = [listener]
    close = js.close

    async def traced_close() -> None:
        try:
            await close()
        finally:
            if held:
                held.pop().release(conn)
            tel.end_open()  # nothing can settle a message any more

    js.close = traced_close  # type: ignore[method-assign]
    return js

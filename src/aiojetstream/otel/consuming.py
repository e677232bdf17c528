"""Receive and process spans, consume metrics: traced consumers and their acks."""

from __future__ import annotations

import asyncio
import heapq
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    SpanKind,
)

from .._errors import PayloadValidationError
from .._message import ACK, NAK, TERM, parse_metadata
from .._status import parse_status
from .telemetry import (
    CACHE,
    EPHEMERAL,
    MAX_OPEN,
    ORDERED,
    SYSTEM,
    Telemetry,
    end_span,
    failed,
    record_error,
    start_span,
)

#: The context a consume() handler's process span starts in without a parent:
#: none (not the context consume() was called in, which its task copied).
EMPTY = otel_context.Context()

if TYPE_CHECKING:
    from .._message import Msg


def ack_numbers(reply: bytes) -> tuple[int, int, int] | None:
    """Delivery count, stream sequence and pending of a v1 ``$JS.ACK`` reply; None otherwise.

    The v1 form (9 tokens, what nats-server writes without a domain) is read
    here without building a ``MsgMetadata``; any other goes to ``msg.metadata``.
    """
    tokens = reply.split(b".")
    if len(tokens) != 9 or tokens[0] != b"$JS" or tokens[1] != b"ACK":
        return None
    delivered, seq, pending = tokens[4], tokens[5], tokens[8]
    if not (delivered.isdigit() and seq.isdigit() and pending.isdigit()):
        return None
    if max(len(delivered), len(seq), len(pending)) > 20:  # no uint64 (int() refuses 4,301)
        return None
    return int(delivered), int(seq), int(pending)


def stream_sequence(reply: bytes) -> int | None:
    """The stream sequence of a ``$JS.ACK`` reply subject; None when it is not one."""
    numbers = ack_numbers(reply)
    if numbers is not None:
        return numbers[1]
    try:
        return parse_metadata(reply).sequence.stream
    except Exception:
        return None


class ConsumerState:
    """The open process spans and the labels of one instrumented consumer.

    A process span is open (in :attr:`open`) from the moment its message is
    taken until it is settled (ack, nak, term; with ``AckPolicy.ALL`` an ack
    settles every message up to its stream sequence too, as the server
    does), the next message is taken, the messages of a ``collect()``, the
    message of a ``next()`` or the last one of a batch left early are
    followed by another fetch or ``next()`` (or ``messages()``,
    ``consume()``; a collect()'s batch closed), or the context is closed. On
    a consumer whose messages nothing can settle (ordered,
    ``AckPolicy.NONE``: ``acks`` False) a message that is not followed by
    another (a ``collect()``, a ``next()``) is a mark of its delivery: its
    span ends at once.
    """

    def __init__(
        self,
        tel: Telemetry,
        stream: str,
        consumer: str,
        *,
        label: str | None = None,
        acks: bool = True,
        ack_all: bool = False,
    ) -> None:
        self.tel = tel
        self.stream = stream
        self.name = self.consumer = consumer  # in spans; deleting it drops the gauges
        self.acks = acks  # False: an ordered or AckNone consumer (nothing settles a message)
        self.ack_all = ack_all  # AckPolicy.ALL: an ack settles the earlier messages too
        # AckPolicy.ALL only: (stream sequence, reply) of the open spans, a heap. An
        # entry whose span has ended otherwise stays until popped or compacted away.
        self.by_seq: list[tuple[int, bytes]] = []
        # Metrics: one label set per durable consumer, one for all the ephemeral
        # ones (and the ordered ones) of a stream, whatever their number.
        counts = self.counts = tel.of(stream, consumer if label is None else label)
        counts.handles += 1
        weakref.finalize(self, counts.release)  # the handle is gone: its gauges go stale
        self.open: dict[bytes, trace.Span] = {}
        # The replies of the messages collect() and next() handed out, their spans
        # ended (when still open) by the next fetch, next(), messages() or consume().
        self.collected: list[bytes] = []
        # The receive spans of its batches not ended yet (see Receiving).
        self.receiving: set[Receiving] = set()
        tel.states.add(self)
        # subject -> (span name, the attributes every message on it shares)
        self._subjects: dict[str, tuple[str, dict[str, Any]]] = {}

    def _base(self, subject: str) -> tuple[str, dict[str, Any]]:
        cached = self._subjects.get(subject)
        if cached is None:
            if len(self._subjects) >= CACHE:
                self._subjects.clear()
            cached = self._subjects[subject] = (
                f"process {subject}",
                {
                    "messaging.system": SYSTEM,
                    "messaging.destination.name": subject,
                    "messaging.operation.name": "process",
                    "messaging.operation.type": "process",
                    "messaging.consumer.group.name": self.consumer,
                    "messaging.destination.subscription.name": self.consumer,
                    "messaging.nats.stream": self.stream,
                },
            )
        return cached

    def start_process(self, msg: Msg, root: bool = False) -> trace.Span:
        """Start the process span of ``msg`` and count it as consumed.

        Called once the message was taken: a failing span processor, sampler or
        propagator is logged, not raised (the message would be lost), and the
        span is then a non-recording one. With ``root`` (a ``consume()``
        handler's message) the span is never the child of the current span
        (in a consume task: whatever was current when ``consume()`` was
        called), only of the send span with ``parent=True``.
        """
        try:
            return self._start_process(msg, root)
        except Exception:
            failed("starting a process span")
            return trace.INVALID_SPAN

    def _start_process(self, msg: Msg, root: bool) -> trace.Span:
        tel = self.tel
        name, attrs = self._base(msg.subject)
        attrs = attrs.copy()
        attrs["messaging.message.body.size"] = len(msg.data)
        counts = self.counts
        counts.consumed += 1
        reply = msg._reply
        seq: int | None = None
        if reply:
            numbers = ack_numbers(reply)
            if numbers is None:  # not the v1 form: parsed in full (None: not a $JS.ACK reply)
                try:
                    meta = msg.metadata
                    numbers = meta.num_delivered, meta.sequence.stream, meta.num_pending
                except Exception:
                    numbers = None
            if numbers is not None:
                delivered, seq, pending = numbers
                attrs["messaging.message.id"] = str(seq)
                attrs["messaging.nats.message.sequence"] = seq
                attrs["messaging.nats.delivery_count"] = delivered
                if delivered > 1:
                    counts.redeliveries += 1
                counts.pending = pending
        headers = msg.headers
        links = None
        parent: otel_context.Context | None = None
        if headers:
            sent, parent = tel.propagation.extract(headers, tel.parent)
            if sent is not None and parent is None:
                links = [Link(sent)]
        if parent is None and root:
            parent = EMPTY
        span = tel.tracer.start_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes=attrs, links=links
        )
        if reply:
            open_spans = self.open
            if len(open_spans) >= MAX_OPEN:
                end_span(open_spans.pop(next(iter(open_spans))))
            open_spans[reply] = span
            if self.ack_all and seq is not None:
                self._track(seq, reply)
        return span

    def _track(self, seq: int, reply: bytes) -> None:
        """AckPolicy.ALL: remember the stream sequence of the open span of ``reply``."""
        by_seq = self.by_seq
        heapq.heappush(by_seq, (seq, reply))
        if len(by_seq) > 2 * len(self.open) + 64:  # mostly ended otherwise: compact
            open_spans = self.open
            by_seq[:] = [entry for entry in by_seq if entry[1] in open_spans]
            heapq.heapify(by_seq)

    def refused(self, msg: Msg, error: PayloadValidationError, on_invalid: str) -> None:
        """A typed message that did not validate: its process span, status ERROR.

        The consumer's ``on_refused`` hook, called before the message is
        raised, terminated or nak'ed. The span is the one already open for the
        message (``next(model=...)`` pulls through a traced fetch), else one
        started here, linked to the publisher's as for a valid message. It is
        ended at once for ``"raise"`` and on an ordered consumer; a term or
        nak ends it when the traced acker sends it, with its settlement.
        """
        reply = msg._reply
        span = self.open.get(reply) if reply else None
        if span is None:
            span = self.start_process(msg)
        record_error(span, error)
        span.set_attribute("messaging.nats.on_invalid", on_invalid)
        if on_invalid == "raise" or not self.acks or not reply:
            if reply:
                self.open.pop(reply, None)
            end_span(span)

    def on_status(self, hdr: bytes) -> None:
        """A status message of a pull: its pending messages and bytes feed the pull gauges.

        The server reports in ``Nats-Pending-Messages`` / ``Nats-Pending-Bytes``
        what a pull request still waited for when it ended (408 Request
        Timeout, 409 statuses) or, when a server adds them, at an idle
        heartbeat. nats-server's idle heartbeats (2.10 to 2.15) carry
        ``Nats-Last-Consumer`` / ``Nats-Last-Stream`` only, so they leave the
        gauges as they are. Status messages are rare: no message pays for this.
        """
        if b"pending-messages" not in hdr.lower():
            return
        status = parse_status(hdr)
        if status is not None:
            counts = self.counts
            counts.pull_pending = status.pending_messages
            counts.pull_pending_bytes = status.pending_bytes

    def end(self, msg: Msg | None) -> None:
        """End the process span of ``msg`` if it is still open (taken over, not settled)."""
        if msg is not None:
            span = self.open.pop(msg._reply, None)
            if span is not None:
                end_span(span)

    def end_replies(self, replies: list[bytes]) -> None:
        """End the process spans of the messages of ``replies`` still open."""
        pop = self.open.pop
        for reply in replies:
            span = pop(reply, None)
            if span is not None:
                end_span(span)

    def end_collected(self) -> None:
        """End the spans of the messages ``collect()`` / ``next()`` handed out, not settled."""
        collected = self.collected
        if collected:
            self.collected = []
            self.end_replies(collected)

    def end_all(self) -> None:
        """End every open receive and process span (the context is closed)."""
        for receiving in list(self.receiving):
            receiving.finish()
        self.collected = []
        self.by_seq = []
        open_spans = self.open
        while open_spans:
            end_span(open_spans.pop(next(iter(open_spans))))

    def settled(self, reply: bytes, payload: bytes) -> None:
        """Count an ack, nak or term sent to ``reply`` and end its message's span."""
        counts = self.counts
        if payload == ACK:
            counts.acks += 1
            kind = "ack"
        elif payload.startswith(NAK):
            counts.naks += 1
            kind = "nak"
        elif payload.startswith(TERM):
            counts.terms += 1
            kind = "term"
        else:  # +WPI (in progress), +NXT: the message is not settled
            return
        span = self.open.pop(reply, None)
        if span is not None:
            span.set_attribute("messaging.nats.settlement", kind)
            end_span(span)  # the acknowledgement was sent: a failing span must not say otherwise
        if self.ack_all and kind == "ack" and self.open:
            self._acked_up_to(reply)

    def _acked_up_to(self, reply: bytes) -> None:
        """AckPolicy.ALL: an ack settles every open message up to its *stream* sequence.

        As the server does (nats-server ``consumer.go``, ``AckAll``: every
        pending message with a stream sequence up to the acked one's), whatever
        the delivery order: a redelivery of an earlier message comes after later
        ones, and an ack of it settles none of them.
        """
        last = stream_sequence(reply)
        if last is None:
            return
        by_seq = self.by_seq
        open_spans = self.open
        while by_seq and by_seq[0][0] <= last:
            earlier = heapq.heappop(by_seq)[1]
            span = open_spans.pop(earlier, None)
            if span is not None:
                span.set_attribute("messaging.nats.settlement", "ack")
                end_span(span)


class TracedAcker:
    """Wraps a driver's acker: counts acks, naks and terms and ends their process spans."""

    __slots__ = ("_inner", "_state")

    def __init__(self, inner: Any, state: ConsumerState) -> None:
        self._inner = inner
        self._state = state

    @property
    def timeout(self) -> float:
        """The inner acker's timeout."""
        return float(self._inner.timeout)

    def send_nowait(self, subject: bytes, payload: bytes) -> bool:
        """Send an acknowledgement without waiting; settle its span once sent."""
        if self._inner.send_nowait(subject, payload):
            self._state.settled(subject, payload)
            return True
        return False

    async def send(self, subject: bytes, payload: bytes) -> None:
        """Send an acknowledgement; settle its span."""
        await self._inner.send(subject, payload)
        self._state.settled(subject, payload)

    async def request(self, subject: bytes, payload: bytes, timeout: float) -> bytes:
        """Send an acknowledgement the server confirms; settle its span."""
        data: bytes = await self._inner.request(subject, payload, timeout)
        self._state.settled(subject, payload)
        return data


class Receiving:
    """The ``receive`` span of a fetched batch and its message count, ended once.

    Kept apart from its :class:`TracedBatch` so that the batch's finalizer (a
    batch dropped unfinished: ``break`` out of it without ``aclose()``) and
    the context's close (:meth:`ConsumerState.end_all`) can end it without
    the batch. ``last``: the reply of the message the batch handed out last.
    """

    __slots__ = ("count", "last", "span", "state")

    def __init__(self, span: trace.Span, state: ConsumerState) -> None:
        self.span: trace.Span | None = span
        self.count = 0
        self.last: bytes | None = None
        self.state = state
        state.receiving.add(self)

    def dropped(self) -> None:
        """The batch was collected unfinished: end the span; its last message's at the next take."""
        last = self.last
        if self.span is not None and last and self.state.acks:
            self.state.collected.append(last)  # (ended there if still open)
        self.finish()

    def finish(self, exc: BaseException | None = None) -> None:
        """End the span (once) with the count; ``exc``: the batch ended with this error."""
        span = self.span
        if span is not None:
            self.span = None
            self.state.receiving.discard(self)
            if exc is not None:
                record_error(span, exc)
            span.set_attribute("messaging.batch.message_count", self.count)
            end_span(span)  # the batch's messages were taken: a failing span must not lose them


#: What a batch survives: a wait given up (``asyncio.wait_for`` on ``__anext__``,
#: a cancelled task) and a typed message refused with ``on_invalid="raise"`` (its
#: own process span has the error). The receive span goes on.
SURVIVED: tuple[type[BaseException], ...] = (asyncio.CancelledError, PayloadValidationError)


class TracedBatch:
    """A fetched batch: its ``receive`` span, a ``process`` span per message.

    The receive span ends when the batch does: its iteration ends (or raises
    a terminal error), ``collect()`` or ``collect_columns()`` returns it whole,
    it is closed, or it is garbage collected unfinished (a ``break`` out of
    it), at the latest when the context is closed.
    """

    def __init__(self, inner: Any, state: ConsumerState, span: trace.Span) -> None:
        self._inner = inner
        self._state = state
        self._receiving = receiving = Receiving(span, state)
        # (not referring to the batch: ends the span of a batch dropped unfinished)
        finalizer = self._finalizer = weakref.finalize(self, receiving.dropped)
        finalizer.atexit = False
        self._last: Msg | None = None
        self._collected: list[bytes] = []  # the replies collect() handed out

    def _finish(self, exc: BaseException | None = None) -> None:
        self._receiving.finish(exc)
        self._finalizer.detach()

    def __aiter__(self) -> TracedBatch:
        return self

    async def __anext__(self) -> Msg:
        self._state.end(self._last)
        self._last = None
        try:
            msg: Msg = await self._inner.__anext__()
        except StopAsyncIteration:
            self._finish()
            raise
        except SURVIVED:
            raise  # the batch goes on
        except BaseException as exc:
            self._finish(exc)
            raise
        receiving = self._receiving
        receiving.count += 1
        receiving.last = msg._reply
        self._state.start_process(msg)
        self._last = msg
        return msg

    async def __aenter__(self) -> TracedBatch:
        await self._inner.__aenter__()
        return self

    async def collect(self) -> list[Msg]:
        """Every message of the batch, a process span each.

        A span is open until its message is settled, or the next fetch of
        the consumer; on a consumer that settles nothing (ordered, AckNone)
        it ends at once. The receive span ends once the batch is done (a
        typed batch may hold messages back after an invalid one, for the
        next call).
        """
        try:
            msgs: list[Msg] = await self._inner.collect()
        except SURVIVED:
            raise  # the batch goes on (a typed one: the next call hands out the rest)
        except BaseException as exc:
            self._finish(exc)
            raise
        state = self._state
        start = state.start_process
        if state.acks:
            replies = self._collected
            for msg in msgs:
                start(msg)
                if msg._reply:
                    replies.append(msg._reply)
            state.collected.extend(replies)
        else:
            for msg in msgs:
                end_span(start(msg))
                state.open.pop(msg._reply, None)
        self._receiving.count += len(msgs)
        if self._inner.done:
            self._finish()
        return msgs

    def _leave(self) -> None:
        """The batch is left: its receive span ends, and its process spans nothing can settle.

        The span of the message it handed out last, when something can settle
        it, ends when the consumer handle takes messages again (as a
        ``next()``'s: the message may be settled after the batch is closed).
        """
        self._finish()
        state = self._state
        last = self._last
        if last is not None:
            self._last = None
            if not state.acks:
                state.end(last)
            elif last._reply:
                state.collected.append(last._reply)
        if self._collected:
            replies, self._collected = self._collected, []
            state.end_replies(replies)

    async def collect_columns(self) -> Any:
        """Every message of the batch as one Arrow record batch: counted, no process span.

        No :class:`Msg` is made per message (nothing to acknowledge it by):
        the messages count as consumed and the receive span ends with their
        number.
        """
        collect_columns = self._inner.collect_columns  # (a typed batch has none)
        try:
            columns = await collect_columns()
        except asyncio.CancelledError:
            raise  # the batch goes on
        except BaseException as exc:
            self._finish(exc)
            raise
        rows = int(columns.num_rows)
        self._state.counts.consumed += rows
        self._receiving.count += rows
        self._finish()
        return columns

    async def aclose(self) -> None:
        """Stop the pull and release its subscription (idempotent); end its receive span."""
        self._leave()
        await self._inner.aclose()

    async def __aexit__(self, *exc_info: Any) -> None:
        self._leave()
        await self._inner.__aexit__(*exc_info)

    def _end_now(self) -> None:
        """``next()`` took its message: the batch ends without an await (its spans too).

        The message's process span, when something can settle it, stays open
        until it is settled or the consumer's next message is taken (its next
        ``next()``, ``fetch``, ``messages()`` or ``consume()``), as for
        ``messages()``: not until the context's close.
        """
        self._leave()
        self._inner._end_now()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TracedMessages:
    """``messages()``: a ``process`` span per message taken."""

    def __init__(self, inner: Any, state: ConsumerState) -> None:
        self._inner = inner
        self._state = state
        self._last: Msg | None = None

    async def __aenter__(self) -> TracedMessages:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._state.end(self._last)
        self._last = None
        await self._inner.__aexit__(*exc_info)

    def __aiter__(self) -> TracedMessages:
        return self

    async def __anext__(self) -> Msg:
        self._state.end(self._last)
        self._last = None
        msg: Msg = await self._inner.__anext__()
        self._state.start_process(msg)
        self._last = msg
        return msg

    async def next(self) -> Msg:
        """The next message (StopAsyncIteration once stopped or drained)."""
        return await self.__anext__()

    async def aclose(self) -> None:
        """Stop and release the subscription (idempotent)."""
        self._state.end(self._last)
        self._last = None
        await self._inner.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def instrument_consumer(consumer: Any, tel: Telemetry, *, ordered: bool = False) -> Any:
    """Trace ``consumer`` (a :class:`Consumer`, or an ``OrderedConsumer`` when ``ordered``)."""
    if getattr(consumer, "_telemetry_state", None) is not None:
        return consumer
    # An ordered consumer's server-side name changes with every reset, an
    # ephemeral one's is often the server's choice: one label each for all.
    config = None if ordered else consumer.cached_info.config
    label = EPHEMERAL if config is not None and config.durable_name is None else None
    name = ORDERED if ordered else consumer.name
    policy = None if config is None else config.ack_policy
    state = ConsumerState(
        tel,
        consumer.stream_name,
        name,
        label=label,
        acks=policy not in (None, "none"),
        ack_all=policy == "all",
    )
    consumer._telemetry_state = state
    consumer._on_refused = state.refused  # typed messages that do not validate
    make_driver = consumer._driver

    def driver(settings: Any, error_handler: Any = None, *rest: Any) -> Any:
        made = make_driver(settings, error_handler, *rest)  # (a consumer's refit)
        if not ordered:  # an ordered consumer acknowledges nothing
            made._acker = TracedAcker(made._acker, state)
        on_status = made._on_status

        def traced_status(hdr: bytes) -> None:  # status messages only: no message pays
            state.on_status(hdr)
            on_status(hdr)

        made._on_status = traced_status
        return made

    consumer._driver = driver

    def receive_span() -> trace.Span:
        return start_span(
            tel,
            f"receive {consumer.stream_name}",
            SpanKind.CLIENT,
            {
                "messaging.system": SYSTEM,
                "messaging.operation.name": "receive",
                "messaging.operation.type": "receive",
                "messaging.consumer.group.name": name,
                "messaging.destination.subscription.name": name,
                "messaging.nats.stream": consumer.stream_name,
            },
        )

    def traced_fetch(method: Callable[..., Any]) -> Callable[..., Any]:
        async def fetch(*args: Any, **kwargs: Any) -> Any:
            state.end_collected()  # the next messages are taken
            span = receive_span()
            try:
                batch = await method(*args, **kwargs)
            except BaseException as exc:
                record_error(span, exc)
                end_span(span)  # the error raised is the read's, not the span's
                raise
            return TracedBatch(batch, state, span)

        return fetch

    for method in ("fetch", "fetch_bytes", "fetch_no_wait"):
        setattr(consumer, method, traced_fetch(getattr(consumer, method)))

    if ordered:  # its next() pulls by itself, not through fetch()
        take_next = consumer.next

        async def traced_next(*args: Any, **kwargs: Any) -> Msg:
            span = receive_span()
            try:
                msg: Msg = await take_next(*args, **kwargs)
            except BaseException as exc:
                record_error(span, exc)
                end_span(span)  # the error raised is the read's, not the span's
                raise
            span.set_attribute("messaging.batch.message_count", 1)
            end_span(span)  # the message was taken: a failing span must not lose it
            state.start_process(msg)
            state.end(msg)  # nothing settles it: a mark of the delivery
            return msg

        consumer.next = traced_next

    messages = consumer.messages

    def traced_messages(*args: Any, **kwargs: Any) -> Any:
        state.end_collected()
        return TracedMessages(messages(*args, **kwargs), state)

    consumer.messages = traced_messages

    consume = consumer.consume

    async def traced_consume(handler: Callable[[Msg], Any], *args: Any, **kwargs: Any) -> Any:
        import inspect

        async def traced_handler(msg: Msg) -> None:
            span = state.start_process(msg, root=True)  # its own trace, not the caller's
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                result = handler(msg)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                record_error(span, exc)
                raise
            finally:
                otel_context.detach(token)
                state.end(msg)
                if not msg._reply:
                    end_span(span)

        if not callable(handler):
            return await consume(handler, *args, **kwargs)  # the library's own error
        state.end_collected()
        # The consume task copies the current context: not the caller's span
        # (each message's work is its own trace, a refused one's too).
        token = otel_context.attach(EMPTY)
        try:
            return await consume(traced_handler, *args, **kwargs)
        finally:
            otel_context.detach(token)

    consumer.consume = traced_consume
    return consumer

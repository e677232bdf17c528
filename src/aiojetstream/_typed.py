"""Typed consumption, shared by :class:`Consumer` and :class:`OrderedConsumer`.

A typed consumer decodes each payload (``model.model_validate_json``, or a
:class:`Codec`) and hands out the message turned into a :class:`TypedMsg` in
place. A payload that does not validate is never dropped silently: by
``on_invalid`` it is terminated with the reason (``"term"``), nak'ed
(``"nak"``), or raised as :class:`PayloadValidationError` (``"raise"``, left
unacknowledged). An ordered consumer acknowledges nothing (AckNone): only
``"raise"`` applies to it, ``"term"`` / ``"nak"`` are refused before anything
is sent.

Here: the decoder, the ``on_invalid`` checks and handling, the typed handler
of ``consume``, the typed batch of ``fetch`` and the typed ``next``. The typed
``messages()`` iterator is :class:`TypedMessagesContext` (in ``_consumer``, a
subclass of ``MessagesContext``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, Protocol, TypeVar

from ._codec import Codec, JsonCodec, invalid, invalid_payload, json_validator
from ._errors import FetchTimeoutError, InvalidOptionError, JetStreamError, PayloadValidationError
from ._message import Msg, TypedMsg, typed, where
from ._pull_engine import MIN_EXPIRES

if TYPE_CHECKING:
    from ._consumer import MessageBatch

logger = logging.getLogger("aiojetstream")

T = TypeVar("T")

OnInvalid = Literal["term", "nak", "raise"]
"""What a typed consumer does with a message whose payload does not validate."""

OrderedOnInvalid = Literal["raise"]
"""The one ``on_invalid`` of an ordered consumer: it acknowledges nothing."""

_ON_INVALID: Final = ("term", "nak", "raise")

Decode = Callable[[bytes], Any]

Refused = Callable[[Msg, PayloadValidationError, str], None]
"""A consumer's hook on a message that did not validate: ``(msg, error, on_invalid)``.

Called by :func:`refuse` before the message is raised, terminated or nak'ed
(telemetry sets it: the message's process span, status ERROR). None (the
default) costs a None check, on invalid messages only.
"""


def decoder(model: type[T], codec: Codec | None) -> Callable[[bytes], T]:
    """The payload decoder of a typed consumer.

    It raises on a bad payload: pydantic's ``ValidationError``, or whatever
    the codec raises. An error :func:`~._codec.invalid_payload` calls so
    (``ValueError``, ``struct.error``, protobuf's ``DecodeError``, a
    ``KeyError``, ...) is an invalid payload, handled by ``on_invalid``; any
    other (an ``InvalidOptionError``: the codec cannot decode into ``model``
    at all; a schema registry's ``ConnectionError``) is raised as it is, the
    message left unsettled (it comes again after ``ack_wait``).

    Without a codec (or with a :class:`JsonCodec`), pydantic's validator of
    ``model`` is built here, once: a type it cannot validate is refused now,
    not on every message.

    Raises:
        InvalidOptionError: ``codec`` has no ``decode``; pydantic cannot
            validate JSON as ``model`` (no schema for it, or a model not fully
            defined).

    """
    if codec is None:
        return json_validator(model)
    if not callable(getattr(codec, "decode", None)):
        raise InvalidOptionError(f"codec must have encode() and decode(), got {codec!r}")
    if isinstance(codec, JsonCodec):
        json_validator(model)  # checked (and built) before the first message
    decode = codec.decode
    return lambda data: decode(data, model)


def check_on_invalid(on_invalid: str, *, acks: bool = True, ack_all: bool = False) -> None:
    """Check ``on_invalid`` (``acks=False``: an ordered consumer, where only ``"raise"`` applies).

    ``ack_all``: the consumer's ack policy is ``all``, where nats-server takes a
    ``+TERM`` as an acknowledgement of every earlier message too.

    Raises:
        InvalidOptionError: an unknown value, term/nak without acknowledgements,
            or term on an ``ack_policy=all`` consumer.

    """
    if on_invalid not in _ON_INVALID:
        raise InvalidOptionError(f"on_invalid must be 'term', 'nak' or 'raise', not {on_invalid!r}")
    if ack_all and on_invalid == "term":
        raise InvalidOptionError(
            "on_invalid='term' (the default) on an ack_policy=all consumer: the server takes "
            "a +TERM as an acknowledgement of every earlier message too, those handed out "
            "and not processed yet included (they would never come again); pass "
            "on_invalid='raise' (catch PayloadValidationError, ack as usual) or 'nak'"
        )
    if not acks and on_invalid != "raise":
        raise InvalidOptionError(
            f"on_invalid={on_invalid!r} does not apply to an ordered consumer: it acknowledges "
            "nothing (AckNone), so a message can be neither terminated nor nak'ed; use "
            "on_invalid='raise' (the default) and catch PayloadValidationError"
        )


def check_typed(
    model: type[Any],
    codec: Codec | None,
    on_invalid: str,
    *,
    acks: bool = True,
    ack_all: bool = False,
) -> None:
    """Refuse, before anything is sent, a bad ``on_invalid`` and a codec without ``decode``.

    ``acks=False``: an ordered consumer (``"raise"`` only); ``ack_all``: an
    ``ack_policy=all`` consumer (no ``"term"``).

    Raises:
        InvalidOptionError: as :func:`check_on_invalid` and :func:`decoder`.

    """
    check_on_invalid(on_invalid, acks=acks, ack_all=ack_all)
    decoder(model, codec)


def refuse_codec_alone(model: object, codec: object) -> None:
    """Refuse ``codec=`` without ``model=`` (it was ignored: the messages came untyped).

    Raises:
        InvalidOptionError: a codec without a model.

    """
    if codec is not None and model is None:
        raise InvalidOptionError(
            "codec= decodes into model=: give model= too (the type to decode into; "
            "bytes with RawCodec)"
        )


async def refuse(
    msg: Msg,
    exc: Exception,
    model: object,
    on_invalid: str,
    on_refused: Refused | None = None,
) -> None:
    """Settle a message whose payload does not validate: term (with a reason) or nak it.

    ``on_refused`` (the consumer's hook) is called first, with the
    :class:`PayloadValidationError`; an error it raises is logged and the
    message is settled all the same.

    Raises:
        PayloadValidationError: with ``on_invalid="raise"`` (the message is left
            unacknowledged: redelivered after ``ack_wait``).

    """
    error = invalid(exc, model, *where(msg))
    if on_refused is not None:
        try:
            on_refused(msg, error, on_invalid)
        except Exception:
            logger.exception("the on_refused hook failed on an invalid message")
    if on_invalid == "raise":
        raise error from exc
    if on_invalid == "term":
        first = str(error).replace("\r", " ").replace("\n", " ")
        await msg.term(first[:400])
        logger.warning("%s; the message was terminated", error)
    else:
        await msg.nak()
        logger.warning("%s; the message was nak'ed", error)


class _Failing(Protocol):
    def _fail(self, error: JetStreamError) -> None: ...


def typed_handler(
    handler: Callable[[TypedMsg[T]], Any],
    model: type[T],
    codec: Codec | None,
    on_invalid: str,
    ctx: list[Any],
    on_refused: Refused | None = None,
) -> Callable[[Msg], Awaitable[None]]:
    """``handler`` called with a :class:`TypedMsg` of each message (see ``consume``).

    ``ctx`` holds the ``ConsumeContext`` once started: ``on_invalid="raise"``
    ends it with the :class:`PayloadValidationError`. ``on_refused``: the
    consumer's hook (see :func:`refuse`).
    """
    decode = decoder(model, codec)
    is_async = inspect.iscoroutinefunction(handler)

    async def handle(msg: Msg) -> None:
        try:
            value = decode(msg.data)
        except Exception as exc:
            running: _Failing = ctx[0]
            if isinstance(exc, InvalidOptionError):  # the codec cannot decode at all: the end
                running._fail(exc)
                return
            if not invalid_payload(exc, codec):
                raise  # as a handler's error: logged, the message left unsettled
            try:
                await refuse(msg, exc, model, on_invalid, on_refused)
            except PayloadValidationError as error:  # on_invalid="raise": the end
                running._fail(error)
            return
        if is_async:
            await handler(typed(msg, value))
        else:
            result = handler(typed(msg, value))
            if inspect.isawaitable(result):
                await result

    return handle


async def next_valid(
    take: Callable[[float], Awaitable[Msg]],
    expires: float,
    model: type[T],
    codec: Codec | None,
    on_invalid: str,
    source: str,
    on_refused: Refused | None = None,
) -> TypedMsg[T]:
    """The next message whose payload validates, as a :class:`TypedMsg` (``next(model=...)``).

    ``take(seconds)`` pulls one message within ``seconds`` (raising
    :class:`FetchTimeoutError`). A message that does not validate is settled
    by ``on_invalid`` and the next one is pulled, within what is left of
    ``expires`` (at least a pull's minimum); ``"raise"`` raises at once.
    ``on_refused``: the consumer's hook (see :func:`refuse`).

    Raises:
        PayloadValidationError: ``on_invalid="raise"`` and the payload does not validate.
        FetchTimeoutError: no valid message before ``expires``.

    """
    decode = decoder(model, codec)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + expires
    left = expires
    refused = 0

    def out_of_time() -> FetchTimeoutError:
        settled = "terminated" if on_invalid == "term" else "nak'ed"
        return FetchTimeoutError(
            f"no valid message from {source} before expiry: "
            f"{refused} that did not validate were {settled}"
        )

    while True:
        try:
            msg = await take(left)
        except FetchTimeoutError as exc:
            if not refused:
                raise
            raise out_of_time() from exc
        try:
            value = decode(msg.data)
        except Exception as exc:
            if not invalid_payload(exc, codec):
                raise  # the message is left unsettled (see decoder)
            await refuse(msg, exc, model, on_invalid, on_refused)
            refused += 1
            left = deadline - loop.time()
            if left <= 0:  # (a nak'ed message may come back at once, for ever)
                raise out_of_time() from None
            # The next pull gets what is left of expires (at least a pull's minimum).
            left = max(left, MIN_EXPIRES)
            continue
        return typed(msg, value)


class TypedMessageBatch(Generic[T]):
    """The messages of one ``fetch(model=...)``: an async iterator of :class:`TypedMsg`.

    Wraps the fetch's :class:`MessageBatch` (an ``OrderedBatch`` for an ordered
    consumer) and offers the same calls but ``collect_columns`` (columns are
    not decoded): iteration, :meth:`collect`, :attr:`done`, :meth:`aclose` and
    ``async with``. A message that does not validate is terminated or nak'ed
    (and left out), or raised as :class:`PayloadValidationError` (``"raise"``:
    by iteration, which can go on, or by :meth:`collect` once the valid
    messages before it were returned). ``on_refused``: the consumer's hook
    (see :func:`refuse`).
    """

    __slots__ = ("_batch", "_codec", "_decode", "_held", "_model", "_on_invalid", "_on_refused")

    def __init__(
        self,
        batch: MessageBatch,
        model: type[T],
        codec: Codec | None,
        on_invalid: str,
        on_refused: Refused | None = None,
    ) -> None:
        self._batch = batch
        self._decode = decoder(model, codec)
        self._codec = codec
        self._model = model
        self._on_invalid = on_invalid
        self._on_refused = on_refused
        #: Taken from the batch, not handed out yet (after an invalid one, with "raise").
        self._held: deque[Msg] = deque()

    def __aiter__(self) -> TypedMessageBatch[T]:
        return self

    async def __anext__(self) -> TypedMsg[T]:
        decode = self._decode
        while True:
            msg = self._held.popleft() if self._held else await self._batch.__anext__()
            try:
                value = decode(msg.data)
            except Exception as exc:
                if not invalid_payload(exc, self._codec):
                    raise  # the message is left unsettled (see decoder)
                await refuse(msg, exc, self._model, self._on_invalid, self._on_refused)
                continue
            return typed(msg, value)

    @property
    def done(self) -> bool:
        """True once the pull ended and no message is held back."""
        return self._batch.done and not self._held

    async def collect(self) -> list[TypedMsg[T]]:
        """Wait for the pull to end and return its valid messages at once, in order.

        As :meth:`MessageBatch.collect`, each message decoded. With
        ``on_invalid="term"`` / ``"nak"`` an invalid message is settled and
        left out. With ``"raise"`` the valid messages before the first invalid
        one are returned and the next call (or iteration) raises its
        :class:`PayloadValidationError`, then goes on with the rest.

        Raises:
            PayloadValidationError: ``on_invalid="raise"``, and the first
                message left does not validate (it is left unacknowledged).
            JetStreamError: as :meth:`MessageBatch.collect`.

        """
        if self._held:
            raw = list(self._held)  # what a call before held back: the pull has ended
            self._held.clear()
        else:
            raw = await self._batch.collect()
        decode = self._decode
        out: list[TypedMsg[T]] = []
        for index, msg in enumerate(raw):
            try:
                value = decode(msg.data)
            except Exception as exc:
                usage = not invalid_payload(exc, self._codec)  # raised as it is
                if usage or self._on_invalid == "raise":
                    if out:  # returned first; the next call raises
                        self._held.extend(raw[index:])
                        return out
                    self._held.extend(raw[index + 1 :])  # (the next call goes on with them)
                    if usage:
                        raise
                await refuse(msg, exc, self._model, self._on_invalid, self._on_refused)
                continue
            out.append(typed(msg, value))
        return out

    async def aclose(self) -> None:
        """Stop the pull and release its subscription (idempotent)."""
        await self._batch.aclose()

    async def __aenter__(self) -> TypedMessageBatch[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

"""The fallback: nats-py's public API only (``AIOJETSTREAM_FAST_PATH=0``, or internals missing).

Publishes that must not wait run nats-py's ``publish`` in a task whose
failure goes to the caller; an awaited publish or request first lets those
tasks queue their commands (:func:`after_background_publishes`), so the
messages keep their call order; raw handlers get their pieces rebuilt from
nats-py's ``Msg``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .._errors import ConnectionClosedError, JetStreamError
from ._nats import NatsClient, NatsMsg
from ._translate import as_jetstream_error
from ._wire import RawHandler

__all__ = [
    "BACKGROUND",
    "FallbackDelivery",
    "after_background_publishes",
    "decode_header_block",
    "publish_in_task",
    "rebuild_header_block",
]

logger = logging.getLogger("aiojetstream")

#: The publish tasks still running (a task nobody holds may be collected mid-way).
BACKGROUND: set[asyncio.Task[None]] = set()
_CRLF = b"\r\n"


def rebuild_header_block(
    headers: dict[str, str] | None, may_be_status: bool = True
) -> bytes | None:
    """Header block as sent by the server, from nats-py's parsed dict (fallback path).

    nats-py puts a status line's code and description into the ``Status`` and
    ``Description`` keys; a ``Status`` of three ASCII digits becomes the status
    line again, unless the message cannot be a status (``may_be_status``
    False: it has a reply subject, or it is a stored message): then a user
    header ``Status: 200`` stays a header (it made a stored message read as a
    status, never delivered). What nats-py's dict loses stays lost: of a
    repeated key only the last value is left.
    """
    if not headers:
        return None
    status = headers.get("Status") if may_be_status else None
    first = b"NATS/1.0"
    is_status = status is not None and len(status) == 3 and status.isascii() and status.isdigit()
    if is_status:
        first += b" " + status.encode()  # type: ignore[union-attr]
        desc = headers.get("Description")
        if desc:
            first += b" " + desc.encode()
    lines = [first]
    for key, value in headers.items():
        if is_status and key in ("Status", "Description"):
            continue
        lines.append(f"{key}: {value}".encode())
    return _CRLF.join(lines) + _CRLF + _CRLF


def decode_header_block(block: bytes | None) -> dict[str, str] | None:
    """The user headers of a header block, for nats-py (fallback path only)."""
    if not block:
        return None
    headers: dict[str, str] = {}
    for line in block.decode().split("\r\n")[1:]:
        key, sep, value = line.partition(": ")
        if sep:
            headers[key] = value
    return headers or None


def publish_in_task(
    nc: NatsClient,
    subject: bytes,
    payload: bytes,
    reply: bytes,
    header_block: bytes | None,
    on_error: Callable[[JetStreamError], None] | None,
) -> None:
    """The fallback of :meth:`Conn.publish_nowait`: nats-py's ``publish`` in a task.

    Tasks start in creation order and nats-py queues the command before its
    first suspension, so publishes keep their order, awaited ones included
    (they queue theirs after :func:`after_background_publishes`). The task's
    failure (or cancellation) goes to ``on_error``; nothing is dropped silently.
    """
    if nc.is_draining_pubs:
        raise ConnectionClosedError("the connection is draining")
    text = subject.decode()
    coro = nc.publish(
        text, payload, reply=reply.decode(), headers=decode_header_block(header_block)
    )
    task = asyncio.get_running_loop().create_task(coro)
    BACKGROUND.add(task)

    def done(task: asyncio.Task[None]) -> None:
        BACKGROUND.discard(task)
        if task.cancelled():
            error: JetStreamError = ConnectionClosedError(
                f"the publish on {text!r} was cancelled before it was written"
            )
        else:
            exc = task.exception()
            if exc is None:
                return
            error = as_jetstream_error(exc, text)
        if on_error is None:
            logger.warning("a publish on %r failed: %s", text, error)
        else:
            on_error(error)

    task.add_done_callback(done)


async def after_background_publishes() -> None:
    """Let the publish tasks made so far queue their commands before the caller's (fallback).

    An awaited publish or request queues its command in the caller's task, at
    once: it overtook the messages of earlier asynchronous publishes (a
    ``publish_async``, a ``publish_many_async``, a batch's message) whose
    tasks had not run yet. A task's first step is scheduled when the task is
    made, and the event loop runs its ready callbacks in order, so after one
    yield every publish task made before this call has run up to its first
    suspension, by which nats-py has queued its command. Nothing of theirs is
    awaited: their failures go to their own ``on_error``, and a task held up
    in nats-py's flush does not hold up the caller. No yield while no publish
    task is left (in the usual case of an awaited call after awaited calls).
    """
    if BACKGROUND:
        await asyncio.sleep(0)


class FallbackDelivery:
    """The fallback's nats-py callback: rebuilds the raw pieces for the raw handler.

    nats-py runs it in the subscription's task and hands its exceptions to the
    connection's error callback (aiojetstream's default logs them).
    """

    __slots__ = ("handler",)

    def __init__(self, handler: RawHandler) -> None:
        self.handler: RawHandler | None = handler

    async def deliver(self, msg: NatsMsg) -> None:
        """Hand one message to the raw handler (nothing once detached)."""
        handler = self.handler
        if handler is not None:  # None once detached
            handler(
                msg.subject.encode(),
                msg.reply.encode(),
                msg.data,
                # A status has no reply subject (a delivery has its $JS.ACK one) and
                # no Nats-Sequence (a batch direct get's stored message has).
                rebuild_header_block(
                    msg.headers,
                    may_be_status=not msg.reply
                    and not (msg.headers and "Nats-Sequence" in msg.headers),
                ),
            )

"""Wire-command building: PUB / HPUB commands, the protocol line limit, ack tails.

Pure bytes: nothing here touches nats-py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .._errors import InvalidSubjectError

__all__ = [
    "ACK_TAILS",
    "ACK_WRITE_BYTES",
    "MAX_SUBJECT_LINE",
    "RawHandler",
    "Reply",
    "check_line",
    "pub_command",
]

#: A raw message handler: ``handler(subject, reply, payload, header_block)``.
RawHandler = Callable[[bytes, bytes, bytes, "bytes | None"], None]
#: A reply: its payload and its raw header block (None without headers).
Reply = tuple[bytes, "bytes | None"]

#: the line it stays under the server's default ``max_control_line`` (4,096 bytes),
#: past which the server answers -ERR and closes the connection for good.
MAX_SUBJECT_LINE: Final = 4000


def check_line(subject: bytes, reply: bytes) -> None:
    """Refuse a subject and reply too long for one protocol line (InvalidSubjectError).

    The backstop of every send: subjects the library builds (a key-value key, an
    object's name, a filter) must not cost the connection either.
    """
    if len(subject) + len(reply) > MAX_SUBJECT_LINE:
        raise InvalidSubjectError(
            f"subject {subject[:40]!r}... is {len(subject)} bytes: too long for the server's "
            f"protocol line ({MAX_SUBJECT_LINE} bytes with the reply), which would close "
            "the connection; nothing was sent"
        )


def pub_command(subject: bytes, reply: bytes, payload: bytes, header_block: bytes | None) -> bytes:
    """The PUB (or, with a header block, HPUB) protocol command of one message."""
    if header_block:
        size = len(header_block)
        if reply:
            return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
                subject,
                reply,
                size,
                size + len(payload),
                header_block,
                payload,
            )
        return b"HPUB %b %d %d\r\n%b%b\r\n" % (
            subject,
            size,
            size + len(payload),
            header_block,
            payload,
        )
    if reply:
        return b"PUB %b %b %d\r\n%b\r\n" % (subject, reply, len(payload), payload)
    return b"PUB %b %d\r\n%b\r\n" % (subject, len(payload), payload)


#: Queued bytes after which :meth:`Conn.ack_nowait` writes the outgoing buffer at once
#: (about 55 acks; they would otherwise wait until the event loop runs the flusher).
ACK_WRITE_BYTES = 4096
#: The end of an ack's PUB command, after its subject, for the usual payloads.
ACK_TAILS = {
    payload: b" %d\r\n%b\r\n" % (len(payload), payload)
    for payload in (b"+ACK", b"-NAK", b"+WPI", b"+TERM")
}

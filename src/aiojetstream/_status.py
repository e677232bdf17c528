r"""Classification of JetStream status messages (ADR-37 "Status handling").

A status message is a message whose raw header block carries a code on its
first line, for example::

    NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\nNats-Pending-Bytes: 9\r\n\r\n
    NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 3\r\nNats-Last-Stream: 7\r\n\r\n
    NATS/1.0 404 No Messages\r\n\r\n
    NATS/1.0 503\r\n\r\n

whereas a user message with headers starts with ``NATS/1.0\r\n``.

:func:`is_status` is the per-message fast check; :func:`parse_status` (called
only for status messages) turns the block into a :class:`Status` telling the
pull driver what happened (:class:`StatusKind`), how loud to be about it
(:class:`Severity`), how much of the pull request the server released
(``Nats-Pending-Messages`` / ``Nats-Pending-Bytes``) and which error to raise or
report (:meth:`Status.error`).

Pure functions only: no asyncio, no nats-py. Nothing here raises on malformed
input (RELIABILITY G3).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from ._errors import (
    APIError,
    BadRequestError,
    ConsumerDeletedError,
    InvalidOptionError,
    JetStreamError,
    MessageTooLargeError,
    NoRespondersError,
    PinIdMismatchError,
)
from ._headers import PENDING_BYTES, PENDING_MESSAGES, decode_headers

__all__ = [
    "Severity",
    "Status",
    "StatusKind",
    "is_status",
    "parse_status",
]

_PREFIX: Final = b"NATS/1.0 "
_SPACE: Final = 0x20
_PENDING_MESSAGES_LOWER: Final = PENDING_MESSAGES.lower()
_PENDING_BYTES_LOWER: Final = PENDING_BYTES.lower()


def is_status(hdr: bytes | None) -> bool:
    r"""Tell whether a raw header block is a status (fast, called per message).

    Every header block starts with the 8-byte version ``NATS/1.0``; a user
    message's block continues with ``\r\n``, a status's with a space and the
    code. The check is exactly::

        hdr is not None and len(hdr) > 9 and hdr[8] == 0x20

    It does not validate the code: a block for which this returns True but
    :func:`parse_status` returns None is a malformed status, which callers must
    not deliver as a user message (report it instead).

    Args:
        hdr: The raw header block of a message, or None when it has none.

    Returns:
        True when the block's first line carries something after ``NATS/1.0 ``.

    """
    return hdr is not None and len(hdr) > 9 and hdr[8] == _SPACE


class StatusKind(enum.Enum):
    """What a status message means (ADR-37 "Status handling")."""

    HEARTBEAT = "heartbeat"
    """100 Idle Heartbeat."""
    FLOW_CONTROL = "flow_control"
    """100 FlowControl Request."""
    NO_MESSAGES = "no_messages"
    """404 No Messages (a ``no_wait`` pull found nothing)."""
    REQUEST_TIMEOUT = "request_timeout"
    """408 Request Timeout (the pull request expired)."""
    MAX_BYTES = "max_bytes"
    """409 Message Size Exceeds MaxBytes (the next message exceeds the pull's max_bytes)."""
    BATCH_COMPLETED = "batch_completed"
    """409 Batch Completed."""
    LEADERSHIP_CHANGE = "leadership_change"
    """409 Leadership Change (the consumer leader moved; pull again)."""
    SERVER_SHUTDOWN = "server_shutdown"
    """409 Server Shutdown."""
    CONSUMER_DELETED = "consumer_deleted"
    """409 Consumer Deleted (terminal)."""
    PUSH_BASED = "push_based"
    """409 Consumer is push based (terminal)."""
    EXCEEDED_LIMIT = "exceeded_limit"
    """409 Exceeded MaxRequestBatch / MaxRequestExpires / MaxRequestMaxBytes / MaxWaiting."""
    PIN_MISMATCH = "pin_mismatch"
    """423 Nats-Pin-Id mismatch or Nats-Wrong-Pin-Id (ADR-42 pinned client: the pin was lost)."""
    BAD_REQUEST = "bad_request"
    """400 Bad Request (terminal)."""
    NO_RESPONDERS = "no_responders"
    """503 No Responders (nothing answered the pull request)."""
    OTHER = "other"
    """Any other code, or a known code with an unknown description."""


class Severity(enum.Enum):
    """How the pull driver handles a status (ADR-37 "Status handling").

    ``SILENT`` statuses end or punctuate a pull and are not telegraphed;
    ``WARNING`` ones are reported to the error handler and the pull goes on;
    ``TERMINAL`` ones end ``fetch``/``next``/``consume`` with :meth:`Status.error`;
    ``CHECK_CONSUMER`` (503) means the driver must check the consumer still
    exists before deciding.
    """

    SILENT = "silent"
    WARNING = "warning"
    TERMINAL = "terminal"
    CHECK_CONSUMER = "check_consumer"


#: The severity of every kind. Unknown statuses (OTHER) are reported, never swallowed.
SEVERITY: Final[dict[StatusKind, Severity]] = {
    StatusKind.HEARTBEAT: Severity.SILENT,
    StatusKind.FLOW_CONTROL: Severity.SILENT,
    StatusKind.NO_MESSAGES: Severity.SILENT,
    StatusKind.REQUEST_TIMEOUT: Severity.SILENT,
    StatusKind.MAX_BYTES: Severity.SILENT,
    StatusKind.BATCH_COMPLETED: Severity.SILENT,
    StatusKind.LEADERSHIP_CHANGE: Severity.SILENT,
    StatusKind.SERVER_SHUTDOWN: Severity.SILENT,
    StatusKind.PIN_MISMATCH: Severity.SILENT,
    StatusKind.EXCEEDED_LIMIT: Severity.WARNING,
    StatusKind.OTHER: Severity.WARNING,
    StatusKind.BAD_REQUEST: Severity.TERMINAL,
    StatusKind.CONSUMER_DELETED: Severity.TERMINAL,
    StatusKind.PUSH_BASED: Severity.TERMINAL,
    StatusKind.NO_RESPONDERS: Severity.CHECK_CONSUMER,
}

# Lower-cased description prefixes, per code.
_BY_DESCRIPTION: Final[dict[int, tuple[tuple[str, StatusKind], ...]]] = {
    100: (
        ("idle heartbeat", StatusKind.HEARTBEAT),
        ("flowcontrol request", StatusKind.FLOW_CONTROL),
    ),
    409: (
        ("message size exceeds maxbytes", StatusKind.MAX_BYTES),
        ("batch completed", StatusKind.BATCH_COMPLETED),
        ("leadership change", StatusKind.LEADERSHIP_CHANGE),
        ("server shutdown", StatusKind.SERVER_SHUTDOWN),
        ("consumer deleted", StatusKind.CONSUMER_DELETED),
        ("consumer is push based", StatusKind.PUSH_BASED),
        ("exceeded maxrequestbatch", StatusKind.EXCEEDED_LIMIT),
        ("exceeded maxrequestexpires", StatusKind.EXCEEDED_LIMIT),
        ("exceeded maxrequestmaxbytes", StatusKind.EXCEEDED_LIMIT),
        ("exceeded maxwaiting", StatusKind.EXCEEDED_LIMIT),
    ),
}

# Codes whose meaning does not depend on the description.
_BY_CODE: Final[dict[int, StatusKind]] = {
    400: StatusKind.BAD_REQUEST,
    404: StatusKind.NO_MESSAGES,
    408: StatusKind.REQUEST_TIMEOUT,
    423: StatusKind.PIN_MISMATCH,
    503: StatusKind.NO_RESPONDERS,
}


def classify(code: int, description: str) -> StatusKind:
    """Return the kind of a status from its code and description.

    Descriptions are matched case-insensitively by prefix; a 100 or 409 with an
    unknown description, and any unknown code, is :attr:`StatusKind.OTHER`.
    """
    kind = _BY_CODE.get(code)
    if kind is not None:
        return kind
    prefixes = _BY_DESCRIPTION.get(code)
    if prefixes is not None:
        lowered = description.lower()
        for prefix, kind in prefixes:
            if lowered.startswith(prefix):
                return kind
    return StatusKind.OTHER


@dataclass(frozen=True, slots=True)
class Status:
    """A parsed JetStream status message.

    Attributes:
        code: The status code (100, 400, 404, 408, 409, 423, 503, ...).
        description: The text after the code ("" when there is none).
        kind: What the status means.
        severity: How the pull driver handles it (ADR-37 "Status handling").
        pending_messages: ``Nats-Pending-Messages``: how many messages of the
            pull request the server released (0 when absent or invalid).
        pending_bytes: ``Nats-Pending-Bytes``: likewise for bytes.
        headers: Every other header line (for example ``Nats-Last-Consumer`` and
            ``Nats-Last-Stream`` on heartbeats), values of repeated keys joined
            with ``", "``.

    """

    code: int
    description: str
    kind: StatusKind
    severity: Severity
    pending_messages: int = 0
    pending_bytes: int = 0
    headers: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def terminates_pull(self) -> bool:
        """True unless the status is a heartbeat or a flow-control request.

        Every other status ends the pull request it answers (ADR-37).
        """
        return self.kind is not StatusKind.HEARTBEAT and self.kind is not StatusKind.FLOW_CONTROL

    def error(self) -> JetStreamError:
        """Build the error to raise (TERMINAL) or report (WARNING) for this status.

        * 409 Consumer Deleted: :class:`~aiojetstream.ConsumerDeletedError`.
        * 503: :class:`~aiojetstream.NoRespondersError`.
        * 409 Message Size Exceeds MaxBytes:
          :class:`~aiojetstream.MessageTooLargeError`.
        * 400: :class:`~aiojetstream.BadRequestError`.
        * 409 Consumer is push based: :class:`~aiojetstream.InvalidOptionError`
          (this library pulls: create the consumer without ``deliver_subject``).
        * 423: :class:`~aiojetstream.PinIdMismatchError` (``reason``
          ``"wrong_pin"`` for ``Nats-Wrong-Pin-Id``, else ``"mismatch"``).
        * anything else: :class:`~aiojetstream.APIError` with ``err_code`` 0.

        The message always contains the code and the description, for example
        ``"Exceeded MaxRequestBatch of 10 (code=409, err_code=0)"``.
        """
        text = f"{self.code} {self.description}".rstrip()
        kind = self.kind
        if kind is StatusKind.CONSUMER_DELETED:
            return ConsumerDeletedError(f"the consumer was deleted ({text})")
        if kind is StatusKind.NO_RESPONDERS:
            return NoRespondersError(
                f"no responders for the pull request ({text}): the consumer or stream may be gone"
            )
        if kind is StatusKind.MAX_BYTES:
            return MessageTooLargeError(
                f"a message is larger than the pull request's max_bytes ({text})"
            )
        if kind is StatusKind.PIN_MISMATCH:
            reason = "wrong_pin" if "wrong" in self.description.lower() else "mismatch"
            return PinIdMismatchError(f"the pinned client lost its pin ({text})", reason)
        if kind is StatusKind.PUSH_BASED:  # the consumer became one after the handle was made
            return InvalidOptionError(
                f"the consumer is a push consumer ({text}): aiojetstream pulls: create the "
                "consumer without deliver_subject (a pull consumer)"
            )
        description = self.description or f"status {self.code}"
        if kind is StatusKind.BAD_REQUEST:
            return BadRequestError(self.code, 0, description)
        return APIError(self.code, 0, description)


def _pending(value: str | None) -> int:
    if value is None:
        return 0
    value = value.strip()
    if value.isascii() and value.isdigit() and len(value) <= 20:  # (int() refuses 4,301)
        return int(value)
    return 0


def parse_status(hdr: bytes) -> Status | None:
    r"""Parse a raw header block into a :class:`Status`.

    Args:
        hdr: The raw header block (``NATS/1.0 <code> [description]\r\n...``).

    Returns:
        The status, or None when the block is not a status or its code is not
        three ASCII digits. Never raises: invalid pending counts read as 0 and
        non-UTF-8 bytes are replaced.

    """
    if not isinstance(hdr, bytes | bytearray | memoryview):
        return None
    hdr = bytes(hdr)
    if not hdr.startswith(_PREFIX):
        return None
    end = hdr.find(b"\n")
    line = hdr[len(_PREFIX) : end if end >= 0 else len(hdr)].strip()
    code_bytes, _, desc_bytes = line.partition(b" ")
    if len(code_bytes) != 3 or not code_bytes.isdigit():
        return None
    code = int(code_bytes)
    description = desc_bytes.strip().decode("utf-8", "replace")
    kind = classify(code, description)
    pending_messages = pending_bytes = 0
    headers: dict[str, str] = {}
    if end >= 0 and end + 1 < len(hdr):
        decoded, _, _ = decode_headers(hdr)
        if decoded:
            for key, value in decoded.items():
                folded = key.lower()
                if folded == _PENDING_MESSAGES_LOWER:
                    pending_messages = _pending(value)
                elif folded == _PENDING_BYTES_LOWER:
                    pending_bytes = _pending(value)
                else:
                    headers[key] = value
    return Status(
        code=code,
        description=description,
        kind=kind,
        severity=SEVERITY[kind],
        pending_messages=pending_messages,
        pending_bytes=pending_bytes,
        headers=headers,
    )

"""Publish options: validated into headers, the header block, sizes and waits.

What every publish call checks before anything is sent: its headers and
the JetStream options that become headers (msg id, TTL, expected stream and
sequences), the ``NATS/1.0`` block they are sent as, the size against the
server's ``max_payload``, and the client-side waits. Pure: nothing here
talks to a server.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta

from .. import _bounds as B
from .. import _headers as H
from .._conn import Conn
from .._errors import (
    InvalidHeaderError,
    InvalidOptionError,
    MaxPayloadExceededError,
)
from .._models._ranges import check_ttl_from_now
from .._validation import check_sequence


def build_headers(
    headers: Mapping[str, str] | None,
    msg_id: str | None,
    ttl: H.TTLInput | None,
    expected_stream: str | None,
    expected_last_sequence: int | None,
    expected_last_subject_sequence: int | None,
    expected_last_msg_id: str | None,
) -> dict[str, str] | None:
    """Validate the publish options and return the headers to send (None for none)."""
    out: dict[str, str] = {}
    if headers is not None:
        if not isinstance(headers, Mapping):
            raise InvalidHeaderError(
                f"headers must be a mapping of str to str, got {B.shown(headers)}"
            )
        for key, value in headers.items():
            key, value = H.validate_header(key, value)
            out[key] = value
        # The ids given as headers are checked as the arguments are (the server
        # reads these exact names; a lookup each, nothing per header).
        if H.MSG_ID in out:
            _id_value(out[H.MSG_ID], f"headers[{H.MSG_ID!r}]")
        if H.EXPECTED_LAST_MSG_ID in out:
            _id_value(out[H.EXPECTED_LAST_MSG_ID], f"headers[{H.EXPECTED_LAST_MSG_ID!r}]")
    if msg_id is not None:
        out[H.MSG_ID] = _msg_id(H.MSG_ID, msg_id, "msg_id")
    if ttl is not None:
        # Counted from when the message is stored: past the server's clock, expired at once.
        out[H.TTL] = check_ttl_from_now(H.ttl_header_value(ttl))
    if expected_stream is not None:
        _, out[H.EXPECTED_STREAM] = H.validate_header(H.EXPECTED_STREAM, expected_stream)
    if expected_last_sequence is not None:
        out[H.EXPECTED_LAST_SEQ] = _sequence(expected_last_sequence, "expected_last_sequence")
    if expected_last_subject_sequence is not None:
        out[H.EXPECTED_LAST_SUBJ_SEQ] = _sequence(
            expected_last_subject_sequence, "expected_last_subject_sequence"
        )
    if expected_last_msg_id is not None:
        out[H.EXPECTED_LAST_MSG_ID] = _msg_id(
            H.EXPECTED_LAST_MSG_ID, expected_last_msg_id, "expected_last_msg_id"
        )
    return out or None


def _msg_id(header: str, value: object, name: str) -> str:
    """A validated msg id header value: not empty, nor with whitespace around it.

    :func:`header_block` strips values, so a blank id would go out empty (and
    the server would not de-duplicate on it), and ``"a "`` would go out as
    ``"a"``: two ids the caller told apart would be one to the server, the
    second message dropped as its duplicate.
    """
    _, value = H.validate_header(header, value)
    return _id_value(value, name)


def _id_value(value: str, name: str) -> str:
    """``value`` (a valid header value) unless it is blank or has whitespace around it.

    Any whitespace, not only the ASCII blanks this client strips: nats-py (the
    fallback path publishes through it) strips values with ``str.strip()``, so
    ``"a\u00a0"`` would go out as ``"a"`` there, a duplicate of ``"a"``.
    """
    stripped = value.strip()
    if not stripped:
        raise InvalidOptionError(f"{name} must not be empty or only whitespace, got {value!r}")
    if value != stripped:
        raise InvalidOptionError(
            f"{name} must not begin or end with whitespace, got {value!r}: header values "
            f"are sent stripped, so it would be the same id as {stripped!r}"
        )
    return value


def _sequence(value: object, name: str) -> str:
    return str(check_sequence(value, name))  # the digits, whatever a subclass's __str__ says


def header_block(headers: dict[str, str] | None) -> bytes | None:
    """The NATS/1.0 header block of validated headers (None without headers).

    Values are stripped of surrounding ASCII blanks (space and tab; nothing else
    passes the checks), as nats-py sends them.
    """
    if not headers:
        return None
    parts = [H.HEADER_LINE]
    for key, value in headers.items():
        parts.append(f"{key}: {value.strip(H.BLANKS)}\r\n".encode())
    parts.append(b"\r\n")
    return b"".join(parts)


def check_size(conn: Conn, payload: bytes, block: bytes | None) -> None:
    """Raise :class:`MaxPayloadExceededError` if headers plus payload exceed max_payload."""
    limit = conn.max_payload
    if not limit:
        return
    total = len(payload) + (len(block) if block else 0)
    if total > limit:
        raise MaxPayloadExceededError(
            f"message of {total} bytes (headers included) exceeds the server's "
            f"max_payload of {limit} bytes"
        )


def check_sizes(
    conn: Conn, payloads: Sequence[bytes], blocks: Sequence[bytes | None] | None
) -> None:
    """:func:`check_size` for many messages (``blocks``: one per payload, or None for none)."""
    limit = conn.max_payload
    if not limit or not payloads:
        return
    if blocks is None:
        check_size(conn, max(payloads, key=len), None)
        return
    for payload, block in zip(payloads, blocks, strict=True):
        if len(payload) + (len(block) if block else 0) > limit:
            check_size(conn, payload, block)


def payload_bytes(payload: bytes | bytearray | memoryview | str) -> bytes:
    """Return the payload as bytes (str is refused: encode it explicitly)."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise InvalidOptionError(f"payload must be bytes, got {type(payload).__name__}")


def duration_seconds(value: float | timedelta | str | None, name: str) -> float | None:
    """A client-side wait as float seconds (None stays None; 0 allowed).

    Raises:
        InvalidOptionError: not seconds, a timedelta or a duration string, NaN (its own message),
            negative, or longer than the server's int64 nanoseconds (about 292
            years; ``inf`` and ``1e300`` included: nothing means "forever").

    """
    if value is None:
        return None
    return B.seconds(value, name, zero=True)


def hold_seconds(value: float | timedelta | str | None) -> float | None:
    """Validate ``hold_when_full``: a positive duration (``"30s"`` too), at most ``B.MAX_WAIT``.

    Raises:
        InvalidOptionError: anything else; NaN says so (it said "must not be
            negative"), and ``1e300`` is refused as ``inf`` is.

    """
    if value is None:
        return None
    return B.seconds(value, "hold_when_full")


def new_msg_id() -> str:
    """A ``Nats-Msg-Id`` for the retries of one held publish."""
    return uuid.uuid4().hex


def held_msg_id(msg_id: str | None, headers: object) -> str | None:
    """The ``msg_id`` of a held publish: the one given, else a new one.

    Given as the argument, or as the ``Nats-Msg-Id`` header (the server reads
    that exact name): None then, the header stays the id (a generated one
    replaced it, and every call was stored again). A header that is blank
    once stripped (as it is sent) is no id: :func:`build_headers` refuses it.
    """
    if msg_id is not None:
        return msg_id
    if isinstance(headers, Mapping):
        given = headers.get(H.MSG_ID)
        if isinstance(given, str) and given.strip():
            return None
    return new_msg_id()

"""One publish at a time: the acknowledgement, retries, and holding while the stream is full.

``publish`` sends a request and waits for the stream's acknowledgement,
retrying what may pass on its own (no responders during an election, a msg
id still being stored); ``hold_when_full`` retries a publish the stream
refused as full. The replies are parsed here for every publish path.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Final

from pydantic import ValidationError

from .. import _headers as H
from .._api import check_reply
from .._conn import Conn
from .._errors import (
    DuplicateMsgIdInProcessError,
    InvalidResponseError,
    JetStreamError,
    NoRespondersError,
    StreamFullError,
)
from .._models import PubAck

#: How often ``publish`` retries when no stream answers, and how long it waits
#: in between (as the Go client: 2 retries, 250 ms apart), within its timeout.
PUBLISH_RETRY_ATTEMPTS = 2
PUBLISH_RETRY_WAIT = 0.25
#: "duplicate message id is in process" (DuplicateMsgIdInProcessError, 10158):
#: a copy with the same Nats-Msg-Id (an earlier attempt, a publish buffered
#: across a reconnect) is still being stored. ``publish`` asks again, waiting
#: 50 ms doubling to 1 s (at most 20 requests a second), until the duplicate
#: acknowledgement or its timeout.
IN_PROCESS_FIRST_WAIT: Final = 0.05
IN_PROCESS_MAX_WAIT: Final = 1.0


def parse_pub_ack(data: bytes) -> PubAck:
    """Parse a publish acknowledgement, raising the typed error it may carry."""
    if b'"error"' in data:
        check_reply(data)
    try:
        # model_validate_json without its wrapper (this runs once per publish).
        ack: PubAck = PubAck.__pydantic_validator__.validate_json(data)
    except ValidationError as exc:
        raise invalid_ack(data) from exc
    return ack


def invalid_ack(data: bytes) -> InvalidResponseError:
    """The error of a reply that is no publish acknowledgement (an empty one explained)."""
    if not data:
        return InvalidResponseError(
            "an empty reply to a publish, not a JetStream acknowledgement: nats-server "
            "answers so the messages of an atomic batch before its commit (Nats-Batch-* "
            "headers; js.atomic_batch() sends a batch) and stores them only once it is "
            "committed; otherwise a service that is no stream answered the subject"
        )
    return InvalidResponseError(f"invalid publish acknowledgement: {data[:200]!r}")


def no_stream_text(shown: str) -> str:
    """What a publish nothing answered says: no stream, no JetStream, or no stream leader."""
    return (
        f"no stream captures subject {shown}: create a stream whose subjects match it "
        "(a server without JetStream enabled answers the same, and so does a clustered "
        "stream while it has no leader: an election, or a quorum lost; retry then)"
    )


def ack_from_reply(
    data: bytes, hdr: bytes | None, subject: str, shown: str | None = None
) -> PubAck:
    """Turn a reply (payload and raw header block) into a PubAck or raise its typed error.

    ``shown``: how errors name the subject (default: quoted).
    """
    if hdr and not data:
        status = H.decode_headers(hdr)[1]
        if status == "503":
            raise NoRespondersError(no_stream_text(shown or repr(subject)))
        if status is not None:
            raise InvalidResponseError(f"unexpected status {status} in reply to a publish")
    return parse_pub_ack(data)


async def publish(
    conn: Conn,
    subject: str,
    payload: bytes,
    block: bytes | None,
    timeout: float,
) -> PubAck:
    """Publish and wait for the stream's acknowledgement.

    ``timeout`` bounds the whole call, retries included. No responders (no
    stream, or none during an election) is retried ``PUBLISH_RETRY_ATTEMPTS``
    times ``PUBLISH_RETRY_WAIT`` apart; err_code 10158 (the msg id is still
    being stored) until the duplicate acknowledgement comes, with a doubling
    wait. A retry is made only if the deadline leaves time after its wait;
    otherwise the last error is raised.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    left = timeout
    no_responders = 0
    in_process_wait = IN_PROCESS_FIRST_WAIT
    while True:
        error: JetStreamError
        try:
            data, hdr = await conn.request(subject, payload, left, block)
            return ack_from_reply(data, hdr, subject)
        except NoRespondersError:
            error = NoRespondersError(no_stream_text(repr(subject)))
            if no_responders >= PUBLISH_RETRY_ATTEMPTS:
                raise error from None
            no_responders += 1
            wait = PUBLISH_RETRY_WAIT
        except DuplicateMsgIdInProcessError as exc:
            error = exc
            wait = in_process_wait
            in_process_wait = min(IN_PROCESS_MAX_WAIT, 2 * in_process_wait)
        if deadline - loop.time() <= wait:
            raise error  # no time for another attempt after the wait
        await asyncio.sleep(wait)
        left = deadline - loop.time()
        if left <= 0:
            raise error


#: At most 20 attempts a second: the first retry waits 50 ms, doubling to 1 s.
HOLD_MIN_WAIT: Final = 0.05
HOLD_MAX_WAIT: Final = 1.0
#: The first wait is jittered in [50, 100] ms so held publishers do not retry in step.
HOLD_FIRST_WAIT: Final = 0.1


async def hold_when_full(attempt: Callable[[], Awaitable[PubAck]], hold: float) -> PubAck:
    """Retry ``attempt`` while the stream is full, for up to ``hold`` seconds.

    Pulsar's ``producer_request_hold`` on the client: the waits are jittered,
    start at 50-100 ms and double to 1 s, so there are at most 20 attempts a
    second; the last :class:`StreamFullError` is raised once ``hold`` is up.
    (``publish_async`` holds inside :class:`.window.AsyncPublisher` instead.)
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + hold
    wait = HOLD_FIRST_WAIT
    pending = attempt()
    while True:
        try:
            return await pending
        except StreamFullError:
            left = deadline - loop.time()
            if left < HOLD_MIN_WAIT:
                raise  # no room for another attempt at 20 a second
        # Jitter within [HOLD_MIN_WAIT, wait]: never faster than 20 attempts a second.
        await asyncio.sleep(min(left, random.uniform(HOLD_MIN_WAIT, wait)))
        wait = min(HOLD_MAX_WAIT, wait * 2)
        pending = attempt()

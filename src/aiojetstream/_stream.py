"""The ``Stream`` handle: info, purge, message get/delete and the stream's consumers."""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from . import _admin as A
from . import _api
from . import _consumer as C
from . import _direct as D
from . import _headers as H
from ._api import ApiClient
from ._bounds import shown
from ._conn import Reply
from ._errors import (
    InvalidOptionError,
    InvalidResponseError,
    JetStreamError,
    MessageNotFoundError,
    NoRespondersError,
    api_error,
)
from ._models import (
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPauseResponse,
    OrderedConsumerConfig,
    RawStreamMessage,
    StreamInfo,
    parse_timestamp,
)
from ._ordered import OrderedConsumer, make_ordered
from ._validation import check_sequence, check_timeout, validate_filter_subject

# Headers a direct get adds to describe the stored message; they are moved into
# RawStreamMessage's fields rather than repeated in its headers.
#: The headers nats-server adds to a single direct get's reply (its ``dg`` template; a
#: batch's replies also carry Nats-Num-Pending and Nats-Last-Sequence, see ``_direct``).
_DIRECT_META = frozenset(
    {
        H.STREAM,
        H.SUBJECT,
        H.SEQUENCE,
        H.TIME_STAMP,
    }
)


def _parse_time(text: str) -> datetime:
    try:
        return parse_timestamp(text)  # nanoseconds kept (NanoDatetime)
    except ValueError as exc:
        raise InvalidResponseError(f"invalid timestamp {text!r}") from exc


def stored_fields(reply: dict[str, Any]) -> tuple[dict[str, Any], str, int, datetime]:
    """The message of a ``STREAM.MSG.GET`` reply: itself, its subject, sequence and time.

    Raises:
        InvalidResponseError: no message, or a field missing or of the wrong type
            (the sequence must be an integer from 0 to 2**64 - 1).

    """
    raw = reply.get("message")
    if not isinstance(raw, dict):
        raise InvalidResponseError(f"unexpected message get reply: {shown(reply)}")
    subject = _api.reply_text(raw.get("subject"), "message subject")
    seq = _api.reply_int(raw.get("seq"), "message sequence")
    time = _parse_time(_api.reply_text(raw.get("time"), "message time"))
    return raw, subject, seq, time


def stored_message(reply: dict[str, Any]) -> RawStreamMessage:
    """Build a RawStreamMessage from a ``STREAM.MSG.GET`` reply.

    Raises:
        InvalidResponseError: the reply is not a message get's (see :func:`stored_fields`),
            or its data or headers are not base64 text.

    """
    raw, subject, seq, time = stored_fields(reply)
    data_text = raw.get("data") or ""
    hdrs = raw.get("hdrs") or ""
    if not isinstance(data_text, str) or not isinstance(hdrs, str):
        raise InvalidResponseError("message get reply: data or headers that are not text")
    try:
        data = base64.b64decode(data_text)
        headers = H.decode_headers(base64.b64decode(hdrs))[0] if hdrs else None
    except (binascii.Error, ValueError) as exc:
        raise InvalidResponseError("invalid base64 in a message get reply") from exc
    return RawStreamMessage(subject=subject, seq=seq, headers=headers, data=data, time=time)


def direct_fields(
    data: bytes, block: bytes | None, what: str
) -> tuple[str, int, datetime, dict[str, str]]:
    """Subject, sequence, time and stored headers of a direct get reply (or raise its status)."""
    parsed, status, description = H.decode_headers(block) if block else (None, None, None)
    hdrs = parsed or {}
    # A stored message is no status, whatever its first line says (the server
    # keeps a block that does not start "NATS/1.0" as it is).
    if status is not None and H.SEQUENCE not in hdrs:
        if status == "404":
            raise MessageNotFoundError(404, 10037, f"no message found for {what}")
        raise api_error(int(status) if status.isdigit() else 0, 0, description or status)
    meta, user = H.split_server_headers(hdrs, _DIRECT_META)
    try:
        return (
            meta[H.SUBJECT],
            _api.header_uint(meta[H.SEQUENCE], f"{H.SEQUENCE} header"),
            _parse_time(meta[H.TIME_STAMP]),
            user,
        )
    except KeyError as exc:
        raise InvalidResponseError(f"direct get reply without metadata: {hdrs!r}") from exc


def direct_message(data: bytes, block: bytes | None, what: str) -> RawStreamMessage:
    """Build a RawStreamMessage from a direct get reply (or raise its status)."""
    subject, seq, time, user = direct_fields(data, block, what)
    return RawStreamMessage(subject=subject, seq=seq, headers=user or None, data=data, time=time)


class Stream:
    """A handle on a stream. Get one from :meth:`JetStreamContext.stream` or a create call."""

    def __init__(self, api: ApiClient, info: StreamInfo) -> None:
        self._api = api
        self._info = info
        self._name = info.config.name
        self._direct_subject = api.subject(_api.DIRECT_GET, stream=self._name)

    @property
    def name(self) -> str:
        """The stream's name."""
        return self._name

    @property
    def cached_info(self) -> StreamInfo:
        """The info from the last server round trip (no request is made)."""
        return self._info

    def __repr__(self) -> str:
        return f"<Stream {self._name}>"

    async def info(
        self,
        *,
        deleted_details: bool = False,
        subjects_filter: str | None = None,
        timeout: float | timedelta | str | None = None,
    ) -> StreamInfo:
        """Fetch the stream's current info and cache it.

        Args:
            deleted_details: include the sequences of deleted messages.
            subjects_filter: include per-subject message counts for subjects
                matching this filter (all pages are fetched).
            timeout: how long to wait for each reply (seconds or a duration).

        """
        timeout = check_timeout(timeout)
        body: dict[str, Any] = {}
        if deleted_details:
            body["deleted_details"] = True
        if subjects_filter is not None:
            body["subjects_filter"] = validate_filter_subject(subjects_filter)
        subjects: dict[str, int] = {}
        offset = 0
        # The server sorts the subjects and pages them by offset (100,000 a page).
        # Each page after the first starts one subject early: it must begin at or
        # before the last subject listed so far, or subjects before the offset went
        # away meanwhile (expired, purged) and the page may start past some not
        # listed yet: then ask from further back.
        last = ""
        back = 1
        while True:
            if subjects_filter is not None:
                body["offset"] = offset
            reply = await self._api.call(
                _api.STREAM_INFO, body or None, timeout=timeout, stream=self._name
            )
            state = reply.get("state")
            page = (state.get("subjects") if isinstance(state, dict) else None) or {}
            if not isinstance(page, dict):
                raise InvalidResponseError(f"invalid subjects in a stream info: {shown(page)}")
            total = _api.reply_int(reply.get("total", 0), "stream info 'total'")
            if last and total and offset > 0 and (not page or min(page) > last):
                # (From offset 0 the page is the listing's true start: everything
                # listed before it went away; take it.)
                back *= 64
                offset = max(0, min(offset, total) - back)
                continue
            subjects.update(page)
            if subjects_filter is None or not page or offset + len(page) >= total:
                break
            overlap = len(page) > 1  # (pages are 100,000 subjects: always)
            last = max(page) if overlap else ""
            offset += len(page) - overlap
        if subjects_filter is not None and "state" in reply:
            reply["state"]["subjects"] = subjects
        info = _api.parse(StreamInfo, reply)
        _api.check_named("stream", self._name, info.config.name)
        self._info = info
        return info

    async def purge(
        self,
        *,
        subject: str | None = None,
        sequence: int | None = None,
        keep: int | None = None,
        timeout: float | timedelta | str | None = None,
    ) -> int:
        """Remove messages and return how many were purged.

        Args:
            subject: only purge messages on this subject (wildcards allowed).
            sequence: purge every message below this sequence (not including it).
            keep: keep this many of the newest messages.
            timeout: how long to wait for the reply (seconds or a duration).

        Raises:
            InvalidOptionError: ``sequence`` and ``keep`` were both given.

        """
        timeout = check_timeout(timeout)
        if sequence is not None and keep is not None:
            raise InvalidOptionError("purge takes either sequence or keep, not both")
        body: dict[str, Any] = {}
        if subject is not None:
            body["filter"] = validate_filter_subject(subject)
        if sequence is not None:
            body["seq"] = check_sequence(sequence, "sequence", 1)
            if body["seq"] == 1:
                # Nothing is below sequence 1; servers before 2.14.2 read seq=1 as
                # no sequence at all and purged everything (nats-server 28c298b29).
                return 0
        if keep is not None:
            body["keep"] = check_sequence(keep, "keep")
        reply = await self._api.call(
            _api.STREAM_PURGE, body or None, timeout=timeout, stream=self._name
        )
        return _api.reply_int(reply.get("purged", 0), "purged count")

    def _direct(self) -> bool:
        return bool(self._info.config.allow_direct)

    async def get_msg(
        self,
        sequence: int,
        *,
        subject: str | None = None,
        direct: bool = True,
        timeout: float | timedelta | str | None = None,
    ) -> RawStreamMessage:
        """Read the message stored at ``sequence`` (a direct get when the stream allows it).

        With ``subject`` (wildcards allowed), the first message at or after
        ``sequence`` on it (nats.go's ``WithGetMsgSubject``).

        In a cluster a direct get is answered by the replica nearest the
        client, which may not hold the last acknowledged write yet (no
        read-your-writes from a follower); a stream without ``allow_direct``
        is read from its leader, and so is every get with ``direct=False``
        (read-your-writes, at the cost of a round trip to the leader).

        Raises:
            MessageNotFoundError: no message has that sequence (or none on
                ``subject`` from it).
            InvalidSubjectError: ``subject`` is not a valid subject filter.

        """
        timeout = check_timeout(timeout)
        seq = check_sequence(sequence, "sequence", 1)
        body: dict[str, Any] = {"seq": seq}
        what = f"sequence {seq}"
        if subject is not None:
            body["next_by_subj"] = validate_filter_subject(subject)
            what = f"subject {body['next_by_subj']!r} from sequence {seq}"
        if not direct:
            return await self._api_get(body, timeout)
        return await self._get(body, what, timeout)

    async def get_last_msg_for_subject(
        self,
        subject: str,
        *,
        direct: bool = True,
        timeout: float | timedelta | str | None = None,
    ) -> RawStreamMessage:
        """Read the last message stored on ``subject`` (direct get when the stream allows it).

        As :meth:`get_msg`: a direct get may be answered by a replica one
        write behind; a stream without ``allow_direct``, or ``direct=False``,
        is read from its leader.

        Raises:
            MessageNotFoundError: the stream holds no message on that subject.

        """
        timeout = check_timeout(timeout)
        subject = validate_filter_subject(subject)  # (an exact str from here)
        if not direct:
            return await self._api_get({"last_by_subj": subject}, timeout)
        return await self._get({"last_by_subj": subject}, f"subject {subject!r}", timeout)

    async def _get(
        self, body: dict[str, Any], what: str, timeout: float | None
    ) -> RawStreamMessage:
        """A direct get when the stream allows it, else (or when nobody answers it) the API."""
        if self._direct():
            reply = await self._direct_get(_api.dumps(body), timeout)
            if reply is not None:
                return direct_message(reply[0], reply[1], what)
        return await self._api_get(body, timeout)

    def _direct_last_subject(self, subject: str) -> str | None:
        """The direct get subject of the last message on ``subject``, which needs no body.

        ``$JS.API.DIRECT.GET.<stream>.<subject>`` (nats-server 2.9, as direct
        gets; nats.go's KV gets use it): the server parses no JSON body. None
        when the subject is too long to go into a protocol line safely (the
        server's ``max_control_line`` is 4 KiB by default): send the body then.
        """
        full = f"{self._direct_subject}.{subject}"
        return full if len(full) <= _api.MAX_SUBJECT_WITH_SUBJECT else None

    async def _direct_get(
        self, body: bytes, timeout: float | None, subject: str | None = None
    ) -> Reply | None:
        """The raw reply to a direct get; None when nobody answers it (use the API then).

        ``subject`` is the request's subject when not the stream's direct get
        subject (see :meth:`_direct_last_subject`).
        """
        try:
            return await self._api.conn.request(
                self._direct_subject if subject is None else subject,
                body,
                self._api.timeout if timeout is None else timeout,
            )
        except NoRespondersError:
            # The direct-get responders of a new stream (or of a replica being
            # elected) may not be up yet: the stream leader answers instead.
            return None

    async def _api_get(self, body: dict[str, Any], timeout: float | None) -> RawStreamMessage:
        reply = await self._api.call(_api.STREAM_MSG_GET, body, timeout=timeout, stream=self._name)
        return stored_message(reply)

    def get_batch(
        self,
        batch: int,
        *,
        seq: int | None = None,
        subject: str | None = None,
        start_time: datetime | None = None,
        max_bytes: int | None = None,
        up_to_seq: int | None = None,
        up_to_time: datetime | None = None,
        timeout: float | timedelta | str | None = None,
    ) -> D.DirectBatch:
        """Read up to ``batch`` messages in one batch direct get (ADR-31; nats-server >= 2.11).

        ``async for msg in stream.get_batch(100, subject="orders.>"):`` yields
        :class:`RawStreamMessage` in stream order (timestamps keep their
        nanoseconds) and ends at the server's end-of-batch; nothing matching
        gives an empty iteration. The stream needs ``allow_direct``.

        Args:
            batch: the most messages to return (>= 1).
            seq: the first stream sequence to read (default 1); not with ``start_time``.
            subject: only messages on this subject (wildcards allowed).
            start_time: start at the first message stored at or after this time.
            max_bytes: stop once this many bytes were sent (the message that
                crosses the limit is still sent).
            up_to_seq: end before the first message above this sequence
                (checked client-side; the server ignores it here).
            up_to_time: end before the first message stored at or after this
                time (checked client-side); not with ``up_to_seq``.
            timeout: how long to wait for each reply (seconds or a duration).

        Raises:
            InvalidOptionError: an invalid or contradictory option (at once).
            FeatureNotSupportedError: the server is older than 2.11.
            NoRespondersError: the stream does not allow direct gets.
            DirectBatchGapError: a reply was dropped on the way.
            JetStreamTimeoutError: a reply did not come within ``timeout``.

        """
        timeout = check_timeout(timeout)
        body = D.batch_request(
            batch,
            seq=seq,
            subject=subject,
            start_time=start_time,
            max_bytes=max_bytes,
            up_to_seq=up_to_seq,
            up_to_time=up_to_time,
        )
        return D.DirectBatch(
            self._api,
            self._name,
            body,
            up_to_seq=up_to_seq,
            up_to_time=up_to_time,
            timeout=timeout,
            direct_off=not self._direct(),
        )

    def get_last_msgs_for(
        self,
        subjects: str | Sequence[str],
        *,
        up_to_seq: int | None = None,
        up_to_time: datetime | None = None,
        batch: int | None = None,
        seq: int | None = None,
        max_bytes: int | None = None,
        timeout: float | timedelta | str | None = None,
    ) -> D.DirectBatch:
        """The last message of each subject matching ``subjects`` (ADR-31 ``multi_last``).

        An async iterator of :class:`RawStreamMessage` in stream order
        (nats-server >= 2.11; the stream needs ``allow_direct``). With
        ``up_to_seq`` or ``up_to_time`` the values are those as of that point
        in the stream; after a complete iteration the returned batch's
        ``up_to_seq`` says which sequence they are as of.

        Args:
            subjects: one subject or several (wildcards allowed); at most
                1,024 subjects may match.
            up_to_seq: the last messages at or below this stream sequence.
            up_to_time: the last messages stored before this time (the server
                leaves out a message stored exactly at it).
            batch: return at most this many messages.
            seq: leave out messages below this stream sequence: continues a
                batch that ended with :attr:`~DirectBatch.num_pending` above 0
                from its ``last_seq + 1`` (give the same ``up_to_seq``, that
                batch's :attr:`~DirectBatch.up_to_seq`).
            max_bytes: stop once this many bytes were sent (the message that
                crosses the limit is still sent); the server's own limit
                otherwise (64 MiB by default).
            timeout: how long to wait for each reply (seconds or a duration).

        Raises:
            InvalidOptionError: an invalid or contradictory option (at once).
            TooManyResultsError: more than 1,024 subjects matched.
            FeatureNotSupportedError: the server is older than 2.11.
            NoRespondersError: the stream does not allow direct gets.
            DirectBatchGapError: a reply was dropped on the way.

        """
        timeout = check_timeout(timeout)
        body = D.last_msgs_request(
            subjects,
            up_to_seq=up_to_seq,
            up_to_time=up_to_time,
            batch=batch,
            seq=seq,
            max_bytes=max_bytes,
        )
        return D.DirectBatch(
            self._api,
            self._name,
            body,
            up_to_seq=up_to_seq,
            up_to_time=up_to_time,
            timeout=timeout,
            direct_off=not self._direct(),
        )

    async def delete_msg(
        self, sequence: int, *, erase: bool = False, timeout: float | timedelta | str | None = None
    ) -> None:
        """Delete the message at ``sequence``; ``erase=True`` overwrites its data on disk.

        Raises:
            MessageNotFoundError: no message has that sequence.

        """
        timeout = check_timeout(timeout)
        body: dict[str, Any] = {"seq": check_sequence(sequence, "sequence", 1)}
        if not erase:
            body["no_erase"] = True
        reply = await self._api.call(
            _api.STREAM_MSG_DELETE, body, timeout=timeout, stream=self._name
        )
        if not reply.get("success"):
            raise JetStreamError(f"deleting message {sequence} from {self._name!r} failed")

    # ------------------------------------------------------------ consumers

    async def create_consumer(
        self, config: ConsumerConfig, *, timeout: float | timedelta | str | None = None
    ) -> C.Consumer:
        """Create a consumer; fails if one of that name exists with a different config."""
        timeout = check_timeout(timeout)
        return C.Consumer(
            self._api,
            await C.upsert_consumer(self._api, self._name, config, C.ACTION_CREATE, timeout),
        )

    async def update_consumer(
        self, config: ConsumerConfig, *, timeout: float | timedelta | str | None = None
    ) -> C.Consumer:
        """Update an existing consumer; fails if it does not exist."""
        timeout = check_timeout(timeout)
        return C.Consumer(
            self._api,
            await C.upsert_consumer(self._api, self._name, config, C.ACTION_UPDATE, timeout),
        )

    async def create_or_update_consumer(
        self, config: ConsumerConfig, *, timeout: float | timedelta | str | None = None
    ) -> C.Consumer:
        """Create a consumer, or update it if it exists."""
        timeout = check_timeout(timeout)
        return C.Consumer(
            self._api,
            await C.upsert_consumer(
                self._api, self._name, config, C.ACTION_CREATE_OR_UPDATE, timeout
            ),
        )

    async def consumer(
        self, name: str, *, timeout: float | timedelta | str | None = None
    ) -> C.Consumer:
        """A handle on an existing consumer (pulls refused on a push consumer's).

        Raises:
            ConsumerNotFoundError: the consumer does not exist.

        """
        timeout = check_timeout(timeout)
        info = await C.consumer_info(self._api, self._name, name, timeout)
        return C.Consumer(self._api, info)

    async def delete_consumer(
        self, name: str, *, timeout: float | timedelta | str | None = None
    ) -> None:
        """Delete a consumer of this stream."""
        timeout = check_timeout(timeout)
        await C.delete_consumer(self._api, self._name, name, timeout)

    async def pause_consumer(
        self,
        name: str,
        until: datetime | timedelta | float | str,
        *,
        timeout: float | timedelta | str | None = None,
    ) -> ConsumerPauseResponse:
        """Pause a consumer of this stream until ``until`` (see :meth:`Consumer.pause`)."""
        timeout = check_timeout(timeout)
        return await A.pause(self._api, self._name, name, until, timeout)

    async def resume_consumer(
        self, name: str, *, timeout: float | timedelta | str | None = None
    ) -> ConsumerPauseResponse:
        """Resume a paused consumer of this stream (see :meth:`Consumer.resume`)."""
        timeout = check_timeout(timeout)
        return await A.resume(self._api, self._name, name, timeout)

    async def ordered_consumer(
        self, config: OrderedConsumerConfig | None = None
    ) -> OrderedConsumer:
        """An ordered consumer on this stream (ADR-17); see :class:`OrderedConsumer`."""
        return make_ordered(self._api, self._name, config, self._info.created)

    def list_consumers(
        self, *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[ConsumerInfo]:
        """Async-iterate the info of every consumer of this stream (all pages)."""
        timeout = check_timeout(timeout)
        return C.list_consumers(self._api, self._name, timeout)

    def consumer_names(
        self, *, timeout: float | timedelta | str | None = None
    ) -> AsyncIterator[str]:
        """Async-iterate the names of every consumer of this stream (all pages)."""
        timeout = check_timeout(timeout)
        return C.consumer_names(self._api, self._name, timeout)

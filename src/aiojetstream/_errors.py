"""The aiojetstream exception tree.

Every error the library raises derives from :class:`JetStreamError`::

    JetStreamError
    ├── APIError (code, err_code, description)          server error replies
    │   ├── JetStreamNotEnabledError       10076, 10039 (also: no responders on the API)
    │   ├── BadRequestError                10003
    │   ├── StreamNotFoundError            10059
    │   ├── StreamNameInUseError           10058
    │   ├── StreamSubjectOverlapError      10065
    │   ├── StreamConfigError              invalid stream config (codes: docs/errors.md)
    │   ├── StreamSealedError              10109 (a write to a sealed stream or bucket)
    │   ├── StreamNotMatchError            10060 (expected_stream mismatch)
    │   ├── WrongLastSequenceError         10071, 10164 (expected_last_[subject_]sequence)
    │   ├── WrongLastMsgIdError            10070 (expected_last_msg_id)
    │   ├── DuplicateMsgIdInProcessError   10158 (an earlier copy of this msg id is being stored)
    │   ├── MessageNotFoundError           10037, 10043
    │   │   └── CounterNotFoundError       a counter's subject has no value (client-side, 404)
    │   ├── MessageDeleteError             10057, 10110 (a delete / purge refused)
    │   ├── MessageSizeExceedsMaximumError 10054, 10097 (headers over 64 KiB)
    │   ├── MessageTTLInvalidError         10165
    │   ├── MessageTTLDisabledError        10166
    │   ├── CountersDisabledError          10168 (Nats-Incr on a stream without allow_msg_counter)
    │   ├── CounterIncrementError          10169, 10170, 10171 (missing, with a payload, invalid)
    │   ├── AtomicPublishError             an atomic batch refused (ADR-50)
    │   │   ├── AtomicPublishDisabledError 10174
    │   │   ├── BatchSequenceMissingError  10175
    │   │   ├── BatchIncompleteError       10176 (a gap, an unknown batch, idle > 10 s)
    │   │   ├── BatchUnsupportedHeaderError 10177
    │   │   ├── BatchIdInvalidError        10179
    │   │   ├── BatchTooLargeError         10199 (also client-side, before sending)
    │   │   ├── BatchCommitInvalidError    10200
    │   │   ├── BatchDuplicateMsgIdError   10201
    │   │   └── TooManyInflightBatchesError 10210
    │   ├── MessageScheduleError           a schedule refused (ADR-51)
    │   │   ├── SchedulesDisabledError     10188
    │   │   ├── SchedulePatternInvalidError 10189
    │   │   ├── ScheduleTargetInvalidError 10190
    │   │   ├── ScheduleTTLInvalidError    10191
    │   │   ├── ScheduleRollupInvalidError 10192
    │   │   ├── ScheduleSourceInvalidError 10203
    │   │   ├── SchedulerInvalidError      10212
    │   │   └── ScheduleTimeZoneInvalidError 10223
    │   ├── StreamStoreFailedError         10077 (any store failure)
    │   │   └── StreamFullError            10077 with a limit's description (discard new)
    │   │       ├── MaxMessagesExceededError
    │   │       ├── MaxBytesExceededError
    │   │       └── MaxMessagesPerSubjectExceededError
    │   ├── ConsumerResetError             10204 (reset not allowed, below the start)
    │   ├── PriorityGroupError             priority group settings refused (ADR-42)
    │   │   ├── PriorityGroupConfigError   10159, 10161, 10178, 10196, 10197
    │   │   ├── InvalidPriorityGroupNameError 10162
    │   │   └── UnknownPriorityGroupError  10160 (unpin of a group the consumer lacks)
    │   ├── ConsumerNotFoundError          10014
    │   ├── ConsumerExistsError            10148, 10013, 10105 (create over a different one)
    │   ├── ConsumerDoesNotExistError      10149 (update of a missing one)
    │   ├── ConsumerCreateError            a consumer config refused (codes: docs/errors.md)
    │   ├── ResourcesExceededError         10002, 10023, 10026-10028, 10047
    │   ├── ClusterUnavailableError        10008 (also: a no-wait fetch voided twice, 409)
    │   └── TooManyResultsError            status 413 (batch direct get: over 1,024 subjects)
    ├── InvalidOptionError  (also a ValueError)          rejected before anything is sent
    │   ├── InvalidNameError
    │   ├── InvalidSubjectError
    │   ├── InvalidHeaderError
    │   ├── InvalidTTLError
    │   ├── InvalidScheduleError                         ADR-51 schedules (client-side)
    │   ├── InvalidKeyError
    │   ├── InvalidStreamConfigError                     ADR-43 stream settings (client-side)
    │   └── MaxPayloadExceededError
    ├── PayloadValidationError  (also a ValueError)      a payload is not the type asked for
    ├── JetStreamTimeoutError  (also a TimeoutError)     no reply before the deadline
    │   └── FetchTimeoutError
    ├── NoRespondersError                                nothing listens (no stream for a publish,
    │                                                    no consumer leader for a double_ack)
    ├── ConnectionClosedError                            the connection is closed
    │   └── ConnectionFailedError                        the first connection never opened
    ├── DisconnectedError                                the connection dropped while waiting
    ├── TLSError                                         TLS refused or failed (never plaintext)
    ├── AuthorizationError                               the server refused the credentials
    │   └── PermissionViolationError                     a publish or SUB the permissions deny
    ├── InvalidResponseError                             the server sent something unparsable
    ├── DirectBatchGapError                              a batch direct get lost a reply
    ├── BatchClosedError                                 the atomic batch was committed or discarded
    ├── FeatureNotSupportedError                         the server's API level is too low
    ├── NoHeartbeatError
    ├── ConsumerDeletedError
    ├── MessageTooLargeError                             a message never fits the pull's max_bytes
    ├── PinIdMismatchError                               423: the pin was lost (ADR-42)
    ├── OrderedConsumerResetError                        an ordered consumer could not be recreated
    ├── MessageAlreadyAckedError
    ├── NotJetStreamMessageError
    ├── KeyValueError
    │   ├── KeyNotFoundError
    │   ├── KeyExistsError (also a WrongLastSequenceError)
    │   └── BucketNotFoundError (also an ObjectStoreError)
    └── ObjectStoreError                             object store (ADR-20)
        ├── ObjectNotFoundError                      absent or deleted
        ├── ObjectExistsError                        a rename or link over a live object
        ├── ObjectLinkError                          a link to a link, a deleted object, a bucket
        └── DigestMismatchError                      the data read does not match its info

Server error replies are turned into exceptions by :func:`api_error`, the only
reader of ``err_code``; the mapping lives in ``_ERR_CODES`` below and nowhere else.

The module stays one file past 900 lines on purpose: it is the tree above and
its one registry, each class a few lines; split, the registry would import
every part and a reader would lose the one place to look an error up.
"""

from __future__ import annotations

from functools import partial
from typing import Any

__all__ = [
    "APIError",
    "AtomicPublishDisabledError",
    "AtomicPublishError",
    "AuthorizationError",
    "BadRequestError",
    "BatchClosedError",
    "BatchCommitInvalidError",
    "BatchDuplicateMsgIdError",
    "BatchIdInvalidError",
    "BatchIncompleteError",
    "BatchSequenceMissingError",
    "BatchTooLargeError",
    "BatchUnsupportedHeaderError",
    "BucketNotFoundError",
    "ClusterUnavailableError",
    "ConnectionClosedError",
    "ConnectionFailedError",
    "ConsumerCreateError",
    "ConsumerDeletedError",
    "ConsumerDoesNotExistError",
    "ConsumerExistsError",
    "ConsumerNotFoundError",
    "ConsumerResetError",
    "CounterIncrementError",
    "CounterNotFoundError",
    "CountersDisabledError",
    "DigestMismatchError",
    "DirectBatchGapError",
    "DisconnectedError",
    "FeatureNotSupportedError",
    "FetchTimeoutError",
    "InvalidHeaderError",
    "InvalidKeyError",
    "InvalidNameError",
    "InvalidOptionError",
    "InvalidPriorityGroupNameError",
    "InvalidResponseError",
    "InvalidScheduleError",
    "InvalidStreamConfigError",
    "InvalidSubjectError",
    "InvalidTTLError",
    "JetStreamError",
    "JetStreamNotEnabledError",
    "JetStreamTimeoutError",
    "KeyExistsError",
    "KeyNotFoundError",
    "KeyValueError",
    "MaxBytesExceededError",
    "MaxMessagesExceededError",
    "MaxMessagesPerSubjectExceededError",
    "MaxPayloadExceededError",
    "MessageAlreadyAckedError",
    "MessageDeleteError",
    "MessageNotFoundError",
    "MessageScheduleError",
    "MessageSizeExceedsMaximumError",
    "MessageTTLDisabledError",
    "MessageTTLInvalidError",
    "MessageTooLargeError",
    "NoHeartbeatError",
    "NoRespondersError",
    "NotJetStreamMessageError",
    "ObjectExistsError",
    "ObjectLinkError",
    "ObjectNotFoundError",
    "ObjectStoreError",
    "OrderedConsumerResetError",
    "PayloadValidationError",
    "PermissionViolationError",
    "PinIdMismatchError",
    "PriorityGroupConfigError",
    "PriorityGroupError",
    "ResourcesExceededError",
    "SchedulePatternInvalidError",
    "ScheduleRollupInvalidError",
    "ScheduleSourceInvalidError",
    "ScheduleTTLInvalidError",
    "ScheduleTargetInvalidError",
    "ScheduleTimeZoneInvalidError",
    "SchedulerInvalidError",
    "SchedulesDisabledError",
    "StreamConfigError",
    "StreamFullError",
    "StreamNameInUseError",
    "StreamNotFoundError",
    "StreamNotMatchError",
    "StreamSealedError",
    "DuplicateMsgIdInProcessError",
    "StreamStoreFailedError",
    "StreamSubjectOverlapError",
    "TLSError",
    "TooManyInflightBatchesError",
    "TooManyResultsError",
    "UnknownPriorityGroupError",
    "WrongLastMsgIdError",
    "WrongLastSequenceError",
    "api_error",
]


class JetStreamError(Exception):
    """Root of every error raised by aiojetstream."""


# --------------------------------------------------------------------------- server


class APIError(JetStreamError):
    """An error reply from the JetStream API.

    Attributes:
        code: The HTTP-like status code (400, 404, 500, 503).
        err_code: The JetStream error code (for example 10059, stream not found).
        description: The server's description of the error.
        stream: The stream the request named (its API subject, or the stream a
            publish acknowledgement names), or None when not known.
        consumer: The consumer the request named, or None.

    """

    def __init__(
        self,
        code: int = 0,
        err_code: int = 0,
        description: str = "",
        *,
        stream: str | None = None,
        consumer: str | None = None,
    ) -> None:
        self.code = code
        self.err_code = err_code
        self.description = description
        self.stream = stream
        self.consumer = consumer
        super().__init__(f"{self._summary()} (code={code}, err_code={err_code})")

    def _summary(self) -> str:
        """What went wrong, in words (the server's description unless a subclass says more)."""
        return self.description

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.code, self.err_code, self.description)
        if self.stream is None and self.consumer is None:
            return (type(self), args)
        return (partial(type(self), stream=self.stream, consumer=self.consumer), args)


class JetStreamNotEnabledError(APIError):
    """JetStream is not enabled on the server or for this account."""


class BadRequestError(APIError):
    """The server rejected the request as malformed."""


class StreamNotFoundError(APIError):
    """The stream does not exist; ``stream`` names it when the request did."""

    def _summary(self) -> str:
        if self.stream is None:
            return self.description
        return f"stream {self.stream!r} not found"


class StreamNameInUseError(APIError):
    """A stream with that name exists with a different configuration."""


class StreamSubjectOverlapError(APIError):
    """The stream's subjects overlap those of an existing stream."""


class StreamConfigError(APIError):
    """The server refused the stream configuration (err_code 10052, sent with status 500)."""


class StreamSealedError(APIError):
    """The stream is sealed: it refuses every write, delete and purge (err_code 10109)."""


class DuplicateMsgIdInProcessError(APIError):
    """An earlier copy with this ``Nats-Msg-Id`` is still being stored (err_code 10158).

    Seen when a retry races its first copy (for example a PUB buffered across
    a reconnect). ``publish`` asks again until the duplicate's acknowledgement
    arrives; a ``publish_async`` future fails with it: publish again with the
    same ``msg_id``.
    """


class StreamNotMatchError(APIError):
    """The message went to a different stream than ``expected_stream`` named."""


class WrongLastSequenceError(APIError):
    """``expected_last_sequence`` / ``expected_last_subject_sequence`` did not hold."""


class WrongLastMsgIdError(APIError):
    """``expected_last_msg_id`` did not hold."""


class MessageNotFoundError(APIError):
    """No message matched the request."""


class MessageDeleteError(APIError):
    """The server could not delete the message (for a sequence past the end: "stream store EOF").

    Also a refused purge (10110: "stream purge not permitted" on a
    ``deny_purge`` stream), as a refused delete on a ``deny_delete`` one.
    """


class MessageSizeExceedsMaximumError(APIError):
    """The message is too large for the server (10054, 10097).

    Larger than the stream's ``max_msg_size`` (10054), or its headers are over
    the server's 64 KiB (10097).
    """


class MessageTTLInvalidError(APIError):
    """The server refused the message's ``Nats-TTL`` value (ADR-43, err_code 10165)."""


class MessageTTLDisabledError(APIError):
    """The message has a TTL but the stream does not allow them (ADR-43, err_code 10166).

    ``stream`` names the stream when the server's reply did; the message then
    says how to allow TTLs (``allow_msg_ttl=True``).
    """

    def _summary(self) -> str:
        if self.stream is None:
            return self.description
        return (
            f"a message TTL needs allow_msg_ttl, and stream {self.stream!r} has it off: set "
            "allow_msg_ttl=True (update_stream can enable it, never disable it; CLI: "
            f"aiojetstream stream edit {self.stream} --allow-msg-ttl)"
        )


class CounterNotFoundError(MessageNotFoundError):
    """``Counter.get``: the subject holds no counter value (never incremented, or purged)."""


class CountersDisabledError(APIError):
    """An increment (``Nats-Incr``) reached a stream without ``allow_msg_counter``.

    ADR-49, err_code 10168.
    """


class CounterIncrementError(APIError):
    """A counter stream refused a message (ADR-49).

    err_code 10169: no ``Nats-Incr`` header; 10170: the message has a payload;
    10171: the increment is not an integer, or comes with a header a counter
    refuses (``Nats-Expected-*``, ``Nats-Rollup``).
    """


class AtomicPublishError(APIError):
    """The server refused an atomic batch (ADR-50); nothing of the batch was stored.

    The subclass says why. Most are reported by the commit.
    """


class AtomicPublishDisabledError(AtomicPublishError):
    """The stream does not allow atomic batches (``allow_atomic``; err_code 10174)."""


class BatchSequenceMissingError(AtomicPublishError):
    """A batch message lacks ``Nats-Batch-Sequence`` (err_code 10175)."""


class BatchIncompleteError(AtomicPublishError):
    """The batch has a gap, is unknown, or was idle for over 10 s (err_code 10176)."""


class BatchUnsupportedHeaderError(AtomicPublishError):
    """A header a batch cannot use, e.g. ``Nats-Expected-Last-Msg-Id`` (err_code 10177)."""


class BatchIdInvalidError(AtomicPublishError):
    """The ``Nats-Batch-Id`` is invalid, e.g. over 64 characters (err_code 10179)."""


class BatchTooLargeError(AtomicPublishError):
    """The batch exceeds 1,000 messages (err_code 10199; also checked before sending)."""


class BatchCommitInvalidError(AtomicPublishError):
    """The ``Nats-Batch-Commit`` value is neither ``1`` nor ``eob`` (err_code 10200)."""


class BatchDuplicateMsgIdError(AtomicPublishError):
    """Two messages of the batch have the same ``Nats-Msg-Id`` (err_code 10201)."""


class TooManyInflightBatchesError(AtomicPublishError):
    """50 batches are already open on the stream (err_code 10210, status 429)."""


class MessageScheduleError(APIError):
    """The server refused a message schedule (ADR-51); the subclass says why."""


class SchedulesDisabledError(MessageScheduleError):
    """A schedule reached a stream without ``allow_msg_schedules`` (err_code 10188)."""


class SchedulePatternInvalidError(MessageScheduleError):
    """The ``Nats-Schedule`` value is invalid (err_code 10189).

    Also a time zone with a schedule that is not cron.
    """


class ScheduleTargetInvalidError(MessageScheduleError):
    """The target is missing, outside the stream, the schedule subject or a wildcard (10190)."""


class ScheduleTTLInvalidError(MessageScheduleError):
    """The ``Nats-Schedule-TTL`` value is invalid (err_code 10191)."""


class ScheduleRollupInvalidError(MessageScheduleError):
    """The ``Nats-Schedule-Rollup`` value is invalid (err_code 10192)."""


class ScheduleSourceInvalidError(MessageScheduleError):
    """The ``Nats-Schedule-Source`` is invalid, for example a wildcard (err_code 10203)."""


class SchedulerInvalidError(MessageScheduleError):
    """``Nats-Scheduler`` names the subject the message is published to (err_code 10212)."""


class ScheduleTimeZoneInvalidError(MessageScheduleError):
    """The ``Nats-Schedule-Time-Zone`` is not an IANA zone, e.g. ``+02:00`` (err_code 10223)."""


class StreamStoreFailedError(APIError):
    """The stream could not store the message (err_code 10077).

    The server uses 10077 for every store failure; when its description says
    a limit was reached (``discard: new``) the error is a :class:`StreamFullError`.
    """


class StreamFullError(StreamStoreFailedError):
    """The stream is full and refuses new messages (``discard: new``, err_code 10077).

    The subclass says which limit: :class:`MaxMessagesExceededError`,
    :class:`MaxBytesExceededError` or :class:`MaxMessagesPerSubjectExceededError`.
    ``publish(..., hold_when_full=seconds)`` retries until the stream has room.
    """


class MaxMessagesExceededError(StreamFullError):
    """The stream holds ``max_msgs`` messages ("maximum messages exceeded")."""


class MaxBytesExceededError(StreamFullError):
    """The stream holds ``max_bytes`` bytes ("maximum bytes exceeded")."""


class MaxMessagesPerSubjectExceededError(StreamFullError):
    """The subject holds ``max_msgs_per_subject`` messages (``discard_new_per_subject``)."""


class ConsumerResetError(APIError):
    """The server refused a consumer reset (err_code 10204: not allowed, below the start)."""


class PriorityGroupError(APIError):
    """The server refused a consumer's priority group settings (ADR-42, nats-server >= 2.11)."""


class PriorityGroupConfigError(PriorityGroupError):
    """Priority settings that do not fit together (10159, 10161, 10178, 10196, 10197).

    10159: a ``priority_policy`` without ``priority_groups``; 10161: an empty
    group name; 10178: priority groups on a push consumer (``deliver_subject``);
    10196: ``priority_groups`` without a policy; 10197: ``priority_timeout``
    without a policy.
    """


class InvalidPriorityGroupNameError(PriorityGroupError):
    """A group name is not 1 to 16 characters of ``A-Za-z0-9-_/=`` (10162)."""


class UnknownPriorityGroupError(PriorityGroupError):
    """The consumer has no such priority group (10160, for example on unpin)."""


class ConsumerNotFoundError(APIError):
    """The consumer does not exist; ``consumer`` and ``stream`` name it when the request did."""

    def _summary(self) -> str:
        if self.consumer is None:
            return self.description
        where = "" if self.stream is None else f" on stream {self.stream!r}"
        return f"consumer {self.consumer!r} not found{where}"


class ConsumerExistsError(APIError):
    """A consumer of that name already exists with a different configuration."""


class ConsumerDoesNotExistError(APIError):
    """An update named a consumer that does not exist."""


class ConsumerCreateError(APIError):
    """The server could not create or update the consumer.

    10012, and the codes of a refused consumer configuration (overlapping or
    empty filters, work-queue rules, backoff longer than ``max_deliver``, a
    deliver policy without its start, limits above the server's...).
    """


class ResourcesExceededError(APIError):
    """An account, storage or memory limit was reached."""


class ClusterUnavailableError(APIError):
    """The JetStream cluster is temporarily unavailable (for example during an election).

    Also raised (``code`` 409, ``err_code`` 0) from a ``fetch_no_wait`` batch
    whose pull a consumer leader change voided (``409 Leadership Change`` or
    ``Server Shutdown``) before any message, twice: the fetch pulls again once
    rather than hand out an empty batch while messages may be pending. Pull
    again.
    """


class TooManyResultsError(APIError):
    """A ``get_last_msgs_for`` matched more than 1,024 subjects (status 413, ADR-31).

    The limit counts matched subjects; a smaller ``batch`` does not help.
    """


# --------------------------------------------------------------------------- client


class InvalidOptionError(JetStreamError, ValueError):
    """An argument or option is invalid; raised before anything is sent."""


class InvalidNameError(InvalidOptionError):
    """A stream, consumer or bucket name is invalid."""


class PayloadValidationError(JetStreamError, ValueError):
    """A payload did not validate as the type asked for (``decode``, typed consumers).

    Attributes:
        subject: The message's subject.
        sequence: The message's stream sequence (the entry's revision), or None
            when not known.
        errors: pydantic's errors (``ValidationError.errors()``), or one
            ``{"msg": ...}`` for an error of a codec's own.

    """

    def __init__(
        self,
        message: str,
        *,
        subject: str = "",
        sequence: int | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.subject = subject
        self.sequence = sequence
        self.errors: list[dict[str, Any]] = errors if errors is not None else []

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            partial(type(self), subject=self.subject, sequence=self.sequence, errors=self.errors),
            self.args,
        )


class InvalidSubjectError(InvalidOptionError):
    """A subject is empty or contains characters that are not allowed."""


class InvalidHeaderError(InvalidOptionError):
    """A header key or value contains CR, LF, NUL or is otherwise invalid."""


class InvalidTTLError(InvalidOptionError):
    """A message TTL is under 1 s, zero, negative or unparsable (ADR-43)."""


class InvalidScheduleError(InvalidOptionError):
    """A message schedule breaks a rule checked before sending (ADR-51).

    An interval under 1 s or not a whole number of seconds, a cron
    expression without six fields, a naive
    datetime, a time zone without cron, or a missing, wildcard or
    self-referencing ``schedule_target``.
    """


class InvalidKeyError(InvalidOptionError):
    """A key-value key is invalid (ADR-8)."""


class InvalidStreamConfigError(InvalidOptionError):
    """A stream configuration breaks a rule checked before anything is sent (ADR-43).

    For example a ``subject_delete_marker_ttl`` under 1 second or on a mirror,
    or an update that would turn ``allow_msg_ttl`` off again.
    """


class MaxPayloadExceededError(InvalidOptionError):
    """Headers plus payload exceed the server's ``max_payload``."""


class JetStreamTimeoutError(JetStreamError, TimeoutError):
    """No reply arrived before the deadline."""


class FetchTimeoutError(JetStreamTimeoutError):
    """``Consumer.next`` received no message before ``expires``."""


class NoRespondersError(JetStreamError):
    """Nothing listens on the subject (for a publish: no stream captures it).

    From ``Msg.double_ack``: nothing serves the ack subject, during a consumer
    leader election (retry), after the consumer was deleted, or on an
    ``AckPolicy.NONE`` consumer.
    """


class ConnectionClosedError(JetStreamError):
    """The connection is closed."""


class ConnectionFailedError(ConnectionClosedError):
    """The first connection never opened: no server of the list could be reached.

    Raised by :func:`aiojetstream.connect` after trying each server twice
    (refused, unreachable, an unknown host, a timeout). The message names
    the servers tried (without credentials) and why each attempt failed. A
    :class:`ConnectionClosedError`, so ``except ConnectionClosedError`` still
    catches it.

    Attributes:
        servers: The server URLs tried, with credentials hidden.

    """

    def __init__(self, message: str, servers: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.servers = servers


class DisconnectedError(JetStreamError):
    """The connection dropped while the operation was waiting for its reply."""


class TLSError(JetStreamError):
    """A server that must be TLS offered no TLS, or the TLS handshake failed.

    aiojetstream never falls back to plaintext for a ``tls://`` URL, nor for
    any server when a TLS option (``tls``, ``tls_hostname``,
    ``tls_handshake_first``) was given.
    """


class AuthorizationError(JetStreamError):
    """The server refused the credentials: an ``Authorization Violation`` while connecting.

    Missing or wrong user and password, token, nkey seed or creds file (JWT).
    ``connect`` tries each server at most twice, 250 ms apart, then raises
    this instead of :class:`ConnectionClosedError`; it never retries on its own.
    """


class PermissionViolationError(AuthorizationError):
    """The server refused a publish or a subscription: the user's permissions deny it.

    nats-server answers such a publish or SUB with an asynchronous ``-ERR
    'Permissions Violation for Publish to "..."'`` (or ``... for Subscription
    to "..."``) and keeps the connection open; the connection's error
    callback gets it as before. The call that caused it raises this error at
    once instead of waiting for its timeout: a request or an acknowledged
    publish to that subject, a ``publish_async`` future, a ``fetch`` /
    ``next``; ``messages()`` / ``consume()`` report it to their error handler
    (a refused subscription of their inbox ends them with it).

    Attributes:
        operation: ``"publish"`` or ``"subscription"``.
        subject: The subject the server refused.
        queue: The queue group of a refused subscription, else None.
        inbox: True when the refused subscription is one of the client's own
            reply inboxes (whose prefix is the connection's ``inbox_prefix``).

    """

    def __init__(
        self,
        operation: str,
        subject: str,
        queue: str | None = None,
        *,
        inbox: bool = False,
        context: str = "",
    ) -> None:
        self.operation = operation
        self.subject = subject
        self.queue = queue
        self.inbox = inbox
        self._context = context
        super().__init__(self._text())

    def _text(self) -> str:
        if self.operation == "publish":
            text = (
                f"permissions violation: the server refused a publish to {self.subject!r}; "
                "the user's permissions must allow publishing to it (its 'publish' allow list)"
            )
        else:
            group = f" in queue group {self.queue!r}" if self.queue is not None else ""
            text = (
                f"permissions violation: the server refused a subscription to "
                f"{self.subject!r}{group}; the user's permissions must allow subscribing "
                "to it (its 'subscribe' allow list)"
            )
            if self.inbox:
                text += (
                    ". It is one of the client's inboxes (replies and pulled messages come "
                    "to them): allow subscribing to the inbox prefix ('_INBOX.>' by default), "
                    "or connect with an inbox_prefix the user may subscribe to "
                    "(connect(..., inbox_prefix=...); the CLI's --inbox-prefix)"
                )
        return f"{self._context}: {text}" if self._context else text

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            partial(type(self), inbox=self.inbox, context=self._context),
            (self.operation, self.subject, self.queue),
        )


class InvalidResponseError(JetStreamError):
    """The server's reply could not be understood."""


class DirectBatchGapError(JetStreamError):
    """A batch direct get lost a reply (ADR-31).

    The server sends a batch without flow control; each reply's
    ``Nats-Last-Sequence`` names the one before it, so a dropped reply is
    noticed. Read again from ``DirectBatch.last_seq + 1``.
    """


class FeatureNotSupportedError(JetStreamError):
    """The server's JetStream API level is too low for a requested feature.

    Raised before the request that needs the feature is sent; or after it,
    when the answer shows that the server (in a cluster: a node older than
    the meta leader, whose level the client reads) does not have the feature:
    a stream or consumer created or updated without a setting it ignored,
    an increment or a batch's first message stored as a plain message.

    Attributes:
        feature: What was asked for (for example ``"allow_msg_ttl"``).
        required_level: The JetStream API level the feature needs.
        server_level: The API level the server reports (in a cluster, the meta
            leader's; 0 when unknown).
        server_version: The first nats-server release with ``required_level``.
        reason: Why it is refused, when not the level reported (None then).

    """

    def __init__(
        self,
        feature: str,
        required_level: int,
        server_level: int,
        server_version: str,
        reason: str | None = None,
    ) -> None:
        self.feature = feature
        self.required_level = required_level
        self.server_level = server_level
        self.server_version = server_version
        self.reason = reason
        why = reason if reason is not None else f"the server reports API level {server_level}"
        super().__init__(
            f"{feature} needs nats-server >= {server_version} (JetStream API level >= "
            f"{required_level}); {why}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (
                self.feature,
                self.required_level,
                self.server_level,
                self.server_version,
                self.reason,
            ),
        )


class NoHeartbeatError(JetStreamError):
    """No message or heartbeat arrived within twice the heartbeat interval."""


class ConsumerDeletedError(JetStreamError):
    """The consumer was deleted while messages were being pulled."""


class MessageTooLargeError(JetStreamError):
    """The next message is larger than ``max_bytes``: it can never be delivered.

    Raised by ``fetch_bytes`` when nothing fit, and ends ``messages()`` /
    ``consume()`` in byte mode instead of re-pulling in a tight loop.
    """


class PinIdMismatchError(JetStreamError):
    """The pinned client lost its pin: a ``423`` status (ADR-42 ``pinned_client``).

    Not terminal: ``messages()`` and ``consume()`` report it to the error
    handler, forget the pin and pull again without it; a fetch (or ``next``)
    ends with it, and the consumer handle's next pull goes without the pin.

    Attributes:
        reason: ``"mismatch"`` (``423 Nats-Pin-Id mismatch``: the pull named a
            pin that is not the current one) or ``"wrong_pin"``
            (``423 Nats-Wrong-Pin-Id``: a waiting pull's pin was taken away,
            after the pin timeout or an unpin).

    """

    def __init__(self, message: str, reason: str = "mismatch") -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.reason))


class OrderedConsumerResetError(JetStreamError):
    """An ordered consumer could not recreate its consumer within ``max_reset_attempts``."""


class MessageAlreadyAckedError(JetStreamError):
    """The message was already acknowledged (ack, nak or term)."""


class NotJetStreamMessageError(JetStreamError, ValueError):
    """The message does not carry JetStream metadata."""


class BatchClosedError(JetStreamError):
    """The atomic batch was committed, discarded or failed: nothing more can be sent."""


class ObjectStoreError(JetStreamError):
    """Base class of object store errors (ADR-20)."""


class KeyValueError(JetStreamError):
    """Base class of key-value errors."""


class KeyNotFoundError(KeyValueError):
    """The key is absent, deleted, purged or removed by a limit marker."""


class KeyExistsError(KeyValueError, WrongLastSequenceError):
    """``create`` found a live value for the key."""


class BucketNotFoundError(KeyValueError, ObjectStoreError):
    """The key-value or object store bucket does not exist.

    Attributes:
        bucket: The bucket's name, when known (the message names it too).

    """

    def __init__(self, message: str = "", bucket: str | None = None) -> None:
        super().__init__(message)
        self.bucket = bucket


class ObjectNotFoundError(ObjectStoreError):
    """The object is absent or deleted (or a link's target is)."""


class ObjectExistsError(ObjectStoreError):
    """A live object already has the name: ``update_meta`` renaming onto it, or a link over it."""


class ObjectLinkError(ObjectStoreError):
    """A link that can not be made or followed (ADR-20).

    ``add_link`` to a link or to a deleted object, or ``get`` of a link to a
    whole bucket (or of a chain of links too long to be anything but a loop).
    """


class DigestMismatchError(ObjectStoreError):
    """The data read does not match the object's info: its SHA-256 digest, size or chunk count.

    Raised by ``ObjectResult`` iteration (and ``read``, ``get_bytes``,
    ``get_file``) once the last chunk was read, or as soon as more data than
    the info's size arrives.
    """


# The one err_code -> class mapping.
_ERR_CODES: dict[int, type[APIError]] = {
    10076: JetStreamNotEnabledError,
    10039: JetStreamNotEnabledError,
    10003: BadRequestError,
    10059: StreamNotFoundError,
    10058: StreamNameInUseError,
    10065: StreamSubjectOverlapError,
    10052: StreamConfigError,
    10173: StreamConfigError,
    10198: StreamConfigError,
    10109: StreamSealedError,
    10158: DuplicateMsgIdInProcessError,
    10060: StreamNotMatchError,
    10071: WrongLastSequenceError,
    10164: WrongLastSequenceError,
    10070: WrongLastMsgIdError,
    10037: MessageNotFoundError,
    10043: MessageNotFoundError,
    10054: MessageSizeExceedsMaximumError,
    10097: MessageSizeExceedsMaximumError,
    10057: MessageDeleteError,
    10165: MessageTTLInvalidError,
    10166: MessageTTLDisabledError,
    10168: CountersDisabledError,
    10169: CounterIncrementError,
    10170: CounterIncrementError,
    10171: CounterIncrementError,
    10174: AtomicPublishDisabledError,
    10175: BatchSequenceMissingError,
    10176: BatchIncompleteError,
    10177: BatchUnsupportedHeaderError,
    10179: BatchIdInvalidError,
    10199: BatchTooLargeError,
    10200: BatchCommitInvalidError,
    10201: BatchDuplicateMsgIdError,
    10210: TooManyInflightBatchesError,
    10188: SchedulesDisabledError,
    10189: SchedulePatternInvalidError,
    10190: ScheduleTargetInvalidError,
    10191: ScheduleTTLInvalidError,
    10192: ScheduleRollupInvalidError,
    10203: ScheduleSourceInvalidError,
    10212: SchedulerInvalidError,
    10223: ScheduleTimeZoneInvalidError,
    10014: ConsumerNotFoundError,
    10148: ConsumerExistsError,
    10013: ConsumerExistsError,
    10105: ConsumerExistsError,
    10149: ConsumerDoesNotExistError,
    10012: ConsumerCreateError,
    10002: ResourcesExceededError,
    10023: ResourcesExceededError,
    10027: ResourcesExceededError,
    10028: ResourcesExceededError,
    10047: ResourcesExceededError,
    10008: ClusterUnavailableError,
    10077: StreamStoreFailedError,
    10204: ConsumerResetError,
    10159: PriorityGroupConfigError,
    10161: PriorityGroupConfigError,
    10178: PriorityGroupConfigError,
    10196: PriorityGroupConfigError,
    10197: PriorityGroupConfigError,
    10162: InvalidPriorityGroupNameError,
    10160: UnknownPriorityGroupError,
    # A consumer's configuration refused (nats-server's JSConsumer*Err codes), a
    # stream's source / mirror / transform settings refused, a consumer limit, a purge.
    10026: ResourcesExceededError,
    10084: ConsumerCreateError,
    10094: ConsumerCreateError,
    10099: ConsumerCreateError,
    10100: ConsumerCreateError,
    10101: ConsumerCreateError,
    10102: ConsumerCreateError,
    10107: ConsumerCreateError,
    10108: ConsumerCreateError,
    10110: MessageDeleteError,
    10112: ConsumerCreateError,
    10113: StreamConfigError,
    10114: ConsumerCreateError,
    10115: ConsumerCreateError,
    10116: ConsumerCreateError,
    10121: ConsumerCreateError,
    10122: StreamConfigError,
    10123: StreamConfigError,
    10125: ConsumerCreateError,
    10126: ConsumerCreateError,
    10131: ConsumerCreateError,
    10132: ConsumerCreateError,
    10134: ConsumerCreateError,
    10135: ConsumerCreateError,
    10136: ConsumerCreateError,
    10138: ConsumerCreateError,
    10139: ConsumerCreateError,
    10140: StreamConfigError,
    10141: StreamConfigError,
    10142: StreamConfigError,
    10143: StreamConfigError,
    10144: StreamConfigError,
    10145: StreamConfigError,
    10146: StreamConfigError,
    10147: StreamConfigError,
    10150: StreamConfigError,
    10151: StreamConfigError,
    10152: StreamConfigError,
    10153: ConsumerCreateError,
    10154: StreamConfigError,
    10155: StreamConfigError,
    10156: StreamConfigError,
    # Mirror, source and replica settings refused (JSMirror*, JSSource*, replicas > 1
    # on a single server); a consumer's settings refused (JSConsumer*).
    **dict.fromkeys(
        (10030, 10031, 10032, 10033, 10034, 10046, 10055, 10074, 10186, 10187, 10209),
        StreamConfigError,
    ),
    **dict.fromkeys(range(10213, 10218), StreamConfigError),
    **dict.fromkeys(range(10078, 10084), ConsumerCreateError),
    **dict.fromkeys(range(10085, 10094), ConsumerCreateError),
    **dict.fromkeys(
        (10095, 10098, 10103, 10106, 10127, 10137, 10181, 10182, 10183, 10184),
        ConsumerCreateError,
    ),
    **dict.fromkeys(range(10218, 10223), ConsumerCreateError),
}

# 10077 covers every store failure; the description says which limit, if any.
_STREAM_FULL: tuple[tuple[str, type[StreamFullError]], ...] = (
    ("maximum messages per subject exceeded", MaxMessagesPerSubjectExceededError),
    ("maximum messages exceeded", MaxMessagesExceededError),
    ("maximum bytes exceeded", MaxBytesExceededError),
)


def api_error(
    code: int,
    err_code: int,
    description: str,
    *,
    stream: str | None = None,
    consumer: str | None = None,
) -> APIError:
    """Return the typed exception for a server error reply (the err_code registry).

    ``stream`` and ``consumer`` are the names the request gave (its API
    subject holds them): a not-found error then names what was not found.
    """
    cls = _ERR_CODES.get(err_code, APIError)
    if cls is StreamStoreFailedError:
        text = description.lower()
        for marker, full in _STREAM_FULL:
            if marker in text:
                cls = full
                break
    return cls(code, err_code, description, stream=stream, consumer=consumer)

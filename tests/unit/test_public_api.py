"""The public surface is pinned: changing it is a deliberate, reviewed act."""

from __future__ import annotations

import inspect
import types

import aiojetstream

EXPECTED = [
    "APIError",
    "APIStats",
    "AccountInfo",
    "AccountLimits",
    "AckPolicy",
    "Backlog",
    "BadRequestError",
    "BucketNotFoundError",
    "ClusterInfo",
    "ClusterUnavailableError",
    "ConnectionClosedError",
    "ConsumeContext",
    "Consumer",
    "ConsumerConfig",
    "ConsumerCreateError",
    "ConsumerDeletedError",
    "ConsumerDoesNotExistError",
    "ConsumerExistsError",
    "ConsumerInfo",
    "ConsumerNotFoundError",
    "ConsumerPauseResponse",
    "ConsumerResetError",
    "Counter",
    "CounterIncrementError",
    "CounterNotFoundError",
    "CountersDisabledError",
    "DeliverPolicy",
    "DirectBatch",
    "DirectBatchGapError",
    "DiscardPolicy",
    "DisconnectedError",
    "ExternalStream",
    "FeatureNotSupportedError",
    "FetchTimeoutError",
    "InvalidHeaderError",
    "InvalidKeyError",
    "InvalidNameError",
    "InvalidOptionError",
    "InvalidResponseError",
    "InvalidScheduleError",
    "InvalidStreamConfigError",
    "InvalidSubjectError",
    "InvalidTTLError",
    "JetStreamContext",
    "JetStreamError",
    "JetStreamNotEnabledError",
    "JetStreamTimeoutError",
    "KeyExistsError",
    "KeyNotFoundError",
    "KeyValue",
    "KeyValueConfig",
    "KeyValueEntry",
    "KeyValueError",
    "KeyValueOp",
    "KeyValueStatus",
    "KeyWatcher",
    "LostStreamData",
    "MaxBytesExceededError",
    "MaxMessagesExceededError",
    "MaxMessagesPerSubjectExceededError",
    "MaxPayloadExceededError",
    "MessageAlreadyAckedError",
    "MessageBatch",
    "MessageDeleteError",
    "MessageNotFoundError",
    "MessageScheduleError",
    "MessageSizeExceedsMaximumError",
    "MessageTTLDisabledError",
    "MessageTTLInvalidError",
    "MessageTooLargeError",
    "MessagesContext",
    "Msg",
    "MsgMetadata",
    "NoHeartbeatError",
    "NoRespondersError",
    "NotJetStreamMessageError",
    "OrderedBatch",
    "OrderedConsumer",
    "OrderedConsumerConfig",
    "OrderedConsumerResetError",
    "PeerInfo",
    "PersistMode",
    "Placement",
    "PriorityGroupState",
    "PriorityPolicy",
    "PubAck",
    "RawStreamMessage",
    "RePublish",
    "ReplayPolicy",
    "ResourcesExceededError",
    "RetentionPolicy",
    "Schedule",
    "SchedulePatternInvalidError",
    "ScheduleRollupInvalidError",
    "ScheduleSourceInvalidError",
    "ScheduleTTLInvalidError",
    "ScheduleTargetInvalidError",
    "ScheduleTimeZoneInvalidError",
    "SchedulerInvalidError",
    "SchedulesDisabledError",
    "SequenceInfo",
    "SequencePair",
    "StorageType",
    "StoreCompression",
    "Stream",
    "StreamConfig",
    "StreamConfigError",
    "StreamConsumerLimits",
    "StreamFullError",
    "StreamInfo",
    "StreamNameInUseError",
    "StreamNotFoundError",
    "StreamNotMatchError",
    "StreamSource",
    "StreamSourceInfo",
    "StreamState",
    "StreamStoreFailedError",
    "StreamSubjectOverlapError",
    "SubjectTransformConfig",
    "TLSError",
    "Tier",
    "TooManyResultsError",
    "WrongLastMsgIdError",
    "WrongLastSequenceError",
    "__version__",
    "connect",
]


def test_all_is_pinned_and_sorted() -> None:
    assert aiojetstream.__all__ == EXPECTED
    assert sorted(aiojetstream.__all__) == aiojetstream.__all__


def test_every_public_name_exists_and_is_documented() -> None:
    for name in aiojetstream.__all__:
        obj = getattr(aiojetstream, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"


def test_public_methods_are_documented() -> None:
    for name in (
        "JetStreamContext",
        "Stream",
        "Consumer",
        "OrderedConsumer",
        "MessagesContext",
        "ConsumeContext",
        "MessageBatch",
        "Msg",
        "KeyValue",
        "KeyWatcher",
        "DirectBatch",
        "Counter",
    ):
        cls = getattr(aiojetstream, name)
        for attr, member in vars(cls).items():
            if attr.startswith("_") or isinstance(member, types.MemberDescriptorType):
                continue  # slots are documented in the class docstring
            target = member.fget if isinstance(member, property) else member
            assert inspect.getdoc(target), f"{name}.{attr} has no docstring"

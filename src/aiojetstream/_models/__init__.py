"""Pydantic models of JetStream resources; field names are the server's JSON names.

Server data is validated with the :data:`WIRE` context (see :func:`from_wire`):
durations are nanoseconds there, seconds or ``timedelta`` in user code.

The account models (``account``) load on first use: a program that never asks
for account info does not build them (``AccountInfo``'s ``api`` default would
build ``APIStats``'s validator, and pydantic's plugin scan with it, at import).
"""

from typing import TYPE_CHECKING

from ._base import (
    WIRE,
    ConfigModel,
    Duration,
    NanoDatetime,
    NanoTimedelta,
    ResponseModel,
    Timestamp,
    WireModel,
    coerce_duration,
    duration_to_ns,
    format_timestamp,
    from_wire,
    is_wire,
    ns_to_duration,
    parse_timestamp,
    parse_utc_timestamp,
    to_wire,
)
from .consumer import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPauseResponse,
    DeliverPolicy,
    OrderedConsumerConfig,
    PriorityGroupState,
    PriorityPolicy,
    ReplayPolicy,
    SequenceInfo,
)
from .message import RawStreamMessage

if TYPE_CHECKING:
    from .account import AccountInfo, AccountLimits, APIStats, Tier
from .puback import PubAck
from .stream import (
    ClusterInfo,
    DiscardPolicy,
    ExternalStream,
    LostStreamData,
    PeerInfo,
    PersistMode,
    Placement,
    RePublish,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamConsumerLimits,
    StreamInfo,
    StreamSource,
    StreamSourceInfo,
    StreamState,
    SubjectTransformConfig,
)

__all__ = [
    "WIRE",
    "APIStats",
    "AccountInfo",
    "AccountLimits",
    "AckPolicy",
    "ClusterInfo",
    "ConfigModel",
    "ConsumerConfig",
    "ConsumerInfo",
    "ConsumerPauseResponse",
    "DeliverPolicy",
    "DiscardPolicy",
    "Duration",
    "ExternalStream",
    "LostStreamData",
    "NanoDatetime",
    "NanoTimedelta",
    "OrderedConsumerConfig",
    "PeerInfo",
    "PersistMode",
    "Placement",
    "PriorityGroupState",
    "PriorityPolicy",
    "PubAck",
    "RawStreamMessage",
    "RePublish",
    "ReplayPolicy",
    "ResponseModel",
    "RetentionPolicy",
    "SequenceInfo",
    "StorageType",
    "StoreCompression",
    "StreamConfig",
    "StreamConsumerLimits",
    "StreamInfo",
    "StreamSource",
    "StreamSourceInfo",
    "StreamState",
    "SubjectTransformConfig",
    "Tier",
    "Timestamp",
    "WireModel",
    "coerce_duration",
    "duration_to_ns",
    "format_timestamp",
    "from_wire",
    "is_wire",
    "ns_to_duration",
    "parse_timestamp",
    "parse_utc_timestamp",
    "to_wire",
]

_ACCOUNT = frozenset({"AccountInfo", "AccountLimits", "APIStats", "Tier"})


def _load_account(name: str) -> object:
    """The account models, imported on first use (PEP 562)."""
    if name in _ACCOUNT:
        from . import account

        value = getattr(account, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if not TYPE_CHECKING:  # hidden from type checkers: an unknown name stays an error there
    __getattr__ = _load_account

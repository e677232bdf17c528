"""Stream models: ``StreamConfig`` (what you send) and ``StreamInfo`` (what the server reports).

Field names are the server's JSON names. Field lists follow nats-server 2.15
(``$JS.API.STREAM.CREATE`` / ``INFO`` replies) and nats.go ``jetstream/stream_config.go``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from ._base import ConfigModel, Duration, ResponseModel, Timestamp, WireUint64

__all__ = [
    "ClusterInfo",
    "DiscardPolicy",
    "ExternalStream",
    "LostStreamData",
    "PeerInfo",
    "PersistMode",
    "Placement",
    "RePublish",
    "RetentionPolicy",
    "StorageType",
    "StoreCompression",
    "StreamConfig",
    "StreamConsumerLimits",
    "StreamInfo",
    "StreamSource",
    "StreamSourceInfo",
    "StreamState",
    "SubjectTransformConfig",
]


class RetentionPolicy(StrEnum):
    """How long messages are kept in a stream."""

    LIMITS = "limits"
    """Until a limit (``max_msgs``, ``max_bytes``, ``max_age``, ...) removes them."""
    INTEREST = "interest"
    """Until every consumer with interest has acknowledged them."""
    WORKQUEUE = "workqueue"
    """Until the first consumer acknowledges them."""


class StorageType(StrEnum):
    """Where a stream keeps its messages."""

    FILE = "file"
    MEMORY = "memory"


class DiscardPolicy(StrEnum):
    """What a stream does when a limit is reached."""

    OLD = "old"
    """Remove the oldest messages."""
    NEW = "new"
    """Refuse new messages."""


class StoreCompression(StrEnum):
    """On-disk compression of a file stream (nats-server >= 2.10)."""

    NONE = "none"
    S2 = "s2"


class PersistMode(StrEnum):
    """Persistence mode of a stream (nats-server >= 2.12)."""

    DEFAULT = "default"
    ASYNC = "async"


class Placement(ConfigModel):
    """Where a stream is placed in a cluster or super-cluster."""

    cluster: str | None = None
    """Name of the cluster to place the stream in."""
    tags: list[str] | None = None
    """Server tags the chosen servers must all have."""


class ExternalStream(ConfigModel):
    """Qualifies a source or mirror living in another account or JetStream domain."""

    api: str
    """The API prefix importing the other account's or domain's ``$JS.API``."""
    deliver: str | None = None
    """The delivery prefix (unused by modern servers, kept for compatibility)."""


class SubjectTransformConfig(ConfigModel):
    """A subject transform: messages matching ``src`` are stored as ``dest``."""

    src: str | None = None
    """The subject filter to match (all subjects when omitted)."""
    dest: str
    """The destination subject pattern (``{{wildcard(1)}}`` style functions allowed)."""


class RePublish(ConfigModel):
    """Republish stored messages to another subject (nats-server >= 2.9)."""

    src: str | None = None
    """The subject filter of the messages to republish."""
    dest: str
    """The destination subject pattern."""
    headers_only: bool = False
    """Republish only the headers (plus ``Nats-Msg-Size``), not the payload."""


class StreamSource(ConfigModel):
    """A stream to mirror or source from."""

    name: str
    """Name of the origin stream."""
    opt_start_seq: int | None = None
    """Start at this stream sequence of the origin."""
    opt_start_time: Timestamp | None = None
    """Start at this time in the origin."""
    filter_subject: str | None = None
    """Only take messages matching this subject."""
    subject_transforms: list[SubjectTransformConfig] | None = None
    """Filters with optional transforms (exclusive with ``filter_subject``)."""
    external: ExternalStream | None = None
    """Set when the origin is in another account or domain."""


class StreamConsumerLimits(ConfigModel):
    """Defaults and upper limits a stream imposes on its consumers (nats-server >= 2.10)."""

    inactive_threshold: Duration | None = None
    """Default and maximum ``inactive_threshold`` of the stream's consumers."""
    max_ack_pending: int | None = None
    """Default and maximum ``max_ack_pending`` of the stream's consumers."""


class StreamConfig(ConfigModel):
    """The configuration of a stream.

    Only ``name`` is required. Fields left at ``None`` are not sent, so the
    server applies its own defaults (unlimited limits, a two-minute duplicate
    window, ...). Boolean flags default to ``False`` and are only sent when set,
    so a plain config works against older servers that would reject fields they
    do not know. Durations accept ``timedelta`` or seconds.

    Unknown fields raise a ``ValidationError``; a config read back from the
    server (``StreamInfo.config``) keeps the fields this library does not know
    and sends them again on update: modify it with ``model_copy(update=...)``.

    Before the config is sent, each duration must fit the server's int64
    nanoseconds (at most 2**63 - 1 ns, about 292 years) and each source's or
    the mirror's ``opt_start_time`` its clock (1677-09-21T00:12:43.145224192Z
    to 2262-04-11T23:47:16.854775807Z); anything else raises
    :class:`InvalidOptionError`, naming the field, and nothing is sent.

    Example:
        >>> StreamConfig(name="ORDERS", subjects=["orders.>"], max_age=3600)

    """

    name: str
    """Name of the stream (no whitespace, ``.``, ``*``, ``>``, path separators)."""
    description: str | None = None
    """A human readable description."""
    subjects: list[str] | None = None
    """Subjects the stream listens on (wildcards allowed; not for mirrors)."""
    retention: RetentionPolicy = RetentionPolicy.LIMITS
    """When messages are removed: by limits, interest or work-queue acknowledgement."""
    max_consumers: int | None = None
    """Maximum number of consumers (server default -1, unlimited)."""
    max_msgs: int | None = None
    """Maximum number of messages kept (server default -1, unlimited)."""
    max_bytes: int | None = None
    """Maximum total size of the messages kept (server default -1, unlimited)."""
    max_age: Duration | None = None
    """Maximum age of messages (server default 0, unlimited)."""
    max_msgs_per_subject: int | None = None
    """Maximum number of messages kept per subject (server default -1, unlimited)."""
    max_msg_size: int | None = None
    """Largest message accepted (server default -1, the server's max_payload)."""
    discard: DiscardPolicy = DiscardPolicy.OLD
    """What to do when a limit is reached: drop old messages or refuse new ones."""
    storage: StorageType = StorageType.FILE
    """File or memory storage."""
    num_replicas: int = 1
    """Number of replicas in a cluster (1 to 5)."""
    no_ack: bool = False
    """Do not acknowledge publishes (JetStream publish then never gets a PubAck)."""
    duplicate_window: Duration | None = None
    """How long ``Nats-Msg-Id`` values are tracked for de-duplication (server default 2 min)."""
    placement: Placement | None = None
    """Placement in a cluster."""
    mirror: StreamSource | None = None
    """Make the stream a mirror of another one (then ``subjects`` must be empty)."""
    sources: list[StreamSource] | None = None
    """Streams to source messages from."""
    compression: StoreCompression | None = None
    """Storage compression (server default ``none``; nats-server >= 2.10)."""
    first_seq: int | None = None
    """The first sequence number of a new stream (nats-server >= 2.10)."""
    subject_transform: SubjectTransformConfig | None = None
    """Transform applied to subjects of incoming messages (nats-server >= 2.10)."""
    republish: RePublish | None = None
    """Republish stored messages (nats-server >= 2.9)."""
    allow_direct: bool = False
    """Allow direct get (``$JS.API.DIRECT.GET``) of messages (nats-server >= 2.9)."""
    mirror_direct: bool = False
    """Allow direct get on a mirror to answer for its origin (nats-server >= 2.9)."""
    discard_new_per_subject: bool = False
    """With ``discard=new`` and ``max_msgs_per_subject``, refuse per subject."""
    sealed: bool = False
    """Seal the stream (update only): no more writes, deletes or purges; irreversible."""
    deny_delete: bool = False
    """Refuse message deletion through the API."""
    deny_purge: bool = False
    """Refuse purges through the API."""
    allow_rollup_hdrs: bool = False
    """Allow the ``Nats-Rollup`` header to replace a subject's or the stream's content."""
    consumer_limits: StreamConsumerLimits | None = None
    """Defaults and limits for the stream's consumers (nats-server >= 2.10)."""
    allow_msg_ttl: bool = False
    """Allow per-message TTLs set with the ``Nats-TTL`` header (ADR-43; nats-server >= 2.11,
    API level 1).

    Can be enabled on an existing stream but never disabled. Publishing a
    ``Nats-TTL`` header to a stream without it fails with err_code 10166.
    """
    subject_delete_marker_ttl: Duration | None = None
    """Leave a delete marker when limits or a TTL remove a subject's last message (ADR-43;
    nats-server >= 2.11, API level 1).

    The value is the TTL of the marker; ``None`` means no markers. Markers
    carry ``Nats-Marker-Reason`` (``MaxAge``, ``Remove``, ``Purge``) and
    ``Nats-TTL``.

    The stream create and update calls check it before sending anything: a
    value under 1 second (zero included), one that runs past the end of the
    server's clock counted from now (2262-04-11 less a day: the marker expired
    at once) or a value on a mirror raises
    :class:`InvalidStreamConfigError`, and a server below API level 1 raises
    :class:`FeatureNotSupportedError`. Unless the call passes
    ``pedantic=True``, the config sent also has ``allow_rollup_hdrs`` on,
    ``deny_purge`` off and ``allow_msg_ttl`` on, as ADR-43 requires (the config
    object itself is not changed). See ``docs/ttl.md``.
    """
    allow_msg_counter: bool = False
    """Make the stream a distributed counter (``Nats-Incr``; nats-server >= 2.12)."""
    allow_atomic: bool = False
    """Allow atomic batch publishing (nats-server >= 2.12)."""
    allow_msg_schedules: bool = False
    """Allow message schedules (``Nats-Schedule``; nats-server >= 2.12)."""
    allow_batched: bool = False
    """Allow fast batch publishing (nats-server >= 2.14)."""
    persist_mode: PersistMode | None = None
    """Persistence mode (server default ``default``; nats-server >= 2.12)."""
    metadata: dict[str, str] | None = None
    """Application metadata (nats-server >= 2.10). The server adds ``_nats.*`` keys."""


class PeerInfo(ResponseModel):
    """A member of the RAFT group of a stream or consumer."""

    name: str
    """Server name of the peer."""
    current: bool = False
    """Whether the peer is up to date with the leader."""
    offline: bool = False
    """Whether the peer is considered offline."""
    active: Duration
    """Time since the peer was last seen."""
    lag: WireUint64 = 0
    """Number of operations the peer is behind the leader."""
    peer: str | None = None
    """The peer's id."""


class ClusterInfo(ResponseModel):
    """The RAFT group serving a stream or consumer."""

    name: str | None = None
    """Cluster name."""
    raft_group: str | None = None
    """The RAFT group name."""
    leader: str | None = None
    """Server name of the leader."""
    leader_since: Timestamp | None = None
    """When the current leader was elected."""
    system_account: bool = False
    """Whether the group uses the system account for traffic."""
    traffic_account: str | None = None
    """The account carrying the group's traffic."""
    replicas: list[PeerInfo] | None = None
    """The followers."""


class StreamSourceInfo(ResponseModel):
    """Replication state of a mirror or source."""

    name: str
    """Name of the origin stream."""
    external: ExternalStream | None = None
    """Set when the origin is in another account or domain."""
    lag: WireUint64 = 0
    """How many messages the mirror or source is behind."""
    active: Duration
    """Time since the last activity (negative when there was none)."""
    filter_subject: str | None = None
    """The subject filter in use."""
    subject_transforms: list[SubjectTransformConfig] | None = None
    """The subject transforms in use."""
    error: dict[str, Any] | None = None
    """The last replication error (``code``, ``err_code``, ``description``)."""


class LostStreamData(ResponseModel):
    """Messages the server found lost or corrupt."""

    msgs: list[WireUint64] | None = None
    """Sequences of the lost messages."""
    bytes: WireUint64 = 0
    """Bytes lost."""


class StreamState(ResponseModel):
    """The state of a stream at the time of the request."""

    messages: WireUint64
    """Messages stored."""
    bytes: WireUint64
    """Bytes stored."""
    first_seq: WireUint64
    """Sequence of the first message (or the next sequence when empty)."""
    first_ts: Timestamp
    """Time of the first message (Go's zero time ``0001-01-01T00:00:00Z`` when empty)."""
    last_seq: WireUint64
    """Sequence of the last message."""
    last_ts: Timestamp
    """Time of the last message (Go's zero time when empty)."""
    consumer_count: WireUint64 = 0
    """Number of consumers."""
    num_deleted: WireUint64 = 0
    """Number of deleted messages inside the sequence range (interior gaps)."""
    num_subjects: WireUint64 = 0
    """Number of distinct subjects."""
    deleted: list[WireUint64] | None = None
    """Deleted sequences (only when asked for with ``deleted_details``)."""
    subjects: dict[str, WireUint64] | None = None
    """Messages per subject (only when asked for with ``subjects_filter``)."""
    lost: LostStreamData | None = None
    """Lost or corrupt messages, if any."""


class StreamInfo(ResponseModel):
    """A stream's configuration and state, as reported by the server."""

    config: StreamConfig
    """The stream's configuration, including server defaults and unknown fields."""
    created: Timestamp
    """When the stream was created."""
    state: StreamState
    """The stream's state."""
    cluster: ClusterInfo | None = None
    """The RAFT group (the leader only on a single server)."""
    mirror: StreamSourceInfo | None = None
    """Replication state when the stream is a mirror."""
    sources: list[StreamSourceInfo] | None = None
    """Replication state of each source."""
    ts: Timestamp | None = None
    """When the server produced this information (nats-server >= 2.10)."""

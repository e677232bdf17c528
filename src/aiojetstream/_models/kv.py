"""Key-value models (ADR-8, ADR-48): bucket config, bucket status, entries and operations."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pydantic import ConfigDict, Field, field_validator

from .._bounds import shown
from .._errors import InvalidNameError
from .._validation import exact_str
from ._base import ConfigModel, DocumentedModel, Duration, construct_checked
from .stream import (
    Placement,
    RePublish,
    StorageType,
    StoreCompression,
    StreamInfo,
    StreamSource,
)

if TYPE_CHECKING:
    from .._codec import Codec

_T = TypeVar("_T")

__all__ = [
    "KV_MAX_HISTORY",
    "KeyValueConfig",
    "KeyValueEntry",
    "KeyValueOp",
    "KeyValueStatus",
    "validate_bucket_name",
]

KV_MAX_HISTORY: Final = 64
"""The most revisions a bucket can keep per key (ADR-8)."""

_BUCKET_RE: Final = re.compile(r"[a-zA-Z0-9_-]+")
_STREAM_PREFIX: Final = "KV_"


def validate_bucket_name(bucket: object) -> str:
    """Return ``bucket`` if it is a valid bucket name (ADR-8: ``^[a-zA-Z0-9_-]+$``).

    Raises:
        InvalidNameError: the name is not a non-empty string of letters, digits,
            ``_`` and ``-`` (a ``ValueError``).

    """
    if not isinstance(bucket, str) or not _BUCKET_RE.fullmatch(bucket):
        raise InvalidNameError(
            f"invalid bucket name {shown(bucket)}: use only letters, digits, '_' and '-' "
            "(ADR-8: ^[a-zA-Z0-9_-]+$)"
        )
    return exact_str(bucket)


class KeyValueOp(StrEnum):
    """What a key-value entry records."""

    PUT = "PUT"
    """A value was stored."""
    DEL = "DEL"
    """The key was deleted (history kept), or a ``Remove`` limit marker."""
    PURGE = "PURGE"
    """The key was purged (history removed), or a ``MaxAge`` / ``Purge`` limit marker."""


class KeyValueConfig(ConfigModel):
    """The configuration of a key-value bucket (ADR-8, ADR-48).

    A bucket is the stream ``KV_<bucket>`` listening on ``$KV.<bucket>.>``; see
    ``docs/kv.md`` for the full mapping. Durations accept seconds or ``timedelta``.
    Unknown fields are refused.

    Example:
        >>> KeyValueConfig(bucket="config", history=5, limit_marker_ttl=60)

    """

    model_config = ConfigDict(extra="forbid")

    bucket: str
    """The bucket name (letters, digits, ``_`` and ``-``; checked when the config is sent:
    :class:`InvalidNameError`)."""
    description: str | None = None
    """A human readable description."""
    max_value_size: int = -1
    """The largest message accepted, in bytes (-1: the server's ``max_payload``).

    The server counts the headers too (the stream's ``max_msg_size``): ``create``
    and ``update`` add about 45 bytes (the expected revision), a per-key TTL,
    a model's ``Content-Type`` and the delete and purge markers' headers more;
    leave room for them.
    """
    history: int = Field(default=1, ge=1, le=KV_MAX_HISTORY)
    """How many revisions are kept per key (1 to 64)."""
    ttl: Duration | None = None
    """How long a value is kept (the stream's ``max_age``); None or 0: forever."""
    max_bytes: int = -1
    """The most bytes the bucket may hold (-1: unlimited)."""
    storage: StorageType = StorageType.FILE
    """File or memory storage."""
    replicas: int = Field(default=1, ge=1, le=5)
    """Replicas in a cluster (1 to 5)."""
    compression: bool = False
    """Compress the stored data with S2 (nats-server >= 2.10)."""
    limit_marker_ttl: Duration | None = None
    """Enable limit markers (ADR-48): how long the marker left when a key expires stays.

    At least 1 second. Needs nats-server 2.11 (API level 1); enables per-key TTLs
    on ``create`` and ``purge``. It can be enabled on an existing bucket, never
    disabled.
    """
    placement: Placement | None = None
    """Placement of the backing stream in a cluster."""
    republish: RePublish | None = None
    """Republish stored entries to other subjects."""
    mirror: StreamSource | None = None
    """Make the bucket a read-only mirror of another bucket (``name`` is the bucket or
    ``KV_<bucket>``); writes go to the origin."""
    sources: list[StreamSource] | None = None
    """Buckets to source keys from (``name`` is the bucket or ``KV_<bucket>``); a source
    without subject transforms is mapped from ``$KV.<source>.>`` to this bucket. One
    with ``subject_transforms`` is used as given: its ``name`` is a stream's (a
    bucket's is ``KV_<bucket>``)."""
    metadata: dict[str, str] | None = None
    """Application metadata of the backing stream."""

    # The bucket name is checked when the config is sent (kv_stream_config), as a
    # stream's name is: InvalidNameError then, not pydantic's ValidationError now.

    @field_validator("limit_marker_ttl")
    @classmethod
    def _check_marker_ttl(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < timedelta(seconds=1):
            raise ValueError(
                f"limit_marker_ttl must be at least 1 second (ADR-48), got {shown(value)}; "
                "use None to leave limit markers off"
            )
        return value


class KeyValueStatus(DocumentedModel):
    """The state and settings of a bucket, from its backing stream's info."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    """The bucket name."""
    values: int
    """How many entries are stored, history and markers included."""
    history: int
    """How many revisions are kept per key."""
    ttl: timedelta | None
    """How long values are kept (None: forever)."""
    limit_marker_ttl: timedelta | None
    """How long limit markers stay (None: limit markers are off)."""
    bytes: int
    """The size of the stored data."""
    backing_store: str = "JetStream"
    """What stores the bucket (always ``"JetStream"``)."""
    is_compressed: bool
    """Whether the data is compressed on disk."""
    stream_info: StreamInfo
    """The backing stream's info, as received."""

    @property
    def metadata(self) -> dict[str, str]:
        """The backing stream's metadata (the server adds ``_nats.*`` keys)."""
        return dict(self.stream_info.config.metadata or {})

    @property
    def config(self) -> KeyValueConfig:
        """A :class:`KeyValueConfig` describing the bucket (for example to update it)."""
        cfg = self.stream_info.config
        fields: dict[str, Any] = {
            "bucket": self.bucket,
            "description": cfg.description,
            "max_value_size": -1 if cfg.max_msg_size is None else cfg.max_msg_size,
            "history": self.history,
            "ttl": self.ttl,
            "max_bytes": -1 if cfg.max_bytes is None else cfg.max_bytes,
            "storage": cfg.storage,
            "replicas": cfg.num_replicas,
            "compression": self.is_compressed,
            "limit_marker_ttl": self.limit_marker_ttl,
            "placement": cfg.placement,
            "republish": cfg.republish,
            "mirror": cfg.mirror,
            "sources": cfg.sources,
            "metadata": _user_metadata(cfg.metadata),
        }
        return KeyValueConfig(**fields)

    @classmethod
    def from_stream_info(cls, info: StreamInfo) -> KeyValueStatus:
        """Build the status of the bucket backed by the stream ``info`` describes."""
        cfg = info.config
        name = cfg.name
        bucket = name[len(_STREAM_PREFIX) :] if name.startswith(_STREAM_PREFIX) else name
        ttl = cfg.max_age if cfg.max_age else None
        marker = cfg.subject_delete_marker_ttl if cfg.subject_delete_marker_ttl else None
        return cls(
            bucket=bucket,
            values=info.state.messages,
            history=cfg.max_msgs_per_subject or 1,
            ttl=ttl,
            limit_marker_ttl=marker,
            bytes=info.state.bytes,
            is_compressed=cfg.compression not in (None, StoreCompression.NONE),
            stream_info=info,
        )


def _user_metadata(metadata: dict[str, str] | None) -> dict[str, str] | None:
    if not metadata:
        return None
    user = {k: v for k, v in metadata.items() if not k.startswith("_nats.")}
    return user or None


class KeyValueEntry(DocumentedModel):
    """One revision of a key: a value, or a delete / purge / limit marker.

    ``get`` returns only ``PUT`` entries (anything else is "not found");
    ``watch`` and ``history`` return every operation.
    """

    model_config = ConfigDict(frozen=True)

    bucket: str
    """The bucket the entry was read from."""
    key: str
    """The key."""
    value: bytes = b""
    """The value (empty for markers, and for a watch with ``meta_only``)."""
    revision: int
    """The entry's stream sequence: unique and increasing within the bucket."""
    created: datetime
    """When the entry was stored (UTC)."""
    delta: int = 0
    """How many newer entries matching the read followed this one (0: the latest)."""
    operation: KeyValueOp = KeyValueOp.PUT
    """What the entry records."""

    def decode(self, type_: type[_T], codec: Codec | None = None) -> _T:
        """The value validated as ``type_`` (``type_.model_validate_json(value)`` for a model).

        Args:
            type_: a pydantic model (or any type pydantic validates JSON as).
            codec: decode with this :class:`Codec` instead of JSON.

        Raises:
            PayloadValidationError: the value is not a valid ``type_`` (with
                the key's subject ``$KV.<bucket>.<key>``, the revision and pydantic's errors).
            InvalidOptionError: pydantic cannot validate JSON as ``type_`` (no
                schema for it, or a model not fully defined), without ``codec``.

        """
        from .._codec import decode

        return decode(
            self.value, type_, codec, lambda: (f"$KV.{self.bucket}.{self.key}", self.revision)
        )


def kv_entry(
    bucket: str,
    key: str,
    value: bytes,
    revision: int,
    created: datetime,
    delta: int = 0,
    operation: KeyValueOp = KeyValueOp.PUT,
) -> KeyValueEntry:
    """A :class:`KeyValueEntry` of values the library has already checked, without validation.

    Every get and every watched revision makes one, so this skips pydantic's
    validation (a third of a get's parsing) the way ``model_construct`` does,
    minus its generic field loop: the instance's ``__dict__``, fields set,
    extra and private state are set as ``model_construct`` sets them. The
    arguments must have the field types (``bytes``, ``int``, an aware
    ``datetime``); a unit test checks the result against a validated entry.
    """
    return construct_checked(
        KeyValueEntry,
        {
            "bucket": bucket,
            "key": key,
            "value": value,
            "revision": revision,
            "created": created,
            "delta": delta,
            "operation": operation,
        },
    )

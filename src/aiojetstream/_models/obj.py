"""Object store models (ADR-20): bucket config and status, object meta and info, links.

The object info is stored as JSON on the bucket's meta subject; its field names
and shapes are those nats.go writes (``ObjectInfo`` embedding ``ObjectMeta``),
so objects written by the Go, JavaScript and Python clients read back here and
the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from pydantic import ConfigDict, Field, field_validator

from ._base import ConfigModel, DocumentedModel, Duration, ResponseModel, Timestamp
from .stream import Placement, StorageType, StoreCompression, StreamInfo

__all__ = [
    "ObjectInfo",
    "ObjectLink",
    "ObjectMeta",
    "ObjectMetaOptions",
    "ObjectStoreConfig",
    "ObjectStoreStatus",
    "normalize_headers",
]

_STREAM_PREFIX: Final = "OBJ_"


def normalize_headers(value: object) -> dict[str, list[str]] | None:
    """Object headers as ``{name: [values]}`` (nats.go's ``nats.Header``).

    A single ``str`` value becomes a one-element list (nats-py stores plain
    strings); ``None`` and an empty mapping are ``None``.

    Raises:
        ValueError: the value is not a mapping of ``str`` to ``str`` or a
            sequence of ``str``.

    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"headers must be a mapping of str to str or list[str], got {value!r}")
    out: dict[str, list[str]] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(f"a header name must be a str, got {key!r}")
        if isinstance(item, str):
            out[key] = [item]
        elif (
            isinstance(item, Sequence)
            and not isinstance(item, bytes | bytearray)
            and all(isinstance(v, str) for v in item)
        ):
            out[key] = list(item)
        else:
            raise ValueError(f"header {key!r} must be a str or a list of str, got {item!r}")
    return out or None


class ObjectStoreConfig(ConfigModel):
    """The configuration of an object store bucket (ADR-20).

    A bucket is the stream ``OBJ_<bucket>`` listening on ``$O.<bucket>.C.>``
    (chunks) and ``$O.<bucket>.M.>`` (object infos); see ``docs/object-store.md``.
    Durations accept seconds or ``timedelta``. Unknown fields are refused.

    Example:
        >>> ObjectStoreConfig(bucket="files", max_bytes=1 << 30, compression=True)

    """

    model_config = ConfigDict(extra="forbid")

    bucket: str
    """The bucket name (letters, digits, ``_`` and ``-``; checked when the config is sent:
    :class:`InvalidNameError`)."""
    description: str | None = None
    """A human readable description."""
    ttl: Duration | None = None
    """How long objects are kept (the stream's ``max_age``); None or 0: forever."""
    max_bytes: int = -1
    """The most bytes the bucket may hold, chunks and infos included (-1: unlimited)."""
    storage: StorageType = StorageType.FILE
    """File or memory storage."""
    replicas: int = Field(default=1, ge=1, le=5)
    """Replicas in a cluster (1 to 5)."""
    compression: bool = False
    """Compress the stored data with S2 (nats-server >= 2.10)."""
    placement: Placement | None = None
    """Placement of the backing stream in a cluster."""
    metadata: dict[str, str] | None = None
    """Application metadata of the backing stream (nats-server >= 2.10)."""

    # The bucket name is checked when the config is sent (object_stream_config), as
    # a stream's name is: InvalidNameError then, not pydantic's ValidationError now.


class ObjectStoreStatus(DocumentedModel):
    """The state and settings of an object store bucket, from its backing stream's info."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    """The bucket name."""
    description: str | None
    """The bucket's description."""
    ttl: timedelta | None
    """How long objects are kept (None: forever)."""
    storage: StorageType
    """File or memory storage."""
    replicas: int
    """How many replicas the backing stream has."""
    sealed: bool
    """Whether the bucket is sealed (read-only: no put, delete or meta update)."""
    size: int
    """The bytes stored: every chunk and every object info."""
    backing_store: str = "JetStream"
    """What stores the bucket (always ``"JetStream"``)."""
    is_compressed: bool
    """Whether the data is compressed on disk (S2)."""
    stream_info: StreamInfo
    """The backing stream's info, as received."""

    @property
    def metadata(self) -> dict[str, str]:
        """The backing stream's metadata (the server adds ``_nats.*`` keys)."""
        return dict(self.stream_info.config.metadata or {})

    @property
    def config(self) -> ObjectStoreConfig:
        """An :class:`ObjectStoreConfig` describing the bucket (for example to update it)."""
        cfg = self.stream_info.config
        user = {k: v for k, v in (cfg.metadata or {}).items() if not k.startswith("_nats.")}
        return ObjectStoreConfig(
            bucket=self.bucket,
            description=cfg.description,
            ttl=self.ttl,
            max_bytes=-1 if cfg.max_bytes is None else cfg.max_bytes,
            storage=self.storage,
            replicas=self.replicas,
            compression=self.is_compressed,
            placement=cfg.placement,
            metadata=user or None,
        )

    @classmethod
    def from_stream_info(cls, info: StreamInfo) -> ObjectStoreStatus:
        """Build the status of the bucket backed by the stream ``info`` describes."""
        cfg = info.config
        name = cfg.name
        bucket = name[len(_STREAM_PREFIX) :] if name.startswith(_STREAM_PREFIX) else name
        return cls(
            bucket=bucket,
            description=cfg.description,
            ttl=cfg.max_age if cfg.max_age else None,
            storage=cfg.storage or StorageType.FILE,
            replicas=cfg.num_replicas or 1,
            sealed=bool(cfg.sealed),
            size=info.state.bytes,
            is_compressed=cfg.compression not in (None, StoreCompression.NONE),
            stream_info=info,
        )


class ObjectLink(ResponseModel):
    """Where a link points: another object (``name`` set) or a whole bucket (``name`` None)."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    """The bucket of the object (or the bucket) linked to."""
    name: str | None = None
    """The object linked to; None (or empty) for a link to the whole bucket."""


class ObjectMetaOptions(ResponseModel):
    """The ``options`` of an object: a link, and the chunk size it was written with."""

    model_config = ConfigDict(frozen=True)

    link: ObjectLink | None = None
    """Set when the object is a link."""
    max_chunk_size: int | None = None
    """The chunk size the object was written with, in bytes."""


class ObjectMeta(ConfigModel):
    """What :meth:`ObjectStore.update_meta` sets: the name, description, headers and metadata.

    Headers are ``{name: [values]}``; a plain ``str`` value is taken as a single
    value. Unknown fields are refused.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    """The object's name (a different name renames the object)."""
    description: str | None = None
    """A human readable description."""
    headers: dict[str, list[str]] | None = None
    """Application headers, ``{name: [values]}``."""
    metadata: dict[str, str] | None = None
    """Application metadata."""

    @field_validator("headers", mode="before")
    @classmethod
    def _headers(cls, value: Any) -> dict[str, list[str]] | None:
        return normalize_headers(value)


class ObjectInfo(ResponseModel):
    """An object's info: its meta, where its chunks are, its size and digest (ADR-20).

    Returned by ``put``, ``info``, ``list`` and ``watch``, and available as
    ``ObjectResult.info``. ``mtime`` is the time the info was stored (the
    server's timestamp of the meta message; for what ``put`` returns, the
    client's clock). Fields written by other clients that this model does not
    know are kept.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    """The object's name."""
    description: str | None = None
    """A human readable description."""
    headers: dict[str, list[str]] | None = None
    """Application headers, ``{name: [values]}``."""
    metadata: dict[str, str] | None = None
    """Application metadata."""
    options: ObjectMetaOptions | None = None
    """The link (for a link) and the chunk size."""
    bucket: str
    """The bucket the info is stored in."""
    nuid: str | None = None
    """The unique id of this version: its chunks are on ``$O.<bucket>.C.<nuid>``."""
    size: int = Field(default=0, ge=0)
    """The object's size in bytes (0 for links and deleted objects; never negative)."""
    mtime: Timestamp | None = None
    """When the info was stored (UTC)."""
    chunks: int = Field(default=0, ge=0)
    """How many chunks hold the object's data (never negative)."""
    digest: str | None = None
    """``SHA-256=`` and the base64url SHA-256 of the data (None for links and deleted objects)."""
    deleted: bool = False
    """The object was deleted (only seen with ``include_deleted`` / in a watch)."""

    @field_validator("headers", mode="before")
    @classmethod
    def _headers(cls, value: Any) -> dict[str, list[str]] | None:
        return normalize_headers(value)

    @field_validator("size", "chunks", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        return 0 if value is None else value

    @property
    def is_link(self) -> bool:
        """True when the object is a link to another object or to a bucket."""
        return self.options is not None and self.options.link is not None

    @property
    def link(self) -> ObjectLink | None:
        """The link, for a link (else None)."""
        return self.options.link if self.options is not None else None

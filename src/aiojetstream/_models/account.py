"""Account models: ``AccountInfo`` (``$JS.API.INFO``) with its limits, tiers and API stats."""

from __future__ import annotations

from pydantic import Field

from ._base import ResponseModel, WireUint64

__all__ = ["APIStats", "AccountInfo", "AccountLimits", "Tier"]


class APIStats(ResponseModel):
    """JetStream API statistics of the account, and the server's API level."""

    level: WireUint64 = 0
    """The JetStream API level the server supports (0 before nats-server 2.11).

    ADR-43 features (``allow_msg_ttl``, ``subject_delete_marker_ttl``) need level >= 1.
    """
    total: WireUint64 = 0
    """API requests served."""
    errors: WireUint64 = 0
    """API requests that failed."""
    inflight: WireUint64 | None = None
    """API requests in flight (when reported)."""


class AccountLimits(ResponseModel):
    """JetStream limits of an account (-1 means unlimited)."""

    max_memory: int = -1
    """Memory storage allowed, in bytes."""
    max_storage: int = -1
    """File storage allowed, in bytes."""
    max_streams: int = -1
    """Streams allowed."""
    max_consumers: int = -1
    """Consumers allowed."""
    max_ack_pending: int = -1
    """Largest ``max_ack_pending`` a consumer may have."""
    memory_max_stream_bytes: int = -1
    """Largest ``max_bytes`` of a memory stream."""
    storage_max_stream_bytes: int = -1
    """Largest ``max_bytes`` of a file stream."""
    max_bytes_required: bool = False
    """Whether streams must set ``max_bytes``."""


class Tier(ResponseModel):
    """Usage and limits of one replication tier (``R1``, ``R3``, ...)."""

    memory: WireUint64 = 0
    """Memory storage used, in bytes."""
    storage: WireUint64 = 0
    """File storage used, in bytes."""
    reserved_memory: WireUint64 = 0
    """Memory storage reserved by stream limits, in bytes."""
    reserved_storage: WireUint64 = 0
    """File storage reserved by stream limits, in bytes."""
    streams: WireUint64 = 0
    """Streams in the tier."""
    consumers: WireUint64 = 0
    """Consumers in the tier."""
    limits: AccountLimits
    """The tier's limits."""


class AccountInfo(Tier):
    """JetStream usage and limits of the account (``$JS.API.INFO``).

    ``api.level`` tells which features the server supports (e.g. level >= 1 for
    ADR-43 per-message TTLs, nats-server >= 2.11).
    """

    domain: str | None = None
    """The JetStream domain, when one is configured."""
    api: APIStats = Field(default_factory=APIStats)
    """API statistics and the API level."""
    tiers: dict[str, Tier] | None = None
    """Usage per replication tier (only with tiered limits)."""

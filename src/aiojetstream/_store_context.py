"""What the key-value and object stores use of the context: a narrow Protocol.

The stores are typed against :class:`StoreContext` rather than
:class:`~aiojetstream.JetStreamContext` (as nats.go's ``KeyValue`` works over
its small ``JetStream`` interfaces): the context imports the store modules
lazily, inside the methods that create buckets, and the stores never import the
context back, not even for their types. ``JetStreamContext`` satisfies this
Protocol structurally; mypy checks that wherever the context hands itself to a
store.

This module holds types only; at run time the stores import it under
``TYPE_CHECKING`` alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._codec import Codec
    from ._conn import Conn, NatsClient
    from ._headers import TTLInput
    from ._models import PubAck, StreamConfig
    from ._object.store import ObjectStore
    from ._stream import Stream

__all__ = ["StoreContext"]


class StoreContext(Protocol):
    """The members of :class:`~aiojetstream.JetStreamContext` a bucket handle uses."""

    @property
    def timeout(self) -> float:
        """The default seconds to wait for a reply."""
        ...

    @property
    def nc(self) -> NatsClient:
        """The underlying nats-py client (its ``max_payload`` bounds chunks and infos)."""
        ...

    @property
    def _conn(self) -> Conn:
        """The connection, whose listeners tell a put's cleanup when it is reconnected."""
        ...

    async def api_level(self, *, timeout: float | None = None) -> int:
        """The server's JetStream API level."""
        ...

    async def create_stream(
        self, config: StreamConfig, *, pedantic: bool = False, timeout: float | None = None
    ) -> Stream:
        """Create a bucket's backing stream."""
        ...

    async def update_stream(
        self, config: StreamConfig, *, pedantic: bool = False, timeout: float | None = None
    ) -> Stream:
        """Update a bucket's backing stream."""
        ...

    async def stream(self, name: str, *, timeout: float | None = None) -> Stream:
        """Bind to a bucket's backing stream."""
        ...

    async def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        """Delete a bucket's backing stream."""
        ...

    def stream_names(
        self, subject: str | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[str]:
        """Async-iterate stream names (the buckets' backing streams)."""
        ...

    async def object_store(self, bucket: str, *, timeout: float | None = None) -> ObjectStore:
        """Bind to an object store bucket (a link's target)."""
        ...

    async def publish(
        self,
        subject: str,
        payload: object = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        ttl: TTLInput | None = None,
        expected_last_subject_sequence: int | None = None,
        timeout: float | None = None,
        codec: Codec | None = None,
    ) -> PubAck:
        """Publish and wait for the acknowledgement."""
        ...

    async def publish_async(
        self,
        subject: str,
        payload: object = b"",
        *,
        timeout: float | None = None,
    ) -> asyncio.Future[PubAck]:
        """Publish through the asynchronous window (a put's chunks)."""
        ...

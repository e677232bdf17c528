"""The stored-message model returned by ``Stream.get_msg``."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class RawStreamMessage(BaseModel):
    """A message read from a stream by sequence or by last subject.

    ``headers`` holds the headers the message was published with (the
    ``Nats-Stream``, ``Nats-Subject``, ``Nats-Sequence`` and ``Nats-Time-Stamp``
    metadata of a direct get are not repeated there), ``None`` when it had none.
    """

    model_config = ConfigDict(frozen=True)

    subject: str
    seq: int
    headers: dict[str, str] | None = None
    data: bytes = b""
    time: datetime

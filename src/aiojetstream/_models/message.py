"""The stored-message model returned by ``Stream.get_msg``."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class RawStreamMessage(BaseModel):
    """A message read from a stream by sequence or by last subject.

    ``headers`` holds the headers the message was published with, ``None`` when
    it had none. The metadata headers a direct get adds (``Nats-Stream``,
    ``Nats-Subject``, ``Nats-Sequence``, ``Nats-Time-Stamp``,
    ``Nats-Last-Sequence``, ``Nats-Num-Pending``) are not repeated there, so both
    kinds of get return the same message.
    """

    model_config = ConfigDict(frozen=True)

    subject: str
    seq: int
    headers: dict[str, str] | None = None
    data: bytes = b""
    time: datetime

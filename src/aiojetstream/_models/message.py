"""The stored-message model returned by ``Stream.get_msg``."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict

from ._base import construct_checked

if TYPE_CHECKING:
    from .._codec import Codec

_T = TypeVar("_T")


class RawStreamMessage(BaseModel):
    """A message read from a stream by sequence or by last subject.

    ``headers`` holds the headers the message was published with, ``None`` when
    it had none. The metadata headers a direct get adds (``Nats-Stream``,
    ``Nats-Subject``, ``Nats-Sequence``, ``Nats-Time-Stamp``,
    ``Nats-Last-Sequence``, ``Nats-Num-Pending``) are not repeated there, so both
    kinds of get return the same message. They are decoded as
    :attr:`Msg.headers`: repeated keys joined with ``", "``, bytes that are not
    UTF-8 replaced by U+FFFD.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)  # built on first validation

    subject: str
    seq: int
    headers: dict[str, str] | None = None
    data: bytes = b""
    time: datetime

    def decode(self, type_: type[_T], codec: Codec | None = None) -> _T:
        """``data`` validated as ``type_`` (``type_.model_validate_json(data)`` for a model).

        Raises:
            PayloadValidationError: ``data`` is not a valid ``type_``.
            InvalidOptionError: pydantic cannot validate JSON as ``type_`` (no
                schema for it, or a model not fully defined), without ``codec``.

        """
        from .._codec import decode

        return decode(self.data, type_, codec, lambda: (self.subject, self.seq))


def raw_message(
    subject: str, seq: int, headers: dict[str, str] | None, data: bytes, time: datetime
) -> RawStreamMessage:
    """A :class:`RawStreamMessage` of values the library has already parsed, without validation.

    A batch direct get makes one per message: this skips pydantic's
    validation the way ``model_construct`` does, minus its generic field loop
    (``__dict__``, fields set, extra and private state are set as
    ``model_construct`` sets them). The arguments must have the field types;
    a unit test checks the result against a validated message.
    """
    return construct_checked(
        RawStreamMessage,
        {"subject": subject, "seq": seq, "headers": headers, "data": data, "time": time},
    )

"""``PubAck``: the server's acknowledgement of a JetStream publish.

On the publish hot path: parsed with ``PubAck.model_validate_json(raw)`` only,
no validators, no durations (so no ``WIRE`` context needed). Strict types: a
``seq`` that is not a JSON integer from 1 to 2**64 - 1, or a ``duplicate``
that is not a JSON bool, does not validate (nats-server never sends one).
"""

from __future__ import annotations

from pydantic import StrictBool

from ._base import ResponseModel, WireSequence

__all__ = ["PubAck"]


class PubAck(ResponseModel):
    """The acknowledgement of a message stored by a stream.

    Fields of newer servers (e.g. ``val`` of counters, ``batch``/``count`` of
    batch publishes) are kept as extra attributes.
    """

    stream: str
    """The stream that stored the message."""
    seq: WireSequence
    """The stream sequence of the message."""
    duplicate: StrictBool = False
    """``True`` when the ``Nats-Msg-Id`` was already seen within the duplicate window."""
    domain: str | None = None
    """The JetStream domain of the stream, when one is configured."""

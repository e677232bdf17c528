"""Priority groups (ADR-42): pull options checked client-side, and the pinned-client state.

Pure: no asyncio, no nats-py, no clock. The pull engine resolves the options
once (``_pull_settings.resolve_*``) with :func:`resolve_priority`, and keeps the
pin of a ``pinned_client`` consumer in a :class:`PinState` that the
:class:`~aiojetstream.Consumer` handle shares between its pulls (as nats.go
keeps the id on its pull consumer handle):

* every message delivered to the pinned client carries ``Nats-Pin-Id``
  (:func:`pin_id_from_headers`), which the state records;
* every later pull sends it in the request's ``id`` field;
* a ``423`` status (``Nats-Pin-Id mismatch`` or ``Nats-Wrong-Pin-Id``) means
  the pin was lost: the state forgets it and the next pull goes without it,
  so the server can pin this client again.

Server versions: ``overflow`` and ``pinned_client`` need nats-server 2.11
(JetStream API level 1), ``prioritized`` 2.12 (API level 2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import _bounds as B
from ._errors import InvalidOptionError

__all__ = [
    "GROUP_PATTERN",
    "MAX_PRIORITY",
    "OVERFLOW",
    "PINNED_CLIENT",
    "PIN_ID_HEADER",
    "PRIORITIZED",
    "PinState",
    "PriorityOptions",
    "check_group_name",
    "pin_id_from_headers",
    "resolve_priority",
]

#: A group name as the server accepts it (10162 otherwise).
GROUP_PATTERN: Final = re.compile(r"[A-Za-z0-9\-_/=]{1,16}")
#: ``priority`` of a prioritized pull: 0 (served first) to 9.
MAX_PRIORITY: Final = 9
#: The header of a message delivered to the pinned client.
PIN_ID_HEADER: Final = "Nats-Pin-Id"
_PIN_ID_BYTES: Final = PIN_ID_HEADER.encode()
_PIN_ID_LOWER: Final = PIN_ID_HEADER.lower()

#: The wire values of ``ConsumerConfig.priority_policy``.
OVERFLOW: Final = "overflow"
PINNED_CLIENT: Final = "pinned_client"
PRIORITIZED: Final = "prioritized"


def check_group_name(group: object) -> str:
    """Return ``group`` if it is a valid priority group name.

    Raises:
        InvalidOptionError: not a string of 1 to 16 characters from
            ``A-Z a-z 0-9 - _ / =``.

    """
    if not isinstance(group, str) or GROUP_PATTERN.fullmatch(group) is None:
        raise InvalidOptionError(
            f"a priority group name is 1 to 16 characters of A-Z, a-z, 0-9, -, _, / and =; "
            f"got {B.shown(group)}"
        )
    return group


@dataclass(frozen=True, slots=True)
class PriorityOptions:
    """The priority-group fields of every pull request of one run (validated)."""

    group: str
    min_pending: int | None = None
    min_ack_pending: int | None = None
    priority: int | None = None
    pinned: bool = False
    """The consumer's policy is ``pinned_client``: pulls carry the pin id."""

    def fields(self, pin_id: str | None) -> dict[str, Any]:
        """The JSON fields to add to a pull request."""
        out: dict[str, Any] = {"group": self.group}
        if self.min_pending is not None:
            out["min_pending"] = self.min_pending
        if self.min_ack_pending is not None:
            out["min_ack_pending"] = self.min_ack_pending
        if self.priority is not None:
            out["priority"] = self.priority
        if pin_id is not None:
            out["id"] = pin_id
        return out


def _count(value: int | None, name: str) -> int | None:
    # The server's int64 (past it the pull request was malformed); a giant int's own
    # message raised ValueError.
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= B.MAX_INT64:
        raise InvalidOptionError(
            f"{name} must be a positive int (at most 2**63 - 1), got {B.shown(value)}"
        )
    return int.__int__(value)


def resolve_priority(
    *,
    groups: Sequence[str] | None,
    policy: str | None,
    group: str | None = None,
    min_pending: int | None = None,
    min_ack_pending: int | None = None,
    priority: int | None = None,
) -> PriorityOptions | None:
    """Check a pull's priority options against the consumer's configuration.

    Args:
        groups: The consumer's ``priority_groups`` (from its cached info).
        policy: The consumer's ``priority_policy`` wire value.
        group: The group to pull for; required when the consumer has groups.
        min_pending: Overflow: serve only while the consumer has at least this
            many pending messages.
        min_ack_pending: Overflow: serve only while at least this many
            messages await an acknowledgement (either threshold is enough).
        priority: Prioritized: 0 (served first) to 9.

    Returns:
        The options to send, or None for a consumer without priority groups.

    Raises:
        InvalidOptionError: a group is missing, malformed or not one of the
            consumer's; an option does not fit the consumer's policy or is out
            of range. Raised before anything is sent (the server would answer
            a ``400`` status, or silently ignore ``priority``).

    """
    min_pending = _count(min_pending, "min_pending")
    min_ack_pending = _count(min_ack_pending, "min_ack_pending")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9
    ):
        raise InvalidOptionError(
            f"priority must be an int from 0 to {MAX_PRIORITY}, got {B.shown(priority)}"
        )
    policy = None if policy in (None, "", "none") else str(policy)
    if not groups or policy is None:
        if group is not None or min_pending or min_ack_pending or priority is not None:
            raise InvalidOptionError(
                "group, min_pending, min_ack_pending and priority need a consumer with "
                "priority groups (ConsumerConfig.priority_groups and priority_policy)"
            )
        return None
    if group is None:
        raise InvalidOptionError(
            f"the consumer has priority groups {list(groups)}: pass group= to pull"
        )
    check_group_name(group)
    if group not in groups:
        raise InvalidOptionError(
            f"{group!r} is not one of the consumer's priority groups {list(groups)}"
        )
    if (min_pending is not None or min_ack_pending is not None) and policy != OVERFLOW:
        raise InvalidOptionError(
            f"min_pending and min_ack_pending need the overflow priority policy, not {policy!r}"
        )
    if priority is not None and policy != PRIORITIZED:
        raise InvalidOptionError(f"priority needs the prioritized priority policy, not {policy!r}")
    return PriorityOptions(
        group, min_pending, min_ack_pending, priority, pinned=policy == PINNED_CLIENT
    )


def pin_id_from_headers(hdr: bytes | None) -> str | None:
    r"""The ``Nats-Pin-Id`` of a user message's raw header block, or None.

    Cheap when the header is absent (one substring test). Never raises. The
    last such line counts: the server appends its own after the message's
    stored headers, which may carry a ``Nats-Pin-Id`` too (headers forwarded
    from a message read through another pinned consumer).

    Example:
        >>> pin_id_from_headers(b"NATS/1.0\r\nNats-Pin-Id: abc\r\n\r\n")
        'abc'
        >>> pin_id_from_headers(b"NATS/1.0\r\nNats-Pin-Id: old\r\nNats-Pin-Id: abc\r\n\r\n")
        'abc'

    """
    if hdr is None or _PIN_ID_BYTES not in hdr:
        return None
    for line in reversed(bytes(hdr).split(b"\r\n")[1:]):
        key, sep, value = line.partition(b":")
        if sep and key.strip().decode("latin-1").lower() == _PIN_ID_LOWER:
            text = value.strip().decode("utf-8", "replace")
            return text or None
    return None


def pin_header_size(hdr: bytes | None) -> int:
    r"""The bytes of a message's header block the server's ``Nats-Pin-Id`` added.

    nats-server counts a message against a pull's ``max_bytes`` before it adds
    the pin id header of a pinned client (it appends the line to the header
    block, or writes a block of its own when the message had none). A pinned
    pull's byte count leaves these bytes out, as the server does. (A message
    stored with an empty header block, ``NATS/1.0`` and nothing else, which no
    client of ours writes, reads as one without headers: 12 bytes short.)

    Example:
        >>> pin_header_size(b"NATS/1.0\r\nNats-Pin-Id: abc\r\n\r\n")
        30
        >>> pin_header_size(b"NATS/1.0\r\nA: b\r\nNats-Pin-Id: abc\r\n\r\n")
        18

    """
    if hdr is None or _PIN_ID_BYTES not in hdr:
        return 0
    lines = bytes(hdr).split(b"\r\n")
    if len(lines) < 4 or lines[-1] or lines[-2]:
        return 0
    key, sep, _ = lines[-3].partition(b":")
    if not sep or key.strip().decode("latin-1").lower() != _PIN_ID_LOWER:
        return 0
    if len(lines) == 4:  # the server's own block: the message had no headers
        return len(hdr)
    return len(lines[-3]) + 2


class PinState:
    """The pin of one priority group as this client knows it (``pinned_client``).

    Shared by the pulls of one :class:`~aiojetstream.Consumer` handle for a
    group. ``id`` is what the next pull sends (None: pull without one, and the
    server may pin this client).
    """

    __slots__ = ("changes", "id")

    def __init__(self) -> None:
        self.id: str | None = None
        self.changes = 0
        """How often the pin was taken or lost (for tests and statistics)."""

    def pinned(self, pin_id: str) -> bool:
        """A delivered message carried ``pin_id``; True when it is a new pin."""
        if pin_id == self.id:
            return False
        self.id = pin_id
        self.changes += 1
        return True

    def lost(self, sent: str | None = None) -> bool:
        """A 423 status: forget the pin; True when one was held.

        ``sent``: the pin id the refused run's pulls last carried. A pin taken
        since (another pull of the handle was given a new one: the server pins
        the first waiting pull without an id, and refuses the older-pin pulls
        behind it later) is kept: forgetting it left no pull holding it, and
        the only client got nothing until the pin's ``priority_timeout``.
        """
        if self.id is None or (sent is not None and sent != self.id):
            return False
        self.id = None
        self.changes += 1
        return True

    def __repr__(self) -> str:
        return f"<PinState id={self.id!r}>"

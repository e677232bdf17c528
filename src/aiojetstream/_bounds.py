"""Bounds of the numbers a caller passes: sequences, counts and client-side waits (pure).

Every check refuses with :class:`InvalidOptionError` (a ``ValueError``) before
anything is sent, and none of them fails on its own error message: a giant
``int`` (past Python's int-to-str digit limit, 4,300 digits by default) is
described by its size instead of being printed, and converting it to a float
(which raises ``OverflowError``) is never tried. NaN has a message of its own.

The bounds are the server's: sequences are Go ``uint64``, counts ``int`` (64
bits), and durations ``int64`` nanoseconds, about 292 years. A client-side
wait (a ``timeout``, ``hold_when_full``) has the same upper bound, so that no
number of seconds is accepted in one place and refused in another; anything
longer (``1e300``, ``inf``) is refused instead of meaning "forever".
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Final

from . import _duration as D
from ._errors import InvalidNameError, InvalidOptionError

__all__ = [
    "MAX_INT32",
    "MAX_INT64",
    "MAX_UINT64",
    "MAX_WAIT",
    "check_config",
    "count",
    "decimal_digits",
    "seconds",
    "sequence",
    "shown",
    "timeout",
]

MAX_INT32: Final = 2**31 - 1
MAX_INT64: Final = 2**63 - 1
#: The largest stream sequence (nats-server's uint64; it reads larger ones modulo 2**64).
MAX_UINT64: Final = 2**64 - 1
#: The longest wait, in seconds: the server's int64 nanoseconds (about 292 years).
MAX_WAIT: Final = MAX_INT64 // 1_000_000_000

_BOUND_TEXT: Final = {
    MAX_UINT64: "2**64 - 1",
    MAX_INT64: "2**63 - 1",
    -MAX_INT64 - 1: "-2**63",
    MAX_INT32: "2**31 - 1",
    -MAX_INT32 - 1: "-2**31",
}
#: Ints with more bits than this are described by their size in messages (about 60 digits).
_SHOWN_BITS: Final = 200
_SHOWN_CHARS: Final = 200


def decimal_digits(value: int) -> int:
    """About how many decimal digits ``value`` has, without converting it to text."""
    return max(1, int(abs(value).bit_length() * math.log10(2)) + 1)


def shown(value: object) -> str:
    """``repr(value)`` for an error message, for any value.

    A giant int (which ``repr`` refuses past the digit limit) is described by
    its size; an int or float subclass is shown as its value (not by its own
    ``__repr__``); a long repr is cut. A ``timedelta`` is shown in seconds
    (``0.5 s``) and a ``datetime`` in ISO 8601, not as their Python reprs.
    """
    if isinstance(value, bool):
        return repr(bool(value))
    if isinstance(value, timedelta):
        return f"{value.total_seconds():,.6f}".rstrip("0").rstrip(".") + " s"
    if isinstance(value, datetime):
        return datetime.isoformat(value)
    if isinstance(value, int):
        if value.bit_length() > _SHOWN_BITS:
            sign = "a negative" if value < 0 else "an"
            return f"{sign} int of about {decimal_digits(value):,} digits"
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value)
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not replace the error being reported
        return f"a {type(value).__name__}"
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def _bound(value: int) -> str:
    return _BOUND_TEXT.get(value, int.__repr__(value))


def count(
    value: object,
    name: str,
    minimum: int = 1,
    maximum: int = MAX_INT64,
    error: type[InvalidOptionError] = InvalidOptionError,
) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) from ``minimum`` to ``maximum``.

    Returns a plain ``int`` (an int subclass is copied, its own methods unused).

    Raises:
        InvalidOptionError: (or ``error``) anything else.

    """
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise error(
            f"{name} must be an int from {_bound(minimum)} to {_bound(maximum)}, got {shown(value)}"
        )
    return int.__int__(value)


def sequence(value: object, name: str, minimum: int = 1) -> int:
    """A stream sequence (or revision): an ``int`` from ``minimum`` to 2**64 - 1.

    Raises:
        InvalidOptionError: anything else (nats-server wraps a larger value: an
            expected sequence of 2**64 + 2 matched sequence 2).

    """
    return count(value, name, minimum, MAX_UINT64)


def seconds(
    value: object,
    name: str,
    *,
    zero: bool = False,
    delta: bool = True,
    error: type[InvalidOptionError] = InvalidOptionError,
) -> float:
    """A wait or a duration in seconds: a number (or a duration) up to :data:`MAX_WAIT`.

    Args:
        value: the caller's value.
        name: what it is, for the message.
        zero: whether 0 is allowed (otherwise it must be positive).
        delta: whether every duration form is allowed: a ``timedelta`` and a
            duration string (``"30s"``, ``"1h30m"``, ``"2d"``:
            :mod:`aiojetstream._duration`) as well as a number (a ``timeout=``
            too); False where the caller converted them already.
        error: the error to raise.

    Raises:
        InvalidOptionError: (or ``error``) not a number (or duration), NaN,
            negative, 0 unless allowed, or longer than :data:`MAX_WAIT`
            (infinity included; a string as the number it equals).

    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        amount: int | float = value  # (first: a number costs no more than it did)
    elif delta and isinstance(value, timedelta):
        amount = value.total_seconds()
    elif delta and isinstance(value, str):
        amount = D.text_ns(value, error, what=name) / 1_000_000_000
    else:
        what = (
            "a number of seconds, a timedelta or a string such as '1h30m'"
            if delta
            else "a number of seconds"
        )
        raise error(f"{name} must be {what}, got {shown(value)}")
    if amount != amount:
        raise error(f"{name} is NaN (not a number): give a number of seconds")
    # Compared as they are: a giant int is never converted to a float (OverflowError).
    if amount > MAX_WAIT:
        raise error(
            f"{name} must be at most {MAX_WAIT:,} s (about 292 years, the server's int64 "
            f"nanoseconds), got {shown(value)}"
        )
    if amount < 0:
        raise error(f"{name} must not be negative, got {shown(value)}")
    if amount == 0 and not zero:
        raise error(f"{name} must be positive, got {shown(value)}")
    return float(amount)


def timeout(value: object, name: str = "timeout") -> float | None:
    """A caller's ``timeout``: None, or positive seconds up to :data:`MAX_WAIT`.

    Seconds (an ``int`` or a ``float``: no parsing), a ``timedelta`` or a
    duration string (``"1.5s"``, ``"500ms"``), as every duration of the library.

    Raises:
        InvalidOptionError: anything else (0 or less sent the request and then
            reported it failed; NaN or infinity never timed out).

    """
    if value is None:
        return None
    return seconds(value, name)


# --------------------------------------------------------------------------- configs

#: The server's range of the int fields of the configs it takes, where it is not a
#: Go int64: sequences and the rate limit are uint64, max_msg_size an int32.
_FIELD_RANGES: Final = {
    "first_seq": (0, MAX_UINT64),
    "opt_start_seq": (0, MAX_UINT64),
    "rate_limit_bps": (0, MAX_UINT64),
    "max_msg_size": (-MAX_INT32 - 1, MAX_INT32),
    "max_reset_attempts": (1, MAX_INT64),  # (OrderedConsumerConfig: the client's own count)
}
_INT64: Final = (-MAX_INT64 - 1, MAX_INT64)
#: Configs whose ``name`` is a stream's name (a mirror's or a source's origin too).
_STREAM_NAMED: Final = {"StreamConfig": "stream", "StreamSource": "origin stream"}


def check_config(config: Any, path: str = "") -> None:
    """Refuse, before sending, what the server would refuse as a malformed config.

    ``config`` is a config model (``StreamConfig``, ``ConsumerConfig``, ...)
    and, recursively, the configs inside it (a mirror, the sources). Each int
    field must fit the server's type (a sequence 0 to 2**64 - 1, a count a
    64-bit int; the server answered "invalid JSON", or wrapped the value); a
    stream's name, a mirror's and each source's must be valid names (the server
    answered with a bare ``APIError``), as must a consumer's ``name`` and
    ``durable_name``.

    Raises:
        InvalidOptionError: an int field out of range.
        InvalidNameError: an invalid name.

    """
    from ._validation import validate_name  # (imports this module)

    kind = type(config).__name__
    path = path or kind
    fields: dict[str, Any] = type(config).model_fields
    for field in fields:
        value = getattr(config, field, None)
        where = f"{path}.{field}"
        if isinstance(value, int) and not isinstance(value, bool):
            low, high = _FIELD_RANGES.get(field, _INT64)
            count(value, where, low, high)
        elif isinstance(value, str) and field in ("name", "durable_name"):
            if field == "name" and kind in _STREAM_NAMED:
                _checked_name(validate_name, value, _STREAM_NAMED[kind], where)
            elif kind == "ConsumerConfig" and value:  # (empty: none, as the server reads it)
                _checked_name(validate_name, value, "consumer", where)
        elif hasattr(type(value), "model_fields"):
            check_config(value, where)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if hasattr(type(item), "model_fields"):
                    check_config(item, f"{where}[{i}]")


def _checked_name(validate: Any, value: str, kind: str, where: str) -> None:
    try:
        validate(value, kind)
    except InvalidNameError as exc:
        raise InvalidNameError(f"{where}: {exc}") from None

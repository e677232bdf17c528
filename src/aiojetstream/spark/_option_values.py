"""Option values for the Spark data sources: bounds and parsers, pure (no pyspark, no I/O).

The pieces :mod:`._options` builds its value objects from: the upper bounds of
the numeric options, and one parser per kind of value (a name, a positive
integer or number of seconds, a flag, subject filters, offsets, times and
durations). Each takes the lower-cased options and the option's documented
spelling, and raises :class:`~aiojetstream.InvalidOptionError` naming it.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from aiojetstream import InvalidOptionError
from aiojetstream import parse_duration as library_duration

__all__ = [
    "MAX_PARTITIONS",
    "MAX_PENDING",
    "MAX_PER_TRIGGER",
    "MAX_SECONDS",
    "MAX_SEQUENCE",
    "MAX_TIME_NS",
    "MIN_TIME_NS",
    "NAME_RE",
    "End",
    "Start",
    "parse_bool",
    "parse_duration",
    "parse_inbox_prefix",
    "parse_name",
    "parse_offset",
    "parse_per_stream",
    "parse_positive_float",
    "parse_positive_int",
    "parse_subjects",
    "parse_timestamp",
    "shown",
]

# Upper bounds of the numeric options, checked when the read or write is planned.
#: ``numPartitions`` and ``minPartitions``: Spark tasks per batch (or micro-batch).
MAX_PARTITIONS: Final = 10_000
#: A stream sequence: nats-server's uint64 (it reads a larger one modulo 2**64).
MAX_SEQUENCE: Final = 2**64 - 1
#: The sequences and bytes per trigger: Spark's read limits are Java longs.
MAX_PER_TRIGGER: Final = 2**63 - 1
#: Seconds (``timeout``, ``retryTimeout``, ``inactiveThreshold``, ``maxTriggerDelay``):
#: the server's durations are int64 nanoseconds, 9,223,372,036 s (about 292 years).
MAX_SECONDS: Final = (2**63 - 1) // 1_000_000_000
#: ``maxPending``: publishes or puts in flight per task.
MAX_PENDING: Final = 1_000_000
#: The server's clock, in nanoseconds since 1970 (Go's int64 ``UnixNano``; it wraps
#: a time outside: a later ``startingTimestamp`` read from the first message).
MIN_TIME_NS: Final = -(2**63)
MAX_TIME_NS: Final = 2**63 - 1
_TIME_RANGE: Final = "1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

#: A stream, bucket or domain name.
NAME_RE: Final = re.compile(r"^[^\s.*>/\\\x00]+$")

#: ``startingOffsets`` of one stream, and ``endingOffsets``.
Start = Literal["earliest", "latest"] | int
End = Literal["latest"] | int

#: Spark's own duration strings (``JavaUtils.timeStringAs``, as Kafka's
#: ``maxTriggerDelay`` reads them): whole numbers, any case, ``15min`` too.
_SPARK_DURATION_RE: Final = re.compile(r"([0-9]{1,20})(us|ms|s|m|min|h|d)?")
_SPARK_UNITS: Final = {
    "us": 1e-6,
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DURATION_FORMS: Final = (
    "seconds (30, 1.5) or a duration such as 30s, 15m, 1h30m, 500ms or 2d "
    "(the library's forms, and Spark's such as 15min)"
)


def duration_seconds(text: str) -> float:
    """Seconds of a duration option's text; NaN when it is none of the forms.

    Plain seconds (``"30"``, ``"1.5"``), then the library's one duration
    syntax (:func:`aiojetstream.parse_duration`: ``"1h30m"``, ``"500ms"``,
    ``"2d"``), then Spark's own (``"15min"``, ``"100us"``; case-insensitive,
    as Spark reads ``"15M"``: minutes).
    """
    text = text.strip()
    # Each form in turn: what one does not read, the next may.
    # (float() reads other scripts' digits too, "٣٠", and "1_000": neither a duration
    # nor what Spark takes)
    if text.isascii() and "_" not in text:
        with contextlib.suppress(ValueError):
            return float(text)
    with contextlib.suppress(InvalidOptionError, OverflowError):
        return library_duration(text).total_seconds()
    match = _SPARK_DURATION_RE.fullmatch(text.lower())
    if match is None:
        return math.nan
    return int(match[1]) * _SPARK_UNITS[match[2] or "s"]


def parse_name(options: Mapping[str, str], key: str, display: str) -> str:
    """A required stream or bucket name: no whitespace, ``.``, ``*``, ``>``, ``/`` or backslash."""
    value = options.get(key)
    if value is None or not value.strip():
        raise InvalidOptionError(f"option {display!r} is required")
    value = value.strip()
    if not NAME_RE.match(value):
        raise InvalidOptionError(
            f"option {display!r}: invalid name {value!r} "
            "(no whitespace, '.', '*', '>', '/' or '\\')"
        )
    return value


def shown(raw: str) -> str:
    """``repr(raw)``, cut: an option may be a giant number."""
    return repr(raw) if len(raw) <= 60 else repr(raw[:60]) + f"... ({len(raw)} characters)"


def parse_positive_int(
    options: Mapping[str, str], key: str, display: str, maximum: int = MAX_PER_TRIGGER
) -> int | None:
    """A positive integer up to ``maximum``; None if the option is not given."""
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    try:
        value = int(text) if len(text) <= 40 else 0  # (int() refuses 4,300 digits itself)
    except ValueError:
        value = 0
    if not 0 < value <= maximum:
        raise InvalidOptionError(
            f"option {display!r}: expected a positive integer up to {maximum:,}, got {shown(raw)}"
        )
    return value


def parse_positive_float(
    options: Mapping[str, str],
    key: str,
    display: str,
    default: float,
    maximum: float = MAX_SECONDS,
) -> float:
    """A positive duration in seconds up to ``maximum`` (``default`` if not given).

    Seconds, or a duration string (:func:`duration_seconds`).
    """
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return default
    value = duration_seconds(raw)
    if not (math.isfinite(value) and 0 < value <= maximum):
        raise InvalidOptionError(
            f"option {display!r}: expected positive {_DURATION_FORMS}, up to {maximum:,.0f} s "
            f"(about 292 years, the server's int64 nanoseconds), got {shown(raw)}"
        )
    return value


def parse_bool(options: Mapping[str, str], key: str, display: str, default: bool) -> bool:
    """``true``/``1``/``yes`` or ``false``/``0``/``no`` (``default`` if not given)."""
    raw = options.get(key)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"option {display!r}: expected true or false, got {raw!r}")


def parse_inbox_prefix(options: Mapping[str, str]) -> str | None:
    """``inboxPrefix``: the reply subjects' prefix, a subject without wildcards (or None).

    Each reply inbox is the prefix, a ``.`` and more tokens, subscribed to with
    a wildcard: whitespace, an empty token or a wildcard would break or widen
    the subscription. A trailing ``.`` is dropped (nats-py adds its own).
    """
    raw = options.get("inboxprefix")
    if raw is None or not raw.strip():
        return None
    prefix = raw.strip().rstrip(".")
    tokens = prefix.split(".")
    if (
        not prefix
        or any(not t for t in tokens)
        or any(c.isspace() or not c.isprintable() or c in "*>" for c in prefix)
    ):
        raise InvalidOptionError(
            f"option 'inboxPrefix': invalid prefix {raw!r} (a subject such as _INBOX_alice: "
            "no whitespace, control characters, empty tokens or wildcards)"
        )
    return prefix


def parse_subjects(options: Mapping[str, str]) -> tuple[str, ...]:
    """The ``subject`` filters (a comma list): valid and pairwise disjoint."""
    raw = options.get("subject")
    if raw is None or not raw.strip():
        return ()
    subjects = tuple(s.strip() for s in raw.split(","))
    for subject in subjects:
        tokens = subject.split(".")
        if (
            not subject
            or any(not t for t in tokens)
            or any(c.isspace() or c == "\x00" for c in subject)
            or any(">" in t and t != ">" for t in tokens)
            or any("*" in t and t != "*" for t in tokens)
            or (">" in tokens and tokens[-1] != ">")
        ):
            raise InvalidOptionError(f"option 'subject': invalid subject filter {subject!r}")
    for i, first in enumerate(subjects):
        for second in subjects[i + 1 :]:
            if _overlap(first.split("."), second.split(".")):
                raise InvalidOptionError(
                    f"option 'subject': filters {first!r} and {second!r} overlap (a subject "
                    "can match both, which a JetStream consumer refuses); drop one of them"
                )
    return subjects


def _overlap(first: list[str], second: list[str]) -> bool:
    """Whether some subject matches both filters (their tokens)."""
    for a, b in zip(first, second, strict=False):
        if a == ">" or b == ">":
            return True
        if a != b and a != "*" and b != "*":
            return False
    return len(first) == len(second)


def parse_offset(
    raw: str, display: str, words: tuple[str, ...], stream: str | None = None
) -> str | int:
    """A word of ``words``, a stream sequence, or a checkpoint's JSON offset."""
    text = raw.strip()
    if text.lower() in words:
        return text.lower()
    digits = text
    if text.startswith("{"):
        # An offset as written in a checkpoint: {"stream": ..., "seq": N, "created": ...}.
        offset = _json_offset(text)
        if offset is not None:
            name, digits = offset
            if stream is not None and name != stream:
                raise InvalidOptionError(
                    f"option {display!r}: the offset is of stream {name!r}, not {stream!r}"
                )
    if (
        digits.isascii()
        and digits.isdigit()
        and len(digits) <= 40  # (int() refuses 4,300 digits itself)
        and 1 <= int(digits) <= MAX_SEQUENCE
    ):
        return int(digits)
    allowed = " | ".join(words)
    raise InvalidOptionError(
        f"option {display!r}: expected {allowed}, a stream sequence from 1 to 2**64 - 1 "
        "(the server's uint64) or a JSON object of them per stream such as "
        f'{{"ORDERS-0": 1001, "ORDERS-1": "{words[0]}"}}, got {shown(raw)}'
    )


def _json_offset(text: str) -> tuple[str, str] | None:
    """The stream and the sequence (as digits) of a JSON offset; None if it is none."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not {"stream", "seq"} <= value.keys():
        return None
    name, seq = value["stream"], value["seq"]
    if not isinstance(name, str) or isinstance(seq, bool) or not isinstance(seq, int):
        return None
    return name, str(seq)


def parse_named_offset(
    raw: str, display: str, words: tuple[str, ...]
) -> dict[str, str | int] | None:
    """A single stream's checkpoint offset as ``{stream: seq}``; None if it is not one.

    For a read of several streams: such an offset is that stream's, not every one's.
    """
    text = raw.strip()
    offset = _json_offset(text) if text.startswith("{") else None
    if offset is None:
        return None
    name = offset[0]
    return {name: parse_offset(text, display, words, name)}


def parse_per_stream(raw: str, display: str, words: tuple[str, ...]) -> dict[str, str | int] | None:
    """A JSON object of offsets per stream (``{"A": 5, "B": "earliest"}``); None if not one.

    Also takes a multi-stream checkpoint offset (``{"streams": {"A": {"seq": 5, ...}}}``).
    """
    text = raw.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidOptionError(
            f"option {display!r}: not valid JSON ({raw!r}); expected e.g. "
            f'{{"ORDERS-0": 1001, "ORDERS-1": "{words[0]}"}}'
        ) from None
    if not isinstance(value, dict) or {"stream", "seq"} <= value.keys():
        return None  # a single stream's checkpoint offset: parse_offset() reads it
    if set(value) == {"streams"} and isinstance(value["streams"], dict):
        value = {k: v.get("seq") if isinstance(v, dict) else v for k, v in value["streams"].items()}
    result: dict[str, str | int] = {}
    for name, seq in value.items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise InvalidOptionError(f"option {display!r}: invalid stream name {name!r}")
        if isinstance(seq, str) and seq.strip().lower() in words:
            result[name] = seq.strip().lower()
        elif isinstance(seq, int) and not isinstance(seq, bool) and 1 <= seq <= MAX_SEQUENCE:
            result[name] = seq
        else:
            allowed = " | ".join(words)
            raise InvalidOptionError(
                f"option {display!r}: stream {name!r}: expected {allowed} or a stream "
                f"sequence from 1 to 2**64 - 1 (the server's uint64), got {shown(str(seq))}"
            )
    return result


def parse_timestamp(raw: str | None, display: str) -> datetime | None:
    """An ISO-8601 time (UTC unless it says otherwise) or epoch milliseconds, as Kafka takes."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if text.isascii() and text.isdigit():
        try:
            value = _EPOCH + timedelta(milliseconds=int(text) if len(text) <= 40 else 10**40)
        except OverflowError:
            raise InvalidOptionError(
                f"option {display!r}: {shown(text)} epoch milliseconds is out of range: "
                f"the server's clock runs from {_TIME_RANGE}"
            ) from None
    else:
        try:
            value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidOptionError(
                f"option {display!r}: expected an ISO-8601 time such as 2026-01-31T12:00:00Z "
                f"or epoch milliseconds such as 1769860800000, got {shown(raw)}"
            ) from None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
    try:
        ns = (value - _EPOCH) // timedelta(microseconds=1) * 1_000
    except OverflowError:
        ns = MAX_TIME_NS + 1
    if not MIN_TIME_NS <= ns <= MAX_TIME_NS:
        # The server reads a time as int64 nanoseconds since 1970 and wraps one outside:
        # 9999-12-31 as startingTimestamp read every row instead of none.
        raise InvalidOptionError(
            f"option {display!r}: {value.isoformat()} is out of range: the server counts "
            f"time in int64 nanoseconds since 1970, from {_TIME_RANGE}"
        )
    return value


def parse_duration(options: Mapping[str, str], key: str, display: str, default: float) -> float:
    """Seconds from ``"15m"``, ``"30s"``, ``"500ms"``, ``"15min"`` or a plain number."""
    return parse_positive_float(options, key, display, default)

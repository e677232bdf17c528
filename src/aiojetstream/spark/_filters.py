"""Filter push-down of the ``jetstream`` batch source (Spark >= 4.1), pure.

Spark offers a source the filters of a query (``pushFilters``, when
``spark.sql.python.filterPushdown.enabled=true``); the ones a source takes it
does not evaluate again. These narrow what is read instead of reading the
whole range:

* ``subject = 'a.b'``, ``subject IN (...)``: the read consumers' subject filters
  (taken: the server filters exactly);
* ``subject LIKE 'a.b.%'``: the filter ``a.b.>`` (taken); a prefix not ending at a
  token (``LIKE 'a.b%'``) narrows to ``a.>`` and is left to Spark too;
* ``seq =``, ``>``, ``>=``, ``<``, ``<=`` (taken) and ``seq IN (...)`` (narrows to
  its smallest and largest, left to Spark);
* ``stream =`` / ``IN`` (taken), for ``streams`` / ``streamPattern`` reads;
* ``timestamp >=`` / ``>``: the read starts at the first message stored at or
  after that time less :data:`CLOCK_MARGIN` (left to Spark, which checks each
  row's exact time). The margin: a stream's messages are stamped by its
  leader's clock, so after a leader change to a node whose clock is behind, a
  later message can carry an earlier time.

A filter is recognised by its class name and attributes, so this module needs
no pyspark (Spark 4.0 has no filter classes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

__all__ = ["CLOCK_MARGIN", "Narrowing", "push", "subject_matches"]

#: The most literal subjects pushed as consumer filters (more are left to Spark).
MAX_SUBJECTS: Final = 256
#: How far before a pushed ``timestamp >=`` the read starts (clock differences
#: between the nodes that stamped the messages).
CLOCK_MARGIN: Final = timedelta(seconds=60)
#: The server's clock: int64 nanoseconds since 1970 (whole microseconds inside it).
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EARLIEST: Final = _EPOCH - timedelta(microseconds=2**63 // 1_000)
_LATEST: Final = _EPOCH + timedelta(microseconds=(2**63 - 1) // 1_000)


@dataclass(frozen=True, slots=True)
class Narrowing:
    """What pushed filters allow: a subset of what the options select."""

    #: Subject filters for the read consumers; None leaves the ``subject`` option's.
    subjects: tuple[str, ...] | None = None
    #: Sequences ``[lo, hi)``; None for no bound.
    lo: int | None = None
    hi: int | None = None
    #: The earliest message time that can match.
    after: datetime | None = None
    #: The streams that can match; None for all.
    streams: frozenset[str] | None = None
    #: Whether no row can match (contradictory filters).
    empty: bool = False
    #: The filters taken, for ``repr`` and tests.
    taken: tuple[str, ...] = field(default=(), compare=False)


def _literal(subject: object) -> bool:
    """Whether ``subject`` is a subject without wildcards (a consumer filter matching itself)."""
    if not isinstance(subject, str) or not subject or len(subject) > 1024:
        return False
    tokens = subject.split(".")
    return all(t and t not in ("*", ">") and not any(c.isspace() for c in t) for t in tokens)


def subject_matches(subject: str, pattern: str) -> bool:
    """Whether the literal ``subject`` matches the filter ``pattern`` (``*`` and ``>``).

    (The library's own check is private: an extension uses the public API only.)
    """
    tokens, wanted = subject.split("."), pattern.split(".")
    for i, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > i
        if i >= len(tokens) or (token != "*" and token != tokens[i]):
            return False
    return len(tokens) == len(wanted)


def _column(flt: Any) -> str | None:
    attribute = getattr(flt, "attribute", None)
    if isinstance(attribute, tuple) and len(attribute) == 1 and isinstance(attribute[0], str):
        return attribute[0].lower()
    return None


def _seq(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _aware(value: object) -> datetime | None:
    """A time with its zone (Spark sends ``timestamp`` literals so); a naive one is not pushed."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    return None


def push(filters: Sequence[Any], option_subjects: tuple[str, ...]) -> tuple[Narrowing, list[Any]]:
    """The narrowing ``filters`` allow and the filters Spark must still evaluate.

    ``option_subjects``: the ``subject`` option's filters; pushed subjects must
    match one of them (a prefix is then left to Spark without narrowing).
    """
    literals: set[str] | None = None
    prefixes: list[str] = []
    lo: int | None = None
    hi: int | None = None
    after: datetime | None = None
    streams: set[str] | None = None
    left: list[Any] = []
    taken: list[str] = []
    late = False

    def low(value: int) -> None:
        nonlocal lo
        lo = value if lo is None else max(lo, value)

    def high(value: int) -> None:
        nonlocal hi
        hi = value if hi is None else min(hi, value)

    for flt in filters:
        kind, column = type(flt).__name__, _column(flt)
        value = getattr(flt, "value", None)
        values: list[Any] = list(value) if isinstance(value, (list, tuple, set, frozenset)) else []
        took = True
        if column == "subject" and kind == "EqualTo" and _literal(value):
            literals = {str(value)} if literals is None else literals & {str(value)}
        elif (
            column == "subject"
            and kind == "In"
            and 0 < len(values) <= MAX_SUBJECTS
            and all(_literal(v) for v in values)
        ):
            literals = set(values) if literals is None else literals & set(values)
        elif column == "subject" and kind == "StringStartsWith" and isinstance(value, str):
            head, dot, _rest = value.rpartition(".")
            if not dot or not _literal(head) or option_subjects:
                took = False  # nothing a subject filter can say, or the option decides
            else:
                prefixes.append(head + ".")
                took = not _rest  # "a.b." is exact; "a.b.c" (a partial token) narrows only
        elif (
            column == "seq"
            and kind
            in ("EqualTo", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual")
            and _seq(value) is not None
        ):
            seq = int(value)  # type: ignore[arg-type]
            if kind in ("EqualTo", "GreaterThanOrEqual"):
                low(seq)
            if kind == "GreaterThan":
                low(seq + 1)
            if kind in ("EqualTo", "LessThanOrEqual"):
                high(seq + 1)
            if kind == "LessThan":
                high(seq)
        elif column == "seq" and kind == "In":
            seqs = [s for v in values if (s := _seq(v)) is not None]
            if seqs and len(seqs) == len(values):
                low(min(seqs))
                high(max(seqs) + 1)
            took = False
        elif column == "timestamp" and kind in ("GreaterThan", "GreaterThanOrEqual"):
            when = _aware(value)
            if when is not None and when > _LATEST:
                late = True  # past the server's clock: no message is stamped so late
            elif when is not None and when - _EARLIEST > CLOCK_MARGIN:
                # (else before the server's clock, margin and all: every message is later)
                when -= CLOCK_MARGIN
                after = when if after is None else max(after, when)
            took = False
        elif column == "stream" and kind == "EqualTo" and isinstance(value, str):
            streams = {value} if streams is None else streams & {value}
        elif (
            column == "stream"
            and kind == "In"
            and values
            and all(isinstance(v, str) for v in values)
        ):
            streams = set(values) if streams is None else streams & set(values)
        else:
            took = False
        if took:
            taken.append(repr(flt))
        else:
            left.append(flt)

    subjects: tuple[str, ...] | None = None
    empty = late
    if literals is not None:
        chosen = {s for s in literals if all(s.startswith(p) for p in prefixes)}
        if option_subjects:
            chosen = {s for s in chosen if any(subject_matches(s, f) for f in option_subjects)}
        subjects = tuple(sorted(chosen))
        empty = not chosen
    elif prefixes:
        longest = max(prefixes, key=len)
        if all(longest.startswith(p) for p in prefixes):
            subjects = (longest + ">",)
        else:
            empty = True  # two prefixes no subject has both of
    if lo is not None and hi is not None and hi <= lo:
        empty = True
    if streams is not None and not streams:
        empty = True
    return (
        Narrowing(
            subjects=subjects,
            lo=lo,
            hi=hi,
            after=after,
            streams=None if streams is None else frozenset(streams),
            empty=empty,
            taken=tuple(taken),
        ),
        left,
    )

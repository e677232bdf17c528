"""Streaming offsets of the ``jetstream`` source and the admission-control arithmetic (pure).

An offset holds, for every stream read, the next sequence to read and when
the stream was created (which tells a stream deleted and created again from
the one the offset is of). Its JSON form depends on how the streams are named:

* ``stream``: ``{"stream": "ORDERS", "seq": 1001, "created": "..."}``, the
  form every checkpoint written before multi-stream reads holds;
* ``streams`` / ``streamPattern``: ``{"streams": {"ORDERS-0": {"seq": 1001,
  "created": "..."}, ...}}``.

A micro-batch's end offset also holds, as ``"from"``, where the batch starts
in each stream (see :class:`Position`).

Either form is read by either kind of query as long as it names streams the
query reads, so a single-stream checkpoint can be continued by a query that
names the same stream with ``streams``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiojetstream import InvalidOptionError

from ._options import SourceOptions

__all__ = ["Position", "allot", "decode", "encode"]


@dataclass(frozen=True, slots=True)
class Position:
    """Where a stream's reading stands: the next sequence, and the stream's creation time.

    ``start``: in a micro-batch's end offset, where that batch starts in this
    stream. Spark replays a batch from the previous batch's end, except for a
    first batch that never committed: it asks for the initial offset again,
    which has moved when it was ``latest``. The batch's own start, kept in its
    end offset, makes the replay read the same range.
    """

    seq: int
    created: str | None = None
    start: int | None = None

    def same_place(self, other: Position | None) -> bool:
        """Whether ``other`` is at the same sequence of the same stream (``start`` aside)."""
        return other is not None and (self.seq, self.created) == (other.seq, other.created)


def encode(opts: SourceOptions, positions: Mapping[str, Position]) -> dict[str, Any]:
    """The JSON-able offset of ``positions`` in the form the query's options call for."""
    if opts.stream is not None:
        position = positions.get(opts.stream, Position(1))
        return {"stream": opts.stream, **_fields(position)}
    return {"streams": {name: _fields(p) for name, p in sorted(positions.items())}}


def _fields(position: Position) -> dict[str, Any]:
    fields: dict[str, Any] = {"seq": position.seq, "created": position.created}
    if position.start is not None:
        fields["from"] = position.start
    return fields


def decode(opts: SourceOptions, offset: Mapping[str, Any]) -> dict[str, Position]:
    """The positions of an offset in either form.

    Raises:
        InvalidOptionError: the offset names a stream the query does not read (a
            checkpoint of another query), or is not an offset of this source.

    """
    if "streams" in offset and isinstance(offset["streams"], Mapping):
        items = [(name, value) for name, value in offset["streams"].items()]
    elif "stream" in offset and "seq" in offset:
        items = [(offset["stream"], offset)]
    else:
        raise InvalidOptionError(
            f"the checkpoint holds an offset that is not one of format('jetstream'): {offset!r}"
        )
    positions: dict[str, Position] = {}
    for name, value in items:
        if not isinstance(name, str) or not opts.matches(name):
            raise InvalidOptionError(
                f"the checkpoint holds offsets of stream {name!r}, which this query does not "
                f"read ({opts.selection()}): use a new checkpoint location"
            )
        seq = value.get("seq") if isinstance(value, Mapping) else None
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise InvalidOptionError(f"the checkpoint's offset of stream {name!r} is invalid")
        created = value.get("created")
        start = value.get("from")
        positions[name] = Position(
            seq,
            created if isinstance(created, str) else None,
            start
            if isinstance(start, int) and not isinstance(start, bool) and start >= 1
            else None,
        )
    return positions


def allot(
    ranges: Mapping[str, tuple[int, int]],
    *,
    max_rows: int | None = None,
    max_bytes: int | None = None,
    sizes: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """The end of each stream's range ``[lo, hi)`` under a per-trigger cap (Kafka's way).

    ``max_rows`` caps the sequences of the whole trigger; ``max_bytes`` caps it
    by the streams' average message sizes (``sizes``, bytes; an estimate). The
    cap is shared in proportion to what each stream has waiting. As in Spark's
    Kafka source ("Don't completely starve small topicpartitions"), a stream
    with something waiting whose share is below one sequence gets one: no
    stream waits for ever beside a busy one. The others get their shares
    rounded down, the largest remainders rounding up, so the ends add up to
    exactly the cap (or all of it) unless those ones add up to more: then the
    trigger reads more than the cap, at most one more per stream whose share
    was below one, as Kafka's does. A trigger always gets at least one
    sequence when any is waiting.
    """
    waiting = {name: max(0, hi - lo) for name, (lo, hi) in ranges.items()}
    total = sum(waiting.values())
    cap = total if max_rows is None else min(total, max_rows)
    if max_bytes is not None and total:
        size_of = sizes or {}
        estimate = sum(n * max(1, size_of.get(name, 1)) for name, n in waiting.items())
        if estimate > max_bytes:
            cap = min(cap, max(1, total * max_bytes // estimate))
    if cap >= total:
        return {name: hi if hi > lo else lo for name, (lo, hi) in ranges.items()}
    take = {name: n * cap // total for name, n in waiting.items()}
    # Shares of one or more round down, the largest remainders up; one below one is one.
    whole = [name for name, share in take.items() if share]
    for name, n in waiting.items():
        if n and not take[name]:
            take[name] = 1
    short = cap - sum(take.values())  # (fewer than the streams in whole)
    for name in sorted(whole, key=lambda k: (-(waiting[k] * cap % total), k))[: max(0, short)]:
        take[name] += 1
    return {name: lo + take[name] for name, (lo, _hi) in ranges.items()}

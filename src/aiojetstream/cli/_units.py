"""Parsing and showing durations, sizes and times on the command line."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Final

import typer

__all__ = [
    "format_age",
    "format_bytes",
    "format_limit",
    "format_duration",
    "format_rate",
    "format_time",
    "parse_duration",
    "parse_marker_ttl",
    "parse_payload_size",
    "parse_size",
    "parse_ttl",
    "parse_wait",
]


def parse_duration(text: str | timedelta) -> timedelta:
    """Parse ``30`` (seconds), ``1.5``, ``500ms``, ``90s``, ``1h30m``, ``2d`` or ``1w``.

    The library's one syntax (``aiojetstream.parse_duration``): Go's duration
    units (``ns``, ``us``, ``ms``, ``s``, ``m``, ``h``) plus ``d`` (24 h) and
    ``w`` (7 d); a bare number is seconds. The message of a bad one is the
    library's.

    Raises:
        typer.BadParameter: the text is not a duration, is negative, or is too
            long for a ``timedelta``.

    """
    if isinstance(text, timedelta):  # a default value
        return text
    import aiojetstream  # (its models load pydantic: on first use, not for --help)

    try:
        return aiojetstream.parse_duration(text)
    except aiojetstream.InvalidOptionError as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_wait(text: str | float) -> float:
    """A wait in seconds (``--timeout``, ``--idle``): a duration as :func:`parse_duration` reads it.

    ``5`` and ``1.5`` stay seconds; ``500ms``, ``2m`` and ``1h`` are taken as
    everywhere else (the library's ``timeout=`` takes the same forms). From 1 ms
    to what the server's nanosecond fields hold.

    Raises:
        typer.BadParameter: not a duration, or out of that range.

    """
    if isinstance(text, int | float):  # a default value
        return float(text)
    from . import MAX_WAIT

    seconds = parse_duration(text).total_seconds()
    if not 0.001 <= seconds <= MAX_WAIT:
        raise typer.BadParameter(f"a wait of 1 ms to {MAX_WAIT} s (about 292 years), got {text!r}")
    return seconds


def parse_marker_ttl(text: str | timedelta) -> timedelta:
    """How long a delete marker lives: a duration of at least 1 second (ADR-43, ADR-48).

    The library and the server refuse a shorter one (leave the option out for
    no markers); refused here, it is a usage error like any duration that is
    not one (it exited with 1).

    Raises:
        typer.BadParameter: not a duration, or under 1 second.

    """
    ttl = parse_duration(text)
    if ttl < timedelta(seconds=1):
        raise typer.BadParameter(
            f"a marker TTL must be at least 1 second, got {text!r} (leave the option out "
            "for no markers)"
        )
    return ttl


def parse_ttl(text: str | None) -> str | None:
    """A message TTL: a duration as :func:`parse_duration` reads it, or ``never``.

    Returns what the library sends: ``"never"``, or whole seconds (``"3600"``);
    a fraction of a second is dropped, as the server does (ADR-43). The library
    reads it (``parse_duration(text, ttl=True)``), so its messages are the
    library's.

    Raises:
        typer.BadParameter: neither a duration nor ``never``, or under 1 second
            (the library's and the server's minimum).

    """
    if text is None:
        return None
    import aiojetstream

    try:
        ttl = aiojetstream.parse_duration(text, ttl=True)
    except aiojetstream.InvalidTTLError as exc:
        raise typer.BadParameter(str(exc)) from None
    return "never" if ttl is None else str(int(ttl.total_seconds()))


_SIZE: Final = re.compile(r"(\d+(?:\.\d*)?)\s*([kmgt]?)(i?)(b?)", re.IGNORECASE)
_SIZE_POWERS: Final = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(text: str | int) -> int:
    """Parse a size in bytes: ``512``, ``64KiB``, ``10MB``, ``1G``.

    ``KB``, ``MB``, ``GB``, ``TB`` are powers of 1000; ``KiB``, ``MiB``, ...
    and the bare letters ``K``, ``M``, ``G``, ``T`` powers of 1024. ``-1``
    means unlimited.

    Raises:
        typer.BadParameter: the text is not a size.

    """
    if isinstance(text, int):  # a default value
        return text
    value = text.strip()
    if value == "-1":
        return -1
    match = _SIZE.fullmatch(value)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a size (examples: 512, 64KiB, 10MB, 1G)")
    number, prefix, binary, unit_b = match.groups()
    power = _SIZE_POWERS[prefix.lower()]
    if binary and not prefix:
        raise typer.BadParameter(f"{text!r} is not a size (examples: 512, 64KiB, 10MB, 1G)")
    base = 1000 if (prefix and unit_b and not binary) else 1024
    # Exact (a float made 8.2GB 8,199,999,999 bytes); a fraction of a byte is cut.
    whole, _, fraction = number.partition(".")
    whole = whole.lstrip("0") or "0"
    # (Past 30 decimals a fraction changes no byte count; past 40 digits the size is
    # too large anyway, and over 4,300 Python refuses to make an int of the text.)
    size = 1 << 129 if len(whole) > 40 else int(Fraction(f"{whole}.{fraction[:30]}0") * base**power)
    if size.bit_length() > 128:  # (the config's own check names the field's range)
        shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}..."
        raise typer.BadParameter(f"{shown} is too large a size")
    return size


def parse_payload_size(text: str | int) -> int:
    """:func:`parse_size` for an amount of bytes to send: ``-1`` (unlimited) is refused.

    Raises:
        typer.BadParameter: the text is not a size, or is negative.

    """
    size = parse_size(text)
    if size < 0:
        raise typer.BadParameter(f"{text!r} is negative: give a size of 0 or more bytes")
    return size


def parse_chunk_size(text: str | int) -> int:
    """:func:`parse_size` for a chunk of an object: at least 1 byte (``0``, ``-1`` refused).

    Raises:
        typer.BadParameter: the text is not a size, or is under 1 byte.

    """
    size = parse_size(text)
    if size < 1:
        raise typer.BadParameter(f"{text!r} is not a chunk size: give 1 byte or more")
    return size


def format_bytes(size: int | float) -> str:
    """``1536`` -> ``1.5 KiB``; ``-1`` -> ``unlimited``."""
    if size < 0:
        return "unlimited"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


_UNIT_POWERS = {"B": 0, "KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4}


def format_limit(size: int | None) -> str:
    """A size limit: ``1.0 MiB``, or ``9.5 MiB (10,000,000 bytes)`` when that is not exact.

    None or negative (``-1``) is ``unlimited``.
    """
    if size is None or size < 0:
        return "unlimited"
    text = format_bytes(size)
    number, unit = text.split()
    if float(number) * 1024 ** _UNIT_POWERS[unit] == size:
        return text
    return f"{text} ({size:,} bytes)"


def format_duration(value: timedelta | None) -> str:
    """``timedelta(seconds=5400)`` -> ``1h30m``; None or zero -> ``-``."""
    if value is None or value <= timedelta(0):
        return "-"
    total = value.total_seconds()
    if total < 1:
        return f"{round(total * 1000, 3):g}ms"
    if total < 60:
        return f"{round(total, 3):g}s"
    parts = []
    days, rest = divmod(round(total), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    for amount, unit in ((days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")):
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def format_age(value: datetime | None, now: datetime | None = None) -> str:
    """How long ago ``value`` was, shortly: ``42s``, ``5m``, ``3h``, ``12d``; None -> ``-``."""
    if value is None:
        return "-"
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    if seconds < 60:
        return f"{max(0, int(seconds))}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    raise AssertionError("unreachable")


def format_time(value: datetime | None) -> str:
    """A timestamp in UTC to the second, saying so: ``2026-01-02 15:04:05 UTC``; None -> ``-``.

    The zone is printed: a time without one is read as local time (``consumer pause``).
    """
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_rate(count: float, seconds: float, unit: str = "msgs/s") -> str:
    """``count`` per second, with thousands separators."""
    if seconds <= 0:
        return "-"
    return f"{count / seconds:,.0f} {unit}"

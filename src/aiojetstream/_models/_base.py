"""Shared machinery of the pydantic models: durations, timestamps, wire helpers.

Two sources of data feed the models and they differ in one way that matters:

* **User input** (``StreamConfig(max_age=30)``, ``max_age="1h30m"``): a bare
  number is a duration in **seconds**, a string a Go duration (or ``d``/``w``,
  see ``aiojetstream._duration``), negative durations are refused and configs
  refuse unknown fields.
* **Server data** (``from_wire(StreamInfo, raw)``): a bare number is a duration in
  **nanoseconds** (what Go's ``time.Duration`` marshals to), negative values are
  accepted (``active: -1`` means "never") and unknown fields are kept, so that a
  config read from a newer server can be updated without losing settings.

The validators tell the two apart through the pydantic validation context:
server data is always validated with ``context=WIRE`` (``from_wire`` does it).

Serialisation (``model_dump(mode="json")`` and :func:`to_wire`) always writes
durations as integer nanoseconds and timestamps in Go's RFC 3339 form
(``2026-11-21T06:24:41.123456789Z``). Python's ``timedelta`` and ``datetime``
stop at microseconds; server values with a sub-microsecond part come back as
:class:`NanoTimedelta` / :class:`NanoDatetime`, subclasses that remember the
extra nanoseconds, so parse -> dump reproduces the server's JSON exactly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Annotated, Any, ClassVar, Final, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    Strict,
    ValidationInfo,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

from .._bounds import MAX_UINT64, check_config, shown
from .._duration import text_timedelta
from .._errors import InvalidOptionError
from ._docstrings import DOCSTRINGS

__all__ = [
    "WIRE",
    "ConfigModel",
    "construct_checked",
    "DocumentedModel",
    "Duration",
    "NanoDatetime",
    "NanoTimedelta",
    "ResponseModel",
    "Timestamp",
    "WireModel",
    "WireSequence",
    "WireUint64",
    "coerce_duration",
    "duration_to_ns",
    "format_timestamp",
    "from_wire",
    "is_wire",
    "ns_to_duration",
    "parse_timestamp",
    "parse_utc_timestamp",
    "to_wire",
]

WIRE: Final[dict[str, Any]] = {"wire": True}
"""Validation context marking data that comes from the server.

Use it for every server reply: ``Model.model_validate(data, context=WIRE)`` or
``Model.model_validate_json(raw, context=WIRE)`` (or simply :func:`from_wire`).
Do not mutate it.
"""

_NS_PER_US: Final = 1_000
_NS_PER_S: Final = 1_000_000_000
_US_PER_DAY: Final = 86_400 * 1_000_000

M = TypeVar("M", bound=BaseModel)

_new_object = object.__new__
_set_attribute = object.__setattr__


def construct_checked(cls: type[M], values: dict[str, Any]) -> M:
    """An instance of ``cls`` from values the library has already checked, without validation.

    For the per-message paths (a get, a watched revision, a batch's message):
    skips pydantic's validation the way ``model_construct`` does, minus its
    generic field loop. ``values`` must hold every field, with its type, and
    becomes the instance's ``__dict__``; its keys are the fields set. For
    models without extra fields. Unit tests compare each use with a validated
    instance.
    """
    obj = _new_object(cls)
    _set_attribute(obj, "__dict__", values)
    _set_attribute(obj, "__pydantic_fields_set__", set(values))
    _set_attribute(obj, "__pydantic_extra__", None)
    _set_attribute(obj, "__pydantic_private__", None)
    return obj


def is_wire(context: Any) -> bool:
    """Tell whether a validation context (``info.context``) marks server data."""
    return isinstance(context, Mapping) and context.get("wire") is True


# --------------------------------------------------------------------------- durations


class NanoTimedelta(timedelta):
    """A ``timedelta`` that also remembers a sub-microsecond remainder.

    Produced only when a server duration is not a whole number of microseconds
    (e.g. ``pause_remaining``); it behaves as a ``timedelta`` truncated to
    microseconds (comparisons, arithmetic and hashing ignore the remainder, and
    arithmetic returns plain ``timedelta``), while :func:`duration_to_ns` and
    serialisation give back the exact nanosecond count.
    """

    __slots__ = ("_nanoseconds",)
    _nanoseconds: int

    def __new__(cls, *args: Any, nanoseconds: int = 0, **kwargs: Any) -> NanoTimedelta:
        if not 0 <= nanoseconds < _NS_PER_US:
            raise ValueError("nanoseconds must be in 0..999")
        self = super().__new__(cls, *args, **kwargs)
        self._nanoseconds = nanoseconds
        return self

    @property
    def nanoseconds(self) -> int:
        """The nanoseconds below the microsecond (0..999), like pandas' ``Timedelta``."""
        # getattr: C-level constructors (e.g. pickling fallbacks) bypass __new__.
        return getattr(self, "_nanoseconds", 0)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _make_nano_timedelta,
            (self.days, self.seconds, self.microseconds, self.nanoseconds),
        )

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, nanoseconds={self.nanoseconds})"


def _make_nano_timedelta(days: int, seconds: int, microseconds: int, ns: int) -> NanoTimedelta:
    return NanoTimedelta(days, seconds, microseconds, nanoseconds=ns)


def ns_to_duration(ns: int) -> timedelta:
    """Convert integer nanoseconds (Go ``time.Duration``) to a ``timedelta``, exactly.

    Returns a plain ``timedelta`` when ``ns`` is a whole number of microseconds,
    otherwise a :class:`NanoTimedelta` carrying the remainder.
    """
    us, rem = divmod(ns, _NS_PER_US)
    if rem:
        return NanoTimedelta(microseconds=us, nanoseconds=rem)
    return timedelta(microseconds=us)


def duration_to_ns(value: timedelta) -> int:
    """Convert a ``timedelta`` to integer nanoseconds (exact, also for :class:`NanoTimedelta`)."""
    us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    return us * _NS_PER_US + (value.nanoseconds if isinstance(value, NanoTimedelta) else 0)


def coerce_duration(value: timedelta | float | str) -> timedelta:
    """Turn a user duration (seconds, ``timedelta`` or a duration string) into a ``timedelta``.

    A string is ``"1h30m"``, ``"500ms"``, ``"2d"``, ``"90"`` (see ``aiojetstream._duration``),
    exact to the nanosecond (a :class:`NanoTimedelta` below the microsecond).

    Raises:
        ValueError: for negative, infinite or NaN values; an
            :class:`~aiojetstream.InvalidOptionError` (a ``ValueError``) for a
            string that is not a duration, or too long for a ``timedelta``.
        TypeError: for anything else (including ``bool``).

    """
    if isinstance(value, timedelta):
        td = value
    elif isinstance(value, str):
        td = text_timedelta(value, InvalidOptionError)
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            "a duration must be a timedelta, a number of seconds or a string such as "
            f"'1h30m', not {type(value).__name__}"
        )
    else:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"a duration must be finite, got {value!r}")
        try:
            td = timedelta(seconds=value)
        except OverflowError as exc:
            # (shown: the repr of an int of over 4,300 digits raises ValueError itself)
            raise ValueError(f"duration out of range: {shown(value)}") from exc
        if not td and value > 0:
            # Rounded to 0, which the server reads as "unlimited" or its default.
            raise ValueError(
                f"a duration of {value!r} seconds is below a microsecond, the finest a "
                "number of seconds is taken to; give a string such as '400ns' for less"
            )
    if td < timedelta(0):
        raise ValueError(f"a duration can not be negative, got {shown(value)}")
    return td


def _validate_duration(value: Any, info: ValidationInfo) -> Any:
    # pydantic turns ValueError (not TypeError) into a ValidationError.
    if not is_wire(info.context):
        try:
            return coerce_duration(value)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    if isinstance(value, timedelta):
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return ns_to_duration(value)
        except OverflowError:
            raise ValueError(f"duration out of range: {value} ns") from None
    raise ValueError(
        f"a wire duration must be an integer number of nanoseconds, not {type(value).__name__}"
    )


def _serialize_duration(value: Any) -> int:
    if isinstance(value, timedelta):
        return duration_to_ns(value)
    # Only reachable when validation was bypassed (``model_copy(update=...)`` or
    # ``model_construct``): treat a bare number like user input, i.e. seconds.
    return duration_to_ns(coerce_duration(value))


Duration = Annotated[
    timedelta,
    BeforeValidator(_validate_duration),
    PlainSerializer(_serialize_duration, return_type=int, when_used="json"),
    WithJsonSchema({"type": "integer", "description": "duration in nanoseconds"}),
]
"""A duration: ``timedelta`` in Python, integer nanoseconds on the wire.

User input: ``timedelta``, a non-negative number of **seconds**, or a duration
string (``"30s"``, ``"1h30m"``, ``"2d"``; see ``aiojetstream._duration``): a bad
one is a ``ValidationError`` at construction, with the message the library and
the CLI give. Server data (``context=WIRE``): integer **nanoseconds** (negative
allowed).
"""


# --------------------------------------------------------------------------- timestamps


class NanoDatetime(datetime):
    """A ``datetime`` that also remembers a sub-microsecond remainder.

    Produced only when a server timestamp has more than six fractional digits
    that are not all zero. It behaves exactly like the ``datetime`` truncated to
    microseconds (comparisons, hashing, arithmetic, ``isoformat``), while
    :func:`format_timestamp` and serialisation give back all nine digits.
    """

    __slots__ = ("_nanosecond",)
    _nanosecond: int

    def __new__(cls, *args: Any, nanosecond: int = 0, **kwargs: Any) -> NanoDatetime:
        if not 0 <= nanosecond < _NS_PER_US:
            raise ValueError("nanosecond must be in 0..999")
        self = super().__new__(cls, *args, **kwargs)
        self._nanosecond = nanosecond
        return self

    @property
    def nanosecond(self) -> int:
        """The nanoseconds below the microsecond (0..999), like pandas' ``Timestamp``."""
        # getattr: C-level constructors (``replace``, ``astimezone``) bypass __new__.
        return getattr(self, "_nanosecond", 0)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # datetime defines __reduce_ex__ itself, so overriding __reduce__ is not enough.
        return (
            _make_nano_datetime,
            (
                self.year,
                self.month,
                self.day,
                self.hour,
                self.minute,
                self.second,
                self.microsecond,
                self.tzinfo,
                self.nanosecond,
            ),
        )

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, nanosecond={self.nanosecond})"


def _with_nanoseconds(moment: datetime, ns: int) -> NanoDatetime:
    """``moment`` (aware, UTC) as a :class:`NanoDatetime` with ``ns`` (1..999) more nanoseconds.

    Built by ``datetime.__new__`` itself, without the Python-level ``__new__``
    and its keyword argument (half the cost; every server timestamp with
    nanoseconds comes through here).
    """
    self = datetime.__new__(
        NanoDatetime,
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
        UTC,
    )
    self._nanosecond = ns
    return self


def _make_nano_datetime(*args: Any) -> NanoDatetime:
    *fields, ns = args
    return NanoDatetime(*fields, nanosecond=ns)


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)


_RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.(\d{1,9}))?Z")


def parse_utc_timestamp(value: str, fraction: str | None) -> datetime | None:
    """The fast path of :func:`parse_timestamp`, for a value already checked by the caller.

    ``value`` must have the server's form ``YYYY-MM-DDTHH:MM:SS[.fraction]Z``
    (ASCII digits, up to nine fractional ones) and ``fraction`` be its
    fractional digits (None without): the date and time to the microsecond
    come from C-level parsing, the nanoseconds from the fraction. None when
    the date or time is out of range (:func:`parse_timestamp` words that error).
    """
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if fraction is not None and len(fraction) > 6:
        ns = int(fraction[6:].ljust(3, "0"))
        if ns:
            return _with_nanoseconds(moment, ns)
    return moment


class WireOffset(tzinfo):
    """The fixed UTC offset a timestamp was read with, kept to be written back (``+01:00``).

    A ``datetime.timezone`` of its own type, so that the offset survives a copy,
    a deep copy or a pickle (a Spark task's config): :func:`format_timestamp`
    with ``keep_offset`` writes a time in this zone with its offset.
    """

    __slots__ = ("_offset",)

    def __init__(self, offset: timedelta) -> None:
        self._offset = offset

    def utcoffset(self, dt: datetime | None) -> timedelta:
        """The offset (the same at every time)."""
        return self._offset

    def dst(self, dt: datetime | None) -> None:
        """No daylight saving time."""
        return None

    def tzname(self, dt: datetime | None) -> str:
        """``UTC+01:00``, as ``datetime.timezone`` names a fixed offset."""
        return timezone(self._offset).tzname(None)

    def __repr__(self) -> str:
        return f"WireOffset({self._offset!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WireOffset) and other._offset == self._offset

    def __hash__(self) -> int:
        return hash(self._offset)

    def __reduce__(self) -> tuple[Any, ...]:
        return (wire_offset, (self._offset,))


#: The zones of timestamps read with their offset (see parse_timestamp), by offset.
_WIRE_ZONES: dict[timedelta, WireOffset] = {}


def wire_offset(offset: timedelta) -> WireOffset:
    """The :class:`WireOffset` of ``offset`` (one per offset; at most 2,878 of them)."""
    zone = _WIRE_ZONES.get(offset)
    if zone is None:
        zone = _WIRE_ZONES[offset] = WireOffset(offset)
    return zone


def parse_timestamp(value: str, *, keep_offset: bool = False) -> datetime:
    """Parse an RFC 3339 timestamp with up to nine fractional digits into an aware ``datetime``.

    In UTC, or with ``keep_offset`` in the text's own non-zero offset (a fixed
    zone that :func:`format_timestamp` with ``keep_offset`` writes back as it
    was). Handles Go's zero time (``0001-01-01T00:00:00Z``).
    Returns a :class:`NanoDatetime` when the value has a non-zero
    sub-microsecond part.

    Raises:
        ValueError: when ``value`` is not RFC 3339.

    """
    # Fast path for what the server sends (UTC, "Z"): C-level parsing of the
    # date and time to the microsecond, the nanoseconds from the fraction.
    fast = _RFC3339_UTC.fullmatch(value)
    if fast is not None:
        moment = parse_utc_timestamp(value, fast.group(1))
        if moment is not None:
            return moment
        # out of range: the slow path words the error
    m = _RFC3339.fullmatch(value)
    if m is None:
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac = int((m.group(7) or "").ljust(9, "0"))
    us, ns = divmod(frac, _NS_PER_US)
    zone = m.group(8)
    offset = timedelta(0)
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise ValueError(f"invalid timestamp {value!r}: offset out of range")
        offset = sign * timedelta(hours=hours, minutes=minutes)
    try:
        moment = datetime(year, month, day, hour, minute, second, us, tzinfo=UTC) - offset
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"invalid timestamp {value!r}: {exc}") from None
    if keep_offset and offset:
        # In range in UTC (checked above), so in its own offset too. nats-server compares
        # configs with their times' zones (a mirror's opt_start_time on update, an
        # idempotent create): sent back in UTC, one from nats.go with "+01:00" was refused.
        zone_info = wire_offset(offset)
        if ns:
            return NanoDatetime(
                year, month, day, hour, minute, second, us, zone_info, nanosecond=ns
            )
        return datetime(year, month, day, hour, minute, second, us, tzinfo=zone_info)
    if ns:
        return NanoDatetime(
            moment.year,
            moment.month,
            moment.day,
            moment.hour,
            moment.minute,
            moment.second,
            moment.microsecond,
            UTC,
            nanosecond=ns,
        )
    return moment


def format_timestamp(value: datetime, *, keep_offset: bool = False) -> str:
    """Format an aware ``datetime`` the way Go marshals ``time.Time`` (RFC 3339).

    In UTC (``Z``); with ``keep_offset``, a time :func:`parse_timestamp` read
    with its offset (``keep_offset``) is written in that offset (``+01:00``),
    as Go writes a time in a fixed zone: a config read from the server goes
    back as it came. The fraction has up to nine digits with trailing zeros removed
    (none at all when zero), so server timestamps are reproduced byte for byte.

    Raises:
        ValueError: for a naive ``datetime``.

    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("a timestamp must be timezone-aware")
    ns = value.nanosecond if isinstance(value, NanoDatetime) else 0
    zone = "Z"
    offset = value.utcoffset()
    if offset:
        minutes, rest = divmod(offset, timedelta(minutes=1))
        if keep_offset and not rest and isinstance(value.tzinfo, WireOffset):
            sign = "-" if minutes < 0 else "+"
            zone = f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
        else:
            value = value.astimezone(UTC)
    frac = value.microsecond * _NS_PER_US + ns
    text = (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        f"T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    )
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + zone


def _validate_timestamp(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, str):
        return parse_timestamp(value, keep_offset=True)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                "a naive datetime is ambiguous: pass a timezone-aware one "
                "(e.g. datetime.now(datetime.UTC))"
            )
        return value
    raise ValueError(
        f"a timestamp must be a timezone-aware datetime or an RFC 3339 string, "
        f"not {type(value).__name__}"
    )


def _serialize_timestamp(value: datetime) -> str:
    return format_timestamp(value, keep_offset=True)


Timestamp = Annotated[
    datetime,
    BeforeValidator(_validate_timestamp),
    PlainSerializer(_serialize_timestamp, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A timezone-aware ``datetime``; RFC 3339 with up to nanosecond precision on the wire."""

WireUint64 = Annotated[int, Strict(), Field(ge=0, le=MAX_UINT64)]
"""A sequence or a count of a server reply: a JSON integer from 0 to 2**64 - 1.

What a Go ``uint64`` (or a count that is never negative) holds: a string, a
float, a bool or a number out of range does not validate (the reply is
refused as invalid, as nats.go's ``json.Unmarshal`` refuses it). Not for
limits and durations, where the server sends -1.
"""

WireSequence = Annotated[int, Strict(), Field(ge=1, le=MAX_UINT64)]
"""The sequence of a stored message in a server reply: a JSON integer from 1 to 2**64 - 1."""


# --------------------------------------------------------------------------- attribute docstrings


_MODULE_DOCSTRINGS: dict[str, dict[str, dict[str, str]]] = {}


def attribute_docstrings(cls: type) -> dict[str, str]:
    """The attribute docstrings of a module-level class, by attribute name.

    The same as pydantic's ``use_attribute_docstrings`` finds. The package's
    models take them from the generated table of ``_docstrings`` (importing
    them parses no source; a unit test keeps the table current); a class of
    any other module has its module's source parsed, once per module (see
    ``_docgen``). Empty when the source is unavailable.
    """
    name = cls.__module__
    classes = _MODULE_DOCSTRINGS.get(name)
    if classes is None:
        classes = DOCSTRINGS.get(name)
        if classes is None:
            from ._docgen import module_docstrings

            classes = module_docstrings(name)
        _MODULE_DOCSTRINGS[name] = classes
    if cls.__qualname__ != cls.__name__:
        return {}  # not a module-level class
    return classes.get(cls.__name__, {})


class DocumentedModel(BaseModel):
    """Base of the public models: field descriptions come from attribute docstrings.

    Equivalent to ``use_attribute_docstrings=True`` (see
    :func:`attribute_docstrings`); validators and serializers are built on first
    use (``defer_build``), so importing the package builds none.
    """

    model_config = ConfigDict(defer_build=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        docs = attribute_docstrings(cls)
        if docs:
            for name, field in cls.model_fields.items():
                if field.description is None and name in docs:
                    field.description = docs[name]


# --------------------------------------------------------------------------- base models


class WireModel(DocumentedModel):
    """Base of every model: serialises like the server's Go structs.

    A field listed in ``_omit_if_unset`` (computed per class, see
    :meth:`_omittable`) is left out of dumps when it was not explicitly given
    and still holds its default, the way Go's ``omitempty`` leaves zero values
    out. That keeps a server reply byte-identical through parse -> dump and
    keeps fields an older server does not know off the wire.
    """

    _omit_if_unset: ClassVar[dict[str, Any]] = {}
    """Field name -> default, for the fields left out of dumps when unset and default."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        omit = {}
        for name, field in cls.model_fields.items():
            if field.is_required():
                continue
            default = field.get_default(call_default_factory=True)
            if cls._omittable(default):
                omit[name] = default
        cls._omit_if_unset = omit

    @classmethod
    def _omittable(cls, default: Any) -> bool:
        """Tell whether an unset field with this default is left out of dumps."""
        return False

    @model_serializer(mode="wrap")
    def _omit_unset_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        omit = self._omit_if_unset
        if omit and isinstance(data, dict):
            fields_set = self.model_fields_set
            for name, default in omit.items():
                if name not in fields_set and name in data and getattr(self, name) == default:
                    del data[name]
        return data


class ResponseModel(WireModel):
    """Base of server replies: unknown fields are always kept (``extra="allow"``).

    Fields the server did not send are not written back by dumps, so
    ``to_wire(from_wire(Model, data)) == data``.
    """

    model_config = ConfigDict(extra="allow")

    @classmethod
    def _omittable(cls, default: Any) -> bool:
        return default is not None


class ConfigModel(WireModel):
    """Base of user-facing configs: frozen, strict about unknown fields for user input.

    Unknown fields raise a ``ValidationError`` when a user builds a config, but
    are kept (and written back by :func:`to_wire`) when the data comes from the
    server (``context=WIRE``), so a config read from a newer server survives a
    get-modify-update cycle. Boolean flags default to ``False`` and are only
    sent when explicitly set (or ``True``), so a plain config never carries a
    flag an older server would reject as unknown.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    @classmethod
    def _omittable(cls, default: Any) -> bool:
        return default is False

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_fields(cls, data: Any, info: ValidationInfo) -> Any:
        if is_wire(info.context) or not isinstance(data, Mapping):
            return data
        unknown = [key for key in data if key not in cls.model_fields]
        if unknown:
            import difflib  # only for the error

            hints = []
            for key in unknown:
                close = difflib.get_close_matches(str(key), cls.model_fields, n=1)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ValueError(f"unknown field(s) for {cls.__name__}: {', '.join(hints)}")
        return data


# --------------------------------------------------------------------------- wire helpers


def to_wire(model: BaseModel) -> dict[str, Any]:
    """Return the JSON-ready dict to send to the server for ``model``.

    Durations become integer nanoseconds, timestamps RFC 3339 strings, ``None``
    fields are left out, unknown fields kept from the server are included.

    A config (:class:`ConfigModel`) is checked first, being about to be sent:
    its names (a stream's, a mirror's, a source's, a consumer's) and the
    range of its int fields (sequences 0 to 2**64 - 1, counts 64-bit), which
    the models themselves leave to this point so that each is reported as the
    library's error rather than pydantic's (see ``_bounds.check_config``).

    Raises:
        InvalidNameError: a name in the config is invalid.
        InvalidOptionError: an int field is out of the server's range.

    """
    if isinstance(model, ConfigModel):
        check_config(model)
    return model.model_dump(mode="json", exclude_none=True, by_alias=True)


def from_wire(cls: type[M], data: Mapping[str, Any] | bytes | bytearray | str) -> M:
    """Validate server data (a decoded dict or raw JSON) into ``cls`` with the ``WIRE`` context.

    Raises:
        pydantic.ValidationError: when the data does not fit the model.

    """
    if isinstance(data, bytes | bytearray | str):
        return cls.model_validate_json(data, context=WIRE)
    return cls.model_validate(data, context=WIRE)

"""ADR-43 stream settings: the rules for ``allow_msg_ttl`` and ``subject_delete_marker_ttl``.

Pure functions only: nothing here touches the network. ``JetStreamContext``
calls them before it sends a stream create or update request, so a config that
breaks a rule never reaches the server:

* :func:`check_stream_config`: ``subject_delete_marker_ttl`` is at least
  1 second when set (zero and negative values are refused, ``None`` means
  unset), ends before the server's clock does (2262-04-11, less a day, counted
  from now) and is not allowed on a mirror.
* :func:`check_api_level`: either setting (and ``pedantic``) needs JetStream
  API level >= 1, i.e. nats-server >= 2.11.
* :func:`check_not_disabling`: ``allow_msg_ttl`` can be turned on for an
  existing stream, never off.
* :func:`apply_ttl_defaults`: unless in pedantic mode, either setting turns on
  ``allow_rollup_hdrs`` and turns off ``deny_purge`` in what is sent; a marker
  TTL also turns on ``allow_msg_ttl`` (the server does the same).

ADR-43 also says "AllowMsgTTL and SubjectDeleteMarkerTTL have a minimum value
of 1 second". ``allow_msg_ttl`` is a flag, so for it the minimum applies to the
per-message TTLs it allows: :func:`aiojetstream._headers.ttl_header_value`
refuses any ``Nats-TTL`` under 1 second before a publish is sent.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, Final

from ._bounds import shown
from ._duration import text_ns
from ._errors import FeatureNotSupportedError, InvalidStreamConfigError, StreamConfigError
from ._models import StreamConfig
from ._models._ranges import check_from_now

__all__ = [
    "MIN_MARKER_TTL",
    "TTL_API_LEVEL",
    "TTL_SERVER_VERSION",
    "apply_ttl_defaults",
    "check_api_level",
    "check_not_disabling",
    "check_stream_config",
    "may_disable_msg_ttl",
    "request_body",
    "uses_ttl_settings",
]

MIN_MARKER_TTL: Final = timedelta(seconds=1)
"""The smallest ``subject_delete_marker_ttl`` (ADR-43)."""

TTL_API_LEVEL: Final = 1
"""The JetStream API level that brings per-message TTLs, markers and pedantic mode."""

TTL_SERVER_VERSION: Final = "2.11"
"""The first nats-server release with :data:`TTL_API_LEVEL`."""


def uses_ttl_settings(config: StreamConfig) -> bool:
    """Tell whether ``config`` sets ``allow_msg_ttl`` or ``subject_delete_marker_ttl``."""
    return bool(config.allow_msg_ttl) or config.subject_delete_marker_ttl is not None


def _seconds(value: object) -> float:
    """A marker TTL in seconds; refuses anything that is not a duration."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):  # (set with model_copy(update=...), unvalidated)
        return text_ns(value, InvalidStreamConfigError, what="subject_delete_marker_ttl") / 1e9
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # a giant int: past any duration the server holds
            return math.inf
    raise InvalidStreamConfigError(
        "subject_delete_marker_ttl must be a duration (timedelta, seconds or a string such "
        f"as '1h'), got {shown(value)}"
    )


def check_stream_config(config: StreamConfig) -> None:
    """Check the ADR-43 rules that depend on ``config`` alone.

    Raises:
        InvalidStreamConfigError: ``subject_delete_marker_ttl`` is set under
            1 second (zero and negative included), runs past the end of the
            server's clock counted from now (a marker would expire at once), or
            is set on a mirror.

    """
    marker_ttl = config.subject_delete_marker_ttl
    if marker_ttl is None:
        return
    seconds = _seconds(marker_ttl)
    if not seconds >= MIN_MARKER_TTL.total_seconds():  # also catches NaN
        raise InvalidStreamConfigError(
            f"subject_delete_marker_ttl must be at least 1 second, got {shown(marker_ttl)} "
            "(leave it None to turn markers off)"
        )
    # A marker's TTL is counted from when it is written: past the end of the server's
    # clock it wraps into the past and the marker expired at once.
    check_from_now(seconds, "subject_delete_marker_ttl", InvalidStreamConfigError)
    if config.mirror is not None:
        raise InvalidStreamConfigError(
            f"stream {config.name!r}: subject_delete_marker_ttl is not allowed on a mirror "
            "(markers would be new messages, breaking the mirror's sequences); "
            "a stream that sources instead of mirroring may set it"
        )


def check_api_level(config: StreamConfig, level: int, *, pedantic: bool = False) -> None:
    """Check that a server at JetStream API ``level`` supports what ``config`` asks for.

    Raises:
        FeatureNotSupportedError: ``allow_msg_ttl``, ``subject_delete_marker_ttl``
            or ``pedantic`` is used and ``level`` is below 1 (nats-server < 2.11).

    """
    if level >= TTL_API_LEVEL:
        return
    if config.subject_delete_marker_ttl is not None:
        feature = "subject_delete_marker_ttl"
    elif config.allow_msg_ttl:
        feature = "allow_msg_ttl"
    elif pedantic:
        feature = "pedantic mode"
    else:
        return
    raise FeatureNotSupportedError(feature, TTL_API_LEVEL, level, TTL_SERVER_VERSION)


def apply_ttl_defaults(config: StreamConfig, *, pedantic: bool = False) -> StreamConfig:
    """Return the config to send: ADR-43 companions filled in unless ``pedantic``.

    When ``allow_msg_ttl`` or ``subject_delete_marker_ttl`` is set, the result
    has ``allow_rollup_hdrs=True`` and ``deny_purge=False``; a marker TTL also
    sets ``allow_msg_ttl=True``. Other configs, and any config in pedantic mode,
    are returned unchanged (the same object).
    """
    if pedantic or not uses_ttl_settings(config):
        return config
    update: dict[str, Any] = {}
    if not config.allow_rollup_hdrs:
        update["allow_rollup_hdrs"] = True
    if config.deny_purge:
        update["deny_purge"] = False
    if config.subject_delete_marker_ttl is not None and not config.allow_msg_ttl:
        update["allow_msg_ttl"] = True
    return config.model_copy(update=update) if update else config


def note_deny_purge_refusal(
    error: StreamConfigError, sent: StreamConfig, *, pedantic: bool = False
) -> None:
    """Say what to do when the server refused the ``deny_purge=False`` this module sent.

    nats-server never lets ``deny_purge`` be turned off (10052 "can not cancel
    deny purge"); a TTL stream made by another client with ``deny_purge=True``
    is then updated with ``pedantic=True``, which sends the config as it is.
    """
    if pedantic or sent.deny_purge or "deny purge" not in error.description.lower():
        return
    if uses_ttl_settings(sent):
        error.add_note(
            "aiojetstream sent deny_purge=False, as ADR-43 asks of a stream with message "
            "TTLs, and the stream has deny_purge=True, which nats-server never turns off: "
            "update it with pedantic=True to send the config as it is"
        )


def may_disable_msg_ttl(config: StreamConfig) -> bool:
    """Tell whether sending ``config`` as an update could turn ``allow_msg_ttl`` off.

    True when the config to send leaves ``allow_msg_ttl`` off: then the current
    config must be read to know whether the update would disable it.
    """
    return not config.allow_msg_ttl


def check_not_disabling(current: StreamConfig, new: StreamConfig) -> None:
    """Refuse an update that turns ``allow_msg_ttl`` off on a stream that has it.

    Raises:
        InvalidStreamConfigError: ``current`` allows per-message TTLs and ``new`` does not.

    """
    if current.allow_msg_ttl and not new.allow_msg_ttl:
        raise InvalidStreamConfigError(
            f"stream {new.name!r} has allow_msg_ttl enabled and it cannot be disabled "
            "(ADR-43): keep allow_msg_ttl=True in the updated config"
        )


def request_body(wire: dict[str, Any], *, pedantic: bool = False) -> dict[str, Any]:
    """The stream create/update request body: the wire config, plus ``"pedantic": true``.

    The server (nats-server >= 2.11) reads a top-level ``pedantic`` field next
    to the config's fields; in pedantic mode it refuses a config it would
    otherwise adjust.
    """
    if not pedantic:
        return wire
    return {**wire, "pedantic": True}

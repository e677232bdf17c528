"""The two paths, fast and fallback: the switch and the choice, once per connection."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import weakref

from .._errors import InvalidOptionError
from ._nats import NatsClient, fast_path_missing

__all__ = ["FAST_PATH_ENV", "choose_path", "fast_path_switched_on"]

logger = logging.getLogger("aiojetstream")

#: The environment variable that switches the fast path off for connections
#: made while it is ``0``, ``false``, ``no`` or ``off`` (see the module docstring).
FAST_PATH_ENV = "AIOJETSTREAM_FAST_PATH"
_FAST_PATH_OFF = frozenset({"0", "false", "no", "off"})
_FAST_PATH_ON = frozenset({"", "1", "true", "yes", "on"})


def fast_path_switched_on() -> bool:
    """Read :data:`FAST_PATH_ENV` (unset or empty: on).

    Raises:
        InvalidOptionError: the variable holds something else than 0/1,
            false/true, no/yes or off/on.

    """
    value = os.environ.get(FAST_PATH_ENV, "").strip().lower()
    if value in _FAST_PATH_OFF:
        return False
    if value in _FAST_PATH_ON:
        return True
    raise InvalidOptionError(
        f"{FAST_PATH_ENV}={value!r}: expected 0/1, false/true, no/yes or off/on"
    )


# The path of each nats-py client, chosen once (and logged once) per connection.
_PATHS: weakref.WeakKeyDictionary[NatsClient, bool] = weakref.WeakKeyDictionary()


def choose_path(nc: NatsClient) -> bool:
    """True for the fast path, False for the fallback; decided once per client.

    Raises:
        InvalidOptionError: :data:`FAST_PATH_ENV` holds an unknown value.

    """
    fast = _PATHS.get(nc)
    if fast is not None:
        return fast
    if not fast_path_switched_on():
        logger.info(
            "fast path switched off by %s=%s: using nats-py's public API",
            FAST_PATH_ENV,
            os.environ.get(FAST_PATH_ENV),
        )
        fast = False
    else:
        missing = fast_path_missing(nc)
        fast = not missing
        if missing:
            logger.info(
                "nats-py %s lacks internals of the fast path (%s): using its public API",
                _nats_version(),
                ", ".join(missing),
            )
        else:
            logger.debug("fast path on (nats-py %s)", _nats_version())
    _PATHS[nc] = fast
    return fast


@functools.cache
def _nats_version() -> str:
    # Cached: a metadata lookup scans site-packages, and every connection logs it.
    try:
        return importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:
        return "(unknown version)"

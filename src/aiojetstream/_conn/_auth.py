"""Credentials refused after the first connection: reconnect, but not for ever.

nats-py closed the client for good, silently (no error callback), on an
``-ERR 'User Authentication Expired'`` (or ``Revoked``, or ``Account
Authentication Expired``) while connected, so a rotated ``.creds`` file was
never used; and it retried credentials refused on a reconnect (a rotated
password, a revoked user) for the whole reconnect budget (for ever with
``max_reconnect_attempts=-1``), ending with a bare ``NoServersError``.

aiojetstream does what nats.go does (``processErr``, ``checkAuthError``,
``processAuthError``):

* a refusal while connected is reported to the error callback, and the
  client reconnects (nats-py reads a ``.creds`` file again on every attempt);
* a server that refuses the credentials with the same error twice in a row
  (a different refusal, or a successful connection, in between starts
  over) is dropped from the reconnect rotation; with none left the client
  closes (nats.go closes at once: it has no other servers' reconnects to
  keep);
* the refusal is kept (:class:`Refusals`): the requests still waiting and
  every later call raise a :class:`ConnectionClosedError` that names it
  (:func:`closed_error`), and nats-py's ``last_error`` is the refusal, not
  ``NoServersError``.

The hooks into nats-py are :func:`~._nats.guard_auth_refusals`.
"""

from __future__ import annotations

import logging
import weakref
from typing import Final

from .._errors import ConnectionClosedError
from .._redact import redact_url
from ._nats import NatsClient, Srv, nats_errors

__all__ = [
    "AUTH_ERRORS",
    "REFUSALS",
    "Refusals",
    "closed_error",
    "closing_reason",
    "is_auth_error",
    "refusal_of",
]

logger = logging.getLogger("aiojetstream")

#: The server's -ERR texts of refused credentials (lower case; nats-py raises them
#: as a plain ``nats.errors.Error``, or ``AuthorizationError`` for the first).
AUTH_ERRORS: Final = (
    "authorization violation",
    "user authentication expired",
    "user authentication revoked",
    "account authentication expired",
)


def refusal_of(text: str) -> str | None:
    """Which refusal of credentials ``text`` (an ``-ERR`` or nats-py's error) is, or None."""
    lowered = text.lower()
    return next((marker for marker in AUTH_ERRORS if marker in lowered), None)


def is_auth_error(exc: BaseException) -> bool:
    """An ``-ERR`` of refused credentials, such as ``'Authorization Violation'``."""
    if isinstance(exc, nats_errors.AuthorizationError):
        return True
    return isinstance(exc, nats_errors.Error) and refusal_of(str(exc)) is not None


def shown_server(server: Srv) -> str:
    """A server of nats-py's pool, for a message: its URL without credentials."""
    return redact_url(server.uri.geturl())


class Refusals:
    """The credentials refusals of one client (nats.go's ``processAuthError``).

    ``last`` holds each server's last refusal, forgotten when the client
    connects to it; ``streak`` the refusals since the client was last
    connected (in order, each once), which :attr:`reason` names.
    """

    __slots__ = ("closed_by", "closing", "error", "known_error", "last", "streak", "where")

    def __init__(self) -> None:
        self.last: dict[str, str] = {}
        self.streak: list[str] = []
        self.where = ""
        #: The last refusal, as nats-py reported it (or the -ERR read while connected).
        self.error: Exception | None = None
        #: nats-py's ``last_error`` when the client last connected: older news.
        self.known_error: BaseException | None = None
        #: Set by :meth:`~._client.Conn.close`: the user closed it, nothing went wrong.
        self.closing = False
        #: The error after which nats-py closed the client by itself (its text, screened).
        self.closed_by: str | None = None

    @staticmethod
    def refusal(text: str) -> str | None:
        """Which refusal of credentials ``text`` is, or None (:func:`refusal_of`)."""
        return refusal_of(text)

    @property
    def reason(self) -> str | None:
        """Why the credentials were refused since the client was last connected, or None."""
        if not self.streak:
            return None
        return f"{self.where} refused the credentials ({', then '.join(self.streak)})"

    def refused(self, server: Srv, refusal: str, error: Exception) -> bool:
        """Count a refusal by ``server``; True when it is its second in a row (give it up)."""
        key = server.uri.netloc
        self.where = shown_server(server)
        self.error = error
        if refusal not in self.streak:
            self.streak.append(refusal)
        if self.last.get(key) == refusal:
            logger.warning(
                "%s refused the credentials twice in a row (%s): no more reconnects to it",
                self.where,
                refusal,
            )
            return True
        self.last[key] = refusal
        return False

    def accepted(self, server: Srv) -> None:
        """``server`` took the credentials: its refusals so far no longer count."""
        self.last.pop(server.uri.netloc, None)
        self.streak.clear()
        self.error = None


#: The refusals of each client connected by :func:`~._connect.connect_nats`.
REFUSALS: weakref.WeakKeyDictionary[NatsClient, Refusals] = weakref.WeakKeyDictionary()


def closed_error(nc: NatsClient, text: str = "the connection is closed") -> ConnectionClosedError:
    """A :class:`ConnectionClosedError` saying ``text``, and the refusal that closed it if any."""
    refusals = REFUSALS.get(nc)
    if refusals is None:
        return ConnectionClosedError(text)
    if refusals.reason is not None:
        return ConnectionClosedError(f"{text}: {refusals.reason}")
    if refusals.closed_by is not None:
        return ConnectionClosedError(f"{text} ({refusals.closed_by})")
    return ConnectionClosedError(text)


def closing_reason(error: BaseException) -> str | None:
    """Why nats-py closed a client by itself after ``error`` (its ``last_error``), or None.

    nats-py closes for good on any ``-ERR`` but a stale connection or a
    permissions violation (``'Maximum Control Line Exceeded'``, ``'maximum
    payload violation'`` after a reload lowered it, ...), and when the
    reconnect attempts are used up; later calls only heard that the
    connection is closed (nats.go keeps the error in ``LastError()``).
    """
    if isinstance(error, nats_errors.NoServersError):
        return "no server could be reached in max_reconnect_attempts reconnect attempts"
    text = str(error)
    if not text or "permissions violation" in text.lower():
        return None  # reported to the error callback; it closes nothing
    return f"after the error: {text}"

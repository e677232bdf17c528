"""The boundary to nats-py: the only module of the library that imports it.

Everything that crosses into nats-py goes through :class:`Conn`, and every
nats-py exception is mapped to the aiojetstream tree in :func:`translate`.
Connection state changes (disconnect, reconnect, close) are fanned out to
listeners through one chained callback per nats-py client.

Two paths
---------

Every connection runs on one of two paths, chosen when its first
:class:`Conn` is created and logged once:

* the **fast path** (the default) reaches into nats-py internals that were
  verified on the nats-py versions ``pyproject.toml`` allows (2.16.x): the
  protocol parser (``Client._ps``: its ``parse``, ``nc``, ``buf``, ``state``,
  ``needed``, ``header_needed``, ``msg_arg``; ``Client._process_ping`` and
  ``_process_pong``; ``AWAITING_CONTROL_LINE`` and
  ``AWAITING_MSG_PAYLOAD`` of ``nats.protocol.parser``), ``Client._process_msg``,
  the outgoing buffer (``_pending``, ``_pending_data_size``,
  ``_max_pending_size``, ``_flush_queue``, ``_transport``), ``_max_payload``
  and ``Subscription._id``; for reading where the socket delivers, also
  ``nats.aio.client.DEFAULT_BUFFER_SIZE`` (what the read loop asks for) and
  ``TcpTransport._io_writer`` (its asyncio transport), without which the read
  loop parses everything. Messages of the library's own subscriptions are
  parsed straight from the read buffer and publishes are queued as ready-made
  PUB/HPUB commands (see "raw path" below);
* the **fallback** uses nats-py's public API only (``publish``, ``request``,
  callback subscriptions). It is slower (a nats-py ``Msg`` and a task per
  message) and is chosen when any of those internals is missing or has an
  unexpected shape (an import of aiojetstream never fails because of it), or
  when the environment variable ``AIOJETSTREAM_FAST_PATH`` is ``0`` (also
  ``false``, ``no``, ``off``) when the connection is made. CI runs the
  publish, consume, KV and error translation tests on it (``make
  test-fallback``).

Both paths report errors to the caller: on the fallback, a publish that must
not wait (an asynchronous publish, a pull request) is written by a task
whose failure is handed to the caller's ``on_error`` (the publish's future
fails), never dropped.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import importlib.metadata
import logging
import os
import re
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, Protocol

import nats.errors as nats_errors
from nats.aio.client import Client as NatsClient
from nats.aio.client import Server
from nats.aio.msg import Msg as NatsMsg
from nats.aio.subscription import Subscription as NatsSubscription

from ._errors import (
    AuthorizationError,
    ConnectionClosedError,
    ConnectionFailedError,
    DisconnectedError,
    InvalidHeaderError,
    InvalidOptionError,
    InvalidSubjectError,
    JetStreamError,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    NoRespondersError,
    TLSError,
)
from ._redact import connection_secrets, mentions, redact_servers, redact_url, scrub
from ._validation import check_timeout

__all__ = [
    "FAST_PATH_ENV",
    "Conn",
    "RawHandler",
    "RawSink",
    "RawSubscription",
    "Reply",
    "ConnectionListener",
    "NatsClient",
    "NatsMsg",
    "NatsSubscription",
    "as_jetstream_error",
    "choose_path",
    "connect_nats",
    "fast_path_missing",
    "fast_path_switched_on",
    "translate",
]

logger = logging.getLogger("aiojetstream")

#: The environment variable that switches the fast path off for connections
#: made while it is ``0``, ``false``, ``no`` or ``off`` (see the module docstring).
FAST_PATH_ENV = "AIOJETSTREAM_FAST_PATH"
_FAST_PATH_OFF = frozenset({"0", "false", "no", "off"})
_FAST_PATH_ON = frozenset({"", "1", "true", "yes", "on"})


def _parser_internals() -> tuple[Any, Any, Any]:
    """nats-py's protocol ``Parser`` class and its two states (None where they moved)."""
    try:
        from nats.protocol import parser
    except ImportError:
        return None, None, None
    return (
        getattr(parser, "Parser", None),
        getattr(parser, "AWAITING_CONTROL_LINE", None),
        getattr(parser, "AWAITING_MSG_PAYLOAD", None),
    )


# Looked up defensively: a nats-py that moved them gets the fallback, not an ImportError.
_NatsParser, _AWAITING_CONTROL, _AWAITING_PAYLOAD = _parser_internals()


def _tcp_transport_class() -> Any:
    """nats-py's TCP transport class (None where it moved: nothing is written directly)."""
    try:
        from nats.aio import transport
    except ImportError:
        return None
    return getattr(transport, "TcpTransport", None)


_TcpTransport = _tcp_transport_class()

#: Our default keep-alive: a dead or hung server is noticed within
#: ping_interval * (max_outstanding_pings + 1) = 15 s (nats-py's default is 360 s).
DEFAULT_PING_INTERVAL = 5
DEFAULT_MAX_OUTSTANDING_PINGS = 2


@contextlib.contextmanager
def translate(subject: str = "") -> Iterator[None]:
    """Map nats-py exceptions raised inside the block to aiojetstream errors."""
    try:
        yield
    except JetStreamError:
        raise
    except nats_errors.NoRespondersError as exc:
        raise NoRespondersError(f"no responders on {subject!r}") from exc
    except nats_errors.TimeoutError as exc:
        raise JetStreamTimeoutError(f"timed out waiting for a reply on {subject!r}") from exc
    except (nats_errors.ConnectionClosedError, nats_errors.ConnectionDrainingError) as exc:
        raise ConnectionClosedError("the connection is closed") from exc
    except (
        nats_errors.OutboundBufferLimitError,
        nats_errors.ConnectionReconnectingError,
        nats_errors.StaleConnectionError,
    ) as exc:
        raise DisconnectedError(f"disconnected from the server: {exc}") from exc
    except nats_errors.BadSubjectError as exc:
        raise InvalidSubjectError(f"invalid subject {subject!r}") from exc
    except nats_errors.BadHeaderError as exc:
        raise InvalidHeaderError(str(exc)) from exc
    except nats_errors.MaxPayloadError as exc:
        raise MaxPayloadExceededError("message exceeds the server's max_payload") from exc
    except nats_errors.Error as exc:
        raise JetStreamError(f"connection error: {exc}") from exc


#: The initial connection tries each server this many times, this far apart,
#: then fails (as the Go client does by default) instead of nats-py's 60 x 2 s.
CONNECT_ATTEMPTS = 2
CONNECT_RETRY_WAIT = 0.25


async def _log_connection_error(exc: Exception) -> None:
    """Default nats-py error callback: one log line, not a traceback per attempt.

    The error comes screened (:func:`_initial_error_cb`): no secret in its text.
    Not called for the attempts of the first connection: their errors are in
    the exception :func:`connect_nats` raises (logged at debug level only).
    """
    logger.warning("nats connection error: %s", exc or type(exc).__name__)


def _split_urls(servers: str | list[str]) -> list[str]:
    items = [servers] if isinstance(servers, str) else list(servers)
    urls = [u.strip() for item in items for u in item.split(",") if u.strip()]
    if not urls:
        raise InvalidOptionError("no server URL given")
    return urls


def _guard_tls(nc: NatsClient, reasons: list[str]) -> None:
    """Refuse, before CONNECT is sent, a ``tls://`` server that does not require TLS.

    nats-py upgrades to TLS only when the server's INFO says ``tls_required``; a
    ``tls://`` URL pointing at a plaintext server would otherwise carry the
    credentials in the clear.
    """
    original = nc._process_info

    async def guarded(info: dict[str, Any], initial_connection: bool = False) -> None:
        server = nc._current_server
        if (
            initial_connection
            and server is not None
            and server.uri.scheme == "tls"
            and not info.get("tls_required")
        ):
            where = redact_url(server.uri.geturl())  # never the credentials
            reason = f"{where} does not offer TLS but was given as a tls:// URL"
            reasons.append(reason)
            raise nats_errors.SecureConnRequiredError(reason)
        await original(info, initial_connection=initial_connection)

    nc._process_info = guarded  # type: ignore[method-assign]


async def connect_nats(servers: str | list[str], **options: Any) -> NatsClient:
    """Connect with nats-py, applying aiojetstream's safer defaults.

    * ``servers`` may be a list or a comma-separated string of URLs.
    * ``ping_interval=5`` and ``max_outstanding_pings=2`` unless given, so a hung
      server is detected in about 15 s instead of 6 minutes.
    * The first connection fails after trying each server twice, 250 ms apart
      (nats-py alone would retry for two minutes); reconnects afterwards follow
      ``max_reconnect_attempts`` / ``reconnect_time_wait`` as usual.
    * A ``tls://`` URL always means TLS: it gets a default verifying context
      unless ``tls`` is given, and a server that does not offer TLS is refused
      with :class:`TLSError` before anything (credentials included) is sent.
    * A failed TLS handshake (untrusted certificate, hostname mismatch) raises
      :class:`TLSError` at once, without a second attempt (nats-py would then
      wait forever for the socket of the failed upgrade to close).
    * Refused credentials raise :class:`AuthorizationError`.
    * No error, log line or error callback shows a secret: the servers are
      named through :func:`~._redact.redact_servers` (never credentials), and
      what nats-py reports is screened for the password, token, NKey seed and
      in-memory credentials given (the user's ``error_cb`` gets a
      :class:`JetStreamError` in place of an error that shows one). A
      chained cause that shows one is left out, as is nats-py's reason for
      refusing a URL (it quotes the URL).
    * A reconnect never starts with the server just lost and never waits to
      flush the connection it gives up (:class:`NextServer`,
      :func:`drop_unsent_on_reconnect`), unless ``reconnect_to_server_handler``
      is given.
    """
    urls = _split_urls(servers)
    shown = redact_servers(servers)
    secrets = connection_secrets(servers, options)
    options.setdefault("ping_interval", DEFAULT_PING_INTERVAL)
    options.setdefault("max_outstanding_pings", DEFAULT_MAX_OUTSTANDING_PINGS)
    reconnect_attempts = options.pop("max_reconnect_attempts", 60)
    reconnect_wait = options.pop("reconnect_time_wait", 2)
    wants_tls = any(u.lower().startswith("tls://") for u in urls)
    if wants_tls and options.get("tls") is None:
        options["tls"] = ssl.create_default_context()
    nc = NatsClient()
    tls_refusals: list[str] = []
    if wants_tls:
        _guard_tls(nc, tls_refusals)
    next_server: NextServer | None = None
    if options.get("reconnect_to_server_handler") is None:
        next_server = options["reconnect_to_server_handler"] = NextServer()
    connect_errors: list[Exception] = []
    # nats-py awaits these inside its read loop and reconnect task: one that raised
    # ended the reconnect for good. Theirs to log, not to end the connection with.
    for key in ("disconnected_cb", "reconnected_cb", "closed_cb", "discovered_server_cb"):
        if options.get(key) is not None:
            options[key] = _logging_errors(options[key], key)
    options["closed_cb"] = _failing_requests(nc, options.get("closed_cb"))
    user_error_cb = options.get("error_cb")
    options["error_cb"] = _initial_error_cb(
        _logging_errors(user_error_cb, "error_cb") if user_error_cb else _log_connection_error,
        connect_errors,
        shown,
        secrets,
        quiet=user_error_cb is None,
    )
    failure: JetStreamError | None = None
    try:
        # nats-py annotates reconnect_time_wait as int but sleeps on any number.
        options["max_reconnect_attempts"] = CONNECT_ATTEMPTS - 1
        options["reconnect_time_wait"] = CONNECT_RETRY_WAIT
        await nc.connect(servers=urls, **options)
    except (OSError, TimeoutError, nats_errors.Error) as exc:
        failure = _connect_failure(exc, nc.last_error, connect_errors, tls_refusals, shown)
        # The cause is chained unless something in it shows a secret; nats-py's
        # reason for refusing a URL quotes it (a ValueError from urllib).
        if failure is None:
            if not mentions(exc, secrets):
                with translate():
                    raise
            failure = JetStreamError(f"connection error: {scrub(str(exc), secrets)}")
        elif not _is_invalid_url(exc) and not mentions(exc, secrets):
            raise _screened(failure, secrets) from exc
    except TLSError as exc:  # raised by the error callback out of nats-py's connect
        if mentions(exc, secrets):
            failure = exc
        else:
            raise
    finally:
        connect_errors.append(_CONNECTED)  # the callback only forwards from now on
    if failure is not None:
        # Raised here, outside the except clause: no __context__ either.
        raise _screened(failure, secrets)
    nc.options["max_reconnect_attempts"] = reconnect_attempts
    nc.options["reconnect_time_wait"] = reconnect_wait
    if next_server is not None:
        next_server.attach(nc)
    drop_unsent_on_reconnect(nc)
    return nc


#: Why nats-py may refuse a URL with credentials in it, said without quoting them.
_URL_HINT = (
    "a password or token holding '/', '?', '#', ',' or unicode that stands for one of "
    "them cannot go in a URL: give it with the user and password or token options"
)


def _is_invalid_url(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, nats_errors.Error) and (
        "invalid connect url" in text or "invalid hostname in connect url" in text
    )


def _connect_failure(
    exc: BaseException,
    last: BaseException | None,
    connect_errors: list[Exception],
    tls_refusals: list[str],
    shown: str,
) -> JetStreamError | None:
    """The error a failed first connection raises (None: :func:`translate` maps ``exc``).

    ``shown`` names the servers without credentials; the text of an error
    nats-py reports is quoted (the caller screens it for secrets), except for
    a refused URL: nats-py's reason quotes the URL.
    """
    refused = next((e for e in reversed(connect_errors) if _is_auth_error(e)), None)
    if refused is not None:
        return AuthorizationError(f"{shown} refused the credentials: {refused}")
    if tls_refusals:
        return TLSError(f"refusing a plaintext connection: {tls_refusals[-1]}")
    if isinstance(last, ssl.SSLError) or isinstance(exc, ssl.SSLError):
        return TLSError(f"TLS handshake with {shown} failed: {last or exc}")
    if _is_invalid_url(exc):
        hint = f" ({_URL_HINT})" if "***@" in shown else ""
        return InvalidOptionError(f"invalid server URL in {shown}{hint}")
    if isinstance(exc, OSError | TimeoutError | nats_errors.NoServersError):
        # Why the attempts failed (refused, unknown host...), each reason once,
        # rather than nats-py's closing "no servers available".
        reasons = list(
            dict.fromkeys(
                _reason(e) for e in connect_errors if not isinstance(e, nats_errors.NoServersError)
            )
        )
        if not reasons:
            reasons = [_reason(last or exc)]
        servers = tuple(u.strip() for u in shown.split(","))
        tried = "tried twice" if len(servers) == 1 else "each tried twice"
        return ConnectionFailedError(
            f"could not connect to {shown} ({tried}): {'; '.join(reasons)}", servers
        )
    return None


def _reason(exc: BaseException) -> str:
    """Why a connection attempt failed, in words (a bare ``TimeoutError`` says nothing)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    return str(exc) or type(exc).__name__


def _screened(error: JetStreamError, secrets: list[str]) -> JetStreamError:
    """``error`` if neither it nor what it chains shows a secret.

    Else a new error of its type, chaining nothing, with the secrets of its
    message hidden (:func:`scrub`).
    """
    if not mentions(error, secrets):
        return error
    text = scrub(str(error), secrets)
    try:
        return type(error)(text)
    except TypeError:  # an error type that takes more than a message
        return JetStreamError(text)


def _logging_errors(
    callback: Callable[..., Awaitable[None]], name: str
) -> Callable[..., Awaitable[None]]:
    """``callback``, with whatever it raises logged instead of raised into nats-py."""

    async def call(*args: Any) -> None:
        try:
            await callback(*args)
        except Exception:
            logger.exception("the connection's %s raised", name)

    return call


def _failing_requests(
    nc: NatsClient, user_cb: Callable[[], Awaitable[None]] | None
) -> Callable[[], Awaitable[None]]:
    """A ``closed_cb`` that fails the requests in flight, then calls the user's.

    nats-py closes by itself too (reconnect attempts used up, credentials refused).
    """
    client = weakref.ref(nc)  # the callback is kept by the client itself

    async def closed() -> None:
        target = client()
        if target is not None:
            fail_requests(target)
        if user_cb is not None:
            await user_cb()

    return closed


#: Marks the end of the initial connection in the error list of _initial_error_cb.
_CONNECTED = Exception("connected")


def _initial_error_cb(
    forward: Callable[[Exception], Awaitable[None]],
    seen: list[Exception],
    shown: str,
    secrets: list[str],
    *,
    quiet: bool = False,
) -> Callable[[Exception], Awaitable[None]]:
    """nats-py's error callback: forwards every error, and ends a failed TLS handshake.

    An error that shows one of the connection's ``secrets`` is forwarded (to
    the log, or the user's ``error_cb``) as a :class:`JetStreamError` naming
    its type, with the secrets hidden and nothing chained.

    During the initial connection it records the errors (an authorization
    error is only told apart there), and raises :class:`TLSError` out of
    nats-py's connect on an ``ssl.SSLError``: asyncio closed the socket, and
    nats-py would otherwise retry and then wait forever for the stream of
    the failed TLS upgrade to close. ``shown`` names the servers. With
    ``quiet`` (no callback of the user's: ``forward`` logs), the errors of
    the initial connection are not forwarded but logged at debug level: a
    connection that never opens says why in the error it raises, not in a
    warning per attempt before it.
    """

    async def error_cb(exc: Exception) -> None:
        connected = bool(seen) and seen[-1] is _CONNECTED
        if connected or not quiet:
            await forward(_screened_error(exc, secrets))
        else:
            logger.debug("connecting to %s: %s", shown, _screened_error(exc, secrets))
        if connected:
            return
        seen.append(exc)
        if isinstance(exc, ssl.SSLError):
            raise TLSError(f"TLS handshake with {shown} failed: {exc}") from exc

    return error_cb


def _screened_error(exc: Exception, secrets: list[str]) -> Exception:
    """``exc``, or, when it (or what it chains) shows a secret, a safe stand-in."""
    if not mentions(exc, secrets):
        return exc
    return JetStreamError(f"{type(exc).__name__}: {scrub(str(exc), secrets)}")


#: The server's -ERR texts of refused credentials (nats-py raises them as a plain Error).
_AUTH_ERRORS = (
    "authorization violation",
    "user authentication expired",
    "user authentication revoked",
    "account authentication expired",
)


def _is_auth_error(exc: Exception) -> bool:
    """An ``-ERR`` of refused credentials, such as ``'Authorization Violation'``."""
    if isinstance(exc, nats_errors.AuthorizationError):
        return True
    text = str(exc).lower()
    return isinstance(exc, nats_errors.Error) and any(marker in text for marker in _AUTH_ERRORS)


class ConnectionListener(Protocol):
    """Receives connection state changes (called synchronously, must not block)."""

    def on_disconnected(self) -> None:
        """The connection dropped; nats-py is reconnecting (or closing)."""

    def on_reconnected(self) -> None:
        """The connection is back."""

    def on_closed(self) -> None:
        """The connection is closed for good."""


class _Hub:
    """Chains itself in front of a nats-py client's state callbacks."""

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.listeners: dict[int, ConnectionListener] = {}
        self._orig_disconnected = nc._disconnected_cb
        self._orig_reconnected = nc._reconnected_cb
        self._orig_closed = nc._closed_cb
        nc._disconnected_cb = self._disconnected
        nc._reconnected_cb = self._reconnected
        nc._closed_cb = self._closed

    def restore(self) -> None:
        nc = self.nc
        nc._disconnected_cb = self._orig_disconnected
        nc._reconnected_cb = self._orig_reconnected
        nc._closed_cb = self._orig_closed

    def _fan_out(self, name: str) -> None:
        # Each listener on its own: one that raises must not keep the others, nor
        # nats-py (which awaits these callbacks inside its reconnect task), from
        # hearing of the change.
        for listener in list(self.listeners.values()):
            try:
                getattr(listener, name)()
            except Exception:
                logger.exception("a connection listener's %s raised", name)

    @staticmethod
    async def _user_callback(callback: Callable[[], Awaitable[None]] | None, name: str) -> None:
        if callback is not None:
            await _logging_errors(callback, f"{name}_cb")()

    async def _disconnected(self) -> None:
        self._fan_out("on_disconnected")
        await self._user_callback(self._orig_disconnected, "disconnected")

    async def _reconnected(self) -> None:
        self._fan_out("on_reconnected")
        await self._user_callback(self._orig_reconnected, "reconnected")

    async def _closed(self) -> None:
        self._fan_out("on_closed")
        await self._user_callback(self._orig_closed, "closed")


_HUBS: weakref.WeakKeyDictionary[NatsClient, _Hub] = weakref.WeakKeyDictionary()


class Conn:
    """A thin, typed facade over one nats-py client."""

    __slots__ = ("__weakref__", "fast", "nc")

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        #: True on the fast path, False on the fallback (see the module docstring).
        self.fast = choose_path(nc)

    # ----------------------------------------------------------------- state

    @property
    def max_payload(self) -> int:
        """The server's ``max_payload`` (0 when unknown)."""
        return int(self.nc.max_payload or 0)

    @property
    def is_closed(self) -> bool:
        """True once the connection is closed for good."""
        return bool(self.nc.is_closed)

    @property
    def is_connected(self) -> bool:
        """True while connected to a server."""
        return bool(self.nc.is_connected)

    def add_listener(self, listener: ConnectionListener) -> None:
        """Start delivering connection state changes to ``listener``."""
        hub = _HUBS.get(self.nc)
        if hub is None:
            hub = _HUBS[self.nc] = _Hub(self.nc)
        hub.listeners[id(listener)] = listener

    def remove_listener(self, listener: ConnectionListener) -> None:
        """Stop delivering to ``listener``; the last one out restores nats-py's callbacks."""
        hub = _HUBS.get(self.nc)
        if hub is None:
            return
        hub.listeners.pop(id(listener), None)
        if not hub.listeners:
            hub.restore()
            del _HUBS[self.nc]

    def listener_count(self) -> int:
        """How many listeners are registered on this client (for leak checks)."""
        hub = _HUBS.get(self.nc)
        return 0 if hub is None else len(hub.listeners)

    # ----------------------------------------------------------------- I/O

    def new_inbox(self) -> str:
        """A new unique inbox subject."""
        return self.nc.new_inbox()

    async def request(
        self,
        subject: str,
        payload: bytes,
        timeout: float,
        header_block: bytes | None = None,
    ) -> Reply:
        """Send a request and return the reply's payload and raw header block.

        Raises:
            ConnectionClosedError: the connection is closed (or draining).
            DisconnectedError: disconnected and the reconnect buffer is full.
            NoRespondersError: nobody listens on ``subject``.
            JetStreamTimeoutError: no reply within ``timeout`` seconds.

        """
        return await _request(self, subject, payload, timeout, header_block)

    async def publish(
        self,
        subject: str,
        payload: bytes,
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Publish a message (errors translated)."""
        if len(subject) + len(reply) > MAX_SUBJECT_LINE // 4:  # else short in any encoding
            check_line(subject.encode(), reply.encode())
        with translate(subject):
            await self.nc.publish(subject, payload, reply=reply, headers=headers)

    async def subscribe(
        self,
        subject: str,
        cb: Callable[[NatsMsg], Awaitable[None]],
        *,
        pending_msgs_limit: int = 0,
        pending_bytes_limit: int = 0,
    ) -> NatsSubscription:
        """Subscribe with a callback; limits of 0 mean unlimited (no client-side drops)."""
        with translate(subject):
            return await self.nc.subscribe(
                subject,
                cb=cb,
                pending_msgs_limit=pending_msgs_limit,
                pending_bytes_limit=pending_bytes_limit,
            )

    async def subscribe_raw(
        self,
        subject: str,
        handler: RawHandler,
        *,
        internal: bool = False,
        sink: RawSink | None = None,
    ) -> RawSubscription:
        """Subscribe; each message goes to ``handler(subject, reply, payload, header_block)``.

        The handler runs synchronously in the connection's read loop, so it
        must be quick and must not block. ``internal`` marks a long-lived
        subscription of the library itself (reply inboxes), kept apart from the
        consumers' routes. With a ``sink`` (fast path only), the plain messages
        the router frames itself are buffered through it instead (see
        :class:`RawSink`); the handler gets the others.
        """
        return await _subscribe_raw(self, subject, handler, internal, sink)

    def publish_nowait(
        self,
        subject: bytes,
        payload: bytes,
        reply: bytes = b"",
        header_block: bytes | None = None,
        on_error: Callable[[JetStreamError], None] | None = None,
    ) -> None:
        """Queue a publish without awaiting (pull requests, acks, asynchronous publishes).

        On the fast path the command is in nats-py's outgoing buffer when this
        returns, and every failure is raised here. On the fallback nats-py's
        ``publish`` runs in a task: a failure found there (the reconnect buffer
        filled up meanwhile, the connection closed, nats-py refused the
        message) goes to ``on_error``, or is logged as a warning without one.

        Raises:
            ConnectionClosedError: the connection is closed (or draining, on the fallback).
            DisconnectedError: disconnected and the reconnect buffer is full.

        """
        nc = self.nc
        if nc.is_closed:
            raise ConnectionClosedError("the connection is closed")
        if len(subject) + len(reply) > MAX_SUBJECT_LINE:
            check_line(subject, reply)
        if not self.fast:
            _publish_in_task(nc, subject, payload, reply, header_block, on_error)
            return
        if header_block is not None:
            cmd = pub_command(subject, reply, payload, header_block)
        elif reply:
            cmd = b"PUB %b %b %d\r\n%b\r\n" % (subject, reply, len(payload), payload)
        else:
            cmd = b"PUB %b %d\r\n%b\r\n" % (subject, len(payload), payload)
        _enqueue(nc, cmd, len(payload))

    def write_queued(self) -> None:
        """Write what is queued now rather than when nats-py's flusher task next runs.

        For a pull request: it is sent while the consumer goes on with its
        buffer, not once the consumer loop yields (the server would sit idle
        meanwhile). Fast path only (the fallback writes from tasks anyway);
        while disconnected the queue is the reconnect buffer and stays.
        """
        if self.fast:
            _write_pending(self.nc)

    def ack_nowait(self, subject: bytes, payload: bytes) -> None:
        """Queue an acknowledgement: a PUB of ``payload`` to ``subject`` (fast path only).

        Acks pile up in nats-py's outgoing buffer while a consumer loop hands
        out buffered messages without yielding to the event loop (so nats-py's
        flusher task does not run). Once :data:`ACK_WRITE_BYTES` are queued
        they are written at once, all in one write: the server hears of acks
        within that many bytes, not only when the loop next waits.

        Raises:
            ConnectionClosedError: the connection is closed.
            DisconnectedError: disconnected and the reconnect buffer is full.

        """
        nc = self.nc
        tail = _ACK_TAILS.get(payload)
        if tail is None:
            tail = b" %d\r\n%b\r\n" % (len(payload), payload)
        cmd = b"PUB " + subject + tail
        if not nc.is_connected:
            if nc.is_closed:
                raise ConnectionClosedError("the connection is closed")
            _enqueue(nc, cmd, len(payload))
            return
        # _enqueue, connected, and a write instead of a wake-up once enough is queued.
        nc._pending.append(cmd)
        size = nc._pending_data_size = nc._pending_data_size + len(cmd)
        stats = nc.stats
        stats["out_msgs"] += 1
        stats["out_bytes"] += len(payload)
        if size >= ACK_WRITE_BYTES and _write_pending(nc):
            return
        queue = nc._flush_queue
        if queue is not None and queue.empty():
            queue.put_nowait(asyncio.get_running_loop().create_future())

    @property
    def is_draining_pubs(self) -> bool:
        """True while nats-py drains publishes (the last step before closing)."""
        return bool(self.nc.is_draining_pubs)

    async def unsubscribe(self, sub: NatsSubscription) -> None:
        """Unsubscribe; a closed connection is not an error here."""
        if self.nc.is_closed:
            return
        with contextlib.suppress(
            nats_errors.ConnectionClosedError,
            nats_errors.ConnectionDrainingError,  # the drain removes it anyway
            nats_errors.BadSubscriptionError,
        ):
            await sub.unsubscribe()

    async def flush(self, timeout: float) -> None:
        """Flush and wait for the server's PONG."""
        with translate():
            # nats-py annotates an int but waits on any positive number.
            await self.nc.flush(timeout=timeout)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Close the connection, flushing for at most ``CLOSE_FLUSH_TIMEOUT`` seconds.

        Requests still waiting for a reply fail with :class:`ConnectionClosedError`.
        """
        if not self.nc.is_closed:
            _bound_close_waits(self.nc, CLOSE_FLUSH_TIMEOUT)
        try:
            with translate():
                await self.nc.close()
        finally:
            fail_requests(self.nc)


# --------------------------------------------------------------------------- raw path
#
# Pull consumers receive every message through one inbox subscription, and
# requests their replies through one wildcard inbox per client. Instead of
# letting nats-py build a Msg, queue it and wake a task per message, the router
# below takes the messages of our subscriptions straight from the protocol
# parser (raw subject, reply, payload and header block) and hands them to a
# synchronous handler. Outgoing messages are written as ready-made PUB / HPUB
# commands into nats-py's pending buffer, which its flusher task writes out.
# nats-py still owns the subscriptions themselves (SUB, re-subscription after a
# reconnect, UNSUB). If a future nats-py changes the internals this relies on,
# ``subscribe_raw`` falls back to an ordinary callback subscription that
# rebuilds the raw pieces, and requests to ``nc.request``.

RawHandler = Callable[[bytes, bytes, bytes, "bytes | None"], None]
#: A reply: its payload and its raw header block (None without headers).
Reply = tuple[bytes, "bytes | None"]

_CRLF = b"\r\n"
# What nats-py refuses in a subject it publishes to (whitespace would break the protocol).
_BAD_SUBJECT = re.compile(r"[\s\x00-\x1f\x7f\ud800-\udfff]")  # and lone surrogates
_NO_RESPONDERS = b"NATS/1.0 503"


def _rebuild_header_block(headers: dict[str, str] | None) -> bytes | None:
    """Header block as sent by the server, from nats-py's parsed dict (fallback path).

    nats-py puts a status line's code and description into the ``Status`` and
    ``Description`` keys; a ``Status`` of three ASCII digits becomes the status
    line again. What nats-py's dict loses stays lost: of a repeated key only
    the last value is left, and a user header ``Status: 200`` reads as a status.
    """
    if not headers:
        return None
    status = headers.get("Status")
    first = b"NATS/1.0"
    is_status = status is not None and len(status) == 3 and status.isascii() and status.isdigit()
    if is_status:
        first += b" " + status.encode()  # type: ignore[union-attr]
        desc = headers.get("Description")
        if desc:
            first += b" " + desc.encode()
    lines = [first]
    for key, value in headers.items():
        if is_status and key in ("Status", "Description"):
            continue
        lines.append(f"{key}: {value}".encode())
    return _CRLF.join(lines) + _CRLF + _CRLF


# What _Router._scan stopped at.
_SCAN_END: Final = 0  # the end of what is complete
_SCAN_OTHER: Final = 1  # a line for nats-py's parser
_SCAN_PING: Final = 2
_SCAN_PONG: Final = 3
_SCAN_ORIGINAL: Final = 4  # a message for nats-py's own processing
#: Longer sizes go to nats-py's parser (its ProtocolError): int() refuses more
#: than 4,300 digits with a ValueError, and no message is that large anyway.
_MAX_SIZE_DIGITS: Final = 18


class _Router:
    """Takes the messages of routed sids from nats-py's parser (see above).

    Two hooks: ``nc._process_msg`` (every message nats-py's own parser hands
    on), and, when nats-py's parser has the expected shape, its ``parse``
    method: the MSG / HMSG lines of routed subscriptions are then parsed here,
    straight from the read buffer and without a coroutine per message, while
    any other protocol line (PING, PONG, INFO, -ERR, ...) and everything after
    it in the same read goes to nats-py's parser unchanged.

    With the parser hooked, the router also stands in front of the
    connection's asyncio protocol (:class:`_DirectReads`, over nats-py's TCP
    transport, TLS included): while nats-py's read loop has nothing left to
    parse, the bytes the socket delivers are scanned right where they arrive,
    so a reply or a consumer's messages reach their handler without waiting
    for the read loop's task to be woken (one event-loop pass less per read).
    Anything that needs nats-py's parser or an await, and everything after it,
    goes to the read loop as before.
    """

    def __init__(self, nc: NatsClient) -> None:
        # No strong reference to the client (it is the key of _ROUTERS).
        self.stats = nc.stats
        #: Consumers' subscriptions (come and go).
        self.routes: dict[int, RawHandler] = {}
        #: Long-lived reply inboxes: requests, asynchronous publishes.
        self.internal: dict[int, RawHandler] = {}
        #: Routes whose plain messages the fast loop builds and buffers itself.
        self.sinks: dict[int, RawSink] = {}
        self.last_subject = b""
        #: A message whose payload was not all in: the bytes its read buffer must
        #: hold (from its start) before parsing it again is worth it, and that buffer.
        self._awaiting = 0
        self._awaiting_buf: bytearray | None = None
        #: True while nats-py's read loop is inside the parser (it may await there).
        self._in_parse = False
        #: The protocol in front of the current transport (None: not (yet) installed).
        self._reads: _DirectReads | None = None
        process = nc._process_msg
        if getattr(process, "__self__", None) is nc:
            self._original: Callable[[], Callable[..., Awaitable[None]] | None] = (
                weakref.WeakMethod(process)
            )
        else:  # already replaced by someone else: keep what we found
            self._original = lambda: process
        nc._process_msg = self._process  # type: ignore[method-assign]
        self._ps: weakref.ReferenceType[Any] | None = None
        if _parser_hook_available(nc):
            self._ps = weakref.ref(nc._ps)
            nc._ps.parse = self._parse  # type: ignore[method-assign]

    @property
    def ps(self) -> Any:
        """nats-py's parser when its ``parse`` is hooked, else None."""
        return None if self._ps is None else self._ps()

    async def original(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        """nats-py's own processing of a message that is not routed here.

        Its exceptions are logged, not raised: in the read loop they would stop
        nats-py reading from the socket (nats-py 2.16 raises, for example, on a
        status line or a subject that is not UTF-8).
        """
        process = self._original()
        if process is None:
            return
        try:
            await process(sid, subject, reply, data, headers)
        except Exception:
            logger.exception("nats-py failed to process a message on %r", subject)

    async def _process(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        handler = self.routes.get(sid)
        if handler is None:
            handler = self.internal.get(sid)
            if handler is None:
                await self.original(sid, subject, reply, data, headers)
                return
        stats = self.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        try:
            handler(subject, reply, data, headers or None)
        except Exception:
            logger.exception("the handler of a message on %r failed", subject)

    async def _parse(self, data: bytes = b"") -> None:
        """nats-py's ``Parser.parse``, with a fast path for MSG and HMSG.

        Parses every input exactly as nats-py's parser does (it is nats-py's
        parser for anything but the canonical MSG / HMSG lines nats-server
        sends), with one difference: malformed protocol raises nats-py's
        ``ProtocolError`` only, which nats-py's read loop answers with a
        reconnect. Other exceptions of nats-py's parser (an ``INFO`` that is not
        JSON, a bare ``-ERR``) would end its read loop and leave the connection
        silent; they are logged and raised as ``ProtocolError`` instead.
        """
        self._in_parse = True
        try:
            self._track_read(len(data))
            await self._parse_frames(data)
        except nats_errors.ProtocolError:
            raise
        except Exception as exc:
            logger.warning("malformed protocol from the server (%r): reconnecting", exc)
            raise nats_errors.ProtocolError(f"nats: malformed protocol: {exc!r}") from exc
        finally:
            self._in_parse = False

    def _track_read(self, size: int) -> None:
        """Count a read of nats-py's read loop; stand in front of a new transport.

        :class:`_DirectReads` is installed only when this read emptied the
        stream reader (it returned less than the read loop asks for): from
        then on every byte the reader gets passes through it and is counted.
        """
        reads = self._reads
        ps = self.ps
        if ps is None:
            return
        transport = _asyncio_transport(ps.nc)
        if reads is not None and reads.transport is transport:
            reads.handed -= size
            return
        self._reads = None  # a transport of before a reconnect
        if transport is not None and _READ_SIZE is not None and size < _READ_SIZE:
            self._reads = _DirectReads.install(self, transport)

    def direct(self, data: bytes) -> bytes:
        """Scan ``data`` as the socket delivered it; return what the read loop must parse.

        Called by :class:`_DirectReads` while nats-py's read loop has nothing
        left to parse. A message not all in stays in the parser's buffer (the
        read loop would continue it there just as well); at a frame that needs
        nats-py's parser or an await the rest is returned, for the read loop.
        """
        ps = self.ps
        if ps is None or self._in_parse or ps.state != _AWAITING_CONTROL:
            return data
        buf: bytearray = ps.buf
        if buf or self._awaiting:
            buf.extend(data)
            if self._still_coming(buf):
                return b""
            view = bytes(buf)
            buf.clear()
        else:
            view = data if type(data) is bytes else bytes(data)
        size = len(view)
        pos, _, what, _ = self._scan(view, 0, size)
        if what != _SCAN_END:
            return view[pos:]
        if pos < size:
            buf.extend(memoryview(view)[pos:])
            if self._awaiting:
                self._awaiting_buf = buf
        return b""

    def _still_coming(self, buf: bytearray) -> bool:
        """True while the large message the last scan stopped at is not all in ``buf``.

        Copying and parsing the buffer again on every read until it is cost
        time quadratic in its size.
        """
        if not self._awaiting:
            return False
        if buf is self._awaiting_buf and len(buf) < self._awaiting:
            return True
        self._awaiting = 0
        self._awaiting_buf = None
        return False

    async def _parse_frames(self, data: bytes) -> None:
        ps = self.ps
        if ps is None:
            return
        buf: bytearray = ps.buf
        if data:
            buf.extend(data)
        if self._still_coming(buf):
            return
        if ps.state == _AWAITING_PAYLOAD:
            # nats-py's parser read the control line of this message: finish it as it would.
            needed = ps.needed
            if len(buf) < needed + 2:
                return
            hsize = ps.header_needed
            arg = ps.msg_arg
            if hsize > 0:
                hdr: bytes | None = bytes(buf[:hsize])
                payload = bytes(buf[hsize:needed])
            else:
                hdr = None
                payload = bytes(buf[:needed])
            del buf[: needed + 2]
            ps.header_needed = 0
            ps.state = _AWAITING_CONTROL
            await self._process(arg["sid"], arg["subject"], arg["reply"], payload, hdr)
            if ps.buf is not buf or ps.state != _AWAITING_CONTROL:
                return  # reset by a reconnect meanwhile
        view = bytes(buf)
        size = len(view)
        pos = 0
        dropped = 0  # how much of view was already removed from buf
        while True:
            pos, after, what, message = self._scan(view, pos, size)
            if what <= _SCAN_OTHER:  # the end, or a line for nats-py's parser
                break
            # A frame that needs an await: consume what was parsed first.
            pos = after
            del buf[: pos - dropped]
            dropped = pos
            if what == _SCAN_PING:
                await ps.nc._process_ping()
            elif what == _SCAN_PONG:
                await ps.nc._process_pong()
            else:
                # Not ours: nats-py's own processing (callbacks, futures, JetStream
                # control messages).
                await self.original(*message)
            if ps.buf is not buf or ps.state != _AWAITING_CONTROL:
                return  # reset by a reconnect meanwhile
        if pos > dropped:
            del buf[: pos - dropped]
        if self._awaiting:
            self._awaiting_buf = buf
        if what == _SCAN_OTHER:
            # INFO, -ERR, odd lines: nats-py's parser takes the rest.
            await _NatsParser.parse(ps)

    def _scan(self, view: bytes, pos: int, size: int) -> tuple[int, int, int, Any]:
        """Handle the frames of ``view[pos:size]`` that need no await.

        Messages of routed subscriptions go to their handlers (or sinks), ``+OK``
        lines are skipped. Stops at the end of what is complete and at the
        first frame that needs an await or nats-py's parser. Returns the
        position of that frame, the position after it, what it is (a
        ``_SCAN_*`` value) and, for a message of nats-py's own, its
        ``(sid, subject, reply, payload, header block)``. At ``_SCAN_END`` a
        payload not yet all in sets :attr:`_awaiting` (relative to the position).
        """
        routes = self.routes
        internal = self.internal
        sinks = self.sinks
        last_subject = self.last_subject
        # Counted here and handed on in one go (in the finally clause, and before
        # anything else may see them): nats-py's statistics, and the messages put
        # into the current sink's buffer (sink.arrived(count)).
        in_msgs = in_bytes = 0
        sink: RawSink | None = None
        sunk = 0
        append: Callable[[Any], None] | None = None
        make: Callable[..., Any] | None = None
        context: Any = None
        try:
            while pos < size:
                if view.startswith(b"MSG ", pos):
                    head = 4
                elif view.startswith(b"HMSG ", pos):
                    head = 5
                elif (
                    view.startswith(b"PING\r\n", pos) or view.startswith(b"PONG\r\n", pos)
                ) and _ends_op(view, pos + 6, size):
                    # As nats-py's parser does (so the rest of the read stays here).
                    ping = view[pos + 1] == 0x49  # I
                    return pos, pos + 6, _SCAN_PING if ping else _SCAN_PONG, None
                elif view.startswith(b"+OK\r\n", pos) and _ends_op(view, pos + 5, size):
                    pos += 5
                    continue
                else:
                    return pos, pos, _SCAN_OTHER, None
                end = view.find(b"\r\n", pos)
                if end < 0:
                    break  # an incomplete line: wait for more
                line = view[pos + head : end]
                args = line.split()
                # Only the canonical lines are parsed here; nats-py's parser decides
                # on any other (a lone CR or LF, trailing blanks, a size that is not
                # ASCII digits, a header larger than the message, ...), so every
                # input parses as it does there. (The membership tests of ints are
                # memchr calls: far cheaper than those of one-byte bytes.) One
                # exception: nats-py's HMSG pattern lets the blank between the sizes
                # span a CRLF, so it misreads "HMSG s 1 3 3\r\n5\r\n\r\n" (a header
                # block b"5\r\n", which nats-server relays) as reply "3", sizes 3
                # and 5 and misframes the stream; this reads the line to its CRLF.
                count = len(args)
                if head == 4:
                    if count == 3:
                        subject, sid_text, size_text = args
                        reply = b""
                    elif count == 4:
                        subject, sid_text, reply, size_text = args
                    else:
                        return pos, pos, _SCAN_OTHER, None
                    if (
                        13 in line
                        or 10 in line
                        or not 47 < line[-1] < 58
                        or not size_text.isdigit()
                        or len(size_text) > _MAX_SIZE_DIGITS
                    ):
                        return pos, pos, _SCAN_OTHER, None
                    hsize = 0
                    needed = int(size_text)
                else:
                    if count == 4:
                        subject, sid_text, hsize_text, size_text = args
                        reply = b""
                    elif count == 5:
                        subject, sid_text, reply, hsize_text, size_text = args
                    else:
                        return pos, pos, _SCAN_OTHER, None
                    if (
                        13 in line
                        or 10 in line
                        or not 47 < line[-1] < 58
                        or not size_text.isdigit()
                        or not hsize_text.isdigit()
                        or len(size_text) > _MAX_SIZE_DIGITS
                    ):
                        return pos, pos, _SCAN_OTHER, None
                    hsize = int(hsize_text)
                    needed = int(size_text)
                    if hsize > needed:
                        return pos, pos, _SCAN_OTHER, None
                try:
                    sid = int(sid_text)
                except ValueError:
                    return pos, pos, _SCAN_OTHER, None  # nats-py reports its "malformed MSG"
                start = end + 2
                stop = start + needed
                if stop + 2 > size:
                    # The payload is not all here yet: wait for more (the read buffer
                    # starts at this line once the consumed part is removed).
                    self._awaiting = stop + 2 - pos
                    break
                if hsize:
                    hdr = view[start : start + hsize]
                    payload = view[start + hsize : stop]
                else:
                    hdr = None
                    payload = view[start:stop]
                to = sinks.get(sid)
                if to is not None and to.bulk is not None:
                    # Column mode: the run of messages starting here (plain ones, or with
                    # one header each), framed in bulk (no object per message), if any.
                    try:
                        run = to.bulk(view, pos, size, sid_text, stop + 2)
                    except Exception:
                        logger.exception("framing messages on %r in bulk failed", subject)
                        to.bulk = run = None  # the loop below from now on
                    if run is not None:
                        if to is not sink:
                            if sunk:
                                sunk = _hand_on(sink, sunk)
                            sink = to
                            append, make, context = to.append, to.factory, to.context
                        pos = run.end
                        in_msgs += run.count
                        in_bytes += run.payload_bytes
                        append(run)  # type: ignore[misc]
                        sunk += run.count
                        continue
                if not hsize and to is not None:
                    pos = stop + 2
                    # A plain message for a sink: built and buffered right here.
                    in_msgs += 1
                    in_bytes += needed
                    if subject == last_subject:
                        subject = last_subject
                    else:
                        last_subject = subject
                    if to is not sink:
                        if sunk:
                            sunk = _hand_on(sink, sunk)
                        sink = to
                        append, make, context = to.append, to.factory, to.context
                    try:
                        append(make(subject, reply, payload, None, context))  # type: ignore[misc]
                    except Exception:
                        logger.exception("buffering a message on %r failed", subject)
                        continue
                    sunk += 1
                    if to.bulk is not None:
                        continue  # the next one may start a run framed in bulk
                    # The rest of a run of them (the usual read: a consumer's messages
                    # one after the other): lines that start as this one did, "MSG
                    # <subject> <sid> ", are parsed from there on with the same checks
                    # as above; anything else goes back to the loop above.
                    prefix = b"MSG %b %b " % (subject, sid_text)
                    skip = len(prefix)
                    while view.startswith(prefix, pos):
                        end = view.find(b"\r\n", pos + skip)
                        if end < 0:
                            break
                        rest = view[pos + skip : end]
                        args = rest.split()
                        count = len(args)
                        if count == 2:
                            reply, size_text = args
                        elif count == 1:
                            reply = b""
                            size_text = args[0]
                        else:
                            break
                        if (
                            13 in rest
                            or 10 in rest
                            or not 47 < rest[-1] < 58
                            or not size_text.isdigit()
                            or len(size_text) > _MAX_SIZE_DIGITS
                        ):
                            break
                        start = end + 2
                        needed = int(size_text)
                        stop = start + needed
                        if stop + 2 > size:
                            break
                        pos = stop + 2
                        in_msgs += 1
                        in_bytes += needed
                        try:
                            append(make(subject, reply, view[start:stop], None, context))  # type: ignore[misc]
                        except Exception:
                            logger.exception("buffering a message on %r failed", subject)
                            continue
                        sunk += 1
                    continue
                if sunk:
                    sunk = _hand_on(sink, sunk)  # before anything else sees the sink's owner
                handler = routes.get(sid)
                if handler is None:
                    handler = internal.get(sid)
                    if handler is None:
                        return pos, stop + 2, _SCAN_ORIGINAL, (sid, subject, reply, payload, hdr)
                pos = stop + 2
                in_msgs += 1
                in_bytes += needed - hsize
                # Messages of a consumer mostly share their subject: keep one copy of it
                # (buffered messages hold on to it).
                if subject == last_subject:
                    subject = last_subject
                else:
                    last_subject = subject
                try:
                    handler(subject, reply, payload, hdr)
                except Exception:
                    logger.exception("the handler of a message on %r failed", subject)
        finally:
            self.last_subject = last_subject
            if in_msgs:
                stats = self.stats
                stats["in_msgs"] += in_msgs
                stats["in_bytes"] += in_bytes
            if sunk:
                _hand_on(sink, sunk)
        return pos, pos, _SCAN_END, None

    def restore(self, nc: NatsClient) -> None:
        """Give nats-py its own ``_process_msg``, ``parse`` and transport protocol back."""
        original = self._original()
        if original is not None:
            nc._process_msg = original  # type: ignore[method-assign,assignment]
        ps = self.ps
        if ps is not None and "parse" in vars(ps):
            del ps.parse
        reads = self._reads
        if reads is not None:
            self._reads = None
            reads.uninstall()


def _client_read_size() -> int | None:
    """How much nats-py's read loop asks its stream reader for (None where it moved)."""
    try:
        from nats.aio import client
    except ImportError:
        return None
    size = getattr(client, "DEFAULT_BUFFER_SIZE", None)
    return size if type(size) is int and size > 0 else None


_READ_SIZE = _client_read_size()


def _asyncio_transport(nc: NatsClient) -> asyncio.Transport | None:
    """The asyncio transport under nats-py's TCP transport (TLS included), else None.

    Only the standard library's transports (another event loop's, uvloop's
    say, gets no :class:`_DirectReads`; see :func:`_abort_transport` for any).
    """
    under = _socket_transport(nc)
    return under if isinstance(under, asyncio.Transport) else None


def _socket_transport(nc: NatsClient) -> Any:
    """Whatever transport nats-py's TCP transport (TLS included) writes to, else None."""
    writer = getattr(getattr(nc, "_transport", None), "_io_writer", None)
    return getattr(writer, "transport", None)


class _DirectReads(asyncio.Protocol):
    """Stands in front of nats-py's ``StreamReaderProtocol`` on one transport.

    The bytes the socket delivers go to :meth:`_Router.direct` while nats-py's
    read loop has parsed everything the stream reader was given (``handed``
    is 0) and is not inside the parser; what the router returns, and every
    byte while the read loop has some left, goes to the stream reader as
    before. Everything else (end of file, connection lost, write flow
    control) is passed on unchanged.
    """

    def __init__(
        self, router: _Router, transport: asyncio.Transport, inner: asyncio.Protocol
    ) -> None:
        self.router = router
        self.transport = transport
        self.inner = inner
        #: Bytes given to the stream reader that nats-py's read loop has not read yet.
        self.handed = 0

    @classmethod
    def install(cls, router: _Router, transport: asyncio.Transport) -> _DirectReads | None:
        """Put one in front of ``transport``'s stream reader protocol (None: not that kind)."""
        if transport.is_closing():
            return None
        inner = transport.get_protocol()
        if type(inner) is not asyncio.StreamReaderProtocol:
            return None
        reads = cls(router, transport, inner)
        transport.set_protocol(reads)
        return reads

    def uninstall(self) -> None:
        """Give the transport its stream reader protocol back (a closed one delivers nothing).

        A TLS transport closed twice (by the server, then by nats-py) has no
        protocol any more: ``get_protocol()`` raises there.
        """
        transport = self.transport
        if not transport.is_closing() and transport.get_protocol() is self:
            transport.set_protocol(self.inner)

    def data_received(self, data: bytes) -> None:
        if not self.handed:
            try:
                data = self.router.direct(data)
            except Exception as exc:
                # The read loop would turn this into a reconnect (ProtocolError);
                # raised here it would close the socket under nats-py's read loop,
                # which then ends without one. Drop the connection: nats-py sees
                # its end and reconnects.
                logger.warning("malformed protocol from the server (%r): reconnecting", exc)
                self.transport.abort()
                return
            if not data:
                return
        self.handed += len(data)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class RawSink:
    """Where the router's fast loop buffers the plain messages of a subscription itself.

    For a plain message (MSG: no headers) on the subscription it appends
    ``factory(subject, reply, payload, None, context)`` with ``append``
    instead of calling the handler, and tells ``arrived(count)`` how many it
    appended, before anything else (a message for the handler, a PING, the
    end of the read) is handled: the owner sees its messages in order and
    counted. Messages with headers, and every message nats-py's parser frames
    (and on the fallback), still go to the handler, which must buffer plain
    messages the same way.

    ``bulk`` (column mode, see ``_columns``; None: off) frames a whole run of
    messages at once: called as ``bulk(view, pos, size, sid_text,
    first_end)`` at a message of the sink (plain or with headers), it returns
    None (the loop goes on as without it) or a run of ``count`` messages
    ending at ``end``, appended with ``append`` as one item and counted as
    ``count``.
    """

    __slots__ = ("append", "arrived", "bulk", "context", "factory")

    def __init__(
        self,
        append: Callable[[Any], None],
        factory: Callable[[bytes, bytes, bytes, bytes | None, Any], Any],
        context: Any,
        arrived: Callable[[int], None],
        bulk: Callable[[bytes, int, int, bytes, int], Any] | None = None,
    ) -> None:
        self.append = append
        self.factory = factory
        self.context = context
        self.arrived = arrived
        self.bulk = bulk


def _hand_on(sink: RawSink | None, count: int) -> int:
    """Tell ``sink`` how many messages the fast loop put into its buffer; 0 (none left)."""
    if sink is not None:
        try:
            sink.arrived(count)
        except Exception:
            logger.exception("the arrival callback of a raw sink failed")
    return 0


def _ends_op(view: bytes, end: int, size: int) -> bool:
    r"""True unless ASCII whitespace follows a PING, PONG or +OK line at ``end``.

    nats-py's patterns for them end in ``\s*\r\n``: blank lines after the
    line belong to it there.
    """
    if end == size:
        return True
    after = view[end]
    return after != 32 and not 9 <= after <= 13


def _parser_hook_available(nc: NatsClient) -> bool:
    """True when nats-py's parser is unhooked and has the shape :meth:`_Router._parse` needs."""
    return _parser_shape_ok(nc) and "parse" not in vars(nc._ps)


def _parser_shape_ok(nc: NatsClient) -> bool:
    """True when nats-py's parser has the shape :meth:`_Router._parse` relies on."""
    ps = getattr(nc, "_ps", None)
    return (
        _NatsParser is not None
        and type(ps) is _NatsParser
        and getattr(ps, "nc", None) is nc
        and callable(getattr(nc, "_process_ping", None))
        and callable(getattr(nc, "_process_pong", None))
        and callable(getattr(_NatsParser, "parse", None))
        and isinstance(getattr(ps, "buf", None), bytearray)
        and isinstance(getattr(ps, "msg_arg", None), dict)
        and all(
            isinstance(getattr(ps, name, None), int)
            for name in ("state", "needed", "header_needed")
        )
        and _AWAITING_CONTROL == 1
        and _AWAITING_PAYLOAD == 2
    )


#: The nats-py client attributes the fast path uses, with the types they must have.
_FAST_PATH_ATTRIBUTES: dict[str, type | tuple[type, ...]] = {
    "_pending": list,
    "_pending_data_size": int,
    "_max_pending_size": int,
    "_max_payload": int,
    "_flush_queue": (asyncio.Queue, type(None)),
    "stats": dict,
}


def fast_path_missing(nc: NatsClient) -> list[str]:
    """What the fast path needs and this nats-py client lacks (empty: all there)."""
    missing = [
        name
        for name, kind in _FAST_PATH_ATTRIBUTES.items()
        if not isinstance(getattr(nc, name, None), kind)
    ]
    if not callable(getattr(nc, "_process_msg", None)):
        missing.append("_process_msg")
    if not hasattr(nc, "_transport"):
        missing.append("_transport")
    if not _parser_shape_ok(nc):
        missing.append("_ps (the protocol parser and its states)")
    init = getattr(NatsSubscription, "__init__", None)
    if "_id" not in getattr(getattr(init, "__code__", None), "co_names", ()):
        missing.append("Subscription._id")
    return missing


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


_ROUTERS: weakref.WeakKeyDictionary[NatsClient, _Router] = weakref.WeakKeyDictionary()
_BACKGROUND: set[asyncio.Task[None]] = set()


def _router(nc: NatsClient) -> _Router:
    router = _ROUTERS.get(nc)
    if router is None:
        router = _ROUTERS[nc] = _Router(nc)
    return router


def _release_router(nc: NatsClient, router: _Router) -> None:
    """Give nats-py its parser callback back once nothing is routed any more."""
    if not router.routes and not router.internal and _ROUTERS.get(nc) is router:
        router.restore(nc)
        del _ROUTERS[nc]


class RawSubscription:
    """A subscription whose messages go to a synchronous raw handler."""

    __slots__ = ("_conn", "_delivery", "_sub", "sid", "subject")

    def __init__(
        self,
        conn: Conn,
        sub: NatsSubscription,
        subject: str,
        delivery: _FallbackDelivery | None = None,
    ) -> None:
        self._conn = conn
        self._sub: NatsSubscription | None = sub
        #: The routed sid (fast path; 0 on the fallback, where nothing is routed).
        self.sid: int = sub._id if delivery is None else 0
        self.subject = subject
        self._delivery = delivery

    @property
    def active(self) -> bool:
        """True until unsubscribed."""
        return self._sub is not None

    def detach(self) -> None:
        """Stop delivering to the handler at once (the UNSUB follows in ``unsubscribe``)."""
        if self._delivery is not None:
            self._delivery.handler = None
            return
        nc = self._conn.nc
        router = _ROUTERS.get(nc)
        if router is not None:
            router.routes.pop(self.sid, None)
            router.internal.pop(self.sid, None)
            router.sinks.pop(self.sid, None)
            _release_router(nc, router)

    async def unsubscribe(self) -> None:
        """Unsubscribe (idempotent; a closed connection is not an error)."""
        sub, self._sub = self._sub, None
        if sub is None:
            return
        self.detach()
        await self._conn.unsubscribe(sub)


class _FallbackDelivery:
    """The fallback's nats-py callback: rebuilds the raw pieces for the raw handler.

    nats-py runs it in the subscription's task and hands its exceptions to the
    connection's error callback (aiojetstream's default logs them).
    """

    __slots__ = ("handler",)

    def __init__(self, handler: RawHandler) -> None:
        self.handler: RawHandler | None = handler

    async def deliver(self, msg: NatsMsg) -> None:
        """Hand one message to the raw handler (nothing once detached)."""
        handler = self.handler
        if handler is not None:  # None once detached
            handler(
                msg.subject.encode(),
                msg.reply.encode(),
                msg.data,
                _rebuild_header_block(msg.headers),
            )


async def _subscribe_raw(
    conn: Conn,
    subject: str,
    handler: RawHandler,
    internal: bool = False,
    sink: RawSink | None = None,
) -> RawSubscription:
    nc = conn.nc
    if conn.fast:
        with translate(subject):
            sub = await nc.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        router = _router(nc)
        (router.internal if internal else router.routes)[sub._id] = handler
        if sink is not None:
            router.sinks[sub._id] = sink
        return RawSubscription(conn, sub, subject)
    delivery = _FallbackDelivery(handler)
    with translate(subject):
        sub = await nc.subscribe(
            subject, cb=delivery.deliver, pending_msgs_limit=0, pending_bytes_limit=0
        )
    return RawSubscription(conn, sub, subject, delivery)


#: The most bytes of subject plus reply a PUB/HPUB line may carry: with the rest of
#: the line it stays under the server's default ``max_control_line`` (4,096 bytes),
#: past which the server answers -ERR and closes the connection for good.
MAX_SUBJECT_LINE: Final = 4000


def check_line(subject: bytes, reply: bytes) -> None:
    """Refuse a subject and reply too long for one protocol line (InvalidSubjectError).

    The backstop of every send: subjects the library builds (a key-value key, an
    object's name, a filter) must not cost the connection either.
    """
    if len(subject) + len(reply) > MAX_SUBJECT_LINE:
        raise InvalidSubjectError(
            f"subject {subject[:40]!r}... is {len(subject)} bytes: too long for the server's "
            f"protocol line ({MAX_SUBJECT_LINE} bytes with the reply), which would close "
            "the connection; nothing was sent"
        )


def pub_command(subject: bytes, reply: bytes, payload: bytes, header_block: bytes | None) -> bytes:
    """The PUB (or, with a header block, HPUB) protocol command of one message."""
    if header_block:
        size = len(header_block)
        if reply:
            return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
                subject,
                reply,
                size,
                size + len(payload),
                header_block,
                payload,
            )
        return b"HPUB %b %d %d\r\n%b%b\r\n" % (
            subject,
            size,
            size + len(payload),
            header_block,
            payload,
        )
    if reply:
        return b"PUB %b %b %d\r\n%b\r\n" % (subject, reply, len(payload), payload)
    return b"PUB %b %d\r\n%b\r\n" % (subject, len(payload), payload)


#: Queued bytes after which :meth:`Conn.ack_nowait` writes the outgoing buffer at once
#: (about 55 acks; they would otherwise wait until the event loop runs the flusher).
ACK_WRITE_BYTES = 4096
#: The end of an ack's PUB command, after its subject, for the usual payloads.
_ACK_TAILS = {
    payload: b" %d\r\n%b\r\n" % (len(payload), payload)
    for payload in (b"+ACK", b"-NAK", b"+WPI", b"+TERM")
}


def _write_pending(nc: NatsClient) -> bool:
    """Write nats-py's outgoing buffer now, as its flusher task would; True if written.

    The flusher finds the buffer empty afterwards. Only over nats-py's TCP
    transport (TLS included), whose writes go out at once: other transports
    (websockets) send in the flusher's ``drain()``. While disconnected the
    buffer is the reconnect buffer and stays for nats-py to send.
    """
    transport = nc._transport
    pending = nc._pending
    if (
        not pending
        or _TcpTransport is None
        or not isinstance(transport, _TcpTransport)
        or not nc.is_connected
    ):
        return False
    nc._pending = []
    nc._pending_data_size = 0
    transport.writelines(pending)
    return True


def enqueue_many(nc: NatsClient, cmds: list[bytes], payload_size: int) -> None:
    """Queue ready-made PUB/HPUB commands as one write (fast path; as :func:`_enqueue`)."""
    _enqueue(nc, b"".join(cmds), payload_size, len(cmds))


def enqueue(nc: NatsClient, cmds: bytes, payload_size: int, count: int) -> None:
    """Queue ``count`` ready-made PUB/HPUB commands, joined, as one write (fast path)."""
    _enqueue(nc, cmds, payload_size, count)


def _enqueue(nc: NatsClient, cmd: bytes, payload_size: int, msgs: int = 1) -> None:
    """Append a ready-made command to nats-py's pending buffer and wake its flusher.

    While disconnected the command waits in the reconnect buffer (written after
    the re-subscriptions once reconnected), as nats-py's own publish does.
    ``msgs``: how many messages ``cmd`` holds (for nats-py's statistics).
    """
    connected = nc.is_connected
    if not connected:
        limit = nc._max_pending_size
        if limit <= 0 or nc._pending_data_size + len(cmd) > limit:
            raise DisconnectedError("disconnected: the reconnect buffer is full")
    nc._pending.append(cmd)
    nc._pending_data_size += len(cmd)
    stats = nc.stats
    stats["out_msgs"] += msgs
    stats["out_bytes"] += payload_size
    queue = nc._flush_queue
    if connected and queue is not None and queue.empty():
        queue.put_nowait(asyncio.get_running_loop().create_future())


class _Requests:
    """The requests of one nats-py client: one wildcard reply inbox, raw replies.

    Each request gets a token (a counter) under the inbox prefix; its reply
    completes the request's future straight from the parser. Timeouts: the
    requests whose deadlines come in the order they were sent (every request
    with the same timeout) share one timer handle, armed for the earliest of
    them that is still waiting (:meth:`expire`); a request due before the
    last one queued gets a timer handle of its own.
    """

    def __init__(self) -> None:
        # No reference to the client: it is the key of _REQUESTS.
        self.prefix = b""
        self.prefix_len = 0
        self.futures: dict[bytes, asyncio.Future[Reply]] = {}
        self.counter = 0
        self.started = False
        self.lock = asyncio.Lock()
        #: (deadline, future, subject) in the order of their deadlines.
        self.deadlines: collections.deque[tuple[float, asyncio.Future[Reply], str]] = (
            collections.deque()
        )
        self.timer: asyncio.TimerHandle | None = None

    def time_out_at(
        self,
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        fut: asyncio.Future[Reply],
        subject: str,
    ) -> asyncio.TimerHandle | None:
        """Fail ``fut`` by a timeout at ``deadline``; a handle to cancel when answered, or None."""
        deadlines = self.deadlines
        if deadlines and deadline < deadlines[-1][0]:
            return loop.call_at(deadline, _time_out, fut, subject)
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()
        deadlines.append((deadline, fut, subject))
        if self.timer is None:
            self.timer = loop.call_at(deadlines[0][0], self.expire, loop)
        return None

    def expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fail the requests past their deadline; arm the timer for the next one waiting."""
        self.timer = None
        deadlines = self.deadlines
        now = loop.time()
        while deadlines:
            deadline, fut, subject = deadlines[0]
            if not fut.done():
                if deadline > now:
                    self.timer = loop.call_at(deadline, self.expire, loop)
                    return
                _time_out(fut, subject)
            deadlines.popleft()

    def stop_timer(self) -> None:
        """Forget every deadline (the requests were failed)."""
        self.deadlines.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def start(self, nc: NatsClient) -> None:
        async with self.lock:
            if self.started:
                return
            prefix = (nc.new_inbox() + ".").encode()
            with translate():
                sub = await nc.subscribe(
                    prefix.decode() + "*", pending_msgs_limit=0, pending_bytes_limit=0
                )
            _router(nc).internal[sub._id] = self.on_reply
            self.prefix = prefix
            self.prefix_len = len(prefix)
            self.started = True

    def on_reply(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        fut = self.futures.pop(subject[self.prefix_len :], None)
        if fut is not None and not fut.done():
            fut.set_result((data, hdr))


_REQUESTS: weakref.WeakKeyDictionary[NatsClient, _Requests] = weakref.WeakKeyDictionary()


def fail_requests(nc: NatsClient) -> None:
    """Fail the requests of ``nc`` still waiting for a reply: it closed for good.

    Without this they waited out their whole timeout and then reported a
    timeout. On the fallback path the requests are nats-py's (its response map,
    where it has one); nats-py's own error there is translated by the request.
    """
    mux = _REQUESTS.get(nc)
    for fut in list(mux.futures.values()) if mux is not None else ():
        if not fut.done():
            fut.set_exception(ConnectionClosedError("the connection closed before the reply came"))
    if mux is not None:
        mux.stop_timer()
    theirs = getattr(nc, "_resp_map", None)
    if isinstance(theirs, dict):
        for fut in list(theirs.values()):
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.set_exception(nats_errors.ConnectionClosedError())


def _time_out(fut: asyncio.Future[Reply], subject: str) -> None:
    if not fut.done():
        fut.set_exception(JetStreamTimeoutError(f"timed out waiting for a reply on {subject!r}"))


async def _request(
    conn: Conn, subject: str, payload: bytes, timeout: float, header_block: bytes | None
) -> Reply:
    nc = conn.nc
    if nc.is_closed:
        raise ConnectionClosedError("the connection is closed")
    check_timeout(timeout)  # a wrong one was sent, then reported as a failure
    if not conn.fast:
        if len(subject) > MAX_SUBJECT_LINE // 4 - 70:  # else short in any encoding
            check_line(subject.encode(), b"_INBOX." + b"x" * 60)  # nats-py's inbox, at most
        headers = decode_header_block(header_block)
        with translate(subject):
            msg = await nc.request(subject, payload, timeout=timeout, headers=headers)
        return msg.data, _rebuild_header_block(msg.headers)
    mux = _REQUESTS.get(nc)
    if mux is None:
        mux = _REQUESTS[nc] = _Requests()
    if not mux.started:
        await mux.start(nc)
    if nc.is_draining_pubs:
        raise ConnectionClosedError("the connection is draining")
    if not subject or _BAD_SUBJECT.search(subject):
        raise InvalidSubjectError(f"invalid subject {subject!r}")
    subj = subject.encode()
    if len(subj) + len(mux.prefix) + 16 > MAX_SUBJECT_LINE:
        check_line(subj, mux.prefix + b"%x" % (mux.counter + 1))
    if len(payload) > nc._max_payload:
        raise MaxPayloadExceededError("message exceeds the server's max_payload")
    mux.counter += 1
    token = b"%x" % mux.counter
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Reply] = loop.create_future()
    futures = mux.futures
    futures[token] = fut
    try:
        cmd = pub_command(subj, mux.prefix + token, payload, header_block)
        transport = nc._transport
        if (
            not nc._pending
            and _TcpTransport is not None
            and isinstance(transport, _TcpTransport)
            and nc.is_connected
        ):
            # Nothing is queued before it: write it now rather than wake the
            # flusher task first (one event-loop round trip less per request).
            # Only over TCP (TLS included): a websocket transport sends in the
            # flusher's drain(), so there the command is queued and the flusher woken.
            transport.write(cmd)
            stats = nc.stats
            stats["out_msgs"] += 1
            stats["out_bytes"] += len(payload)
        else:
            _enqueue(nc, cmd, len(payload))
        timer = mux.time_out_at(loop, loop.time() + timeout, fut, subject)
        if timer is None:
            data, hdr = await fut
        else:
            try:
                data, hdr = await fut
            finally:
                timer.cancel()
    finally:
        futures.pop(token, None)
    if hdr is not None and hdr.startswith(_NO_RESPONDERS):
        raise NoRespondersError(f"no responders on {subject!r}")
    return data, hdr


def _publish_in_task(
    nc: NatsClient,
    subject: bytes,
    payload: bytes,
    reply: bytes,
    header_block: bytes | None,
    on_error: Callable[[JetStreamError], None] | None,
) -> None:
    """The fallback of :meth:`Conn.publish_nowait`: nats-py's ``publish`` in a task.

    Tasks start in creation order and nats-py queues the command before its
    first suspension, so publishes keep their order. The task's failure (or
    cancellation) goes to ``on_error``; nothing is dropped silently.
    """
    if nc.is_draining_pubs:
        raise ConnectionClosedError("the connection is draining")
    text = subject.decode()
    coro = nc.publish(
        text, payload, reply=reply.decode(), headers=decode_header_block(header_block)
    )
    task = asyncio.get_running_loop().create_task(coro)
    _BACKGROUND.add(task)

    def done(task: asyncio.Task[None]) -> None:
        _BACKGROUND.discard(task)
        if task.cancelled():
            error: JetStreamError = ConnectionClosedError(
                f"the publish on {text!r} was cancelled before it was written"
            )
        else:
            exc = task.exception()
            if exc is None:
                return
            error = as_jetstream_error(exc, text)
        if on_error is None:
            logger.warning("a publish on %r failed: %s", text, error)
        else:
            on_error(error)

    task.add_done_callback(done)


def as_jetstream_error(exc: BaseException, subject: str = "") -> JetStreamError:
    """``exc`` in the aiojetstream tree: :func:`translate` for nats-py's errors, else wrapped."""
    if isinstance(exc, JetStreamError):
        return exc
    if isinstance(exc, nats_errors.Error):
        try:
            with translate(subject):
                raise exc
        except JetStreamError as translated:
            return translated
    wrapped = JetStreamError(f"nats-py failed on {subject!r}: {exc!r}")
    wrapped.__cause__ = exc
    return wrapped


def decode_header_block(block: bytes | None) -> dict[str, str] | None:
    """The user headers of a header block, for nats-py (fallback path only)."""
    if not block:
        return None
    headers: dict[str, str] = {}
    for line in block.decode().split("\r\n")[1:]:
        key, sep, value = line.partition(": ")
        if sep:
            headers[key] = value
    return headers or None


# --------------------------------------------------------------------------- reconnects and close
#
# Reconnects: which server comes next, and no wait on the connection given up.
#
# nats-py's own choice shuffles the server pool and takes the first server,
# sleeping ``reconnect_time_wait`` first when that server was tried recently.
# After a crash that can mean a 2 s sleep before the dead server refuses again;
# after a hang (the server was SIGSTOPped and the pings went unanswered) it can
# mean connecting to the hung server again, whose kernel still accepts the TCP
# connection, and waiting ``connect_timeout`` (2 s) for an INFO that never
# comes, while the other nodes are healthy (RELIABILITY P3/P4).
#
# :class:`NextServer` keeps nats-py's random order but first tries, after a
# disconnect, the servers not tried since (never the one just lost); once all
# were tried, the one tried longest ago, not before ``reconnect_time_wait``
# after its last attempt (the delay nats-py would sleep).
#
# :func:`drop_unsent_on_reconnect`: before reconnecting, nats-py closes the
# old connection and waits until it is closed; asyncio first writes out what
# the transport still buffers. A hung server (SIGSTOP, a partition) whose
# socket buffers are full never reads it, so that wait never ends: with 20 MB
# of ``publish_async`` queued during a SIGSTOP the client stayed in
# RECONNECTING for as long as the server hung, though two other nodes were
# healthy. The connection being given up is aborted instead: what it could
# not send is lost with it either way (and the publishes waiting for it have
# failed with ``DisconnectedError``).
#
# Closing is bounded the same way: nats-py flushes what is pending and waits
# for the socket to close, both forever when the server hangs (SIGSTOP, a
# partition) with data queued; :func:`_bound_close_waits` gives both
# CLOSE_FLUSH_TIMEOUT together, then aborts the connection.

CLOSE_FLUSH_TIMEOUT: Final = 5.0


def _abort_transport(nc: NatsClient) -> None:
    """Abort nats-py's socket at once (unsent data is dropped; TCP and TLS transports)."""
    transport = _socket_transport(nc)
    if transport is not None:
        transport.abort()


def _bound_close_waits(nc: NatsClient, timeout: float) -> None:
    """Bound the flush and the wait for the socket that nats-py's ``close()`` does."""
    transport = nc._transport
    if transport is None:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    aborted: list[bool] = []

    def bounded(original: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        async def wait() -> None:
            try:
                async with asyncio.timeout_at(deadline):
                    await original()
            except TimeoutError:
                if not aborted:
                    aborted.append(True)
                    logger.warning(
                        "closing: the server took nothing for %.1f s; the connection is "
                        "aborted and what it had not taken is lost",
                        timeout,
                    )
                _abort_transport(nc)
            except OSError as exc:
                # The connection was already lost (the client was reconnecting):
                # nothing more can be sent, and raising would end nats-py's close
                # half way.
                logger.debug("closing: the connection was already lost (%s)", exc)
                _abort_transport(nc)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the caller's close was cancelled
                # nats-py's reconnect task waited on the same close waiter (a TLS
                # close takes a while) and the close cancelled that task, and with it
                # the waiter: the socket is closing all the same. Raised, it ended
                # nats-py's close half way and reached the caller as a cancellation.
                logger.debug(
                    "closing: the wait for the socket was cancelled with nats-py's reconnect"
                )
                _abort_transport(nc)

        return wait

    for name in ("drain", "wait_closed"):
        original = getattr(transport, name, None)
        if original is not None:
            setattr(transport, name, bounded(original))


class NextServer:
    """A ``reconnect_to_server_handler``: untried servers first, each retried once per wait.

    Attach the client with :meth:`attach` once it is connected (the handler is
    only called on reconnects).
    """

    def __init__(self) -> None:
        self._nc: NatsClient | None = None
        self._episode: int | None = None  # nats-py's reconnect count at this disconnect
        self._tried: dict[str, float] = {}  # netloc -> its last attempt in this episode

    def attach(self, nc: NatsClient) -> None:
        self._nc = nc

    def __call__(self, servers: list[Server], info: dict[str, Any]) -> tuple[Server | None, float]:
        """Return ``(server, delay)``: the server to try, after ``delay`` seconds."""
        if not servers:
            return None, 0.0  # nats-py raises NoServersError before asking
        nc = self._nc
        now = time.monotonic()
        wait = 0.0
        if nc is not None:
            wait = float(nc.options.get("reconnect_time_wait", 0) or 0)
            episode = int(nc.stats.get("reconnects", 0))
            if episode != self._episode:  # connected since the last call: a new disconnect
                self._episode = episode
                self._tried = {}
            current = nc._current_server  # the server lost, or the one that just failed
            if current is not None:
                last = current.last_attempt
                self._tried[current.uri.netloc] = now if last is None else last
        tried = self._tried
        fresh = [s for s in servers if s.uri.netloc not in tried]
        if fresh:
            return fresh[0], 0.0
        chosen = min(servers, key=lambda s: tried[s.uri.netloc])
        return chosen, max(0.0, tried[chosen.uri.netloc] + wait - now)


def drop_unsent_on_reconnect(nc: NatsClient) -> None:
    """Abort, instead of flushing, the connection nats-py gives up to reconnect.

    Wraps nats-py's ``_process_op_err``, the one way into a reconnect after
    an error (a read or write error, a stale connection after unanswered
    pings, the server's ``-ERR 'Stale Connection'``).
    """
    original: Callable[[Exception], Awaitable[None]] | None = getattr(nc, "_process_op_err", None)
    if original is None:  # another nats-py: keep its own reconnect
        return

    async def process_op_err(error: Exception) -> None:
        if (
            nc.options.get("allow_reconnect")
            and (nc.is_connected or nc.is_connecting)
            and not (nc.is_closed or nc.is_reconnecting)
        ):
            _abort_transport(nc)
        await original(error)

    nc._process_op_err = process_op_err  # type: ignore[method-assign,assignment]

"""Connecting: nats-py's ``connect`` with aiojetstream's options, errors and defaults.

Safer defaults (keep-alive, a bounded first connection), ``tls://`` or a
TLS option always meaning TLS (``_tls``), errors that name what failed
without a secret in them, and user callbacks whose exceptions are logged,
not raised into nats-py.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import ssl
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final

from .. import _bounds as B
from .._creds import check_credentials
from .._errors import (
    AuthorizationError,
    ConnectionFailedError,
    InvalidOptionError,
    JetStreamError,
    TLSError,
)
from .._redact import AT_SIGNS, connection_secrets, mentions, redact_servers, scrub
from .._validation import validate_inbox_prefix
from ._auth import REFUSALS, Refusals, closing_reason, is_auth_error
from ._nats import (
    FailedAttempt,
    NatsClient,
    abort_transport,
    accepted_on_reconnect,
    bound_internal_close,
    drop_unsent_on_reconnect,
    guard_auth_refusals,
    guard_connect_init,
    keep_last_error,
    nats_errors,
    websocket_missing,
)
from ._reconnect import NextServer
from ._requests import fail_requests
from ._tls import guard_tls, tls_option_given
from ._translate import translate

__all__ = [
    "CONNECT_ATTEMPTS",
    "CONNECT_RETRY_WAIT",
    "DEFAULT_MAX_OUTSTANDING_PINGS",
    "DEFAULT_PING_INTERVAL",
    "connect_nats",
    "logging_errors",
    "one_disconnect_each",
]

logger = logging.getLogger("aiojetstream")

#: Our default keep-alive: a dead or hung server is noticed within
#: ping_interval * (max_outstanding_pings + 1) = 15 s (nats-py's default is 360 s).
DEFAULT_PING_INTERVAL = 5
DEFAULT_MAX_OUTSTANDING_PINGS = 2


#: then fails (as the Go client does by default) instead of nats-py's 60 x 2 s.
CONNECT_ATTEMPTS = 2
CONNECT_RETRY_WAIT = 0.25

#: nats-py's duration options (seconds) -> whether 0 is allowed. Read as every duration
#: of the library (a number, a ``timedelta``, ``"2s"``): nats-py took ``"2s"`` as it
#: came and failed later, in its own tasks (a reconnect spun at full CPU, flooding
#: the log; the pings stopped for good).
_DURATION_OPTIONS: Final = {
    "ping_interval": False,
    "reconnect_time_wait": True,
    "connect_timeout": False,
    "drain_timeout": False,
    "flush_timeout": False,
}
#: nats-py's count options -> the least each may be (None: any int; a negative number
#: of reconnect attempts is for ever, a flusher queue of 0 unbounded, as nats-py has them).
_COUNT_OPTIONS: Final[dict[str, int | None]] = {
    "max_reconnect_attempts": None,
    "max_outstanding_pings": 1,
    "pending_size": 0,
    "flusher_queue_size": 0,
}


def check_nats_options(options: dict[str, Any]) -> None:
    """Read nats-py's duration options as seconds and check its counts, in place.

    Raises:
        InvalidOptionError: a duration that is none (see :func:`._bounds.seconds`),
            or a count that is not an int at least its least.

    """
    for key, zero in _DURATION_OPTIONS.items():
        if key in options and not (key == "flush_timeout" and options[key] is None):
            options[key] = B.seconds(options[key], key, zero=zero)
    for key, least in _COUNT_OPTIONS.items():
        if key not in options:
            continue
        value = options[key]
        if isinstance(value, bool) or not isinstance(value, int):
            hint = " (-1: for ever)" if key == "max_reconnect_attempts" else ""
            raise InvalidOptionError(f"{key} must be an int{hint}, got {B.shown(value)}")
        if least is not None and value < least:
            raise InvalidOptionError(
                f"{key} must be an int of at least {least}, got {B.shown(value)}"
            )


async def _log_connection_error(exc: Exception) -> None:
    """Default nats-py error callback: one log line, not a traceback per attempt.

    The error comes screened (:func:`initial_error_cb`): no secret in its text.
    Not called for the attempts of the first connection: their errors are in
    the exception :func:`connect_nats` raises (logged at debug level only).
    """
    logger.warning("nats connection error: %s", exc or type(exc).__name__)


#: The schemes of server URLs (nats-py's and nats.go's); ws and wss need aiohttp.
SCHEMES: Final = ("nats", "tls", "ws", "wss")
#: A URL's scheme and the slashes after it; ``host:port`` has none (read as nats://).
_SCHEME_PREFIX: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(/+)")
_ACCEPTED: Final = (
    "give nats://, tls://, ws:// or wss:// URLs (host:port alone means nats://host:port)"
)


def _split_urls(servers: str | list[str]) -> list[str]:
    """The URLs of ``servers``, each stripped, its scheme lower-cased.

    Raises:
        InvalidOptionError: none given; a scheme other than nats, tls, ws and
            wss (nats-py took ``http://h:4222`` for the host ``http``: a false
            DNS error); a scheme not followed by exactly ``//``
            (``nats:/h:4222``, the same); a ws or wss URL without aiohttp.
            The URL is named through :func:`redact_servers`, and its scheme
            only when it holds no ``@`` (it could be a piece of a token).

    """
    items = [servers] if isinstance(servers, str) else list(servers)
    urls = []
    for item in items:
        for piece in item.split(","):
            url = piece.strip()
            if url:
                urls.append(_checked_scheme(url, item))
    if not urls:
        raise InvalidOptionError("no server URL given")
    if any(u.startswith(("ws://", "wss://")) for u in urls) and websocket_missing():
        raise InvalidOptionError(
            "ws:// and wss:// URLs need aiohttp (nats-py's websocket transport), which is "
            "not installed: pip install aiohttp"
        )
    return urls


def _checked_scheme(url: str, item: str) -> str:
    """``url`` with its scheme lower-cased (nats-py reads only lower case), else refused."""
    found = _SCHEME_PREFIX.match(url)
    if found is None:
        return url  # host, host:port, user:password@host:port: nats-py adds nats://
    scheme, slashes = found.group(1).lower(), found.group(2)
    if scheme in SCHEMES and slashes == "//":
        return scheme + url[len(found.group(1)) :]
    where = redact_servers(item)
    hidden = any(sign in item for sign in AT_SIGNS)
    if scheme in SCHEMES:
        text = f"malformed server URL in {where}: write {scheme}://host:port"
    else:
        named = "" if hidden else f" {found.group(1)!r}"
        text = f"unsupported URL scheme{named} in {where}: {_ACCEPTED}"
    raise InvalidOptionError(text)


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
      A TLS option (``tls``, ``tls_hostname``, ``tls_handshake_first``) means
      the same for every server, ``nats://`` URLs, discovered servers and
      reconnects included. A server that offers TLS without requiring it
      (``allow_non_tls``) is upgraded (:func:`~._tls.guard_tls`).
    * A failed TLS handshake (untrusted certificate, hostname mismatch) raises
      :class:`TLSError` at once, without a second attempt (nats-py would then
      wait forever for the socket of the failed upgrade to close).
    * Refused credentials raise :class:`AuthorizationError`. A ``.creds`` file
      (``user_credentials``) is read and checked first, as nats-py reads it
      (:func:`~.._creds.check_credentials`): a missing or malformed one raises
      :class:`InvalidOptionError` at once (nats-py read it only once a server
      asked for a signature, and without a JWT line it spun forever).
    * No error, log line or error callback shows a secret: the servers are
      named through :func:`~._redact.redact_servers` (never credentials), and
      what nats-py reports is screened for the password, token, NKey seed and
      in-memory credentials given (the user's ``error_cb`` gets a
      :class:`JetStreamError` in place of an error that shows one). A
      chained cause that shows one is left out, as is nats-py's reason for
      refusing a URL (it quotes the URL).
    * A server whose INFO is not a JSON object, has a ``max_payload`` that is
      not an int from 1 to 2**31 - 1, or sends a line longer than the
      reader's limit (64 KiB) while connecting, fails that attempt: the first
      connection raises :class:`ConnectionFailedError` saying so (nats-py
      raised a bare ``AttributeError`` / ``ValueError``, or took the value and
      every publish raised a ``TypeError``).
    * A reconnect never starts with the server just lost and never waits to
      flush the connection it gives up (:class:`NextServer`,
      :func:`drop_unsent_on_reconnect`), unless ``reconnect_to_server_handler``
      is given.
    * Once connected, credentials refused (a JWT expired while connected, a
      password rotated on the server) are reported to the error callback and
      the client reconnects (reading a creds file again); a server refusing
      them twice in a row leaves the rotation, and with none left the client
      closes, its errors naming the refusal (``_auth``,
      :func:`~._nats.guard_auth_refusals`).
    * ``disconnected_cb`` runs once per lost connection, not again when nats-py
      closes a client already disconnected (:func:`one_disconnect_each`).
    * Every connection attempt starts clean: what an attempt that failed after
      its handshake left running (its read loop, pings, flusher, socket, part
      of a message in the parser) is stopped and dropped first
      (:func:`~._nats.guard_connect_init`).
    """
    urls = _split_urls(servers)
    check_nats_options(options)
    if "inbox_prefix" in options:
        # It starts every reply subject and the SUB of the wildcard reply inbox.
        options["inbox_prefix"] = validate_inbox_prefix(options["inbox_prefix"])
    check_credentials(options)  # nats-py would read them late, in the loop (and may hang)
    shown = redact_servers(servers)
    secrets = connection_secrets(servers, options)
    options.setdefault("ping_interval", DEFAULT_PING_INTERVAL)
    options.setdefault("max_outstanding_pings", DEFAULT_MAX_OUTSTANDING_PINGS)
    reconnect_attempts = options.pop("max_reconnect_attempts", 60)
    reconnect_wait = options.pop("reconnect_time_wait", 2)
    tls_everywhere = tls_option_given(options)
    wants_tls = tls_everywhere or any(u.startswith("tls://") for u in urls)
    if wants_tls and not options.get("tls"):
        options["tls"] = ssl.create_default_context()
    nc = NatsClient()
    tls_refusals: list[str] = []
    if wants_tls:
        guard_tls(nc, tls_refusals, every_server=tls_everywhere)
    # A malformed INFO, a signing callback that raises, a .creds file gone bad on a
    # reconnect: each a failed attempt (FailedAttempt), not a crash or a hang.
    files = {
        key: options[key]
        for key in ("user_credentials", "nkeys_seed", "nkeys_seed_str")
        if isinstance(options.get(key), str | os.PathLike | tuple)
    }
    recheck = functools.partial(check_credentials, files) if files else None
    given = frozenset(k for k in ("signature_cb", "user_jwt_cb") if options.get(k) is not None)
    guard_connect_init(nc, recheck, given)
    next_server: NextServer | None = None
    if options.get("reconnect_to_server_handler") is None:
        next_server = options["reconnect_to_server_handler"] = NextServer()
    connect_errors: list[Exception] = []
    # nats-py awaits these inside its read loop and reconnect task: one that raised
    # ended the reconnect for good. Theirs to log, not to end the connection with.
    for key in ("disconnected_cb", "reconnected_cb", "closed_cb", "discovered_server_cb"):
        if options.get(key) is not None:
            options[key] = logging_errors(options[key], key)
    if options.get("disconnected_cb") is not None:
        options["disconnected_cb"], options["reconnected_cb"] = one_disconnect_each(
            nc, options["disconnected_cb"], options.get("reconnected_cb")
        )
    options["reconnected_cb"] = _accepting(nc, options.get("reconnected_cb"))
    options["closed_cb"] = _failing_requests(nc, options.get("closed_cb"), secrets)
    user_error_cb = options.get("error_cb")
    options["error_cb"] = initial_error_cb(
        logging_errors(user_error_cb, "error_cb") if user_error_cb else _log_connection_error,
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
        failure = _connect_failure(
            exc, nc.last_error, connect_errors, tls_refusals, shown, len(urls), secrets
        )
        # The cause is chained unless something in it shows a secret; nats-py's
        # reason for refusing a URL quotes it (a ValueError from urllib).
        if failure is None:
            if not mentions(exc, secrets):
                with translate():
                    raise
            failure = JetStreamError(f"connection error: {scrub(str(exc), secrets)}")
        elif not _is_invalid_url(exc) and not mentions(exc, secrets):
            raise failure from exc
    except TLSError as exc:  # raised by the error callback out of nats-py's connect
        if _chains_a_secret(exc, secrets):
            failure = exc
        else:
            raise
    finally:
        connect_errors.append(_CONNECTED)  # the callback only forwards from now on
        if not nc.is_connected:
            # nats-py leaves the socket of a failed attempt open when it does not
            # reconnect (allow_reconnect=False): an invalid INFO, say.
            abort_transport(nc)
    if failure is not None:
        # Raised here, outside the except clause: no __context__ either.
        raise unchained(failure)
    nc.options["max_reconnect_attempts"] = reconnect_attempts
    nc.options["reconnect_time_wait"] = reconnect_wait
    if next_server is not None:
        next_server.attach(nc)
    drop_unsent_on_reconnect(nc)
    bound_internal_close(nc)
    refusals = REFUSALS[nc] = Refusals()
    refusals.known_error = nc.last_error
    guard_auth_refusals(nc, refusals)
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
    dialed: int,
    secrets: list[str],
) -> JetStreamError | None:
    """The error a failed first connection raises (None: :func:`translate` maps ``exc``).

    ``shown`` names the servers without credentials (a string of URLs with
    credentials shows fewer than the ``dialed`` ones); the text of an error
    nats-py reports is quoted, except for a refused URL: nats-py's reason
    quotes the URL. What is quoted, and the servers, are screened for
    ``secrets`` (:func:`scrub`); the library's own words never are: a password
    ``Xy9/pass`` blanked the "pass" of "password", which told that "pass" was
    part of it.
    """
    shown = scrub(shown, secrets)

    def quoted(text: object) -> str:
        return scrub(str(text), secrets)

    refused = next((e for e in reversed(connect_errors) if is_auth_error(e)), None)
    if refused is not None:
        return AuthorizationError(f"{shown} refused the credentials: {quoted(refused)}")
    if tls_refusals:
        return TLSError(f"refusing a plaintext connection: {quoted(tls_refusals[-1])}")
    if isinstance(last, ssl.SSLError) or isinstance(exc, ssl.SSLError):
        return TLSError(f"TLS handshake with {shown} failed: {quoted(last or exc)}")
    if _is_invalid_url(exc):
        hint = f" ({_URL_HINT})" if "***@" in shown else ""
        return InvalidOptionError(f"invalid server URL in {shown}{hint}")
    if isinstance(exc, OSError | TimeoutError | nats_errors.NoServersError | FailedAttempt):
        # Why the attempts failed (refused, unknown host...), each reason once,
        # rather than nats-py's closing "no servers available".
        attempts = [e for e in connect_errors if not isinstance(e, nats_errors.NoServersError)]
        reasons = list(dict.fromkeys(quoted(_reason(e)) for e in attempts))
        if not reasons:
            reasons = [quoted(_reason(last or exc))]
        servers = tuple(u.strip() for u in shown.split(","))
        tried = _tried(len(attempts) or 1, dialed)
        return ConnectionFailedError(
            f"could not connect to {shown} ({tried}): {'; '.join(reasons)}", servers
        )
    return None


def _tried(attempts: int, servers: int) -> str:
    """How often the servers were tried, in words (nats-py reports each failed attempt).

    Twice each, unless an attempt that reached a server failed with reconnects
    off (``allow_reconnect=False``: nats-py gives up after it).
    """
    if servers == 1:
        return {1: "tried once", 2: "tried twice"}.get(attempts, f"tried {attempts} times")
    if attempts == 2 * servers:
        return "each tried twice"
    return "1 attempt" if attempts == 1 else f"{attempts} attempts"


def _reason(exc: BaseException) -> str:
    """Why a connection attempt failed, in words (a bare ``TimeoutError`` says nothing)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    return str(exc) or type(exc).__name__


def _chains_a_secret(error: BaseException, secrets: list[str]) -> bool:
    """Whether what ``error`` chains (not its own text, the library's) shows a secret."""
    return mentions(error.__cause__, secrets) or mentions(error.__context__, secrets)


def unchained(error: JetStreamError) -> JetStreamError:
    """A new error of ``error``'s type and message, chaining nothing.

    For an error whose message the library wrote with what it quotes already
    screened (:func:`_connect_failure`) but whose chain shows a secret; a
    :class:`ConnectionFailedError` keeps its ``servers``.
    """
    text = str(error)
    if isinstance(error, ConnectionFailedError):
        return ConnectionFailedError(text, error.servers)
    try:
        return type(error)(text)
    except TypeError:  # an error type that takes more than a message
        return JetStreamError(text)


def logging_errors(
    callback: Callable[..., Awaitable[None]], name: str
) -> Callable[..., Awaitable[None]]:
    """``callback``, with whatever it raises logged instead of raised into nats-py."""

    async def call(*args: Any) -> None:
        try:
            await callback(*args)
        except Exception:
            logger.exception("the connection's %s raised", name)

    return call


def one_disconnect_each(
    nc: NatsClient,
    disconnected: Callable[[], Awaitable[None]],
    reconnected: Callable[[], Awaitable[None]] | None,
) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    """A disconnected and a reconnected callback: a lost connection is told once.

    nats-py calls its disconnected callback when the connection is lost and
    again when it closes the client, also when the connection was already
    lost (closed while reconnecting, or out of reconnect attempts). As with
    nats.go, that second call is dropped. (A reconnect attempt that connected
    and was then lost is another lost connection, told as such: what was sent
    on it may be lost.) :class:`~._client.Hub` does the same for its listeners.
    """
    client = weakref.ref(nc)  # the callbacks are kept by the client itself
    down = False

    async def on_disconnected() -> None:
        nonlocal down
        target = client()
        if down and (target is None or target.is_closed):
            return
        down = True
        await disconnected()

    async def on_reconnected() -> None:
        nonlocal down
        down = False
        if reconnected is not None:
            await reconnected()

    return on_disconnected, on_reconnected


def _accepting(
    nc: NatsClient, user_cb: Callable[[], Awaitable[None]] | None
) -> Callable[[], Awaitable[None]]:
    """A ``reconnected_cb`` that counts the server as having taken the credentials.

    Only a completed reconnect does (see :func:`~._nats.guard_auth_refusals`).
    """
    client = weakref.ref(nc)  # the callback is kept by the client itself

    async def reconnected() -> None:
        target = client()
        refusals = REFUSALS.get(target) if target is not None else None
        if target is not None and refusals is not None:
            accepted_on_reconnect(target, refusals)
            refusals.known_error = target.last_error
        if user_cb is not None:
            await user_cb()

    return reconnected


def _failing_requests(
    nc: NatsClient, user_cb: Callable[[], Awaitable[None]] | None, secrets: list[str]
) -> Callable[[], Awaitable[None]]:
    """A ``closed_cb`` that fails the requests in flight, then calls the user's.

    nats-py closes by itself too (reconnect attempts used up, credentials
    refused, any other ``-ERR`` but a permissions violation): the error it
    closed after, if it was not there when the client last connected, is
    kept for :func:`~._auth.closed_error` (screened of ``secrets``).
    """
    client = weakref.ref(nc)  # the callback is kept by the client itself

    async def closed() -> None:
        target = client()
        if target is not None:
            refusals = REFUSALS.get(target)
            if (
                refusals is not None
                and refusals.error is not None
                and isinstance(target.last_error, nats_errors.NoServersError)
            ):
                # nats-py gave up for want of a server that takes the credentials.
                keep_last_error(target, refusals.error)
            last = target.last_error
            if (
                refusals is not None
                and not refusals.closing
                and last is not None
                and last is not refusals.known_error
            ):
                reason = closing_reason(last)
                refusals.closed_by = None if reason is None else scrub(reason, secrets)
            fail_requests(target)
        if user_cb is not None:
            await user_cb()

    return closed


#: Marks the end of the initial connection in the error list of initial_error_cb.
_CONNECTED = Exception("connected")


def initial_error_cb(
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
    shown = scrub(shown, secrets)

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
            # nats-py's text screened, not the library's words (see _connect_failure).
            raise TLSError(
                f"TLS handshake with {shown} failed: {scrub(str(exc), secrets)}"
            ) from exc

    return error_cb


def _screened_error(exc: Exception, secrets: list[str]) -> Exception:
    """``exc``, or, when it (or what it chains) shows a secret, a safe stand-in."""
    if not mentions(exc, secrets):
        return exc
    return JetStreamError(f"{type(exc).__name__}: {scrub(str(exc), secrets)}")

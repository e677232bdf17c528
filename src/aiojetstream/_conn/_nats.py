"""The boundary to nats-py: the one module that imports it and reaches into its internals.

Every read or write of nats-py's private attributes (``nc._...``, the
protocol parser's state, the transports' insides) is in this module, and
nowhere else in aiojetstream (``tests/unit/test_nats_boundary.py`` pins
that by scanning the source). The other modules of ``_conn`` use nats-py's
public API, and the names re-exported here (:data:`NatsClient`,
:data:`nats_errors`, ...), only; what they need beyond it is a function of
this module: a hook (``_process_info``, ``_process_connect_init``,
``_process_op_err``, ``_process_err``, the state callbacks, ``_process_msg``
and the parser's ``parse``), the outgoing
buffer (:func:`enqueue`, :func:`write_pending`, :func:`ack_nowait`), the
transports (:func:`abort_transport`, :func:`bound_close_waits`), and
:func:`fast_path_missing`, the check that all of it has the shape relied on.

What the fast path relies on, verified on the nats-py versions
``pyproject.toml`` allows (2.16.x): the protocol parser (``Client._ps``:
its ``parse``, ``nc``, ``buf``, ``state``, ``needed``, ``header_needed``,
``msg_arg``; ``Client._process_ping`` and ``_process_pong``;
``AWAITING_CONTROL_LINE`` and ``AWAITING_MSG_PAYLOAD`` of
``nats.protocol.parser``), ``Client._process_msg``, the outgoing buffer
(``_pending``, ``_pending_data_size``, ``_max_pending_size``,
``_flush_queue``, ``_transport``), ``_max_payload`` and
``Subscription._id``; for reading where the socket delivers, also
``nats.aio.client.DEFAULT_BUFFER_SIZE`` (what the read loop asks for) and
``TcpTransport._io_writer`` (its asyncio transport), without which the read
loop parses everything; for an ``-ERR`` line read as sent, the parser module's
``ERR_RE`` (without it nats-py's parser reads it, lowercased). On the
fallback, a refused request inbox is renewed through ``_resp_sub_prefix`` and
``_subs`` (looked up defensively: without them it is not renewed).

It also holds :class:`Router`, the half of the fast-path router that hooks
nats-py's parser and drives the scan from its read buffer (the scan itself,
which needs nothing of nats-py, is ``_scan.Scanner``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import weakref
from collections.abc import Awaitable, Callable
from threading import get_ident as _thread_id
from typing import TYPE_CHECKING, Any, Final, Protocol

import nats.errors as nats_errors
from nats.aio.client import Client as NatsClient
from nats.aio.client import Server, Srv
from nats.aio.msg import Msg as NatsMsg
from nats.aio.subscription import Subscription as NatsSubscription

from .._bounds import shown
from .._errors import DisconnectedError, MaxPayloadExceededError
from ._reads import DirectReads
from ._scan import SCAN_END, SCAN_OTHER, SCAN_PING, SCAN_PONG, Scanner
from ._wire import ACK_TAILS, ACK_WRITE_BYTES

if TYPE_CHECKING:
    pass

__all__ = [
    "FAST_PATH_ATTRIBUTES",
    "MAX_PAYLOAD_LIMIT",
    "CredentialsFailed",
    "FailedAttempt",
    "InvalidServerInfo",
    "NatsClient",
    "NatsMsg",
    "NatsParser",
    "NatsSubscription",
    "Router",
    "Server",
    "Srv",
    "abandon",
    "abort_transport",
    "accepted_on_reconnect",
    "ack_nowait",
    "asyncio_transport",
    "bound_close_waits",
    "current_server",
    "drop_unsent_on_reconnect",
    "enqueue",
    "enqueue_many",
    "fail_nats_requests",
    "fast_path_missing",
    "forget_nats_request_inbox",
    "keep_last_error",
    "guard_auth_refusals",
    "guard_connect_init",
    "guard_permission_errors",
    "guard_process_info",
    "is_down",
    "nats_errors",
    "nats_request_inbox",
    "owning_loop",
    "payload_limit",
    "queue_unsub",
    "send_now",
    "set_state_callbacks",
    "state_callbacks",
    "subscription_id",
    "websocket_missing",
    "write_pending",
]

logger = logging.getLogger("aiojetstream")

#: How long closing may flush and wait for the socket before aborting it (``_reconnect``).
CLOSE_FLUSH_TIMEOUT: Final = 5.0


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
NatsParser, _AWAITING_CONTROL, _AWAITING_PAYLOAD = _parser_internals()


def _err_line() -> re.Pattern[bytes] | None:
    """nats-py's pattern of an ``-ERR`` line, to match at any position (None where it moved)."""
    try:
        from nats.protocol import parser
    except ImportError:
        return None
    pattern = getattr(getattr(parser, "ERR_RE", None), "pattern", None)
    if not isinstance(pattern, bytes) or not pattern.startswith(b"\\A-ERR"):
        return None
    return re.compile(pattern[2:])


#: An ``-ERR`` line as nats-py's parser matches it (its ``ERR_RE`` without ``\A``).
_ERR_LINE = _err_line()
#: What the router's loop returns for an ``-ERR`` line it hands on itself (see _parse_frames).
_SCAN_ERR: Final = 16
#: The text of the ``-ERR`` being processed, as the server sent it (nats-py's parser
#: hands ``_process_err`` the text lowercased), while the router processes it.
_ERR_TEXTS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _tcp_transport_class() -> Any:
    """nats-py's TCP transport class (None where it moved: nothing is written directly)."""
    try:
        from nats.aio import transport
    except ImportError:
        return None
    return getattr(transport, "TcpTransport", None)


_TcpTransport = _tcp_transport_class()


def _client_read_size() -> int | None:
    """How much nats-py's read loop asks its stream reader for (None where it moved)."""
    try:
        from nats.aio import client
    except ImportError:
        return None
    size = getattr(client, "DEFAULT_BUFFER_SIZE", None)
    return size if type(size) is int and size > 0 else None


_READ_SIZE = _client_read_size()


def asyncio_transport(nc: NatsClient) -> asyncio.Transport | None:
    """The asyncio transport under nats-py's TCP transport (TLS included), else None.

    Only the standard library's transports (another event loop's, uvloop's
    say, gets no :class:`DirectReads`; see :func:`abort_transport` for any).
    """
    under = _socket_transport(nc)
    return under if isinstance(under, asyncio.Transport) else None


def _socket_transport(nc: NatsClient) -> Any:
    """Whatever transport nats-py's TCP transport (TLS included) writes to, else None."""
    writer = getattr(getattr(nc, "_transport", None), "_io_writer", None)
    return getattr(writer, "transport", None)


def _parser_hook_available(nc: NatsClient) -> bool:
    """True when nats-py's parser is unhooked and has the shape :meth:`Router._parse` needs."""
    return _parser_shape_ok(nc) and "parse" not in vars(nc._ps)


def _parser_shape_ok(nc: NatsClient) -> bool:
    """True when nats-py's parser has the shape :meth:`Router._parse` relies on."""
    ps = getattr(nc, "_ps", None)
    return (
        NatsParser is not None
        and type(ps) is NatsParser
        and getattr(ps, "nc", None) is nc
        and callable(getattr(nc, "_process_ping", None))
        and callable(getattr(nc, "_process_pong", None))
        and callable(getattr(NatsParser, "parse", None))
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
FAST_PATH_ATTRIBUTES: dict[str, type | tuple[type, ...]] = {
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
        for name, kind in FAST_PATH_ATTRIBUTES.items()
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


def websocket_missing() -> bool:
    """Whether nats-py's websocket transport lacks aiohttp (it raises when a ws URL is dialed)."""
    from nats.aio import transport

    return getattr(transport, "aiohttp", None) is None


# --------------------------------------------------------------------------- hooks and small reads


def guard_process_info(
    nc: NatsClient, check: Callable[[Srv | None, dict[str, Any], bool], None]
) -> None:
    """Call ``check(server, info, initial_connection)`` before nats-py processes an INFO.

    ``server`` is the server nats-py is connected (or connecting) to. What
    ``check`` raises ends nats-py's processing of the INFO (and, on the
    initial connection, the connection) before anything is sent in reply.
    """
    original = nc._process_info

    async def guarded(info: dict[str, Any], initial_connection: bool = False) -> None:
        check(nc._current_server, info, initial_connection)
        await original(info, initial_connection=initial_connection)

    nc._process_info = guarded  # type: ignore[method-assign]


#: The largest ``max_payload`` a server can have (nats-server keeps it in an int32).
MAX_PAYLOAD_LIMIT: Final = 2**31 - 1


class FailedAttempt(nats_errors.Error):
    """A connection attempt that failed for a reason said in words.

    A ``nats.errors.Error``: nats-py's connect and reconnect loops take it as a
    failed attempt (the connection is closed, the next server tried).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


class InvalidServerInfo(FailedAttempt):
    """A server's INFO, or a line it sent while connecting, that can not be taken."""


class CredentialsFailed(FailedAttempt):
    """A ``signature_cb`` / ``user_jwt_cb`` that raised, or a .creds file gone bad."""


def _guard_auth_callbacks(
    nc: NatsClient, recheck: Callable[[], None] | None, given: frozenset[str]
) -> None:
    """Wrap nats-py's signing callbacks (once): what they raise fails the attempt.

    They run inside ``_process_connect_init``, on every attempt, reconnects
    included. A callback the user gave (its name in ``given``) is named in the
    error; nats-py's own (``user_credentials``, ``nkeys_seed``) re-read their
    files each time, so ``recheck`` (:func:`~.._creds.check_credentials`)
    reads them first: a .creds file replaced by a malformed one while
    connected made nats-py's reader spin for ever in the event loop on the
    next reconnect.
    """
    for attr, name in (("_signature_cb", "signature_cb"), ("_user_jwt_cb", "user_jwt_cb")):
        callback = getattr(nc, attr)
        if callback is None or getattr(callback, "_aiojetstream_guarded", False):
            continue
        user = name in given
        setattr(nc, attr, _guarded_auth(callback, name, None if user else recheck, user))


def _guarded_auth(
    callback: Callable[..., Any],
    name: str,
    recheck: Callable[[], None] | None,
    user: bool,
) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        if recheck is not None:
            try:
                recheck()
            except ValueError as exc:  # InvalidOptionError: never quotes the file
                raise CredentialsFailed(str(exc)) from None
        try:
            return callback(*args)
        except Exception as exc:
            what = f"the {name} given" if user else "reading the credentials"
            raise CredentialsFailed(
                f"{what} failed ({type(exc).__name__}: {str(exc)[:100]})"
            ) from exc

    call._aiojetstream_guarded = True  # type: ignore[attr-defined]
    return call


def guard_connect_init(
    nc: NatsClient,
    recheck: Callable[[], None] | None = None,
    given: frozenset[str] = frozenset(),
) -> None:
    """Make a malformed INFO (or line) while connecting a failed attempt, not a crash.

    nats-py's ``_process_connect_init`` raised a bare ``AttributeError`` for an
    INFO that is valid JSON but not an object (``INFO [1,2]``), and a bare
    ``ValueError`` for an INFO or ``-ERR`` line longer than its reader's limit
    (64 KiB), or an ``INFO`` without its blank; these escaped its connect loop
    and left the socket open. A ``max_payload`` that is not a positive int32
    (``"abc"``, null, ``-1``, ``1.5``, ``10**400``) was taken, and every
    publish then raised a ``TypeError`` or misjudged the limit. Each is now
    :class:`InvalidServerInfo`, raised before CONNECT is sent for the INFO's
    fields. A signing callback that raises fails the attempt with
    :class:`CredentialsFailed` (see :func:`_guard_auth_callbacks`; ``recheck``
    re-reads a ``user_credentials`` file first).

    Every attempt also starts clean of the one before it
    (:func:`_end_previous_attempt`, before its socket is opened and again
    before its handshake).
    """
    original_init = nc._process_connect_init
    original_info = nc._process_info
    original_connect: Callable[[Srv], Awaitable[None]] | None = getattr(
        nc, "_connect_to_server", None
    )

    async def connect_to_server(server: Srv) -> None:
        _end_previous_attempt(nc, abort=True)
        assert original_connect is not None
        await original_connect(server)

    async def connect_init() -> None:
        # The tasks cancelled when the socket was opened have ended by now: none of
        # them can have put the previous connection's bytes in the parser since.
        _end_previous_attempt(nc, abort=False)
        _guard_auth_callbacks(nc, recheck, given)
        try:
            await original_init()
        except OSError:
            raise  # ssl.SSLCertVerificationError is a ValueError too: nats-py's to handle
        except (AttributeError, TypeError, ValueError) as exc:
            raise InvalidServerInfo(
                f"the server sent an invalid INFO or an over-long line while connecting "
                f"({type(exc).__name__}: {str(exc)[:100]})"
            ) from exc

    async def process_info(info: Any, initial_connection: bool = False) -> None:
        if not isinstance(info, dict):
            raise InvalidServerInfo(
                f"the server sent an invalid INFO: a JSON {type(info).__name__}, not an object"
            )
        if "max_payload" in info:
            value = info["max_payload"]
            if type(value) is not int or not 0 < value <= MAX_PAYLOAD_LIMIT:
                raise InvalidServerInfo(
                    f"the server sent an invalid INFO: max_payload {shown(value)} is not an "
                    f"int from 1 to {MAX_PAYLOAD_LIMIT}"
                )
        await original_info(info, initial_connection=initial_connection)

    nc._process_connect_init = connect_init  # type: ignore[method-assign]
    nc._process_info = process_info  # type: ignore[method-assign]
    if original_connect is not None:
        nc._connect_to_server = connect_to_server  # type: ignore[method-assign,assignment]


#: The tasks nats-py starts for each connection (at the end of ``_process_connect_init``).
_CONNECTION_TASKS: Final = ("_reading_task", "_ping_interval_task", "_flusher_task")


def _end_previous_attempt(nc: NatsClient, *, abort: bool) -> None:
    """Stop what the previous connection (attempt) left running; forget its partial frame.

    nats-py's reconnect loop retries an attempt that failed after its
    handshake (its flush unanswered, say) without stopping the read loop,
    pings and flusher that attempt started or closing its socket, and its
    parser reset (``if self.is_reconnecting``) never runs there (the status
    is CONNECTING by then). The next connection's bytes then completed a
    message the failed attempt had received part of (a payload spliced from
    two connections), the read loop left over read the new socket too (a
    ``RuntimeError``, then one more reconnect) and the tasks outlived
    ``close()``. Here, at the start of every attempt (never from one of those
    tasks), they are cancelled; with ``abort`` (the new socket is not open yet)
    the previous socket is aborted; and the parser, nats-py's and the
    router's (:meth:`Router.forget_partial`), is emptied. The handshake reads
    its INFO and PONG lines apart from the parser: nothing of the new
    connection is lost.
    """
    current = asyncio.current_task()
    for name in _CONNECTION_TASKS:
        task = getattr(nc, name, None)
        if isinstance(task, asyncio.Task) and task is not current and not task.done():
            task.cancel()
    if abort:
        transport = _socket_transport(nc)
        if transport is not None and not transport.is_closing():
            transport.abort()
    ps = getattr(nc, "_ps", None)
    reset = getattr(ps, "reset", None)
    if callable(reset):
        reset()
    router = getattr(getattr(ps, "parse", None), "__self__", None)
    if isinstance(router, Router):
        router.forget_partial()


def current_server(nc: NatsClient) -> Srv | None:
    """The server nats-py is connected to, or the one it tried last."""
    server: Srv | None = nc._current_server
    return server


StateCallback = Callable[[], Awaitable[None]] | None


def state_callbacks(nc: NatsClient) -> tuple[StateCallback, StateCallback, StateCallback]:
    """nats-py's disconnected, reconnected and closed callbacks, as they are now."""
    return nc._disconnected_cb, nc._reconnected_cb, nc._closed_cb


def set_state_callbacks(
    nc: NatsClient,
    disconnected: StateCallback,
    reconnected: StateCallback,
    closed: StateCallback,
) -> None:
    """Replace nats-py's disconnected, reconnected and closed callbacks."""
    nc._disconnected_cb = disconnected
    nc._reconnected_cb = reconnected
    nc._closed_cb = closed


def subscription_id(sub: NatsSubscription) -> int:
    """The sid of a nats-py subscription (what its messages carry)."""
    return sub._id


def is_down(nc: NatsClient) -> bool:
    """True between two connections: nats-py reconnects (RECONNECTING or CONNECTING)."""
    return bool(nc.is_reconnecting or nc.is_connecting)


async def queue_unsub(nc: NatsClient, sub: NatsSubscription) -> None:
    """Queue an UNSUB of ``sub`` in nats-py's buffer (it writes none while reconnecting)."""
    await nc._send_command(b"UNSUB %d\r\n" % sub._id)


def payload_limit(nc: NatsClient) -> int:
    """The server's ``max_payload`` as nats-py's publish checks it."""
    return nc._max_payload


def fail_nats_requests(nc: NatsClient) -> None:
    """Fail the requests waiting in nats-py's own response map (where it has one).

    nats-py's error there is translated by the request (the fallback path).
    """
    theirs = getattr(nc, "_resp_map", None)
    if isinstance(theirs, dict):
        for fut in list(theirs.values()):
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.set_exception(nats_errors.ConnectionClosedError())


def nats_request_inbox(nc: NatsClient) -> str | None:
    """The wildcard subject of nats-py's own request inbox; None before its first request."""
    prefix = getattr(nc, "_resp_sub_prefix", None)
    if not isinstance(prefix, bytes | bytearray) or not prefix:
        return None
    return bytes(prefix).decode("utf-8", "replace") + "*"


def forget_nats_request_inbox(nc: NatsClient) -> NatsSubscription | None:
    """Make nats-py subscribe a new request inbox at its next request; return the old one's sub.

    For an inbox the server refused to subscribe (a permissions violation):
    nats-py would otherwise go on sending its requests with replies to it.
    """
    subject = nats_request_inbox(nc)
    if subject is None:
        return None
    nc._resp_sub_prefix = None
    subs = getattr(nc, "_subs", None)
    if not isinstance(subs, dict):
        return None
    return next(
        (sub for sub in subs.values() if getattr(sub, "subject", None) == subject),
        None,
    )


# --------------------------------------------------------------------------- the outgoing buffer


def write_pending(nc: NatsClient) -> bool:
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
    try:
        transport.writelines(pending)
    except LOST_WRITE as exc:
        _lost_socket_write(nc, exc)
    return True


def buffer_nearly_full(nc: NatsClient, size: int) -> bool:
    """Whether ``size`` more bytes take nats-py's outgoing buffer past half its ``pending_size``.

    Past all of it nats-py waits for the buffer to be written out, unbounded,
    before it sends a publish (see ``_requests._bounded_fallback_request``).
    """
    limit = nc._max_pending_size
    return bool(limit > 0 and nc._pending_data_size + size > limit // 2)


def write_now(nc: NatsClient, cmd: bytes, payload_size: int) -> bool:
    """Write one ready-made command now, after what is queued; True if written.

    As :func:`enqueue` then :func:`write_pending`, without waking nats-py's
    flusher task (it would find nothing left to write). False (nothing done)
    where :func:`write_pending` would not write: the caller queues it then.
    """
    transport = nc._transport
    if _TcpTransport is None or not isinstance(transport, _TcpTransport) or not nc.is_connected:
        return False
    pending = nc._pending
    if pending:
        nc._pending = []
        nc._pending_data_size = 0
        pending.append(cmd)
    else:
        pending = [cmd]
    try:
        transport.writelines(pending)
    except LOST_WRITE as exc:
        _lost_socket_write(nc, exc)
    stats = nc.stats
    stats["out_msgs"] += 1
    stats["out_bytes"] += payload_size
    return True


#: What a write to a socket already lost raises, by event loop (see :func:`_lost_socket_write`).
LOST_WRITE: Final = (TypeError, AttributeError, RuntimeError)


def _lost_socket_write(nc: NatsClient, exc: Exception) -> None:
    """Drop a write to a socket already lost, as Python 3.11 does; else raise ``exc``.

    From Python 3.12 asyncio's socket transport has a ``writelines()`` of its
    own that, unlike its ``write()`` (and 3.11's ``writelines()``), does not
    check for a lost connection: once the connection is lost it raises
    ``TypeError`` (CPython gh-136234). uvloop's transport raises
    ``RuntimeError`` ("the handler is closed") from ``write()`` and
    ``writelines()`` alike once closed, also before nats-py noticed the loss.
    The connection is gone: what was written is lost with it either way, and
    nats-py reconnects or closes. Raised as it is when the socket is not closing.
    """
    under = _socket_transport(nc)
    if under is None or not under.is_closing():
        raise exc
    logger.debug("a write to the lost connection was dropped (%r)", exc)


def enqueue_many(nc: NatsClient, cmds: list[bytes], payload_size: int) -> None:
    """Queue ready-made PUB/HPUB commands as one write (fast path; as :func:`enqueue`)."""
    enqueue(nc, b"".join(cmds), payload_size, len(cmds))


def enqueue(nc: NatsClient, cmd: bytes, payload_size: int, msgs: int = 1) -> None:
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


class HasClient(Protocol):
    """What :func:`ack_nowait` needs of its ``Conn``: the nats-py client, its loop and thread."""

    nc: NatsClient
    loop: asyncio.AbstractEventLoop | None
    thread: int | None

    def other_loop_error(self, owner: asyncio.AbstractEventLoop) -> Exception:
        """The error of a call from an event loop other than ``owner``."""
        ...


def ack_nowait(self: HasClient, subject: bytes, payload: bytes) -> None:
    """Queue an acknowledgement: a PUB of ``payload`` to ``subject`` (fast path only).

    ``Conn.ack_nowait`` is this function (no call more per acknowledgement).

    Acks pile up in nats-py's outgoing buffer while a consumer loop hands
    out buffered messages without yielding to the event loop (so nats-py's
    flusher task does not run). Once :data:`ACK_WRITE_BYTES` are queued
    they are written at once, all in one write: the server hears of acks
    within that many bytes, not only when the loop next waits.

    Raises:
        ConnectionClosedError: the connection is closed, or its event loop has
            ended (an ack from a later ``asyncio.run()`` went into a buffer only
            the ended loop would write: reported done, never sent).
        InvalidOptionError: called from another thread's running event loop
            (it wrote into nats-py's buffer from two threads at once), or from
            a loop beside the connection's, left open but idle in this thread
            (the ack went into a buffer only that loop writes).
        DisconnectedError: disconnected and the reconnect buffer is full.
        MaxPayloadExceededError: ``payload`` (not one of the constant
            acknowledgements: a long ``+TERM`` reason) is over the server's
            ``max_payload``. Queued, it made the server close the connection.

    """
    loop = self.loop
    if loop is not None and (self.thread != _thread_id() or not loop.is_running()):
        if loop is not asyncio.get_running_loop():
            raise self.other_loop_error(loop)
        self.thread = _thread_id()  # (unknown: the connection was made outside its loop)
    nc = self.nc
    tail = ACK_TAILS.get(payload)
    if tail is None:
        if len(payload) > nc._max_payload:
            raise MaxPayloadExceededError(
                f"acknowledgement of {len(payload)} bytes exceeds the server's "
                f"max_payload of {nc._max_payload} bytes"
            )
        tail = b" %d\r\n%b\r\n" % (len(payload), payload)
    cmd = b"PUB " + subject + tail
    if not nc.is_connected:
        if nc.is_closed:
            from ._auth import closed_error  # _auth imports this module

            raise closed_error(nc)
        enqueue(nc, cmd, len(payload))
        return
    # enqueue, connected, and a write instead of a wake-up once enough is queued.
    nc._pending.append(cmd)
    size = nc._pending_data_size = nc._pending_data_size + len(cmd)
    stats = nc.stats
    stats["out_msgs"] += 1
    stats["out_bytes"] += len(payload)
    if size >= ACK_WRITE_BYTES and write_pending(nc):
        return
    queue = nc._flush_queue
    if queue is not None and queue.empty():
        queue.put_nowait(asyncio.get_running_loop().create_future())


def send_now(nc: NatsClient, cmd: bytes, payload_size: int) -> None:
    """Write a request's command at once when nothing is queued before it, else queue it."""
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
        try:
            transport.write(cmd)
        except LOST_WRITE as exc:
            _lost_socket_write(nc, exc)
        stats = nc.stats
        stats["out_msgs"] += 1
        stats["out_bytes"] += payload_size
    else:
        enqueue(nc, cmd, payload_size)


# --------------------------------------------------------------------------- reconnects and close
#
# See ``_reconnect`` for why a reconnect aborts the connection it gives up
# (:func:`drop_unsent_on_reconnect`) and a close is bounded
# (:func:`bound_close_waits`): both hook nats-py here.


def owning_loop(nc: NatsClient) -> asyncio.AbstractEventLoop | None:
    """The event loop nats-py's connection runs in: its tasks' (None before it connected).

    nats-py records no loop: each task it starts for a connection (read loop,
    pings, flusher, a reconnect) belongs to the loop that ran the connect.
    """
    for name in (*_CONNECTION_TASKS, "_reconnection_task"):
        task = getattr(nc, name, None)
        if isinstance(task, asyncio.Task):
            return task.get_loop()
    return None


def abandon(nc: NatsClient) -> None:
    """Drop a connection whose event loop has ended: shut its socket down, mark it closed.

    nats-py's ``close()`` (and asyncio's ``abort()``) schedule work on that
    loop, which raises ``RuntimeError: Event loop is closed``. The socket is
    shut down instead (the server sees the connection end; the descriptor goes
    with the transport) and the client is marked closed, so every later call
    raises ``ConnectionClosedError``. Nothing runs on the dead loop: its
    callbacks and tasks went with it.
    """
    transport = _socket_transport(nc)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    nc._status = NatsClient.CLOSED


def abort_transport(nc: NatsClient) -> None:
    """Abort nats-py's socket at once (unsent data is dropped; TCP and TLS transports)."""
    transport = _socket_transport(nc)
    if transport is not None:
        transport.abort()


def bound_close_waits(nc: NatsClient, timeout: float) -> None:
    """Bound the flush and the wait for the socket that nats-py's ``close()`` does.

    A socket already lost (the client was reconnecting) is aborted instead of
    raising, and what nats-py writes to it first is dropped: nats-py's close
    must get to its callbacks.
    """
    transport = nc._transport
    if transport is None or getattr(transport, "_aiojetstream_bounded", False):
        return
    setattr(transport, "_aiojetstream_bounded", True)  # noqa: B010 (not an attribute of its type)
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
                abort_transport(nc)
            except OSError as exc:
                # The connection was already lost (the client was reconnecting):
                # nothing more can be sent, and raising would end nats-py's close
                # half way.
                logger.debug("closing: the connection was already lost (%s)", exc)
                abort_transport(nc)
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
                abort_transport(nc)

        return wait

    for name in ("drain", "wait_closed"):
        original = getattr(transport, name, None)
        if original is not None:
            setattr(transport, name, bounded(original))

    # nats-py's close writes what is buffered (the reconnect buffer, when the
    # client was reconnecting) to the socket first: a lost one raised TypeError
    # there from Python 3.12 (see _lost_socket_write), and the close stopped half way.
    writelines = getattr(transport, "writelines", None)
    if writelines is not None:

        def guarded(payload: Any) -> None:
            try:
                writelines(payload)
            except LOST_WRITE as exc:
                _lost_socket_write(nc, exc)

        transport.writelines = guarded  # type: ignore[method-assign]


def bound_internal_close(nc: NatsClient) -> None:
    """Bound nats-py's own close as :meth:`Conn.close` bounds a user's.

    When nats-py gives up reconnecting it closes the client itself, first
    writing what was buffered during the outage (acks, pull requests,
    publishes) to the lost socket and waiting for it to drain. That wait
    raised ``ConnectionResetError`` out of the close before the disconnected
    and closed callbacks ran: requests waited out their whole timeouts and
    nothing heard that the connection was closed.
    """
    original: Callable[..., Awaitable[None]] | None = getattr(nc, "_close", None)
    if original is None:  # another nats-py: its own close
        return

    async def close(*args: Any, **kwargs: Any) -> None:
        if not nc.is_closed:
            bound_close_waits(nc, CLOSE_FLUSH_TIMEOUT)
        await original(*args, **kwargs)

    nc._close = close  # type: ignore[method-assign]


class RefusalPolicy(Protocol):
    """What :func:`guard_auth_refusals` asks (``_auth.Refusals`` and its classifier)."""

    def refusal(self, text: str) -> str | None:
        """Which refusal of credentials ``text`` is, or None."""

    def refused(self, server: Srv, refusal: str, error: Exception) -> bool:
        """Count a refusal; True: drop ``server`` from the reconnect rotation."""

    def accepted(self, server: Srv) -> None:
        """``server`` took the credentials."""


#: How nats-py's parser hands on a permissions violation (lowercased).
_PERMISSIONS_ERR: Final = "permissions violation"
#: Error callbacks of refusals running (see guard_auth_refusals), kept until done.
_CALLBACKS: set[asyncio.Future[None]] = set()


def guard_auth_refusals(nc: NatsClient, policy: RefusalPolicy) -> None:
    """Reconnect on credentials refused while connected; drop a server refusing twice.

    nats-py's ``_process_err`` closed the client for good, without calling
    the error callback, on ``-ERR 'User Authentication Expired'`` (or
    ``Revoked``, ``Account Authentication Expired``, ``Authorization
    Violation``) while connected: such an error now goes to the error
    callback, then to ``_process_op_err`` (a reconnect, which reads a
    ``.creds`` file again). A refusal of a connection attempt (nats-py's
    ``_process_connect_init`` raising the server's ``-ERR``) is counted too;
    a server that ``policy`` gives up is removed from nats-py's server pool,
    and with none left nats-py's reconnect loop ends and closes the client
    (``NoServersError``). See ``_auth``.
    """
    original_err: Callable[[str], Awaitable[None]] | None = getattr(nc, "_process_err", None)
    original_init: Callable[[], Awaitable[None]] | None = getattr(nc, "_process_connect_init", None)
    if original_err is None or original_init is None:  # another nats-py: its own handling
        return

    def give_up(server: Srv) -> None:
        pool = nc._server_pool
        pool[:] = [s for s in pool if s is not server]

    async def process_err(err_msg: str) -> None:
        server: Srv | None = nc._current_server
        refusal = policy.refusal(err_msg)
        if refusal is None or server is None or not nc.is_connected:
            await original_err(err_msg)
            return
        error = nats_errors.Error(f"nats: {err_msg.strip().strip(chr(39))}")
        nc._err = error
        if policy.refused(server, refusal, error):
            give_up(server)
        # The callback in a task of its own: one that closes the connection would
        # cancel this read task, and with it the rest of the callback.
        callback: asyncio.Future[None] = asyncio.ensure_future(nc._error_cb(error))
        _CALLBACKS.add(callback)
        callback.add_done_callback(_CALLBACKS.discard)
        # A reconnect (or, with reconnects off, a close keeping the error).
        await nc._process_op_err(error)

    async def connect_init() -> None:
        server: Srv | None = nc._current_server
        try:
            await original_init()
        except FailedAttempt:
            raise  # ours (a bad INFO, a signing callback that raised): no refusal
        except nats_errors.Error as exc:
            refusal = policy.refusal(str(exc))
            if refusal is not None and server is not None and policy.refused(server, refusal, exc):
                give_up(server)
            raise
        if server is not None and asyncio.current_task() is not getattr(
            nc, "_reconnection_task", None
        ):
            # A first connection. A reconnect's is taken once the reconnect completed
            # (its flush answered: see accepted_on_reconnect): nats-server takes a user
            # JWT within the second it expires and drops the connection at once, and
            # such a connection cleared the refusals a close was to name.
            policy.accepted(server)

    nc._process_err = process_err  # type: ignore[method-assign]
    nc._process_connect_init = connect_init  # type: ignore[method-assign]


#: The clients whose permissions violations are routed (see guard_permission_errors).
_VIOLATIONS_GUARDED: weakref.WeakSet[NatsClient] = weakref.WeakSet()
#: The clients whose late PONGs are skipped (see guard_late_pongs).
_PONGS_GUARDED: weakref.WeakSet[NatsClient] = weakref.WeakSet()


def guard_permission_errors(nc: NatsClient, on_violation: Callable[[str, bool], object]) -> None:
    """Hand each permissions violation to ``on_violation(text, exact)`` first (once per client).

    nats-py only gives an ``-ERR 'Permissions Violation for ...'`` to the
    error callback; ``on_violation`` (``_violations``) fails the call that
    caused it, then nats-py processes the error as before (the error
    callback gets it). ``exact``: ``text`` is the server's, not lowercased by
    nats-py's parser (the router hands it on, see :func:`_process_err`).
    """
    original: Callable[[str], Awaitable[None]] | None = getattr(nc, "_process_err", None)
    if original is None or nc in _VIOLATIONS_GUARDED:
        return  # another nats-py (its own handling), or guarded already
    _VIOLATIONS_GUARDED.add(nc)

    async def process_err(err_msg: str) -> None:
        if _PERMISSIONS_ERR in err_msg:
            text = _ERR_TEXTS.get(nc)
            exact = text is not None and text.lower() == err_msg
            try:
                on_violation(text if exact and text is not None else err_msg, exact)
            except Exception:
                logger.exception("handling %r failed", err_msg)
        await original(err_msg)

    nc._process_err = process_err  # type: ignore[method-assign]


def guard_late_pongs(nc: NatsClient) -> None:
    """Skip the PONG of a flush that timed out or was cancelled (once per client).

    nats-py cancels such a flush's future but leaves it in its list of PONGs
    awaited: the PONG, when it came, set the result of the cancelled future,
    and the ``InvalidStateError`` was taken for malformed protocol, so the
    connection was dropped and every call in flight failed with it (a drain
    whose PONG came after its timeout). As nats.go drops a timed-out flush's
    entry, the PONG is counted and nothing else.
    """
    original: Callable[[], Awaitable[None]] | None = getattr(nc, "_process_pong", None)
    pongs = getattr(nc, "_pongs", None)
    if original is None or not isinstance(pongs, list) or nc in _PONGS_GUARDED:
        return  # another nats-py, or guarded already
    _PONGS_GUARDED.add(nc)

    async def process_pong() -> None:
        pongs: list[asyncio.Future[Any]] = nc._pongs
        if pongs and pongs[0].done():
            pongs.pop(0)  # nothing waits for it any more
            nc._pongs_received += 1
            nc._pings_outstanding = 0
            return
        await original()

    nc._process_pong = process_pong  # type: ignore[method-assign]


def keep_last_error(nc: NatsClient, error: Exception) -> None:
    """Make ``error`` nats-py's ``last_error`` (in place of its closing ``NoServersError``)."""
    nc._err = error


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
            abort_transport(nc)
        await original(error)

    nc._process_op_err = process_op_err  # type: ignore[method-assign,assignment]


def accepted_on_reconnect(nc: NatsClient, policy: RefusalPolicy) -> None:
    """A reconnect completed: the server it reached took the credentials."""
    server: Srv | None = nc._current_server
    if server is not None:
        policy.accepted(server)


def _err_frame(view: bytes, pos: int) -> tuple[int, str]:
    """The end of the ``-ERR`` line at ``pos`` and its text, as nats-py's parser reads them.

    ``(pos, "")`` when nats-py's parser must read it itself: not all in yet,
    without a text (nats-py raises on those), or not UTF-8.
    """
    if _ERR_LINE is None:
        return pos, ""
    found = _ERR_LINE.match(view, pos)
    if found is None or found.group(1) is None:
        return pos, ""
    try:
        text = found.group(1).decode()
    except UnicodeDecodeError:
        return pos, ""
    return found.end(), text


async def _process_err(nc: NatsClient, text: str) -> None:
    """nats-py's processing of an ``-ERR`` (lowercased, as its parser does), the text kept.

    :func:`guard_auth_refusals` reads the text as sent (a permissions
    violation names a subject, and subjects are case-sensitive).
    """
    _ERR_TEXTS[nc] = text
    try:
        await nc._process_err(text.lower())
    finally:
        _ERR_TEXTS.pop(nc, None)


class Router(Scanner):
    """Takes the messages of routed sids from nats-py's parser (see ``_raw``).

    Two hooks: ``nc._process_msg`` (every message nats-py's own parser hands
    on), and, when nats-py's parser has the expected shape, its ``parse``
    method: the MSG / HMSG lines of routed subscriptions are then parsed here,
    straight from the read buffer and without a coroutine per message, while
    any other protocol line (INFO, odd lines, ...) and everything after it in
    the same read goes to nats-py's parser unchanged. PING, PONG and ``-ERR``
    lines are handed to nats-py's client as its parser hands them on, an
    ``-ERR``'s text kept as sent for :func:`guard_permission_errors` (see
    :func:`_process_err`).

    With the parser hooked, the router also stands in front of the
    connection's asyncio protocol (:class:`~._reads.DirectReads`, over nats-py's TCP
    transport, TLS included): while nats-py's read loop has nothing left to
    parse, the bytes the socket delivers are scanned right where they arrive,
    so a reply or a consumer's messages reach their handler without waiting
    for the read loop's task to be woken (one event-loop pass less per read).
    Anything that needs nats-py's parser or an await, and everything after it,
    goes to the read loop as before.
    """

    def __init__(self, nc: NatsClient) -> None:
        # No strong reference to the client (it is the key of ROUTERS).
        super().__init__(nc.stats)
        #: True while nats-py's read loop is inside the parser (it may await there).
        self._in_parse = False
        #: The protocol in front of the current transport (None: not (yet) installed).
        self._reads: DirectReads | None = None
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

        :class:`~._reads.DirectReads` is installed only when this read emptied the
        stream reader (it returned less than the read loop asks for): from
        then on every byte the reader gets passes through it and is counted.
        """
        reads = self._reads
        ps = self.ps
        if ps is None:
            return
        transport = asyncio_transport(ps.nc)
        if reads is not None and reads.transport is transport:
            reads.handed -= size
            return
        self._reads = None  # a transport of before a reconnect
        if transport is not None and _READ_SIZE is not None and size < _READ_SIZE:
            self._reads = DirectReads.install(self, transport)

    def direct(self, data: bytes) -> bytes:
        """Scan ``data`` as the socket delivered it; return what the read loop must parse.

        Called by :class:`~._reads.DirectReads` while nats-py's read loop has nothing
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
        if what != SCAN_END:
            return view[pos:]
        if pos < size:
            buf.extend(memoryview(view)[pos:])
            if self._awaiting:
                self._awaiting_buf = buf
        return b""

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
        err_text = ""
        while True:
            pos, after, what, message = self._scan(view, pos, size)
            if what == SCAN_OTHER and view.startswith(b"-ERR", pos):
                after, err_text = _err_frame(view, pos)
                if after > pos:
                    what = _SCAN_ERR
            if what <= SCAN_OTHER:  # the end, or a line for nats-py's parser
                break
            # A frame that needs an await: consume what was parsed first.
            pos = after
            del buf[: pos - dropped]
            dropped = pos
            if what == SCAN_PING:
                await ps.nc._process_ping()
            elif what == SCAN_PONG:
                await ps.nc._process_pong()
            elif what == _SCAN_ERR:
                await _process_err(ps.nc, err_text)
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
        if what == SCAN_OTHER:
            # INFO, -ERR, odd lines: nats-py's parser takes the rest.
            await NatsParser.parse(ps)

    def forget_partial(self) -> None:
        """Forget a message not all in, and the socket reads stood in front of.

        For a new connection (attempt): nats-py's parser was reset, and the
        previous transport is of no more use (see :func:`_end_previous_attempt`).
        """
        self._awaiting = 0
        self._awaiting_buf = None
        reads = self._reads
        if reads is not None:
            self._reads = None
            reads.uninstall()

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

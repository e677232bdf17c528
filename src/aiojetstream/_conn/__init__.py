"""The boundary to nats-py: the only package of the library that imports it.

Everything that crosses into nats-py goes through :class:`Conn`, and every
nats-py exception is mapped to the aiojetstream tree in :func:`translate`.
Connection state changes (disconnect, reconnect, close) are fanned out to
listeners through one chained callback per nats-py client.

The package, by concern:

* ``_nats``: the one module that imports nats-py and reads or writes its
  private attributes (the hooks, the outgoing buffer, the transports, the
  half of the router that drives nats-py's parser); the others use nats-py's
  public API and the functions of ``_nats`` only (pinned by
  ``tests/unit/test_nats_boundary.py``);
* ``_connect``: connecting, its options and errors; ``_tls``: the TLS guard;
  ``_reconnect``: which server a reconnect tries next; ``_auth``: credentials
  refused after the first connection (reconnect, give up a server refusing
  twice, name the refusal);
* ``_client``: :class:`Conn` and its connection listeners;
* ``_paths``: the choice between the two paths (below);
* ``_scan``: framing the messages of routed subscriptions from the read
  buffer; ``_reads``: scanning them where the socket delivers them;
  ``_raw``: raw subscriptions; ``_requests``: requests over one inbox;
* ``_violations``: the server's permissions violations, routed to the call
  that caused them (a refused request, publish, pull or inbox fails at once);
* ``_fallback``: nats-py's public API in place of the fast path;
* ``_wire``: building PUB / HPUB commands; ``_translate``: nats-py's errors.

Two paths
---------

Every connection runs on one of two paths, chosen when its first
:class:`Conn` is created and logged once:

* the **fast path** (the default) reaches into nats-py internals that were
  verified on the nats-py versions ``pyproject.toml`` allows (2.16.x; the
  list is in ``_nats``). Messages of the library's own subscriptions are
  parsed straight from the read buffer and publishes are queued as
  ready-made PUB/HPUB commands (see ``_raw``);
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

from . import _connect, _fallback, _nats, _raw, _reads, _requests, _scan
from ._client import CLOSE_FLUSH_TIMEOUT, HUBS, Conn, ConnectionListener
from ._connect import (
    CONNECT_ATTEMPTS,
    CONNECT_RETRY_WAIT,
    DEFAULT_MAX_OUTSTANDING_PINGS,
    DEFAULT_PING_INTERVAL,
    connect_nats,
)
from ._fallback import decode_header_block
from ._nats import (
    NatsClient,
    NatsMsg,
    NatsSubscription,
    drop_unsent_on_reconnect,
    fast_path_missing,
)
from ._paths import FAST_PATH_ENV, choose_path, fast_path_switched_on
from ._raw import RawSubscription
from ._reconnect import NextServer
from ._requests import RequestNotSentError, fail_requests
from ._scan import RawSink
from ._translate import as_jetstream_error, translate
from ._violations import Violation, drop_refused
from ._wire import ACK_WRITE_BYTES, MAX_SUBJECT_LINE, RawHandler, Reply, check_line, pub_command

__all__ = [
    "ACK_WRITE_BYTES",
    "CLOSE_FLUSH_TIMEOUT",
    "CONNECT_ATTEMPTS",
    "CONNECT_RETRY_WAIT",
    "DEFAULT_MAX_OUTSTANDING_PINGS",
    "DEFAULT_PING_INTERVAL",
    "FAST_PATH_ENV",
    "MAX_SUBJECT_LINE",
    "Conn",
    "ConnectionListener",
    "NatsClient",
    "NatsMsg",
    "NatsSubscription",
    "NextServer",
    "RawHandler",
    "RawSink",
    "RawSubscription",
    "Reply",
    "RequestNotSentError",
    "Violation",
    "as_jetstream_error",
    "check_line",
    "choose_path",
    "connect_nats",
    "decode_header_block",
    "drop_refused",
    "drop_unsent_on_reconnect",
    "fail_requests",
    "fast_path_missing",
    "fast_path_switched_on",
    "pub_command",
    "translate",
]

# The names the tests knew from the single module this package was: the same
# objects (a registry or table patched there is the one the code uses).
_Router = _nats.Router
_NatsParser = _nats.NatsParser
_FAST_PATH_ATTRIBUTES = _nats.FAST_PATH_ATTRIBUTES
_asyncio_transport = _nats.asyncio_transport
_abort_transport = _nats.abort_transport
_DirectReads = _reads.DirectReads
_SCAN_END = _scan.SCAN_END
_ROUTERS = _raw.ROUTERS
_release_router = _raw.release_router
_REQUESTS = _requests.REQUESTS
_HUBS = HUBS
_BACKGROUND = _fallback.BACKGROUND
_FallbackDelivery = _fallback.FallbackDelivery
_rebuild_header_block = _fallback.rebuild_header_block
_initial_error_cb = _connect.initial_error_cb

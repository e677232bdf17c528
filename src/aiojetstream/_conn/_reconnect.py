"""Reconnects: which server comes next (:class:`NextServer`); why the hooks exist.

The hooks themselves (:func:`~._nats.drop_unsent_on_reconnect`,
:func:`~._nats.bound_close_waits`) reach into nats-py and are in ``_nats``.
"""

from __future__ import annotations

import time
from typing import Any

from ._nats import NatsClient, Server, current_server

__all__ = ["NextServer"]

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
# :func:`~._nats.drop_unsent_on_reconnect`: before reconnecting, nats-py closes the
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
# partition) with data queued; :func:`~._nats.bound_close_waits` gives both
# CLOSE_FLUSH_TIMEOUT together, then aborts the connection.


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
            current = current_server(nc)  # the server lost, or the one that just failed
            if current is not None:
                last = current.last_attempt
                self._tried[current.uri.netloc] = now if last is None else last
        tried = self._tried
        fresh = [s for s in servers if s.uri.netloc not in tried]
        if fresh:
            return fresh[0], 0.0
        chosen = min(servers, key=lambda s: tried[s.uri.netloc])
        return chosen, max(0.0, tried[chosen.uri.netloc] + wait - now)

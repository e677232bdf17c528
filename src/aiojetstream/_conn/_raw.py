"""Raw subscriptions: messages handed to a synchronous handler as raw pieces.

Pull consumers receive every message through one inbox subscription, and
requests their replies through one wildcard inbox per client. Instead of
letting nats-py build a Msg, queue it and wake a task per message, the router
(``_nats.Router``, scanning with ``_scan.Scanner``) takes the messages of our
subscriptions straight from the protocol parser (raw subject, reply, payload
and header block) and hands them to a synchronous handler. Outgoing messages
are written as ready-made PUB / HPUB commands into nats-py's pending buffer,
which its flusher task writes out. nats-py still owns the subscriptions
themselves (SUB, re-subscription after a reconnect, UNSUB). If a future
nats-py changes the internals this relies on, ``subscribe_raw`` falls back to an
ordinary callback subscription that rebuilds the raw pieces, and requests to
``nc.request``.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from ._fallback import FallbackDelivery
from ._nats import NatsClient, NatsSubscription, Router, subscription_id
from ._scan import RawSink
from ._translate import translate
from ._wire import RawHandler

if TYPE_CHECKING:
    from ._client import Conn

__all__ = ["ROUTERS", "RawSubscription", "release_router", "router_for", "subscribe_raw"]

#: The router of each nats-py client that has routed subscriptions (fast path).
ROUTERS: weakref.WeakKeyDictionary[NatsClient, Router] = weakref.WeakKeyDictionary()


def router_for(nc: NatsClient) -> Router:
    """The router of ``nc``, made (hooking nats-py) on first use."""
    router = ROUTERS.get(nc)
    if router is None:
        router = ROUTERS[nc] = Router(nc)
    return router


def release_router(nc: NatsClient, router: Router) -> None:
    """Give nats-py its parser callback back once nothing is routed any more."""
    if not router.routes and not router.internal and ROUTERS.get(nc) is router:
        router.restore(nc)
        del ROUTERS[nc]


class RawSubscription:
    """A subscription whose messages go to a synchronous raw handler."""

    __slots__ = ("_conn", "_delivery", "_sub", "sid", "subject")

    def __init__(
        self,
        conn: Conn,
        sub: NatsSubscription,
        subject: str,
        delivery: FallbackDelivery | None = None,
    ) -> None:
        self._conn = conn
        self._sub: NatsSubscription | None = sub
        #: The routed sid (fast path; 0 on the fallback, where nothing is routed).
        self.sid: int = subscription_id(sub) if delivery is None else 0
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
        router = ROUTERS.get(nc)
        if router is not None:
            router.routes.pop(self.sid, None)
            router.internal.pop(self.sid, None)
            router.sinks.pop(self.sid, None)
            release_router(nc, router)

    async def drain(self, timeout: float) -> None:
        """Unsubscribe, still handing on what the server sent before it read the UNSUB.

        The UNSUB goes out, then a PING: the server's PONG comes after every
        message it sent before, all of which reach the handler. Then (or once
        the round trip failed) the handler is detached. Idempotent, and a no-op
        after :meth:`unsubscribe`.

        Raises:
            JetStreamTimeoutError: no PONG within ``timeout`` seconds.

        """
        sub, self._sub = self._sub, None
        if sub is None:
            return
        try:
            await self._conn.drain_subscription(sub, timeout, routed=self._delivery is None)
        finally:
            self.detach()

    async def unsubscribe(self) -> None:
        """Unsubscribe (idempotent; a closed connection is not an error)."""
        sub, self._sub = self._sub, None
        if sub is None:
            return
        self.detach()
        await self._conn.unsubscribe(sub)


async def subscribe_raw(
    conn: Conn,
    subject: str,
    handler: RawHandler,
    internal: bool = False,
    sink: RawSink | None = None,
) -> RawSubscription:
    """Subscribe ``handler`` to ``subject``: routed (fast path) or called back (fallback)."""
    nc = conn.nc
    if conn.fast:
        with translate(subject):
            sub = await nc.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        router = router_for(nc)
        sid = subscription_id(sub)
        (router.internal if internal else router.routes)[sid] = handler
        if sink is not None:
            router.sinks[sid] = sink
        return RawSubscription(conn, sub, subject)
    delivery = FallbackDelivery(handler)
    with translate(subject):
        sub = await nc.subscribe(
            subject, cb=delivery.deliver, pending_msgs_limit=0, pending_bytes_limit=0
        )
    return RawSubscription(conn, sub, subject, delivery)

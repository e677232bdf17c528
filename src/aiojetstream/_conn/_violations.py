"""Permission violations, routed to the call that caused them (as nats.js routes them).

A publish or a SUB that the user's permissions deny gets no reply: the server
answers with an asynchronous ``-ERR 'Permissions Violation for Publish to
"S"'`` (``... for Subscription to "S"``, ``... using queue "Q"``) and keeps
the connection open. nats-py only hands it to the error callback, so the call
that caused it waited for its whole timeout. Here the error is parsed
(:func:`parse_violation`) and offered to what waits on that subject
(:class:`Watches`, one per connection): the request mux, ``publish_async``
windows, pulls and the fallback's requests register there. A publish
violation is taken by one of them (nats-server sends one ``-ERR`` per denied
publish), the first registered that has a publish to that subject waiting;
a subscription violation by the owner of that subscription.

nats-py's parser lowercases the text. On the fast path the router hands the
original text on (see ``_nats.Router``), and subjects are matched exactly;
otherwise they are matched case-insensitively (:attr:`Violation.exact`).

The hook into nats-py is :func:`~._nats.guard_auth_refusals`; the error
callback still gets every error, as before.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final, NamedTuple

from ._nats import NatsClient

__all__ = [
    "PERMISSIONS_VIOLATION",
    "WATCHES",
    "Violation",
    "Watches",
    "drop_refused",
    "go_unquote",
    "parse_violation",
    "route_violation",
    "watches",
]

logger = logging.getLogger("aiojetstream")

#: What every permissions error of nats-server starts with (lower case).
PERMISSIONS_VIOLATION: Final = "permissions violation for "

_PUBLISH: Final = "publish to "
_SUBSCRIPTION: Final = "subscription to "
_QUEUE: Final = " using queue "
#: A string quoted as Go's ``%q`` writes it (nats-server's ``fmt.Sprintf("%q", ...)``).
_QUOTED: Final = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)
_SIMPLE_ESCAPES: Final = {
    "a": b"\a",
    "b": b"\b",
    "f": b"\f",
    "n": b"\n",
    "r": b"\r",
    "t": b"\t",
    "v": b"\v",
    "\\": b"\\",
    '"': b'"',
    "'": b"'",
}


class Violation(NamedTuple):
    """A permissions violation the server reported."""

    #: ``"publish"`` or ``"subscription"``.
    operation: str
    #: The subject refused (lower case when not :attr:`exact`).
    subject: str
    #: The queue group of a refused subscription, else None.
    queue: str | None
    #: The server's text as sent (else lowercased by nats-py's parser).
    exact: bool

    def matches(self, subject: str) -> bool:
        """Whether ``subject`` is the subject refused."""
        return subject == self.subject if self.exact else subject.lower() == self.subject


def go_unquote(body: str) -> str | None:
    """The string Go's ``%q`` quoted as ``"body"`` (None: not a valid quoting)."""
    if "\\" not in body:
        return body
    out = bytearray()
    i = 0
    size = len(body)
    try:
        while i < size:
            c = body[i]
            if c != "\\":
                out += c.encode("utf-8", "surrogatepass")
                i += 1
                continue
            e = body[i + 1 : i + 2]
            simple = _SIMPLE_ESCAPES.get(e)
            if simple is not None:
                out += simple
                i += 2
            elif e == "x" and _is_hex(body[i + 2 : i + 4], 2):
                out.append(int(body[i + 2 : i + 4], 16))
                i += 4
            elif e in ("u", "U"):
                width = 4 if e == "u" else 8
                digits = body[i + 2 : i + 2 + width]
                if not _is_hex(digits, width) or int(digits, 16) > 0x10FFFF:
                    return None
                out += chr(int(digits, 16)).encode("utf-8", "surrogatepass")
                i += 2 + width
            elif e and e in "01234567" and _is_octal(body[i + 1 : i + 4]):
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
            else:
                return None
    except UnicodeEncodeError:  # pragma: no cover - surrogatepass encodes every str
        return None
    return out.decode("utf-8", "surrogateescape")


def _is_hex(digits: str, width: int) -> bool:
    return len(digits) == width and all(d in "0123456789abcdefABCDEF" for d in digits)


def _is_octal(digits: str) -> bool:
    return len(digits) == 3 and all(d in "01234567" for d in digits) and int(digits, 8) < 256


def parse_violation(text: str, exact: bool = True) -> Violation | None:
    """The violation the server's ``-ERR`` text reports, or None for any other text.

    ``text`` as nats-server writes it (``Permissions Violation for Publish to
    "S"``, ``... for Subscription to "S"``, ``... using queue "Q"``, with a
    trailing ``(sid "N")`` or ``, too many tokens``), with or without the
    single quotes around it; ``exact``: not lowercased on the way. A reply
    subject refused (``... Publish with Reply of "R"``, reserved replies only)
    is no violation of a publish subject: None.
    """
    body = text.strip()
    if len(body) >= 2 and body[0] == "'" and body[-1] == "'":
        body = body[1:-1]
    lowered = body.lower()
    if not lowered.startswith(PERMISSIONS_VIOLATION):
        return None
    at = len(PERMISSIONS_VIOLATION)
    if lowered.startswith(_PUBLISH, at):
        operation = "publish"
        at += len(_PUBLISH)
    elif lowered.startswith(_SUBSCRIPTION, at):
        operation = "subscription"
        at += len(_SUBSCRIPTION)
    else:
        return None
    quoted = _QUOTED.match(body, at)
    if quoted is None:
        return None
    subject = go_unquote(quoted.group(1))
    if not subject:
        return None
    queue: str | None = None
    at = quoted.end()
    if operation == "subscription" and lowered.startswith(_QUEUE, at):
        quoted = _QUOTED.match(body, at + len(_QUEUE))
        if quoted is None:
            return None
        queue = go_unquote(quoted.group(1))
        if queue is None:
            return None
    return Violation(operation, subject, queue, exact)


#: Offered a publish violation: True when it took it (failed a call waiting on it).
PublishWatch = Callable[[Violation], bool]
#: Told that its subscription was refused.
SubscriptionWatch = Callable[[Violation], None]


class Watches:
    """What waits on a connection for the server's permission violations.

    ``publishes``: one watch per owner (a request mux, a publish window, a
    pull), offered a publish violation in the order they registered until
    one takes it. ``subscriptions``: the owner of each subscription subject
    (queue-less; the library's own subscriptions have no queue group);
    ``other_subscriptions``: watches of subscriptions whose subject is not
    known in advance (nats-py's request inbox), offered the rest as
    ``publishes`` are.
    """

    __slots__ = ("__weakref__", "other_subscriptions", "publishes", "subscriptions")

    def __init__(self) -> None:
        self.publishes: dict[object, PublishWatch] = {}
        self.subscriptions: dict[str, SubscriptionWatch] = {}
        self.other_subscriptions: dict[object, PublishWatch] = {}

    def route(self, violation: Violation) -> bool:
        """Offer ``violation`` to whom it concerns; True when one took it."""
        if violation.operation == "publish":
            return any(offer(violation) for offer in list(self.publishes.values()))
        if violation.queue is not None:
            return False
        watch = self.subscriptions.get(violation.subject) if violation.exact else None
        if watch is None and not violation.exact:
            watch = next(
                (w for s, w in self.subscriptions.items() if violation.matches(s)),
                None,
            )
        if watch is None:
            return any(offer(violation) for offer in list(self.other_subscriptions.values()))
        watch(violation)
        return True


#: The watches of each nats-py client (kept while something watches).
WATCHES: weakref.WeakKeyDictionary[NatsClient, Watches] = weakref.WeakKeyDictionary()


def watches(nc: NatsClient) -> Watches:
    """The watches of ``nc`` (made on first use)."""
    found = WATCHES.get(nc)
    if found is None:
        found = WATCHES[nc] = Watches()
    return found


def route_violation(nc: NatsClient, text: str, exact: bool) -> bool:
    """Route the server's error ``text`` if it is a permissions violation; True if taken.

    Called from nats-py's read loop (its ``_process_err``): a watch that raises
    is logged, never raised there.
    """
    found = WATCHES.get(nc)
    if found is None:
        return False
    violation = parse_violation(text, exact)
    if violation is None:
        return False
    try:
        return found.route(violation)
    except Exception:
        logger.exception("routing a permissions violation failed: %s", text)
        return False


#: Unsubscribes of refused subscriptions running (see drop_refused), kept until done.
_DROPPING: set[asyncio.Task[None]] = set()


def drop_refused(unsubscribe: Callable[[], Awaitable[Any]]) -> None:
    """Unsubscribe a subscription the server refused, in a task (from the read loop).

    nats-py would otherwise keep it, and subscribe it again after every
    reconnect. Its failure is of no matter: the server never had it.
    """

    async def run() -> None:
        try:
            await unsubscribe()
        except Exception as exc:
            logger.debug("dropping a refused subscription: %r", exc)

    task = asyncio.get_running_loop().create_task(run())
    _DROPPING.add(task)
    task.add_done_callback(_DROPPING.discard)

"""Permission violations: the server's -ERR text parsed, routed to what waits on it.

The texts are nats-server's (``server/client.go``: ``pubPermissionViolation``,
``subPermissionViolation``, ``maxTokensViolation``, the ``(sid ...)`` of a
permissions reload); subjects and queues are quoted with Go's ``%q``.
"""

from __future__ import annotations

import pickle
import unicodedata
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient

from aiojetstream import AuthorizationError, JetStreamError, PermissionViolationError
from aiojetstream._conn import _nats, _violations
from aiojetstream._conn._violations import Violation, Watches, go_unquote, parse_violation


def go_quote(text: str, escape: set[int] | None = None) -> str:
    """``text`` quoted as Go's ``strconv.Quote`` (``%q``) writes it.

    ``escape``: positions written as an escape although Go would not (any
    valid escape must read back the same).
    """
    out = ['"']
    for i, ch in enumerate(text):
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(ch)])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif (escape is None or i not in escape) and _go_printable(ch):
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _go_printable(ch: str) -> bool:
    # Near enough to Go's strconv.IsPrint for the test: letters, marks, numbers,
    # punctuation, symbols and the ASCII space.
    return ch == " " or unicodedata.category(ch)[0] in "LMNPS"


SUBJECT = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters=" \t\r\n"),
    min_size=1,
    max_size=40,
)


def test_the_server_texts() -> None:
    assert parse_violation("'Permissions Violation for Publish to \"$JS.API.STREAM.INFO.X\"'") == (
        Violation("publish", "$JS.API.STREAM.INFO.X", None, True)
    )
    assert parse_violation('Permissions Violation for Subscription to "_INBOX.ab.*"') == (
        Violation("subscription", "_INBOX.ab.*", None, True)
    )
    assert parse_violation(
        'Permissions Violation for Subscription to "orders.*" using queue "workers"'
    ) == Violation("subscription", "orders.*", "workers", True)
    # A permissions reload removing a subscription names its sid.
    assert parse_violation('Permissions Violation for Subscription to "a.b" (sid "7")') == (
        Violation("subscription", "a.b", None, True)
    )
    assert parse_violation(
        'Permissions Violation for Subscription to "a.b" using queue "q" (sid "7")'
    ) == Violation("subscription", "a.b", "q", True)
    assert parse_violation(
        'Permissions Violation for Subscription to "a.b.c", too many tokens'
    ) == (Violation("subscription", "a.b.c", None, True))
    # What nats-py's parser hands on: lowercased, quotes kept.
    assert parse_violation("'permissions violation for publish to \"$js.api.info\"'", False) == (
        Violation("publish", "$js.api.info", None, False)
    )


def test_other_texts_are_no_violation_of_a_subject() -> None:
    for text in (
        "",
        "'Authorization Violation'",
        "'Stale Connection'",
        "'Permissions Violation for Publish with Reply of \"_R_.x\"'",
        "Permissions Violation for Publish to",
        'Permissions Violation for Publish to ""',
        'Permissions Violation for Publish to "unterminated',
        'Permissions Violation for Subscription to "a" using queue "unterminated',
        'Permissions Violation for Publish to "bad \\q escape"',
    ):
        assert parse_violation(text) is None, text


@given(SUBJECT, st.sets(st.integers(0, 40)), st.booleans())
@example("a\"b\\c'd", set(), True)
@example("\u00ad\x01\x7f\U0001f600", {3}, True)
def test_any_subject_reads_back(subject: str, escape: set[int], quotes: bool) -> None:
    text = f"Permissions Violation for Publish to {go_quote(subject, escape)}"
    if quotes:
        text = f"'{text}'"
    assert parse_violation(text) == Violation("publish", subject, None, True)


@given(SUBJECT, SUBJECT, st.sets(st.integers(0, 40)))
def test_any_queue_reads_back(subject: str, queue: str, escape: set[int]) -> None:
    text = (
        f"Permissions Violation for Subscription to {go_quote(subject, escape)} "
        f"using queue {go_quote(queue, escape)}"
    )
    assert parse_violation(text) == Violation("subscription", subject, queue, True)


@given(st.text(max_size=120), st.booleans())
@example('Permissions Violation for Publish to "\\U0011ffff"', True)
@example('Permissions Violation for Publish to "\\x4"', True)
@example('Permissions Violation for Publish to "\\477"', True)
def test_no_text_makes_the_parser_raise(text: str, exact: bool) -> None:
    found = parse_violation(text, exact)
    assert found is None or found.subject


@given(st.text(max_size=30))
def test_unquoting_text_without_escapes_is_the_text(text: str) -> None:
    if "\\" not in text:
        assert go_unquote(text) == text


@given(SUBJECT)
def test_a_lowercased_violation_matches_its_subject_whatever_the_case(subject: str) -> None:
    text = f"'Permissions Violation for Publish to {go_quote(subject)}'".lower()
    found = parse_violation(text, exact=False)
    assert found is not None
    if "\\U" not in go_quote(subject):  # (lowercased, \U reads as \u)
        assert found.matches(subject)
        assert found.matches(subject.upper()) == (subject.upper().lower() == subject.lower())


def test_an_exact_violation_matches_its_subject_only() -> None:
    found = parse_violation('Permissions Violation for Publish to "Orders.A"')
    assert found is not None
    assert found.matches("Orders.A")
    assert not found.matches("orders.a")


# --------------------------------------------------------------------------- routing


def test_a_publish_violation_goes_to_the_first_watch_that_takes_it() -> None:
    watches = Watches()
    seen: list[str] = []

    def watch(name: str, takes: bool) -> Any:
        def offer(violation: Violation) -> bool:
            seen.append(name)
            return takes

        return offer

    watches.publishes["a"] = watch("a", False)
    watches.publishes["b"] = watch("b", True)
    watches.publishes["c"] = watch("c", True)
    assert watches.route(Violation("publish", "x", None, True))
    assert seen == ["a", "b"]
    del watches.publishes["b"]
    assert watches.route(Violation("publish", "x", None, True))
    assert seen == ["a", "b", "a", "c"]


def test_a_subscription_violation_goes_to_its_subscription() -> None:
    watches = Watches()
    told: list[Violation] = []
    watches.subscriptions["_INBOX.Ab.*"] = told.append
    assert not watches.route(Violation("subscription", "_INBOX.Ab.x", None, True))
    assert not watches.route(Violation("subscription", "_INBOX.ab.*", None, True))
    # A queue subscription is none of the library's.
    assert not watches.route(Violation("subscription", "_INBOX.Ab.*", "q", True))
    assert watches.route(Violation("subscription", "_INBOX.Ab.*", None, True))
    assert watches.route(Violation("subscription", "_inbox.ab.*", None, False))
    assert len(told) == 2
    # Subscriptions not known by subject: offered the rest, in order.
    watches.other_subscriptions["n"] = lambda v: v.subject == "other"
    assert watches.route(Violation("subscription", "other", None, True))
    assert not watches.route(Violation("subscription", "else", None, True))


async def test_the_hook_hands_violations_on_before_nats_py() -> None:
    """``guard_permission_errors``: the violation first, then nats-py's own processing."""
    nc = NatsClient()
    order: list[Any] = []

    async def process_err(message: str) -> None:
        order.append(("nats-py", message))

    nc._process_err = process_err  # type: ignore[method-assign,assignment]
    _nats.guard_permission_errors(nc, lambda text, exact: order.append((text, exact)))
    hooked = nc._process_err
    _nats.guard_permission_errors(nc, lambda text, exact: order.append("twice"))
    assert nc._process_err is hooked, "hooked once"
    await nc._process_err("'stale connection'")
    await nc._process_err("'permissions violation for publish to \"x\"'")
    assert order == [
        ("nats-py", "'stale connection'"),
        ("'permissions violation for publish to \"x\"'", False),
        ("nats-py", "'permissions violation for publish to \"x\"'"),
    ]


async def test_the_router_hands_on_the_text_as_the_server_sent_it() -> None:
    """nats-py's parser lowercases an -ERR; through the router the subject keeps its case."""
    line = b"'Permissions Violation for Publish to \"$JS.API.STREAM.INFO.Orders\"'"
    text = line.decode()
    stream = b"+OK\r\n-ERR " + line + b"\r\n-ERR " + line + b"\r\n"
    # nats-py's error processing is unchanged: lowercased, each one.
    assert await _violations_seen(stream, routed=True) == ([(text, True)] * 2, [text.lower()] * 2)
    assert await _violations_seen(stream, routed=False) == (
        [(text.lower(), False)] * 2,
        [text.lower()] * 2,
    )


async def _violations_seen(
    stream: bytes, *, routed: bool
) -> tuple[list[tuple[str, bool]], list[str]]:
    """What the violation hook and nats-py's error processing get from ``stream``."""
    nc = NatsClient()
    got: list[tuple[str, bool]] = []
    errors: list[str] = []

    async def process_err(message: str) -> None:
        errors.append(message)

    nc._process_err = process_err  # type: ignore[method-assign,assignment]
    _nats.guard_permission_errors(nc, lambda text, exact: got.append((text, exact)))
    if routed:
        _nats.Router(nc)
    await nc._ps.parse(stream)
    return got, errors


def test_route_violation_ignores_other_errors_and_unwatched_clients() -> None:
    nc = NatsClient()
    assert not _violations.route_violation(
        nc, "'permissions violation for publish to \"x\"'", False
    )
    taken: list[Violation] = []

    def take(violation: Violation) -> bool:
        taken.append(violation)
        return True

    _violations.watches(nc).publishes["w"] = take
    assert not _violations.route_violation(nc, "'stale connection'", False)
    assert _violations.route_violation(nc, "'Permissions Violation for Publish to \"X\"'", True)
    assert taken == [Violation("publish", "X", None, True)]

    def broken(violation: Violation) -> bool:
        raise RuntimeError("a bug")

    _violations.watches(nc).publishes["w"] = broken
    assert not _violations.route_violation(nc, "'Permissions Violation for Publish to \"X\"'", True)


# --------------------------------------------------------------------------- the error


def test_the_error_says_what_to_do() -> None:
    publish = PermissionViolationError("publish", "$JS.API.STREAM.INFO.X")
    assert isinstance(publish, AuthorizationError)
    assert isinstance(publish, JetStreamError)
    assert (publish.operation, publish.subject, publish.queue) == (
        "publish",
        "$JS.API.STREAM.INFO.X",
        None,
    )
    assert "'$JS.API.STREAM.INFO.X'" in str(publish)
    assert "'publish' allow list" in str(publish)
    assert "inbox_prefix" not in str(publish)
    inbox = PermissionViolationError("subscription", "_INBOX.x.*", inbox=True)
    assert "'subscribe' allow list" in str(inbox)
    assert "inbox_prefix" in str(inbox)
    assert "--inbox-prefix" in str(inbox)
    queued = PermissionViolationError("subscription", "a.b", "workers")
    assert "queue group 'workers'" in str(queued)
    assert "inbox_prefix" not in str(queued)


def test_the_error_pickles() -> None:
    for error in (
        PermissionViolationError("publish", "a.b"),
        PermissionViolationError("subscription", "_INBOX.x.*", inbox=True),
        PermissionViolationError("subscription", "a", "q", context="reading"),
    ):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is PermissionViolationError
        assert str(again) == str(error)
        assert (again.operation, again.subject, again.queue, again.inbox) == (
            error.operation,
            error.subject,
            error.queue,
            error.inbox,
        )

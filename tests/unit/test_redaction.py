"""How servers are shown without credentials, and foreign text screened (aiojetstream._redact).

The rule (issue 25): the user information of a URL ends at its *last* ``@``
(or a character ``urllib`` reads as one), so a password holding ``@``, ``/``,
``:``, ``%40``, ``,`` or unicode never shows; a string of several URLs is
hidden from its first scheme to its last ``@``. The same function names the
servers in :func:`aiojetstream.connect`'s errors and in the Spark options'
``describe()``. The connection paths themselves, against real servers, are in
tests/integration/test_secret_surfaces.py.
"""

from __future__ import annotations

import re
import ssl
import sys
import unicodedata
from collections import UserString

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiojetstream import (
    AuthorizationError,
    ConnectionFailedError,
    InvalidOptionError,
    JetStreamError,
    _conn,
)
from aiojetstream._conn._connect import _URL_HINT, _connect_failure, unchained
from aiojetstream._conn._nats import nats_errors
from aiojetstream._redact import (
    AT_SIGNS,
    HIDDEN,
    chain,
    connection_secrets,
    mentions,
    redact_servers,
    redact_url,
    scrub,
)
from aiojetstream.spark import _options
from aiojetstream.spark._options import ConnectOptions, parse_source_options

#: Passwords of every kind the issue names; none of them may show.
PASSWORDS = [
    "wr@ng",
    "pa/ss",
    "p:a:ss",
    "p%40ss",
    "pässwörd-密码",
    "p\uff20ss",  # fullwidth '@': urllib reads it as one
    "p\ufe6bss",  # small '@'
    "p\uff0fss",  # fullwidth '/'
    "a,b",
    "q?x#y",
    "@",
    "//",
    "x@y@z",
]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("scheme", ["nats://", "tls://", "ws://", "wss://", "NATS://", ""])
def test_a_password_never_shows(password: str, scheme: str) -> None:
    url = f"{scheme}bob:{password}@127.0.0.1:4222"
    assert redact_url(url) == f"{scheme}{HIDDEN}@127.0.0.1:4222"
    assert redact_servers(url) == f"{scheme}{HIDDEN}@127.0.0.1:4222"
    assert redact_servers([url]) == f"{scheme}{HIDDEN}@127.0.0.1:4222"
    assert ConnectOptions(servers=url).describe() == f"{scheme}{HIDDEN}@127.0.0.1:4222"


@pytest.mark.parametrize("token", PASSWORDS)
def test_a_token_never_shows(token: str) -> None:
    assert redact_url(f"nats://{token}@h:1") == f"nats://{HIDDEN}@h:1"


@given(
    password=st.text(min_size=1),
    user=st.text(alphabet=st.characters(exclude_characters=":@\uff20\ufe6b")),
)
def test_any_password_is_hidden(password: str, user: str) -> None:
    """Whatever the password holds, what shows is the scheme, ``***@`` and the host."""
    assert redact_url(f"nats://{user}:{password}@host.example:4222") == (
        f"nats://{HIDDEN}@host.example:4222"
    )


def test_urls_without_credentials_are_shown_as_they_are() -> None:
    assert redact_url(" nats://a:4222 ") == "nats://a:4222"
    assert redact_servers("nats://a:1,tls://b:2") == "nats://a:1,tls://b:2"
    assert redact_servers(["nats://a:1", "tls://[::1]:2", "c"]) == "nats://a:1, tls://[::1]:2, c"
    assert redact_url("ws://h:8080/path") == "ws://h:8080/path"


def test_the_servers_of_a_list_are_shown_one_by_one() -> None:
    shown = redact_servers(["nats://u:p@ss@h1:1", "nats://h2:2", "tls://t0k/en@h3:3"])
    assert shown == f"nats://{HIDDEN}@h1:1, nats://h2:2, tls://{HIDDEN}@h3:3"


@pytest.mark.parametrize(
    ("servers", "shown"),
    [
        # A comma may be in a password: everything up to the string's last '@' goes.
        ("nats://alice:a,b@h:1", f"nats://{HIDDEN}@h:1"),
        ("nats://u:p@h1:1,nats://u:p@h2:2", f"nats://{HIDDEN}@h2:2"),
        ("nats://h1:1,nats://u:p@h2:2", f"nats://{HIDDEN}@h2:2"),
        ("nats://u:p@h1:1,nats://h2:2", f"nats://{HIDDEN}@h1:1,nats://h2:2"),
        ("alice:pw@h:1,tls://b:2", f"{HIDDEN}@h:1,tls://b:2"),
    ],
)
def test_a_string_of_urls_is_hidden_to_its_last_at(servers: str, shown: str) -> None:
    assert redact_servers(servers) == shown
    assert ConnectOptions(servers=servers).describe() == shown


@pytest.mark.parametrize("scheme", ["tok://", "http://", "x+y://"])
def test_a_scheme_nats_py_does_not_know_is_hidden_too(scheme: str) -> None:
    """``tok://en@host`` may be a token holding ``://``: only nats-py's schemes show."""
    assert redact_url(f"{scheme}secret@h:1") == f"{HIDDEN}@h:1"
    assert ConnectOptions(servers=f"{scheme}secret@h:1").describe() == f"{HIDDEN}@h:1"


@pytest.mark.parametrize("sign", sorted(AT_SIGNS))
def test_spark_refuses_credentials_behind_any_at_sign(sign: str) -> None:
    """A servers URL whose '@' is one urllib normalises to: refused, quoting nothing of it."""
    with pytest.raises(InvalidOptionError, match="URL 1 of 1 has credentials") as info:
        parse_source_options(
            {"stream": "S", "servers": f"nats://bob:Sekr1t{sign}h:1"}, streaming=False
        )
    assert "Sekr1t" not in str(info.value)


def test_at_signs_are_every_character_urllib_reads_as_one() -> None:
    found = "".join(
        chr(c) for c in range(sys.maxunicode + 1) if "@" in unicodedata.normalize("NFKC", chr(c))
    )
    assert sorted(found) == sorted(AT_SIGNS)


@given(
    st.lists(
        st.text(alphabet=st.sampled_from("ab:/,@\uff20\ufe6b%40 é"), max_size=8)
        | st.sampled_from(["nats://", "tls://", "WS://", "wss://", "tok://", ""]),
        max_size=6,
    )
)
def test_spark_describe_is_the_same_rule(parts: list[str]) -> None:
    """The Spark extension may not import ``_redact`` (public API only): its copy must agree."""
    servers = "".join(parts)
    assert ConnectOptions(servers=servers).describe() == redact_url(servers)


def test_spark_knows_every_at_sign() -> None:
    assert set(_options._AT_SIGNS) == set(AT_SIGNS)


# --------------------------------------------------------------------------- secrets


def test_connection_secrets() -> None:
    creds = UserString("-----BEGIN NATS USER JWT-----\neyJ.abc.def\n------END NATS USER JWT-----\n")
    found = connection_secrets(
        ["nats://bob:pa/ss,w0rd@h:1", "nats://t0ken-xyz@h:2", "nats://h:3"],
        {
            "user": "bob",
            "password": "kw-pass",
            "token": "kw-token",
            "nkeys_seed_str": "SUSEED",
            "user_credentials": creds,
        },
    )
    for secret in (
        "bob:pa/ss,w0rd",
        "pa/ss,w0rd",
        "w0rd",
        "t0ken-xyz",
        "kw-pass",
        "kw-token",
        "SUSEED",
        "eyJ.abc.def",
    ):
        assert secret in found
    assert "bob" not in found  # a user name is no secret
    # A .creds file's path is no secret either (nats-py reads the file).
    assert connection_secrets("nats://h:1", {"user_credentials": "/etc/a.creds"}) == []


@pytest.mark.parametrize("scheme", ["nats://", "tls://", "WS://", "wss://"])
def test_the_urls_of_a_string_are_told_apart_at_a_scheme(scheme: str) -> None:
    """Neither a scheme nor a host or port of another URL is a secret of the string.

    Was: ``nats:`` (and ``4222``) taken for pieces of a password running over
    the comma, blanked in the library's own message.
    """
    found = connection_secrets(
        f"{scheme}u:pw@a:4222,{scheme}h:14222,{scheme}t0ken/x@b:4222,{scheme}u:pa55w0rd@c:1", {}
    )
    for secret in ("pw", "t0ken/x", "t0ken", "pa55w0rd", "u:pa55w0rd"):
        assert secret in found
    for shown in ("nats:", "tls:", "ws:", "wss:", "4222", "14222", "h:14222", "a:4222", "c:1"):
        assert shown not in [s.lower() for s in found]
    text = f"could not connect to {scheme}***@c:1: Connect call failed ('h', 14222)"
    assert scrub(text, found) == text
    # A comma followed by anything but a scheme may still be in a password.
    assert {"pa/ss,w0rd", "pa", "w0rd"} <= set(connection_secrets("nats://b:pa/ss,w0rd@h:1", {}))
    assert "sec:ret" in connection_secrets("nats://a:1,nats://u:x,nats://sec:ret@h:1", {})


@given(
    st.lists(
        st.sampled_from(
            ["nats://", "tls://", "WS://", "h:1", "u:", "@", ",", "/", "p4ss", "nats:", "//"]
        ),
        max_size=12,
    )
)
def test_a_scheme_is_never_a_secret(parts: list[str]) -> None:
    """The scheme the library shows before ``***@`` is never blanked in its own message.

    Unless a password is part of a scheme's text itself (``nats``, ``s://``):
    hidden wherever it shows, then.
    """
    servers = "".join(parts)
    found = connection_secrets(servers, {})
    schemes = ("nats:", "nats:/", "nats://", "tls:", "tls://", "ws:", "ws://", "wss:")
    assert not set(schemes) & {s.lower() for s in found}
    shown = redact_servers(servers)
    for scheme in ("nats://", "tls://", "WS://"):
        in_scheme = any(len(s) >= 4 and s.lower() in scheme.lower() for s in found)
        if shown.startswith(f"{scheme}{HIDDEN}@") and not in_scheme:
            assert scrub(shown, found).startswith(scheme), found


def test_an_unchained_connection_error_keeps_its_servers() -> None:
    from aiojetstream import ConnectionFailedError

    error = ConnectionFailedError(f"could not connect to nats://***@h:1: {HIDDEN}", ("h:1",))
    error.__cause__ = OSError("S3cret-pw")
    copy = unchained(error)
    assert type(copy) is ConnectionFailedError
    assert str(copy) == str(error)
    assert copy.servers == ("h:1",)
    assert copy.__cause__ is None
    assert copy.__context__ is None


def test_scrub_hides_secrets_in_any_case_longest_first() -> None:
    text = "Cannot connect to host k3qzfrag:80; k3Qzfrag/rest; abc"
    assert scrub(text, ["k3Qzfrag", "k3Qzfrag/rest", "abc"]) == (
        f"Cannot connect to host {HIDDEN}:80; {HIDDEN}; abc"  # 'abc': too short to search
    )
    assert scrub("nothing", []) == "nothing"


def test_mentions_searches_the_whole_chain() -> None:
    def raised() -> BaseException:
        try:
            try:
                raise ValueError("netloc 'bob:S3cret' is bad")
            except ValueError as inner:
                raise KeyError("x") from inner
        except KeyError:
            try:
                raise OSError("outer")
            except OSError as outer:
                outer.add_note("note: T0ken-1")
                return outer

    exc = raised()
    assert next(chain(exc)) is exc
    assert {type(e) for e in chain(exc)} == {OSError, KeyError, ValueError}
    assert mentions(exc, ["S3cret"])  # in the cause of the context
    assert mentions(exc, ["t0ken-1"])  # in a note, in another case
    assert not mentions(exc, ["absent"])
    assert mentions(ExceptionGroup("g", [ValueError("S3cret")]), ["S3cret"])


# --------------------------------------------------------------------------- _conn


def _nats_error(text: str) -> Exception:
    return nats_errors.Error(text)


async def test_the_error_callback_screens_what_it_forwards() -> None:
    """An error nats-py reports that shows a secret reaches the log or ``error_cb`` without it."""
    forwarded: list[Exception] = []

    async def forward(exc: Exception) -> None:
        forwarded.append(exc)

    seen: list[Exception] = []
    callback = _conn._initial_error_cb(forward, seen, "nats://***@h:1", ["S3cret-pw"])
    clean = OSError("Connect call failed")
    await callback(clean)
    leaky = OSError("Cannot connect to host s3cret-pw:80")
    await callback(leaky)
    assert forwarded[0] is clean  # as it is
    stand_in = forwarded[1]
    assert isinstance(stand_in, JetStreamError)
    assert str(stand_in) == f"OSError: Cannot connect to host {HIDDEN}:80"
    assert stand_in.__cause__ is None
    assert stand_in.__context__ is None
    assert seen == [clean, leaky]  # the originals, to tell refused credentials apart


def test_an_unchained_error_keeps_its_type() -> None:
    error = AuthorizationError(f"nats://***@h:1 refused: {HIDDEN}")
    copy = unchained(error)
    assert type(copy) is AuthorizationError
    assert str(copy) == str(error)


#: Passwords whose pieces (split at "/", "?", "#", ",") are words of the library's
#: own messages (the review's, and more).
WORDING_PASSWORDS = ["Xy9/pass", "Qz/token", "k#with", "abc/could", "q?connect", "z,refused"]


@pytest.mark.parametrize("password", WORDING_PASSWORDS)
def test_connect_failures_screen_what_they_quote_never_their_own_words(password: str) -> None:
    """The library's wording stays whole: blanking the "pass" of "password" told that
    "pass" was part of the password. What they quote and the servers are screened."""
    url = f"nats://alice:{password}@h:1"
    secrets = connection_secrets(url, {})
    shown = redact_servers(url)
    piece = re.split("[/?#,]", password)[-1]  # a word of the library's
    assert piece in secrets
    invalid = _connect_failure(
        _nats_error("nats: invalid connect url"), None, [], [], shown, 1, secrets
    )
    assert str(invalid) == f"invalid server URL in {shown} ({_URL_HINT})"
    refused = _connect_failure(
        _nats_error("x"),
        None,
        [_nats_error(f"nats: 'Authorization Violation' {piece}")],
        [],
        shown,
        1,
        secrets,
    )
    assert str(refused) == f"{shown} refused the credentials: nats: 'Authorization Violation' ***"
    unreachable = _connect_failure(
        OSError("x"),
        None,
        [OSError(111, f"Unreachable: {piece.upper()}")],
        [],
        shown,
        1,
        secrets,
    )
    assert isinstance(unreachable, ConnectionFailedError)
    assert (
        str(unreachable)
        == f"could not connect to {shown} (tried once): [Errno 111] Unreachable: ***"
    )
    handshake = _connect_failure(ssl.SSLError(1, f"bad {piece}"), None, [], [], shown, 1, secrets)
    assert str(handshake) == f"TLS handshake with {shown} failed: bad ***"

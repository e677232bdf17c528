"""Secrets in output: the one way server URLs are shown, and foreign text screened.

Every message of the library that names servers (connection errors, the
Spark options' ``describe()``) shows them through :func:`redact_servers`;
texts the library did not write (nats-py's, the operating system's, aiohttp's
exceptions) are screened for the connection's known secrets with
:func:`scrub` and :func:`mentions` before they are quoted, logged or chained.
No nats-py import: the Spark options use it too.

Why by parsing, with the last ``@``
-----------------------------------

nats-py authenticates URLs whose password holds ``@``, ``:``, ``%40`` or any
unicode as it is (nothing is percent-decoded): the user information ends at
the *last* ``@`` before the host, so a pattern stopping at the first ``@`` or
``/`` leaves the rest of such a password in the message. A password may also
hold ``/``, ``?``, ``#`` or ``,``, which split it elsewhere (nats-py then
refuses the URL, or the library splits a servers string at the comma): the
URLs of one string cannot be told apart safely once it holds an ``@``. So
everything from its first scheme to its last ``@`` (or a character that
NFKC-normalises to ``@``, as ``urllib`` reads them) is hidden, the servers
listed before it included; the servers of a list are shown one by one.
"""

from __future__ import annotations

import re
from collections import UserString
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from ._creds import NOT_A_PATH

__all__ = [
    "AT_SIGNS",
    "HIDDEN",
    "MIN_SECRET",
    "chain",
    "connection_secrets",
    "mentions",
    "redact_servers",
    "redact_url",
    "scrub",
]

#: What stands for hidden text.
HIDDEN: Final = "***"

#: Secrets shorter than this are not searched for in foreign text (a one-letter
#: password would blank every such letter of an error message); every length
#: is hidden from URLs.
MIN_SECRET: Final = 4

#: ``@`` and the characters ``urllib`` takes for one after NFKC normalisation
#: (the full list over every code point: tests/unit/test_redaction.py).
AT_SIGNS: Final = "@\ufe6b\uff20"

#: The schemes of server URLs nats-py knows; a scheme of another name could be
#: the start of a token (``tok://en@host``), so it is hidden with the rest.
_SCHEME: Final = re.compile(r"(?:nats|tls|wss?)://", re.IGNORECASE)

#: The characters that cut a password in a URL short (for nats-py, or at a comma).
_PIECES: Final = re.compile(r"[,/?#]")

#: A comma before one of nats-py's schemes: where the next URL of a servers string
#: starts (a comma followed by anything else may be in a password).
_NEXT_URL: Final = re.compile(r",(?=\s*(?:nats|tls|wss?)://)", re.IGNORECASE)

#: A scheme of nats-py's, as a piece of a password holding one (``nats:``), or
#: the whole of an absurd one: shown in every message, so no secret to hide.
_SCHEME_TEXT: Final = re.compile(r"(?:nats|tls|wss?):/{0,2}", re.IGNORECASE)

#: The keyword arguments of ``nats.connect`` that hold a secret in themselves.
_SECRET_OPTIONS: Final = ("password", "token", "nkeys_seed_str", "user_credentials")


def _last_at(text: str) -> int:
    return max(text.rfind(sign) for sign in AT_SIGNS)


def redact_url(url: str) -> str:
    """``url`` (one string, possibly several URLs joined by commas), without credentials.

    Without an ``@`` it is returned as it is (stripped); else its first scheme
    (if nats-py's), ``***@`` and what follows its last ``@``.
    """
    text = url.strip()
    at = _last_at(text)
    if at < 0:
        return text
    scheme = _SCHEME.match(text)
    return f"{scheme.group(0) if scheme else ''}{HIDDEN}@{text[at + 1 :]}"


def redact_servers(servers: str | Iterable[str]) -> str:
    """The servers given to a connect call, for a message: never credentials.

    A string (one URL or several joined by commas) is one item; a list's items
    are shown one by one (each by :func:`redact_url`), joined by ``", "``.
    """
    items = [servers] if isinstance(servers, str) else list(servers)
    return ", ".join(redact_url(item if isinstance(item, str) else str(item)) for item in items)


def _userinfo(url: str) -> str | None:
    text = url.strip()
    at = _last_at(text)
    if at < 0:
        return None
    scheme = _SCHEME.match(text)
    return text[scheme.end() if scheme else 0 : at]


def _credentials(info: str) -> str:
    """The password (or token) of a URL's user information ``info``."""
    user, sep, password = info.partition(":")
    return password if sep else user  # no ':': a token (or a user alone)


def connection_secrets(servers: str | Iterable[str], options: Mapping[str, Any]) -> list[str]:
    """What of a connect call's arguments must never be shown.

    The user information of each server URL (whole, the password or token in
    it, and the pieces of that where nats-py or the comma split cut it: it
    may quote a piece), and the ``password``, ``token``, ``nkeys_seed_str``
    and in-memory ``user_credentials`` (each line of it) options. User names
    and file paths are not secrets.

    The URLs of a string are told apart at the commas followed by a scheme
    of nats-py's (``nats://``, ``tls://``, ``ws://``, ``wss://``), so the
    host, port and scheme of one URL are not taken for a piece of the next
    one's password (a port shown as ``***``, a scheme blanked in the
    library's own message); a comma followed by anything else is taken as
    part of a password. The user information of the whole string (from its
    first scheme to its last ``@``) counts as well, whole.
    """
    found: list[str] = []
    items = [servers] if isinstance(servers, str) else list(servers)
    for item in items:
        info = _userinfo(str(item))
        if info:
            found.extend((info, _credentials(info)))
        for url in _NEXT_URL.split(str(item)):
            info = _userinfo(url)
            if not info:
                continue
            secret = _credentials(info)
            found.extend((info, secret))
            found.extend(_PIECES.split(secret))
    found = [secret for secret in found if not _SCHEME_TEXT.fullmatch(secret)]
    for key in _SECRET_OPTIONS:
        value = options.get(key)
        if isinstance(value, UserString) or (
            # A .creds text (or a seed) given where a file's path goes: nats-py's
            # error quotes it as the file name it could not open.
            isinstance(value, str) and key == "user_credentials" and NOT_A_PATH.search(value)
        ):  # in-memory .creds text (nats-py's RawCredentials)
            found.append(str(value))
            found.extend(line.strip() for line in str(value).splitlines() if line.strip())
        elif isinstance(value, str) and key != "user_credentials":  # else a file's path
            found.append(value)
    return [secret for secret in dict.fromkeys(found) if secret]


def _pattern(secrets: Iterable[str]) -> re.Pattern[str] | None:
    """The secrets of :data:`MIN_SECRET` characters or more, longest first, in any case.

    Any case: a piece of a password that nats-py took for a host name comes
    back lower-cased in the errors of the resolver or of aiohttp.
    """
    wanted = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
    if not wanted:
        return None
    return re.compile("|".join(re.escape(s) for s in wanted), re.IGNORECASE)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret (:func:`_pattern`) replaced by ``***``."""
    pattern = _pattern(secrets)
    return text if pattern is None else pattern.sub(HIDDEN, text)


def chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and every exception it chains (``__cause__``, ``__context__``, groups), once each."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend((current.__cause__, current.__context__))
        todo.extend(getattr(current, "exceptions", ()))


def _texts(exc: BaseException) -> Iterator[str]:
    yield str(exc)
    yield repr(exc)
    for note in getattr(exc, "__notes__", None) or ():
        yield str(note)


def mentions(exc: BaseException | None, secrets: Iterable[str]) -> bool:
    """Whether ``exc`` or anything it chains shows a secret (:func:`_pattern`)."""
    pattern = _pattern(secrets)
    if pattern is None:
        return False
    return any(pattern.search(text) for e in chain(exc) for text in _texts(e))

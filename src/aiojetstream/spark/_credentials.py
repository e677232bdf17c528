"""The credential options of the Spark data sources: checked, never quoted.

``credsSecret`` (the text of a .creds file) and ``nkeySecret`` (an NKey user
seed) are checked here when the read or write is planned, because nats-py
fails late and obscurely on a malformed one; no error message shows a secret.
The file ``creds`` names is read and checked (:func:`check_creds_file`) where
a connection is opened, on the driver and on each executor: nats-py, given a
malformed one, spun forever in the event loop.

:func:`seed_problem` and :func:`creds_problem` are copies of the core's
(``aiojetstream/_creds.py``, which this extension may not import: public API
only); tests/unit/test_creds_files.py holds them equal.
"""

from __future__ import annotations

import base64
import importlib.util
import re
import socket
from collections import UserString
from typing import Final

from aiojetstream import InvalidOptionError

__all__ = [
    "Credentials",
    "check_creds_file",
    "check_creds_path",
    "check_creds_secret",
    "creds_problem",
    "needs_nkeys",
    "seed_problem",
]

#: A .creds file as nsc writes it: nats-py reads exactly this layout (one value per line).
_CREDS_LAYOUT: Final = (
    "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
    "-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
)
_JWT_RE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
#: An encoded NKey seed: 58 base32 characters ('S', the key's role, the seed, a checksum).
_SEED_RE: Final = re.compile(r"S[A-Z2-7]{57}")
_PUBLIC_USER_KEY_RE: Final = re.compile(r"U[A-Z2-7]{55}")
#: What no file path holds but a .creds text or a seed given in its place does.
_NOT_A_PATH: Final = re.compile(rf"[\r\n]|-----BEGIN|{_SEED_RE.pattern}")
_SEED_ROLES: Final = {"A": "an account", "O": "an operator", "N": "a server", "C": "a cluster"}
#: The lines nats-py looks for in a .creds file: the value is the line after each.
_JWT_MARKER: Final = "-----BEGIN NATS USER JWT-----"
_SEED_MARKER: Final = "-----BEGIN USER NKEY SEED-----"
#: A .creds file is about 1 KiB: anything much larger is some other file.
_MAX_CREDS_BYTES: Final = 64 * 1024
#: What a .creds file is, for the messages.
_LAYOUT: Final = (
    f"a .creds file as nsc writes it holds a '{_JWT_MARKER}' line with the user's JWT "
    f"on the next line, then a '{_SEED_MARKER}' line with the user's NKey seed on the next"
)


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the checksum of an encoded NKey."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def seed_problem(seed: str) -> str | None:
    """Why ``seed`` is not an NKey user seed (``SU...``), or None; never quotes it."""
    if _PUBLIC_USER_KEY_RE.fullmatch(seed):
        return "it is a user's public key ('U...'), not its seed ('SU...')"
    if not _SEED_RE.fullmatch(seed):
        return "expected 58 characters A-Z and 2-7 starting with 'SU'"
    if seed[1] != "U":
        role = _SEED_ROLES.get(seed[1], "another kind of")
        return f"it is the seed of {role} key ('S{seed[1]}...'), not of a user ('SU...')"
    raw = base64.b32decode(seed + "=" * 6)
    if _crc16(raw[:-2]) != int.from_bytes(raw[-2:], "little"):
        return "its checksum does not match (a character is missing or mistyped)"
    return None


def _value_after(lines: list[str], marker: str) -> tuple[str, bool] | None:
    """The line after the first one holding ``marker`` (as nats-py finds it).

    With whether a line break ends it; None without a line holding ``marker``.
    """
    name = marker.strip("-")
    start = next((i for i, line in enumerate(lines) if name in line), None)
    if start is None:
        return None
    if start + 1 >= len(lines):
        return "", False
    return lines[start + 1], start + 2 < len(lines)


def creds_problem(text: str) -> str | None:
    """Why nats-py could not read ``text`` as a .creds file, or None; never quotes it.

    nats-py takes the line right after the first line holding each marker,
    less its last character (the line break): the value must be there, alone
    on its line, and end with a line break.
    """
    if not text.strip():
        return f"it is empty ({_LAYOUT})"
    lines = text.split("\n")
    jwt = _value_after(lines, _JWT_MARKER)
    seed = _value_after(lines, _SEED_MARKER)
    missing = [marker for marker, found in ((_JWT_MARKER, jwt), (_SEED_MARKER, seed)) if not found]
    if missing:
        return f"it has no {' and no '.join(repr(m) for m in missing)} line ({_LAYOUT})"
    assert jwt is not None
    assert seed is not None
    if jwt[0].endswith("\r") or seed[0].endswith("\r"):
        return (
            "it has Windows line breaks (CRLF), which nats-py does not read: convert it (dos2unix)"
        )
    if not _JWT_RE.fullmatch(jwt[0]):
        return f"the line after '{_JWT_MARKER}' is not a JWT ({_LAYOUT})"
    problem = seed_problem(seed[0])
    if problem is not None:
        return f"the line after '{_SEED_MARKER}' is not an NKey user seed: {problem}"
    unended = [what for what, found in (("JWT", jwt), ("seed", seed)) if not found[1]]
    if unended:
        return (
            f"the {unended[0]}'s line does not end with a line break "
            "(nats-py would drop its last character)"
        )
    return None


def check_creds_file(path: str) -> None:
    """Read and check the .creds file of option ``creds`` on this node; never quotes it.

    Called where a connection is opened (the driver, each executor): the file
    must be on every node.

    Raises:
        InvalidOptionError: the file is missing or unreadable here, or not a .creds file.

    """
    where = f"option 'creds': the .creds file {path!r}"
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_CREDS_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InvalidOptionError(
            f"{where} cannot be read on {socket.gethostname()} ({reason}): it must be "
            "readable on every node (the driver and each executor), or give its text as "
            "'credsSecret'"
        ) from None
    if len(data) > _MAX_CREDS_BYTES:
        raise InvalidOptionError(
            f"{where} is over {_MAX_CREDS_BYTES // 1024} KiB: not a .creds file ({_LAYOUT})"
        )
    problem = creds_problem(data.decode("utf-8", "replace"))
    if problem is not None:
        raise InvalidOptionError(f"{where}: {problem}")


def check_creds_path(path: str) -> None:
    """Refuse a .creds text or a seed given as ``creds`` (a path); never quotes it.

    Raises:
        InvalidOptionError: ``path`` holds a line break, a ``-----BEGIN`` line or a seed.

    """
    if _NOT_A_PATH.search(path):
        raise InvalidOptionError(
            "option 'creds' takes the path of a .creds file on every node, and this is "
            "no path (it holds a line break, a '-----BEGIN' line or an NKey seed): give "
            "the file's text as 'credsSecret', or a seed alone as 'nkeySecret'"
        )


def check_creds_secret(raw: str) -> str:
    """The text of a .creds file, checked and in the layout nats-py reads; never quotes it.

    nats-py looks for the line after each ``BEGIN`` marker and, without one,
    reads forever: a malformed text must fail here.
    """
    if "\n" not in raw and "\\n" in raw:
        raw = raw.replace("\\n", "\n")  # a secret store that kept the line breaks escaped
    lines = [line.strip() for line in raw.splitlines()]
    found: dict[str, str] = {}
    for marker in ("BEGIN NATS USER JWT", "BEGIN USER NKEY SEED"):
        start = next((i for i, line in enumerate(lines) if marker in line), None)
        if start is not None:
            found[marker] = next((line for line in lines[start + 1 :] if line), "")
    if len(found) < 2:
        raise InvalidOptionError(
            "option 'credsSecret': expected the text of a .creds file (a "
            "'-----BEGIN NATS USER JWT-----' block and a '-----BEGIN USER NKEY SEED-----' "
            "block); for the path of a .creds file use the option 'creds'"
        )
    jwt, seed = found["BEGIN NATS USER JWT"], found["BEGIN USER NKEY SEED"]
    if not _JWT_RE.fullmatch(jwt):
        raise InvalidOptionError(
            "option 'credsSecret': the line after '-----BEGIN NATS USER JWT-----' is not a JWT"
        )
    problem = seed_problem(seed)
    if problem is not None:
        raise InvalidOptionError(
            "option 'credsSecret': the line after '-----BEGIN USER NKEY SEED-----' is not "
            f"an NKey user seed: {problem}"
        )
    return _CREDS_LAYOUT.format(jwt=jwt, seed=seed)


def needs_nkeys(display: str) -> None:
    """Refuse option ``display`` where the ``nkeys`` package (nats-py's NKey signer) is missing."""
    if importlib.util.find_spec("nkeys") is None:
        raise InvalidOptionError(
            f"option {display!r} needs the Python package 'nkeys' (pip install nkeys) "
            "wherever Spark runs Python"
        )


class Credentials(UserString):
    """In-memory .creds text, with a repr that does not show it.

    nats-py reads a ``UserString`` given as ``user_credentials`` as the text of
    a .creds file (its ``RawCredentials`` is one); a plain one keeps this
    extension off nats-py's modules (only the core's boundary imports them).
    """

    def __repr__(self) -> str:
        return "RawCredentials(<redacted>)"

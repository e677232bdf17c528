"""Credential files checked before connecting: read the way nats-py reads them, never quoted.

nats-py reads a ``.creds`` file (``user_credentials``, a path or in-memory
text) only once a server asks for a signature (nkey or JWT auth), inside the
event loop: it looks for the line after ``-----BEGIN NATS USER JWT-----``
with ``while True: readline()``, which without one never ends (100 % CPU, and
no timeout can end a loop that never awaits), and a file without a seed block
fails with a ``TypeError``; a missing file surfaced as a connection failure.
:func:`check_credentials` reads it first, as nats-py will, and raises
:class:`InvalidOptionError` naming the file and what is wrong with it. No
message quotes a file's content (it holds the user's NKey seed).

No nats-py import. The Spark extension (public API only) keeps a copy of
:func:`seed_problem` and :func:`creds_problem` in ``spark/_credentials.py``;
tests/unit/test_creds_files.py holds the two equal.
"""

from __future__ import annotations

import base64
import os
import re
from collections import UserString
from collections.abc import Mapping
from typing import Any, Final

from ._errors import InvalidOptionError

__all__ = [
    "JWT_MARKER",
    "MAX_CREDS_BYTES",
    "NOT_A_PATH",
    "SEED_MARKER",
    "check_credentials",
    "creds_problem",
    "seed_problem",
]

#: The lines nats-py looks for: the value is the line after each.
JWT_MARKER: Final = "-----BEGIN NATS USER JWT-----"
SEED_MARKER: Final = "-----BEGIN USER NKEY SEED-----"
#: A .creds file is about 1 KiB: anything much larger is some other file.
MAX_CREDS_BYTES: Final = 64 * 1024

_JWT_RE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
#: An encoded NKey seed: 58 base32 characters ('S', the key's role, the seed, a checksum).
_SEED_RE: Final = re.compile(r"S[A-Z2-7]{57}")
_PUBLIC_USER_KEY_RE: Final = re.compile(r"U[A-Z2-7]{55}")
#: What no file path holds but a .creds text or an NKey seed given in its place does.
NOT_A_PATH: Final = re.compile(rf"[\r\n]|-----BEGIN|{_SEED_RE.pattern}")
_SEED_ROLES: Final = {"A": "an account", "O": "an operator", "N": "a server", "C": "a cluster"}

#: What a .creds file is, for the messages.
_LAYOUT: Final = (
    f"a .creds file as nsc writes it holds a '{JWT_MARKER}' line with the user's JWT "
    f"on the next line, then a '{SEED_MARKER}' line with the user's NKey seed on the next"
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
    jwt = _value_after(lines, JWT_MARKER)
    seed = _value_after(lines, SEED_MARKER)
    missing = [marker for marker, found in ((JWT_MARKER, jwt), (SEED_MARKER, seed)) if not found]
    if missing:
        return f"it has no {' and no '.join(repr(m) for m in missing)} line ({_LAYOUT})"
    assert jwt is not None
    assert seed is not None
    if jwt[0].endswith("\r") or seed[0].endswith("\r"):
        return (
            "it has Windows line breaks (CRLF), which nats-py does not read: convert it (dos2unix)"
        )
    if not _JWT_RE.fullmatch(jwt[0]):
        return f"the line after '{JWT_MARKER}' is not a JWT ({_LAYOUT})"
    problem = seed_problem(seed[0])
    if problem is not None:
        return f"the line after '{SEED_MARKER}' is not an NKey user seed: {problem}"
    unended = [what for what, found in (("JWT", jwt), ("seed", seed)) if not found[1]]
    if unended:
        return (
            f"the {unended[0]}'s line does not end with a line break "
            "(nats-py would drop its last character)"
        )
    return None


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    """The first bytes of the file ``path`` (``what`` it is, for the message)."""
    try:
        with open(path, "rb") as file:
            return file.read(MAX_CREDS_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InvalidOptionError(
            f"{what} {os.fspath(path)!r} cannot be read ({reason}): give the path of a file "
            "that this process can read"
        ) from None


def _check_creds_file(path: str | os.PathLike[str]) -> None:
    if isinstance(path, str) and NOT_A_PATH.search(path):
        raise InvalidOptionError(
            "user_credentials takes the path of a .creds file, and this is no path (it "
            "holds a line break, a '-----BEGIN' line or an NKey seed): give the file's "
            "text as nats.aio.client.RawCredentials(text)"
        )
    data = _read(path, ".creds file")
    where = f".creds file {os.fspath(path)!r}"
    if len(data) > MAX_CREDS_BYTES:
        raise InvalidOptionError(
            f"{where} is over {MAX_CREDS_BYTES // 1024} KiB: not a .creds file ({_LAYOUT})"
        )
    problem = creds_problem(data.decode("utf-8", "replace"))
    if problem is not None:
        raise InvalidOptionError(f"{where}: {problem}")


def check_credentials(options: Mapping[str, Any]) -> None:
    """Refuse, before connecting, credential options nats-py would hang or fail late on.

    ``user_credentials`` (a ``.creds`` file's path, its text as a
    ``UserString`` such as nats-py's ``RawCredentials``, or a pair of file
    paths: JWT, seed) is read and checked the way nats-py reads it; the file
    of ``nkeys_seed`` must be readable. Without ``user_credentials`` (which
    nats-py prefers), the seed nats-py would sign with, ``nkeys_seed_str`` or
    else the content of the ``nkeys_seed`` file (both stripped, as nats-py
    reads them), must be an NKey user seed (:func:`seed_problem`): nats-py
    raised an untyped ``nkeys.ErrInvalidSeed`` out of ``connect``. Nothing is
    quoted but file paths.

    Raises:
        InvalidOptionError: a file missing or unreadable, a malformed .creds
            or NKey seed.

    """
    creds = options.get("user_credentials")
    if isinstance(creds, UserString):
        problem = creds_problem(str(creds))
        if problem is not None:
            raise InvalidOptionError(f"user_credentials (the text of a .creds file): {problem}")
    elif isinstance(creds, tuple):
        for path, what in zip(creds, ("user JWT file", "NKey seed file"), strict=False):
            _read(path, what)
    elif isinstance(creds, str | os.PathLike):
        _check_creds_file(creds)
    seed_str = options.get("nkeys_seed_str")
    signs = creds is None and not seed_str  # nats-py signs with the file's seed
    seed_file = options.get("nkeys_seed")
    if isinstance(seed_file, str | os.PathLike):
        data = _read(seed_file, "NKey seed file")
        problem = seed_problem(data.decode("utf-8", "replace").strip()) if signs else None
        if problem is not None:
            raise InvalidOptionError(
                f"NKey seed file {os.fspath(seed_file)!r} holds no NKey user seed: {problem}"
            )
    if creds is None and seed_str:
        problem = seed_problem(str(seed_str).strip())
        if problem is not None:
            raise InvalidOptionError(f"nkeys_seed_str is not an NKey user seed: {problem}")

"""The credential options of the Spark data sources: checked, never quoted.

``credsSecret`` (the text of a .creds file) and ``nkeySecret`` (an NKey user
seed) are checked here when the read or write is planned, because nats-py
fails late and obscurely on a malformed one; no error message shows a secret.
"""

from __future__ import annotations

import base64
import importlib.util
import re
from collections import UserString
from typing import Final

from aiojetstream import InvalidOptionError

__all__ = ["Credentials", "check_creds_secret", "needs_nkeys", "seed_problem"]

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

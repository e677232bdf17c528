"""Key-value keys, revisions and names: what a bucket's handle and its creation share.

Key validation (ADR-8), the operation a stored revision records, the fast parse
of a plain direct-get reply, and the mapping between a bucket and its backing
stream (``B`` <-> ``KV_B``). Pure: nothing here talks to a server.
"""

from __future__ import annotations

import bisect
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from .. import _headers as H
from .._bounds import MAX_UINT64, shown
from .._errors import (
    InvalidKeyError,
    InvalidResponseError,
    KeyValueError,
)
from .._models import (
    StreamConfig,
    StreamSource,
    parse_utc_timestamp,
)
from .._models.kv import (
    KeyValueOp,
)
from .._validation import exact_str, tokens_cover

if TYPE_CHECKING:
    pass


STREAM_PREFIX: Final = "KV_"
KV_OPERATION: Final = "KV-Operation"
OP_DEL: Final = "DEL"
OP_PURGE: Final = "PURGE"
ROLLUP_SUBJECT: Final = "sub"
#: ``purge_deletes`` keeps (as the only revision) markers younger than this (as nats.go).
DEFAULT_PURGE_DELETES_OLDER_THAN: Final = timedelta(minutes=30)
#: The longest duplicate window of a bucket (ADR-8: the TTL when shorter).
MAX_DUPLICATE_WINDOW: Final = timedelta(minutes=2)
#: The JetStream API level limit markers need (nats-server 2.11, ADR-48).
MARKERS_API_LEVEL: Final = 1

# ADR-8: ^[-/_=\.a-zA-Z0-9]+$, no leading or trailing '.', no '..'.
_KEY_TOKEN_RE: Final = re.compile(r"[-/_=a-zA-Z0-9]+")
#: What a delivered subject may hold after the prefix: literal subject tokens (not
#: only ADR-8 keys: another client, a raw publish, may have stored any literal subject,
#: and listing the bucket must not fail on it), none empty and none a wildcard.
_TOKEN: Final = r"(?![*>](?:\.|\Z))[^.]+"
_KEY_RE: Final = re.compile(rf"{_TOKEN}(?:\.{_TOKEN})*")


#: The whole header block of a direct get of a value stored without headers (a
#: plain put): nats-server's four lines and nothing else. Such a reply is a
#: ``PUT`` (no ``KV-Operation``, no ``Nats-Marker-Reason``) and parses exactly
#: as :func:`~aiojetstream._stream.direct_fields` parses it (each key once, no
#: blanks to strip); any other block (a status, user headers, a marker) takes
#: that general path.
_PLAIN_REPLY: Final = re.compile(
    rb"NATS/1\.0\r\nNats-Stream: [^\r\n]*\r\nNats-Subject: ([^\r\n]*)\r\n"
    rb"Nats-Sequence: ([1-9][0-9]{0,19})\r\n"
    rb"Nats-Time-Stamp: ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.([0-9]{1,9}))?Z)"
    rb"\r\n\r\n"
)


def plain_reply(block: bytes, subject: bytes) -> tuple[int, datetime] | None:
    """Revision and time of a plain direct get reply on ``subject`` (None: the general path).

    The revision is 1 to 2**64 - 1 (a stored message's sequence); any other
    (0, a leading zero, past 2**64 - 1) takes the general path, which words its error.
    """
    match = _PLAIN_REPLY.fullmatch(block)
    if match is None or match[1] != subject:
        return None
    revision = int(match[2])
    if revision > MAX_UINT64:
        return None
    fraction = match[4]
    created = parse_utc_timestamp(
        match[3].decode("ascii"), None if fraction is None else fraction.decode("ascii")
    )
    if created is None:
        return None  # out of range: the general path words the error
    return revision, created


# --------------------------------------------------------------------------- validation


def _key_problem(key: object, wildcards: bool) -> str | None:
    if not isinstance(key, str) or not key:
        return "a key must be a non-empty string"
    tokens = key.split(".")
    for i, token in enumerate(tokens):
        if not token:
            return "a key may not start or end with '.' nor contain '..'"
        if wildcards and (token == "*" or (token == ">" and i == len(tokens) - 1)):
            continue
        if not _KEY_TOKEN_RE.fullmatch(token):
            if token in ("*", ">"):
                return (
                    "wildcards are only allowed in watch filters, as whole tokens ('>' only last)"
                )
            return "a key may only contain letters, digits and '-', '/', '_', '=', '.'"
    return None


def validate_key(key: object) -> str:
    r"""Return ``key`` if it is a valid key (ADR-8), else raise.

    Valid keys match ``^[-/_=\\.a-zA-Z0-9]+$``, do not start or end with ``.``
    and contain no ``..``.

    Raises:
        InvalidKeyError: the key is not valid (a ``ValueError``).

    """
    problem = _key_problem(key, wildcards=False)
    if problem is not None:
        raise InvalidKeyError(f"invalid key {shown(key)}: {problem}")
    assert isinstance(key, str)
    return exact_str(key)


def key_of(subject: str, prefix: str, bucket: str) -> str:
    """The key of a message delivered on ``subject`` (the bucket's subjects start ``prefix``).

    Raises:
        InvalidResponseError: ``subject`` is not ``prefix`` plus literal subject
            tokens: a server delivers only the subjects a bucket's filter takes,
            and stores only literal subjects (another bucket's subject, ``''``,
            ``'.x'``, ``'>'`` are none). A key stored by another client outside
            ADR-8's characters (``'ключ'``) is listed.

    """
    if subject.startswith(prefix) and _KEY_RE.fullmatch(subject, len(prefix)):
        return subject[len(prefix) :]
    raise InvalidResponseError(
        f"bucket {bucket!r}: a message delivered on {shown(subject)}, which is not {prefix}<key>"
    )


def validate_key_filter(key: object) -> str:
    """Return ``key`` if it is a valid watch filter: tokens may also be ``*`` or a final ``>``.

    Raises:
        InvalidKeyError: the filter is not valid (a ``ValueError``).

    """
    problem = _key_problem(key, wildcards=True)
    if problem is not None:
        raise InvalidKeyError(f"invalid key filter {shown(key)}: {problem}")
    assert isinstance(key, str)
    return exact_str(key)


def watch_filters(filters: list[str]) -> list[str]:
    """Valid watch ``filters`` (already checked one by one), exact repeats dropped.

    A JetStream consumer refuses two filters one of which matches every key the
    other matches (``a.>`` and ``a.b``): refused here, before anything is sent.
    Filters that merely share some keys (``a.*`` and ``*.b``) are the server's
    to judge: recent nats-server versions accept them (a key matching both is
    delivered once), older ones refuse them (error code 10138).

    Raises:
        InvalidKeyError: a filter covers another one.

    """
    unique = list(dict.fromkeys(filters))
    tokens = [f.split(".") for f in unique]
    # A filter without wildcards covers only itself (repeats are gone): only pairs
    # with a wildcard filter can overlap (a watch of 6,000 keys took 6 s of CPU).
    wild = [i for i, each in enumerate(tokens) if "*" in each or ">" in each]
    is_wild = set(wild)
    for i, first in enumerate(tokens):
        later = range(i + 1, len(tokens)) if i in is_wild else wild[bisect.bisect_right(wild, i) :]
        for j in later:
            if tokens_cover(first, tokens[j]):
                wide, narrow = i, j
            elif tokens_cover(tokens[j], first):
                wide, narrow = j, i
            else:
                continue
            raise InvalidKeyError(
                f"watch filters {unique[wide]!r} and {unique[narrow]!r} overlap: every key "
                f"{unique[narrow]!r} matches, {unique[wide]!r} matches too (a consumer "
                f"refuses that); drop {unique[narrow]!r}"
            )
    return unique


def entry_operation(headers: dict[str, str] | None) -> KeyValueOp:
    """The operation a stored revision records, from its headers.

    ``KV-Operation: DEL`` / ``PURGE`` are the client markers (ADR-8). Server limit
    markers (ADR-48) carry ``Nats-Marker-Reason``: ``Remove`` is a ``DEL``;
    ``MaxAge``, ``Purge`` (and any reason a newer server may add) a ``PURGE``.
    """
    if not headers:
        return KeyValueOp.PUT
    op = headers.get(KV_OPERATION)
    if op == OP_DEL:
        return KeyValueOp.DEL
    if op == OP_PURGE:
        return KeyValueOp.PURGE
    reason = headers.get(H.MARKER_REASON)
    if reason:
        return KeyValueOp.DEL if reason == "Remove" else KeyValueOp.PURGE
    return KeyValueOp.PUT


# --------------------------------------------------------------------------- bucket <-> stream


def bucket_of(stream_name: str) -> str:
    """The bucket a backing stream holds: ``KV_B`` -> ``B`` (any other name as it is)."""
    return (
        stream_name[len(STREAM_PREFIX) :] if stream_name.startswith(STREAM_PREFIX) else stream_name
    )


def stream_of(name: str) -> str:
    """The backing stream of a bucket: ``B`` -> ``KV_B`` (``KV_B`` as it is)."""
    return name if name.startswith(STREAM_PREFIX) else STREAM_PREFIX + name


#: How many mirrors of mirrors a bucket's handle follows to the bucket holding the keys.
MAX_MIRROR_DEPTH: Final = 8

_NAMESPACE_RE: Final = re.compile(r"[a-zA-Z0-9_-]+")


def mirrored_namespace(mirror: StreamSource, namespace: str) -> str:
    """The namespace a mirror stores the keys ``$KV.<namespace>.<key>`` of its origin under.

    Without subject transforms: ``namespace``. With them, each transform must
    keep the key and only rename the namespace (``$KV.<a>.<rest>`` to
    ``$KV.<b>.<rest>``, ``a`` a name or ``*``, the same ``b`` for all): ``b``.

    Raises:
        KeyValueError: a transform does something else (the handle could not
            tell the keys in the mirror's subjects: it would read nothing).

    """
    transforms = mirror.subject_transforms
    if not transforms:
        return namespace
    renamed: set[str] = set()
    for transform in transforms:
        src = (transform.src or "").split(".")
        dest = transform.dest.split(".")
        if (
            len(src) < 3
            or src[0] != "$KV"
            or dest[0] != "$KV"
            or src[2:] != dest[2:]
            or "{{" in transform.dest
            or not (src[1] == "*" or _NAMESPACE_RE.fullmatch(src[1]))
            or not _NAMESPACE_RE.fullmatch(dest[1])
        ):
            renamed.clear()
            break
        renamed.add(dest[1])
    if len(renamed) != 1:
        shown_transforms = ", ".join(f"{t.src or '>'} -> {t.dest}" for t in transforms)
        raise KeyValueError(
            f"the mirror of {mirror.name!r} has subject transforms ({shown_transforms}) that do "
            "not map '$KV.<bucket>.<key>' to '$KV.<name>.<key>' (one name for all): the "
            "bucket's keys could not be read"
        )
    return renamed.pop()


def kv_namespaces(chain: list[StreamConfig]) -> tuple[str, str, str | None]:
    """Where a bucket's handle reads and writes: ``(read, write, api)``.

    ``chain`` is the bucket's stream config, then, while one is a mirror of a
    stream in the same account and domain that was looked up, its origin's.
    ``read`` is the namespace of the subjects the bucket's stream holds
    (``$KV.<read>.<key>``), through every mirror's subject transforms;
    ``write`` the bucket writes go to (the first origin that is no mirror, or
    the last one known); ``api`` the API prefix of a cross-domain or
    cross-account mirror's origin (``external.api``), for the writes, or None.

    Raises:
        KeyValueError: a mirror's subject transforms are not a rename of the
            namespace (:func:`mirrored_namespace`).

    """
    last = chain[-1]
    mirror = last.mirror
    api = None
    if mirror is None:
        read = write = bucket_of(last.name)
    else:
        read = write = bucket_of(mirror.name)
        if mirror.external is not None and mirror.external.api:
            api = mirror.external.api.rstrip(".")
        read = mirrored_namespace(mirror, read)
    for config in reversed(chain[:-1]):
        if config.mirror is not None:
            read = mirrored_namespace(config.mirror, read)
    return read, write, api


#: (bucket, key pattern) pairs whose stretched TTL was logged: each once (bounded).
_STRETCH_TOLD: set[tuple[str, str]] = set()
_STRETCH_TOLD_MAX: Final = 4096


def stretch_told(bucket: str, key: str) -> bool:
    """Whether a stretched TTL on ``key``'s pattern in ``bucket`` was told; marks it told."""
    told = (bucket, key_pattern(key))
    if told in _STRETCH_TOLD:
        return True
    if len(_STRETCH_TOLD) >= _STRETCH_TOLD_MAX:
        _STRETCH_TOLD.clear()
    _STRETCH_TOLD.add(told)
    return False


def key_pattern(key: str) -> str:
    """The keys a TTL warning stands for: ``lock.job7`` -> ``lock.*``, ``session`` -> ``*``."""
    head, dot, _ = key.rpartition(".")
    return f"{head}.*" if dot else "*"

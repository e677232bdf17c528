"""Object names, subjects, digests and infos: the pure part of the object store.

Name validation and encoding (base64url into the meta subject), ``SHA-256=``
digests as every client writes them, nuids, the backing stream's configuration,
and infos to and from their stored JSON. Nothing here talks to a server.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import secrets
import string
from collections.abc import (
    Mapping,
)
from datetime import datetime
from typing import TYPE_CHECKING, Final

from pydantic import ValidationError

from .. import _bounds as B
from .. import _headers as H
from .._errors import (
    InvalidHeaderError,
    InvalidNameError,
    InvalidOptionError,
    InvalidResponseError,
)
from .._message import Msg
from .._models import (
    DiscardPolicy,
    StoreCompression,
    StreamConfig,
    from_wire,
)
from .._models.kv import validate_bucket_name
from .._models.obj import (
    ObjectInfo,
    ObjectStoreConfig,
    normalize_headers,
)

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

logger = logging.getLogger("aiojetstream")
#: A stored info's nuid: one subject token of these characters (nats.go's nuids are base62).
_NUID: Final = re.compile(r"[A-Za-z0-9_-]+")


STREAM_PREFIX: Final = "OBJ_"
#: The chunk size of a put unless told otherwise (as nats.go, nats.js and nats-py).
DEFAULT_CHUNK_SIZE: Final = 128 * 1024
DIGEST_PREFIX: Final = "SHA-256="
#: The longest object name, in UTF-8 bytes: its base64 meta subject stays well
#: inside the server's 4 KiB protocol line.
MAX_NAME_BYTES: Final = 2048

_NUID_ALPHABET: Final = string.digits + string.ascii_letters
_HEX_DIGEST: Final = re.compile(r"[0-9a-fA-F]{64}")
#: An object header's name: printable ASCII but ':' (nats.js's rule; nats.go checks
#: none). Object headers live in the info's JSON, never on the wire as header lines.
_OBJECT_HEADER_KEY: Final = re.compile(r"[!-9;-~]+")
_B64_DIGEST: Final = re.compile(r"[A-Za-z0-9+/_-]{43}=?")


# --------------------------------------------------------------------------- pure helpers


def validate_object_name(name: object) -> str:
    """Return ``name`` (as an exact ``str``) if it is a valid object name, else raise.

    Any non-empty text is a valid name (it is base64url-encoded into the meta
    subject) up to 2,048 bytes of UTF-8; lone surrogates are refused.

    Raises:
        InvalidNameError: the name is empty, not a ``str``, not encodable or too long.

    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"an object name must be a non-empty string, got {B.shown(name)}")
    if type(name) is not str:
        name = str.__str__(name)  # a subclass: only the checked text goes on the wire
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise InvalidNameError(
            f"invalid object name {name!r}: it is not valid Unicode (lone surrogate)"
        ) from None
    if size > MAX_NAME_BYTES:
        raise InvalidNameError(
            f"object name of {size} bytes is longer than {MAX_NAME_BYTES} bytes (UTF-8)"
        )
    return name


def encode_name(name: str) -> str:
    """The meta subject token of an object name: base64url with padding (ADR-20)."""
    return base64.urlsafe_b64encode(name.encode()).decode()


def meta_subject(bucket: str, name: str) -> str:
    """The subject of the info of the object ``name``: ``$O.<bucket>.M.<base64url(name)>``."""
    return f"$O.{bucket}.M." + encode_name(name)


def chunk_subject(bucket: str, nuid: str) -> str:
    """The subject of the chunks of the put ``nuid``: ``$O.<bucket>.C.<nuid>``."""
    return f"$O.{bucket}.C." + nuid


def format_digest(sha256: bytes) -> str:
    """``SHA-256=`` and the base64url (padded) SHA-256, as nats.go writes it."""
    return DIGEST_PREFIX + base64.urlsafe_b64encode(sha256).decode()


def parse_digest(text: str) -> bytes:
    """The 32 bytes of a ``SHA-256=...`` digest as any client writes it.

    The prefix is matched without regard to case; the value may be base64url
    or standard base64, padded or not, or 64 hex digits.

    Raises:
        ValueError: not a SHA-256 digest.

    """
    if not isinstance(text, str) or text[:8].upper() != DIGEST_PREFIX:
        raise ValueError(f"not a SHA-256 digest: {text!r}")
    value = text[8:]
    if _HEX_DIGEST.fullmatch(value):
        return bytes.fromhex(value)
    if _B64_DIGEST.fullmatch(value):
        value = value.rstrip("=").replace("+", "-").replace("/", "_") + "="
        try:
            raw = base64.urlsafe_b64decode(value)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 32:
            return raw
    raise ValueError(f"not a SHA-256 digest: {text!r}")


def new_nuid() -> str:
    """A new 22-character unique id (the shape of a NATS nuid) for a put's chunk subject."""
    return "".join(secrets.choice(_NUID_ALPHABET) for _ in range(22))


def stream_name(bucket: str) -> str:
    return STREAM_PREFIX + bucket


def object_stream_config(config: ObjectStoreConfig) -> StreamConfig:
    """The configuration of the stream backing a bucket (ADR-20, as nats.go and nats.js).

    Raises:
        InvalidNameError: the bucket name is invalid.

    """
    if not isinstance(config, ObjectStoreConfig):
        raise InvalidOptionError(
            f"config must be an ObjectStoreConfig, got {type(config).__name__}"
        )
    bucket = validate_bucket_name(config.bucket)
    fields: dict[str, object] = {
        "name": stream_name(bucket),
        "description": config.description,
        "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        "max_age": config.ttl or None,
        "max_bytes": config.max_bytes,
        "storage": config.storage,
        "num_replicas": config.replicas,
        "discard": DiscardPolicy.NEW,
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "compression": StoreCompression.S2 if config.compression else StoreCompression.NONE,
        "placement": config.placement,
        "metadata": config.metadata,
    }
    return StreamConfig(**{k: v for k, v in fields.items() if v is not None})


def meta_body(info: ObjectInfo) -> bytes:
    """The JSON of an info as stored on the meta subject (nats.go's shape, without ``mtime``)."""
    data = info.model_dump(mode="json", exclude_none=True, exclude={"mtime"}, by_alias=True)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def parse_info(data: bytes, when: datetime, bucket: str, subject: str) -> ObjectInfo:
    """Parse a stored info; ``mtime`` is the time the server stored it.

    Raises:
        InvalidResponseError: the message is not an object info.

    """
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        raw["mtime"] = when
        raw.setdefault("bucket", bucket)
        nuid = raw.get("nuid")
        if nuid == "":
            raw["nuid"] = None
        elif nuid is not None and not (isinstance(nuid, str) and _NUID.fullmatch(nuid)):
            # It becomes part of the subjects read and purged: "$O.<bucket>.C.>" would
            # purge every object's chunks.
            raise ValueError(f"nuid {nuid!r} is not a single token of [A-Za-z0-9_-]")
        return from_wire(ObjectInfo, raw)
    except ValidationError as exc:  # one line: "size: Input should be ... (got -1)"
        reasons = "; ".join(_reason(err) for err in exc.errors(include_url=False))
        raise InvalidResponseError(f"invalid object info on {subject!r}: {reasons}") from None
    except (ValueError, RecursionError) as exc:
        raise InvalidResponseError(f"invalid object info on {subject!r}: {exc}") from None


def _reason(err: ErrorDetails) -> str:
    """One pydantic error of an info: ``size: Input should be ... (got -1)``."""
    where = ".".join(map(str, err["loc"])) or "info"
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] in ("missing", "value_error"):
        return f"{where}: {message}"  # the input is the whole info / in the message
    return f"{where}: {message} (got {B.shown(err['input'])})"


def check_headers(headers: object) -> dict[str, list[str]] | None:
    """An object's headers, checked: names printable ASCII but ':', values as any header's.

    Not the RFC 7230 token rule of message headers: an object written by
    nats.js with ``X/Slash`` must take a description-only ``update_meta``.
    """
    try:
        out = normalize_headers(headers)
    except ValueError as exc:
        raise InvalidHeaderError(str(exc)) from None
    for key, values in (out or {}).items():
        if not _OBJECT_HEADER_KEY.fullmatch(key):
            raise InvalidHeaderError(
                f"invalid object header name {B.shown(key)}: printable ASCII but ':' and spaces"
            )
        for value in values:
            bad = H._BAD_VALUE_CHARS.search(value)
            if bad is not None:  # the value rules of any header
                raise InvalidHeaderError(
                    f"object header {key!r} has a value containing {bad.group()!r} (CR, LF, "
                    "NUL, other control characters but tab, and line separators are not allowed)"
                )
    return out


def check_metadata(metadata: object) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise InvalidOptionError(
            f"metadata must be a mapping of str to str, got {B.shown(metadata)}"
        )
    return dict(metadata) or None


def check_description(description: object) -> str | None:
    if description is not None and not isinstance(description, str):
        raise InvalidOptionError(f"description must be a str, got {B.shown(description)}")
    return description


def deleted_info(info: ObjectInfo) -> ObjectInfo:
    """A deleted info for ``info``'s name that names no chunks (a nuid of its own)."""
    return info.model_copy(
        update={
            "deleted": True,
            "nuid": new_nuid(),
            "size": 0,
            "chunks": 0,
            "digest": None,
            "mtime": None,
        }
    )


def parse_or_skip(msg: Msg, bucket: str) -> ObjectInfo | None:
    """The info of a listed or watched message; None (logged) for one that is none.

    One bad record (another client's, or junk published to the meta
    subjects) must not end a listing or a watch of the whole bucket; as
    nats.go does, it is left out. Reading that object raises instead.
    """
    try:
        return parse_info(msg.data, msg.metadata.timestamp, bucket, msg.subject)
    except InvalidResponseError as exc:
        logger.warning("object store %r: skipped an invalid entry: %s", bucket, exc)
        return None

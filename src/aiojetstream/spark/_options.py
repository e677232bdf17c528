"""Option parsing for the Spark data sources: pure, no pyspark, no I/O.

Spark hands a data source its options as case-insensitive strings. Everything
here turns them into small frozen value objects once, in the planner, so a bad
option fails before a job runs, with an error naming the option. The value
objects are what travels (by cloudpickle) to the executors: plain data only.
"""

from __future__ import annotations

import base64
import difflib
import importlib.util
import json
import math
import re
import ssl
import warnings
from collections import UserString
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from aiojetstream import InvalidOptionError

from ._telemetry import check_telemetry

__all__ = [
    "ConnectOptions",
    "JetStreamSparkWarning",
    "KVOptions",
    "SinkOptions",
    "SourceOptions",
    "lower_keys",
    "parse_kv_options",
    "parse_sink_options",
    "parse_source_options",
]

DEFAULT_SERVERS: Final = "nats://127.0.0.1:4222"
#: Seconds an idle read consumer lives on after its reader vanished (limit(), a failed task).
DEFAULT_INACTIVE_THRESHOLD: Final = 30.0
#: One partition for every so many sequences when numPartitions is not given: a
#: micro-batch of 100,000 messages is 10 tasks, so a cluster's cores share it.
SEQUENCES_PER_PARTITION: Final = 10_000
MAX_DEFAULT_PARTITIONS: Final = 64

#: Seconds driver-side calls and read tasks keep retrying through a leader election.
DEFAULT_RETRY_TIMEOUT: Final = 30.0
#: Kafka's default ``maxTriggerDelay`` (15 minutes), in seconds.
DEFAULT_MAX_TRIGGER_DELAY: Final = 900.0

# Upper bounds of the numeric options, checked when the read or write is planned.
#: ``numPartitions`` and ``minPartitions``: Spark tasks per batch (or micro-batch).
MAX_PARTITIONS: Final = 10_000
#: A stream sequence: nats-server's uint64 (it reads a larger one modulo 2**64).
MAX_SEQUENCE: Final = 2**64 - 1
#: The sequences and bytes per trigger: Spark's read limits are Java longs.
MAX_PER_TRIGGER: Final = 2**63 - 1
#: Seconds (``timeout``, ``retryTimeout``, ``inactiveThreshold``, ``maxTriggerDelay``):
#: the server's durations are int64 nanoseconds, 9,223,372,036 s (about 292 years).
MAX_SECONDS: Final = (2**63 - 1) // 1_000_000_000
#: ``maxPending``: publishes or puts in flight per task.
MAX_PENDING: Final = 1_000_000
#: The server's clock, in nanoseconds since 1970 (Go's int64 ``UnixNano``; it wraps
#: a time outside: a later ``startingTimestamp`` read from the first message).
MIN_TIME_NS: Final = -(2**63)
MAX_TIME_NS: Final = 2**63 - 1
_TIME_RANGE: Final = "1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z"

#: Every option by its lower-case key, spelled as the documentation spells it.
_DISPLAY: Final = {
    key.lower(): key
    for key in (
        "servers",
        "user",
        "password",
        "token",
        "creds",
        "credsSecret",
        "nkeySecret",
        "tlsCaFile",
        "tlsCertFile",
        "tlsKeyFile",
        "domain",
        "apiPrefix",
        "timeout",
        "ignoreUnknownOptions",
        "stream",
        "streams",
        "streamPattern",
        "subject",
        "startingOffsets",
        "startingTimestamp",
        "endingOffsets",
        "endingTimestamp",
        "numPartitions",
        "minPartitions",
        "failOnDataLoss",
        "maxRecordsPerTrigger",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "maxBytesPerTrigger",
        "inactiveThreshold",
        "consumerNamePrefix",
        "retryTimeout",
        "dedupe",
        "maxPending",
        "bucket",
    )
}
_CONNECT_KEYS: Final = frozenset(
    {
        "servers",
        "user",
        "password",
        "token",
        "creds",
        "credssecret",
        "nkeysecret",
        "tlscafile",
        "tlscertfile",
        "tlskeyfile",
        "domain",
        "apiprefix",
        "timeout",
        "ignoreunknownoptions",
        "telemetry",
    }
)
_SOURCE_KEYS: Final = _CONNECT_KEYS | {
    "stream",
    "streams",
    "streampattern",
    "subject",
    "startingoffsets",
    "startingtimestamp",
    "endingoffsets",
    "endingtimestamp",
    "numpartitions",
    "minpartitions",
    "failondataloss",
    "maxrecordspertrigger",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "maxbytespertrigger",
    "inactivethreshold",
    "consumernameprefix",
    "retrytimeout",
}
_SINK_KEYS: Final = _CONNECT_KEYS | {"subject", "dedupe", "maxpending", "retrytimeout"}
_KV_KEYS: Final = _CONNECT_KEYS | {"bucket", "maxpending"}
#: Keys Spark itself adds to a source's or sink's options: never refused.
_SPARK_KEYS: Final = frozenset({"path", "paths", "checkpointlocation", "queryname"})
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

_NAME_RE: Final = re.compile(r"^[^\s.*>/\\\x00]+$")


class JetStreamSparkWarning(UserWarning):
    """Questionable but usable: an unknown option, or data skipped (``failOnDataLoss=false``)."""


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Return ``options`` with lower-case keys (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_unknown(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    """Refuse an option the format does not know, naming the valid ones (a near miss first).

    With ``ignoreUnknownOptions=true`` it is a :class:`JetStreamSparkWarning` instead.
    """
    unknown = sorted(k for k in options if k not in known and k not in _SPARK_KEYS)
    if not unknown:
        return
    lenient = _bool(options, "ignoreunknownoptions", "ignoreUnknownOptions", False)
    valid = sorted((_DISPLAY.get(k, k) for k in known), key=str.lower)
    for key in unknown:
        near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
        hint = f" (did you mean {_DISPLAY.get(near[0], near[0])!r}?)" if near else ""
        if lenient:
            warnings.warn(
                f"aiojetstream.spark: unknown {what} option {key!r} is ignored{hint}",
                JetStreamSparkWarning,
                stacklevel=3,
            )
            continue
        raise InvalidOptionError(
            f"unknown {what} option {key!r}{hint}. Valid options: {', '.join(valid)} "
            "(and Spark's own, such as checkpointLocation). Set ignoreUnknownOptions=true "
            "to ignore unknown options with a warning."
        )


def _name(options: Mapping[str, str], key: str, display: str) -> str:
    value = options.get(key)
    if value is None or not value.strip():
        raise InvalidOptionError(f"option {display!r} is required")
    value = value.strip()
    if not _NAME_RE.match(value):
        raise InvalidOptionError(
            f"option {display!r}: invalid name {value!r} "
            "(no whitespace, '.', '*', '>', '/' or '\\')"
        )
    return value


def _shown(raw: str) -> str:
    """``repr(raw)``, cut: an option may be a giant number."""
    return repr(raw) if len(raw) <= 60 else repr(raw[:60]) + f"... ({len(raw)} characters)"


def _positive_int(
    options: Mapping[str, str], key: str, display: str, maximum: int = MAX_PER_TRIGGER
) -> int | None:
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    try:
        value = int(text) if len(text) <= 40 else 0  # (int() refuses 4,300 digits itself)
    except ValueError:
        value = 0
    if not 0 < value <= maximum:
        raise InvalidOptionError(
            f"option {display!r}: expected a positive integer up to {maximum:,}, got {_shown(raw)}"
        )
    return value


def _positive_float(
    options: Mapping[str, str],
    key: str,
    display: str,
    default: float,
    maximum: float = MAX_SECONDS,
) -> float:
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= maximum):
        raise InvalidOptionError(
            f"option {display!r}: expected positive seconds up to {maximum:,.0f} "
            f"(about 292 years, the server's int64 nanoseconds), got {_shown(raw)}"
        )
    return value


def _bool(options: Mapping[str, str], key: str, display: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"option {display!r}: expected true or false, got {raw!r}")


def _subjects(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = options.get("subject")
    if raw is None or not raw.strip():
        return ()
    subjects = tuple(s.strip() for s in raw.split(","))
    for subject in subjects:
        tokens = subject.split(".")
        if (
            not subject
            or any(not t for t in tokens)
            or any(c.isspace() or c == "\x00" for c in subject)
            or any(">" in t and t != ">" for t in tokens)
            or any("*" in t and t != "*" for t in tokens)
            or (">" in tokens and tokens[-1] != ">")
        ):
            raise InvalidOptionError(f"option 'subject': invalid subject filter {subject!r}")
    for i, first in enumerate(subjects):
        for second in subjects[i + 1 :]:
            if _overlap(first.split("."), second.split(".")):
                raise InvalidOptionError(
                    f"option 'subject': filters {first!r} and {second!r} overlap (a subject "
                    "can match both, which a JetStream consumer refuses); drop one of them"
                )
    return subjects


def _overlap(first: list[str], second: list[str]) -> bool:
    """Whether some subject matches both filters (their tokens)."""
    for a, b in zip(first, second, strict=False):
        if a == ">" or b == ">":
            return True
        if a != b and a != "*" and b != "*":
            return False
    return len(first) == len(second)


# ----------------------------------------------------------------------------- connection

#: ``@`` and the characters urllib reads as one (NFKC): each ends a URL's userinfo.
_AT_SIGNS: Final = "@\ufe6b\uff20"
#: nats-py's schemes: shown before ``***@`` (another could be the start of a token).
_SCHEME_RE: Final = re.compile(r"(?:nats|tls|wss?)://", re.IGNORECASE)

#: Where credentials go instead of a ``servers`` URL (for error messages).
_CREDENTIAL_OPTIONS: Final = (
    "the options 'user' and 'password', 'token', 'credsSecret' (the text of a .creds file) "
    "or 'nkeySecret' (an NKey seed), or 'creds' (the path of a .creds file on every node)"
)
#: A .creds file as nsc writes it: nats-py reads exactly this layout (one value per line).
_CREDS_LAYOUT: Final = (
    "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
    "-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
)
_JWT_RE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
#: An encoded NKey seed: 58 base32 characters ('S', the key's role, the seed, a checksum).
_SEED_RE: Final = re.compile(r"S[A-Z2-7]{57}")
_PUBLIC_USER_KEY_RE: Final = re.compile(r"U[A-Z2-7]{55}")
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


def _seed_problem(seed: str) -> str | None:
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


def _creds_secret(raw: str) -> str:
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
    problem = _seed_problem(seed)
    if problem is not None:
        raise InvalidOptionError(
            "option 'credsSecret': the line after '-----BEGIN USER NKEY SEED-----' is not "
            f"an NKey user seed: {problem}"
        )
    return _CREDS_LAYOUT.format(jwt=jwt, seed=seed)


def _servers(raw: str) -> str:
    """The ``servers`` URLs, comma-separated; refuses credentials in them, never quotes them."""
    urls = [url.strip() for url in raw.split(",")]
    for index, url in enumerate(urls, 1):
        # The userinfo ends at the last '@' before the host, and a password may hold
        # '@', '/', ':' or ','; a host never holds '@': any '@' means credentials
        # (or a character urllib reads as one, such as the fullwidth '\uff20').
        if any(sign in url for sign in _AT_SIGNS):
            raise InvalidOptionError(
                f"option 'servers': URL {index} of {len(urls)} has credentials in it "
                "(user:password@, user@ or token@ before the host). They would show in "
                "query plans, logs and error messages, so they are refused there: remove "
                f"them from the URL and give them with {_CREDENTIAL_OPTIONS}"
            )
    for index, url in enumerate(urls, 1):
        if not url:
            raise InvalidOptionError(
                "option 'servers': expected URLs separated by commas, but entry "
                f"{index} of {len(urls)} is empty"
            )
    return ",".join(urls)


def _needs_nkeys(display: str) -> None:
    if importlib.util.find_spec("nkeys") is None:
        raise InvalidOptionError(
            f"option {display!r} needs the Python package 'nkeys' (pip install nkeys) "
            "wherever Spark runs Python"
        )


class _Credentials(UserString):
    """In-memory .creds text, with a repr that does not show it.

    nats-py reads a ``UserString`` given as ``user_credentials`` as the text of
    a .creds file (its ``RawCredentials`` is one); a plain one keeps this
    extension off nats-py's modules (only the core's boundary imports them).
    """

    def __repr__(self) -> str:
        return "RawCredentials(<redacted>)"


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """How to reach the server: plain data, safe to pickle to executors.

    The secrets (``password``, ``token``, ``creds_secret``, ``nkey_secret``)
    are left out of the repr; they still count for equality and the hash.
    """

    servers: str = DEFAULT_SERVERS
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    creds: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    domain: str | None = None
    api_prefix: str | None = None
    timeout: float = 10.0
    #: The text of a .creds file (user JWT and NKey seed), in nsc's layout.
    creds_secret: str | None = field(default=None, repr=False)
    #: An NKey user seed (``SU...``).
    nkey_secret: str | None = field(default=None, repr=False)
    #: Row and batch metrics (see ``_telemetry``): None (off), ``"true"`` or
    #: ``"module:function"``. Not part of the connection's identity.
    telemetry: str | None = field(default=None, compare=False)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`aiojetstream.connect` (builds the TLS context)."""
        kwargs: dict[str, Any] = {"timeout": self.timeout, "name": "aiojetstream.spark"}
        if self.domain:
            kwargs["domain"] = self.domain
        if self.api_prefix:
            kwargs["api_prefix"] = self.api_prefix
        if self.user is not None:
            kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password
        if self.token is not None:
            kwargs["token"] = self.token
        if self.creds is not None:
            kwargs["user_credentials"] = self.creds
        if self.creds_secret is not None:
            kwargs["user_credentials"] = _Credentials(self.creds_secret)
        if self.nkey_secret is not None:
            kwargs["nkeys_seed_str"] = self.nkey_secret
        if self.tls_ca_file or self.tls_cert_file:
            context = ssl.create_default_context(cafile=self.tls_ca_file)
            if self.tls_cert_file:
                context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
            kwargs["tls"] = context
        return kwargs

    @property
    def tls(self) -> bool:
        """Whether a TLS option is set: the connection must then be TLS."""
        return bool(self.tls_ca_file or self.tls_cert_file)

    def urls(self) -> str:
        """The servers to dial; with a TLS option, always over TLS.

        ``nats://`` (or no scheme) becomes ``tls://``, ``ws://`` becomes ``wss://``:
        nats-py upgrades a ``nats://`` connection to TLS only when the server asks
        for it, so a plaintext server (or a man in the middle) would receive the
        credentials in clear; ``tls://`` refuses a server without TLS.
        """
        if not self.tls:
            return self.servers
        urls = []
        for url in self.servers.split(","):
            url = url.strip()
            scheme, sep, rest = url.partition("://")
            if not sep:
                url = "tls://" + url
            elif scheme.lower() == "nats":
                url = "tls://" + rest
            elif scheme.lower() == "ws":
                url = "wss://" + rest  # the websocket's own TLS
            urls.append(url)
        return ",".join(urls)

    def describe(self) -> str:
        """The servers, for error messages: never credentials (``user:password@`` becomes ``***@``).

        :func:`_connect` refuses URLs with credentials; this also holds for
        options made otherwise. The core's rule, which the library's own
        connection errors follow (tests/unit/test_redaction.py holds the two
        equal; an extension does not import the core's private modules): the
        userinfo ends at the *last* ``@`` (or a character urllib reads as
        one), and a password may hold ``@``, ``/``, ``:`` and even ``,`` (so
        the URLs cannot be told apart safely): everything after the first
        scheme (nats-py's only) up to the last ``@`` goes, servers listed
        before it included.
        """
        text = self.servers.strip()
        at = max(text.rfind(sign) for sign in _AT_SIGNS)
        if at < 0:
            return text
        scheme = _SCHEME_RE.match(text)
        return f"{scheme.group(0) if scheme else ''}***@{text[at + 1 :]}"


def _connect(options: Mapping[str, str]) -> ConnectOptions:
    """The connection options; none of the errors quotes a secret or a ``servers`` URL."""
    servers = _servers(options.get("servers", DEFAULT_SERVERS))
    if options.get("tlskeyfile") and not options.get("tlscertfile"):
        raise InvalidOptionError("option 'tlsKeyFile' needs 'tlsCertFile'")
    if options.get("password") is not None and options.get("user") is None:
        raise InvalidOptionError("option 'password' needs 'user'")
    domain = options.get("domain") or None
    if domain is not None and not _NAME_RE.match(domain):
        raise InvalidOptionError(f"option 'domain': invalid domain {domain!r}")
    creds_secret = options.get("credssecret")
    nkey_secret = options.get("nkeysecret")
    if creds_secret is not None and options.get("creds") is not None:
        raise InvalidOptionError(
            "options 'creds' and 'credsSecret' exclude each other: give the .creds file "
            "either as a path or as its text"
        )
    if nkey_secret is not None and (creds_secret is not None or options.get("creds") is not None):
        raise InvalidOptionError(
            "option 'nkeySecret' cannot go with 'creds' or 'credsSecret' (a .creds file "
            "holds the user's NKey seed itself): give one of them"
        )
    if creds_secret is not None:
        creds_secret = _creds_secret(creds_secret)
    if nkey_secret is not None:
        nkey_secret = nkey_secret.strip()
        problem = _seed_problem(nkey_secret)
        if problem is not None:
            raise InvalidOptionError(f"option 'nkeySecret': not an NKey user seed: {problem}")
    for display, value in (
        ("creds", options.get("creds")),
        ("credsSecret", creds_secret),
        ("nkeySecret", nkey_secret),
    ):
        if value is not None:
            _needs_nkeys(display)
    return ConnectOptions(
        servers=servers,
        creds_secret=creds_secret,
        nkey_secret=nkey_secret,
        user=options.get("user"),
        password=options.get("password"),
        token=options.get("token"),
        creds=options.get("creds"),
        tls_ca_file=options.get("tlscafile") or None,
        tls_cert_file=options.get("tlscertfile") or None,
        tls_key_file=options.get("tlskeyfile") or None,
        domain=domain,
        api_prefix=options.get("apiprefix") or None,
        timeout=_positive_float(options, "timeout", "timeout", 10.0),
        telemetry=check_telemetry(options.get("telemetry")),
    )


# ----------------------------------------------------------------------------- source

Start = Literal["earliest", "latest"] | int
End = Literal["latest"] | int

_DURATION_RE: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _offset(raw: str, display: str, words: tuple[str, ...], stream: str | None = None) -> str | int:
    text = raw.strip()
    if text.lower() in words:
        return text.lower()
    digits = text
    if text.startswith("{"):
        # An offset as written in a checkpoint: {"stream": ..., "seq": N, "created": ...}.
        offset = _json_offset(text)
        if offset is not None:
            name, digits = offset
            if stream is not None and name != stream:
                raise InvalidOptionError(
                    f"option {display!r}: the offset is of stream {name!r}, not {stream!r}"
                )
    if (
        digits.isascii()
        and digits.isdigit()
        and len(digits) <= 40  # (int() refuses 4,300 digits itself)
        and 1 <= int(digits) <= MAX_SEQUENCE
    ):
        return int(digits)
    allowed = " | ".join(words)
    raise InvalidOptionError(
        f"option {display!r}: expected {allowed}, a stream sequence from 1 to 2**64 - 1 "
        "(the server's uint64) or a JSON object of them per stream such as "
        f'{{"ORDERS-0": 1001, "ORDERS-1": "{words[0]}"}}, got {_shown(raw)}'
    )


def _json_offset(text: str) -> tuple[str, str] | None:
    """The stream and the sequence (as digits) of a JSON offset; None if it is none."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not {"stream", "seq"} <= value.keys():
        return None
    name, seq = value["stream"], value["seq"]
    if not isinstance(name, str) or isinstance(seq, bool) or not isinstance(seq, int):
        return None
    return name, str(seq)


def _per_stream(raw: str, display: str, words: tuple[str, ...]) -> dict[str, str | int] | None:
    """A JSON object of offsets per stream (``{"A": 5, "B": "earliest"}``); None if not one.

    Also takes a multi-stream checkpoint offset (``{"streams": {"A": {"seq": 5, ...}}}``).
    """
    text = raw.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidOptionError(
            f"option {display!r}: not valid JSON ({raw!r}); expected e.g. "
            f'{{"ORDERS-0": 1001, "ORDERS-1": "{words[0]}"}}'
        ) from None
    if not isinstance(value, dict) or {"stream", "seq"} <= value.keys():
        return None  # a single stream's checkpoint offset: _offset() reads it
    if set(value) == {"streams"} and isinstance(value["streams"], dict):
        value = {k: v.get("seq") if isinstance(v, dict) else v for k, v in value["streams"].items()}
    result: dict[str, str | int] = {}
    for name, seq in value.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidOptionError(f"option {display!r}: invalid stream name {name!r}")
        if isinstance(seq, str) and seq.strip().lower() in words:
            result[name] = seq.strip().lower()
        elif isinstance(seq, int) and not isinstance(seq, bool) and 1 <= seq <= MAX_SEQUENCE:
            result[name] = seq
        else:
            allowed = " | ".join(words)
            raise InvalidOptionError(
                f"option {display!r}: stream {name!r}: expected {allowed} or a stream "
                f"sequence from 1 to 2**64 - 1 (the server's uint64), got {_shown(str(seq))}"
            )
    return result


def _timestamp(raw: str | None, display: str) -> datetime | None:
    """An ISO-8601 time (UTC unless it says otherwise) or epoch milliseconds, as Kafka takes."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if text.isascii() and text.isdigit():
        try:
            value = _EPOCH + timedelta(milliseconds=int(text) if len(text) <= 40 else 10**40)
        except OverflowError:
            raise InvalidOptionError(
                f"option {display!r}: {_shown(text)} epoch milliseconds is out of range: "
                f"the server's clock runs from {_TIME_RANGE}"
            ) from None
    else:
        try:
            value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidOptionError(
                f"option {display!r}: expected an ISO-8601 time such as 2026-01-31T12:00:00Z "
                f"or epoch milliseconds such as 1769860800000, got {_shown(raw)}"
            ) from None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
    try:
        ns = (value - _EPOCH) // timedelta(microseconds=1) * 1_000
    except OverflowError:
        ns = MAX_TIME_NS + 1
    if not MIN_TIME_NS <= ns <= MAX_TIME_NS:
        # The server reads a time as int64 nanoseconds since 1970 and wraps one outside:
        # 9999-12-31 as startingTimestamp read every row instead of none.
        raise InvalidOptionError(
            f"option {display!r}: {value.isoformat()} is out of range: the server counts "
            f"time in int64 nanoseconds since 1970, from {_TIME_RANGE}"
        )
    return value


def _duration(options: Mapping[str, str], key: str, display: str, default: float) -> float:
    """Seconds from ``"15m"``, ``"30s"``, ``"500ms"``, ``"1h"``, ``"1d"`` or a plain number."""
    raw = options.get(key)
    if raw is None or not raw.strip():
        return default
    match = _DURATION_RE.fullmatch(raw.strip().lower())
    value = math.nan
    if match is not None:
        value = float(match[1]) * _DURATION_UNITS[match[2] or "s"]
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise InvalidOptionError(
            f"option {display!r}: expected a duration such as 15m, 30s or 500ms, up to "
            f"{MAX_SECONDS:,} s (about 292 years), got {_shown(raw)}"
        )
    return value


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """A parsed ``jetstream`` read: which streams, which range, how to connect.

    Exactly one of ``stream`` (one stream, the offsets' original form),
    ``streams`` (a fixed list) and ``stream_pattern`` (a regular expression,
    full match, resolved at every planning) names what is read.
    """

    stream: str | None = None
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    subjects: tuple[str, ...] = ()
    starting: Start | None = None
    starting_timestamp: datetime | None = None
    ending: End = "latest"
    num_partitions: int | None = None
    fail_on_data_loss: bool = True
    max_records_per_trigger: int | None = None
    inactive_threshold: float = DEFAULT_INACTIVE_THRESHOLD
    streams: tuple[str, ...] = ()
    stream_pattern: str | None = None
    #: ``startingOffsets`` / ``endingOffsets`` given per stream (JSON), as pairs.
    starting_by_stream: tuple[tuple[str, Start], ...] = ()
    ending_by_stream: tuple[tuple[str, End], ...] = ()
    ending_timestamp: datetime | None = None
    min_partitions: int | None = None
    min_records_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY
    max_bytes_per_trigger: int | None = None
    consumer_name_prefix: str | None = None
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT

    @property
    def multi(self) -> bool:
        """Whether the read names its streams with ``streams`` or ``streamPattern``."""
        return self.stream is None

    def matches(self, name: str) -> bool:
        """Whether stream ``name`` is one the read selects."""
        if self.stream is not None:
            return name == self.stream
        if self.stream_pattern is not None:
            return re.fullmatch(self.stream_pattern, name) is not None
        return name in self.streams

    def starting_for(self, name: str) -> Start | None:
        """``startingOffsets`` for stream ``name`` (None: the default)."""
        return dict(self.starting_by_stream).get(name, self.starting)

    def ending_for(self, name: str) -> End:
        """``endingOffsets`` for stream ``name``."""
        return dict(self.ending_by_stream).get(name, self.ending)

    def selection(self) -> str:
        """The streams read, for messages (``stream 'A'``, ``streams A, B``, ...)."""
        if self.stream is not None:
            return f"stream {self.stream!r}"
        if self.stream_pattern is not None:
            return f"streams matching {self.stream_pattern!r}"
        return "streams " + ", ".join(self.streams)


def _selection(opts: Mapping[str, str]) -> tuple[str | None, tuple[str, ...], str | None]:
    given = [key for key in ("stream", "streams", "streampattern") if opts.get(key, "").strip()]
    if len(given) != 1:
        which = "none" if not given else " and ".join(repr(_DISPLAY.get(k, k)) for k in given)
        raise InvalidOptionError(
            "exactly one of the options 'stream' (one stream), 'streams' (a comma list) and "
            f"'streamPattern' (a regular expression) names what to read; got {which}"
        )
    if given[0] == "stream":
        return _name(opts, "stream", "stream"), (), None
    if given[0] == "streams":
        names = tuple(dict.fromkeys(s.strip() for s in opts["streams"].split(",")))
        for name in names:
            if not name or not _NAME_RE.match(name):
                raise InvalidOptionError(
                    f"option 'streams': invalid stream name {name!r} in the comma list "
                    "(no whitespace, '.', '*', '>', '/' or '\\')"
                )
        return None, names, None
    pattern = opts["streampattern"].strip()
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidOptionError(
            f"option 'streamPattern': invalid regular expression {pattern!r}: {exc}"
        ) from None
    return None, (), pattern


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the options of ``spark.read[Stream].format("jetstream")``.

    Raises:
        InvalidOptionError: an option is missing, malformed or unknown (its name is in
            the message).

    """
    opts = lower_keys(options)
    _check_unknown(opts, _SOURCE_KEYS, "jetstream source")
    stream, streams, pattern = _selection(opts)
    selected = (stream,) if stream is not None else streams
    starting: Start | None = None
    starting_by: dict[str, str | int] = {}
    if "startingoffsets" in opts:
        per = _per_stream(opts["startingoffsets"], "startingOffsets", ("earliest", "latest"))
        if per is None:
            starting = _offset(  # type: ignore[assignment]
                opts["startingoffsets"], "startingOffsets", ("earliest", "latest"), stream
            )
        else:
            starting_by = _check_named(per, "startingOffsets", selected, pattern)
    ending: End = "latest"
    ending_by: dict[str, str | int] = {}
    if "endingoffsets" in opts:
        if streaming:
            raise InvalidOptionError("option 'endingOffsets' applies to batch reads only")
        per = _per_stream(opts["endingoffsets"], "endingOffsets", ("latest",))
        if per is None:
            ending = _offset(opts["endingoffsets"], "endingOffsets", ("latest",), stream)  # type: ignore[assignment]
        else:
            ending_by = _check_named(per, "endingOffsets", selected, pattern)
    for name in {*starting_by, *selected}:
        first = starting_by.get(name, starting)
        last = ending_by.get(name, ending)
        if isinstance(first, int) and isinstance(last, int) and last < first:
            where = f" of stream {name!r}" if stream is None else ""
            raise InvalidOptionError(
                f"option 'endingOffsets' ({last}) is before 'startingOffsets' ({first}){where}"
            )
    if streaming and "endingtimestamp" in opts:
        raise InvalidOptionError("option 'endingTimestamp' applies to batch reads only")
    prefix = opts.get("consumernameprefix")
    if prefix is not None:
        prefix = prefix.strip()
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", prefix):
            raise InvalidOptionError(
                f"option 'consumerNamePrefix': expected 1-32 letters, digits, '-' or '_', "
                f"got {prefix!r}"
            )
    max_rows = _positive_int(opts, "maxrecordspertrigger", "maxRecordsPerTrigger")
    alias = _positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    if max_rows is not None and alias is not None and max_rows != alias:
        raise InvalidOptionError(
            "options 'maxRecordsPerTrigger' and 'maxOffsetsPerTrigger' are the same setting "
            f"(the second is Kafka's name) and differ: {max_rows} and {alias}; give one"
        )
    min_rows = _positive_int(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    max_rows = max_rows or alias
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise InvalidOptionError(
            f"option 'minOffsetsPerTrigger' ({min_rows}) is above 'maxOffsetsPerTrigger' "
            f"({max_rows})"
        )
    return SourceOptions(
        stream=stream,
        streams=streams,
        stream_pattern=pattern,
        connect=_connect(opts),
        subjects=_subjects(opts),
        starting=starting,
        starting_by_stream=tuple(sorted(starting_by.items())),  # type: ignore[arg-type]
        starting_timestamp=_timestamp(opts.get("startingtimestamp"), "startingTimestamp"),
        ending=ending,
        ending_by_stream=tuple(sorted(ending_by.items())),  # type: ignore[arg-type]
        ending_timestamp=_timestamp(opts.get("endingtimestamp"), "endingTimestamp"),
        num_partitions=_positive_int(opts, "numpartitions", "numPartitions", MAX_PARTITIONS),
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions", MAX_PARTITIONS),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        max_records_per_trigger=max_rows,
        min_records_per_trigger=min_rows,
        max_trigger_delay=_duration(
            opts, "maxtriggerdelay", "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY
        ),
        max_bytes_per_trigger=_positive_int(opts, "maxbytespertrigger", "maxBytesPerTrigger"),
        inactive_threshold=_positive_float(
            opts, "inactivethreshold", "inactiveThreshold", DEFAULT_INACTIVE_THRESHOLD
        ),
        consumer_name_prefix=prefix,
        retry_timeout=_positive_float(opts, "retrytimeout", "retryTimeout", DEFAULT_RETRY_TIMEOUT),
    )


def _check_named(
    per: dict[str, str | int], display: str, selected: tuple[str, ...], pattern: str | None
) -> dict[str, str | int]:
    """Offsets per stream may name only streams the read selects."""
    for name in per:
        if pattern is not None:
            if re.fullmatch(pattern, name) is None:
                raise InvalidOptionError(
                    f"option {display!r} names stream {name!r}, which 'streamPattern' "
                    f"{pattern!r} does not match"
                )
        elif name not in selected:
            raise InvalidOptionError(
                f"option {display!r} names stream {name!r}, which is not read "
                f"(reading {', '.join(selected)})"
            )
    return per


# ----------------------------------------------------------------------------- sink

Dedupe = Literal["none", "auto"]


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """A parsed ``jetstream`` write."""

    connect: ConnectOptions = field(default_factory=ConnectOptions)
    subject: str | None = None
    dedupe: Dedupe = "none"
    max_pending: int = 4000
    #: Seconds the driver-side check of the sink retries through a leader election.
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the options of ``df.write[Stream].format("jetstream")``."""
    opts = lower_keys(options)
    _check_unknown(opts, _SINK_KEYS, "jetstream sink")
    subject = opts.get("subject")
    if subject is not None:
        subject = subject.strip()
        if (
            not subject
            or any(not t for t in subject.split("."))
            or any(c.isspace() or c in "*>\x00" for c in subject)
        ):
            raise InvalidOptionError(
                f"option 'subject': invalid publish subject {subject!r} (no wildcards)"
            )
    dedupe = opts.get("dedupe", "none").strip().lower()
    if dedupe not in ("none", "auto"):
        raise InvalidOptionError(f"option 'dedupe': expected none or auto, got {dedupe!r}")
    return SinkOptions(
        connect=_connect(opts),
        subject=subject,
        dedupe=dedupe,  # type: ignore[arg-type]
        max_pending=_positive_int(opts, "maxpending", "maxPending", MAX_PENDING) or 4000,
        retry_timeout=_positive_float(opts, "retrytimeout", "retryTimeout", DEFAULT_RETRY_TIMEOUT),
    )


# ----------------------------------------------------------------------------- key-value


@dataclass(frozen=True, slots=True)
class KVOptions:
    """A parsed ``jetstream_kv`` read or write."""

    bucket: str
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    max_pending: int = 1000


def parse_kv_options(options: Mapping[str, str]) -> KVOptions:
    """Validate the options of ``format("jetstream_kv")``."""
    opts = lower_keys(options)
    _check_unknown(opts, _KV_KEYS, "jetstream_kv")
    bucket = _name(opts, "bucket", "bucket")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", bucket):
        raise InvalidOptionError(
            f"option 'bucket': invalid bucket name {bucket!r} (letters, digits, '-' and '_')"
        )
    return KVOptions(
        bucket=bucket,
        connect=_connect(opts),
        max_pending=_positive_int(opts, "maxpending", "maxPending", MAX_PENDING) or 1000,
    )

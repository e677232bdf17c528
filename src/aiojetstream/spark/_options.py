"""Option parsing for the Spark data sources: pure, no pyspark, no I/O.

Spark hands a data source its options as case-insensitive strings. Everything
here turns them into small frozen value objects once, in the planner, so a bad
option fails before a job runs, with an error naming the option. The value
objects are what travels (by cloudpickle) to the executors: plain data only.
"""

from __future__ import annotations

import json
import math
import re
import ssl
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from aiojetstream import InvalidOptionError

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
#: One partition for every so many sequences when numPartitions is not given.
SEQUENCES_PER_PARTITION: Final = 250_000
MAX_DEFAULT_PARTITIONS: Final = 64

_CONNECT_KEYS: Final = frozenset(
    {
        "servers",
        "user",
        "password",
        "token",
        "creds",
        "tlscafile",
        "tlscertfile",
        "tlskeyfile",
        "domain",
        "apiprefix",
        "timeout",
    }
)
_SOURCE_KEYS: Final = _CONNECT_KEYS | {
    "stream",
    "subject",
    "startingoffsets",
    "startingtimestamp",
    "endingoffsets",
    "numpartitions",
    "failondataloss",
    "maxrecordspertrigger",
    "inactivethreshold",
}
_SINK_KEYS: Final = _CONNECT_KEYS | {"subject", "dedupe", "maxpending"}
_KV_KEYS: Final = _CONNECT_KEYS | {"bucket", "maxpending"}
#: Keys Spark itself adds to a source's or sink's options: never warned about.
_SPARK_KEYS: Final = frozenset({"path", "checkpointlocation", "queryname"})

_NAME_RE: Final = re.compile(r"^[^\s.*>/\\\x00]+$")


class JetStreamSparkWarning(UserWarning):
    """Questionable but usable: an unknown option, or data skipped (``failOnDataLoss=false``)."""


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Return ``options`` with lower-case keys (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def _warn_unknown(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(k for k in options if k not in known and k not in _SPARK_KEYS)
    for key in unknown:
        warnings.warn(
            f"aiojetstream.spark: unknown {what} option {key!r} is ignored",
            JetStreamSparkWarning,
            stacklevel=3,
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


def _positive_int(options: Mapping[str, str], key: str, display: str) -> int | None:
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(
            f"option {display!r}: expected a positive integer, got {raw!r}"
        ) from None
    if value <= 0:
        raise InvalidOptionError(f"option {display!r}: expected a positive integer, got {raw!r}")
    return value


def _positive_float(options: Mapping[str, str], key: str, display: str, default: float) -> float:
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InvalidOptionError(f"option {display!r}: expected positive seconds, got {raw!r}")
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


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """How to reach the server: plain data, safe to pickle to executors."""

    servers: str = DEFAULT_SERVERS
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    domain: str | None = None
    api_prefix: str | None = None
    timeout: float = 10.0

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
        """The servers, for error messages (never credentials: user:password@ is removed)."""
        return ",".join(re.sub(r"//[^/@]*@", "//", url) for url in self.servers.split(","))


def _connect(options: Mapping[str, str]) -> ConnectOptions:
    servers = options.get("servers", DEFAULT_SERVERS).strip()
    if not servers or any(not s.strip() for s in servers.split(",")):
        raise InvalidOptionError(
            f"option 'servers': expected a comma list of URLs, got {servers!r}"
        )
    if options.get("tlskeyfile") and not options.get("tlscertfile"):
        raise InvalidOptionError("option 'tlsKeyFile' needs 'tlsCertFile'")
    if options.get("password") is not None and options.get("user") is None:
        raise InvalidOptionError("option 'password' needs 'user'")
    domain = options.get("domain") or None
    if domain is not None and not _NAME_RE.match(domain):
        raise InvalidOptionError(f"option 'domain': invalid domain {domain!r}")
    return ConnectOptions(
        servers=",".join(s.strip() for s in servers.split(",")),
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
    )


# ----------------------------------------------------------------------------- source

Start = Literal["earliest", "latest"] | int
End = Literal["latest"] | int


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
    if digits.isascii() and digits.isdigit() and int(digits) >= 1:
        return int(digits)
    allowed = " | ".join(words)
    raise InvalidOptionError(
        f"option {display!r}: expected {allowed} or a stream sequence >= 1, got {raw!r}"
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


def _timestamp(raw: str | None) -> datetime | None:
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidOptionError(
            f"option 'startingTimestamp': expected an ISO-8601 time such as "
            f"2026-01-31T12:00:00Z, got {raw!r}"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """A parsed ``jetstream`` read: which stream, which range, how to connect."""

    stream: str
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    subjects: tuple[str, ...] = ()
    starting: Start | None = None
    starting_timestamp: datetime | None = None
    ending: End = "latest"
    num_partitions: int | None = None
    fail_on_data_loss: bool = True
    max_records_per_trigger: int | None = None
    inactive_threshold: float = DEFAULT_INACTIVE_THRESHOLD


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the options of ``spark.read[Stream].format("jetstream")``.

    Raises:
        InvalidOptionError: an option is missing or malformed (its name is in the message).

    """
    opts = lower_keys(options)
    _warn_unknown(opts, _SOURCE_KEYS, "jetstream source")
    stream = _name(opts, "stream", "stream")
    starting: Start | None = None
    if "startingoffsets" in opts:
        starting = _offset(
            opts["startingoffsets"], "startingOffsets", ("earliest", "latest"), stream
        )  # type: ignore[assignment]
    ending: End = "latest"
    if "endingoffsets" in opts:
        if streaming:
            raise InvalidOptionError("option 'endingOffsets' applies to batch reads only")
        ending = _offset(opts["endingoffsets"], "endingOffsets", ("latest",), stream)  # type: ignore[assignment]
    if isinstance(starting, int) and isinstance(ending, int) and ending < starting:
        raise InvalidOptionError(
            f"option 'endingOffsets' ({ending}) is before 'startingOffsets' ({starting})"
        )
    return SourceOptions(
        stream=stream,
        connect=_connect(opts),
        subjects=_subjects(opts),
        starting=starting,
        starting_timestamp=_timestamp(opts.get("startingtimestamp")),
        ending=ending,
        num_partitions=_positive_int(opts, "numpartitions", "numPartitions"),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        max_records_per_trigger=_positive_int(opts, "maxrecordspertrigger", "maxRecordsPerTrigger"),
        inactive_threshold=_positive_float(
            opts, "inactivethreshold", "inactiveThreshold", DEFAULT_INACTIVE_THRESHOLD
        ),
    )


# ----------------------------------------------------------------------------- sink

Dedupe = Literal["none", "auto"]


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """A parsed ``jetstream`` write."""

    connect: ConnectOptions = field(default_factory=ConnectOptions)
    subject: str | None = None
    dedupe: Dedupe = "none"
    max_pending: int = 4000


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the options of ``df.write[Stream].format("jetstream")``."""
    opts = lower_keys(options)
    _warn_unknown(opts, _SINK_KEYS, "jetstream sink")
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
        max_pending=_positive_int(opts, "maxpending", "maxPending") or 4000,
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
    _warn_unknown(opts, _KV_KEYS, "jetstream_kv")
    bucket = _name(opts, "bucket", "bucket")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", bucket):
        raise InvalidOptionError(
            f"option 'bucket': invalid bucket name {bucket!r} (letters, digits, '-' and '_')"
        )
    return KVOptions(
        bucket=bucket,
        connect=_connect(opts),
        max_pending=_positive_int(opts, "maxpending", "maxPending") or 1000,
    )

"""Option parsing for the Spark data sources: pure, no pyspark, no I/O.

Spark hands a data source its options as case-insensitive strings. Everything
here turns them into small frozen value objects once, in the planner, so a bad
option fails before a job runs, with an error naming the option. The value
objects are what travels (by cloudpickle) to the executors: plain data only.

This module holds the options each format knows and the value objects
(:class:`ConnectOptions`, :class:`SourceOptions`, :class:`SinkOptions`,
:class:`KVOptions`); the bounds and the parsers of single values are in
:mod:`._option_values`, the checks of the credential options in
:mod:`._credentials`. It re-exports the bounds its importers use.
"""

from __future__ import annotations

import difflib
import re
import ssl
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, NoReturn

from aiojetstream import InvalidOptionError

from ._credentials import (
    Credentials,
    check_creds_file,
    check_creds_path,
    check_creds_secret,
    needs_nkeys,
    seed_problem,
)
from ._option_values import (
    MAX_PARTITIONS,
    MAX_PENDING,
    MAX_PER_TRIGGER,
    MAX_SECONDS,
    MAX_SEQUENCE,
    MAX_TIME_NS,
    MIN_TIME_NS,
    NAME_RE,
    End,
    Start,
    parse_bool,
    parse_duration,
    parse_inbox_prefix,
    parse_name,
    parse_named_offset,
    parse_offset,
    parse_per_stream,
    parse_positive_float,
    parse_positive_int,
    parse_subjects,
    parse_timestamp,
)
from ._telemetry import check_telemetry

__all__ = [
    "MAX_PARTITIONS",
    "MAX_PENDING",
    "MAX_PER_TRIGGER",
    "MAX_SECONDS",
    "MAX_SEQUENCE",
    "MAX_TIME_NS",
    "MIN_TIME_NS",
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
        "inboxPrefix",
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
        "pushDownPredicate",
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
        "inboxprefix",
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
    "pushdownpredicate",
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
_KV_KEYS: Final = _CONNECT_KEYS | {"bucket", "maxpending", "retrytimeout"}
#: Keys Spark itself adds to a source's or sink's options: never refused.
_SPARK_KEYS: Final = frozenset({"path", "paths", "checkpointlocation", "queryname"})


class JetStreamSparkWarning(UserWarning):
    """Questionable but usable: an unknown option, data skipped, rows dropped as duplicates.

    Data skipped with ``failOnDataLoss=false``; rows a write's target stream
    dropped as duplicates (at the commit of the write or micro-batch).
    """


def warn_loss(text: str, stacklevel: int = 1) -> None:
    """Warn ``text`` (a :class:`JetStreamSparkWarning`) without the warnings registry.

    A data-loss warning names its sequences or creation times (a write's
    warning of duplicates its counts), so each has a text of its own: through
    ``warnings.warn`` the default filter would keep every one in the calling
    module's ``__warningregistry__`` for as long as the process runs (one per
    micro-batch that skipped data). The filters still
    decide (shown, ignored, raised, recorded); with the default one each is
    shown. A condition checked again at every trigger is warned once by its
    caller. ``stacklevel`` as for ``warnings.warn``.
    """
    frame = sys._getframe(1)
    for _ in range(stacklevel - 1):
        if frame.f_back is None:
            break
        frame = frame.f_back
    warnings.warn_explicit(
        text,
        JetStreamSparkWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__"),
        registry=None,
        module_globals=frame.f_globals,
    )


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
    lenient = parse_bool(options, "ignoreunknownoptions", "ignoreUnknownOptions", False)
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
    #: The prefix of the connection's reply inboxes (nats-py's ``inbox_prefix``).
    inbox_prefix: str | None = None
    timeout: float = 10.0
    #: The text of a .creds file (user JWT and NKey seed), in nsc's layout.
    creds_secret: str | None = field(default=None, repr=False)
    #: An NKey user seed (``SU...``).
    nkey_secret: str | None = field(default=None, repr=False)
    #: Row and batch metrics (see ``_telemetry``): None (off), ``"true"`` or
    #: ``"module:function"``. Not part of the connection's identity.
    telemetry: str | None = field(default=None, compare=False)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`aiojetstream.connect` (builds the TLS context).

        Reads the files of ``creds`` and the TLS options, where the connection
        is opened (the driver, each executor).

        Raises:
            InvalidOptionError: the ``creds`` file is missing here or malformed, or
                the TLS key is encrypted (a passphrase: never asked for).
            OSError: a TLS file is missing or invalid (``ssl.SSLError``).

        """
        kwargs: dict[str, Any] = {"timeout": self.timeout, "name": "aiojetstream.spark"}
        if self.domain:
            kwargs["domain"] = self.domain
        if self.api_prefix:
            kwargs["api_prefix"] = self.api_prefix
        if self.inbox_prefix:
            kwargs["inbox_prefix"] = self.inbox_prefix
        if self.user is not None:
            kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password
        if self.token is not None:
            kwargs["token"] = self.token
        if self.creds is not None:
            check_creds_file(self.creds)  # nats-py spun forever on a malformed one
            kwargs["user_credentials"] = self.creds
        if self.creds_secret is not None:
            kwargs["user_credentials"] = Credentials(self.creds_secret)
        if self.nkey_secret is not None:
            kwargs["nkeys_seed_str"] = self.nkey_secret
        if self.tls_ca_file or self.tls_cert_file:
            context = ssl.create_default_context(cafile=self.tls_ca_file)
            if self.tls_cert_file:
                context.load_cert_chain(
                    self.tls_cert_file, self.tls_key_file, password=self._no_passphrase
                )
            kwargs["tls"] = context
        return kwargs

    def _no_passphrase(self) -> NoReturn:
        """``load_cert_chain``'s passphrase callback: an encrypted key is refused.

        Without one, OpenSSL asked for the passphrase on the terminal (and
        blocked reading a pipe); a Spark worker, its input ``/dev/null``,
        failed with ``[Errno 22] Invalid argument``.
        """
        option, path = (
            ("tlsKeyFile", self.tls_key_file)
            if self.tls_key_file
            else ("tlsCertFile", self.tls_cert_file)
        )
        raise InvalidOptionError(
            f"option {option!r}: the private key in {path!r} is encrypted (it has a "
            "passphrase), which the Spark options cannot take: store it decrypted "
            "(openssl pkey -in ENCRYPTED.key -out KEY.key), readable only by the user "
            "Spark runs as, at the same path on every node"
        )

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
    if domain is not None and not NAME_RE.match(domain):
        raise InvalidOptionError(f"option 'domain': invalid domain {domain!r}")
    if domain is not None and options.get("apiprefix"):
        # (connect() would take the domain's $JS.<domain>.API and drop the prefix.)
        raise InvalidOptionError(
            "options 'domain' and 'apiPrefix' exclude each other: 'domain' addresses "
            "$JS.<domain>.API, 'apiPrefix' any other prefix; give one of them"
        )
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
    creds = options.get("creds")
    if creds is not None:
        check_creds_path(creds)  # (nats-py's error would quote a text or a seed)
    if creds_secret is not None:
        creds_secret = check_creds_secret(creds_secret)
    if nkey_secret is not None:
        nkey_secret = nkey_secret.strip()
        problem = seed_problem(nkey_secret)
        if problem is not None:
            raise InvalidOptionError(f"option 'nkeySecret': not an NKey user seed: {problem}")
    for display, value in (
        ("creds", options.get("creds")),
        ("credsSecret", creds_secret),
        ("nkeySecret", nkey_secret),
    ):
        if value is not None:
            needs_nkeys(display)
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
        inbox_prefix=parse_inbox_prefix(options),
        timeout=parse_positive_float(options, "timeout", "timeout", 10.0),
        telemetry=check_telemetry(options.get("telemetry")),
    )


# ----------------------------------------------------------------------------- source


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
    #: Whether a batch read takes the filters Spark pushes (``pushDownPredicate``):
    #: off unless asked for, see ``docs/spark.md`` (a Spark defect shares one
    #: planned read among the scans of a DataFrame).
    push_down_predicate: bool = False
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
        return parse_name(opts, "stream", "stream"), (), None
    if given[0] == "streams":
        names = tuple(dict.fromkeys(s.strip() for s in opts["streams"].split(",")))
        for name in names:
            if not name or not NAME_RE.match(name):
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
        first, starting_by = _offsets(
            opts["startingoffsets"],
            "startingOffsets",
            ("earliest", "latest"),
            stream,
            selected,
            pattern,
        )
        starting = first  # type: ignore[assignment]
        if not streaming and "startingtimestamp" not in opts:
            _refuse_latest_start(starting, starting_by)
    ending: End = "latest"
    ending_by: dict[str, str | int] = {}
    if "endingoffsets" in opts:
        if streaming:
            raise InvalidOptionError("option 'endingOffsets' applies to batch reads only")
        last, ending_by = _offsets(
            opts["endingoffsets"], "endingOffsets", ("latest",), stream, selected, pattern
        )
        if last is not None:
            ending = last  # type: ignore[assignment]
    for name in {*starting_by, *ending_by, *selected}:
        first = starting_by.get(name, starting)
        last = ending_by.get(name, ending)
        if isinstance(first, int) and isinstance(last, int) and last < first:
            where = f" of stream {name!r}" if stream is None else ""
            raise InvalidOptionError(
                f"option 'endingOffsets' ({last}) is before 'startingOffsets' ({first}){where}"
            )
    if streaming and "endingtimestamp" in opts:
        raise InvalidOptionError("option 'endingTimestamp' applies to batch reads only")
    if streaming and "pushdownpredicate" in opts:
        raise InvalidOptionError(
            "option 'pushDownPredicate' applies to batch reads only (Spark pushes no filters "
            "into a streaming read)"
        )
    prefix = opts.get("consumernameprefix")
    if prefix is not None:
        prefix = prefix.strip()
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", prefix):
            raise InvalidOptionError(
                f"option 'consumerNamePrefix': expected 1-32 letters, digits, '-' or '_', "
                f"got {prefix!r}"
            )
    max_rows = parse_positive_int(opts, "maxrecordspertrigger", "maxRecordsPerTrigger")
    alias = parse_positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    if max_rows is not None and alias is not None and max_rows != alias:
        raise InvalidOptionError(
            "options 'maxRecordsPerTrigger' and 'maxOffsetsPerTrigger' are the same setting "
            f"(the second is Kafka's name) and differ: {max_rows} and {alias}; give one"
        )
    min_rows = parse_positive_int(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
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
        subjects=parse_subjects(opts),
        starting=starting,
        starting_by_stream=tuple(sorted(starting_by.items())),  # type: ignore[arg-type]
        starting_timestamp=parse_timestamp(opts.get("startingtimestamp"), "startingTimestamp"),
        ending=ending,
        ending_by_stream=tuple(sorted(ending_by.items())),  # type: ignore[arg-type]
        ending_timestamp=parse_timestamp(opts.get("endingtimestamp"), "endingTimestamp"),
        num_partitions=parse_positive_int(opts, "numpartitions", "numPartitions", MAX_PARTITIONS),
        min_partitions=parse_positive_int(opts, "minpartitions", "minPartitions", MAX_PARTITIONS),
        fail_on_data_loss=parse_bool(opts, "failondataloss", "failOnDataLoss", True),
        push_down_predicate=parse_bool(opts, "pushdownpredicate", "pushDownPredicate", False),
        max_records_per_trigger=max_rows,
        min_records_per_trigger=min_rows,
        max_trigger_delay=parse_duration(
            opts, "maxtriggerdelay", "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY
        ),
        max_bytes_per_trigger=parse_positive_int(opts, "maxbytespertrigger", "maxBytesPerTrigger"),
        inactive_threshold=parse_positive_float(
            opts, "inactivethreshold", "inactiveThreshold", DEFAULT_INACTIVE_THRESHOLD
        ),
        consumer_name_prefix=prefix,
        retry_timeout=parse_positive_float(
            opts, "retrytimeout", "retryTimeout", DEFAULT_RETRY_TIMEOUT
        ),
    )


def _offsets(
    raw: str,
    display: str,
    words: tuple[str, ...],
    stream: str | None,
    selected: tuple[str, ...],
    pattern: str | None,
) -> tuple[str | int | None, dict[str, str | int]]:
    """One offset for every stream read (first), or offsets per stream (second).

    A single stream's checkpoint offset (``{"stream": "A", "seq": 5}``) in a read
    of several streams is stream A's only, as ``{"A": 5}`` would be.
    """
    per = parse_per_stream(raw, display, words)
    if per is None and stream is None:
        per = parse_named_offset(raw, display, words)
    if per is None:
        return parse_offset(raw, display, words, stream), {}
    return None, _check_named(per, display, selected, pattern)


def _refuse_latest_start(starting: object, starting_by: Mapping[str, str | int]) -> None:
    """A batch read cannot start at ``latest``: it would always read nothing (Kafka refuses it)."""
    named = sorted(name for name, value in starting_by.items() if value == "latest")
    if starting != "latest" and not named:
        return
    where = f" for stream {named[0]!r}" if named else ""
    raise InvalidOptionError(
        f"option 'startingOffsets': 'latest'{where} applies to streaming reads only "
        "(a batch read from the stream's end returns no rows, and Kafka refuses it); "
        "use 'earliest', a sequence or 'startingTimestamp'"
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
        max_pending=parse_positive_int(opts, "maxpending", "maxPending", MAX_PENDING) or 4000,
        retry_timeout=parse_positive_float(
            opts, "retrytimeout", "retryTimeout", DEFAULT_RETRY_TIMEOUT
        ),
    )


# ----------------------------------------------------------------------------- key-value


@dataclass(frozen=True, slots=True)
class KVOptions:
    """A parsed ``jetstream_kv`` read or write."""

    bucket: str
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    max_pending: int = 1000
    #: Seconds the driver-side checks, a read task's requests and a write task's
    #: bucket lookup keep retrying through a leader election.
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT


def parse_kv_options(options: Mapping[str, str]) -> KVOptions:
    """Validate the options of ``format("jetstream_kv")``."""
    opts = lower_keys(options)
    _check_unknown(opts, _KV_KEYS, "jetstream_kv")
    bucket = parse_name(opts, "bucket", "bucket")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", bucket):
        raise InvalidOptionError(
            f"option 'bucket': invalid bucket name {bucket!r} (letters, digits, '-' and '_')"
        )
    return KVOptions(
        bucket=bucket,
        connect=_connect(opts),
        max_pending=parse_positive_int(opts, "maxpending", "maxPending", MAX_PENDING) or 1000,
        retry_timeout=parse_positive_float(
            opts, "retrytimeout", "retryTimeout", DEFAULT_RETRY_TIMEOUT
        ),
    )

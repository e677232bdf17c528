"""Secrets given to the Spark formats never show (issue 24).

Real nats-servers require a user and password, a token, an NKey and a creds
file (decentralised auth, an operator made offline by tests/credentials.py).
Each case runs real Spark (the session's ``local[2,4]``) reads, writes or a
streaming query with the secrets in its options, or the connection code that
the executors run, in this process. Some authenticate (``nkeySecret`` and
``credsSecret`` read and write exactly the rows), the others fail (a wrong
secret, a missing stream, no server, a bad option beside the secrets, a
malformed secret, a ``servers`` URL with a password in it). Everything they
leave behind is captured and searched for every secret (whole, URL-encoded,
and a slice of its random part):

* the exception chain (``str``/``repr`` of each exception through
  ``__cause__``/``__context__``, its traceback, pyspark's message with the
  Python worker's traceback, the JVM exception with its causes);
* warnings, this process's log records at DEBUG (caplog), its stdout and
  stderr (capfd: ``explain()`` prints there);
* the JVM: its log4j records at DEBUG (an appender of the test's own; every
  logger that follows the root logger's level), what it writes to its stdout
  and stderr (Spark's console log, and the Python workers' stderr, which the
  JVM copies there; read through ``/proc``, the JVM being a process of its
  own, when they are regular files, as under pytest's capture), and Spark's
  Python worker log table;
* the plans (every ``explain`` mode, a streaming query's plans, progress and
  status, the SQL executions Spark keeps for its UI) and the checkpoint files.

Every capture is also shown to see something known (the format's name in a
plan, a marker a Python worker prints, the error's text), so an empty capture
cannot pass for a clean one; ``test_capture_sees_a_leak`` puts secrets on the
surfaces on purpose and finds them. ``KNOWN`` lists the two places outside
this package that show option values at DEBUG, and why they are accepted.

Spark Connect records each request's plan, option values included, in the
event log: ``test_spark_connect_event_log`` runs reads over a local Connect
server (``drivers/connect_secrets.py``) started with the redaction setting
``docs/spark.md`` gives, and without it (where it finds the secrets).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import stat
import sys
import traceback
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import nkeys  # type: ignore[import-untyped]  # no type hints
import pyspark
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import aiojetstream
from aiojetstream import (
    AuthorizationError,
    ConnectionClosedError,
    JetStreamContext,
    KeyValueConfig,
    StreamConfig,
)
from aiojetstream.spark._options import (
    ConnectOptions,
    JetStreamSparkWarning,
    KVOptions,
    SinkOptions,
    SourceOptions,
    parse_kv_options,
    parse_sink_options,
    parse_source_options,
)
from aiojetstream.spark._runtime import Session
from aiojetstream.testing import NatsServer
from credentials import Operator, new_nkey, public_key, seed_text
from helpers import unique_name, wait_until_sync
from spark.spark_processes import DRIVERS, assert_connect_port_free, run_process, spark_env

#: Spark >= 4.1 keeps what Python workers log in a table (``python_worker_logs()``);
#: on 4.0 their output is read from the JVM's stderr only.
WORKER_LOGS = tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 1)

T = TypeVar("T")

#: Nothing listens there.
UNREACHABLE = "nats://127.0.0.1:1"
USER = "alice"


def _secret(template: str) -> str:
    return template.format(uuid.uuid4().hex[:20])


# Passwords and tokens hold '@', '/', ':', ',' and '%40': what a URL parser trips on.
PASSWORD = _secret("pw:{}/s3@cr:t%40x")
WRONG_PASSWORD = _secret("wr0ng:{}@p/ss")
TOKEN = _secret("t0k/{}:@n")
WRONG_TOKEN = _secret("t0k-wrong/{}@")
URL_PASSWORD = _secret("url:{}/p,w@x")


# --------------------------------------------------------------------------- servers


@dataclass
class Realm:
    """Servers that require each kind of credentials, and the credentials."""

    servers: dict[str, NatsServer]
    seed: str
    stranger_seed: str
    creds_text: str
    creds_file: Path
    forged_creds_text: str
    #: name -> text that must never show.
    needles: dict[str, str] = field(default_factory=dict)

    def auth(self, scheme: str) -> dict[str, str]:
        """The Spark options that authenticate with ``scheme``."""
        return {
            "password": {"user": USER, "password": PASSWORD},
            "token": {"token": TOKEN},
            "nkey": {"nkeySecret": self.seed},
            "creds": {"credsSecret": self.creds_text},
            "credsfile": {"creds": str(self.creds_file)},
        }[scheme]

    def url(self, scheme: str) -> str:
        return self.servers["creds" if scheme == "credsfile" else scheme].url

    def admin(self, scheme: str) -> Admin:
        """A connection for setting up and checking, with the scheme's own credentials."""
        kwargs: dict[str, Any] = {
            "password": {"user": USER, "password": PASSWORD},
            "token": {"token": TOKEN},
            "nkey": {"nkeys_seed_str": self.seed},
            "creds": {"user_credentials": str(self.creds_file)},
            "credsfile": {"user_credentials": str(self.creds_file)},
        }[scheme]
        return Admin(self.url(scheme), **kwargs)


def _needles(name: str, secret: str) -> dict[str, str]:
    """The secret, as it is and URL-encoded, and a slice of its random part."""
    middle = len(secret) // 2
    return {
        name: secret,
        f"{name} (URL-encoded)": quote(secret, safe=""),
        f"{name} (a slice)": secret[middle - 8 : middle + 8],
    }


def _creds_parts(text: str) -> tuple[str, str]:
    """The JWT and the seed of a .creds file's text."""
    lines = text.splitlines()
    jwt = lines[lines.index("-----BEGIN NATS USER JWT-----") + 1]
    seed = lines[lines.index("-----BEGIN USER NKEY SEED-----") + 1]
    return jwt, seed


@pytest.fixture(scope="module")
def realm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Realm]:
    tmp = tmp_path_factory.mktemp("secrets")
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    operator = Operator(tmp)
    creds_file = operator.user_creds("alice")
    forged = operator.user_creds("mallory", signer=new_nkey(nkeys.PREFIX_BYTE_ACCOUNT))
    servers = {
        "password": NatsServer(config={"authorization": {"user": USER, "password": PASSWORD}}),
        "token": NatsServer(config={"authorization": {"token": TOKEN}}),
        "nkey": NatsServer(config={"authorization": {"users": [{"nkey": public_key(user)}]}}),
        "creds": NatsServer(config=operator.server_config()),
    }
    realm = Realm(
        servers=servers,
        seed=seed_text(user),
        stranger_seed=seed_text(new_nkey(nkeys.PREFIX_BYTE_USER)),
        creds_text=creds_file.read_text(),
        creds_file=creds_file,
        forged_creds_text=forged.read_text(),
    )
    for name, secret in (
        ("password", PASSWORD),
        ("wrong password", WRONG_PASSWORD),
        ("token", TOKEN),
        ("wrong token", WRONG_TOKEN),
        ("URL password", URL_PASSWORD),
        ("nkey seed", realm.seed),
        ("stranger's seed", realm.stranger_seed),
    ):
        realm.needles.update(_needles(name, secret))
    for name, text in (("creds", realm.creds_text), ("forged creds", realm.forged_creds_text)):
        jwt, seed = _creds_parts(text)
        realm.needles.update(_needles(f"{name} seed", seed))
        realm.needles.update(_needles(f"{name} JWT", jwt))
    started: list[NatsServer] = []
    try:
        for server in servers.values():
            server.start_sync()
            started.append(server)
        yield realm
    finally:
        for server in started:
            server.stop_sync()


class Admin:
    """Synchronous set-up and checks through a connection of its own (own event loop)."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self.js: JetStreamContext = self._loop.run_until_complete(
            aiojetstream.connect(url, **kwargs)
        )

    def run(self, work: Callable[[JetStreamContext], Awaitable[T]]) -> T:
        return self._loop.run_until_complete(work(self.js))

    def close(self) -> None:
        self._loop.run_until_complete(self.js.close())
        self._loop.close()

    def stream(self, name: str, payloads: Sequence[bytes] = ()) -> None:
        """Create stream ``name`` capturing ``name.>``, holding ``payloads``."""

        async def create(js: JetStreamContext) -> None:
            await js.create_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
            for payload in payloads:
                await js.publish(f"{name}.in", payload)

        self.run(create)

    def payloads(self, name: str) -> list[bytes]:
        """The payloads stream ``name`` holds, in order."""

        async def read(js: JetStreamContext) -> list[bytes]:
            stream = await js.stream(name)
            last = stream.cached_info.state.last_seq
            return [(await stream.get_msg(seq)).data for seq in range(1, last + 1)]

        return self.run(read)


# --------------------------------------------------------------------------- capture


def _exception_texts(exc: BaseException | None, jvm: Any) -> list[str]:
    """Everything an exception chain can show: messages, reprs, tracebacks, the JVM side."""
    texts: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        texts += [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
        texts += [str(arg) for arg in exc.args]
        if isinstance(exc, PySparkException):
            texts += [
                str(exc.getMessage()),
                str(exc.getCondition()),
                str(exc.getMessageParameters()),
                str(exc.getQueryContext()),
            ]
            for attribute in ("_desc", "_stackTrace"):
                texts.append(str(getattr(exc, attribute, "")))
            origin = getattr(exc, "_origin", None)
            if origin is not None:  # the Java exception: its trace, with every cause
                utils = jvm.org.apache.commons.lang3.exception.ExceptionUtils
                texts.append(str(utils.getStackTrace(origin)))
        exc = exc.__cause__ or exc.__context__
    return texts


class _FdTail:
    """What a process writes to one of its file descriptors from now on (a regular file only)."""

    def __init__(self, pid: int, fd: int) -> None:
        self.path = f"/proc/{pid}/fd/{fd}"
        try:
            info = os.stat(self.path)
        except OSError:
            info = None
        self.readable = info is not None and stat.S_ISREG(info.st_mode)
        self.start = info.st_size if info is not None and self.readable else 0

    def read(self) -> str:
        if not self.readable:
            return ""
        with open(self.path, "rb") as f:
            if os.fstat(f.fileno()).st_size >= self.start:
                f.seek(self.start)
            return f.read().decode(errors="replace")


#: Log4j records from the test's appender are separated by this.
_RECORD = "\x1e"


class _Log4jCapture:
    """Every log4j record of the JVM (driver and, in local mode, executors) at DEBUG."""

    def __init__(self, spark: SparkSession) -> None:
        jvm = spark._jvm
        assert jvm is not None
        core = jvm.org.apache.logging.log4j.core
        self._level = jvm.org.apache.logging.log4j.Level
        self._context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
        self._config = self._context.getConfiguration()
        self._writer = jvm.java.io.StringWriter()
        layout = (
            core.layout.PatternLayout.newBuilder()
            .withPattern(f"{_RECORD}%c %p %m%n%ex")
            .withConfiguration(self._config)
            .build()
        )
        self._name = f"secrets-{uuid.uuid4().hex}"
        self._appender = core.appender.WriterAppender.createAppender(
            layout, None, self._writer, self._name, False, True
        )
        root = self._config.getRootLogger()
        self._old_level = root.getLevel()
        # The console keeps showing only what it showed (the root logger level was its filter).
        self._console = self._config.getAppender("console")
        self._console_filter = core.filter.ThresholdFilter.createFilter(
            self._old_level, core.Filter.Result.NEUTRAL, core.Filter.Result.DENY
        )
        self._appender.start()
        self._config.addAppender(self._appender)
        root.addAppender(self._appender, self._level.ALL, None)
        if self._console is not None:
            self._console.addFilter(self._console_filter)
        root.setLevel(self._level.DEBUG)
        self._context.updateLoggers()

    def stop(self) -> list[str]:
        """Detach; the records, each as ``logger LEVEL message``."""
        root = self._config.getRootLogger()
        root.setLevel(self._old_level)
        root.removeAppender(self._name)
        if self._console is not None:
            self._console.removeFilter(self._console_filter)
        self._context.updateLoggers()
        self._appender.stop()
        return [r for r in str(self._writer.toString()).split(_RECORD) if r]


def _print_marker(marker: str) -> Callable[[str], str]:
    """A UDF body printing ``marker`` to the Python worker's stderr (a closure: by value)."""

    def probe(value: str) -> str:
        import sys

        print(marker, file=sys.stderr, flush=True)
        return value

    return probe


@dataclass
class Captured:
    """What one case left behind, by where it showed."""

    texts: dict[str, list[str]] = field(default_factory=dict)
    #: Whether the JVM's stderr could be read (a regular file: pytest's capture, a log file).
    jvm_stderr_readable: bool = False

    def add(self, surface: str, *texts: object) -> None:
        self.texts.setdefault(surface, []).extend(str(t) for t in texts)

    def joined(self, surface: str) -> str:
        """The texts of every surface whose name starts with ``surface``."""
        return "\n".join(
            text for name, texts in self.texts.items() if name.startswith(surface) for text in texts
        )


def _last_execution_id(store: Any) -> int:
    """The id of the last SQL execution Spark keeps for its UI; -1 when none.

    The list is ordered by id and drops the oldest beyond
    ``spark.sql.ui.retainedExecutions``: new executions are the ids above this one.
    """
    executions = store.executionsList()
    size = executions.size()
    return int(executions.apply(size - 1).executionId()) if size else -1


@contextmanager
def capture(
    spark: SparkSession,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> Iterator[Captured]:
    """Capture every surface while the block runs (see the module's docstring)."""
    captured = Captured()
    capfd.readouterr()
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    gateway: Any = spark.sparkContext._gateway
    jvm_pid = gateway.proc.pid
    tails = {"JVM stdout": _FdTail(jvm_pid, 1), "JVM stderr": _FdTail(jvm_pid, 2)}
    store = spark._jsparkSession.sharedState().statusStore()
    last_execution = _last_execution_id(store)
    started = spark.sql("SELECT current_timestamp()").collect()[0][0]
    logging_key = "spark.sql.pyspark.worker.logging.enabled"
    old_logging = (spark.conf.get(logging_key) or "false") if WORKER_LOGS else "false"
    if WORKER_LOGS:
        spark.conf.set(logging_key, "true")
    log4j = _Log4jCapture(spark)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield captured
    finally:
        # A Python worker prints a marker last: once the JVM has copied it to its
        # stderr, whatever the workers printed before it is there too.
        marker = f"secrets-capture-end-{uuid.uuid4().hex}"
        probe = F.udf(_print_marker(marker), "string", useArrow=False)
        spark.range(1).select(probe(F.lit("x"))).collect()
        if tails["JVM stderr"].readable:
            wait_until_sync(
                lambda: marker in tails["JVM stderr"].read(),
                timeout=30,
                message="the Python worker's marker on the JVM's stderr",
            )
        for line in log4j.stop():
            captured.add(f"log4j ({line.partition(' ')[0]})", line)
        for name, tail in tails.items():
            captured.add(name, tail.read())
        captured.jvm_stderr_readable = tails["JVM stderr"].readable
        if WORKER_LOGS:
            rows: list[dict[str, Any]] = []

            def marker_logged() -> bool:
                # The workers' logs reach the table on their own time: the marker last.
                nonlocal rows
                logs = spark.tvf.python_worker_logs().where(F.col("ts") >= F.lit(started))
                rows = [row.asDict() for row in logs.collect()]
                return any(marker in str(row) for row in rows)

            wait_until_sync(marker_logged, timeout=30, message="the marker in the worker logs")
            captured.add("Python worker logs", *rows)
            spark.conf.set(logging_key, old_logging)
        executions = store.executionsList()
        index = executions.size() - 1
        while index >= 0 and executions.apply(index).executionId() > last_execution:
            execution = executions.apply(index)
            index -= 1
            captured.add(
                "SQL executions (UI)",
                execution.description(),
                execution.details(),
                execution.physicalPlanDescription(),
            )
        out, err = capfd.readouterr()
        captured.add("stdout", out)
        captured.add("stderr", err)
        for record in caplog.records:
            text = record.getMessage()
            if record.exc_info:
                text += "".join(traceback.format_exception(*record.exc_info))
            captured.add(f"log records ({record.name})", text)
        for warning in caught:
            captured.add("warnings", f"{warning.category.__name__}: {warning.message}")
        captured.add("(markers)", marker)


def assert_clean(captured: Captured, needles: dict[str, str], allow: dict[str, str]) -> None:
    """No needle in any surface; ``allow`` names surfaces (prefixes) exempt, and why."""
    leaks = []
    for surface, texts in captured.texts.items():
        if any(surface.startswith(prefix) for prefix in allow):
            continue
        for text in texts:
            for name, needle in needles.items():
                at = text.find(needle)
                if at >= 0:
                    leaks.append(f"{name} in {surface}: ...{text[max(0, at - 120) : at + 80]!r}")
    assert not leaks, "secrets leaked:\n" + "\n".join(leaks[:20])


#: Where a secret is known to show, from code that is not ours, and why that is accepted.
KNOWN = {
    # py4j logs every command it sends to the JVM at DEBUG, the arguments of
    # .option(key, value) included: any option of any data source. Its logger is
    # quiet unless the application turns on DEBUG for it (or for the root logger).
    "log records (py4j": "py4j logs each command at DEBUG, option values included",
    # Spark's SQL parser logs each statement at DEBUG: a secret written into the
    # text of a statement (CREATE ... USING jetstream OPTIONS (password '...')) shows
    # there. The plans show it redacted; the docs advise .option() with a secret
    # scope rather than secrets in SQL text.
    "log4j (org.apache.spark.sql.execution.SparkSqlParser)": "Spark logs SQL text at DEBUG",
}


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One run: a way to authenticate, what to do, the options to change, and the outcome."""

    scheme: str
    action: str  # read | write | stream | kv-read | kv-write | sql | session
    change: Callable[[Realm], dict[str, str | None]] = lambda realm: {}
    error: str | None = None  # a regex of the expected error; None: it succeeds


def _url_with(secret: str) -> Callable[[Realm], dict[str, str | None]]:
    return lambda realm: {"servers": realm.url("password").replace("//", f"//{secret}@", 1)}


def _seed_typo(realm: Realm) -> dict[str, str | None]:
    seed = realm.seed
    return {"nkeySecret": seed[:30] + ("A" if seed[30] != "A" else "B") + seed[31:]}


def _creds_without_seed(realm: Realm) -> dict[str, str | None]:
    return {"credsSecret": realm.creds_text.split("-----BEGIN USER NKEY SEED")[0]}


AUTH_FAILED = "Authorization Violation"
CASES = {
    # They authenticate, and read or write exactly the rows.
    "password-read": Case("password", "read"),
    "password-write": Case("password", "write"),
    "token-read": Case("token", "read"),
    "nkeySecret-read": Case("nkey", "read"),
    "nkeySecret-write": Case("nkey", "write"),
    "nkeySecret-stream": Case("nkey", "stream"),
    "credsSecret-read": Case("creds", "read"),
    "credsSecret-write": Case("creds", "write"),
    "credsSecret-stream": Case("creds", "stream"),
    "creds-file-read": Case("credsfile", "read"),
    "password-kv-read": Case("password", "kv-read"),
    "credsSecret-kv-write": Case("creds", "kv-write"),
    "nkeySecret-sql": Case("nkey", "sql"),
    "credsSecret-session": Case("creds", "session"),
    "nkeySecret-session": Case("nkey", "session"),
    # Wrong secrets.
    "wrong-password-read": Case(
        "password", "read", lambda r: {"password": WRONG_PASSWORD}, AUTH_FAILED
    ),
    "wrong-password-write": Case(
        "password", "write", lambda r: {"password": WRONG_PASSWORD}, AUTH_FAILED
    ),
    "wrong-password-stream": Case(
        "password", "stream", lambda r: {"password": WRONG_PASSWORD}, AUTH_FAILED
    ),
    "wrong-password-kv-write": Case(
        "password", "kv-write", lambda r: {"password": WRONG_PASSWORD}, AUTH_FAILED
    ),
    "wrong-password-session": Case(
        "password", "session", lambda r: {"password": WRONG_PASSWORD}, AUTH_FAILED
    ),
    "wrong-token-read": Case("token", "read", lambda r: {"token": WRONG_TOKEN}, AUTH_FAILED),
    "stranger-nkeySecret-read": Case(
        "nkey", "read", lambda r: {"nkeySecret": r.stranger_seed}, AUTH_FAILED
    ),
    "forged-credsSecret-read": Case(
        "creds", "read", lambda r: {"credsSecret": r.forged_creds_text}, AUTH_FAILED
    ),
    "forged-credsSecret-stream": Case(
        "creds", "stream", lambda r: {"credsSecret": r.forged_creds_text}, AUTH_FAILED
    ),
    # Right secrets, something else wrong.
    "missing-stream": Case("password", "read", lambda r: {"stream": "NOSUCH"}, "does not exist"),
    "missing-stream-credsSecret": Case(
        "creds", "read", lambda r: {"stream": "NOSUCH"}, "does not exist"
    ),
    "unreachable-nkeySecret": Case(
        "nkey", "read", lambda r: {"servers": UNREACHABLE}, "cannot reach NATS"
    ),
    "unreachable-password-session": Case(
        "password", "session", lambda r: {"servers": UNREACHABLE}, "cannot reach NATS"
    ),
    "bad-numPartitions-password": Case(
        "password", "read", lambda r: {"numPartitions": "zero"}, "option 'numPartitions'"
    ),
    "bad-timeout-token": Case("token", "write", lambda r: {"timeout": "-1"}, "option 'timeout'"),
    "bad-maxPending-nkeySecret": Case(
        "nkey", "kv-write", lambda r: {"maxPending": "none"}, "option 'maxPending'"
    ),
    # Malformed secrets, and secrets where they do not belong.
    "nkeySecret-typo": Case("nkey", "read", _seed_typo, "option 'nkeySecret'.*checksum"),
    "nkeySecret-is-a-creds-text": Case(
        "nkey", "read", lambda r: {"nkeySecret": r.creds_text}, "option 'nkeySecret'"
    ),
    "credsSecret-without-seed": Case("creds", "read", _creds_without_seed, "option 'credsSecret'"),
    # The text or the seed where the file's path goes: nats-py's error quoted it.
    "creds-is-a-creds-text": Case(
        "credsfile", "write", lambda r: {"creds": r.creds_text}, "option 'creds' takes the path"
    ),
    "creds-is-a-seed": Case(
        "credsfile", "read", lambda r: {"creds": r.seed}, "option 'creds' takes the path"
    ),
    "credsSecret-and-creds": Case(
        "creds", "write", lambda r: {"creds": str(r.creds_file)}, "exclude each other"
    ),
    "nkeySecret-and-credsSecret": Case(
        "creds", "read", lambda r: {"nkeySecret": r.seed}, "cannot go with"
    ),
    "password-in-servers-url": Case(
        "password", "read", _url_with(f"{USER}:{URL_PASSWORD}"), "has credentials in it"
    ),
    "password-in-servers-url-stream": Case(
        "password", "stream", _url_with(f"{USER}:{PASSWORD}"), "has credentials in it"
    ),
    "token-in-servers-url": Case("token", "write", _url_with(TOKEN), "has credentials in it"),
    "empty-servers-entry": Case(
        "password",
        "read",
        lambda r: {"servers": f"{r.url('password')}, "},
        "entry 2 of 2 is empty",
    ),
}


def _run_spark(
    case: Case,
    spark: SparkSession,
    realm: Realm,
    options: dict[str, str],
    name: str,
    tmp_path: Path,
    captured: Captured,
) -> None:
    """Run ``case``'s Spark action; plans and query details go to ``captured``."""
    admin = realm.admin(case.scheme)
    try:
        _spark_action(case, spark, admin, options, name, tmp_path, captured)
    finally:
        admin.close()


def _explain(df: DataFrame, captured: Captured) -> None:
    for mode in ("simple", "extended", "codegen", "cost", "formatted"):
        df.explain(mode)  # printed: capfd has it
    captured.add("plans", df._jdf.queryExecution().toString())


def _spark_action(
    case: Case,
    spark: SparkSession,
    admin: Admin,
    options: dict[str, str],
    name: str,
    tmp_path: Path,
    captured: Captured,
) -> None:
    payloads = [f"m-{i}".encode() for i in range(7)]
    if case.action in ("read", "stream"):
        admin.stream(name, payloads)
    elif case.action == "write":
        admin.stream(name)
    if case.action == "read":
        df = spark.read.format("jetstream").options(**options).load()
        _explain(df, captured)
        got = [(r.seq, r.data) for r in df.orderBy("seq").collect()]
        assert got == [(seq, p) for seq, p in enumerate(payloads, 1)]
    elif case.action == "write":
        df = spark.createDataFrame([(p,) for p in payloads], "data binary")
        sink = {key: value for key, value in options.items() if key != "stream"}
        writer = df.write.format("jetstream").options(**sink).option("subject", f"{name}.out")
        writer.mode("append").save()
        assert sorted(admin.payloads(name)) == payloads  # partitions publish concurrently
    elif case.action == "stream":
        target = f"{name}OUT"
        admin.stream(target)
        sink = {**options, "subject": f"{target}.x"}
        sink.pop("stream", None)
        checkpoint = tmp_path / "checkpoint"
        df = (
            spark.readStream.format("jetstream")
            .options(**options)
            .option("startingOffsets", "earliest")
            .load()
        )
        _explain(df, captured)
        query = (
            df.select("data")
            .writeStream.format("jetstream")
            .options(**sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
            query.explain(True)
        finally:
            captured.add("streaming query", query.lastProgress, query.recentProgress, query.status)
            captured.add("streaming query", *_exception_texts(query.exception(), spark._jvm))
            query.stop()
            for path in sorted(checkpoint.rglob("*")) if checkpoint.exists() else []:
                if path.is_file():
                    captured.add("checkpoint files", path.read_bytes().decode(errors="replace"))
        assert query.exception() is None
        assert sorted(admin.payloads(target)) == payloads
    elif case.action in ("kv-read", "kv-write"):
        bucket = f"{name}KV"
        kv = admin.run(lambda js: js.create_key_value(KeyValueConfig(bucket=bucket)))
        kv_options = {**options, "bucket": bucket}
        kv_options.pop("stream", None)
        if case.action == "kv-read":
            admin.run(lambda js: kv.put("k1", b"v1"))
            df = spark.read.format("jetstream_kv").options(**kv_options).load()
            _explain(df, captured)
            assert [(r.key, r.value) for r in df.collect()] == [("k1", b"v1")]
        else:
            df = spark.createDataFrame([("k2", "v2")], "key string, value string")
            df.write.format("jetstream_kv").options(**kv_options).mode("append").save()
            assert admin.run(lambda js: kv.get("k2")).value == b"v2"
    elif case.action == "sql":
        admin.stream(name, payloads)
        listed = ", ".join(f"{key} '{value}'" for key, value in options.items())
        view = f"CREATE OR REPLACE TEMPORARY VIEW {name} USING jetstream OPTIONS ({listed})"
        plan = spark.sql(f"EXPLAIN EXTENDED {view}").collect()[0][0]
        captured.add("plans", plan)
        assert "*********(redacted)" in plan  # Spark's redaction: the names match its regex
        spark.sql(view)
        df = spark.sql(f"SELECT seq, data FROM {name} ORDER BY seq")
        _explain(df, captured)
        assert [(r.seq, r.data) for r in df.collect()] == list(enumerate(payloads, 1))
    else:
        raise AssertionError(case.action)


def _run_session(case: Case, realm: Realm, options: dict[str, str], name: str) -> None:
    """What an executor runs to connect, in this process: its logs reach caplog at DEBUG."""
    admin = realm.admin(case.scheme)
    try:
        admin.stream(name, [b"a", b"b"])
    finally:
        admin.close()
    opts = parse_source_options(options, streaming=False)
    with Session(opts.connect) as session:
        stream = session.run(session.js.stream(name))
        assert stream.cached_info.state.messages == 2


@pytest.mark.parametrize("case_id", list(CASES))
def test_no_secret_shows(
    case_id: str,
    spark: SparkSession,
    realm: Realm,
    name: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    case = CASES[case_id]
    probe = f"probe{uuid.uuid4().hex[:8]}"  # an unknown option: its warning shows the capture
    options: dict[str, str] = {
        "servers": realm.url(case.scheme),
        "stream": name,
        **realm.auth(case.scheme),
        "ignoreUnknownOptions": "true",
        probe: "1",
    }
    for key, value in case.change(realm).items():
        if value is None:
            options.pop(key, None)
        else:
            options[key] = value
    failure: BaseException | None = None
    with capture(spark, capfd, caplog) as captured:
        try:
            if case.action == "session":
                _run_session(case, realm, options, name)
            else:
                _run_spark(case, spark, realm, options, name, tmp_path, captured)
        except (PySparkException, AuthorizationError, ConnectionClosedError, ValueError) as exc:
            failure = exc
            captured.add("exception", *_exception_texts(exc, spark._jvm))
    assert_clean(captured, realm.needles, KNOWN)
    # The captures work: each saw what it must have seen.
    if case.error is None:
        assert failure is None, _exception_texts(failure, spark._jvm)[0]
    else:
        assert failure is not None, f"expected {case.error!r}"
        assert re.search(case.error, captured.joined("exception")), captured.joined("exception")
    marker = captured.joined("(markers)")
    if WORKER_LOGS:
        assert marker in captured.joined("Python worker logs")
    if captured.jvm_stderr_readable:
        assert marker in captured.joined("JVM stderr")
    assert "DAGScheduler" in captured.joined("log4j (org.apache.spark.scheduler.DAGScheduler)")
    assert any(surface.startswith("log records") for surface in captured.texts)
    if case.action == "session":
        assert probe.lower() in captured.joined("warnings")
    elif case.error is None:
        # The unknown option's warning, printed by a data source's Python worker.
        warned = captured.joined("JVM stderr") + captured.joined("Python worker logs")
        assert probe.lower() in warned
        assert "jetstream" in captured.joined("SQL executions (UI)")
        if case.action not in ("write", "kv-write"):
            assert "jetstream" in captured.joined("stdout")  # explain() printed the plan


# --------------------------------------------------------------------------- repr, str, redaction


def test_options_repr_and_str_hide_secrets(realm: Realm) -> None:
    both = {"user": USER, "servers": realm.url("password")}
    connect_only = {**both, "password": PASSWORD, "token": TOKEN}
    made: list[SourceOptions | SinkOptions | KVOptions] = [
        parse_source_options(
            {**connect_only, "stream": "S", "credsSecret": realm.creds_text}, streaming=False
        ),
        parse_source_options(
            {**connect_only, "stream": "S", "nkeySecret": realm.seed}, streaming=True
        ),
        parse_sink_options({**connect_only, "credsSecret": realm.creds_text}),
        parse_kv_options({**connect_only, "bucket": "B", "nkeySecret": realm.seed}),
    ]
    connects = [opts.connect for opts in made]
    connects.append(
        ConnectOptions(
            servers=realm.url("password"),
            password=PASSWORD,
            token=TOKEN,
            creds_secret=realm.creds_text,
            nkey_secret=realm.seed,
        )
    )
    for opts in [*made, *connects]:
        for text in (repr(opts), str(opts), f"{opts}", f"{opts!r}", opts.__class__.__repr__(opts)):
            for needle_name, needle in realm.needles.items():
                assert needle not in text, needle_name
            assert USER in text or "ConnectOptions(servers=" in text  # the rest still shows
        if isinstance(opts, ConnectOptions):
            assert opts.describe() == realm.url("password")
            if opts.creds_secret is not None:
                assert "RawCredentials(<redacted>)" in repr(opts.connect_kwargs())
    assert connects[0].creds_secret is not None
    assert connects[1].nkey_secret == realm.seed


def test_spark_redacts_our_secret_option_names(spark: SparkSession) -> None:
    """Spark's default ``spark.redaction.regex`` matches the name of every secret option.

    Spark redacts an option whose name matches it wherever it shows a data
    source's options (SQL ``OPTIONS``, as in ``CREATE TEMPORARY VIEW ... USING``).
    """
    values = {
        "password": PASSWORD,
        "token": TOKEN,
        "credsSecret": "creds-" + uuid.uuid4().hex,
        "nkeySecret": "seed-" + uuid.uuid4().hex,
        "servers": "nats://127.0.0.1:1",
        "user": USER,
        "creds": "/etc/nats/alice.creds",
        "stream": "ORDERS",
    }
    listed = ", ".join(f"{key} '{value}'" for key, value in values.items())
    view = f"CREATE TEMPORARY VIEW redaction_probe USING jetstream OPTIONS ({listed})"
    plan = spark.sql(f"EXPLAIN EXTENDED {view}").collect()[0][0]
    for key in ("password", "token", "credsSecret", "nkeySecret"):
        assert f"{key} -> *********(redacted)" in plan
        assert values[key] not in plan
    for key in ("servers", "user", "creds", "stream"):
        assert f"{key} -> {values[key]}" in plan


def test_capture_sees_a_leak(
    spark: SparkSession,
    realm: Realm,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The check itself: a secret put on each surface on purpose is found there."""
    with capture(spark, capfd, caplog) as captured:
        print(PASSWORD)
        os.write(2, f"{TOKEN}\n".encode())
        logging.getLogger("aiojetstream.spark").debug("seed %s", realm.seed)
        warnings.warn(f"creds {realm.creds_text}", JetStreamSparkWarning, stacklevel=1)
        leak = F.udf(_print_marker(WRONG_PASSWORD), "string", useArrow=False)
        spark.range(1).select(leak(F.lit("x"))).collect()
        jvm = spark._jvm
        assert jvm is not None
        jvm.org.apache.logging.log4j.LogManager.getLogger("secrets.test").debug(WRONG_TOKEN)
        # Why KNOWN exempts py4j: it logs each call's arguments at DEBUG, option values too.
        spark.read.format("jetstream").option("password", URL_PASSWORD)
    found = {
        name
        for name, needle in realm.needles.items()
        for texts in captured.texts.values()
        for text in texts
        if needle in text
    }
    for name in ("password", "token", "nkey seed", "creds seed", "wrong password", "wrong token"):
        assert name in found
    with pytest.raises(AssertionError, match="secrets leaked"):
        assert_clean(captured, realm.needles, KNOWN)
    assert WRONG_TOKEN in captured.joined("log4j")
    assert URL_PASSWORD in captured.joined("log records (py4j")
    if WORKER_LOGS:
        assert WRONG_PASSWORD in captured.joined("Python worker logs")
    if captured.jvm_stderr_readable:
        assert WRONG_PASSWORD in captured.joined("JVM stderr")


# --------------------------------------------------------------------------- Spark Connect


def _documented_redaction() -> str:
    """The Connect server's setting docs/spark.md gives ("Secrets"), as the page spells it.

    Connect records each request's plan as text, option values included,
    redacted by ``spark.redaction.string.regex`` only.
    """
    page = (Path(__file__).resolve().parents[2] / "docs" / "spark.md").read_text("utf-8")
    found = re.search(r"^REGEX='(.+)'$", page, re.MULTILINE)
    assert found is not None, "docs/spark.md gives no spark.redaction.string.regex"
    return found.group(1)


#: Seconds the driver may take: a local Connect server starts in about 45 s on a loaded machine.
CONNECT_TIMEOUT = 300.0


@pytest.mark.parametrize("redact", [True, False], ids=["documented-setting", "without-it"])
def test_spark_connect_event_log(redact: bool, realm: Realm, tmp_path: Path) -> None:
    """Over Spark Connect, reads with a ``password`` and a ``credsSecret``: with the
    documented ``spark.redaction.string.regex`` on the Connect server no event log file
    holds a secret; without it they do (the statement text and call sites of the
    operation), which shows the search finds them."""
    assert_connect_port_free()
    bucket = unique_name("KVCONNECT")
    reads = []
    for scheme in ("password", "creds"):
        admin = realm.admin(scheme)
        try:

            async def fill(js: JetStreamContext) -> None:
                kv = await js.create_key_value(KeyValueConfig(bucket=bucket))
                await kv.put("k1", b"v1")

            admin.run(fill)
        finally:
            admin.close()
        reads.append({"servers": realm.url(scheme), "bucket": bucket, **realm.auth(scheme)})
    (tmp_path / "reads.json").write_text(json.dumps(reads), encoding="utf-8")
    events = tmp_path / "eventlog"
    events.mkdir()
    out = tmp_path / "result.json"
    argv = [sys.executable, str(DRIVERS / "connect_secrets.py"), "--reads", "reads.json"]
    argv += ["--eventlog", str(events), "--out", str(out)]
    if redact:
        argv += ["--redaction-regex", _documented_redaction()]
    run_process(argv, tmp_path / "driver.log", spark_env(), CONNECT_TIMEOUT, cwd=tmp_path)
    assert json.loads(out.read_text(encoding="utf-8")) == [["k1"], ["k1"]]
    logs = [path.read_text(errors="replace") for path in events.rglob("*") if path.is_file()]
    # The capture holds the reads' operations (their statement text).
    assert any("SparkListenerConnectOperationStarted" in text for text in logs), logs
    assert any("jetstream_kv" in text and bucket in text for text in logs)
    found = sorted(
        name for name, needle in realm.needles.items() if any(needle in text for text in logs)
    )
    if redact:
        assert found == []
    else:
        for name in ("password", "creds seed", "creds JWT"):
            assert name in found

"""No secret reaches any output: connect(), its callbacks and logs, the testing helpers, the CLI.

The rule (issue 25, item 3): no password, token, NKey seed or creds content
reaches any exception text, warning, log record, repr, CLI output or Spark
output. :func:`test_no_secret_reaches_any_output` drives each surface below
with secrets of its own, against real servers (refused credentials, nobody
listening, an unknown host, URLs nats-py refuses, TLS failures, websocket
handshakes, a reconnect, the command line in process and as ``python -m``),
and searches everything captured meanwhile: each exception with everything
it chains (``__cause__``, ``__context__``, notes) and its formatted
traceback, every warning, every log record (its message with the arguments
formatted, and its traceback), standard output and error, and the reprs.

The secrets are made of random markers joined by the characters that used to
cut a redaction short (``@``, ``/``, ``:``, ``%40``, ``,``, unicode): each
marker is searched for alone, in any case, so a piece left behind counts.
The control surfaces plant a secret in each channel: the search must find
it there. The Spark side has its own test: tests/spark/test_spark_secrets.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import subprocess
import sys
import traceback
import uuid
import warnings
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nkeys  # type: ignore[import-untyped]  # no type hints
import pytest
from nats.aio.client import RawCredentials
from typer.testing import CliRunner

import aiojetstream
from aiojetstream import (
    AuthorizationError,
    ConnectionClosedError,
    InvalidOptionError,
    JetStreamError,
    TLSError,
)
from aiojetstream._conn._connect import _URL_HINT
from aiojetstream._redact import chain
from aiojetstream.cli._app import app
from aiojetstream.cli._common import Options
from aiojetstream.testing import NatsServer
from credentials import CertificateAuthority, Operator, new_nkey, public_key, seed_text
from helpers import wait_until

SRC = Path(__file__).resolve().parents[2] / "src"
BOUND = 60.0  # seconds, for a subprocess on a loaded machine
HOST = "127.0.0.1"


def marker() -> str:
    """A piece of a secret that shows up nowhere else (searched for in any case)."""
    return f"Zq{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class Secret:
    """A secret, and the pieces of it that must not show (alone, in any case)."""

    value: str
    pieces: tuple[str, ...]

    @classmethod
    def joined(cls, separator: str) -> Secret:
        """Two markers around ``separator`` (which used to end a redaction early)."""
        first, second = marker(), marker()
        return cls(f"{first}{separator}{second}", (first, second))

    @classmethod
    def seed(cls, value: str) -> Secret:
        return cls(value, (value, value[20:36]))

    @classmethod
    def creds(cls, text: str) -> list[Secret]:
        """A .creds file's JWT (its claims and signature) and NKey seed."""
        lines = text.splitlines()
        jwt = lines[lines.index("-----BEGIN NATS USER JWT-----") + 1]
        seed = lines[lines.index("-----BEGIN USER NKEY SEED-----") + 1]
        _, claims, signature = jwt.split(".")
        return [cls(jwt, (claims[20:60], signature[10:40])), cls.seed(seed)]


@dataclass
class Capture:
    """Everything a surface produced: ``(channel, text)`` pairs."""

    texts: list[tuple[str, str]] = field(default_factory=list)

    def add(self, channel: str, text: object) -> None:
        self.texts.append((channel, str(text)))

    def exception(self, exc: BaseException, channel: str = "exception") -> None:
        """The exception, all it chains and its notes, and its traceback as Python prints it."""
        for index, linked in enumerate(chain(exc)):
            where = f"{channel}[{index}] {type(linked).__name__}"
            self.add(where, str(linked))
            self.add(where, repr(linked))
            for note in getattr(linked, "__notes__", None) or ():
                self.add(f"{where} note", note)
        self.add(f"{channel} traceback", "".join(traceback.format_exception(exc)))

    def repr_of(self, name: str, value: object) -> None:
        self.add(f"repr {name}", repr(value))
        self.add(f"str {name}", str(value))

    def leaks(self, secrets: list[Secret]) -> list[str]:
        found = []
        for channel, text in self.texts:
            lowered = text.lower()
            for secret in secrets:
                for piece in secret.pieces:
                    if piece.lower() in lowered:
                        found.append(f"{channel}: {piece!r} in {text!r}")
        return found


class _Records(logging.Handler):
    def __init__(self, capture: Capture) -> None:
        super().__init__(logging.DEBUG)
        self.capture = capture
        self.traceback = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        where = f"log {record.name} {record.levelname}"
        self.capture.add(where, record.getMessage())  # the arguments formatted
        if record.exc_info:
            self.capture.add(f"{where} traceback", self.traceback.formatException(record.exc_info))
        if record.stack_info:
            self.capture.add(f"{where} stack", record.stack_info)


@contextlib.contextmanager
def watching(capture: Capture) -> Iterator[None]:
    """Log records of every logger at every level, and every warning, into ``capture``."""
    root = logging.getLogger()
    handler = _Records(capture)
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    for warning in caught:
        capture.add(f"warning {warning.category.__name__}", warning.message)


async def refused(
    capture: Capture,
    expected: type[BaseException] | tuple[type[BaseException], ...],
    servers: str | list[str],
    **options: Any,
) -> None:
    """Connect, expecting ``expected``; the error goes into ``capture``."""
    with pytest.raises(expected) as info:
        await _connect_and_close(servers, options)
    capture.exception(info.value)


async def _connect_and_close(servers: str | list[str], options: dict[str, Any]) -> None:
    js = await aiojetstream.connect(servers, **options)
    await js.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port  # nobody listens there now


# --------------------------------------------------------------------------- servers


@dataclass
class Servers:
    """Servers of every kind of credentials (each refuses the test's secrets)."""

    password: NatsServer  # user bob, password "right"
    token: NatsServer
    nkey: NatsServer
    operator: NatsServer  # decentralised auth: .creds files
    tls: NatsServer  # a certificate of the test's own CA, for 127.0.0.1 and localhost
    ca_file: Path
    stranger_seed: Path  # an NKey seed file the nkey server does not know
    forged_creds: Path  # a .creds file of a user the account did not sign
    directory: Path


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    tmp = tmp_path_factory.mktemp("secrets")
    user = new_nkey(nkeys.PREFIX_BYTE_USER)
    stranger = tmp / "stranger.nk"
    stranger.write_text(seed_text(new_nkey(nkeys.PREFIX_BYTE_USER)))
    operator = Operator(tmp)
    forged = operator.user_creds("mallory", signer=new_nkey(nkeys.PREFIX_BYTE_ACCOUNT))
    ca = CertificateAuthority(tmp)
    cert = ca.issue("server", "IP:127.0.0.1,DNS:localhost")
    tls = {"tls": {"cert_file": str(cert.cert_file), "key_file": str(cert.key_file)}}
    with (
        NatsServer(config={"authorization": {"user": "bob", "password": "right"}}) as password,
        NatsServer(config={"authorization": {"token": "right-token"}}) as token,
        NatsServer(config={"authorization": {"users": [{"nkey": public_key(user)}]}}) as nkey,
        NatsServer(config=operator.server_config()) as op,
        NatsServer(config=tls) as tls_server,
    ):
        yield Servers(password, token, nkey, op, tls_server, ca.cert_file, stranger, forged, tmp)


# --------------------------------------------------------------------------- surfaces

#: A surface: drives one path with secrets of its own, capturing what it produced;
#: returns the secrets. Run inside :func:`watching`.
Surface = Callable[[Servers, Capture], list[Secret]]


def library(
    make: Callable[[Servers, Capture], Coroutine[Any, Any, list[Secret]]],
) -> Surface:
    def run(servers: Servers, capture: Capture) -> list[Secret]:
        return asyncio.run(make(servers, capture))

    return run


def _refused_url(separator: str) -> Surface:
    async def make(s: Servers, capture: Capture) -> list[Secret]:
        secret = Secret.joined(separator)
        url = f"nats://bob:{secret.value}@{HOST}:{s.password.port}"
        await refused(capture, AuthorizationError, url)
        await refused(capture, AuthorizationError, [f"nats://{HOST}:{closed_port()}", url])
        return [secret]

    return library(make)


def _invalid_url(separator: str) -> Surface:
    """A password nats-py cannot take from a URL: it refuses the URL (and quotes it)."""

    async def make(s: Servers, capture: Capture) -> list[Secret]:
        secret = Secret.joined(separator)
        for url in (
            f"nats://bob:{secret.value}@{HOST}:{s.password.port}",
            f"tls://bob:{secret.value}@{HOST}:{s.tls.port}",
        ):
            await refused(capture, InvalidOptionError, url)
            await refused(capture, InvalidOptionError, [f"nats://{HOST}:{s.password.port}", url])
        # A token without a scheme: nats-py may take its first piece for a host instead.
        token = f"{secret.value}@{HOST}:{s.token.port}"
        await refused(capture, JetStreamError, token)
        return [secret]

    return library(make)


async def _refused_options(s: Servers, capture: Capture) -> list[Secret]:
    password, token = Secret.joined("@"), Secret.joined(":")
    await refused(capture, AuthorizationError, s.password.url, user="bob", password=password.value)
    await refused(capture, AuthorizationError, s.token.url, token=token.value)
    url_token = Secret.joined("%40")
    await refused(capture, AuthorizationError, f"nats://{url_token.value}@{HOST}:{s.token.port}")
    return [password, token, url_token]


async def _refused_nkey_and_creds(s: Servers, capture: Capture) -> list[Secret]:
    seed = Secret.seed(s.stranger_seed.read_text().strip())
    await refused(capture, AuthorizationError, s.nkey.url, nkeys_seed_str=seed.value)
    await refused(capture, AuthorizationError, s.nkey.url, nkeys_seed=str(s.stranger_seed))
    text = s.forged_creds.read_text()
    await refused(
        capture, AuthorizationError, s.operator.url, user_credentials=RawCredentials(text)
    )
    await refused(capture, AuthorizationError, s.operator.url, user_credentials=str(s.forged_creds))
    # The text, or a seed, given where the file's path goes: nats-py's error quoted it as
    # the name of the file it could not open.
    await refused(capture, JetStreamError, s.operator.url, user_credentials=text)
    await refused(capture, JetStreamError, s.nkey.url, user_credentials=seed.value)
    return [seed, *Secret.creds(text)]


async def _unreachable(s: Servers, capture: Capture) -> list[Secret]:
    secrets = [Secret.joined(c) for c in ("@", ":", "é", "%40")]
    for secret in secrets:
        await refused(
            capture,
            ConnectionClosedError,
            f"nats://bob:{secret.value}@{HOST}:{closed_port()}",
            password="kw" + secret.value,
            user="bob",
        )
    unknown = Secret.joined("@")
    await refused(capture, ConnectionClosedError, f"nats://bob:{unknown.value}@nosuchhost.invalid")
    return [*secrets, unknown]


async def _tls_failures(s: Servers, capture: Capture) -> list[Secret]:
    plaintext, untrusted, mismatch, optioned = (Secret.joined("@") for _ in range(4))
    await refused(
        capture, TLSError, f"tls://bob:{plaintext.value}@{HOST}:{s.password.port}"
    )  # a server without TLS
    await refused(capture, TLSError, f"tls://bob:{untrusted.value}@{HOST}:{s.tls.port}")
    import ssl

    context = ssl.create_default_context(cafile=str(s.ca_file))
    await refused(
        capture,
        TLSError,
        f"tls://bob:{mismatch.value}@{HOST}:{s.tls.port}",
        tls=context,
        tls_hostname="elsewhere.example",
    )
    await refused(
        capture, TLSError, f"nats://bob:{optioned.value}@{HOST}:{s.password.port}", tls=context
    )  # a TLS option, a server without TLS
    return [plaintext, untrusted, mismatch, optioned]


async def _websocket(s: Servers, capture: Capture) -> list[Secret]:
    """aiohttp's errors: a handshake with an HTTP server, and a token's piece taken for a host."""
    handshake = Secret.joined("@")
    await refused(
        capture, ConnectionClosedError, f"ws://bob:{handshake.value}@{HOST}:{s.password.http_port}"
    )
    # nats-py reads "ws://<first>/<second>@host" as host <first>: aiohttp names it (lower-cased).
    host_piece = Secret.joined("/")
    await refused(capture, ConnectionClosedError, f"ws://{host_piece.value}@{HOST}:{closed_port()}")
    return [handshake, host_piece]


async def _reconnect(s: Servers, capture: Capture) -> list[Secret]:
    """A connection made with a URL's credentials loses its server and gets it back."""
    secret = Secret.joined("@")
    config = {"authorization": {"user": "bob", "password": secret.value}}
    async with NatsServer(config=config) as server:
        url = f"nats://bob:{secret.value}@{HOST}:{server.port}"
        await _lose_and_regain(server, url, capture, user_error_cb=True)
        await _lose_and_regain(server, url, capture, user_error_cb=False)  # the library's log
    return [secret]


async def _lose_and_regain(
    server: NatsServer, url: str, capture: Capture, *, user_error_cb: bool
) -> None:
    errors: list[Exception] = []
    failed_twice, back = asyncio.Event(), asyncio.Event()

    async def error_cb(exc: Exception) -> None:
        errors.append(exc)
        capture.exception(exc, "error_cb")
        if len(errors) >= 2:
            failed_twice.set()

    async def reconnected() -> None:
        back.set()

    options: dict[str, Any] = {"reconnect_time_wait": 0.05}
    if user_error_cb:
        options["error_cb"] = error_cb
    js = await aiojetstream.connect(url, reconnected_cb=reconnected, **options)
    try:
        capture.repr_of("context", js)
        capture.repr_of("client", js.nc)
        await js.account_info()
        await server.kill()
        if user_error_cb:
            await asyncio.wait_for(failed_twice.wait(), 20)
        else:
            await wait_until(lambda: _logged(capture) >= 2, timeout=20)
        await server.start()
        await asyncio.wait_for(back.wait(), 20)
        await js.account_info()
    finally:
        await js.close()


def _logged(capture: Capture) -> int:
    """The library's log lines of connection errors so far (a log has no event to wait on)."""
    return sum("nats connection error" in text for _, text in capture.texts)


async def _testing_helpers(s: Servers, capture: Capture) -> list[Secret]:
    """The testing helpers name servers by URL, never by their configuration's secrets."""
    secret = Secret.joined("@")
    config = {"authorization": {"user": "bob", "password": secret.value}}
    async with NatsServer(config=config) as server:
        capture.repr_of("server", server)
        capture.add("url", server.url)
    broken = NatsServer(config={**config, "no_such_field": 1})
    with pytest.raises(RuntimeError) as info:
        await broken.start()
    capture.exception(info.value)
    return [secret]


# --------------------------------------------------------------------------- the CLI


KV_LS = ("kv", "ls")


def cli(capture: Capture, args: list[str], expect: int, env: dict[str, str] | None = None) -> None:
    result = CliRunner().invoke(app, args, env={"NATS_URL": "", **(env or {})})
    capture.add("cli stdout", result.stdout)
    capture.add("cli stderr", result.stderr)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        capture.exception(result.exception, "cli exception")
    assert result.exit_code == expect, (args, result.stdout, result.stderr, result.exception)


def python_m(capture: Capture, args: list[str], expect: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aiojetstream", *args],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    capture.add("python -m stdout", done.stdout)
    capture.add("python -m stderr", done.stderr)
    assert done.returncode == expect, (args, done.stdout, done.stderr)


def _cli_urls(s: Servers, capture: Capture) -> list[Secret]:
    secrets = []
    for separator in ("@", ":", "é", "%40"):
        secret = Secret.joined(separator)
        secrets.append(secret)
        refused_url = f"nats://bob:{secret.value}@{HOST}:{s.password.port}"
        unreachable = f"nats://bob:{secret.value}@{HOST}:{closed_port()}"
        for debug in ([], ["--debug"]):
            cli(capture, [*debug, "--server", refused_url, "stream", "ls"], 1)
            cli(capture, [*debug, "--server", unreachable, "stream", "ls"], 1)
        cli(capture, ["stream", "ls"], 1, env={"NATS_URL": refused_url})
    for separator in ("/", ",", "\uff20", "?"):
        secret = Secret.joined(separator)
        secrets.append(secret)
        invalid = f"nats://bob:{secret.value}@{HOST}:{s.password.port}"
        for debug in ([], ["--debug"]):
            cli(capture, [*debug, "--server", invalid, "stream", "ls"], 1)
    return secrets


def _cli_options(s: Servers, capture: Capture) -> list[Secret]:
    password, token = Secret.joined("@"), Secret.joined("/")
    for debug in ([], ["--debug"]):
        cli(
            capture,
            [
                *debug,
                "--server",
                s.password.url,
                "--user",
                "bob",
                "--password",
                password.value,
                *KV_LS,
            ],
            1,
        )
        cli(capture, [*debug, "--server", s.token.url, "--token", token.value, "kv", "ls"], 1)
        cli(
            capture, [*debug, "--server", s.nkey.url, "--nkey", str(s.stranger_seed), "kv", "ls"], 1
        )
        cli(
            capture,
            [*debug, "--server", s.operator.url, "--creds", str(s.forged_creds), "kv", "ls"],
            1,
        )
    env = {"NATS_USER": "bob", "NATS_PASSWORD": password.value, "NATS_TOKEN": token.value}
    cli(capture, ["--server", s.password.url, "kv", "ls"], 1, env=env)
    options = Options(servers=s.password.url, user="bob", password=password.value)
    capture.repr_of("cli options", options)
    capture.repr_of("cli options", Options(token=token.value))
    seed = Secret.seed(s.stranger_seed.read_text().strip())
    return [password, token, seed, *Secret.creds(s.forged_creds.read_text())]


def _cli_help(s: Servers, capture: Capture) -> list[Secret]:
    url, password, token = Secret.joined("@"), Secret.joined(":"), Secret.joined("/")
    env = {
        "NATS_URL": f"nats://bob:{url.value}@{HOST}:{closed_port()}",
        "NATS_USER": "bob",
        "NATS_PASSWORD": password.value,
        "NATS_TOKEN": token.value,
        "NATS_CREDS": str(s.forged_creds),
        "NATS_NKEY": str(s.stranger_seed),
    }
    for args in (["--help"], ["stream", "--help"], ["stream", "ls", "--help"], ["kv", "-h"]):
        cli(capture, args, 0, env=env)
    cli(capture, ["--version"], 0, env=env)
    cli(capture, ["stream", "nosuch"], 2, env=env)  # a usage error
    return [url, password, token]


def _python_m(s: Servers, capture: Capture) -> list[Secret]:
    """The console as people see it: one error line, or with --debug Python's traceback."""
    secrets = [Secret.joined(c) for c in ("@", "/")]
    for secret in secrets:
        url = f"nats://bob:{secret.value}@{HOST}:{s.password.port}"
        python_m(capture, ["--server", url, "stream", "ls"], 1)
        python_m(capture, ["--debug", "--server", url, "stream", "ls"], 1)
    password = Secret.joined("@")
    python_m(
        capture,
        [
            "--debug",
            "--server",
            s.password.url,
            "--user",
            "bob",
            "--password",
            password.value,
            *KV_LS,
        ],
        1,
    )
    return [*secrets, password]


# --------------------------------------------------------------------------- controls


def _planted(plant: Callable[[str, Capture], None]) -> Surface:
    def run(servers: Servers, capture: Capture) -> list[Secret]:
        secret = Secret.joined("@")
        plant(secret.value, capture)
        return [secret]

    return run


def _in_cause(secret: str, capture: Capture) -> None:
    try:
        try:
            raise ValueError(f"bad {secret}")
        except ValueError as exc:
            raise JetStreamError("clean") from exc
    except JetStreamError as outer:
        capture.exception(outer)


def _in_suppressed_context(secret: str, capture: Capture) -> None:
    try:
        try:
            raise ValueError(f"bad {secret[-12:]}")  # a piece only
        except ValueError:
            raise JetStreamError("clean") from None  # not shown by Python, still chained
    except JetStreamError as outer:
        capture.exception(outer)


def _in_note(secret: str, capture: Capture) -> None:
    exc = JetStreamError("clean")
    exc.add_note(secret.upper())  # in another case
    capture.exception(exc)


def _in_log_args(secret: str, capture: Capture) -> None:
    logging.getLogger("aiojetstream").debug("connecting to %s", secret)


def _in_log_traceback(secret: str, capture: Capture) -> None:
    try:
        raise OSError(secret)
    except OSError:
        logging.getLogger("aiojetstream").exception("failed")


def _in_warning(secret: str, capture: Capture) -> None:
    warnings.warn(f"careful: {secret}", UserWarning, stacklevel=1)


def _in_repr(secret: str, capture: Capture) -> None:
    capture.repr_of("options", Options(user=secret))  # a user name is shown, by design


def _in_cli_output(secret: str, capture: Capture) -> None:
    cli(capture, ["--user", "bob", secret, "stream", "ls"], 2)  # a forgotten --password


def _in_python_m(secret: str, capture: Capture) -> None:
    python_m(capture, [secret], 2)


def _in_stdout(secret: str, capture: Capture) -> None:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print(secret)
    capture.add("stdout", buffer.getvalue())


SURFACES: dict[str, Surface] = {
    "refused-url-at": _refused_url("@"),
    "refused-url-colon": _refused_url(":"),
    "refused-url-pct40": _refused_url("%40"),
    "refused-url-unicode": _refused_url("é密"),
    "refused-options": library(_refused_options),
    "refused-nkey-creds": library(_refused_nkey_and_creds),
    "unreachable-and-unknown-host": library(_unreachable),
    "invalid-url-slash": _invalid_url("/"),
    "invalid-url-comma": _invalid_url(","),
    "invalid-url-query-fragment": _invalid_url("?#"),
    "invalid-url-fullwidth-at": _invalid_url("\uff20"),
    "invalid-url-fullwidth-slash": _invalid_url("\uff0f"),
    "tls-failures": library(_tls_failures),
    "websocket": library(_websocket),
    "reconnect-logs-and-error-cb": library(_reconnect),
    "testing-helpers": library(_testing_helpers),
    "cli-server-urls": _cli_urls,
    "cli-credential-options": _cli_options,
    "cli-help-version-usage": _cli_help,
    "python-m-debug": _python_m,
}

#: Each plants a secret where a surface's output would be captured: it must be found.
CONTROLS: dict[str, Surface] = {
    "control-exception-cause": _planted(_in_cause),
    "control-suppressed-context": _planted(_in_suppressed_context),
    "control-note": _planted(_in_note),
    "control-log-args": _planted(_in_log_args),
    "control-log-traceback": _planted(_in_log_traceback),
    "control-warning": _planted(_in_warning),
    "control-repr": _planted(_in_repr),
    "control-cli-output": _planted(_in_cli_output),
    "control-python-m": _planted(_in_python_m),
    "control-stdout": _planted(_in_stdout),
}


@pytest.mark.parametrize("name", [*SURFACES, *CONTROLS])
def test_no_secret_reaches_any_output(
    name: str, servers: Servers, capfd: pytest.CaptureFixture[str]
) -> None:
    capture = Capture()
    surface = SURFACES.get(name) or CONTROLS[name]
    with watching(capture):
        secrets = surface(servers, capture)
    out, err = capfd.readouterr()
    capture.add("process stdout", out)
    capture.add("process stderr", err)
    assert capture.texts
    leaks = capture.leaks(secrets)
    if name in CONTROLS:
        assert leaks, f"the planted secret was not found in {capture.texts}"
    else:
        assert not leaks, "\n".join(leaks)


# --------------------------------------------------------------------------- the library's wording

#: Passwords in a URL (nats-py refuses the URL) whose pieces are words of the hint.
HINT_WORDS = ["Xy9/pass", "Qz/token", "k#with"]


@pytest.mark.parametrize("password", HINT_WORDS)
async def test_a_password_piece_never_blanks_the_hint(servers: Servers, password: str) -> None:
    """The scrubber blanked the hint's own words ("a ***word or token holding ..."),
    telling anyone who reads the log which word is part of the password."""
    url = f"nats://bob:{password}@{HOST}:{servers.password.port}"
    with pytest.raises(InvalidOptionError) as info:
        await _connect_and_close(url, {})
    assert str(info.value) == (
        f"invalid server URL in nats://***@{HOST}:{servers.password.port} ({_URL_HINT})"
    )
    assert password.rpartition("/")[2].rpartition("#")[2] in _URL_HINT  # a word of its own


@pytest.mark.parametrize("password", ["refused", "credentials"])
async def test_a_refused_password_never_blanks_the_message(servers: Servers, password: str) -> None:
    with pytest.raises(AuthorizationError) as info:
        await _connect_and_close(servers.password.url, {"user": "bob", "password": password})
    assert str(info.value) == (
        f"nats://{HOST}:{servers.password.port} refused the credentials: "
        "nats: 'Authorization Violation'"
    )


async def test_an_unreachable_server_message_keeps_its_words() -> None:
    port = closed_port()
    with pytest.raises(aiojetstream.ConnectionFailedError) as info:
        await _connect_and_close(f"nats://{HOST}:{port}", {"user": "bob", "password": "could"})
    assert str(info.value).startswith(f"could not connect to nats://{HOST}:{port} (tried twice): ")

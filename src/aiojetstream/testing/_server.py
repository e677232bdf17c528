"""One ``nats-server`` process: :class:`NatsServer`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from ._binary import find_nats_server
from ._config import (
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    HEALTHZ,
    HOST,
    MAX_FILE_STORE,
    MAX_MEM_STORE,
    POLL_INTERVAL,
    PORT_RETRIES,
    deep_merge,
    free_port,
    render_block,
)
from ._probes import http_get_async, http_get_sync, tcp_accepts_async, tcp_accepts_sync
from ._process import register, unregister, wait_process_exit

#: The file that keeps the default account's store directory (see ``_keep_account_dir``).
_KEEP_FILE = "aiojetstream-keep"
_KEEP_TEXT = (
    "Put here by aiojetstream.testing.NatsServer: keeps nats-server from removing this\n"
    "account directory while a stream is being created (a race after stream deletes).\n"
)

#: What nats-server logs once its monitoring and client listeners are up (both
#: are fatal to it when their port is taken, and the line follows them).
_READY_MARK = b"Server is ready"
#: Options that send the server's log elsewhere than standard output.
_LOG_ELSEWHERE = ("logfile", "log_file", "syslog", "remote_syslog")
_LOG_ELSEWHERE_TEXT = re.compile(rf"(?im)^\s*({'|'.join(_LOG_ELSEWHERE)})\s*[:=\s]")


def _absolute(path: str | os.PathLike[str]) -> str:
    """``path`` made absolute against the current directory (symbolic links are kept)."""
    return os.path.abspath(os.fspath(path))


#: A ``jetstream`` key (a block or a value) at the start of a configuration line.
_JETSTREAM_KEY: Final = re.compile(r"\s*jetstream\s*[:={]")


def _has_jetstream_block(config: str) -> bool:
    """Whether a string configuration sets ``jetstream`` at its top level.

    Not inside another block (an account's ``jetstream: enabled``), nor in a
    comment. Braces are counted line by line, outside quotes and comments.
    """
    depth = 0
    for line in config.splitlines():
        if depth == 0 and _JETSTREAM_KEY.match(line):
            return True
        quote = ""
        for index, char in enumerate(line):
            if quote:
                quote = "" if char == quote else quote
            elif char in "\"'":
                quote = char
            elif char == "#" or line.startswith("//", index):
                break
            elif char == "{":
                depth += 1
            elif char == "}":
                depth = max(depth - 1, 0)
    return False


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
            that :meth:`stop` removes. A directory passed here is never removed;
            a relative one is taken against the current directory at
            construction (the server itself runs in its working directory).
        config: Extra configuration. A mapping is merged into the generated
            configuration (nested mappings are merged key by key, anything
            else replaces the generated value; sizes are plain ints in
            bytes). A string is appended verbatim to the configuration file;
            with JetStream on, it may not hold a ``jetstream`` block (it would
            replace the generated one, store directory included: ``ValueError``).
        debug: Run with ``debug`` and ``trace`` logging and keep the working
            directory (configuration file, log and temporary store) after
            :meth:`stop` for inspection, once a server was launched; see
            :attr:`log_path`.
        server_name: The ``server_name`` option (required in a cluster).
        http_port: Monitoring port; 0 picks a free one.
        start_timeout: Default bound, in seconds, for :meth:`start` and
            :meth:`wait_healthy`.
        binary: The ``nats-server`` executable; defaults to
            :func:`find_nats_server`. A relative path is taken against the
            current directory at construction; a bare name is looked up on
            ``PATH``.

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
        start_timeout: float = DEFAULT_START_TIMEOUT,
        binary: str | os.PathLike[str] | None = None,
    ) -> None:
        if jetstream and isinstance(config, str) and _has_jetstream_block(config):
            # nats-server takes the last block: the generated one (its store_dir, its
            # limits) would be dropped, and the store be nats-server's default,
            # /tmp/nats/jetstream, shared by every run (a "fresh" server saw old streams).
            raise ValueError(
                "a 'jetstream' block in a string config replaces the generated one (its "
                "store_dir): give JetStream settings as a mapping, merged into it, e.g. "
                "config={'jetstream': {'limits': {'batch': {'max_msgs': 2000}}}}"
            )
        self._jetstream = jetstream
        self._auto_ports = port == 0 and http_port == 0
        self._port = port or free_port()
        self._http_port = http_port or free_port()
        self._extra_config = config
        self._debug = debug
        self._server_name = server_name
        self._start_timeout = start_timeout
        # Relative paths given here are taken against the current directory now,
        # not when (or where) the server starts.
        if binary is not None and os.path.dirname(os.fspath(binary)):
            binary = _absolute(binary)
        self._binary = os.fspath(binary) if binary is not None else None
        self._workdir = Path(tempfile.mkdtemp(prefix="aiojetstream-nats-"))
        # The server runs in the caller's directory (as of now, as store_dir and
        # binary are resolved), so that relative paths in ``config`` (TLS files,
        # a pid file) name what the caller means, not something in the workdir.
        try:
            self._cwd: str | None = os.getcwd()
        except OSError:  # the current directory was removed
            self._cwd = None
        self._owns_store = store_dir is None
        self._store_dir = (
            Path(_absolute(store_dir)) if store_dir is not None else self._workdir / "store"
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._frozen = False
        self._terminating = False
        self._started_once = False
        # Whether the directories may hold state to keep when a start fails: set
        # by a successful start, cleared when stop() removes them.
        self._has_state = False
        self._launched = False  # a process was ever started (debug keeps the workdir then)
        self._log_offset = 0
        self._log_scanned = 0  # how far the log of this start was searched for _READY_MARK
        self._ready_logged = False
        self._owner_pid = os.getpid()
        register(self)  # owns a temporary directory from now on

    # -- properties ---------------------------------------------------------

    @property
    def url(self) -> str:
        """The client URL, ``nats://127.0.0.1:PORT``."""
        return f"nats://{HOST}:{self._port}"

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
        return f"http://{HOST}:{self._http_port}"

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
            "listen": f"{HOST}:{self._port}",
            "http": f"{HOST}:{self._http_port}",
            "max_payload": DEFAULT_MAX_PAYLOAD,
        }
        if self._server_name is not None:
            base["server_name"] = self._server_name
        if self._jetstream:
            base["jetstream"] = {
                "store_dir": str(self._store_dir),
                "max_mem_store": MAX_MEM_STORE,
                "max_file_store": MAX_FILE_STORE,
            }
        if self._debug:
            base["debug"] = True
            base["trace"] = True
        extra = self._extra_config
        if isinstance(extra, Mapping):
            return render_block(deep_merge(base, extra))
        text = render_block(base)
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
            if self._owns_store:
                self._keep_account_dir()
        self.config_path.write_text(self.config_text(), encoding="utf-8")
        with self.log_path.open("ab") as log:
            self._log_offset = self._log_scanned = log.tell()
            self._ready_logged = False
            proc = subprocess.Popen(
                [binary, "-c", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._cwd if self._cwd and os.path.isdir(self._cwd) else self._workdir,
            )
        self._proc = proc
        self._launched = True
        self._frozen = False
        self._terminating = False
        self._owner_pid = os.getpid()
        register(self)
        return proc

    def _logs_to_stdout(self) -> bool:
        """Whether the server's log comes to :attr:`log_path` (no ``logfile`` or syslog)."""
        extra = self._extra_config
        if isinstance(extra, Mapping):
            return not any(str(key).lower() in _LOG_ELSEWHERE for key in extra)
        return not (extra and _LOG_ELSEWHERE_TEXT.search(extra))

    def _log_shows_ready(self) -> bool:
        """Whether the process of this start logged that it is ready.

        The readiness probes only show that *a* server answers on the ports: a
        server of someone else's that holds both would answer them while ours
        is exiting with "address already in use". nats-server logs
        ``Server is ready`` after it listens on its monitoring and client ports,
        so that line in the log of this start ties the ports to our process.
        When the configuration sends the log elsewhere this cannot be told, and
        the probes are trusted.
        """
        if self._ready_logged or not self._logs_to_stdout():
            return True
        start = max(self._log_offset, self._log_scanned - len(_READY_MARK))
        try:
            with self.log_path.open("rb") as log:
                log.seek(start)
                data = log.read()
        except FileNotFoundError:
            return False
        self._log_scanned = start + len(data)
        self._ready_logged = _READY_MARK in data
        return self._ready_logged

    def _keep_account_dir(self) -> None:
        """Put a file in the default account's store directory so that it is never removed.

        After every stream delete, nats-server (2.15.1 and main as of 2026-08)
        removes the account's ``streams`` directory and then the account's
        directory in a goroutine of its own (``os.Remove``: a no-op unless empty;
        ``stream.stop`` in ``server/stream.go``). When the deleted stream was
        the account's last one and a file stream is created meanwhile, that
        goroutine can remove the directories between the ``mkdir`` calls of the
        new stream's store: the create fails with ``500 10049 "error creating
        store for stream"``, the log says ``could not create storage directory
        - mkdir .../jetstream/$G/streams: no such file or directory``. Tests
        empty the account before each test and create a stream right after
        (the ``js`` fixture), so they hit it now and then on a loaded machine.
        With this file the account directory (``$G``: the account of clients
        that give no credentials) stays, so an empty ``streams`` directory is
        all the goroutine can remove: a much narrower window. Nothing is put
        in ``streams`` itself, where ``/healthz`` would report it as a stream
        that could not be recovered. Only for a temporary store this object
        owns; a store directory passed by the caller is left as it is.
        """
        account_dir = self._store_dir / "jetstream" / "$G"
        account_dir.mkdir(parents=True, exist_ok=True)
        keep = account_dir / _KEEP_FILE
        if not keep.exists():
            keep.write_text(_KEEP_TEXT, encoding="utf-8")

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
        self._port = free_port()
        self._http_port = free_port()

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
        if self._debug and self._launched:
            return  # kept for inspection
        shutil.rmtree(self._workdir, ignore_errors=True)
        if not self._owns_store:
            return
        shutil.rmtree(self._store_dir, ignore_errors=True)

    def _after_exit(self) -> None:
        self._proc = None
        self._frozen = False
        self._terminating = False

    def _reap_now(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL ``proc`` and reap it, blocking (a cancelled wait must leave no zombie)."""
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        if proc.poll() is not None and self._proc is proc:
            self._after_exit()

    def _discard(self) -> None:
        """Remove the directories and forget the server (stopped, or never started)."""
        if self._proc is not None:
            return  # still running (a reap that did not finish): the exit handler cleans up
        self._cleanup_dirs()
        self._has_state = False
        unregister(self)

    def _refuse_if_running(self) -> None:
        if self.running:
            raise RuntimeError(f"{self!r} is already running")

    @staticmethod
    def _probe_limit(remaining: float, cap: float) -> float:
        """A probe's time limit: ``cap``, clipped to what is left of the caller's bound."""
        return max(POLL_INTERVAL, min(cap, remaining))

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
        self._refuse_if_running()
        try:
            for attempt in range(PORT_RETRIES):
                proc = self._launch()
                try:
                    self.wait_healthy_sync(timeout)
                except RuntimeError:
                    self._reap_now(proc)  # it exited already (or a stranger answered)
                    if attempt + 1 < PORT_RETRIES and self._may_retry_ports():
                        self._repick_ports()
                        continue
                    raise
                except BaseException:
                    self._kill_sync()
                    raise
                self._started_once = self._has_state = True
                return
        except BaseException:
            if not self._has_state:
                self._discard()  # a failed first start leaves no directories behind
            raise

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
            if self._probe_sync(deadline) and self._log_shows_ready():
                if proc.poll() is not None:  # the answer came from another server
                    raise self._exit_error(proc)
                return
            if time.monotonic() >= deadline:
                raise self._timeout_error(timeout)
            time.sleep(POLL_INTERVAL)

    def _probe_sync(self, deadline: float) -> bool:
        if not tcp_accepts_sync(self._port, self._probe_limit(deadline - time.monotonic(), 1.0)):
            return False
        try:
            limit = self._probe_limit(deadline - time.monotonic(), 2.0)
            status, _ = http_get_sync(self._http_port, HEALTHZ, limit)
        except OSError:
            return False
        return status == 200

    def stop_sync(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
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
            except BaseException:  # KeyboardInterrupt: do not leave the process behind
                self._reap_now(proc)
                self._discard()
                raise
            self._after_exit()
        self._discard()

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
        self._refuse_if_running()
        try:
            for attempt in range(PORT_RETRIES):
                self._launch()
                try:
                    await self.wait_healthy(timeout)
                except RuntimeError:
                    await self._kill_async()  # it exited already (or a stranger answered)
                    if attempt + 1 < PORT_RETRIES and self._may_retry_ports():
                        self._repick_ports()
                        continue
                    raise
                except BaseException:
                    await self._kill_async()
                    raise
                self._started_once = self._has_state = True
                return
        except BaseException:
            if not self._has_state:
                self._discard()  # a failed or cancelled first start leaves no directories
            raise

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
            if await self._probe_async(deadline) and self._log_shows_ready():
                if proc.poll() is not None:  # the answer came from another server
                    raise self._exit_error(proc)
                return
            if loop.time() >= deadline:
                raise self._timeout_error(timeout)
            await asyncio.sleep(POLL_INTERVAL)

    async def _probe_async(self, deadline: float) -> bool:
        loop = asyncio.get_running_loop()
        limit = self._probe_limit(deadline - loop.time(), 1.0)
        if not await tcp_accepts_async(self._port, limit):
            return False
        try:
            limit = self._probe_limit(deadline - loop.time(), 2.0)
            status, _ = await http_get_async(self._http_port, HEALTHZ, limit)
        except (OSError, TimeoutError):
            return False
        return status == 200

    async def _terminate_async(self, grace: float) -> None:
        proc = self._proc
        if proc is None:
            return
        self._begin_terminate(proc)
        try:
            if not await wait_process_exit(proc, grace):
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await wait_process_exit(proc, None)
        except BaseException:  # cancelled: finish the stop here, leaving no zombie
            self._reap_now(proc)
            raise
        self._after_exit()

    async def _kill_async(self) -> None:
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        try:
            await wait_process_exit(proc, None)
        except BaseException:  # cancelled: reap it here, leaving no zombie
            self._reap_now(proc)
            raise
        self._after_exit()

    async def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and clean up.

        A frozen server is thawed so that it can act on SIGTERM. Removes the
        temporary store and working directory (unless ``debug``); a later
        :meth:`start` begins with an empty store. Idempotent.

        Cancelled while waiting, it kills the process (SIGKILL), reaps it and
        cleans up before the cancellation propagates.

        Args:
            timeout: Seconds to wait for a graceful exit before SIGKILL.

        """
        try:
            await self._terminate_async(timeout)
        finally:
            self._discard()

    async def restart(
        self,
        *,
        timeout: float | None = None,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
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
        status, body = await http_get_async(self._http_port, path, 5.0)
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

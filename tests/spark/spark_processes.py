"""Spark in processes of their own: a standalone cluster, a driver script, ``spark-pipelines``.

The test session's SparkSession (``conftest.py``) is a ``local[2,4]`` one, and
one Python process holds one SparkContext, so the tests of other deployments
run their drivers as subprocesses. Everything started here runs in a process
group of its own, and the whole group is killed at the end (a Worker's
executors and their Python workers included).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_VERSION = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
DRIVERS = Path(__file__).resolve().parent / "drivers"
#: Seconds a daemon may take to say it is up (about 4 s each when idle).
DAEMON_START_TIMEOUT = 120.0


def spark_env(**extra: str) -> dict[str, str]:
    """The environment of every Spark process a test starts.

    ``PYSPARK_PYTHON`` matters in the driver's own environment too: the data
    source's instances are made by a Python worker of the driver, which would
    otherwise run the first ``python3`` on PATH (without aiojetstream).
    """
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    env.update(extra)
    return env


#: The port of a local Spark Connect server (``remote("local[...]")``, ``spark-pipelines``):
#: pyspark fixes it outside its own test mode, so such servers run one at a time.
CONNECT_PORT = 15002


def assert_connect_port_free() -> None:
    """Fail clearly, rather than with a bind error deep in a log, when port 15002 is taken."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", CONNECT_PORT))
        except OSError as exc:
            raise AssertionError(
                f"port {CONNECT_PORT} is taken (another Spark Connect server?): {exc}"
            ) from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Daemon:
    """A process in a group of its own whose output goes to ``log`` and is watched for lines."""

    name: str
    log: Path
    proc: subprocess.Popen[str]
    _lines: list[str] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _ended: bool = False

    @classmethod
    def start(cls, name: str, argv: Sequence[str], log: Path, env: dict[str, str]) -> Daemon:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=log.parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a process group (and session) of its own
        )
        daemon = cls(name, log, proc)
        assert proc.stdout is not None
        threading.Thread(target=daemon._pump, args=(proc.stdout,), daemon=True).start()
        return daemon

    def _pump(self, stream: IO[str]) -> None:
        with self.log.open("w", encoding="utf-8") as out:
            for line in stream:
                out.write(line)
                out.flush()
                with self._changed:
                    self._lines.append(line)
                    self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float = DAEMON_START_TIMEOUT) -> re.Match[str]:
        """The first output line matching ``pattern``, waiting for it at most ``timeout`` s."""
        regex = re.compile(pattern)
        seen = 0
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self._lines[seen:]:
                    found = regex.search(line)
                    if found is not None:
                        return found
                seen = len(self._lines)
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    tail = "".join(self._lines[-40:])
                    why = "ended" if self._ended else f"no such line within {timeout:g}s"
                    raise AssertionError(f"{self.name}: {why} ({pattern!r}); output:\n{tail}")
                self._changed.wait(left)

    def kill(self) -> None:
        """Kill the process group (SIGTERM, SIGKILL after 20 s) and reap the leader."""
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        # The leader is gone; executors or Python workers of the group may linger a moment.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


@dataclass
class Cluster:
    """A running standalone cluster: its master URL and the workers' directories."""

    master_url: str
    work_dirs: list[Path]


@contextlib.contextmanager
def standalone_cluster(root: Path, workers: int = 2) -> Iterator[Cluster]:
    """A Spark standalone master and ``workers`` one-core workers on 127.0.0.1.

    Started from pyspark's own ``bin/spark-class``; each daemon logs to a file
    in ``root`` and runs in its own process group, killed at the end. The
    workers keep their executors' directories (the executors' working
    directories) in ``root/worker-N``. No web UI port or REST port is fixed,
    so clusters of parallel test runs do not collide.
    """
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    env = spark_env(
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
    )
    daemons: list[Daemon] = []
    try:
        argv = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--webui-port", "0"]
        master = Daemon.start("master", argv, root / "master.log", env)
        daemons.append(master)
        master.wait_for(r"New state: ALIVE")
        work_dirs = []
        for n in range(1, workers + 1):
            work_dir = root / f"worker-{n}"
            work_dir.mkdir()
            work_dirs.append(work_dir)
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker"]
            argv += ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g"]
            argv += ["--webui-port", "0", "--work-dir", str(work_dir), url]
            daemons.append(Daemon.start(f"worker-{n}", argv, root / f"worker-{n}.log", env))
        for worker in daemons[1:]:
            worker.wait_for(r"Successfully registered with master")
        yield Cluster(url, work_dirs)
    finally:
        for daemon in reversed(daemons):
            daemon.kill()


def run_process(
    argv: Sequence[str], log: Path, env: dict[str, str], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a process group of its own, its output (both streams) into ``log``.

    Fails with the output's tail when it exits non-zero or outlives
    ``timeout`` (then its whole group is killed).
    """
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            # Whatever it left behind (a local Connect server, Python workers).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = log.read_text(encoding="utf-8", errors="replace")
    if code != 0:
        what = f"timed out after {timeout:g}s" if code is None else f"exit {code}"
        raise AssertionError(f"{' '.join(argv[:3])} ...: {what}; output:\n{output[-8000:]}")
    return subprocess.CompletedProcess(list(argv), code, output, "")

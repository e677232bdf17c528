"""aiojetstream.testing against real nats-server processes (raw nats-py, no aiojetstream)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client

import aiojetstream.testing
from aiojetstream.testing import NatsCluster, NatsServer, find_nats_server
from helpers import interruptible, unique_name, wait_until

# Generous bounds: these tests must pass on a loaded 2-core machine.
REQUEST_TIMEOUT = 10.0
#: The source directory of the package these tests import (children import the same).
SRC_DIR = Path(aiojetstream.testing.__file__).resolve().parents[2]


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return True
    except OSError:
        return False


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(subject, payload, timeout=REQUEST_TIMEOUT)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


def stream_config(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "subjects": [f"{name.lower()}.>"],
        "storage": "file",
        "num_replicas": replicas,
    }


async def create_stream(nc: Client, name: str, replicas: int = 1) -> dict[str, Any]:
    reply = await api(nc, f"$JS.API.STREAM.CREATE.{name}", stream_config(name, replicas))
    assert "error" not in reply, reply
    return reply


async def publish_one(nc: Client, subject: str, data: bytes) -> dict[str, Any]:
    """Publish and take the acknowledgement.

    A stream just created with replicas: its leader's interest in the subjects may
    not have reached the client's node yet (a CI run got no responders): asked again
    (bounded), as JetStream clients retry a 503.
    """
    replies: list[Any] = []

    async def answered() -> bool:
        try:
            replies.append(await nc.request(subject, data, timeout=REQUEST_TIMEOUT))
        except nats.errors.NoRespondersError:
            return False
        return True

    await wait_until(answered, 10, interval=0.1)
    msg = replies[-1]
    ack: dict[str, Any] = json.loads(msg.data)
    assert "error" not in ack, ack
    return ack


@pytest.fixture
async def server() -> AsyncIterator[NatsServer]:
    async with NatsServer() as srv:
        yield srv


@pytest.fixture
async def client(server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(server.url, allow_reconnect=False)
    yield nc
    await nc.close()


# --------------------------------------------------------------------------- NatsServer


async def test_start_and_stop_leave_nothing_behind() -> None:
    srv = NatsServer()
    await srv.start()
    pid = srv.pid
    assert pid is not None
    assert srv.running
    assert srv.url == f"nats://127.0.0.1:{srv.port}"
    store = srv.store_dir
    assert store.is_dir()

    nc = await nats.connect(srv.url)
    try:
        info = await api(nc, "$JS.API.INFO")
        assert "error" not in info, info
    finally:
        await nc.close()

    await srv.stop()
    assert srv.pid is None
    assert srv.process is None
    assert not srv.running
    assert pid_gone(pid)
    assert not store.exists(), "the temporary store is removed on stop"
    assert not accepts_connections(srv.port)
    await srv.stop()  # idempotent


async def test_restart_keeps_port_and_store(server: NatsServer) -> None:
    port, store, first_pid = server.port, server.store_dir, server.pid
    nc = await nats.connect(server.url, allow_reconnect=False)
    try:
        await create_stream(nc, "KEEP")
        ack = await publish_one(nc, "keep.one", b"persisted")
        assert ack["seq"] == 1
    finally:
        await nc.close()

    await server.restart()

    assert server.port == port
    assert server.store_dir == store
    assert server.pid is not None
    assert server.pid != first_pid
    assert first_pid is not None
    assert pid_gone(first_pid)
    nc = await nats.connect(server.url, allow_reconnect=False)
    try:
        info = await api(nc, "$JS.API.STREAM.INFO.KEEP")
        assert "error" not in info, info
        assert info["config"]["name"] == "KEEP"
        assert info["state"]["messages"] == 1
    finally:
        await nc.close()


async def test_client_reconnects_across_restart(server: NatsServer) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await nats.connect(
        server.url,
        reconnected_cb=on_reconnect,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.1,
    )
    try:
        await server.restart()
        async with asyncio.timeout(REQUEST_TIMEOUT):
            await reconnected.wait()
        info = await api(nc, "$JS.API.INFO")
        assert "error" not in info, info
    finally:
        await nc.close()


async def test_kill_keeps_store_and_start_recovers(server: NatsServer) -> None:
    nc = await nats.connect(server.url, allow_reconnect=False)
    try:
        await create_stream(nc, "CRASH")
        await publish_one(nc, "crash.a", b"1")
    finally:
        await nc.close()

    pid = server.pid
    assert pid is not None
    await server.kill()
    assert pid_gone(pid)
    assert not server.running
    assert server.store_dir.is_dir(), "kill keeps the store"
    await server.kill()  # no-op when not running

    await server.start()
    nc = await nats.connect(server.url, allow_reconnect=False)
    try:
        info = await api(nc, "$JS.API.STREAM.INFO.CRASH")
        assert "error" not in info, info
        assert info["state"]["messages"] == 1
    finally:
        await nc.close()


async def test_freeze_times_out_requests_and_thaw_recovers(
    server: NatsServer, client: Client
) -> None:
    await api(client, "$JS.API.INFO")
    server.freeze()
    assert server.frozen
    assert server.running
    with pytest.raises(nats.errors.TimeoutError):
        await client.request("$JS.API.INFO", b"", timeout=0.5)
    server.thaw()
    assert not server.frozen
    await server.wait_healthy()
    info = await api(client, "$JS.API.INFO")
    assert "error" not in info, info


async def test_stop_while_frozen_is_prompt() -> None:
    srv = NatsServer()
    await srv.start()
    pid = srv.pid
    assert pid is not None
    srv.freeze()
    async with asyncio.timeout(8.0):  # well below the SIGKILL fallback
        await srv.stop(timeout=30.0)
    assert pid_gone(pid)


async def test_freeze_requires_a_running_server() -> None:
    srv = NatsServer()
    try:
        with pytest.raises(RuntimeError, match="not running"):
            srv.freeze()
    finally:
        await srv.stop()


async def test_start_twice_is_an_error(server: NatsServer) -> None:
    with pytest.raises(RuntimeError, match="already running"):
        await server.start()


async def test_the_account_directory_outlives_the_last_stream(
    server: NatsServer, client: Client
) -> None:
    # After a stream delete nats-server 2.15 runs os.Remove(<account>/streams) and
    # os.Remove(<account>) in a goroutine (stream.stop in server/stream.go): an
    # emptied account's directories go, and a file stream created at that moment
    # fails with 10049 "error creating store for stream" (mkdir: no such file or
    # directory). Do what that goroutine does once the last stream's files are
    # gone; the account directory must stay.
    await create_stream(client, "LAST")
    reply = await api(client, "$JS.API.STREAM.DELETE.LAST")
    assert reply.get("success") is True, reply
    account = server.store_dir / "jetstream" / "$G"
    streams = account / "streams"

    def stream_files_gone() -> bool:
        return not streams.is_dir() or not any(streams.iterdir())

    await wait_until(stream_files_gone, message="the deleted stream's files are removed")
    for directory in (streams, account):
        with contextlib.suppress(OSError):  # not empty, or gone already
            directory.rmdir()
    assert account.is_dir()
    await create_stream(client, "NEXT")


async def test_user_store_dir_is_kept(tmp_path: Path) -> None:
    store = tmp_path / "store"
    async with NatsServer(store_dir=store) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            await create_stream(nc, "MINE")
        finally:
            await nc.close()
    assert store.is_dir()
    assert any(store.rglob("*")), "the user's store keeps its data"
    async with NatsServer(store_dir=store) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            info = await api(nc, "$JS.API.STREAM.INFO.MINE")
            assert "error" not in info, info
        finally:
            await nc.close()


async def test_startup_failure_reports_the_log() -> None:
    srv = NatsServer(config="this is { not a valid config")
    try:
        with pytest.raises(RuntimeError, match="exited with code") as excinfo:
            await srv.start()
        assert "log tail" in str(excinfo.value)
        assert srv.process is None
    finally:
        await srv.stop()


async def test_busy_explicit_port_fails_clearly() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        srv = NatsServer(port=port)
        try:
            with pytest.raises(RuntimeError, match=r"(?i)address already in use"):
                await srv.start()
        finally:
            await srv.stop()


async def test_busy_picked_port_is_replaced_on_first_start() -> None:
    srv = NatsServer()
    taken = srv.port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", taken))
        blocker.listen()
        try:
            await srv.start()
            assert srv.port != taken
            assert srv.running
        finally:
            await srv.stop()


@pytest.mark.cluster
async def test_cluster_replaces_a_busy_picked_port_on_first_start() -> None:
    """A node's client port taken between construction and start (by another
    process, say another pytest worker) failed the whole cluster; every node gets
    new ports then, as a single NatsServer does."""
    cluster = NatsCluster(3)
    taken = cluster.servers[1].port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", taken))
        blocker.listen()
        try:
            await cluster.start()
            assert taken not in [server.port for server in cluster.servers]
            assert (await cluster.meta_leader()).running
        finally:
            await cluster.stop()


@pytest.mark.cluster
def test_cluster_start_sync_replaces_a_busy_route_port() -> None:
    cluster = NatsCluster(3)
    taken = cluster._cluster_ports[0]
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", taken))
        blocker.listen()
        try:
            cluster.start_sync()
            assert taken not in cluster._cluster_ports
            assert all(server.running for server in cluster.servers)
        finally:
            cluster.stop_sync()


async def test_config_mapping_is_applied() -> None:
    async with NatsServer(
        config={"max_payload": 4096, "jetstream": {"max_mem_store": 1 << 20}}
    ) as srv:
        varz = await srv.monitor("varz")
        assert varz["max_payload"] == 4096
        jsz = await srv.monitor("/jsz")
        assert jsz["config"]["max_memory"] == 1 << 20


async def test_without_jetstream() -> None:
    async with NatsServer(jetstream=False) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request("$JS.API.INFO", b"", timeout=REQUEST_TIMEOUT)
        finally:
            await nc.close()


def test_sync_api_outside_an_event_loop() -> None:
    srv = NatsServer()
    srv.start_sync()
    pid = srv.pid
    assert pid is not None
    assert accepts_connections(srv.port)
    srv.stop_sync()
    assert pid_gone(pid)
    srv.stop_sync()  # idempotent
    with NatsServer() as srv2:
        assert srv2.running
    assert not srv2.running


async def test_relative_store_dir_and_binary_are_taken_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server runs in its temporary working directory: a relative ``store_dir``
    named a directory inside it (removed with it on stop: the data was lost), and a
    relative ``binary`` was not found."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nats-server").symlink_to(find_nats_server())
    monkeypatch.chdir(tmp_path)
    here = Path(os.getcwd())  # tmp_path may be reached through a symbolic link
    name = unique_name("REL")
    async with NatsServer(store_dir="js-data", binary="bin/nats-server") as srv:
        assert srv.store_dir == here / "js-data"
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            await create_stream(nc, name)
            await publish_one(nc, f"{name.lower()}.a", b"kept")
        finally:
            await nc.close()
    assert any((tmp_path / "js-data").rglob(name)), "the stream is stored in ./js-data"
    async with NatsServer(store_dir="js-data", binary="bin/nats-server") as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            info = await api(nc, f"$JS.API.STREAM.INFO.{name}")
            assert "error" not in info, info
            assert info["state"]["messages"] == 1
        finally:
            await nc.close()


async def test_relative_paths_in_config_are_taken_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server ran in its temporary working directory, so a relative path in
    ``config`` (a TLS file, a pid file) named something inside it: TLS files were
    not found, a pid file went away with the directory."""
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    srv = NatsServer(config={"pid_file": "run/server.pid"})
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(elsewhere)  # the directory of construction counts, as for store_dir
    async with srv:
        pid = (tmp_path / "run" / "server.pid").read_text().strip()
        assert srv._proc is not None
        assert pid == str(srv._proc.pid)
    assert not (elsewhere / "run").exists()


async def test_ports_held_by_another_server_fail_the_start() -> None:
    """The probes were answered by the other server while ours was exiting with
    "address already in use": start() returned, clients talked to the stranger."""
    async with NatsServer() as first:
        second = NatsServer(port=first.port, http_port=first.http_port)
        try:
            with pytest.raises(RuntimeError, match=r"(?i)address already in use"):
                await second.start()
            assert not second.running
        finally:
            await second.stop()
        assert first.running


async def test_a_server_logging_to_a_file_still_starts(tmp_path: Path) -> None:
    # Its log does not come to log_path: readiness cannot be read there.
    log = tmp_path / "own.log"
    async with NatsServer(config={"logfile": str(log)}) as srv:
        assert accepts_connections(srv.port)
    assert "Server is ready" in log.read_text()


async def test_wait_healthy_keeps_to_its_timeout_on_a_frozen_server(server: NatsServer) -> None:
    """Each probe had its own limit (1 s connect, 2 s HTTP): 0.3 s took 2 s."""
    server.freeze()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError, match="not healthy"):
        await server.wait_healthy(timeout=0.3)
    assert loop.time() - started < 1.5
    started = loop.time()
    with pytest.raises(TimeoutError, match="not healthy"):
        server.wait_healthy_sync(timeout=0.3)
    assert loop.time() - started < 1.5
    server.thaw()


async def test_a_failed_first_start_leaves_no_directories() -> None:
    srv = NatsServer(config="this is { not a valid config")
    workdir = srv.config_path.parent
    with pytest.raises(RuntimeError, match="exited with code"):
        await srv.start()
    assert not workdir.exists(), "removed at once, not at interpreter exit"
    await srv.stop()


async def test_a_cancelled_start_leaves_no_process_and_no_directories() -> None:
    srv = NatsServer()
    workdir = srv.config_path.parent
    task = asyncio.create_task(srv.start())
    # The task launches the process, then waits for it to be ready.
    await wait_until(lambda: srv.pid is not None, timeout=10)
    pid = srv.pid
    assert pid is not None
    assert not task.done()  # (readiness takes probes: it is still waiting)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    try:
        assert pid_gone(pid)
        assert not workdir.exists()
    finally:
        await srv.stop()


async def test_a_cancelled_stop_reaps_the_process_and_cleans_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SIGTERMed process was left unreaped (a zombie) with its directories."""
    from aiojetstream.testing import _server

    srv = NatsServer()
    await srv.start()
    pid = srv.pid
    assert pid is not None
    workdir = srv.config_path.parent
    waiting = asyncio.Event()

    async def slow_exit(proc: Any, limit: float | None) -> bool:
        # An exit that takes long (the SIGTERMed process may exit before a cancel
        # reaches a real wait): the stop is surely waiting when it is cancelled.
        waiting.set()
        await asyncio.get_running_loop().create_future()  # until cancelled
        return True

    monkeypatch.setattr(_server, "wait_process_exit", slow_exit)
    task = asyncio.create_task(srv.stop())
    await asyncio.wait_for(waiting.wait(), 10)  # SIGTERM sent, waiting for the exit
    task.cancel()
    try:
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pid_gone(pid), "reaped, not a zombie"
        assert not srv.running
        assert not workdir.exists()
    finally:
        await srv.stop()


async def test_debug_keeps_the_working_directory_only_of_a_started_server() -> None:
    never = NatsServer(debug=True)
    await never.stop()
    assert not never.config_path.parent.exists()
    started = NatsServer(debug=True)
    try:
        await started.start()
        await started.stop()
        assert started.log_path.is_file(), "kept for inspection"
    finally:
        shutil.rmtree(started.config_path.parent, ignore_errors=True)


# --------------------------------------------------------------------------- NatsCluster


@pytest.mark.cluster
async def test_cluster_elects_a_meta_leader_and_takes_r3_streams() -> None:
    cluster = NatsCluster(3)
    await cluster.start()
    pids = [server.pid for server in cluster.servers]
    try:
        assert [server.server_name for server in cluster.servers] == ["n1", "n2", "n3"]
        assert len(set(cluster.urls)) == 3
        assert cluster.url == ",".join(cluster.urls)
        leader = await cluster.meta_leader()
        assert leader in cluster.servers

        nc = await nats.connect(servers=cluster.urls, allow_reconnect=False)
        try:
            created = await create_stream(nc, "REPL", replicas=3)
            assert created["config"]["num_replicas"] == 3
            assert len(created["cluster"]["replicas"]) == 2

            async def stored() -> bool:
                try:
                    ack = await publish_one(nc, "repl.x", b"x")
                except nats.errors.NoRespondersError:
                    return False  # the stream's interest has not crossed the route yet
                assert ack["stream"] == "REPL"
                return True

            await wait_until(stored, 15, message="repl.x never reached the stream")
        finally:
            await nc.close()
        # With the leader down the others elect a new one, and meta_leader() finds
        # it (it asked every node, the dead one too, and timed out).
        await leader.kill()
        new_leader = await cluster.meta_leader(timeout=20)
        assert new_leader is not leader
        assert new_leader.running
        await leader.start()
        await cluster.wait_ready(timeout=20)
        assert (await cluster.meta_leader()).running
    finally:
        await cluster.stop()
    for pid in pids:
        assert pid is not None
        assert pid_gone(pid)
    assert all(server.pid is None for server in cluster.servers)


@pytest.mark.cluster
async def test_cluster_node_restart_rejoins() -> None:
    async with NatsCluster(3) as cluster:
        node = cluster.servers[1]
        port = node.port
        await node.restart()
        assert node.port == port
        await cluster.wait_ready()
        nc = await nats.connect(servers=cluster.urls, allow_reconnect=False)
        try:
            await create_stream(nc, "AFTER", replicas=3)
        finally:
            await nc.close()


@pytest.mark.cluster
async def test_cluster_start_while_a_node_runs_is_refused_and_stops_nothing() -> None:
    """The "already running" error of a node was taken for a busy port: start()
    stopped every node and removed every temporary store."""
    name = unique_name("KEEP")
    async with NatsCluster(3) as cluster:
        pids = [server.pid for server in cluster.servers]
        nc = await nats.connect(servers=cluster.urls, allow_reconnect=False)
        try:
            await create_stream(nc, name, replicas=3)
            await publish_one(nc, f"{name.lower()}.a", b"x")
        finally:
            await nc.close()
        with pytest.raises(RuntimeError, match="already running"):
            await cluster.start()
        with pytest.raises(RuntimeError, match="already running"):
            cluster.start_sync()
        assert [server.pid for server in cluster.servers] == pids
        await cluster.servers[0].kill()
        with pytest.raises(RuntimeError, match=r"already running \(nodes n2, n3\)"):
            await cluster.start()
        assert [server.pid for server in cluster.servers[1:]] == pids[1:]
        # Every store still holds the stream (killed node's included).
        assert all(any(server.store_dir.rglob(name)) for server in cluster.servers)


@pytest.mark.cluster
def test_cluster_sync_api(tmp_path: Path) -> None:
    with NatsCluster(3, store_root=tmp_path) as cluster:
        pids = [server.pid for server in cluster.servers]
        assert all(accepts_connections(server.port) for server in cluster.servers)
    assert all(pid is not None and pid_gone(pid) for pid in pids)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n1", "n2", "n3"]


# --------------------------------------------------------------------------- pytest plugin


def test_session_fixtures(nats_server: NatsServer, nats_url: str) -> None:
    assert nats_server.running
    assert nats_url == nats_server.url


def run_inner_pytest(tmp_path: Path, test_source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            import aiojetstream.testing

            def pytest_configure(config):
                if not config.pluginmanager.is_registered(aiojetstream.testing):
                    config.pluginmanager.register(aiojetstream.testing, "aiojetstream.testing")
            """
        )
    )
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(test_source))
    env = dict(os.environ)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # the inner run needs pytest-asyncio
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_DIR), env.get("PYTHONPATH")]))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_js_fixture_deletes_streams_between_tests(tmp_path: Path) -> None:
    result = run_inner_pytest(
        tmp_path,
        """
        import json

        async def names(js):
            msg = await js.nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=10)
            return json.loads(msg.data)["streams"] or []

        async def test_a_creates(js):
            config = {"name": "LEFTOVER", "subjects": ["leftover.>"]}
            body = json.dumps(config).encode()
            await js.nc.request("$JS.API.STREAM.CREATE.LEFTOVER", body, timeout=10)
            assert await names(js) == ["LEFTOVER"]

        async def test_b_starts_clean(js):
            assert await names(js) == []
        """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


# --------------------------------------------------------------------------- command line


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "aiojetstream.testing", *args]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NATS_URL", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_DIR), env.get("PYTHONPATH")]))
    return env


def test_cli_run_passes_nats_url_and_exit_code() -> None:
    child = textwrap.dedent(
        """
        import os, socket, sys
        url = os.environ["NATS_URL"]
        host, port = url.removeprefix("nats://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            assert sock.recv(4096).startswith(b"INFO ")
        print("child saw", url)
        sys.exit(3)
        """
    )
    result = subprocess.run(
        cli("run", "--", sys.executable, "-c", child),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    assert "child saw nats://127.0.0.1:" in result.stdout
    lines = [line for line in result.stderr.splitlines() if "nats://127.0.0.1:" in line]
    assert len(lines) == 1, result.stderr
    port = int(lines[0].rsplit(":", 1)[1])
    assert not accepts_connections(port), "the server is stopped after the command"


@pytest.mark.parametrize("python", ["python", "python3"])
def test_cli_run_python_is_this_interpreter(python: str, tmp_path: Path) -> None:
    """``run -- python app.py`` ran the first ``python`` on PATH: outside the activated
    virtual environment, one without aiojetstream."""
    other = tmp_path / "bin"
    other.mkdir()
    for name in ("python", "python3"):
        fake = other / name
        fake.write_text("#!/bin/sh\necho another python\nexit 9\n")
        fake.chmod(0o755)
    env = cli_env()
    env["PATH"] = os.pathsep.join([str(other), env.get("PATH", "")])
    code = "import os, sys, aiojetstream; print(sys.executable, os.environ['NATS_URL'])"
    result = subprocess.run(
        cli("run", "--", python, "-c", code), env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    executable, url = result.stdout.split()
    assert executable == sys.executable
    assert url.startswith("nats://127.0.0.1:")


def test_cli_run_without_command_is_a_usage_error() -> None:
    result = subprocess.run(cli("run"), env=cli_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2


def test_cli_serve_until_interrupted() -> None:
    proc = subprocess.Popen(
        cli("serve"),
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the server is ready once this is printed
        assert "nats://127.0.0.1:" in line, line
        port = int(line.strip().rsplit(":", 1)[1])
        assert accepts_connections(port)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert not accepts_connections(port)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def stoppable() -> None:
    """``preexec_fn``: SIGINT, SIGTERM and SIGHUP act in the child (see ``interruptible``)."""
    interruptible()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGHUP})


def child_pids(pid: int) -> list[int]:
    result = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(line) for line in result.stdout.split()]


def test_cli_serve_stops_its_server_on_sighup(tmp_path: Path) -> None:
    """A closed terminal (SIGHUP) ended the command and left nats-server running."""
    proc = subprocess.Popen(
        cli("serve", "--store-dir", "js-data"),
        env=cli_env(),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=stoppable,
    )
    servers: list[int] = []
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the server is ready once this is printed
        assert "nats://127.0.0.1:" in line, line
        port = int(line.strip().rsplit(":", 1)[1])
        servers = child_pids(proc.pid)
        assert servers
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=30) == 0
        assert all(pid_gone(pid) for pid in servers)
        assert not accepts_connections(port)
        # A relative --store-dir is in the current directory, and kept.
        assert (tmp_path / "js-data" / "jetstream").is_dir()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in servers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.stderr is not None:
            proc.stderr.close()


def test_cli_run_exit_codes_for_a_signal_and_an_unrunnable_command(tmp_path: Path) -> None:
    child = "import sys, time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen(
        cli("run", "--", sys.executable, "-c", child),
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=stoppable,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM  # was 130, as for Ctrl-C
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    not_executable = tmp_path / "script"
    not_executable.write_text("#!/bin/sh\nexit 0\n")
    result = subprocess.run(
        cli("run", "--", str(not_executable)),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 126, result.stderr  # found, not runnable (was 127)
    assert "cannot run" in result.stderr


def test_cli_serve_that_cannot_start_is_one_error_line() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        busy = subprocess.run(
            cli("serve", "--port", str(port)),
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert busy.returncode == 1
    assert busy.stderr.count("\n") == 1, busy.stderr
    assert busy.stderr.startswith(f"error: nats-server on port {port} exited with code")
    assert "address already in use" in busy.stderr
    missing = subprocess.run(
        cli("serve"),
        env=dict(cli_env(), NATS_SERVER_BIN="/nonexistent/nats-server"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1, missing.stderr
    assert missing.stderr.startswith("error: NATS_SERVER_BIN=")


async def test_a_started_cluster_has_every_route_up() -> None:
    """Ready (JetStream or not) means every node is routed to every other, the pooled
    connections of each pair formed from both ends: a core NATS cluster was ready once
    its nodes answered /healthz (1 start in 8 had a node missing routes), and a
    JetStream one once a meta leader was elected, which a partial mesh allows."""
    for jetstream in (False, True, False, False):
        async with NatsCluster(3, jetstream=jetstream) as cluster:
            routez = [await server.monitor("routez") for server in cluster.servers]
            assert NatsCluster._mesh_ready(routez), routez
            for doc in routez:
                assert len({route["remote_id"] for route in doc["routes"]}) == 2

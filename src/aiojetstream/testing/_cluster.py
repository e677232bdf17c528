"""An N-node JetStream cluster on loopback: :class:`NatsCluster`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from ._config import (
    DEFAULT_CLUSTER_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    HOST,
    POLL_INTERVAL,
    PORT_RETRIES,
    deep_merge,
    free_port,
    render_block,
)
from ._probes import http_get_async, http_get_sync
from ._server import NatsServer


class NatsCluster:
    """A JetStream cluster of ``size`` nats-server nodes on 127.0.0.1.

    Nodes are named ``n1`` .. ``nN``, each with free client, cluster and
    monitoring ports and its own store directory, and with routes to every
    other node. Fault injection goes through the nodes:
    ``await cluster.servers[0].kill()``, ``cluster.servers[1].freeze()``, ...

    Ready means every node is healthy, has its routes to every other node, and
    all nodes agree on an elected JetStream meta leader, so that R3 streams can
    be created at once through any node.

    Args:
        size: Number of nodes.
        jetstream: Enable JetStream on every node.
        store_root: Parent of the per-node store directories
            (``store_root/n1`` ...), kept after :meth:`stop`; None uses
            temporary directories removed by :meth:`stop`. A relative path
            is taken against the current directory at construction.
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
        start_timeout: float = DEFAULT_CLUSTER_START_TIMEOUT,
    ) -> None:
        if size < 1:
            raise ValueError(f"a cluster needs at least one node, got size={size}")
        if size == 1 and jetstream:
            # nats-server refuses it at start ("JetStream cluster requires configured routes").
            raise ValueError(
                "a JetStream cluster needs 2 nodes or more (3 for quorum); "
                "for one server, use NatsServer"
            )
        self._jetstream = jetstream
        self._name = name
        self._start_timeout = start_timeout
        self._config = config
        self._cluster_ports = [free_port() for _ in range(size)]
        self.servers: list[NatsServer] = []
        """The nodes, ``n1`` first."""
        for index in range(size):
            extra = self._node_config(index)
            node_name = f"n{index + 1}"
            store_dir = (
                Path(os.path.abspath(store_root)) / node_name if store_root is not None else None
            )
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
            f"nats-route://{HOST}:{other}"
            for other_index, other in enumerate(self._cluster_ports)
            if other_index != index
        ]
        listen = f"{HOST}:{self._cluster_ports[index]}"
        node_config: dict[str, Any] = {
            "cluster": {"name": self._name, "listen": listen, "routes": routes}
        }
        if isinstance(self._config, str):
            return render_block(node_config) + self._config
        return deep_merge(node_config, self._config or {})

    def _may_retry_ports(self) -> bool:
        """A first start failed because a picked port (client, HTTP, route) was taken."""
        return any(server._may_retry_ports() for server in self.servers)

    def _repick_ports(self) -> None:
        self._cluster_ports = [free_port() for _ in self.servers]
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

    @staticmethod
    def _mesh_ready(routez: Sequence[Any]) -> bool:
        """Whether every node has its routes to every other node (``/routez`` of each).

        A meta leader is elected over a partial mesh; a node without a route to a
        stream's leader then gets no answer to the stream's info and a 503 for its
        publishes (NATS does not forward between routes). Each pair must also see the
        same number of routes from both ends (the pooled connections formed).
        """
        counts: dict[tuple[str, str], int] = {}
        ids: list[str] = []
        for doc in routez:
            if not isinstance(doc, dict) or not doc.get("server_id"):
                return False
            own = str(doc["server_id"])
            ids.append(own)
            for route in doc.get("routes") or []:
                pair = (own, str(route.get("remote_id")))
                counts[pair] = counts.get(pair, 0) + 1
        return all(
            counts.get((a, b), 0) > 0 and counts.get((a, b)) == counts.get((b, a))
            for a in ids
            for b in ids
            if a != b
        )

    async def _probe_meta_async(self, deadline: float, live_only: bool = False) -> str | None:
        """The agreed leader of every node (``live_only``: of those running, not frozen).

        Each request is bounded by 2 s and by what is left until ``deadline``
        (the loop's clock).
        """
        loop = asyncio.get_running_loop()
        nodes = [s for s in self.servers if s.running and not s.frozen] if live_only else None
        reports: list[tuple[str, int, Any, int]] = []
        for server in self.servers if nodes is None else nodes:
            try:
                limit = NatsServer._probe_limit(deadline - loop.time(), 2.0)
                health, _ = await http_get_async(server.http_port, "/healthz", limit)
                limit = NatsServer._probe_limit(deadline - loop.time(), 2.0)
                status, body = await http_get_async(server.http_port, "/jsz", limit)
                jsz = json.loads(body) if status == 200 else None
            except (OSError, TimeoutError, ValueError):
                return None
            reports.append((str(server.server_name), health, jsz, len(self.servers)))
        live = None if nodes is None else [str(s.server_name) for s in nodes]
        leader = self._meta_ready(reports, live)
        if leader is None or nodes is not None:
            return leader
        return leader if await self._probe_mesh_async(deadline) else None

    async def _probe_mesh_async(self, deadline: float) -> bool:
        """Whether every node has its routes to every other (:meth:`_mesh_ready`)."""
        loop = asyncio.get_running_loop()
        routez: list[Any] = []
        for server in self.servers:
            try:
                limit = NatsServer._probe_limit(deadline - loop.time(), 2.0)
                status, body = await http_get_async(server.http_port, "/routez", limit)
                routez.append(json.loads(body) if status == 200 else None)
            except (OSError, TimeoutError, ValueError):
                return False
        return self._mesh_ready(routez)

    def _probe_meta_sync(self, deadline: float) -> str | None:
        reports: list[tuple[str, int, Any, int]] = []
        for server in self.servers:
            try:
                limit = NatsServer._probe_limit(deadline - time.monotonic(), 2.0)
                health, _ = http_get_sync(server.http_port, "/healthz", limit)
                limit = NatsServer._probe_limit(deadline - time.monotonic(), 2.0)
                status, body = http_get_sync(server.http_port, "/jsz", limit)
                jsz = json.loads(body) if status == 200 else None
            except (OSError, ValueError):
                return None
            reports.append((str(server.server_name), health, jsz, len(self.servers)))
        leader = self._meta_ready(reports)
        if leader is None:
            return None
        return leader if self._probe_mesh_sync(deadline) else None

    def _probe_mesh_sync(self, deadline: float) -> bool:
        routez: list[Any] = []
        for server in self.servers:
            try:
                limit = NatsServer._probe_limit(deadline - time.monotonic(), 2.0)
                status, body = http_get_sync(server.http_port, "/routez", limit)
                routez.append(json.loads(body) if status == 200 else None)
            except (OSError, ValueError):
                return False
        return self._mesh_ready(routez)

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
        what = "no agreed JetStream meta leader, or a node" if self._jetstream else "a node"
        return TimeoutError(
            f"cluster {self._name} has {what} without routes to every other, after "
            f"{timeout:.1f}s\n{tails}"
        )

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every node is healthy and routed to the others, with a meta leader.

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
        while True:
            self._check_nodes_running()
            if self._jetstream:
                if await self._probe_meta_async(deadline) is not None:
                    return
            elif await self._probe_mesh_async(deadline):
                return
            if loop.time() >= deadline:
                raise self._meta_timeout_error(timeout)
            await asyncio.sleep(POLL_INTERVAL)

    def wait_ready_sync(self, timeout: float | None = None) -> None:
        """Block until every node is healthy and routed to the others, with a meta leader.

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
        while True:
            self._check_nodes_running()
            if self._jetstream:
                if self._probe_meta_sync(deadline) is not None:
                    return
            elif self._probe_mesh_sync(deadline):
                return
            if time.monotonic() >= deadline:
                raise self._meta_timeout_error(timeout)
            time.sleep(POLL_INTERVAL)

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
        while (leader := await self._probe_meta_async(deadline, live_only=True)) is None:
            if loop.time() >= deadline:
                raise RuntimeError(
                    f"cluster {self._name} has no agreed meta leader after {timeout:g} s"
                )
            await asyncio.sleep(POLL_INTERVAL)
        return self.server(leader)

    # -- lifecycle ----------------------------------------------------------

    def _refuse_if_running(self) -> None:
        """Raise before anything is launched when a node runs (start() would stop it)."""
        running = [str(server.server_name) for server in self.servers if server.running]
        if running:
            raise RuntimeError(
                f"cluster {self._name} is already running (nodes {', '.join(running)}): "
                "stop it first, or start a stopped node with its own start()"
            )

    def _has_state(self) -> bool:
        """Whether a node's store may hold data (the cluster was started and not stopped)."""
        return any(server._has_state for server in self.servers)

    def _started(self) -> None:
        for server in self.servers:
            server._started_once = server._has_state = True

    async def _abandon(self, launched: Sequence[NatsServer], fresh: bool) -> None:
        """Stop the nodes this start launched; a first start also removes the directories."""
        if fresh:
            await self.stop()
            return
        for server in launched:  # signal all first: the nodes shut down in parallel
            if server._proc is not None:
                server._begin_terminate(server._proc)
        for server in launched:
            await server._terminate_async(DEFAULT_STOP_TIMEOUT)

    def _abandon_sync(self, launched: Sequence[NatsServer], fresh: bool) -> None:
        if fresh:
            self.stop_sync()
            return
        for server in launched:
            if server._proc is not None:
                server._begin_terminate(server._proc)
        for server in launched:
            proc = server._proc
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(DEFAULT_STOP_TIMEOUT)
                server._reap_now(proc)  # SIGKILL if it is still there

    async def start(self, timeout: float | None = None) -> None:
        """Start every node and wait until the cluster is ready.

        Also starts a cluster whose nodes were all killed or stopped (their
        stores are kept). Refused while any node runs: start a stopped node
        with its own :meth:`NatsServer.start`.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: A node is running already (nothing is started or
                stopped), or a node exited during startup.
            TimeoutError: Not ready in time (the nodes started are then stopped).

        """
        self._refuse_if_running()
        fresh = not self._has_state()
        for attempt in range(PORT_RETRIES):
            launched: list[NatsServer] = []
            try:
                for server in self.servers:
                    server._launch()
                    launched.append(server)
                await self.wait_ready(timeout)
            except RuntimeError:
                # A port picked at construction was taken meanwhile (by another
                # process): every node gets new ports, routes included.
                retry = attempt + 1 < PORT_RETRIES and self._may_retry_ports()
                await self._abandon(launched, fresh)
                if retry:
                    self._repick_ports()
                    continue
                raise
            except BaseException:
                await self._abandon(launched, fresh)
                raise
            break
        self._started()

    async def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
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

        Refused while any node runs, as :meth:`start`.

        Args:
            timeout: Bound in seconds; defaults to ``start_timeout``.

        Raises:
            RuntimeError: A node is running already (nothing is started or
                stopped), or a node exited during startup.
            TimeoutError: Not ready in time (the nodes started are then stopped).

        """
        self._refuse_if_running()
        fresh = not self._has_state()
        for attempt in range(PORT_RETRIES):
            launched: list[NatsServer] = []
            try:
                for server in self.servers:
                    server._launch()
                    launched.append(server)
                self.wait_ready_sync(timeout)
            except RuntimeError:
                retry = attempt + 1 < PORT_RETRIES and self._may_retry_ports()
                self._abandon_sync(launched, fresh)
                if retry:
                    self._repick_ports()  # as in start()
                    continue
                raise
            except BaseException:
                self._abandon_sync(launched, fresh)
                raise
            break
        self._started()

    def stop_sync(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
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

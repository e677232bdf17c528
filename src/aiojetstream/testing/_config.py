"""Defaults, free ports and the rendering of ``nats-server`` configuration files."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections.abc import Mapping
from typing import Any

HOST = "127.0.0.1"
POLL_INTERVAL = 0.025
DEFAULT_START_TIMEOUT = 10.0
DEFAULT_CLUSTER_START_TIMEOUT = 30.0
DEFAULT_STOP_TIMEOUT = 10.0
MAX_MEM_STORE = 1 << 30  # 1 GiB
MAX_FILE_STORE = 10 << 30  # 10 GiB
DEFAULT_MAX_PAYLOAD = 1 << 20  # the server's default, 1 MiB
HEALTHZ = "/healthz?js-enabled-only=true"
PORT_RETRIES = 3


# ---------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------

_port_lock = threading.Lock()
_handed_out_ports: set[int] = set()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free now and not handed out before."""
    with _port_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((HOST, 0))
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
        return "{\n" + render_block(value, indent + 1) + pad + "}"
    if isinstance(value, list | tuple):
        if any(isinstance(item, Mapping) for item in value):
            pad = "  " * (indent + 1)
            items = "".join(f"{pad}{_render_value(item, indent + 1)}\n" for item in value)
            return "[\n" + items + "  " * indent + "]"
        return "[" + ", ".join(_render_value(item, indent) for item in value) + "]"
    raise TypeError(f"cannot render {type(value).__name__} in a nats-server config: {value!r}")


def render_block(config: Mapping[str, Any], indent: int = 0) -> str:
    """Render ``config`` as nats-server configuration text (``None`` values are left out)."""
    pad = "  " * indent
    return "".join(
        f"{pad}{_render_key(str(key))}: {_render_value(value, indent)}\n"
        for key, value in config.items()
        if value is not None
    )


def deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``extra`` into a copy of ``base``; nested mappings are merged key by key."""
    merged = dict(base)
    for key, value in extra.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged

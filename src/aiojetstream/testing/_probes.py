"""Readiness probes: the monitoring HTTP endpoint and the client port, sync and async."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from ._config import HOST


def _http_request(port: int, path: str) -> bytes:
    return (f"GET {path} HTTP/1.0\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n").encode()


def parse_http_response(raw: bytes) -> tuple[int, bytes]:
    """Return the status code and body of a raw HTTP/1.0 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise OSError(f"malformed HTTP response: {raw[:80]!r}")
    return int(status_line[1]), body


def http_get_sync(port: int, path: str, timeout: float) -> tuple[int, bytes]:
    """GET ``path`` from the monitoring port on 127.0.0.1, blocking."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(_http_request(port, path))
        chunks: list[bytes] = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return parse_http_response(b"".join(chunks))


async def http_get_async(port: int, path: str, limit: float) -> tuple[int, bytes]:
    """GET ``path`` from the monitoring port on 127.0.0.1, bounded by ``limit`` seconds."""
    async with asyncio.timeout(limit):
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            writer.write(_http_request(port, path))
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    return parse_http_response(raw)


def tcp_accepts_sync(port: int, timeout: float) -> bool:
    """Whether the client port accepts a TCP connection, blocking."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


async def tcp_accepts_async(port: int, limit: float) -> bool:
    """Whether the client port accepts a TCP connection within ``limit`` seconds."""
    try:
        async with asyncio.timeout(limit):
            _, writer = await asyncio.open_connection(HOST, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True

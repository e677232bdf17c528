"""The TLS guard: a ``tls://`` URL never connects to a server that does not offer TLS."""

from __future__ import annotations

from typing import Any

from .._redact import redact_url
from ._nats import NatsClient, Srv, guard_process_info, nats_errors

__all__ = ["guard_tls"]


def guard_tls(nc: NatsClient, reasons: list[str]) -> None:
    """Refuse, before CONNECT is sent, a ``tls://`` server that does not require TLS.

    nats-py upgrades to TLS only when the server's INFO says ``tls_required``; a
    ``tls://`` URL pointing at a plaintext server would otherwise carry the
    credentials in the clear. The refusal is appended to ``reasons``.
    """

    def check(server: Srv | None, info: dict[str, Any], initial_connection: bool) -> None:
        if (
            initial_connection
            and server is not None
            and server.uri.scheme == "tls"
            and not info.get("tls_required")
        ):
            where = redact_url(server.uri.geturl())  # never the credentials
            reason = f"{where} does not offer TLS but was given as a tls:// URL"
            reasons.append(reason)
            raise nats_errors.SecureConnRequiredError(reason)

    guard_process_info(nc, check)

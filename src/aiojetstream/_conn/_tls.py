"""The TLS guard: a connection that wants TLS never goes on without it."""

from __future__ import annotations

from typing import Any

from .._redact import redact_url
from ._nats import NatsClient, Srv, guard_process_info, nats_errors

__all__ = ["TLS_OPTIONS", "guard_tls", "tls_option_given"]

#: The connect options that ask for TLS (nats-py's): any of them given means
#: every server must be reached over TLS, whatever the scheme of its URL.
TLS_OPTIONS = ("tls", "tls_hostname", "tls_handshake_first")


def tls_option_given(options: dict[str, Any]) -> bool:
    """Whether one of :data:`TLS_OPTIONS` is given (not None, False or empty)."""
    return any(options.get(name) for name in TLS_OPTIONS)


class _Refused(nats_errors.SecureConnRequiredError):
    """nats-py's refusal (what its reconnect loop catches), saying which server and why."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


def guard_tls(nc: NatsClient, reasons: list[str], *, every_server: bool) -> None:
    """Upgrade to TLS, or refuse before CONNECT is sent, a server that must be TLS.

    A server must be TLS when its URL is ``tls://``, or, with ``every_server``
    (a TLS option was given), whatever its URL: ``nats://``, a server
    discovered later, and on every reconnect. nats-py upgrades only when the
    server's INFO says ``tls_required``; a server that merely offers TLS
    (``tls_available``, the ``allow_non_tls`` mode) is upgraded by setting
    ``tls_required`` in that INFO, which nats-py reads next to decide. A
    server that offers no TLS (or a ``ws://`` one, which nats-py never
    upgrades) would otherwise get the credentials in the clear: it is
    refused, its reason left in ``reasons`` (the last refusal only).
    """

    def check(server: Srv | None, info: dict[str, Any], initial_connection: bool) -> None:
        if not initial_connection or server is None:
            return  # only the INFO that opens a connection (first or reconnect) decides
        scheme = server.uri.scheme
        if scheme == "wss" or (scheme != "tls" and not every_server):
            return
        if scheme != "ws":
            if nc.options.get("tls_handshake_first") or info.get("tls_required"):
                return  # (handshake first: this INFO came over TLS already)
            if info.get("tls_available"):
                info["tls_required"] = True  # the same dict nats-py decides the upgrade on
                return
        where = redact_url(server.uri.geturl())  # never the credentials
        if scheme == "ws":
            reason = f"{where} is a plaintext websocket (ws://) but TLS was asked for: use wss://"
        elif scheme == "tls":
            reason = f"{where} does not offer TLS but was given as a tls:// URL"
        else:
            reason = f"{where} does not offer TLS but a TLS option was given"
        reasons[:] = [reason]
        raise _Refused(reason)

    guard_process_info(nc, check)

"""nats-py's exceptions in the aiojetstream tree: :func:`translate`, :func:`as_jetstream_error`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .._errors import (
    ConnectionClosedError,
    DisconnectedError,
    InvalidHeaderError,
    InvalidSubjectError,
    JetStreamError,
    JetStreamTimeoutError,
    MaxPayloadExceededError,
    NoRespondersError,
)
from ._auth import closed_error
from ._nats import NatsClient, nats_errors

__all__ = ["as_jetstream_error", "translate"]


@contextlib.contextmanager
def translate(subject: str = "", nc: NatsClient | None = None) -> Iterator[None]:
    """Map nats-py exceptions raised inside the block to aiojetstream errors.

    With the client ``nc``, a closed connection's error names the refusal of
    credentials that closed it, if one did (:func:`~._auth.closed_error`).
    """
    try:
        yield
    except JetStreamError:
        raise
    except nats_errors.NoRespondersError as exc:
        raise NoRespondersError(f"no responders on {subject!r}") from exc
    except nats_errors.TimeoutError as exc:
        raise JetStreamTimeoutError(f"timed out waiting for a reply on {subject!r}") from exc
    except (nats_errors.ConnectionClosedError, nats_errors.ConnectionDrainingError) as exc:
        if nc is None:
            raise ConnectionClosedError("the connection is closed") from exc
        raise closed_error(nc) from exc
    except (
        nats_errors.OutboundBufferLimitError,
        nats_errors.ConnectionReconnectingError,
        nats_errors.StaleConnectionError,
    ) as exc:
        raise DisconnectedError(f"disconnected from the server: {exc}") from exc
    except nats_errors.BadSubjectError as exc:
        raise InvalidSubjectError(f"invalid subject {subject!r}") from exc
    except nats_errors.BadHeaderError as exc:
        raise InvalidHeaderError(str(exc)) from exc
    except nats_errors.MaxPayloadError as exc:
        raise MaxPayloadExceededError("message exceeds the server's max_payload") from exc
    except nats_errors.Error as exc:
        raise JetStreamError(f"connection error: {exc}") from exc


def as_jetstream_error(exc: BaseException, subject: str = "") -> JetStreamError:
    """``exc`` in the aiojetstream tree: :func:`translate` for nats-py's errors, else wrapped."""
    if isinstance(exc, JetStreamError):
        return exc
    if isinstance(exc, nats_errors.Error):
        try:
            with translate(subject):
                raise exc
        except JetStreamError as translated:
            return translated
    wrapped = JetStreamError(f"nats-py failed on {subject!r}: {exc!r}")
    wrapped.__cause__ = exc
    return wrapped

"""Consumer management calls and the pull ``Consumer`` handle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

from . import _api
from ._api import ApiClient
from ._errors import InvalidOptionError
from ._models import ConsumerConfig, ConsumerInfo, to_wire
from ._validation import validate_filter_subject, validate_name

ACTION_CREATE: Final = "create"
ACTION_UPDATE: Final = "update"
ACTION_CREATE_OR_UPDATE: Final = ""


def _consumer_name(config: ConsumerConfig) -> str | None:
    name, durable = config.name, config.durable_name
    if name and durable and name != durable:
        raise InvalidOptionError(
            f"consumer name {name!r} and durable_name {durable!r} must match when both are set"
        )
    chosen = name or durable
    if chosen is not None:
        validate_name(chosen, "consumer")
    return chosen


async def upsert_consumer(
    api: ApiClient,
    stream: str,
    config: ConsumerConfig,
    action: str,
    timeout: float | None,
) -> ConsumerInfo:
    """Create and/or update a consumer; ``action`` is create, update or both ("")."""
    validate_name(stream, "stream")
    if not isinstance(config, ConsumerConfig):
        raise InvalidOptionError(f"config must be a ConsumerConfig, got {type(config).__name__}")
    name = _consumer_name(config)
    body: dict[str, Any] = {"stream_name": stream, "config": to_wire(config)}
    if action:
        body["action"] = action
    if name is None:
        if action == ACTION_UPDATE:
            raise InvalidOptionError("updating a consumer needs its name or durable_name")
        subject = api.subject(_api.CONSUMER_CREATE_EPHEMERAL, stream=stream)
    elif config.filter_subject and not config.filter_subjects:
        validate_filter_subject(config.filter_subject)
        subject = api.subject(
            _api.CONSUMER_CREATE_FILTERED,
            stream=stream,
            consumer=name,
            filter=config.filter_subject,
        )
    else:
        subject = api.subject(_api.CONSUMER_CREATE, stream=stream, consumer=name)
    reply = await api.request(subject, body, timeout=timeout)
    return _api.parse(ConsumerInfo, reply)


async def consumer_info(
    api: ApiClient, stream: str, name: str, timeout: float | None
) -> ConsumerInfo:
    """Fetch a consumer's info (raises ConsumerNotFoundError when it does not exist)."""
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    return await api.call_model(
        _api.CONSUMER_INFO, ConsumerInfo, timeout=timeout, stream=stream, consumer=name
    )


async def delete_consumer(api: ApiClient, stream: str, name: str, timeout: float | None) -> None:
    """Delete a consumer (raises ConsumerNotFoundError when it does not exist)."""
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    await api.call(_api.CONSUMER_DELETE, timeout=timeout, stream=stream, consumer=name)


async def list_consumers(
    api: ApiClient, stream: str, timeout: float | None
) -> AsyncIterator[ConsumerInfo]:
    """Every consumer of a stream, over all pages."""
    validate_name(stream, "stream")
    async for item in _api.paged(api, _api.CONSUMER_LIST, "consumers", {}, timeout, stream=stream):
        yield _api.parse(ConsumerInfo, item)


async def consumer_names(api: ApiClient, stream: str, timeout: float | None) -> AsyncIterator[str]:
    """Every consumer name of a stream, over all pages."""
    validate_name(stream, "stream")
    async for item in _api.paged(api, _api.CONSUMER_NAMES, "consumers", {}, timeout, stream=stream):
        yield str(item)


class Consumer:
    """A handle on a pull consumer (ADR-37).

    Get one from :meth:`JetStreamContext.consumer`, :meth:`Stream.consumer` or a
    create call; it does not keep anything open by itself.
    """

    def __init__(self, api: ApiClient, info: ConsumerInfo) -> None:
        self._api = api
        self._info = info
        self._name = info.name
        self._stream = info.stream_name

    @property
    def name(self) -> str:
        """The consumer's name."""
        return self._name

    @property
    def stream_name(self) -> str:
        """The name of the stream the consumer reads."""
        return self._stream

    @property
    def cached_info(self) -> ConsumerInfo:
        """The info from the last server round trip (no request is made)."""
        return self._info

    async def info(self, *, timeout: float | None = None) -> ConsumerInfo:
        """Fetch the consumer's current info from the server and cache it."""
        self._info = await consumer_info(self._api, self._stream, self._name, timeout)
        return self._info

    def __repr__(self) -> str:
        return f"<Consumer {self._stream}/{self._name}>"

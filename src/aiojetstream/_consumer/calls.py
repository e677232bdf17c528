"""The consumer management calls: create / update, info, delete, list, names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

from .. import _api
from .. import _features as F
from .._api import ApiClient
from .._errors import InvalidOptionError
from .._models import ConsumerConfig, ConsumerInfo, to_wire
from .._models._ranges import check_config_ranges
from .._priority import PINNED_CLIENT
from .._validation import validate_name

ACTION_CREATE: Final = "create"
ACTION_UPDATE: Final = "update"
ACTION_CREATE_OR_UPDATE: Final = ""


def consumer_name(config: ConsumerConfig) -> str | None:
    name, durable = config.name, config.durable_name
    if name and durable and name != durable:
        raise InvalidOptionError(
            f"consumer name {name!r} and durable_name {durable!r} must match when both are set"
        )
    chosen = name or durable
    if chosen is not None:
        validate_name(chosen, "consumer")
    return chosen


def check_priority_config(config: ConsumerConfig) -> None:
    """Refuse what ADR-42 forbids but nats-server 2.15 accepts (before sending).

    One group per consumer (with two, the server keeps one pin for both: the
    second group's clients get nothing), and acknowledged deliveries for a
    pinned client. (An invalid group name the server refuses, typed: 10162.)

    Raises:
        InvalidOptionError: more than one group, or ``pinned_client`` with
            ``ack_policy=none``.

    """
    groups = config.priority_groups
    if not groups:
        return
    if len(groups) > 1:
        raise InvalidOptionError(
            f"priority_groups takes one group per consumer (ADR-42), got {len(groups)}: "
            "make a consumer per group"
        )
    if config.priority_policy == PINNED_CLIENT and config.ack_policy == "none":
        raise InvalidOptionError(
            "a pinned_client consumer needs acknowledgements (ADR-42): ack_policy 'none' "
            "is refused; use 'explicit'"
        )


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
    check_config_ranges(config)  # times and durations the server would wrap or refuse
    check_priority_config(config)  # ADR-42's rules the server does not enforce
    name = consumer_name(config)
    body: dict[str, Any] = {"stream_name": stream, "config": to_wire(config)}
    for feature in F.consumer_config_features(config):
        F.check_level(feature, await api.api_level(timeout))
    if action:
        body["action"] = action
    if name is None:
        if action == ACTION_UPDATE:
            raise InvalidOptionError("updating a consumer needs its name or durable_name")
        subject = api.subject(_api.CONSUMER_CREATE_EPHEMERAL, stream=stream)
    else:
        subject = api.subject(_api.CONSUMER_CREATE, stream=stream, consumer=name)
        if config.filter_subject and not config.filter_subjects:
            # The filter in the subject too (permissions can match it), unless that makes
            # the request line too long (it would cost the connection): body only then.
            filtered = api.subject(
                _api.CONSUMER_CREATE_FILTERED,
                stream=stream,
                consumer=name,
                filter=config.filter_subject,
            )
            if len(filtered) <= _api.MAX_SUBJECT_WITH_SUBJECT:
                subject = filtered
    reply = await api.request(subject, body, timeout=timeout, stream=stream, consumer=name)
    info = _api.parse(ConsumerInfo, reply)
    _api.check_named("stream", stream, info.stream_name)
    if name is not None:
        _api.check_named("consumer", name, info.name)
    dropped = F.consumer_dropped(config, info.config)
    if dropped:
        done = "updated" if action == ACTION_UPDATE else "created or updated"
        what = f"consumer {info.name!r} of stream {stream!r}"
        raise F.dropped_error(dropped, what, done, api.level)
    return info


async def consumer_info(
    api: ApiClient, stream: str, name: str, timeout: float | None
) -> ConsumerInfo:
    """Fetch a consumer's info (raises ConsumerNotFoundError when it does not exist)."""
    validate_name(stream, "stream")
    validate_name(name, "consumer")
    info = await api.call_model(
        _api.CONSUMER_INFO, ConsumerInfo, timeout=timeout, stream=stream, consumer=name
    )
    _api.check_named("stream", stream, info.stream_name)
    _api.check_named("consumer", name, info.name)
    return info


#: What to do about a push consumer: this library pulls (nats.go: ErrNotPullConsumer).
PUSH_HINT: Final = (
    "aiojetstream pulls: create the consumer without deliver_subject (a pull consumer)"
)


def not_pull_error(name: str, deliver_subject: str) -> InvalidOptionError:
    """The error of binding or pulling a push consumer (one with a ``deliver_subject``)."""
    return InvalidOptionError(
        f"consumer {name!r} is a push consumer (deliver_subject={deliver_subject!r}): {PUSH_HINT}"
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
        if isinstance(item, dict) and not (item.get("name") and item.get("stream_name")):
            # In a cluster, a consumer whose peers are all offline comes with an
            # empty name and stream name (the server fills in its config only).
            name = item.get("name") or _api.item_name(item) or ""
            item = {**item, "name": name, "stream_name": item.get("stream_name") or stream}
        yield _api.parse(ConsumerInfo, item)


async def consumer_names(api: ApiClient, stream: str, timeout: float | None) -> AsyncIterator[str]:
    """Every consumer name of a stream, over all pages."""
    validate_name(stream, "stream")
    async for item in _api.paged(api, _api.CONSUMER_NAMES, "consumers", {}, timeout, stream=stream):
        yield str(item)

"""Bad input is reported as such before any feature check, against a real nats-server.

A feature check (scheduled publish, atomic batch) may ask the server for its
API level; bad input must raise its validation error first, whatever the
server's version, and send nothing. The server is made to look older than
2.12 by setting the context's cached API level (as in test_schedules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiojetstream import (
    FeatureNotSupportedError,
    InvalidHeaderError,
    InvalidOptionError,
    InvalidSubjectError,
    JetStreamContext,
    Schedule,
)


@pytest.fixture
def old_server(js: JetStreamContext) -> Iterator[JetStreamContext]:
    """``js`` as if connected to nats-server 2.11 (API level 1)."""
    js._api.level = 1
    try:
        yield js
    finally:
        js._api.level = None


BAD_INPUT: list[tuple[dict[str, object], type[Exception]]] = [
    ({"subject": "sched.*"}, InvalidSubjectError),
    ({"msg_id": "   "}, InvalidOptionError),
    ({"headers": {"X": "a\r\nb"}}, InvalidHeaderError),
    ({"payload": "text"}, InvalidOptionError),
]


@pytest.mark.parametrize(("kwargs", "error"), BAD_INPUT)
async def test_scheduled_publish_checks_input_before_the_feature(
    old_server: JetStreamContext, kwargs: dict[str, object], error: type[Exception]
) -> None:
    js = old_server
    args: dict[str, object] = {
        "subject": "sched.x",
        "payload": b"",
        "schedule": Schedule.every(1),
        "schedule_target": "orders.x",
        **kwargs,
    }
    before = js.nc.stats["out_msgs"]
    for publish in (js.publish, js.publish_async):
        with pytest.raises(error):
            await publish(**args)  # type: ignore[arg-type]
        # Valid input still meets the feature check.
        with pytest.raises(FeatureNotSupportedError):
            await publish("sched.x", b"", schedule=Schedule.every(1), schedule_target="orders.x")
    assert js.nc.stats["out_msgs"] == before


@pytest.mark.parametrize(("kwargs", "error"), BAD_INPUT)
async def test_atomic_batch_checks_input_before_the_feature(
    old_server: JetStreamContext, kwargs: dict[str, object], error: type[Exception]
) -> None:
    js = old_server
    args: dict[str, object] = {"subject": "batch.x", "payload": b"", **kwargs}
    before = js.nc.stats["out_msgs"]
    with pytest.raises(error):
        await js.atomic_batch().add(**args)  # type: ignore[arg-type]
    with pytest.raises(error):
        await js.atomic_batch().commit(**args)  # type: ignore[arg-type]
    # Valid input still meets the feature check.
    with pytest.raises(FeatureNotSupportedError):
        await js.atomic_batch().add("batch.x")
    with pytest.raises(FeatureNotSupportedError):
        await js.atomic_batch().commit("batch.x")
    assert js.nc.stats["out_msgs"] == before

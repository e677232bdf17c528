"""``refuse``'s ``on_refused`` hook: called before the message is raised, never in its way."""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel, ValidationError

from aiojetstream import Msg, PayloadValidationError
from aiojetstream._typed import refuse

REPLY = b"$JS.ACK.S.C.1.5.3.1700000000000000000.0"


class Point(BaseModel):
    x: int


def invalid_msg() -> tuple[Msg, ValidationError]:
    msg = Msg(b"orders.1", REPLY, b'{"x":"no"}', None, None)  # type: ignore[arg-type]
    try:
        Point.model_validate_json(msg.data)
    except ValidationError as exc:
        return msg, exc
    raise AssertionError("the payload validated")


async def test_the_hook_gets_the_message_and_the_error_before_the_raise() -> None:
    msg, exc = invalid_msg()
    calls: list[tuple[Msg, PayloadValidationError, str]] = []

    def hook(m: Msg, error: PayloadValidationError, on_invalid: str) -> None:
        calls.append((m, error, on_invalid))

    with pytest.raises(PayloadValidationError) as info:
        await refuse(msg, exc, Point, "raise", hook)
    [(got, error, on_invalid)] = calls
    assert got is msg
    assert error is info.value
    assert on_invalid == "raise"
    assert (error.subject, error.sequence) == ("orders.1", 5)


async def test_a_failing_hook_is_logged_and_the_message_still_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    msg, exc = invalid_msg()

    def hook(m: Msg, error: PayloadValidationError, on_invalid: str) -> None:
        raise RuntimeError("exporter down")

    with (
        caplog.at_level(logging.ERROR, logger="aiojetstream"),
        pytest.raises(PayloadValidationError),
    ):
        await refuse(msg, exc, Point, "raise", hook)
    assert "on_refused hook failed" in caplog.text
    assert "exporter down" in caplog.text

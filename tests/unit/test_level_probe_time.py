"""The API-level probe comes out of the call's time (``_features.require``)."""

from __future__ import annotations

import pytest

from aiojetstream import _features as F


class _Api:
    """An API client whose level probe answers after ``took`` seconds of the clock."""

    timeout = 5.0

    def __init__(self, clock: list[float], took: float) -> None:
        self.level: int | None = None
        self.level_unknown = False
        self._clock = clock
        self._took = took

    async def api_level(self, timeout: float | None = None) -> int:
        self._clock[0] += self._took
        self.level = 5
        return self.level


def _clocked(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [100.0]
    monkeypatch.setattr("aiojetstream._features._clock", lambda: clock[0])
    return clock


async def test_the_probe_comes_out_of_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clocked(monkeypatch)
    api = _Api(clock, 0.25)
    assert await F.require(api, F.MSG_TTL, 2.0) == pytest.approx(1.75)  # type: ignore[arg-type]
    # Known now: the next call keeps its whole time.
    assert await F.require(api, F.MSG_TTL, 2.0) == 2.0  # type: ignore[arg-type]


async def test_the_contexts_timeout_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clocked(monkeypatch)
    assert await F.require(_Api(clock, 1.0), F.MSG_TTL, None) == pytest.approx(4.0)  # type: ignore[arg-type]
    # (publish_async: None is its own ack timeout, left as it is.)
    assert await F.require(_Api(clock, 1.0), F.MSG_TTL, None, default=False) is None  # type: ignore[arg-type]


async def test_an_answer_handled_late_leaves_half(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop busy elsewhere handled the probe's answer after the call's whole
    timeout: the time left was negative (the publish was refused with "timeout must
    not be negative", or sent with its ack deadline already past)."""
    clock = _clocked(monkeypatch)
    assert await F.require(_Api(clock, 0.08), F.MSG_TTL, 0.05) == pytest.approx(0.025)  # type: ignore[arg-type]

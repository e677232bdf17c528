"""The fault tests' deadlines are the client's, on a heap of the test's own.

A fault test runs late in a worker that earlier tests left holding hundreds of
thousands of objects; a full pass of the cyclic collector over them stops the
event loop for 0.1-0.25 s (measured in a ``make test`` run), and a hundred
publishers' timers all fire that much late: the loop's pause, not the client's
deadline. Each test starts with what is alive frozen out of the collector's
passes (reference counting still frees it), and the pauses the collector does
make during a test are logged when they are long enough to matter.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

logger = logging.getLogger("reliability")

#: A collector pause this long is logged (the fault tests allow 0.25 s of loop lag).
LONG_PAUSE = 0.05


@pytest.fixture(autouse=True)
def _own_heap() -> Iterator[None]:
    gc.collect()
    gc.freeze()
    started = [0.0]
    pauses: list[tuple[int, float]] = []

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif (took := time.perf_counter() - started[0]) >= LONG_PAUSE:
            pauses.append((info["generation"], took))

    gc.callbacks.append(timed)
    try:
        yield
    finally:
        gc.callbacks.remove(timed)
        # Frozen objects are freed by reference counting only: what became cyclic
        # garbage meanwhile is collected now, and what lives on frozen again.
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        for generation, took in pauses:
            logger.warning("the collector stopped the loop %.3fs (gen %d)", took, generation)

"""The soak script itself, kept from rotting: a 30-second run with a fault every 6 s.

``make soak`` runs the real thing (10 minutes, a fault every 30 s) and checks
the RSS too; 30 seconds are too short for a steady state, so this run checks
everything but the RSS drift.
"""

from __future__ import annotations

import pytest

from reliability.soak import soak


@pytest.mark.cluster
async def test_short_soak_loses_nothing() -> None:
    figures = await soak(minutes=0.5, fault_every=6.0, rate=50.0)
    # A leader kill takes 4-9 s to recover from, so 30 s hold three or four
    # faults; the kill and the stepdown always come first.
    kinds = [f["fault"] for f in figures["fault_log"]]
    assert kinds[:2] == ["kill_leader", "stepdown"], figures
    assert figures["messages_acked"] > 500, figures
    assert figures["acked_lost"] == 0, figures
    assert figures["readback_error"] is None, figures
    assert figures["kv_wrong_keys"] == [], figures
    assert figures["watch_wrong_keys"] == [], figures
    assert figures["watch_initial_markers"] == 1, figures
    assert figures["watch_revisions_increasing"], figures

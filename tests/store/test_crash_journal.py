"""Crash trials of the tool journal (`_crash_journal.py` says how they run): 20 SIGKILLs,
four in each phase of a turn, then every key finished; no side effect run twice, none
forgotten, no turn lost or duplicated, the state agreeing with the conversation. The
200-trial run is `make bench BENCH_ARGS="--only crash_journal"`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from store._crash_journal import PHASES, run_trials

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the trials fork and read /proc (Linux)")


def test_twenty_kills_lose_nothing_and_repeat_no_side_effect(tmp_path: Path) -> None:
    pytest.importorskip("anthropic", reason="the anthropic extra is not installed")
    counts = run_trials(tmp_path, trials=20, keys=2, seed=35)
    assert counts["hits"] == {phase: 4 for phase in PHASES}
    assert (counts["double_refunds"], counts["lost_turns"], counts["duplicated_turns"]) == (
        0, 0, 0)
    assert counts["in_doubt_reported"] == 8  # every kill before or inside the refund
    # 4 refunds killed before their effect never run; the other 16 ran exactly once
    assert counts["refund_lines"] == 16

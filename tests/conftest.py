"""Shared fixtures: every test runs in its own AgentSystem and must leave no thread behind."""

from __future__ import annotations

import threading
import time

import pytest

from gen_agent import AgentSystem
from gen_agent._turn import WORKERS


def _wait_threads_gone(before: set[threading.Thread], timeout: float) -> list[threading.Thread]:
    """Join threads started during the test, bounded by `timeout` seconds in total."""
    deadline = time.monotonic() + timeout
    extra = [t for t in threading.enumerate() if t not in before]
    leftover = []
    for thread in extra:
        remaining = max(0.0, deadline - time.monotonic())
        if thread.name == "gen_agent-turn":
            # pooled turn threads park between turns: parked is not leaked
            if not WORKERS.wait_parked(thread, remaining):
                leftover.append(thread)
        else:
            thread.join(remaining)
            if thread.is_alive():
                leftover.append(thread)
    return leftover


@pytest.fixture(autouse=True)
def agent_system():
    """An isolated AgentSystem per test; at teardown every agent is stopped and every
    thread the test started (actors, turn tasks, timers) must have finished."""
    before = set(threading.enumerate())
    with AgentSystem() as system:
        yield system
    leftover = _wait_threads_gone(before, timeout=10.0)
    assert not leftover, f"threads left behind: {[t.name for t in leftover]}"

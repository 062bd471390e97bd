"""Shared fixtures: every test runs in its own AgentSystem and must leave no thread behind."""

from __future__ import annotations

import threading
import time

import pytest

from gen_agent import AgentSystem


def _wait_threads_gone(before: set[threading.Thread], timeout: float) -> list[threading.Thread]:
    """Join threads started during the test, bounded by `timeout` seconds in total."""
    deadline = time.monotonic() + timeout
    extra = [t for t in threading.enumerate() if t not in before]
    for thread in extra:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in extra if t.is_alive()]


@pytest.fixture(autouse=True)
def agent_system():
    """An isolated AgentSystem per test; at teardown every agent is stopped and every
    thread the test started (actors, turn tasks, timers) must have finished."""
    before = set(threading.enumerate())
    with AgentSystem() as system:
        yield system
    leftover = _wait_threads_gone(before, timeout=10.0)
    assert not leftover, f"threads left behind: {[t.name for t in leftover]}"

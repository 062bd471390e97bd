"""Shared fixtures: every test runs in its own AgentSystem (the gen_agent pytest plugin's
`agent_system` fixture) and must leave no thread or child process behind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gen_agent import AgentSystem


@pytest.fixture(autouse=True)
def _isolated(agent_system: AgentSystem) -> AgentSystem:
    """Make the plugin's leak-checked `agent_system` automatic for every test."""
    return agent_system


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A throwaway PostgreSQL server for the session (`tests/pgcluster.py`; skipped with the
    reason where psycopg or the server binaries are missing)."""
    from pgcluster import postgres_cluster

    yield from postgres_cluster()

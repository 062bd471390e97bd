"""Shared fixtures: every test runs in its own AgentSystem (the gen_agent pytest plugin's
`agent_system` fixture) and must leave no thread or child process behind."""

from __future__ import annotations

import pytest

from gen_agent import AgentSystem


@pytest.fixture(autouse=True)
def _isolated(agent_system: AgentSystem) -> AgentSystem:
    """Make the plugin's leak-checked `agent_system` automatic for every test."""
    return agent_system

"""The chat-service guide (docs/examples/guide/chat_host.py, docs/pages/agent-host.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

import gen_agent
from gen_agent import AgentSystem

from ._loader import load_example

chat_host = load_example("guide/chat_host")


def test_the_guide_runs_as_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with AgentSystem():
        chat_host.main()
    assert capsys.readouterr().out.splitlines() == [
        "You said: hello",
        "You said: again",
        "2",
        "You said: back",
        "['said: ', 'a long answer'] You said: a long answer",
    ]


def test_state_and_store_survive_deactivation(tmp_path: Path) -> None:
    with AgentSystem() as system, chat_host.make_host(tmp_path / "c.db",
                                                      agent_system=system) as host:
        host.ask("carol", "one")
        host.deactivate("carol")
        host.ask("carol", "two")
        status = host.status("carol")
        assert isinstance(status, gen_agent.Status)
        assert status.agent_state == {"replies": 2}
        assert host.host_status().activations == 2

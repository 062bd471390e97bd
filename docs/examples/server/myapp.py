"""The `myapp:hosts` of the README's server section, offline: one chat host on the mock
backend (every reply is "You said: <prompt>"), its conversations kept in SQLite.

Run it from this folder: `gen-agent serve myapp:hosts --port 8000` (with the extra
`gen-agent[server]` installed and `GEN_AGENT_SERVER_TOKENS` set, as the README shows). For a
real model, give the host `backend=AnthropicAPI` and its options instead.
"""

from __future__ import annotations

from typing import Any

import gen_agent
from gen_agent import AgentHost, GenAgent, NoReply
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.store import SQLiteStore


class Chat(GenAgent):
    """One conversation; its state (the number of replies) is stored after every turn."""

    persist_state = True

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"fallback": opts["model"]}, {"replies": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        return NoReply({"replies": state["replies"] + 1})


def fake_model(prompt: str) -> list[gen_agent.Event]:
    """A stand-in for a model: answers in three chunks."""
    return mock.text_turn(["You ", "said: ", prompt])


def hosts() -> dict[str, AgentHost]:
    """The hosts `gen-agent serve` puts behind the server (called once, at start)."""
    return {"chat": AgentHost(Chat, backend=MockBackend, name="chat", model=fake_model,
                              store=SQLiteStore("chats.db"), deactivate_after_ms=60_000)}

"""The Vercel AI SDK UI message stream over the agent server (the parts as the AI SDK's
protocol documents them: no Python package types them)."""

from __future__ import annotations

import json
from typing import Any

import httpx

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.server import vercel
from gen_agent.tools import tool
from tests.server_protocols.support import Chat, make_app, serving

ALICE = {"Authorization": "Bearer alice-token-0123456789"}
BOB = {"Authorization": "Bearer bob-token-0123456789ab"}


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _read(response: httpx.Response) -> list[Any]:
    assert response.status_code == 200, response.read()
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def _chat(text: str) -> dict[str, Any]:
    return {"id": "chat-1", "messages": [
        {"id": "m1", "role": "user", "parts": [{"type": "text", "text": text}]}]}


def test_text_tools_approval_and_resume(agent_system: gen_agent.AgentSystem) -> None:
    host = gen_agent.AgentHost(Chat, backend=MockBackend, name="chat", agent_system=agent_system,
                               scripts=[mock.text_turn(["Hi ", "there"]),
                                        mock.tool_round([("lookup", {"city": "Oslo"})],
                                                        mock.text_turn("Sunny."))],
                               tools=[lookup])
    with serving(make_app({"chat": host}, [vercel])) as served, \
            httpx.Client(base_url=served.url, headers=ALICE, timeout=10) as http:
        with http.stream("POST", "/vercel-ai/chat", json=_chat("hello")) as response:
            parts = _read(response)
        assert [p["type"] for p in parts] == ["start", "text-start", "text-delta", "text-delta",
                                              "text-end", "finish"]
        assert "".join(p.get("delta", "") for p in parts) == "Hi there"

        with http.stream("POST", "/vercel-ai/chat", json=_chat("weather?")) as response:
            parts = _read(response)
        approval = next(p for p in parts if p["type"] == "data-approval")["data"]
        assert approval["toolName"] == "lookup" and approval["input"] == {"city": "Oslo"}
        assert parts[-1]["type"] == "finish"
        # Another tenant cannot answer it; the owner can, then resumes the turn.
        refused = http.post(f"/vercel-ai/chat/chat-1/approvals/{approval['id']}",
                            json={"allow": True}, headers=BOB)
        assert refused.status_code == 400
        assert http.post(f"/vercel-ai/chat/chat-1/approvals/{approval['id']}",
                         json={"allow": True}).json() == {"ok": True}
        with http.stream("GET", "/vercel-ai/chat/chat-1/stream") as response:
            rest = _read(response)
        kinds = [p["type"] for p in parts + rest]
        assert kinds.count("tool-input-available") == 1
        output = next(p for p in rest if p["type"] == "tool-output-available")
        assert output["output"] == "sunny in Oslo"
        assert "".join(p.get("delta", "") for p in rest) == "Sunny."
        assert rest[-1]["type"] == "finish"
        # Nothing left to resume: 204, as the AI SDK expects.
        assert http.get("/vercel-ai/chat/chat-1/stream").status_code == 204
        assert http.post("/vercel-ai/chat", json={"id": "x"}).status_code == 400
    host.close()

"""A2A over the agent server, driven by the `a2a-sdk` client against a loopback server."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a", reason="the server extra is not installed: "
                                  "pip install 'gen-agent[server]'")

from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskNotFoundError,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.server import a2a
from gen_agent.tools import tool
from tests.server_protocols.support import Chat, make_app, serving

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
WAIT_S = 10.0


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _message(text: str, context_id: str = "", task_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(message=Message(
        message_id=f"m-{text[:8]}-{id(text)}", role=Role.ROLE_USER, parts=[Part(text=text)],
        context_id=context_id, task_id=task_id))


async def _client(url: str, token: str, streaming: bool = True) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=WAIT_S)
    return await create_client(f"{url}/a2a/chat",
                               ClientConfig(streaming=streaming, httpx_client=http)), http


def _summary(item: Any) -> tuple[str, Any]:
    if item.HasField("task"):
        return ("task", TaskState.Name(item.task.status.state))
    if item.HasField("artifact_update"):
        return ("text", "".join(p.text for p in item.artifact_update.artifact.parts))
    if item.HasField("status_update"):
        status = item.status_update.status
        data = [MessageToDict(p.data) for p in status.message.parts if p.HasField("data")]
        return (TaskState.Name(status.state), data[0] if data else
                "".join(p.text for p in status.message.parts))
    return ("message", None)


def test_card_stream_get_tenants_and_v03_names(agent_system: gen_agent.AgentSystem) -> None:
    host = gen_agent.AgentHost(Chat, backend=MockBackend, name="chat", agent_system=agent_system,
                               scripts=[mock.text_turn(["Hel", "lo"]), mock.text_turn("again")])

    async def scenario(url: str) -> None:
        client, http = await _client(url, ALICE)
        card = (await http.get(f"{url}/a2a/chat/.well-known/agent-card.json")).json()
        assert card["name"] == "chat" and card["capabilities"]["streaming"] is True
        assert card["description"] == "A chat agent whose tool use the remote user approves."
        assert card["supportedInterfaces"][0]["url"] == f"{url}/a2a/chat"

        raw = [i async for i in client.send_message(_message("hi", "conv-1"))]
        items = [_summary(i) for i in raw]
        assert items[0] == ("task", "TASK_STATE_WORKING")
        assert items[1:3] == [("text", "Hel"), ("text", "lo")]
        assert items[-1] == ("TASK_STATE_COMPLETED", "Hello")
        again = [i async for i in client.send_message(_message("again", "conv-1"))]
        task_id = again[0].task.id
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.context_id == "conv-1" and task.artifacts[0].parts[0].text == "again"
        # The contextId is the key inside the caller's tenant: one agent for both messages.
        assert host.live_keys() == ["acme/conv-1"]

        # Another tenant with the same contextId talks to its own agent and cannot see
        # alice's task.
        other, other_http = await _client(url, BOB)
        [i async for i in other.send_message(_message("me too", "conv-1"))]
        assert sorted(host.live_keys()) == ["acme/conv-1", "globex/conv-1"]
        with pytest.raises(TaskNotFoundError):
            await other.get_task(GetTaskRequest(id=task_id))
        # No token: refused before anything runs.
        async with httpx.AsyncClient() as anonymous:
            refused = await anonymous.post(f"{url}/a2a/chat", json={})
        assert refused.status_code == 401

        # The v0.3 method names are accepted on the same endpoint (a v0.3 client sends no
        # A2A-Version header).
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ALICE}"}) as plain:
            old = await plain.post(f"{url}/a2a/chat", json={
                "jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
                    "kind": "message", "messageId": "m-old", "role": "user",
                    "contextId": "conv-2", "parts": [{"kind": "text", "text": "old"}]}}})
        body = old.json()
        assert "result" in body, body
        assert body["result"]["status"]["state"] == "completed", body
        # (a new key, so a new agent: its first script)
        assert body["result"]["artifacts"][0]["parts"][0]["text"] == "Hello"
        assert body["result"]["contextId"] == "conv-2"
        for c in (http, other_http):
            await c.aclose()

    with serving(make_app({"chat": host}, [a2a])) as served:
        asyncio.run(scenario(served.url))
    host.close()


def test_cancel_subscribe_and_input_required(agent_system: gen_agent.AgentSystem) -> None:
    held = mock.gate(mock.text_turn(["slow ", "answer"]), timeout=WAIT_S)
    cancelled = mock.gate(mock.text_turn("never"), timeout=WAIT_S)
    tools_turn = mock.tool_round([("lookup", {"city": "Oslo"})], mock.text_turn("It is sunny."))
    host = gen_agent.AgentHost(Chat, backend=MockBackend, name="chat", agent_system=agent_system,
                               scripts=[held, cancelled, tools_turn], tools=[lookup])

    async def scenario(url: str) -> None:
        client, http = await _client(url, ALICE)
        # SubscribeToTask rejoins a running task: its state first, then the rest.
        quiet, quiet_http = await _client(url, ALICE, streaming=False)
        request = _message("slow one", "conv-x")
        request.configuration.return_immediately = True
        sent = [i async for i in quiet.send_message(request)]
        started = sent[0].task
        assert started.status.state == TaskState.TASK_STATE_WORKING
        assert await asyncio.to_thread(held.wait_blocked, WAIT_S)

        async def rejoin() -> list[Any]:
            return [_summary(i) async for i in
                    client.subscribe(SubscribeToTaskRequest(id=started.id))]

        reader = asyncio.create_task(rejoin())
        await asyncio.sleep(0.2)  # let the subscription attach before the turn goes on
        held.release()
        items = await asyncio.wait_for(reader, WAIT_S)
        assert items[0] == ("task", "TASK_STATE_WORKING")
        assert ("text", "slow ") in items and items[-1] == ("TASK_STATE_COMPLETED", "slow answer")

        # CancelTask interrupts the running turn (interrupt_request): canceled.
        request = _message("cancel me", "conv-x")
        request.configuration.return_immediately = True
        sent = [i async for i in quiet.send_message(request)]
        doomed = sent[0].task
        assert await asyncio.to_thread(cancelled.wait_blocked, WAIT_S)
        task = await client.cancel_task(CancelTaskRequest(id=doomed.id))
        assert task.status.state == TaskState.TASK_STATE_CANCELED
        assert cancelled.cancelled

        # A permission question is input-required; answering "allow" goes on.
        raw = [i async for i in client.send_message(_message("weather?", "conv-x"))]
        task_id = raw[0].task.id
        items = [_summary(i) for i in raw]
        state, data = items[-1]
        assert state == "TASK_STATE_INPUT_REQUIRED"
        assert data["approval"]["tool_name"] == "lookup"
        assert data["approval"]["input"] == {"city": "Oslo"}
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        rest = [_summary(i) async for i in
                client.send_message(_message("allow", "conv-x", task_id))]
        assert rest[0] == ("TASK_STATE_WORKING", "")
        # The tool call shows once, before or after the question (the permission request
        # may overtake the relay of its tool_use event).
        uses = [d for _k, d in items + rest if isinstance(d, dict) and "tool_use" in d]
        assert [u["tool_use"]["name"] for u in uses] == ["lookup"]
        assert any(kind == "TASK_STATE_WORKING" and isinstance(d, dict) and "tool_result" in d
                   and d["tool_result"]["content"] == "sunny in Oslo" for kind, d in rest)
        assert rest[-1] == ("TASK_STATE_COMPLETED", "It is sunny.")
        for c in (http, quiet_http):
            await c.aclose()

    with serving(make_app({"chat": host}, [a2a])) as served:
        asyncio.run(scenario(served.url))
    host.close()


"""AG-UI over the agent server: the stream decoded with the `ag-ui-protocol` package's own
event types (a pydantic `TypeAdapter` of `ag_ui.core.Event`)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

pytest.importorskip("ag_ui", reason="the server extra is not installed: "
                                    "pip install 'gen-agent[server]'")

from ag_ui.core import Event as AguiEvent
from ag_ui.core import EventType
from pydantic import TypeAdapter

import gen_agent
from gen_agent._event import Event
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.server import agui
from gen_agent.tools import tool
from tests.server_protocols.support import Chat, make_app, serving

ALICE = {"Authorization": "Bearer alice-token-0123456789"}
BOB = {"Authorization": "Bearer bob-token-0123456789ab"}
DECODE = TypeAdapter(AguiEvent)
WAIT_S = 10.0


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _run(http: httpx.Client, url: str, thread: str, text: str | None = None,
         resume: list[dict[str, Any]] | None = None) -> list[Any]:
    body: dict[str, Any] = {"threadId": thread, "runId": f"run-{thread}-{text}",
                            "messages": [{"id": "u1", "role": "user", "content": text}]
                            if text else []}
    if resume:
        body["resume"] = resume
    events = []
    with http.stream("POST", f"{url}/agui/chat", json=body, headers=ALICE) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(DECODE.validate_json(line[6:]))
    return events


def _types(events: list[Any]) -> list[str]:
    return [e.type.value for e in events]


def test_text_tools_interrupt_resume_and_cancel(agent_system: gen_agent.AgentSystem) -> None:
    release = threading.Event()

    def held(prompt: str) -> Any:
        yield Event.new("text", {"text": "thinking"})
        release.wait(WAIT_S)
        yield Event.new("result", {"text": "thinking"})

    scripts = [mock.text_turn(["Hi ", "there"], usage={"input_tokens": 3, "output_tokens": 2}),
               mock.tool_round([("lookup", {"city": "Oslo"})], mock.text_turn("Sunny.")),
               held]
    host = gen_agent.AgentHost(Chat, backend=MockBackend, name="chat", agent_system=agent_system,
                               scripts=scripts, tools=[lookup])
    with serving(make_app({"chat": host}, [agui])) as served, httpx.Client(timeout=WAIT_S) as http:
        url = served.url
        events = _run(http, url, "t1", "hello")
        assert _types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START",
                                  "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
                                  "TEXT_MESSAGE_END", "STATE_SNAPSHOT", "RUN_FINISHED"]
        assert events[0].thread_id == "t1"
        assert "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT) == \
            "Hi there"
        assert events[-2].snapshot["state"] == "completed"
        assert events[-2].snapshot["usage"] == {"input_tokens": 3, "output_tokens": 2}
        assert events[-1].result == {"text": "Hi there"} and events[-1].outcome is None
        assert host.live_keys() == ["acme/t1"]

        # A tool that needs the user's permission: the run ends with the interrupt outcome.
        events = _run(http, url, "t1", "weather?")
        finished = events[-1]
        assert finished.type == EventType.RUN_FINISHED
        assert finished.outcome.type == "interrupt"
        (interrupt,) = finished.outcome.interrupts
        assert interrupt.reason == "tool_permission"
        assert interrupt.metadata == {"toolName": "lookup", "input": {"city": "Oslo"},
                                      "taskId": events[1].snapshot["taskId"]}
        # Another tenant cannot answer it, nor cancel the thread, even knowing both ids.
        guess = {"threadId": "t1", "runId": "r-bob", "messages": [], "resume": [
            {"interruptId": interrupt.id, "status": "resolved", "payload": {"allow": True}}]}
        assert http.post(f"{url}/agui/chat", headers=BOB, json=guess).status_code == 400
        assert http.post(f"{url}/agui/chat/cancel", headers=BOB,
                         json={"threadId": "t1"}).status_code == 404
        # Resuming answers it; the same turn goes on in the new run.
        rest = _run(http, url, "t1", resume=[{"interruptId": interrupt.id, "status": "resolved",
                                              "payload": {"allow": True}}])
        kinds = _types(events + rest)
        assert kinds.count("TOOL_CALL_START") == 1 and kinds.count("TOOL_CALL_END") == 1
        result = next(e for e in rest if e.type == EventType.TOOL_CALL_RESULT)
        assert result.content == "sunny in Oslo"
        assert rest[-1].type == EventType.RUN_FINISHED and rest[-1].result == {"text": "Sunny."}
        # An answer to no pending interrupt is refused.
        stale = http.post(f"{url}/agui/chat", headers=ALICE, json={
            "threadId": "t1", "runId": "r9", "messages": [],
            "resume": [{"interruptId": interrupt.id, "status": "resolved",
                        "payload": {"allow": True}}]})
        assert stale.status_code == 400

        # Cancel: the running turn is interrupted, its run ends with the cancelled outcome.
        done: list[Any] = []
        reader = threading.Thread(target=lambda: done.extend(_run(http, url, "t1", "slow")))
        reader.start()
        try:
            _wait(lambda: host.status("acme/t1").state == "processing")
            answer = http.post(f"{url}/agui/chat/cancel", headers=ALICE, json={"threadId": "t1"})
            assert answer.json() == {"outcome": "interrupted"}
        finally:
            release.set()
            reader.join(WAIT_S)
        assert done[-1].type == EventType.RUN_FINISHED
        assert done[-1].outcome.type == "cancelled"

        # Bad input is refused with a clear error, nothing started.
        assert http.post(f"{url}/agui/chat", headers=ALICE, json={"x": 1}).status_code == 400
        assert http.post(f"{url}/agui/nope", headers=ALICE, json={}).status_code == 404
    host.close()


def _wait(check: Any) -> None:
    event = threading.Event()
    for _ in range(200):
        if check():
            return
        event.wait(0.02)
    raise AssertionError("never happened")


def test_a_drain_denies_a_pending_permission_question(
        agent_system: gen_agent.AgentSystem) -> None:
    from gen_agent.server import ServerLimits
    from gen_agent.server._served import book
    from gen_agent.server.approvals import APPROVALS

    host = gen_agent.AgentHost(Chat, backend=MockBackend, name="chat", agent_system=agent_system,
                               scripts=[mock.tool_round([("lookup", {"city": "Oslo"})],
                                                        mock.text_turn("never"))],
                               tools=[lookup])
    # A drain bound far beyond the server's 10 s stop: only denying the question at once
    # lets the server stop in time.
    app = make_app({"chat": host}, [agui], limits=ServerLimits(drain_timeout_s=60))
    served = serving(app)
    with served as running, httpx.Client(timeout=WAIT_S) as http:
        events = _run(http, running.url, "t1", "weather?")
        assert events[-1].outcome.type == "interrupt"
        assert APPROVALS.pending(("chat", "acme/t1"))
    (task,) = book(app.state.gen_agent_server)._tasks.values()
    assert task.state == "canceled"
    assert APPROVALS.pending(("chat", "acme/t1")) == []
    host.close()

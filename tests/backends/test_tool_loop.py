"""The tool loop of `AnthropicAPI` on the official SDK against `ScriptedModelServer`: the model
asks, the agent's Python tools run, their results go back, the model continues; asserted on
the turn's events, `response.messages` and the server's request log."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _agents import PassThrough, start

import gen_agent
from gen_agent._conversation import TextPart, ToolCallPart, ToolResultPart
from gen_agent._errors import TurnError
from gen_agent._permission import Allow, Deny
from gen_agent.backend import BackendError
from gen_agent.testing._model_server import Reply, ScriptedModelServer, ToolUseBlock
from gen_agent.tools import ToolContext, tool

anthropic = pytest.importorskip("anthropic")

WAIT_S = 10.0


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("secret internals")


class GuardedAgent(PassThrough):
    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        return Deny("shouting is not allowed") if request.tool_name == "shout" else Allow()


def _start(server: ScriptedModelServer, tools: list[Any], module: type = PassThrough,
           **extra: Any) -> None:
    from gen_agent.backends.anthropic import AnthropicAPI

    start(module, "t", backend=AnthropicAPI, backend_opts={
        "api_key": "k", "base_url": server.url, "model": "claude-test", "tools": tools,
        **extra})


def _bodies(server: ScriptedModelServer) -> list[dict[str, Any]]:
    return [r.body for r in server.model_requests()]


def test_a_two_step_loop_with_parallel_calls() -> None:
    both = Reply.message(ToolUseBlock("toolu_1", "add", {"a": 2, "b": 3}),
                         ToolUseBlock("toolu_2", "shout", {"text": "hi"}),
                         stop_reason="tool_use", input_tokens=10, output_tokens=4)
    replies = [both, Reply.text("5 and HI", input_tokens=30, output_tokens=6)]
    with ScriptedModelServer(replies) as server:
        _start(server, [add, shout])
        response = gen_agent.ask("t", "add and shout", timeout=WAIT_S)
        first, second = _bodies(server)
    assert response.text == "5 and HI"
    kinds = [e.kind for e in response.events if e.kind in ("tool_use", "tool_result")]
    assert kinds == ["tool_use", "tool_use", "tool_result", "tool_result"]
    assert {t["name"] for t in first["tools"]} == {"add", "shout"}
    assert first["tools"][0]["input_schema"]["required"] == ["a", "b"]
    # the second request carries the whole loop so far, in the provider's form
    assert second["messages"][0] == {"role": "user", "content": "add and shout"}
    assert [b["type"] for b in second["messages"][1]["content"]] == ["tool_use", "tool_use"]
    assert second["messages"][2]["role"] == "user"
    assert [(b["type"], b["tool_use_id"], b["content"]) for b in second["messages"][2]["content"]] \
        == [("tool_result", "toolu_1", "5"), ("tool_result", "toolu_2", "HI")]
    # the turn's delta holds the loop in replayable form; usage is the turn's total
    roles = [m.role for m in response.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert [type(p) for p in response.messages[1].content] == [ToolCallPart, ToolCallPart]
    assert [p.content for p in response.messages[2].content] == ["5", "HI"]
    assert isinstance(response.messages[3].content[0], TextPart)
    assert response.usage["input_tokens"] == 40
    assert response.usage["output_tokens"] == 10


def test_the_next_turn_continues_after_the_loop() -> None:
    replies = [Reply.tool_use("add", {"a": 1, "b": 1}, id="toolu_9"), Reply.text("2"),
               Reply.text("again")]
    with ScriptedModelServer(replies) as server:
        _start(server, [add])
        gen_agent.ask("t", "one plus one", timeout=WAIT_S)
        gen_agent.ask("t", "and now?", timeout=WAIT_S)
        third = _bodies(server)[2]
    assert [m["role"] for m in third["messages"]] == ["user", "assistant", "user", "assistant",
                                                      "user"]
    assert third["messages"][-1] == {"role": "user", "content": "and now?"}


def test_a_raising_tool_is_an_error_result_and_the_loop_goes_on() -> None:
    replies = [Reply.tool_use("broken", {}, id="toolu_b"), Reply.text("it failed")]
    with ScriptedModelServer(replies) as server:
        _start(server, [broken])
        response = gen_agent.ask("t", "try it", timeout=WAIT_S)
        second = _bodies(server)[1]
    assert response.text == "it failed"
    result = second["messages"][2]["content"][0]
    assert (result["content"], result["is_error"]) == ("tool raised RuntimeError", True)
    assert "secret internals" not in str(second)


def test_a_denied_call_does_not_run_and_the_model_is_told() -> None:
    ran = threading.Event()

    @tool(name="shout")
    def watched(text: str) -> str:
        ran.set()
        return text

    replies = [Reply.tool_use("shout", {"text": "x"}, id="toolu_d"), Reply.text("ok, quietly")]
    with ScriptedModelServer(replies) as server:
        _start(server, [watched], GuardedAgent)
        response = gen_agent.ask("t", "shout", timeout=WAIT_S)
        second = _bodies(server)[1]
    assert not ran.is_set()
    assert second["messages"][2]["content"][0]["content"] == "shouting is not allowed"
    assert [e.data["decision"] for e in response.events if e.kind == "permission"] == ["deny"]
    assert [p.is_error for p in response.messages[2].content if isinstance(p, ToolResultPart)] \
        == [True]


def test_an_interrupt_during_a_tool_ends_the_turn_and_tells_the_tool() -> None:
    started, told = threading.Event(), threading.Event()

    @tool(timeout_s=None)
    def slow(ctx: ToolContext) -> str:
        started.set()
        if ctx.cancelled.wait(WAIT_S):
            told.set()
        return "late"

    replies = [Reply.tool_use("slow", {}, id="toolu_s"), Reply.text("never asked")]
    with ScriptedModelServer(replies) as server:
        _start(server, [slow])
        ref = gen_agent.tell("t", "go slow")
        assert started.wait(WAIT_S)
        gen_agent.interrupt("t")
        assert told.wait(WAIT_S)
        result = gen_agent.poll("t", ref, timeout=WAIT_S)
        assert len(server.model_requests()) == 1
    assert (result.status, result.reason) == ("failed", "interrupted")


def test_max_steps_stops_a_model_that_keeps_calling_tools() -> None:
    replies = [Reply.tool_use("add", {"a": 1, "b": n}) for n in range(3)]
    with ScriptedModelServer(replies) as server:
        _start(server, [add], max_steps=2)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("t", "loop forever", timeout=WAIT_S)
        assert len(server.model_requests()) == 2
    assert isinstance(info.value.reason, BackendError)
    assert info.value.reason.kind == "max_steps"


# ---------------------------------------------------------------------- OpenAI Responses
openai = pytest.importorskip("openai")


def _start_openai(server: ScriptedModelServer, tools: list[Any], **extra: Any) -> None:
    from gen_agent.backends.openai import OpenAIResponses
    from gen_agent.testing._openai_protocol import openai_base_url

    start(PassThrough, "o", backend=OpenAIResponses, backend_opts={
        "api_key": "k", "base_url": openai_base_url(server), "model": "gpt-test",
        "tools": tools, **extra})


@pytest.mark.parametrize("store", [False, True], ids=["stateless", "server_state"])
def test_the_openai_tool_loop(store: bool) -> None:
    replies = [Reply.tool_use("add", {"a": 20, "b": 22}, id="call_1"), Reply.text("it is 42"),
               Reply.text("later")]
    with ScriptedModelServer(replies) as server:
        _start_openai(server, [add], store=store)
        response = gen_agent.ask("o", "what is 20+22?", timeout=WAIT_S)
        gen_agent.ask("o", "next", timeout=WAIT_S)
        first, second, third = _bodies(server)
    assert response.text == "it is 42"
    assert first["tools"] == [{"type": "function", "name": "add",
                               "description": "Add two numbers.",
                               "parameters": add.input_schema, "strict": False}]
    outputs = [item for item in second["input"] if item.get("type") == "function_call_output"]
    assert outputs == [{"type": "function_call_output", "call_id": "call_1", "output": "42"}]
    if store:  # the step continues its stored response; only the results are sent
        assert second["previous_response_id"] is not None
        assert second["input"] == outputs
        assert third["previous_response_id"] != second["previous_response_id"]
    else:  # the whole conversation every time, including the loop
        assert [i.get("type", i.get("role")) for i in second["input"]] == [
            "user", "function_call", "function_call_output"]
        assert [i.get("type", i.get("role")) for i in third["input"]] == [
            "user", "function_call", "function_call_output", "assistant", "user"]
    assert [m.role for m in response.messages] == ["user", "assistant", "user", "assistant"]

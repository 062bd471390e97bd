"""A conversation stored as `Response.messages` deltas continues as if it had never stopped:
AnthropicAPI and OpenAIResponses (stateless and server-side state) against
ScriptedModelServer on 127.0.0.1, asserted on the server's request log; and across providers."""

from __future__ import annotations

import pickle
from typing import Any

import msgspec
import pytest

import gen_agent
from gen_agent._conversation import Message, TextPart, ThinkingPart
from gen_agent.backends.anthropic import AnthropicAPI
from gen_agent.backends.openai import OpenAIResponses
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.testing._openai_protocol import openai_base_url

from .conftest import Agent

pytest.importorskip("anthropic")
pytest.importorskip("openai")

WAIT_S = 10.0
PROMPTS = ("one", "two", "three", "four")
ANSWERS = ("first answer", "second answer", "third answer", "fourth answer")


def _opts(backend: Any, server: ScriptedModelServer, **extra: Any) -> dict[str, Any]:
    if backend is AnthropicAPI:
        return {"api_key": "k", "base_url": server.url, "model": "claude-test", **extra}
    return {"api_key": "k", "base_url": openai_base_url(server), "model": "gpt-test", **extra}


def _wire(backend: Any, body: dict[str, Any]) -> Any:
    if backend is AnthropicAPI:
        return body["messages"]
    return body["input"], body.get("previous_response_id")


def _run(backend: Any, name: str, opts: dict[str, Any], prompts: tuple[str, ...]) -> list[Any]:
    agent = gen_agent.start_agent(Agent, name=name, backend=backend, backend_opts=opts)
    try:
        return [agent.ask(prompt, timeout=WAIT_S) for prompt in prompts]
    finally:
        gen_agent.stop(name)


CASES = [
    pytest.param(AnthropicAPI, {}, id="anthropic"),
    pytest.param(OpenAIResponses, {"store": False}, id="openai-stateless"),
    pytest.param(OpenAIResponses, {}, id="openai-stored"),
]


@pytest.mark.parametrize(("backend", "extra"), CASES)
def test_a_conversation_restarted_from_three_stored_deltas_sends_the_same_history(
    backend: Any, extra: dict[str, Any]
) -> None:
    with ScriptedModelServer([Reply.text(a) for a in ANSWERS]) as server:
        _run(backend, "unbroken", _opts(backend, server, **extra), PROMPTS)
        unbroken = [_wire(backend, r.body) for r in server.model_requests()]
    with ScriptedModelServer([Reply.text(a) for a in ANSWERS]) as server:
        first = _run(backend, "stopped", _opts(backend, server, **extra), PROMPTS[:3])
        # The deltas are what a store keeps: encode them, decode them as Messages.
        stored = [msgspec.json.encode(r.messages) for r in first]
        history = [m for blob in stored for m in msgspec.json.decode(blob, type=list[Message])]
        _run(backend, "restarted", _opts(backend, server, history=history, **extra), PROMPTS[3:])
        restarted = [_wire(backend, r.body) for r in server.model_requests()]

    assert [len(r.messages) for r in first] == [2, 2, 2]
    assert [(m.role, m.text) for m in history] == [
        (role, text) for p, a in zip(PROMPTS[:3], ANSWERS[:3], strict=True)
        for role, text in (("user", p), ("assistant", a))
    ]
    if backend is OpenAIResponses and not extra:
        # Server-side state: the same previous_response_id (ids differ between the two
        # servers, so compare against each run's own third response).
        assert restarted[3] == ("four", first[2].response_id)
        assert unbroken[3][0] == "four" and unbroken[3][1] is not None
    else:
        assert restarted[3] == unbroken[3]
        assert len(unbroken[3] if backend is AnthropicAPI else unbroken[3][0]) == 7


def test_deltas_round_trip_through_pickle_and_json_with_their_raw_parts() -> None:
    with ScriptedModelServer([Reply.tool_use("Bash", {"command": "ls"}, id="toolu_1",
                                             text="Looking.")]) as server:
        (response,) = _run(AnthropicAPI, "tools", _opts(AnthropicAPI, server), ("list",))
    user, reply = response.messages
    assert user == Message(role="user", content=(TextPart(text="list"),))
    assert [type(p).__name__ for p in reply.content] == ["TextPart", "ToolCallPart"]
    call = reply.content[1]
    assert (call.id, call.name, call.input) == ("toolu_1", "Bash", {"command": "ls"})
    assert call.raw == {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                        "input": {"command": "ls"}}
    assert (reply.provider, reply.finish_reason) == ("anthropic", "tool_calls")
    assert reply.id == response.response_id and reply.id.startswith("msg_")
    assert pickle.loads(pickle.dumps(response.messages)) == response.messages
    blob = msgspec.json.encode(response.messages)
    assert msgspec.json.decode(blob, type=tuple[Message, ...]) == response.messages


def test_an_anthropic_conversation_continues_on_openai_without_its_signed_thinking() -> None:
    thinking = ThinkingPart(text="let me think", signature="sig-abc",
                            raw={"type": "thinking", "thinking": "let me think",
                                 "signature": "sig-abc"})
    history = [
        Message(role="user", content=(TextPart(text="hi"),)),
        Message(role="assistant", provider="anthropic", id="msg_1", finish_reason="stop",
                content=(thinking, TextPart(text="hello", raw={"type": "text", "text": "hello"}))),
    ]
    with ScriptedModelServer([Reply.text("on openai"), Reply.text("still")]) as server:
        first, second = _run(OpenAIResponses, "moved", _opts(OpenAIResponses, server,
                                                           history=history), ("go on", "more"))
        bodies = [r.body for r in server.model_requests()]

    assert bodies[0]["input"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "go on"},
    ]
    assert "previous_response_id" not in bodies[0]
    (dropped,) = first.extra["history_dropped"]
    assert (dropped.message_index, dropped.part_index, dropped.part_type, dropped.reason) == (
        1, 0, "thinking", "foreign_thinking",
    )
    # After that turn the provider holds the conversation: only the new prompt is sent.
    assert (bodies[1]["input"], bodies[1]["previous_response_id"]) == ("more", first.response_id)
    assert "history_dropped" not in second.extra


def test_signed_thinking_goes_back_to_anthropic_as_its_raw_block() -> None:
    block = {"type": "thinking", "thinking": "t", "signature": "sig"}
    history = [
        Message(role="user", content=(TextPart(text="hi"),)),
        Message(role="assistant", provider="anthropic", content=(
            ThinkingPart(text="t", signature="sig", raw=block),
            TextPart(text="hello", raw={"type": "text", "text": "hello"}))),
    ]
    with ScriptedModelServer([Reply.text("ok")]) as server:
        (response,) = _run(AnthropicAPI, "signed",
                           _opts(AnthropicAPI, server, history=history), ("again",))
        body = server.model_requests()[0].body

    assert body["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [block, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"},
    ]
    assert "history_dropped" not in response.extra

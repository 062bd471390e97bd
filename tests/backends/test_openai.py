"""OpenAIResponses on the official `openai` SDK against ScriptedModelServer on 127.0.0.1:
continuity (previous_response_id and stateless), errors at the one SDK boundary, cancel,
options, and the pure stream translator. What it shares with AnthropicAPI is tested over
both in `test_sdk_providers.py`."""

from __future__ import annotations

from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent._errors import TurnError
from gen_agent.backends.openai import (
    DEFAULT_MODEL,
    OpenAIResponses,
    OpenAIStreamTranslator,
    _error_from_sdk,
)
from gen_agent.testing._model_server import Reply, ScriptedModelServer, TextBlock
from gen_agent.testing._openai_protocol import ResponsesReply, openai_base_url

from .conftest import Agent, TurnRecorder, read_in_thread, reason_of, run_turn

openai = pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

WAIT_S = 10.0


def options(server: ScriptedModelServer, **extra: Any) -> dict[str, Any]:
    return {"api_key": "test-key", "base_url": openai_base_url(server), **extra}


def start(server: ScriptedModelServer, name: str = "gpt", **extra: Any):
    return agents.start(Agent, name, backend=OpenAIResponses,
                        backend_opts=options(server, **extra))


def body_of(server: ScriptedModelServer, index: int) -> dict[str, Any]:
    return server.model_requests()[index].body


# -- turns through an agent ---------------------------------------------------------------


def test_a_text_turn_field_by_field_and_a_continued_second_turn(
    server: ScriptedModelServer,
) -> None:
    server.enqueue(
        ResponsesReply.text(
            "Hello there, friend.", reasoning_tokens=3, cached_input_tokens=2, input_tokens=11
        ),
        Reply.text("Second answer.", model="gpt-5-mini"),
    )
    agent = start(server, instructions="Be brief.", params={"top_p": 0.5}, max_output_tokens=50)

    first = agent.ask("Say hello", timeout=WAIT_S)

    # output_text.done repeats the three deltas: the text appears once.
    assert first.text == "Hello there, friend."
    assert first.final_message == "Hello there, friend."
    assert [e.kind for e in first.events] == ["text", "text", "text", "usage", "result"]
    assert first.usage == {
        "input_tokens": 11,
        "output_tokens": 5,
        "total_tokens": 16,
        "reasoning_tokens": 3,
        "cached_tokens": 2,
        "cache_read_input_tokens": 2,  # the normalized key beside the raw one
    }
    assert first.session_id is not None and first.session_id.startswith("openai-")
    assert (first.model, first.stop_reason, first.provider) == (
        DEFAULT_MODEL,
        "completed",
        "openai",
    )
    first_id = first.response_id
    assert first_id.startswith("resp_")
    body = body_of(server, 0)
    assert body["input"] == "Say hello"
    assert (body["model"], body["stream"], body["store"]) == (DEFAULT_MODEL, True, True)
    assert (body["instructions"], body["top_p"], body["max_output_tokens"]) == (
        "Be brief.",
        0.5,
        50,
    )
    assert "previous_response_id" not in body
    assert server.model_requests()[0].headers["x-stainless-retry-count"] == "0"

    second = agent.ask("And again", timeout=WAIT_S)

    assert (second.text, second.model, second.provider_model) == (
        "Second answer.", DEFAULT_MODEL, "gpt-5-mini",
    )
    assert second.session_id == first.session_id
    body = body_of(server, 1)
    assert (body["input"], body["previous_response_id"]) == ("And again", first_id)
    assert body["instructions"] == "Be brief."  # resent every turn
    gen_agent.stop("gpt")


def test_stateless_mode_resends_the_kept_conversation(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.text("one"), Reply.http_error(500), Reply.text("three"))
    agent = start(server, store=False)

    agent.ask("first", timeout=WAIT_S)
    with pytest.raises(TurnError):
        agent.ask("second", timeout=WAIT_S)
    agent.ask("third", timeout=WAIT_S)

    body = body_of(server, 2)
    assert body["store"] is False
    assert "previous_response_id" not in body
    assert body["input"] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "third"},
    ]
    gen_agent.stop("gpt")


def test_a_function_call_is_a_tool_use_event(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.tool_use("get_weather", {"city": "Paris"}, id="call_9", text="Checking."))
    agent = start(server, tools=[{"type": "function", "name": "get_weather", "parameters": {}}])

    response = agent.ask("weather?", timeout=WAIT_S)

    assert response.text == "Checking."
    (call,) = response.tool_calls
    assert {k: call.data[k] for k in ("id", "name", "arguments", "input")} == {
        "id": "call_9",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "input": {"city": "Paris"},
    }
    assert body_of(server, 0)["tools"][0]["name"] == "get_weather"
    gen_agent.stop("gpt")


# -- the backend hooks directly -------------------------------------------------------------


def test_cancel_mid_stream_ends_a_blocked_read(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.text(["a ", "b ", "c"], chunk_delay=30.0))
    session = OpenAIResponses.start_session(options(server))
    recorder = TurnRecorder()
    stream, session = OpenAIResponses.prompt(session, "x", recorder.context)
    reader, out = read_in_thread(stream)

    server.wait_requests(1, timeout=WAIT_S)
    recorder.cancel_event.set()
    OpenAIResponses.cancel(session)
    reader.join(WAIT_S)

    assert not reader.is_alive()
    assert reason_of(out).kind == "cancelled"
    OpenAIResponses.terminate_session(session)
    OpenAIResponses.terminate_session(session)  # idempotent


def test_two_message_items_are_two_messages(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.message(TextBlock(("First ", "part.")), TextBlock(("Second.",))))
    session = OpenAIResponses.start_session(options(server))

    events, session, _ = run_turn(OpenAIResponses, session, "x")

    texts = [e.data for e in events if e.kind == "text"]
    assert texts == [
        {"text": "First "},
        {"text": "part."},
        {"text": "Second.", "message_boundary": True},
    ]
    assert events[-1].data["text"] == "First part.\n\nSecond."
    assert session.previous_response_id == events[-1].data["response_id"]
    OpenAIResponses.terminate_session(session)


def test_the_stateless_history_is_bounded(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.text("a1"), Reply.text("a2"), Reply.text(""))
    session = OpenAIResponses.start_session(options(server, store=False, max_history_messages=2))

    for prompt in ("u1", "u2"):
        _, session, _ = run_turn(OpenAIResponses, session, prompt)
    assert [(m.role, m.text) for m in session.history] == [("user", "u2"), ("assistant", "a2")]
    _, session, _ = run_turn(OpenAIResponses, session, "u3")  # an empty reply: kept, not resent
    assert [(m.role, m.text) for m in session.history] == [("user", "u3"), ("assistant", "")]
    OpenAIResponses.terminate_session(session)


# -- options and the SDK ---------------------------------------------------------------------


def test_sdk_exceptions_at_the_boundary() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/responses")
    response = httpx2.Response(429, request=request, headers={"Retry-After": "4"})
    body = {"error": {"message": "slow", "type": "requests", "code": "rate_limit_exceeded"}}
    limited = _error_from_sdk(
        openai.RateLimitError("slow", response=response, body=body["error"]), openai
    )
    assert limited is not None
    assert (limited.kind, limited.status, limited.retry_after, limited.retryable) == (
        "rate_limited", 429, "4", True
    )  # fmt: skip
    timeout = _error_from_sdk(openai.APITimeoutError(request=request), openai)
    assert timeout is not None and (timeout.kind, timeout.retryable) == ("timeout", True)
    lost = _error_from_sdk(openai.APIConnectionError(request=request), openai)
    assert lost is not None and lost.kind == "transport"
    streamed = _error_from_sdk(
        openai.APIError("oops", request, body={"code": "server_error", "message": "oops"}), openai
    )
    assert streamed is not None and (streamed.kind, streamed.retryable) == ("stream_error", True)
    assert _error_from_sdk(KeyError("a bug"), openai) is None


# -- the pure translator --------------------------------------------------------------------


def test_translator_done_without_deltas_gives_the_text_once() -> None:
    translator = OpenAIStreamTranslator("openai-1", "m")
    reasoning = {"type": "reasoning", "id": "r1", "summary": []}
    late = {"type": "message", "id": "i3", "content": [{"type": "output_text", "text": "Late"}]}
    stream = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "m2"}},
        {"type": "response.output_text.delta", "item_id": "i1", "content_index": 0, "delta": "He"},
        {"type": "response.output_text.done", "item_id": "i1", "content_index": 0, "text": "Hello"},
        {"type": "response.output_text.done", "item_id": "i2", "content_index": 0, "text": "Bye"},
        {"type": "response.output_item.done", "item": reasoning},
        {"type": "response.output_item.done", "item": late},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
        {"type": "response.completed", "response": {"id": "resp_2", "status": "completed"}},
    ]  # fmt: skip
    events = [event for raw in stream for event in translator.translate(raw)]

    assert [(e.kind, e.data.get("text")) for e in events] == [
        ("text", "He"),
        ("text", "llo"),
        ("text", "Bye"),
        ("openai.reasoning", None),
        ("text", "Late"),
        ("result", "Hello\n\nBye\n\nLate"),
    ]
    assert events[-1].data["response_id"] == "resp_1"
    assert (events[-1].data["model"], events[-1].data["provider_model"]) == ("m", "m2")
    reply = events[-1].data["messages"][-1]
    assert [(type(p).__name__, p.text) for p in reply.content] == [
        ("TextPart", "Hello"), ("TextPart", "Bye"), ("ThinkingPart", ""), ("TextPart", "Late"),
    ]


def test_translator_unexpected_status_and_truncation() -> None:
    translator = OpenAIStreamTranslator("openai-2")
    events = translator.translate(
        {"type": "response.completed", "response": {"id": "r", "status": "cancelled"}}
    )
    assert reason_of(events).kind == "unexpected_response_status"
    assert translator.truncated() is None

    fresh = OpenAIStreamTranslator("openai-3")
    assert fresh.translate({"type": "response.mystery"}) == []
    end = fresh.truncated()
    assert end is not None and end.data["reason"].kind == "stream_truncated"

"""AnthropicAPI on the official `anthropic` SDK against ScriptedModelServer on 127.0.0.1: turns,
history, errors at the one SDK boundary, cancel, options, and the pure stream translator.
What it shares with OpenAIResponses is tested over both in `test_sdk_providers.py`."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import threading
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent.backend import BackendError, SessionStartError
from gen_agent.backends.anthropic import (
    AnthropicAPI,
    AnthropicStreamTranslator,
    _error_from_sdk,
)
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .conftest import Agent, TurnRecorder, read_in_thread, reason_of, run_turn

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

WAIT_S = 10.0
MODEL = "claude-test"


def options(server: ScriptedModelServer, **extra: Any) -> dict[str, Any]:
    # A model the SDK does not know: its deprecation warnings (errors under pytest) stay out.
    return {"api_key": "test-key", "base_url": server.url, "model": MODEL, **extra}


def start(server: ScriptedModelServer, name: str = "claude-api", **extra: Any):
    return agents.start(Agent, name, backend=AnthropicAPI, backend_opts=options(server, **extra))


def messages_of(server: ScriptedModelServer, index: int) -> list[dict[str, Any]]:
    return server.model_requests()[index].body["messages"]


# -- turns through an agent ---------------------------------------------------------------


def test_a_text_turn_field_by_field_and_a_second_turn_with_history(
    server: ScriptedModelServer,
) -> None:
    server.enqueue(
        Reply.text("Hello there, friend.", input_tokens=12, output_tokens=7),
        Reply.text("Second answer.", model="claude-opus-test"),
    )
    agent = start(server, system="Be brief.", temperature=0.5, params={"top_p": 0.9})

    first = agent.ask("Say hello", timeout=WAIT_S)

    assert first.text == "Hello there, friend."
    assert first.final_message == "Hello there, friend."
    assert [e.kind for e in first.events] == ["text", "text", "text", "usage", "result"]
    assert [e.data["text"] for e in first.events[:3]] == ["Hello ", "there, ", "friend."]
    # message_delta usage is cumulative: 7 output tokens, not 1 (message_start) + 7.
    assert first.usage == {
        "input_tokens": 12,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert first.session_id is not None and first.session_id.startswith("anthropic-")
    assert (first.model, first.stop_reason, first.provider) == (MODEL, "end_turn", "anthropic")
    assert first.extra["message_id"].startswith("msg_")
    body = server.model_requests()[0].body
    assert body["messages"] == [{"role": "user", "content": "Say hello"}]
    assert (body["model"], body["max_tokens"], body["stream"]) == (MODEL, 1024, True)
    assert (body["system"], body["temperature"], body["top_p"]) == ("Be brief.", 0.5, 0.9)
    headers = server.model_requests()[0].headers
    assert headers["x-stainless-retry-count"] == "0"

    second = agent.ask("And again", timeout=WAIT_S)

    # model: what was asked for; provider_model: what the provider says it served.
    assert (second.text, second.model) == ("Second answer.", MODEL)
    assert (first.provider_model, second.provider_model) == (MODEL, "claude-opus-test")
    assert second.session_id == first.session_id
    assert messages_of(server, 1) == [
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": "Hello there, friend."},
        {"role": "user", "content": "And again"},
    ]
    gen_agent.stop("claude-api")


def test_a_tool_use_block_is_a_tool_use_event(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.tool_use("Bash", {"command": "ls -la"}, id="toolu_7", text="Looking."))
    agent = start(server)

    response = agent.ask("list files", timeout=WAIT_S)

    assert response.text == "Looking."
    assert response.stop_reason == "tool_use"
    assert [e.data for e in response.tool_calls] == [
        {"id": "toolu_7", "name": "Bash", "input": {"command": "ls -la"}}
    ]
    gen_agent.stop("claude-api")


def test_sdk_retries_are_configurable(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.http_error(529), Reply.text("after a retry"))
    agent = start(server, max_retries=1)

    assert agent.ask("x", timeout=WAIT_S).text == "after a retry"
    assert len(server.model_requests()) == 2
    gen_agent.stop("claude-api")


# -- the backend hooks directly -------------------------------------------------------------


def test_cancel_from_another_thread_ends_a_blocked_read(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.text("never", delay=60.0))
    session = AnthropicAPI.start_session(options(server))
    recorder = TurnRecorder()
    stream, session = AnthropicAPI.prompt(session, "x", recorder.context)
    reader, out = read_in_thread(stream)

    server.wait_requests(1, timeout=WAIT_S)
    recorder.cancel_event.set()
    AnthropicAPI.cancel(session)
    AnthropicAPI.cancel(session)  # idempotent
    reader.join(WAIT_S)

    assert not reader.is_alive()
    assert reason_of(out).kind == "cancelled"
    AnthropicAPI.terminate_session(session)
    AnthropicAPI.terminate_session(session)  # idempotent


def test_a_refused_or_empty_reply_is_kept_but_not_resent(server: ScriptedModelServer) -> None:
    server.enqueue(
        Reply.text("I can't help with that.", stop_reason="refusal"),
        Reply.message(),
        Reply.text("ok"),
    )
    session = AnthropicAPI.start_session(options(server))

    events, session, _ = run_turn(AnthropicAPI, session, "bad idea")
    assert events[-1].kind == "result"
    assert events[-1].data["stop_reason"] == "refusal"
    assert events[-1].data["finish_reason"] == "refusal"
    _, session, _ = run_turn(AnthropicAPI, session, "say nothing")
    events, session, _ = run_turn(AnthropicAPI, session, "fine")

    # The history keeps every delta; the refused and the empty turn are not resent.
    assert [m.role for m in session.history] == ["user", "assistant"] * 3
    assert session.turns == 3
    assert messages_of(server, 1) == [{"role": "user", "content": "say nothing"}]
    assert messages_of(server, 2) == [{"role": "user", "content": "fine"}]
    reasons = [d.reason for d in events[-1].data["history_dropped"]]
    assert reasons == ["refused_reply", "refused_reply", "empty_reply", "empty_reply"]
    AnthropicAPI.terminate_session(session)


def test_the_history_is_bounded(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.text("a1"), Reply.text("a2"), Reply.text("a3"))
    session = AnthropicAPI.start_session(options(server, max_history_messages=2))

    for prompt in ("u1", "u2", "u3"):
        _, session, _ = run_turn(AnthropicAPI, session, prompt)

    assert [(m.role, m.text) for m in session.history] == [("user", "u3"), ("assistant", "a3")]
    assert messages_of(server, 2)[0] == {"role": "user", "content": "u2"}
    AnthropicAPI.terminate_session(session)


@pytest.mark.parametrize("cap", [1, 3])
def test_an_odd_history_cap_never_starts_the_history_with_an_assistant_message(
        server: ScriptedModelServer, cap: int) -> None:
    # the provider rejects a conversation that starts with an assistant message
    server.enqueue(Reply.text("a1"), Reply.text("a2"), Reply.text("a3"))
    session = AnthropicAPI.start_session(options(server, max_history_messages=cap))

    for prompt in ("u1", "u2", "u3"):
        _, session, _ = run_turn(AnthropicAPI, session, prompt)

    assert [(m.role, m.text) for m in session.history[:1]] in ([], [("user", "u3")])
    for index in range(3):
        sent = messages_of(server, index)
        assert sent[0]["role"] == "user", (index, sent)
    AnthropicAPI.terminate_session(session)


def test_a_refused_connection_is_a_retryable_transport_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    session = AnthropicAPI.start_session({"api_key": "k", "base_url": url, "model": MODEL})

    events, _, _ = run_turn(AnthropicAPI, session, "x")

    reason = reason_of(events)
    assert (reason.kind, reason.retryable) == ("transport", True)
    assert isinstance(reason.raw, anthropic.APIConnectionError)
    AnthropicAPI.terminate_session(session)


# -- options ------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("timeout", math.nan, f"a finite number > 0 (seconds), at most {threading.TIMEOUT_MAX:.0f}"),
    ("timeout", math.inf, f"a finite number > 0 (seconds), at most {threading.TIMEOUT_MAX:.0f}"),
    ("temperature", math.nan, "a number from 0.0 to 1.0"),
    ("temperature", -math.inf, "a number from 0.0 to 1.0"),
    ("temperature", 1.5, "a number from 0.0 to 1.0"),
    ("temperature", -0.1, "a number from 0.0 to 1.0"),
])
def test_nan_infinities_and_out_of_range_numbers_are_refused_with_the_range(
    key: str, value: float, expected: str,
) -> None:
    with pytest.raises(SessionStartError) as info:
        AnthropicAPI.start_session({"api_key": "k", key: value})
    assert info.value.reason[:2] == ("invalid_option", key)
    assert str(info.value) == f"AnthropicAPI option {key!r} must be {expected}, got float"
    session = AnthropicAPI.start_session({"api_key": "k", key: 1.0})  # the edge is allowed
    AnthropicAPI.terminate_session(session)


def test_importing_gen_agent_and_its_backends_never_imports_an_sdk() -> None:
    code = (
        "import sys, gen_agent, gen_agent.backends.anthropic, gen_agent.backends.openai;"
        "print(sorted(m for m in ('anthropic', 'openai', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


# -- the SDK error boundary -----------------------------------------------------------------


def _status_classes() -> list[type]:
    found, todo = set(), [anthropic.APIStatusError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo += cls.__subclasses__()
    return sorted(found, key=lambda cls: cls.__name__)


def test_every_sdk_status_error_class_maps_to_its_http_kind() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    for cls in _status_classes():
        status = getattr(cls, "status_code", None)
        status = status if isinstance(status, int) else 500
        response = httpx2.Response(status, request=request, headers={"retry-after": "3"})
        body = {"type": "error", "error": {"type": "x", "message": "m"}}
        reason = _error_from_sdk(cls("m", response=response, body=body), anthropic)
        expected = BackendError.http("anthropic", status, body)
        assert reason is not None, cls
        assert (reason.kind, reason.retryable, reason.status) == (
            expected.kind,
            expected.retryable,
            status,
        ), cls
        assert (reason.retry_after, reason.message) == ("3", "m"), cls


def test_connection_errors_and_foreign_exceptions_at_the_boundary() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    timeout = _error_from_sdk(anthropic.APITimeoutError(request=request), anthropic)
    assert timeout is not None and (timeout.kind, timeout.retryable) == ("timeout", True)
    lost = _error_from_sdk(anthropic.APIConnectionError(request=request), anthropic)
    assert lost is not None and (lost.kind, lost.retryable) == ("transport", True)
    assert _error_from_sdk(ValueError("a bug"), anthropic) is None


# -- the pure translator --------------------------------------------------------------------


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def test_translator_joins_text_blocks_and_keeps_other_blocks() -> None:
    translator = AnthropicStreamTranslator("anthropic-1", "m")
    start = {"id": "msg_1", "model": "m2", "usage": {"input_tokens": 4, "output_tokens": 1}}
    thinking = {"type": "thinking_delta", "thinking": "hmm"}
    stream = [
        {"type": "message_start", "message": start},
        block_start(0, {"type": "thinking", "thinking": ""}),
        {"type": "content_block_delta", "index": 0, "delta": thinking},
        {"type": "content_block_stop", "index": 0},
        block_start(1, {"type": "text", "text": ""}),
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "A"}},
        {"type": "content_block_stop", "index": 1},
        block_start(2, {"type": "text", "text": "B"}),
        {"type": "content_block_stop", "index": 2},
        {"type": "mystery"},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
        {"type": "message_stop"},
    ]
    events = [event for raw in stream for event in translator.translate(raw)]

    assert [e.kind for e in events] == ["anthropic.thinking", "text", "text", "usage", "result"]
    assert events[0].data == {"type": "thinking", "thinking": "hmm"}
    assert events[3].data == {"input_tokens": 4, "output_tokens": 9}
    assert events[4].data == {
        "text": "AB",
        "session_id": "anthropic-1",
        "stop_reason": "end_turn",
        "finish_reason": "stop",
        "model": "m",
        "provider_model": "m2",
        "message_id": "msg_1",
        "response_id": "msg_1",
        "service_tier": None,
        "provider": "anthropic",
        "messages": (events[4].data["messages"][0],),
    }
    reply = events[4].data["messages"][0]
    assert [type(p).__name__ for p in reply.content] == ["ThinkingPart", "TextPart", "TextPart"]
    assert [reply.content[0].text, reply.content[1].text, reply.content[2].text] == [
        "hmm", "A", "B",
    ]
    assert reply.content[0].raw == {"type": "thinking", "thinking": "hmm"}
    assert (reply.provider, reply.id, reply.finish_reason) == ("anthropic", "msg_1", "stop")
    assert translator.truncated() is None


def test_translator_truncated_stream_and_unparsable_tool_input() -> None:
    translator = AnthropicStreamTranslator("anthropic-2")
    pieces = {"type": "input_json_delta", "partial_json": "{oops"}
    stream = [
        block_start(0, {"type": "tool_use", "id": "t", "name": "n", "input": {}}),
        {"type": "content_block_delta", "index": 0, "delta": pieces},
        {"type": "content_block_stop", "index": 0},
    ]
    events = [event for raw in stream for event in translator.translate(raw)]
    assert events[0].data == {"id": "t", "name": "n", "input": {"_unparsed": "{oops"}}

    end = translator.truncated()
    assert end is not None
    assert (end.data["reason"].kind, end.data["reason"].retryable) == ("stream_truncated", True)

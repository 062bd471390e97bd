"""`Fallback` over the official SDKs against one `ScriptedModelServer`: Anthropic first, OpenAI
second; the server's request log shows which provider was asked, in which order, with which
history."""

from __future__ import annotations

from typing import Any

import pytest

import gen_agent
from gen_agent._errors import AgentStartError, TurnError
from gen_agent.backend import BackendError, SessionStartError
from gen_agent.backends.fallback import Fallback
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.testing._openai_protocol import openai_base_url

from .conftest import Agent

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")


def _hops(server: ScriptedModelServer) -> list[tuple[Any, dict[str, Any]]]:
    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.backends.openai import OpenAIResponses

    return [
        (AnthropicAPI, {"api_key": "k", "base_url": server.url, "model": "claude-test"}),
        (OpenAIResponses, {"api_key": "k", "base_url": openai_base_url(server),
                           "model": "gpt-test", "store": False}),
    ]


def _start(server: ScriptedModelServer) -> None:
    gen_agent.start_agent(Agent, name="fb", backend=Fallback,
                          backend_opts={"hops": _hops(server)})


def _paths(server: ScriptedModelServer) -> list[str]:
    return [request.path for request in server.model_requests()]


def test_no_fallback_when_the_primary_answers() -> None:
    with ScriptedModelServer([Reply.text("from claude")]) as server:
        _start(server)
        response = gen_agent.ask("fb", "hi", timeout=30)
        assert response.text == "from claude"
        assert response.extra["fallback"] == {"fired": False, "hops": [
            {"provider": "anthropic", "model": "claude-test", "outcome": "ok",
             "error_kind": None, "duration_ms": response.extra["fallback"]["hops"][0][
                 "duration_ms"]}]}
        assert [e.kind for e in response.events].count("fallback") == 0
        assert _paths(server) == ["/v1/messages"]


def test_a_529_before_output_falls_back_and_the_conversation_goes_on_everywhere() -> None:
    replies = [Reply.http_error(529), Reply.text("from gpt"), Reply.text("claude again")]
    with ScriptedModelServer(replies) as server:
        _start(server)
        first = gen_agent.ask("fb", "question one", timeout=30)
        assert first.text == "from gpt"
        trail = first.extra["fallback"]
        assert trail["fired"] is True
        assert [(h["provider"], h["outcome"], h["error_kind"]) for h in trail["hops"]] == [
            ("anthropic", "error", "server_error"), ("openai", "ok", None)]
        assert first.events[0].kind == "fallback"
        # the next turn starts on the primary again, with the exchange in its history
        second = gen_agent.ask("fb", "question two", timeout=30)
        assert second.text == "claude again"
        assert second.extra["fallback"]["fired"] is False
        requests = server.model_requests()
        assert [r.path for r in requests] == ["/v1/messages", "/v1/responses", "/v1/messages"]
        assert requests[2].body["messages"] == [
            {"role": "user", "content": "question one"},
            {"role": "assistant", "content": "from gpt"},
            {"role": "user", "content": "question two"},
        ]


def test_no_fallback_once_output_has_started() -> None:
    replies = [Reply.stream_error("partial answer ", error_type="overloaded_error"),
               Reply.text("must not be asked")]
    with ScriptedModelServer(replies) as server:
        _start(server)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("fb", "hi", timeout=30)
        reason = info.value.reason
        assert isinstance(reason, BackendError)
        assert (reason.kind, reason.retryable) == ("server_error", True)  # mid-stream overload
        assert reason.diagnostics.partial_text == "partial answer "
        assert _paths(server) == ["/v1/messages"]
        assert gen_agent.whereis("fb") is not None


def test_a_non_retryable_error_does_not_fall_back() -> None:
    with ScriptedModelServer([Reply.http_error(400), Reply.text("no")]) as server:
        _start(server)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("fb", "hi", timeout=30)
        assert info.value.reason.kind == "invalid_request"
        assert info.value.reason.diagnostics.fallback["fired"] is False
        assert _paths(server) == ["/v1/messages"]


def test_when_every_hop_fails_the_error_carries_the_trail() -> None:
    with ScriptedModelServer([Reply.http_error(529), Reply.http_error(429)]) as server:
        _start(server)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("fb", "hi", timeout=30)
        reason = info.value.reason
        assert reason.provider == "openai"
        assert reason.kind == "rate_limited"
        hops = reason.diagnostics.fallback["hops"]
        assert [(h["provider"], h["error_kind"]) for h in hops] == [
            ("anthropic", "server_error"), ("openai", "rate_limited")]
        assert _paths(server) == ["/v1/messages", "/v1/responses"]


def test_bad_hops_are_refused_at_start() -> None:
    from gen_agent.backends.claude import ClaudeCLI

    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(Agent, name="x", backend=Fallback, backend_opts={"hops": []})
    assert info.value.reason == ("backend_start_failed", ("invalid_option", "hops", []))
    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(Agent, name="x", backend=Fallback,
                              backend_opts={"hops": [(ClaudeCLI, {}), (ClaudeCLI, {})]})
    assert info.value.reason == ("backend_start_failed",
                                 ("cli_backend_cannot_be_a_hop", "ClaudeCLI"))
    assert isinstance(info.value.__cause__, SessionStartError) or info.value.__cause__ is None

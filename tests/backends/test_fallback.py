
"""`Fallback` over the official SDKs against one `ScriptedModelServer`: Anthropic first, OpenAI
second; the server's request log shows which provider was asked, in which order, with which
history."""

from __future__ import annotations

import time
from typing import Any

import pytest
from _agents import start

import gen_agent
from gen_agent._errors import AgentStartError, TurnError
from gen_agent._limits import ProviderLimit
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


def _start(server: ScriptedModelServer, limits: Any = None) -> None:
    # fresh limits per test by default: a 429 hold must not carry over to another test
    limits = limits or [ProviderLimit("a"), ProviderLimit("o")]
    start(Agent, "fb", backend=Fallback,
          backend_opts={"hops": _hops(server), "limits": limits})


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
                 "duration_ms"], "held_until_ms": None}]}
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


# -- limits per hop -------------------------------------------------------------------------


def test_a_hop_held_by_retry_after_is_skipped_and_tokens_count_where_spent() -> None:
    first, second = ProviderLimit("anthropic-key"), ProviderLimit("openai-key")
    replies = [Reply.http_error(429, retry_after=30), Reply.text("from gpt"),
               Reply.text("gpt again")]
    with ScriptedModelServer(replies) as server:
        _start(server, [first, second])
        one = gen_agent.ask("fb", "one", timeout=30)
        assert one.text == "from gpt"
        assert 29_000 <= first.status().held_ms <= 30_000  # the 429 held its own hop
        assert second.status().held_ms == 0
        before = time.time() * 1000
        two = gen_agent.ask("fb", "two", timeout=30)
        assert two.text == "gpt again"
        hops = two.extra["fallback"]["hops"]
        assert [(h["provider"], h["outcome"], h["error_kind"]) for h in hops] == [
            ("anthropic", "skipped", "rate_limited"), ("openai", "ok", None)]
        assert before + 28_000 <= hops[0]["held_until_ms"] <= before + 30_500
        # the held hop was not asked again; the tokens count against the hop that spent them
        assert _paths(server) == ["/v1/messages", "/v1/responses", "/v1/responses"]
        assert first.status().tokens_last_minute == 0
        assert second.status().tokens_last_minute == one.usage["input_tokens"] + \
            one.usage["output_tokens"] + two.usage["input_tokens"] + two.usage["output_tokens"] > 0
        assert (first.status().in_flight, second.status().in_flight) == (0, 0)


def test_when_every_hop_is_held_the_turn_fails_at_once_with_the_earliest_hold() -> None:
    first, second = ProviderLimit("a-key"), ProviderLimit("o-key")
    first.hold(30_000)
    second.hold(4_000)
    with ScriptedModelServer([Reply.text("never")]) as server:
        _start(server, [first, second])
        with pytest.raises(TurnError) as info:
            gen_agent.ask("fb", "hi", timeout=30)
        reason = info.value.reason
        assert (reason.provider, reason.kind, reason.retryable) == ("openai", "rate_limited", True)
        assert reason.retry_after == "4" and 3_000 <= reason.retry_after_ms <= 4_000
        assert [h["outcome"] for h in reason.diagnostics.fallback["hops"]] == ["skipped"] * 2
        assert _paths(server) == []  # nothing was sent


def test_a_hops_default_limit_is_shared_per_provider_key() -> None:
    from gen_agent.backends.anthropic import AnthropicAPI

    key = Fallback.limit_key(AnthropicAPI, {"api_key": "secret", "base_url": "http://h"})
    assert key.startswith("anthropic:") and "secret" not in key
    assert key == Fallback.limit_key(AnthropicAPI, {"api_key": "secret", "base_url": "http://h"})
    assert key != Fallback.limit_key(AnthropicAPI, {"api_key": "other", "base_url": "http://h"})
    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(Agent, name="x", backend=Fallback, backend_opts={
            "hops": _hops_for_refusal(), "limits": [ProviderLimit("only-one")]})
    assert info.value.reason[1][:2] == ("invalid_option", "limits")


def _hops_for_refusal() -> list[tuple[Any, dict[str, Any]]]:
    from gen_agent.backends.anthropic import AnthropicAPI

    return [(AnthropicAPI, {"api_key": "k", "model": "m"})] * 2

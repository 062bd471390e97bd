"""What AnthropicAPI and OpenAIResponses share, one test body over the provider: errors that
fail a turn, the turn after a failure, reset, interrupt, and the option and SDK checks at
session start. What only one provider does stays in `test_anthropic.py` / `test_openai.py`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent._errors import TurnError
from gen_agent._response import Response
from gen_agent.backend import BackendError, SessionStartError
from gen_agent.backends import anthropic as anthropic_backend
from gen_agent.backends import openai as openai_backend
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.testing._openai_protocol import ResponsesReply, openai_base_url

from .conftest import Agent

WAIT_S = 10.0


@dataclass(frozen=True)
class Provider:
    """One provider's backend, its start options on the loopback server, and the checks that
    differ only in where the provider keeps the conversation."""

    name: str  # the SDK's module, the extra, and `BackendError.provider`
    backend: Any
    agent: str  # the agent's registered name
    module: Any  # gen_agent.backends.<name>
    options_struct: Any
    default_model: str
    env_var: str  # the API key's environment variable
    server_options: Callable[[ScriptedModelServer], dict[str, Any]]
    failure: Reply  # a reply that fails a turn
    assert_continues: Callable[[dict[str, Any], Response], None]  # 3rd body after ok/fail/ok
    assert_fresh: Callable[[dict[str, Any]], None]  # the body right after reset_session

    def sdk(self) -> Any:
        """The provider's SDK module (the test is skipped where it is not installed)."""
        return pytest.importorskip(self.name, reason=f"the {self.name} extra is not installed")

    def start(self, server: ScriptedModelServer, **extra: Any) -> gen_agent.AgentRef:
        self.sdk()
        return agents.start(Agent, self.agent, backend=self.backend,
                            backend_opts={**self.server_options(server), **extra})


def _anthropic_continues(body: dict[str, Any], first: Response) -> None:
    # The failed turn leaves no unanswered message in the history.
    assert body["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "third"},
    ]


def _openai_continues(body: dict[str, Any], first: Response) -> None:
    # The failed turn keeps the previous response for the next.
    assert body["previous_response_id"] == first.response_id


def _anthropic_fresh(body: dict[str, Any]) -> None:
    assert body["messages"] == [{"role": "user", "content": "fresh"}]


def _openai_fresh(body: dict[str, Any]) -> None:
    assert "previous_response_id" not in body


PROVIDERS = {
    "anthropic": Provider(
        "anthropic", anthropic_backend.AnthropicAPI, "claude-api",
        anthropic_backend, anthropic_backend.AnthropicOptions, "claude-sonnet-4-5",
        "ANTHROPIC_API_KEY",
        # A model the SDK does not know: its deprecation warnings (errors under pytest) stay out.
        lambda server: {"api_key": "test-key", "base_url": server.url, "model": "claude-test"},
        Reply.http_error(500), _anthropic_continues, _anthropic_fresh),
    "openai": Provider(
        "openai", openai_backend.OpenAIResponses, "gpt",
        openai_backend, openai_backend.OpenAIOptions, "gpt-5", "OPENAI_API_KEY",
        lambda server: {"api_key": "test-key", "base_url": openai_base_url(server)},
        ResponsesReply.failed("boom"), _openai_continues, _openai_fresh),
}


@pytest.fixture(params=list(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> Provider:
    return PROVIDERS[request.param]


def cases(argnames: Sequence[str], per_provider: dict[str, list[tuple[Any, ...]]]) -> list[Any]:
    """`pytest.param(provider_name, *case)` for every provider's cases, with ids like
    `anthropic-reply0-fields0`: the provider, then the case's index per argument."""
    return [
        pytest.param(name, *case, id="-".join([name, *(f"{arg}{i}" for arg in argnames)]))
        for name, rows in per_provider.items()
        for i, case in enumerate(rows)
    ]


# -- turns through an agent ---------------------------------------------------------------

# What `BackendError.raw` holds: the SDK's exception for an HTTP error status, else the
# stream's `error` event, the final `response` object, or nothing (a cut stream).
SDK_ERROR, ERROR_EVENT, RESPONSE, NOTHING = "sdk_error", "error_event", "response", "nothing"

ERRORS = {
    "anthropic": [
        (Reply.http_error(429, "slow down", retry_after=12),
         ("rate_limited", True, 429, "12", "slow down"), SDK_ERROR),
        (Reply.http_error(529, "Overloaded"),
         ("server_error", True, 529, None, "Overloaded"), SDK_ERROR),
        (Reply.http_error(401, "invalid x-api-key"),
         ("authentication", False, 401, None, "invalid x-api-key"), SDK_ERROR),
        (Reply.http_error(400, "bad"), ("invalid_request", False, 400, None, "bad"), SDK_ERROR),
        (Reply.stream_error("partial ", message="Overloaded"),
         ("server_error", True, None, None, "Overloaded"), ERROR_EVENT),
        (Reply.stream_error(error_type="rate_limit_error", message="later"),
         ("rate_limited", True, None, None, "later"), ERROR_EVENT),
    ],
    "openai": [
        (Reply.http_error(429, "slow down", retry_after=12),
         ("rate_limited", True, 429, "12", "slow down"), SDK_ERROR),
        (Reply.http_error(401, "bad key"),
         ("authentication", False, 401, None, "bad key"), SDK_ERROR),
        (Reply.http_error(503, "busy"), ("server_error", True, 503, None, "busy"), SDK_ERROR),
        (ResponsesReply.failed("boom", partial_text="partial "),
         ("response_failed", True, None, None, "boom"), RESPONSE),
        (ResponsesReply.failed("no", code="invalid_prompt"),
         ("response_failed", False, None, None, "no"), RESPONSE),
        (ResponsesReply.text("cut", stop_reason="max_tokens"),
         ("response_incomplete", False, None, None,
          "the response is incomplete: max_output_tokens"), RESPONSE),
        (Reply.text("I can't help with that.", stop_reason="refusal"),
         ("refusal", False, None, None, "I can't help with that."), RESPONSE),
        (ResponsesReply.error_event("bad", code="server_error"),
         ("stream_error", True, None, None, "bad"), ERROR_EVENT),
        (ResponsesReply.disconnect("part"),
         ("stream_truncated", True, None, None,
          "the OpenAI stream ended before response.completed"), NOTHING),
    ],
}


def raw_kind(raw: Any, sdk: Any) -> str:
    if isinstance(raw, sdk.APIError):
        return SDK_ERROR
    if raw is None:
        return NOTHING
    if raw.get("type") == "error":
        return ERROR_EVENT
    return RESPONSE if raw.get("object") == "response" else repr(raw)


@pytest.mark.parametrize(("name", "reply", "fields", "raw"),
                         cases(["reply", "fields"], ERRORS))
def test_errors_fail_the_turn_with_a_backend_error(
    server: ScriptedModelServer, name: str, reply: Reply, fields: tuple[Any, ...], raw: str,
) -> None:
    provider = PROVIDERS[name]
    server.enqueue(reply)
    agent = provider.start(server)

    with pytest.raises(TurnError) as info:
        agent.ask("x", timeout=WAIT_S)

    reason = info.value.reason
    assert isinstance(reason, BackendError)
    assert reason.provider == name
    assert (reason.kind, reason.retryable, reason.status, reason.retry_after, reason.message) == (
        fields
    )
    assert raw_kind(reason.raw, provider.sdk()) == raw
    if reason.status is None:  # failed on a stream the server answered with status 200
        assert reason.diagnostics.http_status == 200
    assert len(server.model_requests()) == 1  # no SDK retries
    gen_agent.stop(provider.agent)


def test_a_failed_turn_leaves_the_next_continuing_from_the_last_answer(
    server: ScriptedModelServer, provider: Provider,
) -> None:
    server.enqueue(Reply.text("one"), provider.failure, Reply.text("three"))
    agent = provider.start(server)

    first = agent.ask("first", timeout=WAIT_S)
    with pytest.raises(TurnError):
        agent.ask("second", timeout=WAIT_S)
    agent.ask("third", timeout=WAIT_S)

    provider.assert_continues(server.model_requests()[2].body, first)
    gen_agent.stop(provider.agent)


def test_reset_session_starts_a_new_conversation(
    server: ScriptedModelServer, provider: Provider,
) -> None:
    server.enqueue(Reply.text("one"), Reply.text("two"))
    agent = provider.start(server)
    agent.ask("first", timeout=WAIT_S)

    gen_agent.reset_session(provider.agent, timeout=WAIT_S)
    agent.ask("fresh", timeout=WAIT_S)

    provider.assert_fresh(server.model_requests()[1].body)
    gen_agent.stop(provider.agent)


def test_an_interrupt_ends_a_slow_request_at_once(
    server: ScriptedModelServer, provider: Provider,
) -> None:
    server.enqueue(Reply.text("too late", delay=60.0), Reply.text("next"))
    agent = provider.start(server)

    request = gen_agent.tell(provider.agent, "slow")
    server.wait_requests(1, timeout=WAIT_S)
    gen_agent.interrupt(provider.agent)

    assert agent.ask("again", timeout=WAIT_S).text == "next"
    assert gen_agent.poll(provider.agent, request).reason == "interrupted"
    gen_agent.stop(provider.agent)


# -- options and the SDK at session start ---------------------------------------------------


def test_options_are_the_struct_fields_and_the_default_model_is_the_contracts(
    provider: Provider,
) -> None:
    assert frozenset(provider.options_struct.__struct_fields__) == provider.module.OPTIONS
    model = provider.module.DEFAULT_MODEL
    assert provider.options_struct().model == model == provider.default_model


BAD_OPTIONS = {
    "anthropic": [
        ({"api_key": "k", "colour": 1}, ("unknown_option", "colour")),
        ({"api_key": "k", "max_tokens": 0}, ("invalid_option", "max_tokens", 0)),
        ({"api_key": "k", "params": {"stream": False}},
         ("invalid_option", "params", {"stream": False})),
        ({"api_key": "k", "timeout": -1}, ("invalid_option", "timeout", -1)),
        ("not a dict", ("invalid_options", "str")),
    ],
    "openai": [
        ({"api_key": "k", "colour": 1}, ("unknown_option", "colour")),
        ({"api_key": "k", "store": "yes"}, ("invalid_option", "store", "yes")),
        ({"api_key": "k", "params": {"input": "x"}}, ("invalid_option", "params", {"input": "x"})),
        ({"api_key": "k", "max_retries": -1}, ("invalid_option", "max_retries", -1)),
        (["x"], ("invalid_options", "list")),
    ],
}


@pytest.mark.parametrize(("name", "opts", "reason"), cases(["opts", "reason"], BAD_OPTIONS))
def test_bad_options_are_refused(name: str, opts: Any, reason: tuple[Any, ...]) -> None:
    with pytest.raises(SessionStartError) as info:
        PROVIDERS[name].backend.start_session(opts)
    assert info.value.reason == reason


def test_a_missing_api_key_is_a_start_error(
    monkeypatch: pytest.MonkeyPatch, provider: Provider,
) -> None:
    provider.sdk()
    monkeypatch.delenv(provider.env_var, raising=False)
    with pytest.raises(SessionStartError) as info:
        provider.backend.start_session({})
    assert (info.value.reason.provider, info.value.reason.kind) == (
        provider.name, "missing_api_key")


def test_a_missing_sdk_is_a_start_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, provider: Provider,
) -> None:
    monkeypatch.setitem(sys.modules, provider.name, None)  # makes `import <sdk>` fail
    with pytest.raises(SessionStartError) as info:
        provider.backend.start_session({"api_key": "k"})
    reason = info.value.reason
    assert reason.kind == "missing_sdk"
    assert f"pip install 'gen-agent[{provider.name}]'" in reason.message
    assert f"pip install 'gen-agent[{provider.name}]'" in str(info.value)

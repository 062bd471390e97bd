"""`str()` of every GenAgentError renders its whole reason, without payload text (#15)."""

from __future__ import annotations

from typing import Any

import pytest

import gen_agent
from gen_agent._errors import (
    AgentDown,
    AgentNotFound,
    AgentStartError,
    TurnError,
)
from gen_agent._reasons import describe_reason
from gen_agent._status import OverloadInfo
from gen_agent.backend import BackendError, SessionStartError
from gen_agent.backends.mock import MockBackend, text_turn


def test_reasons_render_whole_and_readably() -> None:
    assert describe_reason("timeout") == "timeout"
    assert describe_reason(("callback_failed", "error", "ValueError")) == \
        "callback_failed: error ValueError"
    assert describe_reason(("backend_start_failed", ("unknown_option", "modle"))) == \
        "backend_start_failed: unknown_option 'modle'"
    assert describe_reason(("agent_terminated", "shutdown")) == "agent_terminated: shutdown"
    assert describe_reason(("task_crashed", RuntimeError("secret text"))) == \
        "task_crashed: RuntimeError"
    info = OverloadInfo(queue="prompts", limit="count", pending_count=2, pending_bytes=10,
                        incoming_bytes=3, max_count=2, max_bytes=100)
    assert describe_reason(("overloaded", info)) == (
        "overloaded: OverloadInfo(queue=prompts, limit=count, pending_count=2, "
        "pending_bytes=10, incoming_bytes=3, max_count=2, max_bytes=100)")


def test_payload_text_stays_out() -> None:
    error = BackendError("anthropic", "rate_limited", True, 429, "2", "secret provider text")
    assert str(TurnError(error)) == "rate_limited (provider=anthropic, status=429, retry_after=2)"
    assert "secret" not in describe_reason(("wrapped", error))
    long = "x y " * 100
    assert len(describe_reason(("init_agent_failed", long))) < 120


def test_retry_after_ms_reads_seconds_and_http_dates() -> None:
    assert BackendError("openai", "rate_limited", retry_after="2").retry_after_ms == 2000
    assert BackendError("openai", "rate_limited", retry_after="0.25").retry_after_ms == 250
    assert BackendError("openai", "rate_limited").retry_after_ms is None
    assert BackendError("openai", "rate_limited", retry_after="soon").retry_after_ms is None
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert BackendError("openai", "rate_limited", retry_after=past).retry_after_ms == 0


def test_agent_not_found_names_the_agent() -> None:
    with pytest.raises(AgentNotFound) as info:
        gen_agent.ask("greeter", "hi", timeout=1)
    assert str(info.value) == "no agent named 'greeter'"
    assert info.value.last_exit is None and info.value.__cause__ is None


class _CrashOnReply(gen_agent.GenAgent):
    def init_agent(self, opts: dict) -> Any:
        return {"scripts": [text_turn("hi")]}, {}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        raise ValueError("the secret reply")


def test_agent_not_found_after_a_crash_says_how_the_name_ended() -> None:
    gen_agent.start_agent(_CrashOnReply, name="crashy", backend=MockBackend)
    with pytest.raises(AgentDown):
        gen_agent.ask("crashy", "hi", timeout=5)
    with pytest.raises(AgentNotFound) as info:
        gen_agent.ask("crashy", "again", timeout=5)
    assert info.value.last_exit == ("callback_failed", "error", "ValueError")
    assert str(info.value) == ("no agent named 'crashy' (the last agent of that name exited: "
                               "callback_failed: error ValueError)")
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "the secret reply"


def test_a_stopped_name_reports_its_shutdown_and_stays_reusable() -> None:
    gen_agent.start_agent(_CrashOnReply, name="again", backend=MockBackend)
    gen_agent.stop("again")
    with pytest.raises(AgentNotFound) as info:
        gen_agent.status("again", timeout=5)
    assert info.value.last_exit == "shutdown"
    gen_agent.start_agent(_CrashOnReply, name="again", backend=MockBackend)
    assert gen_agent.status("again", timeout=5).name == "again"


def test_a_turn_error_is_chained_to_the_exception_in_its_reason() -> None:
    exc = OSError("boom")
    assert TurnError(("task_crashed", exc)).__cause__ is exc
    backend = BackendError("openai", "server_error")
    assert TurnError(backend).__cause__ is backend
    assert TurnError("timeout").__cause__ is None


def test_backend_start_failed_shows_the_accepted_options() -> None:
    class Agent(gen_agent.GenAgent):
        def init_agent(self, opts: dict) -> tuple[dict, None]:
            return {"modle": "x"}, None

    from gen_agent.backends.anthropic import AnthropicAPI

    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(Agent, name="typo", backend=AnthropicAPI)
    assert info.value.reason == ("backend_start_failed", ("unknown_option", "modle"))
    assert isinstance(info.value.__cause__, SessionStartError)
    text = str(info.value)
    assert text.startswith("backend_start_failed: unknown_option 'modle' (unknown ")
    assert "accepted: " in text
    assert "model" in text and "max_tokens" in text


def test_already_started_names_the_agent() -> None:
    from gen_agent._errors import AlreadyStarted
    from gen_agent.backends.mock import MockBackend

    class Agent(gen_agent.GenAgent):
        def init_agent(self, opts: dict) -> tuple[dict, None]:
            return {}, None

    gen_agent.start_agent(Agent, name="greeter", backend=MockBackend)
    with pytest.raises(AlreadyStarted) as info:
        gen_agent.start_agent(Agent, name="greeter", backend=MockBackend)
    assert str(info.value) == "an agent named 'greeter' is already running"

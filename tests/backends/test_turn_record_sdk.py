
"""The whole record of a turn, end to end, for the SDK backends (official `anthropic` and
`openai` SDKs against ScriptedModelServer on 127.0.0.1): structured output sent with the
provider's own mechanism, `parsed`, a reply that fails validation, `messages`,
`finish_reason`, `provider_model`, per-turn `usage` and the running totals, field by field
over several turns."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from _agents import start

import gen_agent
from gen_agent._errors import TurnError
from gen_agent._output import schema_of
from gen_agent.backends.anthropic import AnthropicAPI
from gen_agent.backends.openai import OpenAIResponses
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.testing._openai_protocol import openai_base_url

from .conftest import Agent

pytest.importorskip("anthropic")
pytest.importorskip("openai")

WAIT_S = 10.0


class Verdict(msgspec.Struct, frozen=True):
    answer: str
    confidence: float


GOOD = '{"answer": "yes", "confidence": 0.75}'
BAD = '{"answer": "yes"}'


def _start(backend: Any, server: ScriptedModelServer, name: str) -> Any:
    if backend is AnthropicAPI:
        opts = {"api_key": "k", "base_url": server.url, "model": "claude-test"}
    else:
        opts = {"api_key": "k", "base_url": openai_base_url(server), "model": "gpt-test"}
    return start(Agent, name, backend=backend, backend_opts=opts)


def _schema_sent(backend: Any, body: dict[str, Any]) -> Any:
    if backend is AnthropicAPI:
        return body.get("output_config")
    return body.get("text")


@pytest.mark.parametrize("backend", [AnthropicAPI, OpenAIResponses], ids=["anthropic", "openai"])
def test_three_turns_field_by_field_with_a_validation_failure(backend: Any) -> None:
    replies = [
        Reply.text(GOOD, input_tokens=11, output_tokens=7, model="served-1"),
        Reply.text(BAD, input_tokens=13, output_tokens=3),
        Reply.text("plain words", input_tokens=17, output_tokens=2, stop_reason="max_tokens"),
    ]
    with ScriptedModelServer(replies) as server:
        agent = _start(backend, server, "record")
        first = agent.ask("judge", timeout=WAIT_S, output=Verdict)
        with pytest.raises(TurnError) as failed:
            agent.ask("judge again", timeout=WAIT_S, output=Verdict)
        # (OpenAI: max_output_tokens is an incomplete response, an error, not a record.)
        third = None if backend is OpenAIResponses else agent.ask("talk", timeout=WAIT_S)
        bodies = [r.body for r in server.model_requests()]
        gen_agent.stop("record")

    asked = "claude-test" if backend is AnthropicAPI else "gpt-test"
    provider = "anthropic" if backend is AnthropicAPI else "openai"
    # The schema went out with the provider's own structured-output option.
    if backend is AnthropicAPI:
        expected = {"format": {"type": "json_schema", "schema": schema_of(Verdict)}}
    else:
        expected = {"format": {"type": "json_schema", "name": "Verdict",
                               "schema": schema_of(Verdict), "strict": False}}
    assert _schema_sent(backend, bodies[0]) == expected
    assert _schema_sent(backend, bodies[1]) == expected
    # Turn 1: parsed, provenance, per-turn usage, the delta.
    assert first.parsed == Verdict(answer="yes", confidence=0.75)
    assert (first.text, first.finish_reason) == (GOOD, "stop")
    assert (first.provider, first.model, first.provider_model) == (provider, asked, "served-1")
    assert first.response_id is not None
    assert (first.usage["input_tokens"], first.usage["output_tokens"]) == (11, 7)
    assert first.session_usage is not None
    assert (first.session_usage["input_tokens"], first.session_usage["output_tokens"]) == (11, 7)
    assert first.cost_usd is None and first.session_cost_usd is None  # no cost reported
    assert [(m.role, m.text) for m in first.messages] == [("user", "judge"), ("assistant", GOOD)]
    assert first.messages[1].id == first.response_id
    # Turn 2: the reply did not validate; the reason carries the message and the raw record.
    kind, invalid = failed.value.reason
    assert kind == "invalid_output"
    assert invalid.message == "Object missing required field `confidence`"
    assert invalid.response.text == BAD and invalid.response.parsed is None
    assert (invalid.response.usage["input_tokens"], invalid.response.usage["output_tokens"]) == (
        13, 3)
    assert invalid.response.session_usage["output_tokens"] == 10
    assert invalid.response.provider_model == asked  # the scripted server echoes the request
    if third is not None:
        # Turn 3 continues the conversation, the refused reply included (a retry re-asks).
        assert bodies[2]["messages"][-3:] == [
            {"role": "user", "content": "judge again"},
            {"role": "assistant", "content": BAD},
            {"role": "user", "content": "talk"},
        ]
        assert "output_config" not in bodies[2]
        assert (third.parsed, third.finish_reason, third.stop_reason) == (
            None, "length", "max_tokens")
        assert (third.usage["input_tokens"], third.usage["output_tokens"]) == (17, 2)
        assert third.session_usage["input_tokens"] == 11 + 13 + 17
        assert third.service_tier == "standard"
    else:
        assert bodies[1]["previous_response_id"] == first.response_id


def test_openai_reports_tool_calls_as_the_finish_reason_and_in_the_delta() -> None:
    with ScriptedModelServer([Reply.tool_use("lookup", {"q": "x"}, id="call_1")]) as server:
        agent = _start(OpenAIResponses, server, "tools")
        response = agent.ask("find x", timeout=WAIT_S)
        gen_agent.stop("tools")

    assert response.finish_reason == "tool_calls"
    call = response.messages[1].content[-1]
    assert (type(call).__name__, call.id, call.name, call.input) == (
        "ToolCallPart", "call_1", "lookup", {"q": "x"})
    assert call.raw["type"] == "function_call"


def test_served_by_is_a_router_s_top_level_provider_field_when_there_is_one() -> None:
    # OpenRouter names the upstream host in a top-level `provider` field of the response.
    replies = [Reply.text("routed", response_fields={"provider": "DeepInfra"}),
               Reply.text("direct")]
    with ScriptedModelServer(replies) as server:
        agent = _start(OpenAIResponses, server, "routed")
        routed = agent.ask("one", timeout=WAIT_S)
        direct = agent.ask("two", timeout=WAIT_S)
        gen_agent.stop("routed")

    assert (routed.text, routed.served_by) == ("routed", "DeepInfra")
    assert (direct.text, direct.served_by) == ("direct", None)
    assert "served_by" not in routed.extra and "provider" not in routed.extra


def test_anthropic_reads_no_router_field_none_is_documented() -> None:
    # The Messages API documents no field or header naming an upstream host; a `provider`
    # field a router might add is not taken for one.
    replies = [Reply.text("routed", response_fields={"provider": "SomeHost"})]
    with ScriptedModelServer(replies) as server:
        agent = _start(AnthropicAPI, server, "anthropic-routed")
        response = agent.ask("one", timeout=WAIT_S)
        gen_agent.stop("anthropic-routed")

    assert (response.text, response.served_by, response.provider) == (
        "routed", None, "anthropic")

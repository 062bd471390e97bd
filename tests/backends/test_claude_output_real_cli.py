"""Structured output (gen_agent._output) through ClaudeCLI against the real Claude Code CLI and a
ScriptedModelServer on loopback, in warm and per-turn mode: the schema travels as
`--json-schema` (the CLI offers the model a `StructuredOutput` tool whose input schema is ours),
the result's `structured_output` is what is validated, and a warm process started with another
schema is replaced by one resuming the same session.

Skipped, with what to install, where the CLI is absent (fixtures of test_claude_real_cli.py).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import gen_agent
from gen_agent import TurnError
from gen_agent._conversation import TextPart, ToolCallPart, ToolResultPart
from gen_agent._output import schema_of
from gen_agent.backends.claude import ClaudeCLI, ClaudeSession
from gen_agent.testing._model_server import RecordedRequest, Reply, ScriptedModelServer

from .conftest import process_group_alive, wait_until
from .test_claude_real_cli import (  # noqa: F401 - fixtures
    MODEL,
    TURN_TIMEOUT_S,
    UUID,
    claude_cli,
    cli_options,
    sonnet_cost,
)
from .test_claude_warm_real_cli import WarmAgent

pytestmark = [pytest.mark.real_cli, pytest.mark.usefixtures("no_child_left")]


class Verdict(msgspec.Struct, frozen=True):
    answer: str
    confidence: float


class Tally(msgspec.Struct, frozen=True):
    count: int


def structured(answer: dict[str, Any], call_id: str, **fields: Any) -> Reply:
    """The model's answer through the CLI's StructuredOutput tool."""
    return Reply.tool_use("StructuredOutput", answer, id=call_id, **fields)


def offered_schema(request: RecordedRequest) -> Any:
    """The input schema of the StructuredOutput tool a request offered, or None."""
    for tool in request.body.get("tools") or ():
        if tool.get("name") == "StructuredOutput":
            return tool["input_schema"]
    return None


def history(request: RecordedRequest) -> list[tuple[str, str]]:
    """(role, what) of each content block a request carried: the user's texts without the
    CLI's system reminders, tool calls as `call:<id>`, tool results as `result:<id>`."""
    seen: list[tuple[str, str]] = []
    for message in request.body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            if block.get("type") == "text" and not block["text"].startswith("<system-reminder>"):
                seen.append((message["role"], block["text"]))
            elif block.get("type") == "tool_use":
                seen.append((message["role"], f"call:{block['id']}"))
            elif block.get("type") == "tool_result":
                seen.append((message["role"], f"result:{block['tool_use_id']}"))
    return seen


RESUMED: list[tuple[str, str]] = [
    ("user", "Continue from where you left off."), ("assistant", "No response requested.")]
"""What the CLI (2.1.197) puts into a resumed conversation whose transcript ends in a tool
result, as a StructuredOutput answer does: seen whenever a new process resumes (per-turn mode:
every turn; warm mode: after a schema-change restart)."""


def answered(prompt: str | None, call_id: str) -> list[tuple[str, str]]:
    """The history lines of a turn answered through StructuredOutput (`history`'s form)."""
    head = [] if prompt is None else [("user", prompt)]
    return [*head, ("assistant", f"call:{call_id}"), ("user", f"result:{call_id}")]


@pytest.fixture
def options(request: pytest.FixtureRequest):
    """`cli_options` (offline, on the scripted server) for either mode."""
    return request.getfixturevalue("cli_options")


def session_of(name: str) -> ClaudeSession:
    return gen_agent.backend_session(name, timeout=TURN_TIMEOUT_S)


def assert_structured_turn(response: Any, prompt: str, call_id: str, answer: dict[str, Any],
                           parsed: Any, tokens: tuple[int, int]) -> None:
    """The record of a turn the model answered through StructuredOutput, field by field."""
    assert response.parsed == parsed
    assert (response.finish_reason, response.stop_reason) == ("stop", "tool_use")
    assert (response.provider, response.model, response.provider_model) == (
        "claude", MODEL, MODEL)
    assert (response.usage["input_tokens"], response.usage["output_tokens"]) == tokens
    assert response.usage["cache_read_input_tokens"] == 0
    assert response.cost_usd == pytest.approx(sonnet_cost(*tokens))
    user, call, result = response.messages
    assert (user.role, user.content) == ("user", (TextPart(text=prompt),))
    assert call.role == "assistant"
    assert [(p.id, p.name, p.input) for p in call.content if isinstance(p, ToolCallPart)] == [
        (call_id, "StructuredOutput", answer)]
    (done,) = result.content
    assert isinstance(done, ToolResultPart) and done.tool_call_id == call_id
    assert done.is_error is False
    assert response.extra["structured_output"] == answer
    assert UUID.match(response.session_id)


@pytest.mark.parametrize("mode", ["warm", "per_turn"])
def test_agent_wide_output_a_per_request_type_and_a_reply_that_fails_validation(
        server: ScriptedModelServer, options, mode: str) -> None:
    server.enqueue(
        structured({"answer": "prime", "confidence": 0.9}, "toolu_v1",
                   input_tokens=12, output_tokens=7),
        structured({"answer": "composite", "confidence": 0.75}, "toolu_v2",
                   input_tokens=20, output_tokens=9),
        structured({"count": 3}, "toolu_t1", input_tokens=15, output_tokens=4),
        # A call that breaks the schema goes back to the model as an error; the model then
        # answers with text, the CLI asks once more for the tool, and gives up.
        structured({"answer": 5}, "toolu_bad", input_tokens=30, output_tokens=4),
        Reply.text("Sorry.", input_tokens=31, output_tokens=2),
        Reply.text("Sorry again.", input_tokens=32, output_tokens=3),
    )
    gen_agent.start_agent(WarmAgent, name="typed", backend=ClaudeCLI,
                          backend_opts=options(mode=mode), output=Verdict)
    first = gen_agent.ask("typed", "Is 7 prime?", timeout=TURN_TIMEOUT_S)
    pid = session_of("typed").pid
    second = gen_agent.ask("typed", "Is 9 prime?", timeout=TURN_TIMEOUT_S)
    same_pid = session_of("typed").pid
    tally = gen_agent.ask("typed", "How many primes below 6?", timeout=TURN_TIMEOUT_S,
                          output=Tally)
    tally_pid = session_of("typed").pid
    with pytest.raises(TurnError) as failed:
        gen_agent.ask("typed", "Is 11 prime?", timeout=TURN_TIMEOUT_S)
    slot = session_of("typed").warm
    last_pid = slot.pid
    gen_agent.stop("typed")

    assert_structured_turn(first, "Is 7 prime?", "toolu_v1",
                           {"answer": "prime", "confidence": 0.9}, Verdict("prime", 0.9),
                           (12, 7))
    assert_structured_turn(second, "Is 9 prime?", "toolu_v2",
                           {"answer": "composite", "confidence": 0.75},
                           Verdict("composite", 0.75), (20, 9))
    assert_structured_turn(tally, "How many primes below 6?", "toolu_t1", {"count": 3},
                           Tally(3), (15, 4))
    # Per-turn figures, running totals beside them.
    assert second.session_cost_usd == pytest.approx(sonnet_cost(12, 7) + sonnet_cost(20, 9))
    assert tally.session_cost_usd == pytest.approx(
        sonnet_cost(12, 7) + sonnet_cost(20, 9) + sonnet_cost(15, 4))
    assert (tally.session_usage["input_tokens"], tally.session_usage["output_tokens"]) == (
        47, 20)
    # One conversation throughout, also across the restarts a schema change costs.
    assert first.session_id == second.session_id == tally.session_id

    kind, invalid = failed.value.reason
    assert kind == "invalid_output" and invalid.message.startswith("JSON is malformed")
    bad = invalid.response
    assert bad.text == "Sorry again." and bad.parsed is None
    assert bad.session_id == first.session_id
    assert (bad.usage["input_tokens"], bad.usage["output_tokens"]) == (93, 9)
    assert bad.cost_usd == pytest.approx(sonnet_cost(93, 9))
    assert bad.session_cost_usd == pytest.approx(
        sonnet_cost(12, 7) + sonnet_cost(20, 9) + sonnet_cost(15, 4) + sonnet_cost(93, 9))
    assert bad.finish_reason == "stop"
    calls = [p for m in bad.messages for p in m.content if isinstance(p, ToolCallPart)]
    assert [(c.id, c.input) for c in calls] == [("toolu_bad", {"answer": 5})]

    # The schema reached the model: each request offered the turn's type as the tool's input.
    requests = server.model_requests()
    assert len(requests) == 6
    assert [offered_schema(r) for r in requests] == [
        schema_of(Verdict), schema_of(Verdict), schema_of(Tally), *[schema_of(Verdict)] * 3]
    # The history went on: the Tally request carries both earlier turns (with the CLI's
    # resume filler after each turn a new process resumed; warm: only after a restart).
    between = RESUMED if mode == "per_turn" else []
    assert history(requests[2]) == [
        *answered("Is 7 prime?", "toolu_v1"), *between, *answered("Is 9 prime?", "toolu_v2"),
        *RESUMED, ("user", "How many primes below 6?")]
    assert history(requests[3]) == [
        *history(requests[2]), *answered(None, "toolu_t1"), *RESUMED, ("user", "Is 11 prime?")]
    if mode == "warm":
        assert pid is not None and same_pid == pid  # one process while the schema stays
        assert tally_pid not in (None, pid)  # another schema: a new process...
        assert last_pid not in (None, tally_pid)  # ...and back again
        assert (slot.processes_started, slot.schema_restarts) == (3, 2)
        assert wait_until(lambda: not process_group_alive(last_pid))
    else:
        assert (pid, slot.processes_started) == (None, 0)


@pytest.mark.parametrize("mode", ["warm", "per_turn"])
def test_a_turn_without_output_after_one_with_it_offers_no_schema(
        server: ScriptedModelServer, options, mode: str) -> None:
    server.enqueue(structured({"count": 2}, "toolu_c1", input_tokens=11, output_tokens=3),
                   Reply.text("Two, as I said.", input_tokens=14, output_tokens=5))
    gen_agent.start_agent(WarmAgent, name="plain", backend=ClaudeCLI,
                          backend_opts=options(mode=mode))
    typed = gen_agent.ask("plain", "Count.", timeout=TURN_TIMEOUT_S, output=Tally)
    pid = session_of("plain").pid
    text = gen_agent.ask("plain", "Say it in words.", timeout=TURN_TIMEOUT_S)
    slot = session_of("plain").warm
    text_pid = slot.pid
    gen_agent.stop("plain")

    assert typed.parsed == Tally(2)
    assert text.parsed is None and text.text == "Two, as I said."
    assert (text.finish_reason, text.stop_reason) == ("stop", "end_turn")
    assert (text.usage["input_tokens"], text.usage["output_tokens"]) == (14, 5)
    assert text.cost_usd == pytest.approx(sonnet_cost(14, 5))
    assert text.session_cost_usd == pytest.approx(sonnet_cost(11, 3) + sonnet_cost(14, 5))
    assert [m.text for m in text.messages] == ["Say it in words.", "Two, as I said."]
    assert text.session_id == typed.session_id
    first, second = server.model_requests()
    assert offered_schema(first) == schema_of(Tally)
    assert offered_schema(second) is None
    assert "StructuredOutput" not in [t["name"] for t in second.body.get("tools") or ()]
    assert history(second) == [*answered("Count.", "toolu_c1"), *RESUMED,
                               ("user", "Say it in words.")]
    if mode == "warm":
        assert text_pid not in (None, pid)
        assert (slot.processes_started, slot.schema_restarts) == (2, 1)

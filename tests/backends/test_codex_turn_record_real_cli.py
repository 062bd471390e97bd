"""The whole record of a turn for CodexCLI, end to end: the real `codex` binary (from npm)
against `ScriptedModelServer` on 127.0.0.1, in both modes (`codex exec --json` per turn, and
one `codex app-server`). Structured output goes to the CLI natively (`--output-schema FILE` /
`outputSchema` in `turn/start`) and reaches the server as the Responses API's strict
`text.format`; `parsed`, `messages`, `finish_reason`, `provider_model`, per-turn `usage`,
`cost_usd` and the running totals are asserted field by field over several turns, including
a multi-request (tool) turn and a reply that fails validation. Skipped, with what to
install, where the CLI is absent (helpers shared with test_codex_real_cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _agents as agents
import msgspec
import pytest

import gen_agent
from gen_agent._conversation import Message, TextPart, ToolCallPart, ToolResultPart
from gen_agent._errors import TurnError
from gen_agent._output import InvalidOutput, strict_schema_of
from gen_agent._request_options import RequestOptions
from gen_agent._response import Response
from gen_agent.backends.codex import CodexCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .conftest import Agent, wait_until
from .test_codex_real_cli import REAL_CODEX, WAIT_S, loopback_options

pytestmark = REAL_CODEX


class Verdict(msgspec.Struct, frozen=True):
    answer: str
    confidence: float


GOOD_1 = '{"answer": "yes", "confidence": 0.75}'
GOOD_2 = '{"answer": "no", "confidence": 0.5}'
GOOD_4 = '{"answer": "maybe", "confidence": 0.25}'
BAD = '{"answer": "yes"}'
MODES = ["exec", "app_server"]


def start(name: str, server: ScriptedModelServer, tmp_path: Path, mode: str) -> Any:
    options = loopback_options(server, tmp_path, mode=mode)
    if mode == "app_server":
        options["approval_policy"] = "never"
    return agents.start(Agent, name, backend=CodexCLI, backend_opts=options)


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    """A Codex usage record as `Response.usage` holds it: the CLI's raw keys, then the
    normalized ones (the loopback server reports no cached or reasoning tokens)."""
    return {"input_tokens": input_tokens, "cached_input_tokens": 0,
            "cache_write_input_tokens": 0, "output_tokens": output_tokens,
            "reasoning_output_tokens": 0, "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0, "reasoning_tokens": 0}


def assistant(*parts: Any) -> Message:
    return Message(role="assistant", content=parts, provider="codex")


def only_text(messages: tuple[Message, ...]) -> list[tuple[str, list[str]]]:
    return [(m.role, [p.text for p in m.content if isinstance(p, TextPart)]) for m in messages]


@pytest.mark.parametrize("mode", MODES)
def test_four_turns_field_by_field_with_a_tool_turn_and_a_validation_failure(
    server: ScriptedModelServer, tmp_path: Path, schema_dir: Path, mode: str
) -> None:
    server.enqueue(
        Reply.text(GOOD_1, input_tokens=11, output_tokens=7, model="served-1"),
        Reply.tool_use("exec_command", {"cmd": "echo tool-ran"}, id="call_1",
                       input_tokens=13, output_tokens=4),
        Reply.text(GOOD_2, input_tokens=17, output_tokens=6),
        Reply.text(BAD, input_tokens=19, output_tokens=3),
        Reply.text(GOOD_4, input_tokens=23, output_tokens=5),
    )
    agent = start(f"record-{mode}", server, tmp_path, mode)

    first = agent.ask("judge", timeout=WAIT_S, output=Verdict)
    second = agent.ask("run echo, then judge", timeout=WAIT_S, output=Verdict)
    with pytest.raises(TurnError) as failed:
        agent.ask("judge again", timeout=WAIT_S, output=Verdict)
    fourth = agent.ask("last one", timeout=WAIT_S, output=Verdict)
    bodies = [r.body for r in server.model_requests()]
    gen_agent.stop(f"record-{mode}")

    # The schema reached the provider as the strict `text.format` Codex builds from it, on
    # every model request (the tool turn's two included).
    assert len(bodies) == 5
    expected_format = {"type": "json_schema", "strict": True, "name": "codex_output_schema",
                       "schema": strict_schema_of(Verdict)}
    assert [body["text"]["format"] for body in bodies] == [expected_format] * 5
    assert strict_schema_of(Verdict)["additionalProperties"] is False
    # The schema files of exec mode are gone once their turns ended.
    assert list(schema_dir.iterdir()) == []

    # Turn 1: parsed, provenance, this turn's usage, the delta as the stream showed it.
    assert first.parsed == Verdict(answer="yes", confidence=0.75)
    assert (first.text, first.finish_reason, first.stop_reason) == (GOOD_1, "stop", None)
    assert (first.provider, first.model) == ("codex", "gpt-test")
    # Codex reports no served model (the loopback server said "served-1"; neither the
    # exec JSONL nor the app-server notifications carry it) and no cost.
    assert first.provider_model is None
    assert (first.cost_usd, first.session_cost_usd) == (None, None)
    assert first.usage == usage(11, 7)
    assert first.session_usage == usage(11, 7)
    assert only_text(first.messages) == [("user", ["judge"]), ("assistant", [GOOD_1])]
    assert first.messages[1].provider == "codex"

    # Turn 2: two model requests (a tool call, then the answer): its usage sums both
    # (13 + 17 input, 4 + 6 output), not the thread's totals nor the last request's.
    assert second.parsed == Verdict(answer="no", confidence=0.5)
    assert (second.finish_reason, second.provider_model, second.cost_usd) == (
        "stop", None, None)
    assert second.usage == usage(30, 10)
    assert second.session_usage == usage(41, 17)
    assert [m.role for m in second.messages] == ["user", "assistant", "user", "assistant"]
    (call,) = second.messages[1].content
    assert isinstance(call, ToolCallPart)
    (result,) = second.messages[2].content
    assert isinstance(result, ToolResultPart)
    assert result.tool_call_id == call.id and call.id
    assert "echo tool-ran" in str(call.input)
    assert second.messages[3] == assistant(TextPart(text=GOOD_2))

    # Turn 3: the reply does not validate; the reason carries msgspec's message and the
    # turn's record with the raw text.
    kind, invalid = failed.value.reason
    assert kind == "invalid_output"
    assert isinstance(invalid, InvalidOutput)
    assert invalid.message == "Object missing required field `confidence`"
    record = invalid.response
    assert (record.text, record.parsed, record.finish_reason) == (BAD, None, "stop")
    assert record.usage == usage(19, 3)
    assert record.session_usage == usage(60, 20)
    assert only_text(record.messages) == [("user", ["judge again"]), ("assistant", [BAD])]

    # Turn 4: after the failure the thread goes on and the usage is still this turn's.
    assert fourth.parsed == Verdict(answer="maybe", confidence=0.25)
    assert fourth.usage == usage(23, 5)
    assert fourth.session_usage == usage(83, 25)
    assert {first.session_id, second.session_id, record.session_id, fourth.session_id} == {
        first.session_id}
    if mode == "exec":
        # What the CLI itself reported: the thread's running totals.
        assert fourth.terminal is not None
        raw = fourth.terminal.data["raw"]["usage"]
        assert (raw["input_tokens"], raw["output_tokens"]) == (83, 25)
    # The record round-trips with its parsed type.
    again = msgspec.json.decode(msgspec.json.encode(fourth), type=Response[Verdict])
    assert again.parsed == fourth.parsed and again.usage == fourth.usage


def test_a_turn_without_output_sends_no_schema_and_makes_no_file(
    server: ScriptedModelServer, tmp_path: Path, schema_dir: Path
) -> None:
    server.enqueue(Reply.text("plain words"))
    agent = start("plain", server, tmp_path, "exec")
    response = agent.ask("talk", timeout=WAIT_S)
    gen_agent.stop("plain")
    assert (response.text, response.parsed) == ("plain words", None)
    (request,) = server.model_requests()
    assert (request.body.get("text") or {}).get("format") is None
    assert list(schema_dir.iterdir()) == []


def test_an_interrupted_structured_turn_removes_its_schema_file(
    server: ScriptedModelServer, tmp_path: Path, schema_dir: Path
) -> None:
    server.enqueue(Reply.text(GOOD_1, delay=120.0), Reply.text(GOOD_2))
    agent = start("slow", server, tmp_path, "exec")
    request = gen_agent.tell("slow", "take your time", options=RequestOptions(output=Verdict))
    server.wait_requests(1, timeout=WAIT_S)
    (schema_file,) = schema_dir.iterdir()  # the CLI is running with it
    assert msgspec.json.decode(schema_file.read_bytes()) == strict_schema_of(Verdict)
    gen_agent.interrupt("slow")
    assert wait_until(lambda: gen_agent.poll("slow", request).status == "failed", WAIT_S)
    assert gen_agent.poll("slow", request).reason == "interrupted"
    # (removed by the turn task as its stream closes, which may end just after the poll)
    assert wait_until(lambda: list(schema_dir.iterdir()) == [], WAIT_S)
    after = agent.ask("again", timeout=WAIT_S, output=Verdict)
    assert after.parsed == Verdict(answer="no", confidence=0.5)
    assert list(schema_dir.iterdir()) == []
    gen_agent.stop("slow")

"""The guide's code: docs/examples/guide/*.py, and the example tests that the testing page
includes from this file (between the `--8<--` markers)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import gen_agent
from gen_agent import telemetry
from gen_agent.testing import ScriptedAgent, wait_for_state

from ._loader import EXAMPLES, load_example

first_agent = load_example("guide/first_agent")
echo_backend = load_example("guide/echo_backend")
telemetry_logging = load_example("guide/telemetry_logging")
offline_backends = load_example("guide/offline_backends")
reviewer = load_example("guide/reviewer")


def test_first_agent(capsys) -> None:
    text, notes = first_agent.first_ask()
    assert text == "Paris." and notes == ["Paris.", "About 2.1 million."]
    assert capsys.readouterr().out.splitlines()[2] == "('error', 'no_script')"


def test_first_ask_on_a_real_client() -> None:
    assert first_agent.first_ask_on_a_real_client() == "Bonjour !"


def test_the_echo_backend(capsys) -> None:
    echo_backend.main()
    assert capsys.readouterr().out.splitlines() == [
        "you said: hello there {'input_tokens': 2, 'output_tokens': 4} True",
        "empty_prompt", "timeout True"]


def test_the_echo_backend_rejects_unknown_options() -> None:
    with pytest.raises(gen_agent.AgentStartError) as refused:
        gen_agent.start_agent(echo_backend.Repeater, name="e", backend=echo_backend.EchoBackend,
                              backend_opts={"colour": "red"})
    assert refused.value.reason == ("backend_start_failed", ("unknown_option", "colour"))


def test_telemetry_and_logging() -> None:
    assert telemetry_logging.turn_durations() == [
        ("quiet", "ask", "ok", True), ("quiet", "tell", "backend_or_callback_error", True)]
    [line] = telemetry_logging.warnings_logged()
    assert line.startswith("WARNING [quiet Quiet] gen_agent post_turn/3 raised (error: "
                           "ValueError at ")
    assert line.endswith("telemetry_logging.py:25 in post_turn)\n")


def test_the_http_backends_offline() -> None:
    expected = ("Hello from the scripted server.", "rate_limited", 429, True, "2")
    assert offline_backends.run() == [("anthropic", expected[0], "anthropic", *expected[1:]),
                                      ("openai", expected[0], "openai", *expected[1:])]


def test_tools_with_a_permission_policy_and_an_agent_tool(capsys) -> None:
    load_example("guide/tools").main()
    assert capsys.readouterr().out.splitlines() == [
        "Ship on Friday. | notes.txt is protected | deleted tmp.txt | Looks right to me.",
        "tool calls: ['read_file', 'delete_file', 'delete_file', 'ask_reviewer']",
        "agent calls: [('reviewer', 'ok')]"]


def test_the_tools_recipe_on_anthropic_with_an_openai_fallback(capsys) -> None:
    assert load_example("guide/tools_fallback").main() == [
        "Faster turns. / published 'v2.0'",
        "fallback: anthropic:error -> openai:ok",
        "tools: read_file, publish",
        "permissions: allow, allow",
        "messages: user, assistant, user, assistant",
    ]


def test_streaming_threaded_then_async(capsys) -> None:
    load_example("guide/streaming").main()
    assert capsys.readouterr().out.splitlines() == [
        "Once upon a time.", "turns: 1", "The end.", "usage: {'output_tokens': 2}", "turns: 2"]


# (first_agent and offline_backends import the provider SDKs, about a second each: their
# functions are tested above, in-process.)
@pytest.mark.parametrize("name", ["echo_backend", "telemetry_logging", "streaming", "tools"])
def test_the_guide_scripts_run(name: str) -> None:
    done = subprocess.run([sys.executable, f"docs/examples/guide/{name}.py"],
                          cwd=EXAMPLES.parents[1], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip()


# --8<-- [start:plugin-test]
def test_a_queued_prompt_waits_for_the_running_turn(agent_system, mock_backend) -> None:
    gate = mock_backend.gate(mock_backend.text("first"))
    agent = gen_agent.start_agent(ScriptedAgent, name="a", backend=mock_backend.backend,
                                  **mock_backend.options(gate, mock_backend.echo("re: ")))
    agent.tell("one")
    gate.wait_blocked(5)                      # the first turn is in flight, held
    agent.tell("two")
    wait_for_state(agent, lambda s: s.queued == 1)
    gate.release()
    wait_for_state(agent, lambda s: s.state == "idle" and len(s.agent_state) == 2)
    assert agent.status().agent_state == ["first", "re: two"]
    assert mock_backend.history("a") == ["one", "two"]
# --8<-- [end:plugin-test]


# --8<-- [start:telemetry-test]
def test_a_watchdog_timeout_is_one_turn_error(agent_system, mock_backend,
                                              telemetry_recorder) -> None:
    never = mock_backend.gate()               # released by nobody: the watchdog fires
    agent = gen_agent.start_agent(ScriptedAgent, name="a", backend=mock_backend.backend,
                                  watchdog_ms=50, **mock_backend.options(never))
    with pytest.raises(gen_agent.TurnError) as failed:
        agent.ask("hello", timeout=5)
    assert failed.value.reason == "timeout"
    record = telemetry_recorder.wait_for(telemetry.TURN_ERROR)
    assert record.metadata["reason_kind"] == "timeout"
    assert telemetry_recorder.named(telemetry.TURN_STOP) == []
# --8<-- [end:telemetry-test]


# --8<-- [start:server-test]
def test_an_http_backend_against_the_scripted_server(agent_system,
                                                     scripted_model_server) -> None:
    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.testing import Reply

    scripted_model_server.enqueue(Reply.text("It works."))
    agent = gen_agent.start_agent(
        first_agent.NoteTaker, name="a", backend=AnthropicAPI,
        backend_opts={"base_url": scripted_model_server.url, "api_key": "test",
                      "model": "scripted-model"})
    assert agent.ask("Does it work?", timeout=10).text == "It works."
    assert scripted_model_server.model_requests()[-1].body["messages"][-1] == {
        "role": "user", "content": "Does it work?"}
# --8<-- [end:server-test]


# --8<-- [start:mock-test]
def test_the_reviewer_on_the_mock(agent_system) -> None:
    from gen_agent.backends import mock
    from gen_agent.backends.mock import MockBackend

    # The Reviewer class, unchanged: the scripts come with the backend.
    backend = MockBackend.with_options(scripts=[mock.tool_round(
        [("count_lines", {"text": "a\nb\nc"})],
        mock.text_turn('{"approve": false, "reason": "Too long."}'))])
    agent = gen_agent.start_agent(reviewer.Reviewer, name="reviewer", backend=backend)
    response = agent.ask("Review this diff:\na\nb\nc", output=reviewer.Verdict, timeout=10)

    assert response.parsed == reviewer.Verdict(approve=False, reason="Too long.")
    results = [e.data["content"] for e in response.events if e.kind == "tool_result"]
    assert results == ["3"]                   # the agent's real count_lines ran
    options = gen_agent.backend_session("reviewer").options  # recorded by the mock
    assert options["model"] == "claude-sonnet-4-5" and "count_lines" in options["system"]
    assert agent.status().agent_state == {"reviewed": 1}
# --8<-- [end:mock-test]


def test_the_same_reviewer_on_the_anthropic_api(scripted_model_server, monkeypatch) -> None:
    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.testing import Reply

    monkeypatch.setenv("ANTHROPIC_BASE_URL", scripted_model_server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "offline")
    scripted_model_server.enqueue(
        Reply.tool_use("count_lines", {"text": reviewer.DIFF}),
        Reply.text('{"approve": true, "reason": "A one-word change."}'))
    verdict = reviewer.review(reviewer.DIFF, AnthropicAPI)

    assert verdict == reviewer.Verdict(approve=True, reason="A one-word change.")
    first, second = (r.body for r in scripted_model_server.model_requests())
    assert (first["model"], first["max_tokens"]) == ("claude-sonnet-4-5", 1024)
    assert first["system"].startswith("You review diffs.")
    assert [tool["name"] for tool in first["tools"]] == ["count_lines"]
    assert first["output_config"]["format"]["type"] == "json_schema"
    [result] = [block for block in second["messages"][-1]["content"]
                if block["type"] == "tool_result"]
    assert result["content"] == "4"           # the same count_lines ran, on the real client


def test_the_reviewer_script_runs_offline(monkeypatch, capsys) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    reviewer.main()
    assert capsys.readouterr().out == (
        "Verdict(approve=True, reason='A one-word change.')\n")

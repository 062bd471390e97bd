"""CodexCLI end to end: the real `codex` binary (from npm) against `ScriptedModelServer` on
127.0.0.1, driven through an agent. Skipped, with what to install, where the CLI is absent.

The CLI gets a private CODEX_HOME whose config.toml (`codex_loopback_config`) points its only
model provider at the loopback server and turns off everything that would reach other hosts.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent._errors import TurnError
from gen_agent.backend import BackendError
from gen_agent.backends.codex import CodexCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.testing._openai_protocol import ResponsesReply, codex_loopback_config

from .conftest import Agent, process_group_alive, wait_until

ROOT = Path(__file__).resolve().parents[2]
NPM_BIN = ROOT / ".venv" / "npm" / "node_modules" / ".bin"
WAIT_S = 60.0  # one real CLI turn takes about a second; leave room for a loaded machine
THREAD_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _find_codex() -> str | None:
    explicit = os.environ.get("GEN_AGENT_CODEX_CLI")
    if explicit:
        return explicit
    return shutil.which("codex", path=f"{NPM_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


CODEX = _find_codex()

#: The marks of every test that runs the real Codex CLI (its folder's modules share them).
REAL_CODEX = [
    pytest.mark.real_cli,
    pytest.mark.usefixtures("no_child_left"),
    pytest.mark.skipif(
        CODEX is None,
        reason="the real Codex CLI is not installed: needs node and npm, then "
        "`npm install --prefix .venv/npm @openai/codex` (or set GEN_AGENT_CODEX_CLI)",
    ),
]
pytestmark = REAL_CODEX


def loopback_options(server: ScriptedModelServer, tmp_path: Path, **extra: Any) -> dict:
    """CodexCLI options for the real CLI against the loopback `server`: its own CODEX_HOME
    (config pointing at the server), working folder and a bare environment; `extra` added."""
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(codex_loopback_config(server))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    assert CODEX is not None
    return {
        "cli_path": CODEX,
        "codex_home": str(home),
        "cwd": str(work),
        "model": "gpt-test",
        "inherit_env": False,
        "env": {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "GEN_AGENT_LOOP_KEY": "dummy-key",
        },
        **extra,
    }


def start(name: str, server: ScriptedModelServer, tmp_path: Path, **extra: Any):
    options = loopback_options(server, tmp_path, **extra)
    return agents.start(Agent, name, backend=CodexCLI, backend_opts=options)


def user_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for item in body["input"]:
        if item.get("type") == "message" and item.get("role") == "user":
            texts += [part["text"] for part in item["content"] if part.get("type") == "input_text"]
    return texts


def assistant_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for item in body["input"]:
        if item.get("type") == "message" and item.get("role") == "assistant":
            texts += [part["text"] for part in item["content"] if part.get("type") == "output_text"]
    return texts


def test_a_text_turn_and_its_resumed_second_turn(server: ScriptedModelServer, tmp_path: Path):
    server.enqueue(
        ResponsesReply.text("Hello from codex loopback.", reasoning_tokens=2, input_tokens=12),
        Reply.text("Second answer.", input_tokens=30, output_tokens=3),
    )
    agent = start("codex-real", server, tmp_path)

    first = agent.ask("Say hello", timeout=WAIT_S)

    assert first.text == "Hello from codex loopback."
    assert first.final_message == "Hello from codex loopback."
    assert first.session_id is not None and THREAD_ID.match(first.session_id)
    assert (first.model, first.provider) == ("gpt-test", "codex")
    assert first.usage == {
        "input_tokens": 12,
        "cached_input_tokens": 0,
        "cache_write_input_tokens": 0,
        "output_tokens": 5,
        "reasoning_output_tokens": 2,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "reasoning_tokens": 2,
    }
    assert first.tool_calls == []
    assert first.terminal is not None and first.terminal.kind == "result"
    assert "text" not in first.terminal.data
    warnings = [e.data for e in first.events if e.kind == "codex.item"]
    assert [w["type"] for w in warnings] == ["error"]  # unknown model metadata, not fatal
    assert [e.kind for e in first.events][-3:] == ["text", "usage", "result"]
    (request,) = server.model_requests()
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == "Bearer dummy-key"
    assert (request.body["model"], request.body["stream"]) == ("gpt-test", True)
    assert user_texts(request.body)[-1] == "Say hello"

    second = agent.ask("And again", timeout=WAIT_S)

    assert second.text == "Second answer."
    assert second.session_id == first.session_id
    resumed = server.model_requests()[1].body
    assert assistant_texts(resumed) == ["Hello from codex loopback."]
    assert user_texts(resumed)[-2:] == ["Say hello", "And again"]
    # The CLI reports the usage of the whole thread (42/8) when it resumes one; the
    # Response carries this turn's: the difference from the first turn's totals.
    assert second.usage is not None
    assert (second.usage["input_tokens"], second.usage["output_tokens"]) == (30, 3)
    assert second.terminal is not None
    assert second.terminal.data["raw"]["usage"]["input_tokens"] == 42
    assert second.terminal.data["thread_usage"]["output_tokens"] == 8
    gen_agent.stop("codex-real")


def test_the_cli_really_runs_a_tool(server: ScriptedModelServer, tmp_path: Path) -> None:
    server.enqueue(
        Reply.tool_use("exec_command", {"cmd": "echo tool-ran"}, id="call_1"),
        Reply.text("The command printed tool-ran."),
    )
    agent = start("codex-tool", server, tmp_path)

    response = agent.ask("Run echo tool-ran", timeout=WAIT_S)

    assert response.text == "The command printed tool-ran."
    (call,) = response.tool_calls
    assert call.data["type"] == "command_execution"
    assert "echo tool-ran" in call.data["command"]
    assert (call.data["aggregated_output"], call.data["exit_code"]) == ("tool-ran\n", 0)
    results = [e.data for e in response.events if e.kind == "tool_result"]
    assert results == [call.data]
    follow_up = server.model_requests()[1].body["input"]
    outputs = [item for item in follow_up if item.get("type") == "function_call_output"]
    assert [item["call_id"] for item in outputs] == ["call_1"]
    assert "tool-ran" in str(outputs[0]["output"])
    gen_agent.stop("codex-tool")


def test_failed_turns_carry_backend_errors_and_the_thread_goes_on(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.enqueue(
        ResponsesReply.failed("boom", code="server_error", partial_text="Partial "),
        Reply.http_error(401, "bad key"),
        Reply.text("Recovered."),
    )
    agent = start("codex-errors", server, tmp_path)

    with pytest.raises(TurnError) as failed:
        agent.ask("first", timeout=WAIT_S)
    reason = failed.value.reason
    assert isinstance(reason, BackendError)
    assert (reason.provider, reason.kind, reason.retryable) == ("codex", "turn_failed", False)
    assert reason.message == "stream disconnected before completion: boom"

    with pytest.raises(TurnError) as unauthorized:
        agent.ask("second", timeout=WAIT_S)
    reason = unauthorized.value.reason
    assert (reason.kind, reason.status, reason.retryable) == ("authentication", 401, False)

    recovered = agent.ask("third", timeout=WAIT_S)
    assert recovered.text == "Recovered."
    # The thread id was checkpointed by the first (failed) turn and resumed ever since.
    requests = server.model_requests()
    assert len(requests) == 3
    assert user_texts(requests[2].body)[-3:] == ["first", "second", "third"]
    gen_agent.stop("codex-errors")


def test_an_interrupt_during_a_slow_reply_kills_the_cli(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.enqueue(Reply.text("too late", delay=120.0), Reply.text("After the interrupt."))
    agent = start("codex-slow", server, tmp_path)

    request = gen_agent.tell("codex-slow", "take your time")
    server.wait_requests(1, timeout=WAIT_S)
    pid = gen_agent.backend_session("codex-slow").last_child.pid
    gen_agent.interrupt("codex-slow")

    assert wait_until(lambda: not process_group_alive(pid), WAIT_S)
    assert wait_until(lambda: gen_agent.poll("codex-slow", request).status == "failed", WAIT_S)
    assert gen_agent.poll("codex-slow", request).reason == "interrupted"
    assert agent.ask("again", timeout=WAIT_S).text == "After the interrupt."
    gen_agent.stop("codex-slow")

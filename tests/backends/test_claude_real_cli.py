"""ClaudeCLI in per-turn mode against the real Claude Code CLI (npm
`@anthropic-ai/claude-code`), talking to a ScriptedModelServer on loopback. `make test`
installs the CLI into `.venv/npm/` when node and npm are present; without it these tests are
skipped, saying what to install.

The CLI runs with a temporary HOME, a dummy API key and every non-essential traffic switched off,
so nothing leaves 127.0.0.1. The model is pinned to `claude-sonnet-4-5` so that the cost the CLI
computes is known: $3 per million input tokens and $15 per million output tokens.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

import gen_agent
from gen_agent import TurnError
from gen_agent._event import Event
from gen_agent._response import Response
from gen_agent.backend import BackendError
from gen_agent.backends.claude import ClaudeCLI, ClaudeSession
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .conftest import Agent as CliAgent
from .conftest import TurnRecorder, kinds, process_group_alive, run_turn, wait_until

pytestmark = [pytest.mark.real_cli, pytest.mark.usefixtures("no_child_left")]

ROOT = Path(__file__).resolve().parents[2]
INSTALLED_CLI = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"
MODEL = "claude-sonnet-4-5"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TURN_TIMEOUT_S = 90.0


def sonnet_cost(input_tokens: int, output_tokens: int) -> float:
    return input_tokens * 3e-6 + output_tokens * 15e-6


def find_cli() -> str | None:
    explicit = os.environ.get("GEN_AGENT_CLAUDE_CLI")
    if explicit:
        return explicit
    if INSTALLED_CLI.exists():
        return str(INSTALLED_CLI)
    return None


@pytest.fixture
def claude_cli() -> str:
    cli = find_cli()
    if cli is None:
        missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
        why = f"{' and '.join(missing)} not found; " if missing else ""
        pytest.skip(
            f"the real Claude Code CLI is not installed ({why}install node and npm, then run "
            "`make test`, which runs `npm install --prefix .venv/npm @anthropic-ai/claude-code`;"
            " or set GEN_AGENT_CLAUDE_CLI to a `claude` executable)"
        )
    return cli


@pytest.fixture
def cli_options(claude_cli: str, server: ScriptedModelServer, tmp_path: Path):
    """Backend options that keep the real CLI offline, on the scripted server."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()

    def options(**extra: Any) -> dict[str, Any]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-dummy-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            **extra.pop("env", {}),
        }
        return {
            "cli_path": claude_cli,
            "cwd": str(work),
            "env": env,
            "inherit_env": False,
            "model": MODEL,
            "mode": "per_turn",  # this module tests per-turn mode; warm mode has its own
            **extra,
        }

    return options


def user_text(request: Any) -> str:
    """All text of the last user message of a recorded /v1/messages request."""
    content = request.body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


# -- backend level ---------------------------------------------------------------------------


def test_text_turn(server: ScriptedModelServer, cli_options):
    server.enqueue(Reply.text("Hello from the loopback model.", input_tokens=12, output_tokens=7))
    session = ClaudeCLI.start_session(cli_options())
    events, session, recorder = run_turn(ClaudeCLI, session, "Say hello.")

    assert kinds(events) == ["session", "text", "usage", "result"]
    started, text, usage, result = events
    session_id = started.data["session_id"]
    assert UUID.match(session_id)
    assert started.data["model"] == MODEL
    assert text.data == {"text": "Hello from the loopback model.", "message_boundary": True}
    assert usage.data == {
        "input_tokens": 12,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert result.data["text"] == "Hello from the loopback model."
    assert result.data["session_id"] == session_id
    assert result.data["is_error"] is False
    assert result.data["subtype"] == "success"
    assert result.data["stop_reason"] == "end_turn"

    response = Response.from_events(events, session_id=result.data["session_id"])
    assert response.text == "Hello from the loopback model."
    assert response.final_message == "Hello from the loopback model."
    assert response.usage == usage.data
    assert response.session_id == session_id
    assert response.model == MODEL
    assert response.num_turns == 1
    assert response.cost_usd == pytest.approx(sonnet_cost(12, 7))
    assert response.tool_calls == []
    assert response.provider == "claude"

    assert recorder.checkpoints == [session_id]
    assert session.session_id == session_id
    (request,) = server.model_requests()
    assert request.path == "/v1/messages"
    assert request.body["stream"] is True
    assert request.body["model"] == MODEL
    assert request.headers["x-api-key"] == "sk-ant-test-dummy-key"
    assert "Say hello." in user_text(request)
    assert session.last_child.wait_reaped(10) and session.last_child.returncode == 0


def test_tool_turn_really_runs_bash(server: ScriptedModelServer, cli_options):
    command = {"command": "echo tool-ran", "description": "say"}
    server.enqueue(
        Reply.tool_use(
            "Bash", command, id="toolu_01", text="Let me check.", input_tokens=30, output_tokens=12
        ),
        Reply.text("The command printed tool-ran.", input_tokens=30, output_tokens=17),
    )
    session = ClaudeCLI.start_session(cli_options(allowed_tools=["Bash"]))
    events, _, _ = run_turn(ClaudeCLI, session, "Run echo.")

    assert kinds(events) == [
        "session", "text", "tool_use", "tool_result", "text", "usage", "result",
    ]  # fmt: skip
    _, first, tool_use, tool_result, second, usage, result = events
    assert first.data == {"text": "Let me check.", "message_boundary": True}
    assert tool_use.data == {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": command}
    assert tool_result.data["tool_use_id"] == "toolu_01"
    assert tool_result.data["content"] == "tool-ran"  # the CLI really ran the command
    assert tool_result.data["is_error"] is False
    assert second.data == {"text": "The command printed tool-ran.", "message_boundary": True}
    assert usage.data["input_tokens"] == 60 and usage.data["output_tokens"] == 29

    response = Response.from_events(events, session_id=result.data["session_id"])
    assert response.text == "The command printed tool-ran."
    assert response.final_message == "The command printed tool-ran."
    assert response.tool_calls == [tool_use]
    assert response.num_turns == 2
    assert response.model == MODEL
    assert response.cost_usd == pytest.approx(sonnet_cost(60, 29))
    assert UUID.match(response.session_id)

    _, second_request = server.model_requests()
    results = [
        block
        for block in second_request.body["messages"][-1]["content"]
        if block.get("type") == "tool_result"
    ]
    assert [(b["tool_use_id"], b["content"]) for b in results] == [("toolu_01", "tool-ran")]


def test_second_turn_resumes_the_conversation(server: ScriptedModelServer, cli_options):
    server.enqueue(Reply.text("The secret word is plum."), Reply.text("You asked about plum."))
    session = ClaudeCLI.start_session(cli_options())
    first, session, _ = run_turn(ClaudeCLI, session, "Remember a word.")
    session_id = first[-1].data["session_id"]
    assert session.session_id == session_id

    assert "--resume" in ClaudeCLI.command(session, "x")
    second, session, recorder = run_turn(ClaudeCLI, session, "Which word?")
    assert second[-1].kind == "result"
    assert second[-1].data["text"] == "You asked about plum."
    assert second[-1].data["session_id"] == session_id  # the same conversation
    assert recorder.checkpoints == [session_id]
    assert session.turns == 2

    history = server.model_requests()[1].body["messages"]
    assistant_texts = [
        block.get("text")
        for message in history
        if message["role"] == "assistant"
        for block in message["content"]
    ]
    assert "The secret word is plum." in assistant_texts
    assert "Which word?" in user_text(server.model_requests()[1])


def test_cancel_during_a_slow_reply_kills_the_process_group(
    server: ScriptedModelServer, cli_options
):
    server.enqueue(Reply.text("never sent", delay=120))
    session = ClaudeCLI.start_session(cli_options())
    recorder = TurnRecorder()
    stream, session = ClaudeCLI.prompt(session, "Take your time.", recorder.context)
    events: queue.Queue[Event] = queue.Queue()
    reader = threading.Thread(target=lambda: [events.put(e) for e in stream], daemon=True)
    reader.start()
    server.wait_model_requests(1, timeout=TURN_TIMEOUT_S)
    child = session.last_child

    recorder.cancel_event.set()
    ClaudeCLI.cancel(session)
    reader.join(TURN_TIMEOUT_S)
    assert not reader.is_alive()
    seen = [events.get_nowait() for _ in range(events.qsize())]
    assert seen[-1].kind == "error" and seen[-1].data["reason"].kind == "cancelled"
    assert child.wait_reaped(15)
    assert child.returncode == -signal.SIGKILL
    assert wait_until(lambda: not process_group_alive(child.pid))


def test_a_401_answer_becomes_an_authentication_error(server: ScriptedModelServer, cli_options):
    server_default = Reply.http_error(401, "invalid x-api-key")
    server.enqueue(*[server_default] * 4)
    session = ClaudeCLI.start_session(cli_options(env={"CLAUDE_CODE_MAX_RETRIES": "1"}))
    events, _, _ = run_turn(ClaudeCLI, session, "Hello?")

    retries = [event for event in events if event.kind == "claude.api_retry"]
    assert [r.data["error_status"] for r in retries] == [401]
    assert events[-1].kind == "error"
    reason = events[-1].data["reason"]
    assert isinstance(reason, BackendError)
    assert (reason.provider, reason.kind, reason.status) == ("claude", "authentication", 401)
    assert reason.retryable is False
    assert reason.message  # the CLI's human-readable text, e.g. "Invalid API key ..."
    assert reason.raw["is_error"] is True
    assert len(server.model_requests()) == 2  # the first try and one retry


# -- agent level -----------------------------------------------------------------------------


def agent_session(name: str) -> ClaudeSession:
    return gen_agent.backend_session(name, timeout=TURN_TIMEOUT_S)


def test_agent_text_turn_then_a_resumed_turn(server: ScriptedModelServer, cli_options):
    server.enqueue(
        Reply.text("First answer.", input_tokens=12, output_tokens=7),
        Reply.text("Second answer.", input_tokens=20, output_tokens=3),
    )
    gen_agent.start_agent(CliAgent, name="claude-agent", backend=ClaudeCLI,
                          backend_opts=cli_options())  # fmt: skip
    first = gen_agent.ask("claude-agent", "One.", timeout=TURN_TIMEOUT_S)
    assert first.text == "First answer."
    assert first.final_message == "First answer."
    assert first.usage["input_tokens"] == 12 and first.usage["output_tokens"] == 7
    assert first.model == MODEL
    assert first.num_turns == 1
    assert first.cost_usd == pytest.approx(sonnet_cost(12, 7))
    assert UUID.match(first.session_id)
    assert first.prompt == "One."
    assert agent_session("claude-agent").session_id == first.session_id

    second = gen_agent.ask("claude-agent", "Two.", timeout=TURN_TIMEOUT_S)
    assert second.text == "Second answer."
    assert second.session_id == first.session_id
    assert agent_session("claude-agent").turns == 2
    history = server.model_requests()[1].body["messages"]
    assert any(
        block.get("text") == "First answer."
        for message in history
        if message["role"] == "assistant"
        for block in message["content"]
    )
    gen_agent.stop("claude-agent")


def test_agent_interrupt_during_a_slow_reply(server: ScriptedModelServer, cli_options):
    server.enqueue(Reply.text("too late", delay=120))
    gen_agent.start_agent(CliAgent, name="slow-agent", backend=ClaudeCLI,
                          backend_opts=cli_options())  # fmt: skip
    outcome: queue.Queue[Any] = queue.Queue()

    def ask() -> None:
        try:
            outcome.put(gen_agent.ask("slow-agent", "Slowly.", timeout=TURN_TIMEOUT_S))
        except TurnError as exc:
            outcome.put(exc)

    caller = threading.Thread(target=ask)
    caller.start()
    server.wait_model_requests(1, timeout=TURN_TIMEOUT_S)
    child = agent_session("slow-agent").last_child
    gen_agent.interrupt("slow-agent")
    error = outcome.get(timeout=TURN_TIMEOUT_S)
    caller.join(TURN_TIMEOUT_S)
    assert isinstance(error, TurnError) and error.reason == "interrupted"
    assert child.wait_reaped(15)
    assert child.returncode == -signal.SIGKILL
    assert wait_until(lambda: not process_group_alive(child.pid))
    gen_agent.stop("slow-agent")


def test_agent_401_retrying_is_stopped_by_the_watchdog(server: ScriptedModelServer, cli_options):
    # The CLI retries a 401 ten times with growing pauses; the watchdog ends the turn first.
    server.enqueue(*[Reply.http_error(401, "invalid x-api-key")] * 20)
    gen_agent.start_agent(CliAgent, name="denied-agent", backend=ClaudeCLI,
                          backend_opts=cli_options(), watchdog_ms=4_000)  # fmt: skip
    with pytest.raises(TurnError) as info:
        gen_agent.ask("denied-agent", "Hello?", timeout=TURN_TIMEOUT_S)
    assert info.value.reason == "timeout"
    child = agent_session("denied-agent").last_child
    assert child.wait_reaped(15)
    assert wait_until(lambda: not process_group_alive(child.pid))
    gen_agent.stop("denied-agent")


def test_agent_401_without_retries_is_a_backend_error(server: ScriptedModelServer, cli_options):
    server.enqueue(*[Reply.http_error(401, "invalid x-api-key")] * 2)
    opts = cli_options(env={"CLAUDE_CODE_MAX_RETRIES": "0"})
    gen_agent.start_agent(CliAgent, name="denied-agent", backend=ClaudeCLI, backend_opts=opts)
    with pytest.raises(TurnError) as info:
        gen_agent.ask("denied-agent", "Hello?", timeout=TURN_TIMEOUT_S)
    reason = info.value.reason
    assert isinstance(reason, BackendError)
    assert (reason.kind, reason.status) == ("authentication", 401)
    gen_agent.stop("denied-agent")

"""ClaudeCLI warm mode against the real Claude Code CLI (npm `@anthropic-ai/claude-code`) and a
ScriptedModelServer on loopback: one `claude` process per agent session, kept across turns.

Skipped, with what to install, where the CLI is absent (see test_claude_real_cli.py, whose
fixtures these tests share).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import gen_agent
from gen_agent import TurnError
from gen_agent._permission import Allow, Deny
from gen_agent.backends.claude import ClaudeCLI, ClaudeSession
from gen_agent.backends.warm import WarmExited
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .conftest import process_group_alive, wait_until
from .test_claude_real_cli import (  # noqa: F401 - fixtures
    MODEL,
    TURN_TIMEOUT_S,
    claude_cli,
    cli_options,
    sonnet_cost,
    user_text,
)

pytestmark = [pytest.mark.real_cli, pytest.mark.usefixtures("no_child_left")]


@pytest.fixture
def warm_options(request: pytest.FixtureRequest):
    """`cli_options` in warm mode (the default mode, which that module pins to per-turn)."""
    options = request.getfixturevalue("cli_options")
    return lambda **extra: options(**{"mode": "warm", **extra})


class WarmAgent(gen_agent.GenAgent):
    """Passes `backend_opts` through; records handle_info messages in a queue; decides tool
    permissions from `opts["permit"]` (a callable or None)."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.infos: queue.Queue[Any] = opts.get("infos") or queue.Queue()
        self.permit = opts.get("permit")
        return opts["backend_opts"], None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)

    def handle_info(self, message: Any, state: Any) -> Any:
        self.infos.put(message)
        return gen_agent.NoReply(state)


class PermittingAgent(WarmAgent):
    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        return self.permit(request)


def session_of(name: str) -> ClaudeSession:
    return gen_agent.backend_session(name, timeout=TURN_TIMEOUT_S)


def ask(name: str, prompt: str) -> Any:
    return gen_agent.ask(name, prompt, timeout=TURN_TIMEOUT_S)


def test_five_turns_on_one_process_with_cost_deltas(server: ScriptedModelServer, warm_options):
    server.enqueue(*[Reply.text(f"Answer {i}.", input_tokens=10 + i, output_tokens=5)
                     for i in range(5)])
    gen_agent.start_agent(WarmAgent, name="warm", backend=ClaudeCLI, backend_opts=warm_options())
    responses = []
    pids = []
    for i in range(5):
        responses.append(ask("warm", f"Question {i}."))
        pids.append(session_of("warm").pid)
    assert [r.text for r in responses] == [f"Answer {i}." for i in range(5)]
    assert len(set(pids)) == 1 and pids[0] is not None  # one process for five turns
    assert len({r.session_id for r in responses}) == 1
    for i, response in enumerate(responses):
        assert response.cost_usd == pytest.approx(sonnet_cost(10 + i, 5))
        assert response.usage["input_tokens"] == 10 + i
    total = sum(r.cost_usd for r in responses)
    assert responses[-1].extra["process_cost_usd"] == pytest.approx(total)  # the CLI's total
    assert responses[-1].extra["session_cost_usd"] == pytest.approx(total)
    assert session_of("warm").cost_usd == pytest.approx(total)
    # One growing conversation: request k carries the k earlier answers.
    requests = server.model_requests()
    assert len(requests) == 5
    for k, request in enumerate(requests):
        assert f"Question {k}." in user_text(request)
        texts = [b.get("text") for m in request.body["messages"] if m["role"] == "assistant"
                 for b in m["content"]]
        assert [f"Answer {i}." for i in range(k)] == [t for t in texts if t]
    pid = pids[0]
    gen_agent.stop("warm")
    assert wait_until(lambda: not process_group_alive(pid))


def test_a_200_kb_prompt_travels_on_stdin(server: ScriptedModelServer, warm_options):
    server.enqueue(Reply.text("Got it."))
    gen_agent.start_agent(WarmAgent, name="big", backend=ClaudeCLI, backend_opts=warm_options())
    prompt = "x" * (200 * 1024) + " END-OF-PROMPT"
    assert ask("big", prompt).text == "Got it."
    assert user_text(server.model_requests()[0]).endswith("END-OF-PROMPT")
    assert len(user_text(server.model_requests()[0])) >= 200 * 1024
    gen_agent.stop("big")


def test_interrupt_then_a_clean_next_turn_on_the_same_process(
    server: ScriptedModelServer, warm_options
):
    server.enqueue(Reply.text("too late", delay=60), Reply.text("Fresh answer."))
    gen_agent.start_agent(WarmAgent, name="int", backend=ClaudeCLI, backend_opts=warm_options())
    outcome: queue.Queue[Any] = queue.Queue()

    def slow() -> None:
        try:
            outcome.put(ask("int", "Slowly."))
        except TurnError as exc:
            outcome.put(exc)

    caller = threading.Thread(target=slow)
    caller.start()
    server.wait_model_requests(1, timeout=TURN_TIMEOUT_S)
    pid = session_of("int").pid
    gen_agent.interrupt("int")
    error = outcome.get(timeout=TURN_TIMEOUT_S)
    caller.join(TURN_TIMEOUT_S)
    assert isinstance(error, TurnError) and error.reason == "interrupted"
    second = ask("int", "Next.")
    assert second.text == "Fresh answer."  # nothing of the interrupted turn leaked in
    assert session_of("int").pid == pid  # the process survived the interrupt
    assert "too late" not in second.text
    gen_agent.stop("int")


def test_permission_allow_runs_the_tool_and_deny_does_not(
    server: ScriptedModelServer, warm_options, tmp_path: Path
):
    marker = tmp_path / "work" / "marker"
    command = {"command": f"touch {marker} && echo tool-ran", "description": "make a marker"}
    server.enqueue(
        Reply.tool_use("Bash", command, id="toolu_1", text="Let me check."),
        Reply.text("It ran."),
        Reply.tool_use("Bash", command, id="toolu_2", text="Again."),
        Reply.text("It was denied."),
    )
    seen: list[Any] = []
    answers = [Allow(), Deny("not allowed by the agent")]

    def permit(request: Any) -> Any:
        seen.append(request)
        return answers[len(seen) - 1]

    gen_agent.start_agent(PermittingAgent, name="perm", backend=ClaudeCLI,
                          backend_opts=warm_options(), permit=permit)  # fmt: skip
    first = ask("perm", "Run it.")
    assert marker.exists()  # the tool really ran
    result = next(e for e in first.events if e.kind == "tool_result")
    assert "tool-ran" in str(result.data["content"])
    permission = next(e for e in first.events if e.kind == "permission")
    assert permission.data == {"tool_name": "Bash", "tool_use_id": "toolu_1",
                               "decision": "allow"}
    marker.unlink()
    second = ask("perm", "Run it again.")
    assert not marker.exists()  # denied: it did not run
    denied = next(e for e in second.events if e.kind == "tool_result")
    assert denied.data["is_error"] is True
    assert "not allowed by the agent" in str(denied.data["content"])
    assert [e.data["decision"] for e in second.events if e.kind == "permission"] == ["deny"]
    assert [(r.backend, r.tool_name, r.tool_use_id) for r in seen] == [
        ("claude", "Bash", "toolu_1"), ("claude", "Bash", "toolu_2")]
    assert seen[0].input == command
    gen_agent.stop("perm")


def test_a_cli_killed_between_turns_is_resumed(server: ScriptedModelServer, warm_options):
    server.enqueue(Reply.text("The word is plum."), Reply.text("You asked about plum."))
    infos: queue.Queue[Any] = queue.Queue()
    gen_agent.start_agent(WarmAgent, name="kill", backend=ClaudeCLI,
                          backend_opts=warm_options(), infos=infos)  # fmt: skip
    first = ask("kill", "Remember a word.")
    pid = session_of("kill").pid
    # Killed at once after the answer: the CLI runs with CLAUDE_CODE_EAGER_FLUSH=1, so the
    # turn is already in its transcript (without it, 2.1.197 writes lazily and this fails).
    os.killpg(pid, signal.SIGKILL)
    exited = infos.get(timeout=TURN_TIMEOUT_S)
    assert isinstance(exited, WarmExited)
    assert (exited.backend, exited.pid, exited.exit_code) == ("claude", pid, -signal.SIGKILL)
    second = ask("kill", "Which word?")
    assert second.text == "You asked about plum."
    assert second.session_id == first.session_id  # resumed
    assert session_of("kill").pid != pid
    history = server.model_requests()[1].body["messages"]
    assert any(b.get("text") == "The word is plum." for m in history
               if m["role"] == "assistant" for b in m["content"])
    assert second.cost_usd > 0  # a new process's total is this turn's cost, not negative
    gen_agent.stop("kill")


def test_per_turn_mode_stays_available(server: ScriptedModelServer, warm_options):
    server.enqueue(Reply.text("One."), Reply.text("Two."))
    gen_agent.start_agent(WarmAgent, name="cold", backend=ClaudeCLI,
                          backend_opts=warm_options(mode="per_turn"))  # fmt: skip
    assert ask("cold", "a").text == "One."
    first_child = session_of("cold").last_child
    assert ask("cold", "b").text == "Two."
    assert session_of("cold").last_child is not first_child
    assert session_of("cold").pid is None
    gen_agent.stop("cold")


HOST = textwrap.dedent("""
    import sys, json
    import gen_agent
    from gen_agent.backends.claude import ClaudeCLI

    class A(gen_agent.GenAgent):
        def init_agent(self, opts):
            return opts["backend_opts"], None
        def handle_response(self, ref, response, state):
            return gen_agent.NoReply(state)

    opts = json.loads(sys.argv[1])
    gen_agent.start_agent(A, name="hosted", backend=ClaudeCLI, backend_opts=opts)
    gen_agent.ask("hosted", "hi", timeout=90)
    print(gen_agent.backend_session("hosted").pid, flush=True)
    sys.stdin.read()
""")


def test_no_orphan_when_the_hosting_python_process_is_killed(
    server: ScriptedModelServer, warm_options
):
    import json

    server.enqueue(Reply.text("hello"))
    host = subprocess.Popen([sys.executable, "-c", HOST, json.dumps(warm_options())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert host.stdout is not None
        pid = int(host.stdout.readline())
        assert process_group_alive(pid)
        host.send_signal(signal.SIGKILL)
        host.wait(TURN_TIMEOUT_S)
        # stdin EOF: the CLI exits by itself.
        assert wait_until(lambda: not process_group_alive(pid), timeout=30)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(10)
        if host.stdin is not None:
            host.stdin.close()
        if host.stdout is not None:
            host.stdout.close()


def test_set_model_and_permission_mode_on_the_live_process(
    server: ScriptedModelServer, warm_options
):
    server.enqueue(Reply.text("One."), Reply.text("Two."))
    gen_agent.start_agent(WarmAgent, name="ctl", backend=ClaudeCLI, backend_opts=warm_options())
    assert ask("ctl", "a").text == "One."
    pid = session_of("ctl").pid
    ClaudeCLI.set_model(session_of("ctl"), "claude-haiku-4-5")
    ClaudeCLI.set_permission_mode(session_of("ctl"), "acceptEdits")
    second = ask("ctl", "b")
    assert second.text == "Two."
    assert session_of("ctl").pid == pid  # no restart
    first_request, second_request = server.model_requests()
    assert (first_request.body["model"], second_request.body["model"]) == (
        MODEL, "claude-haiku-4-5")
    assert next(e for e in second.events if e.kind == "session").data["permission_mode"] == (
        "acceptEdits")
    gen_agent.stop("ctl")

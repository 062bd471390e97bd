"""ClaudeCLI warm mode on a fake streaming-input `claude` (tests/fakes/fake_claude_warm.py):
the faults the real CLI cannot be made to show on demand, and the pure protocol pieces."""

from __future__ import annotations

import json
import queue
import shlex
import sys
import threading
from pathlib import Path
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import TurnError
from gen_agent._permission import Allow, Deny, ToolPermissionRequest
from gen_agent.backend import BackendError
from gen_agent.backends import warm
from gen_agent.backends.claude import ClaudeCLI, ClaudeSession
from gen_agent.backends.warm import WarmExited, WarmOutput
from gen_agent.telemetry import TOOL_PERMISSION

from .conftest import FAKES, process_group_alive, wait_until

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "claude-cli" / "warm"

pytestmark = pytest.mark.usefixtures("no_child_left")
WAIT_S = 30.0


class FakeWarm:
    def __init__(self, root: Path) -> None:
        self.dir = root / "fake-warm"
        self.dir.mkdir()
        self.cli = root / "bin" / "claude"
        self.cli.parent.mkdir()
        script = FAKES / "fake_claude_warm.py"
        self.cli.write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))} "$@"\n')
        self.cli.chmod(0o755)

    def options(self, **extra: Any) -> dict[str, Any]:
        env = {"FAKE_CLAUDE_DIR": str(self.dir), "PATH": "/usr/bin:/bin", **extra.pop("env", {})}
        return {"cli_path": str(self.cli), "inherit_env": False, "env": env, **extra}

    def replayed(self) -> list[dict[str, Any]]:
        path = self.dir / "replay.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def calls(self) -> list[dict[str, Any]]:
        path = self.dir / "calls.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def fake(tmp_path: Path) -> FakeWarm:
    return FakeWarm(tmp_path)


class Agent(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.infos = opts["infos"]
        self.permit = opts.get("permit")
        self.texts = opts["texts"]
        return opts["backend_opts"], {"secret": "state"}

    def handle_stream_event(self, event: Any, state: Any) -> Any:
        # What the running turn streamed: proof that the turn really reached the CLI.
        self.texts.put(event.data.get("text", event.kind))
        return state

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)

    def handle_info(self, message: Any, state: Any) -> Any:
        self.infos.put(message)
        return gen_agent.NoReply(state)


class Permitting(Agent):
    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        return self.permit(request, state)


TEXTS: dict[str, queue.Queue] = {}


def start(fake: FakeWarm, name: str = "w", module: type = Agent, **opts: Any) -> queue.Queue:
    infos: queue.Queue[Any] = queue.Queue()
    TEXTS[name] = queue.Queue()
    backend_opts = fake.options(**opts.pop("backend", {}))
    agents.start(module, name, backend=ClaudeCLI, backend_opts=backend_opts, infos=infos,
                 texts=TEXTS[name], **opts)
    return infos


def wait_text(expected: str, name: str = "w") -> None:
    """Wait until the running turn streamed the text (or event kind) `expected`."""
    while (text := TEXTS[name].get(timeout=WAIT_S)) != expected:
        pass
    assert text == expected


def session(name: str = "w") -> ClaudeSession:
    return gen_agent.backend_session(name, timeout=WAIT_S)


def ask(prompt: str, name: str = "w") -> Any:
    return gen_agent.ask(name, prompt, timeout=WAIT_S)


def in_background(prompt: str, name: str = "w") -> tuple[threading.Thread, queue.Queue]:
    outcome: queue.Queue[Any] = queue.Queue()

    def run() -> None:
        try:
            outcome.put(ask(prompt, name))
        except TurnError as exc:
            outcome.put(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_turns_share_one_process_and_costs_are_per_turn(fake: FakeWarm):
    start(fake)
    first, second = ask("hello one"), ask("hello two")
    assert (first.text, second.text) == ("echo: hello one", "echo: hello two")
    assert len(fake.calls()) == 1
    argv = fake.calls()[0]["argv"]
    assert argv[:5] == ["-p", "--input-format", "stream-json", "--output-format", "stream-json"]
    assert "--permission-prompt-tool" not in argv  # no callback: the CLI's own mode applies
    assert (first.cost_usd, second.cost_usd) == (0.25, 0.25)
    assert second.extra["session_cost_usd"] == 0.5
    assert second.extra["session_usage"] == {"input_tokens": 20, "output_tokens": 10}
    gen_agent.stop("w")


def test_output_between_turns_reaches_handle_info_not_the_next_turn(fake: FakeWarm):
    infos = start(fake)
    assert ask("stray one").text == "echo: stray one"
    record = infos.get(timeout=WAIT_S)
    assert isinstance(record, WarmOutput)
    assert record.backend == "claude" and record.pid == session().pid
    assert record.line["subtype"] == "task_notification"
    assert ask("hello next").text == "echo: hello next"
    assert [e.kind for e in ask("hello again").events].count("claude.task_notification") == 0
    gen_agent.stop("w")


def test_a_crash_mid_turn_fails_it_and_the_next_turn_resumes(fake: FakeWarm):
    infos = start(fake)
    ask("hello first")
    with pytest.raises(TurnError) as info:
        ask("die now")
    reason = info.value.reason
    assert isinstance(reason, BackendError)
    assert (reason.kind, reason.raw["exit_code"]) == ("no_result", 3)
    assert ask("hello after").text == "echo: hello after"
    calls = fake.calls()
    assert len(calls) == 2
    assert calls[1]["argv"][calls[1]["argv"].index("--resume") + 1] == "warm-session-0001"
    assert infos.empty()  # a death during a turn is that turn's error, not an info record
    gen_agent.stop("w")


def test_a_process_gone_between_turns_is_reported_and_replaced(fake: FakeWarm):
    import os
    import signal

    infos = start(fake)
    first = ask("hello first")
    pid = session().pid
    os.killpg(pid, signal.SIGKILL)
    record = infos.get(timeout=WAIT_S)
    assert isinstance(record, WarmExited) and record.exit_code == -signal.SIGKILL
    second = ask("hello again")
    assert second.session_id == first.session_id
    assert second.cost_usd == 0.25  # a new process's first total, never negative
    assert second.extra["session_cost_usd"] == 0.5
    gen_agent.stop("w")


def test_interrupt_settles_on_the_same_process(fake: FakeWarm):
    start(fake)
    ask("hello first")
    pid = session().pid
    caller, outcome = in_background("slow please")
    wait_text("partial ")
    gen_agent.interrupt("w")
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    caller.join(WAIT_S)
    assert ask("hello next").text == "echo: hello next"
    assert session().pid == pid and len(fake.calls()) == 1
    gen_agent.stop("w")


def test_an_interrupt_that_never_settles_kills_and_resumes(fake: FakeWarm):
    start(fake, backend={"interrupt_grace_ms": 300})
    ask("hello first")
    pid = session().pid
    caller, outcome = in_background("stuck forever")
    wait_text("partial ")
    gen_agent.interrupt("w")
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    caller.join(WAIT_S)
    assert ask("hello next").text == "echo: hello next"
    assert session().pid != pid
    assert wait_until(lambda: not process_group_alive(pid))
    assert "--resume" in fake.calls()[1]["argv"]
    gen_agent.stop("w")


def test_the_watchdog_interrupts_a_warm_turn(fake: FakeWarm):
    start(fake, watchdog_ms=300)
    with pytest.raises(TurnError) as info:
        ask("slow please")
    assert info.value.reason == "timeout"
    assert ask("hello next").text == "echo: hello next"
    assert len(fake.calls()) == 1
    gen_agent.stop("w")


def test_permission_allow_with_updated_input_and_telemetry(fake: FakeWarm):
    seen: list[tuple[str, Any]] = []

    def permit(request: ToolPermissionRequest, state: Any) -> Any:
        seen.append((request.tool_name, state))
        return Allow(updated_input={"command": "echo changed"})

    telemetry: list[dict[str, Any]] = []
    gen_agent.telemetry.attach("perm-test", TOOL_PERMISSION,
                               lambda e, m, meta, c: telemetry.append(meta))
    try:
        start(fake, module=Permitting, permit=permit)
        response = ask("tool please")
    finally:
        gen_agent.telemetry.detach("perm-test")
    assert response.text == "tool said allowed: echo changed"
    assert seen == [("Bash", {"secret": "state"})]
    assert "--permission-prompt-tool" in fake.calls()[0]["argv"]
    (event,) = [e for e in response.events if e.kind == "permission"]
    assert event.data == {"tool_name": "Bash", "tool_use_id": "toolu_1", "decision": "allow"}
    assert [(m["tool_name"], m["decision"], m["backend"]) for m in telemetry] == [
        ("Bash", "allow", "claude")]
    assert "input" not in telemetry[0] and "echo" not in repr(telemetry[0])
    gen_agent.stop("w")


@pytest.mark.parametrize("answer", ["raise", "junk"])
def test_a_failing_permission_callback_denies(fake: FakeWarm, answer: str):
    def permit(request: Any, state: Any) -> Any:
        if answer == "raise":
            raise RuntimeError("secret text")
        return "yes"

    start(fake, module=Permitting, permit=permit)
    response = ask("tool please")
    assert response.text == "tool said the agent's permission callback failed"
    assert gen_agent.status("w").state == "idle"  # the agent survived
    gen_agent.stop("w")


def test_no_answer_within_the_bound_denies(fake: FakeWarm):
    def permit(request: Any, state: Any) -> Any:
        threading.Event().wait(1.0)  # a slow callback (it blocks the agent meanwhile)
        return Allow()

    start(fake, module=Permitting, permit=permit, backend={"permission_timeout_ms": 200})
    response = ask("tool please")
    assert "did not answer the permission request in time" in response.text
    gen_agent.stop("w")


def test_deny_with_interrupt_ends_the_turn_as_interrupted(fake: FakeWarm):
    start(fake, module=Permitting, permit=lambda r, s: Deny("no", interrupt=True))
    with pytest.raises(TurnError) as info:
        ask("tool please")
    assert info.value.reason == "interrupted"
    assert ask("hello next").text == "echo: hello next"
    gen_agent.stop("w")


def test_set_model_applies_to_a_process_started_later(fake: FakeWarm):
    start(fake)
    ClaudeCLI.set_model(session(), "other-model")  # no live process yet
    ask("hello one")
    argv = fake.calls()[0]["argv"]
    assert argv[argv.index("--model") + 1] == "other-model"
    ClaudeCLI.set_permission_mode(session(), "acceptEdits")  # live: a control request
    with pytest.raises(ValueError):
        ClaudeCLI.set_permission_mode(session(), "bogus")
    gen_agent.stop("w")


def test_the_output_schema_is_a_start_flag_and_another_one_restarts_resuming(fake: FakeWarm):
    # The fake answers text, so every typed turn fails validation; what matters here is the
    # command line each process was started with.
    start(fake)

    def typed(output: Any) -> None:
        with pytest.raises(TurnError) as failed:
            gen_agent.ask("w", "hello", timeout=WAIT_S, output=output)
        assert failed.value.reason[0] == "invalid_output"

    typed(list[int])
    typed(list[int])
    first_session = session().session_id
    typed(dict[str, int])
    ask("plain")
    ask("plain again")
    calls = [call["argv"] for call in fake.calls()]
    restarts = session().warm.schema_restarts
    gen_agent.stop("w")

    def schema(argv: list[str]) -> Any:
        return json.loads(argv[argv.index("--json-schema") + 1]) if "--json-schema" in argv \
            else None

    assert [schema(argv) for argv in calls] == [
        {"type": "array", "items": {"type": "integer"}},
        {"type": "object", "additionalProperties": {"type": "integer"}},
        None,
    ]
    assert "--resume" not in calls[0]
    assert [argv[argv.index("--resume") + 1] for argv in calls[1:]] == [first_session] * 2
    assert restarts == 2


def test_reset_session_replaces_the_process(fake: FakeWarm):
    start(fake)
    ask("hello one")
    pid = session().pid
    gen_agent.reset_session("w")
    assert wait_until(lambda: not process_group_alive(pid))
    response = ask("hello two")
    assert response.extra["session_cost_usd"] == 0.25  # totals restart with the conversation
    assert "--resume" not in fake.calls()[1]["argv"]
    gen_agent.stop("w")


def test_idle_timeout_closes_the_process(fake: FakeWarm):
    infos = start(fake, backend={"idle_timeout_ms": 100})
    ask("hello one")
    pid = session().pid
    assert wait_until(lambda: not process_group_alive(pid))
    assert wait_until(lambda: session().pid is None)
    assert infos.empty()  # a close we asked for is no WarmExited record
    assert ask("hello two").text == "echo: hello two"
    assert "--resume" in fake.calls()[1]["argv"]
    gen_agent.stop("w")


def test_a_hibernated_agent_loses_its_idle_process_and_resumes_the_session_on_wake(
        fake: FakeWarm):
    # Issue 20: a warm agent hibernates without its live CLI once the idle timeout closed it;
    # the next message wakes the agent and the turn resumes the session in a new process.
    start(fake, hibernate_after_ms=0, backend={"idle_timeout_ms": 100})
    ref = gen_agent.whereis("w")
    ask("hello one")
    pid = session().pid  # (wakes the agent for a moment: it hibernates again when idle)
    assert pid is not None
    assert wait_until(lambda: not process_group_alive(pid))
    assert wait_until(ref.is_hibernated)
    assert ask("hello two").text == "echo: hello two"
    assert "--resume" in fake.calls()[1]["argv"]
    assert wait_until(ref.is_hibernated)
    gen_agent.stop("w")


def test_the_live_process_cap_closes_the_least_recently_used(fake: FakeWarm):
    previous = warm.max_live_processes()
    warm.set_max_live_processes(1)
    try:
        start(fake, name="a")
        start(fake, name="b")
        ask("hello a", "a")
        pid_a = session("a").pid
        ask("hello b", "b")
        assert wait_until(lambda: not process_group_alive(pid_a))
        assert session("a").pid is None and session("b").pid is not None
        assert ask("hello a again", "a").text == "echo: hello a again"
    finally:
        warm.set_max_live_processes(previous)
    gen_agent.stop("a")
    gen_agent.stop("b")
    with pytest.raises(ValueError):
        warm.set_max_live_processes(0)


def test_a_prompt_larger_than_the_pipe_buffer(fake: FakeWarm):
    start(fake)
    prompt = "hello " + "y" * (300 * 1024)
    assert ask(prompt).text == "echo: " + prompt[:40]
    gen_agent.stop("w")


# -- the recorded sessions of the real CLI, replayed ------------------------------------------


def stdin_types(fake: FakeWarm) -> list[str]:
    """The types of the lines we wrote, as the replaying fake read them."""
    return [json.loads(x["got"])["type"] for x in fake.replayed()]


def test_the_recorded_permission_session_replays_allow_then_deny(fake: FakeWarm):
    answers = [Allow(), Deny("not allowed by the agent")]
    start(fake, module=Permitting, permit=lambda r, s: answers.pop(0),
          backend={"env": {"FAKE_CLAUDE_REPLAY": str(RECORDED / "permission.jsonl")}})
    first, second = ask("run it"), ask("run it again")
    # Our stdin lines are the recorded client's, byte for byte: initialize, the prompt (with
    # its uuid), the allow answer...
    assert [(x["expected"] == x["got"]) for x in fake.replayed()] == [True] * 5
    assert stdin_types(fake) == [
        "control_request", "user", "control_response", "user", "control_response"]
    assert first.text == second.text == "The command printed tool-ran."
    assert [e.data["decision"] for e in first.events if e.kind == "permission"] == ["allow"]
    assert [e.data["decision"] for e in second.events if e.kind == "permission"] == ["deny"]
    denied = next(e for e in second.events if e.kind == "tool_result")
    assert denied.data["is_error"] is True
    # total_cost_usd is the running total: 0.00021, then 0.00042.
    assert first.cost_usd == pytest.approx(0.00021)
    assert second.cost_usd == pytest.approx(0.00042 - 0.00021)
    assert second.extra["process_cost_usd"] == pytest.approx(0.00042)
    gen_agent.stop("w")


def test_the_recorded_interrupt_session_replays(fake: FakeWarm):
    start(fake, backend={"env": {"FAKE_CLAUDE_REPLAY": str(RECORDED / "interrupt.jsonl")}})
    caller, outcome = in_background("slow one")
    # The CLI echoes a prompt only with its turn's first message (here: after the
    # interrupt), so the turn is interrupted once its prompt was written.
    assert wait_until(lambda: len(fake.replayed()) == 2, WAIT_S)
    gen_agent.interrupt("w")
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    caller.join(WAIT_S)
    second = ask("next")
    assert second.text == "Hello from the slow loopback model."
    assert [x["expected"] == x["got"] for x in fake.replayed()] == [True] * 4
    assert stdin_types(fake) == ["control_request", "user", "control_request", "user"]
    assert json.loads(fake.replayed()[2]["got"])["request"] == {"subtype": "interrupt"}
    assert second.cost_usd == pytest.approx(0.000141)
    gen_agent.stop("w")

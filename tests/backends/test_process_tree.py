"""A CLI's whole process tree ends with its turn, its agent and its host, on fake CLIs whose
tool runs in a session of its own (as the real Claude Code Bash tool does), so a kill of the
CLI's process group cannot reach it: interrupt, stop (per-turn and warm), a host SIGKILL, and
a warm CLI that outlives the thread that started it. Linux (/proc)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import _agents as agents
import pytest
from proctree import kill_marked, mark, marked, wait_gone

import gen_agent
from gen_agent import TurnError
from gen_agent._runtime import turn as turn_module
from gen_agent.backends._subprocess import process as _process
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.backends.codex import CodexCLI

from .conftest import FakeClaude, FakeCodex, pid_alive, wait_until
from .test_claude_warm import FakeWarm

pytestmark = [
    pytest.mark.usefixtures("no_child_left"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)"),
]
WAIT_S = 30.0
GONE_S = 10.0  # the bound on a tree's end after its fault (measured: < 0.2 s)


class Recording(gen_agent.GenAgent):
    """Records handle_error and post_turn calls (none may run for a stopped turn)."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.calls = opts["calls"]
        return opts["backend_opts"], None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.calls.put(("handle_error", reason))
        return gen_agent.NoReply(state)

    def post_turn(self, result: Any, state: Any) -> Any:
        self.calls.put(("post_turn", result))
        return state


@pytest.fixture
def tree() -> Any:
    token, env = mark()
    yield token, env
    kill_marked(token)  # a failed test's leftovers (this test's own processes only)


def helper_pid(directory: Path) -> int:
    path = directory / "helper.pid"
    assert wait_until(lambda: path.exists() and path.read_text().strip() != "", WAIT_S)
    return int(path.read_text())


def start(name: str, backend: Any, backend_opts: dict[str, Any]) -> queue.Queue:
    calls: queue.Queue[Any] = queue.Queue()
    agents.start(Recording, name, backend=backend, backend_opts=backend_opts, calls=calls)
    return calls


def in_background(name: str, prompt: str) -> queue.Queue:
    outcome: queue.Queue[Any] = queue.Queue()

    def run() -> None:
        try:
            outcome.put(gen_agent.ask(name, prompt, timeout=WAIT_S))
        except TurnError as exc:
            outcome.put(exc)

    threading.Thread(target=run, daemon=True).start()
    return outcome


PER_TURN = [pytest.param(ClaudeCLI, FakeClaude, id="claude"),
            pytest.param(CodexCLI, FakeCodex, id="codex")]


@pytest.mark.parametrize(("backend", "fake_type"), PER_TURN)
@pytest.mark.parametrize("fault", ["interrupt", "stop"])
def test_per_turn_interrupt_and_stop_end_a_tool_in_its_own_session(
        tmp_path: Path, tree: Any, backend: Any, fake_type: Any, fault: str):
    token, env = tree
    fake = fake_type(tmp_path)
    fake.script("slow_tool")
    calls = start("pt", backend, fake.options(env=env))
    outcome = in_background("pt", "run the tool")
    helper = helper_pid(fake.dir)
    assert os.getsid(helper) == helper  # out of reach of a kill of the CLI's group
    if fault == "interrupt":
        gen_agent.interrupt("pt")
        error = outcome.get(timeout=WAIT_S)
        assert isinstance(error, TurnError) and error.reason == "interrupted"
    else:
        gen_agent.stop("pt")
        error = outcome.get(timeout=WAIT_S)
        assert isinstance(error, TurnError)
        assert error.reason == ("agent_terminated", "shutdown")
    assert wait_gone(token, GONE_S) == []
    assert not pid_alive(helper)
    if fault == "stop":
        assert calls.empty()  # no handle_error, no post_turn for the stopped ask (§2.19)
    else:
        gen_agent.stop("pt")


def test_warm_stop_interrupts_the_turn_first_and_the_cli_ends_its_tool(
        tmp_path: Path, tree: Any):
    token, env = tree
    fake = FakeWarm(tmp_path)
    calls = start("ws", ClaudeCLI, fake.options(env=env))
    outcome = in_background("ws", "bash run it")
    helper = helper_pid(fake.dir)
    live = gen_agent.backend_session("ws", timeout=WAIT_S).warm.live
    assert live is not None
    gen_agent.stop("ws")
    error = outcome.get(timeout=WAIT_S)
    assert isinstance(error, TurnError) and error.reason == ("agent_terminated", "shutdown")
    assert calls.empty()  # no handle_error, no post_turn for the stopped ask
    assert not pid_alive(helper)
    # The CLI took the interrupt (it killed its own tool and ended the turn), then exited by
    # itself at stdin EOF: status 0, not a kill.
    assert live.wait_exited(WAIT_S) and live.child.returncode == 0
    assert wait_gone(token, GONE_S) == []


def test_warm_stop_kills_the_tree_when_the_turn_does_not_settle(tmp_path: Path, tree: Any):
    token, env = tree
    fake = FakeWarm(tmp_path)
    calls = start("wk", ClaudeCLI, fake.options(env=env, interrupt_grace_ms=300))
    outcome = in_background("wk", "bashstuck run it")
    helper = helper_pid(fake.dir)
    live = gen_agent.backend_session("wk", timeout=WAIT_S).warm.live
    assert live is not None
    started = time.monotonic()
    gen_agent.stop("wk")
    stop_s = time.monotonic() - started
    error = outcome.get(timeout=WAIT_S)
    assert isinstance(error, TurnError) and error.reason == ("agent_terminated", "shutdown")
    assert calls.empty()
    assert 0.3 <= stop_s < 5.0  # the grace, then the kill: within the 5 s shutdown window
    assert live.wait_exited(WAIT_S) and live.child.returncode == -signal.SIGKILL
    assert wait_gone(token, GONE_S) == []
    assert not pid_alive(helper)


def test_warm_interrupt_mid_tool_keeps_the_cli_and_ends_the_tool(tmp_path: Path, tree: Any):
    token, env = tree
    fake = FakeWarm(tmp_path)
    start("wi", ClaudeCLI, fake.options(env=env))
    outcome = in_background("wi", "bash run it")
    helper = helper_pid(fake.dir)
    pid = gen_agent.backend_session("wi", timeout=WAIT_S).pid
    gen_agent.interrupt("wi")
    error = outcome.get(timeout=WAIT_S)
    assert isinstance(error, TurnError) and error.reason == "interrupted"
    assert wait_until(lambda: not pid_alive(helper), GONE_S)
    assert gen_agent.ask("wi", "hello again", timeout=WAIT_S).text == "echo: hello again"
    assert gen_agent.backend_session("wi", timeout=WAIT_S).pid == pid  # the CLI lived on
    gen_agent.stop("wi")
    assert wait_gone(token, GONE_S) == []


def test_warm_interrupt_ends_what_the_turn_left_running_and_keeps_the_cli(
        tmp_path: Path, tree: Any):
    token, env = tree
    fake = FakeWarm(tmp_path)
    start("wl", ClaudeCLI, fake.options(env=env))
    assert gen_agent.ask("wl", "hello one", timeout=WAIT_S).text == "echo: hello one"
    outcome = in_background("wl", "bashleave run it")
    helper = helper_pid(fake.dir)
    pid = gen_agent.backend_session("wl", timeout=WAIT_S).pid
    gen_agent.interrupt("wl")
    error = outcome.get(timeout=WAIT_S)
    assert isinstance(error, TurnError) and error.reason == "interrupted"
    assert wait_until(lambda: not pid_alive(helper), GONE_S)  # the CLI left it; we did not
    assert pid_alive(pid)
    assert gen_agent.ask("wl", "hello two", timeout=WAIT_S).text == "echo: hello two"
    assert gen_agent.backend_session("wl", timeout=WAIT_S).pid == pid
    gen_agent.stop("wl")
    assert wait_gone(token, GONE_S) == []


HOST = textwrap.dedent("""
    import json, sys, threading
    import gen_agent
    from gen_agent.backends.claude import ClaudeCLI

    class A(gen_agent.GenAgent):
        def init_agent(self, opts):
            return opts["backend_opts"], None
        def handle_response(self, ref, response, state):
            return gen_agent.NoReply(state)

    gen_agent.start_agent(A, name="hosted", backend=ClaudeCLI,
                          backend_opts=json.loads(sys.argv[1]))
    threading.Thread(target=lambda: gen_agent.ask("hosted", sys.argv[2], timeout=600),
                     daemon=True).start()
    sys.stdin.read()
""")


@pytest.mark.parametrize("mode", ["warm", "per_turn"])
def test_a_host_sigkilled_mid_tool_leaves_no_process(tmp_path: Path, tree: Any, mode: str):
    token, env = tree
    if mode == "warm":
        fake: Any = FakeWarm(tmp_path)
        options, prompt = fake.options(env=env), "bash run it"
    else:
        fake = FakeClaude(tmp_path)
        fake.script("slow_tool")
        options, prompt = fake.options(env=env), "run it"
    host = subprocess.Popen([sys.executable, "-c", HOST, json.dumps(options), prompt],
                            stdin=subprocess.PIPE)
    try:
        helper = helper_pid(fake.dir)
        assert len(marked(token)) == 3  # the launcher, the CLI and its tool
        host.kill()
        host.wait(WAIT_S)
        assert wait_gone(token, GONE_S) == []
        assert not pid_alive(helper)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(WAIT_S)
        assert host.stdin is not None
        host.stdin.close()


def test_a_warm_cli_outlives_the_thread_that_started_it(
        tmp_path: Path, tree: Any, monkeypatch: pytest.MonkeyPatch):
    token, env = tree
    # Turn threads exit 50 ms after their turn (instead of 30 s), and the spawning one is
    # recorded: a CLI tied to its thread (PR_SET_PDEATHSIG) would die with it.
    monkeypatch.setattr(turn_module.WORKERS, "idle_s", 0.05)
    spawners: list[threading.Thread] = []
    spawn = _process.ChildProcess.spawn.__func__  # type: ignore[attr-defined]

    def recording_spawn(cls: Any, *args: Any, **kwargs: Any) -> Any:
        spawners.append(threading.current_thread())
        return spawn(cls, *args, **kwargs)

    monkeypatch.setattr(_process.ChildProcess, "spawn", classmethod(recording_spawn))
    fake = FakeWarm(tmp_path)
    start("wt", ClaudeCLI, fake.options(env=env))
    assert gen_agent.ask("wt", "hello one", timeout=WAIT_S).text == "echo: hello one"
    pid = gen_agent.backend_session("wt", timeout=WAIT_S).pid
    assert pid is not None and len(spawners) == 1
    spawners[0].join(WAIT_S)
    assert not spawners[0].is_alive()  # the thread that started the CLI has exited
    assert pid_alive(pid)
    assert gen_agent.ask("wt", "hello two", timeout=WAIT_S).text == "echo: hello two"
    assert gen_agent.backend_session("wt", timeout=WAIT_S).pid == pid  # the same process
    assert len(spawners) == 1
    gen_agent.stop("wt")
    assert wait_gone(token, GONE_S) == []


def _starts(fake: FakeWarm) -> list[dict[str, Any]]:
    return fake.calls()


def test_resuming_a_session_ends_the_cli_another_agent_still_runs_on_it(
        tmp_path: Path, tree: Any):
    token, env = tree
    fake = FakeWarm(tmp_path)
    start("first", ClaudeCLI, fake.options(env=env))
    session_id = gen_agent.ask("first", "hello one", timeout=WAIT_S).session_id
    first_pid = gen_agent.backend_session("first", timeout=WAIT_S).pid
    start("second", ClaudeCLI, fake.options(env=env, session_id=session_id))
    assert gen_agent.ask("second", "hello two", timeout=WAIT_S).session_id == session_id
    assert not pid_alive(first_pid)
    second_start = _starts(fake)[1]
    assert "--resume" in second_start["argv"] and second_start["alive_at_start"] == []
    # The first agent's next turn resumes the conversation again: the second's CLI ends first.
    assert gen_agent.ask("first", "hello three", timeout=WAIT_S).text == "echo: hello three"
    assert _starts(fake)[2]["alive_at_start"] == []
    gen_agent.stop("first")
    gen_agent.stop("second")
    assert wait_gone(token, GONE_S) == []


GATE = threading.Event()
BLOCKED = threading.Event()


class Stuck(Recording):
    """Blocks in handle_info("block") until GATE opens: a stop then outlasts its window."""

    def handle_info(self, message: Any, state: Any) -> Any:
        if message == "block":
            BLOCKED.set()
            GATE.wait(WAIT_S)
        return gen_agent.NoReply(state)


def test_a_restart_after_a_kill_ends_the_killed_incarnations_cli_before_resuming(
        tmp_path: Path, tree: Any):
    token, env = tree
    fake = FakeWarm(tmp_path)
    GATE.clear()
    BLOCKED.clear()
    supervisor = gen_agent.Supervisor([gen_agent.child_spec(
        Stuck, name="r", backend=ClaudeCLI, restart="permanent", resume_session=True,
        shutdown_ms=100, backend_opts=fake.options(env=env), calls=queue.Queue())])
    try:
        assert gen_agent.ask("r", "hello one", timeout=WAIT_S).text == "echo: hello one"
        old_pid = gen_agent.backend_session("r", timeout=WAIT_S).pid
        gen_agent.send_after("r", "block", 0)
        assert BLOCKED.wait(WAIT_S)
        # Stuck in a callback: killed after its 100 ms window, no cleanup (§2.19); its warm
        # CLI is still running.
        supervisor.terminate_child("r")
        assert pid_alive(old_pid)
        supervisor.restart_child("r")
        response = gen_agent.ask("r", "hello two", timeout=WAIT_S)
        assert response.text == "echo: hello two"
        restart = _starts(fake)[1]
        assert "--resume" in restart["argv"]
        assert restart["alive_at_start"] == []  # never two CLIs on the conversation
        assert not pid_alive(old_pid)
    finally:
        GATE.set()
        supervisor.stop(WAIT_S)
    assert wait_gone(token, GONE_S) == []


def test_the_launcher_reports_why_a_cli_could_not_start(tmp_path: Path):
    from gen_agent.backend import BackendError

    not_executable = tmp_path / "plain-file"
    not_executable.write_text("#!/bin/sh\n")
    cases = [([str(tmp_path / "missing")], None, "cli_not_found"),
             ([str(not_executable)], None, "cli_not_executable"),
             (["true"], str(tmp_path / "no-such-dir"), "cwd_not_found"),
             (["true", "x" * (4 * 1024 * 1024)], None, "argument_list_too_long")]
    for argv, cwd, kind in cases:
        with pytest.raises(BackendError) as info:
            _process.ChildProcess.spawn(argv, provider="test", cwd=cwd)
        assert info.value.kind == kind
    assert _process.wait_all_reaped(WAIT_S)  # no launcher was left behind


def test_the_launcher_passes_on_the_cli_exit_status_and_sigterm():
    for argv, status in ((["sh", "-c", "exit 3"], 3), (["sh", "-c", "kill -9 $$"], -9)):
        child = _process.ChildProcess.spawn(argv, provider="test")
        assert child.launcher_pid not in (None, child.pid)
        assert child.close() == status
    child = _process.ChildProcess.spawn(["sleep", "100"], provider="test", exit_grace_ms=0)
    assert os.getpgid(child.pid) == child.pid  # the CLI leads its own group
    assert child.close() == -signal.SIGTERM  # the SIGTERM reached it through the launcher

"""The real CLIs' trees end with their turn, agent and host (issue 32): `claude` (warm and
per-turn) and `codex` (app-server and exec) on the loopback model server, asked to run a long
command, then interrupted, stopped, or their host SIGKILLed while the command runs. After each,
within a bounded time, no process of the tree is left (/proc), and where the conversation goes
on it runs on exactly one CLI. (The Ray node case: tests/distributed/test_node_tree_real_cli.py.)

Measured before this change (claude 2.1.197, codex 0.171.0): a host SIGKILL left the CLI, its
shell and the command running (3 processes, still there after minutes); `stop` left the shell
and the command (2), and so did a per-turn interrupt.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _agents import PassThrough
from proctree import SessionSampler, kill_marked, mark, marked, wait_gone

import gen_agent
from gen_agent import TurnError
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.backends.codex import CodexCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .test_claude_real_cli import TURN_TIMEOUT_S, claude_cli, cli_options  # noqa: F401
from .test_codex_real_cli import CODEX, loopback_options

pytestmark = [pytest.mark.real_cli, pytest.mark.usefixtures("no_child_left"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]
GONE_S = 15.0  # the bound on a tree's end after a fault (measured: < 0.5 s)
_SLEEPS = iter(range(7001, 8000))


def _command() -> str:
    return f"sleep {next(_SLEEPS)}.5"  # unique: its process is found by its command line


def _wait_tool(token: str, command: str) -> None:
    deadline = time.monotonic() + TURN_TIMEOUT_S
    while not any(cmd.startswith(command) for _, cmd in marked(token)):
        assert time.monotonic() < deadline, f"the tool never started: {marked(token)}"
        time.sleep(0.05)


def _in_background(name: str, prompt: str) -> queue.Queue:
    outcome: queue.Queue[Any] = queue.Queue()

    def run() -> None:
        try:
            outcome.put(gen_agent.ask(name, prompt, timeout=TURN_TIMEOUT_S))
        except TurnError as exc:
            outcome.put(exc)

    threading.Thread(target=run, daemon=True).start()
    return outcome


def _claude_is_cli(cmdline: str) -> bool:
    return "_launcher.py" not in cmdline and " -p " in cmdline and "claude" in cmdline


def _codex_is_cli(cmdline: str) -> bool:
    words = cmdline.split()
    return bool(words) and words[0].endswith("codex") and "_launcher.py" not in cmdline


HOST = textwrap.dedent("""
    import json, sys, threading
    import gen_agent
    from gen_agent.backends.claude import ClaudeCLI
    from gen_agent.backends.codex import CodexCLI

    class A(gen_agent.GenAgent):
        def init_agent(self, opts):
            return opts["backend_opts"], None
        def handle_response(self, ref, response, state):
            return gen_agent.NoReply(state)

    backend = ClaudeCLI if sys.argv[1] == "claude" else CodexCLI
    gen_agent.start_agent(A, name="hosted", backend=backend, backend_opts=json.loads(sys.argv[2]))
    threading.Thread(target=lambda: gen_agent.ask("hosted", "run it", timeout=600),
                     daemon=True).start()
    sys.stdin.read()
""")


def _kill_host_mid_tool(backend: str, options: dict[str, Any], token: str,
                        command: str) -> None:
    host = subprocess.Popen([sys.executable, "-c", HOST, backend, json.dumps(options)],
                            stdin=subprocess.PIPE)
    try:
        _wait_tool(token, command)
        host.kill()
        host.wait(TURN_TIMEOUT_S)
        assert wait_gone(token, GONE_S) == []
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(TURN_TIMEOUT_S)
        assert host.stdin is not None
        host.stdin.close()


def _fault_in_process(name: str, backend: Any, options: dict[str, Any], token: str,
                      command: str, fault: str, is_cli: Any, *, warm: bool) -> None:
    gen_agent.start_agent(PassThrough, name=name, backend=backend, backend_opts=options)
    outcome = _in_background(name, "run it")
    _wait_tool(token, command)
    if fault == "stop":
        gen_agent.stop(name)
        error = outcome.get(timeout=TURN_TIMEOUT_S)
        assert isinstance(error, TurnError) and error.reason == ("agent_terminated", "shutdown")
        assert wait_gone(token, GONE_S) == []
        return
    with SessionSampler(token, is_cli) as sampler:
        gen_agent.interrupt(name)
        error = outcome.get(timeout=TURN_TIMEOUT_S)
        assert isinstance(error, TurnError) and error.reason == "interrupted"
        deadline = time.monotonic() + GONE_S
        while any(cmd.startswith(command) for _, cmd in marked(token)):
            assert time.monotonic() < deadline, f"the tool outlived the interrupt: {marked(token)}"
            time.sleep(0.05)
        assert gen_agent.ask(name, "again", timeout=TURN_TIMEOUT_S).text == "after the fault"
        clis = [pid for pid, cmd in marked(token) if is_cli(cmd)]
    assert sampler.samples > 0
    assert sampler.most == 1, sampler.worst  # never two CLIs on the conversation
    # Exactly one afterwards: the warm CLI lives on; a per-turn CLI exits after its turn.
    assert len(clis) == 1 if warm else len(clis) <= 1
    gen_agent.stop(name)
    assert wait_gone(token, GONE_S) == []


@pytest.mark.parametrize("mode", ["warm", "per_turn"])
@pytest.mark.parametrize("fault", ["kill", "stop", "interrupt"])
def test_claude_mid_bash_tool(server: ScriptedModelServer, cli_options: Any,  # noqa: F811
                              mode: str, fault: str) -> None:
    token, env = mark()
    command = _command()
    server.enqueue(Reply.tool_use("Bash", {"command": command, "description": "wait"},
                                  id="toolu_long"))
    server.default = Reply.text("after the fault")
    options = cli_options(mode=mode, allowed_tools=["Bash"], env=env)
    try:
        if fault == "kill":
            _kill_host_mid_tool("claude", options, token, command)
        else:
            _fault_in_process(f"claude-{mode}-{fault}", ClaudeCLI, options, token, command,
                              fault, _claude_is_cli, warm=mode == "warm")
    finally:
        kill_marked(token)


@pytest.mark.parametrize("mode", ["app_server", "exec"])
@pytest.mark.parametrize("fault", ["kill", "stop", "interrupt"])
@pytest.mark.skipif(CODEX is None, reason="the real Codex CLI is not installed (see "
                                          "test_codex_real_cli.py)")
def test_codex_mid_command(server: ScriptedModelServer, tmp_path: Path, mode: str,
                           fault: str) -> None:
    token, env = mark()
    command = _command()
    server.enqueue(Reply.tool_use("exec_command", {"cmd": command}, id="call_long"))
    server.default = Reply.text("after the fault")
    options = loopback_options(server, tmp_path, mode=mode)
    options["env"].update(env)
    try:
        if fault == "kill":
            _kill_host_mid_tool("codex", options, token, command)
        else:
            _fault_in_process(f"codex-{mode}-{fault}", CodexCLI, options, token, command,
                              fault, _codex_is_cli, warm=mode == "app_server")
    finally:
        kill_marked(token)


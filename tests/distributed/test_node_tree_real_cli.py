"""A Ray node SIGKILLed while its agent's real CLI runs a long command, then restarted by Ray:
the old tree ends at once (the launcher's lifeline closed), the restarted node resumes the
session on exactly one CLI (a sampler of /proc never sees two on one session id), and nothing
is left after `stop_node`. Warm `claude` and `codex app-server` on the loopback model server.

Measured before this change (claude 2.1.197): the old `claude`, its shell and the command kept
running through the restart, `stop_node` and `shutdown_local`, and the restarted node resumed
the session in a second `claude` beside the first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from backends.test_claude_real_cli import MODEL, find_cli
from backends.test_codex_real_cli import CODEX, loopback_options
from proctree import SessionSampler, kill_marked, mark, marked, wait_gone

import gen_agent
import gen_agent.ray as gray
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.backends.codex import CodexCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from . import agents

pytestmark = [pytest.mark.real_cli,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]
WAIT_S = 90.0
GONE_S = 15.0


def _claude_options(server: ScriptedModelServer, tmp_path: Path, env: dict[str, str]) -> Any:
    cli = find_cli()
    if cli is None:
        pytest.skip("the real Claude Code CLI is not installed (see test_claude_real_cli.py)")
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return {"cli_path": cli, "cwd": str(tmp_path / "work"), "inherit_env": False,
            "model": MODEL, "mode": "warm", "allowed_tools": ["Bash"],
            "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "HOME": str(tmp_path / "home"), "ANTHROPIC_BASE_URL": server.url,
                    "ANTHROPIC_API_KEY": "sk-ant-test-dummy-key",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                    "DISABLE_AUTOUPDATER": "1", **env}}


def _codex_options(server: ScriptedModelServer, tmp_path: Path, env: dict[str, str]) -> Any:
    if CODEX is None:
        pytest.skip("the real Codex CLI is not installed (see test_codex_real_cli.py)")
    options = loopback_options(server, tmp_path, mode="app_server")
    options["env"].update(env)
    return options


def _is_cli(cmdline: str) -> bool:
    if "_launcher.py" in cmdline:
        return False
    words = cmdline.split()
    return bool(words) and ((" -p " in cmdline and "claude" in words[0])
                            or (words[0].endswith("codex") and "app-server" in words))


@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_a_node_killed_mid_command_resumes_its_session_once(cluster: Any, tmp_path: Path,
                                                            cli: str) -> None:
    token, env = mark()
    command = f"sleep {8000 + os.getpid() % 1000}.5"
    with ScriptedModelServer() as server:
        if cli == "claude":
            options = _claude_options(server, tmp_path, env)
            backend: Any = ClaudeCLI
            server.enqueue(Reply.text("first answer"), Reply.tool_use(
                "Bash", {"command": command, "description": "wait"}, id="toolu_long"))
        else:
            options = _codex_options(server, tmp_path, env)
            backend = CodexCLI
            server.enqueue(Reply.text("first answer"), Reply.tool_use(
                "exec_command", {"cmd": command}, id="call_long"))
        server.default = Reply.text("after the restart")
        ns = cluster.namespace
        node = cluster.start_node(f"real-{cli}", [gen_agent.child_spec(
            agents.PassThrough, name="runner", backend=backend, restart="permanent",
            resume_session=True, backend_opts=options)])
        try:
            first = gray.ask("runner", "hello", timeout=WAIT_S, namespace=ns)
            threading.Thread(target=_ask_quietly, args=(ns,), daemon=True).start()
            deadline = time.monotonic() + WAIT_S
            while not any(cmd.startswith(command) for _, cmd in marked(token)):
                assert time.monotonic() < deadline, f"no tool: {marked(token)}"
                time.sleep(0.05)
            old = {pid for pid, _ in marked(token)}
            with SessionSampler(token, _is_cli) as s:
                os.kill(node.pid, signal.SIGKILL)
                killed = time.monotonic()
                while old & {pid for pid, _ in marked(token)}:
                    assert time.monotonic() - killed < GONE_S, f"left: {marked(token)}"
                    time.sleep(0.05)
                node.wait_ready(WAIT_S)
                second = gray.ask("runner", "again", timeout=WAIT_S, namespace=ns)
                clis = [pid for pid, cmd in marked(token) if _is_cli(cmd)]
            assert second.text == "after the restart"
            assert second.session_id == first.session_id  # the same conversation, resumed
            assert s.samples > 0 and s.most == 1, s.worst
            assert len(clis) == 1  # exactly one CLI on the session afterwards
        finally:
            gray.stop_node(f"real-{cli}", namespace=ns, timeout=30)
            left = wait_gone(token, GONE_S)
            kill_marked(token)
            assert left == []


def _ask_quietly(namespace: str) -> None:
    with contextlib.suppress(Exception):  # the node dies under this turn: it fails
        gray.ask("runner", "run it", timeout=WAIT_S, namespace=namespace)

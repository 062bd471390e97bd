"""A node SIGKILLed while its agent's CLI runs a tool: the tree ends (the launcher sees its
lifeline close), the restarted node reaps before it resumes, and the session is resumed once:
no sample ever shows two live CLIs on it. A fake warm `claude` whose tool runs in a session of
its own (as the real Bash tool does). Linux (/proc)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from backends.conftest import wait_until
from backends.test_claude_warm import FakeWarm
from proctree import SessionSampler, kill_marked, mark, marked, wait_gone

import gen_agent
import gen_agent.ray as gray
from gen_agent.backends.claude import ClaudeCLI

from . import agents
from .conftest import pid_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
WAIT_S = 60.0


def _is_cli(cmdline: str) -> bool:
    return "fake_claude_warm.py" in cmdline  # the CLI itself (its launcher names bin/claude)


def test_a_node_killed_mid_tool_leaves_nothing_and_resumes_the_session_once(
        cluster: Any, tmp_path: Path) -> None:
    token, env = mark()
    fake = FakeWarm(tmp_path)
    ns = cluster.namespace
    node = cluster.start_node("tools", [gen_agent.child_spec(
        agents.PassThrough, name="tooler", backend=ClaudeCLI, restart="permanent",
        resume_session=True, backend_opts=fake.options(env=env))])
    try:
        first = gray.ask("tooler", "hello one", timeout=WAIT_S, namespace=ns)
        threading.Thread(target=lambda: _ask_quietly("bash run it", ns), daemon=True).start()
        helper = fake.dir / "helper.pid"
        assert wait_until(lambda: helper.exists() and helper.read_text() != "", WAIT_S)
        tool = int(helper.read_text())
        old_cli = fake.calls()[0]["pid"]
        with SessionSampler(token, _is_cli) as sampler:
            os.kill(node.pid, signal.SIGKILL)
            assert pid_gone(tool, 10) and pid_gone(old_cli, 10)  # the launcher ended them
            node.wait_ready(WAIT_S)
            second = gray.ask("tooler", "hello two", timeout=WAIT_S, namespace=ns)
        assert second.text == "echo: hello two"
        assert second.session_id == first.session_id  # resumed
        restart = fake.calls()[-1]
        assert "--resume" in restart["argv"] and restart["alive_at_start"] == []
        assert sampler.samples > 0
        assert sampler.most == 1, sampler.worst  # never two CLIs on the session
        assert len([pid for pid, cmd in marked(token) if _is_cli(cmd)]) == 1  # one now
    finally:
        gray.stop_node("tools", namespace=ns, timeout=30)
        assert wait_gone(token, 10) == []
        kill_marked(token)


def _ask_quietly(prompt: str, namespace: str) -> None:
    with contextlib.suppress(Exception):  # the node dies under this turn: it fails
        gray.ask("tooler", prompt, timeout=WAIT_S, namespace=namespace)

"""Done-when of issue #22 for the real Claude Code CLI: an agent on `ClaudeCLI` in a child
process completes three turns, dies (SIGKILL, with its CLI) during the fourth, and a new
process on the same key resumes the CLI's conversation.

The CLI keeps its own transcript (under `$HOME/.claude`) and is resumed by session id
(`--resume`). Observed with Claude Code 2.1.197: the resumed conversation holds exactly the
three completed turns; the interrupted fourth question is not in it. A CLI version that kept
the user message of the interrupted turn would send it once, unanswered: the test accepts that
(at most once, never with an answer) and asserts that the fourth turn is not answered twice:
gen_agent does not re-send it, and no answer to it exists anywhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from gen_agent.testing._helpers import child_processes
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .test_crash import ANSWERS, PROMPTS, Child

ROOT = Path(__file__).resolve().parents[2]
INSTALLED_CLI = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"

pytestmark = pytest.mark.real_cli


def _cli() -> str:
    explicit = os.environ.get("GEN_AGENT_CLAUDE_CLI")
    if explicit:
        return explicit
    if INSTALLED_CLI.exists():
        return str(INSTALLED_CLI)
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    why = f"{' and '.join(missing)} not found; " if missing else ""
    pytest.skip(f"the real Claude Code CLI is not installed ({why}`make test` installs it into "
                ".venv/npm; or set GEN_AGENT_CLAUDE_CLI)")


def _options(cli: str, server: ScriptedModelServer, tmp: Path) -> dict[str, Any]:
    home, work = tmp / "home", tmp / "work"
    home.mkdir()
    work.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-test-dummy-key",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1"}
    return {"cli_path": cli, "cwd": str(work), "env": env, "inherit_env": False,
            "model": "claude-sonnet-4-5"}


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as file:
            return file.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _kill_with_cli(child: Child) -> None:
    """SIGKILL the agent's process and its CLI's process group (a container going away)."""
    launchers = child_processes(child.proc.pid) or set()
    clis = launchers.union(*(child_processes(pid) or set() for pid in launchers))
    groups = {os.getpgid(pid) for pid in clis if not _gone(pid)}
    child.kill()
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not all(_gone(pid) for pid in clis):
        assert time.monotonic() < deadline, f"CLI processes {clis} outlived the kill"
        time.sleep(0.05)  # bounded poll: an orphan is reaped by init, not by us


def test_the_claude_cli_resumes_its_three_completed_turns(tmp_path: Path) -> None:
    cli = _cli()
    with ScriptedModelServer() as server:
        server.enqueue(*(Reply.text(a) for a in ANSWERS), Reply.text("never seen", delay=60.0),
                       Reply.text("fifth answer"))
        config = {"db": str(tmp_path / "s.db"), "key": "claude", "backend": "claude",
                  "opts": _options(cli, server, tmp_path)}
        first = Child({**config, "prompts": PROMPTS})
        assert first.line()["resumed"] is False
        turns = [first.line() for _ in ANSWERS]
        assert [t["text"] for t in turns] == ANSWERS
        session_id = turns[0]["session_id"]
        assert all(t["session_id"] == session_id for t in turns)  # one CLI conversation
        server.wait_model_requests(4, timeout=90)
        _kill_with_cli(first)

        second = Child({**config, "prompts": ["fifth question"]})
        lines = second.finish()
        info, started, answer = lines[0], lines[1], lines[2]
        assert started["resumed"] is True and started["interrupted"]["origin"] == "ask"
        assert info["info"]["ref"] == started["interrupted"]["ref"]
        assert answer["text"] == "fifth answer"
        assert answer["session_id"] == session_id  # the same CLI conversation, resumed

        requests = server.model_requests()
        assert len(requests) == 5  # the fourth question was not asked again on its own
        messages = requests[4].body["messages"]
        users = [_texts(m["content"]) for m in messages if m["role"] == "user"]
        assistants = [_texts(m["content"]) for m in messages if m["role"] == "assistant"]
        assert assistants[:3] == ANSWERS and "never seen" not in assistants
        for prompt in PROMPTS[:3]:
            assert sum(prompt in text for text in users) == 1
        assert sum(PROMPTS[3] in text for text in users) <= 1  # the CLI may have kept it
        assert "fifth question" in users[-1]

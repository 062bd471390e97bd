"""A new owner of a durable session ends what its dead owner left running before it resumes:
here the owner and the CLI's launcher were both SIGKILLed (a container's OOM killer, say), so
the tool the CLI started in a session of its own outlived them; the next process that takes
the key's lease finds it by the owner marker every CLI inherits (`GEN_AGENT_OWNER=<pid>:<start
ticks>`, the identity the lease recorded) and ends it before its own CLI starts. Linux only."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from backends.conftest import wait_until
from backends.test_claude_warm import FakeWarm
from proctree import kill_marked, mark, marked, wait_gone

from .test_crash import Child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_new_owner_ends_the_dead_owners_leftovers_before_it_resumes(tmp_path: Path):
    token, env = mark()
    fake = FakeWarm(tmp_path)
    config = {"db": str(tmp_path / "s.db"), "key": "reaped", "backend": "claude",
              "opts": fake.options(env=env)}
    first = Child({**config, "prompts": ["hello one", "bash run it"]})
    try:
        assert first.line()["resumed"] is False
        assert first.line()["text"] == "echo: hello one"
        helper = fake.dir / "helper.pid"
        assert wait_until(lambda: helper.exists() and helper.read_text() != "", 30)
        tool = int(helper.read_text())
        (launcher,) = [pid for pid, cmd in marked(token) if "_launcher.py" in cmd]
        os.kill(launcher, signal.SIGKILL)  # the launcher dies first: nobody ends the tree
        first.kill()
        assert wait_until(lambda: len(marked(token)) == 1, 30)  # the CLI exited at EOF
        assert [pid for pid, _ in marked(token)] == [tool]  # its tool lives on, orphaned

        # Taking the lease is enough: the tool is gone before any CLI of the new owner runs.
        second = Child({**config, "prompts": []})
        lines = second.finish()
        assert lines[0]["info"]["origin"] == "ask"  # the interrupted turn was reported
        assert wait_gone(token, 10) == []
        assert len(fake.calls()) == 1  # (no CLI was started by the second owner)

        third = Child({**config, "prompts": ["hello two"]})
        assert [line.get("text") for line in third.finish()][1] == "echo: hello two"
        resumed = fake.calls()[1]
        assert "--resume" in resumed["argv"] and resumed["alive_at_start"] == []
        assert wait_gone(token, 10) == []
    finally:
        if first.proc.poll() is None:
            first.kill()
        kill_marked(token)

"""The tool journal on the real Claude Code CLI: its own Bash tool is journalled from the
turn's events (reported, not guarded). The CLI touches a file, its agent's process dies
(SIGKILL, with the CLI) while the follow-up request is held, and the next start reports the
Bash call among the interrupted turn's finished calls."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gen_agent.store import SQLiteStore
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .test_claude_crash import _cli, _kill_with_cli, _options
from .test_crash import Child

pytestmark = pytest.mark.real_cli


def test_the_clis_bash_call_is_journalled_and_reported_after_a_kill(tmp_path: Path) -> None:
    cli = _cli()
    touched = tmp_path / "work" / "touched.txt"
    command = {"command": f"touch {touched}", "description": "touch a file"}
    with ScriptedModelServer() as server:
        server.enqueue(Reply.tool_use("Bash", command, id="toolu_bash1"),
                       Reply.text("never seen", delay=60.0))
        opts = {**_options(cli, server, tmp_path), "allowed_tools": ["Bash"]}
        db = tmp_path / "s.db"
        config = {"db": str(db), "key": "claude", "backend": "claude", "opts": opts}
        first = Child({**config, "prompts": ["Touch the file."]})
        assert first.line()["resumed"] is False
        server.wait_model_requests(2, timeout=90)  # the Bash result is on its way back
        store = SQLiteStore(db)
        try:
            deadline = time.monotonic() + 30
            while not any(e.finished_at is not None for e in store.journal("claude")):
                assert time.monotonic() < deadline, "the Bash result was never journalled"
                time.sleep(0.05)  # bounded poll of the other process's writes
        finally:
            store.close()
        _kill_with_cli(first)
        assert touched.exists()  # the CLI really ran it

        second = Child({**config, "prompts": []})
        lines = second.finish()
    info = next(line["info"] for line in lines if "info" in line)
    assert info["prompt"] == "Touch the file."
    [bash] = info["finished"]
    assert (bash["call_id"], bash["tool"], bash["source"], bash["input"]) == (
        "toolu_bash1", "Bash", "event", command)
    assert bash["is_error"] is False and info["in_doubt"] == []

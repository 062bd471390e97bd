"""CodexCLI app-server mode on a fake server replaying the recorded real session
(tests/fixtures/codex-cli/app_server/two_turns.jsonl): our requests are the recorded client's,
in order, and the session's notifications become the turns' events."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

import gen_agent
from gen_agent.backends.codex import CodexCLI

from .conftest import FAKES, Agent

pytestmark = pytest.mark.usefixtures("no_child_left")
RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "codex-cli" / "app_server"


def test_the_recorded_two_turn_session_replays(tmp_path: Path) -> None:
    cli = tmp_path / "codex"
    script = FAKES / "fake_codex_app.py"
    cli.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))}\n')
    cli.chmod(0o755)
    options: dict[str, Any] = {
        "cli_path": str(cli), "mode": "app_server", "inherit_env": False,
        "env": {"FAKE_CODEX_DIR": str(tmp_path),
                "FAKE_CODEX_REPLAY": str(RECORDED / "two_turns.jsonl")},
    }
    gen_agent.start_agent(Agent, name="replay", backend=CodexCLI, backend_opts=options)
    first = gen_agent.ask("replay", "say hi", timeout=30)
    second = gen_agent.ask("replay", "again", timeout=30)
    gen_agent.stop("replay")

    replayed = [json.loads(x) for x in (tmp_path / "replay.jsonl").read_text().splitlines()]
    assert [x["got"] for x in replayed] == [
        ["initialize", 1], ["initialized", None], ["thread/start", 2], ["turn/start", 3],
        ["turn/start", 4]]
    assert all(x["expected"] == x["got"] for x in replayed)
    assert first.text == second.text == "Hello from codex loopback."
    assert first.session_id == second.session_id == "01a230b0-eb20-7c52-92d3-a93103f7102f"
    assert first.provider == "codex"
    # A turn's usage is its tokenUsage `total` (the thread's: 26, then 52 tokens) minus the
    # thread's total before the turn (the first notification's `total - last`).
    assert first.usage == second.usage == {
        "input_tokens": 20, "output_tokens": 6, "cached_input_tokens": 0,
        "cache_write_input_tokens": 0, "reasoning_output_tokens": 0,
        # the normalized keys beside the raw ones (gen_agent.response.normalize_usage)
        "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "reasoning_tokens": 0}

"""CodexCLI app-server mode on a fake server replaying the recorded real session
(tests/fixtures/codex-cli/app_server/two_turns.jsonl): our requests are the recorded client's,
in order, and the session's notifications become the turns' events."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

import gen_agent
from gen_agent.backends.codex import CodexCLI
from gen_agent.output import strict_schema_of

from .conftest import FAKES, Agent

pytestmark = pytest.mark.usefixtures("no_child_left")
RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "codex-cli" / "app_server"


def replaying(tmp_path: Path, recording: str, **extra: Any) -> dict[str, Any]:
    """Backend options running the fake app-server on `recording`."""
    cli = tmp_path / "codex"
    script = FAKES / "fake_codex_app.py"
    cli.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))}\n')
    cli.chmod(0o755)
    return {
        "cli_path": str(cli), "mode": "app_server", "inherit_env": False,
        "env": {"FAKE_CODEX_DIR": str(tmp_path),
                "FAKE_CODEX_REPLAY": str(RECORDED / recording)},
        **extra,
    }


def test_the_recorded_two_turn_session_replays(tmp_path: Path) -> None:
    options = replaying(tmp_path, "two_turns.jsonl")
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


class Verdict(msgspec.Struct, frozen=True):
    answer: str
    confidence: float


def test_a_structured_tool_turn_sends_the_schema_and_counts_every_request(
    tmp_path: Path,
) -> None:
    options = replaying(tmp_path, "tool_turn_structured.jsonl", model="gpt-test",
                        cwd=str(tmp_path), approval_policy="never")
    gen_agent.start_agent(Agent, name="replay-tool", backend=CodexCLI, backend_opts=options)
    first = gen_agent.ask("replay-tool", "run echo, then judge", timeout=30, output=Verdict)
    second = gen_agent.ask("replay-tool", "judge again", timeout=30, output=Verdict)
    gen_agent.stop("replay-tool")

    replayed = [json.loads(x) for x in (tmp_path / "replay.jsonl").read_text().splitlines()]
    assert all(x["expected"] == x["got"] for x in replayed)
    turns = [x["params"] for x in replayed if x["got"][0] == "turn/start"]
    assert [t["outputSchema"] for t in turns] == [strict_schema_of(Verdict)] * 2
    assert (first.parsed, second.parsed) == (Verdict("yes", 0.75), Verdict("no", 0.5))
    # Turn 1 made two model requests (12/5, then 30/3 tokens): its usage is both, not the
    # last request's `last` (30/3); turn 2's (50/7) is its own, not the thread's (92/15).
    assert first.usage is not None and second.usage is not None
    assert (first.usage["input_tokens"], first.usage["output_tokens"]) == (42, 8)
    assert (second.usage["input_tokens"], second.usage["output_tokens"]) == (50, 7)
    assert [(m.role, [type(p).__name__ for p in m.content]) for m in first.messages] == [
        ("user", ["TextPart"]), ("assistant", ["ToolCallPart"]), ("user", ["ToolResultPart"]),
        ("assistant", ["TextPart"])]

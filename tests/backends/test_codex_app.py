"""CodexCLI app-server mode on a fake server (tests/fakes/fake_codex_app.py) replaying the
recorded real sessions (tests/fixtures/codex-cli/app_server/: our requests are the recorded
client's, in order, and the session's notifications become the turns' events), and its
scripted faults: a missing rollout, a server killed mid-turn, overload, another turn's
notifications, escaped lone surrogates."""

from __future__ import annotations

import json
import queue
import shlex
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

import gen_agent
from gen_agent import TurnError
from gen_agent._output import strict_schema_of
from gen_agent.backend import BackendError
from gen_agent.backends.codex import CodexCLI
from gen_agent.backends.warm import UnrequestedTurn

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
        # the normalized keys beside the raw ones (gen_agent.backend.normalize_usage)
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


# -- faults: each ends in a classified error, and the agent answers the next ask -------------

DEAD_THREAD = "019a0000-0000-7000-8000-000000000000"  # missing_rollout.jsonl resumes it


class Recording(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.infos = opts["infos"]
        return opts["backend_opts"], None

    def handle_info(self, message: Any, state: Any) -> Any:
        self.infos.put(message)
        return gen_agent.NoReply(state)


def scripted(tmp_path: Path, scenario: str, **env: str) -> dict[str, Any]:
    """Backend options running the fake app-server's scripted `scenario`."""
    options = replaying(tmp_path, "two_turns.jsonl")
    options["env"] = {"FAKE_CODEX_DIR": str(tmp_path), "FAKE_CODEX_SCENARIO": scenario, **env}
    return options


def failure(name: str, prompt: str = "hello") -> BackendError:
    with pytest.raises(TurnError) as info:
        gen_agent.ask(name, prompt, timeout=30)
    reason = info.value.reason
    assert isinstance(reason, BackendError), reason  # classified: never task_crashed
    return reason


def test_a_missing_rollout_on_resume_is_session_not_found_and_the_thread_forgotten(
        tmp_path: Path) -> None:
    options = replaying(tmp_path, "missing_rollout.jsonl", session_id=DEAD_THREAD)
    gen_agent.start_agent(Agent, name="gone", backend=CodexCLI, backend_opts=options)

    reason = failure("gone")

    assert (reason.kind, reason.retryable) == ("session_not_found", False)
    assert DEAD_THREAD in (reason.message or "")
    assert reason.diagnostics.session_id is None
    assert gen_agent.backend_session("gone").thread_id is None
    answer = gen_agent.ask("gone", "hello again", timeout=30)
    assert answer.text == "Fresh thread."
    replayed = [json.loads(x) for x in (tmp_path / "replay.jsonl").read_text().splitlines()]
    assert [x["got"][0] for x in replayed] == [
        "initialize", "initialized", "thread/resume",  # process 0: the resume is refused
        "initialize", "initialized", "thread/start", "turn/start"]  # process 1: a new thread
    assert all(x["expected"] == x["got"] for x in replayed)
    assert answer.session_id not in (None, DEAD_THREAD)
    gen_agent.stop("gone")


def test_an_app_server_killed_mid_turn_fails_it_with_diagnostics_and_resumes(
        tmp_path: Path) -> None:
    gen_agent.start_agent(Agent, name="dies", backend=CodexCLI,
                          backend_opts=replaying(tmp_path, "death_mid_turn.jsonl"))
    first = gen_agent.ask("dies", "first", timeout=30)
    assert first.text == "First answer."

    reason = failure("dies", "second")

    assert (reason.kind, reason.retryable) == ("no_result", False)
    assert reason.diagnostics.exit_code == -9
    assert reason.diagnostics.session_id == first.session_id
    assert "WARNING" in (reason.diagnostics.stderr_tail or "")  # what the server had said
    third = gen_agent.ask("dies", "third", timeout=30)
    assert (third.text, third.session_id) == ("Third answer.", first.session_id)
    replayed = [json.loads(x) for x in (tmp_path / "replay.jsonl").read_text().splitlines()]
    resume = next(x for x in replayed if x["got"][0] == "thread/resume")
    assert resume["params"]["threadId"] == first.session_id
    gen_agent.stop("dies")


@pytest.mark.parametrize(("retry_ms", "retry_after"), [(None, None), ("1500", "1.5")])
def test_an_overloaded_server_is_a_retryable_server_error(
        tmp_path: Path, retry_ms: str | None, retry_after: str | None) -> None:
    """The shape is the app-server's backpressure answer (codex-rs/app-server/src/
    error_code.rs `OVERLOADED_ERROR_CODE = -32001`, README "Backpressure behavior"): the real
    server gives it only when its request queue is full, which a test cannot cause."""
    env = {} if retry_ms is None else {"FAKE_CODEX_RETRY_MS": retry_ms}
    gen_agent.start_agent(Agent, name="busy", backend=CodexCLI,
                          backend_opts=scripted(tmp_path, "overloaded", **env))

    reason = failure("busy")

    assert (reason.kind, reason.retryable, reason.retry_after) == (
        "server_error", True, retry_after)
    assert reason.message == "Server overloaded; retry later."
    assert reason.diagnostics.session_id == "01a230b0-eb20-7c52-92d3-a93103f7102f"
    # Nothing retried inside the backend: the caller's next ask is the next turn/start.
    assert gen_agent.ask("busy", "again", timeout=30).text == "ok"
    gen_agent.stop("busy")


def test_another_turns_notifications_never_reach_the_asked_turn(tmp_path: Path) -> None:
    infos: queue.Queue[Any] = queue.Queue()
    gen_agent.start_agent(Recording, name="other", backend=CodexCLI,
                          backend_opts=scripted(tmp_path, "other_turn"), infos=infos)

    answer = gen_agent.ask("other", "hello", timeout=30)

    assert answer.text == "ok"
    assert [e.data["text"] for e in answer.events if e.kind == "text"] == ["ok"]
    record = infos.get(timeout=30)
    assert isinstance(record, UnrequestedTurn)
    assert (record.backend, record.turn_id, record.text, record.complete) == (
        "codex", "other-turn", "not yours", True)
    assert gen_agent.ask("other", "again", timeout=30).text == "ok"
    gen_agent.stop("other")


def test_an_escaped_lone_surrogate_in_a_notification_decodes_and_is_recorded(
        tmp_path: Path) -> None:
    gen_agent.start_agent(Agent, name="sur", backend=CodexCLI,
                          backend_opts=scripted(tmp_path, "surrogate"))
    answer = gen_agent.ask("sur", "hello \ud800 there", timeout=30)  # sent escaped
    assert answer.text == "half \ufffd pair"
    # Both lines holding it (the item and the completed turn's copy) say so.
    assert [e.data["count"] for e in answer.events
            if e.kind == "codex.surrogates_replaced"] == [1, 1]
    assert gen_agent.ask("sur", "again", timeout=30).text == "half \ufffd pair"
    gen_agent.stop("sur")

"""Busy policies on the Claude CLI (warm mode, on the fake streaming-input `claude` of
tests/fakes/fake_claude_warm.py): interrupt and steer work as on every backend, in a running
turn and in one that runs a tool; rollback is refused (the transcript is the CLI's own)."""

from __future__ import annotations

from typing import Any

import pytest

import gen_agent
from gen_agent import RequestOptions, TurnError
from gen_agent._errors import AgentStartError
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.backends.codex import CodexCLI
from gen_agent.telemetry import (
    REQUEST_QUEUED,
    TURN_DISCARDED,
    TURN_ERROR,
    TURN_JOINED,
    TURN_STOP,
    TelemetryRecorder,
)

from .test_claude_warm import WAIT_S, FakeWarm, ask, in_background, start, wait_text

pytestmark = pytest.mark.usefixtures("no_child_left")


@pytest.fixture
def fake(tmp_path: Any) -> FakeWarm:
    return FakeWarm(tmp_path)


def test_the_cli_backends_do_not_declare_rollback() -> None:
    assert not getattr(ClaudeCLI, "supports_rollback", False)
    assert not getattr(CodexCLI, "supports_rollback", False)


def test_rollback_as_a_start_option_fails_before_a_process_starts(fake: FakeWarm) -> None:
    with pytest.raises(AgentStartError, match="ClaudeCLI"):
        start(fake, busy="rollback")
    assert fake.calls() == []


@pytest.mark.parametrize("prompt, marker", [("slow please", "partial "),
                                            ("bash please", "tool_use")])
def test_interrupt_cuts_a_warm_turn_and_rollback_is_refused(fake: FakeWarm, prompt: str,
                                                            marker: str) -> None:
    with TelemetryRecorder([TURN_ERROR, TURN_STOP, TURN_DISCARDED]) as rec:
        start(fake)
        caller, outcome = in_background(prompt)
        wait_text(marker)
        with pytest.raises(TurnError) as refused:
            gen_agent.ask("w", "hello back", options=RequestOptions(busy="rollback"),
                          timeout=WAIT_S)
        assert refused.value.reason == "rollback_unsupported"
        answer = gen_agent.ask("w", "hello now", options=RequestOptions(busy="interrupt"),
                               timeout=WAIT_S)
        assert outcome.get(timeout=WAIT_S).reason == "interrupted"
        caller.join(WAIT_S)
    assert answer.text == "echo: hello now"
    mine = [r for r in rec.records if r.metadata.get("agent") == "w"]
    assert [r.metadata["reason_kind"] for r in mine if r.event_name == TURN_ERROR] == [
        "interrupted"]
    assert sum(r.event_name == TURN_STOP for r in mine) == 1
    assert not any(r.event_name == TURN_DISCARDED for r in mine)
    gen_agent.stop("w")


def test_steer_runs_next_on_the_warm_process(fake: FakeWarm) -> None:
    start(fake, busy="steer")
    caller, outcome = in_background("slow please")
    wait_text("partial ")
    with TelemetryRecorder([REQUEST_QUEUED]) as rec:
        queued = gen_agent.tell("w", "hello queued", options=RequestOptions(busy="enqueue"))
        steered, answer = in_background("hello steered")
        rec.wait_for(lambda r: r.metadata.get("agent") == "w" and r.metadata["ahead"], WAIT_S)
    # the slow turn runs until interrupted; the steered request goes before the queued one
    assert gen_agent.interrupt_request("w", gen_agent.status("w").current_request) == "accepted"
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    assert answer.get(timeout=WAIT_S).text == "echo: hello steered"
    steered.join(WAIT_S)
    caller.join(WAIT_S)
    assert ask("hello last").text == "echo: hello last"
    assert gen_agent.poll("w", queued).response.text == "echo: hello queued"
    gen_agent.stop("w")


# ---------------------------------------------------------------------- steer into the turn
def _infos_now(infos: Any) -> list[Any]:
    seen = []
    while not infos.empty():
        seen.append(infos.get_nowait())
    return seen


def test_steer_joins_a_warm_turn_whose_tool_runs(fake: FakeWarm) -> None:
    infos = start(fake, busy="steer")
    with TelemetryRecorder([TURN_JOINED, TURN_STOP, TURN_ERROR]) as rec:
        caller, outcome = in_background("steer please")
        wait_text("tool_use")
        answer = ask("hello more")
        first = outcome.get(timeout=WAIT_S)
        caller.join(WAIT_S)
    # one turn, one result: both callers get its Response, which lists the steered ref
    assert first is answer or first == answer
    assert answer.text == "joined: hello more" and answer.num_turns == 2
    assert len(answer.joined) == 1
    mine = [r for r in rec.records if r.metadata.get("agent") == "w"]
    assert [r.metadata["ref"] for r in mine if r.event_name == TURN_JOINED] == [
        answer.joined[0]]
    assert sum(r.event_name == TURN_STOP for r in mine) == 1
    assert not any(r.event_name == TURN_ERROR for r in mine)
    assert ask("hello last").text == "echo: hello last"  # the matching is not confused
    assert len(fake.calls()) == 1
    assert [type(m).__name__ for m in _infos_now(infos)] == []
    gen_agent.stop("w")


def test_steer_the_turn_ended_without_runs_as_its_own_turn(fake: FakeWarm) -> None:
    infos = start(fake, busy="steer")
    with TelemetryRecorder([TURN_JOINED, TURN_STOP]) as rec:
        caller, outcome = in_background("steerlate please")
        wait_text("tool_use")
        answer = ask("hello more")
        first = outcome.get(timeout=WAIT_S)
        caller.join(WAIT_S)
    assert first.text == "done early" and first.joined == ()
    # run again as a normal turn; the CLI's own turn for the line it queued was dropped
    assert answer.text == "echo: hello more" and answer.joined == ()
    mine = [r for r in rec.records if r.metadata.get("agent") == "w"]
    assert not any(r.event_name == TURN_JOINED for r in mine)
    assert sum(r.event_name == TURN_STOP for r in mine) == 2
    assert ask("hello last").text == "echo: hello last"
    assert [type(m).__name__ for m in _infos_now(infos)] == []  # no UnrequestedTurn
    gen_agent.stop("w")


def test_the_warm_backend_refuses_a_steer_without_a_tool_in_flight(fake: FakeWarm) -> None:
    start(fake)
    ask("hello first")
    assert ClaudeCLI.steer(gen_agent.backend_session("w", timeout=WAIT_S), "x") is False
    caller, outcome = in_background("slow please")
    wait_text("partial ")
    assert ClaudeCLI.steer(gen_agent.backend_session("w", timeout=WAIT_S), "x") is False
    gen_agent.interrupt("w")
    assert outcome.get(timeout=WAIT_S).reason == "interrupted"
    caller.join(WAIT_S)
    gen_agent.stop("w")

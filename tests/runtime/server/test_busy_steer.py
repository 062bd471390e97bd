"""`busy="steer"` into a running turn, on the mock backend given a `steer` hook (the optional
backend hook the warm Claude backend implements): a steered request runs `pre_turn` first
(§3.5), then the backend takes it or not. Taken: one outcome, the `Response` of the turn it
joined (`joined` lists it), one `TURN_JOINED`, the turn's callbacks once (Appendix B). Not
taken (refused, or the turn ended without it): it runs next with the prompt `pre_turn` gave,
`pre_turn` not run again.
"""

from __future__ import annotations

import queue
from typing import Any, ClassVar

import pytest

import gen_agent
from gen_agent import Halt, Proceed, RequestOptions, Skip, TurnError
from gen_agent._event import Event
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import TURN_ERROR, TURN_JOINED, TURN_STOP, TelemetryRecorder
from gen_agent.testing import wait_until_idle
from tests._agents import WAIT_S, CallLog, in_thread, start

STEER = RequestOptions(busy="steer")


class SteeringMock(MockBackend):
    """The mock with a `steer` hook: records each prompt offered, answers `accept`."""

    accept: ClassVar[bool] = True
    offered: ClassVar[CallLog] = CallLog()

    @classmethod
    def steer(cls, session: Any, prompt: str) -> bool:
        cls.offered.add("steer", prompt)
        return cls.accept


@pytest.fixture(autouse=True)
def _reset() -> Any:
    SteeringMock.accept = True
    SteeringMock.offered = CallLog()
    yield


def turn(text: str, joined: int | None = None) -> list[Event]:
    result = None if joined is None else {"steered_joined": joined}
    return mock.text_turn(text, result=result)


def held(log: CallLog, joined: int | None, *more: Any, **opts: Any) -> tuple[Any, Any]:
    gate = mock.gate(turn("first", joined), timeout=WAIT_S)
    agent = start(scripts=[gate, *more], log=log, backend=SteeringMock, **opts)
    done: queue.Queue = queue.Queue()
    agent.tell_with_completion("running", done)
    assert gate.wait_blocked(WAIT_S)
    return agent, (gate, done)


def mine(rec: TelemetryRecorder, name: tuple[str, ...]) -> list[dict[str, Any]]:
    return [r.metadata for r in rec.records if r.event_name == name
            and r.metadata.get("agent") == "a"]


def rewrite(prompt: str, state: Any) -> Any:
    return Proceed(f"[{prompt}]", state)


def test_a_taken_steer_gets_the_joined_turns_response() -> None:
    log = CallLog()
    with TelemetryRecorder([TURN_JOINED, TURN_STOP, TURN_ERROR]) as rec:
        agent, (gate, done) = held(log, 1, busy="steer", hooks={"pre_turn": rewrite})
        steered = in_thread(agent.ask, "more", timeout=WAIT_S)
        SteeringMock.offered.wait_for(("steer", "[more]"), WAIT_S)
        gate.release()
        answer = steered.result(WAIT_S)
        first = done.get(timeout=WAIT_S)
        wait_until_idle("a", WAIT_S)
    assert first.ok and first.outcome[1] is answer  # one Response, shared
    assert answer.text == "first" and len(answer.joined) == 1
    assert MockBackend.history("a") == ["[running]"]  # no turn of its own
    assert log.count("pre_turn") == 2 and log.count("handle_response") == 1
    assert log.count("post_turn") == 1 and log.count("handle_error") == 0
    joined = mine(rec, TURN_JOINED)
    assert len(joined) == 1 and joined[0]["ref"] == answer.joined[0]
    assert joined[0]["into"] == first.ref and joined[0]["origin"] == "ask"
    assert set(joined[0]) == {"agent", "ref", "origin", "into"}  # content-free
    assert len(mine(rec, TURN_STOP)) == 1 and mine(rec, TURN_ERROR) == []
    gen_agent.stop("a")


def test_a_refused_steer_runs_next_without_a_second_pre_turn() -> None:
    SteeringMock.accept = False
    log = CallLog()
    with TelemetryRecorder([TURN_JOINED, TURN_STOP]) as rec:
        agent, (gate, done) = held(log, None, turn("second"), turn("third"), busy="steer",
                                   hooks={"pre_turn": rewrite})
        agent.tell("queued", options=RequestOptions(busy="enqueue"))
        steered = in_thread(agent.ask, "more", timeout=WAIT_S)
        SteeringMock.offered.wait_for(("steer", "[more]"), WAIT_S)
        gate.release()
        answer = steered.result(WAIT_S)
        wait_until_idle("a", WAIT_S)
    assert answer.text == "second" and answer.joined == ()
    assert MockBackend.history("a") == ["[running]", "[more]", "[queued]"]
    assert [e[1] for e in log.entries if e[0] == "pre_turn"] == [
        "running", "more", "queued"]
    assert mine(rec, TURN_JOINED) == [] and len(mine(rec, TURN_STOP)) == 3
    assert done.get(timeout=WAIT_S).ok
    gen_agent.stop("a")


def test_a_steer_the_turn_ended_without_runs_next_as_its_own_turn() -> None:
    log = CallLog()
    with TelemetryRecorder([TURN_JOINED, TURN_STOP]) as rec:
        agent, (gate, done) = held(log, 0, turn("second"), busy="steer")
        steered = in_thread(agent.ask, "more", timeout=WAIT_S)
        SteeringMock.offered.wait_for(("steer", "more"), WAIT_S)
        gate.release()
        answer = steered.result(WAIT_S)
        wait_until_idle("a", WAIT_S)
    assert answer.text == "second" and answer.joined == ()
    assert done.get(timeout=WAIT_S).outcome[1].joined == ()
    assert MockBackend.history("a") == ["running", "more"]
    assert log.count("pre_turn") == 2 and log.count("handle_response") == 2
    assert mine(rec, TURN_JOINED) == [] and len(mine(rec, TURN_STOP)) == 2
    gen_agent.stop("a")


def test_a_steer_pre_turn_skips_is_never_offered() -> None:
    log = CallLog()

    def skip_more(prompt: str, state: Any) -> Any:
        return Skip(state) if prompt == "more" else Proceed(prompt, state)

    agent, (gate, done) = held(log, None, busy="steer", hooks={"pre_turn": skip_more})
    with pytest.raises(TurnError) as skipped:
        agent.ask("more", timeout=WAIT_S)
    assert skipped.value.reason == "pre_turn_skipped"
    assert SteeringMock.offered.entries == []
    gate.release()
    assert done.get(timeout=WAIT_S).ok
    gen_agent.stop("a")


def test_a_taken_steer_shares_the_failure_of_an_interrupted_turn() -> None:
    log = CallLog()
    with TelemetryRecorder([TURN_JOINED, TURN_ERROR]) as rec:
        agent, (_gate, done) = held(log, 1, busy="steer")
        steered = in_thread(agent.ask, "more", timeout=WAIT_S)
        SteeringMock.offered.wait_for(("steer", "more"), WAIT_S)
        gen_agent.interrupt("a")
        with pytest.raises(TurnError) as cut:
            steered.result(WAIT_S)
        assert done.get(timeout=WAIT_S).outcome == ("error", "interrupted")
        wait_until_idle("a", WAIT_S)
    assert cut.value.reason == "interrupted"
    assert log.count("handle_error") == 1 and log.count("post_turn") == 1
    assert len(mine(rec, TURN_JOINED)) == 1 and len(mine(rec, TURN_ERROR)) == 1
    gen_agent.stop("a")


def test_a_steer_pre_turn_halts_once_the_running_turn_ends() -> None:
    log = CallLog()

    def halt_more(prompt: str, state: Any) -> Any:
        return Halt(state) if prompt == "more" else Proceed(prompt, state)

    agent, (gate, done) = held(log, None, busy="steer", hooks={"pre_turn": halt_more})
    with pytest.raises(TurnError) as halted:
        agent.ask("more", timeout=WAIT_S)
    assert halted.value.reason == "pre_turn_halted"
    assert log.count("post_run") == 0  # the running turn goes on
    gate.release()
    assert done.get(timeout=WAIT_S).ok
    log.wait_for(lambda entry: entry[0] == "post_run", WAIT_S)
    assert SteeringMock.offered.entries == []
    gen_agent.stop("a")


def test_a_joined_steer_has_its_lifecycle_records() -> None:
    log = CallLog()
    records: queue.Queue = queue.Queue()
    agent, (gate, done) = held(log, 1, busy="steer")
    steered = in_thread(agent.ask, "more", timeout=WAIT_S,
                        options=RequestOptions(busy="steer", lifecycle_to=records.put))
    SteeringMock.offered.wait_for(("steer", "more"), WAIT_S)
    gate.release()
    answer = steered.result(WAIT_S)
    into = done.get(timeout=WAIT_S).ref
    stages = [records.get(timeout=WAIT_S) for _ in range(2)]
    assert [(r.stage, r.info) for r in stages] == [
        ("started", {"attempt": 1, "into": into}),
        ("completed", {"ok": True, "reason_kind": None})]
    assert stages[0].ref == answer.joined[0]
    gen_agent.stop("a")

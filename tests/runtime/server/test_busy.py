"""Busy policies (`busy=`: enqueue, reject, interrupt, rollback, steer), per-request lifecycle
records (`lifecycle_to=`) and `interrupt_receipt`, on the mock backend.

Each test holds a turn with a gate (the turn task is blocked in the backend, known without
sleeping), sends a second request, and asserts the outcomes, the callbacks and the telemetry
counts the contract demands (§2.6, §4.4, §4.5, §4.7, §4.13, Appendix B).
"""

from __future__ import annotations

import queue
from typing import Any

import pytest

import gen_agent
from gen_agent import InterruptReceipt, Prompt, RequestOptions, TurnError
from gen_agent._delivered import Lifecycle
from gen_agent._errors import AgentNotFound, AgentStartError
from gen_agent._event import Event
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import (
    INPUT_REJECTED,
    MAILBOX_QUEUED,
    REQUEST_QUEUED,
    TURN_DISCARDED,
    TURN_ERROR,
    TURN_REJECTED,
    TURN_START,
    TURN_STOP,
    TelemetryRecorder,
)
from gen_agent.testing import wait_until_idle
from tests._agents import WAIT_S, CallLog, Probe, in_thread, start

EVENTS = [TURN_START, TURN_STOP, TURN_ERROR, TURN_REJECTED, INPUT_REJECTED, MAILBOX_QUEUED,
          REQUEST_QUEUED, TURN_DISCARDED]


def turn(text: str) -> list[Event]:
    return mock.text_turn(text)


def held(log: CallLog | None = None, **opts: Any) -> tuple[gen_agent.AgentRef, Any, queue.Queue]:
    """An agent whose first tell ("running") is held in a gate; scripts after it answer
    "second" and "third". Returns the agent, the gate and the completion queue."""
    gate = mock.gate(turn("never"), timeout=WAIT_S)
    agent = start(scripts=[gate, turn("second"), turn("third"), turn("fourth")],
                  log=log or CallLog(), **opts)
    done: queue.Queue = queue.Queue()
    agent.tell_with_completion("running", done)
    assert gate.wait_blocked(WAIT_S)
    return agent, gate, done


def names(rec: TelemetryRecorder, name: tuple[str, ...]) -> list[dict[str, Any]]:
    return [r.metadata for r in rec.records if r.event_name == name
            and r.metadata.get("agent") == "a"]


def history() -> list[str]:
    return MockBackend.history("a")


# ---------------------------------------------------------------------- enqueue (default)
def test_enqueue_is_the_default_fifo_and_queued_telemetry_names_the_request() -> None:
    with TelemetryRecorder(EVENTS) as rec:
        agent, gate, _done = held()
        first = agent.tell("q1")
        second = agent.tell("q2", options=RequestOptions(busy="enqueue"))
        gate.release()
        wait_until_idle("a", WAIT_S)
    assert history() == ["running", "q1", "q2"]
    queued = names(rec, REQUEST_QUEUED)
    assert [(m["ref"], m["origin"], m["ahead"]) for m in queued] == [
        (first, "tell", False), (second, "tell", False)]
    assert len(names(rec, MAILBOX_QUEUED)) == 2
    assert len(names(rec, TURN_STOP)) == 3 and names(rec, TURN_ERROR) == []


# ---------------------------------------------------------------------- reject
def test_reject_fails_at_once_with_busy_and_overload_telemetry() -> None:
    log = CallLog()
    with TelemetryRecorder(EVENTS) as rec:
        agent, gate, done = held(log, busy="reject")
        with pytest.raises(TurnError) as ask_err:
            agent.ask("late", timeout=WAIT_S)
        with pytest.raises(TurnError) as tell_err:
            agent.tell("late too")
        gate.release()
        outcome = done.get(timeout=WAIT_S)
        wait_until_idle("a", WAIT_S)
    assert ask_err.value.reason == "busy" and tell_err.value.reason == "busy"
    assert outcome.ok  # the running turn is untouched
    assert history() == ["running"]
    assert log.count("handle_response") == 1 and log.count("handle_error") == 0
    assert [m["reason"] for m in names(rec, INPUT_REJECTED)] == ["busy", "busy"]
    assert [(m["origin"], m["reason_kind"]) for m in names(rec, TURN_REJECTED)] == [
        ("ask", "busy"), ("tell", "busy")]
    assert names(rec, MAILBOX_QUEUED) == []


def test_reject_per_request_and_an_idle_agent_dispatches_whatever_the_policy() -> None:
    agent = start(scripts=[turn("idle ok")], busy="reject")
    assert agent.ask("now", timeout=WAIT_S).text == "idle ok"  # not busy: runs
    gate = mock.gate(turn("x"), timeout=WAIT_S)
    agent2 = start(name="b", scripts=[gate])
    agent2.tell("hold")
    assert gate.wait_blocked(WAIT_S)
    with pytest.raises(TurnError) as err:
        agent2.ask("no", options=RequestOptions(busy="reject"), timeout=WAIT_S)
    assert err.value.reason == "busy"
    agent2.interrupt()


# ---------------------------------------------------------------------- interrupt
def test_interrupt_cuts_the_running_turn_and_runs_next_ahead_of_the_mailbox() -> None:
    log = CallLog()
    with TelemetryRecorder(EVENTS) as rec:
        agent, _gate, done = held(log)
        queued = agent.tell("queued")
        response = agent.ask("urgent", options=RequestOptions(busy="interrupt"),
                             timeout=WAIT_S)
        outcome = done.get(timeout=WAIT_S)
        wait_until_idle("a", WAIT_S)
    assert response.text == "second" and response.prompt == "urgent"
    assert outcome.outcome == ("error", "interrupted") and done.empty()
    assert history() == ["running", "urgent", "queued"]
    assert gen_agent.poll("a", queued).status == "completed"
    assert log.of("handle_error") == [("handle_error", "interrupted")]
    assert log.count("post_turn") == 3 and log.count("handle_response") == 2
    assert [m["reason_kind"] for m in names(rec, TURN_ERROR)] == ["interrupted"]
    assert len(names(rec, TURN_START)) == 3 and len(names(rec, TURN_STOP)) == 2
    assert names(rec, TURN_DISCARDED) == []


def test_a_follow_up_from_the_interrupted_turns_handle_error_still_runs_first() -> None:
    log = CallLog()
    hooks = {"handle_error": lambda ref, reason, state: Prompt("recover", state)}
    agent, _gate, _done = held(log, busy="interrupt", hooks=hooks)
    agent.tell("queued", options=RequestOptions(busy="enqueue"))
    agent.ask("urgent", timeout=WAIT_S)
    wait_until_idle("a", WAIT_S)
    assert history() == ["running", "recover", "urgent", "queued"]


def test_two_interrupters_keep_their_order_ahead_of_the_mailbox() -> None:
    gate = mock.gate(turn("never"), timeout=WAIT_S)
    gate2 = mock.gate(turn("never2"), timeout=WAIT_S)
    agent = start(scripts=[gate, gate2, turn("3"), turn("4"), turn("5")],
                  hooks={"handle_error": lambda ref, reason, state: Prompt("hold", state)})
    agent.tell("running")
    assert gate.wait_blocked(WAIT_S)
    agent.tell("queued")
    agent.tell("i1", options=RequestOptions(busy="interrupt"))  # follow-up "hold" runs first
    assert gate2.wait_blocked(WAIT_S)
    agent.tell("s1", options=RequestOptions(busy="steer"))
    gate2.release()
    wait_until_idle("a", WAIT_S)
    assert history() == ["running", "hold", "i1", "s1", "queued"]


def test_interrupting_a_turn_that_runs_a_tool() -> None:
    log = CallLog()
    tool = Event.new("tool_use", {"name": "Bash", "id": "t1", "input": {"cmd": "sleep"}})
    gate = mock.gate([tool, *turn("never")], timeout=WAIT_S)
    stream = CallLog()
    agent = start(scripts=[gate, turn("after")], log=log)
    done: queue.Queue = queue.Queue()
    agent.tell_with_completion("tooling", done, stream_to=lambda m: stream.add(m.event.kind))
    assert gate.wait_blocked(WAIT_S)
    assert agent.ask("now", options=RequestOptions(busy="interrupt"),
                     timeout=WAIT_S).text == "after"
    assert done.get(timeout=WAIT_S).outcome == ("error", "interrupted")
    assert log.count("handle_error") == 1 and log.count("post_turn") == 2


# ---------------------------------------------------------------------- steer
def test_steer_runs_next_without_interrupting() -> None:
    log = CallLog()
    with TelemetryRecorder(EVENTS) as rec:
        agent, gate, done = held(log, busy="steer")
        agent.tell("queued", options=RequestOptions(busy="enqueue"))
        steered = in_thread(agent.ask, "steered", timeout=WAIT_S)
        rec.wait_for(lambda r: r.event_name == MAILBOX_QUEUED and r.metadata.get("agent") == "a"
                     and r.measurements["depth"] == 2, WAIT_S)
        gate.release()
        assert steered.result(WAIT_S).text == "second"
        assert done.get(timeout=WAIT_S).ok
        wait_until_idle("a", WAIT_S)
    assert history() == ["running", "steered", "queued"]
    assert log.count("handle_error") == 0 and log.count("handle_response") == 3
    assert names(rec, TURN_ERROR) == [] and len(names(rec, TURN_STOP)) == 3


# ---------------------------------------------------------------------- rollback
def test_rollback_ends_the_turn_as_an_interrupt_and_reports_the_discard() -> None:
    log = CallLog()
    records: queue.Queue = queue.Queue()
    with TelemetryRecorder(EVENTS) as rec:
        gate = mock.gate(turn("never"), timeout=WAIT_S)
        agent = start(scripts=[gate, turn("redo")], log=log)
        done: queue.Queue = queue.Queue()
        cut = agent.tell_with_completion("wrong", done,
                                         options=RequestOptions(lifecycle_to=records.put))
        assert gate.wait_blocked(WAIT_S)
        redo = agent.ask("right", options=RequestOptions(busy="rollback"), timeout=WAIT_S)
        wait_until_idle("a", WAIT_S)
    assert redo.text == "redo"
    assert done.get(timeout=WAIT_S).outcome == ("error", "interrupted") and done.empty()
    assert log.count("handle_error") == 1 and log.count("post_turn") == 2
    discarded = names(rec, TURN_DISCARDED)
    assert len(discarded) == 1 and discarded[0]["ref"] == cut
    assert discarded[0]["origin"] == "tell"
    assert [m["reason_kind"] for m in names(rec, TURN_ERROR)] == ["interrupted"]
    stages = [records.get_nowait() for _ in range(records.qsize())]
    assert [s.stage for s in stages] == ["started", "discarded"]
    assert stages[1].info["by"] == discarded[0]["by"]


class NoRollback(MockBackend):
    supports_rollback = False


def test_rollback_is_refused_on_a_backend_that_cannot_drop_an_exchange() -> None:
    with pytest.raises(AgentStartError) as err:
        gen_agent.start_agent(Probe, name="r", backend=NoRollback, busy="rollback")
    assert "supports_rollback" in str(err.value)
    agent = gen_agent.start_agent(Probe, name="r", backend=NoRollback, scripts=[turn("fine")])
    with pytest.raises(TurnError) as refused:
        agent.ask("x", options=RequestOptions(busy="rollback"), timeout=WAIT_S)
    assert refused.value.reason == "rollback_unsupported"
    assert agent.ask("y", timeout=WAIT_S).text == "fine"  # nothing was consumed


# ---------------------------------------------------------------------- lifecycle records
def test_lifecycle_records_only_when_asked_and_one_completion_either_way() -> None:
    records: queue.Queue = queue.Queue()
    agent, gate, done = held()
    plain: queue.Queue = queue.Queue()
    watched = agent.tell_with_completion("watched", plain,
                                         options=RequestOptions(lifecycle_to=records.put))
    cancelled = agent.tell("cancel me", options=RequestOptions(lifecycle_to=records.put))
    assert agent.cancel_request(cancelled) == "cancelled"
    gate.release()
    assert plain.get(timeout=WAIT_S).ok
    wait_until_idle("a", WAIT_S)
    assert plain.empty() and done.get(timeout=WAIT_S).ok and done.empty()
    got = [records.get_nowait() for _ in range(records.qsize())]
    assert all(isinstance(r, Lifecycle) and r.tag == "gen_agent" and r.name == "a"
               for r in got)
    assert [(r.ref, r.stage) for r in got] == [
        (watched, "queued"), (cancelled, "queued"), (cancelled, "cancelled"),
        (watched, "started"), (watched, "completed")]
    assert got[0].info == {"depth": 1, "ahead": False}
    assert got[2].info == {"reason_kind": "caller_cancelled"}
    assert got[4].info == {"ok": True, "reason_kind": None}


def test_lifecycle_of_an_interrupted_request_ends_completed_with_its_kind() -> None:
    records: queue.Queue = queue.Queue()
    agent = start(scripts=[mock.gate(turn("x"), timeout=WAIT_S), turn("y")])
    ref = agent.tell("held", options=RequestOptions(lifecycle_to=records.put))
    receipt = agent.interrupt_receipt(timeout=WAIT_S)
    assert receipt == InterruptReceipt(interrupted=ref, origin="tell", queued=())
    wait_until_idle("a", WAIT_S)
    got = [records.get_nowait() for _ in range(records.qsize())]
    assert [(r.stage, r.info) for r in got] == [
        ("started", {"attempt": 1}), ("completed", {"ok": False, "reason_kind": "interrupted"})]


# ---------------------------------------------------------------------- interrupt_receipt
def test_interrupt_receipt_names_the_interrupted_turn_and_the_queue() -> None:
    log = CallLog()
    agent, _gate, done = held(log)
    running = gen_agent.status("a").current_request
    q1, q2 = agent.tell("q1"), agent.tell("q2")
    receipt = gen_agent.interrupt_receipt("a", timeout=WAIT_S)
    assert receipt.interrupted == running and receipt.origin == "tell"
    assert receipt.queued == (q1, q2)
    assert done.get(timeout=WAIT_S).outcome == ("error", "interrupted")
    wait_until_idle("a", WAIT_S)
    assert gen_agent.interrupt_receipt("a", timeout=WAIT_S) == InterruptReceipt()
    assert log.count("handle_error") == 1
    with pytest.raises(AgentNotFound):
        gen_agent.interrupt_receipt("nobody", timeout=WAIT_S)
    assert gen_agent.interrupt("nobody") is None  # the cast stays a cast


# ---------------------------------------------------------------------- validation
def test_bad_policies_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="busy must be one of"):
        RequestOptions(busy="later")
    with pytest.raises(TypeError, match="lifecycle_to"):
        RequestOptions(lifecycle_to=42)
    with pytest.raises(AgentStartError, match="busy must be one of"):
        start(busy="now")
    with pytest.raises(AgentStartError, match="busy must be one of"):
        start(name="n", busy=3)

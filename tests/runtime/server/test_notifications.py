"""Notification deferral and halt/resume (contract §2.8, §2.9, §2.13, §2.14, §3.9, §3.11,
§4.10-§4.12): a notification that arrives mid-turn is applied after the decision callback and
post_turn, in arrival order, before the agent goes idle, so the decision callback can never
overwrite it (the original notify-overwrite bug)."""

from __future__ import annotations

import queue
from typing import Any

import pytest
from _agents import WAIT_S, CallLog, Probe, ProbeWithInfo, failure, in_thread, log_telemetry, start

import gen_agent
from gen_agent import Halt, NoReply, OverloadInfo, Prompt, TurnError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import (
    HALTED,
    INPUT_REJECTED,
    MAILBOX_QUEUED,
    TURN_START,
    TelemetryRecorder,
)


def _append(event: Any, state: list[Any]) -> Any:
    return NoReply([*state, event])


def _busy(log: CallLog, *more_scripts: Any, **opts: Any) -> tuple[gen_agent.AgentRef, Any]:
    """An agent whose first turn ("first") is held in a gate; returns (ref, gate)."""
    g = mock.gate(mock.text_turn("first"))
    opts.setdefault("state", [])
    hooks = {"handle_event": _append, **opts.pop("hooks", {})}
    ref = start(opts.pop("module", None) or ProbeWithInfo, log=log, scripts=[g, *more_scripts],
                hooks=hooks, **opts)
    return ref, g


# --- deferral (§4.10) ------------------------------------------------------------------------


def test_mid_turn_notifications_are_applied_after_the_decision_and_never_overwritten() -> None:
    log = CallLog()
    decided_on: list[Any] = []

    def handle_response(ref: Any, response: Any, state: list[Any]) -> Any:
        decided_on.append(state)
        return NoReply([*state, "response"])

    def post_turn(outcome: Any, ref: Any, state: list[Any]) -> Any:
        return [*state, "post_turn"]

    ref, g = _busy(log, hooks={"handle_response": handle_response, "post_turn": post_turn})
    with log_telemetry(log, "a", [gen_agent.telemetry.STATE_CHANGED]):
        asked = in_thread(ref.ask, "q", WAIT_S)
        g.wait_blocked(WAIT_S)
        gen_agent.notify("a", "n1")
        gen_agent.notify("a", "n2")
        snapshot = ref.runtime_snapshot(timeout=WAIT_S)
        busy_state = ref.status(timeout=WAIT_S).agent_state
        g.release()
        asked.result(WAIT_S)
        final = ref.status(timeout=WAIT_S).agent_state

    assert snapshot.pending_notifications == 2 and busy_state == []
    assert decided_on == [[]]  # the decision callback never sees mid-turn notifications
    assert final == ["response", "post_turn", "n1", "n2"]
    tail = [e[0] if e[0] != "telemetry" else e[2]["to"] for e in log.entries][-5:]
    assert tail == ["handle_response", "post_turn", "handle_event", "handle_event", "idle"]


def test_notifications_and_info_messages_are_applied_in_arrival_order() -> None:
    log = CallLog()
    ref, g = _busy(log, hooks={"handle_info": _append})

    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    gen_agent.notify("a", "n1")
    gen_agent.send("a", "i1")
    ref.notify_ack("n2", timeout=WAIT_S)
    gen_agent.send("a", "i2")
    assert ref.runtime_snapshot(timeout=WAIT_S).pending_notifications == 4
    g.release()
    log.wait_for(("handle_info", "i2"))

    assert ref.status(timeout=WAIT_S).agent_state == ["n1", "i1", "n2", "i2"]
    assert [e for e in log.entries if e[0] in ("handle_event", "handle_info")] == [
        ("handle_event", "n1"), ("handle_info", "i1"), ("handle_event", "n2"),
        ("handle_info", "i2")]


def test_info_messages_are_not_buffered_for_an_agent_without_handle_info() -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(Probe, scripts=[g], state=[])

    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    gen_agent.send("a", "dropped")

    assert ref.runtime_snapshot(timeout=WAIT_S).pending_notifications == 0
    g.release()


def test_deferred_notifications_are_applied_before_the_next_dispatch() -> None:
    log = CallLog()
    ref, g = _busy(log, mock.text_turn("second"))

    with TelemetryRecorder([MAILBOX_QUEUED]) as rec:
        ref.tell("q", timeout=WAIT_S)
        g.wait_blocked(WAIT_S)
        ref.notify_ack("n1", timeout=WAIT_S)
        second = in_thread(ref.ask, "next", WAIT_S)
        rec.wait_for(MAILBOX_QUEUED)
        g.release()
        assert second.result(WAIT_S).text == "second"

    names = [e[:2] for e in log.entries if e[0] in ("handle_event", "pre_turn")]
    assert names == [("pre_turn", "q"), ("handle_event", "n1"), ("pre_turn", "next")]


def test_a_deferred_prompt_joins_the_mailbox_behind_already_queued_work() -> None:
    log = CallLog()

    def handle_event(event: Any, state: Any) -> Any:
        return Prompt(f"from {event}", state)

    ref, g = _busy(log, mock.text_turn("q1"), mock.text_turn("ev"),
                   hooks={"handle_event": handle_event})
    with TelemetryRecorder([MAILBOX_QUEUED, TURN_START]) as rec:
        ref.tell("first", timeout=WAIT_S)
        g.wait_blocked(WAIT_S)
        ref.tell("q1", timeout=WAIT_S)
        ref.notify_ack("n1", timeout=WAIT_S)  # buffered; its prompt is queued at turn end
        assert ref.status(timeout=WAIT_S).queued == 1
        g.release()
        log.wait_for(("handle_response", "from n1"))
        origins = [r.metadata["origin"] for r in rec.named(TURN_START)]

    assert MockBackend.history("a") == ["first", "q1", "from n1"]
    assert origins == ["tell", "tell", "event"]


def test_an_interrupt_also_applies_buffered_notifications() -> None:
    log = CallLog()
    ref, g = _busy(log)

    request = ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    ref.notify_ack("n1", timeout=WAIT_S)
    ref.interrupt()
    log.wait_for(("handle_event", "n1"))

    assert ref.poll(request, timeout=WAIT_S).reason == "interrupted"
    assert [e[0] for e in log.entries][-3:] == ["handle_error", "post_turn", "handle_event"]


def test_the_watchdog_also_applies_buffered_notifications() -> None:
    log = CallLog()
    ref, g = _busy(log, watchdog_ms=50)

    request = ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    ref.notify_ack("n1", timeout=WAIT_S)
    ref.notify_ack("n2", timeout=WAIT_S)
    log.wait_for(("handle_event", "n2"))  # the watchdog fired; the buffer was applied

    assert ref.poll(request, timeout=WAIT_S).reason == "timeout"
    assert log.of("handle_error") == [("handle_error", "timeout")]
    assert ref.status(timeout=WAIT_S).agent_state == ["n1", "n2"]
    assert ref.runtime_snapshot(timeout=WAIT_S).pending_notifications == 0


def test_idle_notifications_are_applied_immediately_one_by_one() -> None:
    log = CallLog()
    ref = start(ProbeWithInfo, log=log, state=[], hooks={"handle_event": _append})

    gen_agent.notify("a", "n1")
    assert ref.status(timeout=WAIT_S).agent_state == ["n1"]
    ref.notify_ack("n2", timeout=WAIT_S)
    assert log.entries[-1] == ("handle_event", "n2")  # handled before notify_ack returned
    assert ref.runtime_snapshot(timeout=WAIT_S).pending_notifications == 0
    assert ref.status(timeout=WAIT_S).agent_state == ["n1", "n2"]


def test_an_idle_notification_prompt_is_dispatched_at_once_with_origin_event() -> None:
    log = CallLog()
    g = mock.gate(mock.text_turn("done"))

    def handle_event(event: Any, state: Any) -> Any:
        return Prompt(f"do {event}", state)

    ref = start(log=log, scripts=[g], hooks={"handle_event": handle_event})
    ref.notify_ack("it", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)

    snapshot = ref.runtime_snapshot(timeout=WAIT_S)
    assert snapshot.current_request is not None
    assert snapshot.current_request.origin == "event" and snapshot.pending_prompts == 0
    g.release()
    log.wait_for(("handle_response", "do it"))


def test_the_notification_buffer_is_bounded_and_released_at_turn_end() -> None:
    log = CallLog()
    ref, g = _busy(log, max_pending_notifications=1, max_pending_notification_bytes=1_000)

    with TelemetryRecorder([INPUT_REJECTED]) as rec:
        ref.tell("q", timeout=WAIT_S)
        g.wait_blocked(WAIT_S)
        ref.notify_ack("n1", timeout=WAIT_S)
        with pytest.raises(TurnError) as info:
            ref.notify_ack("n2", timeout=WAIT_S)
        gen_agent.notify("a", "n3")  # a plain notify is dropped silently
        ref.status(timeout=WAIT_S)  # the notify was handled
        rejected = rec.named(INPUT_REJECTED)
        g.release()
        log.wait_for(("handle_event", "n1"))

    kind, overload = info.value.reason
    assert kind == "overloaded" and isinstance(overload, OverloadInfo)
    assert (overload.queue, overload.limit, overload.pending_count, overload.max_count) == (
        "notifications", "count", 1, 1)
    assert [r.metadata["reason"] for r in rejected] == [info.value.reason] * 2
    assert ref.status(timeout=WAIT_S).agent_state == ["n1"]
    ref.notify_ack("n4", timeout=WAIT_S)  # idle again: applied, the buffer is empty
    assert ref.status(timeout=WAIT_S).agent_state == ["n1", "n4"]


# --- halting mid-batch and post_run (§3.11, §4.10, §4.11) ------------------------------------


def _halting(events: set[str]) -> Any:
    def handle_event(event: Any, state: list[Any]) -> Any:
        new = [*state, event]
        return Halt(new) if event in events else NoReply(new)

    return handle_event


def test_halting_mid_batch_still_applies_the_rest_then_post_run_once() -> None:
    log = CallLog()
    ref, g = _busy(log, mock.text_turn("after"),
                   hooks={"handle_event": _halting({"n1", "n3"})})

    with TelemetryRecorder([HALTED, MAILBOX_QUEUED]) as rec:
        ref.tell("q", timeout=WAIT_S)
        g.wait_blocked(WAIT_S)
        for event in ("n1", "n2", "n3", "n4"):
            gen_agent.notify("a", event)
        queued = in_thread(ref.ask, "queued", WAIT_S)
        rec.wait_for(MAILBOX_QUEUED)
        g.release()
        halted = rec.wait_for(HALTED)
        status = ref.status(timeout=WAIT_S)
        ref.resume()
        assert queued.result(WAIT_S).text == "after"

    assert status.halted and status.queued == 1  # the mailbox froze while halted
    assert log.of("post_run") == [("post_run", ["n1", "n2", "n3", "n4"])]
    assert halted.metadata["agent_state"] == ["n1", "n2", "n3", "n4"]
    order = [e[0] for e in log.entries if e[0] in ("handle_event", "post_run")]
    assert order == ["handle_event"] * 4 + ["post_run"]
    assert len(rec.named(HALTED)) == 1


def test_post_run_runs_once_per_transition_into_halted() -> None:
    log = CallLog()
    ref = start(ProbeWithInfo, log=log, state=[], hooks={"handle_event": _halting({"stop"})})

    ref.halt()
    ref.halt()  # already halted: nothing
    ref.notify_ack("stop", timeout=WAIT_S)  # a halting notification while halted: nothing
    ref.notify_ack("n", timeout=WAIT_S)
    assert log.count("post_run") == 1
    assert ref.status(timeout=WAIT_S).agent_state == ["stop", "n"]

    ref.resume()
    ref.notify_ack("stop", timeout=WAIT_S)  # a new transition
    assert log.count("post_run") == 2
    assert ref.status(timeout=WAIT_S).halted


def test_a_decision_halt_applies_buffered_notifications_before_post_run() -> None:
    log = CallLog()

    def handle_response(ref: Any, response: Any, state: list[Any]) -> Any:
        return Halt([*state, "halt"])

    ref, g = _busy(log, hooks={"handle_response": handle_response})
    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    ref.notify_ack("n1", timeout=WAIT_S)
    g.release()

    assert log.wait_for(lambda e: e[0] == "post_run") == ("post_run", ["halt", "n1"])


# --- halt / resume (§2.13, §2.14, §4.11, §4.12) ----------------------------------------------


def test_halt_when_idle_freezes_dispatch_until_resume_keeps_fifo() -> None:
    log = CallLog()
    ref = start(log=log, state="s", scripts=[mock.text_turn("1"), mock.text_turn("2")])

    with TelemetryRecorder([HALTED, MAILBOX_QUEUED]) as rec:
        ref.halt()
        halted = rec.wait_for(HALTED)
        first = in_thread(ref.ask, "one", WAIT_S)
        rec.wait_for(lambda r: r.event_name == MAILBOX_QUEUED and r.measurements["depth"] == 1)
        second = ref.tell("two", timeout=WAIT_S)
        status = ref.status(timeout=WAIT_S)
        ref.resume()
        assert first.result(WAIT_S).text == "1"

    assert halted.metadata == {"agent": "a", "agent_state": "s"}
    assert log.of("post_run") == [("post_run", "s")]
    assert (status.halted, status.queued, status.state) == (True, 2, "idle")
    log.wait_for(("handle_response", "two"))
    assert ref.poll(second, timeout=WAIT_S).status == "completed"
    assert MockBackend.history("a") == ["one", "two"]
    assert not ref.status(timeout=WAIT_S).halted


def test_halt_while_busy_is_pending_until_the_turn_ends() -> None:
    log = CallLog()
    ref, g = _busy(log)

    request = ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    ref.halt()
    busy = ref.status(timeout=WAIT_S)
    assert log.count("post_run") == 0
    ref.notify_ack("n1", timeout=WAIT_S)
    g.release()
    log.wait_for(lambda e: e[0] == "post_run")

    assert (busy.halt_pending, busy.halted) == (True, False)
    status = ref.status(timeout=WAIT_S)
    assert (status.halted, status.halt_pending) == (True, False)
    assert ref.poll(request, timeout=WAIT_S).status == "completed"  # the turn finished first
    assert log.of("post_run") == [("post_run", ["n1"])]  # after the buffered notifications


def test_resume_during_the_turn_cancels_a_pending_halt() -> None:
    log = CallLog()
    ref, g = _busy(log, mock.text_turn("next"))

    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    ref.halt()
    ref.resume()
    status = ref.status(timeout=WAIT_S)
    g.release()

    assert status.halt_pending is False
    assert ref.ask("after", timeout=WAIT_S).text == "next"
    assert log.count("post_run") == 0 and not ref.status(timeout=WAIT_S).halted


def test_resume_runs_a_pending_self_chain_before_the_mailbox() -> None:
    log = CallLog()

    def handle_response(ref: Any, response: Any, state: Any) -> Any:
        return Prompt("chain", state) if response.prompt == "q" else NoReply(state)

    ref, g = _busy(log, mock.text_turn("c"), mock.text_turn("m"),
                   hooks={"handle_response": handle_response})
    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    ref.halt()
    queued = ref.tell("mailbox", timeout=WAIT_S)
    g.release()
    log.wait_for(lambda e: e[0] == "post_run")
    snapshot = ref.runtime_snapshot(timeout=WAIT_S)
    ref.resume()
    log.wait_for(("handle_response", "mailbox"))

    assert snapshot.halted and snapshot.self_chain_pending and snapshot.pending_prompts == 1
    assert MockBackend.history("a") == ["q", "chain", "mailbox"]
    assert ref.poll(queued, timeout=WAIT_S).status == "completed"


def test_a_halted_agent_handles_notifications_and_queues_their_prompts() -> None:
    log = CallLog()

    def handle_event(event: Any, state: list[Any]) -> Any:
        return Prompt(f"do {event}", [*state, event])

    ref = start(log=log, state=[], scripts=[mock.text_turn("done")],
                hooks={"handle_event": handle_event})
    ref.halt()
    ref.notify_ack("x", timeout=WAIT_S)

    status = ref.status(timeout=WAIT_S)
    assert status.agent_state == ["x"] and status.queued == 1 and status.state == "idle"
    assert MockBackend.history("a") == []
    ref.resume()
    log.wait_for(("handle_response", "do x"))


def test_halt_fails_queued_on_halt_fail_completions_and_keeps_the_rest() -> None:
    log = CallLog()
    ref, g = _busy(log, mock.text_turn("kept"))
    completions: queue.Queue[Any] = queue.Queue()

    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    failing = ref.tell_with_completion("f", completions, on_halt="fail", timeout=WAIT_S)
    kept = ref.tell_with_completion("k", completions, timeout=WAIT_S)
    ref.halt()
    g.release()

    assert completions.get(timeout=WAIT_S) == ("gen_agent", "completion", "a", failing,
                                               ("error", "halted"))
    assert ref.poll(failing, timeout=WAIT_S).reason == "halted"
    assert ref.poll(kept, timeout=WAIT_S).status == "pending"
    with pytest.raises(TurnError) as info:  # halted and idle: refused at once
        ref.tell_with_completion("g", completions, on_halt="fail", timeout=WAIT_S)
    assert info.value.reason == "halted"
    ref.resume()
    message = completions.get(timeout=WAIT_S)
    assert message[3] == kept and message[4][1].text == "kept"


def test_halt_and_resume_of_a_missing_agent_are_no_ops() -> None:
    gen_agent.halt("ghost")
    gen_agent.resume("ghost")
    gen_agent.notify("ghost", "e")


def test_resume_of_a_running_agent_is_a_no_op() -> None:
    log = CallLog()
    ref = start(log=log, scripts=[mock.text_turn("ok")])

    ref.resume()

    assert ref.ask("q", timeout=WAIT_S).text == "ok" and log.count("post_run") == 0


def test_a_failing_ask_while_halted_waits_like_any_other() -> None:
    ref = start(scripts=[mock.error("boom")])
    ref.halt()
    with TelemetryRecorder([MAILBOX_QUEUED]) as rec:
        asked = in_thread(ref.ask, "q", WAIT_S)
        rec.wait_for(MAILBOX_QUEUED)
    ref.resume()

    assert failure(asked).reason == "boom"  # type: ignore[attr-defined]

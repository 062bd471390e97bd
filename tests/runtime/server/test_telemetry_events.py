"""Telemetry the agent emits (contract §8): every event with its measurements and metadata,
their order around a turn (§4.21), exactly one terminal event per started attempt, and a turn
family that never carries prompts, responses, raw reasons or agent state."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _agents import WAIT_S, CallLog, in_thread, start, text_events

import gen_agent
from gen_agent import Halt, NoReply, OverloadInfo, Proceed, Prompt, TurnError
from gen_agent.backends import mock
from gen_agent.telemetry import (
    EVENT_RECEIVED,
    HALTED,
    INPUT_REJECTED,
    MAILBOX_QUEUED,
    PROMPT_ERROR,
    PROMPT_START,
    PROMPT_STOP,
    STATE_CHANGED,
    TERMINATED,
    TURN_CANCELLED,
    TURN_ERROR,
    TURN_REJECTED,
    TURN_START,
    TURN_STOP,
    TelemetryRecord,
    TelemetryRecorder,
)

TURN_META = {"agent", "ref", "attempt", "origin"}
START_META = TURN_META | {"backend", "request_model", "session_id", "trace_context",
                          "trace_carrier"}
STOP_META = TURN_META | {"model", "provider", "finish_reason", "usage", "cost_usd",
                         "session_id", "tool_calls"}
ERROR_META = TURN_META | {"reason_kind", "error_type", "model", "provider", "usage",
                          "session_id", "tool_calls"}
TURN_FAMILY = (TURN_START, TURN_STOP, TURN_ERROR, TURN_REJECTED, TURN_CANCELLED)


@pytest.fixture
def rec() -> Iterator[TelemetryRecorder]:
    with TelemetryRecorder() as recorder:
        yield recorder


def _of(rec: TelemetryRecorder, agent: Any = "a") -> list[TelemetryRecord]:
    return [r for r in rec.records if r.metadata.get("agent") == agent]


def _names(records: list[TelemetryRecord]) -> list[str]:
    return [".".join(r.event_name[1:]) for r in records]


def _is_now_ns(value: Any) -> bool:
    return type(value) is int and abs(value - time.time_ns()) < 60 * 1_000_000_000


def _finished(rec: TelemetryRecorder, ref: Any) -> TelemetryRecord:
    return rec.wait_for(lambda r: r.event_name in (TURN_STOP, TURN_ERROR)
                        and r.metadata["ref"] == ref)


# --- a successful turn -----------------------------------------------------------------------


def test_a_successful_turn_emits_its_events_with_their_shapes_and_order(
        rec: TelemetryRecorder) -> None:
    def pre_turn(prompt: str, state: Any) -> Any:
        return Proceed(prompt + "!", "after pre_turn")

    usage = {"input_tokens": 7, "output_tokens": 3}
    ref = start(state="initial",
                scripts=[mock.text_turn("hi", usage=usage, model="m-1", session_id="s-9")],
                hooks={"pre_turn": pre_turn, "handle_stream_event": lambda e, s: "streamed"})
    response = ref.ask("q", timeout=WAIT_S)
    ref.status(timeout=WAIT_S)  # the turn's step is complete
    records = _of(rec)

    assert _names(records) == [
        "state.changed", "prompt.start", "turn.start", "state.changed", "prompt.stop",
        "turn.stop", "state.changed"]
    changed = [(r.metadata["from"], r.metadata["to"]) for r in records
               if r.event_name == STATE_CHANGED]
    assert changed == [(None, "idle"), ("idle", "processing"), ("processing", "idle")]
    for r in records:
        if r.event_name == STATE_CHANGED:
            assert set(r.metadata) == {"agent", "from", "to"}
            assert set(r.measurements) == {"system_time"}
            assert _is_now_ns(r.measurements["system_time"])

    p_start, t_start, p_stop, t_stop = (records[i] for i in (1, 2, 4, 5))
    ref_ = t_start.metadata["ref"]
    assert set(p_start.measurements) == {"system_time"}
    assert _is_now_ns(p_start.measurements["system_time"])
    assert {k: p_start.metadata[k] for k in ("agent", "ref", "attempt", "prompt",
                                             "original_prompt", "rewritten", "agent_state")} == {
        "agent": "a", "ref": ref_, "attempt": 1, "prompt": "q!", "original_prompt": "q",
        "rewritten": True, "agent_state": "after pre_turn"}
    assert t_start.metadata == {
        "agent": "a", "ref": ref_, "attempt": 1, "origin": "ask", "backend": mock.MockBackend,
        "request_model": None, "session_id": None, "trace_context": None, "trace_carrier": {}}
    assert set(t_start.measurements) == {"system_time", "queue_wait_ms", "queue_depth"}
    assert (t_start.measurements["queue_wait_ms"], t_start.measurements["queue_depth"]) == (0, 0)
    assert p_stop.measurements == {"duration": response.duration_ms}
    assert {k: p_stop.metadata[k] for k in ("agent", "ref", "attempt", "agent_state")} == {
        "agent": "a", "ref": ref_, "attempt": 1, "agent_state": "streamed"}
    assert p_stop.metadata["response"] is response  # the rich family carries the response
    assert t_stop.metadata == {
        "agent": "a", "ref": ref_, "attempt": 1, "origin": "ask", "model": "m-1",
        "provider": None, "finish_reason": None, "usage": usage, "cost_usd": None,
        "session_id": "s-9", "tool_calls": ()}
    assert set(t_stop.measurements) == {"duration_ms", "backend_duration_ms", "input_tokens",
                                        "output_tokens"}
    assert (t_stop.measurements["input_tokens"], t_stop.measurements["output_tokens"]) == (7, 3)
    assert t_stop.measurements["backend_duration_ms"] == response.duration_ms
    assert type(t_stop.measurements["duration_ms"]) is int
    assert t_stop.measurements["duration_ms"] >= 0


def test_prompt_start_reports_an_unchanged_prompt_as_not_rewritten(
        rec: TelemetryRecorder) -> None:
    ref = start(scripts=[mock.text_turn("hi")])
    ref.ask("same", timeout=WAIT_S)

    p_start = rec.wait_for(PROMPT_START)
    assert (p_start.metadata["prompt"], p_start.metadata["original_prompt"],
            p_start.metadata["rewritten"]) == ("same", "same", False)


# --- failures --------------------------------------------------------------------------------

ERRORS = {  # script, reason, reason_kind, error_type
    "backend": (lambda: mock.error(("secret", 1)), ("secret", 1), "backend_or_callback_error",
                "_OTHER"),
    "error_event": (lambda: mock.error_turn("bad"), "bad", "backend_or_callback_error",
                    "_OTHER"),
    "no_terminal": (lambda: text_events("x"), "no_terminal_event", "backend_or_callback_error",
                    "no_terminal_event"),
    "crash": (lambda: mock.raising("boom"), None, "task_crashed", "MockRaised"),
    "timeout": (lambda: mock.gate(mock.text_turn("never")), "timeout", "timeout", "timeout"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_a_failed_turn_emits_prompt_error_then_turn_error(rec: TelemetryRecorder,
                                                          case: str) -> None:
    make, reason, reason_kind, error_type = ERRORS[case]
    ref = start(scripts=[make()], state="kept", watchdog_ms=50)

    with pytest.raises(TurnError) as info:
        ref.ask("q", timeout=WAIT_S)
    ref.status(timeout=WAIT_S)
    records = [r for r in _of(rec) if r.event_name != STATE_CHANGED]

    assert _names(records) == ["prompt.start", "turn.start", "prompt.error", "turn.error"]
    p_error, t_error = records[2], records[3]
    assert set(p_error.measurements) == {"system_time", "duration"}
    assert p_error.measurements["duration"] >= (50 if case == "timeout" else 0)
    assert p_error.metadata["reason"] == info.value.reason
    if reason is not None:
        assert info.value.reason == reason
    assert (p_error.metadata["attempt"], p_error.metadata["agent_state"]) == (1, "kept")
    assert t_error.metadata == {
        "agent": "a", "ref": records[1].metadata["ref"], "attempt": 1, "origin": "ask",
        "reason_kind": reason_kind, "error_type": error_type, "model": None, "provider": None,
        "usage": None, "session_id": None, "tool_calls": ()}
    assert set(t_error.measurements) == {"duration_ms"}


def test_an_interrupt_emits_turn_error_interrupted(rec: TelemetryRecorder) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g])
    request = ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)

    ref.interrupt()

    error = _finished(rec, request)
    assert error.event_name == TURN_ERROR
    assert error.metadata["reason_kind"] == "interrupted" and error.metadata["origin"] == "tell"
    p_error = rec.wait_for(PROMPT_ERROR)
    assert p_error.metadata["reason"] == "interrupted" and "duration" in p_error.measurements


# --- rejections and cancellations ------------------------------------------------------------


def test_an_overloaded_admission_emits_input_rejected_and_turn_rejected_with_a_fresh_ref(
        rec: TelemetryRecorder) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g], max_pending_prompts=0)
    first = ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)

    with pytest.raises(TurnError) as info:
        ref.ask("overflow", timeout=WAIT_S)
    with pytest.raises(TurnError):
        gen_agent.tell("a", "overflow too")
    g.release()
    _finished(rec, first)

    kind, overload = info.value.reason
    assert kind == "overloaded" and isinstance(overload, OverloadInfo)
    assert (overload.queue, overload.limit, overload.max_count) == ("prompts", "count", 0)
    inputs = rec.named(INPUT_REJECTED)
    assert inputs[0].metadata == {"agent": "a", "reason": info.value.reason}
    assert set(inputs[0].measurements) == {"system_time"}
    rejected = rec.named(TURN_REJECTED)
    assert [(r.metadata["origin"], r.metadata["reason_kind"], r.metadata["attempt"])
            for r in rejected] == [("ask", "overloaded", 1), ("tell", "overloaded", 1)]
    assert set(rejected[0].metadata) == TURN_META | {"reason_kind"}
    assert set(rejected[0].measurements) == {"system_time"}
    refs = {r.metadata["ref"] for r in rejected}
    assert len(refs) == 2 and first not in refs
    assert rec.named(TURN_START)[-1].metadata["ref"] == first  # no start for a rejection


def test_pre_turn_rejections_emit_turn_rejected_without_a_start(rec: TelemetryRecorder) -> None:
    def pre_turn(prompt: str, state: Any) -> Any:
        if prompt == "crash":
            raise RuntimeError
        return {"skip": gen_agent.Skip(state), "halt": Halt(state),
                "invalid": "nope"}.get(prompt, Proceed(prompt, state))

    ref = start(hooks={"pre_turn": pre_turn})
    for prompt in ("skip", "invalid", "crash", "halt"):
        with pytest.raises(TurnError):
            ref.ask(prompt, timeout=WAIT_S)

    assert [r.metadata["reason_kind"] for r in rec.named(TURN_REJECTED)] == [
        "pre_turn_skipped", "pre_turn_invalid", "pre_turn_skipped", "pre_turn_halted"]
    assert rec.named(TURN_START) == [] and rec.named(PROMPT_ERROR) == []


def test_a_rejected_generated_prompt_emits_prompt_error_without_duration(
        rec: TelemetryRecorder) -> None:
    def handle_event(event: Any, state: Any) -> Any:
        return Prompt("generated", state)

    def pre_turn(prompt: str, state: Any) -> Any:
        if prompt == "generated":
            raise KeyError
        return Proceed(prompt, state)

    ref = start(state="st", hooks={"handle_event": handle_event, "pre_turn": pre_turn})
    ref.notify_ack("e", timeout=WAIT_S)
    ref.status(timeout=WAIT_S)

    (rejected,) = rec.named(TURN_REJECTED)
    assert rejected.metadata["origin"] == "event"
    assert rejected.metadata["reason_kind"] == ("pre_turn_crashed", "KeyError")
    (p_error,) = rec.named(PROMPT_ERROR)
    assert set(p_error.measurements) == {"system_time"}
    assert {k: p_error.metadata[k] for k in ("ref", "attempt", "reason", "agent_state")} == {
        "ref": rejected.metadata["ref"], "attempt": 1,
        "reason": ("pre_turn_crashed", "KeyError"), "agent_state": "st"}


def test_cancel_request_emits_turn_cancelled_caller_cancelled(rec: TelemetryRecorder) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g])
    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    queued = ref.tell("queued", timeout=WAIT_S)

    assert ref.cancel_request(queued, timeout=WAIT_S) == "cancelled"
    g.release()

    (cancelled,) = rec.named(TURN_CANCELLED)
    assert cancelled.metadata == {"agent": "a", "ref": queued, "attempt": 1, "origin": "tell",
                                  "reason_kind": "caller_cancelled"}
    assert set(cancelled.measurements) == {"system_time", "queue_depth"}
    assert cancelled.measurements["queue_depth"] == 0  # the cancelled tell left the mailbox


def test_a_queued_ask_whose_caller_is_gone_emits_turn_cancelled_caller_down(
        rec: TelemetryRecorder) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g, mock.text_turn("never used")])
    first = ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)

    def give_up() -> None:
        with pytest.raises(gen_agent.CallTimeout):
            ref.ask("abandoned", timeout=0.05)

    caller = threading.Thread(target=give_up)
    caller.start()
    rec.wait_for(MAILBOX_QUEUED)
    caller.join(WAIT_S)
    assert not caller.is_alive()
    g.release()
    _finished(rec, first)
    cancelled = rec.wait_for(TURN_CANCELLED)

    assert (cancelled.metadata["origin"], cancelled.metadata["reason_kind"]) == (
        "ask", "caller_down")
    assert gen_agent.backend_session("a").history == ["q"]


def test_drain_emits_turn_rejected_and_input_rejected_draining(rec: TelemetryRecorder) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g])
    first = ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    queued = ref.tell("queued", timeout=WAIT_S)

    drained = in_thread(gen_agent.drain, "a", WAIT_S)
    rejected = rec.wait_for(TURN_REJECTED)
    gen_agent.notify("a", "late")
    rec.wait_for(INPUT_REJECTED)
    g.release()
    drained.result(WAIT_S)

    assert rejected.metadata == {"agent": "a", "ref": queued, "attempt": 1, "origin": "tell",
                                 "reason_kind": "draining"}
    assert rec.named(INPUT_REJECTED)[0].metadata == {"agent": "a", "reason": "draining"}
    assert _finished(rec, first).event_name == TURN_STOP
    assert rec.wait_for(TERMINATED).metadata["reason"] == "normal"


def test_on_halt_fail_emits_turn_rejected_halted(rec: TelemetryRecorder) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g])
    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    queued = ref.tell_with_completion("f", lambda m: None, on_halt="fail", timeout=WAIT_S)
    ref.halt()
    g.release()

    rejected = rec.wait_for(TURN_REJECTED)
    assert (rejected.metadata["ref"], rejected.metadata["reason_kind"]) == (queued, "halted")


# --- the other events ------------------------------------------------------------------------


def test_event_received_carries_the_raw_notification_idle_or_busy(
        rec: TelemetryRecorder) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g])

    gen_agent.notify("a", {"idle": 1})
    ref.notify_ack(("acked", 2), timeout=WAIT_S)
    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    gen_agent.notify("a", "busy")
    gen_agent.send("a", "info is not a notification")
    ref.status(timeout=WAIT_S)
    g.release()

    received = rec.named(EVENT_RECEIVED)
    assert [r.metadata for r in received] == [
        {"agent": "a", "event": {"idle": 1}}, {"agent": "a", "event": ("acked", 2)},
        {"agent": "a", "event": "busy"}]
    assert all(set(r.measurements) == {"system_time"} for r in received)


def test_mailbox_queued_reports_the_depth_after_each_enqueue(rec: TelemetryRecorder) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g])
    ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)

    for prompt in ("1", "2", "3"):
        ref.tell(prompt, timeout=WAIT_S)
    g.release()

    assert [(r.measurements, r.metadata) for r in rec.named(MAILBOX_QUEUED)] == [
        ({"depth": d}, {"agent": "a"}) for d in (1, 2, 3)]


def test_halted_carries_the_final_state_after_post_run(rec: TelemetryRecorder) -> None:
    log = CallLog()

    def handle_event(event: Any, state: list[Any]) -> Any:
        return Halt([*state, event])

    ref = start(log=log, state=[], hooks={"handle_event": handle_event})
    ref.notify_ack("stop", timeout=WAIT_S)

    halted = rec.wait_for(HALTED)
    assert halted.metadata == {"agent": "a", "agent_state": ["stop"]}
    assert set(halted.measurements) == {"system_time"}
    assert log.of("post_run") == [("post_run", ["stop"])]


def test_terminated_comes_after_cleanup_with_the_raw_reason(rec: TelemetryRecorder) -> None:
    log = CallLog()
    seen_at_terminate: list[int] = []

    def terminate_agent(reason: Any, state: Any) -> None:
        seen_at_terminate.append(len(rec.named(TERMINATED)))

    ref = start(log=log, hooks={"terminate_agent": terminate_agent})
    broken = start(name="b", scripts=[mock.text_turn("x")],
                   hooks={"handle_response": lambda *a: None})
    ref.stop()
    with pytest.raises(gen_agent.AgentDown):
        broken.ask("q", timeout=WAIT_S)
    broken.wait_stopped(WAIT_S)

    reasons = {r.metadata["agent"]: r.metadata["reason"] for r in rec.named(TERMINATED)}
    assert reasons == {"a": "shutdown", "b": ("callback_failed", "error", "other")}
    assert seen_at_terminate == [0]  # terminate_agent ran before the event
    assert all(set(r.measurements) == {"system_time"} for r in rec.named(TERMINATED))


# --- invariants over a mixed run -------------------------------------------------------------


def test_origins_exactly_one_terminal_per_attempt_and_no_content_in_the_turn_family(
        rec: TelemetryRecorder) -> None:
    secret_state = {"api_key": "SECRET-STATE"}

    def handle_response(ref: Any, response: Any, state: Any) -> Any:
        return Prompt("SECRET-chain", state) if response.prompt == "SECRET-ask" else NoReply(
            state)

    def handle_error(ref: Any, reason: Any, state: Any) -> Any:
        return Prompt("SECRET-retry", state) if reason == "SECRET-reason" else NoReply(state)

    def handle_event(event: Any, state: Any) -> Any:
        return Prompt("SECRET-event", state)

    ref = start(state=secret_state,
                hooks={"handle_response": handle_response, "handle_error": handle_error,
                       "handle_event": handle_event},
                scripts=[mock.text_turn("SECRET-text"), mock.text_turn("SECRET-text"),
                         mock.error("SECRET-reason"), mock.text_turn("SECRET-text"),
                         mock.text_turn("SECRET-text"), mock.error_turn("SECRET-reason-2")])
    completions: queue.Queue[Any] = queue.Queue()
    ref.ask("SECRET-ask", timeout=WAIT_S)  # + a self_chain turn
    completion_ref = ref.tell_with_completion("SECRET-tell", completions,
                                              timeout=WAIT_S)  # fails once, retried
    assert completions.get(timeout=WAIT_S)[3] == completion_ref
    ref.notify_ack("SECRET-notification", timeout=WAIT_S)  # an event turn, dispatched now
    with pytest.raises(TurnError):
        ref.ask("SECRET-ask-2", timeout=WAIT_S)
    ref.status(timeout=WAIT_S)

    records = _of(rec)
    starts = [r.metadata for r in records if r.event_name == TURN_START]
    assert [m["origin"] for m in starts] == ["ask", "self_chain", "tell", "tell", "event",
                                             "ask"]
    assert [m["attempt"] for m in starts] == [1, 1, 1, 2, 1, 1]
    started = [(m["ref"], m["attempt"]) for m in starts]
    ends = [(r.metadata["ref"], r.metadata["attempt"]) for r in records
            if r.event_name in (TURN_STOP, TURN_ERROR)]
    assert sorted(map(repr, ends)) == sorted(map(repr, started))  # exactly one each

    for r in records:
        if r.event_name in TURN_FAMILY:
            assert set(r.metadata) <= START_META | STOP_META | ERROR_META
            assert set(r.measurements) <= {"system_time", "duration_ms", "backend_duration_ms",
                                           "queue_wait_ms", "queue_depth", "input_tokens",
                                           "output_tokens", "cost_usd"}
            assert "SECRET" not in repr(r.metadata) + repr(r.measurements)
    for name in (PROMPT_START, PROMPT_STOP, PROMPT_ERROR):  # the rich family does carry it
        assert any("SECRET" in repr(r.metadata) for r in rec.named(name))


def test_prompt_and_turn_events_pair_in_order_for_every_attempt(rec: TelemetryRecorder) -> None:
    ref = start(scripts=[mock.text_turn("1"), mock.error("e"), mock.text_turn("3")])
    ref.ask("one", timeout=WAIT_S)
    with pytest.raises(TurnError):
        ref.ask("two", timeout=WAIT_S)
    ref.ask("three", timeout=WAIT_S)
    ref.status(timeout=WAIT_S)

    names = [n for n in _names(_of(rec)) if n.split(".")[0] in ("prompt", "turn")]
    assert names == ["prompt.start", "turn.start", "prompt.stop", "turn.stop",
                     "prompt.start", "turn.start", "prompt.error", "turn.error",
                     "prompt.start", "turn.start", "prompt.stop", "turn.stop"]


def test_an_ask_caller_thread_is_not_the_emitting_thread(rec: TelemetryRecorder) -> None:
    threads: list[int] = []
    handler_id = "test-thread-probe"
    gen_agent.telemetry.attach(handler_id, TURN_START,
                               lambda *a: threads.append(threading.get_ident()))
    try:
        ref = start(scripts=[mock.text_turn("x")])
        ref.ask("q", timeout=WAIT_S)
    finally:
        gen_agent.telemetry.detach(handler_id)

    assert threads and threads[0] != threading.get_ident()  # handlers run in the agent thread


def test_turn_stop_carries_the_reported_tokens_and_cost(rec: TelemetryRecorder) -> None:
    reported = [gen_agent.Event.new("text", {"text": "hi"}),
                gen_agent.Event.new("usage", {"input_tokens": 12, "output_tokens": 5,
                                              "cache_read_input_tokens": 3}),
                gen_agent.Event.new("result", {"text": "hi", "cost_usd": 0.0042})]
    odd = [gen_agent.Event.new("usage", {"input_tokens": "12"}),
           gen_agent.Event.new("result", {"text": "", "cost_usd": True})]
    ref = start(scripts=[reported, odd])
    ref.ask("q", timeout=WAIT_S)
    ref.ask("q", timeout=WAIT_S)
    first, second = (r.measurements for r in rec.named(TURN_STOP))
    assert first == {"duration_ms": first["duration_ms"],
                     "backend_duration_ms": first["backend_duration_ms"], "input_tokens": 12,
                     "output_tokens": 5, "cost_usd": 0.0042}
    # only ints and real numbers are reported
    assert set(second) == {"duration_ms", "backend_duration_ms"}

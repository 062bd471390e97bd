"""Turns: ask / tell / poll, FIFO queueing while busy, the per-turn ordering of callbacks and
telemetry, stream-state threading, self-chaining, and every error reason a turn can end with
(contract §2.4, §2.5, §2.7, §2.10, §3.6-§3.8, §4.4-§4.7, §4.9, §4.13, §4.20, §4.21)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _agents import WAIT_S, CallLog, Hold, failure, in_thread, log_telemetry, start, text_events

import gen_agent
from gen_agent import DispatchError, Event, NoReply, Proceed, Prompt, RequestRef, TurnError
from gen_agent._runtime.turn import WORKERS
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend, MockRaised
from gen_agent.telemetry import (
    EVENT_RECEIVED,
    MAILBOX_QUEUED,
    TURN_ERROR,
    TURN_START,
    TelemetryRecorder,
)

# --- ask / tell / poll (§2.4, §2.5, §2.7) ----------------------------------------------------


def test_ask_returns_the_response_of_its_turn() -> None:
    script = mock.text_turn(["hel", "lo"], session_id="s-9", usage={"input_tokens": 3})
    ref = start(scripts=[script])

    response = ref.ask("greet", timeout=WAIT_S)

    assert (response.prompt, response.text, response.session_id) == ("greet", "hello", "s-9")
    assert [e.kind for e in response.events] == ["text", "text", "usage", "result"]
    assert response.terminal is not None and response.terminal.kind == "result"
    assert response.usage == {"input_tokens": 3}
    assert MockBackend.history("a") == ["greet"]


@pytest.mark.parametrize("prompt", [None, 42, b"bytes", ["list"]])
def test_ask_and_tell_reject_a_non_string_prompt_in_the_caller(prompt: Any) -> None:
    ref = start(scripts=[mock.text_turn("x")])

    with pytest.raises(TypeError):
        ref.ask(prompt, timeout=WAIT_S)
    with pytest.raises(TypeError):
        gen_agent.tell("a", prompt)

    assert MockBackend.history("a") == []


def test_tell_returns_a_ref_and_poll_follows_the_request() -> None:
    log = CallLog()
    g = mock.gate(mock.text_turn("done"))
    ref = start(log=log, scripts=[g])

    request = gen_agent.tell("a", "work")
    g.wait_blocked(WAIT_S)
    pending = gen_agent.poll("a", request)
    g.release()
    log.wait_for(("post_turn", "ok"))
    completed = gen_agent.poll("a", request)

    assert isinstance(request, RequestRef)
    assert pending == gen_agent.PollResult(status="pending")
    assert completed.status == "completed" and completed.reason is None
    assert completed.response is not None and completed.response.text == "done"
    assert ref.poll(request, timeout=WAIT_S) == completed  # polling does not consume it


def test_tell_to_an_idle_agent_returns_only_after_pre_turn_ran() -> None:
    returned = threading.Event()
    seen: list[bool] = []

    def pre_turn(prompt: str, state: Any) -> Any:
        # A tell that had already returned sets `returned` well within this bound; one that
        # waits for pre_turn cannot, so this wait then simply runs out (0.2 s).
        seen.append(returned.wait(0.2))
        return Proceed(prompt, state)

    ref = start(hooks={"pre_turn": pre_turn}, scripts=[mock.text_turn("x")])
    ref.tell("q", timeout=WAIT_S)
    returned.set()
    ref.status(timeout=WAIT_S)

    assert seen == [False]


def test_poll_of_an_unknown_ref_or_agent_is_not_found() -> None:
    start()

    assert gen_agent.poll("a", RequestRef.new()).reason == "not_found"
    assert gen_agent.poll("ghost", RequestRef.new()) == gen_agent.PollResult(
        status="failed", reason="not_found")


def test_refs_are_unique_per_request() -> None:
    ref = start(scripts=[mock.text_turn("1"), mock.text_turn("2")])

    refs = {ref.tell("one", timeout=WAIT_S), ref.tell("two", timeout=WAIT_S)}

    assert len(refs) == 2


# --- queueing while busy (§4.4, §4.5) --------------------------------------------------------


def test_requests_queue_fifo_while_busy_whatever_their_kind() -> None:
    log = CallLog()
    g = mock.gate(mock.text_turn("r0"))
    ref = start(log=log, scripts=[g, *(mock.text_turn(f"r{i}") for i in range(1, 6))])
    completions: queue.Queue[Any] = queue.Queue()
    asks = {}
    tells: list[RequestRef] = []
    with TelemetryRecorder([MAILBOX_QUEUED]) as rec:
        first = ref.tell("p0", timeout=WAIT_S)
        g.wait_blocked(WAIT_S)
        # one request at a time, each confirmed queued, so their order is known
        for depth, prompt in enumerate(["p1", "p2", "p3", "p4", "p5"], start=1):
            if prompt in ("p2", "p4"):
                asks[prompt] = in_thread(ref.ask, prompt, WAIT_S)
            elif prompt == "p3":
                tells.append(ref.tell_with_completion(prompt, completions, timeout=WAIT_S))
            else:
                tells.append(ref.tell(prompt, timeout=WAIT_S))
            rec.wait_for(lambda r, d=depth: r.measurements["depth"] == d)
        status, snapshot = ref.status(timeout=WAIT_S), ref.runtime_snapshot(timeout=WAIT_S)
        queued_poll = [ref.poll(r, timeout=WAIT_S).status for r in tells]
        g.release()

        assert asks["p4"].result(WAIT_S).text == "r4"
        log.wait_for(("handle_response", "p5"))

    assert (status.state, status.queued, status.current_request) == ("processing", 5, first)
    assert queued_poll == ["pending"] * 3  # queued tells poll as pending
    assert snapshot.pending_prompts == 5 and snapshot.current_request is not None
    assert snapshot.current_request.origin == "tell"
    assert MockBackend.history("a") == ["p0", "p1", "p2", "p3", "p4", "p5"]
    assert [e[1] for e in log.of("handle_response")] == ["p0", "p1", "p2", "p3", "p4", "p5"]
    assert asks["p2"].result(WAIT_S).text == "r2"
    assert completions.get(timeout=WAIT_S)[4][1].text == "r3"


def test_status_and_poll_are_served_while_a_turn_streams() -> None:
    with Hold(text_events("partial"), mock.text_turn("rest")) as hold:
        ref = start(scripts=[hold])
        request = ref.tell("q", timeout=WAIT_S)
        hold.wait_streaming()

        assert ref.status(timeout=WAIT_S).state == "processing"
        assert ref.poll(request, timeout=WAIT_S).status == "pending"
        snapshot = ref.runtime_snapshot(timeout=WAIT_S)
        assert snapshot.current_request is not None and snapshot.current_request.ref == request
        assert snapshot.current_request.attempt == 1


# --- ordering (§4.21) ------------------------------------------------------------------------


def _compact(entries: list[tuple[Any, ...]]) -> list[str]:
    out = []
    for entry in entries:
        if entry[0] == "telemetry":
            name, meta = entry[1], entry[2]
            out.append(f"t:{name}:{meta['to']}" if name == "state.changed" else f"t:{name}")
        else:
            out.append(":".join(str(part) for part in entry))
    return out


def test_ordering_of_callbacks_telemetry_notifications_and_completion() -> None:
    log = CallLog()
    g = mock.gate(mock.text_turn("one"))

    def completion(message: Any) -> None:
        log.add("completion", message[4][0])

    ref = start(log=log, scripts=[g, mock.text_turn("two")])
    with log_telemetry(log, "a"):
        mark = len(log.entries)
        first = in_thread(ref.ask, "one", WAIT_S)
        g.wait_blocked(WAIT_S)
        ref.notify_ack("n1", timeout=WAIT_S)
        ref.notify_ack("n2", timeout=WAIT_S)
        ref.tell_with_completion("two", completion, timeout=WAIT_S)
        g.release()
        assert first.result(WAIT_S).text == "one"
        log.wait_for(("completion", "ok"))
        ref.status(timeout=WAIT_S)  # the agent finished the step that sent the completion

    turn = ["t:prompt.start", "t:turn.start", "t:state.changed:processing"]
    assert _compact(log.entries[mark:]) == [
        "pre_turn:one", *turn,
        "t:event.received", "t:event.received", "t:mailbox.queued",
        "stream:text", "stream:result", "t:prompt.stop", "t:turn.stop",
        "handle_response:one", "post_turn:ok",
        "handle_event:n1", "handle_event:n2", "t:state.changed:idle",
        "pre_turn:two", *turn,
        "stream:text", "stream:result", "t:prompt.stop", "t:turn.stop",
        "handle_response:two", "post_turn:ok", "completion:ok", "t:state.changed:idle",
    ]


def test_ordering_when_the_decision_halts_and_when_a_turn_fails() -> None:
    log = CallLog()
    g = mock.gate(mock.error_turn("bad"))

    def handle_error(ref: Any, reason: Any, state: Any) -> Any:
        return gen_agent.Halt(state)

    ref = start(log=log, scripts=[g, mock.text_turn("two")], state="s",
                hooks={"handle_error": handle_error})
    with log_telemetry(log, "a"):
        mark = len(log.entries)
        first = in_thread(ref.ask, "one", WAIT_S)
        g.wait_blocked(WAIT_S)
        ref.notify_ack("n1", timeout=WAIT_S)
        second = in_thread(ref.ask, "two", WAIT_S)
        log.wait_for(lambda e: e[:2] == ("telemetry", "mailbox.queued"))
        g.release()
        assert failure(first).reason == "bad"  # type: ignore[attr-defined]
        log.wait_for(lambda e: e[:2] == ("telemetry", "halted"))
        ref.resume()
        assert second.result(WAIT_S).text == "two"

    assert _compact(log.entries[mark:]) == [
        "pre_turn:one", "t:prompt.start", "t:turn.start", "t:state.changed:processing",
        "t:event.received", "t:mailbox.queued",
        "stream:error", "t:prompt.error", "t:turn.error",
        "handle_error:bad", "post_turn:error",
        "handle_event:n1", "post_run:s", "t:halted", "t:state.changed:idle",
        "pre_turn:two", "t:prompt.start", "t:turn.start", "t:state.changed:processing",
        "stream:text", "stream:result", "t:prompt.stop", "t:turn.stop",
        "handle_response:two", "post_turn:ok", "t:state.changed:idle",
    ]


# --- handle_stream_event threads the state (§3.6) --------------------------------------------


def _append_kind(event: Event, state: list[str]) -> list[str]:
    return [*state, event.kind]


def test_stream_state_threads_through_events_into_the_decision_callback() -> None:
    log = CallLog()
    seen: list[Any] = []

    def handle_response(ref: Any, response: Any, state: Any) -> Any:
        seen.append(state)
        return NoReply([*state, "decided"])

    def pre_turn(prompt: str, state: Any) -> Any:
        return Proceed(prompt, [*state, "pre_turn"])

    with Hold(text_events("a"), [*text_events("b"), *mock.text_turn("")[-1:]]) as hold:
        ref = start(log=log, scripts=[hold], state=[],
                    hooks={"handle_stream_event": _append_kind, "pre_turn": pre_turn,
                           "handle_response": handle_response})
        asked = in_thread(ref.ask, "q", WAIT_S)
        hold.wait_streaming()
        during = ref.status(timeout=WAIT_S).agent_state
        hold.release()
        asked.result(WAIT_S)

    assert during == ["pre_turn"]  # the retained state, not the task-local stream state
    assert seen == [["pre_turn", "text", "text", "result"]]
    assert ref.status(timeout=WAIT_S).agent_state == ["pre_turn", "text", "text", "result",
                                                      "decided"]


@pytest.mark.parametrize(("script", "threaded"), [
    ([*text_events("x"), Event.new("error", {"reason": "r"})], ["text", "error"]),
    (text_events("x", "y"), ["text", "text"]),
])
def test_the_stream_state_reaches_handle_error_after_a_normal_stream_end(
        script: Any, threaded: list[str]) -> None:
    seen: list[Any] = []

    def handle_error(ref: Any, reason: Any, state: Any) -> Any:
        seen.append(state)
        return NoReply(state)

    ref = start(scripts=[script], state=[],
                hooks={"handle_stream_event": _append_kind, "handle_error": handle_error})
    with pytest.raises(TurnError):
        ref.ask("q", timeout=WAIT_S)

    assert seen == [threaded]
    assert ref.status(timeout=WAIT_S).agent_state == threaded


@pytest.mark.parametrize("script", [
    [mock.text_turn("unused")[0], Event.new("result", {})],
    mock.raising(RuntimeError("crash")),
])
def test_a_crash_discards_the_stream_state(script: Any) -> None:
    seen: list[Any] = []

    def stream(event: Event, state: Any) -> Any:
        if event.kind == "result":
            raise ValueError("stream callback crashed")
        return [*state, event.kind]

    def handle_error(ref: Any, reason: Any, state: Any) -> Any:
        seen.append((reason[0], state))
        return NoReply(state)

    ref = start(scripts=[script], state=["dispatch"],
                hooks={"handle_stream_event": stream, "handle_error": handle_error})
    with pytest.raises(TurnError):
        ref.ask("q", timeout=WAIT_S)

    assert seen == [("task_crashed", ["dispatch"])]


# --- the stream: first terminal wins, compact capture (§4.6, §6.3) --------------------------


def test_the_stream_is_read_up_to_its_first_terminal_event_then_closed() -> None:
    log = CallLog()
    closed = threading.Event()

    def stream(prompt: str) -> Iterator[Event]:
        try:
            yield Event.new("text", {"text": "a"})
            yield Event.new("result", {"text": "a"})
            yield Event.new("text", {"text": "never read"})
            yield Event.new("error", {"reason": "never read"})
        finally:
            closed.set()

    ref = start(log=log, scripts=[stream])
    response = ref.ask("q", timeout=WAIT_S)

    assert [e.kind for e in response.events] == ["text", "result"] and response.text == "a"
    assert [e[1] for e in log.of("stream")] == ["text", "result"]
    assert closed.wait(WAIT_S)  # the generator's cleanup ran


def test_compact_capture_retains_a_prefix_and_assembles_from_the_full_stream() -> None:
    events = [*text_events(*["x"] * 1_500), Event.new("usage", {"output_tokens": 9}),
              Event.new("result", {"session_id": "s-1"})]
    ref = start(scripts=[events, list(events)], max_events_per_turn=3)

    response = ref.ask("q", timeout=WAIT_S)
    default = start(name="b", scripts=[events])
    worked_example = default.ask("q", timeout=WAIT_S)

    assert [e.kind for e in response.events] == ["text"] * 3
    assert response.text == "x" * 1_500 and response.usage == {"output_tokens": 9}
    assert response.terminal is not None and response.session_id == "s-1"
    coverage = response.event_coverage
    assert coverage is not None
    assert (coverage.mode, coverage.observed_events, coverage.retained_events,
            coverage.omitted_events) == ("compact", 1_502, 3, 1_499)
    assert coverage.first_omission is not None
    assert (coverage.first_omission.limit, coverage.first_omission.event_kind) == ("events",
                                                                                  "text")
    example = worked_example.event_coverage  # contract §6.3, default limits
    assert example is not None
    assert (example.observed_events, example.retained_events, example.omitted_events) == (
        1_502, 1_000, 502)


def test_lossless_overflow_fails_the_turn_with_its_diagnostic() -> None:
    log = CallLog()
    ref = start(log=log, scripts=[mock.text_turn(["a", "b", "c"])], event_retention="lossless",
                max_events_per_turn=2)

    with pytest.raises(TurnError) as info:
        ref.ask("q", timeout=WAIT_S)

    kind, diag = info.value.reason
    assert kind == "event_capture_overflow" and isinstance(diag, gen_agent.CaptureOverflow)
    assert (diag.limit, diag.max_events, diag.retained_events, diag.rejected_event_kind) == (
        "events", 2, 2, "text")
    assert log.of("handle_error") == [("handle_error", info.value.reason)]
    assert [e[1] for e in log.of("stream")] == ["text", "text"]  # the overflowing one is not


# --- self-chaining (§4.7, §4.9) --------------------------------------------------------------


def test_handle_response_prompt_chains_turns_before_queued_work() -> None:
    log = CallLog()
    g = mock.gate(mock.text_turn("t0"))

    def handle_response(ref: Any, response: Any, state: int) -> Any:
        if (response.prompt.startswith("step") or response.prompt == "start") and state < 3:
            return Prompt(f"step{state + 1}", state + 1)
        return NoReply(state)

    ref = start(log=log, state=0, hooks={"handle_response": handle_response},
                scripts=[g, *(mock.text_turn(f"t{i}") for i in range(1, 5))])
    with TelemetryRecorder([TURN_START, MAILBOX_QUEUED]) as rec:
        asked = in_thread(ref.ask, "start", WAIT_S)
        g.wait_blocked(WAIT_S)
        queued = ref.tell("queued", timeout=WAIT_S)
        rec.wait_for(MAILBOX_QUEUED)
        g.release()
        assert asked.result(WAIT_S).text == "t0"  # the ask gets its own turn's response
        rec.wait_for(lambda r: r.event_name == TURN_START and r.metadata["ref"] == queued)
        log.wait_for(("handle_response", "queued"))
        starts = [r.metadata for r in rec.named(TURN_START)]

    assert MockBackend.history("a") == ["start", "step1", "step2", "step3", "queued"]
    assert [m["origin"] for m in starts] == ["ask", "self_chain", "self_chain", "self_chain",
                                             "tell"]
    assert len({m["ref"] for m in starts}) == 5  # every chained turn has a fresh ref
    assert ref.status(timeout=WAIT_S).agent_state == 3


def test_a_chained_prompt_that_fails_reaches_handle_error_only() -> None:
    log = CallLog()

    def handle_response(ref: Any, response: Any, state: Any) -> Any:
        return Prompt("follow-up", state) if response.prompt == "q" else NoReply(state)

    ref = start(log=log, hooks={"handle_response": handle_response},
                scripts=[mock.text_turn("ok"), mock.error("chain_failed")])
    assert ref.ask("q", timeout=WAIT_S).text == "ok"

    log.wait_for(("post_turn", "error"))
    assert log.of("handle_error") == [("handle_error", "chain_failed")]


# --- error reasons (§4.13, §4.20) ------------------------------------------------------------


def _crash_in_backend(prompt: str) -> Any:
    raise RuntimeError("backend bug")


def _not_an_event(prompt: str) -> Iterator[Any]:
    yield {"kind": "text"}


def _dispatch_error_from_callable(prompt: str) -> Any:
    raise DispatchError(("http", 503))


CRASH = RuntimeError("stream broke")

ERROR_CASES: list[tuple[str, Callable[[], Any], Callable[[Any], bool]]] = [
    ("dispatch_error", lambda: mock.error("rate_limited"), lambda r: r == "rate_limited"),
    ("dispatch_error_term", lambda: mock.error(("http", 503)), lambda r: r == ("http", 503)),
    ("dispatch_error_callable", lambda: _dispatch_error_from_callable,
     lambda r: r == ("http", 503)),
    ("no_script", lambda: None, lambda r: r == "no_script"),
    ("error_event", lambda: mock.error_turn("overloaded"), lambda r: r == "overloaded"),
    ("error_event_term", lambda: mock.error_turn({"code": 7}), lambda r: r == {"code": 7}),
    ("error_event_no_reason", lambda: [Event.new("error", {})], lambda r: r == "unknown"),
    ("error_event_none_reason", lambda: [Event.new("error", {"reason": None})],
     lambda r: r == "unknown"),
    ("error_event_false_reason", lambda: [Event.new("error", {"reason": False})],
     lambda r: r == "unknown"),
    ("error_event_nested_reason", lambda: [Event.new("error", {"data": {"reason": "x"}})],
     lambda r: r == "unknown"),
    ("no_terminal_event", lambda: text_events("half", "way"), lambda r: r == "no_terminal_event"),
    ("empty_stream", lambda: [], lambda r: r == "no_terminal_event"),
    ("task_crashed_exception", lambda: mock.raising(CRASH),
     lambda r: r[0] == "task_crashed" and r[1] is CRASH),
    ("task_crashed_reason", lambda: mock.raising("gone"),
     lambda r: r[0] == "task_crashed" and isinstance(r[1], MockRaised) and r[1].reason == "gone"),
    ("task_crashed_in_prompt", lambda: _crash_in_backend,
     lambda r: r[0] == "task_crashed" and type(r[1]) is RuntimeError),
    ("task_crashed_not_an_event", lambda: _not_an_event,
     lambda r: r[0] == "task_crashed" and type(r[1]) is TypeError),
]


def _scripts_for(make: Callable[[], Any]) -> list[Any]:
    script = make()
    return [] if script is None else [script]


@pytest.mark.parametrize(("case", "make", "expected"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
@pytest.mark.parametrize("via", ["ask", "tell", "completion"])
def test_every_turn_error_reaches_the_caller_then_handle_error_then_post_turn(
        case: str, make: Callable[[], Any], expected: Callable[[Any], bool], via: str) -> None:
    log = CallLog()
    ref = start(log=log, scripts=_scripts_for(make), state="before")
    completions: queue.Queue[Any] = queue.Queue()

    if via == "ask":
        with pytest.raises(TurnError) as info:
            ref.ask("q", timeout=WAIT_S)
        reason = info.value.reason
    elif via == "tell":
        request = ref.tell("q", timeout=WAIT_S)
        log.wait_for(("post_turn", "error"))
        polled = ref.poll(request, timeout=WAIT_S)
        assert polled.status == "failed" and polled.response is None
        reason = polled.reason
    else:
        request = ref.tell_with_completion("q", completions, timeout=WAIT_S)
        message = completions.get(timeout=WAIT_S)
        assert message[:4] == ("gen_agent", "completion", "a", request)
        assert message[4][0] == "error"
        reason = message[4][1]

    assert expected(reason), reason
    log.wait_for(("post_turn", "error"))
    callbacks = [e for e in log.entries if e[0] in ("handle_error", "post_turn",
                                                     "handle_response")]
    assert [e[0] for e in callbacks] == ["handle_error", "post_turn"]
    assert callbacks[0][1] is reason or callbacks[0][1] == reason
    assert ref.is_alive() and ref.status(timeout=WAIT_S).state == "idle"


def test_the_session_from_before_a_dispatch_error_is_kept() -> None:
    ref = start(scripts=[mock.error("nope"), mock.text_turn("ok", session_id="s-2")])
    session = gen_agent.backend_session("a")

    with pytest.raises(TurnError):
        ref.ask("one", timeout=WAIT_S)
    assert ref.ask("two", timeout=WAIT_S).session_id == "s-2"

    assert gen_agent.backend_session("a") is session and session.session_id == "s-2"


# --- watchdog (§4.2, §4.13) ------------------------------------------------------------------


def test_the_watchdog_fails_a_stuck_turn_with_timeout() -> None:
    log = CallLog()
    g = mock.gate(mock.text_turn("never"))
    ref = start(log=log, scripts=[g, mock.text_turn("after")], watchdog_ms=50)

    with pytest.raises(TurnError) as info:
        ref.ask("stuck", timeout=WAIT_S)

    assert info.value.reason == "timeout"
    assert log.of("handle_error") == [("handle_error", "timeout")]
    log.wait_for(("post_turn", "error"))
    assert g.cancelled  # the abandoned task was told to stop
    assert ref.ask("next", timeout=WAIT_S).text == "after"  # the agent goes on


def test_the_watchdog_applies_to_each_attempt_separately() -> None:
    log = CallLog()
    gates = [mock.gate(mock.text_turn("never")) for _ in range(2)]

    def handle_error(ref: Any, reason: Any, state: int) -> Any:
        return Prompt("retry", state + 1) if state == 0 else NoReply(state)

    ref = start(log=log, scripts=gates, watchdog_ms=60, state=0,
                hooks={"handle_error": handle_error})
    with TelemetryRecorder([TURN_ERROR]) as rec:
        with pytest.raises(TurnError) as info:
            ref.ask("stuck", timeout=WAIT_S)
        errors = rec.named(TURN_ERROR)

    assert info.value.reason == "timeout"
    assert [e[1] for e in log.of("handle_error")] == ["timeout", "timeout"]
    assert [(r.metadata["attempt"], r.metadata["reason_kind"]) for r in errors] == [
        (1, "timeout"), (2, "timeout")]
    assert all(r.measurements["duration_ms"] >= 60 for r in errors)  # a full window each
    assert MockBackend.history("a") == ["stuck", "retry"]


def test_a_watchdog_timer_left_by_an_earlier_turn_gives_a_later_turn_its_full_window() -> None:
    # The agent keeps one watchdog timer, not one per turn (issue 20): the timer of a turn
    # that ended in time fires during the next turn, which must still get all of watchdog_ms.
    g = mock.gate(mock.text_turn("never"))
    ref = start(scripts=[mock.text_turn("quick"), g], watchdog_ms=300)
    assert ref.ask("quick", timeout=WAIT_S).text == "quick"
    threading.Event().wait(0.1)  # the next turn starts inside the first turn's window
    with TelemetryRecorder([TURN_ERROR]) as rec:
        with pytest.raises(TurnError) as info:
            ref.ask("stuck", timeout=WAIT_S)
        errors = rec.named(TURN_ERROR)

    assert info.value.reason == "timeout"
    assert [r.measurements["duration_ms"] >= 300 for r in errors] == [True]
    assert g.cancelled


# --- interrupt (§2.10, §4.13) ----------------------------------------------------------------


def test_interrupt_while_streaming_fails_the_turn_with_interrupted() -> None:
    log = CallLog()
    with Hold(text_events("partial"), mock.text_turn("late")) as hold:
        ref = start(log=log, state="dispatch", scripts=[hold, mock.text_turn("next")],
                    hooks={"handle_stream_event": lambda event, state: "stream"})
        asked = in_thread(ref.ask, "q", WAIT_S)
        hold.wait_streaming()

        gen_agent.interrupt("a")

        exc = failure(asked)
        assert isinstance(exc, TurnError) and exc.reason == "interrupted"
        log.wait_for(("post_turn", "error"))
        assert ref.status(timeout=WAIT_S).agent_state == "dispatch"  # stream state discarded
        hold.release()  # the abandoned task now streams into the void

        response = ref.ask("again", timeout=WAIT_S)

    assert log.of("handle_error") == [("handle_error", "interrupted")]
    assert response.text == "next"
    assert [e.kind for e in response.events] == ["text", "result"]  # no late events mixed in


def test_interrupt_reaches_tell_and_completion_callers() -> None:
    g1, g2 = mock.gate(mock.text_turn("x")), mock.gate(mock.text_turn("y"))
    completions: queue.Queue[Any] = queue.Queue()
    ref = start(scripts=[g1, g2])

    request = ref.tell("one", timeout=WAIT_S)
    g1.wait_blocked(WAIT_S)
    ref.interrupt()
    second = ref.tell_with_completion("two", completions, timeout=WAIT_S)
    g2.wait_blocked(WAIT_S)
    ref.interrupt()

    assert completions.get(timeout=WAIT_S) == ("gen_agent", "completion", "a", second,
                                               ("error", "interrupted"))
    assert ref.poll(request, timeout=WAIT_S).reason == "interrupted"


def test_interrupt_when_idle_or_missing_is_a_no_op() -> None:
    log = CallLog()
    ref = start(log=log, scripts=[mock.text_turn("ok")])

    gen_agent.interrupt("a")
    gen_agent.interrupt("ghost")

    assert ref.ask("q", timeout=WAIT_S).text == "ok"
    assert log.of("handle_error") == []


def _wait_inbox(ref: gen_agent.AgentRef, size: int) -> None:
    # Reproducing a mailbox race needs to know what is queued in the actor's inbox; there is
    # no public signal for "a call message is enqueued", so this bounded spin reads it (and
    # the race test below waits for the turn task through the worker pool, as conftest does).
    inbox = ref._handle.actor_ref.actor_inbox  # type: ignore[union-attr]
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.001)):
        if inbox.qsize() >= size:
            return
        done.wait(0.001)
    raise TimeoutError(f"the agent's inbox never reached {size} messages")


def test_an_accepted_interrupt_request_interrupts_that_turn_and_no_other() -> None:
    # The race: the turn's outcome is already queued behind the interrupt_request when the
    # agent accepts it; exactly one outcome must win ("accepted" -> "interrupted").
    g = mock.gate(mock.text_turn("first"))
    ref = start(scripts=[g, mock.text_turn("second")])
    blocked, unblock = threading.Event(), threading.Event()

    def block_agent(name: Any, measurements: Any, metadata: dict[str, Any], _: Any) -> None:
        if metadata["event"] == "block":
            blocked.set()
            unblock.wait(WAIT_S)

    first = in_thread(ref.ask, "one", WAIT_S)
    g.wait_blocked(WAIT_S)
    first_turn = first_ref(ref)
    with TelemetryRecorder([MAILBOX_QUEUED]) as rec:
        second = in_thread(ref.ask, "two", WAIT_S)
        rec.wait_for(MAILBOX_QUEUED)
    gen_agent.telemetry.attach("test-block-agent", EVENT_RECEIVED, block_agent)
    try:
        gen_agent.notify("a", "block")
        assert blocked.wait(WAIT_S)  # the agent thread is held; its inbox fills up:
        accepted = in_thread(gen_agent.interrupt_request, "a", first_turn, WAIT_S)
        _wait_inbox(ref, 1)  # 1. interrupt_request(first turn)
        g.release()
        assert g.thread is not None  # 2. the first turn's events and outcome, handed over:
        assert WORKERS.wait_parked(g.thread, WAIT_S)  # its task has finished
    finally:
        unblock.set()
        gen_agent.telemetry.detach("test-block-agent")

    assert accepted.result(WAIT_S) == "accepted"
    assert isinstance(failure(first), TurnError)
    assert second.result(WAIT_S).text == "second"


def first_ref(ref: gen_agent.AgentRef) -> Any:
    """The ref of the active turn (asks do not expose theirs)."""
    current = ref.runtime_snapshot(timeout=WAIT_S).current_request
    assert current is not None
    return current.ref

"""Callback protection (contract §3): pre_turn skip/halt/crash/invalid for external and
generated prompts; crashes of the protected callbacks (handle_error, handle_event, handle_info,
post_turn, post_run, terminate_agent) are survived; a crash or malformed return of
handle_response stops the agent and its waiting callers get `AgentDown` instead of hanging; a
class that does not subclass `GenAgent` works with only init_agent and handle_response."""

from __future__ import annotations

import queue
from typing import Any

import pytest
from _agents import WAIT_S, CallLog, ProbeWithInfo, failure, in_thread, start

import gen_agent
from gen_agent import (
    AgentDown,
    Event,
    Halt,
    NoReply,
    Proceed,
    Prompt,
    RequestRef,
    Skip,
    TurnError,
)
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import (
    HALTED,
    MAILBOX_QUEUED,
    PROMPT_ERROR,
    TERMINATED,
    TURN_REJECTED,
    TURN_START,
    TelemetryRecorder,
)


def _raise(*_: Any) -> Any:
    raise ValueError("secret detail")


# pre_turn outcomes for the prompt "bad": (hook result, reason for external requests,
# reason given to handle_error for generated prompts (None: not called), state afterwards)
PRE_TURN = {
    "skip": (lambda p, s: Skip("skipped-state"), "pre_turn_skipped", "pre_turn_skipped",
             "skipped-state"),
    "halt": (lambda p, s: Halt("halted-state"), "pre_turn_halted", None, "halted-state"),
    "crash": (_raise, "pre_turn_skipped", ("pre_turn_crashed", "ValueError"), "s0"),
    "invalid_shape": (lambda p, s: ("ok", p, s), "pre_turn_invalid", "pre_turn_invalid", "s0"),
    "invalid_prompt": (lambda p, s: Proceed(42, "x"), "pre_turn_invalid", "pre_turn_invalid",
                       "s0"),
    "none": (lambda p, s: None, "pre_turn_invalid", "pre_turn_invalid", "s0"),
}


def _pre_turn(kind: str) -> Any:
    outcome = PRE_TURN[kind][0]

    def pre_turn(prompt: str, state: Any) -> Any:
        return outcome(prompt, state) if prompt == "bad" else Proceed(prompt, state)

    return pre_turn


# --- pre_turn on external requests (§3.5) ----------------------------------------------------


@pytest.mark.parametrize("kind", list(PRE_TURN))
@pytest.mark.parametrize("via", ["ask", "tell"])
def test_pre_turn_rejection_of_an_external_request(kind: str, via: str) -> None:
    _, reason, _, state_after = PRE_TURN[kind]
    log = CallLog()
    ref = start(log=log, state="s0", scripts=[mock.text_turn("fine")],
                hooks={"pre_turn": _pre_turn(kind)})

    with TelemetryRecorder([TURN_REJECTED, TURN_START]) as rec:
        if via == "ask":
            with pytest.raises(TurnError) as info:
                ref.ask("bad", timeout=WAIT_S)
            got = info.value.reason
        else:
            request = ref.tell("bad", timeout=WAIT_S)  # a ref even when rejected (§2.5)
            got = ref.poll(request, timeout=WAIT_S).reason
        rejected = rec.named(TURN_REJECTED)
        started = rec.named(TURN_START)

    assert got == reason
    status = ref.status(timeout=WAIT_S)
    assert status.agent_state == state_after
    assert status.halted is (kind == "halt")
    assert [r.metadata["reason_kind"] for r in rejected] == [reason]
    assert rejected[0].metadata["origin"] == via and started == []
    assert MockBackend.history("a") == []  # nothing was dispatched
    assert log.of("handle_error") == [] and log.of("post_turn") == []
    assert log.count("post_run") == (1 if kind == "halt" else 0)
    if kind != "halt":  # the agent goes on with the next request
        assert ref.ask("next", timeout=WAIT_S).text == "fine"


def test_a_rejected_request_does_not_block_the_queue_behind_it() -> None:
    g = mock.gate(mock.text_turn("first"))
    ref = start(scripts=[g, mock.text_turn("third")], hooks={"pre_turn": _pre_turn("skip")})
    with TelemetryRecorder([MAILBOX_QUEUED]) as rec:
        first = ref.tell("first", timeout=WAIT_S)
        g.wait_blocked(WAIT_S)
        bad = in_thread(ref.ask, "bad", WAIT_S)
        rec.wait_for(lambda r: r.measurements["depth"] == 1)
        third = in_thread(ref.ask, "third", WAIT_S)
        rec.wait_for(lambda r: r.measurements["depth"] == 2)
        g.release()

    assert failure(bad).reason == "pre_turn_skipped"  # type: ignore[attr-defined]
    assert third.result(WAIT_S).text == "third"
    assert ref.poll(first, timeout=WAIT_S).status == "completed"


# --- pre_turn on generated prompts (§3.5) ----------------------------------------------------


def _generate_bad(origin: str) -> dict[str, Any]:
    if origin == "self_chain":
        return {"handle_response": lambda ref, response, state:
                Prompt("bad", state) if response.prompt == "q" else NoReply(state)}
    return {"handle_event": lambda event, state: Prompt("bad", state)}


def _trigger(ref: gen_agent.AgentRef, origin: str) -> None:
    if origin == "self_chain":
        assert ref.ask("q", timeout=WAIT_S).text == "ok"
    else:
        ref.notify_ack("go", timeout=WAIT_S)


@pytest.mark.parametrize("kind", list(PRE_TURN))
@pytest.mark.parametrize("origin", ["self_chain", "event"])
def test_pre_turn_rejection_of_a_generated_prompt(kind: str, origin: str) -> None:
    _, reject_kind, error_reason, state_after = PRE_TURN[kind]
    if kind == "crash":
        reject_kind = ("pre_turn_crashed", "ValueError")
    log = CallLog()
    errors: list[tuple[Any, Any, Any]] = []

    def handle_error(ref: Any, reason: Any, state: Any) -> Any:
        errors.append((ref, reason, state))
        return NoReply(state)

    ref = start(log=log, state="s0", scripts=[mock.text_turn("ok")],
                hooks={"pre_turn": _pre_turn(kind), "handle_error": handle_error,
                       **_generate_bad(origin)})
    with TelemetryRecorder([TURN_REJECTED, PROMPT_ERROR]) as rec:
        _trigger(ref, origin)
        rejected = rec.wait_for(TURN_REJECTED)
        status = ref.status(timeout=WAIT_S)  # the rejection step has finished
        prompt_errors = rec.named(PROMPT_ERROR)

    assert rejected.metadata["origin"] == origin
    assert rejected.metadata["reason_kind"] == reject_kind
    assert status.agent_state == state_after and status.halted is (kind == "halt")
    if error_reason is None:  # a halting pre_turn calls no handle_error
        assert errors == [] and prompt_errors == []
        assert log.count("post_run") == 1
    else:
        assert [(reason, state) for _, reason, state in errors] == [(error_reason,
                                                                     state_after)]
        assert isinstance(errors[0][0], RequestRef)
        assert errors[0][0] == rejected.metadata["ref"]
        assert [r.metadata["reason"] for r in prompt_errors] == [error_reason]
    assert MockBackend.history("a") == (["q"] if origin == "self_chain" else [])
    assert log.count("post_turn") == (1 if origin == "self_chain" else 0)


def test_handle_error_may_recover_a_rejected_generated_prompt() -> None:
    log = CallLog()

    def handle_error(ref: Any, reason: Any, state: Any) -> Any:
        return Prompt("recover", state) if reason == "pre_turn_skipped" else NoReply(state)

    ref = start(log=log, scripts=[mock.text_turn("ok"), mock.text_turn("recovered")],
                hooks={"pre_turn": _pre_turn("skip"), "handle_error": handle_error,
                       **_generate_bad("self_chain")})
    _trigger(ref, "self_chain")

    log.wait_for(("handle_response", "recover"))
    assert MockBackend.history("a") == ["q", "recover"]


def test_a_pre_turn_that_keeps_rejecting_generated_prompts_does_not_lock_the_agent() -> None:
    log = CallLog()
    attempts = 20

    def handle_error(ref: Any, reason: Any, state: int) -> Any:
        return Prompt("bad", state + 1) if state < attempts else NoReply(state)

    def pre_turn(prompt: str, state: int) -> Any:
        return Skip(state) if prompt == "bad" else Proceed(prompt, state)

    ref = start(log=log, state=1, scripts=[mock.text_turn("ok")],
                hooks={"pre_turn": pre_turn, "handle_error": handle_error,
                       **_generate_bad("self_chain")})
    _trigger(ref, "self_chain")
    # Calls are served between the (timer-spaced) rejections.
    assert ref.status(timeout=WAIT_S).state == "idle"
    log.wait_for(lambda e: e == ("handle_error", "pre_turn_skipped")
                 and log.count("handle_error") >= attempts)

    assert log.count("handle_error") == attempts
    assert MockBackend.history("a") == ["q"]


# --- protected callbacks are survived (§3.8-§3.12) -------------------------------------------

BAD_DECISIONS = {
    "raises": _raise,
    "none": lambda *a: None,
    "str": lambda *a: "noreply",
    "tuple": lambda *a: ("noreply", a[-1]),
    "prompt_not_str": lambda *a: Prompt(7, "evil"),
    "proceed": lambda *a: Proceed("p", "evil"),
}


@pytest.mark.parametrize("bad", list(BAD_DECISIONS))
def test_a_failing_handle_error_keeps_the_previous_state_and_the_original_error(
        bad: str) -> None:
    log = CallLog()
    ref = start(log=log, state="before", hooks={"handle_error": BAD_DECISIONS[bad]},
                scripts=[[Event.new("error", {"reason": "backend_down"})], mock.text_turn("ok")])
    ref_stream = start(name="b", log=CallLog(), state=[],
                       hooks={"handle_error": BAD_DECISIONS[bad],
                              "handle_stream_event": lambda e, s: [*s, e.kind]},
                       scripts=[[Event.new("error", {"reason": "x"})]])

    with pytest.raises(TurnError) as info:
        ref.ask("q", timeout=WAIT_S)
    with pytest.raises(TurnError):
        ref_stream.ask("q", timeout=WAIT_S)

    assert info.value.reason == "backend_down"
    assert log.of("post_turn") == [("post_turn", "error")]
    assert ref.status(timeout=WAIT_S).agent_state == "before"
    # "previous state" is the state handle_error was given: here the threaded stream state
    assert ref_stream.status(timeout=WAIT_S).agent_state == ["error"]
    assert ref.ask("again", timeout=WAIT_S).text == "ok"


@pytest.mark.parametrize("bad", list(BAD_DECISIONS))
def test_a_failing_handle_event_keeps_the_state_idle_and_deferred(bad: str) -> None:
    log = CallLog()

    def handle_event(event: Any, state: list[str]) -> Any:
        if event == "bad":
            return BAD_DECISIONS[bad](event, state)
        return NoReply([*state, event])

    g = mock.gate(mock.text_turn("ok"))
    ref = start(log=log, state=[], scripts=[g], hooks={"handle_event": handle_event})

    ref.notify_ack("bad", timeout=WAIT_S)  # idle: applied now
    ref.notify_ack("one", timeout=WAIT_S)
    request = ref.tell("q", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    ref.notify_ack("bad", timeout=WAIT_S)  # busy: deferred
    ref.notify_ack("two", timeout=WAIT_S)
    g.release()
    log.wait_for(("handle_event", "two"))

    assert ref.status(timeout=WAIT_S).agent_state == ["one", "two"]
    assert ref.poll(request, timeout=WAIT_S).status == "completed"


@pytest.mark.parametrize("bad", ["raises", "none", "str"])
def test_a_failing_handle_info_is_survived(bad: str) -> None:
    log = CallLog()

    def handle_info(message: Any, state: list[Any]) -> Any:
        return BAD_DECISIONS[bad](message, state) if message == "bad" else NoReply(
            [*state, message])

    ref = start(ProbeWithInfo, log=log, state=[], hooks={"handle_info": handle_info})
    gen_agent.send("a", "bad")
    gen_agent.send("a", "good")

    log.wait_for(("handle_info", "good"))
    assert ref.status(timeout=WAIT_S).agent_state == ["good"]


@pytest.mark.parametrize("decision", ["noreply", "halt", "prompt"])
def test_a_raising_post_turn_keeps_the_post_decision_state_and_transition(decision: str) -> None:
    log = CallLog()

    def handle_response(ref: Any, response: Any, state: Any) -> Any:
        if response.prompt != "q":
            return NoReply("chained")
        return {"noreply": NoReply("decided"), "halt": Halt("decided"),
                "prompt": Prompt("next", "decided")}[decision]

    ref = start(log=log, hooks={"handle_response": handle_response, "post_turn": _raise},
                scripts=[mock.text_turn("ok"), mock.text_turn("chained")])

    assert ref.ask("q", timeout=WAIT_S).text == "ok"

    if decision == "prompt":
        log.wait_for(("handle_response", "next"))
    status = ref.status(timeout=WAIT_S)
    assert status.agent_state == ("chained" if decision == "prompt" else "decided")
    assert status.halted is (decision == "halt")


def test_a_raising_post_turn_after_an_error_still_delivers_it() -> None:
    ref = start(hooks={"post_turn": _raise}, scripts=[mock.error("nope")])

    with pytest.raises(TurnError) as info:
        ref.ask("q", timeout=WAIT_S)

    assert info.value.reason == "nope" and ref.is_alive()


def test_a_raising_post_run_still_halts() -> None:
    log = CallLog()
    ref = start(log=log, state="final", hooks={"post_run": _raise})

    with TelemetryRecorder([HALTED]) as rec:
        ref.halt()
        halted = rec.wait_for(HALTED)

    assert halted.metadata == {"agent": "a", "agent_state": "final"}
    assert ref.status(timeout=WAIT_S).halted and log.count("post_run") == 1


def test_a_raising_terminate_agent_does_not_prevent_the_stop() -> None:
    log = CallLog()
    ref = start(log=log, hooks={"terminate_agent": _raise})
    session = gen_agent.backend_session("a")

    with TelemetryRecorder([TERMINATED]) as rec:
        ref.stop()
        terminated = rec.wait_for(TERMINATED)

    assert terminated.metadata["reason"] == "shutdown"
    assert session.terminated and not ref.is_alive()
    assert gen_agent.list_agents() == []


# --- handle_response is not protected (§3.7) -------------------------------------------------


HANDLE_RESPONSE_FAILURES = {
    "raises": (_raise, ("callback_failed", "error", "ValueError")),
    "raises_key_error": (lambda *a: {}["missing"], ("callback_failed", "error", "KeyError")),
    "none": (lambda *a: None, ("callback_failed", "error", "other")),
    "str": (lambda *a: "noreply", ("callback_failed", "error", "other")),
    "tuple": (lambda *a: ("noreply", a[-1]), ("callback_failed", "error", "other")),
    "prompt_not_str": (lambda *a: Prompt(b"bytes", a[-1]), ("callback_failed", "error", "other")),
    "skip": (lambda *a: Skip(a[-1]), ("callback_failed", "error", "other")),
}


@pytest.mark.parametrize("bad", list(HANDLE_RESPONSE_FAILURES))
def test_a_failing_handle_response_stops_the_agent_and_its_callers_get_agent_down(
        bad: str) -> None:
    hook, reason = HANDLE_RESPONSE_FAILURES[bad]
    log = CallLog()
    g = mock.gate(mock.text_turn("ok"))
    completions: queue.Queue[Any] = queue.Queue()
    ref = start(log=log, hooks={"handle_response": hook}, scripts=[g, mock.text_turn("x")])
    session = gen_agent.backend_session("a")

    with TelemetryRecorder([MAILBOX_QUEUED, TERMINATED]) as rec:
        active = in_thread(ref.ask, "q", WAIT_S)
        g.wait_blocked(WAIT_S)
        queued = in_thread(ref.ask, "queued", WAIT_S)
        rec.wait_for(lambda r: r.event_name == MAILBOX_QUEUED)
        ref.tell_with_completion("queued tell", completions, timeout=WAIT_S)
        g.release()

        for future in (active, queued):
            exc = failure(future)
            assert isinstance(exc, AgentDown) and exc.reason == reason
        terminated = rec.wait_for(TERMINATED)

    assert ref.wait_stopped(WAIT_S) and ref.exit_reason == reason
    assert terminated.metadata["reason"] == reason
    assert log.of("terminate_agent") == [("terminate_agent", reason)]
    assert log.of("post_turn") == []
    assert session.terminated
    assert completions.empty()  # agent death leaves accepted requests without completion
    assert gen_agent.whereis("a") is None and gen_agent.list_agents() == []
    assert "secret" not in repr(reason)


def test_a_failing_handle_response_on_a_tell_stops_the_agent_too() -> None:
    ref = start(hooks={"handle_response": _raise}, scripts=[mock.text_turn("ok")])

    ref.tell("q", timeout=WAIT_S)

    assert ref.wait_stopped(WAIT_S)
    assert ref.exit_reason == ("callback_failed", "error", "ValueError")


# --- a class that does not subclass GenAgent (§3.2) ------------------------------------------


class Minimal:
    """Only the two required callbacks; no GenAgent base class."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, 0

    def handle_response(self, ref: Any, response: Any, state: int) -> Any:
        if response.prompt == "chain":
            return Prompt("chained", state + 1)
        return NoReply(state + 1)


def test_a_class_with_only_init_agent_and_handle_response_works() -> None:
    g = mock.gate(mock.text_turn("slow"))
    ref = gen_agent.start_agent(
        Minimal, name="m", backend=MockBackend,
        scripts=[mock.text_turn("one"), mock.error("nope"), mock.text_turn("c1"),
                 mock.text_turn("c2"), g, mock.text_turn("after halt")])

    assert ref.ask("first", timeout=WAIT_S).text == "one"
    with pytest.raises(TurnError) as info:  # default handle_error: deliver the error
        ref.ask("second", timeout=WAIT_S)
    assert info.value.reason == "nope"
    ref.notify_ack("ignored", timeout=WAIT_S)  # default handle_event: noreply
    gen_agent.send("m", "dropped")  # no handle_info: dropped
    assert ref.ask("chain", timeout=WAIT_S).text == "c1"
    request = ref.tell("gated", timeout=WAIT_S)
    g.wait_blocked(WAIT_S)
    with TelemetryRecorder([HALTED]) as rec:
        ref.halt()  # pending while busy; applied after the turn (no post_run defined)
        g.release()
        rec.wait_for(HALTED)
    queued = in_thread(ref.ask, "queued", WAIT_S)
    assert ref.poll(request, timeout=WAIT_S).status == "completed"
    assert ref.status(timeout=WAIT_S).halted
    ref.resume()

    assert queued.result(WAIT_S).text == "after halt"
    assert MockBackend.history("m") == ["first", "second", "chain", "chained", "gated",
                                        "queued"]
    assert ref.status(timeout=WAIT_S).agent_state == 5
    ref.stop()  # no terminate_agent defined
    assert ref.exit_reason == "shutdown"

"""Caller-owned retries (contract §4.8): `handle_error` returning `Prompt` for an ask/tell turn.

The retry runs under the same ref with attempt + 1, the caller sees only the final outcome,
telemetry carries the attempt, an interrupt is never retried as owned, and a pending retry
obeys halt (on_halt "fail"/"queue"), cancel, drain and stop.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import NoReply, OverloadInfo, Proceed, Prompt, Skip, TurnError, term_size
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import (
    INPUT_REJECTED,
    PROMPT_START,
    TURN_CANCELLED,
    TURN_ERROR,
    TURN_REJECTED,
    TURN_START,
    TURN_STOP,
    TelemetryRecorder,
)

T = 5.0  # seconds: the bound of every wait in this file


def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
    """Run `fn` in a fresh thread; its outcome lands in the returned future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


class Retrier(gen_agent.GenAgent):
    """Retries a failed turn `retries` times as "retry-<n>", logging every callback.

    Options: scripts, log (a list shared with the test), retries (default 1),
    retry_prompt (a fixed retry text), then (the decision after the retries run out:
    "noreply" or "halt"), interrupted_prompt (a prompt returned for "interrupted"),
    overload_prompt (a prompt returned for a self-chain overload), skip_retries (pre_turn
    skips prompts starting with "retry").
    """

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log: list[Any] = opts["log"]
        self.retries = opts.get("retries", 1)
        self.retry_prompt = opts.get("retry_prompt")
        self.then = opts.get("then", "noreply")
        self.interrupted_prompt = opts.get("interrupted_prompt")
        self.overload_prompt = opts.get("overload_prompt")
        self.skip_retries = opts.get("skip_retries", False)
        self.chain = list(opts.get("chain", []))
        return {"scripts": opts["scripts"]}, 0

    def pre_turn(self, prompt: str, state: Any) -> Any:
        if self.skip_retries and prompt.startswith("retry"):
            return Skip(state)
        return Proceed(prompt, state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.log.append(("response", ref, response.text))
        if self.chain:
            return Prompt(self.chain.pop(0), state)
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append(("error", ref, reason))
        if reason == "interrupted":
            if self.interrupted_prompt is not None:
                return Prompt(self.interrupted_prompt, state)
            return NoReply(state)
        if isinstance(reason, tuple) and reason[0] == "overloaded":
            if self.overload_prompt is not None:
                return Prompt(self.overload_prompt, state)
            return NoReply(state)
        if state < self.retries:
            return Prompt(self.retry_prompt or f"retry-{state + 1}", state + 1)
        if self.then == "halt":
            return gen_agent.Halt(state)
        return NoReply(state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        self.log.append(("post_turn", ref, outcome[0]))
        return state


def start(log: list[Any], scripts: list[Any], name: str = "retrier", **opts: Any) -> Any:
    return agents.start(Retrier, name, scripts, log=log, **opts)


def turn_meta(rec: TelemetryRecorder, name: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return [(r.metadata["ref"], r.metadata["attempt"], r.metadata["origin"])
            for r in rec.named(name)]


def test_ask_retry_keeps_ref_bumps_attempt_and_caller_sees_final_success() -> None:
    log: list[Any] = []
    with TelemetryRecorder() as rec:
        start(log, [mock.error("e1"), mock.text_turn("ok")])
        response = gen_agent.ask("retrier", "p", timeout=T)
    assert response.text == "ok"
    assert response.prompt == "retry-1"
    assert MockBackend.history("retrier") == ["p", "retry-1"]
    ((ref, _, _),) = turn_meta(rec, TURN_ERROR)
    assert turn_meta(rec, TURN_START) == [(ref, 1, "ask"), (ref, 2, "ask")]
    assert turn_meta(rec, TURN_ERROR) == [(ref, 1, "ask")]
    assert turn_meta(rec, TURN_STOP) == [(ref, 2, "ask")]
    assert [(r.metadata["attempt"], r.metadata["prompt"]) for r in rec.named(PROMPT_START)] \
        == [(1, "p"), (2, "retry-1")]
    assert log == [("error", ref, "e1"), ("post_turn", ref, "error"),
                   ("response", ref, "ok"), ("post_turn", ref, "ok")]


def test_tell_retry_is_pending_under_the_same_ref_with_attempt_two() -> None:
    log: list[Any] = []
    gate = mock.gate(mock.text_turn("ok"))
    with TelemetryRecorder() as rec:
        start(log, [mock.error_turn("e1"), gate])
        ref = gen_agent.tell("retrier", "p")
        gate.wait_blocked(T)
        assert gen_agent.poll("retrier", ref) == gen_agent.PollResult(status="pending")
        current = gen_agent.runtime_snapshot("retrier").current_request
        assert (current.ref, current.attempt, current.origin) == (ref, 2, "tell")
        assert gen_agent.status("retrier").current_request == ref
        gate.release()
        rec.wait_for(lambda r: r.event_name == TURN_STOP, T)
    result = gen_agent.poll("retrier", ref)
    assert result.status == "completed"
    assert result.response.text == "ok"
    assert turn_meta(rec, TURN_START) == [(ref, 1, "tell"), (ref, 2, "tell")]


def test_completion_of_a_retried_tell_carries_only_the_final_outcome() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    start(log, [mock.error_turn("e1"), mock.text_turn("ok")])
    ref = gen_agent.tell_with_completion("retrier", "p", inbox)
    tag, kind, name, got_ref, outcome = inbox.get(timeout=T)
    assert (tag, kind, name, got_ref, outcome[0]) == ("gen_agent", "completion", "retrier",
                                                      ref, "ok")
    assert outcome[1].text == "ok"
    gen_agent.status("retrier")  # the agent is idle; nothing more can be in flight
    assert inbox.empty()


def test_exhausted_retries_deliver_the_last_attempts_error() -> None:
    log: list[Any] = []
    with TelemetryRecorder() as rec:
        start(log, [mock.error("e1"), mock.error("e2"), mock.error("e3")], retries=2)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("retrier", "p", timeout=T)
    assert info.value.reason == "e3"
    assert [entry[2] for entry in log if entry[0] == "error"] == ["e1", "e2", "e3"]
    assert [attempt for _, attempt, _ in turn_meta(rec, TURN_ERROR)] == [1, 2, 3]
    assert MockBackend.history("retrier") == ["p", "retry-1", "retry-2"]


def test_halt_decision_on_a_retry_delivers_the_last_error_and_halts() -> None:
    log: list[Any] = []
    start(log, [mock.error("e1"), mock.error("e2")], then="halt")
    with pytest.raises(TurnError) as info:
        gen_agent.ask("retrier", "p", timeout=T)
    assert info.value.reason == "e2"
    assert gen_agent.status("retrier").halted is True


def test_watchdog_applies_to_each_attempt() -> None:
    # Two gates that are never released: each attempt ends by its own watchdog.
    log: list[Any] = []
    gates = [mock.gate(mock.text_turn("never")), mock.gate(mock.text_turn("never"))]
    with TelemetryRecorder() as rec:
        start(log, gates, watchdog_ms=50)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("retrier", "p", timeout=T)
    assert info.value.reason == "timeout"
    assert [(r.metadata["attempt"], r.metadata["reason_kind"]) for r in rec.named(TURN_ERROR)] \
        == [(1, "timeout"), (2, "timeout")]


def test_interrupt_ends_ownership_and_its_prompt_becomes_an_independent_self_chain() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    gate = mock.gate(mock.text_turn("never"))
    with TelemetryRecorder() as rec:
        start(log, [gate, mock.text_turn("follow")], interrupted_prompt="after-interrupt")
        ref = gen_agent.tell_with_completion("retrier", "p", inbox)
        gate.wait_blocked(T)
        gen_agent.interrupt("retrier")
        assert inbox.get(timeout=T)[4] == ("error", "interrupted")
        stop = rec.wait_for(lambda r: r.event_name == TURN_STOP, T)
    chain_ref = stop.metadata["ref"]
    assert chain_ref != ref
    assert turn_meta(rec, TURN_START) == [(ref, 1, "tell"), (chain_ref, 1, "self_chain")]
    assert gen_agent.poll("retrier", ref) == gen_agent.PollResult(status="failed",
                                                                  reason="interrupted")
    assert MockBackend.history("retrier") == ["p", "after-interrupt"]
    assert inbox.empty()


def test_interrupted_ask_gets_interrupted_not_a_retry() -> None:
    log: list[Any] = []
    gate = mock.gate(mock.text_turn("never"))
    start(log, [gate, mock.text_turn("follow")], interrupted_prompt="after-interrupt")
    future = in_thread(gen_agent.ask, "retrier", "p", timeout=T)
    gate.wait_blocked(T)
    gen_agent.interrupt("retrier")
    with pytest.raises(TurnError) as info:
        future.result(T)
    assert info.value.reason == "interrupted"


def test_retry_over_the_slot_byte_cap_delivers_the_original_error_then_overload() -> None:
    log: list[Any] = []
    cap = term_size("p") + 10
    big = "x" * 200
    with TelemetryRecorder() as rec:
        start(log, [mock.error("e1"), mock.text_turn("recovered")], retry_prompt=big,
              overload_prompt="tiny", max_pending_prompt_bytes=cap)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("retrier", "p", timeout=T)
        rec.wait_for(lambda r: r.event_name == TURN_STOP, T)
    assert info.value.reason == "e1"
    expected = ("overloaded", OverloadInfo(
        queue="self_chain", limit="bytes", pending_count=0, pending_bytes=0,
        incoming_bytes=term_size(big), max_count=1, max_bytes=cap))
    errors = [entry for entry in log if entry[0] == "error"]
    assert [reason for _, _, reason in errors] == ["e1", expected]
    assert errors[1][1] != errors[0][1]  # a fresh ref for the overload
    assert [r.metadata["reason"] for r in rec.named(INPUT_REJECTED)] == [expected]
    # handle_error's own prompt for the overload fits and runs as an independent self-chain
    assert MockBackend.history("retrier") == ["p", "tiny"]
    assert [origin for _, _, origin in turn_meta(rec, TURN_START)] == ["ask", "self_chain"]


def _halt_with_retry_pending(log: list[Any], inbox: Any, on_halt: str,
                             extra: list[Any]) -> tuple[Any, Any]:
    """Tell p; halt while it runs; its failure queues a retry, then the agent halts."""
    gate = mock.gate(mock.error_turn("e1"))
    start(log, [gate, *extra])
    ref = gen_agent.tell_with_completion("retrier", "p", inbox, on_halt=on_halt)
    gate.wait_blocked(T)
    gen_agent.halt("retrier")
    assert gen_agent.status("retrier").halt_pending is True
    gate.release()
    return ref, gate


def test_halt_with_a_pending_retry_of_an_on_halt_fail_tell_fails_it_with_halted() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    with TelemetryRecorder() as rec:
        ref, _ = _halt_with_retry_pending(log, inbox, "fail", [])
        assert inbox.get(timeout=T) == ("gen_agent", "completion", "retrier", ref,
                                        ("error", "halted"))
    assert turn_meta(rec, TURN_REJECTED) == [(ref, 2, "tell")]
    assert rec.named(TURN_REJECTED)[0].metadata["reason_kind"] == "halted"
    assert gen_agent.poll("retrier", ref) == gen_agent.PollResult(status="failed",
                                                                  reason="halted")
    snapshot = gen_agent.runtime_snapshot("retrier")
    assert (snapshot.halted, snapshot.self_chain_pending) == (True, False)
    assert MockBackend.history("retrier") == ["p"]
    assert inbox.empty()


def test_halt_with_a_pending_retry_of_an_on_halt_queue_tell_waits_for_resume() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    with TelemetryRecorder() as rec:
        ref, _ = _halt_with_retry_pending(log, inbox, "queue", [mock.text_turn("ok")])
        rec.wait_for(lambda r: r.event_name == ("gen_agent", "halted"), T)
        snapshot = gen_agent.runtime_snapshot("retrier")
        assert (snapshot.halted, snapshot.self_chain_pending) == (True, True)
        assert gen_agent.poll("retrier", ref) == gen_agent.PollResult(status="pending")
        assert inbox.empty()
        gen_agent.resume("retrier")
        outcome = inbox.get(timeout=T)[4]
    assert (outcome[0], outcome[1].text) == ("ok", "ok")
    assert turn_meta(rec, TURN_START) == [(ref, 1, "tell"), (ref, 2, "tell")]


def test_a_pending_retry_of_a_tell_can_be_cancelled() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    with TelemetryRecorder() as rec:
        ref, _ = _halt_with_retry_pending(log, inbox, "queue", [mock.text_turn("unused")])
        rec.wait_for(lambda r: r.event_name == ("gen_agent", "halted"), T)
        assert gen_agent.cancel_request("retrier", ref) == "cancelled"
        assert gen_agent.cancel_request("retrier", ref) == "cancelled"
        gen_agent.resume("retrier")
        gen_agent.status("retrier")
    assert inbox.get(timeout=T) == ("gen_agent", "completion", "retrier", ref,
                                    ("error", "cancelled"))
    assert inbox.empty()
    (cancelled,) = rec.named(TURN_CANCELLED)
    assert (cancelled.metadata["ref"], cancelled.metadata["attempt"],
            cancelled.metadata["reason_kind"]) == (ref, 2, "caller_cancelled")
    assert gen_agent.poll("retrier", ref) == gen_agent.PollResult(status="failed",
                                                                  reason="cancelled")
    assert MockBackend.history("retrier") == ["p"]
    # one failed attempt: one handle_error, one post_turn, nothing for the cancellation
    assert [entry[0] for entry in log] == ["error", "post_turn"]


def _ask_with_retry_pending(log: list[Any]) -> Future[Any]:
    gate = mock.gate(mock.error_turn("e1"))
    start(log, [gate, mock.text_turn("unused")])
    future = in_thread(gen_agent.ask, "retrier", "p", timeout=T)
    gate.wait_blocked(T)
    with TelemetryRecorder([("gen_agent", "halted")]) as rec:
        gen_agent.halt("retrier")
        gate.release()
        rec.wait_for(("gen_agent", "halted"), T)
    assert gen_agent.runtime_snapshot("retrier").self_chain_pending is True
    assert not future.done()
    return future


def test_a_pending_retry_of_an_ask_is_answered_draining_on_drain() -> None:
    log: list[Any] = []
    future = _ask_with_retry_pending(log)
    with TelemetryRecorder([TURN_REJECTED]) as rec:
        gen_agent.drain("retrier", timeout=T)
    with pytest.raises(TurnError) as info:
        future.result(T)
    assert info.value.reason == "draining"
    (rejected,) = rec.named(TURN_REJECTED)
    assert (rejected.metadata["attempt"], rejected.metadata["reason_kind"]) == (2, "draining")


def test_a_pending_retry_of_an_ask_is_answered_agent_terminated_on_stop() -> None:
    log: list[Any] = []
    future = _ask_with_retry_pending(log)
    gen_agent.stop("retrier")
    with pytest.raises(TurnError) as info:
        future.result(T)
    assert info.value.reason == ("agent_terminated", "shutdown")


def test_a_retry_goes_through_pre_turn_and_its_rejection_reaches_the_caller() -> None:
    log: list[Any] = []
    with TelemetryRecorder() as rec:
        start(log, [mock.error("e1")], skip_retries=True)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("retrier", "p", timeout=T)
    assert info.value.reason == "pre_turn_skipped"
    (rejected,) = rec.named(TURN_REJECTED)
    assert (rejected.metadata["attempt"], rejected.metadata["reason_kind"]) \
        == (2, "pre_turn_skipped")
    assert MockBackend.history("retrier") == ["p"]


def test_no_owned_retry_is_created_while_draining() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    gate = mock.gate(mock.error_turn("e1"))
    start(log, [gate, mock.text_turn("unused")])
    ref = gen_agent.tell_with_completion("retrier", "p", inbox)
    gate.wait_blocked(T)
    queued: queue.Queue[Any] = queue.Queue()
    queued_ref = gen_agent.tell_with_completion("retrier", "queued", queued)
    agent = gen_agent.whereis("retrier")
    drained = in_thread(gen_agent.drain, "retrier", timeout=T)
    # the queued tell is refused with "draining" when the drain is admitted
    assert queued.get(timeout=T) == ("gen_agent", "completion", "retrier", queued_ref,
                                     ("error", "draining"))
    gate.release()
    assert drained.result(T) is None
    assert inbox.get(timeout=T) == ("gen_agent", "completion", "retrier", ref,
                                    ("error", "e1"))
    assert agent.wait_stopped(T)
    assert [entry[2] for entry in log if entry[0] == "error"] == ["e1"]


def test_errors_of_generated_turns_give_independent_follow_ups() -> None:
    log: list[Any] = []
    with TelemetryRecorder() as rec:
        start(log, [mock.text_turn("first"), mock.error("chain-failed"),
                    mock.text_turn("recovered")], chain=["chained"], retries=1,
              retry_prompt="recover")
        gen_agent.ask("retrier", "p", timeout=T)
        rec.wait_for(lambda r: r.event_name == TURN_STOP and
                     r.metadata["origin"] == "self_chain", T)
    starts = turn_meta(rec, TURN_START)
    assert [(attempt, origin) for _, attempt, origin in starts] \
        == [(1, "ask"), (1, "self_chain"), (1, "self_chain")]
    assert len({ref for ref, _, _ in starts}) == 3
    assert MockBackend.history("retrier") == ["p", "chained", "recover"]


# ---------------------------------------------------------------------- pre_turn (§3.5)
class Gatekeeper(gen_agent.GenAgent):
    """pre_turn follows `verdicts` (a list of "skip", "raise", "invalid", "halt") for the
    prompts it is given, then proceeds; handle_response chains "generated"; handle_error
    logs its reason and asks for "generated" again while `again` lasts."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.verdicts = list(opts["verdicts"])
        self.log: list[Any] = opts["log"]
        self.again = opts.get("again", 0)
        self.chained = False
        return {"scripts": opts["scripts"]}, 0

    def pre_turn(self, prompt: str, state: Any) -> Any:
        if prompt == "external" and not self.verdicts:
            return Proceed(prompt, state)
        if prompt in ("external", "generated") and self.verdicts:
            verdict = self.verdicts.pop(0)
            if verdict == "raise":
                raise ValueError("pre_turn failed")
            if verdict == "invalid":
                return Proceed(42, state)
            if verdict == "halt":
                return gen_agent.Halt(state)
            return Skip(state)
        return Proceed(prompt, state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if not self.chained:
            self.chained = True
            return Prompt("generated", state)
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append((ref, reason))
        if self.again > 0:
            self.again -= 1
            return Prompt("generated", state)
        return NoReply(state)


@pytest.mark.parametrize(("verdict", "reason"), [
    ("skip", "pre_turn_skipped"), ("raise", "pre_turn_skipped"),
    ("invalid", "pre_turn_invalid"), ("halt", "pre_turn_halted"),
])
def test_pre_turn_rejections_of_an_ask_reach_the_caller_only(verdict: str, reason: str) -> None:
    log: list[Any] = []
    with TelemetryRecorder([TURN_REJECTED, TURN_START]) as rec:
        gen_agent.start_agent(Gatekeeper, name="keeper", backend=MockBackend, scripts=[],
                              verdicts=[verdict], log=log)
        with pytest.raises(TurnError) as info:
            gen_agent.ask("keeper", "external", timeout=T)
    assert info.value.reason == reason
    assert log == []  # handle_error is not called for external requests
    assert [r.metadata["reason_kind"] for r in rec.named(TURN_REJECTED)] == [reason]
    assert rec.named(TURN_START) == []
    assert gen_agent.status("keeper").halted is (verdict == "halt")


@pytest.mark.parametrize(("verdict", "reason"), [
    ("skip", "pre_turn_skipped"), ("raise", ("pre_turn_crashed", "ValueError")),
    ("invalid", "pre_turn_invalid"),
])
def test_pre_turn_rejections_of_a_generated_prompt_reach_handle_error(
        verdict: str, reason: Any) -> None:
    log: list[Any] = []
    with TelemetryRecorder([TURN_REJECTED]) as rec:
        gen_agent.start_agent(Gatekeeper, name="keeper", backend=MockBackend,
                              scripts=[mock.text_turn("first")], verdicts=[verdict], log=log)
        gen_agent.ask("keeper", "start", timeout=T)
        gen_agent.status("keeper")
    ((ref, got),) = log
    assert got == reason
    (rejected,) = rec.named(TURN_REJECTED)
    assert (rejected.metadata["ref"], rejected.metadata["origin"],
            rejected.metadata["reason_kind"]) == (ref, "self_chain", reason)


def test_a_generated_prompt_halted_by_pre_turn_halts_without_handle_error() -> None:
    log: list[Any] = []
    gen_agent.start_agent(Gatekeeper, name="keeper", backend=MockBackend,
                          scripts=[mock.text_turn("first")], verdicts=["halt"], log=log)
    gen_agent.ask("keeper", "start", timeout=T)
    assert gen_agent.status("keeper").halted is True
    assert log == []


def test_a_generated_prompt_rejected_again_and_again_is_retried_on_a_timer() -> None:
    # pre_turn skips "generated" three times; each time handle_error asks for it again.
    # The agent keeps answering calls meanwhile, and the fourth attempt runs.
    log: list[Any] = []
    with TelemetryRecorder([TURN_STOP, TURN_REJECTED]) as rec:
        gen_agent.start_agent(Gatekeeper, name="keeper", backend=MockBackend,
                              scripts=[mock.text_turn("first"), mock.text_turn("finally")],
                              verdicts=["skip", "skip", "skip"], again=3, log=log)
        gen_agent.ask("keeper", "start", timeout=T)
        assert gen_agent.status("keeper", timeout=T).name == "keeper"
        rec.wait_for(lambda r: r.event_name == TURN_STOP
                     and r.metadata["origin"] == "self_chain", T)
    assert [reason for _, reason in log] == ["pre_turn_skipped"] * 3
    assert len({ref for ref, _ in log}) == 3  # each generated prompt has a fresh ref
    assert MockBackend.history("keeper") == ["start", "generated"]

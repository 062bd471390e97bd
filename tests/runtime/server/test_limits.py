"""Bounded queues and overload (contract §4.17, §4.9): the prompt mailbox, the notification
buffer and the self-chain slot, each with its exact `OverloadInfo`; zero limits disable a
queue; admission is serialized by the agent.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import NoReply, OverloadInfo, Prompt, RequestRef, TurnError, term_size
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import (
    INPUT_REJECTED,
    MAILBOX_QUEUED,
    PROMPT_ERROR,
    TURN_REJECTED,
    TURN_START,
    TURN_STOP,
    TelemetryRecorder,
)

T = 5.0  # seconds: the bound of every wait in this file
NAME = "bounded"
DEFAULT_BYTES = 1_048_576


class Bounded(gen_agent.GenAgent):
    """Counts handled notifications (("prompt", text) asks for a turn); chains `chain`
    prompts from handle_response; logs handle_error reasons into `log` and answers with
    `Prompt(recovery)` when `recovery` is set."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log: list[Any] = opts.get("log", [])
        self.chain = list(opts.get("chain", []))
        self.recovery = opts.get("recovery")
        return {"scripts": opts["scripts"]}, 0

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if self.chain:
            return Prompt(self.chain.pop(0), state)
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append((ref, reason))
        if self.recovery is not None:
            return Prompt(self.recovery, state)
        return NoReply(state)

    def handle_event(self, event: Any, state: Any) -> Any:
        if isinstance(event, tuple) and event[0] == "prompt":
            return Prompt(event[1], state + 1)
        return NoReply(state + 1)


start = functools.partial(agents.start, Bounded, NAME)


def busy(*later: Any, **opts: Any) -> Any:
    """Start the agent with a turn blocked in a gate; return the gate."""
    gate = mock.gate(mock.text_turn("first"))
    start([gate, *later], **opts)
    gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    return gate


def overloaded(**fields: Any) -> tuple[str, OverloadInfo]:
    return ("overloaded", OverloadInfo(**fields))


# ---------------------------------------------------------------------- prompt mailbox
def test_max_pending_prompts_refuses_the_next_tell_with_count_info() -> None:
    with TelemetryRecorder() as rec:
        busy(max_pending_prompts=2)
        gen_agent.tell(NAME, "q1")
        gen_agent.tell(NAME, "q2")
        with pytest.raises(TurnError) as info:
            gen_agent.tell(NAME, "q3")
    expected = overloaded(queue="prompts", limit="count", pending_count=2,
                          pending_bytes=term_size("q1") + term_size("q2"),
                          incoming_bytes=term_size("q3"), max_count=2,
                          max_bytes=DEFAULT_BYTES)
    assert info.value.reason == expected
    assert [r.measurements["depth"] for r in rec.named(MAILBOX_QUEUED)] == [1, 2]
    assert [r.metadata["reason"] for r in rec.named(INPUT_REJECTED)] == [expected]
    (rejected,) = rec.named(TURN_REJECTED)
    assert (rejected.metadata["origin"], rejected.metadata["attempt"],
            rejected.metadata["reason_kind"]) == ("tell", 1, "overloaded")
    assert isinstance(rejected.metadata["ref"], RequestRef)
    assert gen_agent.status(NAME).queued == 2


def test_max_pending_prompt_bytes_refuses_a_prompt_that_does_not_fit() -> None:
    small, large = "a" * 10, "b" * 40
    cap = term_size(small) + term_size(large) - 1
    busy(max_pending_prompt_bytes=cap)
    gen_agent.tell(NAME, small)
    with pytest.raises(TurnError) as info:
        gen_agent.tell(NAME, large)
    assert info.value.reason == overloaded(
        queue="prompts", limit="bytes", pending_count=1, pending_bytes=term_size(small),
        incoming_bytes=term_size(large), max_count=1_000, max_bytes=cap)
    # exactly filling the remaining bytes is fine
    gen_agent.tell(NAME, "b" * 39)


def test_an_overloaded_ask_fails_at_once() -> None:
    with TelemetryRecorder([TURN_REJECTED]) as rec:
        busy(max_pending_prompts=0)
        with pytest.raises(TurnError) as info:
            gen_agent.ask(NAME, "refused", timeout=T)
    assert info.value.reason == overloaded(
        queue="prompts", limit="count", pending_count=0, pending_bytes=0,
        incoming_bytes=term_size("refused"), max_count=0, max_bytes=DEFAULT_BYTES)
    assert rec.named(TURN_REJECTED)[0].metadata["origin"] == "ask"


def test_the_active_prompt_is_not_pending() -> None:
    # With a limit of 1 the idle agent dispatches one and still queues one.
    busy(max_pending_prompts=1)
    gen_agent.tell(NAME, "queued")
    assert gen_agent.status(NAME).queued == 1


def test_zero_prompt_limits_disable_the_mailbox() -> None:
    busy(max_pending_prompt_bytes=0)
    with pytest.raises(TurnError) as info:
        gen_agent.tell(NAME, "x")
    assert info.value.reason == overloaded(
        queue="prompts", limit="bytes", pending_count=0, pending_bytes=0,
        incoming_bytes=term_size("x"), max_count=1_000, max_bytes=0)


def test_a_self_chain_still_works_with_max_pending_prompts_zero() -> None:
    with TelemetryRecorder([TURN_STOP]) as rec:
        start([mock.text_turn("first"), mock.text_turn("chained")], chain=["follow-up"],
              max_pending_prompts=0)
        gen_agent.ask(NAME, "p", timeout=T)
        rec.wait_for(lambda r: r.metadata["origin"] == "self_chain", T)
    assert MockBackend.history(NAME) == ["p", "follow-up"]


def test_an_idle_agent_dispatches_even_with_zero_limits() -> None:
    start([mock.text_turn("ok")], max_pending_prompts=0, max_pending_prompt_bytes=0)
    assert gen_agent.ask(NAME, "p", timeout=T).text == "ok"


# ---------------------------------------------------------------------- self-chain slot
def test_a_self_chain_over_the_byte_cap_calls_handle_error_with_the_slot_info() -> None:
    log: list[Any] = []
    big = "c" * 300
    cap = term_size(big) - 1
    with TelemetryRecorder() as rec:
        start([mock.text_turn("first")], chain=[big], log=log, max_pending_prompt_bytes=cap)
        gen_agent.ask(NAME, "p", timeout=T)
        gen_agent.status(NAME)
    expected = overloaded(queue="self_chain", limit="bytes", pending_count=0, pending_bytes=0,
                          incoming_bytes=term_size(big), max_count=1, max_bytes=cap)
    ((ref, reason),) = log
    assert reason == expected
    assert isinstance(ref, RequestRef)
    assert [r.metadata["reason"] for r in rec.named(INPUT_REJECTED)] == [expected]
    (error,) = rec.named(PROMPT_ERROR)
    assert (error.metadata["ref"], error.metadata["attempt"], error.metadata["reason"]) \
        == (ref, 1, expected)
    assert rec.named(TURN_REJECTED) == []  # a slot overload is not a turn rejection
    assert MockBackend.history(NAME) == ["p"]


def test_a_recovery_prompt_that_does_not_fit_the_slot_is_dropped_silently() -> None:
    log: list[Any] = []
    big = "c" * 300
    cap = term_size(big) - 1
    with TelemetryRecorder([INPUT_REJECTED, TURN_START]) as rec:
        start([mock.text_turn("first")], chain=[big], recovery=big, log=log,
              max_pending_prompt_bytes=cap)
        gen_agent.ask(NAME, "p", timeout=T)
        gen_agent.status(NAME)
    assert len(log) == 1  # handle_error is not called again for the dropped recovery
    assert len(rec.named(INPUT_REJECTED)) == 2
    assert len(rec.named(TURN_START)) == 1
    assert gen_agent.runtime_snapshot(NAME).self_chain_pending is False


def test_a_deferred_notification_prompt_that_does_not_fit_goes_to_handle_error() -> None:
    log: list[Any] = []
    gate = busy(log=log, max_pending_prompts=0)
    gen_agent.notify_ack(NAME, ("prompt", "generated"), timeout=T)  # buffered: accepted
    with TelemetryRecorder([PROMPT_ERROR, ("gen_agent", "state", "changed")]) as rec:
        gate.release()
        rec.wait_for(lambda r: r.event_name == ("gen_agent", "state", "changed")
                     and r.metadata["to"] == "idle", T)
    expected = overloaded(queue="prompts", limit="count", pending_count=0, pending_bytes=0,
                          incoming_bytes=term_size("generated"), max_count=0,
                          max_bytes=DEFAULT_BYTES)
    ((ref, reason),) = log
    assert reason == expected
    assert rec.named(PROMPT_ERROR)[0].metadata["ref"] == ref
    assert gen_agent.status(NAME).agent_state == 1  # the event itself was applied
    assert MockBackend.history(NAME) == ["busy"]


# ---------------------------------------------------------------------- notifications
def test_max_pending_notifications_count() -> None:
    busy(max_pending_notifications=2)
    gen_agent.notify_ack(NAME, "n1", timeout=T)
    gen_agent.notify_ack(NAME, "n2", timeout=T)
    with pytest.raises(TurnError) as info:
        gen_agent.notify_ack(NAME, "n3", timeout=T)
    assert info.value.reason == overloaded(
        queue="notifications", limit="count", pending_count=2,
        pending_bytes=term_size("n1") + term_size("n2"), incoming_bytes=term_size("n3"),
        max_count=2, max_bytes=DEFAULT_BYTES)


def test_max_pending_notification_bytes() -> None:
    event = {"payload": "x" * 50}
    cap = 2 * term_size(event) - 1
    busy(max_pending_notification_bytes=cap)
    gen_agent.notify_ack(NAME, event, timeout=T)
    with pytest.raises(TurnError) as info:
        gen_agent.notify_ack(NAME, event, timeout=T)
    assert info.value.reason == overloaded(
        queue="notifications", limit="bytes", pending_count=1,
        pending_bytes=term_size(event), incoming_bytes=term_size(event), max_count=1_000,
        max_bytes=cap)


def test_plain_notify_overload_shows_only_in_telemetry() -> None:
    with TelemetryRecorder([INPUT_REJECTED]) as rec:
        gate = busy(max_pending_notifications=0)
        gen_agent.notify(NAME, "dropped")
        record = rec.wait_for(INPUT_REJECTED, T)
    assert record.metadata["reason"] == overloaded(
        queue="notifications", limit="count", pending_count=0, pending_bytes=0,
        incoming_bytes=term_size("dropped"), max_count=0, max_bytes=DEFAULT_BYTES)
    with TelemetryRecorder([("gen_agent", "state", "changed")]) as changes:
        gate.release()
        changes.wait_for(lambda r: r.metadata["to"] == "idle", T)
    assert gen_agent.status(NAME).agent_state == 0  # the dropped event was never handled


def test_zero_notification_limit_still_handles_idle_notifications() -> None:
    start([], max_pending_notifications=0, max_pending_notification_bytes=0)
    gen_agent.notify_ack(NAME, "idle events are not pending", timeout=T)
    assert gen_agent.status(NAME).agent_state == 1


def test_turn_end_and_interrupt_release_notification_capacity() -> None:
    gate = mock.gate(mock.text_turn("never"))
    second = mock.gate(mock.text_turn("released"))
    start([gate, second], max_pending_notifications=1)
    gen_agent.tell(NAME, "one")
    gate.wait_blocked(T)
    gen_agent.notify_ack(NAME, "a", timeout=T)
    with TelemetryRecorder([TURN_START]) as rec:
        gen_agent.interrupt(NAME)
        gen_agent.tell(NAME, "two")
        rec.wait_for(TURN_START, T)
    second.wait_blocked(T)
    gen_agent.notify_ack(NAME, "b", timeout=T)  # capacity released by the interrupt
    assert gen_agent.status(NAME).agent_state == 1


# ---------------------------------------------------------------------- serialization
def test_admission_is_serialized_twenty_concurrent_tells_three_accepted() -> None:
    busy(max_pending_prompts=3)
    barrier = threading.Barrier(20)
    outcomes: list[Any] = []
    lock = threading.Lock()

    def teller(index: int) -> None:
        barrier.wait(T)
        try:
            result: Any = gen_agent.tell(NAME, f"tell-{index}", timeout=T)
        except TurnError as exc:
            result = exc.reason
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=teller, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(T)
    assert len(outcomes) == 20
    accepted = [o for o in outcomes if isinstance(o, RequestRef)]
    refused = [o for o in outcomes if not isinstance(o, RequestRef)]
    assert len(accepted) == 3
    assert len(refused) == 17
    for reason in refused:
        assert reason[0] == "overloaded"
        info = reason[1]
        assert (info.queue, info.limit, info.pending_count, info.max_count) \
            == ("prompts", "count", 3, 3)
    assert gen_agent.status(NAME).queued == 3

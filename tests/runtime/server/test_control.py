"""Control calls: `notify_ack` (§2.9), `interrupt_request` (§2.11), `cancel_request` (§2.12).

Every documented result is produced with real values: accepted / not_current / idle /
not_found for interrupts; cancelled / current / already_finished / not_found for cancels,
including ask refs and idempotent cancellation.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import (
    Event,
    NoReply,
    OverloadInfo,
    Prompt,
    RequestRef,
    TurnError,
    telemetry,
    term_size,
)
from gen_agent._errors import AgentNotFound
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import EVENT_RECEIVED, TURN_CANCELLED, TURN_START, TelemetryRecorder

T = 5.0  # seconds: the bound of every wait in this file
NAME = "controlled"


class Controlled(gen_agent.GenAgent):
    """State is the list of handled notifications; logs turn callbacks.

    A notification ("prompt", text) returns `Prompt(text)`; ("halt",) returns `Halt`.
    """

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log: list[Any] = opts.get("log", [])
        return {"scripts": opts["scripts"]}, ()

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.log.append(("handle_response", ref))
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append(("handle_error", ref, reason))
        return NoReply(state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        self.log.append(("post_turn", ref))
        return state

    def handle_event(self, event: Any, state: Any) -> Any:
        state = (*state, event)
        if isinstance(event, tuple) and event[0] == "prompt":
            return Prompt(event[1], state)
        if event == ("halt",):
            return gen_agent.Halt(state)
        return NoReply(state)


start = functools.partial(agents.start, Controlled, NAME)


def busy(*later: Any, **opts: Any) -> tuple[Any, RequestRef]:
    """Start the agent with a turn blocked in a gate; return (gate, its tell ref)."""
    gate = mock.gate(mock.text_turn("first"))
    start([gate, *later], **opts)
    ref = gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    return gate, ref


# ---------------------------------------------------------------------- notify_ack
def test_notify_ack_when_idle_is_handled_before_it_returns() -> None:
    start([])
    assert gen_agent.notify_ack(NAME, "e1", timeout=T) is None
    assert gen_agent.status(NAME).agent_state == ("e1",)


def test_notify_ack_when_busy_is_buffered_and_applied_after_the_turn() -> None:
    log: list[Any] = []
    gate, _ = busy(log=log)
    assert gen_agent.notify_ack(NAME, "e1", timeout=T) is None
    assert gen_agent.runtime_snapshot(NAME).pending_notifications == 1
    assert gen_agent.status(NAME).agent_state == ()
    with TelemetryRecorder([("gen_agent", "state", "changed")]) as rec:
        gate.release()
        rec.wait_for(lambda r: r.metadata["to"] == "idle", T)
    assert gen_agent.status(NAME).agent_state == ("e1",)
    assert gen_agent.runtime_snapshot(NAME).pending_notifications == 0


def test_notify_ack_overloaded_when_the_buffer_is_full() -> None:
    busy(max_pending_notifications=1)
    gen_agent.notify_ack(NAME, "first", timeout=T)
    with pytest.raises(TurnError) as info:
        gen_agent.notify_ack(NAME, "second", timeout=T)
    assert info.value.reason == ("overloaded", OverloadInfo(
        queue="notifications", limit="count", pending_count=1,
        pending_bytes=term_size("first"), incoming_bytes=term_size("second"), max_count=1,
        max_bytes=1_048_576))


def test_notify_ack_overloaded_when_halted_and_its_prompt_cannot_be_queued() -> None:
    start([], max_pending_prompts=0)
    gen_agent.halt(NAME)
    with pytest.raises(TurnError) as info:
        gen_agent.notify_ack(NAME, ("prompt", "generated"), timeout=T)
    assert info.value.reason == ("overloaded", OverloadInfo(
        queue="prompts", limit="count", pending_count=0, pending_bytes=0,
        incoming_bytes=term_size("generated"), max_count=0, max_bytes=1_048_576))
    # the event itself was handled: halting freezes dispatch only
    assert gen_agent.status(NAME).agent_state == (("prompt", "generated"),)


def test_notify_ack_while_halted_queues_the_generated_prompt() -> None:
    start([mock.text_turn("generated ran")])
    gen_agent.halt(NAME)
    gen_agent.notify_ack(NAME, ("prompt", "generated"), timeout=T)
    assert gen_agent.status(NAME).queued == 1
    with TelemetryRecorder([TURN_START]) as rec:
        gen_agent.resume(NAME)
        start_record = rec.wait_for(TURN_START, T)
    assert start_record.metadata["origin"] == "event"


def test_notify_ack_for_a_missing_agent_raises_not_found() -> None:
    with pytest.raises(AgentNotFound):
        gen_agent.notify_ack("nobody", "e", timeout=T)


# ---------------------------------------------------------------------- interrupt_request
def test_interrupt_request_accepted_for_the_active_turn() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    gate = mock.gate(mock.text_turn("never"))
    start([gate], log=log)
    ref = gen_agent.tell_with_completion(NAME, "p", inbox)
    gate.wait_blocked(T)
    assert gen_agent.interrupt_request(NAME, ref, timeout=T) == "accepted"
    assert inbox.get(timeout=T) == ("gen_agent", "completion", NAME, ref,
                                    ("error", "interrupted"))
    assert gen_agent.poll(NAME, ref) == gen_agent.PollResult(status="failed",
                                                             reason="interrupted")
    assert log == [("handle_error", ref, "interrupted"), ("post_turn", ref)]


def test_interrupt_request_not_current_for_a_queued_or_stale_ref() -> None:
    gate, active = busy(mock.gate(mock.text_turn("second")))
    queued = gen_agent.tell(NAME, "queued")
    assert gen_agent.interrupt_request(NAME, queued, timeout=T) == "not_current"
    assert gen_agent.interrupt_request(NAME, RequestRef.new(), timeout=T) == "not_current"
    with TelemetryRecorder([TURN_START]) as rec:
        gate.release()
        rec.wait_for(lambda r: r.metadata["ref"] == queued, T)
    # `active` finished; `queued` is now the active turn
    assert gen_agent.interrupt_request(NAME, active, timeout=T) == "not_current"
    assert gen_agent.poll(NAME, active).status == "completed"
    assert gen_agent.interrupt_request(NAME, queued, timeout=T) == "accepted"


def test_interrupt_request_not_current_for_a_ref_of_a_previous_incarnation() -> None:
    _, old_ref = busy()
    gen_agent.stop(NAME)
    gate2 = mock.gate(mock.text_turn("new"))
    start([gate2])
    gen_agent.tell(NAME, "new")
    gate2.wait_blocked(T)
    assert gen_agent.interrupt_request(NAME, old_ref, timeout=T) == "not_current"


def test_interrupt_request_idle_and_not_found() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    start([mock.text_turn("done")])
    ref = gen_agent.tell_with_completion(NAME, "p", inbox)
    inbox.get(timeout=T)
    assert gen_agent.interrupt_request(NAME, ref, timeout=T) == "idle"
    assert gen_agent.poll(NAME, ref).status == "completed"
    assert gen_agent.interrupt_request("nobody", ref, timeout=T) == "not_found"


def ask_in_thread(prompt: str, outcome: list[Any]) -> tuple[threading.Thread, RequestRef]:
    """Ask from a new thread on an idle agent; return the thread and the ask's ref."""

    def asker() -> None:
        try:
            outcome.append(gen_agent.ask(NAME, prompt, timeout=T).text)
        except TurnError as exc:
            outcome.append(exc.reason)

    with TelemetryRecorder([TURN_START]) as rec:
        thread = threading.Thread(target=asker)
        thread.start()
        ref = rec.wait_for(TURN_START, T).metadata["ref"]
    return thread, ref


def test_interrupt_request_for_an_active_ask() -> None:
    gate = mock.gate(mock.text_turn("never"))
    start([gate])
    outcome: list[Any] = []
    thread, ask_ref = ask_in_thread("asked", outcome)
    gate.wait_blocked(T)
    assert gen_agent.interrupt_request(NAME, ask_ref, timeout=T) == "accepted"
    thread.join(T)
    assert outcome == ["interrupted"]


class _Race:
    """Lets an interrupt_request reach the agent just before the outcome of the turn it names.

    A telemetry handler on EVENT_RECEIVED holds the agent thread (a `notify` triggers it)
    while the interrupt_request is queued and then the turn finishes.
    """

    def __init__(self) -> None:
        self.started, self.finish = threading.Event(), threading.Event()
        self.entered, self.hold = threading.Event(), threading.Event()

    def script(self, prompt: str) -> Any:
        yield Event.new("text", {"text": prompt})
        self.started.set()
        self.finish.wait(T)
        yield Event.new("result", {"text": prompt})

    def block(self, *args: Any) -> None:
        self.entered.set()
        self.hold.wait(T)

    def hold_agent(self) -> None:
        telemetry.attach(("test_control", "race"), EVENT_RECEIVED, self.block)
        try:
            gen_agent.notify(NAME, "hold the agent thread")
            assert self.entered.wait(T)
        finally:
            telemetry.detach(("test_control", "race"))


def _wait_mailbox(agent: Any, at_least: int) -> None:
    """Wait until the held agent has `at_least` messages waiting (bounded)."""
    inbox = agent._handle.actor_ref.actor_inbox
    deadline = time.monotonic() + T
    while inbox.qsize() < at_least:
        assert time.monotonic() < deadline, "no message reached the agent's mailbox"
        threading.Event().wait(0.001)


def test_an_interrupt_request_racing_the_turns_completion_hits_only_that_turn() -> None:
    # The acknowledgement and the interruption are one step: a turn that finishes meanwhile
    # cannot make an "accepted" interrupt fall on its successor (§2.11, §4.13).
    race = _Race()
    inbox: queue.Queue[Any] = queue.Queue()
    successor = mock.gate(mock.text_turn("successor"))
    agent = start([race.script, successor])
    active = gen_agent.tell_with_completion(NAME, "active", inbox)
    queued = gen_agent.tell_with_completion(NAME, "queued", inbox)
    assert race.started.wait(T)
    race.hold_agent()
    answers: list[str] = []
    asker = threading.Thread(target=lambda: answers.append(
        gen_agent.interrupt_request(NAME, active, timeout=T)))
    asker.start()
    _wait_mailbox(agent, 1)  # the interrupt_request waits first in line
    race.finish.set()
    _wait_mailbox(agent, 2)  # then the finished turn's outcome
    race.hold.set()
    asker.join(T)
    assert answers == ["accepted"]
    assert inbox.get(timeout=T) == ("gen_agent", "completion", NAME, active,
                                    ("error", "interrupted"))
    successor.wait_blocked(T)
    assert gen_agent.status(NAME).current_request == queued
    successor.release()
    assert inbox.get(timeout=T)[3:] == (queued, ("ok", gen_agent.poll(NAME, queued).response))
    gen_agent.status(NAME)
    assert inbox.empty()


# ---------------------------------------------------------------------- cancel_request
def test_cancel_request_removes_a_queued_tell_and_is_idempotent() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    with TelemetryRecorder([TURN_CANCELLED]) as rec:
        gate, _ = busy(mock.text_turn("next"), log=log)
        ref = gen_agent.tell_with_completion(NAME, "queued", inbox)
        assert gen_agent.status(NAME).queued == 1
        assert gen_agent.cancel_request(NAME, ref, timeout=T) == "cancelled"
        assert gen_agent.status(NAME).queued == 0
        assert gen_agent.cancel_request(NAME, ref, timeout=T) == "cancelled"
    assert inbox.get(timeout=T) == ("gen_agent", "completion", NAME, ref,
                                    ("error", "cancelled"))
    assert gen_agent.poll(NAME, ref) == gen_agent.PollResult(status="failed",
                                                             reason="cancelled")
    (cancelled,) = rec.named(TURN_CANCELLED)
    assert (cancelled.metadata["ref"], cancelled.metadata["attempt"],
            cancelled.metadata["origin"], cancelled.metadata["reason_kind"]) \
        == (ref, 1, "tell", "caller_cancelled")
    gate.release()
    gen_agent.ask(NAME, "after", timeout=T)
    assert MockBackend.history(NAME) == ["busy", "after"]
    assert inbox.empty()
    assert all(entry[1] != ref for entry in log)  # no callback ran for the cancelled ref


def test_cancel_request_frees_the_queue_slot_at_once() -> None:
    busy(max_pending_prompts=1)
    ref = gen_agent.tell(NAME, "queued")
    with pytest.raises(TurnError):
        gen_agent.tell(NAME, "refused")
    assert gen_agent.cancel_request(NAME, ref, timeout=T) == "cancelled"
    assert isinstance(gen_agent.tell(NAME, "admitted"), RequestRef)


def test_cancel_request_current_for_the_active_tell() -> None:
    _, active = busy()
    assert gen_agent.cancel_request(NAME, active, timeout=T) == "current"
    assert gen_agent.poll(NAME, active).status == "pending"


def test_cancel_request_already_finished_for_a_cached_result() -> None:
    start([mock.text_turn("ok"), mock.error_turn("bad")])
    inbox: queue.Queue[Any] = queue.Queue()
    done = gen_agent.tell_with_completion(NAME, "p1", inbox)
    failed = gen_agent.tell_with_completion(NAME, "p2", inbox)
    inbox.get(timeout=T)
    inbox.get(timeout=T)
    assert gen_agent.cancel_request(NAME, done, timeout=T) == "already_finished"
    assert gen_agent.cancel_request(NAME, failed, timeout=T) == "already_finished"


def test_cancel_request_not_found_for_unknown_pruned_and_missing() -> None:
    busy(max_tell_results=0)
    assert gen_agent.cancel_request(NAME, RequestRef.new(), timeout=T) == "not_found"
    ref = gen_agent.tell(NAME, "queued")
    assert gen_agent.cancel_request(NAME, ref, timeout=T) == "cancelled"
    # the cancellation tombstone was pruned at once (max_tell_results=0)
    assert gen_agent.cancel_request(NAME, ref, timeout=T) == "not_found"
    assert gen_agent.cancel_request("nobody", ref, timeout=T) == "not_found"


def test_cancel_request_not_found_for_ask_refs_active_or_finished() -> None:
    gate = mock.gate(mock.text_turn("asked"))
    start([gate])
    outcome: list[Any] = []
    thread, ask_ref = ask_in_thread("asked", outcome)
    gate.wait_blocked(T)
    assert gen_agent.cancel_request(NAME, ask_ref, timeout=T) == "not_found"
    gate.release()
    thread.join(T)
    assert outcome == ["asked"]
    assert gen_agent.cancel_request(NAME, ask_ref, timeout=T) == "not_found"

"""`tell_with_completion` (contract §2.6) and the `stream_to` relay (§4.18).

Exactly one completion per accepted request, sent after the decision callback and post_turn;
`on_halt` "fail"/"queue"; each event of the request's turn relayed before its completion when
the recipient is the same queue, retry attempts relayed under the same ref, and nothing
relayed for requests that never dispatch.
"""

from __future__ import annotations

import functools
import queue
import threading
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import Event, NoReply, Proceed, Prompt, Skip, TurnError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import TURN_REJECTED, TelemetryRecorder

T = 5.0  # seconds: the bound of every wait in this file
NAME = "completer"


class Completer(gen_agent.GenAgent):
    """Logs callbacks; retries an error once when `retry` is set; skips prompts "skip*"."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log: list[Any] = opts.get("log", [])
        self.retry = opts.get("retry", False)
        return {"scripts": opts["scripts"]}, 0

    def pre_turn(self, prompt: str, state: Any) -> Any:
        return Skip(state) if prompt.startswith("skip") else Proceed(prompt, state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.log.append("handle_response")
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append(("handle_error", reason))
        if self.retry and state == 0 and reason != "interrupted":
            return Prompt("retry", state + 1)
        return NoReply(state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        self.log.append("post_turn")
        return state


start = functools.partial(agents.start, Completer, NAME)


def completion(ref: Any, outcome: Any) -> tuple[Any, ...]:
    return ("gen_agent", "completion", NAME, ref, outcome)


def relay(ref: Any, event: Event) -> tuple[Any, ...]:
    return ("gen_agent", "event", NAME, ref, event)


def drain_inbox(inbox: queue.Queue[Any]) -> list[Any]:
    """Everything in `inbox` now (call after a synchronous call to the agent)."""
    items = []
    while True:
        try:
            items.append(inbox.get_nowait())
        except queue.Empty:
            return items


def test_exactly_one_completion_for_a_successful_tell() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    start([mock.text_turn("done")])
    ref = gen_agent.tell_with_completion(NAME, "p", inbox)
    message = inbox.get(timeout=T)
    assert message[:4] == completion(ref, None)[:4]
    assert message[4][0] == "ok"
    assert message[4][1].text == "done"
    assert gen_agent.poll(NAME, ref).response == message[4][1]
    gen_agent.status(NAME)
    assert drain_inbox(inbox) == []


def test_exactly_one_completion_for_a_failed_tell() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    start([mock.error_turn("boom")])
    ref = gen_agent.tell_with_completion(NAME, "p", inbox)
    assert inbox.get(timeout=T) == completion(ref, ("error", "boom"))
    gen_agent.status(NAME)
    assert drain_inbox(inbox) == []
    assert gen_agent.poll(NAME, ref) == gen_agent.PollResult(status="failed", reason="boom")


def test_completion_is_sent_after_the_decision_callback_and_post_turn() -> None:
    log: list[Any] = []
    done = threading.Event()

    def recipient(message: Any) -> None:
        log.append(("completion", message[4][0]))
        done.set()

    start([mock.text_turn("a"), mock.error_turn("b")], log=log)
    gen_agent.tell_with_completion(NAME, "p1", recipient)
    assert done.wait(T)
    done.clear()
    gen_agent.tell_with_completion(NAME, "p2", recipient)
    assert done.wait(T)
    assert log == ["handle_response", "post_turn", ("completion", "ok"),
                   ("handle_error", "b"), "post_turn", ("completion", "error")]


def test_completion_is_independent_of_the_poll_cache() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    start([mock.text_turn("kept out of the cache")], max_tell_results=0)
    ref = gen_agent.tell_with_completion(NAME, "p", inbox)
    assert inbox.get(timeout=T)[4][0] == "ok"
    assert gen_agent.poll(NAME, ref) == gen_agent.PollResult(status="failed", reason="not_found")


def test_interrupted_request_completes_with_interrupted_after_its_callbacks() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    gate = mock.gate(mock.text_turn("never"))
    start([gate], log=log)
    ref = gen_agent.tell_with_completion(NAME, "p", inbox)
    gate.wait_blocked(T)
    gen_agent.interrupt(NAME)
    assert inbox.get(timeout=T) == completion(ref, ("error", "interrupted"))
    assert log == [("handle_error", "interrupted"), "post_turn"]


def test_cancelled_and_pre_turn_rejected_requests_complete_without_callbacks() -> None:
    log: list[Any] = []
    inbox: queue.Queue[Any] = queue.Queue()
    gate = mock.gate(mock.text_turn("first"))
    start([gate], log=log)
    gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    cancelled = gen_agent.tell_with_completion(NAME, "queued", inbox)
    assert gen_agent.cancel_request(NAME, cancelled) == "cancelled"
    assert inbox.get(timeout=T) == completion(cancelled, ("error", "cancelled"))
    skipped = gen_agent.tell_with_completion(NAME, "skip me", inbox)
    gate.release()
    assert inbox.get(timeout=T) == completion(skipped, ("error", "pre_turn_skipped"))
    assert log == ["handle_response", "post_turn"]  # only the dispatched turn's callbacks


def test_on_halt_fail_while_halted_is_refused_and_registers_nothing() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    start([mock.text_turn("unused")])
    gen_agent.halt(NAME)
    with pytest.raises(TurnError) as info:
        gen_agent.tell_with_completion(NAME, "p", inbox, on_halt="fail", stream_to=inbox)
    assert info.value.reason == "halted"
    assert gen_agent.status(NAME).queued == 0
    gen_agent.resume(NAME)
    gen_agent.status(NAME)
    assert drain_inbox(inbox) == []
    assert MockBackend.history(NAME) == []


def test_on_halt_fail_queued_request_fails_once_when_the_agent_halts() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    gate = mock.gate(mock.text_turn("first"))
    with TelemetryRecorder() as rec:
        start([gate, mock.text_turn("kept")])
        gen_agent.tell(NAME, "busy")
        gate.wait_blocked(T)
        failing = gen_agent.tell_with_completion(NAME, "fail-on-halt", inbox, on_halt="fail",
                                                 stream_to=inbox)
        kept = gen_agent.tell_with_completion(NAME, "queue-on-halt", inbox)
        gen_agent.halt(NAME)
        gate.release()
        assert inbox.get(timeout=T) == completion(failing, ("error", "halted"))
        rec.wait_for(("gen_agent", "halted"), T)
        assert gen_agent.poll(NAME, failing) == gen_agent.PollResult(status="failed",
                                                                     reason="halted")
        assert gen_agent.poll(NAME, kept) == gen_agent.PollResult(status="pending")
        assert gen_agent.status(NAME).queued == 1
        assert drain_inbox(inbox) == []
        gen_agent.resume(NAME)
        outcome = inbox.get(timeout=T)
    assert outcome[3] == kept
    assert outcome[4][1].text == "kept"
    (rejected,) = rec.named(TURN_REJECTED)
    assert (rejected.metadata["ref"], rejected.metadata["attempt"],
            rejected.metadata["origin"], rejected.metadata["reason_kind"]) \
        == (failing, 1, "tell", "halted")
    assert MockBackend.history(NAME) == ["busy", "queue-on-halt"]


def test_stream_to_the_same_queue_gets_every_event_before_the_completion() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    events = mock.text_turn(["a", "b", "c"], usage={"input_tokens": 1, "output_tokens": 2})
    start([events])
    ref = gen_agent.tell_with_completion(NAME, "p", inbox, stream_to=inbox)
    messages = [inbox.get(timeout=T) for _ in range(len(events) + 1)]
    assert messages[:-1] == [relay(ref, event) for event in events]
    assert messages[-1][:4] == completion(ref, None)[:4]
    assert messages[-1][4][1].text == "abc"
    gen_agent.status(NAME)
    assert drain_inbox(inbox) == []


def test_retry_attempts_are_relayed_under_the_same_ref() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    first = mock.error_turn("transient")
    second = mock.text_turn("ok")
    start([first, second], retry=True)
    ref = gen_agent.tell_with_completion(NAME, "p", inbox, stream_to=inbox)
    messages = [inbox.get(timeout=T) for _ in range(len(first) + len(second) + 1)]
    assert messages[:-1] == [relay(ref, event) for event in first + second]
    assert messages[-1][3:] == (ref, ("ok", messages[-1][4][1]))
    gen_agent.status(NAME)
    assert drain_inbox(inbox) == []


def test_stream_to_a_different_recipient_gets_the_events() -> None:
    events_box: queue.Queue[Any] = queue.Queue()
    done_box: queue.Queue[Any] = queue.Queue()
    events = mock.text_turn("x")
    start([events])
    ref = gen_agent.tell_with_completion(NAME, "p", done_box, stream_to=events_box)
    assert done_box.get(timeout=T)[3] == ref
    gen_agent.status(NAME)
    assert drain_inbox(events_box) == [relay(ref, event) for event in events]


def test_requests_that_never_dispatch_produce_no_events() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    gate = mock.gate(mock.text_turn("first"))
    start([gate, mock.text_turn("later")], max_pending_prompts=2)
    gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    cancelled = gen_agent.tell_with_completion(NAME, "to cancel", inbox, stream_to=inbox)
    assert gen_agent.cancel_request(NAME, cancelled) == "cancelled"
    skipped = gen_agent.tell_with_completion(NAME, "skip", inbox, stream_to=inbox)
    halted = gen_agent.tell_with_completion(NAME, "halt-fail", inbox, on_halt="fail",
                                            stream_to=inbox)
    with pytest.raises(TurnError) as info:
        gen_agent.tell_with_completion(NAME, "overloaded", inbox, stream_to=inbox)
    assert info.value.reason[0] == "overloaded"
    gen_agent.halt(NAME)
    gate.release()
    assert inbox.get(timeout=T) == completion(cancelled, ("error", "cancelled"))
    assert inbox.get(timeout=T) == completion(halted, ("error", "halted"))
    gen_agent.resume(NAME)
    assert inbox.get(timeout=T) == completion(skipped, ("error", "pre_turn_skipped"))
    # a later turn of another request relays nothing to the old recipients
    gen_agent.ask(NAME, "later", timeout=T)
    assert drain_inbox(inbox) == []


def test_nothing_is_relayed_after_the_request_was_interrupted() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    proceed = threading.Event()
    finished = threading.Event()
    first, second = Event.new("text", {"text": "one"}), Event.new("text", {"text": "two"})

    def script(prompt: str) -> Any:
        try:
            yield first
            proceed.wait(T)
            yield second
            yield Event.new("result", {"text": "onetwo"})
        finally:
            finished.set()

    start([script])
    ref = gen_agent.tell_with_completion(NAME, "p", inbox, stream_to=inbox)
    assert inbox.get(timeout=T) == relay(ref, first)
    gen_agent.interrupt(NAME)
    assert inbox.get(timeout=T) == completion(ref, ("error", "interrupted"))
    proceed.set()
    assert finished.wait(T)
    gen_agent.status(NAME)
    assert drain_inbox(inbox) == []


def test_a_failing_recipient_is_ignored_and_the_agent_keeps_running() -> None:
    def broken(message: Any) -> None:
        raise RuntimeError("recipient gone")

    start([mock.text_turn("a"), mock.text_turn("b")])
    gen_agent.tell_with_completion(NAME, "p", broken, stream_to=broken)
    assert gen_agent.ask(NAME, "next", timeout=T).text == "b"


class Listener(gen_agent.GenAgent):
    """Collects every info message into a queue given in the options."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.inbox = opts["inbox"]
        return {"scripts": []}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)

    def handle_info(self, message: Any, state: Any) -> Any:
        self.inbox.put(message)
        return NoReply(state)


def test_an_agent_ref_recipient_gets_the_completion_in_handle_info() -> None:
    inbox: queue.Queue[Any] = queue.Queue()
    listener = gen_agent.start_agent(Listener, name="listener", backend=MockBackend,
                                     inbox=inbox)
    start([mock.text_turn("to another agent")])
    ref = gen_agent.tell_with_completion(NAME, "p", listener)
    message = inbox.get(timeout=T)
    assert message[:4] == completion(ref, None)[:4]
    assert message[4][1].text == "to another agent"


def test_invalid_on_halt_is_rejected_in_the_caller() -> None:
    start([])
    with pytest.raises(ValueError):
        gen_agent.tell_with_completion(NAME, "p", queue.Queue(), on_halt="later")
    assert MockBackend.history(NAME) == []

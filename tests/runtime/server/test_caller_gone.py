"""A queued ask whose caller is gone (contract §4.14, §12.9).

Python has no process monitors: an ask caller is "down" when its thread has ended, or when
its wait was abandoned by a BaseException such as KeyboardInterrupt. Such a queued ask is
dropped with `turn.cancelled` (reason_kind "caller_down") and no callbacks; a caller whose own
timeout expired but whose thread is alive keeps its place, and a dispatched ask runs anyway.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

import gen_agent
from gen_agent import NoReply
from gen_agent._errors import CallTimeout
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import (
    MAILBOX_QUEUED,
    TURN_CANCELLED,
    TURN_START,
    TURN_STOP,
    TelemetryRecorder,
)

T = 5.0  # seconds: the bound of every wait in this file
SHORT_S = 0.05  # the caller-side timeout of the asks that give up
NAME = "callee"


class Callee(gen_agent.GenAgent):
    """Logs the prompts of the turns whose decision callbacks ran."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log: list[Any] = opts["log"]
        return {"scripts": opts["scripts"]}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.log.append(("handle_response", response.prompt))
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append(("handle_error", reason))
        return NoReply(state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        self.log.append(("post_turn", outcome[0]))
        return state


def busy(log: list[Any], *later: Any, **opts: Any) -> Any:
    """Start the agent with a turn blocked in a gate; return the gate."""
    gate = mock.gate(mock.text_turn("first"))
    gen_agent.start_agent(Callee, name=NAME, backend=MockBackend, scripts=[gate, *later],
                          log=log, **opts)
    gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    return gate


def ask_and_give_up(prompt: str, keep_alive: threading.Event | None = None) -> Any:
    """Ask from a new thread with a short caller timeout; the thread ends after the timeout
    unless `keep_alive` is given (then it waits for that event first). Returns the thread,
    a list that receives the exception type the ask raised, and an event set after it."""
    raised: list[Any] = []
    gave_up = threading.Event()

    def caller() -> None:
        try:
            gen_agent.ask(NAME, prompt, timeout=SHORT_S)
        except CallTimeout as exc:
            raised.append(type(exc))
        gave_up.set()
        if keep_alive is not None:
            keep_alive.wait(T)

    thread = threading.Thread(target=caller)
    thread.start()
    return thread, raised, gave_up


def test_a_queued_ask_whose_caller_thread_ended_is_dropped_as_caller_down() -> None:
    log: list[Any] = []
    with TelemetryRecorder() as rec:
        gate = busy(log, mock.text_turn("next"))
        thread, raised, _ = ask_and_give_up("abandoned")
        rec.wait_for(MAILBOX_QUEUED, T)
        thread.join(T)
        assert raised == [CallTimeout]
        assert not thread.is_alive()
        after = gen_agent.tell(NAME, "after")
        gate.release()
        rec.wait_for(lambda r: r.event_name == TURN_STOP and r.metadata["ref"] == after, T)
    (cancelled,) = rec.named(TURN_CANCELLED)
    assert (cancelled.metadata["origin"], cancelled.metadata["attempt"],
            cancelled.metadata["reason_kind"]) == ("ask", 1, "caller_down")
    assert [r.metadata["origin"] for r in rec.named(TURN_START)] == ["tell", "tell"]
    assert MockBackend.history(NAME) == ["busy", "after"]
    assert ("handle_response", "abandoned") not in log
    assert gen_agent.status(NAME).queued == 0


def test_a_timed_out_but_live_caller_keeps_its_place_and_the_turn_runs() -> None:
    log: list[Any] = []
    keep_alive = threading.Event()
    with TelemetryRecorder() as rec:
        gate = busy(log, mock.text_turn("still wanted"))
        thread, raised, gave_up = ask_and_give_up("still wanted", keep_alive)
        rec.wait_for(MAILBOX_QUEUED, T)
        assert gave_up.wait(T)
        assert thread.is_alive()
        gate.release()
        stop = rec.wait_for(lambda r: r.event_name == TURN_STOP
                            and r.metadata["origin"] == "ask", T)
    keep_alive.set()
    thread.join(T)
    assert raised == [CallTimeout]
    assert rec.named(TURN_CANCELLED) == []
    assert stop.metadata["attempt"] == 1
    assert MockBackend.history(NAME) == ["busy", "still wanted"]
    assert ("handle_response", "still wanted") in log


def test_a_dispatched_ask_runs_although_its_caller_is_gone() -> None:
    log: list[Any] = []
    gate = mock.gate(mock.text_turn("orphan"))
    gen_agent.start_agent(Callee, name=NAME, backend=MockBackend, scripts=[gate], log=log)
    with TelemetryRecorder([TURN_STOP]) as rec:
        thread, raised, _ = ask_and_give_up("orphaned")
        gate.wait_blocked(T)
        thread.join(T)
        assert raised == [CallTimeout]
        gate.release()
        rec.wait_for(TURN_STOP, T)
    gen_agent.status(NAME)
    assert log == [("handle_response", "orphaned"), ("post_turn", "ok")]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="needs the main thread to receive SIGINT")
def test_an_ask_abandoned_by_keyboard_interrupt_is_dropped_at_once() -> None:
    # The test thread asks; a helper interrupts it with real SIGINTs once the ask is queued.
    # A signal that lands just before the caller blocks is only noticed after its wait, so
    # the helper repeats it until the handler fired; the handler raises only once.
    log: list[Any] = []
    fired = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if not fired.is_set():
            fired.set()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with TelemetryRecorder() as rec:
            busy(log, max_pending_prompts=1)
            main_id = threading.main_thread().ident
            assert main_id is not None

            def interrupter() -> None:
                rec.wait_for(MAILBOX_QUEUED, T)
                while not fired.is_set():
                    signal.pthread_kill(main_id, signal.SIGINT)
                    fired.wait(0.02)

            helper = threading.Thread(target=interrupter)
            helper.start()
            with pytest.raises(KeyboardInterrupt):
                gen_agent.ask(NAME, "interrupted caller", timeout=T)
            helper.join(T)
            cancelled = rec.wait_for(TURN_CANCELLED, T)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (cancelled.metadata["origin"], cancelled.metadata["reason_kind"]) \
        == ("ask", "caller_down")
    # its queue slot is free again before any dispatch
    assert gen_agent.status(NAME).queued == 0
    gen_agent.tell(NAME, "admitted")

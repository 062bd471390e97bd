"""Delayed caller-owned retries (issue #15): `Prompt(text, state, delay_ms=n)` from
`handle_error` retries under the same ref with attempt + 1 after `n` ms on the agent's timer,
without blocking the agent, and keeps its priority over queued work (contract §4.21); a delay
anywhere else is a malformed return. The agent's timer is replaced by a manual one, so the
tests fire the retry themselves (no wall-clock waits)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

import gen_agent
import gen_agent._runtime.agent_actor as server_module
from gen_agent import NoReply, Prompt
from gen_agent._errors import AgentDown, TurnError
from gen_agent.backend import BackendError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

T = 5.0  # seconds: the bound of every wait in this file


class ManualTimers:
    """Records every scheduled callback; `fire(delay_s)` runs the ones with that delay."""

    def __init__(self) -> None:
        self.scheduled: list[tuple[float, Any, Any]] = []
        self._lock = threading.Lock()

    def schedule(self, delay_s: float, fn: Any) -> Any:
        handle = _Handle()
        with self._lock:
            self.scheduled.append((delay_s, fn, handle))
        return handle

    def delays(self) -> list[float]:
        with self._lock:
            return [d for d, _, _ in self.scheduled]

    def fire(self, delay_s: float) -> None:
        with self._lock:
            due = [(fn, h) for d, fn, h in self.scheduled if d == delay_s]
        for fn, handle in due:
            if not handle.cancelled:
                fn()


class _Handle:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@pytest.fixture
def timers(monkeypatch: pytest.MonkeyPatch) -> ManualTimers:
    manual = ManualTimers()
    monkeypatch.setattr(server_module, "TIMERS", manual)
    return manual


class Retrier(gen_agent.GenAgent):
    """Retries a rate-limited attempt once after its `retry_after` (seconds → ms)."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        self.asked = opts["asked"]
        return {"scripts": opts["scripts"]}, []

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply([*state, ("ok", gen_agent.current_request().attempt)])

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        info = gen_agent.current_request()
        self.asked.put(reason)
        if isinstance(reason, BackendError) and info.attempt == 1:
            return Prompt(info.prompt, state, delay_ms=reason.retry_after_ms)
        return NoReply(state)


def limited() -> Any:
    return mock.error(BackendError("anthropic", "rate_limited", True, 429, "2"))


def test_a_delayed_retry_waits_on_the_timer_and_keeps_priority(timers: ManualTimers) -> None:
    asked: queue.Queue[Any] = queue.Queue()
    gen_agent.start_agent(Retrier, name="r", backend=MockBackend, asked=asked,
                          scripts=[limited(), mock.text_turn("retried"), mock.text_turn("q")])
    result: queue.Queue[Any] = queue.Queue()
    thread = threading.Thread(target=lambda: result.put(gen_agent.ask("r", "job", timeout=T)))
    thread.start()
    assert isinstance(asked.get(timeout=T), BackendError)
    # the agent is idle and answers at once while the retry waits; new work queues behind it
    inbox: queue.Queue[Any] = queue.Queue()
    gen_agent.tell_with_completion("r", "later", inbox)
    snapshot = gen_agent.runtime_snapshot("r", timeout=T)
    assert (snapshot.phase, snapshot.pending_prompts, snapshot.self_chain_pending) == (
        "idle", 1, True)
    assert 2.0 in timers.delays()
    timers.fire(2.0)
    thread.join(T)
    assert result.get(timeout=T).text == "retried"
    assert inbox.get(timeout=T).outcome[1].text == "q"
    assert MockBackend.history("r") == ["job", "job", "later"]
    assert gen_agent.status("r", timeout=T).agent_state == [("ok", 2), ("ok", 1)]


def test_stopping_during_the_delay_answers_the_caller(timers: ManualTimers) -> None:
    asked: queue.Queue[Any] = queue.Queue()
    agent = gen_agent.start_agent(Retrier, name="r", backend=MockBackend, asked=asked,
                                  scripts=[limited()])
    result: queue.Queue[Any] = queue.Queue()

    def ask() -> None:
        try:
            gen_agent.ask("r", "job", timeout=T)
        except TurnError as exc:
            result.put(exc.reason)

    thread = threading.Thread(target=ask)
    thread.start()
    asked.get(timeout=T)
    agent.stop()
    thread.join(T)
    assert result.get(timeout=T) == ("agent_terminated", "shutdown")
    assert all(handle.cancelled for d, _, handle in timers.scheduled if d == 2.0)


class DelayEverywhere(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": [mock.text_turn("hi")]}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return Prompt("again", state, delay_ms=10)


def test_a_delay_outside_a_handle_error_retry_is_malformed() -> None:
    agent = gen_agent.start_agent(DelayEverywhere, name="d", backend=MockBackend)
    with pytest.raises(AgentDown) as info:
        gen_agent.ask("d", "x", timeout=T)
    assert info.value.reason == ("callback_failed", "error", "other")
    assert agent.wait_stopped(T)


def test_a_negative_delay_is_malformed_and_the_error_is_delivered() -> None:
    class Negative(Retrier):
        def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
            return Prompt("again", state, delay_ms=-1)

    gen_agent.start_agent(Negative, name="n", backend=MockBackend, asked=queue.Queue(),
                          scripts=[limited()])
    with pytest.raises(TurnError) as info:
        gen_agent.ask("n", "x", timeout=T)
    assert isinstance(info.value.reason, BackendError)

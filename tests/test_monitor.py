"""`gen_agent.monitor` and `tell_with_completion(..., monitor=True)` (issue #15): exactly one
`Down` record per monitor when the incarnation ends, unless the monitored request completed;
typed recipient records that are still the pinned tuples."""

from __future__ import annotations

import queue
from typing import Any

import pytest

import gen_agent
from gen_agent import NoReply
from gen_agent._delivered import Completion, Down, StreamEvent, down_reason
from gen_agent._system import current_system
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

T = 5.0  # seconds: the bound of every wait in this file


class Agent(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": opts["scripts"]}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if response.text == "crash":
            raise RuntimeError("boom")
        return NoReply(state)


def drain(q: queue.Queue[Any]) -> list[Any]:
    items = []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items


def test_a_completed_monitored_request_gets_only_its_completion() -> None:
    agent = gen_agent.start_agent(Agent, name="a", backend=MockBackend,
                                  scripts=[mock.text_turn("hi")])
    inbox: queue.Queue[Any] = queue.Queue()
    ref = gen_agent.tell_with_completion("a", "x", inbox, monitor=True)
    message = inbox.get(timeout=T)
    assert isinstance(message, Completion)
    assert message == ("gen_agent", "completion", "a", ref, message[4])
    assert message.outcome[0] == "ok" and message.ok and message.outcome[1].text == "hi"
    agent.stop()
    assert agent.wait_stopped(T)
    assert drain(inbox) == []


def test_a_request_queued_at_an_orderly_stop_gets_agent_terminated() -> None:
    gate = mock.gate(mock.text_turn("slow"))
    agent = gen_agent.start_agent(Agent, name="a", backend=MockBackend,
                                  scripts=[gate, mock.text_turn("never")])
    inbox: queue.Queue[Any] = queue.Queue()
    running = gen_agent.tell_with_completion("a", "first", inbox, monitor=True)
    gate.wait_blocked(T)
    queued = gen_agent.tell_with_completion("a", "second", inbox, monitor=True)
    unmonitored: queue.Queue[Any] = queue.Queue()
    gen_agent.tell_with_completion("a", "third", unmonitored)
    agent.stop()
    assert agent.wait_stopped(T)
    got = sorted(drain(inbox), key=lambda m: m.ref == queued)
    assert got == [Down("gen_agent", "down", "a", running, ("agent_terminated", "shutdown")),
                   Down("gen_agent", "down", "a", queued, ("agent_terminated", "shutdown"))]
    assert drain(unmonitored) == []  # the contract's behaviour without a monitor


def test_a_crash_gives_agent_down_with_the_exit_reason() -> None:
    agent = gen_agent.start_agent(Agent, name="a", backend=MockBackend,
                                  scripts=[mock.text_turn("crash")])
    inbox: queue.Queue[Any] = queue.Queue()
    watcher: queue.Queue[Any] = queue.Queue()
    mref = gen_agent.monitor("a", watcher)
    ref = gen_agent.tell_with_completion("a", "x", inbox, monitor=True)
    assert agent.wait_stopped(T)
    reason = ("agent_down", ("callback_failed", "error", "RuntimeError"))
    assert inbox.get(timeout=T) == ("gen_agent", "down", "a", ref, reason)
    message = watcher.get(timeout=T)
    assert message.kind == "down" and message.ref == mref and message.reason == reason
    assert drain(inbox) == [] and drain(watcher) == []
    assert gen_agent.demonitor(mref) is False  # it already fired


def test_monitor_of_a_dead_incarnation_fires_at_once_and_demonitor_cancels() -> None:
    agent = gen_agent.start_agent(Agent, name="a", backend=MockBackend, scripts=[])
    watcher: queue.Queue[Any] = queue.Queue()
    cancelled = gen_agent.monitor("a", watcher)
    assert gen_agent.demonitor(cancelled) is True
    agent.stop()
    assert agent.wait_stopped(T)
    assert drain(watcher) == []
    late = agent.monitor(watcher)
    assert watcher.get(timeout=T) == ("gen_agent", "down", "a", late,
                                      ("agent_terminated", "shutdown"))


def test_a_killed_agent_is_agent_down_killed() -> None:
    agent = gen_agent.start_agent(Agent, name="a", backend=MockBackend, scripts=[])
    watcher: queue.Queue[Any] = queue.Queue()
    gen_agent.monitor("a", watcher)
    current_system()._kill(agent._handle)
    assert watcher.get(timeout=T).reason == ("agent_down", "killed")


def test_stream_events_are_typed_records() -> None:
    gen_agent.start_agent(Agent, name="a", backend=MockBackend, scripts=[mock.text_turn("hi")])
    inbox: queue.Queue[Any] = queue.Queue()
    events: queue.Queue[Any] = queue.Queue()
    ref = gen_agent.tell_with_completion("a", "x", inbox, stream_to=events)
    inbox.get(timeout=T)
    relayed = drain(events)
    assert relayed and all(isinstance(m, StreamEvent) for m in relayed)
    assert relayed[0][:4] == ("gen_agent", "event", "a", ref)
    assert relayed[0].event.kind == relayed[0][4].kind


def test_down_reason_classifies_exit_reasons() -> None:
    assert down_reason("normal") == ("agent_terminated", "normal")
    assert down_reason("shutdown") == ("agent_terminated", "shutdown")
    assert down_reason("killed") == ("agent_down", "killed")


def test_monitor_refuses_what_it_cannot_deliver_to() -> None:
    gen_agent.start_agent(Agent, name="a", backend=MockBackend, scripts=[])
    with pytest.raises(TypeError, match="monitor: recipient must be"):
        gen_agent.monitor("a", 42)

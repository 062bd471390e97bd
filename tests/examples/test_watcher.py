"""The Watcher recipe (docs/examples/watcher.py, contract §10)."""

from __future__ import annotations

import queue

import pytest

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import wait_until_idle

from ._loader import load_example

watcher = load_example("watcher")

E1, E2, E3 = (("file_changed", f"m{i}.py") for i in (1, 2, 3))


def _start(*scripts, **opts) -> queue.Queue:
    outcomes: queue.Queue = queue.Queue()
    gen_agent.start_agent(watcher.Watcher, name="w", backend=MockBackend,
                          backend_opts={"scripts": list(scripts)}, report_to=outcomes, **opts)
    return outcomes


def _text(prompt: str) -> list:
    return mock.text_turn(f"re: {prompt}")


def test_it_starts_idle_and_only_interesting_events_become_turns() -> None:
    outcomes = _start(_text, _text)
    for event in (("file_changed", "notes.txt"), ("heartbeat",), E1, ("alert", "disk")):
        gen_agent.notify_ack("w", event)
    assert [outcomes.get(timeout=5)[0] for _ in range(2)] == [E1, ("alert", "disk")]
    wait_until_idle("w")
    assert MockBackend.history("w") == [watcher.prompt_for(E1),
                                        watcher.prompt_for(("alert", "disk"))]
    state = gen_agent.status("w").agent_state
    assert [event for event, _ in state.actions] == [E1, ("alert", "disk")]
    assert state.pending == () and state.failures == ()


def test_notify_ack_returns_on_admission_not_on_completion() -> None:
    gate = mock.gate(_text(watcher.prompt_for(E1)))
    outcomes = _start(gate, _text)
    gen_agent.notify_ack("w", E1)        # handled: its turn started, not finished
    gate.wait_blocked(5)
    gen_agent.notify_ack("w", E2)        # busy: buffered behind the turn
    assert outcomes.empty()
    gate.release()
    assert [outcomes.get(timeout=5)[0] for _ in range(2)] == [E1, E2]


def test_a_direct_prompt_is_never_attributed_to_an_event() -> None:
    gate = mock.gate(mock.text_turn("first"))
    outcomes = _start(gate, mock.text_turn("direct"), mock.text_turn("second"))
    gen_agent.notify_ack("w", E1)
    gate.wait_blocked(5)
    ref = gen_agent.tell("w", "What changed today?")            # queued first
    gen_agent.notify_ack("w", E2)                               # buffered, queued later
    gate.release()
    assert [outcomes.get(timeout=5) for _ in range(3)] == [
        (E1, ("ok", "first")), (None, ("ok", "direct")), (E2, ("ok", "second"))]
    assert gen_agent.poll("w", ref).response.text == "direct"


def test_a_failed_turn_records_the_originating_event() -> None:
    outcomes = _start(mock.error_turn("model_down"))
    gen_agent.notify_ack("w", E1)
    assert outcomes.get(timeout=5) == (E1, ("error", "model_down"))
    wait_until_idle("w")
    assert gen_agent.status("w").agent_state.failures == ((E1, "model_down"),)


def test_a_rejected_generated_prompt_is_blamed_on_the_newest_pending_event() -> None:
    gate = mock.gate(mock.text_turn("one"))
    outcomes = _start(gate, mock.text_turn("two"), max_pending_prompts=1)
    gen_agent.notify_ack("w", E1)
    gate.wait_blocked(5)
    gen_agent.notify_ack("w", E2)        # after the turn: queued (the one free slot)
    gen_agent.notify_ack("w", E3)        # after the turn: the queue is full
    gate.release()

    seen = [outcomes.get(timeout=5) for _ in range(3)]
    assert seen[0] == (E1, ("ok", "one"))
    assert seen[1][0] == E3 and seen[1][1][1][0] == "overloaded"
    assert seen[2] == (E2, ("ok", "two"))
    wait_until_idle("w")
    state = gen_agent.status("w").agent_state
    assert [event for event, _ in state.failures] == [E3] and state.pending == ()


def test_the_notification_byte_limit_rejects_an_event_before_it_reaches_the_state() -> None:
    gate = mock.gate(mock.text_turn("one"))
    outcomes = _start(gate, _text, max_pending_notification_bytes=256)
    gen_agent.notify_ack("w", E1)
    gate.wait_blocked(5)
    huge = ("alert", "x" * 4096)
    with pytest.raises(gen_agent.TurnError) as rejected:
        gen_agent.notify_ack("w", huge)
    assert rejected.value.reason[0] == "overloaded"
    gen_agent.notify_ack("w", E2)                               # a small one still fits
    gate.release()
    assert [outcomes.get(timeout=5)[0] for _ in range(2)] == [E1, E2]
    wait_until_idle("w")
    state = gen_agent.status("w").agent_state
    assert huge not in [event for event, _ in state.actions + state.failures]
    assert len(MockBackend.history("w")) == 2


def test_main_runs_on_the_mock_backend(capsys) -> None:
    watcher.main([])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" -> ")[0] for line in out] == [
        "('file_changed', 'app/server.py')", "('alert', 'disk 91% full')"]

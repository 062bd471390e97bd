"""Hibernation (issue 20; BEAM's `:hibernate`): an idle agent with `hibernate_after_ms` ends its
actor thread, keeps its state, session and queues, and the next message wakes it on a new
thread, in order, losing nothing. `GEN_AGENT_HIBERNATE_AFTER_MS` sets the default (CI runs the
server contract tests with it at 0)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest
from _agents import WAIT_S, Hold, start, text_events

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent._runtime.options import HIBERNATE_ENV, build_options
from gen_agent.backends import mock


class Counter(GenAgent):
    """State = how many responses it saw, and their texts in order."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": list(opts.get("scripts", []))}, []

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply([*state, response.text])


def _agent_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("AgentActor")]


def wait_hibernated(ref: gen_agent.AgentRef) -> None:
    """Wait (bounded) until `ref`'s agent has no actor thread."""
    deadline = time.monotonic() + WAIT_S
    pause = threading.Event()
    while ref._handle.actor_thread is not None or _agent_threads():
        assert time.monotonic() < deadline, "the agent never hibernated"
        pause.wait(0.001)


def test_an_idle_agent_hibernates_without_a_thread_and_keeps_its_state() -> None:
    ref = start(Counter, scripts=[mock.text_turn("one"), mock.text_turn("two")],
                hibernate_after_ms=0)

    wait_hibernated(ref)
    first = ref.ask("a", timeout=WAIT_S)
    wait_hibernated(ref)
    second = ref.ask("b", timeout=WAIT_S)
    wait_hibernated(ref)

    assert (first.text, second.text) == ("one", "two")
    assert ref.status(timeout=WAIT_S).agent_state == ["one", "two"]
    assert ref.is_alive()


def test_messages_sent_to_a_hibernated_agent_keep_their_order() -> None:
    texts = [f"t{i}" for i in range(20)]
    ref = start(Counter, scripts=[mock.text_turn(t) for t in texts], hibernate_after_ms=0)
    wait_hibernated(ref)
    completions: queue.SimpleQueue[Any] = queue.SimpleQueue()

    for text in texts:
        ref.tell_with_completion(text, completions, timeout=WAIT_S)
    done = [completions.get(timeout=WAIT_S) for _ in texts]

    assert len(done) == len(texts)
    assert ref.status(timeout=WAIT_S).agent_state == texts


def test_concurrent_senders_racing_the_hibernation_lose_nothing() -> None:
    # Every ask lands while the agent may be deciding to hibernate (after every message).
    per_sender, senders = 25, 4
    ref = start(Counter, scripts=[mock.text_turn("ok")] * (per_sender * senders),
                hibernate_after_ms=0)
    answers: list[str] = []
    lock = threading.Lock()

    def send() -> None:
        for _ in range(per_sender):
            text = ref.ask("x", timeout=WAIT_S).text
            with lock:
                answers.append(text)

    threads = [threading.Thread(target=send, name=f"sender-{i}") for i in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WAIT_S * 4)

    assert answers == ["ok"] * (per_sender * senders)
    assert len(ref.status(timeout=WAIT_S).agent_state) == per_sender * senders


def test_an_agent_does_not_hibernate_during_a_turn() -> None:
    with Hold(text_events("partial "), mock.text_turn("done")) as hold:
        ref = start(Counter, scripts=[hold], hibernate_after_ms=0)
        completions: queue.SimpleQueue[Any] = queue.SimpleQueue()
        ref.tell_with_completion("go", completions, timeout=WAIT_S)
        hold.wait_streaming()

        assert ref.status(timeout=WAIT_S).state == "processing"
        assert ref._handle.actor_thread is not None  # busy: the actor thread stays
    completions.get(timeout=WAIT_S)
    wait_hibernated(ref)
    assert ref.status(timeout=WAIT_S).agent_state == ["done"]


def test_a_hibernated_agent_stops_and_frees_its_name() -> None:
    ref = start(Counter, hibernate_after_ms=0)
    wait_hibernated(ref)

    gen_agent.stop("a")

    assert not ref.is_alive()
    assert gen_agent.whereis("a") is None
    assert _agent_threads() == []


def test_a_positive_idle_time_keeps_the_thread_until_it_passes() -> None:
    ref = start(Counter, scripts=[mock.text_turn("ok")], hibernate_after_ms=60_000)

    assert ref.ask("x", timeout=WAIT_S).text == "ok"

    assert ref._handle.actor_thread is not None  # a minute is far away
    gen_agent.stop("a")


def test_the_option_is_validated_and_the_environment_sets_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HIBERNATE_ENV, raising=False)
    assert build_options({}).hibernate_after_ms is None
    assert build_options({"hibernate_after_ms": 250}).hibernate_after_ms == 250
    assert build_options({"hibernate_after_ms": "infinity"}).hibernate_after_ms is None
    with pytest.raises(ValueError, match="hibernate_after_ms"):
        build_options({"hibernate_after_ms": -1})

    monkeypatch.setenv(HIBERNATE_ENV, "0")
    assert build_options({}).hibernate_after_ms == 0
    assert build_options({"hibernate_after_ms": 5}).hibernate_after_ms == 5
    monkeypatch.setenv(HIBERNATE_ENV, "soon")
    with pytest.raises(ValueError, match=HIBERNATE_ENV):
        build_options({})


def test_an_agent_that_hibernates_at_once_starts_and_stops_without_a_thread() -> None:
    threads_before = set(threading.enumerate())
    ref = start(Counter, scripts=[mock.text_turn("ok")], hibernate_after_ms=0)

    assert set(threading.enumerate()) == threads_before  # initialised in this thread
    assert ref._handle.hibernated
    assert gen_agent.current_name() is None  # this thread got its own identity back
    assert ref.ask("x", timeout=WAIT_S).text == "ok"
    wait_hibernated(ref)
    gen_agent.stop("a")  # runs the stop in this thread

    assert not ref.is_alive() and ref.wait_stopped(WAIT_S)
    assert gen_agent.current_name() is None
    assert _agent_threads() == []


def test_a_hibernated_agent_is_not_woken_by_its_watchdog_timer() -> None:
    # The agent's watchdog timer outlives its turns (issue 20); hibernating cancels it, so a
    # hibernated agent stays without a thread after the window has passed.
    ref = start(Counter, scripts=[mock.text_turn("one")], hibernate_after_ms=0, watchdog_ms=50)
    assert ref.ask("a", timeout=WAIT_S).text == "one"
    wait_hibernated(ref)
    actor = ref._handle.actor_ref.actor_inbox.actor
    hibernations = actor.hibernations

    threading.Event().wait(0.2)  # four watchdog windows

    assert ref._handle.hibernated and actor.hibernations == hibernations
    assert actor.gates.watchdog is None


def test_is_hibernated_reads_the_flag_without_waking_the_agent() -> None:
    gate = mock.gate(mock.text_turn("late"))
    ref = start(Counter, scripts=[gate], hibernate_after_ms=0)
    wait_hibernated(ref)
    assert ref.is_hibernated() is True
    assert ref.is_hibernated() is True  # asking did not wake it: no thread started
    assert _agent_threads() == []
    request = ref.tell("a")
    assert gate.wait_blocked(WAIT_S)
    assert ref.is_hibernated() is False  # a turn is running
    gate.release()
    deadline = time.monotonic() + WAIT_S
    while (polled := ref.poll(request, timeout=WAIT_S)).status == "pending":
        assert time.monotonic() < deadline, "the turn never completed"
        threading.Event().wait(0.001)
    assert polled.response is not None and polled.response.text == "late"
    wait_hibernated(ref)
    assert ref.is_hibernated() is True
    ref.stop()
    assert ref.is_hibernated() is False


def test_an_agent_without_hibernation_is_never_hibernated() -> None:
    ref = start(Counter, scripts=[mock.text_turn("one")], hibernate_after_ms="infinity")
    assert ref.ask("a", timeout=WAIT_S).text == "one"
    assert ref.is_hibernated() is False

"""The turn task's channel to its agent: ordering, coalesced wake-ups, and backpressure."""

from __future__ import annotations

import threading
from typing import Any

from _agents import Scripted

import gen_agent
from gen_agent._event import Event
from gen_agent._size import term_size

WAIT_S = 10.0


class _Handle:
    """Stands in for the agent handle: records wake-up messages."""

    closed = False

    def __init__(self) -> None:
        self.wakes: list[Any] = []

    def tell_unchecked(self, message: Any) -> None:
        self.wakes.append(message)


def test_pushes_coalesce_into_one_wake_up_until_the_consumer_clears_it() -> None:
    from gen_agent._runtime.turn import TurnChannel

    handle = _Handle()
    channel = TurnChannel(handle, 7, max_bytes=1_000_000, cancel_event=threading.Event())
    for i in range(5):
        channel.push(("e", i), 1)
    assert [m.task_id for m in handle.wakes] == [7]
    assert list(channel.items) == [("e", i) for i in range(5)]
    channel.scheduled = False  # what the agent does before draining
    channel.items.clear()
    channel.push(("e", 5), 1)
    assert len(handle.wakes) == 2


def test_a_cancelled_producer_waiting_for_room_is_released() -> None:
    from gen_agent._runtime.turn import TurnChannel

    cancel = threading.Event()
    channel = TurnChannel(_Handle(), 1, max_bytes=10, cancel_event=cancel)
    done = threading.Event()

    def produce() -> None:
        channel.push("big", 100)  # over the bound: waits for the consumer
        done.set()

    thread = threading.Thread(target=produce)
    thread.start()
    assert not done.wait(0.05)  # still waiting: nobody took anything (bounded check)
    cancel.set()
    channel.wake()
    assert done.wait(WAIT_S)
    thread.join(WAIT_S)


class _BigEvents:
    """A backend streaming `count` tool_result events of `size` bytes each, counting yields."""

    yielded = 0

    @classmethod
    def start_session(cls, opts: dict[str, Any]) -> None:
        return None

    @classmethod
    def terminate_session(cls, session: Any) -> None:
        return None

    @classmethod
    def prompt(cls, session: Any, prompt: str, context: Any) -> Any:
        def stream() -> Any:
            for i in range(40):
                cls.yielded = i + 1
                yield Event("tool_result", {"payload": "x" * 100_000})
            yield Event("result", {"text": "done"})

        return stream(), session


def test_a_stream_of_large_events_waits_for_a_busy_agent() -> None:
    # The stream_to recipient runs in the agent thread: blocking it makes the agent busy, so
    # the turn task must stop at about max_event_bytes_per_turn of queued events.
    first_relay, release = threading.Event(), threading.Event()
    relayed: list[Any] = []

    def recipient(message: Any) -> None:
        relayed.append(message)
        first_relay.set()
        release.wait(WAIT_S)

    completions: list[Any] = []
    got = threading.Event()

    def on_completion(message: Any) -> None:
        completions.append(message)
        got.set()

    agent = gen_agent.start_agent(Scripted, name="big", backend=_BigEvents,
                                  max_event_bytes_per_turn=300_000)
    agent.tell_with_completion("go", on_completion, stream_to=recipient)
    assert first_relay.wait(WAIT_S)
    size = term_size(Event("tool_result", {"payload": "x" * 100_000}))
    # The agent thread is blocked in the recipient, so it cannot take events: the producer
    # must come to wait on its channel with no more than the byte bound queued.
    actor = agent._handle.actor_ref._actor_weakref()  # type: ignore[union-attr]
    channel = actor.turn.channel
    with channel.cond:
        assert channel.cond.wait_for(lambda: channel.waiting, WAIT_S)
    assert _BigEvents.yielded <= 300_000 // size + 2
    release.set()
    assert got.wait(WAIT_S)
    outcome = completions[0][4]
    assert outcome[0] == "ok"
    coverage = outcome[1].event_coverage
    assert coverage.observed_events == 41
    assert coverage.retained_events + coverage.omitted_events == 41
    assert len(relayed) == 41

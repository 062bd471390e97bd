"""Tests for `gen_agent.stream` and `aio.stream`: a turn's events in order, then its outcome."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _agents import WAIT_S, CallLog, Hold, start, text_events

import gen_agent
from gen_agent import aio
from gen_agent._errors import AgentDown, CallTimeout, TurnError
from gen_agent._event import Event
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend


def run(coro: Any) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(WAIT_S * 4):
            return await coro
    return asyncio.run(bounded())


def _texts(events: list[Event]) -> list[str]:
    return [e.data["text"] for e in events if e.kind == "text"]


def test_stream_yields_every_event_in_order_then_the_response() -> None:
    start(scripts=[mock.text_turn(["a", "b", "c"], usage={"input_tokens": 3})])
    with gen_agent.stream("a", "go") as turn:
        events = list(turn)
        response = turn.response
    assert [e.kind for e in events] == ["text", "text", "text", "usage", "result"]
    assert _texts(events) == ["a", "b", "c"]
    assert response.text == "abc"
    assert response.prompt == "go"
    assert response.usage["input_tokens"] == 3
    assert turn.done


def test_response_without_iterating_reads_to_the_end() -> None:
    start(scripts=[mock.text_turn(["x", "y"])])
    with gen_agent.stream("a", "go") as turn:
        assert turn.response.text == "xy"


def test_a_backend_error_raises_turn_error_at_the_end_of_iteration() -> None:
    log = CallLog()
    start(scripts=[[*text_events("partial"), Event.new("error", {"reason": "overloaded"})]],
          log=log)
    seen: list[Event] = []
    with pytest.raises(TurnError) as info, gen_agent.stream("a", "go") as turn:
        seen.extend(turn)
    assert info.value.reason == "overloaded"
    assert _texts(seen) == ["partial"]
    assert log.of("handle_error") == [("handle_error", "overloaded")]


def test_an_interrupt_ends_the_stream_with_interrupted() -> None:
    hold = Hold(text_events("one"), text_events("two"))
    start(scripts=[hold])
    with hold, pytest.raises(TurnError) as info, gen_agent.stream("a", "go") as turn:
        for event in turn:
            assert event.data["text"] == "one"
            gen_agent.interrupt("a")
    assert info.value.reason == "interrupted"


def test_leaving_early_interrupts_the_turn_and_the_agent_serves_the_next_one() -> None:
    log = CallLog()
    hold = Hold(text_events("one"), mock.text_turn("two"))
    start(scripts=[hold, mock.text_turn("next")], log=log)
    with hold:
        with gen_agent.stream("a", "go") as turn:
            first = next(iter(turn))
        assert first.data["text"] == "one"
        log.wait_for(("handle_error", "interrupted"))
    assert gen_agent.ask("a", "again", timeout=WAIT_S).text == "next"


def test_leaving_early_without_interrupt_lets_the_turn_finish() -> None:
    log = CallLog()
    hold = Hold(text_events("one"), mock.text_turn("two"))
    start(scripts=[hold], log=log)
    with hold, gen_agent.stream("a", "go", interrupt_on_exit=False) as turn:
        next(iter(turn))
    log.wait_for(("handle_response", "go"))
    assert log.of("handle_error") == []


def test_an_agent_that_dies_ends_the_stream_with_agent_down() -> None:
    hold = Hold(text_events("one"), mock.text_turn("two"))
    start(scripts=[hold], shutdown_ms=0)
    with hold, pytest.raises(AgentDown) as info, gen_agent.stream("a", "go") as turn:
        for _event in turn:
            gen_agent.stop("a")
    assert info.value.reason == "killed"


def test_timeout_bounds_the_whole_turn() -> None:
    hold = Hold(text_events("one"), mock.text_turn("two"))
    start(scripts=[hold])
    with hold, pytest.raises(CallTimeout), gen_agent.stream("a", "go", timeout=0.2) as turn:
        list(turn)


class _Counting:
    """A script of `n` text events whose producer records how far it got."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.produced = 0
        self.finished = threading.Event()

    def __call__(self, prompt: str) -> Iterator[Event]:
        for i in range(self.n):
            self.produced = i + 1
            yield Event.new("text", {"text": f"{i},"})
        self.finished.set()
        yield Event.new("result", {})


# Events the turn task can be ahead of the reader: the stream's buffer, the channel's byte
# bound (1 KiB is a few dozen of these small events) and the one being pushed.
_MAX_AHEAD = 16 + 64


def test_a_slow_reader_holds_the_turn_back_not_the_agent() -> None:
    script = _Counting(5000)
    start(scripts=[script], max_event_bytes_per_turn=1024, max_events_per_turn=10_000)
    with gen_agent.stream("a", "go", max_buffered_events=16) as turn:
        events = iter(turn)
        texts = [next(events).data["text"]]
        # nobody reads now: without backpressure the task would run to the end
        assert not script.finished.wait(0.3), "the turn task ran on although nobody read"
        assert script.produced - len(texts) <= _MAX_AHEAD
        assert len(turn._buffer._items) <= 16  # type: ignore[union-attr]
        # the agent still answers while its turn is held back
        assert gen_agent.status("a", timeout=WAIT_S).state == "processing"
        for event in events:
            if event.kind == "text":
                texts.append(event.data["text"])
                assert script.produced - len(texts) <= _MAX_AHEAD
    assert texts == [f"{i}," for i in range(5000)]
    assert turn.response.text == "".join(texts)


# ---------------------------------------------------------------------- aio.stream
def test_aio_stream_yields_events_then_the_response() -> None:
    start(scripts=[mock.text_turn(["p", "q"])])

    async def main() -> tuple[list[Event], Any]:
        async with aio.stream("a", "go") as turn:
            events = [event async for event in turn]
            return events, await turn.response()

    events, response = run(main())
    assert _texts(events) == ["p", "q"]
    assert response.text == "pq"


def test_aio_stream_error_early_exit_and_slow_reader() -> None:
    log = CallLog()
    script = _Counting(3000)
    hold = Hold(text_events("one"), mock.text_turn("two"))
    start(scripts=[mock.error_turn("boom"), hold, script], log=log,
          max_event_bytes_per_turn=1024, max_events_per_turn=10_000)

    async def main() -> list[str]:
        with pytest.raises(TurnError) as info:
            async with aio.stream("a", "e") as turn:
                async for _event in turn:
                    pass
        assert info.value.reason == "boom"
        async with aio.stream("a", "early") as turn:
            async for _event in turn:
                break
        await asyncio.to_thread(log.wait_for, ("handle_error", "interrupted"))
        hold.release()
        texts: list[str] = []
        async with aio.stream("a", "slow", max_buffered_events=8) as turn:
            async for event in turn:
                if event.kind == "text":
                    texts.append(event.data["text"])
                    assert len(turn._buffer._items) <= 8  # type: ignore[union-attr]
                    if len(texts) % 500 == 0:
                        await asyncio.sleep(0.001)
        return texts

    texts = run(main())
    assert texts == [f"{i}," for i in range(3000)]
    assert MockBackend.history("a") == ["e", "early", "slow"]

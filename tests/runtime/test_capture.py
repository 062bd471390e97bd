"""Tests for `gen_agent._runtime.capture`: compact retention and the lossless budget (§4.6)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import gen_agent
from gen_agent._event import Event
from gen_agent._response import EventCoverage, Omission
from gen_agent._runtime.capture import Capture, LosslessBudget
from gen_agent._size import term_size
from gen_agent._status import CaptureOverflow
from gen_agent.backends.mock import MockBackend


def _text(t: str) -> Event:
    return Event.new("text", {"text": t})


def test_retains_everything_within_bounds() -> None:
    events = [_text("a"), _text("b"), Event.new("result", {"text": "ab"})]
    capture = Capture(10, 10_000)

    for event in events:
        capture.add(event, term_size(event))

    assert capture.observed == 3
    assert capture.events == events
    assert capture.retained_bytes == sum(term_size(e) for e in events)
    assert capture.omitted == 0
    assert capture.first_omission is None


def test_count_bound_omits_and_records_the_first_omission() -> None:
    capture = Capture(2, 10_000)
    events = [_text("a"), _text("b"), Event.new("usage", {"input_tokens": 1}), _text("c")]

    for event in events:
        capture.add(event, term_size(event))

    assert capture.events == events[:2]
    assert capture.coverage() == EventCoverage(
        mode="compact",
        observed_events=4,
        retained_events=2,
        omitted_events=2,
        retained_bytes=term_size(events[0]) + term_size(events[1]),
        first_omission=Omission("events", "usage"),
    )
    # The omitted usage event still counts.
    assert capture.usage == {"input_tokens": 1}


def test_retained_list_is_a_prefix_even_for_small_later_events() -> None:
    big = _text("x" * 500)
    small = _text("y")
    terminal = Event.new("result", {})
    capture = Capture(100, term_size(small) + term_size(terminal) + 10)

    for event in (small, big, small, terminal):
        capture.add(event, term_size(event))

    # The later small event and the terminal would fit by size, but an omission came first.
    assert capture.events == [small]
    assert capture.omitted == 3
    assert capture.first_omission == Omission("bytes", "text")
    assert capture.terminal is terminal
    assert capture.response(duration_ms=0).text == "y" + "x" * 500 + "y"


def test_an_event_exactly_filling_the_byte_bound_is_retained() -> None:
    event = _text("exact")
    size = term_size(event)
    capture = Capture(10, size)

    capture.add(event, size)
    capture.add(_text(""), term_size(_text("")))

    assert capture.events == [event]
    assert capture.retained_bytes == size
    assert capture.first_omission == Omission("bytes", "text")


def test_uses_the_size_given_by_the_caller() -> None:
    capture = Capture(10, 100)

    capture.add(_text("tiny"), 60)
    capture.add(_text("tiny"), 41)

    assert capture.retained_bytes == 60
    assert capture.first_omission == Omission("bytes", "text")


def test_zero_bounds_omit_everything() -> None:
    capture = Capture(0, 1_000)
    terminal = Event.new("result", {"text": "t", "session_id": "s"})

    capture.add(terminal, term_size(terminal))
    response = capture.response(duration_ms=4)

    assert response.events == []
    assert response.terminal is terminal
    assert response.text == "t"
    assert response.session_id == "s"
    assert response.event_coverage is not None
    assert response.event_coverage.first_omission == Omission("events", "result")


def test_terminal_is_the_first_terminal_added() -> None:
    first = Event.new("error", {"reason": "r"})
    capture = Capture(10, 10_000)

    capture.add(first, term_size(first))
    capture.add(Event.new("result", {}), 5)

    assert capture.terminal is first


def test_response_events_are_a_copy() -> None:
    capture = Capture(10, 10_000)
    capture.add(_text("a"), 10)

    response = capture.response(duration_ms=0)
    capture.add(_text("b"), 10)

    assert len(response.events) == 1


def test_response_tool_calls_come_from_retained_events_only() -> None:
    kept = Event.new("tool_use", {"name": "Read"})
    dropped = Event.new("tool_use", {"name": "Bash"})
    capture = Capture(1, 10_000)

    capture.add(kept, term_size(kept))
    capture.add(dropped, term_size(dropped))

    assert capture.response(duration_ms=0).tool_calls == [kept]


# --- LosslessBudget -------------------------------------------------------------------------


def test_the_stream_made_delta_keeps_parts_whole_only_within_the_byte_bound() -> None:
    # A turn of large tool results must not hold them all for its delta (§6.3's bound).
    def result(index: int, payload: str) -> Event:
        return Event.new("tool_result", {"tool_use_id": f"toolu_{index}", "content": payload})

    small, large = result(1, "x" * 100), result(2, "y" * 5_000)
    call = Event.new("tool_use", {"id": "toolu_3", "name": "read", "input": {"p": "z" * 900}})
    capture = Capture(100, 2_000)
    for event in [_text("a"), small, large, call, _text("b"),
                  Event.new("result", {"text": "ab"})]:
        capture.add(event, term_size(event))

    messages = capture.response(duration_ms=1, prompt="go").messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    kept, omitted = messages[2].content
    assert kept.content == "x" * 100 and kept.raw is small.data  # whole: shares the data
    assert omitted.tool_call_id == "toolu_2" and omitted.content is None
    assert omitted.raw == {"tool_use_id": "toolu_2", "omitted_bytes": term_size(large)}
    # The call fits in what the large result left of the budget: it is kept whole.
    tool_call, text = messages[3].content
    assert tool_call.input == {"p": "z" * 900} and text.text == "b"
    assert messages[1].content[0].text == "a"


def test_lossless_admits_until_the_count_bound() -> None:
    budget = LosslessBudget(max_events=3, max_bytes=1_000)

    assert [budget.admit("text", 10) for _ in range(3)] == [None, None, None]
    overflow = budget.admit("tool_use", 7)

    assert overflow == CaptureOverflow(
        limit="events",
        max_events=3,
        max_bytes=1_000,
        retained_events=3,
        retained_bytes=30,
        rejected_event_kind="tool_use",
        rejected_event_bytes=7,
    )


def test_lossless_admits_until_the_byte_bound() -> None:
    budget = LosslessBudget(max_events=100, max_bytes=100)

    assert budget.admit("text", 60) is None
    assert budget.admit("text", 40) is None  # exactly fills the bound
    overflow = budget.admit("usage", 1)

    assert overflow == CaptureOverflow(
        limit="bytes",
        max_events=100,
        max_bytes=100,
        retained_events=2,
        retained_bytes=100,
        rejected_event_kind="usage",
        rejected_event_bytes=1,
    )


def test_lossless_rejected_event_is_not_counted() -> None:
    budget = LosslessBudget(max_events=10, max_bytes=50)

    assert budget.admit("text", 30) is None
    assert budget.admit("tool_result", 30) is not None
    assert (budget.retained_events, budget.retained_bytes) == (1, 30)
    assert budget.admit("text", 20) is None


def test_lossless_count_bound_is_checked_before_bytes() -> None:
    budget = LosslessBudget(max_events=0, max_bytes=0)

    overflow = budget.admit("result", 10)

    assert overflow is not None
    assert overflow.limit == "events"
    assert overflow.retained_events == 0
    assert overflow.retained_bytes == 0


class _Tools(gen_agent.GenAgent):
    def init_agent(self, opts: dict) -> Any:
        return {"scripts": [opts["turn"]]}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)


def _ask_traced(turn: Any, **opts: Any) -> tuple[Any, int]:
    """Run one turn of `turn` on a fresh agent; its Response and the peak of live Python
    allocations (bytes) while it ran."""
    gen_agent.start_agent(_Tools, name="traced", backend=MockBackend, turn=turn, **opts)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        response = gen_agent.ask("traced", "go", timeout=30)
        return response, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_turn_of_large_tool_results_holds_about_its_byte_bound_not_all_of_them() -> None:
    # 40 fresh 50 KB results (2 MB) under a 64 KiB bound: retention, the delta and the
    # channel's backpressure each hold at most about the bound at once.
    count, payload_bytes, bound = 40, 50_000, 64 * 1024

    def turn(prompt: str) -> Iterator[Event]:
        for index in range(count):
            yield Event.new("tool_result", {"tool_use_id": f"t{index}",
                                            "content": "x" * payload_bytes})
        yield Event.new("result", {"text": "done"})

    response, peak = _ask_traced(turn, max_event_bytes_per_turn=bound)
    results = response.messages[1].content
    assert len(results) == count
    assert results[0].content == "x" * payload_bytes  # the first fits: kept whole
    assert results[-1].content is None and results[-1].raw["omitted_bytes"] > payload_bytes
    assert peak < 6 * bound + 256 * 1024, peak  # holding them all would be > 2,000,000


def test_a_turn_of_many_text_deltas_keeps_their_strings_not_their_events() -> None:
    # The delta is cut from the text accumulator's chunks: a capture must not keep one
    # (kind, data) entry per text event (50,000 of them would hold over 10 MB).
    count = 50_000

    def turn(prompt: str) -> Iterator[Event]:
        for _ in range(count):
            yield Event.new("text", {"text": "x"})
        yield Event.new("result", {})

    response, peak = _ask_traced(turn)
    assert response.text == "x" * count
    assert [part.text for part in response.messages[1].content] == ["x" * count]
    assert peak < 4_000_000, peak

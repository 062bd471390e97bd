"""Lossless event retention (contract §4.6, §3.6, §4.18): a turn that hits a capture bound
fails with ("event_capture_overflow", CaptureOverflow); the overflowing event is neither
passed to `handle_stream_event` nor relayed; compact mode, by contrast, relays everything.
"""

from __future__ import annotations

import functools
import queue
import threading
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import CaptureOverflow, Event, NoReply, TurnError, term_size
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import TURN_ERROR, TelemetryRecorder

T = 5.0  # seconds: the bound of every wait in this file
NAME = "lossless"
DEFAULT_BYTES = 1_048_576


class Streamer(gen_agent.GenAgent):
    """State is the tuple of event kinds/texts seen by handle_stream_event; logs the state
    and reason handle_error gets."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log: list[Any] = opts.get("log", [])
        return {"scripts": opts["scripts"]}, ()

    def handle_stream_event(self, event: Event, state: Any) -> Any:
        return (*state, event.data.get("text", event.kind))

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.log.append(("handle_response", state))
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append(("handle_error", reason, state))
        return NoReply(state)


start = functools.partial(agents.start, Streamer, NAME, event_retention="lossless")


def text(value: str) -> Event:
    return Event.new("text", {"text": value})


def result(value: str) -> Event:
    return Event.new("result", {"text": value})


def test_overflow_of_the_event_count() -> None:
    log: list[Any] = []
    a, b, c = text("a"), text("b"), text("c")
    inbox: queue.Queue[Any] = queue.Queue()
    with TelemetryRecorder([TURN_ERROR]) as rec:
        start([[a, b, c, result("abc")]], log=log, max_events_per_turn=2)
        ref = gen_agent.tell_with_completion(NAME, "p", inbox, stream_to=inbox)
        messages = [inbox.get(timeout=T) for _ in range(3)]
    expected = ("event_capture_overflow", CaptureOverflow(
        limit="events", max_events=2, max_bytes=DEFAULT_BYTES, retained_events=2,
        retained_bytes=term_size(a) + term_size(b), rejected_event_kind="text",
        rejected_event_bytes=term_size(c)))
    assert messages == [("gen_agent", "event", NAME, ref, a),
                        ("gen_agent", "event", NAME, ref, b),
                        ("gen_agent", "completion", NAME, ref, ("error", expected))]
    # the threaded stream state (without the rejected event) is what handle_error sees
    assert log == [("handle_error", expected, ("a", "b"))]
    assert gen_agent.status(NAME).agent_state == ("a", "b")
    assert rec.named(TURN_ERROR)[0].metadata["reason_kind"] == "backend_or_callback_error"
    gen_agent.status(NAME)
    assert inbox.empty()


def test_overflow_of_the_event_bytes() -> None:
    log: list[Any] = []
    small, big = text("small"), text("B" * 500)
    cap = term_size(small) + term_size(big) - 1
    start([[small, big, result("x")]], log=log, max_event_bytes_per_turn=cap)
    with pytest.raises(TurnError) as info:
        gen_agent.ask(NAME, "p", timeout=T)
    assert info.value.reason == ("event_capture_overflow", CaptureOverflow(
        limit="bytes", max_events=1_000, max_bytes=cap, retained_events=1,
        retained_bytes=term_size(small), rejected_event_kind="text",
        rejected_event_bytes=term_size(big)))
    assert log == [("handle_error", info.value.reason, ("small",))]


def test_an_overflowing_terminal_event_fails_the_turn() -> None:
    a, final = text("a"), result("a")
    start([[a, final]], max_events_per_turn=1)
    with pytest.raises(TurnError) as info:
        gen_agent.ask(NAME, "p", timeout=T)
    assert info.value.reason == ("event_capture_overflow", CaptureOverflow(
        limit="events", max_events=1, max_bytes=DEFAULT_BYTES, retained_events=1,
        retained_bytes=term_size(a), rejected_event_kind="result",
        rejected_event_bytes=term_size(final)))


def test_the_stream_is_closed_and_not_pulled_after_the_overflow() -> None:
    pulled: list[str] = []
    closed = threading.Event()

    def script(prompt: str) -> Any:
        try:
            for value in ("a", "b", "c", "d"):
                pulled.append(value)
                yield text(value)
            yield result("abcd")
        finally:
            closed.set()

    start([script], max_events_per_turn=2)
    with pytest.raises(TurnError):
        gen_agent.ask(NAME, "p", timeout=T)
    assert closed.wait(T)
    assert pulled == ["a", "b", "c"]


def test_a_turn_within_the_bounds_succeeds_with_exact_coverage() -> None:
    log: list[Any] = []
    events = [text("a"), text("b"), result("ab")]
    start([events], log=log, max_events_per_turn=3)
    response = gen_agent.ask(NAME, "p", timeout=T)
    assert response.text == "ab"
    assert response.events == events
    assert response.event_coverage.mode == "exact"
    assert log == [("handle_response", ("a", "b", "ab"))]


def test_compact_mode_relays_and_streams_omitted_events_too() -> None:
    log: list[Any] = []
    events = [text("a"), text("b"), result("ab")]
    inbox: queue.Queue[Any] = queue.Queue()
    gen_agent.start_agent(Streamer, name=NAME, backend=MockBackend, scripts=[events],
                          log=log, max_events_per_turn=1)
    ref = gen_agent.tell_with_completion(NAME, "p", inbox, stream_to=inbox)
    messages = [inbox.get(timeout=T) for _ in range(4)]
    assert messages[:3] == [("gen_agent", "event", NAME, ref, e) for e in events]
    response = messages[3][4][1]
    assert (response.text, response.event_coverage.mode) == ("ab", "compact")
    assert response.events == events[:1]
    assert log == [("handle_response", ("a", "b", "ab"))]

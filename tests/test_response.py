"""Tests for `gen_agent._response`: text assembly (§6.2), usage, terminal, coverage (§6.3) and
the Python extras of `Response` (python_api.md "Values")."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gen_agent._event import Event
from gen_agent._response import EventCoverage, Omission, Response, TextAccumulator
from gen_agent._runtime.capture import Capture
from gen_agent._size import term_size

DEFAULT_MAX_EVENTS = 1000
DEFAULT_MAX_BYTES = 1_048_576


def text(t: str, boundary: bool = False) -> Event:
    data: dict[str, Any] = {"text": t}
    if boundary:
        data["message_boundary"] = True
    return Event.new("text", data)


def result(**data: Any) -> Event:
    return Event.new("result", data)


def usage(**data: Any) -> Event:
    return Event.new("usage", data)


# The seven worked examples of contract §6.2: events -> (text, final_message).
SECTION_6_2_EXAMPLES = [
    pytest.param([text("hel"), text("lo"), result(text="hello")], "hello", "hello", id="result"),
    pytest.param([text("hel"), text("lo"), result()], "hello", "hello", id="deltas"),
    pytest.param(
        [text("first ", True), text("message"), text("second", True), result()],
        "first message\n\nsecond",
        "second",
        id="two-messages",
    ),
    pytest.param([text("p1\n\np2", True), result()], "p1\n\np2", "p1\n\np2", id="blank-lines"),
    pytest.param([text("draft", True), result(text="final")], "final", "final", id="draft"),
    pytest.param([text("first"), text("second", True), result(text="")], "", "", id="empty"),
    pytest.param(
        [text("first"), text("second", True), usage(input_tokens=1), result()],
        "first\n\nsecond",
        "second",
        id="usage-between",
    ),
]


@pytest.mark.parametrize(("events", "expected_text", "expected_final"), SECTION_6_2_EXAMPLES)
def test_section_6_2_examples_from_events(
    events: list[Event], expected_text: str, expected_final: str
) -> None:
    response = Response.from_events(events)

    assert response.text == expected_text
    assert response.final_message == expected_final


@pytest.mark.parametrize(("events", "expected_text", "expected_final"), SECTION_6_2_EXAMPLES)
def test_section_6_2_examples_through_capture(
    events: list[Event], expected_text: str, expected_final: str
) -> None:
    capture = Capture(DEFAULT_MAX_EVENTS, DEFAULT_MAX_BYTES)
    for event in events:
        capture.add(event, term_size(event))

    response = capture.response(duration_ms=3)

    assert response.text == expected_text
    assert response.final_message == expected_final


def test_first_message_gets_no_leading_separator() -> None:
    response = Response.from_events([text("only", True), text(" more"), result()])

    assert response.text == "only more"
    assert response.final_message == "only more"


def test_empty_boundary_text_adds_no_separator_but_starts_a_final_message() -> None:
    response = Response.from_events([text("a"), text("", True), text("b"), result()])

    assert response.text == "ab"
    assert response.final_message == "b"


def test_boundary_after_only_empty_text_adds_no_separator() -> None:
    response = Response.from_events([text(""), text("x", True), result()])

    assert response.text == "x"


def test_missing_or_non_str_text_counts_as_empty() -> None:
    events = [
        Event.new("text", {}),
        Event.new("text", {"text": None}),
        Event.new("text", {"text": 42}),
        text("z"),
        result(),
    ]

    assert Response.from_events(events).text == "z"


def test_boundary_flag_uses_elixir_truthiness() -> None:
    events = [
        text("a"),
        Event.new("text", {"text": "b", "message_boundary": False}),
        Event.new("text", {"text": "c", "message_boundary": None}),
        Event.new("text", {"text": "d", "message_boundary": "yes"}),
        result(),
    ]

    response = Response.from_events(events)

    assert response.text == "abc\n\nd"
    assert response.final_message == "d"


def test_result_text_that_is_not_a_str_falls_back_to_deltas() -> None:
    response = Response.from_events([text("de"), text("ltas"), result(text=None)])

    assert response.text == "deltas"
    assert response.final_message == "deltas"


def test_error_terminal_takes_text_from_deltas() -> None:
    events = [text("one", True), text("two", True), Event.new("error", {"text": "ignored"})]

    response = Response.from_events(events)

    assert response.text == "one\n\ntwo"
    assert response.final_message == "two"
    assert response.terminal is events[-1]


def test_no_terminal_assembles_deltas() -> None:
    response = Response.from_events([text("a"), text("b")])

    assert response.terminal is None
    assert response.text == "ab"
    assert response.final_message == "ab"
    assert response.model is None
    assert response.extra == {}


def test_text_events_after_the_terminal_still_count_in_from_events() -> None:
    response = Response.from_events([text("a"), result(), text("b")])

    assert response.text == "ab"


def test_from_events_defaults() -> None:
    events = [text("hi"), result(text="hi")]

    response = Response.from_events(events)

    assert response.prompt is None
    assert response.metadata == {}
    assert response.duration_ms == 0
    assert response.session_id is None
    assert response.usage is None
    assert response.events == events
    assert response.terminal is events[1]
    assert response.event_coverage == EventCoverage(
        mode="exact",
        observed_events=2,
        retained_events=2,
        omitted_events=0,
        retained_bytes=term_size(events[0]) + term_size(events[1]),
        first_omission=None,
    )


def test_from_events_does_not_read_session_id_from_the_result() -> None:
    response = Response.from_events([result(text="x", session_id="s-9")])

    assert response.session_id is None
    assert "session_id" not in response.extra


def test_from_events_options() -> None:
    coverage = EventCoverage(
        mode="compact",
        observed_events=5,
        retained_events=1,
        omitted_events=4,
        retained_bytes=10,
        first_omission=Omission("events", "text"),
    )

    response = Response.from_events(
        [result(text="x")], duration_ms=250, session_id="s-1", event_coverage=coverage
    )

    assert response.duration_ms == 250
    assert response.session_id == "s-1"
    assert response.event_coverage is coverage


def test_from_events_accepts_any_iterable() -> None:
    response = Response.from_events(iter([text("a"), result()]))

    assert response.text == "a"
    assert len(response.events) == 2
    assert response.event_coverage is not None
    assert response.event_coverage.observed_events == 2


def test_from_empty_events() -> None:
    response = Response.from_events([])

    assert response.text == ""
    assert response.final_message == ""
    assert response.events == []
    assert response.event_coverage == EventCoverage(
        mode="exact", observed_events=0, retained_events=0, omitted_events=0, retained_bytes=0
    )


def test_usage_is_the_last_usage_event() -> None:
    events = [usage(input_tokens=1), text("a"), usage(input_tokens=2, output_tokens=5), result()]

    assert Response.from_events(events).usage == {"input_tokens": 2, "output_tokens": 5}


def test_terminal_is_the_first_terminal_event() -> None:
    first = result(text="first", model="m1")
    events = [first, Event.new("error", {"reason": "late"}), result(text="second")]

    response = Response.from_events(events)

    assert response.terminal is first
    assert response.text == "first"
    assert response.model == "m1"


def test_model_comes_from_an_error_terminal_too() -> None:
    response = Response.from_events([Event.new("error", {"reason": "boom", "model": "m2"})])

    assert response.model == "m2"
    assert response.extra == {}


def test_extras_are_surfaced_from_the_terminal() -> None:
    terminal = result(
        text="done",
        session_id="s-1",
        model="claude-x",
        stop_reason="end_turn",
        num_turns=3,
        duration_api_ms=1200,
        cost_usd=0.0125,
        is_error=False,
        subtype="success",
        provider="anthropic",
        provider_model="claude-x-2025",
    )

    response = Response.from_events([terminal])

    assert response.model == "claude-x"
    assert response.stop_reason == "end_turn"
    assert response.num_turns == 3
    assert response.duration_api_ms == 1200
    assert response.cost_usd == 0.0125
    assert response.is_error is False
    assert response.subtype == "success"
    assert response.provider == "anthropic"
    assert response.provider_model == "claude-x-2025"
    assert response.extra == {}


def test_extra_keeps_every_unmodeled_terminal_key() -> None:
    raw = {"type": "result", "nested": {"a": [1, 2]}}
    terminal = result(text="t", reason="ignored", raw=raw, permission_denials=[], usage_total=9)

    response = Response.from_events([terminal])

    assert response.extra == {"raw": raw, "permission_denials": [], "usage_total": 9}
    assert response.extra["raw"] is raw


def test_terminal_data_is_read_with_string_keys_only() -> None:
    response = Response.from_events([Event.new("result", {"text": "s", "model": "m"})])

    assert response.text == "s"
    assert response.model == "m"


def test_extras_default_to_none_without_a_terminal_report() -> None:
    response = Response.from_events([result(text="x")])

    for field in (
        "stop_reason",
        "num_turns",
        "duration_api_ms",
        "cost_usd",
        "is_error",
        "subtype",
        "provider",
        "provider_model",
        "model",
    ):
        assert getattr(response, field) is None, field


def test_tool_calls_are_the_retained_tool_use_events_in_order() -> None:
    first = Event.new("tool_use", {"name": "Read", "id": 1})
    second = Event.new("tool_use", {"name": "Bash", "id": 2})
    events = [text("a"), first, Event.new("tool_result", {"id": 1}), second, result()]

    assert Response.from_events(events).tool_calls == [first, second]


def test_response_defaults() -> None:
    response = Response()

    assert response.prompt is None
    assert response.text == ""
    assert response.final_message is None
    assert response.events == []
    assert response.terminal is None
    assert response.event_coverage is None
    assert response.usage is None
    assert response.duration_ms == 0
    assert response.metadata == {}
    assert response.session_id is None
    assert response.model is None
    assert response.tool_calls == []
    assert response.extra == {}
    assert Response().events is not response.events
    assert Response().metadata is not response.metadata


def test_response_is_frozen_and_keyword_only() -> None:
    response = Response(text="x")

    with pytest.raises(AttributeError):
        response.text = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Response("prompt")  # type: ignore[misc]


def test_response_round_trips_through_msgpack() -> None:
    response = Response.from_events(
        [text("a"), usage(input_tokens=1), result(text="a", model="m", extra_key=1)],
        duration_ms=5,
        session_id="s",
    )

    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(response), type=Response)

    assert decoded == response


# --- §6.3 worked examples, through the runtime capture -----------------------------------


def _capture(events: list[Event]) -> Capture:
    capture = Capture(DEFAULT_MAX_EVENTS, DEFAULT_MAX_BYTES)
    for event in events:
        capture.add(event, term_size(event))
    return capture


@pytest.mark.parametrize("result_data", [{}, {"text": "x" * 1500}], ids=["no-text", "text"])
def test_section_6_3_many_text_events(result_data: dict[str, Any]) -> None:
    terminal = Event.new("result", {"session_id": "s-42", **result_data})
    last_usage = usage(input_tokens=10, output_tokens=1500)
    events = [text("x") for _ in range(1500)] + [last_usage, terminal]

    response = _capture(events).response(duration_ms=17, prompt="go")

    assert response.event_coverage == EventCoverage(
        mode="compact",
        observed_events=1502,
        retained_events=1000,
        omitted_events=502,
        retained_bytes=sum(term_size(e) for e in events[:1000]),
        first_omission=Omission(limit="events", event_kind="text"),
    )
    assert response.events == events[:1000]
    # No boundary anywhere: without result text the deltas concatenate directly.
    assert response.text == "x" * 1500
    assert response.final_message == "x" * 1500
    assert response.usage == {"input_tokens": 10, "output_tokens": 1500}
    assert response.terminal is terminal
    assert response.session_id == "s-42"
    assert response.duration_ms == 17
    assert response.prompt == "go"


def test_section_6_3_large_tool_results() -> None:
    payload = "r" * 65_536
    events = [Event.new("tool_result", {"content": payload}) for _ in range(17)]
    terminal = result(text="done", session_id="s-7")
    events.append(terminal)

    response = _capture(events).response(duration_ms=1)
    coverage = response.event_coverage

    assert coverage is not None
    assert coverage.mode == "compact"
    assert coverage.first_omission == Omission(limit="bytes", event_kind="tool_result")
    assert coverage.observed_events == 18
    assert coverage.retained_bytes <= DEFAULT_MAX_BYTES
    assert coverage.retained_events == len(response.events)
    assert coverage.retained_events + coverage.omitted_events == 18
    assert response.terminal is terminal
    assert response.text == "done"
    assert response.session_id == "s-7"


def test_capture_session_id_only_from_a_result_terminal() -> None:
    response = _capture([Event.new("error", {"reason": "x", "session_id": "s"})]).response(
        duration_ms=0
    )

    assert response.session_id is None


def test_capture_without_omission_is_exact() -> None:
    events = [text("a"), usage(input_tokens=1), result(text="a")]

    coverage = _capture(events).coverage()

    assert coverage.mode == "exact"
    assert coverage.first_omission is None
    assert coverage.observed_events == coverage.retained_events == 3


# --- TextAccumulator used directly ---------------------------------------------------------


def test_text_accumulator_direct_use() -> None:
    acc = TextAccumulator()
    acc.add({"text": "one"})
    acc.add({"text": "two", "message_boundary": True})
    acc.add({"text": "!"})

    assert acc.saw_boundary
    assert acc.assembled() == "one\n\ntwo!"
    assert acc.text(None) == "one\n\ntwo!"
    assert acc.final_message(None) == "two!"
    assert acc.text(result(text="r")) == "r"
    assert acc.final_message(result(text="r")) == "r"


def test_text_accumulator_reads_stay_correct_after_more_input() -> None:
    acc = TextAccumulator()
    acc.add({"text": "a"})
    assert acc.text(None) == "a"

    acc.add({"text": "b"})

    assert acc.text(None) == "ab"


def test_text_accumulator_handles_a_million_deltas() -> None:
    acc = TextAccumulator()
    delta = {"text": "d"}
    for _ in range(1_000_000):
        acc.add(delta)

    assert len(acc.text(None)) == 1_000_000

"""Tests for `gen_agent._event`: construction guards, timestamps, terminal kinds (contract §5)."""

from __future__ import annotations

import msgspec
import pytest

from gen_agent._event import KINDS, TERMINAL_KINDS, Event, monotonic_ms


def test_new_stamps_monotonic_milliseconds() -> None:
    before = monotonic_ms()
    event = Event.new("text", {"text": "hi"})
    after = monotonic_ms()

    assert before <= event.timestamp <= after
    assert isinstance(event.timestamp, int)


def test_timestamps_never_go_backwards() -> None:
    stamps = [Event.new("text").timestamp for _ in range(200)]

    assert stamps == sorted(stamps)


def test_new_defaults_data_to_a_fresh_empty_dict() -> None:
    first = Event.new("session")
    second = Event.new("session")

    assert first.data == {}
    assert first.data is not second.data


def test_constructor_defaults_data_and_timestamp() -> None:
    before = monotonic_ms()
    event = Event("usage")

    assert event.data == {}
    assert event.timestamp >= before


def test_new_keeps_kind_and_data() -> None:
    data = {"text": "hello", "message_boundary": True}

    event = Event.new("text", data)

    assert event.kind == "text"
    assert event.data == {"text": "hello", "message_boundary": True}


@pytest.mark.parametrize("kind", [None, 1, b"text", ("text",)])
def test_non_str_kind_raises_type_error(kind: object) -> None:
    with pytest.raises(TypeError):
        Event.new(kind, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Event(kind)  # type: ignore[arg-type]


@pytest.mark.parametrize("data", [[], [("text", "x")], "text", 1, ("a", 1)])
def test_non_dict_data_raises_type_error(data: object) -> None:
    with pytest.raises(TypeError):
        Event.new("text", data)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Event("text", data)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["result", "error"])
def test_result_and_error_are_terminal(kind: str) -> None:
    assert Event.new(kind).is_terminal


@pytest.mark.parametrize(
    "kind", ["session", "text", "tool_use", "tool_result", "usage", "custom", "Result", ""]
)
def test_other_kinds_are_not_terminal(kind: str) -> None:
    assert not Event.new(kind).is_terminal


def test_kind_constants() -> None:
    assert sorted(TERMINAL_KINDS) == ["error", "result"]
    assert set(KINDS) >= TERMINAL_KINDS


def test_event_is_frozen() -> None:
    event = Event.new("text", {"text": "x"})

    with pytest.raises(AttributeError):
        event.kind = "usage"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        event.data = {}  # type: ignore[misc]
    assert event.kind == "text"


def test_event_compares_by_value() -> None:
    event = Event("result", {"text": "a"}, 5)

    assert event == Event("result", {"text": "a"}, 5)
    assert event != Event("result", {"text": "a"}, 6)


def test_event_round_trips_through_msgpack() -> None:
    event = Event.new("result", {"text": "done", "session_id": "s-1"})

    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(event), type=Event)

    assert decoded == event

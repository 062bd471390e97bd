"""Properties of text assembly, usage and coverage (contract §6.2, §6.3, §4.6)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gen_agent._event import Event
from gen_agent._response import Response
from gen_agent._runtime.capture import Capture
from gen_agent._size import term_size

texts = st.text(alphabet="ab\n ", max_size=4)

text_events = st.builds(
    lambda t, boundary: Event(
        "text", {"text": t, "message_boundary": True} if boundary else {"text": t}, 0
    ),
    texts,
    st.booleans(),
)
usage_events = st.builds(
    lambda n: Event("usage", {"input_tokens": n, "output_tokens": n * 2}, 0),
    st.integers(min_value=0, max_value=10_000),
)
other_events = st.builds(
    lambda kind, n: Event(kind, {"payload": "p" * n}, 0),
    st.sampled_from(["session", "tool_use", "tool_result", "custom"]),
    st.integers(min_value=0, max_value=300),
)
body_events = st.lists(st.one_of(text_events, usage_events, other_events), max_size=40)


def _result_data() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "text": st.one_of(st.none(), texts),
            "session_id": st.sampled_from(["s-1", "s-2"]),
            "model": st.sampled_from(["m", None]),
            "raw": st.integers(min_value=-(2**63), max_value=2**64 - 1),
        },
    )


terminals = st.one_of(
    st.none(),
    st.builds(lambda data: Event("result", data, 0), _result_data()),
    st.builds(lambda: Event("error", {"reason": "boom"}, 0)),
)


@st.composite
def streams(draw: st.DrawFn) -> list[Event]:
    events = draw(body_events)
    terminal = draw(terminals)
    return events if terminal is None else [*events, terminal]


def reference_text(events: list[Event]) -> tuple[str, str]:
    """§6.2 written out plainly, independent of `TextAccumulator`: (text, final_message)."""
    chunks: list[str] = []
    final_chunks: list[str] = []
    seen_text = False
    saw_boundary = False
    for event in events:
        if event.kind != "text":
            continue
        t = event.data.get("text") or ""
        b = bool(event.data.get("message_boundary"))
        if b and seen_text and t != "":
            chunks.append("\n\n")
        chunks.append(t)
        final_chunks = [t] if b else [*final_chunks, t]
        seen_text = seen_text or t != ""
        saw_boundary = saw_boundary or b
    terminal = next((e for e in events if e.kind in ("result", "error")), None)
    assembled = "".join(chunks)
    if terminal is not None and terminal.kind == "result":
        result_text = terminal.data.get("text")
        if isinstance(result_text, str):
            return result_text, result_text
    if not saw_boundary:
        return assembled, assembled
    return assembled, "".join(final_chunks)


def _capture(events: list[Event], max_events: int, max_bytes: int) -> Capture:
    capture = Capture(max_events, max_bytes)
    for event in events:
        capture.add(event, term_size(event))
    return capture


@settings(max_examples=200)
@given(streams())
def test_text_matches_the_reference_rule(events: list[Event]) -> None:
    response = Response.from_events(events)

    assert (response.text, response.final_message) == reference_text(events)


@settings(max_examples=150)
@given(streams(), st.integers(min_value=0, max_value=50), st.integers(min_value=0, max_value=4000))
def test_capture_text_ignores_retention(
    events: list[Event], max_events: int, max_bytes: int
) -> None:
    response = _capture(events, max_events, max_bytes).response(duration_ms=0)

    assert (response.text, response.final_message) == reference_text(events)


@settings(max_examples=150)
@given(streams(), st.integers(min_value=0, max_value=50), st.integers(min_value=0, max_value=4000))
def test_usage_is_the_last_usage_event(
    events: list[Event], max_events: int, max_bytes: int
) -> None:
    usages = [e.data for e in events if e.kind == "usage"]
    expected = usages[-1] if usages else None

    assert Response.from_events(events).usage == expected
    assert _capture(events, max_events, max_bytes).response(duration_ms=0).usage == expected


@settings(max_examples=200)
@given(streams(), st.integers(min_value=0, max_value=50), st.integers(min_value=0, max_value=4000))
def test_coverage_counts_add_up(events: list[Event], max_events: int, max_bytes: int) -> None:
    response = _capture(events, max_events, max_bytes).response(duration_ms=0)
    coverage = response.event_coverage

    assert coverage is not None
    assert coverage.observed_events == len(events)
    assert coverage.observed_events == coverage.retained_events + coverage.omitted_events
    assert coverage.retained_events == len(response.events)
    assert coverage.retained_events <= max_events
    assert coverage.retained_bytes <= max_bytes
    assert coverage.retained_bytes == sum(term_size(e) for e in response.events)
    assert response.events == events[: coverage.retained_events]
    assert (coverage.mode == "compact") == (coverage.omitted_events > 0)
    assert (coverage.first_omission is None) == (coverage.omitted_events == 0)
    if coverage.first_omission is not None:
        assert coverage.first_omission.event_kind == events[coverage.retained_events].kind


@settings(max_examples=150)
@given(streams(), st.integers(min_value=0, max_value=1000))
def test_capture_equals_from_events_when_nothing_is_omitted(
    events: list[Event], duration_ms: int
) -> None:
    captured = _capture(events, len(events), sum(term_size(e) for e in events)).response(
        duration_ms=duration_ms
    )
    terminal = captured.terminal
    session_id = None
    if terminal is not None and terminal.kind == "result":
        session_id = terminal.data.get("session_id")

    expected = Response.from_events(events, duration_ms=duration_ms, session_id=session_id)

    assert captured == expected

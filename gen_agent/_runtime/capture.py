"""Per-turn event capture: compact retention (`Capture`) and the lossless admission check
(`LosslessBudget`), docs/pages/contract.md#s4-6 and #s6-3.

Private. `Capture` runs on the agent actor thread, once per event of the turn, so `add` is
kept to a few attribute operations; the caller (the turn task) computes each event's
`term_size` once and passes it along.
"""

from __future__ import annotations

from typing import Any, Literal

from gen_agent._conversation import omitted_data
from gen_agent._event import Event
from gen_agent._response import (
    EventCoverage,
    Omission,
    Response,
    TextAccumulator,
    _assemble,
    delta_stream,
)
from gen_agent._status import CaptureOverflow
from gen_agent.telemetry import ToolSpan

__all__ = ["Capture", "LosslessBudget", "tool_calls"]


class Capture:
    """One turn's event log, kept by the agent actor (compact retention,
    docs/pages/contract.md#s4-6).

    Every event is observed (counted, fed to the text accumulator, its usage and terminal
    remembered); it is retained only while both bounds hold and nothing was omitted yet, so
    the retained events are always a prefix of the stream.

    Attributes (read-only for callers):
        observed: events added so far (count).
        events: the retained prefix (list of `Event`).
        retained_bytes: `term_size` sum of `events` (bytes).
        omitted: events added but not retained (count).
        first_omission: the `Omission` of the first omitted event, or None.
        usage: data of the latest `"usage"` event, retained or not, or None.
        terminal: the first terminal event added, retained or not, or None.

    Not thread-safe: owned by the agent actor thread.
    """

    __slots__ = (
        "_delta_bytes",
        "_max_bytes",
        "_max_events",
        "_stream",
        "_text",
        "events",
        "first_omission",
        "observed",
        "omitted",
        "retained_bytes",
        "terminal",
        "usage",
    )

    def __init__(self, max_events: int, max_bytes: int) -> None:
        """Start an empty capture.

        Args:
            max_events: `max_events_per_turn`, the retained-event bound (count).
            max_bytes: `max_event_bytes_per_turn`, the retained-size bound (bytes).
        """
        self._max_events = max_events
        self._max_bytes = max_bytes
        # The marks a stream-made delta is cut from (conversation): `(kind, data, chunk,
        # chunk)` of its non-text events and, recorded by the accumulator, text boundaries.
        self._stream: list[tuple[str, Any, int, int]] = []
        self._text = TextAccumulator(self._stream)
        self._delta_bytes = 0  # term_size of the non-text events kept whole in _stream
        self.events: list[Event] = []
        self.observed = 0
        self.omitted = 0
        self.retained_bytes = 0
        self.first_omission: Omission | None = None
        self.usage: dict[str, Any] | None = None
        self.terminal: Event | None = None

    def add(self, event: Event, size: int) -> None:
        """Observe one event and retain it if it fits.

        Args:
            event: the next `Event` of the turn.
            size: `term_size(event)` in bytes, computed once by the caller.

        Returns:
            None.
        """
        self.observed += 1
        kind = event.kind
        if kind == "text":
            self._text.add(event.data)
        elif kind == "usage":
            self.usage = event.data
        elif (kind == "result" or kind == "error") and self.terminal is None:
            self.terminal = event
        elif kind == "tool_use" or kind == "tool_result" or kind.endswith(".thinking"):
            # The stream-made delta has a byte budget of its own (max_event_bytes_per_turn):
            # past it a part keeps its ids and size only, so a turn of huge tool results
            # stays within the retention bound (docs/pages/contract.md#s6-3) instead of holding them
            # all.
            at = len(self._text._chunks)
            if size <= self._max_bytes - self._delta_bytes:
                self._delta_bytes += size
                self._stream.append((kind, event.data, at, at))
            else:
                self._stream.append((kind, omitted_data(event.data, size), at, at))
        if self.omitted:
            # Once anything is omitted, everything after it is too: retained stays a prefix.
            self.omitted += 1
        elif len(self.events) >= self._max_events:
            self._omit("events", kind)
        elif size > self._max_bytes - self.retained_bytes:
            self._omit("bytes", kind)
        else:
            self.events.append(event)
            self.retained_bytes += size

    def _omit(self, limit: Literal["events", "bytes"], kind: str) -> None:
        self.omitted = 1
        self.first_omission = Omission(limit, kind)

    def coverage(self) -> EventCoverage:
        """Return the coverage so far: mode `"compact"` iff any event was omitted.

        Returns:
            An `EventCoverage` with counts in events and `retained_bytes` in bytes.
        """
        return EventCoverage(
            mode="compact" if self.omitted else "exact",
            observed_events=self.observed,
            retained_events=len(self.events),
            omitted_events=self.omitted,
            retained_bytes=self.retained_bytes,
            first_omission=self.first_omission,
        )

    def response(self, *, duration_ms: int, prompt: str | None = None) -> Response:
        """Build the turn's `Response` from everything observed.

        Args:
            duration_ms: the task-measured turn duration in milliseconds.
            prompt: the prompt actually sent, or None.

        Returns:
            A `Response` whose `events` are the retained prefix (copied), while `text`,
            `final_message`, `usage` and `terminal` come from the full stream; `session_id`
            is the terminal's `data["session_id"]` when the terminal is a `"result"`.

        Mirrors: the compact-retention Response build of docs/pages/contract.md#s4-6.
        """
        terminal = self.terminal
        session_id = None
        if terminal is not None and terminal.kind == "result":
            session_id = terminal.data.get("session_id")
        return _assemble(
            events=list(self.events),
            terminal=terminal,
            usage=self.usage,
            text=self._text,
            coverage=self.coverage(),
            duration_ms=duration_ms,
            session_id=session_id,
            prompt=prompt,
            stream=delta_stream(self._text, self._stream),
        )


class LosslessBudget:
    """The lossless-retention admission check, run by the turn task BEFORE
    `handle_stream_event` (docs/pages/contract.md#s4-6).

    Attributes (read-only for callers):
        retained_events: events admitted so far (count).
        retained_bytes: `term_size` sum of the admitted events (bytes).

    Not thread-safe: owned by one turn task.
    """

    __slots__ = ("_max_bytes", "_max_events", "retained_bytes", "retained_events")

    def __init__(self, max_events: int, max_bytes: int) -> None:
        """Start an empty budget.

        Args:
            max_events: `max_events_per_turn`, the retained-event bound (count).
            max_bytes: `max_event_bytes_per_turn`, the retained-size bound (bytes).
        """
        self._max_events = max_events
        self._max_bytes = max_bytes
        self.retained_events = 0
        self.retained_bytes = 0

    def admit(self, kind: str, size: int) -> CaptureOverflow | None:
        """Admit one event or report the bound it would break.

        Args:
            kind: the event's kind.
            size: the event's `term_size` in bytes.

        Returns:
            None when the event fits (it is then counted as retained); otherwise the
            `CaptureOverflow` diagnostic (`limit` `"events"` when the count bound is reached,
            else `"bytes"`), with the counts as they were before this event.
        """
        if self.retained_events >= self._max_events:
            return self._overflow("events", kind, size)
        if size > self._max_bytes - self.retained_bytes:
            return self._overflow("bytes", kind, size)
        self.retained_events += 1
        self.retained_bytes += size
        return None

    def _overflow(self, limit: Literal["events", "bytes"], kind: str, size: int) -> CaptureOverflow:
        return CaptureOverflow(
            limit=limit,
            max_events=self._max_events,
            max_bytes=self._max_bytes,
            retained_events=self.retained_events,
            retained_bytes=self.retained_bytes,
            rejected_event_kind=kind,
            rejected_event_bytes=size,
        )


def _text(value: Any) -> str | None:
    return value if type(value) is str and value else None


def tool_calls(events: list[Event]) -> tuple[ToolSpan, ...]:
    """The content-free `ToolSpan` records of the tool calls among `events` (in order).

    A `"tool_use"` event opens a call (its `name`, else `tool`, else `type`; its `id`); the
    `"tool_result"` event with the same id (`tool_use_id`, `id` or `call_id`) closes it,
    with `is_error` from the result's `is_error` or a `status` of `"failed"`/`"completed"`.
    Arguments and results are never copied. Runs only when a turn handler is attached.
    """
    calls: list[ToolSpan] = []
    open_calls: dict[str, int] = {}
    for event in events:
        kind = event.kind
        if kind == "tool_use":
            data = event.data
            call_id = _text(data.get("id")) or _text(data.get("call_id"))
            name = _text(data.get("name")) or _text(data.get("tool")) or _text(data.get("type"))
            if call_id is not None:
                open_calls[call_id] = len(calls)
            calls.append(ToolSpan(name=name, call_id=call_id, started_ms=event.timestamp))
        elif kind == "tool_result":
            data = event.data
            call_id = (_text(data.get("tool_use_id")) or _text(data.get("id"))
                       or _text(data.get("call_id")))
            index = open_calls.pop(call_id, None) if call_id is not None else None
            if index is None:
                continue
            flag = data.get("is_error")
            status = data.get("status")
            is_error = flag if type(flag) is bool else (
                True if status == "failed" else False if status == "completed" else None)
            call = calls[index]
            calls[index] = ToolSpan(name=call.name, call_id=call.call_id,
                                    started_ms=call.started_ms, ended_ms=event.timestamp,
                                    is_error=is_error)
    return tuple(calls)

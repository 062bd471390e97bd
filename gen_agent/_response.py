"""`Response`: what a completed turn returns, and how it is assembled (docs/pages/contract.md#s6;
docs: the values reference).

`Response` carries the assembled assistant text, the last assistant message, the retained
events, the terminal event, token usage, timing and the coverage record that says how many of
the turn's events were retained (§4.6). `Response.from_events` builds one from a plain list of
events; the runtime builds one from its per-turn capture (`gen_agent._runtime.capture`). Both
assemble text with `TextAccumulator`, the one implementation of the §6.2 rule.

Terminal data is read with plain string keys (`"text"`, `"session_id"`, `"model"`,
`"reason"`, and the extras listed on `Response`); every other key of the terminal data is
kept in `Response.extra`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Generic, Literal, TypeVar

import msgspec

from gen_agent._conversation import Message, delta_from_events
from gen_agent._event import Event
from gen_agent._request_ref import RequestRef
from gen_agent._size import term_size

__all__ = [
    "FINISH_REASONS",
    "USAGE_KEYS",
    "EventCoverage",
    "Omission",
    "Response",
    "TextAccumulator",
    "finish_reason",
    "normalize_usage",
]

T = TypeVar("T")

FINISH_REASONS: Final = (
    "stop", "length", "tool_calls", "content_filter", "refusal", "error", "interrupted",
)
"""The normalized values of `Response.finish_reason`."""

# Every provider's raw stop reason (Anthropic `stop_reason`, OpenAI status and incomplete
# reason, Claude CLI `stop_reason`/`subtype`, Codex) → the normalized finish reason.
_FINISH: Final = {
    "end_turn": "stop", "stop_sequence": "stop", "stop": "stop", "completed": "stop",
    "success": "stop", "pause_turn": "stop",
    "max_tokens": "length", "max_output_tokens": "length", "length": "length",
    "model_context_window_exceeded": "length", "error_max_turns": "length",
    "tool_use": "tool_calls", "tool_calls": "tool_calls", "function_call": "tool_calls",
    "content_filter": "content_filter", "refusal": "refusal",
    "error": "error", "error_during_execution": "error", "failed": "error",
    "interrupted": "interrupted", "cancelled": "interrupted", "aborted": "interrupted",
}


def finish_reason(raw: Any) -> str | None:
    """The normalized finish reason (one of `FINISH_REASONS`) of a provider's raw stop reason.

    Args:
        raw: the provider's stop reason (`"end_turn"`, `"max_tokens"`, `"tool_use"`,
            `"completed"`, `"max_output_tokens"`, `"refusal"`, a Claude CLI subtype...).

    Returns:
        `"stop"`, `"length"`, `"tool_calls"`, `"content_filter"`, `"refusal"`, `"error"`
        or `"interrupted"`; None for None or a value this table does not know.
    """
    return _FINISH.get(raw) if isinstance(raw, str) else None


USAGE_KEYS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "reasoning_tokens",
)
"""The normalized usage keys every bundled backend's `Response.usage` carries (tokens)."""

# Raw key → normalized key, for the keys whose provider name differs.
_USAGE_ALIASES: Final = {
    "cached_tokens": "cache_read_input_tokens",  # OpenAI input_tokens_details.cached_tokens
    "cached_input_tokens": "cache_read_input_tokens",  # Codex turn.completed
    "reasoning_output_tokens": "reasoning_tokens",  # Codex
    "cache_write_input_tokens": "cache_creation_input_tokens",  # Codex
    "cache_creation_tokens": "cache_creation_input_tokens",
    "cache_read_tokens": "cache_read_input_tokens",
}


def normalize_usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`usage` with the normalized keys (`USAGE_KEYS`) added beside the provider's raw keys.

    Args:
        usage: the data of a turn's last `usage` event (token counts), or None.

    Returns:
        None for None; else a new dict: every raw key as given, plus each normalized key
        (`input_tokens`, `output_tokens`, `cache_read_input_tokens`,
        `cache_creation_input_tokens`, `reasoning_tokens`; tokens) taken from the raw key
        of the same name or its alias (`cached_tokens`, `cached_input_tokens`,
        `reasoning_output_tokens`, ...), when the provider reported that count.
        `input_tokens` counts as the provider counts:
        Anthropic and the Claude CLI exclude cached input, OpenAI and Codex include it.
    """
    if usage is None:
        return None
    out = dict(usage)
    for raw, key in _USAGE_ALIASES.items():
        value = usage.get(raw)
        if key not in out and isinstance(value, int):
            out[key] = value
    return out

_SEPARATOR: Final = "\n\n"

# Terminal-data keys `Response` models itself; every other key lands in `Response.extra`.
_EXTRA_FIELDS: Final = (
    "stop_reason",
    "num_turns",
    "duration_api_ms",
    "cost_usd",
    "is_error",
    "subtype",
    "provider",
    "provider_model",
    "finish_reason",
    "response_id",
    "service_tier",
    "served_by",
    "messages",
)
_MODELED_KEYS: Final = frozenset({"text", "session_id", "model", "reason", *_EXTRA_FIELDS})
# The terminal-data keys copied as they are into the `Response` field of the same name.
_COPIED_KEYS: Final = frozenset({"model", *_EXTRA_FIELDS} - {"finish_reason", "messages"})


class Omission(msgspec.Struct, frozen=True):
    """The first event compact retention dropped, and the bound that dropped it.

    Fields:
        limit: `"events"` (the `max_events_per_turn` count bound was reached) or `"bytes"`
            (the event's `term_size` did not fit in what was left of
            `max_event_bytes_per_turn`).
        event_kind: the kind of that first omitted event (`str`).

    Mirrors the `first_omission` map `%{limit, event_kind}` of docs/pages/contract.md#s6-3 (docs:
    Concepts, "Response").
    """

    limit: Literal["events", "bytes"]
    event_kind: str


class EventCoverage(msgspec.Struct, frozen=True, kw_only=True):
    """How many of a turn's events a `Response` retained.

    Fields:
        mode: `"exact"` (nothing omitted) or `"compact"` (at least one event omitted).
        observed_events: events consumed from the stream, terminal included (count).
        retained_events: events kept in `Response.events` (count; equals its length).
        omitted_events: events consumed but not kept (count); `observed = retained + omitted`.
        retained_bytes: `term_size` sum of the retained events (bytes).
        first_omission: the first omitted event's `Omission`, or None when nothing was omitted.

    Mirrors the `event_coverage` map of docs/pages/contract.md#s6-3 (docs: Concepts, "Response").
    """

    mode: Literal["exact", "compact"]
    observed_events: int
    retained_events: int
    omitted_events: int
    retained_bytes: int
    first_omission: Omission | None = None


class TextAccumulator:
    """Incremental text assembly of one turn, the rule of docs/pages/contract.md#s6-2 (docs:
    Concepts).

    Feed it the data of every `"text"` event in arrival order with `add`; then read `text`
    and `final_message` against the turn's terminal event. Each `add` is a couple of list
    appends; the strings are joined once, when read, so a turn may stream millions of deltas.

    Rule: a text event contributes `data["text"]` (a non-`str` or missing text counts as
    `""`). It is preceded by the separator `"\\n\\n"` only when it is marked
    `data["message_boundary"]` (Elixir truthiness: anything but None/False), some non-empty
    text was seen before, and it is itself non-empty. A boundary starts a new "final message";
    deltas without the flag extend the current one.

    Not thread-safe: one turn, one owner.

    Mirrors: the text accumulator of `GenAgent.Response.from_events/2` and of the compact
    capture (docs/pages/contract.md#s6-2; docs: the values reference).
    """

    __slots__ = ("_chunks", "_final_start", "_joined", "_marks", "_saw_boundary", "_seen_text")

    def __init__(self, marks: list[Any] | None = None) -> None:
        self._chunks: list[str] = []
        # Where the runtime's capture records boundaries among its other stream marks, so a
        # stream-made delta can be cut from the chunks without keeping every text event.
        self._marks = marks
        # Index in _chunks where the last boundary-marked message starts (its separator excluded).
        self._final_start = 0
        self._seen_text = False
        self._saw_boundary = False
        self._joined: str | None = None

    def add(self, data: dict[str, Any]) -> None:
        """Feed the data of one `"text"` event.

        Args:
            data: the event's data dict; reads `"text"` (str) and `"message_boundary"`.

        Returns:
            None.
        """
        text = data.get("text")
        if type(text) is not str:
            text = ""
        chunks = self._chunks
        boundary = data.get("message_boundary")
        # Elixir truthiness: only nil and false are false (so 0 and "" count as set).
        if boundary is not None and boundary is not False:
            before = len(chunks)
            if text and self._seen_text:
                chunks.append(_SEPARATOR)
            self._final_start = len(chunks)
            self._saw_boundary = True
            if self._marks is not None:
                self._marks.append((_BOUNDARY, None, before, self._final_start))
        if text:
            chunks.append(text)
            self._seen_text = True
        self._joined = None

    @property
    def saw_boundary(self) -> bool:
        """True once any fed text event was marked `message_boundary`."""
        return self._saw_boundary

    def assembled(self) -> str:
        """Return the concatenation of every fed text (with separators), ignoring any terminal."""
        if self._joined is None:
            self._joined = "".join(self._chunks)
        return self._joined

    def text(self, terminal: Event | None) -> str:
        """Return `Response.text` for a turn that ended with `terminal`.

        Args:
            terminal: the turn's terminal `Event`, or None.

        Returns:
            The terminal's `data["text"]` when the terminal is a `"result"` whose text is a
            `str` (even `""`); otherwise the assembled deltas.
        """
        result_text = _result_text(terminal)
        return result_text if result_text is not None else self.assembled()

    def final_message(self, terminal: Event | None) -> str:
        """Return `Response.final_message` for a turn that ended with `terminal`.

        Args:
            terminal: the turn's terminal `Event`, or None.

        Returns:
            The `"result"` terminal's `str` text when there is one; else, if no boundary was
            seen, the assembled text; else the last boundary-marked message plus every delta
            after it (no separator in front).
        """
        result_text = _result_text(terminal)
        if result_text is not None:
            return result_text
        if not self._saw_boundary:
            return self.assembled()
        return "".join(self._chunks[self._final_start :])


def _result_text(terminal: Event | None) -> str | None:
    if terminal is None or terminal.kind != "result":
        return None
    text = terminal.data.get("text")
    return text if type(text) is str else None


class Response(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """The outcome of a successful turn. Immutable; safe to share between threads.

    Generic in the type of `parsed`: `msgspec.json.decode(data, type=Response[T])` gives
    back a `T` in `parsed`.

    Fields:
        prompt: the prompt actually sent (after `pre_turn`); set by the runtime only, None for
            responses built by hand or by `from_events`.
        text: the full assembled assistant text (§6.2).
        final_message: the last assistant message (§6.2); None only for hand-built values.
        events: the retained `Event`s in arrival order (a prefix of the stream in compact
            retention).
        terminal: the terminal `Event`, even when it was omitted from `events`; None if none.
        event_coverage: the `EventCoverage` of `events`; None only for hand-built values.
        usage: this turn's token counts: the data dict of the last `"usage"` event (a
            multi-step turn reports its running turn total), the provider's raw keys plus
            the normalized `USAGE_KEYS` (`normalize_usage`), tokens; or None.
        duration_ms: milliseconds from just before `backend.prompt` to the terminal event.
        metadata: a free dict for applications; gen_agent never fills it.
        session_id: the result's `data["session_id"]` (any value the backend gives), or None.
        model: the terminal's `data["model"]` when a terminal exists, else None (the SDK
            backends: the model asked for; the CLIs: the model their stream names).
        stop_reason, num_turns, duration_api_ms (milliseconds), cost_usd (this turn's, US
            dollars), is_error, subtype, provider, provider_model (the model the provider
            reports it served): the terminal data keys of the same name when the backend
            reports them, else None (not in the Elixir original).
        tool_calls: the `"tool_use"` events among `events`, in order.
        messages: the messages this turn appended to the conversation (its delta, in
            provider-neutral form, `gen_agent.Message`): the user message
            and the assistant's reply; `()` when the backend reports none.
        parsed: the validated structured output (a `T`) of a request with `output=T`;
            None otherwise.
        finish_reason: the normalized finish reason (`FINISH_REASONS`): the terminal's
            `finish_reason`, else `finish_reason(stop_reason or subtype)`.
        response_id: the provider's id of the last message/response (`msg_...`,
            `resp_...`), or None.
        service_tier: the service tier the provider reports it used, or None.
        served_by: the upstream host a router or aggregator reports, or None.
        session_usage: the agent's running token totals after this turn (every successful
            turn since the agent started, across `reset_session`; same keys as `usage`,
            tokens), set by the runtime; None when no turn reported usage.
        session_cost_usd: the agent's running cost after this turn (US dollars), set by
            the runtime; None when no turn reported a cost.
        joined: the refs of the `busy="steer"` requests the backend delivered into this
            turn, in order (each got this same `Response` as its outcome); `()` otherwise.
            An extension (docs: Busy policies).
        extra: every terminal data key not modeled above (`text`, `session_id`, `model`,
            `reason` and the extras), preserved as given.

    Mirrors: `%GenAgent.Response{}` (docs/pages/contract.md#s6-1; docs: the values reference), plus
    the extras of python_api.md.
    """

    prompt: str | None = None
    text: str = ""
    final_message: str | None = None
    events: list[Event] = msgspec.field(default_factory=list)
    terminal: Event | None = None
    event_coverage: EventCoverage | None = None
    usage: dict[str, Any] | None = None
    duration_ms: int = 0
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    session_id: Any = None
    model: Any = None
    stop_reason: str | None = None
    num_turns: int | None = None
    duration_api_ms: int | None = None
    cost_usd: float | None = None
    is_error: bool | None = None
    subtype: str | None = None
    provider: str | None = None
    provider_model: str | None = None
    tool_calls: list[Event] = msgspec.field(default_factory=list)
    messages: tuple[Message, ...] = ()
    parsed: T | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    service_tier: str | None = None
    served_by: str | None = None
    session_usage: dict[str, Any] | None = None
    session_cost_usd: float | None = None
    joined: tuple[RequestRef, ...] = ()
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def agent_calls(self) -> list[dict[str, Any]]:
        """Every call of another agent made through a `gen_agent.tools.agent_tool` during the
        turn, in order: the data of its `"agent_call"` events (`agent`, `ref`,
        `tool_use_id`, `duration_ms` in milliseconds, `outcome`, `reason_kind`, `usage` in
        tokens, `cost_usd`). Derived from `events` (retained events only)."""
        return [event.data for event in self.events if event.kind == "agent_call"]

    @classmethod
    def from_events(
        cls,
        events: Iterable[Event],
        *,
        duration_ms: int = 0,
        session_id: Any = None,
        event_coverage: EventCoverage | None = None,
    ) -> Response:
        """Build a `Response` from a complete list of events.

        Args:
            events: the turn's events in order (any iterable of `Event`; all are retained).
            duration_ms: the turn's duration in milliseconds, default 0.
            session_id: the session id to record, default None (not read from the events).
            event_coverage: a coverage record to use instead of the computed one.

        Returns:
            A `Response` whose `terminal` is the first terminal event of `events`, `usage` the
            data of the last `"usage"` event, text assembled per §6.2 over every `"text"`
            event, and coverage `"exact"` (observed = retained = the event count, nothing
            omitted, `retained_bytes` = Σ `term_size(event)`) unless `event_coverage` is given.
            `prompt` is None and `metadata` is `{}`.

        Never raises for well-formed events.

        Mirrors: `GenAgent.Response.from_events/2` (docs/pages/contract.md#s6-3; docs: the values
        reference).
        """
        event_list = list(events)
        acc = TextAccumulator()
        usage: dict[str, Any] | None = None
        terminal: Event | None = None
        stream: list[tuple[str, dict[str, Any]]] = []
        for event in event_list:
            kind = event.kind
            if kind == "text":
                acc.add(event.data)
                stream.append((kind, event.data))
            elif kind == "usage":
                usage = event.data
            elif terminal is None and event.is_terminal:
                terminal = event
            elif kind in ("tool_use", "tool_result") or kind.endswith(".thinking"):
                stream.append((kind, event.data))
        if event_coverage is None:
            count = len(event_list)
            event_coverage = EventCoverage(
                mode="exact",
                observed_events=count,
                retained_events=count,
                omitted_events=0,
                retained_bytes=sum(term_size(event) for event in event_list),
                first_omission=None,
            )
        return _assemble(
            events=event_list,
            terminal=terminal,
            usage=usage,
            text=acc,
            coverage=event_coverage,
            duration_ms=duration_ms,
            session_id=session_id,
            prompt=None,
            stream=stream,
        )


_BOUNDARY = "message_boundary"
_BOUNDARY_DATA: dict[str, Any] = {"text": "", "message_boundary": True}


def delta_stream(text: TextAccumulator, marks: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The `(kind, data)` stream `delta_from_events` takes, rebuilt from a capture's text
    chunks and its marks (`(kind, data, chunk_before, chunk_after)` in arrival order: the
    non-text events of the delta, and the text boundaries the accumulator recorded): each
    run of text between two marks is one joined text entry, so the capture keeps strings,
    not one entry per text event. Gives the same delta as the full stream would."""
    chunks, out, start = text._chunks, [], 0
    for kind, data, before, after in marks:
        if before > start:
            out.append(("text", {"text": "".join(chunks[start:before])}))
        out.append(("text", _BOUNDARY_DATA) if kind is _BOUNDARY else (kind, data))
        start = after
    if len(chunks) > start:
        out.append(("text", {"text": "".join(chunks[start:])}))
    return out


def _assemble(
    *,
    events: list[Event],
    terminal: Event | None,
    usage: dict[str, Any] | None,
    text: TextAccumulator,
    coverage: EventCoverage,
    duration_ms: int,
    session_id: Any,
    prompt: str | None,
    stream: list[tuple[str, dict[str, Any]]],
) -> Response:
    # The one place a Response is put together, for from_events and for the runtime capture.
    data: dict[str, Any] = terminal.data if terminal is not None else {}
    get = data.get
    is_result = terminal is not None and terminal.kind == "result"
    finish = get("finish_reason")
    if finish is None:
        finish = finish_reason(get("stop_reason")) or finish_reason(get("subtype"))
        if finish is None and is_result:
            finish = "stop"
    messages = get("messages")
    if isinstance(messages, (list, tuple)):
        messages = tuple(messages)
    elif is_result:
        # The backend names no messages: the delta is what the stream showed.
        messages = delta_from_events(prompt, stream, get("provider"))
    else:
        messages = ()
    # A result's own text is both the text and the final message (§6.2): no join needed.
    result_text = get("text") if is_result else None
    if type(result_text) is str:
        full = final = result_text
    else:
        full, final = text.assembled(), text.final_message(None)
    # One pass over the terminal data: the keys modeled as they are (a missing key leaves
    # its field None), and the rest in `extra`.
    copied: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key in _COPIED_KEYS:
            copied[key] = value
        elif key not in _MODELED_KEYS:
            extra[key] = value
    return Response(
        prompt=prompt,
        text=full,
        final_message=final,
        events=events,
        terminal=terminal,
        event_coverage=coverage,
        usage=normalize_usage(usage),
        duration_ms=duration_ms,
        session_id=session_id,
        tool_calls=[event for event in events if event.kind == "tool_use"],
        messages=messages,
        finish_reason=finish,
        extra=extra,
        **copied,
    )

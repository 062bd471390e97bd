"""OpenTelemetry for gen_agent: every turn a GenAI span, every token a metric.

`instrument()` attaches one `gen_agent.telemetry` handler that turns the turn events into
OpenTelemetry spans and metrics; `uninstrument()` detaches it. Depends on `opentelemetry-api`
only (extra `gen_agent[otel]`): nothing is exported unless the application installed an
OpenTelemetry SDK (a tracer and/or meter provider), and gen_agent never installs a global
provider. Without `instrument()` nothing is attached, so turns pay nothing.

Conventions implemented (status "Development"; pinned): the OpenTelemetry semantic
conventions for generative AI of **semantic-conventions v1.41.0** (`docs/gen-ai`, the last
release before the GenAI conventions moved to the `semantic-conventions-genai` repository) for
span names, kinds, attributes and the `gen_ai.client.*` metrics, plus the agent metric
`gen_ai.invoke_agent.duration` of **semantic-conventions-genai v0.1.0**. gen_agent's own
attributes and metrics live under `gen_agent.*` (the conventions define no cost, attempt,
origin or queue attribute).

Spans, per turn (one attempt of one request):

- `invoke_agent {agent name}`, kind INTERNAL, from dispatch to the turn's outcome (the
  `duration_ms` of `TURN_STOP` / `TURN_ERROR`); its parent is the span that was current in the
  thread that called `ask` / `tell` (captured at the call into the request's
  `RequestOptions.trace_context`, unless the caller gave one; the turn runs on other threads).
  Follow-ups a request chains inherit its options, hence its parent; event turns
  (`handle_event` / `handle_info` prompts) have no caller: they start a trace.
  A retry (attempt > 1, a `Prompt` from `handle_error`) has the same parent and a link to the
  span of attempt 1. Failed turns have status ERROR and `error.type`.
- `execute_tool {tool name}`, kind INTERNAL, a child per tool call seen in the turn's
  (retained) events, timed from its `"tool_use"` to its `"tool_result"` event (to the turn's
  end when no result came).

Content (prompts, responses, tool arguments and results) is recorded only with
`capture_content=True`, as `gen_ai.input.messages`, `gen_ai.output.messages`,
`gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` (JSON strings).

The turn's trace context also reaches the backend (`TurnContext.trace_carrier`, injected with
the application's global propagator): the bundled CLI backends pass it to the Claude Code and
Codex CLIs as `TRACEPARENT` / `TRACESTATE`, so a CLI exporting its own spans nests them under
the turn's span; and while the backend runs, the turn's span is current in the turn task, so
an instrumented HTTP client's spans nest under it. See `docs/pages/observability.md`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from importlib import metadata as _metadata
from typing import Any, Final

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from gen_agent import telemetry
from gen_agent._context import set_trace_carrier_activation, set_trace_context_capture
from gen_agent.telemetry import ToolSpan

__all__ = [
    "SEMCONV_GENAI_VERSION",
    "SEMCONV_VERSION",
    "instrument",
    "instrumented",
    "uninstrument",
]

SEMCONV_VERSION: Final = "1.41.0"
"""The OpenTelemetry semantic-conventions release whose GenAI conventions are implemented."""
SEMCONV_GENAI_VERSION: Final = "0.1.0"
"""The semantic-conventions-genai release `gen_ai.invoke_agent.duration` is taken from."""

_SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
_HANDLER_ID: Final = ("gen_agent.otel", "instrumentation")
_CONTENT_EVENTS: Final = (telemetry.PROMPT_START, telemetry.PROMPT_STOP)
_EVENTS: Final = (
    telemetry.TURN_START,
    telemetry.TURN_STOP,
    telemetry.TURN_ERROR,
    telemetry.TURN_REJECTED,
    telemetry.TURN_CANCELLED,
    telemetry.MAILBOX_QUEUED,
    telemetry.TERMINATED,
    telemetry.SUPERVISOR_RESTART,
)
# gen_ai.provider.name of the bundled backends (by class name); a backend may declare its own
# with a `gen_ai_provider_name` attribute.
_PROVIDERS: Final = {
    "AnthropicAPI": "anthropic",
    "ClaudeCLI": "anthropic",
    "OpenAIResponses": "openai",
    "CodexCLI": "openai",
    "MockBackend": "gen_agent.mock",
}
# The bucket boundaries the conventions advise.
_TOKEN_BUCKETS: Final = [float(4**i) for i in range(14)]  # 1, 4, 16, ... 67108864
_DURATION_BUCKETS: Final = [0.01 * 2**i for i in range(14)]  # 0.01 s ... 81.92 s
_MAX_FIRST_ATTEMPTS: Final = 4096  # retry links remembered for this many open requests

_lock = threading.Lock()
_active: _Instrumentation | None = None


def _version() -> str:
    try:
        return _metadata.version("gen-agent")
    except _metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


def _text(value: Any) -> str | None:
    return value if type(value) is str and value else None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _agent_name(agent: Any) -> str:
    return agent if type(agent) is str else str(agent)


def _json(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError, OverflowError):
        return msgspec.json.encode(repr(value)).decode()


def _usage_attributes(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """The `gen_ai.usage.*` span attributes of a turn's `usage` data (token counts).

    `gen_ai.usage.input_tokens` includes cached input, as the conventions ask: Anthropic-style
    usage (Claude Code, the Anthropic API) reports `input_tokens` without the cache, so its
    `cache_read_input_tokens` and `cache_creation_input_tokens` are added; OpenAI-style usage
    (the Responses API, Codex) includes them already and reports `cached_tokens` /
    `cached_input_tokens` as the cache read. Unknown or non-int counts are left out.
    """
    if not usage:
        return {}
    attrs: dict[str, int] = {}
    input_tokens = _int(usage.get("input_tokens"))
    output_tokens = _int(usage.get("output_tokens"))
    cache_read = _int(usage.get("cache_read_input_tokens"))
    cache_creation = _int(usage.get("cache_creation_input_tokens"))
    if cache_read is not None or cache_creation is not None:
        if input_tokens is not None:
            input_tokens += (cache_read or 0) + (cache_creation or 0)
    else:
        cache_read = _int(usage.get("cached_tokens"))
        if cache_read is None:
            cache_read = _int(usage.get("cached_input_tokens"))
    for key, value in (
        ("gen_ai.usage.input_tokens", input_tokens),
        ("gen_ai.usage.output_tokens", output_tokens),
        ("gen_ai.usage.cache_read.input_tokens", cache_read),
        ("gen_ai.usage.cache_creation.input_tokens", cache_creation),
    ):
        if value is not None:
            attrs[key] = value
    return attrs


class _Turn:
    """The open span of one turn and what its end needs."""

    __slots__ = ("agent", "attrs", "span")

    def __init__(self, span: Any, agent: Any, attrs: dict[str, Any]) -> None:
        self.span = span
        self.agent = agent
        self.attrs = attrs  # the metric attributes known at the start


class _Instrumentation:
    """The handler state of one `instrument()` call."""

    def __init__(self, tracer: Any, meter: Any, capture_content: bool) -> None:
        self.tracer = tracer
        self.capture_content = capture_content
        self._lock = threading.Lock()
        self._turns: dict[tuple[Any, int], _Turn] = {}
        self._first: dict[Any, Any] = {}  # ref → span context of attempt 1 (retry links)
        self._prompts: dict[tuple[Any, int], str] = {}
        self._responses: dict[tuple[Any, int], Any] = {}
        self._providers: dict[Any, str] = {}
        self._depths: dict[str, int] = {}  # the queue depth last set, per agent name
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS)
        self.operation_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            description="GenAI operation duration: the backend's part of a turn.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS)
        self.invoke_duration = meter.create_histogram(
            "gen_ai.invoke_agent.duration", unit="s",
            description="Duration of a GenAI agent invocation: one turn, dispatch to outcome.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS)
        self.queue_depth = meter.create_gauge(
            "gen_agent.queue.depth", unit="{prompt}",
            description="Prompts waiting in an agent's mailbox.")
        self.turns = meter.create_counter(
            "gen_agent.turns", unit="{turn}",
            description="Turns by outcome (ok, error, rejected, cancelled).")
        self.restarts = meter.create_counter(
            "gen_agent.supervisor.restarts", unit="{restart}",
            description="Agents restarted by their supervisor.")
        self.dispatch = {
            telemetry.TURN_START: self._turn_start,
            telemetry.TURN_STOP: self._turn_stop,
            telemetry.TURN_ERROR: self._turn_error,
            telemetry.TURN_REJECTED: self._turn_not_run,
            telemetry.TURN_CANCELLED: self._turn_not_run,
            telemetry.MAILBOX_QUEUED: self._queued,
            telemetry.TERMINATED: self._terminated,
            telemetry.SUPERVISOR_RESTART: self._restart,
            telemetry.PROMPT_START: self._prompt_start,
            telemetry.PROMPT_STOP: self._prompt_stop,
        }

    # -- the telemetry handler ----------------------------------------------------------
    def handle(self, name: tuple[str, ...], measurements: dict[str, Any],
               meta: dict[str, Any], _config: Any) -> None:
        self.dispatch[name](measurements, meta)

    def _provider(self, backend: Any) -> str:
        provider = self._providers.get(backend)
        if provider is None:
            declared = _text(getattr(backend, "gen_ai_provider_name", None))
            cls = backend if isinstance(backend, type) else type(backend)
            provider = declared or _PROVIDERS.get(cls.__name__, cls.__name__)
            self._providers[backend] = provider
        return provider

    def span_of(self, ref: Any, attempt: int) -> Any:
        """The open span of the turn `(ref, attempt)`, or None."""
        turn = self._turns.get((ref, attempt))
        return None if turn is None else turn.span

    def _prompt_start(self, _measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        self._prompts[(meta["ref"], meta["attempt"])] = meta["prompt"]

    def _prompt_stop(self, _measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        self._responses[(meta["ref"], meta["attempt"])] = meta.get("response")

    def _turn_start(self, measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        ref, attempt, agent = meta["ref"], meta["attempt"], meta["agent"]
        agent_name = _agent_name(agent)
        provider = self._provider(meta.get("backend"))
        metric_attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.agent.name": agent_name,
        }
        request_model = _text(meta.get("request_model"))
        if request_model is not None:
            metric_attrs["gen_ai.request.model"] = request_model
        attrs = {
            **metric_attrs,
            "gen_agent.request.ref": ref.id if hasattr(ref, "id") else str(ref),
            "gen_agent.turn.attempt": attempt,
            "gen_agent.turn.origin": meta["origin"],
            "gen_agent.turn.queue_wait_ms": measurements.get("queue_wait_ms", 0),
        }
        session_id = _text(meta.get("session_id"))
        if session_id is not None:
            attrs["gen_ai.conversation.id"] = session_id
        key = (ref, attempt)
        links = None
        if attempt > 1:
            first = self._first.get(ref)
            if first is not None:
                links = [Link(first, {"gen_agent.link.type": "retry_of"})]
        span = self.tracer.start_span(
            f"invoke_agent {agent_name}", context=meta.get("trace_context"),
            kind=SpanKind.INTERNAL, attributes=attrs, links=links)
        if self.capture_content:
            prompt = self._prompts.pop(key, None)
            if prompt is not None:
                span.set_attribute("gen_ai.input.messages", _json(
                    [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]))
        carrier = meta.get("trace_carrier")
        if carrier is not None and span.get_span_context().is_valid:
            propagate.inject(carrier, context=trace.set_span_in_context(span))
        with self._lock:
            self._turns[key] = _Turn(span, agent, metric_attrs)
            if attempt == 1:
                self._first[ref] = span.get_span_context()
                if len(self._first) > _MAX_FIRST_ATTEMPTS:
                    del self._first[next(iter(self._first))]
        if "queue_depth" in measurements:
            self._set_depth(agent_name, measurements["queue_depth"])

    def _end(self, meta: dict[str, Any], measurements: dict[str, Any],
             error: str | None) -> _Turn | None:
        key = (meta["ref"], meta["attempt"])
        with self._lock:
            turn = self._turns.pop(key, None)
            if error is None:
                self._first.pop(meta["ref"], None)
        response = self._responses.pop(key, None) if self.capture_content else None
        if turn is None:
            return None
        span = turn.span
        attrs = turn.attrs
        found: dict[str, Any] = {}  # set on the span at once (one lock, one cleaning pass)
        model = _text(meta.get("model"))
        if model is not None:
            attrs["gen_ai.response.model"] = found["gen_ai.response.model"] = model
        finish = _text(meta.get("finish_reason"))
        if finish is not None:
            found["gen_ai.response.finish_reasons"] = [finish]
        session_id = _text(meta.get("session_id"))
        if session_id is not None:
            found["gen_ai.conversation.id"] = session_id
        usage = _usage_attributes(meta.get("usage"))
        found.update(usage)
        cost = meta.get("cost_usd")
        if type(cost) is float or type(cost) is int:
            found["gen_agent.usage.cost_usd"] = float(cost)
        backend_ms = measurements.get("backend_duration_ms")
        if backend_ms is not None:
            found["gen_agent.turn.backend_duration_ms"] = backend_ms
        if error is not None:
            attrs["error.type"] = found["error.type"] = error
            found["gen_agent.turn.reason_kind"] = meta.get("reason_kind", "_OTHER")
        span.set_attributes(found)
        if response is not None:
            self._output_content(span, response, finish)
        calls = meta.get("tool_calls")
        if calls:
            self._tool_spans(span, calls, response)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR))
        span.end()
        duration_s = measurements["duration_ms"] / 1000
        self.invoke_duration.record(duration_s, attrs)
        # The client metrics' attributes are the conventions' (no agent name).
        client = {key: value for key, value in attrs.items() if key != "gen_ai.agent.name"}
        backend_s = duration_s if backend_ms is None else backend_ms / 1000
        self.operation_duration.record(backend_s, client)
        for token_type, value in (("input", usage.get("gen_ai.usage.input_tokens")),
                                  ("output", usage.get("gen_ai.usage.output_tokens"))):
            if value is not None:  # a new dict each: the SDK may keep the one it is given
                self.token_usage.record(value, {**client, "gen_ai.token.type": token_type})
        return turn

    def _turn_stop(self, measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        turn = self._end(meta, measurements, None)
        if turn is not None:
            self.turns.add(1, {**turn.attrs, "gen_agent.turn.outcome": "ok"})

    def _turn_error(self, measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        turn = self._end(meta, measurements, meta.get("error_type") or "_OTHER")
        if turn is not None:
            self.turns.add(1, {**turn.attrs, "gen_agent.turn.outcome": "error"})

    def _turn_not_run(self, measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        if "queue_depth" in measurements:  # a cancellation took a prompt out of the mailbox
            self._set_depth(_agent_name(meta["agent"]), measurements["queue_depth"])
        kind = meta.get("reason_kind")
        if isinstance(kind, tuple):
            kind = kind[0] if kind and type(kind[0]) is str else "_OTHER"
        cancelled = "reason_kind" in meta and kind in ("caller_cancelled", "caller_down")
        self.turns.add(1, {
            "gen_ai.agent.name": _agent_name(meta["agent"]),
            "gen_agent.turn.outcome": "cancelled" if cancelled else "rejected",
            "gen_agent.turn.reason_kind": kind if type(kind) is str else "_OTHER",
        })

    def _queued(self, measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        self._set_depth(_agent_name(meta["agent"]), measurements["depth"])

    def _set_depth(self, agent_name: str, depth: int) -> None:
        # Set the gauge only when the depth changed (an idle agent's turns all see 0).
        if self._depths.get(agent_name) != depth:
            self._depths[agent_name] = depth
            self.queue_depth.set(depth, {"gen_ai.agent.name": agent_name})

    def _restart(self, _measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        self.restarts.add(1, {"gen_agent.supervisor.name": _agent_name(meta["supervisor"]),
                              "gen_agent.child.id": _agent_name(meta["child_id"])})

    def _terminated(self, _measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        # A turn in flight when its agent stops ends with no turn event: close its span.
        agent = meta["agent"]
        with self._lock:
            keys = [key for key, turn in self._turns.items() if turn.agent == agent]
            turns = [self._turns.pop(key) for key in keys]
        for turn in turns:
            turn.span.set_attribute("error.type", "agent_terminated")
            turn.span.set_status(Status(StatusCode.ERROR))
            turn.span.end()

    # -- children and content -------------------------------------------------------------
    def _tool_spans(self, parent: Any, calls: tuple[ToolSpan, ...], response: Any) -> None:
        # Event timestamps are monotonic ms; spans take wall-clock ns.
        offset_ns = time.time_ns() - time.monotonic_ns()
        end_ns = time.time_ns()
        context = trace.set_span_in_context(parent)
        contents = _tool_contents(response) if response is not None else {}
        for call in calls:
            attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool"}
            if call.name is not None:
                attrs["gen_ai.tool.name"] = call.name
            if call.call_id is not None:
                attrs["gen_ai.tool.call.id"] = call.call_id
                content = contents.get(call.call_id)
                if content is not None:
                    attrs.update(content)
            name = "execute_tool" if call.name is None else f"execute_tool {call.name}"
            span = self.tracer.start_span(name, context=context, kind=SpanKind.INTERNAL,
                                          attributes=attrs,
                                          start_time=offset_ns + call.started_ms * 1_000_000)
            if call.is_error:
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR))
            ended = end_ns if call.ended_ms is None else offset_ns + call.ended_ms * 1_000_000
            span.end(end_time=ended)

    def _output_content(self, span: Any, response: Any, finish: str | None) -> None:
        parts: list[dict[str, Any]] = []
        if response.text:
            parts.append({"type": "text", "content": response.text})
        for event in response.tool_calls:
            data = event.data
            parts.append({"type": "tool_call", "id": data.get("id"), "name": data.get("name"),
                          "arguments": data.get("input")})
        span.set_attribute("gen_ai.output.messages", _json(
            [{"role": "assistant", "parts": parts, "finish_reason": finish or "stop"}]))

    def close(self) -> None:
        """End every span still open (the instrumentation is going away)."""
        with self._lock:
            turns = list(self._turns.values())
            self._turns.clear()
            self._first.clear()
        for turn in turns:
            turn.span.end()


def _tool_contents(response: Any) -> dict[str, dict[str, str]]:
    """Tool call arguments and results of a response, by call id (capture_content only)."""
    contents: dict[str, dict[str, str]] = {}
    for event in response.events:
        data = event.data
        if event.kind == "tool_use":
            call_id = _text(data.get("id")) or _text(data.get("call_id"))
            if call_id is not None:
                arguments = data.get("input", data.get("arguments"))
                contents.setdefault(call_id, {})["gen_ai.tool.call.arguments"] = _json(arguments)
        elif event.kind == "tool_result":
            call_id = (_text(data.get("tool_use_id")) or _text(data.get("id"))
                       or _text(data.get("call_id")))
            if call_id is not None:
                result = data.get("content", data.get("output", data.get("aggregated_output")))
                contents.setdefault(call_id, {})["gen_ai.tool.call.result"] = _json(result)
    return contents


@contextlib.contextmanager
def _activate(turn_context: Any) -> Iterator[None]:
    # In the turn task: the turn's span is the current span while the backend runs, so an
    # instrumented HTTP client's spans are its children. A turn already over (abandoned
    # after an interrupt or a timeout) activates nothing.
    state = _active
    span = None if state is None else state.span_of(turn_context.ref, turn_context.attempt)
    if span is None:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


def _caller_context() -> Any:
    # The calling thread's context; None when it holds nothing (no span, no baggage), so an
    # untraced caller's request keeps its options as they are.
    context = otel_context.get_current()
    return context if context else None


def instrument(tracer_provider: Any = None, meter_provider: Any = None,
               capture_content: bool = False) -> None:
    """Turn gen_agent's telemetry into OpenTelemetry spans and metrics, from now on.

    Calling it again replaces the previous instrumentation (its open spans are ended).

    Args:
        tracer_provider: the `TracerProvider` to create spans with; None uses the global one
            (`opentelemetry.trace.get_tracer_provider()`: a no-op until the application
            installs an SDK provider).
        meter_provider: the `MeterProvider` for the metrics; None uses the global one.
        capture_content: also record prompts, responses and tool arguments/results on the
            spans (default False: they may hold personal data or secrets).

    Returns:
        None.

    Source: the OpenTelemetry GenAI semantic conventions, v1.41.0 (see the module docs).
    """
    global _active
    version = _version()
    tracer = trace.get_tracer("gen_agent", version, tracer_provider, schema_url=_SCHEMA_URL)
    meter = metrics.get_meter("gen_agent", version, meter_provider, schema_url=_SCHEMA_URL)
    state = _Instrumentation(tracer, meter, bool(capture_content))
    events = (*_EVENTS, *_CONTENT_EVENTS) if capture_content else _EVENTS
    with _lock:
        _uninstrument_locked()
        telemetry.attach_many(_HANDLER_ID, events, state.handle)
        set_trace_context_capture(_caller_context)
        set_trace_carrier_activation(_activate)
        _active = state


def uninstrument() -> None:
    """Stop: detach the handler, stop capturing callers' contexts, end the open spans.

    Does nothing when not instrumented. Returns None.
    """
    with _lock:
        _uninstrument_locked()


def _uninstrument_locked() -> None:
    global _active
    state, _active = _active, None
    telemetry.detach(_HANDLER_ID)
    set_trace_context_capture(None)
    set_trace_carrier_activation(None)
    if state is not None:
        state.close()


def instrumented() -> bool:
    """True between `instrument()` and `uninstrument()`."""
    return _active is not None

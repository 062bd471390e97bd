"""Tests for gen_agent.otel with the OpenTelemetry SDK's in-memory span and metric exporters:
a successful, a failed, a retried, a tool and an interrupted turn (span names, parents,
attributes), content only with `capture_content`, metrics, and nothing at all when not
instrumented."""

from __future__ import annotations

import functools
import queue
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra: opentelemetry-sdk")

import _agents as agents
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import gen_agent
from gen_agent import GenAgent, NoReply, Prompt, TurnError, otel, telemetry
from gen_agent._event import Event
from gen_agent.backend import BackendError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.otel import _usage_attributes
from gen_agent.telemetry import TURN_ERROR, TURN_START, TelemetryRecorder

T = 5.0  # seconds: the bound of every wait in this file
CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result"}


class Agent(GenAgent):
    """Scripts from the start options; `retry` makes handle_error retry once with a Prompt."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts.get("scripts", []), "session_id": "sess-1"}, {
            "retry": opts.get("retry", False)}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        if state["retry"]:
            return Prompt("try again", {"retry": False})
        return NoReply(state)


class Otel:
    """An SDK tracer and meter provider with in-memory exporters."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("test")

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        matching = [s for s in self.spans() if s.name == name]
        assert len(matching) == 1, [s.name for s in self.spans()]
        return matching[0]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def sdk() -> Iterator[Otel]:
    providers = Otel()
    yield providers
    otel.uninstrument()
    providers.shutdown()


@pytest.fixture
def instrumented(sdk: Otel) -> Otel:
    otel.instrument(tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider)
    return sdk


start = functools.partial(agents.start, Agent)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def turn_attrs(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes without the per-run values (ref, timings)."""
    found = attrs(span)
    assert found.pop("gen_agent.request.ref").count("-") == 1
    assert found.pop("gen_agent.turn.queue_wait_ms") >= 0
    backend_ms = found.pop("gen_agent.turn.backend_duration_ms", 0)
    assert type(backend_ms) is int and backend_ms >= 0
    return found


USAGE = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3,
         "cache_creation_input_tokens": 2}


def test_a_successful_turn_is_an_invoke_agent_span_under_the_callers_span(
        instrumented: Otel) -> None:
    ref = start(scripts=[mock.text_turn("SECRET-reply", usage=USAGE, model="claude-x",
                                        session_id="sess-1")])
    with instrumented.tracer.start_as_current_span("caller") as caller:
        response = ref.ask("SECRET-prompt", timeout=T)
    assert response.text == "SECRET-reply"

    span = instrumented.span("invoke_agent a")
    assert span.kind is SpanKind.INTERNAL
    assert span.parent is not None and span.parent.span_id == caller.get_span_context().span_id
    assert span.context.trace_id == caller.get_span_context().trace_id
    assert span.status.status_code is StatusCode.UNSET
    assert turn_attrs(span) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "gen_agent.mock",
        "gen_ai.agent.name": "a",
        "gen_ai.conversation.id": "sess-1",
        "gen_ai.response.model": "claude-x",
        "gen_ai.usage.input_tokens": 15,  # the cache tokens included, as the conventions ask
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 3,
        "gen_ai.usage.cache_creation.input_tokens": 2,
        "gen_agent.turn.attempt": 1,
        "gen_agent.turn.origin": "ask",
    }
    assert attrs(span)["gen_agent.request.ref"] == response_ref(span)
    assert span.links == ()
    assert "SECRET" not in repr(attrs(span))


def response_ref(span: ReadableSpan) -> str:
    value = attrs(span)["gen_agent.request.ref"]
    assert isinstance(value, str)
    return value


def test_the_turn_metrics_follow_the_conventions(instrumented: Otel) -> None:
    ref = start(scripts=[mock.text_turn("hi", usage=USAGE, model="claude-x")])
    ref.ask("q", timeout=T)

    common = {"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "gen_agent.mock",
              "gen_ai.agent.name": "a", "gen_ai.response.model": "claude-x"}
    tokens = {p.attributes["gen_ai.token.type"]: p for p in
              instrumented.points("gen_ai.client.token.usage")}
    assert {k: (p.sum, p.count) for k, p in tokens.items()} == {"input": (15, 1),
                                                                 "output": (5, 1)}
    client = {k: v for k, v in common.items() if k != "gen_ai.agent.name"}  # as the conventions
    assert dict(tokens["input"].attributes) == {**client, "gen_ai.token.type": "input"}
    assert dict(tokens["output"].attributes) == {**client, "gen_ai.token.type": "output"}
    for name, expected in (("gen_ai.invoke_agent.duration", common),
                           ("gen_ai.client.operation.duration", client)):
        (point,) = instrumented.points(name)
        assert dict(point.attributes) == expected and point.count == 1
        assert 0 <= point.sum < T
    (turns,) = instrumented.points("gen_agent.turns")
    assert dict(turns.attributes) == {**common, "gen_agent.turn.outcome": "ok"}
    assert turns.value == 1


def test_a_failed_turn_has_error_status_and_error_type(instrumented: Otel) -> None:
    reason = BackendError("anthropic", "rate_limited", retryable=True, status=429,
                          message="SECRET message")
    ref = start(scripts=[mock.error(reason)])
    with (instrumented.tracer.start_as_current_span("caller") as caller,
          pytest.raises(TurnError) as info):
        ref.ask("q", timeout=T)
    assert info.value.reason == reason

    span = instrumented.span("invoke_agent a")
    assert span.parent is not None and span.parent.span_id == caller.get_span_context().span_id
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is None
    assert turn_attrs(span) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "gen_agent.mock",
        "gen_ai.agent.name": "a",
        "gen_agent.turn.attempt": 1,
        "gen_agent.turn.origin": "ask",
        "error.type": "rate_limited",
        "gen_agent.turn.reason_kind": "backend_or_callback_error",
    }
    assert "SECRET" not in repr(attrs(span))
    (turns,) = instrumented.points("gen_agent.turns")
    assert turns.attributes["gen_agent.turn.outcome"] == "error"
    assert turns.attributes["error.type"] == "rate_limited"


def test_a_retry_is_a_sibling_span_linked_to_the_first_attempt(instrumented: Otel) -> None:
    ref = start(retry=True, scripts=[mock.error("boom"), mock.text_turn("ok")])
    with instrumented.tracer.start_as_current_span("caller") as caller:
        assert ref.ask("q", timeout=T).text == "ok"

    first, second = sorted((s for s in instrumented.spans() if s.name == "invoke_agent a"),
                           key=lambda s: attrs(s)["gen_agent.turn.attempt"])
    caller_id = caller.get_span_context().span_id
    assert first.parent is not None and first.parent.span_id == caller_id
    assert second.parent is not None and second.parent.span_id == caller_id
    assert (attrs(first)["gen_agent.turn.attempt"], attrs(second)["gen_agent.turn.attempt"]) == (
        1, 2)
    assert attrs(first)["gen_agent.request.ref"] == attrs(second)["gen_agent.request.ref"]
    assert first.status.status_code is StatusCode.ERROR
    assert attrs(first)["error.type"] == "_OTHER"  # a backend's own string names nothing safe
    assert second.status.status_code is StatusCode.UNSET
    assert first.links == ()
    (link,) = second.links
    assert link.context.span_id == first.context.span_id
    assert dict(link.attributes or {}) == {"gen_agent.link.type": "retry_of"}


def tool_script(prompt: str) -> list[Event]:
    # Built in the turn task, so the events are stamped while the turn runs.
    return [
        Event.new("tool_use", {"id": "t1", "name": "Bash", "input": {"command": "ls SECRET"}}),
        Event.new("tool_result", {"tool_use_id": "t1", "content": "SECRET-out",
                                  "is_error": False}),
        Event.new("tool_use", {"id": "t2", "name": "Read", "input": {"path": "/SECRET"}}),
        Event.new("tool_result", {"tool_use_id": "t2", "content": "no such file",
                                  "is_error": True}),
        Event.new("text", {"text": "done"}),
        Event.new("result", {"text": "done"}),
    ]


def test_each_tool_call_is_an_execute_tool_child_span(instrumented: Otel) -> None:
    ref = start(scripts=[tool_script])
    ref.ask("q", timeout=T)

    turn = instrumented.span("invoke_agent a")
    bash, read = instrumented.span("execute_tool Bash"), instrumented.span("execute_tool Read")
    for tool, call_id in ((bash, "t1"), (read, "t2")):
        assert tool.kind is SpanKind.INTERNAL
        assert tool.parent is not None and tool.parent.span_id == turn.context.span_id
        assert tool.context.trace_id == turn.context.trace_id
        assert attrs(tool) == {"gen_ai.operation.name": "execute_tool",
                               "gen_ai.tool.name": tool.name.split()[1],
                               "gen_ai.tool.call.id": call_id} | (
            {"error.type": "tool_error"} if call_id == "t2" else {})
        # Timed from the events (monotonic ms, so within a millisecond of the turn's bounds).
        assert tool.start_time is not None and tool.end_time is not None
        assert turn.start_time is not None and turn.end_time is not None
        assert turn.start_time - 1_000_000 <= tool.start_time <= tool.end_time <= turn.end_time
    assert bash.status.status_code is StatusCode.UNSET
    assert read.status.status_code is StatusCode.ERROR
    assert not any("SECRET" in repr(attrs(s)) for s in instrumented.spans())


def test_content_is_recorded_only_with_capture_content(sdk: Otel) -> None:
    otel.instrument(tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider,
                    capture_content=True)
    ref = start(scripts=[tool_script])
    ref.ask("SECRET-prompt", timeout=T)

    turn = attrs(sdk.span("invoke_agent a"))
    assert turn["gen_ai.input.messages"] == (
        '[{"role":"user","parts":[{"type":"text","content":"SECRET-prompt"}]}]')
    assert turn["gen_ai.output.messages"] == (
        '[{"role":"assistant","parts":[{"type":"text","content":"done"},'
        '{"type":"tool_call","id":"t1","name":"Bash","arguments":{"command":"ls SECRET"}},'
        '{"type":"tool_call","id":"t2","name":"Read","arguments":{"path":"/SECRET"}}],'
        '"finish_reason":"stop"}]')
    bash = attrs(sdk.span("execute_tool Bash"))
    assert bash["gen_ai.tool.call.arguments"] == '{"command":"ls SECRET"}'
    assert bash["gen_ai.tool.call.result"] == '"SECRET-out"'


def test_no_content_attribute_without_capture_content(instrumented: Otel) -> None:
    ref = start(scripts=[tool_script, mock.error("SECRET-reason")])
    ref.ask("SECRET-prompt", timeout=T)
    with pytest.raises(TurnError):
        ref.ask("SECRET-prompt-2", timeout=T)

    spans = instrumented.spans()
    assert len(spans) == 4  # two turns, two tools
    for span in spans:
        assert not CONTENT_KEYS & set(attrs(span))
        assert "SECRET" not in repr(attrs(span)) + repr(span.status) + span.name
        assert span.events == ()


def test_an_interrupted_turn_ends_its_span_with_error_type_interrupted(
        instrumented: Otel) -> None:
    g = mock.gate(mock.text_turn("never"))
    ref = start(scripts=[g])
    with TelemetryRecorder([TURN_ERROR]) as rec:
        with instrumented.tracer.start_as_current_span("caller") as caller:
            request = ref.tell("q", timeout=T)
        g.wait_blocked(T)
        ref.interrupt()
        rec.wait_for(TURN_ERROR, timeout=T)  # attached after otel: its handler ran first

    span = instrumented.span("invoke_agent a")
    assert span.parent is not None and span.parent.span_id == caller.get_span_context().span_id
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "interrupted"
    assert attrs(span)["gen_agent.turn.reason_kind"] == "interrupted"
    assert attrs(span)["gen_agent.turn.origin"] == "tell"
    assert attrs(span)["gen_agent.request.ref"] == request.id


def test_a_turn_still_running_when_its_agent_stops_ends_its_span(instrumented: Otel) -> None:
    g = mock.gate(mock.text_turn("never"))
    ref = start(scripts=[g])
    ref.tell("q", timeout=T)
    g.wait_blocked(T)
    gen_agent.stop("a")

    span = instrumented.span("invoke_agent a")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "agent_terminated"


def test_a_follow_up_keeps_the_callers_parent_and_an_event_turn_starts_a_trace(
        instrumented: Otel) -> None:
    class Chaining(Agent):
        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            return Prompt("follow up", state) if response.text == "1" else NoReply(state)

        def handle_event(self, event: Any, state: Any) -> Any:
            return Prompt("from an event", state)

    gen_agent.start_agent(Chaining, name="c", backend=MockBackend,
                          scripts=[mock.text_turn("1"), mock.text_turn("2"),
                                   mock.text_turn("3")])
    with TelemetryRecorder([telemetry.TURN_STOP]) as rec:
        with instrumented.tracer.start_as_current_span("caller") as caller:
            gen_agent.ask("c", "q", timeout=T)
            rec.wait_for(lambda r: r.metadata["origin"] == "self_chain", timeout=T)
            gen_agent.notify("c", "tick")
        rec.wait_for(lambda r: r.metadata["origin"] == "event", timeout=T)

    by_origin = {attrs(s)["gen_agent.turn.origin"]: s for s in instrumented.spans()
                 if s.name == "invoke_agent c"}
    caller_id = caller.get_span_context().span_id
    for origin in ("ask", "self_chain"):  # a follow-up inherits the request's options
        parent = by_origin[origin].parent
        assert parent is not None and parent.span_id == caller_id
    assert by_origin["event"].parent is None  # a notification has no caller


def test_an_explicit_parent_travels_in_the_request_options(instrumented: Otel) -> None:
    from opentelemetry import trace

    ref = start(scripts=[mock.text_turn("x")])
    with instrumented.tracer.start_as_current_span("elsewhere") as elsewhere:
        parent = trace.set_span_in_context(elsewhere)
    with instrumented.tracer.start_as_current_span("caller"):
        ref.ask("q", timeout=T, options=gen_agent.RequestOptions(trace_context=parent))

    span = instrumented.span("invoke_agent a")
    assert span.parent is not None
    assert span.parent.span_id == elsewhere.get_span_context().span_id


def test_queue_depth_rejections_and_cancellations_are_metrics(instrumented: Otel) -> None:
    g = mock.gate(mock.text_turn("x"))
    ref = start(scripts=[g, mock.text_turn("y")], max_pending_prompts=1)
    ref.tell("first", timeout=T)
    g.wait_blocked(T)
    queued = ref.tell("queued", timeout=T)
    with pytest.raises(TurnError):
        ref.tell("overflow", timeout=T)
    assert ref.cancel_request(queued, timeout=T) == "cancelled"
    with TelemetryRecorder([telemetry.TURN_STOP]) as rec:
        g.release()
        rec.wait_for(telemetry.TURN_STOP, timeout=T)  # attached after otel: it ran first

    depths = instrumented.points("gen_agent.queue.depth")
    assert [(dict(p.attributes), p.value) for p in depths] == [({"gen_ai.agent.name": "a"}, 0)]
    outcomes = {(p.attributes["gen_agent.turn.outcome"],
                 p.attributes.get("gen_agent.turn.reason_kind")): p.value
                for p in instrumented.points("gen_agent.turns")}
    assert outcomes == {("ok", None): 1, ("rejected", "overloaded"): 1,
                        ("cancelled", "caller_cancelled"): 1}


def test_supervisor_restarts_are_counted(instrumented: Otel) -> None:
    class Crashing(Agent):
        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            raise RuntimeError("crash")

    spec = gen_agent.child_spec(Crashing, name="w", backend=MockBackend, restart="permanent",
                                scripts=[mock.text_turn("x")])
    sup = gen_agent.Supervisor([spec], name="sup")
    try:
        with TelemetryRecorder([telemetry.SUPERVISOR_RESTART]) as rec:
            with pytest.raises(gen_agent.AgentDown):  # handle_response crashed: it stops
                gen_agent.ask("w", "q", timeout=T)
            rec.wait_for(telemetry.SUPERVISOR_RESTART, timeout=T)
    finally:
        sup.stop()
    (point,) = instrumented.points("gen_agent.supervisor.restarts")
    assert dict(point.attributes) == {"gen_agent.supervisor.name": "sup",
                                      "gen_agent.child.id": "w"}
    assert point.value == 1


def test_the_turn_carries_its_trace_context_to_the_backend(instrumented: Otel) -> None:
    seen: queue.Queue[Any] = queue.Queue()

    class Recording(MockBackend):
        @classmethod
        def prompt(cls, session: Any, prompt: str, context: Any) -> Any:
            seen.put((dict(context.trace_carrier), context.trace_env()))
            return super().prompt(session, prompt, context)

    gen_agent.start_agent(Agent, name="r", backend=Recording, scripts=[mock.text_turn("x")])
    gen_agent.ask("r", "q", timeout=T)

    carrier, env = seen.get(timeout=T)
    span = instrumented.span("invoke_agent r")
    trace_id = format(span.context.trace_id, "032x")
    span_id = format(span.context.span_id, "016x")
    flags = format(span.context.trace_flags, "02x")
    assert carrier == {"traceparent": f"00-{trace_id}-{span_id}-{flags}"}
    assert env == {"TRACEPARENT": f"00-{trace_id}-{span_id}-{flags}"}
    assert attrs(span)["gen_ai.provider.name"] == "Recording"


def test_nothing_is_emitted_when_not_instrumented(sdk: Otel) -> None:
    seen: queue.Queue[Any] = queue.Queue()

    class Recording(MockBackend):
        @classmethod
        def prompt(cls, session: Any, prompt: str, context: Any) -> Any:
            seen.put(dict(context.trace_carrier))
            return super().prompt(session, prompt, context)

    otel.instrument(tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider)
    otel.uninstrument()
    assert not otel.instrumented()
    assert all(h.id != ("gen_agent.otel", "instrumentation") for h in telemetry.list_handlers())
    gen_agent.start_agent(Agent, name="n", backend=Recording, scripts=[mock.text_turn("x")])
    with TelemetryRecorder([TURN_START]) as rec, sdk.tracer.start_as_current_span("caller"):
        gen_agent.ask("n", "q", timeout=T)
    assert [s.name for s in sdk.spans()] == ["caller"]
    assert sdk.points("gen_ai.client.token.usage") == []
    assert sdk.points("gen_agent.turns") == []
    assert seen.get(timeout=T) == {}
    assert rec.named(TURN_START)[0].metadata["trace_context"] is None


def test_instrument_twice_replaces_the_handler(sdk: Otel) -> None:
    otel.instrument(tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider)
    otel.instrument(tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider)
    start(scripts=[mock.text_turn("x")]).ask("q", timeout=T)
    assert [s.name for s in sdk.spans()] == ["invoke_agent a"]


@pytest.mark.parametrize(("usage", "expected"), [
    (None, {}),
    ({"input_tokens": 10, "output_tokens": 2}, {"gen_ai.usage.input_tokens": 10,
                                                 "gen_ai.usage.output_tokens": 2}),
    # OpenAI Responses: input includes the cached tokens already
    ({"input_tokens": 10, "output_tokens": 2, "cached_tokens": 4},
     {"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2,
      "gen_ai.usage.cache_read.input_tokens": 4}),
    # Codex CLI
    ({"input_tokens": 10, "cached_input_tokens": 6, "output_tokens": 1},
     {"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 1,
      "gen_ai.usage.cache_read.input_tokens": 6}),
    # Anthropic: input excludes the cache, which is added
    ({"input_tokens": 1, "cache_read_input_tokens": 7, "output_tokens": 3},
     {"gen_ai.usage.input_tokens": 8, "gen_ai.usage.output_tokens": 3,
      "gen_ai.usage.cache_read.input_tokens": 7}),
    ({"input_tokens": "many", "output_tokens": True}, {}),
])
def test_usage_maps_to_the_conventions_token_attributes(usage: Any,
                                                       expected: dict[str, int]) -> None:
    assert _usage_attributes(usage) == expected


def test_a_pool_task_is_parented_by_the_submitting_thread(instrumented: Otel) -> None:
    pool = gen_agent.Pool(Agent, size=1, backend=MockBackend, name_prefix="w",
                          scripts=[mock.text_turn("x")])
    try:
        with instrumented.tracer.start_as_current_span("submitter") as submitter:
            task = pool.submit("q")  # dispatched later by the pool's own thread
        assert pool.result(task, timeout=T).text == "x"
    finally:
        pool.stop()
    (span,) = [s for s in instrumented.spans() if s.name.startswith("invoke_agent")]
    assert span.parent is not None
    assert span.parent.span_id == submitter.get_span_context().span_id


def test_an_aio_ask_is_parented_by_the_awaiting_tasks_span(instrumented: Otel) -> None:
    import asyncio

    from gen_agent import aio

    start(scripts=[mock.text_turn("x"), mock.text_turn("y")])

    async def main() -> tuple[int, int]:
        with instrumented.tracer.start_as_current_span("ask") as asking:
            assert (await aio.ask("a", "q", timeout=T)).text == "x"
        with instrumented.tracer.start_as_current_span("tell") as telling:
            await aio.tell_with_completion("a", "q", queue.Queue(), timeout=T)
        return asking.get_span_context().span_id, telling.get_span_context().span_id

    with TelemetryRecorder([telemetry.TURN_STOP]) as rec:
        ask_id, tell_id = asyncio.run(main())
        rec.wait_for(lambda r: r.metadata["origin"] == "tell", timeout=T)
    parents = {attrs(s)["gen_agent.turn.origin"]: s.parent for s in instrumented.spans()
               if s.name == "invoke_agent a"}
    assert parents["ask"] is not None and parents["ask"].span_id == ask_id
    assert parents["tell"] is not None and parents["tell"].span_id == tell_id


def test_the_turn_span_is_current_while_the_backend_runs(instrumented: Otel) -> None:
    tracer = instrumented.tracer

    class ClientLibrary(MockBackend):
        """Stands for an instrumented HTTP client: it opens a span of its own per call."""

        @classmethod
        def prompt(cls, session: Any, prompt: str, context: Any) -> Any:
            with tracer.start_as_current_span("POST /v1/messages"):
                return super().prompt(session, prompt, context)

    gen_agent.start_agent(Agent, name="h", backend=ClientLibrary, scripts=[mock.text_turn("x")])
    gen_agent.ask("h", "q", timeout=T)
    otel.uninstrument()
    gen_agent.start_agent(Agent, name="u", backend=ClientLibrary, scripts=[mock.text_turn("x")])
    gen_agent.ask("u", "q", timeout=T)  # not instrumented: the client's span is a root

    turn = instrumented.span("invoke_agent h")
    first, second = [s for s in instrumented.spans() if s.name == "POST /v1/messages"]
    assert first.parent is not None and first.parent.span_id == turn.context.span_id
    assert first.context.trace_id == turn.context.trace_id
    assert second.parent is None


def test_instrumented_without_an_sdk_provider_nothing_is_recorded_or_propagated() -> None:
    seen: queue.Queue[Any] = queue.Queue()

    class Recording(MockBackend):
        @classmethod
        def prompt(cls, session: Any, prompt: str, context: Any) -> Any:
            seen.put(dict(context.trace_carrier))
            return super().prompt(session, prompt, context)

    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    # What an application without an SDK gets from the global providers: no-op ones.
    otel.instrument(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
    try:
        gen_agent.start_agent(Agent, name="q", backend=Recording,
                              scripts=[mock.text_turn("x"), mock.error("e")])
        assert gen_agent.ask("q", "q", timeout=T).text == "x"
        with pytest.raises(TurnError):
            gen_agent.ask("q", "q", timeout=T)
    finally:
        otel.uninstrument()
    assert seen.get(timeout=T) == {}  # an invalid (no-op) span context is not injected

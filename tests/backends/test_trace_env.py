"""The turn's trace context reaches the CLIs (docs/pages/observability.md): the bundled CLI
backends put `TurnContext.trace_carrier` in the child's environment as `TRACEPARENT` /
`TRACESTATE`, which both CLIs read; an instrumented agent passes its turn span's context."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import gen_agent
from gen_agent.backend import TurnContext
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.backends.codex import CodexCLI

from .conftest import Agent, FakeClaude, FakeCodex, run_turn

T = 10.0  # seconds: the bound of every wait in this file
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class TracedTurn:
    """A hand-built TurnContext carrying a trace context (as `run_turn` expects)."""

    def __init__(self, carrier: dict[str, str]) -> None:
        self.checkpoints: list[str] = []
        self.context = TurnContext(agent="a", ref="r", attempt=1,
                                   cancel_event=threading.Event(),
                                   checkpoint=self.checkpoints.append, trace_carrier=carrier)


def test_trace_env_upper_cases_the_carrier() -> None:
    turn = TracedTurn({"traceparent": TRACEPARENT, "tracestate": "k=v", "x-custom": "1"})
    assert turn.context.trace_env() == {"TRACEPARENT": TRACEPARENT, "TRACESTATE": "k=v",
                                        "X_CUSTOM": "1"}
    assert TracedTurn({}).context.trace_env() == {}
    with pytest.raises(TypeError):
        turn.context.trace_carrier["traceparent"] = "changed"  # type: ignore[index]


def test_codex_gets_traceparent_and_tracestate(fake_codex: FakeCodex) -> None:
    session = CodexCLI.start_session(fake_codex.options())
    run_turn(CodexCLI, session, "hello",
             TracedTurn({"traceparent": TRACEPARENT, "tracestate": "k=v"}))  # type: ignore[arg-type]
    run_turn(CodexCLI, session, "untraced")

    traced, untraced = fake_codex.calls()
    assert {k: v for k, v in traced["env"].items() if k.startswith("TRACE")} == {
        "TRACEPARENT": TRACEPARENT, "TRACESTATE": "k=v"}
    assert not any(k.startswith("TRACE") for k in untraced["env"])


def test_claude_gets_traceparent(fake_claude: FakeClaude) -> None:
    session = ClaudeCLI.start_session(fake_claude.options())
    run_turn(ClaudeCLI, session, "hello", TracedTurn({"traceparent": TRACEPARENT}))  # type: ignore[arg-type]
    run_turn(ClaudeCLI, session, "untraced")

    traced, untraced = fake_claude.calls()
    assert "TRACEPARENT" in traced["env_keys"] and "TRACESTATE" not in traced["env_keys"]
    assert "TRACEPARENT" not in untraced["env_keys"]


def test_an_instrumented_agent_passes_its_turn_span_to_the_cli(fake_codex: FakeCodex) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="needs the test extra: opentelemetry-sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gen_agent import otel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument(tracer_provider=provider)
    try:
        gen_agent.start_agent(Agent, name="codex", backend=CodexCLI,
                              backend_opts=fake_codex.options())
        gen_agent.ask("codex", "hello", timeout=T)
    finally:
        otel.uninstrument()
        provider.shutdown()

    (span,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent codex"]
    ctx: Any = span.context
    expected = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    assert fake_codex.calls()[0]["env"]["TRACEPARENT"] == expected
    assert dict(span.attributes or {})["gen_ai.provider.name"] == "openai"

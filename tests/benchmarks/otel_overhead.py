"""7. OpenTelemetry overhead (issue 24): the `ask` round trip with `gen_agent.otel` instrumented
(the SDK's tracer and meter providers, a simple span processor with an exporter that drops
every span, an in-memory metric reader that is never collected) against the same agent not
instrumented, in interleaved rounds.

Two backends: a loopback `AnthropicAPI` turn (the official SDK against the embedded
`ScriptedModelServer` on 127.0.0.1): the target, <= 1.3x; and the `MockBackend` (no I/O: the
instrumentation's whole cost shows), reported without a target. Without the OpenTelemetry SDK
the figures are n/a.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._common import BenchAgent
from ._harness import figure, latency_us, time_calls_us

NAME = "otel_overhead"
TITLE = "7. OpenTelemetry overhead (instrumented / not, ask round trip)"
ORDER = 70
FULL: dict[str, Any] = {"mock_calls": 500, "api_calls": 100, "rounds": 7}
SMOKE: dict[str, Any] = {"mock_calls": 10, "api_calls": 3, "rounds": 2}
README = ("api_traced", "mock_traced")
_NO_SDK = "opentelemetry-sdk is not installed (the test extra has it)"


def _providers() -> tuple[Any, Any] | None:
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:
        return None

    class DropExporter(SpanExporter):
        """A no-op exporter: every span is built, processed and dropped."""

        def export(self, spans: Any) -> Any:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A mock agent, an AnthropicAPI agent on a loopback scripted server, SDK providers."""
    from gen_agent.backends.anthropic import AnthropicAPI
    from gen_agent.testing import Reply, ScriptedModelServer

    providers = _providers()
    turn = mock.text_turn("ok", usage={"input_tokens": 3, "output_tokens": 1}, model="m")
    scripts = [turn] * (2 * (params["rounds"] + 1) * params["mock_calls"])
    with gen_agent.AgentSystem(), ScriptedModelServer(default=Reply.text("ok")) as server:
        env: dict[str, Any] = {
            "providers": providers,
            "notes": {},
            "mock": gen_agent.start_agent(BenchAgent, name="bench-otel-mock",
                                          backend=MockBackend,
                                          backend_opts={"scripts": scripts}),
            "api": gen_agent.start_agent(
                BenchAgent, name="bench-otel-api", backend=AnthropicAPI,
                backend_opts={"base_url": server.url, "api_key": "bench",
                              "model": "bench-model", "max_history_messages": 2}),
        }
        try:
            yield env
        finally:
            env["api"].stop()  # before the server closes
            if providers is not None:
                for provider in providers:
                    provider.shutdown()


def _round(env: dict[str, Any], agent: str, calls: int, traced: bool, key: str) -> Any:
    providers = env["providers"]
    if providers is None:
        env["notes"][key] = _NO_SDK
        return None
    ref = env[agent]
    if not traced:
        return latency_us(time_calls_us(lambda: ref.ask("x", timeout=30), calls))
    from gen_agent import otel

    otel.instrument(tracer_provider=providers[0], meter_provider=providers[1])
    try:
        return latency_us(time_calls_us(lambda: ref.ask("x", timeout=30), calls))
    finally:
        otel.uninstrument()


@figure(unit="us", label="AnthropicAPI loopback ask, not instrumented",
        note="the official SDK against ScriptedModelServer on 127.0.0.1")
def api_plain(env: dict[str, Any], params: dict[str, Any]) -> Any:
    """One round of uninstrumented AnthropicAPI asks."""
    return _round(env, "api", params["api_calls"], False, "api_plain")


@figure(unit="us", label="AnthropicAPI loopback ask, instrumented", peer="api_plain",
        target="<= 1.3", note="SDK tracer + meter, simple span processor, no-op exporter")
def api_traced(env: dict[str, Any], params: dict[str, Any]) -> Any:
    """One round of instrumented AnthropicAPI asks."""
    return _round(env, "api", params["api_calls"], True, "api_traced")


@figure(unit="us", label="MockBackend ask, not instrumented")
def mock_plain(env: dict[str, Any], params: dict[str, Any]) -> Any:
    """One round of uninstrumented mock asks."""
    return _round(env, "mock", params["mock_calls"], False, "mock_plain")


@figure(unit="us", label="MockBackend ask, instrumented", peer="mock_plain",
        note="no I/O: the instrumentation's whole cost (reported, no target)")
def mock_traced(env: dict[str, Any], params: dict[str, Any]) -> Any:
    """One round of instrumented mock asks."""
    return _round(env, "mock", params["mock_calls"], True, "mock_traced")

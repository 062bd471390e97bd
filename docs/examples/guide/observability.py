"""Observability: every turn an OpenTelemetry span, printed by the console exporter.

Needs the OpenTelemetry SDK (`pip install 'gen-agent[otel]' opentelemetry-sdk`; the test
extra has it). Run it: `python docs/examples/guide/observability.py`.
"""

from __future__ import annotations

import sys
from typing import TextIO

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent._event import Event
from gen_agent.backends.mock import MockBackend


class Assistant(GenAgent):
    def init_agent(self, opts):
        return opts["backend_opts"], None

    def handle_response(self, ref, response, state):
        return NoReply(state)


def a_tool_turn(prompt):
    # What a CLI backend streams when the model runs a tool: a call, its result, the answer.
    return [
        Event.new("tool_use", {"id": "call-1", "name": "Bash", "input": {"command": "ls"}}),
        Event.new("tool_result", {"tool_use_id": "call-1", "content": "README.md"}),
        Event.new("usage", {"input_tokens": 120, "output_tokens": 14}),
        Event.new("result", {"text": "There is one file: README.md.", "model": "mock-1",
                             "session_id": "session-42", "stop_reason": "end_turn"}),
    ]


def main(out: TextIO = sys.stdout) -> None:
    # --8<-- [start:setup]
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    from gen_agent import otel

    provider = TracerProvider()  # your application's provider (gen_agent never sets one)
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
    otel.instrument(tracer_provider=provider)  # capture_content=False: no prompts, no text
    tracer = provider.get_tracer("my-app")
    try:
        with gen_agent.AgentSystem():
            agent = gen_agent.start_agent(Assistant, name="assistant", backend=MockBackend,
                                          backend_opts={"scripts": [a_tool_turn]})
            with tracer.start_as_current_span("handle request"):  # the caller's span...
                agent.ask("What is in this folder?", timeout=30)  # ...parents the turn's
    finally:
        otel.uninstrument()
        provider.shutdown()
    # --8<-- [end:setup]


if __name__ == "__main__":
    main()

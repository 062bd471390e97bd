"""The observability guide's example (docs/examples/guide/observability.py): the console
exporter prints the caller's span, the turn's `invoke_agent` span under it and the tool's
`execute_tool` span under that, with no prompt or response text."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra: opentelemetry-sdk")

from ._loader import EXAMPLES, load_example

observability = load_example("guide/observability")


def _spans(text: str) -> dict[str, dict[str, Any]]:
    decoder, spans, at = json.JSONDecoder(), {}, 0
    while at < len(text.rstrip()):
        while text[at].isspace():
            at += 1
        span, at = decoder.raw_decode(text, at)
        spans[span["name"]] = span
    return spans


def test_it_prints_the_turn_and_tool_spans_under_the_callers_span() -> None:
    out = io.StringIO()
    observability.main(out)
    spans = _spans(out.getvalue())

    assert set(spans) == {"handle request", "invoke_agent assistant", "execute_tool Bash"}
    caller, turn, tool = (spans[n] for n in ("handle request", "invoke_agent assistant",
                                             "execute_tool Bash"))
    assert turn["parent_id"] == caller["context"]["span_id"]
    assert tool["parent_id"] == turn["context"]["span_id"]
    assert turn["kind"] == tool["kind"] == "SpanKind.INTERNAL"
    assert {k: turn["attributes"][k] for k in (
        "gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.conversation.id",
        "gen_ai.response.model", "gen_ai.response.finish_reasons",
        "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "assistant",
        "gen_ai.conversation.id": "session-42", "gen_ai.response.model": "mock-1",
        "gen_ai.response.finish_reasons": ["end_turn"], "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 14}
    assert tool["attributes"] == {"gen_ai.operation.name": "execute_tool",
                                  "gen_ai.tool.name": "Bash", "gen_ai.tool.call.id": "call-1"}
    assert "folder" not in out.getvalue() and "README" not in out.getvalue()  # no content


def test_it_runs_as_a_script() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "guide" / "observability.py")],
                          capture_output=True, text=True, timeout=60, check=True)
    assert set(_spans(done.stdout)) == {"handle request", "invoke_agent assistant",
                                        "execute_tool Bash"}

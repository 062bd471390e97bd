"""The OpenAI Responses API of `gen_agent.server`, driven by the official openai SDK."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.server.conftest import TOKEN_A, Served, openai, serving

T = 15


def test_a_response_runs_one_turn_of_the_models_host(served: Served) -> None:
    client = served.client()
    response = client.responses.create(model="chat", input="hello")
    assert response.status == "completed"
    assert response.model == "chat"
    assert response.output_text == f"a/{response.id}#1: hello"  # the key is in the tenant
    assert [item.type for item in response.output] == ["message"]
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (4, 3)
    again = client.responses.retrieve(response.id)
    assert again.output_text == response.output_text and again.status == "completed"


def test_previous_response_id_continues_only_from_the_latest(served: Served) -> None:
    client = served.client()
    first = client.responses.create(model="chat", input="one")
    second = client.responses.create(model="chat", input="two", previous_response_id=first.id)
    assert second.output_text == f"a/{first.id}#2: two"  # the same key, its second turn
    with pytest.raises(openai.BadRequestError) as fork:
        client.responses.create(model="chat", input="fork", previous_response_id=first.id)
    assert fork.value.code == "previous_response_not_latest"
    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.create(model="chat", input="x", previous_response_id="resp_nope")
    assert missing.value.code == "previous_response_not_found"


def test_a_conversation_id_is_the_key(served: Served) -> None:
    client = served.client()
    one = client.responses.create(model="chat", input="p", conversation="c-1")
    two = client.responses.create(model="chat", input="q", conversation={"id": "c-1"})
    assert one.output_text == "a/conv_c-1#1: p" and two.output_text == "a/conv_c-1#2: q"
    assert two.conversation is not None and two.conversation.id == "c-1"


def test_a_stream_carries_ids_and_builds_the_same_response(served: Served) -> None:
    client = served.client()
    with client.responses.stream(model="chat", input="streamed") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == f"a/{final.id}#1: streamed"
    # the raw stream: SSE ids equal the sequence numbers
    with httpx.stream("GET", f"{served.url}/v1/responses/{final.id}?stream=true",
                      headers={"Authorization": f"Bearer {TOKEN_A}"}, timeout=T) as raw:
        ids = [int(line[4:]) for line in raw.iter_lines() if line.startswith("id: ")]
    assert ids == [e.sequence_number for e in events]


def test_a_reconnect_continues_after_the_last_event_id(served: Served) -> None:
    gate, entered = served.model.gate("resumable")
    client = served.client()
    seen: list[Any] = []
    with client.responses.create(model="chat", input="resumable", stream=True) as stream:
        for event in stream:
            seen.append(event)
            if event.type == "response.in_progress":
                break  # the connection drops here
    rid = seen[0].response.id
    assert entered.wait(T)
    gate.set()
    with httpx.stream("GET", f"{served.url}/v1/responses/{rid}?stream=true",
                      headers={"Authorization": f"Bearer {TOKEN_A}",
                               "Last-Event-ID": str(seen[-1].sequence_number)},
                      timeout=T) as raw:
        rest = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    numbers = [e["sequence_number"] for e in rest]
    assert numbers == list(range(seen[-1].sequence_number + 1, numbers[-1] + 1))
    assert rest[-1]["type"] == "response.completed"
    again = list(client.responses.retrieve(rid, stream=True, starting_after=0))
    assert [e.sequence_number for e in again] == list(range(1, numbers[-1] + 1))


def test_background_then_cancel_interrupts_the_running_turn(served: Served) -> None:
    gate, entered = served.model.gate("long-running")
    client = served.client()
    running = client.responses.create(model="chat", input="long-running", background=True)
    assert running.status in ("queued", "in_progress")
    assert entered.wait(T)
    queued = client.responses.create(model="chat", input="queued one", background=True,
                                     previous_response_id=running.id)
    assert queued.status == "queued"
    cancelled_queued = client.responses.cancel(queued.id)  # cancel_request: never ran
    assert cancelled_queued.status == "cancelled"
    cancelled = client.responses.cancel(running.id)  # interrupt_request of the running one
    assert cancelled.status == "cancelled"
    gate.set()
    assert client.responses.retrieve(running.id).status == "cancelled"
    assert not any("queued one" in p for p in served.model.prompts)
    assert client.responses.cancel(running.id).status == "cancelled"  # idempotent
    done = client.responses.create(model="chat", input="finished")
    with pytest.raises(openai.BadRequestError) as late:
        client.responses.cancel(done.id)  # a completed response cannot be cancelled
    assert late.value.code == "not_cancellable"


def test_structured_output_follows_text_format(served: Served) -> None:
    client = served.client()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"format": {"type": "json_schema", "name": "Thing", "schema": schema}}
    bad = client.responses.create(model="chat", input='{"a": 1}', text=fmt)
    # the mock's reply starts with its key: not JSON, so the turn fails validation
    assert bad.status == "failed"
    assert bad.error is not None and "text.format" in bad.error.message
    assert bad.text is not None and bad.text.format.type == "json_schema"
    good = client.responses.create(model="chat", input='json:{"a": 1}', text=fmt)
    assert good.status == "completed" and json.loads(good.output_text) == {"a": 1}
    wrong = client.responses.create(model="chat", input='json:{"a": "one"}', text=fmt)
    assert wrong.status == "completed"  # the root type (an object) is what is validated
    listed = client.responses.create(model="chat", input='json:[1]', text=fmt)
    assert listed.status == "failed"


def test_agent_run_tools_are_items_with_their_own_output() -> None:
    from gen_agent import AgentHost, AgentSystem, GenAgent, NoReply
    from gen_agent.backends.mock import MockBackend, text_turn, tool_round
    from gen_agent.server import create_app
    from gen_agent.server._run import ServerThread
    from gen_agent.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two ints."""
        return a + b

    class Tooly(GenAgent):
        def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            return {"tools": [add], "fallback": tool_round(
                [("add", {"a": 2, "b": 3})], text_turn("five"))}, None

        def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
            return NoReply(state)

    with AgentSystem() as system, AgentHost(Tooly, backend=MockBackend,
                                            agent_system=system) as host:
        app = create_app({"tooly": host}, env={})
        with ServerThread(app) as thread:
            client = openai.OpenAI(base_url=thread.base_url + "/v1", api_key="-",
                                   max_retries=0)
            response = client.responses.create(model="tooly", input="2+3?")
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_call", "message"]
    call = response.output[0]
    assert call.name == "add" and json.loads(call.arguments) == {"a": 2, "b": 3}
    assert call.output == "5" and call.status == "completed" and call.server_label == "tooly"
    assert "function_call" not in kinds


def test_idempotency_key_replays_the_first_response(served: Served) -> None:
    client = served.client()
    headers = {"Idempotency-Key": "once-1"}
    first = client.responses.create(model="chat", input="only once", extra_headers=headers)
    second = client.responses.create(model="chat", input="only once", extra_headers=headers)
    assert second.id == first.id and second.output_text == first.output_text
    assert sum("only once" in p for p in served.model.prompts) == 1


def test_bad_requests_are_clear_400s(served: Served) -> None:
    client = served.client()
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="gpt-9", input="x")
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as tools:
        client.responses.create(model="chat", input="x", tools=[{
            "type": "function", "name": "f", "parameters": {}, "strict": False}])
    assert tools.value.code == "unsupported_parameter"
    with pytest.raises(openai.BadRequestError) as param:
        client.responses.create(model="chat", input="x", instructions="be brief")
    assert param.value.code == "unsupported_parameter"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="chat", input=[{"role": "system", "content": "x"}])
    models = [m.id for m in client.models.list()]
    assert models == ["chat"]


def test_a_busy_key_rejected_by_the_host_is_409() -> None:
    with serving(host_options={"busy": "reject"}) as served:
        gate, entered = served.model.gate("long-running")
        client = served.client()
        running = client.responses.create(model="chat", input="long-running", background=True)
        assert entered.wait(T)
        with pytest.raises(openai.ConflictError) as busy:
            client.responses.create(model="chat", input="second message",
                                    previous_response_id=running.id)
        assert busy.value.status_code == 409
        assert busy.value.code == "busy"
        gate.set()
        other = client.responses.create(model="chat", input="another key")  # a new key: idle
        assert other.status == "completed"
        assert not any("second message" in p for p in served.model.prompts)


def test_traceparent_becomes_the_turns_parent(served: Served) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gen_agent import otel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument(tracer_provider=provider)
    try:
        trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
        served.client().responses.create(
            model="chat", input="traced",
            extra_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    finally:
        otel.uninstrument()
        provider.shutdown()
    spans = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert len(spans) == 1
    assert f"{spans[0].context.trace_id:032x}" == trace_id
    assert spans[0].parent is not None and f"{spans[0].parent.span_id:016x}" == parent_id


def test_health_and_readiness_need_no_token() -> None:
    with serving() as s:
        assert httpx.get(s.url + "/healthz", timeout=T).json() == {"status": "ok"}
        assert httpx.get(s.url + "/readyz", timeout=T).status_code == 200
        assert httpx.get(s.url + "/v1/models", timeout=T).status_code == 401

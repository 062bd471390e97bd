"""The OpenAI Responses API of ScriptedModelServer: the pure rendering of script items, and the
live endpoint spoken over loopback HTTP (plain `http.client`, no SDK)."""

from __future__ import annotations

import http.client
import json
import tomllib
from typing import Any

import pytest

from gen_agent.testing._model_server import Reply, ScriptedModelServer, TextBlock
from gen_agent.testing._openai_protocol import (
    DEFAULT_MODEL,
    ResponsesReply,
    codex_loopback_config,
    error_body,
    openai_base_url,
    render_response,
    render_stream,
)


def types(events: list[tuple[str, Any]]) -> list[str]:
    return [name for name, _ in events]


def test_a_text_reply_streams_as_one_message_item() -> None:
    events = list(render_stream(Reply.text(["Hel", "lo"]), {"model": "gpt-x", "stream": True}))

    assert types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(data["type"] == name for name, data in events)
    assert [data["delta"] for name, data in events if name.endswith(".delta")] == ["Hel", "lo"]
    done = events[6][1]
    assert done["text"] == "Hello"
    completed = events[-1][1]["response"]
    assert (completed["status"], completed["model"]) == ("completed", "gpt-x")
    assert completed["id"] == events[0][1]["response"]["id"]
    assert completed["output"][0]["content"][0]["text"] == "Hello"
    assert completed["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }


def test_a_tool_call_streams_as_a_function_call_item() -> None:
    reply = Reply.tool_use("get_weather", {"city": "Paris"}, id="call_1")
    events = list(render_stream(reply, {}))

    added = events[2][1]["item"]
    assert (added["type"], added["call_id"], added["name"], added["arguments"]) == (
        "function_call",
        "call_1",
        "get_weather",
        "",
    )
    pieces = [data["delta"] for name, data in events if name.endswith("arguments.delta")]
    assert "".join(pieces) == '{"city":"Paris"}' and len(pieces) > 1
    done = next(data for name, data in events if name == "response.output_item.done")["item"]
    assert (done["status"], done["arguments"]) == ("completed", '{"city":"Paris"}')
    assert events[-1][1]["response"]["model"] == DEFAULT_MODEL


def test_refusal_incomplete_and_usage_extras() -> None:
    refusal = list(render_stream(Reply.text("No.", stop_reason="refusal"), {}))
    assert "response.refusal.delta" in types(refusal)
    assert "response.output_text.delta" not in types(refusal)
    assert [d["refusal"] for n, d in refusal if n == "response.refusal.done"] == ["No."]

    reply = ResponsesReply.text("cut", stop_reason="max_tokens", reasoning_tokens=7)
    incomplete = list(render_stream(reply, {}))
    final = incomplete[-1]
    assert final[0] == "response.incomplete"
    assert final[1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final[1]["response"]["usage"]["output_tokens_details"] == {"reasoning_tokens": 7}


@pytest.mark.parametrize(
    ("reply", "last"),
    [
        (ResponsesReply.failed("boom", partial_text="so far "), "response.failed"),
        (
            Reply.stream_error("so far ", error_type="server_error", message="boom"),
            "response.failed",
        ),
        (ResponsesReply.error_event("boom", partial_text="so far "), "error"),
        (ResponsesReply.disconnect("so far "), "response.output_item.done"),
    ],
)
def test_stream_failures(reply: Reply, last: str) -> None:
    events = list(render_stream(reply, {}))

    assert events[-1][0] == last
    assert "response.completed" not in types(events)
    assert "".join(d["delta"] for n, d in events if n.endswith("text.delta")) == "so far "
    if last == "response.failed":
        assert events[-1][1]["response"]["error"] == {"code": "server_error", "message": "boom"}
    if last == "error":
        assert (events[-1][1]["code"], events[-1][1]["message"]) == ("server_error", "boom")


def test_the_non_streaming_answer_and_error_bodies() -> None:
    two = Reply.message(TextBlock(("a",)), TextBlock(("b",)))
    response = render_response(two, {"model": "m", "instructions": "be brief"})
    assert (response["status"], response["model"], response["instructions"]) == (
        "completed",
        "m",
        "be brief",
    )
    assert [item["content"][0]["text"] for item in response["output"]] == ["a", "b"]

    body = error_body(Reply.http_error(429, "slow down"))
    assert body == {
        "error": {
            "message": "slow down",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    assert error_body(Reply.http_error(400, body={"custom": True})) == {"custom": True}


# -- the live endpoint ---------------------------------------------------------------------


class Answer:
    """A whole HTTP answer, read and with its connection closed."""

    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.content_type = response.getheader("content-type") or ""
        self.body = response.read()

    def json(self) -> Any:
        return json.loads(self.body)


def post(server: ScriptedModelServer, body: dict[str, Any], path: str = "/v1/responses") -> Answer:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        return Answer(connection.getresponse())
    finally:
        connection.close()


def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_one_script_drives_both_protocols() -> None:
    with ScriptedModelServer([Reply.text("for openai"), Reply.text("for anthropic")]) as server:
        streamed = post(server, {"model": "gpt-x", "stream": True, "input": "hi"})
        assert streamed.status == 200
        assert streamed.content_type.startswith("text/event-stream")
        events = sse_events(streamed.body)

        body = {"model": "claude-x", "max_tokens": 5, "messages": []}
        anthropic_answer = post(server, body, "/v1/messages").json()

        assert events[-1][1]["response"]["output"][0]["content"][0]["text"] == "for openai"
        assert anthropic_answer["content"][0]["text"] == "for anthropic"
        assert [r.path for r in server.model_requests()] == ["/v1/responses", "/v1/messages"]
        assert server.remaining == 0


def test_response_fields_go_on_the_top_level_of_both_protocols_bodies() -> None:
    routed = Reply.text("routed", response_fields={"provider": "DeepInfra"})
    stream = list(render_stream(routed, {"model": "gpt-x"}))
    assert {data["response"]["provider"] for name, data in stream if "response" in data} == {
        "DeepInfra"}  # created, in_progress, completed
    assert render_response(routed, {"model": "gpt-x"})["provider"] == "DeepInfra"
    assert "provider" not in render_response(Reply.text("direct"), {"model": "gpt-x"})
    with ScriptedModelServer([routed, routed]) as server:
        body = {"model": "claude-x", "max_tokens": 5, "messages": []}
        plain = post(server, body, "/v1/messages").json()
        streamed = sse_events(post(server, {**body, "stream": True}, "/v1/messages").body)
    assert (plain["provider"], plain["content"][0]["text"]) == ("DeepInfra", "routed")
    assert streamed[0][1]["message"]["provider"] == "DeepInfra"  # message_start


def test_plain_json_http_errors_and_the_empty_script() -> None:
    script = [Reply.text("plain"), Reply.http_error(401, "bad key"), ResponsesReply.failed()]
    with ScriptedModelServer(script) as server:
        plain = post(server, {"model": "m", "input": "x"})
        assert (plain.status, plain.json()["status"]) == (200, "completed")

        denied = post(server, {"stream": True})
        assert denied.status == 401
        assert denied.json()["error"]["code"] == "invalid_api_key"

        failed = post(server, {"model": "m"})  # a failure asked without streaming: HTTP 500
        assert failed.status == 500

        empty = post(server, {"stream": True})
        assert empty.status == 400
        assert server.unscripted == 1
        assert openai_base_url(server) == f"http://127.0.0.1:{server.port}/v1"


def test_codex_loopback_config_points_only_at_the_server() -> None:
    with ScriptedModelServer() as server:
        config = tomllib.loads(codex_loopback_config(server, model="gpt-x", env_key="KEY"))
        base_url = openai_base_url(server)

    provider = config["model_providers"][config["model_provider"]]
    assert config["model"] == "gpt-x"
    assert provider["base_url"] == base_url
    assert (provider["env_key"], provider["wire_api"]) == ("KEY", "responses")
    assert (provider["request_max_retries"], provider["stream_max_retries"]) == (0, 0)
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"] == {"enabled": False}
    assert config["features"]["plugins"] is False

"""ScriptedModelServer: Anthropic Messages wire format, script queue, request log, shutdown."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any

import pytest

from gen_agent.testing._model_server import (
    RecordedRequest,
    Reply,
    ScriptedModelServer,
    TextBlock,
    ToolUseBlock,
)


def post(
    server: ScriptedModelServer,
    body: Any,
    path: str = "/v1/messages?beta=true",
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        payload = json.dumps(body).encode()
        conn.request(
            "POST",
            path,
            payload,
            {"content-type": "application/json", "x-api-key": "test-key", **(headers or {})},
        )
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def sse(raw: bytes) -> list[tuple[str, Any]]:
    """Parse an SSE body into (event, data) pairs, checking the framing of every frame."""
    frames = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        event_line, data_line = block.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: ")
        data = json.loads(data_line[len("data: ") :])
        assert data["type"] == event_line[len("event: ") :]
        frames.append((data["type"], data))
    return frames


def stream_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test-1",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


def test_text_reply_streams_like_the_messages_api():
    reply = Reply.text("Hello there, friend.", input_tokens=12, output_tokens=7)
    with ScriptedModelServer([reply]) as server:
        status, headers, raw = post(server, stream_body())
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers["transfer-encoding"] == "chunked"
    frames = sse(raw)
    assert [name for name, _ in frames] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = frames[0][1]["message"]
    assert message["model"] == "claude-test-1"  # echoed from the request
    assert message["role"] == "assistant" and message["content"] == []
    assert message["usage"]["input_tokens"] == 12 and message["usage"]["output_tokens"] == 1
    assert frames[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    deltas = [d["delta"]["text"] for n, d in frames if n == "content_block_delta"]
    assert deltas == ["Hello ", "there, ", "friend."]
    assert frames[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 7},
    }


def test_explicit_deltas_are_sent_exactly():
    with ScriptedModelServer([Reply.text(["Hel", "lo", ""])]) as server:
        _, _, raw = post(server, stream_body())
    deltas = [d["delta"]["text"] for n, d in sse(raw) if n == "content_block_delta"]
    assert deltas == ["Hel", "lo", ""]


def test_tool_use_reply_streams_input_json_deltas():
    reply = Reply.tool_use(
        "Bash", {"command": "echo hi", "description": "say"}, id="toolu_7", text="Let me run it."
    )
    with ScriptedModelServer([reply]) as server:
        _, _, raw = post(server, stream_body())
    frames = sse(raw)
    starts = [d for n, d in frames if n == "content_block_start"]
    assert starts[1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_7",
        "name": "Bash",
        "input": {},
    }
    pieces = [
        d["delta"]["partial_json"]
        for n, d in frames
        if n == "content_block_delta" and d["index"] == 1
    ]
    assert pieces[0] == "" and len(pieces) > 2
    assert json.loads("".join(pieces)) == {"command": "echo hi", "description": "say"}
    assert frames[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_plain_json_reply_when_not_streaming():
    reply = Reply.tool_use("Read", {"path": "/x"}, id="toolu_1", text="ok", model="claude-fixed")
    with ScriptedModelServer([reply]) as server:
        status, headers, raw = post(server, stream_body(stream=False))
    assert status == 200 and headers["content-type"] == "application/json"
    body = json.loads(raw)
    assert body["type"] == "message" and body["model"] == "claude-fixed"
    assert body["content"] == [
        {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "/x"}},
    ]
    assert body["stop_reason"] == "tool_use"
    assert body["usage"]["input_tokens"] == 10 and body["usage"]["output_tokens"] == 5


def test_message_with_explicit_blocks():
    reply = Reply.message(TextBlock(("a", "b")), ToolUseBlock("t1", "X", {}), stop_reason="x")
    assert reply.blocks[0].text == "ab"
    with ScriptedModelServer([reply]) as server:
        _, _, raw = post(server, stream_body(stream=False))
    assert json.loads(raw)["stop_reason"] == "x"


def test_http_error_has_a_json_body_and_retry_after():
    reply = Reply.http_error(429, "slow down", retry_after=12)
    with ScriptedModelServer([reply]) as server:
        status, headers, raw = post(server, stream_body())
    assert status == 429
    assert headers["retry-after"] == "12"
    assert headers["request-id"].startswith("req_")
    body = json.loads(raw)
    assert body["type"] == "error"
    assert body["error"] == {"type": "rate_limit_error", "message": "slow down"}


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(401, "authentication_error"), (400, "invalid_request_error"), (529, "overloaded_error"),
     (503, "api_error")],
)  # fmt: skip
def test_http_error_types_follow_the_status(status, error_type):
    with ScriptedModelServer([Reply.http_error(status)]) as server:
        got, _, raw = post(server, stream_body())
    assert got == status
    assert json.loads(raw)["error"] == {"type": error_type, "message": f"scripted error {status}"}


def test_http_error_with_an_explicit_body_and_headers():
    reply = Reply.http_error(500, body={"message": "raw"}, headers={"x-extra": "1"})
    with ScriptedModelServer([reply]) as server:
        status, headers, raw = post(server, stream_body())
    assert status == 500 and headers["x-extra"] == "1" and json.loads(raw) == {"message": "raw"}


def test_stream_error_sends_partial_text_then_an_error_event():
    reply = Reply.stream_error("Partial answ", error_type="overloaded_error", message="Overloaded")
    with ScriptedModelServer([reply, reply]) as server:
        status, _, raw = post(server, stream_body())
        plain_status, _, plain = post(server, stream_body(stream=False))
    frames = sse(raw)
    assert status == 200
    assert [n for n, _ in frames][-1] == "error"
    assert frames[-1][1] == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    deltas = "".join(d["delta"]["text"] for n, d in frames if n == "content_block_delta")
    assert deltas == "Partial answ"
    assert "message_stop" not in [n for n, _ in frames]
    assert plain_status == 529 and json.loads(plain)["error"]["type"] == "overloaded_error"


def test_count_tokens_answers_without_consuming_the_script():
    with ScriptedModelServer([Reply.text("kept")]) as server:
        status, _, raw = post(server, {"messages": []}, path="/v1/messages/count_tokens")
        assert status == 200 and json.loads(raw)["input_tokens"] >= 1
        assert server.remaining == 1
        assert server.model_requests() == []


def test_unknown_paths_are_404_and_head_is_answered():
    with ScriptedModelServer() as server:
        status, _, raw = post(server, {}, path="/v1/other")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("HEAD", "/")
        head = conn.getresponse()
        head.read()
        conn.close()
        log = server.requests
    assert status == 404 and json.loads(raw)["error"]["type"] == "not_found_error"
    assert head.status == 200
    assert [(r.method, r.path) for r in log] == [("POST", "/v1/other"), ("HEAD", "/")]


def test_request_log_records_method_path_query_headers_and_body():
    with ScriptedModelServer([Reply.text("a")]) as server:
        post(server, stream_body(), headers={"Anthropic-Version": "2023-06-01"})
        (request,) = server.requests
    assert isinstance(request, RecordedRequest)
    assert (request.method, request.path, request.query) == ("POST", "/v1/messages", {
        "beta": ["true"]
    })  # fmt: skip
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["x-api-key"] == "test-key"
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert json.loads(request.raw_body) == request.body
    assert request.received_ms > 0


def test_a_non_json_body_is_logged_raw():
    with ScriptedModelServer([Reply.text("a")]) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("POST", "/v1/messages", b"not json", {"content-type": "text/plain"})
        response = conn.getresponse()
        response.read()
        conn.close()
        (request,) = server.requests
    assert response.status == 200
    assert request.body is None and request.raw_body == b"not json"


def test_an_exhausted_script_answers_400_or_the_default():
    with ScriptedModelServer() as server:
        status, _, raw = post(server, stream_body())
        assert status == 400 and "no scripted reply left" in json.loads(raw)["error"]["message"]
        assert server.unscripted == 1
    with ScriptedModelServer(default=Reply.http_error(401)) as server:
        assert post(server, stream_body())[0] == 401
        assert post(server, stream_body())[0] == 401
        assert server.unscripted == 2


def test_callable_items_see_the_request_and_failures_are_reported():
    def echo(request: RecordedRequest) -> Reply:
        return Reply.text(request.body["messages"][-1]["content"])

    def broken(request: RecordedRequest) -> Reply:
        raise RuntimeError("script bug")

    with ScriptedModelServer([echo, broken, lambda request: "not a reply"]) as server:
        _, _, raw = post(server, stream_body(stream=False))
        assert json.loads(raw)["content"][0]["text"] == "hi"
        assert post(server, stream_body())[0] == 500
        assert post(server, stream_body())[0] == 500
        failures = server.failures
    assert [type(f) for f in failures] == [RuntimeError, TypeError]


def test_replies_are_served_in_order_to_concurrent_clients():
    count = 12
    with ScriptedModelServer() as server:
        adders = [
            threading.Thread(target=server.enqueue, args=(Reply.text(f"r{i}"),))
            for i in range(count)
        ]
        for thread in adders:
            thread.start()
        for thread in adders:
            thread.join(10)
        assert server.remaining == count
        results: list[str] = []
        lock = threading.Lock()

        def client() -> None:
            _, _, raw = post(server, stream_body(stream=False))
            with lock:
                results.append(json.loads(raw)["content"][0]["text"])

        clients = [threading.Thread(target=client) for _ in range(count)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(20)
    assert sorted(results) == sorted(f"r{i}" for i in range(count))


def test_wait_requests_is_bounded():
    with ScriptedModelServer([Reply.text("a")]) as server:
        with pytest.raises(TimeoutError, match="0 of 1"):
            server.wait_requests(1, timeout=0.05)
        done = threading.Thread(target=post, args=(server, stream_body()))
        done.start()
        assert len(server.wait_requests(1, timeout=10)) == 1
        done.join(10)


def test_close_during_a_delayed_reply_is_prompt():
    server = ScriptedModelServer([Reply.text("late", delay=60)]).start()
    errors: list[BaseException] = []

    def client() -> None:
        try:
            post(server, stream_body(), timeout=30)
        except (OSError, http.client.HTTPException) as exc:
            errors.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    server.wait_requests(1, timeout=10)
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 5  # not the 60 s delay
    thread.join(10)
    assert not thread.is_alive()
    assert len(errors) == 1  # the client saw the connection end without an answer
    server.close()  # idempotent


def test_chunk_delay_slows_the_stream_and_close_cuts_it():
    server = ScriptedModelServer([Reply.text("a b c d e f", chunk_delay=60)]).start()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    body = json.dumps(stream_body()).encode()
    sock.sendall(
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    server.wait_requests(1, timeout=10)
    received = sock.recv(65536)  # the headers and the first chunk, before the long delay
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 5
    while chunk := sock.recv(65536):
        received += chunk
    sock.close()
    assert received.startswith(b"HTTP/1.1 200")
    assert b"message_stop" not in received


def test_close_with_an_idle_keep_alive_connection_is_prompt():
    server = ScriptedModelServer([Reply.text("a")]).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", "/v1/messages", json.dumps(stream_body(stream=False)).encode())
    conn.getresponse().read()  # the connection stays open (HTTP/1.1 keep-alive)
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 5
    conn.close()


def test_binds_loopback_only_on_a_free_port():
    with ScriptedModelServer() as first, ScriptedModelServer() as second:
        assert first.url == f"http://127.0.0.1:{first.port}"
        assert first.base_url == first.url
        assert first.port != second.port
        assert first._httpd.server_address[0] == "127.0.0.1"


def test_lifecycle_errors():
    server = ScriptedModelServer()
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.url
    server.start()
    with pytest.raises(RuntimeError, match="already started"):
        server.start()
    server.close()


# -- issue #15: many simultaneous connections, no delayed-ACK stalls, a settable default ----
def test_the_listen_backlog_takes_128_simultaneous_connections() -> None:
    from gen_agent.testing._model_server import _HTTPServer

    httpd = _HTTPServer(ScriptedModelServer(), 5.0)  # bound and listening, not accepting
    sockets = []
    try:
        for _ in range(128):
            sockets.append(socket.create_connection(("127.0.0.1", httpd.server_address[1]),
                                                    timeout=2))
    finally:
        for sock in sockets:
            sock.close()
        httpd.server_close()
    assert len(sockets) == 128


def test_connections_are_served_with_tcp_nodelay() -> None:
    with ScriptedModelServer([Reply.text("hi")]) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            body = json.dumps(stream_body()).encode()
            sock.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: "
                         b"application/json\r\ncontent-length: " + str(len(body)).encode()
                         + b"\r\n\r\n" + body)
            server.wait_requests(1, timeout=10)
            assert server._httpd is not None
            with server._httpd._connections_lock:
                connections = list(server._httpd._connections)
            assert connections
            assert all(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for c in connections)
        finally:
            sock.close()


def test_default_is_settable_and_reset_restores_it() -> None:
    with ScriptedModelServer(default=Reply.text("fallback")) as server:
        server.default = None
        server.enqueue(Reply.text("x"))
        server.reset()
        assert (server.default is not None, server.remaining, server.requests) == (True, 0, [])
        with pytest.raises(TypeError, match="default must be a Reply"):
            server.default = "hi"  # type: ignore[assignment]

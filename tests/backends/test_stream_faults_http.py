"""Stream faults of the two SDK backends, byte for byte, against a raw loopback server
(`wire.RawServer`): connections cut inside an SSE event, inside a UTF-8 character and between
CR and LF (FIN), reset (RST), hangs with and without keep-alive pings, malformed and data-less
frames, and connection reuse. Every fault is a classified `BackendError` with its
diagnostics, never a task crash, and the agent answers the next ask."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent._errors import TurnError
from gen_agent.backend import BackendError
from gen_agent.backends.anthropic import AnthropicAPI
from gen_agent.backends.openai import OpenAIResponses

from .conftest import Agent
from .wire import (
    FIN,
    RST,
    Hold,
    Pings,
    RawServer,
    anthropic_events,
    chunk,
    chunked_head,
    frame,
    openai_events,
)

pytest.importorskip("anthropic")
pytest.importorskip("openai")

WAIT_S = 15.0


class Provider:
    """What differs between the two backends in these tests."""

    def __init__(self, name: str, backend: Any, events: Any, ping: bytes, base: str) -> None:
        self.name, self.backend, self.events, self.ping, self.base = (
            name, backend, events, ping, base)

    def __repr__(self) -> str:
        return self.name

    def start(self, server: RawServer, **opts: Any) -> gen_agent.AgentRef:
        agent_opts = {k: opts.pop(k) for k in ("watchdog_ms",) if k in opts}
        backend_opts = {"api_key": "test-key", "base_url": server.url + self.base,
                        "model": "test-model", **opts}
        return agents.start(Agent, f"faults-{self.name}", backend=self.backend,
                            backend_opts=backend_opts, **agent_opts)

    def reply(self, *parts: str) -> list[Any]:
        """A whole clean reply: head, one chunk per frame, the last chunk."""
        return [chunked_head(), *[chunk(f) for f in self.events(parts)], chunk(b"")]


ANTHROPIC = Provider("anthropic", AnthropicAPI, anthropic_events,
                     frame("ping", {"type": "ping"}), "")
OPENAI = Provider("openai", OpenAIResponses, openai_events, b": keep-alive\n\n", "/v1")
PROVIDERS = [ANTHROPIC, OPENAI]


@pytest.fixture
def server() -> Iterator[RawServer]:
    with RawServer() as running:
        yield running


def failed(agent: gen_agent.AgentRef, prompt: str = "x") -> BackendError:
    with pytest.raises(TurnError) as info:
        agent.ask(prompt, timeout=WAIT_S)
    reason = info.value.reason
    assert isinstance(reason, BackendError), reason  # never ("task_crashed", ...)
    return reason


def next_ask_works(server: RawServer, provider: Provider, agent: gen_agent.AgentRef) -> None:
    server.enqueue(provider.reply("fine ", "again"))
    assert agent.ask("again?", timeout=WAIT_S).text == "fine again"
    gen_agent.stop(f"faults-{provider.name}")


def cut_after(provider: Provider, head_parts: tuple[str, ...], tail: bytes, cut: Any) -> list[Any]:
    """Head, the first frames (message start and `head_parts` deltas) as one chunk each, then
    `tail` (a piece of the next frame) in a chunk of its own and the cut."""
    frames = provider.events(head_parts)
    opening = frames[: (2 if provider is ANTHROPIC else 1) + len(head_parts)]
    return [chunked_head(), *[chunk(f) for f in opening], *([chunk(tail)] if tail else []), cut]


# -- cuts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"event: content_block_delta\ndata: {\"type\": \"content_", id="in-event"),
        pytest.param('data: {"delta": "h\u00e9'.encode()[:-1], id="in-utf8-char"),
        pytest.param(b"event: content_block_delta\r", id="between-cr-lf"),
    ],
)
@pytest.mark.parametrize("cut", [FIN, RST], ids=repr)
def test_a_cut_connection_is_a_retryable_transport_error_with_the_partial_text(
    server: RawServer, provider: Provider, tail: bytes, cut: Any
) -> None:
    server.enqueue(cut_after(provider, ("Hello ", "wor"), tail, cut))
    agent = provider.start(server)

    reason = failed(agent)

    assert (reason.provider, reason.kind, reason.retryable) == (provider.name, "transport", True)
    diagnostics = reason.diagnostics
    assert diagnostics.partial_text == "Hello wor"
    assert diagnostics.http_status == 200
    assert diagnostics.session_id is not None
    assert diagnostics.session_id.startswith(f"{provider.name}-")
    assert diagnostics.response_id == ("msg_1" if provider is ANTHROPIC else "resp_1")
    assert "Hello" not in str(reason) and "Hello" not in repr(reason)
    next_ask_works(server, provider, agent)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_a_body_ended_by_fin_without_chunking_is_a_truncated_stream(
    server: RawServer, provider: Provider
) -> None:
    # A close-delimited body: EOF is its legal end, so the cut frame is dropped (WHATWG) and
    # the stream ended without its outcome.
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    frames = provider.events(("par", "tial"))
    server.enqueue([head, *frames[:-1], frames[-1][:25], FIN])
    agent = provider.start(server)

    reason = failed(agent)

    assert (reason.kind, reason.retryable) == ("stream_truncated", True)
    assert reason.diagnostics.partial_text == "partial"
    next_ask_works(server, provider, agent)


# -- hangs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_a_hang_is_the_read_timeout_of_the_sdk_client(
    server: RawServer, provider: Provider
) -> None:
    server.enqueue(cut_after(provider, ("slow",), b"", Hold()))
    agent = provider.start(server, timeout=0.5)

    reason = failed(agent)

    assert (reason.kind, reason.retryable) == ("timeout", True)
    assert reason.diagnostics.partial_text == "slow"
    next_ask_works(server, provider, agent)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
@pytest.mark.parametrize("pings", [True, False], ids=["pings", "silent"])
def test_the_watchdog_ends_a_stalled_turn_with_or_without_pings(
    server: RawServer, provider: Provider, pings: bool
) -> None:
    stall = Pings(provider.ping) if pings else Hold()
    server.enqueue(cut_after(provider, ("stalled",), b"", stall))
    agent = provider.start(server, timeout=60, watchdog_ms=400)

    with pytest.raises(TurnError) as info:
        agent.ask("x", timeout=WAIT_S)

    assert info.value.reason == "timeout"  # the watchdog's reason, pings or not
    next_ask_works(server, provider, agent)


# -- frames ---------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"event: content_block_delta\ndata: {\"type\": \"content_block_del\n\n",
                     id="not-json"),
        pytest.param(b"data: [1, 2]\n\n", id="not-an-object"),
        pytest.param(b"data: {\"type\": \"x\", \"t\": \"\xff\xfe\"}\n\n", id="not-utf8"),
    ],
)
def test_a_malformed_data_line_is_a_protocol_error_not_retryable(
    server: RawServer, provider: Provider, bad: bytes
) -> None:
    frames = provider.events(("kept",))
    opening = frames[: (2 if provider is ANTHROPIC else 1) + 1]
    server.enqueue([chunked_head(), *[chunk(f) for f in opening], chunk(bad),
                    *[chunk(f) for f in frames[len(opening):]], chunk(b"")])
    agent = provider.start(server)

    reason = failed(agent)

    assert (reason.kind, reason.retryable) == ("protocol_error", False)
    assert reason.diagnostics.partial_text == "kept"
    next_ask_works(server, provider, agent)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_frames_without_data_are_skipped_never_parsed(
    server: RawServer, provider: Provider
) -> None:
    frames = provider.events(("one ", "two"))
    dataless = [b"id: 7\n\n", b"retry: 3000\n\n", b": keep-alive\n\n",
                b"event: content_block_delta\n\n", b"id: 8\r\nevent: x\r\n\r\n"]
    mixed = [piece for pair in zip(frames, dataless * 3, strict=False) for piece in pair]
    mixed += frames[len(mixed) // 2:]
    server.enqueue([chunked_head(), *[chunk(f) for f in mixed], chunk(b"")])
    agent = provider.start(server)

    assert agent.ask("x", timeout=WAIT_S).text == "one two"
    next_ask_works(server, provider, agent)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_crlf_and_cr_line_ends_and_one_byte_chunks(server: RawServer, provider: Provider) -> None:
    body = b"".join(provider.events(("caf\u00e9 ", "\u2603")))
    crlf = body.replace(b"\n", b"\r\n")
    server.enqueue([chunked_head(), *[chunk(crlf[i:i + 1]) for i in range(len(crlf))], chunk(b"")],
                   [chunked_head(), chunk(body.replace(b"\n", b"\r")), chunk(b"")])
    agent = provider.start(server)

    assert agent.ask("x", timeout=WAIT_S).text == "caf\u00e9 \u2603"
    assert agent.ask("y", timeout=WAIT_S).text == "caf\u00e9 \u2603"
    next_ask_works(server, provider, agent)


# -- connection reuse -------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_thirty_turns_use_one_connection_and_the_reply_never_waits_for_the_body_end(
    server: RawServer, provider: Provider
) -> None:
    end_of_body = threading.Event()
    held = provider.reply("first")
    server.enqueue([*held[:-1], Hold(end_of_body), held[-1]])
    server.enqueue(*[provider.reply(f"turn {n}") for n in range(2, 31)])
    agent = provider.start(server)

    # The first reply arrives while the server still holds the end of its body.
    assert agent.ask("1", timeout=WAIT_S).text == "first"
    end_of_body.set()
    texts = [agent.ask(str(n), timeout=WAIT_S).text for n in range(2, 31)]

    assert texts == [f"turn {n}" for n in range(2, 31)]
    assert len(server.bodies) == 30
    assert server.connections == 1
    gen_agent.stop(f"faults-{provider.name}")


# -- tool calls, unknown deltas, truncated answers ---------------------------------------------


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return frame("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": delta})


def _block(index: int, block: dict[str, Any]) -> bytes:
    return frame("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": block})


def _stop(index: int) -> bytes:
    return frame("content_block_stop", {"type": "content_block_stop", "index": index})


def test_anthropic_tool_inputs_are_assembled_exactly(server: RawServer) -> None:
    opening = anthropic_events(())[:1]
    ending = anthropic_events((), stop_reason="tool_use")[-2:]
    citation = {"type": "citations_delta", "citation": {
        "type": "char_location", "cited_text": "x", "document_index": 0,
        "start_char_index": 0, "end_char_index": 1}}
    fragmented = _delta(1, {"type": "input_json_delta", "partial_json": '{"path": "/tmp/caf\u00e9'})
    split_at = fragmented.index("\u00e9".encode()) + 1  # the chunk boundary cuts the é
    frames = [
        *opening,
        _block(0, {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}),
        _delta(0, {"type": "input_json_delta", "partial_json": ""}),  # a tool without arguments
        _stop(0),
        _block(1, {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}}),
        fragmented[:split_at], fragmented[split_at:],
        _delta(1, {"type": "input_json_delta", "partial_json": '", "lines": [1, '}),
        _delta(1, {"type": "input_json_delta", "partial_json": '2], "q": "a\\"b'}),
        _delta(1, {"type": "input_json_delta", "partial_json": '"}'}),
        _stop(1),
        _block(2, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                   "input": {}}),
        _delta(2, {"type": "input_json_delta", "partial_json": '{"query": "we'}),
        _delta(2, {"type": "input_json_delta", "partial_json": 'ather"}'}),
        _stop(2),
        _block(3, {"type": "text", "text": ""}),
        _delta(3, {"type": "text_delta", "text": "Sunny."}),
        _delta(3, citation),
        _stop(3),
        *ending,
    ]
    server.enqueue([chunked_head(), *[chunk(f) for f in frames], chunk(b"")])
    agent = ANTHROPIC.start(server)

    response = agent.ask("x", timeout=WAIT_S)

    assert [e.data for e in response.tool_calls] == [
        {"id": "toolu_1", "name": "now", "input": {}},
        {"id": "toolu_2", "name": "read",
         "input": {"path": "/tmp/caf\u00e9", "lines": [1, 2], "q": 'a"b'}},
    ]
    server_tool = [e.data for e in response.events if e.kind == "anthropic.server_tool_use"]
    assert server_tool == [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                            "input": {"query": "weather"}}]
    kept = [e.data for e in response.events if e.kind == "anthropic.citations_delta"]
    assert kept == [{"index": 3, "delta": citation}]
    assert (response.text, response.stop_reason) == ("Sunny.", "tool_use")
    next_ask_works(server, ANTHROPIC, agent)


def test_anthropic_max_tokens_is_a_response_with_its_stop_reason(server: RawServer) -> None:
    frames = anthropic_events(("cut sh",), stop_reason="max_tokens")
    server.enqueue([chunked_head(), *[chunk(f) for f in frames], chunk(b"")])
    agent = ANTHROPIC.start(server)

    response = agent.ask("x", timeout=WAIT_S)

    assert (response.text, response.stop_reason) == ("cut sh", "max_tokens")
    next_ask_works(server, ANTHROPIC, agent)


@pytest.mark.parametrize(("provider", "parts", "keep", "error", "fields", "diagnostics"), [
    pytest.param(ANTHROPIC, ("Half an ",), 3,
                 {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                 ("server_error", True, None, "Overloaded"),
                 ({"input_tokens": 5, "output_tokens": 1}, "msg_1"), id="anthropic"),
    pytest.param(OPENAI, ("Half ", "an "), -1,
                 {"type": "error", "code": "server_error", "message": "Broken"},
                 ("stream_error", True, None, "Broken"), (None, "resp_1"), id="openai"),
])
def test_a_mid_stream_error_event_keeps_the_partial_text(
        server: RawServer, provider: Provider, parts: tuple[str, ...], keep: int,
        error: dict[str, Any], fields: tuple[Any, ...], diagnostics: tuple[Any, ...]) -> None:
    # the stream's first frames (`keep` of them: no terminal one), then its `error` event
    frames = provider.events(parts)[:keep]
    server.enqueue([chunked_head(), *[chunk(f) for f in [*frames, frame("error", error)]],
                    chunk(b"")])
    agent = provider.start(server)

    reason = failed(agent)

    assert (reason.kind, reason.retryable, reason.status, reason.message) == fields
    assert reason.diagnostics.partial_text == "Half an "
    # the usage reported before the error (OpenAI reports it only at the end), the reply's id
    assert (reason.diagnostics.usage, reason.diagnostics.response_id) == diagnostics
    next_ask_works(server, provider, agent)


def _compressed_head(status: int, encoding: str) -> bytes:
    kind = "text/event-stream" if status == 200 else "application/json"
    return (f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-encoding: {encoding}"
            "\r\ntransfer-encoding: chunked\r\n\r\n").encode()


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_corrupt_compressed_body_is_a_protocol_error_with_the_partial_text(
    server: RawServer, provider: Provider, encoding: str
) -> None:
    # The opening frames compress and flush cleanly (they decode, their text streams), then
    # bytes that are no deflate data follow.
    packer = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
    frames = provider.events(("Half an ",))
    opening = b"".join(frames[: (2 if provider is ANTHROPIC else 1) + 1])
    packed = packer.compress(opening) + packer.flush(zlib.Z_SYNC_FLUSH)
    server.enqueue([_compressed_head(200, encoding), chunk(packed),
                    chunk(b"\xff\xfe not deflate data " * 8), chunk(b"")])
    agent = provider.start(server)

    reason = failed(agent)

    assert (reason.kind, reason.retryable) == ("protocol_error", False)
    assert "could not be decoded" in reason.message
    assert reason.diagnostics.partial_text == "Half an "
    assert reason.diagnostics.http_status == 200
    next_ask_works(server, provider, agent)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_a_corrupt_compressed_error_body_is_a_protocol_error_with_its_status(
    server: RawServer, provider: Provider
) -> None:
    server.enqueue([_compressed_head(500, "gzip"), chunk(b"\x1f\x8b garbage " * 8),
                    chunk(b"")])
    agent = provider.start(server)

    reason = failed(agent)  # the SDK reads the error body itself: it raised, not a crash

    assert (reason.kind, reason.retryable) == ("protocol_error", False)
    assert reason.diagnostics.http_status == 500
    next_ask_works(server, provider, agent)

def _openai_final(kind: str, status: str, **extra: Any) -> bytes:
    response = {"id": "resp_1", "object": "response", "status": status, "model": "gpt-test",
                "output": [], "usage": {"input_tokens": 4, "output_tokens": 16,
                                         "total_tokens": 20}, **extra}
    return frame(kind, {"type": kind, "response": response})


def test_openai_incomplete_keeps_partial_text_reason_and_usage(server: RawServer) -> None:
    frames = openai_events(("A truncated ", "answer"))[:-1]
    final = _openai_final("response.incomplete", "incomplete",
                          incomplete_details={"reason": "max_output_tokens"})
    server.enqueue([chunked_head(), *[chunk(f) for f in [*frames, final]], chunk(b"")])
    agent = OPENAI.start(server)

    reason = failed(agent)

    assert (reason.kind, reason.retryable) == ("response_incomplete", False)
    diagnostics = reason.diagnostics
    assert diagnostics.partial_text == "A truncated answer"
    assert diagnostics.stop_reason == "max_output_tokens"
    assert diagnostics.usage == {"input_tokens": 4, "output_tokens": 16, "total_tokens": 20}
    assert diagnostics.response_id == "resp_1"
    next_ask_works(server, OPENAI, agent)


def test_openai_failed_records_its_usage(server: RawServer) -> None:
    frames = openai_events(("Some ",))[:-1]
    final = _openai_final("response.failed", "failed",
                          error={"code": "server_error", "message": "boom"})
    server.enqueue([chunked_head(), *[chunk(f) for f in [*frames, final]], chunk(b"")])
    agent = OPENAI.start(server)

    with pytest.raises(TurnError) as info:
        agent.ask("x", timeout=WAIT_S)

    reason = info.value.reason
    assert (reason.kind, reason.retryable, reason.message) == ("response_failed", True, "boom")
    assert reason.diagnostics.usage == {"input_tokens": 4, "output_tokens": 16,
                                        "total_tokens": 20}
    assert reason.diagnostics.partial_text == "Some "
    next_ask_works(server, OPENAI, agent)


def test_openai_function_call_without_arguments_has_input_empty_object(
    server: RawServer,
) -> None:
    created, *_, completed = openai_events(())
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "now",
            "arguments": ""}
    done = frame("response.output_item.done", {"type": "response.output_item.done",
                                               "output_index": 0, "item": item})
    server.enqueue([chunked_head(), *[chunk(f) for f in [created, done, completed]], chunk(b"")])
    agent = OPENAI.start(server)

    response = agent.ask("x", timeout=WAIT_S)

    assert [e.data["input"] for e in response.tool_calls] == [{}]
    next_ask_works(server, OPENAI, agent)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_a_body_that_never_ends_after_its_outcome_does_not_hold_the_next_turn(
    server: RawServer, provider: Provider
) -> None:
    held = provider.reply("first")
    server.enqueue([*held[:-1], Hold()], provider.reply("second"))  # the end never comes
    agent = provider.start(server, timeout=60)

    assert agent.ask("1", timeout=WAIT_S).text == "first"
    # The next turn gives the unfinished body up (bounded) and opens a new connection,
    # instead of waiting for the SDK's 60 s read timeout.
    assert agent.ask("2", timeout=WAIT_S).text == "second"
    assert server.connections == 2
    gen_agent.stop(f"faults-{provider.name}")


def test_openai_a_previous_response_that_is_gone_is_session_not_found_and_forgotten(
    server: RawServer,
) -> None:
    body = (b'{"error": {"message": "Previous response with id \'resp_1\' not found.", '
            b'"type": "invalid_request_error", "param": "previous_response_id", '
            b'"code": "previous_response_not_found"}}')
    gone = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    server.enqueue(OPENAI.reply("first"), [gone], OPENAI.reply("fresh"))
    agent = OPENAI.start(server)
    assert agent.ask("1", timeout=WAIT_S).text == "first"

    reason = failed(agent)

    assert (reason.kind, reason.retryable, reason.status) == ("session_not_found", False, 400)
    assert reason.message == "Previous response with id 'resp_1' not found."
    assert server.bodies[1]["previous_response_id"] == "resp_1"
    assert gen_agent.backend_session("faults-openai").previous_response_id is None
    assert agent.ask("3", timeout=WAIT_S).text == "fresh"
    assert "previous_response_id" not in server.bodies[2]  # a new conversation
    gen_agent.stop("faults-openai")

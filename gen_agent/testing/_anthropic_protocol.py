"""The Anthropic Messages API for `ScriptedModelServer`: `POST /v1/messages` (streaming SSE or
plain JSON) and `POST /v1/messages/count_tokens`.

A `Reply` renders as the provider renders a model answer: `message_start`, one content block per
`TextBlock` / `ToolUseBlock` (text as `text_delta`s, tool input as `input_json_delta` slices), one
`ping` after the first block starts, then `message_delta` with the stop reason and usage and
`message_stop`; `Reply.stream_error` ends with an `error` event, `Reply.http_error` answers that
status with the provider's error body.

Mirrors: nothing in the Elixir original; this is the loopback provider the Anthropic backend and
the Claude Code CLI are tested against.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import msgspec

from gen_agent.testing._script import (
    _DEFAULT_MODEL,
    Block,
    RecordedRequest,
    Reply,
    TextBlock,
    ToolUseBlock,
    _next_id,
    _Protocol,
    _Writer,
)

__all__ = ["AnthropicMessagesProtocol"]


class AnthropicMessagesProtocol(_Protocol):
    """The Anthropic Messages API: `POST /v1/messages` and `/v1/messages/count_tokens`."""

    routes: ClassVar[dict[tuple[str, str], str]] = {
        ("POST", "/v1/messages"): "create",
        ("POST", "/v1/messages/count_tokens"): "count_tokens",
    }

    def count_tokens(self, request: RecordedRequest, out: _Writer) -> None:
        """Answer `POST /v1/messages/count_tokens` (one token per 4 bytes of the body)."""
        # A rough, deterministic count: one token per 4 bytes of the request body.
        out.send_json(200, {"input_tokens": max(1, len(request.raw_body) // 4)})

    def create(self, request: RecordedRequest, out: _Writer) -> None:
        """Answer `POST /v1/messages` with the server's next scripted reply."""
        reply = self.server._next_reply(request)
        body = request.body if isinstance(request.body, dict) else {}
        if not out.wait(reply.delay):
            return
        if reply.kind == "http_error":
            out.send_json(reply.status, _error_body(reply), reply.headers)
        elif body.get("stream") is True:
            self._stream(reply, _model(reply, body), out)
        elif reply.kind == "stream_error":
            out.send_json(529, _error_body(reply), reply.headers)
        else:
            out.send_json(200, self._message(reply, _model(reply, body)), reply.headers)

    def _message(self, reply: Reply, model: str) -> dict[str, Any]:
        return {
            "id": _next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [_block_json(block) for block in reply.blocks],
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": _usage(reply, reply.output_tokens),
            **reply.response_fields,
        }

    def _stream(self, reply: Reply, model: str, out: _Writer) -> None:
        out.start_stream(reply.headers)
        try:
            for event, data in self._frames(reply, model):
                if not out.wait(reply.chunk_delay):
                    return
                out.send_event(event, data)
        finally:
            out.end_stream()

    def _frames(self, reply: Reply, model: str) -> Iterator[tuple[str, Any]]:
        start = {**self._message(reply, model), "content": [], "stop_reason": None}
        start["usage"] = _usage(reply, 1)
        yield "message_start", {"type": "message_start", "message": start}
        for index, block in enumerate(reply.blocks):
            frames = _block_frames(index, block)
            yield next(frames)
            if index == 0:
                # As the provider does: one ping right after the first block starts.
                yield "ping", {"type": "ping"}
            yield from frames
        if reply.kind == "stream_error":
            error = {"type": reply.error_type, "message": reply.error_message}
            yield "error", {"type": "error", "error": error}
            return
        delta = {"stop_reason": reply.stop_reason, "stop_sequence": None}
        usage = {"output_tokens": reply.output_tokens}
        yield "message_delta", {"type": "message_delta", "delta": delta, "usage": usage}
        yield "message_stop", {"type": "message_stop"}


def _model(reply: Reply, body: dict[str, Any]) -> str:
    if reply.model is not None:
        return reply.model
    requested = body.get("model")
    return requested if isinstance(requested, str) else _DEFAULT_MODEL


def _usage(reply: Reply, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": reply.input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _block_json(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}


def _block_frames(index: int, block: Block) -> Iterator[tuple[str, Any]]:
    start: dict[str, Any]
    if isinstance(block, TextBlock):
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in block.deltas]
    else:
        start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _json_pieces(block)]
    yield (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": start,
        },
    )
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def _json_pieces(block: ToolUseBlock) -> list[str]:
    # The provider streams tool input as an empty first piece, then JSON text in slices.
    text = msgspec.json.encode(block.input).decode()
    size = max(1, -(-len(text) // 3))
    return ["", *(text[i : i + size] for i in range(0, len(text), size))]


def _error_body(reply: Reply) -> Any:
    if reply.body is not None:
        return reply.body
    error = {"type": reply.error_type, "message": reply.error_message}
    return {"type": "error", "error": error, "request_id": _next_id("req")}

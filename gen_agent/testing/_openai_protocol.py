"""The OpenAI Responses API for `ScriptedModelServer`: `POST /v1/responses`, streaming or not.

The same protocol-neutral script drives either wire protocol: a `Reply` from
`gen_agent.testing._model_server` is rendered here as the Responses API renders a model answer.
`ResponsesReply` (a `Reply` subclass) adds what only this protocol reports (reasoning tokens,
cached input tokens, how a failed stream ends).

How a script item is rendered (streaming, `"stream": true`):

- `TextBlock` → a `message` output item whose text streams as `output_text` deltas;
- `ToolUseBlock` → a `function_call` item whose arguments stream as deltas;
- `stop_reason="refusal"` → the text blocks become `refusal` content parts;
- `stop_reason="max_tokens"` / `"content_filter"` → the stream ends with
  `response.incomplete` (reason `max_output_tokens` / `content_filter`);
- any other message → the stream ends with `response.completed` (with usage);
- `Reply.stream_error(...)` → partial text, then `response.failed` with
  `error: {code: error_type, message}`;
- `ResponsesReply.error_event(...)` → partial text, then an `error` event; nothing after it;
- `ResponsesReply.disconnect(...)` → partial text, then the stream ends with no outcome;
- `Reply.http_error(...)` → that status with `{"error": {message, type, param, code}}`.

Every streamed event carries `type` and a `sequence_number` counting from 0. A request
without `"stream": true` gets the final `Response` object as JSON (HTTP 500 for a failed one).

Response ids are `"resp_..."`; each streamed response echoes the request's `model` (unless the
reply names one), `instructions`, `previous_response_id` and `store`, and carries the reply's
`response_fields` at its top level (e.g. a router's `provider`).

`ScriptedModelServer` lists this protocol in its `_PROTOCOLS`; this module does not import the
server back.

Mirrors: nothing in the Elixir original (its tests stub HTTP); this is the loopback provider
the contract's OpenAI backend and the Codex CLI (`wire_api = "responses"`) are tested against.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import msgspec

from gen_agent.testing._script import (
    RecordedRequest,
    Reply,
    TextBlock,
    ToolUseBlock,
    _Protocol,
)

if TYPE_CHECKING:
    from gen_agent.testing._model_server import ScriptedModelServer

__all__ = [
    "DEFAULT_MODEL",
    "OpenAIResponsesProtocol",
    "ResponsesReply",
    "codex_loopback_config",
    "error_body",
    "openai_base_url",
    "render_response",
    "render_stream",
]

DEFAULT_MODEL = "gpt-5"
"""The model reported when neither the reply nor the request names one."""

_INCOMPLETE_REASONS = {"max_tokens": "max_output_tokens", "content_filter": "content_filter"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
}
_ERROR_CODES = {
    401: "invalid_api_key",
    404: "model_not_found",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_is_overloaded",
}
_ids = itertools.count(1)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):032x}"


class ResponsesReply(Reply, frozen=True, kw_only=True):
    """A `Reply` with the parts only the Responses API reports; the other protocol ignores them.

    Build it with the `Reply` constructors (`ResponsesReply.text(..., reasoning_tokens=4)`) or
    the ones below.

    Fields (beyond `Reply`'s):
        reasoning_tokens: `usage.output_tokens_details.reasoning_tokens` (tokens).
        cached_input_tokens: `usage.input_tokens_details.cached_tokens` (tokens).
        failure: how a `stream_error` reply ends its stream: `"response.failed"` (default),
            `"error_event"` (an `error` event, nothing after it) or `"disconnect"` (the
            stream just ends, with no outcome event).

    Thread-safety: immutable; safe to share.
    """

    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    failure: Literal["response.failed", "error_event", "disconnect"] = "response.failed"

    @classmethod
    def failed(
        cls,
        message: str = "The server had an error while processing your request.",
        *,
        code: str = "server_error",
        partial_text: str | Iterable[str] = "",
        **fields: Any,
    ) -> ResponsesReply:
        """A stream that sends `partial_text`, then `response.failed` with `{code, message}`.

        Returns:
            A `ResponsesReply` of kind `"stream_error"`.
        """
        reply = cls.stream_error(partial_text, error_type=code, message=message, **fields)
        assert isinstance(reply, ResponsesReply)
        return reply

    @classmethod
    def error_event(
        cls,
        message: str = "An error occurred while processing your request.",
        *,
        code: str = "server_error",
        partial_text: str | Iterable[str] = "",
        **fields: Any,
    ) -> ResponsesReply:
        """A stream that sends `partial_text`, then an `error` event; no outcome follows."""
        fields.setdefault("failure", "error_event")
        return cls.failed(message, code=code, partial_text=partial_text, **fields)

    @classmethod
    def disconnect(cls, partial_text: str | Iterable[str] = "", **fields: Any) -> ResponsesReply:
        """A stream that sends `partial_text` and then ends without any outcome event."""
        fields.setdefault("failure", "disconnect")
        return cls.failed("stream closed", code="disconnect", partial_text=partial_text, **fields)


def openai_base_url(server: ScriptedModelServer) -> str:
    """The OpenAI `base_url` for `server`: `"http://127.0.0.1:PORT/v1"` (str).

    Clients (the `openai` SDK, Codex's `model_providers.*.base_url`) append `/responses`.
    """
    return f"{server.url}/v1"


def codex_loopback_config(
    server: ScriptedModelServer, *, model: str = "gpt-test", env_key: str = "GEN_AGENT_LOOP_KEY"
) -> str:
    """A Codex CLI `config.toml` that sends every model call to `server` and nowhere else.

    Write it to `$CODEX_HOME/config.toml` and give the CLI `env_key` set to any dummy value.
    Besides the loopback provider (`wire_api = "responses"`, no request or stream retries, so
    a scripted failure fails the turn at once), it turns off what would reach other hosts:
    the update check, analytics, feedback, plugin and app sync, and model discovery.

    Args:
        server: the running `ScriptedModelServer`.
        model: the model name the CLI asks for (unknown names only add a warning item).
        env_key: the environment variable the CLI reads its API key from.

    Returns:
        The TOML text (`str`).
    """
    return f"""check_for_update_on_startup = false
model = {_toml_string(model)}
model_provider = "gen_agent_loopback"

[model_providers.gen_agent_loopback]
name = "gen_agent loopback"
base_url = {_toml_string(openai_base_url(server))}
env_key = {_toml_string(env_key)}
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false
api_key_model_discovery = false
shell_snapshot = false
"""


def _toml_string(text: str) -> str:
    # A JSON string literal is a valid TOML basic string.
    return msgspec.json.encode(text).decode()


# --- rendering (pure) ------------------------------------------------------------------------


class _Render:
    """Builds the JSON of one response and its stream events; pure apart from id minting."""

    def __init__(self, reply: Reply, request_body: dict[str, Any]) -> None:
        self.reply = reply
        self.body = request_body
        self.response_id = _new_id("resp")
        self.created_at = int(time.time())
        self.model = _model(reply, request_body)
        self.refusal = reply.stop_reason == "refusal"
        self.sequence = itertools.count(0)
        self.items: list[dict[str, Any]] = []

    def event(self, event_type: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return event_type, {"type": event_type, "sequence_number": next(self.sequence), **fields}

    def response(self, status: str, **fields: Any) -> dict[str, Any]:
        body = self.body
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": list(self.items),
            "instructions": body.get("instructions"),
            "previous_response_id": body.get("previous_response_id"),
            "store": body.get("store", True),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools", []),
            "error": None,
            "incomplete_details": None,
            "usage": None,
            **fields,
            **self.reply.response_fields,
        }

    def usage(self) -> dict[str, Any]:
        reply = self.reply
        reasoning = getattr(reply, "reasoning_tokens", 0)
        cached = getattr(reply, "cached_input_tokens", 0)
        return {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }

    def outcome(self) -> tuple[str, dict[str, Any]]:
        """The final `(status, response)` of a reply that did not fail."""
        reason = _INCOMPLETE_REASONS.get(self.reply.stop_reason)
        if reason is not None:
            details = {"reason": reason}
            return "incomplete", self.response(
                "incomplete", incomplete_details=details, usage=self.usage()
            )
        return "completed", self.response(
            "completed", usage=self.usage(), completed_at=int(time.time())
        )

    def failure(self) -> dict[str, Any]:
        error = {"code": self.reply.error_type, "message": self.reply.error_message}
        return self.response("failed", error=error)

    # -- output items -----------------------------------------------------------------

    def block_events(self, index: int, block: TextBlock | ToolUseBlock) -> Iterator[Any]:
        if isinstance(block, TextBlock):
            yield from self._message_events(index, block)
        else:
            yield from self._call_events(index, block)

    def _message_events(self, index: int, block: TextBlock) -> Iterator[Any]:
        item_id = _new_id("msg")
        item = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant"}
        yield self.event(
            "response.output_item.added", output_index=index, item={**item, "content": []}
        )
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        kind, delta_type, done_type = (
            ("refusal", "response.refusal.delta", "response.refusal.done")
            if self.refusal
            else ("output_text", "response.output_text.delta", "response.output_text.done")
        )
        yield self.event("response.content_part.added", **where, part=_part(kind, ""))
        for piece in block.deltas:
            extra: dict[str, Any] = {} if self.refusal else {"logprobs": []}
            yield self.event(delta_type, **where, delta=piece, **extra)
        text = block.text
        if self.refusal:
            yield self.event(done_type, **where, refusal=text)
        else:
            yield self.event(done_type, **where, text=text, logprobs=[])
        part = _part(kind, text)
        yield self.event("response.content_part.done", **where, part=part)
        done = {**item, "status": "completed", "content": [part]}
        self.items.append(done)
        yield self.event("response.output_item.done", output_index=index, item=done)

    def _call_events(self, index: int, block: ToolUseBlock) -> Iterator[Any]:
        item_id = _new_id("fc")
        arguments = msgspec.json.encode(block.input).decode()
        item = {"id": item_id, "type": "function_call", "call_id": block.id, "name": block.name}
        yield self.event(
            "response.output_item.added",
            output_index=index,
            item={**item, "status": "in_progress", "arguments": ""},
        )
        for piece in _slices(arguments):
            yield self.event(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=piece,
            )
        yield self.event(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=index,
            arguments=arguments,
        )
        done = {**item, "status": "completed", "arguments": arguments}
        self.items.append(done)
        yield self.event("response.output_item.done", output_index=index, item=done)


def render_stream(reply: Reply, request_body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The SSE events answering `request_body` with `reply`, as `(event_name, data)` pairs.

    Pure (apart from fresh ids and timestamps): the server writes each pair as one
    `event: NAME` / `data: JSON` frame. See the module docstring for the rendering table.

    Args:
        reply: the script item (a `Reply` of kind `"message"` or `"stream_error"`).
        request_body: the decoded request (its `model`, `instructions`... are echoed).

    Returns:
        An iterator of `(event_name, data_dict)`; every `data_dict` has `type` (equal to
        `event_name`) and `sequence_number`.
    """
    render = _Render(reply, request_body)
    yield render.event("response.created", response=render.response("in_progress"))
    yield render.event("response.in_progress", response=render.response("in_progress"))
    for index, block in enumerate(reply.blocks):
        yield from render.block_events(index, block)
    if reply.kind == "stream_error":
        failure = getattr(reply, "failure", "response.failed")
        if failure == "error_event":
            yield render.event(
                "error", code=reply.error_type, message=reply.error_message, param=None
            )
        elif failure == "response.failed":
            yield render.event("response.failed", response=render.failure())
        return
    status, response = render.outcome()
    yield render.event(f"response.{status}", response=response)


def render_response(reply: Reply, request_body: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming answer: the final `Response` object (JSON-ready dict)."""
    render = _Render(reply, request_body)
    for index, block in enumerate(reply.blocks):
        for _ in render.block_events(index, block):
            pass  # rendering the events collects the finished output items
    return render.outcome()[1]


def error_body(reply: Reply) -> Any:
    """The JSON body of an HTTP error answer: `reply.body`, else the OpenAI error shape."""
    if reply.body is not None:
        return reply.body
    status = reply.status if reply.kind == "http_error" else 500
    return {
        "error": {
            "message": reply.error_message,
            "type": _ERROR_TYPES.get(status, reply.error_type or "server_error"),
            "param": None,
            "code": _ERROR_CODES.get(status, reply.error_type),
        }
    }


def _model(reply: Reply, body: dict[str, Any]) -> str:
    if reply.model is not None:
        return reply.model
    requested = body.get("model")
    return requested if isinstance(requested, str) else DEFAULT_MODEL


def _part(kind: str, text: str) -> dict[str, Any]:
    if kind == "refusal":
        return {"type": "refusal", "refusal": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _slices(text: str) -> list[str]:
    size = max(1, -(-len(text) // 3))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# --- the server side -------------------------------------------------------------------------


class OpenAIResponsesProtocol(_Protocol):
    """`POST /v1/responses` on `ScriptedModelServer`: one script item per request.

    Registered with the server when this module is imported. Streaming when the request body
    has `"stream": true`, else one JSON `Response`. Waits `reply.delay` before answering and
    `reply.chunk_delay` between events; both end at once when the server closes.
    """

    routes: ClassVar[dict[tuple[str, str], str]] = {("POST", "/v1/responses"): "create"}

    def create(self, request: RecordedRequest, out: Any) -> None:
        """Answer one Responses API request from the next script item."""
        reply = self.server._next_reply(request)
        body = request.body if isinstance(request.body, dict) else {}
        if not out.wait(reply.delay):
            return
        if reply.kind == "http_error":
            out.send_json(reply.status, error_body(reply), reply.headers)
        elif body.get("stream") is True:
            self._stream(reply, body, out)
        elif reply.kind == "stream_error":
            out.send_json(500, error_body(reply), reply.headers)
        else:
            out.send_json(200, render_response(reply, body), reply.headers)

    def _stream(self, reply: Reply, body: dict[str, Any], out: Any) -> None:
        out.start_stream(reply.headers)
        try:
            for event, data in render_stream(reply, body):
                if not out.wait(reply.chunk_delay):
                    return
                out.send_event(event, data)
        finally:
            out.end_stream()

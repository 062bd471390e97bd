"""The protocol-neutral half of `ScriptedModelServer`: script items, the request log, the writer.

A script item (`Reply`, built from `TextBlock` / `ToolUseBlock`) says what the model answers; each
wire protocol module (`anthropic_protocol`, `openai_protocol`) renders it in its own format
through a `_Writer`, and records nothing of its own. Neither protocol module imports the server;
the server (`model_server`) imports both.

Mirrors: nothing in the Elixir original (its tests stub HTTP).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import msgspec

if TYPE_CHECKING:
    from gen_agent.testing._model_server import ScriptedModelServer

__all__ = [
    "Block",
    "RecordedRequest",
    "Reply",
    "ScriptItem",
    "TextBlock",
    "ToolUseBlock",
]

_DEFAULT_MODEL = "claude-sonnet-4-5"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):024d}"


def _split_words(text: str) -> tuple[str, ...]:
    # One delta per word (with its trailing blanks): several deltas, deterministic.
    parts = re.findall(r"\s*\S+\s*", text)
    return tuple(parts) if parts else (text,)


class TextBlock(msgspec.Struct, frozen=True):
    """A text content block, streamed as the given `deltas` (their concatenation is the text).

    Fields:
        deltas: the text pieces in order, one stream delta each (tuple of `str`).
    """

    deltas: tuple[str, ...]

    @property
    def text(self) -> str:
        """The whole text of the block (`str`)."""
        return "".join(self.deltas)


class ToolUseBlock(msgspec.Struct, frozen=True):
    """A tool call content block.

    Fields:
        id: the tool call id (e.g. `"toolu_01"`); the client echoes it in its tool result.
        name: the tool name (e.g. `"Bash"`).
        input: the tool arguments (`dict`), streamed as JSON text in a few pieces.
    """

    id: str
    name: str
    input: dict[str, Any]


Block = TextBlock | ToolUseBlock


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """One scripted answer to one model request, independent of the wire protocol.

    Build it with the constructors (`text`, `tool_use`, `message`, `http_error`,
    `stream_error`); the fields are what they set.

    Fields:
        kind: `"message"` (a model reply), `"http_error"` (a non-2xx answer) or
            `"stream_error"` (a streamed reply that ends in an `error` event).
        blocks: the content blocks of the reply, in order.
        stop_reason: the protocol-neutral stop reason (`"end_turn"`, `"tool_use"`,
            `"max_tokens"`, ...).
        model: the model name reported back; `None` echoes the request's `model`.
        input_tokens: reported input usage (tokens).
        output_tokens: reported output usage (tokens).
        status: the HTTP status (200 unless `kind` is `"http_error"`).
        error_type: the provider error type (e.g. `"overloaded_error"`) for errors.
        error_message: the human-readable error message for errors.
        body: for `http_error`, an explicit JSON body replacing the generated one.
        headers: extra response headers as `(name, value)` pairs.
        delay: seconds to wait before answering at all (ends early when the server closes).
        chunk_delay: seconds to wait between two stream events (ends early on close).
        response_fields: extra top-level fields of the reply's message / response object, as
            a router or aggregator adds them (e.g. `{"provider": "DeepInfra"}`, OpenRouter's
            field naming the upstream host); they override a generated field of that name.

    Thread-safety: immutable; safe to share.
    """

    kind: Literal["message", "http_error", "stream_error"] = "message"
    blocks: tuple[Block, ...] = ()
    stop_reason: str = "end_turn"
    model: str | None = None
    input_tokens: int = 10
    output_tokens: int = 5
    status: int = 200
    error_type: str | None = None
    error_message: str | None = None
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    chunk_delay: float = 0.0
    response_fields: dict[str, Any] = msgspec.field(default_factory=dict)

    @classmethod
    def text(cls, text: str | Iterable[str], **fields: Any) -> Reply:
        """A plain text reply.

        Args:
            text: the reply text (`str`, streamed one word per delta) or an iterable of
                `str` deltas streamed exactly as given.
            **fields: any other `Reply` field (`model`, `delay`, `output_tokens`, ...).

        Returns:
            A `Reply` with one `TextBlock` and `stop_reason="end_turn"` unless overridden.
        """
        return cls.message(_text_block(text), **fields)

    @classmethod
    def tool_use(
        cls,
        name: str,
        input: dict[str, Any],
        *,
        id: str | None = None,
        text: str | Iterable[str] | None = None,
        **fields: Any,
    ) -> Reply:
        """A reply that calls one tool, optionally preceded by a text block.

        Args:
            name: the tool name (e.g. `"Bash"`).
            input: the tool arguments (`dict`).
            id: the tool call id; default a fresh `"toolu_..."` id.
            text: optional text said before the call (`str` or deltas).
            **fields: any other `Reply` field.

        Returns:
            A `Reply` with `stop_reason="tool_use"` unless overridden.
        """
        call = ToolUseBlock(id if id is not None else _next_id("toolu"), name, dict(input))
        blocks = (call,) if text is None else (_text_block(text), call)
        fields.setdefault("stop_reason", "tool_use")
        return cls.message(*blocks, **fields)

    @classmethod
    def message(cls, *blocks: Block, **fields: Any) -> Reply:
        """A reply made of the given content blocks (`TextBlock` / `ToolUseBlock`), in order."""
        return cls(kind="message", blocks=tuple(blocks), **fields)

    @classmethod
    def http_error(
        cls,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        retry_after: str | int | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> Reply:
        """A non-2xx answer with a JSON error body.

        Args:
            status: the HTTP status (e.g. 401, 429, 529).
            message: the error message (default `"scripted error <status>"`).
            error_type: the provider error type; default derived from the status
                (401 → `"authentication_error"`, 429 → `"rate_limit_error"`, ...).
            retry_after: the `retry-after` header value (seconds, as sent), if any.
            body: an explicit JSON body, replacing the generated one.
            headers: extra response headers.
            **fields: any other `Reply` field (e.g. `delay`).

        Returns:
            A `Reply` of kind `"http_error"`.
        """
        extra = list((headers or {}).items())
        if retry_after is not None:
            extra.append(("retry-after", str(retry_after)))
        return cls(
            kind="http_error",
            status=status,
            error_type=error_type or _ERROR_TYPES.get(status, "api_error"),
            error_message=message if message is not None else f"scripted error {status}",
            body=body,
            headers=tuple(extra),
            **fields,
        )

    @classmethod
    def stream_error(
        cls,
        partial_text: str | Iterable[str] = "",
        *,
        error_type: str = "overloaded_error",
        message: str = "Overloaded",
        **fields: Any,
    ) -> Reply:
        """A streamed reply that sends `partial_text` and then an `error` event mid-stream.

        Args:
            partial_text: text streamed before the error (`""` for none).
            error_type: the error type of the `error` event.
            message: the error message of the `error` event.
            **fields: any other `Reply` field.

        Returns:
            A `Reply` of kind `"stream_error"`. Asked without streaming, it answers HTTP 529
            with the same error (the provider's behaviour for a plain request).
        """
        blocks = (_text_block(partial_text),) if partial_text else ()
        return cls(
            kind="stream_error",
            blocks=blocks,
            error_type=error_type,
            error_message=message,
            **fields,
        )


def _text_block(text: str | Iterable[str]) -> TextBlock:
    if isinstance(text, str):
        return TextBlock(_split_words(text))
    return TextBlock(tuple(text))


class RecordedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One request the server received, as logged.

    Fields:
        method: the HTTP method (`"POST"`, ...).
        path: the path without the query string (e.g. `"/v1/messages"`).
        query: the query parameters (`dict[str, list[str]]`, e.g. `{"beta": ["true"]}`).
        headers: the request headers with lower-cased names (`dict[str, str]`).
        body: the JSON body decoded, or `None` when there was none or it was not JSON.
        raw_body: the body bytes as received.
        received_ms: `time.monotonic()` in milliseconds when the request was read.
    """

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    raw_body: bytes
    received_ms: int


ScriptItem = Reply | Callable[[RecordedRequest], Reply]


class _Writer:
    """What a protocol uses to answer one request; hides the HTTP framing."""

    def __init__(self, handler: BaseHTTPRequestHandler, closing: threading.Event) -> None:
        self._handler = handler
        self._closing = closing
        self._streaming = False

    @property
    def streaming(self) -> bool:
        """True between `start_stream` and `end_stream`."""
        return self._streaming

    def wait(self, seconds: float) -> bool:
        """Wait `seconds`; False when the server closed meanwhile (stop answering)."""
        return seconds <= 0 or not self._closing.wait(seconds)

    def send_json(self, status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
        body = _encode(payload)
        handler = self._handler
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(body)))
        handler.send_header("request-id", _next_id("req"))
        for name, value in headers:
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()

    def start_stream(self, headers: Iterable[tuple[str, str]] = ()) -> None:
        handler = self._handler
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("transfer-encoding", "chunked")
        handler.send_header("request-id", _next_id("req"))
        for name, value in headers:
            handler.send_header(name, value)
        handler.end_headers()
        self._streaming = True

    def send_event(self, event: str, data: Any) -> None:
        frame = b"event: " + event.encode() + b"\ndata: " + _encode(data) + b"\n\n"
        self._chunk(frame)

    def end_stream(self) -> None:
        if self._streaming:
            self._chunk(b"")
            self._streaming = False

    def _chunk(self, data: bytes) -> None:
        out = self._handler.wfile
        out.write(b"%x\r\n%s\r\n" % (len(data), data))
        out.flush()


class _Protocol:
    """One wire protocol: the routes it serves and how it renders a `Reply`."""

    routes: ClassVar[dict[tuple[str, str], str]] = {}

    def __init__(self, server: ScriptedModelServer) -> None:
        self.server = server


def _encode(payload: Any) -> bytes:
    """JSON of `payload`; a scripted text holding a lone surrogate (no UTF-8 form) is sent
    escaped (`\\ud800`), as a provider's JSON may carry it."""
    try:
        return msgspec.json.encode(payload)
    except UnicodeEncodeError:
        return json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode()

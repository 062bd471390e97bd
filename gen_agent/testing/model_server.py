"""`ScriptedModelServer`: a loopback HTTP server that answers like a model provider, from a script.

Use it to test an agent (or a CLI such as Claude Code) without the network: point the client's
base URL at `server.url`, queue `Reply` items, run the turn, then read `server.requests`.

    with ScriptedModelServer([Reply.text("Hello there.")]) as server:
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test"}
        ...                                  # run the agent / CLI
        assert server.requests[0].body["stream"] is True

Script items are protocol-neutral (`Reply.text`, `Reply.tool_use`, `Reply.http_error`,
`Reply.stream_error`, `Reply.message`): each endpoint renders the next item in its own wire
format. Implemented protocol: the Anthropic Messages API (`POST /v1/messages`, streaming SSE or
plain JSON; `POST /v1/messages/count_tokens`). A further protocol is one more `_Protocol`
subclass registered in `_PROTOCOLS`; the script queue, request log, delays and shutdown are
shared.

The server binds 127.0.0.1 only, on a free port. Every wait inside it (`delay`,
`chunk_delay`) ends at once when the server closes, so `close()` is prompt.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qs, urlsplit

import msgspec

__all__ = [
    "RecordedRequest",
    "Reply",
    "ScriptedModelServer",
    "TextBlock",
    "ToolUseBlock",
]

_HOST = "127.0.0.1"
_DEFAULT_MODEL = "claude-sonnet-4-5"
_MAX_BODY_BYTES = 64 * 1024 * 1024
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

    def __init__(self, handler: _Handler, closing: threading.Event) -> None:
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
        body = msgspec.json.encode(payload)
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
        frame = b"event: " + event.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"
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


class _AnthropicMessages(_Protocol):
    """The Anthropic Messages API: `POST /v1/messages` and `/v1/messages/count_tokens`."""

    routes: ClassVar[dict[tuple[str, str], str]] = {
        ("POST", "/v1/messages"): "create",
        ("POST", "/v1/messages/count_tokens"): "count_tokens",
    }

    def count_tokens(self, request: RecordedRequest, out: _Writer) -> None:
        # A rough, deterministic count: one token per 4 bytes of the request body.
        out.send_json(200, {"input_tokens": max(1, len(request.raw_body) // 4)})

    def create(self, request: RecordedRequest, out: _Writer) -> None:
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


_PROTOCOLS: tuple[type[_Protocol], ...] = (_AnthropicMessages,)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        # Clients probe reachability with `HEAD /` (the Claude CLI does): headers only.
        self._read_request_logged()
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def _read_request_logged(self) -> RecordedRequest:
        request = self._read_request()
        self.server.owner._record(request)
        return request

    def _dispatch(self) -> None:
        owner = self.server.owner
        request = self._read_request_logged()
        route = owner._route(request.method, request.path)
        out = _Writer(self, owner._closing)
        try:
            if route is None:
                error = {"type": "not_found_error", "message": f"no route {request.path}"}
                out.send_json(404, {"type": "error", "error": error})
            else:
                protocol, method = route
                getattr(protocol, method)(request, out)
        except OSError:
            # The client went away mid-answer (an interrupted CLI); nothing left to tell it.
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - reported through `failures`
            # A broken script item (e.g. a raising callable) must reach the test, not stderr.
            owner._handler_failed(exc)
            self.close_connection = True
            if not out.streaming:
                error = {"type": "api_error", "message": "scripted model server: script failed"}
                with contextlib.suppress(OSError):
                    out.send_json(500, {"type": "error", "error": error})

    def _read_request(self) -> RecordedRequest:
        split = urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(min(length, _MAX_BODY_BYTES)) if length > 0 else b""
        try:
            body = msgspec.json.decode(raw) if raw else None
        except msgspec.DecodeError:
            body = None
        return RecordedRequest(
            method=self.command,
            path=split.path,
            query=parse_qs(split.query),
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
            raw_body=raw,
            received_ms=time.monotonic_ns() // 1_000_000,
        )

    def log_message(self, format: str, *args: Any) -> None:
        # Silence the default stderr access log; the request log is the record.
        return


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = True

    def __init__(self, owner: ScriptedModelServer, handler_timeout: float) -> None:
        self.owner = owner
        self.handler_timeout = handler_timeout
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((_HOST, 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client went away (e.g. an SDK closing its keep-alive pool): normal
        super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.handler_timeout)
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Shut every open connection so handler threads blocked reading wake up at once."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class ScriptedModelServer:
    """A scripted model-provider HTTP server on 127.0.0.1 (a free port).

    Args:
        script: the initial replies, answered in order, one per model request. An item may
            also be a callable `f(RecordedRequest) -> Reply`, called when its turn comes.
        default: the reply used when the script is empty; `None` answers HTTP 400
            `invalid_request_error` "no scripted reply left" (never retried by clients).
        handler_timeout: seconds a connection may stay silent before the server drops it.

    Use as a context manager (`with ScriptedModelServer(...) as server:`), or call `start()`
    and `close()`. Requests that are not model calls (count_tokens, unknown paths) never
    consume the script; every request is logged.

    Thread-safety: every public method may be called from any thread.

    Example:
        >>> with ScriptedModelServer([Reply.text("hi")]) as server:
        ...     server.url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        default: Reply | None = None,
        handler_timeout: float = 30.0,
    ) -> None:
        self._lock = threading.Condition()
        self._script: collections.deque[ScriptItem] = collections.deque(script)
        self._requests: list[RecordedRequest] = []
        self._unscripted = 0
        self._failures: list[BaseException] = []
        self._default = default
        self._closing = threading.Event()
        self._handler_timeout = handler_timeout
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._protocols = [cls(self) for cls in _PROTOCOLS]

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        """Bind 127.0.0.1 on a free port and serve in a background thread; returns `self`.

        Raises:
            RuntimeError: the server was already started.
        """
        if self._httpd is not None:
            raise RuntimeError("ScriptedModelServer.start: already started")
        self._httpd = _HTTPServer(self, self._handler_timeout)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-model-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, wake every delayed answer, drop open connections, join threads.

        Idempotent. Returns once the serving thread and the handler threads have ended.
        """
        httpd, self._httpd = self._httpd, None
        self._closing.set()
        if httpd is None:
            return
        httpd.shutdown()
        httpd.drop_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- addresses ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound TCP port (`int`). Raises `RuntimeError` before `start()`."""
        if self._httpd is None:
            raise RuntimeError("ScriptedModelServer: not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The server root, `"http://127.0.0.1:PORT"` (no trailing slash)."""
        return f"http://{_HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """The value for `ANTHROPIC_BASE_URL` (the root: clients append `/v1/messages`)."""
        return self.url

    # -- script --------------------------------------------------------------------------

    def enqueue(self, *items: ScriptItem) -> None:
        """Append replies (or `f(RecordedRequest) -> Reply` callables) to the script."""
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        """Script items not yet consumed (count)."""
        with self._lock:
            return len(self._script)

    @property
    def unscripted(self) -> int:
        """Model requests answered from `default` (or the no-script error) so far (count)."""
        with self._lock:
            return self._unscripted

    # -- request log ------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def model_requests(self) -> list[RecordedRequest]:
        """The requests that asked for a model reply (they consume the script), in order."""
        return [r for r in self.requests if self._is_model_call(r)]

    def wait_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until at least `count` requests were received; return the log (a copy).

        Args:
            count: how many requests to wait for (all paths count).
            timeout: the bound on the wait (seconds).

        Raises:
            TimeoutError: fewer than `count` requests arrived within `timeout`.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= count, timeout):
                got = len(self._requests)
                raise TimeoutError(f"wait_requests: {got} of {count} requests in {timeout} s")
            return list(self._requests)

    @property
    def failures(self) -> list[BaseException]:
        """Exceptions raised by script callables (answered with HTTP 500), in order."""
        with self._lock:
            return list(self._failures)

    def wait_model_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until at least `count` model requests (ones that consume the script) were
        received; return them in order.

        Args:
            count: how many model requests to wait for.
            timeout: the bound on the wait (seconds).

        Raises:
            TimeoutError: fewer than `count` arrived within `timeout`.
        """

        def model_calls() -> list[RecordedRequest]:
            return [r for r in self._requests if self._is_model_call(r)]

        with self._lock:
            if not self._lock.wait_for(lambda: len(model_calls()) >= count, timeout):
                got = len(model_calls())
                raise TimeoutError(
                    f"wait_model_requests: {got} of {count} model requests in {timeout} s"
                )
            return model_calls()

    # -- internals used by the handler and the protocols ---------------------------------

    def _handler_failed(self, exc: BaseException) -> None:
        with self._lock:
            self._failures.append(exc)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)
            self._lock.notify_all()

    def _is_model_call(self, request: RecordedRequest) -> bool:
        # Every protocol names its script-consuming endpoint "create".
        route = self._route(request.method, request.path)
        return route is not None and route[1] == "create"

    def _route(self, method: str, path: str) -> tuple[_Protocol, str] | None:
        for protocol in self._protocols:
            name = protocol.routes.get((method, path.rstrip("/") or "/"))
            if name is not None:
                return protocol, name
        return None

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            if self._script:
                item = self._script.popleft()
            else:
                self._unscripted += 1
                item = self._default or Reply.http_error(
                    400, "scripted model server: no scripted reply left"
                )
        reply = item(request) if callable(item) else item
        if not isinstance(reply, Reply):
            raise TypeError(f"script item returned {type(reply).__name__}, expected Reply")
        return reply


# Further wire protocols register themselves in `_PROTOCOLS` when imported; importing them here
# makes every server speak all of them. (At the end: they import this module's names.)
from gen_agent.testing import openai_protocol as _openai_protocol  # noqa: E402, F401

"""`ScriptedModelServer`: a loopback HTTP server that answers like a model provider, from a script.

Use it to test an agent (or a CLI such as Claude Code) without the network: point the client's
base URL at `server.url`, queue `Reply` items, run the turn, then read `server.requests`.

    with ScriptedModelServer([Reply.text("Hello there.")]) as server:
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test"}
        ...                                  # run the agent / CLI
        assert server.requests[0].body["stream"] is True

Script items are protocol-neutral (`Reply.text`, `Reply.tool_use`, `Reply.http_error`,
`Reply.stream_error`, `Reply.message`): each endpoint renders the next item in its own wire
format. Implemented protocols: the Anthropic Messages API (`anthropic_protocol`) and the OpenAI
Responses API (`openai_protocol`). A further protocol is one more `_Protocol` subclass in a module
of its own, listed in `_PROTOCOLS`; the script queue, request log, delays and shutdown are shared.

The server binds 127.0.0.1 only, on a free port. Every wait inside it (`delay`,
`chunk_delay`) ends at once when the server closes, so `close()` is prompt.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec

from gen_agent.testing._anthropic_protocol import AnthropicMessagesProtocol
from gen_agent.testing._openai_protocol import OpenAIResponsesProtocol
from gen_agent.testing._script import (
    RecordedRequest,
    Reply,
    ScriptItem,
    TextBlock,
    ToolUseBlock,
    _Protocol,
    _Writer,
)

__all__ = [
    "RecordedRequest",
    "Reply",
    "ScriptedModelServer",
    "TextBlock",
    "ToolUseBlock",
]

_HOST = "127.0.0.1"
_MAX_BODY_BYTES = 64 * 1024 * 1024
# Every server speaks every wire protocol; one more protocol is one more module listed here.
_PROTOCOLS: tuple[type[_Protocol], ...] = (AnthropicMessagesProtocol, OpenAIResponsesProtocol)


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
    # The listen backlog: many clients connecting at once (a 64-worker pool) must not see
    # resets and 1 s SYN retries (socketserver's default is 5).
    request_queue_size = 256

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
        # Chunked replies are many small writes: without TCP_NODELAY each may wait ~40 ms
        # for the client's delayed ACK (Nagle), which distorts every timing taken here.
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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
        self._initial_default = default
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

    def reset(self) -> None:
        """Forget the script, the request log, the failures and the unscripted count, and
        restore the `default` given at construction: the server is as if freshly started
        (same port). The `scripted_model_server` fixture calls it before every test."""
        with self._lock:
            self._script.clear()
            self._requests.clear()
            self._failures.clear()
            self._unscripted = 0
            self._default = self._initial_default

    @property
    def default(self) -> Reply | None:
        """The reply used when the script is empty (None: an HTTP 400 "no scripted reply
        left"). Settable; `reset()` restores the constructor's value."""
        with self._lock:
            return self._default

    @default.setter
    def default(self, reply: Reply | None) -> None:
        if reply is not None and not isinstance(reply, Reply):
            raise TypeError(f"default must be a Reply or None, got {type(reply).__name__}")
        with self._lock:
            self._default = reply

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

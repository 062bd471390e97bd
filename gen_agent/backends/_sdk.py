"""What the two SDK-based HTTP backends (Anthropic, OpenAI) share.

- `load_sdk`: import an optional SDK lazily; a missing one is a `SessionStartError` naming the
  extra to install. Importing gen_agent never imports an SDK.
- `Transport`: one SDK client per session plus what makes `cancel` work from another thread.
  Python threads cannot be interrupted, and closing an SDK stream from a second thread does
  not wake a thread blocked reading it; shutting the socket down does. The SDK's HTTP client
  gets a request hook that asks the HTTP core to report each connection it opens (its `trace`
  extension), and `cancel()` shuts down every socket the session's client opened, which ends
  a blocked read at once, whether the response headers arrived yet or not.
- `status_error`, `transport_error`: the parts of the SDK exception mapping both backends
  share (each backend has its one boundary function that uses them).
- `trim_history`: bound a conversation kept in a session (count and bytes).
"""

from __future__ import annotations

import contextlib
import importlib
import socket
import threading
import weakref
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Final

from loguru import logger

from gen_agent.backend import BackendError, SessionStartError
from gen_agent.size import term_size

__all__ = [
    "Transport",
    "load_sdk",
    "status_error",
    "transport_error",
    "trim_history",
]

_CONNECT_DONE: Final = "connect_tcp.complete"


def load_sdk(module: str, *, extra: str, provider: str) -> ModuleType:
    """Import the SDK `module`, or refuse the session with a message naming the extra.

    Args:
        module: the SDK's import name (`"anthropic"`, `"openai"`).
        extra: the gen-agent extra that installs it (`"anthropic"`, `"openai"`).
        provider: the provider name for the error.

    Returns:
        The imported module.

    Raises:
        SessionStartError: reason a `BackendError` of kind `"missing_sdk"`, not retryable,
            whose message says `pip install 'gen-agent[EXTRA]'`.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = (
            f"the {provider} backend needs the `{module}` package: pip install 'gen-agent[{extra}]'"
        )
        reason = BackendError.new(provider, "missing_sdk", module, message=message)
        raise SessionStartError(reason, message) from exc


class Transport:
    """A session's SDK client and the sockets it opened, so a turn can be cancelled.

    Args:
        make_client: called once with the HTTP client to give the SDK
            (`sdk.DefaultHttpxClient(event_hooks=...)`); returns the SDK client.
        sdk: the SDK module (its `DefaultHttpxClient` builds the HTTP client).

    Every copy of a session shares one `Transport`. A turn calls `begin_turn()` and later
    asks `cancelled(token)`; `cancel()` (any thread) marks the current turn cancelled and
    shuts down every open socket of the client. Thread-safe.
    """

    def __init__(self, sdk: ModuleType, make_client: Any) -> None:
        self._lock = threading.Lock()
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._turn = 0
        self._cancelled_turn = -1
        self._closed = False
        http_client = sdk.DefaultHttpxClient(event_hooks={"request": [self._on_request]})
        self.client = make_client(http_client)

    def begin_turn(self) -> int:
        """Start a turn; returns its token (a cancel before this call does not affect it)."""
        with self._lock:
            self._turn += 1
            return self._turn

    def cancelled(self, token: int) -> bool:
        """True if the turn `token` was cancelled (or the transport closed)."""
        with self._lock:
            return self._closed or self._cancelled_turn == token

    def cancel(self) -> None:
        """Cancel the current turn: shut down every socket of the client. Quick; idempotent."""
        with self._lock:
            self._cancelled_turn = self._turn
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Cancel any turn and close the SDK client (its connection pool). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.cancel()
        try:
            self.client.close()
        except Exception as exc:  # noqa: BLE001 - closing is best effort; logged
            logger.debug("gen_agent SDK client close raised {}", type(exc).__name__)

    def _on_request(self, request: Any) -> None:
        # The HTTP core calls the `trace` extension of each request at every step; the one
        # that opens a connection reports its network stream, whose socket we keep (weakly).
        request.extensions["trace"] = self._trace

    def _trace(self, name: str, info: dict[str, Any]) -> None:
        if not name.endswith(_CONNECT_DONE):
            return
        stream = info.get("return_value")
        get_extra_info = getattr(stream, "get_extra_info", None)
        sock = get_extra_info("socket") if callable(get_extra_info) else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sockets.add(sock)
            if self.cancelled(self._turn):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def status_error(provider: str, exc: Any) -> BackendError:
    """An SDK `APIStatusError` for an HTTP error status (>= 400), as `BackendError.http`.

    Args:
        provider: the provider name.
        exc: the exception: `status_code` (int), `body` (decoded JSON or text) and
            `response.headers` (for `retry-after`).

    Returns:
        `BackendError.http(provider, status, body, headers, raw=exc)`.
    """
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return BackendError.http(provider, exc.status_code, exc.body, headers, exc)


def transport_error(provider: str, exc: BaseException, *, timeout: bool) -> BackendError:
    """An SDK connection failure: kind `"timeout"` or `"transport"`, retryable, raw `exc`."""
    kind = "timeout" if timeout else "transport"
    message = f"{provider} request failed before an answer ({type(exc).__name__})"
    return BackendError.new(provider, kind, exc, retryable=True, message=message)


def trim_history(
    messages: Sequence[dict[str, Any]], *, max_messages: int, max_bytes: int
) -> tuple[dict[str, Any], ...]:
    """Drop the oldest messages until at most `max_messages` remain within `max_bytes`.

    Messages go in user/assistant pairs from the front, so the kept history still starts
    with a user message; the last message is always kept.

    Args:
        messages: the conversation, oldest first.
        max_messages: the bound on the count (>= 1).
        max_bytes: the bound on the summed `term_size` of the messages (bytes).

    Returns:
        The kept messages, oldest first (a tuple).
    """
    kept = list(messages)
    sizes = [term_size(message) for message in kept]
    total = sum(sizes)
    while len(kept) > 1 and (len(kept) > max_messages or total > max_bytes):
        drop = 2 if len(kept) > 2 else 1
        total -= sum(sizes[:drop])
        del kept[:drop], sizes[:drop]
    return tuple(kept)

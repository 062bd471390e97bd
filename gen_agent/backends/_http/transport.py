"""`Transport`: a session's SDK client, built lazily on one shared TLS context, and what makes
`cancel()` work from another thread.

What is shared and what is not:

- One `ssl.SSLContext` per process (`shared_ssl_context`), built on first use and never
  changed afterwards: building one loads the CA bundle, which cost 30-45 ms and ~830 KiB per
  agent when every session built its own. Wrapping sockets with one context from many threads
  is safe (the `ssl` module's contexts are thread-safe for that).
- Per session: the SDK client and its connection pool (so 30 turns of one agent reuse one
  connection, and one session's `cancel()` never touches another's sockets), and the sockets
  that pool opened (kept weakly, for `cancel()`).

The client is built at the first turn, not at start (the options and the API key are checked
at start all the same), and it is dropped again when the agent hibernates (`release_idle`):
a hibernated agent holds no socket and no client; its next turn builds a new one (~1 ms).

Cancel: Python threads cannot be interrupted, and closing an SDK stream from a second thread
does not wake a thread blocked reading it; shutting the socket down does. The HTTP client gets
a request hook that asks the HTTP core to report each connection it opens (its `trace`
extension), and `cancel()` shuts down every socket the session's client opened, which ends a
blocked read at once, whether the response headers arrived yet or not.

Reuse of a kept connection:

- a connection idle for longer than `IDLE_BOUND_S` is never reused (the pool's keep-alive
  expiry): servers close idle connections after a few seconds, and a request sent on a
  connection the server is closing fails;
- a request that fails on a *reused* connection before any byte of an answer (the server
  closed it while idle: "server disconnected", a reset) is sent once more, on a new connection
  (`reuse_failed`), as HTTP clients do for such reuse failures. Nothing of it reached the
  model: the server never answered it.

A finished turn's response is parked (`park`) and read to its end in the background by the
process's one drain thread (`DRAINER`), so an idle agent does not keep its last response (its
request, headers and reader state, ~19 KiB): the reply never waits for the end of the body.
The next turn reads a parked response to its end itself if the drain thread has not taken it
yet, or waits for the drain thread's read of it to end (`finish_parked`); either read is
bounded by `DRAIN_LIMIT_S`: when the limit passes, only that response's socket is shut down,
and only while the drain is still running: a timer that fires late, after the drain ended
and the connection went back to the pool (and to the next request), does nothing.

With the `client=` or `http_client=` option the session uses the caller's client as is: it
is never closed or dropped by gen_agent (its owner closes it), no hook is added to it, and
`cancel()` shuts down the socket of the response being read once its head arrived (before
that, the request runs until its timeout or its end).
"""

from __future__ import annotations

import contextlib
import importlib
import queue
import select
import socket
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Final

from loguru import logger

from gen_agent._timers import TIMERS

__all__ = [
    "DRAINER",
    "DRAIN_LIMIT_S",
    "DRAIN_THREAD",
    "IDLE_BOUND_S",
    "Transport",
    "close_quietly",
    "http_module",
    "shared_ssl_context",
]

_CONNECT_DONE: Final = "connect_tcp.complete"
_TLS_DONE: Final = "start_tls.complete"
_READABLE: Final = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP

DRAIN_LIMIT_S: Final = 1.0
"""How long the next turn reads a finished turn's body to its end before giving the
connection up (seconds): the end normally comes with the last event."""

IDLE_BOUND_S: Final = 4.0
"""A kept connection idle for longer than this is not reused (seconds; the pool's keep-alive
expiry). Below the usual server keep-alive timeouts (5 s and more)."""

DRAINER_IDLE_S: Final = 5.0
"""The drain thread exits after this long with nothing to drain (seconds); it is started
again on demand."""

DRAIN_THREAD: Final = "gen_agent-drain"
"""The drain thread's name (the test plugin's leak check counts it as ended once idle)."""

_ssl_lock = threading.Lock()
_ssl_context: Any = None


def http_module(sdk: ModuleType) -> ModuleType:
    """The HTTP client package the SDK's `DefaultHttpxClient` is built on (`httpx` or its
    fork `httpx2`, depending on the SDK's version)."""
    base = next(cls for cls in sdk.DefaultHttpxClient.__mro__[1:]
                if cls.__module__.split(".")[0] != sdk.__name__.split(".")[0])
    return importlib.import_module(base.__module__.split(".")[0])


def shared_ssl_context(http: ModuleType) -> Any:
    """The process's one TLS context for the SDK clients, built on first use by the HTTP
    package `http` (its `create_ssl_context`: the CA bundle it trusts, honouring
    `SSL_CERT_FILE`/`SSL_CERT_DIR`). Never modified after it is built: share it, do not
    change it."""
    global _ssl_context
    if _ssl_context is None:
        with _ssl_lock:
            if _ssl_context is None:
                _ssl_context = http.create_ssl_context()
    return _ssl_context


def close_quietly(stream: Any) -> None:
    """Close a response (or stream), logging (at debug) what closing raised."""
    try:
        stream.close()
    except Exception as exc:  # noqa: BLE001 - closing is best effort; logged
        logger.debug("gen_agent closing a response raised {}", type(exc).__name__)


def _socket_of(stream: Any) -> socket.socket | None:
    """The socket under an SDK stream's (or an httpx response's) connection, if known."""
    response = getattr(stream, "response", stream)
    extensions = getattr(response, "extensions", None)
    network = extensions.get("network_stream") if isinstance(extensions, dict) else None
    get_extra_info = getattr(network, "get_extra_info", None)
    sock = get_extra_info("socket") if callable(get_extra_info) else None
    return sock if isinstance(sock, socket.socket) else None


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class Transport:
    """A session's SDK client and the sockets it opened, so a turn can be cancelled.

    Args:
        sdk: the SDK module (its `DefaultHttpxClient` builds the HTTP client).
        make_client: called with the HTTP client to give the SDK (or None with `own=True`
            and a caller's `http_client` baked in); returns the SDK client. Called at the
            first turn, and again at the first turn after each `release_idle`.
        own: a client the caller gave (`client=`), used as is and never closed or dropped.
        owned_http: True when `make_client` uses the caller's `http_client` (never closed).

    Every copy of a session shares one `Transport`. A turn calls `begin_turn()` and later
    asks `cancelled(token)`; `cancel()` (any thread) marks the current turn cancelled and
    shuts down every open socket of the client. Thread-safe.
    """

    def __init__(self, sdk: ModuleType, make_client: Callable[[Any], Any], *,
                 own: Any = None, owned_http: bool = False) -> None:
        self._sdk = sdk
        self._make_client = make_client
        self._lock = threading.Lock()
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._turn = 0
        self._cancelled_turn = -1
        self._closed = False
        self._parked: tuple[Any, Iterator[bytes]] | None = None
        self._draining: tuple[int, socket.socket | None] | None = None
        self._drained: threading.Event | None = None  # set when the running drain ends
        self._drains = 0
        self._connected = False  # the current request opened a new connection
        self._caller_owned = own is not None or owned_http
        self._hooked = not self._caller_owned
        self._client: Any = own
        self._reading: socket.socket | None = None  # a caller-owned client's current socket
        self.status: int | None = None  # the current turn's last response status

    # ------------------------------------------------------------------ the client
    @property
    def client(self) -> Any:
        """The SDK client, built now if there is none (the first turn, or after idle)."""
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                self._client = self._build()
            return self._client

    @property
    def built(self) -> bool:
        """True while the session holds an SDK client (False before the first turn and
        after `release_idle`)."""
        return self._client is not None

    def _build(self) -> Any:
        if not self._hooked:
            return self._make_client(None)
        http = http_module(self._sdk)
        limits = http.Limits(max_connections=1000, max_keepalive_connections=100,
                              keepalive_expiry=IDLE_BOUND_S)
        http_client = self._sdk.DefaultHttpxClient(
            verify=shared_ssl_context(http), limits=limits,
            event_hooks={"request": [self._on_request], "response": [self._on_response]})
        return self._make_client(http_client)

    def release_idle(self) -> None:
        """Drop the client and its connections (the agent hibernates; no turn runs): a
        parked response is closed, the pool closed. A caller's own client is kept as is.
        The next turn builds a new client. Quick; idempotent."""
        if self._caller_owned:
            return
        with self._lock:
            parked, self._parked = self._parked, None
            client, self._client = self._client, None
        if parked is not None:
            close_quietly(parked[0])
        if client is not None:
            _close_client(client)

    # ------------------------------------------------------------------ parked responses
    def park(self, stream: Any, rest: Iterator[bytes]) -> None:
        """Keep a finished turn's response (`stream`, its unread body `rest`) to be read to
        its end in the background (by `DRAINER`, or by the next turn's `finish_parked`,
        whichever comes first), so its connection goes back to the pool without the reply
        waiting for the end of the body, and an idle session keeps no response."""
        with self._lock:
            previous = self._parked
            self._parked = None if self._closed else (stream, rest)
            closed = self._closed
            self._reading = None
        if previous is not None:
            close_quietly(previous[0])
        if closed:
            close_quietly(stream)
        else:
            DRAINER.submit(self)

    def finish_parked(self, *, wait: bool = True) -> None:
        """Read the parked response to its end and release it (its connection is reused),
        or (`wait`) wait for a read of it already running on another thread to end.

        Called by the next turn before its request. Quick in the usual case (the end of the
        body came with the last event); bounded by `DRAIN_LIMIT_S`: a body that has not
        ended by then has its own socket shut down (the pool drops it, the next request
        opens a new one), as has one that fails or is cut. A limit timer that fires after
        the drain ended does nothing (the connection may be the next request's by then).
        """
        with self._lock:
            parked, self._parked = self._parked, None
            elsewhere = self._drained
            if parked is not None:
                self._drains += 1
                drain = self._drains
                self._draining = (drain, _socket_of(parked[0]))
                running = self._drained = threading.Event()
        if parked is None:
            if wait and elsewhere is not None:  # read elsewhere: bounded by its limit timer
                elsewhere.wait(DRAIN_LIMIT_S + 1.0)
            return
        stream, rest = parked
        limit = TIMERS.schedule(DRAIN_LIMIT_S, lambda: self._drain_too_long(drain))
        try:
            for _ in rest:
                pass
        except Exception as exc:  # noqa: BLE001 - the turn it belonged to is over; logged
            logger.debug("gen_agent reading a body to its end raised {}", type(exc).__name__)
        finally:
            with self._lock:
                self._draining = None  # from here on a late timer finds nothing to shut
                if self._drained is running:
                    self._drained = None
            limit.cancel()
            close_quietly(stream)
            running.set()

    def _drain_too_long(self, drain: int) -> None:
        # Under the lock: the drain cannot end (and hand its connection on) while we shut.
        with self._lock:
            if self._draining is None or self._draining[0] != drain:
                return
            sock = self._draining[1]
            if sock is not None:
                _shut(sock)
                return
            sockets = list(self._sockets)  # unknown socket: while draining no request runs
            for other in sockets:
                _shut(other)

    # ------------------------------------------------------------------ turns and cancel
    def begin_turn(self) -> int:
        """Start a turn; returns its token (a cancel before this call does not affect it)."""
        with self._lock:
            self._turn += 1
            self.status = None
            self._reading = None
            return self._turn

    def reading(self, stream: Any) -> None:
        """The turn reads `stream` now (a caller-owned client: its socket is what `cancel()`
        shuts down)."""
        if self._hooked:
            return
        sock = _socket_of(stream)
        with self._lock:
            self._reading = sock
            cancelled = self._cancelled_turn == self._turn
        if cancelled and sock is not None:
            _shut(sock)

    def cancelled(self, token: int) -> bool:
        """True if the turn `token` was cancelled (or the transport closed)."""
        with self._lock:
            return self._closed or self._cancelled_turn == token

    def cancel(self) -> None:
        """Cancel the current turn: shut down every socket of the client. Quick; idempotent."""
        with self._lock:
            self._cancelled_turn = self._turn
            sockets = list(self._sockets)
            if self._reading is not None:
                sockets.append(self._reading)
        for sock in sockets:
            _shut(sock)

    def reuse_failed(self, exc: BaseException) -> bool:
        """True when the request that raised `exc` went out on a reused connection and failed
        before any answer because that connection was gone (closed or reset by the server
        while idle): it may be sent once more on a new connection."""
        if not self._hooked or self._connected or self.status is not None:
            return False
        for name in ("httpx2", "httpx"):
            httpx = sys.modules.get(name)
            if httpx is None:
                continue
            lost = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
            seen: BaseException | None = exc
            for _ in range(4):  # the SDK wraps the HTTP client's error (its __cause__)
                if seen is None:
                    break
                if isinstance(seen, httpx.TimeoutException):
                    return False
                if isinstance(seen, lost):
                    return True
                seen = seen.__cause__ or seen.__context__
        return False

    def close(self) -> None:
        """Cancel any turn and close the SDK client (its connection pool), unless the caller
        owns it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            parked, self._parked = self._parked, None
        if parked is not None:
            close_quietly(parked[0])
        self.cancel()
        if self._caller_owned:
            return
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            _close_client(client)

    # ------------------------------------------------------------------ HTTP client hooks
    def _on_request(self, request: Any) -> None:
        # The HTTP core calls the `trace` extension of each request at every step; the one
        # that opens a connection reports its network stream, whose socket we keep (weakly).
        self._connected = False
        request.extensions["trace"] = self._trace

    def _on_response(self, response: Any) -> None:
        # Its head arrived: a body that then fails (a corrupt error body the SDK reads
        # itself) still reports the status in the diagnostics.
        self.status = response.status_code

    def _trace(self, name: str, info: dict[str, Any]) -> None:
        tls = name.endswith(_TLS_DONE)
        if not tls and not name.endswith(_CONNECT_DONE):
            return
        stream = info.get("return_value")
        get_extra_info = getattr(stream, "get_extra_info", None)
        sock = get_extra_info("socket") if callable(get_extra_info) else None
        if isinstance(sock, socket.socket):
            _read_when_readable(stream, sock)
        if tls:
            return
        self._connected = True
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sockets.add(sock)
                cancelled = self._closed or self._cancelled_turn == self._turn
            if cancelled:
                _shut(sock)


def _read_when_readable(stream: Any, sock: socket.socket) -> None:
    """Make the HTTP core's `stream.read(max_bytes, timeout)` wait until `sock` is readable
    before reading. A socket's `recv(max_bytes)` allocates its `max_bytes` buffer (64 KiB in
    the HTTP core) before it blocks, so every turn waiting for the model's next bytes held
    one: 64 MiB at 1,000 turns in flight. Waiting first (`poll`, for the read's timeout)
    means the buffer exists only while data is copied into it. A read that finds the socket
    shut down (`cancel()`) or closed reads as before (end of stream, or the core's error)."""
    if not callable(getattr(stream, "read", None)) or "read" in getattr(stream, "__dict__", ()):
        return
    core_read = weakref.WeakMethod(stream.read)  # weak: no cycle through the stream
    pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted, no wait
    fd = sock.fileno()
    poller = select.poll()  # one per connection; the fd is checked open before each wait
    poller.register(fd, _READABLE)

    def read_when_readable(max_bytes: int, timeout: float | None = None) -> bytes:
        read = core_read()
        assert read is not None  # called through the stream, so it is alive
        if sock.fileno() == fd and (pending is None or not pending()):
            with contextlib.suppress(InterruptedError):
                if not poller.poll(None if timeout is None else timeout * 1000.0):
                    # Silent for `timeout`: the read below times out as it did before.
                    return read(max_bytes, 1e-3)
        return read(max_bytes, timeout)

    with contextlib.suppress(AttributeError, TypeError):
        stream.read = read_when_readable


class _Drainer:
    """One daemon thread that reads parked responses to their end (`Transport.finish_parked`)
    one after another; it exits after `DRAINER_IDLE_S` with nothing queued and is started
    again by the next `submit`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._queue: queue.SimpleQueue[Transport] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending = 0

    def submit(self, transport: Transport) -> None:
        """Queue `transport`'s parked response to be drained (nothing if the next turn took
        it meanwhile)."""
        with self._lock:
            self._pending += 1
            self._queue.put(transport)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=DRAIN_THREAD,
                                                daemon=True)
                self._thread.start()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until every submitted drain is done; True if so."""
        with self._settled:
            return self._settled.wait_for(lambda: self._pending == 0, timeout)

    def _loop(self) -> None:
        while True:
            try:
                transport = self._queue.get(timeout=DRAINER_IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            try:
                transport.finish_parked(wait=False)
            except Exception as exc:  # noqa: BLE001 - the drain thread must survive
                logger.warning("gen_agent background drain failed ({})", type(exc).__name__)
            del transport
            with self._settled:
                self._pending -= 1
                if self._pending == 0:
                    self._settled.notify_all()


DRAINER: Final = _Drainer()
"""The process's drain thread for parked responses."""


def _close_client(client: Any) -> None:
    try:
        client.close()
    except Exception as exc:  # noqa: BLE001 - closing is best effort; logged
        logger.debug("gen_agent SDK client close raised {}", type(exc).__name__)

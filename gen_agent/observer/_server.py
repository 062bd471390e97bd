"""`serve` and `Observer`: the observer's web server (uvicorn) on a background thread."""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gen_agent._system import AgentSystem, current_system
from gen_agent.observer._collector import Collector
from gen_agent.observer._publisher import Publisher

__all__ = ["Observer", "serve"]

_START_TIMEOUT_S = 10.0
_MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP address or `"localhost"`) names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _require_web_stack() -> Any:
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise ImportError("gen_agent.observer needs Starlette and uvicorn: "
                          "pip install 'gen-agent[observer]'") from exc
    return uvicorn


class Observer:
    """A running observer: its address, its token, and `stop()`. Made by `serve`.

    Attributes:
        url: the page's address, with the token (`http://127.0.0.1:PORT/?token=...`): open
            it to watch and to act.
        base_url: the address without the token (`http://127.0.0.1:PORT`).
        host, port: where it listens (the real port when 0 was asked for).
        token: the secret that actions (and, beyond loopback, every request) must present.
        collector: the `Collector` behind the view.

    Use as a context manager, or call `stop()`: it ends every stream, stops the server and
    joins its threads (none is left behind). `str(observer)` is its `url`.
    """

    def __init__(self, *, host: str, port: int, token: str, collector: Collector,
                 publisher: Publisher, server: Any, thread: threading.Thread,
                 worker: ThreadPoolExecutor, sock: socket.socket) -> None:
        self.host, self.port, self.token = host, port, token
        self.collector = collector
        shown = f"[{host}]" if ":" in host else host
        self.base_url = f"http://{shown}:{port}"
        self.url = f"{self.base_url}/?token={token}"
        self._publisher, self._server, self._thread = publisher, server, thread
        self._worker, self._sock = worker, sock
        self._stop_lock = threading.Lock()
        self._stopped = False

    def __repr__(self) -> str:
        return f"<Observer {self.base_url} {'stopped' if self._stopped else 'running'}>"

    def __str__(self) -> str:
        return self.url

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True until `stop()` (or a server failure) ended it."""
        return not self._stopped and self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving: end the event streams, stop the server and its thread, detach the
        telemetry handler and drop the rings. Idempotent.

        Args:
            timeout: seconds to wait for the server thread (it normally ends in well under
                one second).

        Raises:
            TimeoutError: the server thread did not end within `timeout`.
        """
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._publisher.stop(timeout)
        self._server.should_exit = True
        self._thread.join(timeout)
        self._worker.shutdown(wait=True)
        self.collector.close()
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._thread.is_alive():
            raise TimeoutError(f"the observer's server did not stop within {timeout} s")


def serve(host: str = "127.0.0.1", port: int = 0, system: AgentSystem | None = None, *,
          allow_remote: bool = False, token: str | None = None, show_text: bool = False,
          max_turns: int = 200, max_events: int = 200, turns_per_agent: int = 5,
          min_interval_ms: int = 200) -> Observer:
    """Start the observer, a live web view of `system`, on a background thread.

    Args:
        host: the address to bind. Loopback (`127.0.0.1`, `::1`, `localhost`) by default;
            any other address needs `allow_remote=True`.
        port: the TCP port; 0 (default) picks a free one (read `Observer.port`).
        system: the `AgentSystem` to show (default: the current one).
        allow_remote: allow a non-loopback `host`. Every request must then present the
            token (header `Authorization: Bearer <token>` or `X-Observer-Token`, or the
            `token` query parameter for the page and its stream).
        token: the secret (at least 16 characters); default: a fresh random one. Actions
            always need it, on loopback too.
        show_text: also show each turn's dispatched prompt (its first 500 characters).
            Default False: no page or stream ever contains prompt or response text.
        max_turns: size of the ring of recent turns (count), kept only while the observer
            runs.
        max_events: size of the ring of recent timeline events (count), likewise.
        turns_per_agent: recent turns listed under each agent (count).
        min_interval_ms: least time between two pushed views (milliseconds).

    Returns:
        The running `Observer` (`.url` to open, `.stop()` to end it).

    Raises:
        ValueError: a non-loopback `host` without `allow_remote=True`, a token shorter
            than 16 characters, or a bad ring size.
        ImportError: Starlette or uvicorn is missing (`pip install 'gen-agent[observer]'`).
        OSError: the address cannot be bound.

    Mirrors: nothing in GenAgent; the role of Erlang's `observer` / Phoenix LiveDashboard.
    """
    uvicorn = _require_web_stack()
    from gen_agent.observer._app import Access, create_app

    loopback = is_loopback(host)
    if not loopback and not allow_remote:
        raise ValueError(f"host {host!r} is not a loopback address: binding beyond loopback "
                         "needs allow_remote=True (every request must then present the token)")
    if token is None:
        token = secrets.token_urlsafe(24)
    elif not isinstance(token, str) or len(token) < _MIN_TOKEN_CHARS:
        raise ValueError(f"token must be a str of at least {_MIN_TOKEN_CHARS} characters")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in 0..65535, got {port!r}")
    collector = Collector(system if system is not None else current_system(),
                          max_turns=max_turns, max_events=max_events,
                          turns_per_agent=turns_per_agent, show_text=show_text)
    sock = _bind(host, port)
    real_port = sock.getsockname()[1]
    allowed = None
    if loopback:
        names = ["127.0.0.1", "localhost", "[::1]"]
        if host not in ("127.0.0.1", "localhost", "::1"):
            names.append(f"[{host}]" if ":" in host else host)
        allowed = frozenset(f"{name}:{real_port}" for name in names)
    access = Access(token=token, token_for_reads=not loopback, allowed_hosts=allowed)
    collector.open()
    publisher = Publisher(collector, min_interval_ms=min_interval_ms)
    worker = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gen_agent-observer")
    try:
        app = create_app(publisher, access, worker)
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                                ws="none", http="h11", loop="asyncio",
                                timeout_graceful_shutdown=2)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                  name="gen_agent-observer", daemon=True)
        publisher.start()
        thread.start()
        _wait_started(server, thread)
    except BaseException:
        publisher.stop()
        worker.shutdown(wait=True)
        collector.close()
        sock.close()
        raise
    return Observer(host=host, port=real_port, token=token, collector=collector,
                    publisher=publisher, server=server, thread=thread, worker=worker,
                    sock=sock)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1" if host == "localhost" else host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def _wait_started(server: Any, thread: threading.Thread) -> None:
    """Wait until uvicorn serves (connections queue in the backlog meanwhile)."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive():
            raise OSError("the observer's server failed to start")
        if time.monotonic() > deadline:
            server.should_exit = True
            thread.join(_START_TIMEOUT_S)
            raise OSError(f"the observer's server did not start within {_START_TIMEOUT_S} s")
        thread.join(0.01)

"""Running the app: `load(spec)` (the `module:attr` of `gen-agent serve`), `run` (uvicorn
with a request-head deadline and a graceful drain), and `ServerThread` (the same server on a
background thread, for tests and embedding).

The pinned uvicorn (0.54) has no deadline for receiving a request: its only timer is the
keep-alive one between requests, so a client trickling header bytes would hold a connection
forever. `run` therefore serves HTTP/1.1 through uvicorn's h11 protocol
with one more timer: a connection that has not sent a whole request head within
`head_timeout_s` (default 10 s) of connecting, or of its last response, is closed. The
body's deadline is the guard's (`ServerLimits.body_timeout_s`, answered `408`).

Shutdown (SIGINT/SIGTERM, or `ServerThread.stop`): `Server.drain` runs first, while the
socket still accepts, so new requests get `503` with `Retry-After`; then uvicorn stops.

Mirrors: nothing in the Elixir original.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
import threading
import time
from typing import Any

from gen_agent.server._auth import is_loopback

__all__ = ["ServerThread", "check_bind", "load", "make_server", "run"]

_START_TIMEOUT_S = 10.0


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError("gen_agent.server needs Starlette and uvicorn: "
                          "pip install 'gen-agent[server]'") from exc
    return uvicorn


PROTOCOLS = {"responses": "/v1/responses", "a2a": "/a2a/<host>", "agui": "/agui/<host>",
             "chat": "/", "vercel": "/vercel-ai/<host>"}
"""The protocols `gen-agent serve --protocol` takes (modules of `gen_agent.server`), each
with where it is served."""


def protocol_modules(names: Any) -> list[Any]:
    """The `gen_agent.server` protocol modules named by `names` (in order, once each).

    Raises:
        ValueError: a name that is not one of `PROTOCOLS`, or no names.
        ImportError: a protocol's package is missing (e.g. `a2a-sdk`).
    """
    chosen = list(dict.fromkeys(names))
    unknown = [name for name in chosen if name not in PROTOCOLS]
    if unknown or not chosen:
        raise ValueError(f"unknown protocol {', '.join(map(repr, unknown)) or '(none)'}; "
                         f"choose from {', '.join(PROTOCOLS)}")
    return [importlib.import_module(f"gen_agent.server.{name}") for name in chosen]


def load(spec: str, protocols: Any = None) -> Any:
    """The app named by `spec`, `"package.module:attr"`: `attr` is a Starlette app made by
    `create_app`, or hosts (`AgentHost`, a list, a dict) that `create_app` is called on, or
    a callable returning either.

    Args:
        spec: `module:attr`.
        protocols: protocol names (`PROTOCOLS`) for hosts (default: `["responses"]`); an
            app made by `create_app` has chosen its own, so giving them is an error.

    Raises:
        ValueError: `spec` is not `module:attr`, `attr` is none of those, a bad protocol
            name, or `protocols` for an app.
        ImportError, AttributeError: the module or the attribute is missing (or a
            protocol's package).
    """
    from gen_agent.server._app import create_app

    modules = protocol_modules(protocols or ["responses"])  # before any host is built
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected module:attr (e.g. myapp:hosts), got {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if callable(target) and not hasattr(target, "state") and not hasattr(target, "aio"):
        target = target()
    if getattr(getattr(target, "state", None), "gen_agent_server", None) is not None:
        if protocols:
            raise ValueError(f"{spec} is an app from create_app, which chose its protocols: "
                             "drop --protocol (or name hosts instead)")
        return target
    try:
        return create_app(target, close_hosts=True, protocols=modules)
    except TypeError as exc:
        raise ValueError(f"{spec} is neither an app from create_app nor hosts: {exc}") from None


def _protocol_class(head_timeout_s: float) -> Any:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadline(H11Protocol):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(head_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            import h11

            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            import h11

            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # the head arrived: the guard bounds the body

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

    return HeadDeadline


def make_server(app: Any, *, head_timeout_s: float = 10.0, log_level: str = "warning",
                **config: Any) -> Any:
    """A `uvicorn.Server` for `app` whose shutdown drains the app's `Server` first and
    whose HTTP protocol closes a connection that sends no whole request head within
    `head_timeout_s` seconds. `**config`: further `uvicorn.Config` arguments."""
    uvicorn = _uvicorn()
    served = app.state.gen_agent_server

    class Draining(uvicorn.Server):  # type: ignore[misc,name-defined]
        async def shutdown(self, sockets: Any = None) -> None:
            await served.drain()  # still listening: new requests get 503 + Retry-After
            await super().shutdown(sockets)

    settings = {"log_config": None, "access_log": False, "lifespan": "on", "ws": "none",
                "loop": "asyncio", "log_level": log_level, **config}
    settings["http"] = _protocol_class(head_timeout_s)
    return Draining(uvicorn.Config(app, **settings))


def check_bind(app: Any, host: str) -> None:
    """Refuse a non-loopback `host` for an app without auth.

    Raises:
        ValueError: `host` is not loopback and the app has no `authenticate` hook or tokens.
    """
    if not is_loopback(host) and app.state.gen_agent_server.authenticate is None:
        raise ValueError(f"{host!r} is not a loopback address and no auth is configured: set "
                         "GEN_AGENT_SERVER_TOKENS / GEN_AGENT_SERVER_TOKEN_FILE (or give "
                         "create_app an authenticate hook) to listen beyond loopback")


def run(app: Any, host: str = "127.0.0.1", port: int = 8000, *,
        head_timeout_s: float = 10.0, **config: Any) -> None:
    """Serve `app` until SIGINT/SIGTERM (blocking), then drain and stop.

    Raises:
        ValueError: a non-loopback `host` without auth (see `check_bind`).
        OSError: the address cannot be bound.
    """
    check_bind(app, host)
    make_server(app, head_timeout_s=head_timeout_s, host=host, port=port, **config).run()


class ServerThread:
    """The app served by uvicorn on a background thread, on a loopback socket bound now.

    Attributes:
        base_url: `http://127.0.0.1:PORT`. port: the real port.

    Use as a context manager, or call `stop()` (drains, then stops and joins the thread).
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *,
                 head_timeout_s: float = 10.0, **config: Any) -> None:
        check_bind(app, host)
        self.app = app
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
        # and without it every response waits ~40 ms for the client's delayed ACK.
        self._sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.bind((host, port))
        self._sock.listen(1024)
        self.port = self._sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.base_url = f"http://{shown}:{self.port}"
        self.server = make_server(app, head_timeout_s=head_timeout_s, **config)
        self._thread = threading.Thread(target=self.server.run,
                                        kwargs={"sockets": [self._sock]},
                                        name="gen_agent-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError("the server did not start")
            self._thread.join(0.01)

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """Drain (new requests get 503 meanwhile), stop the server, join its thread."""
        self.server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()
        if self._thread.is_alive():
            raise TimeoutError(f"the server did not stop within {timeout} s")

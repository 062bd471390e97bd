"""`create_app`: the ASGI application (Starlette) over agent hosts.

    app = create_app({"chat": chat_host})        # the Responses API at /v1/responses
    # uvicorn.run(app)  or  gen-agent serve mymodule:hosts

Routes besides the protocols': `GET /healthz` (the process answers) and `GET /readyz` (hosts
open, each store reachable, not draining), both without auth; `/observer` when asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from gen_agent._host import AgentHost
from gen_agent.server._auth import BearerTokens
from gen_agent.server._core import Server, ServerLimits, _Guard

__all__ = ["create_app"]


def _hosts_by_name(hosts: Any) -> dict[str, AgentHost]:
    if isinstance(hosts, AgentHost):
        hosts = [hosts]
    if isinstance(hosts, Mapping):
        found = dict(hosts)
    elif isinstance(hosts, Iterable):
        found = {}
        for host in hosts:
            if not isinstance(host, AgentHost):
                raise TypeError(f"create_app: hosts must be AgentHosts, got "
                                f"{type(host).__name__}")
            if not isinstance(host.name, str):
                raise TypeError("create_app: a host in a list needs a str name; pass a dict")
            found[host.name] = host
    else:
        raise TypeError(f"create_app: hosts must be an AgentHost, a list of them or a dict "
                        f"{{name: AgentHost}}, got {type(hosts).__name__}")
    if not found:
        raise ValueError("create_app: no host given")
    for name, host in found.items():
        if not isinstance(name, str) or not name or not isinstance(host, AgentHost):
            raise TypeError("create_app: hosts must map non-empty str names to AgentHosts")
    return found


def create_app(hosts: Any, *, authenticate: Callable[[Request], Any] | None = None,
               tokens: BearerTokens | None = None, protocols: Iterable[Any] | None = None,
               limits: ServerLimits | None = None, cors_origins: Iterable[str] | None = None,
               observer: bool = False, close_hosts: bool = False,
               env: Mapping[str, str] | None = None) -> Starlette:
    """Build the ASGI app serving `hosts`.

    Args:
        hosts: an `AgentHost`, a list of them (named by `host.name`) or `{name: AgentHost}`.
        authenticate: `request -> Principal | None` (may be a coroutine function): who is
            asking; None refuses with `401`. Default: `tokens`, else the tables of
            `GEN_AGENT_SERVER_TOKENS` / `GEN_AGENT_SERVER_TOKEN_FILE`, else loopback-only
            (every request is `auth.LOCAL`; a non-loopback peer or `Host` gets `403`).
        tokens: a `BearerTokens` table (instead of the environment's).
        protocols: modules (or objects) with `routes(server) -> list[BaseRoute]`; default
            `[gen_agent.server.responses]`.
        limits: the `ServerLimits` (default: its defaults).
        cors_origins: origins allowed by CORS (default None: no CORS headers at all).
        observer: mount the observer (`gen_agent.observer`) at `/observer`, behind the same
            guard (the observer's own token check is off; its view is of the hosts'
            system).
        close_hosts: close the hosts when the app shuts down (after the drain).
        env: the environment to read token tables from (default `os.environ`).

    Returns:
        A `Starlette` app; `app.state.gen_agent_server` is its `Server`. Its lifespan's
        shutdown runs `Server.drain`.

    Raises:
        TypeError, ValueError: bad hosts, protocols or limits.
    """
    found = _hosts_by_name(hosts)
    if authenticate is None:
        table = tokens if tokens is not None else BearerTokens.from_env(env)
        authenticate = table
    server = Server(found, limits=limits or ServerLimits(), authenticate=authenticate,
                    loopback_only=authenticate is None)
    if protocols is None:
        from gen_agent.server import responses

        protocols = [responses]
    routes: list[BaseRoute] = [Route("/healthz", _healthz, methods=["GET"]),
                               Route("/readyz", _readyz, methods=["GET"])]
    for protocol in protocols:
        make = getattr(protocol, "routes", None)
        if not callable(make):
            raise TypeError(f"create_app: a protocol needs routes(server), got {protocol!r}")
        routes.extend(make(server))
    cleanup: list[Callable[[], Any]] = []
    if observer:
        routes.append(_observer_mount(server, cleanup))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await server.drain(close_hosts=close_hosts)
            for done in cleanup:
                done()

    middleware = [Middleware(_Guard, server=server)]
    if cors_origins is not None:
        from starlette.middleware.cors import CORSMiddleware

        middleware.insert(0, Middleware(
            CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "idempotency-key",
                           "last-event-id", "traceparent"]))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.gen_agent_server = server
    return app


def _observer_mount(server: Server, cleanup: list[Callable[[], Any]]) -> BaseRoute:
    from concurrent.futures import ThreadPoolExecutor

    from starlette.routing import Mount

    from gen_agent.observer import Collector
    from gen_agent.observer._app import Access
    from gen_agent.observer._app import create_app as observer_app
    from gen_agent.observer._publisher import Publisher

    system = next(iter(server.hosts.values())).system
    collector = Collector(system)
    collector.open()
    publisher = Publisher(collector)
    publisher.start()
    worker = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gen_agent-server-observer")
    # The guard authenticated the request already; the observer's actions still need
    # their confirmation, and its token is one nobody is told (actions stay off).
    import secrets

    access = Access(token=secrets.token_urlsafe(32), token_for_reads=False, allowed_hosts=None)

    def stop() -> None:
        publisher.stop()
        worker.shutdown(wait=True)
        collector.close()

    cleanup.append(stop)
    return Mount("/observer", app=observer_app(publisher, access, worker))


async def _healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def _readyz(request: Request) -> JSONResponse:
    server: Server = request.app.state.gen_agent_server
    if await server.ready():
        return JSONResponse({"status": "ready"})
    return JSONResponse({"status": "not_ready"}, status_code=503,
                        headers={"Retry-After": str(server.limits.retry_after_s)})



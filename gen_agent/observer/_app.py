"""The observer's ASGI app (Starlette): the page, the JSON view, the event stream, the actions.

Routes:

- `GET /`: the page (plain HTML with its CSS and JavaScript inline, from `static/`; no build
  step, no CDN).
- `GET /api/state`: the current view as JSON (`Collector.snapshot`).
- `GET /api/stream`: server-sent events; one `state` event with the whole view whenever it
  changed (at most `min_interval_ms` apart, and about once a second while anything runs), a
  comment line as a heartbeat otherwise.
- `POST /api/action/{name}`: one safe action (`gen_agent.observer._actions`), JSON body
  `{"confirm": true, "agent": ...}` or `{"confirm": true, "supervisor": ..., "child": ...}`.

Access rules (`Access`): the token goes in an `Authorization: Bearer <token>` or an
`X-Observer-Token` header, or, for the reading routes only, a `token` query parameter (the
browser's `EventSource` cannot send headers). Actions always need the token in a header and
`"confirm": true`; a cross-site page can send neither. When the observer is bound beyond
loopback every route needs the token; on loopback reading needs none, but the `Host` header
must name the loopback address (a DNS-rebinding page cannot read the view).
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from concurrent.futures import Executor
from importlib import resources
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gen_agent._web import page_headers
from gen_agent.observer._actions import ACTIONS, ActionError, run_action
from gen_agent.observer._publisher import Publisher

__all__ = ["Access", "create_app"]

_HEARTBEAT_S = 5.0


class Access(msgspec.Struct, frozen=True, kw_only=True):
    """Who may use the observer.

    Fields:
        token: the secret every action (and, beyond loopback, every request) must present.
        token_for_reads: whether reading routes need the token too (bound beyond loopback).
        allowed_hosts: accepted `Host` header values (lowercase), or None for any.
    """

    token: str
    token_for_reads: bool
    allowed_hosts: frozenset[str] | None


def _presented(request: Request, *, allow_query: bool) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    if "x-observer-token" in request.headers:
        return request.headers["x-observer-token"]
    if allow_query:
        return request.query_params.get("token")
    return None


def _refusal(request: Request, access: Access, *, action: bool) -> Response | None:
    """The response refusing `request`, or None when it may go on."""
    if access.allowed_hosts is not None:
        host = request.headers.get("host", "").lower()
        if host not in access.allowed_hosts:
            return JSONResponse({"error": "unexpected Host header"}, status_code=400)
    if action or access.token_for_reads:
        given = _presented(request, allow_query=not action)
        if given is None or not hmac.compare_digest(given.encode(), access.token.encode()):
            return JSONResponse({"error": "a valid observer token is required"},
                                status_code=401,
                                headers={"WWW-Authenticate": 'Bearer realm="gen_agent"'})
    return None




def _static(name: str) -> str:
    return resources.files("gen_agent.observer").joinpath("static", name).read_text("utf-8")


def create_app(publisher: Publisher, access: Access, worker: Executor) -> Starlette:
    """Build the Starlette app.

    Args:
        publisher: the `Publisher` that builds the view and feeds the streams.
        access: the `Access` rules.
        worker: where blocking calls run (building a view on demand, actions): never the
            event loop, never a thread pool that outlives the observer.

    Returns:
        The ASGI app. Every endpoint is `async`: Starlette starts no thread of its own.
    """
    template = _static("index.html")
    css, script = _static("observer.css"), _static("observer.js")
    system = publisher.collector.system

    async def page(request: Request) -> Response:
        refused = _refusal(request, access, action=False)
        if refused is not None:
            return refused
        nonce = secrets.token_urlsafe(16)
        html = (template.replace("{{nonce}}", nonce).replace("{{css}}", css)
                .replace("{{script}}", script))
        return HTMLResponse(html, headers=page_headers(nonce))

    async def state(request: Request) -> Response:
        refused = _refusal(request, access, action=False)
        if refused is not None:
            return refused
        data = await asyncio.wrap_future(worker.submit(publisher.build))
        return Response(data, media_type="application/json", headers=page_headers())

    async def stream(request: Request) -> Response:
        refused = _refusal(request, access, action=False)
        if refused is not None:
            return refused
        subscription = publisher.subscribe(asyncio.get_running_loop())

        async def events() -> Any:
            try:
                yield "retry: 2000\n\n"
                while True:
                    try:
                        data = await asyncio.wait_for(subscription.next(), _HEARTBEAT_S)
                    except TimeoutError:
                        yield ": heartbeat\n\n"
                        continue
                    if data is None:
                        return  # the observer is stopping
                    yield b"event: state\ndata: " + data + b"\n\n"
            finally:
                publisher.unsubscribe(subscription)

        headers = {**page_headers(), "X-Accel-Buffering": "no"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    async def action(request: Request) -> Response:
        refused = _refusal(request, access, action=True)
        if refused is not None:
            return refused
        name = request.path_params["name"]
        if name not in ACTIONS:
            return JSONResponse({"error": f"unknown action {name!r}"}, status_code=404)
        try:
            body = msgspec.json.decode(await request.body())
        except msgspec.DecodeError:
            body = None
        if not isinstance(body, dict):
            return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
        if body.get("confirm") is not True:
            return JSONResponse({"error": "actions need \"confirm\": true"}, status_code=400)
        try:
            result = await asyncio.wrap_future(worker.submit(run_action, system, name, body))
        except ActionError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        publisher.collector.touch()
        return JSONResponse({"ok": True, "result": result}, headers=page_headers())

    return Starlette(routes=[
        Route("/", page, methods=["GET"]),
        Route("/api/state", state, methods=["GET"]),
        Route("/api/stream", stream, methods=["GET"]),
        Route("/api/action/{name}", action, methods=["POST"]),
    ])

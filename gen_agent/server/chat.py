"""The chat page: talk to the server's hosts from a browser. `create_app(hosts,
protocols=[chat])` serves it at `/`.

The page is plain HTML with its CSS and JavaScript inline (from `static/`, no build step, no
CDN, a strict Content-Security-Policy). Pick a host, type, and the reply streams in; tool
calls show with their input and result; a pending `ask_client` permission question
(`gen_agent.server.approvals`) shows Allow / Deny; Interrupt cancels the turn. The page reads
the turn as AG-UI events (`gen_agent.server.agui`) over `fetch`, each with an `id:`; when the
stream drops it reconnects with `Last-Event-ID` and goes on after the last event it showed.

Routes (behind the server's guard, like every other route, but the page itself):

- `GET /`: the page, a shell with no data: it needs no token (`Server.public_pages`).
- `GET /chat/api/hosts`: `{"hosts": [name, ...]}`.
- `POST /chat/api/hosts/<host>/turns` with `{"thread", "prompt"}`: start a turn on the
  thread's key (in the caller's tenant): `{"task": id}`.
- `GET /chat/api/tasks/<task>/events`: the turn's AG-UI events after `Last-Event-ID` (or
  `?after=`); one response lasts at most `MAX_STREAM_S` seconds, then the page reconnects.
- `POST /chat/api/tasks/<task>/approvals/<id>` with `{"allow": bool}`: answer a question.
- `POST /chat/api/tasks/<task>/cancel`: cancel the turn (`cancel_request` /
  `interrupt_request`).

The page sends `Authorization: Bearer <token>` with every API call when its URL carries
`#token=<token>` (the fragment never reaches the server, its logs or a proxy's): open
`http://host:port/#token=...` with the default bearer tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from gen_agent._errors import GenAgentError, TurnError
from gen_agent._web import page_headers
from gen_agent.server import agui
from gen_agent.server._core import error_response, turn_error_status
from gen_agent.server._served import book
from gen_agent.server.approvals import APPROVALS, decision_from

__all__ = ["MAX_STREAM_S", "routes"]

MAX_STREAM_S: float = 300.0
"""The longest one event-stream response lasts (seconds); the page then reconnects from its
last event (proxies cut long responses anyway; this makes the cut a routine one)."""

_MIN_WAIT_S = 0.01


def _static(name: str) -> str:
    return resources.files("gen_agent.server").joinpath("static", name).read_text("utf-8")




def _after(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        value = int(raw)
    except ValueError:
        return 0
    return max(0, value)


async def _json_body(request: Request) -> dict[str, Any] | None:
    try:
        body = msgspec.json.decode(await request.body())
    except msgspec.DecodeError:
        return None
    return body if isinstance(body, dict) else None


def _bounded(frames: AsyncIterator[str], seconds: float) -> AsyncIterator[str]:
    """`frames` for at most `seconds`: cut only while waiting for the next frame, so the
    frames of one turn event are never split by the cut."""

    async def run() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        iterator = frames.__aiter__()
        try:
            while True:
                wait = max(_MIN_WAIT_S, deadline - loop.time())
                try:
                    frame = await asyncio.wait_for(iterator.__anext__(), wait)
                except (StopAsyncIteration, TimeoutError):
                    return
                yield frame
        finally:
            with contextlib.suppress(BaseException):
                await iterator.aclose()  # type: ignore[attr-defined]

    return run()


def routes(server: Any) -> list[BaseRoute]:
    """The chat page's routes on `server` (see the module docstring)."""
    server.public_pages.add("/")
    template = _static("chat.html")
    css, script = _static("chat.css"), _static("chat.js")

    async def page(request: Request) -> Response:
        nonce = secrets.token_urlsafe(16)
        html = (template.replace("{{nonce}}", nonce).replace("{{css}}", css)
                .replace("{{script}}", script))
        return HTMLResponse(html, headers=page_headers(nonce))

    async def hosts(request: Request) -> Response:
        return JSONResponse({"hosts": sorted(server.hosts)}, headers=page_headers())

    async def start(request: Request) -> Response:
        host = request.path_params["host"]
        if host not in server.hosts:
            return error_response(404, "no such host", code="not_found")
        body = await _json_body(request)
        thread, prompt = (body or {}).get("thread"), (body or {}).get("prompt")
        if not (isinstance(thread, str) and thread and isinstance(prompt, str) and prompt):
            return error_response(400, "the body must be {\"thread\": str, \"prompt\": str}",
                                  code="invalid_input")
        try:
            task = await book(server).start(server.principal(request), host, thread, prompt)
        except TurnError as exc:
            status, code, message, headers = turn_error_status(exc.reason)
            return error_response(status, message, code=code, headers=headers)
        except GenAgentError:  # the agent did not start (a leased key, a failed start)
            return error_response(503, "the agent is not available; retry later",
                                  code="unavailable", headers={"Retry-After": "1"})
        return JSONResponse({"task": task.id, "thread": thread}, headers=page_headers())

    def _task(request: Request) -> Any:
        return book(server).get(server.principal(request), request.path_params["task"])

    async def events(request: Request) -> Response:
        task = _task(request)
        if task is None:
            return error_response(404, "no such task", code="not_found")
        run_id = "run_" + secrets.token_urlsafe(8)

        async def frames() -> AsyncIterator[str]:
            async for seq, event in agui.run_events(server, task, _after(request), task.key,
                                                    run_id):
                yield agui.encode(event, seq)

        return StreamingResponse(_bounded(frames(), MAX_STREAM_S),
                                 media_type="text/event-stream",
                                 headers={**page_headers(), "X-Accel-Buffering": "no"})

    async def approve(request: Request) -> Response:
        task = _task(request)
        if task is None:
            return error_response(404, "no such task", code="not_found")
        decision = decision_from(await _json_body(request))
        if decision is None:
            return error_response(400, "the body must be {\"allow\": true} or false",
                                  code="invalid_input")
        if not APPROVALS.answer(task.agent, request.path_params["approval"], decision):
            return error_response(404, "no such pending question", code="not_found")
        return JSONResponse({"ok": True}, headers=page_headers())

    async def cancel(request: Request) -> Response:
        task = _task(request)
        if task is None:
            return error_response(404, "no such task", code="not_found")
        return JSONResponse({"outcome": await book(server).cancel(task)}, headers=page_headers())

    return [
        Route("/", page, methods=["GET"]),
        Route("/chat/api/hosts", hosts, methods=["GET"]),
        Route("/chat/api/hosts/{host}/turns", start, methods=["POST"]),
        Route("/chat/api/tasks/{task}/events", events, methods=["GET"]),
        Route("/chat/api/tasks/{task}/approvals/{approval}", approve, methods=["POST"]),
        Route("/chat/api/tasks/{task}/cancel", cancel, methods=["POST"]),
    ]

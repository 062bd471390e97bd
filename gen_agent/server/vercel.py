"""The Vercel AI SDK's UI message stream (protocol v1, what `useChat` reads) over the server's
hosts: `create_app(hosts, protocols=[vercel])`.

- `POST /vercel-ai/<host>`: a `useChat` request (`{"id": chat id, "messages": [...]}`)
  answered by the UI message stream (`text/event-stream`, header
  `x-vercel-ai-ui-message-stream: v1`, ending with `data: [DONE]`).
- `GET /vercel-ai/<host>/<chat id>/stream`: the rest of the chat's newest turn (the AI SDK's
  resume convention): after a dropped stream, or after answering a permission question.
- `POST /vercel-ai/<host>/<chat id>/approvals/<question id>` with `{"allow": bool}`.

The chat id is the host key inside the caller's tenant; the prompt is the text parts of the
last user message. Text events are `text-start` / `text-delta` / `text-end` parts, a
`tool_use` is `tool-input-available`, its `tool_result` `tool-output-available`; the end is
`finish`, or `error` with a content-free text. A pending `ask_client` permission question is
a `data-approval` part (`{"id", "toolName", "toolCallId", "input"}`) and the stream finishes;
answer it, then `GET` the resume route for the rest of the turn. The AI SDK has no type
package for Python: the parts are written as its protocol documents them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from gen_agent._errors import GenAgentError, TurnError
from gen_agent.server._core import error_response, turn_error_status
from gen_agent.server._served import ServedTask, book, segment
from gen_agent.server.approvals import APPROVALS, decision_from

__all__ = ["HEADER", "parts", "routes"]

HEADER = {"x-vercel-ai-ui-message-stream": "v1"}
"""The response header the AI SDK's `useChat` checks."""


def _frame(part: dict[str, Any]) -> str:
    return f"data: {json.dumps(part, default=str)}\n\n"


async def parts(server: Any, task: ServedTask, after: int) -> AsyncIterator[dict[str, Any]]:
    """The UI message stream parts of `task`'s events after `after`."""
    yield {"type": "start", "messageId": f"msg_{task.id}"}
    text_id: str | None = None
    async for kind, value, event in segment(server, task, after):
        if kind == "event":
            task.delivered = max(task.delivered, value)
            data = event.data
            if event.kind == "text" and isinstance(data.get("text"), str) and data["text"]:
                if text_id is None:
                    text_id = f"text_{value}"
                    yield {"type": "text-start", "id": text_id}
                yield {"type": "text-delta", "id": text_id, "delta": data["text"]}
            elif event.kind == "tool_use":
                if text_id is not None:
                    yield {"type": "text-end", "id": text_id}
                    text_id = None
                yield {"type": "tool-input-available", "toolCallId": str(data.get("id")),
                       "toolName": str(data.get("name")), "input": data.get("input")}
            elif event.kind == "tool_result":
                yield {"type": "tool-output-available",
                       "toolCallId": str(data.get("tool_use_id")),
                       "output": data.get("content")}
            continue
        if text_id is not None:
            yield {"type": "text-end", "id": text_id}
        if kind == "approval":
            yield {"type": "data-approval", "data": {
                "id": value.id, "toolName": value.tool_name, "toolCallId": value.tool_use_id,
                "input": value.input}}
        elif task.state == "failed":
            yield {"type": "error", "errorText": f"the turn failed ({task.reason})"}
        elif task.state == "canceled":
            yield {"type": "abort"}
        yield {"type": "finish"}
        return


def _stream(server: Any, task: ServedTask, after: int) -> StreamingResponse:
    async def frames() -> AsyncIterator[str]:
        async for part in parts(server, task, after):
            yield _frame(part)
        yield "data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream",
                             headers={**HEADER, "Cache-Control": "no-store",
                                      "X-Accel-Buffering": "no"})


def _prompt(body: Any) -> str | None:
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            texts = [p.get("text") for p in message.get("parts") or ()
                     if isinstance(p, dict) and p.get("type") == "text"]
            joined = "\n".join(t for t in texts if isinstance(t, str))
            return joined or None
    return None


def routes(server: Any) -> list[BaseRoute]:
    """The UI message stream routes of `server` (see the module docstring)."""

    async def chat(request: Request) -> Response:
        host = request.path_params["host"]
        if host not in server.hosts:
            return error_response(404, "no such host", code="not_found")
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        chat_id = body.get("id") if isinstance(body, dict) else None
        prompt = _prompt(body)
        if not (isinstance(chat_id, str) and chat_id and prompt):
            return error_response(400, "the body must be a useChat request with an id and a "
                                  "user message", code="invalid_input")
        try:
            task = await book(server).start(server.principal(request), host, chat_id, prompt)
        except TurnError as exc:
            status, code, message, headers = turn_error_status(exc.reason)
            return error_response(status, message, code=code, headers=headers)
        except GenAgentError:  # the agent did not start (a leased key, a failed start)
            return error_response(503, "the agent is not available; retry later",
                                  code="unavailable", headers={"Retry-After": "1"})
        return _stream(server, task, 0)

    def _latest(request: Request) -> ServedTask | None:
        return book(server).latest(server.principal(request), request.path_params["host"],
                                   request.path_params["chat"])

    async def resume(request: Request) -> Response:
        task = _latest(request)
        if task is None or (task.done and task.delivered >= task.seq):
            return Response(status_code=204)  # nothing to resume (the AI SDK's convention)
        return _stream(server, task, task.delivered)

    async def approve(request: Request) -> Response:
        task = _latest(request)
        try:
            decision = decision_from(json.loads(await request.body()))
        except ValueError:
            decision = None
        if task is None or decision is None:
            return error_response(400, "the body must be {\"allow\": bool} for a waiting turn",
                                  code="invalid_input")
        if not APPROVALS.answer(task.agent, request.path_params["approval"], decision):
            return error_response(404, "no such pending question", code="not_found")
        return JSONResponse({"ok": True})

    return [Route("/vercel-ai/{host}", chat, methods=["POST"]),
            Route("/vercel-ai/{host}/{chat}/stream", resume, methods=["GET"]),
            Route("/vercel-ai/{host}/{chat}/approvals/{approval}", approve, methods=["POST"])]

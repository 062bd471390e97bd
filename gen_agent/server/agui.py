"""AG-UI over the server's hosts, with the `ag-ui-protocol` package's types and encoder:
`create_app(hosts, protocols=[agui])`.

- `POST /agui/<host>`: a `RunAgentInput` (JSON, AG-UI's camelCase) answered by a stream of
  AG-UI events (`text/event-stream`, one `data:` line per event, each with an `id:` line
  carrying the turn's event sequence number when it has one).
- `POST /agui/<host>/cancel` with `{"threadId": ...}`: cancel the thread's running turn.

What maps to what (docs: the AG-UI page):

- `threadId` is the host key inside the caller's tenant (`Server.tenant_key`); a run sends
  the text of the input's last user message as one prompt (the agent keeps the conversation
  itself: earlier messages of the input are not replayed).
- `RUN_STARTED`, then `STATE_SNAPSHOT` (the thread's runtime view: thread, host, task id,
  task state, and at the end the turn's token usage; never the agent's own state), text events
  as `TEXT_MESSAGE_START` / `_CONTENT` / `_END`, a `tool_use` event as `TOOL_CALL_START` /
  `_ARGS` (its input as JSON) / `_END`, a `tool_result` as `TOOL_CALL_RESULT`; at the end
  another `STATE_SNAPSHOT` and `RUN_FINISHED` (result `{"text": ...}`, usage), `RUN_FINISHED`
  with the `cancelled` outcome for an interrupted or cancelled turn, or `RUN_ERROR` (a
  content-free code).
- A pending `ask_client` permission question (`gen_agent.server.approvals`) ends the run with
  `RUN_FINISHED` and the `interrupt` outcome (one `Interrupt`: `reason` "tool_permission",
  `toolCallId`, `metadata` with the tool's name and input). The turn waits; the client answers
  with a new run on the same thread whose `resume` entries answer the interrupt (`resolved`
  with payload `{"allow": true}` or `false`, or `cancelled` = deny) and carries no new
  message; that run streams the rest of the same turn.

Not supported: client-side tools (`tools` in the input are refused), `STATE_DELTA`,
`MESSAGES_SNAPSHOT`, reasoning events, forwarded props.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from gen_agent._errors import GenAgentError, TurnError
from gen_agent.server._core import error_response, turn_error_status
from gen_agent.server._served import ServedTask, book, segment
from gen_agent.server.approvals import APPROVALS, PendingApproval, decision_from

__all__ = ["encode", "routes", "run_events"]

_ENCODER = EventEncoder()


def encode(event: BaseEvent, seq: int | None = None) -> str:
    """One SSE frame of `event` (the package's `EventEncoder`), with `id: seq` first when
    given (so a reconnect can send `Last-Event-ID`)."""
    frame = _ENCODER.encode(event)
    return frame if seq is None else f"id: {seq}\n{frame}"


def _snapshot(server: Any, task: ServedTask) -> StateSnapshotEvent:
    view: dict[str, Any] = {"threadId": task.key, "host": task.host, "taskId": task.id,
                            "state": task.state}
    if task.usage:
        view["usage"] = {k: v for k, v in task.usage.items() if isinstance(v, int | float)}
    return StateSnapshotEvent(snapshot=view)


def _interrupt(task: ServedTask, pending: PendingApproval) -> Interrupt:
    return Interrupt(id=pending.id, reason="tool_permission",
                     message=f"May the agent run the tool {pending.tool_name}?",
                     tool_call_id=pending.tool_use_id,
                     response_schema={"type": "object", "properties": {
                         "allow": {"type": "boolean"}, "message": {"type": "string"}},
                         "required": ["allow"]},
                     metadata={"toolName": pending.tool_name, "input": pending.input,
                               "taskId": task.id})


async def run_events(server: Any, task: ServedTask, after: int, thread_id: str,
                     run_id: str) -> AsyncIterator[tuple[int | None, BaseEvent]]:
    """The AG-UI events of one run over `task`'s events after `after`, each with the turn's
    sequence number (None for events of the run itself)."""
    yield None, RunStartedEvent(thread_id=thread_id, run_id=run_id)
    yield None, _snapshot(server, task)
    message_id: str | None = None
    async for kind, value, event in segment(server, task, after):
        if kind == "event":
            task.delivered = max(task.delivered, value)
            data = event.data
            if event.kind == "text" and isinstance(data.get("text"), str) and data["text"]:
                if message_id is None:
                    message_id = f"msg_{task.id}_{value}"
                    yield value, TextMessageStartEvent(message_id=message_id, role="assistant")
                yield value, TextMessageContentEvent(message_id=message_id, delta=data["text"])
            elif event.kind == "tool_use":
                if message_id is not None:
                    yield value, TextMessageEndEvent(message_id=message_id)
                    message_id = None
                call_id = str(data.get("id") or f"call_{value}")
                yield value, ToolCallStartEvent(tool_call_id=call_id,
                                                tool_call_name=str(data.get("name")))
                yield value, ToolCallArgsEvent(tool_call_id=call_id,
                                               delta=json.dumps(data.get("input"), default=str))
                yield value, ToolCallEndEvent(tool_call_id=call_id)
            elif event.kind == "tool_result":
                content = data.get("content")
                yield value, ToolCallResultEvent(
                    message_id=f"tool_{task.id}_{value}", role="tool",
                    tool_call_id=str(data.get("tool_use_id") or ""),
                    content=content if isinstance(content, str) else json.dumps(content,
                                                                                default=str))
            continue
        if message_id is not None:
            yield None, TextMessageEndEvent(message_id=message_id)
            message_id = None
        if kind == "approval":
            yield None, RunFinishedEvent(thread_id=thread_id, run_id=run_id,
                                         outcome=RunFinishedInterruptOutcome(
                                             interrupts=[_interrupt(task, value)]))
            return
        yield None, _snapshot(server, task)
        if task.state == "completed":
            yield None, RunFinishedEvent(thread_id=thread_id, run_id=run_id,
                                         result={"text": task.text})
        elif task.state == "canceled":
            yield None, RunFinishedEvent(thread_id=thread_id, run_id=run_id,
                                         outcome=RunFinishedCancelledOutcome())
        else:
            yield None, RunErrorEvent(message=f"the turn failed ({task.reason})",
                                      code=task.reason or "failed")
        return


def _user_text(run: RunAgentInput) -> str | None:
    for message in reversed(run.messages):
        if getattr(message, "role", None) != "user":
            continue
        content = message.content
        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            return None
        texts = [getattr(part, "text", None) for part in content]
        joined = "\n".join(t for t in texts if isinstance(t, str))
        return joined or None
    return None


def _sse(events: AsyncIterator[tuple[int | None, BaseEvent]]) -> StreamingResponse:
    async def frames() -> AsyncIterator[str]:
        async for seq, event in events:
            yield encode(event, seq)

    return StreamingResponse(frames(), media_type=_ENCODER.get_content_type(),
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def start_or_resume(server: Any, principal: Any, host: str, thread_id: str,
                          prompt: str | None, resume: list[Any]) -> tuple[ServedTask, int]:
    """The task a run reads and where it starts: answered interrupts of the thread's
    waiting turn (`resume`), else a new turn of `prompt`.

    Raises:
        ValueError: nothing to run, or an answer to no pending interrupt.
        TurnError: the server or the host refused the new turn.
    """
    if resume:
        task = book(server).latest(principal, host, thread_id)
        if task is None:
            raise ValueError("no turn of this thread waits for an answer")
        answered = 0
        for entry in resume:
            decision = (decision_from(False) if entry.status == "cancelled"
                        else decision_from(entry.payload))
            if decision is None:
                raise ValueError("answer the interrupt with {\"allow\": true} or false")
            answered += APPROVALS.answer(task.agent, entry.interrupt_id, decision)
        if not answered:
            raise ValueError("no such pending interrupt")
        return task, task.delivered
    if not prompt:
        raise ValueError("the run needs a user message")
    return await book(server).start(principal, host, thread_id, prompt), 0


def routes(server: Any) -> list[BaseRoute]:
    """The AG-UI routes of `server` (see the module docstring)."""

    async def run(request: Request) -> Response:
        host = request.path_params["host"]
        if host not in server.hosts:
            return error_response(404, "no such host", code="not_found")
        try:
            body = RunAgentInput.model_validate_json(await request.body())
        except ValidationError:
            return error_response(400, "the body must be an AG-UI RunAgentInput",
                                  code="invalid_input")
        if body.tools:
            return error_response(400, "client-side tools are not supported",
                                  code="unsupported")
        principal = server.principal(request)
        try:
            task, after = await start_or_resume(server, principal, host, body.thread_id,
                                                _user_text(body), list(body.resume or ()))
        except ValueError as exc:
            return error_response(400, str(exc), code="invalid_input")
        except TurnError as exc:
            status, code, message, headers = turn_error_status(exc.reason)
            return error_response(status, message, code=code, headers=headers)
        except GenAgentError:  # the agent did not start (a leased key, a failed start)
            return error_response(503, "the agent is not available; retry later",
                                  code="unavailable", headers={"Retry-After": "1"})
        return _sse(run_events(server, task, after, body.thread_id, body.run_id))

    async def cancel(request: Request) -> Response:
        host = request.path_params["host"]
        try:
            thread_id = json.loads(await request.body())["threadId"]
        except (ValueError, KeyError, TypeError):
            return error_response(400, "the body must be {\"threadId\": ...}",
                                  code="invalid_input")
        task = book(server).latest(server.principal(request), host, thread_id)
        if task is None:
            return error_response(404, "no turn of this thread", code="not_found")
        return JSONResponse({"outcome": await book(server).cancel(task)})

    return [Route("/agui/{host}", run, methods=["POST"]),
            Route("/agui/{host}/cancel", cancel, methods=["POST"])]


def new_run_id() -> str:
    """A fresh run id."""
    return "run_" + uuid.uuid4().hex

"""A2A (protocol 1.0, as the pinned `a2a-sdk` 1.x server components implement it) over the
server's hosts: `create_app(hosts, protocols=[a2a])`.

Each host `name` is one A2A agent:

- `GET /a2a/<name>/.well-known/agent-card.json`: its agent card (JSON-RPC binding at
  `/a2a/<name>`, streaming on, no push notifications);
- `POST /a2a/<name>`: JSON-RPC 2.0 with the 1.0 method names (`SendMessage`,
  `SendStreamingMessage`, `GetTask`, `CancelTask`, `SubscribeToTask`) and, through the SDK's
  compatibility adapter, the v0.3 names (`message/send`, `message/stream`, `tasks/get`,
  `tasks/cancel`, `tasks/resubscribe`).

What maps to what (docs: the A2A page):

- `contextId` is the host key inside the caller's tenant (`Server.tenant_key`; a message
  without one gets a fresh id); each message starts one turn, and that turn is the A2A task
  (`taskId` is new per turn, unguessable, and seen only by its tenant).
- Text events stream as appends to the task's artifact `response`; `tool_use` and
  `tool_result` events as `working` status updates carrying a data part; the end is
  `completed` (the agent's reply as the status message), `failed`, or `canceled`.
- `CancelTask` is `cancel_request` for a queued turn and `interrupt_request` for the running
  one (never a bare interrupt).
- `SubscribeToTask` rejoins the task: its current state first, then the turn's events after
  those the server has already seen (`AgentHost.attach`).
- A pending `ask_client` permission question (`gen_agent.server.approvals`) is
  `input-required`: the status message carries a data part `{"approval": {id, tool_name,
  tool_use_id, input}}`; the client answers with a message on the same `taskId` whose text
  is `allow` or `deny` (or a data part `{"allow": bool, "message": ...}`), and the task goes
  on in that call's response.

Not supported: push notifications, `ListTasks`, the extended card, file and raw parts in
user messages (only text and data parts are read).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    InvalidParamsError,
    Message,
    Part,
    PushNotificationNotSupportedError,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    UnsupportedOperationError,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from google.protobuf import struct_pb2
from google.protobuf.json_format import ParseDict
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from gen_agent._errors import GenAgentError, TurnError
from gen_agent.server._served import ServedTask, book, segment
from gen_agent.server.approvals import APPROVALS, PendingApproval, decision_from

__all__ = ["ARTIFACT_ID", "agent_card", "routes"]

A2AEvent = Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
"""What a stream yields to the SDK's dispatcher (it wraps each in a `StreamResponse`)."""

ARTIFACT_ID = "response"
"""The id of the artifact a task's reply text streams into."""

_STATES = {
    "submitted": TaskState.TASK_STATE_SUBMITTED,
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
}


def agent_card(name: str, url: str, host: Any) -> AgentCard:
    """The A2A agent card of host `name` served at `url` (the JSON-RPC endpoint)."""
    # the docstring's first paragraph, as one line (a docstring keeps its indentation)
    doc = " ".join(inspect.cleandoc(getattr(host.module, "__doc__", None) or "")
                   .split("\n\n")[0].split())
    return AgentCard(
        name=name,
        description=doc or f"gen_agent host {name}",
        version="1.0.0",
        supported_interfaces=[AgentInterface(
            url=url, protocol_binding=TransportProtocol.JSONRPC.value,
            protocol_version=PROTOCOL_VERSION_CURRENT)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id=name, name=name, description=doc or f"talk to {name}",
                           tags=["gen_agent"])],
    )


# ---------------------------------------------------------------------- the mapping
def _data(value: Any) -> Part:
    return Part(data=ParseDict(value, struct_pb2.Value()))


def _agent_message(task: ServedTask, parts: list[Part], kind: str | None = None) -> Message:
    message = Message(message_id=str(uuid.uuid4()), context_id=task.context_id,
                      task_id=task.id, role=Role.ROLE_AGENT, parts=parts)
    if kind is not None:
        message.metadata.update({"gen_agent_kind": kind})
    return message


def _status(task: ServedTask, state: str, message: Message | None = None
            ) -> TaskStatusUpdateEvent:
    status = TaskStatus(state=_STATES[state])
    if message is not None:
        status.message.CopyFrom(message)
    status.timestamp.GetCurrentTime()
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)


def approval_view(pending: PendingApproval) -> dict[str, Any]:
    """What a client sees of a pending permission question."""
    return {"id": pending.id, "tool_name": pending.tool_name,
            "tool_use_id": pending.tool_use_id, "input": pending.input}


def task_proto(task: ServedTask, *, fresh: bool = False) -> Task:
    """The A2A `Task` of a served task: state, the user's message, the reply artifact
    (`fresh`: as it was when it started, the first item of its stream)."""
    user = Message(message_id=f"{task.id}-user", context_id=task.context_id, task_id=task.id,
                   role=Role.ROLE_USER, parts=[Part(text=task.prompt)])
    proto = Task(id=task.id, context_id=task.context_id, history=[user])
    if fresh:
        proto.status.state = TaskState.TASK_STATE_WORKING
        return proto
    proto.status.state = _STATES[task.state]
    if task.done and task.state != "completed":
        proto.status.message.CopyFrom(_agent_message(task, [Part(text=task.reason or "")]))
    if task.text:
        proto.artifacts.append(Artifact(artifact_id=ARTIFACT_ID, name=ARTIFACT_ID,
                                        parts=[Part(text=task.text)]))
    pending = APPROVALS.pending(task.agent)
    if pending and not task.done:
        proto.status.state = TaskState.TASK_STATE_INPUT_REQUIRED
        proto.status.message.CopyFrom(_approval_message(task, pending[0]))
    return proto


def _approval_message(task: ServedTask, pending: PendingApproval) -> Message:
    return _agent_message(task, [
        Part(text=f"May the agent run the tool {pending.tool_name}? Answer allow or deny."),
        _data({"approval": approval_view(pending)})], "approval")


async def stream_task(server: Any, task: ServedTask, after: int, *, first: bool,
                      ) -> AsyncGenerator[A2AEvent]:
    """A2A stream events of one segment of `task` (see the module docstring)."""
    if first:
        yield task_proto(task, fresh=True)
    appended = first is False and bool(task.text)
    async for kind, value, extra in segment(server, task, after):
        if kind == "event":
            task.delivered = max(task.delivered, value)
            event = extra
            if event.kind == "text" and isinstance(event.data.get("text"), str):
                yield TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, append=appended,
                    artifact=Artifact(artifact_id=ARTIFACT_ID, name=ARTIFACT_ID,
                                      parts=[Part(text=event.data["text"])]))
                appended = True
            elif event.kind == "tool_use":
                yield _status(task, "working", _agent_message(task, [_data({"tool_use": {
                    "id": event.data.get("id"), "name": event.data.get("name"),
                    "input": event.data.get("input")}})], "tool_use"))
            elif event.kind == "tool_result":
                yield _status(task, "working", _agent_message(task, [_data({"tool_result": {
                    "tool_use_id": event.data.get("tool_use_id"),
                    "content": _jsonable(event.data.get("content")),
                    "is_error": bool(event.data.get("is_error"))}})], "tool_result"))
        elif kind == "approval":
            yield _status(task, "input-required", _approval_message(task, value))
            return
        else:
            if task.state == "completed":
                yield TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, append=appended,
                    last_chunk=True, artifact=Artifact(artifact_id=ARTIFACT_ID,
                                                       name=ARTIFACT_ID, parts=[]))
                yield _status(task, "completed", _agent_message(task, [Part(text=task.text)]))
            else:
                yield _status(task, task.state, _agent_message(task, [Part(
                    text=task.reason or task.state)]))
            return


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _prompt(message: Message) -> str:
    texts = [part.text for part in message.parts if part.HasField("text")]
    if not texts:
        raise InvalidParamsError("the message needs a text part")
    return "\n".join(texts)


def _answer(message: Message) -> Any:
    from google.protobuf.json_format import MessageToDict

    for part in message.parts:
        if part.HasField("data"):
            return decision_from(MessageToDict(part.data))
    for part in message.parts:
        if part.HasField("text"):
            return decision_from(part.text.strip().lower())
    return None


def _turn_error(exc: TurnError) -> Exception:
    from gen_agent.server._core import turn_error_status

    _status_code, code, text, _headers = turn_error_status(exc.reason)
    if code in ("busy", "draining", "overloaded", "rate_limit_exceeded", "insufficient_quota"):
        return UnsupportedOperationError(f"{code}: {text}")
    return InvalidParamsError(f"{code}: {text}")


class _Handler(RequestHandler):
    """The A2A request handler of one host."""

    def __init__(self, server: Any, host: str) -> None:
        self.server, self.host = server, host

    def _principal(self, context: ServerCallContext) -> Any:
        return context.state["gen_agent.principal"]

    def _task(self, context: ServerCallContext, task_id: str) -> ServedTask:
        task = book(self.server).get(self._principal(context), task_id)
        if task is None or task.host != self.host:
            raise TaskNotFoundError(f"no task {task_id!r}")
        return task

    async def _begin(self, params: SendMessageRequest, context: ServerCallContext
                     ) -> tuple[ServedTask, int, bool]:
        """Start the message's turn, or answer its task's permission question; returns
        the task, the sequence number to read after, and whether it is a new task."""
        message = params.message
        if message.task_id:
            task = self._task(context, message.task_id)
            pending = APPROVALS.pending(task.agent)
            if not pending:
                raise UnsupportedOperationError(
                    "the task is not waiting for input; send a new message without taskId")
            decision = _answer(message)
            if decision is None:
                raise InvalidParamsError("answer the approval with allow or deny")
            APPROVALS.answer(task.agent, pending[0].id, decision)
            return task, task.delivered, False  # go on after what a client was shown
        key = message.context_id or "ctx_" + uuid.uuid4().hex
        try:
            task = await book(self.server).start(self._principal(context), self.host, key,
                                                 _prompt(message))
        except TurnError as exc:
            raise _turn_error(exc) from None
        except GenAgentError:  # the agent did not start (a leased key, a failed start)
            raise UnsupportedOperationError("unavailable: the agent is not available; "
                                            "retry later") from None
        except ValueError:
            raise InvalidParamsError("a bad contextId") from None
        return task, 0, True

    async def on_message_send(self, params: SendMessageRequest,
                              context: ServerCallContext) -> Task | Message:
        task, after, _new = await self._begin(params, context)
        if params.configuration.return_immediately:
            return task_proto(task)
        async for _item in stream_task(self.server, task, after, first=False):
            pass
        return task_proto(task)

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext
                                     ) -> AsyncGenerator[A2AEvent]:
        task, after, new = await self._begin(params, context)
        if not new:
            yield _status(task, "working")
        async for item in stream_task(self.server, task, after, first=new):
            yield item

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        return task_proto(self._task(context, params.id))

    async def on_cancel_task(self, params: CancelTaskRequest,
                             context: ServerCallContext) -> Task:
        task = self._task(context, params.id)
        if task.done:
            raise TaskNotCancelableError(f"the task is {task.state}")
        await book(self.server).cancel(task)
        await _settled(task)
        return task_proto(task)

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext
                                   ) -> AsyncGenerator[A2AEvent]:
        task = self._task(context, params.id)
        if task.done:
            raise UnsupportedOperationError(f"the task is {task.state}; use GetTask")
        after = task.seq  # the task below carries everything up to here
        yield task_proto(task)
        async for item in stream_task(self.server, task, after, first=False):
            yield item

    async def on_list_tasks(self, params: Any, context: ServerCallContext) -> Any:
        raise UnsupportedOperationError("ListTasks is not supported")

    async def on_create_task_push_notification_config(self, params: Any,
                                                      context: ServerCallContext) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params: Any,
                                                   context: ServerCallContext) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params: Any,
                                                     context: ServerCallContext) -> Any:
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params: Any,
                                                      context: ServerCallContext) -> None:
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params: Any,
                                         context: ServerCallContext) -> AgentCard:
        raise UnsupportedOperationError("no extended agent card")


async def _settled(task: ServedTask, timeout: float = 5.0) -> None:
    import asyncio
    import contextlib

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await task.finished.wait()


class _ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context plus the request's gen_agent principal (set by the guard)."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        headers = context.state.get("headers") or {}
        # The SDK reads A2A-Version from here; never keep the bearer token around.
        context.state["headers"] = {k: v for k, v in headers.items()
                                    if k.lower() not in ("authorization", "cookie")}
        principal = self.server.principal(request)
        context.state["gen_agent.principal"] = principal
        context.tenant = principal.tenant
        return context


def routes(server: Any) -> list[BaseRoute]:
    """The A2A routes of every host of `server` (see the module docstring)."""
    found: list[BaseRoute] = []
    for name in server.hosts:
        path = f"/a2a/{name}"
        handler = _Handler(server, name)
        found += create_jsonrpc_routes(handler, path, context_builder=_ContextBuilder(server),
                                       enable_v0_3_compat=True)
        found.append(Route(f"{path}/.well-known/agent-card.json", _card_endpoint(server, name),
                           methods=["GET"]))
    return found


def _card_endpoint(server: Any, name: str) -> Any:
    async def card(request: Request) -> JSONResponse:
        url = str(request.base_url).rstrip("/") + f"/a2a/{name}"
        return JSONResponse(agent_card_to_dict(agent_card(name, url, server.host(name))))

    return card

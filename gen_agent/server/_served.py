"""What the A2A, AG-UI and chat protocols share: served turns kept as tasks, the driver that
reads each turn to its end whatever its clients do, and the segments clients read.

A `ServedTask` is one turn started for a principal on a host's key (the key namespaced by
the tenant, `Server.tenant_key`). Its driver (an asyncio task on the server's loop) reads the
turn through `Server.stream` (so the drain tracks it and the tenant's budget is charged) and
keeps its text, tool calls, state and outcome: a client that leaves does not end the turn,
and `GET`-style lookups answer from the task. A client reads a *segment*: the turn's events
after a sequence number, through `AgentHost.attach` (the agent's replay buffer), until the
turn ends or a tool permission question (`gen_agent.server.approvals`) waits for an answer.
Rejoining is reading another segment from where the last one stopped.

Tasks are bounded per server (`MAX_TASKS`, the oldest finished go first) and visible only to
their tenant: a lookup by another tenant finds nothing, exactly as an unknown id. A drain
denies every pending permission question of the server's tasks at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any, Literal

from gen_agent import aio
from gen_agent._errors import AgentDown, CallTimeout, GenAgentError, RequestError, TurnError
from gen_agent._event import Event
from gen_agent._request_ref import RequestRef
from gen_agent.server.approvals import APPROVALS, PendingApproval

__all__ = ["MAX_TASKS", "ServedTask", "TaskBook", "book", "segment"]

MAX_TASKS = 2_000
"""Tasks kept per server (count); beyond it the oldest finished ones are forgotten."""

_END_WAIT_S = 5.0
TaskState = Literal["submitted", "working", "input-required", "completed", "failed",
                    "canceled"]
FINAL_STATES = frozenset({"completed", "failed", "canceled"})


class ServedTask:
    """One served turn. Mutated by its driver only (on the server's loop).

    Attributes:
        id: unguessable task id. tenant: the owner's tenant. host: the host's name in the
            server. key: the conversation key as the client named it (context / thread id).
        agent: the agent's registered name `(host.name, tenant key)`. ref: the request's
            `RequestRef` once started. state: see `TaskState`. prompt: the user's text.
        text: the assistant text so far. tools: `[{id, name, input, content?, is_error?}]`.
        seq: events read by the driver. delivered: the highest sequence number a client
            segment carried. reason: a content-free failure reason (or None).
        usage / cost_usd: the turn's totals when it completed.
    """

    def __init__(self, tenant: str, host: str, key: str, agent: Any, prompt: str) -> None:
        self.id = "task_" + secrets.token_urlsafe(16)
        self.context_id = key
        self.tenant, self.host, self.key, self.agent = tenant, host, key, agent
        self.prompt = prompt
        self.ref: RequestRef | None = None
        self.state: TaskState = "submitted"
        self.text = ""
        self.tools: list[dict[str, Any]] = []
        self.seq = 0
        self.delivered = 0
        self.reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.cost_usd: float | None = None
        self.created = self.updated = time.time()
        self.started = asyncio.Event()
        self.finished = asyncio.Event()
        self._changed = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES

    def absorb(self, event: Event) -> None:
        """Keep what a lookup shows of one event of the turn."""
        data = event.data
        if event.kind == "text" and isinstance(data.get("text"), str):
            self.text += data["text"]
        elif event.kind == "tool_use":
            self.tools.append({"id": str(data.get("id") or ""), "name": str(data.get("name")),
                               "input": data.get("input")})
        elif event.kind == "tool_result":
            for tool in self.tools:
                if tool["id"] == data.get("tool_use_id"):
                    tool["content"] = data.get("content")
                    tool["is_error"] = bool(data.get("is_error"))
        self.touch()

    def touch(self) -> None:
        self.updated = time.time()
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()


def _reason(exc: BaseException) -> tuple[TaskState, str]:
    if isinstance(exc, TurnError):
        reason = exc.reason
        head = reason[0] if isinstance(reason, tuple) and reason else reason
        if head in ("interrupted", "cancelled"):
            return "canceled", str(head)
        return "failed", head if isinstance(head, str) else type(head).__name__
    if isinstance(exc, AgentDown):
        return "failed", "agent_down"
    if isinstance(exc, CallTimeout):
        return "failed", "timeout"
    return "failed", type(exc).__name__


def _open(server: Any, principal: Any, host: str, key: str, prompt: str) -> Any:
    stream = getattr(server, "stream", None)
    if stream is not None:
        return stream(principal, host, key, prompt)
    return server.host(host).aio.stream(server.tenant_key(principal, key), prompt,
                                        interrupt_on_exit=False)


class TaskBook:
    """The served tasks of one server (`book(server)`)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self._tasks: OrderedDict[str, ServedTask] = OrderedDict()
        self._drivers: set[asyncio.Task[None]] = set()
        hooks = getattr(server, "on_drain", None)
        if isinstance(hooks, list):
            hooks.append(self._on_drain)

    def _on_drain(self) -> None:
        # Nobody will answer a question while the server drains: deny them now (their
        # turns end interrupted) instead of holding the drain until they time out.
        for task in list(self._tasks.values()):
            if not task.done:
                APPROVALS.cancel(task.agent)

    def get(self, principal: Any, task_id: Any) -> ServedTask | None:
        """The task `task_id` of `principal`'s tenant, or None (unknown, or another's)."""
        task = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None or task.tenant != principal.tenant:
            return None
        return task

    def latest(self, principal: Any, host: str, key: str) -> ServedTask | None:
        """The newest task of `principal` on `host`'s `key`, or None."""
        for task in reversed(self._tasks.values()):
            if task.tenant == principal.tenant and task.host == host and task.key == key:
                return task
        return None

    async def start(self, principal: Any, host: str, key: str, prompt: str) -> ServedTask:
        """Start a turn and its driver; return once the turn is queued or running.

        Raises:
            LookupError: no such host. ValueError: a bad key.
            TurnError: the server or the host refused it (see `Server.stream`).
        """
        agent_host = self.server.host(host)
        agent = (agent_host.name, self.server.tenant_key(principal, key))
        task = ServedTask(principal.tenant, host, key, agent, prompt)
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        driver = asyncio.create_task(self._drive(principal, task, prompt, ready))
        self._drivers.add(driver)
        driver.add_done_callback(self._drivers.discard)
        await ready  # raises the refusal
        self._tasks[task.id] = task
        self._prune()
        return task

    def _prune(self) -> None:
        while len(self._tasks) > MAX_TASKS:
            oldest = next((t for t in self._tasks.values() if t.done), None)
            if oldest is None:
                return
            del self._tasks[oldest.id]

    async def _drive(self, principal: Any, task: ServedTask, prompt: str,
                     ready: asyncio.Future[None]) -> None:
        try:
            async with _open(self.server, principal, task.host, task.key, prompt) as turn:
                task.ref = turn.ref
                task.state = "working"
                task.started.set()
                ready.set_result(None)
                async for event in turn:
                    task.seq = turn.seq
                    task.absorb(event)
                response = await turn.response()
            task.usage = dict(response.usage or {})
            task.cost_usd = response.cost_usd
            if isinstance(response.text, str) and len(response.text) > len(task.text):
                task.text = response.text
            task.state = "completed"
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
                return
            if isinstance(exc, asyncio.CancelledError):
                task.state, task.reason = "canceled", "server_stopped"
                raise
            task.state, task.reason = _reason(exc)
        finally:
            task.started.set()
            task.finished.set()
            task.touch()

    async def cancel(self, task: ServedTask) -> str:
        """Cancel `task`: a queued turn is removed (`cancel_request`), the running one
        interrupted (`interrupt_request`, never a bare interrupt); a pending permission
        question is denied. Returns "cancelled", "interrupted" or "finished"."""
        if task.done or task.ref is None:
            return "finished"
        host = self.server.host(task.host)
        name = task.agent
        outcome = await aio.cancel_request(name, task.ref, 5.0, agent_system=host.system)
        if outcome == "cancelled":
            return "cancelled"
        if outcome == "current":
            APPROVALS.cancel(name)  # frees the agent thread if it waits for an answer
            with contextlib.suppress(GenAgentError):
                await aio.interrupt_request(name, task.ref, 5.0, agent_system=host.system)
            return "interrupted"
        return "finished"


def book(server: Any) -> TaskBook:
    """The server's `TaskBook` (made on first use, kept in `server.state`)."""
    state = server.state if hasattr(server, "state") else server.__dict__.setdefault(
        "state", {})
    found = state.get("gen_agent.server.tasks")
    if found is None:
        found = state["gen_agent.server.tasks"] = TaskBook(server)
    return found  # type: ignore[no-any-return]


Item = tuple[str, Any, Any]


async def segment(server: Any, task: ServedTask, after: int) -> AsyncIterator[Item]:
    """The turn's items after sequence number `after`, for one client read:

    - `("event", seq, Event)` for each event;
    - `("approval", PendingApproval, None)`: a permission question waits (the segment ends;
      answer it and read the next segment);
    - `("end", task, None)`: the turn ended (its outcome is `task.state` / `task.reason`).
    """
    host = server.host(task.host)
    while True:
        pending = APPROVALS.pending(task.agent)
        if pending:
            yield ("approval", pending[0], None)
            return
        if (task.done and task.seq <= after) or task.ref is None:
            await _until_finished(task)
            yield ("end", task, None)
            return
        reader = host.aio.attach(task.agent[1], task.ref, after=after)
        try:
            entered = await _enter(reader, task.agent)
        except (RequestError, GenAgentError, LookupError):
            # Queued (not running yet), or already out of the replay buffer: wait for
            # the driver to move, then look again.
            if task.done:
                await _until_finished(task)
                yield ("end", task, None)
                return
            await task.wait_changed(1.0)
            continue
        if not entered:
            continue  # a permission question came first: the loop's top yields it
        try:
            async for item in _race(reader, task.agent):
                yield item
                if item[0] == "approval":
                    return
        finally:
            await reader.__aexit__(None, None, None)
        await _until_finished(task)
        yield ("end", task, None)
        return


async def _enter(reader: Any, agent: Any) -> bool:
    """Attach `reader`; False (not attached) when a permission question of `agent` came
    first (the agent thread waits in `ask_client` and answers nothing meanwhile)."""
    enter = asyncio.ensure_future(reader.__aenter__())
    watch = asyncio.ensure_future(APPROVALS.wait_pending(agent))
    try:
        await asyncio.wait({enter, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if enter.done():
        enter.result()  # raises the attach's refusal
        return True
    enter.cancel()
    with contextlib.suppress(BaseException):
        await enter
    return False


async def _until_finished(task: ServedTask) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_END_WAIT_S):
            await task.finished.wait()


async def _race(reader: Any, agent: Any) -> AsyncIterator[Item]:
    """The reader's events, ended early by a pending permission question of `agent`."""
    events = reader.__aiter__()
    nxt: asyncio.Future[Any] = asyncio.ensure_future(events.__anext__())
    watch: asyncio.Future[list[PendingApproval]] = asyncio.ensure_future(
        APPROVALS.wait_pending(agent))
    try:
        while True:
            done, _ = await asyncio.wait({nxt, watch}, return_when=asyncio.FIRST_COMPLETED)
            if nxt in done:
                try:
                    event = nxt.result()
                except (StopAsyncIteration, TurnError, AgentDown, CallTimeout, RequestError):
                    return  # the turn ended: its outcome is the driver's
                yield ("event", reader.seq, event)
                nxt = asyncio.ensure_future(events.__anext__())
            else:
                yield ("approval", watch.result()[0], None)
                return
    finally:
        for future in (nxt, watch):
            if not future.done():
                future.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(nxt, watch, return_exceptions=True)
        with contextlib.suppress(BaseException):
            await events.aclose()


def status_view(task: ServedTask) -> dict[str, Any]:
    """A JSON-ready, content-light view of `task` (no prompt, no tool input)."""
    return {"id": task.id, "host": task.host, "key": task.key, "state": task.state,
            "reason": task.reason, "seq": task.seq, "usage": task.usage,
            "cost_usd": task.cost_usd}

"""Tool permission decisions a protocol client answers: A2A's `input-required`, an AG-UI
interrupt, the chat page's permission prompt.

An agent served by `gen_agent.server` lets the remote user decide whether a tool runs by
answering `handle_tool_permission` with `ask_client`:

    from gen_agent.server.approvals import ask_client

    class Chat(GenAgent):
        def handle_tool_permission(self, request, state):
            return ask_client(request, timeout_s=120)

`ask_client` records the question as a `PendingApproval` of the calling agent and waits (in
the agent thread, as any permission callback does) until a client answers it, the turn is
cancelled through the server, or `timeout_s` passes (then it denies). Meanwhile the agent
answers nothing else (its `status`, queued prompts wait), so keep `timeout_s` well under the
agent's permission bound (`DEFAULT_PERMISSION_TIMEOUT_MS`, 60 s, unless the agent sets
`permission_timeout_ms`): past the bound the runtime has already denied, and the late answer
is dropped.

A question is only ever shown to, and answered by, requests of the tenant that owns the
agent's key (the protocols look pending approvals up by the agent's `(host, tenant key)`
name). Not in the Elixir original.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
import time
from typing import Any

import msgspec

from gen_agent import current_name
from gen_agent._permission import Allow, Deny, PermissionDecision, ToolPermissionRequest

__all__ = ["APPROVALS", "Approvals", "PendingApproval", "ask_client"]

DENY_NO_ANSWER = Deny("nobody answered the permission request in time")
"""What `ask_client` returns when no client answered within its bound."""

DENY_CANCELLED = Deny("the request was cancelled", interrupt=True)
"""What a pending question gets when its turn is cancelled through the server."""


class PendingApproval(msgspec.Struct, frozen=True, kw_only=True):
    """One question waiting for a client.

    Fields:
        id: an unguessable id the client answers by (str).
        agent: the asking agent's registered name (a host agent's `(host, key)`).
        tool_name: the tool, as the backend names it. tool_use_id: the model's call id or
            None. input: the tool's input (shown to the client that decides; never logged).
        created: wall-clock seconds (epoch) when it was asked.
    """

    id: str
    agent: Any
    tool_name: str
    tool_use_id: str | None
    input: dict[str, Any]
    created: float


class _Entry:
    __slots__ = ("answer", "done", "pending")

    def __init__(self, pending: PendingApproval) -> None:
        self.pending = pending
        self.done = threading.Event()
        self.answer: PermissionDecision | None = None


class Approvals:
    """The pending questions of a process's agents. Thread-safe; `APPROVALS` is the one
    `ask_client` and the protocols use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._watchers: dict[Any, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def ask(self, agent: Any, request: ToolPermissionRequest,
            timeout_s: float) -> PermissionDecision:
        """Record `request` as a question of `agent` and wait for its answer (blocking, at
        most `timeout_s` seconds; then `DENY_NO_ANSWER`)."""
        pending = PendingApproval(id="ap_" + secrets.token_urlsafe(12), agent=agent,
                                  tool_name=request.tool_name, tool_use_id=request.tool_use_id,
                                  input=dict(request.input), created=time.time())
        entry = _Entry(pending)
        with self._lock:
            self._entries[pending.id] = entry
            watchers = list(self._watchers.get(agent, ()))
        for loop, event in watchers:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits there
                loop.call_soon_threadsafe(event.set)
        try:
            entry.done.wait(timeout_s)
        finally:
            with self._lock:
                self._entries.pop(pending.id, None)
        return entry.answer if entry.answer is not None else DENY_NO_ANSWER

    def pending(self, agent: Any) -> list[PendingApproval]:
        """The unanswered questions of `agent`, oldest first."""
        with self._lock:
            return [e.pending for e in self._entries.values()
                    if e.pending.agent == agent and not e.done.is_set()]

    def answer(self, agent: Any, approval_id: str, decision: PermissionDecision) -> bool:
        """Answer question `approval_id` of `agent`; False when there is no such question
        of that agent (answered, timed out, or another agent's: a guessed id of another
        tenant answers nothing)."""
        with self._lock:
            entry = self._entries.get(approval_id)
            if entry is None or entry.pending.agent != agent or entry.done.is_set():
                return False
            entry.answer = decision
            entry.done.set()
            return True

    def cancel(self, agent: Any) -> int:
        """Deny every pending question of `agent` with `DENY_CANCELLED` (the turn ends as
        interrupted); returns how many there were."""
        with self._lock:
            entries = [e for e in self._entries.values()
                       if e.pending.agent == agent and not e.done.is_set()]
            for entry in entries:
                entry.answer = DENY_CANCELLED
                entry.done.set()
        return len(entries)

    async def wait_pending(self, agent: Any) -> list[PendingApproval]:
        """Wait until `agent` has a pending question; return them (cancel the wait to stop)."""
        event = asyncio.Event()
        watcher = (asyncio.get_running_loop(), event)
        with self._lock:
            self._watchers.setdefault(agent, set()).add(watcher)
        try:
            while True:
                found = self.pending(agent)
                if found:
                    return found
                await event.wait()
                event.clear()
        finally:
            with self._lock:
                watchers = self._watchers.get(agent)
                if watchers is not None:
                    watchers.discard(watcher)
                    if not watchers:
                        del self._watchers[agent]


APPROVALS = Approvals()
"""The process's pending questions."""


def ask_client(request: ToolPermissionRequest, *, timeout_s: float = 50.0) -> PermissionDecision:
    """Answer `handle_tool_permission` by asking the client of the running turn (see the
    module docstring). Call it from `handle_tool_permission` only.

    Args:
        request: the `ToolPermissionRequest` the callback got.
        timeout_s: seconds to wait for an answer (default 50, under the default 60 s bound).

    Returns:
        The client's `Allow` / `Deny`; `DENY_NO_ANSWER` after `timeout_s`; `DENY_CANCELLED`
        when the turn was cancelled through the server meanwhile.

    Raises:
        RuntimeError: not called from an agent's thread.
    """
    agent = current_name()
    if agent is None:
        raise RuntimeError("ask_client: call it from handle_tool_permission")
    return APPROVALS.ask(agent, request, timeout_s)


def decision_from(value: Any) -> PermissionDecision | None:
    """A client's answer as a decision: `True`/`"allow"`/`{"allow": true}` allow, `False`/
    `"deny"`/`{"allow": false, "message": ...}` deny; anything else None."""
    if isinstance(value, dict):
        message = value.get("message")
        value = value.get("allow", value.get("decision"))
        if value in (False, "deny") and isinstance(message, str) and message:
            return Deny(message[:500])
    if value is True or value == "allow":
        return Allow()
    if value is False or value == "deny":
        return Deny("the user denied it")
    return None

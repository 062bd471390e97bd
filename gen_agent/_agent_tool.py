"""`agent_tool`: another agent offered as a tool, so one agent can ask another mid-turn.

Above the runtime (it calls the client API: `whereis`, `tell_with_completion`), while the rest
of the tool machinery (`gen_agent._tools`) sits below it, where the backends' tool loops use it.
Users import it from `gen_agent.tools`.
"""

from __future__ import annotations

import contextlib
import queue
import time
from typing import Any

from gen_agent._errors import GenAgentError
from gen_agent._request_options import RequestOptions
from gen_agent._tools import AgentCall, Tool, ToolContext, ToolRefused

__all__ = ["agent_tool"]


def agent_tool(name: Any, *, description: str, tool_name: str | None = None,
               timeout_s: float = 300.0) -> Tool:
    """Offer another agent as a tool: a call is an `ask` of `name` with the model's `prompt`.

    Args:
        name: the agent to ask (its registered name). description: for the model.
        tool_name: the tool's name (default: `ask_<name>` when `name` is a str).
        timeout_s: seconds the sub-ask may take (then an error result "timeout").

    Returns:
        A `Tool` taking `{"prompt": str}`. Its result is the sub-turn's text; a failed
        sub-turn, a timeout, a missing agent or a cycle (the agent is already in the call
        chain: it would wait for itself) give an error result. Every call is recorded as an
        `AgentCall` (the turn's `"agent_call"` events, `Response.agent_calls`).

    Raises:
        ValueError: no usable tool name.
    """
    label = tool_name or (f"ask_{name}" if isinstance(name, str) else None)
    if label is None:
        raise ValueError("agent_tool: give tool_name for an agent whose name is not a str")

    def ask_agent(prompt: str, ctx: ToolContext) -> str:
        return _ask_agent(name, prompt, ctx, timeout_s)

    ask_agent.__doc__ = description
    return Tool(ask_agent, name=label, description=description, timeout_s=timeout_s + 5)


def _ask_agent(name: Any, prompt: str, ctx: ToolContext, timeout_s: float) -> str:
    from gen_agent._client import whereis  # lazy: the client is imported after the tools

    started = time.monotonic()

    def record(outcome: str, ref: Any = None, kind: str | None = None,
               response: Any = None) -> None:
        ctx.records.append(AgentCall(
            agent=name, ref=ref, tool_use_id=ctx.call_id, outcome=outcome, reason_kind=kind,
            duration_ms=int((time.monotonic() - started) * 1000),
            usage=getattr(response, "usage", None), cost_usd=getattr(response, "cost_usd", None)))

    if name in ctx.chain:
        record("cycle")
        path = " -> ".join(str(n) for n in (*ctx.chain, name))
        raise ToolRefused(f"refused: {path} would call an agent already waiting on this call")
    agent = whereis(name)
    if agent is None:
        record("not_found")
        raise ToolRefused(f"no agent named {name!r}")
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    try:
        ref = agent.tell_with_completion(prompt, inbox, monitor=True, timeout=timeout_s,
                                         options=RequestOptions(call_chain=ctx.chain))
    except GenAgentError as exc:
        kind = _kind_of(getattr(exc, "reason", None))
        record("error", kind=kind)
        raise ToolRefused(f"{name!r} refused the call: {kind}") from None
    deadline = started + timeout_s
    while True:  # the completion (or Down), the turn's cancellation, or the deadline
        try:
            message = inbox.get(timeout=min(0.05, max(0.0, deadline - time.monotonic())))
            break
        except queue.Empty:
            if ctx.cancelled.is_set() or time.monotonic() >= deadline:
                with contextlib.suppress(GenAgentError):
                    agent.interrupt_request(ref, timeout=1)
                record("timeout" if not ctx.cancelled.is_set() else "error", ref,
                       None if not ctx.cancelled.is_set() else "cancelled")
                raise ToolRefused(f"{name!r} did not answer within {timeout_s:g} s") from None
    if message.kind == "down":
        record("error", ref, _kind_of(message.reason))
        raise ToolRefused(f"{name!r} stopped before answering") from None
    outcome, value = message.outcome
    if outcome != "ok":
        kind = _kind_of(value)
        record("error", ref, kind)
        raise ToolRefused(f"{name!r} failed: {kind}")
    record("ok", ref, response=value)
    return str(value.text)


def _kind_of(reason: Any) -> str:
    kind = getattr(reason, "kind", None)
    if isinstance(kind, str):
        return kind
    if isinstance(reason, str):
        return reason
    if isinstance(reason, tuple) and reason and isinstance(reason[0], str):
        return reason[0]
    return type(reason).__name__

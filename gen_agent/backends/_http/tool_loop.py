"""The tool loop of the SDK backends: model asks → the agent's Python tools run → their
results go back → the model continues, inside one turn.

A backend gives one function, `step(history) -> events`, that makes one request with the
conversation so far and streams its events, ending with one terminal event whose data holds
`"messages"` (the reply, as `gen_agent.Message`s) and `"stop_reason"`. The loop:

- relays every event of every step in order (`text`, `tool_use`, provider events...);
- after a step whose reply calls Python tools (the provider's `tool_use` / function-call
  stop), runs those calls in parallel through `gen_agent.tools.run_calls` — each passing the
  agent's permission callback first, cancelled with the turn — and relays a `permission`
  event per decision, a `tool_result` event per call and an `agent_call` event per sub-agent
  call, then sends the reply and the results back as the next step;
- reports the turn's running usage (the sum over its steps) as `usage` events, so the last
  one is the turn's total (§6.3);
- ends with the last step's result, whose `"messages"` are the whole loop (the user message,
  every assistant reply and tool-result message, in order: replayable), or with an error:
  the step's own, `"interrupted"` for a `Deny(interrupt=True)`, or kind `"max_steps"` when
  the model still calls tools after `max_steps` requests.

A call of a tool the agent does not offer as a Python tool (a raw provider tool definition)
is left to the caller: the turn ends with the reply, as before tools existed.

Mirrors: nothing in the Elixir original; the agent loop of pydantic-ai / openai-agents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gen_agent._conversation import Message, ToolResultPart
from gen_agent._event import Event
from gen_agent._tools import Tool, ToolCall, ToolInterrupted, permission_check, run_calls
from gen_agent.backend import BackendError

DEFAULT_MAX_STEPS = 8
"""Requests one turn may make before a model that keeps calling tools is stopped (count)."""

_TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
               "cache_creation_input_tokens", "reasoning_tokens", "cached_input_tokens",
               "cache_read_tokens", "cache_creation_tokens", "total_tokens")


def run_loop(*, sent: Sequence[Message], history: Sequence[Message],
             step: Callable[[tuple[Message, ...]], Iterator[Event]], tools: Sequence[Tool],
             context: Any, provider: str, max_steps: int) -> Iterator[Event]:
    """Run the turn's steps (see the module docstring); a generator of `Event`s.

    Args:
        sent: the messages this turn adds before any reply (the user message).
        history: the whole conversation to send first (ending with `sent`).
        step: one request with a history; its events end with one terminal event.
        tools: the agent's Python tools (empty: one step, as without the loop).
        context: the `TurnContext` (agent name, cancel signal, permission, call chain).
        provider: the provider name for errors and permission requests.
        max_steps: the most requests (>= 1).
    """
    by_name = {tool.name for tool in tools}
    conversation = list(history)
    delta: list[Message] = list(sent)
    finished_usage: dict[str, int] = {}
    for _ in range(max_steps):
        step_usage: dict[str, int] = {}
        terminal: Event | None = None
        calls: list[ToolCall] = []
        for event in step(tuple(conversation)):
            kind = event.kind
            if kind == "usage":
                step_usage = {k: v for k, v in event.data.items() if isinstance(v, int)}
                yield Event.new("usage", {**event.data, **_summed(finished_usage, step_usage)})
                continue
            if kind in ("result", "error"):
                terminal = event
                break
            if kind == "tool_use" and event.data.get("name") in by_name:
                calls.append(ToolCall(id=str(event.data.get("id")), name=event.data["name"],
                                      input=event.data.get("input") or {}))
            yield event
        if terminal is None:
            return  # no terminal event: the runtime reports it
        if terminal.kind == "error":
            yield terminal
            return
        finished_usage = _summed(finished_usage, step_usage)
        data = terminal.data
        messages = tuple(data.get("messages") or ())
        reply = messages[-1] if messages and messages[-1].role == "assistant" else None
        if reply is not None:
            delta.append(reply)
        if not calls:
            yield _result(terminal, delta)
            return
        outcome = yield from run_step(calls, tools, context, provider)
        results, interrupted = outcome
        if interrupted:
            yield Event.new("error", {"reason": "interrupted"})
            return
        answer = Message(role="user", content=tuple(
            ToolResultPart(tool_call_id=r.tool_use_id, content=r.content, is_error=r.is_error)
            for r in results))
        delta.append(answer)
        if reply is not None:
            conversation.append(reply)
        conversation.append(answer)
    yield Event.new("error", {"reason": BackendError.new(
        provider, "max_steps", max_steps, retryable=False,
        message=f"the model still called tools after {max_steps} requests")})


def run_step(calls: Sequence[ToolCall], tools: Sequence[Tool], context: Any,
             provider: str) -> Any:
    """Run one step's tool calls (permission first) and yield its `permission`,
    `tool_result` and `agent_call` events; a generator that returns `(results,
    interrupted)`. Shared by the API tool loop and the mock's `tool_round`.

    Args:
        calls: the step's tool calls.
        tools: the agent's Python tools.
        context: the `TurnContext` (agent name, cancel signal, permission, call chain), or
            None outside a turn (no agent, no chain, no cancel).
        provider: the provider name for permission requests.
    """
    agent = getattr(context, "agent", None)
    options = getattr(context, "options", None)
    chain = () if context is None else (*getattr(options, "call_chain", ()), agent)
    records: list[Any] = []
    decisions: list[dict[str, Any]] = []
    interrupted = False
    try:
        results = run_calls(tools, calls, agent=agent, chain=chain, records=records,
                            cancel=getattr(context, "cancel_event", None),
                            allow=permission_check(context, provider, decisions),
                            journal=getattr(context, "journal", None))
    except ToolInterrupted as stop:
        results, interrupted = stop.results, True
    for decision in decisions:
        yield Event.new("permission", decision)
    for result in results:
        yield Event.new("tool_result", {"tool_use_id": result.tool_use_id,
                                        "content": result.content,
                                        "is_error": result.is_error})
    for record in records:
        yield Event.new("agent_call", {f: getattr(record, f) for f in record.__struct_fields__})
    return results, interrupted


def _summed(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    keys = [k for k in {**a, **b} if k in _TOKEN_KEYS]
    return {k: a.get(k, 0) + b.get(k, 0) for k in keys}


def _result(terminal: Event, delta: list[Message]) -> Event:
    return Event(kind="result", data={**terminal.data, "messages": tuple(delta)},
                 timestamp=terminal.timestamp)

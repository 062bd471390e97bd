"""Tool permission decisions: the agent decides whether a backend may use a tool.

A backend that can ask before it uses a tool (the Claude Code CLI with
`--permission-prompt-tool stdio`, Codex `app-server` approvals, and later gen_agent's own
Python tools) builds a frozen `ToolPermissionRequest` and asks the agent through
`TurnContext.request_permission`. The runtime runs the agent's optional callback
`GenAgent.handle_tool_permission(request, state)` in the agent thread and hands its answer
back to the waiting turn task:

- `Allow(updated_input=None)`: the tool runs (with `updated_input` instead of the model's input
  when given);
- `Deny(message, interrupt=False)`: the tool does not run; the model sees `message`;
  `interrupt=True` also ends the turn as interrupted.

A callback that raises, returns anything else, or does not answer within the bound (default
`DEFAULT_PERMISSION_TIMEOUT_MS`) is a deny (`DENY_FAILED`, `DENY_TIMEOUT`). The turn task
waits for the decision; the agent thread runs the callback, and, like any callback that runs
there, a callback that blocks delays every other message of the agent meanwhile (`status`,
the processing of an `interrupt`; docs: Tools). An `interrupt`, `stop` or the watchdog still
reaches the waiting turn at once: it is answered `DENY_INTERRUPTED` (the tool never runs)
and the callback's later answer is dropped (logged by type); the caller gets
`"interrupted"` once the agent thread is free. Telemetry (`telemetry.TOOL_PERMISSION`) and the
turn's `"permission"` event record the tool name and the decision only, never the input.

Mirrors: no Elixir original (an extension); the wire shapes are the Claude Code control
protocol's `can_use_tool` request (as claude-agent-sdk's `can_use_tool` callback sees it) and
Codex app-server's approval requests.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = [
    "DEFAULT_PERMISSION_TIMEOUT_MS",
    "DENY_FAILED",
    "DENY_INTERRUPTED",
    "DENY_NOT_CURRENT",
    "DENY_TIMEOUT",
    "Allow",
    "Deny",
    "PermissionDecision",
    "ToolPermissionRequest",
    "as_decision",
    "decision_name",
]

DEFAULT_PERMISSION_TIMEOUT_MS: Final = 60_000
"""How long a turn waits for `handle_tool_permission` before it denies (milliseconds)."""


class ToolPermissionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One question "may this tool run?" from a backend. Immutable.

    Fields:
        backend: the asking backend's provider name (`"claude"`, `"codex"`, ...).
        tool_name: the tool, as the backend names it (`"Bash"`, `"Write"`,
            `"commandExecution"`, ...).
        input: the tool's input as the model wrote it (a dict; may hold file contents or
            commands: never logged by gen_agent).
        tool_use_id: the id of the model's tool call, or None when the backend gives none.
        details: further backend-specific fields (e.g. Claude's `permission_suggestions`,
            `blocked_path`; Codex's `reason`), as given.
    """

    backend: str
    tool_name: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    tool_use_id: str | None = None
    details: dict[str, Any] = msgspec.field(default_factory=dict)


class Allow(msgspec.Struct, frozen=True):
    """Decision: let the tool run.

    Fields:
        updated_input: the input the tool runs with instead of the model's (a dict), or None
            to keep the model's input.
    """

    updated_input: dict[str, Any] | None = None


class Deny(msgspec.Struct, frozen=True):
    """Decision: the tool does not run.

    Fields:
        message: what the model is told (a str).
        interrupt: also end the turn, as interrupted (the caller gets `"interrupted"`).
    """

    message: str = "denied by the agent"
    interrupt: bool = False


PermissionDecision = Allow | Deny
"""What `handle_tool_permission` returns."""

DENY_TIMEOUT: Final = Deny("the agent did not answer the permission request in time")
"""The decision when no answer arrived within the bound."""

DENY_FAILED: Final = Deny("the agent's permission callback failed")
"""The decision when the callback raised or returned something else."""

DENY_NOT_CURRENT: Final = Deny("the turn that asked is no longer running")
"""The decision when the asking turn was interrupted or replaced before the agent answered."""

DENY_INTERRUPTED: Final = Deny("the turn was interrupted", interrupt=True)
"""The decision when an interrupt, a stop or the watchdog reached the asking turn while the
agent's callback had not answered yet: given at once, so the tool never runs; the callback's
later answer is dropped."""


def as_decision(value: Any) -> PermissionDecision | None:
    """`value` if it is a well-formed `Allow` / `Deny`, else None.

    Args:
        value: what a permission callback returned.

    Returns:
        The decision, or None for anything else (an `Allow` whose `updated_input` is not a
        dict or None, a `Deny` whose message is not a str, any other value).
    """
    if type(value) is Allow:
        ok = value.updated_input is None or isinstance(value.updated_input, dict)
        return value if ok else None
    if type(value) is Deny:
        ok = isinstance(value.message, str) and isinstance(value.interrupt, bool)
        return value if ok else None
    return None


def decision_name(decision: PermissionDecision) -> str:
    """`"allow"` or `"deny"`: what telemetry and events record."""
    return "allow" if type(decision) is Allow else "deny"

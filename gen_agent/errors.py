"""The exception tree of gen_agent.

Runtime outcomes are exceptions under one base, `GenAgentError`; usage errors (a bad option,
a non-str prompt) stay outside it as `ValueError` / `TypeError`, so catching `GenAgentError`
never hides a bug. Reasons are data (`exc.reason`), never parsed from the message.

    GenAgentError
    ├── AgentNotFound (also LookupError)   not registered (or already gone) before the call
    ├── AlreadyStarted                     start_agent with a name that is taken
    ├── AgentStartError                    start failed: .reason is ("init_agent_failed", r) ...
    ├── AgentDown                          the agent died while this caller was waiting
    ├── CallTimeout (also TimeoutError)    the caller's own timeout expired; the agent is unaffected
    ├── TurnError                          a prompt request failed: .reason (contract §4.20)
    ├── RequestError                       a control call failed: .reason ("busy", ...)
    ├── InitAgentError                     raised by init_agent for {:error, reason}
    ├── PreRunError                        raised by pre_run for {:error, reason}
    └── CheckpointError                    context.checkpoint(id) was rejected: .reason

Backend-side exceptions (`SessionStartError`, `DispatchError`, `BackendError`) live in
`gen_agent.backend` and derive from `GenAgentError` too.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentDown",
    "AgentNotFound",
    "AgentStartError",
    "AlreadyStarted",
    "CallTimeout",
    "CheckpointError",
    "GenAgentError",
    "InitAgentError",
    "PreRunError",
    "RequestError",
    "TurnError",
]


class GenAgentError(Exception):
    """Base of every runtime error gen_agent raises. Carries `reason` when there is one."""

    def __init__(self, reason: Any = None, message: str | None = None) -> None:
        self.reason = reason
        super().__init__(message if message is not None else _describe(reason))


def _describe(reason: Any) -> str:
    # Only the shape of a reason is shown: its head string, never payload text (§3.14).
    if isinstance(reason, str):
        return reason
    if isinstance(reason, tuple) and reason and isinstance(reason[0], str):
        return reason[0]
    if reason is None:
        return ""
    return type(reason).__name__


class AgentNotFound(GenAgentError, LookupError):
    """The name is not registered, or its agent is already dead, at lookup time.

    Differs from `AgentDown`: that one means the lookup succeeded and the agent died while
    the call was in flight (the contract deliberately keeps the two apart, §2.1).
    Mirrors `{:error, :not_found}`.
    """

    def __init__(self, name: Any = None) -> None:
        self.name = name
        super().__init__("not_found", "no agent registered under that name")


class AlreadyStarted(GenAgentError):
    """`start_agent` was given a name that a live agent already holds.

    `.name` is the name; `.agent` the `AgentRef` holding it. Mirrors
    `{:error, {:already_started, pid}}`.
    """

    def __init__(self, name: Any, agent: Any = None) -> None:
        self.name = name
        self.agent = agent
        super().__init__(("already_started", agent), "an agent with that name is running")


class AgentStartError(GenAgentError):
    """The agent failed to start; nothing is left running or registered.

    `.reason` is one of `("init_agent_failed", r)`, `("backend_start_failed", r)`,
    `("init_failed", kind, "TypeName")` (contract §2.2). Mirrors `{:error, reason}` from
    `GenAgent.start_agent/2`.
    """


class AgentDown(GenAgentError):
    """The agent stopped or was killed while this caller waited (the Elixir call "exits").

    `.reason` is the agent's exit reason when known (e.g. `("callback_failed", "error",
    "ValueError")`, `"killed"`). Differs from `AgentNotFound`, which is raised before anything
    was sent.
    """


class CallTimeout(GenAgentError, TimeoutError):
    """The caller's own `timeout` (seconds) expired. The agent is unaffected: a timed-out ask
    stays queued or running (contract §2.1). Mirrors the caller-side `exit({:timeout, _})`.
    """

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout
        super().__init__("timeout", f"no answer within {timeout} s")


class TurnError(GenAgentError):
    """A prompt request (ask, tell_with_completion admission, notify_ack) failed.

    `.reason` is exactly the contract's reason (§4.20): a string such as `"timeout"`,
    `"interrupted"`, `"no_terminal_event"`, `"draining"`, or a tuple such as
    `("task_crashed", exc)`, `("overloaded", OverloadInfo)`, `("agent_terminated", "shutdown")`,
    or a backend's own reason (a `BackendError` for bundled backends).
    Mirrors `{:error, reason}` from `GenAgent.ask/3`.
    """


class RequestError(GenAgentError):
    """A control call (reset_session, drain, stop, ...) answered `{:error, reason}`.

    `.reason` is the contract's reason, e.g. `"busy"`, `"draining"`, `"unsupported"`,
    `"self_stop"`, `("backend_reset_failed", "TypeName")`, `("agent_down", r)`.
    """


class InitAgentError(GenAgentError):
    """Raise from `GenAgent.init_agent` to refuse the start with `reason`.

    The start then fails with `AgentStartError(("init_agent_failed", reason))`.
    Mirrors `{:error, reason}` returned by `init_agent/1`.
    """


class PreRunError(GenAgentError):
    """Raise from `GenAgent.pre_run` to stop the agent with `("pre_run_failed", reason)`.

    Mirrors `{:error, reason}` returned by `pre_run/1`.
    """


class CheckpointError(GenAgentError):
    """`TurnContext.checkpoint(session_id)` was rejected.

    `.reason` is `"unsupported_checkpoint"`, `"invalid_session_id"`,
    `"conflicting_session_id"` (recorded: the turn fails with it) or `"not_current"` (a call
    from another thread or an old turn; not recorded). Mirrors `{:error, reason}` from the
    checkpoint function (contract §7.3).
    """

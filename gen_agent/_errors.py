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
    ├── TurnError                          a prompt request failed: .reason (contract §4.20; docs:
    Errors)
    ├── RequestError                       a control call failed: .reason ("busy", ...)
    ├── InitAgentError                     raised by init_agent for {:error, reason}
    ├── PreRunError                        raised by pre_run for {:error, reason}
    └── CheckpointError                    context.checkpoint(id) was rejected: .reason

Backend-side exceptions (`SessionStartError`, `DispatchError`, `BackendError`) live in
`gen_agent.backend` and derive from `GenAgentError` too.
"""

from __future__ import annotations

import re
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
    "describe_reason",
]


class GenAgentError(Exception):
    """Base of every runtime error gen_agent raises. Carries `reason` when there is one.

    `str(exc)` renders the whole reason structure (see `describe_reason`), never payload text
    (prompts, responses, provider messages); a library-written `detail` (an option's accepted
    values, the message of a `ValueError` raised by gen_agent's own validation) may follow in
    parentheses. The exception that caused it, when there is one, is `exc.__cause__`.
    """

    def __init__(self, reason: Any = None, message: str | None = None) -> None:
        self.reason = reason
        super().__init__(message if message is not None else describe_reason(reason))
        cause = _cause_in(reason)
        if cause is not None and cause is not self:
            self.__cause__ = cause


def _cause_in(reason: Any) -> BaseException | None:
    """The exception carried by a reason (`exc`, `("task_crashed", exc)`), if any."""
    if isinstance(reason, BaseException):
        return reason
    if isinstance(reason, tuple):
        for item in reason:
            if isinstance(item, BaseException):
                return item
    return None


_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_HIDDEN_FIELDS = frozenset({"message", "raw", "text", "prompt", "data", "events", "response",
                            "final_message"})
_MAX_SHOWN = 80


def describe_reason(reason: Any) -> str:
    """Render a reason readably, without payload text.

    A string is shown as is; a tuple headed by a string as `head: rest`, nested tuples as
    `head rest`; identifiers bare, other strings quoted (and cut at 80 characters); exceptions by
    type name (a `GenAgentError` by its own rendering); msgspec records as
    `Type(field=value, ...)` without payload-carrying fields (`message`, `raw`, `text`, ...),
    or by their own `__describe__()` when they define one (`InvalidOutput` shows its
    validation message with quoted values elided).

    Examples: `("callback_failed", "error", "ValueError")` → `callback_failed: error ValueError`;
    `("backend_start_failed", ("unknown_option", "modle"))` →
    `backend_start_failed: unknown_option 'modle'`.
    """
    if isinstance(reason, tuple) and reason and isinstance(reason[0], str):
        if len(reason) == 1:
            return reason[0]
        return f"{reason[0]}: " + " ".join(_part(item, reason[0]) for item in reason[1:])
    if reason is None:
        return ""
    if isinstance(reason, str):
        return reason
    return _part(reason, None)


def _part(value: Any, head: str | None) -> str:
    if isinstance(value, str):
        if head in ("unknown_option", "invalid_option") or not _BARE.match(value):
            return repr(value[:_MAX_SHOWN] + ("…" if len(value) > _MAX_SHOWN else ""))
        return value
    if isinstance(value, tuple):
        if value and isinstance(value[0], str):
            return " ".join([value[0], *(_part(item, value[0]) for item in value[1:])])
        return "(" + ", ".join(_part(item, None) for item in value) + ")"
    if isinstance(value, GenAgentError):
        return str(value)
    if isinstance(value, BaseException):
        return type(value).__name__
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    describe = getattr(type(value), "__describe__", None)
    if describe is not None:  # a record that renders itself without its payload
        return str(describe(value))
    fields = getattr(value, "__struct_fields__", None)
    if fields is not None:
        shown = ", ".join(f"{f}={_part(getattr(value, f), None)}" for f in fields
                          if f not in _HIDDEN_FIELDS)
        return f"{type(value).__name__}({shown})"
    return type(value).__name__


class AgentNotFound(GenAgentError, LookupError):
    """The name is not registered, or its agent is already dead, at lookup time.

    Differs from `AgentDown`: that one means the lookup succeeded and the agent died while
    the call was in flight (the contract deliberately keeps the two apart, §2.1).
    When the name belonged to an agent that ended recently, `.last_exit` is that agent's exit
    reason, the message names it, and `__cause__` is the exception that stopped it (if any):
    a by-name call after a crash says why the name is gone. Mirrors `{:error, :not_found}`.
    """

    def __init__(self, name: Any = None, *, last_exit: Any = None) -> None:
        self.name = name
        #: The exit reason of the last agent that had this name, when the system still
        #: remembers it (a recently stopped or crashed agent); None otherwise.
        self.last_exit = last_exit
        shown = repr(name)
        if len(shown) > _MAX_SHOWN:
            shown = shown[:_MAX_SHOWN] + "…"
        message = f"no agent named {shown}"
        if last_exit is not None:
            message += f" (the last agent of that name exited: {describe_reason(last_exit)})"
        super().__init__("not_found", message)


class AlreadyStarted(GenAgentError):
    """`start_agent` was given a name that a live agent already holds.

    `.name` is the name; `.agent` the `AgentRef` holding it. Mirrors
    `{:error, {:already_started, pid}}`.
    """

    def __init__(self, name: Any, agent: Any = None) -> None:
        self.name = name
        self.agent = agent
        shown = repr(name)
        if len(shown) > _MAX_SHOWN:
            shown = shown[:_MAX_SHOWN] + "…"
        super().__init__(("already_started", agent), f"an agent named {shown} is already running")


class AgentStartError(GenAgentError):
    """The agent failed to start; nothing is left running or registered.

    `.reason` is one of `("init_agent_failed", r)`, `("backend_start_failed", r)`,
    `("init_failed", kind, "TypeName")` (contract §2.2; docs: the client API reference). Mirrors
    `{:error, reason}` from
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
    stays queued or running (contract §2.1; docs: the client API reference). Mirrors the
    caller-side `exit({:timeout, _})`.
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
    checkpoint function (contract §7.3; docs: the backend guide).
    """

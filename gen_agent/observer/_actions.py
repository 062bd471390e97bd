"""The observer's safe actions: interrupt, halt, resume, stop an agent; restart a child.

Each action names its target by the label the page shows (`collector.label`: `str(name)` for
a str name, else its `repr`, lone surrogates escaped), runs in the observer's worker thread
(never on the web server's event loop) and returns a short content-free result, or raises
`ActionError` with a message for the page.
The web layer checks the token and the confirmation before calling `run_action`.
"""

from __future__ import annotations

from typing import Any, Final

from gen_agent._errors import GenAgentError
from gen_agent._reasons import brief_reason
from gen_agent._system import AgentSystem
from gen_agent.observer._collector import label as _label  # the page's labels, escaped alike

__all__ = ["ACTIONS", "AGENT_ACTIONS", "ActionError", "run_action"]

AGENT_ACTIONS: Final = ("interrupt", "halt", "resume", "stop")
"""Actions on one agent (`{"agent": label}`)."""

ACTIONS: Final = (*AGENT_ACTIONS, "restart_child")
"""Every action; `restart_child` takes `{"supervisor": label, "child": label}`."""


class ActionError(Exception):
    """An action could not run: unknown target, bad request, or the call failed (`.status`
    is the HTTP status the web layer answers with: 400, 404 or 409)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _agent(system: AgentSystem, label: Any) -> Any:
    if not isinstance(label, str):
        raise ActionError("'agent' must be the agent's name as the page shows it")
    for name in system.list_agents():
        if _label(name) == label:
            ref = system.whereis(name)
            if ref is not None:
                return ref
    raise ActionError(f"no running agent {label!r}", 404)


def _supervisor(system: AgentSystem, label: Any) -> Any:
    if not isinstance(label, str):
        raise ActionError("'supervisor' must be the supervisor's name as the page shows it")
    pending = list(system.supervisors())
    while pending:
        supervisor = pending.pop(0)
        if _label(supervisor.name) == label:
            return supervisor
        pending.extend(child.ref for child in supervisor.snapshot().children
                       if child.type == "supervisor" and child.ref is not None)
    raise ActionError(f"no running supervisor {label!r}", 404)


def run_action(system: AgentSystem, action: str, body: dict[str, Any]) -> str:
    """Run one action and return a one-line, content-free result.

    Args:
        system: the observed `AgentSystem`.
        action: one of `ACTIONS`.
        body: the request's JSON object: `{"agent": label}` for `AGENT_ACTIONS`,
            `{"supervisor": label, "child": label}` for `restart_child`.

    Returns:
        e.g. `"interrupt sent to demo-0"`.

    Raises:
        ActionError: unknown action or target (404), or the call failed (409; the message
            names the reason, e.g. `"halt failed: RequestError self_stop"`).

    Semantics: `interrupt`, `halt`, `resume` are `gen_agent.interrupt` / `halt` / `resume`;
    `stop` is `AgentSystem.stop` (a supervised permanent or transient child is then restarted
    by its supervisor, as for any stop); `restart_child` stops the child if it runs
    (`Supervisor.terminate_child`) and starts it again (`Supervisor.restart_child`), counting
    as a manual restart, not against the restart intensity.
    """
    try:
        if action in AGENT_ACTIONS:
            ref = _agent(system, body.get("agent"))
            if action == "stop":
                system.stop_handle(ref._handle)
                return f"stopped {_label(ref.name)}"
            getattr(ref, action)()
            return f"{action} sent to {_label(ref.name)}"
        if action == "restart_child":
            supervisor = _supervisor(system, body.get("supervisor"))
            label = body.get("child")
            child = next((c for c in supervisor.snapshot().children if _label(c.id) == label),
                         None)
            if child is None:
                raise ActionError(f"no child {label!r} under {_label(supervisor.name)}", 404)
            if child.ref is not None:
                supervisor.terminate_child(child.id)
            supervisor.restart_child(child.id)
            return f"restarted {label} under {_label(supervisor.name)}"
    except GenAgentError as exc:
        raise ActionError(f"{action} failed: {type(exc).__name__} "
                          f"{brief_reason(getattr(exc, 'reason', None))}", 409) from None
    raise ActionError(f"unknown action {action!r}; one of: {', '.join(ACTIONS)}", 404)

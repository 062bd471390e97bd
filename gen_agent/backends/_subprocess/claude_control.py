"""The control requests a warm `claude` sends during a turn, and their answers: a tool
permission (`can_use_tool`, decided by the agent's `handle_tool_permission`) and a call of
the agent's Python tools over the in-process MCP server (`mcp_message`); for a turn that was
abandoned, the answer that cancels what is still pending. `process` is the warm process of
`claude_warm` (its `respond`, `respond_error`, `send_control` and `mcp`)."""

from __future__ import annotations

import contextlib
from typing import Any, Final

from gen_agent._event import Event, monotonic_ms
from gen_agent._permission import DENY_FAILED, Allow, Deny, ToolPermissionRequest
from gen_agent.backend import TurnContext
from gen_agent.backends._subprocess.claude_mcp import McpServer
from gen_agent.backends._subprocess.claude_stream import PROVIDER

__all__ = ["answer_control", "cancelled_answer"]

_DETAIL_KEYS: Final = (
    "display_name", "description", "permission_suggestions", "blocked_path",
    "decision_reason", "title", "agent_id",
)  # fmt: skip


def answer_control(process: Any, line: dict[str, Any], context: TurnContext,
                   permission_timeout_ms: int) -> tuple[Event | None, bool]:
    """Answer a control request of the CLI during a turn: (the turn's event, interrupt)."""
    if line.get("type") != "control_request":
        return None, False  # control_cancel_request: we answer synchronously; nothing pending
    request_id = line.get("request_id")
    request = line.get("request")
    if not isinstance(request_id, str) or not isinstance(request, dict):
        return None, False
    if request.get("subtype") == "mcp_message" and process.mcp is not None:
        return _mcp_call(process, process.mcp, request_id, request, context,
                         permission_timeout_ms)
    if request.get("subtype") != "can_use_tool":
        process.respond_error(request_id, f"unsupported control request {request.get('subtype')}")
        return None, False
    tool_name = request.get("tool_name")
    tool_input = request.get("input")
    tool_input = tool_input if isinstance(tool_input, dict) else {}
    tool_use_id = request.get("tool_use_id")
    ask = ToolPermissionRequest(
        backend=PROVIDER,
        tool_name=tool_name if isinstance(tool_name, str) else "",
        input=tool_input,
        tool_use_id=tool_use_id if isinstance(tool_use_id, str) else None,
        details={key: request[key] for key in _DETAIL_KEYS if key in request},
    )
    if context.cancelled:
        decision: Allow | Deny = Deny("the turn was interrupted", interrupt=True)
    elif context.handles_permissions:
        decision = context.request_permission(ask, permission_timeout_ms)
    else:
        decision = DENY_FAILED
    if type(decision) is Allow:
        updated = decision.updated_input if decision.updated_input is not None else tool_input
        answer: dict[str, Any] = {"behavior": "allow", "updatedInput": updated}
        name = "allow"
    else:
        assert type(decision) is Deny
        answer = {"behavior": "deny", "message": decision.message}
        if decision.interrupt:
            answer["interrupt"] = True
        name = "deny"
    with contextlib.suppress(OSError):  # the process is gone: the reader routes EXIT next
        process.respond(request_id, answer)
    data = {"tool_name": ask.tool_name, "tool_use_id": ask.tool_use_id, "decision": name}
    interrupt = type(decision) is Deny and decision.interrupt and not context.cancelled
    return Event("permission", data, monotonic_ms()), interrupt


def _mcp_call(process: Any, mcp: McpServer, request_id: str,
              request: dict[str, Any], context: TurnContext,
              permission_timeout_ms: int) -> tuple[Event | None, bool]:
    """Run one `tools/call` of the agent's Python tools and answer it: (the turn's
    `permission` event when the agent was asked, whether to interrupt the turn)."""
    answer, ask, decision = mcp.call(request.get("message") or {}, context,
                                     permission_timeout_ms=permission_timeout_ms)
    with contextlib.suppress(OSError):  # the process is gone: the reader routes EXIT next
        process.respond(request_id, {"mcp_response": answer})
    if ask is None or decision is None:
        return None, False
    interrupt = type(decision) is Deny and decision.interrupt and not context.cancelled
    if interrupt:
        # A denial that ends the turn: the CLI does not stop for an MCP result by itself.
        with contextlib.suppress(OSError):
            process.send_control({"subtype": "interrupt"})
    data = {"tool_name": ask.tool_name, "tool_use_id": ask.tool_use_id,
            "decision": "allow" if type(decision) is Allow else "deny"}
    return Event("permission", data, monotonic_ms()), interrupt


def cancelled_answer(request: Any) -> dict[str, Any]:
    """The answer to a control request still pending in an abandoned turn: an MCP tool call
    gets an error result ("cancelled"), a permission request a deny that interrupts."""
    mcp = isinstance(request, dict) and request.get("subtype") == "mcp_message"
    message = request.get("message") if mcp else None
    if isinstance(message, dict):
        return {"mcp_response": {
            "jsonrpc": "2.0", "id": message.get("id"),
            "result": {"content": [{"type": "text", "text": "cancelled"}], "isError": True}}}
    return {"behavior": "deny", "interrupt": True, "message": "the turn was interrupted"}

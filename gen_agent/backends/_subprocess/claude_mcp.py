"""The agent's Python tools as an in-process MCP server of a warm `claude` process.

The CLI learns of the server from `--mcp-config '{"mcpServers": {"gen_agent": {"type": "sdk",
"name": "gen_agent"}}}'` and talks to it over the control protocol (facts from
claude-agent-sdk-python's `Query._handle_sdk_mcp_request`, checked on `claude` 2.1.197 and
recorded in `tests/fixtures/claude-cli/warm/mcp.jsonl`):

- the CLI sends `{"type": "control_request", "request_id", "request": {"subtype":
  "mcp_message", "server_name", "message": <JSON-RPC 2.0>}}`; we answer `{"type":
  "control_response", "response": {"subtype": "success", "request_id", "response":
  {"mcp_response": <JSON-RPC 2.0 answer>}}}`;
- at process start (before any turn, and twice: the CLI connects once for the session and
  once for its tool list) it sends `initialize` (answered with protocol version `2024-11-05`,
  capability `tools`), the notification `notifications/initialized` and `tools/list`
  (answered with `{"tools": [{"name", "description", "inputSchema"}]}`);
- a model call of `mcp__<server>__<tool>` becomes `tools/call` with `params: {"name",
  "arguments", "_meta": {"claudecode/toolUseId": <the model's tool-use id>}}`; the answer is
  `{"content": [{"type": "text", "text"}], "isError"?: true}`, which the CLI hands to the
  model as the `tool_result` (and streams as a `user` line);
- the CLI runs an MCP tool only when it is allowed: without an allow rule it asks
  `can_use_tool` (or, without `--permission-prompt-tool`, refuses). The backend therefore
  allows every tool of this server (`--allowedTools mcp__gen_agent__<name>`) and asks the
  agent's `handle_tool_permission` itself at `tools/call`, with the tool's own name, as the
  HTTP backends' tool loops do: one policy for every backend.

`McpServer` answers the session messages on the reader thread (they need no turn);
`McpServer.call` runs one `tools/call` in the turn task, through `gen_agent.tools.run_calls`.

Mirrors: no Elixir original; claude-agent-sdk's SDK MCP servers (`create_sdk_mcp_server`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from gen_agent._permission import Allow, Deny, PermissionDecision, ToolPermissionRequest
from gen_agent._tools import Tool, ToolCall, ToolResult, run_calls
from gen_agent.backend import TurnContext

__all__ = ["MCP_PROTOCOL_VERSION", "SERVER_NAME", "McpServer", "cli_tool_name"]

SERVER_NAME: Final = "gen_agent"
"""The name the agent's tool server has for the CLI (its tools are `mcp__gen_agent__<name>`)."""

MCP_PROTOCOL_VERSION: Final = "2024-11-05"
"""The MCP protocol version the server answers `initialize` with (as claude-agent-sdk does)."""

_METHOD_NOT_FOUND: Final = -32601
_INVALID_PARAMS: Final = -32602


def cli_tool_name(name: str, server: str = SERVER_NAME) -> str:
    """The name the model calls tool `name` of `server` by: `mcp__<server>__<name>`."""
    return f"mcp__{server}__{name}"


class McpServer:
    """The agent's tools, served to one `claude` process over `mcp_message` requests.

    Args:
        tools: the `gen_agent.tools.Tool`s on offer (unique names).
        name: the server's name for the CLI (default `SERVER_NAME`).

    Thread-safety: immutable after construction; `answer` runs on the reader thread, `call`
    in the turn task.
    """

    __slots__ = ("_by_name", "_listing", "name", "tools")

    def __init__(self, tools: Sequence[Tool], name: str = SERVER_NAME) -> None:
        self.name = name
        self.tools = tuple(tools)
        self._by_name = {t.name: t for t in self.tools}
        self._listing = [{"name": t.name, "description": t.description,
                          "inputSchema": t.input_schema} for t in self.tools]

    def config_json(self) -> str:
        """The `--mcp-config` value declaring this server to the CLI (a JSON string)."""
        return msgspec.json.encode(
            {"mcpServers": {self.name: {"type": "sdk", "name": self.name}}}).decode()

    def allowed_tools(self) -> list[str]:
        """The `--allowedTools` entries: every tool of this server (see the module doc)."""
        return [cli_tool_name(t.name, self.name) for t in self.tools]

    @staticmethod
    def is_call(message: Any) -> bool:
        """True for a JSON-RPC `tools/call` request (the one message that needs a turn)."""
        return isinstance(message, dict) and message.get("method") == "tools/call"

    def answer(self, message: Any) -> dict[str, Any]:
        """The JSON-RPC answer to a session message (`initialize`, a notification,
        `tools/list`, `ping`; anything else is error -32601 "method not found"). A
        `tools/call` here (no turn runs) gets an error result."""
        method = message.get("method") if isinstance(message, dict) else None
        request_id = message.get("id") if isinstance(message, dict) else None
        if method == "initialize":
            return _result(request_id, {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": self.name, "version": "1.0.0"},
            })
        if isinstance(method, str) and method.startswith("notifications/"):
            return {"jsonrpc": "2.0", "result": {}}
        if method == "tools/list":
            return _result(request_id, {"tools": self._listing})
        if method == "ping":
            return _result(request_id, {})
        if method == "tools/call":
            return _result(request_id, _content("no turn is running", is_error=True))
        return {"jsonrpc": "2.0", "id": request_id,
                "error": {"code": _METHOD_NOT_FOUND, "message": f"method {method!r} not found"}}

    def call(self, message: dict[str, Any], context: TurnContext, *,
             permission_timeout_ms: int) -> tuple[dict[str, Any], ToolPermissionRequest | None,
                                                  PermissionDecision | None]:
        """Run one `tools/call` in this (turn task) thread.

        The agent's `handle_tool_permission` is asked first when it defines one (a
        `ToolPermissionRequest` with the tool's own name, its arguments, the model's tool-use
        id, and `details` `{"mcp_server", "cli_tool_name"}`); without it the call is allowed.
        The tool then runs through `run_calls`: bounded by its `timeout_s` and the turn's
        cancellation; invalid arguments, a raise, a timeout, a cancellation or a denial is an
        `isError` result (the exception's message is never sent nor logged).

        Returns:
            (the JSON-RPC answer, the permission request or None when none was asked, the
            decision or None).
        """
        request_id = message.get("id")
        params = message.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            return ({"jsonrpc": "2.0", "id": request_id, "error": {
                "code": _INVALID_PARAMS, "message": "tools/call needs params.name"}}, None, None)
        name = params["name"]
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        meta = params.get("_meta")
        tool_use_id = meta.get("claudecode/toolUseId") if isinstance(meta, dict) else None
        tool_use_id = tool_use_id if isinstance(tool_use_id, str) else None
        call = ToolCall(id=tool_use_id or f"mcp_{request_id}", name=name, input=arguments)
        if context.cancelled:
            return _result(request_id, _content("cancelled", is_error=True)), None, None
        ask: ToolPermissionRequest | None = None
        decision: PermissionDecision | None = None
        if name in self._by_name and context.handles_permissions:
            ask = ToolPermissionRequest(
                backend="claude", tool_name=name, input=arguments, tool_use_id=tool_use_id,
                details={"mcp_server": self.name, "cli_tool_name": cli_tool_name(name, self.name)})
            decision = context.request_permission(ask, permission_timeout_ms)
            if type(decision) is Deny:
                return (_result(request_id, _content(decision.message, is_error=True)), ask,
                        decision)
            assert type(decision) is Allow
            if decision.updated_input is not None:
                call = ToolCall(id=call.id, name=name, input=decision.updated_input)
        result: ToolResult = run_calls(self.tools, [call], agent=context.agent,
                                       cancel=context.cancel_event,
                                       journal=getattr(context, "journal", None))[0]
        return _result(request_id, _content(result.content, is_error=result.is_error)), ask, \
            decision


def _result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _content(text: str, *, is_error: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if is_error:
        content["isError"] = True
    return content

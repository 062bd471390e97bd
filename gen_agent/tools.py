"""Tools written as plain Python functions, and other agents offered as tools.

The public namespace of the tool machinery: `tool`, `Tool`, `ToolContext`, `run_calls` and
the records live in `gen_agent._tools` (below the runtime, where the backends' tool loops use
them), `agent_tool` in `gen_agent._agent_tool` (above it: it calls the client API). See
`gen_agent._tools` for how a function becomes a tool.

Mirrors: nothing in the Elixir original; the function tools of pydantic-ai and openai-agents,
and the in-process tools of claude-agent-sdk (`@tool`).
"""

from gen_agent._agent_tool import agent_tool
from gen_agent._tools import (
    AgentCall,
    Tool,
    ToolCall,
    ToolContext,
    ToolInterrupted,
    ToolResult,
    as_tools,
    permission_check,
    run_calls,
    tool,
)

__all__ = [
    "AgentCall",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolInterrupted",
    "ToolResult",
    "agent_tool",
    "as_tools",
    "permission_check",
    "run_calls",
    "tool",
]

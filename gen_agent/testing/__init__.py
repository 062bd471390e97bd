"""Public helpers for testing code built on gen_agent (see `docs/pages/testing.md`).

Import everything from here: the actor helpers (`ScriptedAgent`, `wait_for_state`, leak
checks), the scripted model server (`ScriptedModelServer`, `Reply`, blocks) and its two
wire protocols (Anthropic Messages, OpenAI Responses, with the Codex loopback config). The
pytest fixtures are in `gen_agent.testing.pytest_plugin`, loaded through `pytest11`.
"""

from gen_agent.testing._anthropic_protocol import AnthropicMessagesProtocol
from gen_agent.testing._helpers import (
    LeakReport,
    MockScripts,
    ScriptedAgent,
    child_processes,
    find_leaks,
    is_quiescent,
    wait_for_state,
    wait_until_idle,
)
from gen_agent.testing._model_server import (
    RecordedRequest,
    Reply,
    ScriptedModelServer,
    TextBlock,
    ToolUseBlock,
)
from gen_agent.testing._openai_protocol import (
    OpenAIResponsesProtocol,
    ResponsesReply,
    codex_loopback_config,
    error_body,
    openai_base_url,
    render_response,
    render_stream,
)
from gen_agent.testing._script import Block, ScriptItem

__all__ = [
    "AnthropicMessagesProtocol",
    "Block",
    "LeakReport",
    "MockScripts",
    "OpenAIResponsesProtocol",
    "RecordedRequest",
    "Reply",
    "ResponsesReply",
    "ScriptItem",
    "ScriptedAgent",
    "ScriptedModelServer",
    "TextBlock",
    "ToolUseBlock",
    "child_processes",
    "codex_loopback_config",
    "error_body",
    "find_leaks",
    "is_quiescent",
    "openai_base_url",
    "render_response",
    "render_stream",
    "wait_for_state",
    "wait_until_idle",
]

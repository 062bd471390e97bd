"""The agent's Python tools on the real Claude Code CLI (warm mode), served as the in-process
MCP server `gen_agent` over the control protocol, against a ScriptedModelServer on loopback.

The scripted model calls `mcp__gen_agent__<tool>`; the CLI calls back into the agent
(`mcp_message` / `tools/call`), and the model's next request must carry the tool's output as
the `tool_result`, which the final answer then quotes.

Skipped, with what to install, where the CLI is absent (see test_claude_real_cli.py, whose
fixtures these tests share).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import gen_agent
from gen_agent._permission import Allow, Deny
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.tools import tool

from .test_claude_real_cli import (  # noqa: F401 - fixtures
    TURN_TIMEOUT_S,
    claude_cli,
    cli_options,
)
from .test_claude_warm_real_cli import PermittingAgent, WarmAgent

pytestmark = [pytest.mark.real_cli, pytest.mark.usefixtures("no_child_left")]


@pytest.fixture
def warm_options(request: pytest.FixtureRequest):
    """`cli_options` in warm mode (the default mode, which that module pins to per-turn)."""
    options = request.getfixturevalue("cli_options")
    return lambda **extra: options(**{"mode": "warm", **extra})

STORE = {"plum": "42-violet"}


@tool
def lookup(key: str) -> str:
    """Look up the value stored under a key.

    Args:
        key: the key to look up.
    """
    return STORE[key]


def tool_results(request: Any) -> list[dict[str, Any]]:
    """The tool_result blocks of the last user message of a recorded request."""
    content = request.body["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def quote_the_result(request: Any) -> Reply:
    """The model's second step: answer with what the tool returned (it must be there)."""
    [block] = tool_results(request)
    return Reply.text(f"The value is {result_text(block)}.")


def test_the_cli_calls_a_python_tool_and_the_answer_uses_its_result(
    server: ScriptedModelServer, warm_options
):
    server.enqueue(
        Reply.tool_use("mcp__gen_agent__lookup", {"key": "plum"}, id="toolu_mcp_1",
                       text="Looking it up."),
        quote_the_result,
    )
    gen_agent.start_agent(WarmAgent, name="mcp", backend=ClaudeCLI,
                          backend_opts=warm_options(tools=[lookup]))
    response = gen_agent.ask("mcp", "What is stored under plum?", timeout=TURN_TIMEOUT_S)
    assert response.text.endswith("The value is 42-violet.")
    assert server.failures == []
    # The model was offered the tool with its schema, and got the tool's output back.
    first, second = server.model_requests()
    offered = {t["name"]: t for t in first.body["tools"]}["mcp__gen_agent__lookup"]
    assert offered["input_schema"]["properties"]["key"]["type"] == "string"
    assert offered["input_schema"]["required"] == ["key"]
    [block] = tool_results(second)
    assert block["tool_use_id"] == "toolu_mcp_1"
    assert result_text(block) == "42-violet"
    assert not block.get("is_error")
    # The turn's events show the call and its result as the CLI streamed them.
    kinds = [e.kind for e in response.events]
    assert kinds.index("tool_use") < kinds.index("tool_result")
    use = next(e for e in response.events if e.kind == "tool_use")
    assert (use.data["name"], use.data["id"], use.data["input"]) == (
        "mcp__gen_agent__lookup", "toolu_mcp_1", {"key": "plum"})
    result = next(e for e in response.events if e.kind == "tool_result")
    assert result.data["tool_use_id"] == "toolu_mcp_1"
    assert "42-violet" in str(result.data["content"])
    gen_agent.stop("mcp")


def test_the_permission_callback_decides_each_call_and_a_raise_is_an_error_result(
    server: ScriptedModelServer, warm_options
):
    ran = threading.Event()

    @tool
    def secret(key: str) -> str:
        """Read a secret."""
        ran.set()
        return "never shown"

    server.enqueue(
        Reply.tool_use("mcp__gen_agent__secret", {"key": "k"}, id="toolu_mcp_1"),
        Reply.text("Denied, fine."),
        Reply.tool_use("mcp__gen_agent__lookup", {"key": "no-such-key"}, id="toolu_mcp_2"),
        Reply.text("It failed."),
    )
    seen: list[Any] = []

    def permit(request: Any) -> Any:
        seen.append(request)
        return Deny("secrets stay secret") if request.tool_name == "secret" else Allow()

    gen_agent.start_agent(PermittingAgent, name="mcp-perm", backend=ClaudeCLI,
                          backend_opts=warm_options(tools=[lookup, secret]), permit=permit)
    first = gen_agent.ask("mcp-perm", "Read the secret.", timeout=TURN_TIMEOUT_S)
    second = gen_agent.ask("mcp-perm", "Look up a missing key.", timeout=TURN_TIMEOUT_S)
    assert (first.text, second.text) == ("Denied, fine.", "It failed.")
    assert not ran.is_set()  # denied: the function never ran
    assert [(r.backend, r.tool_name, r.tool_use_id, r.input) for r in seen] == [
        ("claude", "secret", "toolu_mcp_1", {"key": "k"}),
        ("claude", "lookup", "toolu_mcp_2", {"key": "no-such-key"})]
    assert seen[0].details == {"mcp_server": "gen_agent",
                               "cli_tool_name": "mcp__gen_agent__secret"}
    assert [e.data for e in first.events if e.kind == "permission"] == [
        {"tool_name": "secret", "tool_use_id": "toolu_mcp_1", "decision": "deny"}]
    requests = server.model_requests()
    [denied] = tool_results(requests[1])
    assert denied["is_error"] is True and result_text(denied) == "secrets stay secret"
    [raised] = tool_results(requests[3])
    assert raised["is_error"] is True
    assert result_text(raised) == "tool raised KeyError"  # never the exception's message
    gen_agent.stop("mcp-perm")

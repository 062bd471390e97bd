"""The tools recipe: an agent with two Python tools (one reads a file, one needs approval),
its permission policy, on the Anthropic API with an OpenAI fallback.

Offline by default: the official SDKs talk to a `ScriptedModelServer` on 127.0.0.1 whose
script overloads Anthropic (HTTP 529) once, so the turn falls back to OpenAI before any
output, and the OpenAI "model" calls both tools, then answers from their results.

Run it: `python docs/examples/guide/tools_fallback.py` (needs the `anthropic` and `openai`
extras, included in the `test` extra). For the real providers, drop `base_url`/`api_key`
(the SDKs read `ANTHROPIC_API_KEY` / `OPENAI_API_KEY`) and name real models.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent._permission import Allow, Deny
from gen_agent.backends.anthropic import AnthropicAPI
from gen_agent.backends.fallback import Fallback
from gen_agent.backends.openai import OpenAIResponses
from gen_agent.testing._model_server import Reply, ScriptedModelServer, ToolUseBlock
from gen_agent.testing._openai_protocol import openai_base_url
from gen_agent.tools import tool

WORKSPACE = Path(tempfile.mkdtemp(prefix="gen-agent-recipe-"))


# --8<-- [start:recipe]
@tool
def read_file(path: str) -> str:
    """Read a text file of the workspace.

    Args:
        path: the file, relative to the workspace.
    """
    return (WORKSPACE / path).read_text()


@tool
def publish(title: str) -> str:
    """Publish the release notes under `title` (needs approval)."""
    return f"published {title!r}"


class ReleaseAgent(GenAgent):
    """Reads anything; publishes only titles its state approved."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        tools = [read_file, publish]
        hops = [(AnthropicAPI, {**opts["anthropic"], "tools": tools}),
                (OpenAIResponses, {**opts["openai"], "tools": tools, "store": False})]
        return {"hops": hops}, {"approved": set(opts.get("approved", ()))}

    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        if request.tool_name == "publish" and request.input.get("title") not in state["approved"]:
            return Deny("that title is not approved")
        return Allow()

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)
# --8<-- [end:recipe]


def script() -> list[Reply]:
    """Anthropic overloaded once; OpenAI calls both tools, then answers."""
    calls = Reply.message(ToolUseBlock("call_read", "read_file", {"path": "NOTES.md"}),
                          ToolUseBlock("call_pub", "publish", {"title": "v2.0"}),
                          stop_reason="tool_use")

    def answer(request: Any) -> Reply:
        outputs = [item["output"] for item in request.body["input"]
                   if item.get("type") == "function_call_output"]
        return Reply.text(" / ".join(outputs))

    return [Reply.http_error(529), calls, answer]


def main() -> list[str]:
    (WORKSPACE / "NOTES.md").write_text("Faster turns.")
    with ScriptedModelServer(script()) as server, gen_agent.AgentSystem():
        gen_agent.start_agent(
            ReleaseAgent, name="release", backend=Fallback, approved=["v2.0"],
            anthropic={"api_key": "offline", "base_url": server.url, "model": "claude-x"},
            openai={"api_key": "offline", "base_url": openai_base_url(server),
                    "model": "gpt-x"})
        response = gen_agent.ask("release", "Publish the release notes.", timeout=60)
        trail = response.extra["fallback"]
        lines = [
            response.text,
            "fallback: " + " -> ".join(f"{h['provider']}:{h['outcome']}" for h in trail["hops"]),
            "tools: " + ", ".join(e.data["name"] for e in response.events
                                  if e.kind == "tool_use"),
            "permissions: " + ", ".join(e.data["decision"] for e in response.events
                                        if e.kind == "permission"),
            "messages: " + ", ".join(m.role for m in response.messages),
        ]
    for line in lines:
        print(line)
    return lines


if __name__ == "__main__":
    main()

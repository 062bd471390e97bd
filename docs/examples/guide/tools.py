"""Python tools, a permission policy in the agent, and another agent as a tool: tested offline
with MockBackend's scripted tool rounds.

Run it: `python docs/examples/guide/tools.py`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent._permission import Allow, Deny
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.tools import agent_tool, tool

WORKSPACE = Path(tempfile.mkdtemp(prefix="gen-agent-tools-"))


# --8<-- [start:tools]
@tool
def read_file(path: str, max_bytes: int = 2_000) -> str:
    """Read a text file of the workspace.

    Args:
        path: the file, relative to the workspace.
        max_bytes: read at most this many bytes.
    """
    return (WORKSPACE / path).read_text()[:max_bytes]


@tool(timeout_s=5)
def delete_file(path: str) -> str:
    """Delete a file of the workspace (asks for approval first)."""
    (WORKSPACE / path).unlink()
    return f"deleted {path}"
# --8<-- [end:tools]


# --8<-- [start:agent]
class Assistant(GenAgent):
    """Reads freely; deletes only what its state allows."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        backend_opts = {"tools": [read_file, delete_file, agent_tool(
            "reviewer", description="Ask the reviewer for a second opinion.")]}
        return {**backend_opts, **opts.get("backend_opts", {})}, {"deletable": {"tmp.txt"}}

    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        # Runs in the agent thread, with the agent's state; decides, changes nothing.
        if request.tool_name == "delete_file":
            path = request.input.get("path")
            return Allow() if path in state["deletable"] else Deny(f"{path} is protected")
        return Allow()

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)
# --8<-- [end:agent]


class Reviewer(GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": [mock.text_turn("Looks right to me.")]}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)


def main() -> None:
    (WORKSPACE / "notes.txt").write_text("Ship on Friday.")
    (WORKSPACE / "tmp.txt").write_text("scratch")
    # --8<-- [start:offline]
    script = mock.tool_round(
        [("read_file", {"path": "notes.txt"}),
         ("delete_file", {"path": "notes.txt"}),
         ("delete_file", {"path": "tmp.txt"}),
         ("ask_reviewer", {"prompt": "Is Friday fine?"})],
        lambda results: mock.text_turn(" | ".join(r.content for r in results)))
    with gen_agent.AgentSystem():  # every agent stops at the end of the block
        gen_agent.start_agent(Reviewer, name="reviewer", backend=MockBackend)
        gen_agent.start_agent(Assistant, name="assistant", backend=MockBackend,
                              backend_opts={"scripts": [script]})
        response = gen_agent.ask("assistant", "Tidy up the workspace.", timeout=30)
    print(response.text)
    print("tool calls:", [call.data["name"] for call in response.tool_calls])
    print("agent calls:", [(c["agent"], c["outcome"]) for c in response.agent_calls])
    # --8<-- [end:offline]


if __name__ == "__main__":
    main()

"""Tool permissions: the agent decides which tools the Claude Code CLI may run.

A `Gatekeeper` agent allows shell commands that create things (`touch`, `mkdir`) and denies
everything else; the model is told why. (The CLI runs read-only commands such as `echo` without
asking; it asks before anything that writes.) It runs the real `claude` CLI in warm mode against a
`ScriptedModelServer` on 127.0.0.1 that asks for two Bash commands, one allowed and one denied,
so nothing leaves the machine and no API key is needed:

    python docs/examples/guide/tool_permissions.py --cli-path .venv/npm/node_modules/.bin/claude

(`make test` installs that CLI; any `claude` 2.1 works.) Output: each decision the agent took,
and what the model said after each tool result.
"""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent import GenAgent, NoReply
from gen_agent._permission import Allow, Deny, ToolPermissionRequest
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer

PROMPTS = ("Take notes.", "Clean the build folder.")
CREATING = frozenset({"touch", "mkdir"})


# --8<-- [start:agent]
class Gatekeeper(GenAgent):
    """Allows Bash commands that create files or folders, denies every other tool use."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return opts["backend_opts"], {"decisions": []}

    def handle_tool_permission(self, request: ToolPermissionRequest, state: Any) -> Any:
        # Runs in the agent thread while the turn waits; decide, do not change the state.
        command = str(request.input.get("command", ""))
        words = shlex.split(command) or [""]
        if request.tool_name == "Bash" and words[0] in CREATING and "&&" not in words:
            return Allow()
        return Deny(f"{request.tool_name} `{words[0]}` is not allowed; only touch and mkdir")

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)
# --8<-- [end:agent]


def script() -> list[Reply]:
    """What the loopback model does: ask for an allowed command, then a denied one."""
    return [
        Reply.tool_use("Bash", {"command": "touch notes.txt", "description": "notes"}),
        Reply.text("I created notes.txt."),
        Reply.tool_use("Bash", {"command": "rm -rf build", "description": "clean"}),
        Reply.text("I was not allowed to clean up."),
    ]


def run(cli_path: str) -> list[tuple[str, list[str], bool]]:
    """Run both turns; return, per turn, the reply, the decisions its events recorded and
    whether `notes.txt` exists afterwards."""
    with ScriptedModelServer(script()) as server, tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        options = {
            "cli_path": cli_path, "cwd": str(work), "inherit_env": False,
            "model": "claude-sonnet-4-5",
            "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                    "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-dummy",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                    "DISABLE_AUTOUPDATER": "1"},
        }
        gen_agent.start_agent(Gatekeeper, name="gatekeeper", backend=ClaudeCLI,
                              backend_opts=options)
        try:
            outcomes = []
            for prompt in PROMPTS:
                response = gen_agent.ask("gatekeeper", prompt, timeout=120)
                decisions = [f"{e.data['tool_name']}: {e.data['decision']}"
                             for e in response.events if e.kind == "permission"]
                outcomes.append((response.text, decisions, (work / "notes.txt").exists()))
            return outcomes
        finally:
            gen_agent.stop("gatekeeper")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cli-path", default="claude", help="the claude executable")
    args = parser.parse_args(argv)
    for text, decisions, notes in run(args.cli_path):
        print(f"{', '.join(decisions)} -> {text} (notes.txt exists: {notes})")


if __name__ == "__main__":
    main()

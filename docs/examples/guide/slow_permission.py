"""A slow permission decision taken off the agent thread: a human reviews a tool call.

`handle_tool_permission` runs in the agent thread, so a callback that waits (for a person, a
policy service) holds every other message of the agent meanwhile: `status`, `stop` and the
processing of an `interrupt` (the interrupt itself still reaches the waiting turn at once).
This agent never waits there. A tool call it has no verdict for is sent to a reviewer and
denied for now ("sent for review"); the model says so and the turn ends. When the reviewer
answers (from any thread), `gen_agent.send` hands the verdict to `handle_info`, which records
it in the state and prompts the model to go on; the repeated tool call is then decided at
once from the state.

It runs the real `claude` CLI in warm mode against a `ScriptedModelServer` on 127.0.0.1, so
nothing leaves the machine and no API key is needed:

    python docs/examples/guide/slow_permission.py --cli-path .venv/npm/node_modules/.bin/claude
"""

from __future__ import annotations

import argparse
import os
import queue
import tempfile
from pathlib import Path
from typing import Any

import msgspec

import gen_agent
from gen_agent import GenAgent, NoReply, Prompt
from gen_agent._permission import Allow, Deny, ToolPermissionRequest
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.testing._model_server import Reply, ScriptedModelServer


# --8<-- [start:agent]
class Verdict(msgspec.Struct, frozen=True):
    """A reviewer's answer about one command."""

    command: str
    allowed: bool


class Reviewed(GenAgent):
    """Asks a reviewer about every Bash command it has no verdict for, without waiting."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.reviews: queue.Queue[str] = opts["reviews"]  # what the reviewer reads
        self.replies: queue.Queue[str] = opts["replies"]
        return opts["backend_opts"], {"verdicts": {}}

    def handle_tool_permission(self, request: ToolPermissionRequest, state: Any) -> Any:
        # Agent thread: decide from the state at once, never wait here.
        command = str(request.input.get("command", ""))
        verdict = state["verdicts"].get(command)
        if verdict is True:
            return Allow()
        if verdict is False:
            return Deny("the reviewer refused this command")
        self.reviews.put(command)  # the slow part runs elsewhere (a person, a service)
        return Deny("sent to a human reviewer; wait until you are told the verdict")

    def handle_info(self, message: Any, state: Any) -> Any:
        if not isinstance(message, Verdict):
            return NoReply(state)
        verdicts = {**state["verdicts"], message.command: message.allowed}
        word = "approved" if message.allowed else "refused"
        return Prompt(f"The reviewer {word} `{message.command}`. Carry on.",
                      {**state, "verdicts": verdicts})

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.replies.put(response.text)  # every answer, the follow-up's too
        return NoReply(state)
# --8<-- [end:agent]


def script(build: Path) -> list[Reply]:
    """The loopback model: asks to remove the build folder, waits, then asks again."""
    command = f"rm -rf {build}"
    return [
        Reply.tool_use("Bash", {"command": command, "description": "clean"}),
        Reply.text("I asked for approval and will wait for the verdict."),
        Reply.tool_use("Bash", {"command": command, "description": "clean"}),
        Reply.text("The build folder is gone."),
    ]


def run(cli_path: str) -> list[str]:
    """Run the review: the first answer, what the agent did while the review was open, and
    the answer of the follow-up turn; return the lines `main` prints."""
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        (work / "build").mkdir(parents=True)
        with ScriptedModelServer(script(work / "build")) as server:
            options = {
                "cli_path": cli_path, "cwd": str(work), "inherit_env": False,
                "model": "claude-sonnet-4-5",
                "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                        "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-dummy",
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                        "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1"},
            }
            reviews: queue.Queue[str] = queue.Queue()
            replies: queue.Queue[str] = queue.Queue()
            gen_agent.start_agent(Reviewed, name="reviewed", backend=ClaudeCLI,
                                  backend_opts=options, reviews=reviews, replies=replies)
            try:
                return _review(work, reviews, replies)
            finally:
                gen_agent.stop("reviewed")


def _review(work: Path, reviews: queue.Queue[str], replies: queue.Queue[str]) -> list[str]:
    lines = [f"agent: {gen_agent.ask('reviewed', 'Clean the build folder.', timeout=120).text}"]
    replies.get(timeout=120)  # (the same answer, through handle_response)
    command = reviews.get(timeout=120)
    # The review is open and the agent thread is free: it answers at once.
    state = gen_agent.status("reviewed", timeout=5).state
    lines.append(f"reviewer: asked about `{command.replace(str(work), '.')}`; agent {state}")
    gen_agent.send("reviewed", Verdict(command=command, allowed=True))  # any thread, any time
    lines.append(f"agent: {replies.get(timeout=120)}")
    lines.append(f"build folder exists: {(work / 'build').exists()}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cli-path", default="claude", help="the claude executable")
    args = parser.parse_args(argv)
    for line in run(args.cli_path):
        print(line)


if __name__ == "__main__":
    main()

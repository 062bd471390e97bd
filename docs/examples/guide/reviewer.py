"""Testing guide: one agent class, written for the Anthropic API, tested on MockBackend
unchanged (tests/examples/test_guide.py), and run on the Anthropic API.

Run it: `python docs/examples/guide/reviewer.py` (needs the `anthropic` extra). With
`ANTHROPIC_API_KEY` set it asks the real API; without, a `ScriptedModelServer` on 127.0.0.1
stands in for it.
"""

from __future__ import annotations

import os
from typing import Any
from unittest.mock import patch

import msgspec

import gen_agent
from gen_agent import GenAgent, NoReply


# --8<-- [start:agent]
class Verdict(msgspec.Struct):
    approve: bool
    reason: str


def count_lines(text: str) -> int:
    """Count the lines of a text.

    Args:
        text: the text.
    """
    return len(text.splitlines())


class Reviewer(GenAgent):
    """Reviews diffs. Its options are the Anthropic API's: nothing in it knows about tests."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": [count_lines],
                "system": "You review diffs. Call count_lines on a diff before judging it; "
                          "refuse a diff of more than 400 lines."}, {"reviewed": 0}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply({"reviewed": state["reviewed"] + 1})


def review(diff: str, backend: Any) -> Verdict:
    """Start a reviewer on `backend`, ask it for a `Verdict` on `diff`, stop it."""
    with gen_agent.AgentSystem():
        gen_agent.start_agent(Reviewer, name="reviewer", backend=backend)
        response = gen_agent.ask("reviewer", f"Review this diff:\n{diff}", output=Verdict,
                                 timeout=120)
    return response.parsed
# --8<-- [end:agent]


DIFF = "--- a/app.py\n+++ b/app.py\n-print('hi')\n+print('hello')\n"


def main() -> None:
    # --8<-- [start:run]
    from gen_agent.backends.anthropic import AnthropicAPI

    if os.environ.get("ANTHROPIC_API_KEY"):
        print(review(DIFF, AnthropicAPI))  # the real API: the key comes from the environment
        return
    from gen_agent.testing import Reply, ScriptedModelServer

    replies = [Reply.tool_use("count_lines", {"text": DIFF}),
               Reply.text('{"approve": true, "reason": "A one-word change."}')]
    # The SDK reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY: point it at the stand-in.
    with ScriptedModelServer(replies) as server, patch.dict(
            os.environ, ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="offline"):
        print(review(DIFF, AnthropicAPI))      # Verdict(approve=True, reason='A one-word...')
    # --8<-- [end:run]


if __name__ == "__main__":
    main()

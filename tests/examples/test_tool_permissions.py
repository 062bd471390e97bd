"""The tool-permission example (docs/examples/guide/tool_permissions.py) on the real Claude Code CLI
against a loopback ScriptedModelServer. Skipped, saying what to install, without the CLI."""

from __future__ import annotations

import os

import pytest

from ._loader import EXAMPLES, load_example

permissions = load_example("guide/tool_permissions")
_INSTALLED = EXAMPLES.parents[1] / ".venv" / "npm" / "node_modules" / ".bin" / "claude"
CLI = os.environ.get("GEN_AGENT_CLAUDE_CLI") or (str(_INSTALLED) if _INSTALLED.exists() else None)

pytestmark = [
    pytest.mark.real_cli,
    pytest.mark.skipif(CLI is None, reason="the real Claude Code CLI is not installed: needs "
                       "node and npm, then `make test` (or set GEN_AGENT_CLAUDE_CLI)"),
]


def test_the_gatekeeper_allows_touch_and_denies_rm(capsys):
    assert CLI is not None
    permissions.main(["--cli-path", CLI])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "Bash: allow -> I created notes.txt. (notes.txt exists: True)",
        "Bash: deny -> I was not allowed to clean up. (notes.txt exists: True)",
    ]


slow = load_example("guide/slow_permission")


def test_a_slow_review_runs_off_the_agent_thread_and_the_tool_runs_after_it(capsys):
    assert CLI is not None
    slow.main(["--cli-path", CLI])
    assert capsys.readouterr().out.splitlines() == [
        "agent: I asked for approval and will wait for the verdict.",
        "reviewer: asked about `rm -rf ./build`; agent idle",
        "agent: The build folder is gone.",
        "build folder exists: False",
    ]

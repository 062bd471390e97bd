"""The tool journal of a Codex agent with a store: the CLI's own commands, file changes and
MCP calls are journalled from its events as they happen (`started` when the CLI reports the
item started, `finished` with its output when it completed; reported, not guarded), in both
modes: `codex exec --json` (the fake CLI, tests/fakes/codex_fake.py) and `codex app-server`
(the recorded real session replayed by tests/fakes/fake_codex_app.py). A turn stopped while
a command runs leaves that command in doubt in the next start's `InterruptedTurn`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gen_agent
from gen_agent.backends.codex import CodexCLI
from gen_agent.store import SQLiteStore, ToolCallEntry

from .conftest import Agent, FakeCodex, wait_until
from .test_codex_app import replaying

pytestmark = pytest.mark.usefixtures("no_child_left")
KEY = "codex-journal"


class Watching(Agent):
    """Records, at every tool event, what the store's journal holds at that moment (the
    stream callback runs after the journal saw the event)."""

    seen: list[tuple[str, str, list[tuple[str, bool, str | None, bool]]]] = []
    store: Any = None

    def handle_stream_event(self, event: Any, state: Any) -> Any:
        if event.kind in ("codex.tool_started", "tool_use", "tool_result"):
            entries = [(e.call_id, e.finished_at is None, e.result, e.is_error)
                       for e in type(self).store.journal(KEY)]
            type(self).seen.append((event.kind, event.data["id"], entries))
        return state


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = SQLiteStore(tmp_path / "s.db")
    Watching.store, Watching.seen = opened, []
    yield opened
    opened.close()


def test_exec_commands_are_journalled_as_they_start_and_finish(
    fake_codex: FakeCodex, store: Any
) -> None:
    fake_codex.script("rich_turn")
    gen_agent.start_agent(Watching, name="journal-exec", backend=CodexCLI, store=store,
                          session_key=KEY, backend_opts=fake_codex.options())
    response = gen_agent.ask("journal-exec", "do things", timeout=30)
    gen_agent.stop("journal-exec")
    assert response.final_message == "Second message."
    command = ("item_2", False, "hi\n", False)
    change = ("item_4", False, "completed", False)
    assert Watching.seen == [
        # item.started: journalled as started before the CLI reports any output
        ("codex.tool_started", "item_2", [("item_2", True, None, False)]),
        ("tool_use", "item_2", [("item_2", True, None, False)]),
        ("tool_result", "item_2", [command]),
        # a file change reported only once done: started at its tool_use
        ("tool_use", "item_4", [command, ("item_4", True, None, False)]),
        ("tool_result", "item_4", [command, change]),
    ]
    assert store.journal(KEY) == []  # a turn that ended clears its journal


def test_app_server_commands_are_journalled_as_they_start_and_finish(
    tmp_path: Path, store: Any
) -> None:
    options = replaying(tmp_path, "tool_turn_structured.jsonl", model="gpt-test",
                        cwd=str(tmp_path), approval_policy="never")
    gen_agent.start_agent(Watching, name="journal-app", backend=CodexCLI, store=store,
                          session_key=KEY, backend_opts=options)
    gen_agent.ask("journal-app", "run echo, then judge", timeout=30)
    gen_agent.stop("journal-app")
    assert Watching.seen == [
        ("codex.tool_started", "call_1", [("call_1", True, None, False)]),
        ("tool_use", "call_1", [("call_1", True, None, False)]),
        ("tool_result", "call_1", [("call_1", False, "tool-ran\n", False)]),
    ]


def _entry(entry: ToolCallEntry) -> tuple[Any, ...]:
    return (entry.call_id, entry.tool, entry.input, entry.source, entry.result, entry.is_error)


def test_a_turn_stopped_mid_command_leaves_it_in_doubt(
    fake_codex: FakeCodex, store: Any
) -> None:
    fake_codex.script("commands_then_hang")
    gen_agent.start_agent(Agent, name="journal-cut", backend=CodexCLI, store=store,
                          session_key=KEY, shutdown_ms=50, backend_opts=fake_codex.options())
    gen_agent.tell("journal-cut", "clean up")
    assert wait_until(lambda: any(e.call_id == "item_5" for e in store.journal(KEY)), 30)
    gen_agent.stop("journal-cut")  # the CLI is killed inside its last command

    gen_agent.start_agent(Agent, name="journal-next", backend=CodexCLI, store=store,
                          session_key=KEY, backend_opts=fake_codex.options())
    cut = gen_agent.status("journal-next").store.interrupted_turn
    gen_agent.stop("journal-next")
    assert cut is not None and cut.prompt == "clean up"
    assert [_entry(e) for e in cut.finished] == [
        ("item_1", "command_execution", "/bin/bash -lc 'echo tool-ran'", "event",
         "tool-ran\n", False),
        ("item_2", "command_execution", "/bin/bash -lc 'false'", "event", "boom\n", True),
        ("item_3", "file_change", [{"path": "a.txt", "kind": "add"}], "event", "completed",
         False),
        ("item_4", "mcp_tool_call",
         {"server": "docs", "tool": "search", "arguments": {"q": "refund"}}, "event",
         '{"content":[{"type":"text","text":"found"}]}', False),
    ]
    assert [_entry(e) for e in cut.in_doubt] == [
        ("item_5", "command_execution", "/bin/bash -lc 'sleep 30'", "event", None, False)]
    assert all(e.finished_at is not None and e.finished_at >= e.started_at
               for e in cut.finished)

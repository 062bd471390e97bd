"""What the real Codex CLI keeps of a turn cut short, in both modes (`codex exec` per turn,
one `codex app-server`), seen from the loopback model server's next request. The cut turn
runs one command that finishes (`echo`) and one that is still running (it touches a file,
then sleeps) when the turn is cut: the agent's process SIGKILLed with its CLI (the next
start resumes from a `SQLiteStore`, an `InterruptedTurn`), or `gen_agent.interrupt`.

Measured on 0.171.0 (the table in docs/pages/durable-sessions.md): the thread keeps the user
message, the finished call with its output, and the running call with the output "aborted"
(though it ran: the file exists); an app-server interrupt adds "aborted by user" and a
`<turn_aborted>` user message. A CLI upgrade that changes this fails here. The agent asking
for `interrupted_preamble` gets only what the thread lacks (`CodexCLI.keeps_cut_turn`): the
cut command, journalled from the CLI's events (with the finished one: the `InterruptedTurn`
lists both), as in doubt.
Skipped where the CLI is absent (helpers shared with test_codex_real_cli.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import _agents as agents
import pytest
from store.test_claude_crash import _gone
from store.test_crash import Child

import gen_agent
from gen_agent.backends.codex import CodexCLI
from gen_agent.store import OUTCOME_UNKNOWN, MemoryStore, SQLiteStore
from gen_agent.testing._helpers import child_processes
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .conftest import Agent, wait_until
from .test_codex_real_cli import REAL_CODEX, WAIT_S, loopback_options

pytestmark = REAL_CODEX

MODES = ["exec", "app_server"]
PREAMBLE = (
    "[Context: your previous turn was interrupted before it was answered (the process "
    "running it stopped).\nIts request is the unanswered message above.\nA tool call of it "
    "shown above as aborted, or without a result, may have run before the stop: check its "
    "effect before repeating it.]")
TURN_ABORTED = (
    "<turn_aborted>\nThe user interrupted the previous turn on purpose. Any running unified "
    "exec processes may still be running in the background. If any tools/commands were "
    "aborted, they may have partially executed.\n</turn_aborted>")


def _options(server: ScriptedModelServer, tmp_path: Path, mode: str) -> dict[str, Any]:
    # danger-full-access: the loopback script's command writes its marker (no sandbox here)
    options = loopback_options(server, tmp_path, mode=mode, sandbox="danger-full-access")
    if mode == "app_server":
        options["approval_policy"] = "never"
    return options


def _script(server: ScriptedModelServer, marker: Path) -> None:
    """Turn 1 answered; turn 2 runs `echo`, then a command still running when it is cut;
    turn 3 answered."""
    server.enqueue(
        Reply.text("first answer"),
        Reply.tool_use("exec_command", {"cmd": "echo tool-ran"}, id="call_done"),
        Reply.tool_use("exec_command", {"cmd": f"touch {marker} && sleep 30"}, id="call_cut"),
        Reply.text("third answer"))


def _wait_for_the_running_command(server: ScriptedModelServer, marker: Path) -> None:
    server.wait_model_requests(3, timeout=WAIT_S)
    assert wait_until(marker.exists, WAIT_S)  # the second command is running


def _wait_for_the_journal(db: Path) -> None:
    """Until the running command is journalled as started (the CLI reported the item)."""
    store = SQLiteStore(db)
    try:
        assert wait_until(lambda: any(e.finished_at is None for e in store.journal("codex")),
                          WAIT_S), store.journal("codex")
    finally:
        store.close()


def _cut_turn(body: dict[str, Any]) -> list[tuple[str, ...]]:
    """The next request's input items from the cut turn's user message on, in short."""
    items: list[tuple[str, ...]] = []
    for item in body["input"]:
        kind = item.get("type")
        if kind == "message" and item.get("role") == "user":
            items.append(("user", "".join(p.get("text", "") for p in item["content"])))
        elif kind == "function_call":
            items.append(("call", item["call_id"]))
        elif kind == "function_call_output":
            items.append(("output", item["call_id"], str(item["output"])))
    start = items.index(("user", "second question"))
    return items[start:]


def _check_the_finished_call(items: list[tuple[str, ...]]) -> None:
    assert items[1] == ("call", "call_done")
    kind, call_id, output = items[2]
    assert (kind, call_id) == ("output", "call_done")
    assert "Process exited with code 0" in output and "tool-ran" in output
    assert items[3] == ("call", "call_cut")


def _kill_cli_then_host(child: Child) -> None:
    """SIGKILL the CLI's process groups, then the agent's process: a hard crash in which the
    CLI writes nothing more (killing the host first lets an app-server that sees its stdin
    close abort the turn itself, which adds `TURN_ABORTED`, sometimes)."""
    launchers = child_processes(child.proc.pid) or set()
    clis = launchers.union(*(child_processes(pid) or set() for pid in launchers))
    for group in {os.getpgid(pid) for pid in clis if not _gone(pid)}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    child.kill()
    deadline = time.monotonic() + WAIT_S
    while not all(_gone(pid) for pid in clis):
        assert time.monotonic() < deadline, f"CLI processes {clis} outlived the kill"
        time.sleep(0.05)  # bounded poll: an orphan is reaped by init, not by us


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_turn_resumes_with_what_the_thread_kept_and_the_preamble(
    server: ScriptedModelServer, tmp_path: Path, mode: str
) -> None:
    marker = tmp_path / "work" / "cut-command-ran"
    _script(server, marker)
    config = {"db": str(tmp_path / "s.db"), "key": "codex", "backend": "codex",
              "opts": _options(server, tmp_path, mode), "preamble": True}
    first = Child({**config, "prompts": ["first question", "second question"]})
    assert first.line()["resumed"] is False
    assert first.line()["text"] == "first answer"
    _wait_for_the_running_command(server, marker)
    _wait_for_the_journal(tmp_path / "s.db")
    _kill_cli_then_host(first)

    lines = Child({**config, "prompts": ["third question"]}).finish()
    info = next(line["info"] for line in lines if "info" in line)
    assert (info["prompt"], info["phase"]) == ("second question", "turn")
    # The CLI's commands, journalled from its events: the echo finished, the cut one in doubt.
    tool = "command_execution" if mode == "exec" else "commandExecution"
    [done] = info["finished"]
    assert (done["tool"], done["source"], done["is_error"]) == (tool, "event", False)
    assert "echo tool-ran" in done["input"] and done["result"].strip() == "tool-ran"
    [cut] = info["in_doubt"]
    assert (cut["tool"], cut["source"], cut["result"]) == (tool, "event", None)
    assert f"touch {marker} && sleep 30" in cut["input"]
    assert [line["text"] for line in lines if "text" in line] == ["third answer"]
    requests = server.model_requests()
    assert len(requests) == 4  # nothing of the cut turn was asked again
    items = _cut_turn(requests[3].body)
    _check_the_finished_call(items)
    # The running call gets the CLI's stand-in output, though the command ran; the preamble
    # lists it, journalled in doubt, with the "outcome unknown" text.
    listed = (f"{PREAMBLE[:-1]}\nTool calls made in that turn:\n- {tool} "
              f"{json.dumps(cut['input'])} -> {OUTCOME_UNKNOWN}]")
    assert items[4:] == [("output", "call_cut", "aborted"),
                         ("user", f"{listed}\n\nthird question")]
    assert marker.exists()


@pytest.mark.parametrize("mode", MODES)
def test_an_interrupted_turn_is_kept_by_the_thread_without_a_preamble(
    server: ScriptedModelServer, tmp_path: Path, mode: str
) -> None:
    class Told(Agent):
        interrupted_preamble = True  # no effect: an in-process interrupt is §4.13's case

    marker = tmp_path / "work" / "cut-command-ran"
    _script(server, marker)
    name = f"cut-{mode}"
    agent = agents.start(Told, name, backend=CodexCLI, store=MemoryStore(), session_key=name,
                         backend_opts=_options(server, tmp_path, mode))
    assert agent.ask("first question", timeout=WAIT_S).text == "first answer"
    request = gen_agent.tell(name, "second question")
    _wait_for_the_running_command(server, marker)
    gen_agent.interrupt(name)
    assert wait_until(lambda: gen_agent.poll(name, request).status == "failed", WAIT_S)
    assert gen_agent.poll(name, request).reason == "interrupted"
    assert agent.ask("third question", timeout=WAIT_S).text == "third answer"
    gen_agent.stop(name)

    requests = server.model_requests()
    assert len(requests) == 4
    items = _cut_turn(requests[3].body)
    _check_the_finished_call(items)
    if mode == "exec":  # the CLI's process tree is killed: as after a crash
        assert items[4:] == [("output", "call_cut", "aborted"), ("user", "third question")]
    else:  # `turn/interrupt`: the CLI ends the command and marks the turn
        kind, call_id, output = items[4]
        assert (kind, call_id) == ("output", "call_cut")
        assert output.startswith("Wall time: ") and output.endswith("\naborted by user")
        assert items[5:] == [("user", TURN_ABORTED), ("user", "third question")]

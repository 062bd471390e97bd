"""Pre-warm, replacement and spares against the real Claude Code CLI and a loopback
ScriptedModelServer (skipped, with what to install, where the CLI is absent)."""

from __future__ import annotations

import json
import os
import queue
import signal
from pathlib import Path
from typing import Any

import pytest

import gen_agent
from gen_agent.backends import warm
from gen_agent.backends.claude import ClaudeCLI, WarmFleet
from gen_agent.backends.warm import WarmExited
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .test_claude_real_cli import TURN_TIMEOUT_S, claude_cli, cli_options  # noqa: F401
from .test_claude_warm_real_cli import WarmAgent, ask, session_of, warm_options  # noqa: F401

pytestmark = [pytest.mark.real_cli, pytest.mark.usefixtures("no_child_left")]


def test_a_prewarmed_first_turn_and_a_killed_cli_replaced_spawn_nothing(
        server: ScriptedModelServer, warm_options):  # noqa: F811
    server.enqueue(Reply.text("The word is plum."), Reply.text("You asked about plum."))
    infos: queue.Queue[Any] = queue.Queue()
    gen_agent.start_agent(WarmAgent, name="pre", backend=ClaudeCLI,
                          backend_opts=warm_options(prewarm=True), infos=infos)
    assert session_of("pre").wait_warm(TURN_TIMEOUT_S)  # the CLI answered `initialize`
    slot = session_of("pre").warm
    pid = session_of("pre").pid
    assert slot.processes_started == 1 and server.model_requests() == []

    first = ask("pre", "Remember a word.")
    assert first.text == "The word is plum."
    assert (slot.processes_started, session_of("pre").pid) == (1, pid)  # spawned nothing

    os.killpg(pid, signal.SIGKILL)
    exited = infos.get(timeout=TURN_TIMEOUT_S)
    assert isinstance(exited, WarmExited) and exited.pid == pid
    assert session_of("pre").wait_warm(TURN_TIMEOUT_S)  # the replacement, before a turn
    assert slot.processes_started == 2
    replacement = session_of("pre").pid

    second = ask("pre", "Which word?")
    assert second.text == "You asked about plum."
    assert second.session_id == first.session_id  # it resumed the conversation
    assert (slot.processes_started, session_of("pre").pid) == (2, replacement)
    gen_agent.stop("pre")
    assert warm.live_processes() == []


def test_a_spare_serves_a_new_session_and_is_replaced(server: ScriptedModelServer,
                                                      warm_options):  # noqa: F811
    server.enqueue(Reply.text("From the spare."))
    fleet = WarmFleet(1)
    try:
        gen_agent.start_agent(WarmAgent, name="seed", backend=ClaudeCLI,
                              backend_opts=warm_options(fleet=fleet))
        assert fleet.wait_spares(1, TURN_TIMEOUT_S)
        spare_pids = {p.pid for p in warm.live_processes()} - {session_of("seed").pid}
        gen_agent.start_agent(WarmAgent, name="new", backend=ClaudeCLI,
                              backend_opts=warm_options(fleet=fleet))
        assert session_of("new").wait_warm(TURN_TIMEOUT_S)
        assert session_of("new").pid in spare_pids and fleet.used == 1
        assert ask("new", "Hello.").text == "From the spare."
        assert session_of("new").warm.processes_started == 0  # it started none itself
        assert fleet.wait_spares(1, TURN_TIMEOUT_S)  # replaced in the background
        gen_agent.stop("new")
        gen_agent.stop("seed")
    finally:
        fleet.close()
    assert warm.live_processes() == []  # spares included


def _transcript(home: Path, session_id: str) -> list[tuple[Any, ...]]:
    (path,) = home.glob(f".claude/projects/*/{session_id}.jsonl")
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return [(e.get("type"), e.get("operation"), (e.get("attachment") or {}).get("type"))
            for e in entries]


def test_prewarm_context_warms_without_a_model_request_and_changes_no_turn(
        server: ScriptedModelServer, warm_options, tmp_path: Path):  # noqa: F811
    server.enqueue(Reply.text("Plain."), Reply.text("Warmed."))
    gen_agent.start_agent(WarmAgent, name="plain", backend=ClaudeCLI,
                          backend_opts=warm_options(prewarm=True))
    assert session_of("plain").wait_warm(TURN_TIMEOUT_S)
    before = len(server.requests)
    gen_agent.start_agent(WarmAgent, name="ctx", backend=ClaudeCLI,
                          backend_opts=warm_options(prewarm=True, prewarm_context=True))
    assert session_of("ctx").wait_warm(TURN_TIMEOUT_S)  # after get_context_usage's answer
    warm_up = [r.path for r in server.requests[before:] if r.method == "POST"]
    assert warm_up and set(warm_up) == {"/v1/messages/count_tokens"}
    assert server.model_requests() == []  # no model call, no turn

    plain, ctx = ask("plain", "Hello."), ask("ctx", "Hello.")
    assert (plain.text, ctx.text) == ("Plain.", "Warmed.")
    first, warmed = (r.body for r in server.model_requests())
    for key in ("model", "system", "tools", "max_tokens"):
        assert first[key] == warmed[key], key  # the cached schemas are the turn's own
    assert len(first["messages"]) == len(warmed["messages"]) == 1
    home = tmp_path / "home"
    assert _transcript(home, ctx.session_id) == _transcript(home, plain.session_id)
    gen_agent.stop("plain")
    gen_agent.stop("ctx")
    assert warm.live_processes() == []

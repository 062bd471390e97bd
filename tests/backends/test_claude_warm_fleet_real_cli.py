"""Pre-warm, replacement and spares against the real Claude Code CLI and a loopback
ScriptedModelServer (skipped, with what to install, where the CLI is absent)."""

from __future__ import annotations

import os
import queue
import signal
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

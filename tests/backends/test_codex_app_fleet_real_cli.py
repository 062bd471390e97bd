"""Pre-warm, replacement and spares against the real `codex app-server` and a loopback
ScriptedModelServer (skipped, with what to install, where the CLI is absent)."""

from __future__ import annotations

import os
import queue
import signal
from pathlib import Path
from typing import Any

import _agents as agents

import gen_agent
from gen_agent.backends import warm
from gen_agent.backends.codex import CodexCLI, WarmFleet
from gen_agent.backends.warm import WarmExited
from gen_agent.testing._model_server import Reply, ScriptedModelServer

from .test_codex_app_server_real_cli import AppAgent, pid_of
from .test_codex_real_cli import REAL_CODEX, WAIT_S, assistant_texts, loopback_options

pytestmark = REAL_CODEX


def live_pids() -> set[int]:
    return {p.pid for p in warm.live_processes()}


def test_prewarmed_replaced_and_spare_app_servers_spawn_nothing_at_a_turn(
        server: ScriptedModelServer, tmp_path: Path):
    server.enqueue(Reply.text("The word is plum."), Reply.text("You asked about plum."),
                   Reply.text("From the spare."))
    fleet = WarmFleet(1)
    infos: queue.Queue[Any] = queue.Queue()
    options = loopback_options(server, tmp_path, mode="app_server", fleet=fleet)
    try:
        agents.start(AppAgent, "pre", backend=CodexCLI, backend_opts=options, infos=infos)
        session = gen_agent.backend_session("pre", timeout=WAIT_S)
        assert session.wait_warm(WAIT_S) and fleet.wait_spares(1, WAIT_S)
        pid = pid_of("pre")
        before = live_pids()
        assert len(before) == 2 and server.model_requests() == []  # its own and a spare

        first = gen_agent.ask("pre", "Remember a word.", timeout=WAIT_S)
        assert first.text == "The word is plum."
        assert (pid_of("pre"), live_pids()) == (pid, before)  # the turn spawned nothing

        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        exited = infos.get(timeout=WAIT_S)
        while not isinstance(exited, WarmExited):  # e.g. a notification between turns
            exited = infos.get(timeout=WAIT_S)
        assert exited.pid == pid
        assert session.wait_warm(WAIT_S)  # the replacement, resumed, before a turn
        replacement = pid_of("pre")
        assert replacement not in (None, pid)
        after = live_pids()
        second = gen_agent.ask("pre", "Which word?", timeout=WAIT_S)
        assert second.text == "You asked about plum."
        assert second.session_id == first.session_id  # thread/resume
        assert (pid_of("pre"), live_pids()) == (replacement, after)
        assert assistant_texts(server.model_requests()[1].body) == ["The word is plum."]

        spare = next(iter(after - {replacement}))
        agents.start(AppAgent, "new", backend=CodexCLI, backend_opts=options,
                     infos=queue.Queue())
        assert gen_agent.backend_session("new", timeout=WAIT_S).wait_warm(WAIT_S)
        assert pid_of("new") == spare and fleet.used == 1
        third = gen_agent.ask("new", "Hello.", timeout=WAIT_S)
        assert third.text == "From the spare." and pid_of("new") == spare
        assert third.session_id not in (None, first.session_id)  # the spare's own thread
        assert fleet.wait_spares(1, WAIT_S)  # replaced in the background
        gen_agent.stop("new")
        gen_agent.stop("pre")
    finally:
        fleet.close()
    assert warm.live_processes() == []  # spares included

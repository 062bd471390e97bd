"""Pre-warmed Codex app-server sessions, their replacement after a death between turns, and
a `WarmFleet`'s spares, on the scripted fake app-server (tests/fakes/fake_codex_app.py,
which appends one line to calls.jsonl per process it starts and one to requests.jsonl per
request it reads)."""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import TurnError
from gen_agent.backend import BackendError, SessionStartError
from gen_agent.backends import warm
from gen_agent.backends.codex import CodexCLI, CodexSession, WarmFleet
from gen_agent.backends.warm import WarmExited

from .conftest import FAKES, wait_until
from .test_codex_app import Recording

pytestmark = pytest.mark.usefixtures("no_child_left")
WAIT_S = 30.0
THREAD = "01a230b0-eb20-7c52-92d3-a93103f7102f"  # the fake's thread


class FakeApp:
    def __init__(self, root: Path) -> None:
        self.dir = root
        self.cli = root / "codex"
        script = FAKES / "fake_codex_app.py"
        self.cli.write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))}\n')
        self.cli.chmod(0o755)

    def options(self, **extra: Any) -> dict[str, Any]:
        return {"cli_path": str(self.cli), "mode": "app_server", "inherit_env": False,
                "env": {"FAKE_CODEX_DIR": str(self.dir)}, **extra}

    def _read(self, name: str) -> list[dict[str, Any]]:
        path = self.dir / name
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def calls(self) -> list[dict[str, Any]]:
        return self._read("calls.jsonl")

    def requests(self, pid: int) -> list[tuple[str, Any]]:
        """The requests process `pid` read: (method, params)."""
        return [(r["method"], r["params"]) for r in self._read("requests.jsonl")
                if r["pid"] == pid]


@pytest.fixture
def fake(tmp_path: Path) -> FakeApp:
    return FakeApp(tmp_path)


def start(fake: FakeApp, name: str = "c", **backend: Any) -> queue.Queue:
    infos: queue.Queue[Any] = queue.Queue()
    agents.start(Recording, name, backend=CodexCLI, backend_opts=fake.options(**backend),
                 infos=infos)
    return infos


def session(name: str = "c") -> CodexSession:
    return gen_agent.backend_session(name, timeout=WAIT_S)


def ask(prompt: str, name: str = "c") -> Any:
    return gen_agent.ask(name, prompt, timeout=WAIT_S)


def methods(fake: FakeApp, pid: int) -> list[str]:
    return [method for method, _ in fake.requests(pid)]


def test_a_prewarmed_app_servers_first_turn_spawns_nothing(fake: FakeApp):
    began = time.monotonic()
    infos = start(fake, prewarm=True, env={"FAKE_CODEX_DIR": str(fake.dir),
                                           "FAKE_CODEX_LATE_NOTICE": "1"})
    start_s = time.monotonic() - began
    assert session().wait_warm(WAIT_S)
    calls = fake.calls()
    assert len(calls) == 1  # started before any turn
    pid = calls[0]["pid"]
    assert session().pid == pid
    assert methods(fake, pid) == ["initialize", "thread/start"]  # the thread too
    # thread/started arrives while the process is idle, before any turn
    assert wait_until(lambda: (fake.dir / f"notice.{pid}").exists(), WAIT_S)

    answer = ask("hello one")

    assert (answer.text, answer.session_id) == ("ok", THREAD)
    assert len(fake.calls()) == 1 and session().pid == pid
    assert methods(fake, pid) == ["initialize", "thread/start", "turn/start"]
    assert infos.empty()  # the start's own notification (thread/started) is no record
    assert start_s < 5.0  # start_agent never waited for the server (~0.1 s here)
    gen_agent.stop("c")
    assert warm.live_processes() == []


def test_an_early_first_turn_waits_for_the_prewarm_instead_of_starting_another(
        fake: FakeApp):
    start(fake, prewarm=True)
    assert ask("hello early").text == "ok"  # sent at once, no wait
    assert len(fake.calls()) == 1
    gen_agent.stop("c")


def test_a_failed_prewarm_is_the_first_turns_spawn_failure(fake: FakeApp, tmp_path: Path):
    missing = str(tmp_path / "not-yet")
    reasons = []
    for name, prewarm in (("cold", False), ("pre", True)):
        start(fake, name, prewarm=prewarm, cwd=missing)  # starts fine
        with pytest.raises(TurnError) as info:
            ask("hello", name)
        reasons.append(info.value.reason)
        gen_agent.stop(name)
    assert all(isinstance(r, BackendError) for r in reasons)
    assert [r.kind for r in reasons] == ["cwd_not_found", "cwd_not_found"]
    assert reasons[0].message == reasons[1].message
    assert fake.calls() == []


def test_an_app_server_killed_between_turns_is_replaced_at_once_and_resumes(fake: FakeApp):
    infos = start(fake, prewarm=True)
    first = ask("hello first")
    old = session().pid
    assert old is not None
    os.killpg(old, signal.SIGKILL)
    record = infos.get(timeout=WAIT_S)
    assert isinstance(record, WarmExited) and record.pid == old

    assert session().wait_warm(WAIT_S)  # the replacement is up before any turn
    calls = fake.calls()
    assert len(calls) == 2 and session().pid == calls[1]["pid"] != old
    new = calls[1]["pid"]
    assert fake.requests(new) == [("initialize", {"clientInfo": {"name": "gen_agent",
                                                                 "version": "1"}}),
                                  ("thread/resume", {"threadId": first.session_id})]

    second = ask("hello again")
    assert second.session_id == first.session_id
    assert len(fake.calls()) == 2  # the turn spawned nothing
    assert methods(fake, new)[-1] == "turn/start"
    gen_agent.stop("c")


def test_a_reset_closes_the_old_process_before_prewarming_the_new_one(fake: FakeApp):
    start(fake, prewarm=True)
    ask("hello")
    old = session().pid
    gen_agent.reset_session("c")
    assert session().wait_warm(WAIT_S)
    calls = fake.calls()
    assert len(calls) == 2
    assert old not in calls[1]["alive_at_start"]  # never two live processes on one session
    assert methods(fake, calls[1]["pid"]) == ["initialize", "thread/start"]  # a new thread
    ask("hello fresh")
    assert len(fake.calls()) == 2
    gen_agent.stop("c")


def test_a_spare_serves_an_identical_new_session_and_is_replaced(fake: FakeApp):
    fleet = WarmFleet(1)
    try:
        start(fake, "a", fleet=fleet)
        assert session("a").wait_warm(WAIT_S)
        assert fleet.wait_spares(1, WAIT_S)
        assert len(fake.calls()) == 2  # a's own process and one spare
        spare_pid = next(c["pid"] for c in fake.calls() if c["pid"] != session("a").pid)
        assert methods(fake, spare_pid) == ["initialize", "thread/start"]

        start(fake, "b", fleet=fleet)
        assert session("b").wait_warm(WAIT_S)
        assert fleet.used == 1 and session("b").pid == spare_pid
        assert fleet.wait_spares(1, WAIT_S)  # replaced in the background
        assert len(fake.calls()) == 3
        assert ask("hello b", "b").text == "ok"
        assert len(fake.calls()) == 3  # b's first turn ran on the spare
        assert methods(fake, spare_pid) == ["initialize", "thread/start", "turn/start"]

        # Another configuration, and a resumed session: never a spare.
        start(fake, "c", fleet=fleet, model="other")
        start(fake, "d", fleet=fleet, session_id=THREAD)
        assert session("c").wait_warm(WAIT_S) and session("d").wait_warm(WAIT_S)
        assert fleet.used == 1
        assert methods(fake, session("d").pid or 0) == ["initialize", "thread/resume"]
        for name in "abcd":
            gen_agent.stop(name)
    finally:
        fleet.close()
    assert warm.live_processes() == []  # spares included


def test_app_server_spares_count_against_the_live_process_cap(fake: FakeApp):
    fleet = WarmFleet(2)
    before = warm.max_live_processes()
    warm.set_max_live_processes(2)
    try:
        start(fake, "a", fleet=fleet)
        # (Not `wait_warm`: a's own pre-warmed process may be the one the cap closes.)
        assert wait_until(lambda: len(fake.calls()) == 3, WAIT_S)  # a's and two spares
        # The cap closed the least recently used idle one of the three: a spare or a's own
        # process (which of them depends on when each last moved; both are idle).
        assert wait_until(lambda: len(warm.live_processes()) == 2, WAIT_S)
        assert 1 <= fleet.idle() <= 2
        assert ask("still here", "a").text == "ok"  # a starts one if its own was closed
        assert len(warm.live_processes()) <= 2
        gen_agent.stop("a")
    finally:
        warm.set_max_live_processes(before)
        fleet.close()


def test_an_idle_spare_is_closed_by_its_idle_timeout_and_not_replaced(fake: FakeApp):
    fleet = WarmFleet(1)
    try:
        start(fake, "a", fleet=fleet, idle_timeout_ms=300)
        assert wait_until(lambda: len(fake.calls()) == 2, WAIT_S)
        assert wait_until(lambda: fleet.idle() == 0, WAIT_S)  # (a's own closes too)
        assert wait_until(lambda: warm.live_processes() == [], WAIT_S)
        assert len(fake.calls()) == 2 and fleet.started == 1
        gen_agent.stop("a")
    finally:
        fleet.close()


def test_codex_prewarm_options_are_checked():
    with pytest.raises(SessionStartError) as info:
        CodexCLI.start_session({"cli_path": "/bin/sh", "prewarm": "yes"})
    assert info.value.reason == ("invalid_option", "prewarm", "yes")
    for key, value in (("prewarm", True), ("fleet", WarmFleet(1))):
        with pytest.raises(SessionStartError) as info:
            CodexCLI.start_session({"cli_path": "/bin/sh", key: value})  # exec mode
        assert info.value.reason == ("invalid_option", key, value)

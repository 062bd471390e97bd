"""Pre-warmed warm Claude sessions, their replacement after a death between turns, and a
`WarmFleet`'s spares, on the fake streaming-input `claude` (tests/fakes/fake_claude_warm.py,
which appends one line to calls.jsonl per process it starts)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

import gen_agent
from gen_agent import TurnError
from gen_agent.backend import BackendError
from gen_agent.backends import warm
from gen_agent.backends.claude import ClaudeCLI, WarmFleet
from gen_agent.backends.warm import WarmExited

from .conftest import wait_until
from .test_claude_warm import WAIT_S, FakeWarm, ask, session, start

pytestmark = pytest.mark.usefixtures("no_child_left")


@pytest.fixture
def fake(tmp_path: Path) -> FakeWarm:
    return FakeWarm(tmp_path)


def test_a_prewarmed_agents_first_turn_spawns_nothing(fake: FakeWarm):
    began = time.monotonic()
    start(fake, backend={"prewarm": True})
    start_s = time.monotonic() - began
    assert session().wait_warm(WAIT_S)
    assert len(fake.calls()) == 1  # started before any turn
    pid = session().pid

    assert ask("hello one").text == "echo: hello one"

    assert len(fake.calls()) == 1 and session().pid == pid
    assert session().warm.processes_started == 1
    assert start_s < 5.0  # start_agent never waited for the CLI (it takes ~0.1 s here)
    gen_agent.stop("w")
    assert warm.live_processes() == []


def test_an_early_first_turn_waits_for_the_prewarm_instead_of_starting_another(
        fake: FakeWarm):
    start(fake, backend={"prewarm": True})
    assert ask("hello early").text == "echo: hello early"  # sent at once, no wait
    assert len(fake.calls()) == 1
    gen_agent.stop("w")


def test_a_failed_prewarm_is_the_first_turns_spawn_failure(fake: FakeWarm, tmp_path: Path):
    missing = str(tmp_path / "not-yet")
    reasons = []
    for name, prewarm in (("cold", False), ("pre", True)):
        start(fake, name, backend={"prewarm": prewarm, "cwd": missing})  # starts fine
        with pytest.raises(TurnError) as info:
            ask("hello", name)
        reasons.append(info.value.reason)
        gen_agent.stop(name)
    assert all(isinstance(r, BackendError) for r in reasons)
    assert [r.kind for r in reasons] == ["cwd_not_found", "cwd_not_found"]
    assert reasons[0].message == reasons[1].message
    assert fake.calls() == []


def test_a_cli_killed_between_turns_is_replaced_at_once_and_resumes(fake: FakeWarm):
    infos = start(fake, backend={"prewarm": True})
    first = ask("hello first")
    old = session().pid
    assert old is not None
    os.killpg(old, signal.SIGKILL)
    record = infos.get(timeout=WAIT_S)
    assert isinstance(record, WarmExited) and record.pid == old

    assert session().wait_warm(WAIT_S)  # the replacement is up before any turn
    calls = fake.calls()
    assert len(calls) == 2 and session().pid != old
    assert calls[1]["argv"][calls[1]["argv"].index("--resume") + 1] == first.session_id

    second = ask("hello again")
    assert second.session_id == first.session_id
    assert len(fake.calls()) == 2  # the turn spawned nothing
    gen_agent.stop("w")


def test_a_reset_closes_the_old_process_before_prewarming_the_new_one(fake: FakeWarm):
    start(fake, backend={"prewarm": True})
    ask("hello")
    old = session().pid
    gen_agent.reset_session("w")
    assert session().wait_warm(WAIT_S)
    calls = fake.calls()
    assert len(calls) == 2 and "--resume" not in calls[1]["argv"]
    assert old not in calls[1]["alive_at_start"]  # never two live CLIs on one session
    ask("hello fresh")
    assert len(fake.calls()) == 2
    gen_agent.stop("w")


def test_a_spare_serves_an_identical_new_session_and_is_replaced(fake: FakeWarm):
    fleet = WarmFleet(1)
    try:
        start(fake, "a", backend={"fleet": fleet})
        assert session("a").wait_warm(WAIT_S)
        assert fleet.wait_spares(1, WAIT_S)
        assert len(fake.calls()) == 2  # a's own process and one spare
        spare_pid = fake.calls()[1]["pid"]

        start(fake, "b", backend={"fleet": fleet})
        assert session("b").wait_warm(WAIT_S)
        assert fleet.used == 1
        assert fleet.wait_spares(1, WAIT_S)  # replaced in the background
        assert len(fake.calls()) == 3
        assert ask("hello b", "b").text == "echo: hello b"
        assert len(fake.calls()) == 3  # b's first turn ran on the spare
        assert spare_pid in {c["pid"] for c in fake.calls()}

        # Another configuration, and a resumed session: never a spare.
        start(fake, "c", backend={"fleet": fleet, "system_prompt": "other"})
        start(fake, "d", backend={"fleet": fleet, "session_id": "warm-session-0001"})
        assert session("c").wait_warm(WAIT_S) and session("d").wait_warm(WAIT_S)
        assert fleet.used == 1
        for name in "abcd":
            gen_agent.stop(name)
    finally:
        fleet.close()
    assert warm.live_processes() == []  # spares included


def test_spares_count_against_the_live_process_cap(fake: FakeWarm):
    fleet = WarmFleet(2)
    before = warm.max_live_processes()
    warm.set_max_live_processes(2)
    try:
        start(fake, "a", backend={"fleet": fleet})
        assert session("a").wait_warm(WAIT_S)
        assert wait_until(lambda: len(fake.calls()) == 3, WAIT_S)  # a's and two spares
        # The cap closed the least recently used idle one of the three: a spare or a's own
        # process (which of them depends on when each last moved; both are idle).
        assert wait_until(lambda: len(warm.live_processes()) == 2, WAIT_S)
        assert 1 <= fleet.idle() <= 2
        assert ask("still here", "a").text == "echo: still here"  # a respawns if it was closed
        assert len(warm.live_processes()) <= 2  # and the cap still holds
        gen_agent.stop("a")
    finally:
        warm.set_max_live_processes(before)
        fleet.close()


def test_prewarm_options_are_checked():
    from gen_agent.backend import SessionStartError

    with pytest.raises(SessionStartError) as info:
        ClaudeCLI.start_session({"cli_path": "/bin/sh", "prewarm": "yes"})
    assert info.value.reason == ("invalid_option", "prewarm", "yes")
    with pytest.raises(SessionStartError) as info:
        ClaudeCLI.start_session({"cli_path": "/bin/sh", "prewarm": True, "mode": "per_turn"})
    assert info.value.reason == ("invalid_option", "prewarm", True)
    with pytest.raises(ValueError, match="spares"):
        WarmFleet(0)


def _controls(fake: FakeWarm) -> list[tuple[int, str]]:
    path = fake.dir / "controls.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(r["pid"], r["subtype"]) for r in map(json.loads, lines)]


def test_prewarm_context_asks_for_context_usage_before_the_process_is_ready(fake: FakeWarm):
    start(fake, "plain", backend={"prewarm": True})
    start(fake, "ctx", backend={"prewarm": True, "prewarm_context": True})
    assert session("plain").wait_warm(WAIT_S) and session("ctx").wait_warm(WAIT_S)
    plain, ctx = session("plain").pid, session("ctx").pid
    # wait_warm returned only after the warm-up was answered: it is logged already.
    assert [s for p, s in _controls(fake) if p == ctx] == ["initialize", "get_context_usage"]
    assert [s for p, s in _controls(fake) if p == plain] == ["initialize"]  # opt-in

    assert ask("hello ctx", "ctx").text == "echo: hello ctx"
    assert session("ctx").pid == ctx and session("ctx").warm.processes_started == 1
    assert session("ctx").cost_usd == 0.25  # the warm-up is no turn: only the one's cost
    gen_agent.stop("plain")
    gen_agent.stop("ctx")
    assert warm.live_processes() == []


def test_prewarm_context_skips_a_resumed_session_and_warms_spares(fake: FakeWarm):
    fleet = WarmFleet(1)
    try:
        start(fake, "r", backend={"prewarm": True, "prewarm_context": True,
                                  "session_id": "warm-session-0001"})
        start(fake, "a", backend={"fleet": fleet, "prewarm_context": True})
        assert session("r").wait_warm(WAIT_S) and session("a").wait_warm(WAIT_S)
        assert fleet.wait_spares(1, WAIT_S)
        resumed = session("r").pid
        assert [s for p, s in _controls(fake) if p == resumed] == ["initialize"]
        (spare,) = {c["pid"] for c in fake.calls()} - {resumed, session("a").pid}
        assert [s for p, s in _controls(fake) if p == spare] == [
            "initialize", "get_context_usage"]  # offered only once warmed

        # A spare warmed so serves only sessions that ask for it (part of the key).
        start(fake, "b", backend={"fleet": fleet})
        assert session("b").wait_warm(WAIT_S)
        assert fleet.used == 0 and session("b").pid != spare
        start(fake, "c", backend={"fleet": fleet, "prewarm_context": True})
        assert session("c").wait_warm(WAIT_S)
        assert fleet.used == 1 and session("c").pid == spare
        for name in "rabc":
            gen_agent.stop(name)
    finally:
        fleet.close()
    assert warm.live_processes() == []


def test_prewarm_context_needs_a_prewarm():
    from gen_agent.backend import SessionStartError

    with pytest.raises(SessionStartError) as info:
        ClaudeCLI.start_session({"cli_path": "/bin/sh", "prewarm_context": True})
    assert info.value.reason == ("invalid_option", "prewarm_context", True)
    with pytest.raises(SessionStartError) as info:
        ClaudeCLI.start_session({"cli_path": "/bin/sh", "prewarm_context": 1})
    assert info.value.reason == ("invalid_option", "prewarm_context", 1)
    assert ClaudeCLI.start_session({"cli_path": "/bin/sh", "prewarm": True,
                                    "prewarm_context": True}).options.prewarm_context

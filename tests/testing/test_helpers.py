"""Test helpers (gen_agent.testing._helpers): state waits, mock script shortcuts, leak finding."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

import _agents as agents
import pytest

import gen_agent
from gen_agent import AgentNotFound, GenAgent, Halt, NoReply, Prompt
from gen_agent._status import RuntimeSnapshot
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import (
    LeakReport,
    MockScripts,
    ScriptedAgent,
    child_processes,
    find_leaks,
    is_quiescent,
    wait_for_state,
    wait_until_idle,
)

HAS_PROC = Path("/proc/self").is_dir()


def start(name: str = "a", *scripts) -> gen_agent.AgentRef:
    return agents.start(ScriptedAgent, name, scripts)


# ----------------------------------------------------------------------------- waits
@pytest.mark.parametrize("by", ["name", "ref"])
def test_wait_for_state_follows_a_turn_through_processing_to_idle(by):
    gate = mock.gate(mock.text_turn("done"))
    ref = start("a", gate)
    agent = "a" if by == "name" else ref
    gen_agent.tell("a", "work")
    gate.wait_blocked(5)
    busy = wait_for_state(agent, lambda s: s.state == "processing", timeout=5)
    assert busy.current_request is not None
    gate.release()
    idle = wait_for_state(agent, lambda s: s.state == "idle" and s.agent_state == ["done"],
                          timeout=5)
    assert idle.queued == 0


def test_wait_for_state_times_out_and_reports_a_missing_agent():
    start("a")
    with pytest.raises(TimeoutError):
        wait_for_state("a", lambda s: s.halted, timeout=0.1)
    with pytest.raises(AgentNotFound):
        wait_for_state("nobody", lambda s: True, timeout=1)


class Chainer(GenAgent):
    """Chains two follow-up turns after the first response, then halts on "stop"."""

    def init_agent(self, opts):
        return {"scripts": opts["scripts"]}, 0

    def handle_response(self, ref, response, state):
        if response.text == "stop":
            return Halt(state)
        return Prompt("next", state + 1) if state < 2 else NoReply(state + 1)


def test_wait_until_idle_waits_for_queued_and_chained_work():
    gate = mock.gate(mock.text_turn("first"))
    ref = gen_agent.start_agent(Chainer, name="c", backend=MockBackend,
                                scripts=[gate, mock.text_turn("x"), mock.text_turn("y"),
                                         mock.text_turn("queued")])
    gen_agent.tell("c", "go")
    gate.wait_blocked(5)
    gen_agent.tell("c", "later")
    done: queue.Queue[RuntimeSnapshot] = queue.Queue()
    waiter = threading.Thread(target=lambda: done.put(wait_until_idle(ref, timeout=5)))
    waiter.start()
    gate.release()
    waiter.join(5)
    snapshot = done.get(timeout=1)
    assert is_quiescent(snapshot)
    assert MockBackend.history("c") == ["go", "next", "next", "later"]


def test_wait_until_idle_accepts_a_halted_agent():
    gen_agent.start_agent(Chainer, name="h", backend=MockBackend,
                          scripts=[mock.text_turn("stop")])
    gen_agent.tell("h", "go")
    snapshot = wait_until_idle("h", timeout=5)
    assert snapshot.halted and snapshot.phase == "idle"


def test_is_quiescent_needs_every_queue_empty():
    base = dict(phase="idle", halted=False, halt_pending=False, draining=False,
                pending_prompts=0, pending_notifications=0, self_chain_pending=False,
                current_request=None)
    assert is_quiescent(RuntimeSnapshot(**base))
    for change in ({"phase": "processing"}, {"pending_prompts": 1},
                   {"pending_notifications": 2}, {"self_chain_pending": True}):
        assert not is_quiescent(RuntimeSnapshot(**{**base, **change}))


# ----------------------------------------------------------------------------- mock scripts
def test_mock_scripts_shortcuts_build_working_scripts():
    m = MockScripts()
    assert m.backend is MockBackend
    events = m.text("a")
    assert m.options(events, session_id="s") == {"scripts": [events], "session_id": "s"}
    assert m.options() == {"scripts": []}
    opts = m.options(m.text("hi"), m.echo("re:"), m.error("nope"), m.raising("bad"),
                     m.error_turn("late"))
    ref = gen_agent.start_agent(ScriptedAgent, name="m", backend=m.backend, **opts)
    assert ref.ask("one", timeout=5).text == "hi"
    assert ref.ask("two", timeout=5).text == "re:two"
    for expected in ("nope", None, "late"):
        with pytest.raises(gen_agent.TurnError) as info:
            ref.ask("x", timeout=5)
        if expected is not None:
            assert info.value.reason == expected
        else:
            assert info.value.reason[0] == "task_crashed"
    assert m.history("m") == ["one", "two", "x", "x", "x"]
    assert m.history(ref) == m.history("m")


def test_mock_scripts_gate_defaults_to_an_empty_turn():
    m = MockScripts()
    gate = m.gate()
    ref = gen_agent.start_agent(ScriptedAgent, name="g", backend=m.backend,
                                **m.options(gate, session_id="s-1"))
    done: queue.Queue = queue.Queue()
    ref.tell_with_completion("x", done)
    gate.wait_blocked(5)
    gate.release()
    outcome = done.get(timeout=5)[4]
    assert outcome[0] == "ok" and outcome[1].text == ""


# ----------------------------------------------------------------------------- leaks
def test_find_leaks_reports_a_thread_that_does_not_end_and_waits_for_one_that_does():
    release = threading.Event()
    before = set(threading.enumerate())
    stuck = threading.Thread(target=release.wait, args=(10,), name="stuck")
    stuck.start()
    try:
        report = find_leaks(before, None, timeout=0.05)
        assert report.threads == ("stuck",) and report.processes == ()
        assert bool(report) and "threads left behind: ['stuck']" in report.describe()
    finally:
        release.set()
    assert find_leaks(before, None, timeout=5) == LeakReport()
    assert not LeakReport()


@pytest.mark.skipif(not HAS_PROC, reason="child process listing needs /proc")
def test_find_leaks_waits_for_a_thread_listed_before_it_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # threading.enumerate() lists a thread between start() and its first instruction, when
    # join() still raises "cannot join thread before it is started" (seen once in CI).
    release = threading.Event()
    before = set(threading.enumerate())
    late = threading.Thread(target=release.wait, args=(10,), name="late")
    real_join, refusals = threading.Thread.join, []

    def join(self: threading.Thread, timeout: float | None = None) -> None:
        if self is late and len(refusals) < 2:
            refusals.append(timeout)
            raise RuntimeError("cannot join thread before it is started")
        real_join(self, timeout)

    late.start()
    monkeypatch.setattr(threading.Thread, "join", join)
    release.set()
    assert find_leaks(before, None, timeout=5) == LeakReport()
    assert len(refusals) == 2 and not late.is_alive()


def test_child_processes_and_find_leaks_see_a_running_child_until_it_exits():
    before = child_processes()
    assert before is not None
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        assert child.pid in child_processes()
        report = find_leaks(set(threading.enumerate()), before, timeout=0.05)
        assert report.processes == (child.pid,)
        assert f"child processes left behind: [{child.pid}]" in report.describe()
    finally:
        child.stdin.close()
    assert find_leaks(set(threading.enumerate()), before, timeout=10).processes == ()
    child.wait(5)
    assert child.pid not in child_processes()

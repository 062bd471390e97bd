"""Supervision trees (gen_agent._supervisor): child specs, the three strategies, restart
intensity, ordered start / reverse shutdown, nesting, and restarts that resume the session.

Contract §2.2, §2.3, §2.19, §4.19, §9; OTP restart semantics. Every wait is bounded: restarts
are observed through the supervisor's `listener` (a queue of `ChildEvent`s).
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

import gen_agent
from gen_agent import AgentDown, AgentStartError, GenAgent, InitAgentError, NoReply, RequestError
from gen_agent._supervisor import (
    ChildEvent,
    ChildSpec,
    Supervisor,
    SupervisorSpec,
    child_spec,
    should_restart,
    supervisor_spec,
)
from gen_agent.backend import BackendError, SessionStartError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend, text_turn
from gen_agent.testing._helpers import wait_for_state

INTENSITY = ("shutdown", "reached_max_restart_intensity")
CRASH = ("callback_failed", "error", "ValueError")


def reply(prompt: str) -> list[gen_agent.Event]:
    """The mock script of every test worker: "crash" answers the crash marker."""
    return text_turn("crash" if prompt == "crash" else f"ok:{prompt}")


class Worker(GenAgent):
    """Crashes (handle_response raises) on a response "crash"; logs start and stop."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log = opts.get("log")
        if self.log is not None:
            self.log.append(("start", gen_agent.current_name()))
        refuse = opts.get("refuse")
        if refuse is not None and refuse():
            raise InitAgentError("refused")
        backend_opts = {"scripts": opts.get("scripts", [reply] * 20)}
        for key in ("record", "refuse_resume"):
            if key in opts:
                backend_opts[key] = opts[key]
        return backend_opts, {}

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        if response.text == "crash":
            raise ValueError("the marked prompt")
        return NoReply(state)

    def terminate_agent(self, reason: Any, state: Any) -> None:
        if self.log is not None:
            self.log.append(("stop", gen_agent.current_name(), reason))


def spec(name: str, restart: str = "permanent", **opts: Any) -> ChildSpec:
    return child_spec(Worker, name=name, backend=MockBackend, restart=restart, **opts)


def crash(name: str) -> None:
    """Make `name` crash with ("callback_failed", "error", "ValueError")."""
    with pytest.raises(AgentDown) as info:
        gen_agent.ask(name, "crash", timeout=5)
    assert info.value.reason == CRASH


def take(events: queue.Queue[ChildEvent], count: int) -> list[tuple[str, Any]]:
    """The next `count` child events as (kind, id), each waited for at most 5 s."""
    return [(e.kind, e.id) for e in (events.get(timeout=5) for _ in range(count))]


@pytest.fixture
def events() -> queue.Queue[ChildEvent]:
    return queue.Queue()


def started(sup: Supervisor, events: queue.Queue[ChildEvent]) -> Supervisor:
    """Consume the initial "started" events of `sup`'s children."""
    assert take(events, len(sup.which_children())) == [
        ("started", c.id) for c in sup.which_children()
    ]
    return sup


# ----------------------------------------------------------------------------- child specs
def test_child_spec_defaults_follow_the_original():
    s = child_spec(Worker, name="a", backend=MockBackend, watchdog_ms=50, topic="x")
    assert s.id == "a"
    assert s.restart == "temporary"  # the original's only restart type (§9)
    assert s.shutdown_ms == 5_000
    assert s.resume_session is False
    assert s.opts == {"watchdog_ms": 50, "topic": "x"}
    assert child_spec(Worker, name="a", backend=MockBackend, shutdown_ms="infinity").shutdown_ms \
        is None


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"restart": "sometimes"}, ValueError),
    ({"shutdown_ms": -1}, ValueError),
    ({"shutdown_ms": 1.5}, ValueError),
    ({"resume_session": "yes"}, TypeError),
])
def test_child_spec_rejects_invalid_values(kwargs, error):
    with pytest.raises(error):
        child_spec(Worker, name="a", backend=MockBackend, **kwargs)


def test_supervisor_rejects_invalid_arguments():
    with pytest.raises(ValueError, match="strategy"):
        Supervisor([], strategy="one_for_some")
    with pytest.raises(ValueError, match="max_restarts"):
        Supervisor([], max_restarts=-1)
    for bad in (0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"max_seconds must be a finite number > 0 \(sec"):
            Supervisor([], max_seconds=bad)
    with pytest.raises(ValueError, match="duplicate child id"):
        Supervisor([spec("a"), spec("a")])
    with pytest.raises(TypeError, match="child_spec"):
        Supervisor([("a", Worker)])


@pytest.mark.parametrize(("restart", "reason", "expected"), [
    ("permanent", "normal", True),
    ("permanent", "shutdown", True),
    ("permanent", CRASH, True),
    ("transient", "normal", False),
    ("transient", "shutdown", False),
    ("transient", ("shutdown", "registry_lost"), False),
    ("transient", CRASH, True),
    ("transient", "killed", True),
    ("transient", ("pre_run_failed", "no"), True),
    ("temporary", CRASH, False),
    ("temporary", "killed", False),
])
def test_should_restart_follows_otp(restart, reason, expected):
    assert should_restart(restart, reason) is expected


# ----------------------------------------------------------------------------- start / stop
def test_children_start_in_order_and_stop_in_reverse_order():
    log: list[Any] = []
    sup = Supervisor([spec("a", log=log), spec("b", log=log), spec("c", log=log)])
    assert [c.id for c in sup.which_children()] == ["a", "b", "c"]
    assert all(c.ref.is_alive() for c in sup.which_children())
    assert sorted(gen_agent.list_agents()) == ["a", "b", "c"]
    sup.stop(timeout=10)
    assert log == [("start", "a"), ("start", "b"), ("start", "c"),
                   ("stop", "c", "shutdown"), ("stop", "b", "shutdown"), ("stop", "a", "shutdown")]
    assert sup.exit_reason == "shutdown"
    assert sup.wait_stopped(0) is True
    assert gen_agent.list_agents() == []


def test_a_failed_start_stops_the_started_children_and_raises():
    log: list[Any] = []
    with pytest.raises(AgentStartError) as info:
        Supervisor([spec("a", log=log), spec("b", log=log, refuse=lambda: True),
                    spec("c", log=log)])
    assert info.value.reason == ("failed_to_start_child", "b", ("init_agent_failed", "refused"))
    assert log == [("start", "a"), ("start", "b"), ("stop", "a", "shutdown")]
    assert gen_agent.list_agents() == []


class _RaisingInit(gen_agent.GenAgent):
    def init_agent(self, opts: dict) -> Any:
        raise ValueError("the secret config")


def test_a_failed_start_says_where_the_childs_error_is() -> None:
    with pytest.raises(AgentStartError) as info:
        Supervisor([child_spec(_RaisingInit, name="w", backend=MockBackend)])
    assert str(info.value) == (
        "failed_to_start_child: w init_failed error ValueError (raised during the child's "
        "start: the child's error is __cause__, the exception it raised is __cause__.__cause__)")
    assert isinstance(info.value.__cause__, AgentStartError)
    assert str(info.value.__cause__.__cause__) == "the secret config"


def test_a_failed_start_repeats_the_childs_own_detail() -> None:
    with pytest.raises(AgentStartError) as info:
        Supervisor([child_spec(_RaisingInit, name="w", backend=MockBackend, watchdog_ms="x")])
    assert str(info.value) == (
        "failed_to_start_child: w init_failed error ValueError (the child said: init_failed: "
        "watchdog_ms must be a positive int (milliseconds) or 'infinity', got 'x'; its error is "
        "__cause__)")


def test_stopping_with_an_active_ask_fails_it_with_agent_terminated():
    gate = mock.gate(text_turn("late"))
    sup = Supervisor([spec("a", scripts=[gate])])
    outcome: queue.Queue[BaseException] = queue.Queue()

    def ask() -> None:
        try:
            gen_agent.ask("a", "work", timeout=5)
        except BaseException as exc:
            outcome.put(exc)

    caller = threading.Thread(target=ask)
    caller.start()
    gate.wait_blocked(5)
    sup.stop(timeout=10)
    caller.join(5)
    error = outcome.get(timeout=5)
    assert isinstance(error, gen_agent.TurnError)
    assert error.reason == ("agent_terminated", "shutdown")


def test_context_manager_stops_the_tree_and_calls_after_stop_fail():
    reasons: queue.Queue[Any] = queue.Queue()
    with Supervisor([spec("a")], name="tree") as sup:
        sup.on_exit(lambda s, reason: reasons.put((s.name, reason)))
    assert reasons.get(timeout=5) == ("tree", "shutdown")
    assert not sup.is_alive()
    with pytest.raises(RequestError) as info:
        sup.which_children()
    assert info.value.reason == ("supervisor_down", "shutdown")
    late: queue.Queue[Any] = queue.Queue()
    sup.on_exit(lambda s, reason: late.put(reason))  # after the exit: called at once
    assert late.get_nowait() == "shutdown"
    sup.stop()  # idempotent


# ----------------------------------------------------------------------------- strategies
def test_one_for_one_restarts_only_the_crashed_child_as_a_new_incarnation(events):
    sup = started(Supervisor([spec("a"), spec("b"), spec("c")], listener=events.put), events)
    before = {c.id: c.ref for c in sup.which_children()}
    done: queue.Queue[Any] = queue.Queue()
    old_tell = gen_agent.tell_with_completion("b", "first", done)
    assert done.get(timeout=5)[4][0] == "ok"

    crash("b")
    assert take(events, 2) == [("exited", "b"), ("started", "b")]
    after = {c.id: c.ref for c in sup.which_children()}
    assert after["a"] == before["a"] and after["c"] == before["c"]
    assert after["b"] != before["b"]  # a new incarnation: the old ref never matches it
    assert not before["b"].is_alive()
    assert before["b"].exit_reason == CRASH
    assert gen_agent.whereis("b") == after["b"]
    assert gen_agent.poll("b", old_tell).reason == "not_found"  # fresh state
    assert gen_agent.ask("b", "again", timeout=5).text == "ok:again"
    info = {c.id: c for c in sup.which_children()}
    assert info["b"].restarts == 1 and info["b"].last_exit_reason == CRASH
    assert info["a"].restarts == 0
    sup.stop(timeout=10)


def test_one_for_all_restarts_every_child_stopping_the_others_in_reverse(events):
    log: list[Any] = []
    sup = started(Supervisor([spec("a", log=log), spec("b", log=log), spec("c", log=log)],
                             strategy="one_for_all", listener=events.put), events)
    before = {c.id: c.ref for c in sup.which_children()}
    log.clear()
    crash("b")
    assert take(events, 6) == [("exited", "b"), ("exited", "c"), ("exited", "a"),
                               ("started", "a"), ("started", "b"), ("started", "c")]
    assert log == [("stop", "b", CRASH), ("stop", "c", "shutdown"), ("stop", "a", "shutdown"),
                   ("start", "a"), ("start", "b"), ("start", "c")]
    after = {c.id: c.ref for c in sup.which_children()}
    assert all(after[k] != before[k] and after[k].is_alive() for k in "abc")
    sup.stop(timeout=10)


def test_rest_for_one_restarts_the_crashed_child_and_those_after_it(events):
    log: list[Any] = []
    sup = started(Supervisor([spec("a", log=log), spec("b", log=log), spec("c", log=log)],
                             strategy="rest_for_one", listener=events.put), events)
    before = {c.id: c.ref for c in sup.which_children()}
    log.clear()
    crash("b")
    assert take(events, 4) == [("exited", "b"), ("exited", "c"), ("started", "b"),
                               ("started", "c")]
    assert log == [("stop", "b", CRASH), ("stop", "c", "shutdown"), ("start", "b"),
                   ("start", "c")]
    after = {c.id: c.ref for c in sup.which_children()}
    assert after["a"] == before["a"]
    assert after["b"] != before["b"] and after["c"] != before["c"]
    sup.stop(timeout=10)


def test_a_temporary_sibling_stopped_by_one_for_all_is_removed_not_restarted(events):
    sup = started(Supervisor([spec("a", restart="temporary"), spec("b")],
                             strategy="one_for_all", listener=events.put), events)
    crash("b")
    assert take(events, 3) == [("exited", "b"), ("exited", "a"), ("started", "b")]
    assert [c.id for c in sup.which_children()] == ["b"]
    assert gen_agent.whereis("a") is None
    sup.stop(timeout=10)


def test_restart_types_decide_what_comes_back(events):
    sup = started(Supervisor([spec("perm"), spec("trans", restart="transient"),
                              spec("temp", restart="temporary")], listener=events.put), events)
    crash("temp")
    assert take(events, 1) == [("exited", "temp")]
    assert [c.id for c in sup.which_children()] == ["perm", "trans"]  # temporary: removed

    crash("trans")
    assert take(events, 2) == [("exited", "trans"), ("started", "trans")]
    gen_agent.drain("trans", timeout=5)  # exits "normal": a transient child stays down
    assert take(events, 1) == [("exited", "trans")]
    trans = next(c for c in sup.which_children() if c.id == "trans")
    assert trans.ref is None and trans.last_exit_reason == "normal"

    gen_agent.drain("perm", timeout=5)  # a permanent child comes back even after "normal"
    assert take(events, 2) == [("exited", "perm"), ("started", "perm")]
    sup.stop(timeout=10)


# ----------------------------------------------------------------------------- intensity
def test_exceeding_the_restart_intensity_stops_the_supervisor_and_every_child(events):
    log: list[Any] = []
    sup = started(Supervisor([spec("a", log=log), spec("b", log=log)], max_restarts=2,
                             max_seconds=60, listener=events.put), events)
    exits: queue.Queue[Any] = queue.Queue()
    sup.on_exit(lambda s, reason: exits.put(reason))
    for _ in range(2):  # two restarts are within the limit
        crash("a")
        assert take(events, 2) == [("exited", "a"), ("started", "a")]
    assert sup.is_alive()
    log.clear()
    crash("a")  # the third restart in the window is one too many
    assert take(events, 2) == [("exited", "a"), ("exited", "b")]
    assert sup.wait_stopped(10)
    assert sup.exit_reason == INTENSITY
    assert exits.get(timeout=5) == INTENSITY
    assert log == [("stop", "a", CRASH), ("stop", "b", "shutdown")]
    assert gen_agent.list_agents() == []
    with pytest.raises(RequestError) as info:
        sup.start_child(spec("c"))
    assert info.value.reason == ("supervisor_down", INTENSITY)


def test_max_restarts_zero_gives_up_on_the_first_crash(events):
    sup = started(Supervisor([spec("a")], max_restarts=0, listener=events.put), events)
    crash("a")
    assert sup.wait_stopped(10)
    assert sup.exit_reason == INTENSITY


@pytest.mark.slow
def test_restarts_older_than_max_seconds_no_longer_count(events):
    # Wall clock by nature: the intensity window is real time (0.2 s here).
    sup = started(Supervisor([spec("a")], max_restarts=1, max_seconds=0.2,
                             listener=events.put), events)
    crash("a")
    assert take(events, 2) == [("exited", "a"), ("started", "a")]
    threading.Event().wait(0.3)  # let the first restart leave the window
    crash("a")
    assert take(events, 2) == [("exited", "a"), ("started", "a")]
    assert sup.is_alive()
    sup.stop(timeout=10)


def test_failed_restarts_are_retried_and_count_toward_the_intensity(events):
    starts = itertools.count()
    attempts: list[int] = []

    def refuse() -> bool:
        attempts.append(1)
        return next(starts) >= 1  # only the first incarnation starts

    sup = started(Supervisor([spec("a", refuse=refuse)], max_restarts=3, max_seconds=60,
                             listener=events.put), events)
    crash("a")
    assert sup.wait_stopped(10)
    assert sup.exit_reason == INTENSITY
    # the exit and two retries are charged and their attempts fail; the third retry is over
    assert len(attempts) == 1 + 3
    assert gen_agent.list_agents() == []


# ----------------------------------------------------------------------------- nesting
def test_nested_supervisor_restarts_its_own_children_and_escalates(events):
    inner = supervisor_spec([spec("x"), spec("y")], name="inner", max_restarts=0)
    assert isinstance(inner, SupervisorSpec) and inner.restart == "permanent"
    log: list[Any] = []
    sup = started(Supervisor([inner, spec("z", log=log)], listener=events.put), events)
    children = {c.id: c for c in sup.which_children()}
    assert children["inner"].type == "supervisor"
    nested = children["inner"].ref
    assert isinstance(nested, Supervisor) and nested.is_alive()
    assert [c.id for c in nested.which_children()] == ["x", "y"]
    x_before = nested.whereis("x")
    z_before = sup.whereis("z")

    crash("x")  # the inner supervisor gives up at once, the outer one restarts it
    assert take(events, 2) == [("exited", "inner"), ("started", "inner")]
    assert nested.exit_reason == INTENSITY
    renewed = sup.whereis("inner")
    assert renewed is not nested and renewed.is_alive()
    assert renewed.whereis("x") != x_before and renewed.whereis("x").is_alive()
    assert sup.whereis("z") == z_before  # one_for_one at the top

    log.clear()
    sup.stop(timeout=10)
    assert log == [("stop", "z", "shutdown")]
    assert not renewed.is_alive()
    assert gen_agent.list_agents() == []


# ----------------------------------------------------------------------------- dynamic children
def test_start_terminate_restart_and_delete_child(events):
    sup = Supervisor([spec("a")], listener=events.put)
    take(events, 1)
    ref = sup.start_child(spec("b"))
    assert take(events, 1) == [("started", "b")]
    assert ref.ask("hi", timeout=5).text == "ok:hi"
    assert [c.id for c in sup.which_children()] == ["a", "b"]
    with pytest.raises(ValueError, match="already exists"):
        sup.start_child(spec("b"))

    with pytest.raises(RequestError) as info:
        sup.delete_child("b")
    assert info.value.reason == "running"
    sup.terminate_child("b")  # permanent, yet not restarted: terminated on request
    assert take(events, 1) == [("exited", "b")]
    assert not ref.is_alive() and ref.exit_reason == "shutdown"
    assert sup.whereis("b") is None
    renewed = sup.restart_child("b")
    assert take(events, 1) == [("started", "b")]
    assert renewed != ref and renewed.is_alive()
    with pytest.raises(RequestError) as info:
        sup.restart_child("b")
    assert info.value.reason == "running"
    sup.terminate_child("b")
    sup.delete_child("b")
    assert [c.id for c in sup.which_children()] == ["a"]
    with pytest.raises(RequestError) as info:
        sup.terminate_child("nope")
    assert info.value.reason == "not_found"
    sup.stop(timeout=10)


def test_terminate_child_with_drain_lets_the_active_turn_finish(events):
    gate = mock.gate(text_turn("finished"))
    sup = Supervisor([spec("a", scripts=[gate])], listener=events.put)
    take(events, 1)
    done: queue.Queue[Any] = queue.Queue()
    gen_agent.tell_with_completion("a", "work", done)
    gate.wait_blocked(5)
    stopper = threading.Thread(target=sup.terminate_child, args=("a",),
                               kwargs={"drain": True, "timeout": 5})
    stopper.start()
    wait_for_state("a", lambda s: s.draining, timeout=5)
    gate.release()
    stopper.join(5)
    assert not stopper.is_alive()
    completion = done.get(timeout=5)
    assert completion[4][0] == "ok" and completion[4][1].text == "finished"
    assert take(events, 1) == [("exited", "a")]
    (child,) = sup.which_children()
    assert child.ref is None and child.last_exit_reason == "normal"
    assert events.empty()  # not restarted
    sup.stop(timeout=10)


# ----------------------------------------------------------------------------- session resume
class ResumableMock(MockBackend):
    """MockBackend plus `resume_session`, recording each resumed id in the `record` option."""

    @classmethod
    def start_session(cls, opts: Any) -> mock.MockSession:
        return super().start_session(_mock_options(opts))

    @classmethod
    def resume_session(cls, session_id: str, opts: Any) -> mock.MockSession:
        opts["record"].append(session_id)
        if opts.get("refuse_resume"):
            raise SessionStartError("expired")
        return MockBackend.start_session({**_mock_options(opts), "session_id": session_id})


def _mock_options(opts: Any) -> dict[str, Any]:
    return {k: v for k, v in opts.items() if k in mock.OPTIONS}


def resumable(prompt: str) -> list[gen_agent.Event]:
    if prompt == "crash":
        return text_turn("crash")
    return text_turn(f"ok:{prompt}", session_id="s-42")


def resume_spec(record: list[str], *, resume: bool = True, **opts: Any) -> ChildSpec:
    return child_spec(Worker, name="a", backend=ResumableMock, restart="permanent",
                      resume_session=resume, record=record,
                      scripts=opts.pop("scripts", [resumable] * 10), **opts)


def test_a_restarted_child_resumes_the_session_it_last_saw(events):
    record: list[str] = []
    sup = started(Supervisor([resume_spec(record)], listener=events.put), events)
    assert gen_agent.ask("a", "remember 42", timeout=5).session_id == "s-42"
    crash("a")
    assert take(events, 2) == [("exited", "a"), ("started", "a")]
    assert record == ["s-42"]
    assert gen_agent.backend_session("a").session_id == "s-42"
    # A resumed incarnation that crashes before any new id resumes the same conversation.
    crash("a")
    assert take(events, 2) == [("exited", "a"), ("started", "a")]
    assert record == ["s-42", "s-42"]
    assert gen_agent.ask("a", "what was it?", timeout=5).text == "ok:what was it?"
    sup.stop(timeout=10)


def test_resume_is_opt_in_and_needs_a_session_id(events):
    record: list[str] = []
    sup = started(Supervisor([resume_spec(record, resume=False)], listener=events.put), events)
    gen_agent.ask("a", "remember", timeout=5)
    crash("a")
    assert take(events, 2) == [("exited", "a"), ("started", "a")]
    assert record == []  # resume_session=False: a fresh session
    assert gen_agent.backend_session("a").session_id is None
    sup.stop(timeout=10)

    record.clear()
    fresh: queue.Queue[ChildEvent] = queue.Queue()
    sup = started(Supervisor([resume_spec(record)], listener=fresh.put), fresh)
    crash("a")  # no session id seen yet: nothing to resume
    assert take(fresh, 2) == [("exited", "a"), ("started", "a")]
    assert record == []
    sup.stop(timeout=10)


def test_a_session_that_cannot_be_resumed_is_replaced_by_a_fresh_one(events):
    record: list[str] = []
    sup = started(Supervisor([resume_spec(record, refuse_resume=True)], listener=events.put),
                  events)
    gen_agent.ask("a", "remember", timeout=5)
    crash("a")
    assert take(events, 2) == [("exited", "a"), ("started", "a")]
    assert record == ["s-42"]  # tried once, refused, then started afresh
    assert gen_agent.backend_session("a").session_id is None
    (child,) = sup.which_children()
    assert child.ref.is_alive() and child.restarts == 1
    sup.stop(timeout=10)


def resumable_until_gone(prompt: str) -> list[gen_agent.Event]:
    if prompt == "still there?":  # the provider no longer has the session
        reason = BackendError.new("mock", "session_not_found", None, message="no such session")
        return [gen_agent.Event.new("error", {"reason": reason})]
    return resumable(prompt)


def test_a_forgotten_session_is_not_resumed_by_the_next_restart(events):
    record: list[str] = []
    spec = resume_spec(record, scripts=[resumable_until_gone] * 10)
    sup = started(Supervisor([spec], listener=events.put), events)
    assert gen_agent.ask("a", "remember 42", timeout=5).session_id == "s-42"
    crash("a")
    assert take(events, 2) == [("exited", "a"), ("started", "a")]
    assert record == ["s-42"]

    # The resumed session turns out not to exist: the agent forgets it ...
    with pytest.raises(gen_agent.TurnError) as info:
        gen_agent.ask("a", "still there?", timeout=5)
    assert info.value.reason.kind == "session_not_found"
    assert sup.whereis("a")._handle.session_id is None
    # ... and so does the supervisor: the next restart starts a fresh session.
    crash("a")
    assert take(events, 2) == [("exited", "a"), ("started", "a")]
    assert record == ["s-42"]
    assert gen_agent.backend_session("a").session_id is None
    assert gen_agent.ask("a", "hello", timeout=5).text == "ok:hello"
    sup.stop(timeout=10)


# ----------------------------------------------------------------------------- real Claude CLI
ROOT = Path(__file__).resolve().parents[1]
INSTALLED_CLI = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"


def _claude_cli() -> str | None:
    explicit = os.environ.get("GEN_AGENT_CLAUDE_CLI")
    if explicit:
        return explicit
    return str(INSTALLED_CLI) if INSTALLED_CLI.exists() else None


class ClaudeWorker(GenAgent):
    """Crashes when the model's reply carries the marker."""

    marker: ClassVar[str] = "CRASH-MARKER"

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["cli"]), {}

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        if self.marker in response.text:
            raise ValueError("marked reply")
        return NoReply(state)


@pytest.mark.real_cli
def test_a_crashed_claude_cli_agent_resumes_its_conversation(events, tmp_path):
    cli = _claude_cli()
    if cli is None:
        missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
        why = f"{' and '.join(missing)} not found; " if missing else ""
        pytest.skip(f"the real Claude Code CLI is not installed ({why}`make test` installs "
                    "@anthropic-ai/claude-code into .venv/npm when node and npm are present; or "
                    "set GEN_AGENT_CLAUDE_CLI to a `claude` executable)")
    from gen_agent.backends.claude import ClaudeCLI
    from gen_agent.testing._model_server import Reply, ScriptedModelServer

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with ScriptedModelServer([Reply.text("Noted the code word. CRASH-MARKER"),
                              Reply.text("The code word was 4711.")]) as server:
        options = {
            "cli_path": cli, "cwd": str(work), "inherit_env": False, "model": "claude-sonnet-4-5",
            "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                    "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                    "DISABLE_AUTOUPDATER": "1"},
        }
        sup = started(Supervisor([child_spec(ClaudeWorker, name="claude", backend=ClaudeCLI,
                                             restart="transient", resume_session=True,
                                             cli=options)], listener=events.put), events)
        first = sup.whereis("claude")
        with pytest.raises(AgentDown):
            first.ask("The code word is 4711. Acknowledge it.", timeout=90)
        assert take(events, 2) == [("exited", "claude"), ("started", "claude")]
        session_id = first._handle.session_id
        assert session_id
        assert gen_agent.backend_session("claude").session_id == session_id

        answer = gen_agent.ask("claude", "What was the code word?", timeout=90)
        assert answer.text == "The code word was 4711."
        assert answer.session_id == session_id
        resumed = server.model_requests()[-1].body["messages"]
        texts = [block.get("text", "") if isinstance(block, dict) else block
                 for message in resumed for block in (
                     message["content"] if isinstance(message["content"], list)
                     else [message["content"]])]
        assert any("The code word is 4711." in text for text in texts)  # the old conversation
        assert any("CRASH-MARKER" in text for text in texts)
        sup.stop(timeout=30)


# ----------------------------------------------------------------------------- introspection


def test_snapshot_reports_children_restarts_and_intensity_left(
        agent_system: gen_agent.AgentSystem) -> None:
    with Supervisor([spec("a"), supervisor_spec([spec("inner")], name="nested")],
                    name="top", max_restarts=2, max_seconds=60) as sup:
        snap = sup.snapshot()
        assert (snap.name, snap.strategy, snap.alive, snap.max_restarts) == (
            "top", "one_for_one", True, 2)
        assert (snap.restarts_in_window, snap.intensity_left) == (0, 2)
        assert [(c.id, c.type, c.restarts) for c in snap.children] == [
            ("a", "worker", 0), ("nested", "supervisor", 0)]
        assert isinstance(snap.children[1].ref, Supervisor)
        crash("a")
        sup.which_children()  # answered after the restart
        snap = sup.snapshot()
        assert (snap.restarts_in_window, snap.intensity_left) == (1, 1)
        assert snap.children[0].restarts == 1 and snap.children[0].last_exit_reason == CRASH
        assert agent_system.supervisors() == [sup]  # top-level only
    assert agent_system.supervisors() == []
    assert sup.snapshot().alive is False

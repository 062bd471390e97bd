"""The checkpoint protocol (contract §7.3) and session threading (§7.2, §4.7, §4.13).

A tiny backend written here runs one "step" per turn inside `prompt`, in the turn task; a
step may call `context.checkpoint(id)`, block until cancelled, crash, or return events. Its
session is immutable (each change makes a new one), so which session the agent keeps after
each kind of outcome is observable.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import CheckpointError, DispatchError, Event, NoReply, TurnError

T = 5.0  # seconds: the bound of every wait in this file
NAME = "checkpointer"


class Session:
    """An immutable backend session: the turn count, the applied id and the applied ids.

    `plan` (the steps still to run) and `log` (what the backend saw) are shared by all the
    sessions derived from one start.
    """

    __slots__ = ("applied", "count", "log", "plan", "session_id")

    def __init__(self, count: int, session_id: str | None, applied: tuple[str, ...],
                 plan: deque[Any], log: list[Any]) -> None:
        self.count = count
        self.session_id = session_id
        self.applied = applied
        self.plan = plan
        self.log = log

    def but(self, **changes: Any) -> Session:
        fields = {"count": self.count, "session_id": self.session_id,
                  "applied": self.applied, "plan": self.plan, "log": self.log, **changes}
        return Session(**fields)


def result(text: str = "done") -> list[Event]:
    return [Event.new("text", {"text": text}), Event.new("result", {"text": text})]


class NoCheckpointBackend:
    """Runs `plan` steps: `step(context)` returns the events, or raises."""

    @staticmethod
    def start_session(opts: dict[str, Any]) -> Session:
        return Session(0, None, (), deque(opts["plan"]), opts["log"])

    @staticmethod
    def prompt(session: Session, prompt: str, context: Any) -> tuple[Any, Session]:
        session.log.append(("prompt", session.count))
        step = session.plan.popleft()
        after = session.but(count=session.count + 1)
        return step(context), after

    @staticmethod
    def terminate_session(session: Session) -> None:
        session.log.append(("terminate", session.count, session.session_id))


class CheckpointBackend(NoCheckpointBackend):
    @staticmethod
    def checkpoint_session(session: Session, session_id: str) -> Session:
        session.log.append(("checkpoint", session_id, session.count))
        return session.but(session_id=session_id, applied=(*session.applied, session_id))


class Checkpointer(gen_agent.GenAgent):
    """Logs the reasons handle_error gets."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.errors: list[Any] = opts.get("errors", [])
        return {"plan": opts["plan"], "log": opts["log"]}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.errors.append(reason)
        return NoReply(state)


def start(plan: list[Any], log: list[Any] | None = None, *, backend: Any = CheckpointBackend,
          **opts: Any) -> list[Any]:
    log = [] if log is None else log
    agents.start(Checkpointer, NAME, backend=backend, plan=plan, log=log, **opts)
    return log


def session() -> Session:
    return gen_agent.backend_session(NAME)


def try_checkpoint(context: Any, session_id: Any, results: list[Any]) -> None:
    """Call the checkpoint function and record "ok" or the rejection reason."""
    try:
        context.checkpoint(session_id)
        results.append("ok")
    except CheckpointError as exc:
        results.append(exc.reason)


def checkpoints_then_succeed(ids: list[Any], results: list[Any]) -> Any:
    def step(context: Any) -> list[Event]:
        for session_id in ids:
            try_checkpoint(context, session_id, results)
        return result()

    return step


# ---------------------------------------------------------------------- acceptance
def test_an_accepted_checkpoint_is_applied_at_once_and_reapplied_at_the_end() -> None:
    applied, go = threading.Event(), threading.Event()
    results: list[Any] = []

    def step(context: Any) -> list[Event]:
        try_checkpoint(context, "sid-1", results)
        applied.set()
        go.wait(T)
        return result()

    log = start([step])
    inbox: queue.Queue[Any] = queue.Queue()
    gen_agent.tell_with_completion(NAME, "p", inbox)
    assert applied.wait(T)
    during = session()
    assert (during.count, during.session_id, during.applied) == (0, "sid-1", ("sid-1",))
    go.set()
    assert inbox.get(timeout=T)[4][0] == "ok"
    after = session()
    # the session returned by prompt (count 1, no id) with the accepted id re-applied
    assert (after.count, after.session_id, after.applied) == (1, "sid-1", ("sid-1",))
    assert results == ["ok"]
    assert log == [("prompt", 0), ("checkpoint", "sid-1", 0), ("checkpoint", "sid-1", 1)]


def test_checkpoints_do_not_count_against_the_capture_limits() -> None:
    results: list[Any] = []
    start([checkpoints_then_succeed(["one"], results)], event_retention="lossless",
          max_events_per_turn=2)
    assert gen_agent.ask(NAME, "p", timeout=T).text == "done"
    assert results == ["ok"]


# ---------------------------------------------------------------------- validation order
@pytest.mark.parametrize(("backend", "ids", "expected"), [
    (NoCheckpointBackend, ["valid-id"], ["unsupported_checkpoint"]),
    (NoCheckpointBackend, [""], ["unsupported_checkpoint"]),  # unsupported before invalid
    (CheckpointBackend, [""], ["invalid_session_id"]),
    (CheckpointBackend, ["a\x00b"], ["invalid_session_id"]),
    (CheckpointBackend, ["tab\there"], ["invalid_session_id"]),
    (CheckpointBackend, ["x\x1f"], ["invalid_session_id"]),
    (CheckpointBackend, ["del\x7f"], ["invalid_session_id"]),
    (CheckpointBackend, ["x" * 1025], ["invalid_session_id"]),
    (CheckpointBackend, ["é" * 513], ["invalid_session_id"]),  # 1026 UTF-8 bytes
    (CheckpointBackend, [42], ["invalid_session_id"]),
    (CheckpointBackend, [None], ["invalid_session_id"]),
    (CheckpointBackend, ["same", "same"], ["ok", "ok"]),
    (CheckpointBackend, ["first", "second"], ["ok", "conflicting_session_id"]),
    # the first recorded error is the turn's reason
    (CheckpointBackend, ["a", "", "b"], ["ok", "invalid_session_id",
                                         "conflicting_session_id"]),
])
def test_checkpoint_validation_order(backend: Any, ids: list[Any],
                                     expected: list[Any]) -> None:
    results: list[Any] = []
    errors: list[Any] = []
    start([checkpoints_then_succeed(ids, results)], backend=backend, errors=errors)
    recorded = [r for r in expected if r != "ok"]
    if recorded:
        # a recorded rejection fails the turn although the stream ended with a result
        with pytest.raises(TurnError) as info:
            gen_agent.ask(NAME, "p", timeout=T)
        assert info.value.reason == recorded[0]
        assert errors == [recorded[0]]
    else:
        assert gen_agent.ask(NAME, "p", timeout=T).text == "done"
    assert results == expected


@pytest.mark.parametrize("session_id", ["x" * 1024, "é" * 512, "ünïcode-ok", "a"])
def test_valid_session_ids_are_accepted(session_id: str) -> None:
    results: list[Any] = []
    start([checkpoints_then_succeed([session_id], results)])
    gen_agent.ask(NAME, "p", timeout=T)
    assert results == ["ok"]
    assert session().session_id == session_id


# ---------------------------------------------------------------------- precedence
def test_a_recorded_error_beats_a_success_and_the_returned_session_is_not_adopted() -> None:
    results: list[Any] = []
    start([checkpoints_then_succeed(["good", "bad\x00"], results)])
    with pytest.raises(TurnError) as info:
        gen_agent.ask(NAME, "p", timeout=T)
    assert info.value.reason == "invalid_session_id"
    after = session()
    assert (after.count, after.session_id) == (0, "good")


def _record_then(outcome: str) -> Any:
    def step(context: Any) -> Any:
        try_checkpoint(context, "", [])
        if outcome == "terminal_error":
            return [Event.new("error", {"reason": "backend failed"})]
        if outcome == "crash":
            raise RuntimeError("crashed after the rejection")
        raise DispatchError("could not dispatch")

    return step


@pytest.mark.parametrize("outcome", ["terminal_error", "crash", "dispatch_error"])
def test_a_recorded_error_beats_a_terminal_error_a_crash_and_a_dispatch_error(
        outcome: str) -> None:
    errors: list[Any] = []
    start([_record_then(outcome)], errors=errors)
    with pytest.raises(TurnError) as info:
        gen_agent.ask(NAME, "p", timeout=T)
    assert info.value.reason == "invalid_session_id"
    assert errors == ["invalid_session_id"]


def _record_then_block(ready: threading.Event) -> Any:
    def step(context: Any) -> list[Event]:
        try_checkpoint(context, "", [])
        ready.set()
        context.wait_cancelled(T)
        return result()

    return step


def test_interrupt_beats_a_recorded_error() -> None:
    ready = threading.Event()
    start([_record_then_block(ready)])
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(gen_agent.ask, NAME, "p", timeout=T)
        assert ready.wait(T)
        gen_agent.interrupt(NAME)
        with pytest.raises(TurnError) as info:
            future.result(T)
    assert info.value.reason == "interrupted"


def test_the_watchdog_beats_a_recorded_error() -> None:
    ready = threading.Event()
    start([_record_then_block(ready)], watchdog_ms=50)
    with pytest.raises(TurnError) as info:
        gen_agent.ask(NAME, "p", timeout=T)
    assert info.value.reason == "timeout"


# ---------------------------------------------------------------------- survival
def _accept_then(outcome: str, ready: threading.Event) -> Any:
    def step(context: Any) -> Any:
        try_checkpoint(context, "kept", [])
        ready.set()
        if outcome in ("interrupt", "timeout"):
            context.wait_cancelled(T)
            return result()
        if outcome == "crash":
            raise RuntimeError("crash after the checkpoint")
        if outcome == "dispatch_error":
            raise DispatchError("refused after the checkpoint")
        return [Event.new("error", {"reason": "stream failed"})]

    return step


@pytest.mark.parametrize(("outcome", "reason", "count"), [
    ("interrupt", "interrupted", 0),
    ("timeout", "timeout", 0),
    ("crash", "task_crashed", 0),
    ("dispatch_error", "refused after the checkpoint", 0),
    ("terminal_error", "stream failed", 1),
])
def test_an_accepted_id_survives_every_failure(outcome: str, reason: str, count: int) -> None:
    ready = threading.Event()
    opts = {"watchdog_ms": 50} if outcome == "timeout" else {}
    start([_accept_then(outcome, ready)], **opts)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(gen_agent.ask, NAME, "p", timeout=T)
        assert ready.wait(T)
        if outcome == "interrupt":
            gen_agent.interrupt(NAME)
        with pytest.raises(TurnError) as info:
            future.result(T)
    got = info.value.reason
    assert (got[0] if isinstance(got, tuple) else got) == reason
    after = session()
    assert (after.count, after.session_id) == (count, "kept")


# ---------------------------------------------------------------------- not_current
def test_a_checkpoint_from_another_thread_is_not_current_and_not_recorded() -> None:
    results: list[Any] = []

    def step(context: Any) -> list[Event]:
        helper = threading.Thread(target=try_checkpoint, args=(context, "from-helper", results))
        helper.start()
        helper.join(T)
        return result()

    start([step])
    assert gen_agent.ask(NAME, "p", timeout=T).text == "done"
    assert results == ["not_current"]
    assert session().session_id is None


def test_a_checkpoint_function_of_an_old_turn_is_not_current() -> None:
    saved: list[Any] = []
    results: list[Any] = []

    def first(context: Any) -> list[Event]:
        saved.append(context)
        return result("first")

    def second(context: Any) -> list[Event]:
        try_checkpoint(saved[0], "stale", results)
        return result("second")

    start([first, second])
    gen_agent.ask(NAME, "one", timeout=T)
    assert gen_agent.ask(NAME, "two", timeout=T).text == "second"
    try_checkpoint(saved[0], "from the test thread", results)
    assert results == ["not_current", "not_current"]
    assert session().session_id is None


# ---------------------------------------------------------------------- §7.2 threading
def test_session_threading_counts_turns_and_terminate_sees_the_last_session() -> None:
    log = start([lambda context: result("one"), lambda context: result("two")],
                backend=NoCheckpointBackend)
    gen_agent.ask(NAME, "one", timeout=T)
    gen_agent.ask(NAME, "two", timeout=T)
    gen_agent.stop(NAME)
    assert log == [("prompt", 0), ("prompt", 1), ("terminate", 2, None)]


def test_session_threading_after_failures() -> None:
    def crash(context: Any) -> Any:
        raise RuntimeError("crash")

    def refuse(context: Any) -> Any:
        raise DispatchError("refused")

    log = start([lambda c: [Event.new("error", {"reason": "x"})], crash, refuse,
                 lambda c: result("ok")], backend=NoCheckpointBackend)
    for prompt in ("stream error keeps the returned session", "crash keeps the old one",
                   "dispatch error keeps the old one"):
        with pytest.raises(TurnError):
            gen_agent.ask(NAME, prompt, timeout=T)
    gen_agent.ask(NAME, "ok", timeout=T)
    gen_agent.stop(NAME)
    assert log == [("prompt", 0), ("prompt", 1), ("prompt", 1), ("prompt", 1),
                   ("terminate", 2, None)]

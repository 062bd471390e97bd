"""External halt and resume (§2.13, §2.14, §4.11, §4.12), drain (§2.18, §4.15),
reset_session (§2.15) and runtime_snapshot (§2.17)."""

from __future__ import annotations

import functools
import queue
import threading
from concurrent.futures import Future
from typing import Any

import _agents as agents
import msgspec
import pytest

import gen_agent
from gen_agent import (
    CurrentTurn,
    NoReply,
    Prompt,
    RequestError,
    RuntimeSnapshot,
    TurnError,
)
from gen_agent._errors import AgentNotFound, CallTimeout
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import (
    HALTED,
    INPUT_REJECTED,
    TERMINATED,
    TURN_REJECTED,
    TURN_START,
    TelemetryRecorder,
)

T = 5.0  # seconds: the bound of every wait in this file
NAME = "halting"


def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
    """Run `fn` in a fresh thread; its outcome lands in the returned future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


class Halting(gen_agent.GenAgent):
    """State is the tuple of handled notifications. Logs every callback into `log`.

    `chain` prompts are returned from handle_response one by one; `crash_response` makes
    handle_response raise.
    """

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.log: list[Any] = opts.get("log", [])
        self.chain = list(opts.get("chain", []))
        self.crash_response = opts.get("crash_response", False)
        return {"scripts": opts["scripts"]}, opts.get("state", ())

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.log.append(("handle_response", response.text))
        if self.crash_response:
            raise ValueError("handle_response failed")
        if self.chain:
            return Prompt(self.chain.pop(0), state)
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append(("handle_error", reason))
        return NoReply(state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        self.log.append("post_turn")
        return state

    def handle_event(self, event: Any, state: Any) -> Any:
        self.log.append(("handle_event", event))
        return NoReply((*state, event))

    def post_run(self, state: Any) -> None:
        self.log.append(("post_run", state))

    def terminate_agent(self, reason: Any, state: Any) -> None:
        self.log.append(("terminate_agent", reason))


start = functools.partial(agents.start, Halting, NAME)


def busy(*later: Any, **opts: Any) -> Any:
    """Start the agent with a turn blocked in a gate; return the gate."""
    gate = mock.gate(mock.text_turn("first"))
    start([gate, *later], **opts)
    gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    return gate


def drain_admitted() -> Future[Any]:
    """Start `drain` in a thread and return once the agent admitted it.

    A tell queued just before is refused with "draining" when the drain is admitted.
    """
    marker: queue.Queue[Any] = queue.Queue()
    ref = gen_agent.tell_with_completion(NAME, "marker", marker)
    drained = in_thread(gen_agent.drain, NAME, timeout=T)
    assert marker.get(timeout=T) == ("gen_agent", "completion", NAME, ref,
                                     ("error", "draining"))
    return drained


def post_runs(log: list[Any]) -> list[Any]:
    return [entry for entry in log if isinstance(entry, tuple) and entry[0] == "post_run"]


# ---------------------------------------------------------------------- halt / resume
def test_external_halt_when_idle_halts_now_and_freezes_dispatch() -> None:
    log: list[Any] = []
    with TelemetryRecorder([HALTED]) as rec:
        start([mock.text_turn("after resume")], log=log)
        gen_agent.halt(NAME)
        status = gen_agent.status(NAME)
        assert (status.halted, status.halt_pending, status.state) == (True, False, "idle")
        assert post_runs(log) == [("post_run", ())]
        assert rec.named(HALTED)[0].metadata["agent_state"] == ()
        inbox: queue.Queue[Any] = queue.Queue()
        ref = gen_agent.tell_with_completion(NAME, "queued while halted", inbox)
        assert gen_agent.status(NAME).queued == 1
        assert MockBackend.history(NAME) == []
        gen_agent.halt(NAME)  # idempotent: no second post_run
        gen_agent.status(NAME)
        assert len(post_runs(log)) == 1
    gen_agent.resume(NAME)
    assert inbox.get(timeout=T)[3:] == (ref, ("ok", gen_agent.poll(NAME, ref).response))
    assert MockBackend.history(NAME) == ["queued while halted"]
    assert gen_agent.status(NAME).halted is False


def test_a_halted_agent_still_handles_notifications_without_rerunning_post_run() -> None:
    log: list[Any] = []
    start([], log=log)
    gen_agent.halt(NAME)
    gen_agent.notify_ack(NAME, "while halted", timeout=T)
    status = gen_agent.status(NAME)
    assert (status.halted, status.agent_state) == (True, ("while halted",))
    assert len(post_runs(log)) == 1


def test_post_run_runs_again_after_resume_and_a_new_halt() -> None:
    log: list[Any] = []
    start([], log=log)
    gen_agent.halt(NAME)
    gen_agent.resume(NAME)
    gen_agent.halt(NAME)
    gen_agent.status(NAME)
    assert len(post_runs(log)) == 2


def test_external_halt_when_busy_is_pending_until_the_turn_finished() -> None:
    log: list[Any] = []
    gate = busy(mock.text_turn("queued"), log=log)
    gen_agent.tell(NAME, "queued")
    gen_agent.halt(NAME)
    gen_agent.notify(NAME, "buffered")
    status = gen_agent.status(NAME)
    assert (status.halted, status.halt_pending) == (False, True)
    assert gen_agent.runtime_snapshot(NAME).halt_pending is True
    with TelemetryRecorder([HALTED]) as rec:
        gate.release()
        record = rec.wait_for(HALTED, T)
    assert record.metadata["agent_state"] == ("buffered",)
    assert log == [("handle_response", "first"), "post_turn", ("handle_event", "buffered"),
                   ("post_run", ("buffered",))]
    status = gen_agent.status(NAME)
    assert (status.halted, status.halt_pending, status.queued) == (True, False, 1)
    assert MockBackend.history(NAME) == ["busy"]


def test_resume_while_busy_cancels_the_pending_halt() -> None:
    log: list[Any] = []
    gate = busy(mock.text_turn("queued"), log=log)
    gen_agent.halt(NAME)
    gen_agent.resume(NAME)
    assert gen_agent.status(NAME).halt_pending is False
    inbox: queue.Queue[Any] = queue.Queue()
    gen_agent.tell_with_completion(NAME, "queued", inbox)
    gate.release()
    assert inbox.get(timeout=T)[4][1].text == "queued"
    assert gen_agent.status(NAME).halted is False
    assert post_runs(log) == []


# ---------------------------------------------------------------------- drain
def test_drain_from_idle_stops_the_agent_normally() -> None:
    log: list[Any] = []
    with TelemetryRecorder([TERMINATED]) as rec:
        agent = start([], log=log)
        session = gen_agent.backend_session(NAME)
        assert gen_agent.drain(NAME, timeout=T) is None
    assert not agent.is_alive()
    assert agent.exit_reason == "normal"
    assert gen_agent.whereis(NAME) is None
    assert log == [("terminate_agent", "normal")]
    assert session.terminated is True
    assert [r.metadata["reason"] for r in rec.named(TERMINATED)] == ["normal"]


def test_drain_from_busy_rejects_queued_work_and_finishes_the_active_turn() -> None:
    log: list[Any] = []
    active_box: queue.Queue[Any] = queue.Queue()
    queued_box: queue.Queue[Any] = queue.Queue()
    gate = mock.gate(mock.text_turn("first"))
    with TelemetryRecorder() as rec:
        agent = start([gate, mock.text_turn("never")], log=log, chain=["discarded follow-up"])
        active = gen_agent.tell_with_completion(NAME, "busy", active_box)
        gate.wait_blocked(T)
        queued = gen_agent.tell_with_completion(NAME, "queued", queued_box)
        asked = in_thread(gen_agent.ask, NAME, "queued ask", timeout=T)
        rec.wait_for(lambda r: r.event_name == ("gen_agent", "mailbox", "queued")
                     and r.measurements["depth"] == 2, T)
        gen_agent.notify(NAME, "buffered, then discarded")
        drained = in_thread(gen_agent.drain, NAME, timeout=T)
        assert queued_box.get(timeout=T) == ("gen_agent", "completion", NAME, queued,
                                             ("error", "draining"))
        with pytest.raises(TurnError) as info:
            asked.result(T)
        assert info.value.reason == "draining"
        status = gen_agent.status(NAME)
        assert (status.draining, status.queued) == (True, 0)
        assert gen_agent.runtime_snapshot(NAME).pending_notifications == 0
        assert not drained.done()
        gate.release()
        assert drained.result(T) is None
    message = active_box.get(timeout=T)
    assert (message[3], message[4][0]) == (active, "ok")
    assert agent.exit_reason == "normal"
    assert [r.metadata["reason_kind"] for r in rec.named(TURN_REJECTED)] \
        == ["draining", "draining"]
    assert [r.metadata["origin"] for r in rec.named(TURN_START)] == ["tell"]
    assert log == [("handle_response", "first"), "post_turn", ("terminate_agent", "normal")]


def test_drain_of_a_halted_agent_discards_its_pending_self_chain() -> None:
    log: list[Any] = []
    gate = mock.gate(mock.text_turn("first"))
    agent = start([gate, mock.text_turn("never")], log=log, chain=["follow-up"])
    gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    with TelemetryRecorder([HALTED]) as rec:
        gen_agent.halt(NAME)
        gate.release()
        rec.wait_for(HALTED, T)
    assert gen_agent.runtime_snapshot(NAME).self_chain_pending is True
    gen_agent.drain(NAME, timeout=T)
    assert agent.exit_reason == "normal"
    assert log[-1] == ("terminate_agent", "normal")
    assert ("handle_response", "never") not in log


def test_calls_while_draining_get_draining() -> None:
    gate = busy()
    with TelemetryRecorder([INPUT_REJECTED]) as rec:
        drained = drain_admitted()
        for call in (lambda: gen_agent.ask(NAME, "a", timeout=T),
                     lambda: gen_agent.tell(NAME, "t"),
                     lambda: gen_agent.tell_with_completion(NAME, "c", queue.Queue()),
                     lambda: gen_agent.notify_ack(NAME, "n", timeout=T)):
            with pytest.raises(TurnError) as info:
                call()
            assert info.value.reason == "draining"
        with pytest.raises(RequestError) as reset:
            gen_agent.reset_session(NAME, timeout=T)
        assert reset.value.reason == "draining"
        gen_agent.notify(NAME, "plain notify")
        gen_agent.halt(NAME)  # ignored while draining
        status = gen_agent.status(NAME)
        assert (status.draining, status.halt_pending, status.halted) == (True, False, False)
        second = in_thread(gen_agent.drain, NAME, timeout=T)
        gate.release()
        assert drained.result(T) is None
        assert second.result(T) is None
    assert "draining" in [r.metadata["reason"] for r in rec.named(INPUT_REJECTED)]


def test_every_input_refused_while_draining_emits_input_rejected() -> None:
    gate = busy()
    drained = drain_admitted()
    with TelemetryRecorder([INPUT_REJECTED]) as rec:
        for call in (lambda: gen_agent.ask(NAME, "a", timeout=T),
                     lambda: gen_agent.tell(NAME, "t"),
                     lambda: gen_agent.tell_with_completion(NAME, "c", queue.Queue()),
                     lambda: gen_agent.notify_ack(NAME, "n", timeout=T)):
            with pytest.raises(TurnError):
                call()
        gen_agent.notify(NAME, "plain notify")
        gen_agent.status(NAME)
        gate.release()
        reasons = [r.metadata["reason"] for r in rec.named(INPUT_REJECTED)]
    assert drained.result(T) is None
    assert reasons == ["draining"] * 5


def test_drain_timeout_raises_and_the_drain_goes_on() -> None:
    gate = busy()
    agent = gen_agent.whereis(NAME)
    with pytest.raises(CallTimeout):
        gen_agent.drain(NAME, timeout=0.05)
    assert gen_agent.status(NAME).draining is True
    gate.release()
    assert agent.wait_stopped(T)
    assert agent.exit_reason == "normal"


def test_drain_reports_another_exit_reason_as_agent_down() -> None:
    gate = busy(crash_response=True)
    drained = drain_admitted()
    gate.release()
    with pytest.raises(RequestError) as info:
        drained.result(T)
    assert info.value.reason == ("agent_down", ("callback_failed", "error", "ValueError"))


def test_drain_of_a_missing_agent_raises_not_found() -> None:
    with pytest.raises(AgentNotFound):
        gen_agent.drain("nobody", timeout=T)


# ---------------------------------------------------------------------- reset_session
class NoResetBackend:
    """A backend without `reset_session`."""

    start_session = MockBackend.start_session
    prompt = MockBackend.prompt
    terminate_session = MockBackend.terminate_session


class RaisingResetBackend(MockBackend):
    @classmethod
    def reset_session(cls, session: Any) -> Any:
        raise RuntimeError("secret reset failure")


def test_reset_session_when_idle_replaces_the_session_and_keeps_state_and_queue() -> None:
    start([mock.text_turn("one", session_id="s-1")], state=("kept",))
    gen_agent.ask(NAME, "p", timeout=T)
    session = gen_agent.backend_session(NAME)
    assert session.session_id == "s-1"
    gen_agent.halt(NAME)
    gen_agent.tell(NAME, "queued")
    assert gen_agent.reset_session(NAME, timeout=T) is None
    assert (session.session_id, session.resets) == (None, 1)
    status = gen_agent.status(NAME)
    assert (status.agent_state, status.queued, status.halted) == (("kept",), 1, True)


def test_reset_session_when_busy_is_refused() -> None:
    busy()
    with pytest.raises(RequestError) as info:
        gen_agent.reset_session(NAME, timeout=T)
    assert info.value.reason == "busy"


@pytest.mark.parametrize(("backend", "opts", "reason"), [
    (NoResetBackend, {}, "unsupported"),
    (MockBackend, {"reset_error": "refused"}, "refused"),
    (RaisingResetBackend, {}, ("backend_reset_failed", "RuntimeError")),
])
def test_reset_session_errors(backend: Any, opts: dict[str, Any], reason: Any) -> None:
    class Agent(Halting):
        def init_agent(self, o: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            return {"scripts": [], **opts}, ()

    gen_agent.start_agent(Agent, name=NAME, backend=backend)
    with pytest.raises(RequestError) as info:
        gen_agent.reset_session(NAME, timeout=T)
    assert info.value.reason == reason
    assert gen_agent.backend_session(NAME).resets == 0


def test_reset_session_of_a_missing_agent_raises_not_found() -> None:
    with pytest.raises(AgentNotFound):
        gen_agent.reset_session("nobody", timeout=T)


# ---------------------------------------------------------------------- runtime_snapshot
SECRET = "s3cr3t-payload"


def test_runtime_snapshot_when_idle() -> None:
    start([])
    assert gen_agent.runtime_snapshot(NAME) == RuntimeSnapshot(
        phase="idle", halted=False, halt_pending=False, draining=False, pending_prompts=0,
        pending_notifications=0, self_chain_pending=False, current_request=None)


def test_runtime_snapshot_when_busy_has_metadata_and_no_payloads() -> None:
    gate = mock.gate(mock.text_turn(SECRET))
    start([gate], state=(SECRET,), watchdog_ms=60_000)
    ref = gen_agent.tell(NAME, f"prompt {SECRET}")
    gate.wait_blocked(T)
    gen_agent.tell(NAME, f"queued {SECRET}")
    gen_agent.notify(NAME, {"secret": SECRET})
    gen_agent.halt(NAME)
    snapshot = gen_agent.runtime_snapshot(NAME)
    current = snapshot.current_request
    assert isinstance(current, CurrentTurn)
    assert current.elapsed_ms >= 0
    assert snapshot == RuntimeSnapshot(
        phase="processing", halted=False, halt_pending=True, draining=False,
        pending_prompts=1, pending_notifications=1, self_chain_pending=False,
        current_request=CurrentTurn(ref=ref, origin="tell", attempt=1,
                                    elapsed_ms=current.elapsed_ms, watchdog_ms=60_000))
    assert set(msgspec.structs.asdict(snapshot)) == {
        "phase", "halted", "halt_pending", "draining", "pending_prompts",
        "pending_notifications", "self_chain_pending", "current_request"}
    assert set(msgspec.structs.asdict(current)) == {
        "ref", "origin", "attempt", "elapsed_ms", "watchdog_ms"}
    assert SECRET not in repr(snapshot)
    assert SECRET not in str(msgspec.to_builtins(snapshot, enc_hook=repr))


class HaltingWithInfo(Halting):
    def handle_info(self, message: Any, state: Any) -> Any:
        return NoReply((*state, message))


def test_runtime_snapshot_counts_deferred_info_messages_as_pending_notifications() -> None:
    gate = mock.gate(mock.text_turn("first"))
    gen_agent.start_agent(HaltingWithInfo, name=NAME, backend=MockBackend, scripts=[gate])
    gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    gen_agent.notify(NAME, "event")
    gen_agent.send(NAME, "info")
    assert gen_agent.runtime_snapshot(NAME).pending_notifications == 2
    with TelemetryRecorder([("gen_agent", "state", "changed")]) as rec:
        gate.release()
        rec.wait_for(lambda r: r.metadata["to"] == "idle", T)
    snapshot = gen_agent.runtime_snapshot(NAME)
    assert snapshot.pending_notifications == 0
    assert gen_agent.status(NAME).agent_state == ("event", "info")


def test_runtime_snapshot_shows_a_pending_self_chain_while_halted() -> None:
    gate = mock.gate(mock.text_turn("first"))
    start([gate, mock.text_turn("chained")], chain=["follow-up"])
    gen_agent.tell(NAME, "busy")
    gate.wait_blocked(T)
    gen_agent.halt(NAME)
    with TelemetryRecorder([HALTED, TURN_START]) as rec:
        gate.release()
        rec.wait_for(HALTED, T)
        snapshot = gen_agent.runtime_snapshot(NAME)
        assert (snapshot.halted, snapshot.self_chain_pending) == (True, True)
        gen_agent.resume(NAME)
        started = rec.wait_for(TURN_START, T)
    assert started.metadata["origin"] == "self_chain"


def test_runtime_snapshot_watchdog_ms_default_and_infinity() -> None:
    gate = mock.gate(mock.text_turn("x"))
    start([gate], watchdog_ms="infinity")
    gen_agent.tell(NAME, "p")
    gate.wait_blocked(T)
    assert gen_agent.runtime_snapshot(NAME).current_request.watchdog_ms is None
    gen_agent.stop(NAME)
    gate2 = mock.gate(mock.text_turn("x"))
    start([gate2])
    gen_agent.tell(NAME, "p")
    gate2.wait_blocked(T)
    assert gen_agent.runtime_snapshot(NAME).current_request.watchdog_ms == 600_000

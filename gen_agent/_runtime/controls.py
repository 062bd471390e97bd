"""Control requests and the checkpoint protocol of the agent actor, as a mixin.

Split from `agent_actor.py` along a concept boundary: everything here answers a client's control
call (poll, status, runtime_snapshot, cancel_request, reset_session, drain, halt, resume) or a
turn task's checkpoint call (§7.3); the turn lifecycle itself stays in `agent_actor.py`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from gen_agent import telemetry
from gen_agent._cancel import TurnMark
from gen_agent._errors import CallTimeout, CheckpointError, GenAgentError
from gen_agent._permission import (
    DENY_FAILED,
    DENY_INTERRUPTED,
    DENY_NOT_CURRENT,
    DENY_TIMEOUT,
    as_decision,
    decision_name,
)
from gen_agent._runtime import record
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.mailbox import CheckpointMsg, InfoMsg, PermissionMsg
from gen_agent._runtime.work import Request, Retry, StopAgent, Turn, type_name, valid_session_id
from gen_agent._status import CurrentTurn, PollResult, RuntimeSnapshot, Status
from gen_agent.backend import BackendError, ResetError


def checkpoint(handle: Any, task_id: int, ref: Any, session_id: str) -> None:
    """`TurnContext.checkpoint` of the turn `task_id` (bound with `functools.partial` at
    dispatch, so a turn whose backend never checkpoints pays no call): ask the agent to
    accept `session_id` (§7.3) from the turn task's thread.

    Raises:
        CheckpointError: the agent refused it (its reason: "not_current", ...).
    """
    result = handle.call(lambda reply: CheckpointMsg(
        task_id, ref, session_id, threading.get_ident(), reply), None)
    if result != "ok":
        raise CheckpointError(result)


class ControlsMixin:
    """Control-call and checkpoint handlers of `AgentActor` (see `agent_actor.py`)."""

    # Provided by AgentActor.
    impl: Any
    turn: Turn | None
    self_chain: Any
    _session_used: bool
    gates: Any
    mailbox: Any
    pending: Any
    results: Any
    halted: bool
    halt_pending: bool
    draining: bool
    backend: Any
    session: Any
    state: Any
    opts: Any
    handle: Any
    durable: Any
    name: Any
    log: Any
    _emit: Any
    _now: Any
    _turn_meta: Any
    _rejected: Any
    _deliver: Any
    _drain_pending: Any
    _optional: Any
    _process_next: Any
    _drain_channel: Any

    def _on_checkpoint(self, msg: CheckpointMsg) -> None:
        if self.turn is not None and self.turn.task_id == msg.task_id:
            self._drain_channel(msg.task_id)  # keep stream order: earlier events first
        turn = self.turn
        if (turn is None or turn.task_id != msg.task_id or turn.request.ref != msg.ref
                or turn.thread_id != msg.thread_id):
            msg.reply.resolve("not_current")
            return
        msg.reply.resolve(self._accept_checkpoint(turn, msg.session_id))

    def _accept_checkpoint(self, turn: Turn, session_id: Any) -> str:
        """Validate and apply a checkpoint in the order of §7.3."""
        apply = getattr(self.backend, "checkpoint_session", None)
        if apply is None:
            return self._record_checkpoint_error(turn, "unsupported_checkpoint")
        if not valid_session_id(session_id):
            return self._record_checkpoint_error(turn, "invalid_session_id")
        if turn.checkpoint_id == session_id:
            return "ok"
        if turn.checkpoint_id is not None:
            return self._record_checkpoint_error(turn, "conflicting_session_id")
        self.session = apply(self.session, session_id)
        turn.checkpoint_id = session_id
        self.handle.session_id = session_id
        return "ok"

    @staticmethod
    def _record_checkpoint_error(turn: Turn, reason: str) -> str:
        if turn.checkpoint_error is None:
            turn.checkpoint_error = reason
        return reason

    # ------------------------------------------------------------------ tool permissions
    def _permission_fn(self, turn: Turn, mark: TurnMark) -> Any:
        """The `TurnContext.request_permission` behind this turn (called only when the agent
        defines `handle_tool_permission`, `_handles_permissions`; else the provider's own
        mode applies). Once the turn's `mark` is marked (an interrupt, a stop, the
        watchdog), a pending or later request is answered `DENY_INTERRUPTED` at once, from
        the caller's thread."""
        handle, task_id = self.handle, turn.task_id

        def request_permission(request: Any, timeout: float) -> Any:
            if mark.marked:
                return DENY_INTERRUPTED
            try:
                reply = handle.request(lambda r: PermissionMsg(task_id, request, r))
            except GenAgentError:  # refused the call (from the agent's own thread)
                return DENY_NOT_CURRENT
            mark.watch(reply, DENY_INTERRUPTED)
            try:
                return reply.wait(timeout)
            except CallTimeout:
                return DENY_TIMEOUT
            except GenAgentError:  # the agent is gone (AgentDown)
                return DENY_NOT_CURRENT
            finally:
                mark.unwatch(reply)

        return request_permission

    def _info_fn(self) -> Any:
        """`TurnContext.send_info`: a message for `handle_info` of this incarnation."""
        handle = self.handle
        return lambda message: handle.send(InfoMsg(message))

    def _on_permission(self, msg: PermissionMsg) -> None:
        """Run `handle_tool_permission` for the current turn; protected (a raise denies)."""
        turn = self.turn
        if turn is None or turn.task_id != msg.task_id:
            msg.reply.resolve(DENY_NOT_CURRENT)
            return
        request = msg.request
        if msg.reply.done:  # an interrupt answered it meanwhile (DENY_INTERRUPTED)
            self.log.debug("gen_agent skipped handle_tool_permission/2: the turn was "
                           "interrupted")
            return
        try:
            decision = as_decision(self.impl.handle_tool_permission(request, self.state))
        except Exception as exc:  # noqa: BLE001 - protected: a raise is a deny
            self.log.error("gen_agent handle_tool_permission/2 failed (error: {})",
                           type_name(exc))
            decision = DENY_FAILED
        if decision is None:
            self.log.error("gen_agent handle_tool_permission/2 returned unexpected shape")
            decision = DENY_FAILED
        self._emit(telemetry.TOOL_PERMISSION, self._now(), {
            **self._turn_meta(turn.request, turn.attempt),
            "backend": request.backend, "tool_name": request.tool_name,
            "decision": decision_name(decision)})
        if not msg.reply.resolve(decision):
            # Answered without it (an interrupt, a stop, the watchdog, or its bound): the
            # tool never ran, and this late answer goes nowhere.
            self.log.debug("gen_agent dropped a late handle_tool_permission/2 answer ({})",
                           type(decision).__name__)

    def _reapply_checkpoint(self, turn: Turn, session: Any) -> Any:
        if turn.checkpoint_id is None:
            return session
        return self.backend.checkpoint_session(session, turn.checkpoint_id)

    def _forget_dead_session(self, reason: Any, session: Any) -> Any:
        """After a turn failed with a `BackendError` of kind `"session_not_found"` (the CLI
        has no such session to resume), forget the dead id: the agent's resume record
        (`handle.session_id`, which a supervisor restart resumes) and the backend session
        (its `reset_session`, so the next turn starts a fresh conversation). No checkpoint
        was accepted in such a turn, so §7.3 has nothing to re-apply. A Python addition."""
        if not (isinstance(reason, BackendError) and reason.kind == "session_not_found"):
            return session
        self.handle.session_id = None
        reset = getattr(self.backend, "reset_session", None)
        if reset is None:
            return session
        try:
            return reset(session)
        except Exception as exc:  # noqa: BLE001 - ResetError or a bug: keep the session; logged
            self.log.warning("gen_agent reset_session after session_not_found raised {}",
                             type_name(exc))
            return session

    # ------------------------------------------------------------------ halt / resume (§4.11)
    def _enter_halted(self) -> None:
        if self.halted:
            self._drain_pending()
            return
        self.halted = True
        self.halt_pending = False
        self._fail_halt_aware()
        self._drain_pending()
        fn = self._optional("post_run")
        if fn is not None:
            try:
                fn(self.state)
            except Exception as exc:  # noqa: BLE001 - protected (§3.11)
                log_exception(self.log, "WARNING", "gen_agent post_run/1 raised", exc)
        self._emit(telemetry.HALTED, self._now(), {"agent_state": self.state})

    def _fail_halt_aware(self) -> None:
        slot = self.self_chain
        if isinstance(slot, Retry) and slot.request.on_halt == "fail":
            self.self_chain = None
            self._rejected(slot.request, slot.attempt, "halted")
            self._deliver(slot.request, ("error", "halted"))
        for request in self.mailbox.remove_where(lambda r: r.on_halt == "fail"):
            self._rejected(request, 1, "halted")
            self._deliver(request, ("error", "halted"))

    def _on_halt(self) -> None:
        if self.draining:
            return
        if self.turn is None:
            self._enter_halted()
        else:
            self.halt_pending = True

    def _on_resume(self) -> None:
        if self.turn is None and self.halted:
            self.halted = False
            self._process_next()
        elif self.turn is not None and self.halt_pending:
            self.halt_pending = False

    # ------------------------------------------------------------------ queries (§2.7, §2.16)
    def _poll(self, ref: Any) -> PollResult:
        if self.turn is not None and self.turn.request.ref == ref:
            return PollResult(status="pending")
        slot = self.self_chain
        if isinstance(slot, Retry) and slot.request.ref == ref:
            return PollResult(status="pending")
        if self.mailbox.find(lambda r: r.ref == ref and r.origin == "tell") is not None:
            return PollResult(status="pending")
        outcome = self.results.get(ref)
        if outcome is None:
            return PollResult(status="failed", reason="not_found")
        if outcome[0] == "ok":
            return PollResult(status="completed", response=outcome[1])
        return PollResult(status="failed", reason=outcome[1])

    def _status(self) -> Status:
        return Status(
            state="processing" if self.turn is not None else "idle", name=self.name,
            queued=len(self.mailbox),
            current_request=self.turn.request.ref if self.turn is not None else None,
            halted=self.halted, halt_pending=self.halt_pending, draining=self.draining,
            agent_state=self.state,
            store=self.durable.status(),
            provider_limit=None if self.gates.limit is None else self.gates.limit.status())

    def _snapshot(self) -> RuntimeSnapshot:
        turn = self.turn
        current = None
        if turn is not None:
            current = CurrentTurn(
                ref=turn.request.ref, origin=turn.request.origin, attempt=turn.attempt,
                elapsed_ms=record.elapsed_ms(turn), watchdog_ms=self.opts.watchdog_ms)
        return RuntimeSnapshot(
            phase="processing" if turn is not None else "idle", halted=self.halted,
            halt_pending=self.halt_pending, draining=self.draining,
            pending_prompts=len(self.mailbox), pending_notifications=len(self.pending),
            self_chain_pending=self.self_chain is not None, current_request=current)

    # ------------------------------------------------------------------ cancel (§2.12)
    def _cancel_request(self, ref: Any) -> str:
        if self.turn is not None and self.turn.request.ref == ref:
            return "current" if self.turn.request.origin == "tell" else "not_found"
        slot = self.self_chain
        if isinstance(slot, Retry) and slot.request.ref == ref and slot.request.origin == "tell":
            self.self_chain = None
            self._cancelled(slot.request, slot.attempt)
            return "cancelled"
        removed = self.mailbox.remove_where(lambda r: r.ref == ref and r.origin == "tell")
        if removed:
            self._cancelled(removed[0], 1)
            return "cancelled"
        outcome = self.results.get(ref)
        if outcome is None:
            return "not_found"
        return "cancelled" if outcome == ("error", "cancelled") else "already_finished"

    def _cancelled(self, request: Request, attempt: int) -> None:
        self._emit(telemetry.TURN_CANCELLED,
                   {"system_time": time.time_ns(), "queue_depth": len(self.mailbox)},
                   self._turn_meta(request, attempt, reason_kind="caller_cancelled"))
        self._deliver(request, ("error", "cancelled"))

    # ------------------------------------------------------------------ reset / drain
    def _on_reset_session(self, reply: Any) -> None:
        if self.draining:
            reply.resolve(("error", "draining"))
        elif self.turn is not None:
            reply.resolve(("error", "busy"))
        elif (reset := getattr(self.backend, "reset_session", None)) is None:
            reply.resolve(("error", "unsupported"))
        else:
            try:
                self.session = reset(self.session)
                self._session_used = False
                # a crash now must not resume the old one
                self.durable.session_replaced(self.session)
                reply.resolve(("ok", None))
            except ResetError as exc:
                reply.resolve(("error", exc.reason))
            except Exception as exc:  # noqa: BLE001 - reported as a reason, agent survives
                reply.resolve(("error", ("backend_reset_failed", type_name(exc))))

    def _on_drain(self, reply: Any) -> None:
        if self.draining:
            reply.resolve(("ok", None))
            return
        self.draining = True
        slot = self.self_chain
        self.self_chain = None
        if isinstance(slot, Retry):
            self._rejected(slot.request, slot.attempt, "draining")
            self._deliver(slot.request, ("error", "draining"))
        for request in self.mailbox.clear():
            self._rejected(request, 1, "draining")
            self._deliver(request, ("error", "draining"))
        self.pending.clear()
        reply.resolve(("ok", None))
        if self.turn is None:
            raise StopAgent("normal")

"""Dispatch of the agent actor, as a mixin: choosing the next request when the agent is idle
(a due retry or self-chain first, then the mailbox in order), `pre_turn`, and starting the
turn task with its context (docs/pages/contract.md, "process_next" and "Dispatch").
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec

from gen_agent import telemetry
from gen_agent._agent import Halt, Proceed, Prompt, Skip
from gen_agent._cancel import CancelSignal, TurnMark
from gen_agent._context import set_request
from gen_agent._request_options import DEFAULT_OPTIONS, RequestInfo, RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._runtime import record
from gen_agent._runtime.capture import Capture, LosslessBudget
from gen_agent._runtime.controls import checkpoint
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.mailbox import RetryGeneratedMsg
from gen_agent._runtime.pending import check_admission
from gen_agent._runtime.turn import TurnChannel, TurnSpec, start_turn
from gen_agent._runtime.work import (
    Phase,
    Request,
    Retry,
    StopAgent,
    Turn,
    caller_alive,
    type_name,
)
from gen_agent._size import term_size
from gen_agent._timers import TIMERS
from gen_agent.backend import ResetError, TurnContext

_RETRY_GENERATED_S = 0.010


def info_of(request: Request, prompt: str, attempt: int) -> RequestInfo:
    """The `current_request()` record of `request`'s attempt."""
    return RequestInfo(ref=request.ref, origin=request.origin, prompt=prompt, attempt=attempt,
                       options=request.options)


class DispatchMixin:
    """`process_next`, `pre_turn` and the turn's start for `AgentActor` (see
    `agent_actor.py`)."""

    # Provided by AgentActor.
    handle: Any
    name: Any
    backend: Any
    opts: Any
    session: Any
    state: Any
    spend: Any
    turn: Any
    self_chain: Any
    mailbox: Any
    halted: bool
    halt_pending: bool
    draining: bool
    gates: Any
    durable: Any
    log: Any
    _backend_opts: dict[str, Any]
    _chain_options: Any
    _session_used: bool
    _task_ids: Any
    _retry_timer: Any
    _pre_turn_cb: Any
    _stream_cb: Any
    _send_info: Any
    _emit: Any
    _now: Any
    _turn_meta: Any
    _rejected: Any
    _input_rejected: Any
    _caller_gone: Any
    _call_handle_error: Any
    _deliver: Any
    _enter_halted: Any
    _set_phase: Any
    _permission_fn: Any
    _handles_permissions: bool
    _lifecycle: Any

    def _dispatch_and_continue(self, request: Request, prompt: str, attempt: int) -> None:
        outcome = self._dispatch(request, prompt, attempt)
        if outcome != "started":
            self._after_rejection(outcome)

    def _after_rejection(self, outcome: str) -> None:
        # A generated prompt rejected by pre_turn whose handle_error queued yet another one is
        # retried after a short timer, so pre_turn cannot spin the agent (§3.5).
        if (outcome == "generated_rejected" and self.self_chain is not None
                and not self.halted):
            if self._retry_timer is None:
                self._retry_timer = TIMERS.schedule(
                    _RETRY_GENERATED_S, lambda: self.handle.tell_unchecked(RetryGeneratedMsg()))
            return
        self._process_next()

    def _process_next(self) -> None:
        while self.turn is None:
            if self.handle.closed:
                return  # killed after its shutdown window: nothing more runs (§2.19)
            if self.draining:
                raise StopAgent("normal")
            if self.halted:
                return
            slot = self.self_chain
            if isinstance(slot, Retry) and not slot.due:
                return  # a delayed retry: nothing else runs before it (§4.21)
            if slot is None and not self.mailbox.items:
                if self.gates.limit is not None:
                    self.gates.drop_permit()
                return
            if self.gates.limit is not None and not self.gates.take_permit():
                return  # it waits for its provider limit, first in the queue (LimitWakeMsg)
            if isinstance(slot, Retry):
                self.self_chain = None
                outcome = self._dispatch(slot.request, slot.prompt, slot.attempt)
            elif slot is not None:
                self.self_chain = None
                request = Request("self_chain", slot, options=self._chain_options)
                outcome = self._dispatch(request, slot, 1)
            elif self.mailbox.items:
                request = self.mailbox.pop()
                if request.origin == "ask" and not caller_alive(request.caller):
                    self._caller_gone(request)
                    continue
                outcome = self._dispatch(request, request.prompt, 1)
            else:
                return
            if outcome == "generated_rejected" and self.self_chain is not None \
                    and not self.halted:
                self._after_rejection(outcome)
                return

    def _dispatch(self, request: Request, prompt: str, attempt: int) -> str:
        """Run pre_turn and start the turn task. Returns "started" or a rejection kind (then
        a provider-limit permit taken for it goes back unused)."""
        outcome = self._start_turn(request, prompt, attempt)
        if outcome != "started":
            self.gates.drop_permit()
        return outcome

    def _start_turn(self, request: Request, prompt: str, attempt: int) -> str:
        # The spend caps first (gen_agent._accounting): a refused turn runs no callback.
        gates, durable = self.gates, self.durable
        if gates.capped and (over := gates.over_budget(self.spend)) is not None:
            if request.generated:
                return self._reject_generated(request, attempt, ("budget_exceeded", over))
            return self._reject_external(request, attempt, ("budget_exceeded", over))
        if request.prepared and attempt == 1:  # a steer's pre_turn ran already (busy.py)
            request.prepared = False
            accepted: tuple[str, Any] | str = (prompt, self.state)
        else:
            accepted = self._pre_turn(request, prompt, attempt)
        if isinstance(accepted, str):
            return accepted
        final_prompt, self.state = accepted
        final_prompt = durable.prefixed(final_prompt)  # an interrupted turn's, once
        if request.options.fresh_session and not request.generated and self._session_used:
            failure = self._fresh_session()
            if failure is not None:
                return self._reject_external(request, attempt, failure)
        self._session_used = True
        task_id = next(self._task_ids)
        cancel_event = CancelSignal()
        turn = Turn(request, attempt, task_id, final_prompt,
                    Capture(self.opts.max_events_per_turn, self.opts.max_event_bytes_per_turn),
                    TurnChannel(self.handle, task_id, self.opts.max_event_bytes_per_turn,
                                cancel_event), cancel_event)
        self.turn = turn
        mark = TurnMark(request.ref)  # what interrupt / stop / the watchdog mark at once
        options = request.options
        if options.output is None and self.opts.output is not None:
            options = msgspec.structs.replace(options, output=self.opts.output)
        journal = durable.turn_started(request, attempt, options)
        carrier = record.started(self._emit, self._turn_meta, turn, prompt, self.state,
                                 backend=self.backend, session=self.session,
                                 session_id=self.handle.session_id,
                                 queue_depth=len(self.mailbox.items))
        if request.options.lifecycle_to is not None:
            self._lifecycle(request, "started", attempt=attempt)
        request.queued_at = None
        budget = None
        if self.opts.event_retention == "lossless":
            budget = LosslessBudget(self.opts.max_events_per_turn,
                                    self.opts.max_event_bytes_per_turn)
        context = TurnContext(agent=self.name, ref=request.ref, attempt=attempt,
                              cancel_event=turn.cancel_event,
                              checkpoint=partial(checkpoint, self.handle, task_id,
                                                 request.ref),
                              options=options, trace_carrier=carrier,
                              permission=(self._permission_fn(turn, mark)
                                          if self._handles_permissions else None),
                              info=self._send_info, journal=journal)
        self._set_phase(Phase.PROCESSING)
        gates.start_watchdog(turn)
        mark.deadline = turn.deadline
        self.handle.turn_mark = mark
        thread = start_turn(TurnSpec(turn.channel, self.backend, self.session, final_prompt,
                                     context, self._stream_cb, self.state, budget))
        turn.thread_id = thread.ident
        return "started"

    def _fresh_session(self) -> Any:
        """Replace the session before a `fresh_session` request: the backend's
        `reset_session`, else terminate it and start a new one with the start options.
        Returns None, or the reason the request fails with (the old session is kept)."""
        reset = getattr(self.backend, "reset_session", None)
        try:
            if reset is not None:
                self.session = reset(self.session)
            else:
                fresh = self.backend.start_session(dict(self._backend_opts))
                old, self.session = self.session, fresh
                self.backend.terminate_session(old)
        except ResetError as exc:
            return ("fresh_session_failed", exc.reason)
        except Exception as exc:  # noqa: BLE001 - the request fails; the agent survives
            log_exception(self.log, "WARNING", "gen_agent fresh session failed", exc)
            return ("fresh_session_failed", type_name(exc))
        self._session_used = False
        return None

    def _pre_turn(self, request: Request, prompt: str, attempt: int) -> tuple[str, Any] | str:
        """Apply pre_turn (§3.5): `(prompt, state)` when accepted, else the rejection kind."""
        fn = self._pre_turn_cb
        if fn is None:
            return prompt, self.state
        set_request(info_of(request, prompt, attempt))
        try:
            result = fn(prompt, self.state)
        except Exception as exc:  # noqa: BLE001 - protected callback (§3.5)
            set_request(None)
            log_exception(self.log, "WARNING", "gen_agent pre_turn/2 raised", exc)
            if request.generated:
                return self._reject_generated(request, attempt, ("pre_turn_crashed",
                                                                 type_name(exc)))
            return self._reject_external(request, attempt, "pre_turn_skipped")
        set_request(None)
        if type(result) is Proceed and type(result.prompt) is str:
            return result.prompt, result.state
        if type(result) is Skip:
            self.state = result.state
            if request.generated:
                return self._reject_generated(request, attempt, "pre_turn_skipped")
            return self._reject_external(request, attempt, "pre_turn_skipped")
        if type(result) is Halt:
            self.state = result.state
            self._rejected(request, attempt, "pre_turn_halted")
            if not request.generated:
                self._deliver(request, ("error", "pre_turn_halted"))
            if self.turn is not None:  # a steer's pre_turn: halt once the turn ends
                self.halt_pending = True
            else:
                self._enter_halted()
            return "halted"
        self.log.warning("gen_agent pre_turn/2 returned unexpected shape")
        if request.generated:
            return self._reject_generated(request, attempt, "pre_turn_invalid")
        return self._reject_external(request, attempt, "pre_turn_invalid")

    def _reject_external(self, request: Request, attempt: int, reason: Any) -> str:
        self._rejected(request, attempt, reason)
        self._deliver(request, ("error", reason))
        return "rejected"

    def _reject_generated(self, request: Request, attempt: int, reason: Any) -> str:
        self._rejected(request, attempt, reason)
        self._generated_failure(request.ref, reason)
        return "generated_rejected"

    def _generated_failure(self, ref: RequestRef, reason: Any) -> None:
        """A generated prompt failed before dispatch: prompt.error + handle_error (§4.9)."""
        self._emit(telemetry.PROMPT_ERROR, self._now(),
                   {"ref": ref, "attempt": 1, "reason": reason, "agent_state": self.state})
        decision = self._call_handle_error(ref, reason)
        self.state = decision.state
        if type(decision) is Prompt:
            if not self.draining:
                self._offer_self_chain(decision.text, recovery=True)
        elif type(decision) is Halt:
            self._enter_halted()

    def _self_chain_overload(self, prompt: str) -> Any:
        """Why `prompt` may not take the reserved slot (§4.9), or None if it fits."""
        occupied = 1 if self.self_chain is not None else 0
        return check_admission("self_chain", occupied, 0, term_size(prompt), 1,
                               self.opts.max_pending_prompt_bytes)

    def _offer_self_chain(self, prompt: str, *, recovery: bool = False,
                          options: RequestOptions = DEFAULT_OPTIONS) -> bool:
        """Put a follow-up in the reserved slot (§4.9); on overload tell handle_error.
        The follow-up carries `options`, those of the request that chained it."""
        info = self._self_chain_overload(prompt)
        if info is None:
            self.self_chain = prompt
            self._chain_options = options
            return True
        reason = ("overloaded", info)
        self._input_rejected(reason)
        if not recovery:
            self._generated_failure(RequestRef.new(), reason)
        return False

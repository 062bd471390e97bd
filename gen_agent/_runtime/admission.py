"""Admission of the agent actor's requests (`ask`, `tell`), as a mixin: dispatched at once
when the agent may start a turn, else queued in its bounded mailbox or refused with
`("overloaded", info)` or `"draining"`; queued asks whose caller is gone are dropped
(docs/pages/contract.md, "Admission" and "Caller death").
"""

from __future__ import annotations

import time
from typing import Any

from gen_agent import telemetry
from gen_agent._event import monotonic_ms
from gen_agent._request_ref import RequestRef
from gen_agent._runtime.mailbox import AskMsg, TellMsg
from gen_agent._runtime.work import Request, Retry, caller_alive
from gen_agent._size import term_size


class AdmissionMixin:
    """Request admission for `AgentActor` (see `agent_actor.py`)."""

    # Provided by AgentActor.
    turn: Any
    self_chain: Any
    mailbox: Any
    halted: bool
    draining: bool
    gates: Any
    _emit: Any
    _turn_meta: Any
    _rejected: Any
    _input_rejected: Any
    _interrupt: Any
    _dispatch: Any
    _dispatch_and_continue: Any
    _after_rejection: Any
    _lifecycle: Any
    _queued: Any
    _admit_busy: Any
    _policy_refusal: Any

    def _admit_prompt(self, request: Request) -> Any:
        """Queue `request` in the mailbox; return the overload reason or None."""
        size = term_size(request.prompt)
        info = self.mailbox.offer(request, size)
        if info is not None and self._drop_dead_callers():
            info = self.mailbox.offer(request, size)
        if info is not None:
            reason = ("overloaded", info)
            self._input_rejected(reason)
            self._rejected(Request(request.origin, ""), 1, "overloaded")
            return reason
        request.queued_at = monotonic_ms()
        self._emit(telemetry.MAILBOX_QUEUED, {"depth": len(self.mailbox)}, {})
        self._queued(request)
        return None

    def _drop_dead_callers(self) -> bool:
        """Remove queued asks whose caller thread ended (§4.14); True if any were."""
        dead = self.mailbox.remove_where(
            lambda r: r.origin == "ask" and not caller_alive(r.caller))
        for request in dead:
            self._caller_gone(request)
        return bool(dead)

    def _caller_gone(self, request: Request) -> None:
        """A queued ask is dropped because its caller is gone: no callbacks (§4.14)."""
        self._emit(telemetry.TURN_CANCELLED,
                   {"system_time": time.time_ns(), "queue_depth": len(self.mailbox)},
                   self._turn_meta(request, 1, reason_kind="caller_down"))
        self._lifecycle(request, "cancelled", reason_kind="caller_down")

    def _can_dispatch_now(self) -> bool:
        """True if a new request may start now; takes the provider-limit permit it needs (a
        request that cannot have one is queued, and waits first in line)."""
        slot = self.self_chain
        return (self.turn is None and not self.halted and not self.draining
                and not (type(slot) is Retry and not slot.due)
                and (self.gates.limit is None or self.gates.take_permit()))

    def _on_ask(self, msg: AskMsg) -> None:
        if self.draining:
            self._input_rejected("draining")
            msg.reply.resolve(("error", "draining"))
            return
        request = Request("ask", msg.prompt, ref=msg.ref, reply=msg.reply, caller=msg.caller,
                          options=msg.options)
        if (request.options.busy is not None  # a policy of its own: may it be used here?
                and (refused := self._policy_refusal(request)) is not None):
            msg.reply.resolve(("error", refused))
        elif self._can_dispatch_now():
            self._dispatch_and_continue(request, request.prompt, 1)
        elif (reason := self._admit_busy(request)) is not None:
            msg.reply.resolve(("error", reason))

    def _on_tell(self, msg: TellMsg) -> None:
        if self.draining:
            self._input_rejected("draining")
            msg.reply.resolve(("error", "draining"))
            return
        if msg.on_halt == "fail" and self.halted and self.turn is None:
            msg.reply.resolve(("error", "halted"))
            return
        request = Request("tell", msg.prompt, ref=msg.ref, recipient=msg.recipient,
                          completion=msg.completion, on_halt=msg.on_halt,
                          stream_to=msg.stream_to, options=msg.options, watch=msg.watch)
        if (request.options.busy is not None  # a policy of its own: may it be used here?
                and (refused := self._policy_refusal(request)) is not None):
            msg.reply.resolve(("error", refused))
        elif self._can_dispatch_now():
            # The reply waits for pre_turn and the task start (§2.5); a completion may
            # already have been delivered by then (§2.6).
            outcome = self._dispatch(request, request.prompt, 1)
            msg.reply.resolve(("ok", request.ref))
            if outcome != "started":
                self._after_rejection(outcome)
        elif (reason := self._admit_busy(request)) is not None:
            msg.reply.resolve(("error", reason))
        else:
            msg.reply.resolve(("ok", request.ref))

    def _abandon_ask(self, ref: RequestRef, timed_out: bool) -> None:
        """The caller of ask `ref` gave up: drop it if queued; after its timeout with
        `cancel_on_timeout=True` also drop its pending retry or interrupt its running turn."""
        for request in self.mailbox.remove_where(lambda r: r.ref == ref and r.origin == "ask"):
            self._caller_gone(request)
        if not timed_out:
            return
        slot = self.self_chain
        if isinstance(slot, Retry) and slot.request.ref == ref:
            self.self_chain = None
            self._caller_gone(slot.request)
            slot.request.reply.resolve(("error", "cancelled"))
        elif self.turn is not None and self.turn.request.ref == ref:
            self._interrupt()

"""Notifications and info messages of the agent actor (`notify`, `send`, `handle_info`), as
a mixin: handled at once when the agent is idle, buffered in arrival order while a turn runs
and applied after it (the deferral the Elixir original added as a bug fix; see
docs/pages/contract.md, "Notification deferral").
"""

from __future__ import annotations

from typing import Any

from gen_agent import telemetry
from gen_agent._agent import Halt, NoReply, Prompt
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.mailbox import NotifyMsg
from gen_agent._runtime.work import Request, valid_decision
from gen_agent._size import term_size


class InputsMixin:
    """`notify`/`notify_ack` and info handlers of `AgentActor` (see `agent_actor.py`)."""

    # Provided by AgentActor.
    impl: Any
    turn: Any
    pending: Any
    draining: bool
    state: Any
    durable: Any
    log: Any
    _handle_info_cb: Any
    _emit: Any
    _now: Any
    _input_rejected: Any
    _enter_halted: Any
    _can_dispatch_now: Any
    _dispatch_and_continue: Any
    _admit_prompt: Any
    _generated_failure: Any
    _optional: Any

    def _on_notify(self, msg: NotifyMsg) -> None:
        if self.draining:
            self._input_rejected("draining")
            if msg.reply is not None:
                msg.reply.resolve(("error", "draining"))
            return
        self._emit(telemetry.EVENT_RECEIVED, self._now(), {"event": msg.event})
        if self.turn is not None:
            info = self.pending.offer(("event", msg.event), term_size(msg.event))
            if info is not None:
                self._input_rejected(("overloaded", info))
            if msg.reply is not None:
                msg.reply.resolve(("ok", None) if info is None else ("error", ("overloaded", info)))
            return
        error = self._apply_input("event", msg.event, deferred=False)
        if msg.reply is not None:
            msg.reply.resolve(("ok", None) if error is None else ("error", error))

    def _on_info(self, message: Any) -> None:
        if self.draining:
            return
        if self._handle_info_cb is None:
            self.log.debug("gen_agent dropped an unexpected info message")
            return
        if self.turn is not None:
            if self.pending.offer(("info", message), term_size(("info", message))) is not None:
                self.log.warning("gen_agent dropped an info message: buffer full")
            return
        self._apply_input("info", message, deferred=False)

    def _apply_input(self, kind: str, payload: Any, *, deferred: bool) -> Any:
        """Run handle_event/handle_info and apply its decision. Returns an admission error."""
        decision = self._call_input(kind, payload)
        self.state = decision.state
        self.durable.save_state(self.impl, self.state)  # outside a turn too
        if type(decision) is Halt:
            if not deferred:
                self._enter_halted()
            return None
        if type(decision) is not Prompt:
            return None
        request = Request("event", decision.text)
        if not deferred and self._can_dispatch_now():
            self._dispatch_and_continue(request, request.prompt, 1)
            return None
        reason = self._admit_prompt(request)
        if reason is not None:
            self._generated_failure(request.ref, reason)
        return reason

    def _call_input(self, kind: str, payload: Any) -> Any:
        fn = self._optional("handle_event" if kind == "event" else "handle_info")
        label = "handle_event/2" if kind == "event" else "handle_info/2"
        if fn is None:
            return NoReply(self.state)
        try:
            decision = fn(payload, self.state)
        except Exception as exc:  # noqa: BLE001 - protected (§3.9)
            log_exception(self.log, "ERROR", f"gen_agent {label} failed", exc)
            return NoReply(self.state)
        if not valid_decision(decision):
            self.log.error("gen_agent {} returned unexpected shape", label)
            return NoReply(self.state)
        return decision

    def _drain_pending(self) -> bool:
        """Apply buffered notifications in arrival order; True if one of them halted."""
        halt = False
        while len(self.pending):
            kind, payload = self.pending.pop()
            decision_halted = self._apply_deferred(kind, payload)
            halt = halt or decision_halted
        return halt

    def _apply_deferred(self, kind: str, payload: Any) -> bool:
        decision = self._call_input(kind, payload)
        self.state = decision.state
        self.durable.save_state(self.impl, self.state)  # outside a turn too
        if type(decision) is Prompt:
            request = Request("event", decision.text)
            reason = self._admit_prompt(request)
            if reason is not None:
                self._generated_failure(request.ref, reason)
            return False
        return type(decision) is Halt

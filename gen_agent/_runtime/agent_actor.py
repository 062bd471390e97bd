"""The agent actor: the state machine of contract §4 on one pykka `ThreadingActor`.

One actor thread per agent runs every agent-side callback and owns all agent data; turns run
in turn tasks (`_turn.py`) that report back through the mailbox. The failure policy lives in
one place, `_finish_error` / `_deliver`: which errors reach the caller, which reach
`handle_error`, which stop the agent (only `handle_response` and the runtime's own bugs), and
which are only logged (the protected callbacks).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import msgspec
from loguru import logger

from gen_agent import telemetry
from gen_agent._cancel import CancelSignal
from gen_agent._context import (
    set_current,
    set_request,
)
from gen_agent._runtime import record
from gen_agent._runtime.actor import ActorBase
from gen_agent._runtime.capture import Capture, LosslessBudget
from gen_agent._runtime.controls import ControlsMixin
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.durable import NO_DURABILITY, Durable, NoDurability
from gen_agent._runtime.gates import Gates
from gen_agent._runtime.handle import AgentHandle
from gen_agent._runtime.messages import (
    AbandonAskMsg,
    AskMsg,
    CallMsg,
    CancelRequestMsg,
    CheckpointMsg,
    DrainMsg,
    GetSessionMsg,
    HaltMsg,
    InfoMsg,
    InterruptMsg,
    InterruptRequestMsg,
    LimitWakeMsg,
    NotifyMsg,
    PermissionMsg,
    PollMsg,
    ResetSessionMsg,
    ResumeMsg,
    RetryDueMsg,
    RetryGeneratedMsg,
    SnapshotMsg,
    StatusMsg,
    StopMsg,
    TellMsg,
    TurnDoneMsg,
    TurnWakeMsg,
    WatchdogMsg,
)
from gen_agent._runtime.options import AgentOptions
from gen_agent._runtime.pending import BoundedQueue, check_admission
from gen_agent._runtime.request import (
    Request,
    Retry,
    StopAgent,
    Turn,
    caller_alive,
    deliver_to,
    redacted,
    type_name,
    valid_decision,
    valid_retry_delay,
)
from gen_agent._runtime.results import ResultCache
from gen_agent._runtime.turn import TurnChannel, TurnSpec, start_turn
from gen_agent._timers import TIMERS
from gen_agent.accounting import Spend
from gen_agent.agent import BASE_STREAM_EVENT, GenAgent, Halt, NoReply, Proceed, Prompt, Skip
from gen_agent.backend import ResetError, SessionStartError, TurnContext
from gen_agent.errors import (
    AgentStartError,
    InitAgentError,
    PreRunError,
    RequestError,
    TurnError,
    describe_reason,
)
from gen_agent.event import monotonic_ms
from gen_agent.messages import Completion, StreamEvent
from gen_agent.ref import RequestRef
from gen_agent.request import DEFAULT_OPTIONS, RequestInfo, RequestOptions
from gen_agent.size import term_size
from gen_agent.telemetry import attached

#: The detail of an `("init_failed", "error", T)` start error (the exception is chained).
RAISED_DURING_START = "(raised during start; the original exception is __cause__)"

_GRACEFUL = ("normal", "shutdown")


_RETRY_GENERATED_S = 0.010


def _info(request: Request, prompt: str, attempt: int) -> RequestInfo:
    return RequestInfo(ref=request.ref, origin=request.origin, prompt=prompt, attempt=attempt,
                       options=request.options)


def _with_detail(reason: Any, exc: BaseException) -> str:
    """`str()` of a start error: the reason, and the backend's own message when it has one."""
    shown = describe_reason(reason)
    detail = str(exc)
    if detail and detail != describe_reason(getattr(exc, "reason", None)):
        return f"{shown} ({detail})"
    return shown


class AgentActor(ControlsMixin, ActorBase):
    """The GenServer-like agent. Internal: users talk to it through `gen_agent.client`.

    Its loop, teardown and hibernation are `ActorBase`'s (`_runtime/actor.py`); this class is
    the agent's state machine on top: startup, the message `match`, admission, dispatch, the
    turn's completion, the failure policy (`_finish_error` / `_deliver`) and termination.
    """

    def __init__(self, handle: AgentHandle, module: type, backend: Any, options: AgentOptions,
                 init_opts: dict[str, Any], init_reply: Any) -> None:
        super().__init__()
        self.handle = handle
        handle.actor_ref = self.actor_ref
        self.name = handle.name
        self.module = module
        self.backend = backend
        self.opts = options
        self._init_opts = init_opts
        self._backend_opts: dict[str, Any] = {}
        self._init_reply = init_reply
        self.impl: Any = None
        self.session: Any = None
        self.state: Any = None
        self.phase: str | None = None
        self.halted = False
        self.halt_pending = False
        self.draining = False
        self.turn: Turn | None = None
        self.self_chain: str | Retry | None = None
        self._chain_options = DEFAULT_OPTIONS  # the options of a str self_chain follow-up
        self._session_used = False  # a turn ran on the session since it started / was reset
        self.gates = Gates(options, handle)  # spend caps, provider permit, watchdog
        self.mailbox: BoundedQueue[Request] = BoundedQueue(
            "prompts", options.max_pending_prompts, options.max_pending_prompt_bytes)
        self.pending: BoundedQueue[tuple[str, Any]] = BoundedQueue(
            "notifications", options.max_pending_notifications,
            options.max_pending_notification_bytes)
        self.results = ResultCache(options.max_tell_results, options.max_tell_result_bytes)
        self._task_ids = itertools.count(1)
        self._retry_timer: Any = None
        self._pre_turn_cb: Any = None  # set by on_start (see there)
        self._post_turn_cb: Any = None
        self._send_info: Any = None
        self._replies: list[tuple[Any, Any]] = []
        self._terminated = False
        self.log = logger.bind(gen_agent=self.name, gen_agent_module=module.__name__)
        # The agent's running totals (gen_agent.accounting); reset_session keeps them.
        self.spend = options.spend if options.spend is not None else Spend()
        if options.hibernate_after_ms is not None:
            self.enable_hibernation(options.hibernate_after_ms / 1000)
        self.durable: Durable | NoDurability = NO_DURABILITY
        if options.store is not None and options.session_key is not None:
            self.durable = Durable(options.store, options.session_key, self.name, backend,
                                   self.log, lambda: not handle.closed)

    def __repr__(self) -> str:
        # Redacted (§3.14): never the session, state, prompts or queues.
        return (f"<AgentActor module={self.module.__name__} phase={self.phase} "
                f"halted={self.halted} draining={self.draining}>")

    __str__ = __repr__

    # ------------------------------------------------------------------ ActorBase hooks
    def _bind_thread(self) -> None:
        self.handle.actor_thread = threading.get_ident()
        set_current(self.name, self.handle)

    def _unbind_thread(self) -> None:
        self.handle.actor_thread = None

    def _thread_of(self) -> int | None:
        return self.handle.actor_thread

    def _starts_hibernated(self) -> bool:
        # No pre_run, which must run after start_agent returned (§4.3): the agent may
        # initialise in the starting thread and begin hibernated.
        return getattr(self.module, "pre_run", None) in (None, GenAgent.pre_run)

    def _may_hibernate(self) -> bool:
        if self.turn is not None or self._retry_timer is not None or self._terminated:
            return False
        self.gates.disarm()  # before the flag: once it is set, a wake may arm it anew
        return True

    # ------------------------------------------------------------------ startup (§4.3)
    def on_start(self) -> None:
        self.handle.actor_thread = threading.get_ident()
        set_current(self.name, self.handle)
        try:
            self.impl = self.module()
            backend_opts, state = self._init_agent()
            self._backend_opts = backend_opts
            try:
                # resumed from the store when the agent has one (gen_agent.store)
                self.session, state = self.durable.open(
                    self.impl, backend_opts, state, self._start_session)
                if self.durable.resumed and self.opts.spend is None:
                    # The spend caps count what the stored session already spent.
                    self.spend = record.spend_of(self.durable.totals)
            except SessionStartError as exc:
                failed = ("backend_start_failed", exc.reason)
                raise AgentStartError(failed, _with_detail(failed, exc)) from exc
            self.state = state
        except AgentStartError as exc:
            self._fail_start(exc)
            return
        except Exception as exc:  # noqa: BLE001 - reported as ("init_failed", kind, type)
            log_exception(self.log, "ERROR", "gen_agent initialization failed", exc)
            reason = ("init_failed", "error", type_name(exc))
            error = AgentStartError(reason, f"{describe_reason(reason)} {RAISED_DURING_START}")
            error.__cause__ = exc
            self._fail_start(error)
            return
        self._stream_cb = self._optional("handle_stream_event")
        if self._stream_cb is not None and getattr(
                type(self.impl), "handle_stream_event", None) is BASE_STREAM_EVENT:
            self._stream_cb = None  # the default returns state unchanged; skip it per event
        self._handle_info_cb = self._optional("handle_info")
        # The base class's pre_turn/post_turn change nothing: a turn skips calling them.
        self._pre_turn_cb = self._overridden("pre_turn", GenAgent.pre_turn)
        self._post_turn_cb = self._overridden("post_turn", GenAgent.post_turn)
        self._send_info = self._info_fn()
        self._set_phase("idle")
        self._init_reply.resolve(self.handle)
        self._run_pre_run()
        if self.durable.interrupted is not None and not self._terminated:
            self._on_info(self.durable.interrupted)  # the turn the last owner did not finish

    def _start_session(self, backend_opts: dict[str, Any]) -> Any:
        # A supervisor restarting an agent passes the old session id (resume_session_id);
        # backends that can resume a conversation do, the others start afresh.
        session_id = self.opts.resume_session_id
        resume = getattr(self.backend, "resume_session", None)
        if session_id is not None and resume is not None:
            self.handle.session_id = session_id
            return resume(session_id, backend_opts)
        return self.backend.start_session(backend_opts)

    def _init_agent(self) -> tuple[dict[str, Any], Any]:
        try:
            result = self.impl.init_agent(dict(self._init_opts))
        except InitAgentError as exc:
            raise AgentStartError(("init_agent_failed", exc.reason)) from exc
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], dict)):
            raise AgentStartError(("init_agent_failed", result))
        return result

    def _fail_start(self, error: AgentStartError) -> None:
        # Free the name before the starter hears of the failure, so it can retry at once.
        self._terminated = True
        self.durable.close()
        self._exit(error.reason, unregister=True, cause=error.__cause__)
        self._init_reply.fail(error)

    def _run_pre_run(self) -> None:
        fn = self._optional("pre_run")
        if fn is None:
            return
        try:
            self.state = fn(self.state)
        except PreRunError as exc:
            self._terminate(("pre_run_failed", exc.reason), cause=exc)
        except Exception as exc:  # noqa: BLE001 - stops the agent with the crash type
            log_exception(self.log, "ERROR", "gen_agent pre_run/1 crashed", exc)
            self._terminate(("pre_run_crashed", type_name(exc)), cause=exc)

    def _optional(self, name: str) -> Any:
        return getattr(self.impl, name, None)

    def _overridden(self, name: str, base: Any) -> Any:
        """The agent's callback `name`, or None when it has none or it is `base` itself."""
        fn = self._optional(name)
        return None if fn is None or getattr(fn, "__func__", None) is base else fn

    # ------------------------------------------------------------------ message loop
    def on_receive(self, message: Any) -> Any:
        if self.handle.closed and not self._terminated:
            self._killed()  # cut off by a supervisor after its shutdown window
        if self._terminated:
            self._refuse(message)
            return None
        try:
            self._handle(message)
            if self._replies:
                self._flush_replies()
        except StopAgent as stop:
            self._terminate(stop.reason, cause=stop.cause)
        except Exception as exc:  # noqa: BLE001 - a bug in message handling stops the agent
            log_exception(self.log, "ERROR", "gen_agent state callback failed", exc)
            self._terminate(("callback_failed", "error", type_name(exc)), cause=exc)
        return None

    def _flush_replies(self) -> None:
        # Ask replies go out when the whole step is done, as gen_statem reply actions do
        # (after buffered notifications and post_run; contract §12.11).
        replies, self._replies = self._replies, []
        for reply, outcome in replies:
            reply.resolve(outcome)

    def on_stop(self) -> None:
        # Reached through pykka's own stop (ActorRef.stop): stop gracefully.
        if not self._terminated:
            self._terminate("shutdown", stop_actor=False)
        self.gates.disarm()
        self.handle.exited.set()

    def _killed(self) -> None:
        # A kill runs no cleanup callbacks (§2.19); only the turn task is told to stop.
        self._terminated = True
        if self.turn is not None:
            self._cancel_task(self.turn)
        self.stop()

    def _refuse(self, message: Any) -> None:
        reply = getattr(message, "reply", None)
        if reply is not None:
            reply.fail(self.handle.down_error())

    def _handle(self, msg: Any) -> None:
        match msg:
            case TurnWakeMsg():
                self._drain_channel(msg.task_id)
            case AskMsg():
                self._on_ask(msg)
            case TellMsg():
                self._on_tell(msg)
            case NotifyMsg():
                self._on_notify(msg)
            case InfoMsg():
                self._on_info(msg.message)
            case PollMsg():
                msg.reply.resolve(self._poll(msg.ref))
            case StatusMsg():
                msg.reply.resolve(self._status())
            case SnapshotMsg():
                msg.reply.resolve(self._snapshot())
            case InterruptMsg():
                if self.turn is not None:
                    self._interrupt()
            case InterruptRequestMsg():
                self._interrupt_request(msg.ref, msg.reply)
            case CancelRequestMsg():
                msg.reply.resolve(self._cancel_request(msg.ref))
            case AbandonAskMsg():
                self._abandon_ask(msg.ref, msg.timed_out)
            case HaltMsg():
                self._on_halt()
            case ResumeMsg():
                self._on_resume()
            case CheckpointMsg():
                self._on_checkpoint(msg)
            case PermissionMsg():
                self._on_permission(msg)
            case WatchdogMsg():
                turn = self.turn
                if self.gates.watchdog_fired(msg.armed, turn):
                    assert turn is not None
                    self._cancel_task(turn)
                    self._finish_error("timeout", self.state, self.session, turn)
            case RetryDueMsg():
                retry: Retry = msg.retry
                if self.self_chain is retry:
                    retry.due = True
                    if self.turn is None:
                        self._process_next()
            case RetryGeneratedMsg():
                self._retry_timer = None
                if self.turn is None:
                    self._process_next()
            case LimitWakeMsg():
                if self.turn is None and not self._terminated:
                    self._process_next()
            case ResetSessionMsg():
                self._on_reset_session(msg.reply)
            case GetSessionMsg():
                msg.reply.resolve(self.session)
            case DrainMsg():
                self._on_drain(msg.reply)
            case StopMsg():
                msg.reply.resolve(None)
                raise StopAgent(msg.reason)
            case CallMsg():
                msg.reply.fail(RequestError("unknown_request"))
            case _:
                self.log.debug("gen_agent ignored an unknown message ({})", type(msg).__name__)

    # ------------------------------------------------------------------ telemetry helpers
    def _emit(self, name: tuple[str, ...], measurements: dict[str, Any],
              metadata: dict[str, Any]) -> None:
        metadata["agent"] = self.name
        telemetry.execute(name, measurements, metadata)

    def _now(self) -> dict[str, Any]:
        return {"system_time": time.time_ns()}

    def _set_phase(self, phase: str) -> None:
        if self.phase != phase:
            previous, self.phase = self.phase, phase
            if attached(telemetry.STATE_CHANGED):
                self._emit(telemetry.STATE_CHANGED, self._now(), {"from": previous, "to": phase})

    def _turn_meta(self, request: Request, attempt: int, **extra: Any) -> dict[str, Any]:
        origin = "tell" if request.origin == "tell" else request.origin
        return {"ref": request.ref, "attempt": attempt, "origin": origin, **extra}

    def _rejected(self, request: Request, attempt: int, reason_kind: Any) -> None:
        self._emit(telemetry.TURN_REJECTED, self._now(),
                   self._turn_meta(request, attempt, reason_kind=reason_kind))

    def _input_rejected(self, reason: Any) -> None:
        self._emit(telemetry.INPUT_REJECTED, self._now(), {"reason": reason})

    # ------------------------------------------------------------------ admission (§4.5)
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

    def _can_dispatch_now(self) -> bool:
        """True if a new request may start now; takes the provider-limit permit it needs (a
        request that cannot have one is queued, and waits first in line)."""
        slot = self.self_chain
        return (self.turn is None and not self.halted and not self.draining
                and not (type(slot) is Retry and not slot.due) and self.gates.take_permit())

    def _on_ask(self, msg: AskMsg) -> None:
        if self.draining:
            self._input_rejected("draining")
            msg.reply.resolve(("error", "draining"))
            return
        request = Request("ask", msg.prompt, ref=msg.ref, reply=msg.reply, caller=msg.caller,
                          options=msg.options)
        if self._can_dispatch_now():
            self._dispatch_and_continue(request, request.prompt, 1)
        elif (reason := self._admit_prompt(request)) is not None:
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
        if self._can_dispatch_now():
            # The reply waits for pre_turn and the task start (§2.5); a completion may
            # already have been delivered by then (§2.6).
            outcome = self._dispatch(request, request.prompt, 1)
            msg.reply.resolve(("ok", request.ref))
            if outcome != "started":
                self._after_rejection(outcome)
        elif (reason := self._admit_prompt(request)) is not None:
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

    # ------------------------------------------------------------------ dispatch (§4.4, §4.6)
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
            if slot is None and not len(self.mailbox):
                if self.gates.limit is not None:
                    self.gates.drop_permit()
                return
            if not self.gates.take_permit():
                return  # it waits for its provider limit, first in the queue (LimitWakeMsg)
            if isinstance(slot, Retry):
                self.self_chain = None
                outcome = self._dispatch(slot.request, slot.prompt, slot.attempt)
            elif slot is not None:
                self.self_chain = None
                request = Request("self_chain", slot, options=self._chain_options)
                outcome = self._dispatch(request, slot, 1)
            elif len(self.mailbox):
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
        # The spend caps first (gen_agent.accounting): a refused turn runs no callback.
        over = self.gates.over_budget(self.spend)
        if over is not None:
            if request.generated:
                return self._reject_generated(request, attempt, ("budget_exceeded", over))
            return self._reject_external(request, attempt, ("budget_exceeded", over))
        accepted = self._pre_turn(request, prompt, attempt)
        if isinstance(accepted, str):
            return accepted
        final_prompt, self.state = accepted
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
        self.durable.turn_started(request, attempt)
        carrier = record.started(self._emit, self._turn_meta, turn, prompt, self.state,
                                 backend=self.backend, session=self.session,
                                 session_id=self.handle.session_id,
                                 queue_depth=len(self.mailbox))
        request.queued_at = None
        budget = None
        if self.opts.event_retention == "lossless":
            budget = LosslessBudget(self.opts.max_events_per_turn,
                                    self.opts.max_event_bytes_per_turn)
        options = request.options
        if options.output is None and self.opts.output is not None:
            options = msgspec.structs.replace(options, output=self.opts.output)
        context = TurnContext(agent=self.name, ref=request.ref, attempt=attempt,
                              cancel_event=turn.cancel_event,
                              checkpoint=self._checkpoint_fn(turn), options=options,
                              trace_carrier=carrier,
                              permission=self._permission_fn(turn), info=self._send_info)
        self._set_phase("processing")
        self.gates.start_watchdog(turn)
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
        set_request(_info(request, prompt, attempt))
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

    # ------------------------------------------------------------------ the running turn
    def _drain_channel(self, task_id: int) -> None:
        """Take everything the current turn task queued, in order (see `_turn.TurnChannel`)."""
        turn = self.turn
        if turn is None or turn.task_id != task_id:
            return  # a retired task's late wake-up: its channel is no longer read
        channel = turn.channel
        channel.scheduled = False
        items, add = channel.items, turn.capture.add
        stream_to, ref = turn.request.stream_to, turn.request.ref
        # a streaming reader (gen_agent.stream) may hold the relay back: see `_relay_paused`
        pause = None if stream_to is None else getattr(stream_to, "pause_relay", None)
        taken = 0
        while items:
            if pause is not None and self._relay_paused(pause, channel):
                break
            item = items.popleft()
            if type(item) is TurnDoneMsg:
                self._on_turn_done(item)
                return
            add(item[0], item[1])
            taken += item[1]
            if stream_to is not None:
                deliver_to(stream_to, StreamEvent("gen_agent", "event", self.name, ref, item[0]))
        channel.taken(taken)

    def _relay_paused(self, pause: Any, channel: Any) -> bool:
        """Ask a streaming reader whether its buffer is full. If it is, stop draining this
        turn's channel: the turn task then waits at the channel's byte bound, the agent
        does not. `channel.scheduled` stays True so the task sends no wake-ups meanwhile; the
        reader's resume sends the one that drains again. (Beyond §4.18, which has no
        backpressure: only `gen_agent.stream` readers have `pause_relay`.)"""
        handle, task_id = self.handle, channel.task_id
        try:
            paused = pause(lambda: handle.tell_unchecked(TurnWakeMsg(task_id)))
        except Exception as exc:  # noqa: BLE001 - a broken reader must not stall the turn
            self.log.warning("gen_agent stream reader raised {}", type_name(exc))
            return False
        if paused:
            channel.scheduled = True
        return bool(paused)

    def _on_turn_done(self, msg: TurnDoneMsg) -> None:
        turn = self.turn
        if turn is None or turn.task_id != msg.task_id:
            return  # a retired task's late outcome
        if msg.kind == "result":
            response = turn.capture.response(duration_ms=msg.duration_ms, prompt=turn.prompt)
            if turn.checkpoint_error is not None:
                self._retire(turn)
                self._finish_error(turn.checkpoint_error, msg.stream_state, self.session, turn)
                return
            session = self._reapply_checkpoint(turn, msg.session)
            output = turn.request.options.output
            self.spend, response, invalid = record.complete(
                self.spend, response, self.opts.output if output is None else output)
            # the conversation record, before the decision
            kind = self.durable.turn_ended(turn.task_id, turn.request.ref, session, response)
            if kind is not None:
                self._retire(turn)
                self._finish_error(("store_failed", kind), msg.stream_state, session, turn)
                return
            if invalid is not None:
                self._retire(turn)
                self._finish_error(invalid, msg.stream_state, session, turn)
                return
            record.stopped(self._emit, self._turn_meta, turn, response, msg.duration_ms,
                           msg.stream_state)
            self._retire(turn)
            self._finish_turn(turn, response, session, msg.stream_state)
        elif msg.kind == "crashed":
            self._retire(turn)
            self._finish_error(turn.checkpoint_error or msg.reason, self.state, self.session,
                               turn)
        else:
            session = self._forget_dead_session(msg.reason,
                                                self._reapply_checkpoint(turn, msg.session))
            self._retire(turn)
            self._finish_error(turn.checkpoint_error or msg.reason, msg.stream_state, session,
                               turn)

    def _retire(self, turn: Turn) -> None:
        self.turn = None
        self.gates.release_permit(turn.capture.usage)

    def _cancel_task(self, turn: Turn) -> None:
        turn.cancel_event.set()
        turn.channel.wake()  # a task waiting for channel room sees the cancellation
        cancel = getattr(self.backend, "cancel", None)
        if cancel is not None:
            try:
                cancel(self.session)
            except Exception as exc:  # noqa: BLE001 - cancellation is best effort; logged
                log_exception(self.log, "WARNING", "gen_agent backend cancel raised", exc)
        self._retire(turn)

    def _interrupt(self) -> None:
        turn = self.turn
        assert turn is not None
        self._cancel_task(turn)
        self._finish_error("interrupted", self.state, self.session, turn)

    def _interrupt_request(self, ref: Any, reply: Any) -> None:
        if self.turn is None:
            reply.resolve("idle")
        elif self.turn.request.ref != ref:
            reply.resolve("not_current")
        else:
            reply.resolve("accepted")  # the acknowledgement precedes the turn's outcome
            self._interrupt()

    # ------------------------------------------------------------------ turn completion (§4.7)
    def _finish_turn(self, turn: Turn, response: Any, session: Any, stream_state: Any) -> None:
        request = turn.request
        set_request(_info(request, turn.prompt, turn.attempt))
        try:
            decision = self.impl.handle_response(request.ref, response, stream_state)
        except Exception as exc:  # noqa: BLE001 - not protected: the agent stops (§3.7)
            log_exception(self.log, "ERROR", "gen_agent handle_response/3 crashed", exc)
            raise StopAgent(("callback_failed", "error", type_name(exc)), cause=exc) from None
        if not valid_decision(decision):
            self.log.error("gen_agent state callback failed (error: other)")
            raise StopAgent(("callback_failed", "error", "other"))
        self.session = session
        if isinstance(response.session_id, str) and response.session_id:
            self.handle.session_id = response.session_id
        outcome = ("ok", response)
        self.state = (decision.state if self._post_turn_cb is None
                      else self._post_turn(outcome, request.ref, decision.state))
        self.durable.save_state(self.impl, self.state)
        set_request(None)
        self._deliver(request, outcome)
        self._transition(decision, request.options)

    def _finish_error(self, reason: Any, state: Any, session: Any, turn: Turn) -> None:
        request, attempt = turn.request, turn.attempt
        self.gates.hold(reason)
        elapsed = record.elapsed_ms(turn)
        self.state, self.session = state, session
        # the turn is over: clear its in-flight marker
        self.durable.turn_ended(turn.task_id, request.ref, session, None, reason)
        record.failed(self._emit, self._turn_meta, turn, reason, state, elapsed,
                      self.handle.session_id)
        set_request(_info(request, turn.prompt, attempt))
        decision = self._call_handle_error(
            request.ref, reason, delay_ok=not request.generated and reason != "interrupted")
        self.state = self._post_turn(("error", reason), request.ref, decision.state)
        self.durable.save_state(self.impl, self.state)
        set_request(None)
        if (type(decision) is Prompt and not self.draining and reason != "interrupted"
                and not request.generated):
            self._own_retry(request, decision.text, attempt, reason, decision.delay_ms)
            self._transition(NoReply(self.state))
            return
        self._deliver(request, ("error", reason))
        self._transition(decision, request.options)

    def _own_retry(self, request: Request, prompt: str, attempt: int, reason: Any,
                   delay_ms: int | None = None) -> None:
        """Keep the caller waiting and retry under the same ref (§4.8), after `delay_ms` on
        the agent's timer when given (the slot is held meanwhile: queued work waits, §4.21)."""
        info = self._self_chain_overload(prompt)
        if info is None:
            retry = Retry(request, prompt, attempt + 1)
            if delay_ms:
                retry.due = False
                retry.timer = TIMERS.schedule(
                    delay_ms / 1000, lambda: self.handle.tell_unchecked(RetryDueMsg(retry)))
            self.self_chain = retry
            request.queued_at = monotonic_ms()
            return
        overload = ("overloaded", info)
        self._input_rejected(overload)
        self._deliver(request, ("error", reason))
        self._generated_failure(RequestRef.new(), overload)

    def _transition(self, decision: Any, options: RequestOptions = DEFAULT_OPTIONS) -> None:
        if type(decision) is Prompt:
            if not self.draining:
                self._offer_self_chain(decision.text, options=options)
            halt = self._drain_pending()
        elif type(decision) is Halt:
            halt = True
        else:
            halt = self._drain_pending() if len(self.pending) else False
        if halt or (self.halt_pending and not self.draining):
            self._enter_halted()
        self.halt_pending = False
        self._set_phase("idle")
        self._process_next()

    def _post_turn(self, outcome: tuple[str, Any], ref: RequestRef, state: Any) -> Any:
        fn = self._post_turn_cb
        if fn is None:
            return state
        try:
            return fn(outcome, ref, state)
        except Exception as exc:  # noqa: BLE001 - protected (§3.10)
            log_exception(self.log, "WARNING", "gen_agent post_turn/3 raised", exc)
            return state

    def _call_handle_error(self, ref: RequestRef, reason: Any, *, delay_ok: bool = False) -> Any:
        """Run handle_error (protected). `delay_ok`: a `Prompt(..., delay_ms=n)` retry is
        allowed (an ask/tell turn that was not interrupted); elsewhere it is malformed."""
        fn = self._optional("handle_error")
        if fn is None:
            return NoReply(self.state)
        try:
            decision = fn(ref, reason, self.state)
        except Exception as exc:  # noqa: BLE001 - protected (§3.8)
            log_exception(self.log, "ERROR", "gen_agent handle_error/3 failed", exc)
            return NoReply(self.state)
        if not valid_decision(decision) and not (delay_ok and valid_retry_delay(decision)):
            self.log.error("gen_agent handle_error/3 returned unexpected shape{}",
                           " (delay_ms is only for retries of an ask/tell turn, an int >= 0)"
                           if type(decision) is Prompt else "")
            return NoReply(self.state)
        return decision

    def _deliver(self, request: Request, outcome: tuple[str, Any]) -> None:
        """Give a finished request its one outcome: reply, cache, completion (§4.7 step 4)."""
        if request.origin == "ask":
            self._replies.append((request.reply, outcome))
        elif request.origin == "tell":
            self.results.put(request.ref, outcome)
            if request.completion and (request.watch is None or request.watch.claim()):
                deliver_to(request.recipient, Completion.of(self.name, request.ref, outcome))

    # ------------------------------------------------------------------ notifications (§4.10)
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

    # ------------------------------------------------------------------ termination (§4.19)
    def _terminate(self, reason: Any, *, stop_actor: bool = True,
                   cause: BaseException | None = None) -> None:
        self._terminated = True
        set_request(None)
        self._flush_replies()
        turn = self.turn
        if reason in _GRACEFUL:
            terminated = ("error", ("agent_terminated", reason))
            if turn is not None and turn.request.origin == "ask":
                turn.request.reply.resolve(terminated)
            if isinstance(self.self_chain, Retry) and self.self_chain.request.origin == "ask":
                self.self_chain.request.reply.resolve(terminated)
            for request in self.mailbox.clear():
                if request.origin == "ask":
                    request.reply.resolve(terminated)
        if turn is not None:
            self._cancel_task(turn)
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        if isinstance(self.self_chain, Retry):
            self.self_chain.cancel_timer()
        fn = self._optional("terminate_agent")
        if fn is not None:
            try:
                fn(reason, self.state)
            except Exception as exc:  # noqa: BLE001 - protected (§3.12)
                log_exception(self.log, "ERROR", "gen_agent terminate_agent/2 failed", exc)
        try:
            self.backend.terminate_session(self.session)
        except Exception as exc:  # noqa: BLE001 - protected (§4.19)
            log_exception(self.log, "ERROR", "gen_agent terminate_session failed", exc)
        self.durable.close()
        self._emit(telemetry.TERMINATED, self._now(), {"reason": reason})
        if reason not in _GRACEFUL:
            self.log.error("gen_agent agent stopped ({})", redacted(reason))
        self._exit(reason, unregister=True, stop_actor=stop_actor, cause=cause)

    def _exit(self, reason: Any, *, unregister: bool, stop_actor: bool = True,
              cause: BaseException | None = None) -> None:
        self.gates.drop_permit()
        if unregister:
            self.handle.system._unregister(self.handle)
        self.handle.close(reason, cause)
        if stop_actor:
            self.stop()  # on_stop, run next in this thread, marks the handle exited


__all__ = ["RAISED_DURING_START", "AgentActor", "TurnError", "deliver_to"]

"""The agent actor: the contract's state machine on one pykka actor (`ActorBase`).

One actor thread per agent runs every agent-side callback and owns all agent data; turns run
in turn tasks (`turn.py`) that report back through the mailbox. The actor is made of named
parts, each in its own module: startup (`startup.py`), admission (`admission.py`), dispatch
and `pre_turn` (`dispatch.py`), notifications (`inputs.py`) and control calls (`controls.py`)
are mixins over the actor's data; the gates before a turn (`gates.py`), its durability
(`durable.py`, a null object without a store; `repair.py` for a cut turn), its capture
(`capture.py`) and its record and telemetry (`record.py`) are collaborators with their own
state. What stays here is the
message `match`, the running turn, and the failure policy in one place, `_finish_turn` /
`_finish_error` / `_deliver`: which errors reach the caller, which reach `handle_error`,
which stop the agent (only `handle_response` and the runtime's own bugs), and which are only
logged (the protected callbacks).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import msgspec
from loguru import logger

from gen_agent import telemetry
from gen_agent._accounting import Spend
from gen_agent._agent import GenAgent, Halt, NoReply, Prompt
from gen_agent._context import (
    set_current,
    set_request,
)
from gen_agent._delivered import Completion, StreamEvent
from gen_agent._errors import (
    RequestError,
)
from gen_agent._event import monotonic_ms
from gen_agent._reasons import redacted
from gen_agent._request_options import DEFAULT_OPTIONS, RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._runtime import record
from gen_agent._runtime.actor import ActorBase
from gen_agent._runtime.admission import AdmissionMixin
from gen_agent._runtime.busy import STEERED_JOINED, BusyMixin
from gen_agent._runtime.controls import ControlsMixin
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.dispatch import DispatchMixin, info_of
from gen_agent._runtime.durable import NO_DURABILITY, Durable, InProcessRepair, NoDurability
from gen_agent._runtime.gates import Gates
from gen_agent._runtime.handle import AgentHandle
from gen_agent._runtime.inputs import InputsMixin
from gen_agent._runtime.mailbox import (
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
    InterruptReceiptMsg,
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
from gen_agent._runtime.pending import BoundedQueue
from gen_agent._runtime.replay import AttachMsg, DeactivateMsg, ReplayBuffer, attach, deactivate
from gen_agent._runtime.results import ResultCache
from gen_agent._runtime.startup import StartupMixin
from gen_agent._runtime.work import (
    Phase,
    Request,
    Retry,
    StopAgent,
    Turn,
    deliver_to,
    type_name,
    valid_decision,
    valid_retry_delay,
)
from gen_agent._timers import TIMERS

_GRACEFUL = ("normal", "shutdown")




class AgentActor(StartupMixin, AdmissionMixin, BusyMixin, DispatchMixin, InputsMixin,
                 ControlsMixin, ActorBase):
    """The GenServer-like agent. Internal: users talk to it through `gen_agent._client`.

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
        self.phase = Phase.STARTING
        self.halted = False
        self.halt_pending = False
        self.draining = False
        self.turn: Turn | None = None
        self.self_chain: str | Retry | None = None
        self._chain_options = DEFAULT_OPTIONS  # the options of a str self_chain follow-up
        self._discarded: Any = None  # (ref, by): the rolled-back turn's request (busy.py)
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
        self._handles_permissions = False  # the agent has handle_tool_permission (on_start)
        self._replies: list[tuple[Any, Any]] = []
        self.log = logger.bind(gen_agent=self.name, gen_agent_module=module.__name__)
        # The agent's running totals (gen_agent._accounting); reset_session keeps them.
        self.spend = options.spend if options.spend is not None else Spend()
        if options.hibernate_after_ms is not None:
            self.enable_hibernation(options.hibernate_after_ms / 1000)
        self.replay = (None if not options.replay_turns else ReplayBuffer(
            self.name, options.replay_turns, options.max_event_bytes_per_turn))
        self.durable: Durable | NoDurability = NO_DURABILITY
        if options.store is not None and options.session_key is not None:
            self.durable = Durable(options.store, options.session_key, self.name, backend,
                                   self.log, lambda: not handle.closed)
        elif getattr(module, "repair_interrupted_turns", False) is True:
            self.durable = InProcessRepair(self.name, backend, self.log)  # opt-in, no store

    def __repr__(self) -> str:
        # Redacted (§3.14): never the session, state, prompts or queues.
        return (f"<AgentActor module={self.module.__name__} phase={self.phase.value} "
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
        if self.turn is not None or self._retry_timer is not None or self.stopping:
            return False
        self.gates.disarm()  # before the flag: once it is set, a wake may arm it anew
        if self.replay is not None:
            self.replay.clear()  # a hibernated agent keeps no replay data
        idle = getattr(self.backend, "idle_session", None)
        if idle is not None and self.session is not None:
            try:
                idle(self.session)  # e.g. an HTTP backend closes its connections
            except Exception as exc:  # noqa: BLE001 - best effort; the agent hibernates anyway
                log_exception(self.log, "WARNING", "gen_agent idle_session raised", exc)
        return True

    # ------------------------------------------------------------------ message loop
    def on_receive(self, message: Any) -> Any:
        stopping = self.phase is Phase.STOPPING  # inline: this runs for every message
        if self.handle.closed and not stopping:
            self._killed()  # cut off by a supervisor after its shutdown window
            stopping = True
        if stopping:
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
        # (after buffered notifications and post_run; docs/pages/contract.md#s12-11).
        replies, self._replies = self._replies, []
        for reply, outcome in replies:
            reply.resolve(outcome)

    def on_stop(self) -> None:
        # Reached through pykka's own stop (ActorRef.stop): stop gracefully.
        if not self.stopping:
            self._terminate("shutdown", stop_actor=False)
        self.gates.disarm()
        self.handle.exited.set()

    def _killed(self) -> None:
        # A kill runs no cleanup callbacks (§2.19); only the turn task is told to stop.
        self.phase = Phase.STOPPING
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
            case InterruptReceiptMsg():
                self._interrupt_receipt(msg.reply)
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
                    self._finish_error("timeout", self.state, self._cut(turn, "timeout"),
                                       turn)
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
                if self.turn is None and not self.stopping:
                    self._process_next()
            case ResetSessionMsg():
                self._on_reset_session(msg.reply)
            case GetSessionMsg():
                msg.reply.resolve(self.session)
            case DrainMsg():
                self._on_drain(msg.reply)
            case AttachMsg():
                attach(self, msg)
            case DeactivateMsg():
                deactivate(self, msg)
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

    @property
    def stopping(self) -> bool:
        """True once the agent terminates (or failed to start): it handles nothing more."""
        return self.phase is Phase.STOPPING

    def _set_phase(self, phase: Phase) -> None:
        if self.phase is not phase:
            previous, self.phase = self.phase, phase
            if telemetry.STATE_CHANGED in telemetry._table:  # attached, without a call
                self._emit(telemetry.STATE_CHANGED, self._now(),
                           {"from": previous.reported, "to": phase.reported})

    def _turn_meta(self, request: Request, attempt: int, **extra: Any) -> dict[str, Any]:
        origin = "tell" if request.origin == "tell" else request.origin
        return {"ref": request.ref, "attempt": attempt, "origin": origin, **extra}

    def _rejected(self, request: Request, attempt: int, reason_kind: Any) -> None:
        self._emit(telemetry.TURN_REJECTED, self._now(),
                   self._turn_meta(request, attempt, reason_kind=reason_kind))

    def _input_rejected(self, reason: Any) -> None:
        self._emit(telemetry.INPUT_REJECTED, self._now(), {"reason": reason})

    # ------------------------------------------------------------------ the running turn
    def _drain_channel(self, task_id: int) -> None:
        """Take everything the current turn task queued, in order (see `turn.TurnChannel`)."""
        turn = self.turn
        if turn is None or turn.task_id != task_id:
            return  # a retired task's late wake-up: its channel is no longer read
        channel = turn.channel
        channel.scheduled = False
        items, add = channel.items, turn.capture.add
        stream_to, ref, replay = turn.request.stream_to, turn.request.ref, self.replay
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
            if replay is not None:
                replay.event(ref, item[0], item[1])
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
            session = (msg.session if turn.checkpoint_id is None
                       else self._reapply_checkpoint(turn, msg.session))
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
            joined = self._settle_steered(turn, _steered_count(response)) if turn.steered else ()
            if joined:
                response = msgspec.structs.replace(response,
                                                   joined=tuple(r.ref for r in joined))
                turn.steered = joined
            record.stopped(self._emit, self._turn_meta, turn, response, msg.duration_ms,
                           msg.stream_state)
            self._retire(turn)
            self._finish_turn(turn, response, session, msg.stream_state)
        elif msg.kind == "crashed":
            self._retire(turn)
            self._finish_error(turn.checkpoint_error or msg.reason, self.state, self.session,
                               turn)
        else:
            session = self._forget_dead_session(msg.reason, (
                msg.session if turn.checkpoint_id is None
                else self._reapply_checkpoint(turn, msg.session)))
            self._retire(turn)
            self._finish_error(turn.checkpoint_error or msg.reason, msg.stream_state, session,
                               turn)

    def _retire(self, turn: Turn) -> None:
        self.turn = None
        self.handle.turn_mark = None
        gates = self.gates
        if gates.permit:
            gates.release_permit(turn.capture.usage)
        if gates.capped:
            gates.charge(self.spend)

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
        self._finish_error("interrupted", self.state, self._cut(turn, "interrupted"), turn)

    def _cut(self, turn: Turn, reason: str) -> Any:
        """The session kept after an interrupt or the watchdog: the one from before the
        turn (§4.13), or the repaired one of an agent with `repair_interrupted_turns`."""
        return self.durable.cut_short(turn.task_id, self.session, self._backend_opts, reason)

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
        set_request(info_of(request, turn.prompt, turn.attempt))
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
        for joined in turn.steered:  # busy="steer" requests this turn took: its outcome
            self._deliver(joined, outcome)
        self._transition(decision, request.options)

    def _finish_error(self, reason: Any, state: Any, session: Any, turn: Turn) -> None:
        request, attempt = turn.request, turn.attempt
        self.gates.hold(reason)
        elapsed = record.elapsed_ms(turn)
        self.state, self.session = state, session
        # the turn is over: clear its in-flight marker
        self.durable.turn_ended(turn.task_id, request.ref, session, None, reason)
        steered = self._settle_steered(turn, None)  # a failed turn fails those it took
        record.failed(self._emit, self._turn_meta, turn, reason, state, elapsed,
                      self.handle.session_id)
        set_request(info_of(request, turn.prompt, attempt))
        decision = self._call_handle_error(
            request.ref, reason, delay_ok=not request.generated and reason != "interrupted")
        self.state = self._post_turn(("error", reason), request.ref, decision.state)
        self.durable.save_state(self.impl, self.state)
        set_request(None)
        for joined in steered:
            self._deliver(joined, ("error", reason))
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
            halt = self._drain_pending() if self.pending.items else False
        if halt or (self.halt_pending and not self.draining):
            self._enter_halted()
        self.halt_pending = False
        self._set_phase(Phase.IDLE)
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
        if self.replay is not None:
            self.replay.finish(request.ref, outcome)
        if request.options.lifecycle_to is not None:
            self._lifecycle_end(request, outcome)
        if request.origin == "ask":
            self._replies.append((request.reply, outcome))
        elif request.origin == "tell":
            self.results.put(request.ref, outcome)
            if request.completion and (request.watch is None or request.watch.claim()):
                deliver_to(request.recipient, Completion.of(self.name, request.ref, outcome))

    # ------------------------------------------------------------------ termination (§4.19)
    def _terminate(self, reason: Any, *, stop_actor: bool = True,
                   cause: BaseException | None = None) -> None:
        self.phase = Phase.STOPPING
        set_request(None)
        self._flush_replies()
        turn = self.turn
        if reason in _GRACEFUL:
            terminated = ("error", ("agent_terminated", reason))
            for held in () if turn is None else (turn.request, *turn.steered):
                if held.origin == "ask":
                    held.reply.resolve(terminated)
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


def _steered_count(response: Any) -> Any:
    """How many `busy="steer"` requests the backend reports the turn took (0 unless told)."""
    terminal = response.terminal
    return 0 if terminal is None else terminal.data.get(STEERED_JOINED, 0)


__all__ = ["AgentActor"]

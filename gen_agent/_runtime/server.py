"""The agent actor: the state machine of contract §4 on one pykka `ThreadingActor`.

One actor thread per agent runs every agent-side callback and owns all agent data; turns run
in turn tasks (`_turn.py`) that report back through the mailbox. The failure policy lives in
one place, `_finish_error` / `_deliver`: which errors reach the caller, which reach
`handle_error`, which stop the agent (only `handle_response` and the runtime's own bugs), and
which are only logged (the protected callbacks).
"""

from __future__ import annotations

import functools
import itertools
import queue
import sys
import threading
import time
from typing import Any

import msgspec
import pykka
import pykka.messages
from loguru import logger
from pykka._envelope import Envelope

from gen_agent import telemetry
from gen_agent._runtime.cancel import CancelSignal, TurnMark
from gen_agent._runtime.capture import Capture, LosslessBudget, tool_calls
from gen_agent._runtime.context import (
    current_handle,
    current_name,
    current_request,
    set_current,
    set_request,
)
from gen_agent._runtime.controls import ControlsMixin
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.durable import Durable
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
from gen_agent._runtime.reply import OnceEvent
from gen_agent._runtime.request import (
    Request,
    Retry,
    StopAgent,
    Turn,
    caller_alive,
    deliver_to,
    error_type,
    reason_kind,
    redacted,
    type_name,
    valid_decision,
    valid_retry_delay,
)
from gen_agent._runtime.results import ResultCache
from gen_agent._runtime.timers import TIMERS
from gen_agent._runtime.turn import TurnChannel, TurnSpec, start_turn
from gen_agent.accounting import Spend, add_turn, check_budget
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
from gen_agent.output import InvalidOutput, parse_output
from gen_agent.ref import RequestRef
from gen_agent.request import DEFAULT_OPTIONS, RequestInfo, RequestOptions
from gen_agent.response import Response
from gen_agent.size import term_size
from gen_agent.telemetry import attached

#: The detail of an `("init_failed", "error", T)` start error (the exception is chained).
RAISED_DURING_START = "(raised during start; the original exception is __cause__)"

_GRACEFUL = ("normal", "shutdown")


class _HibernatingInbox(queue.SimpleQueue):  # type: ignore[type-arg]
    """The inbox of an agent that may hibernate: a put wakes it when it is hibernated."""

    __slots__ = ("actor", "hibernated")

    actor: Any
    hibernated: bool

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        queue.SimpleQueue.put(self, item)
        if self.hibernated:
            self.actor._wake()
_RETRY_GENERATED_S = 0.010
_NO_CARRIER: dict[str, str] = {}  # the trace carrier of a turn nobody instruments (never written)


def _request_model(session: Any) -> str | None:
    """The model a session's options name (the bundled backends' `model` option), or None."""
    model = getattr(getattr(session, "options", None), "model", None)
    return model if type(model) is str else None


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


class AgentActor(ControlsMixin, pykka.ThreadingActor):
    """The GenServer-like agent. Internal: users talk to it through `gen_agent.client`.

    Two departures from a stock pykka actor, both for speed (issue 20): the inbox is a C
    `queue.SimpleQueue` (pykka's default `queue.Queue` is pure Python, with three conditions:
    most of a round trip's wake-up cost), and the actor is not entered in pykka's
    `ActorRegistry` (a list, scanned on every stop: stopping N agents would cost O(N^2));
    agents are registered in their `AgentSystem` instead, which stops them.
    """

    use_daemon_thread = True

    @staticmethod
    def _create_actor_inbox() -> Any:  # see _enable_hibernation for a hibernating agent
        # SimpleQueue has what pykka uses (put, get, empty) and qsize; it is unbounded, like
        # pykka's own inbox: the bounds of contract §3.9 are enforced by `self.mailbox`.
        return queue.SimpleQueue()

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> Any:
        """Create the actor and start its thread, without pykka's `ActorRegistry` (see the
        class docstring); returns its `ActorRef`."""
        obj = cls(*args, **kwargs)
        obj._start_actor_loop()
        return obj.actor_ref

    def __init__(self, handle: AgentHandle, module: type, backend: Any, options: AgentOptions,
                 init_opts: dict[str, Any], init_reply: Any) -> None:
        super().__init__()
        # pykka only sets and reads its stop flag: a lighter one (memory, issue 20).
        self.actor_stopped = self.actor_ref.actor_stopped = OnceEvent()  # type: ignore[assignment]
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
        self._limit = options.provider_limit  # a shared ProviderLimit, or None
        self._permit = False  # holds one of its permits (between dispatch and the turn's end)
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
        self._watchdog: Any = None  # the agent's watchdog timer (see `_arm_watchdog`)
        self._watchdog_armed = 0
        self._replies: list[tuple[Any, Any]] = []
        self._terminated = False
        self.log = logger.bind(gen_agent=self.name, gen_agent_module=module.__name__)
        self._hibernate_s: float | None = None
        self._wake_lock: threading.Lock | None = None
        self._hibernating_inbox: _HibernatingInbox | None = None
        self.hibernations = 0  # times this agent's thread ended while idle (tests, benches)
        # The agent's running totals (gen_agent.accounting); reset_session keeps them.
        self.spend = options.spend if options.spend is not None else Spend()
        if options.hibernate_after_ms is not None:
            self._enable_hibernation(options.hibernate_after_ms)
        self.durable: Durable | None = None
        if options.store is not None and options.session_key is not None:
            self.durable = Durable(options.store, options.session_key, self.name, backend,
                                   self.log, lambda: not handle.closed)

    def __repr__(self) -> str:
        # Redacted (§3.14): never the session, state, prompts or queues.
        return (f"<AgentActor module={self.module.__name__} phase={self.phase} "
                f"halted={self.halted} draining={self.draining}>")

    __str__ = __repr__

    # ------------------------------------------------------------------ hibernation
    # BEAM's `:hibernate`, for threads (issue 20): an idle agent (no turn, no retry timer)
    # whose inbox stays empty for `hibernate_after_ms` ends its actor thread; everything else
    # (state, session, queues, caches) stays in this object, and its inbox keeps accepting.
    # The next message put into the inbox starts a new actor thread that carries on with the
    # same loop, so order is kept and nothing is lost. Race-free without a lock on the send
    # path: the actor sets `inbox.hibernated` *before* its last emptiness check and a sender
    # reads it *after* its put, so one of them always sees the other; `_wake_lock` makes the
    # flag's True -> False transitions (resume, or the actor changing its mind) exclusive.

    def _enable_hibernation(self, after_ms: int) -> None:
        inbox = _HibernatingInbox()
        inbox.actor = self
        inbox.hibernated = False
        self.actor_inbox = self._hibernating_inbox = inbox
        self.actor_ref.actor_inbox = inbox  # the ref copied pykka's inbox when it was made
        self._hibernate_s = after_ms / 1000
        self._wake_lock = threading.Lock()

    def _actor_loop(self) -> None:
        self._actor_loop_setup()
        self._run_loop()

    def _start_actor_loop(self) -> None:
        if self._hibernate_s != 0 or getattr(self.module, "pre_run", None) not in (
                None, GenAgent.pre_run):
            super()._start_actor_loop()
            return
        # hibernate_after_ms=0 and no pre_run (which must run after start_agent returned,
        # §4.3): initialise in the starting thread and begin hibernated, so starting 100,000
        # such agents starts no thread at all.
        self._inline(self._start_hibernated)

    def _start_hibernated(self) -> None:
        self._actor_loop_setup()  # on_start: init_agent, start_session, pre_run
        if not self._hibernate():
            self._wake(force=True)  # messages arrived meanwhile (or it stopped): a thread

    def _inline(self, body: Any) -> None:
        # Run `body` as this agent's thread in the calling thread, then give the calling
        # thread its own identity back (it may itself be another agent's thread).
        name, handle, request = current_name(), current_handle(), current_request()
        me = self.handle.actor_thread = threading.get_ident()
        set_current(self.name, self.handle)
        try:
            body()
        finally:
            if self.handle.actor_thread == me:
                self.handle.actor_thread = None  # hibernated or stopped: no thread is its own
            set_current(name, handle)
            set_request(request)

    def run_inline(self, message: Any) -> bool:
        """If this agent hibernates, put `message` in its inbox and run the agent in the
        calling thread until it hibernates again or stops; False (nothing done) if it is
        awake. Used to stop hibernated agents without starting a thread for each."""
        inbox, lock = self._hibernating_inbox, self._wake_lock
        if inbox is None or lock is None:
            return False
        with lock:
            if not inbox.hibernated:
                return False
            inbox.hibernated = False  # claimed: the put below wakes nobody
        if self.actor_stopped.is_set():
            return False
        inbox.put(message)
        self._inline(self._run_loop)
        return True

    def _run_loop(self) -> None:
        if self._hibernate_s is None:
            inbox, stopped, receive = self.actor_inbox, self.actor_stopped, self._receive
            while not stopped.is_set():
                receive(inbox.get())
        elif self._loop_until_hibernated():
            return  # hibernated: this thread ends, the agent lives on
        self._actor_loop_teardown()

    def _loop_until_hibernated(self) -> bool:
        """pykka's receive loop, but an idle agent hibernates. True when it did (the thread
        must end at once), False when the actor stopped."""
        inbox, stopped, after = self._hibernating_inbox, self.actor_stopped, self._hibernate_s
        assert inbox is not None and after is not None
        while not stopped.is_set():
            try:
                envelope = inbox.get(timeout=after) if after > 0 else inbox.get(block=False)
            except queue.Empty:
                if self._hibernate():
                    return True
                envelope = inbox.get()  # busy (a turn runs): wait for its next message
            self._receive(envelope)
        return False

    def _receive(self, item: Any) -> None:
        # As pykka's `_actor_loop_running` handles one envelope, but the runtime's own
        # messages come bare (`AgentHandle.send`): no `Envelope` to build, no dispatch on
        # pykka's message types (issue 20). pykka's own (stop, a user's `ActorRef.tell`) still
        # come enveloped.
        reply_to = item.reply_to if type(item) is Envelope else None
        try:
            if type(item) is not Envelope:
                self.on_receive(item)
            else:
                response = self._handle_receive(item.message)
                if reply_to is not None:
                    reply_to.set(response)
        except Exception:  # noqa: BLE001 - as pykka: to the asker, else logged
            if reply_to is not None:
                reply_to.set_exception()
            else:
                self._handle_failure(*sys.exc_info())
                try:
                    self.on_failure(*sys.exc_info())
                except Exception:  # noqa: BLE001 - as pykka
                    self._handle_failure(*sys.exc_info())
        except BaseException:  # noqa: BLE001 - as pykka: stop on KeyboardInterrupt/SystemExit
            self._stop()
            pykka.ActorRegistry.stop_all()

    def _actor_loop_teardown(self) -> None:
        # pykka's teardown reads `reply_to` of every envelope left; bare messages carry
        # `Reply`s, which `AgentHandle.close` has already failed (the handle closes first).
        inbox = self.actor_inbox
        while not inbox.empty():
            item = inbox.get()
            if type(item) is Envelope and item.reply_to is not None:
                if isinstance(item.message, pykka.messages._ActorStop):
                    item.reply_to.set(None)
                else:
                    item.reply_to.set_exception(exc_info=(
                        pykka.ActorDeadError,
                        pykka.ActorDeadError(f"{self.actor_ref} stopped before handling the "
                                             "message"), None))

    def _hibernate(self) -> bool:
        if self.turn is not None or self._retry_timer is not None or self._terminated:
            return False
        self._disarm_watchdog()  # before the flag: once it is set, a wake may arm it anew
        inbox, lock = self._hibernating_inbox, self._wake_lock
        assert inbox is not None and lock is not None
        with lock:
            inbox.hibernated = True
            if not inbox.empty() or self.actor_stopped.is_set():
                inbox.hibernated = False  # a message came in meanwhile: carry on
                return False
            self.handle.actor_thread = None
            self.hibernations += 1
        return True

    def _wake(self, force: bool = False) -> None:
        """Resume a hibernated agent on a new actor thread (called by `_HibernatingInbox.put`
        in the sender's thread; `force`: start the thread even though the agent was not
        marked hibernated). Raises RuntimeError when no thread can be started: the message
        stays queued and the next put tries again."""
        inbox, lock = self._hibernating_inbox, self._wake_lock
        assert inbox is not None and lock is not None
        with lock:
            if not inbox.hibernated and not force:
                return
            inbox.hibernated = False
            thread = threading.Thread(target=self._resumed, daemon=True,
                                      name=f"{type(self).__name__}-{self.name!s:.40}")
            try:
                thread.start()
            except BaseException:
                inbox.hibernated = True
                raise

    def _resumed(self) -> None:
        self.handle.actor_thread = threading.get_ident()
        set_current(self.name, self.handle)
        self._run_loop()

    # ------------------------------------------------------------------ startup (§4.3)
    def on_start(self) -> None:
        self.handle.actor_thread = threading.get_ident()
        set_current(self.name, self.handle)
        try:
            self.impl = self.module()
            backend_opts, state = self._init_agent()
            self._backend_opts = backend_opts
            try:
                if self.durable is not None:  # resume from the store (gen_agent.store)
                    self.session, state = self.durable.open(
                        self.impl, backend_opts, state, self._start_session)
                    if self.durable.resumed and self.opts.spend is None:
                        # The spend caps count what the stored session already spent.
                        self.spend = _spend_of(self.durable.totals)
                else:
                    self.session = self._start_session(backend_opts)
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
        check = getattr(self.backend, "check_prompt", None)  # refuses prompts at the client
        self.handle.check_prompt = None if check is None else functools.partial(
            check, self.session)
        self._set_phase("idle")
        self._init_reply.resolve(self.handle)
        self._run_pre_run()
        if self.durable is not None and self.durable.interrupted is not None \
                and not self._terminated:
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
        if self.durable is not None:
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
        self._disarm_watchdog()
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
                if msg.armed == self._watchdog_armed:
                    self._watchdog = None
                    turn = self.turn
                    if turn is not None and turn.deadline is not None:
                        if time.monotonic() < turn.deadline:
                            self._arm_watchdog(turn.deadline)  # armed for an earlier turn
                        else:
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
                and not (type(slot) is Retry and not slot.due) and self._take_permit())

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
                if self._limit is not None:
                    self._drop_permit()
                return
            if not self._take_permit():
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
            self._drop_permit()
        return outcome

    def _start_turn(self, request: Request, prompt: str, attempt: int) -> str:
        # The spend caps first (gen_agent.accounting): a refused turn runs no callback.
        opts = self.opts
        if opts.max_cost_usd is not None or opts.max_total_tokens is not None:
            over = check_budget(self.spend, opts.max_cost_usd, opts.max_total_tokens)
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
        mark = TurnMark(request.ref)  # what interrupt / stop / the watchdog mark at once
        if self.durable is not None:
            self.durable.turn_started(request, attempt)
        if attached(telemetry.PROMPT_START):
            self._emit(telemetry.PROMPT_START, self._now(), self._turn_meta(
                request, attempt, prompt=final_prompt, original_prompt=prompt,
                rewritten=final_prompt != prompt, agent_state=self.state))
        carrier = _NO_CARRIER
        if attached(telemetry.TURN_START):
            carrier = {}
            queued_at = request.queued_at
            self._emit(telemetry.TURN_START, {
                "system_time": time.time_ns(),
                "queue_wait_ms": 0 if queued_at is None else max(0, monotonic_ms() - queued_at),
                "queue_depth": len(self.mailbox),
            }, self._turn_meta(
                request, attempt, backend=self.backend, request_model=_request_model(self.session),
                session_id=self.handle.session_id, trace_context=request.options.trace_context,
                trace_carrier=carrier))
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
                              permission=self._permission_fn(turn, mark),
                              info=self._send_info)
        self._set_phase("processing")
        if self.opts.watchdog_ms is not None:
            turn.deadline = mark.deadline = time.monotonic() + self.opts.watchdog_ms / 1000
            if self._watchdog is None:
                self._arm_watchdog(turn.deadline)
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
            response, invalid = self._complete_record(turn.request, response)
            if self.durable is not None:  # the conversation record, before the decision
                kind = self.durable.turn_ended(turn.task_id, turn.request.ref, session, response)
                if kind is not None:
                    self._retire(turn)
                    self._finish_error(("store_failed", kind), msg.stream_state, session, turn)
                    return
            if invalid is not None:
                self._retire(turn)
                self._finish_error(invalid, msg.stream_state, session, turn)
                return
            if attached(telemetry.PROMPT_STOP):
                self._emit(telemetry.PROMPT_STOP, {"duration": msg.duration_ms},
                           self._turn_meta(turn.request, turn.attempt,
                                           agent_state=msg.stream_state, response=response))
            if attached(telemetry.TURN_STOP):
                self._emit(telemetry.TURN_STOP, _stop_measurements(
                               self._elapsed(turn), msg.duration_ms, response),
                           self._turn_meta(
                               turn.request, turn.attempt, model=response.model,
                               provider=response.provider, finish_reason=response.stop_reason,
                               usage=response.usage, cost_usd=response.cost_usd,
                               session_id=response.session_id,
                               tool_calls=tool_calls(response.events)))
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

    def _complete_record(self, request: Request, response: Response) -> tuple[Response, Any]:
        """Add the turn to the agent's totals and validate a structured reply.

        Returns `(response, None)` with `session_usage`/`session_cost_usd` (and `parsed`)
        filled, or `(response, ("invalid_output", InvalidOutput))` (gen_agent.output).
        """
        if response.usage is not None or response.cost_usd is not None:
            self.spend = add_turn(self.spend, response.usage, response.cost_usd)
        spend = self.spend
        if spend.turns:
            response = msgspec.structs.replace(
                response, session_usage=dict(spend.usage) if spend.usage else None,
                session_cost_usd=spend.cost_usd)
        output = request.options.output
        if output is None:
            output = self.opts.output
        if output is None:
            return response, None
        try:
            parsed = parse_output(output, response)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return response, ("invalid_output", InvalidOutput(message=str(exc),
                                                              response=response))
        return msgspec.structs.replace(response, parsed=parsed), None

    def _elapsed(self, turn: Turn) -> int:
        return max(0, monotonic_ms() - turn.started_at)

    def _arm_watchdog(self, deadline: float) -> None:
        # One timer per agent, not one per turn (issue 20): it is left running when a turn
        # ends; when it fires, the agent checks the turn running then, against that turn's
        # own deadline, and arms it again for that deadline if it is not due yet. So a busy
        # agent schedules about one timer per `watchdog_ms`, and a watchdog still fires
        # exactly `watchdog_ms` after its turn started. Cancelled when the agent hibernates
        # or stops.
        armed = self._watchdog_armed = self._watchdog_armed + 1
        handle = self.handle

        def fire() -> None:
            handle.tell_unchecked(WatchdogMsg(armed))
            handle.mark_due(time.monotonic())  # a pending permission decision ends now

        self._watchdog = TIMERS.schedule(deadline - time.monotonic(), fire)

    def _disarm_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _retire(self, turn: Turn) -> None:
        self.turn = None
        self.handle.turn_mark = None
        if self._permit:
            self._permit = False
            self._limit.release(_tokens_spent(turn.capture.usage))  # type: ignore[union-attr]

    # ------------------------------------------------------------------ provider limits
    def _take_permit(self) -> bool:
        """True when the next turn may dispatch: no `provider_limit`, a permit already held,
        or one taken now; else the limit wakes this agent when one may be free."""
        limit = self._limit
        if limit is None or self._permit:
            return True
        self._permit = limit.try_acquire(self.handle, self._limit_wake)
        return self._permit

    def _drop_permit(self) -> None:
        if self._permit:
            self._permit = False
            self._limit.release()  # type: ignore[union-attr]
        elif self._limit is not None:
            self._limit.forget(self.handle)

    def _limit_wake(self) -> None:
        self.handle.tell_unchecked(LimitWakeMsg())

    def _hold_limit(self, reason: Any) -> None:
        """A rate-limited or overloaded turn with `retry_after`: hold the whole key back."""
        retry_after = getattr(reason, "retry_after_ms", None)
        if self._limit is not None and isinstance(retry_after, (int, float)) and retry_after > 0:
            self._limit.hold(retry_after)

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
        if self.durable is not None:
            self.durable.save_state(self.impl, self.state)
        set_request(None)
        self._deliver(request, outcome)
        self._transition(decision, request.options)

    def _finish_error(self, reason: Any, state: Any, session: Any, turn: Turn) -> None:
        request, attempt = turn.request, turn.attempt
        self._hold_limit(reason)
        elapsed = self._elapsed(turn)
        self.state, self.session = state, session
        if self.durable is not None:  # the turn is over: clear its in-flight marker
            self.durable.turn_ended(turn.task_id, request.ref, session, None, reason)
        self._emit(telemetry.PROMPT_ERROR, {"system_time": time.time_ns(),
                                            "duration": elapsed},
                   self._turn_meta(request, attempt, reason=reason, agent_state=state))
        if attached(telemetry.TURN_ERROR):
            capture = turn.capture
            terminal = capture.terminal.data if capture.terminal is not None else {}
            self._emit(telemetry.TURN_ERROR, {"duration_ms": elapsed}, self._turn_meta(
                request, attempt, reason_kind=reason_kind(reason), error_type=error_type(reason),
                model=terminal.get("model"), provider=terminal.get("provider"),
                usage=capture.usage, session_id=self.handle.session_id,
                tool_calls=tool_calls(capture.events)))
        set_request(_info(request, turn.prompt, attempt))
        decision = self._call_handle_error(
            request.ref, reason, delay_ok=not request.generated and reason != "interrupted")
        self.state = self._post_turn(("error", reason), request.ref, decision.state)
        if self.durable is not None:
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
        if self.durable is not None:  # state changed outside a turn is stored too
            self.durable.save_state(self.impl, self.state)
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
        if self.durable is not None:  # state changed outside a turn is stored too
            self.durable.save_state(self.impl, self.state)
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
        if self.durable is not None:
            self.durable.close()
        self._emit(telemetry.TERMINATED, self._now(), {"reason": reason})
        if reason not in _GRACEFUL:
            self.log.error("gen_agent agent stopped ({})", redacted(reason))
        self._exit(reason, unregister=True, stop_actor=stop_actor, cause=cause)

    def _exit(self, reason: Any, *, unregister: bool, stop_actor: bool = True,
              cause: BaseException | None = None) -> None:
        self._drop_permit()
        if unregister:
            self.handle.system._unregister(self.handle)
        self.handle.close(reason, cause)
        if stop_actor:
            self.stop()  # on_stop, run next in this thread, marks the handle exited


__all__ = ["RAISED_DURING_START", "AgentActor", "TurnError", "deliver_to"]


def _tokens_spent(usage: Any) -> int:
    """Input + output tokens of a turn's latest usage (0 when unknown), for token rates."""
    if not isinstance(usage, dict):
        return 0
    return sum(v for k in ("input_tokens", "output_tokens")
               if isinstance(v := usage.get(k), int) and not isinstance(v, bool))


def _spend_of(totals: Any) -> Spend:
    """The accounting `Spend` of a store's `Totals` (gen_agent.store)."""
    cost = totals.cost_usd if totals.cost_usd else None
    return Spend(usage=dict(totals.usage), cost_usd=cost, turns=totals.turns)


def _stop_measurements(duration_ms: int, backend_duration_ms: int,
                       response: Any) -> dict[str, Any]:
    """TURN_STOP measurements: `duration_ms`, `backend_duration_ms`, plus `input_tokens` /
    `output_tokens` (ints) and `cost_usd` (float) when the backend reported them. Numbers
    only, never content."""
    measurements: dict[str, Any] = {"duration_ms": duration_ms,
                                    "backend_duration_ms": backend_duration_ms}
    usage = response.usage
    if isinstance(usage, dict):
        for key in ("input_tokens", "output_tokens"):
            value = usage.get(key)
            if type(value) is int:
                measurements[key] = value
    cost = response.cost_usd
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        measurements["cost_usd"] = float(cost)
    return measurements

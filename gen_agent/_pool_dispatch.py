"""The dispatcher of a `gen_agent.Pool`: the side that runs on its own actor, not in callers.

A `Pool` is split by thread. Its public methods (`gen_agent/_pool.py`) run in the callers'
threads and only queue, look and wait; everything that reacts to the workers runs here, in
one `PoolDispatcher` actor on the package's actor base (`gen_agent._runtime.ActorBase`):
worker starts and exits reported by the pool's supervisor, completions, retry timers, and
handing queued tasks to workers with room. Both sides share the pool's state under its
condition variable; the dispatcher's mailbox takes the typed messages below.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import msgspec
from loguru import logger

from gen_agent._agent_ref import AgentRef
from gen_agent._child_spec import ChildEvent
from gen_agent._errors import AgentDown, TurnError
from gen_agent._request_options import RequestOptions
from gen_agent._runtime import ActorBase, log_exception
from gen_agent._timers import TIMERS

if TYPE_CHECKING:
    from gen_agent._pool import _Slot, _Task


# ---------------------------------------------------------------------- the mailbox
class ChildMsg(msgspec.Struct, frozen=True):
    """The supervisor started or lost a worker."""
    event: Any


class CompletionMsg(msgspec.Struct, frozen=True):
    """A worker answered a task (its completion, or a `Down` record)."""
    task: Any
    handle: Any
    message: Any


class ForgetMsg(msgspec.Struct, frozen=True):
    """`resize` removed these slots."""
    slots: Any


class RetryDueMsg(msgspec.Struct, frozen=True):
    """A failed task's retry delay has passed."""
    task: Any


class DispatchMsg(msgspec.Struct, frozen=True):
    """Work or room may be there: hand out what can go."""


class SupervisorDownMsg(msgspec.Struct, frozen=True):
    """The pool's supervisor ended: every task fails, the dispatcher stops."""
    reason: Any


class StopMsg(msgspec.Struct, frozen=True):
    """`Pool.stop`: the dispatcher stops."""


class PoolDispatcher(ActorBase):
    """The actor a pool's dispatcher runs on: it hands each message to the pool's dispatch
    side and stops on `StopMsg`, `SupervisorDownMsg`, or a failure of its own (every task then
    fails with `("pool_down", ("pool_failed", type))` rather than leaving a caller hanging)."""

    def __init__(self, pool: Any) -> None:
        super().__init__()
        self._pool = pool
        self.name = pool.name_prefix
        self.thread: int | None = None

    def _bind_thread(self) -> None:
        self.thread = threading.get_ident()

    def on_start(self) -> None:
        self._bind_thread()

    def on_receive(self, message: Any) -> Any:
        pool = self._pool
        try:
            if type(message) is StopMsg:
                self.stop_now()
                return None
            if type(message) is SupervisorDownMsg:
                pool._on_supervisor_down(message.reason)
                self.stop_now()
                return None
            pool._on_message(message)
            pool._dispatch_ready()
        except Exception as exc:  # noqa: BLE001 - fail every task rather than hang callers
            log_exception(logger, "ERROR", "gen_agent pool dispatcher failed", exc)
            pool._on_supervisor_down(("pool_failed", type(exc).__name__))
            if pool._supervisor.is_alive():
                pool._supervisor.stop(None)
            self.stop_now()
        return None

    def on_stop(self) -> None:
        self._pool._dispatcher_stopped()


def tell_incarnation(handle: Any, prompt: str, recipient: Any,
                      options: RequestOptions) -> tuple[str, Any]:
    # An AgentRef addresses its own incarnation (never a restarted one under the same name),
    # so a task is counted against the worker that really took it. AgentDown propagates.
    # monitor=True: the recipient gets the completion or, if the worker ends first, a Down.
    try:
        return "ok", AgentRef(handle).tell_with_completion(
            prompt, recipient, on_halt="fail", options=options, monitor=True)
    except TurnError as exc:
        return "error", exc.reason



class PoolDispatchMixin:
    """The dispatcher's side of `Pool` (see the module docstring): runs in its actor only."""

    # Provided by Pool.
    _cond: threading.Condition
    _slots: list[Any]
    _shared: Any
    _retrying: set[Any]
    _stopping: bool
    _stopped: threading.Event
    _down_reason: Any
    _rr: int
    _supervisor: Any
    _system: Any
    _dispatcher: PoolDispatcher
    retry: Any
    routing: str
    max_in_flight: int
    _resolve: Any
    _take_queued: Any
    _take_retrying: Any

    def _on_child_event(self, event: ChildEvent) -> None:
        self._dispatcher.post(ChildMsg(event))  # supervisor thread: post only

    def _dispatcher_stopped(self) -> None:
        self._stopped.set()
        self._system._untrack("pool", self)
        with self._cond:
            self._cond.notify_all()

    def _on_message(self, message: Any) -> None:
        match message:
            case ChildMsg():
                self._on_child(message.event)
            case CompletionMsg():
                self._on_completion(message.task, message.handle, message.message)
            case ForgetMsg():
                with self._cond:
                    self._slots = [s for s in self._slots if s not in message.slots]
            case RetryDueMsg():
                with self._cond:
                    task = message.task
                    if task in self._retrying and not self._stopping:
                        self._retrying.discard(task)
                        task.timer = None
                        self._requeue(task, front=True)
            case DispatchMsg():
                pass  # the dispatch after every message is what it asks for

    def _on_supervisor_down(self, reason: Any) -> None:
        with self._cond:
            self._down_reason = reason
            failure = (("agent_terminated", "shutdown") if self._stopping
                       else ("pool_down", reason))
            for task in [*self._take_queued(), *self._take_retrying()]:
                self._resolve(task, ("error", failure))
            for slot in self._slots:
                for task in slot.in_flight.values():
                    self._resolve(task, ("error", failure))
                slot.in_flight.clear()
                slot.handle = None

    def _slot(self, name: Any) -> _Slot | None:
        for slot in self._slots:
            if slot.name == name:
                return slot
        return None

    def _on_child(self, event: ChildEvent) -> None:
        with self._cond:
            slot = self._slot(event.id)
            if slot is None:
                return
            handle = event.ref._handle
            if event.kind == "started":
                slot.handle = handle
                return
            if slot.handle is handle:
                slot.handle = None
            # The supervisor reports an incarnation's exit before starting the next one, and
            # tasks go only to incarnations reported started: all in flight here were its.
            reason = ("agent_terminated", "shutdown") if self._stopping else (
                "worker_down", event.reason)
            for task in [t for t in slot.in_flight.values()]:
                self._resolve(task, ("error", reason))
            slot.in_flight.clear()
            self._cond.notify_all()

    def _on_completion(self, task: _Task, handle: Any, message: Any) -> None:
        if message.kind == "down":
            # the worker ended before the task completed: the same outcome as its exit event
            outcome: tuple[str, Any] = ("error", ("agent_terminated", "shutdown")
                                        if self._stopping else ("worker_down", message.reason[1]))
        else:
            outcome = message.outcome
        with self._cond:
            slot = next((s for s in self._slots if s.in_flight.get(task.ref.id) is task), None)
            if slot is None:
                return  # already failed (its worker died) or unknown
            del slot.in_flight[task.ref.id]
            task.tell_ref = None
            if outcome == ("error", "draining") and task.outcome is None:
                self._requeue(task, front=True)  # never ran: a removed worker refused it
                return
            if message.kind != "down":
                slot.completed += 1  # as the exit event does, a worker_down is not counted
            if (outcome[0] == "error" and self.retry is not None and task.outcome is None
                    and not self._stopping and self.retry.should_retry(outcome[1],
                                                                       task.attempt)):
                self._retry_later(task, self.retry.delay_ms(outcome[1], task.attempt))
                return
            self._resolve(task, outcome)

    def _retry_later(self, task: _Task, delay_ms: int) -> None:
        """Put `task` back in the queue after `delay_ms` (caller holds the lock)."""
        task.attempt += 1
        self._retrying.add(task)
        post = self._dispatcher.post
        task.timer = TIMERS.schedule(delay_ms / 1000, lambda: post(RetryDueMsg(task)))

    def _requeue(self, task: _Task, *, front: bool) -> None:
        if self.routing == "round_robin" and task.slot is not None:
            if task.slot.retiring:
                remaining = [s for s in self._slots if not s.retiring]
                task.slot = remaining[self._rr % len(remaining)]
                self._rr += 1
            target = task.slot.queue
        else:
            target = self._shared
        if front:
            target.appendleft(task)
        else:
            target.append(task)

    def _next_assignment(self) -> tuple[_Slot, Any, _Task] | None:
        """Pick a (slot, incarnation, task) to dispatch and reserve the slot's capacity."""
        with self._cond:
            if self._stopping:
                return None
            ready = [s for s in self._slots if s.handle is not None and not s.retiring
                     and len(s.in_flight) < self.max_in_flight]
            if self.routing == "round_robin":
                slot = next((s for s in ready if s.queue), None)
                task = slot.queue.popleft() if slot is not None else None
            elif self._shared and ready:
                slot = min(ready, key=lambda s: (len(s.in_flight), s.dispatched))
                task = self._shared.popleft()
            else:
                slot = task = None
            if slot is None or task is None:
                return None
            slot.in_flight[task.ref.id] = task
            slot.dispatched += 1
            return slot, slot.handle, task

    def _options_of(self, task: _Task) -> RequestOptions:
        """The task's request options: the pool's (with its `output`), with the submitter's
        trace context."""
        if task.trace_context is None:
            return task.options
        return msgspec.structs.replace(task.options, trace_context=task.trace_context)

    def _dispatch_ready(self) -> None:
        post = self._dispatcher.post
        while (assignment := self._next_assignment()) is not None:
            slot, handle, task = assignment

            def recipient(message: Any, task: _Task = task, handle: Any = handle) -> None:
                post(CompletionMsg(task, handle, message))  # a worker thread: post only

            try:
                outcome = tell_incarnation(handle, task.prompt, recipient,
                                            self._options_of(task))
            except AgentDown:
                outcome = None  # the incarnation ended before taking it: not dispatched
            with self._cond:
                if outcome is not None and outcome[0] == "ok":
                    if slot.in_flight.get(task.ref.id) is task and task.outcome is None:
                        task.tell_ref = outcome[1]
                    continue
                if slot.in_flight.pop(task.ref.id, None) is None:
                    continue  # already failed by the worker's exit
                slot.dispatched -= 1
                if outcome is None or outcome == ("error", "draining"):
                    if slot.handle is handle and outcome is None:
                        slot.handle = None  # known dead; its "exited" event follows
                    self._requeue(task, front=True)
                else:
                    self._resolve(task, outcome)

"""The turn task: one per dispatched prompt (docs/pages/contract.md#s4-6, "Inside the task").

It calls `backend.prompt`, pulls the event stream, runs `handle_stream_event`, and hands each
event and then its outcome to the agent, tagged with its task id. It never touches agent data:
everything it needs is passed in, everything it learns is sent back. Python threads cannot be
killed, so interrupt, watchdog and stop set `cancel_event` (and call the backend's `cancel`);
the task then stops at the next event and its late messages are dropped by the agent.

Events travel through a `TurnChannel`, not one mailbox message each: the task appends to the
channel and sends a wake-up message only when none is pending, and the agent drains everything
queued when it handles the wake-up. An idle agent therefore sees each event at once, a busy one
takes them in batches, and order is kept (the outcome is the channel's last item).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from loguru import logger

from gen_agent._cancel import CancelSignal
from gen_agent._context import set_current, trace_carrier_activation
from gen_agent._event import TERMINAL_KINDS, Event
from gen_agent._runtime.capture import LosslessBudget
from gen_agent._runtime.mailbox import TurnDoneMsg, TurnWakeMsg
from gen_agent._size import term_size
from gen_agent.backend import DispatchError, TurnContext


class TurnChannel:
    """Single-producer (turn task) / single-consumer (agent) FIFO with coalesced wake-ups
    and a byte bound.

    Correct under the GIL: the producer appends, then reads `scheduled`; the consumer clears
    `scheduled`, then drains. A producer that reads True appended before the clear, so the
    drain after that clear sees its item.

    Backpressure: when more than `max_bytes` of events (term_size bytes) are queued and not
    yet taken by the agent, the producer waits until the agent catches up or the turn is
    cancelled, so a fast stream of large events never piles up in memory (each counter is
    written by one side only, so no lock is needed to count).
    """

    __slots__ = (
        "cancel_event",
        "cond",
        "handle",
        "items",
        "max_bytes",
        "pushed_bytes",
        "scheduled",
        "taken_bytes",
        "task_id",
        "waiting",
    )

    def __init__(self, handle: Any, task_id: int, max_bytes: int,
                 cancel_event: CancelSignal) -> None:
        self.handle = handle
        self.task_id = task_id
        self.items: deque[Any] = deque()
        self.scheduled = False
        self.max_bytes = max_bytes
        self.pushed_bytes = 0  # written by the producer only
        self.taken_bytes = 0  # written by the consumer only
        self.waiting = False
        self.cond: threading.Condition | None = None  # made when the producer first waits
        self.cancel_event = cancel_event

    def push(self, item: Any, size: int = 0) -> None:
        """Queue `item` ((event, size) or a TurnDoneMsg) and wake the agent if needed; wait
        while more than `max_bytes` are queued."""
        self.items.append(item)
        if not self.scheduled:
            self.scheduled = True
            self.handle.tell_unchecked(TurnWakeMsg(self.task_id))
        if size:
            self.pushed_bytes += size
            if self.pushed_bytes - self.taken_bytes > self.max_bytes:
                self._wait_for_room()

    def _wait_for_room(self) -> None:
        if self.cond is None:
            self.cond = threading.Condition(threading.Lock())
        with self.cond:
            self.waiting = True
            self.cond.notify_all()  # observers (tests, debuggers) may wait for this state
            while (self.pushed_bytes - self.taken_bytes > self.max_bytes
                   and not self.cancel_event.is_set() and not self.handle.closed):
                self.cond.wait()
            self.waiting = False

    def taken(self, size: int) -> None:
        """The consumer took items of `size` bytes in total: let a waiting producer go on."""
        self.taken_bytes += size
        if self.waiting and self.cond is not None:
            with self.cond:
                self.cond.notify()

    def wake(self) -> None:
        """Release a waiting producer (the turn was cancelled or the agent closed)."""
        cond = self.cond
        if cond is not None:
            with cond:
                cond.notify()


class TurnSpec:
    """Everything one turn task needs; built by the agent at dispatch. Its handle, task id
    and cancel signal are its channel's (one copy per turn)."""

    __slots__ = ("backend", "budget", "channel", "context", "prompt", "session", "state",
                 "stream_cb")

    def __init__(
        self, channel: TurnChannel, backend: Any, session: Any, prompt: str,
        context: TurnContext, stream_cb: Callable[[Event, Any], Any] | None, state: Any,
        budget: LosslessBudget | None,
    ) -> None:
        self.channel = channel
        self.backend = backend
        self.session = session
        self.prompt = prompt
        self.context = context
        self.stream_cb = stream_cb
        self.state = state
        self.budget = budget


class _Worker:
    __slots__ = ("inbox", "thread")

    def __init__(self) -> None:
        # The next spec is handed over through a C SimpleQueue: one put and one get, cheaper
        # than a threading.Event's condition.
        self.inbox: queue.SimpleQueue[TurnSpec] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None


class TurnWorkers:
    """Parked daemon threads that run turn tasks, so a turn does not pay for a new thread.

    A worker runs one turn at a time; when the turn ends it parks for `idle_s` seconds
    waiting for the next one, then exits. A worker whose turn was abandoned (interrupt,
    watchdog) is simply busy until its backend call returns; it is never waited for.
    """

    def __init__(self, idle_s: float = 30.0) -> None:
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._watchers = 0  # threads in wait_parked: only they need `_changed` notified
        self._idle: list[_Worker] = []

    def submit(self, spec: TurnSpec) -> threading.Thread:
        """Run `spec` on a parked worker, or on a new one; return the worker's thread."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker()
            worker.thread = threading.Thread(
                target=self._loop, args=(worker, spec), name="gen_agent-turn", daemon=True)
            worker.thread.start()
        else:
            worker.inbox.put(spec)
        assert worker.thread is not None
        return worker.thread

    def idle_threads(self) -> list[threading.Thread]:
        """The threads parked between turns (not running any turn)."""
        with self._lock:
            return [w.thread for w in self._idle if w.thread is not None]

    def wait_parked(self, thread: threading.Thread, timeout: float) -> bool:
        """Wait up to `timeout` seconds until `thread` is parked or gone; True if it is."""
        def settled() -> bool:
            return not thread.is_alive() or any(w.thread is thread for w in self._idle)

        with self._changed:
            self._watchers += 1
            try:
                return self._changed.wait_for(settled, timeout)
            finally:
                self._watchers -= 1

    def _loop(self, worker: _Worker, spec: TurnSpec) -> None:
        while True:
            activate = trace_carrier_activation() if spec.context.trace_carrier else None
            if activate is None:
                outcome = _run(spec)
            else:
                with activate(spec.context):  # the turn's span is current here
                    outcome = _run(spec)
            set_current(None, None)
            with self._lock:
                self._idle.append(worker)
                if self._watchers:
                    self._changed.notify_all()
            if outcome is not None:
                # Pushed once parked: the agent, which may dispatch its next turn as soon as
                # it has this outcome, then finds this worker idle instead of starting a
                # new thread.
                try:
                    spec.channel.push(outcome)
                except Exception as exc:  # noqa: BLE001 - a parked worker must survive
                    logger.warning("gen_agent turn outcome lost ({})", type(exc).__name__)
            try:
                spec = worker.inbox.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if worker in self._idle:
                        self._idle.remove(worker)
                        if self._watchers:
                            self._changed.notify_all()
                        return
                spec = worker.inbox.get()  # claimed just as the wait timed out: it is coming


WORKERS = TurnWorkers()
"""The process-wide pool of turn task threads."""


def start_turn(spec: TurnSpec) -> threading.Thread:
    """Run the turn task on a pooled daemon thread and return that thread."""
    return WORKERS.submit(spec)


def _terminal_reason(event: Event) -> Any:
    reason = event.data.get("reason")
    return "unknown" if reason is None or reason is False else reason


def _run(spec: TurnSpec) -> TurnDoneMsg | None:
    """Run one turn; return its outcome for the channel (None once cancelled), which the
    worker pushes after parking (see `TurnWorkers._loop`)."""
    channel = spec.channel
    handle = channel.handle
    set_current(handle.name, handle)
    push = channel.push
    task_id = channel.task_id
    cancel = channel.cancel_event
    state = spec.state
    started = time.monotonic_ns() // 1_000_000  # ms, as `_event.monotonic_ms`

    def done(kind: str, reason: Any, session: Any) -> TurnDoneMsg | None:
        if cancel.is_set():
            return None
        return TurnDoneMsg(task_id, kind, reason, session, state,
                           time.monotonic_ns() // 1_000_000 - started)

    try:
        try:
            stream, session = spec.backend.prompt(spec.session, spec.prompt, spec.context)
        except DispatchError as exc:
            return done("dispatch_error", exc.reason, spec.session)
        terminal, overflow = None, None
        stream_cb, budget = spec.stream_cb, spec.budget
        journal = getattr(spec.context, "journal", None)
        observe = None if journal is None else journal.observe
        iterator = iter(stream)
        try:
            for event in iterator:
                if cancel.is_set():
                    return None
                if type(event) is not Event:
                    raise TypeError(f"backend stream yielded {type(event).__name__}, not Event")
                size = term_size(event)
                if budget is not None:
                    overflow = budget.admit(event.kind, size)
                    if overflow is not None:
                        break
                if observe is not None:
                    observe(event)  # the tool journal: CLI tools, usage so far
                if stream_cb is not None:
                    state = stream_cb(event, state)
                push((event, size), size)
                if event.kind in TERMINAL_KINDS:
                    terminal = event
                    break
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # stop early: run the generator's cleanup (§4.6)
        if overflow is not None:
            return done("stream_error", ("event_capture_overflow", overflow), session)
        if terminal is None:
            return done("stream_error", "no_terminal_event", session)
        if terminal.kind == "error":
            return done("stream_error", _terminal_reason(terminal), session)
        update = getattr(spec.backend, "update_session", None)
        if update is not None:
            session = update(session, terminal.data)
        return done("result", None, session)
    except BaseException as exc:  # noqa: BLE001 - any failure of the task is delivered as a crash
        state = spec.state  # a crash discards the threaded state (§3.6)
        return done("crashed", ("task_crashed", exc), spec.session)

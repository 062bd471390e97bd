"""The turn task: one thread per dispatched prompt (contract §4.6, "Inside the task").

It calls `backend.prompt`, pulls the event stream, runs `handle_stream_event`, and sends each
event and then its outcome into the agent's mailbox tagged with its task id. It never touches
agent data: everything it needs is passed in, everything it learns is sent back. Python
threads cannot be killed, so interrupt, watchdog and stop set `cancel_event` (and call the
backend's `cancel`); the task then stops at the next event and its late messages are dropped
by the agent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gen_agent._capture import LosslessBudget
from gen_agent._context import set_current
from gen_agent._messages import TurnDoneMsg, TurnEventMsg
from gen_agent.backend import DispatchError, TurnContext
from gen_agent.event import TERMINAL_KINDS, Event, monotonic_ms
from gen_agent.size import term_size


class TurnSpec:
    """Everything one turn task needs; built by the agent at dispatch."""

    __slots__ = (
        "backend", "budget", "cancel_event", "context", "handle", "prompt", "session",
        "state", "stream_cb", "task_id",
    )

    def __init__(
        self, *, handle: Any, task_id: int, backend: Any, session: Any, prompt: str,
        context: TurnContext, stream_cb: Callable[[Event, Any], Any] | None, state: Any,
        budget: LosslessBudget | None, cancel_event: threading.Event,
    ) -> None:
        self.handle = handle
        self.task_id = task_id
        self.backend = backend
        self.session = session
        self.prompt = prompt
        self.context = context
        self.stream_cb = stream_cb
        self.state = state
        self.budget = budget
        self.cancel_event = cancel_event


def start_turn(spec: TurnSpec) -> threading.Thread:
    """Start the turn task thread (daemon, so an abandoned task never blocks exit)."""
    thread = threading.Thread(
        target=_run, args=(spec,), name=f"gen_agent-turn-{spec.task_id}", daemon=True
    )
    thread.start()
    return thread


def _terminal_reason(event: Event) -> Any:
    reason = event.data.get("reason")
    return "unknown" if reason is None or reason is False else reason


def _run(spec: TurnSpec) -> None:
    handle = spec.handle
    set_current(handle.name, handle)
    send = handle.tell_unchecked
    task_id = spec.task_id
    cancel = spec.cancel_event
    state = spec.state
    started = monotonic_ms()

    def done(kind: str, reason: Any, session: Any) -> None:
        if not cancel.is_set():
            send(TurnDoneMsg(task_id, kind, reason, session, state, monotonic_ms() - started))

    try:
        try:
            stream, session = spec.backend.prompt(spec.session, spec.prompt, spec.context)
        except DispatchError as exc:
            done("dispatch_error", exc.reason, spec.session)
            return
        terminal, overflow = None, None
        stream_cb, budget = spec.stream_cb, spec.budget
        iterator = iter(stream)
        try:
            for event in iterator:
                if cancel.is_set():
                    return
                if type(event) is not Event:
                    raise TypeError(f"backend stream yielded {type(event).__name__}, not Event")
                size = term_size(event)
                if budget is not None:
                    overflow = budget.admit(event.kind, size)
                    if overflow is not None:
                        break
                if stream_cb is not None:
                    state = stream_cb(event, state)
                send(TurnEventMsg(task_id, event, size))
                if event.kind in TERMINAL_KINDS:
                    terminal = event
                    break
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # stop early: run the generator's cleanup (§4.6)
        if overflow is not None:
            done("stream_error", ("event_capture_overflow", overflow), session)
        elif terminal is None:
            done("stream_error", "no_terminal_event", session)
        elif terminal.kind == "error":
            done("stream_error", _terminal_reason(terminal), session)
        else:
            update = getattr(spec.backend, "update_session", None)
            if update is not None:
                session = update(session, terminal.data)
            done("result", None, session)
    except BaseException as exc:  # noqa: BLE001 - any failure of the task is delivered as a crash
        state = spec.state  # a crash discards the threaded state (§3.6)
        done("crashed", ("task_crashed", exc), spec.session)

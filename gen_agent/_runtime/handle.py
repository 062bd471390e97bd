"""`AgentHandle`: one incarnation of an agent, as seen from outside its actor thread.

It owns what callers need to talk to the actor safely: the pykka `ActorRef`, a lock that
serialises "is the agent still accepting?" with sending, and the set of outstanding replies,
so that however the agent ends every waiting caller is answered (`close`).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pykka
from loguru import logger

from gen_agent._errors import AgentDown, RequestError
from gen_agent._runtime.mailbox import (
    AbandonAskMsg,
    InterruptMsg,
    InterruptRequestMsg,
    StopMsg,
)
from gen_agent._runtime.reply import DeferredReply, OnceEvent, fail_all


class AgentHandle:
    """The per-incarnation link between callers and one agent actor. Thread-safe."""

    __slots__ = (
        "__weakref__", "_listeners", "_lock", "_tokens", "actor_ref", "actor_thread",
        "check_prompt", "closed", "exit_cause", "exit_reason", "exited", "module", "name",
        "outstanding", "session_id", "shutdown_ms", "system", "turn_mark",
    )

    def __init__(self, system: Any, name: Any, module: type, shutdown_ms: int | None) -> None:
        self.system = system
        self.name = name
        self.module = module
        self.shutdown_ms = shutdown_ms
        self.actor_ref: pykka.ActorRef[Any] | None = None
        self.actor_thread: int | None = None
        self.outstanding: set[DeferredReply] = set()
        self.closed = False
        self.exited = OnceEvent()
        self.exit_reason: Any = None
        self.exit_cause: BaseException | None = None  # the exception that stopped it, if any
        self.session_id: str | None = None  # last provider session id seen (for resume)
        # The backend's `check_prompt` bound to the session, set by the agent at start: asks
        # and tells whose prompt its wire cannot carry are refused before they are queued.
        self.check_prompt: Any = None
        # The running turn's `TurnMark` (set and cleared by the agent): what an interrupt,
        # a stop or the watchdog marks at once, before the agent thread reads the message.
        self.turn_mark: Any = None
        self._listeners: dict[int, Any] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def hibernated(self) -> bool:
        """True while the agent hibernates (idle, no actor thread; see `hibernate_after_ms`)."""
        ref = self.actor_ref
        return ref is not None and getattr(ref.actor_inbox, "hibernated", False)

    def run_if_hibernated(self, message: Any) -> bool:
        """Deliver `message` to a hibernated agent by running it in the calling thread (see
        `AgentActor.run_inline`); False when the agent is awake or closed (send it instead)."""
        ref = self.actor_ref
        if self.closed or ref is None or not getattr(ref.actor_inbox, "hibernated", False):
            return False
        return bool(getattr(ref.actor_inbox, "actor").run_inline(message))  # noqa: B009

    @property
    def alive(self) -> bool:
        """True until the agent stopped accepting messages."""
        return not self.closed

    def reply(self) -> DeferredReply:
        """A new reply tracked by this agent."""
        return DeferredReply(self.outstanding)

    def send(self, message: Any) -> bool:
        """Put `message` in the actor's mailbox; False if the agent no longer accepts.

        An interrupt, a stop, or an ask abandoned with `cancel_on_timeout` also marks the
        running turn it is about (its `TurnMark`) right after the message is queued: the
        turn's pending permission decision is answered at once, whatever the agent thread
        is doing. Marked after queuing, so whatever the turn does next reaches the agent
        after the message (never the message after the next turn started)."""
        with self._lock:
            ref = self.actor_ref
            if self.closed or ref is None or ref.actor_stopped.is_set():
                return False
            mark = self._mark_for(message)
            # Bare, without pykka's Envelope: the agent's loop takes both.
            ref.actor_inbox.put(message)
        if mark is not None:
            mark.mark()
        return True

    def _mark_for(self, message: Any) -> Any:
        """The mark of the running turn `message` stops, or None."""
        mark = self.turn_mark
        if mark is None:
            return None
        kind = type(message)
        if kind is InterruptMsg or kind is StopMsg:
            return mark
        if kind is InterruptRequestMsg or (kind is AbandonAskMsg and message.timed_out):
            return mark if message.ref == mark.ref else None
        return None

    def mark_due(self, now: float) -> None:
        """The watchdog fired: mark the running turn if its deadline (`time.monotonic()`
        seconds) has passed by `now` (called right after the watchdog's message is
        queued)."""
        mark = self.turn_mark
        if mark is not None and mark.deadline is not None and now >= mark.deadline:
            mark.mark()

    def call(self, make: Any, timeout: float | None) -> Any:
        """Send `make(reply)` and wait for the answer (`timeout` seconds, None = forever).

        Raises:
            AgentDown: the agent ended before or while answering.
            CallTimeout: no answer within `timeout`.
            RequestError: "calling_self" when called from this agent's own thread (it would
                wait for itself forever; a turn task may call its agent).
        """
        return self.request(make).wait(timeout)

    def request(self, make: Any) -> DeferredReply:
        """Send `make(reply)` and return the reply without waiting (the async client awaits
        it). A reply the agent can no longer take is failed with `AgentDown` at once.

        Raises:
            RequestError: "calling_self" from this agent's own thread (see `call`).
            ValueError: an ask or tell whose prompt the backend cannot carry (its
                `check_prompt` hook; nothing is sent).
        """
        if threading.get_ident() == self.actor_thread:
            raise RequestError("calling_self")
        reply = self.reply()
        message = make(reply)
        check = self.check_prompt
        if check is not None and type(prompt := getattr(message, "prompt", None)) is str:
            try:
                check(prompt)
            except BaseException as exc:
                self.outstanding.discard(reply)  # nothing was sent: nobody answers it
                if not isinstance(exc, ValueError):
                    raise
                fn = "ask" if type(message).__name__ == "AskMsg" else "tell"
                raise ValueError(f"{fn}: {exc}") from None
        if not self.send(message):
            reply.fail(self.down_error())
        return reply

    def on_exit(self, listener: Any) -> int | None:
        """Call `listener(handle, reason)` once when this incarnation closes (at once if it
        already has). Listeners run in the closing thread and must be quick (supervisors).
        Returns a token for `remove_exit_listener` (None when it already ran)."""
        with self._lock:
            if not self.closed:
                token = next(self._tokens)
                self._listeners[token] = listener
                return token
        listener(self, self.exit_reason)
        return None

    def remove_exit_listener(self, token: int | None) -> bool:
        """Forget the listener `on_exit` returned `token` for; False if it is not pending."""
        with self._lock:
            return token is not None and self._listeners.pop(token, None) is not None

    def down_error(self) -> AgentDown:
        """The `AgentDown` a caller gets from this (ended) incarnation, chained to the
        exception that stopped it when there was one."""
        error = AgentDown(self.exit_reason or "noproc")
        if self.exit_cause is not None:
            error.__cause__ = self.exit_cause
        return error

    def close(self, reason: Any, cause: BaseException | None = None) -> None:
        """Stop accepting, record the exit reason (and the exception behind it), fail every
        outstanding reply, then tell the exit listeners."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.exit_reason = reason
            self.exit_cause = cause
            listeners, self._listeners = list(self._listeners.values()), {}
            mark = self.turn_mark
        if mark is not None:  # a kill: the running turn's pending decision is a deny now
            mark.mark()
        fail_all(self.outstanding, self.down_error())
        remember = getattr(self.system, "_remember_exit", None)
        if remember is not None:
            remember(self)
        for listener in listeners:
            try:
                listener(self, reason)
            except Exception as exc:  # noqa: BLE001 - a listener must not break the close
                logger.warning("gen_agent exit listener raised {}", type(exc).__name__)

    def tell_unchecked(self, message: Any) -> None:
        """Send without the lock (turn tasks and timers; losing it after death is fine)."""
        ref = self.actor_ref
        # the agent may die meanwhile; its turn messages then no longer matter
        if ref is not None and not self.closed and not ref.actor_stopped.is_set():
            ref.actor_inbox.put(message)

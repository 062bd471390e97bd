"""`CancelSignal`: a turn's set-once cancel flag, cheap until someone waits on it; and
`TurnMark`: the turn as callers see it, marked by an interrupt before the agent acts on it.

Every turn needs a cancel signal, but few backends ever block on it; a `threading.Event`
costs a condition variable per turn. This flag answers `is_set()` from a plain attribute and
builds its `threading.Event` only when a backend asks for `TurnContext.cancel_event`.
"""

from __future__ import annotations

import threading

_LOCK = threading.Lock()
"""Shared by every signal: `set` and `event` are rare (a cancellation, a backend that waits),
so one lock serves them all and a turn allocates none."""


class CancelSignal:
    """Set-once flag with an on-demand `threading.Event`. Thread-safe."""

    __slots__ = ("_event", "_flag")

    def __init__(self) -> None:
        self._flag = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        """True once `set()` was called."""
        return self._flag

    def set(self) -> None:
        """Raise the flag and wake anyone waiting on the event (idempotent)."""
        with _LOCK:
            self._flag = True
            if self._event is not None:
                self._event.set()

    @property
    def event(self) -> threading.Event:
        """A `threading.Event` that is set when (or if) this signal is."""
        with _LOCK:
            if self._event is None:
                self._event = threading.Event()
                if self._flag:
                    self._event.set()
            return self._event

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or `timeout` seconds pass; True if set."""
        return self._flag or self.event.wait(timeout)


class TurnMark:
    """The running turn as callers see it, so that an interrupt, a stop or the watchdog is
    felt by the turn before the agent thread gets to the message (a blocking agent callback,
    typically `handle_tool_permission`, may hold that thread).

    The agent publishes the mark of the turn it starts on its handle (`AgentHandle.
    turn_mark`) and withdraws it when the turn ends. A caller's interrupt / stop / the
    watchdog `mark()` it right after queuing their message; from then on every permission
    wait the turn registered (`watch`) is answered at once with the value given there, and
    a later one is answered so at once too. Thread-safe; `mark` never blocks.

    Attributes:
        ref: the `RequestRef` of the turn's request (`interrupt_request(ref)` marks only
            its own turn).
        deadline: the watchdog's deadline (`time.monotonic()` seconds), or None.
    """

    __slots__ = ("_marked", "_waiting", "deadline", "ref")

    def __init__(self, ref: object) -> None:
        self.ref = ref
        self.deadline: float | None = None
        self._marked = False
        self._waiting: dict[object, object] = {}  # reply -> the value it gets when marked

    @property
    def marked(self) -> bool:
        """True once an interrupt, a stop or the watchdog marked the turn."""
        return self._marked

    def mark(self) -> None:
        """Mark the turn and answer every watched wait (idempotent; any thread)."""
        with _LOCK:
            if self._marked:
                return
            self._marked = True
            waiting, self._waiting = self._waiting, {}
        for reply, value in waiting.items():
            reply.resolve(value)  # type: ignore[attr-defined]

    def watch(self, reply: object, value: object) -> None:
        """Answer `reply` (a `DeferredReply`) with `value` when the turn is marked: now if it is."""
        with _LOCK:
            if not self._marked:
                self._waiting[reply] = value
                return
        reply.resolve(value)  # type: ignore[attr-defined]

    def unwatch(self, reply: object) -> None:
        """Forget `reply` (its wait ended)."""
        with _LOCK:
            self._waiting.pop(reply, None)

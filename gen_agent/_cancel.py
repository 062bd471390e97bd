"""`CancelSignal`: a turn's set-once cancel flag, cheap until someone waits on it.

Every turn needs a cancel signal, but few backends ever block on it; a `threading.Event`
costs a condition variable per turn. This flag answers `is_set()` from a plain attribute and
builds its `threading.Event` only when a backend asks for `TurnContext.cancel_event`.
"""

from __future__ import annotations

import threading

_LOCK = threading.Lock()
"""Shared by every signal: `set` and `event` are rare (a cancellation, a backend that waits),
so one lock serves them all and a turn allocates none (issue 20)."""


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

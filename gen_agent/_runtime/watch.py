"""`Watch`: exactly one of a completion or a down record for a monitored request (or a
plain monitor), however the incarnation ends (`gen_agent.monitor`, `monitor=True`)."""

from __future__ import annotations

import threading
from typing import Any

from gen_agent._delivered import Down
from gen_agent._request_ref import RequestRef
from gen_agent._runtime.work import deliver_to


class Watch:
    """One monitor of one incarnation: delivers at most one record to `recipient`.

    The first `claim()` wins: the agent claims it to deliver the completion; the exit
    listener claims it to deliver the `Down` record. Thread-safe.
    """

    __slots__ = ("_claimed", "_forget", "_handle", "_lock", "_token", "name", "recipient", "ref")

    def __init__(self, recipient: Any, name: Any, ref: RequestRef, forget: Any = None) -> None:
        self._forget = forget  # called with the ref once the down record went out
        self.recipient = recipient
        self.name = name
        self.ref = ref
        self._lock = threading.Lock()
        self._claimed = False
        self._handle: Any = None
        self._token: int | None = None

    def claim(self) -> bool:
        """Take the one delivery; False if it was taken. Stops listening for the exit."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            handle, token = self._handle, self._token
        if handle is not None:
            handle.remove_exit_listener(token)
        return True

    def attach(self, handle: Any) -> None:
        """Listen for the end of `handle`'s incarnation (at once if it has ended)."""
        with self._lock:
            self._handle = handle
        token = handle.on_exit(self._on_exit)
        with self._lock:
            self._token = token
            claimed = self._claimed
        if claimed:
            handle.remove_exit_listener(token)

    def _on_exit(self, _handle: Any, reason: Any) -> None:
        if self.claim():
            deliver_to(self.recipient, Down.of(self.name, self.ref, reason))
            if self._forget is not None:
                self._forget(self.ref)

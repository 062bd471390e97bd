"""Once-only replies from the agent actor to a waiting caller (deferred replies, §4.5).

A `Reply` is the smallest possible future: a lock held from creation is the "not yet
answered" signal (the waiter blocks acquiring it; the answer releases it), and a second lock
taken without blocking makes the answer once-only. The actor resolves it later, possibly from
a later message than the one that carried it; a second resolution is ignored. Every reply
handed to an agent is tracked in that agent's `outstanding` set so that, however the agent
ends, no waiting caller is left hanging (`fail_all`).

(pykka's `ThreadingFuture` would do, but builds a `queue.Queue` — three conditions — per call,
which is a measurable share of a turn's overhead; see `make bench`.)
"""

from __future__ import annotations

import threading
from typing import Any

from gen_agent.errors import CallTimeout


class Reply:
    """A once-only, thread-safe answer slot."""

    __slots__ = ("_answered", "_error", "_once", "_outstanding", "_value")

    def __init__(self, outstanding: set[Reply] | None = None) -> None:
        self._answered = threading.Lock()
        self._answered.acquire()  # released by the answer
        self._once = threading.Lock()
        self._value: Any = None
        self._error: BaseException | None = None
        self._outstanding = outstanding
        if outstanding is not None:
            outstanding.add(self)

    @property
    def done(self) -> bool:
        """True once resolved or failed."""
        return self._once.locked()

    def resolve(self, value: Any) -> bool:
        """Answer with `value`; False if already answered."""
        if not self._once.acquire(blocking=False):
            return False
        self._value = value
        self._finish()
        return True

    def fail(self, exc: BaseException) -> bool:
        """Answer by raising `exc` in the waiter; False if already answered."""
        if not self._once.acquire(blocking=False):
            return False
        self._error = exc
        self._finish()
        return True

    def _finish(self) -> None:
        self._answered.release()
        if self._outstanding is not None:
            self._outstanding.discard(self)

    def wait(self, timeout: float | None = None) -> Any:
        """Block until answered; `timeout` in seconds, None = forever. May be called again
        after a timeout, and by several waiters (each sees the answer).

        Raises:
            CallTimeout: nothing arrived within `timeout` seconds.
            Any exception the actor failed the reply with.
        """
        if not self._answered.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise CallTimeout(timeout)
        self._answered.release()  # keep it open for any other waiter
        if self._error is not None:
            raise self._error
        return self._value


def fail_all(outstanding: set[Reply], exc: BaseException) -> None:
    """Fail every reply still outstanding (the agent is gone)."""
    for reply in list(outstanding):
        reply.fail(exc)

"""Once-only replies from the agent actor to a waiting caller (deferred replies, §4.5).

A `Reply` wraps a `pykka.ThreadingFuture`. The actor resolves it later, possibly from a later
message than the one that carried it, exactly once; a second resolution is ignored. Every reply
handed to an agent is tracked in that agent's `outstanding` set so that, whatever way the agent
ends, no waiting caller is left hanging (`fail_all`).
"""

from __future__ import annotations

import threading
from typing import Any

import pykka

from gen_agent.errors import CallTimeout


class Reply:
    """A once-only, thread-safe answer slot."""

    __slots__ = ("_done", "_future", "_lock", "_outstanding")

    def __init__(self, outstanding: set[Reply] | None = None) -> None:
        self._future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
        self._lock = threading.Lock()
        self._done = False
        self._outstanding = outstanding
        if outstanding is not None:
            outstanding.add(self)

    @property
    def done(self) -> bool:
        """True once resolved or failed."""
        return self._done

    def resolve(self, value: Any) -> bool:
        """Answer with `value`; False if already answered."""
        with self._lock:
            if self._done:
                return False
            self._done = True
        self._future.set(value)
        if self._outstanding is not None:
            self._outstanding.discard(self)
        return True

    def fail(self, exc: BaseException) -> bool:
        """Answer by raising `exc` in the waiter; False if already answered."""
        with self._lock:
            if self._done:
                return False
            self._done = True
        self._future.set_exception((type(exc), exc, None))
        if self._outstanding is not None:
            self._outstanding.discard(self)
        return True

    def wait(self, timeout: float | None = None) -> Any:
        """Block until answered; `timeout` in seconds, None = forever.

        Raises:
            CallTimeout: nothing arrived within `timeout` seconds.
            Any exception the actor failed the reply with.
        """
        try:
            return self._future.get(timeout=timeout)
        except pykka.Timeout:
            raise CallTimeout(timeout) from None


def fail_all(outstanding: set[Reply], exc: BaseException) -> None:
    """Fail every reply still outstanding (the agent is gone)."""
    for reply in list(outstanding):
        reply.fail(exc)

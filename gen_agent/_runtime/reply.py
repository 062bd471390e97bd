"""Once-only replies from the agent actor to a waiting caller (deferred replies, §4.5).

A `DeferredReply` is the smallest possible future: a lock held from creation is the "not yet
answered" signal (the waiter blocks acquiring it; the answer releases it), and a second lock
taken without blocking makes the answer once-only. The actor resolves it later, possibly from
a later message than the one that carried it; a second resolution is ignored. Every reply
handed to an agent is tracked in that agent's `outstanding` set so that, however the agent
ends, no waiting caller is left hanging (`fail_all`).

(pykka's `ThreadingFuture` would do, but builds a `queue.Queue` — three conditions — per call,
which is a measurable share of a turn's overhead; see `make bench`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from gen_agent._errors import CallTimeout
from gen_agent._timers import wait_s


class DeferredReply:
    """A once-only, thread-safe answer slot."""

    __slots__ = ("_answered", "_callback", "_error", "_once", "_outstanding", "_value")

    def __init__(self, outstanding: set[DeferredReply] | None = None) -> None:
        self._answered = threading.Lock()
        self._answered.acquire()  # released by the answer
        self._once = threading.Lock()
        self._value: Any = None
        self._error: BaseException | None = None
        self._outstanding = outstanding
        self._callback: Any = None
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
        callback = self._callback
        if callback is not None:
            callback(self)

    def add_done_callback(self, callback: Any) -> None:
        """Call `callback(reply)` exactly once when the reply is answered: in the answering
        thread, or at once in this thread if it already is. One callback per reply; it must be
        quick and must not raise (the async client hands the answer to its loop from here)."""
        once = threading.Lock()

        def fire(reply: DeferredReply) -> None:
            if once.acquire(blocking=False):
                callback(reply)

        self._callback = fire
        # answered before the callback was set? `_finish` may have missed it (fire is once-only)
        if self._answered.acquire(blocking=False):
            self._answered.release()
            fire(self)

    def wait(self, timeout: float | None = None) -> Any:
        """Block until answered; `timeout` in seconds, None = forever. May be called again
        after a timeout, and by several waiters (each sees the answer).

        Raises:
            CallTimeout: nothing arrived within `timeout` seconds.
            Any exception the actor failed the reply with.
        """
        wait = None if timeout is None else wait_s(timeout)  # beyond TIMEOUT_MAX: forever
        if not self._answered.acquire(timeout=-1 if wait is None else wait):
            raise CallTimeout(timeout)
        self._answered.release()  # keep it open for any other waiter
        if self._error is not None:
            raise self._error
        return self._value


class OnceEvent:
    """A `threading.Event` that is set once and never cleared, on one lock: a fraction of the
    memory of an Event (a Condition, its lock and a waiter deque), for the per-agent "exited"
    and "stopped" flags that 100,000 hibernated agents each hold.

    Same interface as the Event methods used: `set()`, `is_set()`, `wait(timeout=None) ->
    bool` (`timeout` in seconds, None = forever).
    """

    __slots__ = ("_flag", "_lock")

    def __init__(self) -> None:
        self._flag = False
        self._lock = threading.Lock()
        self._lock.acquire()  # released by set()

    def is_set(self) -> bool:
        """True once set."""
        return self._flag

    def set(self) -> None:
        """Set the flag and wake every waiter (idempotent)."""
        if not self._flag:
            self._flag = True
            self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or `timeout` seconds passed; return whether it is set."""
        if self._flag:
            return True
        wait = wait_s(timeout)
        if self._lock.acquire(timeout=-1 if wait is None else wait):
            self._lock.release()  # keep it open for any other waiter
        return self._flag


def fail_all(outstanding: set[DeferredReply], exc: BaseException) -> None:
    """Fail every reply still outstanding (the agent is gone)."""
    for reply in list(outstanding):
        reply.fail(exc)


# ---------------------------------------------------------------------- asyncio callers
def call_in_loop(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """From any thread, run `fn(*args)` in `loop`; nothing if the loop is closed (nobody is
    left to tell)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def set_once(future: asyncio.Future[Any], value: Any = None) -> None:
    """In the loop: resolve `future` unless it is already done (e.g. cancelled)."""
    if not future.done():
        future.set_result(value)


def _settle(future: asyncio.Future[Any], reply: DeferredReply) -> None:
    if future.done():  # cancelled meanwhile
        return
    try:
        future.set_result(reply.wait(0))
    except BaseException as exc:  # noqa: BLE001 - the actor's failure is the caller's
        future.set_exception(exc)


async def await_reply(reply: DeferredReply, timeout: float | None) -> Any:
    """Await `reply` on the running loop; `timeout` seconds (None = forever).

    Raises:
        CallTimeout: no answer within `timeout` (the request is not touched here).
        asyncio.CancelledError: the awaiting task was cancelled.
        Whatever the actor failed the reply with (e.g. `AgentDown`).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    reply.add_done_callback(lambda r: call_in_loop(loop, _settle, future, r))
    if timeout is None:
        return await future
    try:
        async with asyncio.timeout(timeout):
            return await future
    except TimeoutError:
        if future.done() and not future.cancelled():
            return future.result()  # answered in the same loop iteration as the deadline
        raise CallTimeout(timeout) from None

"""One shared timer thread for watchdogs and delayed messages.

A per-turn `threading.Timer` would cost a thread per turn; a heap served by one daemon thread
costs a push and, only when the new deadline is the earliest, a wake-up.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from loguru import logger


class TimerHandle:
    """A scheduled call; `cancel()` prevents it if it has not run yet."""

    __slots__ = ("_service", "cancelled", "deadline", "fn")

    def __init__(self, service: TimerService, deadline: float, fn: Callable[[], None]) -> None:
        self._service = service
        self.deadline = deadline
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        """Cancel the call (idempotent; a call already running is not stopped)."""
        if not self.cancelled:
            self.cancelled = True
            self._service._note_cancel()


class TimerService:
    """A heap of deadlines served by one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._cancelled = 0

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        """Run `fn()` in the timer thread after `delay_s` seconds (monotonic clock)."""
        handle = TimerHandle(self, time.monotonic() + max(0.0, delay_s), fn)
        with self._cond:
            heapq.heappush(self._heap, (handle.deadline, next(self._seq), handle))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="gen_agent-timers", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is handle:
                self._cond.notify()
        return handle

    def _note_cancel(self) -> None:
        # Cancelled watchdogs sit far in the future; rebuild the heap once they dominate it so
        # a long-lived process does not accumulate them, and let an idle timer thread exit.
        with self._cond:
            self._cancelled += 1
            if self._cancelled * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)
                        self._cancelled = max(0, self._cancelled - 1)
                    if not self._heap:
                        # Nothing scheduled: exit; the next schedule() starts a new thread.
                        self._thread = None
                        return
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        handle = heapq.heappop(self._heap)[2]
                        break
                    self._cond.wait(wait)
            if handle.cancelled:
                continue
            try:
                handle.fn()
            except Exception as exc:  # noqa: BLE001 - a timer callback must not kill the timer thread
                logger.warning("gen_agent timer callback raised {}", type(exc).__name__)


TIMERS = TimerService()
"""The process-wide timer service."""

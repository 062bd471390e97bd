"""One shared timer thread for watchdogs and delayed messages.

A per-turn `threading.Timer` would cost a thread per turn; a heap served by one daemon thread
costs a push and, only when the new deadline is the earliest, a wake-up. Cancelled entries are
dropped lazily (and the heap is compacted once they dominate it), so cancelling never wakes
the thread. (An agent keeps one watchdog timer across its turns, see
`AgentActor._arm_watchdog`.) The thread exits after `idle_s` seconds with nothing scheduled and
is started again on demand.

Durations: a deadline may lie any distance ahead (`math.inf` never fires); every wait of the
thread is at most `MAX_WAIT_S`, far below `threading.TIMEOUT_MAX`, so no deadline can make a
wait raise. Should the thread end on an exception anyway, the failure is logged with its
traceback and emitted as `gen_agent.telemetry.TIMER_FAILED`, and the next `schedule` starts
a new thread (the pending deadlines are kept).

`MAX_DURATION_MS` is the longest duration a user may give anywhere (start and backend options,
`send_after`, retry delays): `threading.TIMEOUT_MAX` in milliseconds, about 292 years on
Linux. `wait_s` turns a caller's `timeout` beyond it into "forever".
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import Final

from loguru import logger

from gen_agent import telemetry

THREAD_NAME = "gen_agent-timers"

MAX_WAIT_S: Final = 3600.0
"""The longest single wait of the timer thread (seconds); a later deadline is waited for in
steps of at most this."""

MAX_DURATION_MS: Final = int(threading.TIMEOUT_MAX * 1000)
"""The longest duration (milliseconds) a user may give: `threading.TIMEOUT_MAX` in ms."""


def check_duration_ms(name: str, value: int | float) -> None:
    """Raise ValueError when `value` (milliseconds, a number already checked as such) is
    beyond `MAX_DURATION_MS`; the message names `name`, the range and the value."""
    if not value <= MAX_DURATION_MS:
        raise ValueError(f"{name} must be at most {MAX_DURATION_MS} milliseconds "
                         f"(threading.TIMEOUT_MAX), got {value!r}")


def wait_s(timeout: float | None) -> float | None:
    """A caller's `timeout` (seconds, or None) as a wait the platform can do: None (forever)
    for None, infinity or anything beyond `threading.TIMEOUT_MAX`; never negative."""
    if timeout is None or not timeout <= threading.TIMEOUT_MAX:
        return None if timeout is None or not math.isnan(timeout) else 0.0
    return max(0.0, timeout)


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

    def __init__(self, idle_s: float = 30.0) -> None:
        self.idle_s = idle_s
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._cancelled = 0
        self._thread: threading.Thread | None = None

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        """Run `fn()` in the timer thread after `delay_s` seconds (monotonic clock; any
        size: `math.inf` never fires). Raises ValueError for a NaN delay."""
        if math.isnan(delay_s):
            raise ValueError("a timer delay must be a number of seconds, got nan")
        handle = TimerHandle(self, time.monotonic() + max(0.0, delay_s), fn)
        with self._cond:
            earliest = not self._heap or handle.deadline < self._heap[0][0]
            heapq.heappush(self._heap, (handle.deadline, next(self._seq), handle))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                self._thread.start()
            elif earliest:
                self._cond.notify()
        return handle

    @property
    def thread(self) -> threading.Thread | None:
        """The timer thread, if running."""
        return self._thread

    def _note_cancel(self) -> None:
        with self._cond:
            self._cancelled += 1
            if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def _next_due(self) -> TimerHandle | None:
        """Wait (lock held) for the next due handle; None when idle for `idle_s`."""
        while True:
            while self._heap and self._heap[0][2].cancelled:
                heapq.heappop(self._heap)
                self._cancelled = max(0, self._cancelled - 1)
            if not self._heap:
                if not self._cond.wait(self.idle_s) and not self._heap:
                    self._thread = None  # idle: exit; schedule() starts a new thread
                    return None
                continue
            wait = self._heap[0][0] - time.monotonic()
            if wait <= 0:
                return heapq.heappop(self._heap)[2]
            self._cond.wait(min(wait, MAX_WAIT_S))

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # noqa: BLE001 - reported, and replaced at next schedule
            with self._cond:
                if self._thread is threading.current_thread():
                    self._thread = None  # the next schedule() starts a new thread
            logger.opt(exception=exc).error(
                "gen_agent timer thread failed ({}); the next timer starts a new one",
                type(exc).__name__)
            with contextlib.suppress(Exception):  # reported by the log line above already
                telemetry.execute(telemetry.TIMER_FAILED, {"system_time": time.time_ns()},
                                  {"error_type": type(exc).__name__})

    def _serve(self) -> None:
        while True:
            with self._cond:
                handle = self._next_due()
            if handle is None:
                return
            if handle.cancelled:
                continue
            try:
                handle.fn()
            except Exception as exc:  # noqa: BLE001 - a timer callback must not kill the timer thread
                logger.warning("gen_agent timer callback raised {}", type(exc).__name__)


TIMERS = TimerService()
"""The process-wide timer service."""

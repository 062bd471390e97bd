"""Shared limits per provider key: a concurrency cap, request and token rates, and 429 holds.

Agents, pools and supervisors that use one API key share its limits. Give each of them the same
`ProviderLimit` (the start option `provider_limit=`; `ProviderLimit.shared(name, ...)` returns
one object per name in the process), and every turn asks it for a permit *before it
dispatches*: while none is free, the request simply stays first in its agent's queue (no
thread waits; the agent keeps serving status calls, notifications and interrupts) and the
limit wakes the agent through its mailbox when a permit may be free again.

What a permit needs:

- `max_concurrent`: fewer than this many turns of the key running (count);
- `requests_per_minute`: fewer than this many turns started in the last 60 s;
- `tokens_per_minute`: fewer than this many tokens (input + output, as the turns' `usage`
  reported them) spent in the last 60 s;
- no 429 hold: a turn that failed with a `BackendError` carrying `retry_after` (a rate limit
  or an overload) holds back *every* agent on the key until then (`hold(ms)`).

The limit is process-wide state; agents on other processes (Ray nodes) have their own.

Mirrors: nothing in the Elixir original; the shape of a client-side rate limiter in front of
a provider (aiolimiter / the SDKs' own retry-after handling), enforced at the actor's dispatch.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from gen_agent._timers import TIMERS

__all__ = ["JoinedLimit", "LimitStatus", "ProviderLimit"]

_WINDOW_S = 60.0
_registry: dict[str, ProviderLimit] = {}
_registry_lock = threading.Lock()


class LimitStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A point-in-time view of a `ProviderLimit` (in `Status.provider_limit`).

    Fields:
        name: the limit's name (usually the provider and a key fingerprint).
        in_flight: turns of the key running now (count).
        max_concurrent, requests_per_minute, tokens_per_minute: the configured bounds (None =
            unbounded).
        requests_last_minute / tokens_last_minute: what the last 60 s used.
        waiting: agents waiting for a permit (count).
        held_ms: milliseconds left of a 429 hold (0 = none).
    """

    name: str
    in_flight: int
    max_concurrent: int | None
    requests_per_minute: int | None
    tokens_per_minute: int | None
    requests_last_minute: int
    tokens_last_minute: int
    waiting: int
    held_ms: int


def _bound(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"ProviderLimit: {name} must be a positive int or None, got {value!r}")
    return value


class ProviderLimit:
    """The shared limits of one provider key. Thread-safe; share one object between agents.

    Args:
        name: a label for status and logs (never the key itself).
        max_concurrent: turns running at once (count), None = unbounded.
        requests_per_minute: turns started per rolling 60 s, None = unbounded.
        tokens_per_minute: tokens (input + output) per rolling 60 s, None = unbounded. A turn
            may overshoot it once (its size is known only after it ran); the next ones wait.

    Raises:
        ValueError: a bound is not a positive int or None.
    """

    def __init__(self, name: str, *, max_concurrent: int | None = None,
                 requests_per_minute: int | None = None,
                 tokens_per_minute: int | None = None) -> None:
        self.name = name
        self.max_concurrent = _bound("max_concurrent", max_concurrent)
        self.requests_per_minute = _bound("requests_per_minute", requests_per_minute)
        self.tokens_per_minute = _bound("tokens_per_minute", tokens_per_minute)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._starts: collections.deque[float] = collections.deque()
        self._tokens: collections.deque[tuple[float, int]] = collections.deque()
        self._held_until = 0.0
        self._waiters: dict[Any, Callable[[], None]] = {}
        self._timer: Any = None

    @classmethod
    def shared(cls, name: str, **bounds: Any) -> ProviderLimit:
        """The one `ProviderLimit` of this process named `name`, created on first use with
        `bounds` (later calls return it as it is; their bounds must match or be omitted).

        Raises:
            ValueError: `bounds` differ from those the limit was created with.
        """
        with _registry_lock:
            limit = _registry.get(name)
            if limit is None:
                limit = _registry[name] = cls(name, **bounds)
                return limit
        for key, value in bounds.items():
            if getattr(limit, key) != value:
                raise ValueError(f"ProviderLimit {name!r} exists with {key}="
                                 f"{getattr(limit, key)!r}, not {value!r}")
        return limit

    # ------------------------------------------------------------------ the agent's side
    def try_acquire(self, waiter: Any, wake: Callable[[], None]) -> bool:
        """Take a permit for one turn, or register `wake()` to be called (once, from any
        thread) when one may be free; `waiter` identifies the caller (one entry each).

        Returns:
            True if the permit was taken (call `release()` when the turn ends).
        """
        with self._lock:
            now = time.monotonic()
            retry_in = self._blocked_for(now)
            if retry_in is None:
                self._in_flight += 1
                self._starts.append(now)
                self._waiters.pop(waiter, None)
                return True
            self._waiters[waiter] = wake
            if retry_in > 0:
                self._wake_at(retry_in)
            return False

    def try_take(self) -> float | None:
        """Take a permit now if one is free, without waiting or registering (a `Fallback`
        hop's limit, asked inside a turn).

        Returns:
            None if the permit was taken (call `release()` when the request ends), else the
            seconds until one may be free (0.0: when a running request ends).
        """
        with self._lock:
            now = time.monotonic()
            retry_in = self._blocked_for(now)
            if retry_in is None:
                self._in_flight += 1
                self._starts.append(now)
            return retry_in

    def held_for(self) -> float:
        """Seconds left of a `retry-after` hold (0.0: none)."""
        with self._lock:
            return max(0.0, self._held_until - time.monotonic())

    def release(self, tokens: int = 0) -> None:
        """A turn that held a permit ended; `tokens` it spent count against the rate."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            if tokens > 0:
                self._tokens.append((time.monotonic(), tokens))
        self._wake_all()

    def forget(self, waiter: Any) -> None:
        """`waiter` no longer waits (it stopped, or has nothing left to dispatch)."""
        with self._lock:
            self._waiters.pop(waiter, None)

    def hold(self, ms: float) -> None:
        """Hold every turn of the key back for `ms` milliseconds (a 429's `retry_after`)."""
        if ms <= 0:
            return
        with self._lock:
            self._held_until = max(self._held_until, time.monotonic() + ms / 1000)
            self._wake_at(ms / 1000)

    def status(self) -> LimitStatus:
        """A `LimitStatus` of this limit now."""
        with self._lock:
            now = time.monotonic()
            self._expire(now)
            return LimitStatus(
                name=self.name, in_flight=self._in_flight, max_concurrent=self.max_concurrent,
                requests_per_minute=self.requests_per_minute,
                tokens_per_minute=self.tokens_per_minute,
                requests_last_minute=len(self._starts),
                tokens_last_minute=sum(n for _, n in self._tokens),
                waiting=len(self._waiters),
                held_ms=max(0, int((self._held_until - now) * 1000)))

    def __repr__(self) -> str:
        return f"<ProviderLimit {self.name!r}>"

    # ------------------------------------------------------------------ internals
    def _expire(self, now: float) -> None:
        horizon = now - _WINDOW_S
        while self._starts and self._starts[0] <= horizon:
            self._starts.popleft()
        while self._tokens and self._tokens[0][0] <= horizon:
            self._tokens.popleft()

    def _blocked_for(self, now: float) -> float | None:
        """None if a permit is free now, else seconds until it may be (0 = on a release)."""
        self._expire(now)
        waits = [0.0] if (self.max_concurrent is not None
                          and self._in_flight >= self.max_concurrent) else []
        if self._held_until > now:
            waits.append(self._held_until - now)
        if self.requests_per_minute is not None and len(self._starts) >= self.requests_per_minute:
            waits.append(self._starts[0] + _WINDOW_S - now)
        if (self.tokens_per_minute is not None and self._tokens
                and sum(n for _, n in self._tokens) >= self.tokens_per_minute):
            waits.append(self._tokens[0][0] + _WINDOW_S - now)
        return max(waits) if waits else None

    def _wake_at(self, delay_s: float) -> None:
        # One timer at a time, for the earliest moment something may have changed.
        if self._timer is not None and not self._timer.cancelled \
                and self._timer.deadline <= time.monotonic() + delay_s:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = TIMERS.schedule(delay_s + 0.001, self._on_timer)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self._wake_all()

    def _wake_all(self) -> None:
        # Everyone waiting tries again: the winners take the permits, the others register
        # again (a woken agent that no longer needs one just does not ask).
        with self._lock:
            waiters, self._waiters = list(self._waiters.values()), {}
        for wake in waiters:
            wake()


class JoinedLimit(ProviderLimit):
    """Several `ProviderLimit`s at once: a turn needs a permit of each (e.g. a tenant's own
    limit next to its host's provider key). Share one object between the agents it covers.

    Permits are taken in the order given; an agent that got the first ones and waits for a
    later one keeps those it holds (so put the narrower limit, e.g. a tenant's, first: an
    agent waiting for the provider key then holds only its own tenant's permit). `release`
    gives each back; `hold` holds each; `status()` is the first limit's.

    Args:
        limits: the `ProviderLimit`s (at least one; nested `JoinedLimit`s are flattened).

    Raises:
        ValueError: no limits, or one that is not a `ProviderLimit`.
    """

    def __init__(self, *limits: ProviderLimit) -> None:
        flat: list[ProviderLimit] = []
        for limit in limits:
            if not isinstance(limit, ProviderLimit):
                raise ValueError(f"JoinedLimit takes ProviderLimits, got {type(limit).__name__}")
            flat.extend(limit.parts() if isinstance(limit, JoinedLimit) else (limit,))
        if not flat:
            raise ValueError("JoinedLimit needs at least one ProviderLimit")
        first = flat[0]
        super().__init__("+".join(limit.name for limit in flat),
                         max_concurrent=first.max_concurrent,
                         requests_per_minute=first.requests_per_minute,
                         tokens_per_minute=first.tokens_per_minute)
        self.limits: tuple[ProviderLimit, ...] = tuple(flat)
        self._held: dict[Any, int] = {}  # waiter -> how many of `limits` it holds (a prefix)

    def parts(self) -> tuple[ProviderLimit, ...]:
        """The joined limits, in order."""
        return self.limits

    def try_acquire(self, waiter: Any, wake: Callable[[], None]) -> bool:
        with self._lock:
            held = self._held.pop(waiter, 0)
        for limit in self.limits[held:]:
            if not limit.try_acquire(waiter, wake):
                with self._lock:
                    self._held[waiter] = held
                return False
            held += 1
        return True

    def try_take(self) -> float | None:
        for index, limit in enumerate(self.limits):
            wait = limit.try_take()
            if wait is not None:
                for taken in self.limits[:index]:
                    taken.release()
                return wait
        return None

    def held_for(self) -> float:
        return max(limit.held_for() for limit in self.limits)

    def release(self, tokens: int = 0) -> None:
        for limit in self.limits:
            limit.release(tokens)

    def forget(self, waiter: Any) -> None:
        with self._lock:
            held = self._held.pop(waiter, 0)
        for index, limit in enumerate(self.limits):
            if index < held:
                limit.release()  # a permit taken for a turn that waited on a later limit
            else:
                limit.forget(waiter)

    def hold(self, ms: float) -> None:
        for limit in self.limits:
            limit.hold(ms)

    def status(self) -> LimitStatus:
        return self.limits[0].status()

    def __repr__(self) -> str:
        return f"<JoinedLimit {self.name!r}>"

    def __reduce__(self) -> Any:
        return (JoinedLimit, self.limits)

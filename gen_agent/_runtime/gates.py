"""`Gates`: what a turn passes before and while it runs: the spend caps, the provider permit,
and the watchdog.

One object per agent, owned by its actor thread (no locking). The spend caps refuse a turn
before any callback runs (`gen_agent._accounting`); the provider permit is one of a shared
`ProviderLimit`'s, taken at dispatch and given back when the turn ends (`gen_agent._limits`);
the watchdog is one timer per agent, not one per turn: it is left running when a turn ends,
and when it fires the agent checks the turn running then against that turn's own deadline,
arming it again if it is not due yet. So a busy agent schedules about one timer per
`watchdog_ms`, and a watchdog still fires exactly `watchdog_ms` after its turn started.

Each gate is decided at start and read as an attribute (`capped`, `limit`, `permit`), so the
actor skips the calls of a gate the agent does not have (by default: no cap, no limit; the
watchdog is on, 600 s).
"""

from __future__ import annotations

import time
from typing import Any

from gen_agent._accounting import BudgetExceeded, Spend, check_budget, spend_since
from gen_agent._runtime.mailbox import LimitWakeMsg, WatchdogMsg
from gen_agent._runtime.options import AgentOptions
from gen_agent._timers import TIMERS


class Gates:
    """The spend caps, provider permit and watchdog of one agent."""

    __slots__ = ("_armed", "_charged", "_handle", "_opts", "capped", "limit", "permit",
                 "watchdog")

    def __init__(self, opts: AgentOptions, handle: Any) -> None:
        self._opts = opts
        self._handle = handle
        # a spend cap or shared budget: without one, `over_budget` and `charge` do nothing
        self.capped = (opts.max_cost_usd is not None or opts.max_total_tokens is not None
                        or bool(opts.budgets))
        self._charged: Spend | None = None  # the spend the shared budgets were charged up to
        self.limit = opts.provider_limit  # a shared ProviderLimit, or None
        self.permit = False  # holds one of its permits (between dispatch and the turn's end)
        self.watchdog: Any = None  # the agent's one watchdog timer, while armed
        self._armed = 0  # which arming is current: an older timer's message is ignored

    # ------------------------------------------------------------------ spend caps
    def over_budget(self, spend: Spend) -> BudgetExceeded | None:
        """The cap `spend` has reached, or None (a turn may run)."""
        if not self.capped:
            return None
        if self._charged is None:
            self._charged = spend  # the start: spend restored from a store is not charged
        for budget in self._opts.budgets:
            over = budget.exceeded()
            if over is not None:
                return over
        return check_budget(spend, self._opts.max_cost_usd, self._opts.max_total_tokens)

    def charge(self, spend: Spend) -> None:
        """A turn ended with the agent's totals at `spend`: charge the shared budgets
        (`gen_agent.SharedBudget`) with what it added."""
        before = self._charged
        if before is None or before is spend or not self._opts.budgets:
            return
        self._charged = spend
        usage, cost, turns = spend_since(spend, before)
        if usage or cost is not None or turns:
            for budget in self._opts.budgets:
                budget.charge(usage, cost, turns)

    # ------------------------------------------------------------------ provider permit
    def take_permit(self) -> bool:
        """True when the next turn may dispatch: no `provider_limit`, a permit already held,
        or one taken now; else the limit wakes this agent (`LimitWakeMsg`) when one may be
        free."""
        limit = self.limit
        if limit is None or self.permit:
            return True
        self.permit = limit.try_acquire(self._handle, self._wake)
        return self.permit

    def _wake(self) -> None:
        self._handle.tell_unchecked(LimitWakeMsg())

    def drop_permit(self) -> None:
        """Give an unused permit back (the turn did not start), or stop waiting for one."""
        if self.permit:
            self.permit = False
            self.limit.release()  # type: ignore[union-attr]
        elif self.limit is not None:
            self.limit.forget(self._handle)

    def release_permit(self, usage: Any) -> None:
        """The turn ended: give its permit back, with the tokens it spent (`usage`)."""
        if self.permit:
            self.permit = False
            self.limit.release(_tokens_spent(usage))  # type: ignore[union-attr]

    def hold(self, reason: Any) -> None:
        """A rate-limited or overloaded turn with `retry_after`: hold the whole key back."""
        retry_after = getattr(reason, "retry_after_ms", None)
        if self.limit is not None and isinstance(retry_after, int | float) and retry_after > 0:
            self.limit.hold(retry_after)

    # ------------------------------------------------------------------ watchdog
    def start_watchdog(self, turn: Any) -> None:
        """Give `turn` its deadline (`watchdog_ms` from now) and make sure a timer runs."""
        watchdog_ms = self._opts.watchdog_ms
        if watchdog_ms is None:
            return
        turn.deadline = time.monotonic() + watchdog_ms / 1000
        if self.watchdog is None:
            self._arm(turn.deadline)

    def watchdog_fired(self, armed: int, turn: Any) -> bool:
        """A `WatchdogMsg(armed)` arrived: True when `turn` (the running one, or None) is past
        its deadline; a timer armed for an earlier turn is armed again for this one's."""
        if armed != self._armed:
            return False  # superseded by a later arming
        self.watchdog = None
        if turn is None or turn.deadline is None:
            return False
        if time.monotonic() < turn.deadline:
            self._arm(turn.deadline)
            return False
        return True

    def _arm(self, deadline: float) -> None:
        armed = self._armed = self._armed + 1
        handle = self._handle

        def fire() -> None:
            handle.tell_unchecked(WatchdogMsg(armed))
            handle.mark_due(time.monotonic())  # a pending permission decision ends now

        self.watchdog = TIMERS.schedule(deadline - time.monotonic(), fire)

    def disarm(self) -> None:
        """Cancel the watchdog timer (the agent hibernates or stops)."""
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None


def _tokens_spent(usage: Any) -> int:
    """Input + output tokens of a turn's latest usage (0 when unknown), for token rates."""
    if not isinstance(usage, dict):
        return 0
    return sum(v for k in ("input_tokens", "output_tokens")
               if isinstance(v := usage.get(k), int) and not isinstance(v, bool))

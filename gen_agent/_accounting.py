"""Per-agent accounting: the running totals of tokens and cost, and the spend cap.

Every successful turn that reports usage or a cost (and every such turn whose reply failed
validation: its tokens were spent) adds its `Response.usage` and `Response.cost_usd` to the agent's
`Spend`; the totals so far are on each `Response` (`session_usage`, `session_cost_usd`). They
survive `reset_session` (the cap is on the agent, not on one conversation) and, when the store
persists them, a restart (the `spend` start option seeds them).

Start options (reserved; None = no cap):

- `max_cost_usd`: a float, US dollars. Once the agent's `cost_usd` total reaches it, every
  further turn is refused at dispatch with `("budget_exceeded", BudgetExceeded(...))`.
  Backends that report no cost (see the turn-record docs) never reach it.
- `max_total_tokens`: an int, tokens (`input_tokens + output_tokens` as each provider counts
  them). Same refusal once reached.
- `spend`: a `Spend` to start from (e.g. restored from a store), default empty.

The check runs when a turn is about to be dispatched, so a turn that is already running
finishes (it may overshoot the cap by its own cost).

Mirrors: nothing in the Elixir original.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

__all__ = ["BudgetExceeded", "SharedBudget", "Spend", "SpendCap", "add_turn", "check_budget",
           "own_budget", "total_tokens"]


class Spend(msgspec.Struct, frozen=True, kw_only=True):
    """What an agent has spent so far.

    Fields:
        usage: the summed token counts of its turns (every integer key of `Response.usage`,
            raw and normalized, summed; tokens).
        cost_usd: the summed `cost_usd` (US dollars), or None when no turn reported one.
        turns: the turns that reported usage or a cost (count).
    """

    usage: dict[str, int] = msgspec.field(default_factory=dict)
    cost_usd: float | None = None
    turns: int = 0


class BudgetExceeded(msgspec.Struct, frozen=True, kw_only=True):
    """Why a turn was refused: the second element of `("budget_exceeded", ...)`.

    Fields:
        limit: `"cost_usd"` (`max_cost_usd`) or `"tokens"` (`max_total_tokens`).
        maximum: the cap (US dollars or tokens).
        spent: what the agent had spent when the turn was refused (same unit).
    """

    limit: Literal["cost_usd", "tokens"]
    maximum: float | int
    spent: float | int


def total_tokens(usage: Mapping[str, Any]) -> int:
    """`input_tokens + output_tokens` of a usage dict (missing counts are 0; tokens)."""
    total = 0
    for key in ("input_tokens", "output_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return total


def add_turn(spend: Spend, usage: Mapping[str, Any] | None, cost_usd: Any) -> Spend:
    """`spend` plus one turn's `usage` (integer values summed per key) and `cost_usd`.

    Returns:
        A new `Spend` (`turns` + 1).
    """
    totals = dict(spend.usage)
    for key, value in (usage or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            totals[key] = totals.get(key, 0) + value
    cost = spend.cost_usd
    if isinstance(cost_usd, int | float) and not isinstance(cost_usd, bool):
        cost = (cost or 0.0) + float(cost_usd)
    return Spend(usage=totals, cost_usd=cost, turns=spend.turns + 1)


def check_budget(
    spend: Spend, max_cost_usd: float | None, max_total_tokens: int | None
) -> BudgetExceeded | None:
    """The cap `spend` has reached, or None.

    Args:
        spend: the agent's totals.
        max_cost_usd: the cost cap (US dollars) or None.
        max_total_tokens: the token cap (tokens) or None.

    Returns:
        A `BudgetExceeded` for the first cap reached (cost first), else None.
    """
    if max_cost_usd is not None and spend.cost_usd is not None and (
            spend.cost_usd >= max_cost_usd):
        return BudgetExceeded(limit="cost_usd", maximum=max_cost_usd, spent=spend.cost_usd)
    if max_total_tokens is not None:
        spent = total_tokens(spend.usage)
        if spent >= max_total_tokens:
            return BudgetExceeded(limit="tokens", maximum=max_total_tokens, spent=spent)
    return None


class SharedBudget:
    """A spend cap over many agents: what every agent below a `Supervisor`, `Pool` or
    `AgentHost` spent together, against `max_cost_usd` (US dollars) and `max_total_tokens`
    (tokens). Thread-safe.

    The runtime charges it with each turn's spend when the turn ends (from the agent's start
    on: spend restored from a store is not charged again), and checks it at dispatch, next to
    the agent's own caps: once reached, agents below refuse new turns with
    `("budget_exceeded", BudgetExceeded)` (running turns finish; nothing is stopped).

    Raises:
        ValueError: a cap is not a finite number >= 0 (cost) or an int >= 0 (tokens).
    """

    __slots__ = ("_lock", "max_cost_usd", "max_total_tokens", "spend")

    def __init__(self, max_cost_usd: float | None = None,
                 max_total_tokens: int | None = None) -> None:
        if max_cost_usd is not None and (
                isinstance(max_cost_usd, bool) or not isinstance(max_cost_usd, int | float)
                or not math.isfinite(max_cost_usd) or max_cost_usd < 0):
            raise ValueError("max_cost_usd must be a finite number >= 0 (US dollars; None: no "
                             f"bound), got {max_cost_usd!r}")
        if max_total_tokens is not None and (
                isinstance(max_total_tokens, bool) or not isinstance(max_total_tokens, int)
                or max_total_tokens < 0):
            raise ValueError(f"max_total_tokens must be an int >= 0 (tokens), "
                             f"got {max_total_tokens!r}")
        self.max_cost_usd = None if max_cost_usd is None else float(max_cost_usd)
        self.max_total_tokens = max_total_tokens
        self.spend = Spend()  # what the agents below spent together
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"SharedBudget(max_cost_usd={self.max_cost_usd!r}, "
                f"max_total_tokens={self.max_total_tokens!r}, spent={self.spend!r})")

    def charge(self, usage: Mapping[str, int], cost_usd: float | None, turns: int) -> None:
        """Add one agent's new spend (token counts per key, US dollars, turns)."""
        with self._lock:
            totals = dict(self.spend.usage)
            for key, value in usage.items():
                totals[key] = totals.get(key, 0) + value
            cost = self.spend.cost_usd
            if cost_usd is not None:
                cost = (cost or 0.0) + cost_usd
            self.spend = Spend(usage=totals, cost_usd=cost, turns=self.spend.turns + turns)

    def exceeded(self) -> BudgetExceeded | None:
        """The cap reached so far, or None."""
        return check_budget(self.spend, self.max_cost_usd, self.max_total_tokens)

    def total(self) -> Spend:
        """What every agent under the budget spent so far (a `Spend`; the `spend` field)."""
        return self.spend


@runtime_checkable
class SpendCap(Protocol):
    """What the runtime asks of a shared spend cap (the `budgets` start option, the `budget=`
    of `Supervisor`, `Pool` and `AgentHost`): `SharedBudget` (one process) and
    `gen_agent.ray.ClusterBudget` (every node of a Ray cluster) are the two.

    - `charge(usage, cost_usd, turns)`: add one agent's new spend (token counts per key, US
      dollars or None, turns), when a turn ends; must be quick (called in the agent's thread).
    - `exceeded()`: the `BudgetExceeded` of the cap reached so far, or None; asked at dispatch.
    - `total()`: the `Spend` so far.
    - `max_cost_usd` (US dollars) / `max_total_tokens` (tokens): the caps (None: no cap).

    Checked with `isinstance` (method and attribute names only, as `runtime_checkable` does).
    """

    max_cost_usd: float | None
    max_total_tokens: int | None

    def charge(self, usage: Mapping[str, int], cost_usd: float | None, turns: int) -> None: ...

    def exceeded(self) -> BudgetExceeded | None: ...

    def total(self) -> Spend: ...


def own_budget(owner: str, budget: Any, max_cost_usd: float | None,
               max_total_tokens: int | None) -> Any:
    """The spend cap of a `Supervisor`, `Pool` or `AgentHost` (`owner`, for messages): its
    `budget=` (a `SpendCap`, e.g. a `gen_agent.ray.ClusterBudget` shared with other nodes),
    else a new `SharedBudget` of the caps, else None (no cap).

    Raises:
        TypeError: `budget` is not a `SpendCap`.
        ValueError: `budget` given with `max_cost_usd` / `max_total_tokens`, or a bad cap.
    """
    if budget is None:
        if max_cost_usd is None and max_total_tokens is None:
            return None
        return SharedBudget(max_cost_usd, max_total_tokens)
    if not isinstance(budget, SpendCap):
        raise TypeError(f"{owner} budget= must be a gen_agent.SharedBudget or "
                        f"gen_agent.ray.ClusterBudget, got {type(budget).__name__}")
    if max_cost_usd is not None or max_total_tokens is not None:
        raise ValueError(f"{owner} takes budget= or max_cost_usd/max_total_tokens, not both "
                         "(the budget has its own caps)")
    return budget


def spend_since(now: Spend, before: Spend) -> tuple[dict[str, int], float | None, int]:
    """What `now` adds to `before`: `(usage delta, cost delta or None, turns delta)`."""
    usage = {k: v - before.usage.get(k, 0) for k, v in now.usage.items()
             if v != before.usage.get(k, 0)}
    cost = None
    if now.cost_usd is not None and now.cost_usd != (before.cost_usd or 0.0):
        cost = now.cost_usd - (before.cost_usd or 0.0)
    return usage, cost, now.turns - before.turns

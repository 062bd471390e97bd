"""Per-agent accounting: the running totals of tokens and cost, and the spend cap.

Every successful turn that reports usage or a cost (and every such turn whose reply failed
validation: its tokens were spent) adds its `Response.usage` and `Response.cost_usd` to the
agent's `Spend`; the totals so far
are on each `Response` (`session_usage`, `session_cost_usd`). They survive `reset_session`
(the cap is on the agent, not on one conversation) and, when the store persists them, a
restart (the `spend` start option seeds them).

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

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

__all__ = ["BudgetExceeded", "Spend", "add_turn", "check_budget", "total_tokens"]


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

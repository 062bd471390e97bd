"""Cluster-wide limits and spend caps on Ray: one `ProviderLimit` or `SharedBudget` for every
node of a cluster.

    limit = ClusterLimit("anthropic-main", max_concurrent=8, requests_per_minute=500)
    budget = ClusterBudget("support-tree", max_cost_usd=50.0)
    spec = gen_agent.child_spec(Assistant, name="a1", backend=AnthropicAPI,
                                provider_limit=limit, budgets=(budget,))
    gray.start_node("n1", [spec])   # and more nodes with the same limit and budget

Each is one Ray actor per name in the namespace (`gen_agent_limit:<name>`,
`gen_agent_budget:<name>`), holding the state a process-local one holds (permits in flight,
the requests and tokens of the last 60 s, `retry-after` holds; the spend so far). The objects
are drop-in: `ClusterLimit` is a `ProviderLimit` and `ClusterBudget` a `SharedBudget`, so the
start options `provider_limit=` and `budgets=` take them, and pickled into a node (in a child
spec) they attach to the same actor there.

Costs and bounds:

- A permit is one actor call at dispatch (`try_acquire`, a blocking round trip, ~1-3 ms on one
  machine: `make bench` has the row); a release and a hold are one-way calls (ordered after
  the caller's earlier calls, as Ray orders an actor's calls from one caller).
- An agent refused a permit waits without a thread, as with a local limit, but a permit freed
  on *another* node is seen by polling: the waiting node asks again every `POLL_S` (or at the
  moment a hold or a rate window ends, when that is sooner).
- A budget is checked at dispatch with one actor call, and charged with a one-way call when a
  turn ends, so a turn dispatched on another node in between may still start (as with a local
  budget, a running turn may overshoot the cap by its own spend).
- The actors are owned by the process that first created them (the driver, usually) and end
  with it, as nodes do.

Mirrors: nothing in the Elixir original (a `:global` rate limiter process per key).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import ray

from gen_agent._accounting import BudgetExceeded, SharedBudget, Spend, check_budget
from gen_agent._limits import LimitStatus, ProviderLimit
from gen_agent._timers import TIMERS
from gen_agent.ray._client import DEFAULT_NAMESPACE

__all__ = ["POLL_S", "ClusterBudget", "ClusterLimit"]

POLL_S: Final = 0.05
"""How often an agent waiting on a `ClusterLimit` asks again (seconds)."""

_CALL_TIMEOUT_S: Final = 30.0


class _LimitActor:
    """The state of one cluster-wide limit: a process-local `ProviderLimit` in its actor."""

    def __init__(self, name: str, bounds: dict[str, Any]) -> None:
        self.limit = ProviderLimit(name, **bounds)

    def bounds(self) -> dict[str, Any]:
        return {"max_concurrent": self.limit.max_concurrent,
                "requests_per_minute": self.limit.requests_per_minute,
                "tokens_per_minute": self.limit.tokens_per_minute}

    def try_take(self) -> float | None:
        return self.limit.try_take()

    def release(self, tokens: int) -> None:
        self.limit.release(tokens)

    def hold(self, ms: float) -> None:
        self.limit.hold(ms)

    def held_for(self) -> float:
        return self.limit.held_for()

    def status(self) -> LimitStatus:
        return self.limit.status()


class _BudgetActor:
    """The spend of one cluster-wide budget."""

    def __init__(self, max_cost_usd: float | None, max_total_tokens: int | None) -> None:
        self.budget = SharedBudget(max_cost_usd, max_total_tokens)

    def caps(self) -> tuple[float | None, int | None]:
        return self.budget.max_cost_usd, self.budget.max_total_tokens

    def charge(self, usage: dict[str, int], cost_usd: float | None, turns: int) -> None:
        self.budget.charge(usage, cost_usd, turns)

    def spend(self) -> Spend:
        return self.budget.spend


_remote: dict[type, Any] = {}


def _actor(cls: type, prefix: str, name: str, namespace: str, *args: Any) -> Any:
    remote = _remote.get(cls)
    if remote is None:
        remote = _remote[cls] = ray.remote(cls)
    return remote.options(name=f"{prefix}:{name}", namespace=namespace, get_if_exists=True,
                          num_cpus=0, max_concurrency=1, max_restarts=0).remote(*args)


class ClusterLimit(ProviderLimit):
    """A `ProviderLimit` shared by every node of a Ray cluster (one actor per name).

    Args:
        name: the limit's name in `namespace` (one actor per name); never the key itself.
        max_concurrent: as for `ProviderLimit` (a second `ClusterLimit` of a name must give
            the actor's bounds: others raise).
        requests_per_minute: as for `ProviderLimit`.
        tokens_per_minute: as for `ProviderLimit`.
        namespace: the cluster's Ray namespace (default `gen_agent.ray.DEFAULT_NAMESPACE`).

    Raises:
        ValueError: a bound is not a positive int or None, or differs from the existing
            actor's.

    Needs `ray.init` (or `gen_agent.ray.init_local`) first. Thread-safe.
    """

    def __init__(self, name: str, *, max_concurrent: int | None = None,
                 requests_per_minute: int | None = None, tokens_per_minute: int | None = None,
                 namespace: str = DEFAULT_NAMESPACE) -> None:
        super().__init__(name, max_concurrent=max_concurrent,
                         requests_per_minute=requests_per_minute,
                         tokens_per_minute=tokens_per_minute)
        bounds = {"max_concurrent": self.max_concurrent,
                  "requests_per_minute": self.requests_per_minute,
                  "tokens_per_minute": self.tokens_per_minute}
        self.namespace = namespace
        self._actor = _actor(_LimitActor, "gen_agent_limit", name, namespace, name, bounds)
        found = ray.get(self._actor.bounds.remote(), timeout=_CALL_TIMEOUT_S)
        if found != bounds:
            raise ValueError(f"ClusterLimit {name!r} exists with {found}, not {bounds}")
        self._poll: Any = None
        self._poll_lock = threading.Lock()

    def __reduce__(self) -> Any:
        # Pickled into a node (a child spec's provider_limit): attach to the same actor there.
        return (_attach_limit, (self.name, self.max_concurrent, self.requests_per_minute,
                                self.tokens_per_minute, self.namespace))

    # ------------------------------------------------------------------ the agent's side
    def try_acquire(self, waiter: Any, wake: Callable[[], None]) -> bool:
        """As `ProviderLimit.try_acquire`: one actor call; a refused waiter is woken by a
        local poll (`POLL_S`, or when the hold or window ends, if sooner)."""
        retry_in = self.try_take()
        with self._lock:
            if retry_in is None:
                self._waiters.pop(waiter, None)
                return True
            self._waiters[waiter] = wake
        self._poll_in(POLL_S if retry_in <= 0 else min(retry_in, POLL_S * 20))
        return False

    def try_take(self) -> float | None:
        """As `ProviderLimit.try_take`, cluster-wide (one actor call)."""
        return ray.get(self._actor.try_take.remote(), timeout=_CALL_TIMEOUT_S)

    def release(self, tokens: int = 0) -> None:
        """A request that held a permit ended (a one-way call); local waiters try again."""
        self._actor.release.remote(int(tokens))
        self._wake_all()

    def hold(self, ms: float) -> None:
        """Hold every request of the key back for `ms` milliseconds, on every node."""
        if ms > 0:
            self._actor.hold.remote(float(ms))

    def held_for(self) -> float:
        """Seconds left of the cluster-wide hold (one actor call)."""
        return float(ray.get(self._actor.held_for.remote(), timeout=_CALL_TIMEOUT_S))

    def status(self) -> LimitStatus:
        """The cluster-wide `LimitStatus` (`waiting`: this process's waiters)."""
        found: LimitStatus = ray.get(self._actor.status.remote(), timeout=_CALL_TIMEOUT_S)
        with self._lock:
            waiting = len(self._waiters)
        return LimitStatus(**{**{f: getattr(found, f) for f in found.__struct_fields__},
                              "waiting": waiting})

    def __repr__(self) -> str:
        return f"<ClusterLimit {self.name!r} namespace={self.namespace!r}>"

    def _poll_in(self, delay_s: float) -> None:
        with self._poll_lock:
            if self._poll is not None and not self._poll.cancelled \
                    and self._poll.deadline <= time.monotonic() + delay_s:
                return
            if self._poll is not None:
                self._poll.cancel()
            self._poll = TIMERS.schedule(delay_s, self._polled)

    def _polled(self) -> None:
        with self._poll_lock:
            self._poll = None
        self._wake_all()


class ClusterBudget(SharedBudget):
    """A `SharedBudget` held by every node of a Ray cluster (one actor per name): what every
    agent given it (`budgets=(budget,)`) spent together, on any node, against its caps.

    Args:
        name: the budget's name in `namespace` (one actor per name).
        max_cost_usd: as for `SharedBudget` (a second `ClusterBudget` of a name must give
            the actor's caps: others raise `ValueError`).
        max_total_tokens: as for `SharedBudget`.
        namespace: the cluster's Ray namespace.

    Raises:
        ValueError: as `SharedBudget`, or caps differing from the existing actor's.
    """

    def __init__(self, name: str, max_cost_usd: float | None = None,
                 max_total_tokens: int | None = None, *,
                 namespace: str = DEFAULT_NAMESPACE) -> None:
        super().__init__(max_cost_usd, max_total_tokens)
        self.name = name
        self.namespace = namespace
        self._actor = _actor(_BudgetActor, "gen_agent_budget", name, namespace,
                             self.max_cost_usd, self.max_total_tokens)
        caps = ray.get(self._actor.caps.remote(), timeout=_CALL_TIMEOUT_S)
        if tuple(caps) != (self.max_cost_usd, self.max_total_tokens):
            raise ValueError(f"ClusterBudget {name!r} exists with caps {caps}")

    def __reduce__(self) -> Any:
        return (_attach_budget, (self.name, self.max_cost_usd, self.max_total_tokens,
                                 self.namespace))

    def __repr__(self) -> str:
        return (f"ClusterBudget({self.name!r}, max_cost_usd={self.max_cost_usd!r}, "
                f"max_total_tokens={self.max_total_tokens!r})")

    def charge(self, usage: Mapping[str, int], cost_usd: float | None, turns: int) -> None:
        """Add one agent's new spend, cluster-wide (a one-way call)."""
        self._actor.charge.remote(dict(usage), cost_usd, turns)

    def total(self) -> Spend:
        """What every agent under the budget spent so far, on every node (one actor call)."""
        spend: Spend = ray.get(self._actor.spend.remote(), timeout=_CALL_TIMEOUT_S)
        return spend

    def exceeded(self) -> BudgetExceeded | None:
        """The cap reached so far, cluster-wide (one actor call), or None."""
        return check_budget(self.total(), self.max_cost_usd, self.max_total_tokens)


def _attach_budget(name: str, max_cost_usd: float | None, max_total_tokens: int | None,
                   namespace: str) -> ClusterBudget:
    return ClusterBudget(name, max_cost_usd, max_total_tokens, namespace=namespace)


def _attach_limit(name: str, max_concurrent: int | None, requests_per_minute: int | None,
                  tokens_per_minute: int | None, namespace: str) -> ClusterLimit:
    return ClusterLimit(name, max_concurrent=max_concurrent,
                        requests_per_minute=requests_per_minute,
                        tokens_per_minute=tokens_per_minute, namespace=namespace)

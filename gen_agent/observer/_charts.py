"""The observer's chart series: turns per second, p50/p95 turn latency, tokens and cost over
the last minutes, overall, per host and per agent, computed from the collector's ring of
recent turns (no other data is kept for them).

`series(turns, now)` buckets the turns that ended in the window by their end time and returns
JSON-ready lists the page draws as small inline SVG charts. The ring is bounded
(`Collector(max_turns=...)`, default 200 turns), so under heavy load the window shows the
most recent turns only: `covered_from` says where the ring's oldest turn ended.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["BUCKET_S", "MAX_AGENT_SCOPES", "WINDOW_S", "percentile", "series"]

WINDOW_S: Final = 300
"""The charts' window (seconds): the last five minutes."""

BUCKET_S: Final = 10
"""One point of a chart (seconds)."""

MAX_AGENT_SCOPES: Final = 8
"""Agents charted one by one (those with the most turns in the window); hosts are all
charted."""


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank `q`-quantile (0 < q <= 1) of `values`, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _scope(kind: str, name: str, turns: list[dict[str, Any]], start: float,
           buckets: int) -> dict[str, Any]:
    durations: list[list[float]] = [[] for _ in range(buckets)]
    counts = [0] * buckets
    tokens = [0] * buckets
    cost = [0.0] * buckets
    for turn in turns:
        index = int((turn["ended"] - start) // BUCKET_S)
        if not 0 <= index < buckets:
            continue
        counts[index] += 1
        if isinstance(turn.get("duration_ms"), int | float):
            durations[index].append(turn["duration_ms"])
        tokens[index] += (turn.get("input_tokens") or 0) + (turn.get("output_tokens") or 0)
        cost[index] += turn.get("cost_usd") or 0.0
    return {
        "scope": kind, "name": name, "turns": sum(counts),
        "turns_per_s": [round(count / BUCKET_S, 3) for count in counts],
        "p50_ms": [percentile(d, 0.50) for d in durations],
        "p95_ms": [percentile(d, 0.95) for d in durations],
        "tokens": tokens,
        "cost_usd": [round(c, 6) for c in cost],
    }


def series(turns: Iterable[dict[str, Any]], now: float) -> dict[str, Any]:
    """The chart series of `turns` (the collector's turn dicts) for the window ending `now`.

    Returns `{"window_s", "bucket_s", "start", "covered_from", "scopes": [...]}`; `start` is the
    first bucket's start (epoch seconds, a multiple of `BUCKET_S`). Each scope is
    `{"scope": "all" | "host" | "agent", "name", "turns", "turns_per_s": [per second],
    "p50_ms": [ms or None], "p95_ms": [ms or None], "tokens": [in + out, count],
    "cost_usd": [US dollars]}`, one value per bucket, oldest first. A bucket without a turn
    has no latency (None). Scopes: "all", then every host, then at most `MAX_AGENT_SCOPES`
    agents (the busiest).
    """
    turns = list(turns)
    buckets = WINDOW_S // BUCKET_S
    start = (math.floor(now / BUCKET_S) + 1) * BUCKET_S - WINDOW_S
    recent = [t for t in turns if t.get("ended", 0) >= start]
    hosts: dict[str, list[dict[str, Any]]] = {}
    agents: dict[str, list[dict[str, Any]]] = {}
    for turn in recent:
        if turn.get("host"):
            hosts.setdefault(turn["host"], []).append(turn)
        agents.setdefault(turn["agent"], []).append(turn)
    busiest = sorted(agents, key=lambda name: (-len(agents[name]), name))[:MAX_AGENT_SCOPES]
    scopes = [_scope("all", "all", recent, start, buckets)]
    scopes += [_scope("host", name, hosts[name], start, buckets) for name in sorted(hosts)]
    scopes += [_scope("agent", name, agents[name], start, buckets) for name in sorted(busiest)]
    return {"window_s": WINDOW_S, "bucket_s": BUCKET_S, "start": start,
            "covered_from": turns[0]["ended"] if turns else None, "scopes": scopes}

"""The observer's chart series (`gen_agent.observer.charts`) and the collector feeding them."""

from __future__ import annotations

from typing import Any

import gen_agent
from gen_agent._event import Event
from gen_agent.backends.mock import MockBackend
from gen_agent.observer import _charts as charts
from gen_agent.observer._collector import Collector
from gen_agent.testing._helpers import ScriptedAgent


def _turn(agent: str, ended: float, duration_ms: int, tokens: int = 0, cost: float = 0.0,
          host: str | None = None) -> dict[str, Any]:
    return {"agent": agent, "host": host, "ended": ended, "duration_ms": duration_ms,
            "input_tokens": tokens, "output_tokens": 1, "cost_usd": cost, "outcome": "ok"}


def test_percentile_is_nearest_rank() -> None:
    assert charts.percentile([], 0.5) is None
    assert charts.percentile([5.0], 0.95) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert charts.percentile(values, 0.50) == 50.0
    assert charts.percentile(values, 0.95) == 95.0


def test_series_buckets_rates_latency_tokens_and_cost_per_scope() -> None:
    now = 10_005.0  # the last bucket is the current one, [10000, 10010)
    turns = [
        _turn("old", now - charts.WINDOW_S - 1, 1),                  # outside the window
        _turn("('h', 'k1')", now - 5, 100, 10, 0.25, host="h"),
        _turn("('h', 'k2')", now - 4, 300, 20, 0.5, host="h"),
        _turn("solo", now - 25, 40, 3, 0.0),
    ]
    view = charts.series(turns, now)
    assert view["start"] == 10_010 - charts.WINDOW_S
    assert view["covered_from"] == now - charts.WINDOW_S - 1
    scopes = {(s["scope"], s["name"]): s for s in view["scopes"]}
    assert list(scopes) == [("all", "all"), ("host", "h"), ("agent", "('h', 'k1')"),
                            ("agent", "('h', 'k2')"), ("agent", "solo")]
    everything = scopes[("all", "all")]
    assert len(everything["turns_per_s"]) == charts.WINDOW_S // charts.BUCKET_S
    assert everything["turns"] == 3
    assert everything["turns_per_s"][-1] == 0.2  # two turns in the last 10 s
    assert everything["p50_ms"][-1] == 100 and everything["p95_ms"][-1] == 300
    assert everything["tokens"][-1] == 10 + 1 + 20 + 1
    assert everything["cost_usd"][-1] == 0.75
    assert everything["p50_ms"][-3] == 40 and everything["p50_ms"][-2] is None
    host = scopes[("host", "h")]
    assert host["turns"] == 2 and host["p95_ms"][-1] == 300
    assert scopes[("agent", "solo")]["tokens"][-3] == 4


def test_only_the_busiest_agents_get_a_chart_of_their_own() -> None:
    now = 1_000.0
    turns = [_turn(f"a{i}", now - 1, 1) for i in range(charts.MAX_AGENT_SCOPES + 3)]
    turns += [_turn("busy", now - 2, 1), _turn("busy", now - 3, 1)]
    names = [s["name"] for s in charts.series(turns, now)["scopes"] if s["scope"] == "agent"]
    assert len(names) == charts.MAX_AGENT_SCOPES and "busy" in names


def test_the_snapshot_charts_host_agents_per_host(agent_system: gen_agent.AgentSystem) -> None:
    turn = [Event.new("text", {"text": "hi"}),
            Event.new("usage", {"input_tokens": 5, "output_tokens": 2}),
            Event.new("result", {"text": "hi", "cost_usd": 0.01})]
    host = gen_agent.AgentHost(ScriptedAgent, backend=MockBackend, name="chats",
                               agent_system=agent_system, scripts=[turn])
    with Collector(agent_system) as collector:
        host.ask("user-1", "q", timeout=5)
        view = collector.snapshot()["charts"]
    host.close()
    scopes = {(s["scope"], s["name"]): s for s in view["scopes"]}
    assert scopes[("host", "chats")]["turns"] == 1
    assert sum(scopes[("host", "chats")]["tokens"]) == 7
    assert scopes[("agent", "('chats', 'user-1')")]["cost_usd"][-1] == 0.01

"""Cluster-wide limits and budgets (`gen_agent.ray.ClusterLimit`, `ClusterBudget`): two nodes
of the session's Ray under one limit of 2 never hold more than 2 requests at the loopback
server, and a budget crossed on one node refuses turns on the other: an agent's `budgets=`
and a node supervisor's own spend cap (`start_node(budget=)`, `Supervisor(budget=)`) alike."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from backends.loop_server import LoopServer

import gen_agent
import gen_agent.ray as gray
from gen_agent._accounting import BudgetExceeded
from gen_agent._errors import TurnError
from gen_agent.backends.anthropic import AnthropicAPI

from . import agents

pytest.importorskip("anthropic")
WAIT_S = 60.0


def _spec(name: str, url: str, **opts: Any) -> Any:
    return gen_agent.child_spec(agents.PassThrough, name=name, backend=AnthropicAPI,
                                backend_opts={"api_key": "k", "base_url": url, "model": "m"},
                                **opts)


def test_one_limit_and_one_budget_hold_across_two_nodes(cluster: Any) -> None:
    # One pair of nodes for both checks: a node start is the cost of this test.
    ns = cluster.namespace
    with LoopServer(delay_s=0.3) as server:
        limit = gray.ClusterLimit("shared-key", max_concurrent=2, namespace=ns)
        budget = gray.ClusterBudget("tree", max_total_tokens=10, namespace=ns)
        # each node's supervisor has one ClusterBudget as its own spend cap (over every agent
        # of the node), reached by the eighth turn of 14 tokens (the seven before spend 98)
        team = gray.ClusterBudget("team", max_total_tokens=100, namespace=ns)
        names = [f"lim{i}" for i in range(6)]
        cluster.start_node("left", [
            *[_spec(n, server.url, provider_limit=limit) for n in names[:3]],
            _spec("spender", server.url, budgets=(budget,)), _spec("team-left", server.url)],
            budget=team)
        cluster.start_node("right", [
            *[_spec(n, server.url, provider_limit=limit) for n in names[3:]],
            _spec("other", server.url, budgets=(budget,)), _spec("team-right", server.url)],
            budget=team)

        # two nodes under one cluster-wide limit of 2: never 3 requests at the server
        texts: dict[str, str] = {}

        def ask(name: str) -> None:
            texts[name] = gray.ask(name, "hi", timeout=WAIT_S, namespace=ns).text

        threads = [threading.Thread(target=ask, args=(n,)) for n in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
        assert texts == dict.fromkeys(names, "hi")
        assert server.requests == 6
        assert server.peak == 2  # two at a time across both nodes, never three
        status = limit.status()
        assert (status.in_flight, status.requests_last_minute) == (0, 6)
        assert status.tokens_last_minute == 6 * 14  # 5 input + 9 output tokens a turn

        # a budget crossed on one node refuses turns on the other
        assert gray.ask("spender", "one", timeout=WAIT_S, namespace=ns).text == "hi"
        assert _wait_spent(budget, 14)  # the charge is a one-way call
        with pytest.raises(TurnError) as refused:
            gray.ask("other", "two", timeout=WAIT_S, namespace=ns)
        kind, info = refused.value.reason
        assert kind == "budget_exceeded"
        assert (info.limit, info.maximum, info.spent) == ("tokens", 10, 14)
        assert server.requests == 7  # the other node's turn never reached the server

        # the node supervisors' cap crossed on one node refuses the next turn on the other
        assert _wait_spent(team, 98) and team.total().turns == 7
        assert gray.ask("team-left", "three", timeout=WAIT_S, namespace=ns).text == "hi"
        assert _wait_spent(team, 112)
        with pytest.raises(TurnError) as by_tree:
            gray.ask("team-right", "four", timeout=WAIT_S, namespace=ns)
        assert by_tree.value.reason == ("budget_exceeded", BudgetExceeded(
            limit="tokens", maximum=100, spent=112))
        assert server.requests == 8
        assert (team.total().turns, budget.total().turns) == (8, 1)  # none charged twice


def _wait_spent(budget: Any, tokens: int) -> bool:
    done = threading.Event()
    for _ in range(200):
        spend = budget.total()
        if spend.usage.get("input_tokens", 0) + spend.usage.get("output_tokens", 0) >= tokens:
            return True
        done.wait(0.05)
    return False

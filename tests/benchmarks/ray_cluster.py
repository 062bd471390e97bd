"""`make bench`, Ray part (issue 23): gen_agent.ray against bare Ray and the local Pool.

    .venv/bin/python tests/benchmarks/ray_cluster.py [--rounds 5] [--calls 300] [--tasks 1000]
        [--agents 2000] [--json benchmarks-ray.json]

Runs on a local Ray bound to 127.0.0.1 (`gen_agent.ray.init_local`), started once (2-6 s).
Figures, each a median over interleaved rounds (A, B, A, B...; one untimed warm-up round):

1. Remote ask: `gen_agent.ray.ask` of a mock agent on a node, against a bare Ray call of a
   threaded actor method returning its argument (the floor of any remote call); p50 of
   `calls` sequential calls each; target ratio <= 1.5.
2. RemotePool over 2 nodes (2 workers each) against a local `Pool` of 4 workers in this
   process: `map` of `tasks` mock prompts, tasks per second; target ratio >= 0.9.
3. Agents per node: a node started with `agents` idle agents as children (one Ray call),
   its start time, and resident memory per agent (node VmRSS with them minus an empty node's,
   divided by `agents`).

Targets are printed, never asserted. Ray's own processes compete for the same cores as the
caller: on 2 cores the figures are noisy; compare ratios, not absolute values.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gen_agent.ray.local import init_local, prepare_loopback_env

prepare_loopback_env()

import ray  # noqa: E402

import gen_agent  # noqa: E402
import gen_agent.ray as gray  # noqa: E402
from gen_agent.backends import mock  # noqa: E402
from gen_agent.backends.mock import MockBackend  # noqa: E402

NAMESPACE = "gen_agent_bench"


class Worker(gen_agent.GenAgent):
    """A mock worker answering "ok" to every prompt (scripts given as the option)."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": [mock.text_turn("ok")] * opts.get("turns", 1)}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)


class Bare:
    """The bare Ray actor of figure 1 (threaded like a node)."""

    def echo(self, value: Any) -> Any:
        return value


def _p50_us(fn: Any, calls: int) -> float:
    samples = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - started) / 1000)
    return statistics.median(samples)


def _throughput(pool: Any, tasks: int) -> float:
    prompts = [f"p{i}" for i in range(tasks)]
    started = time.perf_counter()
    responses = pool.map(prompts, timeout=300)
    elapsed = time.perf_counter() - started
    assert len(responses) == tasks and all(r.text == "ok" for r in responses)
    return tasks / elapsed


def run(rounds: int, calls: int, tasks: int, agents: int,
        max_in_flight: int) -> dict[str, Any]:
    """Every figure; returns `{"figures": {key: {...}}, "rounds": {...}}`."""
    init_local(num_cpus=2)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    turns = (rounds + 1) * max(calls, tasks) + 10
    ask_node = gray.start_node("ask", [gen_agent.child_spec(
        Worker, name="w", backend=MockBackend, turns=turns)], namespace=NAMESPACE)
    bare = ray.remote(Bare).options(max_concurrency=128, num_cpus=0).remote()
    ray.get(bare.echo.remote(0))
    nodes = [gray.start_node(f"pool-{i}", namespace=NAMESPACE) for i in range(2)]
    remote_pool = gray.RemotePool(Worker, nodes=[n.name for n in nodes], size=2,
                                  max_in_flight=max_in_flight, backend=MockBackend,
                                  namespace=NAMESPACE, turns=turns)
    results: dict[str, list[float]] = {"bare_us": [], "ask_us": [], "ask_ratio": [],
                                       "local_pool_per_s": [], "remote_pool_per_s": [],
                                       "pool_ratio": []}
    with gen_agent.AgentSystem():
        local_pool = gen_agent.Pool(Worker, size=4, max_in_flight=max_in_flight,
                                    backend=MockBackend, turns=turns)
        try:
            for round_index in range(rounds + 1):
                bare_us = _p50_us(lambda: ray.get(bare.echo.remote("x")), calls)
                ask_us = _p50_us(lambda: gray.ask("w", "x", 30, namespace=NAMESPACE), calls)
                local = _throughput(local_pool, tasks)
                remote = _throughput(remote_pool, tasks)
                if round_index == 0:
                    continue  # warm-up
                results["bare_us"].append(bare_us)
                results["ask_us"].append(ask_us)
                results["ask_ratio"].append(ask_us / bare_us)
                results["local_pool_per_s"].append(local)
                results["remote_pool_per_s"].append(remote)
                results["pool_ratio"].append(remote / local)
        finally:
            local_pool.stop(60)
            remote_pool.stop(60)
    for node in [ask_node, *nodes]:
        node.stop()
    empty = gray.start_node("empty", namespace=NAMESPACE)
    empty_kib = empty.info()["rss_kib"]
    empty.stop()
    started = time.perf_counter()
    many = gray.start_node("many", [gen_agent.child_spec(
        Worker, name=("idle", i), backend=MockBackend) for i in range(agents)],
        namespace=NAMESPACE, timeout=600)
    start_s = time.perf_counter() - started
    info = many.info()
    many.stop(300)
    ray.shutdown()
    med = {key: statistics.median(values) for key, values in results.items()}
    spread = {key: (min(values), max(values)) for key, values in results.items()}
    figures = {
        "bare_ray_call_p50_us": (med["bare_us"], "us", ""),
        "remote_ask_p50_us": (med["ask_us"], "us", ""),
        "remote_ask_vs_bare_ray": (med["ask_ratio"], "x", "<= 1.5"),
        "local_pool_tasks_per_s": (med["local_pool_per_s"], "tasks/s", ""),
        "remote_pool_2_nodes_tasks_per_s": (med["remote_pool_per_s"], "tasks/s", ""),
        "remote_pool_vs_local_pool": (med["pool_ratio"], "x", ">= 0.9"),
        "agents_per_node": (info["agents"], "agents", ""),
        "node_start_s": (start_s, "s", ""),
        "kib_per_agent_on_a_node": ((info["rss_kib"] - empty_kib) / agents, "KiB", ""),
    }
    spreads = {"remote_ask_vs_bare_ray": spread["ask_ratio"],
               "remote_pool_vs_local_pool": spread["pool_ratio"]}
    return {"figures": {key: {"value": value, "unit": unit, "target": target,
                              "min_max": spreads.get(key)}
                        for key, (value, unit, target) in figures.items()},
            "rounds": results, "params": {"rounds": rounds, "calls": calls, "tasks": tasks,
                                          "agents": agents,
                                          "max_in_flight": max_in_flight}}


def _met(value: float, target: str) -> str:
    if not target:
        return ""
    op, _, bound = target.partition(" ")
    ok = value <= float(bound) if op == "<=" else value >= float(bound)
    return "ok" if ok else "MISS"


def main(argv: list[str] | None = None) -> int:
    """Run the Ray benchmarks, print the table, write the JSON; exit status 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--json", default="benchmarks-ray.json")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    report = run(args.rounds, args.calls, args.tasks, args.agents, args.max_in_flight)
    print(f"\nRay (issue 23)   [{args.rounds} rounds, {time.perf_counter() - started:.1f} s]")
    for key, fig in report["figures"].items():
        spread = fig["min_max"]
        extra = f" [{spread[0]:.2f}-{spread[1]:.2f}]" if spread else ""
        print(f"  {key:<36} {fig['value']:>12.2f} {fig['unit']:<8}{extra:<14} "
              f"{fig['target']:<8} {_met(fig['value'], fig['target'])}".rstrip())
    Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

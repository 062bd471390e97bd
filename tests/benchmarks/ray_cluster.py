"""8. Ray (issue 23): gen_agent.ray against a bare Ray call and the local Pool.

Runs on a local Ray bound to 127.0.0.1 (`gen_agent.ray.init_local`, started once in `setup`;
an already running Ray in this process is used as it is, and left running). Figures, in
interleaved rounds:

- `bare_ray_call`: p50 of `calls` sequential `ray.get(actor.echo.remote("x"))` on a threaded
  Ray actor (the floor of any remote call);
- `remote_ask`: p50 of `calls` sequential `gen_agent.ray.ask` of a mock agent on a node;
  target <= 1.5 x `bare_ray_call`;
- `local_pool`: tasks per second of `Pool.map` over `tasks` mock prompts, 4 workers in this
  process (`max_in_flight` each);
- `remote_pool`: the same through a `RemotePool` of 2 workers on each of 2 nodes; target
  >= 0.9 x `local_pool`;
- `kib_per_agent`: a node started with `agents` idle mock agents as children (one Ray call):
  its resident memory minus an empty node's, per agent (extras: `agents`, the count hosted,
  and `start_s`, the node's start time with them);
- `kib_per_hibernated_agent`: the same with `hibernated` agents that hibernate as soon as they
  are idle (`hibernate_after_ms=0`: no thread each), the way a node holds more agents than
  threads.

Ray's processes share the caller's cores (on 2 cores the figures are noisy: compare ratios).
In the pinned placement the Ray processes started by `setup` inherit the pinning: the driver,
both nodes, the raylet and the GCS then share one CPU, so the pinned `remote_pool` measures
the pool's CPU cost per task (two processes' share of a Ray call on top of the agent's turn),
not a scale-out. Unpinned, the local Pool is itself bimodal on this VM (about 5,000 or 12,000
tasks/s, depending on where its threads land), which moves the unpinned ratio.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._harness import Measured, figure, latency_us, time_calls_us

NAME = "ray_cluster"
TITLE = "8. Ray: remote ask, RemotePool over 2 nodes, agents per node"
ORDER = 80
FULL: dict[str, Any] = {"calls": 300, "tasks": 1000, "max_in_flight": 8, "agents": 1000,
                        "hibernated": 20_000, "rounds": 5, "warmup_rounds": 1}
SMOKE: dict[str, Any] = {"calls": 5, "tasks": 20, "max_in_flight": 2, "agents": 10,
                         "hibernated": 10, "rounds": 1, "warmup_rounds": 0}
# The README table's rows (besides the targets): throughputs and memory per agent.
README = ("bare_ray_call", "remote_ask", "remote_ask_vs_bare_ray_call", "local_pool",
          "remote_pool", "remote_pool_vs_local_pool", "kib_per_agent",
          "kib_per_hibernated_agent", "kib_per_hibernated_agent_start_s", "local_permit",
          "cluster_permit")
NAMESPACE = "gen_agent_bench"


class Worker(gen_agent.GenAgent):
    """A mock worker answering "ok" to every prompt (`turns` scripted answers)."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        """One scripted `"ok"` turn per expected prompt."""
        return {"scripts": [mock.text_turn("ok")] * opts.get("turns", 1)}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        """Never halts."""
        return gen_agent.NoReply(state)


class Bare:
    """The bare Ray actor of `bare_ray_call` (threaded, like a node)."""

    def echo(self, value: Any) -> Any:
        """Return `value`."""
        return value


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Start Ray (unless running), a node with one agent, a bare actor, two pool nodes, the
    RemotePool and the local Pool; stop them all afterwards."""
    from gen_agent.ray._local import init_local, prepare_loopback_env

    prepare_loopback_env()
    import ray

    import gen_agent.ray as cluster

    started_ray = not ray.is_initialized()
    init_local(num_cpus=2)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rounds = params["rounds"] + params["warmup_rounds"]
    turns = rounds * max(params["calls"], params["tasks"]) + 10
    nodes: list[Any] = []
    pools: list[Any] = []
    try:
        nodes.append(cluster.start_node("ask", [gen_agent.child_spec(
            Worker, name="w", backend=MockBackend, turns=turns)], namespace=NAMESPACE))
        bare = ray.remote(Bare).options(max_concurrency=128, num_cpus=0).remote()
        ray.get(bare.echo.remote(0))
        nodes += [cluster.start_node(f"pool-{i}", namespace=NAMESPACE) for i in range(2)]
        pools.append(cluster.RemotePool(
            Worker, nodes=["pool-0", "pool-1"], size=2, backend=MockBackend,
            max_in_flight=params["max_in_flight"], namespace=NAMESPACE, turns=turns))
        with gen_agent.AgentSystem():
            pools.append(gen_agent.Pool(Worker, size=4, backend=MockBackend,
                                        max_in_flight=params["max_in_flight"], turns=turns))
            empty = cluster.start_node("empty", namespace=NAMESPACE)
            nodes.append(empty)
            from gen_agent._limits import ProviderLimit
            from gen_agent.ray._limits import ClusterLimit

            yield {"ray": ray, "cluster": cluster, "bare": bare, "remote_pool": pools[0],
                   "local_pool": pools[1], "empty_kib": empty.info()["rss_kib"],
                   "local_limit": ProviderLimit("bench", max_concurrent=10_000),
                   "cluster_limit": ClusterLimit("bench", max_concurrent=10_000,
                                                 namespace=NAMESPACE)}
            for pool in reversed(pools):
                pool.stop(60)
            pools.clear()
    finally:
        for pool in reversed(pools):
            pool.stop(60)
        for node in nodes:
            node.stop()
        if started_ray:
            cluster.shutdown_local()


@figure(unit="us", label="bare Ray actor call")
def bare_ray_call(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """p50 of sequential calls of the bare threaded actor."""
    ray, bare = env["ray"], env["bare"]
    return latency_us(time_calls_us(lambda: ray.get(bare.echo.remote("x")), params["calls"]))


@figure(unit="us", label="gen_agent.ray.ask (mock agent on a node)", peer="bare_ray_call",
        target="<= 1.5")
def remote_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """p50 of sequential remote asks."""
    ask = env["cluster"].ask
    return latency_us(time_calls_us(lambda: ask("w", "x", 30, namespace=NAMESPACE),
                                    params["calls"]))


def _permit(limit: Any) -> None:
    if limit.try_take() is not None:
        raise AssertionError("the bench limit refused a permit")
    limit.release(10)


@figure(unit="us", label="local ProviderLimit permit (take + release)")
def local_permit(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """p50 of a permit taken and given back on a process-local limit."""
    limit = env["local_limit"]
    return latency_us(time_calls_us(lambda: _permit(limit), params["calls"]))


@figure(unit="us", label="ClusterLimit permit (an actor call + a one-way release)",
        peer="local_permit", note="the cost per permit of a cluster-wide limit")
def cluster_permit(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """p50 of a permit taken and given back on the cluster-wide limit's actor."""
    limit = env["cluster_limit"]
    return latency_us(time_calls_us(lambda: _permit(limit), params["calls"]))


def _throughput(pool: Any, tasks: int) -> float:
    prompts = [f"p{i}" for i in range(tasks)]
    started = time.perf_counter()
    responses = pool.map(prompts, timeout=300)
    elapsed = time.perf_counter() - started
    if len(responses) != tasks or any(r.text != "ok" for r in responses):
        raise AssertionError("a pool task was not answered 'ok'")
    return tasks / elapsed


@figure(unit="tasks/s", label="local Pool, 4 workers")
def local_pool(env: dict[str, Any], params: dict[str, Any]) -> float:
    """Tasks per second of the local Pool."""
    return _throughput(env["local_pool"], params["tasks"])


@figure(unit="tasks/s", label="RemotePool, 2 nodes x 2 workers", peer="local_pool",
        target=">= 0.9")
def remote_pool(env: dict[str, Any], params: dict[str, Any]) -> float:
    """Tasks per second of the RemotePool."""
    return _throughput(env["remote_pool"], params["tasks"])


def _wait_gone(pid: int, timeout: float = 60.0) -> None:
    # The next figure must not share the CPU with this node's exit (freeing its agents).
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)


def _kib_per_agent(env: dict[str, Any], count: int, **opts: Any) -> Measured:
    # (VmRSS of a node started with `count` idle children - an empty node's) / count.
    cluster = env["cluster"]
    started = time.perf_counter()
    node = cluster.start_node("many", [gen_agent.child_spec(
        Worker, name=("idle", i), backend=MockBackend, **opts) for i in range(count)],
        namespace=NAMESPACE, timeout=600)
    start_s = time.perf_counter() - started
    try:
        info = node.info()
    finally:
        node.stop(300)
    _wait_gone(info["pid"])
    return Measured((info["rss_kib"] - env["empty_kib"]) / count,
                    {"agents": float(info["agents"]), "start_s": start_s})


@figure(unit="KiB", label="resident memory per idle agent on a node")
def kib_per_agent(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """A node with `agents` idle children (a thread each)."""
    return _kib_per_agent(env, params["agents"])


@figure(unit="KiB", label="resident memory per hibernated agent on a node")
def kib_per_hibernated_agent(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """A node with `hibernated` children that hibernate at once (no thread each)."""
    return _kib_per_agent(env, params["hibernated"], hibernate_after_ms=0)

"""Activation by key across Ray nodes (issue 41): `RayHost` on a `PostgresStore`.

Figures per round: activation of a cold key from PostgreSQL (a stored record, no live agent:
`RayHost.ask` goes to the key's node, which takes the lease, loads the record, starts the
agent and runs one mock turn), and the asks per second through a host on two nodes against a
host on one node (`threads` callers asking `live` keys that stay live). On one 2-core machine
the two nodes share the caller's cores, so the ratio says what the second node costs or
gains there, not what a second machine would bring.

Runs on a local Ray bound to 127.0.0.1 (`init_local`) and a throwaway PostgreSQL started from
Debian's `postgresql` binaries as `nobody` on a unix socket (`tests/pgcluster.py`); without
psycopg or the binaries the figures say n/a.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._harness import Measured, figure, latency_us, time_calls_us

NAME = "ray_host"
TITLE = "Activation by key on Ray (RayHost over PostgresStore, issue 41)"
ORDER = 78
README = ("cold_activation_pg", "two_nodes")
FULL: dict[str, Any] = {"keys": 2_000, "cold": 100, "calls": 2_000, "live": 32, "threads": 8,
                        "rounds": 5}
SMOKE: dict[str, Any] = {"keys": 2, "cold": 1, "calls": 4, "live": 2, "threads": 2,
                         "rounds": 1}
NAMESPACE = "gen_agent_bench_ray_host"


class KeyAgent(gen_agent.GenAgent):
    """Answers "ok" to every prompt (the mock's fallback)."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        """The mock answers "ok" to every prompt."""
        return {"fallback": mock.text_turn("ok")}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        """Never halts."""
        return gen_agent.NoReply(state)


_SERVER: list[Any] = []  # the PostgreSQL of this process, started once (both placements)


def _postgres() -> Any:
    """This process's throwaway PostgreSQL (`tests/pgcluster.py`), started on first use and
    stopped at exit; None without the server binaries."""
    if _SERVER:
        return _SERVER[0]
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from pgcluster import Cluster, _bin_dir

    bindir = _bin_dir()
    if bindir is None:
        return None
    folder = tempfile.mkdtemp(prefix="ga_pg_bench_")
    cluster = Cluster(folder, bindir)

    def stop() -> None:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    cluster.start()
    _SERVER.append(cluster)
    return cluster


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """PostgreSQL with `keys` stored records, Ray with two nodes, a host over both and one
    over the first only; all stopped afterwards."""
    try:
        import psycopg  # noqa: F401 - only whether it is there
    except ImportError:
        yield {"notes": {"cold_activation_pg": "psycopg not installed"}, "skip": True}
        return
    from gen_agent.ray._local import init_local, prepare_loopback_env

    prepare_loopback_env()
    import ray

    import gen_agent.ray as cluster
    from gen_agent.store import PostgresStore

    pg = _postgres()
    if pg is None:
        yield {"notes": {"cold_activation_pg": "no PostgreSQL binaries"}, "skip": True}
        return
    from pgcluster import wipe

    wipe(pg)
    store = PostgresStore(pg.conninfo())
    for i in range(params["keys"]):  # every key has a stored record (a past turn)
        lease = store.acquire(f"key-{i}")
        store.update(lease, conversation={"session_id": f"s-{i}"}, backend="MockBackend")
        store.release(lease)
    started_ray = not ray.is_initialized()
    init_local(num_cpus=2)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    nodes: list[Any] = []
    hosts: list[Any] = []
    try:
        nodes += [cluster.start_node(f"h-{i}", namespace=NAMESPACE) for i in range(2)]
        two = cluster.RayHost(KeyAgent, backend=MockBackend, nodes=["h-0", "h-1"],
                              store=store, namespace=NAMESPACE, name="two")
        one = cluster.RayHost(KeyAgent, backend=MockBackend, nodes=["h-0"], store=store,
                              namespace=NAMESPACE, name="one")
        hosts += [two, one]
        live = [f"live-{i}" for i in range(params["live"])]
        for host in hosts:
            for key in live:
                host.ask(f"{host.name}-{key}", "warm", 30)
        yield {"two": two, "one": one, "live": live, "next": [0], "notes": {},
               "keys": params["keys"], "store": store}
    finally:
        for host in hosts:
            host.close()
        for node in nodes:
            node.stop()
        store.close()
        if started_ray:
            cluster.shutdown_local()


@figure(unit="us", label="cold key: activate from PostgreSQL on its node + 1 turn",
        target="<= 20000")
def cold_activation_pg(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
    if env.get("skip"):
        return None
    host, samples = env["two"], []
    for _ in range(params["cold"]):
        key = f"key-{env['next'][0] % env['keys']}"
        env["next"][0] += 1
        host.deactivate(key)  # untimed: the key is cold again
        samples += time_calls_us(lambda key=key: host.ask(key, "q", timeout=30), 1)
        host.deactivate(key)
    return latency_us(samples)


def _asks_per_s(env: dict[str, Any], params: dict[str, Any], host: Any) -> float:
    keys = [f"{host.name}-{key}" for key in env["live"]]
    calls = params["calls"]
    started = time.perf_counter()
    with ThreadPoolExecutor(params["threads"]) as pool:
        texts = list(pool.map(lambda i: host.ask(keys[i % len(keys)], "q", 30).text,
                              range(calls)))
    elapsed = time.perf_counter() - started
    if texts != ["ok"] * calls:
        raise AssertionError("an ask through the host was not answered 'ok'")
    return calls / elapsed


@figure(unit="asks/s", label="asks through a host on one node")
def one_node(env: dict[str, Any], params: dict[str, Any]) -> float | None:
    return None if env.get("skip") else _asks_per_s(env, params, env["one"])


@figure(unit="asks/s", label="asks through a host on two nodes", peer="one_node",
        target=">= 1.0")
def two_nodes(env: dict[str, Any], params: dict[str, Any]) -> float | None:
    return None if env.get("skip") else _asks_per_s(env, params, env["two"])

"""Activation by key (issue 36): an `AgentHost` over a `SQLiteStore` of `keys` stored keys.

Figures per round: activation of a cold key (a stored record, no live agent: `host.ask`
starts the agent, resumes it from SQLite and runs one mock turn), an ask through the host to
a live key against `AgentRef.ask` straight to a named agent with the same store and
replay buffer (target: the host keeps >= 0.8x
the asks per second, i.e. latency ratio <= 1.25), and the resident memory a deactivated key
leaves behind (`rss` after activating and deactivating `memory_keys` keys, minus before).
Measured once in setup: the store's bytes per key at `keys` records (file size / keys, after
a checkpoint).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gen_agent
from gen_agent.backends.mock import MockBackend, text_turn
from gen_agent.store import SQLiteStore

from ._common import BenchAgent, rss_bytes
from ._harness import Measured, figure, latency_us, time_calls_us

NAME = "host"
TITLE = "Activation by key (AgentHost over SQLiteStore, issue 36)"
ORDER = 75
README = ("cold_activation", "host_ask", "deactivated_key_bytes", "store_bytes_per_key")
FULL: dict[str, Any] = {"keys": 10_000, "cold": 200, "calls": 300, "memory_keys": 1_000,
                        "rounds": 5}
SMOKE: dict[str, Any] = {"keys": 50, "cold": 5, "calls": 10, "memory_keys": 10, "rounds": 2}
_TURN = text_turn("ok")


class HostBenchAgent(BenchAgent):
    """A `BenchAgent` that answers every turn from the mock's fallback."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """The mock answers "ok" to every prompt."""
        return {"fallback": _TURN}, 0


@contextlib.contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp, gen_agent.AgentSystem() as system:
        db = Path(tmp) / "keys.db"
        store = SQLiteStore(db)
        for i in range(params["keys"]):  # every key has a stored record (a past turn)
            lease = store.acquire(f"key-{i}")
            store.update(lease, conversation={"session_id": f"s-{i}"}, backend="MockBackend")
            store.release(lease)
        store.close()  # the last connection: SQLite checkpoints the WAL into the file
        store_bytes = sum(os.path.getsize(p) for p in Path(tmp).iterdir())
        store = SQLiteStore(db)
        host = make_host(store, system)
        # the same store and replay buffer as a host agent: the difference is the host
        named = gen_agent.start_agent(HostBenchAgent, name="named", backend=MockBackend,
                                      agent_system=system, store=store, session_key="named",
                                      replay_turns=1)
        host.ask("live", "warm")
        yield {"host": host, "named": named, "next": [0], "keys": params["keys"],
               "store_bytes_per_key": store_bytes / params["keys"], "notes": {}}
        host.close()
        store.close()


def make_host(store: Any, system: Any) -> Any:
    return gen_agent.AgentHost(HostBenchAgent, backend=MockBackend, store=store,
                               agent_system=system)


def _cold_keys(env: dict[str, Any], count: int) -> list[str]:
    start = env["next"][0]
    env["next"][0] = start + count
    return [f"key-{(start + i) % env['keys']}" for i in range(count)]


@figure(unit="us", label="cold key: activate from SQLite + 1 turn", target="<= 5000")
def cold_activation(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    host, samples = env["host"], []
    for key in _cold_keys(env, params["cold"]):
        host.deactivate(key)  # untimed: the key is cold again
        samples += time_calls_us(lambda key=key: host.ask(key, "q", timeout=30), 1)
        host.deactivate(key)
    return latency_us(samples)


@figure(unit="us", label="AgentRef.ask, a named agent")
def named_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    named = env["named"]
    return latency_us(time_calls_us(lambda: named.ask("q", timeout=30), params["calls"]))


@figure(unit="us", label="host.ask, a live key", peer="named_ask", target="<= 1.25")
def host_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    host = env["host"]
    return latency_us(time_calls_us(lambda: host.ask("live", "q", timeout=30),
                                    params["calls"]))


@figure(unit="B", label="memory per deactivated key")
def deactivated_key_bytes(env: dict[str, Any], params: dict[str, Any]) -> float:
    host, keys = env["host"], _cold_keys(env, params["memory_keys"])
    before = rss_bytes()
    for key in keys:
        host.ask(key, "q", timeout=30)
        host.deactivate(key)
    return max(0.0, (rss_bytes() - before) / len(keys))


@figure(unit="B", label="store bytes per key (SQLite file / keys)")
def store_bytes_per_key(env: dict[str, Any], params: dict[str, Any]) -> float:
    return float(env["store_bytes_per_key"])

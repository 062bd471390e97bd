"""7. asyncio: `aio.ask` against the threaded `AgentRef.ask`, and many concurrent asks from one
event loop against the same asks through a thread pool (issue 21).

- `sync_ask` / `aio_ask`: one caller, one agent on `MockBackend` answering at once; p50 of
  `calls` round trips (extras: p99). `aio_ask` runs each ask as `await aio.ask(...)` on one
  running loop (the loop is started once per round, outside the timing).
- `pool_asks` / `loop_asks`: `concurrent` asks spread over `agents` agents, all pending at
  once: through a `ThreadPoolExecutor` of `concurrent` threads calling the threaded `ask`,
  against one event loop gathering `concurrent` `aio.ask` coroutines. Value: wall time of the
  batch (ms); extra `asks_per_s`.
- `ticker_gap_ms`: during the loop batch, a task ticking every 10 ms records the largest gap
  between ticks: how long the loop was kept from running other work (10 ms = never delayed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import gen_agent
from gen_agent import aio
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._common import BenchAgent
from ._harness import Measured, figure, latency_us

NAME = "aio_ask"
TITLE = "7. asyncio (aio.ask vs ask; 1,000 concurrent asks: one loop vs a thread pool)"
ORDER = 70
README = ("aio_ask_vs_sync_ask", "loop_asks_vs_pool_asks", "ticker_gap_ms")
FULL: dict[str, Any] = {"calls": 2000, "concurrent": 1000, "agents": 50, "rounds": 7}
SMOKE: dict[str, Any] = {"calls": 20, "concurrent": 20, "agents": 4, "rounds": 2}

_TICK_S = 0.010


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One agent for the single-caller figures, `agents` agents for the batches; scripts
    cover every round (plus the warm-up round)."""
    rounds = params["rounds"] + 2
    turn = mock.text_turn("ok")
    per_agent = rounds * 2 * (params["concurrent"] // params["agents"] + 1)
    with gen_agent.AgentSystem() as system:
        single = gen_agent.start_agent(
            BenchAgent, name="aio-one", backend=MockBackend,
            backend_opts={"scripts": [turn] * (rounds * 2 * params["calls"])})
        names = [("aio-many", i) for i in range(params["agents"])]
        for name in names:
            gen_agent.start_agent(BenchAgent, name=name, backend=MockBackend,
                                  backend_opts={"scripts": [turn] * per_agent})
        with ThreadPoolExecutor(max_workers=params["concurrent"]) as pool:
            yield {"single": single, "names": names, "system": system, "pool": pool,
                   "notes": {}}


@figure(unit="us", label="AgentRef.ask (threaded)")
def sync_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """p50/p99 of the threaded ask round trip."""
    agent, clock, samples = env["single"], time.perf_counter, []
    for _ in range(params["calls"]):
        started = clock()
        agent.ask("x", timeout=30)
        samples.append((clock() - started) * 1e6)
    return latency_us(samples)


@figure(unit="us", label="await aio.ask", peer="sync_ask", target="<= 1.5")
def aio_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """p50/p99 of `await aio.ask` on a running loop."""
    system = env["system"]

    async def main() -> list[float]:
        clock, samples = time.perf_counter, []
        for _ in range(params["calls"]):
            started = clock()
            await aio.ask("aio-one", "x", timeout=30, agent_system=system)
            samples.append((clock() - started) * 1e6)
        return samples

    return latency_us(asyncio.run(main()))


def _batch_names(env: dict[str, Any], params: dict[str, Any]) -> list[Any]:
    names = env["names"]
    return [names[i % len(names)] for i in range(params["concurrent"])]


@figure(unit="ms", label="N concurrent asks, thread pool")
def pool_asks(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """Wall time of `concurrent` threaded asks from a pool of as many threads."""
    pool, names = env["pool"], _batch_names(env, params)

    def one(name: Any) -> Any:
        return gen_agent.ask(name, "x", timeout=60)  # the bench's system is the current one

    started = time.perf_counter()
    list(pool.map(one, names))
    elapsed = time.perf_counter() - started
    return Measured(elapsed * 1e3, {"asks_per_s": len(names) / elapsed})


@figure(unit="ms", label="N concurrent aio.ask, one loop", peer="pool_asks")
def loop_asks(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """Wall time of `concurrent` `aio.ask` gathered on one loop, and the ticker's largest gap
    meanwhile (extra `ticker_gap_ms`)."""
    names, system = _batch_names(env, params), env["system"]

    async def main() -> tuple[float, float]:
        done = asyncio.Event()
        gap = 0.0

        async def ticker() -> None:
            nonlocal gap
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(_TICK_S)
                now = time.perf_counter()
                gap, last = max(gap, now - last), now

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        started = time.perf_counter()
        await asyncio.gather(*(aio.ask(name, "x", timeout=60, agent_system=system)
                               for name in names))
        elapsed = time.perf_counter() - started
        done.set()
        await tick
        return elapsed, gap

    elapsed, gap = asyncio.run(main())
    env.setdefault("gaps", []).append(gap * 1e3)
    return Measured(elapsed * 1e3, {"asks_per_s": len(names) / elapsed,
                                    "ticker_gap_ms": gap * 1e3})


@figure(unit="ms", label="largest 10 ms-ticker gap during the loop batch", target="< 100")
def ticker_gap_ms(env: dict[str, Any], params: dict[str, Any]) -> float | None:
    """The gap `loop_asks` measured in this round (it runs first in each round)."""
    gaps = env.get("gaps") or []
    return gaps[-1] if gaps else None

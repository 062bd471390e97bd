"""4. Concurrency: 1 / 10 / 100 / 1,000 agents busy at once, against bare pykka actors doing
the same round trip at the same concurrency.

For each level N there are N agents on `MockBackend` (scripted with `mock.text_turn("ok")`)
and N pykka echo actors, all started once in `setup`. A round of a level starts N client
threads, one per agent (or actor), releases them together through a barrier and lets each
make `max(min_asks, turns // N)` blocking `ask`s to its own agent in a row. Value: the p50 of
every ask's latency in that round (microseconds); extras: the p99 and turns/s (all asks of
the round / wall time from the barrier to the last client's last answer).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._common import BenchAgent
from ._harness import Measured, figure, latency_us
from .turn_overhead import EchoActor

NAME = "concurrency"
TITLE = "4. Concurrency (N agents busy at once vs N bare pykka actors)"
ORDER = 40
LEVELS = (1, 10, 100, 1000)
README = tuple(key for n in LEVELS for key in
               (f"agents_{n}_vs_pykka_{n}", f"agents_{n}_turns_per_s"))
FULL: dict[str, Any] = {"levels": list(LEVELS), "turns": 2000, "min_asks": 5, "rounds": 7,
                        "warmup_rounds": 1}
SMOKE: dict[str, Any] = {"levels": [1, 10], "turns": 20, "min_asks": 2, "rounds": 2,
                         "warmup_rounds": 1}


def asks_each(level: int, params: dict[str, Any]) -> int:
    """How many asks each of `level` clients makes per round."""
    return max(int(params["min_asks"]), int(params["turns"]) // level)


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Start N agents and N echo actors per level (scripts cover every round)."""
    turn = mock.text_turn("ok")
    actors: list[Any] = []
    rounds = params["rounds"] + params["warmup_rounds"]
    try:
        with gen_agent.AgentSystem():
            env: dict[str, Any] = {}
            for level in params["levels"]:
                script = [turn] * (rounds * asks_each(level, params))
                env[f"agents_{level}"] = [
                    gen_agent.start_agent(BenchAgent, name=("busy", level, i),
                                          backend=MockBackend, backend_opts={"scripts": script})
                    for i in range(level)]
                env[f"actors_{level}"] = [EchoActor.start() for _ in range(level)]
                actors += env[f"actors_{level}"]
            yield env
    finally:
        for actor in actors:
            actor.stop(block=False)
        for actor in actors:
            actor.actor_stopped.wait(30)


def _round(targets: list[Any], asks: int) -> Measured:
    barrier = threading.Barrier(len(targets) + 1)
    samples: list[list[float]] = [[] for _ in targets]
    finished = [0.0] * len(targets)
    errors: list[BaseException] = []
    clock = time.perf_counter

    def client(index: int) -> None:
        target, out = targets[index], samples[index]
        try:
            barrier.wait(timeout=60)
            for _ in range(asks):
                started = clock()
                target.ask("x", timeout=60)
                out.append((clock() - started) * 1e6)
        except BaseException as exc:  # reported by the round
            errors.append(exc)
        finished[index] = clock()

    threads = [threading.Thread(target=client, args=(i,), name=f"bench-client-{i}")
               for i in range(len(targets))]
    for thread in threads:
        thread.start()
    barrier.wait(timeout=60)
    started = clock()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    every = [sample for per_client in samples for sample in per_client]
    return latency_us(every, turns_per_s=len(every) / (max(finished) - started))


def _register(level: int) -> None:
    def agents(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
        if level not in params["levels"]:
            return None  # a level left out by --param levels=[...]
        return _round(env[f"agents_{level}"], asks_each(level, params))

    def actors(env: dict[str, Any], params: dict[str, Any]) -> Measured | None:
        if level not in params["levels"]:
            return None
        return _round(env[f"actors_{level}"], asks_each(level, params))

    figure(key=f"pykka_{level}", unit="us", label=f"pykka actors, {level:,} busy",
           note="value: p50 of every ask of a round; one client thread per actor or agent")(actors)
    figure(key=f"agents_{level}", unit="us", label=f"agents, {level:,} busy",
           peer=f"pykka_{level}")(agents)


for _level in LEVELS:
    _register(_level)


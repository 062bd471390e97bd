"""4. Scale: many idle agents (start time, resident memory each, stop time), then many agents
running turns concurrently on the mock backend (turns per second).

- Idle: `start_agent` called `agents` times in a row (each returns once the agent is up);
  resident memory per agent = (VmRSS after gc with all of them up - VmRSS after gc before) /
  `agents`; stop = `AgentSystem.shutdown()` (stops every agent, each within its shutdown
  window), checked by `AgentRef.is_alive()`. Idle agents use the bench `StreamBackend` (no
  session state), so the memory is the runtime's.
- Turns: `agents` fresh agents on `MockBackend`, each scripted with `turns_each` copies of
  `mock.text_turn("ok")`; `clients` client threads send every agent `turns_each`
  `tell_with_completion` prompts (round-robin over their agents) with one `queue.Queue` as the
  recipient; turns/s = all turns / (first tell → last completion).
- Big idle: the idle measurement again with `big_agents` (skipped when the small start time
  extrapolates past `big_budget_s`).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._common import KIB, BenchAgent, Figure, StreamBackend, median, rss_bytes

NAME = "scale"
TITLE = "4. Scale (idle agents, concurrent turns)"
FULL: dict[str, Any] = {"agents": 1000, "turns_each": 10, "clients": 4, "big_agents": 10_000,
                        "big_budget_s": 40.0}
SMOKE: dict[str, Any] = {"agents": 20, "turns_each": 3, "clients": 2, "big_agents": 40,
                         "big_budget_s": 5.0}
REPS = 3
TARGET_KIB_PER_AGENT = 64
TARGET_BIG_START_S = 10.0

_IDLE_TURN = (gen_agent.Event("result", {}),)


def _idle_stream() -> tuple[gen_agent.Event, ...]:
    return _IDLE_TURN  # one function shared by every agent: nothing per agent but the runtime


def _idle(count: int, prefix: str) -> dict[str, Any]:
    with gen_agent.AgentSystem() as system:
        before = rss_bytes()
        threads_before = threading.active_count()
        started = time.perf_counter()
        refs = [gen_agent.start_agent(BenchAgent, name=(prefix, i), backend=StreamBackend,
                                      backend_opts={"stream": _idle_stream})
                for i in range(count)]
        start_s = time.perf_counter() - started
        resident = rss_bytes() - before
        threads_up = threading.active_count() - threads_before
        started = time.perf_counter()
        system.shutdown()
        stop_s = time.perf_counter() - started
        alive = sum(ref.is_alive() for ref in refs)
    if alive:
        raise AssertionError(f"{alive} of {count} agents still alive after shutdown")
    return {"agents": count, "start_s": start_s, "stop_s": stop_s,
            "kib_per_agent": resident / count / KIB, "threads_per_agent": threads_up / count}


def _client(refs: list[Any], turns_each: int, inbox: queue.Queue[Any],
            errors: list[BaseException]) -> None:
    try:
        for _ in range(turns_each):
            for ref in refs:
                ref.tell_with_completion("x", inbox, timeout=60)
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)


def _turns(count: int, turns_each: int, clients: int) -> dict[str, Any]:
    turn = mock.text_turn("ok")
    inbox: queue.Queue[Any] = queue.Queue()
    errors: list[BaseException] = []
    with gen_agent.AgentSystem() as system:
        refs = [gen_agent.start_agent(BenchAgent, name=("turns", i), backend=MockBackend,
                                      backend_opts={"scripts": [turn] * turns_each})
                for i in range(count)]
        threads = [threading.Thread(target=_client, args=(refs[k::clients], turns_each, inbox,
                                                          errors), name=f"bench-client-{k}")
                   for k in range(clients)]
        total = count * turns_each
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        failed = 0
        for _ in range(total):
            message = inbox.get(timeout=120)
            failed += message[4][0] != "ok"
        elapsed = time.perf_counter() - started
        for thread in threads:
            thread.join(timeout=60)
        if errors:
            raise errors[0]
        if failed:
            raise AssertionError(f"{failed} of {total} turns failed")
        started = time.perf_counter()
        system.shutdown()
        stop_s = time.perf_counter() - started
    return {"turns": total, "turns_per_s": total / elapsed, "elapsed_s": elapsed,
            "stop_s": stop_s}


def run_once(params: dict[str, Any]) -> dict[str, Any]:
    """One repetition: idle agents, concurrent turns, then (if it fits) many idle agents.

    Args:
        params: `agents`, `turns_each`, `clients`, `big_agents`, `big_budget_s` (seconds).

    Returns:
        `{"idle": {...}, "turns": {...}, "big": {...} or None, "big_skipped": why or None}`.

    Raises:
        AssertionError: an agent survived shutdown or a turn failed.
    """
    out: dict[str, Any] = {"idle": _idle(params["agents"], "idle")}
    out["turns"] = _turns(params["agents"], params["turns_each"], params["clients"])
    forecast_s = out["idle"]["start_s"] * params["big_agents"] / params["agents"]
    out["big"], out["big_skipped"] = None, None
    if forecast_s > params["big_budget_s"]:
        out["big_skipped"] = (f"forecast start {forecast_s:.0f} s > budget "
                              f"{params['big_budget_s']:.0f} s")
    else:
        out["big"] = _idle(params["big_agents"], "big")
    return out


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    """Medians over the repetitions."""
    def med(part: str, key: str) -> float | None:
        return median(rep[part][key] for rep in reps if rep[part] is not None)

    agents, big = params["agents"], params["big_agents"]
    kib = med("idle", "kib_per_agent")
    big_start = med("big", "start_s")
    skipped = next((rep["big_skipped"] for rep in reps if rep["big_skipped"]), "")
    return [
        Figure(key="idle_start_s", label=f"start {agents:,} idle agents", unit="s",
               value=med("idle", "start_s"), note="start_agent in a row"),
        Figure(key="idle_kib_per_agent", label="resident memory per idle agent", unit="KiB",
               value=kib, target=f"<= {TARGET_KIB_PER_AGENT} KiB",
               met=None if kib is None else kib <= TARGET_KIB_PER_AGENT,
               note="VmRSS delta after gc / agents"),
        Figure(key="idle_stop_s", label=f"stop {agents:,} idle agents", unit="s",
               value=med("idle", "stop_s"), note="AgentSystem.shutdown()"),
        Figure(key="turns_per_s",
               label=f"{agents:,} agents x {params['turns_each']} turns, concurrent",
               unit="turns/s", value=med("turns", "turns_per_s"),
               note=f"MockBackend; tell_with_completion from {params['clients']} client "
                    "threads, completions into one queue"),
        Figure(key="big_start_s", label=f"start {big:,} idle agents", unit="s",
               value=big_start, target=f"< {TARGET_BIG_START_S:g} s",
               met=None if big_start is None else big_start < TARGET_BIG_START_S,
               note=skipped),
        Figure(key="big_kib_per_agent", label=f"resident memory per agent ({big:,})",
               unit="KiB", value=med("big", "kib_per_agent"),
               note="measured after the smaller runs in the same process"),
        Figure(key="big_stop_s", label=f"stop {big:,} idle agents", unit="s",
               value=med("big", "stop_s")),
    ]

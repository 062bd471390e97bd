"""5. Cost growth: start time, stop time and resident memory of 100 / 1,000 / 10,000 / ...
idle agents in one process, with the per-agent cost at each size and the slope between sizes.

Each size is one step in a fresh `AgentSystem`: `start_agent` called `size` times in a row
(each returns once the agent is up) on the bench `StreamBackend` (no session state, so the
memory is the runtime's); resident memory = VmRSS after gc and malloc_trim with all of them up
minus the same before; stop = `AgentSystem.shutdown()`, checked by `AgentRef.is_alive()`.
The ladder stops cleanly at the first failure: a `start_agent` that raises (e.g. "can't start
new thread" when the process runs out of memory mappings, `vm.max_map_count`) or a step whose
starts exceed `start_budget_s`; the agents started so far are stopped and timed, and the table
says at which agent and why. Steps run one after another in the same child process (a later
step reuses heap an earlier one freed; `rss_bytes` trims it first).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import gen_agent

from ._common import KIB, BenchAgent, Figure, StreamBackend, rss_bytes

NAME = "growth"
TITLE = "5. Cost growth (idle agents: start, stop, memory per size)"
ORDER = 50
README = ("start_s_*", "stop_s_*", "kib_per_agent_*", "start_slope_*", "stop_slope_*",
          "most_agents", "hib_start_s_*", "hib_stop_s_*", "hib_kib_per_agent_*",
          "hib_stop_slope_*", "hib_most_agents")
REPS = 1
FULL: dict[str, Any] = {"sizes": [100, 1_000, 10_000, 100_000], "start_budget_s": 45.0,
                        "hibernated_sizes": [100, 1_000, 10_000, 100_000]}
SMOKE: dict[str, Any] = {"sizes": [10, 40], "start_budget_s": 10.0, "hibernated_sizes": [10, 40]}
SETTLE_S = 30.0

_IDLE_TURN = (gen_agent.Event("result", {}),)


def _idle_stream() -> tuple[gen_agent.Event, ...]:
    return _IDLE_TURN  # one function shared by every agent: nothing per agent but the runtime


def start_idle(index: int) -> Any:
    """Start idle agent number `index` in the current system and return its ref."""
    return gen_agent.start_agent(BenchAgent, name=("idle", index), backend=StreamBackend,
                                 backend_opts={"stream": _idle_stream})


def start_hibernating(index: int) -> Any:
    """Start idle agent number `index` with `hibernate_after_ms=0`: it hibernates (its thread
    ends) as soon as it is up."""
    return gen_agent.start_agent(BenchAgent, name=("hibernating", index), backend=StreamBackend,
                                 backend_opts={"stream": _idle_stream}, hibernate_after_ms=0)


def _settle(threads_before: int, count: int) -> None:
    # Hibernating agents' threads end just after their start returned: wait (bounded) until
    # at most one in a hundred is left, so memory is measured without their stacks.
    deadline = time.monotonic() + SETTLE_S
    pause = threading.Event()
    while (threading.active_count() - threads_before > count // 100
           and time.monotonic() < deadline):
        pause.wait(0.01)


def step(size: int, start_budget_s: float, start: Callable[[int], Any] = start_idle,
         settle: bool = False) -> dict[str, Any]:
    """Start `size` agents (or until a failure / the budget), measure, stop them all.

    Returns:
        `{"size", "started", "start_s", "stop_s", "kib_per_agent", "start_us_per_agent",
        "stop_us_per_agent", "threads_per_agent", "failure": None | {"at", "why"}}`.

    Raises:
        AssertionError: an agent is still alive after the shutdown.
    """
    refs: list[Any] = []
    failure: dict[str, Any] | None = None
    with gen_agent.AgentSystem() as system:
        before = rss_bytes()
        threads_before = threading.active_count()
        started = time.perf_counter()
        for index in range(size):
            if time.perf_counter() - started > start_budget_s:
                failure = {"at": index, "why": f"start budget of {start_budget_s:g} s spent"}
                break
            try:
                refs.append(start(index))
            except Exception as exc:  # the wall: reported, then everything is stopped
                failure = {"at": index, "why": f"{type(exc).__name__}: {exc}"}
                break
        start_s = time.perf_counter() - started
        count = max(1, len(refs))
        if settle:
            _settle(threads_before, len(refs))
        resident = rss_bytes() - before
        threads_up = threading.active_count() - threads_before
        started = time.perf_counter()
        system.shutdown()
        stop_s = time.perf_counter() - started
    alive = sum(ref.is_alive() for ref in refs)
    if alive:
        raise AssertionError(f"{alive} of {len(refs)} agents still alive after shutdown")
    return {"size": size, "started": len(refs), "start_s": start_s, "stop_s": stop_s,
            "kib_per_agent": resident / count / KIB, "start_us_per_agent": start_s / count * 1e6,
            "stop_us_per_agent": stop_s / count * 1e6, "threads_per_agent": threads_up / count,
            "failure": failure}


def run_once(params: dict[str, Any], start: Callable[[int], Any] = start_idle,
             ) -> dict[str, Any]:
    """The ladder: one `step` per size, stopping after the first step that failed.

    Args:
        params: `sizes` (ascending agent counts), `start_budget_s` (seconds per step) and
            optionally `hibernated_sizes`: the same ladder with agents that hibernate as
            soon as they are up (`hibernate_after_ms=0`).
        start: starts agent number i (tests inject failures here).

    Returns:
        `{"steps": [step results], "stopped": None | {"size", "at", "why"}, "hibernated":
        the same for the hibernated ladder, or None}`.
    """
    # The hibernated ladder first: the threaded one ends at the wall, and the thread stacks
    # it frees leave the heap in a state a later baseline would under-count.
    hibernated = params.get("hibernated_sizes")
    first = None if not hibernated else _ladder(
        hibernated, params["start_budget_s"], start_hibernating, settle=True)
    out = _ladder(params["sizes"], params["start_budget_s"], start, settle=False)
    out["hibernated"] = first
    return out


def _ladder(sizes: list[int], start_budget_s: float, start: Callable[[int], Any],
            settle: bool) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    stopped = None
    for size in sizes:
        result = step(size, start_budget_s, start, settle)
        steps.append(result)
        if result["failure"] is not None:
            stopped = {"size": size, **result["failure"]}
            break
    return {"steps": steps, "stopped": stopped}


def _slope(a: dict[str, Any], b: dict[str, Any], key: str, scale: float) -> float:
    return (b[key] - a[key]) * scale / (b["started"] - a["started"])


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    """The first repetition's curves (one row per size and measure, then the slopes): the
    agents with a thread each, then (if measured) the hibernated ones (keys `hib_...`)."""
    if not reps:
        return []
    figures = _curve(reps[0], "", "")
    if reps[0].get("hibernated"):
        figures += _curve(reps[0]["hibernated"], "hib_", "hibernated ")
    return figures


def _curve(ladder: dict[str, Any], prefix: str, kind: str) -> list[Figure]:
    steps, stopped = ladder["steps"], ladder["stopped"]
    figures = []
    for result in steps:
        n = result["started"]
        tag = f"{n:,}" if result["failure"] is None else f"{n:,} of {result['size']:,}"
        figures += [
            Figure(key=f"{prefix}start_s_{result['size']}", label=f"start {tag} {kind}idle agents",
                   unit="s", value=result["start_s"],
                   note="" if result["failure"] is None else
                   f"stopped at agent {result['failure']['at']:,}: {result['failure']['why']}"),
            Figure(key=f"{prefix}start_us_per_agent_{result['size']}",
                   label=f"  start per {kind}agent ({tag})", unit="us",
                   value=result["start_us_per_agent"]),
            Figure(key=f"{prefix}stop_s_{result['size']}",
                   label=f"  stop {tag} {kind}agents (shutdown)", unit="s",
                   value=result["stop_s"]),
            Figure(key=f"{prefix}stop_us_per_agent_{result['size']}",
                   label=f"  stop per {kind}agent ({tag})", unit="us",
                   value=result["stop_us_per_agent"]),
            Figure(key=f"{prefix}kib_per_agent_{result['size']}",
                   label=f"  resident memory per {kind}agent ({tag})", unit="KiB",
                   value=result["kib_per_agent"], note="" if result["size"] != steps[0]["size"]
                   else "VmRSS delta after gc and malloc_trim / agents"),
        ]
    complete = [result for result in steps if result["started"] > 0]
    for a, b in itertools.pairwise(complete):
        if b["started"] == a["started"]:
            continue
        span = f"{a['started']:,} -> {b['started']:,}"
        figures += [
            Figure(key=f"{prefix}start_slope_us_{a['size']}_{b['size']}",
                   label=f"{kind}start slope {span}", unit="us/agent",
                   value=_slope(a, b, "start_s", 1e6)),
            Figure(key=f"{prefix}stop_slope_us_{a['size']}_{b['size']}",
                   label=f"{kind}stop slope {span}", unit="us/agent",
                   value=_slope(a, b, "stop_s", 1e6),
                   note="linear stopping keeps this near the per-agent stop cost"),
            Figure(key=f"{prefix}memory_slope_kib_{a['size']}_{b['size']}",
                   label=f"{kind}memory slope {span}", unit="KiB/agent",
                   value=(b["kib_per_agent"] * b["started"] - a["kib_per_agent"] * a["started"])
                   / (b["started"] - a["started"])),
        ]
    reached = max(result["started"] for result in steps)
    figures.append(Figure(
        key=f"{prefix}most_agents", label=f"most {kind}idle agents started in one process",
        unit="agents",
        value=reached, note="every size started" if stopped is None else
        f"stopped at {stopped['size']:,}: agent {stopped['at']:,}: {stopped['why']}"))
    return figures

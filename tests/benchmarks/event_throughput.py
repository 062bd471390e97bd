"""2. Event throughput: one turn streaming N text deltas through one agent (compact retention).

The bench `StreamBackend` returns a generator. Variants, each a fresh agent, one `ask` timed
from call to return (events/s = (N + 1 terminal) / that time), run in this order:

- `built`: the generator builds each delta with `Event.new` (what a real backend pays), then
  a result without text (so `Response.text` is assembled from the N deltas).
- `prebuilt`: the generator yields one prebuilt `Event("text", {"text": "x"})` N times, then a
  prebuilt result. No `handle_stream_event`: the runtime's cost alone.
- `prebuilt_cb`: the same with a `handle_stream_event` that counts (`state + 1`); the count
  must reach the decision callback as N + 1.
- `construct_only` (no agent): iterating that building generator alone, the cost a `built`
  turn pays before the runtime sees an event.

Peak memory of each turn: resident growth, `PeakRss` (VmHWM after a reset, minus VmRSS after
gc and malloc_trim before the turn). The headline is the `built` turn's, the first turn of a
fresh process: later turns reuse memory the earlier ones left mapped, so their figures (kept
in benchmarks.json only) understate.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gen_agent
from gen_agent import Event

from ._common import MIB, BenchAgent, CountingAgent, Figure, PeakRss, StreamBackend, median

NAME = "event_throughput"
TITLE = "2. Event throughput (one turn, compact retention)"
FULL: dict[str, Any] = {"events": 1_000_000}
SMOKE: dict[str, Any] = {"events": 1_000}
REPS = 3
TARGET_EVENTS_PER_S = 500_000

_TEXT = Event("text", {"text": "x"})
_RESULT = Event("result", {"session_id": "bench"})


def _prebuilt(count: int) -> Iterator[Event]:
    event = _TEXT
    for _ in range(count):
        yield event
    yield _RESULT


def _built(count: int) -> Iterator[Event]:
    new = Event.new
    for _ in range(count):
        yield new("text", {"text": "x"})
    yield Event.new("result", {"session_id": "bench"})


def _turn(agent_cls: type, stream: Any, count: int, name: str) -> dict[str, Any]:
    agent = gen_agent.start_agent(agent_cls, name=name, backend=StreamBackend,
                                  backend_opts={"stream": lambda: stream(count)})
    with PeakRss() as peak:
        started = time.perf_counter()
        response = agent.ask("stream", timeout=600)
        elapsed = time.perf_counter() - started
    coverage = response.event_coverage
    assert coverage is not None
    if coverage.observed_events != count + 1 or len(response.text) != count:
        raise AssertionError(f"{name}: observed {coverage.observed_events} events and "
                             f"{len(response.text)} text chars, expected {count + 1} / {count}")
    state = agent.status(timeout=60).agent_state
    if agent_cls is CountingAgent and state != count + 1:
        raise AssertionError(f"{name}: handle_stream_event saw {state}, expected {count + 1}")
    agent.stop()
    return {
        "events_per_s": (count + 1) / elapsed,
        "elapsed_s": elapsed,
        "peak_growth_mib": peak.growth_bytes / MIB,
        "memory_method": peak.method,
        "retained_events": coverage.retained_events,
        "omitted_events": coverage.omitted_events,
    }


def run_once(params: dict[str, Any]) -> dict[str, Any]:
    """One repetition of every variant.

    Args:
        params: `events`, the number of text deltas per turn (N).

    Returns:
        `{variant: {events_per_s, elapsed_s, peak_growth_mib, ...}}` plus the
        `construct_only` rate and the with/without-callback ratio of this repetition.

    Raises:
        AssertionError: a turn lost events or the callback count is wrong.
    """
    count = params["events"]
    out: dict[str, Any] = {}
    with gen_agent.AgentSystem():
        out["built"] = _turn(BenchAgent, _built, count, "bench-built")
        out["prebuilt"] = _turn(BenchAgent, _prebuilt, count, "bench-prebuilt")
        out["prebuilt_cb"] = _turn(CountingAgent, _prebuilt, count, "bench-prebuilt-cb")
    started = time.perf_counter()
    for _ in _built(count):
        pass
    out["construct_only"] = {"events_per_s": (count + 1) / (time.perf_counter() - started)}
    out["cb_vs_plain"] = out["prebuilt_cb"]["events_per_s"] / out["prebuilt"]["events_per_s"]
    return out


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    """Medians over the repetitions."""
    def med(variant: str, key: str) -> float | None:
        return median(rep[variant][key] for rep in reps)

    def rate(key: str, label: str, note: str = "") -> Figure:
        value = med(key, "events_per_s")
        return Figure(key=f"{key}_events_per_s", label=label, unit="events/s", value=value,
                      target=f">= {TARGET_EVENTS_PER_S:,}",
                      met=None if value is None else value >= TARGET_EVENTS_PER_S, note=note)

    count = params["events"]
    method = reps[0]["built"]["memory_method"] if reps else ""
    return [
        rate("prebuilt", f"{count:,} prebuilt deltas, no callback",
             "ask round trip of one turn; the backend yields one prebuilt Event N times"),
        rate("prebuilt_cb", f"{count:,} prebuilt deltas, handle_stream_event"),
        Figure(key="cb_vs_plain", label="with callback / without", unit="x",
               value=median(rep["cb_vs_plain"] for rep in reps)),
        Figure(key="built_events_per_s", label=f"{count:,} deltas built by Event.new",
               unit="events/s", value=med("built", "events_per_s"),
               note="includes the backend's Event construction"),
        Figure(key="construct_only_events_per_s", label="Event.new generator alone (no agent)",
               unit="events/s", value=med("construct_only", "events_per_s")),
        Figure(key="built_peak_mib", label=f"peak memory of the {count:,}-delta turn (built)",
               unit="MiB", value=med("built", "peak_growth_mib"),
               note=f"resident growth, first turn of a fresh process: {method}"),
    ]

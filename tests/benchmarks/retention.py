"""6. Retention bound: a turn streaming `events` tool_result events of `payload_bytes` each
(200 x 1 MB by default) keeps its resident growth under 2 x max_event_bytes_per_turn + 20 MiB,
and its coverage counts are exact.

The bench `StreamBackend` generator builds every payload fresh (`"x" * payload_bytes`, so
memory is really allocated per event and only retention can keep it), records each event's
`term_size`, and ends with a result. After the turn the expected `EventCoverage` is computed
from those sizes with the compact-retention rule of contract §6.3 (retain a prefix while the
count is under max_events_per_turn and the event fits in what is left of
max_event_bytes_per_turn) and compared field by field with the `Response`'s. Resident growth:
`PeakRss` (VmHWM after a reset minus VmRSS after gc and malloc_trim before the turn). Run once per
`max_event_bytes` value, each with a fresh agent (compact retention, the default); the first
value is the headline (a later one runs on a heap the earlier turns already grew).

Then, as a diagnostic, the first value's turn once more under `tracemalloc`: the peak of live
Python allocations during the turn, which excludes what the C allocator keeps mapped after a
free. Resident growth well above it means allocator retention; close to it means the runtime
held that many payloads at once (tracing slows the run, which can shift that race).
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import gen_agent
from gen_agent import Event, EventCoverage, Omission, term_size

from ._common import MIB, BenchAgent, Figure, PeakRss, StreamBackend, median

NAME = "retention"
TITLE = "6. Retention bound (one turn of large tool results)"
ORDER = 60
FULL: dict[str, Any] = {"events": 200, "payload_bytes": 1_000_000, "max_events": 1000,
                        "max_event_bytes": [1 * MIB]}
SMOKE: dict[str, Any] = {"events": 12, "payload_bytes": 100_000, "max_events": 1000,
                         "max_event_bytes": [256 * 1024]}
REPS = 3
SLACK_MIB = 20


def bound_bytes(max_event_bytes: int) -> int:
    """The issue's bound on resident growth: 2 x max_event_bytes_per_turn + 20 MiB."""
    return 2 * max_event_bytes + SLACK_MIB * MIB


def _payload_stream(count: int, payload_bytes: int, sizes: list[int]) -> Iterator[Event]:
    char = "x"
    for index in range(count):
        event = Event.new("tool_result", {"tool_use_id": f"toolu_{index:06d}",
                                          "content": char * payload_bytes})
        sizes.append(term_size(event))
        yield event
        del event  # the runtime alone decides how long a payload lives
    result = Event.new("result", {"text": "done", "session_id": "bench"})
    sizes.append(term_size(result))
    yield result


def expected_coverage(kinds: list[str], sizes: list[int], max_events: int,
                      max_bytes: int) -> EventCoverage:
    """The `EventCoverage` compact retention must report for these events (contract §6.3)."""
    retained, retained_bytes, first = 0, 0, None
    for kind, size in zip(kinds, sizes, strict=True):
        if retained >= max_events:
            first = Omission("events", kind)
        elif size > max_bytes - retained_bytes:
            first = Omission("bytes", kind)
        else:
            retained += 1
            retained_bytes += size
            continue
        break
    observed = len(sizes)
    return EventCoverage(mode="compact" if first else "exact", observed_events=observed,
                         retained_events=retained, omitted_events=observed - retained,
                         retained_bytes=retained_bytes, first_omission=first)


def _turn(params: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    count, payload = params["events"], params["payload_bytes"]
    sizes: list[int] = []
    agent = gen_agent.start_agent(
        BenchAgent, name=("retention", max_bytes), backend=StreamBackend,
        max_events_per_turn=params["max_events"], max_event_bytes_per_turn=max_bytes,
        backend_opts={"stream": lambda: _payload_stream(count, payload, sizes)})
    with PeakRss() as peak:
        started = time.perf_counter()
        response = agent.ask("payloads", timeout=600)
        elapsed = time.perf_counter() - started
    expected = expected_coverage(["tool_result"] * count + ["result"], sizes,
                                 params["max_events"], max_bytes)
    if response.event_coverage != expected or len(response.events) != expected.retained_events:
        raise AssertionError(f"coverage {response.event_coverage!r} != expected {expected!r}")
    agent.stop()
    bound = bound_bytes(max_bytes)
    return {
        "max_event_bytes": max_bytes,
        "payload_total_mb": count * payload / 1e6,
        "elapsed_s": elapsed,
        "peak_growth_mib": peak.growth_bytes / MIB,
        "after_growth_mib": max(0, peak.after_bytes - peak.baseline_bytes) / MIB,
        "bound_mib": bound / MIB,
        "within_bound": peak.growth_bytes < bound,
        "memory_method": peak.method,
        "coverage": {"mode": expected.mode, "observed": expected.observed_events,
                     "retained": expected.retained_events,
                     "omitted": expected.omitted_events,
                     "retained_bytes": expected.retained_bytes,
                     "first_omission": None if expected.first_omission is None else
                     [expected.first_omission.limit, expected.first_omission.event_kind],
                     "exact_match": True},
    }


def run_once(params: dict[str, Any]) -> dict[str, Any]:
    """One repetition: one payload turn per `max_event_bytes` value.

    Args:
        params: `events`, `payload_bytes`, `max_events` and `max_event_bytes` (a list of
            byte limits).

    Returns:
        `{"turns": [{max_event_bytes, peak_growth_mib, bound_mib, coverage, ...}, ...],
        "traced_peak_mib": live Python bytes peak of the diagnostic turn, in MiB}`.

    Raises:
        AssertionError: the response's coverage differs from the expected one.
    """
    with gen_agent.AgentSystem():
        turns = [_turn(params, limit) for limit in params["max_event_bytes"]]
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            _turn(params, params["max_event_bytes"][0])
            traced_peak = tracemalloc.get_traced_memory()[1] - baseline
        finally:
            tracemalloc.stop()
    return {"turns": turns, "traced_peak_mib": traced_peak / MIB}


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    """Medians over the repetitions, one group of figures per max_event_bytes value."""
    figures = []
    total_mb = params["events"] * params["payload_bytes"] / 1e6
    for index, limit in enumerate(params["max_event_bytes"]):
        turns = [rep["turns"][index] for rep in reps]
        growth = median(turn["peak_growth_mib"] for turn in turns)
        bound = bound_bytes(limit) / MIB
        coverage = turns[0]["coverage"] if turns else {}
        tag = f"max_event_bytes {limit / MIB:g} MiB"
        figures += [
            Figure(key=f"peak_growth_mib_{limit}", label=f"peak growth, {tag}", unit="MiB",
                   value=growth, target=f"< {bound:g} MiB (2 x max + {SLACK_MIB})",
                   met=None if growth is None else growth < bound,
                   note=f"{params['events']} x {params['payload_bytes']:,} B = {total_mb:g} MB "
                        f"of tool_result; {turns[0]['memory_method'] if turns else ''}"),
            Figure(key=f"after_growth_mib_{limit}", label=f"growth kept after the turn, {tag}",
                   unit="MiB", value=median(turn["after_growth_mib"] for turn in turns),
                   note="the Response (and its retained events) still alive"),
            Figure(key=f"coverage_retained_{limit}", label=f"coverage exact, {tag}",
                   unit="events retained", value=coverage.get("retained"),
                   target="== contract §6.3", met=bool(turns),
                   note=f"observed {coverage.get('observed')} = retained "
                        f"{coverage.get('retained')} + omitted {coverage.get('omitted')}, "
                        f"{coverage.get('retained_bytes'):,} B retained, first omission "
                        f"{coverage.get('first_omission')}"),
        ]
    figures.append(Figure(
        key="traced_peak_mib", label="live Python memory peak (tracemalloc), first limit",
        unit="MiB", value=median(rep["traced_peak_mib"] for rep in reps),
        note="diagnostic: excludes allocator retention; tracing slows the turn"))
    return figures

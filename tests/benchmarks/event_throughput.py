"""2. Event throughput: one turn streaming N text deltas through one agent (compact retention).

The bench `StreamBackend` returns a generator; one `ask` is timed from call to return
(events/s = (N + 1 terminal) / that time). Figures, interleaved round by round, each on its
own agent started once:

- `built` (the headline): the generator builds each delta with `Event.new`, as a backend
  builds them from its wire format, then a result without text (so `Response.text` is
  assembled from the N deltas).
- `prebuilt` (the channel's ceiling): the generator yields one prebuilt
  `Event("text", {"text": "x"})` N times, then a prebuilt result. No `handle_stream_event`.
- `prebuilt_cb`: the same with a `handle_stream_event` that counts (`state + 1`); the count
  must grow by N + 1 per turn.
- `construct_only` (no agent): iterating the building generator alone, the cost a `built`
  turn pays before the runtime sees an event.

Every turn checks its `EventCoverage` (N + 1 observed) and its text length (N).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gen_agent
from gen_agent import Event

from ._common import BenchAgent, CountingAgent, StreamBackend
from ._harness import Ratio, figure

NAME = "event_throughput"
TITLE = "2. Event throughput (one turn, compact retention)"
ORDER = 20
README = ("built", "prebuilt", "prebuilt_cb", "built_vs_prebuilt")
FULL: dict[str, Any] = {"events": 200_000, "rounds": 5, "warmup_rounds": 1}
SMOKE: dict[str, Any] = {"events": 1_000, "rounds": 2, "warmup_rounds": 1}

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


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One agent per variant, shared by the rounds."""
    count = params["events"]

    def start(agent_cls: type, stream: Any, name: str) -> Any:
        return gen_agent.start_agent(agent_cls, name=name, backend=StreamBackend,
                                     backend_opts={"stream": lambda: stream(count)})

    with gen_agent.AgentSystem():
        yield {"built": start(BenchAgent, _built, "bench-built"),
               "prebuilt": start(BenchAgent, _prebuilt, "bench-prebuilt"),
               "prebuilt_cb": start(CountingAgent, _prebuilt, "bench-prebuilt-cb")}


def _turn(agent: Any, count: int, counting: bool = False) -> float:
    before = agent.status(timeout=60).agent_state if counting else 0
    started = time.perf_counter()
    response = agent.ask("stream", timeout=600)
    elapsed = time.perf_counter() - started
    coverage = response.event_coverage
    assert coverage is not None
    if coverage.observed_events != count + 1 or len(response.text) != count:
        raise AssertionError(f"observed {coverage.observed_events} events and "
                             f"{len(response.text)} text chars, expected {count + 1} / {count}")
    if counting:
        seen = agent.status(timeout=60).agent_state - before
        if seen != count + 1:
            raise AssertionError(f"handle_stream_event saw {seen}, expected {count + 1}")
    return (count + 1) / elapsed


@figure(unit="events/s", label="deltas built by Event.new (as a backend)", target=">= 500000",
        note="ask round trip of one turn of N deltas plus a result; the backend builds each")
def built(env: dict[str, Any], params: dict[str, Any]) -> float:
    """One turn of N freshly built deltas."""
    return _turn(env["built"], params["events"])


@figure(unit="events/s", label="prebuilt deltas (the channel's ceiling)",
        note="the backend yields one prebuilt Event N times: the runtime's cost alone")
def prebuilt(env: dict[str, Any], params: dict[str, Any]) -> float:
    """One turn of one prebuilt delta N times."""
    return _turn(env["prebuilt"], params["events"])


@figure(unit="events/s", label="prebuilt deltas, handle_stream_event")
def prebuilt_cb(env: dict[str, Any], params: dict[str, Any]) -> float:
    """One turn of prebuilt deltas through a counting `handle_stream_event`."""
    return _turn(env["prebuilt_cb"], params["events"], counting=True)


@figure(unit="events/s", label="Event.new generator alone (no agent)")
def construct_only(env: dict[str, Any], params: dict[str, Any]) -> float:
    """Iterate the building generator without an agent."""
    count = params["events"]
    started = time.perf_counter()
    for _ in _built(count):
        pass
    return (count + 1) / (time.perf_counter() - started)


RATIOS = [Ratio("built", "prebuilt", label="built / prebuilt"),
          Ratio("prebuilt_cb", "prebuilt", label="with handle_stream_event / without")]

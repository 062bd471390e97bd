"""1. Turn overhead: the `ask` round trip of an agent whose backend answers at once, against a
bare pykka echo actor's `ask` round trip, both measured in the same process.

Timed per call with `time.perf_counter`, after a warm-up: `EchoActor.ask(msg)` (pykka: one
message, one future) and `AgentRef.ask(prompt)` on an agent whose `MockBackend` script is the
prebuilt events of `mock.text_turn("ok")` (a text event and a result). A third variant uses the
bench `StreamBackend` returning a prebuilt tuple, which separates the mock's own bookkeeping
from the runtime's cost.
"""

from __future__ import annotations

import time
from typing import Any

import pykka

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._common import BenchAgent, Figure, StreamBackend, median, percentile

NAME = "turn_overhead"
TITLE = "1. Turn overhead (ask round trip)"
FULL: dict[str, Any] = {"calls": 3000, "warmup": 300}
SMOKE: dict[str, Any] = {"calls": 100, "warmup": 20}
REPS = 5
TARGET_RATIO = 3.0


class EchoActor(pykka.ThreadingActor):
    """A bare pykka actor answering every `ask` with the message itself."""

    use_daemon_thread = True

    def on_receive(self, message: Any) -> Any:
        """Return `message` (pykka resolves the asker's future with it)."""
        return message


def _samples_us(call: Any, calls: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call()
    clock = time.perf_counter
    samples = []
    for _ in range(calls):
        started = clock()
        call()
        samples.append((clock() - started) * 1e6)
    return samples


def _stats(samples: list[float]) -> dict[str, float]:
    return {"median_us": median(samples) or 0.0, "p99_us": percentile(samples, 0.99)}


def run_once(params: dict[str, Any]) -> dict[str, Any]:
    """One repetition: pykka echo, mock agent and bench-backend agent round trips.

    Args:
        params: `calls` (timed calls per variant) and `warmup` (untimed calls first).

    Returns:
        `{"pykka": {median_us, p99_us}, "mock_agent": {...}, "instant_agent": {...}}`.
    """
    calls, warmup = params["calls"], params["warmup"]
    total = calls + warmup
    out: dict[str, Any] = {}
    echo = EchoActor.start()
    try:
        out["pykka"] = _stats(_samples_us(lambda: echo.ask("x", timeout=30), calls, warmup))
    finally:
        echo.stop(timeout=30)
    turn = mock.text_turn("ok")
    instant = tuple(turn)
    with gen_agent.AgentSystem():
        agent = gen_agent.start_agent(BenchAgent, name="bench-mock", backend=MockBackend,
                                      backend_opts={"scripts": [turn] * total})
        out["mock_agent"] = _stats(_samples_us(lambda: agent.ask("x", timeout=30), calls, warmup))
        agent = gen_agent.start_agent(BenchAgent, name="bench-instant", backend=StreamBackend,
                                      backend_opts={"stream": lambda: instant})
        out["instant_agent"] = _stats(
            _samples_us(lambda: agent.ask("x", timeout=30), calls, warmup))
    for variant in ("mock_agent", "instant_agent"):
        out[variant]["ratio_median"] = out[variant]["median_us"] / out["pykka"]["median_us"]
        out[variant]["ratio_p99"] = out[variant]["p99_us"] / out["pykka"]["p99_us"]
    return out


def summarize(reps: list[dict[str, Any]], params: dict[str, Any]) -> list[Figure]:
    """Medians over the repetitions; ratios are per repetition (same process), then median."""
    def med(variant: str, key: str) -> float | None:
        return median(rep[variant][key] for rep in reps)

    ratio = med("mock_agent", "ratio_median")
    note = f"{params['calls']} timed calls per variant after {params['warmup']} warm-up calls"
    return [
        Figure(key="pykka_ask_median_us", label="bare pykka ask, median", unit="us",
               value=med("pykka", "median_us"), note=note),
        Figure(key="pykka_ask_p99_us", label="bare pykka ask, p99", unit="us",
               value=med("pykka", "p99_us")),
        Figure(key="agent_ask_median_us", label="agent ask (MockBackend), median", unit="us",
               value=med("mock_agent", "median_us")),
        Figure(key="agent_ask_p99_us", label="agent ask (MockBackend), p99", unit="us",
               value=med("mock_agent", "p99_us")),
        Figure(key="agent_vs_pykka_median", label="agent / pykka, median", unit="x",
               value=ratio, target=f"<= {TARGET_RATIO:g}x",
               met=None if ratio is None else ratio <= TARGET_RATIO),
        Figure(key="agent_vs_pykka_p99", label="agent / pykka, p99", unit="x",
               value=med("mock_agent", "ratio_p99")),
        Figure(key="instant_ask_median_us", label="agent ask (bench backend), median",
               unit="us", value=med("instant_agent", "median_us"),
               note="StreamBackend returning a prebuilt tuple: no mock bookkeeping"),
        Figure(key="instant_vs_pykka_median", label="agent (bench backend) / pykka, median",
               unit="x", value=med("instant_agent", "ratio_median")),
    ]

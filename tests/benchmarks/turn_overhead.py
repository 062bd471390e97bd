"""1. Turn overhead: the `ask` round trip of an agent whose backend answers at once, against a
bare pykka echo actor's `ask` round trip, interleaved in the same process.

Each round times `calls` calls of each variant with `time.perf_counter` (value: the round's
p50 in microseconds; extra: its p99): `EchoActor.ask(msg)` (pykka: one message, one
future), `AgentRef.ask(prompt)` on an agent whose `MockBackend` script is the prebuilt events
of `mock.text_turn("ok")` (a text event and a result), and the same on the bench
`StreamBackend` returning a prebuilt tuple, which separates the mock's own bookkeeping from
the runtime's cost. The agents and the actor are started once and shared by every round.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pykka

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._common import BenchAgent, StreamBackend
from ._harness import Measured, figure, latency_us, time_calls_us

NAME = "turn_overhead"
TITLE = "1. Turn overhead (ask round trip)"
ORDER = 10
README = ("pykka_ask", "mock_ask", "mock_ask_p99_us", "mock_ask_vs_pykka_ask",
          "mock_ask_vs_pykka_ask_p99_us", "instant_ask_vs_pykka_ask", "hibernated_ask",
          "wake_extra")
HIBERNATED_SHARE = 10
"""A hibernated-ask round makes calls / HIBERNATED_SHARE asks (each waits for the thread to
end first)."""
FULL: dict[str, Any] = {"calls": 1000, "rounds": 15, "warmup_rounds": 1}
SMOKE: dict[str, Any] = {"calls": 20, "rounds": 2, "warmup_rounds": 1}


class EchoActor(pykka.ThreadingActor):
    """A bare pykka actor answering every `ask` with the message itself."""

    use_daemon_thread = True

    def on_receive(self, message: Any) -> Any:
        """Return `message` (pykka resolves the asker's future with it)."""
        return message


@contextmanager
def setup(params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Start the echo actor and the two agents (the mock's script covers every round)."""
    total = (params["rounds"] + params["warmup_rounds"]) * params["calls"]
    turn = mock.text_turn("ok")
    instant = tuple(turn)
    echo = EchoActor.start()
    try:
        with gen_agent.AgentSystem():
            yield {
                "echo": echo,
                "mock": gen_agent.start_agent(BenchAgent, name="bench-mock", backend=MockBackend,
                                              backend_opts={"scripts": [turn] * total}),
                "instant": gen_agent.start_agent(BenchAgent, name="bench-instant",
                                                 backend=StreamBackend,
                                                 backend_opts={"stream": lambda: instant}),
                "hibernating": gen_agent.start_agent(
                    BenchAgent, name="bench-hibernating", backend=MockBackend,
                    hibernate_after_ms=0,
                    backend_opts={"scripts": [turn] * (total // HIBERNATED_SHARE + 1)}),
            }
    finally:
        echo.stop(timeout=30)


@figure(unit="us", label="bare pykka ask",
        note="value: the p50 of a round of `calls` timed calls; variants interleaved")
def pykka_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """One round of bare pykka asks."""
    echo = env["echo"]
    return latency_us(time_calls_us(lambda: echo.ask("x", timeout=30), params["calls"]))


@figure(unit="us", label="agent ask (MockBackend)", peer="pykka_ask", target="<= 2")
def mock_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """One round of asks to the mock-backend agent."""
    agent = env["mock"]
    measured = latency_us(time_calls_us(lambda: agent.ask("x", timeout=30), params["calls"]))
    env["mock_p50_us"] = measured.value
    return measured


@figure(unit="us", label="ask to a hibernated agent", peer="mock_ask",
        note="hibernate_after_ms=0; before each timed ask the agent's thread has ended "
             "(AgentHandle.hibernated, internal); calls/HIBERNATED_SHARE asks per round")
def hibernated_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """One round of asks, each waking a hibernated agent; also keeps the round's extra cost
    over `mock_ask` of the same round for `wake_extra`."""
    agent, handle = env["hibernating"], env["hibernating"]._handle
    pause = threading.Event()
    clock = time.perf_counter
    samples = []
    for _ in range(max(1, params["calls"] // HIBERNATED_SHARE)):
        deadline = clock() + 5
        while not handle.hibernated and clock() < deadline:
            pause.wait(0.0002)
        started = clock()
        agent.ask("x", timeout=30)
        samples.append((clock() - started) * 1e6)
    measured = latency_us(samples)
    env["wake_extra_us"] = measured.value - env.get("mock_p50_us", measured.value)
    return measured


@figure(unit="us", label="extra cost of waking a hibernated agent", target="< 1000",
        note="hibernated_ask p50 - mock_ask p50 of the same round (issue 20: < 1 ms)")
def wake_extra(env: dict[str, Any], params: dict[str, Any]) -> float | None:
    """The difference computed by `hibernated_ask` in this round."""
    return env.get("wake_extra_us")


@figure(unit="us", label="agent ask (bench backend)", peer="pykka_ask",
        note="StreamBackend returning a prebuilt tuple: no mock bookkeeping")
def instant_ask(env: dict[str, Any], params: dict[str, Any]) -> Measured:
    """One round of asks to the bench-backend agent."""
    agent = env["instant"]
    return latency_us(time_calls_us(lambda: agent.ask("x", timeout=30), params["calls"]))

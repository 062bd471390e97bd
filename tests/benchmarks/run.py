"""`make bench`: benchmarks, kept out of `make test` (placeholder until the benchmark issue)."""

from __future__ import annotations

import statistics
import time

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend


class _Agent(gen_agent.GenAgent):
    def init_agent(self, opts):
        return {"scripts": [mock.text_turn("ok") for _ in range(opts["turns"])]}, None

    def handle_response(self, ref, response, state):
        return gen_agent.NoReply(state)


def main() -> None:
    turns = 2_000
    with gen_agent.AgentSystem():
        agent = gen_agent.start_agent(_Agent, name="bench", backend=MockBackend, turns=turns)
        samples = []
        for _ in range(turns):
            started = time.perf_counter()
            agent.ask("x", timeout=30)
            samples.append((time.perf_counter() - started) * 1e6)
    samples.sort()
    print(f"ask round trip on the mock backend: median {statistics.median(samples):.0f} us, "
          f"p99 {samples[int(len(samples) * 0.99)]:.0f} us over {turns} turns")


if __name__ == "__main__":
    main()

"""Heartbeat: a periodic tick lets the agent decide, from its state, when to work (§10).

Observations arrive as notifications and only accumulate. A `Ticker` thread sends
`("tick", agent_ref)` every `interval_ms`; on each tick the agent starts a batch turn only if
it holds at least `min_batch` observations and no batch is in flight. A failed batch is put
back in front of newer observations for a later tick (no immediate retry loop). The ticker
follows one agent incarnation: a replacement agent under the same name ignores a stale
ticker's pulses (the ref does not match), and the ticker stops when its agent exits or the
name moves to another incarnation.

Run it: `python docs/examples/heartbeat.py [--backend NAME]`.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, NoReply, Prompt


# --8<-- [start:agent]
@dataclass(frozen=True)
class Beat:
    min_batch: int
    report_to: Any = None                       # optional: gets ("ok", text) / ("error", r)
    observations: tuple[str, ...] = ()
    in_flight: tuple[str, ...] | None = None    # at most one batch at a time
    summaries: tuple[str, ...] = ()


def batch_prompt(batch: Sequence[str]) -> str:
    return "Summarize these observations in one line:\n" + "\n".join(batch)


class HeartbeatAgent(GenAgent):
    def init_agent(self, opts):
        return opts["backend_opts"], Beat(min_batch=opts.get("min_batch", 3),
                                          report_to=opts.get("report_to"))

    def handle_event(self, event, beat):
        match event:
            case ("observe", str(text)):
                return NoReply(replace(beat, observations=(*beat.observations, text)))
            case _:
                return NoReply(beat)

    def handle_info(self, message, beat):
        match message:
            case ("tick", ticker_agent):
                if ticker_agent != gen_agent.whereis(gen_agent.current_name()):
                    return NoReply(beat)        # a stale ticker of an older incarnation
                if beat.in_flight is not None or len(beat.observations) < beat.min_batch:
                    return NoReply(beat)
                batch = beat.observations
                return Prompt(batch_prompt(batch),
                              replace(beat, observations=(), in_flight=batch))
            case _:
                return NoReply(beat)

    def handle_response(self, ref, response, beat):
        self._report(beat, ("ok", response.text))
        return NoReply(replace(beat, in_flight=None,
                               summaries=(*beat.summaries, response.text)))

    def handle_error(self, ref, reason, beat):
        self._report(beat, ("error", reason))
        restored = (beat.in_flight or ()) + beat.observations   # for a later tick
        return NoReply(replace(beat, in_flight=None, observations=restored))

    @staticmethod
    def _report(beat, outcome):
        if beat.report_to is not None:
            beat.report_to.put(outcome)
# --8<-- [end:agent]


# --8<-- [start:ticker]
class Ticker:
    """Sends `("tick", agent)` to `agent.name` every `interval_ms` while `agent` lives."""

    def __init__(self, agent: gen_agent.AgentRef, interval_ms: float) -> None:
        self.agent = agent
        self.interval_ms = interval_ms
        self._thread = threading.Thread(target=self._run, name=f"ticker-{agent.name}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        name = self.agent.name
        # wait_stopped returns True as soon as this incarnation has exited.
        while not self.agent.wait_stopped(self.interval_ms / 1000):
            if gen_agent.whereis(name) != self.agent:
                return                          # the name moved to another incarnation
            gen_agent.send(name, ("tick", self.agent))

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()
# --8<-- [end:ticker]


def fake_model(prompt: str) -> str:
    """The stand-in model: counts the observations of a batch."""
    return f"{len(prompt.splitlines()) - 1} observations, nothing unusual"


def run(backend: Any, backend_opts: dict[str, Any], observations: Sequence[str],
        min_batch: int = 2, interval_ms: float = 20) -> tuple[Beat, list[Any]]:
    outcomes: queue.Queue = queue.Queue()
    agent = gen_agent.start_agent(HeartbeatAgent, name="heartbeat", backend=backend,
                                  backend_opts=backend_opts, min_batch=min_batch,
                                  report_to=outcomes)
    ticker = Ticker(agent, interval_ms)
    seen = []
    for start in range(0, len(observations) - min_batch + 1, min_batch):
        for text in observations[start:start + min_batch]:
            gen_agent.notify_ack("heartbeat", ("observe", text))
        seen.append(outcomes.get(timeout=600))     # the next tick starts this batch
    beat = agent.status().agent_state
    agent.stop()
    ticker.join(timeout=5)
    return beat, seen


def main(argv: Sequence[str] | None = None) -> None:
    observations = [f"cpu {n}%" for n in (12, 15, 11, 80, 14, 13)]
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        beat, _ = run(backend, opts, observations)
    for summary in beat.summaries:
        print(summary)


if __name__ == "__main__":
    main(sys.argv[1:])

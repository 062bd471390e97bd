"""Telemetry and logging: observe turns with handlers; turn gen_agent's logs on.

Run it: `python docs/examples/guide/telemetry_logging.py`.
"""

from __future__ import annotations

import contextlib

import gen_agent
from gen_agent import GenAgent, NoReply, telemetry
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend


class Quiet(GenAgent):
    def init_agent(self, opts):
        return opts["backend_opts"], None

    def handle_response(self, ref, response, state):
        return NoReply(state)

    def post_turn(self, outcome, ref, state):
        if outcome[0] == "error":
            raise ValueError("a bug in post_turn: logged by type, never by message")
        return state


def turn_durations() -> list[tuple]:
    # --8<-- [start:telemetry]
    seen = []

    def on_turn_end(event_name, measurements, metadata, config):
        # Runs synchronously in the agent's thread: be quick, never call the agent here.
        outcome = "ok" if event_name == telemetry.TURN_STOP else metadata["reason_kind"]
        seen.append((metadata["agent"], metadata["origin"], outcome,
                     measurements["duration_ms"] >= 0))

    telemetry.attach_many("my-app.turns", [telemetry.TURN_STOP, telemetry.TURN_ERROR],
                          on_turn_end)
    try:
        with gen_agent.AgentSystem():
            scripts = [mock.text_turn("fine"), mock.error_turn("rate_limited")]
            agent = gen_agent.start_agent(Quiet, name="quiet", backend=MockBackend,
                                          backend_opts={"scripts": scripts})
            agent.ask("first", timeout=30)
            ref = agent.tell("second")
            agent.drain(timeout=30)                 # finish the turn, then stop
    finally:
        telemetry.detach("my-app.turns")
    print(seen)   # [('quiet', 'ask', 'ok', True),
    #              ('quiet', 'tell', 'backend_or_callback_error', True)]
    # --8<-- [end:telemetry]
    del ref
    return seen


def warnings_logged() -> list[str]:
    # --8<-- [start:logging]
    from loguru import logger

    lines: list[str] = []
    logger.enable("gen_agent")                      # gen_agent's logs are off by default
    sink = logger.add(lines.append, level="WARNING",
                      filter=lambda record: "gen_agent" in record["extra"],
                      format="{level} [{extra[gen_agent]} {extra[gen_agent_module]}] {message}")
    try:
        with gen_agent.AgentSystem():
            agent = gen_agent.start_agent(Quiet, name="quiet", backend=MockBackend,
                                          backend_opts={"scripts": [mock.error("boom")]})
            with contextlib.suppress(gen_agent.TurnError):   # the turn fails: "boom"
                agent.ask("hi", timeout=30)
    finally:
        logger.remove(sink)
        logger.disable("gen_agent")
    print(lines)   # ['WARNING [quiet Quiet] gen_agent post_turn/3 raised
    #                  (error: ValueError at .../telemetry_logging.py:25 in post_turn)\n']
    # --8<-- [end:logging]
    return lines


def main() -> None:
    turn_durations()
    warnings_logged()


if __name__ == "__main__":
    main()

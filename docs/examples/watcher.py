"""Watcher: an idle agent that turns interesting events into turns (contract §10).

The agent starts idle with no initial turn. `handle_event` filters: an interesting event
returns `Prompt(...)`, anything else `NoReply`. Each generated prompt is recorded as pending
`(event, prompt)`; `pre_turn` claims the head only when the prompt matches, so a direct,
unrelated prompt is never attributed to an event. Success records an action, an error records
a failure with the originating event, and a generated prompt rejected by the queue is
attributed to the newest pending event. `notify_ack` returns on admission (handled now, or
buffered behind the running turn), not on completion; the notification byte limit rejects an
oversized event before it ever reaches the agent's state.

Run it: `python docs/examples/watcher.py [--backend NAME]`.
"""

from __future__ import annotations

import queue
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, NoReply, Proceed, Prompt


# --8<-- [start:agent]
def prompt_for(event: Any) -> str | None:
    """The prompt an event deserves, or None for events that are not interesting."""
    match event:
        case ("file_changed", str(path)) if path.endswith(".py"):
            return f"Review the change to {path} in one sentence."
        case ("alert", str(text)):
            return f"Explain this alert and propose one action: {text}"
        case _:
            return None


@dataclass(frozen=True)
class Watch:
    report_to: Any = None                          # optional: gets (event, outcome) per turn
    pending: tuple[tuple[Any, str], ...] = ()      # generated (event, prompt), not yet run
    current: Any = None                            # the event the running turn serves
    actions: tuple[tuple[Any, str], ...] = ()      # (event or None, reply)
    failures: tuple[tuple[Any, Any], ...] = ()     # (event or None, reason)


class Watcher(GenAgent):
    def init_agent(self, opts):
        return opts["backend_opts"], Watch(report_to=opts.get("report_to"))

    def handle_event(self, event, state):
        prompt = prompt_for(event)
        if prompt is None:
            return NoReply(state)
        return Prompt(prompt, replace(state, pending=(*state.pending, (event, prompt))))

    def pre_turn(self, prompt, state):
        if state.pending and state.pending[0][1] == prompt:
            event = state.pending[0][0]
            return Proceed(prompt, replace(state, pending=state.pending[1:], current=event))
        return Proceed(prompt, replace(state, current=None))   # a direct prompt

    def handle_response(self, ref, response, state):
        self._report(state, state.current, ("ok", response.text))
        return NoReply(replace(state, current=None,
                               actions=(*state.actions, (state.current, response.text))))

    def handle_error(self, ref, reason, state):
        event = state.current
        overloaded = isinstance(reason, tuple) and reason[0] == "overloaded"
        if overloaded and event is None and state.pending:
            # The queue rejected the prompt generated last: blame the newest event.
            event = state.pending[-1][0]
            state = replace(state, pending=state.pending[:-1])
        self._report(state, event, ("error", reason))
        return NoReply(replace(state, current=None,
                               failures=(*state.failures, (event, reason))))

    @staticmethod
    def _report(state, event, outcome):
        if state.report_to is not None:
            state.report_to.put((event, outcome))
# --8<-- [end:agent]


def fake_model(prompt: str) -> str:
    """The stand-in model: a one-line review."""
    return f"Looked at it: {prompt.split(':')[-1].strip() or prompt}"


EVENTS = (
    ("file_changed", "README.md"),         # not interesting: no turn
    ("file_changed", "app/server.py"),
    ("heartbeat",),                        # not interesting
    ("alert", "disk 91% full"),
)


def run(backend: Any, backend_opts: dict[str, Any]) -> tuple[Watch, list[Any]]:
    outcomes: queue.Queue = queue.Queue()
    gen_agent.start_agent(Watcher, name="watcher", backend=backend,
                          backend_opts=backend_opts, report_to=outcomes)
    for event in EVENTS:
        gen_agent.notify_ack("watcher", event)     # admitted: handled, or buffered
    interesting = sum(prompt_for(event) is not None for event in EVENTS)
    seen = [outcomes.get(timeout=600) for _ in range(interesting)]
    return gen_agent.status("watcher").agent_state, seen


def main(argv: Sequence[str] | None = None) -> None:
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        state, _ = run(backend, opts)
    for event, reply in state.actions:
        print(event, "->", reply)


if __name__ == "__main__":
    main(sys.argv[1:])

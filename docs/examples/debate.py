"""Debate: two agents alternate through cross-agent notifications (contract §10).

After its turn an agent notifies the opponent with its statement; receiving a statement
produces the next prompt. Each side speaks exactly `max_rounds` times; both halt once the
last statement is delivered and report `("debate", name, "finished")` to `report_to`. A failed
turn halts the failing side (`("debate", name, ("failed", reason))`) and notifies the
opponent, which halts with `("failed", ("opponent_failed", name))`. Both agents end with
identical, ordered transcripts.

Run it: `python docs/examples/debate.py [--backend NAME]`.
"""

from __future__ import annotations

import queue
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, Halt, NoReply, Prompt


# --8<-- [start:agent]
@dataclass(frozen=True)
class Side:
    name: Any
    opponent: Any
    stance: str
    topic: str
    max_rounds: int
    report_to: Any                                   # anything with put(), e.g. a Queue
    spoken: int = 0
    transcript: tuple[tuple[Any, str], ...] = ()     # (speaker, statement), in order
    outcome: Any = None


def opening_prompt(side: Side) -> str:
    return f"Debate topic: {side.topic}\nArgue {side.stance}, in two sentences."


def reply_prompt(side: Side, statement: str) -> str:
    return (f"Debate topic: {side.topic}\nYou argue {side.stance}. Your opponent said:\n"
            f"{statement}\nAnswer in two sentences.")


class Debater(GenAgent):
    def init_agent(self, opts):
        side = Side(name=gen_agent.current_name(), opponent=opts["opponent"],
                    stance=opts["stance"], topic=opts["topic"], max_rounds=opts["max_rounds"],
                    report_to=opts["report_to"])
        return opts["backend_opts"], side

    def handle_event(self, event, side):
        match event:
            case ("open",):
                return Prompt(opening_prompt(side), side)
            case ("statement", speaker, text):
                side = replace(side, transcript=(*side.transcript, (speaker, text)))
                if self._over(side):
                    return self._finish(side, "finished")
                if side.spoken < side.max_rounds:
                    return Prompt(reply_prompt(side, text), side)
                return NoReply(side)
            case ("opponent_failed", opponent):
                return self._finish(side, ("failed", ("opponent_failed", opponent)))
            case _:
                return NoReply(side)

    def handle_response(self, ref, response, side):
        side = replace(side, spoken=side.spoken + 1,
                       transcript=(*side.transcript, (side.name, response.text)))
        gen_agent.notify(side.opponent, ("statement", side.name, response.text))
        if self._over(side):
            return self._finish(side, "finished")
        return NoReply(side)                         # wait for the opponent's statement

    def handle_error(self, ref, reason, side):
        gen_agent.notify(side.opponent, ("opponent_failed", side.name))
        return self._finish(side, ("failed", reason))

    @staticmethod
    def _over(side):
        return len(side.transcript) == 2 * side.max_rounds

    @staticmethod
    def _finish(side, outcome):
        side.report_to.put(("debate", side.name, outcome))
        return Halt(replace(side, outcome=outcome))


def start_debate(topic: str, *, max_rounds: int, report_to: Any, backend: Any,
                 backend_opts: dict[str, Any], names: tuple[Any, Any] = ("pro", "con")):
    """Start both sides and open the debate; `names[0]` speaks first."""
    first, second = names
    for name, opponent, stance in ((first, second, "for"), (second, first, "against")):
        gen_agent.start_agent(Debater, name=name, backend=backend, opponent=opponent,
                              stance=stance, topic=topic, max_rounds=max_rounds,
                              report_to=report_to, backend_opts=backend_opts)
    gen_agent.notify(first, ("open",))
# --8<-- [end:agent]


def fake_model(prompt: str) -> str:
    """The stand-in model: a one-line statement for its side."""
    stance = "for" if "argue for" in prompt.lower() else "against"
    heard = "a fresh start" if "Your opponent said" not in prompt else "the last point"
    return f"Speaking {stance}, answering {heard}."


def run(backend: Any, backend_opts: dict[str, Any], max_rounds: int = 2) -> dict[str, Any]:
    reports: queue.Queue = queue.Queue()
    start_debate("Should agents be long-lived?", max_rounds=max_rounds, report_to=reports,
                 backend=backend, backend_opts=backend_opts)
    outcomes = [reports.get(timeout=600) for _ in range(2)]
    transcripts = {name: gen_agent.status(name).agent_state.transcript for name in ("pro", "con")}
    return {"reports": outcomes, "transcripts": transcripts}


def main(argv: Sequence[str] | None = None) -> None:
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        result = run(backend, opts)
    for speaker, text in result["transcripts"]["pro"]:
        print(f"{speaker}: {text}")
    print("reports:", result["reports"])
    print("identical transcripts:",
          result["transcripts"]["pro"] == result["transcripts"]["con"])


if __name__ == "__main__":
    main(sys.argv[1:])

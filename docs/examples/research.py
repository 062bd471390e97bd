"""Research: one agent self-chains through phases and halts with a report (contract §10).

Phases: `listing` (the model lists sub-questions; the agent parses one-line questions ending
in "?", strips "1." / "2)" prefixes, ignores preambles, keeps at most `max_sub_questions`;
none → halt with `"no_questions"`), `answering` (one turn per question), `synthesizing` (one
turn for the report), then `done` and `Halt`. Any error halts with phase `failed` and
`last_error`. A resumed terminal agent that receives more prompts keeps its report and phase
and halts again. `wait_report` waits (bounded) until the agent halted.

Run it: `python docs/examples/research.py [--backend NAME]`.
"""

from __future__ import annotations

import re
import sys
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, Halt, Proceed, Prompt, telemetry

# --8<-- [start:parse]
_NUMBERING = re.compile(r"^\s*(?:[-*•]|\(?\d+[.)])\s*")


def parse_questions(text: str, limit: int) -> tuple[str, ...]:
    """One-line questions from a model's list: numbering stripped, preamble ignored."""
    questions = []
    for line in text.splitlines():
        line = _NUMBERING.sub("", line).strip()
        if line.endswith("?"):
            questions.append(line)
    return tuple(questions[:limit])
# --8<-- [end:parse]


# --8<-- [start:agent]
@dataclass(frozen=True)
class Research:
    topic: str
    max_sub_questions: int = 3
    phase: str = "listing"       # listing → answering → synthesizing → done | failed
    questions: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()
    report: str | None = None
    last_error: Any = None


def listing_prompt(topic: str, limit: int) -> str:
    return (f"List at most {limit} sub-questions worth answering to research: {topic}\n"
            "One question per line, each ending with '?'.")


def answer_prompt(topic: str, question: str) -> str:
    return f"Research topic: {topic}\nAnswer briefly: {question}"


def synthesis_prompt(state: Research) -> str:
    notes = "\n".join(f"Q: {q}\nA: {a}" for q, a in zip(state.questions, state.answers,
                                                          strict=True))
    return f"Write a short report on {state.topic} from these notes:\n{notes}"


class Researcher(GenAgent):
    def init_agent(self, opts):
        state = Research(topic=opts["topic"], max_sub_questions=opts.get("max_sub_questions", 3))
        return opts["backend_opts"], state

    def pre_turn(self, prompt, state):
        if state.phase in ("done", "failed"):
            return Halt(state)           # terminal: keep the report, halt again
        return Proceed(prompt, state)

    def handle_response(self, ref, response, state):
        match state.phase:
            case "listing":
                questions = parse_questions(response.text, state.max_sub_questions)
                if not questions:
                    return Halt(replace(state, phase="failed", last_error="no_questions"))
                state = replace(state, phase="answering", questions=questions)
                return Prompt(answer_prompt(state.topic, questions[0]), state)
            case "answering":
                state = replace(state, answers=(*state.answers, response.text))
                if len(state.answers) < len(state.questions):
                    question = state.questions[len(state.answers)]
                    return Prompt(answer_prompt(state.topic, question), state)
                state = replace(state, phase="synthesizing")
                return Prompt(synthesis_prompt(state), state)
            case "synthesizing":
                return Halt(replace(state, phase="done", report=response.text))
            case _:
                return Halt(state)

    def handle_error(self, ref, reason, state):
        if state.phase in ("done", "failed"):
            return Halt(state)           # e.g. the pre_turn_halted of a late prompt
        return Halt(replace(state, phase="failed", last_error=reason))


def start_research(name: Any, topic: str, *, backend: Any, backend_opts: dict[str, Any],
                   max_sub_questions: int = 3) -> None:
    """Start the agent and its first turn (the listing)."""
    gen_agent.start_agent(Researcher, name=name, backend=backend, topic=topic,
                          max_sub_questions=max_sub_questions, backend_opts=backend_opts)
    gen_agent.tell(name, listing_prompt(topic, max_sub_questions))
# --8<-- [end:agent]


# --8<-- [start:wait]
def wait_report(name: Any, timeout: float) -> tuple[str, Any]:
    """Wait until the agent halted: `("ok", state)` if it finished, else
    `("error", last_error)`, or `("error", "timeout")` when `timeout` seconds pass first."""
    halted = threading.Event()

    def on_halted(_event, _measurements, metadata, _config):
        if metadata["agent"] == name:     # runs in the agent's thread: only signal
            halted.set()

    handler_id = ("research.wait_report", uuid.uuid4().hex)
    telemetry.attach(handler_id, telemetry.HALTED, on_halted)
    try:
        # Attached first, then checked: a halt in between is not missed.
        if not gen_agent.status(name).halted and not halted.wait(timeout):
            return ("error", "timeout")
    finally:
        telemetry.detach(handler_id)
    state = gen_agent.status(name).agent_state
    return ("ok", state) if state.phase == "done" else ("error", state.last_error)
# --8<-- [end:wait]


def fake_model(prompt: str) -> str:
    """The stand-in model: a numbered list, short answers, a report."""
    if prompt.startswith("List at most"):
        return ("Good questions to start with:\n1. What problem does it solve?\n"
                "2) Who uses it today?\n3. What are its limits?\nThat should cover it.")
    if prompt.startswith("Research topic:"):
        return f"In short: {prompt.rsplit('Answer briefly: ', 1)[1].rstrip('?')}."
    return "Report: " + " ".join(line[3:] for line in prompt.splitlines()
                                 if line.startswith("A: "))


def main(argv: Sequence[str] | None = None) -> None:
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        start_research("researcher", "the actor model in Python", backend=backend,
                       backend_opts=opts)
        outcome, value = wait_report("researcher", timeout=600)
    if outcome == "ok":
        for question in value.questions:
            print("asked:", question)
        print(value.report)
    else:
        print("research failed:", value)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Checkpointer: a human reviews every draft before the agent goes on (contract §10).

After each draft the agent stays *idle* (`NoReply`, phase `awaiting_review`), not halted, so
that a later `Prompt` from `handle_event` can dispatch. Each draft gets a fresh review token;
a decision `("review", token, "approve" | ("revise", text) | "finish")` applies only when the
token matches. Stale and duplicate decisions are ignored, and so are decisions sent while the
next draft is being written: notifications are applied after that turn's `handle_response`,
which has already issued a new token. An error moves the agent to a visible `failed` phase
that records the failed prompt (seen in `pre_turn`) and the failure's ref;
`("retry", failure_ref)` sends that prompt again.

Run it: `python docs/examples/checkpointer.py [--backend NAME]`.
"""

from __future__ import annotations

import queue
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, Halt, NoReply, Proceed, Prompt


# --8<-- [start:agent]
@dataclass(frozen=True)
class Review:
    topic: str
    reviewer: Any                     # gets ("draft", token, text), ("failed", ref, reason),
    #                                   ("finished", sections); e.g. a queue.Queue
    phase: str = "drafting"           # drafting → awaiting_review → ... → finished | failed
    token: str | None = None          # the review token of the current draft
    draft: str | None = None
    sections: tuple[str, ...] = ()    # approved drafts
    last_prompt: str | None = None    # recorded in pre_turn
    failed_prompt: str | None = None
    failure_ref: Any = None
    failure: Any = None


def section_prompt(topic: str, number: int) -> str:
    return f"Draft section {number} of a short note on {topic}."


def revise_prompt(draft: str, feedback: str) -> str:
    return f"Revise this draft. Feedback: {feedback}\n\n{draft}"


class Checkpointer(GenAgent):
    def init_agent(self, opts):
        return opts["backend_opts"], Review(topic=opts["topic"], reviewer=opts["reviewer"])

    def pre_turn(self, prompt, review):
        return Proceed(prompt, replace(review, phase="drafting", token=None,
                                       last_prompt=prompt))

    def handle_response(self, ref, response, review):
        token = secrets.token_hex(4)                       # fresh for every draft
        review.reviewer.put(("draft", token, response.text))
        return NoReply(replace(review, phase="awaiting_review", token=token,
                               draft=response.text))       # idle, not halted

    def handle_error(self, ref, reason, review):
        review.reviewer.put(("failed", ref, reason))
        return NoReply(replace(review, phase="failed", failed_prompt=review.last_prompt,
                               failure_ref=ref, failure=reason))

    def handle_event(self, event, review):
        match event:
            case ("review", token, decision) if (review.phase == "awaiting_review"
                                                 and token == review.token):
                return self._decide(decision, review)
            case ("retry", ref) if review.phase == "failed" and ref == review.failure_ref:
                retry = replace(review, phase="drafting", failure_ref=None, failure=None)
                return Prompt(review.failed_prompt, retry)
            case _:
                return NoReply(review)                     # stale, duplicate or unknown

    def post_run(self, review):
        review.reviewer.put(("finished", review.sections))

    def _decide(self, decision, review):
        used = replace(review, token=None)                 # a token is good for one decision
        match decision:
            case "approve":
                used = replace(used, sections=(*review.sections, review.draft))
                return Prompt(section_prompt(review.topic, len(used.sections) + 1), used)
            case ("revise", str(feedback)):
                return Prompt(revise_prompt(review.draft, feedback), used)
            case "finish":
                return Halt(replace(used, phase="finished",
                                    sections=(*review.sections, review.draft)))
            case _:
                return NoReply(review)                     # not a decision: token kept


def start_checkpointer(name: Any, topic: str, *, reviewer: Any, backend: Any,
                       backend_opts: dict[str, Any]) -> None:
    gen_agent.start_agent(Checkpointer, name=name, backend=backend, topic=topic,
                          reviewer=reviewer, backend_opts=backend_opts)
    gen_agent.tell(name, section_prompt(topic, 1))
# --8<-- [end:agent]


def fake_model(prompt: str) -> str:
    """The stand-in model: names what it drafted or revised."""
    if prompt.startswith("Revise"):
        return "Revised: " + prompt.split("Feedback: ", 1)[1].split("\n", 1)[0]
    return prompt.replace("Draft", "Drafted", 1)


def run(backend: Any, backend_opts: dict[str, Any], decisions: Sequence[Any]) -> tuple:
    """Review each draft with the next decision; return what the reviewer saw."""
    reviewer: queue.Queue = queue.Queue()
    start_checkpointer("writer", "supervised agents", reviewer=reviewer, backend=backend,
                       backend_opts=backend_opts)
    seen = []
    for decision in decisions:
        kind, token, text = reviewer.get(timeout=600)
        seen.append((kind, text))
        gen_agent.notify("writer", ("review", token, decision))
    return tuple(seen), reviewer.get(timeout=600)


def main(argv: Sequence[str] | None = None) -> None:
    decisions = [("revise", "shorter"), "approve", "finish"]
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        seen, finished = run(backend, opts, decisions)
    for (kind, text), decision in zip(seen, decisions, strict=True):
        print(f"{kind}: {text!r} -> {decision}")
    print(finished)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Pipeline: ordered one-shot stages, each feeding the next by notification (contract §10).

Each stage turns `("pipeline_input", text)` into its prompt, forwards its response to the
next stage with `notify(next, ("pipeline_input", text))` and halts; the last stage just halts
(and reports the result). A failure forwards `("pipeline_failed", reason)` down the chain, so
later stages halt with `("upstream_failed", reason)` without dispatching anything. Starting
the pipeline rolls back only the stages it started itself when a start fails or a name is
already taken.

Run it: `python docs/examples/pipeline.py [--backend NAME]`.
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
class Stage:
    name: Any
    instruction: str                 # what this stage does to its input
    next: Any                        # the next stage's name, or None for the last one
    report_to: Any                   # the last stage reports ("ok", text) / ("error", reason)
    output: str | None = None
    error: Any = None


class StageAgent(GenAgent):
    def init_agent(self, opts):
        stage = Stage(name=gen_agent.current_name(), instruction=opts["instruction"],
                      next=opts["next"], report_to=opts["report_to"])
        return opts["backend_opts"], stage

    def handle_event(self, event, stage):
        match event:
            case ("pipeline_input", text):
                return Prompt(f"{stage.instruction}\n\n{text}", stage)
            case ("pipeline_failed", reason):
                return self._fail(stage, ("upstream_failed", reason), reason)
            case _:
                return NoReply(stage)

    def handle_response(self, ref, response, stage):
        stage = replace(stage, output=response.text)
        if stage.next is None:
            stage.report_to.put(("ok", response.text))
        else:
            gen_agent.notify(stage.next, ("pipeline_input", response.text))
        return Halt(stage)

    def handle_error(self, ref, reason, stage):
        return self._fail(stage, reason, reason)

    @staticmethod
    def _fail(stage, error, forwarded):
        if stage.next is None:
            stage.report_to.put(("error", error))
        else:
            gen_agent.notify(stage.next, ("pipeline_failed", forwarded))
        return Halt(replace(stage, error=error))


def start_pipeline(stages: Sequence[tuple[Any, str]], *, report_to: Any, backend: Any,
                   backend_opts: dict[str, Any]) -> list[Any]:
    """Start one agent per `(name, instruction)`, in order; return the names.

    If a start fails (or a name is taken), stop the stages this call started and re-raise:
    an agent that already held the name is left alone.
    """
    started = []
    try:
        for index, (name, instruction) in enumerate(stages):
            following = stages[index + 1][0] if index + 1 < len(stages) else None
            gen_agent.start_agent(StageAgent, name=name, backend=backend,
                                  instruction=instruction, next=following,
                                  report_to=report_to, backend_opts=backend_opts)
            started.append(name)
    except BaseException:
        for name in reversed(started):
            gen_agent.stop(name)
        raise
    return started


def feed(names: Sequence[Any], text: str) -> None:
    """Give the first stage its input."""
    gen_agent.notify(names[0], ("pipeline_input", text))
# --8<-- [end:agent]


STAGES = (
    ("outline", "Outline the key points of this text as a short list."),
    ("draft", "Write one paragraph from this outline."),
    ("polish", "Polish this paragraph; keep it short."),
)


def fake_model(prompt: str) -> str:
    """The stand-in model: tags its input with the stage's verb."""
    verb, _, text = prompt.partition("\n\n")
    return f"[{verb.split()[0].lower()}] {text}"


def run(backend: Any, backend_opts: dict[str, Any], text: str) -> tuple[str, Any]:
    results: queue.Queue = queue.Queue()
    names = start_pipeline(STAGES, report_to=results, backend=backend,
                           backend_opts=backend_opts)
    feed(names, text)
    return results.get(timeout=600)


def main(argv: Sequence[str] | None = None) -> None:
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        outcome, value = run(backend, opts, "Agents are actors whose every call is a prompt.")
    print(outcome, value)


if __name__ == "__main__":
    main(sys.argv[1:])

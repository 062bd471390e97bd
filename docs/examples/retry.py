"""Retry: back off with timers, stay responsive, give up deliberately (contract §10).

`handle_error` decides. A retry is a *delayed message*: the agent schedules
`gen_agent.send_after(name, ("retry", token), delay_ms)` with exponential backoff
`base_delay_ms * 2 ** (attempt - 1)` and goes idle, so it answers every call while it waits
(an `interrupt` during the backoff is a no-op: there is no turn to interrupt). `handle_info`
re-prompts only for the current token. After `max_attempts` attempts it halts `failed`;
`"interrupted"` and `"timeout"` give up at once; `("cancel_retry",)` halts `cancelled` and
cancels the timer (a late, stale token is ignored anyway); `terminate_agent` cancels the timer.

(For retrying an `ask` or `tell` under the caller's own ref, return `Prompt` from
`handle_error` instead: that is the runtime's caller-owned retry, contract §4.8.)

Run it: `python docs/examples/retry.py [--backend NAME]`.
"""

from __future__ import annotations

import queue
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend, mock_options

import gen_agent
from gen_agent import GenAgent, Halt, NoReply, Prompt
from gen_agent.backends import mock

# --8<-- [start:agent]
GIVE_UP_AT_ONCE = ("interrupted", "timeout")


@dataclass(frozen=True)
class Job:
    max_attempts: int
    base_delay_ms: float
    report_to: Any = None        # optional: gets (phase, result or last_error) on halt
    prompt: str | None = None
    phase: str = "idle"          # idle → running ⇄ backing_off → done | failed | cancelled
    attempts: int = 0
    token: int = 0               # identifies the one retry that may still fire
    timer: Any = None            # the TimerHandle of that retry
    delays_ms: tuple[float, ...] = ()
    errors: tuple[Any, ...] = ()
    result: str | None = None
    last_error: Any = None


class RetryingAgent(GenAgent):
    def init_agent(self, opts):
        job = Job(max_attempts=opts.get("max_attempts", 4),
                  base_delay_ms=opts.get("base_delay_ms", 500),
                  report_to=opts.get("report_to"))
        return opts["backend_opts"], job

    def handle_event(self, event, job):
        match event:
            case ("run", str(prompt)) if job.phase == "idle":
                return Prompt(prompt, replace(job, prompt=prompt, phase="running", attempts=1))
            case ("cancel_retry",) if job.phase == "backing_off":
                job.timer.cancel()
                return Halt(replace(job, phase="cancelled", timer=None))
            case _:
                return NoReply(job)

    def handle_info(self, message, job):
        match message:
            case ("retry", job.token) if job.phase == "backing_off":
                return Prompt(job.prompt, replace(job, phase="running", timer=None,
                                                  attempts=job.attempts + 1))
            case _:
                return NoReply(job)             # a stale or cancelled retry

    def handle_response(self, ref, response, job):
        return Halt(replace(job, phase="done", result=response.text))

    def handle_error(self, ref, reason, job):
        job = replace(job, errors=(*job.errors, reason), last_error=reason)
        if reason in GIVE_UP_AT_ONCE or job.attempts >= job.max_attempts:
            return Halt(replace(job, phase="failed"))
        delay_ms = job.base_delay_ms * 2 ** (job.attempts - 1)
        token = job.token + 1
        timer = gen_agent.send_after(gen_agent.current_name(), ("retry", token), delay_ms)
        return NoReply(replace(job, phase="backing_off", token=token, timer=timer,
                               delays_ms=(*job.delays_ms, delay_ms)))

    def post_run(self, job):
        if job.report_to is not None:
            job.report_to.put((job.phase, job.result if job.phase == "done"
                               else job.last_error))

    def terminate_agent(self, reason, job):
        if job.timer is not None:
            job.timer.cancel()
# --8<-- [end:agent]


def fake_model(prompt: str) -> str:
    """The stand-in model (used once the backend stops failing)."""
    return f"Answered after retrying: {prompt}"


def flaky_mock_options(failures: int) -> dict[str, Any]:
    """`MockBackend` options whose first `failures` turns fail with a retryable error."""
    failing = [mock.error_turn("overloaded") for _ in range(failures)]
    return {"scripts": failing + mock_options(fake_model)["scripts"]}


def run(backend: Any, backend_opts: dict[str, Any], prompt: str, *,
        base_delay_ms: float = 50, max_attempts: int = 4) -> tuple[tuple[str, Any], Job]:
    reports: queue.Queue = queue.Queue()
    gen_agent.start_agent(RetryingAgent, name="retrying", backend=backend,
                          backend_opts=backend_opts, report_to=reports,
                          base_delay_ms=base_delay_ms, max_attempts=max_attempts)
    gen_agent.notify("retrying", ("run", prompt))
    outcome = reports.get(timeout=600)
    return outcome, gen_agent.status("retrying").agent_state


def main(argv: Sequence[str] | None = None) -> None:
    with (chosen_backend(argv, fake_model, description=__doc__,
                         mock_opts=flaky_mock_options(2)) as (b, o),
          gen_agent.AgentSystem()):
        (phase, value), job = run(b, o, "What is exponential backoff?")
    print(f"{phase} after {job.attempts} attempts; backoff delays (ms): {list(job.delays_ms)}")
    print("errors:", list(job.errors))
    print(value)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Supervisor fan-out/fan-in: plan, one worker agent per sub-task, synthesize (contract §10).

A coordinator plans sub-tasks (one per line, capped at `max_subtasks`) and hands them to a
`WorkerWatcher` thread, which starts one worker agent per sub-task, notifies each worker
(retrying rejected notifications), watches the coordinator and the workers, enforces the
collection deadline, and stops the workers on every terminal path. Each worker answers once,
notifies the coordinator with `("worker_result" | "worker_failed", run, name, value)` and
halts. The coordinator ignores stale runs, unknown and duplicate reports, counts a dead worker
and the deadline as failures, and synthesizes once everyone reported (partial success still
synthesizes; zero successes fails). It only accepts the synthesis turn it queued itself,
checked in `pre_turn` by comparing the prompt, so unrelated extra turns cannot finish the
workflow; a full prompt queue rejecting the synthesis fails it with the overload reason.

Run it: `python docs/examples/fan_out.py [--backend NAME]`.
"""

from __future__ import annotations

import contextlib
import math
import queue
import re
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, Halt, NoReply, Proceed, Prompt, telemetry

_NUMBERING = re.compile(r"^\s*(?:[-*•]|\(?\d+[.)])\s*")


def parse_subtasks(text: str, limit: int) -> tuple[str, ...]:
    """One sub-task per non-empty line, numbering stripped, at most `limit`."""
    lines = (_NUMBERING.sub("", line).strip() for line in text.splitlines())
    return tuple(line for line in lines if line)[:limit]


# --8<-- [start:worker]
@dataclass(frozen=True)
class Job:
    coordinator: Any
    run_id: str
    answer: str | None = None


class Worker(GenAgent):
    """Answers its one sub-task, reports to the coordinator, halts."""

    def init_agent(self, opts):
        return opts["backend_opts"], Job(coordinator=opts["coordinator"], run_id=opts["run_id"])

    def handle_event(self, event, job):
        match event:
            case ("work", str(subtask)):
                return Prompt(subtask, job)
            case _:
                return NoReply(job)

    def handle_response(self, ref, response, job):
        self._report(job, ("worker_result", job.run_id, gen_agent.current_name(), response.text))
        return Halt(replace(job, answer=response.text))

    def handle_error(self, ref, reason, job):
        self._report(job, ("worker_failed", job.run_id, gen_agent.current_name(), reason))
        return Halt(job)

    @staticmethod
    def _report(job, event):
        gen_agent.notify(job.coordinator, event)
# --8<-- [end:worker]


# --8<-- [start:watcher]
class WorkerWatcher:
    """A thread that owns one run's workers: start, notify, watch, enforce the deadline, stop.

    Worker exits and the coordinator's exit are seen through the `TERMINATED` telemetry
    event; the coordinator ends the run early with `finish()` (from its `post_run`).
    """

    def __init__(self, *, coordinator: Any, run_id: str, assignments: Sequence[tuple[Any, str]],
                 deadline_ms: float, backend: Any, backend_opts: dict[str, Any],
                 notify_attempts: int = 5, retry_base_ms: float = 10) -> None:
        self.coordinator, self.run_id = coordinator, run_id
        self.assignments = tuple(assignments)
        self.deadline_ms = deadline_ms
        self.backend, self.backend_opts = backend, backend_opts
        self.notify_attempts, self.retry_base_ms = notify_attempts, retry_base_ms
        self._inbox: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._main, name=f"fan-out-watcher-{run_id}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        """End the run: the watcher stops the workers and exits. Any thread; idempotent."""
        self._inbox.put(("finish",))

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _main(self) -> None:
        watched = {name for name, _ in self.assignments} | {self.coordinator}

        def on_terminated(_event, _measurements, metadata, _config):
            if metadata["agent"] in watched:    # the agent's thread: just post it
                self._inbox.put(("terminated", metadata["agent"], metadata["reason"]))

        handler_id = ("fan_out.watcher", uuid.uuid4().hex)
        telemetry.attach(handler_id, telemetry.TERMINATED, on_terminated)
        started: list[Any] = []
        try:
            for name, subtask in self.assignments:
                try:
                    gen_agent.start_agent(Worker, name=name, backend=self.backend,
                                          coordinator=self.coordinator, run_id=self.run_id,
                                          backend_opts=self.backend_opts)
                except gen_agent.GenAgentError as exc:
                    self._tell_coordinator(("worker_failed", self.run_id, name,
                                            ("start_failed", type(exc).__name__)))
                    continue
                started.append(name)
                if not self._deliver(name, ("work", subtask)):
                    self._tell_coordinator(("worker_failed", self.run_id, name, "notify_rejected"))
            self._watch()
        finally:
            telemetry.detach(handler_id)
            for name in started:                # every terminal path stops the workers
                with contextlib.suppress(gen_agent.AgentNotFound):
                    gen_agent.stop(name)

    def _watch(self) -> None:
        deadline = time.monotonic() + self.deadline_ms / 1000
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._tell_coordinator(("deadline", self.run_id))
                deadline = math.inf             # told once; now wait for the end
                continue
            try:
                message = self._inbox.get(timeout=None if deadline == math.inf else remaining)
            except queue.Empty:
                continue
            match message:
                case ("finish",) | ("terminated", self.coordinator, _):
                    return
                case ("terminated", name, reason):
                    self._tell_coordinator(("worker_down", self.run_id, name, reason))

    def _tell_coordinator(self, event: Any) -> None:
        self._deliver(self.coordinator, event)

    def _deliver(self, name: Any, event: Any) -> bool:
        """`notify_ack`, retrying a rejection (a full buffer) with exponential backoff."""
        for attempt in range(self.notify_attempts):
            try:
                gen_agent.notify_ack(name, event)
                return True
            except gen_agent.TurnError:
                time.sleep(self.retry_base_ms * 2**attempt / 1000)
            except (gen_agent.AgentNotFound, gen_agent.AgentDown):
                return False
        return False
# --8<-- [end:watcher]


# --8<-- [start:coordinator]
@dataclass(frozen=True)
class Run:
    report_to: Any
    max_subtasks: int
    deadline_ms: float
    worker_backend: Any
    worker_backend_opts: dict[str, Any]
    run_id: str | None = None
    phase: str = "idle"          # idle → planning → collecting → synthesizing → done | failed
    workers: tuple[Any, ...] = ()
    subtasks: tuple[str, ...] = ()
    results: dict[Any, str] = field(default_factory=dict)
    failures: dict[Any, Any] = field(default_factory=dict)
    synthesis_prompt: str | None = None
    in_synthesis: bool = False
    report: str | None = None
    error: Any = None
    watcher: WorkerWatcher | None = None


def plan_prompt(task: str, limit: int) -> str:
    return f"Split this task into at most {limit} independent sub-tasks, one per line:\n{task}"


def synthesis_prompt(run: Run) -> str:
    parts = "\n".join(f"- {run.results[w]}" for w in run.workers if w in run.results)
    return f"Combine these partial results into one answer:\n{parts}"


class Coordinator(GenAgent):
    def init_agent(self, opts):
        run = Run(report_to=opts["report_to"], max_subtasks=opts.get("max_subtasks", 3),
                  deadline_ms=opts.get("deadline_ms", 60_000),
                  worker_backend=opts["worker_backend"],
                  worker_backend_opts=opts["worker_backend_opts"])
        return opts["backend_opts"], run

    def handle_event(self, event, run):
        match event:
            case ("start", str(task)) if run.phase == "idle":
                run = replace(run, run_id=uuid.uuid4().hex[:8], phase="planning")
                return Prompt(plan_prompt(task, run.max_subtasks), run)
            case ("worker_result", run.run_id, name, text) if self._expects(run, name):
                return self._collected(replace(run, results={**run.results, name: text}))
            case ("worker_failed" | "worker_down", run.run_id, name, reason) if self._expects(
                    run, name):
                return self._collected(replace(run, failures={**run.failures, name: reason}))
            case ("deadline", run.run_id) if run.phase == "collecting":
                missing = {w: "deadline" for w in run.workers
                           if w not in run.results and w not in run.failures}
                return self._collected(replace(run, failures={**run.failures, **missing}))
            case _:
                return NoReply(run)             # stale run, unknown or duplicate report

    def pre_turn(self, prompt, run):
        # Only the synthesis prompt this agent queued itself may finish the workflow.
        mine = run.phase == "synthesizing" and prompt == run.synthesis_prompt
        return Proceed(prompt, replace(run, in_synthesis=mine))

    def handle_response(self, ref, response, run):
        if run.phase == "planning":
            subtasks = parse_subtasks(response.text, run.max_subtasks)
            if not subtasks:
                return self._fail(run, "no_subtasks")
            me = gen_agent.current_name()
            workers = tuple(f"{me}-{run.run_id}-w{i}" for i in range(len(subtasks)))
            watcher = WorkerWatcher(coordinator=me, run_id=run.run_id,
                                    assignments=list(zip(workers, subtasks, strict=True)),
                                    deadline_ms=run.deadline_ms, backend=run.worker_backend,
                                    backend_opts=run.worker_backend_opts)
            watcher.start()
            return NoReply(replace(run, phase="collecting", workers=workers,
                                   subtasks=subtasks, watcher=watcher))
        if run.in_synthesis:
            return Halt(replace(run, phase="done", report=response.text, in_synthesis=False))
        return NoReply(run)                     # an unrelated turn: changes nothing

    def handle_error(self, ref, reason, run):
        if run.phase == "planning" or run.in_synthesis:
            return self._fail(run, reason)
        if run.phase == "synthesizing" and isinstance(reason, tuple) \
                and reason[0] == "overloaded":
            return self._fail(run, reason)      # the queue rejected our synthesis prompt
        return NoReply(run)

    def post_run(self, run):
        if run.watcher is not None:
            run.watcher.finish()
        run.report_to.put(("done", run.report) if run.phase == "done"
                          else ("failed", run.error))

    def terminate_agent(self, reason, run):
        if run.watcher is not None:
            run.watcher.finish()

    @staticmethod
    def _expects(run, name):
        return (run.phase == "collecting" and name in run.workers
                and name not in run.results and name not in run.failures)

    def _collected(self, run):
        if len(run.results) + len(run.failures) < len(run.workers):
            return NoReply(run)
        if not run.results:
            return self._fail(run, ("all_workers_failed", run.failures))
        prompt = synthesis_prompt(run)
        return Prompt(prompt, replace(run, phase="synthesizing", synthesis_prompt=prompt))

    @staticmethod
    def _fail(run, reason):
        return Halt(replace(run, phase="failed", error=reason, in_synthesis=False))


def start_coordinator(name: Any, *, report_to: Any, backend: Any, backend_opts: dict[str, Any],
                      worker_backend: Any = None, worker_backend_opts: dict | None = None,
                      **opts: Any) -> Any:
    """Start a coordinator; workers use the same backend unless told otherwise."""
    return gen_agent.start_agent(
        Coordinator, name=name, backend=backend, backend_opts=backend_opts,
        report_to=report_to,
        worker_backend=worker_backend if worker_backend is not None else backend,
        worker_backend_opts=worker_backend_opts if worker_backend_opts is not None
        else backend_opts,
        **opts)
# --8<-- [end:coordinator]


def fake_model(prompt: str) -> str:
    """The stand-in model: a three-line plan, short answers, a combined answer."""
    if prompt.startswith("Split this task"):
        return "1. Survey the options\n2. Estimate the costs\n3. List the risks"
    if prompt.startswith("Combine"):
        return "Combined: " + "; ".join(line[2:] for line in prompt.splitlines()[1:])
    return f"done ({prompt.lower()})"


def run(backend: Any, backend_opts: dict[str, Any], task: str) -> tuple[str, Any]:
    reports: queue.Queue = queue.Queue()
    start_coordinator("coordinator", report_to=reports, backend=backend,
                      backend_opts=backend_opts, max_subtasks=3, deadline_ms=600_000)
    gen_agent.notify("coordinator", ("start", task))
    outcome = reports.get(timeout=600)
    run_state = gen_agent.status("coordinator").agent_state
    run_state.watcher.join(timeout=30)          # the workers are stopped
    return outcome


def main(argv: Sequence[str] | None = None) -> None:
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        outcome, value = run(backend, opts, "Choose a message queue for the new service.")
    print(outcome, value)


if __name__ == "__main__":
    main(sys.argv[1:])

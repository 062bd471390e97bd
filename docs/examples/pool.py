"""Pool: long-lived workers serving a stream of independent requests (contract §10).

N workers that never halt (every decision is `NoReply`); a dispatcher assigns tasks
round-robin with an atomic counter and `tell`; a rejection (`("overloaded", info)`) is
surfaced per task; each worker keeps its results (`task, ref, status, text | reason`) in its
own state; quiescence is read from `runtime_snapshot` (idle, nothing pending, no self-chain),
never by copying state; removing extra workers = take them out of rotation, wait until they
are quiescent, then stop them. With 4 held workers and 400 concurrent submissions each worker
gets exactly 100.

`gen_agent.Pool` packages this recipe with supervision (restarts, least-loaded routing,
resize); `packaged_pool` at the end shows it.

Run it: `python docs/examples/pool.py [--backend NAME]`.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, NoReply, Proceed, telemetry


# --8<-- [start:worker]
@dataclass(frozen=True)
class Result:
    task: str
    ref: Any
    status: str                  # "ok" or "error"
    value: Any                   # the text, or the failure reason


@dataclass(frozen=True)
class WorkerState:
    current: str | None = None   # the task being worked on (set in pre_turn)
    results: tuple[Result, ...] = ()


class PoolWorker(GenAgent):
    """Never halts: every outcome is recorded and the worker goes idle again."""

    def init_agent(self, opts):
        return opts["backend_opts"], WorkerState()

    def pre_turn(self, prompt, state):
        return Proceed(prompt, replace(state, current=prompt))

    def handle_response(self, ref, response, state):
        return NoReply(self._record(state, Result(state.current, ref, "ok", response.text)))

    def handle_error(self, ref, reason, state):
        return NoReply(self._record(state, Result(state.current, ref, "error", reason)))

    @staticmethod
    def _record(state, result):
        return replace(state, current=None, results=(*state.results, result))
# --8<-- [end:worker]


# --8<-- [start:dispatcher]
class Dispatcher:
    """Round-robin over named workers with an atomic counter; thread-safe."""

    def __init__(self, workers: Sequence[Any]) -> None:
        self._workers = list(workers)
        self._counter = itertools.count()    # the atomic counter: read under the lock,
        self._lock = threading.Lock()        # which also guards the worker list

    @property
    def workers(self) -> list[Any]:
        with self._lock:
            return list(self._workers)

    def submit(self, task: str) -> tuple[Any, str, Any]:
        """Tell the next worker; returns `(worker, "ok", ref)` or `(worker, "error", reason)`."""
        with self._lock:
            worker = self._workers[next(self._counter) % len(self._workers)]
        try:
            return (worker, "ok", gen_agent.tell(worker, task))
        except gen_agent.TurnError as exc:
            return (worker, "error", exc.reason)     # ("overloaded", info): per task

    def remove_workers(self, names: Sequence[Any], timeout: float) -> None:
        """Take `names` out of rotation, let them finish their queue, then stop them."""
        with self._lock:
            self._workers = [w for w in self._workers if w not in names]
        wait_quiescent(names, timeout)
        for name in names:
            gen_agent.stop(name)


def start_workers(prefix: str, size: int, *, backend: Any, backend_opts: dict[str, Any],
                  **opts: Any) -> list[Any]:
    names = [f"{prefix}-{i}" for i in range(size)]
    for name in names:
        gen_agent.start_agent(PoolWorker, name=name, backend=backend,
                              backend_opts=backend_opts, **opts)
    return names


def results(name: Any) -> tuple[Result, ...]:
    return gen_agent.status(name).agent_state.results
# --8<-- [end:dispatcher]


# --8<-- [start:quiescence]
def is_quiescent(snapshot: gen_agent.RuntimeSnapshot) -> bool:
    return (snapshot.phase == "idle" and snapshot.pending_prompts == 0
            and snapshot.pending_notifications == 0 and not snapshot.self_chain_pending)


def wait_quiescent(names: Sequence[Any], timeout: float) -> None:
    """Wait until every worker is quiescent; raise `TimeoutError` after `timeout` seconds.

    Wakes on each `STATE_CHANGED` telemetry event of a worker, then reads the snapshots.
    """
    changed = threading.Condition()
    changes = [0]
    watched = set(names)

    def wake(_event, _measurements, metadata, _config):
        if metadata["agent"] in watched:       # the agent's thread: only signal
            with changed:
                changes[0] += 1
                changed.notify_all()

    handler_id = ("pool.wait_quiescent", uuid.uuid4().hex)
    telemetry.attach(handler_id, telemetry.STATE_CHANGED, wake)
    deadline = time.monotonic() + timeout
    try:
        while True:
            with changed:
                seen = changes[0]
            # Never hold the lock while calling an agent: its thread may be in wake().
            if all(is_quiescent(gen_agent.runtime_snapshot(n)) for n in names):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"workers not quiescent within {timeout} s")
            with changed:
                if changes[0] == seen:          # nothing changed since the snapshots
                    changed.wait(remaining)
    finally:
        telemetry.detach(handler_id)
# --8<-- [end:quiescence]


# --8<-- [start:packaged]
def packaged_pool(tasks: Sequence[str], *, backend: Any, backend_opts: dict[str, Any],
                  size: int = 4) -> list[str]:
    """The same shape with `gen_agent.Pool`: supervised workers, results in task order."""
    with gen_agent.Pool(PoolWorker, size=size, backend=backend, routing="round_robin",
                        name_prefix="packaged", backend_opts=backend_opts) as pool:
        return [response.text for response in pool.map(tasks, timeout=600)]
# --8<-- [end:packaged]


def fake_model(prompt: str) -> str:
    """The stand-in model: the task, done."""
    return f"{prompt}: done"


def run(backend: Any, backend_opts: dict[str, Any], tasks: Sequence[str],
        size: int = 3) -> dict[Any, tuple[Result, ...]]:
    names = start_workers("worker", size, backend=backend, backend_opts=backend_opts)
    dispatcher = Dispatcher(names)
    for task in tasks:
        dispatcher.submit(task)
    wait_quiescent(names, timeout=600)
    return {name: results(name) for name in names}


def main(argv: Sequence[str] | None = None) -> None:
    tasks = [f"task {i}" for i in range(7)]
    with (chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        per_worker = run(backend, opts, tasks)
        packaged = packaged_pool(tasks[:4], backend=backend, backend_opts=opts)
    for name, done in per_worker.items():
        print(name, [f"{r.task} -> {r.status}" for r in done])
    print("gen_agent.Pool:", packaged)


if __name__ == "__main__":
    main(sys.argv[1:])

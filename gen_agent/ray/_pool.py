"""`RemotePool`: the `Pool` API over workers on several nodes.

Each node runs `size` supervised workers under their own supervisor (so a worker crash is
restarted inside its node), fed straight from the Ray calls that bring tasks, without a
dispatcher thread. Tasks stay on the caller's side: a node is handed a task only while it
has a free slot (`size * max_in_flight` per node), so the bound in flight per worker holds
and work not yet handed out survives any node's death. Per node, a collector thread keeps
one *exchange* call in flight: it hands the node the tasks that fit and returns the outcomes
settled since the previous call, once the node's whole room is done or after a short
linger; a sender thread hands out tasks that arrive while the collector waits. A Ray call
costs about 0.5 ms of CPU on each side here, so it is paid per batch of up to
`size * max_in_flight` tasks, not per task; the tasks go as one pickled bytes argument and
the responses come back as one MessagePack array (`gen_agent.ray._node.pack_outcomes`).

A task in flight on a node that dies fails with `("worker_down", ("node_down", node))`; a
worker crash inside a node gives `("worker_down", exit_reason)` as in a local `Pool`. Tasks
still queued move on to the other nodes, and to the failed node again once Ray has restarted
it (its workers are then started afresh). A node that stays down (past its restart
intensity) is dropped; when no node is left, queued tasks fail with `("pool_down",
"no_nodes")"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import ray
from loguru import logger
from ray.exceptions import RayActorError

from gen_agent._errors import CallTimeout, RequestError
from gen_agent._pool import PoolRef, checked_prompts, collect_result
from gen_agent._portable import from_portable
from gen_agent._response import Response
from gen_agent.ray._client import DEFAULT_NAMESPACE, _actor
from gen_agent.ray._directory import directory_call, get_directory
from gen_agent.ray._node import pack, unpack_outcomes

__all__ = ["RemotePool"]

_task_ids = itertools.count(1)
# How long a collector's long poll waits on its node (seconds); bounds stop() latency.
_COLLECT_WAIT_S = 0.25
# Exchange calls in flight per node at once. A Ray call costs ~0.5 ms of CPU on each side
# here, and a reply can carry at most the node's room (size * max_in_flight): one exchange
# that brings back the whole room costs half the calls of two that overlap (measured on 2
# cores: 0.58 against 0.26 x the local Pool pinned to one CPU, 0.65 against 0.72 unpinned),
# at the price of the workers idling for one round trip per room.
_COLLECTORS = 1
# How long a sender waits before retrying a restarting node (seconds).
_RETRY_S = 0.2


class _Done:
    """A one-shot event on one lock (a `threading.Event` builds a Condition per task):
    `set` once (with the pool's lock held), `wait` from any number of threads."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()  # released by set()
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        if self._set:
            return True
        if self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            self._lock.release()  # wake the next waiter, if any
            return True
        return self._set


class _Task:
    __slots__ = ("done", "node", "outcome", "prompt", "ref")

    def __init__(self, ref: PoolRef, prompt: str) -> None:
        self.ref = ref
        self.prompt = prompt
        self.node: Any = None
        self.done = _Done()
        self.outcome: tuple[str, Any] | None = None


class _NodeLane:
    __slots__ = ("actor", "capacity", "collectors", "dead", "epoch", "in_flight", "name",
                 "open", "polling", "sender", "workers")

    def __init__(self, name: Any, actor: Any, capacity: int) -> None:
        self.name = name
        self.actor = actor
        self.capacity = capacity
        self.in_flight: dict[int, _Task] = {}
        self.open = False
        self.dead = False
        self.epoch = 0  # bumped on every loss of the node's pool (death, restart)
        self.polling = 0  # collectors waiting in an exchange call now
        self.workers: list[Any] = []
        self.sender: threading.Thread | None = None
        self.collectors: list[threading.Thread] = []


class RemotePool:
    """A pool of `size` workers of `module` on each of `nodes`, started on construction.

    Args:
        module: the `GenAgent` subclass every worker runs (importable on the nodes).
        nodes: the names of started nodes (`gen_agent.ray.start_node`).
        size: workers per node (>= 1).
        backend: the workers' backend.
        max_in_flight: tasks handed to one worker at a time (>= 1, default 1).
        max_restarts: the restart intensity of each node's workers (count within
            `max_seconds`, default 3); past it that node's workers stop, their tasks in
            flight fail with `("pool_down", reason)`, and the node gets new workers.
        max_seconds: that window in seconds (default 5).
        name_prefix: workers are named `f"{name_prefix}@{node}-{i}"`; default a unique one.
        namespace: the cluster's namespace.
        **opts: every other `start_agent` option for the workers (must pickle).

    Task outcomes: `result(ref)` returns the `Response`, or raises `TurnError` with the turn's
    own reason, `("worker_down", reason)` (its worker or node died while it was in flight),
    `("pool_down", "no_nodes")` or `("agent_terminated", "shutdown")` (stopped first).

    Raises:
        ValueError: no nodes, or a bad `size` / `max_in_flight`.
        AgentDown: `("node_down", node)` for a node that is not running.
        gen_agent errors: a node failed to start its workers (as `Pool` raises).

    Thread-safety: every method may be called from any thread.

    Mirrors: the Pool pattern of docs/pages/contract.md#s10 (docs: the pattern recipes), spread over
    nodes.
    """

    def __init__(self, module: type, *, nodes: Sequence[Any], size: int, backend: Any,
                 max_in_flight: int = 1, max_restarts: int = 3, max_seconds: float = 5.0,
                 name_prefix: str | None = None, namespace: str = DEFAULT_NAMESPACE,
                 **opts: Any) -> None:
        if not nodes:
            raise ValueError("RemotePool needs at least one node")
        for label, value in (("size", size), ("max_in_flight", max_in_flight)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be an int >= 1, got {value!r}")
        self.pool_id = f"remote-pool-{uuid.uuid4().hex[:12]}"
        self.name_prefix = name_prefix if name_prefix is not None else self.pool_id
        self.namespace = namespace
        self._open_args = (module, size, backend, max_in_flight, max_restarts, max_seconds)
        self._opts = dict(opts)
        self._cond = threading.Condition()
        self._queue: deque[_Task] = deque()
        self._tasks: dict[int, _Task] = {}
        self._stopping = False
        self._directory = get_directory(namespace)
        self._lanes = [_NodeLane(node, _actor(namespace, node), size * max_in_flight)
                       for node in nodes]
        self._live = len(self._lanes)  # lanes not dead
        opened = [(lane, self._open_ref(lane)) for lane in self._lanes]
        try:
            for lane, ref in opened:
                self._opened(lane, ray.get(ref))
        except BaseException:
            self._close_lanes()
            raise
        for lane in self._lanes:
            lane.sender = threading.Thread(target=self._send_loop, args=(lane,), daemon=True,
                                           name=f"gen_agent-remote-pool-send-{lane.name}")
            lane.collectors = [
                threading.Thread(target=self._collect_loop, args=(lane,), daemon=True,
                                 name=f"gen_agent-remote-pool-collect-{lane.name}-{i}")
                for i in range(_COLLECTORS)]
            lane.sender.start()
            for thread in lane.collectors:
                thread.start()

    def __enter__(self) -> RemotePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<RemotePool {self.pool_id} nodes={[lane.name for lane in self._lanes]}>"

    # ------------------------------------------------------------------ public API
    def workers(self) -> list[Any]:
        """The worker names, node by node."""
        with self._cond:
            return [name for lane in self._lanes for name in lane.workers]

    def submit(self, prompt: str) -> PoolRef:
        """Queue `prompt` as one task and return its `PoolRef` at once.

        Raises:
            TypeError: `prompt` is not a str. RequestError: `"pool_stopped"`.
        """
        if type(prompt) is not str:
            raise TypeError(f"submit: prompt must be a str, got {type(prompt).__name__}")
        task = _Task(PoolRef(next(_task_ids)), prompt)
        with self._cond:
            if self._stopping:
                raise RequestError("pool_stopped")
            if not self._live:
                self._tasks[task.ref.id] = task
                self._settle(task, ("error", ("pool_down", "no_nodes")))
                return task.ref
            self._tasks[task.ref.id] = task
            self._queue.append(task)
            for lane in self._lanes:
                if self._sender_due(lane):
                    self._cond.notify_all()
                    break
        return task.ref

    def result(self, ref: PoolRef, timeout: float | None = None) -> Response:
        """Wait for the task's outcome and return its `Response`; each outcome is handed out
        once.

        Raises:
            TurnError: the task failed (see the class docstring). CallTimeout: no outcome
                within `timeout` seconds (the task goes on). LookupError: unknown ref, or
                already collected.
        """
        return collect_result(self._cond, self._tasks, ref, timeout)

    def map(self, prompts: Iterable[str], timeout: float | None = None) -> list[Response]:
        """Submit every prompt, then return their responses in order (as `Pool.map`).

        Raises:
            TypeError: `prompts` is a str, or holds a non-str (its index named; every prompt
                is checked before any task is submitted).
            TurnError: the first failed task, in order. CallTimeout: not done in time.
        """
        refs = [self.submit(prompt) for prompt in checked_prompts(prompts, "map")]
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            return [self.result(ref, None if deadline is None
                                else max(0.0, deadline - time.monotonic())) for ref in refs]
        finally:
            with self._cond:
                for ref in refs:
                    self._tasks.pop(ref.id, None)

    def status(self) -> dict[str, Any]:
        """`{"queued": n, "in_flight": {node: n}, "nodes": {node: "up" | "restarting" |
        "down"}}`, a point-in-time view."""
        with self._cond:
            return {
                "queued": len(self._queue),
                "in_flight": {lane.name: len(lane.in_flight) for lane in self._lanes},
                "nodes": {lane.name: "down" if lane.dead else ("up" if lane.open
                                                             else "restarting")
                          for lane in self._lanes},
            }

    def stop(self, timeout: float | None = 60.0) -> None:
        """Stop the pool: queued tasks fail with `("agent_terminated", "shutdown")`, each
        node's workers stop (its tasks in flight fail the same way and are collected),
        then the threads end. Idempotent.

        Raises:
            CallTimeout: not stopped within `timeout` seconds.
        """
        with self._cond:
            if self._stopping:
                already = True
            else:
                already = False
                self._stopping = True
                while self._queue:
                    self._settle(self._queue.popleft(),
                                 ("error", ("agent_terminated", "shutdown")))
                self._cond.notify_all()
        if not already:
            self._close_lanes()
        deadline = None if timeout is None else time.monotonic() + timeout
        for lane in self._lanes:
            for thread in (lane.sender, *lane.collectors):
                if thread is None or thread is threading.current_thread():
                    continue
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    raise CallTimeout(timeout)
        with self._cond:
            for lane in self._lanes:
                for task in lane.in_flight.values():
                    self._settle(task, ("error", ("agent_terminated", "shutdown")))
                lane.in_flight.clear()

    # ------------------------------------------------------------------ internals
    def _open_ref(self, lane: _NodeLane) -> Any:
        module, size, backend, max_in_flight, max_restarts, max_seconds = self._open_args
        return lane.actor.pool_open.remote(
            self.pool_id, module, size, backend, max_in_flight, max_restarts, max_seconds,
            f"{self.name_prefix}@{lane.name}", self._opts)

    def _opened(self, lane: _NodeLane, outcome: tuple[str, Any]) -> None:
        from gen_agent._portable import to_exception

        if outcome[0] != "ok":
            raise to_exception(outcome[1])
        with self._cond:
            lane.workers = list(outcome[1])
            lane.open = True
            self._cond.notify_all()

    def _close_lanes(self) -> None:
        refs = [(lane, lane.actor.pool_close.remote(self.pool_id))
                for lane in self._lanes if not lane.dead]
        for lane, ref in refs:
            try:
                _kind, outcomes = unpack_outcomes(ray.get(ref, timeout=60))
            except Exception as exc:  # noqa: BLE001 - a dead node has nothing to close
                logger.debug("gen_agent remote pool close: {}", type(exc).__name__)
                continue
            self._apply(lane, outcomes)

    def _apply(self, lane: _NodeLane, outcomes: list[tuple[int, Any]]) -> None:
        if not outcomes:
            return
        with self._cond:
            pop = lane.in_flight.pop
            for task_id, result in outcomes:
                task = pop(task_id, None)
                if task is not None and task.outcome is None:
                    task.outcome = result if result[0] == "ok" else (
                        "error", from_portable(result[1]))
                    task.done.set()
            self._cond.notify_all()

    def _settle(self, task: _Task, outcome: tuple[str, Any]) -> None:
        """Give `task` its one outcome (later ones are ignored). Caller holds the lock."""
        if task.outcome is not None:
            return
        task.outcome = outcome
        task.done.set()

    def _take_batch(self, lane: _NodeLane) -> list[_Task]:
        """Move as many queued tasks as `lane` has free slots into its in-flight set.
        Caller holds the lock."""
        if not lane.open or lane.dead:
            return []
        free = lane.capacity - len(lane.in_flight)
        batch = [self._queue.popleft() for _ in range(min(free, len(self._queue)))]
        for task in batch:
            lane.in_flight[task.ref.id] = task
            task.node = lane.name
        return batch

    def _not_taken(self, lane: _NodeLane, batch: list[_Task], epoch: int) -> None:
        # "gone": a restarted node that has not got our pool (or whose workers' supervisor
        # gave up) took none of them; they go back to the front of the queue.
        with self._cond:
            if lane.epoch == epoch:
                for task in reversed(batch):
                    if lane.in_flight.pop(task.ref.id, None) is task:
                        self._queue.appendleft(task)
            self._cond.notify_all()

    def _sender_due(self, lane: _NodeLane) -> bool:
        # Caller holds the lock. Only while every collector waits at the node: a collector
        # about to call hands out the queued tasks itself (one Ray call fewer).
        return (lane.open and bool(self._queue) and len(lane.in_flight) < lane.capacity
                and lane.polling == _COLLECTORS)

    def _send_loop(self, lane: _NodeLane) -> None:
        # Starts work while every collector waits in a long poll (a collector also hands
        # out tasks with each poll: one Ray call both submits and collects).
        while True:
            with self._cond:
                while not self._stopping and not lane.dead and not self._sender_due(lane):
                    self._cond.wait()
                if self._stopping or lane.dead:
                    return
                batch = self._take_batch(lane)
                epoch = lane.epoch
            try:
                kind, outcomes = unpack_outcomes(ray.get(lane.actor.pool_exchange_packed.remote(
                    pack((self.pool_id, [(task.ref.id, task.prompt) for task in batch], 0)))))
            except RayActorError:
                # The node died with the batch: it may have run some of it, so those tasks
                # count as in flight (never retried); the collector sees the death too.
                self._lost(lane, ("node_down", lane.name))
                continue
            self._apply(lane, outcomes)
            if kind != "ok":
                self._not_taken(lane, batch, epoch)
                with self._cond:
                    if lane.epoch == epoch:
                        lane.open = False

    def _collect_loop(self, lane: _NodeLane) -> None:
        while True:
            with self._cond:
                if self._stopping and not lane.in_flight:
                    return
                is_open = lane.open
                batch = [] if self._stopping else self._take_batch(lane)
                epoch = lane.epoch
                if is_open:
                    lane.polling += 1
                    if self._sender_due(lane):
                        self._cond.notify_all()
            if not is_open:
                if not self._reopen(lane):
                    return
                continue
            try:
                kind, outcomes = unpack_outcomes(ray.get(lane.actor.pool_exchange_packed.remote(
                    pack((self.pool_id, [(task.ref.id, task.prompt) for task in batch],
                          _COLLECT_WAIT_S)))))
            except RayActorError:
                self._lost(lane, ("node_down", lane.name))
                continue
            finally:
                with self._cond:
                    lane.polling -= 1
            self._apply(lane, outcomes)
            if kind != "ok":  # "gone": closed by stop(), a restarted node, or its workers'
                # supervisor gave up
                self._not_taken(lane, batch, epoch)
                with self._cond:
                    stopping = self._stopping
                self._lost(lane, ("agent_terminated", "shutdown") if stopping
                           else ("node_down", lane.name), worker_down=not stopping)
                continue

    def _lost(self, lane: _NodeLane, reason: Any, *, worker_down: bool = True) -> None:
        with self._cond:
            lane.epoch += 1
            lane.open = False
            for task in lane.in_flight.values():
                self._settle(task, ("error", ("worker_down", reason) if worker_down else reason))
            lane.in_flight.clear()
            self._cond.notify_all()

    def _reopen(self, lane: _NodeLane) -> bool:
        """Start the pool again on a restarted node; mark the lane dead if the node is down
        for good. Returns False when the collector should end."""
        while True:
            with self._cond:
                if self._stopping:
                    return False
            state = directory_call(self._directory, "node_status", lane.name)
            if state is None or state[0] == "down":
                with self._cond:
                    if not lane.dead:
                        lane.dead = True
                        self._live -= 1
                    if not self._live:
                        while self._queue:
                            self._settle(self._queue.popleft(),
                                         ("error", ("pool_down", "no_nodes")))
                    self._cond.notify_all()
                return False
            try:
                self._opened(lane, ray.get(self._open_ref(lane)))
                return True
            except RayActorError:
                time.sleep(_RETRY_S)  # restarting: Ray queues calls, this retries a failure
            except Exception as exc:  # noqa: BLE001 - a failed reopen is retried after a pause
                logger.warning("gen_agent remote pool reopen on a node failed: {}",
                               type(exc).__name__)
                time.sleep(_RETRY_S)

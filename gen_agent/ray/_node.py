"""A node: one Ray actor process hosting an `AgentSystem` and a `Supervisor` tree.

`NodeServer` is the actor's class. It is a *threaded* Ray actor (`max_concurrency` threads):
every remote call runs in one of Ray's threads and may block on an agent as a local caller
does, without stalling the other agents (an async actor would stall every agent on the node
on one blocking call). Ray restarts the process when it dies (`max_restarts=-1`: the restart
intensity is enforced here, against the directory's record of restart times, with OTP's
meaning); a prompt is never retried by Ray (`max_task_retries=0`).

At a restart the node first ends every process a previous incarnation left behind (found by
the `GEN_AGENT_RAY_NODE` variable they inherited, which every CLI gets whatever its `env`;
Linux `/proc`) and waits until they are gone (bounded by `_REAP_WAIT_S`), so a session is never
resumed beside its old CLI; then it starts its children again with their last provider
session ids (children whose spec says `resume_session=True`), and the children started later
with `gen_agent.ray.start_agent`. (A CLI's launcher normally ends its tree within
milliseconds of the node's death already: the reap covers what escaped it.)
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import pickle
import queue
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import msgspec
import ray
import ray.cloudpickle as cloudpickle
from loguru import logger

import gen_agent
from gen_agent._errors import AgentDown, AlreadyStarted, GenAgentError
from gen_agent._portable import PortableObject, to_portable
from gen_agent._reap import reap_marked, set_child_marker
from gen_agent._request_options import RequestOptions
from gen_agent._response import Response
from gen_agent._runtime import calls
from gen_agent._supervisor import ChildEvent, ChildSpec, Supervisor, child_spec, should_restart
from gen_agent._system import AgentSystem
from gen_agent.ray._directory import (
    INTENSITY_REASON,
    directory_call,
    get_directory,
    node_actor_name,
)
from gen_agent.ray._host_node import host_call

__all__ = ["NODE_ENV", "NodeServer", "node_actor_name", "pack", "pack_outcomes", "reap_orphans",
           "unpack", "unpack_outcomes", "unpack_reply"]

NODE_ENV = "GEN_AGENT_RAY_NODE"
# How long a restarted node waits for its previous incarnation's processes to end (seconds).
_REAP_WAIT_S = 10.0
# How often the node pushes changed session ids of idle agents to the directory (seconds);
# asks and streams push theirs before answering.
_SESSION_SCAN_S = 0.5
# A pool collect that has outcomes waits at most this long for a full batch (seconds).
_LINGER_S = 0.005


def _ok(value: Any) -> tuple[str, Any]:
    return ("ok", value)


def _error(exc: BaseException) -> tuple[str, Any]:
    return ("error", to_portable(exc))


class _Stream:
    __slots__ = ("items", "ref")

    def __init__(self) -> None:
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.ref: Any = None


class _Slot:
    __slots__ = ("handle", "in_flight", "name")

    def __init__(self, name: Any) -> None:
        self.name = name
        self.handle: Any = None  # the AgentHandle of the incarnation reported started
        self.in_flight: set[int] = set()  # task ids handed to (or reserved for) it


class _NodeWorkers:
    """The workers of one `RemotePool` on this node, without a dispatcher thread.

    `size` permanent workers under their own one_for_one `Supervisor` (its intensity is the
    pool's `max_restarts` / `max_seconds`). The Ray call that brings tasks hands them straight
    to the least loaded workers (`tell_with_completion`, at most `max_in_flight` each; all the
    tells of a batch are sent before any answer is awaited), and each worker's completion
    lands in the outbox from the worker's own thread; the next exchange takes the outbox.
    A task that finds no worker with room (one is restarting) waits here until one is started.
    Outcomes are those of a local `Pool`: the turn's own, `("worker_down", exit_reason)` for
    the tasks of a worker that ended, `("pool_down", reason)` once the supervisor gave up,
    `("agent_terminated", "shutdown")` once closed.
    """

    def __init__(self, system: AgentSystem, module: type, size: int, backend: Any,
                 max_in_flight: int, max_restarts: int, max_seconds: float, name_prefix: str,
                 opts: dict[str, Any]) -> None:
        self.cond = threading.Condition()
        self.outbox: list[tuple[int, tuple[str, Any]]] = []
        self.pending = 0  # tasks taken and not handed back yet
        self.queue: deque[tuple[int, str]] = deque()  # taken, waiting for a worker with room
        self.max_in_flight = max_in_flight
        self.down: Any = None  # the supervisor's exit reason once it gave up
        self.closing = False
        self.slots = [_Slot(f"{name_prefix}-{i}") for i in range(size)]
        # A reply goes back once this many outcomes are ready (or all that are pending, or
        # after `_LINGER_S`): the whole room, so each Ray call carries as many as it can.
        self.batch = size * max_in_flight
        self._by_name = {slot.name: slot for slot in self.slots}
        self._options = RequestOptions(fresh_session=True)
        worker_opts = {"shutdown_ms": 5_000, **opts}
        specs = []
        for slot in self.slots:
            slot_opts = worker_opts
            if slot_opts.get("session_key") is not None:  # one durable session per worker
                slot_opts = {**slot_opts,
                             "session_key": f"{slot_opts['session_key']}/{slot.name}"}
            specs.append(child_spec(module, name=slot.name, backend=backend,
                                    restart="permanent", **slot_opts))
        self.supervisor = Supervisor(
            specs, strategy="one_for_one", max_restarts=max_restarts, max_seconds=max_seconds,
            name=f"{name_prefix}-supervisor", listener=self._on_child, system=system)
        self.supervisor.on_exit(self._on_supervisor_exit)

    def workers(self) -> list[Any]:
        return [slot.name for slot in self.slots]

    # -- called by the supervisor and the workers (post only, never block) --
    def _post(self, task_id: int, outcome: tuple[str, Any]) -> None:
        # Caller holds the lock and has just taken `task_id` out of a slot or the queue.
        self.outbox.append((task_id, outcome))
        count = len(self.outbox)
        if count == 1 or count >= min(self.pending, self.batch):
            self.cond.notify_all()  # the first outcome, or enough for a reply to go back

    def _on_child(self, event: ChildEvent) -> None:
        with self.cond:
            slot = self._by_name.get(event.id)
            if slot is None:
                return
            if event.kind == "started":
                slot.handle = event.ref._handle
                self.cond.notify_all()  # a waiting exchange hands it the queued tasks
                return
            slot.handle = None
            # Exited is reported before the next incarnation starts, and tasks go only to an
            # incarnation reported started: every task in flight here was the one that ended.
            reason = (("agent_terminated", "shutdown") if self.closing
                      else ("worker_down", event.reason))
            for task_id in slot.in_flight:
                self._post(task_id, ("error", reason))
            slot.in_flight = set()

    def _on_supervisor_exit(self, _supervisor: Any, reason: Any) -> None:
        with self.cond:
            self.down = reason
            failure = (("agent_terminated", "shutdown") if self.closing
                       else ("pool_down", reason))
            for slot in self.slots:
                for task_id in slot.in_flight:
                    self._post(task_id, ("error", failure))
                slot.in_flight = set()
                slot.handle = None
            self._fail_queue(failure)
            self.cond.notify_all()

    def _completed(self, slot: _Slot, task_id: int, message: Any) -> None:
        # A worker's thread: post only.
        with self.cond:
            if task_id in slot.in_flight:
                slot.in_flight.discard(task_id)
                self._post(task_id, message.outcome)

    # -- called by the node's Ray call threads --
    def offer(self, tasks: list[tuple[int, str]]) -> None:
        """Take `tasks` (`(task_id, prompt)` pairs) and hand out what fits."""
        with self.cond:
            self.pending += len(tasks)
            if self.down is not None or self.closing:
                failure = (("agent_terminated", "shutdown") if self.closing
                           else ("pool_down", self.down))
                for task_id, _prompt in tasks:
                    self._post(task_id, ("error", failure))
                return
            self.queue.extend(tasks)
        self.dispatch()

    def _assign(self) -> list[tuple[_Slot, Any, int, str]]:
        # Caller holds the lock.
        picks = []
        limit = self.max_in_flight
        while self.queue:
            best = None
            for slot in self.slots:
                if slot.handle is not None and len(slot.in_flight) < limit and (
                        best is None or len(slot.in_flight) < len(best.in_flight)):
                    best = slot
            if best is None:
                break
            task_id, prompt = self.queue.popleft()
            best.in_flight.add(task_id)
            picks.append((best, best.handle, task_id, prompt))
        return picks

    def dispatch(self) -> None:
        """Hand queued tasks to workers with room: every tell is sent, then every answer read."""
        with self.cond:
            picks = self._assign()
        if not picks:
            return
        sent = []
        for slot, handle, task_id, prompt in picks:
            recipient = functools.partial(self._completed, slot, task_id)
            call = calls.tell(handle, prompt, None, recipient=recipient, completion=True,
                              on_halt="fail", options=self._options)
            sent.append((slot, handle, task_id, prompt, handle.request(call.make)))
        for slot, handle, task_id, prompt, reply in sent:
            try:
                outcome = reply.wait(None)
            except AgentDown:
                outcome = None  # that incarnation ended before taking it
            if outcome is not None and outcome[0] == "ok":
                continue
            with self.cond:
                if task_id not in slot.in_flight:
                    continue  # already failed by its worker's exit
                slot.in_flight.discard(task_id)
                if outcome is None:
                    if slot.handle is handle:
                        slot.handle = None  # known dead; its exited event follows
                    self.queue.appendleft((task_id, prompt))
                else:
                    self._post(task_id, ("error", outcome[1]))

    def collect(self, wait_s: float) -> list[tuple[int, tuple[str, Any]]]:
        """The outcomes settled since the last collect, waiting up to `wait_s` seconds for
        the first (handing queued tasks to a restarted worker meanwhile), then lingering
        up to `_LINGER_S` until `batch` outcomes (or all pending) are ready: one Ray call
        costs ~0.5 ms of CPU on each side, so a reply should carry many outcomes, while the
        caller's refill arrives as the other half still runs."""
        deadline = time.monotonic() + wait_s
        while wait_s > 0:
            with self.cond:
                runnable = bool(self.queue) and any(
                    slot.handle is not None and len(slot.in_flight) < self.max_in_flight
                    for slot in self.slots)
                if not runnable:
                    if self.outbox or self.down is not None or self.closing:
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self.cond.wait(remaining)
                    continue
            self.dispatch()
        with self.cond:
            if self.outbox and wait_s > 0:
                linger = time.monotonic() + _LINGER_S
                while len(self.outbox) < min(self.pending, self.batch) and self.down is None:
                    remaining = linger - time.monotonic()
                    if remaining <= 0:
                        break
                    self.cond.wait(remaining)
            return self._take_outbox()

    def close(self, timeout: float) -> list[tuple[int, tuple[str, Any]]]:
        """Stop the workers (their tasks fail with `("agent_terminated", "shutdown")`) and
        return every outcome not collected yet."""
        with self.cond:
            self.closing = True
        self.supervisor.stop(timeout)
        with self.cond:
            self._fail_queue(("agent_terminated", "shutdown"))
            self.cond.notify_all()
            return self._take_outbox()

    def _fail_queue(self, reason: Any) -> None:
        # Caller holds the lock: every task still waiting for a worker fails with `reason`.
        while self.queue:
            self._post(self.queue.popleft()[0], ("error", reason))

    def _take_outbox(self) -> list[tuple[int, tuple[str, Any]]]:
        # Caller holds the lock: the settled outcomes, handed back (no longer pending).
        ready, self.outbox = self.outbox, []
        self.pending -= len(ready)
        return ready


class NodeServer:
    """The node actor. Start it with `gen_agent.ray.start_node`, not directly.

    Args:
        node: the node's name (any hashable value; unique in the namespace).
        namespace: the cluster's Ray namespace.
        children: child specs (`child_spec` / `supervisor_spec`) started in order.
        strategy: the node supervisor's strategy.
        max_restarts: the node supervisor's restart intensity (count within max_seconds).
        max_seconds: its window in seconds.
        node_max_restarts: the node-level restart intensity: more than this many process
            restarts within `node_max_seconds` and the node stays down.
        node_max_seconds: the node-level window in seconds.
        budget: the node supervisor's spend cap (`Supervisor(budget=)`), or None.

    Mirrors: an OTP node running an application supervisor.
    """

    def __init__(self, node: Any, namespace: str, children: tuple[Any, ...], strategy: Any,
                 max_restarts: int, max_seconds: float, node_max_restarts: int,
                 node_max_seconds: float, budget: Any = None) -> None:
        self._node = node
        self._namespace = namespace
        self._start_error: Any = None
        self._streams: dict[int, _Stream] = {}
        self._stream_ids = itertools.count(1)
        self._pools: dict[Any, _NodeWorkers] = {}
        self._lock = threading.Lock()
        self._pushed: dict[Any, str] = {}
        self._stopping = threading.Event()
        self._directory = get_directory(namespace)
        reconstructed = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        marker = f"{namespace}/{node}"
        reaped = reap_orphans(marker)
        if reaped:
            logger.bind(gen_agent_node=node).warning(
                "gen_agent node reaped {} processes left by its previous incarnation", reaped)
        os.environ[NODE_ENV] = f"{marker}#{os.getpid()}"
        set_child_marker(NODE_ENV, os.environ[NODE_ENV])  # also with inherit_env=False
        ids = [spec.id for spec in children]
        record = directory_call(self._directory, "node_starting", node, ids, reconstructed,
                                node_max_restarts, node_max_seconds)
        if record["status"] == "down":
            logger.bind(gen_agent_node=node).error(
                "gen_agent node exceeded its restart intensity; it stays down")
            ray.actor.exit_actor()
        if record["status"] == "conflict":
            self._start_error = _already_started(record["name"], record["node"])
            self._system = AgentSystem()
            self._supervisor = None
            return
        sessions = record["sessions"]
        self._pushed = dict(sessions)
        dynamic = [cloudpickle.loads(data) for data in record["dynamic"].values()]
        removed = set(record["removed"])
        specs = [_with_session(spec, sessions) for spec in (*children, *dynamic)
                 if spec.id not in removed]
        self._system = AgentSystem()
        self._system.__enter__()  # the client functions of this process address it
        self._supervisor = None
        try:
            self._supervisor = Supervisor(
                specs, strategy=strategy, max_restarts=max_restarts, max_seconds=max_seconds,
                name=f"node:{node}", listener=self._on_child_event, system=self._system,
                budget=budget)
        except GenAgentError as exc:
            self._start_error = exc
            directory_call(self._directory, "node_down", node, "start_failed", True)
            return
        self._supervisor.on_exit(self._on_supervisor_exit)
        self._scanner = threading.Thread(target=self._scan_sessions, daemon=True,
                                         name="gen_agent-ray-sessions")
        self._scanner.start()

    # ------------------------------------------------------------------ lifecycle
    def ready(self) -> tuple[str, Any]:
        """`("ok", {"pid": int, "node": name})`, or `("error", portable start error)`."""
        if self._start_error is not None:
            return _error(self._start_error)
        return _ok({"pid": os.getpid(), "node": self._node})

    def shutdown(self) -> None:
        """Stop every child and pool (each within its window), forget the node in the
        directory, and end the actor process (Ray does not restart it)."""
        self._stopping.set()
        for entry in list(self._pools.values()):
            with contextlib.suppress(Exception):
                entry.close(30)
        if self._supervisor is not None:
            with contextlib.suppress(Exception):
                self._supervisor.stop(60)
        self._system.shutdown()
        with contextlib.suppress(Exception):
            directory_call(self._directory, "node_down", self._node, "shutdown", True)
        ray.actor.exit_actor()

    def _on_supervisor_exit(self, _supervisor: Any, reason: Any) -> None:
        if self._stopping.is_set() or reason != INTENSITY_REASON:
            return
        # The agent-level restarts gave up: escalate as OTP does, the node itself fails and
        # Ray restarts it (counted against the node's own intensity).
        logger.bind(gen_agent_node=self._node).error(
            "gen_agent node supervisor reached its restart intensity; restarting the node")
        os._exit(70)

    def _on_child_event(self, event: ChildEvent) -> None:
        # Supervisor thread: only post to the directory (a Ray call, not waited on).
        if event.kind != "exited" or self._stopping.is_set():
            return
        spec = self._spec_of(event.id)
        if spec is None or not should_restart(spec.restart, event.reason):
            self._directory.release.remote(event.id, self._node)

    def _spec_of(self, child_id: Any) -> Any:
        if self._supervisor is None:
            return None
        for info in self._supervisor._children:
            if info.spec.id == child_id:
                return info.spec
        return None

    def _scan_sessions(self) -> None:
        while not self._stopping.wait(_SESSION_SCAN_S):
            with contextlib.suppress(Exception):
                self._push_sessions(None)

    def _push_sessions(self, name: Any) -> None:
        agents = self._system._agents
        changed: dict[Any, str] = {}
        names = list(agents) if name is None else [name]
        with self._lock:
            for agent in names:
                handle = agents.get(agent)
                session_id = getattr(handle, "session_id", None)
                if isinstance(session_id, str) and self._pushed.get(agent) != session_id:
                    self._pushed[agent] = session_id
                    changed[agent] = session_id
        if not changed:
            return
        try:
            directory_call(self._directory, "set_sessions", self._node, changed)
        except Exception:
            with self._lock:  # not recorded: the next scan sends them again
                for agent, session_id in changed.items():
                    if self._pushed.get(agent) == session_id:
                        del self._pushed[agent]
            raise

    # ------------------------------------------------------------------ agents
    def start_child(self, spec: ChildSpec) -> tuple[str, Any]:
        """Claim `spec.id` in the directory and start the child under the node supervisor."""
        if self._supervisor is None:
            return _error(self._start_error or GenAgentError("node_not_started"))
        try:
            holder = directory_call(self._directory, "claim", spec.id, self._node)
        except Exception as exc:  # noqa: BLE001 - the directory's failure goes back as such
            return _error(exc)
        # This node as the holder with no such agent here: our own claim, sent twice while
        # the directory restarted.
        if holder is not None and not (holder == self._node
                                       and self._system.whereis(spec.id) is None):
            return _error(_already_started(spec.id, holder))
        try:
            self._supervisor.start_child(spec)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            self._directory.release.remote(spec.id, self._node)
            return _error(exc)
        if spec.restart != "temporary":
            with contextlib.suppress(Exception):  # started: a lost spec only skips a restore
                directory_call(self._directory, "add_dynamic", self._node, spec.id,
                               cloudpickle.dumps(spec))
        return _ok(None)

    def stop_child(self, name: Any) -> tuple[str, Any]:
        """Stop `name` for good (not restarted, not restored) and release its name."""
        try:
            if self._supervisor is not None and self._spec_of(name) is not None:
                self._supervisor.terminate_child(name)
                self._supervisor.delete_child(name)
            else:
                gen_agent.stop(name)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            return _error(exc)
        finally:
            # wait for the release: a caller's next lookup (whereis) must not find the name
            with contextlib.suppress(Exception):
                directory_call(self._directory, "release", name, self._node, timeout=30)
        return _ok(None)

    def call(self, op: str, name: Any, args: tuple[Any, ...]) -> tuple[str, Any]:
        """Run the client function `op` (`"ask"`, `"tell"`, `"poll"`, ...) on `name` here.

        Returns `("ok", value)` or `("error", portable exception)`.
        """
        try:
            if op == "ask":
                response = gen_agent.ask(name, *args)
                if isinstance(response.session_id, str) and \
                        self._pushed.get(name) != response.session_id:
                    with contextlib.suppress(Exception):  # the scan sends it again
                        self._push_sessions(name)
                return ("ok", response)
            if op == "whereis":
                return _ok(self._system.whereis(name) is not None)
            value = _OPS[op](name, *args)
            if op in ("status", "poll"):
                value = to_portable(value)
            return ("ok", value)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            return _error(exc)

    def call_packed(self, request: bytes) -> bytes:
        """`call` with the request `(op, name, args)` and the outcome as bytes: one bytes
        argument and a bytes result are Ray's cheapest call (see `pack`); read the result
        with `unpack_reply` (an ask's `Response` crosses as MessagePack when it can)."""
        op, name, args = unpack(request)
        outcome = self.call(op, name, args)
        if op == "ask" and outcome[0] == "ok":
            blob = _exact_responses([outcome[1]])
            if blob is not None:
                return _RESPONSE_TAG + blob
        return pack(outcome)

    def host_call_packed(self, request: bytes) -> bytes:
        """One operation `(op, host_name, key, args)` of a `gen_agent.ray.RayHost` on this
        node's part of it (`gen_agent.ray._host_node`), packed as `call_packed`'s."""
        outcome = host_call(self._system, *unpack(request))
        if outcome[0] == "ok" and isinstance(outcome[1], Response):
            blob = _exact_responses([outcome[1]])
            if blob is not None:
                return _RESPONSE_TAG + blob
        return pack(outcome)

    def list_local(self) -> list[Any]:
        """The agents registered on this node."""
        return self._system.list_agents()

    def info(self) -> dict[str, Any]:
        """`{"pid", "node", "agents"}` (count) and the process's resident memory in KiB."""
        rss_kib = 0
        with contextlib.suppress(OSError, ValueError):
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss_kib = int(line.split()[1])
        return {"pid": os.getpid(), "node": self._node,
                "agents": len(self._system.list_agents()), "rss_kib": rss_kib}

    # ------------------------------------------------------------------ streaming
    def stream_open(self, name: Any, prompt: str, timeout: float | None) -> tuple[str, Any]:
        """Start `prompt` as a turn on `name`, relaying its events; returns a stream id."""
        stream = _Stream()
        try:
            stream.ref = gen_agent.tell_with_completion(
                name, prompt, stream.items.put, stream_to=stream.items.put, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            return _error(exc)
        stream_id = next(self._stream_ids)
        with self._lock:
            self._streams[stream_id] = stream
        return _ok(stream_id)

    def stream_next(self, stream_id: int, wait_s: float, batch_ms: int) -> tuple[str, Any]:
        """The stream's next batch: `("ok", (events, done, outcome))`; waits up to `wait_s`
        for the first item, then gathers what arrives within `batch_ms`."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return _error(GenAgentError("unknown_stream"))
        events: list[Any] = []
        deadline: float | None = None
        while True:
            try:
                if deadline is None:
                    message = stream.items.get(timeout=wait_s)
                    deadline = time.monotonic() + batch_ms / 1000
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    message = stream.items.get(timeout=remaining)
            except queue.Empty:
                break
            if message[1] == "event":
                events.append(message[4])
                continue
            with self._lock:
                self._streams.pop(stream_id, None)
            outcome = message[4]
            if outcome[0] == "ok":
                name = message[2]
                if isinstance(outcome[1].session_id, str):
                    with contextlib.suppress(Exception):  # the scan sends it again
                        self._push_sessions(name)
            return _ok((events, True, to_portable(outcome)))
        return _ok((events, False, None))

    def stream_close(self, stream_id: int) -> None:
        """Forget a stream its caller abandoned (its turn goes on; its events are dropped)."""
        with self._lock:
            self._streams.pop(stream_id, None)

    # ------------------------------------------------------------------ pools
    def pool_open(self, pool_id: Any, module: type, size: int, backend: Any,
                  max_in_flight: int, max_restarts: int, max_seconds: float,
                  name_prefix: str, opts: dict[str, Any]) -> tuple[str, Any]:
        """Start (or find) the workers serving `pool_id`; returns their names."""
        with self._lock:
            entry = self._pools.get(pool_id)
        if entry is None:
            try:
                entry = _NodeWorkers(self._system, module, size, backend, max_in_flight,
                                     max_restarts, max_seconds, name_prefix, opts)
            except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
                return _error(exc)
            with self._lock:
                self._pools[pool_id] = entry
        return _ok(entry.workers())

    def pool_exchange_packed(self, request: bytes) -> bytes:
        """One exchange of a `RemotePool` with its workers here, packed (see `pack`).

        The request is `(pool_id, tasks, wait_s)`: `tasks` are `(task_id, prompt)` pairs to
        start (the caller sends no more than its workers have room for); then the outcomes
        settled since the previous exchange are collected, waiting up to `wait_s` seconds
        for the first (`wait_s` 0: no wait, a submit). The reply (`pack_outcomes`) carries
        `("ok", outcomes)`, or `("gone", outcomes)` when this incarnation does not run the
        pool (a restarted node) or its supervisor gave up: the offered tasks were not taken,
        and `outcomes` are the last ones.
        """
        pool_id, tasks, wait_s = unpack(request)
        entry = self._pools.get(pool_id)
        if entry is None:
            return pack_outcomes("gone", [])
        if entry.down is not None:
            # Its supervisor gave up (restart intensity): hand back the last outcomes and
            # drop it; the caller opens a new one.
            with self._lock:
                self._pools.pop(pool_id, None)
            return pack_outcomes("gone", entry.collect(0))
        if tasks:
            entry.offer(tasks)
        return pack_outcomes("ok", entry.collect(wait_s))

    def pool_close(self, pool_id: Any) -> bytes:
        """Stop the workers of `pool_id` (their unfinished tasks fail with
        `("agent_terminated", "shutdown")`) and return the outcomes not collected yet
        (packed as `pool_exchange_packed` replies)."""
        with self._lock:
            entry = self._pools.pop(pool_id, None)
        if entry is None:
            return pack_outcomes("ok", [])
        return pack_outcomes("ok", entry.close(30))


_RESPONSES = msgspec.msgpack.Encoder()
_RESPONSE_LIST = msgspec.msgpack.Decoder(list[Response])
# Marks a reply that is an ask's Response as MessagePack (pickles start with 0x80).
_RESPONSE_TAG = b"M"


def _already_started(name: Any, node: Any) -> AlreadyStarted:
    # The holder runs on `node` (maybe another process): its AgentRef in portable form, as a
    # local AlreadyStarted carries the AgentRef, with the node added.
    return AlreadyStarted(name, PortableObject("AgentRef", "gen_agent._agent_ref",
                                               {"name": name, "node": node}))


def pack_outcomes(kind: str, outcomes: list[tuple[int, tuple[str, Any]]]) -> bytes:
    """Pack `(task_id, ("ok", Response) | ("error", reason))` pairs for the caller.

    Responses cross as one MessagePack array (msgspec: several times cheaper than pickling
    each struct) when that array decodes back equal to them; otherwise (a `parsed` value, a
    tuple or a set in event data...) each is pickled. Reasons cross in portable form.
    Read it with `unpack_outcomes`.
    """
    ok_ids: list[int] = []
    responses: list[Any] = []
    others: list[tuple[int, tuple[str, Any]]] = []
    for task_id, outcome in outcomes:
        if outcome[0] == "ok":
            ok_ids.append(task_id)
            responses.append(outcome[1])
        else:
            others.append((task_id, ("error", to_portable(outcome[1]))))
    blob = b""
    if responses:
        exact = _exact_responses(responses)
        if exact is None:
            others.extend((task_id, ("ok", response))
                          for task_id, response in zip(ok_ids, responses, strict=True))
            ok_ids = []
        else:
            blob = exact
    return pack((kind, ok_ids, blob, others))


def _exact_responses(responses: list[Any]) -> bytes | None:
    """`responses` as one MessagePack array if it decodes back equal to them, else None."""
    try:
        blob = _RESPONSES.encode(responses)
        if _RESPONSE_LIST.decode(blob) == responses:
            return blob
    except (TypeError, ValueError, msgspec.MsgspecError):
        pass
    return None


def unpack_reply(data: bytes) -> Any:
    """The outcome `NodeServer.call_packed` (or any packed node method) returned."""
    if data[:1] == _RESPONSE_TAG:
        return ("ok", _RESPONSE_LIST.decode(memoryview(data)[1:])[0])
    return pickle.loads(data)


def unpack_outcomes(data: bytes) -> tuple[str, list[tuple[int, tuple[str, Any]]]]:
    """`(kind, [(task_id, ("ok", Response) | ("error", portable reason))])` from
    `pack_outcomes`."""
    kind, ok_ids, blob, others = unpack(data)
    if not ok_ids:
        return kind, others
    responses = _RESPONSE_LIST.decode(blob)
    return kind, [*((task_id, ("ok", response))
                    for task_id, response in zip(ok_ids, responses, strict=True)), *others]


def pack(value: Any) -> bytes:
    """Pickle `value` (protocol 5), with cloudpickle for what plain pickle refuses (classes
    pickled by value, lambdas)."""
    try:
        return pickle.dumps(value, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        return cloudpickle.dumps(value, protocol=5)


def unpack(data: bytes) -> Any:
    """The value `pack` pickled."""
    return pickle.loads(data)


def _with_session(spec: Any, sessions: dict[Any, str]) -> Any:
    session_id = sessions.get(spec.id)
    if not isinstance(spec, ChildSpec) or not spec.resume_session or session_id is None:
        return spec
    return msgspec.structs.replace(spec, opts={**spec.opts, "resume_session_id": session_id})


def _stop(name: Any) -> None:
    gen_agent.stop(name)


_OPS: dict[str, Any] = {
    "tell": gen_agent.tell,
    "poll": gen_agent.poll,
    "status": gen_agent.status,
    "interrupt": gen_agent.interrupt,
    "halt": gen_agent.halt,
    "resume": gen_agent.resume,
    "drain": gen_agent.drain,
    "notify": gen_agent.notify,
    "notify_ack": gen_agent.notify_ack,
    "reset_session": gen_agent.reset_session,
    "runtime_snapshot": gen_agent.runtime_snapshot,
    "stop": _stop,
}


def reap_orphans(marker: str, timeout: float = _REAP_WAIT_S) -> int:
    """End every process that inherited `GEN_AGENT_RAY_NODE=<marker>#pid` from an
    incarnation of this node other than the current process (CLI launchers end their whole
    tree; the rest are SIGKILLed) and wait up to `timeout` seconds until none is left.
    Linux only (`/proc`); elsewhere a no-op. Returns how many such processes there were."""
    prefix = f"{NODE_ENV}={marker}#".encode()
    own = f"{NODE_ENV}={marker}#{os.getpid()}".encode()
    return reap_marked(lambda env: any(item.startswith(prefix) and item != own for item in env),
                       timeout=timeout)


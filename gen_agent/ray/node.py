"""A node: one Ray actor process hosting an `AgentSystem` and a `Supervisor` tree.

`NodeServer` is the actor's class. It is a *threaded* Ray actor (`max_concurrency` threads):
every remote call runs in one of Ray's threads and may block on an agent as a local caller
does, without stalling the other agents (an async actor would stall every agent on the node
on one blocking call). Ray restarts the process when it dies (`max_restarts=-1`: the restart
intensity is enforced here, against the directory's record of restart times, with OTP's
meaning); a prompt is never retried by Ray (`max_task_retries=0`).

At a restart the node first kills the process groups of CLI children a previous incarnation
left behind (found by the `GEN_AGENT_RAY_NODE` variable they inherited; Linux `/proc`), then
starts its children again with their last provider session ids (children whose spec says
`resume_session=True`), and the children started later with `gen_agent.ray.start_agent`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import ray
import ray.cloudpickle as cloudpickle
from loguru import logger

import gen_agent
from gen_agent.errors import AlreadyStarted, GenAgentError
from gen_agent.pool import Pool
from gen_agent.portable import to_portable
from gen_agent.ray.directory import INTENSITY_REASON, get_directory
from gen_agent.supervisor import ChildEvent, ChildSpec, Supervisor, should_restart
from gen_agent.system import AgentSystem

__all__ = ["NODE_ENV", "NodeServer", "node_actor_name", "pack", "reap_orphans", "unpack"]

NODE_ENV = "GEN_AGENT_RAY_NODE"
# How often the node pushes changed session ids of idle agents to the directory (seconds);
# asks and streams push theirs before answering.
_SESSION_SCAN_S = 0.5
# A pool collect that has outcomes waits at most this long for the rest of its tasks (s).
_LINGER_S = 0.002


def node_actor_name(node: Any) -> str:
    """The Ray actor name of node `node` (in the cluster's namespace)."""
    return f"gen_agent.node:{node}"


def _ok(value: Any) -> tuple[str, Any]:
    return ("ok", value)


def _error(exc: BaseException) -> tuple[str, Any]:
    return ("error", to_portable(exc))


class _Stream:
    __slots__ = ("items", "ref")

    def __init__(self) -> None:
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.ref: Any = None


class _NodePool:
    """A local `Pool` on this node serving one `RemotePool`, with an outbox of outcomes."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.cond = threading.Condition()
        self.outbox: list[tuple[int, Any]] = []
        self.pending = 0  # submitted and not yet handed back

    def done(self, task_id: int, ref: Any) -> None:
        # A pool thread with the pool's lock held: post only.
        with self.cond:
            self.outbox.append((task_id, ref))
            self.cond.notify_all()


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

    Mirrors: an OTP node running an application supervisor.
    """

    def __init__(self, node: Any, namespace: str, children: tuple[Any, ...], strategy: Any,
                 max_restarts: int, max_seconds: float, node_max_restarts: int,
                 node_max_seconds: float) -> None:
        self._node = node
        self._namespace = namespace
        self._start_error: Any = None
        self._streams: dict[int, _Stream] = {}
        self._stream_ids = itertools.count(1)
        self._pools: dict[Any, _NodePool] = {}
        self._lock = threading.Lock()
        self._pushed: dict[Any, str] = {}
        self._stopping = threading.Event()
        self._directory = get_directory(namespace)
        reconstructed = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        marker = f"{namespace}/{node}"
        reaped = reap_orphans(marker)
        if reaped:
            logger.bind(gen_agent_node=node).warning(
                "gen_agent node reaped {} process groups left by its previous incarnation",
                reaped)
        os.environ[NODE_ENV] = f"{marker}#{os.getpid()}"
        ids = [spec.id for spec in children]
        record = ray.get(self._directory.node_starting.remote(
            node, ids, reconstructed, node_max_restarts, node_max_seconds))
        if record["status"] == "down":
            logger.bind(gen_agent_node=node).error(
                "gen_agent node exceeded its restart intensity; it stays down")
            ray.actor.exit_actor()
        if record["status"] == "conflict":
            self._start_error = AlreadyStarted(record["name"])
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
                name=f"node:{node}", listener=self._on_child_event, system=self._system)
        except GenAgentError as exc:
            self._start_error = exc
            ray.get(self._directory.node_down.remote(node, "start_failed", True))
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
                entry.pool.stop(30)
        if self._supervisor is not None:
            with contextlib.suppress(Exception):
                self._supervisor.stop(60)
        self._system.shutdown()
        with contextlib.suppress(Exception):
            ray.get(self._directory.node_down.remote(self._node, "shutdown", True))
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
                self._push_sessions(None, wait=False)

    def _push_sessions(self, name: Any, *, wait: bool) -> None:
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
        if changed:
            ref = self._directory.set_sessions.remote(self._node, changed)
            if wait:
                ray.get(ref)

    # ------------------------------------------------------------------ agents
    def start_child(self, spec: ChildSpec) -> tuple[str, Any]:
        """Claim `spec.id` in the directory and start the child under the node supervisor."""
        if self._supervisor is None:
            return _error(self._start_error or GenAgentError("node_not_started"))
        holder = ray.get(self._directory.claim.remote(spec.id, self._node))
        if holder is not None:
            return _error(AlreadyStarted(spec.id))
        try:
            self._supervisor.start_child(spec)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            self._directory.release.remote(spec.id, self._node)
            return _error(exc)
        if spec.restart != "temporary":
            self._directory.add_dynamic.remote(self._node, spec.id, cloudpickle.dumps(spec))
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
                ray.get(self._directory.release.remote(name, self._node), timeout=30)
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
                    self._push_sessions(name, wait=True)
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
        """`call` with the request `(op, name, args)` and the outcome as pickled bytes: one
        bytes argument and a bytes result are Ray's cheapest call (see `pack`)."""
        op, name, args = unpack(request)
        return pack(self.call(op, name, args))

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
                    self._push_sessions(name, wait=True)
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
        """Start (or find) the local `Pool` serving `pool_id`; returns its worker names."""
        with self._lock:
            entry = self._pools.get(pool_id)
        if entry is None:
            try:
                pool = Pool(module, size=size, backend=backend, name_prefix=name_prefix,
                            max_in_flight=max_in_flight, max_restarts=max_restarts,
                            max_seconds=max_seconds, system=self._system, **opts)
            except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
                return _error(exc)
            entry = _NodePool(pool)
            with self._lock:
                self._pools[pool_id] = entry
        return _ok(entry.pool.workers())

    def pool_submit(self, pool_id: Any, tasks: list[tuple[int, str]]) -> tuple[str, Any]:
        """Submit `(task_id, prompt)` pairs to the local pool. `("error", "unknown_pool")`
        when this incarnation does not run the pool (none of the tasks was taken)."""
        entry = self._pools.get(pool_id)
        if entry is not None and entry.pool.wait_stopped(0):
            # Its supervisor gave up (restart intensity): drop it; the caller reopens one.
            with self._lock:
                self._pools.pop(pool_id, None)
            entry = None
        if entry is None:
            return ("error", "unknown_pool")
        rejected = []
        for task_id, prompt in tasks:
            with entry.cond:
                entry.pending += 1
            try:
                entry.pool.submit(prompt, on_done=lambda ref, tid=task_id: entry.done(tid, ref))
            except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
                with entry.cond:
                    entry.pending -= 1
                rejected.append((task_id, ("error", to_portable(getattr(exc, "reason", exc)))))
        return _ok(rejected)

    def pool_collect(self, pool_id: Any, wait_s: float) -> tuple[str, Any]:
        """Outcomes settled since the last collect, `[(task_id, ("ok", response) |
        ("error", reason))]`, waiting up to `wait_s` for the first one."""
        entry = self._pools.get(pool_id)
        if entry is None:
            return ("error", "unknown_pool")
        with entry.cond:
            if not entry.outbox:
                entry.cond.wait(wait_s)
            if entry.outbox:
                # Linger briefly so that one reply carries the outcomes settling together,
                # but return once half of what is pending is done: the caller's refill then
                # arrives while the other half still runs, so the workers never drain.
                deadline = time.monotonic() + _LINGER_S
                while 2 * len(entry.outbox) < entry.pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    entry.cond.wait(remaining)
        return _ok(_take_outcomes(entry))

    def pool_exchange(self, pool_id: Any, tasks: list[tuple[int, str]],
                      wait_s: float) -> tuple[str, Any]:
        """`pool_submit` then `pool_collect` in one call: `("ok", (rejected, outcomes))`."""
        submitted = self.pool_submit(pool_id, tasks)
        if submitted[0] != "ok":
            return submitted
        collected = self.pool_collect(pool_id, wait_s)
        if collected[0] != "ok":
            return collected
        return _ok((submitted[1], collected[1]))

    def pool_exchange_packed(self, request: bytes) -> bytes:
        """`pool_exchange` with `(pool_id, tasks, wait_s)` and the outcome as pickled bytes."""
        return pack(self.pool_exchange(*unpack(request)))

    def pool_close(self, pool_id: Any) -> list[tuple[int, Any]]:
        """Stop the local pool of `pool_id` (its unfinished tasks fail as `Pool.stop` says)
        and return the outcomes not collected yet."""
        with self._lock:
            entry = self._pools.pop(pool_id, None)
        if entry is None:
            return []
        entry.pool.stop(30)
        with entry.cond:
            entry.cond.notify_all()
        return _take_outcomes(entry)


def _take_outcomes(entry: _NodePool) -> list[tuple[int, Any]]:
    with entry.cond:
        ready, entry.outbox = entry.outbox, []
        entry.pending -= len(ready)
    outcomes = []
    for task_id, ref in ready:
        try:
            outcomes.append((task_id, ("ok", entry.pool.result(ref, 0))))
        except GenAgentError as exc:
            outcomes.append((task_id, ("error", to_portable(exc.reason))))
    return outcomes


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


def reap_orphans(marker: str) -> int:
    """Kill the process groups of processes that inherited `GEN_AGENT_RAY_NODE=<marker>#pid`
    from an incarnation of this node other than the current process. Linux only (`/proc`);
    elsewhere a no-op. Returns how many process groups were killed."""
    prefix = f"{NODE_ENV}={marker}#".encode()
    own = f"{NODE_ENV}={marker}#{os.getpid()}".encode()
    killed: set[int] = set()
    proc = Path("/proc")
    if not proc.is_dir():
        return 0
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(item.startswith(prefix) and item != own for item in env):
            continue
        pid = int(entry.name)
        try:
            pgid = os.getpgid(pid)
            if pgid != os.getpgid(0) and pgid not in killed:
                os.killpg(pgid, signal.SIGKILL)
                killed.add(pgid)
            elif pgid == os.getpgid(0):
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    return len(killed)


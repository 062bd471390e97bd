"""The cluster-wide client: start nodes, start agents on them, and address agents by name.

Every function takes `namespace` (default `"gen_agent"`): the Ray namespace holding the
directory and the nodes. Names resolve through the directory; lookups are cached per process
and refreshed once when the cached node says the name is not there or the node is dead.

Errors keep their local meaning: a dead or restarting node is `AgentDown(("node_down",
node))` for the callers it leaves waiting (a prompt is never retried: it may have run), a
caller's own timeout is `CallTimeout`, and everything else is the exception type and reason a
local caller of `gen_agent.ask` (...) sees, rebuilt from its portable form
(`gen_agent._portable`). A foreign exception (an SDK's) stays a `PortableError` record inside
the reason.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
import ray
from ray.exceptions import (
    ActorAlreadyExistsError,
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    RayActorError,
)

from gen_agent._accounting import own_budget
from gen_agent._errors import AgentDown, AgentNotFound, CallTimeout, RequestError, TurnError
from gen_agent._portable import from_portable, to_exception
from gen_agent._response import Response
from gen_agent._runtime import calls
from gen_agent._supervisor import ChildSpec, SupervisorSpec, child_spec
from gen_agent._timers import wait_s
from gen_agent.ray._directory import (
    DIRECTORY_NAME,
    clear_stored,
    directory_call,
    get_directory,
)
from gen_agent.ray._node import NodeServer, node_actor_name, pack, unpack_reply

__all__ = [
    "DEFAULT_NAMESPACE",
    "Node",
    "ask",
    "drain",
    "drop_directory",
    "halt",
    "interrupt",
    "list_agents",
    "notify",
    "poll",
    "resume",
    "start_agent",
    "start_node",
    "status",
    "stop",
    "stop_node",
    "stream",
    "tell",
    "whereis",
]

DEFAULT_NAMESPACE = "gen_agent"
# A remote call waits this much longer than the caller's timeout, so that the node's own
# CallTimeout (the agent unaffected) normally arrives first.
_GRACE_S = 2.0
_NODE_READY_TIMEOUT_S = 120.0


class Node(msgspec.Struct, frozen=True):
    """A handle on a started node.

    Fields:
        name: the node's name.
        namespace: the cluster's Ray namespace.
        actor: the Ray actor handle (survives the node's restarts).
        pid: the process id of the incarnation that answered `start_node`.
    """

    name: Any
    namespace: str
    actor: Any
    pid: int

    def info(self, timeout: float | None = 30.0) -> dict[str, Any]:
        """`{"pid", "node", "agents", "rss_kib"}` of the running incarnation.

        Raises:
            AgentDown: `("node_down", name)` when the node is dead or restarting.
        """
        return _remote(self.name, self.actor.info.remote(), timeout)

    def wait_ready(self, timeout: float | None = 60.0) -> int:
        """Wait until the node answers (e.g. after Ray restarted it) and return the pid of
        the running incarnation.

        Raises:
            AgentDown: `("node_down", name)` when the node is dead for good.
            CallTimeout: it did not answer within `timeout` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise CallTimeout(timeout)
            try:
                outcome = ray.get(self.actor.ready.remote(), timeout=remaining)
            except GetTimeoutError:
                raise CallTimeout(timeout) from None
            except ActorUnavailableError:
                time.sleep(0.05)  # restarting: its calls fail until Ray has noticed
                continue
            except RayActorError:
                raise AgentDown(("node_down", self.name)) from None
            if outcome[0] != "ok":
                raise to_exception(outcome[1])
            return int(outcome[1]["pid"])

    def stop(self, timeout: float | None = 60.0) -> None:
        """Stop the node: see `stop_node`."""
        stop_node(self.name, namespace=self.namespace, timeout=timeout)


class _Cache:
    """Per-process lookups: name → node, node → actor handle; and the nodes this process
    started (`owned`: their creating handles, kept until `stop_node`, because Ray removes a
    node actor once no handle on it is left in its owner, the process that started it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: dict[tuple[str, Any], Any] = {}
        self.actors: dict[tuple[str, Any], Any] = {}
        self.directories: dict[str, Any] = {}
        self.owned: dict[tuple[str, Any], Any] = {}
        self.cluster: Any = None

    def check(self) -> None:
        """Drop every entry when this process is connected to another Ray than the one the
        entries came from (`ray.shutdown()` then `ray.init()`): its handles are void."""
        current = ray.get_runtime_context().get_node_id()
        if current != self.cluster:
            if self.cluster is not None:
                self.clear()
                self.owned.clear()
            self.cluster = current

    def directory(self, namespace: str) -> Any:
        self.check()
        handle = self.directories.get(namespace)
        if handle is None:
            handle = get_directory(namespace)
            self.directories[namespace] = handle
        return handle

    def call(self, namespace: str, method: str, *args: Any) -> Any:
        """A directory call that waits out its restart (`directory_call`); a directory
        that died for good (dropped) is replaced once by a fresh one."""
        try:
            return directory_call(self.directory(namespace), method, *args)
        except ActorDiedError:
            with self.lock:
                self.directories.pop(namespace, None)
            return directory_call(self.directory(namespace), method, *args)

    def forget(self, namespace: str, name: Any) -> None:
        self.names.pop((namespace, name), None)

    def forget_node(self, namespace: str, node: Any) -> None:
        """Drop the cached handle on `node` and every name cached as held by it."""
        with self.lock:
            self.actors.pop((namespace, node), None)
            for key in [key for key, holder in self.names.items()
                        if key[0] == namespace and holder == node]:
                del self.names[key]

    def forget_namespace(self, namespace: str) -> None:
        with self.lock:
            self.directories.pop(namespace, None)
            for table in (self.names, self.actors):
                for key in [key for key in table if key[0] == namespace]:
                    del table[key]

    def clear(self) -> None:
        with self.lock:
            self.names.clear()
            self.actors.clear()
            self.directories.clear()


_cache = _Cache()


def _actor(namespace: str, node: Any) -> Any:
    _cache.check()
    key = (namespace, node)
    handle = _cache.actors.get(key)
    if handle is None:
        handle = _live_actor(namespace, node)
        if handle is None:
            raise AgentDown(("node_down", node))
        _cache.actors[key] = handle
    return handle


def _live_actor(namespace: str, node: Any) -> Any:
    """A fresh handle on `node`'s actor, or None when Ray has none (it is dead for good:
    its starting process exited, or it was killed); the directory, which may still call it
    up, is then told, so that its names become free."""
    try:
        return ray.get_actor(node_actor_name(node), namespace=namespace)
    except ValueError:
        with contextlib.suppress(Exception):
            _cache.call(namespace, "node_gone", node)
        return None


def _resolve(namespace: str, name: Any, refresh: bool = False) -> Any:
    """The node holding `name`. Raises AgentNotFound / AgentDown(("node_down", node))."""
    key = (namespace, name)
    if not refresh:
        _cache.check()
        node = _cache.names.get(key)
        if node is not None:
            return node
    found = _cache.call(namespace, "lookup", name)
    if found is None:
        _cache.forget(namespace, name)
        raise AgentNotFound(name)
    node, state, _reason = found
    if state != "up":
        _cache.forget(namespace, name)
        raise AgentDown(("node_down", node))
    _cache.names[key] = node
    return node


def _remote(node: Any, object_ref: Any, timeout: float | None) -> Any:
    try:
        limit = wait_s(timeout)  # beyond threading.TIMEOUT_MAX: forever
        outcome = ray.get(object_ref, timeout=None if limit is None else limit + _GRACE_S)
        if type(outcome) is bytes:
            outcome = unpack_reply(outcome)
    except GetTimeoutError:
        raise CallTimeout(timeout) from None
    except RayActorError:
        raise AgentDown(("node_down", node)) from None
    if isinstance(outcome, tuple) and len(outcome) == 2 and outcome[0] in ("ok", "error"):
        if outcome[0] == "ok":
            return outcome[1]
        if isinstance(outcome[1], str):
            raise RequestError(outcome[1])
        raise to_exception(outcome[1])
    return outcome


def _call(op: str, name: Any, args: tuple[Any, ...], timeout: float | None,
          namespace: str) -> Any:
    node = _resolve(namespace, name)
    for attempt in (0, 1):
        actor = _actor(namespace, node)
        try:
            return _remote(node, actor.call_packed.remote(pack((op, name, args))), timeout)
        except AgentNotFound:
            # Nothing was sent to an agent: refresh once (it may live on another node now).
            if attempt:
                raise
            fresh = _resolve(namespace, name, refresh=True)
            if fresh == node:
                raise
            node = fresh
        except AgentDown as exc:
            if exc.reason == ("node_down", node):
                _cache.forget(namespace, name)
                if _cache.actors.pop((namespace, node), None) is not None:
                    _live_actor(namespace, node)  # restarting, or gone for good?
            raise
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------- nodes
def start_node(name: Any, children: Iterable[ChildSpec | SupervisorSpec] = (), *,
               strategy: str = "one_for_one", max_restarts: int = 3, max_seconds: float = 5.0,
               node_max_restarts: int = 3, node_max_seconds: float = 60.0,
               namespace: str = DEFAULT_NAMESPACE, max_concurrency: int = 128,
               ray_options: dict[str, Any] | None = None,
               timeout: float | None = _NODE_READY_TIMEOUT_S, budget: Any = None) -> Node:
    """Start a node: a Ray actor process hosting an `AgentSystem` and a `Supervisor` of
    `children`, registered in the cluster's directory.

    Args:
        name: the node's name, unique in `namespace` (any hashable, picklable value).
        children: child specs (`gen_agent.child_spec`, `supervisor_spec`), started in order;
            their ids are registered as cluster-wide names.
        strategy: the node supervisor's strategy, as for `gen_agent.Supervisor`.
        max_restarts: agent-level restart intensity: restarts (count) allowed within
            `max_seconds`, as for `gen_agent.Supervisor`; beyond it the node itself fails
            and restarts (default 3).
        max_seconds: the agent-level intensity window in seconds (default 5).
        node_max_restarts: the node-level restart intensity: more than this many process
            restarts within `node_max_seconds` and the node stays down (its names answer
            `AgentDown(("node_down", name))`). Default 3.
        node_max_seconds: the node-level intensity window in seconds (default 60).
        namespace: the cluster's Ray namespace (default `"gen_agent"`).
        max_concurrency: Ray threads serving the node's calls (default 128): calls waiting
            on agents (asks, streams) beyond it queue in Ray.
        ray_options: more Ray actor options (`num_cpus`, `resources`,
            `scheduling_strategy`, `runtime_env`...); `name`, `namespace`, `max_restarts`,
            `max_task_retries` and `max_concurrency` are owned by gen_agent.
        timeout: seconds to wait for the node and its children to start; default 120.
        budget: a spend cap over every agent of the node (its supervisor's `budget=`, see
            `gen_agent.Supervisor`): a `ClusterBudget` given to several nodes is one cap over
            all of them; once reached, their new turns are refused with
            `("budget_exceeded", BudgetExceeded)`. Default None.

    Returns:
        A `Node`. Keeping it is not needed: the node runs until `stop_node`, or until this
        process exits (it is the node's Ray owner, and Ray ends an actor with its owner).

    Raises:
        AlreadyStarted: a child's name is held by another live node (reason as for
            `start_agent`).
        AgentStartError: a child failed to start (as `gen_agent.Supervisor` raises it); the
            node is removed.
        ValueError: the node name is taken in the namespace, or `ray_options` sets an option
            gen_agent owns.
        CallTimeout: the node did not start within `timeout`.

    Mirrors: starting an OTP node with its application supervisor (the Ray "nodes").
    """
    options = dict(ray_options or {})
    owned = {"name", "namespace", "max_restarts", "max_task_retries", "max_concurrency",
             "lifetime"}
    if owned & options.keys():
        raise ValueError(f"ray_options must not set {sorted(owned & options.keys())}")
    options.setdefault("num_cpus", 0)
    specs = tuple(children)
    own_budget("start_node", budget, None, None)  # a TypeError here, not on the node
    actor_cls: Any = ray.remote(NodeServer)
    try:
        actor: Any = actor_cls.options(
            name=node_actor_name(name), namespace=namespace, max_restarts=-1,
            max_task_retries=0, max_concurrency=max_concurrency, **options,
        ).remote(name, namespace, specs, strategy, max_restarts, max_seconds,
                 node_max_restarts, node_max_seconds, budget)
    except ActorAlreadyExistsError:
        raise ValueError(f"start_node: a node named {name!r} runs in {namespace!r}") from None
    try:
        info = _remote(name, actor.ready.remote(), timeout)
    except BaseException:
        ray.kill(actor, no_restart=True)
        raise
    _cache.check()
    _cache.owned[(namespace, name)] = actor  # the node lives until stop_node, not the Node
    _cache.actors[(namespace, name)] = actor
    return Node(name, namespace, actor, info["pid"])


def stop_node(name: Any, *, namespace: str = DEFAULT_NAMESPACE,
              timeout: float | None = 60.0) -> None:
    """Stop node `name`: every child within its `shutdown_ms`, then the process (not
    restarted); its names are released. A no-op for an unknown or dead node.

    Args:
        name: the node's name. namespace: the cluster's namespace.
        timeout: seconds to wait for the process to end, then it is killed; default 60.

    Mirrors: `:init.stop/0` on an OTP node.
    """
    try:
        actor = ray.get_actor(node_actor_name(name), namespace=namespace)
    except ValueError:  # not running: release whatever the directory still has of it
        _cache.owned.pop((namespace, name), None)
        _forget_node(name, namespace)
        return
    ref: Any = actor.shutdown.remote()
    try:
        ray.get(ref, timeout=timeout)
    except RayActorError:
        pass  # the actor exited: what shutdown ends with
    except GetTimeoutError:
        pass
    ray.kill(actor, no_restart=True)  # a no-op when it exited; never restarted
    _wait_released(node_actor_name(name), namespace)
    _cache.owned.pop((namespace, name), None)
    _cache.forget_node(namespace, name)


# ---------------------------------------------------------------------------- agents
def start_agent(module: type, *, name: Any, backend: Any, node: Any,
                restart: str = "permanent", resume_session: bool | None = None,
                namespace: str = DEFAULT_NAMESPACE, timeout: float | None = 60.0,
                **opts: Any) -> Any:
    """Start an agent under node `node`'s supervisor, registered cluster-wide as `name`.

    Args:
        module: the `GenAgent` subclass (importable on the node, or pickled by value).
        name: the cluster-wide name.
        backend: the backend.
        **opts: as for `gen_agent.start_agent`: the reserved start options and those for
            `init_agent` (they must pickle).
        node: the node's name.
        restart: the child's restart type (default `"permanent"`; a non-temporary child is
            also restored when the node restarts).
        resume_session: restart (and restore) with the last provider session id seen;
            default: when the backend can resume (it has `resume_session`).
        namespace: the cluster's namespace. timeout: seconds to wait for the start.

    Returns:
        The node's name.

    Raises:
        AlreadyStarted: `name` is held by a live agent anywhere in the cluster; its reason
            is `("already_started", PortableObject)`, the holder's `AgentRef` in portable
            form with `attrs == {"name": name, "node": holder_node}`.
        AgentStartError: the start failed (`.reason` as for a local start, wrapped by the
            supervisor as `("failed_to_start_child", name, reason)`).
        AgentDown: `("node_down", node)`.

    Mirrors: `GenAgent.start_agent/2` plus `Supervisor.start_child/2` on a remote node.
    """
    if resume_session is None:
        resume_session = getattr(backend, "resume_session", None) is not None
    spec = child_spec(module, name=name, backend=backend, restart=restart,  # type: ignore[arg-type]
                      resume_session=resume_session, **opts)
    _remote(node, _actor(namespace, node).start_child.remote(spec), timeout)
    _cache.names[(namespace, name)] = node
    return node


def ask(name: Any, prompt: str, timeout: float | None = None, *,
        namespace: str = DEFAULT_NAMESPACE) -> Response:
    """Send `prompt` to the agent `name`, wherever it runs, and wait for its `Response`.

    Raises:
        TypeError: `prompt` is not a str (nothing is sent).
        AgentNotFound: no agent holds the name. AgentDown: the agent died while the call
            waited, or `("node_down", node)`. CallTimeout: no answer within `timeout` s.
        TurnError: as `gen_agent.ask` (the same reasons; foreign exceptions as
            `PortableError` records).

    Mirrors: `GenAgent.ask/3` across nodes.
    """
    calls.check_prompt(prompt, "ask")
    return _call("ask", name, (prompt, timeout), timeout, namespace)


def tell(name: Any, prompt: str, timeout: float | None = None, *,
         namespace: str = DEFAULT_NAMESPACE) -> Any:
    """Queue `prompt` on `name` and return its `RequestRef`; read it with `poll`.

    Raises: as `gen_agent.tell`, plus AgentDown(("node_down", node)).
    Mirrors: `GenAgent.tell/3` across nodes.
    """
    calls.check_prompt(prompt, "tell")
    return _call("tell", name, (prompt, timeout), timeout, namespace)


def poll(name: Any, ref: Any, timeout: float | None = None, *,
         namespace: str = DEFAULT_NAMESPACE) -> Any:
    """The `PollResult` of a tell request (reasons in portable form; gen_agent's own errors
    rebuilt). A missing agent answers `failed` / `"not_found"` as locally.

    Mirrors: `GenAgent.poll/3` across nodes.
    """
    try:
        return from_portable(_call("poll", name, (ref, timeout), timeout, namespace))
    except AgentNotFound:
        from gen_agent._status import PollResult

        return PollResult(status="failed", reason="not_found")


def status(name: Any, timeout: float | None = None, *,
           namespace: str = DEFAULT_NAMESPACE) -> Any:
    """The agent's `Status` (its `agent_state` in portable form). Mirrors `GenAgent.status/2`."""
    return _call("status", name, (timeout,), timeout, namespace)


def interrupt(name: Any, *, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Interrupt the agent's current turn. Mirrors `GenAgent.interrupt/1`."""
    _call("interrupt", name, (), None, namespace)


def halt(name: Any, *, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Halt the agent after its current turn. Mirrors `GenAgent.halt/1`."""
    _call("halt", name, (), None, namespace)


def resume(name: Any, *, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Resume a halted agent. Mirrors `GenAgent.resume/1`."""
    _call("resume", name, (), None, namespace)


def drain(name: Any, timeout: float | None = None, *,
          namespace: str = DEFAULT_NAMESPACE) -> None:
    """Drain the agent wherever it runs: finish the active turn, reject everything queued
    with "draining", then stop (as `gen_agent.drain`; `timeout` in seconds).

    The agent exits normally, so its node's supervisor treats it by its restart type: a
    `permanent` child is restarted at once (and the restart counts against the node
    supervisor's intensity), a `transient` or `temporary` one is not. Use `stop(name)` to end
    an agent for good.

    Raises:
        as `gen_agent.drain`; AgentDown: `("node_down", node)`.

    Mirrors: `GenAgent.drain/2`.
    """
    _call("drain", name, (timeout,), timeout, namespace)


def notify(name: Any, event: Any, *, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Deliver `event` to the agent's `handle_event`. Mirrors `GenAgent.notify/2`."""
    _call("notify", name, (event,), None, namespace)


def stop(name: Any, *, namespace: str = DEFAULT_NAMESPACE, timeout: float | None = 60.0) -> None:
    """Stop the agent for good: it is removed from its node's supervisor (not restarted, not
    restored) and its name released.

    Raises:
        AgentNotFound: no agent holds the name. AgentDown: `("node_down", node)`.

    Mirrors: `GenAgent.stop/1` (and `Supervisor.terminate_child/2`).
    """
    node = _resolve(namespace, name)
    try:
        _remote(node, _actor(namespace, node).stop_child.remote(name), timeout)
    finally:
        _cache.forget(namespace, name)


def whereis(name: Any, *, namespace: str = DEFAULT_NAMESPACE) -> Any:
    """The name of the node hosting `name`, or None (also for a down node). Asks the
    directory (not the cache). Mirrors `GenAgent.whereis/1` (a node name, not a pid)."""
    try:
        node = _resolve(namespace, name, refresh=True)
    except (AgentNotFound, AgentDown):
        return None
    if _live_actor(namespace, node) is None:
        _cache.forget(namespace, name)
        _cache.actors.pop((namespace, node), None)
        return None
    return node


def list_agents(*, namespace: str = DEFAULT_NAMESPACE) -> list[Any]:
    """Every name held by a live node of the cluster. Mirrors `GenAgent.list/0`."""
    return list(_cache.call(namespace, "list_agents"))


def stream(name: Any, prompt: str, timeout: float | None = None, *, batch_ms: int = 10,
           namespace: str = DEFAULT_NAMESPACE) -> Iterator[Any]:
    """Run `prompt` on `name` and yield its turn's events in order, then its `Response`.

    Events travel in batches: the node gathers what arrives within `batch_ms` milliseconds
    of the first pending event (default 10) into one Ray call.

    Args:
        name: the agent's name.
        prompt: the prompt (a str).
        timeout: seconds for the whole turn (None = forever).
        batch_ms: the batching window in milliseconds.
        namespace: the cluster's namespace.

    Yields:
        Each `Event` of the request's turns, then the `Response` (last).

    Raises:
        TurnError: the request failed (its reason as `ask` gives it). CallTimeout, AgentDown,
            AgentNotFound as `ask`.

    Mirrors: `tell_with_completion(..., stream_to=...)` across nodes.
    """
    calls.check_prompt(prompt, "stream")
    node = _resolve(namespace, name)
    actor = _actor(namespace, node)
    stream_id = _remote(node, actor.stream_open.remote(name, prompt, timeout), timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    done = False
    try:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise CallTimeout(timeout)
            wait_s = 1.0 if remaining is None else min(1.0, remaining)
            events, done, outcome = _remote(
                node, actor.stream_next.remote(stream_id, wait_s, batch_ms), wait_s + _GRACE_S)
            yield from events
            if done:
                kind, value = from_portable(outcome)
                if kind == "ok":
                    yield value
                    return
                raise TurnError(value)
    finally:
        if not done:  # abandoned, timed out or failed: the node forgets the stream
            actor.stream_close.remote(stream_id)


def _wait_released(actor_name: str, namespace: str, timeout: float = 30.0) -> None:
    # Ray releases a killed actor's name asynchronously: until it has, a lookup by that name
    # hands out the dead actor and a new actor cannot take the name.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get_actor(actor_name, namespace=namespace)
        except ValueError:
            return
        time.sleep(0.02)


def _forget_node(name: Any, namespace: str) -> None:
    # Only an existing directory: stopping an unknown node must not create one.
    try:
        ray.get_actor(DIRECTORY_NAME, namespace=namespace)
    except ValueError:
        return
    with contextlib.suppress(Exception):
        _cache.call(namespace, "node_down", name, "shutdown", True)
    _cache.forget_node(namespace, name)


def drop_directory(namespace: str = DEFAULT_NAMESPACE) -> None:
    """Remove the directory of `namespace` for good: its actor is killed (never restarted),
    its stored names, sessions and restart counts are deleted, and this process's cached
    lookups of the namespace are dropped (the next call creates a fresh, empty directory).
    Nodes still running in that namespace keep running but can no longer be found or
    restored: stop them first. Other processes' cached directory handles are replaced on
    their next call.

    Args:
        namespace: the Ray namespace of the gen_agent cluster.

    Mirrors: nothing in OTP (a `:global` registry ends with its nodes); the clean-up of
    the directory of this namespace.
    """
    try:
        actor = ray.get_actor(DIRECTORY_NAME, namespace=namespace)
    except ValueError:
        actor = None
    if actor is not None:
        ray.kill(actor, no_restart=True)
        _wait_released(DIRECTORY_NAME, namespace)
    clear_stored(namespace)
    _cache.forget_namespace(namespace)


def _forget_all() -> None:
    """Drop every cached lookup (tests; after `ray.shutdown`)."""
    _cache.clear()


"""`RayHost`: activation by key across the nodes of a Ray cluster, on one shared store.

    store = PostgresStore("postgresql://app@db.internal/app")
    host = gen_agent.ray.RayHost(Chat, backend=AnthropicAPI, nodes=["node-a", "node-b"],
                                 store=store, deactivate_after_ms=60_000)
    host.ask("user-42", "Hello")    # activates user-42 on its node, resumed from the store

Each node runs an `AgentHost` of its own for this host (opened by the first call that reaches
the node, again after the node restarted); the key's agent lives on one of them.

Placement. A key's node is chosen by rendezvous (highest random weight) hashing of the key
over the host's nodes, in the same order in every process: adding or losing a node moves only
that node's share of the keys, and no per-key table is kept anywhere. The nodes' liveness is
the directory's and Ray's: a node whose actor is gone, restarting, or that failed a call is
held off for `down_hold_s` (then probed with a `ready` call before it gets a message again)
and its keys go to their next node in the key's order, on their next message (the message
in flight when a node died fails with `AgentDown(("node_down", node))` and is not re-sent:
it may have run).

One live activation per key, cluster-wide: the store's lease. A node asked to activate a key
whose lease another live owner holds (its agent lives on another node: the key moved while
its first node was down and is not deactivated there yet) answers `session_leased`, and the
message goes to the key's next node; the node that activated a key is remembered per process
as a hint, so later messages go straight there. A dead owner's lease (its node process died)
is taken over at once on the same machine, after `lease_ttl_s` from another machine; the new
owner reports the turn the dead one had running, once, as an `InterruptedTurn` to
`handle_info`.

The store must be one every node reaches: a `PostgresStore` (a `SQLiteStore` only when every
node runs on one machine); a `MemoryStore` is refused.

Mirrors: nothing in the Elixir original (Orleans' virtual actors over a silo cluster).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from typing import Any

import ray
import ray.cloudpickle as cloudpickle
from ray.exceptions import GetTimeoutError, RayActorError

from gen_agent._errors import AgentDown, AgentStartError, CallTimeout, RequestError
from gen_agent._host import HostStatus
from gen_agent._portable import from_portable, to_exception
from gen_agent._request_ref import RequestRef
from gen_agent._response import Response
from gen_agent._status import PollResult
from gen_agent._timers import wait_s
from gen_agent.ray._client import DEFAULT_NAMESPACE, _actor, _cache, _live_actor
from gen_agent.ray._host_node import NO_HOST
from gen_agent.ray._node import pack, unpack_reply
from gen_agent.store import MemoryStore

__all__ = ["RayHost"]

_IDS = itertools.count(1)
_GRACE_S = 2.0  # a remote call waits this much longer than the caller's timeout
_MAX_HINTS = 100_000
_PROBE_S = 5.0  # how long a node that failed may take to answer its probe (seconds)


# ---------------------------------------------------------------------- caller side
class _NotDelivered(Exception):
    """The operation reached no agent (no actor, a restarting one, no host): try elsewhere."""


class RayHost:
    """Agents of one class addressed by key over several Ray nodes (see the module
    docstring). Thread-safe; use it from any process connected to the cluster.

    Args:
        module: the `GenAgent` subclass (importable on the nodes, or pickled by value).
        backend: its backend.
        nodes: the names of the nodes (started with `gen_agent.ray.start_node`) the host
            spans, in any order (placement does not depend on it).
        store: the session store every node shares (`PostgresStore`; `SQLiteStore` when
            all nodes are on one machine). A `MemoryStore` is refused.
        name: the host's name (on every node); default `"ray-host-<n>"`.
        namespace: the cluster's Ray namespace.
        down_hold_s: how long a node that failed is passed over before it is tried again
            (seconds, default 5.0).
        **host_options: every other `AgentHost` argument (`deactivate_after_ms`, `max_live`
            per node, spend caps per node, and the agents' start options); they must pickle.

    Raises:
        ValueError: no nodes, a repeated node, or a store the nodes cannot share.
        TypeError: the module, backend or options do not pickle.
        GenAgentError (and its subclasses): opening the host on a node failed there (a
            module the node cannot import, a store it cannot reach), rebuilt from its
            portable form.
    """

    def __init__(self, module: type, *, backend: Any, nodes: list[Any], store: Any,
                 name: Any = None, namespace: str = DEFAULT_NAMESPACE,
                 down_hold_s: float = 5.0, **host_options: Any) -> None:
        members = list(nodes)
        if not members or len(set(members)) != len(members):
            raise ValueError(f"RayHost needs one or more distinct nodes, got {members!r}")
        if store is None or isinstance(store, MemoryStore):
            raise ValueError("RayHost needs a store every node reaches (PostgresStore, or a "
                             "SQLiteStore when every node runs on one machine)")
        if "agent_system" in host_options:
            raise ValueError("RayHost: each node's system is used; drop agent_system")
        self.module, self.backend, self.store = module, backend, store
        self.nodes = tuple(members)
        self.name = name if name is not None else f"ray-host-{next(_IDS)}"
        self.namespace = namespace
        self.down_hold_s = float(down_hold_s)
        try:
            # cloudpickle, as Ray sends a child spec: a class registered to be pickled by
            # value (a script's) travels as its code.
            self._spec = cloudpickle.dumps((module, backend, {"store": store, **host_options}))
        except Exception as exc:  # noqa: BLE001 - whatever pickling raises
            raise TypeError(f"RayHost: the module, backend and options must pickle "
                            f"({type(exc).__name__})") from None
        self._weights = {node: repr(node).encode() for node in self.nodes}
        self._lock = threading.Lock()
        self._down: dict[Any, float] = {}  # node -> monotonic time it may be tried again
        self._hints: dict[str, Any] = {}  # key -> the node that last activated it here
        self._open_all()

    def _open_all(self) -> None:
        """Open the host on every node at once (each imports the agent's modules and opens
        its store connection in parallel); a node that cannot be reached is held off and
        opened by its first message later. A failed open (a module the nodes cannot
        import, a store they cannot reach) is raised."""
        request = pack(("open", self.name, None, (self._spec,)))
        sent = []
        for node in self.nodes:
            try:
                sent.append((node, _actor(self.namespace, node).host_call_packed.remote(
                    request)))
            except AgentDown:
                self._mark_down(node)
        for node, ref in sent:
            try:
                outcome = unpack_reply(ray.get(ref, timeout=120))
            except (GetTimeoutError, RayActorError):
                self._mark_down(node)
                continue
            if outcome[0] != "ok":
                self.close()
                raise to_exception(outcome[1])

    def __repr__(self) -> str:
        return f"RayHost({self.module.__name__}, name={self.name!r}, nodes={self.nodes!r})"

    # ------------------------------------------------------------------ placement
    def preference(self, key: str) -> list[Any]:
        """The key's nodes in rendezvous order (first: where it goes while all are up)."""
        encoded = key.encode("utf-8", "surrogatepass")

        def weight(node: Any) -> bytes:
            return hashlib.blake2b(self._weights[node] + b"\0" + encoded,
                                   digest_size=8).digest()

        return sorted(self.nodes, key=weight, reverse=True)

    def node_of(self, key: str) -> Any:
        """The node the key's next message goes to first (from this process's view)."""
        return self._candidates(key)[0]

    def _candidates(self, key: str) -> list[Any]:
        order = self.preference(key)
        now = time.monotonic()
        with self._lock:
            hint = self._hints.get(key)
            down = {node for node, until in self._down.items() if until > now}
        if hint in order:
            order.remove(hint)
            order.insert(0, hint)
        up = [node for node in order if node not in down]
        return up + [node for node in order if node in down]  # held off: tried last

    def _mark_down(self, node: Any) -> None:
        with self._lock:
            self._down[node] = time.monotonic() + self.down_hold_s
            for key in [key for key, hinted in self._hints.items() if hinted == node]:
                del self._hints[key]

    def _placed(self, key: str, node: Any, first: Any) -> None:
        with self._lock:
            self._down.pop(node, None)
            if node == first:
                self._hints.pop(key, None)
            else:
                if len(self._hints) >= _MAX_HINTS:
                    self._hints.pop(next(iter(self._hints)))
                self._hints[key] = node

    # ------------------------------------------------------------------ transport
    def _send(self, node: Any, op: str, key: Any, args: tuple[Any, ...],
              timeout: float | None) -> Any:
        """One operation on `node`'s host, opening the host there when it has none.

        Raises:
            _NotDelivered: no agent was reached (the node has no actor or is restarting).
            AgentDown: `("node_down", node)`: the node died with the call in flight.
        """
        if node in self._down:
            self._probe(node)
        request = pack((op, self.name, key, args))
        for _attempt in range(2):
            outcome = self._remote(node, request, timeout)
            if outcome != NO_HOST:
                break
            opened = self._remote(node, pack(("open", self.name, None, (self._spec,))), 60.0)
            if opened[0] != "ok":
                raise to_exception(opened[1])
        else:
            raise _NotDelivered(node)
        if outcome[0] == "ok":
            return outcome[1]
        if isinstance(outcome[1], str):
            raise RequestError(outcome[1])
        raise to_exception(outcome[1])

    def _remote(self, node: Any, request: bytes, timeout: float | None) -> Any:
        try:
            actor = _actor(self.namespace, node)
        except AgentDown:
            raise _NotDelivered(node) from None
        limit = wait_s(timeout)
        try:
            data = ray.get(actor.host_call_packed.remote(request),
                           timeout=None if limit is None else limit + _GRACE_S)
        except GetTimeoutError:
            raise CallTimeout(timeout) from None
        except RayActorError:
            # Dead or restarting with the call sent: it may have run (Ray says so of
            # ActorUnavailableError too), so it fails and is not sent elsewhere. A fresh
            # lookup next time, which also tells the directory of an actor gone for good.
            _cache.actors.pop((self.namespace, node), None)
            _live_actor(self.namespace, node)
            raise AgentDown(("node_down", node)) from None
        return unpack_reply(data)

    def _probe(self, node: Any) -> None:
        """Before a node that failed gets a message again: its `ready` answers, or
        `_NotDelivered` (nothing but the probe was sent)."""
        try:
            actor = _actor(self.namespace, node)
            outcome = ray.get(actor.ready.remote(), timeout=_PROBE_S)
        except (AgentDown, GetTimeoutError, RayActorError):
            _cache.actors.pop((self.namespace, node), None)
            raise _NotDelivered(node) from None
        if outcome[0] != "ok":
            raise _NotDelivered(node)
        with self._lock:
            self._down.pop(node, None)

    def _activating(self, op: str, key: str, args: tuple[Any, ...],
                    timeout: float | None) -> Any:
        """`op` on the key's node, activating it there; on to the next node when a node
        cannot be reached before anything was sent, or refuses the key's lease."""
        if not (isinstance(key, str) and key):
            raise TypeError(f"RayHost: a key is a non-empty str, got {type(key).__name__}")
        candidates = self._candidates(key)
        first = self.preference(key)[0]
        last: BaseException | None = None
        for node in candidates:
            try:
                value = self._send(node, op, key, args, timeout)
            except _NotDelivered:
                self._mark_down(node)
                continue
            except AgentDown as exc:
                if exc.reason == ("node_down", node):
                    self._mark_down(node)
                raise
            except AgentStartError as exc:
                if not (isinstance(exc.reason, tuple) and exc.reason[:1] == ("session_leased",)):
                    raise
                last = exc  # its agent lives on another node: try the next one
                continue
            self._placed(key, node, first)
            return value
        if last is not None:
            raise last
        raise AgentDown(("node_down", candidates[0]))

    def _located(self, op: str, key: str, args: tuple[Any, ...],
                 timeout: float | None) -> Any:
        """`op` (never activating) on the node where `key` lives now, as far as this
        process knows (its hint, else the first reachable node in its order)."""
        for node in self._candidates(key):
            try:
                return self._send(node, op, key, args, timeout)
            except _NotDelivered:
                self._mark_down(node)
        raise AgentDown(("node_down", self.preference(key)[0]))

    # ------------------------------------------------------------------ calls
    def ask(self, key: str, prompt: str, timeout: float | None = None) -> Response:
        """`AgentHost.ask` on the key's node (activating it there).

        Raises: as `AgentHost.ask`; `AgentDown(("node_down", node))` when the node died
        with the call in flight (not re-sent: it may have run); `AgentStartError(
        ("session_leased", ...))` when every node refused the key's lease.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"ask: prompt must be a str, got {type(prompt).__name__}")
        return self._activating("ask", key, (prompt, timeout), timeout)  # type: ignore[no-any-return]

    def tell(self, key: str, prompt: str, timeout: float | None = None) -> RequestRef:
        """`AgentHost.tell` on the key's node (activating it); read it with `poll`."""
        if not isinstance(prompt, str):
            raise TypeError(f"tell: prompt must be a str, got {type(prompt).__name__}")
        return self._activating("tell", key, (prompt, timeout), timeout)  # type: ignore[no-any-return]

    def notify(self, key: str, event: Any) -> None:
        """`AgentHost.notify` on the key's node (activating it)."""
        self._activating("notify", key, (event,), None)

    def poll(self, key: str, ref: RequestRef, timeout: float | None = None) -> PollResult:
        """`AgentHost.poll` where the key lives (never activates)."""
        return from_portable(self._located("poll", key, (ref, timeout), timeout))  # type: ignore[no-any-return]

    def status(self, key: str, timeout: float | None = None) -> Any:
        """The key's live agent's `Status` (its `agent_state` in portable form), else its
        stored `SessionRecord` (None: none). Never activates."""
        return self._located("status", key, (timeout,), timeout)

    def send(self, key: str, message: Any) -> None:
        """`AgentHost.send` to the key's live agent (nothing when none)."""
        self._located("send", key, (message,), None)

    def interrupt(self, key: str) -> None:
        """`AgentHost.interrupt` of the key's live agent; never activates."""
        self._located("interrupt", key, (), None)

    def halt(self, key: str) -> None:
        """`AgentHost.halt` of the key's live agent; never activates."""
        self._located("halt", key, (), None)

    def resume(self, key: str) -> None:
        """`AgentHost.resume` of the key's live agent; never activates."""
        self._located("resume", key, (), None)

    def deactivate(self, key: str) -> bool:
        """`AgentHost.deactivate` where the key lives: True if its agent was live with
        nothing pending and is stopped now."""
        return bool(self._located("deactivate", key, (), None))

    def forget(self, key: str) -> bool:
        """Stop the key's live agent (wherever this process knows it) and delete its
        record. True if a record existed."""
        return bool(self._located("forget", key, (), None))

    def live_keys(self) -> dict[Any, list[str]]:
        """The live keys of each reachable node (point in time)."""
        return {node: keys for node, keys in self._each("live_keys").items()}

    def host_status(self) -> dict[Any, HostStatus]:
        """Each reachable node's `HostStatus` (counts)."""
        return self._each("host_status")

    def _each(self, op: str) -> dict[Any, Any]:
        found = {}
        for node in self.nodes:
            try:
                found[node] = self._send(node, op, None, (), 30.0)
            except (_NotDelivered, AgentDown):
                continue
        return found

    def close(self) -> None:
        """Close the host on every reachable node (their agents stop; the records stay)."""
        for node in self.nodes:
            try:
                self._remote(node, pack(("close", self.name, None, ())), 60.0)
            except (_NotDelivered, AgentDown, CallTimeout):
                continue

    def __enter__(self) -> RayHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

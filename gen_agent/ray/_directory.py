"""The cluster's directory: which node hosts which agent, and what each node must restore.

One detached, named Ray actor per namespace (`gen_agent.directory` in it). Its methods run
one at a time (a plain Ray actor), so claiming a name is atomic across the cluster. It also
keeps, per node, what a restarted node needs: the provider session id last seen for each
child, the specs of children started after the node (`start_agent`), and the node's restart
times, against which gen_agent enforces the node-level restart intensity (restarts within a
window, as OTP counts them; Ray's own `max_restarts` counts a lifetime).

Every change is written through, before the method returns, to Ray's GCS key-value store
(the place Ray Serve's controller keeps its own checkpoint), and Ray restarts the directory
when its process dies: the new incarnation reads everything back, so names, sessions and
restart counts outlive it. A call in flight when it died fails (`RayActorError`: never
retried, since a claim is not idempotent); later calls wait for the restart. The store lives
as long as the Ray cluster (its GCS); `gen_agent.ray.drop_directory` clears it.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Hashable
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError
from ray.experimental import internal_kv

__all__ = ["DIRECTORY_NAME", "DirectoryServer", "clear_stored", "directory_call",
           "get_directory", "node_actor_name"]

DIRECTORY_NAME = "gen_agent.directory"
INTENSITY_REASON = ("shutdown", "reached_max_restart_intensity")
# The record reason of a node found gone while marked up: its actor was removed without a
# word to the directory (the process that started it exited, or it was killed for good).
NOT_RUNNING = "not_running"
_RESTART_POLL_S = 0.05


def node_actor_name(node: Any) -> str:
    """The Ray actor name of node `node` (in the cluster's namespace)."""
    return f"gen_agent.node:{node}"


def directory_call(directory: Any, method: str, *args: Any,
                   timeout: float | None = 60.0) -> Any:
    """`ray.get(directory.<method>.remote(*args))`, waiting out a restart of the directory.

    Ray refuses a call to an actor it knows is restarting (`ActorUnavailableError`); such a
    call is sent again every 50 ms until the directory is back or `timeout` seconds have
    passed. Every directory method may be sent twice: reads and most writes are idempotent;
    a repeated `claim` by the same node answers that node (callers check), a repeated
    `node_starting` of a restarted node may count that restart twice.

    Raises:
        ActorUnavailableError: still restarting after `timeout`. RayActorError: the
            directory died for good (dropped) or died with this call in flight.
        GetTimeoutError: no answer within `timeout`.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return ray.get(getattr(directory, method).remote(*args), timeout=remaining)
        except ActorUnavailableError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            time.sleep(_RESTART_POLL_S)

# Journal key kinds: a node's record, a name claimed after its node started, a child's
# session id, a dynamic child's spec. A node's own children are in its record (one write
# for a node of 20,000 children); a child's keys start with its node's, so forgetting a
# node deletes them by prefix.
_NODE, _NAME, _SESSION, _DYNAMIC = b"m", b"n", b"s", b"d"


def _pickled(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=5)


class _Journal:
    """The directory's write-through copy in the GCS key-value store of the Ray cluster.

    In the KV namespace `gen_agent.directory/<namespace>`, a key is a kind byte and the
    pickled node or name; a child's key is its kind byte, its node's pickle (length first)
    and the child's pickle. Values are pickled. The key bytes each object was stored under
    are remembered (and read back on load), so deletes hit them even for a name whose pickle
    is not stable across processes, and a delete of a key never written costs no call.
    """

    def __init__(self, namespace: str) -> None:
        self._kv_namespace = f"{DIRECTORY_NAME}/{namespace}"
        self._keys: dict[tuple[bytes, Hashable], bytes] = {}
        self._node_keys: dict[Hashable, set[bytes]] = {}  # node -> its pickles seen

    def _node_part(self, node: Hashable) -> bytes:
        pickled = _pickled(node)
        part = len(pickled).to_bytes(4, "big") + pickled
        self._node_keys.setdefault(node, set()).add(part)
        return part

    def _key(self, kind: bytes, obj: Any) -> bytes:
        key = self._keys.get((kind, obj))
        if key is None:
            if kind in (_SESSION, _DYNAMIC):
                node, child = obj
                key = kind + self._node_part(node) + _pickled(child)
            else:
                key = kind + _pickled(obj)
            self._keys[(kind, obj)] = key
        return key

    def put(self, kind: bytes, obj: Hashable, value: Any) -> None:
        internal_kv._internal_kv_put(self._key(kind, obj), _pickled(value), overwrite=True,
                                     namespace=self._kv_namespace)

    def delete(self, kind: bytes, obj: Hashable) -> None:
        key = self._keys.pop((kind, obj), None)
        if key is not None:
            internal_kv._internal_kv_del(key, namespace=self._kv_namespace)

    def delete_children(self, node: Hashable) -> None:
        """Every session and dynamic spec stored for `node`'s children."""
        for part in self._node_keys.pop(node, ()):
            for kind in (_SESSION, _DYNAMIC):
                internal_kv._internal_kv_del(kind + part, del_by_prefix=True,
                                             namespace=self._kv_namespace)
        children = [key for key in self._keys
                    if key[0] in (_SESSION, _DYNAMIC) and key[1][0] == node]  # type: ignore[index]
        for key in children:
            del self._keys[key]

    def load(self) -> dict[bytes, list[tuple[Any, Any]]]:
        """Every stored entry, by kind: `{kind: [(obj, value), ...]}` (a child's obj is
        `(node, child)`)."""
        keys = internal_kv._internal_kv_list(b"", namespace=self._kv_namespace)
        if not keys:
            return {}
        values = internal_kv.internal_kv_get_gcs_client().internal_kv_multi_get(
            keys, self._kv_namespace)
        out: dict[bytes, list[tuple[Any, Any]]] = {}
        for key, value in values.items():
            kind, rest = key[:1], key[1:]
            if kind in (_SESSION, _DYNAMIC):
                size = int.from_bytes(rest[:4], "big")
                node = pickle.loads(rest[4:4 + size])
                obj: Any = (node, pickle.loads(rest[4 + size:]))
                self._node_keys.setdefault(node, set()).add(rest[:4 + size])
            else:
                obj = pickle.loads(rest)
            self._keys[(kind, obj)] = key
            out.setdefault(kind, []).append((obj, pickle.loads(value)))
        return out

    def clear(self) -> None:
        internal_kv._internal_kv_del(b"", del_by_prefix=True, namespace=self._kv_namespace)
        self._keys.clear()
        self._node_keys.clear()


class DirectoryServer:
    """The state behind the directory actor. Every method runs in the actor, one at a time.

    Node records: `{"status": "up" | "down", "reason": Any, "restarts": [t, ...]` (wall-clock
    seconds), `"sessions": {child_id: session_id}, "dynamic": {child_id: spec_bytes},
    "removed": {child_id}}` (children released: not restored). Every change is written
    through to the cluster's GCS key-value store before the method returns, and the
    constructor reads that copy back: a restarted directory (or a new one in the same
    namespace, until `gen_agent.ray.drop_directory`) starts where the last one stopped.

    Args:
        namespace: the Ray namespace it serves (its stored copy's key).

    Mirrors: a `:global`-style name registry plus what an OTP supervisor keeps for restarts.
    """

    def __init__(self, namespace: str = "gen_agent") -> None:
        self._namespace = namespace
        self._names: dict[Any, Any] = {}
        self._nodes: dict[Any, dict[str, Any]] = {}
        self._static: dict[Any, list[Any]] = {}  # node -> the children it started with
        self._journal = _Journal(namespace)
        self._restore(self._journal.load())

    # ------------------------------------------------------------------ journal
    def _restore(self, stored: dict[bytes, list[tuple[Any, Any]]]) -> None:
        for node, saved in stored.get(_NODE, ()):
            self._static[node] = list(saved["static"])
            self._nodes[node] = {"status": saved["status"], "reason": saved["reason"],
                                 "restarts": list(saved["restarts"]), "sessions": {},
                                 "dynamic": {}, "removed": set(saved["removed"])}
            for name in saved["static"]:
                if name not in saved["removed"]:
                    self._names[name] = node
        for name, node in stored.get(_NAME, ()):
            self._names[name] = node
        for (node, child), session_id in stored.get(_SESSION, ()):
            if node in self._nodes:
                self._nodes[node]["sessions"][child] = session_id
        for (node, child), spec in stored.get(_DYNAMIC, ()):
            if node in self._nodes:
                self._nodes[node]["dynamic"][child] = spec

    def _save_node(self, node: Any) -> None:
        record = self._nodes[node]
        self._journal.put(_NODE, node, {
            "status": record["status"], "reason": record["reason"],
            "restarts": record["restarts"], "removed": record["removed"],
            "static": self._static.get(node, [])})

    def _forget_node(self, node: Any) -> None:
        # The node's record, its names, sessions and dynamic specs: gone from both copies.
        self._nodes.pop(node, None)
        self._static.pop(node, None)
        self._journal.delete(_NODE, node)
        for name, holder in list(self._names.items()):
            if holder == node:
                del self._names[name]
                self._journal.delete(_NAME, name)
        self._journal.delete_children(node)

    def _take(self, name: Any, node: Any) -> None:
        # `name` goes to `node`; a node that is down loses it in both copies.
        previous = self._names.get(name)
        if previous is not None and previous != node:
            if name in self._static.get(previous, ()):
                record = self._nodes.get(previous)
                if record is not None and name not in record["removed"]:
                    record["removed"].add(name)
                    self._save_node(previous)
            self._journal.delete(_NAME, name)
        self._names[name] = node

    def info(self) -> dict[str, Any]:
        """`{"pid": this incarnation's process id, "names": count, "nodes": count}`."""
        return {"pid": os.getpid(), "names": len(self._names), "nodes": len(self._nodes)}

    def _holder(self, name: Any, claimant: Any = None) -> Any:
        # The live node holding `name`. A holder other than `claimant` is checked with Ray:
        # one whose actor is gone (its starting process exited) is marked down, so that its
        # names can be taken.
        node = self._names.get(name)
        if node is None:
            return None
        record = self._nodes.get(node)
        if record is None or record["status"] != "up":
            return None
        if node != claimant and not self._alive(node):
            self._down(node, NOT_RUNNING)
            return None
        return node

    def _alive(self, node: Any) -> bool:
        # A node actor keeps its name while Ray restarts it and loses it once dead for good.
        try:
            ray.get_actor(node_actor_name(node), namespace=self._namespace)
        except ValueError:
            return False
        return True

    # ------------------------------------------------------------------ nodes
    def node_starting(self, node: Any, child_ids: list[Any], reconstructed: bool,
                      max_restarts: int, max_seconds: float) -> dict[str, Any]:
        """A node (re)starts. Returns `{"status": "up", "sessions", "dynamic"}`, or
        `{"status": "down", "reason"}` when this restart exceeds the node's intensity, or
        `{"status": "conflict", "name", "node"}` when a child's name is held elsewhere."""
        record = self._nodes.get(node)
        if reconstructed and record is not None:
            # Wall-clock times: the window must hold across a directory restart elsewhere.
            now = time.time()
            restarts = [t for t in record["restarts"] if now - t <= max_seconds] + [now]
            record["restarts"] = restarts
            if len(restarts) > max_restarts:
                self._down(node, INTENSITY_REASON)
                return {"status": "down", "reason": INTENSITY_REASON}
            record["status"] = "up"
            self._save_node(node)
            return {"status": "up", "sessions": dict(record["sessions"]),
                    "dynamic": dict(record["dynamic"]), "removed": list(record["removed"])}
        for name in child_ids:
            holder = self._holder(name, node)
            if holder is not None and holder != node:
                return {"status": "conflict", "name": name, "node": holder}
        self._forget_node(node)
        self._nodes[node] = {"status": "up", "reason": None, "restarts": [],
                             "sessions": {}, "dynamic": {}, "removed": set()}
        self._static[node] = list(child_ids)
        for name in child_ids:
            self._take(name, node)
        self._save_node(node)
        return {"status": "up", "sessions": {}, "dynamic": {}, "removed": []}

    def _down(self, node: Any, reason: Any) -> None:
        record = self._nodes.get(node)
        if record is not None:
            record["status"] = "down"
            record["reason"] = reason
            self._save_node(node)

    def node_down(self, node: Any, reason: Any, forget: bool = False) -> None:
        """Mark `node` down (its names then resolve to `("node_down", node)`); `forget`
        drops the node and its names (a node stopped on request)."""
        if forget:
            self._forget_node(node)
        else:
            self._down(node, reason)

    def node_gone(self, node: Any) -> None:
        """A caller found no Ray actor for `node`: mark it down (`"not_running"`) when Ray
        confirms it (a stale report about a node started again is ignored)."""
        record = self._nodes.get(node)
        if record is not None and record["status"] == "up" and not self._alive(node):
            self._down(node, NOT_RUNNING)

    def node_status(self, node: Any) -> tuple[str, Any] | None:
        """`(status, reason)` of `node`, or None when unknown."""
        record = self._nodes.get(node)
        return None if record is None else (record["status"], record["reason"])

    def node_restarts(self, node: Any) -> int:
        """How many process restarts of `node` its node-level intensity counts now (those
        within its window at its last start); 0 when unknown."""
        record = self._nodes.get(node)
        return 0 if record is None else len(record["restarts"])

    def nodes(self) -> dict[Any, str]:
        """Every known node and its status."""
        return {node: record["status"] for node, record in self._nodes.items()}

    # ------------------------------------------------------------------ names
    def claim(self, name: Any, node: Any) -> Any:
        """Register `name` on `node` unless a live node holds it; returns the holder (None
        when the claim succeeded)."""
        holder = self._holder(name, node)
        if holder is not None and holder != node:
            return holder
        if holder == node:
            return node
        self._take(name, node)
        self._journal.put(_NAME, name, node)
        record = self._nodes.get(node)
        if record is not None and name in record["removed"]:
            record["removed"].discard(name)
            self._save_node(node)
        return None

    def release(self, name: Any, node: Any) -> None:
        """Drop `name` (held by `node`), its stored session and its dynamic spec; a child the
        node started with is not restored by the node's restarts either (it was stopped for
        good, or was temporary)."""
        if self._names.get(name) == node:
            del self._names[name]
            self._journal.delete(_NAME, name)
        record = self._nodes.get(node)
        if record is not None:
            if record["sessions"].pop(name, None) is not None:
                self._journal.delete(_SESSION, (node, name))
            if record["dynamic"].pop(name, None) is not None:
                self._journal.delete(_DYNAMIC, (node, name))
            if name not in record["removed"]:
                record["removed"].add(name)
                self._save_node(node)

    def add_dynamic(self, node: Any, name: Any, spec: bytes) -> None:
        """Remember a child started on `node` after its start, to restore it with the node."""
        record = self._nodes.get(node)
        if record is not None:
            record["dynamic"][name] = spec
            self._journal.put(_DYNAMIC, (node, name), spec)

    def set_sessions(self, node: Any, sessions: dict[Any, str]) -> None:
        """Record the provider session ids last seen on `node`, by child id."""
        record = self._nodes.get(node)
        if record is not None:
            record["sessions"].update(sessions)
            for child, session_id in sessions.items():
                self._journal.put(_SESSION, (node, child), session_id)

    def sessions(self, node: Any) -> dict[Any, str]:
        """The stored session ids of `node`'s children."""
        record = self._nodes.get(node)
        return {} if record is None else dict(record["sessions"])

    def lookup(self, name: Any) -> tuple[Any, str, Any] | None:
        """`(node, status, reason)` for `name`, or None when no node holds it."""
        node = self._names.get(name)
        if node is None:
            return None
        record = self._nodes.get(node)
        if record is None:
            return None
        return node, record["status"], record["reason"]

    def list_agents(self) -> list[Any]:
        """The names held by live nodes (each node marked up is checked with Ray once)."""
        for node, record in self._nodes.items():
            if record["status"] == "up" and not self._alive(node):
                self._down(node, NOT_RUNNING)
        return [name for name, node in self._names.items()
                if self._nodes.get(node, {}).get("status") == "up"]


def get_directory(namespace: str) -> Any:
    """The directory actor of `namespace`, created when missing (atomic: `get_if_exists`).

    Ray restarts it whenever its process dies (`max_restarts=-1`); it reads its state back
    from the cluster's GCS key-value store.

    Args:
        namespace: the Ray namespace of the gen_agent cluster.

    Returns:
        A Ray actor handle on the detached `DirectoryServer`.
    """
    actor_cls = ray.remote(DirectoryServer)
    return actor_cls.options(name=DIRECTORY_NAME, namespace=namespace, lifetime="detached",
                             get_if_exists=True, num_cpus=0, max_restarts=-1,
                             max_task_retries=0).remote(namespace)


def clear_stored(namespace: str) -> None:
    """Delete the stored copy of `namespace`'s directory (see `gen_agent.ray.drop_directory`)."""
    _Journal(namespace).clear()

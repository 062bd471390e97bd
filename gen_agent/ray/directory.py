"""The cluster's directory: which node hosts which agent, and what each node must restore.

One detached, named Ray actor per namespace (`gen_agent.directory` in it). Its methods run
one at a time (a plain Ray actor), so claiming a name is atomic across the cluster. It also
keeps, per node, what a restarted node needs: the provider session id last seen for each
child, the specs of children started after the node (`start_agent`), and the node's restart
times, against which gen_agent enforces the node-level restart intensity (restarts within a
window, as OTP counts them; Ray's own `max_restarts` counts a lifetime).
"""

from __future__ import annotations

import time
from typing import Any

import ray

__all__ = ["DIRECTORY_NAME", "DirectoryServer", "get_directory"]

DIRECTORY_NAME = "gen_agent.directory"
INTENSITY_REASON = ("shutdown", "reached_max_restart_intensity")


class DirectoryServer:
    """The state behind the directory actor. Every method runs in the actor, one at a time.

    Node records: `{"status": "up" | "down", "reason": Any, "restarts": [t, ...],
    "sessions": {child_id: session_id}, "dynamic": {child_id: spec_bytes},
    "removed": {child_id}}` (children released: not restored).

    Mirrors: a `:global`-style name registry plus what an OTP supervisor keeps for restarts.
    """

    def __init__(self) -> None:
        self._names: dict[Any, Any] = {}
        self._nodes: dict[Any, dict[str, Any]] = {}

    def _holder(self, name: Any) -> Any:
        node = self._names.get(name)
        if node is None:
            return None
        record = self._nodes.get(node)
        return node if record is not None and record["status"] == "up" else None

    # ------------------------------------------------------------------ nodes
    def node_starting(self, node: Any, child_ids: list[Any], reconstructed: bool,
                      max_restarts: int, max_seconds: float) -> dict[str, Any]:
        """A node (re)starts. Returns `{"status": "up", "sessions", "dynamic"}`, or
        `{"status": "down", "reason"}` when this restart exceeds the node's intensity, or
        `{"status": "conflict", "name", "node"}` when a child's name is held elsewhere."""
        record = self._nodes.get(node)
        if reconstructed and record is not None:
            now = time.monotonic()
            restarts = [t for t in record["restarts"] if now - t <= max_seconds] + [now]
            record["restarts"] = restarts
            if len(restarts) > max_restarts:
                self._down(node, INTENSITY_REASON)
                return {"status": "down", "reason": INTENSITY_REASON}
            record["status"] = "up"
            return {"status": "up", "sessions": dict(record["sessions"]),
                    "dynamic": dict(record["dynamic"]), "removed": list(record["removed"])}
        for name in child_ids:
            holder = self._holder(name)
            if holder is not None and holder != node:
                return {"status": "conflict", "name": name, "node": holder}
        for name, holder in list(self._names.items()):
            if holder == node:
                del self._names[name]
        self._nodes[node] = {"status": "up", "reason": None, "restarts": [],
                             "sessions": {}, "dynamic": {}, "removed": set()}
        for name in child_ids:
            self._names[name] = node
        return {"status": "up", "sessions": {}, "dynamic": {}, "removed": []}

    def _down(self, node: Any, reason: Any) -> None:
        record = self._nodes.get(node)
        if record is not None:
            record["status"] = "down"
            record["reason"] = reason

    def node_down(self, node: Any, reason: Any, forget: bool = False) -> None:
        """Mark `node` down (its names then resolve to `("node_down", node)`); `forget`
        drops the node and its names (a node stopped on request)."""
        if forget:
            self._nodes.pop(node, None)
            for name, holder in list(self._names.items()):
                if holder == node:
                    del self._names[name]
        else:
            self._down(node, reason)

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
        holder = self._holder(name)
        if holder is not None and holder != node:
            return holder
        if holder == node:
            return node
        self._names[name] = node
        record = self._nodes.get(node)
        if record is not None:
            record["removed"].discard(name)
        return None

    def release(self, name: Any, node: Any) -> None:
        """Drop `name` (held by `node`), its stored session and its dynamic spec; a child the
        node started with is not restored by the node's restarts either (it was stopped for
        good, or was temporary)."""
        if self._names.get(name) == node:
            del self._names[name]
        record = self._nodes.get(node)
        if record is not None:
            record["sessions"].pop(name, None)
            record["dynamic"].pop(name, None)
            record["removed"].add(name)

    def add_dynamic(self, node: Any, name: Any, spec: bytes) -> None:
        """Remember a child started on `node` after its start, to restore it with the node."""
        record = self._nodes.get(node)
        if record is not None:
            record["dynamic"][name] = spec

    def set_sessions(self, node: Any, sessions: dict[Any, str]) -> None:
        """Record the provider session ids last seen on `node`, by child id."""
        record = self._nodes.get(node)
        if record is not None:
            record["sessions"].update(sessions)

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
        """The names held by live nodes."""
        return [name for name, node in self._names.items()
                if self._nodes.get(node, {}).get("status") == "up"]


def get_directory(namespace: str) -> Any:
    """The directory actor of `namespace`, created when missing (atomic: `get_if_exists`).

    Args:
        namespace: the Ray namespace of the gen_agent cluster.

    Returns:
        A Ray actor handle on the detached `DirectoryServer`.
    """
    actor_cls = ray.remote(DirectoryServer)
    return actor_cls.options(name=DIRECTORY_NAME, namespace=namespace, lifetime="detached",
                             get_if_exists=True, num_cpus=0, max_restarts=0,
                             max_task_retries=0).remote()

"""`Collector`: what the observer shows, gathered from telemetry, `runtime_snapshot`,
`Supervisor.snapshot` and `Pool.status`; no web dependency.

While it is open the collector attaches one telemetry handler to the content-free events
(turn lifecycle, state changes, mailbox depth, halts, terminations; docs/pages/contract.md#s8; docs:
Telemetry and logging) and keeps two bounded rings: the recent turns (outcome, duration, tokens,
cost) and a timeline of recent events. Handlers run in agent threads and only append to a ring and
mark the view dirty; they never call an agent. Nothing is attached, and nothing is kept, before
`open()` or after `close()`: an agent system without an observer pays nothing.

`snapshot()` builds the whole view as plain JSON-ready dicts: it asks each agent for its
`runtime_snapshot` (metadata only: never prompts, responses, state or sessions). Prompt text
appears only when the collector was made with `show_text=True`, taken from the rich
`("gen_agent", "prompt", "start")` event; response text never does (telemetry carries none).

`wait_changed` lets one thread (the observer's publisher) sleep until something changed, so
the view is rebuilt once per change for every viewer, not once per viewer per poll.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from typing import Any, Final

from gen_agent import telemetry
from gen_agent._errors import GenAgentError
from gen_agent._reasons import brief_reason
from gen_agent._system import AgentSystem
from gen_agent.observer import _charts as charts

__all__ = ["Collector", "escaped", "label"]

_TURN_EVENTS: Final = (
    telemetry.TURN_START,
    telemetry.TURN_STOP,
    telemetry.TURN_ERROR,
    telemetry.TURN_REJECTED,
    telemetry.TURN_CANCELLED,
)
_OTHER_EVENTS: Final = (
    telemetry.STATE_CHANGED,
    telemetry.MAILBOX_QUEUED,
    telemetry.INPUT_REJECTED,
    telemetry.HALTED,
    telemetry.TERMINATED,
    telemetry.EVENT_RECEIVED,
    telemetry.TOOL_PERMISSION,
)
_SNAPSHOT_TIMEOUT_S: Final = 0.25
_PROMPT_CHARS: Final = 500


def label(value: Any) -> str:
    """How the observer shows a name (and how an action names its target): a `str` as
    itself, anything else as its `repr`; either `escaped`."""
    return escaped(value if isinstance(value, str) else repr(value))


def escaped(text: str) -> str:
    """`text` with each lone surrogate (which UTF-8, and so JSON on the wire, cannot carry)
    written as its escape, e.g. `\\ud800`; `text` itself when it has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def escaped_view(value: Any) -> Any:
    """A JSON-ready view with every string (keys too) `escaped`."""
    if isinstance(value, str):
        return escaped(value)
    if isinstance(value, dict):
        return {escaped_view(key): escaped_view(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [escaped_view(item) for item in value]
    return value


_label = label


class Collector:
    """The observer's model of one `AgentSystem`. Thread-safe.

    Args:
        system: the `AgentSystem` to watch.
        max_turns: recent turns kept (count, >= 1; default 200).
        max_events: recent timeline events kept (count, >= 1; default 200).
        turns_per_agent: recent turns listed under each agent (count; default 5).
        show_text: include the dispatched prompt's text (its first 500 characters) in each
            turn; default False (never any prompt or response text).

    Use `open()` / `close()` (or `with`): the telemetry handler and rings exist only between
    them.
    """

    def __init__(self, system: AgentSystem, *, max_turns: int = 200, max_events: int = 200,
                 turns_per_agent: int = 5, show_text: bool = False) -> None:
        for name, value in (("max_turns", max_turns), ("max_events", max_events),
                            ("turns_per_agent", turns_per_agent)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.system = system
        self.show_text = show_text
        self.turns_per_agent = turns_per_agent
        self._max_turns, self._max_events = max_turns, max_events
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._version = 0
        self._turns: deque[dict[str, Any]] = deque(maxlen=max_turns)
        self._events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self._prompts: dict[Any, str] = {}
        self._handler_id: Any = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> Collector:
        """Attach the telemetry handler (idempotent). Returns self."""
        with self._lock:
            if self._handler_id is not None:
                return self
            self._handler_id = ("gen_agent.observer", uuid.uuid4().hex)
            self._closed = False
        names = [*_TURN_EVENTS, *_OTHER_EVENTS]
        if self.show_text:
            names.append(telemetry.PROMPT_START)
        telemetry.attach_many(self._handler_id, names, self._on_event)
        return self

    def close(self) -> None:
        """Detach the handler, drop the rings and wake every `wait_changed` (idempotent)."""
        with self._lock:
            handler_id, self._handler_id = self._handler_id, None
            self._closed = True
            self._turns.clear()
            self._events.clear()
            self._prompts.clear()
            self._changed.notify_all()
        if handler_id is not None:
            telemetry.detach(handler_id)

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    def __enter__(self) -> Collector:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ change tracking
    @property
    def version(self) -> int:
        """A counter bumped by every recorded event (and `touch`)."""
        return self._version

    def touch(self) -> None:
        """Mark the view changed (e.g. after an action) and wake the waiters."""
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def wait_changed(self, seen: int, timeout: float) -> int:
        """Wait until `version` differs from `seen`, the collector closes, or `timeout`
        seconds pass; return the current version."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen or self._closed, timeout)
            return self._version

    # ------------------------------------------------------------------ telemetry
    def _on_event(self, name: tuple[str, ...], measurements: dict[str, Any],
                  metadata: dict[str, Any], _config: Any) -> None:
        # Runs in the emitting (agent) thread: record, never call an agent.
        raw = metadata.get("agent")
        agent = _label(raw)
        now = time.time()
        with self._changed:
            if self._closed:
                return
            if name == telemetry.PROMPT_START:
                prompt = metadata.get("prompt")
                if isinstance(prompt, str):
                    self._prompts[self._key(agent, metadata)] = escaped(prompt[:_PROMPT_CHARS])
                    while len(self._prompts) > self._max_turns:
                        self._prompts.pop(next(iter(self._prompts)))
                return
            detail = self._record(name, agent, measurements, metadata, now, _host_of(raw))
            self._events.append({"t": now, "event": ".".join(name[1:]), "agent": agent,
                                 "detail": detail})
            self._version += 1
            self._changed.notify_all()

    @staticmethod
    def _key(agent: str, metadata: dict[str, Any]) -> tuple[str, str, int]:
        ref = metadata.get("ref")
        return agent, escaped(str(getattr(ref, "id", ref))), int(metadata.get("attempt") or 1)

    def _record(self, name: tuple[str, ...], agent: str, measurements: dict[str, Any],
                metadata: dict[str, Any], now: float, host: str | None = None) -> str:
        """Update the turn rings for one event (lock held); return the timeline detail."""
        if name == telemetry.STATE_CHANGED:
            return f"{metadata.get('from') or 'start'} → {metadata.get('to')}"
        if name == telemetry.MAILBOX_QUEUED:
            return f"queue depth {measurements.get('depth', 0)}"
        if name == telemetry.INPUT_REJECTED:
            return brief_reason(_reason_head(metadata.get("reason")))
        if name == telemetry.TERMINATED:
            return brief_reason(metadata.get("reason"))
        if name in (telemetry.HALTED, telemetry.EVENT_RECEIVED):
            return ""
        if name == telemetry.TOOL_PERMISSION:  # the tool's name and the decision, no input
            return f"{_label(metadata.get('tool_name'))}: {metadata.get('decision')}"
        key = self._key(agent, metadata)
        origin = escaped(str(metadata.get("origin") or ""))
        head = f"{origin} attempt {key[2]}"
        if name == telemetry.TURN_START:
            return head
        if name == telemetry.TURN_STOP:
            outcome = "ok"
        elif name == telemetry.TURN_ERROR:
            outcome = brief_reason(metadata.get("reason_kind")) or "error"
        elif name == telemetry.TURN_REJECTED:
            outcome = "rejected: " + brief_reason(metadata.get("reason_kind"))
        else:
            outcome = "cancelled: " + brief_reason(metadata.get("reason_kind"))
        turn: dict[str, Any] = {
            "agent": agent, "host": host, "ref": key[1], "origin": origin, "attempt": key[2],
            "outcome": outcome, "ended": now,
            "duration_ms": measurements.get("duration_ms"),
            "input_tokens": measurements.get("input_tokens"),
            "output_tokens": measurements.get("output_tokens"),
            "cost_usd": measurements.get("cost_usd"),
        }
        prompt = self._prompts.pop(key, None)
        if self.show_text:
            turn["prompt"] = prompt
        self._turns.append(turn)
        return f"{head}: {outcome}"

    # ------------------------------------------------------------------ the view
    def turns(self) -> list[dict[str, Any]]:
        """The recent turns, oldest first (copies)."""
        with self._lock:
            return [dict(turn) for turn in self._turns]

    def events(self) -> list[dict[str, Any]]:
        """The recent timeline events, oldest first (copies)."""
        with self._lock:
            return [dict(event) for event in self._events]

    def snapshot(self) -> dict[str, Any]:
        """Build the whole view now: agents, supervision trees, pools, turns, timeline.

        Returns a JSON-ready dict: `{"time", "version", "show_text", "agents": [...],
        "supervisors": [...], "pools": [...], "turns": [...], "events": [...], "charts": {...}}`
        (`charts`: `gen_agent.observer.charts.series` of the turns). Each agent is
        `{"name", "alive", "phase", "halted", "halt_pending", "draining", "pending_prompts",
        "pending_notifications", "self_chain_pending", "current": {origin, attempt,
        elapsed_ms, watchdog_ms} | None, "turns": [...], "supervisor": name | None}`; an agent
        that did not answer within 0.25 s shows `"phase": "busy"` (it is inside a callback).
        Calls agents (their `runtime_snapshot`): never call it from an agent thread.
        """
        version = self._version
        supervisors, parent = self._trees()
        agents = [self._agent(name, parent.get(_label(name))) for name in
                  sorted(self.system.list_agents(), key=_label)]
        turns = self.turns()
        now = time.time()
        for agent in agents:
            mine = [t for t in turns if t["agent"] == agent["name"]]
            agent["turns"] = mine[-self.turns_per_agent:][::-1]
        return {
            "time": now, "version": version, "show_text": self.show_text,
            "agents": agents, "supervisors": supervisors, "pools": self._pools(),
            "turns": turns[::-1], "events": self.events()[::-1],
            "charts": charts.series(turns, now),
        }

    def _agent(self, name: Any, supervisor: str | None) -> dict[str, Any]:
        label = _label(name)
        view: dict[str, Any] = {"name": label, "supervisor": supervisor, "alive": True,
                                "phase": "busy", "halted": False, "halt_pending": False,
                                "draining": False, "pending_prompts": None,
                                "pending_notifications": None, "self_chain_pending": False,
                                "current": None}
        ref = self.system.whereis(name)
        if ref is None:
            view.update(alive=False, phase="stopped")
            return view
        try:
            snap = ref.runtime_snapshot(_SNAPSHOT_TIMEOUT_S)
        except (GenAgentError, LookupError):
            view["alive"] = ref.is_alive()
            if not view["alive"]:
                view["phase"] = "stopped"
            return view
        current = snap.current_request
        view.update(
            phase=snap.phase, halted=snap.halted, halt_pending=snap.halt_pending,
            draining=snap.draining, pending_prompts=snap.pending_prompts,
            pending_notifications=snap.pending_notifications,
            self_chain_pending=snap.self_chain_pending,
            current=None if current is None else {
                "ref": str(getattr(current.ref, "id", "")), "origin": current.origin,
                "attempt": current.attempt, "elapsed_ms": current.elapsed_ms,
                "watchdog_ms": current.watchdog_ms})
        return view

    def _trees(self) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The supervision trees (JSON-ready) and, per agent name, its supervisor's name."""
        parent: dict[str, str] = {}
        pool_of = {_label(p.supervisor.name): p.name_prefix for p in self.system.pools()}

        def tree(supervisor: Any) -> dict[str, Any]:
            snap = supervisor.snapshot()
            name = _label(snap.name)
            children = []
            for child in snap.children:
                child_id = _label(child.id)
                entry: dict[str, Any] = {
                    "id": child_id, "type": child.type, "restart": child.restart,
                    "restarts": child.restarts, "running": child.ref is not None,
                    "last_exit": brief_reason(child.last_exit_reason)}
                if child.type == "supervisor" and child.ref is not None:
                    entry["supervisor"] = tree(child.ref)
                else:
                    parent[child_id] = name
                children.append(entry)
            return {"name": name, "strategy": snap.strategy, "alive": snap.alive,
                    "max_restarts": snap.max_restarts, "max_seconds": snap.max_seconds,
                    "restarts_in_window": snap.restarts_in_window,
                    "intensity_left": snap.intensity_left, "pool": pool_of.get(name),
                    "children": children}

        return [tree(s) for s in self.system.supervisors()], parent

    def _pools(self) -> list[dict[str, Any]]:
        views = []
        for pool in self.system.pools():
            status = pool.status()
            views.append({
                "name": pool.name_prefix, "supervisor": _label(pool.supervisor.name),
                "routing": pool.routing, "size": status.size, "queued": status.queued,
                "in_flight": status.in_flight, "stopped": status.stopped,
                "workers": [{"name": _label(w.name), "alive": w.alive, "retiring": w.retiring,
                             "in_flight": w.in_flight, "queued": w.queued,
                             "dispatched": w.dispatched, "completed": w.completed}
                            for w in status.workers]})
        return views


def _host_of(name: Any) -> str | None:
    # An `AgentHost` registers its agents as (host name, key): chart them per host too.
    if isinstance(name, tuple) and len(name) == 2 and isinstance(name[1], str):
        return _label(name[0])
    return None


def _reason_head(reason: Any) -> Any:
    # ("overloaded", OverloadInfo) -> "overloaded": the info is numbers, but keep it short.
    if isinstance(reason, tuple) and reason:
        return reason[0]
    return reason

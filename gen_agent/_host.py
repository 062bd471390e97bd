"""`AgentHost`: agents addressed by key, activated on demand and deactivated when idle.

    host = gen_agent.AgentHost(Chat, backend=ClaudeBackend, store=SQLiteStore("chats.db"),
                               deactivate_after_ms=60_000, max_live=1_000)
    reply = host.ask("user-42", "Hello")      # starts (or resumes) user-42's agent
    ...
    host.close()

A host owns one kind of agent (`module`, `backend`, options) for any number of keys. The first
message for a key starts its agent: `init_agent` gets the key as the option `key`, and the
agent resumes from the store when the key has a record there (the key is the agent's
`session_key`; conversation through the backend's `restore_session`, state when the agent
sets `persist_state = True`, see `gen_agent.store`). Later messages go to that agent. Each
call is the client call of the same name (`gen_agent._runtime.calls`) with `key` in place of
`name`: the same parameters, checks and outcomes.

Deactivation. After `deactivate_after_ms` without a host call, an agent with nothing pending is
stopped as a drain stops it: `terminate_agent` sees `"normal"`, the lease is released, the
record stays in the store. Pending means: a running turn, a queued prompt, a self-chain or
retry (or its timer), a buffered notification or info message, a `send_after` timer set
through `host.send_after`, an unread result of a `host.tell` (read it with `host.poll`), or
a host call in progress. Such an agent stays live and is looked at again later. A halted
agent is deactivated and halted again when its key is next activated (halted-ness lives in
the host, not in the store). `gen_agent.send_after` timers and tells made around the host
are not seen: address host agents only through their host.

Casts do not activate: `interrupt`, `halt` and `resume` on a key without a live agent do
nothing (`resume` does clear a remembered halt); `status` of such a key reads the stored
record (a `SessionRecord`, or None).

`max_live` bounds the live agents. Activating a key beyond it first deactivates the least
recently used agent with nothing pending; when every live agent has work pending the new
activation fails at once with `TurnError(("overloaded", HostOverload))` (no queue: the caller
decides whether to retry). Activation is exactly once per key: racing callers share one
activation, and across processes the store's lease refuses a second live agent for a key
(`AgentStartError(("session_leased", key, holder))`).

A crashed agent is not restarted by the host: its key's next message starts a new
incarnation, resumed from the store.

Under a supervisor: `host_spec(module, name=..., backend=..., **host_options)` is a child
spec like any other; the child is a small agent that owns the host (`AgentHost.lookup(name)`
finds it), closes it when stopped and builds a new one when restarted.

Data lifecycle: `forget(key)` deletes a key's record; `expire(max_idle_days)` deletes the
records of keys not written for that long (run it from your own schedule; live keys are kept).

Mirrors: nothing in the Elixir original (activation by key is Orleans' and Dapr's virtual
actors).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec

from gen_agent._accounting import own_budget
from gen_agent._agent import GenAgent, NoReply
from gen_agent._errors import AgentDown, AgentNotFound, CallTimeout, TurnError
from gen_agent._host_aio import AsyncHost
from gen_agent._limits import JoinedLimit
from gen_agent._request_options import RequestOptions, check_busy, check_options
from gen_agent._request_ref import RequestRef
from gen_agent._response import Response
from gen_agent._runtime import (
    DeactivateMsg,
    HaltMsg,
    InfoMsg,
    InterruptMsg,
    NotifyMsg,
    ResumeMsg,
    calls,
)
from gen_agent._status import InterruptReceipt, PollResult, Status
from gen_agent._streaming import AttachedTurn, TurnStream
from gen_agent._system import AgentSystem, current_system
from gen_agent._timers import TIMERS, TimerHandle
from gen_agent.backend import Backend, DispatchError
from gen_agent.store import MemoryStore, SessionRecord

__all__ = ["AgentHost", "AsyncHost", "HostOverload", "HostStatus", "HostTimer", "host_spec"]

_HOST_IDS = itertools.count(1)
_NOT_HOST_OPTIONS = ("name", "store", "session_key")


class HostOverload(msgspec.Struct, frozen=True, kw_only=True):
    """Why a host refused to activate a key: the payload of `("overloaded", info)`.

    Fields:
        live: live agents (count). max_live: the host's bound (count).
    """

    live: int
    max_live: int


class HostStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A point-in-time view of a host (counts only, never keys or payloads).

    Fields:
        live: live agents. activations / deactivations: since the host started (counts).
        max_live: the bound, or None.
        sweeps: idle checks done so far (count; one every half `deactivate_after_ms`, at
            most every second).
    """

    live: int
    activations: int
    deactivations: int
    max_live: int | None
    sweeps: int = 0


class _Slot:
    """One live key: its agent's handle and what the host knows keeps it busy."""

    __slots__ = ("busy", "deactivating", "handle", "key", "timers", "unread", "used")

    def __init__(self, key: str, handle: Any) -> None:
        self.key = key
        self.handle = handle
        self.busy = 0  # host calls in progress
        self.timers = 0  # host.send_after timers not fired yet
        self.unread: dict[RequestRef, None] = {}  # host.tell refs whose result was not read
        self.used = time.monotonic()
        self.deactivating = False

    def idle(self) -> bool:
        return not (self.busy or self.timers or self.unread or self.deactivating)


def _positive_ms(name: str, value: Any) -> int | None:
    if value is None or value == "infinity":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0 (milliseconds) or None, got {value!r}")
    return value


class AgentHost:
    """Agents of one class addressed by key (see the module docstring). Thread-safe.

    A key is a non-empty `str` (it is the store's session key); any other key raises
    `TypeError` before anything is sent. Use it as a context manager, or call `close()`; the
    `AgentSystem`'s shutdown closes it too.

    Args:
        module: the `GenAgent` subclass. backend: its backend.
        store: the `gen_agent.store` store keys are resumed from (default: a new
            `MemoryStore`, which keeps conversations across deactivation within this process).
        name: the host's name; its agents are registered as `(name, key)`. Default
            `"host-<n>"`.
        deactivate_after_ms: idle milliseconds before an agent with nothing pending is
            deactivated (int >= 0; None: only `max_live` deactivates).
        max_live: the most live agents (int >= 1; None: no bound).
        max_cost_usd (US dollars) / max_total_tokens (tokens): a cap over every agent of the
            host together (`gen_agent.SharedBudget`), next to any per-agent cap.
        budget: that cap given instead (`self.budget`; not with `max_cost_usd` /
            `max_total_tokens`): a `gen_agent.SharedBudget` shared with other hosts, or a
            `gen_agent.ray.ClusterBudget` (one cap for the host on every node of a
            `gen_agent.ray.RayHost`: docs/pages/scale-out.md#limits-and-budgets-across-nodes).
        replay_turns: finished turns each agent keeps for `attach` (default 1).
        busy: the agents' policy for a request that arrives while a turn runs (`"enqueue"`,
            the default, `"reject"`, `"interrupt"`, `"rollback"`, `"steer"`; see the
            `busy` start option); a request overrides it with `RequestOptions(busy=...)`.
        agent_system: the `AgentSystem` the agents run in (default: the current one).
        key_limit: a callable `key -> ProviderLimit | None`, asked once per activation: a
            further limit for that key's agent, next to the `provider_limit` option (a turn
            then needs a permit of both; e.g. a tenant's own limit, `gen_agent.server`).
            Settable later as the attribute `key_limit` (it applies from the next
            activation). Default None.
        **options: every other `start_agent` option, for each agent (not `name`, `store`,
            `session_key`); the ones that are not reserved go to `init_agent` with `key`.

    Raises:
        ValueError: a bad bound, or an option the host sets itself.
    """

    def __init__(self, module: type, *, backend: Any, store: Any = None, name: Any = None,
                 deactivate_after_ms: int | None = None, max_live: int | None = None,
                 max_cost_usd: float | None = None, max_total_tokens: int | None = None,
                 budget: Any = None, replay_turns: int = 1, agent_system: AgentSystem | None = None,
                 busy: str = "enqueue", key_limit: Callable[[str], Any] | None = None,
                 **options: Any) -> None:
        clash = [key for key in _NOT_HOST_OPTIONS if key in options]
        if clash:
            raise ValueError(f"AgentHost sets {', '.join(clash)} itself: drop it")
        if max_live is not None and (isinstance(max_live, bool) or not isinstance(max_live, int)
                                     or max_live < 1):
            raise ValueError(f"max_live must be an int >= 1 or None, got {max_live!r}")
        self.module = module
        self.backend = backend
        self.store = store if store is not None else MemoryStore()
        self.name = name if name is not None else f"host-{next(_HOST_IDS)}"
        self.deactivate_after_ms = _positive_ms("deactivate_after_ms", deactivate_after_ms)
        self.max_live = max_live
        self.budget = own_budget("AgentHost", budget, max_cost_usd, max_total_tokens)
        budgets = tuple(options.pop("budgets", ()) or ())
        if self.budget is not None:
            budgets += (self.budget,)
        check_busy(busy, "AgentHost", allow_none=False)
        self.busy = busy
        self._options = {**options, "replay_turns": replay_turns, "budgets": budgets,
                         "busy": busy}
        self.key_limit = key_limit
        self.system = agent_system if agent_system is not None else current_system()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._live: OrderedDict[str, _Slot] = OrderedDict()  # least recently used first
        self._activating: set[str] = set()
        self._halted: set[str] = set()
        self._activations = 0
        self._deactivations = 0
        self._sweeps = 0
        self._closed = False
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        if self.deactivate_after_ms is not None:
            self._reaper = threading.Thread(target=self._reap, daemon=True,
                                            name=f"gen_agent-host-{self.name!s:.40}")
            self._reaper.start()
        self.system.add_shutdown_hook(_closer(weakref.ref(self)))
        self.aio = AsyncHost(self)

    def __repr__(self) -> str:
        return f"AgentHost({self.module.__name__}, name={self.name!r}, live={len(self._live)})"

    @staticmethod
    def lookup(name: Any, *, agent_system: AgentSystem | None = None,
               timeout: float | None = 5.0) -> AgentHost:
        """The running host a supervisor started from `host_spec(..., name=name)`.

        Raises:
            AgentNotFound: no such host runs (not started, or between restarts: retry).
        """
        handle = calls.lookup(agent_system, name)
        if handle.module is not _HostKeeper:
            raise AgentNotFound(name)
        try:
            status = calls.run(handle, calls.STATUS, timeout)
        except AgentDown:
            raise AgentNotFound(name) from None  # stopping, or still starting
        return status.agent_state  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ activation
    def _agent_name(self, key: str) -> tuple[Any, str]:
        return (self.name, key)

    def _check_key(self, key: Any) -> None:
        if not (isinstance(key, str) and key):
            raise TypeError(f"AgentHost: a key is a non-empty str, got {type(key).__name__}")

    def _acquire(self, key: str, timeout: float | None) -> _Slot:
        """The live slot of `key` with one more host call counted, activating it if needed.

        Raises:
            TurnError: ("overloaded", HostOverload) at `max_live` with no idle agent.
            AgentStartError: the agent did not start (e.g. ("session_leased", key, holder)).
            CallTimeout: another caller's activation of `key` took longer than `timeout`.
        """
        self._check_key(key)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            victim = None
            with self._lock:
                if self._closed:
                    raise AgentNotFound(self._agent_name(key))
                slot = self._live.get(key)
                if slot is not None and slot.handle.closed:
                    del self._live[key]  # crashed or stopped around the host: start anew
                    slot = None
                if slot is not None and not slot.deactivating:
                    slot.busy += 1
                    self._live.move_to_end(key)
                    return slot
                if slot is None and key not in self._activating:
                    if (self.max_live is not None
                            and len(self._live) + len(self._activating) >= self.max_live):
                        victim = self._victim()
                        if victim is None:
                            raise TurnError(("overloaded", HostOverload(
                                live=len(self._live), max_live=self.max_live)))
                        victim.deactivating = True
                    self._activating.add(key)
                    mine = True
                else:
                    mine = False
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise CallTimeout(timeout)
                    self._changed.wait(remaining)  # another caller activates or deactivates
            if mine:
                return self._activate(key, victim)

    def _victim(self, tried: set[str] = frozenset()) -> _Slot | None:  # type: ignore[assignment]
        # Least recently used first; never one with work the host knows of (nor one that
        # just refused: `tried`). The caller holds the lock.
        for slot in self._live.values():
            if slot.idle() and slot.key not in tried:
                return slot
        return None

    def _activate(self, key: str, victim: _Slot | None) -> _Slot:
        try:
            tried: set[str] = set()
            while victim is not None and not self._deactivate(victim, claimed=True):
                tried.add(victim.key)
                with self._lock:  # it had work after all: the next least recently used
                    victim = self._victim(tried)
                    if victim is None:
                        raise TurnError(("overloaded", HostOverload(
                            live=len(self._live), max_live=self.max_live or 0)))
                    victim.deactivating = True
            return self._start(key)
        except BaseException:
            with self._lock:
                self._activating.discard(key)
                self._changed.notify_all()
            raise

    def _start(self, key: str) -> _Slot:
        options = self._options
        extra = None if self.key_limit is None else self.key_limit(key)
        if extra is not None:
            own = options.get("provider_limit")
            options = {**options, "provider_limit": extra if own is None
                       else JoinedLimit(extra, own)}  # the key's own limit first: narrower
        ref = self.system.start_agent(self.module, name=self._agent_name(key),
                                      backend=self.backend, store=self.store, session_key=key,
                                      key=key, **options)
        handle = ref._handle
        slot = _Slot(key, handle)
        slot.busy = 1
        with self._lock:
            if key in self._halted:
                self._halted.discard(key)
                handle.send(HaltMsg())  # before any message of the caller: it stays halted
            self._live[key] = slot
            self._activating.discard(key)
            self._activations += 1
            self._changed.notify_all()
        handle.on_exit(lambda h, _reason: self._gone(key, h))
        if self._closed:  # closed while this one started: it must not outlive the host
            self.system.stop_handle(handle)
            raise AgentNotFound(self._agent_name(key))
        return slot

    def _gone(self, key: str, handle: Any) -> None:
        with self._lock:
            slot = self._live.get(key)
            if slot is not None and slot.handle is handle and not slot.deactivating:
                del self._live[key]
                self._changed.notify_all()

    def _unread(self, slot: _Slot, ref: RequestRef) -> None:
        with self._lock:
            slot.unread[ref] = None
            limit = self._options.get("max_tell_results")
            limit = 100 if limit is None else limit
            while len(slot.unread) > limit:  # the agent's poll cache dropped the oldest
                del slot.unread[next(iter(slot.unread))]

    def _release(self, slot: _Slot) -> None:
        with self._lock:
            slot.busy -= 1
            slot.used = time.monotonic()
            if slot.busy == 0:
                self._changed.notify_all()

    def _deactivate(self, slot: _Slot, *, claimed: bool = False) -> bool:
        """Stop `slot`'s agent if nothing is pending; True when it is gone."""
        with self._lock:
            if not claimed:
                if not slot.idle() or self._live.get(slot.key) is not slot:
                    return False
                slot.deactivating = True
            elif slot.busy or slot.timers or slot.unread:
                slot.deactivating = False
                self._changed.notify_all()
                return False
        handle = slot.handle
        answer: Any = ("busy", ())
        window = None if handle.shutdown_ms is None else handle.shutdown_ms / 1000 + 5
        try:
            reply = handle.reply()
            message = DeactivateMsg(reply)
            if not handle.run_if_hibernated(message) and not handle.send(message):
                answer = ("ok", False)  # already gone
            else:
                try:
                    answer = reply.wait(window)
                except AgentDown:
                    answer = ("ok", False)
            if answer[0] == "ok":
                handle.exited.wait(window)
        finally:
            gone = answer[0] == "ok"
            with self._lock:
                slot.deactivating = False
                if gone:
                    if self._live.get(slot.key) is slot:
                        del self._live[slot.key]
                    if answer[0] == "ok" and answer[1]:
                        self._halted.add(slot.key)
                    self._deactivations += 1
                else:
                    slot.used = time.monotonic()
                self._changed.notify_all()
        return gone

    def deactivate(self, key: str) -> bool:
        """Deactivate `key`'s agent now if it is live with nothing pending; True if it was.
        Never activates."""
        with self._lock:
            slot = self._live.get(key)
        return slot is not None and self._deactivate(slot)

    def _reap(self) -> None:
        after = (self.deactivate_after_ms or 0) / 1000
        tick = min(max(after / 2, 0.005), 1.0)
        while not self._stop.wait(tick):
            now = time.monotonic()
            due = []
            with self._lock:
                # Least recently used first: stop at the first slot used too recently, so a
                # check costs the expired slots, not all live ones (a slot whose long call
                # ended lately waits one more check behind it, at most).
                for slot in self._live.values():
                    if slot.busy or slot.deactivating:
                        continue
                    if now - slot.used < after:
                        break
                    if slot.idle():
                        due.append(slot)
            for slot in due:
                if self._stop.is_set():
                    return
                self._deactivate(slot)
            with self._lock:
                self._sweeps += 1

    # ------------------------------------------------------------------ calls
    def _live_handle(self, key: str) -> Any:
        with self._lock:
            slot = self._live.get(key)
        return None if slot is None or slot.handle.closed else slot.handle

    def ask(self, key: str, prompt: str, timeout: float | None = None, *,
            options: RequestOptions | None = None, cancel_on_timeout: bool = False,
            output: Any = None) -> Response:
        """`gen_agent.ask` for `key`'s agent, activating it (see `gen_agent.ask` for the
        parameters, outcomes and errors; plus `TurnError(("overloaded", HostOverload))` and
        `AgentStartError` from the activation)."""
        calls.check_prompt(prompt, "ask")
        calls.check_timeout(timeout, "ask")
        check_options(options, "ask", output)
        slot = self._acquire(key, timeout)
        try:
            handle = slot.handle
            return calls.run(handle, calls.ask(handle, prompt, timeout, options,  # type: ignore[no-any-return]
                                               cancel_on_timeout, output), timeout)
        finally:
            self._release(slot)

    def tell(self, key: str, prompt: str, timeout: float | None = None, *,
             options: RequestOptions | None = None) -> RequestRef:
        """`gen_agent.tell` for `key`'s agent, activating it. The agent stays live until the
        result is read with `host.poll` (or the agent's poll cache dropped it)."""
        calls.check_prompt(prompt, "tell")
        calls.check_timeout(timeout, "tell")
        check_options(options, "tell", None)
        slot = self._acquire(key, timeout)
        try:
            ref: RequestRef = calls.run(slot.handle, calls.tell(slot.handle, prompt, timeout,
                                                                options=options), timeout)
            self._unread(slot, ref)
            return ref
        finally:
            self._release(slot)

    def tell_with_completion(self, key: str, prompt: str, recipient: Any, *,
                             on_halt: str = "queue", stream_to: Any = None,
                             timeout: float | None = None,
                             options: RequestOptions | None = None, monitor: bool = False,
                             output: Any = None) -> RequestRef:
        """`gen_agent.tell_with_completion` for `key`'s agent, activating it."""
        calls.check_prompt(prompt, "tell_with_completion")
        calls.check_recipient(recipient, "tell_with_completion")
        slot = self._acquire(key, timeout)
        try:
            handle = slot.handle
            call = calls.tell(handle, prompt, timeout, recipient=recipient, completion=True,
                              on_halt=on_halt, stream_to=stream_to, options=options,
                              monitor=monitor, output=output)
            return calls.run(handle, call, timeout)  # type: ignore[no-any-return]
        finally:
            self._release(slot)

    def poll(self, key: str, ref: RequestRef, timeout: float | None = None) -> PollResult:
        """`gen_agent.poll` of `key`'s agent; never activates (a key without a live agent
        answers `failed`/"not_found"). Reading a finished result lets the agent deactivate."""
        handle = self._live_handle(key)
        if handle is None:
            return PollResult(status="failed", reason="not_found")
        result: PollResult = calls.run(handle, calls.poll(ref), timeout)
        if result.status != "pending":
            with self._lock:
                slot = self._live.get(key)
                if slot is not None:
                    slot.unread.pop(ref, None)
        return result

    def notify(self, key: str, event: Any) -> None:
        """`gen_agent.notify` for `key`'s agent, activating it (a cast: an activation failure
        is not raised, as a cast never fails)."""
        try:
            slot = self._acquire(key, None)
        except Exception:  # noqa: BLE001 - a cast never fails
            return
        try:
            slot.handle.send(NotifyMsg(event))
        finally:
            self._release(slot)

    def send(self, key: str, message: Any) -> None:
        """`gen_agent.send` to `key`'s live agent; a key without one: nothing (a cast)."""
        handle = self._live_handle(key)
        if handle is not None:
            handle.send(InfoMsg(message))

    def send_after(self, key: str, message: Any, delay_ms: int) -> HostTimer:
        """`gen_agent.send_after` for `key`'s agent, activating it now; the agent stays live
        until the timer fired or was cancelled."""
        slot = self._acquire(key, None)
        fired = threading.Event()

        def done() -> None:
            if not fired.is_set():
                fired.set()
                with self._lock:
                    slot.timers -= 1
                    slot.used = time.monotonic()

        def fire() -> None:
            if not fired.is_set():
                slot.handle.send(InfoMsg(message))
            done()

        with self._lock:
            slot.timers += 1
        try:
            timer = TIMERS.schedule(delay_ms / 1000, fire)
        finally:
            self._release(slot)
        return HostTimer(timer, done)

    def interrupt(self, key: str) -> None:
        """`gen_agent.interrupt` of `key`'s live agent; never activates."""
        handle = self._live_handle(key)
        if handle is not None:
            handle.send(InterruptMsg())

    def interrupt_request(self, key: str, ref: RequestRef, timeout: float | None = None) -> str:
        """`gen_agent.interrupt_request` of `key`'s live agent; never activates (a key without
        a live agent: "not_found")."""
        handle = self._live_handle(key)
        if handle is None:
            return "not_found"
        return calls.run(handle, calls.interrupt_request(ref), timeout)  # type: ignore[no-any-return]

    def cancel_request(self, key: str, ref: RequestRef, timeout: float | None = None) -> str:
        """`gen_agent.cancel_request` of `key`'s live agent; never activates (a key without
        a live agent: "not_found")."""
        handle = self._live_handle(key)
        if handle is None:
            return "not_found"
        return calls.run(handle, calls.cancel_request(ref), timeout)  # type: ignore[no-any-return]

    def interrupt_receipt(self, key: str, timeout: float | None = None) -> InterruptReceipt:
        """`gen_agent.interrupt_receipt` of `key`'s live agent; never activates (a key
        without a live agent: an empty receipt, nothing was interrupted)."""
        handle = self._live_handle(key)
        if handle is None:
            return InterruptReceipt()
        return calls.run(handle, calls.INTERRUPT_RECEIPT, timeout)  # type: ignore[no-any-return]

    def halt(self, key: str) -> None:
        """`gen_agent.halt` of `key`'s live agent; never activates (no live agent: no-op)."""
        handle = self._live_handle(key)
        if handle is not None:
            handle.send(HaltMsg())

    def resume(self, key: str) -> None:
        """`gen_agent.resume` of `key`'s live agent; a deactivated halted key forgets its
        halt (it is not activated)."""
        handle = self._live_handle(key)
        if handle is not None:
            handle.send(ResumeMsg())
        else:
            with self._lock:
                self._halted.discard(key)

    def status(self, key: str, timeout: float | None = None) -> Status | SessionRecord | None:
        """`key`'s agent's `Status` when it is live; else its stored `SessionRecord` (None:
        the store has none). Never activates.

        Raises:
            CorruptRecord, StoreError: reading the stored record failed (see `gen_agent.store`).
        """
        self._check_key(key)
        handle = self._live_handle(key)
        if handle is not None:
            try:
                return calls.run(handle, calls.STATUS, timeout)  # type: ignore[no-any-return]
            except AgentDown:
                pass  # it ended meanwhile: read the record
        return self.store.load(key)  # type: ignore[no-any-return]

    def stream(self, key: str, prompt: str, *, interrupt_on_exit: bool = True,
               max_buffered_events: int = 256, timeout: float | None = None,
               options: RequestOptions | None = None, output: Any = None) -> TurnStream:
        """`gen_agent.stream` of a turn of `key`'s agent, activating it on entering
        (`options` and `output` as for `ask`, checked on entering)."""
        return _HostTurnStream(self, key, prompt, interrupt_on_exit=interrupt_on_exit,
                               max_buffered_events=max_buffered_events, timeout=timeout,
                               options=options, output=output)

    def attach(self, key: str, ref: RequestRef, *, after: int = 0,
               timeout: float | None = None, max_buffered_events: int = 256) -> AttachedTurn:
        """`gen_agent.attach` to a running or just-finished turn of `key`'s live agent (never
        activates: a key without a live agent raises `AgentNotFound` on entering)."""
        self._check_key(key)
        return AttachedTurn(self._agent_name(key), ref, after, timeout=timeout,
                            max_buffered_events=max_buffered_events, agent_system=self.system)

    # ------------------------------------------------------------------ lifecycle
    def forget(self, key: str) -> bool:
        """Delete `key`'s stored record (its live agent, if any, is deactivated first, even
        with work pending: that work is lost). True if a record existed."""
        self._check_key(key)
        with self._lock:
            slot = self._live.get(key)
            self._halted.discard(key)
        if slot is not None:
            self.system.stop_handle(slot.handle)
        return bool(self.store.delete(key))

    def expire(self, max_idle_days: float) -> list[str]:
        """The retention policy: delete the records of keys not written for `max_idle_days`
        days and not live now. Returns the deleted keys.

        Raises:
            ValueError: `max_idle_days` is not a finite number > 0.
        """
        if (isinstance(max_idle_days, bool) or not isinstance(max_idle_days, int | float)
                or not math.isfinite(max_idle_days) or max_idle_days <= 0):
            raise ValueError(f"max_idle_days must be a finite number > 0, got {max_idle_days!r}")
        cutoff = time.time() - max_idle_days * 86_400
        deleted = []
        for key in self.store.list_keys():
            if self._live_handle(key) is not None:
                continue
            record = self.store.load(key)
            if record is not None and record.updated_at < cutoff and self.store.delete(key):
                deleted.append(key)
        return deleted

    def live_keys(self) -> list[str]:
        """The keys with a live agent, least recently used first (point in time)."""
        with self._lock:
            return list(self._live)

    def host_status(self) -> HostStatus:
        """Counts: live agents, activations and deactivations so far."""
        with self._lock:
            return HostStatus(live=len(self._live), activations=self._activations,
                              deactivations=self._deactivations, max_live=self.max_live,
                              sweeps=self._sweeps)

    def close(self) -> None:
        """Stop the reaper and every live agent (idempotent; the records stay)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            slots = list(self._live.values())
            self._changed.notify_all()
        self._stop.set()
        if self._reaper is not None and self._reaper is not threading.current_thread():
            self._reaper.join(10)
        for slot in slots:
            if not slot.handle.closed:
                self.system.stop_handle(slot.handle)

    def __enter__(self) -> AgentHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _closer(host: weakref.ref[AgentHost]) -> Any:
    # The system's shutdown closes the host without keeping a closed one alive.
    def close() -> None:
        live = host()
        if live is not None:
            live.close()

    return close


class HostTimer:
    """The handle `AgentHost.send_after` returns: `cancel()` prevents delivery (and lets the
    agent deactivate)."""

    __slots__ = ("_done", "_timer")

    def __init__(self, timer: TimerHandle, done: Any) -> None:
        self._timer, self._done = timer, done

    def cancel(self) -> None:
        """Cancel the timer (no-op once it fired)."""
        self._timer.cancel()
        self._done()


class _HostTurnStream(TurnStream):
    def __init__(self, host: AgentHost, key: str, prompt: str, **kwargs: Any) -> None:
        super().__init__(host._agent_name(key), prompt, agent_system=host.system, **kwargs)
        host._check_key(key)
        self._host, self._key = host, key

    def __enter__(self) -> _HostTurnStream:
        slot = self._host._acquire(self._key, self.timeout)
        try:
            from gen_agent._streaming import _Buffer

            handle = slot.handle
            buffer = _Buffer(self.max_buffered_events, None)
            ref = calls.run(handle, self._call(handle, buffer), self.timeout)
            self._started(handle, buffer, ref)
        finally:
            self._host._release(slot)
        return self


# ---------------------------------------------------------------------- under a supervisor
class _KeeperBackend(Backend):
    """The backend of a host's keeper agent: no session, and a prompt is refused."""

    @classmethod
    def start_session(cls, opts: dict[str, Any]) -> Any:
        return None

    @classmethod
    def prompt(cls, session: Any, prompt: str, context: Any) -> Any:
        raise DispatchError("host_keeper_takes_no_prompts")

    @classmethod
    def terminate_session(cls, session: Any) -> None:
        return None


class _HostKeeper(GenAgent):
    """The agent a supervisor runs for a host: its state is the host; stopping it closes
    the host (its agents stop, their records stay)."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        from gen_agent._context import current_handle

        module, backend, kwargs = opts["host"]
        system = current_handle().system  # the system the supervisor starts children in
        return {}, AgentHost(module, backend=backend, agent_system=system, **kwargs)

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        return NoReply(state)

    def terminate_agent(self, reason: Any, state: Any) -> None:
        state.close()


def host_spec(module: type, *, name: Any, backend: Any, restart: str = "permanent",
              shutdown_ms: Any = 30_000, **host_options: Any) -> Any:
    """A `Supervisor` child spec that runs an `AgentHost` named `name` (id `name`).

    Args:
        module: the `GenAgent` subclass, as for `AgentHost`.
        name: the host's name and the child id.
        backend: the agents' backend, as for `AgentHost`.
        restart: `"permanent"` (default), `"transient"` or `"temporary"`.
        shutdown_ms: the window for closing the host (its agents stop one by one).
        **host_options: every other `AgentHost` argument.

    Returns:
        A `ChildSpec`; `AgentHost.lookup(name)` finds the running host.
    """
    from gen_agent._supervisor import child_spec

    if "agent_system" in host_options:
        raise ValueError("host_spec: the supervisor's system is used; drop agent_system")
    return child_spec(_HostKeeper, name=name, backend=_KeeperBackend, restart=restart,  # type: ignore[arg-type]
                      shutdown_ms=shutdown_ms,
                      host=(module, backend, {"name": name, **host_options}))

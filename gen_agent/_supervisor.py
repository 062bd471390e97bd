"""`Supervisor`: OTP-style supervision trees of agents, with restarts that resume the session.

The Elixir original gives every agent `restart: temporary` and leaves restarting supervisors to the
caller's own OTP tree (docs/pages/contract.md#s2-3, #s9; docs: the client API reference). Python has
no OTP, so this module is that tree: child specs (`child_spec`, `supervisor_spec`), the three
restart types, the strategies one_for_one / one_for_all / rest_for_one, restart intensity, ordered
start, reverse-order shutdown with per-child windows, and nesting. See `docs/pages/supervision.md`.

Design: a supervisor is one worker thread with an inbox. Every change to its children happens
in that thread, one at a time: public methods post a call and wait for it; a child's exit
listener (`AgentHandle.on_exit`, run in the closing thread) only posts a message. Restarts are
therefore serialised, and a restart never races with `terminate_child` or `stop`.

Restart semantics (OTP):

- `"permanent"`: restarted whatever the exit reason.
- `"transient"`: restarted unless the reason is `"normal"`, `"shutdown"` or `("shutdown", x)`.
- `"temporary"`: never restarted; removed from the supervisor when it exits.

A restarted agent is a new incarnation under the same name: refs of the old one never match
it, its state and queue start afresh, and its conversation resumes only when the child spec
says `resume_session=True` and the backend implements `resume_session`.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, Literal

import msgspec
from loguru import logger

from gen_agent import telemetry
from gen_agent._accounting import SpendCap, own_budget
from gen_agent._child_spec import (
    INTENSITY_REASON,
    ChildEvent,
    ChildInfo,
    ChildSpec,
    Strategy,
    SupervisorSnapshot,
    SupervisorSpec,
    check_tree_args,
    child_spec,
    should_restart,
    start_failure_message,
    supervisor_spec,
)
from gen_agent._errors import (
    AgentDown,
    AgentStartError,
    CallTimeout,
    RequestError,
)
from gen_agent._reasons import redacted
from gen_agent._runtime import (
    ActorBase,
    log_exception,
)
from gen_agent._system import AgentSystem, current_system
from gen_agent._timers import wait_s

__all__ = [
    "ChildEvent",
    "ChildInfo",
    "ChildSpec",
    "Supervisor",
    "SupervisorSnapshot",
    "SupervisorSpec",
    "child_spec",
    "should_restart",
    "supervisor_spec",
]

class _Child:
    """A child's mutable record, owned by the supervisor thread."""

    __slots__ = ("last_exit_reason", "no_session", "proc", "ref", "restarts", "retiring",
                 "session_id", "spec")

    def __init__(self, spec: ChildSpec | SupervisorSpec) -> None:
        self.spec = spec
        self.proc: Any = None  # AgentHandle or Supervisor of the running incarnation
        self.ref: Any = None
        self.restarts = 0
        self.last_exit_reason: Any = None
        self.session_id: str | None = None
        # The last incarnation ended with no session id (a dead one is forgotten): a restart
        # does not pass the spec's own `resume_session_id` either.
        self.no_session = False
        self.retiring = False  # being drained / terminated on request: never restarted

    def info(self) -> ChildInfo:
        return ChildInfo(id=self.spec.id, ref=self.ref, type=self.spec.type,
                         restart=self.spec.restart, restarts=self.restarts,
                         last_exit_reason=self.last_exit_reason)


_names = itertools.count(1)
_live: weakref.WeakSet[Supervisor] = weakref.WeakSet()
_live_lock = threading.Lock()


# ---------------------------------------------------------------------- its mailbox
class _CallMsg(msgspec.Struct, frozen=True):
    """Run `fn` in the supervisor's thread; its result or exception goes to `future`."""
    fn: Any
    future: Any


class _ExitedMsg(msgspec.Struct, frozen=True):
    """A child's incarnation `proc` ended with `reason`."""
    child_id: Any
    proc: Any
    reason: Any


class _RetryMsg(msgspec.Struct, frozen=True):
    """Try again to start the children `ids` (a restart that failed part-way)."""
    ids: Any


class _StopMsg(msgspec.Struct, frozen=True):
    """Stop the children, then the supervisor, with `reason`."""
    reason: Any


class _SupervisorActor(ActorBase):
    """The actor a `Supervisor` runs on: one message at a time in `Supervisor._handle`, until
    the supervisor is done; then `_finish` answers what is left and tells the listeners."""

    def __init__(self, supervisor: Supervisor) -> None:
        super().__init__()
        self._supervisor = supervisor
        self.name = supervisor.name
        self.thread: int | None = None

    def on_start(self) -> None:
        self.thread = threading.get_ident()

    def on_receive(self, message: Any) -> Any:
        supervisor = self._supervisor
        supervisor._handle(message)
        if supervisor._done:
            self.stop_now()
        return None

    def on_stop(self) -> None:
        self._supervisor._finish()


class Supervisor:
    """A supervisor of agents (and of other supervisors), started on construction.

    Children start in order, each waiting for the previous one (an agent counts as started
    once `init_agent` and the backend session are done). When a child exits, the strategy
    decides what restarts: `"one_for_one"` only that child; `"one_for_all"` every child (the
    others are stopped first, in reverse order); `"rest_for_one"` that child and those started
    after it. Temporary siblings stopped by such a restart are removed, not restarted.

    Restart intensity: more than `max_restarts` restarts within `max_seconds` make the
    supervisor stop every child (reverse order) and exit with
    `("shutdown", "reached_max_restart_intensity")`.

    Args:
        children: `ChildSpec`s / `SupervisorSpec`s, in start order (ids unique).
        strategy: `"one_for_one"` (default), `"one_for_all"` or `"rest_for_one"`.
        max_restarts: restarts allowed within the window (count, >= 0; default 3).
        max_seconds: the intensity window in seconds (> 0; default 5).
        name: a label for logs and the child id when nested; default `"supervisor-N"`.
        listener: optional `fn(ChildEvent)`, told of every child start and exit, called in
            the supervisor thread: it must be quick and must not call this supervisor and
            wait (post to your own thread instead).
        system: the `AgentSystem` to start agents in (default: the current one).
        max_cost_usd (US dollars) / max_total_tokens (tokens): a cap over every agent below
            this supervisor together, nested supervisors' included (`self.budget`, a
            `gen_agent.SharedBudget`); once reached, their new turns are refused
            with `("budget_exceeded", BudgetExceeded)`. None (default): no shared cap.
        budget: a spend cap to use as `self.budget` instead (not with `max_cost_usd` /
            `max_total_tokens`): a `gen_agent.SharedBudget` shared with other trees, or a
            `gen_agent.ray.ClusterBudget`, so supervisors on several Ray nodes hold one cap
            (docs/pages/scale-out.md#limits-and-budgets-across-nodes). Default None.

    Raises:
        AgentStartError: `("failed_to_start_child", id, reason)` where `reason` is the child's
            start error reason; the children already started are stopped first.
        ValueError / TypeError: invalid arguments or specs.

    Attributes:
        name, strategy, max_restarts, max_seconds: as given.
        exit_reason: None while it runs; then `"shutdown"` (stopped),
            `("shutdown", "reached_max_restart_intensity")`, or
            `("shutdown", ("failed_to_start_child", id, reason))`.

    Thread-safety: every method may be called from any thread. Calls from the supervisor's
    own thread (a listener) must not wait on it; `stop` then only requests the stop. An
    agent child calling its supervisor from a callback waits while the supervisor is busy
    (e.g. stopping that very agent, up to its `shutdown_ms`).

    Mirrors: OTP `Supervisor` with gen_agent child specs (docs/pages/contract.md#s2-3, #s9; docs:
    the client API reference).
    """

    def __init__(self, children: Iterable[ChildSpec | SupervisorSpec] = (), *,
                 strategy: Strategy = "one_for_one", max_restarts: int = 3,
                 max_seconds: float = 5.0, name: Any = None,
                 listener: Callable[[ChildEvent], Any] | None = None,
                 system: AgentSystem | None = None, max_cost_usd: float | None = None,
                 max_total_tokens: int | None = None, budget: SpendCap | None = None,
                 _nested: bool = False, _budgets: tuple[SpendCap, ...] = ()) -> None:
        specs = tuple(children)
        check_tree_args(specs, strategy, max_restarts, max_seconds)
        # A cap over every agent below (nested supervisors' too): gen_agent._accounting.
        self.budget = own_budget("Supervisor", budget, max_cost_usd, max_total_tokens)
        self._budgets = _budgets + ((self.budget,) if self.budget is not None else ())
        self._seq = next(_names)
        self.name = name if name is not None else f"supervisor-{self._seq}"
        self.strategy = strategy
        self.max_restarts = max_restarts
        self.max_seconds = float(max_seconds)
        self._system = system if system is not None else current_system()
        self._listener = listener
        self._children: list[_Child] = []
        self._restart_times: deque[float] = deque()
        self._actor = _SupervisorActor(self)  # its mailbox and thread (the actor base)
        self._post_lock = threading.Lock()
        self._done = False
        self._stopped = threading.Event()
        self._exit_listeners: list[Callable[[Supervisor, Any], Any]] = []
        self.exit_reason: Any = None
        self._log = logger.bind(gen_agent_supervisor=self.name)
        self._nested = _nested
        self._actor.launch()
        with _live_lock:
            _live.add(self)
        if not _nested:
            # system shutdown stops the tree top-down instead of racing its restarts
            self._system.add_shutdown_hook(self.stop)
            self._system._track("supervisor", self)
            self._exit_listeners.append(lambda s, _r: s._system._untrack("supervisor", s))
        try:
            self._call(lambda: self._start_initial(specs))
        except BaseException:
            self._stopped.wait()
            raise

    def __repr__(self) -> str:
        state = "alive" if self.is_alive() else "stopped"
        return f"<Supervisor {self.name!r} {self.strategy} {state}>"

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ public API
    @property
    def system(self) -> AgentSystem:
        """The `AgentSystem` the agent children run in."""
        return self._system

    def is_alive(self) -> bool:
        """True until the supervisor has begun to exit."""
        return not self._done

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until the supervisor stopped (children included); False if `timeout` (s)
        expired first."""
        return self._stopped.wait(wait_s(timeout))

    def on_exit(self, listener: Callable[[Supervisor, Any], Any]) -> None:
        """Call `listener(supervisor, reason)` once when it has stopped (at once if it has).

        Runs in the supervisor thread after every child is stopped; must be quick.
        """
        with self._post_lock:
            if not self._stopped.is_set():
                self._exit_listeners.append(listener)
                return
        listener(self, self.exit_reason)

    def stop(self, timeout: float | None = None) -> None:
        """Stop every child in reverse start order (each within its `shutdown_ms`), then the
        supervisor, with reason `"shutdown"`. Idempotent.

        Args:
            timeout: seconds to wait for the stop to finish; None = forever. Ignored (the
                stop is only requested) when called from the supervisor's own thread.

        Raises:
            CallTimeout: the supervisor had not stopped within `timeout`.
        """
        self._post(_StopMsg("shutdown"))
        if threading.get_ident() == self._actor.thread:
            return
        if not self._stopped.wait(wait_s(timeout)):
            raise CallTimeout(timeout)

    def which_children(self) -> list[ChildInfo]:
        """The children in start order. Mirrors `Supervisor.which_children/1`.

        Raises:
            RequestError: `("supervisor_down", reason)` once the supervisor has stopped.
        """
        return self._call(lambda: [child.info() for child in self._children])

    def snapshot(self) -> SupervisorSnapshot:
        """A point-in-time `SupervisorSnapshot`: children, restart counts, intensity left.

        Read without waiting for the supervisor thread, so it answers at once even while the
        supervisor is stopping or restarting a child (and may then be a moment behind it);
        works after the supervisor stopped too. Read-only introspection (`gen_agent.observer`).
        """
        children = tuple(child.info() for child in list(self._children))
        since = time.monotonic() - self.max_seconds
        recent = sum(1 for t in list(self._restart_times) if t > since)
        return SupervisorSnapshot(
            name=self.name, strategy=self.strategy, alive=self.is_alive(),
            max_restarts=self.max_restarts, max_seconds=self.max_seconds,
            restarts_in_window=recent, intensity_left=max(0, self.max_restarts - recent),
            children=children, exit_reason=self.exit_reason)

    def whereis(self, child_id: Any) -> Any:
        """The running incarnation of `child_id` (`AgentRef` / `Supervisor`), or None."""
        return self._call(lambda: getattr(self._find(child_id), "ref", None))

    def start_child(self, spec: ChildSpec | SupervisorSpec) -> Any:
        """Add `spec` after the existing children and start it; return its ref.

        Raises:
            ValueError: a child with that id exists. AgentStartError, AlreadyStarted: the
                start failed (the spec is not kept). RequestError: the supervisor is down.

        Mirrors: `Supervisor.start_child/2`.
        """
        check_tree_args([spec], self.strategy, self.max_restarts, self.max_seconds)
        return self._call(lambda: self._add_child(spec))

    def terminate_child(self, child_id: Any, *, drain: bool = False,
                        timeout: float | None = None) -> None:
        """Stop a child without restarting it. A temporary child is then removed; the others
        stay listed, not running, until `restart_child` or `delete_child`.

        Args:
            drain: for an agent, drain it first (`gen_agent.drain`: its active turn finishes,
                queued prompts are rejected with "draining") in the calling thread, so the
                supervisor keeps serving other children meanwhile; then stop it if it still
                runs. Default False: stop it within its `shutdown_ms`.
            timeout: seconds the drain may take; None = forever.

        Raises:
            RequestError: "not_found" (no such child) or `("supervisor_down", reason)`.

        Mirrors: `Supervisor.terminate_child/2`.
        """
        if drain:
            proc = self._call(lambda: self._begin_retire(child_id))
            if proc is not None and not isinstance(proc, Supervisor):
                _drain_quietly(proc, timeout)
        self._call(lambda: self._terminate_by_id(child_id))

    def restart_child(self, child_id: Any) -> Any:
        """Start a listed child that is not running; return its ref.

        Raises:
            RequestError: "not_found", "running", or `("supervisor_down", reason)`.
            AgentStartError, AlreadyStarted: the start failed.

        Mirrors: `Supervisor.restart_child/2`.
        """
        return self._call(lambda: self._restart_by_id(child_id))

    def delete_child(self, child_id: Any) -> None:
        """Remove a listed child that is not running.

        Raises:
            RequestError: "not_found", "running", or `("supervisor_down", reason)`.

        Mirrors: `Supervisor.delete_child/2`.
        """
        self._call(lambda: self._delete_by_id(child_id))

    # ------------------------------------------------------------------ mailbox
    def _post(self, message: Any) -> bool:
        with self._post_lock:
            if self._done:
                return False
            self._actor.post(message)
            return True

    def _call(self, fn: Callable[[], Any]) -> Any:
        if threading.get_ident() == self._actor.thread:
            return fn()
        future: Future[Any] = Future()
        if not self._post(_CallMsg(fn, future)):
            raise RequestError(("supervisor_down", self.exit_reason))
        return future.result()

    def _handle(self, message: Any) -> None:
        try:
            match message:
                case _CallMsg():
                    self._run_call(message.fn, message.future)
                case _ExitedMsg():
                    self._on_exit(message.child_id, message.proc, message.reason)
                case _RetryMsg():
                    self._restart_group(message.ids, retry=True)
                case _StopMsg():
                    self._shutdown(message.reason)
        except Exception as exc:  # noqa: BLE001 - a supervisor bug stops the tree, logged
            log_exception(self._log, "ERROR", "gen_agent supervisor failed", exc)
            self._shutdown(("shutdown", ("supervisor_failed", type(exc).__name__)))

    @staticmethod
    def _run_call(fn: Callable[[], Any], future: Future[Any]) -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            future.set_exception(exc)

    # ------------------------------------------------------------------ starting
    def _find(self, child_id: Any) -> _Child | None:
        for child in self._children:
            if child.spec.id == child_id:
                return child
        return None

    def _require(self, child_id: Any) -> _Child:
        child = self._find(child_id)
        if child is None:
            raise RequestError("not_found")
        return child

    def _start_initial(self, specs: Sequence[ChildSpec | SupervisorSpec]) -> None:
        for spec in specs:
            child = _Child(spec)
            try:
                self._start(child)
            except Exception as exc:
                reason = getattr(exc, "reason", type(exc).__name__)
                self._shutdown(("shutdown", ("failed_to_start_child", spec.id, reason)))
                failed = ("failed_to_start_child", spec.id, reason)
                raise AgentStartError(failed, start_failure_message(failed, exc)) from exc
            self._children.append(child)

    def _add_child(self, spec: ChildSpec | SupervisorSpec) -> Any:
        if self._find(spec.id) is not None:
            raise ValueError(f"a child with id {spec.id!r} already exists")
        child = _Child(spec)
        self._start(child)
        self._children.append(child)
        return child.ref

    def _start(self, child: _Child) -> None:
        """Start one incarnation of `child` (raises on failure) and watch its exit."""
        spec = child.spec
        if isinstance(spec, SupervisorSpec):
            proc = Supervisor(spec.children, strategy=spec.strategy,
                              max_restarts=spec.max_restarts, max_seconds=spec.max_seconds,
                              name=spec.id, system=self._system, budget=spec.budget,
                              _nested=True, _budgets=self._budgets)
            ref = proc
        else:
            opts = dict(spec.opts)
            if spec.resume_session and child.session_id is not None:
                opts["resume_session_id"] = child.session_id
            elif child.no_session:
                opts.pop("resume_session_id", None)
            if self._budgets:
                opts["budgets"] = (*(opts.get("budgets") or ()), *self._budgets)
            shutdown = "infinity" if spec.shutdown_ms is None else spec.shutdown_ms
            ref = self._system.start_agent(spec.module, name=spec.id, backend=spec.backend,
                                           shutdown_ms=shutdown, **opts)
            proc = ref._handle
        child.proc, child.ref, child.retiring = proc, ref, False
        child_id = spec.id
        proc.on_exit(lambda p, reason: self._post(_ExitedMsg(child_id, p, reason)))
        self._emit("started", child_id, ref, None)

    def _emit(self, kind: Literal["started", "exited"], child_id: Any, ref: Any,
              reason: Any) -> None:
        if self._listener is None:
            return
        try:
            self._listener(ChildEvent(kind=kind, id=child_id, ref=ref, reason=reason))
        except Exception as exc:  # noqa: BLE001 - a listener must not break supervision
            log_exception(self._log, "WARNING", "gen_agent supervisor listener raised", exc)

    # ------------------------------------------------------------------ exits and restarts
    def _on_exit(self, child_id: Any, proc: Any, reason: Any) -> None:
        child = self._find(child_id)
        if child is None or child.proc is not proc:
            return  # an incarnation we stopped ourselves, or an older one
        self._ended(child, reason)
        if child.retiring:
            return
        if not should_restart(child.spec.restart, reason):
            if child.spec.restart == "temporary":
                self._children.remove(child)
            return
        self._log.warning("gen_agent supervisor child exited ({}); restarting",
                          redacted(reason))
        if not self._charge_restart():
            self._give_up()
            return
        self._restart_group(self._group_of(child), retry=False)

    def _ended(self, child: _Child, reason: Any) -> None:
        proc, ref = child.proc, child.ref
        child.proc = child.ref = None
        child.last_exit_reason = reason
        _note_session_id(child, proc)
        self._emit("exited", child.spec.id, ref, reason)

    def _charge_restart(self) -> bool:
        now = time.monotonic()
        self._restart_times.append(now)
        while self._restart_times and self._restart_times[0] <= now - self.max_seconds:
            self._restart_times.popleft()
        return len(self._restart_times) <= self.max_restarts

    def _give_up(self) -> None:
        self._log.error("gen_agent supervisor reached its maximum restart intensity")
        self._shutdown(INTENSITY_REASON)

    def _group_of(self, failed: _Child) -> list[Any]:
        """The ids to restart after `failed` exited, stopping the running others first."""
        if self.strategy == "one_for_one":
            return [failed.spec.id]
        index = self._children.index(failed)
        group = self._children if self.strategy == "one_for_all" else self._children[index:]
        restart_ids = []
        for child in list(group):
            if child is failed:
                restart_ids.append(child.spec.id)
                continue
            if child.proc is None:
                continue  # not running: left as it is
            restart_ids.append(child.spec.id)
        for child in reversed([c for c in group if c is not failed and c.proc is not None]):
            self._stop_child(child)
            if child.spec.restart == "temporary":
                self._children.remove(child)
                restart_ids.remove(child.spec.id)
        return restart_ids

    def _restart_group(self, ids: list[Any], *, retry: bool) -> None:
        if retry and not self._charge_restart():
            self._give_up()
            return
        for position, child_id in enumerate(ids):
            child = self._find(child_id)
            if child is None or child.proc is not None:
                continue
            try:
                self._start(child)
            except Exception as exc:  # noqa: BLE001 - retried; each attempt counts (OTP)
                log_exception(self._log, "ERROR", "gen_agent supervisor restart failed", exc)
                # A session that cannot be resumed must not block the restart for good.
                child.session_id = None
                self._post(_RetryMsg(ids[position:]))
                return
            child.restarts += 1
            if telemetry.attached(telemetry.SUPERVISOR_RESTART):
                telemetry.execute(telemetry.SUPERVISOR_RESTART, {"restarts": child.restarts},
                                  {"supervisor": self.name, "child_id": child_id})

    # ------------------------------------------------------------------ stopping
    def _stop_child(self, child: _Child) -> None:
        """Stop the running incarnation of `child` within its shutdown window."""
        proc = child.proc
        if proc is None:
            return
        child.proc = None  # its exit message is now stale
        child.ref, ref = None, child.ref
        window = child.spec.shutdown_ms
        if isinstance(proc, Supervisor):
            proc._post(_StopMsg("shutdown"))
            if not proc.wait_stopped(None if window is None else window / 1000):
                self._log.error("gen_agent nested supervisor did not stop in its window")
            reason = proc.exit_reason
        else:
            if not proc.closed:
                self._system._stop_handle(proc, "shutdown")
            reason = proc.exit_reason
        child.last_exit_reason = reason
        _note_session_id(child, proc)
        self._emit("exited", child.spec.id, ref, reason)

    def _begin_retire(self, child_id: Any) -> Any:
        child = self._require(child_id)
        child.retiring = True
        return child.proc

    def _terminate_by_id(self, child_id: Any) -> None:
        child = self._require(child_id)
        child.retiring = True
        self._stop_child(child)
        if child.spec.restart == "temporary":
            self._children.remove(child)

    def _restart_by_id(self, child_id: Any) -> Any:
        child = self._require(child_id)
        if child.proc is not None:
            raise RequestError("running")
        self._start(child)
        return child.ref

    def _delete_by_id(self, child_id: Any) -> None:
        child = self._require(child_id)
        if child.proc is not None:
            raise RequestError("running")
        self._children.remove(child)

    def _shutdown(self, reason: Any) -> None:
        if self._done:
            return
        if reason != "shutdown":
            self._log.error("gen_agent supervisor stopping ({})", redacted(reason))
        for child in reversed(self._children):
            self._stop_child(child)
        self.exit_reason = reason
        with self._post_lock:
            self._done = True

    def _finish(self) -> None:
        # Answer every call still queued, then tell the exit listeners.
        with self._post_lock:
            self._done = True
            if self.exit_reason is None:
                self.exit_reason = "shutdown"
        down = RequestError(("supervisor_down", self.exit_reason))
        inbox = self._actor.actor_inbox
        while not inbox.empty():
            message = inbox.get()  # not empty, and this thread is its only reader
            if type(message) is _CallMsg:
                message.future.set_exception(down)
        with self._post_lock:
            self._stopped.set()
            listeners, self._exit_listeners = self._exit_listeners, []
        for listener in listeners:
            try:
                listener(self, self.exit_reason)
            except Exception as exc:  # noqa: BLE001 - a listener must not break the exit
                self._log.warning("gen_agent supervisor exit listener raised {}",
                                  type(exc).__name__)


def _drain_quietly(handle: Any, timeout: float | None) -> None:
    """Drain one agent incarnation; any failure leaves the stop to `terminate_child`."""
    from gen_agent._agent_ref import AgentRef

    try:
        AgentRef(handle).drain(timeout)
    except (CallTimeout, RequestError, AgentDown, LookupError) as exc:
        logger.debug("gen_agent drain before terminate_child ended early ({})",
                     type(exc).__name__)


def _stop_all(system: AgentSystem, timeout: float | None = 30.0) -> None:
    """Stop every live top-level supervisor of `system`, newest first (test teardown helper;
    nested ones stop with their parent)."""
    with _live_lock:
        supervisors = [s for s in _live if s._system is system and s.is_alive()
                       and not s._nested]
    for supervisor in sorted(supervisors, key=lambda s: s._seq, reverse=True):
        try:
            supervisor.stop(timeout)
        except CallTimeout:
            logger.warning("gen_agent supervisor did not stop within {} s", timeout)


def _note_session_id(child: _Child, proc: Any) -> None:
    """Keep the session id an ended incarnation last saw, for a resume on restart. An agent
    handle whose id was forgotten (its session did not exist any more: None) clears it."""
    if not hasattr(proc, "session_id"):
        return
    session_id = proc.session_id
    if session_id is None or (isinstance(session_id, str) and session_id):
        child.session_id = session_id
        child.no_session = session_id is None

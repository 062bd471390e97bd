"""`AgentSystem`: the name registry and the application-level agent supervisor
(docs/pages/contract.md#s9; docs: Supervision and pools).

One default system is created lazily on first use and shut down at interpreter exit (or by
`gen_agent.shutdown()`). Tests and embedders can open an isolated one with
`with AgentSystem() as system: ...`: while it is open, the module-level client functions
(`gen_agent.ask`, ...) address it instead of the default one, and leaving the block stops every
agent it started. Agents are `temporary` children: never restarted (restarting supervisors
are `gen_agent.Supervisor`).
"""

from __future__ import annotations

import atexit
import contextlib
import time
from typing import Any

import pykka
from loguru import logger

from gen_agent._agent_ref import AgentRef
from gen_agent._context import (
    active_system,
    current_handle,
    default_system,
    enter_system,
    leave_system,
    set_default_system,
    systems_lock,
)
from gen_agent._errors import AgentStartError, AlreadyStarted, RequestError
from gen_agent._runtime import (
    AgentActor,
    AgentHandle,
    DeferredReply,
    InterruptMsg,
    Registry,
    StopMsg,
    build_options,
    split_options,
    validate_shutdown,
)

__all__ = ["AgentSystem", "current_system", "shutdown"]

class AgentSystem(Registry):
    """A registry of named agents plus the supervisor that owns them. Thread-safe.

    Names are any hashable value and unique within the system. A name is taken from the
    moment its agent starts initializing until the agent has stopped, then reusable at once;
    a new agent under an old name is a new incarnation (old refs never match it).

    Use as a context manager for isolation (tests): entering makes it the system that the
    module-level client functions use; leaving stops all its agents (`shutdown`).

    Mirrors: `GenAgent.Registry` + `GenAgent.AgentSupervisor` (docs/pages/contract.md#s9; docs:
    Supervision and pools).
    """

    def __init__(self) -> None:
        super().__init__()  # the names (`Registry`, which the runtime uses)
        self._shutdown_hooks: list[Any] = []
        self._supervisors: list[Any] = []
        self._pools: list[Any] = []

    def add_shutdown_hook(self, hook: Any) -> None:
        """Run `hook()` first when this system shuts down (newest hook first).

        Supervisors register themselves here so that shutdown stops them before their
        children, instead of racing their restarts.
        """
        with self._lock:
            self._shutdown_hooks.append(hook)

    def whereis(self, name: Any) -> Any:
        """Return the `AgentRef` of `name`, or None (dead agents are ignored). Never messages
        the agent. Mirrors `GenAgent.whereis/1`."""
        handle = self._agents.get(name)
        return None if handle is None or handle.closed else AgentRef(handle)

    def list_agents(self) -> list[Any]:
        """Return the registered names (a point-in-time, unordered list). Mirrors `list/0`."""
        with self._lock:
            return [name for name, handle in self._agents.items() if not handle.closed]

    def supervisors(self) -> list[Any]:
        """Return the running top-level `Supervisor`s of this system, oldest first (a
        point-in-time list; nested supervisors are reached through their parent's
        `snapshot()` / `which_children()`, a `Pool`'s through `Pool.supervisor`). Read-only
        introspection, e.g. for `gen_agent.observer`."""
        with self._lock:
            return [s for s in self._supervisors if s.is_alive()]

    def pools(self) -> list[Any]:
        """Return the running `Pool`s of this system, oldest first (a point-in-time list).
        Read-only introspection, e.g. for `gen_agent.observer`."""
        with self._lock:
            return [p for p in self._pools if not p.wait_stopped(0)]

    def _track(self, kind: str, item: Any) -> None:
        """Add a started supervisor (`kind="supervisor"`) or pool (`"pool"`) to the lists
        `supervisors()` / `pools()` read."""
        with self._lock:
            (self._supervisors if kind == "supervisor" else self._pools).append(item)

    def _untrack(self, kind: str, item: Any) -> None:
        with self._lock:
            items = self._supervisors if kind == "supervisor" else self._pools
            if item in items:
                items.remove(item)

    # ------------------------------------------------------------------ start / stop
    def start_agent(self, module: type, *, name: Any, backend: Any, **opts: Any) -> Any:
        """Start an agent in this system. See `gen_agent.start_agent` for the full contract."""
        handle, init_reply = self._launch(module, name=name, backend=backend, **opts)
        init_reply.wait()  # raises AgentStartError after a failed init
        return AgentRef(handle)

    def _launch(self, module: type, *, name: Any, backend: Any,
                **opts: Any) -> tuple[AgentHandle, DeferredReply]:
        """Register `name` and start its actor; return the handle and the reply that
        `init_agent` answers (the threaded and async start both wait on it)."""
        shutdown_ms = validate_shutdown(opts.get("shutdown_ms"))
        reserved, forwarded = split_options(opts)
        with self._lock:
            existing = self._agents.get(name)
            if existing is not None and not existing.closed:
                raise AlreadyStarted(name, AgentRef(existing))
            handle = AgentHandle(self, name, module, shutdown_ms)
            self._agents[name] = handle
        try:
            options = build_options(reserved, backend)
        except ValueError as exc:
            self._unregister(handle)
            logger.bind(gen_agent=name).error(
                "gen_agent initialization failed (error: ValueError in a reserved option)")
            raise AgentStartError(("init_failed", "error", "ValueError"),
                                  f"init_failed: {exc}") from exc
        init_reply = DeferredReply()
        try:
            AgentActor.start(handle, module, backend, options, forwarded, init_reply)
        except BaseException:
            self._unregister(handle)
            raise
        return handle, init_reply

    def stop(self, name: Any) -> None:
        """Stop `name` gracefully within its `shutdown_ms`, then kill it. See `gen_agent.stop`.

        Raises:
            AgentNotFound: no such agent.
            RequestError: reason "self_stop" when called from the agent's own threads.
        """
        self.stop_handle(self.lookup(name))

    def stop_handle(self, handle: AgentHandle) -> None:
        """Stop this incarnation gracefully, as `stop` does (no-op if it already stopped).

        Raises:
            RequestError: reason "self_stop" when called from the agent's own threads.
        """
        if handle.closed:
            return
        self._check_stop(handle)
        self._stop_handle(handle, "shutdown")

    @staticmethod
    def _check_stop(handle: AgentHandle) -> None:
        if current_handle() is handle:
            raise RequestError("self_stop")

    def _stop_handle(self, handle: AgentHandle, reason: Any) -> None:
        message = StopMsg(reason, handle.reply())
        if not handle.run_if_hibernated(message):  # a hibernated agent stops in this thread
            handle.send(message)
        window = handle.shutdown_ms
        if not handle.exited.wait(None if window is None else window / 1000):
            self._kill(handle)

    def _kill(self, handle: AgentHandle) -> None:
        # Python threads cannot be killed: the agent is cut off (unregistered, callers failed
        # with AgentDown("killed")) and its thread ends, without cleanup, when it next runs.
        logger.bind(gen_agent=handle.name).warning(
            "gen_agent agent did not stop within its shutdown window; killed")
        self._unregister(handle)
        handle.close("killed")
        # Wake the actor (past the closed handle) so its thread ends once the blocking
        # callback returns, even if nothing else is ever sent to it.
        if handle.actor_ref is not None:
            with contextlib.suppress(pykka.ActorDeadError):
                handle.actor_ref.tell(InterruptMsg())

    def shutdown(self) -> None:
        """Stop every agent of this system: registered shutdown hooks (supervisors) run
        first, then every remaining agent is asked to stop at once (newest first), and each
        gets its own `shutdown_ms` window, counted from that request, before it is killed.
        Hibernated agents (idle, without a thread) are stopped afterwards one after another,
        so that stopping 100,000 of them never needs 100,000 threads at once.
        Idempotent. Mirrors a dynamic supervisor's shutdown (children stopped together)."""
        with self._lock:
            hooks, self._shutdown_hooks = self._shutdown_hooks[::-1], []
        for hook in hooks:
            try:
                hook()
            except Exception as exc:  # noqa: BLE001 - one failing hook must not stop shutdown
                logger.warning("gen_agent shutdown hook raised {}", type(exc).__name__)
        with self._lock:
            handles = [h for h in reversed(list(self._agents.values()))
                       if not h.closed and current_handle() is not h]
        awake = [h for h in handles if not h.hibernated]
        started = time.monotonic()
        for handle in awake:
            handle.send(StopMsg("shutdown", handle.reply()))
        for handle in awake:
            window = handle.shutdown_ms
            remaining = None if window is None else window / 1000 - (time.monotonic() - started)
            if not handle.exited.wait(None if remaining is None else max(0.0, remaining)):
                self._kill(handle)
        for handle in handles:
            if not handle.exited.is_set() and not handle.closed:
                self._stop_handle(handle, "shutdown")

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> AgentSystem:
        enter_system(self)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.shutdown()
        finally:
            leave_system(self)


def current_system() -> AgentSystem:
    """Return the innermost open `AgentSystem`, else the default one (created lazily)."""
    system = active_system()
    if system is not None:
        return system  # type: ignore[no-any-return]
    with systems_lock:
        system = active_system()
        if system is None:
            system = AgentSystem()
            set_default_system(system)
            atexit.register(_shutdown_default)
        return system  # type: ignore[no-any-return]


def _shutdown_default() -> None:
    system = default_system()
    if system is not None:
        system.shutdown()


def shutdown() -> None:
    """Stop every agent of the default system (also run automatically at interpreter exit).

    Mirrors stopping the `:gen_agent` application.
    """
    _shutdown_default()

"""`AgentHandle`: one incarnation of an agent, as seen from outside its actor thread.

It owns what callers need to talk to the actor safely: the pykka `ActorRef`, a lock that
serialises "is the agent still accepting?" with sending, and the set of outstanding replies,
so that however the agent ends every waiting caller is answered (`close`).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pykka

from gen_agent._reply import Reply, fail_all
from gen_agent.errors import AgentDown


class AgentHandle:
    """The per-incarnation link between callers and one agent actor. Thread-safe."""

    __slots__ = (
        "__weakref__", "_lock", "actor_ref", "closed", "exit_reason", "exited", "module",
        "name", "outstanding", "shutdown_ms", "system",
    )

    def __init__(self, system: Any, name: Any, module: type, shutdown_ms: int | None) -> None:
        self.system = system
        self.name = name
        self.module = module
        self.shutdown_ms = shutdown_ms
        self.actor_ref: pykka.ActorRef[Any] | None = None
        self.outstanding: set[Reply] = set()
        self.closed = False
        self.exited = threading.Event()
        self.exit_reason: Any = None
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        """True until the agent stopped accepting messages."""
        return not self.closed

    def reply(self) -> Reply:
        """A new reply tracked by this agent."""
        return Reply(self.outstanding)

    def send(self, message: Any) -> bool:
        """Put `message` in the actor's mailbox; False if the agent no longer accepts."""
        with self._lock:
            if self.closed or self.actor_ref is None:
                return False
            try:
                self.actor_ref.tell(message)
            except pykka.ActorDeadError:
                return False
            return True

    def call(self, make: Any, timeout: float | None) -> Any:
        """Send `make(reply)` and wait for the answer (`timeout` seconds, None = forever).

        Raises:
            AgentDown: the agent ended before or while answering.
            CallTimeout: no answer within `timeout`.
        """
        reply = self.reply()
        if not self.send(make(reply)):
            reply.fail(AgentDown(self.exit_reason or "noproc"))
        return reply.wait(timeout)

    def close(self, reason: Any) -> None:
        """Stop accepting, record the exit reason, fail every outstanding reply."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.exit_reason = reason
        fail_all(self.outstanding, AgentDown(reason))

    def tell_unchecked(self, message: Any) -> None:
        """Send without the lock (turn tasks and timers; losing it after death is fine)."""
        ref = self.actor_ref
        if ref is not None and not self.closed:
            # the agent may die meanwhile; its turn messages then no longer matter
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(message)

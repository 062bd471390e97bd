"""`Registry`: the names of one `AgentSystem`, as the runtime sees them.

The part of the registry the runtime uses: name lookup (with the reason a name is gone), the
unregistration of an ended incarnation and the memory of recent exits. `gen_agent._system`'s
`AgentSystem` extends it with starting, stopping and supervising agents, so the runtime never
calls up into the API to resolve or release a name.
"""

from __future__ import annotations

import threading
from typing import Any

from gen_agent._errors import AgentNotFound
from gen_agent._runtime.handle import AgentHandle

_ENDED_KEPT = 256  # ended incarnations remembered for AgentNotFound's last_exit (count)


class Registry:
    """Names to live `AgentHandle`s, thread-safe; see `gen_agent.AgentSystem`."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._agents: dict[Any, AgentHandle] = {}
        # The last few ended incarnations by name, so a by-name call that misses can say why
        # the name is gone (bounded: a long-lived system must not grow with every stop).
        self._ended: dict[Any, tuple[Any, BaseException | None]] = {}

    def lookup(self, name: Any) -> AgentHandle:
        """Return the live handle registered under `name`.

        Raises:
            AgentNotFound: nothing (alive) is registered under `name`.
        """
        handle = self._agents.get(name)
        if handle is None or handle.closed:
            raise self._not_found(name, handle)
        return handle

    def _not_found(self, name: Any, handle: AgentHandle | None) -> AgentNotFound:
        """`AgentNotFound` for `name`, naming the exit of its last incarnation when known."""
        if handle is not None and handle.closed:
            ended: tuple[Any, BaseException | None] | None = (handle.exit_reason,
                                                               handle.exit_cause)
        else:
            try:
                ended = self._ended.get(name)
            except TypeError:  # an unhashable name was never registered
                ended = None
        if ended is None or ended[0] is None:
            return AgentNotFound(name)
        error = AgentNotFound(name, last_exit=ended[0])
        error.__cause__ = ended[1]
        return error

    def handle_of(self, name: Any) -> AgentHandle | None:
        """The handle registered under `name` (alive or not), or None.

        Raises:
            TypeError: `name` is not hashable (no name can be).
        """
        return self._agents.get(name)

    def _unregister(self, handle: AgentHandle) -> None:
        with self._lock:
            if self._agents.get(handle.name) is handle:
                del self._agents[handle.name]

    def _remember_exit(self, handle: AgentHandle) -> None:
        """Keep a closed incarnation's exit reason and cause for `AgentNotFound.last_exit`
        (the newest `_ENDED_KEPT` names; a name registered again replaces its entry)."""
        with self._lock:
            self._ended.pop(handle.name, None)
            self._ended[handle.name] = (handle.exit_reason, handle.exit_cause)
            if len(self._ended) > _ENDED_KEPT:
                del self._ended[next(iter(self._ended))]

"""Thread-local identity of the agent a thread works for (docs/pages/contract.md#s2-22).

Set in the agent's actor thread and in its turn task threads, so that `current_name()` works
there and a synchronous self-stop can be refused (§2.19).
"""

from __future__ import annotations

import threading
from typing import Any

_local = threading.local()


def set_current(name: Any, handle: Any) -> None:
    """Mark the calling thread as working for the agent `name` (internal `handle`)."""
    _local.name = name
    _local.handle = handle


def current_name() -> Any:
    """Return the registered name of the agent whose thread calls this, else None.

    Works in the agent's own thread (every agent-side callback, including `init_agent`) and in
    its turn tasks (`handle_stream_event`, the backend's `prompt`); threads spawned by
    callbacks get None. Mirrors `GenAgent.current_name/0`.
    """
    return getattr(_local, "name", None)


def set_request(info: Any) -> None:
    """Record the request the actor thread is handling now (None when none)."""
    _local.request = info


def current_request() -> Any:
    """Return the `RequestInfo` of the request whose callback calls this, else None.

    Set in the agent's thread while `pre_turn`, `handle_response`, `handle_error` and
    `post_turn` run for a request (its ref, origin, prompt, attempt and `RequestOptions`), so
    that `handle_error` can read the prompt that failed and retry it. None in the other
    callbacks and in other threads. In the spirit of `current_name()`; the Elixir original
    passes nothing comparable.
    """
    return getattr(_local, "request", None)


def current_handle() -> Any:
    """The internal handle of the agent the calling thread works for, else None."""
    return getattr(_local, "handle", None)


# The caller's trace context, captured at the client call and carried with the request to its
# turns (which run on other threads). None unless an instrumentation (gen_agent.otel) installed
# a capture function, so an uninstrumented call pays one global read (the runtime reads
# `trace_capture` itself, without a call).
trace_capture: Any = None


def set_trace_context_capture(capture: Any) -> None:
    """Install `capture()` (returns an opaque context object), or None to stop capturing."""
    global trace_capture
    trace_capture = capture


def capture_trace_context() -> Any:
    """The calling thread's trace context from the installed capture function, else None."""
    capture = trace_capture
    return None if capture is None else capture()


# Makes a turn's trace context current in its turn task while the backend runs (so a client
# library's own instrumentation nests under the turn's span): `activate(context)` returns a
# context manager (given the turn's TurnContext). None unless gen_agent.otel is instrumented.
_activate_trace_carrier: Any = None


def set_trace_carrier_activation(activate: Any) -> None:
    """Install `activate(turn_context) -> context manager`, or None to stop."""
    global _activate_trace_carrier
    _activate_trace_carrier = activate


def trace_carrier_activation() -> Any:
    """The installed activation function, or None."""
    return _activate_trace_carrier


# The registries (`gen_agent.AgentSystem`s) a by-name call may address: the open ones,
# innermost last, then the default. Kept here, below every layer, so the runtime and the
# backends can resolve a name without importing the API that owns the registry.
_open_systems: list[Any] = []
_default_system: Any = None
systems_lock = threading.Lock()


def enter_system(system: Any) -> None:
    """Make `system` the innermost open registry (`with AgentSystem():`)."""
    with systems_lock:
        _open_systems.append(system)


def leave_system(system: Any) -> None:
    with systems_lock:
        if system in _open_systems:
            _open_systems.remove(system)


def set_default_system(system: Any) -> None:
    """Install the default registry (done once, lazily, by `gen_agent._system`)."""
    global _default_system
    _default_system = system


def default_system() -> Any:
    """The default registry, or None before it was made."""
    return _default_system


def active_system() -> Any:
    """The innermost open registry, else the default one; None before any exists."""
    if _open_systems:
        return _open_systems[-1]
    return _default_system

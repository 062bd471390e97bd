"""In-process telemetry: attach handlers to event names, execute events (docs/pages/contract.md#s8;
docs: Telemetry and logging).

A tiny synchronous pub/sub modelled on Erlang's `:telemetry`. Event names are tuples of str,
e.g. `("gen_agent", "turn", "stop")`; the constants below name every event gen_agent emits.
Handlers are called as `fn(event_name, measurements, metadata, config)` in the emitting thread
(for agent events: the agent's actor thread), in attach order. A handler that raises is
detached (all its event names) and a warning naming the handler id and the exception type is
logged; the other handlers still run.

The handler table is one process-wide registry guarded by one lock. It is copy-on-write:
`execute` takes no lock and, when nothing is attached to the name, costs one dict lookup.
A handler detached from another thread may still receive an event that was already being
executed. Tests attach with unique ids and detach after themselves (`TelemetryRecorder`).

Mirrors: `GenAgent.Telemetry` and `:telemetry.attach/4`, `attach_many/4`, `detach/1`,
`execute/3`, `list_handlers/1`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Final, NamedTuple, Self

import msgspec
from loguru import logger

from gen_agent._deprecate import moved_names as _moved_names

__all__ = [
    "EVENTS",
    "EVENT_RECEIVED",
    "HALTED",
    "INPUT_REJECTED",
    "MAILBOX_QUEUED",
    "PROMPT_ERROR",
    "PROMPT_START",
    "PROMPT_STOP",
    "REQUEST_QUEUED",
    "STATE_CHANGED",
    "SUPERVISOR_RESTART",
    "TERMINATED",
    "TIMER_FAILED",
    "TOOL_PERMISSION",
    "TURN_CANCELLED",
    "TURN_DISCARDED",
    "TURN_ERROR",
    "TURN_JOINED",
    "TURN_REJECTED",
    "TURN_START",
    "TURN_STOP",
    "EventName",
    "Handler",
    "HandlerAlreadyAttached",
    "HandlerFunction",
    "TelemetryRecord",
    "TelemetryRecorder",
    "ToolSpan",
    "attach",
    "attach_many",
    "attached",
    "detach",
    "execute",
    "list_handlers",
]

EventName = tuple[str, ...]
"""An event name: a tuple of strings, `("gen_agent", "turn", "start")`."""
HandlerFunction = Callable[[EventName, dict[str, Any], dict[str, Any], Any], Any]
"""A handler: `handler(event, measurements, metadata, config)`; its result is ignored."""

TURN_START: Final = ("gen_agent", "turn", "start")
"""Measurements `system_time, queue_wait_ms, queue_depth`; metadata `agent, ref, attempt,
origin, backend, request_model, session_id, trace_context, trace_carrier`."""
TURN_STOP: Final = ("gen_agent", "turn", "stop")
"""Measurements `duration_ms` (dispatch → outcome, agent clock), `backend_duration_ms`, plus
`input_tokens`, `output_tokens` (tokens) and `cost_usd` (US dollars) when the backend reported
them; metadata `agent, ref, attempt, origin, model, provider, finish_reason, usage, cost_usd,
session_id, tool_calls`."""
TURN_ERROR: Final = ("gen_agent", "turn", "error")
"""Measurements `duration_ms`; metadata `agent, ref, attempt, origin, reason_kind, error_type,
model, provider, usage, session_id, tool_calls`."""
TURN_REJECTED: Final = ("gen_agent", "turn", "rejected")
"""Measurements `system_time`; metadata `agent, ref, attempt, origin, reason_kind`."""
TURN_CANCELLED: Final = ("gen_agent", "turn", "cancelled")
"""Measurements `system_time, queue_depth`; metadata `agent, ref, attempt, origin, reason_kind`."""
TURN_DISCARDED: Final = ("gen_agent", "turn", "discarded")
"""Measurements `system_time`; metadata `agent, ref, attempt, origin, by` (the ref of the
`busy="rollback"` request that rolled the running turn back). Emitted before that turn's
`TURN_ERROR` ("interrupted"); its exchange is dropped from the conversation. An extension."""
TURN_JOINED: Final = ("gen_agent", "turn", "joined")
"""Measurements `system_time`; metadata `agent, ref` (the `busy="steer"` request), `origin`,
`into` (the ref of the running turn it joined). Once per steered request the backend
delivered into that turn, when the turn ends, before its `TURN_STOP` / `TURN_ERROR`; the
request's outcome is that turn's. Content-free. An extension (docs: Busy policies)."""
PROMPT_START: Final = ("gen_agent", "prompt", "start")
"""Rich: `system_time`; `agent, ref, attempt, prompt, original_prompt, rewritten, agent_state`."""
PROMPT_STOP: Final = ("gen_agent", "prompt", "stop")
"""Rich: `duration` (ms, task-measured); metadata `agent, ref, attempt, agent_state, response`."""
PROMPT_ERROR: Final = ("gen_agent", "prompt", "error")
"""Rich: `system_time` (+ `duration` ms if dispatched); `agent, ref, attempt, reason, ...`."""
EVENT_RECEIVED: Final = ("gen_agent", "event", "received")
"""Rich: `system_time`; metadata `agent, event` (notify / notify_ack payload)."""
STATE_CHANGED: Final = ("gen_agent", "state", "changed")
"""Measurements `system_time`; metadata `agent, from` (None at start), `to`."""
MAILBOX_QUEUED: Final = ("gen_agent", "mailbox", "queued")
"""Measurements `depth` (queued count after enqueue); metadata `agent`."""
REQUEST_QUEUED: Final = ("gen_agent", "request", "queued")
"""Measurements `depth` (queued count after enqueue); metadata `agent, ref, origin, ahead`
(True: put ahead of the queued work by `busy="interrupt"`/`"steer"`). Beside each
`MAILBOX_QUEUED` of an ask/tell, naming the request, so a request's lifecycle (queued →
`TURN_START` → `TURN_STOP`/`TURN_ERROR`, or `TURN_CANCELLED`) can be followed by ref.
Content-free; emitted only while a handler is attached to it. An extension outside
`EVENTS` (a recorder of every event keeps seeing exactly the contract's sequence)."""
INPUT_REJECTED: Final = ("gen_agent", "input", "rejected")
"""Measurements `system_time`; metadata `agent, reason` (`("overloaded", info)`, `"draining"`)."""
HALTED: Final = ("gen_agent", "halted")
"""Measurements `system_time`; metadata `agent, agent_state` (final, after post_run)."""
TERMINATED: Final = ("gen_agent", "terminated")
"""Measurements `system_time`; metadata `agent, reason`; after cleanup callbacks."""
SUPERVISOR_RESTART: Final = ("gen_agent", "supervisor", "restart")
"""Measurements `restarts` (the child's restart count); metadata `supervisor, child_id`."""
TOOL_PERMISSION: Final = ("gen_agent", "tool_permission")
"""Measurements `system_time`; metadata `agent, ref, attempt, backend, tool_name, decision`
(`"allow"` / `"deny"`), once per answered permission request (never the tool's input)."""

TIMER_FAILED: Final = ("gen_agent", "timer", "failed")
"""Measurements `system_time`; metadata `error_type` (the exception's class name): the shared
timer thread (watchdogs, retry delays, `send_after`, idle timeouts) ended on an exception; the
next scheduled timer starts a new thread. A gen_agent extension outside `EVENTS` (as
`gen_agent.store.STORE_ERROR`); also logged at ERROR with the traceback."""

EVENTS: Final = (
    TURN_START,
    TURN_STOP,
    TURN_ERROR,
    TURN_REJECTED,
    TURN_CANCELLED,
    TURN_DISCARDED,
    TURN_JOINED,
    PROMPT_START,
    PROMPT_STOP,
    PROMPT_ERROR,
    EVENT_RECEIVED,
    STATE_CHANGED,
    MAILBOX_QUEUED,
    INPUT_REJECTED,
    HALTED,
    TERMINATED,
    SUPERVISOR_RESTART,
    TOOL_PERMISSION,
)
"""Every event name gen_agent emits (docs/pages/contract.md#s8, plus `SUPERVISOR_RESTART`,
`TOOL_PERMISSION`, `TURN_DISCARDED` and `TURN_JOINED`; docs: Telemetry and logging)."""


class ToolSpan(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call seen in a turn's events, without its arguments or result.

    Named a span so it cannot be taken for `gen_agent.tools.ToolCall`, the call a tool
    receives (its old name here, `ToolCall`, warns until 0.3).

    The `tool_calls` metadata of `TURN_STOP` / `TURN_ERROR` holds a tuple of these, in the
    order the calls started (from the turn's retained events).

    Fields:
        name: the tool's name (`str`), or None when the event named none.
        call_id: the provider's id of the call (`str`), or None.
        started_ms: monotonic milliseconds of the `"tool_use"` event (see `Event.timestamp`).
        ended_ms: monotonic milliseconds of its `"tool_result"` event, or None if none came.
        is_error: whether the result reported a failure; None when unknown or no result.
    """

    name: str | None
    call_id: str | None
    started_ms: int
    ended_ms: int | None = None
    is_error: bool | None = None


class Handler(msgspec.Struct, frozen=True):
    """One attachment of a handler to one event name, as `list_handlers` reports it.

    Fields:
        id: the handler id given to `attach` (any hashable value).
        event_name: the event name (tuple of str).
        function: the handler, called as `function(event_name, measurements, metadata, config)`.
        config: the `config` given to `attach`, passed back on every call.

    Mirrors: the handler map of `:telemetry.list_handlers/1`.
    """

    id: Any
    event_name: EventName
    function: Any
    config: Any = None


class HandlerAlreadyAttached(ValueError):
    """`attach`/`attach_many` got a handler id that is already attached (`.handler_id`).

    Mirrors `{:error, :already_exists}` from `:telemetry.attach/4`.
    """

    def __init__(self, handler_id: Any) -> None:
        self.handler_id = handler_id
        super().__init__("already_exists: a telemetry handler with this id is attached")


_lock = threading.Lock()
# Copy-on-write, replaced whole on every attach/detach; a name is a key only while it has at
# least one handler, so `name in _table` is `attached(name)`: the runtime reads it so, as a
# module attribute each time (never a bound copy), to skip unattached events without a call.
_table: dict[EventName, tuple[Handler, ...]] = {}
_by_id: dict[Any, tuple[Handler, ...]] = {}


def _event_name(value: Any) -> EventName:
    if isinstance(value, list | tuple) and value and all(isinstance(p, str) for p in value):
        return tuple(value)
    raise TypeError(
        "an event name is a non-empty tuple (or list) of str, e.g. ('gen_agent', 'turn',"
        f" 'stop'); got {value!r}"
    )


def attach(
    handler_id: Hashable,
    event_name: Sequence[str],
    fn: HandlerFunction,
    config: Any = None,
) -> None:
    """Attach `fn` under `handler_id` to one event name.

    Args:
        handler_id: any hashable value, unique among attached handlers.
        event_name: a tuple (or list) of str.
        fn: called as `fn(event_name, measurements, metadata, config)` in the emitting
            thread; its return value is ignored.
        config: passed back to `fn` on every call (default None).

    Raises:
        HandlerAlreadyAttached: (a `ValueError`) the id is attached already.
        TypeError: the id is unhashable, the event name malformed or `fn` not callable.

    Mirrors: `:telemetry.attach/4`.
    """
    attach_many(handler_id, [event_name], fn, config)


def attach_many(
    handler_id: Hashable,
    event_names: Iterable[Sequence[str]],
    fn: HandlerFunction,
    config: Any = None,
) -> None:
    """Attach `fn` under `handler_id` to several event names (duplicates count once).

    Args and raises as `attach`; `event_names` must hold at least one name.

    Mirrors: `:telemetry.attach_many/4`.
    """
    global _table
    hash(handler_id)  # raises TypeError for an unhashable id, before any change
    if not callable(fn):
        raise TypeError(f"a telemetry handler must be callable, got {type(fn).__name__}")
    names = list(dict.fromkeys(_event_name(name) for name in event_names))
    if not names:
        raise TypeError("attach_many needs at least one event name, got none")
    entries = tuple(Handler(handler_id, name, fn, config) for name in names)
    with _lock:
        if handler_id in _by_id:
            raise HandlerAlreadyAttached(handler_id)
        table = dict(_table)
        for entry in entries:
            table[entry.event_name] = (*table.get(entry.event_name, ()), entry)
        _by_id[handler_id] = entries
        _table = table


def detach(handler_id: Hashable) -> bool:
    """Detach every attachment of `handler_id`.

    Returns:
        True if the id was attached, False otherwise (as `{:error, :not_found}`).

    Mirrors: `:telemetry.detach/1`.
    """
    with _lock:
        return _detach_locked(handler_id, None)


def _detach_locked(handler_id: Any, only: Handler | None) -> bool:
    # `only` guards against detaching a newer handler that reused the id of a failed one.
    global _table
    entries = _by_id.get(handler_id)
    if entries is None or (only is not None and not any(e is only for e in entries)):
        return False
    del _by_id[handler_id]
    table = dict(_table)
    for entry in entries:
        remaining = tuple(h for h in table.get(entry.event_name, ()) if h is not entry)
        if remaining:
            table[entry.event_name] = remaining
        else:
            table.pop(entry.event_name, None)
    _table = table
    return True


def attached(event_name: EventName) -> bool:
    """True if at least one handler is attached to `event_name` (a tuple of str).

    Lets an emitter skip building measurements and metadata nobody will read; lock-free.
    """
    return bool(_table.get(event_name))


def execute(event_name: EventName, measurements: dict[str, Any], metadata: dict[str, Any]) -> None:
    """Call every handler attached to `event_name`, synchronously, in attach order.

    Args:
        event_name: a tuple of str (a list is accepted and converted).
        measurements: numbers such as `system_time` (ns) or `duration_ms` (ms).
        metadata: context such as `agent`, `ref`, `attempt`, `origin`.

    A handler that raises an `Exception` is detached and a warning is logged with its id and
    the exception type (never the message); the remaining handlers still run.

    Mirrors: `:telemetry.execute/3`.
    """
    if type(event_name) is not tuple:
        event_name = _event_name(event_name)
    handlers = _table.get(event_name)
    if not handlers:
        return
    for handler in handlers:
        try:
            handler.function(event_name, measurements, metadata, handler.config)
        except Exception as exc:  # noqa: BLE001 - the handler is detached and the failure logged
            _handler_failed(handler, exc)


def _handler_failed(handler: Handler, exc: Exception) -> None:
    with _lock:
        detached = _detach_locked(handler.id, handler)
    if detached:
        logger.warning(
            "telemetry handler {!r} raised {} on {} and was detached",
            handler.id,
            type(exc).__name__,
            handler.event_name,
        )


def list_handlers(prefix: Sequence[str] = ()) -> list[Handler]:
    """List the attachments whose event name starts with `prefix`, in attach order.

    Args:
        prefix: a tuple of str; `()` (default) lists every attachment.

    Returns:
        A list of `Handler` records (one per handler id and event name).

    Mirrors: `:telemetry.list_handlers/1`.
    """
    prefix = tuple(prefix)
    with _lock:
        attached = [entry for entries in _by_id.values() for entry in entries]
    return [h for h in attached if h.event_name[: len(prefix)] == prefix]


class TelemetryRecord(NamedTuple):
    """One recorded event: `(event_name, measurements, metadata)`."""

    event_name: EventName
    measurements: dict[str, Any]
    metadata: dict[str, Any]


class TelemetryRecorder:
    """Record telemetry events while a `with` block runs; a test helper.

    Attaches one handler (a fresh unique id) to `event_names` on enter and detaches it on exit.
    Records are appended from whichever thread emits them; every method is thread-safe.

    Args:
        event_names: the names to record (default `EVENTS`, everything gen_agent emits).

    Example:
        with TelemetryRecorder([TURN_STOP]) as rec:
            gen_agent.ask("a", "hi", timeout=5)
            rec.wait_for(TURN_STOP, timeout=5)
    """

    def __init__(self, event_names: Iterable[Sequence[str]] = EVENTS) -> None:
        self.handler_id = ("gen_agent.telemetry.TelemetryRecorder", uuid.uuid4().hex)
        self._event_names = [_event_name(name) for name in event_names]
        self._records: list[TelemetryRecord] = []
        self._changed = threading.Condition()

    def __enter__(self) -> Self:
        attach_many(self.handler_id, self._event_names, self._record)
        return self

    def __exit__(self, *exc_info: object) -> None:
        detach(self.handler_id)

    def _record(
        self, event_name: EventName, measurements: dict[str, Any], metadata: dict[str, Any], _: Any
    ) -> None:
        with self._changed:
            self._records.append(TelemetryRecord(event_name, measurements, metadata))
            self._changed.notify_all()

    @property
    def records(self) -> list[TelemetryRecord]:
        """A copy of every record so far, in arrival order."""
        with self._changed:
            return list(self._records)

    def named(self, event_name: Sequence[str]) -> list[TelemetryRecord]:
        """A copy of the records of one event name, in arrival order."""
        name = tuple(event_name)
        return [r for r in self.records if r.event_name == name]

    def clear(self) -> None:
        """Forget every record so far."""
        with self._changed:
            self._records.clear()

    def wait_for(
        self,
        predicate: Callable[[TelemetryRecord], bool] | Sequence[str],
        timeout: float = 5.0,
    ) -> TelemetryRecord:
        """Return the first record (already recorded or arriving) that matches `predicate`.

        Args:
            predicate: a function of a `TelemetryRecord`, or an event name (a tuple of str),
                meaning "a record with that name".
            timeout: seconds to wait at most.

        Raises:
            TimeoutError: nothing matched within `timeout` seconds.
        """
        if not callable(predicate):
            name = _event_name(predicate)

            def predicate(record: TelemetryRecord) -> bool:
                return record.event_name == name

        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for record in self._records[seen:]:
                    if predicate(record):
                        return record
                seen = len(self._records)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._changed.wait(remaining):
                    raise TimeoutError(f"no matching telemetry event within {timeout} s")


__getattr__ = _moved_names(__name__, {"ToolCall": ("gen_agent.telemetry", "ToolSpan")})

"""`MockBackend`: the public scripted backend, for users' tests and ours
(docs/pages/contract.md#s7-5; docs: the backend guide).

An agent's `init_agent` returns the backend options, all optional:

    {"scripts": [...], "fallback": script, "session_id": "s-1", "start_error": reason,
     "reset_error": reason, "tools": [fn_or_tool, ...]}

The options of the bundled real backends (`model`, `system`, `max_tokens`, `system_prompt`,
`cwd`, `api_key`, ...: every key of `claude.OPTIONS`, `codex.OPTIONS`, `anthropic.OPTIONS` and
`openai.OPTIONS`, see `provider_options()`) are accepted too, and recorded as given in
`MockSession.options` for the test to assert on: an agent class written for a real backend
runs on the mock unchanged. Its scripts then come from the backend itself,
`MockBackend.with_options(scripts=[...])`, a `MockBackend` whose every session starts with
those options under the agent's own. A key no backend knows still fails the start with
`("unknown_option", key)`.

Each dispatched prompt pops the next script and is recorded in the history (also when no
script is left). A script is one of:

- a list/tuple of `Event`s → that stream (see `text_turn`, `error_turn`);
- a callable `f(prompt) -> Iterable[Event]` → called in the turn task, inside `prompt`
  (it may block);
- `error(reason)` → `prompt` raises `DispatchError(reason)` (a synchronous dispatch error);
- `raising(exc_or_reason)` → a stream that raises when consumed (a task crash);
- `gate(events, timeout=5.0)` → a `Gate`: the stream blocks when first pulled until the test
  calls `gate.release()`; `gate.wait_blocked()` tells the test the turn is in flight;
- `tool_round(calls, then)` → a scripted tool-use step: `tool_use` events for `calls`, the
  agent's own tools (the `tools` option, see `gen_agent.tools`) really run, their
  `tool_result` events, then `then` (events, or `then(results) -> events` to answer from the
  results). Tests a tool-using agent offline.

No script left → the `fallback` script when one is given (it is never consumed: e.g. a
callable answering any number of turns; not a `gate`), else `DispatchError("no_script")`.

Example:
    from gen_agent.backends import mock

    g = mock.gate(mock.text_turn("slow"))
    opts = {"scripts": [mock.text_turn("hi", session_id="s-1"), g, mock.error("boom")]}
"""

from __future__ import annotations

import functools
import importlib
import math
import threading
import time
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import msgspec

from gen_agent._errors import RequestError
from gen_agent._event import Event
from gen_agent.backend import Backend, DispatchError, ResetError, SessionStartError, TurnContext

__all__ = [
    "OPTIONS",
    "ErrorScript",
    "Gate",
    "GateCancelled",
    "MockBackend",
    "MockRaised",
    "MockSession",
    "RaisingScript",
    "Script",
    "ToolRound",
    "error",
    "error_turn",
    "gate",
    "provider_options",
    "raising",
    "text_turn",
    "tool_round",
]

OPTIONS: Final = frozenset({"scripts", "fallback", "session_id", "start_error", "reset_error",
                           "tools"})
"""The mock's own option keys (`MockBackend.start_session` also accepts `provider_options()`)."""

_SCRIPTING: Final = frozenset({"scripts", "fallback", "start_error", "reset_error"})
# The bundled real backends, whose declared `OPTIONS` the mock accepts and records.
_REAL_BACKENDS: Final = ("claude", "codex", "anthropic", "openai")


@functools.cache
def provider_options() -> frozenset[str]:
    """The option keys of the bundled real backends that are not the mock's own: the union of
    the `OPTIONS` of `gen_agent.backends.claude`, `codex`, `anthropic` and `openai` (imported
    on the first call), minus `OPTIONS`.

    Returns:
        A frozenset of str, e.g. containing `"model"`, `"system"`, `"max_tokens"`,
        `"system_prompt"`, `"cwd"`.
    """
    keys: set[str] = set()
    for name in _REAL_BACKENDS:
        keys |= importlib.import_module(f"gen_agent.backends.{name}").OPTIONS
    return frozenset(keys - OPTIONS)

# A gate wakes at once on release() and MockBackend.cancel(); a cancel_event set without a
# cancel() call (the runtime always makes both) is noticed within this many seconds.
_CANCEL_EVENT_CHECK_S: Final = 0.05


class ErrorScript(msgspec.Struct, frozen=True):
    """A script that makes `prompt` raise `DispatchError(reason)`. Build it with `error()`."""

    reason: Any


class RaisingScript(msgspec.Struct, frozen=True):
    """A script whose stream raises when consumed. Build it with `raising()`."""

    error: Any


class MockRaised(Exception):
    """What a `raising(reason)` stream raises when `reason` is not an exception (`.reason`).

    Mirrors the "mock backend raised: ..." crash of the Elixir mock (§7.5).
    """

    def __init__(self, reason: Any) -> None:
        self.reason = reason
        super().__init__(f"mock backend raised: {reason!r}")


class GateCancelled(Exception):
    """Raised by a gate's stream when its turn was cancelled while waiting in it.

    The turn task then ends at once; the runtime has already abandoned that turn, so this
    exception only frees the thread.
    """


class ToolRound:
    """A scripted tool-use step (see `tool_round`). Immutable after construction."""

    __slots__ = ("calls", "then")

    def __init__(self, calls: Sequence[Any], then: Any) -> None:
        self.calls = tuple(_tool_call(index, call) for index, call in enumerate(calls))
        self.then = then

    def _stream(self, session: MockSession, context: TurnContext | None) -> Iterator[Event]:
        from gen_agent.backends._http.tool_loop import run_step

        for call in self.calls:
            yield Event.new("tool_use", {"id": call.id, "name": call.name, "input": call.input})
        results, interrupted = yield from run_step(self.calls, session.tools, context, "mock")
        if interrupted:
            yield Event.new("error", {"reason": "interrupted"})
            return
        then = self.then(results) if callable(self.then) else self.then
        yield from then


def tool_round(calls: Sequence[Any], then: Any) -> ToolRound:
    """A script that calls the agent's tools, then goes on with `then`.

    Args:
        calls: the calls the "model" makes, each `(name, input_dict)` or a
            `gen_agent.tools.ToolCall` (ids `"call_<n>"` are made for pairs).
        then: the rest of the turn: a list of `Event`s (e.g. `text_turn("done")`), or a
            callable `then(results: list[ToolResult]) -> Iterable[Event]`.

    Returns:
        A `ToolRound` script. The session's tools come from the `tools` backend option; an
        unknown tool, invalid arguments or a raising tool give an error result, as with a
        real provider.
    """
    return ToolRound(calls, then)


def _tool_call(index: int, call: Any) -> Any:
    from gen_agent._tools import ToolCall

    if isinstance(call, ToolCall):
        return call
    name, arguments = call
    return ToolCall(id=f"call_{index}", name=name, input=arguments)


def error(reason: Any) -> ErrorScript:
    """A script: `prompt` raises `DispatchError(reason)`. Mirrors the `{:error, r}` script."""
    return ErrorScript(reason)


def raising(exc_or_reason: Any) -> RaisingScript:
    """A script whose stream raises when first pulled (a task crash).

    Args:
        exc_or_reason: an `Exception` instance, raised as is; any other value is raised as
            `MockRaised(value)`.

    Mirrors the `{:raise, r}` script (§7.5).
    """
    return RaisingScript(exc_or_reason)


def gate(events: Iterable[Event], timeout: float = 5.0) -> Gate:
    """A script that blocks its turn until released; see `Gate`. Mirrors `Mock.gate/3`."""
    return Gate(events, timeout)


def text_turn(
    text: str | Sequence[str],
    *,
    session_id: str | None = None,
    usage: Mapping[str, int] | None = None,
    model: str | None = None,
    result: Mapping[str, Any] | None = None,
) -> list[Event]:
    """The events of a successful turn: text event(s), optional usage, then a result.

    Args:
        text: the reply; a str gives one `"text"` event (none if empty), a sequence of str
            gives one `"text"` event per chunk.
        session_id: put in the result data when given.
        usage: token counts (`input_tokens`, `output_tokens`, ...) for a `"usage"` event.
        model: put in the result data when given.
        result: further result data (e.g. `{"cost_usd": 0.01, "provider": "mock"}`), merged
            last.

    Returns:
        A new list of `Event`s ending with `Event("result", {"text": joined text, ...})`.
    """
    chunks = ([text] if text else []) if isinstance(text, str) else list(text)
    events = [Event.new("text", {"text": chunk}) for chunk in chunks]
    if usage is not None:
        events.append(Event.new("usage", dict(usage)))
    data: dict[str, Any] = {"text": "".join(chunks)}
    if session_id is not None:
        data["session_id"] = session_id
    if model is not None:
        data["model"] = model
    if result is not None:
        data.update(result)
    events.append(Event.new("result", data))
    return events


def error_turn(reason: Any) -> list[Event]:
    """The events of a turn that fails after dispatch: one terminal `"error"` event."""
    return [Event.new("error", {"reason": reason})]


class Gate:
    """A script that holds its turn inside the stream until the test releases it.

    Built in the test (`gate(events, timeout)`), placed among the scripts, then:
    when the turn task first pulls from the stream, the gate records that it was reached and
    blocks until `release()` (then yields `events`), until the turn is cancelled
    (`MockBackend.cancel(session)`, `terminate_session`, or the turn's `cancel_event`; the
    stream raises `GateCancelled`), or until `timeout` seconds pass (the stream raises
    `TimeoutError`). A gate released before it is reached does not block. One gate serves one
    turn: pulling it a second time raises `RuntimeError`. Thread-safe.

    Args:
        events: the events to yield once released (copied).
        timeout: seconds the stream waits at most (default 5.0).

    Raises:
        TypeError: an element of `events` is not an `Event`.
        ValueError: `timeout` is not a positive number.

    Mirrors: `GenAgent.Backends.Mock.gate/3` (§7.5); `wait_blocked` replaces the
    `{:mock_blocked, tag, pid}` message and `release` the `{:mock_release, tag}` message.
    """

    def __init__(self, events: Iterable[Event], timeout: float = 5.0) -> None:
        self._events = _events_tuple(events, "gate events")
        if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                or not math.isfinite(timeout) or timeout <= 0):
            raise ValueError("gate timeout must be a positive number of seconds (finite, > 0), "
                             f"got {timeout!r}")
        self._timeout = float(timeout)
        self._cond = threading.Condition()
        self._reached = threading.Event()
        self._released = False
        self._cancelled = False
        self._blocked = False
        self._thread: threading.Thread | None = None

    @property
    def events(self) -> tuple[Event, ...]:
        """The events yielded after release."""
        return self._events

    @property
    def timeout(self) -> float:
        """Seconds the stream waits for `release()` at most."""
        return self._timeout

    @property
    def released(self) -> bool:
        """True once `release()` was called."""
        return self._released

    @property
    def blocked(self) -> bool:
        """True while a turn task is waiting in the gate."""
        return self._blocked

    @property
    def reached(self) -> bool:
        """True once a turn task pulled from the gate (blocked there or passed through)."""
        return self._reached.is_set()

    @property
    def cancelled(self) -> bool:
        """True once the gate's turn was cancelled."""
        return self._cancelled

    @property
    def thread(self) -> threading.Thread | None:
        """The turn task thread that reached the gate, or None."""
        return self._thread

    def release(self) -> None:
        """Let the turn through (now, or when it arrives). Idempotent."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def wait_blocked(self, timeout: float = 5.0) -> bool:
        """Wait until a turn task has reached the gate (blocked in it unless released before).

        Args:
            timeout: seconds to wait at most.

        Returns:
            True.

        Raises:
            TimeoutError: no turn reached the gate within `timeout` seconds.
        """
        if not self._reached.wait(timeout):
            raise TimeoutError(f"no turn reached the mock gate within {timeout} s")
        return True

    def _cancel(self) -> None:
        with self._cond:
            self._cancelled = True
            self._cond.notify_all()

    def _stream(
        self, session: MockSession, cancel_event: threading.Event | None
    ) -> Iterator[Event]:
        try:
            self._pass(cancel_event)
            yield from self._events
        finally:
            session._forget_gate(self)

    def _pass(self, cancel_event: threading.Event | None) -> None:
        with self._cond:
            if self._thread is not None:
                raise RuntimeError("a mock gate serves one turn; script a new gate per turn")
            self._thread = threading.current_thread()
            deadline = time.monotonic() + self._timeout
            # Set before `reached`, so a test woken by wait_blocked() sees blocked == True.
            self._blocked = not (self._released or self._cancelled)
            self._reached.set()
            try:
                self._wait(cancel_event, deadline)
            finally:
                self._blocked = False

    def _wait(self, cancel_event: threading.Event | None, deadline: float) -> None:
        while True:
            if cancel_event is not None and cancel_event.is_set():
                self._cancelled = True
            if self._cancelled:
                raise GateCancelled("the turn was cancelled while blocked in a mock gate")
            if self._released:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("mock gate not released")
            if cancel_event is not None:
                remaining = min(remaining, _CANCEL_EVENT_CHECK_S)
            self._cond.wait(remaining)

    def __repr__(self) -> str:
        return (
            f"Gate(events={len(self._events)}, timeout={self._timeout}, "
            f"released={self._released}, blocked={self._blocked}, cancelled={self._cancelled})"
        )


Script = (
    list[Event]
    | tuple[Event, ...]
    | Callable[[str], Iterable[Event]]
    | ErrorScript
    | RaisingScript
    | Gate
    | ToolRound
)


class MockSession:
    """The mock's session: scripts, dispatched prompts and the session id. Thread-safe.

    Members (read-only snapshots):
        options: the options the session was started with but the mock's scripting ones
            (`scripts`, `fallback`, `start_error`, `reset_error`): the real backends'
            options (`model`, `system`, ...), `session_id` and `tools`, as given (a read-only
            mapping).
        session_id: the current session id (str) or None.
        history: the dispatched prompts, in order, including failed attempts.
        remaining: how many scripts are not consumed yet.
        checkpoints: every id applied through `checkpoint_session`, in order.
        resets: how many times `reset_session` ran.
        terminated: whether `terminate_session` ran.

    Mirrors: the Elixir mock's session struct and its state-holder process (§7.5).
    """

    def __init__(self, scripts: Iterable[Script], session_id: str | None, reset_error: Any,
                 fallback: Script | None = None, tools: tuple[Any, ...] = (),
                 options: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self.tools = tools  # the agent's `gen_agent.tools.Tool`s (the `tools` option)
        self.options: Mapping[str, Any] = types.MappingProxyType(dict(options or {}))
        self._scripts: deque[Script] = deque(scripts)
        self._fallback = fallback
        self._history: list[str] = []
        self._session_id = session_id
        self._checkpoints: list[str] = []
        self._resets = 0
        self._reset_error = reset_error
        self._terminated = False
        # Gates of dispatched turns; weak, so a stream never pulled does not pin its gate.
        self._gates: weakref.WeakSet[Gate] = weakref.WeakSet()

    @property
    def session_id(self) -> str | None:
        """The current session id, or None."""
        return self._session_id

    @property
    def history(self) -> list[str]:
        """A copy of the dispatched prompts, in dispatch order."""
        with self._lock:
            return list(self._history)

    @property
    def remaining(self) -> int:
        """The number of unconsumed scripts."""
        with self._lock:
            return len(self._scripts)

    @property
    def checkpoints(self) -> list[str]:
        """A copy of the ids applied by `checkpoint_session`, in order."""
        with self._lock:
            return list(self._checkpoints)

    @property
    def resets(self) -> int:
        """How many times `reset_session` succeeded."""
        return self._resets

    @property
    def terminated(self) -> bool:
        """True once `terminate_session` ran."""
        return self._terminated

    def _pop(self, prompt: str) -> Script:
        with self._lock:
            if self._terminated:
                raise DispatchError("session_terminated")
            self._history.append(prompt)
            if not self._scripts:
                if self._fallback is not None:
                    return self._fallback
                raise DispatchError("no_script")
            script = self._scripts.popleft()
            if isinstance(script, Gate):
                self._gates.add(script)
            return script

    def _forget_gate(self, gate: Gate) -> None:
        with self._lock:
            self._gates.discard(gate)

    def _cancel_gates(self) -> None:
        with self._lock:
            gates = list(self._gates)
        for g in gates:
            g._cancel()

    def __repr__(self) -> str:
        # Prompts and scripts may hold user data: only counts are shown.
        return (
            f"MockSession(session_id={self._session_id!r}, remaining={len(self._scripts)}, "
            f"dispatched={len(self._history)}, terminated={self._terminated})"
        )


class MockBackend(Backend):
    """The scripted backend; pass the class itself as the agent's backend.

    All hooks are classmethods; all state lives in the `MockSession`. See the module docstring
    for the options and script forms.

    Mirrors: `GenAgent.Backends.Mock` (docs/pages/contract.md#s7-5; docs: the backend guide).
    """

    supports_rollback = True  # the session is the conversation (busy="rollback")

    # Options every session of this class starts with, under the agent's (`with_options`).
    _preset: Mapping[str, Any] = types.MappingProxyType({})

    @classmethod
    def with_options(cls, **options: Any) -> type[MockBackend]:
        """A `MockBackend` (subclass) whose every session starts with `options` under the
        agent's own: the agent's `init_agent` keeps returning its real backend's options,
        the test gives the scripts.

            backend = MockBackend.with_options(scripts=[mock.text_turn("LGTM")])
            gen_agent.start_agent(Reviewer, name="r", backend=backend)

        Args:
            **options: mock options (`scripts`, `fallback`, `session_id`, ...), checked at
                each start like the agent's.

        Returns:
            A new class, named `MockBackend` too; `MockBackend.history` and the other
            helpers work on its sessions.
        """
        preset = types.MappingProxyType({**cls._preset, **options})
        return type(cls.__name__, (cls,), {"_preset": preset, "__module__": cls.__module__})

    @classmethod
    def start_session(cls, opts: Mapping[str, Any]) -> MockSession:
        """Create a `MockSession` from the backend options. Agent thread.

        Args:
            opts: a mapping with the optional keys `scripts` (list of scripts, default []),
                `fallback` (a script used whenever `scripts` is empty, never consumed; not a
                gate), `session_id` (str or None), `start_error` (a reason; when not None the start
                fails with it), `reset_error` (a reason; when not None `reset_session` fails
                with it), `tools` (Python tools, which `tool_round` runs, and provider tool
                definitions, dicts, only recorded), and any key of `provider_options()`
                (recorded in `MockSession.options`, not checked). Merged over the options of
                `with_options`.

        Returns:
            A new `MockSession`.

        Raises:
            SessionStartError: `start_error` was given (nothing is created); or the options
                are malformed: `("unknown_option", key)` for a key neither the mock nor a
                bundled backend takes, `("invalid_option", key)` for a `scripts` that is no
                list/tuple or a `session_id` that is no str, or
                `("invalid_script", index)` for a script of no known form,
                `("invalid_option", "fallback")` for a fallback of no known form or a gate.
        """
        if not isinstance(opts, Mapping):
            raise SessionStartError(
                ("invalid_option", "opts"), "mock backend options must be a dict"
            )
        if cls._preset:
            opts = {**cls._preset, **opts}
        for key in opts:
            if key not in OPTIONS and key not in provider_options():
                raise SessionStartError(
                    ("unknown_option", key),
                    f"unknown mock backend option {key!r}; known: the mock's {sorted(OPTIONS)} "
                    f"and the bundled backends' {sorted(provider_options())}",
                )
        if opts.get("start_error") is not None:
            raise SessionStartError(opts["start_error"])
        session_id = opts.get("session_id")
        if session_id is not None and not isinstance(session_id, str):
            raise SessionStartError(
                ("invalid_option", "session_id"),
                f"mock session_id must be a str or None, got {type(session_id).__name__}",
            )
        scripts = _validate_scripts(opts.get("scripts", []))
        fallback = opts.get("fallback")
        if fallback is not None and (isinstance(fallback, Gate) or not _known_script(fallback)):
            raise SessionStartError(
                ("invalid_option", "fallback"),
                "mock fallback must be a list of Event, a callable, error() or raising() (a "
                f"gate serves one turn); got {type(fallback).__name__}",
            )
        recorded = {key: value for key, value in opts.items() if key not in _SCRIPTING}
        return MockSession(scripts, session_id, opts.get("reset_error"), fallback,
                           _validate_tools(opts.get("tools", ())), recorded)

    @classmethod
    def prompt(
        cls, session: MockSession, prompt: str, context: TurnContext | None = None
    ) -> tuple[Iterable[Event], MockSession]:
        """Pop the next script, record `prompt`, and return `(stream, session)`. Turn task.

        Args:
            session: the `MockSession`.
            prompt: the dispatched prompt (recorded in the history).
            context: the turn's `TurnContext` (a gate also ends when its `cancel_event` is
                set); None is accepted for direct use in tests.

        Raises:
            DispatchError: `"no_script"` when none is left, `"session_terminated"` after
                `terminate_session`, or the reason of an `error(reason)` script.
            Exception: whatever a callable script raises.
        """
        script = _session(session)._pop(prompt)
        match script:
            case list() | tuple():  # the common script first
                return iter(list(script)), session
            case ErrorScript(reason=reason):
                raise DispatchError(reason)
            case RaisingScript(error=exc):
                return _raise_when_pulled(exc), session
            case Gate():
                cancel_event = None if context is None else context.cancel_event
                return script._stream(session, cancel_event), session
            case ToolRound():
                return script._stream(session, context), session
            case _:
                return script(prompt), session

    @classmethod
    def update_session(cls, session: MockSession, result_data: Mapping[str, Any]) -> MockSession:
        """Store `result_data["session_id"]` when it is a str; return the session. Turn task."""
        session_id = result_data.get("session_id")
        if isinstance(session_id, str):
            with _session(session)._lock:
                session._session_id = session_id
        return session

    @classmethod
    def checkpoint_session(cls, session: MockSession, session_id: str) -> MockSession:
        """Apply an acknowledged session id (recorded in `checkpoints`). Agent thread."""
        with _session(session)._lock:
            session._session_id = session_id
            session._checkpoints.append(session_id)
        return session

    @classmethod
    def export_session(cls, session: MockSession) -> dict[str, Any]:
        """The resumable session for a session store: `{"session_id": id or None}`."""
        return {"session_id": _session(session).session_id}

    @classmethod
    def restore_session(cls, data: Mapping[str, Any], opts: Mapping[str, Any]) -> MockSession:
        """`start_session(opts)` with the stored session id (the scripts come from `opts`).

        Raises:
            SessionStartError: as `start_session`. ValueError: `data` is no such record.
        """
        if not isinstance(data, Mapping) or "session_id" not in data:
            raise ValueError("a mock session record is a dict with a session_id")
        if data["session_id"] is None:
            return cls.start_session(opts)
        return cls.start_session({**opts, "session_id": data["session_id"]})

    @classmethod
    def reset_session(cls, session: MockSession) -> MockSession:
        """Forget the session id (history and scripts are kept); return the session.

        Agent thread.

        Raises:
            ResetError: the `reset_error` option was given (the session is unchanged).
        """
        with _session(session)._lock:
            if session._reset_error is not None:
                raise ResetError(session._reset_error)
            session._session_id = None
            session._resets += 1
        return session

    @classmethod
    def cancel(cls, session: MockSession) -> None:
        """Wake any gate a turn of this session waits in; it raises `GateCancelled`.

        Agent thread; quick, thread-safe, idempotent.
        """
        _session(session)._cancel_gates()

    @classmethod
    def terminate_session(cls, session: MockSession) -> None:
        """Mark the session terminated and wake its gates. Agent thread; idempotent."""
        with _session(session)._lock:
            session._terminated = True
        session._cancel_gates()

    @classmethod
    def history(cls, session_or_name: Any) -> list[str]:
        """The prompts dispatched to a session, in order (failed attempts included).

        Args:
            session_or_name: a `MockSession`, or an agent name whose backend session is read
                with `gen_agent.backend_session(name)`.

        Raises:
            gen_agent.AgentNotFound: no agent has that name.
            gen_agent.RequestError: `"not_mock_backend"`, the agent uses another
                backend.

        Mirrors: `GenAgent.Backends.Mock.history/1`.
        """
        if isinstance(session_or_name, MockSession):
            return session_or_name.history
        from gen_agent._runtime import calls  # lazy: the runtime is not needed to script turns

        session = calls.run(calls.lookup(None, session_or_name), calls.BACKEND_SESSION, None)
        if not isinstance(session, MockSession):
            raise RequestError("not_mock_backend")
        return session.history

    @classmethod
    def remaining(cls, session: MockSession) -> int:
        """The number of unconsumed scripts. Mirrors `GenAgent.Backends.Mock.remaining/1`."""
        return _session(session).remaining


def _session(session: Any) -> MockSession:
    if not isinstance(session, MockSession):
        raise TypeError(f"expected a MockSession, got {type(session).__name__}")
    return session


def _raise_when_pulled(exc_or_reason: Any) -> Iterator[Event]:
    if isinstance(exc_or_reason, BaseException):
        raise exc_or_reason
    raise MockRaised(exc_or_reason)
    yield  # makes this a generator, so nothing raises before the stream is pulled


def _events_tuple(events: Any, where: str) -> tuple[Event, ...]:
    if isinstance(events, str | bytes | Mapping) or not isinstance(events, Iterable):
        raise TypeError(f"{where} must be a list of Event, got {type(events).__name__}")
    items = tuple(events)
    for index, item in enumerate(items):
        if not isinstance(item, Event):
            raise TypeError(f"{where}[{index}] must be an Event, got {type(item).__name__}")
    return items


def _known_script(script: Any) -> bool:
    if isinstance(script, ErrorScript | RaisingScript | Gate | ToolRound):
        return True
    if isinstance(script, list | tuple):
        return all(isinstance(item, Event) for item in script)
    return callable(script)


def _validate_tools(tools: Any) -> tuple[Any, ...]:
    """The Python tools of the `tools` option; provider tool definitions (dicts, as the API
    backends take them) are left to `MockSession.options`."""
    from gen_agent._tools import as_tools

    if not isinstance(tools, list | tuple):
        raise SessionStartError(("invalid_option", "tools"),
                                f"mock tools must be a list, got {type(tools).__name__}")
    try:
        return as_tools([item for item in tools if not isinstance(item, Mapping)])
    except (TypeError, ValueError) as exc:
        raise SessionStartError(("invalid_option", "tools"), str(exc)) from exc


def _validate_scripts(scripts: Any) -> list[Script]:
    if not isinstance(scripts, list | tuple):
        raise SessionStartError(
            ("invalid_option", "scripts"),
            f"mock scripts must be a list, got {type(scripts).__name__}",
        )
    for index, script in enumerate(scripts):
        if _known_script(script):
            continue
        raise SessionStartError(
            ("invalid_script", index),
            f"mock script {index} must be a list of Event, a callable, error(), raising(),"
            f" gate() or tool_round(); got {type(script).__name__}",
        )
    return list(scripts)

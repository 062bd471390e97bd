"""The backend contract: how the runtime talks to an LLM provider (docs/pages/contract.md#s7; docs:
the backend guide).

A backend is any object with the hooks below: usually a class whose hooks are `@classmethod`
or `@staticmethod` (no instance state; the session object carries all state), but an instance
with the same methods works too. Subclassing `Backend` is optional and only documents intent.

Required hooks, and where the runtime calls them:

- `start_session(opts) -> session`: agent thread; raise `SessionStartError(reason)`.
- `prompt(session, prompt, context) -> (Iterable[Event], session)`: turn task thread; raise
  `DispatchError(reason)`; any other exception is a task crash.
- `terminate_session(session) -> None`: agent thread; idempotent.

Optional hooks, detected with `getattr` (see `OPTIONAL_HOOKS`): `update_session`,
`checkpoint_session`, `reset_session`, `resume_session`, `cancel`, `export_session`,
`restore_session`, `check_prompt`, `prewarm_session`, `idle_session`, `steer` (`Backend` documents
each).

`BackendError` is the normalized provider failure of the bundled backends (§7.4); it is both a
value (a reason compared by fields) and an exception.

This module is the namespace for backend authors, as `trio.lowlevel` is trio's: with the
contract it shows what a backend builds and reads (`Event`, `Response` and its helpers, the
provider-neutral `Message` and its parts with their Anthropic/OpenAI wire forms, tool
permission decisions, `ProviderLimit`, the output checks, `term_size`, `describe_reason`)
and the exceptions a backend raises. Users of agents need only `gen_agent`.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Protocol, runtime_checkable

from gen_agent._cancel import CancelSignal
from gen_agent._conversation import (
    Dropped,
    Message,
    Part,
    Replay,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    delta_from_events,
    from_anthropic,
    from_openai,
    omitted_data,
    to_anthropic,
    to_openai,
    user_message,
)
from gen_agent._errors import (
    MAX_RETRY_AFTER_MS,
    BackendError,
    CheckpointError,
    Diagnostics,
    DispatchError,
    GenAgentError,
    ResetError,
    SessionStartError,
)
from gen_agent._event import KINDS, TERMINAL_KINDS, Event, monotonic_ms
from gen_agent._limits import LimitStatus, ProviderLimit
from gen_agent._output import check_output_type, schema_name
from gen_agent._permission import (
    DEFAULT_PERMISSION_TIMEOUT_MS,
    DENY_FAILED,
    DENY_INTERRUPTED,
    DENY_NOT_CURRENT,
    DENY_TIMEOUT,
    Allow,
    Deny,
    PermissionDecision,
    ToolPermissionRequest,
    as_decision,
    decision_name,
)
from gen_agent._reasons import describe_reason
from gen_agent._request_options import DEFAULT_OPTIONS, RequestOptions
from gen_agent._response import (
    FINISH_REASONS,
    USAGE_KEYS,
    Response,
    finish_reason,
    normalize_usage,
)
from gen_agent._size import term_size

__all__ = [
    "DEFAULT_PERMISSION_TIMEOUT_MS",
    "DENY_FAILED",
    "DENY_INTERRUPTED",
    "DENY_NOT_CURRENT",
    "DENY_TIMEOUT",
    "FINISH_REASONS",
    "KINDS",
    "MAX_RETRY_AFTER_MS",
    "OPTIONAL_HOOKS",
    "REQUIRED_HOOKS",
    "TERMINAL_KINDS",
    "USAGE_KEYS",
    "Allow",
    "Backend",
    "BackendError",
    "BackendProtocol",
    "CheckpointError",
    "Deny",
    "Diagnostics",
    "DispatchError",
    "Dropped",
    "Event",
    "GenAgentError",
    "LimitStatus",
    "Message",
    "Part",
    "PermissionDecision",
    "ProviderLimit",
    "Replay",
    "ResetError",
    "Response",
    "SessionStartError",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolPermissionRequest",
    "ToolResultPart",
    "TurnContext",
    "as_decision",
    "check_output_type",
    "decision_name",
    "delta_from_events",
    "describe_reason",
    "finish_reason",
    "from_anthropic",
    "from_openai",
    "monotonic_ms",
    "normalize_usage",
    "omitted_data",
    "schema_name",
    "term_size",
    "to_anthropic",
    "to_openai",
    "user_message",
    "validate_backend",
]

REQUIRED_HOOKS: Final = ("start_session", "prompt", "terminate_session")
"""Hooks every backend defines (docs/pages/contract.md#s7-1; docs: the backend guide)."""

OPTIONAL_HOOKS: Final = (
    "update_session",
    "checkpoint_session",
    "reset_session",
    "resume_session",
    "cancel",
    "export_session",
    "restore_session",
    "check_prompt",
    "prewarm_session",
    "idle_session",
    "steer",
)
"""Hooks the runtime looks up with `getattr(backend, name, None)` and uses when present."""



_NO_CARRIER: Final[Mapping[str, str]] = MappingProxyType({})


class TurnContext:
    """What the runtime hands to `backend.prompt` for one turn (attempt) of one request.

    Built by the runtime with keyword arguments only; backends read it. Safe to share between
    threads (all members are read-only; `cancel_event` is a `threading.Event`).

    Members:
        agent: the agent's name (any hashable value).
        ref: the request's `RequestRef`.
        attempt: the attempt number, 1-based (caller-owned retries increase it, §4.8).
        cancel_event: the turn's cancel signal, set by the runtime on interrupt, watchdog and
            stop; a backend may wait on it.
        cancelled: whether `cancel_event` is set.
        wait_cancelled(timeout): block until cancelled or `timeout` seconds passed.
        checkpoint(session_id): report a provider session id early (docs/pages/contract.md#s7-3;
        docs: the backend guide).
        options: the request's `RequestOptions` (per-request settings a backend may honour;
            see `gen_agent._request_options`).
        trace_carrier: the turn's trace context as propagation fields (a read-only mapping,
            e.g. `{"traceparent": "00-…-01"}`), filled by an instrumentation such as
            `gen_agent.otel`; empty when the turn is not traced. A backend that starts a
            process passes it on as environment variables (`trace_env`).
        handles_permissions: whether the agent defines `handle_tool_permission`.
        request_permission(request, timeout_ms): ask the agent whether a tool may run.
        send_info(message): hand `message` to the agent's `handle_info`, now or after the
            turn (a callable that stays valid after the turn, for output a long-lived
            process prints between turns).
        journal: the turn's tool journal for an agent with a store, or with
            `repair_interrupted_turns` (kept in memory; see docs/pages/durable-sessions.md):
            pass it to `gen_agent.tools.run_calls` as `journal=`; else None.

    Mirrors: the context map passed to `prompt/3` (docs/pages/contract.md#s4-6, #s7-3; docs:
    Concepts), plus the cancel signal that replaces BEAM's task kill (docs/pages/contract.md#s12-7;
    docs: Coming from Elixir).
    """

    __slots__ = (
        "_agent", "_attempt", "_cancel_event", "_checkpoint", "_info", "_journal", "_options",
        "_permission", "_ref", "_trace_carrier",
    )

    def __init__(
        self,
        *,
        agent: Any,
        ref: Any,
        attempt: int,
        cancel_event: threading.Event | CancelSignal,
        checkpoint: Callable[[str], None],
        options: RequestOptions | None = None,
        trace_carrier: Mapping[str, str] | None = None,
        permission: Callable[[ToolPermissionRequest, float], PermissionDecision] | None = None,
        info: Callable[[Any], None] | None = None,
        journal: Any = None,
    ) -> None:
        self._agent = agent
        self._journal = journal
        self._options = DEFAULT_OPTIONS if options is None else options
        self._ref = ref
        self._attempt = attempt
        self._cancel_event = cancel_event
        self._checkpoint = checkpoint
        self._trace_carrier = _NO_CARRIER if not trace_carrier else MappingProxyType(
            dict(trace_carrier))
        self._permission = permission
        self._info = info

    @property
    def agent(self) -> Any:
        """The agent's name."""
        return self._agent

    @property
    def journal(self) -> Any:
        """The turn's tool journal (an agent with a store or `repair_interrupted_turns`),
        else None."""
        return self._journal

    @property
    def ref(self) -> Any:
        """The request ref this turn answers."""
        return self._ref

    @property
    def attempt(self) -> int:
        """The attempt number of this turn, 1-based."""
        return self._attempt

    @property
    def options(self) -> RequestOptions:
        """The request's `RequestOptions` (the same for every attempt of the request)."""
        return self._options

    @property
    def cancel_event(self) -> threading.Event:
        """The turn's cancel signal (a `threading.Event`, set once, never cleared)."""
        signal = self._cancel_event
        return signal.event if isinstance(signal, CancelSignal) else signal

    @property
    def cancelled(self) -> bool:
        """True once the runtime has cancelled this turn (interrupt, watchdog or stop)."""
        return self._cancel_event.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block until the turn is cancelled or `timeout` seconds pass (`None`: forever).

        Returns:
            True if the turn is cancelled, False if the timeout expired first.
        """
        return self._cancel_event.wait(timeout)

    @property
    def trace_carrier(self) -> Mapping[str, str]:
        """The turn's trace propagation fields (`traceparent`, `tracestate`...); may be empty."""
        return self._trace_carrier

    def trace_env(self) -> dict[str, str]:
        """The trace carrier as environment variables for a child process (a new dict).

        Each field name is upper-cased with `-` as `_` (`traceparent` → `TRACEPARENT`), the
        form the OpenTelemetry specification gives for environment carriers and the one the
        Claude Code and Codex CLIs read. Empty when the turn is not traced.
        """
        return {key.upper().replace("-", "_"): value for key, value in self._trace_carrier.items()}

    def checkpoint(self, session_id: str) -> None:
        """Ask the agent to persist `session_id` now, before the terminal event (§7.3).

        Runs a synchronous call into the agent: the calling (turn task) thread waits for it.

        Args:
            session_id: the provider's session id, a non-empty UTF-8 `str` of at most 1024
                bytes without control characters.

        Raises:
            gen_agent.CheckpointError: the agent rejected it; `.reason` is
                `"unsupported_checkpoint"`, `"invalid_session_id"`,
                `"conflicting_session_id"` or `"not_current"`. The backend should then fail
                its turn (the bundled CLI backends raise).

        Mirrors: the `checkpoint` function of the `prompt/3` context (docs/pages/contract.md#s7-3;
        docs: the backend guide).
        """
        self._checkpoint(session_id)

    @property
    def handles_permissions(self) -> bool:
        """True when the agent defines `handle_tool_permission` (a backend then asks it
        before tools run; otherwise the provider's own permission mode applies)."""
        return self._permission is not None

    def request_permission(
        self,
        request: ToolPermissionRequest,
        timeout_ms: int = DEFAULT_PERMISSION_TIMEOUT_MS,
    ) -> PermissionDecision:
        """Ask the agent whether a tool may run; block the calling (turn task) thread until it
        answers.

        Runs `GenAgent.handle_tool_permission(request, state)` in the agent thread.

        Args:
            request: the `ToolPermissionRequest`.
            timeout_ms: how long to wait for the answer (milliseconds).

        Returns:
            `Allow` or `Deny`. Never raises for the agent's failures: a callback that raises
            or returns something else gives `DENY_FAILED`, no answer within `timeout_ms`
            `DENY_TIMEOUT`, a turn that is no longer current (or an agent that is gone)
            `DENY_NOT_CURRENT`; without the callback, `DENY_FAILED`. An interrupt, a stop or
            the watchdog answers a pending (or later) request `DENY_INTERRUPTED` at once,
            even while the callback still runs (its answer is then dropped): a backend that
            honours `Deny.interrupt` stops the tool and the turn.

        Mirrors: no Elixir original (see `gen_agent._permission`).
        """
        if self._permission is None:
            return DENY_FAILED
        return self._permission(request, timeout_ms / 1000)

    def send_info(self, message: Any) -> None:
        """Deliver `message` to the agent's `handle_info` (buffered while a turn runs, like
        `gen_agent.send`). Safe from any thread, also after the turn ended; a no-op when the
        runtime gave no sink or the agent is gone."""
        if self._info is not None:
            self._info(message)

    @property
    def info_sink(self) -> Callable[[Any], None] | None:
        """The callable behind `send_info` (kept by backends whose process outlives the
        turn), or None."""
        return self._info

    def __repr__(self) -> str:
        return (
            f"TurnContext(agent={self._agent!r}, ref={self._ref!r}, attempt={self._attempt}, "
            f"cancelled={self.cancelled})"
        )


class Backend(abc.ABC):
    """Base class documenting the backend hooks; subclassing it is optional.

    Hooks may be classmethods/staticmethods (the usual form: pass the class itself as the
    agent's backend) or instance methods (pass an instance). Every hook must be thread-safe with
    respect to the others: `prompt` runs in the turn task while `cancel` may run in the agent
    thread at the same time.

    Required hooks (abstract here):
        `start_session(opts)`, `prompt(session, prompt, context)`, `terminate_session(session)`.

    Optional hooks (deliberately NOT defined on this class, so `getattr(backend, name, None)`
    tells the runtime whether a backend supports them):

    - `update_session(session, result_data: dict) -> session`: turn task thread, once per
      successful turn, after the terminal `"result"` event was read and before the `Response`
      is built; receives the session `prompt` returned. Not called for errors, interrupts or
      watchdog timeouts. An exception is a task crash. (§7.1)
    - `checkpoint_session(session, session_id: str) -> session`: agent thread; applies a
      session id acknowledged through `TurnContext.checkpoint`. Without it, checkpoints are
      rejected with `"unsupported_checkpoint"`. (§7.3)
    - `reset_session(session) -> session`: agent thread, only while idle, for
      `gen_agent.reset_session`; must be quick and release replaced resources. Raise
      `ResetError(reason)` to refuse. (§2.15)
    - `resume_session(session_id: str, opts: dict) -> session`: reserved for supervisor
      restarts, never called by the runtime today; raise `SessionStartError(reason)`. (§7.1)
    - `idle_session(session) -> None`: agent thread, when the agent hibernates (no turn
      runs): release what an idle session need not hold (an HTTP backend closes its
      connections and drops its client, built again at the next turn). Must be quick; an
      exception is logged and ignored.
    - `cancel(session) -> None`: agent thread, on interrupt, watchdog and stop, while the turn
      task may still be running. Must be quick, thread-safe and idempotent: a CLI backend kills
      its process group, an HTTP backend closes its response, the mock wakes a blocked gate.
      Python threads cannot be killed, so this hook is how a blocked turn ends (§12.7).
    - `steer(session, prompt: str) -> bool`: agent thread, for a `busy="steer"` request
      (after its `pre_turn`) while a turn runs: deliver `prompt` into the running turn and
      return True, or return False (the runtime then runs the request next, ahead of the
      mailbox). Must be quick. A backend that accepts reports on the turn's terminal event
      how many steered prompts the turn took, `data["steered_joined"]` (int, in the order
      they were accepted); those past that count run as normal turns afterwards, so the
      backend must drop any output their delivery causes outside the turn. An exception is
      logged and counts as False. (docs/pages/busy.md)
    - `export_session(session) -> data`: agent thread, after every finished turn of an agent
      with a session store (`gen_agent.store`), before the decision callback: the resumable
      session as plain data that msgspec encodes (a CLI's session id, an HTTP backend's kept
      history, a server-side response id), never a client or a secret. An exception fails
      a successful turn with `("store_failed", "export_failed")`. Without it nothing of the
      conversation is stored (totals and state still are).
    - `restore_session(data, opts) -> session`: agent thread, at start when the store holds
      `export_session` data for the key; replaces `start_session(opts)`. Raise
      `SessionStartError(reason)` to refuse; any other exception makes the record corrupt
      (`("store_corrupt", key, detail)`).
    - `supports_rollback = True` (a class attribute, not a hook): the session `prompt` is
      given is the whole conversation before the turn, so keeping it drops an interrupted
      turn's exchange; `busy="rollback"` requires it (the HTTP backends and the mock set
      it; a CLI, whose transcript is in its own files, does not).
    - `keeps_cut_turn: frozenset[str]` (a class attribute): what a backend's own transcript
      keeps of a turn cut short, as measured on its real CLI: `"prompt"` (the user message),
      `"tool_calls"` (its tool calls with their outputs, or the CLI's stand-in for a missing
      one). An agent with `interrupted_preamble = True` gets only the rest as the preamble of
      its next prompt, when the stored conversation resumes the transcript (its
      `export_session` data has a `session_id`; a turn cut before one was stored gets the
      whole preamble). Default: nothing (`CodexCLI` sets both;
      docs/pages/durable-sessions.md).
    - `check_prompt(session, prompt) -> None`: the CALLER's thread, in `ask`, `tell`,
      `tell_with_completion` and `stream` before anything is queued, with the session the
      agent started with: raise `ValueError` (naming the position) for a prompt the
      backend's wire cannot carry, so the caller learns it at once and nothing is lost. Must
      be quick and thread-safe and depend only on the session's options. Prompts made by
      callbacks are not checked here: `prompt` fails their turn instead (the bundled CLI
      backends with `DispatchError(BackendError(kind="invalid_request"))`).
    - `prewarm_session(session, *, info, handles_permissions, output) -> None`: agent thread,
      once the agent has started (after `pre_run`; also after a supervisor restart): a
      backend may start what its first turn needs in the background (`ClaudeCLI`'s
      `prewarm` option). `info` is the agent's `handle_info` sink, `handles_permissions`
      whether it defines `handle_tool_permission`, `output` its default structured output
      (or None). Must not block; a failure there belongs to the first turn. An exception is
      logged and ignored.

    Mirrors: the `GenAgent.Backend` behaviour (docs/pages/contract.md#s7-1; docs: the backend
    guide).
    """

    @classmethod
    @abc.abstractmethod
    def start_session(cls, opts: dict[str, Any]) -> Any:
        """Open a session from the `backend_opts` that `init_agent` returned.

        Runs in the agent thread during start. Validate options (and credentials, offline when
        possible) here.

        Returns:
            The session: any object; the runtime stores it and threads it through the hooks.

        Raises:
            SessionStartError: refuse the start with `reason`; create nothing.
        """

    @classmethod
    @abc.abstractmethod
    def prompt(cls, session: Any, prompt: str, context: TurnContext) -> tuple[Iterable[Event], Any]:
        """Send `prompt` and return `(events, new_session)`.

        Runs in the turn task thread. `events` may be a list or a lazy (blocking) generator; it
        must end with exactly one terminal event (`"result"` or `"error"`); the runtime stops
        reading at the first terminal event and closes a generator early. A failure after
        dispatch is a terminal `"error"` event, not an exception. `new_session` replaces the
        stored session, even if the stream later fails.

        Raises:
            DispatchError: the turn could not be dispatched; the request fails with `reason`.
            Exception: any other exception (here or while iterating) is a task crash.
        """

    @classmethod
    @abc.abstractmethod
    def terminate_session(cls, session: Any) -> None:
        """Release the session's resources. Agent thread, during stop; must be idempotent.

        Called after the turn task is abandoned and after `terminate_agent`.
        """


@runtime_checkable
class BackendProtocol(Protocol):
    """The structural type of a backend, for type checkers (required hooks only).

    A backend class with classmethod hooks satisfies it as a class object; so does an
    instance with instance-method hooks. See `Backend` for the semantics.
    """

    def start_session(self, opts: dict[str, Any], /) -> Any:
        """See `Backend.start_session`."""

    def prompt(
        self, session: Any, prompt: str, context: TurnContext, /
    ) -> tuple[Iterable[Event], Any]:
        """See `Backend.prompt`."""

    def terminate_session(self, session: Any, /) -> None:
        """See `Backend.terminate_session`."""


def validate_backend(backend: Any) -> None:
    """Check that `backend` defines every required hook as a callable.

    Args:
        backend: a backend class or instance.

    Raises:
        TypeError: a required hook is missing or not callable; the message names the missing
            hooks and the accepted form.
    """
    missing = [name for name in REQUIRED_HOOKS if not callable(getattr(backend, name, None))]
    if missing:
        raise TypeError(
            "a backend must define callable hooks start_session, prompt and terminate_session;"
            f" {backend!r} lacks {', '.join(missing)}"
        )

"""The backend contract: how the runtime talks to an LLM provider (contract §7; docs: the backend
guide).

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
`restore_session`, `check_prompt` (`Backend` documents each).

`BackendError` is the normalized provider failure of the bundled backends (§7.4); it is both a
value (a reason compared by fields) and an exception.
"""

from __future__ import annotations

import abc
import email.utils
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Protocol, runtime_checkable

import msgspec

from gen_agent._cancel import CancelSignal
from gen_agent._errors import GenAgentError
from gen_agent._event import Event
from gen_agent._permission import (
    DEFAULT_PERMISSION_TIMEOUT_MS,
    DENY_FAILED,
    PermissionDecision,
    ToolPermissionRequest,
)
from gen_agent._request_options import DEFAULT_OPTIONS, RequestOptions

__all__ = [
    "MAX_RETRY_AFTER_MS",
    "OPTIONAL_HOOKS",
    "REQUIRED_HOOKS",
    "Backend",
    "BackendError",
    "BackendProtocol",
    "Diagnostics",
    "DispatchError",
    "ResetError",
    "SessionStartError",
    "TurnContext",
    "validate_backend",
]

MAX_RETRY_AFTER_MS: Final = 3_600_000
"""The longest provider-sent delay honoured (milliseconds; one hour): a `Retry-After` beyond
it (a date years ahead, `1e13`, `inf`) counts as this, so a provider cannot hold an agent, a
`ProviderLimit` or a pool retry back for longer; the next failure holds again."""

REQUIRED_HOOKS: Final = ("start_session", "prompt", "terminate_session")
"""Hooks every backend defines (contract §7.1; docs: the backend guide)."""

OPTIONAL_HOOKS: Final = (
    "update_session",
    "checkpoint_session",
    "reset_session",
    "resume_session",
    "cancel",
    "export_session",
    "restore_session",
    "check_prompt",
)
"""Hooks the runtime looks up with `getattr(backend, name, None)` and uses when present."""


class SessionStartError(GenAgentError):
    """Raise from `start_session` (or `resume_session`) to refuse the session with `reason`.

    The agent start then fails with `AgentStartError(("backend_start_failed", reason))`.
    Differs from any other exception raised by `start_session`, which is a crash of the start
    (`("init_failed", kind, "TypeName")`). Mirrors `{:error, reason}` from `start_session/1`.
    """


class DispatchError(GenAgentError):
    """Raise from `prompt` when the turn could not be dispatched at all (`.reason`).

    The request fails with exactly `reason`, and the session from before the call is kept.
    Differs from a terminal `"error"` event (a failure after dispatch, whose session is kept from
    `prompt`'s return) and from any other exception, which is a task crash
    (`("task_crashed", exc)`). Mirrors `{:error, reason}` from `prompt/2,3`.
    """


class ResetError(GenAgentError):
    """Raise from `reset_session` to refuse the reset with `reason`.

    `gen_agent.reset_session` then raises `RequestError(("backend_reset_failed", ...))` and
    the old session stays in place. Mirrors `{:error, reason}` from `reset_session/1`.
    """


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
        checkpoint(session_id): report a provider session id early (contract §7.3; docs: the
        backend guide).
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
        journal: the turn's tool journal for an agent with a store (pass it to
            `gen_agent.tools.run_calls` as `journal=`), else None.

    Mirrors: the context map passed to `prompt/3` (contract §4.6, §7.3; docs: Concepts), plus the
    cancel signal that replaces BEAM's task kill (contract §12.7; docs: Coming from Elixir).
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
        """The turn's tool journal (an agent with a store), else None."""
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
            gen_agent._errors.CheckpointError: the agent rejected it; `.reason` is
                `"unsupported_checkpoint"`, `"invalid_session_id"`,
                `"conflicting_session_id"` or `"not_current"`. The backend should then fail
                its turn (the bundled CLI backends raise).

        Mirrors: the `checkpoint` function of the `prompt/3` context (contract §7.3; docs: the
        backend guide).
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
    - `cancel(session) -> None`: agent thread, on interrupt, watchdog and stop, while the turn
      task may still be running. Must be quick, thread-safe and idempotent: a CLI backend kills
      its process group, an HTTP backend closes its response, the mock wakes a blocked gate.
      Python threads cannot be killed, so this hook is how a blocked turn ends (§12.7).
    - `export_session(session) -> data`: agent thread, after every finished turn of an agent
      with a session store (`gen_agent.store`), before the decision callback: the resumable
      session as plain data that msgspec encodes (a CLI's session id, an HTTP backend's kept
      history, a server-side response id), never a client or a secret. An exception fails
      a successful turn with `("store_failed", "export_failed")`. Without it nothing of the
      conversation is stored (totals and state still are).
    - `restore_session(data, opts) -> session`: agent thread, at start when the store holds
      `export_session` data for the key; replaces `start_session(opts)`. Raise
      `SessionStartError(reason)` to refuse; any other exception makes the record corrupt
      (`("store_corrupt", key, detail)`). Issue #18 will switch the HTTP backends' data to
      the turn record's replayable message deltas (`response.messages`).
    - `check_prompt(session, prompt) -> None`: the CALLER's thread, in `ask`, `tell`,
      `tell_with_completion` and `stream` before anything is queued, with the session the
      agent started with: raise `ValueError` (naming the position) for a prompt the
      backend's wire cannot carry, so the caller learns it at once and nothing is lost. Must
      be quick and thread-safe and depend only on the session's options. Prompts made by
      callbacks are not checked here: `prompt` fails their turn instead (the bundled CLI
      backends with `DispatchError(BackendError(kind="invalid_request"))`).

    Mirrors: the `GenAgent.Backend` behaviour (contract §7.1; docs: the backend guide).
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


# --- BackendError -------------------------------------------------------------------------

_FIELDS: Final = ("provider", "kind", "retryable", "status", "retry_after", "message", "raw")


def _http_kind(status: int) -> str:
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "authentication"
    if status in (400, 404, 422):
        return "invalid_request"
    if status >= 500:
        return "server_error"
    return "http_error"


def _http_retryable(status: int) -> bool:
    return status in (408, 409, 425, 429) or status >= 500


def _decode_body(body: Any) -> Any:
    """A JSON object in a str/bytes body becomes a dict; bytes otherwise become text."""
    if isinstance(body, bytes | bytearray):
        try:
            decoded = json.loads(body)
        except ValueError:
            return bytes(body).decode("utf-8", errors="replace")
        return decoded if isinstance(decoded, dict) else bytes(body).decode("utf-8", "replace")
    if isinstance(body, str) and body.lstrip()[:1] == "{":
        try:
            decoded = json.loads(body)
        except ValueError:
            return body
        return decoded if isinstance(decoded, dict) else body
    return body


def _message_of(body: Any) -> str | None:
    """The first of error.message, error (str), message, or the body itself if a str."""
    body = _decode_body(body)
    if isinstance(body, str):
        return body
    if not isinstance(body, Mapping):
        return None
    error = body.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return error["message"]
    if isinstance(error, str):
        return error
    message = body.get("message")
    return message if isinstance(message, str) else None


def _header_pairs(headers: Any) -> Iterable[tuple[Any, Any]]:
    if headers is None:
        return ()
    multi_items = getattr(headers, "multi_items", None)
    if callable(multi_items):  # httpx.Headers: repeated headers stay separate
        return multi_items()
    if isinstance(headers, Mapping) or callable(getattr(headers, "items", None)):
        return headers.items()
    return headers


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    return None


def _retry_after(headers: Any) -> str | None:
    for pair in _header_pairs(headers):
        try:
            name, value = pair
        except (TypeError, ValueError):
            continue
        name_text = _text(name)
        if name_text is None or name_text.lower() != "retry-after":
            continue
        if isinstance(value, list | tuple):
            return next((t for t in map(_text, value) if t is not None), None)
        return _text(value)
    return None


def _transport_retryable(exc: BaseException) -> bool | None:
    """None if `exc` is no transport error; else whether it is a timeout, close or reset."""
    for name in ("httpx", "httpx2"):  # the SDKs' HTTP client, under either package name
        httpx = sys.modules.get(name)  # an httpx exception implies httpx is already imported
        if httpx is not None and isinstance(exc, httpx.TransportError):
            if isinstance(exc, httpx.TimeoutException | httpx.RemoteProtocolError):
                return True
            return any(_closed_or_reset(cause) for cause in _causes(exc))
    if isinstance(exc, TimeoutError | ConnectionError):
        return _closed_or_reset(exc)
    return None


def _closed_or_reset(exc: BaseException) -> bool:
    return isinstance(
        exc, TimeoutError | ConnectionResetError | BrokenPipeError | ConnectionAbortedError
    )


def _causes(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc.__cause__ or exc.__context__
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class Diagnostics(msgspec.Struct, frozen=True, kw_only=True):
    """What a failed turn had learned before it failed: the facts a caller needs to decide.

    Filled by the bundled backends on the `BackendError` of every failed turn (see the table
    in `docs/pages/errors.md`); every field is optional. Payload text (`partial_text`,
    `stderr_tail`) is data for the caller: it never appears in `str()` / `repr()` of the
    error and must never be logged.

    Fields:
        partial_text: the assistant text streamed before the failure (`""`: none).
        session_id: the provider session id known so far (a CLI's init line or thread id,
            an SDK backend's session id), even when the turn failed before its result; None
            when none was known. After `"session_not_found"` it is None (the id is dead).
        exit_code: the CLI's exit status (negative: the signal that ended it), or None when
            there is no process or it had not exited when the turn ended.
        stderr_tail: the end of the CLI's stderr (text, at most `stderr_tail_bytes`), or
            None without a process.
        stdout_tail: the lines a CLI printed to stdout that were not JSON (text, the most
            recent, newline-joined, at most `stderr_tail_bytes`), or None when there were
            none (a CLI that prints a plain message before exiting without a result).
        http_status: the HTTP status of the response the failure came with (200 for a
            failure in the middle of a stream), or None when no response arrived.
        response_id: the provider's id of the reply (`msg_...`, `resp_...`), or None.
        stop_reason: why the reply stopped (e.g. an OpenAI incomplete reason
            `"max_output_tokens"`), or None.
        usage: the token counts the provider reported before the failure (tokens), or None.
        fallback: the trail of a `Fallback` turn whose every hop failed (`{"fired",
            "hops"}`, see `gen_agent.backends.fallback`), or None.

    Mirrors: nothing in the contract (a Python addition beside `%GenAgent.Backend.Error{}`).
    """

    partial_text: str = ""
    session_id: str | None = None
    exit_code: int | None = None
    stderr_tail: str | None = None
    stdout_tail: str | None = None
    http_status: int | None = None
    response_id: str | None = None
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    fallback: dict[str, Any] | None = None


NO_DIAGNOSTICS: Final = Diagnostics()


class BackendError(GenAgentError):
    """A provider failure, normalized; both a reason value and an exception.

    Fields (attributes; treat them as read-only):
        provider: `"claude"`, `"codex"`, `"anthropic"`, `"openai"` or another backend's name.
        kind: `"rate_limited"`, `"authentication"`, `"invalid_request"`, `"server_error"`,
            `"http_error"`, `"transport"`, `"provider_error"` or a backend-specific kind.
        retryable: whether retrying the same request may succeed (gen_agent never retries
            by itself).
        status: the HTTP status code, or None.
        retry_after: the raw `Retry-After` header value (a str, seconds or an HTTP date), or
            None.
        message: the provider's human-readable message, or None. May contain request data:
            it is never shown by `str()`/`repr()` and must never be logged.
        raw: the original term (response body and headers, exception, tuple...).
        diagnostics: a `Diagnostics` record of what the failed turn had learned (partial
            text, exit code and stderr tail, HTTP status, session id so far); keyword-only,
            empty by default. The bundled backends fill it on every failed turn
            (`with_diagnostics`).

    Equality compares the seven contract fields (not `diagnostics`, which describes the
    turn, not the failure); the hash covers all but `raw`. `str(err)` shows kind, provider,
    status and retry_after, `repr(err)` kind, provider and status, never a message or
    diagnostics. `.reason` is `kind`.

    Raises:
        TypeError: from the constructor, when a field has the wrong type.

    Mirrors: `%GenAgent.Backend.Error{}` (contract §7.4; docs: the backend guide).
    """

    def __init__(
        self,
        provider: str,
        kind: str,
        retryable: bool = False,
        status: int | None = None,
        retry_after: str | None = None,
        message: str | None = None,
        raw: Any = None,
        *,
        diagnostics: Diagnostics = NO_DIAGNOSTICS,
    ) -> None:
        _check_fields(provider, kind, retryable, status, retry_after, message)
        if not isinstance(diagnostics, Diagnostics):
            raise TypeError(
                f"BackendError diagnostics must be a Diagnostics, got {type(diagnostics).__name__}"
            )
        self.provider = provider
        self.kind = kind
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.message = message
        self.raw = raw
        self.diagnostics = diagnostics
        super().__init__(kind, self._summary())

    def with_diagnostics(self, **changes: Any) -> BackendError:
        """A copy of this error whose `diagnostics` has `changes` applied.

        Args:
            changes: `Diagnostics` fields (`partial_text=...`, `exit_code=...`); a value of
                None leaves a field as it is.

        Returns:
            A new `BackendError`, equal to this one (diagnostics are not compared).

        Raises:
            TypeError: an unknown field name.
        """
        kept = {key: value for key, value in changes.items() if value is not None}
        diagnostics = msgspec.structs.replace(self.diagnostics, **kept)
        return type(self)(*self._fields(), diagnostics=diagnostics)

    @property
    def retry_after_ms(self) -> int | None:
        """`retry_after` in milliseconds from now (an int from 0 to `MAX_RETRY_AFTER_MS`), or
        None when absent or unreadable. Accepts delta-seconds (`"2"`, `"1.5"`) and HTTP dates
        (RFC 9110); a longer delay is clamped to `MAX_RETRY_AFTER_MS` (one hour)."""
        value = self.retry_after
        if value is None:
            return None
        try:
            delay_s = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            if when.tzinfo is None:
                return None
            delay_s = when.timestamp() - time.time()
        if math.isnan(delay_s):
            return None
        return round(min(max(0.0, delay_s * 1000), MAX_RETRY_AFTER_MS))

    def _summary(self) -> str:
        status = "" if self.status is None else f", status={self.status}"
        retry = "" if self.retry_after is None else f", retry_after={self.retry_after}"
        return f"{self.kind} (provider={self.provider}{status}{retry})"

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BackendError):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields()[:-1])

    def __repr__(self) -> str:
        return (
            f"BackendError(provider={self.provider!r}, kind={self.kind!r}, "
            f"retryable={self.retryable}, status={self.status!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self._fields(), self.diagnostics))

    @classmethod
    def http(
        cls,
        provider: str,
        status: int,
        body: Any,
        headers: Any = None,
        raw: Any = None,
    ) -> BackendError:
        """Build the error for a non-success HTTP response.

        Args:
            provider: the provider name (str).
            status: the HTTP status code (int).
            body: the response body: a dict, a JSON str/bytes (decoded when it holds an
                object), any other str/bytes, or anything else.
            headers: a dict, a list of `(name, value)` pairs or an `httpx.Headers`-like
                mapping; names match case-insensitively; a value may be a str, bytes or a list
                whose first str is used. Default none.
            raw: the original term; default `{"body": body, "headers": headers}`.

        Returns:
            A `BackendError` with `kind` 429 → `"rate_limited"`, 401/403 →
            `"authentication"`, 400/404/422 → `"invalid_request"`, >= 500 →
            `"server_error"`, else `"http_error"`; `retryable` iff status is 408, 409, 425,
            429 or >= 500; `retry_after` from the first `retry-after` header; `message` from
            the body: `{"error": {"message": m}}`, `{"error": m}`, `{"message": m}`, or the
            body itself if it is a str.

        Raises:
            TypeError: `provider` is not a str or `status` not an int.

        Mirrors: `GenAgent.Backend.Error.http/5` (contract §7.4; docs: the backend guide).
        """
        if not isinstance(status, int) or isinstance(status, bool):
            raise TypeError(f"status must be an int HTTP status, got {type(status).__name__}")
        return cls(
            provider,
            _http_kind(status),
            _http_retryable(status),
            status,
            _retry_after(headers),
            _message_of(body),
            {"body": body, "headers": headers} if raw is None else raw,
        )

    @classmethod
    def new(
        cls,
        provider: str,
        kind: str,
        raw: Any = None,
        *,
        retryable: bool = False,
        status: int | None = None,
        retry_after: str | None = None,
        message: str | None = None,
    ) -> BackendError:
        """Build an error of any `kind`; `message` defaults to one derived from `raw`.

        Args:
            provider: the provider name (str).
            kind: the error kind (str).
            raw: the original term (default None).
            retryable: default False. status, retry_after: default None.
            message: default: extracted from `raw` as `http` extracts it from a body.

        Raises:
            TypeError: a field has the wrong type.

        Mirrors: `GenAgent.Backend.Error.new/4` (contract §7.4; docs: the backend guide).
        """
        if message is None:
            message = _message_of(raw)
        return cls(provider, kind, retryable, status, retry_after, message, raw)

    @classmethod
    def normalize(cls, provider: str, term: Any) -> BackendError:
        """Turn any backend failure term into a `BackendError`.

        Args:
            provider: the provider name (str).
            term: one of
                - a `BackendError` → returned unchanged;
                - `("http_error", status: int, body)` → `http(provider, status, body, None,
                  term)`;
                - an HTTP transport exception (`httpx.TransportError`, or a builtin
                  `TimeoutError` / `ConnectionError`) → kind `"transport"`, retryable iff a
                  timeout, a closed connection (`httpx.RemoteProtocolError`,
                  `BrokenPipeError`, `ConnectionAbortedError`) or a reset
                  (`ConnectionResetError`), message `str(exc)`;
                - `(kind: str, value)` → kind that string, message derived from `value`, not
                  retryable, raw the tuple;
                - anything else → kind `"provider_error"`, not retryable, raw kept, message
                  derived from it.

        Returns:
            A `BackendError`.

        Mirrors: `GenAgent.Backend.Error.normalize/2` (contract §7.4; docs: the backend guide).
        Core reasons
        (`"timeout"`, `"no_terminal_event"`...) are never passed here.
        """
        if isinstance(term, BackendError):
            return term
        if isinstance(term, tuple):
            return cls._normalize_tuple(provider, term)
        if isinstance(term, BaseException):
            retryable = _transport_retryable(term)
            if retryable is not None:
                return cls(provider, "transport", retryable, message=str(term), raw=term)
        return cls.new(provider, "provider_error", term)

    @classmethod
    def _normalize_tuple(cls, provider: str, term: tuple[Any, ...]) -> BackendError:
        if (
            len(term) == 3
            and term[0] == "http_error"
            and isinstance(term[1], int)
            and not isinstance(term[1], bool)
        ):
            return cls.http(provider, term[1], term[2], None, term)
        if len(term) == 2 and isinstance(term[0], str):
            return cls.new(provider, term[0], term, message=_message_of(term[1]))
        return cls.new(provider, "provider_error", term)


def _rebuild(cls: type[BackendError], fields: tuple[Any, ...], diagnostics: Any) -> BackendError:
    return cls(*fields, diagnostics=diagnostics)


def _check_fields(
    provider: Any,
    kind: Any,
    retryable: Any,
    status: Any,
    retry_after: Any,
    message: Any,
) -> None:
    checks = (
        ("provider", provider, str, False),
        ("kind", kind, str, False),
        ("retryable", retryable, bool, False),
        ("status", status, int, True),
        ("retry_after", retry_after, str, True),
        ("message", message, str, True),
    )
    for name, value, expected, nullable in checks:
        if value is None and nullable:
            continue
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            suffix = " or None" if nullable else ""
            raise TypeError(
                f"BackendError {name} must be a {expected.__name__}{suffix}, "
                f"got {type(value).__name__}"
            )

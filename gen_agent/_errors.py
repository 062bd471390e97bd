"""Every exception of gen_agent's own tree, in one module.

Runtime outcomes are exceptions under one base, `GenAgentError`; usage errors (a bad option,
a non-str prompt) stay outside it as `ValueError` / `TypeError`, so catching `GenAgentError`
never hides a bug. Reasons are data (`exc.reason`), never parsed from the message; how a
reason is shown is `gen_agent._reasons` (docs: docs/pages/errors.md).

    GenAgentError                         .reason: the contract's reason, as data
    ├── AgentNotFound (also LookupError)  not registered (or already gone) before the call
    ├── AlreadyStarted                    start_agent with a name that is taken
    ├── AgentStartError                   the start failed: ("init_agent_failed", r), ...
    ├── AgentDown                         the agent died while this caller was waiting
    ├── CallTimeout (also TimeoutError)   the caller's own timeout expired; the agent goes on
    ├── TurnError                         a prompt request failed ("timeout", ...)
    ├── RequestError                      a control call failed ("busy", "draining", ...)
    ├── InitAgentError                    raised by init_agent to refuse the start
    ├── PreRunError                       raised by pre_run to stop the agent
    ├── CheckpointError                   context.checkpoint(id) was rejected
    ├── SessionStartError                 raised by a backend's start_session: no session
    ├── DispatchError                     raised by a backend's prompt: nothing was sent
    ├── ResetError                        raised by a backend's reset_session: no reset
    ├── BackendError                      a provider failure, normalized (also a reason)
    └── StoreError                        a session store operation failed ("busy", ...)
        ├── StoreSchemaError              the store's file has a newer schema
        ├── CorruptRecord                 a stored record cannot be decoded
        └── LeaseHeld                     another live owner holds the key's lease

Users import these from `gen_agent` (and the store's from `gen_agent.store`); backend authors
from `gen_agent.backend`. Outside the tree, on purpose: `telemetry.HandlerAlreadyAttached`
(a `ValueError`, a usage error), `tools.ToolInterrupted` (raised inside a tool whose turn
was cancelled), and the mock backend's scripted `MockRaised` / `GateCancelled`. Some reasons
are records, not exceptions: `BudgetExceeded`, `OverloadInfo`, `HostOverload`,
`InvalidOutput` travel inside a `TurnError`'s `.reason`.
"""

from __future__ import annotations

import email.utils
import json
import math
import sys
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from gen_agent._reasons import MAX_SHOWN, describe_reason

if TYPE_CHECKING:
    from gen_agent.store._records import Lease

__all__ = [
    "MAX_RETRY_AFTER_MS",
    "NO_DIAGNOSTICS",
    "AgentDown",
    "AgentNotFound",
    "AgentStartError",
    "AlreadyStarted",
    "BackendError",
    "CallTimeout",
    "CheckpointError",
    "CorruptRecord",
    "Diagnostics",
    "DispatchError",
    "GenAgentError",
    "InitAgentError",
    "LeaseHeld",
    "PreRunError",
    "RequestError",
    "ResetError",
    "SessionStartError",
    "StoreError",
    "StoreSchemaError",
    "TurnError",
]


class GenAgentError(Exception):
    """Base of every runtime error gen_agent raises. Carries `reason` when there is one.

    `str(exc)` renders the whole reason structure (see `describe_reason`), never payload text
    (prompts, responses, provider messages); a library-written `detail` (an option's accepted
    values, the message of a `ValueError` raised by gen_agent's own validation) may follow in
    parentheses. The exception that caused it, when there is one, is `exc.__cause__`.
    """

    def __init__(self, reason: Any = None, message: str | None = None) -> None:
        self.reason = reason
        super().__init__(message if message is not None else describe_reason(reason))
        cause = _cause_in(reason)
        if cause is not None and cause is not self:
            self.__cause__ = cause

    def __describe__(self) -> str:
        """How a reason carrying this exception shows it: its own message (`describe_reason`)."""
        return str(self)


def _cause_in(reason: Any) -> BaseException | None:
    """The exception carried by a reason (`exc`, `("task_crashed", exc)`), if any."""
    if isinstance(reason, BaseException):
        return reason
    if isinstance(reason, tuple):
        for item in reason:
            if isinstance(item, BaseException):
                return item
    return None


class AgentNotFound(GenAgentError, LookupError):
    """The name is not registered, or its agent is already dead, at lookup time.

    Differs from `AgentDown`: that one means the lookup succeeded and the agent died while
    the call was in flight (the contract deliberately keeps the two apart, §2.1).
    When the name belonged to an agent that ended recently, `.last_exit` is that agent's exit
    reason, the message names it, and `__cause__` is the exception that stopped it (if any):
    a by-name call after a crash says why the name is gone. Mirrors `{:error, :not_found}`.
    """

    def __init__(self, name: Any = None, *, last_exit: Any = None) -> None:
        self.name = name
        #: The exit reason of the last agent that had this name, when the system still
        #: remembers it (a recently stopped or crashed agent); None otherwise.
        self.last_exit = last_exit
        shown = repr(name)
        if len(shown) > MAX_SHOWN:
            shown = shown[:MAX_SHOWN] + "…"
        message = f"no agent named {shown}"
        if last_exit is not None:
            message += f" (the last agent of that name exited: {describe_reason(last_exit)})"
        super().__init__("not_found", message)


class AlreadyStarted(GenAgentError):
    """`start_agent` was given a name that a live agent already holds.

    `.name` is the name; `.agent` the `AgentRef` holding it. Mirrors `{:error, {:already_started,
    pid}}`.
    """

    def __init__(self, name: Any, agent: Any = None) -> None:
        self.name = name
        self.agent = agent
        shown = repr(name)
        if len(shown) > MAX_SHOWN:
            shown = shown[:MAX_SHOWN] + "…"
        super().__init__(("already_started", agent), f"an agent named {shown} is already running")


class AgentStartError(GenAgentError):
    """The agent failed to start; nothing is left running or registered.

    `.reason` is one of `("init_agent_failed", r)`, `("backend_start_failed", r)`, `("init_failed",
    kind, "TypeName")` (docs/pages/contract.md#s2-2; docs: the client API reference). Mirrors
    `{:error, reason}` from `GenAgent.start_agent/2`.
    """


class AgentDown(GenAgentError):
    """The agent stopped or was killed while this caller waited (the Elixir call "exits").

    `.reason` is the agent's exit reason when known (e.g. `("callback_failed", "error",
    "ValueError")`, `"killed"`). Differs from `AgentNotFound`, which is raised before anything
    was sent.
    """


class CallTimeout(GenAgentError, TimeoutError):
    """The caller's own `timeout` (seconds) expired. The agent is unaffected: a timed-out ask
    stays queued or running (docs/pages/contract.md#s2-1; docs: the client API reference). Mirrors
    the caller-side `exit({:timeout, _})`.
    """

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout
        super().__init__("timeout", f"no answer within {timeout} s")


class TurnError(GenAgentError):
    """A prompt request (ask, tell_with_completion admission, notify_ack) failed.

    `.reason` is exactly the contract's reason (§4.20): a string such as `"timeout"`,
    `"interrupted"`, `"no_terminal_event"`, `"draining"`, or a tuple such as
    `("task_crashed", exc)`, `("overloaded", OverloadInfo)`, `("agent_terminated", "shutdown")`,
    or a backend's own reason (a `BackendError` for bundled backends).
    Mirrors `{:error, reason}` from `GenAgent.ask/3`.
    """


class RequestError(GenAgentError):
    """A control call (reset_session, drain, stop, ...) answered `{:error, reason}`.

    `.reason` is the contract's reason, e.g. `"busy"`, `"draining"`, `"unsupported"`,
    `"self_stop"`, `("backend_reset_failed", "TypeName")`, `("agent_down", r)`.
    """


class InitAgentError(GenAgentError):
    """Raise from `GenAgent.init_agent` to refuse the start with `reason`.

    The start then fails with `AgentStartError(("init_agent_failed", reason))`.
    Mirrors `{:error, reason}` returned by `init_agent/1`.
    """


class PreRunError(GenAgentError):
    """Raise from `GenAgent.pre_run` to stop the agent with `("pre_run_failed", reason)`.

    Mirrors `{:error, reason}` returned by `pre_run/1`.
    """


class CheckpointError(GenAgentError):
    """`TurnContext.checkpoint(session_id)` was rejected.

    `.reason` is `"unsupported_checkpoint"`, `"invalid_session_id"`,
    `"conflicting_session_id"` (recorded: the turn fails with it) or `"not_current"` (a call
    from another thread or an old turn; not recorded). Mirrors `{:error, reason}` from the
    checkpoint function (docs/pages/contract.md#s7-3; docs: the backend guide).
    """


# -- what a backend raises, and a provider failure ---------------------------------------

MAX_RETRY_AFTER_MS: Final = 3_600_000
"""The longest provider-sent delay honoured (milliseconds; one hour): a `Retry-After` beyond
it (a date years ahead, `1e13`, `inf`) counts as this, so a provider cannot hold an agent, a
`ProviderLimit` or a pool retry back for longer; the next failure holds again."""


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

    Mirrors: `%GenAgent.Backend.Error{}` (docs/pages/contract.md#s7-4; docs: the backend guide).
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

        Mirrors: `GenAgent.Backend.Error.http/5` (docs/pages/contract.md#s7-4; docs: the backend
        guide).
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

        Mirrors: `GenAgent.Backend.Error.new/4` (docs/pages/contract.md#s7-4; docs: the backend
        guide).
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

        Mirrors: `GenAgent.Backend.Error.normalize/2` (docs/pages/contract.md#s7-4; docs: the
        backend guide). Core reasons (`"timeout"`, `"no_terminal_event"`...) are never passed here.
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


# -- the session store ---------------------------------------------------------------------


class StoreError(GenAgentError):
    """A store operation failed; `.reason` is its kind, a `str`.

    Kinds: `"busy"` (the database stayed locked by other processes past `busy_timeout`),
    `"io_error"` (any other SQLite or OS failure), `"lease_lost"` (another owner took the
    key's lease), `"encode_error"` (a value msgspec cannot encode), `"closed"` (the store was
    closed). Differs from `CorruptRecord` (a record that cannot be decoded) and
    `StoreSchemaError` (a file written by a newer gen_agent).
    """


class StoreSchemaError(StoreError):
    """The store's file has a schema this gen_agent does not know (newer, or not ours).

    `.found` is the version on disk, `.supported` this gen_agent's `SCHEMA_VERSION`.
    Raised by the `SQLiteStore` constructor: nothing is read or written.
    """

    def __init__(self, path: str, found: int, supported: int) -> None:
        self.path, self.found, self.supported = path, found, supported
        super().__init__(
            "schema_newer",
            f"session store {path!r} has schema version {found}, newer than the version "
            f"{supported} this gen_agent supports; upgrade gen_agent to open it",
        )


class CorruptRecord(StoreError):
    """The record stored under `.key` cannot be decoded (`.detail` says which part).

    An agent starting on that key fails with `AgentStartError(("store_corrupt", key,
    detail))`; other keys are unaffected. Delete the record (`gen-agent sessions delete`).
    """

    def __init__(self, key: str, detail: str) -> None:
        self.key, self.detail = key, detail
        super().__init__("corrupt_record", f"stored session {key!r} is corrupt ({detail})")


class LeaseHeld(StoreError):
    """Another live owner holds the key's lease (`.key`, `.holder`: its `Lease`).

    An agent starting on that key fails with `AgentStartError(("session_leased", key,
    {"pid": ..., "host": ...}))`.
    """

    def __init__(self, key: str, holder: Lease) -> None:
        self.key, self.holder = key, holder
        super().__init__(
            "lease_held",
            f"session {key!r} is owned by pid {holder.pid} on {holder.host!r}",
        )

"""A reason as text, and as a class: every rendering, redaction and classification of one.

A reason is data: an exception's `.reason`, an agent's exit reason, a `("task_crashed",
exc)` tuple, a `BackendError`. How it is shown depends on who reads it, so each audience has
one function here and nowhere else:

- `describe_reason`: `str()` of every `GenAgentError` and the messages of the API; the whole
  structure, never payload text (prompts, responses, provider messages).
- `terminal_reason`: the command line's, for a person at a terminal; a provider failure also
  shows the provider's own message.
- `brief_reason`: the observer's content-free form, identifier-like atoms joined with `:`.
- `redacted`: a log line's, the head only (docs/pages/contract.md#s3-14; docs:
  docs/pages/errors.md).

And two classifications for telemetry: `reason_kind` (the contract's `reason_kind`
metadata) and `error_type` (OpenTelemetry's low-cardinality `error.type`).

A value may render itself with a `__describe__()` method (`GenAgentError`, `InvalidOutput`),
so nothing here imports the exception classes.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

__all__ = [
    "MAX_SHOWN",
    "brief_reason",
    "describe_reason",
    "error_type",
    "reason_kind",
    "redacted",
    "terminal_reason",
]

_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_HIDDEN_FIELDS = frozenset({"message", "raw", "text", "prompt", "data", "events", "response",
                            "final_message"})
MAX_SHOWN: Final = 80
"""The longest string a rendering shows before cutting it with "…" (characters)."""


def describe_reason(reason: Any) -> str:
    """Render a reason readably, without payload text.

    A string is shown as is; a tuple headed by a string as `head: rest`, nested tuples as
    `head rest`; identifiers bare, other strings quoted (and cut at 80 characters); exceptions by
    type name (a `GenAgentError` by its own rendering); msgspec records as
    `Type(field=value, ...)` without payload-carrying fields (`message`, `raw`, `text`, ...),
    or by their own `__describe__()` when they define one (`InvalidOutput` shows its
    validation message with quoted values elided).

    Examples: `("callback_failed", "error", "ValueError")` → `callback_failed: error ValueError`;
    `("backend_start_failed", ("unknown_option", "modle"))` →
    `backend_start_failed: unknown_option 'modle'`.
    """
    if isinstance(reason, tuple) and reason and isinstance(reason[0], str):
        if len(reason) == 1:
            return reason[0]
        return f"{reason[0]}: " + " ".join(_part(item, reason[0]) for item in reason[1:])
    if reason is None:
        return ""
    if isinstance(reason, str):
        return reason
    return _part(reason, None)


def _part(value: Any, head: str | None) -> str:
    if isinstance(value, str):
        if head in ("unknown_option", "invalid_option") or not _BARE.match(value):
            return repr(value[:MAX_SHOWN] + ("…" if len(value) > MAX_SHOWN else ""))
        return value
    if isinstance(value, tuple):
        if value and isinstance(value[0], str):
            return " ".join([value[0], *(_part(item, value[0]) for item in value[1:])])
        return "(" + ", ".join(_part(item, None) for item in value) + ")"
    describe = getattr(type(value), "__describe__", None)
    if describe is not None:  # a GenAgentError, or a record rendering itself without payload
        return str(describe(value))
    if isinstance(value, BaseException):
        return type(value).__name__
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    fields = getattr(value, "__struct_fields__", None)
    if fields is not None:
        shown = ", ".join(f"{f}={_part(getattr(value, f), None)}" for f in fields
                          if f not in _HIDDEN_FIELDS)
        return f"{type(value).__name__}({shown})"
    return type(value).__name__


def _provider_failure(reason: Any) -> bool:
    """A `BackendError` (or its like): an exception naming a provider and a kind."""
    return (isinstance(reason, Exception) and type(getattr(reason, "provider", None)) is str
            and type(getattr(reason, "kind", None)) is str)


def terminal_reason(reason: Any) -> str:
    """A one-line human description of a failure reason (for the terminal, never for logs).

    A `BackendError` shows provider, kind, HTTP status and the provider's message; a string
    its words; a tuple reason its parts joined with `: `; an exception or a record its type.
    """
    if _provider_failure(reason):
        status = f" (HTTP {reason.status})" if reason.status is not None else ""
        message = f": {reason.message}" if reason.message else ""
        return f"{reason.provider} {reason.kind}{status}{message}"
    if isinstance(reason, str):
        return reason.replace("_", " ")
    if isinstance(reason, tuple) and reason:
        return ": ".join(terminal_reason(part) for part in reason)
    if isinstance(reason, BaseException):
        return type(reason).__name__
    if isinstance(reason, msgspec.Struct):
        return type(reason).__name__
    return repr(reason)


_ATOM = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")


def brief_reason(reason: Any) -> str:
    """A content-free one-line form of an exit or failure reason.

    Identifier-like strings are kept (`"shutdown"`, `"callback_failed"`, an exception type
    name); tuples are joined with `:` (at most four parts); anything else (messages,
    payloads, exceptions) becomes its type name or `"…"`. So `("callback_failed", "error",
    "DemoCrash")` reads `callback_failed:error:DemoCrash` and never carries text from a
    prompt or a response.
    """
    if reason is None:
        return ""
    if isinstance(reason, str):
        return reason if _ATOM.match(reason) else "…"
    if isinstance(reason, tuple):
        return ":".join(brief_reason(part) or "None" for part in reason[:4])
    if isinstance(reason, BaseException):
        return type(reason).__name__
    if isinstance(reason, bool | int | float):
        return str(reason)
    return type(reason).__name__


def reason_kind(reason: Any) -> str:
    """The contract's `reason_kind` of a failed turn: `"timeout"`, `"interrupted"`,
    `"task_crashed"` or `"backend_or_callback_error"` (telemetry metadata)."""
    if reason in ("timeout", "interrupted"):
        return reason
    if isinstance(reason, tuple) and reason and reason[0] == "task_crashed":
        return "task_crashed"
    return "backend_or_callback_error"


# The failure reasons the runtime itself produces, which name nothing but the failure.
_RUNTIME_REASONS = frozenset({
    "timeout", "interrupted", "no_terminal_event", "unknown", "unsupported_checkpoint",
    "invalid_session_id", "conflicting_session_id", "not_current",
})
_RUNTIME_HEADS = frozenset({"task_crashed", "event_capture_overflow"})


def error_type(reason: Any) -> str:
    """A low-cardinality, content-free name of a turn's failure reason (`error.type`).

    The runtime's own reasons are themselves (`"timeout"`, `"interrupted"`,
    `"no_terminal_event"`, `"event_capture_overflow"`...); a `BackendError` gives its `kind`
    (`"rate_limited"`, `"server_error"`...); a task crash the exception's type name (or the
    crashed `BackendError`'s kind); any other reason, which a backend may have made from
    anything, `"_OTHER"` (the OpenTelemetry fallback value).
    """
    if type(reason) is str:
        return reason if reason in _RUNTIME_REASONS else "_OTHER"
    kind = getattr(reason, "kind", None)
    if type(kind) is str and isinstance(reason, Exception):
        return kind
    if isinstance(reason, tuple) and reason and reason[0] in _RUNTIME_HEADS:
        crash = reason[1] if reason[0] == "task_crashed" and len(reason) > 1 else None
        if isinstance(crash, BaseException):
            crash_kind = getattr(crash, "kind", None)
            return crash_kind if type(crash_kind) is str else type(crash).__name__
        return reason[0]
    return "_OTHER"


def redacted(reason: Any) -> Any:
    """A stop reason shown only by its head, for a log line: a string as itself, a tuple
    as `"head:redacted"`, anything else as `"redacted"` (docs/pages/contract.md#s3-14)."""
    if isinstance(reason, str):
        return reason
    if isinstance(reason, tuple) and reason and isinstance(reason[0], str):
        return f"{reason[0]}:redacted"
    return "redacted"

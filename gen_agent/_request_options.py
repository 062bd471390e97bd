"""Per-request options, and what a callback can learn about the request it is handling.

`RequestOptions` is the one record of options that belong to a single request rather than to
the agent. It travels with the request: through the mailbox, `pre_turn`, every caller-owned
retry (`Prompt` from `handle_error`), and the follow-ups it chains (`Prompt` from
`handle_response`, which inherit it); backends read it as `TurnContext.options`, callbacks as
`current_request().options`. A new per-request option is one new field here, with a default
that keeps today's behaviour.

Mirrors: nothing in the Elixir original (its requests carry only the prompt); this is the
Python port's single home for per-request settings.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gen_agent._context import capture_trace_context, current_request
from gen_agent._output import check_output_type
from gen_agent._request_ref import RequestRef

__all__ = ["BUSY_POLICIES", "RequestInfo", "RequestOptions", "current_request"]

BUSY_POLICIES = ("enqueue", "reject", "interrupt", "rollback", "steer")
"""The `busy` policies: what a request that arrives while a turn runs does (see
`RequestOptions.busy` and docs/pages/busy.md). `"enqueue"` is the contract's FIFO."""


def check_busy(value: Any, fn: str, *, allow_none: bool = True) -> Any:
    """`value` if it is one of `BUSY_POLICIES` (or None when `allow_none`); else ValueError."""
    if (value is None and allow_none) or (type(value) is str and value in BUSY_POLICIES):
        return value
    raise ValueError(f"{fn}: busy must be one of {', '.join(map(repr, BUSY_POLICIES))}"
                     f"{' or None' if allow_none else ''}, got {value!r}"[:200])


def _is_recipient(value: Any) -> bool:
    # the shapes `deliver_to` accepts (pykka ActorRefs have `tell`)
    return any(hasattr(value, a) for a in ("tell", "send_info", "put_nowait", "put")) \
        or callable(value)


class RequestOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Options of one request (frozen; every field has a default that changes nothing).

    Fields:
        fresh_session: run every attempt of this request on a fresh backend session: before
            dispatch the agent resets its session (the backend's `reset_session`) unless
            nothing ran on it since it started or was last reset. Follow-ups the request
            chains continue its conversation (they are not reset). Requests without the
            option share the agent's conversation, as usual. Default False.
        trace_context: the trace parent of the request's turns (an OpenTelemetry `Context`,
            used by `gen_agent.otel`). None (default): when `gen_agent.otel` is instrumented,
            `ask` / `tell` / `Pool.submit` fill in the calling thread's current context, so
            the caller's span is the parent although the turns run on other threads. Retries
            and the follow-ups the request chains carry it too. A context is not hashable:
            options holding one are not either.
        call_chain: the names of the agents whose tools led to this request, outermost
            first (set by `gen_agent.tools.agent_tool`; an agent tool refuses a call that
            would reach an agent already in the chain, so a cycle fails fast instead of
            deadlocking). Default `()`.
        output: the type of a structured reply (a msgspec `Struct`, dataclass, TypedDict,
            `list[...]`...; see `gen_agent.schema_of`), or None for the agent's default (the
            `output` start option; None there too: plain text). The backend sends its JSON
            schema; the reply is validated into `Response.parsed`, or the turn fails with
            `("invalid_output", InvalidOutput)`. Default None.
        resend_of: the `gen_agent.store.InterruptedTurn` this request re-sends (set by
            `gen_agent.resend`): in its turn, a Python tool call with the same tool and
            canonical input as one of that turn's finished calls gets the journalled result
            without running, and one matching an in-doubt call gets "outcome unknown"
            (unless the tool is `retry_safe`). Default None.
        busy: what this request does if it arrives while a turn runs: `"enqueue"` (the FIFO
            mailbox), `"reject"` (fail at once with reason `"busy"`), `"interrupt"`
            (interrupt the running turn, run next), `"rollback"` (as interrupt, and drop the
            interrupted exchange from the conversation), `"steer"` (run next, ahead of the
            mailbox). None (default): the agent's `busy` start option. See
            docs/pages/busy.md.
        lifecycle_to: a recipient (as `stream_to`) of this request's `Lifecycle` records
            (`("gen_agent", "lifecycle", name, ref, stage, info)`, stage "queued",
            "started", "completed", "cancelled", "discarded"), content-free; the follow-ups
            it chains get none. None (default): no records (a completion recipient still
            gets exactly its one completion).

    Raises:
        TypeError: a field has the wrong type (from the constructor).
    """

    fresh_session: bool = False
    trace_context: Any = None
    call_chain: tuple[Any, ...] = ()
    output: Any = None
    resend_of: Any = None
    busy: str | None = None
    lifecycle_to: Any = None

    def __post_init__(self) -> None:
        if type(self.fresh_session) is not bool:
            raise TypeError("RequestOptions: fresh_session must be a bool, "
                            f"got {type(self.fresh_session).__name__}")
        check_busy(self.busy, "RequestOptions")
        if self.lifecycle_to is not None and not _is_recipient(self.lifecycle_to):
            raise TypeError("RequestOptions: lifecycle_to must be a pykka ActorRef, an "
                            "AgentRef, an object with put() or a callable, got "
                            f"{type(self.lifecycle_to).__name__}")
        check_output_type(self.output, "RequestOptions")


DEFAULT_OPTIONS = RequestOptions()


def check_options(options: Any, fn: str, output: Any = None) -> RequestOptions:
    """`options` or the default (with `output` set when given); a TypeError naming `fn` for
    anything else."""
    if output is not None:
        base = DEFAULT_OPTIONS if options is None else check_options(options, fn)
        return msgspec.structs.replace(base, output=check_output_type(output, fn))
    if options is None:
        return DEFAULT_OPTIONS
    if type(options) is not RequestOptions:
        raise TypeError(f"{fn}: options must be a gen_agent.RequestOptions or None, "
                        f"got {type(options).__name__}")
    return options


def traced(options: RequestOptions) -> RequestOptions:
    """`options` with the calling thread's trace context filled in, when an instrumentation
    captures contexts (`gen_agent.otel`) and none was given; else `options` itself."""
    if options.trace_context is not None:
        return options
    context = capture_trace_context()
    return options if context is None else msgspec.structs.replace(options,
                                                                   trace_context=context)


class RequestInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The request a callback is handling, from `current_request()`.

    Fields:
        ref: its `RequestRef`.
        origin: `"ask"`, `"tell"`, `"event"` (a prompt from handle_event/handle_info) or
            `"self_chain"` (a follow-up from handle_response/handle_error).
        prompt: the prompt of this attempt as dispatched (after `pre_turn`'s rewrite; in
            `pre_turn`, the prompt it was given).
        attempt: the attempt number, 1-based (caller-owned retries increase it).
        options: its `RequestOptions`.
    """

    ref: RequestRef
    origin: Literal["ask", "tell", "event", "self_chain"]
    prompt: str
    attempt: int
    options: RequestOptions

"""The client API: module-level functions addressing agents by name, and `AgentRef`.

Every function resolves the name in the current `AgentSystem` (the innermost open one, else
the default). Synchronous functions raise `AgentNotFound` when the name is not registered
*before* anything is sent; if the agent dies while the call waits they raise `AgentDown`;
if the caller's own `timeout` (seconds; None = wait forever, the Elixir default `:infinity`)
expires they raise `CallTimeout` and the agent is unaffected (docs/pages/contract.md#s2-1; docs: the
client API reference). Asynchronous functions (`notify`, `interrupt`, `halt`, `resume`, `send`)
never raise for a missing agent.

Every function takes `agent_system=`: the `AgentSystem` to resolve the name in (None = the
current one); `_system=`, its old spelling, still works with a `DeprecationWarning`. Each call
is defined once (`gen_agent._runtime.calls`); these functions, `gen_agent.aio` and `AgentRef`
are adapters over it, with the same parameters and outcomes.
"""

from __future__ import annotations

from typing import Any

from gen_agent._agent_ref import AgentRef
from gen_agent._context import current_name
from gen_agent._deprecate import system_renamed
from gen_agent._request_options import RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._response import Response
from gen_agent._runtime import (
    HaltMsg,
    InfoMsg,
    InterruptMsg,
    NotifyMsg,
    ResumeMsg,
    calls,
    warn_near_misses,
)
from gen_agent._status import InterruptReceipt, PollResult, RuntimeSnapshot, Status
from gen_agent._system import AgentSystem, current_system
from gen_agent._timers import MAX_DURATION_MS, TIMERS, TimerHandle

__all__ = [
    "AgentRef", "ask", "backend_session", "cancel_request", "current_name", "demonitor",
    "drain", "halt", "interrupt", "interrupt_receipt", "interrupt_request", "list_agents",
    "monitor", "notify", "notify_ack", "poll",
    "resend", "reset_session", "resume", "runtime_snapshot", "send", "send_after", "start_agent",
    "status", "stop", "tell", "tell_with_completion", "whereis",
]


# ---------------------------------------------------------------------- public functions
def start_agent(module: type, *, name: Any, backend: Any, agent_system: AgentSystem | None = None,
                **opts: Any) -> AgentRef:
    """Start an agent and return its `AgentRef` once `init_agent` and the backend's
    `start_session` finished (not waiting for `pre_run`).

    Args:
        module: the `GenAgent` subclass (instantiated once, in the agent thread).
        name: the registry key, any hashable value (not forwarded to `init_agent`).
        backend: the backend (a class with classmethod hooks, or an instance).
        **opts: the reserved options below (None = default) and anything else, which is
            forwarded to `init_agent`.

    Options:
        watchdog_ms: per-attempt turn deadline in milliseconds, default 600_000; positive
            int, or "infinity" to disable.
        shutdown_ms: graceful-stop window in milliseconds, default 5_000; non-negative int or
            "infinity". Invalid → `ValueError` raised here.
        max_tell_results (100) / max_tell_result_bytes (8_388_608): poll cache bounds
            (count / bytes, >= 0).
        max_events_per_turn (1_000) / max_event_bytes_per_turn (1_048_576): retained
            events per turn (count / bytes, > 0).
        event_retention: "compact" (default) or "lossless".
        max_pending_prompts (1_000) / max_pending_prompt_bytes (1_048_576): mailbox
            bounds (count / bytes, >= 0; 0 disables the queue). The byte cap also bounds the
            self-chain slot.
        max_pending_notifications (1_000) / max_pending_notification_bytes (1_048_576):
            deferred-notification buffer bounds (count / bytes, >= 0).
        resume_session_id: a provider session id to resume instead of starting a new
            session: the backend's optional `resume_session(id, backend_opts)` is called in
            place of `start_session` (backends without it start afresh). Supervisors set it
            when restarting a child with `resume_session=True`.
        hibernate_after_ms: after this many milliseconds idle (no turn running, nothing in
            the mailbox) the agent's thread ends and the agent hibernates: its state,
            session and queues wait in memory and the next message wakes it on a new
            thread, in order, losing nothing (BEAM's `:hibernate`). Default None/"infinity":
            never, unless the `GEN_AGENT_HIBERNATE_AFTER_MS` environment variable sets
            another default. 0 hibernates as soon as the agent is idle (then, without a
            `pre_run`, the agent starts hibernated: `init_agent` runs in this thread).
            Int >= 0 (docs: Supervision and pools, "Hibernation").
        output: the agent-wide structured-output type of every turn (a msgspec-validatable
            type; a request's own `output=` wins; docs: The record of a turn).
        max_cost_usd (US dollars, > 0) / max_total_tokens (tokens, int > 0): spend caps;
            once the running totals reach one, further turns are refused at dispatch with
            `("budget_exceeded", BudgetExceeded)`. spend: a `gen_agent.Spend` to
            start the running totals from (docs: The record of a turn, "Accounting").
        store / session_key: a `gen_agent.store` store and the key of this agent's durable
            session (docs: Durable sessions).
        provider_limit: a `gen_agent.ProviderLimit` shared by agents that call the
            same provider (rate and concurrency limits).
        busy: what an ask/tell/stream arriving while a turn runs does: "enqueue" (default,
            the FIFO mailbox), "reject" (`TurnError("busy")` at once), "interrupt",
            "rollback" (needs a backend with `supports_rollback`; else this start fails),
            "steer"; a request's `RequestOptions(busy=...)` wins (docs: Busy policies).
        Bytes are `gen_agent.term_size` bytes.

    Returns:
        The `AgentRef` of the new incarnation.

    Raises:
        AlreadyStarted: a live agent holds `name`.
        AgentStartError: `("init_agent_failed", r)` (init_agent raised `InitAgentError(r)` or
            returned a malformed value), `("backend_start_failed", r)` (start_session raised
            `SessionStartError(r)`), `("init_failed", "error", "TypeName")` (any other
            exception during init, or an invalid reserved option). The exception behind it is
            `__cause__`; `str()` says what was wrong (docs: Errors).
        ValueError: invalid `shutdown_ms`.

    Warns:
        UserWarning: an option that is not reserved resembles a reserved one (`watchdog_msec`,
            `max_pending_prompt`); it still goes to `init_agent`, as the contract says.

    Mirrors: `GenAgent.start_agent/2` (docs/pages/contract.md#s2-2; docs: the client API reference).
    """
    warn_near_misses(opts, "start_agent")
    return (agent_system or current_system()).start_agent(module, name=name, backend=backend,
                                                          **opts)


def ask(name: Any, prompt: str, timeout: float | None = None, *,
        options: RequestOptions | None = None, cancel_on_timeout: bool = False,
        output: Any = None, agent_system: AgentSystem | None = None) -> Response:
    """Send `prompt` as a turn and wait for its `Response`.

    Dispatched now when the agent is idle, else queued FIFO. With caller-owned retries the
    caller waits across attempts and sees only the final outcome.

    Args:
        name: the agent's name. prompt: a `str`. timeout: seconds to wait (int or float),
            None = forever.
        options: the request's `RequestOptions` (None = the defaults).
        cancel_on_timeout: when `timeout` expires, also cancel the request: a queued ask is
            removed, a pending retry dropped, a running turn interrupted (its `handle_error`
            sees "interrupted"). Default False, the contract's behaviour: a timed-out ask
            stays queued or running (docs: errors page, "Timeouts").
        output: the type of a structured reply (`RequestOptions.output`, overriding the one
            in `options`; see `gen_agent.schema_of`), or None.

    Returns:
        The `Response` of the successful turn; with `output=T`, `response.parsed` is a
        validated `T`.

    Raises:
        TypeError: `prompt` is not a `str`, `timeout` not a number, `options` not a
            `RequestOptions`, `output` not a type msgspec can validate (nothing is sent).
        AgentNotFound, AgentDown, CallTimeout: see the module docstring.
        TurnError: the request failed; `.reason` per docs/pages/contract.md#s4-20, docs: Errors
        (e.g. "timeout",
            "interrupted", ("task_crashed", exc), ("overloaded", info), "draining",
            ("agent_terminated", "shutdown"), "pre_turn_skipped", a backend reason,
            ("invalid_output", InvalidOutput) (the reply did not validate as `output`),
            ("budget_exceeded", BudgetExceeded) (the agent's spend cap was reached).

    Mirrors: `GenAgent.ask/3` (docs/pages/contract.md#s2-4; docs: the client API reference).
    """
    handle = calls.lookup(agent_system, name)
    return calls.run(handle, calls.ask(handle, prompt, timeout, options, cancel_on_timeout,
                                       output), timeout)  # type: ignore[no-any-return]


def resend(name: Any, interrupted: Any, timeout: float | None = None, *,
           output: Any = None, agent_system: AgentSystem | None = None) -> Response:
    """Ask `interrupted`'s prompt again, guarded by its tool journal, and wait for the
    `Response`: in the new turn, a Python tool call of the same tool with the same canonical
    input (JSON, keys sorted) as one of the interrupted turn's finished calls returns the
    journalled result without running; one matching an in-doubt call returns the "outcome
    unknown" result (`gen_agent.store.OUTCOME_UNKNOWN`) unless the tool is `retry_safe`
    (then it runs, with the original call's `idempotency_key`). Each journalled call
    answers at most one call of the new turn.

    Args:
        name: the agent's name (it must hold the interrupted turn's session key).
        interrupted: the `gen_agent.store.InterruptedTurn` (from `handle_info` or
            `Status.store.interrupted_turn`).
        timeout: seconds to wait, None = forever.
        output: the structured-reply type to ask for again (the record keeps only its name,
            `interrupted.output`), or None.

    Returns:
        The `Response` of the re-sent turn.

    Raises:
        TypeError: `interrupted` is not an `InterruptedTurn`.
        ValueError: it has no prompt (recorded by a gen_agent before the journal), or
            its phase is not `"turn"` (its answer was stored already: nothing to re-send).
        AgentNotFound, AgentDown, CallTimeout, TurnError: as `ask`.
    """
    prompt, options = calls.resent(interrupted, output)
    return ask(name, prompt, timeout, options=options, agent_system=agent_system)


def tell(name: Any, prompt: str, timeout: float | None = None, *,
         options: RequestOptions | None = None,
         agent_system: AgentSystem | None = None) -> RequestRef:
    """Queue `prompt` as a turn and return its `RequestRef` at once; read the outcome with
    `poll`. For an idle agent this returns after `pre_turn` ran and the turn started.

    `options` is the request's `RequestOptions` (None = the defaults).

    Raises:
        TypeError: `prompt` is not a `str`, `timeout` not a number, bad `options`.
        TurnError: ("overloaded", OverloadInfo) (no ref issued) or "draining".
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the call waited.
        CallTimeout: no answer within `timeout` seconds.

    Mirrors: `GenAgent.tell/3` (docs/pages/contract.md#s2-5; docs: the client API reference).
    """
    handle = calls.lookup(agent_system, name)
    return calls.run(handle, calls.tell(handle, prompt, timeout, options=options),
                     timeout)  # type: ignore[no-any-return]


@system_renamed
def tell_with_completion(name: Any, prompt: str, recipient: Any, *, on_halt: str = "queue",
                         stream_to: Any = None, timeout: float | None = None,
                         options: RequestOptions | None = None, monitor: bool = False,
                         output: Any = None, agent_system: AgentSystem | None = None) -> RequestRef:
    """Like `tell`, and deliver exactly one completion message to `recipient`.

    The message is a `gen_agent.Completion`, the tuple
    `("gen_agent", "completion", name, ref, ("ok", response))` or `(..., ("error", reason))`.
    A recipient is a pykka `ActorRef` (told), an `AgentRef` (its `handle_info`), a queue
    (`put_nowait`, else `put`: a full queue drops the message, never blocking the agent) or a
    callable. It may arrive before this function returns.

    Without `monitor`, an agent that crashes, is killed or stops before the request
    completes sends nothing (the contract's behaviour: Elixir callers monitor the process).
    With `monitor=True` the recipient gets exactly one message either way: the completion,
    or a `gen_agent.Down` `("gen_agent", "down", name, ref, reason)` with reason
    `("agent_terminated", r)` (orderly stop) or `("agent_down", r)` (anything else).

    Args:
        on_halt: "queue" (default; wait for resume) or "fail" (fail with "halted" if the
            agent is halted now or halts before dispatch).
        stream_to: a recipient of `("gen_agent", "event", name, ref, event)` (a
            `gen_agent.StreamEvent`) for each event of this request's turns,
            relayed after `handle_stream_event`; None = off.
        options: the request's `RequestOptions` (None = the defaults).
        monitor: also deliver a `Down` record if the agent ends first (see above).
        output: the type of a structured reply (as for `ask`), or None.

    Raises:
        ValueError: `on_halt` is not "queue" or "fail" (nothing is sent).
        TypeError: `recipient` or `stream_to` is nothing gen_agent can deliver to, `prompt`
            not a `str`, `timeout` not a number, bad `options` (nothing is sent).
        TurnError: "halted" (on_halt="fail" and the agent is halted), ("overloaded", info),
            "draining". AgentNotFound, AgentDown, CallTimeout.

    Mirrors: `GenAgent.tell_with_completion/5` (docs/pages/contract.md#s2-6; docs: the client API
    reference).
    """
    handle = calls.lookup(agent_system, name)
    call = calls.tell(handle, prompt, timeout, recipient=recipient, completion=True,
                      on_halt=on_halt, stream_to=stream_to, options=options, monitor=monitor,
                      output=output)
    return calls.run(handle, call, timeout)  # type: ignore[no-any-return]


@system_renamed
def monitor(name: Any, recipient: Any, *, agent_system: AgentSystem | None = None) -> RequestRef:
    """Monitor the agent `name`: when its current incarnation ends, for any reason, deliver
    exactly one `gen_agent.Down` record `("gen_agent", "down", name, ref, reason)`
    to `recipient` (any recipient `tell_with_completion` accepts). `reason` is
    `("agent_terminated", r)` for an orderly stop (`"normal"`, `"shutdown"`) and
    `("agent_down", r)` otherwise (a crash, a kill). A restarted agent under the same name
    is a new incarnation: monitor it again.

    Returns:
        The monitor's ref (the record's `ref`); `demonitor(ref)` cancels it.

    Raises:
        AgentNotFound: no agent has that name. TypeError: not a recipient.

    Mirrors: `Process.monitor/1` on the agent's pid (docs: Elixir mapping page).
    """
    return calls.monitor(calls.lookup(agent_system, name), recipient)



def demonitor(ref: RequestRef) -> bool:
    """Cancel the monitor `ref` (from `gen_agent.monitor`): no `Down` record is delivered
    for it afterwards. Returns False if it already fired or was cancelled.

    Mirrors: `Process.demonitor/1`.
    """
    return calls.demonitor(ref)

@system_renamed
def poll(name: Any, ref: RequestRef, timeout: float | None = None, *,
         agent_system: AgentSystem | None = None) -> PollResult:
    """Return the state of a tell request: pending, completed (with the response) or failed
    (with the reason; "not_found" for unknown or pruned refs, ask refs, or a missing agent).

    Mirrors: `GenAgent.poll/3` (docs/pages/contract.md#s2-7; docs: the client API reference).
    """
    return calls.run_by_name(  # type: ignore[no-any-return]
        agent_system, name, calls.poll(ref), timeout)


def notify(name: Any, event: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Deliver `event` to the agent's `handle_event` (at once when idle, after the current
    turn when busy). Always returns None, also for a missing agent; a rejection (overload,
    draining) shows only in `input.rejected` telemetry. Mirrors `GenAgent.notify/2`."""
    calls.cast(agent_system, name, NotifyMsg(event))


@system_renamed
def notify_ack(name: Any, event: Any, timeout: float | None = None, *,
               agent_system: AgentSystem | None = None) -> None:
    """Like `notify`, but wait for admission: returns None when handled (idle) or buffered.

    Raises:
        TurnError: ("overloaded", info) (buffer full, or halted and the generated prompt
            could not be queued) or "draining". AgentNotFound, AgentDown, CallTimeout.

    Mirrors: `GenAgent.notify_ack/3` (docs/pages/contract.md#s2-9; docs: the client API reference).
    """
    calls.run_by_name(agent_system, name, calls.notify_ack(event), timeout)


def interrupt(name: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Interrupt the active turn, if any: it fails with "interrupted". No-op when idle or
    missing. Mirrors `GenAgent.interrupt/1` (docs/pages/contract.md#s2-10; docs: the client API
    reference)."""
    calls.cast(agent_system, name, InterruptMsg())


@system_renamed
def interrupt_request(name: Any, ref: RequestRef, timeout: float | None = None, *,
                      agent_system: AgentSystem | None = None) -> str:
    """Interrupt the turn of `ref` only if it is the active one.

    Returns:
        "accepted" (it is interrupted; the acknowledgement precedes its outcome),
        "not_current" (another turn is active), "idle", or "not_found" (no such agent).

    Mirrors: `GenAgent.interrupt_request/3` (docs/pages/contract.md#s2-11; docs: the client API
    reference).
    """
    return calls.run_by_name(  # type: ignore[no-any-return]
        agent_system, name, calls.interrupt_request(ref), timeout)


def interrupt_receipt(name: Any, timeout: float | None = None, *,
                      agent_system: AgentSystem | None = None) -> InterruptReceipt:
    """Interrupt the active turn, if any, and report what was interrupted and what is still
    queued (a synchronous `interrupt`; `interrupt(name)` stays a cast returning None).

    Returns:
        An `InterruptReceipt`: `interrupted` (the ref of the turn, which fails with
        "interrupted"; None when idle), its `origin`, and `queued` (the ask/tell refs
        waiting, in the order they run). Answered before the turn's own outcome.

    Raises:
        AgentNotFound: no such agent. CallTimeout: `timeout` seconds passed first.

    Mirrors: `GenAgent.interrupt/1` (docs/pages/contract.md#s2-10), answered like
    `interrupt_request/3` (§2.11); a Python addition (docs: Busy policies).
    """
    return calls.run_by_name(  # type: ignore[no-any-return]
        agent_system, name, calls.INTERRUPT_RECEIPT, timeout)


@system_renamed
def cancel_request(name: Any, ref: RequestRef, timeout: float | None = None, *,
                   agent_system: AgentSystem | None = None) -> str:
    """Remove a queued tell (or a pending retry of one) before dispatch.

    Returns:
        "cancelled" (now, or already), "current" (it is the active turn),
        "already_finished", or "not_found" (unknown, pruned, an ask, or no such agent).

    Mirrors: `GenAgent.cancel_request/3` (docs/pages/contract.md#s2-12; docs: the client API
    reference).
    """
    return calls.run_by_name(  # type: ignore[no-any-return]
        agent_system, name, calls.cancel_request(ref), timeout)


def halt(name: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Halt the agent: now when idle, after the current turn when busy. Idempotent.
    Mirrors `GenAgent.halt/1` (docs/pages/contract.md#s2-13; docs: the client API reference)."""
    calls.cast(agent_system, name, HaltMsg())


def resume(name: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Leave the halted mode and dispatch pending work; while busy, cancel a pending halt.
    Mirrors `GenAgent.resume/1` (docs/pages/contract.md#s2-14; docs: the client API reference)."""
    calls.cast(agent_system, name, ResumeMsg())


@system_renamed
def reset_session(name: Any, timeout: float | None = None, *,
                  agent_system: AgentSystem | None = None) -> None:
    """Replace the backend conversation in place (idle only; state and queue are kept).

    Raises:
        RequestError: "busy", "draining", "unsupported", the backend's `ResetError`
            reason, or ("backend_reset_failed", "TypeName"). AgentNotFound, AgentDown.

    Mirrors: `GenAgent.reset_session/2` (docs/pages/contract.md#s2-15; docs: the client API
    reference).
    """
    calls.run_by_name(agent_system, name, calls.RESET_SESSION, timeout)


@system_renamed
def status(name: Any, timeout: float | None = None, *,
           agent_system: AgentSystem | None = None) -> Status:
    """Return the agent's `Status`. Mirrors `GenAgent.status/2` (docs/pages/contract.md#s2-16; docs:
    the client API reference)."""
    return calls.run_by_name(agent_system, name, calls.STATUS,  # type: ignore[no-any-return]
                     timeout)


@system_renamed
def runtime_snapshot(name: Any, timeout: float | None = None, *,
                     agent_system: AgentSystem | None = None) -> RuntimeSnapshot:
    """Return the payload-free `RuntimeSnapshot`. Mirrors `GenAgent.runtime_snapshot/2`."""
    return calls.run_by_name(agent_system, name, calls.SNAPSHOT,  # type: ignore[no-any-return]
                     timeout)


def drain(name: Any, timeout: float | None = None, *,
          agent_system: AgentSystem | None = None) -> None:
    """Finish the active turn, reject everything queued with "draining", then stop.

    Returns once the agent exited normally. `timeout` (seconds) covers admission and the
    wait together; when it expires `CallTimeout` is raised and the drain goes on.

    Raises:
        RequestError: ("agent_down", reason) when it stopped for another reason.
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the admission call waited.
        CallTimeout: the deadline expired (the drain goes on).

    Mirrors: `GenAgent.drain/2` (docs/pages/contract.md#s2-18; docs: the client API reference).
    """
    calls.drain(calls.lookup(agent_system, name), timeout)


def stop(name: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Stop the agent gracefully (reason "shutdown") within its `shutdown_ms`, then kill it.

    Waiting asks get `TurnError(("agent_terminated", "shutdown"))`; the turn task is
    cancelled; `terminate_agent` and the backend's `terminate_session` run.

    Raises:
        AgentNotFound: no such agent.
        RequestError: "self_stop" when called from the agent's own thread or turn task.

    Mirrors: `GenAgent.stop/2` (docs/pages/contract.md#s2-19; docs: the client API reference).
    """
    (agent_system or current_system()).stop(name)


def whereis(name: Any, *, agent_system: AgentSystem | None = None) -> AgentRef | None:
    """Return the live agent's `AgentRef`, or None. Mirrors `GenAgent.whereis/1`."""
    return (agent_system or current_system()).whereis(name)  # type: ignore[no-any-return]


def list_agents(*, agent_system: AgentSystem | None = None) -> list[Any]:
    """Return the registered names (point in time, unordered). Mirrors `GenAgent.list/0`."""
    return (agent_system or current_system()).list_agents()


def send(name: Any, message: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Send `message` to the agent's `handle_info` (Elixir's `send/2` to the agent).

    Buffered while a turn runs if the agent defines `handle_info`; dropped (debug log) if it
    does not. Never raises for a missing agent.
    """
    calls.cast(agent_system, name, InfoMsg(message))


def send_after(name: Any, message: Any, delay_ms: int, *,
               agent_system: AgentSystem | None = None) -> TimerHandle:
    """Send `message` to `name`'s `handle_info` after `delay_ms` milliseconds.

    Returns a handle whose `cancel()` prevents delivery. Mirrors `Process.send_after/3`
    aimed at an agent.

    Raises:
        TypeError: `delay_ms` is not a number. ValueError: it is negative, NaN or beyond
            `MAX_DURATION_MS` (`threading.TIMEOUT_MAX` in ms, ~292 years).
    """
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int | float):
        raise TypeError(f"send_after: delay_ms must be milliseconds (an int or float), "
                        f"got {type(delay_ms).__name__}")
    if not 0 <= delay_ms <= MAX_DURATION_MS:
        raise ValueError(f"send_after: delay_ms must be from 0 to {MAX_DURATION_MS} "
                         f"milliseconds, got {delay_ms!r}")
    system = agent_system or current_system()
    return TIMERS.schedule(delay_ms / 1000,
                           lambda: calls.cast(system, name, InfoMsg(message)))


def backend_session(name: Any, timeout: float | None = None, *,
                    agent_system: AgentSystem | None = None) -> Any:
    """Return the agent's raw backend session (for tests and `MockBackend.history`).

    Mirrors the internal `:get_backend_session` call (docs/pages/contract.md#s2-23; docs: the client
    API reference).
    """
    return calls.run_by_name(agent_system, name, calls.BACKEND_SESSION, timeout)


_ = current_name  # re-exported from here for the public API

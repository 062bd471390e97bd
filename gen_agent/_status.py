"""Frozen records the client API returns: `Status`, `RuntimeSnapshot`, `CurrentTurn`,
`PollResult`, and the diagnostic payloads of compound reasons, `OverloadInfo` and
`CaptureOverflow` (docs/pages/contract.md#s2-7, #s2-16, #s2-17, #s4-6, #s4-17; Appendix A; docs: the
client API reference).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gen_agent._response import Response
from gen_agent.store import StoreStatus

__all__ = [
    "CaptureOverflow",
    "CurrentTurn",
    "InterruptReceipt",
    "OverloadInfo",
    "PollResult",
    "RuntimeSnapshot",
    "Status",
]


class OverloadInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Why a queue refused an item: the payload of the reason `("overloaded", info)`.

    Fields:
        queue: `"prompts"`, `"notifications"` or `"self_chain"`.
        limit: `"count"` (the queue was full) or `"bytes"` (the item did not fit).
        pending_count: items queued before this one (count).
        pending_bytes: `term_size` sum of the queued items (bytes).
        incoming_bytes: `term_size` of the refused item (bytes).
        max_count: the queue's count bound (count).
        max_bytes: the queue's byte bound (bytes).

    Mirrors the overload info map of docs/pages/contract.md#s4-17 (docs: Errors).
    """

    queue: Literal["prompts", "notifications", "self_chain"]
    limit: Literal["count", "bytes"]
    pending_count: int
    pending_bytes: int
    incoming_bytes: int
    max_count: int
    max_bytes: int


class CaptureOverflow(msgspec.Struct, frozen=True, kw_only=True):
    """Lossless retention hit a bound: the payload of `("event_capture_overflow", diag)`.

    Fields:
        limit: `"events"` or `"bytes"`, the bound that was hit.
        max_events: the `max_events_per_turn` bound (count).
        max_bytes: the `max_event_bytes_per_turn` bound (bytes).
        retained_events: events retained before the rejected one (count).
        retained_bytes: `term_size` sum of those events (bytes).
        rejected_event_kind: the kind of the event that did not fit.
        rejected_event_bytes: its `term_size` (bytes); its payload is never included.

    Mirrors the overflow diagnostic map of docs/pages/contract.md#s4-6 (docs: Errors).
    """

    limit: Literal["events", "bytes"]
    max_events: int
    max_bytes: int
    retained_events: int
    retained_bytes: int
    rejected_event_kind: str
    rejected_event_bytes: int


class PollResult(msgspec.Struct, frozen=True, kw_only=True):
    """What `poll(name, ref)` found.

    Fields:
        status: `"pending"` (active, queued or a pending retry), `"completed"` (`response` is
            set) or `"failed"` (`reason` is set; `"not_found"` for unknown or pruned refs).
        response: the `Response` of a completed request, else None.
        reason: the failure reason of a failed request, else None.

    Mirrors `{:ok, :pending}` / `{:ok, :completed, r}` / `{:error, reason}`
    (docs/pages/contract.md#s2-7; docs: the client API reference).
    """

    status: Literal["pending", "completed", "failed"]
    response: Response | None = None
    reason: Any = None


class Status(msgspec.Struct, frozen=True, kw_only=True):
    """A point-in-time view of an agent, served by the agent thread.

    Fields:
        state: `"idle"` or `"processing"`.
        name: the registered name.
        queued: prompts in the mailbox (count; excludes the self-chain slot and buffered
            notifications).
        current_request: the active `RequestRef`, else None.
        halted, halt_pending, draining: the flags of docs/pages/contract.md#s4-1 (docs: Concepts).
        agent_state: the agent's retained state (while busy: as of dispatch, after pre_turn).
        store: for an agent started with `store=`/`session_key=`, its durable session's
            `StoreStatus` (key, resumed, interrupted turn, last failed write); else None.
        provider_limit: the `gen_agent.LimitStatus` of its `provider_limit` start
            option (None without one); an idle agent with queued work whose limit has no
            permit free waits for it, first in its queue.

    Mirrors the map of `GenAgent.status/2` (docs/pages/contract.md#s2-16; docs: the client API
    reference); `store` (`gen_agent.store`) and `provider_limit` (`gen_agent._limits`) are
    additions.
    """

    state: Literal["idle", "processing"]
    name: Any
    queued: int
    current_request: Any
    halted: bool
    halt_pending: bool
    draining: bool
    agent_state: Any
    store: StoreStatus | None = None
    provider_limit: Any = None

    def __repr__(self) -> str:
        # Redacted like the original's format_status (§3.14): never print agent state.
        return (
            f"Status(state={self.state!r}, queued={self.queued}, halted={self.halted}, "
            f"halt_pending={self.halt_pending}, draining={self.draining}, agent_state=<redacted>)"
        )


class CurrentTurn(msgspec.Struct, frozen=True, kw_only=True):
    """The active turn in a `RuntimeSnapshot`; metadata only.

    Fields:
        ref: the request's `RequestRef`.
        origin: `"ask"`, `"tell"`, `"event"` or `"self_chain"`.
        attempt: 1-based attempt number (caller-owned retries count up).
        elapsed_ms: monotonic milliseconds since dispatch (>= 0).
        watchdog_ms: the per-attempt deadline in milliseconds, None when disabled.
    """

    ref: Any
    origin: Literal["ask", "tell", "event", "self_chain"]
    attempt: int
    elapsed_ms: int
    watchdog_ms: int | None


class RuntimeSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Metadata-only view of an agent's runtime: never prompts, state, session or payloads.

    Fields:
        phase: `"idle"` or `"processing"`.
        halted, halt_pending, draining: flags.
        pending_prompts: mailbox length (count).
        pending_notifications: buffered notifications plus deferred info messages (count).
        self_chain_pending: whether the self-chain slot holds a prompt or a retry.
        current_request: a `CurrentTurn`, or None when idle.

    Mirrors `GenAgent.runtime_snapshot/2` (docs/pages/contract.md#s2-17; docs: the client API
    reference).
    """

    phase: Literal["idle", "processing"]
    halted: bool
    halt_pending: bool
    draining: bool
    pending_prompts: int
    pending_notifications: int
    self_chain_pending: bool
    current_request: CurrentTurn | None


class InterruptReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """What `interrupt_receipt(name)` interrupted, and what is still queued; metadata only.

    Fields:
        interrupted: the `RequestRef` of the turn it interrupted (it fails with
            "interrupted"), or None when the agent was idle.
        origin: that turn's origin (`"ask"`, `"tell"`, `"event"`, `"self_chain"`), or None.
        queued: the refs of the requests waiting when it interrupted (ask and tell
            requests: a caller-owned retry in the self-chain slot first, then the mailbox),
            in the order they run. A follow-up the interrupted turn's `handle_error` chains
            runs before them (it has no ref until it runs).

    The receipt is answered before the interrupted turn's own outcome, as
    `interrupt_request`'s acknowledgement is.

    A Python addition beside `interrupt/1` (a cast) and `interrupt_request/3` (contract
    §2.10, §2.11).
    """

    interrupted: Any = None
    origin: str | None = None
    queued: tuple[Any, ...] = ()

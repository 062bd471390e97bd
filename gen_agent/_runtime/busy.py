"""The `busy` policies of the agent actor, as a mixin: what an ask or tell does when it arrives
while a turn runs (docs/pages/busy.md), plus the per-request `Lifecycle` records and
`interrupt_receipt`.

- `"enqueue"` (default): the contract's FIFO mailbox (§4.5), unchanged.
- `"reject"`: refused at once with reason `"busy"`; `input.rejected` and `turn.rejected`
  telemetry as an overload has (§4.5), no ref, no completion.
- `"interrupt"`: queued ahead of the mailbox (behind earlier requests put there), then the
  running turn is interrupted as `interrupt/1` does (§4.13): its caller gets "interrupted",
  `handle_error` and `post_turn` run once, and a follow-up that `handle_error` chains still
  runs first (§4.4: the self-chain slot precedes the mailbox).
- `"rollback"`: as `"interrupt"`, and the interrupted turn's exchange is dropped: the agent
  keeps the session it dispatched that turn with (§4.13 already does for an interrupt), on a
  backend whose session is the whole conversation (`supports_rollback = True`: the HTTP
  backends, the mock). Elsewhere (a CLI, whose transcript lives in its own files) the
  request is refused with `"rollback_unsupported"`. `turn.discarded` telemetry; with a store,
  the tool journal keeps the turn's calls and a side effect is reported (`durable.py`).
- `"steer"`: delivered into the running turn where the backend can (its optional `steer`
  hook, after the request's `pre_turn`, §3.5): the request then gets that turn's outcome
  (its `Response.joined` lists it), with one `TURN_JOINED`; the turn's callbacks run once.
  Otherwise (no hook, the hook refuses, or the turn ended without taking it) it is queued
  ahead of the mailbox without interrupting: it runs right after the running turn (and its
  follow-up), before older queued work, with the prompt its `pre_turn` gave.

Busy means a turn is running. An agent that cannot dispatch for another reason (halted, a
delayed retry, a provider limit) queues every request, whatever its policy, as the contract
does.
"""

from __future__ import annotations

from typing import Any

from gen_agent import telemetry
from gen_agent._delivered import Lifecycle
from gen_agent._event import monotonic_ms
from gen_agent._reasons import error_type
from gen_agent._runtime.crash import log_exception
from gen_agent._runtime.work import Request, Retry, deliver_to
from gen_agent._size import term_size
from gen_agent._status import InterruptReceipt

ROLLBACK_UNSUPPORTED = "rollback_unsupported"
STEERED_JOINED = "steered_joined"  # the terminal data key a steering backend reports


def can_roll_back(backend: Any) -> bool:
    """True if `backend` declares that the session it was given is the whole conversation
    before a turn (`supports_rollback = True`), so keeping it drops an interrupted exchange."""
    return getattr(backend, "supports_rollback", False) is True


def check_backend_policy(busy: str, backend: Any) -> None:
    """Refuse a start option `busy="rollback"` on a backend that cannot roll back.

    Raises:
        ValueError: naming the backend and the reason.
    """
    if busy == "rollback" and not can_roll_back(backend):
        name = getattr(backend, "__name__", type(backend).__name__)
        raise ValueError(f"busy='rollback' needs a backend whose session is the whole "
                         f"conversation (supports_rollback = True); {name} keeps its "
                         "transcript outside gen_agent (use 'interrupt')")


class BusyMixin:
    """Busy policies, lifecycle records and `interrupt_receipt` for `AgentActor`."""

    # Provided by AgentActor.
    name: Any
    opts: Any
    backend: Any
    durable: Any
    _discarded: Any
    turn: Any
    self_chain: Any
    mailbox: Any
    _emit: Any
    _now: Any
    _turn_meta: Any
    _rejected: Any
    _input_rejected: Any
    _interrupt: Any
    _admit_prompt: Any
    _drop_dead_callers: Any
    _on_info: Any
    _pre_turn: Any
    _deliver: Any
    session: Any
    state: Any
    log: Any

    def _policy(self, request: Request) -> str:
        busy = request.options.busy
        return self.opts.busy if busy is None else busy  # type: ignore[no-any-return]

    def _policy_refusal(self, request: Request) -> Any:
        """The reason `request`'s own policy cannot be used on this backend, or None."""
        if request.options.busy == "rollback" and not can_roll_back(self.backend):
            return ROLLBACK_UNSUPPORTED
        return None

    def _admit_busy(self, request: Request) -> Any:
        """Admit an ask/tell that cannot be dispatched now; None, or the reason it fails
        with at once (its reply gets it: no ref, no completion)."""
        policy = self._policy(request) if self.turn is not None else "enqueue"
        if policy == "enqueue":
            return self._admit_prompt(request)
        if policy == "reject":
            self._input_rejected("busy")
            self._rejected(Request(request.origin, ""), 1, "busy")
            return "busy"
        if policy == "steer" and self._steer(request):
            return None
        reason = self._admit_ahead(request)
        if reason is not None or policy == "steer":
            return reason
        if policy == "rollback":
            self._discard(self.turn, request)
        self._interrupt()
        return None

    def _steer(self, request: Request) -> bool:
        """Offer `request` to the backend's `steer` hook, after its `pre_turn` (§3.5). True
        when settled here: taken into the running turn, or refused by `pre_turn` (its
        outcome delivered). False: it runs next, with the prompt `pre_turn` gave."""
        hook = getattr(self.backend, "steer", None)
        turn = self.turn
        if hook is None or turn is None:
            return False
        accepted = self._pre_turn(request, request.prompt, 1)
        if isinstance(accepted, str):
            return True
        prompt, self.state = accepted
        request.prompt, request.prepared = prompt, True
        try:
            taken = hook(self.session, prompt) is True
        except Exception as exc:  # noqa: BLE001 - a refusal; the request runs next
            log_exception(self.log, "WARNING", "gen_agent backend steer raised", exc)
            taken = False
        if taken:
            turn.steered.append(request)
        return taken

    def _settle_steered(self, turn: Any, joined: Any) -> list[Request]:
        """At the end of `turn`: its steered requests the backend reports taken (`joined`,
        a count; None: all) get `TURN_JOINED` and are returned (they share the turn's
        outcome); the rest are queued ahead, to run next as normal turns. Idempotent."""
        steered, turn.steered = turn.steered, []
        if not steered:
            return []
        count = len(steered) if joined is None else joined
        if type(count) is not int or count < 0:
            count = 0
        taken, rest = steered[:count], steered[count:]
        for request in taken:
            self._emit(telemetry.TURN_JOINED, self._now(),
                       {"ref": request.ref, "origin": request.origin,
                        "into": turn.request.ref})
            self._lifecycle(request, "started", attempt=1, into=turn.request.ref)
        for request in rest:
            reason = self._admit_ahead(request)
            if reason is not None:
                self._deliver(request, ("error", reason))
        return taken

    def _admit_ahead(self, request: Request) -> Any:
        """Queue `request` ahead of the mailbox (behind earlier ones put there); None or the
        overload reason (the mailbox's bounds apply as to any queued request)."""
        size = term_size(request.prompt)
        request.ahead = True
        info = self.mailbox.offer_ahead(request, size, _is_ahead)
        if info is not None and self._drop_dead_callers():
            info = self.mailbox.offer_ahead(request, size, _is_ahead)
        if info is not None:
            request.ahead = False
            reason = ("overloaded", info)
            self._input_rejected(reason)
            self._rejected(Request(request.origin, ""), 1, "overloaded")
            return reason
        request.queued_at = monotonic_ms()
        self._emit(telemetry.MAILBOX_QUEUED, {"depth": len(self.mailbox)}, {})
        self._queued(request)
        return None

    def _queued(self, request: Request) -> None:
        """`REQUEST_QUEUED` and the "queued" lifecycle record of a request that joined the
        mailbox (after its `MAILBOX_QUEUED`)."""
        depth = len(self.mailbox)
        if telemetry.REQUEST_QUEUED in telemetry._table:
            self._emit(telemetry.REQUEST_QUEUED, {"depth": depth},
                       {"ref": request.ref, "origin": request.origin, "ahead": request.ahead})
        self._lifecycle(request, "queued", depth=depth, ahead=request.ahead)

    def _discard(self, turn: Any, by: Request) -> None:
        """Mark `turn` rolled back by `by`: `turn.discarded` now, its lifecycle ends
        "discarded", and the store keeps its journal (`durable.rolled_back`)."""
        request = turn.request
        if request.options.lifecycle_to is not None:  # its record ends "discarded"
            self._discarded = (request.ref, by.ref)
        self._emit(telemetry.TURN_DISCARDED, self._now(),
                   self._turn_meta(request, turn.attempt, by=by.ref))
        report = self.durable.rolled_back(turn.task_id)
        if report is not None:
            # buffered now, so handle_info sees it after the turn's callbacks and before
            # the next turn, as a resumed agent sees the turn its last owner did not finish
            self._on_info(report)

    # ------------------------------------------------------------------ lifecycle records
    def _lifecycle(self, request: Request, stage: str, **info: Any) -> None:
        """Send `request`'s `Lifecycle` record of `stage` when it opted in (ask/tell only:
        the follow-ups it chains inherit its options but are other requests)."""
        to = request.options.lifecycle_to
        if to is not None and not request.generated:
            deliver_to(to, Lifecycle.of(self.name, request.ref, stage, **info))

    def _lifecycle_end(self, request: Request, outcome: tuple[str, Any]) -> None:
        """The terminal `Lifecycle` record of a delivered outcome."""
        discarded = self._discarded
        if discarded is not None and discarded[0] == request.ref:
            self._discarded = None
            self._lifecycle(request, "discarded", by=discarded[1])
        elif outcome == ("error", "cancelled"):
            self._lifecycle(request, "cancelled", reason_kind="caller_cancelled")
        elif outcome[0] == "ok":
            self._lifecycle(request, "completed", ok=True, reason_kind=None)
        else:
            self._lifecycle(request, "completed", ok=False, reason_kind=_kind(outcome[1]))

    # ------------------------------------------------------------------ interrupt_receipt
    def _interrupt_receipt(self, reply: Any) -> None:
        queued = tuple(r.ref for r in self.mailbox if not r.generated)
        slot = self.self_chain
        if isinstance(slot, Retry):
            queued = (slot.request.ref, *queued)
        turn = self.turn
        if turn is None:
            reply.resolve(InterruptReceipt(queued=queued))
            return
        reply.resolve(InterruptReceipt(interrupted=turn.request.ref,
                                       origin=turn.request.origin, queued=queued))
        self._interrupt()


def _is_ahead(request: Request) -> bool:
    return request.ahead


# The runtime's own delivered reasons (and heads of compound ones): content-free words.
_KINDS = frozenset({
    "interrupted", "timeout", "cancelled", "halted", "draining", "busy", "pre_turn_skipped",
    "pre_turn_halted", "pre_turn_invalid", "no_terminal_event", "overloaded", "task_crashed",
    "budget_exceeded", "fresh_session_failed", "store_failed", "invalid_output",
    "event_capture_overflow", "agent_terminated", ROLLBACK_UNSUPPORTED,
})


def _kind(reason: Any) -> str:
    """A content-free kind of a delivered error reason: the runtime's own words as
    themselves (a compound reason by its head), else `error_type` (a `BackendError`'s kind,
    or "_OTHER")."""
    head = reason[0] if isinstance(reason, tuple) and reason else reason
    if type(head) is str and head in _KINDS:
        return head
    return error_type(reason)


__all__ = ["ROLLBACK_UNSUPPORTED", "STEERED_JOINED", "BusyMixin", "can_roll_back",
           "check_backend_policy"]

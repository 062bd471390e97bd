"""The records gen_agent delivers to recipients: one typed record per message kind.

Each is a `typing.NamedTuple`, so it *is* the tuple the API pins (`msg == ("gen_agent",
"completion", name, ref, outcome)`, `msg[4]`, `case ("gen_agent", "completion", _, ref,
outcome):`) and also has named fields (`msg.outcome`, `msg.ref`). Every record starts with
`tag == "gen_agent"` and a `kind` string; match on `kind` (or `isinstance`) to tell them apart.

- `Completion`: `("gen_agent", "completion", name, ref, outcome)`, once per
  `tell_with_completion`;
- `StreamEvent`: `("gen_agent", "event", name, ref, event)`, per event to `stream_to`;
- `Down`: `("gen_agent", "down", name, ref, reason)`, once, from `gen_agent.monitor` or
  `tell_with_completion(..., monitor=True)`.
- `Lifecycle`: `("gen_agent", "lifecycle", name, ref, stage, info)`, per stage of a request
  that opted in with `RequestOptions(lifecycle_to=...)`.

Later records are added here, one class each, with the same two leading fields.

Mirrors: the messages of `GenAgent.tell_with_completion/5` (docs/pages/contract.md#s2-6; docs: the
client API reference) and the `{:DOWN, ref, :process, pid, reason}` message of `Process.monitor/1`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gen_agent._request_ref import RequestRef

__all__ = ["LIFECYCLE_STAGES", "Completion", "Down", "Lifecycle", "StreamEvent", "down_reason"]

_GRACEFUL = ("normal", "shutdown")


class Completion(NamedTuple):
    """The one outcome of a `tell_with_completion` request.

    Fields: `tag` ("gen_agent"), `kind` ("completion"), `name` (the agent's name), `ref` (the
    request's `RequestRef`), `outcome` (`("ok", Response)` or `("error", reason)`).
    """

    tag: str
    kind: str
    name: Any
    ref: RequestRef
    outcome: tuple[str, Any]

    @classmethod
    def of(cls, name: Any, ref: RequestRef, outcome: tuple[str, Any]) -> Completion:
        """Build the record for agent `name`, request `ref` and its `outcome`."""
        return cls("gen_agent", "completion", name, ref, outcome)

    @property
    def ok(self) -> bool:
        """True when the request succeeded (`outcome[0] == "ok"`)."""
        return self.outcome[0] == "ok"


class StreamEvent(NamedTuple):
    """One relayed event of a request's turn (`stream_to`), after `handle_stream_event`.

    Fields: `tag`, `kind` ("event"), `name`, `ref`, `event` (the `Event`).
    """

    tag: str
    kind: str
    name: Any
    ref: RequestRef
    event: Any

    @classmethod
    def of(cls, name: Any, ref: RequestRef, event: Any) -> StreamEvent:
        """Build the record for agent `name`, request `ref` and `event`."""
        return cls("gen_agent", "event", name, ref, event)


class Down(NamedTuple):
    """The incarnation a recipient monitored has ended (exactly one per monitor).

    Fields: `tag`, `kind` ("down"), `name`, `ref` (the monitor's ref from `gen_agent.monitor`,
    or the request's ref for `tell_with_completion(..., monitor=True)`), `reason`:
    `("agent_terminated", exit_reason)` for an orderly stop (`"normal"`, `"shutdown"`), as
    waiting asks get (docs/pages/contract.md#s4-19; docs: Errors), else `("agent_down",
    exit_reason)` (a crash, a kill).
    """

    tag: str
    kind: str
    name: Any
    ref: RequestRef
    reason: tuple[str, Any]

    @classmethod
    def of(cls, name: Any, ref: RequestRef, exit_reason: Any) -> Down:
        """Build the record for agent `name`, monitor/request `ref` and the exit reason."""
        return cls("gen_agent", "down", name, ref, down_reason(exit_reason))


def down_reason(exit_reason: Any) -> tuple[str, Any]:
    """`("agent_terminated", r)` for an orderly stop reason, else `("agent_down", r)`."""
    if exit_reason in _GRACEFUL:
        return ("agent_terminated", exit_reason)
    return ("agent_down", exit_reason)


LIFECYCLE_STAGES = ("queued", "started", "completed", "cancelled", "discarded")
"""The stages of a `Lifecycle` record, in the order a request can go through them."""


class Lifecycle(NamedTuple):
    """One stage of a request's life, for a recipient that opted in (`lifecycle_to`).

    Content-free: never a prompt, response or reason, only what telemetry's turn family
    carries. A request gets, in order: "queued" (it joined the mailbox; not when dispatched
    at once), then per attempt "started", then exactly one of "completed" (its outcome was
    delivered, ok or error), "cancelled" (`cancel_request`, a queued ask's caller gone) or
    "discarded" (its turn was rolled back by a later `busy="rollback"` request; its outcome,
    "interrupted", is also delivered). A request refused at admission (overload, `"busy"`)
    gets none, as it gets no completion.

    Fields: `tag`, `kind` ("lifecycle"), `name`, `ref`, `stage` (one of `LIFECYCLE_STAGES`),
    `info` (a dict: "queued": `depth` (mailbox length after it joined), `ahead` (bool: it
    was put ahead of the queued work by `busy="interrupt"`/`"steer"`); "started":
    `attempt`; "completed": `ok` (bool), `reason_kind` (None when ok); "cancelled":
    `reason_kind`; "discarded": `by` (the `RequestRef` of the rollback request)).
    """

    tag: str
    kind: str
    name: Any
    ref: RequestRef
    stage: str
    info: dict[str, Any]

    @classmethod
    def of(cls, name: Any, ref: RequestRef, stage: str, **info: Any) -> Lifecycle:
        """Build the record for agent `name`, request `ref`, `stage` and its `info`."""
        return cls("gen_agent", "lifecycle", name, ref, stage, info)

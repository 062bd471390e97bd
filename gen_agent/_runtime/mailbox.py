"""Internal mailbox messages of the agent actor: a tagged union of frozen Structs.

Client → agent messages that need an answer carry a `DeferredReply`; the actor answers it now or
later (deferred). Turn-task messages carry the task id, so late messages from a retired task
are recognised and dropped.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Msg(msgspec.Struct, frozen=True):
    """Base of every mailbox message."""


# --- client requests -----------------------------------------------------------------------
class AskMsg(Msg, frozen=True):
    prompt: str
    reply: Any
    ref: Any
    caller: Any  # the calling thread, to drop a queued ask whose caller is gone (§4.14)
    options: Any = None  # the request's RequestOptions (None = the defaults)


class TellMsg(Msg, frozen=True):
    prompt: str
    reply: Any
    recipient: Any = None
    completion: bool = False
    on_halt: str = "queue"
    stream_to: Any = None
    options: Any = None  # the request's RequestOptions (None = the defaults)
    ref: Any = None  # made by the caller when it monitors the request
    watch: Any = None  # a monitor=True request's `Watch` (exactly one completion or down)


class PollMsg(Msg, frozen=True):
    ref: Any
    reply: Any


class NotifyMsg(Msg, frozen=True):
    event: Any
    reply: Any = None  # set for notify_ack


class InfoMsg(Msg, frozen=True):
    message: Any


class InterruptMsg(Msg, frozen=True):
    pass


class InterruptRequestMsg(Msg, frozen=True):
    ref: Any
    reply: Any


class InterruptReceiptMsg(Msg, frozen=True):
    reply: Any


class CancelRequestMsg(Msg, frozen=True):
    ref: Any
    reply: Any


class AbandonAskMsg(Msg, frozen=True):
    ref: Any
    timed_out: bool = False  # the caller's timeout expired (ask(cancel_on_timeout=True))


class HaltMsg(Msg, frozen=True):
    pass


class ResumeMsg(Msg, frozen=True):
    pass


class ResetSessionMsg(Msg, frozen=True):
    reply: Any


class StatusMsg(Msg, frozen=True):
    reply: Any


class SnapshotMsg(Msg, frozen=True):
    reply: Any


class GetSessionMsg(Msg, frozen=True):
    reply: Any


class DrainMsg(Msg, frozen=True):
    reply: Any


class StopMsg(Msg, frozen=True):
    reason: Any
    reply: Any


class CallMsg(Msg, frozen=True):
    """An arbitrary synchronous request (unknown requests answer "unknown_request")."""

    request: Any
    reply: Any


# --- turn task → agent -----------------------------------------------------------------------
class TurnWakeMsg(Msg, frozen=True):
    """The turn task put items in its channel (see `turn.TurnChannel`)."""

    task_id: int


class TurnDoneMsg(Msg, frozen=True):
    """The turn task's outcome.

    kind: "result" (terminal result), "stream_error" (terminal error event, no terminal, or
    lossless overflow), "dispatch_error" (synchronous backend error), "crashed".
    """

    task_id: int
    kind: str
    reason: Any
    session: Any
    stream_state: Any
    duration_ms: int


class CheckpointMsg(Msg, frozen=True):
    task_id: int
    ref: Any
    session_id: Any
    thread_id: int
    reply: Any


class PermissionMsg(Msg, frozen=True):
    task_id: int
    request: Any  # a ToolPermissionRequest
    reply: Any


# --- timers ----------------------------------------------------------------------------------
class WatchdogMsg(Msg, frozen=True):
    armed: int  # which arming of the agent's watchdog timer fired (stale ones are ignored)


class RetryGeneratedMsg(Msg, frozen=True):
    pass


class LimitWakeMsg(Msg, frozen=True):
    """A provider limit may have a permit free again (see `gen_agent._limits`)."""


class RetryDueMsg(Msg, frozen=True):
    """A delayed caller-owned retry's timer fired (`retry` is the slot's `Retry`)."""

    retry: Any

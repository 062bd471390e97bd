"""The agent's bookkeeping records: requests, the self-chain retry slot, the active turn,
and small pure helpers of the state machine (docs/pages/contract.md#s4-1)."""

from __future__ import annotations

import enum
import time
from typing import Any, Literal

import pykka
from loguru import logger

from gen_agent._agent import Halt, NoReply, Prompt
from gen_agent._cancel import CancelSignal
from gen_agent._request_options import DEFAULT_OPTIONS, RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._runtime.capture import Capture
from gen_agent._runtime.turn import TurnChannel
from gen_agent._timers import MAX_DURATION_MS

_DECISIONS = (NoReply, Prompt, Halt)

Origin = Literal["ask", "tell", "event", "self_chain"]


def type_name(exc: BaseException) -> str:
    return type(exc).__name__


def valid_decision(value: Any) -> bool:
    """A well-formed decision without a retry delay (see `valid_retry_delay`)."""
    return type(value) in _DECISIONS and (type(value) is not Prompt or (
        type(value.text) is str and value.delay_ms is None))


def valid_retry_delay(value: Any) -> bool:
    """A `Prompt` whose `delay_ms` is a retry delay (an int from 0 to `MAX_DURATION_MS`)."""
    if type(value) is not Prompt:
        return False
    delay = value.delay_ms
    return type(value.text) is str and type(delay) is int and 0 <= delay <= MAX_DURATION_MS


class Phase(enum.Enum):
    """The agent's exclusive state. `halted`, `halt_pending` and `draining` are independent
    flags beside it (the contract keeps them apart: a halted agent can be idle or processing).
    STATE_CHANGED telemetry reports the value, and None for STARTING (the original's initial
    state has no name)."""

    STARTING = "starting"  # init_agent and the backend session are being set up
    IDLE = "idle"  # no turn runs
    PROCESSING = "processing"  # a turn runs
    STOPPING = "stopping"  # terminating or failed to start: nothing more is handled

    @property
    def reported(self) -> str | None:
        return None if self is Phase.STARTING else self.value


class StopAgent(Exception):
    """Unwinds the actor's handling of a message to stop the agent with `reason`."""

    def __init__(self, reason: Any, cause: BaseException | None = None) -> None:
        super().__init__()
        self.reason = reason
        self.cause = cause


class Request:
    """One logical request: an ask, a tell, or a generated prompt (event / self_chain)."""

    __slots__ = (
        "ahead", "caller", "completion", "on_halt", "options", "origin", "prepared", "prompt",
        "queued_at", "recipient", "ref", "reply", "stream_to", "watch",
    )

    def __init__(
        self, origin: Origin, prompt: str, *, ref: RequestRef | None = None, reply: Any = None,
        recipient: Any = None, completion: bool = False, on_halt: str = "queue",
        stream_to: Any = None, caller: Any = None, options: RequestOptions | None = None,
        watch: Any = None,
    ) -> None:
        self.ref = ref if ref is not None else RequestRef.new()
        self.origin = origin
        self.prompt = prompt
        self.reply = reply
        self.recipient = recipient
        self.completion = completion
        self.on_halt = on_halt
        self.stream_to = stream_to
        self.caller = caller
        self.options = DEFAULT_OPTIONS if options is None else options
        self.watch = watch
        # When the request (or its retry) started waiting for dispatch (monotonic ms; None
        # when it was dispatched at once).
        self.queued_at: int | None = None
        self.ahead = False  # queued ahead of the mailbox by a busy policy (busy.py)
        # pre_turn already ran for `prompt` (a steer the backend refused or did not take):
        # its dispatch sends `prompt` as it is (busy.py)
        self.prepared = False

    @property
    def generated(self) -> bool:
        return self.origin in ("event", "self_chain")


class Retry:
    """The self-chain slot holding a caller-owned retry (§4.8). A delayed retry is not
    `due` until its timer fires (`timer` is its handle)."""

    __slots__ = ("attempt", "due", "prompt", "request", "timer")

    def __init__(self, request: Request, prompt: str, attempt: int, timer: Any = None) -> None:
        self.request = request
        self.prompt = prompt
        self.attempt = attempt
        self.timer = timer
        self.due = timer is None

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


class Turn:
    """The active turn (`current_request` of §4.1)."""

    __slots__ = (
        "attempt", "cancel_event", "capture", "channel", "checkpoint_error", "checkpoint_id",
        "deadline", "prompt", "request", "started_at", "steered", "task_id", "thread_id",
    )

    def __init__(self, request: Request, attempt: int, task_id: int, prompt: str,
                 capture: Capture, channel: TurnChannel,
                 cancel_event: CancelSignal) -> None:
        self.channel = channel
        self.request = request
        self.attempt = attempt
        self.task_id = task_id
        self.prompt = prompt
        self.capture = capture
        self.started_at = time.monotonic_ns() // 1_000_000  # ms, as `_event.monotonic_ms`
        self.cancel_event = cancel_event
        self.checkpoint_id: str | None = None
        self.checkpoint_error: Any = None
        self.thread_id: int | None = None
        self.deadline: float | None = None  # the watchdog's (time.monotonic seconds)
        self.steered: list[Request] = []  # busy="steer" requests the backend took (busy.py)


def deliver_to(recipient: Any, message: Any) -> None:
    """Send `message` to a recipient: a pykka ActorRef, an AgentRef, a queue, or a callable.

    A dead or failing recipient is ignored (logged by type), as a dead pid is (§2.6). A queue
    is fed with `put_nowait` when it has one: the agent thread never waits for a full queue
    (relays have no backpressure, §4.18); a message that does not fit is dropped and logged.
    """
    try:
        if isinstance(recipient, pykka.ActorRef):
            recipient.tell(message)
        elif hasattr(recipient, "send_info"):
            recipient.send_info(message)
        elif hasattr(recipient, "put_nowait"):
            recipient.put_nowait(message)
        elif hasattr(recipient, "put"):
            recipient.put(message)
        else:
            recipient(message)
    except Exception as exc:  # noqa: BLE001 - a dead recipient must not hurt the agent
        logger.warning("gen_agent recipient dropped a message ({})", type_name(exc))



def caller_alive(caller: Any) -> bool:
    return caller is None or caller.is_alive()


def valid_session_id(value: Any) -> bool:
    if type(value) is not str:
        return False
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 1 <= size <= 1024 and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)

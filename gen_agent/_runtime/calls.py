"""Every client call, defined once: its argument checks, its mailbox message and how its answer
is read.

A call is a function of one incarnation's `AgentHandle` that checks its arguments (raising
before anything is sent) and returns a `Call`: the message to send and what to make of the
actor's answer. Two runners send it, `run` (blocking the calling thread) and `run_async`
(awaiting on the caller's loop); `gen_agent._client`, `gen_agent.aio`, `AgentRef`, the streams
and the Ray node are adapters that resolve a name to a handle and pick a runner, so every twin
has the same checks, the same message and the same outcomes (`tests/test_twins.py`).

Casts (`notify`, `interrupt`, `halt`, `resume`, `send`) need no answer: `cast` sends the message
to a live agent and does nothing for a missing one (contract: casts never fail).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pykka

from gen_agent import _context
from gen_agent._context import active_system
from gen_agent._errors import AgentNotFound, CallTimeout, RequestError, TurnError
from gen_agent._request_options import DEFAULT_OPTIONS, RequestOptions, check_options, traced
from gen_agent._request_ref import RequestRef
from gen_agent._runtime.handle import AgentHandle
from gen_agent._runtime.mailbox import (
    AbandonAskMsg,
    AskMsg,
    CancelRequestMsg,
    DrainMsg,
    GetSessionMsg,
    InterruptReceiptMsg,
    InterruptRequestMsg,
    NotifyMsg,
    PollMsg,
    ResetSessionMsg,
    SnapshotMsg,
    StatusMsg,
    TellMsg,
)
from gen_agent._runtime.replay import AttachMsg
from gen_agent._runtime.reply import await_reply, call_in_loop, set_once
from gen_agent._runtime.watch import Watch
from gen_agent._status import PollResult

_RAISE: Any = object()  # a call whose missing agent is `AgentNotFound`


class Call:
    """One prepared call: `make(reply)` builds the message, `finish(answer)` turns the actor's
    answer into the caller's result (or raises), `failed(exc, gave_up)` runs when the wait
    raised instead (`gave_up`: the caller's timeout or cancellation, not the agent's), and
    `missing` is the result by name when no agent has the name (default: `AgentNotFound`)."""

    __slots__ = ("failed", "finish", "make", "missing")

    def __init__(self, make: Callable[[Any], Any], finish: Callable[[Any], Any] = lambda a: a,
                 failed: Callable[[BaseException, bool], None] | None = None,
                 missing: Any = _RAISE) -> None:
        self.make = make
        self.finish = finish
        self.failed = failed
        self.missing = missing


def run(handle: AgentHandle, call: Call, timeout: float | None) -> Any:
    """Send `call` and block for its result (`timeout` seconds, None = forever)."""
    try:
        answer = handle.call(call.make, timeout)
    except BaseException as exc:
        if call.failed is not None:
            call.failed(exc, isinstance(exc, CallTimeout))
        raise
    return call.finish(answer)


async def run_async(handle: AgentHandle, call: Call, timeout: float | None) -> Any:
    """Send `call` and await its result on the running loop, without a thread."""
    try:
        answer = await await_reply(handle.request(call.make), timeout)
    except BaseException as exc:
        if call.failed is not None:
            call.failed(exc, isinstance(exc, CallTimeout | asyncio.CancelledError))
        raise
    return call.finish(answer)


def run_by_name(agent_system: Any, name: Any, call: Call, timeout: float | None) -> Any:
    """`run` addressed by name: a missing agent gives `call.missing`, or `AgentNotFound`."""
    try:
        handle = lookup(agent_system, name)
    except AgentNotFound:
        if call.missing is _RAISE:
            raise
        return call.missing
    return run(handle, call, timeout)


async def run_by_name_async(agent_system: Any, name: Any, call: Call,
                            timeout: float | None) -> Any:
    """`run_async` addressed by name (see `run_by_name`)."""
    try:
        handle = lookup(agent_system, name)
    except AgentNotFound:
        if call.missing is _RAISE:
            raise
        return call.missing
    return await run_async(handle, call, timeout)


# ---------------------------------------------------------------------- name resolution
def lookup(agent_system: Any, name: Any) -> AgentHandle:
    """The live handle of `name` in `agent_system` (None: the current registry).

    Raises:
        AgentNotFound: nothing alive is registered under `name`.
    """
    system = agent_system if agent_system is not None else active_system()
    if system is None:
        raise AgentNotFound(name)  # no registry exists yet, so no agent either
    return system.lookup(name)  # type: ignore[no-any-return]


def cast(agent_system: Any, name: Any, message: Any) -> None:
    """Send `message` to `name` if it is alive; nothing otherwise (a cast never fails)."""
    system = agent_system if agent_system is not None else active_system()
    handle = None if system is None else system.handle_of(name)
    if handle is not None:
        handle.send(message)


# ---------------------------------------------------------------------- argument checks
def check_prompt(prompt: Any, fn: str) -> None:
    if type(prompt) is not str:
        raise TypeError(f"{fn}: prompt must be a str, got {type(prompt).__name__}")


def check_timeout(timeout: Any, fn: str) -> None:
    if timeout is not None and type(timeout) not in (int, float):
        raise TypeError(f"{fn}: timeout must be seconds (an int or float) or None, "
                        f"got {type(timeout).__name__} {timeout!r}"[:200])


def check_recipient(recipient: Any, fn: str, arg: str = "recipient") -> None:
    """A recipient the library can deliver to (see `deliver_to`)."""
    if (isinstance(recipient, pykka.ActorRef) or hasattr(recipient, "send_info")
            or hasattr(recipient, "put_nowait") or hasattr(recipient, "put")
            or callable(recipient)):
        return
    raise TypeError(f"{fn}: {arg} must be a pykka ActorRef, an AgentRef, an object with put() "
                    f"(e.g. queue.Queue) or a callable, got {type(recipient).__name__}")


def request_options(options: Any, fn: str, output: Any) -> RequestOptions:
    """A request's checked `RequestOptions` (`check_options`), with the caller's trace
    context when an instrumentation captures one (`traced`). The default request (no
    options, no output, nothing instrumented) needs neither and calls neither."""
    opts = (DEFAULT_OPTIONS if options is None and output is None
            else check_options(options, fn, output))
    return opts if _context.trace_capture is None else traced(opts)


def unwrap(outcome: tuple[str, Any]) -> Any:
    """An `("ok", value)` answer's value; an `("error", reason)` raises `TurnError`."""
    if outcome[0] == "ok":
        return outcome[1]
    raise TurnError(outcome[1])


def unwrap_request(outcome: tuple[str, Any]) -> Any:
    """As `unwrap`, for a control request: an error raises `RequestError`."""
    if outcome[0] == "ok":
        return outcome[1]
    raise RequestError(outcome[1])


# ---------------------------------------------------------------------- requests
def ask(handle: AgentHandle, prompt: Any, timeout: Any, options: RequestOptions | None = None,
        cancel_on_timeout: bool = False, output: Any = None) -> Call:
    """`ask`: a turn whose caller waits for its `Response`."""
    check_prompt(prompt, "ask")
    check_timeout(timeout, "ask")
    opts = request_options(options, "ask", output)
    ref = RequestRef.new()
    caller = threading.current_thread()

    def failed(exc: BaseException, gave_up: bool) -> None:
        if gave_up:
            if cancel_on_timeout:
                handle.send(AbandonAskMsg(ref, timed_out=True))
            # without cancel_on_timeout a timed-out but live caller keeps its place (§4.14)
        elif not isinstance(exc, Exception):  # e.g. KeyboardInterrupt: the caller is gone
            handle.send(AbandonAskMsg(ref))

    return Call(lambda r: AskMsg(prompt, r, ref, caller, opts), unwrap, failed)


def resent(interrupted: Any, output: Any = None) -> tuple[str, RequestOptions]:
    """`resend`: the prompt and options that ask an `InterruptedTurn` again, guarded by its
    tool journal (the request carries it as `resend_of`).

    Raises:
        TypeError: `interrupted` is not an `InterruptedTurn`.
        ValueError: it has no recorded prompt, or its phase is not `"turn"` (answered).
    """
    from gen_agent.store import InterruptedTurn  # a record module; lazy like the store

    if not isinstance(interrupted, InterruptedTurn):
        raise TypeError(f"resend: expected an InterruptedTurn, got {type(interrupted).__name__}")
    if interrupted.prompt is None:
        raise ValueError("resend: this interrupted turn has no recorded prompt")
    if interrupted.phase != "turn":
        raise ValueError(f"resend: the turn was answered (phase {interrupted.phase!r}); "
                         "reconcile its stored response instead")
    return interrupted.prompt, RequestOptions(resend_of=interrupted, output=output)


def tell(handle: AgentHandle, prompt: Any, timeout: Any, *, recipient: Any = None,
         completion: bool = False, on_halt: str = "queue", stream_to: Any = None,
         options: RequestOptions | None = None, monitor: bool = False,
         output: Any = None) -> Call:
    """`tell` and `tell_with_completion` (`completion=True`): its answer is the `RequestRef`.

    A monitored request (`monitor=True`) whose ref was issued gets exactly one completion or
    `Down` record from then on; one refused or never answered gets nothing."""
    fn = "tell_with_completion" if completion else "tell"
    check_prompt(prompt, fn)
    check_timeout(timeout, fn)
    opts = request_options(options, fn, output)
    if on_halt not in ("queue", "fail"):
        raise ValueError(f"on_halt must be 'queue' or 'fail', got {on_halt!r}")
    if completion:
        check_recipient(recipient, fn)
    if stream_to is not None:
        check_recipient(stream_to, fn, "stream_to")
    if type(monitor) is not bool:
        raise TypeError(f"{fn}: monitor must be a bool, got {type(monitor).__name__}")
    if not monitor:
        return Call(lambda r: TellMsg(prompt, r, recipient, completion, on_halt, stream_to, opts),
                    unwrap)
    ref = RequestRef.new()
    watch = Watch(recipient, handle.name, ref)

    def answered(outcome: Any) -> RequestRef:
        try:
            issued = unwrap(outcome)
        except BaseException:
            watch.claim()  # no ref was issued: nothing is delivered for it
            raise
        watch.attach(handle)
        return issued  # type: ignore[no-any-return]

    def failed(_exc: BaseException, _gave_up: bool) -> None:
        watch.claim()  # no answer, so no ref was issued: nothing is delivered for it

    return Call(lambda r: TellMsg(prompt, r, recipient, completion, on_halt, stream_to, opts,
                                  ref, watch), answered, failed)


_POLL_MISSING = PollResult(status="failed", reason="not_found")


def poll(ref: RequestRef) -> Call:
    """`poll`: the `PollResult` of a tell request (a missing agent: failed, "not_found")."""
    return Call(lambda r: PollMsg(ref, r), missing=_POLL_MISSING)


def notify_ack(event: Any) -> Call:
    """`notify_ack`: admission of an event (None, or `TurnError` on overload/draining)."""
    return Call(lambda r: NotifyMsg(event, r), unwrap)


def interrupt_request(ref: RequestRef) -> Call:
    """`interrupt_request`: "accepted", "not_current" or "idle" ("not_found": no agent)."""
    return Call(lambda r: InterruptRequestMsg(ref, r), missing="not_found")


INTERRUPT_RECEIPT = Call(InterruptReceiptMsg)
"""`interrupt_receipt`: interrupt the active turn, answering an `InterruptReceipt` first
(a missing agent: `AgentNotFound`, as every synchronous call, §2.1)."""


def cancel_request(ref: RequestRef) -> Call:
    """`cancel_request`: "cancelled", "current" or "already_finished" ("not_found": the
    request is unknown, or no agent)."""
    return Call(lambda r: CancelRequestMsg(ref, r), missing="not_found")


def attach(ref: Any, after: Any, recipient: Any) -> Call:
    """`attach`: replay `ref`'s events after `after` to `recipient`, then the live ones and
    the outcome (see `_runtime/replay.py`); its answer is how many were already dropped.
    Raises `RequestError` "not_found" (no such running or kept turn) or "replay_off"."""
    if not isinstance(ref, RequestRef):
        raise TypeError(f"attach: ref must be a RequestRef, got {type(ref).__name__}")
    if type(after) is not int or after < 0:
        raise ValueError(f"attach: after must be an int >= 0 (an event's seq), got {after!r}")
    check_recipient(recipient, "attach")
    return Call(lambda r: AttachMsg(ref, after, recipient, r), unwrap_request)


RESET_SESSION = Call(ResetSessionMsg, unwrap_request)
STATUS = Call(StatusMsg)
SNAPSHOT = Call(SnapshotMsg)
BACKEND_SESSION = Call(GetSessionMsg)
DRAIN = Call(DrainMsg, unwrap_request)


def drained(handle: AgentHandle, exited: bool, timeout: float | None) -> None:
    """The end of `drain` once the agent accepted it: raise unless it exited normally
    (`exited`: it did within the caller's `timeout`)."""
    if not exited:
        raise CallTimeout(timeout)
    if handle.exit_reason != "normal":
        raise RequestError(("agent_down", handle.exit_reason))


def drain(handle: AgentHandle, timeout: float | None) -> None:
    """`drain`, blocking: `timeout` covers the admission and the wait for the exit."""
    deadline = None if timeout is None else time.monotonic() + timeout
    run(handle, DRAIN, timeout)
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    drained(handle, handle.exited.wait(remaining), timeout)


async def drain_async(handle: AgentHandle, timeout: float | None) -> None:
    """`drain`, awaited on the running loop."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    await run_async(handle, DRAIN, timeout)
    remaining = None if deadline is None else max(0.0, deadline - loop.time())
    drained(handle, await exited_async(handle, remaining), timeout)


async def exited_async(handle: AgentHandle, timeout: float | None) -> bool:
    """Await the end of this incarnation; False if `timeout` seconds passed first."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def done(_handle: Any, _reason: Any) -> None:
        call_in_loop(loop, set_once, future)

    token = handle.on_exit(done)
    try:
        async with asyncio.timeout(timeout):
            await future
    except TimeoutError:
        return handle.exited.is_set()
    finally:
        handle.remove_exit_listener(token)
    return True


# ---------------------------------------------------------------------- monitors
_MONITORS: dict[RequestRef, Watch] = {}  # live monitors by ref (a fired one removes itself)


def monitor(handle: AgentHandle, recipient: Any) -> RequestRef:
    """`monitor`: one `Down` record to `recipient` when this incarnation ends."""
    check_recipient(recipient, "monitor")
    ref = RequestRef.new()
    watch = Watch(recipient, handle.name, ref, forget=_forget_monitor)
    _MONITORS[ref] = watch
    watch.attach(handle)
    return ref


def demonitor(ref: RequestRef) -> bool:
    """`demonitor`: False if the monitor already fired or was cancelled."""
    watch = _MONITORS.pop(ref, None)
    return watch is not None and watch.claim()


def _forget_monitor(ref: RequestRef) -> None:
    _MONITORS.pop(ref, None)

"""`AgentRef`: a handle on one incarnation of an agent, and the calls it shares with the client.

The module-level functions of `gen_agent.client` resolve a name to an incarnation and then call
the same implementations as an `AgentRef` does, so both behave alike (contract §2.1, docs: the
client API reference; the Elixir original addresses a pid or a registered name). Kept apart from
`gen_agent.client` so the registry (`gen_agent.system`) can hand out refs without importing the
client API.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka

from gen_agent._runtime.handle import AgentHandle
from gen_agent._runtime.messages import (
    AbandonAskMsg,
    AskMsg,
    CancelRequestMsg,
    DrainMsg,
    HaltMsg,
    InfoMsg,
    InterruptMsg,
    InterruptRequestMsg,
    NotifyMsg,
    PollMsg,
    ResetSessionMsg,
    ResumeMsg,
    SnapshotMsg,
    StatusMsg,
    TellMsg,
)
from gen_agent._runtime.watch import Watch
from gen_agent.errors import CallTimeout, RequestError, TurnError
from gen_agent.ref import RequestRef
from gen_agent.request import RequestOptions, check_options, traced
from gen_agent.response import Response
from gen_agent.status import PollResult, RuntimeSnapshot, Status

__all__ = ["AgentRef"]


def _check_prompt(prompt: Any, fn: str) -> None:
    if type(prompt) is not str:
        raise TypeError(f"{fn}: prompt must be a str, got {type(prompt).__name__}")


def _check_timeout(timeout: Any, fn: str) -> None:
    if timeout is not None and type(timeout) not in (int, float):
        raise TypeError(f"{fn}: timeout must be seconds (an int or float) or None, "
                        f"got {type(timeout).__name__} {timeout!r}"[:200])


def _check_recipient(recipient: Any, fn: str, arg: str = "recipient") -> None:
    """A recipient the library can deliver to: see `deliver_to`."""
    if (isinstance(recipient, pykka.ActorRef) or hasattr(recipient, "send_info")
            or hasattr(recipient, "put_nowait") or hasattr(recipient, "put")
            or callable(recipient)):
        return
    raise TypeError(f"{fn}: {arg} must be a pykka ActorRef, an AgentRef, an object with put() "
                    f"(e.g. queue.Queue) or a callable, got {type(recipient).__name__}")


def _unwrap(outcome: tuple[str, Any]) -> Any:
    if outcome[0] == "ok":
        return outcome[1]
    raise TurnError(outcome[1])


def _request(outcome: tuple[str, Any]) -> Any:
    if outcome[0] == "ok":
        return outcome[1]
    raise RequestError(outcome[1])


# ---------------------------------------------------------------------- implementations
# Each takes the handle of one incarnation: module functions resolve it by name, an AgentRef
# uses its own (so an old ref never reaches a restarted agent: it gets AgentDown).
def _ask(handle: AgentHandle, prompt: str, timeout: float | None,
         options: RequestOptions | None = None, cancel_on_timeout: bool = False,
         output: Any = None) -> Response:
    _check_prompt(prompt, "ask")
    _check_timeout(timeout, "ask")
    opts = traced(check_options(options, "ask", output))
    ref = RequestRef.new()
    caller = threading.current_thread()
    try:
        return _unwrap(handle.call(lambda r: AskMsg(prompt, r, ref, caller, opts), timeout))
    except CallTimeout:
        if cancel_on_timeout:
            handle.send(AbandonAskMsg(ref, timed_out=True))
        raise  # without cancel_on_timeout a timed-out but live caller keeps its place (§4.14)
    except BaseException as exc:
        if not isinstance(exc, Exception):  # e.g. KeyboardInterrupt: the caller gave up
            handle.send(AbandonAskMsg(ref))
        raise


def _tell_message(handle: AgentHandle, prompt: str, timeout: float | None, *,
                  recipient: Any = None, completion: bool = False, on_halt: str = "queue",
                  stream_to: Any = None, options: RequestOptions | None = None,
                  monitor: bool = False, output: Any = None) -> tuple[Any, Watch | None]:
    """Check a tell's arguments (nothing is sent); return the mailbox message maker and, for
    `monitor=True`, the request's `Watch` (the threaded and the async tell share this)."""
    fn = "tell_with_completion" if completion else "tell"
    _check_prompt(prompt, fn)
    _check_timeout(timeout, fn)
    opts = traced(check_options(options, fn, output))
    if on_halt not in ("queue", "fail"):
        raise ValueError(f"on_halt must be 'queue' or 'fail', got {on_halt!r}")
    if completion:
        _check_recipient(recipient, fn)
    if stream_to is not None:
        _check_recipient(stream_to, fn, "stream_to")
    if type(monitor) is not bool:
        raise TypeError(f"{fn}: monitor must be a bool, got {type(monitor).__name__}")
    if not monitor:
        return (lambda r: TellMsg(prompt, r, recipient, completion, on_halt, stream_to, opts),
                None)
    ref = RequestRef.new()
    watch = Watch(recipient, handle.name, ref)
    return (lambda r: TellMsg(prompt, r, recipient, completion, on_halt, stream_to, opts, ref,
                              watch), watch)


def _tell_answered(handle: AgentHandle, watch: Watch | None, outcome: Any) -> RequestRef:
    """The agent answered a tell: its ref, or raise. A monitored request whose ref was issued
    gets exactly one completion or down record from now on; one refused gets nothing."""
    try:
        ref = _unwrap(outcome)
    except BaseException:
        if watch is not None:
            watch.claim()  # no ref was issued: nothing is delivered for it
        raise
    if watch is not None:
        watch.attach(handle)
    return ref


def _tell(handle: AgentHandle, prompt: str, timeout: float | None, **opts: Any) -> RequestRef:
    make, watch = _tell_message(handle, prompt, timeout, **opts)
    try:
        outcome = handle.call(make, timeout)
    except BaseException:
        if watch is not None:
            watch.claim()
        raise
    return _tell_answered(handle, watch, outcome)


def _monitor(handle: AgentHandle, recipient: Any) -> RequestRef:
    _check_recipient(recipient, "monitor")
    ref = RequestRef.new()
    watch = Watch(recipient, handle.name, ref, forget=_forget_monitor)
    _MONITORS[ref] = watch
    watch.attach(handle)
    return ref


def demonitor(ref: RequestRef) -> bool:
    """Cancel the monitor `ref` (from `gen_agent.monitor`): no `Down` record is delivered
    for it afterwards. Returns False if it already fired or was cancelled.

    Mirrors: `Process.demonitor/1`.
    """
    watch = _MONITORS.pop(ref, None)
    return watch is not None and watch.claim()


# Live monitors by ref (a fired monitor removes itself).
_MONITORS: dict[RequestRef, Watch] = {}


def _forget_monitor(ref: RequestRef) -> None:
    _MONITORS.pop(ref, None)


def _drain(handle: AgentHandle, timeout: float | None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    _request(handle.call(DrainMsg, timeout))
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not handle.exited.wait(remaining):
        raise CallTimeout(timeout)
    if handle.exit_reason != "normal":
        raise RequestError(("agent_down", handle.exit_reason))


# ---------------------------------------------------------------------- AgentRef
class AgentRef:
    """A handle on one incarnation of an agent. Thread-safe; share it freely.

    Methods mirror the module-level functions of the same name (see their docs), but address
    this incarnation, not the name: once it has stopped, synchronous methods raise
    `AgentDown` (even if a new agent took the name) and casts are ignored. `is_alive()`
    tells whether it still runs. Two refs are equal iff they denote the same incarnation.
    """

    __slots__ = ("_handle",)

    def __init__(self, handle: AgentHandle) -> None:
        self._handle = handle

    @property
    def name(self) -> Any:
        """The registered name."""
        return self._handle.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentRef) and other._handle is self._handle

    def __hash__(self) -> int:
        return id(self._handle)

    def __repr__(self) -> str:
        state = "alive" if self.is_alive() else "dead"
        return f"<AgentRef {self._handle.module.__name__} {state}>"

    def is_alive(self) -> bool:
        """True while this incarnation runs (it has not stopped or been killed)."""
        return not self._handle.closed

    def is_hibernated(self) -> bool:
        """True while this incarnation hibernates (idle past its `hibernate_after_ms`: no
        thread, its state waiting in memory). Reads a flag without messaging the agent, so
        asking does not wake it (`status()` would). A point-in-time answer. Mirrors
        `:erlang.process_info(pid, :status)` reporting a hibernated process."""
        return self._handle.hibernated and not self._handle.closed

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until this incarnation's thread finished; False if `timeout` (s) expired."""
        return self._handle.exited.wait(timeout)

    def on_exit(self, callback: Any) -> None:
        """Call `callback(ref, reason)` once when this incarnation stops, for any reason
        including a kill (at once if it already has). It runs in the thread that ends the
        agent and must be quick: hand the news to your own thread or queue. A raising
        callback is logged (type only) and ignored. Mirrors `Process.monitor/1` on the
        agent's pid.
        """
        self._handle.on_exit(lambda _handle, reason: callback(self, reason))

    @property
    def exit_reason(self) -> Any:
        """The reason this incarnation stopped (None while it runs)."""
        return self._handle.exit_reason

    def send_info(self, message: Any) -> None:
        """Deliver `message` to this incarnation's `handle_info` (used for completions)."""
        self._handle.send(InfoMsg(message))

    def ask(self, prompt: str, timeout: float | None = None, *,
            options: RequestOptions | None = None, cancel_on_timeout: bool = False,
            output: Any = None) -> Response:
        """See `gen_agent.ask`."""
        return _ask(self._handle, prompt, timeout, options, cancel_on_timeout, output)

    def tell(self, prompt: str, timeout: float | None = None, *,
             options: RequestOptions | None = None) -> RequestRef:
        """See `gen_agent.tell`."""
        return _tell(self._handle, prompt, timeout, options=options)

    def tell_with_completion(self, prompt: str, recipient: Any, *, on_halt: str = "queue",
                             stream_to: Any = None, timeout: float | None = None,
                             options: RequestOptions | None = None,
                             monitor: bool = False, output: Any = None) -> RequestRef:
        """See `gen_agent.tell_with_completion`."""
        return _tell(self._handle, prompt, timeout, recipient=recipient, completion=True,
                     on_halt=on_halt, stream_to=stream_to, options=options, monitor=monitor,
                     output=output)

    def monitor(self, recipient: Any) -> RequestRef:
        """See `gen_agent.monitor` (this incarnation: at once if it has already stopped)."""
        return _monitor(self._handle, recipient)

    def poll(self, ref: RequestRef, timeout: float | None = None) -> PollResult:
        """See `gen_agent.poll`."""
        return self._handle.call(lambda r: PollMsg(ref, r), timeout)

    def notify(self, event: Any) -> None:
        """See `gen_agent.notify`."""
        self._handle.send(NotifyMsg(event))

    def notify_ack(self, event: Any, timeout: float | None = None) -> None:
        """See `gen_agent.notify_ack`."""
        _unwrap(self._handle.call(lambda r: NotifyMsg(event, r), timeout))

    def interrupt(self) -> None:
        """See `gen_agent.interrupt`."""
        self._handle.send(InterruptMsg())

    def interrupt_request(self, ref: RequestRef, timeout: float | None = None) -> str:
        """See `gen_agent.interrupt_request`."""
        return self._handle.call(lambda r: InterruptRequestMsg(ref, r), timeout)

    def cancel_request(self, ref: RequestRef, timeout: float | None = None) -> str:
        """See `gen_agent.cancel_request`."""
        return self._handle.call(lambda r: CancelRequestMsg(ref, r), timeout)

    def halt(self) -> None:
        """See `gen_agent.halt`."""
        self._handle.send(HaltMsg())

    def resume(self) -> None:
        """See `gen_agent.resume`."""
        self._handle.send(ResumeMsg())

    def reset_session(self, timeout: float | None = None) -> None:
        """See `gen_agent.reset_session`."""
        _request(self._handle.call(ResetSessionMsg, timeout))

    def status(self, timeout: float | None = None) -> Status:
        """See `gen_agent.status`."""
        return self._handle.call(StatusMsg, timeout)

    def runtime_snapshot(self, timeout: float | None = None) -> RuntimeSnapshot:
        """See `gen_agent.runtime_snapshot`."""
        return self._handle.call(SnapshotMsg, timeout)

    def drain(self, timeout: float | None = None) -> None:
        """See `gen_agent.drain`."""
        _drain(self._handle, timeout)

    def stop(self) -> None:
        """See `gen_agent.stop`; a no-op if this incarnation already stopped."""
        self._handle.system.stop_handle(self._handle)

"""`AgentRef`: a handle on one incarnation of an agent.

Its methods are adapters over the one definition of each call (`gen_agent._runtime.calls`),
addressing this incarnation's handle instead of resolving a name, so an old ref never reaches a
restarted agent: it gets `AgentDown` (contract: docs/pages/contract.md, "Addressing"; the
Elixir original addresses a pid or a registered name). The module-level functions of
`gen_agent._client` resolve a name and use the same definitions, so both behave alike.
"""

from __future__ import annotations

from typing import Any

from gen_agent._request_options import RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._response import Response
from gen_agent._runtime import (
    AgentHandle,
    HaltMsg,
    InfoMsg,
    InterruptMsg,
    NotifyMsg,
    ResumeMsg,
    calls,
)
from gen_agent._status import InterruptReceipt, PollResult, RuntimeSnapshot, Status

__all__ = ["AgentRef"]


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
        handle = self._handle
        return calls.run(handle, calls.ask(handle, prompt, timeout, options, cancel_on_timeout,
                                           output), timeout)  # type: ignore[no-any-return]

    def resend(self, interrupted: Any, timeout: float | None = None, *,
               output: Any = None) -> Response:
        """See `gen_agent.resend`."""
        prompt, options = calls.resent(interrupted, output)
        return self.ask(prompt, timeout, options=options)

    def tell(self, prompt: str, timeout: float | None = None, *,
             options: RequestOptions | None = None) -> RequestRef:
        """See `gen_agent.tell`."""
        handle = self._handle
        return calls.run(handle, calls.tell(handle, prompt, timeout, options=options),
                         timeout)  # type: ignore[no-any-return]

    def tell_with_completion(self, prompt: str, recipient: Any, *, on_halt: str = "queue",
                             stream_to: Any = None, timeout: float | None = None,
                             options: RequestOptions | None = None,
                             monitor: bool = False, output: Any = None) -> RequestRef:
        """See `gen_agent.tell_with_completion`."""
        handle = self._handle
        call = calls.tell(handle, prompt, timeout, recipient=recipient, completion=True,
                          on_halt=on_halt, stream_to=stream_to, options=options,
                          monitor=monitor, output=output)
        return calls.run(handle, call, timeout)  # type: ignore[no-any-return]

    def monitor(self, recipient: Any) -> RequestRef:
        """See `gen_agent.monitor` (this incarnation: at once if it has already stopped)."""
        return calls.monitor(self._handle, recipient)

    def poll(self, ref: RequestRef, timeout: float | None = None) -> PollResult:
        """See `gen_agent.poll`."""
        return calls.run(self._handle, calls.poll(ref), timeout)  # type: ignore[no-any-return]

    def notify(self, event: Any) -> None:
        """See `gen_agent.notify`."""
        self._handle.send(NotifyMsg(event))

    def notify_ack(self, event: Any, timeout: float | None = None) -> None:
        """See `gen_agent.notify_ack`."""
        calls.run(self._handle, calls.notify_ack(event), timeout)

    def interrupt(self) -> None:
        """See `gen_agent.interrupt`."""
        self._handle.send(InterruptMsg())

    def interrupt_request(self, ref: RequestRef, timeout: float | None = None) -> str:
        """See `gen_agent.interrupt_request`."""
        return calls.run(self._handle, calls.interrupt_request(ref),  # type: ignore[no-any-return]
                         timeout)

    def interrupt_receipt(self, timeout: float | None = None) -> InterruptReceipt:
        """See `gen_agent.interrupt_receipt`."""
        return calls.run(self._handle, calls.INTERRUPT_RECEIPT,  # type: ignore[no-any-return]
                         timeout)

    def cancel_request(self, ref: RequestRef, timeout: float | None = None) -> str:
        """See `gen_agent.cancel_request`."""
        return calls.run(self._handle, calls.cancel_request(ref),  # type: ignore[no-any-return]
                         timeout)

    def halt(self) -> None:
        """See `gen_agent.halt`."""
        self._handle.send(HaltMsg())

    def resume(self) -> None:
        """See `gen_agent.resume`."""
        self._handle.send(ResumeMsg())

    def send(self, message: Any) -> None:
        """See `gen_agent.send`."""
        self._handle.send(InfoMsg(message))

    def reset_session(self, timeout: float | None = None) -> None:
        """See `gen_agent.reset_session`."""
        calls.run(self._handle, calls.RESET_SESSION, timeout)

    def status(self, timeout: float | None = None) -> Status:
        """See `gen_agent.status`."""
        return calls.run(self._handle, calls.STATUS, timeout)  # type: ignore[no-any-return]

    def runtime_snapshot(self, timeout: float | None = None) -> RuntimeSnapshot:
        """See `gen_agent.runtime_snapshot`."""
        return calls.run(self._handle, calls.SNAPSHOT, timeout)  # type: ignore[no-any-return]

    def backend_session(self, timeout: float | None = None) -> Any:
        """See `gen_agent.backend_session`."""
        return calls.run(self._handle, calls.BACKEND_SESSION, timeout)

    def drain(self, timeout: float | None = None) -> None:
        """See `gen_agent.drain`."""
        calls.drain(self._handle, timeout)

    def stop(self) -> None:
        """See `gen_agent.stop`; a no-op if this incarnation already stopped."""
        self._handle.system.stop_handle(self._handle)

"""`gen_agent.aio`: the client API as coroutines, for asyncio applications.

The agents stay pykka actors on their own threads; what changes is how an asyncio caller meets them.
Every coroutine here sends the same mailbox message as its threaded twin in `gen_agent` and then
awaits the actor's answer without blocking the event loop and without a thread per call: the actor
answers a once-only reply, whose done-callback hands the answer to the caller's loop
(`loop.call_soon_threadsafe` on an `asyncio.Future`). So any number of awaits cost no threads, work
from any running loop, and from several loops in several threads at once.

Semantics are the threaded API's (docs/pages/contract.md#s2-1; docs: the client API reference): a
missing name raises `AgentNotFound` before anything is sent; an agent that dies while a caller
awaits fails the await with `AgentDown` (every reply is tracked by its incarnation, so nobody is
left waiting); the caller's own `timeout` (seconds, None = forever) raises `CallTimeout`.

Cancellation. A cancelled await (task.cancel(), `asyncio.timeout`, `asyncio.wait_for`) and an
expired `timeout` are the caller giving up, not the request: by default the request stays queued
or running, as the contract says for a timed-out caller (§4.14), and its outcome goes to the poll
cache (tells) or is dropped (asks). With `cancel_on_timeout=True` the request is cancelled too: a
queued one is removed, a running one interrupted, so a retry loop does not pile up paid turns.

Streaming a turn: `async with aio.stream(name, prompt) as turn: async for event in turn` (see
`gen_agent.stream`, which this mirrors).

Mirrors: nothing in the Elixir original (a BEAM process simply blocks in `receive`); this is
how an asyncio task waits like one.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from gen_agent._agent_ref import AgentRef
from gen_agent._deprecate import system_renamed
from gen_agent._errors import CallTimeout
from gen_agent._pool import checked_prompts
from gen_agent._request_options import RequestOptions
from gen_agent._request_ref import RequestRef
from gen_agent._response import Response
from gen_agent._runtime import (
    HaltMsg,
    InfoMsg,
    InterruptMsg,
    NotifyMsg,
    ResumeMsg,
    StopMsg,
    await_reply,
    call_in_loop,
    calls,
    set_once,
)
from gen_agent._status import InterruptReceipt, PollResult, RuntimeSnapshot, Status
from gen_agent._streaming import AsyncAttachedTurn, AsyncTurnStream
from gen_agent._system import AgentSystem, current_system

__all__ = [
    "AsyncAttachedTurn",
    "AsyncTurnStream",
    "ask",
    "attach",
    "backend_session",
    "cancel_request",
    "drain",
    "halt",
    "interrupt",
    "interrupt_receipt",
    "interrupt_request",
    "map",
    "monitor",
    "notify",
    "notify_ack",
    "poll",
    "resend",
    "reset_session",
    "resume",
    "runtime_snapshot",
    "send",
    "start_agent",
    "status",
    "stop",
    "stream",
    "submit",
    "tell",
    "tell_with_completion",
]


# ---------------------------------------------------------------------- requests
# Each coroutine is the awaitable twin of the `gen_agent` function of the same name:
# same parameters, same checks, same message, same outcomes (see there for the reasons).
@system_renamed
async def ask(name: Any, prompt: str, timeout: float | None = None, *,
              options: RequestOptions | None = None, cancel_on_timeout: bool = False,
              output: Any = None, agent_system: AgentSystem | None = None) -> Response:
    """Send `prompt` as a turn and await its `Response`. The awaitable twin of
    `gen_agent.ask` (same reasons, same queueing, same caller-owned retries).

    Args:
        name: the agent's name. prompt: a `str`. timeout: seconds, None = forever.
        options: the request's `RequestOptions` (None = the defaults).
        cancel_on_timeout: also cancel the request when this await is cancelled or times out
            (queued: removed; running: interrupted). Default False: it stays
            (docs/pages/contract.md#s4-14; docs: Errors).
        output: the type of a structured reply (see `gen_agent.ask`), or None.
        agent_system: the `AgentSystem` to look the name up in (default: the current one).

    Returns:
        The `Response` of the successful turn.

    Raises:
        TypeError: `prompt` is not a `str`, or `timeout` not a number (nothing is sent).
        AgentNotFound: no agent has that name (nothing is sent).
        AgentDown: the agent ended while the call waited.
        CallTimeout: no answer within `timeout` seconds.
        TurnError: the request failed (`.reason` as `gen_agent.ask`).
        asyncio.CancelledError: the awaiting task was cancelled.

    Mirrors: `GenAgent.ask/3` (docs/pages/contract.md#s2-4; docs: the client API reference).
    """
    handle = calls.lookup(agent_system, name)
    return await calls.run_async(  # type: ignore[no-any-return]
        handle, calls.ask(handle, prompt, timeout, options, cancel_on_timeout, output), timeout)


async def resend(name: Any, interrupted: Any, timeout: float | None = None, *,
                 output: Any = None, agent_system: AgentSystem | None = None) -> Response:
    """Ask an `InterruptedTurn`'s prompt again, guarded by its tool journal, and await the
    `Response`. The awaitable twin of `gen_agent.resend` (same checks and outcomes)."""
    prompt, options = calls.resent(interrupted, output)
    return await ask(name, prompt, timeout, options=options, agent_system=agent_system)


@system_renamed
async def tell(name: Any, prompt: str, timeout: float | None = None, *,
               options: RequestOptions | None = None,
               agent_system: AgentSystem | None = None) -> RequestRef:
    """Queue `prompt` as a turn and return its `RequestRef`; read the outcome with `poll`.
    The awaitable twin of `gen_agent.tell`.

    Raises:
        TypeError: `prompt` is not a `str`.
        TurnError: ("overloaded", info) (no ref issued) or "draining".
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the call waited.
        CallTimeout: no answer within `timeout` seconds.

    Mirrors: `GenAgent.tell/3` (docs/pages/contract.md#s2-5; docs: the client API reference).
    """
    handle = calls.lookup(agent_system, name)
    return await calls.run_async(  # type: ignore[no-any-return]
        handle, calls.tell(handle, prompt, timeout, options=options), timeout)


@system_renamed
async def tell_with_completion(name: Any, prompt: str, recipient: Any, *, on_halt: str = "queue",
                               stream_to: Any = None, timeout: float | None = None,
                               options: RequestOptions | None = None, monitor: bool = False,
                               output: Any = None,
                               agent_system: AgentSystem | None = None) -> RequestRef:
    """Like `tell`, and deliver exactly one completion message to `recipient` (any recipient
    `gen_agent.tell_with_completion` takes, e.g. an `asyncio.Queue` fed from the agent thread
    through `loop.call_soon_threadsafe`). With `monitor=True` the recipient gets exactly one
    of the completion or a `Down` record (see `gen_agent.tell_with_completion`).

    Raises:
        ValueError: `on_halt` is not "queue" or "fail" (nothing is sent).
        TurnError: "halted" (on_halt="fail"), ("overloaded", info) or "draining".
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the call waited.
        CallTimeout: no answer within `timeout` seconds.

    Mirrors: `GenAgent.tell_with_completion/5` (docs/pages/contract.md#s2-6; docs: the client API
    reference).
    """
    handle = calls.lookup(agent_system, name)
    call = calls.tell(handle, prompt, timeout, recipient=recipient, completion=True,
                      on_halt=on_halt, stream_to=stream_to, options=options, monitor=monitor,
                      output=output)
    return await calls.run_async(handle, call, timeout)  # type: ignore[no-any-return]


async def monitor(name: Any, recipient: Any, *,
                  agent_system: AgentSystem | None = None) -> RequestRef:
    """Monitor the agent `name` (one `Down` record when its incarnation ends). The awaitable
    twin of `gen_agent.monitor` (it does not wait: the monitor is set at once)."""
    return calls.monitor(calls.lookup(agent_system, name), recipient)


@system_renamed
async def poll(name: Any, ref: RequestRef, timeout: float | None = None, *,
               agent_system: AgentSystem | None = None) -> PollResult:
    """Return the state of a tell request (pending / completed / failed). The awaitable twin
    of `gen_agent.poll`; a missing agent gives status "failed", reason "not_found".

    Mirrors: `GenAgent.poll/3` (docs/pages/contract.md#s2-7; docs: the client API reference).
    """
    return await calls.run_by_name_async(  # type: ignore[no-any-return]
        agent_system, name, calls.poll(ref), timeout)


@system_renamed
async def notify(name: Any, event: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Deliver `event` to the agent's `handle_event` (a cast: never raises for a missing
    agent, never waits). The awaitable twin of `gen_agent.notify` (docs/pages/contract.md#s2-8;
    docs: the client API reference)."""
    calls.cast(agent_system, name, NotifyMsg(event))


@system_renamed
async def notify_ack(name: Any, event: Any, timeout: float | None = None, *,
                     agent_system: AgentSystem | None = None) -> None:
    """Like `notify`, but await admission. The awaitable twin of `gen_agent.notify_ack`.

    Raises:
        TurnError: ("overloaded", info) or "draining".
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the call waited.
        CallTimeout: no answer within `timeout` seconds.

    Mirrors: `GenAgent.notify_ack/3` (docs/pages/contract.md#s2-9; docs: the client API reference).
    """
    await calls.run_by_name_async(agent_system, name, calls.notify_ack(event), timeout)


@system_renamed
async def interrupt(name: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Interrupt the active turn, if any (a cast). Mirrors `GenAgent.interrupt/1` (§2.10)."""
    calls.cast(agent_system, name, InterruptMsg())


async def interrupt_request(name: Any, ref: RequestRef, timeout: float | None = None, *,
                            agent_system: AgentSystem | None = None) -> str:
    """Interrupt the turn of `ref` only if it is the active one: "accepted", "not_current",
    "idle" or "not_found". The awaitable twin of `gen_agent.interrupt_request` (§2.11)."""
    return await calls.run_by_name_async(  # type: ignore[no-any-return]
        agent_system, name, calls.interrupt_request(ref), timeout)


async def interrupt_receipt(name: Any, timeout: float | None = None, *,
                            agent_system: AgentSystem | None = None) -> InterruptReceipt:
    """Interrupt the active turn, if any, and answer an `InterruptReceipt`. The awaitable
    twin of `gen_agent.interrupt_receipt`."""
    return await calls.run_by_name_async(  # type: ignore[no-any-return]
        agent_system, name, calls.INTERRUPT_RECEIPT, timeout)


async def cancel_request(name: Any, ref: RequestRef, timeout: float | None = None, *,
                         agent_system: AgentSystem | None = None) -> str:
    """Remove a queued tell before dispatch: "cancelled", "current", "already_finished" or
    "not_found". The awaitable twin of `gen_agent.cancel_request` (§2.12)."""
    return await calls.run_by_name_async(  # type: ignore[no-any-return]
        agent_system, name, calls.cancel_request(ref), timeout)


@system_renamed
async def halt(name: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Stop dispatching after the current turn (a cast). Mirrors `GenAgent.halt/1` (§2.13)."""
    calls.cast(agent_system, name, HaltMsg())


@system_renamed
async def resume(name: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Resume dispatching after `halt` (a cast). Mirrors `GenAgent.resume/1` (§2.14)."""
    calls.cast(agent_system, name, ResumeMsg())


async def send(name: Any, message: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Send `message` to the agent's `handle_info` (a cast). The awaitable twin of
    `gen_agent.send`."""
    calls.cast(agent_system, name, InfoMsg(message))


async def reset_session(name: Any, timeout: float | None = None, *,
                        agent_system: AgentSystem | None = None) -> None:
    """Replace the backend conversation in place (idle only). The awaitable twin of
    `gen_agent.reset_session` (same errors; docs/pages/contract.md#s2-15; docs: the client API
    reference)."""
    await calls.run_by_name_async(agent_system, name, calls.RESET_SESSION, timeout)


@system_renamed
async def status(name: Any, timeout: float | None = None, *,
                 agent_system: AgentSystem | None = None) -> Status:
    """The agent's `Status` record. The awaitable twin of `gen_agent.status`.

    Raises:
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the call waited.
        CallTimeout: no answer within `timeout` seconds.

    Mirrors: `GenAgent.status/2` (docs/pages/contract.md#s2-16; docs: the client API reference).
    """
    return await calls.run_by_name_async(  # type: ignore[no-any-return]
        agent_system, name, calls.STATUS, timeout)


async def runtime_snapshot(name: Any, timeout: float | None = None, *,
                           agent_system: AgentSystem | None = None) -> RuntimeSnapshot:
    """The payload-free `RuntimeSnapshot`. The awaitable twin of `gen_agent.runtime_snapshot`
    (docs/pages/contract.md#s2-17; docs: the client API reference)."""
    return await calls.run_by_name_async(  # type: ignore[no-any-return]
        agent_system, name, calls.SNAPSHOT, timeout)


async def backend_session(name: Any, timeout: float | None = None, *,
                          agent_system: AgentSystem | None = None) -> Any:
    """The agent's raw backend session. The awaitable twin of `gen_agent.backend_session`."""
    return await calls.run_by_name_async(agent_system, name, calls.BACKEND_SESSION,
                                 timeout)


@system_renamed
async def drain(name: Any, timeout: float | None = None, *,
                agent_system: AgentSystem | None = None) -> None:
    """Stop admitting work, finish what is queued, then stop normally; await the stop.
    The awaitable twin of `gen_agent.drain`.

    Raises:
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped before accepting the drain.
        CallTimeout: the drain did not finish within `timeout` seconds (for the whole drain).
        RequestError: ("agent_down", reason) if the agent ended otherwise than normally.

    Mirrors: `GenAgent.drain/2` (docs/pages/contract.md#s2-18; docs: the client API reference).
    """
    await calls.drain_async(calls.lookup(agent_system, name), timeout)


@system_renamed
async def stop(name: Any, *, agent_system: AgentSystem | None = None) -> None:
    """Stop the agent gracefully within its `shutdown_ms`, then kill it; awaits the stop.
    The awaitable twin of `gen_agent.stop`.

    Raises:
        AgentNotFound: no such agent.
        RequestError: "self_stop" when awaited from the agent's own threads.

    Mirrors: `GenAgent.stop/2` (docs/pages/contract.md#s2-19; docs: the client API reference).
    """
    system = agent_system or current_system()
    handle = system.lookup(name)
    system._check_stop(handle)
    if handle.closed:
        return
    handle.send(StopMsg("shutdown", handle.reply()))
    window = handle.shutdown_ms
    if not await calls.exited_async(handle, None if window is None else window / 1000):
        system._kill(handle)


async def start_agent(module: type, *, name: Any, backend: Any,
                      agent_system: AgentSystem | None = None, **opts: Any) -> AgentRef:
    """Start an agent and await its `AgentRef` once `init_agent` and the backend's
    `start_session` finished. Options and errors as `gen_agent.start_agent` (they run in the
    new agent's thread; this coroutine only awaits them).

    Raises:
        AgentStartError: the start failed (reason as `gen_agent.start_agent`).
        AlreadyStarted: a live agent has that name.
        ValueError: an invalid `shutdown_ms`.

    Mirrors: `GenAgent.start_agent/2` (docs/pages/contract.md#s2-2; docs: the client API reference).
    """
    if isinstance(opts.get("system"), AgentSystem):  # the old spelling of agent_system=
        warnings.warn("start_agent: system= is deprecated, use agent_system=",
                      DeprecationWarning, stacklevel=2)
        agent_system = opts.pop("system")
    system = agent_system or current_system()
    handle, init_reply = system._launch(module, name=name, backend=backend, **opts)
    await await_reply(init_reply, None)
    return AgentRef(handle)


# ---------------------------------------------------------------------- pools
async def submit(pool: Any, prompt: str, *, timeout: float | None = None,
                 **task_opts: Any) -> Response:
    """Run `prompt` as one task of `pool` and await its `Response`: the awaitable twin of
    `Pool.submit` + `Pool.result` (the task is queued at once; the pool calls back when its
    outcome is ready, and the answer is handed to this loop).

    Args:
        pool: a `gen_agent.Pool`. prompt: a `str`.
        timeout: seconds to await (None = forever).
        **task_opts: further `Pool.submit` options (e.g. `output=` when the pool takes it).

    Returns:
        The task's `Response`.

    Raises:
        TypeError: `prompt` is not a str. RequestError: "pool_stopped".
        TurnError: the task failed (the reasons of `Pool.result`).
        CallTimeout: no outcome within `timeout` (the task goes on; its outcome stays for
            `pool.result(ref)`, as after `Pool.result`'s timeout). A cancelled await likewise
            leaves the task to the pool.

    Mirrors: nothing in the original (`Pool` is this port's); `Pool.submit` / `Pool.result`.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    ref = pool.submit(prompt, on_done=lambda r: call_in_loop(loop, set_once, done, r),
                      **task_opts)
    try:
        async with asyncio.timeout(timeout):
            await done
    except TimeoutError:
        raise CallTimeout(timeout) from None
    return pool.result(ref, 0)  # ready: returns at once


async def map(pool: Any, prompts: Any, *, timeout: float | None = None,
              return_exceptions: bool = False, **task_opts: Any) -> list[Any]:
    """Run every prompt as a task of `pool` and await their responses, in the order of
    `prompts`: the awaitable twin of `Pool.map`.

    Args:
        pool: a `gen_agent.Pool`. prompts: an iterable of `str` (not a bare str).
        timeout: seconds for the whole batch (None = forever).
        return_exceptions: False (default): raise the first failure (the others go on). True:
            a failed task's `TurnError` takes its place in the list.
        **task_opts: further `Pool.submit` options.

    Returns:
        One `Response` (or, with `return_exceptions`, `TurnError`) per prompt, in order.

    Raises:
        TypeError: `prompts` is a str, or holds a non-str (its index named; every prompt is
            checked before any task is submitted). TurnError: the first failed task.
        CallTimeout: the batch did not finish within `timeout`.

    Mirrors: `Pool.map`.
    """
    batch = [submit(pool, prompt, **task_opts) for prompt in checked_prompts(prompts, "map")]
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.gather(*batch, return_exceptions=return_exceptions)
    except TimeoutError:
        raise CallTimeout(timeout) from None


# ---------------------------------------------------------------------- streaming
@system_renamed
def stream(name: Any, prompt: str, *, interrupt_on_exit: bool = True,
           max_buffered_events: int = 256, timeout: float | None = None,
           agent_system: AgentSystem | None = None,
           options: RequestOptions | None = None) -> AsyncTurnStream:
    """Run `prompt` as a turn and iterate its events as they arrive, then its response.

        async with aio.stream("coder", "Fix the test.") as turn:
            async for event in turn:
                ...
            response = turn.response      # or TurnError raised at the end of iteration

    Args and semantics as `gen_agent.stream` (it is the same stream, read from a loop).

    Mirrors: nothing in the original; a `tell_with_completion` with `stream_to` (origin
    "tell") and a monitor underneath (docs/pages/contract.md#s2-6, #s4-18; docs: the client API
    reference).
    """
    return AsyncTurnStream(name, prompt, interrupt_on_exit=interrupt_on_exit,
                           max_buffered_events=max_buffered_events, timeout=timeout,
                           agent_system=agent_system, options=options)


def attach(name: Any, ref: RequestRef, *, after: int = 0, timeout: float | None = None,
           max_buffered_events: int = 256,
           agent_system: AgentSystem | None = None) -> AsyncAttachedTurn:
    """Rejoin a running or just-finished turn from an event loop:
    `async with aio.attach(name, ref, after=seq) as turn: async for event in turn`.

    Args and semantics as `gen_agent.attach` (the same reader, read from a loop).

    Mirrors: nothing in the original.
    """
    return AsyncAttachedTurn(name, ref, after, timeout=timeout,
                             max_buffered_events=max_buffered_events, agent_system=agent_system)

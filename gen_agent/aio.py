"""`gen_agent.aio`: the client API as coroutines, for asyncio applications.

The agents stay pykka actors on their own threads; what changes is how an asyncio caller meets
them. Every coroutine here sends the same mailbox message as its threaded twin in
`gen_agent.client` and then awaits the actor's answer without blocking the event loop and
without a thread per call: the actor answers a once-only reply, whose done-callback hands the
answer to the caller's loop (`loop.call_soon_threadsafe` on an `asyncio.Future`). So any number
of awaits cost no threads, work from any running loop, and from several loops in several
threads at once.

Semantics are the threaded API's (contract §2.1; docs: the client API reference): a missing name
raises `AgentNotFound` before anything is sent; an agent that dies while a caller awaits fails the
await with `AgentDown` (every reply is tracked by its incarnation, so nobody is left waiting); the
caller's own `timeout` (seconds, None = forever) raises `CallTimeout`.

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
import threading
from typing import Any

from gen_agent._runtime.handle import AgentHandle
from gen_agent._runtime.messages import (
    AbandonAskMsg,
    AskMsg,
    DrainMsg,
    HaltMsg,
    InterruptMsg,
    NotifyMsg,
    PollMsg,
    ResumeMsg,
    StatusMsg,
    StopMsg,
)
from gen_agent._runtime.reply import await_reply, call_in_loop, set_once
from gen_agent.agent_ref import (
    AgentRef,
    _check_prompt,
    _check_timeout,
    _tell_answered,
    _tell_message,
    _unwrap,
)
from gen_agent.client import _cast, _lookup
from gen_agent.errors import AgentNotFound, CallTimeout, RequestError
from gen_agent.ref import RequestRef
from gen_agent.request import RequestOptions, check_options, traced
from gen_agent.response import Response
from gen_agent.status import PollResult, Status
from gen_agent.streaming import AsyncTurnStream
from gen_agent.system import AgentSystem, current_system

__all__ = [
    "AsyncTurnStream",
    "ask",
    "drain",
    "halt",
    "interrupt",
    "map",
    "notify",
    "notify_ack",
    "poll",
    "resume",
    "start_agent",
    "status",
    "stop",
    "stream",
    "submit",
    "tell",
    "tell_with_completion",
]


# ---------------------------------------------------------------------- the bridge
async def _call(handle: AgentHandle, make: Any, timeout: float | None) -> Any:
    return await await_reply(handle.request(make), timeout)


async def _tell(handle: AgentHandle, prompt: str, timeout: float | None,
                **opts: Any) -> RequestRef:
    """The threaded `_tell`, awaited: same checks, same message, same monitor."""
    make, watch = _tell_message(handle, prompt, timeout, **opts)
    try:
        outcome = await _call(handle, make, timeout)
    except BaseException:
        if watch is not None:
            watch.claim()
        raise
    return _tell_answered(handle, watch, outcome)


def _system(system: AgentSystem | None) -> AgentSystem:
    return system or current_system()


# ---------------------------------------------------------------------- requests
async def ask(name: Any, prompt: str, timeout: float | None = None, *,
              options: RequestOptions | None = None, cancel_on_timeout: bool = False,
              system: AgentSystem | None = None) -> Response:
    """Send `prompt` as a turn and await its `Response`. The awaitable twin of
    `gen_agent.ask` (same reasons, same queueing, same caller-owned retries).

    Args:
        name: the agent's name. prompt: a `str`. timeout: seconds, None = forever.
        options: the request's `RequestOptions` (None = the defaults).
        cancel_on_timeout: also cancel the request when this await is cancelled or times out
            (queued: removed; running: interrupted). Default False: it stays (contract §4.14; docs:
            Errors).
        system: the `AgentSystem` to look the name up in (default: the current one).

    Returns:
        The `Response` of the successful turn.

    Raises:
        TypeError: `prompt` is not a `str`, or `timeout` not a number (nothing is sent).
        AgentNotFound: no agent has that name (nothing is sent).
        AgentDown: the agent ended while the call waited.
        CallTimeout: no answer within `timeout` seconds.
        TurnError: the request failed (`.reason` as `gen_agent.ask`).
        asyncio.CancelledError: the awaiting task was cancelled.

    Mirrors: `GenAgent.ask/3` (contract §2.4; docs: the client API reference).
    """
    _check_prompt(prompt, "ask")
    _check_timeout(timeout, "ask")
    opts = traced(check_options(options, "ask"))  # the caller's trace context, if instrumented
    handle = _lookup(system, name)
    ref = RequestRef.new()
    caller = threading.current_thread()
    reply = handle.request(lambda r: AskMsg(prompt, r, ref, caller, opts))
    try:
        return _unwrap(await await_reply(reply, timeout))
    except (CallTimeout, asyncio.CancelledError):
        if cancel_on_timeout:  # the same rule as the threaded ask's (see `gen_agent.ask`)
            handle.send(AbandonAskMsg(ref, timed_out=True))
        raise


async def tell(name: Any, prompt: str, timeout: float | None = None, *,
               options: RequestOptions | None = None,
               system: AgentSystem | None = None) -> RequestRef:
    """Queue `prompt` as a turn and return its `RequestRef`; read the outcome with `poll`.
    The awaitable twin of `gen_agent.tell`.

    Raises:
        TypeError: `prompt` is not a `str`.
        TurnError: ("overloaded", info) (no ref issued) or "draining".
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the call waited.
        CallTimeout: no answer within `timeout` seconds.

    Mirrors: `GenAgent.tell/3` (contract §2.5; docs: the client API reference).
    """
    handle = _lookup(system, name)
    return await _tell(handle, prompt, timeout, options=options)


async def tell_with_completion(name: Any, prompt: str, recipient: Any, *, on_halt: str = "queue",
                               stream_to: Any = None, timeout: float | None = None,
                               options: RequestOptions | None = None, monitor: bool = False,
                               system: AgentSystem | None = None) -> RequestRef:
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

    Mirrors: `GenAgent.tell_with_completion/5` (contract §2.6; docs: the client API reference).
    """
    handle = _lookup(system, name)
    return await _tell(handle, prompt, timeout, recipient=recipient, completion=True,
                       on_halt=on_halt, stream_to=stream_to, options=options, monitor=monitor)


async def poll(name: Any, ref: RequestRef, timeout: float | None = None, *,
               system: AgentSystem | None = None) -> PollResult:
    """Return the state of a tell request (pending / completed / failed). The awaitable twin
    of `gen_agent.poll`; a missing agent gives status "failed", reason "not_found".

    Mirrors: `GenAgent.poll/3` (contract §2.7; docs: the client API reference).
    """
    try:
        handle = _lookup(system, name)
    except AgentNotFound:
        return PollResult(status="failed", reason="not_found")
    return await _call(handle, lambda r: PollMsg(ref, r), timeout)


async def notify(name: Any, event: Any, *, system: AgentSystem | None = None) -> None:
    """Deliver `event` to the agent's `handle_event` (a cast: never raises for a missing
    agent, never waits). The awaitable twin of `gen_agent.notify` (contract §2.8; docs: the
    client API reference)."""
    _cast(system, name, NotifyMsg(event))


async def notify_ack(name: Any, event: Any, timeout: float | None = None, *,
                     system: AgentSystem | None = None) -> None:
    """Like `notify`, but await admission. The awaitable twin of `gen_agent.notify_ack`.

    Raises:
        TurnError: ("overloaded", info) or "draining".
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the call waited.
        CallTimeout: no answer within `timeout` seconds.

    Mirrors: `GenAgent.notify_ack/3` (contract §2.9; docs: the client API reference).
    """
    handle = _lookup(system, name)
    _unwrap(await _call(handle, lambda r: NotifyMsg(event, r), timeout))


async def interrupt(name: Any, *, system: AgentSystem | None = None) -> None:
    """Interrupt the active turn, if any (a cast). Mirrors `GenAgent.interrupt/1` (§2.10)."""
    _cast(system, name, InterruptMsg())


async def halt(name: Any, *, system: AgentSystem | None = None) -> None:
    """Stop dispatching after the current turn (a cast). Mirrors `GenAgent.halt/1` (§2.13)."""
    _cast(system, name, HaltMsg())


async def resume(name: Any, *, system: AgentSystem | None = None) -> None:
    """Resume dispatching after `halt` (a cast). Mirrors `GenAgent.resume/1` (§2.14)."""
    _cast(system, name, ResumeMsg())


async def status(name: Any, timeout: float | None = None, *,
                 system: AgentSystem | None = None) -> Status:
    """The agent's `Status` record. The awaitable twin of `gen_agent.status`.

    Raises:
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped while the call waited.
        CallTimeout: no answer within `timeout` seconds.

    Mirrors: `GenAgent.status/2` (contract §2.16; docs: the client API reference).
    """
    return await _call(_lookup(system, name), StatusMsg, timeout)


async def drain(name: Any, timeout: float | None = None, *,
                system: AgentSystem | None = None) -> None:
    """Stop admitting work, finish what is queued, then stop normally; await the stop.
    The awaitable twin of `gen_agent.drain`.

    Raises:
        AgentNotFound: no agent has that name.
        AgentDown: the agent stopped before accepting the drain.
        CallTimeout: the drain did not finish within `timeout` seconds (for the whole drain).
        RequestError: ("agent_down", reason) if the agent ended otherwise than normally.

    Mirrors: `GenAgent.drain/2` (contract §2.18; docs: the client API reference).
    """
    handle = _lookup(system, name)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    outcome = await _call(handle, DrainMsg, timeout)
    if outcome[0] != "ok":
        raise RequestError(outcome[1])
    remaining = None if deadline is None else max(0.0, deadline - loop.time())
    if not await _exited(handle, remaining):
        raise CallTimeout(timeout)
    if handle.exit_reason != "normal":
        raise RequestError(("agent_down", handle.exit_reason))


async def stop(name: Any, *, system: AgentSystem | None = None) -> None:
    """Stop the agent gracefully within its `shutdown_ms`, then kill it; awaits the stop.
    The awaitable twin of `gen_agent.stop`.

    Raises:
        AgentNotFound: no such agent.
        RequestError: "self_stop" when awaited from the agent's own threads.

    Mirrors: `GenAgent.stop/2` (contract §2.19; docs: the client API reference).
    """
    sys_ = _system(system)
    handle = sys_.lookup(name)
    sys_._check_stop(handle)
    if handle.closed:
        return
    handle.send(StopMsg("shutdown", handle.reply()))
    window = handle.shutdown_ms
    if not await _exited(handle, None if window is None else window / 1000):
        sys_._kill(handle)


async def start_agent(module: type, *, name: Any, backend: Any,
                      system: AgentSystem | None = None, **opts: Any) -> AgentRef:
    """Start an agent and await its `AgentRef` once `init_agent` and the backend's
    `start_session` finished. Options and errors as `gen_agent.start_agent` (they run in the
    new agent's thread; this coroutine only awaits them).

    Raises:
        AgentStartError: the start failed (reason as `gen_agent.start_agent`).
        AlreadyStarted: a live agent has that name.
        ValueError: an invalid `shutdown_ms`.

    Mirrors: `GenAgent.start_agent/2` (contract §2.2; docs: the client API reference).
    """
    sys_ = _system(system)
    handle, init_reply = sys_._launch(module, name=name, backend=backend, **opts)
    await await_reply(init_reply, None)
    return AgentRef(handle)


async def _exited(handle: AgentHandle, timeout: float | None) -> bool:
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
        TypeError: `prompts` is a str, or holds a non-str. TurnError: the first failed task.
        CallTimeout: the batch did not finish within `timeout`.

    Mirrors: `Pool.map`.
    """
    if isinstance(prompts, str):
        raise TypeError("map: prompts must be an iterable of str, not a str "
                        "(wrap a single prompt in a list)")
    batch = [submit(pool, prompt, **task_opts) for prompt in prompts]
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.gather(*batch, return_exceptions=return_exceptions)
    except TimeoutError:
        raise CallTimeout(timeout) from None


# ---------------------------------------------------------------------- streaming
def stream(name: Any, prompt: str, *, interrupt_on_exit: bool = True,
           max_buffered_events: int = 256, timeout: float | None = None,
           system: AgentSystem | None = None) -> AsyncTurnStream:
    """Run `prompt` as a turn and iterate its events as they arrive, then its response.

        async with aio.stream("coder", "Fix the test.") as turn:
            async for event in turn:
                ...
            response = turn.response      # or TurnError raised at the end of iteration

    Args and semantics as `gen_agent.stream` (it is the same stream, read from a loop).

    Mirrors: nothing in the original; a `tell_with_completion` with `stream_to` (origin
    "tell") and a monitor underneath (contract §2.6, §4.18; docs: the client API reference).
    """
    return AsyncTurnStream(name, prompt, interrupt_on_exit=interrupt_on_exit,
                           max_buffered_events=max_buffered_events, timeout=timeout,
                           system=system)


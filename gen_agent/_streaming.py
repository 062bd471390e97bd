"""Streaming a turn: iterate its `Event`s as they arrive, then read its `Response`.

    with gen_agent.stream("coder", "Fix the failing test.") as turn:
        for event in turn:                    # Event records, in order
            if event.kind == "text":
                print(event.data["text"], end="")
    print(turn.response.usage)                # or TurnError raised when the turn failed

`async with aio.stream(...) as turn: async for event in turn:` is the same from an event loop.

Underneath it is `tell_with_completion(name, prompt, recipient, stream_to=recipient,
monitor=True)` (origin "tell", docs/pages/contract.md#s2-6 and #s4-18; docs: the client API
reference), not a new path through the actor: the relay delivers each event after
`handle_stream_event`, the completion arrives after the decision callback, and an agent that ends
before completing the request ends the stream as a waiting ask would end (`AgentDown(reason)` for a
crash or a kill, `TurnError(("agent_terminated", reason))` for an orderly stop) instead of leaving
the reader waiting.

Bounded. The contract's relay has no backpressure (§4.18); a stream adds it without ever
blocking the agent: when `max_buffered_events` events are waiting for the reader, the agent
stops draining that turn's event channel, so the *turn task* waits (its channel holds at most
`max_event_bytes_per_turn` bytes) while the agent goes on serving status calls, notifications
and interrupts. Reading resumes the relay once the buffer is half empty. Leaving the block
before the end interrupts the turn (`interrupt_on_exit=True`, the default); with False the
turn runs to its end unobserved (its outcome still reaches the poll cache).

Mirrors: nothing in the Elixir original (a BEAM caller `receive`s the relayed messages).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from gen_agent._deprecate import system_renamed
from gen_agent._errors import AgentDown, CallTimeout, RequestError, TurnError
from gen_agent._event import Event
from gen_agent._request_options import RequestOptions, check_options
from gen_agent._request_ref import RequestRef
from gen_agent._response import Response
from gen_agent._runtime import (
    AgentHandle,
    DeferredReply,
    InterruptRequestMsg,
    Watch,
    call_in_loop,
    calls,
)
from gen_agent._timers import wait_s

__all__ = ["AsyncAttachedTurn", "AsyncTurnStream", "AttachedTurn", "TurnStream", "attach",
           "stream"]

_DONE = object()


class _Buffer:
    """The recipient of one streamed request: relayed events, then its completion or, when the
    agent ended first, its `Down` record (the request is monitored). Fed from the agent
    thread and exit listeners (never blocking them), read by one consumer thread or event
    loop. Thread-safe."""

    __slots__ = ("_cond", "_items", "_loop", "_loop_ready", "_max", "_resume", "closed")

    def __init__(self, max_events: int, loop: asyncio.AbstractEventLoop | None) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._max = max_events
        self._resume: Callable[[], None] | None = None
        self._loop = loop
        self._loop_ready: asyncio.Event | None = asyncio.Event() if loop is not None else None
        self.closed = False

    # --- producer side (agent thread, exit listeners) ----------------------------------
    def put_nowait(self, message: Any) -> None:
        """Take a relayed event or the completion; never blocks, never drops."""
        with self._cond:
            if self.closed:
                return
            self._items.append(message)
            self._cond.notify()
        self._signal_loop()

    def lagging(self) -> bool:
        """For a replay relay: True when the reader has fallen this far behind (twice its
        bound) that the agent should detach it until it catches up."""
        return len(self._items) >= 2 * self._max

    def pause_relay(self, resume: Callable[[], None]) -> bool:
        """Called by the agent after each relayed event: True asks it to stop draining this
        turn's channel until `resume()` is called (the reader made room)."""
        with self._cond:
            if self.closed or len(self._items) < self._max:
                return False
            self._resume = resume
            return True

    def _signal_loop(self) -> None:
        if self._loop is not None and self._loop_ready is not None:
            call_in_loop(self._loop, self._loop_ready.set)

    # --- consumer side -----------------------------------------------------------------
    def take_nowait(self) -> Any:
        """The next message, or `_DONE` if none is waiting."""
        resume = None
        with self._cond:
            if not self._items:
                return _DONE
            message = self._items.popleft()
            if self._resume is not None and len(self._items) <= self._max // 2:
                resume, self._resume = self._resume, None
        if resume is not None:
            resume()
        return message

    def take(self, timeout: float | None) -> Any:
        """Block until a message arrives (`_DONE` after `timeout` seconds)."""
        with self._cond:
            if not self._items and not self._cond.wait_for(lambda: self._items,
                                                           wait_s(timeout)):
                return _DONE
        return self.take_nowait()

    async def take_async(self) -> Any:
        ready = self._loop_ready
        assert ready is not None
        while True:
            message = self.take_nowait()
            if message is not _DONE:
                return message
            ready.clear()
            message = self.take_nowait()  # a put between the two checks set `ready` again
            if message is not _DONE:
                return message
            await ready.wait()

    def close(self) -> None:
        """The reader left: stop holding the relay back, discard what is left."""
        with self._cond:
            self.closed = True
            self._items.clear()
            resume, self._resume = self._resume, None
        if resume is not None:
            resume()


class _TurnStreamBase:
    """What the threaded and the async stream share: starting the request, reading its
    messages, ending it."""

    def __init__(self, name: Any, prompt: str, *, interrupt_on_exit: bool = True,
                 max_buffered_events: int = 256, timeout: float | None = None,
                 agent_system: Any = None, options: RequestOptions | None = None,
                 output: Any = None) -> None:
        calls.check_prompt(prompt, "stream")
        check_options(options, "stream")
        if type(max_buffered_events) is not int or max_buffered_events < 1:
            raise ValueError("stream: max_buffered_events must be a positive int, "
                             f"got {max_buffered_events!r}")
        self.name = name
        self.prompt = prompt
        self.interrupt_on_exit = interrupt_on_exit
        self.max_buffered_events = max_buffered_events
        self.timeout = timeout
        self.options, self.output = options, output  # the request's RequestOptions, type
        self._system = agent_system
        self._handle: AgentHandle | None = None
        self._buffer: _Buffer | None = None
        self._outcome: tuple[str, Any] | None = None
        self._deadline: float | None = None
        self.ref: RequestRef | None = None
        self.seq = 0  # the sequence number of the last event read (events count from 1)

    def _call(self, handle: AgentHandle, buffer: _Buffer) -> calls.Call:
        return calls.tell(handle, self.prompt, self.timeout, recipient=buffer, completion=True,
                          stream_to=buffer, monitor=True, options=self.options,
                          output=self.output)

    def _started(self, handle: AgentHandle, buffer: _Buffer, ref: RequestRef) -> None:
        self._handle, self._buffer, self.ref = handle, buffer, ref
        if self.timeout is not None:
            self._deadline = time.monotonic() + self.timeout

    def _remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def _read(self, message: Any) -> Event | None:
        """An event to yield, or None once the stream has ended (outcome recorded)."""
        if message is _DONE:
            raise CallTimeout(self.timeout)
        if message[1] == "event":
            self.seq += 1  # the relay sends every event of the turn, in order
            return message[4]
        if message[1] == "completion":
            self._outcome = message[4]
        else:  # Down: the agent ended before completing the request
            self._outcome = ("down", message[4])
        self._finish()
        return None

    def _finish(self) -> None:
        if self._buffer is not None:
            self._buffer.close()
        watch = getattr(self, "_watch", None)
        if watch is not None:
            watch.claim()  # stop listening for the agent's end

    def _raise_outcome(self) -> Response:
        outcome = self._outcome
        assert outcome is not None
        if outcome[0] == "ok":
            return outcome[1]
        # What a waiting ask would get (docs/pages/contract.md#s4-19; docs: Errors).
        if outcome[0] == "down":
            kind, exit_reason = outcome[1]
            if kind == "agent_terminated":
                raise TurnError(outcome[1])
            raise AgentDown(exit_reason)
        raise TurnError(outcome[1])

    def _leave(self) -> None:
        handle, done = self._handle, self._outcome is not None
        self._finish()
        if not done and handle is not None and self.interrupt_on_exit and self.ref is not None:
            handle.send(InterruptRequestMsg(self.ref, DeferredReply()))

    @property
    def done(self) -> bool:
        """True once the turn's outcome (or the agent's end) has been read."""
        return self._outcome is not None


class TurnStream(_TurnStreamBase):
    """A streamed turn read from a thread: a context manager and an iterator of `Event`s.

    Iteration ends at the turn's completion; then `response` holds the `Response`, or the
    iteration raises `TurnError(reason)` (a failed turn, e.g. "interrupted" or a backend
    error), or `AgentDown(reason)` (the agent ended first). `CallTimeout` when `timeout`
    seconds (for the whole turn) pass first. `ref` is the request's `RequestRef`.
    """

    def __enter__(self) -> TurnStream:
        handle = calls.lookup(self._system, self.name)
        buffer = _Buffer(self.max_buffered_events, None)
        ref = calls.run(handle, self._call(handle, buffer), self.timeout)
        self._started(handle, buffer, ref)
        return self

    def __exit__(self, *exc: object) -> None:
        self._leave()

    def __iter__(self) -> Iterator[Event]:
        buffer = self._buffer
        if buffer is None:
            raise RuntimeError("stream: use it in a `with` block")
        while self._outcome is None:
            event = self._read(buffer.take(self._remaining()))
            if event is not None:
                yield event
        self._raise_outcome()

    @property
    def response(self) -> Response:
        """The turn's `Response`, reading (and discarding) any events not yet iterated.

        Raises:
            TurnError: the turn failed.
            AgentDown: the agent ended before completing the request.
            CallTimeout: the stream's `timeout` passed.
        """
        if self._outcome is None:
            for _event in self:
                pass
        return self._raise_outcome()


class AsyncTurnStream(_TurnStreamBase):
    """A streamed turn read from an event loop: `async with` and `async for` (see
    `TurnStream`; same outcomes, awaited without blocking the loop)."""

    async def __aenter__(self) -> AsyncTurnStream:
        handle = calls.lookup(self._system, self.name)
        buffer = _Buffer(self.max_buffered_events, asyncio.get_running_loop())
        ref = await calls.run_async(handle, self._call(handle, buffer), self.timeout)
        self._started(handle, buffer, ref)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._leave()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        buffer = self._buffer
        if buffer is None:
            raise RuntimeError("aio.stream: use it in an `async with` block")
        while self._outcome is None:
            try:
                async with asyncio.timeout(self._remaining()):
                    message = await buffer.take_async()
            except TimeoutError:
                message = _DONE
            event = self._read(message)
            if event is not None:
                yield event
        self._raise_outcome()

    async def response(self) -> Response:
        """Await the turn's `Response`, discarding events not yet iterated.

        Raises:
            TurnError: the turn failed.
            AgentDown: the agent ended before completing the request.
            CallTimeout: the stream's `timeout` passed.
        """
        if self._outcome is None:
            async for _event in self:
                pass
        return self._raise_outcome()


def _ignore(_message: Any) -> None:
    return None


class _AttachedBase(_TurnStreamBase):
    """What the threaded and async attached readers share (see `attach`)."""

    def __init__(self, name: Any, ref: RequestRef, after: int, *, timeout: float | None,
                 max_buffered_events: int, agent_system: Any) -> None:
        self.name = name
        self.prompt = ""
        self.interrupt_on_exit = False  # leaving an attached reader never interrupts
        self.max_buffered_events = max_buffered_events
        self.timeout = timeout
        self._system = agent_system
        self._handle = None
        self._buffer = None
        self._outcome = None
        self._deadline = None
        self._watch: Watch | None = None
        self.ref = ref
        self.seq = after
        self.after = after
        self.missed = 0  # events after `after` the replay buffer no longer held
        calls.attach(ref, after, _ignore)  # the argument checks, before anything is sent

    def _prepare(self, loop: Any) -> tuple[AgentHandle, _Buffer, calls.Call]:
        handle = calls.lookup(self._system, self.name)
        buffer = _Buffer(self.max_buffered_events, loop)
        return handle, buffer, calls.attach(self.ref, self.after, buffer)  # type: ignore[arg-type]

    def _attached(self, handle: AgentHandle, buffer: _Buffer, _missed: int) -> None:
        self._started(handle, buffer, self.ref)  # type: ignore[arg-type]
        self._watch = Watch(buffer, handle.name, self.ref)  # type: ignore[arg-type]
        self._watch.attach(handle)  # the agent's end ends the reader

    def _read(self, message: Any) -> Event | None:
        if message is not _DONE:
            kind = message[1]
            if kind == "replay":
                if message[4] <= self.seq:
                    return None  # already read (a re-attach overlaps the first relay)
                self.seq = message[4]
                return message[5]  # type: ignore[no-any-return]
            if kind == "missed":
                self.missed += message[4]
                return None
            if kind == "lagged":  # caught up with what was relayed: attach again from here
                self._reattach()
                return None
            if kind == "lost":  # the turn left the replay buffer before the reader rejoined
                self._outcome = ("lost", message[4])
                self._finish()
                return None
        return super()._read(message)

    def _reattach(self) -> None:
        handle, buffer, ref = self._handle, self._buffer, self.ref
        if handle is None or buffer is None:
            return
        reply = DeferredReply()

        def answered(done: DeferredReply) -> None:
            try:
                outcome = done.wait(0)
            except Exception:  # noqa: BLE001 - the agent ended: its Down record ends the reader
                return
            if outcome[0] != "ok":
                buffer.put_nowait(("gen_agent", "lost", self.name, ref, outcome[1]))

        reply.add_done_callback(answered)
        # not sent when the agent has ended: then its Down record ends the reader
        handle.send(calls.attach(ref, self.seq, buffer).make(reply))  # type: ignore[arg-type]

    def _raise_outcome(self) -> Response:
        outcome = self._outcome
        if outcome is not None and outcome[0] == "lost":
            raise RequestError(outcome[1])
        return super()._raise_outcome()


class AttachedTurn(_AttachedBase, TurnStream):
    """A reader attached to a running or just-finished turn (`gen_agent.attach`): iterate it
    for the events after `after`, then the live ones; then `response` (or the turn's error,
    as for `TurnStream`). `seq` is the last event's sequence number, `missed` the events
    after `after` the replay buffer had already dropped. Leaving the block detaches the
    reader; the turn goes on.

    A reader more than twice `max_buffered_events` behind is detached by the agent and
    attaches again from its last event when it has read its buffer, so a slow reader holds
    bounded memory and still sees every event (unless the turn's byte bound dropped some:
    `missed`; or the turn left the replay buffer meanwhile: `RequestError("not_found")`)."""

    def __enter__(self) -> AttachedTurn:
        handle, buffer, call = self._prepare(None)
        self._attached(handle, buffer, calls.run(handle, call, self.timeout))
        return self


class AsyncAttachedTurn(_AttachedBase, AsyncTurnStream):
    """`AttachedTurn` read from an event loop (`async with` / `async for`)."""

    async def __aenter__(self) -> AsyncAttachedTurn:
        handle, buffer, call = self._prepare(asyncio.get_running_loop())
        self._attached(handle, buffer, await calls.run_async(handle, call, self.timeout))
        return self


def attach(name: Any, ref: RequestRef, *, after: int = 0, timeout: float | None = None,
           max_buffered_events: int = 256, agent_system: Any = None) -> AttachedTurn:
    """Rejoin the turn of request `ref` of agent `name`: `with attach(...) as turn:` iterates
    its events with a sequence number above `after` (those already produced first, then the
    live ones), then `turn.response`. Several readers may attach to one turn.

    The agent must keep a replay buffer (start option `replay_turns=n`, n >= 1; an
    `AgentHost` sets it): the running turn and the last `n` finished ones can be attached
    to, until the agent hibernates or stops. A stream's `turn.seq` is the `after` to rejoin
    from; `turn.missed` counts events the buffer's byte bound (`max_event_bytes_per_turn`)
    had already dropped.

    Raises:
        TypeError: `ref` is not a `RequestRef`. ValueError: `after` is not an int >= 0.
        AgentNotFound: (on entering) no agent has that name.
        RequestError: (on entering) "not_found" (no such running or kept turn) or
            "replay_off" (the agent keeps no replay buffer).
        TurnError, AgentDown, CallTimeout: while iterating, as for `stream`.

    Mirrors: nothing in the original.
    """
    return AttachedTurn(name, ref, after, timeout=timeout,
                        max_buffered_events=max_buffered_events, agent_system=agent_system)


@system_renamed
def stream(name: Any, prompt: str, *, interrupt_on_exit: bool = True,
           max_buffered_events: int = 256, timeout: float | None = None,
           agent_system: Any = None, options: RequestOptions | None = None) -> TurnStream:
    """Run `prompt` as a turn of agent `name` and stream it: use as `with stream(...) as turn:`
    and iterate `turn` for its `Event`s, then read `turn.response`.

    Args:
        name: the agent's name. prompt: a `str`.
        interrupt_on_exit: interrupt the turn if the block is left before its end (default).
        max_buffered_events: events waiting for the reader before the agent holds the turn's
            relay back (the turn task then waits; the agent does not). Default 256.
        timeout: seconds for the whole turn (None = forever): `CallTimeout` when it passes.
        agent_system: the `AgentSystem` to look the name up in (default: the current one;
            `system=` is its deprecated spelling).
        options: the request's `RequestOptions` (e.g. `busy=`), as for `tell`.

    Returns:
        A `TurnStream` (a context manager).

    Raises:
        TypeError: `prompt` is not a str.
        ValueError: `max_buffered_events` is not a positive int.
        AgentNotFound: (on entering) no agent has that name.
        TurnError: on entering, ("overloaded", info), "draining" or "busy"; while iterating, the
            turn failed (e.g. "interrupted", a backend reason).
        AgentDown: the agent ended before completing the request.
        CallTimeout: `timeout` seconds passed before the turn ended.

    Mirrors: nothing in the original; `tell_with_completion` with `stream_to` underneath
    (docs/pages/contract.md#s2-6, #s4-18; docs: the client API reference).
    """
    return TurnStream(name, prompt, interrupt_on_exit=interrupt_on_exit,
                      max_buffered_events=max_buffered_events, timeout=timeout,
                      agent_system=agent_system, options=options)

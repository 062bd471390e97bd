"""`AsyncHost`: an `AgentHost`'s calls as coroutines (`host.aio`), for asyncio callers.

The awaits of `gen_agent.aio` on the host's activations: a live key's call takes no thread;
an activation (an agent's start) runs on a worker thread. The host itself is in
`gen_agent/_host.py`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gen_agent._errors import AgentDown
from gen_agent._request_options import RequestOptions, check_options
from gen_agent._request_ref import RequestRef
from gen_agent._response import Response
from gen_agent._runtime import NotifyMsg, calls
from gen_agent._status import PollResult, Status
from gen_agent._streaming import AsyncAttachedTurn, AsyncTurnStream
from gen_agent.store import SessionRecord

if TYPE_CHECKING:
    from gen_agent._host import AgentHost, _Slot


class _AsyncHostTurnStream(AsyncTurnStream):
    def __init__(self, host: AgentHost, key: str, prompt: str, **kwargs: Any) -> None:
        super().__init__(host._agent_name(key), prompt, agent_system=host.system, **kwargs)
        host._check_key(key)
        self._host, self._key = host, key

    async def __aenter__(self) -> _AsyncHostTurnStream:
        slot = await self._host.aio._acquire(self._key, self.timeout)
        try:
            from gen_agent._streaming import _Buffer

            handle = slot.handle
            buffer = _Buffer(self.max_buffered_events, asyncio.get_running_loop())
            ref = await calls.run_async(handle, self._call(handle, buffer), self.timeout)
            self._started(handle, buffer, ref)
        finally:
            self._host._release(slot)
        return self


class AsyncHost:
    """The host's calls as coroutines (`host.aio.ask(key, ...)`): the awaits of
    `gen_agent.aio` on the same activation. An activation (a start) runs on a worker thread;
    a live key's call takes no thread."""

    def __init__(self, host: AgentHost) -> None:
        self._host = host

    async def _acquire(self, key: str, timeout: float | None) -> _Slot:
        host = self._host
        host._check_key(key)
        with host._lock:
            slot = host._live.get(key)
            if slot is not None and not slot.deactivating and not slot.handle.closed:
                slot.busy += 1
                host._live.move_to_end(key)
                return slot
        return await asyncio.to_thread(host._acquire, key, timeout)

    async def ask(self, key: str, prompt: str, timeout: float | None = None, *,
                  options: RequestOptions | None = None, cancel_on_timeout: bool = False,
                  output: Any = None) -> Response:
        """`AgentHost.ask`, awaited."""
        calls.check_prompt(prompt, "ask")
        calls.check_timeout(timeout, "ask")
        check_options(options, "ask", output)
        slot = await self._acquire(key, timeout)
        try:
            handle = slot.handle
            return await calls.run_async(handle, calls.ask(  # type: ignore[no-any-return]
                handle, prompt, timeout, options, cancel_on_timeout, output), timeout)
        finally:
            self._host._release(slot)

    async def tell(self, key: str, prompt: str, timeout: float | None = None, *,
                   options: RequestOptions | None = None) -> RequestRef:
        """`AgentHost.tell`, awaited."""
        calls.check_prompt(prompt, "tell")
        calls.check_timeout(timeout, "tell")
        check_options(options, "tell", None)
        slot = await self._acquire(key, timeout)
        try:
            ref: RequestRef = await calls.run_async(
                slot.handle, calls.tell(slot.handle, prompt, timeout, options=options), timeout)
            self._host._unread(slot, ref)
            return ref
        finally:
            self._host._release(slot)

    async def tell_with_completion(self, key: str, prompt: str, recipient: Any, *,
                                   on_halt: str = "queue", stream_to: Any = None,
                                   timeout: float | None = None,
                                   options: RequestOptions | None = None,
                                   monitor: bool = False, output: Any = None) -> RequestRef:
        """`AgentHost.tell_with_completion`, awaited."""
        calls.check_prompt(prompt, "tell_with_completion")
        calls.check_recipient(recipient, "tell_with_completion")
        slot = await self._acquire(key, timeout)
        try:
            handle = slot.handle
            call = calls.tell(handle, prompt, timeout, recipient=recipient, completion=True,
                              on_halt=on_halt, stream_to=stream_to, options=options,
                              monitor=monitor, output=output)
            return await calls.run_async(handle, call, timeout)  # type: ignore[no-any-return]
        finally:
            self._host._release(slot)

    async def poll(self, key: str, ref: RequestRef, timeout: float | None = None) -> PollResult:
        """`AgentHost.poll`, awaited."""
        host = self._host
        handle = host._live_handle(key)
        if handle is None:
            return PollResult(status="failed", reason="not_found")
        result: PollResult = await calls.run_async(handle, calls.poll(ref), timeout)
        if result.status != "pending":
            with host._lock:
                slot = host._live.get(key)
                if slot is not None:
                    slot.unread.pop(ref, None)
        return result

    async def notify(self, key: str, event: Any) -> None:
        """`AgentHost.notify`, awaited."""
        try:
            slot = await self._acquire(key, None)
        except Exception:  # noqa: BLE001 - a cast never fails
            return
        try:
            slot.handle.send(NotifyMsg(event))
        finally:
            self._host._release(slot)

    async def interrupt(self, key: str) -> None:
        """`AgentHost.interrupt`."""
        self._host.interrupt(key)

    async def halt(self, key: str) -> None:
        """`AgentHost.halt`."""
        self._host.halt(key)

    async def resume(self, key: str) -> None:
        """`AgentHost.resume`."""
        self._host.resume(key)

    async def status(self, key: str, timeout: float | None = None
                     ) -> Status | SessionRecord | None:
        """`AgentHost.status`, awaited."""
        host = self._host
        host._check_key(key)
        handle = host._live_handle(key)
        if handle is not None:
            try:
                return await calls.run_async(handle, calls.STATUS,  # type: ignore[no-any-return]
                                             timeout)
            except AgentDown:
                pass
        return await asyncio.to_thread(host.store.load, key)  # type: ignore[no-any-return]

    def stream(self, key: str, prompt: str, *, interrupt_on_exit: bool = True,
               max_buffered_events: int = 256, timeout: float | None = None,
               options: RequestOptions | None = None, output: Any = None) -> AsyncTurnStream:
        """`AgentHost.stream`, for `async with` / `async for`."""
        return _AsyncHostTurnStream(self._host, key, prompt,
                                    interrupt_on_exit=interrupt_on_exit,
                                    max_buffered_events=max_buffered_events, timeout=timeout,
                                    options=options, output=output)

    async def interrupt_request(self, key: str, ref: RequestRef,
                                timeout: float | None = None) -> str:
        """`AgentHost.interrupt_request`, awaited."""
        handle = self._host._live_handle(key)
        if handle is None:
            return "not_found"
        return await calls.run_async(  # type: ignore[no-any-return]
            handle, calls.interrupt_request(ref), timeout)

    async def cancel_request(self, key: str, ref: RequestRef,
                             timeout: float | None = None) -> str:
        """`AgentHost.cancel_request`, awaited."""
        handle = self._host._live_handle(key)
        if handle is None:
            return "not_found"
        return await calls.run_async(  # type: ignore[no-any-return]
            handle, calls.cancel_request(ref), timeout)

    def attach(self, key: str, ref: RequestRef, *, after: int = 0,
               timeout: float | None = None, max_buffered_events: int = 256
               ) -> AsyncAttachedTurn:
        """`AgentHost.attach`, for `async with` / `async for`."""
        host = self._host
        host._check_key(key)
        return AsyncAttachedTurn(host._agent_name(key), ref, after, timeout=timeout,
                                 max_buffered_events=max_buffered_events,
                                 agent_system=host.system)

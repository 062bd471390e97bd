"""Tests for `gen_agent.aio`: the client API as coroutines, on the mock backend."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from _agents import WAIT_S, CallLog, Probe, start

import gen_agent
from gen_agent import aio
from gen_agent._errors import AgentDown, AgentNotFound, CallTimeout, RequestError, TurnError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend


def run(coro: Any) -> Any:
    """Run `coro` on a fresh loop, bounded by WAIT_S * 4 seconds."""
    async def bounded() -> Any:
        async with asyncio.timeout(WAIT_S * 4):
            return await coro
    return asyncio.run(bounded())


def test_ask_returns_the_response_and_the_agent_state_moves_on() -> None:
    log = CallLog()
    start(scripts=[mock.text_turn("Hi there.")], log=log)
    response = run(aio.ask("a", "Hello"))
    assert response.text == "Hi there."
    assert response.prompt == "Hello"
    assert log.names().count("handle_response") == 1


def test_ask_errors_are_the_threaded_errors() -> None:
    start(scripts=[mock.error_turn("boom")])
    with pytest.raises(TurnError) as info:
        run(aio.ask("a", "x"))
    assert info.value.reason == "boom"
    with pytest.raises(AgentNotFound):
        run(aio.ask("nobody", "x"))
    with pytest.raises(TypeError, match="ask: prompt must be a str"):
        run(aio.ask("a", b"bytes"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ask: timeout must be seconds"):
        run(aio.ask("a", "x", timeout="5"))  # type: ignore[arg-type]


def test_a_thousand_concurrent_asks_over_fifty_agents_keep_the_loop_responsive() -> None:
    agents, per_agent = 50, 20
    gates = [mock.gate(mock.text_turn("first"), timeout=WAIT_S * 4) for _ in range(agents)]
    for i in range(agents):
        scripts = [gates[i], *[mock.text_turn(f"{i}-{n}") for n in range(1, per_agent)]]
        start(name=f"w{i}", scripts=scripts)

    async def main() -> tuple[list[Any], int]:
        ticks = 0
        pending = 0

        async def ticker() -> None:
            nonlocal ticks
            # the loop must keep turning while 1,000 asks are pending: each tick is one
            # turn of the loop; the turns only go on after the ticker released them
            while ticks < 20:
                await asyncio.sleep(0.001)
                if pending == agents * per_agent:
                    ticks += 1
            for g in gates:
                g.release()

        async def one(i: int, n: int) -> Any:
            nonlocal pending
            coro = aio.ask(f"w{i}", f"p{n}")
            task = asyncio.ensure_future(coro)
            pending += 1
            return await task

        tick = asyncio.create_task(ticker())
        results = await asyncio.gather(*(one(i, n) for n in range(per_agent)
                                         for i in range(agents)))
        await tick
        return results, ticks

    results, ticks = run(main())
    assert ticks == 20
    assert len(results) == agents * per_agent
    by_agent: dict[str, list[str]] = {}
    for response in results:
        agent = response.text.split("-")[0] if "-" in response.text else None
        by_agent.setdefault(str(agent), []).append(response.text)
    assert sorted(r.text for r in results if r.text == "first") == ["first"] * agents
    assert sum(1 for r in results if r.text != "first") == agents * (per_agent - 1)


def test_asks_from_several_loops_in_several_threads_at_once() -> None:
    start(scripts=[mock.text_turn(f"r{n}") for n in range(40)])
    results: list[list[str]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        async def main() -> None:
            for _ in range(10):
                results[k].append((await aio.ask("a", f"t{k}")).text)
        try:
            run(main())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S * 4)
    assert not errors
    texts = sorted(text for part in results for text in part)
    assert texts == sorted(f"r{n}" for n in range(40))


# ---------------------------------------------------------------------- cancellation
def _busy_agent(extra: int = 1) -> tuple[Any, CallLog]:
    """An agent whose first turn is held by a gate, with `extra` text turns after it."""
    log = CallLog()
    held = mock.gate(mock.text_turn("held"), timeout=WAIT_S)
    start(scripts=[held, *[mock.text_turn(f"next{n}") for n in range(extra)]], log=log)
    gen_agent.tell("a", "first")
    assert held.wait_blocked(WAIT_S)
    return held, log


def test_a_timed_out_queued_ask_stays_queued_by_default() -> None:
    held, log = _busy_agent()
    with pytest.raises(CallTimeout):
        run(aio.ask("a", "queued", timeout=0.05))
    held.release()
    log.wait_for(("handle_response", "queued"))
    assert MockBackend.history("a") == ["first", "queued"]


def test_a_timed_out_queued_ask_is_removed_with_cancel_on_timeout() -> None:
    held, log = _busy_agent()
    with pytest.raises(CallTimeout):
        run(aio.ask("a", "queued", timeout=0.05, cancel_on_timeout=True))
    held.release()
    log.wait_for(("handle_response", "first"))
    assert gen_agent.ask("a", "after", timeout=WAIT_S).text == "next0"
    assert MockBackend.history("a") == ["first", "after"]


def test_a_cancelled_running_ask_keeps_running_by_default() -> None:
    log = CallLog()
    held = mock.gate(mock.text_turn("done"), timeout=WAIT_S)
    start(scripts=[held], log=log)

    async def main() -> None:
        task = asyncio.create_task(aio.ask("a", "running"))
        await asyncio.to_thread(held.wait_blocked, WAIT_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    held.release()
    log.wait_for(("handle_response", "running"))
    assert log.of("handle_error") == []


def test_a_running_ask_is_interrupted_by_asyncio_timeout_with_cancel_on_timeout() -> None:
    log = CallLog()
    held = mock.gate(mock.text_turn("never"), timeout=WAIT_S)
    start(scripts=[held, mock.text_turn("after")], log=log)

    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await aio.ask("a", "running", cancel_on_timeout=True)

    run(main())
    log.wait_for(("handle_error", "interrupted"))
    assert gen_agent.ask("a", "next", timeout=WAIT_S).text == "after"


def test_awaiting_callers_of_a_killed_agent_get_agent_down() -> None:
    held = mock.gate(mock.text_turn("never"), timeout=WAIT_S * 2)
    start(scripts=[held], shutdown_ms=0)

    async def main() -> list[BaseException | Any]:
        tasks = [asyncio.create_task(aio.ask("a", f"p{n}")) for n in range(5)]
        await asyncio.to_thread(held.wait_blocked, WAIT_S)
        await asyncio.to_thread(gen_agent.stop, "a")
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = run(main())
    held.release()
    # the agent could not stop within shutdown_ms=0 (its turn is blocked): killed, and
    # every awaiting caller, running or queued, is told so
    assert [(type(o), o.reason) for o in outcomes] == [(AgentDown, "killed")] * 5


# ---------------------------------------------------------------------- the other calls
def test_tell_poll_status_notify_ack_and_drain() -> None:
    log = CallLog()
    start(scripts=[mock.text_turn("told")], log=log)

    async def main() -> None:
        ref = await aio.tell("a", "t1")
        while (result := await aio.poll("a", ref)).status == "pending":
            await asyncio.sleep(0.001)
        assert result.status == "completed"
        assert result.response.text == "told"
        assert (await aio.status("a")).state == "idle"
        await aio.notify_ack("a", {"n": 1})
        await aio.notify("a", {"n": 2})
        await aio.interrupt("a")
        await aio.halt("a")
        await aio.resume("a")
        await aio.drain("a", timeout=WAIT_S)

    run(main())
    assert log.of("handle_event") == [("handle_event", {"n": 1}), ("handle_event", {"n": 2})]
    assert gen_agent.whereis("a") is None
    assert run(aio.poll("a", gen_agent.RequestRef.new())).reason == "not_found"


def test_tell_with_completion_into_a_loop_queue() -> None:
    start(scripts=[mock.text_turn("done")])

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Any] = asyncio.Queue()
        ref = await aio.tell_with_completion(
            "a", "go", lambda m: loop.call_soon_threadsafe(inbox.put_nowait, m))
        message = await inbox.get()
        return ref, message

    ref, message = run(main())
    assert message[:4] == ("gen_agent", "completion", "a", ref)
    assert message[4][0] == "ok"
    assert message[4][1].text == "done"


def test_start_and_stop_agents_from_a_loop() -> None:
    async def main() -> Any:
        ref = await aio.start_agent(Probe, name="s", backend=MockBackend,
                                    scripts=[mock.text_turn("up")])
        text = (await aio.ask("s", "hi")).text
        await aio.stop("s")
        return ref, text

    ref, text = run(main())
    assert text == "up"
    assert not ref.is_alive()
    assert ref.exit_reason == "shutdown"
    with pytest.raises(AgentNotFound):
        run(aio.stop("s"))


def test_a_failed_start_raises_from_the_await() -> None:
    class Broken(Probe):
        def init_agent(self, opts: dict[str, Any]) -> Any:
            raise ValueError("no")

    with pytest.raises(gen_agent.AgentStartError):
        run(aio.start_agent(Broken, name="b", backend=MockBackend))
    assert gen_agent.whereis("b") is None


def test_stop_from_the_agents_own_thread_is_refused() -> None:
    seen: list[BaseException] = []

    class SelfStopper(Probe):
        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            try:
                asyncio.run(aio.stop("a"))
            except RequestError as exc:
                seen.append(exc)
            return gen_agent.NoReply(state)

    start(SelfStopper, scripts=[mock.text_turn("x")])
    gen_agent.ask("a", "go", timeout=WAIT_S)
    assert [e.reason for e in seen] == ["self_stop"]


# ---------------------------------------------------------------------- pools
class _Echo(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        def script(prompt: str) -> Any:
            if prompt == "fail":
                return mock.error_turn("boom")
            return mock.text_turn(f"echo:{prompt}")
        return {"scripts": [script] * 200}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return gen_agent.NoReply(state)


def test_pool_map_and_submit_from_a_loop() -> None:
    async def main(pool: gen_agent.Pool) -> tuple[list[Any], Any, list[Any], int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        tick = asyncio.create_task(ticker())
        texts = [r.text for r in await aio.map(pool, [f"p{i}" for i in range(40)])]
        one = await aio.submit(pool, "single")
        mixed = await aio.map(pool, ["a", "fail", "b"], return_exceptions=True)
        tick.cancel()
        return texts, one, mixed, ticks

    with gen_agent.Pool(_Echo, size=3, backend=MockBackend, name_prefix="ap") as pool:
        texts, one, mixed, ticks = run(main(pool))
        with pytest.raises(TurnError) as info:
            run(aio.map(pool, ["fail"]))
        with pytest.raises(TypeError, match="got a single str"):
            run(aio.map(pool, "abc"))
        with pytest.raises(TypeError, match=r"prompts\[1\] must be a str, got int; no task"):
            run(aio.map(pool, ["ok", 7]))
        assert not pool._tasks  # the bad item came before anything was submitted
    assert texts == [f"echo:p{i}" for i in range(40)]
    assert one.text == "echo:single"
    assert [getattr(m, "text", None) for m in mixed] == ["echo:a", None, "echo:b"]
    assert isinstance(mixed[1], TurnError) and mixed[1].reason == "boom"
    assert info.value.reason == "boom"
    assert ticks > 0

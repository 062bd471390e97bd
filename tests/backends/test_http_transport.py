"""The SDK backends' transport: a light client per session (built at the first turn on one
shared TLS context, dropped on hibernation), the caller's own client, the parked body's drain
limit firing late, a kept connection the server closed while idle, and 1,000 agents over two
loopback servers, each on its own connection."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import gen_agent
import gen_agent.aio
from gen_agent.backend import BackendError, SessionStartError
from gen_agent.backends._http import transport as _transport
from gen_agent.backends.anthropic import AnthropicAPI
from gen_agent.backends.openai import OpenAIResponses

from .conftest import Agent, TurnRecorder, read_in_thread, run_turn, wait_until
from .loop_server import LoopServer
from .wire import FIN, RST, Hold, RawServer, anthropic_events, chunk, chunked_head, openai_events

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

WAIT_S = 15.0


class Provider:
    def __init__(self, name: str, backend: Any, events: Any, base: str, sdk: Any,
                 client: str) -> None:
        self.name, self.backend, self.events, self.base, self.sdk, self.client = (
            name, backend, events, base, sdk, client)

    def __repr__(self) -> str:
        return self.name

    def opts(self, url: str, **extra: Any) -> dict[str, Any]:
        return {"api_key": "test-key", "base_url": url + self.base, "model": "test-model",
                **extra}

    def reply(self, *parts: str) -> list[Any]:
        return [chunked_head(), *[chunk(f) for f in self.events(parts)], chunk(b"")]

    def text(self, events: list[Any]) -> str | None:
        return events[-1].data.get("text") if events and events[-1].kind == "result" else None


ANTHROPIC = Provider("anthropic", AnthropicAPI, anthropic_events, "", anthropic, "Anthropic")
OPENAI = Provider("openai", OpenAIResponses, openai_events, "/v1", openai, "OpenAI")
PROVIDERS = [ANTHROPIC, OPENAI]


@pytest.fixture
def server() -> Iterator[RawServer]:
    with RawServer() as running:
        yield running


# -- the client: checked at start, built at the first turn --------------------------------


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_start_checks_key_and_options_but_builds_no_client(
        provider: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    session = provider.backend.start_session(provider.opts("http://127.0.0.1:9"))
    assert session.transport.built is False  # no client, no pool, no TLS context yet
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(SessionStartError) as missing:
        provider.backend.start_session({"model": "m"})
    assert isinstance(missing.value.reason, BackendError)
    assert missing.value.reason.kind == "missing_api_key"
    with pytest.raises(SessionStartError) as wrong:
        provider.backend.start_session({"model": "m", "client": object()})
    assert wrong.value.reason == ("invalid_option", "client", "object")
    own = getattr(provider.sdk, provider.client)(api_key="k", base_url="http://127.0.0.1:9")
    with pytest.raises(SessionStartError) as both:
        provider.backend.start_session({"model": "m", "client": own, "api_key": "k2"})
    assert both.value.reason[:2] == ("invalid_option", "api_key")
    own.close()


def test_sessions_share_one_tls_context_and_keep_their_own_pools() -> None:
    first = AnthropicAPI.start_session(ANTHROPIC.opts("https://127.0.0.1:9"))
    second = OpenAIResponses.start_session(OPENAI.opts("https://127.0.0.1:9"))
    pools = [s.transport.client._client._transport._pool for s in (first, second)]
    assert pools[0] is not pools[1]
    assert pools[0]._ssl_context is pools[1]._ssl_context
    assert pools[0]._ssl_context is _transport.shared_ssl_context(_transport.http_module(anthropic))
    assert pools[0]._keepalive_expiry == _transport.IDLE_BOUND_S
    for session in (first, second):
        session.transport.close()


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_your_own_client_is_used_cancellable_and_never_closed(
        server: RawServer, provider: Provider) -> None:
    own = getattr(provider.sdk, provider.client)(api_key="k", base_url=server.url + provider.base,
                                                 max_retries=0)
    session = provider.backend.start_session({"model": "m", "client": own})
    server.enqueue(provider.reply("mine"))
    events, session, _ = run_turn(provider.backend, session, "hi")
    assert provider.text(events) == "mine"
    # cancel ends a read blocked on the caller's client too (once the head arrived)
    held = provider.reply("never")
    server.enqueue([held[0], held[1], Hold()])
    recorder = TurnRecorder()
    stream, session = provider.backend.prompt(session, "hang", recorder.context)
    thread, seen = read_in_thread(stream)
    assert wait_until(lambda: session.transport._reading is not None)  # its head arrived
    provider.backend.cancel(session)
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert seen[-1].kind == "error" and seen[-1].data["reason"].kind == "cancelled"
    provider.backend.idle_session(session)
    provider.backend.terminate_session(session)
    assert own.is_closed() is False  # the caller's to close
    own.close()


def _blocked_reading(thread: threading.Thread) -> bool:
    # The innermost Python frame of `thread` is a network read (blocked in C under it).
    frame = sys._current_frames().get(thread.ident or -1)
    return frame is not None and frame.f_code.co_name in {"read", "read_when_readable"} and (
        "httpcore" in frame.f_code.co_filename or "transport.py" in frame.f_code.co_filename)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_a_turn_waiting_for_the_model_holds_no_read_buffer(
        server: RawServer, provider: Provider) -> None:
    # `recv(64 KiB)` allocates its buffer before it blocks: 3,000 waiting turns held 192 MiB.
    session = provider.backend.start_session(provider.opts(server.url))
    held = provider.reply("never")
    server.enqueue([held[0], held[1], Hold()])
    tracemalloc.start()
    try:
        stream, session = provider.backend.prompt(session, "wait", TurnRecorder().context)
        thread, seen = read_in_thread(stream)
        assert wait_until(lambda: _blocked_reading(thread), WAIT_S)
        reads = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, "*httpcore*/_backends/*")])
        largest = max((trace.size for trace in reads.traces), default=0)
    finally:
        tracemalloc.stop()
        provider.backend.cancel(session)
        thread.join(WAIT_S)
    assert not thread.is_alive()
    assert seen[-1].kind == "error" and seen[-1].data["reason"].kind == "cancelled"
    assert largest < 64 * 1024, largest  # no block the size of the read buffer
    provider.backend.terminate_session(session)


# -- the parked body's drain, and kept connections -----------------------------------------


class _LateTimers:
    """Stands in for `_timers.TIMERS` in `_transport`: keeps every scheduled callback, never
    fires one by itself and ignores `cancel()`, so the test fires it as late as it likes."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def schedule(self, delay_s: float, callback: Any) -> Any:
        self.callbacks.append(callback)
        return self

    def cancel(self) -> None:
        pass


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_a_drain_limit_firing_late_never_cuts_the_next_turns_connection(
        server: RawServer, provider: Provider, monkeypatch: pytest.MonkeyPatch) -> None:
    timers = _LateTimers()
    monkeypatch.setattr(_transport, "TIMERS", timers)
    session = provider.backend.start_session(provider.opts(server.url))
    body_end = threading.Event()
    first = provider.reply("one")
    server.enqueue([*first[:-1], Hold(body_end), first[-1]])  # the reply before its body end
    events, session, _ = run_turn(provider.backend, session, "1")
    assert provider.text(events) == "one"
    body_end.set()
    mid = threading.Event()
    second = provider.reply("two")
    server.enqueue([*second[:3], Hold(mid), *second[3:]])
    stream, session = provider.backend.prompt(session, "2", TurnRecorder().context)
    thread, seen = read_in_thread(stream)
    assert wait_until(lambda: len(server.bodies) == 2)  # the drain ended, turn 2 is sent
    assert len(timers.callbacks) == 1
    timers.callbacks[0]()  # the drain's limit fires now: after its drain ended
    mid.set()
    thread.join(WAIT_S)
    assert seen[-1].kind == "result" and seen[-1].data["text"] == "two"
    assert server.connections == 1
    provider.backend.terminate_session(session)


def test_a_turn_drains_its_own_parked_body_when_the_drain_thread_is_busy(
        server: RawServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transport, "DRAIN_LIMIT_S", 60.0)  # the held body keeps it busy
    provider = ANTHROPIC
    with RawServer() as other:
        held = provider.backend.start_session(provider.opts(other.url))
        body_end = threading.Event()
        first = provider.reply("held")
        other.enqueue([*first[:-1], Hold(body_end), first[-1]])
        events, held, _ = run_turn(provider.backend, held, "1")
        assert provider.text(events) == "held"  # the drain thread now waits for its end
        try:
            session = provider.backend.start_session(provider.opts(server.url))
            server.enqueue(provider.reply("one"), provider.reply("two"))
            events, session, _ = run_turn(provider.backend, session, "1")
            assert provider.text(events) == "one"
            started = time.monotonic()
            events, session, _ = run_turn(provider.backend, session, "2")
            assert provider.text(events) == "two"  # its body was drained by this turn
            assert time.monotonic() - started < 30.0  # not left waiting for the busy thread
            assert server.connections == 1
        finally:
            body_end.set()
        assert _transport.DRAINER.wait_idle(WAIT_S)
        provider.backend.terminate_session(session)
        provider.backend.terminate_session(held)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
@pytest.mark.parametrize("cut", [FIN, RST], ids=repr)
def test_a_kept_connection_the_server_closed_while_idle_is_retried_once(
        server: RawServer, provider: Provider, cut: Any) -> None:
    session = provider.backend.start_session(provider.opts(server.url))
    server.enqueue(provider.reply("one"), [cut], provider.reply("two"))
    events, session, _ = run_turn(provider.backend, session, "1")
    assert provider.text(events) == "one"
    events, session, _ = run_turn(provider.backend, session, "2")
    assert provider.text(events) == "two"  # sent again, on a new connection
    assert server.connections == 2 and len(server.bodies) == 3
    provider.backend.terminate_session(session)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_a_new_connection_that_fails_is_not_sent_again(
        server: RawServer, provider: Provider) -> None:
    session = provider.backend.start_session(provider.opts(server.url))
    server.enqueue([FIN], provider.reply("unused"))
    events, session, _ = run_turn(provider.backend, session, "1")
    assert events[-1].kind == "error" and events[-1].data["reason"].kind == "transport"
    assert len(server.bodies) == 1  # the server may have seen it: never sent twice
    provider.backend.terminate_session(session)


@pytest.mark.parametrize("provider", PROVIDERS, ids=repr)
def test_a_hibernated_agent_holds_no_socket(server: RawServer, provider: Provider) -> None:
    server.enqueue(provider.reply("one"), provider.reply("two"))
    name = f"idle-{provider.name}"
    agent = gen_agent.start_agent(Agent, name=name, backend=provider.backend,
                                  backend_opts=provider.opts(server.url), hibernate_after_ms=0)
    assert agent.ask("1", timeout=WAIT_S).text == "one"
    assert wait_until(lambda: server.closed == 1, WAIT_S)  # hibernated: its connection closed
    assert agent.ask("2", timeout=WAIT_S).text == "two"  # a new client, a new connection
    assert server.connections == 2
    gen_agent.stop(name)


# -- many agents ---------------------------------------------------------------------------


def test_a_thousand_agents_over_two_servers_start_fast_and_keep_their_own_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # On a loaded 2-core machine a drain may wait > 1 s for the GIL; its limit has its own test.
    monkeypatch.setattr(_transport, "DRAIN_LIMIT_S", 60.0)
    count = 1000
    with LoopServer() as one, LoopServer() as two, gen_agent.AgentSystem() as system:
        servers = (one, two)
        started = time.perf_counter()
        refs = [gen_agent.start_agent(
            Agent, name=f"h{i}", agent_system=system, backend=AnthropicAPI,
            backend_opts=ANTHROPIC.opts(servers[i % 2].url)) for i in range(count)]
        start_s = time.perf_counter() - started
        # The 2 s target is the bench's row (an idle machine); here a bound a loaded
        # 2-core CI machine meets (no client is built at start: ~1.3 ms an agent).
        assert start_s <= 12.0, start_s

        def two_turns(ref: Any) -> list[str]:
            return [ref.ask(str(n), timeout=60).text for n in (1, 2)]

        with ThreadPoolExecutor(64) as pool:
            texts = list(pool.map(two_turns, refs))
        assert texts == [["hi", "hi"]] * count
        # each agent kept its own connection for both its turns
        assert (one.connections, two.connections) == (count // 2, count // 2)
        assert (one.requests, two.requests) == (count, count)


IDLE_HEAP_BOUND = 32 * 1024
"""Bytes of Python heap an idle `AnthropicAPI` agent may hold after a turn: its actor, session,
client, pool and kept connection (~22 KiB measured; ~42 KiB while a finished turn's response
stayed parked until the next turn). The bench's `kib_idle_http` row measures resident memory."""


def test_an_idle_agent_after_a_turn_keeps_its_heap_under_the_bound() -> None:
    count = 60
    with LoopServer() as loop_server, gen_agent.AgentSystem() as system:
        def start(prefix: str) -> list[Any]:
            return [gen_agent.start_agent(
                Agent, name=f"{prefix}{i}", agent_system=system, backend=AnthropicAPI,
                backend_opts=ANTHROPIC.opts(loop_server.url)) for i in range(count)]

        def one_turn_each(refs: list[Any]) -> None:
            async def all_at_once() -> list[Any]:
                return await asyncio.gather(*(gen_agent.aio.ask(
                    ref.name, "1", timeout=WAIT_S, agent_system=system) for ref in refs))
            assert [reply.text for reply in asyncio.run(all_at_once())] == ["hi"] * count
            assert _transport.DRAINER.wait_idle(WAIT_S)  # every parked body read and released

        # Warm the process first: the SDK's lazy imports and the shared pool of turn threads
        # (its threads park for the next turns, of any agent, and are not an agent's).
        one_turn_each(start("warm"))
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            one_turn_each(start("idle"))
            gc.collect()
            per_agent = (tracemalloc.get_traced_memory()[0] - before) / count
        finally:
            tracemalloc.stop()
        assert loop_server.connections == 2 * count  # each agent kept its own connection
        assert per_agent <= IDLE_HEAP_BOUND, per_agent

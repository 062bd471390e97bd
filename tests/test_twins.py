"""The client calls' twins: `gen_agent` (threaded), `gen_agent.aio` and `AgentRef` are adapters
over one definition of each call (`gen_agent._runtime.calls`), so they take the same
parameters and behave alike. Both are read from the functions themselves, not from a list
kept beside them."""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from _agents import WAIT_S, ProbeWithInfo, start

import gen_agent
from gen_agent import AgentRef, aio
from gen_agent import _client as client
from gen_agent import _streaming as streaming
from gen_agent._errors import AgentNotFound, CallTimeout
from gen_agent._request_ref import RequestRef
from gen_agent._status import PollResult
from gen_agent._system import current_system
from gen_agent.backends import mock
from gen_agent.store import InterruptedTurn
from gen_agent.testing import wait_until_idle

# Functions of the threaded client that have no awaitable twin, and why.
NOT_AWAITABLE = {
    "current_name": "reads the calling thread's identity",
    "demonitor": "cancels a local record, nothing to await",
    "list_agents": "reads the registry, nothing to await",
    "whereis": "reads the registry, nothing to await",
    "send_after": "schedules a timer, nothing to await",
}
# Awaitable functions with no threaded twin in `gen_agent._client`: the pool's (`Pool.submit`,
# `Pool.map`), and the stream, whose threaded twin is `gen_agent.stream`.
AIO_ONLY = {"submit", "map", "stream", "AsyncTurnStream", "attach", "AsyncAttachedTurn"}


def _params(fn: Callable[..., Any], drop: tuple[str, ...] = ()) -> list[tuple[str, Any, Any]]:
    """`(name, kind, default)` of each parameter (annotations aside), without `drop`."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
            if p.name not in drop]


def _client_calls() -> list[str]:
    return sorted(n for n in client.__all__ if n != "AgentRef" and n not in NOT_AWAITABLE)


def test_every_client_call_has_an_awaitable_twin_with_the_same_parameters() -> None:
    twins = _client_calls()
    assert set(aio.__all__) - AIO_ONLY == set(twins)
    for name in twins:
        assert _params(getattr(aio, name)) == _params(getattr(client, name)), name
        assert inspect.iscoroutinefunction(getattr(aio, name)), name
    assert _params(aio.stream) == _params(streaming.stream)
    assert _params(aio.attach) == _params(streaming.attach)


def test_agent_ref_methods_take_the_client_parameters_but_the_name() -> None:
    by_ref = [n for n in _client_calls() if hasattr(AgentRef, n)]
    assert set(_client_calls()) - set(by_ref) == {"start_agent"}
    for name in by_ref:
        assert _params(getattr(AgentRef, name), ("self",)) == \
            _params(getattr(client, name), ("name", "agent_system")), name


def test_the_registry_argument_is_agent_system_everywhere() -> None:
    for module in (client, aio):
        for name in module.__all__:
            fn = getattr(module, name)
            if not callable(fn) or isinstance(fn, type) or name in ("map", "submit"):
                continue
            params = inspect.signature(fn).parameters
            if "name" in params:
                assert "agent_system" in params, f"{module.__name__}.{name}"
            assert "system" not in params and "_system" not in params, name


# ---------------------------------------------------------------------- one behaviour table
def _run_aio(name: str, *args: Any, **kwargs: Any) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(WAIT_S * 2):
            return await getattr(aio, name)(*args, **kwargs)
    return asyncio.run(bounded())


ADAPTERS: dict[str, Callable[..., Any]] = {
    "client": lambda name, agent, *args, **kw: getattr(client, name)(agent, *args, **kw),
    "aio": lambda name, agent, *args, **kw: _run_aio(name, agent, *args, **kw),
}

# (call, arguments after the name, what an unknown name gives: an exception type or a value)
UNKNOWN_NAME: list[tuple[str, tuple[Any, ...], Any]] = [
    ("ask", ("hi",), AgentNotFound),
    ("resend", (InterruptedTurn(key="k", ref="r", origin="ask", attempt=1, started_at=0.0,
                                detected_at=0.0, prompt="hi"),), AgentNotFound),
    ("tell", ("hi",), AgentNotFound),
    ("tell_with_completion", ("hi", queue.SimpleQueue()), AgentNotFound),
    ("monitor", (queue.SimpleQueue(),), AgentNotFound),
    ("notify_ack", ("event",), AgentNotFound),
    ("reset_session", (), AgentNotFound),
    ("status", (), AgentNotFound),
    ("runtime_snapshot", (), AgentNotFound),
    ("backend_session", (), AgentNotFound),
    ("drain", (), AgentNotFound),
    ("stop", (), AgentNotFound),
    ("poll", (RequestRef.new(),), PollResult(status="failed", reason="not_found")),
    ("interrupt_request", (RequestRef.new(),), "not_found"),
    ("interrupt_receipt", (), AgentNotFound),
    ("cancel_request", (RequestRef.new(),), "not_found"),
    # casts: never fail (contract: a cast to a missing agent is a no-op)
    ("notify", ("event",), None),
    ("interrupt", (), None),
    ("halt", (), None),
    ("resume", (), None),
    ("send", ("message",), None),
]


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@pytest.mark.parametrize(("call", "args", "expected"), UNKNOWN_NAME,
                         ids=[row[0] for row in UNKNOWN_NAME])
def test_an_unknown_name(adapter: str, call: str, args: tuple[Any, ...], expected: Any) -> None:
    run = ADAPTERS[adapter]
    if isinstance(expected, type) and issubclass(expected, BaseException):
        with pytest.raises(expected):
            run(call, "nobody", *args)
    else:
        assert run(call, "nobody", *args) == expected


def test_the_table_covers_every_call_of_a_name() -> None:
    covered = {row[0] for row in UNKNOWN_NAME}
    assert covered == set(_client_calls()) - {"start_agent"}


def _blocked_agent() -> tuple[AgentRef, threading.Event]:
    """An agent whose thread is held in `handle_info` until the returned event is set."""
    release = threading.Event()
    entered = threading.Event()

    def hold(message: Any, state: Any) -> Any:
        entered.set()
        release.wait(WAIT_S)
        return gen_agent.NoReply(state)

    agent = start(ProbeWithInfo, scripts=[mock.text_turn("answer")],
                  hooks={"handle_info": hold})
    agent.send("hold")
    assert entered.wait(WAIT_S)
    return agent, release


REF_ADAPTER = "ref"
# The interrupts first: queued behind the blocked callback, they reach an agent with no turn
# running (queued after the ask, `interrupt_receipt` would cut its turn when the agent gets to
# it before the turn task reaches the backend, and the ask's prompt would never be sent).
TIMEOUT_CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("interrupt_request", (RequestRef.new(),)), ("cancel_request", (RequestRef.new(),)),
    ("interrupt_receipt", ()),
    ("ask", ("hi",)), ("tell", ("hi",)), ("tell_with_completion", ("hi", queue.SimpleQueue())),
    ("poll", (RequestRef.new(),)), ("notify_ack", ("event",)), ("status", ()),
    ("runtime_snapshot", ()), ("backend_session", ()), ("reset_session", ()),
]


@pytest.mark.parametrize("adapter", [*sorted(ADAPTERS), REF_ADAPTER])
def test_a_caller_timeout_raises_and_leaves_the_agent_unaffected(adapter: str) -> None:
    agent, release = _blocked_agent()
    for call, args in TIMEOUT_CALLS:
        with pytest.raises(CallTimeout) as info:
            if adapter == REF_ADAPTER:
                getattr(agent, call)(*args, timeout=0.05)
            else:
                ADAPTERS[adapter](call, "a", *args, timeout=0.05)
        assert isinstance(info.value, TimeoutError), call
    release.set()
    # The agent is unaffected: the timed-out ask and tells kept their places (contract: a
    # timed-out caller's request stays) and ran once the agent was free.
    wait_until_idle(agent, WAIT_S)
    assert agent.is_alive()
    assert mock.MockBackend.history("a") == ["hi", "hi", "hi"]


BAD_ARGUMENTS: list[tuple[str, tuple[Any, ...], dict[str, Any], type[BaseException]]] = [
    ("ask", (b"bytes",), {}, TypeError),
    ("ask", ("hi",), {"timeout": "5"}, TypeError),
    ("ask", ("hi",), {"options": "fast"}, TypeError),
    ("tell", (42,), {}, TypeError),
    ("tell_with_completion", ("hi", object()), {}, TypeError),
    ("tell_with_completion", ("hi", queue.SimpleQueue()), {"on_halt": "drop"}, ValueError),
    ("tell_with_completion", ("hi", queue.SimpleQueue()), {"monitor": "yes"}, TypeError),
    ("monitor", (object(),), {}, TypeError),
    ("resend", ("not an InterruptedTurn",), {}, TypeError),
]


@pytest.mark.parametrize("adapter", [*sorted(ADAPTERS), REF_ADAPTER])
def test_a_bad_argument_gives_the_same_exception_and_sends_nothing(adapter: str) -> None:
    agent = start(scripts=[])
    for call, args, kwargs, error in BAD_ARGUMENTS:
        with pytest.raises(error):
            if adapter == REF_ADAPTER:
                getattr(agent, call)(*args, **kwargs)
            else:
                ADAPTERS[adapter](call, "a", *args, **kwargs)
    assert mock.MockBackend.history("a") == []  # nothing reached the backend


@pytest.mark.parametrize(("fn", "old"), [
    (client.status, "_system"), (aio.status, "system"),
    (lambda name, **kw: streaming.stream(name, "hi", **kw), "system"),
], ids=["client", "aio", "stream"])
def test_the_old_registry_spellings_still_work_with_a_warning(fn: Any, old: str) -> None:
    start(scripts=[])
    system = current_system()

    def call(**kwargs: Any) -> Any:
        result = fn("a", **kwargs)
        return asyncio.run(result) if asyncio.iscoroutine(result) else result

    with pytest.warns(DeprecationWarning, match=f"{old}= is deprecated, use agent_system="):
        assert call(**{old: system}) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="give agent_system= only"):
            call(agent_system=system, **{old: system})

"""`AgentHost` busy policies: per host (`busy=`) and per request (`RequestOptions(busy=...)`,
the same on `ask`, `tell` and `stream`), and the per-key `interrupt_request`,
`cancel_request` and `interrupt_receipt`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gen_agent import AgentHost, AgentSystem, GenAgent, InterruptReceipt, NoReply, RequestOptions
from gen_agent._errors import TurnError
from gen_agent._event import Event
from gen_agent.backends.mock import MockBackend, text_turn

WAIT_S = 5.0


class Slow(GenAgent):
    """Prompt "slow" blocks until the test's `release` is set (or the turn is interrupted)."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        started, release = opts["started"], opts["release"]

        def answer(prompt: str) -> Iterator[Event]:
            if prompt == "slow":
                started.set()
                release.wait(WAIT_S)
            yield from text_turn(f"re:{prompt}")

        return {"fallback": answer}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        return NoReply(state)


@pytest.fixture
def system() -> Iterator[AgentSystem]:
    with AgentSystem() as system:
        yield system


def host_of(system: AgentSystem, **opts: Any) -> tuple[AgentHost, threading.Event,
                                                       threading.Event]:
    started, release = threading.Event(), threading.Event()
    host = AgentHost(Slow, backend=MockBackend, agent_system=system, started=started,
                     release=release, **opts)
    return host, started, release


def test_a_host_policy_and_a_per_request_override(system: AgentSystem) -> None:
    host, started, release = host_of(system, busy="reject")
    with host:
        try:
            slow = host.tell("k", "slow")
            assert started.wait(WAIT_S)
            with pytest.raises(TurnError) as err:
                host.ask("k", "now", timeout=WAIT_S)
            assert err.value.reason == "busy"
            with pytest.raises(TurnError), host.stream("k", "streamed"):
                pass
            queued = host.tell("k", "later", options=RequestOptions(busy="enqueue"))
            assert host.cancel_request("k", queued) == "cancelled"
            answer = host.ask("k", "urgent", options=RequestOptions(busy="interrupt"),
                              timeout=WAIT_S)
            assert answer.text == "re:urgent"
            assert host.poll("k", slow).reason == "interrupted"
        finally:
            release.set()


def test_stream_takes_the_policy_too(system: AgentSystem) -> None:
    host, started, release = host_of(system)
    with host:
        try:
            host.tell("k", "slow")
            assert started.wait(WAIT_S)
            with host.stream("k", "streamed", options=RequestOptions(busy="interrupt"),
                             timeout=WAIT_S) as turn:
                kinds = [event.kind for event in turn]
            assert turn.response.text == "re:streamed" and "text" in kinds
        finally:
            release.set()


def test_per_key_interrupt_calls_never_activate(system: AgentSystem) -> None:
    host, started, release = host_of(system)
    with host:
        try:
            from gen_agent._request_ref import RequestRef

            assert host.interrupt_request("nobody", RequestRef.new()) == "not_found"
            assert host.cancel_request("nobody", RequestRef.new()) == "not_found"
            assert host.interrupt_receipt("nobody") == InterruptReceipt()
            assert host.live_keys() == []
            slow = host.tell("k", "slow")
            assert started.wait(WAIT_S)
            assert host.interrupt_request("k", RequestRef.new()) == "not_current"
            queued = host.tell("k", "next")
            receipt = host.interrupt_receipt("k", timeout=WAIT_S)
            assert receipt == InterruptReceipt(interrupted=slow, origin="tell", queued=(queued,))
        finally:
            release.set()


def test_a_bad_host_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="busy must be one of"):
        AgentHost(Slow, backend=MockBackend, busy="sometimes")

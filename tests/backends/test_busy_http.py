"""Busy policies on an HTTP backend (AnthropicAPI against ScriptedModelServer on 127.0.0.1):
a rolled-back turn's exchange is not in the next request, an interrupted one is cut the same
way, a rejected request never reaches the server, and a rolled-back turn whose side-effecting
tool ran is reported (journal kept, `InterruptedTurn`, preamble)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import GenAgent, NoReply, RequestOptions, TurnError
from gen_agent.store import InterruptedTurn, MemoryStore
from gen_agent.telemetry import TURN_DISCARDED, TURN_ERROR, TURN_STOP, TelemetryRecorder
from gen_agent.testing._model_server import Reply, ScriptedModelServer
from gen_agent.tools import tool

pytest.importorskip("anthropic")
pytest.importorskip("httpx2")

WAIT_S = 10.0


class Counting(GenAgent):
    """Counts its decision callbacks; keeps `handle_info` messages."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.calls: list[str] = opts["calls"]
        return dict(opts["backend_opts"]), None

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.calls.append("handle_response")
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.calls.append(f"handle_error:{reason}")
        return NoReply(state)

    def post_turn(self, outcome: Any, ref: Any, state: Any) -> Any:
        self.calls.append("post_turn")
        return state

    def handle_info(self, message: Any, state: Any) -> Any:
        self.calls.append(("info", message))
        return NoReply(state)


def start(server: ScriptedModelServer, calls: list[Any], **opts: Any) -> gen_agent.AgentRef:
    from gen_agent.backends.anthropic import AnthropicAPI

    backend_opts = {"api_key": "test-key", "base_url": server.url, "model": "claude-test",
                    **opts.pop("backend_opts", {})}
    return agents.start(Counting, "h", backend=AnthropicAPI, calls=calls,
                        backend_opts=backend_opts, **opts)


def messages(server: ScriptedModelServer, index: int) -> list[dict[str, Any]]:
    return server.model_requests()[index].body["messages"]


def metas(rec: TelemetryRecorder, name: tuple[str, ...]) -> list[dict[str, Any]]:
    return [r.metadata for r in rec.records if r.event_name == name
            and r.metadata.get("agent") == "h"]


@pytest.mark.parametrize("policy", ["rollback", "interrupt"])
def test_the_cut_exchange_is_not_sent_again(server: ScriptedModelServer, policy: str) -> None:
    server.enqueue(Reply.text("one"), Reply.text("too late", delay=60.0), Reply.text("fixed"))
    calls: list[Any] = []
    with TelemetryRecorder([TURN_DISCARDED, TURN_ERROR, TURN_STOP]) as rec:
        agent = start(server, calls)
        assert agent.ask("first", timeout=WAIT_S).text == "one"
        done: queue.Queue = queue.Queue()
        agent.tell_with_completion("slow", done)
        server.wait_requests(2, timeout=WAIT_S)
        fixed = agent.ask("fix", options=RequestOptions(busy=policy), timeout=WAIT_S)
    assert fixed.text == "fixed"
    assert done.get(timeout=WAIT_S).outcome == ("error", "interrupted") and done.empty()
    assert messages(server, 2) == [
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "one"},
        {"role": "user", "content": "fix"}]
    assert calls == ["handle_response", "post_turn", "handle_error:interrupted", "post_turn",
                     "handle_response", "post_turn"]
    assert [m["reason_kind"] for m in metas(rec, TURN_ERROR)] == ["interrupted"]
    assert len(metas(rec, TURN_STOP)) == 2
    assert len(metas(rec, TURN_DISCARDED)) == (1 if policy == "rollback" else 0)


def test_a_rejected_request_never_reaches_the_server(server: ScriptedModelServer) -> None:
    server.enqueue(Reply.text("too late", delay=60.0), Reply.text("after"))
    calls: list[Any] = []
    agent = start(server, calls, busy="reject")
    agent.tell("slow")
    server.wait_requests(1, timeout=WAIT_S)
    with pytest.raises(TurnError) as err:
        agent.ask("now", timeout=WAIT_S)
    assert err.value.reason == "busy"
    assert len(server.model_requests()) == 1
    agent.interrupt()
    assert agent.ask("later", options=RequestOptions(busy="enqueue"),
                     timeout=WAIT_S).text == "after"


ENTERED = threading.Event()
RELEASE = threading.Event()


@tool(side_effects=True)
def refund(order_id: str) -> str:
    """Refund an order.

    Args:
        order_id: the order.
    """
    ENTERED.set()
    RELEASE.wait(WAIT_S)
    return f"refunded {order_id}"


def test_a_rolled_back_turn_whose_side_effect_ran_is_reported(
        server: ScriptedModelServer) -> None:
    ENTERED.clear()
    RELEASE.clear()
    store = MemoryStore()
    server.enqueue(Reply.tool_use("refund", {"order_id": "o1"}, id="toolu_1"),
                   Reply.text("redone"))
    calls: list[Any] = []
    try:
        start(server, calls, store=store, session_key="k", backend_opts={"tools": [refund]})
        gen_agent.tell("h", "refund o1")
        assert ENTERED.wait(WAIT_S)  # the tool runs: its call is journalled, in doubt
        answer = gen_agent.ask("h", "never mind", options=RequestOptions(busy="rollback"),
                               timeout=WAIT_S)
    finally:
        RELEASE.set()
    assert answer.text == "redone"
    infos = [c[1] for c in calls if isinstance(c, tuple)]
    assert len(infos) == 1 and isinstance(infos[0], InterruptedTurn)
    assert [e.call_id for e in infos[0].in_doubt] == ["toolu_1"]
    assert gen_agent.status("h").store.interrupted_turn == infos[0]
    assert [e.call_id for e in store.journal("k")] == ["toolu_1"]  # kept
    sent = messages(server, 1)
    assert len(sent) == 1 and sent[0]["role"] == "user"  # the cut exchange is dropped...
    assert sent[0]["content"].endswith("never mind") and "refund" in sent[0]["content"]
    # ...and the next prompt tells the model what ran
    assert calls.index(("info", infos[0])) < calls.index("handle_response")

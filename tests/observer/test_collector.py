"""`Collector`: the observer's model, without a web server."""

from __future__ import annotations

from typing import Any

import pytest

import gen_agent
from gen_agent import GenAgent, NoReply, telemetry
from gen_agent._event import Event
from gen_agent._reasons import brief_reason
from gen_agent._supervisor import Supervisor, child_spec, supervisor_spec
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.observer._collector import Collector
from gen_agent.testing._helpers import ScriptedAgent


class Crashy(GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, None

    def handle_response(self, ref: Any, response: Any, state: Any) -> NoReply:
        raise RuntimeError("on purpose")


def _observer_handlers() -> list[Any]:
    return [h for h in telemetry.list_handlers(("gen_agent",))
            if isinstance(h.id, tuple) and h.id[0] == "gen_agent.observer"]


@pytest.mark.parametrize(("reason", "shown"), [
    ("shutdown", "shutdown"),
    (("callback_failed", "error", "DemoCrash"), "callback_failed:error:DemoCrash"),
    (("shutdown", "reached_max_restart_intensity"), "shutdown:reached_max_restart_intensity"),
    ("the model said: my secret plan", "…"),
    (("error", "a message with spaces"), "error:…"),
    (ValueError("secret"), "ValueError"),
    ({"text": "secret"}, "dict"),
    (("overloaded", 3), "overloaded:3"),
    (None, ""),
])
def test_describe_reason_keeps_identifiers_only(reason: Any, shown: str) -> None:
    assert brief_reason(reason) == shown


def test_nothing_is_attached_or_kept_outside_open_and_close(
        agent_system: gen_agent.AgentSystem) -> None:
    collector = Collector(agent_system)
    assert _observer_handlers() == []
    gen_agent.start_agent(ScriptedAgent, name="a", backend=MockBackend,
                          scripts=[mock.text_turn("x"), mock.text_turn("y")])
    gen_agent.ask("a", "before", timeout=5)
    with collector:
        # no rich prompt events, no SUPERVISOR_RESTART, no TURN_DISCARDED (the rolled-back
        # turn's TURN_ERROR follows it), no TURN_JOINED (the joined turn's TURN_STOP does)
        assert len(_observer_handlers()) == len(telemetry.EVENTS) - 6
        assert collector.turns() == []
        gen_agent.ask("a", "during", timeout=5)
        assert [t["outcome"] for t in collector.turns()] == ["ok"]
    assert _observer_handlers() == []
    assert collector.turns() == [] and collector.events() == []


def test_rings_are_bounded_and_turns_carry_tokens_and_cost(
        agent_system: gen_agent.AgentSystem) -> None:
    turn = [Event.new("text", {"text": "hi"}),
            Event.new("usage", {"input_tokens": 11, "output_tokens": 7}),
            Event.new("result", {"text": "hi", "cost_usd": 0.5})]
    gen_agent.start_agent(ScriptedAgent, name="a", backend=MockBackend,
                          scripts=[list(turn) for _ in range(3)] + [mock.error("no_more")])
    with Collector(agent_system, max_turns=2, max_events=3) as collector:
        for _ in range(3):
            gen_agent.ask("a", "q", timeout=5)
        with pytest.raises(gen_agent.TurnError):
            gen_agent.ask("a", "q", timeout=5)
        turns = collector.turns()
        assert len(turns) == 2 and len(collector.events()) == 3
        assert {k: turns[0][k] for k in ("input_tokens", "output_tokens", "cost_usd",
                                         "outcome", "origin", "attempt")} == {
            "input_tokens": 11, "output_tokens": 7, "cost_usd": 0.5, "outcome": "ok",
            "origin": "ask", "attempt": 1}
        assert turns[1]["outcome"] == "backend_or_callback_error"
        assert turns[1]["input_tokens"] is None


def test_snapshot_shows_trees_restarts_and_intensity_left(
        agent_system: gen_agent.AgentSystem) -> None:
    with Supervisor([
        child_spec(Crashy, name="crashy", backend=MockBackend, restart="permanent",
                   scripts=[mock.text_turn("boom")]),
        supervisor_spec([child_spec(ScriptedAgent, name="inner", backend=MockBackend)],
                        name="nested"),
    ], name="top", max_restarts=2, max_seconds=60) as top, Collector(agent_system) as collector:
        first = gen_agent.whereis("crashy")
        gen_agent.tell("crashy", "crash please", timeout=5)
        assert first.wait_stopped(5)
        top.which_children()  # the restart is done once the supervisor answers
        view = collector.snapshot()
        (tree,) = view["supervisors"]
        assert (tree["name"], tree["intensity_left"], tree["restarts_in_window"]) == ("top", 1, 1)
        crashy, nested = tree["children"]
        assert (crashy["restarts"], crashy["running"]) == (1, True)
        assert crashy["last_exit"] == "callback_failed:error:RuntimeError"
        assert nested["supervisor"]["children"][0]["id"] == "inner"
        agents = {a["name"]: a for a in view["agents"]}
        assert agents["inner"]["supervisor"] == "nested"
        assert agents["crashy"]["supervisor"] == "top"
        assert agents["crashy"]["phase"] == "idle"
        assert [e["event"] for e in view["events"]].count("terminated") == 1


def test_snapshot_shows_pools(agent_system: gen_agent.AgentSystem) -> None:
    with gen_agent.Pool(ScriptedAgent, size=2, backend=MockBackend, name_prefix="p",
                        scripts=[mock.text_turn("x")]) as pool, \
            Collector(agent_system) as collector:
        pool.map(["a"], timeout=5)
        (view,) = collector.snapshot()["pools"]
        assert (view["name"], view["size"], view["queued"], view["in_flight"]) == ("p", 2, 0, 0)
        assert sum(w["completed"] for w in view["workers"]) == 1
        assert collector.snapshot()["supervisors"][0]["pool"] == "p"
    assert agent_system.pools() == []


def test_a_tool_permission_decision_shows_the_tool_and_the_decision_only(
        agent_system: gen_agent.AgentSystem) -> None:
    with Collector(agent_system) as collector:
        telemetry.execute(telemetry.TOOL_PERMISSION, {"system_time": 1}, {
            "agent": "a", "ref": None, "attempt": 1, "backend": "claude", "tool_name": "Bash",
            "decision": "deny"})
        (event,) = collector.events()
    assert (event["event"], event["agent"], event["detail"]) == (
        "tool_permission", "a", "Bash: deny")

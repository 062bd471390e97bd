"""Per-agent accounting (gen_agent._accounting) on the mock: running totals on each Response,
the `max_cost_usd` / `max_total_tokens` caps refusing turns at dispatch with
`("budget_exceeded", BudgetExceeded)`, surviving `reset_session`, and the `spend` seed."""

from __future__ import annotations

from typing import Any

import pytest
from _agents import Scripted

import gen_agent
from gen_agent._accounting import BudgetExceeded, Spend, add_turn, check_budget, total_tokens
from gen_agent._errors import TurnError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

T = 5.0  # seconds: the bound of every wait in this file


def turn(text: str, tokens: tuple[int, int], cost: float | None) -> Any:
    extra = {} if cost is None else {"cost_usd": cost}
    usage = {"input_tokens": tokens[0], "output_tokens": tokens[1]}
    return mock.text_turn(text, usage=usage, result=extra)


def test_each_response_carries_its_turn_and_the_running_totals() -> None:
    gen_agent.start_agent(Scripted, name="acct", backend=MockBackend,
                          scripts=[turn("a", (10, 2), 0.01), turn("b", (20, 3), 0.02),
                                   mock.text_turn("c")])

    first = gen_agent.ask("acct", "1", timeout=T)
    second = gen_agent.ask("acct", "2", timeout=T)
    third = gen_agent.ask("acct", "3", timeout=T)  # reports nothing: totals unchanged

    assert (first.usage, first.cost_usd) == ({"input_tokens": 10, "output_tokens": 2}, 0.01)
    assert (second.usage, second.cost_usd) == ({"input_tokens": 20, "output_tokens": 3}, 0.02)
    assert first.session_usage == {"input_tokens": 10, "output_tokens": 2}
    assert second.session_usage == {"input_tokens": 30, "output_tokens": 5}
    assert second.session_cost_usd == pytest.approx(0.03)
    assert (third.usage, third.cost_usd) == (None, None)
    assert third.session_usage == {"input_tokens": 30, "output_tokens": 5}


def test_the_cost_cap_refuses_the_next_turn_and_survives_reset_session() -> None:
    gen_agent.start_agent(Scripted, name="capped", backend=MockBackend, max_cost_usd=0.025,
                          scripts=[turn("a", (1, 1), 0.01), turn("b", (1, 1), 0.02),
                                   turn("never", (1, 1), 0.0)])

    gen_agent.ask("capped", "1", timeout=T)
    gen_agent.ask("capped", "2", timeout=T)  # runs: the cap is checked before dispatch
    with pytest.raises(TurnError) as refused:
        gen_agent.ask("capped", "3", timeout=T)
    gen_agent.reset_session("capped", timeout=T)
    with pytest.raises(TurnError) as after_reset:
        gen_agent.ask("capped", "4", timeout=T)

    kind, info = refused.value.reason
    assert kind == "budget_exceeded"
    assert (info.limit, info.maximum) == ("cost_usd", 0.025)
    assert info.spent == pytest.approx(0.03)
    assert after_reset.value.reason[0] == "budget_exceeded"
    assert MockBackend.history("capped") == ["1", "2"]  # "3" and "4" never reached it


def test_the_token_cap_and_a_restored_spend() -> None:
    seed = Spend(usage={"input_tokens": 90, "output_tokens": 5}, cost_usd=None, turns=4)
    gen_agent.start_agent(Scripted, name="tokens", backend=MockBackend, max_total_tokens=100,
                          spend=seed, scripts=[turn("a", (4, 1), None), turn("b", (1, 1), None)])

    first = gen_agent.ask("tokens", "1", timeout=T)
    with pytest.raises(TurnError) as refused:
        gen_agent.ask("tokens", "2", timeout=T)

    assert first.session_usage == {"input_tokens": 94, "output_tokens": 6}
    assert refused.value.reason == ("budget_exceeded",
                                    BudgetExceeded(limit="tokens", maximum=100, spent=100))


@pytest.mark.parametrize(("options", "message"), [
    ({"max_cost_usd": -1}, "max_cost_usd must be a finite number >= 0 (US dollars; None: no"),
    ({"max_cost_usd": float("nan")}, "max_cost_usd must be a finite number >= 0"),
    ({"max_cost_usd": float("inf")}, "max_cost_usd must be a finite number >= 0"),
    ({"max_total_tokens": 1.5}, "max_total_tokens must be an int >= 0"),
    ({"spend": {"usage": {}}}, "spend must be a gen_agent.Spend"),
])
def test_bad_caps_fail_the_start(options: dict[str, Any], message: str) -> None:
    with pytest.raises(gen_agent.AgentStartError) as failed:
        gen_agent.start_agent(Scripted, name="bad", backend=MockBackend, scripts=[], **options)
    assert message in str(failed.value.__cause__)


def test_the_pure_helpers() -> None:
    spend = add_turn(Spend(), {"input_tokens": 2, "output_tokens": 1, "tier": "x"}, 0.5)
    spend = add_turn(spend, None, None)
    assert spend == Spend(usage={"input_tokens": 2, "output_tokens": 1}, cost_usd=0.5, turns=2)
    assert total_tokens({"input_tokens": 2, "output_tokens": True}) == 2
    assert check_budget(spend, None, None) is None
    assert check_budget(spend, 0.5, None) == BudgetExceeded(limit="cost_usd", maximum=0.5,
                                                            spent=0.5)
    assert check_budget(spend, 1.0, 4) is None


class _CountingCap:
    """A spend cap of its own (not a SharedBudget): the `SpendCap` protocol is all it has."""

    def __init__(self, max_total_tokens: int) -> None:
        self.max_cost_usd: float | None = None
        self.max_total_tokens: int | None = max_total_tokens
        self.spent = Spend()
        self.charges = 0

    def charge(self, usage: Any, cost_usd: float | None, turns: int) -> None:
        self.charges += 1
        self.spent = add_turn(self.spent, dict(usage), cost_usd)

    def exceeded(self) -> BudgetExceeded | None:
        return check_budget(self.spent, None, self.max_total_tokens)

    def total(self) -> Spend:
        return self.spent


def test_one_budget_given_to_two_supervisors_is_one_cap_over_both() -> None:
    from gen_agent._supervisor import child_spec, supervisor_spec

    shared = gen_agent.SharedBudget(max_total_tokens=10)
    backend = MockBackend.with_options(fallback=turn("x", (6, 6), None))
    left = gen_agent.Supervisor([child_spec(Scripted, name="left", backend=backend)],
                                budget=shared)
    right = gen_agent.Supervisor([supervisor_spec(
        [child_spec(Scripted, name="right", backend=backend)], name="inner", budget=shared)])
    try:
        assert left.budget is shared and right.budget is None
        gen_agent.ask("left", "1", timeout=T)  # 12 tokens: the shared cap of 10 is reached
        with pytest.raises(TurnError) as refused:
            gen_agent.ask("right", "2", timeout=T)
        assert MockBackend.history("right") == []  # refused at dispatch
    finally:
        left.stop()
        right.stop()
    assert refused.value.reason == ("budget_exceeded",
                                    BudgetExceeded(limit="tokens", maximum=10, spent=12))
    assert shared.total().turns == 1


def test_a_pool_and_a_host_take_any_spend_cap_as_their_budget() -> None:
    cap = _CountingCap(max_total_tokens=5)
    backend = MockBackend.with_options(fallback=turn("x", (3, 3), None))
    pool = gen_agent.Pool(Scripted, size=2, backend=backend, budget=cap)
    try:
        assert pool.supervisor.budget is cap
        pool.result(pool.submit("q"), timeout=T)
        with pytest.raises(TurnError) as refused:
            pool.result(pool.submit("q"), timeout=T)
    finally:
        pool.stop()
    assert refused.value.reason[0] == "budget_exceeded"
    assert (cap.charges, cap.total().turns) == (1, 1)
    with gen_agent.AgentHost(Scripted, backend=backend, budget=cap) as host:
        assert host.budget is cap
        with pytest.raises(TurnError) as by_host:
            host.ask("k", "q")
    assert by_host.value.reason == ("budget_exceeded",
                                    BudgetExceeded(limit="tokens", maximum=5, spent=6))


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: gen_agent.Supervisor([], budget=gen_agent.SharedBudget(1.0), max_cost_usd=2.0),
     ValueError, "Supervisor takes budget= or max_cost_usd/max_total_tokens, not both"),
    (lambda: gen_agent.Supervisor([], budget={"max_cost_usd": 1.0}),
     TypeError, "Supervisor budget= must be a gen_agent.SharedBudget or"),
    (lambda: gen_agent.supervisor_spec([], name="s", budget=5),
     TypeError, "supervisor_spec budget= must be"),
    (lambda: gen_agent.Pool(Scripted, size=1, backend=MockBackend, budget="cap"),
     TypeError, "Pool budget= must be"),
    (lambda: gen_agent.AgentHost(Scripted, backend=MockBackend, max_total_tokens=3,
                                 budget=gen_agent.SharedBudget(max_total_tokens=3)),
     ValueError, "AgentHost takes budget= or"),
])
def test_a_budget_that_is_no_spend_cap_or_comes_with_caps_is_refused(
        make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make()

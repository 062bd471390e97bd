"""Start options at the client boundary (issue #15): a near miss of a reserved option warns at
the caller's line and still reaches `init_agent`; `resume_session=True` on a backend that
cannot resume is refused at once; `Pool.map` refuses a bare string."""

from __future__ import annotations

import warnings

import pytest

import gen_agent
from gen_agent import child_spec
from gen_agent.backends.mock import MockBackend


class _Opts(gen_agent.GenAgent):
    def init_agent(self, opts: dict) -> tuple[dict, dict]:
        return {}, dict(opts)


@pytest.mark.parametrize("typo, reserved", [("watchdog_msec", "watchdog_ms"),
                                            ("max_pending_prompt", "max_pending_prompts")])
def test_a_near_miss_of_a_reserved_option_warns_at_the_callers_line(typo: str,
                                                                    reserved: str) -> None:
    with pytest.warns(UserWarning, match=f"did you mean '{reserved}'") as caught:
        gen_agent.start_agent(_Opts, name="near", backend=MockBackend, **{typo: 5})
    assert caught[0].filename == __file__
    # it still reaches init_agent, as the contract says
    assert gen_agent.status("near", timeout=5).agent_state == {typo: 5}


def test_options_far_from_reserved_ones_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gen_agent.start_agent(_Opts, name="far", backend=MockBackend, scripts=[], model="x")


def test_child_spec_warns_for_a_near_miss_too() -> None:
    with pytest.warns(UserWarning, match="did you mean 'shutdown_ms'") as caught:
        child_spec(_Opts, name="c", backend=MockBackend, shutdown_msec=5)
    assert caught[0].filename == __file__


def test_a_pool_warns_once_under_its_own_name_not_once_per_worker() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pool = gen_agent.Pool(_Opts, size=3, backend=MockBackend, watchdog_msec=5)
        pool.stop()
    near = [w for w in caught if "did you mean" in str(w.message)]
    assert [str(w.message) for w in near] == [
        "Pool: option 'watchdog_msec' is not a reserved option and goes to init_agent; "
        "did you mean 'watchdog_ms'?"]
    assert near[0].filename == __file__


def test_resume_session_on_a_backend_that_cannot_resume_says_so() -> None:
    with pytest.warns(UserWarning, match="MockBackend cannot resume a session") as caught:
        child_spec(_Opts, name="c", backend=MockBackend, resume_session=True)
    assert caught[0].filename == __file__


@pytest.mark.parametrize(("option", "value", "message"), [
    ("watchdog_ms", float("nan"), "watchdog_ms must be a positive int (milliseconds) or "
                                  "'infinity', got nan"),
    ("watchdog_ms", float("-inf"), "watchdog_ms must be a positive int"),
    ("shutdown_ms", float("nan"), "shutdown_ms must be a non-negative int"),
    ("hibernate_after_ms", float("nan"), "hibernate_after_ms must be a non-negative int"),
    ("max_events_per_turn", float("inf"), "max_events_per_turn must be a positive int"),
    ("max_cost_usd", float("nan"), "max_cost_usd must be a finite number >= 0 (US dollars"),
])
def test_nan_and_infinities_are_refused_naming_the_accepted_range(
    option: str, value: float, message: str,
) -> None:
    # shutdown_ms is checked in the caller (a ValueError there, §2.2), the others at start.
    with pytest.raises((gen_agent.AgentStartError, ValueError)) as info:
        gen_agent.start_agent(_Opts, name="bounds", backend=MockBackend, **{option: value})
    assert message in str(info.value.__cause__ or info.value)
    gen_agent.start_agent(_Opts, name="bounds", backend=MockBackend)  # the name was not taken


def test_pool_map_refuses_a_single_string() -> None:
    with gen_agent.Pool(_Opts, size=1, backend=MockBackend) as pool:
        with pytest.raises(TypeError, match="map: prompts must be an iterable of str"):
            pool.map("abc")
        assert pool.status().queued == 0

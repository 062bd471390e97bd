"""The Pipeline recipe (docs/examples/pipeline.py, contract §10)."""

from __future__ import annotations

import queue

import pytest

import gen_agent
from gen_agent import SessionStartError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import ScriptedAgent

from ._loader import load_example

pipeline = load_example("pipeline")

STAGES = (("s1", "Outline:"), ("s2", "Draft:"), ("s3", "Polish:"))


def _start(scripts_by_stage: dict[str, list]) -> queue.Queue:
    results: queue.Queue = queue.Queue()
    for index, (name, instruction) in enumerate(STAGES):
        following = STAGES[index + 1][0] if index + 1 < len(STAGES) else None
        gen_agent.start_agent(pipeline.StageAgent, name=name, backend=MockBackend,
                              instruction=instruction, next=following, report_to=results,
                              backend_opts={"scripts": scripts_by_stage.get(name, [])})
    return results


def test_each_stage_feeds_the_next_and_halts() -> None:
    results = _start({"s1": [mock.text_turn("o")], "s2": [mock.text_turn("d")],
                      "s3": [mock.text_turn("p")]})
    pipeline.feed(["s1", "s2", "s3"], "input")

    assert results.get(timeout=5) == ("ok", "p")
    assert MockBackend.history("s1") == ["Outline:\n\ninput"]
    assert MockBackend.history("s2") == ["Draft:\n\no"]
    assert MockBackend.history("s3") == ["Polish:\n\nd"]
    for name, output in (("s1", "o"), ("s2", "d"), ("s3", "p")):
        status = gen_agent.status(name)
        assert status.halted and status.agent_state.output == output


def test_a_failure_is_forwarded_and_later_stages_halt_without_dispatching() -> None:
    results = _start({"s1": [mock.text_turn("o")], "s2": [mock.error_turn("refused")],
                      "s3": [mock.text_turn("never")]})
    pipeline.feed(["s1", "s2", "s3"], "input")

    assert results.get(timeout=5) == ("error", ("upstream_failed", "refused"))
    assert MockBackend.history("s3") == []                      # nothing dispatched
    assert gen_agent.status("s2").agent_state.error == "refused"
    s3 = gen_agent.status("s3")
    assert s3.halted and s3.agent_state.error == ("upstream_failed", "refused")


def test_start_pipeline_rolls_back_only_the_stages_it_started() -> None:
    squatter = gen_agent.start_agent(ScriptedAgent, name="s3", backend=MockBackend)
    with pytest.raises(gen_agent.AlreadyStarted):
        pipeline.start_pipeline(STAGES, report_to=queue.Queue(), backend=MockBackend,
                                backend_opts={"scripts": []})
    assert gen_agent.whereis("s1") is None and gen_agent.whereis("s2") is None
    assert gen_agent.whereis("s3") == squatter and squatter.is_alive()


class _ThirdStartFails(MockBackend):
    starts = 0

    @classmethod
    def start_session(cls, opts):
        cls.starts += 1
        if cls.starts == 3:
            raise SessionStartError("no capacity")
        return super().start_session(opts)


def test_a_failed_start_rolls_back_the_stages_started_before_it() -> None:
    with pytest.raises(gen_agent.AgentStartError) as failed:
        pipeline.start_pipeline(STAGES, report_to=queue.Queue(), backend=_ThirdStartFails,
                                backend_opts={"scripts": []})
    assert failed.value.reason == ("backend_start_failed", "no capacity")
    assert _ThirdStartFails.starts == 3
    assert gen_agent.list_agents() == []


def test_main_runs_on_the_mock_backend(capsys) -> None:
    pipeline.main([])
    assert capsys.readouterr().out.strip() == (
        "ok [polish] [write] [outline] Agents are actors whose every call is a prompt.")

"""The Debate recipe (docs/examples/debate.py, contract §10)."""

from __future__ import annotations

import queue

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._loader import load_example

debate = load_example("debate")


def _start(pro_scripts, con_scripts, *, max_rounds: int) -> queue.Queue:
    reports: queue.Queue = queue.Queue()
    for name, opponent, stance, scripts in (("pro", "con", "for", pro_scripts),
                                            ("con", "pro", "against", con_scripts)):
        gen_agent.start_agent(debate.Debater, name=name, backend=MockBackend,
                              opponent=opponent, stance=stance, topic="tabs or spaces",
                              max_rounds=max_rounds, report_to=reports,
                              backend_opts={"scripts": scripts})
    gen_agent.notify("pro", ("open",))
    return reports


def _reports(reports: queue.Queue) -> set:
    return {reports.get(timeout=5), reports.get(timeout=5)}


def test_each_side_speaks_max_rounds_times_and_both_transcripts_are_identical() -> None:
    reports = _start([mock.text_turn(f"pro {i}") for i in (1, 2, 3)],
                     [mock.text_turn(f"con {i}") for i in (1, 2, 3)], max_rounds=3)

    assert _reports(reports) == {("debate", "pro", "finished"), ("debate", "con", "finished")}
    pro, con = (gen_agent.status(n).agent_state for n in ("pro", "con"))
    expected = tuple((speaker, f"{speaker} {i}") for i in (1, 2, 3) for speaker in ("pro", "con"))
    assert pro.transcript == con.transcript == expected
    assert pro.spoken == con.spoken == 3
    assert gen_agent.status("pro").halted and gen_agent.status("con").halted
    assert len(MockBackend.history("pro")) == len(MockBackend.history("con")) == 3
    # Each reply prompt carries the opponent's last statement.
    assert "pro 2" in MockBackend.history("con")[1]
    assert "con 1" in MockBackend.history("pro")[1]


def test_a_failed_turn_halts_both_sides_and_names_the_failing_one() -> None:
    reports = _start([mock.text_turn("pro 1"), mock.text_turn("pro 2")],
                     [mock.text_turn("con 1"), mock.error_turn("boom")], max_rounds=3)

    assert _reports(reports) == {("debate", "con", ("failed", "boom")),
                                 ("debate", "pro", ("failed", ("opponent_failed", "con")))}
    for name in ("pro", "con"):
        status = gen_agent.status(name)
        assert status.halted and status.agent_state.outcome[0] == "failed"
    assert len(MockBackend.history("pro")) == 2               # nothing after the failure


def test_start_debate_opens_with_the_first_name() -> None:
    reports: queue.Queue = queue.Queue()
    debate.start_debate("naming", max_rounds=1, report_to=reports, backend=MockBackend,
                        backend_opts={"scripts": [mock.text_turn("x")]})
    assert _reports(reports) == {("debate", "pro", "finished"), ("debate", "con", "finished")}
    assert gen_agent.status("pro").agent_state.transcript == (("pro", "x"), ("con", "x"))
    assert MockBackend.history("pro")[0] == debate.opening_prompt(
        gen_agent.status("pro").agent_state)


def test_main_runs_on_the_mock_backend(capsys) -> None:
    debate.main([])
    out = capsys.readouterr().out
    assert "identical transcripts: True" in out
    assert out.count("pro: ") == 2 and out.count("con: ") == 2

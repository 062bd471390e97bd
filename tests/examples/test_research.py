"""The Research recipe (docs/examples/research.py, contract §10)."""

from __future__ import annotations

import pytest

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import wait_for_state

from ._loader import load_example

research = load_example("research")

LISTING = ("Sure! Here is what I would ask:\n"
           "1. What is an actor?\n"
           "2) Why use supervision\n"          # no "?": not a question
           "- How do mailboxes order messages?\n"
           "3. Who invented it?\n")


def _start(*scripts, max_sub_questions: int = 2) -> None:
    research.start_research("r", "actors", backend=MockBackend,
                            backend_opts={"scripts": list(scripts)},
                            max_sub_questions=max_sub_questions)


def test_parse_questions_strips_numbering_and_ignores_the_preamble() -> None:
    assert research.parse_questions(LISTING, 5) == (
        "What is an actor?", "How do mailboxes order messages?", "Who invented it?")
    assert research.parse_questions(LISTING, 2) == (
        "What is an actor?", "How do mailboxes order messages?")
    assert research.parse_questions("No questions here.", 3) == ()


def test_it_lists_answers_each_question_synthesizes_and_halts_with_the_report() -> None:
    _start(mock.text_turn(LISTING), mock.text_turn("A1"), mock.text_turn("A2"),
           mock.text_turn("The report."))

    outcome, state = research.wait_report("r", timeout=5)

    assert outcome == "ok" and state.phase == "done" and state.report == "The report."
    assert state.questions == ("What is an actor?", "How do mailboxes order messages?")
    assert state.answers == ("A1", "A2")
    prompts = MockBackend.history("r")
    assert len(prompts) == 4 and prompts[0].startswith("List at most 2 sub-questions")
    assert prompts[1].endswith("Answer briefly: What is an actor?")
    assert prompts[2].endswith("Answer briefly: How do mailboxes order messages?")
    assert "Q: What is an actor?\nA: A1" in prompts[3]
    assert gen_agent.status("r").halted


def test_no_questions_halts_failed() -> None:
    _start(mock.text_turn("I cannot think of anything."))
    assert research.wait_report("r", timeout=5) == ("error", "no_questions")
    assert gen_agent.status("r").agent_state.phase == "failed"


def test_any_error_halts_failed_with_last_error() -> None:
    _start(mock.text_turn(LISTING), mock.error_turn("rate_limited"))
    assert research.wait_report("r", timeout=5) == ("error", "rate_limited")
    state = gen_agent.status("r").agent_state
    assert state.phase == "failed" and state.last_error == "rate_limited"


def test_a_resumed_finished_agent_keeps_its_report_and_halts_again() -> None:
    _start(mock.text_turn(LISTING), mock.text_turn("A1"), mock.text_turn("A2"),
           mock.text_turn("The report."))
    research.wait_report("r", timeout=5)

    gen_agent.resume("r")
    with pytest.raises(gen_agent.TurnError) as refused:
        gen_agent.ask("r", "Tell me more.", timeout=5)
    assert refused.value.reason == "pre_turn_halted"
    status = wait_for_state("r", lambda s: s.halted)
    assert status.agent_state.report == "The report." and status.agent_state.phase == "done"
    assert len(MockBackend.history("r")) == 4                   # nothing was dispatched


def test_wait_report_times_out_while_the_agent_still_works() -> None:
    gate = mock.gate(mock.text_turn(LISTING))
    _start(gate)
    gate.wait_blocked(5)
    assert research.wait_report("r", timeout=0.05) == ("error", "timeout")
    gate.release()


def test_main_runs_on_the_mock_backend(capsys) -> None:
    research.main([])
    out = capsys.readouterr().out
    assert "asked: What problem does it solve?" in out
    assert out.rstrip().splitlines()[-1].startswith("Report: In short:")

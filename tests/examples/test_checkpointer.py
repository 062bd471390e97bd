"""The Checkpointer recipe (docs/examples/checkpointer.py, contract §10)."""

from __future__ import annotations

import queue

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import wait_until_idle

from ._loader import load_example

checkpointer = load_example("checkpointer")


def _start(*scripts) -> queue.Queue:
    reviewer: queue.Queue = queue.Queue()
    checkpointer.start_checkpointer("cp", "actors", reviewer=reviewer, backend=MockBackend,
                                    backend_opts={"scripts": list(scripts)})
    return reviewer


def _draft(reviewer: queue.Queue) -> tuple[str, str]:
    kind, token, text = reviewer.get(timeout=5)
    assert kind == "draft"
    return token, text


def test_each_draft_waits_idle_for_a_review_and_decisions_drive_the_next_turn() -> None:
    reviewer = _start(mock.text_turn("d1"), mock.text_turn("d1 shorter"), mock.text_turn("d2"))
    token, text = _draft(reviewer)
    status = wait_until_idle("cp")
    review = gen_agent.status("cp").agent_state
    assert text == "d1" and review.phase == "awaiting_review" and not status.halted

    gen_agent.notify("cp", ("review", token, ("revise", "shorter")))
    token2, text = _draft(reviewer)
    assert text == "d1 shorter" and token2 != token
    gen_agent.notify("cp", ("review", token2, "approve"))
    token3, text = _draft(reviewer)
    gen_agent.notify("cp", ("review", token3, "finish"))

    assert reviewer.get(timeout=5) == ("finished", ("d1 shorter", "d2"))
    assert MockBackend.history("cp") == [
        checkpointer.section_prompt("actors", 1),
        checkpointer.revise_prompt("d1", "shorter"),
        checkpointer.section_prompt("actors", 2)]
    final = gen_agent.status("cp")
    assert final.halted and final.agent_state.phase == "finished"


def test_stale_duplicate_and_queued_decisions_are_ignored() -> None:
    second = mock.gate(mock.text_turn("d2"))
    reviewer = _start(mock.text_turn("d1"), second, mock.text_turn("never"))
    token1, _ = _draft(reviewer)
    gen_agent.notify_ack("cp", ("review", "not-a-token", "finish"))
    gen_agent.notify_ack("cp", ("review", token1, "approve"))
    second.wait_blocked(5)
    # Sent while the next draft is being written: applied after its handle_response.
    gen_agent.notify_ack("cp", ("review", token1, "approve"))   # duplicate
    gen_agent.notify_ack("cp", ("review", token1, "finish"))    # stale
    second.release()

    token2, text = _draft(reviewer)
    wait_until_idle("cp")
    review = gen_agent.status("cp").agent_state
    assert (text, review.phase, review.token, review.sections) == (
        "d2", "awaiting_review", token2, ("d1",))
    assert len(MockBackend.history("cp")) == 2 and reviewer.empty()


def test_an_error_is_a_visible_phase_and_retry_resends_the_failed_prompt() -> None:
    reviewer = _start(mock.text_turn("d1"), mock.error_turn("overloaded"), mock.text_turn("d2"))
    token, _ = _draft(reviewer)
    gen_agent.notify("cp", ("review", token, "approve"))
    kind, failure_ref, reason = reviewer.get(timeout=5)
    assert (kind, reason) == ("failed", "overloaded")
    wait_until_idle("cp")
    review = gen_agent.status("cp").agent_state
    assert (review.phase, review.failure_ref, review.failed_prompt) == (
        "failed", failure_ref, checkpointer.section_prompt("actors", 2))

    gen_agent.notify_ack("cp", ("retry", "some other ref"))     # ignored
    assert gen_agent.status("cp").agent_state.phase == "failed"
    gen_agent.notify("cp", ("retry", failure_ref))
    assert _draft(reviewer)[1] == "d2"
    assert MockBackend.history("cp")[1:] == [checkpointer.section_prompt("actors", 2)] * 2


def test_main_runs_on_the_mock_backend(capsys) -> None:
    checkpointer.main([])
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("-> ('revise', 'shorter')") and out[1].endswith("-> approve")
    assert out[-1].startswith("('finished', ('Revised: shorter', 'Drafted section 2")

"""The resume recipe of the durable-sessions guide (docs/examples/guide/resume.py): a turn cut
short inside a side-effecting tool is reported at the restart and re-sent without running the
tool again."""

from __future__ import annotations

import pytest

from ._loader import load_example


def test_the_resume_recipe_reports_the_call_in_doubt_and_never_refunds_twice() -> None:
    pytest.importorskip("anthropic", reason="the anthropic extra is not installed")
    resume = load_example("guide/resume")
    report, refunds, requests = resume.demo()
    assert report == [
        "chat-42: refund {'order_id': 'A-17', 'cents': 1250} may have run; check it",
        "chat-42: re-sent, answered: I could not confirm the refund; please check order A-17."]
    assert refunds == [("A-17", 1250)]  # once: the re-sent call was answered from the journal
    # the cut turn's one; the re-sent turn's two (the calls, then the answer)
    assert requests == 3

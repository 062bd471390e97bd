"""The Switchboard recipe (docs/examples/switchboard.py, contract §10)."""

from __future__ import annotations

import queue

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import wait_for_state

from ._loader import load_example

sb = load_example("switchboard")


def _board() -> sb.Switchboard:
    return sb.Switchboard(MockBackend, {})


def _wait(done: queue.Queue) -> tuple:
    return done.get(timeout=5)


def test_every_turn_is_an_entry_and_the_inbox_cursor_only_moves_forward() -> None:
    board = _board()
    assert board.start("a", summary="s0", scripts=[mock.text_turn("one"),
                                                   mock.error("boom")]) == ("ok", "a")
    done: queue.Queue = queue.Queue()
    ok, ref = board.submit("a", "p1", on_done=done)
    assert ok == "ok" and _wait(done)[4] == ("ok", gen_agent.poll("a", ref).response)
    assert board.poll("a", ref) == ("ok", "one")

    (entries, acked) = board.inbox("a")[1]
    assert [(e.seq, e.text, e.error) for e in entries] == [(1, "one", None)] and acked
    assert board.inbox("a") == ("ok", ((), False))          # read: nothing new

    board.submit("a", "p2", on_done=done)
    _wait(done)
    gen_agent.notify_ack("a", ("ack", 0))                    # an old acknowledgement...
    (entries, acked) = board.inbox("a")[1]                   # ...never moves it back
    assert [(e.seq, e.text, e.error) for e in entries] == [(2, None, "boom")] and acked
    assert [e.seq for e in board.transcript("a")[1]] == [1, 2]
    assert [e.seq for e in board.transcript("a", last=1)[1]] == [2]
    assert board.summary("a") == ("ok", "s0")
    assert board.update_summary("a", "s1") == ("ok", "s1")
    assert board.summary("a") == ("ok", "s1")


def test_busy_sessions_queue_and_broadcast_reports_per_name_outcomes() -> None:
    board = _board()
    gate_a, gate_b = mock.gate(mock.text_turn("a1")), mock.gate(mock.text_turn("b1"))
    board.start("a", scripts=[gate_a, mock.text_turn("a2")])
    gen_agent.start_agent(sb.Session, name="b", backend=MockBackend, max_pending_prompts=0,
                          backend_opts={"scripts": [gate_b]})
    board.submit("a", "first")
    board.submit("b", "first")
    gate_a.wait_blocked(5)
    gate_b.wait_blocked(5)

    outcomes = board.broadcast(["a", "b", "ghost"], "second")

    assert outcomes["a"][0] == "ok"                          # busy: simply queued
    assert outcomes["b"][0] == "error" and outcomes["b"][1][0] == "overloaded"
    assert outcomes["ghost"] == ("error", "not_found")
    assert gen_agent.status("a").queued == 1
    gate_a.release()
    gate_b.release()
    wait_for_state("a", lambda s: len(s.agent_state.history) == 2)
    assert [e.text for e in board.transcript("a")[1]] == ["a1", "a2"]
    assert MockBackend.history("a") == ["first", "second"]


def test_a_rejected_acknowledgement_keeps_the_entries_unread() -> None:
    board = _board()
    gate = mock.gate(mock.text_turn("two"))
    gen_agent.start_agent(sb.Session, name="a", backend=MockBackend,
                          max_pending_notifications=0,
                          backend_opts={"scripts": [mock.text_turn("one"), gate]})
    done: queue.Queue = queue.Queue()
    board.submit("a", "p1", on_done=done)
    _wait(done)
    board.submit("a", "p2", on_done=done)
    gate.wait_blocked(5)

    (entries, acked) = board.inbox("a")[1]                   # busy, no room to buffer
    assert [e.seq for e in entries] == [1] and not acked

    gate.release()
    _wait(done)
    (entries, acked) = board.inbox("a")[1]
    assert [e.seq for e in entries] == [1, 2] and acked


def test_halt_by_notification_resume_stop_and_missing_names() -> None:
    board = _board()
    board.start("a", scripts=[mock.text_turn("late")])
    board.halt("a")
    assert gen_agent.status("a").halted                       # the session halted itself
    done: queue.Queue = queue.Queue()
    assert board.submit("a", "queued while halted", on_done=done)[0] == "ok"
    assert done.empty() and gen_agent.status("a").queued == 1
    board.resume("a")
    assert _wait(done)[4][1].text == "late"

    assert board.stop("a") == ("ok", "a")
    for call in (board.stop, board.inbox, board.summary, board.transcript):
        assert call("a") == ("error", "not_found")
    assert board.submit("a", "x") == ("error", "not_found")
    assert board.poll("a", object()) == ("error", "not_found")
    assert board.update_summary("a", "x") == ("error", "not_found")
    assert board.interrupt("a") is None and board.halt("a") is None   # casts never fail
    assert board.resume("a") is None
    assert board.start("b", nonsense=1)[0] == "error"          # a backend option error


def test_main_runs_on_the_mock_backend(capsys) -> None:
    sb.main([])
    out = capsys.readouterr().out
    assert "carol: ('error', 'not_found')" in out
    assert "alice #1: Done: Report your status in one line." in out
    assert "alice: acknowledged=True, unread after ack=0" in out

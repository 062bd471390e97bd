"""`CancelSignal`: the turn's set-once flag with an on-demand event."""

from __future__ import annotations

import threading

from gen_agent._cancel import CancelSignal


def test_flag_before_and_after_set() -> None:
    signal = CancelSignal()
    assert not signal.is_set()
    assert signal.wait(0) is False
    signal.set()
    signal.set()  # idempotent
    assert signal.is_set()
    assert signal.wait(0) is True


def test_an_event_made_after_set_is_already_set() -> None:
    signal = CancelSignal()
    signal.set()
    assert signal.event.is_set()


def test_a_waiter_on_the_event_is_woken_by_set() -> None:
    signal = CancelSignal()
    event = signal.event
    woke = threading.Event()
    thread = threading.Thread(target=lambda: event.wait(10) and woke.set())
    thread.start()
    signal.set()
    assert woke.wait(10)
    thread.join(10)
    assert signal.event is event  # one event per signal


# -- TurnMark --------------------------------------------------------------------------------


def test_a_mark_answers_the_waits_it_watches_once_and_later_ones_at_once() -> None:
    from gen_agent._cancel import TurnMark
    from gen_agent._runtime.reply import DeferredReply

    mark = TurnMark("ref-1")
    first, second, gone = DeferredReply(), DeferredReply(), DeferredReply()
    mark.watch(first, "deny")
    mark.watch(gone, "deny")
    mark.unwatch(gone)  # its wait ended: not answered by the mark
    assert not mark.marked and not first.done
    mark.mark()
    mark.mark()  # idempotent
    assert mark.marked
    assert first.wait(0) == "deny"
    assert not gone.done
    mark.watch(second, "deny")  # after the mark: answered at once
    assert second.wait(0) == "deny"
    assert first.resolve("allow") is False  # the late answer goes nowhere


def test_a_handle_marks_the_running_turn_for_interrupts_and_stops_only() -> None:
    from gen_agent._cancel import TurnMark
    from gen_agent._runtime.handle import AgentHandle
    from gen_agent._runtime.mailbox import (
        AbandonAskMsg,
        InterruptMsg,
        InterruptRequestMsg,
        StatusMsg,
        StopMsg,
    )

    handle = AgentHandle(None, "n", object, None)
    mark = TurnMark("ref-1")
    handle.turn_mark = mark
    assert handle._mark_for(StatusMsg(None)) is None
    assert handle._mark_for(InterruptRequestMsg("other", None)) is None
    assert handle._mark_for(AbandonAskMsg("ref-1")) is None  # gave up, without cancel
    for message in (InterruptMsg(), StopMsg("shutdown", None),
                    InterruptRequestMsg("ref-1", None), AbandonAskMsg("ref-1", timed_out=True)):
        assert handle._mark_for(message) is mark
    mark.deadline = 100.0
    handle.mark_due(99.0)
    assert not mark.marked
    handle.mark_due(100.0)
    assert mark.marked

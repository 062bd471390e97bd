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

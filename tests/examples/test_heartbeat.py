"""The Heartbeat recipe (docs/examples/heartbeat.py, contract §10).

Ticks are messages: most tests send them by hand (`gen_agent.send`), and a `status` call
afterwards returns only once the agent handled them (its mailbox is FIFO). One test runs the
real `Ticker` thread and waits for the batch it triggers.
"""

from __future__ import annotations

import queue

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

from ._loader import load_example

heartbeat = load_example("heartbeat")


def _start(*scripts, min_batch: int = 2) -> tuple[gen_agent.AgentRef, queue.Queue]:
    outcomes: queue.Queue = queue.Queue()
    ref = gen_agent.start_agent(heartbeat.HeartbeatAgent, name="hb", backend=MockBackend,
                                backend_opts={"scripts": list(scripts)}, min_batch=min_batch,
                                report_to=outcomes)
    return ref, outcomes


def _observe(*texts: str) -> None:
    for text in texts:
        gen_agent.notify_ack("hb", ("observe", text))


def _tick(ref: gen_agent.AgentRef) -> gen_agent.Status:
    gen_agent.send("hb", ("tick", ref))
    return gen_agent.status("hb")            # answered after the tick was handled


def test_a_tick_starts_a_batch_only_with_enough_observations() -> None:
    ref, outcomes = _start(mock.text_turn("summary 1"))
    _observe("a")
    status = _tick(ref)
    assert status.state == "idle" and MockBackend.history("hb") == []

    _observe("b")
    _tick(ref)
    assert outcomes.get(timeout=5) == ("ok", "summary 1")
    assert MockBackend.history("hb") == [heartbeat.batch_prompt(["a", "b"])]
    beat = gen_agent.status("hb").agent_state
    assert beat.summaries == ("summary 1",) and beat.observations == ()


def test_a_failed_batch_goes_back_in_front_of_newer_observations() -> None:
    failing = mock.gate(mock.error_turn("model_down"))
    ref, outcomes = _start(failing, mock.text_turn("summary"))
    _observe("a", "b")
    _tick(ref)
    failing.wait_blocked(5)
    _observe("c")                                 # arrives while the batch is in flight
    failing.release()
    assert outcomes.get(timeout=5) == ("error", "model_down")
    beat = gen_agent.status("hb").agent_state
    assert beat.observations == ("a", "b", "c") and beat.in_flight is None
    assert len(MockBackend.history("hb")) == 1   # no immediate retry

    _tick(ref)                                    # the next tick retries, with "c" too
    assert outcomes.get(timeout=5) == ("ok", "summary")
    assert MockBackend.history("hb")[1] == heartbeat.batch_prompt(["a", "b", "c"])


def test_a_replacement_agent_ignores_a_stale_tickers_pulses() -> None:
    old, _ = _start()
    old.stop()
    new, outcomes = _start(mock.text_turn("fresh"), min_batch=1)
    _observe("x")
    assert _tick(old).state == "idle"             # stale: the ref is the old incarnation's
    assert MockBackend.history("hb") == []
    _tick(new)
    assert outcomes.get(timeout=5) == ("ok", "fresh")


def test_the_ticker_drives_batches_and_stops_with_its_agent() -> None:
    ref, outcomes = _start(mock.text_turn("from the ticker"))
    ticker = heartbeat.Ticker(ref, interval_ms=5)
    _observe("a", "b")
    assert outcomes.get(timeout=5) == ("ok", "from the ticker")
    ref.stop()
    assert ticker.join(timeout=5)


def test_main_runs_on_the_mock_backend(capsys) -> None:
    heartbeat.main([])
    assert capsys.readouterr().out.splitlines() == ["2 observations, nothing unusual"] * 3

"""The Retry recipe (docs/examples/retry.py, contract §10).

Backoff runs on real timers (`gen_agent.send_after`) with a 5 ms base: the tests assert the
order of attempts and the delays the agent computed, never how long anything took. The
responsiveness tests use a one-minute base, so the agent is certainly still backing off.
"""

from __future__ import annotations

import queue

import gen_agent
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.testing import wait_for_state, wait_until_idle

from ._loader import load_example

retry = load_example("retry")


def _start(*scripts, base_delay_ms: float = 5, max_attempts: int = 4, **opts) -> queue.Queue:
    reports: queue.Queue = queue.Queue()
    gen_agent.start_agent(retry.RetryingAgent, name="job", backend=MockBackend,
                          backend_opts={"scripts": list(scripts)}, report_to=reports,
                          base_delay_ms=base_delay_ms, max_attempts=max_attempts, **opts)
    gen_agent.notify("job", ("run", "the question"))
    return reports


def _backing_off() -> object:
    return wait_for_state("job", lambda s: s.agent_state.phase == "backing_off").agent_state


def test_it_backs_off_exponentially_then_succeeds() -> None:
    reports = _start(mock.error_turn("e1"), mock.error_turn("e2"), mock.error_turn("e3"),
                     mock.text_turn("answer"))
    assert reports.get(timeout=5) == ("done", "answer")
    job = gen_agent.status("job").agent_state
    assert job.attempts == 4 and job.delays_ms == (5, 10, 20)
    assert job.errors == ("e1", "e2", "e3")
    assert MockBackend.history("job") == ["the question"] * 4


def test_it_gives_up_after_max_attempts() -> None:
    reports = _start(*[mock.error_turn(f"e{i}") for i in (1, 2, 3)], max_attempts=3)
    assert reports.get(timeout=5) == ("failed", "e3")
    job = gen_agent.status("job").agent_state
    assert (job.phase, job.attempts, job.delays_ms) == ("failed", 3, (5, 10))
    assert gen_agent.status("job").halted


def test_it_stays_responsive_while_backing_off_and_ignores_stale_tokens() -> None:
    _start(mock.error_turn("e1"), mock.text_turn("answer"), base_delay_ms=60_000)
    job = _backing_off()
    snapshot = wait_until_idle("job")
    assert snapshot.phase == "idle" and not snapshot.halted    # no turn: it just waits
    gen_agent.interrupt("job")                                  # nothing to interrupt
    gen_agent.send("job", ("retry", job.token - 1))            # a stale token
    gen_agent.send("job", ("retry", "garbage"))
    after = gen_agent.status("job").agent_state
    assert after.phase == "backing_off" and after.attempts == 1
    assert len(MockBackend.history("job")) == 1

    gen_agent.send("job", ("retry", job.token))                # what the timer will send
    assert wait_for_state("job", lambda s: s.halted).agent_state.result == "answer"
    job.timer.cancel()


def test_cancel_retry_halts_cancelled_and_cancels_the_timer() -> None:
    reports = _start(mock.error_turn("e1"), base_delay_ms=60_000)
    job = _backing_off()
    gen_agent.notify("job", ("cancel_retry",))
    assert reports.get(timeout=5) == ("cancelled", "e1")
    assert job.timer.cancelled
    gen_agent.send("job", ("retry", job.token))                 # late: ignored
    assert gen_agent.status("job").agent_state.phase == "cancelled"
    assert len(MockBackend.history("job")) == 1


def test_timeout_gives_up_at_once() -> None:
    reports = _start(mock.gate(mock.text_turn("too late")), watchdog_ms=50)
    assert reports.get(timeout=5) == ("failed", "timeout")
    assert gen_agent.status("job").agent_state.delays_ms == ()


def test_interrupted_gives_up_at_once() -> None:
    held = mock.gate(mock.text_turn("never"))
    reports = _start(held)
    held.wait_blocked(5)
    gen_agent.interrupt("job")
    assert reports.get(timeout=5) == ("failed", "interrupted")
    assert len(MockBackend.history("job")) == 1


def test_terminate_agent_cancels_the_timer() -> None:
    _start(mock.error_turn("e1"), base_delay_ms=60_000)
    job = _backing_off()
    gen_agent.stop("job")
    assert job.timer.cancelled


def test_main_runs_on_the_mock_backend(capsys) -> None:
    retry.main([])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "done after 3 attempts; backoff delays (ms): [50, 100]"
    assert out[1] == "errors: ['overloaded', 'overloaded']"

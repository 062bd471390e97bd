"""The shared timer thread cannot be killed by a duration, and is replaced if it dies anyway;
every duration a user gives is checked against what the platform can wait."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from _agents import Scripted

import gen_agent
from gen_agent import telemetry
from gen_agent._errors import AgentStartError
from gen_agent._limits import ProviderLimit
from gen_agent._pool import RetryPolicy
from gen_agent._runtime.options import build_options
from gen_agent._timers import MAX_DURATION_MS, TIMERS, TimerService, wait_s
from gen_agent.backend import MAX_RETRY_AFTER_MS, BackendError
from gen_agent.backends.claude import ClaudeCLI
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import TelemetryRecorder

WAIT_S = 5.0


@pytest.fixture
def timers() -> Any:
    service = TimerService(idle_s=0.2)
    yield service
    thread = service.thread
    if thread is not None:
        service.schedule(0, lambda: None)  # wakes it: the cancelled deadlines go, it idles out
        thread.join(WAIT_S)
        assert not thread.is_alive()


@pytest.mark.parametrize("far", [threading.TIMEOUT_MAX * 2, 1e15, math.inf])
def test_a_deadline_beyond_timeout_max_does_not_stop_a_50_ms_one(timers: TimerService,
                                                                  far: float):
    fired = threading.Event()
    far_handle = timers.schedule(far, lambda: None)  # waited for in bounded steps
    timers.schedule(0.05, fired.set)
    assert fired.wait(WAIT_S)
    assert timers.thread is not None and timers.thread.is_alive()
    again = threading.Event()
    timers.schedule(0.05, again.set)  # the thread still serves new deadlines
    assert again.wait(WAIT_S)
    far_handle.cancel()


def test_a_dead_timer_thread_is_reported_and_replaced_by_the_next_schedule(
        timers: TimerService, monkeypatch: pytest.MonkeyPatch):
    failing = [True]
    serve = timers._serve

    def broken() -> None:
        if failing[0]:
            failing[0] = False
            raise RuntimeError("timer loop bug")
        serve()

    monkeypatch.setattr(timers, "_serve", broken)
    with TelemetryRecorder([telemetry.TIMER_FAILED]) as recorder:
        timers.schedule(0.01, lambda: None)
        record = recorder.wait_for(telemetry.TIMER_FAILED, timeout=WAIT_S)
    assert record.metadata == {"error_type": "RuntimeError"}
    fired = threading.Event()
    timers.schedule(0.02, fired.set)  # a new thread serves it
    assert fired.wait(WAIT_S)


@pytest.mark.parametrize(("timeout", "expected"), [
    (None, None), (math.inf, None), (threading.TIMEOUT_MAX * 10, None), (1e300, None),
    (2.5, 2.5), (-1, 0.0), (threading.TIMEOUT_MAX, threading.TIMEOUT_MAX)])
def test_wait_s_turns_a_timeout_beyond_the_limit_into_forever(timeout: Any, expected: Any):
    assert wait_s(timeout) == expected


@pytest.mark.parametrize("key", ["watchdog_ms", "shutdown_ms", "hibernate_after_ms"])
def test_a_start_option_beyond_timeout_max_fails_the_start_with_the_range(key: str):
    value = MAX_DURATION_MS + 1
    with pytest.raises(ValueError, match=f"{key} must be at most {MAX_DURATION_MS}"):
        build_options({key: value})
    assert build_options({key: MAX_DURATION_MS}) is not None
    if key == "shutdown_ms":  # checked in the caller, as every invalid shutdown_ms (§2.2)
        with pytest.raises(ValueError, match=str(MAX_DURATION_MS)):
            gen_agent.start_agent(Scripted, name="huge", backend=MockBackend, shutdown_ms=10**15)
        return
    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(Scripted, name="huge", backend=MockBackend, **{key: 10**15})
    assert info.value.reason == ("init_failed", "error", "ValueError")
    assert str(MAX_DURATION_MS) in str(info.value.__cause__)


@pytest.mark.parametrize("key", ["exit_grace_ms", "term_grace_ms", "idle_timeout_ms",
                                 "interrupt_grace_ms", "permission_timeout_ms"])
def test_a_backend_duration_beyond_timeout_max_is_an_invalid_option(key: str):
    from gen_agent.backend import SessionStartError

    with pytest.raises(SessionStartError) as info:
        ClaudeCLI.start_session({"cli_path": "sh", key: 10**15})
    assert info.value.reason == ("invalid_option", key, 10**15)
    assert str(MAX_DURATION_MS) in str(info.value)


def test_send_after_and_retry_policy_check_their_delays():
    with pytest.raises(ValueError, match="delay_ms must be from 0"):
        gen_agent.send_after("anyone", "hi", 10**15)
    with pytest.raises(ValueError, match="delay_ms must be from 0"):
        gen_agent.send_after("anyone", "hi", math.nan)
    with pytest.raises(TypeError, match="delay_ms"):
        gen_agent.send_after("anyone", "hi", "1")  # type: ignore[arg-type]
    for key in ("base_delay_ms", "max_delay_ms"):
        with pytest.raises(ValueError, match=key):
            RetryPolicy(**{key: 10**15})


@pytest.mark.parametrize(("header", "expected"), [
    ("2", 2000), ("1.5", 1500), ("10000000000000", MAX_RETRY_AFTER_MS),
    ("inf", MAX_RETRY_AFTER_MS), ("1e400", MAX_RETRY_AFTER_MS), ("nan", None),
    ("-5", 0), ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER_MS),
    ("Thu, 01 Jan 1970 00:00:00 GMT", 0), ("soon", None)])
def test_a_provider_sent_delay_is_clamped_to_an_hour(header: str, expected: Any):
    error = BackendError.new("test", "rate_limited", None, retryable=True, status=429,
                             retry_after=header)
    assert error.retry_after_ms == expected


def test_a_caller_timeout_beyond_the_limit_waits_forever():
    agent = gen_agent.start_agent(Scripted, name="patient", backend=MockBackend)
    try:
        # Answered: the wait was possible (it raised OverflowError before).
        assert agent.status(timeout=threading.TIMEOUT_MAX * 2) is not None
        assert agent.status(timeout=math.inf) is not None
    finally:
        gen_agent.stop("patient")


def test_a_huge_provider_hold_leaves_the_shared_timer_thread_serving():
    limit = ProviderLimit("huge-hold", max_concurrent=1)
    limit.hold(1e16)  # a 429's Retry-After of 10**13 s, had it not been clamped
    fired = threading.Event()
    TIMERS.schedule(0.05, fired.set)
    assert fired.wait(WAIT_S)
    assert TIMERS.thread is not None and TIMERS.thread.is_alive()

"""Failures are debuggable (issue #15): the waiting caller gets the original exception as
`__cause__`, `str()` of the error says what happened, and the log record carries the
traceback's frames, never the exception message unless `gen_agent.set_debug(True)`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

import gen_agent
from gen_agent import NoReply
from gen_agent._errors import AgentDown, AgentStartError, TurnError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend

T = 5.0  # seconds: the bound of every wait in this file
SECRET = "SECRET-9d1e"


class Records:
    """Every loguru record of the test, thread-safely."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, message: Any) -> None:
        with self._lock:
            self.records.append(message.record)

    def matching(self, text: str) -> list[Any]:
        with self._lock:
            return [r for r in self.records if text in r["message"]]


@pytest.fixture
def records() -> Iterator[Records]:
    sink = Records()
    logger.enable("gen_agent")
    handler_id = logger.add(sink, level="TRACE")
    try:
        yield sink
    finally:
        logger.remove(handler_id)
        logger.disable("gen_agent")
        gen_agent.set_debug(False)


class FailsInit(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        raise KeyError(f"missing {SECRET}")


class FailsPreRun(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": [mock.text_turn("x")]}, {}

    def pre_run(self, state: Any) -> Any:
        raise RuntimeError(f"pre_run {SECRET}")


class FailsResponse(gen_agent.GenAgent):
    def init_agent(self, opts: dict[str, Any]) -> Any:
        return {"scripts": [mock.text_turn("hello")]}, {}

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        raise ZeroDivisionError(f"handle_response {SECRET}")


def test_a_raising_init_agent_is_chained_and_logged_with_frames(records: Records) -> None:
    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(FailsInit, name="fails-init", backend=MockBackend)
    error = info.value
    assert error.reason == ("init_failed", "error", "KeyError")
    assert isinstance(error.__cause__, KeyError)
    assert str(error).startswith("init_failed: error KeyError")
    assert SECRET not in str(error)
    [record] = records.matching("initialization failed")
    frames = record["extra"]["frames"]
    assert frames[-1][0] == __file__ and frames[-1][2] == "init_agent"
    assert f"{__file__}:" in record["message"] and "in init_agent" in record["message"]
    assert SECRET not in record["message"] and record["exception"] is None


def test_a_raising_handle_response_gives_agent_down_with_cause(records: Records) -> None:
    agent = gen_agent.start_agent(FailsResponse, name="fails-response", backend=MockBackend)
    with pytest.raises(AgentDown) as info:
        gen_agent.ask("fails-response", "hi", timeout=T)
    assert info.value.reason == ("callback_failed", "error", "ZeroDivisionError")
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert str(info.value) == "callback_failed: error ZeroDivisionError"
    assert agent.wait_stopped(T)
    [record] = records.matching("handle_response/3 crashed")
    assert record["extra"]["exception_type"] == "ZeroDivisionError"
    assert record["extra"]["frames"][-1][2] == "handle_response"
    assert SECRET not in record["message"]
    # a call after the death gets the same chained error
    with pytest.raises(AgentDown) as later:
        agent.status(timeout=T)
    assert isinstance(later.value.__cause__, ZeroDivisionError)


def test_a_raising_pre_run_is_the_cause_for_waiting_callers(records: Records) -> None:
    agent = gen_agent.start_agent(FailsPreRun, name="fails-pre-run", backend=MockBackend)
    assert agent.wait_stopped(T)
    assert agent.exit_reason == ("pre_run_crashed", "RuntimeError")
    with pytest.raises(AgentDown) as info:
        agent.status(timeout=T)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_the_debug_switch_adds_messages_and_tracebacks(records: Records) -> None:
    gen_agent.set_debug(True)
    with pytest.raises(AgentStartError):
        gen_agent.start_agent(FailsInit, name="fails-init", backend=MockBackend)
    [record] = records.matching("initialization failed")
    assert SECRET in record["message"]
    assert record["exception"] is not None and record["exception"].type is KeyError


def test_set_debug_refuses_a_non_bool() -> None:
    with pytest.raises(TypeError, match="set_debug"):
        gen_agent.set_debug("yes")  # type: ignore[arg-type]


def test_a_task_crash_is_the_cause_of_the_turn_error() -> None:
    class Plain(gen_agent.GenAgent):
        def init_agent(self, opts: dict[str, Any]) -> Any:
            return {"scripts": [mock.raising(OSError("disk"))]}, {}

        def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
            return NoReply(state)

    gen_agent.start_agent(Plain, name="crashes", backend=MockBackend)
    with pytest.raises(TurnError) as info:
        gen_agent.ask("crashes", "go", timeout=T)
    assert info.value.reason[0] == "task_crashed"
    assert isinstance(info.value.__cause__, OSError)
    assert str(info.value) == "task_crashed: OSError"


def test_an_invalid_reserved_option_chains_its_value_error() -> None:
    with pytest.raises(AgentStartError) as info:
        gen_agent.start_agent(FailsResponse, name="bad-opt", backend=MockBackend, watchdog_ms="x")
    assert info.value.reason == ("init_failed", "error", "ValueError")
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value) == ("init_failed: watchdog_ms must be a positive int (milliseconds) "
                               "or 'infinity', got 'x'")

"""Redaction (contract §3.14, Appendix B.8): reprs of the actor, `AgentRef`, `Status` and
`RuntimeSnapshot`, and every log line (loguru, plus pykka's stdlib logging), never show
prompts, agent state, session contents, notification payloads or exception messages; logs
name exception types and identify the agent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

import gen_agent
from gen_agent import NoReply, Proceed, Prompt, TurnError
from gen_agent._errors import AgentDown, AgentStartError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import HALTED, TURN_STOP, TelemetryRecorder

T = 5.0  # seconds: the bound of every wait in this file
NAME = "redacted"
SECRET = "TOP-SECRET-7f3a"


class Leaky(gen_agent.GenAgent):
    """Puts SECRET everywhere it can: state, prompts, and every exception message.

    Every protected callback raises `ValueError(SECRET)` when its trigger is present;
    handle_response raises only for the prompt "crash" (which stops the agent).
    """

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        if opts.get("fail_init"):
            raise ValueError(f"init {SECRET}")
        return ({"scripts": opts.get("scripts", []), "session_id": f"session-{SECRET}"},
                {"secret": SECRET})

    def pre_run(self, state: Any) -> Any:
        return state

    def pre_turn(self, prompt: str, state: Any) -> Any:
        if "raise-in-pre-turn" in prompt:
            raise ValueError(f"pre_turn {SECRET}")
        if "bad-shape" in prompt:
            return ("not", "a", "decision", SECRET)
        return Proceed(prompt, state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        if response.prompt.startswith("crash"):
            raise ValueError(f"handle_response {SECRET}")
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        raise ValueError(f"handle_error {SECRET}")

    def handle_event(self, event: Any, state: Any) -> Any:
        if event == "halt":
            return gen_agent.Halt(state)
        if event == "malformed":
            return Prompt(42, state)  # a non-str prompt: malformed
        raise ValueError(f"handle_event {SECRET} {event}")

    def handle_info(self, message: Any, state: Any) -> Any:
        raise ValueError(f"handle_info {SECRET}")

    def post_turn(self, outcome: Any, ref: Any, state: Any) -> Any:
        raise ValueError(f"post_turn {SECRET}")

    def post_run(self, state: Any) -> None:
        raise ValueError(f"post_run {SECRET}")

    def terminate_agent(self, reason: Any, state: Any) -> None:
        raise ValueError(f"terminate_agent {SECRET}")


class CaptureSink:
    """Collects every loguru record's text, bound extras and exception, thread-safely."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, message: Any) -> None:
        record = message.record
        with self._lock:
            self.lines.append(str(message))
            self.records.append({"message": record["message"], "extra": dict(record["extra"]),
                                 "exception": record["exception"]})

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines + [repr(r) for r in self.records])


@pytest.fixture
def sink() -> Iterator[CaptureSink]:
    capture = CaptureSink()
    logger.enable("gen_agent")
    handler_id = logger.add(capture, level="TRACE", format="{level} {name}:{function} {message}"
                            " | {extra} | {exception}", backtrace=True, diagnose=True)
    try:
        yield capture
    finally:
        logger.remove(handler_id)
        logger.disable("gen_agent")


class LeakyPreRun(Leaky):
    def pre_run(self, state: Any) -> Any:
        raise ValueError(f"pre_run {SECRET}")


def actor_of(agent: Any) -> Any:
    return agent._handle.actor_ref._actor_weakref()


def test_reprs_of_the_actor_agent_ref_status_and_snapshot_show_no_payloads() -> None:
    gate = mock.gate(mock.text_turn(SECRET))
    agent = gen_agent.start_agent(Leaky, name=NAME, backend=MockBackend, scripts=[gate])
    gen_agent.tell(NAME, f"prompt {SECRET}")
    gate.wait_blocked(T)
    gen_agent.tell(NAME, f"queued {SECRET}")
    gen_agent.notify(NAME, {"payload": SECRET})
    status = gen_agent.status(NAME)
    assert status.agent_state == {"secret": SECRET}  # the value is there, its repr hides it
    shown = [repr(actor_of(agent)), str(actor_of(agent)), repr(agent), str(agent),
             repr(status), str(status), repr(gen_agent.runtime_snapshot(NAME)),
             repr(agent._handle.actor_ref)]
    for text in shown:
        assert SECRET not in text, text
    assert "redacted" in repr(status)


def test_logs_name_types_and_never_payloads_or_messages(
        sink: CaptureSink, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    scripts = [mock.raising(RuntimeError(f"task {SECRET}")), mock.error(f"backend {SECRET}"),
               mock.text_turn(f"text {SECRET}"), mock.text_turn("crash")]
    with TelemetryRecorder([TURN_STOP, HALTED]) as rec:
        agent = gen_agent.start_agent(Leaky, name=NAME, backend=MockBackend, scripts=scripts)
        # a task crash and a dispatch error, each reaching the raising handle_error/post_turn
        for prompt in (f"crash-task {SECRET}", f"dispatch {SECRET}"):
            with pytest.raises(TurnError):
                gen_agent.ask(NAME, prompt, timeout=T)
        for prompt in (f"raise-in-pre-turn {SECRET}", f"bad-shape {SECRET}"):
            with pytest.raises(TurnError):
                gen_agent.ask(NAME, prompt, timeout=T)
        gen_agent.ask(NAME, f"ok {SECRET}", timeout=T)
        gen_agent.notify_ack(NAME, f"event {SECRET}", timeout=T)
        gen_agent.notify_ack(NAME, "malformed", timeout=T)
        gen_agent.send(NAME, f"info {SECRET}")
        gen_agent.notify_ack(NAME, "halt", timeout=T)
        rec.wait_for(HALTED, T)
        gen_agent.resume(NAME)
        # handle_response raising stops the agent: ("callback_failed", "error", "ValueError")
        with pytest.raises(AgentDown) as down:
            gen_agent.ask(NAME, "crash", timeout=T)
    assert agent.wait_stopped(T)
    assert down.value.reason == ("callback_failed", "error", "ValueError")
    with pytest.raises(AgentStartError):
        gen_agent.start_agent(Leaky, name="init-fails", backend=MockBackend, fail_init=True)
    pre_run_agent = gen_agent.start_agent(LeakyPreRun, name="pre-run", backend=MockBackend)
    assert pre_run_agent.wait_stopped(T)
    assert pre_run_agent.exit_reason == ("pre_run_crashed", "ValueError")

    text = sink.text()
    assert SECRET not in text
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    for expected in ("handle_error/3 failed (error: ValueError at ",
                     "post_turn/3 raised (error: ValueError at ",
                     "pre_turn/2 raised (error: ValueError at ",
                     "pre_turn/2 returned unexpected shape",
                     "handle_event/2 failed (error: ValueError at ",
                     "handle_event/2 returned unexpected shape",
                     "handle_info/2 failed (error: ValueError at ",
                     "post_run/1 raised (error: ValueError at ",
                     "handle_response/3 crashed (error: ValueError at ",
                     "terminate_agent/2 failed (error: ValueError at ",
                     "initialization failed (error: ValueError at ",
                     "pre_run/1 crashed (error: ValueError at "):
        assert expected in text, expected
    agent_records = [r for r in sink.records if r["extra"].get("gen_agent") == NAME]
    assert agent_records
    assert {r["extra"]["gen_agent_module"] for r in agent_records} == {"Leaky"}
    # the stop reasons are logged by their head only
    assert "callback_failed:redacted" in text
    assert "pre_run_crashed:redacted" in text
    assert all(r["exception"] is None for r in sink.records)

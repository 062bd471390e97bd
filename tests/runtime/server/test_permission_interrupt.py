"""An interrupt, `interrupt_request`, `stop`, the watchdog and an ask abandoned with
`cancel_on_timeout` win over a pending `handle_tool_permission` decision: the turn's request
is answered `DENY_INTERRUPTED` at once, while the callback still blocks the agent thread (the
TurnMark the caller's message marks, gen_agent/_cancel.py); the callback's late answer
is dropped (logged by type); the caller gets its outcome once the agent thread is free, after
`handle_error` and `post_turn` (contract §2.6, §4.13).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

import gen_agent
from gen_agent import Event, NoReply, TurnError
from gen_agent._errors import AgentDown, CallTimeout
from gen_agent._permission import DENY_INTERRUPTED, Allow, Deny, ToolPermissionRequest
from gen_agent.backend import BackendError

T = 10.0  # seconds: the bound of every wait in this file


class AskingBackend:
    """Each turn asks whether "Bash" may run and reports the decision it got; on a deny that
    interrupts, it waits for its cancellation (as a CLI settles after its interrupt)."""

    @classmethod
    def start_session(cls, opts: dict[str, Any]) -> dict[str, Any]:
        return {"decisions": opts["decisions"], "ran": opts["ran"]}

    @classmethod
    def prompt(cls, session: dict[str, Any], prompt: str,
               context: Any) -> tuple[Iterator[Event], dict[str, Any]]:
        def events() -> Iterator[Event]:
            request = ToolPermissionRequest(backend="test", tool_name="Bash",
                                            input={"command": "rm -rf build"})
            decision = context.request_permission(request, 30_000)
            session["decisions"].put(decision)
            if type(decision) is Allow:
                session["ran"].append(prompt)  # the tool runs only when allowed
                yield Event.new("result", {"text": "ran"})
                return
            context.wait_cancelled(T)
            yield Event.new("error", {"reason": BackendError.new("test", "cancelled")})

        return events(), session

    @classmethod
    def terminate_session(cls, session: Any) -> None:
        return None


class Deciding(gen_agent.GenAgent):
    """Decides permissions slowly: `handle_tool_permission` sets `entered` and waits for the
    `gate` before it allows. Records the callbacks that follow a turn in `log`."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        self.gate: threading.Event = opts["gate"]
        self.entered: threading.Event = opts["entered"]
        self.log: list[Any] = opts["log"]
        return {"decisions": opts["decisions"], "ran": opts["ran"]}, None

    def handle_tool_permission(self, request: Any, state: Any) -> Any:
        self.entered.set()
        self.gate.wait(T)  # a slow decision, blocking the agent thread
        return Allow()

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        self.log.append(("handle_error", reason))
        return NoReply(state)

    def post_turn(self, outcome: tuple[str, Any], ref: Any, state: Any) -> Any:
        self.log.append(("post_turn", outcome[0]))
        return state


class World:
    def __init__(self, name: str, **opts: Any) -> None:
        self.name = name
        self.gate, self.entered = threading.Event(), threading.Event()
        self.decisions: queue.Queue[Any] = queue.Queue()
        self.log: list[Any] = []
        self.ran: list[str] = []
        self.outcomes: queue.Queue[Any] = queue.Queue()
        gen_agent.start_agent(Deciding, name=name, backend=AskingBackend, gate=self.gate,
                              entered=self.entered, log=self.log, decisions=self.decisions,
                              ran=self.ran, **opts)

    def ask_in_background(self, prompt: str, **kwargs: Any) -> threading.Thread:
        def run() -> None:
            try:
                outcome: Any = gen_agent.ask(self.name, prompt, **{"timeout": T, **kwargs})
            except (TurnError, AgentDown, CallTimeout) as exc:
                outcome = exc
            self.log.append(("caller", type(outcome).__name__))
            self.outcomes.put(outcome)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def decided_at_once(self) -> None:
        """The turn got its decision while the callback still blocks the agent thread."""
        assert self.entered.wait(T)
        assert self.decisions.get(timeout=T) == DENY_INTERRUPTED
        assert not self.gate.is_set()
        assert self.outcomes.empty()  # the agent thread is still in the callback


@pytest.fixture
def debug_logs() -> Iterator[list[str]]:
    lines: list[str] = []
    logger.enable("gen_agent")
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="DEBUG")
    try:
        yield lines
    finally:
        logger.remove(sink)
        logger.disable("gen_agent")


def test_an_interrupt_answers_the_pending_decision_at_once(debug_logs: list[str]) -> None:
    world = World("perm-int")
    caller = world.ask_in_background("clean up")
    assert world.entered.wait(T)

    gen_agent.interrupt("perm-int")  # returns at once: nothing waits for the agent thread

    world.decided_at_once()
    world.gate.set()  # the callback answers Allow, too late
    outcome = world.outcomes.get(timeout=T)
    caller.join(T)
    assert isinstance(outcome, TurnError) and outcome.reason == "interrupted"
    assert world.log == [("handle_error", "interrupted"), ("post_turn", "error"),
                         ("caller", "TurnError")]
    assert world.ran == []  # the tool never ran
    assert "gen_agent dropped a late handle_tool_permission/2 answer (Allow)" in debug_logs
    assert "rm -rf" not in " ".join(debug_logs)  # the input is never logged
    # The agent answers the next ask (the gate is open: allowed at once).
    assert gen_agent.ask("perm-int", "again", timeout=T).text == "ran"
    assert world.ran == ["again"]
    gen_agent.stop("perm-int")


def test_interrupt_request_of_the_running_turn_answers_at_once() -> None:
    world = World("perm-ireq")
    ref = gen_agent.tell("perm-ireq", "clean up")
    assert world.entered.wait(T)
    answer: queue.Queue[Any] = queue.Queue()
    requester = threading.Thread(
        target=lambda: answer.put(gen_agent.interrupt_request("perm-ireq", ref, timeout=T)))
    requester.start()

    assert world.decisions.get(timeout=T) == DENY_INTERRUPTED
    assert answer.empty() and not world.gate.is_set()
    world.gate.set()
    requester.join(T)
    assert answer.get(timeout=T) == "accepted"
    assert gen_agent.poll("perm-ireq", ref, timeout=T).reason == "interrupted"
    assert world.ran == []
    gen_agent.stop("perm-ireq")


def test_an_interrupt_request_of_another_ref_leaves_the_decision_to_the_agent() -> None:
    world = World("perm-other")
    caller = world.ask_in_background("clean up")
    assert world.entered.wait(T)
    stale = gen_agent.RequestRef.new()
    requester = threading.Thread(
        target=lambda: gen_agent.interrupt_request("perm-other", stale, timeout=T))
    requester.start()
    assert world.decisions.empty()  # nothing marked: the callback still decides
    world.gate.set()
    assert world.decisions.get(timeout=T) == Allow()
    assert world.outcomes.get(timeout=T).text == "ran"
    requester.join(T)
    caller.join(T)
    gen_agent.stop("perm-other")


def test_the_watchdog_answers_the_pending_decision_at_once() -> None:
    world = World("perm-dog", watchdog_ms=200)
    caller = world.ask_in_background("clean up")
    world.decided_at_once()
    world.gate.set()
    outcome = world.outcomes.get(timeout=T)
    caller.join(T)
    assert isinstance(outcome, TurnError) and outcome.reason == "timeout"
    assert world.log[-1] == ("caller", "TurnError")
    assert ("handle_error", "timeout") in world.log
    assert world.ran == []
    gen_agent.stop("perm-dog")


def test_an_ask_abandoned_with_cancel_on_timeout_answers_the_decision_at_once() -> None:
    world = World("perm-timeout")
    caller = world.ask_in_background("clean up", timeout=0.2, cancel_on_timeout=True)
    assert world.entered.wait(T)
    assert isinstance(world.outcomes.get(timeout=T), CallTimeout)  # the caller's own
    assert world.decisions.get(timeout=T) == DENY_INTERRUPTED
    assert not world.gate.is_set()
    world.gate.set()
    caller.join(T)
    assert world.ran == []
    assert gen_agent.ask("perm-timeout", "again", timeout=T).text == "ran"
    gen_agent.stop("perm-timeout")


def test_stop_answers_the_pending_decision_at_once() -> None:
    world = World("perm-stop", shutdown_ms=30_000)
    caller = world.ask_in_background("clean up")
    assert world.entered.wait(T)
    stopper = threading.Thread(target=lambda: gen_agent.stop("perm-stop"))
    stopper.start()  # stop waits for the agent to end: it cannot while the callback blocks

    world.decided_at_once()
    world.gate.set()
    stopper.join(T)
    caller.join(T)
    outcome = world.outcomes.get(timeout=T)
    assert isinstance(outcome, (TurnError, AgentDown))  # exactly one answer, and not "ran"
    assert world.outcomes.empty()
    assert world.ran == []
    assert gen_agent.whereis("perm-stop") is None


def test_a_decision_given_before_any_interrupt_stands() -> None:
    world = World("perm-ok")
    world.gate.set()
    assert gen_agent.ask("perm-ok", "clean up", timeout=T).text == "ran"
    gen_agent.interrupt("perm-ok")  # idle: nothing to mark
    assert world.decisions.get(timeout=T) == Allow()
    assert gen_agent.ask("perm-ok", "again", timeout=T).text == "ran"
    assert world.ran == ["clean up", "again"]
    gen_agent.stop("perm-ok")


def test_a_deny_of_the_callback_itself_is_unchanged() -> None:
    class Denying(Deciding):
        def handle_tool_permission(self, request: Any, state: Any) -> Any:
            return Deny("no")

    decisions: queue.Queue[Any] = queue.Queue()
    gen_agent.start_agent(Denying, name="perm-deny", backend=AskingBackend,
                          gate=threading.Event(), entered=threading.Event(), log=[],
                          decisions=decisions, ran=[], watchdog_ms=300)
    with pytest.raises(TurnError) as info:
        gen_agent.ask("perm-deny", "x", timeout=T)
    assert decisions.get(timeout=T) == Deny("no")
    assert info.value.reason == "timeout"  # the backend waited; the watchdog ended it
    gen_agent.stop("perm-deny")

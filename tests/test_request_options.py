"""The per-request options record (issue #15): `RequestOptions` travels with a request through
the queue, `pre_turn`, caller-owned retries and self-chaining, and backends read it from the
`TurnContext`; `current_request()` shows callbacks the request they handle; `fresh_session`
gives a request its own conversation; `ask(cancel_on_timeout=True)`; client-boundary
TypeErrors."""

from __future__ import annotations

import queue
from typing import Any

import _agents as agents
import pytest

import gen_agent
from gen_agent import NoReply, Proceed, Prompt, RequestOptions
from gen_agent._errors import CallTimeout, TurnError
from gen_agent.backends import mock
from gen_agent.backends.mock import MockBackend
from gen_agent.telemetry import TURN_CANCELLED, TURN_STOP, TelemetryRecorder

T = 5.0  # seconds: the bound of every wait in this file
FRESH = RequestOptions(fresh_session=True)


class Recording(MockBackend):
    """The mock, recording `(prompt, context.options, context.attempt)` per dispatch."""

    seen: list[tuple[str, RequestOptions, int]] = []

    @classmethod
    def prompt(cls, session: Any, prompt: str, context: Any = None) -> Any:
        cls.seen.append((prompt, context.options, context.attempt))
        return super().prompt(session, prompt, context)


class Agent(gen_agent.GenAgent):
    """Retries a failed attempt once with the prompt read from `current_request()`; chains
    one follow-up for responses "chain"; records what `current_request()` showed."""

    def init_agent(self, opts: dict[str, Any]) -> Any:
        self.infos: list[Any] = opts["infos"]
        return {"scripts": opts["scripts"]}, None

    def pre_turn(self, prompt: str, state: Any) -> Any:
        self.infos.append(("pre_turn", gen_agent.current_request()))
        return Proceed(prompt, state)

    def handle_response(self, ref: Any, response: Any, state: Any) -> Any:
        self.infos.append(("handle_response", gen_agent.current_request()))
        if response.text == "chain":
            return Prompt("follow-up", state)
        return NoReply(state)

    def handle_error(self, ref: Any, reason: Any, state: Any) -> Any:
        info = gen_agent.current_request()
        self.infos.append(("handle_error", info, reason))
        if info is not None and info.attempt == 1 and reason != "interrupted":
            return Prompt(f"again: {info.prompt}", state)
        return NoReply(state)


@pytest.fixture(autouse=True)
def _reset_recording() -> None:
    Recording.seen = []


def start(scripts: list[Any], infos: list[Any] | None = None) -> Any:
    return agents.start(Agent, "a", scripts, backend=Recording,
                        infos=infos if infos is not None else [])


def test_options_reach_the_backend_through_retries_and_follow_ups() -> None:
    infos: list[Any] = []
    start([mock.error("flaky"), mock.text_turn("chain"), mock.text_turn("done")], infos)
    with TelemetryRecorder([TURN_STOP]) as rec:
        response = gen_agent.ask("a", "task", timeout=T, options=FRESH)
        assert response.text == "chain"
        rec.wait_for(lambda r: r.metadata["origin"] == "self_chain", T)
    assert Recording.seen == [("task", FRESH, 1), ("again: task", FRESH, 2),
                              ("follow-up", FRESH, 1)]
    pre_turns = [entry[1] for entry in infos if entry[0] == "pre_turn"]
    assert [(i.prompt, i.attempt, i.origin, i.options) for i in pre_turns] == [
        ("task", 1, "ask", FRESH), ("again: task", 2, "ask", FRESH),
        ("follow-up", 1, "self_chain", FRESH)]
    [(_, error_info, reason)] = [entry for entry in infos if entry[0] == "handle_error"]
    assert reason == "flaky"
    assert error_info.prompt == "task" and error_info.ref == pre_turns[0].ref
    assert gen_agent.current_request() is None  # not in the caller's thread


def test_requests_without_options_see_the_defaults() -> None:
    start([mock.text_turn("hi")])
    gen_agent.ask("a", "x", timeout=T)
    assert Recording.seen == [("x", RequestOptions(), 1)]


def test_fresh_session_resets_only_a_used_session() -> None:
    start([mock.text_turn("1"), mock.text_turn("2"), mock.text_turn("3"), mock.text_turn("4")])
    session = gen_agent.backend_session("a", timeout=T)
    gen_agent.ask("a", "first", timeout=T, options=FRESH)  # nothing ran yet: no reset
    assert session.resets == 0
    gen_agent.ask("a", "second", timeout=T, options=FRESH)
    assert session.resets == 1
    gen_agent.ask("a", "shared", timeout=T)  # no option: the conversation goes on
    assert session.resets == 1
    inbox: queue.Queue[Any] = queue.Queue()
    gen_agent.tell_with_completion("a", "fourth", inbox, options=FRESH)
    assert inbox.get(timeout=T).ok
    assert session.resets == 2


def test_a_failed_fresh_session_fails_the_request_not_the_agent() -> None:
    class NoReset(Agent):
        def init_agent(self, opts: dict[str, Any]) -> Any:
            backend_opts, state = super().init_agent(opts)
            return {**backend_opts, "reset_error": "nope"}, state

    gen_agent.start_agent(NoReset, name="a", backend=MockBackend, infos=[],
                          scripts=[mock.text_turn("1"), mock.text_turn("2")])
    gen_agent.ask("a", "first", timeout=T)
    with pytest.raises(TurnError) as info:
        gen_agent.ask("a", "second", timeout=T, options=FRESH)
    assert info.value.reason == ("fresh_session_failed", "nope")
    assert gen_agent.ask("a", "third", timeout=T).text == "2"


def test_cancel_on_timeout_removes_a_queued_ask() -> None:
    gate = mock.gate(mock.text_turn("slow"))
    start([gate, mock.text_turn("next")])
    inbox: queue.Queue[Any] = queue.Queue()
    gen_agent.tell_with_completion("a", "blocker", inbox)
    gate.wait_blocked(T)
    with TelemetryRecorder([TURN_CANCELLED]) as rec:
        with pytest.raises(CallTimeout):
            gen_agent.ask("a", "queued", timeout=0.05, cancel_on_timeout=True)
        rec.wait_for(TURN_CANCELLED, T)
    assert gen_agent.runtime_snapshot("a", timeout=T).pending_prompts == 0
    gate.release()
    assert inbox.get(timeout=T).ok
    assert [p for p, _, _ in Recording.seen] == ["blocker"]


def test_cancel_on_timeout_interrupts_a_running_ask() -> None:
    infos: list[Any] = []
    gate = mock.gate(mock.text_turn("slow"))
    start([gate, mock.text_turn("next")], infos)
    with pytest.raises(CallTimeout):
        gen_agent.ask("a", "long", timeout=0.05, cancel_on_timeout=True)
    # the interrupt reached handle_error; the agent is free for the next request
    assert gen_agent.ask("a", "after", timeout=T).text == "next"
    assert [entry[2] for entry in infos if entry[0] == "handle_error"] == ["interrupted"]
    assert [p for p, _, _ in Recording.seen] == ["long", "after"]


def test_without_cancel_on_timeout_a_timed_out_ask_still_runs() -> None:
    gate = mock.gate(mock.text_turn("slow"))
    start([gate])
    with pytest.raises(CallTimeout):
        gen_agent.ask("a", "long", timeout=0.05)
    gate.wait_blocked(T)
    gate.release()
    gen_agent.status("a", timeout=T)
    assert [p for p, _, _ in Recording.seen] == ["long"]


@pytest.mark.parametrize("call, message", [
    (lambda: gen_agent.ask("a", "x", timeout="5"), "ask: timeout must be seconds"),
    (lambda: gen_agent.tell("a", "x", timeout=True), "tell: timeout must be seconds"),
    (lambda: gen_agent.ask("a", "x", options={"fresh_session": True}),
     "ask: options must be a gen_agent.RequestOptions"),
    (lambda: gen_agent.tell_with_completion("a", "x", 42),
     "tell_with_completion: recipient must be a pykka ActorRef"),
    (lambda: gen_agent.tell_with_completion("a", "x", queue.Queue(), stream_to="nowhere"),
     "tell_with_completion: stream_to must be"),
    (lambda: RequestOptions(fresh_session="yes"), "fresh_session must be a bool"),
])
def test_client_boundary_type_errors(call: Any, message: str) -> None:
    start([])
    with pytest.raises(TypeError, match=message):
        call()
    assert gen_agent.runtime_snapshot("a", timeout=T).pending_prompts == 0
